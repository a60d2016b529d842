/*
 * stage_lib.h: the C library surface of a fast stage, for build/lib<name>.so (python/python.mk) and
 * python/flashattn_stages.py. Each stage that ships as a library declares it in one line,
 *
 *     ATTN_STAGE_LIBRARY(overlap, stage09_run, hop_check_head_shape, hop_check_heads, hop_check_device)
 *         -> overlap_forward, overlap_status_string, overlap_last_error
 *
 * with the signature, status codes and argument rules of stage 06's fa2_forward (lib/fa2.h):
 * 0 ok, 1 invalid argument, 2 unsupported, 3 CUDA error; the reason of the last refusal on this thread
 * in NAME_last_error(), one line naming the argument. Like fa2_forward: causal is 0 or 1; scale is
 * finite with |scale| <= ATTN_LIB_MAX_SCALE, negative flips the scores and 0 is uniform attention,
 * and the results are accurate while every |scale * log2(e) * q . k| is at most 2^24 (fa2.h says why);
 * q, k, v, o are 16-byte aligned device (or managed) memory of the current device, lse 4-byte aligned;
 * o and lse share no byte with an input or each other; an error an earlier, unrelated CUDA call left in
 * cudaGetLastError() is neither reported as the call's own nor cleared. Unlike it, lse must not be NULL
 * (these stages always write it), the head dim is 64, 128 or 256, B*H <= 2^31, and the current device
 * must be an sm_90 GPU (else 2, "device: ... (got sm_80)", or 3 when it cannot be asked;
 * hop_check_device). Launches on `stream` and returns without synchronising. CUDA builds only.
 */
#ifndef ATTN_STAGE_LIB_H
#define ATTN_STAGE_LIB_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "forward_args.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fa2.h's FA2_MAX_SCALE: |scale| * log2(e), the kernels' multiplier, stays below FLT_MAX */
#define ATTN_LIB_MAX_SCALE 2.3e38f

typedef attn_status (*attn_stage_run_fn)(const attn_problem *p, const attn_args *a);
/* The stage's own limits, asked before any CUDA call and in fa2_forward's order: one head's shape (head
 * dims, N) before the check that B*H*N*D fits 64 bits, the number of heads B*H after it (so that a head
 * dim the stage lacks is reported as such whatever B and H are): hop_check_head_shape and
 * hop_check_heads for 07-09 */
typedef attn_status (*attn_stage_shape_fn)(int64_t N, int64_t D);
typedef attn_status (*attn_stage_heads_fn)(int64_t bh);
/* May the stage run on the current device? Asked after the pointers, before the run: hop_check_device for
 * 07-09. Asked here and not in the stage's run, which build/attn reaches only after the registry has
 * asked the same (gpu.c): in the run, its runtime queries added 0.3-0.8 us to each timed call of the
 * bench (D = 64, N = 128-2048, an A/B on the H200), 2-7% of those points. */
typedef attn_status (*attn_stage_device_fn)(void);

/* Checks the arguments (above), runs the stage, and maps its status to fa2's codes. */
int attn_lib_forward(attn_stage_run_fn run, attn_stage_shape_fn shape, attn_stage_heads_fn heads,
                     attn_stage_device_fn device, const void *q, const void *k, const void *v, void *o,
                     float *lse, int64_t B, int64_t H, int64_t N, int64_t D, int causal, float scale,
                     int dtype, cudaStream_t stream);
const char *attn_lib_status_string(int s);

/* The pieces of attn_lib_forward that the backward's library (backward_lib.c) shares, so that both word
 * a refusal alike. attn_lib_refuse: a refusal of forward_args.h's rules as ATTN_EINVAL, "what: why (got
 * value)". attn_lib_check_scale_and_dtype: |scale| <= ATTN_LIB_MAX_SCALE (NaN refused), dtype 0 or 1.
 * attn_lib_device_memory: may a kernel on the current device read ptr[0 .. n-1] (device_memory.h)?
 * ATTN_EINVAL naming name[i] when one is host memory, unknown or another device's; ATTN_ECUDA when the
 * runtime cannot answer at all (no usable device), which is not the caller's argument's fault.
 * attn_lib_status: an attn_status as the libraries' 0 ok, 1 invalid, 2 unsupported, 3 CUDA error. */
attn_status attn_lib_refuse(const attn_refusal *r);
attn_status attn_lib_check_scale_and_dtype(float scale, int dtype);
attn_status attn_lib_device_memory(const void *const ptr[], const char *const name[], int n);
int attn_lib_status(attn_status s);

/* The three functions of one stage library, declared (a C caller writes ATTN_STAGE_LIBRARY_API(overlap)
 * to call overlap_forward); ATTN_STAGE_LIBRARY defines them after this declaration, so the two agree. */
#ifdef __cplusplus /* the API's names keep C linkage wherever a C++ caller writes the macro */
#define ATTN_C_LINKAGE extern "C"
#else
#define ATTN_C_LINKAGE
#endif
#define ATTN_STAGE_LIBRARY_API(name)                                                                         \
    ATTN_C_LINKAGE int name##_forward(const void *q, const void *k, const void *v, void *o, float *lse,      \
                                      int64_t B, int64_t H, int64_t N, int64_t D, int causal, float scale,   \
                                      int dtype, cudaStream_t stream);                                       \
    ATTN_C_LINKAGE const char *name##_status_string(int s);                                                  \
    ATTN_C_LINKAGE const char *name##_last_error(void);

#define ATTN_STAGE_LIBRARY(name, run, shape, heads, device)                                                  \
    ATTN_STAGE_LIBRARY_API(name)                                                                             \
    int name##_forward(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B,          \
                       int64_t H, int64_t N, int64_t D, int causal, float scale, int dtype,                  \
                       cudaStream_t stream) {                                                                \
        return attn_lib_forward(run, shape, heads, device, q, k, v, o, lse, B, H, N, D, causal, scale,       \
                                dtype, stream);                                                              \
    }                                                                                                        \
    const char *name##_status_string(int s) { return attn_lib_status_string(s); }                            \
    const char *name##_last_error(void) { return attn_last_error(); }

#ifdef __cplusplus
}
#endif
#endif
