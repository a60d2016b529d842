/*
 * backward_prep.cuh: the two small kernels around the main loop of the backward stages that sum dQ
 * over key tiles into an fp32 accumulator (13, 13d, 14, 14d), kept once here:
 *
 *   before:  the accumulator (and the deterministic modes' counters) zeroed, then
 *            D_i = rowsum(dO_i o O_i)           FlashAttention-2's Algorithm 2, line 4 (bwd_d_rowsum)
 *   after:   dQ = 16 bits of (scale * acc)      the scale applied once, at the end (bwd_dq_to_16bit)
 *
 * Both are memory-bound and tiny next to the main kernel (at B=4, H=32, N=4096, D=128: 2 x 128 MiB
 * read for D_i, 256 MiB read and 128 MiB written for dQ, against some 2.7 PFLOP in the main loop).
 * The workspace layout is backward_workspace.h's.
 */
#ifndef ATTN_BACKWARD_PREP_CUH
#define ATTN_BACKWARD_PREP_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "backward_workspace.h"
#include "cuda_check.h"
#include "fast_math.cuh"
#include "stage.h"

/* One warp per row: D_i in fp32 from the 16-bit dO and O (two elements per lane per step). */
template <int D, int BF16>
__global__ void bwd_d_rowsum(const uint16_t *o, const uint16_t *d_o, float *delta, int64_t rows) {
    const int lane = (int)threadIdx.x % 32;
    for (int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows;
         row += (int64_t)gridDim.x * (blockDim.x / 32)) {
        float sum = 0.0f;
        for (int d = 2 * lane; d < D; d += 64) {
            const uint32_t g = *reinterpret_cast<const uint32_t *>(d_o + row * D + d);
            const uint32_t v = *reinterpret_cast<const uint32_t *>(o + row * D + d);
            float2 gf, of;
            if (BF16) {
                gf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&g));
                of = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v));
            } else {
                gf = __half22float2(*reinterpret_cast<const __half2 *>(&g));
                of = __half22float2(*reinterpret_cast<const __half2 *>(&v));
            }
            sum = fmaf(gf.x, of.x, fmaf(gf.y, of.y, sum));
        }
        for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (lane == 0) delta[row] = sum;
    }
}

/* dQ = scale * the accumulator, rounded to 16 bits, two elements per thread per step. */
template <int BF16>
__global__ void bwd_dq_to_16bit(const float *dq_acc, uint16_t *dq, float scale, int64_t pairs) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < pairs;
         e += (int64_t)gridDim.x * blockDim.x) {
        const float2 x = reinterpret_cast<const float2 *>(dq_acc)[e];
        reinterpret_cast<uint32_t *>(dq)[e] = pack_16x2<BF16>(x.x * scale, x.y * scale);
    }
}

/* Blocks for `work` items of per_block each, at least 1, capped at 65535 x 64 (grid-stride loops). */
static inline unsigned bwd_grid_1d(int64_t work, int per_block) {
    const int64_t b = (work + per_block - 1) / per_block;
    return (unsigned)(b < 65535 * 64 ? (b > 0 ? b : 1) : 65535 * 64);
}

template <int BF16>
static attn_status bwd_launch_d_rowsum(const attn_problem *p, const attn_args *a, bwd_workspace w,
                                       cudaStream_t stream) {
    const uint16_t *o = (const uint16_t *)a->o, *d_o = (const uint16_t *)a->d_o;
    const int64_t rows = p->B * p->H * p->N;
    const unsigned grid = bwd_grid_1d(rows, 8); /* 256 threads: 8 warps, a row each */
    switch (p->D) {
    case 32: bwd_d_rowsum<32, BF16><<<grid, 256, 0, stream>>>(o, d_o, w.delta, rows); break;
    case 64: bwd_d_rowsum<64, BF16><<<grid, 256, 0, stream>>>(o, d_o, w.delta, rows); break;
    case 96: bwd_d_rowsum<96, BF16><<<grid, 256, 0, stream>>>(o, d_o, w.delta, rows); break;
    case 128: bwd_d_rowsum<128, BF16><<<grid, 256, 0, stream>>>(o, d_o, w.delta, rows); break;
    default:
        return attn_fail(ATTN_EUNSUPPORTED, "D_i kernel: no instance for head dim %lld", (long long)p->D);
    }
    return ATTN_OK;
}

/* Before the main kernel, on `stream`: the accumulator zeroed (and, det, the counters of query tiles of
 * br rows), then D_i. `id` names the stage in launch errors. */
static attn_status bwd_prepare(const char *id, const attn_problem *p, const attn_args *a, bwd_workspace w,
                               int br, int det, cudaStream_t stream) {
    const int64_t rows = p->B * p->H * p->N, tiles = p->B * p->H * ((p->N + br - 1) / br);
    ATTN_CUDA(cudaMemsetAsync(w.dq_acc, 0, (size_t)(rows * p->D) * sizeof(float), stream));
    if (det) ATTN_CUDA(cudaMemsetAsync(w.order, 0, (size_t)tiles * sizeof(int), stream));
    const attn_status st = p->dtype == ATTN_BF16 ? bwd_launch_d_rowsum<1>(p, a, w, stream)
                                                 : bwd_launch_d_rowsum<0>(p, a, w, stream);
    if (st != ATTN_OK) return st;
    char what[64];
    snprintf(what, sizeof what, "stage %s D_i kernel", id);
    ATTN_CUDA_LAUNCHED(what);
    return ATTN_OK;
}

/* After the main kernel: dQ from the accumulator. */
static attn_status bwd_finish(const char *id, const attn_problem *p, const attn_args *a, bwd_workspace w,
                              cudaStream_t stream) {
    const int64_t pairs = p->B * p->H * p->N * p->D / 2; /* D is even */
    uint16_t *dq = (uint16_t *)a->dq;
    if (p->dtype == ATTN_BF16)
        bwd_dq_to_16bit<1><<<bwd_grid_1d(pairs, 256), 256, 0, stream>>>(w.dq_acc, dq, p->scale, pairs);
    else
        bwd_dq_to_16bit<0><<<bwd_grid_1d(pairs, 256), 256, 0, stream>>>(w.dq_acc, dq, p->scale, pairs);
    char what[64];
    snprintf(what, sizeof what, "stage %s dQ kernel", id);
    ATTN_CUDA_LAUNCHED(what);
    return ATTN_OK;
}

#endif
