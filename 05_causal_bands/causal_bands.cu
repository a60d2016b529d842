/*
 * Stage 05: causal bands. Under a causal mask, key tiles below the diagonal run without a mask,
 * tiles on the diagonal run with it, and tiles above it are never visited.
 *
 * What it adds: stage 04 visits all Tc key tiles for every row tile and masks j > i element by
 * element, so causal costs as much as non-causal although half of the scores are thrown away.
 * With Br = Bc = 64, row tile qt (rows q0 = 64 qt .. q0 + 63) and key tile kt (keys 64 kt ..):
 *     kt <  qt   every key <= every row: the tile is fully visible, no mask    (fast path)
 *     kt == qt   the tile straddles the diagonal: j > i masked per element   (masked path)
 *     kt >  qt   every key > every row: fully masked; the loop stops before it (never visited)
 * In general (any Br, Bc; q_last = the block's last row < N):
 *     kt_end  = q_last / Bc + 1        first tile not visited
 *     kt_full = (q0 + 1) / Bc          tiles 0 .. kt_full-1 have key0 + Bc - 1 <= q0: no mask
 * A fully visible tile needs no tail mask either: its keys are <= q0 < N. The map is below.
 * Visited: Tr (Tr + 1) / 2 of Tr^2 tiles. At N = 4096, Tr = 64: 2080 of 4096 tiles, 51%, so causal
 * should take a little over half of stage 04's causal time (the blocks are unequal: row tile 63
 * visits 64 tiles, row tile 0 one; tile_coords starts the long ones first).
 *
 * Versus stage 04: only the loop bounds and the choice of masked or unmasked tile. Non-causal runs
 * exactly stage 04's path (all Tc tiles, each through the mask, which only bites on the tail).
 *
 * Limits: fp16 in and out, fp32 arithmetic on CUDA cores (no tensor cores: stage 06); head dim 32,
 * 64 or 128; any N >= 1 (tails masked, never padded); no LSE (stage 06 adds it).
 * Run:    build/attn --stage 05 --batch 4 --heads 32 --seq 4096 --dim 64 --causal --check
 */
// clang-format off
/*
 * Key tiles visited by each row tile, causal, N = 300 (Tr = Tc = 5; the last tiles hold rows and
 * keys 256..299, the rest of them is the masked tail):
 *
 *              key tile kt:  0   1   2   3   4
 *     row tile qt = 0        M   .   .   .   .        F  below the diagonal: unmasked (fast path)
 *                   1        F   M   .   .   .        M  on the diagonal: masked, j > i -> -inf
 *                   2        F   F   M   .   .           (and keys >= N in the last tile)
 *                   3        F   F   F   M   .        .  above: never loaded, never computed
 *                   4        F   F   F   F   M
 *
 * Inside an M tile (qt == kt) row q0 + a sees keys q0 .. q0 + a: a 64 x 64 triangle.
 */
// clang-format on
#include "causal_bands.h"
#include "tiles.cuh"

template <int D>
__global__ void __launch_bounds__(TILE_THREADS, 2) stage05_kernel(tile_params prm) {
    int64_t bh;
    int qt;
    if (!tile_coords(&prm, &bh, &qt)) return;
    extern __shared__ float4 tile_smem[];
    float *Qs = reinterpret_cast<float *>(tile_smem);
    float *Ks = Qs + TILE_BR * TILE_QS(D);
    float *Ps = Ks; /* P reuses the K tile once S is in registers */
    float *Vs = Ks + TILE_KP_FLOATS(D);
    const int tx = (int)threadIdx.x % TILE_TX, ty = (int)threadIdx.x / TILE_TX;
    const int N = prm.N, q0 = qt * TILE_BR;
    const int64_t head = bh * N * D;
    const __half *k_head = prm.k + head, *v_head = prm.v + head;

    /* Q tile, times scale * log2(e), loaded once: s = (scale log2(e) q) . k, in log2 units */
    tile_load_rows<D>(Qs, prm.q + head, q0, N, prm.scale * ATTN_LOG2E);

    float m[TILE_ROWS], l[TILE_ROWS], o[TILE_ROWS][TILE_COLS(D)], s[TILE_ROWS][TILE_KEYS];
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++) {
        m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
        for (int x = 0; x < TILE_COLS(D); x++) o[r][x] = 0.0f;
    }

    /* Causal: tiles 0 .. kt_full-1 unmasked, kt_full .. kt_end-1 masked, kt_end .. Tc-1 skipped.
     * Non-causal: kt_full = 0, kt_end = Tc, every tile masked (only the tail has -inf): stage 04. */
    const int q_last = min(q0 + TILE_BR, N) - 1;
    const int kt_end = prm.causal ? q_last / TILE_BC + 1 : prm.Tc;
    const int kt_full = prm.causal ? (q0 + 1) / TILE_BC : 0;

    /* One pass: each key tile updates m, l and O, rescaling what came before by alpha. */
    for (int kt = 0; kt < kt_end; kt++) {
        const int key0 = kt * TILE_BC;
        __syncthreads(); /* the previous tile's P V is done with Ps (= Ks) and Vs */
        tile_load_rows<D>(Ks, k_head, key0, N, 1.0f);
        tile_load_rows<D>(Vs, v_head, key0, N, 1.0f);
        __syncthreads();
        tile_scores<D>(s, Qs, Ks, ty, tx);
        if (kt >= kt_full) /* block-uniform branch: on the diagonal, or the non-causal tail */
            tile_mask(s, q0, key0, N, prm.causal, ty, tx);
#pragma unroll
        for (int r = 0; r < TILE_ROWS; r++) {
            /* All 16 threads of the row get the same m_new (tile_row_max is a half-warp reduction),
             * hence the same alpha: each can rescale its own share of l and its own columns of O. */
            const float m_new = fmaxf(m[r], tile_row_max(s[r]));
            const float m_sub = m_new == -INFINITY ? 0.0f : m_new; /* no -inf - (-inf) */
            const float alpha = fast_exp2(m[r] - m_sub);
            float rowsum = 0.0f;
#pragma unroll
            for (int c = 0; c < TILE_KEYS; c++) {
                s[r][c] = fast_exp2(s[r][c] - m_sub);
                rowsum += s[r][c];
            }
#pragma unroll
            for (int x = 0; x < TILE_COLS(D); x++) o[r][x] *= alpha;
            l[r] = alpha * l[r] + rowsum; /* this thread's share; tile_store_o adds the 16 shares */
            m[r] = m_new;
        }
        __syncthreads(); /* every warp has finished reading Ks before P overwrites it */
        tile_store_p(Ps, s, ty, tx);
        __syncthreads();
        tile_pv<D>(o, Ps, Vs, ty, tx);
    }

    tile_store_o<D>(prm.o + head, o, l, q0, N, ty, tx);
}

extern "C" attn_status stage05_run(const attn_problem *p, const attn_args *a) {
    return tiles_run("05", p, a, stage05_kernel<32>, stage05_kernel<64>, stage05_kernel<128>);
}
