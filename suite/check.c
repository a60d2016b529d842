/*
 * check.c: a stage's output against the independent double reference (reference.c), on chosen rows.
 * Every stage, stage 01 included, is compared with that one reference, never with itself.
 *
 * The tolerance, element by element, from what that element is made of (u = unit roundoff of the
 * 16-bit type: 2^-11 for fp16, 2^-8 for bf16; u32 = 2^-24, that of fp32). For row i, over the keys j
 * it sees, with the exact weights p_j = e^(s_j - m) / l (m = max_j s_j, l = sum_j e^(s_j - m)):
 *     O_d = sum_j p_j v_jd,   M_d = sum_j p_j |v_jd|   (|O_d| <= M_d).
 * A stage that reads the same 16-bit Q, K, V and computes in fp32 can differ from the exact O_d through:
 *   (a) rounding O to 16 bits: <= u |O_d| (under fp16's normal range, 2^-14, at most 2^-25: in the 1e-7).
 *   (b) rounding P to 16 bits before P V (stages 02 and 06 on feed 16-bit probabilities to the
 *       product, as frameworks and FlashAttention do): each term p_j v_jd is off by at most
 *       u p_j |v_jd|, u M_d in all (l sums the unrounded P). Under fp16's normal range a P' is rounded
 *       to a multiple of 2^-24 instead: off by at most min(P', eta), eta = 2^-25, which u P' does not
 *       cover. Stages 06 on round P' = e^(s_j - m') <= 1, m' the running max (<= m), and scale it by
 *       alpha = e^(m' - m) <= 1 later: an error of at most min(e^(s_j - m), eta) where the row sums to l,
 *       min(p_j, eta / l) once divided by l, so E_d = sum_j min(p_j, eta / l) |v_jd| in all. (bf16
 *       shares fp32's exponent range: eta = 0; a P' under fp32's 2^-126, flushed by ex2.approx.ftz, is
 *       N 2^-126 in all, inside the 1e-7.) Stage 10 rounds each GPU's partial O_g to 16 bits before
 *       merging them with weights w_g: u sum_g w_g |O_gd| <= u M_d more, a second u M_d.
 *   (c) fp32 scores: s'_j = scale * q.k_j summed over D terms is off by at most
 *       ds = u32 * (D + 16) * Sabs, with Sabs = max_j scale * sum_d |q_d k_jd| (Higham's bound
 *       gamma_D, valid for any summation order, also for tensor cores that truncate; the 16 covers
 *       the scale and log2(e) multiplies, the max subtraction and, where Sabs >= 1/4, ex2.approx's
 *       2^-22 relative error). The exponential's error is a shift of at most 2^-22 of its own, whatever
 *       Sabs: ds' = ds + 2^-22 in all. Scores each shifted by at most ds' move every weight by a factor
 *       within e^(+-2 ds') (its own exponential one way, the normaliser the other):
 *       |p'_j - p_j| <= expm1(2 ds') p_j, and O_d by at most expm1(2 ds') M_d.
 *   (d) fp32 sums over N keys of p v and of p (and the rescales by alpha): each rounding is at most
 *       u32 times a partial sum, itself at most M_d for p v (at most 1 for p, relative to l, which
 *       moves O_d by |O_d| <= M_d times that). N roundings of either sign, independent, add up as a
 *       random walk of standard deviation sqrt(N / 3) u32 M_d at most: 4 sqrt(N) u32 M_d per sum is 6.9
 *       of them, 8 sqrt(N) u32 M_d for the two. (Not the worst case: that, N u32 M_d, is M_d / 16 at
 *       N = 2^20 and would check nothing.) Here and below N counts the keys a row's sums run over:
 *       N_k where it differs from the queries' N (common/attn.h), as in ln N of the reach.
 * tol = 2u|O_ref| + 2u M_d + 2 E_d + expm1(2 ds') M_d + 8 sqrt(N) u32 M_d + 1e-7: (a) and (b) doubled,
 * for stage 10's second rounding and as headroom (FlashAttention's own rule allows twice the error of
 * a same-precision naive computation; it also covers u |O'| and u sum_j p'_j |v_jd| of the stage's own
 * O' and p' against the exact ones, and E_d's e^(2 ds') for ds' up to 0.34), (c) and (d) as derived.
 * The reference computes M_d and E_d from its own p_j (reference.c). For LSE (float32, natural log):
 * tol_lse = ds + u32 (8 sqrt(N) + 16) + 4 u32 |LSE_ref| + 1e-6.
 *
 * Why this does not weaken with N. Every term is a share of M_d (or |O_d|): the tolerance of an
 * element scales with the products it is summed from, as |O_d| does, not with the largest |v| (the rule
 * before this one had Vmax = max |v_jd| over the keys the row sees and every d where M_d stands in (b),
 * (c) and (d): about 5 for normal V at N = 16385, against M_d's 0.8). A stage that loses key j is off by
 * p_j |v_jd - O_d|, a bug of the scale or the mask by a share of M_d of its own size. Measured on the CPU
 * models at B = H = 1, D = 64, N = 16385 (tests/mutants/): 06m without the last key's share of O passes
 * the old rule over all 16385 rows (err/tol 0.618, as issue 58 found) and fails this one (3.76); each
 * forward mutant there fails at N = 129, 4097 and 16385. What no bound that holds for every input can
 * see: an error under u M_d. One key of N lost moves O_d by p_j |v_jd - O_d|, with p_j = e^(s_j - m) / l
 * about e^(s_j) / (1.65 N) for normal inputs: at N = 2^20 and s_j = 4, 1e-4 at |v_jd - O_d| = 3, under
 * 2u M_d = 7.8e-4. P' that round the same way (repeated keys) do reach (b)'s worst case; only a
 * statistical rule, which such inputs would break, could look further.
 * Stage 02 rounds the normalised p_j itself, so its subnormal error is min(p_j, eta), not min(p_j,
 * eta / l): covered here only while those roundings do not all go one way. For random inputs they are
 * independent, of standard deviation eta sqrt(N) rms|v| at most: 1.1e-5 rms|v| at the largest N stage
 * 02 fits in an H200's 141 GB (6 N^2 bytes: about 2^17), against 2u M_d = 7.8e-4 for normal V.
 *
 * The rule of the range. Term (c) grows with the scores without limit: at --scale 8000 (N = 300,
 * D = 64, about the largest scale attn_inputs_check_scale lets these inputs take) ds is about 1.3 and
 * tol about 2.6 Vmax, while no softmax average can be off by more than 2 Vmax: tol alone passed every
 * O inside [-Vmax, Vmax], right or wrong (05m with its mask on the wrong side: got 1.98, want -1.66,
 * tol 6.6, PASS; 04m without alpha: got -7.17, outside the range of V, tol 13, PASS; O = 0 passed
 * from scale 3000 up). A second condition stays tight where the scores are large. The stage's scores
 * s'_j are each within ds of the exact s_j (c); let m = max_j s_j over the keys the row sees and
 *     reach = 2 ds (1 + 2^-20) + ln N + 20.
 * A far key, s_j < m - reach, has s'_j < s'_jmax - ln N - 20 (jmax the exact max's key, whose s' is at
 * least m - ds): its weight is below e^-20 / N of the total, and the far keys together weigh eps <= e^-20
 * = 2.1e-9. The softmax average over s' is then (1 - eps) times an average over the near keys
 * A = {j : s_j >= m - reach} plus eps times one over the far keys, so it lies within [lo_d, hi_d] =
 * [min_{j in A} v_jd, max_{j in A} v_jd] widened by 2 eps Vmax <= 5e-9 Vmax. Rounding V is no error
 * (V is read as 16 bits); the rest, (a), (b) and (d), adds at most u|O| + u Vmax + E_d + 8 sqrt(N) u32
 * Vmax with |O| <= M_d <= Vmax. With (a) and (b) doubled as in tol, an element must also lie in
 *     [lo_d - w, hi_d + w],   w = (4u + 8 sqrt(N) u32 + 5e-9) Vmax + 2 E_d + 1e-7.
 * The s_j are the reference's own double scores (reference.c), off by at most (D + 1) 2^-53 Sabs each,
 * under 2^-29 of ds: the factor 1 + 2^-20 in reach covers that in m and in s_j. The reference's O is
 * such an average itself (ds = 0): O_ref lies inside [lo_d - w, hi_d + w] by 4u Vmax + 1e-7 at least,
 * and the two rules give one ratio, err / tol', with tol' = min(tol, the distance from O_ref to the
 * range's edge on got's side) > 0: what the worst element reports as its tol. The range is taken only
 * for rows where term (c) is tol's largest part, 2 ds > 4u + 8 sqrt(N) u32 (fp16 at N = 4096:
 * ds > 2^-10 + 2^-16). Below that tol is within three times its value without (c), already tight, and
 * at ordinary scores every key is near, so that the range is all of V's and its walk over every key
 * would only cost time: 45% more for the check (1.07 s to 1.54 s for the 8416 rows of B = 2, H = 8,
 * N = 4096, D = 64 on 2 cores).
 *
 * A row that sees no key (causal with N > N_k, common/attn.h) has O_ref = 0, Vmax = Sabs = 0 and so
 * tol = 1e-7: its O must be 0, and its LSE exactly -inf (a finite LSE or a NaN there fails).
 *
 * The check fails on the maximum of |err| / tol' over every checked element (never on a mean), on
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
#define EXP_ERR 0x1p-22             /* ex2.approx's relative error, a shift of the scores: (c) */
#define ETA_F16 0x1p-25             /* half of fp16's subnormal spacing: (b) */

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
    const int64_t N = in->p.N_k, D = in->p.D;
    const attn_span s = attn_head_span(&in->p, bh);
    const uint16_t *k = in->k + s.k0 * D, *v = in->v + s.k0 * D;
    const attn_dtype t = in->p.dtype;
    float *kabs = head, *vkey = kabs + N * D;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t j = 0; j < s.n_k; j++) {
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
    const attn_span s = attn_head_span(p, attn_row_head(p, c->rows[r]));
    const int64_t N = p->N_k, D = p->D, row = c->rows[r], nvis = attn_keys_seen(p->causal, s.n, s.n_k, row - s.q0);
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
    const int64_t N = in->p.N_k, D = in->p.D;
    bounds_walk c = {in, rows, vmax, sabs};
    const attn_head_walk w = {(size_t)(N * D + N) * sizeof(float), (size_t)N * sizeof(double), bounds_decode,
                              bounds_row, &c};
    if (attn_walk_heads(&in->p, rows, nrows, &w))
        return attn_fail(ATTN_ENOMEM, "check: cannot allocate one head of |K| or its sums (N_k = %lld)",
                         (long long)N);
    return ATTN_OK;
}

/* What one row's tolerances are made of: the dtype's unit roundoff u, sqrt(N), the row's rounding
 * error of the scores ds (float32 dot products of D + 16 terms of |q||k|), its largest |v|, vm, the
 * range of V near its max, lo[d] .. hi[d] (-inf .. +inf where the rule of the range is not used), and
 * its magnitudes M_d = sum_j p_j |v_jd| (mag) and E_d = sum_j min(p_j, eta / l) |v_jd| (sub). */
typedef struct {
    double u, sqrtN, ds, vm;
    const double *lo, *hi, *mag, *sub;
} row_scale;

/* The rule of the range is used where term (c) is tol's largest part: 2 ds > 4u + 8 sqrt(N) u32. */
static int range_helps(const row_scale *k) { return 2.0 * k->ds > 4.0 * k->u + 8.0 * k->sqrtN * U32; }

/* How far from each row's max the range of V is taken (-1: not at all): 2 ds (1 + 2^-20) + ln N + 20. */
static double range_reach(const row_scale *k, double N) {
    return range_helps(k) ? 2.0 * k->ds * (1.0 + 0x1p-20) + log(N) + 20.0 : -1.0;
}

/* Element (row, d) as the worst so far. */
static void note_worst(attn_check *c, const attn_problem *p, int64_t row, int64_t d, double ratio, double got,
                       double want, double tol) {
    c->worst_ratio = ratio;
    const int64_t bh = attn_row_head(p, row);
    c->worst_b = bh / p->H, c->worst_h = bh % p->H;
    c->worst_n = row - attn_head_span(p, bh).q0, c->worst_d = d;
    c->worst_got = got, c->worst_want = want, c->worst_tol = tol;
    c->worst_by_range = 0;
}

/* The tolerance of element d toward got's side of want: tol, or less where the range's edge is nearer
 * (*by_range = 1). */
static double tolerance(const row_scale *k, double got, double want, int64_t d, int *by_range) {
    const double m = k->mag[d], e2 = 2.0 * k->sub[d];
    const double tol = 2.0 * k->u * (fabs(want) + m) + e2 + expm1(2.0 * (k->ds + EXP_ERR)) * m +
                       8.0 * k->sqrtN * U32 * m + 1e-7;
    const double w = (4.0 * k->u + 8.0 * k->sqrtN * U32 + 5e-9) * k->vm + e2 + 1e-7;
    const double edge = got > want ? k->hi[d] + w - want : want - (k->lo[d] - w);
    *by_range = edge < tol;
    return fmin(tol, edge);
}

/* Row `row` of O against want[0..D-1]; a non-finite element is the worst one (the first of them kept). */
static void check_o_row(attn_check *c, const attn_problem *p, int64_t row, const uint16_t *o,
                        const double *want, const row_scale *k, double *err2, double *ref2) {
    for (int64_t d = 0; d < p->D; d++) {
        const double got = (double)attn_to_f32(o[row * p->D + d], p->dtype);
        if (!isfinite(got)) {
            c->unwritten += o[row * p->D + d] == 0xffff;
            if (c->nonfinite++ == 0 || c->worst_ratio < INFINITY)
                note_worst(c, p, row, d, INFINITY, got, want[d], 0.0);
            continue;
        }
        int by_range;
        const double err = fabs(got - want[d]), tol = tolerance(k, got, want[d], d, &by_range);
        *err2 += err * err;
        *ref2 += want[d] * want[d];
        if (err > c->max_abs_err) c->max_abs_err = err;
        if (err / tol > c->worst_ratio) {
            note_worst(c, p, row, d, err / tol, got, want[d], tol);
            c->worst_by_range = by_range, c->worst_lo = k->lo[d], c->worst_hi = k->hi[d];
        }
    }
}

/* LSE of row `row` against want: float32 sums of up to N terms, then a log. */
static void check_lse_row(attn_check *c, const float *lse, int64_t row, double want, const row_scale *k) {
    const double got = (double)lse[row];
    if (want == -INFINITY && got == -INFINITY) return; /* a row that sees no key: the contract's -inf */
    if (!isfinite(got)) {
        uint32_t bits;
        memcpy(&bits, &lse[row], sizeof bits);
        c->unwritten += bits == 0xffffffffu, c->lse_unwritten += bits == 0xffffffffu;
        c->nonfinite++, c->lse_nonfinite++;
        c->lse_worst_ratio = INFINITY;
        c->max_lse_err = INFINITY;
        return;
    }
    if (want == -INFINITY) { /* no key, and a finite LSE: no tolerance reaches -inf */
        c->lse_worst_ratio = INFINITY;
        c->max_lse_err = INFINITY;
        return;
    }
    const double err = fabs(got - want);
    const double tol = k->ds + U32 * (8.0 * k->sqrtN + 16.0) + 4.0 * U32 * fabs(want) + 1e-6;
    if (err > c->max_lse_err) c->max_lse_err = err;
    if (err / tol > c->lse_worst_ratio) c->lse_worst_ratio = err / tol;
}

/* Row r's tolerance scale; x holds the rows' ranges of V and magnitudes (NULL before they are known). */
static row_scale scale_of_row(const attn_problem *p, int64_t r, const double *vmax, const double *sabs,
                              const attn_reference_extras *x) {
    const double u = attn_unit_roundoff(p->dtype), ds = U32 * (double)(p->D + 16) * sabs[r];
    row_scale k = {u, sqrt((double)p->N_k), ds, vmax[r], NULL, NULL, NULL, NULL}; /* the sums run over N_k keys */
    if (x) k.lo = x->lo + r * p->D, k.hi = x->hi + r * p->D, k.mag = x->mag + r * p->D, k.sub = x->sub + r * p->D;
    return k;
}

/* One block per check: O_ref, lo, hi, M and E (D doubles a row each), then LSE_ref, Vmax, Sabs and the
 * reach. */
attn_status attn_check_output(const attn_inputs *in, const uint16_t *o, const float *lse,
                              const int64_t *rows, int64_t nrows, attn_check *c) {
    const attn_problem *p = &in->p;
    const int64_t D = p->D, nr = nrows > 0 ? nrows : 1;
    memset(c, 0, sizeof *c);
    double *ref_o = attn_alloc((size_t)(nr * (5 * D + 4)) * sizeof(double));
    if (!ref_o)
        return attn_fail(ATTN_ENOMEM, "check: cannot allocate the reference for %lld rows", (long long)nrows);
    double *lo = ref_o + nr * D, *ref_lse = lo + 4 * nr * D, *vmax = ref_lse + nr, *sabs = vmax + nr,
           *reach = sabs + nr;
    const attn_reference_extras x = {reach, p->dtype == ATTN_F16 ? ETA_F16 : 0.0, lo, lo + nr * D, lo + 2 * nr * D,
                                     lo + 3 * nr * D};
    attn_status st = attn_reference_rows_valid(p, rows, nrows);
    if (st == ATTN_OK) st = row_bounds(in, rows, nrows, vmax, sabs);
    for (int64_t r = 0; r < nrows && st == ATTN_OK; r++) {
        const row_scale k = scale_of_row(p, r, vmax, sabs, NULL);
        reach[r] = range_reach(&k, (double)p->N_k);
    }
    if (st == ATTN_OK) st = attn_reference_rows_extras(p, in->q, in->k, in->v, rows, nrows, &x, ref_o, ref_lse);
    if (st == ATTN_OK) {
        double err2 = 0.0, ref2 = 0.0;
        c->rows_checked = nrows;
        c->lse_checked = lse != NULL;
        for (int64_t r = 0; r < nrows; r++) {
            const row_scale k = scale_of_row(p, r, vmax, sabs, &x);
            check_o_row(c, p, rows[r], o, ref_o + r * D, &k, &err2, &ref2);
            if (lse) check_lse_row(c, lse, rows[r], ref_lse[r], &k);
        }
        c->rel_l2 = ref2 > 0.0 ? sqrt(err2 / ref2) : sqrt(err2);
        c->pass = c->nonfinite == 0 && c->worst_ratio <= 1.0 && c->lse_worst_ratio <= 1.0;
    }
    free(ref_o);
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
    const attn_span first = attn_head_span(p, 0), last = attn_head_span(p, BH - 1);
    /* Small problems are checked whole: up to 2^31 multiply-adds of reference work (N_k keys a row). */
    const int all = (double)total * (double)p->N_k * (double)p->D <= 2147483648.0;
    int64_t cap = all ? total : (full_heads ? 2 * N : 0) + extra + 2 * extra;
    int64_t *rows = attn_alloc((size_t)(cap > 0 ? cap : 1) * sizeof(int64_t));
    if (!rows) return attn_fail(ATTN_ENOMEM, "check: cannot allocate the row sample");
    int64_t n = 0;
    if (all) {
        for (int64_t r = 0; r < total; r++) rows[n++] = r;
    } else {
        if (full_heads) {
            for (int64_t i = 0; i < first.n; i++) rows[n++] = first.q0 + i; /* first (b, h) */
            if (BH > 1)
                for (int64_t i = 0; i < last.n; i++) rows[n++] = last.q0 + i; /* last (b, h) */
        }
        for (int64_t e = 0; e < extra; e++) {
            const int64_t r = (int64_t)(mix64(seed * 0x100000001b3ull + (uint64_t)e) % (uint64_t)total);
            rows[n++] = r;
            if (!full_heads) { /* the first and last row of the sampled row's head too */
                const attn_span s = attn_head_span(p, attn_row_head(p, r));
                rows[n++] = s.q0;
                rows[n++] = s.q0 + s.n - 1;
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
