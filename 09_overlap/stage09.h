/*
 * stage09.h: stage 09 (overlap) as the registry sees it. The kernel is in
 * overlap.cu, built as sm_90a machine code only (overlap.mk); the registry lists
 * the stage as sm_90 only.
 */
#ifndef STAGE09_H
#define STAGE09_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* head dim 64, 128, 256; fp16 and bf16; writes LSE; no workspace; launches on a->stream. */
attn_status stage09_run(const attn_problem *p, const attn_args *a);

/* The bytes stage 09 moves (traffic.c): 192-row tiles at D = 64, pairs at D = 128 non-causal. */
attn_bytes stage09_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
