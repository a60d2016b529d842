/*
 * 09_overlap/work_units.h: which head and row block each block of stage 09's persistent grid works on.
 * Plain C, so that the kernel (overlap.cu) and a CPU test (tests/test_work_units.c) run the same lines:
 * CI has no GPU, and a slip here (a row block taken twice or never) would pass every CPU test else.
 *
 * Work items: a row block of one head. Every grid is persistent (one block per SM, see launch()): a
 * block takes units u = blockIdx.x, + gridDim.x, ..., a unit being one item (non-causal) or two
 * (causal), and while the consumers finish one item (last P V, O and LSE stores) the producer already
 * loads the next item's Q and first K/V tiles. Units are head-major, so the blocks at work at any
 * moment share a few heads' K and V in L2.
 * A causal unit is a pair of row blocks of one head, the longest first (i from the end: it sees the
 * most key tiles) and then the shortest (i from the start): the two together visit about Tr + 1 row
 * blocks' worth of keys whatever i is, so striding over pairs hands every SM the same work. With an
 * odd Tr the middle row block pairs with itself: its second half is empty (the loops skip it).
 */
#ifndef OVERLAP_WORK_UNITS_H
#define OVERLAP_WORK_UNITS_H

#include <stdint.h>

#ifdef __CUDACC__
#define WORK_UNITS_FN static __host__ __device__ __forceinline__
#else
#define WORK_UNITS_FN static inline
#endif

/* Units of a problem of `heads` heads (B x H) with Tr = tr row blocks each. */
WORK_UNITS_FN int64_t unit_count(int causal, int pair, int tr, int64_t heads) {
    return pair ? (tr * heads + 1) / 2 : (causal ? (tr + 1) / 2 : tr) * heads;
}

/* What a block does for half `half` of unit u: row block `row_block` of head `bh`; row_block < 0 for
 * the empty second half of an odd Tr's middle causal pair (the loops stop there). */
typedef struct {
    int64_t bh;
    int row_block;
    int shared_kv; /* pair: both blocks of the cluster are on this head, so they share its K and V */
} work_item;

/*
 * Non-causal: unit i of a head is row block i. Causal: its long and short ends, tr-1-i then i.
 * Pair (rank: the block's rank in its cluster): the row blocks of all heads in one head-major list,
 * taken two at a time, one for each block of the cluster. With an odd Tr, one pair in Tr straddles two
 * heads: each of its blocks loads its own head's whole tiles (load_kv_tile), at a cost of 1/Tr of the
 * L2 savings, where keeping whole heads in a pair left odd-Tr problems without pairs. With an odd count
 * of row blocks in all, the last pair's second block takes row block Tr of the last head: rows past N
 * (zeros from the copy engine, never stored), so that its peer still gets the half tiles it loads;
 * one row block's work in B x H x Tr.
 */
WORK_UNITS_FN work_item unit_item(int causal, int pair, unsigned rank, int64_t u, int half, int tr,
                                  int64_t heads) {
    work_item w;
    if (pair) {
        const int64_t f = 2 * u + rank, last_head = heads - 1;
        const int64_t head_0 = 2 * u / tr, head_1 = (2 * u + 1) / tr;
        w.bh = f / tr < last_head ? f / tr : last_head;
        w.row_block = (int)(f - w.bh * tr);
        w.shared_kv = head_0 == (head_1 < last_head ? head_1 : last_head);
        return w;
    }
    const int64_t per_head = causal ? (tr + 1) / 2 : tr;
    const int i = (int)(u % per_head);
    w.bh = u / per_head;
    w.row_block = !causal || half ? i : tr - 1 - i;
    if (half && i == tr - 1 - i) w.row_block = -1;
    w.shared_kv = 0;
    return w;
}

/* A pair's two blocks take the same units: the cluster's index, then every (grid / 2)-th. */
WORK_UNITS_FN int64_t first_unit(int pair, unsigned block) { return pair ? block >> 1 : block; }
WORK_UNITS_FN int64_t unit_stride(int pair, unsigned grid) { return pair ? grid >> 1 : grid; }

#endif
