/*
 * stage07.h: stage 07 (TMA + wgmma) as the registry sees it. The kernel is in tma_wgmma.cu, built as
 * sm_90a machine code only (07_tma_wgmma/tma_wgmma.mk); the registry lists the stage as sm_90 only.
 */
#ifndef STAGE07_H
#define STAGE07_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* head dim 64, 128, 256; fp16 and bf16; writes LSE; no workspace; launches on a->stream. */
attn_status stage07_run(const attn_problem *p, const attn_args *a);

/* The bytes stage 07 moves (traffic.c): stage 06's count with 07's tiles. */
attn_bytes stage07_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
