/*
 * decode_gpu.c: stage 15's host side: its limits, the chunk count on this device (choose_chunks, the
 * model's one rule, with the device's SM count), the kernel's parameters, and the entry points: one
 * step from a paged cache (decode_gpu_paged), the registry's 15 (the suite's contiguous cache) and 15p
 * (the harness's shuffled pages). The kernels are in decode_kernel.cuh.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "decode_gpu.h"

#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_check.h"
#endif

int stage15_supports_dim(int64_t D) { return D == 32 || D == 64 || D == 128; }

/* The SM count choose_chunks plans for: the current device's in a CUDA build that sees one, else
 * DECODE_DEFAULT_SMS (132: the H100 and H200). */
static int device_sms(void) {
#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && n > 0)
        return n;
    (void)cudaGetLastError(); /* no device: the default, and no error left for the caller's next check */
#endif
    return DECODE_DEFAULT_SMS;
}

/* The chunks S: opt->chunks where given; else ATTN_DECODE_CHUNKS where set to 1..DECODE_MAX_CHUNKS (a
 * tuning hook, as ATTN_FAKE_SM is a test hook: it lets a GPU run time other chunk counts than the rule
 * gives without a rebuild, and makes 15 and 15p differ from their model 15m); else choose_chunks. */
static int64_t chunks_for(int64_t B, int64_t H_kv, int64_t max_len, const decode_opts *opt) {
    if (opt && opt->chunks) return opt->chunks;
    long long forced = 0;
    const char *env = getenv("ATTN_DECODE_CHUNKS");
    if (env && *env && attn_parse_integer(env, 1, DECODE_MAX_CHUNKS, &forced) == 0) return forced;
    return choose_chunks(B, H_kv, max_len, opt && opt->sms ? opt->sms : device_sms());
}

int64_t decode_gpu_chunks(const decode_shape *s, const decode_opts *opt) {
    return chunks_for(s->B, s->H_kv, decode_longest_cache(s), opt);
}

/* B H_kv S R (D + 1) floats: each chunk's O and LSE of every row. SIZE_MAX where that is past size_t,
 * so that any fit check refuses it. */
size_t decode_gpu_workspace_bytes(const decode_shape *s, int64_t S) {
    if (S <= 1) return 0;
    const double rows = (double)s->B * (double)s->H * (double)s->N_q * (double)S; /* B H_kv R = B H N_q */
    const double bytes = rows * (double)(s->D + 1) * sizeof(float);
    return bytes < 0x1p62 ? (size_t)bytes : SIZE_MAX;
}

/* The kernel's own limits, each with the field and its range: grid.x holds B H_kv S blocks, grid.y the
 * row groups of 64 rows (65535), the combine's grid a block per 4 rows. */
static attn_status check_limits(const char *who, const decode_shape *s, int64_t R, int64_t S) {
    if (!stage15_supports_dim(s->D))
        return attn_fail(ATTN_EUNSUPPORTED, "D: %s takes head dims " STAGE15_DIMS_TEXT " (got %lld)", who,
                         (long long)s->D);
    if (s->dtype != ATTN_F16 && s->dtype != ATTN_BF16)
        return attn_fail(ATTN_EUNSUPPORTED, "dtype: %s takes fp16 and bf16 (got %d)", who, (int)s->dtype);
    if (R > (int64_t)65535 * 64)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "%s: (H / H_kv) * N_q, the rows that share a K/V head, must be 1..%d (grid.y x 64 "
                         "rows) (got %lld)",
                         who, 65535 * 64, (long long)R);
    if ((double)s->B * (double)s->H_kv * (double)S > (double)INT32_MAX ||
        (double)s->B * (double)s->H_kv * (double)R > 4.0 * (double)INT32_MAX)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "%s: B * H_kv * chunks (%lld chunks) must be at most %d blocks, B * H * N_q at most "
                         "2^33 rows (grid.x)",
                         who, (long long)S, INT32_MAX);
    return ATTN_OK;
}

/* A GPU whose blocks get less shared memory than the split kernel's ring and Q tile (sm_86 and sm_89
 * give 99 KB; D = 128 takes 100-112 KB) is refused, naming both, before any launch; the tests skip
 * such a head dim on it as they do for stage 06. Where the runtime cannot say, the launch will. */
static attn_status check_shared_memory(const char *who, int64_t D, int64_t R) {
#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
    int dev = 0, optin = 0;
    const int need = decode_smem_bytes_of(D, R);
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
        need > optin)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "%s: D = %lld needs %d bytes of shared memory a block, and this GPU gives %d", who,
                         (long long)D, need, optin);
#endif
    return ATTN_OK;
}

/* One step's launches, kp's pointers and lengths set by the caller: the sizes, the exponent's scale and
 * the workspace's two arrays (part_o, then part_lse) go in here. */
static attn_status launch_step(const char *who, const decode_shape *s, int64_t S, decode_params *kp,
                               void *workspace, size_t workspace_bytes, void *stream) {
    const int64_t R = s->H / s->H_kv * s->N_q;
    attn_status st = check_limits(who, s, R, S);
    if (st != ATTN_OK) return st;
    const size_t need = decode_gpu_workspace_bytes(s, S);
    if (need > 0 && (!workspace || workspace_bytes < need)) {
        char size[32];
        return attn_fail(ATTN_EINVAL,
                         "%s: the workspace must hold %s, the partials of %lld chunks (got %zu bytes)", who,
                         attn_size_text((double)need, size, sizeof size), (long long)S, workspace_bytes);
    }
    if ((st = check_shared_memory(who, s->D, R)) != ATTN_OK) return st;
    kp->H_kv = (int)s->H_kv, kp->N_q = (int)s->N_q, kp->R = (int)R, kp->S = (int)S;
    kp->causal = s->causal, kp->negate_q = s->scale < 0.0f, kp->scale_log2 = attn_exp2_scale(s->scale);
    kp->part_o = need ? (float *)workspace : NULL;
    kp->part_lse = need ? kp->part_o + s->B * s->H_kv * S * R * s->D : NULL;
#if defined(ATTN_HAVE_CUDA) && ATTN_HAVE_CUDA
    const char *why = "";
    const int e = s->dtype == ATTN_BF16 ? decode_launch_bf16(kp, s->B, s->D, stream, &why)
                                        : decode_launch_f16(kp, s->B, s->D, stream, &why);
    if (e != 0)
        return attn_fail(attn_cuda_status((cudaError_t)e), "%s: %s: %s", who, why,
                         cudaGetErrorString((cudaError_t)e));
    return ATTN_OK;
#else
    (void)stream;
    return attn_fail(ATTN_ENODEV, "%s runs on the GPU, and " ATTN_NO_CUDA_WHY, who);
#endif
}

attn_status decode_gpu_paged(const decode_shape *s, const int32_t *cache_len_dev, const void *q,
                             const decode_cache *c, const decode_opts *opt, void *o, float *lse,
                             void *workspace, size_t workspace_bytes, void *stream) {
    attn_status st = decode_validate_device(s, c, opt);
    if (st != ATTN_OK) return st;
    if (opt && opt->bug != DECODE_EXACT)
        return attn_fail(ATTN_EINVAL, "decode_gpu_paged: bug must be DECODE_EXACT (the planted bugs are the "
                                      "CPU model's)");
    if (!q || !o || !lse || !cache_len_dev)
        return attn_fail(ATTN_EINVAL,
                         "decode_gpu_paged: Q, O, LSE and the device's cache lengths must not be NULL");
    if (c->table_stride > INT32_MAX || c->num_pages * s->H_kv * c->page_size > ((int64_t)1 << 56))
        return attn_fail(ATTN_EUNSUPPORTED,
                         "decode_gpu_paged: table_stride must be at most %d, and the pool "
                         "at most 2^56 key rows (got %lld, %lld pages)",
                         INT32_MAX, (long long)c->table_stride, (long long)c->num_pages);
    decode_params kp = {0};
    kp.q = q, kp.k = c->k, kp.v = c->v, kp.o = o, kp.lse = lse;
    kp.block_table = c->block_table, kp.table_stride = c->table_stride, kp.page_size = c->page_size;
    kp.cache_len = cache_len_dev;
    return launch_step("decode_gpu_paged", s, decode_gpu_chunks(s, opt), &kp, workspace, workspace_bytes,
                       stream);
}

/* ---- the registry's entries: every sequence a cache of N_k keys, N = N_q new queries ------------------- */

static attn_status registry_checks(const char *who, const attn_problem *p) {
    if (p->cu_seqlens_q || p->cu_seqlens_k)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "%s takes no cu_seqlens (decode_gpu_paged takes per-sequence cache lengths)", who);
    if (p->causal && p->N > p->N_k)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "%s: causal needs N <= N_k, the N new queries being the last of N_k cached keys "
                         "(got N %lld, N_k %lld)",
                         who, (long long)p->N, (long long)p->N_k);
    return ATTN_OK;
}

static decode_shape shape_of(const attn_problem *p) {
    const decode_shape s = {p->B, p->H, p->H_kv, p->N, p->D, p->causal, p->scale, p->dtype, NULL};
    return s;
}

size_t stage15_workspace_bytes(const attn_problem *p) {
    const decode_shape s = shape_of(p);
    return decode_gpu_workspace_bytes(&s, chunks_for(p->B, p->H_kv, p->N_k, NULL));
}

/* The contiguous cache K, V [B, H_kv, N_k, D] is the pool of B pages of N_k keys, sequence b in page b:
 * no table (the kernel's identity), one length for all. */
attn_status stage15_run(const attn_problem *p, const attn_args *a) {
    attn_status st = registry_checks("stage 15", p);
    if (st != ATTN_OK) return st;
    const decode_shape s = shape_of(p);
    decode_params kp = {0};
    kp.q = a->q, kp.k = a->k, kp.v = a->v, kp.o = a->o, kp.lse = a->lse;
    kp.page_size = p->N_k, kp.len_all = (int)p->N_k;
    return launch_step("stage 15", &s, chunks_for(p->B, p->H_kv, p->N_k, NULL), &kp, a->workspace,
                       stage15_workspace_bytes(p), a->stream);
}

/* K and V as the harness's pool of shuffled pages, read through its block table (ATTN_TAKES_PAGED). */
attn_status stage15p_run(const attn_problem *p, const attn_args *a) {
    attn_status st = registry_checks("stage 15p", p);
    if (st != ATTN_OK) return st;
    if (!a->block_table_dev || a->page_size < 1 || a->table_stride * a->page_size < p->N_k)
        return attn_fail(
            ATTN_EINVAL,
            "stage 15p reads K and V through the harness's block table (attn_args.block_table_dev, "
            "page_size, table_stride covering N_k = %lld keys): got none",
            (long long)p->N_k);
    const decode_shape s = shape_of(p);
    decode_params kp = {0};
    kp.q = a->q, kp.k = a->k, kp.v = a->v, kp.o = a->o, kp.lse = a->lse;
    kp.block_table = a->block_table_dev, kp.table_stride = a->table_stride, kp.page_size = a->page_size;
    kp.len_all = (int)p->N_k;
    return launch_step("stage 15p", &s, chunks_for(p->B, p->H_kv, p->N_k, NULL), &kp, a->workspace,
                       stage15_workspace_bytes(p), a->stream);
}
