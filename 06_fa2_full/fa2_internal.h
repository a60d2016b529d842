/*
 * fa2_internal.h: the one code path behind fa2_forward() and the suite's stage06_run().
 *
 * fa2_forward_nocheck() validates, configures the kernel (once per kernel and device) and launches it,
 * but does not read cudaGetLastError(): fa2_forward() does that itself, stage06_run() does it with the
 * suite's ATTN_CUDA_LAUNCHED so that the message names the CUDA error. Not part of the public API.
 */
#ifndef FA2_INTERNAL_H
#define FA2_INTERNAL_H

#include "fa2.h"

#ifdef __cplusplus
extern "C" {
#endif

/* On failure *why points to a static one-line reason; on FA2_ECUDA *cuda_err holds the CUDA error of
 * the call that failed before the launch (cudaGetDevice or cudaFuncSetAttribute). */
fa2_status fa2_forward_nocheck(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B,
                               int64_t H, int64_t N, int64_t D, int causal, float scale, fa2_dtype dtype,
                               cudaStream_t stream, cudaError_t *cuda_err, const char **why);

#ifdef __cplusplus
}
#endif
#endif
