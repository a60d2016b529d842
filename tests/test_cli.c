/*
 * test_cli.c: build/attn as a user meets it. Every bad input gives exit status 2 and a one-line
 * message naming the argument; --save writes whole files or none; a .npy round trip through
 * --load and --save reproduces the reference.
 */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "01_naive_cpu/naive_cpu.h"
#include "half.h"
#include "npy.h"
#include "test_util.h"

static char out[65536];

static int attn(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s", attn_bin(), args);
    return run_cmd(cmd, out, sizeof out);
}

#define EXPECT_USAGE(args, needle)                                                                  \
    do {                                                                                            \
        int rc_ = attn(args);                                                                       \
        cr_assert_eq(rc_, 2, "'%s' exited %d, want 2; output: %s", args, rc_, out);                 \
        cr_assert(strstr(out, needle), "'%s': message lacks '%s': %s", args, needle, out);          \
    } while (0)

Test(cli, bad_flags_and_values_exit_2) {
    EXPECT_USAGE("--stage 99", "unknown stage '99'");
    EXPECT_USAGE("--stage nope", "unknown stage 'nope'");
    EXPECT_USAGE("--batch 2", "--stage is required");
    EXPECT_USAGE("--stage 01 --seq 0", "--seq must be an integer from 1 to");
    EXPECT_USAGE("--stage 01 --seq -5", "--seq must be an integer from 1 to");
    EXPECT_USAGE("--stage 01 --seq 12x", "--seq must be an integer from 1 to");
    EXPECT_USAGE("--stage 01 --seq 99999999999999999999", "--seq must be an integer from 1 to");
    EXPECT_USAGE("--stage 01 --batch 0", "--batch must be an integer from 1 to");
    EXPECT_USAGE("--stage 01 --batch 10000000", "--batch must be an integer from 1 to");
    EXPECT_USAGE("--stage 01 --heads abc", "--heads must be an integer from 1 to");
    EXPECT_USAGE("--stage 01 --dim 0", "--dim must be an integer from 1 to 256");
    EXPECT_USAGE("--stage 01 --dim 257", "--dim must be an integer from 1 to 256");
    EXPECT_USAGE("--stage 01 --scale nan", "--scale must be a finite non-zero number");
    EXPECT_USAGE("--stage 01 --scale 0", "--scale must be a finite non-zero number");
    EXPECT_USAGE("--stage 01 --dtype fp8", "--dtype must be fp16 or bf16");
    EXPECT_USAGE("--stage 01 --repeat 0", "--repeat must be an integer from 1 to");
    EXPECT_USAGE("--stage 01 --seq", "--seq needs a value");
    EXPECT_USAGE("--stage 01 --frobnicate", "unknown argument '--frobnicate'");
    EXPECT_USAGE("--stage 01 --save /nonexistent/dir", "--save: '/nonexistent/dir' is not a writable directory");
    EXPECT_USAGE("--stage 01 --batch 1048576 --heads 1048576 --seq 16777216 --dim 256", "too large");
}

Test(cli, unsupported_dim_and_dtype_exit_2) {
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        char args[256], needle[128];
        if (!s->supports_dim(80)) {
            snprintf(args, sizeof args, "--stage %s --seq 8 --dim 80", s->id);
            snprintf(needle, sizeof needle, "stage %s supports head dim %s (got 80)", s->id, s->dims_text);
            EXPECT_USAGE(args, needle);
        }
        if (!(s->dtypes & ATTN_DTYPE_BIT(ATTN_BF16))) {
            snprintf(args, sizeof args, "--stage %s --seq 8 --dim 64 --dtype bf16", s->id);
            snprintf(needle, sizeof needle, "stage %s supports dtype fp16 (got bf16)", s->id);
            EXPECT_USAGE(args, needle);
        }
    }
}

Test(cli, help_and_list) {
    cr_assert_eq(attn("--help"), 0);
    cr_assert(strstr(out, "--stage ID") && strstr(out, "--load DIR") && strstr(out, "--save DIR"));
    cr_assert_eq(attn("--list"), 0);
    for (int i = 0; i < attn_num_stages; i++) cr_assert(strstr(out, attn_stages[i].folder), "%s", out);
    cr_assert_eq(attn("--list-ids gpu"), 0);
    cr_assert(!strstr(out, "01"), "stage 01 runs on the CPU: %s", out);
    cr_assert_eq(attn("--list-dims 01"), 0);
    cr_assert(strstr(out, "1\n") && strstr(out, "256\n"), "%s", out);
}

Test(cli, gpu_stage_runs_or_says_why_not) {
    const attn_stage *s = attn_find_stage("02");
    if (attn_stage_available(s) == ATTN_OK) {
        /* a GPU is here: the GPU stage runs and passes from the front end */
        cr_assert_eq(attn("--stage 02 --batch 2 --heads 3 --seq 77 --dim 40 --causal --check"), 0, "%s", out);
        cr_assert(strstr(out, "PASS") && strstr(out, "TFLOP/s"), "%s", out);
    } else {
        /* no GPU or no CUDA build: the GPU stage says so plainly and exits 1 */
        cr_assert_eq(attn("--stage 02 --seq 16 --dim 8"), 1, "%s", out);
        cr_assert(strstr(out, "stage 02") && (strstr(out, "GPU") || strstr(out, "CUDA")), "%s", out);
    }
    /* the CPU stage runs either way */
    cr_assert_eq(attn("--stage 01 --seq 16 --dim 8 --check"), 0, "%s", out);
    cr_assert(strstr(out, "PASS"), "%s", out);
}

/* A GPU older than a stage needs gets one line naming both, and exit 1: stage 06 (sm_80 and newer)
 * on what answers as a V100 (ATTN_FAKE_SM=70), while the CUDA-core stages 02-05 still run there. */
Test(cli, older_gpu_is_told_what_a_stage_needs) {
    const attn_stage *s2 = attn_find_stage("02"), *s6 = attn_find_stage("06");
    SKIP_UNLESS_RUNNABLE(s6);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "ATTN_FAKE_SM=%d %s --stage 06 --seq 16 --dim 64", s2->min_sm, attn_bin());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 1, "%s", out);
    char needle[64];
    snprintf(needle, sizeof needle, "is sm_%d", s2->min_sm);
    cr_assert(strstr(out, "stage 06 needs sm_80 or newer") && strstr(out, needle), "%s", out);
    snprintf(cmd, sizeof cmd, "ATTN_FAKE_SM=%d %s --stage 04 --seq 77 --dim 64 --causal --check", s2->min_sm,
             attn_bin());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "PASS"), "%s", out);
}

/* ---- .npy in and out ---------------------------------------------------------------------- */

static void make_dir(char *dir, size_t cap) {
    snprintf(dir, cap, "/tmp/attn-cli-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void write_inputs(const char *dir, npy_dtype t, const int64_t *shape_q, const int64_t *shape_kv,
                         float poison_value) {
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        const int64_t *shape = i == 0 ? shape_q : shape_kv;
        int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
        void *buf = malloc((size_t)n * 4);
        for (int64_t e = 0; e < n; e++) {
            float f = (float)sin(0.37 * (double)e + i) * 1.5f;
            if (e == n / 2 && i == 1) f = f + poison_value;
            if (t == NPY_F16) ((uint16_t *)buf)[e] = attn_f2h(f);
            else ((float *)buf)[e] = f;
        }
        char path[512];
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[i]);
        cr_assert_eq(npy_write(path, t, 4, shape, buf), ATTN_OK, "%s", attn_last_error());
        free(buf);
    }
}

Test(cli, npy_round_trip_matches_reference) {
    char in_dir[64], out_dir[64], args[512];
    make_dir(in_dir, sizeof in_dir);
    make_dir(out_dir, sizeof out_dir);
    const int64_t shape[4] = {2, 3, 37, 24};
    for (int t = NPY_F16; t <= NPY_F32; t++) {
        write_inputs(in_dir, (npy_dtype)t, shape, shape, 0.0f);
        snprintf(args, sizeof args, "--stage 01 --causal --load %s --save %s --check", in_dir, out_dir);
        cr_assert_eq(attn(args), 0, "%s", out);
        cr_assert(strstr(out, "B=2 H=3 N=37 D=24") && strstr(out, "PASS"), "shape comes from the files: %s", out);

        attn_problem p = attn_problem_make(2, 3, 37, 24, 1);
        attn_inputs in;
        cr_assert_eq(attn_inputs_load(&in, in_dir, &p), ATTN_OK, "%s", attn_last_error());
        char path[512];
        npy_array o, lse;
        snprintf(path, sizeof path, "%s/o.npy", out_dir);
        cr_assert_eq(npy_read(path, &o), ATTN_OK, "%s", attn_last_error());
        snprintf(path, sizeof path, "%s/lse.npy", out_dir);
        cr_assert_eq(npy_read(path, &lse), ATTN_OK, "%s", attn_last_error());
        cr_assert(o.dtype == NPY_F16 && o.ndim == 4 && o.shape[2] == 37 && o.shape[3] == 24);
        cr_assert(lse.dtype == NPY_F32 && lse.ndim == 3 && lse.shape[0] == 2 && lse.shape[2] == 37);
        int64_t rows[3] = {0, 40, 2 * 3 * 37 - 1};
        double ro[3 * 24], rl[3];
        cr_assert_eq(naive_cpu_rows(&in.p, in.q, in.k, in.v, rows, 3, ro, rl), ATTN_OK);
        for (int r = 0; r < 3; r++) {
            for (int d = 0; d < 24; d++) {
                float got = attn_h2f(((uint16_t *)o.data)[rows[r] * 24 + d]);
                cr_assert(fabs(got - ro[r * 24 + d]) <= 0x1p-11 * fabs(ro[r * 24 + d]) + 1e-7,
                          "o[%lld,%d] %g vs %g", (long long)rows[r], d, (double)got, ro[r * 24 + d]);
            }
            cr_assert(fabs(((float *)lse.data)[rows[r]] - rl[r]) < 1e-5 * (1 + fabs(rl[r])));
        }
        npy_free(&o), npy_free(&lse);
        attn_inputs_free(&in);
    }
}

static int file_exists(const char *dir, const char *name) {
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

Test(cli, bad_npy_inputs_exit_2_and_write_nothing) {
    char dir[64], out_dir[64], args[512], path[512];
    make_dir(dir, sizeof dir);
    make_dir(out_dir, sizeof out_dir);
    const int64_t shape[4] = {1, 2, 9, 8}, other[4] = {1, 2, 10, 8};

    snprintf(args, sizeof args, "--stage 01 --load %s --save %s", dir, out_dir);
    EXPECT_USAGE(args, "q.npy: cannot open"); /* missing files */

    write_inputs(dir, NPY_F32, shape, other, 0.0f); /* K, V of another shape */
    EXPECT_USAGE(args, "differs from");

    write_inputs(dir, NPY_F32, shape, shape, NAN); /* a NaN in K */
    EXPECT_USAGE(args, "k.npy: element");
    cr_assert(strstr(out, "NaN"), "%s", out);
    write_inputs(dir, NPY_F32, shape, shape, INFINITY);
    EXPECT_USAGE(args, "infinite");
    write_inputs(dir, NPY_F32, shape, shape, 1e6f); /* finite in f32, overflows fp16 */
    EXPECT_USAGE(args, "overflows fp16");

    write_inputs(dir, NPY_F16, shape, shape, 0.0f);
    snprintf(path, sizeof path, "%s/v.npy", dir); /* truncated */
    cr_assert_eq(truncate(path, 150), 0);
    EXPECT_USAGE(args, "v.npy");
    cr_assert(strstr(out, "truncated"), "%s", out);

    FILE *f = fopen(path, "wb"); /* not .npy at all */
    fputs("this is a text file, not an array\n", f);
    fclose(f);
    EXPECT_USAGE(args, "v.npy");

    const int64_t three[3] = {2, 9, 8}; /* 3-D */
    float buf[2 * 9 * 8] = {0};
    cr_assert_eq(npy_write(path, NPY_F32, 3, three, buf), ATTN_OK);
    EXPECT_USAGE(args, "4 dimensions");

    int64_t shape_f64[4] = {1, 1, 2, 2};
    snprintf(path, sizeof path, "%s/q.npy", dir);
    f = fopen(path, "wb"); /* float64: another dtype */
    const char hdr[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 2, 2), }";
    fwrite(hdr, 1, sizeof hdr - 1, f);
    for (int i = sizeof hdr - 1; i < 127; i++) fputc(' ', f);
    fputc('\n', f);
    double d8[4] = {1, 2, 3, 4};
    fwrite(d8, 8, 4, f);
    fclose(f);
    (void)shape_f64;
    EXPECT_USAGE(args, "q.npy");
    cr_assert(strstr(out, "f8"), "the message names the dtype: %s", out);

    cr_assert(!file_exists(out_dir, "o.npy") && !file_exists(out_dir, "lse.npy") &&
              !file_exists(out_dir, "o.npy.tmp"), "nothing may be written for bad input");
}
