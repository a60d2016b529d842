/*
 * fa2_internal.h: what the parts of stage 06 share and the library does not export: the kernel
 * parameters, the argument checks, and the launch path behind fa2_forward() and the suite's
 * stage06_run() (stage06.c) and road steps (step06*.cu).
 */
#ifndef FA2_INTERNAL_H
#define FA2_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h" /* ATTN_LN2, attn_exp2_scale */
#include "fa2.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The arguments of fa2_forward(), in one struct. */
typedef struct {
    const void *q, *k, *v;
    void *o;
    float *lse;
    int64_t B, H, N, D;
    int causal;
    float scale;
    fa2_dtype dtype;
} fa2_args;

/* What every kernel receives (by value, in the constant bank). */
typedef struct {
    const uint16_t *q, *k, *v; /* [B, H, N, D] */
    uint16_t *o;               /* [B, H, N, D] */
    float *lse;                /* [B, H, N] or NULL */
    int64_t heads;             /* B*H */
    int n;                     /* N */
    int row_tiles;             /* Tr = ceil(N / Br) */
    float scale_log2;          /* attn_exp2_scale(scale): the one multiplier of exp2 */
    int negate_q;              /* scale < 0: run with -Q and |scale| (the same scores, max stays max) */
} fa2_params;

/* Why a call failed: the argument concerned (or NULL), a static one-line reason, the value passed (or
 * ""), and the CUDA error when there was one. fa2_last_error() reads "what: why (got value): CUDA's
 * error string". */
typedef struct {
    const char *what;
    const char *why;
    char got[96];
    cudaError_t cuda;
} fa2_failure;

/* "what: why (got value): CUDA's error string" into buf; returns buf. */
const char *fa2_failure_message(const fa2_failure *f, char *buf, size_t cap);

/* Every check that needs no CUDA call: NULL pointers, sizes, causal, scale, dtype, alignment, head dim,
 * N, overflow, outputs overlapping inputs. FA2_OK, or FA2_EINVAL / FA2_EUNSUPPORTED with f->why. */
fa2_status fa2_check_args(const fa2_args *a, fa2_failure *f);

/* The kernel parameters for arguments that passed fa2_check_args, for row tiles of br rows. */
fa2_params fa2_params_of(const fa2_args *a, int br);

/* Checks (fa2_check_args), configures the kernel (shared-memory opt-in, once per kernel, device and
 * context) and launches it on `stream`. Returns the launch's own CUDA error, never an earlier one left
 * in cudaGetLastError(). It does not ask the runtime what the pointers are: fa2_forward() does that
 * first; the suite's stages pass memory the harness got from cudaMalloc. */
fa2_status fa2_validate_and_launch(const fa2_args *a, cudaStream_t stream, fa2_failure *f);

/* The kernels of stage 06 for one dtype (fa2_f16.cu, fa2_bf16.cu); args already checked. */
cudaError_t fa2_launch_f16(const fa2_params *kp, int64_t D, int causal, cudaStream_t stream,
                           const char **why);
cudaError_t fa2_launch_bf16(const fa2_params *kp, int64_t D, int causal, cudaStream_t stream,
                            const char **why);

#ifdef __cplusplus
}
#endif
#endif
