/*
 * backward_lib.h: libbackward_fa2, stage 13 (FlashAttention-2's backward on tensor cores) as a C library
 * (build/libbackward_fa2.so: make build/libbackward_fa2.so, or make shared-libs), for
 * python/flashattn_stages.py and any other caller with a C FFI. Given the forward's O and LSE and
 * dO = dLoss/dO, it writes
 *
 *     P_ij = exp(scale q_i . k_j - LSE_i)  (0 where the causal mask hides key j from query i)
 *     D_i  = dO_i . O_i,   dS_ij = P_ij (dO_i . v_j - D_i)
 *     dV = P^T dO,   dK = scale dS^T Q,   dQ = scale dS K
 *
 * Layout: q, k, v, o, d_o, dq, dk, dv are contiguous row-major [B, H, N, D] arrays of one 16-bit type
 * (dtype 0 fp16, 1 bf16); lse is float32 [B, H, N], the natural-log LSE that every forward of the suite
 * writes (fa2_forward, NAME_forward); all device (or managed) memory of the current device. o and lse
 * must be the forward's for these q, k, v, causal and scale: the backward recomputes P from them.
 *
 * The workspace is the caller's: workspace_bytes >= what backward_fa2_workspace_bytes() answers, 4 (D + 1)
 * bytes a row (the fp32 dQ accumulator and D_i) plus 4 bytes per 64-row query tile (13d's order
 * counters): O(N) per head, 516 bytes a row at D = 128. Why the caller's and not cudaMallocAsync inside
 * the call: PyTorch's caching allocator then hands it out (and reuses it) on the caller's stream, counts
 * it in torch.cuda.memory_allocated() and can free its cache for it when memory runs short; memory the
 * library took from its own runtime's pool would be invisible to PyTorch and held back from it. The
 * library itself then holds no state and allocates nothing, so no call fails half-way for memory. Its
 * contents need not be set: stage 13 zeroes what it sums into.
 *
 * backward_fa2_backward checks, in this order, before any CUDA call, refusing with 1 (invalid argument)
 * or 2 (unsupported) and a line in backward_fa2_last_error() that names the argument and the value:
 *   - no pointer NULL; B, H, N, D >= 1; causal and deterministic 0 or 1;
 *   - scale finite with |scale| <= ATTN_LIB_MAX_SCALE = 2.3e38, the forward's rule (0 is uniform
 *     attention, negative flips the scores); dtype 0 or 1;
 *   - q, k, v, o, d_o, dq, dk, dv and the workspace 16-byte aligned (cp.async moves 16 bytes; every
 *     allocator gives 256), lse 4-byte aligned;
 *   - stage 13's shape: D 32, 64, 96 or 128 (2: at D = 256, dK and dV alone would take 256 registers a
 *     thread), N <= 2^24 (2; the kernels index rows with 32-bit ints), B*H*N*D within 64 bits (1),
 *     B*H*ceil(N / 128) <= 65535 * 2^30 (2: one launch's blocks, a block per 128 keys);
 *   - workspace_bytes large enough (1);
 *   - no output (dq, dk, dv, workspace) shares a byte with an input (q, k, v, o, lse, d_o) or another
 *     output; the inputs may share memory (they are only read);
 * then with the CUDA runtime: every pointer memory of the current device (1 when not; 3 when the runtime
 * cannot answer: no usable device); the current GPU sm_80 or newer (2 otherwise, "device: ... (got
 * sm_75)"; ATTN_FAKE_SM fakes the answer for tests, kit/device_sm.h); no error that an earlier,
 * unrelated CUDA call left pending in cudaGetLastError() (3, naming it: stage 13 launches with <<<>>>
 * and asks cudaGetLastError(), which would report that error as its own and clear it; it is left for its
 * owner and nothing is queued). Then stage 13 runs, which may still refuse with 2 a GPU whose shared
 * memory per block is smaller than the kernel's (146 KB at D = 96 and 128, 82 KB at D = 64: the sm_86,
 * sm_89 and sm_120 GPUs allow 99 KB).
 * deterministic = 1 runs 13d: dQ summed over the key tiles in a fixed order, bit-for-bit the same on every
 * run; 0 runs 13, whose atomic adds make dQ differ from run to run in its last bits.
 *
 * Launches on `stream` (a stream of the current device, or 0) and returns without synchronising; a fault
 * inside the kernels shows at the caller's next synchronisation. A refusal decided before the launches
 * (every rule above) queues nothing; when a launch itself fails (3), the launches before it stay queued
 * and their own CUDA error is cleared, so that no later call reports it. Thread-safe: each thread has its
 * own backward_fa2_last_error(), "" before its first failure and kept by a successful call.
 * Status codes are those of fa2_forward: 0 ok, 1 invalid argument, 2 unsupported, 3 CUDA error.
 */
#ifndef ATTN_BACKWARD_LIB_H
#define ATTN_BACKWARD_LIB_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int backward_fa2_backward(const void *q, const void *k, const void *v, const void *o, const float *lse,
                          const void *d_o, void *dq, void *dk, void *dv, void *workspace,
                          size_t workspace_bytes, int64_t B, int64_t H, int64_t N, int64_t D, int causal,
                          float scale, int dtype, int deterministic, cudaStream_t stream);

/* The workspace backward_fa2_backward needs for this shape, in *bytes: 0, or 1 (a size below 1, bytes
 * NULL, B*H*N*D past 64 bits) or 2 (what stage 13 does not take: a head dim, N, B*H), with the reason
 * in backward_fa2_last_error(). No CUDA call. */
int backward_fa2_workspace_bytes(int64_t B, int64_t H, int64_t N, int64_t D, size_t *bytes);

/* "ok", "invalid argument", "unsupported", "CUDA error", or "unknown status". */
const char *backward_fa2_status_string(int s);

/* Why this thread's most recent failing call failed, in one line naming the argument. */
const char *backward_fa2_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
