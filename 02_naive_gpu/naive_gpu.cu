/*
 * Stage 02: naive attention on the GPU, with the N x N score matrix in device memory.
 *
 * What it adds: the GPU, used the way a framework's eager mode uses it. Three plain kernels, each
 * reading its inputs from and writing its result to device memory, the same steps as
 *     scores = q @ k^T * scale                      kernel 1: S, fp32, [B, H, N, N]
 *     scores.masked_fill(j > i, -inf)  (causal)     kernel 2: row softmax in fp32 with the mask,
 *     probs = softmax(scores.float()).to(fp16)                P rounded to fp16 [B, H, N, N], LSE
 *     out = probs @ v                               kernel 3: O = P V, fp32 accumulation
 * Versus stage 01: the same arithmetic (fp32 instead of double), but the whole N x N matrix is
 * written once and read twice. At B=4, H=32, N=8192 that is 48 GiB of scratch (4 bytes of S and 2
 * of P per score); at N=16384 it is 192 GiB, more than an H200's 141 GB: the harness refuses the
 * run cleanly before allocating ("stage 02 needs ... GiB for the N x N scores, ... GiB free").
 * Causal: like a framework, it computes all N x N scores and multiplies by the zeros above the
 * diagonal, so causal costs as much as non-causal.
 *
 * Limits: fp16 only; any D from 1 to 256; any N >= 1 while 6*B*H*N*N bytes fit on the device.
 * Run:    build/attn --stage 02 --batch 4 --heads 32 --seq 4096 --dim 64 --check
 */
#include <cuda_fp16.h>
#include <math.h>

#include "cuda_check.h"
#include "naive_gpu.h"

/* Every kernel walks its work with a grid-stride loop over 64-bit indices, so that B*H*N*N past
 * 2^31 and B*H past the grid's y limit of 65535 need no special case. */
#define NAIVE_MAX_BLOCKS 65535u

static unsigned blocks_for(int64_t work, unsigned per_block) {
    int64_t b = (work + per_block - 1) / per_block;
    return (unsigned)(b < (int64_t)NAIVE_MAX_BLOCKS ? (b > 0 ? b : 1) : NAIVE_MAX_BLOCKS);
}

/* Kernel 1: S[bh, i, j] = scale * q_i . k_j, one thread per score. Threads of a warp take 32
 * consecutive keys j of one query row i: q_i is one broadcast load, k_j comes through L1. */
__global__ void naive_scores(const __half *q, const __half *k, float *S, int64_t BH, int64_t N,
                             int D, float scale) {
    const int64_t total = BH * N * N;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = e % N, i = (e / N) % N, bh = e / (N * N);
        const __half *qi = q + (bh * N + i) * D, *kj = k + (bh * N + j) * D;
        float acc = 0.0f;
        for (int d = 0; d < D; d++) acc += __half2float(qi[d]) * __half2float(kj[d]);
        S[e] = acc * scale;
    }
}

/* Kernel 2: one block per row. Three sweeps over the row in device memory: the max (with the
 * causal mask applied as -inf, like masked_fill), the sum of exp(s - max), then P = exp(s - max)/l
 * rounded to fp16. LSE = max + ln(l) falls out of the same two numbers. */
#define SOFTMAX_THREADS 256
__device__ float block_reduce(float x, int is_max) {
    __shared__ float red[SOFTMAX_THREADS / 32];
    for (int o = 16; o > 0; o /= 2) {
        float y = __shfl_xor_sync(0xffffffffu, x, o);
        x = is_max ? fmaxf(x, y) : x + y;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = x;
    __syncthreads();
    x = red[0];
    for (int w = 1; w < SOFTMAX_THREADS / 32; w++) x = is_max ? fmaxf(x, red[w]) : x + red[w];
    __syncthreads(); /* red[] is reused by the next call */
    return x;
}

__global__ void naive_softmax(const float *S, __half *P, float *lse, int64_t BH, int64_t N,
                              int causal) {
    for (int64_t row = blockIdx.x; row < BH * N; row += gridDim.x) {
        const int64_t i = row % N;
        const int64_t nvis = causal ? i + 1 : N; /* keys 0..i are visible when causal */
        const float *s = S + row * N;
        __half *prow = P + row * N;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < nvis; j += blockDim.x) m = fmaxf(m, s[j]);
        m = block_reduce(m, 1);
        float l = 0.0f;
        for (int64_t j = threadIdx.x; j < nvis; j += blockDim.x) l += expf(s[j] - m);
        l = block_reduce(l, 0);
        const float inv_l = 1.0f / l;
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x)
            prow[j] = __float2half_rn(j < nvis ? expf(s[j] - m) * inv_l : 0.0f);
        if (threadIdx.x == 0) lse[row] = m + logf(l);
    }
}

/* Kernel 3: O[bh, i, :] = sum_j P[bh, i, j] V[bh, j, :]. A warp owns one row: P[i, j] is one
 * broadcast load, V[j, :] is read coalesced, 32 columns per load; each lane keeps up to 8
 * accumulators (D <= 256). All N keys are summed, zeros above the diagonal included. */
#define OUT_ROWS_PER_BLOCK 8
__global__ void naive_output(const __half *P, const __half *v, __half *o, int64_t BH, int64_t N,
                             int D) {
    const int lane = threadIdx.x & 31;
    for (int64_t row = (int64_t)blockIdx.x * OUT_ROWS_PER_BLOCK + threadIdx.x / 32; row < BH * N;
         row += (int64_t)gridDim.x * OUT_ROWS_PER_BLOCK) {
        const int64_t bh = row / N;
        const __half *prow = P + row * N, *vh = v + bh * N * D;
        float acc[ATTN_MAX_D / 32];
#pragma unroll
        for (int c = 0; c < ATTN_MAX_D / 32; c++) acc[c] = 0.0f;
        for (int64_t j = 0; j < N; j++) {
            const float pj = __half2float(prow[j]);
#pragma unroll
            for (int c = 0; c < ATTN_MAX_D / 32; c++) {
                const int d = c * 32 + lane;
                if (d < D) acc[c] += pj * __half2float(vh[j * D + d]);
            }
        }
#pragma unroll
        for (int c = 0; c < ATTN_MAX_D / 32; c++) {
            const int d = c * 32 + lane;
            if (d < D) o[row * D + d] = __float2half_rn(acc[c]);
        }
    }
}

extern "C" attn_status stage02_run(const attn_problem *p, const attn_args *a) {
    const int64_t BH = p->B * p->H, N = p->N;
    const int D = (int)p->D;
    cudaStream_t stream = (cudaStream_t)a->stream;
    float *S = (float *)a->workspace;
    __half *P = (__half *)(S + BH * N * N);

    naive_scores<<<blocks_for(BH * N * N, 256), 256, 0, stream>>>(
        (const __half *)a->q, (const __half *)a->k, S, BH, N, D, p->scale);
    ATTN_CUDA_LAUNCHED("stage 02 scores kernel");
    naive_softmax<<<blocks_for(BH * N, 1), SOFTMAX_THREADS, 0, stream>>>(S, P, a->lse, BH, N,
                                                                          p->causal);
    ATTN_CUDA_LAUNCHED("stage 02 softmax kernel");
    naive_output<<<blocks_for(BH * N, OUT_ROWS_PER_BLOCK), 32 * OUT_ROWS_PER_BLOCK, 0, stream>>>(
        P, (const __half *)a->v, (__half *)a->o, BH, N, D);
    ATTN_CUDA_LAUNCHED("stage 02 output kernel");
    return ATTN_OK;
}
