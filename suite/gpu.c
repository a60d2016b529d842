/*
 * gpu.c: what the harness does on the device: allocate, check that a stage's scratch fits before
 * allocating it, poison, time with CUDA events, and compare repeated runs bit for bit. Plain C
 * against the CUDA runtime API; without CUDA every entry point says so.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "harness.h"

#ifndef ATTN_HAVE_CUDA

attn_status attn_gpu_available(void) {
    return attn_fail(ATTN_ENODEV, "this build has no CUDA (" ATTN_NO_CUDA_WHY ")");
}
int attn_gpu_count(void) { return 0; }
const char *attn_gpu_name(void) { return "none"; }
void attn_gpu_driver(char *buf, size_t cap) {
    if (cap) buf[0] = '\0';
}
int attn_gpu_sm_clock_mhz(void) { return 0; }
attn_status attn_gpu_mem_info(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    return attn_gpu_available();
}
attn_status attn_gpu_hold_inputs(const attn_inputs *in) {
    (void)in;
    return attn_gpu_available();
}
void attn_gpu_release_inputs(void) {}
attn_status attn_run_gpu(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                         attn_result *res, uint16_t *o_first, float *lse_first) {
    return attn_fail(ATTN_ENODEV, "stage %s runs on the GPU, but this build has no CUDA (" ATTN_NO_CUDA_WHY ")",
                     s->id);
}
attn_status attn_run_gpu_backward(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                                  attn_result *res, const uint16_t *o, const float *lse, attn_grads *g) {
    return attn_run_gpu(s, in, opt, res, NULL, NULL);
}

attn_status attn_stage_available(const attn_stage *s) {
    if (!s->on_gpu && s->run) return ATTN_OK;
    return attn_fail(ATTN_ENODEV, "stage %s was not built: it runs on the GPU (%s), and " ATTN_NO_CUDA_WHY, s->id,
                     s->arch_text);
}

#else

#include <cuda_runtime_api.h>

#include "cuda_check.h"
#include "device_sm.h"

attn_status attn_gpu_available(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
        return attn_fail(ATTN_ENODEV, "no usable GPU: no NVIDIA GPU or driver found (CUDA says: %s)",
                         cudaGetErrorString(e));
    if (e != cudaSuccess)
        return attn_fail(ATTN_ENODEV, "no usable GPU: %s", cudaGetErrorString(e));
    if (n < 1) return attn_fail(ATTN_ENODEV, "no usable GPU: no CUDA device found");
    return ATTN_OK;
}

int attn_gpu_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

attn_status attn_stage_available(const attn_stage *s) {
    /* A multi-GPU stage is built only where NCCL was found too (10_context_parallel/cp.mk). */
    if (!s->run && s->max_gpus > 1)
        return attn_fail(ATTN_ENODEV, "stage %s was not built: it needs NCCL, and NCCL was not found when "
                         "this was built (set NCCL_HOME to a folder with include/nccl.h and "
                         "lib/libnccl.so; `make info` says where it looked)", s->id);
    if (!s->run)
        return attn_fail(ATTN_ENODEV, "stage %s was not built: " ATTN_NO_CUDA_WHY, s->id);
    if (!s->on_gpu) return ATTN_OK;
    if (attn_gpu_available() != ATTN_OK) {
        char why[512]; /* attn_fail writes the buffer attn_last_error() points to: copy it first */
        snprintf(why, sizeof why, "%s", attn_last_error());
        return attn_fail(ATTN_ENODEV, "stage %s runs on the GPU: %s", s->id, why);
    }
    const int sm = attn_device_sm();
    if (sm < 0) return attn_fail(ATTN_ENODEV, "stage %s: cannot read the GPU's compute capability", s->id);
    if ((s->min_sm && sm < s->min_sm) || (s->max_sm && sm > s->max_sm))
        return attn_fail(ATTN_ENODEV, "stage %s needs %s; this GPU (%s) is sm_%d", s->id, s->arch_text,
                         attn_gpu_name(), sm);
    return ATTN_OK;
}

const char *attn_gpu_name(void) {
    static char name[256];
    struct cudaDeviceProp prop;
    int dev = 0;
    if (attn_gpu_available() != ATTN_OK || cudaGetDevice(&dev) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return "none";
    snprintf(name, sizeof name, "%s", prop.name);
    return name;
}

void attn_gpu_driver(char *buf, size_t cap) {
    int v = 0;
    if (cap) buf[0] = '\0';
    if (cudaDriverGetVersion(&v) != cudaSuccess || v <= 0) { /* 0: no driver installed */
        cudaGetLastError();
        return;
    }
    snprintf(buf, cap, "CUDA %d.%d", v / 1000, v % 1000 / 10);
}

int attn_gpu_sm_clock_mhz(void) {
    int dev = 0, khz = 0;
    if (attn_gpu_available() != ATTN_OK || cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return khz / 1000;
}

attn_status attn_gpu_mem_info(size_t *free_bytes, size_t *total_bytes) {
    attn_status st = attn_gpu_available();
    if (st != ATTN_OK) return st;
    ATTN_CUDA(cudaMemGetInfo(free_bytes, total_bytes));
    return ATTN_OK;
}

#define GIB(x) ((double)(x) / 1073741824.0)

/* What a run writes, each poisoned before every run, copied out after the first and compared after the
 * last: O and LSE for a forward stage (LSE copied and compared only where the stage writes it), dQ, dK
 * and dV for a backward one. */
typedef struct {
    void *dev, *host; /* host: where the first run's copy goes */
    size_t bytes;
    int copy;
} gpu_out;

typedef struct {
    void *q, *k, *v, *o, *ws, *flush;
    void *d_o, *dq, *dk, *dv; /* a backward stage's dO (read) and gradients (written) */
    int32_t *cu_q, *cu_k;     /* device copies of cu_seqlens_q and _k, or NULL */
    uint16_t *o_raw;          /* --layout bnhd: the first run's O as the device holds it, before the
                                 transpose back to [B, H, N, D] (the repeatability compare reads it) */
    size_t in_bytes, lse_bytes, ws_bytes; /* each of Q and O (and of a backward's tensors); LSE; the
                                             stage's workspace */
    size_t kv_bytes; /* each of K and V [B, H_kv, N_k, D] (packed: H_kv x total_k), or of their page pools */
    int32_t *table;  /* ATTN_TAKES_PAGED: the block table, [B, table_stride] */
    int64_t page_size, num_pages, table_stride;
    size_t flush_bytes;
    float *lse;
    cudaStream_t stream;
    cudaEvent_t ev0, ev1;
    int have_stream, have_ev0, have_ev1, held_qkv; /* held_qkv: q, k, v belong to `held` below */
    gpu_out out[3];
    int nout;
} gpu_bufs;

/* Inputs held across runs (attn_gpu_hold_inputs): at N = 16384, D = 128 each tensor is 512 MB, and
 * the bench runs 14 GPU stages on it twice (causal and not); uploading once instead of 28 times saves
 * 40 GB of host-to-device copies over the sweep, and reusing o2 that many fresh 512 MB host buffers. */
static struct {
    const uint16_t *hq, *hk, *hv; /* the host arrays they were uploaded from */
    int64_t elems, kv_elems, rows; /* Q's elements, K's and V's, rows of LSE */
    int dev;
    void *q, *k, *v;
    uint16_t *o2; /* the repeatability copy of O, and of LSE (rows floats) */
    float *l2;
} held;

static int inputs_are_held(const attn_inputs *in, const attn_run_opts *opt) {
    int dev = -1;
    return held.q && opt->layout == ATTN_LAYOUT_BHND && in->q == held.hq && in->k == held.hk && in->v == held.hv &&
           attn_qkv_elems(&in->p) == held.elems && attn_kv_elems(&in->p) == held.kv_elems &&
           attn_rows(&in->p) == held.rows &&
           cudaGetDevice(&dev) == cudaSuccess && dev == held.dev;
}

void attn_gpu_release_inputs(void) {
    cudaFree(held.q), cudaFree(held.k), cudaFree(held.v);
    free(held.o2), free(held.l2);
    memset(&held, 0, sizeof held);
    cudaGetLastError();
}

attn_status attn_gpu_hold_inputs(const attn_inputs *in) {
    attn_gpu_release_inputs();
    if (in->p.cu_seqlens_q) /* packed sequences: no GPU stage takes them yet */
        return attn_fail(ATTN_EUNSUPPORTED, "holding the inputs on the GPU: no cu_seqlens");
    attn_status st = attn_gpu_available();
    if (st != ATTN_OK) return st;
    const size_t bytes = (size_t)attn_qkv_elems(&in->p) * 2, lse_bytes = (size_t)attn_rows(&in->p) * 4;
    const size_t kv_bytes = (size_t)attn_kv_elems(&in->p) * 2; /* K and V [B, H_kv, N_k, D] */
    cudaError_t e = cudaGetDevice(&held.dev);
    if (e == cudaSuccess) e = cudaMalloc(&held.q, bytes);
    if (e == cudaSuccess) e = cudaMalloc(&held.k, kv_bytes);
    if (e == cudaSuccess) e = cudaMalloc(&held.v, kv_bytes);
    if (e == cudaSuccess) e = cudaMemcpy(held.q, in->q, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(held.k, in->k, kv_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(held.v, in->v, kv_bytes, cudaMemcpyHostToDevice);
    held.o2 = e == cudaSuccess ? attn_alloc(bytes) : NULL;
    held.l2 = held.o2 ? attn_alloc(lse_bytes) : NULL;
    if (e != cudaSuccess || !held.l2) {
        attn_gpu_release_inputs();
        return e != cudaSuccess
                   ? attn_fail(ATTN_ENOMEM, "holding the inputs on the GPU: %s", cudaGetErrorString(e))
                   : attn_fail(ATTN_ENOMEM, "no host memory for the repeatability copy");
    }
    held.hq = in->q, held.hk = in->k, held.hv = in->v, held.elems = attn_qkv_elems(&in->p);
    held.kv_elems = attn_kv_elems(&in->p);
    held.rows = attn_rows(&in->p);
    return ATTN_OK;
}

static void gpu_release(gpu_bufs *b) {
    if (b->have_ev0) cudaEventDestroy(b->ev0);
    if (b->have_ev1) cudaEventDestroy(b->ev1);
    if (b->have_stream) cudaStreamDestroy(b->stream);
    if (!b->held_qkv) cudaFree(b->q), cudaFree(b->k), cudaFree(b->v);
    cudaFree(b->table);
    cudaFree(b->o), cudaFree(b->lse), cudaFree(b->ws);
    cudaFree(b->cu_q), cudaFree(b->cu_k);
    free(b->o_raw);
    cudaFree(b->d_o), cudaFree(b->dq), cudaFree(b->dk), cudaFree(b->dv);
    cudaFree(b->flush);
    cudaGetLastError(); /* a failed run must not poison the next one's error checks */
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* All bits set: NaN in fp16, bf16 and fp32, so an element a stage never writes fails the check. */
static attn_status poison(const gpu_bufs *b) {
    for (int i = 0; i < b->nout; i++) ATTN_CUDA(cudaMemsetAsync(b->out[i].dev, 0xff, b->out[i].bytes, b->stream));
    return ATTN_OK;
}

/* cold_l2: 4x the L2 size, so that writing it evicts whatever the previous run left there (an LRU-like
 * cache keeps little of a stream twice its size; 4x leaves margin for the hashed set mapping). */
static attn_status alloc_flush(gpu_bufs *b) {
    int dev = 0, l2 = 0;
    ATTN_CUDA(cudaGetDevice(&dev));
    ATTN_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    b->flush_bytes = 4 * (size_t)(l2 > 0 ? l2 : 64 << 20);
    ATTN_CUDA(cudaMalloc(&b->flush, b->flush_bytes));
    return ATTN_OK;
}

static attn_status upload(void **dev, const void *host, size_t bytes) {
    ATTN_CUDA(cudaMalloc(dev, bytes));
    if (host) ATTN_CUDA(cudaMemcpy(*dev, host, bytes, cudaMemcpyHostToDevice));
    return ATTN_OK;
}

/* The batch, heads and rows of a head of Q (kv 0) or K and V (kv 1) as the layouts see them: packed
 * sequences are one batch of total rows. */
static void tensor_dims(const attn_problem *p, int kv, int64_t *outer, int64_t *heads, int64_t *rows) {
    const int32_t *cu = kv ? p->cu_seqlens_k : p->cu_seqlens_q;
    *outer = cu ? 1 : p->B;
    *heads = kv ? p->H_kv : p->H;
    *rows = cu ? cu[p->B] : kv ? p->N_k : p->N;
}

/* upload() of a [B, heads, rows, D] host tensor into the run's layout: transposed to [B, rows, heads,
 * D] through a host copy for BNHD. */
static attn_status upload_tensor(void **dev, const uint16_t *host, size_t bytes, const attn_problem *p, int kv,
                                 attn_layout layout) {
    if (layout == ATTN_LAYOUT_BHND) return upload(dev, host, bytes);
    int64_t outer, heads, rows;
    tensor_dims(p, kv, &outer, &heads, &rows);
    uint16_t *t = attn_alloc(bytes);
    if (!t) return attn_fail(ATTN_ENOMEM, "cannot allocate host memory to transpose the inputs to --layout bnhd");
    attn_transpose_heads(t, host, outer, heads, rows, p->D);
    const attn_status st = upload(dev, t, bytes);
    free(t);
    return st;
}

/* ATTN_TAKES_PAGED: K and V as pools of pages of ATTN_PAGE_SIZE keys [num_pages, H_kv, page_size, D]:
 * B ceil(N_k / page_size) pages hold the keys, handed out in a shuffled order (a fixed seed: the same
 * pool every run), and PAGED_SPARE more that no table entry names. The spare pages and the slots past
 * N_k hold NaN, so that a stage that reads a key it should not (the table ignored, a slot past the
 * end) fails the check instead of passing by luck. */
#define PAGED_SPARE 3

static void paged_sizes(const attn_problem *p, gpu_bufs *b) {
    b->page_size = ATTN_PAGE_SIZE;
    b->table_stride = (p->N_k + b->page_size - 1) / b->page_size;
    b->num_pages = p->B * b->table_stride + PAGED_SPARE;
    b->kv_bytes = (size_t)(b->num_pages * p->H_kv * b->page_size * p->D) * 2;
}

/* One tensor [B, H_kv, N_k, D] (host) into the pool at dev, page by page through the table. */
static attn_status upload_pool(const attn_problem *p, const gpu_bufs *b, const int32_t *table, const uint16_t *src,
                               uint16_t *pool, void *dev) {
    const uint16_t nan = attn_from_f32(NAN, p->dtype);
    const int64_t ps = b->page_size, D = p->D, elems = (int64_t)(b->kv_bytes / 2);
    for (int64_t e = 0; e < elems; e++) pool[e] = nan;
    for (int64_t bh = 0; bh < p->B * p->H_kv; bh++)
        for (int64_t j = 0; j < p->N_k; j++) {
            const int64_t page = table[bh / p->H_kv * b->table_stride + j / ps];
            memcpy(pool + ((page * p->H_kv + bh % p->H_kv) * ps + j % ps) * D, src + (bh * p->N_k + j) * D,
                   (size_t)D * 2);
        }
    ATTN_CUDA(cudaMemcpy(dev, pool, b->kv_bytes, cudaMemcpyHostToDevice));
    return ATTN_OK;
}

/* The shuffled table (Fisher-Yates over the page ids, xorshift64*), the K and V pools, all uploaded. */
static attn_status upload_pages(const attn_inputs *in, gpu_bufs *b) {
    const attn_problem *p = &in->p;
    const int64_t used = p->B * b->table_stride;
    int32_t *order = attn_alloc((size_t)b->num_pages * sizeof(int32_t));
    uint16_t *pool = order ? attn_alloc(b->kv_bytes) : NULL;
    if (!pool) {
        free(order);
        return attn_fail(ATTN_ENOMEM, "no host memory for the pool of %lld pages (%.2f GiB)", (long long)b->num_pages,
                         GIB(b->kv_bytes));
    }
    uint64_t x = 0x9a6e5eedull;
    for (int64_t e = 0; e < b->num_pages; e++) order[e] = (int32_t)e;
    for (int64_t e = b->num_pages - 1; e > 0; e--) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        const int64_t f = (int64_t)((x * 0x2545f4914f6cdd1dull) % (uint64_t)(e + 1));
        const int32_t t = order[e];
        order[e] = order[f], order[f] = t;
    }
    attn_status st = upload(&b->k, NULL, b->kv_bytes);
    if (st == ATTN_OK) st = upload(&b->v, NULL, b->kv_bytes);
    if (st == ATTN_OK) st = upload((void **)&b->table, order, (size_t)used * sizeof(int32_t));
    if (st == ATTN_OK) st = upload_pool(p, b, order, in->k, pool, b->k);
    if (st == ATTN_OK) st = upload_pool(p, b, order, in->v, pool, b->v);
    free(order), free(pool);
    return st;
}

/* Fit first, allocate second: the naive stages' scratch grows as N^2 and a framework simply crashes
 * when it does not fit; here the run is refused with the numbers. Sizes into b, Q, K, V uploaded (or
 * the held copies taken; a paged stage's pools built), O and LSE allocated (a backward stage: uploaded
 * from o and lse, with dO, and dQ, dK, dV allocated), the stream and the events made; the workspace
 * comes later. */
static attn_status fit_and_allocate(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                                    const uint16_t *o, const float *lse, attn_result *res, gpu_bufs *b) {
    const attn_problem *p = &in->p;
    const int backward = s->pass != ATTN_FORWARD, paged = (s->takes & ATTN_TAKES_PAGED) != 0;
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    /* No backward GPU stage takes GQA, N_k != N or cu_seqlens (the registry refuses them first): its
     * gradient buffers below are sized for K and V of Q's shape, so such a problem must not get this far. */
    if (backward && (p->H_kv != p->H || p->N_k != p->N || p->cu_seqlens_q))
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s: the backward GPU runs take H_kv == H, N_k == N, no cu_seqlens",
                         s->id);
    /* attn_run_gpu may be called with any valid problem, up to 2^62 elements, where 8 * in_bytes
     * would wrap past 2^64 and pass the fit check below. Up to 2^59 elements nothing wraps:
     * 8 * 2^60 + 4 * 2^59 bytes < 2^64 (a pool adds at most a page a sequence and three). */
    const double elems = (double)attn_qkv_elems(p) > (double)attn_kv_elems(p) ? (double)attn_qkv_elems(p)
                                                                              : (double)attn_kv_elems(p);
    if (elems > 0x1p59)
        return attn_fail(ATTN_ENOMEM, "the tensors would need %.3g EiB of device memory (%.3g elements"
                         " per tensor; limit 2^59)", ((backward ? 8.0 : 4.0) * 2.0 * elems + 4.0 * (double)attn_rows(p)) / 0x1p60, elems);
    b->in_bytes = (size_t)attn_qkv_elems(p) * 2, b->lse_bytes = (size_t)attn_rows(p) * 4;
    b->kv_bytes = (size_t)attn_kv_elems(p) * 2;
    const size_t cu_bytes = p->cu_seqlens_q ? 2 * (size_t)(p->B + 1) * 4 : 0;
    if (paged) paged_sizes(p, b);
    b->ws_bytes = s->workspace_bytes ? s->workspace_bytes(p) : 0;
    st = attn_gpu_available();
    if (st != ATTN_OK)
        return attn_fail(ATTN_ENODEV, "stage %s runs on the GPU: %s", s->id, attn_last_error());

    size_t free_b = 0, total_b = 0;
    ATTN_CUDA(cudaMemGetInfo(&free_b, &total_b));
    res->inputs_held = b->held_qkv = !paged && inputs_are_held(in, opt);
    /* held: Q, K and V are there already; a backward stage adds dO and its three gradients */
    const size_t io_bytes = ((b->held_qkv ? 1 : 2) + (backward ? 4 : 0)) * b->in_bytes +
                            (b->held_qkv ? 0 : 2 * b->kv_bytes) + b->lse_bytes + cu_bytes;
    const char *io_what = backward ? (b->held_qkv ? "O, LSE, dO, dQ, dK and dV" : "Q, K, V, O, LSE, dO, dQ, dK and dV")
                                   : (b->held_qkv ? "O and LSE" : "Q, K, V, O and LSE");
    if (io_bytes > free_b) return attn_fail(ATTN_ENOMEM, "%s need %.2f GiB, %.2f GiB free", io_what, GIB(io_bytes), GIB(free_b));
    if (b->ws_bytes > free_b - io_bytes)
        return attn_fail(ATTN_ENOMEM, "stage %s needs %.2f GiB for %s, %.2f GiB free", s->id,
                         GIB(b->ws_bytes), s->workspace_what ? s->workspace_what : "scratch",
                         GIB(free_b - io_bytes));
    if (b->held_qkv) {
        b->q = held.q, b->k = held.k, b->v = held.v;
    } else {
        if ((st = upload_tensor(&b->q, in->q, b->in_bytes, p, 0, opt->layout)) != ATTN_OK ||
            (st = paged ? upload_pages(in, b) : upload_tensor(&b->k, in->k, b->kv_bytes, p, 1, opt->layout)) !=
                ATTN_OK ||
            (!paged && (st = upload_tensor(&b->v, in->v, b->kv_bytes, p, 1, opt->layout)) != ATTN_OK))
            return st;
    }
    if (p->cu_seqlens_q && ((st = upload((void **)&b->cu_q, p->cu_seqlens_q, (size_t)(p->B + 1) * 4)) != ATTN_OK ||
                            (st = upload((void **)&b->cu_k, p->cu_seqlens_k, (size_t)(p->B + 1) * 4)) != ATTN_OK))
        return st;
    if ((st = upload(&b->o, backward ? o : NULL, b->in_bytes)) != ATTN_OK ||
        (st = upload((void **)&b->lse, backward ? lse : NULL, b->lse_bytes)) != ATTN_OK)
        return st;
    if (backward && ((st = upload(&b->d_o, in->d_o, b->in_bytes)) != ATTN_OK || (st = upload(&b->dq, NULL, b->in_bytes)) != ATTN_OK ||
                     (st = upload(&b->dk, NULL, b->in_bytes)) != ATTN_OK || (st = upload(&b->dv, NULL, b->in_bytes)) != ATTN_OK))
        return st;
    ATTN_CUDA(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
    b->have_stream = 1;
    ATTN_CUDA(cudaEventCreate(&b->ev0));
    b->have_ev0 = 1;
    ATTN_CUDA(cudaEventCreate(&b->ev1));
    b->have_ev1 = 1;
    return ATTN_OK;
}

/* The stage's workspace, after the free device memory is read into *free_before: the first run's
 * measured extra memory is then the workspace and whatever the stage allocates itself. */
static attn_status alloc_workspace(const attn_stage *s, gpu_bufs *b, size_t *free_before) {
    size_t total_b = 0;
    ATTN_CUDA(cudaDeviceSynchronize());
    ATTN_CUDA(cudaMemGetInfo(free_before, &total_b));
    if (!b->ws_bytes) return ATTN_OK;
    cudaError_t e = cudaMalloc(&b->ws, b->ws_bytes);
    if (e != cudaSuccess)
        return attn_fail(ATTN_ENOMEM, "stage %s needs %.2f GiB for %s, and allocating it failed: %s", s->id,
                         GIB(b->ws_bytes), s->workspace_what, cudaGetErrorString(e));
    return ATTN_OK;
}

/* The first run is the one that is checked: poisoned first, its outputs copied out. */
static attn_status first_run(const attn_stage *s, const attn_problem *p, const attn_args *a, size_t free_before,
                             attn_result *res, gpu_bufs *b) {
    size_t free_after = 0, total_b = 0;
    attn_status st;
    if ((st = poison(b)) != ATTN_OK) return st;
    if ((st = s->run(p, a)) != ATTN_OK) return st;
    ATTN_CUDA(cudaStreamSynchronize(b->stream));
    ATTN_CUDA(cudaGetLastError());
    ATTN_CUDA(cudaMemGetInfo(&free_after, &total_b));
    res->extra_measured = free_before > free_after ? free_before - free_after : 0;
    for (int i = 0; i < b->nout; i++)
        if (b->out[i].copy) ATTN_CUDA(cudaMemcpy(b->out[i].host, b->out[i].dev, b->out[i].bytes, cudaMemcpyDeviceToHost));
    return ATTN_OK;
}

/* opt->warmup untimed runs, then opt->repeat timed ones (CUDA events around each run, the output
 * poisoned and, with cold_l2, the L2 flushed outside the window); min, median and max into res. */
static attn_status timed_runs(const attn_stage *s, const attn_problem *p, const attn_args *a,
                              const attn_run_opts *opt, attn_result *res, gpu_bufs *b) {
    attn_status st = ATTN_OK;
    for (int w = 0; w < opt->warmup; w++) {
        if ((st = s->run(p, a)) != ATTN_OK) return st;
    }
    float *ms = attn_alloc((size_t)(opt->repeat > 0 ? opt->repeat : 1) * sizeof(float));
    if (!ms) return attn_fail(ATTN_ENOMEM, "cannot allocate the timing array");
    for (int r = 0; r < opt->repeat && st == ATTN_OK; r++) {
        /* Poison outside the timed window, so every timed run writes a fresh output. */
        if ((st = poison(b)) != ATTN_OK) break;
        cudaError_t e = b->flush ? cudaMemsetAsync(b->flush, r & 0xff, b->flush_bytes, b->stream) : cudaSuccess;
        if (e == cudaSuccess) e = cudaEventRecord(b->ev0, b->stream);
        if (e == cudaSuccess && (st = s->run(p, a)) == ATTN_OK) e = cudaEventRecord(b->ev1, b->stream);
        if (e == cudaSuccess && st == ATTN_OK) e = cudaEventSynchronize(b->ev1);
        if (e == cudaSuccess && st == ATTN_OK) e = cudaEventElapsedTime(&ms[r], b->ev0, b->ev1);
        if (e != cudaSuccess && st == ATTN_OK)
            st = attn_fail(ATTN_ECUDA, "timing stage %s: %s", s->id, cudaGetErrorString(e));
        res->runs = r + 1;
    }
    if (st == ATTN_OK && res->runs > 0) {
        qsort(ms, (size_t)res->runs, sizeof *ms, cmp_float);
        res->ms_min = ms[0];
        res->ms_max = ms[res->runs - 1];
        res->ms_median = res->runs % 2 ? ms[res->runs / 2]
                                       : 0.5 * (ms[res->runs / 2 - 1] + ms[res->runs / 2]);
    }
    free(ms);
    if (st != ATTN_OK) return st;
    ATTN_CUDA(cudaStreamSynchronize(b->stream));
    ATTN_CUDA(cudaGetLastError());
    return ATTN_OK;
}

/* Bit-for-bit repeatability of the last timed run against the first (checked) one: res->identical.
 * Held inputs come with host buffers for the copies of O and LSE. */
static attn_status compare_last_run(attn_result *res, const gpu_bufs *b) {
    res->identical = 1;
    for (int i = 0; i < b->nout; i++) {
        if (!b->out[i].copy) continue;
        const int own = !b->held_qkv || i >= 2 || b->dq;
        void *copy = own ? attn_alloc(b->out[i].bytes) : i == 0 ? (void *)held.o2 : (void *)held.l2;
        if (!copy) return attn_fail(ATTN_ENOMEM, "cannot allocate the repeatability copy");
        cudaError_t e = cudaMemcpy(copy, b->out[i].dev, b->out[i].bytes, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess && memcmp(copy, b->out[i].host, b->out[i].bytes) != 0) res->identical = 0;
        if (own) free(copy);
        if (e != cudaSuccess) return attn_fail(ATTN_ECUDA, "copying the outputs back: %s", cudaGetErrorString(e));
    }
    return ATTN_OK;
}

/* The outputs a run writes: O and LSE (copied into host[0] and host[1]) for a forward stage, dQ, dK and
 * dV (host[0..2]) for a backward one. */
static void set_outputs(const attn_stage *s, void *const host[3], gpu_bufs *b) {
    if (s->pass == ATTN_FORWARD) {
        b->nout = 2;
        b->out[0] = (gpu_out){b->o, host[0], b->in_bytes, 1};
        b->out[1] = (gpu_out){b->lse, host[1], b->lse_bytes, s->writes_lse};
        return;
    }
    b->nout = 3;
    b->out[0] = (gpu_out){b->dq, host[0], b->in_bytes, 1};
    b->out[1] = (gpu_out){b->dk, host[1], b->in_bytes, 1};
    b->out[2] = (gpu_out){b->dv, host[2], b->in_bytes, 1};
}

/* One stage on the GPU: allocate, the checked first run, the timed runs, the repeatability check. A
 * backward stage reads o and lse (host, its forward's). */
static attn_status gpu_body(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt, attn_result *res,
                            const uint16_t *o, const float *lse, void *const host[3], gpu_bufs *b) {
    size_t free_before = 0;
    attn_status st = fit_and_allocate(s, in, opt, o, lse, res, b);
    if (st == ATTN_OK && opt->cold_l2) st = alloc_flush(b);
    if (st == ATTN_OK) st = alloc_workspace(s, b, &free_before);
    if (st != ATTN_OK) return st;
    const attn_problem *p = &in->p;
    /* --layout bnhd: the first run's O comes back as the device holds it, into o_raw, and is transposed
     * to [B, H, N, D] for the check after the run */
    void *const o_first = host[0];
    void *staged[3] = {host[0], host[1], host[2]};
    if (opt->layout != ATTN_LAYOUT_BHND && host[0]) {
        if (!(b->o_raw = attn_alloc(b->in_bytes)))
            return attn_fail(ATTN_ENOMEM, "cannot allocate host memory to transpose O back from --layout %s",
                             attn_layout_name(opt->layout));
        staged[0] = b->o_raw;
    }
    set_outputs(s, staged, b);
    res->extra_bytes = b->ws_bytes;
    attn_args a = {.q = b->q, .k = b->k, .v = b->v, .o = b->o, .lse = b->lse, .workspace = b->ws,
                   .stream = (void *)b->stream, .gpus = opt->gpus, .d_o = b->d_o, .dq = b->dq,
                   .dk = b->dk, .dv = b->dv, .cu_seqlens_q_dev = b->cu_q, .cu_seqlens_k_dev = b->cu_k,
                   .block_table_dev = b->table, .page_size = b->page_size, .num_pages = b->num_pages,
                   .table_stride = b->table_stride};
    if (s->takes & ATTN_TAKES_STRIDES) { /* the layout spelled out, contiguous included */
        int64_t outer, heads, rows;
        tensor_dims(p, 0, &outer, &heads, &rows);
        a.q_stride = a.o_stride = attn_layout_strides(opt->layout, heads, rows, p->D, p->cu_seqlens_q != NULL);
        tensor_dims(p, 1, &outer, &heads, &rows);
        a.k_stride = a.v_stride = attn_layout_strides(opt->layout, heads, rows, p->D, p->cu_seqlens_k != NULL);
    }
    if ((st = first_run(s, p, &a, free_before, res, b)) != ATTN_OK) return st;
    if (b->o_raw) {
        int64_t outer, heads, rows;
        tensor_dims(p, 0, &outer, &heads, &rows);
        attn_transpose_heads(o_first, b->o_raw, outer, rows, heads, p->D);
    }
    if ((st = timed_runs(s, &in->p, &a, opt, res, b)) != ATTN_OK) return st;
    res->identical = -1;
    return opt->check && res->runs > 0 ? compare_last_run(res, b) : ATTN_OK;
}

attn_status attn_run_gpu(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                         attn_result *res, uint16_t *o_first, float *lse_first) {
    if (s->pass != ATTN_FORWARD) return attn_fail(ATTN_EINVAL, "stage %s is a backward stage", s->id);
    gpu_bufs b;
    memset(&b, 0, sizeof b);
    void *const host[3] = {o_first, lse_first, NULL};
    attn_status st = gpu_body(s, in, opt, res, NULL, NULL, host, &b);
    gpu_release(&b);
    return st;
}

attn_status attn_run_gpu_backward(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                                  attn_result *res, const uint16_t *o, const float *lse, attn_grads *g) {
    if (s->pass == ATTN_FORWARD) return attn_fail(ATTN_EINVAL, "stage %s is a forward stage", s->id);
    gpu_bufs b;
    memset(&b, 0, sizeof b);
    void *const host[3] = {g->dq, g->dk, g->dv};
    attn_status st = gpu_body(s, in, opt, res, o, lse, host, &b);
    gpu_release(&b);
    return st;
}

#endif
