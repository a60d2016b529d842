/*
 * stage06.c: stage 06 as the registry and the public library (lib/flashattn.c) call it. stage06_run()
 * adds nothing to the computation: the stage's limits (stage06_check_limits), the kernel parameters,
 * the launch for the dtype. It does not ask the runtime what the pointers are: the library does that
 * before calling it, and the harness allocates them with cudaMalloc (the timed path stays short).
 */
#include "stage06.h"

#include <string.h>

#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
#include "cuda_check.h"
#include "fa2_internal.h"
#endif

int stage06_supports_dim(int64_t D) {
    return D == 32 || D == 64 || D == 80 || D == 96 || D == 128 || D == 192 || D == 256;
}
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
    if (p->N_k > ((int64_t)1 << 30)) /* key indices too */
        return attn_fail(ATTN_EUNSUPPORTED, "N_k: stage 06 takes at most 2^30 keys (got %lld)",
                         (long long)p->N_k);
    if (p->B * p->H > STAGE06_MAX_HEADS)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "B*H: stage 06 takes at most 65535^2 heads (grid.y x grid.z) (got %lld)",
                         (long long)(p->B * p->H));
    if (p->dtype != ATTN_F16 && p->dtype != ATTN_BF16)
        return attn_fail(ATTN_EUNSUPPORTED, "dtype: stage 06 takes fp16 and bf16 (got %d)", (int)p->dtype);
    return ATTN_OK;
}

/* A stride as the message names it: "q.stride_n" */
static const char *const stride_name[4][3] = {{"q.stride_b", "q.stride_h", "q.stride_n"},
                                              {"k.stride_b", "k.stride_h", "k.stride_n"},
                                              {"v.stride_b", "v.stride_h", "v.stride_n"},
                                              {"o.stride_b", "o.stride_h", "o.stride_n"}};

attn_status stage06_check_layout(const attn_problem *p, const attn_strides *const s[4]) {
    for (int t = 0; t < 4; t++) {
        const int kv = t == 1 || t == 2;
        const int64_t x[3] = {s[t]->b, s[t]->h, s[t]->n};
        /* the size of the dim each stride steps over: a stride over one element (or over packed
         * sequences' batch) is never multiplied by anything but 0 and is not looked at */
        const int64_t size[3] = {p->cu_seqlens_q ? 1 : p->B, kv ? p->H_kv : p->H,
                                 p->cu_seqlens_q ? 2
                                 : kv            ? p->N_k
                                                 : p->N};
        if (!(x[0] || x[1] || x[2])) {
            if (!p->cu_seqlens_q) continue; /* contiguous [B, heads, rows, D] */
            return attn_fail(ATTN_EUNSUPPORTED,
                             "%c: with cu_seqlens stage 06 needs the packed tensor's strides (stride_h and "
                             "stride_n; [total, heads, D] is stride_h D, stride_n heads*D): the contiguous "
                             "head stride would be total * D, and the total lives on the device",
                             "qkvo"[t]);
        }
        for (int d = 0; d < 3; d++) {
            if (x[d] < 0)
                return attn_fail(ATTN_EINVAL, "%s: must be at least 0 (got %lld)", stride_name[t][d],
                                 (long long)x[d]);
            if (size[d] > 1 && x[d] % 8) /* cp.async and the O stores move 16 bytes from 16-byte boundaries */
                return attn_fail(ATTN_EUNSUPPORTED,
                                 "%s: stage 06 moves rows 16 bytes at a time: strides must be multiples of 8 "
                                 "elements (got %lld)",
                                 stride_name[t][d], (long long)x[d]);
        }
        if (size[2] > 1 && x[2] > INT32_MAX) /* the kernel's row stride is an int (fa2_stride) */
            return attn_fail(ATTN_EUNSUPPORTED,
                             "%s: stage 06 takes row strides up to 2^31 - 1 elements (got %lld)",
                             stride_name[t][2], (long long)x[2]);
    }
    return ATTN_OK;
}

#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
/* s, or when all three are 0 the contiguous [B, heads, rows, D] (the layout check refused zeros with
 * cu_seqlens, whose contiguous head stride needs the total on the device). */
static fa2_stride resolve(const attn_strides *s, int64_t heads, int64_t rows, int64_t D) {
    fa2_stride r;
    if (s->b || s->h || s->n) /* a row stride past 2^31 only where no row but 0 is read (one row) */
        r.b = s->b, r.h = s->h, r.n = s->n > INT32_MAX ? 0 : (int)s->n;
    else
        r.b = heads * rows * D, r.h = rows * D, r.n = (int)D;
    return r;
}

fa2_params fa2_params_of(const attn_problem *p, const attn_args *a) {
    fa2_params kp;
    memset(&kp, 0, sizeof kp);
    kp.q = (const uint16_t *)a->q;
    kp.k = (const uint16_t *)a->k;
    kp.v = (const uint16_t *)a->v;
    kp.o = (uint16_t *)a->o;
    kp.lse = a->lse;
    kp.heads = p->B * p->H;
    kp.n = (int)p->N;
    kp.scale_log2 = attn_exp2_scale(p->scale);
    kp.negate_q = p->scale < 0.f;
    kp.qs = resolve(&a->q_stride, p->H, p->N, p->D), kp.os = resolve(&a->o_stride, p->H, p->N, p->D);
    kp.ks = resolve(&a->k_stride, p->H_kv, p->N_k, p->D),
    kp.vs = resolve(&a->v_stride, p->H_kv, p->N_k, p->D);
    kp.h = (int)p->H;
    kp.group = (int)(p->H / p->H_kv);
    kp.n_k = (int)p->N_k;
    kp.batch = (int)p->B;
    kp.cu_q = p->cu_seqlens_q ? a->cu_seqlens_q_dev : NULL;
    kp.cu_k = p->cu_seqlens_k ? a->cu_seqlens_k_dev : NULL;
    return kp;
}

attn_status stage06_run(const attn_problem *p, const attn_args *a) {
    attn_status st = stage06_check_limits(p);
    const attn_strides *const layout[4] = {&a->q_stride, &a->k_stride, &a->v_stride, &a->o_stride};
    if (st == ATTN_OK) st = stage06_check_layout(p, layout);
    if (st != ATTN_OK) return st;
    if (p->cu_seqlens_q && (!a->cu_seqlens_q_dev || !a->cu_seqlens_k_dev))
        return attn_fail(ATTN_EINVAL, "cu_seqlens: stage 06 reads the offsets on the device: "
                                      "attn_args.cu_seqlens_q_dev and cu_seqlens_k_dev must be set");
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
