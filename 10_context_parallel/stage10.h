/*
 * stage10.h: stage 10 as the registry sees it (suite/registry.c). The ring is in cp_ring.c, the plan
 * of chunks and calls in cp_plan.c, the LSE merge in cp_merge.h and cp_kernels.cu.
 */
#ifndef STAGE10_H
#define STAGE10_H

#include <stdint.h>

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The head dims stage 10 takes: stage 06's, the sm_80 floor that every GPU it runs on can fall back
 * to for the local calls (a faster stage is used where one takes the D and dtype). */
#define STAGE10_DIMS_TEXT "32, 64, 80, 96, 128, 192, 256"
int stage10_supports_dim(int64_t D);

/* The stage that runs stage 10's local calls for problem p on the current GPU: the last registered
 * GPU stage, other than a multi-GPU one, that writes LSE, needs no scratch from the harness, takes
 * p's head dim and dtype and can run here. NULL (with the reason in attn_last_error()) if none. */
const attn_stage *stage10_local_stage(const attn_problem *p);

/* The registry's entry: a->gpus ranks (GPUs 0 .. gpus-1); one GPU runs the local stage alone. With
 * ATTN_CP_ONE_GPU=1 in the environment every rank is placed on the current GPU and the shards move by
 * cudaMemcpyAsync instead of NCCL: the whole schedule on one GPU, for tests. Keeps its ring (NCCL
 * communicators, shard buffers) for the next call of the same shape; stage10_release() frees it, and
 * runs at exit. Defined only in a build with CUDA and NCCL. */
attn_status stage10_run(const attn_problem *p, const attn_args *a);
void stage10_release(void);

/* The bytes stage 10 moves on `gpus` GPUs (traffic.c): its local calls, merges and the ring's shards. */
attn_bytes stage10_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
