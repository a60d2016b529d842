/*
 * reference.c: the independent reference every --check compares against, written apart from the
 * stages so that no stage is ever checked against itself. Stage 01 computes the same definition, but
 * stage 01 is a stage: a broken causal mask or loop bound there must show up as a FAIL, which it
 * cannot if the check runs stage 01's own code. The CPU models of stages 03-06 share the harness and
 * the 16-bit conversions with stage 01 and nothing else. tests/test_reference.c checks this file and
 * stage 01 against each other and against properties that need no reference at all.
 *
 * For each requested row i of head (b, h), in double, with k and v those of K/V head
 * h / (H / H_kv) (attn_kv_head: grouped-query attention):
 *     s_j   = scale * sum_d q_id k_jd      for every key j the row sees (j < N_k; when causal
 *                                          j <= i + N_k - N, the mask aligned to the bottom right)
 *     m     = max_j s_j,   l = sum_j exp(s_j - m)
 *     o_i   = sum_j exp(s_j - m) v_j / l,   LSE_i = m + ln(l)
 * A row that sees no key (causal, N > N_k, i < N - N_k) gets o_i = 0 and LSE_i = -inf: the contract's
 * rule (common/attn.h), FlashAttention's, with no division by the empty sum. With cu_seqlens each
 * sequence is a head of its own length n and n_k (attn_head_span, the packed layout of common/attn.h):
 * N and N_k become n and n_k above.
 * The products q_id k_jd of two 16-bit values are exact in double, and the sums run over at most a
 * few thousand terms: the result is exact to about 1e-13 relative, far below the 2^-11 of fp16.
 * The layout is chosen for speed without changing that: a head's K is decoded once, transposed, so
 * that a row's scores are computed key-parallel (s_j += q_d k_dj for all j, d by d: the compiler
 * vectorises the loop over j, each s_j is still summed in the order d = 0 .. D-1).
 * The check (check.c) needs more of these same scores and weights, asked for per row: the range of V
 * over the keys with s_j >= m - reach (its rule of the range), taken from s before the exp, and the
 * magnitudes its tolerance is made of, sum_j p_j |v_jd| and sum_j min(p_j, eta / l) |v_jd|, summed
 * from the same p_j in O's own pass over V; each at O(D) per key, as O itself.
 */
#include "reference.h"

#include <math.h>
#include <stdlib.h>

#include "half.h"

/* The n_k keys of one K/V head as doubles: Kt[d * N_k + j] = k_jd (transposed, a row of N_k whatever
 * n_k), V[j * D + d] = v_jd. */
static void decode_head(const attn_problem *p, const uint16_t *k, const uint16_t *v, int64_t n_k, double *Kt,
                        double *V, int parallel) {
    const int64_t N = p->N_k, D = p->D;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t j = 0; j < n_k; j++)
        for (int64_t d = 0; d < D; d++) {
            Kt[d * N + j] = attn_to_f32(k[j * D + d], p->dtype);
            V[j * D + d] = attn_to_f32(v[j * D + d], p->dtype);
        }
}

/* Row i's scores s_j = scale * q.k_j over the nkeys keys it sees, into s; returns their max. */
static double reference_scores(const attn_problem *p, const double *Kt, const uint16_t *q, int64_t nkeys,
                               double *s) {
    const int64_t N = p->N_k, D = p->D;
    for (int64_t j = 0; j < nkeys; j++) s[j] = 0.0;
    int64_t d = 0;
    for (; d + 2 <= D; d += 2) { /* two steps of d per pass over s, summed in order */
        const double q0 = attn_to_f32(q[d], p->dtype), q1 = attn_to_f32(q[d + 1], p->dtype);
        const double *k0 = Kt + d * N, *k1 = k0 + N;
#pragma omp simd
        for (int64_t j = 0; j < nkeys; j++) s[j] = (s[j] + q0 * k0[j]) + q1 * k1[j];
    }
    for (; d < D; d++) {
        const double qd = attn_to_f32(q[d], p->dtype);
        const double *kd = Kt + d * N;
#pragma omp simd
        for (int64_t j = 0; j < nkeys; j++) s[j] += qd * kd[j];
    }
    double m = -INFINITY;
    for (int64_t j = 0; j < nkeys; j++) {
        s[j] *= (double)p->scale;
        m = fmax(m, s[j]);
    }
    return m;
}

/* s_j = exp(s_j - m) over the nkeys keys, in place; returns l, their sum. */
static double reference_weights(int64_t nkeys, double m, double *s) {
    double l = 0.0;
    for (int64_t j = 0; j < nkeys; j++) {
        s[j] = exp(s[j] - m);
        l += s[j];
    }
    return l;
}

/* o = sum_j p_j v_j over the nkeys keys, p_j = s_j / l, from the weights s and their sum l; with mag
 * (the check's magnitudes, check.c) also mag[d] = sum_j p_j |v_jd| and sub[d] = sum_j min(p_j, eta / l)
 * |v_jd| (min(p_j, eta / l) = min(s_j, eta) / l; eta = 0: sub = 0), in the same pass over V. */
static void reference_average(int64_t D, const double *V, int64_t nkeys, double l, const double *s, double eta,
                              double *o, double *mag, double *sub) {
    for (int64_t d = 0; d < D; d++) o[d] = 0.0;
    for (int64_t d = 0; mag && d < D; d++) mag[d] = 0.0, sub[d] = 0.0;
    for (int64_t j = 0; j < nkeys; j++) { /* each o[e] summed over the keys in order */
        const double pj = s[j] / l, fj = fmin(s[j], eta) / l, *vj = V + j * D;
        if (!mag) {
#pragma omp simd
            for (int64_t e = 0; e < D; e++) o[e] += pj * vj[e];
            continue;
        }
#pragma omp simd
        for (int64_t e = 0; e < D; e++) {
            const double a = fabs(vj[e]);
            o[e] += pj * vj[e];
            mag[e] += pj * a;
            sub[e] += fj * a;
        }
    }
}

/* lo[d], hi[d]: the least and largest v_jd over the keys whose score s_j is at least `floor` (the max
 * key's among them, so the set is never empty). */
static void near_range(int64_t D, const double *V, const double *s, int64_t nkeys, double floor, double *lo,
                       double *hi) {
    for (int64_t d = 0; d < D; d++) lo[d] = INFINITY, hi[d] = -INFINITY;
    for (int64_t j = 0; j < nkeys; j++) {
        if (s[j] < floor) continue;
        const double *vj = V + j * D;
#pragma omp simd
        for (int64_t d = 0; d < D; d++) { /* v is finite: no NaN for fmin's rules, and these vectorise */
            lo[d] = vj[d] < lo[d] ? vj[d] : lo[d];
            hi[d] = vj[d] > hi[d] ? vj[d] : hi[d];
        }
    }
}

int attn_heads_in_parallel(const attn_problem *p, int64_t nrows) {
    return p->N_k * p->D <= 65536 && nrows > 2 * p->N;
}

/* rows[] sorted: the index past the last listed row of rows[r0]'s head. */
static int64_t head_end(const attn_problem *p, const int64_t *rows, int64_t nrows, int64_t r0) {
    const int64_t bh = attn_row_head(p, rows[r0]);
    int64_t r1 = r0;
    while (r1 < nrows && attn_row_head(p, rows[r1]) == bh) r1++;
    return r1;
}

/* The listed rows r0 .. r1-1 of one decoded head; nonzero if a row's scratch could not be allocated. */
static int walk_rows(const attn_head_walk *w, int64_t r0, int64_t r1, const void *head, int parallel) {
    int failed = 0;
#pragma omp parallel if (parallel) reduction(| : failed)
    {
        void *scratch = malloc(w->row_bytes);
        if (!scratch) failed = 1;
#pragma omp for schedule(dynamic, 8)
        for (int64_t r = r0; r < r1; r++)
            if (scratch) w->row(w->ctx, r, head, scratch);
        free(scratch);
    }
    return failed;
}

int attn_walk_heads(const attn_problem *p, const int64_t *rows, int64_t nrows, const attn_head_walk *w) {
    const int by_head = attn_heads_in_parallel(p, nrows);
    int failed = 0;
#pragma omp parallel if (by_head) reduction(| : failed)
    {
        void *head = malloc(w->head_bytes);
        if (!head) failed = 1;
#pragma omp for schedule(dynamic, 16)
        for (int64_t r0 = 0; r0 < nrows; r0++) {
            const int64_t bh = head ? attn_row_head(p, rows[r0]) : -1;
            if (!head || (r0 > 0 && attn_row_head(p, rows[r0 - 1]) == bh)) continue; /* not a head's first row */
            w->decode(w->ctx, bh, head, !by_head);
            failed |= walk_rows(w, r0, head_end(p, rows, nrows, r0), head, !by_head);
        }
        free(head);
    }
    return failed;
}

/* The reference's walk: a head is Kt then V (N_k * D doubles each, of the K/V head the query head reads;
 * a K/V head that serves several query heads is decoded for each), a row's scratch its N_k scores. x
 * (NULL in attn_reference_rows) asks for what the check needs besides O and LSE. */
typedef struct {
    const attn_problem *p;
    const uint16_t *q, *k, *v;
    const int64_t *rows;
    const attn_reference_extras *x;
    double *o, *lse;
} reference_walk;

static void reference_decode(void *ctx, int64_t bh, void *head, int parallel) {
    const reference_walk *c = ctx;
    const int64_t ND = c->p->N_k * c->p->D, D = c->p->D;
    const attn_span s = attn_head_span(c->p, bh);
    decode_head(c->p, c->k + s.k0 * D, c->v + s.k0 * D, s.n_k, (double *)head, (double *)head + ND, parallel);
}

static void reference_walk_row(void *ctx, int64_t r, const void *head, void *scratch) {
    const reference_walk *c = ctx;
    const attn_reference_extras *x = c->x;
    const int64_t D = c->p->D, row = c->rows[r];
    const attn_span sp = attn_head_span(c->p, attn_row_head(c->p, row));
    const int64_t nkeys = attn_keys_seen(c->p->causal, sp.n, sp.n_k, row - sp.q0);
    const double *Kt = head, *V = Kt + c->p->N_k * D;
    double *s = scratch;
    if (nkeys == 0) { /* no visible key: the contract's O = 0, LSE = -inf, and nothing for the check */
        for (int64_t d = 0; d < D; d++) c->o[r * D + d] = 0.0;
        for (int64_t d = 0; x && d < D; d++)
            x->lo[r * D + d] = -INFINITY, x->hi[r * D + d] = INFINITY, x->mag[r * D + d] = 0.0, x->sub[r * D + d] = 0.0;
        c->lse[r] = -INFINITY;
        return;
    }
    const double m = reference_scores(c->p, Kt, c->q + row * D, nkeys, s);
    if (x && x->reach[r] >= 0.0)
        near_range(D, V, s, nkeys, m - x->reach[r], x->lo + r * D, x->hi + r * D);
    else if (x)
        for (int64_t d = 0; d < D; d++) x->lo[r * D + d] = -INFINITY, x->hi[r * D + d] = INFINITY;
    const double l = reference_weights(nkeys, m, s);
    reference_average(D, V, nkeys, l, s, x ? x->eta : 0.0, c->o + r * D, x ? x->mag + r * D : NULL,
                      x ? x->sub + r * D : NULL);
    c->lse[r] = m + log(l);
}

attn_status attn_reference_rows_valid(const attn_problem *p, const int64_t *rows, int64_t nrows) {
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    for (int64_t r = 0; r < nrows; r++)
        if (rows[r] < 0 || rows[r] >= attn_rows(p) || (r > 0 && rows[r] < rows[r - 1]))
            return attn_fail(ATTN_EINVAL, "reference: rows must be sorted and in 0..%lld",
                             (long long)attn_rows(p) - 1);
    return ATTN_OK;
}

attn_status attn_reference_rows_extras(const attn_problem *p, const uint16_t *q, const uint16_t *k,
                                       const uint16_t *v, const int64_t *rows, int64_t nrows,
                                       const attn_reference_extras *x, double *o, double *lse) {
    attn_status st = attn_reference_rows_valid(p, rows, nrows);
    if (st != ATTN_OK) return st;
    const int64_t N = p->N_k, D = p->D;
    reference_walk c = {p, q, k, v, rows, x, o, lse};
    const attn_head_walk w = {(size_t)(2 * N * D) * sizeof(double), (size_t)N * sizeof(double),
                              reference_decode, reference_walk_row, &c};
    char size[32];
    if (attn_walk_heads(p, rows, nrows, &w))
        return attn_fail(ATTN_ENOMEM, "reference: cannot allocate one head of K and V (%s) or its scores",
                         attn_size_text(2.0 * (double)(N * D) * 8.0, size, sizeof size));
    return ATTN_OK;
}

attn_status attn_reference_rows(const attn_problem *p, const uint16_t *q, const uint16_t *k,
                                const uint16_t *v, const int64_t *rows, int64_t nrows, double *o,
                                double *lse) {
    return attn_reference_rows_extras(p, q, k, v, rows, nrows, NULL, o, lse);
}
