/*
 * fa2.h: FlashAttention-2 forward as a small C library (stage 06 of the suite, usable on its own).
 *
 *   O = softmax(scale * Q K^T [+ causal mask]) V,   LSE = log of the softmax denominator
 *
 * Layout: Q, K, V, O are contiguous row-major [B, H, N, D] device arrays of one 16-bit type (fp16 or
 * bf16), each 16-byte aligned (cudaMalloc gives 256). LSE, when not NULL, is a float32 [B, H, N]
 * device array that receives the NATURAL log of sum_j exp(scale * q_i . k_j) over the keys query i
 * sees (all N, or 0..i when causal).
 *
 * Build: `make build/libfa2.a`, then link a C program with
 *   gcc prog.c -I06_fa2_full -I/usr/local/cuda/include build/libfa2.a \
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
    FA2_EINVAL = 1,       /* a bad argument: NULL pointer, size <= 0, misaligned pointer, bad scale */
    FA2_EUNSUPPORTED = 2, /* valid but not handled here: head dim other than 32/64/96/128/256 */
    FA2_ECUDA = 3,        /* the CUDA runtime refused: no device, kernel configuration or launch */
} fa2_status;

/*
 * Launches the forward kernel on `stream` and returns without synchronising. Never exits.
 *   D      32, 64, 96, 128 or 256 (64 and 128 are the tuned ones)
 *   causal 0: every query sees every key; 1: query i sees keys 0..i
 *   scale  any finite value; 1/sqrt(D) is the usual one
 * FA2_ECUDA covers the configuration and the launch (it reads and clears cudaGetLastError()); a fault
 * inside the asynchronous kernel run shows up at the caller's next synchronisation, as for any kernel.
 */
fa2_status fa2_forward(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B, int64_t H,
                       int64_t N, int64_t D, int causal, float scale, fa2_dtype dtype, cudaStream_t stream);

/* "ok", "invalid argument", "unsupported", "CUDA error", or "unknown status". */
const char *fa2_status_string(fa2_status s);

#ifdef __cplusplus
}
#endif
#endif
