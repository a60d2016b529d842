/*
 * grid_order.h: which head and row block each block of stages 07 and 08 computes, in plain C, so that
 * the kernels (hop_block_head, hopper_attn.cuh) and a CPU test (tests/test_grid_order.c) run the same
 * lines: a row block computed twice or never would otherwise show only on a Hopper GPU.
 *
 * The grid is (Tr, min(B*H, 65535), ceil(B*H / 65535)) and blocks start in launch order, x fastest.
 * Without a mask every row block costs the same: block (x, y, z) is row block x of head 65535 z + y,
 * and a head's row blocks run together while its K and V are in L2.
 * Under a causal mask row block i visits i + 1 key tiles, and the order decides how long the grid's
 * last wave is. Stages 03-06 run each head's row blocks longest first, head after head; then the last
 * heads' longest blocks start in the last wave, while the other SMs run out of work. Replayed on 132
 * SMs (a block costs its key tiles + 1): B = 4, H = 32, N = 4096 ends at 0.968 of even, B = 1, H = 16,
 * N = 4096 (512 blocks of 1-32 tiles) at 0.789. Here the last heads, about GRID_TAIL_BLOCKS row blocks
 * of them, go longest first across them (row block Tr - 1 of every tail head, then Tr - 2, ...), so
 * the grid ends on short blocks: 0.995 and 0.970 (tests/test_grid_order.c replays them). The heads
 * before the tail keep the head-after-head order, in which the blocks at work share a few heads' K
 * and V in L2: ordering every head's blocks longest first (in groups of 16 MB of K and V) measured
 * 0.6-2% slower at B = 4, H = 32, N = 16384, where the tail costs 0.2%. Measured on the H200 (08
 * README): +11-32% at B = 1, H = 16, N = 4096 and B = 2, H = 8, N = 4097, -0.5 to +1% at B = 4, H = 32,
 * N = 8192-16384. Stage 09's persistent grid cuts its tail the same way (work_units.h).
 * Pairs (stage 08 at D = 128: clusters of two along x) go as units of two adjacent row blocks, 2t and
 * 2t + 1 of one head; the cluster's rank 0 takes 2t + 1.
 */
#ifndef ATTN_GRID_ORDER_H
#define ATTN_GRID_ORDER_H

#include <stdint.h>

#ifdef __CUDACC__
#define GRID_ORDER_FN static __host__ __device__ __forceinline__
#else
#define GRID_ORDER_FN static inline
#endif

/* The tail: three row blocks for each of the H200's 132 SMs. A constant, as no sm_90 GPU has more SMs (H100
 * PCIe 114, H20 78): there the same tail is more waves, which the replay finds at least as even. Stage
 * 09's persistent grid takes TAIL_ROUNDS rounds of its own grid instead (work_units.h). */
#define GRID_MAX_SMS 132 /* the most SMs of any sm_90 GPU (H100 and H200 SXM) */
#define TAIL_ROUNDS 3
#define GRID_TAIL_BLOCKS (TAIL_ROUNDS * GRID_MAX_SMS)

/* What block (x, y, z) of a grid (gx, gy, *) computes: row block `row_block` of head `bh`; bh = -1
 * for a block past the B*H heads (the last grid.z slice may reach past them). */
typedef struct {
    int64_t bh;
    int row_block;
} grid_item;

/* The heads of a causal tail of about `tail_blocks` row blocks, among `heads` heads of `row_blocks`
 * each: enough heads to hold them, at least 1, at most `heads`. 32-bit division (a few hundred blocks,
 * Tr <= 2^24): a 64-bit one is a called routine on the GPU. */
GRID_ORDER_FN int64_t grid_tail_heads(unsigned tail_blocks, unsigned row_blocks, int64_t heads) {
    const int64_t tail = (tail_blocks + row_blocks - 1) / row_blocks;
    return tail < heads ? tail : heads;
}

/* causal: 0 or 1; unit: 1, or 2 for pairs (gx even); bh: B*H; (x, y, z) the block, gx, gy the grid. */
GRID_ORDER_FN grid_item grid_order(int causal, int unit, int64_t bh, unsigned x, unsigned y, unsigned z,
                                   unsigned gx, unsigned gy) {
    const int64_t slice0 = (int64_t)z * gy; /* the first head of this grid.z slice */
    grid_item it = {-1, (int)x};
    if (!causal) {
        if (slice0 + y < bh) it.bh = slice0 + y;
        return it;
    }
    const int64_t heads = bh - slice0 < gy ? bh - slice0 : gy; /* this slice's heads, >= 1 */
    const int64_t per_head = gx / (unsigned)unit;              /* units (row blocks or pairs) a head */
    const int64_t q = ((int64_t)y * gx + x) / unit;            /* the unit's place in launch order */
    if (q >= heads * per_head) return it;
    const int64_t tail = grid_tail_heads(GRID_TAIL_BLOCKS, gx, heads), before = (heads - tail) * per_head;
    int64_t head, t;
    if (q < before) { /* head after head, each head's units longest first */
        head = q / per_head;
        t = per_head - 1 - q % per_head;
    } else { /* the tail: unit per_head - 1 of every tail head, then per_head - 2, ... */
        head = heads - tail + (q - before) % tail;
        t = per_head - 1 - (q - before) / tail;
    }
    it.bh = slice0 + head;
    it.row_block = (int)t * unit + (unit - 1 - (int)(x % (unsigned)unit));
    return it;
}

#endif
