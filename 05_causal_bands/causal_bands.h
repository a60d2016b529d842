/* causal_bands.h: stage 05, stage 04 plus causal key tiles split into unmasked, masked and skipped. */
#ifndef ATTN_CAUSAL_BANDS_H
#define ATTN_CAUSAL_BANDS_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif
attn_status stage05_run(const attn_problem *p, const attn_args *a);
/* Stage 05m (causal_bands_cpu.c): the same algorithm in plain C on the CPU; host pointers. */
attn_status stage05m_run(const attn_problem *p, const attn_args *a);
/* The bytes stage 05 (and 05m) moves (traffic.c): causal row tiles skip the tiles above the diagonal. */
attn_bytes stage05_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
