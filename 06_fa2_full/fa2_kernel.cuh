/*
 * fa2_kernel.cuh: FlashAttention-2's Algorithm 1 for one block, built from the steps in fa2_steps.cuh,
 * and the kernel of stage 06. The road's kernels (step06a..e_*.cu) are the same block function with
 * a smaller recipe.
 *
 *   fa2_attention_block    lines 3-16 for one row tile i of one head: load Q_i, walk the key tiles,
 *                          normalise, store O_i and L_i
 *   fa2_key_tile           lines 7-10 for one key tile j: S, the online softmax, O += P V
 *
 * Causal: as in stage 05, the key tiles below the diagonal run unmasked, the tiles on it masked, the
 * tiles above it are never loaded. The loop visits j from the highest tile down, so every masked tile
 * (on the diagonal, or holding key N-1) comes first: the loop over the rest has no mask code, and only
 * the first tile visited can be the partial tail tile, so the later loads skip their row checks.
 */
#ifndef FA2_KERNEL_CUH
#define FA2_KERNEL_CUH

#include "fa2_steps.cuh"

/* Grid (Tr, min(B*H, 65535), ceil(B*H / 65535)): blocks are dispatched x first, so the row tiles of
 * a head run together (its K and V stay in L2), and B*H may exceed grid.y's 65535. Causal: each
 * head's tiles run from the last (most key tiles) to the first, so the light tiles end the grid and
 * its tail is short. Everything here is block-uniform (no division), so it lives in the uniform
 * registers of sm_75+ and costs none of the 255 per thread. Returns bh, or -1 past B*H. */
template <int CAUSAL>
static __device__ __forceinline__ int64_t fa2_block_head(const fa2_params *p, int *row_tile) {
    const int64_t bh = (int64_t)blockIdx.z * gridDim.y + blockIdx.y;
    *row_tile = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    return bh < p->heads ? bh : -1;
}

/* Lines 7-10 for key tile j (the it-th visited), in steps of Bcs keys: S = Q K_j^T, the online softmax
 * (MASK tiles only: keys >= N, or above the diagonal, set to -inf), O = diag(alpha) O + P V_j. */
template <int DTYPE, int D, int CAUSAL, int RECIPE, int MASK>
static __device__ __forceinline__ void fa2_key_tile(const fa2_params *p, const fa2_block *blk, int j, int it,
                                                    const uint32_t (*q_frag)[D / 16][4], float (*o)[D / 8][4],
                                                    float (*m)[2], float (*l)[2]) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    static_assert(T.bc % T.bcs == 0 && T.bcs % 16 == 0, "softmax steps split the key tile");
    static_assert(T.pipeline != FA2_PING_PONG || T.bcs == T.bc,
                  "the ping-pong reloads K before P V: one step");
    const int buf = T.pipeline == FA2_DOUBLE_BUFFER ? (it & 1) : 0;
    const uint32_t kbuf = fa2_k_buffer<D, RECIPE>(blk, buf), vbuf = fa2_v_buffer<D, RECIPE>(blk, buf);
    const fa2_copy cpy = fa2_copy_setup<D, RECIPE>();
    fa2_wait_k_prefetch_next<D, RECIPE, MASK>(p, blk, j, it, buf, &cpy);

    const int tid = fa2_thread_index(), lane = tid & 31, warp = tid >> 5;
    const uint32_t q_ld = blk->smem + (uint32_t)(warp * T.slices * 16 * T.row_bytes) +
                          fa2_lane_offset_a<T.row_chunks, T.swizzle>(lane);
    const uint32_t k_ld = kbuf + fa2_lane_offset_k<T.row_chunks, T.swizzle>(lane);
    const uint32_t v_ld = vbuf + fa2_lane_offset_a<T.row_chunks, T.swizzle>(lane);
    /* 06a only: this warp's P tile, after the V buffers */
    const uint32_t p_tile = fa2_v_buffer<D, RECIPE>(blk, T.kv_buffers) + (uint32_t)(warp * T.p_tile_bytes);
    const uint32_t p_ld = p_tile + fa2_lane_offset_a<T.p_row_chunks, T.swizzle>(lane);
#pragma unroll
    for (int step = 0; step < T.bc / T.bcs; ++step) {
        float s[T.slices][T.bcs / 8][4];
        uint32_t a_qk[T.slices][4], b_qk[4]; /* operand registers (see fa2_compute_s for why they are here) */
        fa2_compute_s<DTYPE, D, RECIPE>(s, q_frag, q_ld, k_ld, step, a_qk, b_qk);
        /* P as 16-bit pairs: p_frag[mi][nt][h] = row g + 8h of slice mi, keys 8nt + 2t, +1 */
        uint32_t p_frag[T.slices][T.bcs / 8][2];
        uint32_t a_pv[T.slices][4], b_pv[4];
        fa2_online_softmax<DTYPE, D, CAUSAL, RECIPE, MASK>(p, blk, s, p_frag, o, m, l,
                                                           j * T.bc + step * T.bcs, lane, warp);
        if (!T.p_in_registers) fa2_store_p<D, RECIPE>(p_frag, p_tile, lane);
        if (step == 0) fa2_wait_v<D, RECIPE>(p, blk, j, buf, &cpy);
        fa2_accumulate_pv<DTYPE, D, RECIPE>(o, p_frag, v_ld, p_ld, step, a_pv, b_pv);
    }
}

/* Where block bh's rows live, into blk; 0 when the block has none (its row tile starts past its
 * sequence's end: the grid covers the longest). The one address computation of Q, K, V and O: a
 * tensor's row 0 for this head, b * stride_b + h * stride_h (+ the sequence's first row * stride_n),
 * and its row stride; contiguous [B, H, N, D] is the case stride_h = N * D, stride_n = D.
 *   the road     contiguous, H_kv = H, N_k = N: row0 = bh * N * D, ld = D (constants fold as before)
 *   stage 06     b = bh / H, h = bh % H (one 32-bit division a block: bh < 65535^2 < 2^32); K and V
 *                of head h / (H / H_kv); with cu_seqlens, sequence b is rows cu[b] .. cu[b+1] - 1 and
 *                the LSE is [H, total_q], total_q = cu_q[B]. */
template <int D, int CAUSAL, int RECIPE>
static __device__ __forceinline__ int fa2_block_setup(const fa2_params *p, int64_t bh, int row_tile,
                                                      fa2_block *blk) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    if (!T.any_shape) {
        const int64_t head = bh * p->n * D;
        blk->head_rows = bh * p->n;
        blk->q = fa2_rows{p->q + head, D}, blk->k = fa2_rows{p->k + head, D};
        blk->v = fa2_rows{p->v + head, D}, blk->o = fa2_rows{p->o + head, D};
        blk->q0 = row_tile * T.br;
        blk->n = blk->n_k = p->n;
        blk->off = 0;
        return 1;
    }
    blk->q0 = row_tile * T.br;
    const uint32_t b = (uint32_t)bh / (uint32_t)p->h, h = (uint32_t)bh - b * (uint32_t)p->h;
    const uint32_t hk = h / (uint32_t)p->group;
    int64_t q_first = 0, k_first = 0; /* the sequence's first query row and key row */
    if (p->cu_q != NULL) {
        q_first = p->cu_q[b], k_first = p->cu_k[b];
        blk->n = p->cu_q[b + 1] - (int)q_first, blk->n_k = p->cu_k[b + 1] - (int)k_first;
        blk->head_rows = (int64_t)h * p->cu_q[p->batch] + q_first;
    } else {
        blk->n = p->n, blk->n_k = p->n_k;
        blk->head_rows = bh * p->n;
    }
    if (blk->q0 >= blk->n) return 0;
    blk->off = blk->n_k - blk->n;
    const int64_t bq = p->cu_q ? 0 : b, bk = p->cu_k ? 0 : b; /* packed sequences: no batch stride */
    blk->q = fa2_rows{p->q + bq * p->qs.b + h * p->qs.h + q_first * p->qs.n, p->qs.n};
    blk->k = fa2_rows{p->k + bk * p->ks.b + hk * p->ks.h + k_first * p->ks.n, p->ks.n};
    blk->v = fa2_rows{p->v + bk * p->vs.b + hk * p->vs.h + k_first * p->vs.n, p->vs.n};
    blk->o = fa2_rows{p->o + bq * p->os.b + h * p->os.h + q_first * p->os.n, p->os.n};
    return 1;
}

/* Lines 3-16 for one block: one row tile of one head. */
template <int DTYPE, int D, int CAUSAL, int RECIPE>
static __device__ __forceinline__ void fa2_attention_block(const fa2_params *p, uint32_t smem) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    static_assert(T.br == 16 * T.warps * T.slices, "every warp owns whole 16-row slices");
    static_assert(T.bc % 16 == 0 && D % 16 == 0, "tiles are whole mma shapes");

    int row_tile;
    const int64_t bh = fa2_block_head<CAUSAL>(p, &row_tile);
    if (bh < 0) return; /* the last grid.z slice may reach past B*H (whole block: no barrier skipped) */
    fa2_block blk;
    blk.smem = smem;
    if (!fa2_block_setup<D, CAUSAL, RECIPE>(p, bh, row_tile, &blk)) return; /* whole block, as above */
    const fa2_copy cpy = fa2_copy_setup<D, RECIPE>();

    /* causal: the keys row q0 + Br - 1 sees bound the tiles (none: no row of the block sees a key, no
     * tile is visited); tiles j < n_full are fully visible to every row of the
     * block ((j+1) Bc - 1 <= q0 + off). Tiles past N_k / Bc hold keys >= N_k. The road's off is 0: key
     * 0 is visible to every row, and its bounds keep the form they had. */
    const int n_k = blk.n_k, seen = min(blk.n, blk.q0 + T.br) + blk.off; /* keys row q0 + Br - 1 sees */
    const int n_max = (CAUSAL ? (T.any_shape ? max(seen, 0) : seen) + T.bc - 1 : n_k + T.bc - 1) / T.bc;
    const int n_full = CAUSAL ? (T.any_shape ? max(blk.q0 + blk.off + 1, 0) : blk.q0 + 1) / T.bc : n_max;
    const int n_plain = min(n_full, n_k / T.bc); /* tiles 0 .. n_plain-1 need no mask at all */

    float o[T.slices][D / 8][4], m[T.slices][2], l[T.slices][2];
    fa2_init_row_state<D, T.slices>(o, m, l); /* line 5 */
    const int j0 = n_max - 1;
    fa2_load_q_tile<D, RECIPE>(p, &blk, &cpy); /* line 4 */
    if (!T.any_shape || j0 >= 0)
        fa2_load_first_kv_tile<D, RECIPE>(p, &blk, j0, &cpy); /* line 7 for j0; Q has landed */
    else
        fa2_cp_async_wait<0>(); /* no key for any row: O = 0 and LSE = -inf, staged where Q lands */
    if (p->negate_q) fa2_negate_tile<T.br, D, RECIPE>(smem, &cpy); /* own chunks: no barrier needed before */
    __syncthreads();
    uint32_t q_frag[T.slices][D / 16][4]; /* only with Q in registers; otherwise never touched */
    if (T.q_in_registers) fa2_load_q_fragments<D, RECIPE>(q_frag, smem);

    /* lines 6-11: the masked tiles (diagonal, tail) first, then the plain ones */
    int j = j0, it = 0;
    for (; j >= n_plain; --j, ++it)
        fa2_key_tile<DTYPE, D, CAUSAL, RECIPE, 1>(p, &blk, j, it, q_frag, o, m, l);
    for (; j >= 0; --j, ++it) fa2_key_tile<DTYPE, D, CAUSAL, RECIPE, 0>(p, &blk, j, it, q_frag, o, m, l);

    const fa2_lane ln = fa2_lane_of(fa2_thread_index());
    float inv_l[T.slices][2];
    fa2_normalise_o<D, T.slices>(l, inv_l);                /* line 12 (applied in fa2_store_o) */
    fa2_store_o<DTYPE, D, RECIPE>(p, &blk, o, inv_l, &ln); /* line 14 */
    fa2_store_lse<D, RECIPE>(p, &blk, m, l, &ln);          /* lines 13 and 15 */
}

/* Stage 06: one block per (row tile, head); fa2_block_head() gives the mapping and the order. */
template <int DTYPE, int D, int CAUSAL>
__global__ void __launch_bounds__(fa2_traits_of(D, FA2_RECIPE_FINAL).threads,
                                  fa2_traits_of(D, FA2_RECIPE_FINAL).min_blocks)
    fa2_forward_kernel(const fa2_params p) {
    const uint32_t smem = (fa2_smem_address(fa2_smem) + 1023u) & ~1023u;
    fa2_attention_block<DTYPE, D, CAUSAL, FA2_RECIPE_FINAL>(&p, smem);
}

#endif
