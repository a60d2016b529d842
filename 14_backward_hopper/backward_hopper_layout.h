/*
 * backward_hopper_layout.h: where stage 14 puts each element, as plain integer functions. The kernel
 * (backward_hopper.cu) and a CPU test (tests/test_backward_hopper_layout.c) include this same file, so
 * that the test checks the very maps the kernel stores through: a slip here would otherwise show only
 * as wrong gradients on a Hopper GPU.
 *
 * 1. The wgmma accumulator of a 64 x N tile (kit/wgmma_ops.cuh): thread tid (0..127) of its warpgroup,
 *    warp w = tid / 32 and lane 4g + t, holds in register idx (0 .. N/2 - 1)
 *        row 16 w + g + 8 h,  column 8 c + 2 t + e,     idx = 4 c + 2 h + e.
 *    In stage 14 the rows are keys (S^T, dP^T, dV, dK) or query rows (dQ).
 *
 * 2. dS^T in shared memory: 128 keys x 64 queries, 16 bits, a row of 128 bytes per key, in the copy
 *    engine's 128-byte swizzle: the 16-byte chunk c of row r (queries 8c .. 8c + 7) at chunk c ^ (r % 8),
 *    the tile 1024-byte aligned. That is the layout wgmma reads an MN-major operand in (the forward's V
 *    is read so, written by TMA); dQ = dS K reads dS^T so, as A with its M (queries) contiguous.
 *
 * 3. dQ's staging for the copy engine's reduce-add: 64 rows x D fp32 as D / 32 boxes of 64 rows x 32
 *    floats (128 bytes, the swizzle's width), box b 8 KB after box b - 1, each in the same 128-byte
 *    swizzle: the layout the engine reads a box of the fp32 tensor map from (hop_tensor_map_f32).
 */
#ifndef ATTN_BACKWARD_HOPPER_LAYOUT_H
#define ATTN_BACKWARD_HOPPER_LAYOUT_H

#include <stdint.h>

#ifdef __CUDACC__
#define BWH_INDEX static __host__ __device__ __forceinline__
#else
#define BWH_INDEX static inline
#endif

/* 1. the accumulator's row and column of register idx of thread tid */
BWH_INDEX int bwh_acc_row(int tid, int idx) {
    return 16 * (tid >> 5) + ((tid & 31) >> 2) + 8 * ((idx >> 1) & 1);
}
BWH_INDEX int bwh_acc_col(int tid, int idx) { return 8 * (idx >> 2) + 2 * (tid & 3) + (idx & 1); }

/* The copy engine's 128-byte swizzle: byte b of row r of a tile of 128-byte rows. */
BWH_INDEX uint32_t bwh_swizzle128(int row, int byte) {
    return (uint32_t)(row * 128 + ((((byte >> 4) ^ row) & 7) << 4) + (byte & 15));
}

/* 2. the byte offset of dS^T(key, query), 16 bits an element */
BWH_INDEX uint32_t bwh_ds_offset(int key, int query) { return bwh_swizzle128(key, 2 * query); }

/* 3. the byte offset of dQ(row, col) in the staging, 4 bytes an element, 8192-byte boxes of 32 columns */
BWH_INDEX uint32_t bwh_dq_offset(int row, int col) {
    return (uint32_t)((col >> 5) * 64 * 128) + bwh_swizzle128(row, 4 * (col & 31));
}

#endif
