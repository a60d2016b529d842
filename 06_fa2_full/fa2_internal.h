/*
 * fa2_internal.h: what the parts of stage 06 share and the library does not export: the kernel
 * parameters and the launch path behind the suite's stage06_run() (stage06.c), which the public
 * library's attn_forward() runs too, and the road steps (step06*.cu).
 */
#ifndef FA2_INTERNAL_H
#define FA2_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What every kernel receives (by value, in the constant bank). */
typedef struct {
    const uint16_t *q, *k, *v; /* [B, H, N, D] */
    uint16_t *o;               /* [B, H, N, D] */
    float *lse;                /* [B, H, N] or NULL */
    int64_t heads;             /* B*H */
    int n;                     /* N */
    float scale_log2;          /* attn_exp2_scale(scale): the one multiplier of exp2 */
    int negate_q;              /* scale < 0: run with -Q and |scale| (the same scores, max stays max) */
} fa2_params;

/* The kernel parameters of problem p (within stage06_check_limits) on a's buffers. */
fa2_params fa2_params_of(const attn_problem *p, const attn_args *a);

/* The kernels of stage 06 for one dtype (fa2_f16.cu, fa2_bf16.cu); limits already checked. Returns the
 * launch's own CUDA error, never one an earlier call left in cudaGetLastError(), with *why saying which
 * step failed. */
cudaError_t fa2_launch_f16(const fa2_params *kp, int64_t D, int causal, cudaStream_t stream,
                           const char **why);
cudaError_t fa2_launch_bf16(const fa2_params *kp, int64_t D, int causal, cudaStream_t stream,
                            const char **why);

#ifdef __cplusplus
}
#endif
#endif
