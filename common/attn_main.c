/*
 * attn_main.c: build/attn, the front end. Runs one stage on one problem, times it, reports
 * TFLOP/s and memory, and with --check compares it with the double reference.
 *
 * Exit status: 0 done (and PASS with --check); 1 the check FAILED, or the stage could not run
 * (no GPU, not enough memory, a CUDA error); 2 bad input (a flag, a value or an input file).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "npy.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

static void usage(FILE *f) {
    fprintf(f,
            "usage: build/attn --stage ID [options]\n"
            "       build/attn --list | --list-ids [gpu|cpu|all] | --list-dims ID | --help\n"
            "\n"
            "Runs one stage of the suite on one problem: the median time of R timed runs after\n"
            "warm-up (CUDA events on the GPU), TFLOP/s (4*B*H*N*N*D, half when causal), and the\n"
            "device memory the stage needs beyond Q, K, V, O and LSE.\n"
            "\n"
            "  --stage ID        stage to run: an id (01, 02, .., 03c for the CPU model of 03, ..),\n"
            "                    or its folder or name (see --list)\n"
            "  --batch B         batch size, 1..%d (default 2)\n"
            "  --heads H         heads, 1..%d (default 8)\n"
            "  --seq N           sequence length of queries and keys, 1..%d (default 1024)\n"
            "  --dim D           head dim, 1..%d, and one the stage supports (default 64)\n"
            "  --causal          query i sees keys 0..i only\n"
            "  --scale S         score scale, finite and non-zero (default 1/sqrt(D))\n"
            "  --dtype T         fp16 or bf16 (default fp16; bf16 where the stage supports it)\n"
            "  --seed N          seed of the random inputs, 0..2^63-1 (default 1)\n"
            "  --init KIND       random inputs: normal, large (scores in the thousands), first-max\n"
            "                    (each row's max on key 0), rising (max grows every key tile)\n"
            "  --repeat R        timed runs, 1..100000 (default 10 on the GPU, 1 on the CPU)\n"
            "  --warmup W        untimed runs first, 0..1000 (default 2 on the GPU, 0 on the CPU)\n"
            "  --check           compare with the double CPU reference: max abs error, relative L2\n"
            "                    error, worst element, LSE error, PASS or FAIL (exit 1). Problems\n"
            "                    over 2^31 reference multiply-adds are checked on every row of the\n"
            "                    first and last (b, h) plus --check-rows random rows\n"
            "  --check-rows K    random rows checked besides those, 0..1000000 (default 256)\n"
            "  --load DIR        read DIR/q.npy, DIR/k.npy, DIR/v.npy (float16 or float32,\n"
            "                    [B, H, N, D], C order, finite); the shape comes from the files\n"
            "  --save DIR        write DIR/o.npy (float16 [B, H, N, D]; with --dtype fp16 only) and\n"
            "                    DIR/lse.npy (float32 [B, H, N]) when the stage writes LSE. Files\n"
            "                    are written whole (to a .tmp, then renamed) or not at all\n"
            "  --list            the stages: id, folder, where it runs, head dims, dtypes, LSE, idea\n"
            "  --list-ids [W]    the stage ids, one per line (W: gpu, cpu or all; default all)\n"
            "  --list-dims ID    the test head dims the stage supports, one per line\n"
            "  --help            this text\n"
            "\n"
            "Exit status: 0 ok (PASS), 1 FAIL or the stage could not run (no GPU, out of memory,\n"
            "CUDA error), 2 bad input.\n"
            "Example: build/attn --stage 02 --batch 4 --heads 32 --seq 4096 --dim 64 --causal --check\n",
            ATTN_MAX_B, ATTN_MAX_H, ATTN_MAX_N, ATTN_MAX_D);
}

/* One line on stderr naming the argument and what is allowed; returns the usage exit status. */
static int bad(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static int bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "attn: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return EXIT_USAGE;
}

/* Whole-string integer in [lo, hi]; 0 on success. */
static int parse_i64(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "attn: %s must be an integer from %lld to %lld (got '%s')\n", flag, lo, hi,
                s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

static void list_stages(void) {
    printf("%-3s %-20s %-4s %-21s %-10s %-4s %-5s %s\n", "id", "folder", "runs", "dims", "dtypes", "LSE",
           "here", "idea");
    int unavailable = 0;
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        const int ok = attn_stage_available(s) == ATTN_OK;
        printf("%-3s %-20s %-4s %-21s %-10s %-4s %-5s %s\n", s->id, s->folder, s->on_gpu ? "gpu" : "cpu",
               s->dims_text, (s->dtypes & ATTN_DTYPE_BIT(ATTN_BF16)) ? "fp16,bf16" : "fp16",
               s->writes_lse ? "yes" : "no", ok ? "yes" : "no", s->idea);
        unavailable += !ok;
    }
    if (unavailable) printf("\nnot runnable here:\n");
    for (int i = 0; i < attn_num_stages; i++)
        if (attn_stage_available(&attn_stages[i]) != ATTN_OK) printf("  %s\n", attn_last_error());
}

static int dir_writable(const char *dir) {
    struct stat st;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, W_OK) == 0;
}

static void print_result(const attn_stage *s, const attn_problem *p, const attn_result *r) {
    printf("stage    %s %s (%s)\n", s->id, s->name, s->on_gpu ? attn_gpu_name() : "cpu");
    printf("shape    B=%lld H=%lld N=%lld D=%lld %s %s scale=%g\n", (long long)p->B, (long long)p->H,
           (long long)p->N, (long long)p->D, p->causal ? "causal" : "non-causal",
           attn_dtype_name(p->dtype), (double)p->scale);
    printf("time     %.4f ms (median of %d; min %.4f, max %.4f)\n", r->ms_median, r->runs, r->ms_min,
           r->ms_max);
    printf("speed    %.4g TFLOP/s\n", r->tflops);
    printf("memory   %.3f GiB beyond Q, K, V, O and LSE", (double)r->extra_bytes / 1073741824.0);
    if (s->on_gpu) printf(" (device free memory dropped by %.3f GiB)", (double)r->extra_measured / 1073741824.0);
    printf("\n");
}

static int print_check(const attn_stage *s, const attn_result *r) {
    const attn_check *c = &r->chk;
    printf("check    %lld rows against the double reference\n", (long long)c->rows_checked);
    printf("  max abs error   %.3e\n", c->max_abs_err);
    printf("  rel L2 error    %.3e\n", c->rel_l2);
    printf("  worst element   [b=%lld, h=%lld, n=%lld, d=%lld] got %.6g want %.6g tol %.3g (err/tol %.3f)\n",
           (long long)c->worst_b, (long long)c->worst_h, (long long)c->worst_n, (long long)c->worst_d,
           c->worst_got, c->worst_want, c->worst_tol, c->worst_ratio);
    if (c->lse_checked)
        printf("  LSE max error   %.3e (err/tol %.3f)\n", c->max_lse_err, c->lse_worst_ratio);
    else
        printf("  LSE             not written by stage %s\n", s->id);
    if (c->nonfinite) printf("  non-finite      %lld elements (never written, or NaN/inf)\n", (long long)c->nonfinite);
    if (r->identical >= 0)
        printf("  repeat          %s\n", r->identical ? "bit-identical to the first run" : "DIFFERS from the first run");
    printf("%s\n", c->pass ? "PASS" : "FAIL");
    return c->pass ? 0 : EXIT_FAIL;
}

static int save_outputs(const char *dir, const attn_stage *s, const attn_problem *p, const uint16_t *o,
                        const float *lse) {
    char path[4096];
    int64_t shape[4] = {p->B, p->H, p->N, p->D};
    snprintf(path, sizeof path, "%s/o.npy", dir);
    if (npy_write(path, NPY_F16, 4, shape, o) != ATTN_OK) {
        fprintf(stderr, "attn: --save: %s\n", attn_last_error());
        return EXIT_FAIL;
    }
    if (s->writes_lse) {
        snprintf(path, sizeof path, "%s/lse.npy", dir);
        if (npy_write(path, NPY_F32, 3, shape, lse) != ATTN_OK) {
            fprintf(stderr, "attn: --save: %s\n", attn_last_error());
            return EXIT_FAIL;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *stage_key = NULL, *load_dir = NULL, *save_dir = NULL;
    long long B = 2, H = 8, N = 1024, D = 64, seed = 1, repeat = -1, warmup = -1, check_rows = 256;
    int causal = 0, check = 0, have_scale = 0;
    double scale = 0.0;
    attn_dtype dtype = ATTN_F16;
    attn_init init = ATTN_INIT_NORMAL;

    if (argc == 1) {
        usage(stderr);
        return EXIT_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE()                                                                                \
    do {                                                                                            \
        if (!val) return bad("%s needs a value", a);                                          \
        i++;                                                                                        \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--list")) {
            list_stages();
            return 0;
        } else if (!strcmp(a, "--list-ids")) {
            const char *w = (val && val[0] != '-') ? argv[++i] : "all";
            if (strcmp(w, "gpu") && strcmp(w, "cpu") && strcmp(w, "all"))
                return bad("--list-ids takes gpu, cpu or all (got '%s')", w);
            for (int s = 0; s < attn_num_stages; s++)
                if (!strcmp(w, "all") || (!strcmp(w, "gpu")) == attn_stages[s].on_gpu)
                    printf("%s\n", attn_stages[s].id);
            return 0;
        } else if (!strcmp(a, "--list-dims")) {
            NEED_VALUE();
            const attn_stage *s = attn_find_stage(val);
            if (!s) return bad("--list-dims: unknown stage '%s' (see --list)", val);
            for (int d = 0; d < attn_num_test_dims; d++)
                if (s->supports_dim(attn_test_dims[d])) printf("%d\n", attn_test_dims[d]);
            return 0;
        } else if (!strcmp(a, "--stage")) {
            NEED_VALUE();
            stage_key = val;
        } else if (!strcmp(a, "--batch")) {
            NEED_VALUE();
            if (parse_i64("--batch", val, 1, ATTN_MAX_B, &B)) return EXIT_USAGE;
        } else if (!strcmp(a, "--heads")) {
            NEED_VALUE();
            if (parse_i64("--heads", val, 1, ATTN_MAX_H, &H)) return EXIT_USAGE;
        } else if (!strcmp(a, "--seq")) {
            NEED_VALUE();
            if (parse_i64("--seq", val, 1, ATTN_MAX_N, &N)) return EXIT_USAGE;
        } else if (!strcmp(a, "--dim")) {
            NEED_VALUE();
            if (parse_i64("--dim", val, 1, ATTN_MAX_D, &D)) return EXIT_USAGE;
        } else if (!strcmp(a, "--seed")) {
            NEED_VALUE();
            if (parse_i64("--seed", val, 0, LLONG_MAX, &seed)) return EXIT_USAGE;
        } else if (!strcmp(a, "--repeat")) {
            NEED_VALUE();
            if (parse_i64("--repeat", val, 1, 100000, &repeat)) return EXIT_USAGE;
        } else if (!strcmp(a, "--warmup")) {
            NEED_VALUE();
            if (parse_i64("--warmup", val, 0, 1000, &warmup)) return EXIT_USAGE;
        } else if (!strcmp(a, "--check-rows")) {
            NEED_VALUE();
            if (parse_i64("--check-rows", val, 0, 1000000, &check_rows)) return EXIT_USAGE;
        } else if (!strcmp(a, "--scale")) {
            NEED_VALUE();
            char *end = NULL;
            errno = 0;
            scale = strtod(val, &end);
            if (!*val || *end || errno == ERANGE || !isfinite(scale) || scale == 0.0 ||
                fabs(scale) > 3.4e38 || fabs(scale) < 1.2e-38)
                return bad("--scale must be a finite non-zero number within float range (got '%s')", val);
            have_scale = 1;
        } else if (!strcmp(a, "--dtype")) {
            NEED_VALUE();
            if (!strcmp(val, "fp16")) dtype = ATTN_F16;
            else if (!strcmp(val, "bf16")) dtype = ATTN_BF16;
            else return bad("--dtype must be fp16 or bf16 (got '%s')", val);
        } else if (!strcmp(a, "--init")) {
            NEED_VALUE();
            attn_init k;
            for (k = ATTN_INIT_NORMAL; k <= ATTN_INIT_RISING; k++)
                if (!strcmp(val, attn_init_name(k))) break;
            if (k > ATTN_INIT_RISING)
                return bad("--init must be normal, large, first-max or rising (got '%s')", val);
            init = k;
        } else if (!strcmp(a, "--causal")) {
            causal = 1;
        } else if (!strcmp(a, "--check")) {
            check = 1;
        } else if (!strcmp(a, "--load")) {
            NEED_VALUE();
            load_dir = val;
        } else if (!strcmp(a, "--save")) {
            NEED_VALUE();
            save_dir = val;
        } else {
            return bad("unknown argument '%s' (see --help)", a);
        }
#undef NEED_VALUE
    }
    if (!stage_key) return bad("--stage is required (one of the ids in --list)");
    const attn_stage *s = attn_find_stage(stage_key);
    if (!s) return bad("--stage: unknown stage '%s' (see --list for 01..%s)", stage_key,
                       attn_stages[attn_num_stages - 1].id);
    if (save_dir && !dir_writable(save_dir))
        return bad("--save: '%s' is not a writable directory", save_dir);
    if (save_dir && dtype != ATTN_F16)
        return bad("--save writes float16 files: use it with --dtype fp16");

    attn_problem p = attn_problem_make(B, H, N, D, causal);
    p.dtype = dtype;
    if (have_scale) p.scale = (float)scale;
    else if (load_dir) p.scale = 0.0f; /* 1/sqrt(D) once the files give D */
    attn_inputs in;
    attn_status st;
    if (load_dir) {
        st = attn_inputs_load(&in, load_dir, &p);
        if (st != ATTN_OK) {
            fprintf(stderr, "attn: --load: %s\n", attn_last_error());
            return st == ATTN_ENOMEM ? EXIT_FAIL : EXIT_USAGE;
        }
        p = in.p;
    }
    if ((st = attn_problem_validate(&p)) != ATTN_OK || (st = attn_stage_supports(s, &p)) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        if (load_dir) attn_inputs_free(&in);
        return EXIT_USAGE;
    }
    if (attn_stage_available(s) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        if (load_dir) attn_inputs_free(&in);
        return EXIT_FAIL;
    }
    if (!load_dir && (st = attn_inputs_random(&in, &p, (uint64_t)seed, init)) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        return EXIT_FAIL;
    }

    attn_run_opts opt = attn_run_opts_default();
    opt.repeat = repeat >= 0 ? (int)repeat : (s->on_gpu ? 10 : 1);
    opt.warmup = warmup >= 0 ? (int)warmup : (s->on_gpu ? 2 : 0);
    opt.check = check;
    opt.check_rows = check_rows;
    opt.seed = (uint64_t)seed;
    uint16_t *o = save_dir ? malloc((size_t)attn_qkv_elems(&p) * 2) : NULL;
    float *lse = save_dir ? malloc((size_t)attn_rows(&p) * 4) : NULL;
    if (save_dir && (!o || !lse)) {
        fprintf(stderr, "attn: cannot allocate host memory for the outputs to save\n");
        free(o), free(lse), attn_inputs_free(&in);
        return EXIT_FAIL;
    }
    attn_result r;
    st = attn_run(s, &in, &opt, &r, o, lse);
    int rc = 0;
    if (st != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        rc = (st == ATTN_EINVAL || st == ATTN_EUNSUPPORTED) ? EXIT_USAGE : EXIT_FAIL;
    } else {
        print_result(s, &p, &r);
        if (save_dir) rc = save_outputs(save_dir, s, &p, o, lse);
        if (r.checked && print_check(s, &r) != 0) rc = EXIT_FAIL;
    }
    free(o), free(lse);
    attn_inputs_free(&in);
    return rc;
}
