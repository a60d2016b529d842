/*
 * cp_ring.c: stage 10's ring (cp_ring.h). One host thread, G ranks, two streams per rank.
 *
 * One pass, as enqueued for every rank r (s = 0 .. G-1 steps; KV[cur] is the shard in hand):
 *
 *   compute  | start | calls on KV[0] | calls on KV[1] | calls on KV[2] | ...  | finish | gather |
 *   comm     |       | send KV[0] -> r+1, recv KV[1] <- r-1 | send KV[1], recv KV[2] | ...
 *
 * Step s computes on KV[cur(s)] while the comm stream passes that same shard on and receives the
 * next one into KV[nxt(s)]; cur(0) = 0 (the rank's own shard), then the two receive buffers take
 * turns: cur(s) = 1, 2, 1, 2 ..., nxt(s) = cur(s+1). Events order the two streams:
 *   compute of step s   waits  ev_arrived (the recv of step s-1 filled KV[cur(s)])
 *   recv of step s      waits  ev_computed of step s-1 when s >= 2 (KV[nxt(s)] = KV[cur(s-1)] is
 *                              free only when step s-1's calls have read it); at s = 0, ev_start
 * A send reads the buffer the same comm stream received before it, so it needs no event. Both
 * streams of step s start once steps s-1 of both are done: the step takes max(compute, comm).
 *
 * NCCL: ncclCommInitAll makes one communicator per GPU; each exchange is one group of G sends and
 * G receives (ncclGroupStart/End around them, as one thread driving several GPUs must). Each shard
 * (the rank's K and V, S chunks each, padding rows included) travels as one message of bytes.
 */
#include "cp_ring.h"

#if defined(ATTN_HAVE_CUDA) && defined(ATTN_HAVE_NCCL)

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cp_kernels.h"
#include "cuda_check.h"

#define CP_NCCL(call)                                                                                \
    do {                                                                                             \
        ncclResult_t cp_r_ = (call);                                                                 \
        if (cp_r_ != ncclSuccess)                                                                    \
            return attn_fail(ATTN_ECUDA, "%s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__,   \
                             ncclGetErrorString(cp_r_), ncclGetLastError(NULL));                     \
    } while (0)

typedef struct {
    int dev;
    cudaStream_t compute, comm;
    cudaEvent_t ev_start, ev_computed, ev_arrived, ev_sent, ev_done;
    void *q;                /* [S][BH][c][D] */
    void *kv[3];            /* [2][S][BH][c][D]: K chunks, then V chunks */
    float *o_acc, *lse_acc; /* [S][BH][c][D], [S][BH][c] */
    void *o_part;           /* [BH][c][D] */
    float *lse_part;        /* [BH][c] */
    void *qg, *kg, *vg;     /* [BH][b][D] copies for calls against the short chunk */
    ncclComm_t nccl;
} cp_rank;

struct cp_ring {
    attn_problem p;
    cp_plan pl;
    int one_gpu;
    const attn_stage *local;
    size_t slot_bytes; /* one chunk of Q, K, V or O: BH * c * D * 2 */
    size_t rank_bytes;
    cudaEvent_t ev_src; /* recorded on the caller's stream before a scatter */
    int ev_src_dev;
    cp_rank r[ATTN_MAX_GPUS];
};

/* ---- helpers -------------------------------------------------------------------------------- */

/* height rows of width bytes, between any two GPUs (or within one): the shards are row ranges of
 * every (b, h) head, so one pitched copy moves a chunk for all B*H heads. */
static attn_status copy_rows(void *dst, size_t dst_pitch, int dst_dev, const void *src, size_t src_pitch,
                             int src_dev, size_t width, size_t height, cudaStream_t stream) {
    if (width == 0 || height == 0) return ATTN_OK;
    if (dst_dev == src_dev) {
        ATTN_CUDA(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyDeviceToDevice, stream));
        return ATTN_OK;
    }
    struct cudaMemcpy3DPeerParms prm;
    memset(&prm, 0, sizeof prm);
    prm.srcPtr = (struct cudaPitchedPtr){(void *)src, src_pitch, width, height};
    prm.dstPtr = (struct cudaPitchedPtr){dst, dst_pitch, width, height};
    prm.srcDevice = src_dev;
    prm.dstDevice = dst_dev;
    prm.extent = (struct cudaExtent){width, height, 1};
    if (cudaMemcpy3DPeerAsync(&prm, stream) == cudaSuccess) return ATTN_OK;
    /* Should a driver refuse the pitched peer copy: a 2D copy between devices through
     * unified addressing, then one plain peer copy per row block, do the same. */
    cudaGetLastError();
    if (cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyDefault, stream) == cudaSuccess)
        return ATTN_OK;
    cudaGetLastError();
    for (size_t h = 0; h < height; h++)
        ATTN_CUDA(cudaMemcpyPeerAsync((char *)dst + h * dst_pitch, dst_dev, (const char *)src + h * src_pitch, src_dev,
                                      width, stream));
    return ATTN_OK;
}

static int64_t rows_per_slot(const cp_ring *R) { return R->p.B * R->p.H * R->pl.c; }
static char *slot_ptr(void *base, const cp_ring *R, int i) { return (char *)base + (size_t)i * R->slot_bytes; }
static int cur_buf(int s) { return s == 0 ? 0 : 1 + (s - 1) % 2; }
static int nxt_buf(int s) { return 1 + s % 2; }

static attn_status dev_malloc(void **p, size_t bytes, size_t *total) {
    ATTN_CUDA(cudaMalloc(p, bytes));
    *total += bytes;
    return ATTN_OK;
}

/* ---- making and freeing --------------------------------------------------------------------- */

static attn_status rank_alloc(cp_ring *R, cp_rank *k, int gathers) {
    const size_t S = (size_t)R->pl.S, slot = R->slot_bytes, rows = (size_t)rows_per_slot(R);
    const size_t D = (size_t)R->p.D;
    size_t total = 0;
    attn_status st;
    ATTN_CUDA(cudaSetDevice(k->dev));
    if (attn_stage_available(R->local) != ATTN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", attn_last_error());
        return attn_fail(ATTN_ENODEV, "stage 10: GPU %d cannot run the local stage: %s", k->dev, why);
    }
    /* The exchange's kernels (NCCL's) get the higher priority: when an attention block retires, the
     * SM goes to them first, so a step's exchange does not wait behind a whole grid of attention. */
    int least = 0, greatest = 0;
    ATTN_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    ATTN_CUDA(cudaStreamCreateWithPriority(&k->compute, cudaStreamNonBlocking, least));
    ATTN_CUDA(cudaStreamCreateWithPriority(&k->comm, cudaStreamNonBlocking, greatest));
    cudaEvent_t *ev[5] = {&k->ev_start, &k->ev_computed, &k->ev_arrived, &k->ev_sent, &k->ev_done};
    for (int i = 0; i < 5; i++) ATTN_CUDA(cudaEventCreateWithFlags(ev[i], cudaEventDisableTiming));
    if ((st = dev_malloc(&k->q, S * slot, &total)) != ATTN_OK) return st;
    for (int b = 0; b < (R->pl.G >= 3 ? 3 : 2); b++)
        if ((st = dev_malloc(&k->kv[b], 2 * S * slot, &total)) != ATTN_OK) return st;
    if ((st = dev_malloc((void **)&k->o_acc, S * rows * D * 4, &total)) != ATTN_OK) return st;
    if ((st = dev_malloc((void **)&k->lse_acc, S * rows * 4, &total)) != ATTN_OK) return st;
    if ((st = dev_malloc(&k->o_part, slot, &total)) != ATTN_OK) return st;
    if ((st = dev_malloc((void **)&k->lse_part, rows * 4, &total)) != ATTN_OK) return st;
    if (gathers) {
        if ((st = dev_malloc(&k->qg, slot, &total)) != ATTN_OK) return st;
        if ((st = dev_malloc(&k->kg, slot, &total)) != ATTN_OK) return st;
        if ((st = dev_malloc(&k->vg, slot, &total)) != ATTN_OK) return st;
    }
    /* Padding rows are zero queries and keys for good: scatters write real rows only, and the shards
     * that arrive carry their sender's zeros. cudaMemset runs on the legacy stream, which the ring's
     * non-blocking streams do not wait for: wait here, once. */
    ATTN_CUDA(cudaMemset(k->q, 0, S * slot));
    ATTN_CUDA(cudaMemset(k->kv[0], 0, 2 * S * slot));
    ATTN_CUDA(cudaDeviceSynchronize());
    R->rank_bytes = total;
    return ATTN_OK;
}

/* Direct copies between the caller's GPU and every rank (scatter, gather) where the GPUs allow it. */
static attn_status enable_peers(int a, int b) {
    int can = 0;
    if (a == b || cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can) {
        cudaGetLastError();
        return ATTN_OK;
    }
    ATTN_CUDA(cudaSetDevice(a));
    cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
    else ATTN_CUDA(e);
    return ATTN_OK;
}

static attn_status ring_setup(cp_ring *R, int cur) {
    const int G = R->pl.G;
    const int gathers = !R->pl.causal && (int64_t)R->pl.n * R->pl.c > R->pl.N;
    attn_status st;
    for (int r = 0; r < G; r++) {
        R->r[r].dev = R->one_gpu ? cur : r;
        if ((st = rank_alloc(R, &R->r[r], gathers)) != ATTN_OK) return st;
    }
    if (R->one_gpu) return ATTN_OK;
    for (int r = 0; r < G; r++) {
        if ((st = enable_peers(cur, r)) != ATTN_OK) return st;
        if ((st = enable_peers(r, cur)) != ATTN_OK) return st;
    }
    /* The ring needs send and receive only. NVLink multicast (NVLS) serves collectives, which stage 10
     * never calls, and setting it up on a shared host can take its GPUs out of service: keep it off. */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    ncclComm_t comms[ATTN_MAX_GPUS];
    int devs[ATTN_MAX_GPUS];
    for (int r = 0; r < G; r++) devs[r] = r;
    CP_NCCL(ncclCommInitAll(comms, G, devs));
    for (int r = 0; r < G; r++) R->r[r].nccl = comms[r];
    return ATTN_OK;
}

attn_status cp_ring_create(cp_ring **out, const attn_problem *p, const attn_stage *local, int G, int one_gpu) {
    *out = NULL;
    if (G < 2 || G > ATTN_MAX_GPUS)
        return attn_fail(ATTN_EINVAL, "stage 10: a ring needs 2 to %d ranks (got %d)", ATTN_MAX_GPUS, G);
    int cur = 0;
    ATTN_CUDA(cudaGetDevice(&cur));
    if (!local) return attn_fail(ATTN_EINVAL, "stage 10: the ring needs a local stage");
    cp_ring *R = calloc(1, sizeof *R);
    if (!R) return attn_fail(ATTN_ENOMEM, "stage 10: cannot allocate the ring");
    R->p = *p;
    R->pl = cp_plan_make(p->N, G, p->causal);
    R->one_gpu = one_gpu;
    R->local = local;
    R->slot_bytes = (size_t)(rows_per_slot(R) * p->D) * 2;
    R->ev_src_dev = -1;
    attn_status st = ring_setup(R, cur);
    if (st != ATTN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", attn_last_error());
        cp_ring_destroy(R);
        cudaSetDevice(cur);
        return attn_fail(st, "%s", why);
    }
    cudaSetDevice(cur);
    *out = R;
    return ATTN_OK;
}

void cp_ring_destroy(cp_ring *R) {
    if (!R) return;
    for (int r = 0; r < R->pl.G; r++) {
        cp_rank *k = &R->r[r];
        if (!k->compute) continue; /* never set up */
        cudaSetDevice(k->dev);
        cudaStreamSynchronize(k->compute);
        if (k->comm) cudaStreamSynchronize(k->comm);
        if (k->nccl) ncclCommDestroy(k->nccl);
        void *bufs[] = {k->q, k->kv[0], k->kv[1], k->kv[2], k->o_acc, k->lse_acc, k->o_part, k->lse_part,
                        k->qg, k->kg, k->vg};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
        cudaEvent_t ev[5] = {k->ev_start, k->ev_computed, k->ev_arrived, k->ev_sent, k->ev_done};
        for (int i = 0; i < 5; i++)
            if (ev[i]) cudaEventDestroy(ev[i]);
        cudaStreamDestroy(k->compute);
        if (k->comm) cudaStreamDestroy(k->comm);
    }
    if (R->ev_src) {
        cudaSetDevice(R->ev_src_dev);
        cudaEventDestroy(R->ev_src);
    }
    cudaGetLastError(); /* a failed ring must not poison the next call's error checks */
    free(R);
}

void cp_ring_describe(const cp_ring *R, cp_ring_info *info) {
    info->plan = R->pl;
    info->local = R->local;
    info->rank_bytes = R->rank_bytes;
    info->shard_bytes = 2 * (size_t)R->pl.S * R->slot_bytes;
    info->sent_bytes = (size_t)(R->pl.G - 1) * info->shard_bytes;
}

/* ---- moving shards in and out ---------------------------------------------------------------- */

/* For each rank and slot, the chunk's real rows as a pitched copy: `global` is [BH][N][row] with
 * rows of row_bytes, `shard` is [S][BH][c][row]. to_shard picks the direction. */
static attn_status move_chunks(cp_ring *R, int r, void *global, int global_dev, void *shard, size_t row_bytes,
                               int to_shard, cudaStream_t stream) {
    const cp_plan *pl = &R->pl;
    const size_t BH = (size_t)(R->p.B * R->p.H), g_pitch = (size_t)R->p.N * row_bytes, s_pitch = (size_t)pl->c * row_bytes;
    for (int slot = 0; slot < pl->S; slot++) {
        const int ch = cp_chunk(pl, r, slot);
        const size_t a = (size_t)cp_chunk_rows(pl, ch);
        char *g = (char *)global + (size_t)ch * pl->c * row_bytes;
        char *s = (char *)shard + (size_t)slot * BH * s_pitch;
        attn_status st = to_shard ? copy_rows(s, s_pitch, R->r[r].dev, g, g_pitch, global_dev, a * row_bytes, BH, stream)
                                  : copy_rows(g, g_pitch, global_dev, s, s_pitch, R->r[r].dev, a * row_bytes, BH, stream);
        if (st != ATTN_OK) return st;
    }
    return ATTN_OK;
}

attn_status cp_ring_scatter(cp_ring *R, const void *q, const void *k, const void *v, int src_dev, void *src_stream) {
    const size_t row = (size_t)R->p.D * 2, kv_half = (size_t)R->pl.S * R->slot_bytes;
    attn_status st;
    ATTN_CUDA(cudaSetDevice(src_dev));
    if (R->ev_src_dev != src_dev) {
        if (R->ev_src) cudaEventDestroy(R->ev_src);
        R->ev_src = NULL;
        ATTN_CUDA(cudaEventCreateWithFlags(&R->ev_src, cudaEventDisableTiming));
        R->ev_src_dev = src_dev;
    }
    ATTN_CUDA(cudaEventRecord(R->ev_src, (cudaStream_t)src_stream));
    for (int r = 0; r < R->pl.G; r++) {
        cp_rank *kr = &R->r[r];
        ATTN_CUDA(cudaSetDevice(kr->dev));
        ATTN_CUDA(cudaStreamWaitEvent(kr->compute, R->ev_src, 0));
        if ((st = move_chunks(R, r, (void *)q, src_dev, kr->q, row, 1, kr->compute)) != ATTN_OK ||
            (st = move_chunks(R, r, (void *)k, src_dev, kr->kv[0], row, 1, kr->compute)) != ATTN_OK ||
            (st = move_chunks(R, r, (void *)v, src_dev, (char *)kr->kv[0] + kv_half, row, 1, kr->compute)) != ATTN_OK)
            return st;
    }
    return ATTN_OK;
}

attn_status cp_ring_load_host(cp_ring *R, const uint16_t *q, const uint16_t *k, const uint16_t *v) {
    const cp_plan *pl = &R->pl;
    const size_t BH = (size_t)(R->p.B * R->p.H), row = (size_t)R->p.D * 2;
    const size_t g_pitch = (size_t)R->p.N * row, s_pitch = (size_t)pl->c * row, kv_half = (size_t)pl->S * R->slot_bytes;
    for (int r = 0; r < pl->G; r++) {
        cp_rank *kr = &R->r[r];
        ATTN_CUDA(cudaSetDevice(kr->dev));
        for (int slot = 0; slot < pl->S; slot++) {
            const int ch = cp_chunk(pl, r, slot);
            const size_t a = (size_t)cp_chunk_rows(pl, ch), off = (size_t)ch * pl->c * row;
            if (!a) continue;
            char *qs = slot_ptr(kr->q, R, slot), *ks = slot_ptr(kr->kv[0], R, slot);
            ATTN_CUDA(cudaMemcpy2D(qs, s_pitch, (const char *)q + off, g_pitch, a * row, BH, cudaMemcpyHostToDevice));
            ATTN_CUDA(cudaMemcpy2D(ks, s_pitch, (const char *)k + off, g_pitch, a * row, BH, cudaMemcpyHostToDevice));
            ATTN_CUDA(cudaMemcpy2D(ks + kv_half, s_pitch, (const char *)v + off, g_pitch, a * row, BH,
                                   cudaMemcpyHostToDevice));
        }
        /* From pageable memory cudaMemcpy2D may return before its DMA lands, and the ring's streams
         * do not wait for the legacy stream. */
        ATTN_CUDA(cudaDeviceSynchronize());
    }
    return ATTN_OK;
}

attn_status cp_ring_gather(cp_ring *R, void *o, float *lse, int dst_dev, void *dst_stream) {
    attn_status st;
    for (int r = 0; r < R->pl.G; r++) {
        cp_rank *kr = &R->r[r];
        ATTN_CUDA(cudaSetDevice(kr->dev));
        if ((st = move_chunks(R, r, o, dst_dev, kr->kv[1], (size_t)R->p.D * 2, 0, kr->compute)) != ATTN_OK ||
            (st = move_chunks(R, r, lse, dst_dev, kr->lse_acc, 4, 0, kr->compute)) != ATTN_OK)
            return st;
        ATTN_CUDA(cudaEventRecord(kr->ev_done, kr->compute));
    }
    ATTN_CUDA(cudaSetDevice(dst_dev));
    for (int r = 0; r < R->pl.G; r++) ATTN_CUDA(cudaStreamWaitEvent((cudaStream_t)dst_stream, R->r[r].ev_done, 0));
    return ATTN_OK;
}

attn_status cp_ring_sync(cp_ring *R) {
    for (int r = 0; r < R->pl.G; r++) {
        ATTN_CUDA(cudaSetDevice(R->r[r].dev));
        ATTN_CUDA(cudaStreamSynchronize(R->r[r].compute));
        ATTN_CUDA(cudaStreamSynchronize(R->r[r].comm));
    }
    return ATTN_OK;
}

attn_status cp_ring_gather_host(cp_ring *R, uint16_t *o, float *lse) {
    const cp_plan *pl = &R->pl;
    const size_t BH = (size_t)(R->p.B * R->p.H), row = (size_t)R->p.D * 2;
    attn_status st = cp_ring_sync(R);
    if (st != ATTN_OK) return st;
    for (int r = 0; r < pl->G; r++) {
        cp_rank *kr = &R->r[r];
        ATTN_CUDA(cudaSetDevice(kr->dev));
        for (int slot = 0; slot < pl->S; slot++) {
            const int ch = cp_chunk(pl, r, slot);
            const size_t a = (size_t)cp_chunk_rows(pl, ch);
            if (!a) continue;
            ATTN_CUDA(cudaMemcpy2D((char *)o + (size_t)ch * pl->c * row, (size_t)R->p.N * row,
                                   slot_ptr(kr->kv[1], R, slot), (size_t)pl->c * row, a * row, BH,
                                   cudaMemcpyDeviceToHost));
            ATTN_CUDA(cudaMemcpy2D(lse + (size_t)ch * pl->c, (size_t)R->p.N * 4,
                                   kr->lse_acc + (size_t)slot * rows_per_slot(R), (size_t)pl->c * 4, a * 4, BH,
                                   cudaMemcpyDeviceToHost));
        }
    }
    return ATTN_OK;
}

/* ---- one pass ------------------------------------------------------------------------------- */

/* One local call of a pair (cp_plan.h's cp_call) and the merge of its partial into the running output
 * of query slot qs. kv is the shard in hand, its chunk ks the keys. */
static attn_status run_call(cp_ring *R, cp_rank *k, int qs, const char *kv, int ks, const cp_call *call) {
    const int64_t BH = R->p.B * R->p.H, D = R->p.D, c = R->pl.c, rows = rows_per_slot(R);
    const size_t rb = (size_t)D * 2;
    const void *q = slot_ptr(k->q, R, qs), *kk = kv + (size_t)ks * R->slot_bytes;
    const void *vv = kv + (size_t)(R->pl.S + ks) * R->slot_bytes;
    attn_status st;
    if (call->gather) {
        /* The short chunk's b = n real keys, and n query rows from q0, as [BH][n][D] copies: the local
         * stage takes only square problems whose heads are n rows apart. */
        const size_t w = (size_t)call->n * rb;
        if (call->q0 == 0) {
            ATTN_CUDA(cudaMemcpy2DAsync(k->kg, w, kk, (size_t)c * rb, w, (size_t)BH, cudaMemcpyDeviceToDevice, k->compute));
            ATTN_CUDA(cudaMemcpy2DAsync(k->vg, w, vv, (size_t)c * rb, w, (size_t)BH, cudaMemcpyDeviceToDevice, k->compute));
        }
        ATTN_CUDA(cudaMemcpy2DAsync(k->qg, w, (const char *)q + (size_t)call->q0 * rb, (size_t)c * rb, w, (size_t)BH,
                                    cudaMemcpyDeviceToDevice, k->compute));
        q = k->qg, kk = k->kg, vv = k->vg;
    }
    attn_problem lp = R->p;
    lp.N = call->n;
    lp.causal = call->causal;
    attn_args a = {.q = q, .k = kk, .v = vv, .o = k->o_part, .lse = k->lse_part, .stream = (void *)k->compute, .gpus = 1};
    if ((st = R->local->run(&lp, &a)) != ATTN_OK) return st;
    return cp_merge_launch(k->o_acc + (size_t)qs * rows * D, k->lse_acc + (size_t)qs * rows, c, k->o_part,
                           k->lse_part, call->n, BH, D, call->from, call->to, call->q0, R->p.dtype, k->compute);
}

/* Every call of step s on rank r: its S query chunks against the S key chunks of the shard in hand. */
static attn_status compute_step(cp_ring *R, int r, int s, int what) {
    const cp_plan *pl = &R->pl;
    cp_rank *k = &R->r[r];
    const int moving = what & CP_RUN_COMM;
    const char *kv = (const char *)k->kv[moving ? cur_buf(s) : 0];
    const int src = cp_kv_source(pl, r, s);
    attn_status st;
    ATTN_CUDA(cudaSetDevice(k->dev));
    if (moving && s > 0) ATTN_CUDA(cudaStreamWaitEvent(k->compute, k->ev_arrived, 0));
    for (int qs = 0; qs < pl->S; qs++)
        for (int ks = 0; ks < pl->S; ks++) {
            cp_call call;
            int64_t it = 0;
            while (cp_pair_call(pl, cp_chunk(pl, r, qs), cp_chunk(pl, src, ks), &it, &call))
                if ((st = run_call(R, k, qs, kv, ks, &call)) != ATTN_OK) return st;
        }
    ATTN_CUDA(cudaEventRecord(k->ev_computed, k->compute));
    return ATTN_OK;
}

/* The K/V exchange of step s through NCCL: every rank sends the shard in hand to rank r+1 and
 * receives the next one from rank r-1, all in one group. */
static attn_status exchange_nccl(cp_ring *R, int s, size_t bytes) {
    const int G = R->pl.G;
    for (int r = 0; r < G; r++) {
        cp_rank *k = &R->r[r];
        ATTN_CUDA(cudaSetDevice(k->dev));
        if (s == 0) ATTN_CUDA(cudaStreamWaitEvent(k->comm, k->ev_start, 0));
        if (s >= 2) ATTN_CUDA(cudaStreamWaitEvent(k->comm, k->ev_computed, 0));
    }
    CP_NCCL(ncclGroupStart());
    ncclResult_t res = ncclSuccess;
    for (int r = 0; r < G && res == ncclSuccess; r++) {
        cp_rank *k = &R->r[r];
        res = ncclSend(k->kv[cur_buf(s)], bytes, ncclUint8, (r + 1) % G, k->nccl, k->comm);
        if (res == ncclSuccess) res = ncclRecv(k->kv[nxt_buf(s)], bytes, ncclUint8, (r + G - 1) % G, k->nccl, k->comm);
    }
    const ncclResult_t end = ncclGroupEnd(); /* closes the group even after a failed call */
    CP_NCCL(res);
    CP_NCCL(end);
    for (int r = 0; r < G; r++) {
        ATTN_CUDA(cudaSetDevice(R->r[r].dev));
        ATTN_CUDA(cudaEventRecord(R->r[r].ev_arrived, R->r[r].comm));
    }
    return ATTN_OK;
}

/* The same exchange with every rank on one GPU: rank r copies its shard into rank r+1's receive
 * buffer on its own comm stream, once that buffer is free (r+1's calls and its own send of step s-1
 * read it), and records r+1's arrival. All waits are enqueued before any copy of this step, so each
 * wait sees the previous step's events. */
static attn_status exchange_one_gpu(cp_ring *R, int s, size_t bytes) {
    const int G = R->pl.G;
    ATTN_CUDA(cudaSetDevice(R->r[0].dev));
    for (int r = 0; r < G; r++) {
        cp_rank *k = &R->r[r], *to = &R->r[(r + 1) % G];
        ATTN_CUDA(cudaStreamWaitEvent(k->comm, s == 0 ? k->ev_start : k->ev_arrived, 0));
        if (s == 0) ATTN_CUDA(cudaStreamWaitEvent(k->comm, to->ev_start, 0));
        if (s >= 2) {
            ATTN_CUDA(cudaStreamWaitEvent(k->comm, to->ev_computed, 0));
            ATTN_CUDA(cudaStreamWaitEvent(k->comm, to->ev_sent, 0));
        }
    }
    for (int r = 0; r < G; r++) {
        cp_rank *k = &R->r[r], *to = &R->r[(r + 1) % G];
        ATTN_CUDA(cudaMemcpyAsync(to->kv[nxt_buf(s)], k->kv[cur_buf(s)], bytes, cudaMemcpyDeviceToDevice, k->comm));
        ATTN_CUDA(cudaEventRecord(k->ev_sent, k->comm));
        ATTN_CUDA(cudaEventRecord(to->ev_arrived, k->comm));
    }
    return ATTN_OK;
}

static attn_status ring_pass(cp_ring *R, int what) {
    const cp_plan *pl = &R->pl;
    const int64_t rows = rows_per_slot(R), D = R->p.D;
    const size_t shard = 2 * (size_t)pl->S * R->slot_bytes;
    attn_status st;
    for (int r = 0; r < pl->G; r++) {
        cp_rank *k = &R->r[r];
        ATTN_CUDA(cudaSetDevice(k->dev));
        ATTN_CUDA(cudaEventRecord(k->ev_start, k->compute)); /* after the scatter, or the last pass */
        if (what & CP_RUN_COMPUTE) {
            ATTN_CUDA(cudaMemsetAsync(k->o_acc, 0, (size_t)(pl->S * rows * D) * 4, k->compute));
            if ((st = cp_fill_neg_inf(k->lse_acc, pl->S * rows, k->compute)) != ATTN_OK) return st;
        }
    }
    for (int s = 0; s < pl->G; s++) {
        if ((what & CP_RUN_COMM) && s < pl->G - 1) {
            st = R->one_gpu ? exchange_one_gpu(R, s, shard) : exchange_nccl(R, s, shard);
            if (st != ATTN_OK) return st;
        }
        for (int r = 0; r < pl->G; r++) {
            if (what & CP_RUN_COMPUTE) {
                if ((st = compute_step(R, r, s, what)) != ATTN_OK) return st;
            } else {
                ATTN_CUDA(cudaSetDevice(R->r[r].dev));
                ATTN_CUDA(cudaEventRecord(R->r[r].ev_computed, R->r[r].compute));
            }
        }
    }
    /* The running O, rounded once, into receive buffer 1: no step reads it any more. Through NCCL the
     * last step's calls waited for the last exchange, sends included; on one GPU the rank's own sends
     * ran on its comm stream and are waited for here (the next pass's scatter rewrites KV[0] too). */
    for (int r = 0; r < pl->G && (what & CP_RUN_COMPUTE); r++) {
        cp_rank *k = &R->r[r];
        ATTN_CUDA(cudaSetDevice(k->dev));
        if (R->one_gpu && (what & CP_RUN_COMM)) ATTN_CUDA(cudaStreamWaitEvent(k->compute, k->ev_sent, 0));
        if ((st = cp_finish_launch(k->kv[1], k->o_acc, pl->S * rows * D, R->p.dtype, k->compute)) != ATTN_OK)
            return st;
    }
    return ATTN_OK;
}

attn_status cp_ring_run(cp_ring *R, float scale, int what) {
    int cur = 0;
    ATTN_CUDA(cudaGetDevice(&cur));
    R->p.scale = scale;
    attn_status st = ring_pass(R, what);
    cudaSetDevice(cur);
    return st;
}

#endif
