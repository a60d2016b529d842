/*
 * stage06.h: stage 06 as the suite's registry sees it (common/registry.c). The kernel and the library
 * entry point fa2_forward() are in fa2.cu; stage06_run() is a thin adapter over the same code path.
 */
#ifndef STAGE06_H
#define STAGE06_H

#include <stdint.h>

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 for head dims 32, 64, 96, 128, 256. Always built (no CUDA needed). */
int stage06_supports_dim(int64_t D);

/* fp16 and bf16; writes LSE; no workspace; launches on a->stream, does not synchronise. Defined only
 * in a CUDA build (the registry takes it through GPU_RUN). */
attn_status stage06_run(const attn_problem *p, const attn_args *a);

#ifdef __cplusplus
}
#endif
#endif
