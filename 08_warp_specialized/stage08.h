/*
 * stage08.h: stage 08 (warp specialization) as the registry sees it. The kernel is in
 * warp_specialized.cu, built as sm_90a machine code only (warp_specialized.mk); the registry lists
 * the stage as sm_90 only.
 */
#ifndef STAGE08_H
#define STAGE08_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* head dim 64, 128, 256; fp16 and bf16; writes LSE; no workspace; launches on a->stream. */
attn_status stage08_run(const attn_problem *p, const attn_args *a);

/* The bytes stage 08 moves (traffic.c): at D = 128 pairs of blocks load each K/V tile once. */
attn_bytes stage08_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
