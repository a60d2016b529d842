/*
 * fa2_selftest.cu: device tests of stage 06's building blocks (fa2_selftest.h), each a small kernel
 * made of the stage's own functions: the cp.async tile copy and swizzle, the ldmatrix lane addresses,
 * the accumulator fragment map, and the P repack from the S accumulators to the A operand of P V.
 * Called by tests/test_fa2_blocks.c; not part of libflashattn.
 */
#include <stdio.h>

#include "06_fa2_full/fa2_steps.cuh"
#include "fa2_selftest.h"
#include "half.h"

/* The first mismatch seen, and how many there were. */
typedef struct {
    int mismatches;
    int where[4]; /* test-specific coordinates of the first one */
    unsigned got, want;
} fa2_probe;

static __device__ void fa2_mismatch(fa2_probe *pr, int a, int b, int c, int d, unsigned got, unsigned want) {
    if (atomicAdd(&pr->mismatches, 1) == 0) {
        pr->where[0] = a, pr->where[1] = b, pr->where[2] = c, pr->where[3] = d;
        pr->got = got, pr->want = want;
    }
}

/* The element (r, c) of the test tile: its coordinates as a 16-bit pattern; rows >= rows_valid read 0. */
static __host__ __device__ unsigned fa2_probe_value(int r, int c, int rows_valid) {
    return r < rows_valid ? (unsigned)(r * 256 + c) : 0u;
}

/* Checks the two 16-bit halves of one ldmatrix register against (row, col) and (row2, col2). */
static __device__ void fa2_check_pair(fa2_probe *pr, uint32_t reg, int row, int col, int row2, int col2,
                                      int rows_valid, int pattern) {
    const unsigned lo = reg & 0xffffu, hi = reg >> 16;
    if (lo != fa2_probe_value(row, col, rows_valid))
        fa2_mismatch(pr, pattern, row, col, 0, lo, fa2_probe_value(row, col, rows_valid));
    if (hi != fa2_probe_value(row2, col2, rows_valid))
        fa2_mismatch(pr, pattern, row2, col2, 1, hi, fa2_probe_value(row2, col2, rows_valid));
}

/* Copies a Br x D tile in (cp.async, swizzled per RECIPE), then every warp reads its 16-row blocks in
 * the three ldmatrix patterns of the kernel and checks every element against the fragment maps. */
template <int D, int RECIPE>
__global__ void fa2_ldmatrix_probe(const uint16_t *src, int rows_valid, fa2_probe *pr) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    const uint32_t smem = (fa2_smem_address(fa2_smem) + 1023u) & ~1023u;
    const fa2_copy cpy = fa2_copy_setup<D, RECIPE>();
    fa2_copy_tile<T.br, D, RECIPE, 1>(smem, src, D, rows_valid, &cpy);
    fa2_cp_async_commit();
    fa2_cp_async_wait<0>();
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t2 = 2 * (lane & 3);
    const uint32_t a_ld = smem + fa2_lane_offset_a<T.row_chunks, T.swizzle>(lane);
    const uint32_t k_ld = smem + fa2_lane_offset_k<T.row_chunks, T.swizzle>(lane);
    for (int rb = warp; rb < T.br / 16; rb += T.warps)
        for (int kk = 0; kk < D / 16; ++kk) {
            const uint32_t block = (uint32_t)(rb * 16 * T.row_bytes);
            const int r0 = 16 * rb, c0 = 16 * kk;
            uint32_t x[4];
            fa2_ldmatrix_x4(x, fa2_at_chunk_pair<T.swizzle>(a_ld, kk) + block); /* A: Q, P */
            for (int i = 0; i < 4; ++i) {
                const int r = r0 + g + 8 * (i & 1), c = c0 + 8 * (i >> 1) + t2;
                fa2_check_pair(pr, x[i], r, c, r, c + 1, rows_valid, 0);
            }
            fa2_ldmatrix_x4(x, fa2_at_chunk_pair<T.swizzle>(k_ld, kk) + block); /* B: K */
            for (int i = 0; i < 4; ++i) {
                const int r = r0 + g + 8 * (i >> 1), c = c0 + 8 * (i & 1) + t2;
                fa2_check_pair(pr, x[i], r, c, r, c + 1, rows_valid, 1);
            }
            fa2_ldmatrix_x4_trans(x, fa2_at_chunk_pair<T.swizzle>(a_ld, kk) + block); /* B .trans: V */
            for (int i = 0; i < 4; ++i) {
                const int r = r0 + t2 + 8 * (i & 1), c = c0 + 8 * (i >> 1) + g;
                fa2_check_pair(pr, x[i], r, c, r + 1, c, rows_valid, 2);
            }
        }
}

/* ---- the mma fragments: tiles of 16 x 16 16-bit values, 2 chunks per row, plain layout ---------------- */

/* Tile i of `src` (16 x 16 each) into shared memory, every lane 8 of its elements per tile. */
static __device__ void fa2_stage_tiles(const uint16_t *src, int tiles) {
    uint16_t *s = (uint16_t *)fa2_smem;
    for (int i = threadIdx.x; i < tiles * 256; i += 32) s[i] = src[i];
    __syncwarp();
}

/* S = A B^T for the tiles A[r][k] = (r, 1, 0, ...) and B[n][k] = (16, n, 0, ...): S[r][n] = 16 r + n, in the
 * two 16x8 accumulator tiles of keys 0..7 and 8..15, through the kernel's ldmatrix patterns. */
template <int DTYPE> static __device__ void fa2_probe_scores(float c[2][4], uint32_t smem) {
    const int lane = threadIdx.x & 31;
    uint32_t a[4], b[4];
    fa2_ldmatrix_x4(a, smem + fa2_lane_offset_a<2, 0>(lane));
    fa2_ldmatrix_x4(b, smem + 512 + fa2_lane_offset_k<2, 0>(lane));
    for (int i = 0; i < 8; ++i) c[i / 4][i % 4] = 0.f;
    fa2_mma_16x8x16<DTYPE>(c[0], a, b[0], b[1]);
    fa2_mma_16x8x16<DTYPE>(c[1], a, b[2], b[3]);
}

/* Every accumulator c[nt][2h + e] must be S at row fa2_fragment_row(lane, h), key 8 nt + fa2_fragment_col. */
static __device__ void fa2_check_scores(fa2_probe *pr, float c[2][4]) {
    const int lane = threadIdx.x & 31;
    for (int i = 0; i < 8; ++i) {
        const int nt = i / 4, h = (i % 4) / 2, e = i % 2;
        const int want = 16 * fa2_fragment_row(lane, h) + 8 * nt + fa2_fragment_col(lane, e);
        if (c[nt][2 * h + e] != (float)want)
            fa2_mismatch(pr, lane, nt, h, e, (unsigned)c[nt][2 * h + e], want);
    }
}

template <int DTYPE> __global__ void fa2_fragment_probe(const uint16_t *src, int unused, fa2_probe *pr) {
    fa2_stage_tiles(src, 2);
    float c[2][4];
    fa2_probe_scores<DTYPE>(c, fa2_smem_address(fa2_smem));
    fa2_check_scores(pr, c);
}

/* S rounded to 16-bit pairs as fa2_exponentiate_row packs P, repacked by fa2_p_as_a_operand, times the
 * identity (tile 2, read as K): must give S back. */
template <int DTYPE> __global__ void fa2_repack_probe(const uint16_t *src, int unused, fa2_probe *pr) {
    fa2_stage_tiles(src, 3);
    const uint32_t smem = fa2_smem_address(fa2_smem);
    float c[2][4];
    fa2_probe_scores<DTYPE>(c, smem);
    uint32_t p[2][2], a[4], b[4];
    for (int nt = 0; nt < 2; ++nt)
        for (int h = 0; h < 2; ++h) p[nt][h] = pack_16x2<DTYPE>(c[nt][2 * h], c[nt][2 * h + 1]);
    fa2_p_as_a_operand(a, p, 0);
    fa2_ldmatrix_x4(b, smem + 1024 + fa2_lane_offset_k<2, 0>(threadIdx.x & 31));
    float o[2][4];
    for (int i = 0; i < 8; ++i) o[i / 4][i % 4] = 0.f;
    fa2_mma_16x8x16<DTYPE>(o[0], a, b[0], b[1]);
    fa2_mma_16x8x16<DTYPE>(o[1], a, b[2], b[3]);
    fa2_check_scores(pr, o);
}

/* ---- host side ----------------------------------------------------------------------------------- */

static int fa2_cuda_failed(cudaError_t e, const char *what, char *msg, size_t cap) {
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    snprintf(msg, cap, "%s: %s", what, cudaGetErrorString(e));
    return 1;
}

/* Runs a one-block probe kernel with `threads` threads and `smem` bytes on a copy of host data; -1 on a
 * CUDA error, else the probe's mismatch count (the first one also in *out). */
static int fa2_run_probe(const void *kernel, int threads, int smem, const void *host, size_t bytes, int arg,
                         fa2_probe *out, char *msg, size_t cap) {
    void *dev = NULL;
    fa2_probe *pr = NULL;
    cudaError_t e = cudaMalloc(&dev, bytes > 0 ? bytes : 1);
    if (e == cudaSuccess) e = cudaMalloc((void **)&pr, sizeof *pr);
    if (e == cudaSuccess) e = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemset(pr, 0, sizeof *pr);
    if (e == cudaSuccess && smem > 48 * 1024)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    void *args[3] = {&dev, &arg, &pr};
    if (e == cudaSuccess)
        e = cudaLaunchKernel(kernel, dim3(1), dim3((unsigned)threads), args, (size_t)smem, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(out, pr, sizeof *pr, cudaMemcpyDeviceToHost);
    const int failed = fa2_cuda_failed(e, "the probe kernel", msg, cap);
    cudaFree(dev);
    cudaFree(pr);
    return failed ? -1 : out->mismatches;
}

template <int D, int RECIPE> static int fa2_ldmatrix_case(char *msg, size_t cap) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    const int rows_valid = T.br - 5; /* the last 5 rows must come out as zeros */
    static uint16_t host[128 * 256];
    for (int r = 0; r < rows_valid; ++r)
        for (int c = 0; c < D; ++c) host[r * D + c] = (uint16_t)fa2_probe_value(r, c, rows_valid);
    fa2_probe pr;
    const int smem = T.br * T.row_bytes + 1024;
    const int n = fa2_run_probe((const void *)fa2_ldmatrix_probe<D, RECIPE>, T.threads, smem, host,
                                (size_t)rows_valid * D * 2, rows_valid, &pr, msg, cap);
    const char *pattern[3] = {"A (Q, P)", "B (K)", "B .trans (V)"};
    if (n > 0)
        snprintf(
            msg, cap,
            "D=%d swizzle=%d: %d mismatches; first: ldmatrix %s, tile element (%d, %d): got %#x, want %#x", D,
            T.swizzle, n, pattern[pr.where[0]], pr.where[1], pr.where[2], pr.got, pr.want);
    return n;
}

template <int RECIPE> static int fa2_ldmatrix_dims(int d, char *msg, size_t cap) {
    switch (d) {
    case 32: return fa2_ldmatrix_case<32, RECIPE>(msg, cap);
    case 64: return fa2_ldmatrix_case<64, RECIPE>(msg, cap);
    case 80: return fa2_ldmatrix_case<80, RECIPE>(msg, cap);
    case 96: return fa2_ldmatrix_case<96, RECIPE>(msg, cap);
    case 128: return fa2_ldmatrix_case<128, RECIPE>(msg, cap);
    case 192: return fa2_ldmatrix_case<192, RECIPE>(msg, cap);
    case 256: return fa2_ldmatrix_case<256, RECIPE>(msg, cap);
    }
    snprintf(msg, cap, "no such head dim: %d", d);
    return -1;
}

extern "C" int fa2_selftest_ldmatrix(int d, int swizzle, char *msg, size_t cap) {
    msg[0] = '\0';
    return swizzle ? fa2_ldmatrix_dims<FA2_RECIPE_FINAL>(d, msg, cap)
                   : fa2_ldmatrix_dims<FA2_RECIPE_FINAL & ~FA2_SWIZZLE>(d, msg, cap);
}

/* The three 16 x 16 tiles of the mma probes: A, B (read as K) and the identity (read as K). */
static void fa2_mma_tiles(uint16_t tiles[3 * 256], int bf16) {
    const attn_dtype t = bf16 ? ATTN_BF16 : ATTN_F16;
    for (int r = 0; r < 16; ++r)
        for (int k = 0; k < 16; ++k) {
            tiles[r * 16 + k] = attn_from_f32(k == 0 ? (float)r : k == 1 ? 1.f : 0.f, t);
            tiles[256 + r * 16 + k] = attn_from_f32(k == 0 ? 16.f : k == 1 ? (float)r : 0.f, t);
            tiles[512 + r * 16 + k] = attn_from_f32(r == k ? 1.f : 0.f, t);
        }
}

static int fa2_mma_probe(const void *kernel, int bf16, const char *what, char *msg, size_t cap) {
    uint16_t tiles[3 * 256];
    fa2_mma_tiles(tiles, bf16);
    fa2_probe pr;
    msg[0] = '\0';
    const int n = fa2_run_probe(kernel, 32, 3 * 512, tiles, sizeof tiles, 0, &pr, msg, cap);
    if (n > 0)
        snprintf(msg, cap, "%s, %s: %d mismatches; first: lane %d, n-tile %d, h %d, e %d: got %u, want %u",
                 what, bf16 ? "bf16" : "fp16", n, pr.where[0], pr.where[1], pr.where[2], pr.where[3], pr.got,
                 pr.want);
    return n;
}

extern "C" int fa2_selftest_fragment_rows(int bf16, char *msg, size_t cap) {
    return fa2_mma_probe(bf16 ? (const void *)fa2_fragment_probe<ATTN_BF16>
                              : (const void *)fa2_fragment_probe<ATTN_F16>,
                         bf16, "accumulator fragment rows/columns", msg, cap);
}

extern "C" int fa2_selftest_p_repack(int bf16, char *msg, size_t cap) {
    return fa2_mma_probe(bf16 ? (const void *)fa2_repack_probe<ATTN_BF16>
                              : (const void *)fa2_repack_probe<ATTN_F16>,
                         bf16, "P repacked as the A operand", msg, cap);
}
