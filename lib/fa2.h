/*
 * fa2.h: FlashAttention-2 forward as a small C library (stage 06 of the suite, usable on its own).
 *
 *   O = softmax(scale * Q K^T [+ causal mask]) V,   LSE = log of the softmax denominator
 *
 * Layout: Q, K, V, O are contiguous row-major [B, H, N, D] arrays of one 16-bit type (fp16 or bf16) in
 * device memory of the current device (cudaMalloc, cudaMallocAsync, or managed memory), each 16-byte
 * aligned (cudaMalloc gives 256). LSE, when not NULL, is a 4-byte aligned float32 [B, H, N] device array
 * that receives the NATURAL log of sum_j exp(scale * q_i . k_j) over the keys query i sees (all N, or
 * 0..i when causal).
 * The outputs O and LSE must not overlap Q, K, V or each other; Q, K and V may overlap (q == k is fine).
 *
 * Build: `make build/libfa2.a`, then link a C program with
 *   gcc prog.c -Ilib -I/usr/local/cuda/include build/libfa2.a \
 *       -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm
 * Needs an sm_80 or newer GPU (A100, RTX 30xx, H100/H200, ...).
 */
#ifndef FA2_H
#define FA2_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FA2_F16 = 0, FA2_BF16 = 1 } fa2_dtype;

typedef enum {
    FA2_OK = 0,
    FA2_EINVAL = 1,       /* a bad argument: NULL or host pointer, memory of another device, size <= 0,
                             B*H*N*D past 64 bits, causal not 0 or 1, misaligned or overlapping buffers,
                             bad scale or dtype */
    FA2_EUNSUPPORTED = 2, /* valid but not handled here: head dim other than 32/64/96/128/256, N > 2^30,
                             B*H > 65535^2 (the grid's y x z) */
    FA2_ECUDA = 3,        /* the CUDA runtime refused: no device, kernel configuration or launch */
} fa2_status;

/* The largest |scale| taken: the kernel multiplies by scale * log2(e), which must stay a finite float. */
#define FA2_MAX_SCALE 2.3e38f

/*
 * Launches the forward kernel on `stream` and returns without synchronising. Never exits.
 *   D      32, 64, 96, 128 or 256 (64 and 128 are the tuned ones)
 *   causal 0: every query sees every key; 1: query i sees keys 0..i
 *   scale  finite, |scale| <= FA2_MAX_SCALE; 1/sqrt(D) is the usual one (negative flips the scores,
 *          0 is uniform attention). The results are accurate while every |scale * log2(e) * q . k| is
 *          at most 2^24 (build/attn refuses a scale past that bound for its inputs): the kernel
 *          subtracts the row max m inside one FFMA, 2^(s * sl2 - fl(m * sl2)), and past 2^24 the
 *          rounding of fl(m * sl2) exceeds one unit; near 2^88 it overflows the 16-bit P (NaN in O).
 * Before launching it asks the runtime what each pointer is (cudaPointerGetAttributes, one call each):
 * host memory and memory of another device are FA2_EINVAL.
 * FA2_ECUDA is the error of its own calls (the pointer query, the configuration, the launch), never one
 * that an earlier call left in cudaGetLastError(). When the call returns FA2_OK, that earlier error stays
 * there for its owner, neither reported nor cleared; when one of its own CUDA calls fails, it clears the
 * error that call caused, and the runtime, which keeps one pending error, drops an earlier one with it.
 * A refusal decided from the arguments alone makes no CUDA call. A fault inside the asynchronous kernel
 * run shows up at the caller's next synchronisation, as for any kernel. When the result is not FA2_OK,
 * nothing was queued on the stream.
 * Threads: fa2_forward may be called from several threads at once (each has its own fa2_last_error());
 * `stream` is a stream of the current device, or 0 (the legacy default stream).
 */
fa2_status fa2_forward(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B, int64_t H,
                       int64_t N, int64_t D, int causal, float scale, fa2_dtype dtype, cudaStream_t stream);

/* Why this thread's most recent fa2_forward() call that did not return FA2_OK failed, in one line naming
 * the argument and, where it is a number, the value passed ("scale: must be finite with |scale| <=
 * FA2_MAX_SCALE = 2.3e38 (got inf)", "H: must be at least 1 (got 0)"); a successful call leaves it
 * as it was. "" before any failure. The text is in a buffer of the calling thread: valid until that
 * thread's next failing fa2_forward() call, or its end. */
const char *fa2_last_error(void);

/* "ok", "invalid argument", "unsupported", "CUDA error", or "unknown status". */
const char *fa2_status_string(fa2_status s);

#ifdef __cplusplus
}
#endif
#endif
