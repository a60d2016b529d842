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

/* One tensor's layout for the kernel: element strides over batch, head and row (D contiguous), never
 * all zero (fa2_params_of spells out the contiguous ones). The row stride is an int so that a tile's
 * row offsets are one 32 x 32 -> 64-bit IMAD.WIDE each (stage06_check_limits bounds it). */
typedef struct {
    int64_t b, h;
    int n;
} fa2_stride;

/* What every kernel receives (by value, in the constant bank). The road's kernels (step06*.cu) read
 * the first block only: contiguous [B, H, N, D] with H_kv = H and N_k = N. Stage 06 reads the second
 * too; it sits after the first so that the road's parameters keep their offsets (and their code). */
typedef struct {
    const uint16_t *q, *k, *v; /* [B, H, N, D]; stage 06: Q [B, H, N, D], K and V [B, H_kv, N_k, D] */
    uint16_t *o;               /* [B, H, N, D] */
    float *lse;                /* [B, H, N] or NULL; contiguous, with cu_seqlens [H, total_q] */
    int64_t heads;             /* B*H */
    int n;                     /* N (with cu_seqlens the longest sequence: the grid's row tiles) */
    float scale_log2;          /* attn_exp2_scale(scale): the one multiplier of exp2 */
    int negate_q;              /* scale < 0: run with -Q and |scale| (the same scores, max stays max) */
    /* stage 06 only (issue 56) */
    fa2_stride qs, ks, vs, os;  /* where Q, K, V and O live (strided layouts, [B, N, H, D], packed) */
    int h;                      /* H: head bh is b = bh / H, h = bh % H */
    int group;                  /* H / H_kv: query head h reads K/V head h / group */
    int n_k;                    /* N_k (with cu_seqlens the longest sequence of keys) */
    int batch;                  /* B: with cu_seqlens, cu_q[B] = total_q is the LSE's head stride */
    const int32_t *cu_q, *cu_k; /* device cu_seqlens (B + 1 offsets each), or NULL: one length each */
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
