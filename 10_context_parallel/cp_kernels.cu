/*
 * cp_kernels.cu: stage 10's own kernels. The attention itself is the local stage's (picked from the
 * registry at run time); what is left is memory-bound glue around it:
 *   cp_merge_kernel   one warp per query row: the running (LSE, O) of the row and the call's partial
 *                     (LSE_i, O_i) become one, with cp_merge.h's weights (the same code the CPU tests
 *                     run). Per element it reads 4 + 2 bytes and writes 4: about 0.2 ms for a chunk of
 *                     16384 rows x 32 heads x D=128 on an H200, against about 12 ms for that chunk's
 *                     local attention call.
 *   cp_fill_kernel    the running LSE starts at -inf (no keys yet).
 *   cp_finish_kernel  the running O, fp32, rounded once to fp16 or bf16 at the end.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "cp_kernels.h"
#include "cp_merge.h"
#include "cuda_check.h"

#define CP_WARPS 8 /* rows per block of the merge kernel */

static __device__ __forceinline__ float cp_to_f32(__half x) { return __half2float(x); }
static __device__ __forceinline__ float cp_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ void cp_from_f32(float x, __half *d) { *d = __float2half_rn(x); }
static __device__ __forceinline__ void cp_from_f32(float x, __nv_bfloat16 *d) { *d = __float2bfloat16_rn(x); }

template <typename T>
__global__ void cp_merge_kernel(float *o_acc, float *lse_acc, int64_t acc_rows, const T *o_part,
                                const float *lse_part, int64_t part_rows, int64_t rows, int64_t D,
                                int64_t from, int64_t nrows, int64_t shift) {
    const int64_t r = (int64_t)blockIdx.x * CP_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const int64_t bh = r / nrows, i = from + r % nrows; /* i: row of the partial */
    float *oa = o_acc + (bh * acc_rows + shift + i) * D;
    float *la = lse_acc + bh * acc_rows + shift + i;
    const T *ob = o_part + (bh * part_rows + i) * D;
    const cp_weights w = cp_merge_weights(*la, lse_part[bh * part_rows + i]);
    for (int64_t d = lane; d < D; d += 32) oa[d] = cp_merge_elem(w, oa[d], cp_to_f32(ob[d]));
    __syncwarp(); /* every lane has read *la before lane 0 replaces it */
    if (lane == 0) *la = w.lse;
}

__global__ void cp_fill_kernel(float *p, int64_t n) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
        p[e] = -INFINITY;
}

template <typename T> __global__ void cp_finish_kernel(T *out, const float *o, int64_t n) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
        cp_from_f32(o[e], &out[e]);
}

/* Grid-stride kernels: enough blocks to fill any GPU (132 SMs x 8 blocks of 256 on an H200). */
static unsigned cp_blocks(int64_t n) {
    const int64_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b < 1 ? 1 : b) : 4096);
}

extern "C" attn_status cp_merge_launch(float *o_acc, float *lse_acc, int64_t acc_rows, const void *o_part,
                                       const float *lse_part, int64_t part_rows, int64_t BH, int64_t D,
                                       int64_t from, int64_t to, int64_t shift, attn_dtype dtype,
                                       cudaStream_t stream) {
    const int64_t nrows = to - from, rows = BH * nrows;
    if (nrows <= 0) return ATTN_OK;
    const int64_t blocks = (rows + CP_WARPS - 1) / CP_WARPS;
    if (blocks > 0x7fffffff) return attn_fail(ATTN_EINVAL, "stage 10: %lld rows to merge at once", (long long)rows);
    if (dtype == ATTN_BF16)
        cp_merge_kernel<<<(unsigned)blocks, CP_WARPS * 32, 0, stream>>>(
            o_acc, lse_acc, acc_rows, (const __nv_bfloat16 *)o_part, lse_part, part_rows, rows, D, from, nrows, shift);
    else
        cp_merge_kernel<<<(unsigned)blocks, CP_WARPS * 32, 0, stream>>>(
            o_acc, lse_acc, acc_rows, (const __half *)o_part, lse_part, part_rows, rows, D, from, nrows, shift);
    ATTN_CUDA_LAUNCHED("stage 10 merge kernel");
    return ATTN_OK;
}

extern "C" attn_status cp_fill_neg_inf(float *lse, int64_t n, cudaStream_t stream) {
    cp_fill_kernel<<<cp_blocks(n), 256, 0, stream>>>(lse, n);
    ATTN_CUDA_LAUNCHED("stage 10 fill kernel");
    return ATTN_OK;
}

extern "C" attn_status cp_finish_launch(void *out, const float *o, int64_t n, attn_dtype dtype, cudaStream_t stream) {
    if (dtype == ATTN_BF16)
        cp_finish_kernel<<<cp_blocks(n), 256, 0, stream>>>((__nv_bfloat16 *)out, o, n);
    else
        cp_finish_kernel<<<cp_blocks(n), 256, 0, stream>>>((__half *)out, o, n);
    ATTN_CUDA_LAUNCHED("stage 10 finish kernel");
    return ATTN_OK;
}
