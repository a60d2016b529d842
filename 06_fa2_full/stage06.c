/*
 * stage06.c: the suite's entry for stage 06. It adds nothing to the computation: stage06_run() goes
 * through fa2_forward_nocheck(), the same validation, configuration and launch that fa2_forward() in
 * build/libfa2.a runs, so what the tests check is what the library ships. Only the error reporting
 * differs: here every failure becomes an attn_status with a message (attn_fail), and the launch is
 * checked with the suite's ATTN_CUDA_LAUNCHED.
 */
#include "stage06.h"

#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
#include "cuda_check.h"
#include "fa2_internal.h"
#endif

int stage06_supports_dim(int64_t D) { return D == 32 || D == 64 || D == 96 || D == 128 || D == 256; }

#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
attn_status stage06_run(const attn_problem *p, const attn_args *a) {
    if (!stage06_supports_dim(p->D))
        return attn_fail(ATTN_EUNSUPPORTED, "stage 06 supports head dim 32, 64, 96, 128, 256 (got %lld)",
                         (long long)p->D);
    if (p->dtype != ATTN_F16 && p->dtype != ATTN_BF16)
        return attn_fail(ATTN_EUNSUPPORTED, "stage 06 supports fp16 and bf16 (got dtype %d)", (int)p->dtype);

    cudaError_t ce = cudaSuccess;
    const char *why = "";
    const fa2_status s =
        fa2_forward_nocheck(a->q, a->k, a->v, a->o, a->lse, p->B, p->H, p->N, p->D, p->causal, p->scale,
                            p->dtype == ATTN_BF16 ? FA2_BF16 : FA2_F16, (cudaStream_t)a->stream, &ce, &why);
    switch (s) {
    case FA2_OK: break;
    case FA2_EINVAL: return attn_fail(ATTN_EINVAL, "stage 06: %s", why);
    case FA2_EUNSUPPORTED: return attn_fail(ATTN_EUNSUPPORTED, "stage 06: %s", why);
    case FA2_ECUDA: return attn_fail(attn_cuda_status(ce), "stage 06: %s: %s", why, cudaGetErrorString(ce));
    default: return attn_fail(ATTN_ECUDA, "stage 06: unexpected status %d", (int)s);
    }
    ATTN_CUDA_LAUNCHED("stage 06 kernel (fa2_fwd_kernel)");
    return ATTN_OK;
}
#endif
