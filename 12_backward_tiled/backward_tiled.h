/* backward_tiled.h: stage 12, FlashAttention-2's backward (Algorithm 2) on CUDA cores, and its CPU model. */
#ifndef ATTN_BACKWARD_TILED_H
#define ATTN_BACKWARD_TILED_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif
attn_status stage12_run(const attn_problem *p, const attn_args *a);
/* O(N) per head, never O(N^2): the fp32 dQ accumulator (4 B*H*N*D bytes) and D (4 B*H*N bytes). */
size_t stage12_workspace_bytes(const attn_problem *p);
/* Stage 12m (backward_tiled_cpu.c): the same algorithm in plain C on the CPU; host pointers. */
attn_status stage12m_run(const attn_problem *p, const attn_args *a);
/* The bytes stage 12 (and 12m) moves (traffic.c): a block per 64 keys walks the query tiles. */
attn_bytes stage12_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
