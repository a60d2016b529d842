/*
 * Stage 04m: stage 04's online softmax as plain C on the CPU (a model of online_softmax.cu).
 *
 * What it models: one pass over the key tiles, with a running max m, a running sum l and a
 * correction factor alpha; exponentials in base 2. For key tile t, per row i:
 *     m_new  = max(m_i, max_j s_ij)                  (j over the tile's keys)
 *     alpha  = 2^(m_i - m_new)                       (1 if the max did not move, < 1 if it rose)
 *     P_ij   = 2^(s_ij - m_new)
 *     l_i    = alpha * l_i + sum_j P_ij
 *     O_i    = alpha * O_i + sum_j P_ij V_j
 *     m_i    = m_new
 * and O_i / l_i at the end. The Q tile is multiplied by scale * log2(e) when it is staged, so s_ij
 * is already in log2 units and each exponential is one exp2f (one ex2 on the GPU).
 *
 * Versus tiled_cpu.c: pass one is gone; the loop body gets m_new, alpha and the rescale of O and l;
 * expf becomes exp2f and Q is scaled by scale * log2(e). Versus online_softmax.cu: the same loop
 * and equations, a row in one loop instead of 16 threads.
 * m starts at -inf; a row whose scores are all masked so far (m_new = -inf) would give alpha =
 * 2^(-inf - (-inf)) = NaN, so the subtrahend is 0 then: alpha = 0, P = 0, l and O stay 0.
 * Causal: as in 03m, every tile is masked and the tiles above the diagonal are still visited.
 *
 * Limits: fp16, head dim 32, 64 or 128 (those of stage 04); any N >= 1; no LSE.
 * Run:    build/attn --stage 04m --batch 1 --heads 4 --seq 512 --dim 64 --check
 *         (build/nocuda/attn after make NO_CUDA=1, or where make finds no nvcc)
 */
#include "online_softmax.h"
#include "tiles_cpu.h"

#define ID "04m"  /* this model's registry id */
#define BR 64     /* Br: query rows per row tile, TILE_BR of tiles.cuh */
#define BC 64     /* Bc: keys per key tile, TILE_BC */

static void stage04c_row_tile(const cpu_tile_params *prm, int qt, cpu_tile_scratch *w) {
    const int N = prm->N, D = prm->D, q0 = qt * BR;
    float *S = w->S, *O = w->O, *m = w->m, *l = w->l;

    /* Q tile, times scale * log2(e), loaded once: s = (scale log2(e) q) . k, in log2 units */
    cpu_tile_load_rows(w->Qs, prm->q, q0, BR, N, D, prm->scale * ATTN_LOG2E, prm->dtype);
    for (int r = 0; r < BR; r++) m[r] = -INFINITY, l[r] = 0.0f;
    memset(O, 0, (size_t)BR * D * sizeof(float));

    /* One pass: each key tile updates m, l and O, rescaling what came before by alpha. */
    for (int kt = 0; kt < prm->Tc; kt++) {
        const int key0 = kt * BC;
        cpu_tile_load_keys(w->Kt, prm->k, key0, BC, N, D, prm->dtype);
        cpu_tile_load_rows(w->Vs, prm->v, key0, BC, N, D, 1.0f, prm->dtype);
        cpu_tile_scores(S, w->Qs, BR, w->Kt, BC, 0, BC, D);
        cpu_tile_mask(S, BR, BC, q0, key0, N, prm->causal);
        for (int r = 0; r < BR; r++) {
            float *s = S + r * BC;
            const float m_new = fmaxf(m[r], cpu_tile_row_max(s, BC));
            const float m_sub = m_new == -INFINITY ? 0.0f : m_new; /* no -inf - (-inf) */
            const float alpha = exp2f(m[r] - m_sub);
            cpu_trace_alpha(prm, w, q0 + r, alpha);
            float rowsum = 0.0f;
            for (int c = 0; c < BC; c++) {
                s[c] = exp2f(s[c] - m_sub);
                rowsum += s[c];
            }
            for (int x = 0; x < D; x++) O[r * D + x] *= alpha;
            l[r] = alpha * l[r] + rowsum;
            m[r] = m_new;
        }
        cpu_tile_pv(O, S, BR, BC, w->Vs, 0, D);
        cpu_trace_tile(prm, w, q0, BR, m, l, O, key0, BC, ATTN_LN2); /* --trace-row */
    }

    cpu_tile_store_o(prm->o, O, l, q0, BR, N, D, prm->dtype);
}

attn_status stage04m_run(const attn_problem *p, const attn_args *a) {
    const attn_status st = cpu_tiles_check_f16_d32_to_128(ID, p);
    if (st != ATTN_OK) return st;
    return cpu_tiles_run(ID, p, a, BR, BC, stage04c_row_tile);
}
