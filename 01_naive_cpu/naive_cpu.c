/*
 * Stage 01: naive attention on the CPU, in double, parallel over rows with OpenMP.
 *
 * What it adds: the definition. For each (batch b, head h, query row i):
 *     s_j   = scale * q_i . k_j                     for the keys j that row i may see
 *                                                   (all N, or j <= i when causal)
 *     m     = max_j s_j
 *     p_j   = exp(s_j - m)                          subtracting m keeps exp() <= 1: scores in the
 *                                                   thousands would overflow even a double otherwise
 *     l     = sum_j p_j
 *     o_i   = sum_j p_j v_j / l
 *     LSE_i = m + ln(l)                             the natural log of sum_j exp(s_j)
 * Every quantity is a double computed from the same fp16 (or bf16) inputs the GPU stages read, so
 * the only rounding that matters is the final one to fp16. It is not what --check compares with:
 * suite/reference.c computes the same definition apart from every stage, this one included, so that
 * a bug here shows up as a FAIL.
 *
 * Versus the previous stage: none; this is where the suite starts.
 * Limits: any D from 1 to 256, any N >= 1; O(N) extra memory per thread (one row of scores,
 *         allocated before the parallel region so that a failed allocation cannot strand a thread);
 *         O(B*H*N*N*D) time, so the bench skips it above a few seconds of work.
 * Run:    build/attn --stage 01 --batch 1 --heads 4 --seq 512 --dim 64 --check
 *         (build/nocuda/attn after make NO_CUDA=1, or where make finds no nvcc)
 */
#include "naive_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "half.h"

int stage01_supports_dim(int64_t D) { return D >= 1 && D <= ATTN_MAX_D; }

/* One head's K and V as exact floats, so that the inner loops do no 16-bit decoding. */
typedef struct {
    int64_t bh;
    float *k, *v;
} head_cache;

static attn_status head_load(head_cache *c, const attn_problem *p, const uint16_t *k,
                             const uint16_t *v, int64_t bh) {
    int64_t n = p->N * p->D;
    if (!c->k) {
        c->k = attn_alloc((size_t)n * sizeof(float));
        c->v = attn_alloc((size_t)n * sizeof(float));
        char size[32];
        if (!c->k || !c->v)
            return attn_fail(ATTN_ENOMEM, "stage 01: cannot allocate %s for one head of K and V",
                             attn_size_text(2.0 * (double)n * 4.0, size, sizeof size));
    }
    const uint16_t *kh = k + bh * n, *vh = v + bh * n;
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < n; e++) {
        c->k[e] = attn_to_f32(kh[e], p->dtype);
        c->v[e] = attn_to_f32(vh[e], p->dtype);
    }
    c->bh = bh;
    return ATTN_OK;
}

/* One query row against one head: s (N doubles of scratch) -> o (D doubles), *lse. */
static void one_row(const attn_problem *p, const head_cache *c, const uint16_t *qrow, int64_t i,
                    double *s, double *qd, double *o, double *lse) {
    const int64_t D = p->D;
    const int64_t nkeys = p->causal ? i + 1 : p->N; /* causal: query i sees keys 0..i */
    const double scale = (double)p->scale;
    for (int64_t d = 0; d < D; d++) qd[d] = attn_to_f32(qrow[d], p->dtype);

    double m = -INFINITY;
    for (int64_t j = 0; j < nkeys; j++) {
        const float *kj = c->k + j * D;
        double dot = 0.0;
        for (int64_t d = 0; d < D; d++) dot += qd[d] * (double)kj[d];
        s[j] = dot * scale;
        if (s[j] > m) m = s[j];
    }
    double l = 0.0;
    for (int64_t j = 0; j < nkeys; j++) {
        s[j] = exp(s[j] - m);
        l += s[j];
    }
    for (int64_t d = 0; d < D; d++) o[d] = 0.0;
    for (int64_t j = 0; j < nkeys; j++) {
        const float *vj = c->v + j * D;
        const double pj = s[j];
        for (int64_t d = 0; d < D; d++) o[d] += pj * (double)vj[d];
    }
    for (int64_t d = 0; d < D; d++) o[d] /= l;
    *lse = m + log(l);
}

attn_status naive_cpu_rows(const attn_problem *p, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, const int64_t *rows, int64_t nrows, double *o,
                           double *lse) {
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    for (int64_t r = 1; r < nrows; r++)
        if (rows[r] < rows[r - 1])
            return attn_fail(ATTN_EINVAL, "naive_cpu_rows: rows must be sorted ascending");
    if (nrows > 0 && (rows[0] < 0 || rows[nrows - 1] >= attn_rows(p)))
        return attn_fail(ATTN_EINVAL, "naive_cpu_rows: row index out of range 0..%lld",
                         (long long)attn_rows(p) - 1);

    /* Each thread's scratch (a row of N scores and the query row in double) is allocated here, before
     * the parallel region: a thread whose malloc failed inside the region would skip the loop and
     * its barrier, and the other threads would wait at that barrier forever. */
    const int nt = omp_get_max_threads();
    const size_t per_thread = (size_t)(p->N + p->D);
    double *scratch = attn_alloc((size_t)nt * per_thread * sizeof(double));
    if (!scratch)
        return attn_fail(ATTN_ENOMEM, "stage 01: cannot allocate %d rows of %lld scores (one per thread)", nt,
                         (long long)p->N);
    head_cache c = {-1, NULL, NULL};
    int64_t r0 = 0;
    while (r0 < nrows && st == ATTN_OK) {
        const int64_t bh = rows[r0] / p->N;
        int64_t r1 = r0;
        while (r1 < nrows && rows[r1] / p->N == bh) r1++;
        st = head_load(&c, p, k, v, bh);
        if (st != ATTN_OK) break;
#pragma omp parallel num_threads(nt)
        {
            double *s = scratch + (size_t)omp_get_thread_num() * per_thread, *qd = s + p->N;
#pragma omp for schedule(dynamic, 16)
            for (int64_t r = r0; r < r1; r++) {
                const int64_t i = rows[r] % p->N;
                one_row(p, &c, q + rows[r] * p->D, i, s, qd, o + r * p->D, lse + r);
            }
        }
        r0 = r1;
    }
    free(scratch);
    free(c.k);
    free(c.v);
    return st;
}

attn_status stage01_run(const attn_problem *p, const attn_args *a) {
    /* The shape first: N sizes the allocations below, and N = -5 made them fail as ENOMEM, not EINVAL. */
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    /* Rows are processed a head at a time so that the double scratch stays at one head (N*D). */
    const int64_t N = p->N, D = p->D, BH = p->B * p->H;
    int64_t *rows = attn_alloc((size_t)N * sizeof(int64_t));
    double *o = attn_alloc((size_t)(N * D) * sizeof(double));
    double *lse = attn_alloc((size_t)N * sizeof(double));
    if (!rows || !o || !lse)
        st = attn_fail(ATTN_ENOMEM, "stage 01: cannot allocate scratch for one head (N = %lld)",
                       (long long)N);
    uint16_t *out = (uint16_t *)a->o;
    for (int64_t bh = 0; bh < BH && st == ATTN_OK; bh++) {
        for (int64_t i = 0; i < N; i++) rows[i] = bh * N + i;
        st = naive_cpu_rows(p, (const uint16_t *)a->q, (const uint16_t *)a->k,
                            (const uint16_t *)a->v, rows, N, o, lse);
        if (st != ATTN_OK) break;
        for (int64_t e = 0; e < N * D; e++) out[bh * N * D + e] = attn_from_f32((float)o[e], p->dtype);
        if (a->lse)
            for (int64_t i = 0; i < N; i++) a->lse[bh * N + i] = (float)lse[i];
    }
    free(rows);
    free(o);
    free(lse);
    return st;
}
