/*
 * check.c: a stage's output against the independent double reference (reference.c), on chosen rows.
 * Every stage, stage 01 included, is compared with that one reference, never with itself.
 *
 * The tolerance, element by element (u = unit roundoff of the 16-bit type: 2^-11 for fp16, 2^-8
 * for bf16; u32 = 2^-24, that of fp32). A stage that reads the same 16-bit Q, K, V and computes in
 * fp32 can differ from the exact result through:
 *   (a) rounding O to 16 bits:                          <= u |O_ref|
 *   (b) rounding P to 16 bits before P V (stages 02, 06 feed fp16/bf16 probabilities to the
 *       product, as frameworks and FlashAttention do): |sum_j p_j e_j v_j| / l <= u * Vmax,
 *       where Vmax = max |v_jd| over the keys the row sees
 *   (c) fp32 scores: s_j = scale * q.k_j summed over D terms is off by at most
 *       ds = u32 * (D + 16) * Sabs, with Sabs = max_j scale * sum_d |q_d k_jd| (Higham's bound
 *       gamma_D, valid for any summation order, also for tensor cores that truncate; the 16 covers
 *       the scale and log2(e) multiplies, the max subtraction and ex2.approx's 2^-22 error). A
 *       shift ds in the scores moves the softmax average by at most 2 * ds * Vmax.
 *   (d) fp32 sums over N keys of p and p v (and the rescales by alpha): 8 sqrt(N) u32 Vmax.
 * tol = 2u|O_ref| + 2u Vmax + 2 ds Vmax + 8 sqrt(N) u32 Vmax + 1e-7: the bounds of (a) and (b) with
 * a factor 2 of headroom (FlashAttention's own rule allows twice the error of a same-precision
 * naive computation), (c) and (d) as derived. For LSE (float32, natural log):
 * tol_lse = ds + u32 (8 sqrt(N) + 16) + 4 u32 |LSE_ref| + 1e-6.
 * The check fails on the maximum of |err| / tol over every checked element (never on a mean), on
 * any NaN or inf, and on LSE the same way. A NaN that still has the poison's bits (all ones, which
 * the stages' arithmetic and conversions never produce: theirs are 0x7e00, 0x7fff, 0xfe00,
 * 0x7fc00000, 0xffc00000) is counted as never written; any other NaN or inf the stage wrote.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "harness.h"
#include "reference.h"

#define U32 5.9604644775390625e-8 /* 2^-24 */

/* Per-row Vmax and Sabs over the keys each checked row sees (O(nvis * D) per row, as the reference
 * itself), a head at a time: |k| (transposed) and each key's max |v| are decoded once per head, and
 * a row's sums sum_d |q_d| |k_jd| run key-parallel, each still over d in order. |q_d| |k_jd| in
 * double is exact (a product of two floats). The threads share the work as in the reference
 * (attn_walk_heads): a head is |K| transposed (N * D floats) then each key's max |v| (N floats). */
typedef struct {
    const attn_inputs *in;
    const int64_t *rows;
    double *vmax, *sabs;
} bounds_walk;

static void bounds_decode(void *ctx, int64_t bh, void *head, int parallel) {
    const attn_inputs *in = ((const bounds_walk *)ctx)->in;
    const int64_t N = in->p.N, D = in->p.D;
    const uint16_t *k = in->k + bh * N * D, *v = in->v + bh * N * D;
    const attn_dtype t = in->p.dtype;
    float *kabs = head, *vkey = kabs + N * D;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t j = 0; j < N; j++) {
        float vk = 0.0f;
        for (int64_t d = 0; d < D; d++) {
            kabs[d * N + j] = fabsf(attn_to_f32(k[j * D + d], t));
            vk = fmaxf(vk, fabsf(attn_to_f32(v[j * D + d], t)));
        }
        vkey[j] = vk;
    }
}

static void bounds_row(void *ctx, int64_t r, const void *head, void *scratch) {
    const bounds_walk *c = ctx;
    const attn_problem *p = &c->in->p;
    const int64_t N = p->N, D = p->D, row = c->rows[r], nvis = p->causal ? row % N + 1 : N;
    const float *kabs = head, *vkey = kabs + N * D;
    double *sa = scratch;
    for (int64_t j = 0; j < nvis; j++) sa[j] = 0.0;
    for (int64_t d = 0; d < D; d++) {
        const double qd = fabs((double)attn_to_f32(c->in->q[row * D + d], p->dtype));
        const float *kd = kabs + d * N;
#pragma omp simd
        for (int64_t j = 0; j < nvis; j++) sa[j] += qd * (double)kd[j];
    }
    double vm = 0.0, sm = 0.0;
    for (int64_t j = 0; j < nvis; j++) {
        sm = fmax(sm, sa[j]);
        vm = fmax(vm, (double)vkey[j]);
    }
    c->vmax[r] = vm;
    c->sabs[r] = sm * fabs((double)p->scale);
}

static attn_status row_bounds(const attn_inputs *in, const int64_t *rows, int64_t nrows, double *vmax,
                              double *sabs) {
    const int64_t N = in->p.N, D = in->p.D;
    bounds_walk c = {in, rows, vmax, sabs};
    const attn_head_walk w = {(size_t)(N * D + N) * sizeof(float), (size_t)N * sizeof(double), bounds_decode,
                              bounds_row, &c};
    if (attn_walk_heads(&in->p, rows, nrows, &w))
        return attn_fail(ATTN_ENOMEM, "check: cannot allocate one head of |K| or its sums (N = %lld)",
                         (long long)N);
    return ATTN_OK;
}

/* What one row's tolerances are made of: the dtype's unit roundoff u, sqrt(N), the row's rounding
 * error of the scores ds (float32 dot products of D + 16 terms of |q||k|) and its largest |v|, vm. */
typedef struct {
    double u, sqrtN, ds, vm;
} row_scale;

/* Element (row, d) as the worst so far. */
static void note_worst(attn_check *c, const attn_problem *p, int64_t row, int64_t d, double ratio, double got,
                       double want, double tol) {
    c->worst_ratio = ratio;
    c->worst_b = row / p->N / p->H, c->worst_h = row / p->N % p->H;
    c->worst_n = row % p->N, c->worst_d = d;
    c->worst_got = got, c->worst_want = want, c->worst_tol = tol;
}

/* Row `row` of O against want[0..D-1]; a non-finite element is the worst one (the first of them kept). */
static void check_o_row(attn_check *c, const attn_problem *p, int64_t row, const uint16_t *o, const double *want,
                        const row_scale *k, double *err2, double *ref2) {
    for (int64_t d = 0; d < p->D; d++) {
        const double got = (double)attn_to_f32(o[row * p->D + d], p->dtype);
        if (!isfinite(got)) {
            c->unwritten += o[row * p->D + d] == 0xffff;
            if (c->nonfinite++ == 0 || c->worst_ratio < INFINITY)
                note_worst(c, p, row, d, INFINITY, got, want[d], 0.0);
            continue;
        }
        const double err = fabs(got - want[d]);
        const double tol = 2.0 * k->u * fabs(want[d]) + 2.0 * k->u * k->vm + 2.0 * k->ds * k->vm +
                           8.0 * k->sqrtN * U32 * k->vm + 1e-7;
        *err2 += err * err;
        *ref2 += want[d] * want[d];
        if (err > c->max_abs_err) c->max_abs_err = err;
        if (err / tol > c->worst_ratio) note_worst(c, p, row, d, err / tol, got, want[d], tol);
    }
}

/* LSE of row `row` against want: float32 sums of up to N terms, then a log. */
static void check_lse_row(attn_check *c, const float *lse, int64_t row, double want, const row_scale *k) {
    const double got = (double)lse[row];
    if (!isfinite(got)) {
        uint32_t bits;
        memcpy(&bits, &lse[row], sizeof bits);
        c->unwritten += bits == 0xffffffffu, c->lse_unwritten += bits == 0xffffffffu;
        c->nonfinite++, c->lse_nonfinite++;
        c->lse_worst_ratio = INFINITY;
        c->max_lse_err = INFINITY;
        return;
    }
    const double err = fabs(got - want);
    const double tol = k->ds + U32 * (8.0 * k->sqrtN + 16.0) + 4.0 * U32 * fabs(want) + 1e-6;
    if (err > c->max_lse_err) c->max_lse_err = err;
    if (err / tol > c->lse_worst_ratio) c->lse_worst_ratio = err / tol;
}

attn_status attn_check_output(const attn_inputs *in, const uint16_t *o, const float *lse,
                              const int64_t *rows, int64_t nrows, attn_check *c) {
    const attn_problem *p = &in->p;
    const int64_t D = p->D;
    memset(c, 0, sizeof *c);
    double *ref_o = attn_alloc((size_t)(nrows * D) * sizeof(double));
    double *ref_lse = attn_alloc((size_t)(nrows > 0 ? nrows : 1) * sizeof(double));
    double *vmax = attn_alloc((size_t)(nrows > 0 ? nrows : 1) * sizeof(double));
    double *sabs = attn_alloc((size_t)(nrows > 0 ? nrows : 1) * sizeof(double));
    attn_status st = ATTN_OK;
    if (!ref_o || !ref_lse || !vmax || !sabs)
        st = attn_fail(ATTN_ENOMEM, "check: cannot allocate the reference for %lld rows", (long long)nrows);
    if (st == ATTN_OK) st = attn_reference_rows(p, in->q, in->k, in->v, rows, nrows, ref_o, ref_lse);
    if (st == ATTN_OK) st = row_bounds(in, rows, nrows, vmax, sabs);
    if (st == ATTN_OK) {
        double err2 = 0.0, ref2 = 0.0;
        const double u = attn_unit_roundoff(p->dtype), sqrtN = sqrt((double)p->N); /* the same for every row */
        c->rows_checked = nrows;
        c->lse_checked = lse != NULL;
        for (int64_t r = 0; r < nrows; r++) {
            const row_scale k = {u, sqrtN, U32 * (double)(D + 16) * sabs[r], vmax[r]};
            check_o_row(c, p, rows[r], o, ref_o + r * D, &k, &err2, &ref2);
            if (lse) check_lse_row(c, lse, rows[r], ref_lse[r], &k);
        }
        c->rel_l2 = ref2 > 0.0 ? sqrt(err2 / ref2) : sqrt(err2);
        c->pass = c->nonfinite == 0 && c->worst_ratio <= 1.0 && c->lse_worst_ratio <= 1.0;
    }
    free(ref_o), free(ref_lse), free(vmax), free(sabs);
    return st;
}

/* splitmix64: a counter-based generator, so any row sample is reproducible from its seed. */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

attn_status attn_sample_rows(const attn_problem *p, int full_heads, int64_t extra, uint64_t seed,
                             int64_t **rows_out, int64_t *nrows_out) {
    const int64_t total = attn_rows(p), N = p->N, BH = p->B * p->H;
    /* Small problems are checked whole: up to 2^31 multiply-adds of reference work. */
    const int all = (double)total * (double)N * (double)p->D <= 2147483648.0;
    int64_t cap = all ? total : (full_heads ? 2 * N : 0) + extra + 2 * extra;
    int64_t *rows = attn_alloc((size_t)(cap > 0 ? cap : 1) * sizeof(int64_t));
    if (!rows) return attn_fail(ATTN_ENOMEM, "check: cannot allocate the row sample");
    int64_t n = 0;
    if (all) {
        for (int64_t r = 0; r < total; r++) rows[n++] = r;
    } else {
        if (full_heads) {
            for (int64_t i = 0; i < N; i++) rows[n++] = i;                       /* first (b, h) */
            if (BH > 1)
                for (int64_t i = 0; i < N; i++) rows[n++] = (BH - 1) * N + i;   /* last (b, h) */
        }
        for (int64_t e = 0; e < extra; e++) {
            const int64_t r = (int64_t)(mix64(seed * 0x100000001b3ull + (uint64_t)e) % (uint64_t)total);
            rows[n++] = r;
            if (!full_heads) { /* the first and last row of the sampled row's head too */
                rows[n++] = (r / N) * N;
                rows[n++] = (r / N) * N + N - 1;
            }
        }
        qsort(rows, (size_t)n, sizeof *rows, cmp_i64);
        int64_t w = 0; /* drop duplicates */
        for (int64_t r = 0; r < n; r++)
            if (w == 0 || rows[r] != rows[w - 1]) rows[w++] = rows[r];
        n = w;
    }
    *rows_out = rows;
    *nrows_out = n;
    return ATTN_OK;
}
