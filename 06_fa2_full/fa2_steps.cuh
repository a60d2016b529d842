/*
 * fa2_steps.cuh: the lines of FlashAttention-2's Algorithm 1 (forward pass) as device functions, one
 * per line of the paper, for one block (row tile i) and one warp's share of its rows:
 *
 *    4   load Q_i into shared memory                       fa2_load_q_tile
 *    5   O = 0, l = 0, m = -inf                             fa2_init_row_state
 *    7   load K_j, V_j into shared memory                   fa2_load_first_kv_tile, fa2_wait_k_prefetch_next,
 *                                                           fa2_wait_v (the pipeline splits the line)
 *    8   S = Q_i K_j^T                                      fa2_compute_s
 *    9   m_new = max(m, rowmax S), P = exp(S - m_new),      fa2_online_softmax (fa2_masked_row_max,
 *        l = e^(m - m_new) l + rowsum P                     fa2_exponentiate_row)
 *   10   O = diag(e^(m - m_new)) O + P V_j                  fa2_rescale_o_row, fa2_accumulate_pv
 *   12   O = diag(l)^-1 O                                   fa2_normalise_o
 *   13   L = m + log l                                      fa2_store_lse (with line 15)
 *   14   write O_i                                          fa2_store_o
 *   15   write L_i                                          fa2_store_lse
 *
 * Lines 3, 6, 11 and 16 (the loops) are in fa2_kernel.cuh. Every function takes the kernel's recipe
 * (fa2_traits.cuh) as a template parameter and reads its variant from fa2_traits_of(D, RECIPE).
 *
 * Fragments (mma.m16n8k16, lane = 4g + t: g = lane >> 2 the group, t = lane & 3 the thread in the quad).
 * ldmatrix.x4: per matrix every lane receives the two halves (row g, cols 2t, 2t+1), the A/C layout;
 * with .trans it receives (rows 2t, 2t+1; col g), the B layout. The matrices are ordered so that each
 * mma's B pair (b0, b1) comes out in two consecutive registers: an HMMA operand is a register pair,
 * any other order costs 2 MOVs per mma.
 */
// clang-format off
/*
 *   A 16x16 (Q or P), 4 regs         B 16x8 (K^T or V), 2 regs      C 16x8 fp32 (S or O), 4 floats
 *            k: 0..7       8..15            n: 0..7                        n: 0..7
 *   row g    a0 (2t,2t+1)  a2        k 2t,2t+1    b0 (col g)       row g    c0 c1 (cols 2t, 2t+1)
 *   row g+8  a1            a3        k 2t+8,2t+9  b1 (col g)       row g+8  c2 c3
 *
 *   P reuse: S n-tiles 2kk and 2kk+1 (keys 16kk .. 16kk+15), fp32 -> 16-bit pairs:
 *     a0 = pack(S[2kk].c0, S[2kk].c1)      a2 = pack(S[2kk+1].c0, S[2kk+1].c1)
 *     a1 = pack(S[2kk].c2, S[2kk].c3)      a3 = pack(S[2kk+1].c2, S[2kk+1].c3)
 *   C of two adjacent n8 tiles IS A of one k16 slice: no shuffle, no shared memory.
 *
 *   operand               matrix 0          matrix 1          matrix 2          matrix 3
 *   Q  (A, 16 rows)       rows 0-7,  k 0-7  rows 8-15, k 0-7  rows 0-7, k 8-15  rows 8-15, k 8-15
 *                         -> a0             -> a1             -> a2             -> a3
 *                         lane address: row = lane & 15, chunk = lane >> 4
 *   K  (B, 16 keys)       keys 0-7,  d 0-7  keys 0-7, d 8-15  keys 8-15, d 0-7  keys 8-15, d 8-15
 *                         -> b0 n-tile 0    -> b1 n-tile 0    -> b0 n-tile 1    -> b1 n-tile 1
 *                         lane address: row = (lane & 7) + 8 (lane >> 4), chunk = (lane >> 3) & 1
 *   V  (B .trans, k=keys) keys 0-7,  d 0-7  keys 8-15, d 0-7  keys 0-7, d 8-15  keys 8-15, d 8-15
 *                         -> b0 d-tile 0    -> b1 d-tile 0    -> b0 d-tile 1    -> b1 d-tile 1
 *                         lane address: as Q
 *
 * ---- warp / row split (Br = 128, 4 warps, 2 slices of 16 rows each) ------------------------------------
 *   Q tile rows   0..15   16..31  | 32..47   48..63  | 64..79   80..95  | 96..111  112..127
 *   owner         warp 0 (mi=0,1) | warp 1           | warp 2           | warp 3
 *   In a 16-row slice lane 4g+t holds rows g and g+8, columns 2t, 2t+1 of every n8 tile: a row's
 *   max and sum are finished by two __shfl_xor_sync (1, 2) inside the quad, and l is kept as a
 *   per-lane partial sum until the end.
 */
// clang-format on
#ifndef FA2_STEPS_CUH
#define FA2_STEPS_CUH

#include <math.h>

#include "fa2_internal.h"
#include "fa2_smem.cuh"

/* One tensor as a block sees it: row r of its head at row0 + r * ld, the row's D elements contiguous.
 * The one address computation of Q, K, V and O (fa2_block_setup, fa2_kernel.cuh): contiguous,
 * [B, N, H, D], a grouped K/V head or a packed sequence differ in row0 and ld only. The road's ld is
 * the constant D, which the compiler folds as before. */
typedef struct {
    const uint16_t *row0;
    int ld;
} fa2_rows;

/* The block-uniform state of one row tile (per-lane values are recomputed where they are used, see
 * fa2_thread_index). The scale is read from the kernel parameters. */
typedef struct {
    uint32_t smem;       /* 1024-aligned smem base: the Q tile, then the K buffers, then the V buffers */
    int64_t head_rows;   /* row offset of this head in LSE: bh * N (packed sequences: h total_q + start) */
    fa2_rows q, k, v, o; /* this head's rows (o's row0 is written through: fa2_store_o) */
    int n, n_k;          /* this head's queries and keys (N, N_k, or its sequence's lengths) */
    int off;             /* causal: query i sees keys 0 .. i + off, off = n_k - n (the bottom right) */
    int q0;              /* first query row of the tile */
} fa2_block;

/* Where a thread sits: its warp and lane, and in the mma fragments its group g = lane / 4 (rows g and
 * g + 8) and its place in the quad t = lane % 4 (columns 2t, 2t + 1); see fa2_layout.h. */
typedef struct {
    int warp, lane, g, t;
} fa2_lane;

static __device__ __forceinline__ fa2_lane fa2_lane_of(int tid) {
    fa2_lane x;
    x.warp = tid >> 5;
    x.lane = tid & 31;
    x.g = x.lane >> 2;
    x.t = x.lane & 3;
    return x;
}

/* smem address of K buffer b and V buffer b */
template <int D, int RECIPE>
static __device__ __forceinline__ uint32_t fa2_k_buffer(const fa2_block *blk, int b) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    return blk->smem + T.br * T.row_bytes + (uint32_t)(b * T.bc * T.row_bytes);
}
template <int D, int RECIPE>
static __device__ __forceinline__ uint32_t fa2_v_buffer(const fa2_block *blk, int b) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    return blk->smem + T.br * T.row_bytes + T.kv_buffers * T.bc * T.row_bytes +
           (uint32_t)(b * T.bc * T.row_bytes);
}

/* ---- line 4: Q_i -> shared memory (rows >= N as zeros) ---------------------------------------------- */
template <int D, int RECIPE>
static __device__ __forceinline__ void fa2_load_q_tile(const fa2_params *p, const fa2_block *blk,
                                                       const fa2_copy *cpy) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    fa2_copy_tile<T.br, D, RECIPE, 1>(blk->smem,
                                      blk->q.row0 + fa2_rows_offset<D, RECIPE>(blk->q0, 1, blk->q.ld),
                                      blk->q.ld, blk->n - blk->q0, cpy);
    fa2_cp_async_commit();
}

/* ---- line 5: O = 0, l = 0, m = -inf for this lane's rows ---------------------------------------------- */
template <int D, int SLICES>
static __device__ __forceinline__ void fa2_init_row_state(float (*o)[D / 8][4], float (*m)[2],
                                                          float (*l)[2]) {
#pragma unroll
    for (int mi = 0; mi < SLICES; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            m[mi][h] = -INFINITY;
            l[mi][h] = 0.f;
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt) {
                o[mi][dt][2 * h] = 0.f;
                o[mi][dt][2 * h + 1] = 0.f;
            }
        }
}

/* Q fragments into registers once (FA2_Q_IN_REGISTERS), instead of one ldmatrix per slice and key tile */
template <int D, int RECIPE>
static __device__ __forceinline__ void fa2_load_q_fragments(uint32_t (*q_frag)[D / 16][4], uint32_t smem) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    const int lane = fa2_thread_index() & 31, warp = fa2_thread_index() >> 5;
    const uint32_t q_ld = smem + (uint32_t)(warp * T.slices * 16 * T.row_bytes) +
                          fa2_lane_offset_a<T.row_chunks, T.swizzle>(lane);
#pragma unroll
    for (int mi = 0; mi < T.slices; ++mi)
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
            fa2_ldmatrix_x4(q_frag[mi][kk],
                            fa2_at_chunk_pair<T.swizzle>(q_ld, kk) + (uint32_t)(mi * 16 * T.row_bytes));
}

/* ---- line 7, in three parts: the pipeline decides when K_j and V_j are loaded and waited for ---------
 * The first key tile visited (j0 = the highest, on the diagonal or holding key N-1) starts with Q; then
 * the group count says what has landed: cp.async.wait_group n leaves at most n groups in flight. */
template <int D, int RECIPE>
static __device__ __forceinline__ void fa2_load_first_kv_tile(const fa2_params *p, const fa2_block *blk,
                                                              int j0, const fa2_copy *cpy) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    const uint32_t sk = fa2_k_buffer<D, RECIPE>(blk, 0), sv = fa2_v_buffer<D, RECIPE>(blk, 0);
    const uint16_t *k = blk->k.row0 + fa2_rows_offset<D, RECIPE>(j0, T.bc, blk->k.ld),
                   *v = blk->v.row0 + fa2_rows_offset<D, RECIPE>(j0, T.bc, blk->v.ld);
    const int rows = blk->n_k - j0 * T.bc;
    if (T.pipeline == FA2_PING_PONG) {
        fa2_copy_tile<T.bc, D, RECIPE, 1>(sk, k, blk->k.ld, rows, cpy);
        fa2_cp_async_commit();
        fa2_cp_async_wait<1>(); /* Q landed, K_j0 may pend */
    } else if (T.pipeline == FA2_LOAD_THEN_COMPUTE) {
        fa2_copy_tile<T.bc, D, RECIPE, 1>(sk, k, blk->k.ld, rows, cpy);
        fa2_copy_tile<T.bc, D, RECIPE, 1>(sv, v, blk->v.ld, rows, cpy);
        fa2_cp_async_commit();
        fa2_cp_async_wait<0>(); /* load, wait, compute: no overlap at all */
    } else {
        fa2_copy_tile<T.bc, D, RECIPE, 1>(sk, k, blk->k.ld, rows, cpy);
        fa2_cp_async_commit();
        fa2_copy_tile<T.bc, D, RECIPE, 1>(sv, v, blk->v.ld, rows, cpy);
        fa2_cp_async_commit();
        fa2_cp_async_wait<2>(); /* Q landed, K_j0 and V_j0 may pend */
    }
}

/* Top of key tile j (the it-th visited): K_j is ready after this, V_j may still be in flight, and the
 * next tile's loads are started where the pipeline allows. Only the tile holding key N-1 can be
 * partial, and it is a MASK tile: the row checks of the copy are compiled into the MASK loop only. */
template <int D, int RECIPE, int MASK>
static __device__ __forceinline__ void fa2_wait_k_prefetch_next(const fa2_params *p, const fa2_block *blk,
                                                                int j, int it, int buf, const fa2_copy *cpy) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    const uint16_t *gk = blk->k.row0, *gv = blk->v.row0;
    const int kld = blk->k.ld, vld = blk->v.ld;
    const uint32_t kbuf = fa2_k_buffer<D, RECIPE>(blk, buf), vbuf = fa2_v_buffer<D, RECIPE>(blk, buf);
    if (T.pipeline == FA2_LOAD_THEN_COMPUTE) {
        if (it > 0) {
            /* the prologue loaded the first tile; every warp is done with the previous K and V */
            __syncthreads();
            fa2_copy_tile<T.bc, D, RECIPE, MASK>(kbuf, gk + (int64_t)j * T.bc * kld, kld, blk->n_k - j * T.bc,
                                                 cpy);
            fa2_copy_tile<T.bc, D, RECIPE, MASK>(vbuf, gv + (int64_t)j * T.bc * vld, vld, blk->n_k - j * T.bc,
                                                 cpy);
            fa2_cp_async_commit();
            fa2_cp_async_wait<0>();
            __syncthreads();
        }
    } else if (T.pipeline == FA2_PING_PONG) {
        fa2_cp_async_wait<0>(); /* K_j (issued before the previous P V) */
        __syncthreads();        /* K_j visible; every warp is done with V_{j+1}: V buffer free */
        fa2_copy_tile<T.bc, D, RECIPE, MASK>(vbuf, gv + (int64_t)j * T.bc * vld, vld, blk->n_k - j * T.bc,
                                             cpy);
        fa2_cp_async_commit();
    } else {
        fa2_cp_async_wait<1>(); /* in flight: K_j, V_j -> K_j done, V_j may pend */
        __syncthreads();        /* K_j visible; every warp is done with tile j+1: the other buffers free */
        if (j > 0) { /* tile j-1 < Tc-1 is whole: only the first tile visited can be the tail one */
            fa2_copy_tile<T.bc, D, RECIPE, 0>(fa2_k_buffer<D, RECIPE>(blk, buf ^ 1),
                                              gk + (int64_t)(j - 1) * T.bc * kld, kld, T.bc, cpy);
            fa2_cp_async_commit();
            fa2_copy_tile<T.bc, D, RECIPE, 0>(fa2_v_buffer<D, RECIPE>(blk, buf ^ 1),
                                              gv + (int64_t)(j - 1) * T.bc * vld, vld, T.bc, cpy);
            fa2_cp_async_commit();
        }
    }
}

/* Before the first P V of tile j: V_j has landed and is visible (the ping-pong also starts K_{j-1}). */
template <int D, int RECIPE>
static __device__ __forceinline__ void fa2_wait_v(const fa2_params *p, const fa2_block *blk, int j, int buf,
                                                  const fa2_copy *cpy) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    if (T.pipeline == FA2_PING_PONG) {
        fa2_cp_async_wait<0>();
        __syncthreads(); /* V_j visible; every warp is done with K_j: the K buffer is free */
        if (j > 0) {
            fa2_copy_tile<T.bc, D, RECIPE, 0>(fa2_k_buffer<D, RECIPE>(blk, buf),
                                              blk->k.row0 + (int64_t)(j - 1) * T.bc * blk->k.ld, blk->k.ld,
                                              T.bc, cpy);
            fa2_cp_async_commit();
        }
    } else if (T.pipeline == FA2_DOUBLE_BUFFER) {
        if (j > 0)
            fa2_cp_async_wait<2>(); /* in flight: V_j, K_{j-1}, V_{j-1} -> V_j done */
        else
            fa2_cp_async_wait<0>();
        __syncthreads();
    }
}

/* ---- line 8: S = Q K_j^T for keys step * Bcs .. of this tile ------------------------------------------
 * Per 16-wide slice of D: the A fragments of the warp's slices x Bcs/16 ldmatrix of K x 2 mma each.
 * Unrolled two slices at a time when Q comes from smem: ptxas then hoists the ldmatrix of the next
 * slice over the mma of the current one (latency hidden) but cannot hoist all 8 slices' loads to the
 * top, which with 192 accumulator registers (O + S) live pushes it past 255 and into spills. With Q in
 * registers the loop unrolls fully (q_frag is indexed by kk).
 * a (one A fragment per slice) and b (two B fragments) are operand registers the caller declares: in
 * fa2_key_tile they stand after S and before P, in the order the compiler then allocates them (declared
 * here, inlining hoists them ahead of S, and ptxas allocates D = 96 and 128 differently: 48 to 81 of
 * about 3000 SASS instructions change; declared there, the kernel is the one measured before). */
template <int DTYPE, int D, int RECIPE>
static __device__ __forceinline__ void fa2_compute_s(float (*s)[fa2_traits_of(D, RECIPE).bcs / 8][4],
                                                     const uint32_t (*q_frag)[D / 16][4], uint32_t q_ld,
                                                     uint32_t k_ld, int step, uint32_t (*a)[4], uint32_t *b) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    constexpr int UNROLL = T.q_in_registers ? D / 16 : 2;
#pragma unroll
    for (int mi = 0; mi < T.slices; ++mi)
#pragma unroll
        for (int nt = 0; nt < T.bcs / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mi][nt][e] = 0.f;
#pragma unroll(UNROLL)
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int mi = 0; mi < T.slices; ++mi) {
            if (T.q_in_registers) {
#pragma unroll
                for (int e = 0; e < 4; ++e) a[mi][e] = q_frag[mi][kk][e];
            } else {
                fa2_ldmatrix_x4(a[mi],
                                fa2_at_chunk_pair<T.swizzle>(q_ld, kk) + (uint32_t)(mi * 16 * T.row_bytes));
            }
        }
        const uint32_t kaddr =
            fa2_at_chunk_pair<T.swizzle>(k_ld, kk) + (uint32_t)(step * T.bcs * T.row_bytes);
#pragma unroll
        for (int nb = 0; nb < T.bcs / 16; ++nb) {
            fa2_ldmatrix_x4(b, kaddr + (uint32_t)(nb * 16 * T.row_bytes));
#pragma unroll
            for (int mi = 0; mi < T.slices; ++mi) {
                fa2_mma_16x8x16<DTYPE>(s[mi][2 * nb], a[mi], b[0], b[1]);
                fa2_mma_16x8x16<DTYPE>(s[mi][2 * nb + 1], a[mi], b[2], b[3]);
            }
        }
    }
}

/* ---- line 9: the online softmax, base 2 ----------------------------------------------------------------
 * x = s * scale * log2(e), p = 2^(x - m2), m2 = m * scale * log2(e). m is kept on raw scores:
 * scale * log2(e) > 0 here (the host flips the sign of Q for a negative scale and raises 0 to FLT_MIN),
 * so the max of s is the max of x, and a masked score set to -inf (MASK tiles only: key >= N, or key >
 * query when causal) gives p = 2^(-inf * scale * log2(e) - m2) = 2^-inf = 0 with no second select. */

/* The max of m and this lane's scores of row (mi, h) after masking; keys kbase + 8nt + e with
 * 8nt + e >= visible become -inf. The quad's shuffles finish it. */
template <int NT, int MASK>
static __device__ __forceinline__ float fa2_masked_row_max(float (*s_mi)[4], int h, float m, int visible) {
    float mx = m;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            if (MASK && nt * 8 + e >= visible) s_mi[nt][2 * h + e] = -INFINITY;
            mx = fmaxf(mx, s_mi[nt][2 * h + e]);
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    return mx;
}

/* P = 2^(s * scale_log2 - m_scaled) for row (mi, h), packed to 16-bit pairs p_mi[nt][h] (keys 8nt + 2t,
 * +1); returns this lane's share of rowsum P. */
template <int DTYPE, int NT>
static __device__ __forceinline__ float fa2_exponentiate_row(float (*s_mi)[4], uint32_t (*p_mi)[2], int h,
                                                             float scale_log2, float m_scaled) {
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const float p0 = fast_exp2(fmaf(s_mi[nt][2 * h], scale_log2, -m_scaled));
        const float p1 = fast_exp2(fmaf(s_mi[nt][2 * h + 1], scale_log2, -m_scaled));
        sum0 += p0;
        sum1 += p1;
        p_mi[nt][h] = pack_16x2<DTYPE>(p0, p1);
    }
    return sum0 + sum1;
}

/* line 10, first half: O = diag(alpha) O for row (mi, h) */
template <int D>
static __device__ __forceinline__ void fa2_rescale_o_row(float (*o_mi)[4], int h, float alpha) {
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
        o_mi[dt][2 * h] *= alpha;
        o_mi[dt][2 * h + 1] *= alpha;
    }
}

/* Line 9 for every row of this lane, with the rescale of line 10. key0 = the first key of the step. */
template <int DTYPE, int D, int CAUSAL, int RECIPE, int MASK>
static __device__ __forceinline__ void
fa2_online_softmax(const fa2_params *p, const fa2_block *blk, float (*s)[fa2_traits_of(D, RECIPE).bcs / 8][4],
                   uint32_t (*p_frag)[fa2_traits_of(D, RECIPE).bcs / 8][2], float (*o)[D / 8][4],
                   float (*m)[2], float (*l)[2], int key0, int lane, int warp) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    const float scale_log2 = p->scale_log2;
    const int kbase = key0 + fa2_fragment_col(lane, 0);
#pragma unroll
    for (int mi = 0; mi < T.slices; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            /* keys < lim are visible to this row (lim = N_k, or min(N_k, query + 1 + N_k - N) when
             * causal: the bottom-right diagonal; lim <= 0 for a row that sees no key) */
            const int qi = blk->q0 + (warp * T.slices + mi) * 16 + fa2_fragment_row(lane, h);
            const int visible = MASK ? (CAUSAL ? min(blk->n_k, qi + 1 + blk->off) : blk->n_k) - kbase : 0;
            const float mx = fa2_masked_row_max<T.bcs / 8, MASK>(s[mi], h, m[mi][h], visible);
            /* a row with no visible key so far has mx = -inf: use 0 as the reference so that x - m never
             * becomes -inf - (-inf) = NaN; its p are all 0 anyway. alpha = 2^(m_old - m_new) in base-2
             * units; m_old = -inf gives 2^-inf = 0 (O and l are 0). */
            const float m_scaled = (mx == -INFINITY ? 0.f : mx) * scale_log2;
            const float alpha = fast_exp2(fmaf(m[mi][h], scale_log2, -m_scaled));
            m[mi][h] = mx;
            const float rowsum =
                fa2_exponentiate_row<DTYPE, T.bcs / 8>(s[mi], p_frag[mi], h, scale_log2, m_scaled);
            /* l stays a per-lane partial sum (alpha is the same in the whole quad): reduced at the end */
            l[mi][h] = l[mi][h] * alpha + rowsum;
            fa2_rescale_o_row<D>(o[mi], h, alpha);
        }
    }
}

/* ---- line 10: O += P V_j ------------------------------------------------------------------------------- */

/* The A operand of P V for keys 16kk .. 16kk+15, straight from the S accumulators (FA2_P_IN_REGISTERS):
 * the C fragments of n-tiles 2kk and 2kk+1 are exactly the A fragment (the map above). */
static __device__ __forceinline__ void fa2_p_as_a_operand(uint32_t a[4], const uint32_t (*p_mi)[2], int kk) {
    a[0] = p_mi[2 * kk][0];
    a[1] = p_mi[2 * kk][1];
    a[2] = p_mi[2 * kk + 1][0];
    a[3] = p_mi[2 * kk + 1][1];
}

/* Without FA2_P_IN_REGISTERS (06a, as stage 05 did): each warp writes its P to its own smem tile and
 * reads it back with ldmatrix in the A layout. Only this warp touches the tile: __syncwarp suffices. */
template <int D, int RECIPE>
static __device__ __forceinline__ void
fa2_store_p(const uint32_t (*p_frag)[fa2_traits_of(D, RECIPE).bcs / 8][2], uint32_t p_tile, int lane) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    __syncwarp(); /* every lane has read the previous P */
#pragma unroll
    for (int mi = 0; mi < T.slices; ++mi)
#pragma unroll
        for (int nt = 0; nt < T.bcs / 8; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = mi * 16 + fa2_fragment_row(lane, h);
                fa2_st_shared_4(p_tile + (uint32_t)FA2_CHUNK_OFFSET(T.p_row_chunks, T.swizzle, row, nt) +
                                    4 * (lane & 3),
                                p_frag[mi][nt][h]);
            }
    __syncwarp(); /* P visible to the whole warp */
}

/* O += P V for keys step * Bcs .. of this tile: per 16-key slice, A = P, B = V by ldmatrix.trans.
 * a and b: operand registers, as in fa2_compute_s. */
template <int DTYPE, int D, int RECIPE>
static __device__ __forceinline__ void
fa2_accumulate_pv(float (*o)[D / 8][4], const uint32_t (*p_frag)[fa2_traits_of(D, RECIPE).bcs / 8][2],
                  uint32_t v_ld, uint32_t p_ld, int step, uint32_t (*a)[4], uint32_t *b) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
#pragma unroll
    for (int kk = 0; kk < T.bcs / 16; ++kk) {
#pragma unroll
        for (int mi = 0; mi < T.slices; ++mi) {
            if (T.p_in_registers)
                fa2_p_as_a_operand(a[mi], p_frag[mi], kk);
            else
                fa2_ldmatrix_x4(a[mi],
                                fa2_at_chunk_pair<T.swizzle>(p_ld, kk) + (uint32_t)(mi * 16 * T.bcs * 2));
        }
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
            fa2_ldmatrix_x4_trans(b, fa2_at_chunk_pair<T.swizzle>(v_ld, dn) +
                                         (uint32_t)((step * T.bcs + kk * 16) * T.row_bytes));
#pragma unroll
            for (int mi = 0; mi < T.slices; ++mi) {
                fa2_mma_16x8x16<DTYPE>(o[mi][2 * dn], a[mi], b[0], b[1]);
                fa2_mma_16x8x16<DTYPE>(o[mi][2 * dn + 1], a[mi], b[2], b[3]);
            }
        }
    }
}

/* ---- line 12: O = diag(l)^-1 O ------------------------------------------------------------------------
 * l is finished over the quad first (each lane summed its own columns; the sum stays in l for the LSE),
 * then inv_l = 1 / l. fa2_store_o multiplies each element of O by it as it rounds it to 16 bits, so
 * the division costs no pass of its own over the D / 2 accumulators per row. */
template <int D, int SLICES>
static __device__ __forceinline__ void fa2_normalise_o(float (*l)[2], float (*inv_l)[2]) {
#pragma unroll
    for (int mi = 0; mi < SLICES; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float x = l[mi][h];
            x += __shfl_xor_sync(0xffffffffu, x, 1);
            x += __shfl_xor_sync(0xffffffffu, x, 2);
            l[mi][h] = x;
            inv_l[mi][h] = x > 0.f ? 1.f / x : 0.f; /* 0: a row that sees no key (causal, N > N_k) */
        }
}

/* ---- line 14: O_i -> global memory, through this warp's own Q rows in smem ------------------------------
 * The fragments go to smem as 16-bit pairs, then come back as 16-byte chunks, C lanes per row (D = 96:
 * 16, lanes 12..15 idle), for coalesced 16-byte stores. Rows >= N are never written. */
template <int DTYPE, int D, int RECIPE>
static __device__ __forceinline__ void fa2_store_o(const fa2_params *p, const fa2_block *blk,
                                                   float (*o)[D / 8][4], float (*inv_l)[2],
                                                   const fa2_lane *ln) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    constexpr int CHUNKS = fa2_copy_chunks(D), ROWS_PER_STEP = 32 / CHUNKS;
    const int warp = ln->warp, lane = ln->lane, g = ln->g, t = ln->t;
    __syncwarp(); /* this warp's last reads of its Q rows are done before they are overwritten */
    const uint32_t o_st = blk->smem + (uint32_t)((warp * T.slices * 16 + g) * T.row_bytes +
                                                 (fa2_swizzle_xor(T.row_chunks, T.swizzle, g) << 4) + 4 * t);
#pragma unroll
    for (int mi = 0; mi < T.slices; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt)
                fa2_st_shared_4(
                    fa2_at_chunk<T.swizzle>(o_st, dt) + (uint32_t)((mi * 16 + 8 * h) * T.row_bytes),
                    pack_16x2<DTYPE>(o[mi][dt][2 * h] * inv_l[mi][h], o[mi][dt][2 * h + 1] * inv_l[mi][h]));
    __syncwarp();

    const int cc = lane % CHUNKS, row0 = warp * T.slices * 16 + lane / CHUNKS, ld = blk->o.ld;
    /* the road's contiguous O keeps the expression and the store it was measured with: from o.row0 the
     * compiler loses the alignment of a uint4 store and splits it into four (fa2_st_global_16) */
    uint16_t *go = T.any_shape
                       ? (uint16_t *)blk->o.row0 + fa2_rows_offset<D, RECIPE>(blk->q0 + row0, 1, ld) + cc * 8
                       : p->o + (blk->head_rows + blk->q0 + row0) * D + cc * 8;
    if (D / 8 == CHUNKS || cc < D / 8) {
#pragma unroll
        for (int i = 0; i < T.slices * 16 / ROWS_PER_STEP; ++i) {
            const int row = row0 + i * ROWS_PER_STEP;
            uint32_t x[4];
            fa2_ld_shared_16(x, blk->smem + (uint32_t)FA2_CHUNK_OFFSET(T.row_chunks, T.swizzle, row, cc));
            if (blk->q0 + row < blk->n && T.any_shape) {
                fa2_st_global_16(go + fa2_rows_offset<D, RECIPE>(i, ROWS_PER_STEP, ld),
                                 x);             /* strides: multiples of 8 */
            } else if (blk->q0 + row < blk->n) { /* the road */
                uint4 v4;
                v4.x = x[0];
                v4.y = x[1];
                v4.z = x[2];
                v4.w = x[3];
                *(uint4 *)(go + (int64_t)i * ROWS_PER_STEP * D) = v4;
            }
        }
    }
}

/* ---- lines 13 and 15: L_i = m + log l, natural log, -> global memory ------------------------------------
 * l = sum_j 2^(x_j - m2) with x_j = s_j * scale * log2(e) and m2 = m * scale * log2(e), so
 * sum_j e^(scale s_j) = sum_j 2^(x_j) = 2^m2 * l and LSE = m2 * ln 2 + ln l. One lane per quad writes. */
template <int D, int RECIPE>
static __device__ __forceinline__ void fa2_store_lse(const fa2_params *p, const fa2_block *blk, float (*m)[2],
                                                     float (*l)[2], const fa2_lane *ln) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    if (p->lse != NULL && ln->t == 0) {
#pragma unroll
        for (int mi = 0; mi < T.slices; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = (ln->warp * T.slices + mi) * 16 + ln->g + 8 * h; /* row inside the tile */
                if (blk->q0 + r < blk->n)
                    p->lse[blk->head_rows + blk->q0 + r] =
                        l[mi][h] > 0.f ? m[mi][h] * p->scale_log2 * ATTN_LN2 + logf(l[mi][h]) : -INFINITY;
            }
    }
}

#endif
