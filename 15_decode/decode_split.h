/*
 * decode_split.h: how flash-decoding cuts one step into work, as plain integer functions that the
 * kernel (decode_kernel.cuh), its CPU model (decode_cpu.c) and the tests include alike, so that the
 * model splits the keys exactly where the kernel does:
 *
 *   decode_chunk_keys   the keys [first, end) of chunk c of S over a cache of len keys (one block's)
 *   decode_key_warps    WK: how many warps of a block share one 16-row slice of query rows, each taking
 *                       Bc / WK keys of every key tile (the rest of the 4 warps take other slices)
 *   decode_block_rows   the query rows one block holds: 16 per slice, 4 / WK slices
 *
 * The number of chunks S is choose_chunks() (decode_cpu.c), from the shape and the SM count.
 */
#ifndef ATTN_DECODE_SPLIT_H
#define ATTN_DECODE_SPLIT_H

#include <stdint.h>

#ifdef __CUDACC__
#define DECODE_HD static __host__ __device__ __forceinline__ constexpr
#else
#define DECODE_HD static inline
#endif

#define DECODE_BC 64   /* keys per key tile inside a chunk, as stages 04-06 */
#define DECODE_WARPS 4 /* warps of a block of the split kernel: 128 threads */

/* Chunk c of S over len keys: keys [*first, *end), as even as ceil(len / S) keys a chunk makes them;
 * the chunks past the last key are empty (*first == *end). */
DECODE_HD void decode_chunk_keys(int64_t len, int64_t S, int64_t c, int64_t *first, int64_t *end) {
    const int64_t per = (len + S - 1) / S; /* keys a chunk: the last chunks may get fewer, or none */
    const int64_t f = c * per < len ? c * per : len;
    *first = f;
    *end = f + per < len ? f + per : len;
}

/*
 * WK, the warps that share a 16-row slice of the block's R = (H / H_kv) N_q query rows (mma.sync takes
 * rows 16 at a time, so R is padded to 16). Decoding has few rows: R = 4 at one query and 4 heads a
 * group. With the 4 warps on one slice (WK = 4), each takes 16 of every 64 keys and none computes
 * padding rows three times over; each warp keeps its own m, l and O, and the block merges the WK
 * partials by their LSEs at the end, as the combine merges the chunks. R <= 16: WK = 4 (16 rows a
 * block); R <= 32: 2 (32 rows, 32 keys a warp); more: 1 (64 rows a block, stage 06's split: each warp
 * its slice, all 64 keys), and a grid row of blocks per 64 rows.
 */
DECODE_HD int decode_key_warps(int64_t R) { return R <= 16 ? 4 : R <= 32 ? 2 : 1; }
DECODE_HD int decode_block_rows(int wk) { return 16 * (DECODE_WARPS / wk); }

#endif
