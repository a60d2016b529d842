/*
 * backward_fa2.h: stage 13, the backward pass on tensor cores, as the registry sees it. The kernels are
 * in backward_fa2.cu; the workspace size and the head dims are plain C (workspace.c), so that a build
 * without CUDA can still list the stage and size its scratch.
 */
#ifndef ATTN_BACKWARD_FA2_H
#define ATTN_BACKWARD_FA2_H

#include <stdint.h>

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STAGE13_BR 64  /* Br: query rows per step of a block's loop */
#define STAGE13_BC 128 /* Bc: keys per block, 16 per warp */
#define STAGE13_DIMS_TEXT "32, 64, 96, 128"

/* 1 for head dims 32, 64, 96 and 128. */
int stage13_supports_dim(int64_t D);
/* Stage 13's own limits, before any CUDA call: the head dim, N <= 2^24, B*H within one launch's
 * blocks, fp16 or bf16. ATTN_EUNSUPPORTED naming the field and the value; p's sizes are >= 1 (the
 * caller's check). Asked by bwd_run and by the library. */
attn_status stage13_check_limits(const attn_problem *p);
/* The fp32 dQ accumulator (B H N D floats), D_i = dO_i . O_i (B H N floats) and, for 13d, one counter
 * per (b, h, query tile): O(N) per head, never O(N^2). */
size_t stage13_workspace_bytes(const attn_problem *p);

/* fp16 and bf16; reads Q, K, V, O, LSE and dO, writes dQ, dK, dV; launches on a->stream and returns
 * without synchronising. 13: dQ summed by atomic adds (ATTN_BACKWARD_ATOMIC); 13d: dQ summed over the
 * key tiles in a fixed order (ATTN_BACKWARD, bitwise repeatable). CUDA builds only. */
attn_status stage13_run(const attn_problem *p, const attn_args *a);
attn_status stage13d_run(const attn_problem *p, const attn_args *a);

/* The bytes stage 13 (and 13d) moves (traffic.c): a block per 128 keys walks the query tiles. */
attn_bytes stage13_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
