/*
 * stage06.h: stage 06 and its road as the suite's registry (suite/registry.c) and the public library
 * (lib/flashattn.c) see them. The kernels are in fa2_*.cu; stage06_run() checks the stage's limits and
 * launches them, and stage06a_run() .. stage06e_run() run the road's steps (step06*.cu).
 */
#ifndef STAGE06_H
#define STAGE06_H

#include <stdint.h>

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STAGE06_DIMS_TEXT "32, 64, 80, 96, 128, 192, 256"
/* 1 for head dims 32, 64, 80, 96, 128, 192, 256 (fa2_final_tiles has a tile shape for each). Always
 * built (no CUDA needed). */
int stage06_supports_dim(int64_t D);
/* Stage 06's own limits, before any CUDA call: the head dim, N and N_k <= 2^30, B*H <= 65535^2 (grid.y
 * x grid.z), fp16 or bf16. ATTN_EUNSUPPORTED naming the field and the value; p's sizes are >= 1 and
 * B*H*N*D fits 64 bits (the caller's checks). Asked by stage06_run and by the library. Stage 06 takes
 * H_kv < H, N_k != N and cu_seqlens (the registry's takes). */
attn_status stage06_check_limits(const attn_problem *p);
/* The layout of Q, K, V and O (s[0..3], element strides; all three 0: contiguous), before any CUDA call:
 * no stride negative, every one a multiple of 8 elements (the kernel moves 16-byte chunks), row strides
 * below 2^31, and with cu_seqlens the strides given (the packed head stride needs the total, which the
 * library has on the device only). ATTN_EINVAL or ATTN_EUNSUPPORTED naming the stride ("k.stride_n").
 * Asked by stage06_run and by the library. */
attn_status stage06_check_layout(const attn_problem *p, const attn_strides *const s[4]);
/* The road's steps: 1 for head dims 64 and 128. */
int stage06_road_supports_dim(int64_t D);

/* fp16 and bf16; writes LSE; no workspace; launches on a->stream, does not synchronise. Defined only
 * in a CUDA build (the registry takes them through GPU_RUN). */
attn_status stage06_run(const attn_problem *p, const attn_args *a);
/* The road (fp16, D = 64 or 128, LSE written): 06a first mma.sync kernel, 06b + P in registers,
 * 06c + swizzle, 06d + Q in registers, 06e + cp.async double buffering; stage 06 adds FA2's tiles. */
attn_status stage06a_run(const attn_problem *p, const attn_args *a);
attn_status stage06b_run(const attn_problem *p, const attn_args *a);
attn_status stage06c_run(const attn_problem *p, const attn_args *a);
attn_status stage06d_run(const attn_problem *p, const attn_args *a);
attn_status stage06e_run(const attn_problem *p, const attn_args *a);

/* The bytes stage 06 (and 06m) moves (traffic.c): 128-row tiles, K and V once per row tile. */
attn_bytes stage06_bytes(const attn_problem *p, int gpus);
/* The bytes the road's steps 06a-06e move: 64 x 64 tiles, 06's band logic. */
attn_bytes stage06_road_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
