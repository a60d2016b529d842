/*
 * test_reference_backward.c: the backward's reference (reference_backward.c) and its check
 * (check_backward.c), which every backward stage is judged by, judged themselves without them.
 *
 * The gradients: central differences of the loss L = sum dO * O, with O from a plain double forward
 * written here (softmax over the visible keys, nothing shared with reference.c or
 * reference_backward.c). With h = 2^-18 on inputs of order one the difference quotient is within
 * about h^2 = 4e-11 of the derivative (truncation) and 1e-16 / h = 3e-11 of rounding: the reference
 * must agree to 1e-8 relative to the gradient's scale. Tiny shapes (N up to 17), every one causal and
 * not, fp16 and bf16, odd D.
 *
 * The check: exact gradients, rounded to 16 bits, pass with room to spare; gradients with the D term
 * dropped, one key's dK scaled by 1 + 2^-6, one element left at the poison, or one NaN fail, each with
 * the element named. The reference a check keeps for the next one is that of the same inputs: the
 * next check of the same ones agrees, element for element, and inputs changed in place are checked
 * anew.
 */
#include <math.h>
#include <time.h>

#include "half.h"
#include "reference.h"
#include "reference_backward.h"
#include "test_util.h"

/* O of head bh from double inputs, then L = sum dO * O. */
static double loss_of(const attn_problem *p, const double *q, const double *k, const double *v, const double *g) {
    const int64_t N = p->N, D = p->D;
    double L = 0.0;
    for (int64_t bh = 0; bh < p->B * p->H; bh++)
        for (int64_t i = 0; i < N; i++) {
            const int64_t nk = p->causal ? i + 1 : N, r = bh * N + i;
            double s[64], m = -INFINITY, l = 0.0;
            for (int64_t j = 0; j < nk; j++) {
                double dot = 0.0;
                for (int64_t d = 0; d < D; d++) dot += q[r * D + d] * k[(bh * N + j) * D + d];
                s[j] = dot * (double)p->scale;
                m = fmax(m, s[j]);
            }
            for (int64_t j = 0; j < nk; j++) l += exp(s[j] - m);
            for (int64_t d = 0; d < D; d++) {
                double o = 0.0;
                for (int64_t j = 0; j < nk; j++) o += exp(s[j] - m) / l * v[(bh * N + j) * D + d];
                L += g[r * D + d] * o;
            }
        }
    return L;
}

static double *decoded(const uint16_t *x, int64_t n, attn_dtype t) {
    double *d = malloc((size_t)n * sizeof *d);
    cr_assert_not_null(d);
    for (int64_t e = 0; e < n; e++) d[e] = attn_to_f32(x[e], t);
    return d;
}

/* dL/dx_e by central differences, x one of the decoded inputs (restored after). */
static double difference(const attn_problem *p, double *x, int64_t e, double *q, double *k, double *v, double *g) {
    const double h = 0x1p-18, x0 = x[e];
    x[e] = x0 + h;
    const double up = loss_of(p, q, k, v, g);
    x[e] = x0 - h;
    const double down = loss_of(p, q, k, v, g);
    x[e] = x0;
    return (up - down) / (2.0 * h);
}

static void gradients_match_differences(int64_t N, int64_t D, int causal, attn_dtype t, uint64_t seed) {
    attn_problem p = attn_problem_make(1, 2, N, D, causal);
    p.dtype = t;
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, seed, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(attn_inputs_random_grad(&in, seed + 1), ATTN_OK, "%s", attn_last_error());
    const int64_t n = attn_qkv_elems(&p), ND = N * D;
    double *q = decoded(in.q, n, t), *k = decoded(in.k, n, t), *v = decoded(in.v, n, t), *g = decoded(in.d_o, n, t);
    double *ref = malloc((size_t)(3 * ND) * sizeof *ref);
    cr_assert_not_null(ref);
    for (int64_t bh = 0; bh < 2; bh++) {
        attn_grad_request req = {NULL, NULL, 0, 0, NULL, NULL, 0.0, ref, ref + ND, ref + 2 * ND, NULL, NULL, NULL};
        cr_assert_eq(attn_reference_grads_head(&p, in.q, in.k, in.v, in.d_o, bh, &req), ATTN_OK, "%s",
                     attn_last_error());
        double *x[3] = {q, k, v}, scale_of[3] = {0, 0, 0};
        for (int w = 0; w < 3; w++)
            for (int64_t e = 0; e < ND; e++) scale_of[w] = fmax(scale_of[w], fabs(ref[w * ND + e]));
        for (int w = 0; w < 3; w++)
            for (int64_t e = 0; e < ND; e++) {
                const double fd = difference(&p, x[w], bh * ND + e, q, k, v, g), want = ref[w * ND + e];
                cr_assert(fabs(fd - want) <= 1e-8 * (scale_of[w] + 1e-3),
                          "N=%lld D=%lld causal=%d %s head %lld: d%c[%lld, %lld] reference %.12g, differences %.12g",
                          (long long)N, (long long)D, causal, attn_dtype_name(t), (long long)bh, "qkv"[w],
                          (long long)(e / D), (long long)(e % D), want, fd);
            }
    }
    free(q), free(k), free(v), free(g), free(ref);
    attn_inputs_free(&in);
}

Test(reference_backward, gradients_are_the_loss_derivatives) {
    static const int64_t shapes[][2] = {{1, 1}, {2, 3}, {5, 8}, {17, 5}, {9, 16}};
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int causal = 0; causal <= 1; causal++)
            for (int t = 0; t <= ATTN_BF16; t++)
                gradients_match_differences(shapes[s][0], shapes[s][1], causal, (attn_dtype)t, 100 + s * 4 + causal * 2 + t);
}

/* With the weights alpha = 1 and nothing else, tq and tk are sums of the products' magnitudes,
 * |scale| sum |dS_ij| |k_jd|, and bound the gradient itself; tv with delta = 1 bounds dV. */
static void unit_weights(void *ctx, int64_t bh, int64_t i, double lse, const double *o, double delta, double sabs,
                         attn_grad_weights *w) {
    w->alpha = 1.0, w->beta = 0.0, w->gamma = 0.0, w->delta = 1.0;
}

Test(reference_backward, magnitude_sums_bound_the_gradients) {
    attn_problem p = attn_problem_make(1, 1, 67, 24, 1);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 9, ATTN_INIT_NORMAL), ATTN_OK);
    cr_assert_eq(attn_inputs_random_grad(&in, 10), ATTN_OK);
    const int64_t ND = p.N * p.D;
    double *b = malloc((size_t)(6 * ND) * sizeof *b);
    cr_assert_not_null(b);
    attn_grad_request req = {NULL, NULL, 0, 0, unit_weights, NULL, 0.0, b, b + ND, b + 2 * ND, b + 3 * ND, b + 4 * ND, b + 5 * ND};
    cr_assert_eq(attn_reference_grads_head(&p, in.q, in.k, in.v, in.d_o, 0, &req), ATTN_OK, "%s", attn_last_error());
    const double as = fabs((double)p.scale);
    for (int64_t e = 0; e < ND; e++) {
        cr_assert(fabs(b[e]) <= as * b[3 * ND + e] * (1 + 1e-12), "dQ %lld: %g above its magnitude sum", (long long)e, b[e]);
        cr_assert(fabs(b[ND + e]) <= as * b[4 * ND + e] * (1 + 1e-12), "dK %lld", (long long)e);
        cr_assert(fabs(b[2 * ND + e]) <= b[5 * ND + e] * (1 + 1e-12), "dV %lld", (long long)e);
    }
    free(b);
    attn_inputs_free(&in);
}

/* Rows and keys asked for by list give the same numbers as the whole head. */
Test(reference_backward, listed_rows_and_keys_match_the_whole_head) {
    attn_problem p = attn_problem_make(2, 1, 40, 16, 0);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 21, ATTN_INIT_NORMAL), ATTN_OK);
    cr_assert_eq(attn_inputs_random_grad(&in, 22), ATTN_OK);
    const int64_t ND = p.N * p.D, list[3] = {0, 17, 39};
    double *all = malloc((size_t)(3 * ND) * sizeof *all), *some = malloc((size_t)(9 * p.D) * sizeof *some);
    cr_assert(all && some);
    attn_grad_request whole = {NULL, NULL, 0, 0, NULL, NULL, 0.0, all, all + ND, all + 2 * ND, NULL, NULL, NULL};
    attn_grad_request part = {list, list, 3, 3, NULL, NULL, 0.0, some, some + 3 * p.D, some + 6 * p.D, NULL, NULL, NULL};
    cr_assert_eq(attn_reference_grads_head(&p, in.q, in.k, in.v, in.d_o, 1, &whole), ATTN_OK);
    cr_assert_eq(attn_reference_grads_head(&p, in.q, in.k, in.v, in.d_o, 1, &part), ATTN_OK);
    for (int w = 0; w < 3; w++)
        for (int r = 0; r < 3; r++)
            cr_assert(!memcmp(some + (w * 3 + r) * p.D, all + w * ND + list[r] * p.D, (size_t)p.D * sizeof(double)),
                      "gradient %d, listed index %lld", w, (long long)list[r]);
    const int64_t unsorted[2] = {5, 3};
    attn_grad_request bad = {unsorted, NULL, 2, 0, NULL, NULL, 0.0, some, some, some, NULL, NULL, NULL};
    cr_assert_eq(attn_reference_grads_head(&p, in.q, in.k, in.v, in.d_o, 0, &bad), ATTN_EINVAL);
    cr_assert_eq(attn_reference_grads_head(&p, in.q, in.k, in.v, in.d_o, 2, &whole), ATTN_EINVAL);
    free(all), free(some);
    attn_inputs_free(&in);
}

/* ---- the check -------------------------------------------------------------------------------- */

typedef struct {
    attn_inputs in;
    uint16_t *o, *dq, *dk, *dv;
    float *lse;
} grad_case;

/* Inputs, the exact O and LSE (reference.c: a perfect forward), and the exact gradients rounded to
 * 16 bits; `drop_delta` computes them without the D term instead (dS = P dP). */
static void make_case(grad_case *c, int64_t N, int64_t D, int causal, attn_dtype t, int drop_delta) {
    attn_problem p = attn_problem_make(2, 2, N, D, causal);
    p.dtype = t;
    cr_assert_eq(attn_inputs_random(&c->in, &p, 31 + (uint64_t)N, ATTN_INIT_NORMAL), ATTN_OK);
    cr_assert_eq(attn_inputs_random_grad(&c->in, 32 + (uint64_t)N), ATTN_OK);
    const int64_t n = attn_qkv_elems(&p), rows = attn_rows(&p), ND = N * D;
    c->o = malloc((size_t)n * 2), c->dq = malloc((size_t)n * 2), c->dk = malloc((size_t)n * 2), c->dv = malloc((size_t)n * 2);
    c->lse = malloc((size_t)rows * 4);
    double *o = malloc((size_t)n * sizeof *o), *lse = malloc((size_t)rows * sizeof *lse), *g = malloc((size_t)(3 * ND) * sizeof *g);
    int64_t *all = malloc((size_t)rows * sizeof *all);
    cr_assert(c->o && c->dq && c->dk && c->dv && c->lse && o && lse && g && all);
    for (int64_t r = 0; r < rows; r++) all[r] = r;
    cr_assert_eq(attn_reference_rows(&p, c->in.q, c->in.k, c->in.v, all, rows, o, lse), ATTN_OK);
    for (int64_t e = 0; e < n; e++) c->o[e] = attn_from_f32((float)o[e], t);
    for (int64_t r = 0; r < rows; r++) c->lse[r] = (float)lse[r];
    for (int64_t bh = 0; bh < p.B * p.H; bh++) {
        attn_grad_request req = {NULL, NULL, 0, 0, NULL, NULL, 0.0, g, g + ND, g + 2 * ND, NULL, NULL, NULL};
        cr_assert_eq(attn_reference_grads_head(&p, c->in.q, c->in.k, c->in.v, c->in.d_o, bh, &req), ATTN_OK);
        for (int64_t e = 0; e < ND; e++) {
            c->dq[bh * ND + e] = attn_from_f32((float)g[e], t);
            c->dk[bh * ND + e] = attn_from_f32((float)g[ND + e], t);
            c->dv[bh * ND + e] = attn_from_f32((float)g[2 * ND + e], t);
        }
    }
    if (drop_delta) { /* dS = P dP without D: dQ_i = scale sum_j P_ij dP_ij k_j, by hand for head 0 */
        for (int64_t i = 0; i < N; i++) {
            double s[1024], m = -INFINITY, l = 0.0;
            const int64_t nk = causal ? i + 1 : N;
            for (int64_t j = 0; j < nk; j++) {
                double dot = 0.0;
                for (int64_t d = 0; d < D; d++)
                    dot += attn_to_f32(c->in.q[i * D + d], t) * (double)attn_to_f32(c->in.k[j * D + d], t);
                s[j] = dot * p.scale;
                m = fmax(m, s[j]);
            }
            for (int64_t j = 0; j < nk; j++) l += exp(s[j] - m);
            for (int64_t d = 0; d < D; d++) {
                double acc = 0.0;
                for (int64_t j = 0; j < nk; j++) {
                    double dp = 0.0;
                    for (int64_t x = 0; x < D; x++)
                        dp += attn_to_f32(c->in.d_o[i * D + x], t) * (double)attn_to_f32(c->in.v[j * D + x], t);
                    acc += exp(s[j] - m) / l * dp * attn_to_f32(c->in.k[j * D + d], t);
                }
                c->dq[i * D + d] = attn_from_f32((float)(acc * p.scale), t);
            }
        }
    }
    free(o), free(lse), free(g), free(all);
}

static void free_case(grad_case *c) {
    free(c->o), free(c->dq), free(c->dk), free(c->dv), free(c->lse);
    attn_inputs_free(&c->in);
}

Test(check_backward, exact_gradients_pass) {
    for (int t = 0; t <= ATTN_BF16; t++)
        for (int causal = 0; causal <= 1; causal++) {
            grad_case c;
            make_case(&c, 129, 40, causal, (attn_dtype)t, 0);
            attn_grad_check k;
            cr_assert_eq(attn_check_grads(&c.in, c.o, c.lse, c.dq, c.dk, c.dv, 1, &k), ATTN_OK, "%s", attn_last_error());
            cr_assert(k.pass, "%s causal=%d: exact gradients fail: dQ %g, dK %g, dV %g", attn_dtype_name((attn_dtype)t),
                      causal, k.t[0].worst_ratio, k.t[1].worst_ratio, k.t[2].worst_ratio);
            for (int g = 0; g < 3; g++)
                cr_assert(k.t[g].worst_ratio < 0.5 && k.t[g].checked == 4 * 129 * 40, "%s: ratio %g over %lld elements",
                          attn_grad_name(g), k.t[g].worst_ratio, (long long)k.t[g].checked);
            cr_assert_eq(k.heads, 4);
            free_case(&c);
        }
}

Test(check_backward, a_dropped_delta_term_fails) {
    grad_case c;
    make_case(&c, 129, 40, 0, ATTN_F16, 1);
    attn_grad_check k;
    cr_assert_eq(attn_check_grads(&c.in, c.o, c.lse, c.dq, c.dk, c.dv, 1, &k), ATTN_OK);
    cr_assert(!k.pass && k.t[0].worst_ratio > 10.0, "dQ without the D term: ratio %g", k.t[0].worst_ratio);
    cr_assert(k.t[0].worst_b == 0 && k.t[0].worst_h == 0, "the worst dQ element is head 0's");
    cr_assert(k.t[1].worst_ratio <= 1.0 && k.t[2].worst_ratio <= 1.0);
    free_case(&c);
}

Test(check_backward, one_wrong_element_poison_or_nan_fails) {
    grad_case c;
    make_case(&c, 300, 64, 1, ATTN_F16, 0);
    attn_grad_check k;
    const int64_t e = (1 * 300 + 200) * 64 + 7; /* head 1, key 200, d 7 */
    const uint16_t keep = c.dk[e];
    c.dk[e] = attn_f2h(attn_h2f(keep) * (1.0f + 0x1p-6f) + 1e-3f);
    cr_assert_eq(attn_check_grads(&c.in, c.o, c.lse, c.dq, c.dk, c.dv, 1, &k), ATTN_OK);
    cr_assert(!k.pass && k.t[1].worst_ratio > 1.0, "one dK element 1.6%% off passes: ratio %g", k.t[1].worst_ratio);
    cr_assert(k.t[1].worst_h == 1 && k.t[1].worst_n == 200 && k.t[1].worst_d == 7, "worst at h=%lld key=%lld d=%lld",
              (long long)k.t[1].worst_h, (long long)k.t[1].worst_n, (long long)k.t[1].worst_d);
    c.dk[e] = 0xffffu; /* the poison */
    cr_assert_eq(attn_check_grads(&c.in, c.o, c.lse, c.dq, c.dk, c.dv, 1, &k), ATTN_OK);
    cr_assert(!k.pass && k.t[1].unwritten == 1 && k.t[1].nonfinite == 1);
    c.dk[e] = keep;
    const uint16_t keep_v = c.dv[e];
    c.dv[e] = 0x7e00u; /* a NaN the stage wrote */
    cr_assert_eq(attn_check_grads(&c.in, c.o, c.lse, c.dq, c.dk, c.dv, 1, &k), ATTN_OK);
    cr_assert(!k.pass && k.t[2].nonfinite == 1 && k.t[2].unwritten == 0);
    c.dv[e] = keep_v;
    c.lse[5] = NAN; /* a forward that wrote NaN gives no tolerance: FAIL, not a free pass */
    cr_assert_eq(attn_check_grads(&c.in, c.o, c.lse, c.dq, c.dk, c.dv, 1, &k), ATTN_OK);
    cr_assert(!k.pass && k.forward_nonfinite == 1);
    free_case(&c);
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A check keeps its reference for the next check of the same problem, seed, inputs and forward (what
 * attn-bench does for stages 11, 12, 13 and 13d at one point): the second check gives the same verdict,
 * element for element, in a fraction of the time. Inputs changed in place, behind the same pointers,
 * are a new reference: with dO negated the old gradients fail, and back as they were they pass again. */
Test(check_backward, the_kept_reference_is_that_of_the_same_inputs) {
    grad_case c;
    make_case(&c, 300, 64, 1, ATTN_F16, 0);
    attn_grad_check a, b;
    const double t0 = seconds();
    cr_assert_eq(attn_check_grads(&c.in, c.o, c.lse, c.dq, c.dk, c.dv, 1, &a), ATTN_OK);
    const double t1 = seconds();
    cr_assert_eq(attn_check_grads(&c.in, c.o, c.lse, c.dq, c.dk, c.dv, 1, &b), ATTN_OK);
    const double t2 = seconds();
    cr_assert(a.pass && b.pass && a.heads == 4 && b.heads == 4);
    for (int g = 0; g < 3; g++)
        cr_assert(a.t[g].worst_ratio == b.t[g].worst_ratio && a.t[g].max_abs_err == b.t[g].max_abs_err &&
                      a.t[g].checked == b.t[g].checked && a.t[g].worst_n == b.t[g].worst_n,
                  "%s: the kept reference gives another verdict (ratio %g, then %g)", attn_grad_name(g),
                  a.t[g].worst_ratio, b.t[g].worst_ratio);
    cr_assert(t2 - t1 < (t1 - t0) / 4, "the second check took %.3f s, the first %.3f s: the reference was not kept",
              t2 - t1, t1 - t0);
    const int64_t n = attn_qkv_elems(&c.in.p);
    for (int64_t e = 0; e < n; e++) c.in.d_o[e] ^= 0x8000u; /* -dO: the fp16 sign bit */
    cr_assert_eq(attn_check_grads(&c.in, c.o, c.lse, c.dq, c.dk, c.dv, 1, &b), ATTN_OK);
    cr_assert(!b.pass && b.t[0].worst_ratio > 10.0 && b.t[1].worst_ratio > 10.0 && b.t[2].worst_ratio > 10.0,
              "the gradients of dO pass against -dO: ratios %g %g %g", b.t[0].worst_ratio, b.t[1].worst_ratio,
              b.t[2].worst_ratio);
    for (int64_t e = 0; e < n; e++) c.in.d_o[e] ^= 0x8000u;
    cr_assert_eq(attn_check_grads(&c.in, c.o, c.lse, c.dq, c.dk, c.dv, 1, &b), ATTN_OK);
    cr_assert(b.pass && b.t[0].worst_ratio == a.t[0].worst_ratio, "dO restored: ratio %g, first %g", b.t[0].worst_ratio,
              a.t[0].worst_ratio);
    free_case(&c);
}
