/*
 * reference_backward.c: the independent reference of the backward pass, in double. Every backward
 * stage (11 on), and its CPU model, is compared with this file, never with its own code: a wrong D
 * term, a mask on the wrong side or a lost dQ contribution in a stage must show up as a FAIL. It shares
 * with the stages only the 16-bit conversions (half.h).
 *
 * The loss is L = sum over O's elements of dO * O, so dO is dL/dO. For head (b, h), over the keys j
 * row i sees (all N; j <= i when causal):
 *     s_ij  = scale q_i . k_j,   LSE_i = ln sum_j exp(s_ij),   P_ij = exp(s_ij - LSE_i)
 *     O_i   = sum_j P_ij v_j,    D_i = dO_i . O_i
 *     dP_ij = dO_i . v_j,        dS_ij = P_ij (dP_ij - D_i)
 *     dV_j  = sum_i P_ij dO_i,   dK_j = scale sum_i dS_ij q_i,   dQ_i = scale sum_j dS_ij k_j
 * (the softmax's Jacobian: dL/ds_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij'), and sum_j' P_ij' dP_ij' is
 * dO_i . O_i = D_i). LSE_i, O_i and D_i are the reference's own, exact ones, never a stage's.
 * tests/test_reference_backward.c checks these gradients against central differences of the forward
 * reference (reference.c), which shares no code with this file.
 *
 * Two passes over a head. Rows: each row's scores, LSE, O and D, and for the rows asked for, dQ. Keys:
 * each key asked for walks the rows that see it, recomputing P from the LSE of the first pass, and sums
 * dK and dV. Both passes are parallel over their rows or keys with no shared sums (each output element
 * is summed by one thread in a fixed order), so the result does not depend on the thread count. Q, K, V
 * and dO are decoded once per head, row-major and transposed, so that every inner loop runs over
 * contiguous doubles (over keys for scores and dP, over d for the sums).
 */
#include "reference_backward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"

/* One head in double, each tensor row-major [N][D] and transposed [D][N]. */
typedef struct {
    double *q, *qt, *k, *kt, *v, *vt, *g, *gt; /* g: dO */
} head_copy;

static void decode_tensor(const attn_problem *p, const uint16_t *x, double *rows, double *cols) {
    const int64_t N = p->N, D = p->D;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < N; j++)
        for (int64_t d = 0; d < D; d++) rows[j * D + d] = cols[d * N + j] = attn_to_f32(x[j * D + d], p->dtype);
}

/* out[j] = sum_d a[d] * t[d * N + j] for j < n (t transposed, a of D values), summed d by d; with
 * absolute values when abs_too (for A_ij and Sabs). */
static void dot_columns(const double *a, const double *t, int64_t N, int64_t D, int64_t j0, int64_t n,
                        double *out, double *abs_out) {
    for (int64_t j = 0; j < n; j++) out[j] = 0.0;
    if (abs_out)
        for (int64_t j = 0; j < n; j++) abs_out[j] = 0.0;
    for (int64_t d = 0; d < D; d++) {
        const double ad = a[d], *td = t + d * N + j0;
#pragma omp simd
        for (int64_t j = 0; j < n; j++) out[j] += ad * td[j];
        if (abs_out) {
            const double aa = fabs(ad);
#pragma omp simd
            for (int64_t j = 0; j < n; j++) abs_out[j] += aa * fabs(td[j]);
        }
    }
}

/* out[d] = sum_j c[j] * r[(j0 + j) * D + d] over j < n (r row-major), with |r| when absolute. */
static void sum_rows(const double *c, const double *r, int64_t D, int64_t j0, int64_t n, int absolute,
                     double *out) {
    for (int64_t d = 0; d < D; d++) out[d] = 0.0;
    for (int64_t j = 0; j < n; j++) {
        const double cj = c[j], *rj = r + (j0 + j) * D;
        if (absolute) {
#pragma omp simd
            for (int64_t d = 0; d < D; d++) out[d] += cj * fabs(rj[d]);
        } else {
#pragma omp simd
            for (int64_t d = 0; d < D; d++) out[d] += cj * rj[d];
        }
    }
}

/* What the row pass leaves for the key pass: per row, its LSE, D and weights. */
typedef struct {
    double *lse, *delta;
    attn_grad_weights *w;
} row_stats;

/* Row i: LSE, O, D (and its weights); with want >= 0, dQ (and tq) into slot `want` of the request. */
static void row_pass(const attn_problem *p, const head_copy *h, int64_t bh, int64_t i, int64_t want,
                     const attn_grad_request *req, row_stats *rs, double *scratch) {
    const int64_t N = p->N, D = p->D, nk = p->causal ? i + 1 : N;
    const double scale = p->scale;
    double *s = scratch, *sa = s + N, *dp = sa + N, *a = dp + N, *o = a + N; /* o: D values */
    dot_columns(h->q + i * D, h->kt, N, D, 0, nk, s, req->weigh ? sa : NULL);
    double m = -INFINITY, sabs = 0.0;
    for (int64_t j = 0; j < nk; j++) {
        s[j] *= scale;
        m = fmax(m, s[j]);
        if (req->weigh) sabs = fmax(sabs, fabs(scale) * sa[j]);
    }
    double l = 0.0;
    for (int64_t j = 0; j < nk; j++) l += exp(s[j] - m);
    const double lse = m + log(l);
    for (int64_t j = 0; j < nk; j++) s[j] = exp(s[j] - lse); /* s is P from here on */
    sum_rows(s, h->v, D, 0, nk, 0, o);
    double delta = 0.0;
    for (int64_t d = 0; d < D; d++) delta += h->g[i * D + d] * o[d];
    rs->lse[i] = lse, rs->delta[i] = delta;
    attn_grad_weights w = {0, 0, 0, 0};
    if (req->weigh) req->weigh(req->ctx, bh, i, lse, o, delta, sabs, &w);
    rs->w[i] = w;
    if (want < 0) return;
    dot_columns(h->g + i * D, h->vt, N, D, 0, nk, dp, req->weigh ? a : NULL);
    for (int64_t j = 0; j < nk; j++) {
        const double ds = s[j] * (dp[j] - delta);
        if (req->weigh) a[j] = s[j] * (w.alpha * fabs(dp[j] - delta) + w.beta * a[j] + w.gamma) + req->eta;
        dp[j] = ds * scale; /* dp is scale * dS from here on */
    }
    sum_rows(dp, h->k, D, 0, nk, 0, req->dq + want * D);
    if (req->weigh) sum_rows(a, h->k, D, 0, nk, 1, req->tq + want * D);
}

/* Key j: dK and dV (and tk, tv) into slot `want`, from the rows i that see it (i >= j when causal). */
static void key_pass(const attn_problem *p, const head_copy *h, int64_t j, int64_t want,
                     const attn_grad_request *req, const row_stats *rs, double *scratch) {
    const int64_t N = p->N, D = p->D, i0 = p->causal ? j : 0, nr = N - i0;
    const double scale = p->scale;
    double *pr = scratch, *dp = pr + N, *a = dp + N, *wv = a + N;
    dot_columns(h->k + j * D, h->qt, N, D, i0, nr, pr, NULL);
    for (int64_t r = 0; r < nr; r++) pr[r] = exp(pr[r] * scale - rs->lse[i0 + r]);
    dot_columns(h->v + j * D, h->gt, N, D, i0, nr, dp, req->weigh ? a : NULL);
    for (int64_t r = 0; r < nr; r++) {
        const attn_grad_weights *w = &rs->w[i0 + r];
        const double diff = dp[r] - rs->delta[i0 + r];
        if (req->weigh) {
            a[r] = pr[r] * (w->alpha * fabs(diff) + w->beta * a[r] + w->gamma) + req->eta;
            wv[r] = w->delta * pr[r] + req->eta;
        }
        dp[r] = pr[r] * diff * scale; /* scale * dS_ij */
    }
    sum_rows(pr, h->g, D, i0, nr, 0, req->dv + want * D);
    sum_rows(dp, h->q, D, i0, nr, 0, req->dk + want * D);
    if (req->weigh) {
        sum_rows(a, h->q, D, i0, nr, 1, req->tk + want * D);
        sum_rows(wv, h->g, D, i0, nr, 1, req->tv + want * D);
    }
}

static attn_status valid_list(const int64_t *list, int64_t n, int64_t N, const char *what) {
    for (int64_t r = 0; list && r < n; r++)
        if (list[r] < 0 || list[r] >= N || (r > 0 && list[r] <= list[r - 1]))
            return attn_fail(ATTN_EINVAL, "reference gradients: the %s must be sorted, distinct and in 0..%lld",
                             what, (long long)N - 1);
    return ATTN_OK;
}

/* Slot of each index in a sorted list (-1: not listed), or the index itself when the list is NULL. */
static void slots_of(const int64_t *list, int64_t n, int64_t N, int64_t *slot) {
    for (int64_t i = 0; i < N; i++) slot[i] = list ? -1 : i;
    for (int64_t r = 0; list && r < n; r++) slot[list[r]] = r;
}

attn_status attn_reference_grads_head(const attn_problem *p, const uint16_t *q, const uint16_t *k,
                                      const uint16_t *v, const uint16_t *d_o, int64_t bh,
                                      const attn_grad_request *req) {
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    if (p->H_kv != p->H || p->N_k != p->N || p->cu_seqlens_q) /* the forward's reference takes them */
        return attn_fail(ATTN_EUNSUPPORTED, "reference gradients: H_kv == H and N_k == N only, no cu_seqlens "
                         "(got H_kv %lld of %lld, N_k %lld of %lld)", (long long)p->H_kv, (long long)p->H,
                         (long long)p->N_k, (long long)p->N);
    const int64_t N = p->N, D = p->D, ND = N * D;
    if (bh < 0 || bh >= p->B * p->H)
        return attn_fail(ATTN_EINVAL, "reference gradients: head %lld is not in 0..%lld", (long long)bh,
                         (long long)(p->B * p->H - 1));
    if ((st = valid_list(req->rows, req->nrows, N, "rows")) != ATTN_OK ||
        (st = valid_list(req->keys, req->nkeys, N, "keys")) != ATTN_OK)
        return st;
    double *buf = malloc((size_t)(8 * ND + 2 * N) * sizeof(double));
    attn_grad_weights *w = malloc((size_t)N * sizeof *w);
    int64_t *slot = malloc((size_t)N * sizeof *slot);
    if (!buf || !w || !slot) {
        free(buf), free(w), free(slot);
        return attn_fail(ATTN_ENOMEM, "reference gradients: cannot allocate one head in double (%lld x %lld)",
                         (long long)N, (long long)D);
    }
    head_copy h = {buf, buf + ND, buf + 2 * ND, buf + 3 * ND, buf + 4 * ND, buf + 5 * ND, buf + 6 * ND, buf + 7 * ND};
    row_stats rs = {buf + 8 * ND, buf + 8 * ND + N, w};
    const int64_t off = bh * ND;
    decode_tensor(p, q + off, h.q, h.qt);
    decode_tensor(p, k + off, h.k, h.kt);
    decode_tensor(p, v + off, h.v, h.vt);
    decode_tensor(p, d_o + off, h.g, h.gt);
    int failed = 0;
    slots_of(req->rows, req->nrows, N, slot);
#pragma omp parallel reduction(| : failed)
    {
        double *scratch = malloc((size_t)(4 * N + D) * sizeof(double));
        failed = !scratch;
#pragma omp for schedule(dynamic, 4)
        for (int64_t i = 0; i < N; i++)
            if (scratch) row_pass(p, &h, bh, i, slot[i], req, &rs, scratch);
        free(scratch);
    }
    const int64_t nkeys = failed ? 0 : req->keys ? req->nkeys : N; /* no key pass on half the row stats */
#pragma omp parallel reduction(| : failed)
    {
        double *scratch = malloc((size_t)(4 * N) * sizeof(double));
        failed = !scratch;
#pragma omp for schedule(dynamic, 4)
        for (int64_t r = 0; r < nkeys; r++)
            if (scratch) key_pass(p, &h, req->keys ? req->keys[r] : r, r, req, &rs, scratch);
        free(scratch);
    }
    free(buf), free(w), free(slot);
    if (failed) return attn_fail(ATTN_ENOMEM, "reference gradients: cannot allocate a thread's scratch");
    return ATTN_OK;
}
