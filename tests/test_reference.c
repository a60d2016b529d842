/*
 * test_reference.c: stage 01, the independent reference that every --check uses (suite/reference.c)
 * and the fp16/bf16 conversions both rest on. Stage 01 and the reference, written apart, are checked
 * against each other, and stage 01 against properties that need no reference at all.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "01_naive_cpu/naive_cpu.h"
#include "half.h"
#include "reference.h"
#include "test_util.h"

/* ---- fp16 / bf16 -------------------------------------------------------------------------- */

Test(half, every_fp16_pattern_round_trips) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = attn_h2f((uint16_t)h);
        if (isnan(f)) continue;
        cr_assert_eq(attn_f2h(f), h, "fp16 0x%04x -> %g -> 0x%04x", h, (double)f, attn_f2h(f));
    }
}

Test(half, fp16_rounds_to_nearest_even) {
    cr_assert_eq(attn_f2h(1.0f + 0x1p-11f), 0x3c00); /* tie between 1 and 1+2^-10: even is 1 */
    cr_assert_eq(attn_f2h(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie: rounds up to the even 1+2^-9 */
    cr_assert_eq(attn_f2h(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01); /* above the tie: up */
    cr_assert_eq(attn_f2h(65504.0f), 0x7bff);
    cr_assert_eq(attn_f2h(65520.0f), 0x7c00); /* rounds past the largest finite: inf */
    cr_assert_eq(attn_f2h(0x1p-24f), 0x0001);  /* smallest subnormal */
    cr_assert_eq(attn_f2h(0x1p-25f), 0x0000);  /* tie with zero: even is zero */
    cr_assert_eq(attn_f2h(0x1.8p-25f), 0x0001);
    cr_assert_eq(attn_f2h(-2.0f), 0xc000);
    cr_assert(isnan(attn_h2f(attn_f2h(NAN))));
}

Test(half, bf16_rounds_to_nearest_even) {
    cr_assert_eq(attn_f2bf(1.0f), 0x3f80);
    cr_assert_eq(attn_f2bf(1.0f + 0x1p-8f), 0x3f80); /* tie: even */
    cr_assert_eq(attn_f2bf(1.0f + 3 * 0x1p-8f), 0x3f82);
    cr_assert_eq(attn_bf2f(0x3f81), 1.0f + 0x1p-7f);
    cr_assert(isnan(attn_bf2f(attn_f2bf(NAN))));
}

/* ---- stage 01 against the independent reference (suite/reference.c) ------------------------ */

static void compare_with_reference(int64_t B, int64_t H, int64_t N, int64_t D, int causal, attn_dtype t,
                                   attn_init init) {
    attn_problem p = attn_problem_make(B, H, N, D, causal);
    p.dtype = t;
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 1234 + (uint64_t)(N * 7 + D), init), ATTN_OK, "%s",
                 attn_last_error());
    const int64_t rows = attn_rows(&p), n = attn_qkv_elems(&p);
    int64_t *idx = malloc((size_t)rows * sizeof(int64_t));
    double *o = malloc((size_t)n * sizeof(double)), *lse = malloc((size_t)rows * sizeof(double));
    double *ro = malloc((size_t)n * sizeof(double)), *rlse = malloc((size_t)rows * sizeof(double));
    cr_assert(idx && o && lse && ro && rlse);
    for (int64_t r = 0; r < rows; r++) idx[r] = r;
    cr_assert_eq(naive_cpu_rows(&p, in.q, in.k, in.v, idx, rows, o, lse), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(attn_reference_rows(&p, in.q, in.k, in.v, idx, rows, ro, rlse), ATTN_OK, "%s",
                 attn_last_error());
    /* Both are exact to double rounding: 1e-12 relative to the output scale is far below any
     * fp16 effect and far above double rounding over N <= 300 terms. */
    for (int64_t e = 0; e < n; e++)
        cr_assert(fabs(o[e] - ro[e]) <= 1e-12 * (1 + fabs(ro[e])), "O[%lld]: %.17g vs %.17g",
                  (long long)e, o[e], ro[e]);
    for (int64_t r = 0; r < rows; r++)
        cr_assert(fabs(lse[r] - rlse[r]) <= 1e-12 * (1 + fabs(rlse[r])), "LSE[%lld]: %.17g vs %.17g",
                  (long long)r, lse[r], rlse[r]);
    free(idx), free(o), free(lse), free(ro), free(rlse);
    attn_inputs_free(&in);
}

/* ---- grouped-query attention, N_k != N, the bottom-right causal mask --------------------------- */

/* How the brute force below maps heads and places the mask: the contract's way, or a planted bug. */
enum { MAP_GROUPS = 0, MAP_MODULO = 1 };   /* h / (H / H_kv), or the wrong h % H_kv */
enum { MASK_BOTTOM_RIGHT = 0, MASK_TOP_LEFT = 1 }; /* j <= i + N_k - N, or the wrong j <= i */

/* O and LSE of every row, one row at a time with plain loops, written apart from suite/reference.c:
 * K and V [B, H_kv, N_k, D], query head h of batch b reading K/V head `map` of it. */
static void brute_force(const attn_problem *p, const attn_inputs *in, int map, int mask, double *o, double *lse) {
    const int64_t H = p->H, Hkv = p->H_kv, N = p->N, Nk = p->N_k, D = p->D;
    double *s = malloc((size_t)Nk * sizeof(double));
    cr_assert(s);
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < N; i++) {
                const int64_t g = map == MAP_GROUPS ? h / (H / Hkv) : h % Hkv, row = (b * H + h) * N + i;
                const uint16_t *q = in->q + row * D, *k = in->k + (b * Hkv + g) * Nk * D;
                const uint16_t *v = in->v + (b * Hkv + g) * Nk * D;
                const int64_t last = !p->causal ? Nk - 1 : mask == MASK_BOTTOM_RIGHT ? i + Nk - N : i;
                double m = -INFINITY, l = 0.0;
                for (int64_t j = 0; j <= last && j < Nk; j++) {
                    double dot = 0.0;
                    for (int64_t d = 0; d < D; d++)
                        dot += (double)attn_to_f32(q[d], p->dtype) * (double)attn_to_f32(k[j * D + d], p->dtype);
                    s[j] = dot * (double)p->scale;
                    if (s[j] > m) m = s[j];
                }
                for (int64_t d = 0; d < D; d++) o[row * D + d] = 0.0;
                for (int64_t j = 0; j <= last && j < Nk; j++) l += exp(s[j] - m);
                for (int64_t j = 0; j <= last && j < Nk; j++)
                    for (int64_t d = 0; d < D; d++)
                        o[row * D + d] += exp(s[j] - m) / l * (double)attn_to_f32(v[j * D + d], p->dtype);
                lse[row] = l > 0.0 ? m + log(l) : -INFINITY; /* no key: O = 0, LSE = -inf */
            }
    free(s);
}

/* The largest difference between two sets of outputs, scaled as compare_with_reference's rule; two
 * -inf LSEs are equal, -inf against a number is infinitely far. */
static double max_rel_diff(const double *a, const double *b, int64_t n) {
    double worst = 0.0;
    for (int64_t e = 0; e < n; e++) {
        if (a[e] == b[e]) continue;
        const double r = isinf(a[e]) || isinf(b[e]) ? INFINITY : fabs(a[e] - b[e]) / (1 + fabs(b[e]));
        if (!(r <= worst)) worst = r;
    }
    return worst;
}

/* The reference on every row of the problem against the brute force of the contract (to 1e-12, as
 * stage 01 against it), and against the planted bugs, from which it must differ. */
static void reference_vs_brute_force(int64_t H, int64_t Hkv, int64_t N, int64_t Nk, int64_t D, int causal) {
    attn_problem p = attn_problem_make(2, H, N, D, causal);
    p.H_kv = Hkv, p.N_k = Nk;
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 5150 + (uint64_t)(N * 3 + Nk + Hkv), ATTN_INIT_NORMAL), ATTN_OK, "%s",
                 attn_last_error());
    const int64_t rows = attn_rows(&p), n = attn_qkv_elems(&p);
    int64_t *idx = malloc((size_t)rows * sizeof(int64_t));
    double *o = malloc((size_t)n * sizeof(double)), *lse = malloc((size_t)rows * sizeof(double));
    double *bo = malloc((size_t)n * sizeof(double)), *blse = malloc((size_t)rows * sizeof(double));
    cr_assert(idx && o && lse && bo && blse);
    for (int64_t r = 0; r < rows; r++) idx[r] = r;
    cr_assert_eq(attn_reference_rows(&p, in.q, in.k, in.v, idx, rows, o, lse), ATTN_OK, "%s", attn_last_error());
    brute_force(&p, &in, MAP_GROUPS, MASK_BOTTOM_RIGHT, bo, blse);
    const char *what = causal ? "causal" : "non-causal";
    cr_assert(max_rel_diff(o, bo, n) <= 1e-12 && max_rel_diff(lse, blse, rows) <= 1e-12,
              "H %lld H_kv %lld N %lld N_k %lld %s: the reference differs from the brute force (O %g, LSE %g)",
              (long long)H, (long long)Hkv, (long long)N, (long long)Nk, what, max_rel_diff(o, bo, n),
              max_rel_diff(lse, blse, rows));
    for (int64_t r = 0; r < rows; r++) /* the rows that see no key: exactly O = 0, LSE = -inf */
        if (causal && r % N < N - Nk) {
            cr_assert(lse[r] == -INFINITY, "row %lld sees no key: LSE %g, want -inf", (long long)r, lse[r]);
            for (int64_t d = 0; d < D; d++) cr_assert(o[r * D + d] == 0.0, "row %lld sees no key: O != 0", (long long)r);
        }
    if (H / Hkv > 1 && Hkv > 1) { /* h % H_kv is another head than h / (H / H_kv) for some h */
        brute_force(&p, &in, MAP_MODULO, MASK_BOTTOM_RIGHT, bo, blse);
        cr_assert(max_rel_diff(o, bo, n) > 1e-3, "%s: the head map h %% H_kv gives the reference's answer", what);
    }
    if (causal && N != Nk) { /* the top-left mask sees other keys */
        brute_force(&p, &in, MAP_GROUPS, MASK_TOP_LEFT, bo, blse);
        cr_assert(max_rel_diff(o, bo, n) > 1e-3 || max_rel_diff(lse, blse, rows) > 1e-3,
                  "N %lld N_k %lld: the top-left mask gives the reference's answer", (long long)N, (long long)Nk);
    }
    free(idx), free(o), free(lse), free(bo), free(blse);
    attn_inputs_free(&in);
}

Test(reference, gqa_and_seq_k_match_brute_force) {
    static const int64_t kv_heads[] = {2, 1, 6}, sizes[][2] = {{37, 129}, {129, 37}, {37, 37}};
    for (int c = 0; c < 2; c++)
        for (int a = 0; a < 3; a++)
            for (int z = 0; z < 3; z++) reference_vs_brute_force(6, kv_heads[a], sizes[z][0], sizes[z][1], 24, c);
}

/* ---- variable-length batches: cu_seqlens, the packed layout ---------------------------------- */

/* O and LSE of every row of a packed problem, by plain loops written apart from suite/reference.c:
 * Q and O [H, total_q, D], K and V [H_kv, total_k, D]; sequence b of head h at rows h * total_q +
 * cu_q[b] of Q, its keys at rows g * total_k + cu_k[b] of K (g = h / (H / H_kv)). all_keys: the planted
 * bug of a model that forgets the sequences' ends, every key of the packed head visible. */
static void brute_force_varlen(const attn_problem *p, const attn_inputs *in, int all_keys, double *o, double *lse) {
    const int32_t *cq = p->cu_seqlens_q, *ck = p->cu_seqlens_k;
    const int64_t H = p->H, D = p->D, Tq = cq[p->B], Tk = ck[p->B];
    double *s = malloc((size_t)Tk * sizeof(double));
    cr_assert(s);
    for (int64_t h = 0; h < H; h++)
        for (int64_t b = 0; b < p->B; b++) {
            const int64_t n = cq[b + 1] - cq[b], g = h / (H / p->H_kv);
            const int64_t k_first = all_keys ? 0 : ck[b], n_k = all_keys ? Tk : ck[b + 1] - ck[b];
            const uint16_t *k = in->k + (g * Tk + k_first) * D, *v = in->v + (g * Tk + k_first) * D;
            for (int64_t i = 0; i < n; i++) {
                const int64_t row = h * Tq + cq[b] + i, seen = p->causal ? i + n_k - n + 1 : n_k;
                double m = -INFINITY, l = 0.0;
                for (int64_t j = 0; j < seen; j++) {
                    double dot = 0.0;
                    for (int64_t d = 0; d < D; d++)
                        dot += (double)attn_to_f32(in->q[row * D + d], p->dtype) *
                               (double)attn_to_f32(k[j * D + d], p->dtype);
                    s[j] = dot * (double)p->scale;
                    if (s[j] > m) m = s[j];
                }
                for (int64_t j = 0; j < seen; j++) l += exp(s[j] - m);
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < seen; j++)
                        acc += exp(s[j] - m) / l * (double)attn_to_f32(v[j * D + d], p->dtype);
                    o[row * D + d] = seen > 0 ? acc : 0.0;
                }
                lse[row] = seen > 0 ? m + log(l) : -INFINITY;
            }
        }
    free(s);
}

/* Sequences of 1, 37, 129 and 5 queries with 9, 37, 64 and 200 keys (so causal rows that see none in
 * the third), H = 6 on H_kv = 2 and 1: the reference against the brute force, and against the
 * planted bug, from which it must differ. */
Test(reference, varlen_matches_brute_force) {
    static const int32_t cq[] = {0, 1, 38, 167, 172}, ck[] = {0, 9, 46, 110, 310};
    for (int c = 0; c < 2; c++)
        for (int64_t Hkv = 1; Hkv <= 2; Hkv++) {
            attn_problem p = attn_problem_make(4, 6, 129, 40, c);
            p.H_kv = Hkv, p.N_k = 200, p.cu_seqlens_q = cq, p.cu_seqlens_k = ck;
            attn_inputs in;
            cr_assert_eq(attn_inputs_random(&in, &p, 77 + (uint64_t)c, ATTN_INIT_NORMAL), ATTN_OK, "%s",
                         attn_last_error());
            const int64_t rows = attn_rows(&p), n = attn_qkv_elems(&p);
            cr_assert_eq(rows, 6 * 172, "rows of a packed problem: H * total_q");
            cr_assert_eq(attn_kv_elems(&p), Hkv * 310 * 40, "K's elements: H_kv * total_k * D");
            int64_t *idx = malloc((size_t)rows * sizeof(int64_t));
            double *o = malloc((size_t)n * sizeof(double)), *lse = malloc((size_t)rows * sizeof(double));
            double *bo = malloc((size_t)n * sizeof(double)), *blse = malloc((size_t)rows * sizeof(double));
            cr_assert(idx && o && lse && bo && blse);
            for (int64_t r = 0; r < rows; r++) idx[r] = r;
            cr_assert_eq(attn_reference_rows(&p, in.q, in.k, in.v, idx, rows, o, lse), ATTN_OK, "%s",
                         attn_last_error());
            brute_force_varlen(&p, &in, 0, bo, blse);
            cr_assert(max_rel_diff(o, bo, n) <= 1e-12 && max_rel_diff(lse, blse, rows) <= 1e-12,
                      "H_kv %lld causal %d: the reference differs from the brute force (O %g, LSE %g)",
                      (long long)Hkv, c, max_rel_diff(o, bo, n), max_rel_diff(lse, blse, rows));
            if (!c) { /* every key of the packed head visible: not the sequences' attention */
                brute_force_varlen(&p, &in, 1, bo, blse);
                cr_assert(max_rel_diff(o, bo, n) > 1e-3, "ignoring the sequences' ends gives the reference's answer");
            }
            free(idx), free(o), free(lse), free(bo), free(blse);
            attn_inputs_free(&in);
        }
}

/* cu_seqlens are checked as the other fields: both or neither, from 0, each sequence 0..N (or N_k) long. */
Test(reference, varlen_offsets_are_validated) {
    static const int32_t ok[] = {0, 3, 5}, late[] = {1, 3, 5}, down[] = {0, 3, 2}, longer[] = {0, 3, 10};
    attn_problem p = attn_problem_make(2, 1, 4, 8, 0);
    p.cu_seqlens_q = ok, p.cu_seqlens_k = ok;
    cr_assert_eq(attn_problem_validate(&p), ATTN_OK, "%s", attn_last_error());
    p.cu_seqlens_k = NULL;
    cr_assert_eq(attn_problem_validate(&p), ATTN_EINVAL);
    cr_assert(strstr(attn_last_error(), "both or neither"), "%s", attn_last_error());
    const int32_t *bad[] = {late, down, longer};
    const char *why[] = {"must start at 0 (got 1)", "sequence 1 must be 0..4 long (got -1)",
                         "sequence 1 must be 0..4 long (got 7)"};
    for (int i = 0; i < 3; i++) {
        p.cu_seqlens_q = ok, p.cu_seqlens_k = bad[i];
        cr_assert_eq(attn_problem_validate(&p), ATTN_EINVAL, "%s", why[i]);
        cr_assert(strstr(attn_last_error(), "cu_seqlens_k") && strstr(attn_last_error(), why[i]), "%s",
                  attn_last_error());
    }
}

/* The check takes the contract's empty rows, O = 0 and LSE = -inf, and nothing else there: a NaN, a
 * finite LSE or an O off zero fails. */
Test(check, rows_that_see_no_key_need_zero_and_minus_inf) {
    attn_problem p = attn_problem_make(1, 2, 40, 16, 1);
    p.N_k = 13; /* rows 0 .. 26 of each head see no key */
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 4, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    const int64_t rows = attn_rows(&p), n = attn_qkv_elems(&p);
    int64_t *idx = malloc((size_t)rows * sizeof(int64_t));
    double *ro = malloc((size_t)n * sizeof(double)), *rl = malloc((size_t)rows * sizeof(double));
    uint16_t *o = malloc((size_t)n * 2);
    float *lse = malloc((size_t)rows * 4);
    cr_assert(idx && ro && rl && o && lse);
    for (int64_t r = 0; r < rows; r++) idx[r] = r;
    cr_assert_eq(attn_reference_rows(&p, in.q, in.k, in.v, idx, rows, ro, rl), ATTN_OK, "%s", attn_last_error());
    for (int64_t e = 0; e < n; e++) o[e] = attn_f2h((float)ro[e]);
    for (int64_t r = 0; r < rows; r++) lse[r] = (float)rl[r];
    attn_check c;
    cr_assert_eq(attn_check_output(&in, o, lse, idx, rows, &c), ATTN_OK, "%s", attn_last_error());
    cr_assert(c.pass, "the reference rounded must pass: ratio %g, LSE %g", c.worst_ratio, c.lse_worst_ratio);
    lse[3] = 0.0f; /* a finite LSE for a row that sees no key */
    cr_assert_eq(attn_check_output(&in, o, lse, idx, rows, &c), ATTN_OK);
    cr_assert(!c.pass, "a finite LSE on an empty row must fail");
    memset(&lse[3], 0xff, sizeof lse[3]); /* never written */
    cr_assert_eq(attn_check_output(&in, o, lse, idx, rows, &c), ATTN_OK);
    cr_assert(!c.pass && c.lse_unwritten == 1, "an unwritten LSE on an empty row must fail");
    lse[3] = -INFINITY;
    o[3 * p.D + 5] = 0x7e00; /* a NaN (0/0) where O = 0 */
    cr_assert_eq(attn_check_output(&in, o, lse, idx, rows, &c), ATTN_OK);
    cr_assert(!c.pass && c.nonfinite == 1, "a NaN on an empty row must fail");
    o[3 * p.D + 5] = attn_f2h(0.01f);
    cr_assert_eq(attn_check_output(&in, o, lse, idx, rows, &c), ATTN_OK);
    cr_assert(!c.pass, "an O off zero on an empty row must fail");
    free(idx), free(ro), free(rl), free(o), free(lse);
    attn_inputs_free(&in);
}

/* Short heads go a head per thread (attn_heads_in_parallel), long ones a head at a time with the
 * rows spread over the threads. Both must give the same bits: every row of 21 heads of 19 keys at
 * once (the head-per-thread path) against the same rows asked for one head at a time (19 rows, the
 * other path). */
static void short_heads_match_head_by_head(int causal, attn_dtype t) {
    attn_problem p = attn_problem_make(3, 7, 19, 64, causal);
    p.dtype = t;
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 77 + (uint64_t)causal, ATTN_INIT_NORMAL), ATTN_OK);
    const int64_t rows = attn_rows(&p), N = p.N, D = p.D;
    int64_t *idx = malloc((size_t)rows * sizeof(int64_t));
    double *o = malloc((size_t)(rows * D) * sizeof(double)), *lse = malloc((size_t)rows * sizeof(double));
    double *o1 = malloc((size_t)(rows * D) * sizeof(double)), *lse1 = malloc((size_t)rows * sizeof(double));
    cr_assert(idx && o && lse && o1 && lse1);
    for (int64_t r = 0; r < rows; r++) idx[r] = r;
    cr_assert(attn_heads_in_parallel(&p, rows) && !attn_heads_in_parallel(&p, N),
              "the two paths are not both taken");
    cr_assert_eq(attn_reference_rows(&p, in.q, in.k, in.v, idx, rows, o, lse), ATTN_OK, "%s",
                 attn_last_error());
    for (int64_t r0 = 0; r0 < rows; r0 += N)
        cr_assert_eq(attn_reference_rows(&p, in.q, in.k, in.v, idx + r0, N, o1 + r0 * D, lse1 + r0), ATTN_OK,
                     "%s", attn_last_error());
    for (int64_t e = 0; e < rows * D; e++)
        cr_assert(o[e] == o1[e], "O[%lld]: %.17g at once, %.17g head by head", (long long)e, o[e], o1[e]);
    for (int64_t r = 0; r < rows; r++)
        cr_assert(lse[r] == lse1[r], "LSE[%lld]: %.17g vs %.17g", (long long)r, lse[r], lse1[r]);
    free(idx), free(o), free(lse), free(o1), free(lse1);
    attn_inputs_free(&in);
}

/* The reference reads K and V a head at a time for sorted rows: rows out of range or out of order are
 * refused (ATTN_EINVAL, with the range), never read past the tensors or silently mis-assigned. */
Test(reference, refuses_rows_out_of_range_or_order) {
    attn_problem p = attn_problem_make(1, 2, 5, 8, 0);
    const int64_t last = attn_rows(&p) - 1;
    const int64_t ok[] = {0, 3, 3, last}, past[] = {0, last + 1}, negative[] = {-1}, unsorted[] = {3, 1};
    cr_assert_eq(attn_reference_rows_valid(&p, ok, 4), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(attn_reference_rows_valid(&p, past, 2), ATTN_EINVAL, "row %lld of %lld accepted",
                 (long long)(last + 1), (long long)(last + 1));
    cr_assert(strstr(attn_last_error(), "0..9"), "the message names the range: %s", attn_last_error());
    cr_assert_eq(attn_reference_rows_valid(&p, negative, 1), ATTN_EINVAL);
    cr_assert_eq(attn_reference_rows_valid(&p, unsorted, 2), ATTN_EINVAL, "rows {3, 1} accepted");
    cr_assert(strstr(attn_last_error(), "sorted"), "the message says why: %s", attn_last_error());
}

Test(reference, short_heads_in_parallel_match_head_by_head) {
    short_heads_match_head_by_head(0, ATTN_F16);
    short_heads_match_head_by_head(1, ATTN_BF16);
}

Test(reference, stage01_matches_independent_reference) {
    compare_with_reference(2, 3, 1, 8, 0, ATTN_F16, ATTN_INIT_NORMAL);
    compare_with_reference(2, 3, 17, 5, 1, ATTN_F16, ATTN_INIT_NORMAL);
    compare_with_reference(1, 2, 129, 64, 0, ATTN_F16, ATTN_INIT_NORMAL);
    compare_with_reference(1, 2, 129, 64, 1, ATTN_F16, ATTN_INIT_NORMAL);
    compare_with_reference(1, 1, 70, 1, 1, ATTN_BF16, ATTN_INIT_NORMAL);
    compare_with_reference(1, 1, 200, 256, 0, ATTN_BF16, ATTN_INIT_RISING);
}

Test(reference, large_scores_stay_finite_and_exact) {
    /* Scores in the thousands: exp(s) overflows without the max subtracted. */
    compare_with_reference(1, 2, 100, 64, 0, ATTN_F16, ATTN_INIT_LARGE);
    compare_with_reference(1, 2, 100, 64, 1, ATTN_F16, ATTN_INIT_LARGE);
    compare_with_reference(1, 1, 65, 32, 0, ATTN_F16, ATTN_INIT_FIRST_MAX);
}

/* ---- properties that need no reference ---------------------------------------------------- */

static void run_stage01(const attn_problem *p, attn_inputs *in, uint16_t **o, float **lse) {
    *o = malloc((size_t)attn_qkv_elems(p) * 2);
    *lse = malloc((size_t)attn_rows(p) * 4);
    cr_assert(*o && *lse);
    attn_args a = {.q = in->q, .k = in->k, .v = in->v, .o = *o, .lse = *lse, .gpus = 1};
    cr_assert_eq(stage01_run(p, &a), ATTN_OK, "%s", attn_last_error());
}

Test(reference, rows_of_p_sum_to_one) {
    /* With every v_j = 1, o_i = sum_j p_ij: exactly 1 when each row of P sums to 1. */
    attn_problem p = attn_problem_make(2, 2, 77, 16, 0);
    for (int causal = 0; causal <= 1; causal++) {
        p.causal = causal;
        attn_inputs in;
        cr_assert_eq(attn_inputs_random(&in, &p, 5, ATTN_INIT_NORMAL), ATTN_OK);
        for (int64_t e = 0; e < attn_qkv_elems(&p); e++) in.v[e] = attn_f2h(1.0f);
        uint16_t *o;
        float *lse;
        run_stage01(&p, &in, &o, &lse);
        for (int64_t e = 0; e < attn_qkv_elems(&p); e++)
            cr_assert_eq(o[e], attn_f2h(1.0f), "O[%lld] = %g, want 1 (causal %d)", (long long)e,
                         (double)attn_h2f(o[e]), causal);
        free(o), free(lse);
        attn_inputs_free(&in);
    }
}

Test(reference, causal_row0_is_v0) {
    /* Query 0 sees key 0 alone: p_00 = 1 and o_0 = v_0 exactly. */
    attn_problem p = attn_problem_make(2, 3, 50, 24, 1);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 6, ATTN_INIT_LARGE), ATTN_OK);
    uint16_t *o;
    float *lse;
    run_stage01(&p, &in, &o, &lse);
    for (int64_t bh = 0; bh < p.B * p.H; bh++)
        for (int64_t d = 0; d < p.D; d++)
            cr_assert_eq(o[bh * p.N * p.D + d], in.v[bh * p.N * p.D + d], "head %lld d %lld",
                         (long long)bh, (long long)d);
    free(o), free(lse);
    attn_inputs_free(&in);
}

Test(reference, equal_keys_give_mean_of_v) {
    /* All keys equal: every score of a row is the same, P is uniform, O is the mean of V. */
    attn_problem p = attn_problem_make(1, 2, 33, 8, 0);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 7, ATTN_INIT_NORMAL), ATTN_OK);
    for (int64_t bh = 0; bh < 2; bh++)
        for (int64_t j = 1; j < p.N; j++)
            memcpy(in.k + (bh * p.N + j) * p.D, in.k + bh * p.N * p.D, (size_t)p.D * 2);
    uint16_t *o;
    float *lse;
    run_stage01(&p, &in, &o, &lse);
    for (int64_t bh = 0; bh < 2; bh++)
        for (int64_t d = 0; d < p.D; d++) {
            double mean = 0;
            for (int64_t j = 0; j < p.N; j++) mean += attn_h2f(in.v[(bh * p.N + j) * p.D + d]);
            mean /= (double)p.N;
            for (int64_t i = 0; i < p.N; i++) {
                double got = attn_h2f(o[(bh * p.N + i) * p.D + d]);
                cr_assert(fabs(got - mean) <= 0x1p-11 * fabs(mean) + 1e-7, "O[%lld,%lld,%lld] %g vs %g",
                          (long long)bh, (long long)i, (long long)d, got, mean);
            }
        }
    free(o), free(lse);
    attn_inputs_free(&in);
}

Test(reference, lse_is_direct_log_sum_exp) {
    /* Moderate scores: sum_j exp(s_j) directly, without the max trick, in long double. */
    attn_problem p = attn_problem_make(1, 2, 90, 32, 1);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 8, ATTN_INIT_NORMAL), ATTN_OK);
    uint16_t *o;
    float *lse;
    run_stage01(&p, &in, &o, &lse);
    for (int64_t bh = 0; bh < 2; bh++)
        for (int64_t i = 0; i < p.N; i++) {
            long double sum = 0;
            for (int64_t j = 0; j <= i; j++) {
                long double s = 0;
                for (int64_t d = 0; d < p.D; d++)
                    s += (long double)attn_h2f(in.q[(bh * p.N + i) * p.D + d]) *
                         attn_h2f(in.k[(bh * p.N + j) * p.D + d]);
                sum += expl(s * p.scale);
            }
            double want = (double)logl(sum), got = lse[bh * p.N + i];
            cr_assert(fabs(got - want) <= 4e-7 * (1 + fabs(want)), "LSE[%lld,%lld] %.9g vs %.9g",
                      (long long)bh, (long long)i, got, want);
        }
    free(o), free(lse);
    attn_inputs_free(&in);
}

/* ---- the check itself must be able to fail ------------------------------------------------ */

Test(check, catches_wrong_unwritten_and_nan) {
    attn_problem p = attn_problem_make(2, 2, 40, 16, 1);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 9, ATTN_INIT_NORMAL), ATTN_OK);
    uint16_t *o;
    float *lse;
    run_stage01(&p, &in, &o, &lse);
    int64_t *rows, nrows;
    cr_assert_eq(attn_sample_rows(&p, 1, 16, 3, &rows, &nrows), ATTN_OK);
    cr_assert_eq(nrows, attn_rows(&p), "a small problem is checked whole");
    attn_check c;
    cr_assert_eq(attn_check_output(&in, o, lse, rows, nrows, &c), ATTN_OK);
    cr_assert(c.pass, "stage 01 output must pass: worst ratio %g", c.worst_ratio);

    const int64_t e = (1 * p.N + 20) * p.D + 3; /* one element off by 1% */
    uint16_t keep = o[e];
    o[e] = attn_f2h(attn_h2f(keep) * 1.01f + 0.01f);
    cr_assert_eq(attn_check_output(&in, o, lse, rows, nrows, &c), ATTN_OK);
    cr_assert(!c.pass && c.worst_n == 20 && c.worst_d == 3, "a wrong element must fail and be located");
    o[e] = 0xffff; /* the poison: an element never written */
    cr_assert_eq(attn_check_output(&in, o, lse, rows, nrows, &c), ATTN_OK);
    cr_assert(!c.pass && c.nonfinite == 1, "an unwritten element must fail");
    cr_assert_eq(c.unwritten, 1, "the poison is counted as never written");
    o[e] = 0x7e00; /* a NaN the stage wrote: fails, but it was written */
    cr_assert_eq(attn_check_output(&in, o, lse, rows, nrows, &c), ATTN_OK);
    cr_assert(!c.pass && c.nonfinite == 1 && c.unwritten == 0, "a written NaN is not 'never written'");
    cr_assert(c.lse_nonfinite == 0 && c.lse_unwritten == 0, "a NaN in O is not counted in LSE");
    o[e] = keep;
    const float lse_keep = lse[7];
    lse[7] = INFINITY; /* an LSE that overflowed float32: written, not poison */
    cr_assert_eq(attn_check_output(&in, o, lse, rows, nrows, &c), ATTN_OK);
    cr_assert(!c.pass && c.nonfinite == 1 && c.unwritten == 0, "an infinite LSE is not 'never written'");
    cr_assert(c.lse_nonfinite == 1 && c.lse_unwritten == 0, "an infinite LSE is counted as LSE's");
    memset(&lse[7], 0xff, sizeof lse[7]); /* the LSE poison */
    cr_assert_eq(attn_check_output(&in, o, lse, rows, nrows, &c), ATTN_OK);
    cr_assert(!c.pass && c.nonfinite == 1 && c.unwritten == 1, "the LSE poison is never written");
    cr_assert(c.lse_nonfinite == 1 && c.lse_unwritten == 1, "the LSE poison is counted as LSE's");
    lse[7] = lse_keep;
    lse[5] += 1e-3f; /* LSE off by 1e-3 */
    cr_assert_eq(attn_check_output(&in, o, lse, rows, nrows, &c), ATTN_OK);
    cr_assert(!c.pass && c.lse_worst_ratio > 1.0, "a wrong LSE must fail");
    free(rows), free(o), free(lse);
    attn_inputs_free(&in);
}

Test(check, samples_first_and_last_head_of_large_problems) {
    attn_problem p = attn_problem_make(4, 32, 16384, 128, 0);
    int64_t *rows, nrows;
    cr_assert_eq(attn_sample_rows(&p, 1, 100, 1, &rows, &nrows), ATTN_OK);
    cr_assert(nrows >= 2 * p.N && nrows <= 2 * p.N + 100);
    cr_assert_eq(rows[0], 0);
    cr_assert_eq(rows[p.N - 1], p.N - 1);
    cr_assert_eq(rows[nrows - 1], attn_rows(&p) - 1);
    for (int64_t r = 1; r < nrows; r++) cr_assert(rows[r] > rows[r - 1], "sorted, no duplicates");
    free(rows);
}

/* Without full heads, each sampled row brings its head's first and last row (a stage's tail rows and
 * row 0 are where off-by-ones show). */
Test(check, samples_each_sampled_rows_head_ends) {
    attn_problem p = attn_problem_make(4, 32, 16384, 128, 1);
    int64_t *rows, nrows;
    cr_assert_eq(attn_sample_rows(&p, 0, 40, 7, &rows, &nrows), ATTN_OK);
    cr_assert(nrows > 40 && nrows <= 3 * 40, "40 sampled rows and their heads' ends: got %lld", (long long)nrows);
    int64_t middle = 0;
    for (int64_t r = 0; r < nrows; r++) {
        const int64_t first = rows[r] / p.N * p.N, last = first + p.N - 1;
        int has_first = 0, has_last = 0;
        for (int64_t e = 0; e < nrows; e++) has_first |= rows[e] == first, has_last |= rows[e] == last;
        cr_assert(has_first && has_last, "row %lld is sampled without its head's row %lld or %lld",
                  (long long)rows[r], (long long)first, (long long)last);
        middle += rows[r] != first && rows[r] != last;
        cr_assert(r == 0 || rows[r] > rows[r - 1], "sorted, no duplicates");
    }
    cr_assert(middle > 0, "no sampled row inside a head");
    free(rows);
}

/* ---- the check at large scores: the rule of the range (check.c) ------------------------------ */

/* At --scale 8000 (N = 300, D = 64, normal inputs) the scores reach 1e5 and term (c) of the tolerance,
 * 2 ds Vmax with ds about 1.3, is about 2.6 Vmax: wider than any wrong softmax average can be (2 Vmax),
 * so tol alone passed every O inside [-Vmax, Vmax] there (at 3000, 1 Vmax: O = 0 passed). The rule of
 * the range must fail these and pass every stage. 8000 is about the largest scale these inputs take
 * (attn_inputs_check_scale: |scale| log2(e) D max|q| max|k| <= 2^24, where every stage is accurate;
 * 10000 is refused at N = 300). */
static const float large_scales[] = {3000.0f, 8000.0f};
#define NUM_LARGE_SCALES ((int)(sizeof large_scales / sizeof large_scales[0]))

/* B = 1, H = 2, D = 64 and the harness's normal inputs at this N and scale (0: the default 1/sqrt(D)),
 * which the harness must accept. */
static void scaled_inputs(attn_inputs *in, int64_t N, int causal, attn_dtype t, float scale) {
    attn_problem p = attn_problem_make(1, 2, N, 64, causal);
    p.dtype = t;
    if (scale != 0.0f) p.scale = scale;
    cr_assert_eq(attn_inputs_random(in, &p, 4000 + (uint64_t)N * 2 + (uint64_t)causal, ATTN_INIT_NORMAL),
                 ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(attn_inputs_check_scale(in), ATTN_OK, "%s", attn_last_error());
}

/* Every row of O (and LSE, when not NULL) checked; the check's verdict, with c filled. */
static int check_all_rows(const attn_inputs *in, const uint16_t *o, const float *lse, attn_check *c) {
    const int64_t rows = attn_rows(&in->p);
    int64_t *idx = malloc((size_t)rows * sizeof(int64_t));
    cr_assert(idx);
    for (int64_t r = 0; r < rows; r++) idx[r] = r;
    cr_assert_eq(attn_check_output(in, o, lse, idx, rows, c), ATTN_OK, "%s", attn_last_error());
    free(idx);
    return c->pass;
}

/* Stage `id` (stage 01 or a CPU model) run through its registry entry, as attn_run does, into o and lse. */
static void run_cpu_stage(const char *id, const attn_inputs *in, uint16_t *o, float *lse) {
    const attn_stage *s = attn_find_stage(id);
    cr_assert(s && s->run && !s->on_gpu, "stage %s is not a CPU stage of this build", id);
    attn_args a = {.q = in->q, .k = in->k, .v = in->v, .o = o, .lse = lse, .gpus = 1};
    cr_assert_eq(s->run(&in->p, &a), ATTN_OK, "stage %s: %s", id, attn_last_error());
}

/* The tolerances are the header's formulas, term by term, on a case small enough to work by hand:
 * N = 2, D = 1, q = k = 0, so both scores are 0 (Sabs = 0, ds = 0: ds' = 2^-22, no range rule),
 * p = (1/2, 1/2) with l = 2, v = (1, 0.5): O_ref = M = 0.75, E = 2^-26 (1 + 0.5) = 0.75 2^-25 for fp16
 * (min(p_j, eta / l) = min(1/2, 2^-25 / 2) for both keys), 0 for bf16, LSE_ref = ln 2, and
 *   tol     = 2u 0.75 + 2u 0.75 + 2E + expm1(2^-21) 0.75 + 8 sqrt(2) 2^-24 0.75 + 1e-7
 *   tol_lse = 2^-24 (8 sqrt(2) + 16) + 4 2^-24 ln 2 + 1e-6.
 * Row 0's O and LSE are a few units off, row 1's exact: the worst element reports its tol, and the LSE's
 * worst ratio is its error over tol_lse. */
Test(check, tolerances_are_the_documented_bounds) {
    const double u32 = 0x1p-24;
    for (int t = 0; t <= ATTN_BF16; t++) {
        attn_problem p = attn_problem_make(1, 1, 2, 1, 0);
        p.dtype = (attn_dtype)t;
        attn_inputs in;
        cr_assert_eq(attn_inputs_random(&in, &p, 5, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
        in.q[0] = in.q[1] = in.k[0] = in.k[1] = 0; /* +0 in fp16 and bf16 */
        in.v[0] = attn_from_f32(1.0f, p.dtype), in.v[1] = attn_from_f32(0.5f, p.dtype);
        const double u = attn_unit_roundoff(p.dtype), e = p.dtype == ATTN_F16 ? 0.75 * 0x1p-25 : 0.0;
        const float got = 0.75f + 3.0f * (float)u; /* 3 units of the 16-bit type in [0.5, 1): exact */
        uint16_t o[2] = {attn_from_f32(got, p.dtype), attn_from_f32(0.75f, p.dtype)};
        float lse[2] = {(float)log(2.0) + 1e-6f, (float)log(2.0)};
        attn_check c;
        check_all_rows(&in, o, lse, &c);
        const double tol = 2.0 * u * 0.75 + 2.0 * u * 0.75 + 2.0 * e + expm1(0x1p-21) * 0.75 +
                           8.0 * sqrt(2.0) * u32 * 0.75 + 1e-7;
        const double tol_lse = u32 * (8.0 * sqrt(2.0) + 16.0) + 4.0 * u32 * log(2.0) + 1e-6;
        cr_assert(c.worst_n == 0 && c.worst_got == got && c.worst_want == 0.75 && !c.worst_by_range,
                  "%s: worst [n=%lld] got %.9g want %.9g by range %d", attn_dtype_name(p.dtype),
                  (long long)c.worst_n, c.worst_got, c.worst_want, c.worst_by_range);
        cr_assert(fabs(c.worst_tol - tol) <= 1e-15 && fabs(c.worst_ratio - 3.0 * u / tol) <= 1e-12,
                  "%s: O's tol %.17g, want %.17g (ratio %.17g)", attn_dtype_name(p.dtype), c.worst_tol, tol,
                  c.worst_ratio);
        const double lse_err = fabs((double)lse[0] - log(2.0));
        cr_assert(fabs(c.max_lse_err - lse_err) <= 1e-15 &&
                      fabs(c.lse_worst_ratio - lse_err / tol_lse) <= 1e-12 * c.lse_worst_ratio,
                  "%s: LSE err %.17g ratio %.17g, want %.17g and %.17g", attn_dtype_name(p.dtype),
                  c.max_lse_err, c.lse_worst_ratio, lse_err, lse_err / tol_lse);
        cr_assert(c.pass == (3.0 * u <= tol && lse_err <= tol_lse), "the verdict is the ratios'");
        attn_inputs_free(&in);
    }
}

/* The tolerance of an element is made of its own column's magnitudes, M_d = sum_j p_j |v_jd|, not of the
 * largest |v| the row sees. N = 2, D = 2, q = k = 0 (p = (1/2, 1/2)), v = ((1024, 1), (-1024, 0.5)):
 * O_ref = (0, 0.75), M = (1024, 0.75). O_1 off by 2^-8 (8 units of fp16 in [0.5, 1), 2.7 times its
 * tolerance of about 3u + 4.6e-7) must fail; the rule before took 2u 1024 + ... = 1 for it. */
Test(check, tolerance_is_the_columns_own) {
    attn_problem p = attn_problem_make(1, 1, 2, 2, 0);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 5, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    for (int e = 0; e < 4; e++) in.q[e] = in.k[e] = 0;
    in.v[0] = attn_f2h(1024.0f), in.v[1] = attn_f2h(1.0f), in.v[2] = attn_f2h(-1024.0f), in.v[3] = attn_f2h(0.5f);
    const float got = 0.75f + 0x1p-8f;
    uint16_t o[4] = {attn_f2h(0.0f), attn_f2h(got), attn_f2h(0.0f), attn_f2h(0.75f)};
    attn_check c;
    cr_assert(!check_all_rows(&in, o, NULL, &c), "O_1 off by 2^-8 passed: worst ratio %g", c.worst_ratio);
    const double u = 0x1p-11, tol = 2.0 * u * 0.75 + 2.0 * u * 0.75 + 2.0 * 0.75 * 0x1p-25 +
                                     expm1(0x1p-21) * 0.75 + 8.0 * sqrt(2.0) * 0x1p-24 * 0.75 + 1e-7;
    cr_assert(c.worst_n == 0 && c.worst_d == 1 && fabs(c.worst_tol - tol) <= 1e-15,
              "worst [n=%lld d=%lld] tol %.17g, want [n=0 d=1] tol %.17g", (long long)c.worst_n,
              (long long)c.worst_d, c.worst_tol, tol);
    cr_assert(fabs(c.worst_ratio - 0x1p-8 / tol) <= 1e-12 && c.worst_ratio > 2.5, "ratio %g", c.worst_ratio);
    attn_inputs_free(&in);
}

Test(check, large_scores_fail_zero_output) {
    for (int i = 0; i < NUM_LARGE_SCALES; i++)
        for (int causal = 0; causal <= 1; causal++) {
            attn_inputs in;
            scaled_inputs(&in, 300, causal, ATTN_F16, large_scales[i]);
            uint16_t *o = calloc((size_t)attn_qkv_elems(&in.p), 2); /* +0.0 in fp16 */
            attn_check c;
            cr_assert(o);
            cr_assert(!check_all_rows(&in, o, NULL, &c),
                      "O = 0 passed at scale %g, causal %d: worst ratio %g", (double)large_scales[i], causal,
                      c.worst_ratio);
            free(o);
            attn_inputs_free(&in);
        }
}

Test(check, large_scores_fail_next_keys_value) {
    /* O_i = v_{i+1} (the last row takes v_0): the value of the wrong key, the classic off-by-one */
    for (int i = 0; i < NUM_LARGE_SCALES; i++)
        for (int causal = 0; causal <= 1; causal++) {
            attn_inputs in;
            scaled_inputs(&in, 300, causal, ATTN_F16, large_scales[i]);
            const int64_t rows = attn_rows(&in.p), D = in.p.D;
            uint16_t *o = malloc((size_t)attn_qkv_elems(&in.p) * 2);
            cr_assert(o);
            for (int64_t r = 0; r < rows; r++) memcpy(o + r * D, in.v + (r + 1) % rows * D, (size_t)D * 2);
            attn_check c;
            cr_assert(!check_all_rows(&in, o, NULL, &c),
                      "O_i = V_i+1 passed at scale %g, causal %d: worst ratio %g", (double)large_scales[i],
                      causal, c.worst_ratio);
            free(o);
            attn_inputs_free(&in);
        }
}

/* E_d of the check's header for one row and column of a causal fp16 head: sum_j min(p_j, 2^-25 / l) |v_jd|
 * over the keys 0 .. row, from scores computed here in double. */
static double subnormal_share(const attn_inputs *in, int64_t row, int64_t d) {
    const int64_t D = in->p.D;
    double s[512], m = -INFINITY, l = 0.0, e = 0.0;
    cr_assert(row < 512);
    for (int64_t j = 0; j <= row; j++) {
        s[j] = 0.0;
        for (int64_t x = 0; x < D; x++) s[j] += (double)attn_h2f(in->q[row * D + x]) * attn_h2f(in->k[j * D + x]);
        s[j] *= in->p.scale;
        m = fmax(m, s[j]);
    }
    for (int64_t j = 0; j <= row; j++) l += exp(s[j] - m);
    for (int64_t j = 0; j <= row; j++) e += fmin(exp(s[j] - m), 0x1p-25) / l * fabs(attn_h2f(in->v[j * D + d]));
    return e;
}

Test(check, large_scores_fail_output_outside_range_of_v) {
    /* 04m-no-alpha's symptom: an element outside the range of v over every key the row sees (no
     * average of them can be there), a quarter of Vmax past it; the rest of O correct (stage 01). */
    attn_inputs in;
    scaled_inputs(&in, 300, 1, ATTN_F16, 8000.0f);
    const int64_t D = in.p.D, row = 150, d = 5;
    uint16_t *o = malloc((size_t)attn_qkv_elems(&in.p) * 2);
    float *lse = malloc((size_t)attn_rows(&in.p) * 4);
    cr_assert(o && lse);
    run_cpu_stage("01", &in, o, lse);
    attn_check c;
    cr_assert(check_all_rows(&in, o, lse, &c), "stage 01 failed: worst ratio %g", c.worst_ratio);
    double hi = -INFINITY, vmax = 0.0;
    for (int64_t j = 0; j <= row; j++) { /* causal: keys 0 .. row */
        for (int64_t e = 0; e < D; e++) vmax = fmax(vmax, fabs(attn_h2f(in.v[j * D + e])));
        hi = fmax(hi, attn_h2f(in.v[j * D + d]));
    }
    o[row * D + d] = attn_f2h((float)(hi + 0.25 * vmax));
    cr_assert(!check_all_rows(&in, o, lse, &c), "O = %g past max v = %g passed: worst ratio %g",
              (double)attn_h2f(o[row * D + d]), hi, c.worst_ratio);
    cr_assert(c.worst_n == row && c.worst_d == d, "the wrong element must be the worst: n %lld d %lld",
              (long long)c.worst_n, (long long)c.worst_d);
    /* and the report says which rule caught it, with the range (attn --check prints both) */
    cr_assert(c.worst_by_range && c.worst_lo <= c.worst_hi && c.worst_hi < attn_h2f(o[row * D + d]),
              "by_range %d, range [%g, %g]", c.worst_by_range, c.worst_lo, c.worst_hi);
    /* its tol reaches the range's edge widened by the header's
     * w = (4u + 8 sqrt(N) u32 + 5e-9) Vmax + 2 E_d + 1e-7 */
    const double w = (4.0 * 0x1p-11 + 8.0 * sqrt(300.0) * 0x1p-24 + 5e-9) * vmax + 2.0 * subnormal_share(&in, row, d) + 1e-7;
    cr_assert(fabs(c.worst_tol - (c.worst_hi + w - c.worst_want)) <= 1e-12,
              "tol %.17g, the edge hi + w - want %.17g", c.worst_tol, c.worst_hi + w - c.worst_want);
    free(o), free(lse);
    attn_inputs_free(&in);
}

/* Stage `id`'s O (and LSE) at this shape must pass the check; the failure is reported, not fatal. */
static void stage_passes(const char *id, attn_dtype t, int64_t N, int causal, float scale) {
    attn_inputs in;
    scaled_inputs(&in, N, causal, t, scale);
    uint16_t *o = malloc((size_t)attn_qkv_elems(&in.p) * 2);
    float *lse = malloc((size_t)attn_rows(&in.p) * 4);
    cr_assert(o && lse);
    run_cpu_stage(id, &in, o, lse);
    attn_check c;
    cr_expect(
        check_all_rows(&in, o, attn_find_stage(id)->writes_lse ? lse : NULL, &c),
        "stage %s %s N=%lld causal %d scale %g failed: [n=%lld d=%lld] got %g want %g tol %g (ratio %g), "
        "LSE ratio %g",
        id, attn_dtype_name(t), (long long)N, causal, (double)in.p.scale, (long long)c.worst_n,
        (long long)c.worst_d, c.worst_got, c.worst_want, c.worst_tol, c.worst_ratio, c.lse_worst_ratio);
    free(o), free(lse);
    attn_inputs_free(&in);
}

/* Stage 01 and the CPU models, each dtype they take, at N not a multiple of 64, causal and not. */
static void correct_stages_pass(float scale) {
    static const char *ids[] = {"01", "03m", "04m", "05m", "06m"};
    static const int64_t Ns[] = {77, 300};
    for (int s = 0; s < (int)(sizeof ids / sizeof ids[0]); s++)
        for (int t = 0; t <= ATTN_BF16; t++)
            for (int n = 0; n < 2 && (attn_find_stage(ids[s])->dtypes & ATTN_DTYPE_BIT(t)); n++)
                for (int causal = 0; causal <= 1; causal++)
                    stage_passes(ids[s], (attn_dtype)t, Ns[n], causal, scale);
}

Test(check, large_scores_pass_every_cpu_stage) {
    for (int i = 0; i < NUM_LARGE_SCALES; i++) correct_stages_pass(large_scales[i]);
}

Test(check, default_scale_passes_every_cpu_stage) { correct_stages_pass(0.0f); }

/* The largest |scale| attn_inputs_check_scale takes for these inputs, less 2^-10 of it: the bound
 * |scale| log2(e) D max|q| max|k| <= 2^24 (stages 03-05's |scale| log2(e) max|q| <= 2^120 is far
 * looser). */
static float largest_scale(const attn_inputs *in) {
    const int64_t n = attn_qkv_elems(&in->p);
    double qmax = 0.0, kmax = 0.0;
    for (int64_t e = 0; e < n; e++) {
        qmax = fmax(qmax, fabs((double)attn_to_f32(in->q[e], in->p.dtype)));
        kmax = fmax(kmax, fabs((double)attn_to_f32(in->k[e], in->p.dtype)));
    }
    return (float)(ATTN_MAX_SCORE_LOG2 / (1.4426950408889634 * (double)in->p.D * qmax * kmax) * (1.0 - 0x1p-10));
}

/* Issue 58: a correct stage passes at every scale the suite accepts, and at the smallest N. Stage 01
 * and the CPU models, each dtype, causal and not, at N = 1, 2, 17 and 300, with |scale| = FLT_MIN (the
 * smallest --scale takes: every score about 0, O the mean of V), the default 1/8 and the largest the
 * inputs take (scores up to 2^24 / log2(e), one key per row all but alone), each with either sign. */
Test(check, extreme_scales_and_small_n_pass_every_cpu_stage) {
    static const char *ids[] = {"01", "03m", "04m", "05m", "06m"};
    static const int64_t Ns[] = {1, 2, 17, 300};
    for (int s = 0; s < (int)(sizeof ids / sizeof ids[0]); s++)
        for (int t = 0; t <= ATTN_BF16; t++)
            for (int n = 0; n < 4 && (attn_find_stage(ids[s])->dtypes & ATTN_DTYPE_BIT(t)); n++)
                for (int causal = 0; causal <= 1; causal++) {
                    attn_inputs in;
                    scaled_inputs(&in, Ns[n], causal, (attn_dtype)t, 0.0f);
                    const float scales[] = {FLT_MIN, 0.125f, largest_scale(&in)};
                    attn_inputs_free(&in);
                    for (int k = 0; k < 6; k++) /* N = 300 at the default scale: the tests above */
                        if (Ns[n] < 300 || k / 2 != 1)
                            stage_passes(ids[s], (attn_dtype)t, Ns[n], causal, k % 2 ? -scales[k / 2] : scales[k / 2]);
                }
}
