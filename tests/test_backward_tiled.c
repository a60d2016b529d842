/*
 * test_backward_tiled.c: what stages 11, 12 and 12m promise beyond matching the reference
 * (test_backward.c runs every backward stage against it): 12m's dQ order makes it bit-for-bit the
 * same on any number of threads; 12's scratch is O(N) per head and 11's is the N x N matrices, and
 * 11 refuses those cleanly where they do not fit; the GPU stages pass at odd N, at every head dim
 * they take and past 65535 heads. The CPU tests run everywhere, the GPU ones skip without a GPU.
 */
#include <omp.h>

#include "11_backward_naive/backward_naive.h"
#include "12_backward_tiled/backward_tiled.h"
#include "test_util.h"

/* One checked backward run of stage `id` on fresh inputs (seeded); the gradients into g when not NULL. */
static attn_status run_backward(const char *id, const attn_problem *p, uint64_t seed, int repeat, attn_result *r,
                                attn_grads *g) {
    const attn_stage *s = attn_find_stage(id);
    cr_assert_not_null(s, "stage %s", id);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, p, seed, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(attn_inputs_random_grad(&in, seed + 1), ATTN_OK, "%s", attn_last_error());
    attn_run_opts opt = attn_run_opts_default();
    opt.warmup = 0, opt.repeat = repeat, opt.check = 1, opt.seed = seed;
    const attn_status st = attn_run_backward(s, &in, &opt, r, g);
    attn_inputs_free(&in);
    return st;
}

#define ASSERT_GRADS_PASS(id, p, r)                                                                              \
    cr_assert((r).chk.pass && (r).grad.pass,                                                                     \
              "stage %s B=%lld H=%lld N=%lld D=%lld causal %d: forward %s, dQ %g, dK %g, dV %g (err/tol)", id, \
              (long long)(p).B, (long long)(p).H, (long long)(p).N, (long long)(p).D, (p).causal,              \
              (r).chk.pass ? "pass" : "FAIL", (r).grad.t[0].worst_ratio, (r).grad.t[1].worst_ratio,            \
              (r).grad.t[2].worst_ratio)

/* The model sums each dQ element over the key tiles in the order kt = 0, 1, ... on one thread per
 * head: 1 thread and 3 threads give the same bits (the kernel's atomics would not). */
Test(backward_tiled, model_is_bitwise_the_same_on_any_thread_count) {
    const attn_problem p = attn_problem_make(1, 5, 200, 64, 1);
    const size_t bytes = (size_t)attn_qkv_elems(&p) * 2;
    uint16_t *buf[2][3];
    attn_result r;
    const int threads = omp_get_max_threads();
    for (int run = 0; run < 2; run++) {
        for (int t = 0; t < 3; t++) cr_assert_not_null(buf[run][t] = malloc(bytes));
        attn_grads g = {buf[run][0], buf[run][1], buf[run][2]};
        omp_set_num_threads(run == 0 ? 1 : 3);
        const attn_status st = run_backward("12m", &p, 5, 1, &r, &g);
        omp_set_num_threads(threads);
        cr_assert_eq(st, ATTN_OK, "%s", attn_last_error());
        ASSERT_GRADS_PASS("12m", p, r);
    }
    for (int t = 0; t < 3; t++) {
        cr_assert(!memcmp(buf[0][t], buf[1][t], bytes), "%s differs between 1 and 3 threads", attn_grad_name(t));
        free(buf[0][t]), free(buf[1][t]);
    }
}

/* The model at the tails: one row, less than a tile, one row past a tile, many tiles with a tail. */
Test(backward_tiled, model_passes_at_odd_n) {
    static const int dims[] = {32, 64, 128}, lengths[] = {1, 17, 65, 129};
    for (int d = 0; d < 3; d++)
        for (int n = 0; n < 4; n++)
            for (int causal = 0; causal <= 1; causal++) {
                const attn_problem p = attn_problem_make(1, 2, lengths[n], dims[d], causal);
                attn_result r;
                cr_assert_eq(run_backward("12m", &p, 40 + n, 2, &r, NULL), ATTN_OK, "%s", attn_last_error());
                ASSERT_GRADS_PASS("12m", p, r);
                cr_assert_eq(r.identical, 1, "12m is ATTN_BACKWARD: two runs must agree bit for bit");
            }
}

/* Stage 12's scratch is the fp32 dQ accumulator and D, linear in N; stage 11's the two N x N
 * matrices and D. The registry hands these to the harness. */
Test(backward_tiled, workspace_is_linear_in_n_for_12_and_quadratic_for_11) {
    for (int64_t N = 1; N <= (1 << 20); N *= 16) {
        const attn_problem p = attn_problem_make(4, 32, N, 64, 0);
        const double rows = 4.0 * 32.0 * (double)N;
        cr_assert_eq((double)stage12_workspace_bytes(&p), rows * 64.0 * 4.0 + rows * 4.0, "N = %lld", (long long)N);
        cr_assert_eq((double)stage11_workspace_bytes(&p), rows * (double)N * 8.0 + rows * 4.0, "N = %lld",
                     (long long)N);
    }
    cr_assert_eq(attn_find_stage("12")->workspace_bytes, stage12_workspace_bytes);
    cr_assert_eq(attn_find_stage("11")->workspace_bytes, stage11_workspace_bytes);
    cr_assert_null(attn_find_stage("12m")->workspace_bytes, "a CPU model allocates its own scratch");
    const attn_problem huge = attn_problem_make(1 << 20, 1 << 20, 1 << 24, 256, 0);
    cr_assert_eq(stage11_workspace_bytes(&huge), (size_t)-1, "saturates instead of wrapping");
}

/* The GPU stages at odd N and every head dim they take (12: 32, 64, 128; 11: any, 3 and 80 here). */
Test(backward_tiled, gpu_stages_pass_at_odd_n) {
    static const struct {
        const char *id;
        int D;
    } runs[] = {{"12", 32}, {"12", 64}, {"12", 128}, {"11", 3}, {"11", 64}, {"11", 80}};
    static const int lengths[] = {1, 17, 129, 1000};
    SKIP_UNLESS_RUNNABLE(attn_find_stage("12"));
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++)
        for (int n = 0; n < 4; n++)
            for (int causal = 0; causal <= 1; causal++) {
                const attn_problem p = attn_problem_make(1, 3, lengths[n], runs[k].D, causal);
                attn_result r;
                const attn_status st = run_backward(runs[k].id, &p, 60 + n, 2, &r, NULL);
                if (st == ATTN_EUNSUPPORTED) { /* D = 128 where the GPU gives a block less shared memory */
                    cr_log_info("stage %s D=%d: %s", runs[k].id, runs[k].D, attn_last_error());
                    continue;
                }
                cr_assert_eq(st, ATTN_OK, "stage %s: %s", runs[k].id, attn_last_error());
                ASSERT_GRADS_PASS(runs[k].id, p, r);
                if (!strcmp(runs[k].id, "11")) cr_assert_eq(r.identical, 1, "stage 11 is ATTN_BACKWARD");
            }
}

/* 3 * 30000 = 90000 (b, h) pairs: more than the 65535 blocks a grid's y or z dimension holds. */
Test(serial, backward_more_heads_than_grid_y, .timeout = 600) {
    SKIP_UNLESS_RUNNABLE(attn_find_stage("12"));
    const attn_problem p = attn_problem_make(3, 30000, 19, 64, 1);
    static const char *const ids[] = {"11", "12"};
    for (int k = 0; k < 2; k++) {
        attn_result r;
        cr_assert_eq(run_backward(ids[k], &p, 21, 1, &r, NULL), ATTN_OK, "stage %s: %s", ids[k], attn_last_error());
        ASSERT_GRADS_PASS(ids[k], p, r);
    }
}

/* Stage 11 refuses, with the numbers, a problem whose N x N P and dS cannot fit, before allocating
 * them: N = 2^18 needs 8 * 2^36 bytes = 512 GiB. The forward (stage 06, told) runs first. */
Test(backward_tiled, naive_backward_refuses_matrices_that_do_not_fit) {
    const attn_stage *s = attn_find_stage("11"), *f = attn_find_stage("06");
    SKIP_UNLESS_RUNNABLE(s);
    SKIP_UNLESS_RUNNABLE(f);
    const attn_problem p = attn_problem_make(1, 1, 1 << 18, 64, 0);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 11, ATTN_INIT_NORMAL), ATTN_OK);
    cr_assert_eq(attn_inputs_random_grad(&in, 12), ATTN_OK);
    attn_run_opts opt = attn_run_opts_default();
    opt.warmup = 0, opt.repeat = 1, opt.forward = f;
    attn_result r;
    cr_assert_eq(attn_run_backward(s, &in, &opt, &r, NULL), ATTN_ENOMEM, "%s", attn_last_error());
    cr_assert(strstr(attn_last_error(), "stage 11 needs 512.00 GiB for the N x N P and dS"), "message: %s",
              attn_last_error());
    cr_assert(strstr(attn_last_error(), "GiB free"), "message: %s", attn_last_error());
    attn_inputs_free(&in);
}
