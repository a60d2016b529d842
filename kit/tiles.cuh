/*
 * tiles.cuh: the tile machinery that stages 03, 04 and 05 share, so that each stage's file holds
 * only its own idea (two passes; one pass with alpha; skipping tiles above the diagonal) and a
 * `diff` between two stages shows just that idea.
 *
 * What lives here:
 *   - the tile shape: Br = Bc = 64 rows, 256 threads, and who owns which element (maps below);
 *   - the shared-memory layout: Q tile (fp32, pre-scaled), K tile (reused for P), V tile;
 *   - tile_load_rows: 64 rows of Q, K or V from fp16 global memory into fp32 shared memory,
 *     rows >= N zero-filled (inputs are never padded);
 *   - tile_scores: the 64 x 64 score tile S = Q K^T, a 4 x 4 register micro-tile per thread;
 *   - tile_mask: -inf for keys >= N and, when causal, keys j > i;
 *   - tile_row_max / tile_row_sum: reductions across the 16 threads that share a row;
 *   - tile_store_p + tile_pv: P through shared memory, then O += P V, a 4 x D/16 micro-tile;
 *   - tile_store_o: O / l, rounded to fp16, rows >= N never written;
 *   - tiles_run: the host side (checks, grid, shared-memory opt-in, launch, dispatch over D).
 *
 * Arithmetic is fp32 FFMA on the ordinary CUDA cores (tensor cores arrive in stage 06). fp16 is
 * converted to fp32 once, when a tile is staged into shared memory, so the inner loops are pure
 * shared-memory loads and FFMAs.
 *
 * Why these numbers (H200: 132 SMs, 128 FP32 lanes each, about 67 TFLOP/s of FFMA):
 *   - Each thread computes a 4 x 4 block of S. Per 4 steps of d it loads 4 float4 of Q and 4 float4
 *     of K (8 LDS.128) and issues 64 FFMAs: 8 FFMAs per load. A 1 x 1 block per thread would need
 *     2 loads per FFMA and run at shared-memory speed, a few TFLOP/s.
 *   - P V is the same shape: per 4 keys, 4 float4 of P and 4 float4 of V (D = 64) for 64 FFMAs.
 *   - A warp is 2 rows of threads x 16 columns of threads, so a row's 16 threads sit in one
 *     half-warp and row max / row sum are 4 shuffles, no shared memory.
 *   - Rows are padded by 4 floats (D + 4, Bc + 4): row r starts 4 banks after row r - 1, so the 8
 *     threads of a quarter-warp that read 8 different rows hit 8 different groups of 4 banks.
 *   - Shared memory per block: 3 tiles of 64 x (D + 4) floats = 51 KB at D = 64, 99 KB at D = 128.
 *     P (64 x 68 floats) reuses the K tile once S is computed, which keeps D = 128 under 113 KB so
 *     that two blocks (16 warps) fit on an H100/H200 SM (228 KB). Smaller SMs fit fewer: an A100's
 *     (164 KB) one block at D = 128; sm_86/sm_89's (100 KB) one at D = 64 and D = 128; a V100 or T4
 *     gives no block 99 KB, and tiles_run refuses D = 128 there. __launch_bounds__(256, 2) caps
 *     registers at 128.
 *
 * Index math: (b, h) and the row tile are folded into one block index in 64 bits (B*H may exceed
 * 65535 and so cannot go in grid.y); global offsets are int64; offsets inside a tile are int.
 */
#ifndef ATTN_TILES_CUH
#define ATTN_TILES_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "attn.h"
#include "cuda_check.h"
#include "fast_math.cuh" /* fast_exp2, for stages 04 and 05 */
#include "stage.h"

#define TILE_BR 64      /* Br: query rows per block (the Q tile stays on chip for the whole kernel) */
#define TILE_BC 64      /* Bc: keys per K/V tile */
#define TILE_THREADS 256
#define TILE_TX 16      /* threads across the keys of S, and across the columns of O */
#define TILE_TY 16      /* threads down the rows */
#define TILE_ROWS (TILE_BR / TILE_TY) /* 4 query rows per thread */
#define TILE_KEYS (TILE_BC / TILE_TX) /* 4 keys per thread */
#define TILE_PAD 4      /* floats of padding per shared-memory row (see the bank note above) */
#define TILE_PS (TILE_BC + TILE_PAD)  /* row stride of the P tile */

/* The K buffer also holds P (64 rows of Bc + 4 floats), so it is the larger of the two sizes. */
#define TILE_QS(D) ((D) + TILE_PAD) /* row stride of the Q, K and V tiles */
#define TILE_KP_FLOATS(D)                                                                          \
    (TILE_BC * TILE_QS(D) > TILE_BR * TILE_PS ? TILE_BC * TILE_QS(D) : TILE_BR * TILE_PS)
#define TILE_SMEM_FLOATS(D) (TILE_BR * TILE_QS(D) + TILE_KP_FLOATS(D) + TILE_BC * TILE_QS(D))

/* Columns of O per thread, D / 16, in chunks of VEC contiguous floats (float4, or float2 at D = 32):
 * thread tx owns columns cc * 16 * VEC + tx * VEC + e. */
#define TILE_VEC(D) ((D) >= 64 ? 4 : 2)
#define TILE_COLS(D) ((D) / TILE_TX)

// clang-format off
/*
 * Thread ownership inside a block (tid = threadIdx.x, tx = tid % 16, ty = tid / 16):
 *
 *   S tile, 64 query rows x 64 keys            O tile, 64 query rows x D columns (D = 64 shown)
 *   rows ty, ty+16, ty+32, ty+48               same rows; columns 4tx .. 4tx+3
 *   keys tx, tx+16, tx+32, tx+48               (D = 128: also 64+4tx .. 64+4tx+3)
 *
 *            key: 0  1  2 .. 15 16 17 .. 63             col: 0..3  4..7  ..  60..63
 *   row  0        t0 t1 t2 .. t15 t0 t1 .. t15        row  0    t0    t1   ..   t15
 *   row  1        t16 ........... t16 ..... t31       row  1    t16   t17  ..   t31
 *   ...                                               ...
 *   row 15        t240 .......... t240 .... t255      row 15    t240  t241 ..   t255
 *   row 16        t0 (again: rows repeat every 16)    row 16    t0    t1   ..   t15
 *
 *   warp w = threads 32w .. 32w+31 = rows 2w, 2w+1 (+16, +32, +48): a row's 16 threads are one
 *   half-warp, so row reductions are __shfl_xor_sync with offsets 8, 4, 2, 1.
 *
 * Shared memory (floats; QS = D + 4, PS = Bc + 4):
 *   [ Q tile: 64 x QS, scaled ][ K tile: 64 x QS  == later P tile: 64 x PS ][ V tile: 64 x QS ]
 */
// clang-format on

/* What every tile kernel gets, by value. */
typedef struct {
    const __half *q, *k, *v;
    __half *o;
    int64_t blocks; /* Tr * B * H: launched blocks past this exit at once */
    int N;          /* <= ATTN_MAX_N = 2^24, so rows and keys fit in int */
    int Tr, Tc;     /* row tiles ceil(N / Br), key tiles ceil(N / Bc) */
    int causal;
    float scale;
} tile_params;

typedef void (*tile_kernel)(tile_params);

/* ---- block coordinates ------------------------------------------------------------------------ */

/* Which (b, h) and which row tile this block owns; 0 for the surplus blocks of the last grid row.
 * Blocks of one head are consecutive, so they read the same K and V while it is in L2. Row tiles
 * run last to first: under a causal mask (stage 05) the last row tile visits the most key tiles,
 * and starting the longest blocks first keeps the final wave of the grid short. */
static __device__ __forceinline__ int tile_coords(const tile_params *p, int64_t *bh, int *qt) {
    const int64_t blk = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    if (blk >= p->blocks) return 0;
    *bh = blk / p->Tr;
    *qt = p->Tr - 1 - (int)(blk % p->Tr);
    return 1;
}

/* ---- global fp16 -> shared fp32 ---------------------------------------------------------------- */

/* Rows row0 .. row0+63 of one head ([N, D] at src) into dst (64 x QS floats), times mult.
 * Rows >= N are zero-filled: a zero K row gives a finite score that tile_mask then sets to -inf,
 * a zero V row adds nothing, a zero Q row gives finite scores for a row that is never stored.
 * Each thread moves 4 halves (8 bytes) per step: consecutive threads read consecutive 8-byte chunks
 * (fully coalesced) and write consecutive float4 (a quarter-warp covers 32 distinct banks). */
template <int D>
static __device__ __forceinline__ void tile_load_rows(float *dst, const __half *src, int row0, int N,
                                                      float mult) {
    constexpr int CHUNKS = D / 4; /* 4-half chunks per row */
    constexpr int STEPS = TILE_BC * CHUNKS / TILE_THREADS;
    static_assert(TILE_BR == TILE_BC, "one loader for Q, K and V tiles");
    static_assert(TILE_BC * CHUNKS % TILE_THREADS == 0, "whole steps only");
    const __half *tile = src + (int64_t)row0 * D;
#pragma unroll
    for (int it = 0; it < STEPS; it++) {
        const int idx = it * TILE_THREADS + (int)threadIdx.x;
        const int r = idx / CHUNKS, ch = idx % CHUNKS;
        float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row0 + r < N) {
            const uint2 u = __ldg(reinterpret_cast<const uint2 *>(tile + r * D + ch * 4));
            const float2 lo = __half22float2(*reinterpret_cast<const __half2 *>(&u.x));
            const float2 hi = __half22float2(*reinterpret_cast<const __half2 *>(&u.y));
            f = make_float4(lo.x * mult, lo.y * mult, hi.x * mult, hi.y * mult);
        }
        *reinterpret_cast<float4 *>(dst + r * TILE_QS(D) + ch * 4) = f;
    }
}

/* ---- S = Q K^T --------------------------------------------------------------------------------- */

/* s[r][c] = Qs[ty + 16r] . Ks[tx + 16c] over all D. The K loads: a quarter-warp reads rows tx..tx+7,
 * QS = D + 4 floats apart, i.e. 4 banks apart: no conflicts. The Q loads are 2 addresses per warp
 * (rows ty and ty + 1), each broadcast to 16 lanes. */
template <int D>
static __device__ __forceinline__ void tile_scores(float s[TILE_ROWS][TILE_KEYS], const float *Qs,
                                                   const float *Ks, int ty, int tx) {
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++)
#pragma unroll
        for (int c = 0; c < TILE_KEYS; c++) s[r][c] = 0.0f;
#pragma unroll
    for (int d = 0; d < D; d += 4) {
        float4 kv[TILE_KEYS];
#pragma unroll
        for (int c = 0; c < TILE_KEYS; c++)
            kv[c] = *reinterpret_cast<const float4 *>(Ks + (tx + c * TILE_TX) * TILE_QS(D) + d);
#pragma unroll
        for (int r = 0; r < TILE_ROWS; r++) {
            const float4 qv = *reinterpret_cast<const float4 *>(Qs + (ty + r * TILE_TY) * TILE_QS(D) + d);
#pragma unroll
            for (int c = 0; c < TILE_KEYS; c++) {
                s[r][c] = fmaf(qv.x, kv[c].x, s[r][c]);
                s[r][c] = fmaf(qv.y, kv[c].y, s[r][c]);
                s[r][c] = fmaf(qv.z, kv[c].z, s[r][c]);
                s[r][c] = fmaf(qv.w, kv[c].w, s[r][c]);
            }
        }
    }
}

/* -inf where key j may not be seen by query i: j >= N (the tail of the last key tile) or, when
 * causal, j > i. q0 and key0 are the first query row and the first key of the two tiles. */
static __device__ __forceinline__ void tile_mask(float s[TILE_ROWS][TILE_KEYS], int q0, int key0, int N,
                                                 int causal, int ty, int tx) {
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++) {
        const int i = q0 + ty + r * TILE_TY;
#pragma unroll
        for (int c = 0; c < TILE_KEYS; c++) {
            const int j = key0 + tx + c * TILE_TX;
            if (j >= N || (causal && j > i)) s[r][c] = -INFINITY;
        }
    }
}

/* ---- row reductions over the 16 threads (one half-warp) that share a row ---------------------- */

static __device__ __forceinline__ float tile_row_max(const float s_r[TILE_KEYS]) {
    float mx = s_r[0];
#pragma unroll
    for (int c = 1; c < TILE_KEYS; c++) mx = fmaxf(mx, s_r[c]);
#pragma unroll
    for (int off = TILE_TX / 2; off > 0; off /= 2)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    return mx;
}

static __device__ __forceinline__ float tile_row_sum(float x) {
#pragma unroll
    for (int off = TILE_TX / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

/* ---- O += P V ---------------------------------------------------------------------------------- */

/* P goes through shared memory because P V needs a whole row of P per thread (64 keys), and each
 * thread holds only 4 of them. Scalar stores: 16 per thread per tile, next to 2048 FFMAs. */
static __device__ __forceinline__ void tile_store_p(float *Ps, const float p[TILE_ROWS][TILE_KEYS],
                                                    int ty, int tx) {
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++)
#pragma unroll
        for (int c = 0; c < TILE_KEYS; c++) Ps[(ty + r * TILE_TY) * TILE_PS + tx + c * TILE_TX] = p[r][c];
}

static __device__ __forceinline__ float tile_f4_get(float4 v, int e) {
    return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

/* o[r][x] += sum_j Ps[ty + 16r][j] * Vs[j][col(x)] over the Bc keys of the tile. Per 4 keys: one
 * float4 of P per row (2 addresses per warp, broadcast) and one float4 (float2 at D = 32) of V per
 * key and column chunk (16 consecutive vectors per warp: no conflicts). */
template <int D>
static __device__ __forceinline__ void tile_pv(float o[TILE_ROWS][TILE_COLS(D)], const float *Ps,
                                               const float *Vs, int ty, int tx) {
    constexpr int VEC = TILE_VEC(D), CHUNKS = TILE_COLS(D) / VEC;
#pragma unroll
    for (int j = 0; j < TILE_BC; j += 4) {
        float4 pv[TILE_ROWS];
#pragma unroll
        for (int r = 0; r < TILE_ROWS; r++)
            pv[r] = *reinterpret_cast<const float4 *>(Ps + (ty + r * TILE_TY) * TILE_PS + j);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float vv[TILE_COLS(D)];
            const float *vrow = Vs + (j + e) * TILE_QS(D) + tx * VEC;
#pragma unroll
            for (int cc = 0; cc < CHUNKS; cc++) {
                if constexpr (VEC == 4) {
                    const float4 t = *reinterpret_cast<const float4 *>(vrow + cc * TILE_TX * VEC);
                    vv[cc * 4 + 0] = t.x, vv[cc * 4 + 1] = t.y, vv[cc * 4 + 2] = t.z, vv[cc * 4 + 3] = t.w;
                } else {
                    const float2 t = *reinterpret_cast<const float2 *>(vrow + cc * TILE_TX * VEC);
                    vv[cc * 2 + 0] = t.x, vv[cc * 2 + 1] = t.y;
                }
            }
#pragma unroll
            for (int r = 0; r < TILE_ROWS; r++) {
                const float pe = tile_f4_get(pv[r], e);
#pragma unroll
                for (int x = 0; x < TILE_COLS(D); x++) o[r][x] = fmaf(pe, vv[x], o[r][x]);
            }
        }
    }
}

/* ---- epilogue: O / l, fp16, rows < N only ----------------------------------------------------- */

static __device__ __forceinline__ uint32_t tile_pack_half2(float lo, float hi) {
    const __half2_raw h = __floats2half2_rn(lo, hi);
    return (uint32_t)h.x | (uint32_t)h.y << 16;
}

/* l[r] is this thread's share of row r's sum (its 4 keys per tile): the 16 shares are added here,
 * once, instead of once per key tile. Every stored row has l >= 1 (its largest score contributes
 * exp(0) = 1); the guard only keeps a never-stored padding row from dividing by zero. */
template <int D>
static __device__ __forceinline__ void tile_store_o(__half *o_head, const float o[TILE_ROWS][TILE_COLS(D)],
                                                    const float l[TILE_ROWS], int q0, int N, int ty, int tx) {
    constexpr int VEC = TILE_VEC(D), CHUNKS = TILE_COLS(D) / VEC;
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++) {
        const float lsum = tile_row_sum(l[r]); /* all 32 lanes, before the row test */
        const float inv_l = lsum > 0.0f ? 1.0f / lsum : 0.0f;
        const int i = q0 + ty + r * TILE_TY;
        if (i >= N) continue;
        __half *orow = o_head + (int64_t)i * D;
#pragma unroll
        for (int cc = 0; cc < CHUNKS; cc++) {
            const int x = cc * VEC;
            if constexpr (VEC == 4) { /* 4 halves: one 8-byte store, 16 threads = 128 bytes */
                uint2 *dst = reinterpret_cast<uint2 *>(orow) + cc * TILE_TX + tx;
                *dst = make_uint2(tile_pack_half2(o[r][x] * inv_l, o[r][x + 1] * inv_l),
                                  tile_pack_half2(o[r][x + 2] * inv_l, o[r][x + 3] * inv_l));
            } else { /* 2 halves: one 4-byte store */
                uint32_t *dst = reinterpret_cast<uint32_t *>(orow) + cc * TILE_TX + tx;
                *dst = tile_pack_half2(o[r][x] * inv_l, o[r][x + 1] * inv_l);
            }
        }
    }
}

/* ---- host side --------------------------------------------------------------------------------- */

static inline size_t tiles_smem_bytes(int D) { return (size_t)TILE_SMEM_FLOATS(D) * sizeof(float); }

/* Checks the problem, picks the kernel for D, opts in to more than 48 KB of shared memory, launches
 * on the caller's stream and returns without synchronising. `stage` is "03", "04" or "05". */
static inline attn_status tiles_run(const char *stage, const attn_problem *p, const attn_args *a,
                                    tile_kernel k32, tile_kernel k64, tile_kernel k128) {
    tile_kernel kern;
    switch (p->D) {
    case 32: kern = k32; break;
    case 64: kern = k64; break;
    case 128: kern = k128; break;
    default:
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s supports head dim 32, 64, 128 (got %lld)", stage,
                         (long long)p->D);
    }
    if (p->dtype != ATTN_F16)
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s supports dtype fp16 (got %s)", stage,
                         attn_dtype_name(p->dtype));
    if (p->N < 1 || p->N > ATTN_MAX_N || p->B < 1 || p->H < 1)
        return attn_fail(ATTN_EINVAL, "stage %s: bad shape B=%lld H=%lld N=%lld", stage,
                         (long long)p->B, (long long)p->H, (long long)p->N);
    /* Rows start every 2*D bytes (64, 128 or 256), so 8-byte aligned bases keep every uint2 load
     * and store aligned. cudaMalloc gives 256. */
    if (((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v | (uintptr_t)a->o) & 7u)
        return attn_fail(ATTN_EINVAL, "stage %s needs Q, K, V and O aligned to 8 bytes", stage);

    tile_params prm;
    prm.q = (const __half *)a->q, prm.k = (const __half *)a->k, prm.v = (const __half *)a->v;
    prm.o = (__half *)a->o;
    prm.N = (int)p->N;
    prm.Tr = (prm.N + TILE_BR - 1) / TILE_BR;
    prm.Tc = (prm.N + TILE_BC - 1) / TILE_BC;
    prm.blocks = (int64_t)prm.Tr * p->B * p->H;
    prm.causal = p->causal != 0;
    prm.scale = p->scale;

    /* One block per (b, h, row tile), folded into x; y only when that passes 2^31 - 1 blocks. */
    int64_t gx = prm.blocks, gy = 1;
    if (gx > 2147483647) {
        gx = (int64_t)1 << 30;
        gy = (prm.blocks + gx - 1) / gx;
        if (gy > 65535)
            return attn_fail(ATTN_EINVAL, "stage %s: %lld blocks is more than one launch holds", stage,
                             (long long)prm.blocks);
    }
    const size_t smem = tiles_smem_bytes((int)p->D);
    /* D = 128 takes 99 KB: more than a V100 (96 KB) or a T4 (64 KB) gives one block. Say so instead
     * of failing the launch. */
    int dev = 0, smem_max = 0;
    ATTN_CUDA(cudaGetDevice(&dev));
    ATTN_CUDA(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem > (size_t)smem_max)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "stage %s at head dim %d needs %zu KB of shared memory per block; this GPU allows "
                         "%d KB (a smaller head dim runs)", stage, (int)p->D, smem / 1024, smem_max / 1024);
    if (smem > 48 * 1024)
        ATTN_CUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
    /* Shared memory over L1: the tiles are the only reuse; K and V are shared through L2. */
    ATTN_CUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   (int)cudaSharedmemCarveoutMaxShared));
    char what[32];
    snprintf(what, sizeof what, "stage %s kernel (D=%d)", stage, (int)p->D);
    kern<<<dim3((unsigned)gx, (unsigned)gy, 1), TILE_THREADS, smem, (cudaStream_t)a->stream>>>(prm);
    ATTN_CUDA_LAUNCHED(what);
    return ATTN_OK;
}

#endif
