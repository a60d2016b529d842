/*
 * Stage 04: online softmax. One pass over the key tiles, with a running max m, a running sum l and
 * a correction factor alpha; exponentials in base 2.
 *
 * What it adds: stage 03 walked the keys twice because exp(s - m) needs the row's final max m.
 * Here each row keeps m and l as it goes, and when a tile raises the max the work done so far is
 * rescaled instead of redone. For key tile t, per row i:
 *     m_new  = max(m_i, max_j s_ij)                  (j over the tile's keys)
 *     alpha  = 2^(m_i - m_new)                       (1 if the max did not move, < 1 if it rose)
 *     P_ij   = 2^(s_ij - m_new)
 *     l_i    = alpha * l_i + sum_j P_ij
 *     O_i    = alpha * O_i + sum_j P_ij V_j
 *     m_i    = m_new
 * and O_i / l_i at the end is exactly stage 03's result: every term carries the factor
 * 2^(-m_final) once all the alphas are multiplied in.
 * Base 2: the Q tile is multiplied by scale * log2(e) when it is staged, so s_ij is already in
 * log2 units and each exponential is one MUFU.EX2 (ex2.approx.ftz). Stage 03's __expf paid an
 * FMUL by log2(e) per score on top.
 *
 * Versus stage 03: pass one is gone. K is read once instead of twice and S = Q K^T, the bigger half
 * of the arithmetic, is computed once: 4 N^2 D flops per head instead of 6, so about 1.5x faster
 * when the FFMAs dominate (larger N). The price per tile: 4 alphas and a rescale of the O
 * accumulator (16 FMULs at D = 64, next to 2048 FFMAs).
 *
 * m starts at -inf. A row whose scores are all masked so far (m_new = -inf) would give
 * alpha = 2^(-inf - (-inf)) = NaN, so the subtrahend is 0 when m_new = -inf: alpha = 2^(-inf) = 0
 * and P = 2^(-inf) = 0, and l and O stay 0. (With key 0 visible to every row this cannot happen on
 * the first tile, but the kernel does not rely on it.) A first tile far above the rest: later
 * alphas are 1 and later P underflow to 0, nothing is lost. A max that rises on every tile: alpha
 * < 1 each time, and O, l shrink together; their ratio is what is stored.
 *
 * Causal: as in 03, the mask is applied on every tile and the tiles above the diagonal are still
 * visited (their P is zero and their alpha is 1). Stage 05 skips them.
 *
 * Limits: fp16 in and out, fp32 arithmetic on CUDA cores (no tensor cores: stage 06); head dim 32,
 * 64 or 128; any N >= 1 (tails masked, never padded); no LSE (stage 06 adds it).
 * Run:    build/attn --stage 04 --batch 4 --heads 32 --seq 4096 --dim 64 --check
 */
#include "online_softmax.h"
#include "tiles.cuh"

template <int D>
__global__ void __launch_bounds__(TILE_THREADS, 2) stage04_kernel(tile_params prm) {
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

    /* One pass: each key tile updates m, l and O, rescaling what came before by alpha. */
    for (int kt = 0; kt < prm.Tc; kt++) {
        const int key0 = kt * TILE_BC;
        __syncthreads(); /* the previous tile's P V is done with Ps (= Ks) and Vs */
        tile_load_rows<D>(Ks, k_head, key0, N, 1.0f);
        tile_load_rows<D>(Vs, v_head, key0, N, 1.0f);
        __syncthreads();
        tile_scores<D>(s, Qs, Ks, ty, tx);
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

extern "C" attn_status stage04_run(const attn_problem *p, const attn_args *a) {
    return tiles_run("04", p, a, stage04_kernel<32>, stage04_kernel<64>, stage04_kernel<128>);
}
