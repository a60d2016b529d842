/*
 * check_backward.c: a backward stage's dQ, dK and dV against the independent double reference
 * (reference_backward.c), element by element, with a tolerance derived from the arithmetic any such
 * stage does. Like check.c for the forward, and with the same constants: u = unit roundoff of the
 * 16-bit type (2^-11 fp16, 2^-8 bf16), u32 = 2^-24.
 *
 * What a stage computes. It reads the 16-bit Q, K, V, dO, and the O' and LSE' its forward wrote; in
 * fp32 it recomputes the scores s'_ij, P'_ij = exp(s'_ij - LSE'_i) (through exp2 with log2(e) folded
 * in), D'_i = dO_i . O'_i, dP'_ij = dO_i . v_j and dS'_ij = P'_ij (dP'_ij - D'_i), may round P' and dS'
 * to 16 bits before they enter a product (tensor cores take 16-bit operands), sums the three products
 * in fp32 and rounds the gradients to 16 bits. Its errors against the exact values, row i, key j:
 *   (a) P: s' is off by at most ds_i = u32 (D + 16) Sabs_i (check.c's term (c), Sabs_i = max_j |scale|
 *       sum_d |q_id k_jd|), LSE' by dL_i = |LSE'_i - LSE_i| (measured: the forward was checked on its
 *       own), and the exponent's own rounding (LSE_i log2(e) in fp32, ex2.approx's 2^-22) by
 *       u32 (4 |LSE_i| + 8). With eps_i their sum, P'_ij = P_ij e^x (1 + r), |x| <= eps_i, |r| <= u when
 *       P' is rounded to 16 bits:  |P'_ij - P_ij| <= a_i P_ij,  a_i = expm1(eps_i) (1 + u) + u.
 *   (b) D: |D'_i - D_i| <= b_i = sum_d |dO_id| |O'_id - O_id| + u32 (D + 2) sum_d |dO_id| |O'_id|
 *       (O' measured against the reference's O; then an fp32 sum of D products).
 *   (c) dP: an fp32 sum of D exact products, |dP'_ij - dP_ij| <= u32 (D + 2) A_ij, A_ij = sum_d |dO_id v_jd|.
 *   (d) dS, to first order in the small terms, and rounded to 16 bits (relative u):
 *       |dS'_ij - dS_ij| <= P_ij ((a_i + u (1 + a_i)) |dP_ij - D_i| + (1 + a_i)(1 + u)(u32 (D + 2) A_ij + b_i))
 *   (e) the sums of N terms in fp32 (over tiles, in any order, through atomics or not) and the final
 *       multiply by scale: g |term| per term, g = 8 sqrt(N) u32 + 2 u32 (check.c's term (d), and one
 *       rounding each for the scale and the sum's last add);
 *   (f) fp16 has subnormals below 2^-14: a tiny P' or dS' rounds to a multiple of 2^-24, an absolute
 *       error of eta = 2^-25 per term that (a) and (d) do not cover (bf16's floor, 2^-134, is nothing);
 *   (g) rounding the gradient to 16 bits: u |grad|.
 * Summed over the products dV_j = sum_i P_ij dO_i, dK_j = scale sum_i dS_ij q_i, dQ_i = scale sum_j
 * dS_ij k_j, with w_ij = P_ij (alpha_i |dP_ij - D_i| + beta_i A_ij + gamma_i) + eta, where
 *     alpha_i = a_i + u (1 + a_i) + g,  beta_i = (1 + a_i)(1 + u) u32 (D + 2),  gamma_i = (1 + a_i)(1 + u) b_i,
 * the tolerances are, with the factor 2 of headroom check.c takes on its terms (a) and (b):
 *     tol(dV_jd) = 2 u |dV_jd| + 2 sum_i ((a_i + g) P_ij + eta) |dO_id| + 1e-7
 *     tol(dK_jd) = 2 u |dK_jd| + 2 |scale| sum_i w_ij |q_id| + 1e-7
 *     tol(dQ_id) = 2 u |dQ_id| + 2 |scale| sum_j w_ij |k_jd| + 1e-7
 * The reference computes the sums (reference_backward.c) from the weights this file gives each row.
 * 1e-7 covers the rounding of a gradient in fp16's subnormal range (at most 2^-25 = 3e-8).
 *
 * Why this does not weaken with N: every term is a sum over the same products as the gradient element
 * itself, with each product's own magnitude, so the tolerance of an element scales with what that
 * element is made of, not with the tensor's largest value. A stage that drops the D term is off by
 * P_ij |D_i| per product, about |D_i| / (u |dP_ij - D_i|) times its tolerance; one that loses a key
 * tile's share of dQ is off by that share, against u times it.
 *
 * The check fails on the largest error/tolerance ratio over every checked element (never on a mean),
 * and on any NaN or inf; a NaN with the poison's bits (0xffff) was never written. If the forward's O'
 * or LSE' is not finite on a row that the check needs, the weights would be NaN and the tolerance
 * meaningless: the check fails and says so.
 *
 * Which elements. Small problems (12 N^2 D B H <= 2^34 multiply-adds) are checked whole. Larger ones
 * check the first and last head and one random head; inside a head with N^2 D > 2^31, dQ on 256 random
 * rows and the first and last 32, dK and dV on as many keys; every row's LSE, O and D are still
 * computed, since every key's gradient sums over all rows.
 *
 * The reference is kept for the next check (one entry, at most 256 MiB): the reference and the
 * tolerances of a check depend on the problem, the seed, and the checked heads' Q, K, V, dO and the
 * forward's O and LSE only, never on the gradients checked. attn-bench checks stages 11, 12, 13 and
 * 13d on one point's inputs after one and the same forward, and the reference is most of a check's
 * time (3 N^2 D multiply-adds a head in double: minutes at B = 4, H = 32, N = 16384 on few cores), so
 * the three after the first take it from here. The entry is found by a 64-bit hash of all that it
 * depends on, the contents of those heads' slices included: inputs changed in place are a new entry.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "harness.h"
#include "reference_backward.h"

#define U32 5.9604644775390625e-8 /* 2^-24 */
#define ETA_F16 2.98023223876953125e-8 /* 2^-25 */
#define ETA_BF16 0x1p-134
#define TOL_ABS 1e-7
#define SAMPLE_EDGE 32
#define SAMPLE_RANDOM 256

static const char *const grad_names[3] = {"dQ", "dK", "dV"};
const char *attn_grad_name(int t) { return t >= 0 && t < 3 ? grad_names[t] : "?"; }

/* The per-row weights of the bounds, from the forward's O' and LSE' (ctx). */
typedef struct {
    const attn_inputs *in;
    const uint16_t *o;
    const float *lse;
    double u, g;
    int forward_nonfinite; /* rows whose O' or LSE' is not finite */
} weigh_ctx;

static void weigh_row(void *ctx, int64_t bh, int64_t i, double lse, const double *o, double delta, double sabs,
                      attn_grad_weights *w) {
    weigh_ctx *c = ctx;
    const attn_problem *p = &c->in->p;
    const int64_t D = p->D, row = bh * p->N + i;
    (void)delta;
    const double u = c->u, g = c->g, lse_stage = c->lse[row];
    double b = 0.0, bo = 0.0;
    int finite = isfinite(lse_stage);
    for (int64_t d = 0; d < D; d++) {
        const double od = attn_to_f32(c->o[row * D + d], p->dtype);
        const double gd = fabs((double)attn_to_f32(c->in->d_o[row * D + d], p->dtype));
        finite &= isfinite(od);
        b += gd * fabs(od - o[d]);
        bo += gd * fabs(od);
    }
    if (!finite) {
#pragma omp atomic
        c->forward_nonfinite++;
        memset(w, 0, sizeof *w);
        return;
    }
    const double eps = U32 * (double)(D + 16) * sabs + fabs(lse_stage - lse) + U32 * (4.0 * fabs(lse) + 8.0);
    const double a = expm1(eps) * (1.0 + u) + u;
    b += U32 * (double)(D + 2) * bo;
    w->alpha = a + u * (1.0 + a) + g;
    w->beta = (1.0 + a) * (1.0 + u) * U32 * (double)(D + 2);
    w->gamma = (1.0 + a) * (1.0 + u) * b;
    w->delta = a + g;
}

/* splitmix64, for the sampled heads, rows and keys */
static uint64_t mix(uint64_t *s) {
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A sorted, distinct sample of 0..N-1: the first and last SAMPLE_EDGE and SAMPLE_RANDOM random ones;
 * NULL (all) when N is small enough. */
static int64_t sample_indices(int64_t N, uint64_t *seed, int64_t **out) {
    *out = NULL;
    if (N <= 2 * SAMPLE_EDGE + SAMPLE_RANDOM) return N;
    int64_t *x = malloc((2 * SAMPLE_EDGE + SAMPLE_RANDOM) * sizeof *x), n = 0;
    if (!x) return -1;
    for (int64_t e = 0; e < SAMPLE_EDGE; e++) x[n++] = e, x[n++] = N - 1 - e;
    for (int r = 0; r < SAMPLE_RANDOM; r++) x[n++] = SAMPLE_EDGE + (int64_t)(mix(seed) % (uint64_t)(N - 2 * SAMPLE_EDGE));
    qsort(x, (size_t)n, sizeof *x, cmp_i64);
    int64_t m = 0;
    for (int64_t r = 0; r < n; r++)
        if (m == 0 || x[r] != x[m - 1]) x[m++] = x[r];
    *out = x;
    return m;
}

static void compare(attn_tensor_check *t, const attn_problem *p, int64_t bh, int64_t n, const uint16_t *got,
                    const double *want, const double *bound, double bound_scale, double *l2) {
    const double u = attn_unit_roundoff(p->dtype);
    for (int64_t d = 0; d < p->D; d++) {
        const uint16_t bits = got[d];
        const double x = attn_to_f32(bits, p->dtype), y = want[d];
        t->checked++;
        l2[1] += y * y;
        if (!isfinite(x)) {
            t->nonfinite++;
            t->unwritten += bits == 0xffffu;
            if (t->worst_ratio < INFINITY || t->worst_b < 0) {
                t->worst_ratio = INFINITY;
                t->worst_b = bh / p->H, t->worst_h = bh % p->H, t->worst_n = n, t->worst_d = d;
                t->worst_got = x, t->worst_want = y, t->worst_tol = NAN;
            }
            continue;
        }
        const double err = fabs(x - y), tol = 2.0 * u * fabs(y) + 2.0 * bound_scale * bound[d] + TOL_ABS;
        l2[0] += err * err;
        if (err > t->max_abs_err) t->max_abs_err = err;
        if (err / tol > t->worst_ratio || t->worst_b < 0) {
            t->worst_ratio = err / tol;
            t->worst_b = bh / p->H, t->worst_h = bh % p->H, t->worst_n = n, t->worst_d = d;
            t->worst_got = x, t->worst_want = y, t->worst_tol = tol;
        }
    }
}

typedef struct {
    double *dq, *dk, *dv, *tq, *tk, *tv;
} grad_bufs;

/* The last check's reference: for each checked head in order, dq and tq (nrows D), dk, dv, tk, tv
 * (nkeys D); key 0 when empty. */
#define MEMO_MAX_BYTES ((size_t)256 << 20)
static struct {
    uint64_t key;
    double *ref;
    size_t used, cap; /* doubles */
    int64_t forward_nonfinite;
} memo;

/* FNV-1a over bytes, 64-bit: h updated with n bytes of x. */
static uint64_t hash_bytes(uint64_t h, const void *x, size_t n) {
    const unsigned char *b = x;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* What a check's reference depends on: the problem, the seed, and the heads' slices of Q, K, V, dO,
 * O and LSE. */
static uint64_t memo_key(const attn_inputs *in, const uint16_t *o, const float *lse, uint64_t seed,
                         const int64_t *heads, int64_t nh) {
    const attn_problem *p = &in->p;
    const int64_t fields[7] = {p->B, p->H, p->N, p->D, p->causal, p->dtype, (int64_t)seed};
    uint64_t h = hash_bytes(0xcbf29ce484222325ull, fields, sizeof fields);
    h = hash_bytes(h, &p->scale, sizeof p->scale);
    const size_t nd = (size_t)(p->N * p->D);
    for (int64_t k = 0; k < (nh < 0 ? -nh : nh); k++) {
        const size_t bh = (size_t)(nh < 0 ? heads[k] : k);
        const uint16_t *t[5] = {in->q, in->k, in->v, in->d_o, o};
        for (int i = 0; i < 5; i++) h = hash_bytes(h, t[i] + bh * nd, nd * 2);
        h = hash_bytes(h, lse + bh * (size_t)p->N, (size_t)p->N * 4);
    }
    return h | 1; /* never 0, the empty entry's key */
}

/* The reference's six arrays of one head to (store) or from (!store) the memo at *at. */
static void memo_copy(grad_bufs *b, int64_t nrows, int64_t nkeys, int64_t D, size_t *at, int store) {
    double *part[6] = {b->dq, b->tq, b->dk, b->dv, b->tk, b->tv};
    for (int i = 0; i < 6; i++) {
        const size_t n = (size_t)((i < 2 ? nrows : nkeys) * D);
        if (store) memcpy(memo.ref + *at, part[i], n * sizeof(double));
        else memcpy(part[i], memo.ref + *at, n * sizeof(double));
        *at += n;
    }
}

/* One head: the reference on the sampled rows and keys (from the memo when cached, at *at; into it
 * when store), then every element of them compared. */
static attn_status check_head(const attn_inputs *in, weigh_ctx *wc, int64_t bh, uint64_t *seed, const uint16_t *dq,
                              const uint16_t *dk, const uint16_t *dv, grad_bufs *b, attn_grad_check *c,
                              double l2[3][2], int cached, int store, size_t *at) {
    const attn_problem *p = &in->p;
    const int64_t N = p->N, D = p->D;
    int64_t *rows = NULL, *keys = NULL;
    const int full = (double)N * (double)N * (double)D <= 0x1p31;
    const int64_t nrows = full ? N : sample_indices(N, seed, &rows);
    const int64_t nkeys = full ? N : sample_indices(N, seed, &keys);
    if (nrows < 0 || nkeys < 0) {
        free(rows), free(keys);
        return attn_fail(ATTN_ENOMEM, "check: cannot allocate the sampled rows");
    }
    attn_grad_request req = {rows, keys, nrows, nkeys, weigh_row, wc,
                             p->dtype == ATTN_F16 ? ETA_F16 : ETA_BF16, b->dq, b->dk, b->dv, b->tq, b->tk, b->tv};
    attn_status st = ATTN_OK;
    if (cached) memo_copy(b, nrows, nkeys, D, at, 0);
    else st = attn_reference_grads_head(p, in->q, in->k, in->v, in->d_o, bh, &req);
    if (st == ATTN_OK && store) memo_copy(b, nrows, nkeys, D, at, 1), memo.used = *at;
    const double as = fabs((double)p->scale);
    for (int64_t r = 0; r < nrows && st == ATTN_OK; r++) {
        const int64_t i = rows ? rows[r] : r, e = (bh * N + i) * D;
        compare(&c->t[0], p, bh, i, dq + e, b->dq + r * D, b->tq + r * D, as, l2[0]);
    }
    for (int64_t r = 0; r < nkeys && st == ATTN_OK; r++) {
        const int64_t j = keys ? keys[r] : r, e = (bh * N + j) * D;
        compare(&c->t[1], p, bh, j, dk + e, b->dk + r * D, b->tk + r * D, as, l2[1]);
        compare(&c->t[2], p, bh, j, dv + e, b->dv + r * D, b->tv + r * D, 1.0, l2[2]);
    }
    c->rows += nrows, c->keys += nkeys;
    free(rows), free(keys);
    return st;
}

/* Whether the memo can hold the reference of count heads (each at most 6 max(N, or the sampled 320) D
 * doubles), made room for; 0 past MEMO_MAX_BYTES. It is emptied either way: a new entry is coming. */
static int memo_reserve(const attn_problem *p, int64_t count) {
    const int full = (double)p->N * (double)p->N * (double)p->D <= 0x1p31;
    const double n = full ? (double)p->N : 2 * SAMPLE_EDGE + SAMPLE_RANDOM;
    const double doubles = (double)count * 6.0 * n * (double)p->D;
    memo.key = 0, memo.used = 0, memo.forward_nonfinite = 0;
    if (doubles * sizeof(double) > (double)MEMO_MAX_BYTES) return 0;
    if ((size_t)doubles > memo.cap) {
        double *r = realloc(memo.ref, (size_t)doubles * sizeof(double));
        if (!r) return 0;
        memo.ref = r, memo.cap = (size_t)doubles;
    }
    return 1;
}

/* The heads to check: all of a small problem, else the first, the last and one at random. */
static int64_t pick_heads(const attn_problem *p, uint64_t *seed, int64_t heads[3]) {
    const int64_t BH = p->B * p->H;
    const double cost = 12.0 * (double)p->N * (double)p->N * (double)p->D * (double)BH;
    if (cost <= 0x1p34) return BH; /* all: heads[] unused */
    int64_t n = 0;
    heads[n++] = 0;
    if (BH > 1) heads[n++] = BH - 1;
    if (BH > 2) {
        heads[n++] = 1 + (int64_t)(mix(seed) % (uint64_t)(BH - 2));
        if (heads[n - 1] < heads[n - 2]) { /* keep them sorted: 0, random, last */
            const int64_t t = heads[n - 1];
            heads[n - 1] = heads[n - 2], heads[n - 2] = t;
        }
    }
    return -n;
}

attn_status attn_check_grads(const attn_inputs *in, const uint16_t *o, const float *lse, const uint16_t *dq,
                             const uint16_t *dk, const uint16_t *dv, uint64_t seed, attn_grad_check *c) {
    memset(c, 0, sizeof *c);
    const attn_problem *p = &in->p;
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    if (!in->d_o) return attn_fail(ATTN_EINVAL, "check: the inputs hold no dO");
    if (p->H_kv != p->H || p->N_k != p->N) /* the backward's reference (reference_backward.c) does not */
        return attn_fail(ATTN_EUNSUPPORTED, "check: gradients of H_kv != H or N_k != N are not checked yet");
    for (int t = 0; t < 3; t++) c->t[t].worst_b = -1;
    const int64_t N = p->N, D = p->D;
    weigh_ctx wc = {in, o, lse, attn_unit_roundoff(p->dtype), 8.0 * sqrt((double)N) * U32 + 2.0 * U32, 0};
    uint64_t s = seed ^ 0x6a09e667f3bcc908ull;
    int64_t heads[3];
    const int64_t nh = pick_heads(p, &s, heads), count = nh < 0 ? -nh : nh;
    double *buf = malloc((size_t)(6 * N * D) * sizeof(double));
    if (!buf) return attn_fail(ATTN_ENOMEM, "check: cannot allocate the reference gradients of one head");
    grad_bufs b = {buf, buf + N * D, buf + 2 * N * D, buf + 3 * N * D, buf + 4 * N * D, buf + 5 * N * D};
    double l2[3][2] = {{0, 0}, {0, 0}, {0, 0}};
    const uint64_t key = memo_key(in, o, lse, seed, heads, nh);
    const int cached = memo.key == key, store = !cached && memo_reserve(p, count);
    size_t at = 0;
    for (int64_t h = 0; h < count && st == ATTN_OK; h++)
        st = check_head(in, &wc, nh < 0 ? heads[h] : h, &s, dq, dk, dv, &b, c, l2, cached, store, &at);
    free(buf);
    if (st != ATTN_OK) return st;
    if (cached) wc.forward_nonfinite = memo.forward_nonfinite; /* weigh_row counted them when it was made */
    if (store) memo.key = key, memo.forward_nonfinite = wc.forward_nonfinite;
    c->heads = count;
    c->forward_nonfinite = wc.forward_nonfinite;
    c->pass = wc.forward_nonfinite == 0;
    for (int t = 0; t < 3; t++) {
        c->t[t].rel_l2 = l2[t][1] > 0.0 ? sqrt(l2[t][0] / l2[t][1]) : sqrt(l2[t][0]);
        c->pass &= c->t[t].nonfinite == 0 && c->t[t].worst_ratio <= 1.0;
    }
    return ATTN_OK;
}
