/*
 * Stage 11: the backward pass, naive: the gradients dQ, dK, dV on the GPU the way autograd computes
 * them, with the N x N matrices P and dS in device memory.
 *
 * What it adds: the backward pass. The loss L has dO = dL/dO; the forward left O and LSE. With
 * sl2 = scale * log2(e) (the forward stages' exp2 with log2(e) folded in), for head (b, h):
 *     P_ij  = 2^(s_ij log2(e) - LSE_i log2(e)) = exp(s_ij - LSE_i),  s_ij = scale q_i . k_j
 *                                              (0 where causal hides j > i)     kernel 2: P,  fp32
 *     D_i   = dO_i . O_i                                                          kernel 1: D,  fp32
 *     dP_ij = dO_i . v_j,   dS_ij = P_ij (dP_ij - D_i)                           kernel 3: dS, fp32
 *     dV    = P^T dO                                                              kernel 4
 *     dK    = scale dS^T Q                                                        kernel 4 again
 *     dQ    = scale dS K                                                          kernel 5
 * P is recomputed from the forward's LSE rather than kept from the forward (a framework keeps the
 * forward's P; here the forward stages never write it): one exp per score instead of N x N bytes
 * kept alive between the passes. D_i is the softmax backward's sum_j P_ij dP_ij, which equals
 * dO_i . O_i because O_i = sum_j P_ij v_j: D costs D multiply-adds per row instead of N.
 *
 * Versus stage 02 (the naive forward): the same way of working, one plain kernel per operation, one
 * thread per output element, every intermediate in device memory, now for the five products of the
 * backward. The cost is the two N x N matrices: 8 bytes per score. At B=4, H=32 that is 16 GiB at
 * N=4096, 64 GiB at N=8192 and 256 GiB at N=16384, more than an H200's 141 GB: the harness refuses
 * that run cleanly before allocating ("stage 11 needs 256.00 GiB for the N x N P and dS, ... GiB
 * free"). Causal costs as much as non-causal: the hidden scores are zeros that are stored, read and
 * multiplied, as a framework does.
 *
 * Every output element is summed by one thread in a fixed order (no atomics): two runs give the same
 * bits. Each of the five products is N^2 D multiply-adds per head, the count FlashAttention's
 * convention gives the backward (2.5 times the forward's two products).
 *
 * Limits: fp16 or bf16; any D from 1 to 256; any N >= 1 while 8*B*H*N*N + 4*B*H*N bytes fit on the
 * device; B*H past 65535 (grid-stride loops over 64-bit indices).
 * Run:    build/attn --stage 11 --batch 4 --heads 32 --seq 4096 --dim 64 --check
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "backward_naive.h"
#include "cuda_check.h"
#include "fast_math.cuh"

/* As stage 02: a grid-stride loop over 64-bit indices, at most 65535 blocks, so B*H*N*N past 2^31
 * and B*H past the grid's y limit of 65535 need no special case. */
#define NAIVE_MAX_BLOCKS 65535u
#define NAIVE_THREADS 256

static unsigned blocks_for(int64_t work, unsigned per_block) {
    int64_t b = (work + per_block - 1) / per_block;
    return (unsigned)(b < (int64_t)NAIVE_MAX_BLOCKS ? (b > 0 ? b : 1) : NAIVE_MAX_BLOCKS);
}

/* 16-bit <-> fp32 for either input type */
static __device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
static __device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> static __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

/* a . b over D elements, in order d = 0 .. D-1 */
template <typename T> static __device__ __forceinline__ float dot_rows(const T *a, const T *b, int D) {
    float acc = 0.0f;
    for (int d = 0; d < D; d++) acc = fmaf(to_f32(a[d]), to_f32(b[d]), acc);
    return acc;
}

/* Kernel 1: D_i = dO_i . O_i, one thread per row (B*H*N rows). */
template <typename T>
__global__ void stage11_delta(const T *o, const T *d_o, float *delta, int64_t rows, int D) {
    for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < rows;
         row += (int64_t)gridDim.x * blockDim.x)
        delta[row] = dot_rows(d_o + row * D, o + row * D, D);
}

/* Kernel 2: P[bh, i, j] = 2^(s_ij log2(e) - LSE_i log2(e)), one thread per score. As stage 02's
 * scores kernel, a warp takes 32 consecutive keys j of one row i: q_i is one broadcast load. The
 * hidden scores of a causal mask are stored as zeros, not skipped. */
template <typename T>
__global__ void stage11_probs(const T *q, const T *k, const float *lse, float *P, int64_t BH, int64_t N, int D,
                              float sl2, int causal) {
    const int64_t total = BH * N * N;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = e % N, row = e / N, i = row % N, bh = row / N;
        float p = 0.0f;
        if (!causal || j <= i) {
            const float s = dot_rows(q + row * D, k + (bh * N + j) * D, D); /* q_i . k_j, unscaled */
            p = fast_exp2(fmaf(s, sl2, -lse[row] * ATTN_LOG2E));
        }
        P[e] = p;
    }
}

/* Kernel 3: dS[bh, i, j] = P_ij (dO_i . v_j - D_i), one thread per score; dP is formed and used in
 * place (a framework would store it too: 4 more bytes per score). */
template <typename T>
__global__ void stage11_dscores(const T *d_o, const T *v, const float *P, const float *delta, float *dS,
                                int64_t BH, int64_t N, int D) {
    const int64_t total = BH * N * N;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = e % N, row = e / N, bh = row / N;
        const float dp = dot_rows(d_o + row * D, v + (bh * N + j) * D, D);
        dS[e] = P[e] * (dp - delta[row]);
    }
}

/* Kernel 4: out[bh, j, d] = mult * sum_i M[bh, i, j] X[bh, i, d], i = 0 .. N-1 in order: M^T X, for
 * dV = P^T dO (mult 1) and dK = scale dS^T Q. One thread per output element; the threads of a warp
 * take consecutive d of one j (D >= 32), so M[i, j] is one broadcast load and X[i, :] is coalesced. */
template <typename T>
__global__ void stage11_mt_x(const float *M, const T *X, T *out, int64_t BH, int64_t N, int D, float mult) {
    const int64_t total = BH * N * D;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = e % D, row = e / D, j = row % N, bh = row / N;
        const float *m = M + bh * N * N + j;
        const T *x = X + bh * N * D + d;
        float acc = 0.0f;
        for (int64_t i = 0; i < N; i++) acc = fmaf(m[i * N], to_f32(x[i * D]), acc);
        out[e] = from_f32<T>(acc * mult);
    }
}

/* Kernel 5: out[bh, i, d] = mult * sum_j M[bh, i, j] X[bh, j, d], j = 0 .. N-1 in order: M X, for
 * dQ = scale dS K. The same thread map as kernel 4; M's row i is read along the row. */
template <typename T>
__global__ void stage11_m_x(const float *M, const T *X, T *out, int64_t BH, int64_t N, int D, float mult) {
    const int64_t total = BH * N * D;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = e % D, row = e / D, bh = row / N;
        const float *m = M + row * N;
        const T *x = X + bh * N * D + d;
        float acc = 0.0f;
        for (int64_t j = 0; j < N; j++) acc = fmaf(m[j], to_f32(x[j * D]), acc);
        out[e] = from_f32<T>(acc * mult);
    }
}

/* The six launches on the caller's stream, each checked, none waited for. Workspace: P [BH, N, N],
 * dS [BH, N, N], D [BH, N], all fp32 (stage11_workspace_bytes). */
template <typename T> static attn_status stage11_launch(const attn_problem *p, const attn_args *a) {
    const int64_t BH = p->B * p->H, N = p->N, rows = BH * N, scores = rows * N, elems = rows * p->D;
    const int D = (int)p->D;
    cudaStream_t stream = (cudaStream_t)a->stream;
    float *P = (float *)a->workspace, *dS = P + scores, *delta = dS + scores;
    const T *q = (const T *)a->q, *k = (const T *)a->k, *v = (const T *)a->v, *o = (const T *)a->o;
    const T *d_o = (const T *)a->d_o;

    stage11_delta<T><<<blocks_for(rows, NAIVE_THREADS), NAIVE_THREADS, 0, stream>>>(o, d_o, delta, rows, D);
    ATTN_CUDA_LAUNCHED("stage 11 D kernel");
    stage11_probs<T><<<blocks_for(scores, NAIVE_THREADS), NAIVE_THREADS, 0, stream>>>(
        q, k, a->lse, P, BH, N, D, p->scale * ATTN_LOG2E, p->causal);
    ATTN_CUDA_LAUNCHED("stage 11 P kernel");
    stage11_dscores<T><<<blocks_for(scores, NAIVE_THREADS), NAIVE_THREADS, 0, stream>>>(d_o, v, P, delta, dS,
                                                                                        BH, N, D);
    ATTN_CUDA_LAUNCHED("stage 11 dS kernel");
    stage11_mt_x<T><<<blocks_for(elems, NAIVE_THREADS), NAIVE_THREADS, 0, stream>>>(P, d_o, (T *)a->dv, BH, N,
                                                                                    D, 1.0f);
    ATTN_CUDA_LAUNCHED("stage 11 dV kernel");
    stage11_mt_x<T><<<blocks_for(elems, NAIVE_THREADS), NAIVE_THREADS, 0, stream>>>(dS, q, (T *)a->dk, BH, N, D,
                                                                                    p->scale);
    ATTN_CUDA_LAUNCHED("stage 11 dK kernel");
    stage11_m_x<T><<<blocks_for(elems, NAIVE_THREADS), NAIVE_THREADS, 0, stream>>>(dS, k, (T *)a->dq, BH, N, D,
                                                                                   p->scale);
    ATTN_CUDA_LAUNCHED("stage 11 dQ kernel");
    return ATTN_OK;
}

extern "C" attn_status stage11_run(const attn_problem *p, const attn_args *a) {
    return p->dtype == ATTN_BF16 ? stage11_launch<__nv_bfloat16>(p, a) : stage11_launch<__half>(p, a);
}
