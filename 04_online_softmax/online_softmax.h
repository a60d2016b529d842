/* online_softmax.h: stage 04, tiled attention in one pass over the keys (online softmax). */
#ifndef ATTN_ONLINE_SOFTMAX_H
#define ATTN_ONLINE_SOFTMAX_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif
attn_status stage04_run(const attn_problem *p, const attn_args *a);
/* Stage 04m (online_softmax_cpu.c): the same algorithm in plain C on the CPU; host pointers. */
attn_status stage04m_run(const attn_problem *p, const attn_args *a);
/* The bytes stage 04 (and 04m) moves (traffic.c): K and V once per row tile. */
attn_bytes stage04_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
