/*
 * test_context_parallel.c: stage 10. On the CPU: the plan covers every visible (query, key) pair
 * exactly once, never lets a padding key reach a real query, and gives every GPU the same causal
 * work; the LSE merge (cp_merge.h, the same code as the kernel's) against a direct softmax in double,
 * and with empty (-inf) partials. On a GPU: one GPU is the local stage bit for bit; 2 to 4 ranks on
 * one GPU (ATTN_CP_ONE_GPU=1: the whole ring schedule, cudaMemcpyAsync in place of NCCL) and, where
 * two GPUs are present, the NCCL ring, against the double reference; --gpus refusals.
 */
#include <math.h>

#include "01_naive_cpu/naive_cpu.h"
#include "10_context_parallel/cp_merge.h"
#include "10_context_parallel/cp_plan.h"
#include "10_context_parallel/stage10.h"
#include "half.h"
#include "test_util.h"

#include <criterion/parameterized.h>

/* ---- the plan ----------------------------------------------------------------------------- */

/* Runs every call of every rank and step on paper and counts, for each real (query, key) pair, how
 * often a merged row saw that key. */
static void check_plan(int64_t N, int G, int causal) {
    const cp_plan pl = cp_plan_make(N, G, causal);
    cr_assert(pl.n * pl.c >= N && pl.n * pl.c - N < pl.n, "N=%lld G=%d: %d chunks of %lld", (long long)N, G,
              pl.n, (long long)pl.c);
    unsigned char *cover = calloc((size_t)(N * N), 1);
    cr_assert_not_null(cover);
    for (int r = 0; r < G; r++)
        for (int s = 0; s < G; s++) {
            const int src = cp_kv_source(&pl, r, s);
            for (int qs = 0; qs < pl.S; qs++)
                for (int ks = 0; ks < pl.S; ks++) {
                    const int qc = cp_chunk(&pl, r, qs), kc = cp_chunk(&pl, src, ks);
                    cp_call call;
                    int64_t it = 0;
                    while (cp_pair_call(&pl, qc, kc, &it, &call)) {
                        cr_assert(call.n >= 1 && call.q0 >= 0 && call.q0 + call.n <= pl.c, "N=%lld G=%d",
                                  (long long)N, G);
                        cr_assert(call.gather || call.n == pl.c);
                        cr_assert(!call.causal || qc == kc);
                        for (int64_t p = call.from; p < call.to; p++) {
                            const int64_t qi = qc * pl.c + call.q0 + p;
                            cr_assert(qi < N, "N=%lld G=%d causal=%d: padding row %lld merged", (long long)N,
                                      G, causal, (long long)qi);
                            for (int64_t j = 0; j < call.n; j++) {
                                if (call.causal && j > p) continue;
                                const int64_t kj = kc * pl.c + j;
                                cr_assert(kj < N, "N=%lld G=%d causal=%d: padding key %lld reaches row %lld",
                                          (long long)N, G, causal, (long long)kj, (long long)qi);
                                cover[qi * N + kj]++;
                            }
                        }
                    }
                }
        }
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++)
            cr_assert_eq(cover[i * N + j], (!causal || j <= i) ? 1 : 0,
                         "N=%lld G=%d causal=%d: query %lld saw key %lld %d times", (long long)N, G, causal,
                         (long long)i, (long long)j, cover[i * N + j]);
    free(cover);
}

Test(context_parallel, plan_covers_every_visible_pair_once) {
    static const int64_t Ns[] = {63, 64, 65, 100, 127, 128, 129, 255, 257, 1000, 1001};
    for (int G = 1; G <= 8; G++) /* every G the stage takes (ATTN_MAX_GPUS), as the README says */
        for (int causal = 0; causal <= 1; causal++) {
            for (int64_t N = 1; N <= 40; N++) check_plan(N, G, causal);
            for (int i = 0; i < (int)(sizeof Ns / sizeof Ns[0]); i++) check_plan(Ns[i], G, causal);
        }
}

/* The plan's ring is the one cp_ring.c runs: at step 0 each rank holds its own K/V shard, and at each
 * step it receives what rank r - 1 held the step before (ncclRecv from (r + G - 1) % G). A plan that
 * rotated the other way still covers every pair (a permutation either way), but would name shards
 * the ranks do not hold. */
Test(context_parallel, plan_follows_the_ring) {
    for (int G = 1; G <= 8; G++) {
        const cp_plan pl = cp_plan_make((int64_t)G * 2 * 1000, G, 1);
        for (int r = 0; r < G; r++) {
            cr_assert_eq(cp_kv_source(&pl, r, 0), r, "G=%d rank %d starts with its own shard", G, r);
            for (int s = 0; s + 1 < G; s++)
                cr_assert_eq(cp_kv_source(&pl, r, s + 1), cp_kv_source(&pl, (r + G - 1) % G, s),
                             "G=%d rank %d step %d: not what rank %d held at step %d", G, r, s + 1,
                             (r + G - 1) % G, s);
        }
    }
}

/* Causal: the mirror placement gives every GPU the same work at every step (2 chunk-pairs of c x c,
 * the diagonal ones counting half); non-causal: one chunk-pair per step. */
Test(context_parallel, plan_balances_the_work) {
    for (int G = 1; G <= 8; G++)
        for (int causal = 0; causal <= 1; causal++) {
            const cp_plan pl = cp_plan_make((int64_t)G * 2 * 1000, G, causal);
            for (int r = 0; r < G; r++) {
                for (int s = 0; s < G; s++) {
                    const int src = cp_kv_source(&pl, r, s);
                    double units = 0;
                    for (int qs = 0; qs < pl.S; qs++)
                        for (int ks = 0; ks < pl.S; ks++) {
                            const cp_mask m = cp_pair_mask(&pl, cp_chunk(&pl, r, qs), cp_chunk(&pl, src, ks));
                            units += m == CP_FULL ? 1.0 : m == CP_DIAG ? 0.5 : 0.0;
                        }
                    cr_assert_eq(units, causal ? 2.0 : 1.0, "G=%d causal=%d rank %d step %d: %g units", G,
                                 causal, r, s, units);
                }
                int64_t calls;
                double work;
                cp_rank_work(&pl, r, &calls, &work);
                cr_assert_eq(work, causal ? 2.0 * G : (double)G);
            }
        }
}

/* A chunk of padding only (N < n) sees nothing and is seen by nothing, as a query chunk too (cp_plan.h):
 * N = 3 in chunks of c = 1 leaves chunks 3 .. n-1 empty. */
Test(context_parallel, chunks_of_padding_only_are_skipped) {
    for (int causal = 0; causal <= 1; causal++) {
        const cp_plan pl = cp_plan_make(3, 4, causal);
        cr_assert_eq(pl.c, 1);
        for (int qc = 0; qc < pl.n; qc++)
            for (int kc = 0; kc < pl.n; kc++) {
                const cp_mask want = qc >= 3 || kc >= 3   ? CP_SKIP
                                     : !causal || kc < qc ? CP_FULL
                                     : kc == qc           ? CP_DIAG
                                                          : CP_SKIP;
                cr_assert_eq(cp_pair_mask(&pl, qc, kc), want, "causal=%d query chunk %d key chunk %d", causal,
                             qc, kc);
            }
    }
}

/* cp_rank_work, by hand (cp_bench prints its calls): N = 9 on G = 2, non-causal: chunks of c = 5, chunk 1
 * holds 4 rows. Rank 0: one 5-row call on its own chunk, two 4-row windows on chunk 1's keys (work
 * 1 + 2 (4/5)^2); rank 1: one 4-row call on its own chunk, one 5-row call on chunk 0 (work (4/5)^2 + 1). */
Test(context_parallel, rank_work_counts_calls_and_short_ones) {
    const cp_plan pl = cp_plan_make(9, 2, 0);
    static const int64_t want_calls[2] = {3, 2};
    static const double want_work[2] = {1.0 + 2 * 0.64, 0.64 + 1.0};
    for (int r = 0; r < 2; r++) {
        int64_t calls;
        double work;
        cp_rank_work(&pl, r, &calls, &work);
        cr_assert_eq(calls, want_calls[r], "rank %d: %lld calls", r, (long long)calls);
        cr_assert(fabs(work - want_work[r]) < 1e-12, "rank %d: work %.17g, want %.17g", r, work,
                  want_work[r]);
    }
}

/* ---- the merge ---------------------------------------------------------------------------- */

static uint64_t rng_state = 0x1234567887654321ull;
static double urand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(rng_state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

/* Keys split into P random parts; each part's (LSE, O) computed in double and rounded to float,
 * merged in float in a random order, against the softmax over all keys in double. The fp32 LSEs
 * fix each weight e^{LSE_i - LSE} only to a relative |LSE| 2^-24, so the bound grows with |LSE|. */
Test(context_parallel, merge_matches_direct_softmax) {
    enum { K = 300, D = 8, PMAX = 6 };
    static const double sigmas[] = {0.5, 3.0, 40.0, 1000.0};
    for (int trial = 0; trial < 400; trial++) {
        const double sigma = sigmas[trial % 4];
        const int P = 1 + trial % PMAX;
        double s[K], v[K][D], m = -INFINITY, vmax = 0;
        int part[K];
        for (int j = 0; j < K; j++) {
            s[j] = sigma * nrand();
            part[j] = j < P ? j : (int)(urand() * P); /* no part is empty */
            for (int d = 0; d < D; d++) {
                v[j][d] = nrand();
                vmax = fmax(vmax, fabs(v[j][d]));
            }
            m = fmax(m, s[j]);
        }
        double l = 0, o_ref[D] = {0};
        for (int j = 0; j < K; j++) {
            l += exp(s[j] - m);
            for (int d = 0; d < D; d++) o_ref[d] += exp(s[j] - m) * v[j][d];
        }
        const double lse_ref = m + log(l);
        for (int d = 0; d < D; d++) o_ref[d] /= l;

        float lse = -INFINITY, o[D], lse_max = 0;
        for (int d = 0; d < D; d++) o[d] = NAN; /* an empty start is never read */
        const int first = (int)(urand() * P);
        for (int t = 0; t < P; t++) {
            const int pi = (first + t) % P;
            double pm = -INFINITY, pl = 0, po[D] = {0};
            for (int j = 0; j < K; j++)
                if (part[j] == pi) pm = fmax(pm, s[j]);
            for (int j = 0; j < K; j++)
                if (part[j] == pi) {
                    pl += exp(s[j] - pm);
                    for (int d = 0; d < D; d++) po[d] += exp(s[j] - pm) * v[j][d];
                }
            float ob[D];
            for (int d = 0; d < D; d++) ob[d] = (float)(po[d] / pl);
            const float lb = (float)(pm + log(pl));
            lse_max = fmaxf(lse_max, fabsf(lb));
            cp_merge_row(&lse, o, lb, ob, D);
        }
        const double u = 0x1p-24, tol_lse = 8.0 * P * u * (1.0 + fabs(lse_ref));
        const double tol_o = 8.0 * P * u * (1.0 + lse_max) * vmax;
        cr_assert(fabs(lse - lse_ref) <= tol_lse, "trial %d (sigma %g, %d parts): LSE %.9g, want %.12g",
                  trial, sigma, P, (double)lse, lse_ref);
        for (int d = 0; d < D; d++)
            cr_assert(fabs(o[d] - o_ref[d]) <= tol_o,
                      "trial %d (sigma %g, %d parts): O[%d] %.9g, want %.12g (tol %.3g)", trial, sigma, P, d,
                      (double)o[d], o_ref[d], tol_o);
    }
}

/* A partial over no keys (LSE = -inf) contributes nothing, whatever its O holds; two of them stay
 * empty without a NaN; a NaN LSE is never hidden; LSEs far apart or near exp's overflow merge exactly. */
Test(context_parallel, merge_with_empty_and_extreme_partials) {
    enum { D = 4 };
    const float ob[D] = {1.5f, -2.0f, 0.25f, 3.0f}, nan4[D] = {NAN, NAN, NAN, NAN};
    float lse = -INFINITY, o[D] = {NAN, NAN, NAN, NAN};
    cp_merge_row(&lse, o, 2.5f, ob, D); /* empty running output, then a partial */
    cr_assert_eq(lse, 2.5f);
    for (int d = 0; d < D; d++) cr_assert_eq(o[d], ob[d], "O[%d] = %g", d, (double)o[d]);
    cp_merge_row(&lse, o, -INFINITY, nan4, D); /* an empty partial into a full row */
    cr_assert_eq(lse, 2.5f);
    for (int d = 0; d < D; d++) cr_assert_eq(o[d], ob[d]);

    float lse2 = -INFINITY, o2[D] = {NAN, NAN, NAN, NAN};
    cp_merge_row(&lse2, o2, -INFINITY, nan4, D); /* nothing and nothing */
    cr_assert(isinf(lse2) && lse2 < 0);
    for (int d = 0; d < D; d++) cr_assert_eq(o2[d], 0.0f);

    float lse3 = 1.0f, o3[D] = {1, 1, 1, 1};
    cp_merge_row(&lse3, o3, NAN, ob, D); /* a broken partial shows */
    cr_assert(isnan(lse3) && isnan(o3[0]));

    float lse4 = 3000.0f, o4[D] = {1, 2, 3, 4};
    cp_merge_row(&lse4, o4, -3000.0f, ob, D); /* e^-6000: weight exactly 0 */
    cr_assert_eq(lse4, 3000.0f);
    cr_assert(o4[0] == 1.0f && o4[3] == 4.0f);

    float lse5 = 88.7f, o5[D] = {1, 2, 3, 4}; /* e^88.7 + e^88.7 overflows fp32; the merge never forms it */
    cp_merge_row(&lse5, o5, 88.7f, ob, D);
    cr_assert(fabsf(lse5 - (88.7f + 0.69314718f)) <= 1e-5f, "LSE %.9g", (double)lse5);
    for (int d = 0; d < D; d++)
        cr_assert(fabsf(o5[d] - 0.5f * ((float)(d + 1) + ob[d])) <= 1e-6f, "O[%d] = %g", d, (double)o5[d]);
}

/* ---- the whole design on the CPU ---------------------------------------------------------- */

/* The ring of cp_ring.c done by hand on the CPU, with stage 01 as the local stage: zero-padded
 * chunks, each rank's slots, the shard in hand at each step, each call's square problem cut out of
 * the slots as the ring cuts it (query rows q0 .. q0+n-1, key rows 0 .. n-1), its partial rounded to
 * 16 bits as a GPU stage writes it, merged in fp32 by cp_merge_row into rows q0+from .. q0+to-1, and
 * the result against the double reference. What is left to the GPU tests is the CUDA side. */
/* The emulated ring's buffers: rank r's slots of Q, of K then V, of its fp32 O accumulators and LSEs; one
 * local call's cut-out problem (qs_ .. ls_); the gathered result. */
typedef struct {
    attn_problem p;
    cp_plan pl;
    int64_t BH, c, S, slot;
    uint16_t *q, *kv, *qs_, *ks_, *vs_, *os_, *o_fin;
    float *o_acc, *lse_acc, *ls_, *l_fin;
} ring_emu;

static void emu_alloc(ring_emu *e, const attn_problem *p, int G) {
    e->p = *p, e->pl = cp_plan_make(p->N, G, p->causal);
    e->BH = p->B * p->H, e->c = e->pl.c, e->S = e->pl.S, e->slot = e->BH * e->c * p->D;
    const int64_t slots = G * e->S * e->slot, rows = G * e->S * e->BH * e->c;
    e->q = calloc((size_t)slots, 2), e->kv = calloc((size_t)(2 * slots), 2);
    e->o_acc = calloc((size_t)slots, 4), e->lse_acc = malloc((size_t)rows * 4);
    e->qs_ = malloc((size_t)e->slot * 2), e->ks_ = malloc((size_t)e->slot * 2),
    e->vs_ = malloc((size_t)e->slot * 2);
    e->os_ = malloc((size_t)e->slot * 2), e->o_fin = malloc((size_t)attn_qkv_elems(p) * 2);
    e->ls_ = malloc((size_t)(e->BH * e->c) * 4), e->l_fin = malloc((size_t)attn_rows(p) * 4);
    cr_assert(e->q && e->kv && e->o_acc && e->lse_acc && e->qs_ && e->ks_ && e->vs_ && e->os_ && e->o_fin &&
              e->ls_ && e->l_fin);
    for (int64_t i = 0; i < rows; i++) e->lse_acc[i] = -INFINITY;
}

static void emu_free(ring_emu *e) {
    free(e->q), free(e->kv), free(e->o_acc), free(e->lse_acc), free(e->qs_), free(e->ks_), free(e->vs_);
    free(e->os_), free(e->o_fin), free(e->ls_), free(e->l_fin);
}

/* scatter: chunk ch's real rows of every head into rank r's slot (padding rows stay zero) */
static void emu_scatter(ring_emu *e, const attn_inputs *in, int G) {
    const int64_t N = e->p.N, D = e->p.D, S = e->S, c = e->c;
    for (int r = 0; r < G; r++)
        for (int sl = 0; sl < S; sl++) {
            const int ch = cp_chunk(&e->pl, r, sl);
            for (int64_t bh = 0; bh < e->BH; bh++)
                for (int64_t i = 0; i < cp_chunk_rows(&e->pl, ch); i++)
                    for (int64_t d = 0; d < D; d++) {
                        const int64_t g = (bh * N + ch * c + i) * D + d, l = (bh * c + i) * D + d;
                        e->q[(r * S + sl) * e->slot + l] = in->q[g];
                        e->kv[(r * 2 * S + sl) * e->slot + l] = in->k[g];
                        e->kv[(r * 2 * S + S + sl) * e->slot + l] = in->v[g];
                    }
        }
}

/* One local call of rank r: its square problem cut out of Q slot qsl and rank src's K/V slot ksl, stage
 * 01 on it, the partial rounded to 16 bits as a GPU stage writes it, merged into rows from .. to-1. */
static void emu_call(ring_emu *e, int r, int qsl, int src, int ksl, const cp_call *call) {
    const int64_t n = call->n, D = e->p.D, S = e->S, c = e->c;
    float ob[ATTN_MAX_D];
    for (int64_t bh = 0; bh < e->BH; bh++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t d = 0; d < D; d++) {
                const int64_t to = (bh * n + i) * D + d;
                e->qs_[to] = e->q[(r * S + qsl) * e->slot + (bh * c + call->q0 + i) * D + d];
                e->ks_[to] = e->kv[(src * 2 * S + ksl) * e->slot + (bh * c + i) * D + d];
                e->vs_[to] = e->kv[(src * 2 * S + S + ksl) * e->slot + (bh * c + i) * D + d];
            }
    attn_problem lp = e->p;
    lp.N = n, lp.causal = call->causal;
    attn_args a = {.q = e->qs_, .k = e->ks_, .v = e->vs_, .o = e->os_, .lse = e->ls_, .gpus = 1};
    cr_assert_eq(stage01_run(&lp, &a), ATTN_OK, "%s", attn_last_error());
    for (int64_t bh = 0; bh < e->BH; bh++)
        for (int64_t i = call->from; i < call->to; i++) {
            const int64_t row = (r * S + qsl) * e->BH * c + bh * c + call->q0 + i;
            for (int64_t d = 0; d < D; d++) ob[d] = attn_to_f32(e->os_[(bh * n + i) * D + d], e->p.dtype);
            cp_merge_row(&e->lse_acc[row], &e->o_acc[row * D], e->ls_[bh * n + i], ob, D);
        }
}

/* Step s of rank r: the shard in hand is a copy of rank src's own; every pair of slots makes its calls. */
static void emu_step(ring_emu *e, int r, int s) {
    const int src = cp_kv_source(&e->pl, r, s);
    for (int qsl = 0; qsl < e->S; qsl++)
        for (int ksl = 0; ksl < e->S; ksl++) {
            cp_call call;
            int64_t it = 0;
            while (cp_pair_call(&e->pl, cp_chunk(&e->pl, r, qsl), cp_chunk(&e->pl, src, ksl), &it, &call))
                emu_call(e, r, qsl, src, ksl, &call);
        }
}

/* gather: the real rows back to [B, H, N, D], rounded once */
static void emu_gather(ring_emu *e, int G) {
    const int64_t N = e->p.N, D = e->p.D, S = e->S, c = e->c;
    for (int r = 0; r < G; r++)
        for (int sl = 0; sl < S; sl++) {
            const int ch = cp_chunk(&e->pl, r, sl);
            for (int64_t bh = 0; bh < e->BH; bh++)
                for (int64_t i = 0; i < cp_chunk_rows(&e->pl, ch); i++) {
                    const int64_t row = (r * S + sl) * e->BH * c + bh * c + i, g = bh * N + ch * c + i;
                    e->l_fin[g] = e->lse_acc[row];
                    for (int64_t d = 0; d < D; d++)
                        e->o_fin[g * D + d] = attn_from_f32(e->o_acc[row * D + d], e->p.dtype);
                }
        }
}

/* The ring of cp_ring.c done by hand on the CPU, with stage 01 as the local stage: zero-padded
 * chunks, each rank's slots, the shard in hand at each step, each call's square problem cut out of
 * the slots as the ring cuts it (query rows q0 .. q0+n-1, key rows 0 .. n-1), its partial rounded to
 * 16 bits as a GPU stage writes it, merged in fp32 by cp_merge_row into rows q0+from .. q0+to-1, and
 * the result against the double reference. What is left to the GPU tests is the CUDA side. */
static void emulate_ring(int64_t N, int G, int causal, int64_t D, attn_dtype t, attn_init init) {
    attn_problem p = attn_problem_make(1, 2, N, D, causal);
    p.dtype = t;
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 900 + (uint64_t)(N * 31 + G * 7 + causal), init), ATTN_OK);
    ring_emu e;
    emu_alloc(&e, &p, G);
    emu_scatter(&e, &in, G);
    for (int r = 0; r < G; r++)
        for (int s = 0; s < G; s++) emu_step(&e, r, s);
    emu_gather(&e, G);
    int64_t *rows = NULL, nrows = 0;
    attn_check chk;
    cr_assert_eq(attn_sample_rows(&p, 1, 0, 1, &rows, &nrows), ATTN_OK);
    cr_assert_eq(nrows, attn_rows(&p));
    cr_assert_eq(attn_check_output(&in, e.o_fin, e.l_fin, rows, nrows, &chk), ATTN_OK);
    cr_assert(chk.pass,
              "N=%lld G=%d causal=%d D=%lld %s init=%s: err/tol %.3g at [h=%lld n=%lld d=%lld] got %g "
              "want %g, LSE err/tol %.3g, non-finite %lld",
              (long long)N, G, causal, (long long)D, attn_dtype_name(t), attn_init_name(init),
              chk.worst_ratio, (long long)chk.worst_h, (long long)chk.worst_n, (long long)chk.worst_d,
              chk.worst_got, chk.worst_want, chk.lse_worst_ratio, (long long)chk.nonfinite);
    free(rows);
    emu_free(&e);
    attn_inputs_free(&in);
}

Test(context_parallel, ring_design_on_the_cpu_matches_reference, .timeout = 600) {
    static const int64_t Ns[] = {1, 2, 5, 17, 64, 129, 301};
    for (int G = 1; G <= 4; G++)
        for (int causal = 0; causal <= 1; causal++)
            for (int i = 0; i < (int)(sizeof Ns / sizeof Ns[0]); i++)
                emulate_ring(Ns[i], G, causal, 16, ATTN_F16, ATTN_INIT_NORMAL);
    emulate_ring(301, 3, 1, 64, ATTN_BF16, ATTN_INIT_NORMAL);
    emulate_ring(301, 2, 0, 32, ATTN_F16, ATTN_INIT_LARGE);
    emulate_ring(301, 3, 1, 32, ATTN_F16, ATTN_INIT_RISING);
    emulate_ring(301, 4, 0, 32, ATTN_F16, ATTN_INIT_FIRST_MAX);
}

/* ---- on the GPU --------------------------------------------------------------------------- */

static const attn_stage *stage10_or_skip(void) {
    const attn_stage *s = attn_find_stage("10");
    cr_assert_not_null(s);
    SKIP_UNLESS_RUNNABLE(s);
    return s;
}

static attn_result run_checked(const attn_stage *s, const attn_inputs *in, int gpus, uint16_t *o,
                               float *lse) {
    attn_run_opts opt = attn_run_opts_default();
    opt.warmup = 0, opt.repeat = 2, opt.check = 1, opt.gpus = gpus;
    attn_result r;
    attn_status st = attn_run(s, in, &opt, &r, o, lse);
    cr_assert_eq(st, ATTN_OK, "stage %s, %d GPUs, N=%lld D=%lld causal=%d: %s", s->id, gpus,
                 (long long)in->p.N, (long long)in->p.D, in->p.causal, attn_last_error());
    return r;
}

#define ASSERT_PASS(r, what, ...)                                                                            \
    cr_assert((r).chk.pass && (r).identical == 1,                                                            \
              what ": err/tol %.3g, LSE err/tol %.3g, non-finite %lld, worst [b=%lld h=%lld n=%lld], "       \
                   "repeat identical %d",                                                                    \
              __VA_ARGS__, (r).chk.worst_ratio, (r).chk.lse_worst_ratio, (long long)(r).chk.nonfinite,       \
              (long long)(r).chk.worst_b, (long long)(r).chk.worst_h, (long long)(r).chk.worst_n,            \
              (r).identical)

/* On one GPU stage 10 is its local stage, run as is: the same bits. */
Test(context_parallel, one_gpu_is_the_local_stage_bit_for_bit) {
    const attn_stage *s = stage10_or_skip();
    for (int causal = 0; causal <= 1; causal++) {
        attn_problem p = attn_problem_make(2, 3, 1000, 64, causal);
        const attn_stage *local = stage10_local_stage(&p);
        cr_assert_not_null(local, "%s", attn_last_error());
        attn_inputs in;
        cr_assert_eq(attn_inputs_random(&in, &p, 71 + (uint64_t)causal, ATTN_INIT_NORMAL), ATTN_OK);
        const size_t ob = (size_t)attn_qkv_elems(&p) * 2, lb = (size_t)attn_rows(&p) * 4;
        uint16_t *o10 = malloc(ob), *ol = malloc(ob);
        float *l10 = malloc(lb), *ll = malloc(lb);
        cr_assert(o10 && ol && l10 && ll);
        attn_result r = run_checked(s, &in, 1, o10, l10);
        ASSERT_PASS(r, "stage 10 on one GPU, causal=%d", causal);
        r = run_checked(local, &in, 1, ol, ll);
        cr_assert(!memcmp(o10, ol, ob) && !memcmp(l10, ll, lb), "stage 10 on one GPU differs from stage %s",
                  local->id);
        free(o10), free(ol), free(l10), free(ll);
        attn_inputs_free(&in);
    }
}

typedef struct {
    int G, N, D, causal, dtype, init;
} ring_case;

#define MAX_RING_CASES 256
static int add_ring_cases(ring_case *c, int n, const int *Gs, int nG, const int *Ns, int nN) {
    static const int Ds[] = {64, 128};
    for (int g = 0; g < nG; g++)
        for (int i = 0; i < nN; i++)
            for (int d = 0; d < 2; d++)
                for (int causal = 0; causal <= 1 && n < MAX_RING_CASES; causal++)
                    c[n++] = (ring_case){Gs[g], Ns[i], Ds[d], causal, ATTN_F16, ATTN_INIT_NORMAL};
    /* bf16, and scores in the thousands (LSEs in the thousands merged), at a ragged N */
    for (int g = 0; g < nG && n + 2 <= MAX_RING_CASES; g++) {
        c[n++] = (ring_case){Gs[g], 1001, 128, 1, ATTN_BF16, ATTN_INIT_NORMAL};
        c[n++] = (ring_case){Gs[g], 1001, 64, 0, ATTN_F16, ATTN_INIT_LARGE};
    }
    return n;
}

static void run_ring_case(const ring_case *c) {
    const attn_stage *s = stage10_or_skip();
    attn_problem p = attn_problem_make(2, 3, c->N, c->D, c->causal);
    p.dtype = (attn_dtype)c->dtype;
    attn_inputs in;
    const uint64_t seed = 0xc0ffeeull +
                          (uint64_t)(((c->G * 4099 + c->N) * 263 + c->D) * 4 + c->causal * 2 + c->dtype) * 8 +
                          (uint64_t)c->init;
    cr_assert_eq(attn_inputs_random(&in, &p, seed, (attn_init)c->init), ATTN_OK, "%s", attn_last_error());
    attn_result r = run_checked(s, &in, c->G, NULL, NULL);
    ASSERT_PASS(r, "stage 10, %d ranks, N=%d D=%d causal=%d %s init=%s", c->G, c->N, c->D, c->causal,
                attn_dtype_name(p.dtype), attn_init_name((attn_init)c->init));
    attn_inputs_free(&in);
}

/* 2, 3 and 4 ranks on one GPU: the ring's schedule, double buffering, padding, the short chunk's
 * windows and the merge, against the double reference, on any machine with one GPU. N = 1 and 5
 * leave whole chunks empty; 1001 is a multiple of neither 2G nor any tile. */
ParameterizedTestParameters(context_parallel, ranks_on_one_gpu_match_reference) {
    static ring_case cases[MAX_RING_CASES];
    static const int Gs[] = {2, 3, 4}, Ns[] = {1, 5, 17, 129, 1000, 1001};
    const int n = add_ring_cases(cases, 0, Gs, 3, Ns, 6);
    return cr_make_param_array(ring_case, cases, (size_t)n);
}

ParameterizedTest(ring_case *c, context_parallel, ranks_on_one_gpu_match_reference, .timeout = 600) {
    setenv("ATTN_CP_ONE_GPU", "1", 1);
    run_ring_case(c);
}

/* The NCCL ring on two GPUs (skipped with fewer). */
ParameterizedTestParameters(context_parallel, two_gpus_match_reference) {
    static ring_case cases[MAX_RING_CASES];
    static const int Gs[] = {2}, Ns[] = {1, 17, 1000, 1001, 4099};
    const int n = add_ring_cases(cases, 0, Gs, 1, Ns, 5);
    return cr_make_param_array(ring_case, cases, (size_t)n);
}

ParameterizedTest(ring_case *c, context_parallel, two_gpus_match_reference, .timeout = 600) {
    unsetenv("ATTN_CP_ONE_GPU");
    stage10_or_skip();
    if (attn_gpu_count() < 2)
        cr_skip_test("needs 2 GPUs for the NCCL ring: this machine has %d", attn_gpu_count());
    run_ring_case(c);
}

/* More GPUs than present is bad input (exit 2 from the front end), said with the count. */
Test(context_parallel, refuses_more_gpus_than_present) {
    unsetenv("ATTN_CP_ONE_GPU");
    const attn_stage *s = stage10_or_skip();
    attn_problem p = attn_problem_make(1, 1, 64, 64, 0);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 5, ATTN_INIT_NORMAL), ATTN_OK);
    attn_run_opts opt = attn_run_opts_default();
    opt.gpus = attn_gpu_count() + 1;
    attn_result r;
    cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_EINVAL);
    cr_assert(strstr(attn_last_error(), "this machine has"), "%s", attn_last_error());
    attn_inputs_free(&in);
}

/* ---- the front end ------------------------------------------------------------------------ */

static char out[65536];
static int attn(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s", attn_bin(), args);
    return run_cmd(cmd, out, sizeof out);
}

Test(context_parallel, cli_gpus_flag) {
    cr_assert_eq(attn("--stage 10 --gpus 0"), 2, "%s", out);
    cr_assert(strstr(out, "--gpus must be an integer from 1 to"), "%s", out);
    cr_assert_eq(attn("--stage 06 --gpus 2 --seq 8"), 2, "%s", out);
    cr_assert(strstr(out, "stage 06 runs on one GPU"), "%s", out);
    cr_assert_eq(attn("--stage 01 --gpus 2 --seq 8"), 2, "%s", out);
    cr_assert(strstr(out, "stage 01 runs on the CPU"), "%s", out);
    cr_assert_eq(attn("--stage 01 --gpus 1 --seq 8 --dim 8"), 0, "--gpus 1 is every stage's own: %s", out);
    const attn_stage *s = attn_find_stage("10");
    if (attn_stage_available(s) != ATTN_OK) {
        /* not built (no nvcc or no NCCL) or no GPU: it says which, and exits 1 */
        cr_assert_eq(attn("--stage 10 --seq 64 --dim 64"), 1, "%s", out);
        cr_assert(strstr(out, "stage 10"), "%s", out);
        return;
    }
    char args[256];
    snprintf(args, sizeof args, "--stage 10 --gpus %d --seq 64 --dim 64", attn_gpu_count() + 1);
    cr_assert_eq(attn(args), 2, "%s", out);
    cr_assert(strstr(out, "this machine has"), "%s", out);
    cr_assert_eq(attn("--stage 10 --gpus 1 --batch 2 --heads 3 --seq 300 --dim 64 --causal --check"), 0, "%s",
                 out);
    cr_assert(strstr(out, "PASS") && strstr(out, "(1 x "), "%s", out);
}

/* gpu_proof.sh with a misspelt PROOF_PARTS ran no section and so reported every check passed (exit
 * 0 on a 2-GPU machine): an unknown part, or none, is refused first, exit 2, on any machine. */
Test(context_parallel, gpu_proof_refuses_unknown_parts) {
    cr_assert_eq(run_cmd("PROOF_PARTS=corect bash 10_context_parallel/gpu_proof.sh", out, sizeof out), 2,
                 "%s", out);
    cr_assert(
        strstr(out, "PROOF_PARTS: unknown part 'corect' (the parts: build correct tests scaling memory)"),
        "%s", out);
    cr_assert_eq(run_cmd("PROOF_PARTS=' ' bash 10_context_parallel/gpu_proof.sh", out, sizeof out), 2, "%s",
                 out);
    cr_assert(strstr(out, "PROOF_PARTS names no part"), "%s", out);
}
