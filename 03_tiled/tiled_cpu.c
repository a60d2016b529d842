/*
 * Stage 03m: stage 03's tiled algorithm as plain C on the CPU (a model of tiled.cu, for a laptop).
 *
 * What it models: one row tile of Br = 64 query rows of one (b, h) per call, as one GPU block; its
 * Q tile is loaded once and kept. The keys are walked in Tc tiles of Bc = 64, twice, because
 * softmax needs each row's max m before any exp:
 *     pass one:  m_i = max_j s_ij                                  (reads K only)
 *     pass two:  l_i = sum_j exp(s_ij - m_i),  O_i += exp(s_ij - m_i) V_j   (reads K and V again)
 *     epilogue:  O_i = O_i / l_i
 * with s_ij = scale * q_i . k_j, in fp32 as on the GPU. The tile machinery (loads with tail
 * zero-fill, S = Q K^T, the mask, P V, the store) is kit/tiles_cpu.h; this file is the two passes.
 *
 * Versus tiled.cu: the same loop structure and equations; a row is one loop here instead of 16
 * threads, so there is no row reduction and no barrier. Versus stage 01: nothing of size N is kept
 * per row; every score lives in one Br x Bc tile.
 * Causal: keys j > i are masked with -inf on every tile, and the tiles above the diagonal are still
 * computed (stage 05 skips them).
 *
 * Limits: fp16, head dim 32, 64 or 128 (those of stage 03); any N >= 1; no LSE.
 * Run:    build/attn --stage 03m --batch 1 --heads 4 --seq 512 --dim 64 --check
 *         (build/nocuda/attn after make NO_CUDA=1, or where make finds no nvcc)
 */
#include "tiled.h"
#include "tiles_cpu.h"

#define ID "03m"  /* this model's registry id */
#define BR 64     /* Br: query rows per row tile, TILE_BR of tiles.cuh */
#define BC 64     /* Bc: keys per key tile, TILE_BC */

static void stage03c_row_tile(const cpu_tile_params *prm, int qt, cpu_tile_scratch *w) {
    const int N = prm->N, D = prm->D, q0 = qt * BR;
    float *S = w->S, *O = w->O, *m = w->m, *l = w->l;

    /* Q tile, times scale, loaded once: s = (scale q) . k */
    cpu_tile_load_rows(w->Qs, prm->q, q0, BR, N, D, prm->scale, prm->dtype);
    for (int r = 0; r < BR; r++) m[r] = -INFINITY, l[r] = 0.0f;
    memset(O, 0, (size_t)BR * D * sizeof(float));

    /* Pass one: m_i = max over all key tiles. Every row sees key 0 (causal: 0 <= i), so after this
     * pass every m_i is finite and pass two never computes exp(-inf - (-inf)). */
    for (int kt = 0; kt < prm->Tc; kt++) {
        const int key0 = kt * BC;
        cpu_tile_load_keys(w->Kt, prm->k, key0, BC, N, D, prm->dtype);
        cpu_tile_scores(S, w->Qs, BR, w->Kt, BC, 0, BC, D);
        cpu_tile_mask(S, BR, BC, q0, key0, N, prm->causal);
        for (int r = 0; r < BR; r++) m[r] = fmaxf(m[r], cpu_tile_row_max(S + r * BC, BC));
    }

    /* Pass two: the same scores again, now with the final m: P = exp(S - m), l += rowsum(P),
     * O += P V. Nothing is ever rescaled: m does not change during this pass. */
    for (int kt = 0; kt < prm->Tc; kt++) {
        const int key0 = kt * BC;
        cpu_tile_load_keys(w->Kt, prm->k, key0, BC, N, D, prm->dtype);
        cpu_tile_load_rows(w->Vs, prm->v, key0, BC, N, D, 1.0f, prm->dtype);
        cpu_tile_scores(S, w->Qs, BR, w->Kt, BC, 0, BC, D);
        cpu_tile_mask(S, BR, BC, q0, key0, N, prm->causal);
        for (int r = 0; r < BR; r++) {
            float *s = S + r * BC;
            /* expf(x), as __expf: masked -inf -> 0 */
            for (int c = 0; c < BC; c++) {
                s[c] = expf(s[c] - m[r]);
                l[r] += s[c];
            }
        }
        cpu_tile_pv(O, S, BR, BC, w->Vs, 0, D);
    }

    cpu_tile_store_o(prm->o, O, l, q0, BR, N, D, prm->dtype);
}

attn_status stage03m_run(const attn_problem *p, const attn_args *a) {
    const attn_status st = cpu_tiles_check_f16_d32_to_128(ID, p);
    if (st != ATTN_OK) return st;
    return cpu_tiles_run(ID, p, a, BR, BC, stage03c_row_tile);
}
