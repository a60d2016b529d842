/*
 * hopper_attn.cuh: the steps of FlashAttention-2's inner loop on Hopper's registers, shared by stages
 * 07-09. Each stage arranges them differently (07: the same threads load and compute; 08: a producer
 * warp loads, consumer warpgroups compute; 09: the consumers overlap softmax with the tensor cores);
 * the steps themselves are the same, so they live here once.
 *
 * One warpgroup (128 threads, 4 warps) owns 64 query rows. In the wgmma accumulator layout a thread
 * (warp w of its warpgroup, lane 4g + t) holds rows 16w + g and 16w + g + 8, and of every 8 columns
 * the pair 2t, 2t + 1:   acc[4c + 2h + e] = row 16w + g + 8h, column 8c + 2t + e.
 * A row's max and sum are finished inside the quad of 4 lanes (2 shuffles), as in stage 06.
 *
 * Tiles in shared memory: a tile of R rows x D columns is D/64 regions of R rows x 128 bytes, each
 * written by one TMA box in the 128-byte swizzle; regions start 1024-byte aligned.
 */
#ifndef ATTN_HOPPER_ATTN_CUH
#define ATTN_HOPPER_ATTN_CUH

#include <math.h>
#include <stdint.h>

#include "fast_math.cuh"
#include "grid_order.h"
#include "hopper.cuh"
#include "hopper_host.h"
#include "hopper_pipeline.cuh"

static __host__ __device__ constexpr int hop_tile_bytes(int rows, int d) { return rows * d * 2; }

/* Which head and which row tile this block computes (grid_order.h: a head's row tiles together;
 * causal, the last heads longest first across them, so that the light tiles end the grid). UNIT: 2 for
 * pairs of blocks (stage 08's clusters of two), which take two adjacent row tiles of one head.
 * Returns -1 past B*H. */
template <int CAUSAL, int UNIT>
static __device__ __forceinline__ int64_t hop_block_head(const hop_attn_params *p, int *mb) {
    const grid_item it =
        grid_order(CAUSAL, UNIT, p->bh, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y);
    *mb = it.row_block;
    return it.bh;
}

/* The key tiles a row tile q0 .. q0 + Br - 1 visits, as in stage 06: 0 .. n_tiles - 1 (causal: up to the
 * one holding key min(N, q0 + Br) - 1), and of those the tiles below n_plain need no mask at all. */
typedef struct {
    int n_tiles, n_plain;
} hop_key_range;

template <int BR, int BC, int CAUSAL>
static __device__ __forceinline__ hop_key_range hop_key_tiles(int q0, int n) {
    hop_key_range r;
    r.n_tiles = CAUSAL ? (min(n, q0 + BR) + BC - 1) / BC : (n + BC - 1) / BC;
    r.n_plain = min(CAUSAL ? (q0 + 1) / BC : r.n_tiles, n / BC);
    return r;
}

/* Where row `row` of 64-column region c of a `rows`-row tile starts: regions are rows x 128 bytes */
static __device__ __forceinline__ uint32_t hop_tile_region(uint32_t tile, int rows, int c, int row) {
    return tile + (uint32_t)((c * rows + row) * 128);
}

/* Rows first .. first + box - 1 (box: the map's box height) of a tile of `rows` rows from row row0 of
 * head bh, into this block only: D/64 boxes, one per 64-column region, counted on mbarrier `bar`. */
template <int D>
static __device__ __forceinline__ void hop_load_tile_part(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                          int rows, int first, int row0, int bh) {
#pragma unroll
    for (int c = 0; c < D / 64; ++c)
        hop_tma_load_3d(hop_tile_region(dst, rows, c, first), map, bar, c * 64, row0 + first, bh);
}

/* A whole tile (the map's box is `rows` high), all counted on one mbarrier (expect_tx: the whole tile,
 * zero-filled rows past N included). One thread calls it. */
template <int D>
static __device__ __forceinline__ void hop_load_tile(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                     int rows, int row0, int bh) {
    hop_mbar_arrive_expect_tx(bar, (uint32_t)hop_tile_bytes(rows, D));
    hop_load_tile_part<D>(dst, map, bar, rows, 0, row0, bh);
}

/* The same rows of a tile, written into the same place in every block of cta_mask, each block counting
 * the bytes on its own mbarrier `bar`; the caller announces the bytes that will land (the pairs of
 * hop_load_kv_tile: the whole tile, both halves). */
template <int D>
static __device__ __forceinline__ void hop_load_tile_part_multicast(uint32_t dst, const CUtensorMap *map,
                                                                    uint32_t bar, int rows, int first,
                                                                    int row0, int bh, uint16_t cta_mask) {
#pragma unroll
    for (int c = 0; c < D / 64; ++c)
        hop_tma_load_3d_multicast(hop_tile_region(dst, rows, c, first), map, bar, c * 64, row0 + first, bh,
                                  cta_mask);
}

/* K_j or V_j into a ring buffer (one thread). PAIR (stages 08 and 09's pairs of blocks, a 2-block
 * cluster; the maps' K/V boxes are then half tiles): each block announces the whole tile on its own
 * barrier, since both halves land there; a tile both blocks visit (`shared`) is loaded half by each,
 * its half (`rank`) written into both blocks by multicast; a tile of this block only, both halves. */
template <int D, int BC, int PAIR>
static __device__ __forceinline__ void hop_load_kv_tile(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                        int key0, int bh, unsigned rank, int shared) {
    if (!PAIR) {
        hop_load_tile<D>(dst, map, bar, BC, key0, bh);
        return;
    }
    hop_mbar_arrive_expect_tx(bar, (uint32_t)hop_tile_bytes(BC, D));
    if (shared) {
        hop_load_tile_part_multicast<D>(dst, map, bar, BC, (int)rank * (BC / 2), key0, bh, 0x3);
        return;
    }
    for (int half = 0; half < 2; ++half) hop_load_tile_part<D>(dst, map, bar, BC, half * (BC / 2), key0, bh);
}

/* This block's rank in its pair (its 2-block cluster), 0 for a single block: the half of a shared K/V
 * tile its producer loads (hop_load_kv_tile) and, in stage 09, which row block of the pair's unit it
 * computes (work_units.h's pair_item). */
template <int PAIR> static __device__ __forceinline__ unsigned hop_pair_rank(void) {
    return PAIR ? hop_cluster_rank() : 0u;
}

/* S = Q K^T issued (not waited for): D/16 wgmma of 64 x Bc x 16. Step kk reads columns 16kk .. 16kk+15
 * of region kk/4, a 32-byte step of the start address inside the 128-byte row (the hardware applies
 * the swizzle to the final address, which is why regions are 1024-aligned). q_rows: this warpgroup's
 * 64 rows in region 0 of the Q tile; the Q tile's regions are Br x 128 bytes apart. */
template <int BF16, int D, int BR, int BC, int NEG>
static __device__ __forceinline__ void hop_issue_s(float (&s)[BC / 2], uint32_t q_rows, uint32_t k_tile) {
    hop_wgmma_fence();
    const uint64_t q_desc = hop_desc_sw128(q_rows, 16, 1024), k_desc = hop_desc_sw128(k_tile, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t col = (uint32_t)((kk & 3) * 32);
        const uint64_t a = hop_desc_advance(q_desc, (uint32_t)((kk >> 2) * BR * 128) + col);
        const uint64_t b = hop_desc_advance(k_desc, (uint32_t)((kk >> 2) * BC * 128) + col);
        hop_wgmma_ss<BF16, NEG, BC>(s, a, b, kk > 0);
    }
    hop_wgmma_commit();
}
/* the same with the sign of the scale chosen at run time (one branch per tile, uniform) */
template <int BF16, int D, int BR, int BC>
static __device__ __forceinline__ void hop_issue_s(float (&s)[BC / 2], uint32_t q_rows, uint32_t k_tile,
                                                   int negate) {
    if (negate)
        hop_issue_s<BF16, D, BR, BC, 1>(s, q_rows, k_tile);
    else
        hop_issue_s<BF16, D, BR, BC, 0>(s, q_rows, k_tile);
}

/* O += P V issued (not waited for): Bc/16 wgmma of 64 x D x 16, A = P from registers, B = V read
 * transposed: keys 16kk.. are rows 16kk.. of every 64-column region (2048 bytes per step), and the
 * regions (the next 64 columns of the head dim) are Bc x 128 bytes apart: the descriptor's leading
 * byte offset. */
template <int BF16, int D, int BC>
static __device__ __forceinline__ void hop_issue_pv(float (&o)[D / 2], const uint32_t (&p)[BC / 16][4],
                                                    uint32_t v_tile) {
    hop_wgmma_fence();
    const uint64_t v_desc = hop_desc_sw128(v_tile, BC * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
        hop_wgmma_rs<BF16, D>(o, p[kk], hop_desc_advance(v_desc, (uint32_t)(kk * 16 * 128)));
    hop_wgmma_commit();
}

/* Keys that row qi may not see get -inf: key >= N (the zero rows the copy engine filled in), and
 * key > qi when causal. row0 is the thread's first row (g); its second is row0 + 8. */
template <int BC, int CAUSAL>
static __device__ __forceinline__ void hop_mask(float (&s)[BC / 2], int key0, int row0, int n) {
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

/* The running state of the warpgroup's 64 rows: O, and per thread's two rows m (raw scores) and l
 * (a per-lane partial sum: alpha is the same across the quad, so the quad's sum is taken once, at
 * the end). */
template <int D> struct hop_rows {
    float o[D / 2];
    float m[2], l[2];
};
template <int D> static __device__ __forceinline__ void hop_rows_init(hop_rows<D> *r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) r->m[h] = -INFINITY, r->l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) r->o[i] = 0.f;
}

/*
 * The online softmax of one tile (stage 04's lines, on this layout): per row the new max over the tile
 * and the quad, alpha = 2^(m_old - m_new) in base-2 units, P = 2^(x - m) in place of the scores,
 * l = alpha l + sum P. Returns alpha of both rows: the caller rescales O, now or (stage 09) later.
 * LAZY (stage 09, FlashAttention-4's conditional rescaling): a row keeps its old m unless the tile
 * raises it by more than HOP_LAZY_SLACK base-2 units, and then alpha is exactly 1, so that the caller
 * may skip O *= alpha (after the first few tiles the max rarely moves that much). P then reaches at
 * most 2^8 = 256, and l and O grow by as much: far inside fp16, bf16 and fp32 range; O / l and
 * LSE = m + log l do not depend on which m was used.
 */
#define HOP_LAZY_SLACK 8.f
template <int BC, int LAZY = 0>
static __device__ __forceinline__ void hop_online_softmax(float (&s)[BC / 2], float (&m)[2], float (&l)[2],
                                                          float (&alpha)[2], float sl2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = m[h];
#pragma unroll
        for (int c = 0; c < BC / 8; ++c) mx = fmaxf(mx, fmaxf(s[4 * c + 2 * h], s[4 * c + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* a row with no visible key yet has mx = -inf: subtract 0 instead, so -inf - -inf never makes a
         * NaN (its P are all 0 anyway); m_old = -inf gives alpha = 2^-inf = 0. With LAZY, mx - m is NaN
         * while both are -inf, the test fails, mx stays -inf and alpha = 1 scales an O and l still 0 */
        if (LAZY && (mx - m[h]) * sl2 <= HOP_LAZY_SLACK) mx = m[h];
        const float m_scaled = (mx == -INFINITY ? 0.f : mx) * sl2;
        alpha[h] = LAZY && mx == m[h] ? 1.f : fast_exp2(fmaf(m[h], sl2, -m_scaled));
        m[h] = mx;
        float sum = 0.f;
#pragma unroll
        for (int c = 0; c < BC / 8; ++c)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                s[4 * c + 2 * h + e] = fast_exp2(fmaf(s[4 * c + 2 * h + e], sl2, -m_scaled));
                sum += s[4 * c + 2 * h + e];
            }
        l[h] = l[h] * alpha[h] + sum;
    }
}

/* P (fp32, in the accumulator layout) packed into the A operand of O += P V. Keys 16kk .. 16kk+15 are
 * accumulator columns 8(2kk) and 8(2kk+1), and the A fragment of a 16-key step is (row g, keys 2t, 2t+1),
 * (row g+8, ...), then the same 8 keys later: exactly the register order of the accumulator, so
 * s[8kk + 2r], s[8kk + 2r + 1] -> p[kk][r]. No shuffle, no shared memory (as in stage 06). */
template <int BF16, int BC>
static __device__ __forceinline__ void hop_pack_p(const float (&s)[BC / 2], uint32_t (&p)[BC / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) p[kk][r] = pack_16x2<BF16>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

/* O *= alpha, row by row */
template <int D>
static __device__ __forceinline__ void hop_rescale_o(float (&o)[D / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int c = 0; c < D / 8; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            o[4 * c + 2 * h] *= alpha[h];
            o[4 * c + 2 * h + 1] *= alpha[h];
        }
}

/* Epilogue: l summed over the quad (each thread holds a quarter of its row's sum), then O / l stored
 * (rows < N only) and LSE = m2 ln 2 + ln l: l is the sum of 2^(x - m2) with x = s scale log2(e) and
 * m2 = m scale log2(e), so sum e^(scale s) = 2^m2 l. row0 is the thread's first row in the head. */
static __device__ __forceinline__ float hop_row_sum_l(float l) {
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    return l + __shfl_xor_sync(0xffffffffu, l, 2);
}
static __device__ __forceinline__ float hop_lse(const hop_attn_params *p, float m, float l) {
    return l > 0.f ? m * p->scale_log2 * ATTN_LN2 + logf(l) : -INFINITY;
}
static __device__ __forceinline__ void hop_store_lse(const hop_attn_params *p, int64_t bh, int row, float m,
                                                     float l) {
    if ((threadIdx.x & 3) == 0 && row < p->n) p->lse[bh * p->n + row] = hop_lse(p, m, l);
}
template <int BF16, int D>
static __device__ __forceinline__ void hop_store_o_lse(const hop_attn_params *p, const hop_rows<D> *r,
                                                       int64_t bh, int row0) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float l = hop_row_sum_l(r->l[h]);
        const int row = row0 + 8 * h;
        if (row >= p->n) continue;
        const float inv = l > 0.f ? 1.f / l : 0.f; /* key 0 is always visible, so l > 0; guard anyway */
        uint16_t *out = p->o + (bh * p->n + row) * D + 2 * t;
#pragma unroll
        for (int c = 0; c < D / 8; ++c)
            *(uint32_t *)(out + 8 * c) =
                pack_16x2<BF16>(r->o[4 * c + 2 * h] * inv, r->o[4 * c + 2 * h + 1] * inv);
        if (t == 0) p->lse[bh * p->n + row] = hop_lse(p, r->m[h], l);
    }
}

/*
 * O through the copy engine (stages 08 and 09). The warpgroup writes its 64-row tile of O / l into a
 * staging buffer as D / 64 regions of 64 rows x 128 bytes, region k at staging + k * REGION_STRIDE,
 * each in the 128-byte swizzle of the O map (16-byte chunk c of row r at chunk c ^ (r & 7): a warp's
 * store of one chunk column reaches 8 rows in 8 different chunks, all 32 banks); then one thread asks
 * the engine to write the boxes to global memory, which drops the rows past N. In place of D / 4
 * stores a thread, each writing 16-byte pieces of 8 rows (half a 32-byte sector each): D / 64 bulk
 * copies of 8 KB. Before it writes the buffer again, that thread waits until the engine has read it
 * (hop_tma_store_wait_read); before the block exits, the caller makes it wait too (08: until read; 09:
 * until written, hop_tma_store_wait_all), or the staging could be freed under the engine. `bar`: a
 * named barrier for the warpgroup.
 */
template <int BF16, int D, int REGION_STRIDE>
static __device__ __forceinline__ void hop_store_o_through_tma(const hop_attn_o_params *op, uint32_t staging,
                                                               const hop_rows<D> *r, int64_t bh, int q0,
                                                               int wg, int bar) {
    const int t = threadIdx.x & 3, g = (threadIdx.x & 31) >> 2, warp = (threadIdx.x >> 5) & 3;
    const int leader = (threadIdx.x & 127) == 0;
    if (leader) hop_tma_store_wait_read();
    hop_bar_sync(bar, 128);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float l = hop_row_sum_l(r->l[h]);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int row = 16 * warp + 8 * h + g; /* in the warpgroup's tile; row & 7 == g */
#pragma unroll
        for (int c = 0; c < D / 8; ++c) {
            const uint32_t v = pack_16x2<BF16>(r->o[4 * c + 2 * h] * inv, r->o[4 * c + 2 * h + 1] * inv);
            const uint32_t at = staging + (c >> 3) * REGION_STRIDE + row * 128 + (((c & 7) ^ g) << 4) + 4 * t;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(v) : "memory");
        }
        hop_store_lse(&op->a, bh, q0 + wg * 64 + row, r->m[h], l);
    }
    hop_fence_async_smem();
    hop_bar_sync(bar, 128);
    if (leader) {
#pragma unroll
        for (int region = 0; region < D / 64; ++region)
            hop_tma_store_3d(&op->o_map, staging + region * REGION_STRIDE, 64 * region, q0 + wg * 64,
                             (int)bh);
        hop_tma_store_commit();
    }
}

/* What setmaxnreg can give each consumer thread of a block of `threads` threads (warpgroup 0 the
 * producer, dropping to `producer` registers; the rest consumers) with `blocks` blocks per SM. Every
 * thread starts with its block's share of the SM's 65536 registers, rounded down to setmaxnreg's step
 * of 8; the consumers add what the producer's 128 threads give back, rounded down to 8 again, and
 * never more than setmaxnreg's 256. Example: 384 threads, 1 block: 168 at entry, 240 for the consumers;
 * 2 blocks: 80 and 104. */
static __host__ __device__ constexpr int hop_consumer_regs(int threads, int blocks, int producer) {
    const int entry = 65536 / blocks / threads / 8 * 8;
    const int claim = (entry + (entry - producer) * 128 / (threads - 128)) / 8 * 8;
    return claim < 256 ? claim : 256;
}

/* The thread's first query row inside the block's Q tile: warpgroup wg, warp in it, lane group g. */
static __device__ __forceinline__ int hop_thread_row(int wg) {
    return wg * 64 + (int)((threadIdx.x >> 5) & 3) * 16 + (int)((threadIdx.x & 31) >> 2);
}

/* The registry entry each Hopper stage ends with: tensor maps and scale for the problem
 * (hop_attn_setup, with the stage's Br for the head dim, its br_for(), and its Bc for the problem, its
 * keys_per_tile(D, causal, N)), then the stage's own launch<BF16, D, CAUSAL> for the problem's dtype,
 * mask and head dim. One copy here, so that a stage's file holds only its kernel and how it is
 * launched. HOP_STAGE_ENTRY is for a stage whose Bc depends on the head dim only (its bc_for());
 * a stage that chooses Bc per problem defines keys_per_tile() and ends with HOP_STAGE_ENTRY_PER_PROBLEM. */
#define HOP_STAGE_ENTRY(run_fn, id)                                                                          \
    static int keys_per_tile(int d, int, int64_t) { return bc_for(d); }                                      \
    HOP_STAGE_ENTRY_PER_PROBLEM(run_fn, id)
#define HOP_STAGE_ENTRY_PER_PROBLEM(run_fn, id)                                                              \
    template <int BF16, int CAUSAL>                                                                          \
    static attn_status launch_for_dim(int64_t D, const hop_attn_params *kp, cudaStream_t s) {                \
        switch (D) {                                                                                         \
        case 64: return launch<BF16, 64, CAUSAL>(kp, s);                                                     \
        case 128: return launch<BF16, 128, CAUSAL>(kp, s);                                                   \
        case 256: return launch<BF16, 256, CAUSAL>(kp, s);                                                   \
        }                                                                                                    \
        return attn_fail(ATTN_EUNSUPPORTED, "stage " id " supports head dim 64, 128, 256 (got %lld)",        \
                         (long long)D);                                                                      \
    }                                                                                                        \
    extern "C" attn_status run_fn(const attn_problem *pr, const attn_args *a) {                              \
        hop_attn_params kp;                                                                                  \
        attn_status st =                                                                                     \
            hop_attn_setup(&kp, pr, a, br_for((int)pr->D), keys_per_tile((int)pr->D, pr->causal, pr->N));    \
        if (st != ATTN_OK) return st;                                                                        \
        const cudaStream_t s = (cudaStream_t)a->stream;                                                      \
        if (pr->dtype == ATTN_BF16)                                                                          \
            return pr->causal ? launch_for_dim<1, 1>(pr->D, &kp, s) : launch_for_dim<1, 0>(pr->D, &kp, s);   \
        return pr->causal ? launch_for_dim<0, 1>(pr->D, &kp, s) : launch_for_dim<0, 0>(pr->D, &kp, s);       \
    }

#endif
