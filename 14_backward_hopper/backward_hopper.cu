/*
 * 14_backward_hopper/backward_hopper.cu: stage 14, the backward pass on Hopper (FlashAttention-2's
 * Algorithm 2 with stage 08's machinery).
 *
 * What this stage adds to stage 13: the backward on Hopper's data path. A block still owns one key tile
 * (Bc = 128 keys) of one head and walks its query tiles (Br = 64 rows); the equations are 13's. What
 * changes is who moves and who multiplies:
 *   - a producer warp loads: K_j and V_j once (TMA), then for every query tile Q_i and dO_i (TMA) and
 *     LSE_i, D_i (its 32 lanes) into a ring of 2 slots, each guarded by a full and an empty mbarrier
 *     (kit/hopper_pipeline.cuh);
 *   - two consumer warpgroups multiply, each owning 64 of the 128 keys (wgmma's M is 64 rows: keys):
 *         S^T  = K_j Q_i^T          wgmma, both from shared memory          64 keys x 64 queries
 *         P^T  = exp2(S^T scale log2(e) - LSE_i log2(e))                   in the S^T registers
 *         dP^T = V_j dO_i^T         wgmma, both from shared memory
 *         dS^T = P^T o (dP^T - D_i)                                        in the dP^T registers
 *         dV_j += P^T dO_i          wgmma, A = P^T from registers (the forward's P V, kit's hop_pack_p)
 *         dK_j += dS^T Q_i          wgmma, A = dS^T from registers
 *         dQ_i  = dS K_j            wgmma, both transposed from shared memory: dS^T (both halves) and K_j
 *     dQ_i needs all 128 keys, which the two warpgroups hold between them: each writes its half of dS^T
 *     to shared memory, and the warpgroup whose turn it is (tile t: warpgroup t % 2) computes the whole
 *     64 x D dQ_i after a named barrier, while the other goes on to tile t + 1; dS^T is double-buffered
 *     so that it may. The share is added into the fp32 accumulator by the copy engine's reduce-add
 *     (cp.reduce.async.bulk.tensor .add: an atomic add per element at L2, from a swizzled staging of
 *     the tile), or, in 14d, after key tile j - 1's with plain loads and stores (13d's counters);
 *   - setmaxnreg gives the producer 24 registers and the consumers 240 (dK and dV: D fp32 a thread).
 * dK_j (times scale) and dV_j are stored from registers at the end; dQ = scale * the accumulator by the
 * kit's last kernel, D_i by its first (kit/backward_prep.cuh, shared with stage 13).
 *
 * Causal: key tile j is seen by the query rows from j Bc on, so its walk starts at query tile 2j (tiles
 * above the diagonal are never visited) and masks its first two; the grid runs key tile 0 of every head
 * first, whose walk is the longest (longest work first), and key tile j - 1 of a head before key tile j
 * (14d's order relies on it).
 *
 * Limits: head dim 64 and 128 (at 256, K, V and the Q/dO ring alone need 256 KB of shared memory, and dK,
 * dV 256 registers a thread); fp16 and bf16; sm_90 only; N <= 2^30, B*H <= 2^31; N_q = N_k.
 *
 * Run it:    build/attn --stage 14 --batch 4 --heads 32 --seq 4096 --dim 128 --causal --check
 *            build/attn --stage 14d --batch 4 --heads 32 --seq 4096 --dim 128 --causal --check
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "14_backward_hopper/backward_hopper_layout.h"
#include "backward_hopper.h"
#include "backward_prep.cuh"
#include "cuda_check.h"
#include "hopper_attn.cuh"

/*
 * ---- tiles ---------------------------------------------------------------------------------------
 *   D     smem (KB): K + V + 2 x (Q + dO) + 2 x dS^T + 2 x dQ staging (14 only) + LSE/D
 *   64    16 + 16 + 2 x ( 8 +  8) + 2 x 16 + 2 x 16 + 1 = 129 (14d: 97)
 *   128   32 + 32 + 2 x (16 + 16) + 2 x 16 + 2 x 32 + 1 = 225 (14d: 161), 226 with the alignment's 1 KB
 *   consumer registers a thread: dK D/2 + dV D/2 + S^T 32 + dP^T 32 (then the packed P^T, dS^T: 16 + 16),
 *   and the turn's dQ D/2 once S^T and dP^T are gone: 192 at D = 128, of setmaxnreg's 240
 * One block an SM (227 KB at most: D = 128 fits with 1 KB to spare). Warpgroup 0 is the producer (one
 * warp of it works); consumer warpgroup c (1, 2 -> wg 0, 1) owns keys 64 wg .. 64 wg + 63 of the tile.
 */
static constexpr int BR = STAGE14_BR, BC = STAGE14_BC, SLOTS = 2;
static constexpr int THREADS = 384, CONSUMER_THREADS = 256;
static constexpr int PRODUCER_REGS = 24;
static constexpr int CONSUMER_REGS = hop_consumer_regs(THREADS, 1, PRODUCER_REGS);
static_assert(CONSUMER_REGS == 240, "168 at entry; the producer's 144 x 128 given back: 168 + 72 = 240");

static __host__ __device__ constexpr int q_bytes(int d) { return hop_tile_bytes(BR, d); } /* Q_i or dO_i */
static __host__ __device__ constexpr int kv_bytes(int d) { return hop_tile_bytes(BC, d); }
static constexpr int DS_BYTES = hop_tile_bytes(BC, BR); /* 128 keys x 64 queries, 16 bits */
static __host__ __device__ constexpr int dq_bytes(int d) { return BR * d * 4; } /* one staging, fp32 */
static constexpr int STATS_BYTES = 2 * BR * 4;                                  /* LSE_i log2(e), D_i */
/* K, V, the slots, dS^T twice, dQ staging per consumer warpgroup (14 only), stats, 6 mbarriers, and 1 KB
 * to round the base up to 1024 */
static __host__ __device__ constexpr int smem_bytes(int d, int det) {
    return 2 * kv_bytes(d) + 2 * SLOTS * q_bytes(d) + 2 * DS_BYTES + (det ? 0 : 2 * dq_bytes(d)) +
           SLOTS * STATS_BYTES + 8 * (2 + 2 * SLOTS) + 1024;
}
static_assert(smem_bytes(128, 0) <= 227 * 1024, "D = 128 fits one block an SM");

typedef struct {
    CUtensorMap q_map, k_map, v_map, do_map; /* 16 bits, boxes of 64 columns x 64 rows (Q, dO), 128 (K, V) */
    CUtensorMap dq_map;                      /* the fp32 accumulator, boxes of 32 columns x 64 rows (14) */
    const float *lse, *delta;                /* [B, H, N] */
    float *dq_acc;                           /* [B, H, N, D], zeroed first */
    int *order;                              /* 14d: key tiles that have added into each query tile */
    uint16_t *dk, *dv;
    int64_t bh;    /* B*H */
    int n, tr, tc; /* N, query tiles, key tiles */
    int causal;
    float scale, sl2; /* scale, and scale log2(e): P = exp2(S sl2 - LSE log2(e)) */
} bwd_hop_params;

/* Shared-memory addresses of one block: tiles first (1024-aligned), then the stats and the barriers. */
typedef struct {
    uint32_t k, v;   /* K_j, V_j: 128 rows, loaded once */
    uint32_t q, d_o; /* slot 0 of Q_i, dO_i; slot s at + s * q_bytes(D) */
    uint32_t ds;     /* dS^T of tile t at + (t % 2) * DS_BYTES */
    uint32_t dq;     /* consumer warpgroup wg's dQ staging at + wg * dq_bytes(D) (14 only) */
    uint32_t stats;  /* slot s: LSE_i log2(e) at + s * STATS_BYTES, D_i 256 bytes further */
    uint32_t k_full, v_full;
    hop_ring_bars query; /* the slots' full (the producer warp's 32 arrivals + the bytes) and empty */
} smem_layout;

template <int D, int DET> static __device__ __forceinline__ smem_layout smem_map(uint32_t base) {
    smem_layout s;
    s.k = base;
    s.v = s.k + kv_bytes(D);
    s.q = s.v + kv_bytes(D);
    s.d_o = s.q + SLOTS * q_bytes(D);
    s.ds = s.d_o + SLOTS * q_bytes(D);
    s.dq = s.ds + 2 * DS_BYTES;
    s.stats = s.dq + (DET ? 0 : 2 * dq_bytes(D));
    s.k_full = s.stats + SLOTS * STATS_BYTES;
    s.v_full = s.k_full + 8;
    s.query.full = s.v_full + 8;
    s.query.empty = s.query.full + 8 * SLOTS;
    return s;
}

static __device__ __forceinline__ void st_shared_f32(uint32_t at, float x) {
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(at), "f"(x) : "memory");
}
static __device__ __forceinline__ void st_shared_b32(uint32_t at, uint32_t x) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(x) : "memory");
}
static __device__ __forceinline__ void st_shared_f32x2(uint32_t at, float x, float y) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(x), "f"(y) : "memory");
}
static __device__ __forceinline__ float2 ld_shared_f32x2(uint32_t at) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(at) : "memory");
    return v;
}

/* ---- the producer warp -------------------------------------------------------------------------- */

/* LSE_i log2(e) and D_i of rows q0 + lane and q0 + 32 + lane; a row past N gets LSE = +inf (so P = 0,
 * which no garbage of a neighbouring head could make NaN) and D = 0. Read before the slot frees up. */
static __device__ __forceinline__ void load_row_stats(const bwd_hop_params *p, int64_t bh, int q0,
                                                      float (&lse2)[2], float (&delta)[2]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = q0 + 32 * h + lane;
        lse2[h] = row < p->n ? p->lse[bh * p->n + row] * ATTN_LOG2E : INFINITY;
        delta[h] = row < p->n ? p->delta[bh * p->n + row] : 0.f;
    }
}

/*
 * K_j and V_j once, then per query tile t: wait until the consumers have released the slot's previous
 * use, write LSE_i and D_i into it (every lane), and Q_i, dO_i by TMA (lane 0, which announces their
 * bytes); every lane arrives on the slot's full barrier (32 arrivals), so the consumers' wait also
 * covers the lanes' own stores.
 */
template <int D>
static __device__ __forceinline__ void produce(const bwd_hop_params *p, const smem_layout *sm, int64_t bh,
                                               int key0, int i0, int n_tiles) {
    const int lane = threadIdx.x & 31;
    if (lane == 0) {
        hop_load_tile<D>(sm->k, &p->k_map, sm->k_full, BC, key0, (int)bh);
        hop_load_tile<D>(sm->v, &p->v_map, sm->v_full, BC, key0, (int)bh);
    }
    for (int t = 0; t < n_tiles; ++t) {
        const hop_ring_state st = hop_ring_at<SLOTS>((uint32_t)t);
        const int q0 = (i0 + t) * BR;
        float lse2[2], delta[2];
        load_row_stats(p, bh, q0, lse2, delta);
        hop_ring_wait_empty(sm->query, st);
        const uint32_t stats = sm->stats + st.index * STATS_BYTES;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            st_shared_f32(stats + 4 * (32 * h + lane), lse2[h]);
            st_shared_f32(stats + 4 * BR + 4 * (32 * h + lane), delta[h]);
        }
        if (lane == 0) {
            hop_ring_expect_tx(sm->query, st, 2 * q_bytes(D));
            hop_load_tile_part<D>(sm->q + st.index * q_bytes(D), &p->q_map, hop_ring_full(sm->query, st), BR,
                                  0, q0, (int)bh);
            hop_load_tile_part<D>(sm->d_o + st.index * q_bytes(D), &p->do_map, hop_ring_full(sm->query, st),
                                  BR, 0, q0, (int)bh);
        } else {
            hop_mbar_arrive(hop_ring_full(sm->query, st));
        }
    }
}

/* ---- the softmax's backward, element by element (layout map 1: rows keys, columns queries) ------ */

/* S^T -> P^T = exp2(S^T sl2 - LSE log2(e)); MASK (block-uniform: the causal diagonal's two tiles, the
 * last key tile's keys past N) sets a key past N, or after the query, to 0. key0: the warpgroup's first
 * key; lse2: this slot's LSE_i log2(e). */
template <int MASK>
static __device__ __forceinline__ void probabilities(float (&s)[BR / 2], uint32_t lse2, float sl2, int key0,
                                                     int q0, int n, int causal) {
    const int tid = threadIdx.x & 127;
#pragma unroll
    for (int idx = 0; idx < BR / 2; idx += 2) {
        const int col = bwh_acc_col(tid, idx);
        const float2 l = ld_shared_f32x2(lse2 + 4 * col);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float x = fast_exp2(fmaf(s[idx + e], sl2, -(e ? l.y : l.x)));
            if (MASK) {
                const int key = key0 + bwh_acc_row(tid, idx), query = q0 + col + e;
                if (key >= n || (causal && key > query)) x = 0.f;
            }
            s[idx + e] = x;
        }
    }
}

/* dP^T -> dS^T = P^T (dP^T - D_i), in place; delta: this slot's D_i. */
static __device__ __forceinline__ void dsoftmax(float (&dp)[BR / 2], const float (&p)[BR / 2],
                                                uint32_t delta) {
    const int tid = threadIdx.x & 127;
#pragma unroll
    for (int idx = 0; idx < BR / 2; idx += 2) {
        const float2 d = ld_shared_f32x2(delta + 4 * bwh_acc_col(tid, idx));
        dp[idx] = p[idx] * (dp[idx] - d.x);
        dp[idx + 1] = p[idx + 1] * (dp[idx + 1] - d.y);
    }
}

/* The warpgroup's 64 rows of dS^T (16-bit pairs, as packed for dK's A operand: dsf[kk][r] holds registers
 * 8 kk + 2 r and + 1) into the dS^T buffer (layout map 2), then fenced for wgmma's reads (async proxy). */
static __device__ __forceinline__ void store_ds(uint32_t ds, const uint32_t (&dsf)[BR / 16][4], int wg) {
    const int tid = threadIdx.x & 127;
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int idx = 8 * kk + 2 * r;
            st_shared_b32(ds + bwh_ds_offset(64 * wg + bwh_acc_row(tid, idx), bwh_acc_col(tid, idx)),
                          dsf[kk][r]);
        }
    hop_fence_async_smem();
}

/* ---- dQ_i = dS K_j, and its share into the accumulator ------------------------------------------ */

/* Issued (not waited for): 8 wgmma of 64 queries x D x 16 keys. A = dS (queries x keys) read from dS^T,
 * MN-major: keys 16 kk.. are rows 16 kk.. (2048 bytes a step), its 64 queries one 128-byte row; B = K_j
 * (keys x D), MN-major as the forward reads V: regions of 64 columns Bc x 128 bytes apart. */
template <int BF16, int D>
static __device__ __forceinline__ void issue_dq(float (&dq)[D / 2], uint32_t ds, uint32_t k_tile) {
    hop_wgmma_fence();
    const uint64_t a = hop_desc_sw128(ds, BC * 128, 1024), b = hop_desc_sw128(k_tile, BC * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
        hop_wgmma_ss_mn<BF16, D>(dq, hop_desc_advance(a, (uint32_t)(kk * 16 * 128)),
                                 hop_desc_advance(b, (uint32_t)(kk * 16 * 128)), kk > 0);
    hop_wgmma_commit();
}

/* 14: the tile into this warpgroup's staging (layout map 3), then one thread asks the copy engine to add
 * its D / 32 boxes into the accumulator (rows past N dropped). Before writing the staging again, that
 * thread waits until the engine has read the last one (two tiles ago). */
template <int D>
static __device__ __forceinline__ void reduce_dq(const bwd_hop_params *p, uint32_t staging,
                                                 const float (&dq)[D / 2], int64_t bh, int q0, int wg) {
    const int tid = threadIdx.x & 127;
    if (tid == 0) hop_tma_store_wait_read();
    hop_bar_sync(HOP_BAR_BWD_DQ + wg, 128);
#pragma unroll
    for (int idx = 0; idx < D / 2; idx += 2)
        st_shared_f32x2(staging + bwh_dq_offset(bwh_acc_row(tid, idx), bwh_acc_col(tid, idx)), dq[idx],
                        dq[idx + 1]);
    hop_fence_async_smem();
    hop_bar_sync(HOP_BAR_BWD_DQ + wg, 128);
    if (tid == 0) {
#pragma unroll
        for (int b = 0; b < D / 32; ++b)
            hop_tma_reduce_add_3d(&p->dq_map, staging + b * 64 * 128, 32 * b, q0, (int)bh);
        hop_tma_store_commit();
    }
}

/* 14d: in key-tile order, as 13d: one thread waits until the query tile's counter reads j (key tiles
 * 0 .. j - 1 have added theirs), the warpgroup adds with plain loads and stores through L2 (.cg: L1 is
 * not coherent between SMs), then publishes j + 1 after a fence. The loads go DQ_BATCH at a time before
 * their adds and stores: one at a time, each add waited a whole L2 round trip, 32 in a row per thread
 * at D = 128, and 14d ran at 0.30-0.38x of 14 on an H100 (history/backward.md). */
#define DQ_BATCH 4
template <int D>
static __device__ __forceinline__ void add_dq_in_order(const bwd_hop_params *p, const float (&dq)[D / 2],
                                                       int64_t bh, int j, int q0, int wg) {
    const int tid = threadIdx.x & 127;
    int *counter = p->order + bh * p->tr + q0 / BR;
    if (tid == 0)
        while (atomicAdd(counter, 0) != j) __nanosleep(64);
    hop_bar_sync(HOP_BAR_BWD_DQ + wg, 128);
    __threadfence();
#pragma unroll
    for (int base = 0; base < D / 2; base += 2 * DQ_BATCH) {
        float2 v[DQ_BATCH];
#pragma unroll
        for (int c = 0; c < DQ_BATCH; ++c) {
            const int idx = base + 2 * c, row = q0 + bwh_acc_row(tid, idx);
            if (idx < D / 2 && row < p->n)
                v[c] = __ldcg(reinterpret_cast<const float2 *>(p->dq_acc + (bh * p->n + row) * D +
                                                               bwh_acc_col(tid, idx)));
        }
#pragma unroll
        for (int c = 0; c < DQ_BATCH; ++c) {
            const int idx = base + 2 * c, row = q0 + bwh_acc_row(tid, idx);
            if (idx >= D / 2 || row >= p->n) continue;
            v[c].x += dq[idx], v[c].y += dq[idx + 1];
            __stcg(reinterpret_cast<float2 *>(p->dq_acc + (bh * p->n + row) * D + bwh_acc_col(tid, idx)),
                   v[c]);
        }
    }
    __threadfence();
    hop_bar_sync(HOP_BAR_BWD_DQ + wg, 128);
    if (tid == 0) atomicExch(counter, j + 1);
}

template <int BF16, int D, int DET>
static __device__ __forceinline__ void dq_tile(const bwd_hop_params *p, const smem_layout *sm, uint32_t ds,
                                               int64_t bh, int j, int q0, int wg) {
    float dq[D / 2];
    issue_dq<BF16, D>(dq, ds, sm->k);
    hop_wgmma_wait<0>();
    hop_settle(dq);
    if (DET)
        add_dq_in_order<D>(p, dq, bh, j, q0, wg);
    else
        reduce_dq<D>(p, sm->dq + wg * dq_bytes(D), dq, bh, q0, wg);
}

/* ---- one query tile for one consumer warpgroup --------------------------------------------------- */

/*
 * Wait for the slot; S^T and dP^T issued together, P^T computed while dP^T runs; dS^T; dS^T to shared
 * memory; dV and dK issued; the turn's barrier (the owner of tile t, warpgroup t % 2, waits until both
 * halves of dS^T are written; the other only arrives); dV and dK waited for, the slot released; the owner
 * then computes dQ_i and adds it.
 */
template <int BF16, int D, int DET, int MASK>
static __device__ __forceinline__ void query_tile(const bwd_hop_params *p, const smem_layout *sm,
                                                  float (&dk)[D / 2], float (&dv)[D / 2], int64_t bh, int j,
                                                  int t, int q0, int wg) {
    const hop_ring_state st = hop_ring_at<SLOTS>((uint32_t)t);
    const uint32_t q = sm->q + st.index * q_bytes(D), d_o = sm->d_o + st.index * q_bytes(D);
    const uint32_t stats = sm->stats + st.index * STATS_BYTES, ds = sm->ds + (t & 1) * DS_BYTES;
    float s[BR / 2], dp[BR / 2];
    uint32_t pf[BR / 16][4], dsf[BR / 16][4];

    hop_ring_wait_full(sm->query, st);
    hop_issue_s<BF16, D, BC, BR, 0>(s, sm->k + wg * 64 * 128, q);    /* S^T = K_j Q_i^T, this wg's keys */
    hop_issue_s<BF16, D, BC, BR, 0>(dp, sm->v + wg * 64 * 128, d_o); /* dP^T = V_j dO_i^T */
    hop_wgmma_wait<1>();
    hop_settle(s);
    probabilities<MASK>(s, stats, p->sl2, j * BC + 64 * wg, q0, p->n, p->causal);
    hop_wgmma_wait<0>();
    hop_settle(dp);
    dsoftmax(dp, s, stats + 4 * BR);
    hop_pack_p<BF16, BR>(s, pf);
    hop_pack_p<BF16, BR>(dp, dsf);
    store_ds(ds, dsf, wg);
    hop_issue_pv<BF16, D, BR>(dv, pf, d_o); /* dV_j += P^T dO_i */
    hop_issue_pv<BF16, D, BR>(dk, dsf, q);  /* dK_j += dS^T Q_i */
    const int owner = (t & 1) == wg;
    if (owner)
        hop_bar_sync(HOP_BAR_BWD_DS + (t & 1), CONSUMER_THREADS);
    else
        hop_bar_arrive(HOP_BAR_BWD_DS + (t & 1), CONSUMER_THREADS);
    hop_wgmma_wait<0>();
    hop_settle(dv);
    hop_settle(dk);
    hop_ring_release<0>(sm->query, st, 0);
    if (owner) dq_tile<BF16, D, DET>(p, sm, ds, bh, j, q0, wg);
}

/* dK_j (times scale) and dV_j of the warpgroup's 64 keys, 16 bits, keys below N only. */
template <int BF16, int D>
static __device__ __forceinline__ void store_dk_dv(const bwd_hop_params *p, const float (&dk)[D / 2],
                                                   const float (&dv)[D / 2], int64_t bh, int key0) {
    const int tid = threadIdx.x & 127;
#pragma unroll
    for (int idx = 0; idx < D / 2; idx += 2) {
        const int key = key0 + bwh_acc_row(tid, idx);
        if (key >= p->n) continue;
        const int64_t at = (bh * p->n + key) * D + bwh_acc_col(tid, idx);
        *reinterpret_cast<uint32_t *>(p->dk + at) =
            pack_16x2<BF16>(dk[idx] * p->scale, dk[idx + 1] * p->scale);
        *reinterpret_cast<uint32_t *>(p->dv + at) = pack_16x2<BF16>(dv[idx], dv[idx + 1]);
    }
}

/* A consumer warpgroup's walk: query tiles i0 .. Tr - 1, the masked ones through MASK = 1. */
template <int BF16, int D, int DET>
static __device__ __forceinline__ void consume(const bwd_hop_params *p, const smem_layout *sm, int64_t bh,
                                               int j, int i0, int n_tiles, int wg) {
    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
    const int key0 = j * BC;
    hop_mbar_wait(sm->k_full, 0);
    hop_mbar_wait(sm->v_full, 0);
    for (int t = 0; t < n_tiles; ++t) {
        const int q0 = (i0 + t) * BR;
        if ((p->causal && q0 < key0 + BC - 1) || key0 + BC > p->n)
            query_tile<BF16, D, DET, 1>(p, sm, dk, dv, bh, j, t, q0, wg);
        else
            query_tile<BF16, D, DET, 0>(p, sm, dk, dv, bh, j, t, q0, wg);
    }
    store_dk_dv<BF16, D>(p, dk, dv, bh, key0 + 64 * wg);
    if ((threadIdx.x & 127) == 0) hop_tma_store_wait_all(); /* the last reduce done before the block ends */
}

/* Which head and key tile a block owns: key tile major, so that under a causal mask the longest walks
 * (key tile 0 visits every query tile) start first, and block (b, h, j - 1) precedes (b, h, j). */
static __device__ __forceinline__ int block_work(const bwd_hop_params *p, int64_t *bh, int *j) {
    const int64_t blk = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    if (blk >= p->bh * p->tc) return 0;
    *j = (int)(blk / p->bh);
    *bh = blk % p->bh;
    return 1;
}

/* The barriers, made by thread 0 and shown to every thread before any copy. Not hop_pipeline_init: a
 * slot's full barrier takes the 32 arrivals of the producer warp, whose lanes write LSE_i and D_i. */
static __device__ __forceinline__ void init_barriers(const smem_layout *sm) {
    if (threadIdx.x == 0) {
        hop_mbar_init(sm->k_full, 1);
        hop_mbar_init(sm->v_full, 1);
        for (int s = 0; s < SLOTS; ++s) {
            hop_mbar_init(sm->query.full + 8 * s, 32);
            hop_mbar_init(sm->query.empty + 8 * s, CONSUMER_THREADS);
        }
        hop_fence_barrier_init();
    }
    __syncthreads();
}

extern __shared__ __align__(1024) unsigned char smem_raw[];

template <int BF16, int D, int DET>
__global__ void __launch_bounds__(THREADS, 1)
    backward_hopper_kernel(const __grid_constant__ bwd_hop_params p) {
    int64_t bh;
    int j;
    if (!block_work(&p, &bh, &j)) return;
    const smem_layout sm = smem_map<D, DET>((hop_smem_addr(smem_raw) + 1023u) & ~1023u);
    const int i0 = p.causal ? j * BC / BR : 0; /* the first query tile with a row at or past key0 */
    init_barriers(&sm);
    const int wg = (int)(threadIdx.x >> 7);
    if (wg == 0) { /* producer: one branch, so that setmaxnreg applies to the whole warpgroup */
        hop_regs_release<PRODUCER_REGS>();
        if (threadIdx.x < 32) produce<D>(&p, &sm, bh, j * BC, i0, p.tr - i0);
    } else {
        hop_regs_claim<CONSUMER_REGS>();
        consume<BF16, D, DET>(&p, &sm, bh, j, i0, p.tr - i0, wg - 1);
    }
}

/* ---- host side ----------------------------------------------------------------------------------- */

template <int BF16, int D, int DET> static attn_status launch(const bwd_hop_params *kp, cudaStream_t stream) {
    void (*kern)(const bwd_hop_params) = backward_hopper_kernel<BF16, D, DET>;
    attn_status st = hop_smem_opt_in((const void *)kern, smem_bytes(D, DET), DET ? "stage 14d" : "stage 14");
    if (st != ATTN_OK) return st;
    /* blocks in x, and in y past 2^31 - 1 (2^31 heads x 2^23 key tiles at most) */
    const int64_t blocks = kp->bh * kp->tc, gx = blocks <= 2147483647 ? blocks : (int64_t)1 << 30;
    const int64_t gy = (blocks + gx - 1) / gx;
    if (gy > 65535)
        return attn_fail(ATTN_EINVAL, "stage 14: %lld blocks is more than one launch holds",
                         (long long)blocks);
    return hop_launch((const void *)kern, dim3((unsigned)gx, (unsigned)gy, 1), THREADS, smem_bytes(D, DET),
                      stream, (void *)kp, "stage 14 kernel (backward_hopper_kernel)");
}

template <int BF16, int DET>
static attn_status launch_for_dim(int64_t D, const bwd_hop_params *kp, cudaStream_t s) {
    return D == 64 ? launch<BF16, 64, DET>(kp, s) : launch<BF16, 128, DET>(kp, s);
}

/* The tensor maps (Q, dO: 64-row boxes; K, V: 128; the accumulator's for 14) and the scalars. */
static attn_status make_params(bwd_hop_params *kp, const attn_problem *pr, const attn_args *a,
                               bwd_workspace ws, int det) {
    const int64_t bh = pr->B * pr->H;
    attn_status st;
    if ((st = hop_tensor_map(&kp->q_map, a->q, bh, pr->N, pr->D, BR)) != ATTN_OK ||
        (st = hop_tensor_map(&kp->k_map, a->k, bh, pr->N, pr->D, BC)) != ATTN_OK ||
        (st = hop_tensor_map(&kp->v_map, a->v, bh, pr->N, pr->D, BC)) != ATTN_OK ||
        (st = hop_tensor_map(&kp->do_map, a->d_o, bh, pr->N, pr->D, BR)) != ATTN_OK)
        return st;
    if (!det && (st = hop_tensor_map_f32(&kp->dq_map, ws.dq_acc, bh, pr->N, pr->D, BR)) != ATTN_OK) return st;
    kp->lse = a->lse, kp->delta = ws.delta, kp->dq_acc = ws.dq_acc, kp->order = ws.order;
    kp->dk = (uint16_t *)a->dk, kp->dv = (uint16_t *)a->dv;
    kp->bh = bh;
    kp->n = (int)pr->N;
    kp->tr = (int)((pr->N + BR - 1) / BR), kp->tc = (int)((pr->N + BC - 1) / BC);
    kp->causal = pr->causal != 0;
    kp->scale = pr->scale, kp->sl2 = pr->scale * ATTN_LOG2E;
    return ATTN_OK;
}

/* D_i and the zeroed accumulator (kit), the main kernel, dQ to 16 bits (kit). */
static attn_status run(const char *id, int det, const attn_problem *pr, const attn_args *a) {
    attn_status st = stage14_check_limits(pr); /* workspace.c: the library asks the same before choosing */
    if (st != ATTN_OK) return st;
    const bwd_workspace ws = bwd_workspace_split(a->workspace, pr);
    bwd_hop_params kp;
    memset(&kp, 0, sizeof kp);
    if ((st = make_params(&kp, pr, a, ws, det)) != ATTN_OK) return st;
    const cudaStream_t stream = (cudaStream_t)a->stream;
    if ((st = bwd_prepare(id, pr, a, ws, BR, det, stream)) != ATTN_OK) return st;
    if (pr->dtype == ATTN_BF16)
        st = det ? launch_for_dim<1, 1>(pr->D, &kp, stream) : launch_for_dim<1, 0>(pr->D, &kp, stream);
    else
        st = det ? launch_for_dim<0, 1>(pr->D, &kp, stream) : launch_for_dim<0, 0>(pr->D, &kp, stream);
    return st != ATTN_OK ? st : bwd_finish(id, pr, a, ws, stream);
}

extern "C" attn_status stage14_run(const attn_problem *p, const attn_args *a) { return run("14", 0, p, a); }
extern "C" attn_status stage14d_run(const attn_problem *p, const attn_args *a) { return run("14d", 1, p, a); }
