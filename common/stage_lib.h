/*
 * stage_lib.h: the C library surface of a fast stage, for build/lib<name>.so (python/python.mk) and
 * python/flashattn_stages.py. Each stage that ships as a library declares it in one line,
 *
 *     ATTN_STAGE_LIBRARY(overlap, stage09_run)     -> overlap_forward, overlap_status_string,
 *                                                     overlap_last_error
 *
 * with the signature and status codes of stage 06's fa2_forward (06_fa2_full/fa2.h): 0 ok,
 * 1 invalid argument, 2 unsupported, 3 CUDA error; the reason of the last refusal in
 * NAME_last_error(). LSE must not be NULL (these stages always write it). Launches on `stream` and
 * returns without synchronising. CUDA builds only.
 */
#ifndef ATTN_STAGE_LIB_H
#define ATTN_STAGE_LIB_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef attn_status (*attn_stage_run_fn)(const attn_problem *p, const attn_args *a);

/* Checks the arguments (non-NULL, 16-byte aligned device pointers; B, H, N, D and scale in range;
 * dtype 0 fp16 or 1 bf16), runs the stage, and maps its status to fa2's codes. */
int attn_lib_forward(attn_stage_run_fn run, const void *q, const void *k, const void *v, void *o, float *lse,
                     int64_t B, int64_t H, int64_t N, int64_t D, int causal, float scale, int dtype,
                     cudaStream_t stream);
const char *attn_lib_status_string(int s);

#define ATTN_STAGE_LIBRARY(name, run)                                                                        \
    int name##_forward(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B,          \
                       int64_t H, int64_t N, int64_t D, int causal, float scale, int dtype,                  \
                       cudaStream_t stream) {                                                                \
        return attn_lib_forward(run, q, k, v, o, lse, B, H, N, D, causal, scale, dtype, stream);             \
    }                                                                                                        \
    const char *name##_status_string(int s) { return attn_lib_status_string(s); }                            \
    const char *name##_last_error(void) { return attn_last_error(); }

#ifdef __cplusplus
}
#endif
#endif
