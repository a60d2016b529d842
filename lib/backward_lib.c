/*
 * lib/backward_lib.c: stage 13 as a C library (build/libbackward_fa2.so): backward_fa2_backward() and
 * backward_fa2_workspace_bytes(), with the status codes, words and order of checks of the forward's
 * libraries; the contract is backward_lib.h's. The rules they share live in forward_args.h and
 * stage_lib.c; this file adds only what is the backward's own: ten pointers, the deterministic flag, the
 * workspace, stage 13's shape limits and its device.
 */
#ifdef ATTN_HAVE_CUDA
#include "backward_lib.h"

#include "13_backward_fa2/backward_fa2.h"
#include "device_sm.h"
#include "forward_args.h"
#include "stage_lib.h"

enum { ARG_Q, ARG_K, ARG_V, ARG_O, ARG_LSE, ARG_DO, ARG_DQ, ARG_DK, ARG_DV, ARG_WORKSPACE, ARGS };
/* ptr[0 .. FIRST_OUTPUT-1] are read, the rest written */
#define FIRST_OUTPUT ARG_DQ
static const char *const arg_name[ARGS] = {"q", "k", "v", "o", "lse", "d_o", "dq", "dk", "dv", "workspace"};

/* One launch holds 2^31 - 1 blocks along x and 65535 along y; stage 13 splits past 2^31 - 1 into rows
 * of 2^30 (bwd_run), so it takes up to 65535 * 2^30 blocks, one per (b, h, 128-key tile). */
#define MAX_BLOCKS ((int64_t)65535 << 30)

/* Stage 13's limits on the shape (sizes already >= 1), in the forward's order: the head's shape, the
 * 64-bit bound, the heads; then the workspace it needs. */
static attn_status check_shape(const int64_t size[4], size_t *need) {
    const int64_t B = size[0], H = size[1], N = size[2], D = size[3];
    if (!stage13_supports_dim(D))
        return attn_fail(ATTN_EUNSUPPORTED,
                         "D: the backward (stage 13) takes head dims " STAGE13_DIMS_TEXT " (got %lld)",
                         (long long)D);
    if (N > ATTN_MAX_N)
        return attn_fail(ATTN_EUNSUPPORTED, "N: must be at most 2^24 (got %lld)", (long long)N);
    if (attn_sizes_overflow(size))
        return attn_fail(ATTN_EINVAL, "B*H*N*D: overflows 64 bits (B=%lld H=%lld N=%lld D=%lld)",
                         (long long)B, (long long)H, (long long)N, (long long)D);
    const int64_t key_tiles = (N + STAGE13_BC - 1) / STAGE13_BC;
    if (B * H > MAX_BLOCKS / key_tiles)
        return attn_fail(
            ATTN_EUNSUPPORTED,
            "B*H: must be at most %lld at N = %lld (one launch holds 65535 * 2^30 blocks of %d keys) "
            "(got %lld)",
            (long long)(MAX_BLOCKS / key_tiles), (long long)N, STAGE13_BC, (long long)(B * H));
    /* Never stage13_workspace_bytes' (size_t)-1 (past 9e18) here: the limits above keep the rows at or
     * below 2^46 * 128 = 2^53, each at most 4 (D + 2) = 520 bytes (dQ, D_i and, at N = 1, a query tile's
     * counter): 4.7e18. It counts in a double, exact below 2^53 bytes (8 PiB, past any GPU's memory). */
    const attn_problem p = attn_problem_make(B, H, N, D, 0);
    *need = stage13_workspace_bytes(&p);
    return ATTN_OK;
}

int backward_fa2_workspace_bytes(int64_t B, int64_t H, int64_t N, int64_t D, size_t *bytes) {
    const int64_t size[4] = {B, H, N, D};
    attn_refusal r;
    size_t need = 0;
    if (bytes == NULL) return attn_lib_status(attn_fail(ATTN_EINVAL, "bytes: must be a pointer, not NULL"));
    if (attn_refuse_sizes(size, &r)) return attn_lib_status(attn_lib_refuse(&r));
    const attn_status st = check_shape(size, &need);
    if (st == ATTN_OK) *bytes = need;
    return attn_lib_status(st);
}

/* Every rule that needs no CUDA call (backward_lib.h's list, in its order). */
static attn_status check_args(const void *const ptr[ARGS], size_t workspace_bytes, const int64_t size[4],
                              int causal, float scale, int dtype, int deterministic) {
    attn_refusal r;
    if (attn_refuse_null(ptr, arg_name, ARGS, &r) || attn_refuse_sizes(size, &r) ||
        attn_refuse_flag("causal", causal, &r) || attn_refuse_flag("deterministic", deterministic, &r))
        return attn_lib_refuse(&r);
    attn_status st = attn_lib_check_scale_and_dtype(scale, dtype);
    if (st != ATTN_OK) return st;
    static const unsigned align[ARGS] = {16, 16, 16, 16, 4, 16, 16, 16, 16, 16};
    if (attn_refuse_misaligned_list(ptr, arg_name, align, ARGS, &r)) return attn_lib_refuse(&r);
    size_t need = 0;
    if ((st = check_shape(size, &need)) != ATTN_OK) return st;
    if (workspace_bytes < need)
        return attn_fail(ATTN_EINVAL,
                         "workspace_bytes: must be at least %zu for this shape "
                         "(backward_fa2_workspace_bytes) (got %zu)",
                         need, workspace_bytes);
    const uint64_t tensor = (uint64_t)(size[0] * size[1] * size[2] * size[3]) * 2u;
    const uint64_t span[ARGS] = {tensor, tensor, tensor, tensor, (uint64_t)(size[0] * size[1] * size[2]) * 4u,
                                 tensor, tensor, tensor, tensor, need};
    int out = 0, in = 0;
    if (attn_first_overlap(ptr, span, FIRST_OUTPUT, ARGS, &out, &in))
        return attn_fail(ATTN_EINVAL,
                         "%s and %s: an output must not share memory with an input or with another "
                         "output",
                         arg_name[out], arg_name[in]);
    return ATTN_OK;
}

/* Stage 13 is mma.sync on bf16, cp.async and ldmatrix: sm_80 or newer. */
static attn_status check_device(void) {
    const int sm = attn_device_sm();
    if (sm < 0)
        return attn_fail(ATTN_ECUDA,
                         "device: the CUDA runtime cannot tell the current GPU's compute capability "
                         "(no usable device?)");
    if (sm < 80)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "device: the backward (stage 13) needs an sm_80 or newer GPU (A100, "
                         "RTX 30/40, H100, H200): mma.sync on bf16, cp.async, ldmatrix (got sm_%d)",
                         sm);
    return ATTN_OK;
}

/* An error an earlier call left pending belongs to its owner (backward_lib.h): named, left, nothing run. */
static attn_status check_no_pending_error(void) {
    const cudaError_t e = cudaPeekAtLastError();
    if (e == cudaSuccess) return ATTN_OK;
    return attn_fail(ATTN_ECUDA,
                     "an earlier CUDA call left an error pending in cudaGetLastError() (%s: %s); "
                     "nothing was queued: clear it (cudaGetLastError()) and call again",
                     cudaGetErrorName(e), cudaGetErrorString(e));
}

int backward_fa2_backward(const void *q, const void *k, const void *v, const void *o, const float *lse,
                          const void *d_o, void *dq, void *dk, void *dv, void *workspace,
                          size_t workspace_bytes, int64_t B, int64_t H, int64_t N, int64_t D, int causal,
                          float scale, int dtype, int deterministic, cudaStream_t stream) {
    const void *const ptr[ARGS] = {q, k, v, o, lse, d_o, dq, dk, dv, workspace};
    const int64_t size[4] = {B, H, N, D};
    attn_status st = check_args(ptr, workspace_bytes, size, causal, scale, dtype, deterministic);
    if (st == ATTN_OK) st = attn_lib_device_memory(ptr, arg_name, ARGS);
    if (st == ATTN_OK) st = check_device();
    if (st == ATTN_OK) st = check_no_pending_error();
    if (st != ATTN_OK) return attn_lib_status(st);
    attn_problem p = attn_problem_make(B, H, N, D, causal);
    p.scale = scale;
    p.dtype = (attn_dtype)dtype;
    /* attn_args holds o and lse writable because a forward stage writes them; a backward stage only reads */
    const attn_args a = {q, k,   v,  (void *)o, (float *)lse, workspace, (void *)stream,
                         1, d_o, dq, dk,        dv,           NULL};
    st = deterministic ? stage13d_run(&p, &a) : stage13_run(&p, &a);
    if (st != ATTN_OK) (void)cudaGetLastError(); /* nothing was pending before: the error is the run's own */
    return attn_lib_status(st);
}

const char *backward_fa2_status_string(int s) { return attn_lib_status_string(s); }
const char *backward_fa2_last_error(void) { return attn_last_error(); }
#endif
