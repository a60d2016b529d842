/*
 * fa2_api.cu: the C API of build/libfa2.a (fa2.h) and the checked launch that the suite's stage 06
 * shares with it. Host code only: argument checks, the question "is this device memory?", the launch
 * of the kernel for the dtype, and the reason for the last refusal on this thread.
 */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "06_fa2_full/fa2_internal.h"
#include "06_fa2_full/fa2_traits.cuh"
#include "device_memory.h"
#include "forward_args.h"

#define FA2_LOG2E 1.4426950408889634f

/* fa2_last_error(): one buffer per thread, so that concurrent callers never see each other's reason. */
static thread_local char fa2_error_text[256];

static fa2_status fa2_refuse(fa2_failure *f, fa2_status s, const char *what, const char *why) {
    f->what = what;
    f->why = why;
    return s;
}

/* The same, with the value the caller passed: fa2_last_error() ends "(got value)". A count, a flag or
 * an enum exactly, as the stage libraries print it (through a double, N = INT64_MIN read -9.22e+18). */
static fa2_status fa2_refuse_got(fa2_failure *f, fa2_status s, const char *what, const char *why,
                                 long long got) {
    snprintf(f->got, sizeof f->got, "%lld", got);
    return fa2_refuse(f, s, what, why);
}

/* The scale, a float: as many digits as tell it apart. */
static fa2_status fa2_refuse_scale(fa2_failure *f, float got) {
    snprintf(f->got, sizeof f->got, "%.9g", (double)got);
    return fa2_refuse(f, FA2_EINVAL, "scale", "must be finite with |scale| <= FA2_MAX_SCALE = 2.3e38");
}

/* Outputs overlapping inputs or each other (forward_args.h). */
static fa2_status fa2_check_overlap(const fa2_args *a, fa2_failure *f) {
    const void *const ptr[5] = {a->q, a->k, a->v, a->o, a->lse};
    const char *pair = attn_overlapping_outputs(ptr, (uint64_t)(a->B * a->H * a->N * a->D) * 2u,
                                                (uint64_t)(a->B * a->H * a->N) * 4u);
    return pair ? fa2_refuse(f, FA2_EINVAL, pair, ATTN_OVERLAP_WHY) : FA2_OK;
}

/* A refusal of the checks shared with the stage libraries (forward_args.h), as fa2_forward words it. */
static fa2_status fa2_refuse_shared(fa2_failure *f, const attn_refusal *r) {
    return r->has_got ? fa2_refuse_got(f, FA2_EINVAL, r->what, r->why, r->got)
                      : fa2_refuse(f, FA2_EINVAL, r->what, r->why);
}

extern "C" fa2_status fa2_check_args(const fa2_args *a, fa2_failure *f) {
    const void *const ptr[5] = {a->q, a->k, a->v, a->o, a->lse};
    const int64_t size[4] = {a->B, a->H, a->N, a->D};
    attn_refusal r;
    f->what = NULL, f->why = "", f->cuda = cudaSuccess, f->got[0] = '\0';
    if (attn_refuse_pointers_and_sizes(ptr, size, a->causal, 0, &r)) /* lse may be NULL: no LSE written */
        return fa2_refuse_shared(f, &r);
    if (!(fabsf(a->scale) <= FA2_MAX_SCALE)) /* also NaN; the kernel multiplies by scale * log2(e) */
        return fa2_refuse_scale(f, a->scale);
    if (a->dtype != FA2_F16 && a->dtype != FA2_BF16)
        return fa2_refuse_got(f, FA2_EINVAL, "dtype", "must be FA2_F16 (0) or FA2_BF16 (1)",
                              (int)a->dtype); /* (int): a negative value passed is shown as one */
    if (attn_refuse_misaligned(ptr, &r)) return fa2_refuse_shared(f, &r);
    if (a->D != 32 && a->D != 64 && a->D != 96 && a->D != 128 && a->D != 256)
        return fa2_refuse_got(f, FA2_EUNSUPPORTED, "D", "head dim must be 32, 64, 96, 128 or 256", a->D);
    if (a->N > ((int64_t)1 << 30))
        return fa2_refuse_got(f, FA2_EUNSUPPORTED, "N", "must be at most 2^30", a->N);
    if (attn_sizes_overflow(size)) { /* B*H*N*D elements and their bytes must fit 64 bits */
        snprintf(f->got, sizeof f->got, "B=%lld H=%lld N=%lld D=%lld", (long long)a->B, (long long)a->H,
                 (long long)a->N, (long long)a->D);
        return fa2_refuse(f, FA2_EINVAL, "B*H*N*D", "overflows 64 bits");
    }
    if (a->B * a->H > (int64_t)65535 * 65535)
        return fa2_refuse_got(f, FA2_EUNSUPPORTED, "B*H", "must be at most 65535^2 (grid.y x grid.z)",
                              a->B * a->H);
    return fa2_check_overlap(a, f);
}

extern "C" fa2_params fa2_params_of(const fa2_args *a, int br) {
    fa2_params kp;
    kp.q = (const uint16_t *)a->q;
    kp.k = (const uint16_t *)a->k;
    kp.v = (const uint16_t *)a->v;
    kp.o = (uint16_t *)a->o;
    kp.lse = a->lse;
    kp.heads = a->B * a->H;
    kp.n = (int)a->N;
    kp.row_tiles = (int)((a->N + br - 1) / br);
    /* scale = 0 (uniform attention) runs as FLT_MIN: every |s| * FLT_MIN < 2^-60 and 2^x rounds to
     * exactly 1, as 2^0 would; keeping the multiplier positive keeps -inf * it = -inf for masking */
    kp.scale_log2 = fmaxf(fabsf(a->scale) * FA2_LOG2E, FLT_MIN);
    kp.negate_q = a->scale < 0.f;
    return kp;
}

/* Arguments already checked: the kernel for the dtype, head dim and mask. */
static fa2_status fa2_launch_checked(const fa2_args *a, cudaStream_t stream, fa2_failure *f) {
    /* Br of the final tiles: the same 128 for every head dim */
    const fa2_params kp = fa2_params_of(a, fa2_traits_of((int)a->D, FA2_RECIPE_FINAL).br);
    const cudaError_t e = a->dtype == FA2_BF16 ? fa2_launch_bf16(&kp, a->D, a->causal, stream, &f->why)
                                               : fa2_launch_f16(&kp, a->D, a->causal, stream, &f->why);
    f->cuda = e;
    return e == cudaSuccess ? FA2_OK : FA2_ECUDA;
}

extern "C" fa2_status fa2_validate_and_launch(const fa2_args *a, cudaStream_t stream, fa2_failure *f) {
    const fa2_status s = fa2_check_args(a, f);
    return s != FA2_OK ? s : fa2_launch_checked(a, stream, f);
}

/* q, k, v, o (and lse) must be memory the current device can read (device_memory.h). */
static fa2_status fa2_check_device_memory(const fa2_args *a, fa2_failure *f) {
    const void *const ptr[5] = {a->q, a->k, a->v, a->o, a->lse}; /* only lse may be NULL here */
    attn_memory_report r;
    switch (attn_device_memory(ptr, 5, &r)) {
    case ATTN_MEMORY_READABLE: return FA2_OK;
    case ATTN_MEMORY_UNKNOWN:
        return fa2_refuse(f, FA2_EINVAL, attn_forward_arg_name[r.index], ATTN_MEMORY_UNKNOWN_WHY);
    case ATTN_MEMORY_HOST:
        return fa2_refuse(f, FA2_EINVAL, attn_forward_arg_name[r.index], ATTN_MEMORY_HOST_WHY);
    case ATTN_MEMORY_OTHER_DEVICE:
        snprintf(f->got, sizeof f->got, "device %d, current %d", r.device, r.current);
        return fa2_refuse(f, FA2_EINVAL, attn_forward_arg_name[r.index], ATTN_MEMORY_OTHER_WHY);
    default: f->cuda = r.error; return fa2_refuse(f, FA2_ECUDA, NULL, attn_memory_no_answer_why(r.error));
    }
}

extern "C" const char *fa2_failure_message(const fa2_failure *f, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s%s%s%s%s%s", f->what ? f->what : "", f->what ? ": " : "", f->why,
             f->got[0] ? " (got " : "", f->got, f->got[0] ? ")" : "", f->cuda != cudaSuccess ? ": " : "",
             f->cuda != cudaSuccess ? cudaGetErrorString(f->cuda) : "");
    return buf;
}

static fa2_status fa2_remember(fa2_status s, const fa2_failure *f) {
    if (s != FA2_OK) fa2_failure_message(f, fa2_error_text, sizeof fa2_error_text);
    return s;
}

extern "C" fa2_status fa2_forward(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B,
                                  int64_t H, int64_t N, int64_t D, int causal, float scale, fa2_dtype dtype,
                                  cudaStream_t stream) {
    const fa2_args a = {q, k, v, o, lse, B, H, N, D, causal, scale, dtype};
    fa2_failure f;
    fa2_status s = fa2_check_args(&a, &f);
    if (s == FA2_OK) s = fa2_check_device_memory(&a, &f);
    if (s == FA2_OK) s = fa2_launch_checked(&a, stream, &f);
    return fa2_remember(s, &f);
}

extern "C" const char *fa2_last_error(void) { return fa2_error_text; }

extern "C" const char *fa2_status_string(fa2_status s) {
    switch (s) {
    case FA2_OK: return "ok";
    case FA2_EINVAL: return "invalid argument";
    case FA2_EUNSUPPORTED: return "unsupported";
    case FA2_ECUDA: return "CUDA error";
    }
    return "unknown status";
}
