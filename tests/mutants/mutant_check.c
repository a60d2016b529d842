/*
 * mutant_check.c: one run of a CPU model and the suite's check of it, for tests/mutants/run.sh. Linked
 * with one model's object file (patched with a mutant, or pristine) ahead of build/.../libattn.a, so
 * that the registry's entry for that model runs the object given here.
 *
 *   mutant_check --stage ID --seq N [--causal] [--init KIND] [--rows all|ends|ends:K]
 *
 * B = H = 1, D = 64, fp16, the inputs of `build/attn --seed 1` (dO too, for a backward stage).
 * A forward stage: O and LSE poisoned, the stage run once, then attn_check_output, the function
 * `build/attn --check` calls, on the rows --rows names:
 *   all   the rows --check takes (attn_sample_rows: every row up to 2^31 reference multiply-adds);
 *   ends  rows 0..255, 256 from N/2 on and the last 256 (all of them when N <= 768): the row
 *         tiles holding them are the only ones a model compiled with tests/mutants/shadow/ computes,
 *         so that N = 16385 costs 768 rows instead of 16385 (run.sh says why);
 *   ends:K  the same with K rows at each place: K = 8 at N = 2^20 + 1 costs 4 row tiles of 06m.
 * A backward stage: stage 06m (the pristine one in the library) writes O and LSE, the stage runs once,
 * then attn_check_grads, as `build/attn --check` calls it for the gradients.
 * Prints one line, "ID N=...: O err/tol ..., LSE err/tol ...: PASS" (or dQ, dK, dV for a backward
 * stage), and exits 0 on PASS, 1 on FAIL, 2 when it could not run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

static int64_t ends = 256; /* rows at each end and from the middle for --rows ends (ends:K: K) */

static int64_t seq_n = 0; /* the run's N, for mutant_wants_rows */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* tests/mutants/shadow/tiles_cpu.h asks, per row tile [first, end): does it hold a row --rows ends
 * checks? (Only models compiled with the shadow ask; for --rows all every tile does.) */
static int rows_all = 1;
int mutant_wants_rows(int64_t first, int64_t end) {
    if (rows_all || seq_n <= 3 * ends) return 1;
    const int64_t mid = seq_n / 2;
    return first < ends || (first < mid + ends && end > mid) || end > seq_n - ends;
}

static int usage(const char *why) {
    fprintf(stderr,
            "mutant_check: %s\nusage: mutant_check --stage ID --seq N [--causal] [--init KIND] "
            "[--rows all|ends|ends:K]\n",
            why);
    return 2;
}

/* The rows the check takes: --check's own sample, or the --rows ends ranges of the one head. */
static attn_status rows_to_check(const attn_problem *p, int64_t **rows, int64_t *n) {
    if (rows_all) return attn_sample_rows(p, 1, 256, 1, rows, n);
    *rows = malloc((size_t)p->N * sizeof(int64_t));
    if (!*rows) return attn_fail(ATTN_ENOMEM, "no memory for the rows");
    *n = 0;
    for (int64_t i = 0; i < p->N; i++)
        if (mutant_wants_rows(i, i + 1)) (*rows)[(*n)++] = i;
    return ATTN_OK;
}

static int forward(const attn_stage *s, const attn_inputs *in) {
    const attn_problem *p = &in->p;
    uint16_t *o = malloc((size_t)attn_qkv_elems(p) * 2);
    float *lse = malloc((size_t)attn_rows(p) * 4);
    int64_t *rows = NULL, n = 0;
    attn_check c;
    double tm[3] = {now_s(), 0, 0};
    attn_status st = o && lse ? ATTN_OK : attn_fail(ATTN_ENOMEM, "no memory for O and LSE");
    if (st == ATTN_OK) {
        memset(o, 0xff, (size_t)attn_qkv_elems(p) * 2), memset(lse, 0xff, (size_t)attn_rows(p) * 4);
        const attn_args a = {.q = in->q, .k = in->k, .v = in->v, .o = o, .lse = lse, .gpus = 1};
        st = s->run(p, &a);
    }
    tm[1] = now_s();
    if (st == ATTN_OK) st = rows_to_check(p, &rows, &n);
    if (st == ATTN_OK) st = attn_check_output(in, o, s->writes_lse ? lse : NULL, rows, n, &c);
    tm[2] = now_s();
    free(o), free(lse), free(rows);
    if (st != ATTN_OK) return fprintf(stderr, "mutant_check: %s\n", attn_last_error()), 2;
    printf("%s N=%lld%s, %lld rows: O err/tol %.3g [n=%lld d=%lld got %g want %g]", s->id, (long long)p->N,
           p->causal ? " causal" : "", (long long)c.rows_checked, c.worst_ratio, (long long)c.worst_n,
           (long long)c.worst_d, c.worst_got, c.worst_want);
    if (c.lse_checked) printf(", LSE err/tol %.3g", c.lse_worst_ratio);
    if (c.nonfinite) printf(", %lld non-finite", (long long)c.nonfinite);
    printf(": %s (run %.1f s, check %.1f s)\n", c.pass ? "PASS" : "FAIL", tm[1] - tm[0], tm[2] - tm[1]);
    return c.pass ? 0 : 1;
}

/* 06m's O and LSE, then stage s's gradients, checked. */
static int backward(const attn_stage *s, const attn_inputs *in) {
    const attn_problem *p = &in->p;
    const size_t bytes = (size_t)attn_qkv_elems(p) * 2;
    uint16_t *o = malloc(bytes), *dq = malloc(bytes), *dk = malloc(bytes), *dv = malloc(bytes);
    float *lse = malloc((size_t)attn_rows(p) * 4);
    const attn_stage *f = attn_find_stage("06m");
    attn_grad_check g;
    double tm[3] = {now_s(), 0, 0};
    attn_status st =
        o && dq && dk && dv && lse ? ATTN_OK : attn_fail(ATTN_ENOMEM, "no memory for the outputs");
    if (st == ATTN_OK) {
        const attn_args a = {.q = in->q, .k = in->k, .v = in->v, .o = o, .lse = lse, .gpus = 1};
        st = f->run(p, &a);
    }
    if (st == ATTN_OK) {
        memset(dq, 0xff, bytes), memset(dk, 0xff, bytes), memset(dv, 0xff, bytes);
        const attn_args a = {.q = in->q,
                             .k = in->k,
                             .v = in->v,
                             .o = o,
                             .lse = lse,
                             .gpus = 1,
                             .d_o = in->d_o,
                             .dq = dq,
                             .dk = dk,
                             .dv = dv};
        st = s->run(p, &a);
    }
    tm[1] = now_s();
    if (st == ATTN_OK) st = attn_check_grads(in, o, lse, dq, dk, dv, 1, &g);
    tm[2] = now_s();
    free(o), free(dq), free(dk), free(dv), free(lse);
    if (st != ATTN_OK) return fprintf(stderr, "mutant_check: %s\n", attn_last_error()), 2;
    printf("%s N=%lld%s: ", s->id, (long long)p->N, p->causal ? " causal" : "");
    for (int t = 0; t < 3; t++)
        printf("%s err/tol %.3g [n=%lld d=%lld]%s", attn_grad_name(t), g.t[t].worst_ratio,
               (long long)g.t[t].worst_n, (long long)g.t[t].worst_d, t < 2 ? ", " : "");
    printf(": %s (run %.1f s, check %.1f s)\n", g.pass ? "PASS" : "FAIL", tm[1] - tm[0], tm[2] - tm[1]);
    return g.pass ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *id = NULL;
    int causal = 0, init = ATTN_INIT_NORMAL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--causal"))
            causal = 1;
        else if (!v)
            return usage("an option without its value");
        else if (!strcmp(a, "--stage"))
            id = v, i++;
        else if (!strcmp(a, "--seq"))
            seq_n = strtoll(v, NULL, 10), i++;
        else if (!strcmp(a, "--rows") && !strcmp(v, "all"))
            rows_all = 1, i++;
        else if (!strcmp(a, "--rows") && !strncmp(v, "ends", 4)) {
            char *end = NULL;
            ends = v[4] == ':' ? strtoll(v + 5, &end, 10) : 256;
            if (v[4] && (v[4] != ':' || *end || ends < 1)) return usage("--rows ends:K needs K >= 1");
            rows_all = 0, i++;
        } else if (!strcmp(a, "--init")) {
            while (init <= ATTN_INIT_RISING && strcmp(v, attn_init_name((attn_init)init))) init++;
            if (init > ATTN_INIT_RISING) return usage("no such --init");
            i++;
        } else
            return usage(a);
    }
    const attn_stage *s = id ? attn_find_stage(id) : NULL;
    if (!s || s->on_gpu || !s->run || seq_n < 1)
        return usage("needs --stage of a CPU model and --seq N >= 1");
    attn_problem p = attn_problem_make(1, 1, seq_n, 64, causal);
    attn_inputs in;
    attn_status st = attn_inputs_random(&in, &p, 1, (attn_init)init);
    if (st == ATTN_OK && s->pass != ATTN_FORWARD) st = attn_inputs_random_grad(&in, 1);
    if (st != ATTN_OK) return fprintf(stderr, "mutant_check: %s\n", attn_last_error()), 2;
    const int rc = s->pass == ATTN_FORWARD ? forward(s, &in) : backward(s, &in);
    attn_inputs_free(&in);
    return rc;
}
