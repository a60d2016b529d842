/*
 * backward_hopper.h: stage 14, the backward pass on Hopper, as the registry sees it. The kernels are in
 * backward_hopper.cu, built as sm_90a machine code only (backward_hopper.mk); the head dims and the
 * workspace size are plain C (workspace.c), so that a build without CUDA can still list the stage and
 * size its scratch.
 */
#ifndef ATTN_BACKWARD_HOPPER_H
#define ATTN_BACKWARD_HOPPER_H

#include <stdint.h>

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STAGE14_BR 64  /* Br: query rows per step of a block's loop */
#define STAGE14_BC 128 /* Bc: keys per block, 64 per consumer warpgroup */
#define STAGE14_DIMS_TEXT "64, 128"

/* 1 for head dims 64 and 128. */
int stage14_supports_dim(int64_t D);
/* Stage 14's limits, no CUDA call (the library asks them before it chooses a stage): head dim 64 or 128,
 * N <= 2^30 and B*H <= 2^31 (the tensor maps' 32-bit coordinates), at most 65535 * 2^30 blocks of 128
 * keys, fp16 or bf16. ATTN_EUNSUPPORTED with the reason otherwise. */
attn_status stage14_check_limits(const attn_problem *p);
/* kit/backward_workspace.h's scratch with 64-row query tiles: the fp32 dQ accumulator, D_i and, for 14d,
 * one counter per (b, h, query tile). */
size_t stage14_workspace_bytes(const attn_problem *p);

/* fp16 and bf16; reads Q, K, V, O, LSE and dO, writes dQ, dK, dV; launches on a->stream and returns
 * without synchronising. 14: dQ summed by the copy engine's reduce-add (ATTN_BACKWARD_ATOMIC); 14d: dQ
 * summed over the key tiles in a fixed order (ATTN_BACKWARD, bitwise repeatable). CUDA builds only. */
attn_status stage14_run(const attn_problem *p, const attn_args *a);
attn_status stage14d_run(const attn_problem *p, const attn_args *a);

/* The bytes stage 14 (and 14d) moves (traffic.c): stage 13's tiles. */
attn_bytes stage14_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
