/*
 * stage06.c: stage 06 as the registry and the public library (lib/flashattn.c) call it. stage06_run()
 * adds nothing to the computation: the stage's limits (stage06_check_limits), the kernel parameters,
 * the launch for the dtype. It does not ask the runtime what the pointers are: the library does that
 * before calling it, and the harness allocates them with cudaMalloc (the timed path stays short).
 */
#include "stage06.h"

#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
#include "cuda_check.h"
#include "fa2_internal.h"
#endif

int stage06_supports_dim(int64_t D) { return D == 32 || D == 64 || D == 96 || D == 128 || D == 256; }
int stage06_road_supports_dim(int64_t D) { return D == 64 || D == 128; }

/* The grid holds B*H heads over y and z, 65535 each. */
#define STAGE06_MAX_HEADS ((int64_t)65535 * 65535)

attn_status stage06_check_limits(const attn_problem *p) {
    if (!stage06_supports_dim(p->D))
        return attn_fail(ATTN_EUNSUPPORTED, "D: stage 06 takes head dims " STAGE06_DIMS_TEXT " (got %lld)",
                         (long long)p->D);
    if (p->N > ((int64_t)1 << 30)) /* row indices and the row-tile count are 32-bit ints */
        return attn_fail(ATTN_EUNSUPPORTED, "N: stage 06 takes at most 2^30 rows (got %lld)",
                         (long long)p->N);
    if (p->B * p->H > STAGE06_MAX_HEADS)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "B*H: stage 06 takes at most 65535^2 heads (grid.y x grid.z) (got %lld)",
                         (long long)(p->B * p->H));
    if (p->dtype != ATTN_F16 && p->dtype != ATTN_BF16)
        return attn_fail(ATTN_EUNSUPPORTED, "dtype: stage 06 takes fp16 and bf16 (got %d)", (int)p->dtype);
    return ATTN_OK;
}

#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
fa2_params fa2_params_of(const attn_problem *p, const attn_args *a) {
    fa2_params kp;
    kp.q = (const uint16_t *)a->q;
    kp.k = (const uint16_t *)a->k;
    kp.v = (const uint16_t *)a->v;
    kp.o = (uint16_t *)a->o;
    kp.lse = a->lse;
    kp.heads = p->B * p->H;
    kp.n = (int)p->N;
    kp.scale_log2 = attn_exp2_scale(p->scale);
    kp.negate_q = p->scale < 0.f;
    return kp;
}

attn_status stage06_run(const attn_problem *p, const attn_args *a) {
    const attn_status st = stage06_check_limits(p);
    if (st != ATTN_OK) return st;
    const fa2_params kp = fa2_params_of(p, a);
    const char *why = "";
    const cudaError_t e = p->dtype == ATTN_BF16
                              ? fa2_launch_bf16(&kp, p->D, p->causal, (cudaStream_t)a->stream, &why)
                              : fa2_launch_f16(&kp, p->D, p->causal, (cudaStream_t)a->stream, &why);
    if (e != cudaSuccess)
        return attn_fail(attn_cuda_status(e), "stage 06: %s: %s", why, cudaGetErrorString(e));
    return ATTN_OK;
}
#endif
