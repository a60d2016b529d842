/*
 * test_stages.c: every registered stage but the reference (stage 01: test_reference.c), GPU stages
 * and their CPU models alike, against the double reference, at ragged shapes (N not a multiple of
 * any tile), each head dim it supports, causal and not, each dtype it takes, and the hostile inputs:
 * scores in the thousands, each row's maximum on key 0, a maximum that rises in every key tile. The
 * list of stages comes from the registry only; a stage added there is tested here without editing
 * this file. Each case runs the stage twice and requires the two outputs to be bit-identical
 * (determinism). The CPU models run everywhere, so a machine without a GPU (CI) still checks every
 * algorithm at these shapes. At the end, the harness's timed runs through stand-in stages: the poison
 * before every run, the median.
 */
#include <math.h>
#include <time.h>

#include "half.h"
#include "test_util.h"

#include <criterion/parameterized.h>

/* One test process per group: a stage, a head dim and a dtype, whose cases (every N, causal and not,
 * and the hostile inputs) run one after another in it. Criterion forks a process per test, and on the
 * H200 each process cost 0.19-0.20 s whatever the stage ran (2026-12-01, 16 in parallel: stages
 * 02-05, 455 one-case processes in 88 s; 06a-06e, 321 in 61 s; 06-10, 809 in 156 s), so with one case
 * per process most of make check's time there was process set-up; a group pays it once for up to 36
 * cases. Every case still reports its own failure (cr_expect), and `--verbose` names each case before
 * it runs, so a crash points at its case. */
typedef struct {
    int stage; /* index into attn_stages */
    int D, dtype;
} stage_group;

/* 1100: stage 09 at D = 128, non-causal, takes 192-key tiles there (its keys_per_tile()): six, the
 * last 140 keys full, so its pipeline steps run at that width; at N = 129 it takes one such tile. */
static const int case_N[] = {1, 17, 64, 127, 128, 129, 1000, 1100};
#define NUM_N ((int)(sizeof case_N / sizeof case_N[0]))
/* GPU stages also run B = 3, H = 71 at this N: an odd count of row blocks in all (Tr = 3 at Br = 128),
 * where stage 09's pairs of row blocks straddle two heads and the last pair's second block has no row
 * block of its own (stage 08's pairs, one head each, have such a block in every head at an odd Tr:
 * here, and at N = 1-127 and 1100); and 213 heads, more than a causal tail of about 396 row blocks
 * holds (132 heads at Tr = 3, 198 at D = 64's Tr = 2), so that heads run before the tail: stage 09's
 * (long, short) units (09_overlap/work_units.h), stages 07 and 08's heads one after another
 * (kit/grid_order.h). B = 2, H = 3 never makes that count odd. */
#define ODD_HEADS_N 300
/* The hostile inputs at fewer shapes: a short row, a ragged tail and a long one. */
static const int hostile_N[] = {17, 129, 1000};
#define NUM_HOSTILE_N ((int)(sizeof hostile_N / sizeof hostile_N[0]))
#define MAX_GROUPS 512
/* Under ASan and UBSan (make check-asan: SAN=1 defines ATTN_SAN) the CPU models run 5 to 10 times
 * slower, and the whole list took 5.5 minutes on CI's 2 cores; there their cases stop at N = 129,
 * which already has every access pattern (ragged tails, several key tiles, the diagonal band).
 * make check runs the whole list. */
#ifdef ATTN_SAN
#define CPU_MODEL_MAX_N 129
#else
#define CPU_MODEL_MAX_N ATTN_MAX_N
#endif

/* The hostile inputs run at 64 (the most used dim) and at the smallest and largest the stage takes. */
static int takes_hostile_inputs_at(const attn_stage *s, int D) {
    int first_dim = -1, last_dim = -1;
    for (int d = 0; d < attn_num_test_dims; d++)
        if (s->supports_dim(attn_test_dims[d])) {
            if (first_dim < 0) first_dim = attn_test_dims[d];
            last_dim = attn_test_dims[d];
        }
    return D == 64 || D == first_dim || D == last_dim;
}

ParameterizedTestParameters(stages, match_reference) {
    static stage_group groups[MAX_GROUPS];
    int n = 0;
    for (int s = 0; s < attn_num_stages; s++) {
        if (!strcmp(attn_stages[s].id, "01")) continue; /* the reference: test_reference.c */
        if (attn_stages[s].pass != ATTN_FORWARD) continue; /* the backward stages: test_backward.c */
        if (!test_wants_stage(attn_stages[s].id)) continue;
        for (int d = 0; d < attn_num_test_dims; d++)
            for (int t = 0; t <= ATTN_BF16 && n < MAX_GROUPS; t++)
                if (attn_stages[s].supports_dim(attn_test_dims[d]) &&
                    (attn_stages[s].dtypes & ATTN_DTYPE_BIT(t)))
                    groups[n++] = (stage_group){s, attn_test_dims[d], t};
    }
    return cr_make_param_array(stage_group, groups, (size_t)n);
}

typedef enum { CASE_PASS, CASE_FAIL, CASE_NO_SHARED_MEMORY } case_outcome;

/* One case: fresh inputs, two runs (the second must be bit-identical to the first), the first checked
 * against the double reference. A failure is reported here and the group goes on. */
static case_outcome run_case(const stage_group *g, int N, int causal, attn_init init, int odd_heads) {
    const attn_stage *s = &attn_stages[g->stage];
    cr_log_info("stage %s N=%d D=%d causal=%d %s init=%s%s", s->id, N, g->D, causal,
                attn_dtype_name((attn_dtype)g->dtype), attn_init_name(init), odd_heads ? " B=3 H=71" : "");
    /* GPU stages at B=2, H=3 (or B=3, H=71: ODD_HEADS_N). A CPU model folds b and h into one head
     * index, as its kernel does, so two heads test its head offsets as well as six; B=2, H=1 keeps the
     * whole list on CI's two cores to about a minute (the reference check costs as much as the model). */
    attn_problem p = odd_heads   ? attn_problem_make(3, 71, N, g->D, causal)
                     : s->on_gpu ? attn_problem_make(2, 3, N, g->D, causal)
                                 : attn_problem_make(2, 1, N, g->D, causal);
    p.dtype = (attn_dtype)g->dtype;
    attn_inputs in;
    /* fresh inputs for every case: the seed mixes the whole case */
    const uint64_t seed = 0x5eedull +
                          (uint64_t)(((g->stage * 4099 + N) * 263 + g->D) * 4 + causal * 2 + g->dtype) * 8 +
                          (uint64_t)init + (uint64_t)odd_heads * 0x9e3779b9ull;
    cr_assert_eq(attn_inputs_random(&in, &p, seed, init), ATTN_OK, "%s", attn_last_error());
    attn_run_opts opt = attn_run_opts_default();
    opt.warmup = 0;
    opt.repeat = 2;
    opt.check = 1;
    /* 213 heads at D >= 128 pass 2^31 reference multiply-adds, where the check takes the first and
     * last head and sampled rows: 4096 of the 63900 miss a wrong 128-row block with odds e^-8 */
    if (odd_heads) opt.check_rows = 4096;
    attn_result r;
    const attn_status st = attn_run(s, &in, &opt, &r, NULL, NULL);
    attn_inputs_free(&in);
    /* a head dim the registry allows may still need more shared memory than an older GPU has: the
     * stage says so (EUNSUPPORTED, with the numbers) */
    if (st == ATTN_EUNSUPPORTED && strstr(attn_last_error(), "shared memory")) return CASE_NO_SHARED_MEMORY;
    const char *dt = attn_dtype_name(p.dtype), *how = attn_init_name(init);
    if (st != ATTN_OK) {
        cr_expect_fail("stage %s N=%d D=%d causal=%d %s init=%s: %s", s->id, N, g->D, causal, dt, how,
                       attn_last_error());
        return CASE_FAIL;
    }
    const attn_check *k = &r.chk;
    const int ok = k->pass && k->lse_checked == s->writes_lse && r.identical == 1;
    cr_expect(k->pass,
              "stage %s N=%d D=%d causal=%d %s init=%s: max abs err %.3e, worst [b=%lld h=%lld n=%lld "
              "d=%lld] got %.6g want %.6g tol %.3g (ratio %.3g), LSE err %.3e (ratio %.3g), non-finite %lld",
              s->id, N, g->D, causal, dt, how, k->max_abs_err, (long long)k->worst_b, (long long)k->worst_h,
              (long long)k->worst_n, (long long)k->worst_d, k->worst_got, k->worst_want, k->worst_tol,
              k->worst_ratio, k->max_lse_err, k->lse_worst_ratio, (long long)k->nonfinite);
    cr_expect_eq(k->lse_checked, s->writes_lse,
                 "stage %s N=%d D=%d causal=%d %s init=%s: LSE checked %d, written %d", s->id, N, g->D,
                 causal, dt, how, k->lse_checked, s->writes_lse);
    cr_expect_eq(r.identical, 1, "stage %s N=%d D=%d causal=%d %s init=%s: a second run is not bit-identical",
                 s->id, N, g->D, causal, dt, how);
    return ok ? CASE_PASS : CASE_FAIL;
}

ParameterizedTest(stage_group *g, stages, match_reference, .timeout = 900) {
    const attn_stage *s = &attn_stages[g->stage];
    SKIP_UNLESS_RUNNABLE(s);
    int ran = 0, failed = 0;
    for (int init = ATTN_INIT_NORMAL; init <= ATTN_INIT_RISING; init++) {
        if (init != ATTN_INIT_NORMAL && !takes_hostile_inputs_at(s, g->D)) break;
        const int *Ns = init == ATTN_INIT_NORMAL ? case_N : hostile_N;
        const int nN = init == ATTN_INIT_NORMAL ? NUM_N : NUM_HOSTILE_N;
        for (int i = 0; i < nN; i++) {
            if (!s->on_gpu && Ns[i] > CPU_MODEL_MAX_N) continue;
            for (int causal = 0; causal <= 1; causal++) {
                const case_outcome o = run_case(g, Ns[i], causal, (attn_init)init, 0);
                /* shared memory depends on D and the dtype only: the whole group is skipped, visibly */
                if (o == CASE_NO_SHARED_MEMORY && ran == 0) cr_skip_test("%s", attn_last_error());
                cr_expect(o != CASE_NO_SHARED_MEMORY, "stage %s D=%d: refused after %d cases ran: %s", s->id,
                          g->D, ran, attn_last_error());
                ran++;
                failed += o != CASE_PASS;
            }
        }
    }
    for (int causal = 0; causal <= 1 && s->on_gpu; causal++, ran++)
        failed += run_case(g, ODD_HEADS_N, causal, ATTN_INIT_NORMAL, 1) != CASE_PASS;
    cr_log_info("stage %s D=%d %s: %d cases, %d failed", s->id, g->D, attn_dtype_name((attn_dtype)g->dtype),
                ran, failed);
    cr_assert_gt(ran, 0, "stage %s D=%d: no case ran", s->id, g->D);
}

/* Unsupported head dims and dtypes are refused with the stage's own list, before any GPU work. */
Test(registry, refuse_unsupported_dims_and_dtypes) {
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        for (int D = 1; D <= ATTN_MAX_D; D++) {
            attn_problem p = attn_problem_make(1, 1, 8, D, 0);
            attn_status st = attn_stage_supports(s, &p);
            if (s->supports_dim(D)) {
                cr_assert_eq(st, ATTN_OK);
            } else {
                cr_assert_eq(st, ATTN_EUNSUPPORTED);
                cr_assert(strstr(attn_last_error(), s->dims_text), "message names the allowed dims: %s",
                          attn_last_error());
            }
        }
        attn_problem p = attn_problem_make(1, 1, 8, 64, 0);
        p.dtype = ATTN_BF16;
        cr_assert_eq(attn_stage_supports(s, &p) == ATTN_OK, (s->dtypes & ATTN_DTYPE_BIT(ATTN_BF16)) != 0);
    }
}

/* The bench holds each point's Q, K and V on the GPU for all stages (attn_gpu_hold_inputs). A run on
 * the held inputs gives O and LSE identical to a run that uploads its own; a run on other inputs of the
 * same size must not take the held ones (it is checked against its own reference). */
Test(stages, held_inputs_change_nothing) {
    const attn_stage *s = attn_find_stage("06");
    cr_assert_not_null(s);
    SKIP_UNLESS_RUNNABLE(s);
    attn_problem p = attn_problem_make(2, 3, 301, 64, 1);
    attn_inputs a, b;
    cr_assert_eq(attn_inputs_random(&a, &p, 71, ATTN_INIT_NORMAL), ATTN_OK);
    cr_assert_eq(attn_inputs_random(&b, &p, 72, ATTN_INIT_NORMAL), ATTN_OK);
    const size_t o_bytes = (size_t)attn_qkv_elems(&p) * 2, lse_bytes = (size_t)attn_rows(&p) * 4;
    uint16_t *o[2] = {malloc(o_bytes), malloc(o_bytes)};
    float *lse[2] = {malloc(lse_bytes), malloc(lse_bytes)};
    cr_assert(o[0] && o[1] && lse[0] && lse[1]);
    attn_run_opts opt = attn_run_opts_default();
    opt.warmup = 0, opt.repeat = 2, opt.check = 1;
    attn_result r;
    cr_assert_eq(attn_run(s, &a, &opt, &r, o[0], lse[0]), ATTN_OK, "%s", attn_last_error());
    cr_assert(!r.inputs_held);
    cr_assert_eq(attn_gpu_hold_inputs(&a), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(attn_run(s, &a, &opt, &r, o[1], lse[1]), ATTN_OK, "%s", attn_last_error());
    cr_assert(r.inputs_held, "the run did not take the held inputs");
    cr_assert(r.checked && r.chk.pass && r.identical == 1, "held inputs: worst ratio %g", r.chk.worst_ratio);
    cr_assert(!memcmp(o[0], o[1], o_bytes) && !memcmp(lse[0], lse[1], lse_bytes),
              "O or LSE differ between a run on held inputs and one that uploaded its own");
    cr_assert_eq(attn_run(s, &b, &opt, &r, o[1], lse[1]), ATTN_OK, "%s", attn_last_error());
    cr_assert(!r.inputs_held && r.checked && r.chk.pass, "other inputs while a set is held: held %d, worst ratio %g",
              r.inputs_held, r.chk.worst_ratio);
    attn_gpu_release_inputs();
    free(o[0]), free(o[1]), free(lse[0]), free(lse[1]);
    attn_inputs_free(&a), attn_inputs_free(&b);
}

/* Stage 02 refuses, with the numbers, a problem whose N x N scores cannot fit, before allocating. */
Test(registry, naive_gpu_refuses_scores_that_do_not_fit) {
    const attn_stage *s = attn_find_stage("02");
    cr_assert_not_null(s);
    SKIP_UNLESS_RUNNABLE(s);
    attn_problem p = attn_problem_make(1, 1, 1 << 20, 8, 0); /* 6 TiB of scores */
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 11, ATTN_INIT_NORMAL), ATTN_OK);
    attn_run_opts opt = attn_run_opts_default();
    attn_result r;
    cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_ENOMEM);
    cr_assert(strstr(attn_last_error(), "stage 02 needs 6144.00 GiB for the N x N scores"), "message: %s",
              attn_last_error());
    cr_assert(strstr(attn_last_error(), "GiB free"), "message: %s", attn_last_error());
    attn_inputs_free(&in);
}

/* Every id and name finds its stage; a leading zero is optional; a stage number and a folder name the
 * numbered stage, never a road step or CPU model that shares its folder ("06c" is found as "06c"); in
 * a folder without a kernel they would name its CPU model. */
Test(registry, find_stage_by_id_name_number_and_folder) {
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        cr_assert_eq(attn_find_stage(s->id), s, "id %s", s->id);
        cr_assert_eq(attn_find_stage(s->name), s, "name %s", s->name);
        const attn_stage *by_folder = attn_find_stage(s->folder);
        int has_kernel = 0;
        for (int j = 0; j < attn_num_stages; j++)
            has_kernel |= !strcmp(attn_stages[j].folder, s->folder) && attn_stages[j].on_gpu;
        cr_assert(by_folder && (has_kernel ? strspn(by_folder->id, "0123456789") == strlen(by_folder->id)
                                           : !by_folder->on_gpu && !strcmp(by_folder->folder, s->folder)),
                  "folder %s finds %s", s->folder, by_folder ? by_folder->id : "nothing");
        char number[8];
        snprintf(number, sizeof number, "%d", atoi(s->id));
        cr_assert_eq(attn_find_stage(number), by_folder, "number %s", number);
        if (s->id[0] == '0') cr_assert_eq(attn_find_stage(s->id + 1), s, "id %s without its zero", s->id);
    }
    cr_assert_eq(attn_find_stage("3"), attn_find_stage("03_tiled"));
    cr_assert(attn_find_stage("3")->on_gpu && !attn_find_stage("3m")->on_gpu);
    cr_assert_eq(attn_find_stage("03m"), attn_find_stage("tiled_cpu"));
    cr_assert(attn_find_stage("06c") != attn_find_stage("06m"));
    cr_assert_null(attn_find_stage("06z"));
    cr_assert_null(attn_find_stage("03x"));
    cr_assert_null(attn_find_stage("03mm"));
    cr_assert_null(attn_find_stage("99"));
    cr_assert(attn_find_stage("15")->on_gpu && attn_find_stage("15") != attn_find_stage("15p"),
              "15 names the kernel, not its paged step or its model");
    cr_assert_null(attn_find_stage(""));
    cr_assert_null(attn_find_stage("-3"));
}

/* Each stage runs its own code: no two registry entries share an entry point. Road step 06c once
 * shipped calling the CPU model's function (both were named stage06c_run; the static library kept
 * one) and crashed on the GPU, while every CPU-only check passed. In a CUDA build this catches it
 * without a GPU; the library build also refuses a function defined twice. */
Test(registry, every_stage_has_its_own_entry_point) {
    for (int i = 0; i < attn_num_stages; i++)
        for (int j = i + 1; j < attn_num_stages; j++)
            if (attn_stages[i].run && attn_stages[j].run)
                cr_assert_neq((void *)attn_stages[i].run, (void *)attn_stages[j].run,
                              "stages %s and %s call the same function", attn_stages[i].id,
                              attn_stages[j].id);
}

/* ---- the harness's timed runs (harness.c), through stand-in stages ---------------------------- */

static int stand_in_calls; /* Criterion runs each test in a process of its own */

/* Stage 01 on odd calls; on even calls it returns ATTN_OK having written nothing. */
static attn_status writes_every_other_call(const attn_problem *p, const attn_args *a) {
    return ++stand_in_calls % 2 ? attn_find_stage("01")->run(p, a) : ATTN_OK;
}

/* Writes nothing; sleeps 2 ms on odd calls, 60 ms on even ones. */
static attn_status sleeps_2_then_60_ms(const attn_problem *p, const attn_args *a) {
    const struct timespec t = {0, (++stand_in_calls % 2 ? 2 : 60) * 1000000L};
    nanosleep(&t, NULL);
    return ATTN_OK;
}

static attn_stage stand_in(attn_status (*run)(const attn_problem *, const attn_args *)) {
    attn_stage s = *attn_find_stage("01");
    s.run = run;
    return s;
}

/* Normal inputs for one head of N keys at head dim D, and run options without warm-up. */
static attn_run_opts stand_in_setup(attn_inputs *in, int64_t H, int64_t N, int64_t D, uint64_t seed) {
    attn_problem p = attn_problem_make(1, H, N, D, 0);
    cr_assert_eq(attn_inputs_random(in, &p, seed, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    attn_run_opts opt = attn_run_opts_default();
    opt.warmup = 0;
    return opt;
}

/* O and LSE are poisoned before every timed run, not once: a run that writes nothing is caught even
 * when the run before it wrote everything (the check reads the last run's output). */
Test(harness, poisons_before_every_timed_run) {
    const attn_stage s = stand_in(writes_every_other_call);
    attn_inputs in;
    attn_run_opts opt = stand_in_setup(&in, 2, 33, 16, 21);
    const attn_problem p = in.p;
    opt.check = 1;
    attn_result res;
    for (int repeat = 2; repeat <= 3; repeat++) { /* the last run writes nothing, then everything */
        opt.repeat = repeat;
        stand_in_calls = 0;
        cr_assert_eq(attn_run(&s, &in, &opt, &res, NULL, NULL), ATTN_OK, "%s", attn_last_error());
        cr_assert(res.checked && res.runs == repeat);
        if (repeat == 2)
            cr_assert(!res.chk.pass && res.chk.unwritten == attn_qkv_elems(&p) + attn_rows(&p) &&
                          res.identical == 0,
                      "a last run that wrote nothing: pass %d, %lld never written, identical %d", res.chk.pass,
                      (long long)res.chk.unwritten, res.identical);
        else
            cr_assert(res.chk.pass && res.chk.unwritten == 0, "a last run that wrote everything must pass");
    }
    attn_inputs_free(&in);
}

/* The median of an even count of runs is the mean of the middle two (2 and 60 ms: about 31), of an
 * odd count the middle one (2, 60, 2: about 2). */
Test(harness, median_of_the_timed_runs) {
    const attn_stage s = stand_in(sleeps_2_then_60_ms);
    attn_inputs in;
    attn_run_opts opt = stand_in_setup(&in, 1, 8, 8, 22);
    attn_result res;
    opt.repeat = 2, stand_in_calls = 0;
    cr_assert_eq(attn_run(&s, &in, &opt, &res, NULL, NULL), ATTN_OK, "%s", attn_last_error());
    cr_assert(res.ms_min >= 2.0 && res.ms_min < 20.0 && res.ms_max >= 60.0, "min %g max %g", res.ms_min,
              res.ms_max);
    cr_assert(fabs(res.ms_median - 0.5 * (res.ms_min + res.ms_max)) < 1e-9 && res.ms_median > 30.0,
              "median of 2: %g (min %g, max %g)", res.ms_median, res.ms_min, res.ms_max);
    opt.repeat = 3, stand_in_calls = 0;
    cr_assert_eq(attn_run(&s, &in, &opt, &res, NULL, NULL), ATTN_OK, "%s", attn_last_error());
    cr_assert(res.ms_median >= 2.0 && res.ms_median < 20.0, "median of 3: %g", res.ms_median);
    attn_inputs_free(&in);
}

/* Each stage takes exactly the head dims that its dims_text names (what --list and every refusal
 * print): "lo..hi" a range, else a comma-separated list. */
Test(registry, supported_dims_are_the_listed_ones) {
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        int listed[ATTN_MAX_D + 1] = {0};
        long lo = 0, hi = 0;
        if (strstr(s->dims_text, "..") && sscanf(s->dims_text, "%ld..%ld", &lo, &hi) == 2) {
            cr_assert(lo >= 1 && hi <= ATTN_MAX_D && lo <= hi, "stage %s: dims '%s'", s->id, s->dims_text);
            for (long d = lo; d <= hi; d++) listed[d] = 1;
        } else {
            for (const char *p = s->dims_text; *p;) {
                char *end = NULL;
                const long d = strtol(p, &end, 10);
                cr_assert(end != p && d >= 1 && d <= ATTN_MAX_D, "stage %s: dims '%s'", s->id, s->dims_text);
                listed[d] = 1;
                p = end + strspn(end, ", ");
            }
        }
        for (int D = 1; D <= ATTN_MAX_D; D++)
            cr_assert_eq(!!s->supports_dim(D), listed[D], "stage %s %s D = %d, but its dims read '%s'", s->id,
                         s->supports_dim(D) ? "takes" : "refuses", D, s->dims_text);
    }
}

/* --gpus: a multi-GPU stage takes 1 to ATTN_MAX_GPUS, its own maximum included; a one-GPU or CPU
 * stage takes 1 alone. */
Test(registry, gpus_take_the_stages_whole_range) {
    const attn_stage *s10 = attn_find_stage("10"), *s06 = attn_find_stage("06");
    cr_assert(s10 && s06 && s10->max_gpus == ATTN_MAX_GPUS);
    cr_assert_eq(attn_stage_gpus_ok(s10, ATTN_MAX_GPUS), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(attn_stage_gpus_ok(s10, ATTN_MAX_GPUS + 1), ATTN_EINVAL);
    cr_assert_eq(attn_stage_gpus_ok(s06, 1), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(attn_stage_gpus_ok(s06, 2), ATTN_EINVAL);
}

/* ---- the random inputs (attn_inputs_random): what each --init promises ---------------------------- */

/* scale * q_i . k_j of one head's inputs, in double from the stored values */
static double score_of(const attn_inputs *in, int64_t i, int64_t j) {
    const attn_problem *p = &in->p;
    double s = 0.0;
    for (int64_t d = 0; d < p->D; d++)
        s += (double)attn_to_f32(in->q[i * p->D + d], p->dtype) * (double)attn_to_f32(in->k[j * p->D + d], p->dtype);
    return s * (double)p->scale;
}

/* large: scores with a standard deviation of about 1000; first-max: key 0 above every other key by
 * e^30 or more in every row; rising: scores up by about 20 from key 0 to key N-1, and a head of one
 * key is no exception (its ramp has no length to divide by). */
Test(harness, init_kinds_give_the_scores_they_promise) {
    enum { N = 64 };
    attn_problem p = attn_problem_make(1, 1, N, 64, 0);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 5, ATTN_INIT_LARGE), ATTN_OK, "%s", attn_last_error());
    double s1 = 0.0, s2 = 0.0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) s1 += score_of(&in, i, j), s2 += score_of(&in, i, j) * score_of(&in, i, j);
    const double sd = sqrt(s2 / (N * N) - (s1 / (N * N)) * (s1 / (N * N)));
    cr_assert(sd > 700.0 && sd < 1400.0, "large: scores' standard deviation %g, want about 1000", sd);
    attn_inputs_free(&in);
    cr_assert_eq(attn_inputs_random(&in, &p, 5, ATTN_INIT_FIRST_MAX), ATTN_OK, "%s", attn_last_error());
    for (int i = 0; i < N; i++)
        for (int j = 1; j < N; j++)
            cr_assert_gt(score_of(&in, i, 0) - score_of(&in, i, j), 30.0, "first-max: row %d, key %d: %g vs key 0's %g",
                         i, j, score_of(&in, i, j), score_of(&in, i, 0));
    attn_inputs_free(&in);
    cr_assert_eq(attn_inputs_random(&in, &p, 5, ATTN_INIT_RISING), ATTN_OK, "%s", attn_last_error());
    double rise = 0.0;
    for (int i = 0; i < N; i++) rise += (score_of(&in, i, N - 1) - score_of(&in, i, 0)) / N;
    cr_assert(rise > 15.0 && rise < 25.0, "rising: scores rise by %g on average, want about 20", rise);
    attn_inputs_free(&in);
    p.N = 1;
    cr_assert_eq(attn_inputs_random(&in, &p, 5, ATTN_INIT_RISING), ATTN_OK, "rising, N = 1: %s", attn_last_error());
    attn_inputs_free(&in);
}

/* --init large at a |scale| small enough that some q overflows fp16 while every k still fits is
 * refused as well: q and k are drawn apart, so checking k alone is not enough. The seed is one whose
 * largest |q| draw is at least 5% above its largest |k| draw; the scale puts the overflow between. */
Test(harness, init_overflow_of_q_alone_is_refused) {
    attn_problem p = attn_problem_make(1, 1, 64, 64, 0);
    attn_inputs in;
    double qmax = 0.0, kmax = 0.0;
    uint64_t seed = 1;
    for (; seed < 100; seed++) {
        cr_assert_eq(attn_inputs_random(&in, &p, seed, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
        qmax = kmax = 0.0;
        for (int64_t e = 0; e < attn_qkv_elems(&p); e++) {
            qmax = fmax(qmax, fabs((double)attn_to_f32(in.q[e], p.dtype)));
            kmax = fmax(kmax, fabs((double)attn_to_f32(in.k[e], p.dtype)));
        }
        attn_inputs_free(&in);
        if (qmax > 1.05 * kmax) break;
    }
    cr_assert_lt(seed, 100, "no seed with max|q| 5%% above max|k|");
    const double sigma = 65520.0 / sqrt(qmax * kmax); /* large's factor: sqrt(1000 / (scale sqrt(D))) */
    p.scale = (float)(1000.0 / (sigma * sigma * 8.0));
    cr_assert_eq(attn_inputs_random(&in, &p, seed, ATTN_INIT_LARGE), ATTN_EINVAL, "q overflowed unnoticed (scale %g)",
                 (double)p.scale);
    cr_assert(strstr(attn_last_error(), "--init large: at |scale|") && strstr(attn_last_error(), "overflow fp16"), "%s",
              attn_last_error());
}

/* attn_run leaves lse_host untouched for a stage that does not write LSE (harness.h): it is not
 * poisoned, nor used as the stage's scratch. */
Test(harness, lse_host_untouched_by_a_stage_without_lse) {
    const attn_stage *s = attn_find_stage("03m");
    cr_assert(s && !s->writes_lse);
    attn_inputs in;
    attn_run_opts opt = stand_in_setup(&in, 2, 33, 32, 23);
    float lse[2 * 33];
    uint16_t o[2 * 33 * 32];
    for (int i = 0; i < 2 * 33; i++) lse[i] = 1234.5f;
    attn_result res;
    opt.repeat = 2;
    cr_assert_eq(attn_run(s, &in, &opt, &res, o, lse), ATTN_OK, "%s", attn_last_error());
    for (int i = 0; i < 2 * 33; i++) cr_assert_eq(lse[i], 1234.5f, "lse_host[%d] written: %g", i, (double)lse[i]);
    attn_inputs_free(&in);
}
