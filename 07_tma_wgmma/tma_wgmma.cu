/*
 * 07_tma_wgmma/tma_wgmma.cu: stage 07, FlashAttention-2 on Hopper's own data path.
 *
 * What this stage adds. The algorithm is stage 06's, line for line: the Q tile stays on chip, one
 * pass over the key tiles keeps the running max m and sum l and rescales O by alpha, exp2 takes
 * scale*log2(e) as one multiplier, causal tiles on the diagonal (and the tail tile past N) are
 * visited first with the mask and the rest without it, tiles above the diagonal never, and the
 * epilogue writes O / l and LSE = m2 ln 2 + ln l. What changes is how tiles move and multiply:
 *   1. TMA. One thread asks the bulk tensor copy engine for a whole tile (64 columns x 128 rows per
 *      request, from a tensor map built on the host); the engine writes it to shared memory in the
 *      128-byte swizzle and counts the bytes on an mbarrier, which the 256 threads wait on. Stage 06
 *      had 128 threads issue 16-byte cp.async copies and compute swizzled addresses themselves.
 *   2. wgmma. A warpgroup (4 warps, 64 query rows) issues S = Q K^T as 64 x Bc x 16 products straight
 *      from shared memory (no ldmatrix, no register copies of Q or K), and O += P V with P from
 *      registers (the accumulator of S, exponentiated and packed: the same repack as stage 06) and V
 *      read transposed from shared memory by the descriptor. One wgmma m64n128k16 = 262144 flops,
 *      64 times an mma.sync m16n8k16, issued once for four warps.
 *   3. A K/V ring of 2 stages: the loads of tiles j-1 and j-2 are in flight while tile j is used.
 *      The same threads load and compute (one of them issues the copies); that is stage 08's
 *      change.
 * Changed versus stage 06: 128-thread blocks of 4 warps x 32 rows became 256-thread blocks of 2
 * warpgroups x 64 rows (Br = 128); cp.async + ldmatrix + mma.sync became TMA + wgmma; the hand-made
 * XOR swizzle became the copy engine's 128-byte swizzle; a negative scale negates Q inside wgmma
 * (imm-scale-a = -1) instead of flipping bits in shared memory.
 *
 * Limits: head dim 64, 128 or 256; fp16 or bf16; sm_90 only (H100, H200: wgmma is sm_90a code);
 * 16-byte aligned tensors; N <= 2^30; B*H <= 65535^2. Keys past N arrive as zero rows (the tensor
 * map ends at N) and are masked to -inf; query rows past N are computed and never written.
 *
 * Run it:    build/attn --stage 07 --batch 4 --heads 32 --seq 4096 --dim 128 --check
 * SASS:      cuobjdump --dump-sass build/obj/07_tma_wgmma/tma_wgmma.cu.o | grep -c HGMMA
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "hopper.cuh"
#include "hopper_host.h"
#include "stage07.h"

#define TW_LOG2E 1.4426950408889634f
#define TW_LN2 0.69314718055994531f
#define TW_GRID_YZ 65535

/*
 * ---- tiles ----------------------------------------------------------------------------------------
 *   D     Br x Bc     warpgroups  stages  smem: Q + stages x (K + V)   registers per thread: S + O + P
 *   64    128 x 128   2           2        16 + 2 x (16 + 16) =  80 KB   64 +  32 + 32
 *   128   128 x 128   2           2        32 + 2 x (32 + 32) = 160 KB   64 +  64 + 32
 *   256   128 x 64    2           2        64 + 2 x (32 + 32) = 192 KB   32 + 128 + 16
 * Each warpgroup owns 64 rows of the Q tile (wgmma's M is 64). A tile of R rows is D/64 regions of
 * R rows x 128 bytes (one TMA box each, one 128-byte swizzle pattern each).
 */
#define TW_BR 128
#define TW_THREADS 256
#define TW_STAGES 2
static __host__ __device__ constexpr int tw_bc(int d) { return d == 256 ? 64 : 128; }
static __host__ __device__ constexpr int tw_tile_bytes(int rows, int d) { return rows * d * 2; }
/* Q, the K ring, the V ring, 1 + 2 x stages mbarriers, and 1 KB to round the base up to 1024 */
static __host__ __device__ constexpr int tw_smem_bytes(int d) {
    return tw_tile_bytes(TW_BR, d) + 2 * TW_STAGES * tw_tile_bytes(tw_bc(d), d) + 8 * (1 + 2 * TW_STAGES) + 1024;
}

typedef struct {
    CUtensorMap q_map, k_map, v_map; /* boxes of 64 columns x Br rows (Q) or Bc rows (K, V) */
    uint16_t *o;                     /* [B, H, N, D] */
    float *lse;                      /* [B, H, N] */
    int64_t bh;                      /* B*H */
    int n;                           /* N */
    float scale_log2;                /* |scale| * log2(e), at least FLT_MIN */
    int negate_q;                    /* scale < 0: S = (-Q) K^T, and |scale| */
} tw_params;

/* Shared-memory addresses of one block: tiles first (1024-aligned), barriers after. */
typedef struct {
    uint32_t q, k, v;                /* Q tile; K and V buffer 0 (buffer s at + s * tile bytes) */
    uint32_t q_full, k_full, v_full; /* mbarriers; k_full of buffer s at k_full + 8 s */
} tw_smem;

template <int D> static __device__ __forceinline__ tw_smem tw_smem_map(uint32_t base) {
    constexpr int KV = tw_tile_bytes(tw_bc(D), D);
    tw_smem s;
    s.q = base;
    s.k = s.q + tw_tile_bytes(TW_BR, D);
    s.v = s.k + TW_STAGES * KV;
    s.q_full = s.v + TW_STAGES * KV;
    s.k_full = s.q_full + 8;
    s.v_full = s.k_full + 8 * TW_STAGES;
    return s;
}

/* ---- loads (one thread) ---------------------------------------------------------------------------- */

/* A tile of `rows` rows starting at row `row0` of head bh: D/64 boxes, one per 64-column region. */
template <int D>
static __device__ __forceinline__ void tw_load_tile(uint32_t dst, const CUtensorMap *map, uint32_t bar, int rows,
                                                    int row0, int bh) {
    hop_mbar_arrive_expect_tx(bar, (uint32_t)tw_tile_bytes(rows, D));
#pragma unroll
    for (int c = 0; c < D / 64; ++c) hop_tma_load_3d(dst + (uint32_t)(c * rows * 128), map, bar, c * 64, row0, bh);
}

/* K_j and V_j into ring buffer s, each on its own barrier: S = Q K^T can start before V lands. */
template <int D>
static __device__ __forceinline__ void tw_load_kv(const tw_params *p, const tw_smem *sm, int s, int j, int bh) {
    constexpr int BC = tw_bc(D), KV = tw_tile_bytes(BC, D);
    tw_load_tile<D>(sm->k + s * KV, &p->k_map, sm->k_full + 8 * s, BC, j * BC, bh);
    tw_load_tile<D>(sm->v + s * KV, &p->v_map, sm->v_full + 8 * s, BC, j * BC, bh);
}

/* ---- the steps of one key tile (one warpgroup, 64 query rows) -------------------------------------- */

/* S = Q K^T: D/16 wgmma of 64 x Bc x 16. Step kk reads columns 16kk.. of region kk/4: within a
 * 128-byte row that is a 32-byte step of the start address (the swizzle is applied by the hardware on
 * the final address, which is why tiles are 1024-aligned). */
template <int BF16, int D, int NEG>
static __device__ __forceinline__ void tw_compute_s(float (&s)[tw_bc(D) / 2], uint32_t q_rows, uint32_t k_tile) {
    constexpr int BC = tw_bc(D);
    hop_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t col = (uint32_t)((kk & 3) * 32);
        const uint64_t a = hop_desc_sw128(q_rows + (uint32_t)((kk >> 2) * TW_BR * 128) + col, 16, 1024);
        const uint64_t b = hop_desc_sw128(k_tile + (uint32_t)((kk >> 2) * BC * 128) + col, 16, 1024);
        hop_wgmma_ss<BF16, NEG, BC>(s, a, b, kk > 0);
    }
    hop_wgmma_commit();
    hop_wgmma_wait<0>();
    hop_settle(s);
}

/* Keys that row qi may not see get -inf: key >= N (the zero rows TMA filled in), and key > qi when
 * causal. s[4c + 2h + e] is row g + 8h, key key0 + 8c + 2t + e (the wgmma accumulator layout). */
template <int BC, int CAUSAL>
static __device__ __forceinline__ void tw_mask(float (&s)[BC / 2], int key0, int row0, int n) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int visible = (CAUSAL ? min(n, row0 + 8 * h + 1) : n) - key0 - 2 * t;
#pragma unroll
        for (int c = 0; c < BC / 8; ++c)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                if (8 * c + e >= visible) s[4 * c + 2 * h + e] = -INFINITY;
    }
}

/* Two floats -> one register of two 16-bit values, lo in bits 0..15 */
template <int BF16> static __device__ __forceinline__ uint32_t tw_pack(float lo, float hi) {
    uint32_t r;
    if (BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
static __device__ __forceinline__ float tw_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/*
 * The online softmax of one tile, as in stage 06: per row (two per thread, g and g + 8), the new max
 * over this tile and the 4 lanes of the quad, alpha = 2^(m_old - m_new) in base-2 units, P = 2^(x - m),
 * l = alpha l + sum P (a per-lane partial sum, reduced in the epilogue), O *= alpha. P is packed into
 * the A operand of O += P V: keys 16kk..16kk+15 are accumulator columns 8(2kk) and 8(2kk+1), and
 *   a[kk][0] = (row g, keys 2t, 2t+1)   a[kk][1] = (row g+8, ...)   a[kk][2], a[kk][3]: keys + 8
 * is exactly the register order of s, so the repack is s[8kk + 2r], s[8kk + 2r + 1] -> a[kk][r].
 */
template <int BF16, int BC, int D>
static __device__ __forceinline__ void tw_online_softmax(float (&s)[BC / 2], float (&m)[2], float (&l)[2],
                                                         float (&o)[D / 2], uint32_t (&a)[BC / 16][4], float sl2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = m[h];
#pragma unroll
        for (int c = 0; c < BC / 8; ++c) mx = fmaxf(mx, fmaxf(s[4 * c + 2 * h], s[4 * c + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* a row with no visible key yet has mx = -inf: subtract 0 instead, so -inf - -inf never
         * makes a NaN; its P are all 0 anyway. m_old = -inf gives alpha = 2^-inf = 0. */
        const float m_scaled = (mx == -INFINITY ? 0.f : mx) * sl2;
        const float alpha = tw_ex2(fmaf(m[h], sl2, -m_scaled));
        m[h] = mx;
        float sum = 0.f;
#pragma unroll
        for (int c = 0; c < BC / 8; ++c)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                s[4 * c + 2 * h + e] = tw_ex2(fmaf(s[4 * c + 2 * h + e], sl2, -m_scaled));
                sum += s[4 * c + 2 * h + e];
            }
        l[h] = l[h] * alpha + sum;
#pragma unroll
        for (int c = 0; c < D / 8; ++c) {
            o[4 * c + 2 * h] *= alpha;
            o[4 * c + 2 * h + 1] *= alpha;
        }
    }
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) a[kk][r] = tw_pack<BF16>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

/* O += P V: Bc/16 wgmma of 64 x D x 16, A = P from registers, B = V read transposed: keys 16kk.. are
 * rows 16kk.. of every 64-column region (2048 bytes per step), regions Bc x 128 bytes apart. */
template <int BF16, int D>
static __device__ __forceinline__ void tw_accumulate_pv(float (&o)[D / 2], const uint32_t (&a)[tw_bc(D) / 16][4],
                                                        uint32_t v_tile) {
    constexpr int BC = tw_bc(D);
    hop_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
        hop_wgmma_rs<BF16, D>(o, a[kk], hop_desc_sw128(v_tile + (uint32_t)(kk * 16 * 128), BC * 128, 1024));
    hop_wgmma_commit();
    hop_wgmma_wait<0>();
    hop_settle(o);
}

/* The per-warpgroup state that lives through the key loop. */
template <int D> struct tw_rows {
    float o[D / 2]; /* O accumulator: 64 rows x D over the warpgroup */
    float m[2], l[2];
};

/*
 * One key tile (the it-th visited, tile j, ring buffer it % stages): wait for K_j, S = Q K^T, mask
 * (MASK tiles only), online softmax, wait for V_j, O += P V; then every thread of the block is done
 * with the buffer and thread 0 refills it with the tile visited `stages` steps later.
 */
template <int BF16, int D, int CAUSAL, int MASK>
static __device__ __forceinline__ void tw_key_tile(const tw_params *p, const tw_smem *sm, tw_rows<D> *st, int it,
                                                   int j, int q_row0, int bh, int n_tiles) {
    constexpr int BC = tw_bc(D), KV = tw_tile_bytes(BC, D);
    const int buf = it % TW_STAGES;
    const uint32_t parity = (uint32_t)((it / TW_STAGES) & 1);
    const uint32_t q_rows = sm->q + (uint32_t)((threadIdx.x >> 7) * 64 * 128);
    float s[BC / 2];
    uint32_t a[BC / 16][4];

    hop_mbar_wait(sm->k_full + 8 * buf, parity);
    if (p->negate_q)
        tw_compute_s<BF16, D, 1>(s, q_rows, sm->k + buf * KV);
    else
        tw_compute_s<BF16, D, 0>(s, q_rows, sm->k + buf * KV);
    if (MASK) tw_mask<BC, CAUSAL>(s, j * BC, q_row0, p->n);
    tw_online_softmax<BF16, BC, D>(s, st->m, st->l, st->o, a, p->scale_log2);
    hop_mbar_wait(sm->v_full + 8 * buf, parity);
    tw_accumulate_pv<BF16, D>(st->o, a, sm->v + buf * KV);

    __syncthreads(); /* both warpgroups are done with K_j and V_j */
    if (threadIdx.x == 0 && it + TW_STAGES < n_tiles) tw_load_kv<D>(p, sm, buf, j - TW_STAGES, bh);
}

/* Epilogue: l summed over the quad, O / l stored (rows < N only), LSE = m2 ln 2 + ln l. */
template <int BF16, int D>
static __device__ __forceinline__ void tw_store(const tw_params *p, tw_rows<D> *st, int64_t bh, int q_row0) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = st->l[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = q_row0 + 8 * h;
        if (row >= p->n) continue;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        uint16_t *out = p->o + (bh * p->n + row) * D + 2 * t;
#pragma unroll
        for (int c = 0; c < D / 8; ++c)
            *(uint32_t *)(out + 8 * c) = tw_pack<BF16>(st->o[4 * c + 2 * h] * inv, st->o[4 * c + 2 * h + 1] * inv);
        if (t == 0) p->lse[bh * p->n + row] = l > 0.f ? st->m[h] * p->scale_log2 * TW_LN2 + logf(l) : -INFINITY;
    }
}

extern __shared__ __align__(1024) unsigned char tw_smem_raw[];

/* Grid (Tr, min(B*H, 65535), ceil(B*H / 65535)) as in stage 06: the row tiles of a head run together,
 * causal heads from the last (longest) row tile to the first. */
template <int BF16, int D, int CAUSAL>
__global__ void __launch_bounds__(TW_THREADS, 1) tw_fwd_kernel(const __grid_constant__ tw_params p) {
    constexpr int BC = tw_bc(D);
    const int64_t bh = (int64_t)blockIdx.z * gridDim.y + blockIdx.y;
    if (bh >= p.bh) return; /* whole block: no barrier is skipped by part of it */
    const int mb = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int q0 = mb * TW_BR, n = p.n;
    const tw_smem sm = tw_smem_map<D>((hop_smem_addr(tw_smem_raw) + 1023u) & ~1023u);

    /* tiles j < n_plain need no mask; the ones from n_plain to n_tiles - 1 (the diagonal band and the
     * tail past N) are visited first, so only they carry mask code */
    const int n_tiles = CAUSAL ? (min(n, q0 + TW_BR) + BC - 1) / BC : (n + BC - 1) / BC;
    const int n_plain = min(CAUSAL ? (q0 + 1) / BC : n_tiles, n / BC);
    const int j0 = n_tiles - 1;

    if (threadIdx.x == 0) {
        hop_mbar_init(sm.q_full, 1);
        for (int s = 0; s < TW_STAGES; ++s) {
            hop_mbar_init(sm.k_full + 8 * s, 1);
            hop_mbar_init(sm.v_full + 8 * s, 1);
        }
        hop_fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        tw_load_tile<D>(sm.q, &p.q_map, sm.q_full, TW_BR, q0, (int)bh);
        for (int s = 0; s < TW_STAGES && s < n_tiles; ++s) tw_load_kv<D>(&p, &sm, s, j0 - s, (int)bh);
    }

    tw_rows<D> st;
#pragma unroll
    for (int h = 0; h < 2; ++h) st.m[h] = -INFINITY, st.l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) st.o[i] = 0.f;
    /* this thread's first row: warpgroup, warp in it, lane group g */
    const int q_row0 = q0 + (int)(threadIdx.x >> 7) * 64 + (int)((threadIdx.x >> 5) & 3) * 16 + (int)((threadIdx.x & 31) >> 2);

    hop_mbar_wait(sm.q_full, 0);
    int it = 0, j = j0;
    for (; j >= n_plain; --j, ++it) tw_key_tile<BF16, D, CAUSAL, 1>(&p, &sm, &st, it, j, q_row0, (int)bh, n_tiles);
    for (; j >= 0; --j, ++it) tw_key_tile<BF16, D, CAUSAL, 0>(&p, &sm, &st, it, j, q_row0, (int)bh, n_tiles);
    tw_store<BF16, D>(&p, &st, bh, q_row0);
}

/* ---- host side ----------------------------------------------------------------------------------- */

template <int BF16, int D, int CAUSAL>
static attn_status tw_launch(const tw_params *kp, cudaStream_t stream) {
    void (*kern)(const tw_params) = tw_fwd_kernel<BF16, D, CAUSAL>;
    attn_status st = hop_smem_opt_in((const void *)kern, tw_smem_bytes(D), "stage 07");
    if (st != ATTN_OK) return st;
    const int64_t tr = (kp->n + TW_BR - 1) / TW_BR;
    dim3 grid((unsigned)tr, (unsigned)(kp->bh < TW_GRID_YZ ? kp->bh : TW_GRID_YZ),
              (unsigned)((kp->bh + TW_GRID_YZ - 1) / TW_GRID_YZ));
    kern<<<grid, TW_THREADS, (size_t)tw_smem_bytes(D), stream>>>(*kp);
    ATTN_CUDA_LAUNCHED("stage 07 kernel (tw_fwd_kernel)");
    return ATTN_OK;
}

template <int BF16, int CAUSAL> static attn_status tw_dispatch_d(int64_t D, const tw_params *kp, cudaStream_t s) {
    switch (D) {
    case 64: return tw_launch<BF16, 64, CAUSAL>(kp, s);
    case 128: return tw_launch<BF16, 128, CAUSAL>(kp, s);
    case 256: return tw_launch<BF16, 256, CAUSAL>(kp, s);
    }
    return attn_fail(ATTN_EUNSUPPORTED, "stage 07 supports head dim 64, 128, 256 (got %lld)", (long long)D);
}

extern "C" attn_status stage07_run(const attn_problem *pr, const attn_args *a) {
    if (pr->N > ((int64_t)1 << 30)) return attn_fail(ATTN_EUNSUPPORTED, "stage 07: N must be at most 2^30");
    const int64_t bh = pr->B * pr->H;
    if (bh > (int64_t)TW_GRID_YZ * TW_GRID_YZ)
        return attn_fail(ATTN_EUNSUPPORTED, "stage 07: B*H must be at most 65535^2");
    tw_params kp;
    attn_status st;
    const int bc = tw_bc((int)pr->D);
    if ((st = hop_tensor_map(&kp.q_map, a->q, bh, pr->N, pr->D, TW_BR)) != ATTN_OK ||
        (st = hop_tensor_map(&kp.k_map, a->k, bh, pr->N, pr->D, bc)) != ATTN_OK ||
        (st = hop_tensor_map(&kp.v_map, a->v, bh, pr->N, pr->D, bc)) != ATTN_OK)
        return st;
    kp.o = (uint16_t *)a->o;
    kp.lse = a->lse;
    kp.bh = bh;
    kp.n = (int)pr->N;
    /* as stage 06: scale 0 runs as FLT_MIN (every 2^x rounds to 1), a negative one as -Q and |scale| */
    kp.scale_log2 = fmaxf(fabsf(pr->scale) * TW_LOG2E, 1.17549435e-38f);
    kp.negate_q = pr->scale < 0.f;
    const cudaStream_t s = (cudaStream_t)a->stream;
    if (pr->dtype == ATTN_BF16)
        return pr->causal ? tw_dispatch_d<1, 1>(pr->D, &kp, s) : tw_dispatch_d<1, 0>(pr->D, &kp, s);
    return pr->causal ? tw_dispatch_d<0, 1>(pr->D, &kp, s) : tw_dispatch_d<0, 0>(pr->D, &kp, s);
}
