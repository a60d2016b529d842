/*
 * stage_lib.c: the checks and status mapping behind every stage library's NAME_forward (stage_lib.h),
 * and the pieces of them that the backward's library shares (backward_lib.c). NAME_forward keeps
 * fa2_forward's contract (lib/fa2.h): the same checks in the same order, every refusal a
 * line "argument: reason (got value)". First what needs no CUDA call (pointers, sizes, causal, scale,
 * dtype, alignment, the stage's head dims and N, B*H*N*D within 64 bits, the stage's B*H, outputs
 * overlapping inputs), then what the pointers are, then the device (an sm_90 GPU for 07-09), then the
 * stage.
 */
#ifdef ATTN_HAVE_CUDA
#include <math.h>

#include "device_memory.h"
#include "forward_args.h"
#include "stage_lib.h"

attn_status attn_lib_refuse(const attn_refusal *r) {
    return r->has_got ? attn_fail(ATTN_EINVAL, "%s: %s (got %lld)", r->what, r->why, r->got)
                      : attn_fail(ATTN_EINVAL, "%s: %s", r->what, r->why);
}

attn_status attn_lib_check_scale_and_dtype(float scale, int dtype) {
    if (!(fabsf(scale) <= ATTN_LIB_MAX_SCALE)) /* also NaN: the kernels multiply by |scale| * log2(e) */
        return attn_fail(ATTN_EINVAL, "scale: must be finite with |scale| <= %.2g (got %g)",
                         (double)ATTN_LIB_MAX_SCALE, (double)scale);
    if (dtype != ATTN_F16 && dtype != ATTN_BF16)
        return attn_fail(ATTN_EINVAL, "dtype: must be 0 (fp16) or 1 (bf16) (got %d)", dtype);
    return ATTN_OK;
}

static attn_status check_args(const void *const ptr[5], const int64_t size[4], int causal, float scale,
                              int dtype, attn_stage_shape_fn shape, attn_stage_heads_fn heads) {
    attn_refusal r;
    if (attn_refuse_pointers_and_sizes(ptr, size, causal, 1, &r))
        return attn_lib_refuse(&r); /* lse required */
    attn_status st = attn_lib_check_scale_and_dtype(scale, dtype);
    if (st != ATTN_OK) return st;
    if (attn_refuse_misaligned(ptr, &r)) return attn_lib_refuse(&r);
    /* the stage's own limits before any CUDA call, as fa2_forward asks its own (a head dim the stage
     * lacks is not a CUDA error), and in its order: the head's shape, the 64-bit bound, the heads */
    const int64_t B = size[0], H = size[1], N = size[2], D = size[3];
    if ((st = shape(N, D)) != ATTN_OK) return st;
    if (attn_sizes_overflow(size))
        return attn_fail(ATTN_EINVAL, "B*H*N*D: overflows 64 bits (B=%lld H=%lld N=%lld D=%lld)",
                         (long long)B, (long long)H, (long long)N, (long long)D);
    if ((st = heads(B * H)) != ATTN_OK) return st;
    const char *pair =
        attn_overlapping_outputs(ptr, (uint64_t)(B * H * N * D) * 2u, (uint64_t)(B * H * N) * 4u);
    return pair ? attn_fail(ATTN_EINVAL, "%s: " ATTN_OVERLAP_WHY, pair) : ATTN_OK;
}

attn_status attn_lib_device_memory(const void *const ptr[], const char *const name[], int n) {
    attn_memory_report r;
    switch (attn_device_memory(ptr, n, &r)) {
    case ATTN_MEMORY_READABLE: return ATTN_OK;
    case ATTN_MEMORY_UNKNOWN: return attn_fail(ATTN_EINVAL, "%s: " ATTN_MEMORY_UNKNOWN_WHY, name[r.index]);
    case ATTN_MEMORY_HOST: return attn_fail(ATTN_EINVAL, "%s: " ATTN_MEMORY_HOST_WHY, name[r.index]);
    case ATTN_MEMORY_OTHER_DEVICE:
        return attn_fail(ATTN_EINVAL, "%s: " ATTN_MEMORY_OTHER_WHY " (got device %d, current %d)",
                         name[r.index], r.device, r.current);
    default:
        return attn_fail(ATTN_ECUDA, "%s: %s", attn_memory_no_answer_why(r.error),
                         cudaGetErrorString(r.error));
    }
}

int attn_lib_status(attn_status s) {
    switch (s) {
    case ATTN_OK: return 0;
    case ATTN_EINVAL: return 1;
    case ATTN_EUNSUPPORTED: return 2;
    default: return 3;
    }
}

int attn_lib_forward(attn_stage_run_fn run, attn_stage_shape_fn shape, attn_stage_heads_fn heads,
                     attn_stage_device_fn device, const void *q, const void *k, const void *v, void *o,
                     float *lse, int64_t B, int64_t H, int64_t N, int64_t D, int causal, float scale,
                     int dtype, cudaStream_t stream) {
    const void *const ptr[5] = {q, k, v, o, lse};
    const int64_t size[4] = {B, H, N, D};
    attn_status st = check_args(ptr, size, causal, scale, dtype, shape, heads);
    if (st == ATTN_OK) st = attn_lib_device_memory(ptr, attn_forward_arg_name, 5);
    if (st == ATTN_OK) st = device();
    if (st != ATTN_OK) return attn_lib_status(st);
    /* the stage takes scale = 0 as stage 06 does */
    attn_problem p = attn_problem_make(B, H, N, D, causal);
    p.scale = scale;
    p.dtype = (attn_dtype)dtype;
    const attn_args a = {q, k, v, o, lse, NULL, (void *)stream, 1, NULL, NULL, NULL, NULL, NULL};
    return attn_lib_status(run(&p, &a));
}

const char *attn_lib_status_string(int s) {
    switch (s) {
    case 0: return "ok";
    case 1: return "invalid argument";
    case 2: return "unsupported";
    case 3: return "CUDA error";
    }
    return "unknown status";
}
#endif
