/*
 * test_backward.c: every registered backward stage (11 on), GPU stages and CPU models alike, against
 * the double reference of the gradients (reference_backward.c, with check_backward.c's tolerance), at
 * ragged shapes (N = 1, 17, 64, 129, 1000: not multiples of any tile), every head dim and dtype it
 * takes, causal and not, and the hostile inputs (scores in the thousands, each row's max on key 0, a
 * max that rises in every key tile). Each case runs its forward once (the default one) and the
 * backward twice: the gradients are checked (poisoned first, so an element never written fails), the
 * forward's O and LSE too, and a stage whose pass is ATTN_BACKWARD must repeat bit for bit. The list
 * comes from the registry: a backward stage added there is tested here without editing this file.
 * GPU stages also run B x H past the grid's 65535 limit of y (70000 heads).
 */
#include <math.h>

#include "test_util.h"

#include <criterion/parameterized.h>

typedef struct {
    int stage; /* index into attn_stages */
    int D, dtype;
} bwd_group;

static const int bwd_N[] = {1, 17, 64, 129, 1000};
#define NUM_BWD_N ((int)(sizeof bwd_N / sizeof bwd_N[0]))
static const int bwd_hostile_N[] = {17, 129};
#define MAX_BWD_GROUPS 128
/* Under the sanitizers (make check-asan) the CPU models stop at N = 129, as in test_stages.c. */
#ifdef ATTN_SAN
#define BWD_MODEL_MAX_N 129
#else
#define BWD_MODEL_MAX_N ATTN_MAX_N
#endif

ParameterizedTestParameters(backward, match_reference) {
    static bwd_group groups[MAX_BWD_GROUPS];
    int n = 0;
    for (int s = 0; s < attn_num_stages; s++) {
        if (attn_stages[s].pass == ATTN_FORWARD || !test_wants_stage(attn_stages[s].id)) continue;
        for (int d = 0; d < attn_num_test_dims; d++)
            for (int t = 0; t <= ATTN_BF16 && n < MAX_BWD_GROUPS; t++)
                if (attn_stages[s].supports_dim(attn_test_dims[d]) && (attn_stages[s].dtypes & ATTN_DTYPE_BIT(t)))
                    groups[n++] = (bwd_group){s, attn_test_dims[d], t};
    }
    return cr_make_param_array(bwd_group, groups, (size_t)n);
}

/* One case: fresh inputs and dO, the backward run twice (and its forward once), both checked. Returns 1
 * when it passed; a failure is reported here and the group goes on. */
static int run_bwd_case(const bwd_group *g, int64_t B, int64_t H, int N, int causal, attn_init init) {
    const attn_stage *s = &attn_stages[g->stage];
    const char *dt = attn_dtype_name((attn_dtype)g->dtype), *how = attn_init_name(init);
    cr_log_info("stage %s B=%lld H=%lld N=%d D=%d causal=%d %s init=%s", s->id, (long long)B, (long long)H, N, g->D,
                causal, dt, how);
    attn_problem p = attn_problem_make(B, H, N, g->D, causal);
    p.dtype = (attn_dtype)g->dtype;
    attn_inputs in;
    const uint64_t seed = 0xbacc0ull + (uint64_t)((((g->stage * 4099 + N) * 263 + g->D) * 4 + causal * 2 + g->dtype) * 8) +
                          (uint64_t)init + (uint64_t)H * 0x9e3779b9ull;
    cr_assert_eq(attn_inputs_random(&in, &p, seed, init), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(attn_inputs_random_grad(&in, seed ^ 0xd0), ATTN_OK, "%s", attn_last_error());
    attn_run_opts opt = attn_run_opts_default();
    opt.warmup = 0, opt.repeat = 2, opt.check = 1;
    attn_result r;
    const attn_status st = attn_run(s, &in, &opt, &r, NULL, NULL);
    attn_inputs_free(&in);
    if (st == ATTN_EUNSUPPORTED && strstr(attn_last_error(), "shared memory")) return 1; /* an older GPU */
    if (st != ATTN_OK) {
        cr_expect_fail("stage %s N=%d D=%d causal=%d %s init=%s: %s", s->id, N, g->D, causal, dt, how, attn_last_error());
        return 0;
    }
    const attn_grad_check *k = &r.grad;
    for (int t = 0; t < 3; t++)
        cr_expect(k->t[t].nonfinite == 0 && k->t[t].worst_ratio <= 1.0,
                  "stage %s B=%lld H=%lld N=%d D=%d causal=%d %s init=%s: %s worst [b=%lld h=%lld n=%lld d=%lld] got %.6g "
                  "want %.6g tol %.3g (ratio %.3g), non-finite %lld (never written %lld)",
                  s->id, (long long)B, (long long)H, N, g->D, causal, dt, how, attn_grad_name(t),
                  (long long)k->t[t].worst_b, (long long)k->t[t].worst_h, (long long)k->t[t].worst_n,
                  (long long)k->t[t].worst_d, k->t[t].worst_got, k->t[t].worst_want, k->t[t].worst_tol,
                  k->t[t].worst_ratio, (long long)k->t[t].nonfinite, (long long)k->t[t].unwritten);
    cr_expect(r.chk.pass, "stage %s N=%d D=%d: its forward (%s) failed its own check (ratio %g)", s->id, N, g->D,
              r.forward->id, r.chk.worst_ratio);
    cr_expect(k->forward_nonfinite == 0 && k->pass == (k->t[0].worst_ratio <= 1 && k->t[1].worst_ratio <= 1 &&
                                                       k->t[2].worst_ratio <= 1 && k->t[0].nonfinite + k->t[1].nonfinite +
                                                                                           k->t[2].nonfinite == 0));
    const int repeat_ok = s->pass == ATTN_BACKWARD_ATOMIC || r.identical == 1;
    cr_expect(repeat_ok, "stage %s N=%d D=%d causal=%d %s init=%s: a second run is not bit-identical", s->id, N, g->D,
              causal, dt, how);
    cr_expect(r.tflops > 0.0 && r.runs == 2);
    return k->pass && r.chk.pass && repeat_ok;
}

ParameterizedTest(bwd_group *g, backward, match_reference, .timeout = 900) {
    const attn_stage *s = &attn_stages[g->stage];
    SKIP_UNLESS_RUNNABLE(s);
    int ran = 0, failed = 0;
    /* GPU stages at B = 2, H = 3; a CPU model at B = 2, H = 1 (its heads are folded as the kernel's) */
    const int64_t B = 2, H = s->on_gpu ? 3 : 1;
    for (int n = 0; n < NUM_BWD_N; n++) {
        if (!s->on_gpu && bwd_N[n] > BWD_MODEL_MAX_N) continue;
        for (int causal = 0; causal <= 1; causal++, ran++) failed += !run_bwd_case(g, B, H, bwd_N[n], causal, ATTN_INIT_NORMAL);
    }
    if (g->D == 64 || g->dtype == ATTN_BF16)
        for (int n = 0; n < (int)(sizeof bwd_hostile_N / sizeof bwd_hostile_N[0]); n++)
            for (attn_init init = ATTN_INIT_LARGE; init <= ATTN_INIT_RISING; init++, ran++)
                failed += !run_bwd_case(g, B, H, bwd_hostile_N[n], init == ATTN_INIT_RISING, init);
    /* heads past the grid's y limit, where a kernel that puts B * H in grid.y cannot launch */
    for (int causal = 0; causal <= 1 && s->on_gpu && g->D == 64; causal++, ran++)
        failed += !run_bwd_case(g, 1, 70000, 17, causal, ATTN_INIT_NORMAL);
    cr_log_info("stage %s D=%d %s: %d cases, %d failed", s->id, g->D, attn_dtype_name((attn_dtype)g->dtype), ran, failed);
    cr_assert_gt(ran, 0);
}

/* ---- the harness's side of a backward run ----------------------------------------------------- */

static const attn_stage *first_backward(int on_gpu) {
    for (int i = 0; i < attn_num_stages; i++)
        if (attn_stages[i].pass != ATTN_FORWARD && attn_stages[i].on_gpu == on_gpu) return &attn_stages[i];
    return NULL;
}

/* A backward stage needs dO; a forward stage is no backward one's forward unless it writes LSE; a
 * forward stage is not run as a backward one. Each refused with the reason, before any work. */
Test(backward, refuses_missing_grad_and_bad_forward) {
    const attn_stage *s = first_backward(0);
    cr_assert_not_null(s, "no CPU backward stage is registered");
    attn_problem p = attn_problem_make(1, 1, 33, 64, 0);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 3, ATTN_INIT_NORMAL), ATTN_OK);
    attn_run_opts opt = attn_run_opts_default();
    opt.repeat = 1, opt.warmup = 0;
    attn_result r;
    cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_EINVAL);
    cr_assert(strstr(attn_last_error(), "need dO"), "%s", attn_last_error());
    cr_assert_eq(attn_inputs_random_grad(&in, 4), ATTN_OK);
    opt.forward = attn_find_stage("04m"); /* writes no LSE */
    cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_EINVAL);
    cr_assert(strstr(attn_last_error(), "--forward 04m"), "%s", attn_last_error());
    opt.forward = attn_find_stage("06m"); /* a CPU model that writes LSE: fine */
    opt.check = 1;
    cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_OK, "%s", attn_last_error());
    cr_assert(r.forward == opt.forward && r.checked && r.grad.pass && r.chk.pass);
    attn_grads g = {NULL, NULL, NULL};
    cr_assert_eq(attn_run_backward(attn_find_stage("01"), &in, &opt, &r, &g), ATTN_EINVAL);
    attn_inputs_free(&in);
}

/* The default forward: stage 01 for a CPU backward stage; for a GPU one, the last GPU forward stage
 * that writes LSE and takes the problem (06 at D = 96, where 07-09 refuse), never one built for
 * decoding (15, 15p: ATTN_FOR_DECODING), which take these problems too; else stage 01. */
Test(backward, default_forward) {
    const attn_stage *cpu = first_backward(0), *gpu = first_backward(1);
    cr_assert(cpu && gpu);
    attn_problem p = attn_problem_make(1, 1, 64, 64, 0);
    cr_assert_eq(attn_default_forward(cpu, &p), attn_find_stage("01"));
    const attn_stage *f = attn_default_forward(gpu, &p);
    char why[512]; /* attn_gpu_available() below writes its own message over this one */
    snprintf(why, sizeof why, "%s", attn_last_error());
    if (!attn_built_with_cuda() || attn_gpu_available() != ATTN_OK) {
        cr_assert_null(f);
        cr_assert(strstr(why, "no GPU forward stage"), "%s", why);
        return;
    }
    cr_assert(f && f->on_gpu && f->writes_lse && f->pass == ATTN_FORWARD && f->max_gpus == 1);
    cr_assert(!(f->takes & ATTN_FOR_DECODING), "stage %s, built for decoding, is the backward's forward", f->id);
    p.D = 96;
    f = attn_default_forward(gpu, &p);
    cr_assert(!f || f->supports_dim(96));
    /* bf16 at D = 80: no GPU forward takes it (02 is fp16 only), so the CPU reference writes O and LSE */
    p.D = 80, p.dtype = ATTN_BF16;
    f = attn_default_forward(gpu, &p);
    cr_assert(f && (f->on_gpu ? attn_stage_supports(f, &p) == ATTN_OK : f == attn_find_stage("01")), "%s",
              f ? f->id : attn_last_error());
}

/* Two runs of a model with a check: the gradients' copy comes back through attn_grads whole (every
 * element written: no poison left), the same each time. */
Test(backward, gradients_come_back_whole) {
    const attn_stage *s = first_backward(0);
    attn_problem p = attn_problem_make(2, 1, 70, 32, 1);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 5, ATTN_INIT_NORMAL), ATTN_OK);
    cr_assert_eq(attn_inputs_random_grad(&in, 6), ATTN_OK);
    const size_t bytes = (size_t)attn_qkv_elems(&p) * 2;
    uint16_t *buf = malloc(6 * bytes);
    cr_assert_not_null(buf);
    attn_run_opts opt = attn_run_opts_default();
    opt.repeat = 1, opt.warmup = 0;
    attn_result r;
    for (int run = 0; run < 2; run++) {
        attn_grads g = {buf + run * 3 * (bytes / 2), buf + (run * 3 + 1) * (bytes / 2), buf + (run * 3 + 2) * (bytes / 2)};
        cr_assert_eq(attn_run_backward(s, &in, &opt, &r, &g), ATTN_OK, "%s", attn_last_error());
    }
    for (size_t e = 0; e < 3 * bytes / 2; e++) cr_assert_neq(buf[e], 0xffffu, "gradient element %zu never written", e);
    cr_assert(!memcmp(buf, buf + 3 * bytes / 2, 3 * bytes), "two runs of stage %s differ", s->id);
    free(buf);
    attn_inputs_free(&in);
}
