/*
 * hopper_desc.h: the 64-bit shared-memory matrix descriptor that wgmma reads its operands through
 * (PTX ISA, "Matrix Descriptor Format"), in plain C, so that stages 07-09 (hopper.cuh) and a CPU test
 * (tests/test_hopper_desc.c) run the same lines: a slip in a bit field would otherwise show only as
 * wrong numbers on a Hopper GPU.
 *
 * Fields, all addresses and offsets in 16-byte units:
 *   bits  0-13  start address (shared-memory addresses are below 228 KB: 14 bits suffice)
 *   bits 16-29  leading byte offset
 *   bits 32-45  stride byte offset
 *   bits 62-63  swizzle mode (1 = 128-byte swizzle)
 * For a K-major operand (rows of Q or K, 128 bytes = 64 elements of K per row inside one swizzle
 * atom) the stride byte offset is the step from one group of 8 rows to the next: 8 x 128 = 1024 bytes;
 * the leading offset is unused. For an MN-major operand (V read as B of O += P V: rows are keys = the
 * K dimension, 64 head-dim columns per 128-byte row) the leading offset is the step between 64-column
 * blocks of the head dim and the stride offset the step between groups of 8 keys (1024 bytes).
 */
#ifndef ATTN_HOPPER_DESC_H
#define ATTN_HOPPER_DESC_H

#include <stdint.h>

#ifdef __CUDACC__
#define HOPPER_DESC_FN static __host__ __device__ __forceinline__
#else
#define HOPPER_DESC_FN static inline
#endif

/* Shared memory a block may address on sm_90: 228 KB. Every start address lies below it. */
#define HOP_SMEM_WINDOW (228u * 1024u)

HOPPER_DESC_FN uint64_t hop_desc_sw128(uint32_t saddr, uint32_t leading_bytes, uint32_t stride_bytes) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)(leading_bytes >> 4) << 16) |
           ((uint64_t)(stride_bytes >> 4) << 32) | (1ull << 62);
}

/* The descriptor of the same operand `bytes` further on (a multiple of 16): one add to the start
 * address field. While the address stays inside the 228 KB window the field (at most 14592 of its
 * 16384 values) never carries into the bits above it. Built once per tile and advanced per k-step, a
 * GEMM's descriptors cost one add each instead of a mask, a shift and an or. Why it matters: ncu put
 * stage 09 at ~480 instructions per warp and tile at D = 64 against flash-attn-4's ~420 for the same
 * math, the descriptors' uniform-datapath arithmetic a large part of the difference; advancing them
 * measured +2.1 and +2.5% for 09 at D = 64 non-causal in two A/Bs (09 README, road table). */
HOPPER_DESC_FN uint64_t hop_desc_advance(uint64_t desc, uint32_t bytes) {
    return (desc & 0xFFFFFFFF00000000ull) | (uint32_t)((uint32_t)desc + (bytes >> 4));
}

#endif
