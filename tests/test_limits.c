/*
 * test_limits.c: what users throw at the stages. Non-finite inputs fed directly to every stage (no
 * hang, no crash); more heads than a grid's y dimension allows (B*H > 65535); tensors of more than
 * 2^31 elements (64-bit offsets everywhere); and no device memory lost over a thousand runs.
 * The stages come from the registry; a stage that lacks the memory for a shape says so and is
 * skipped for that shape only.
 */
#include <math.h>
#ifdef ATTN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "half.h"
#include "test_util.h"

static void run_all_gpu_stages_checked(const attn_problem *p, uint64_t seed, int full_heads,
                                       int64_t extra_rows) {
    attn_inputs in;
    int ran = 0, have_gpu = attn_gpu_available() == ATTN_OK;
    if (!have_gpu) cr_skip_test("needs a GPU: %s", attn_last_error());
    cr_assert_eq(attn_inputs_random(&in, p, seed, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(attn_inputs_random_grad(&in, seed ^ 0xd0), ATTN_OK, "%s", attn_last_error()); /* backward stages */
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        if (!s->on_gpu || !test_wants_stage_serial(s) || attn_stage_available(s) != ATTN_OK ||
            attn_stage_supports(s, p) != ATTN_OK)
            continue;
        attn_run_opts opt = attn_run_opts_default();
        opt.warmup = 0, opt.repeat = 1, opt.check = 1, opt.full_heads = full_heads, opt.check_rows = extra_rows;
        attn_result r;
        attn_status st = attn_run(s, &in, &opt, &r, NULL, NULL);
        if (st == ATTN_ENOMEM || st == ATTN_EUNSUPPORTED) { /* memory, or shared memory on an old GPU */
            cr_log_info("stage %s: %s (not run at this shape)", s->id, attn_last_error());
            continue;
        }
        cr_assert_eq(st, ATTN_OK, "stage %s: %s", s->id, attn_last_error());
        cr_assert(r.chk.pass, "stage %s B=%lld H=%lld N=%lld D=%lld: worst ratio %g at [%lld,%lld,%lld,%lld], "
                  "non-finite %lld", s->id, (long long)p->B, (long long)p->H, (long long)p->N,
                  (long long)p->D, r.chk.worst_ratio, (long long)r.chk.worst_b, (long long)r.chk.worst_h,
                  (long long)r.chk.worst_n, (long long)r.chk.worst_d, (long long)r.chk.nonfinite);
        for (int t = 0; t < 3 && s->pass != ATTN_FORWARD; t++) /* a backward stage: its gradients too */
            cr_assert(r.grad.t[t].nonfinite == 0 && r.grad.t[t].worst_ratio <= 1.0,
                      "stage %s B=%lld H=%lld N=%lld D=%lld: %s worst ratio %g at [%lld,%lld,%lld,%lld], non-finite %lld",
                      s->id, (long long)p->B, (long long)p->H, (long long)p->N, (long long)p->D, attn_grad_name(t),
                      r.grad.t[t].worst_ratio, (long long)r.grad.t[t].worst_b, (long long)r.grad.t[t].worst_h,
                      (long long)r.grad.t[t].worst_n, (long long)r.grad.t[t].worst_d, (long long)r.grad.t[t].nonfinite);
        cr_log_info("stage %s at B=%lld H=%lld N=%lld D=%lld: %.3f ms, %lld rows checked, PASS", s->id,
                    (long long)p->B, (long long)p->H, (long long)p->N, (long long)p->D, r.ms_median,
                    (long long)r.chk.rows_checked);
        ran++;
    }
    cr_assert(ran > 0, "no GPU stage ran");
    attn_inputs_free(&in);
}

/* These two run every shipped GPU stage (test_wants_stage_serial) on problems of 1.7 to 17 GB, with
 * inputs generated once: they belong to the serial suite, which runs alone (make check's first
 * phase). In the parallel phase,
 * beside a thousand cases each computing its CPU reference on every core, they outran their 300 s. */

/* 3 * 30000 = 90000 (b, h) pairs: more than the 65535 blocks a grid's y or z dimension holds. */
Test(serial, more_heads_than_grid_y, .timeout = 600) {
    attn_problem p = attn_problem_make(3, 30000, 19, 64, 1);
    run_all_gpu_stages_checked(&p, 21, 1, 2000);
}

/* 64 * 64 * 4100 * 128 = 2,149,580,800 elements per tensor: past 2^31 = 2,147,483,648, so any
 * 32-bit offset wraps in the last head. The check covers every row of the first and last head. */
Test(serial, tensors_past_2_pow_31_elements, .timeout = 900) {
    attn_problem p = attn_problem_make(64, 64, 4100, 128, 0);
    cr_assert_gt(attn_qkv_elems(&p), (int64_t)1 << 31);
    run_all_gpu_stages_checked(&p, 22, 1, 64);
}

/* NaN and inf fed straight to every stage (as a library, past --load's refusal): the stage must
 * return, not hang or crash. What it computes from NaN is NaN; that is not checked. */
Test(limits, non_finite_inputs_neither_hang_nor_crash, .timeout = 300) {
    attn_problem p = attn_problem_make(2, 2, 130, 64, 1);
    const uint16_t bad[3] = {0x7e00 /* NaN */, 0x7c00 /* +inf */, 0xfc00 /* -inf */};
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        if (attn_stage_available(s) != ATTN_OK) continue;
        cr_log_info("stage %s: NaN, +inf and -inf in q, k and v", s->id); /* names the stage that dies */
        for (int which = 0; which < 3; which++)
            for (int t = 0; t < 3; t++) {
                attn_inputs in;
                cr_assert_eq(attn_inputs_random(&in, &p, 30, ATTN_INIT_NORMAL), ATTN_OK);
                cr_assert_eq(attn_inputs_random_grad(&in, 31), ATTN_OK); /* dO for the backward stages */
                uint16_t *tensor = t == 0 ? in.q : t == 1 ? in.k : in.v;
                for (int64_t e = 5; e < attn_qkv_elems(&p); e += 97) tensor[e] = bad[which];
                attn_run_opts opt = attn_run_opts_default();
                opt.warmup = 0, opt.repeat = 1;
                attn_result r;
                attn_status st = attn_run(s, &in, &opt, &r, NULL, NULL);
                cr_assert_eq(st, ATTN_OK, "stage %s with %s in %c: %s", s->id,
                             which == 0 ? "NaN" : "inf", "qkv"[t], attn_last_error());
                attn_inputs_free(&in);
            }
    }
}

/* A thousand runs of each GPU stage (allocate, run, free) lose no device memory. Free memory is the
 * whole device's count, so this test is in the `serial` suite, which make check runs alone (-j1, no
 * other test allocating beside it); and it moves on its own: on the H200 by -192 KiB (a driver set-up
 * after one warm-up run) and +256 KiB (after 20) with nothing leaking. A run here allocates Q, K, V,
 * O (99 KB each) and the LSE (3096 B, the smallest buffer), so leaking any one of them every run
 * loses at least 3 MB over 1000 runs: the test fails when more than 1 MiB is lost. The control at the
 * end leaks 1000 LSE-sized buffers on purpose and must be caught by the same bound. */
#define LEAK_BOUND_BYTES ((size_t)1 << 20)

static size_t bytes_lost(size_t free_before, size_t free_after) {
    return free_after >= free_before ? 0 : free_before - free_after;
}

#ifdef ATTN_HAVE_CUDA
/* the probe's own control: 1000 buffers of `bytes` allocated and not yet freed must show as lost */
static void leak_is_seen(size_t bytes) {
    enum { RUNS = 1000 };
    static void *leaked[RUNS];
    size_t free0, free1, total;
    cr_assert_eq(attn_gpu_mem_info(&free0, &total), ATTN_OK);
    for (int i = 0; i < RUNS; i++) cr_assert_eq(cudaMalloc(&leaked[i], bytes), cudaSuccess);
    cr_assert_eq(attn_gpu_mem_info(&free1, &total), ATTN_OK);
    for (int i = 0; i < RUNS; i++) cudaFree(leaked[i]);
    cr_assert_gt(bytes_lost(free0, free1), LEAK_BOUND_BYTES,
                 "a leak of %zu bytes per run went unseen: %zu bytes free before, %zu after", bytes, free0,
                 free1);
}
#endif

Test(serial, no_device_memory_lost_over_1000_runs, .timeout = 600) {
    if (attn_gpu_available() != ATTN_OK) cr_skip_test("needs a GPU: %s", attn_last_error());
    attn_problem p = attn_problem_make(2, 3, 129, 64, 1);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 40, ATTN_INIT_NORMAL), ATTN_OK);
    cr_assert_eq(attn_inputs_random_grad(&in, 41), ATTN_OK); /* dO for the backward stages */
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        if (!s->on_gpu || !s->run || !test_wants_stage_serial(s) || attn_stage_supports(s, &p) != ATTN_OK)
            continue;
        attn_run_opts opt = attn_run_opts_default();
        opt.warmup = 0, opt.repeat = 1;
        attn_result r;
        /* what the driver sets up once (lazily loaded kernels, its own pools) is not a leak */
        for (int run = 0; run < 20; run++)
            cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_OK, "%s", attn_last_error());
        size_t free0, free1, total;
        cr_assert_eq(attn_gpu_mem_info(&free0, &total), ATTN_OK);
        for (int run = 0; run < 1000; run++)
            cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_OK, "run %d: %s", run, attn_last_error());
        cr_assert_eq(attn_gpu_mem_info(&free1, &total), ATTN_OK);
        cr_log_info("stage %s: %zu bytes free before 1000 runs, %zu after", s->id, free0, free1);
        cr_assert_leq(bytes_lost(free0, free1), LEAK_BOUND_BYTES,
                      "stage %s: %zu bytes free before 1000 runs, %zu after", s->id, free0, free1);
    }
#ifdef ATTN_HAVE_CUDA
    leak_is_seen((size_t)attn_rows(&p) * sizeof(float));
#endif
    attn_inputs_free(&in);
}

/* The device byte counts of a problem near the 2^62-element limit: 4 * |Q| + |LSE| passes 2^64, and
 * for this shape (found by search) it used to wrap to exactly 1 GiB, so the fit check passed and the
 * run went on to a doomed cudaMalloc. It must be refused as out of memory before anything is
 * allocated or copied: the host tensors here are 8 elements, never read. */
Test(limits, device_byte_counts_do_not_wrap) {
    const attn_stage *s = NULL;
    for (int i = 0; i < attn_num_stages && !s; i++)
        if (attn_stages[i].on_gpu && !attn_stages[i].workspace_bytes) s = &attn_stages[i];
    cr_assert_not_null(s);
    SKIP_UNLESS_RUNNABLE(s);
    attn_inputs in;
    memset(&in, 0, sizeof in);
    in.p = attn_problem_make(52634, 1044488, 1 << 24, 2, 0);
    cr_assert_eq(attn_problem_validate(&in.p), ATTN_OK, "%s", attn_last_error());
    const double io = 4.0 * 2.0 * (double)attn_qkv_elems(&in.p) + 4.0 * (double)attn_rows(&in.p);
    cr_assert_eq(io - 0x1p64, 1073741824.0, "the shape no longer wraps to 1 GiB");
    uint16_t tiny[8] = {0};
    float tiny_lse[8];
    in.q = in.k = in.v = tiny;
    attn_run_opts opt = attn_run_opts_default();
    attn_result r;
    memset(&r, 0, sizeof r);
    attn_status st = attn_run_gpu(s, &in, &opt, &r, tiny, tiny_lse);
    cr_assert_eq(st, ATTN_ENOMEM, "stage %s: status %d: %s", s->id, (int)st, attn_last_error());
    cr_assert_not_null(strstr(attn_last_error(), "EiB"), "%s", attn_last_error());
}
