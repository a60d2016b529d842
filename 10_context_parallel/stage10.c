/*
 * Stage 10: past one GPU. One long sequence is split along its rows across the G GPUs of a host:
 * each GPU keeps its queries, the keys and values travel around a ring of GPUs (NCCL send/recv),
 * and each GPU merges the partial attentions of its queries, one per shard of keys, by their LSE.
 *
 * What it adds: the LSE that stage 06 writes is what makes this exact. A partial over a key set
 * gives (O_i, LSE_i); two of them merge into the attention over both sets with
 *     LSE = log(e^{LSE_a} + e^{LSE_b}),   O = e^{LSE_a - LSE} O_a + e^{LSE_b - LSE} O_b
 * so no GPU ever holds all the keys, and none holds more than 1/G of Q, K, V and O plus two shards
 * in flight. The attention itself is the suite's fastest stage on the GPU (picked from the registry
 * at run time: stage 06 on an A100, a Hopper stage on an H100/H200 where one takes the head dim);
 * this stage adds the ring (cp_ring.c), the plan of which chunk meets which (cp_plan.c) and the
 * merge (cp_merge.h, cp_kernels.cu).
 * Versus stage 06: nothing changes in the kernel; around it, the sequence is cut into chunks of
 * c = ceil(N / (S G)) rows, S = 2 chunks per GPU when causal (chunk r and its mirror 2G-1-r, so that
 * every GPU has the same work) and 1 otherwise, and each GPU computes, at each of G ring steps, its
 * chunks of queries against the chunks of keys in hand while the next shard arrives.
 *
 * Limits: the local stage takes square problems only (as many query rows as key rows, causal meaning
 * query i sees keys 0..i); every local call is built as such a square (README.md says how, padding
 * and the short last chunk included). Non-causal with N not a multiple of G costs up to one more
 * call per GPU (the short chunk's windows). Head dims 32, 64, 80, 96, 128, 192, 256; fp16 and bf16; GPUs
 * 0 .. G-1 of one host, each sm_80 or newer; N * D * 2 bytes below the GPU's largest copy pitch
 * (2 GiB on an H200). Needs NCCL at build time (cp.mk finds it).
 *
 * Run it:   build/attn --stage 10 --gpus 2 --batch 1 --heads 32 --seq 65536 --dim 128 --check
 * Scaling:  build/cp_bench --gpus 2 --seq 65536 --dim 128      (the ring alone, shards resident)
 * The proof on a 2-GPU machine: bash 10_context_parallel/gpu_proof.sh
 */
#include "stage10.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "06_fa2_full/stage06.h"
#include "harness.h"

int stage10_supports_dim(int64_t D) { return stage06_supports_dim(D); }

const attn_stage *stage10_local_stage(const attn_problem *p) {
    attn_problem pl = *p;
    for (int i = attn_num_stages - 1; i >= 0; i--) {
        const attn_stage *s = &attn_stages[i];
        if (!s->on_gpu || s->max_gpus > 1 || !s->writes_lse || s->workspace_bytes) continue;
        if (attn_stage_supports(s, &pl) != ATTN_OK || attn_stage_available(s) != ATTN_OK) continue;
        attn_clear_error();
        return s;
    }
    attn_fail(ATTN_EUNSUPPORTED, "stage 10: no GPU stage that writes LSE takes head dim %lld in %s on this GPU",
              (long long)p->D, attn_dtype_name(p->dtype));
    return NULL;
}

#if defined(ATTN_HAVE_CUDA) && defined(ATTN_HAVE_NCCL)

#include <cuda_runtime_api.h>

#include "cp_ring.h"
#include "cuda_check.h"

/* The ring of the last call, kept for the next call of the same shape: NCCL's set-up takes about a
 * second and the shard buffers are large, and the harness times every call. */
static struct {
    cp_ring *ring;
    attn_problem p;
    int G, one_gpu, dev, atexit_done;
} cache;

void stage10_release(void) {
    cp_ring_destroy(cache.ring);
    cache.ring = NULL;
}

static int same_shape(const attn_problem *a, const attn_problem *b) {
    return a->B == b->B && a->H == b->H && a->N == b->N && a->D == b->D && a->causal == b->causal &&
           a->dtype == b->dtype;
}

static attn_status ring_for(const attn_problem *p, int G, int one_gpu, int dev, cp_ring **out) {
    if (cache.ring && same_shape(&cache.p, p) && cache.G == G && cache.one_gpu == one_gpu && cache.dev == dev) {
        *out = cache.ring;
        return ATTN_OK;
    }
    stage10_release();
    const attn_stage *local = stage10_local_stage(p);
    if (!local) return ATTN_EUNSUPPORTED;
    attn_status st = cp_ring_create(&cache.ring, p, local, G, one_gpu);
    if (st != ATTN_OK) return st;
    cache.p = *p, cache.G = G, cache.one_gpu = one_gpu, cache.dev = dev;
    if (!cache.atexit_done) cache.atexit_done = atexit(stage10_release) == 0;
    *out = cache.ring;
    return ATTN_OK;
}

attn_status stage10_run(const attn_problem *p, const attn_args *a) {
    const char *env = getenv("ATTN_CP_ONE_GPU");
    const int one_gpu = env && !strcmp(env, "1");
    const int present = attn_gpu_count();
    const int G = a->gpus > 0 ? a->gpus : present;
    if (G < 1 || G > ATTN_MAX_GPUS)
        return attn_fail(ATTN_EINVAL, "stage 10: --gpus must be 1 to %d (got %d)", ATTN_MAX_GPUS, G);
    if (!one_gpu && G > present)
        return attn_fail(ATTN_EINVAL, "stage 10: --gpus %d, but this machine has %d GPU%s (--gpus 1..%d)", G,
                         present, present == 1 ? "" : "s", present);
    const attn_stage *local = stage10_local_stage(p);
    if (!local) return ATTN_EUNSUPPORTED;
    if (G == 1) {
        /* One GPU: the local stage alone, on the harness's buffers: bit for bit its output. */
        attn_args one = *a;
        one.gpus = 1;
        return local->run(p, &one);
    }
    int dev = 0;
    ATTN_CUDA(cudaGetDevice(&dev));
    cp_ring *R = NULL;
    attn_status st = ring_for(p, G, one_gpu, dev, &R);
    if (st == ATTN_OK) st = cp_ring_scatter(R, a->q, a->k, a->v, dev, a->stream);
    if (st == ATTN_OK) st = cp_ring_run(R, p->scale, CP_RUN_ALL);
    if (st == ATTN_OK) st = cp_ring_gather(R, a->o, a->lse, dev, a->stream);
    cudaSetDevice(dev);
    if (st != ATTN_OK) {
        /* A ring that failed half-way holds work in an unknown state: wait for it and drop it. */
        char why[512];
        snprintf(why, sizeof why, "%s", attn_last_error());
        stage10_release();
        cudaSetDevice(dev);
        return attn_fail(st, "%s", why);
    }
    return ATTN_OK;
}

#endif
