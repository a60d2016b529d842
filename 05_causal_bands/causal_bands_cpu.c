/*
 * Stage 05m: stage 05's causal bands as plain C on the CPU (a model of causal_bands.cu).
 *
 * What it models: under a causal mask, key tiles below the diagonal run without a mask, tiles on
 * the diagonal run with it, and tiles above it are never visited. With Br = Bc = 64, row tile qt
 * (rows q0 = 64 qt .. q0 + 63) and key tile kt:
 *     kt <  qt   every key <= every row: the tile is fully visible, no mask    (fast path)
 *     kt == qt   the tile straddles the diagonal: j > i masked per element   (masked path)
 *     kt >  qt   every key > every row: fully masked; the loop stops before it (never visited)
 * In general (q_last = the tile's last row < N):
 *     kt_end  = q_last / Bc + 1        first tile not visited
 *     kt_full = (q0 + 1) / Bc          tiles 0 .. kt_full-1 have key0 + Bc - 1 <= q0: no mask
 * The map of visited tiles is in causal_bands.cu. The online softmax is stage 04's, unchanged.
 *
 * Versus online_softmax_cpu.c: only the loop bounds and the choice of masked or unmasked tile.
 * Non-causal runs exactly 04m's path (all Tc tiles, each through the mask, which only bites on the
 * tail). Versus causal_bands.cu: the same bounds and branches, a row in one loop instead of 16
 * threads.
 *
 * Limits: fp16, head dim 32, 64 or 128 (those of stage 05); any N >= 1; no LSE.
 * Run:    build/attn --stage 05m --batch 1 --heads 4 --seq 512 --dim 64 --causal --check
 *         (build/nocuda/attn after make NO_CUDA=1, or where make finds no nvcc)
 */
#include "causal_bands.h"
#include "tiles_cpu.h"

#define ID "05m"  /* this model's registry id */
#define BR 64     /* Br: query rows per row tile, TILE_BR of tiles.cuh */
#define BC 64     /* Bc: keys per key tile, TILE_BC */

static void stage05c_row_tile(const cpu_tile_params *prm, int qt, cpu_tile_scratch *w) {
    const int N = prm->N, D = prm->D, q0 = qt * BR;
    float *S = w->S, *O = w->O, *m = w->m, *l = w->l;

    /* Q tile, times scale * log2(e), loaded once: s = (scale log2(e) q) . k, in log2 units */
    cpu_tile_load_rows(w->Qs, prm->q, q0, BR, N, D, prm->scale * ATTN_LOG2E, prm->dtype);
    for (int r = 0; r < BR; r++) m[r] = -INFINITY, l[r] = 0.0f;
    memset(O, 0, (size_t)BR * D * sizeof(float));

    /* Causal: tiles 0 .. kt_full-1 unmasked, kt_full .. kt_end-1 masked, kt_end .. Tc-1 skipped.
     * Non-causal: kt_full = 0, kt_end = Tc, every tile masked (only the tail has -inf): stage 04. */
    const int q_last = (q0 + BR < N ? q0 + BR : N) - 1;
    const int kt_end = prm->causal ? q_last / BC + 1 : prm->Tc;
    const int kt_full = prm->causal ? (q0 + 1) / BC : 0;

    /* One pass: each key tile updates m, l and O, rescaling what came before by alpha. */
    for (int kt = 0; kt < kt_end; kt++) {
        const int key0 = kt * BC;
        cpu_tile_load_keys(w->Kt, prm->k, key0, BC, N, D, prm->dtype);
        cpu_tile_load_rows(w->Vs, prm->v, key0, BC, N, D, 1.0f, prm->dtype);
        cpu_tile_scores(S, w->Qs, BR, w->Kt, BC, 0, BC, D);
        if (kt >= kt_full) /* on the diagonal, or the non-causal tail */
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

attn_status stage05m_run(const attn_problem *p, const attn_args *a) {
    const attn_status st = cpu_tiles_check_f16_d32_to_128(ID, p);
    if (st != ATTN_OK) return st;
    return cpu_tiles_run(ID, p, a, BR, BC, stage05c_row_tile);
}
