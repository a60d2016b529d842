/*
 * Stage 06m: stage 06's FlashAttention-2 algorithm as plain C on the CPU (a model of fa2_kernel.cuh).
 *
 * What it models: the arithmetic and the order of stage 06, without the machinery that makes it
 * fast (tensor cores, ldmatrix, cp.async, the swizzle: none of them changes a number). Versus
 * causal_bands_cpu.c:
 *   1. FA2's work split. A row tile of Br = 128 query rows is cut into warp slices of 16 MT rows
 *      (4 warps of 32 rows; 8 warps of 16 at D >= 192). Each slice is a row block of its own, with
 *      its own m, l and O and its own walk over the key tiles; no value passes between slices, so
 *      no reduction across warps and no barrier for the softmax. The kernel runs the warps side by
 *      side over one K/V tile in shared memory; the model runs the slices one after the other,
 *      which gives the same numbers.
 *   2. FA2's tiles: Bc = 128 keys per K/V tile at D <= 64, 64 above; the softmax runs Bcs = 64 keys
 *      at a time (one compute step).
 *   3. The kernel's order of key tiles: from the last one a row tile sees (on the diagonal, or the
 *      ragged tail) down to 0. The masked tiles, j >= n_plain, come first; the rest need no mask.
 *   4. m is kept on raw scores and scale * log2(e) = sl2 goes inside the exponent, one fmaf:
 *      P = 2^(s sl2 - m sl2), alpha = 2^(m_old sl2 - m_new sl2). A negative scale runs as -Q with
 *      |scale| (the same scores, and the max stays the max), as stage 06 does (attn_exp2_scale).
 *   5. P is rounded to the inputs' 16-bit type before P V (it is the tensor cores' A operand); l
 *      sums the fp32 P.
 *   6. The LSE epilogue: l = sum_j 2^(x_j - m2) with x_j = s_j sl2 and m2 = m sl2, so
 *      sum_j e^(scale s_j) = 2^m2 l and LSE = m2 ln 2 + ln l, the natural log the contract asks for.
 *      bf16 as well as fp16.
 *   7. K and V of their own shape [B, H_kv, N_k, D] (attn_problem): query head h reads K/V head
 *      h / (H / H_kv) (cpu_tiles_run_kv points prm->k and prm->v at it), the key tiles run over N_k,
 *      and the causal mask is aligned to the bottom right: row i sees keys 0 .. i + off, off = N_k - N.
 *      The band bounds below shift by off; a row that sees no key keeps l = 0 and stores O = 0 and
 *      LSE = -inf, the contract's rule (common/attn.h). With cu_seqlens each sequence is a head of
 *      its own lengths, N and N_k in prm, packed as common/attn.h says (cpu_tiles_head).
 *
 * Limits: fp16 or bf16, head dims 32, 64, 80, 96, 128, 192, 256 (stage 06's); any N, N_k >= 1, any
 *         H_kv dividing H; cu_seqlens.
 * Run:    build/attn --stage 06m --batch 1 --heads 4 --seq 512 --dim 64 --causal --check
 *         (build/nocuda/attn after make NO_CUDA=1, or where make finds no nvcc)
 */
#include <float.h>

#include "fa2_cpu.h"
#include "tiles_cpu.h"

#define ID "06m" /* this model's registry id */
#define BR 128   /* Br: query rows per row tile (fa2_final_tiles in fa2_traits.cuh, every D) */
#define BCS 64   /* keys per compute step (fa2_final_tiles' Bcs, every D) */

/* fa2_final_tiles (fa2_traits.cuh): keys per K/V tile and warps per block, by head dim */
static int fa2c_bc(int D) { return D <= 64 ? 128 : 64; }
static int fa2c_warps(int D) { return D >= 192 ? 8 : 4; }

static float round16(float x, attn_dtype t) { return attn_to_f32(attn_from_f32(x, t), t); }

/* One compute step of one warp slice (rows r0 .. r0+rows-1 of the row tile): keys c0 .. c0+Bcs-1 of
 * key tile j. S = Q K^T, the mask (masked tiles only), the online softmax, O = alpha O + P V. */
static void fa2c_step(const cpu_tile_params *prm, cpu_tile_scratch *w, int q0, int r0, int rows, int j,
                      int c0, int mask, float sl2) {
    const int D = prm->D, kbase = j * prm->Bc + c0;
    float *S = w->S, *O = w->O + r0 * D, *m = w->m + r0, *l = w->l + r0;
    cpu_tile_scores(S, w->Qs + r0 * D, rows, w->Kt, prm->Bc, c0, BCS, D);
    if (mask) /* keys >= N_k, or when causal keys past the query's bottom-right diagonal */
        cpu_tile_mask_offset(S, rows, BCS, q0 + r0, kbase, prm->N_k, prm->causal, prm->N_k - prm->N);
    for (int r = 0; r < rows; r++) {
        float *s = S + r * BCS;
        const float mx = fmaxf(m[r], cpu_tile_row_max(s, BCS));
        /* no visible key so far: 0 as the reference, so that x - m is never -inf - (-inf) */
        const float msc = (mx == -INFINITY ? 0.0f : mx) * sl2;
        /* alpha = 2^(m_old sl2 - msc) with m_old sl2 rounded as it was when it was this row's msc, so
         * that an unchanged max gives exactly 1. fmaf(m_old, sl2, -msc) took the product unrounded:
         * its rounding error, up to 2.4e-7, made alpha 1 + 2^-23 (or 1 - 2^-24) for most rows at every
         * step the max held; O / l cancels it, but l and so the LSE drifted with the steps: at
         * N = 2^20 + 1 (16384 steps) the LSE was off by 2.8 times its tolerance. */
        const float alpha = exp2f(m[r] * sl2 - msc);
        cpu_trace_alpha(prm, w, q0 + r0 + r, alpha);
        m[r] = mx;
        float rowsum = 0.0f;
        for (int c = 0; c < BCS; c++) {
            const float p = exp2f(fmaf(s[c], sl2, -msc));
            rowsum += p;
            s[c] = round16(p, prm->dtype); /* P as the mma's 16-bit A operand */
        }
        l[r] = l[r] * alpha + rowsum;
        for (int x = 0; x < D; x++) O[r * D + x] *= alpha;
    }
    cpu_tile_pv(O, S, rows, BCS, w->Vs, c0, D);
    cpu_trace_tile(prm, w, q0 + r0, rows, m, l, O, kbase, BCS, sl2 * ATTN_LN2); /* --trace-row */
}

/* One row tile (one GPU block): each warp slice walks the key tiles on its own. */
static void fa2_cpu_row_block(const cpu_tile_params *prm, int mb, cpu_tile_scratch *w) {
    const int N = prm->N, N_k = prm->N_k, D = prm->D, BC = prm->Bc, q0 = mb * BR;
    const int off = N_k - N;               /* causal: row i sees keys 0 .. i + off */
    const int rows_w = BR / fa2c_warps(D); /* 16 MT */
    /* |scale| log2(e), at least FLT_MIN: the one multiplier of exp2 (scale < 0: Q is negated) */
    const float sl2 = attn_exp2_scale(prm->scale);

    /* causal: the last visible key of the block's last row, last_key, bounds the tiles (none when
     * it is negative: no row of the block sees a key); tiles j < n_full are fully visible to every
     * row of the block, row q0 seeing keys 0 .. q0 + off. Tiles 0 .. n_plain-1 need no mask at all. */
    const int last_key = (q0 + BR < N ? q0 + BR : N) - 1 + off;
    const int n_max = !prm->causal ? prm->Tc : last_key < 0 ? 0 : last_key / BC + 1;
    const int n_full = !prm->causal ? n_max : q0 + off + 1 <= 0 ? 0 : (q0 + off + 1) / BC;
    const int n_plain = n_full < N_k / BC ? n_full : N_k / BC;

    cpu_tile_load_rows(w->Qs, prm->q, q0, BR, N, D, prm->scale < 0.0f ? -1.0f : 1.0f, prm->dtype);
    for (int r0 = 0; r0 < BR && q0 + r0 < N; r0 += rows_w) {
        for (int r = r0; r < r0 + rows_w; r++) w->m[r] = -INFINITY, w->l[r] = 0.0f;
        memset(w->O + r0 * D, 0, (size_t)rows_w * D * sizeof(float));
        /* the key loop: the masked tiles (diagonal, tail) first, then the plain ones */
        for (int j = n_max - 1; j >= 0; j--) {
            cpu_tile_load_keys(w->Kt, prm->k, j * BC, BC, N_k, D, prm->dtype);
            cpu_tile_load_rows(w->Vs, prm->v, j * BC, BC, N_k, D, 1.0f, prm->dtype);
            for (int c0 = 0; c0 < BC; c0 += BCS) fa2c_step(prm, w, q0, r0, rows_w, j, c0, j >= n_plain, sl2);
        }
        /* epilogue: O / l once, and LSE = m sl2 ln 2 + ln l */
        cpu_tile_store_o(prm->o, w->O + r0 * D, w->l + r0, q0 + r0, rows_w, N, D, prm->dtype);
        for (int r = r0; r < r0 + rows_w && q0 + r < N; r++)
            if (prm->lse)
                prm->lse[q0 + r] = w->l[r] > 0.0f ? w->m[r] * sl2 * ATTN_LN2 + logf(w->l[r]) : -INFINITY;
    }
}

attn_status stage06m_run(const attn_problem *p, const attn_args *a) {
    if (!stage06_supports_dim(p->D))
        return attn_fail(ATTN_EUNSUPPORTED, "stage " ID " supports head dim " STAGE06_DIMS_TEXT " (got %lld)",
                         (long long)p->D);
    if (p->dtype != ATTN_F16 && p->dtype != ATTN_BF16)
        return attn_fail(ATTN_EUNSUPPORTED, "stage " ID " supports dtype fp16, bf16 (got %s)",
                         attn_dtype_name(p->dtype));
    return cpu_tiles_run_kv(ID, p, a, BR, fa2c_bc((int)p->D), fa2_cpu_row_block);
}
