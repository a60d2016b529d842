/*
 * 09_overlap/work_units.h: which head and row block each block of stage 09's persistent grid works on.
 * Plain C, so that the kernel (overlap.cu) and a CPU test (tests/test_work_units.c) run the same lines:
 * CI has no GPU, and a slip here (a row block taken twice or never) would pass every CPU test else.
 *
 * Work items: a row block of one head. Every grid is persistent (one block per SM, see launch()): in
 * round t = 0, 1, ... a block takes unit block_unit(t), a unit being one item or, causal, up to two;
 * while the consumers finish one item (last P V, O and LSE stores) the producer already loads the next
 * item's Q and first K/V tiles. Units are head-major, so the blocks at work at any moment share a few
 * heads' K and V in L2.
 * Causal items differ in length (row block i sees i + 1 key blocks), so causal problems are cut in two:
 *   - the first heads in units of two row blocks, the longest (i from the end) and the shortest (i from
 *     the start): every such unit carries Tr + 1 row blocks' worth of keys, so the rounds are even;
 *   - the last tail_heads() heads in single row blocks, longest first, so that the last rounds end
 *     together: with equal units only, 272 units on 132 SMs (B = 2, H = 8, N = 4097, D = 128) take
 *     three rounds of which the last keeps 8 SMs busy, 2/3 of the time the work needs.
 * Causal rounds go back and forth (block b takes unit b in round 0, 2G - 1 - b in round 1, ...): the
 * block that got the longest single item of one round gets the shortest of the next.
 */
#ifndef OVERLAP_WORK_UNITS_H
#define OVERLAP_WORK_UNITS_H

#include <stdint.h>

#include "grid_order.h" /* grid_tail_heads, TAIL_ROUNDS: the tail's size, as stages 07 and 08 count it */

#ifdef __CUDACC__
#define WORK_UNITS_FN static __host__ __device__ __forceinline__
#else
#define WORK_UNITS_FN static inline
#endif

/* Causal: the last heads, cut into single row blocks (all of them if there are fewer): enough for about
 * TAIL_ROUNDS = 3 items per block of a grid of `grid` blocks, so that the long ones and the short ones
 * even out. Three rounds of row blocks on 132 SMs are 20-52 MB of K and V (D = 64 to 256; the H200 has
 * 50 MB of L2). */
WORK_UNITS_FN int64_t tail_heads(int tr, int64_t heads, unsigned grid) {
    return grid_tail_heads(TAIL_ROUNDS * grid, (unsigned)tr, heads);
}

/* Units of a problem of `heads` heads (B x H) with Tr = tr row blocks each, for a grid of `grid` blocks.
 * The launch asks with grid = the SM count and launches min(units, SMs) blocks; with fewer units than
 * SMs every head is in the tail (else the tail alone would hold 3 x SMs row blocks), so the kernel,
 * which asks with its gridDim.x, counts the same units. */
WORK_UNITS_FN int64_t unit_count(int causal, int pair, int tr, int64_t heads, unsigned grid) {
    if (pair) return (tr * heads + 1) / 2;
    if (!causal) return tr * heads;
    const int64_t tail = tail_heads(tr, heads, grid);
    return (heads - tail) * (tr / 2 + tr % 2) + tail * tr;
}

/* The unit a block takes in round t. A pair's two blocks take the same: the cluster's index. */
WORK_UNITS_FN int64_t block_unit(int causal, int pair, unsigned block, unsigned grid, int64_t t) {
    if (pair) return t * (grid >> 1) + (block >> 1);
    return t * grid + (causal && (t & 1) ? grid - 1 - block : block);
}

/* What a block does for half `half` of unit u: row block `row_block` of head `bh`; row_block < 0 for
 * the empty second half of a single row block: the loops stop there. */
typedef struct {
    int64_t bh;
    int row_block;
    int shared_kv; /* pair: both blocks of the cluster are on this head, so they share its K and V */
} work_item;

/* Pair (rank: the block's rank in its cluster): the row blocks of all heads in one head-major list,
 * taken two at a time, one for each block of the cluster. With an odd Tr, one pair in Tr straddles two
 * heads: each of its blocks loads its own head's whole tiles (load_kv_tile), at a cost of 1/Tr of the
 * L2 savings, where keeping whole heads in a pair left odd-Tr problems without pairs. With an odd count
 * of row blocks in all, the last pair's second block takes row block Tr of the last head: rows past N
 * (zeros from the copy engine, never stored), so that its peer still gets the half tiles it loads;
 * one row block's work in B x H x Tr. */
WORK_UNITS_FN work_item pair_item(unsigned rank, int64_t u, int tr, int64_t heads) {
    work_item w;
    const int64_t f = 2 * u + rank, last_head = heads - 1;
    const int64_t head_0 = 2 * u / tr, head_1 = (2 * u + 1) / tr;
    w.bh = f / tr < last_head ? f / tr : last_head;
    w.row_block = (int)(f - w.bh * tr);
    w.shared_kv = head_0 == (head_1 < last_head ? head_1 : last_head);
    return w;
}

/*
 * Causal. Heads before the tail: Tr / 2 units each, unit i being row blocks tr-1-i and i (Tr + 1 row
 * blocks of keys, whatever i). With an odd Tr their middle row block joins the tail, so that every
 * such unit costs the same (kept among them, the half-size middle units fell on the same blocks round
 * after round: at Tr = 11, 128 heads and 132 SMs, some blocks had 51 row blocks of keys, others 70).
 * The tail: single row blocks, longest first, row block r of every tail head for r = tr-1 down to 0;
 * at the middle row block of an odd Tr, every head's (the paired heads' first).
 */
WORK_UNITS_FN work_item causal_item(int64_t u, int half, int tr, int64_t heads, unsigned grid) {
    const int64_t tail = tail_heads(tr, heads, grid), paired_heads = heads - tail;
    const int per_head = tr / 2, mid = tr / 2;
    work_item w = {0, -1, 0};
    if (u < paired_heads * per_head) {
        const int i = (int)(u % per_head);
        w.bh = u / per_head;
        w.row_block = half ? i : tr - 1 - i;
        return w;
    }
    if (half) return w;
    int64_t k = u - paired_heads * per_head;
    const int64_t above = (int64_t)(tr - 1 - mid) * tail; /* the tail's row blocks above the middle */
    if (tr % 2 == 1 && k >= above) {
        if (k - above < heads) { /* the middle row blocks */
            w.bh = k - above;
            w.row_block = mid;
            return w;
        }
        k -= heads; /* below the middle: as if the row block r = mid held only the tail's */
        k += tail;
    }
    w.bh = paired_heads + k % tail;
    w.row_block = tr - 1 - (int)(k / tail);
    return w;
}

/* Non-causal: unit u is row block u % tr of head u / tr. */
WORK_UNITS_FN work_item unit_item(int causal, int pair, unsigned rank, int64_t u, int half, int tr,
                                  int64_t heads, unsigned grid) {
    if (pair) return pair_item(rank, u, tr, heads);
    if (causal) return causal_item(u, half, tr, heads, grid);
    work_item w = {u / tr, (int)(u % tr), 0};
    return w;
}

/* Whether the item a block takes in round t (unit u, half `half`) is its last: its next round has no
 * unit, and this is the unit's last non-empty half. The consumers' last GEMM window skips its hand-back
 * there (overlap.cu), so a slip would leave a named barrier waiting for an arrival that never comes. */
WORK_UNITS_FN int last_item(int causal, int pair, unsigned block, unsigned grid, int64_t t, int64_t u,
                            int half, int tr, int64_t heads, int64_t units) {
    if (block_unit(causal, pair, block, grid, t + 1) < units) return 0;
    return half == causal || unit_item(causal, pair, 0, u, 1, tr, heads, grid).row_block < 0;
}

#endif
