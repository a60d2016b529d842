/*
 * cp_ring.h: the ring of stage 10, shards resident on G GPUs. stage10.c drives it from the harness
 * (scatter from one GPU, one pass, gather back); build/cp_bench drives it with the shards loaded once,
 * to time the ring alone. Built only with CUDA and NCCL.
 *
 * One host thread drives all G ranks. Each rank (one GPU, or with one_gpu all on the current GPU and
 * cudaMemcpyAsync in place of NCCL, so that one GPU can run the whole schedule in the tests) holds:
 *     Q     its S chunks of queries               [S][B*H][c][D]   16-bit
 *     KV[0] its own S chunks of keys and values   K [S][B*H][c][D], then V likewise
 *     KV[1], KV[2]  the two receive buffers of the ring (KV[2] only for G >= 3)
 *     O_acc, LSE_acc  the running output, fp32   [S][B*H][c][D], [S][B*H][c]
 *     O_i, LSE_i      one local call's partial    [B*H][c][D] 16-bit, [B*H][c]
 * and two streams: compute (local calls, merges) and comm (NCCL send/recv), ordered by events.
 */
#ifndef CP_RING_H
#define CP_RING_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "cp_plan.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_ring cp_ring;

/* What one pass enqueues: the local calls, the K/V exchange, or both overlapped (the stage). The
 * compute-only pass runs every step's calls on the rank's own shard, the comm-only pass moves the
 * shards and computes nothing: build/cp_bench times the three to say how much of the exchange the
 * overlap hides. */
enum { CP_RUN_COMPUTE = 1, CP_RUN_COMM = 2, CP_RUN_ALL = 3 };

/* Makes the ring for problem p on G ranks: GPUs 0 .. G-1, or with one_gpu the current GPU G times,
 * whose local calls run `local` (stage10_local_stage(p) picks it). Allocates every buffer (padding
 * rows zeroed) and sets up NCCL. */
attn_status cp_ring_create(cp_ring **out, const attn_problem *p, const attn_stage *local, int G, int one_gpu);
/* Waits for the ring's work, frees everything. NULL is fine. */
void cp_ring_destroy(cp_ring *R);

/* Copies the ranks' shards of q, k, v ([B, H, N, D] on GPU src_dev) into the ranks, after the work
 * already on src_stream. Q, K, V must not change before the next cp_ring_gather completes. */
attn_status cp_ring_scatter(cp_ring *R, const void *q, const void *k, const void *v, int src_dev,
                            void *src_stream);
/* The same from host memory, synchronously (no pass may be in flight). */
attn_status cp_ring_load_host(cp_ring *R, const uint16_t *q, const uint16_t *k, const uint16_t *v);
/* One pass of the ring (what: CP_RUN_*) with the problem's scale; returns without waiting. */
attn_status cp_ring_run(cp_ring *R, float scale, int what);
/* Copies O and LSE of every real row to [B, H, N, D] and [B, H, N] on GPU dst_dev; dst_stream then
 * waits for every rank. */
attn_status cp_ring_gather(cp_ring *R, void *o, float *lse, int dst_dev, void *dst_stream);
/* The same to host memory, synchronously. */
attn_status cp_ring_gather_host(cp_ring *R, uint16_t *o, float *lse);
/* Waits for every rank's streams. */
attn_status cp_ring_sync(cp_ring *R);

typedef struct {
    cp_plan plan;
    const attn_stage *local; /* the stage that runs each local call */
    size_t rank_bytes;       /* device memory stage 10 allocated on each rank (NCCL's own not counted) */
    size_t shard_bytes;      /* one rank's K and V: what it sends at each step */
    size_t sent_bytes;       /* what each rank sends over one pass: (G - 1) * shard_bytes */
} cp_ring_info;
void cp_ring_describe(const cp_ring *R, cp_ring_info *info);

#ifdef __cplusplus
}
#endif
#endif
