/*
 * test_trace.c: build/attn --trace-row on the CPU models of the online softmax (04m, 05m, 06m), and
 * make diff's script (tools/stage_diff.sh). A trace must tell the truth about the row it follows: its
 * running max never falls, alpha is 0 on the first tile and 2^(m_old - m_new) after, and its last line
 * has reached the row the stage wrote and the reference's LSE. Stages without a trace refuse the flag.
 */
#include <math.h>

#include "test_util.h"

static char out[65536];

static int attn(const char *args) { return run_bin(attn_bin(), args, out, sizeof out); }

typedef struct {
    int n;                      /* key-tile lines */
    double m[64], l[64], alpha[64], lse[64], o[64][4];
    double out_o[4], ref_o[4], ref_lse;
} trace_t;

/* The trace's lines out of build/attn's output: one per key tile, then "output" and "reference". */
static void parse_trace(const char *text, trace_t *t) {
    memset(t, 0, sizeof *t);
    const char *line = strstr(text, "O/l[3]\n");
    cr_assert_not_null(line, "no trace header: %s", text);
    for (line = strchr(line, '\n') + 1; *line; line = strchr(line, '\n') + 1) {
        char keys[32];
        if (sscanf(line, " output %lf %lf %lf %lf", &t->out_o[0], &t->out_o[1], &t->out_o[2], &t->out_o[3]) == 4)
            continue;
        if (sscanf(line, " reference %lf %lf %lf %lf %lf", &t->ref_lse, &t->ref_o[0], &t->ref_o[1], &t->ref_o[2],
                   &t->ref_o[3]) == 5)
            break;
        const int k = t->n;
        cr_assert_lt(k, 64);
        if (sscanf(line, " %31s %lf %lf %lf %lf %lf %lf %lf %lf", keys, &t->m[k], &t->l[k], &t->alpha[k], &t->lse[k],
                   &t->o[k][0], &t->o[k][1], &t->o[k][2], &t->o[k][3]) != 9)
            cr_assert_fail("not a trace line: %.120s", line);
        t->n++;
    }
}

/* What every trace must hold; log2_units: m is in log2 units (04m, 05m), so alpha = 2^(m_old - m). */
static void expect_a_true_trace(const char *args, int lines, int log2_units) {
    cr_assert_eq(attn(args), 0, "%s: %s", args, out);
    trace_t t;
    parse_trace(out, &t);
    cr_assert_eq(t.n, lines, "%s: %d key-tile lines, want %d: %s", args, t.n, lines, out);
    cr_assert_eq(t.alpha[0], 0.0, "the first tile rescales nothing: alpha %g", t.alpha[0]);
    for (int k = 1; k < t.n; k++) {
        cr_assert(t.m[k] >= t.m[k - 1], "m fell at tile %d: %g -> %g", k, t.m[k - 1], t.m[k]);
        cr_assert(t.alpha[k] > 0 && t.alpha[k] <= 1, "alpha %g", t.alpha[k]);
        if (log2_units)
            cr_assert(fabs(t.alpha[k] - exp2(t.m[k - 1] - t.m[k])) < 2e-5, "alpha %g, m %g -> %g", t.alpha[k],
                      t.m[k - 1], t.m[k]);
    }
    const int last = t.n - 1;
    for (int d = 0; d < 4; d++) /* O/l in fp32 against the stage's fp16 row: one rounding apart */
        cr_assert(fabs(t.o[last][d] - t.out_o[d]) <= 1e-3 * fabs(t.out_o[d]) + 2e-5, "dim %d: %g, output %g", d,
                  t.o[last][d], t.out_o[d]);
    cr_assert(fabs(t.lse[last] - t.ref_lse) <= 1e-5 * fabs(t.ref_lse) + 2e-6, "LSE so far %g, reference %g",
              t.lse[last], t.ref_lse);
}

Test(trace, the_online_softmax_reaches_the_output_and_the_reference) {
    /* 04m: 5 key tiles of 64 for N = 300, non-causal; 05m causal row 130: tiles 0, 1, 2 only */
    expect_a_true_trace("--stage 04m --batch 1 --heads 2 --seq 300 --dim 64 --trace-row 5", 5, 1);
    expect_a_true_trace("--stage 04m --batch 1 --heads 1 --seq 300 --dim 32 --init rising --trace-row 299", 5, 1);
    expect_a_true_trace("--stage 05m --batch 1 --heads 1 --seq 300 --dim 64 --causal --trace-row 130", 3, 1);
    /* 06m at D = 64: 128-key tiles walked from the last, two 64-key steps each: 3 x 2 */
    expect_a_true_trace("--stage 06m --batch 1 --heads 1 --seq 300 --dim 64 --trace-row 299 --check", 6, 0);
}

Test(trace, a_row_before_its_first_visible_key_says_so) {
    /* 06m at D = 128, causal: row 5's block (rows 0-127) visits key tile 1 (keys 64-127) first */
    cr_assert_eq(attn("--stage 06m --batch 1 --heads 1 --seq 300 --dim 128 --causal --trace-row 5"), 0, "%s", out);
    cr_assert(strstr(out, "64-127            -inf    0.00000  0.000000           -  (no visible key yet)"), "%s", out);
}

Test(trace, stages_without_a_trace_and_rows_past_n_are_refused) {
    EXPECT_REFUSED(attn, out, "--stage 03m --seq 64 --trace-row 3",
                   "stage 03m follows no row through its key tiles; the stages that do: 04m, 05m, 06m");
    EXPECT_REFUSED(attn, out, "--stage 12m --seq 64 --trace-row 3", "the stages that do: 04m, 05m, 06m");
    EXPECT_REFUSED(attn, out, "--stage 01 --seq 64 --trace-row 3", "stage 01 follows no row");
    EXPECT_REFUSED(attn, out, "--stage 04m --seq 64 --trace-row 64", "0 to N - 1 = 63 (got 64)");
    EXPECT_REFUSED(attn, out, "--stage 04m --seq 64 --trace-row 1 --trace-row 2", "--trace-row given twice");
}

/* A step that leaves a row's max where it was must rescale nothing: alpha exactly 1. 06m took alpha
 * from fmaf(m_old, sl2, -msc), the exact product against the rounded msc its P were taken with: for
 * most rows 1 + 2^-23 or 1 - 2^-24 at every such step, so l, and the LSE with it, drifted with the
 * number of steps (LSE err/tol 2.84 at N = 2^20 + 1; tests/mutants/run.sh's run there). Here 16 rows of
 * each model at N = 1025 (06m: 16 steps of 64 keys a row), through the library's trace callback, which
 * sees alpha as the model holds it: before the fix 06m had such a step on most of them. */
typedef struct {
    float m_prev;
    int steps, held, not_one;
    float bad_alpha;
} alpha_watch;

static void watch_alpha(const attn_trace *t, const attn_trace_step *st) {
    alpha_watch *w = t->ctx;
    if (w->steps++ > 0 && st->m == w->m_prev) {
        w->held++;
        if (st->alpha != 1.0f) w->not_one++, w->bad_alpha = st->alpha;
    }
    w->m_prev = st->m;
}

Test(trace, an_unchanged_max_rescales_by_exactly_one) {
    static const char *ids[] = {"04m", "05m", "06m"};
    attn_problem p = attn_problem_make(1, 1, 1025, 64, 0);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 1, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    uint16_t *o = malloc((size_t)attn_qkv_elems(&p) * 2);
    float *lse = malloc((size_t)attn_rows(&p) * 4);
    cr_assert(o && lse);
    for (int s = 0; s < 3; s++) {
        const attn_stage *stage = attn_find_stage(ids[s]);
        int held = 0;
        for (int64_t row = 0; row < 16; row++) {
            alpha_watch w = {0};
            const attn_trace t = {row, watch_alpha, &w};
            const attn_args a = {.q = in.q, .k = in.k, .v = in.v, .o = o, .lse = lse, .gpus = 1, .trace = &t};
            cr_assert_eq(stage->run(&p, &a), ATTN_OK, "%s: %s", ids[s], attn_last_error());
            cr_assert_eq(w.not_one, 0, "%s row %lld: %d of %d steps kept the max and rescaled by %.9g, not 1",
                         ids[s], (long long)row, w.not_one, w.held, (double)w.bad_alpha);
            held += w.held;
        }
        cr_assert_gt(held, 16 * 8, "%s: only %d steps kept the max: the test saw too little", ids[s], held);
    }
    free(o), free(lse);
    attn_inputs_free(&in);
}

/* ---- make diff A=.. B=.. ------------------------------------------------------------------------- */

static int stage_diff(const char *args) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ATTN=%s sh tools/stage_diff.sh %s", attn_bin(), args);
    return run_cmd(cmd, out, sizeof out);
}

Test(diff, two_models_differ_in_code_not_in_their_header_comments) {
    cr_assert_eq(stage_diff("03m 04m"), 0, "%s", out);
    cr_assert(strstr(out, "--- 03m: 03_tiled/tiled_cpu.c\n+++ 04m: 04_online_softmax/online_softmax_cpu.c"), "%s", out);
    cr_assert(strstr(out, "\n+            const float alpha = exp2f(m[r] - m_sub);"), "the idea: %s", out);
    cr_assert(strstr(out, "\n-    /* Pass one: m_i = max over all key tiles."), "pass one leaves: %s", out);
    cr_assert(!strstr(out, "What it models") && !strstr(out, "Stage 04m:"), "a header comment: %s", out);
    cr_assert_eq(stage_diff("06c 06d"), 0, "%s", out);
    cr_assert(strstr(out, "+FA2_ROAD_STEP(\"06d\", FA2_RECIPE_06D"), "a road step is one line: %s", out);
}

/* Stage 08's road steps are recipes (#define lines) over one kernel body: the diff applies each recipe
 * to the body's #if WS_ regions, so two steps differ by the code of the idea, not by a #define. */
Test(diff, a_recipe_is_applied_to_its_body) {
    cr_assert_eq(stage_diff("08c 08d"), 0, "%s", out);
    cr_assert(strstr(out, "--- 08c: 08_warp_specialized/step08c_pairs.cu\n+++ 08d: 08_warp_specialized/step08d_causal_pairs.cu"),
              "%s", out);
    cr_assert(strstr(out, "\n+    for (j = shared; j < kr.n_tiles; ++j, ++it)") && strstr(out, "\n+    const int shared ="),
              "the idea: the later block's own tile, last: %s", out);
    cr_assert(!strstr(out, "#if WS_") && !strstr(out, "#define WS_"), "no recipe left: %s", out);
    cr_assert_eq(stage_diff("--show 08a"), 0, "%s", out);
    cr_assert(strstr(out, "hop_produce_kv<D, BC, 0>(") && !strstr(out, "hop_produce_row_block<"),
              "08a loads whole tiles, no pairs: %s", out);
    cr_assert(!strstr(out, "#if WS_") && !strstr(out, "#else") && !strstr(out, "What this stage adds"), "%s", out);
    cr_assert_eq(stage_diff("08 09a"), 0, "%s", out); /* two bodies: 08's full recipe, 09's first step */
    cr_assert(strstr(out, "\n+template <int W> struct gemm_window {") && !strstr(out, "#if OV_"),
              "the ping-pong: %s", out);
}

Test(diff, one_file_and_unknown_stages_are_said) {
    cr_assert_eq(stage_diff("13 13d"), 0, "%s", out);
    cr_assert(strstr(out, "are the same file, 13_backward_fa2/backward_fa2.cu"), "%s", out);
    cr_assert_eq(stage_diff("04m 99"), 2, "%s", out);
    cr_assert(strstr(out, "unknown stage '99'"), "%s", out);
}
