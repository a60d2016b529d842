/* tiled.h: stage 03, attention in tiles through shared memory, two passes over the keys. */
#ifndef ATTN_TILED_H
#define ATTN_TILED_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif
attn_status stage03_run(const attn_problem *p, const attn_args *a);
/* Stage 03m (tiled_cpu.c): the same algorithm in plain C on the CPU; host pointers. */
attn_status stage03m_run(const attn_problem *p, const attn_args *a);
/* The bytes stage 03 (and 03m, its model) moves (traffic.c): K loaded twice per row tile. */
attn_bytes stage03_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
