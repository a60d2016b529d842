/*
 * stage06.c: the suite's entry for stage 06. It adds nothing to the computation: stage06_run() goes
 * through fa2_validate_and_launch(), the argument checks, configuration and launch that fa2_forward()
 * in build/libfa2.a runs, so what the tests check is what the library ships. Two things differ: every
 * failure becomes an attn_status with a message (attn_fail), and the pointers are not sent to
 * cudaPointerGetAttributes (the harness allocates them with cudaMalloc; the timed path stays as short
 * as it was).
 */
#include "stage06.h"

#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
#include "cuda_check.h"
#include "fa2_internal.h"
#endif

int stage06_supports_dim(int64_t D) { return D == 32 || D == 64 || D == 96 || D == 128 || D == 256; }
int stage06_road_supports_dim(int64_t D) { return D == 64 || D == 128; }

#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
attn_status stage06_run(const attn_problem *p, const attn_args *a) {
    if (!stage06_supports_dim(p->D))
        return attn_fail(ATTN_EUNSUPPORTED, "stage 06 supports head dim 32, 64, 96, 128, 256 (got %lld)",
                         (long long)p->D);
    if (p->dtype != ATTN_F16 && p->dtype != ATTN_BF16)
        return attn_fail(ATTN_EUNSUPPORTED, "stage 06 supports fp16 and bf16 (got dtype %d)", (int)p->dtype);

    const fa2_args args = {a->q, a->k, a->v, a->o,      a->lse,   p->B,
                           p->H, p->N, p->D, p->causal, p->scale, p->dtype == ATTN_BF16 ? FA2_BF16 : FA2_F16};
    fa2_failure f;
    const fa2_status s = fa2_validate_and_launch(&args, (cudaStream_t)a->stream, &f);
    char why[256];
    switch (s) {
    case FA2_OK: return ATTN_OK;
    case FA2_EINVAL: return attn_fail(ATTN_EINVAL, "stage 06: %s", fa2_failure_message(&f, why, sizeof why));
    case FA2_EUNSUPPORTED:
        return attn_fail(ATTN_EUNSUPPORTED, "stage 06: %s", fa2_failure_message(&f, why, sizeof why));
    case FA2_ECUDA:
        return attn_fail(attn_cuda_status(f.cuda), "stage 06: %s", fa2_failure_message(&f, why, sizeof why));
    }
    return attn_fail(ATTN_ECUDA, "stage 06: unexpected status %d", (int)s);
}
#endif
