/*
 * test_cli.c: build/attn as a user meets it. Every bad input gives exit status 2 and a one-line
 * message naming the argument; --save writes whole files or none; a .npy round trip through
 * --load and --save reproduces the reference.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "01_naive_cpu/naive_cpu.h"
#include "half.h"
#include "npy.h"
#include "test_util.h"

static char out[65536];

static int attn(const char *args) { return run_bin(attn_bin(), args, out, sizeof out); }

#define EXPECT_USAGE(args, needle) EXPECT_REFUSED(attn, out, args, needle)

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
    EXPECT_USAGE("--stage 01 --scale 1e-39",
                 "--scale must be a finite non-zero number in float32's normal range");
    EXPECT_USAGE("--stage 01 --scale 4e38",
                 "--scale must be a finite non-zero number in float32's normal range");
    EXPECT_USAGE("--stage 01 --load ''", "--load needs a directory (got an empty name)"); /* not "/q.npy" */
    EXPECT_USAGE("--stage 01 --dtype fp8", "--dtype must be fp16 or bf16");
    EXPECT_USAGE("--stage 01 --repeat 0", "--repeat must be an integer from 1 to");
    EXPECT_USAGE("--stage 01 --seq", "--seq needs a value");
    EXPECT_USAGE("--stage 01 --frobnicate", "unknown argument '--frobnicate'");
    EXPECT_USAGE("--stage 01 --seq=64",
                 "unknown argument '--seq=64': write the value as the next argument, '--seq 64'");
    EXPECT_USAGE("--stage=01", "write the value as the next argument, '--stage 01'");
    EXPECT_USAGE("--stage 01 --causal=1", "unknown argument '--causal=1' (see --help)");
    EXPECT_USAGE("--stage 01 --save /nonexistent/dir",
                 "--save: '/nonexistent/dir' is not a writable directory");
    EXPECT_USAGE("--stage 01 --batch 1048576 --heads 1048576 --seq 16777216 --dim 256", "too large");
}

/* Integers are digits, with an optional '-' that can only give the range error: strtoll alone took
 * " 12" and "+5" (not "12 "). A flag given twice is refused: the second value silently won. */
Test(cli, numbers_are_strict_and_flags_come_once) {
    EXPECT_USAGE("--stage 01 --seq ' 12'", "--seq must be an integer from 1 to 16777216 (got ' 12')");
    EXPECT_USAGE("--stage 01 --seq +5", "--seq must be an integer from 1 to 16777216 (got '+5')");
    EXPECT_USAGE("--stage 01 --seq '12 '", "--seq must be an integer from 1 to 16777216 (got '12 ')");
    EXPECT_USAGE("--stage 01 --seq ''", "--seq must be an integer from 1 to 16777216 (got '')");
    EXPECT_USAGE("--stage 01 --seq -", "--seq must be an integer from 1 to 16777216 (got '-')");
    EXPECT_USAGE("--stage 01 --seed 0x10", "--seed must be an integer from 0 to");
    EXPECT_USAGE("--stage 01 --seed ''", "--seed must be an integer from 0 to 9223372036854775807 (got '')");
    EXPECT_USAGE("--stage 01 --seq 8 --scale 1 --scale 2", "--scale given twice");
    EXPECT_USAGE("--stage 01 --seq 8 --stage 02", "--stage given twice");
    EXPECT_USAGE("--stage 01 --causal --seq 8 --causal", "--causal given twice");
    cr_assert_eq(attn("--stage 01 --seq 12 --dim 8 --seed 3"), 0, "%s", out);
}

/* --scale is read as strictly as the integers: strtod alone took " 0.5" where --batch " 4" was
 * refused, and "+0.5", "0x1p-3" and "0.5 " with its end pointer unchecked. Each refusal names the flag,
 * what it takes and the value; the decimal forms still run. */
Test(cli, scale_is_as_strict_as_the_integers) {
    static const char *const refused[] = {" 0.5", "+0.5", "0.5 ", "0x1p-3", "inf",
                                          "1e",   ".",    "-",    "1e5x",   ""};
    for (unsigned i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char args[128], needle[64];
        snprintf(args, sizeof args, "--stage 01 --seq 8 --dim 8 --scale '%s'", refused[i]);
        snprintf(needle, sizeof needle, "(got '%s')", refused[i]);
        EXPECT_USAGE(args, "--scale must be a finite non-zero number in float32's normal range");
        cr_assert(strstr(out, "written in decimal") && strstr(out, needle), "%s: %s", args, out);
    }
    static const char *const taken[] = {"-0.5", ".5", "5.", "1e-1", "1E+0", "0.125"};
    for (unsigned i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        char args[128];
        snprintf(args, sizeof args, "--stage 01 --seq 8 --dim 8 --check --scale %s", taken[i]);
        cr_assert_eq(attn(args), 0, "%s: %s", args, out);
        cr_assert(strstr(out, "PASS"), "%s: %s", args, out);
    }
}

/* The count flags' ranges, at both ends: the largest value is accepted (the refusal that follows is
 * the later rule's, so nothing runs) and one past it is refused, naming the range. */
Test(cli, count_flags_take_their_whole_range) {
    static const struct {
        const char *flag;
        long long lo, hi;
    } f[] = {{"--repeat", 1, 100000}, {"--warmup", 0, 1000}, {"--check-rows", 0, 1000000}};
    for (int i = 0; i < 3; i++) {
        char args[128], needle[128];
        for (int end = 0; end < 2; end++) {
            const char *extra = strcmp(f[i].flag, "--check-rows") ? "--check-rows 5" : "";
            snprintf(args, sizeof args, "--stage 01 --seq 8 --dim 8 %s %lld %s", f[i].flag,
                     end ? f[i].hi : f[i].lo, extra);
            EXPECT_USAGE(args, "--check-rows needs --check"); /* parsed, then refused by the later rule */
        }
        snprintf(args, sizeof args, "--stage 01 --seq 8 --dim 8 %s %lld", f[i].flag, f[i].hi + 1);
        snprintf(needle, sizeof needle, "%s must be an integer from %lld to %lld (got '%lld')", f[i].flag,
                 f[i].lo, f[i].hi, f[i].hi + 1);
        EXPECT_USAGE(args, needle);
    }
    cr_assert_eq(attn("--stage 01 --seq 8 --dim 8 --check --check-rows 0"), 0, "%s", out);
    cr_assert(strstr(out, "PASS"), "%s", out);
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
    /* the text names the binary that ran (build/attn or build/nocuda/attn), and its example runs there */
    char usage_line[512], example[512];
    snprintf(usage_line, sizeof usage_line, "usage: %s --stage ID", attn_bin());
    cr_assert(strstr(out, usage_line), "%s", out);
    snprintf(example, sizeof example, "Example: %s ", attn_bin());
    const char *ex = strstr(out, example);
    cr_assert_not_null(ex, "%s", out);
    snprintf(example, sizeof example, "%.*s", (int)strcspn(ex + strlen(example), "\n"), ex + strlen(example));
    char key[16] = "";
    cr_assert_eq(sscanf(example, "--stage %15s", key), 1, "%s", example);
    if (attn_stage_available(attn_find_stage(key)) == ATTN_OK) {
        cr_assert_eq(attn(example), 0, "the example '%s': %s", example, out);
        cr_assert(strstr(out, "PASS"), "%s", out);
    }
    cr_assert_eq(attn("--list"), 0);
    for (int i = 0; i < attn_num_stages; i++) cr_assert(strstr(out, attn_stages[i].folder), "%s", out);
    cr_assert_eq(attn("--list-ids gpu"), 0);
    cr_assert(!strstr(out, "01"), "stage 01 runs on the CPU: %s", out);
    cr_assert_eq(attn("--list-dims 01"), 0);
    cr_assert(strstr(out, "1\n") && strstr(out, "256\n"), "%s", out);
}

/* A list flag prints and exits: whatever else is on the line would be ignored, so it is refused, in
 * either order (before, "--list --bogus" and "--stage 01 --check --list" exited 0). --help takes all. */
Test(cli, list_flags_stand_alone) {
    EXPECT_USAGE("--list --bogus", "--list prints a list and exits: give it alone (got '--bogus' too)");
    EXPECT_USAGE("--stage 01 --check --list",
                 "--list prints a list and exits: give it alone (got '--stage' too)");
    EXPECT_USAGE("--list-ids cpu --seq -5",
                 "--list-ids prints a list and exits: give it alone (got '--seq' too)");
    EXPECT_USAGE("--list-dims 01 --dim 64",
                 "--list-dims prints a list and exits: give it alone (got '--dim' too)");
    EXPECT_USAGE("--list-ids --check",
                 "--list-ids prints a list and exits: give it alone (got '--check' too)");
    cr_assert_eq(attn("--list-ids cpu"), 0, "%s", out);
    cr_assert(strstr(out, "01\n"), "%s", out);
    cr_assert_eq(attn("--list-ids"), 0, "%s", out);
    cr_assert_eq(attn("--stage 01 --help"), 0, "%s", out);
}

/* make sanitize's lists (tests/sanitize.sh): commas or spaces name the same runs, as ATTN_TEST_STAGES
 * does; a list of separators only, or one that leaves nothing to run, fails instead of a PASS over no
 * run. The plan needs no GPU (the registry's ids and dims); compute runs /bin/true as the sanitizer. */
Test(cli, sanitize_lists_take_commas_and_never_pass_empty) {
    static char spaced[8192];
    char cmd[1024], dir[] = "/tmp/attn-sanitize-test.XXXXXX";
    snprintf(cmd, sizeof cmd,
             "SANITIZE_STAGES='06 07' SANITIZE_DIMS='64 128' bash tests/sanitize.sh plan %s 2>&1",
             attn_bin());
    cr_assert_eq(run_cmd(cmd, spaced, sizeof spaced), 0, "%s", spaced);
    cr_assert(strstr(spaced, "memcheck 06 128\n") && strstr(spaced, "synccheck 07 64\n"), "%s", spaced);
    snprintf(cmd, sizeof cmd,
             "SANITIZE_STAGES=06,07 SANITIZE_DIMS=64,,128 bash tests/sanitize.sh plan %s 2>&1", attn_bin());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_str_eq(out, spaced);
    snprintf(cmd, sizeof cmd, "SANITIZE_STAGES=, bash tests/sanitize.sh plan %s 2>&1", attn_bin());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "SANITIZE_STAGES=',' names no stage"), "%s", out);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "SANITIZE_DIR=%s COMPUTE_SANITIZER=/bin/true SANITIZE_STAGES=06 SANITIZE_TOOLS=, "
             "bash tests/sanitize.sh compute %s 2>&1; echo \"exit $?\"; rm -rf %s",
             dir, attn_bin(), dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "FAIL: no run") && strstr(out, "exit 1") && !strstr(out, "PASS"), "%s", out);
}

/* make sanitize's resume (tests/sanitize.sh parallel): resuming a finished set runs nothing and passes
 * (xargs with no input once started one process with no triple, which ran every stage under a tool
 * named "sh": "50 of 36 processes, 520 failed runs" on the H200); the table counts only the plan's
 * triples, not folders left by a wider plan; an unknown tool is refused. /bin/true as the sanitizer. */
Test(cli, sanitize_resume_counts_the_plan_only) {
    char cmd[1024], dir[] = "/tmp/attn-sanitize-resume.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    const char *env = "HAVE_CUDA=1 COMPUTE_SANITIZER=/bin/true SANITIZE_DIMS=64 SANITIZE_SEQS=17 "
                      "SANITIZE_DTYPES=fp16 SANITIZE_TOOLS=memcheck,racecheck SANITIZE_JOBS=2";
    snprintf(cmd, sizeof cmd,
             "%s SANITIZE_OUT=%s SANITIZE_STAGES=06,07 bash tests/sanitize.sh parallel %s 2>&1", env, dir,
             attn_bin());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "(4 to run)") && strstr(out, "4 of 4 processes finished, 8 runs, 0 errors"), "%s",
              out);
    snprintf(
        cmd, sizeof cmd,
        "%s SANITIZE_OUT=%s SANITIZE_RESUME=1 SANITIZE_STAGES=06,07 bash tests/sanitize.sh parallel %s 2>&1",
        env, dir, attn_bin());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "(0 to run)") &&
                  strstr(out, "4 of 4 processes finished, 8 runs, 0 errors, 0 failed"),
              "%s", out);
    snprintf(
        cmd, sizeof cmd,
        "%s SANITIZE_OUT=%s SANITIZE_RESUME=1 SANITIZE_STAGES=06 bash tests/sanitize.sh parallel %s 2>&1",
        env, dir, attn_bin());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "2 of 2 processes finished, 4 runs") && !strstr(out, "racecheck  07"), "%s", out);
    snprintf(cmd, sizeof cmd,
             "HAVE_CUDA=1 COMPUTE_SANITIZER=/bin/true SANITIZE_OUT=%s SANITIZE_STAGES=06 SANITIZE_TOOLS=sh "
             "bash tests/sanitize.sh parallel %s 2>&1; rc=$?; rm -rf %s; exit $rc",
             dir, attn_bin(), dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "SANITIZE_TOOLS: 'sh' is not one of memcheck"), "%s", out);
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

/* Stage ids take either case of their letter; an unknown one gets every id; a GPU stage that cannot
 * run here names its CPU model where it has one. */
Test(cli, stage_ids_in_either_case_and_the_cpu_model_named) {
    cr_assert_eq(attn("--stage 04M --seq 8 --dim 32 --check"), 0, "%s", out);
    cr_assert(strstr(out, "04m") && strstr(out, "PASS"), "%s", out);
    EXPECT_USAGE("--stage 04x", "unknown stage '04x'; the stages are 01, ");
    for (int i = 0; i < attn_num_stages; i++)
        cr_assert(strstr(out, attn_stages[i].id), "%s: %s", attn_stages[i].id, out);
    const attn_stage *s4 = attn_find_stage("04");
    cr_assert_not_null(s4);
    cr_assert_eq(attn_cpu_model_of(s4), attn_find_stage("04m"));
    cr_assert_null(attn_cpu_model_of(attn_find_stage("07")), "stage 07 has no CPU model");
    cr_assert_null(attn_cpu_model_of(attn_find_stage("04m")), "a CPU model has no CPU model");
    if (attn_stage_available(s4) != ATTN_OK) {
        cr_assert_eq(attn("--stage 04 --seq 8 --dim 32"), 1, "%s", out);
        cr_assert(strstr(out, "its CPU model runs here: --stage 04m"), "%s", out);
    }
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
            if (t == NPY_F16)
                ((uint16_t *)buf)[e] = attn_f2h(f);
            else
                ((float *)buf)[e] = f;
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
        cr_assert(strstr(out, "B=2 H=3 N=37 D=24") && strstr(out, "PASS"), "shape comes from the files: %s",
                  out);
        /* float32 files are rounded to fp16, and the run says so; fp16 files are taken as they are */
        cr_assert((strstr(out, "q.npy, k.npy, v.npy held float32 values, rounded to fp16") != NULL) ==
                      (t == NPY_F32),
                  "%s", out);

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

/* --save-inputs writes the run's own random inputs beside its results: bit for bit what the harness
 * generates for that seed, a folder that --load takes back, and a rerun from it gives the same O. */
Test(cli, save_inputs_writes_a_folder_that_load_reads) {
    char dir[64], args[512], path[512];
    make_dir(dir, sizeof dir);
    snprintf(args, sizeof args,
             "--stage 01 --batch 1 --heads 2 --seq 77 --dim 40 --seed 5 --causal --save %s "
             "--save-inputs",
             dir);
    cr_assert_eq(attn(args), 0, "%s", out);
    attn_problem p = attn_problem_make(1, 2, 77, 40, 1);
    attn_inputs want;
    cr_assert_eq(attn_inputs_random(&want, &p, 5, ATTN_INIT_NORMAL), ATTN_OK);
    const uint16_t *w[3] = {want.q, want.k, want.v};
    static const char *const names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        npy_array a;
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[i]);
        cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
        cr_assert(a.dtype == NPY_F16 && a.ndim == 4 && a.shape[0] == 1 && a.shape[1] == 2 &&
                      a.shape[2] == 77 && a.shape[3] == 40,
                  "%s.npy: dtype %d, %d dims", names[i], (int)a.dtype, a.ndim);
        cr_assert(!memcmp(a.data, w[i], (size_t)attn_qkv_elems(&p) * 2),
                  "%s.npy differs from the run's input", names[i]);
        npy_free(&a);
    }
    attn_inputs_free(&want);
    npy_array o1, o2;
    snprintf(path, sizeof path, "%s/o.npy", dir);
    cr_assert_eq(npy_read(path, &o1), ATTN_OK, "%s", attn_last_error());
    snprintf(args, sizeof args, "--stage 01 --causal --load %s --save %s --check", dir, dir);
    cr_assert_eq(attn(args), 0, "%s", out);
    cr_assert(strstr(out, "B=1 H=2 N=77 D=40") && strstr(out, "PASS"), "%s", out);
    cr_assert_eq(npy_read(path, &o2), ATTN_OK, "%s", attn_last_error());
    cr_assert(!memcmp(o1.data, o2.data, (size_t)(2 * 77 * 40) * 2),
              "the rerun from the saved inputs differs");
    npy_free(&o1), npy_free(&o2);
    EXPECT_USAGE("--stage 01 --save-inputs", "--save-inputs needs --save DIR");
    snprintf(args, sizeof args, "--stage 01 --save %s --save-inputs --save-inputs", dir);
    EXPECT_USAGE(args, "--save-inputs given twice");
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_assert_eq(system(args), 0);
}

Test(cli, bad_npy_inputs_exit_2_and_write_nothing) {
    char dir[64], out_dir[64], args[512], path[512];
    make_dir(dir, sizeof dir);
    make_dir(out_dir, sizeof out_dir);
    const int64_t shape[4] = {1, 2, 9, 8};

    snprintf(args, sizeof args, "--stage 01 --load %s --save %s", dir, out_dir);
    EXPECT_USAGE(args, "q.npy: cannot open"); /* missing files */

    /* K, V of another shape: another B or D is refused as such; H_kv = 3 does not divide H = 2; N_k = 10
     * is a problem of its own, which stage 01 (H_kv == H, N_k == N only) refuses naming the field */
    static const char *const why[4] = {"differs from", "kv heads must divide heads = 2", "N_k == N only",
                                       "differs from"};
    for (int d = 0; d < 4; d++) {
        int64_t other[4] = {1, 2, 9, 8};
        other[d]++;
        write_inputs(dir, NPY_F32, shape, other, 0.0f);
        EXPECT_USAGE(args, why[d]);
    }

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
    const char hdr[] =
        "\x93NUMPY\x01\x00\x76\x00{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 2, 2), }";
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
                  !file_exists(out_dir, "o.npy.tmp"),
              "nothing may be written for bad input");
}

/* ---- reliability: what a hostile user found (issue 15) ------------------------------------ */

static void write_f16(const char *dir, const char *name, const int64_t *shape) {
    int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    uint16_t *buf = calloc((size_t)n, 2);
    for (int64_t e = 0; e < n; e++) buf[e] = attn_f2h((float)sin(0.7 * (double)e));
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cr_assert_eq(npy_write(path, NPY_F16, 4, shape, buf), ATTN_OK, "%s", attn_last_error());
    free(buf);
}

/* An out-of-range shape in the files is reported with its reason (it used to print "q.npy: q.npy: "
 * and nothing else: the reason was formatted into the buffer it was read from). */
Test(cli, load_shape_errors_keep_their_reason) {
    char dir[64], args[512];
    make_dir(dir, sizeof dir);
    const int64_t shape[4] = {1, 1, 4, 300};
    write_f16(dir, "q.npy", shape), write_f16(dir, "k.npy", shape), write_f16(dir, "v.npy", shape);
    snprintf(args, sizeof args, "--stage 01 --load %s", dir);
    EXPECT_USAGE(args, "q.npy: dim must be 1..256 (got 300)");
}

Test(cli, flags_that_would_be_ignored_are_refused) {
    char dir[64], args[512];
    make_dir(dir, sizeof dir);
    static const char *shape_flags[4] = {"--seq 8", "--batch 2", "--heads 3", "--dim 16"};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "--stage 01 --load %s %s", dir, shape_flags[i]);
        char needle[64];
        snprintf(needle, sizeof needle, "%.*s cannot be used with --load", (int)strcspn(shape_flags[i], " "),
                 shape_flags[i]);
        EXPECT_USAGE(args, needle);
    }
    snprintf(args, sizeof args, "--stage 01 --init large --load %s", dir);
    EXPECT_USAGE(args, "--init cannot be used with --load");
    EXPECT_USAGE("--stage 01 --seq 8 --dim 8 --check-rows 5", "--check-rows needs --check");
    /* --seed makes the random inputs, and with --check picks the rows it samples */
    const int64_t shape[4] = {1, 2, 9, 8};
    write_f16(dir, "q.npy", shape), write_f16(dir, "k.npy", shape), write_f16(dir, "v.npy", shape);
    snprintf(args, sizeof args, "--stage 01 --seed 5 --load %s", dir);
    EXPECT_USAGE(args, "--seed cannot be used with --load without --check");
    snprintf(args, sizeof args, "--stage 01 --seed 5 --load %s --check", dir);
    cr_assert_eq(attn(args), 0, "%s", out);
}

/* float16 files loaded with --dtype bf16 are rounded, and the run says so, as for float32 files. */
Test(cli, load_notes_every_rounding) {
    char dir[64], args[512];
    make_dir(dir, sizeof dir);
    const int64_t shape[4] = {1, 2, 9, 8};
    write_inputs(dir, NPY_F16, shape, shape, 0.0f);
    snprintf(args, sizeof args, "--stage 01 --dtype bf16 --load %s --check", dir);
    cr_assert_eq(attn(args), 0, "%s", out);
    cr_assert(strstr(out, "attn: note: q.npy, k.npy, v.npy held float16 values, rounded to bf16"), "%s", out);
    snprintf(args, sizeof args, "%s/k.npy", dir);
    float f[2 * 9 * 8];
    for (int e = 0; e < 2 * 9 * 8; e++) f[e] = 0.25f * (float)(e % 5);
    cr_assert_eq(npy_write(args, NPY_F32, 4, shape, f), ATTN_OK, "%s", attn_last_error());
    snprintf(args, sizeof args, "--stage 01 --dtype bf16 --load %s", dir);
    cr_assert_eq(attn(args), 0, "%s", out);
    cr_assert(strstr(out, "note: k.npy held float32 values, rounded to bf16") &&
                  strstr(out, "note: q.npy, v.npy held float16 values, rounded to bf16"),
              "%s", out);
    snprintf(args, sizeof args, "--stage 01 --load %s", dir); /* fp16 files read as fp16: no note for them */
    cr_assert_eq(attn(args), 0, "%s", out);
    cr_assert(!strstr(out, "float16 values") && strstr(out, "k.npy held float32 values, rounded to fp16"),
              "%s", out);
}

/* A misspelt exercise used to print "0 of 0 exercises" and exit 0. */
Test(cli, workshop_refuses_an_unknown_exercise) {
    int rc = run_cmd("bash workshop/run.sh cpu workshop/04m-no-alpah.patch", out, sizeof out);
    cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "no exercise 'workshop/04m-no-alpah.patch'"), "%s", out);
    rc = run_cmd("bash workshop/run.sh cpu README.md", out, sizeof out);
    cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "'README.md' is not an exercise"), "%s", out);
    rc = run_cmd("bash workshop/run.sh gpu workshop/04m-no-alpha.patch", out, sizeof out);
    cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "is a cpu exercise"), "%s", out);
}

/* The project inside another git work tree that ignores it (a tarball unpacked under a repository's
 * ignored folder): the workshop runner asked git for the enclosing repository's files, got none of the
 * project's, and every exercise said NOT CAUGHT (issue 58). From such a copy, with this build's CPU
 * objects, one CPU exercise is caught. Skipped without build/nocuda (the CPU build the runner uses). */
Test(cli, workshop_runs_inside_another_git_work_tree) {
    struct stat sb;
    if (stat("build/nocuda/attn", &sb) != 0) cr_skip_test("build/nocuda/attn is not built (make NO_CUDA=1)");
    if (run_cmd("command -v git", out, sizeof out) != 0) cr_skip_test("git not found");
    char top[] = "/tmp/attn-outer.XXXXXX", cmd[4096];
    cr_assert_not_null(mkdtemp(top));
    snprintf(cmd, sizeof cmd,
             "set -e; git -C %s init -q; echo proj/ >%s/.gitignore; mkdir -p %s/proj/build/nocuda; "
             "tar --exclude=./build --exclude=./.git -cf - . | tar -C %s/proj -xf -; "
             "cp -a build/nocuda/obj build/nocuda/libattn.a build/nocuda/attn %s/proj/build/nocuda/; "
             "cd %s/proj && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS bash workshop/run.sh cpu "
             "workshop/04m-no-alpha.patch",
             top, top, top, top, top, top);
    const int rc = run_cmd(cmd, out, sizeof out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", top);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "04m-no-alpha") && strstr(out, "FAIL as expected") &&
                  strstr(out, "workshop (cpu): 1 of 1 exercises behaved as expected"),
              "%s", out);
}

/* Two `make check` at once in one tree rebuilt and ran the same files under each other ("Text file busy")
 * and shared the workshop's trees (exercises NOT CAUGHT) (issue 58). The first holds a lock on
 * build/.check.lock; a second is refused at once, exit 2, naming the first. Here the lock is make
 * check's own when this runs under it, else this test's; the second check is run with a time limit
 * (one that was not refused ran on: exit 124) and skips this test in it (no recursion). */
Test(cli, a_second_make_check_in_one_tree_is_refused) {
    if (getenv("ATTN_NESTED_CHECK")) cr_skip_test("inside the check that this test started");
    cr_assert(mkdir("build", 0777) == 0 || errno == EEXIST);
    const int fd = open("build/.check.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    cr_assert_geq(fd, 0, "%s", strerror(errno));
    const int mine = flock(fd, LOCK_EX | LOCK_NB) == 0; /* 0: make check holds it */
    cr_assert(mine || errno == EWOULDBLOCK, "%s", strerror(errno));
    if (mine) {
        cr_assert_eq(ftruncate(fd, 0), 0);
        cr_assert_gt(dprintf(fd, "pid %ld (the test cli::a_second_make_check_in_one_tree_is_refused)\n",
                             (long)getpid()),
                     0);
    }
    const int rc = run_cmd("env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS ATTN_NESTED_CHECK=1 timeout -k 5 30 make "
                           "--no-print-directory NO_CUDA=1 WORKSHOP=0 check",
                           out, sizeof out);
    close(fd);
    cr_assert_eq(rc, 2, "exit %d (124: the second check ran): %s", rc, out);
    cr_assert(strstr(out, "check: another make check is running in this tree (pid "), "%s", out);
    cr_assert_null(strstr(out, "=="), "the second check started: %s", out);
}

/* A FIFO among the inputs is refused at once; the timeout turns a hang into a failure. */
Test(cli, load_refuses_a_fifo) {
    char dir[64], args[512], path[512];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/q.npy", dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    snprintf(args, sizeof args, "--stage 01 --load %s", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "timeout 30 %s %s", attn_bin(), args);
    int rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 2, "exit status %d (124: it hung): %s", rc, out);
    cr_assert_not_null(strstr(out, "q.npy: not a regular file (a FIFO)"), "%s", out);
}

/* A path past 512 bytes used to cut the message before its reason. */
Test(cli, long_paths_keep_the_reason) {
    char dir[1200], args[1400];
    make_dir(dir, 64);
    for (int level = 0; level < 4; level++) { /* 4 directories of 200 characters */
        size_t n = strlen(dir);
        dir[n] = '/';
        memset(dir + n + 1, 'd', 200);
        dir[n + 201] = '\0';
        cr_assert_eq(mkdir(dir, 0700), 0, "mkdir: %s", strerror(errno));
    }
    cr_assert_gt(strlen(dir), 800);
    snprintf(args, sizeof args, "--stage 01 --load %s", dir);
    EXPECT_USAGE(args, "q.npy: cannot open: No such file or directory");
    /* past 4 KiB the path is refused before any file is opened, in words that do not name --load
     * (the CLI does: it printed "--load: --load: ") */
    static char huge[5000];
    memset(huge, 'x', sizeof huge - 1);
    attn_inputs in;
    attn_problem p = attn_problem_make(1, 1, 8, 8, 0);
    cr_assert_eq(attn_inputs_load(&in, huge, &p), ATTN_EINVAL);
    cr_assert(strstr(attn_last_error(), "directory name is too long (4999 bytes; limit 4089)"), "%s",
              attn_last_error());
    cr_assert_null(strstr(attn_last_error(), "--load"), "%s", attn_last_error());
}

/* --scale past what every stage computes accurately is refused with the bound for these inputs:
 * scores times log2(e) up to 2^24, since stages 06-09 subtract the row max inside one FFMA (the
 * bound was 2^120, and at --scale 1e10, inside it, the CPU model of 06 wrote NaN). A scale just
 * inside runs on every CPU stage, either sign, causal or not, and --check never calls a written
 * value "never written". */
Test(cli, scale_past_what_the_stages_compute_is_refused) {
    const char *shape_args = "--batch 1 --heads 3 --seq 100 --dim 64";
    char args[256];
    snprintf(args, sizeof args, "--stage 01 %s --scale 1e10 --check", shape_args);
    EXPECT_USAGE(args, "--scale: |scale| must be at most");
    cr_assert(strstr(out, "must stay below 2^24"), "%s", out);
    const char *at = strstr(out, "at most ");
    double limit = 0;
    cr_assert(at && sscanf(at, "at most %lf", &limit) == 1 && limit > 1e3 && limit < 1e5, "%s", out);
    for (int s = 0; s < attn_num_stages; s++) {
        if (attn_stages[s].on_gpu) continue;
        for (int c = 0; c < 4; c++) {
            snprintf(args, sizeof args, "--stage %s %s --scale %.6g %s --check", attn_stages[s].id,
                     shape_args, (c & 1 ? -0.95 : 0.95) * limit, c & 2 ? "--causal" : "");
            cr_assert_eq(attn(args), 0, "%s: %s", args, out);
            cr_assert(strstr(out, "PASS") && !strstr(out, "never written") && !strstr(out, "non-finite"),
                      "%s: %s", args, out);
        }
    }
    snprintf(args, sizeof args, "--stage 01 %s --scale %.6g --check", shape_args, limit * 1.05);
    EXPECT_USAGE(args, "at most");
    /* bf16 holds values up to 3.4e38: inputs whose unscaled dot products overflow float32 are
     * refused at any scale */
    char dir[64];
    make_dir(dir, sizeof dir);
    const int64_t shape[4] = {1, 1, 3, 8};
    write_inputs(dir, NPY_F32, shape, shape, 0.0f);
    float big[24];
    for (int e = 0; e < 24; e++) big[e] = 1e30f * (float)(e % 3 - 1);
    char path[512];
    snprintf(path, sizeof path, "%s/k.npy", dir);
    cr_assert_eq(npy_write(path, NPY_F32, 4, shape, big), ATTN_OK, "%s", attn_last_error());
    snprintf(path, sizeof path, "%s/q.npy", dir);
    cr_assert_eq(npy_write(path, NPY_F32, 4, shape, big), ATTN_OK, "%s", attn_last_error());
    snprintf(args, sizeof args, "--stage 01 --dtype bf16 --load %s --check", dir);
    EXPECT_USAGE(args, "--load: the inputs are too large for float32 scores at any scale");
    /* stages 03-05 fold scale * log2(e) into Q: with K = 0 every score is 0, but 1e10 * 1e30 is not a
     * float32 */
    float zero[24] = {0};
    snprintf(path, sizeof path, "%s/k.npy", dir);
    cr_assert_eq(npy_write(path, NPY_F32, 4, shape, zero), ATTN_OK, "%s", attn_last_error());
    snprintf(args, sizeof args, "--stage 01 --dtype bf16 --load %s --scale 1e10 --check", dir);
    EXPECT_USAGE(args, "--scale: |scale| must be at most");
    cr_assert(strstr(out, "stages 03-05 multiply Q by |scale| * log2(e) in float32"), "%s", out);
    snprintf(args, sizeof args, "--stage 01 --dtype bf16 --load %s --check", dir);
    cr_assert_eq(attn(args), 0, "%s: %s", args, out);
}

/* --init large, first-max and rising grow q or k as 1 / |scale| to keep the scores in range: where
 * they overflow the dtype, the run says so, naming --init (it blamed "the inputs" at any scale).
 * first-max and rising follow the scale's sign: key 0 stays each row's max (it became the min). */
Test(cli, init_follows_the_scale) {
    EXPECT_USAGE("--stage 01 --init first-max --scale 1e-6",
                 "--init first-max: at |scale| 1e-06 its q or k values overflow fp16");
    EXPECT_USAGE("--stage 01 --init rising --scale -1e-6", "--init rising: at |scale| 1e-06");
    char dir[64], args[256], path[512];
    make_dir(dir, sizeof dir);
    for (int neg = 0; neg < 2; neg++) {
        const double scale = neg ? -0.125 : 0.125;
        snprintf(args, sizeof args,
                 "--stage 01 --batch 1 --heads 2 --seq 40 --dim 32 --init first-max --scale %g"
                 " --save %s --save-inputs",
                 scale, dir);
        cr_assert_eq(attn(args), 0, "%s: %s", args, out);
        npy_array q, k;
        snprintf(path, sizeof path, "%s/q.npy", dir);
        cr_assert_eq(npy_read(path, &q), ATTN_OK, "%s", attn_last_error());
        snprintf(path, sizeof path, "%s/k.npy", dir);
        cr_assert_eq(npy_read(path, &k), ATTN_OK, "%s", attn_last_error());
        const uint16_t *qh = q.data, *kh = k.data;
        for (int r = 0; r < 80; r++) { /* (head, row): key 0 beats every other key of its head */
            const int h = r / 40;
            double best = -INFINITY;
            int arg = -1;
            for (int j = 0; j < 40; j++) {
                double s = 0;
                for (int d = 0; d < 32; d++)
                    s += (double)attn_h2f(qh[r * 32 + d]) * attn_h2f(kh[(h * 40 + j) * 32 + d]);
                if (scale * s > best) best = scale * s, arg = j;
            }
            cr_assert_eq(arg, 0, "scale %g, head %d row %d: the max is key %d", scale, h, r % 40, arg);
        }
        npy_free(&q), npy_free(&k);
    }
}

/* attn_run asks the scale's bound itself, as build/attn does: a caller of the library got NaN from
 * 06m at scale 1e10. */
Test(cli, run_refuses_a_scale_past_the_bound) {
    attn_problem p = attn_problem_make(1, 2, 40, 64, 0);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 3, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    attn_run_opts opt = attn_run_opts_default();
    attn_result res;
    in.p.scale = 1e10f;
    cr_assert_eq(attn_run(attn_find_stage("06m"), &in, &opt, &res, NULL, NULL), ATTN_EINVAL);
    cr_assert(strstr(attn_last_error(), "|scale| must be at most"), "%s", attn_last_error());
    in.p.scale = 1e3f;
    cr_assert_eq(attn_run(attn_find_stage("06m"), &in, &opt, &res, NULL, NULL), ATTN_OK, "%s",
                 attn_last_error());
    attn_inputs_free(&in);
}

/* The library refuses what the CLI refuses: a subnormal scale has lost bits (06m clamped it). */
Test(cli, problem_refuses_a_subnormal_scale) {
    attn_problem p = attn_problem_make(1, 1, 8, 8, 0);
    p.scale = 1e-39f;
    cr_assert_eq(attn_problem_validate(&p), ATTN_EINVAL);
    cr_assert(strstr(attn_last_error(), "scale must be a finite non-zero float32"), "%s", attn_last_error());
    p.scale = 1.17549435e-38f;
    cr_assert_eq(attn_problem_validate(&p), ATTN_OK, "%s", attn_last_error());
}

/* When every checked element equals the reference, there is no worst element to show: the line
 * must not invent one ("[b=0, h=0, n=0, d=0] got 0 want 0"). A huge scale makes the softmax one-hot,
 * so O is a row of V, exactly. */
Test(cli, exact_output_shows_no_invented_worst_element) {
    cr_assert_eq(attn("--stage 01 --seq 16 --dim 8 --scale 1e5 --check"), 0, "%s", out);
    cr_assert_not_null(strstr(out, "max abs error   0.000e+00"), "not exact after all: %s", out);
    cr_assert_not_null(strstr(out, "worst element   none"), "%s", out);
    cr_assert_null(strstr(out, "got 0 want 0"), "%s", out);
    /* an inexact run still names its worst element */
    cr_assert_eq(attn("--stage 01 --seq 16 --dim 8 --check"), 0, "%s", out);
    cr_assert_not_null(strstr(out, "worst element   [b="), "%s", out);
}

/* Results that cannot be written to stdout are a failure: exit 1 and a line on stderr. */
Test(cli, stdout_write_errors_exit_1) {
    static const char *cases[] = {
        "--stage 01 --seq 16 --dim 8 --check >/dev/full",
        "--help >/dev/full",
        "--list >/dev/full",
        "--stage 01 --seq 16 --dim 8 >&-",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[512];
        /* stderr to the pipe first, then stdout elsewhere */
        snprintf(cmd, sizeof cmd, "{ %s %s; } 2>&1", attn_bin(), cases[i]);
        int rc = run_cmd(cmd, out, sizeof out);
        cr_assert_eq(rc, 1, "'%s': exit status %d, want 1: %s", cases[i], rc, out);
        cr_assert_not_null(strstr(out, "standard output"), "'%s': %s", cases[i], out);
    }
}

/* ---- --save ------------------------------------------------------------------------------- */

static void read_file(const char *dir, const char *name, unsigned char **buf, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(*len + 1);
    cr_assert_eq(fread(*buf, 1, *len, f), *len);
    fclose(f);
}

static int count_tmp_files(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -a %s | grep -c '\\.tmp$'", dir);
    run_cmd(cmd, out, sizeof out);
    return atoi(out);
}

/* Planted at the old fixed temporary names and at o.npy itself: links to another file, a FIFO, a
 * file of mode 0666 (owned by nobody when the test runs as root). None is written through, the run
 * does not hang, and the results are new regular files with the umask's mode. */
Test(cli, save_never_writes_through_planted_files) {
    char dir[64], path[512], victim[512], cmd[1024];
    make_dir(dir, sizeof dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    FILE *f = fopen(victim, "wb");
    fputs("precious", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/o.npy.tmp", dir);
    cr_assert_eq(symlink(victim, path), 0);
    snprintf(path, sizeof path, "%s/lse.npy.tmp", dir);
    cr_assert_eq(mkfifo(path, 0666), 0);
    snprintf(path, sizeof path, "%s/o.npy", dir);
    cr_assert_eq(symlink(victim, path), 0);
    snprintf(path, sizeof path, "%s/lse.npy", dir);
    f = fopen(path, "wb");
    fputs("planted", f);
    fclose(f);
    cr_assert_eq(chmod(path, 0666), 0);
    if (geteuid() == 0) cr_assert_eq(chown(path, 65534, 65534), 0);
    struct stat planted;
    cr_assert_eq(stat(path, &planted), 0);

    snprintf(cmd, sizeof cmd,
             "umask 027; timeout 60 %s --stage 01 --batch 1 --heads 2 --seq 9 --dim 8 --save %s", attn_bin(),
             dir);
    int rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "exit status %d (124: it hung on the FIFO): %s", rc, out);
    unsigned char *b;
    size_t n;
    read_file(dir, "victim", &b, &n);
    cr_assert(n == 8 && memcmp(b, "precious", 8) == 0, "the victim was written through a link");
    free(b);
    static const char *names[2] = {"o.npy", "lse.npy"};
    for (int i = 0; i < 2; i++) {
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        cr_assert_eq(lstat(path, &sb), 0);
        cr_assert(S_ISREG(sb.st_mode), "%s is not a regular file", names[i]);
        cr_assert_eq(sb.st_mode & 0777, 0640, "%s: mode %o, want 0640 (0666 less umask 027)", names[i],
                     sb.st_mode & 0777);
        cr_assert_eq(sb.st_uid, geteuid(), "%s: the planted file of another user became the result",
                     names[i]);
        cr_assert(sb.st_ino != planted.st_ino || i == 0, "lse.npy is still the planted file");
        npy_array a;
        cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
        npy_free(&a);
    }
    cr_assert_eq(count_tmp_files(dir), 2, "only the two planted .tmp entries remain: %s", out);
}

/* Runs saving to one directory at the same time: each file is whole, and the pair that stays is one
 * run's (o.npy and lse.npy are renamed under a lock of the directory). Whether the writes overlap
 * depends on timing; test_npy.c's concurrent_writes_to_one_path_stay_whole forces the overlap. */
Test(cli, concurrent_saves_leave_one_runs_pair) {
    enum { RUNS = 4, ROUNDS = 2 };
    char shared[64], own[RUNS][64], cmd[4096];
    make_dir(shared, sizeof shared);
    /* 524,288 values of O (1 MiB) for 0.5 GFLOP: the writes are long enough to overlap */
    const char *shape = "--stage 01 --batch 1 --heads 8 --seq 256 --dim 256";
    unsigned char *o_own[RUNS], *l_own[RUNS];
    size_t no[RUNS], nl[RUNS];
    for (int r = 0; r < RUNS; r++) {
        make_dir(own[r], sizeof own[r]);
        snprintf(cmd, sizeof cmd, "%s %s --seed %d --save %s", attn_bin(), shape, r + 1, own[r]);
        cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
        read_file(own[r], "o.npy", &o_own[r], &no[r]);
        read_file(own[r], "lse.npy", &l_own[r], &nl[r]);
    }
    for (int round = 0; round < ROUNDS; round++) {
        size_t k = (size_t)snprintf(cmd, sizeof cmd, "rc=0; pids=; ");
        for (int r = 0; r < RUNS; r++)
            k += (size_t)snprintf(cmd + k, sizeof cmd - k,
                                  "%s %s --seed %d --save %s >/dev/null & pids=\"$pids $!\"; ", attn_bin(),
                                  shape, r + 1, shared);
        snprintf(cmd + k, sizeof cmd - k, "for j in $pids; do wait $j || rc=1; done; exit $rc");
        cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "round %d: %s", round, out);
        unsigned char *o, *l;
        size_t n_o, n_l;
        read_file(shared, "o.npy", &o, &n_o);
        read_file(shared, "lse.npy", &l, &n_l);
        int who = -1;
        for (int r = 0; r < RUNS && who < 0; r++)
            if (n_o == no[r] && memcmp(o, o_own[r], n_o) == 0) who = r;
        cr_assert_geq(who, 0, "round %d: o.npy is no run's output (%zu bytes)", round, n_o);
        cr_assert(n_l == nl[who] && memcmp(l, l_own[who], n_l) == 0,
                  "round %d: lse.npy is not from the run (seed %d) whose o.npy stayed", round, who + 1);
        cr_assert_eq(count_tmp_files(shared), 0, "round %d left temporaries", round);
        free(o), free(l);
    }
    for (int r = 0; r < RUNS; r++) free(o_own[r]), free(l_own[r]);
}

/* An o.npy or lse.npy in DIR that is not a file (here a non-empty directory, which no rename can
 * replace) is refused before the run: it used to fail at the commit, which then removed the new
 * o.npy, leaving neither the new pair nor the previous o.npy. */
Test(cli, save_refuses_outputs_that_are_not_files_before_the_run) {
    char dir[64], path[512], args[512];
    make_dir(dir, sizeof dir);
    snprintf(args, sizeof args, "--stage 01 --batch 1 --heads 2 --seq 9 --dim 8 --save %s", dir);
    cr_assert_eq(attn(args), 0, "%s", out);
    unsigned char *before, *after;
    size_t nb, na;
    read_file(dir, "o.npy", &before, &nb);
    snprintf(path, sizeof path, "%s/lse.npy", dir);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/lse.npy/keep", dir);
    FILE *f = fopen(path, "wb");
    fputs("k", f);
    fclose(f);
    snprintf(args, sizeof args, "--stage 01 --batch 1 --heads 2 --seq 9 --dim 8 --seed 7 --save %s", dir);
    EXPECT_USAGE(args, "/lse.npy' is a directory, not a file");
    cr_assert_null(strstr(out, "time "), "the stage ran before the outputs were checked: %s", out);
    read_file(dir, "o.npy", &after, &na);
    cr_assert(na == nb && memcmp(before, after, nb) == 0, "the previous o.npy was changed or removed");
    free(before), free(after);
    snprintf(path, sizeof path, "%s/o.npy", dir);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkfifo(path, 0600), 0);
    EXPECT_USAGE(args, "/o.npy' is a FIFO, not a file");
    cr_assert_eq(count_tmp_files(dir), 0, "temporaries were left behind");
}

static void expect_empty_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -A %s", dir);
    run_cmd(cmd, out, sizeof out);
    cr_assert_eq(out[0], '\0', "files left in the --save directory %s: %s", dir, out);
}

/* The results' temporary files are created when they are written, after the run: a run stopped
 * before that (SIGTERM here, as Ctrl-C) leaves nothing in DIR. They used to be created before it. */
Test(cli, save_interrupted_leaves_no_temporaries) {
    char dir[64], cmd[1024];
    make_dir(dir, sizeof dir);
    /* 8.6 GFLOP on the CPU: seconds, long past the signal */
    snprintf(cmd, sizeof cmd,
             "timeout -s TERM 0.5 %s --stage 01 --batch 1 --heads 8 --seq 2048 --dim 64 --save %s",
             attn_bin(), dir);
    int rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 124, "the run was not stopped by the signal (exit %d): %s", rc, out);
    expect_empty_dir(dir);
}

/* A stage that writes no LSE removes the lse.npy an earlier run left beside o.npy (GPU stages 03-05;
 * skipped where none can run). */
Test(cli, save_without_lse_removes_a_stale_one) {
    const attn_stage *s = NULL;
    for (int i = 0; i < attn_num_stages && !s; i++)
        if (!attn_stages[i].writes_lse && attn_stages[i].supports_dim(64)) s = &attn_stages[i];
    cr_assert_not_null(s, "the registry has no stage without LSE");
    SKIP_UNLESS_RUNNABLE(s);
    char dir[64], args[512];
    make_dir(dir, sizeof dir);
    snprintf(args, sizeof args, "--stage 01 --batch 1 --heads 2 --seq 9 --dim 64 --save %s", dir);
    cr_assert_eq(attn(args), 0, "%s", out);
    cr_assert(file_exists(dir, "lse.npy"));
    snprintf(args, sizeof args, "--stage %s --batch 1 --heads 2 --seq 9 --dim 64 --save %s", s->id, dir);
    cr_assert_eq(attn(args), 0, "%s", out);
    cr_assert(file_exists(dir, "o.npy") && !file_exists(dir, "lse.npy"), "stage %s left a stale lse.npy",
              s->id);
}

/* The --save directory is tried for real (its files are created) before the run: as root, /proc
 * passes access(W_OK) yet takes no file, and the run used to fail only after computing. */
Test(cli, save_directory_is_tried_before_the_run) {
    EXPECT_USAGE("--stage 01 --seq 16 --dim 8 --save /proc", "--save: '/proc' is not a writable directory");
    cr_assert_null(strstr(out, "time "), "the stage ran before the directory was tried: %s", out);
    char dir[64], args[512];
    make_dir(dir, sizeof dir);
    snprintf(args, sizeof args, "--stage 01 --seq 16 --dim 8 --save %s/victim", dir); /* a file */
    FILE *f = fopen(args + strlen("--stage 01 --seq 16 --dim 8 --save "), "wb");
    fclose(f);
    EXPECT_USAGE(args, "is not a writable directory");
}

/* Inputs left in the --save directory by an earlier --save-inputs are not this run's: refused before
 * the run (the results of seed 2 beside the inputs of seed 1 would FAIL a `--load DIR --check`, or
 * worse, pass against the wrong inputs after an edit). Allowed: --save-inputs, which replaces them,
 * and --save into the --load folder, whose inputs they are (also by another name for it). */
Test(cli, save_refuses_inputs_it_would_not_write) {
    char dir[64], args[512];
    make_dir(dir, sizeof dir);
    const char *shape = "--stage 01 --batch 1 --heads 2 --seq 9 --dim 8";
    snprintf(args, sizeof args, "%s --seed 1 --save %s --save-inputs", shape, dir);
    cr_assert_eq(attn(args), 0, "%s", out);
    unsigned char *before, *after;
    size_t nb, na;
    read_file(dir, "o.npy", &before, &nb);
    snprintf(args, sizeof args, "%s --seed 2 --save %s/", shape, dir); /* a trailing '/': no "//" said */
    EXPECT_USAGE(args, "/q.npy' holds inputs that this run does not write");
    cr_assert_null(strstr(out, "//q.npy"), "%s", out);
    cr_assert_null(strstr(out, "time "), "the stage ran before the refusal: %s", out);
    read_file(dir, "o.npy", &after, &na);
    cr_assert(na == nb && memcmp(before, after, nb) == 0, "o.npy changed although the run was refused");
    free(after);
    char path[512];
    snprintf(path, sizeof path, "%s/q.npy", dir); /* any one of the three is enough to refuse */
    cr_assert_eq(unlink(path), 0);
    snprintf(path, sizeof path, "%s/k.npy", dir);
    cr_assert_eq(unlink(path), 0);
    EXPECT_USAGE(args, "/v.npy' holds inputs that this run does not write");
    snprintf(args, sizeof args, "%s --seed 2 --save %s --save-inputs", shape, dir);
    cr_assert_eq(attn(args), 0, "--save-inputs replaces them: %s", out);
    snprintf(args, sizeof args, "--stage 01 --load %s/. --save %s --check", dir, dir);
    cr_assert_eq(attn(args), 0, "saving into the --load folder: %s", out);
    cr_assert(strstr(out, "PASS"), "%s", out);
    read_file(dir, "o.npy", &after, &na);
    cr_assert(na != nb || memcmp(before, after, nb) != 0, "o.npy is still seed 1's");
    free(before), free(after);
    char other[64]; /* --load from another folder (same file system) leaves DIR's inputs stale: refused */
    make_dir(other, sizeof other);
    snprintf(args, sizeof args, "%s --seed 3 --save %s --save-inputs", shape, other);
    cr_assert_eq(attn(args), 0, "%s", out);
    snprintf(args, sizeof args, "--stage 01 --load %s --save %s", other, dir);
    EXPECT_USAGE(args, "/q.npy' holds inputs that this run does not write");
}

/* --save-inputs into the --load folder would replace float32 inputs with their float16 rounding
 * (issue 58: it did, silently): refused before the run, and the files stay float32. float16 inputs
 * are written back bit for bit, so that stays allowed; so does the same folder without --save-inputs. */
Test(cli, save_inputs_never_rounds_the_load_folders_float32_inputs) {
    char dir[64], args[512], path[512];
    make_dir(dir, sizeof dir);
    const int64_t shape[4] = {1, 2, 9, 8};
    write_inputs(dir, NPY_F32, shape, shape, 0.0f);
    snprintf(args, sizeof args, "--stage 01 --load %s --save %s --save-inputs", dir, dir);
    EXPECT_USAGE(args, "q.npy, k.npy, v.npy held float32 values: --save-inputs would replace them");
    cr_assert_null(strstr(out, "time "), "the stage ran before the refusal: %s", out);
    static const char *const names[3] = {"q.npy", "k.npy", "v.npy"};
    for (int i = 0; i < 3; i++) {
        npy_array a;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
        cr_assert_eq(a.dtype, NPY_F32, "%s was rewritten as float16", names[i]);
        npy_free(&a);
    }
    cr_assert(!file_exists(dir, "o.npy"), "results were saved although the run was refused");
    snprintf(args, sizeof args, "--stage 01 --load %s --save %s --check", dir, dir);
    cr_assert_eq(attn(args), 0, "without --save-inputs the folder's inputs stay: %s", out);
    write_inputs(dir, NPY_F16, shape, shape, 0.0f);
    snprintf(args, sizeof args, "--stage 01 --load %s --save %s --save-inputs --check", dir, dir);
    cr_assert_eq(attn(args), 0, "float16 inputs are written back unchanged: %s", out);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    cr_assert_eq(system(args), 0);
}

/* A signal while --save writes (here SIGINT as soon as q.npy's temporary file exists, which is after
 * the run, between the first create and the last rename) waits until the files are renamed: the
 * process then ends by that signal, and DIR holds the five whole files, no temporary one. The signal
 * used to land mid-write and leave every temporary file behind (a 24 MB part of o.npy among them). */
Test(cli, save_interrupted_while_writing_leaves_whole_files) {
    char dir[64];
    make_dir(dir, sizeof dir);
    /* N = 1: 16384 heads of 256 values, 8 MiB per file and almost no arithmetic */
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1), dup2(null, 2);
        signal(SIGINT, SIG_DFL); /* started in the background (nohup make check &), SIGINT comes ignored */
        execl(attn_bin(), attn_bin(), "--stage", "01", "--batch", "1", "--heads", "16384", "--seq", "1",
              "--dim", "256", "--save", dir, "--save-inputs", (char *)NULL);
        _exit(127);
    }
    int seen = 0, status = 0;
    const time_t deadline = time(NULL) + 60;
    for (; !seen && time(NULL) < deadline; nanosleep(&(struct timespec){0, 20000}, NULL)) {
        DIR *d = opendir(dir);
        for (struct dirent *e; d && !seen && (e = readdir(d));)
            seen = !strncmp(e->d_name, "q.npy.", 6) && strstr(e->d_name, ".tmp") != NULL;
        if (d) closedir(d);
        if (!seen && waitpid(pid, &status, WNOHANG) == pid) break;
    }
    if (seen) kill(pid, SIGINT);
    if (seen) cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(seen, "q.npy's temporary file was never seen (exit status %d): nothing was interrupted",
              status);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT,
              "the run did not end by its SIGINT (status %#x)", status);
    cr_assert_eq(count_tmp_files(dir), 0, "temporary files left in %s: %s", dir, out);
    static const char *const names[5] = {"o.npy", "lse.npy", "q.npy", "k.npy", "v.npy"};
    for (int i = 0; i < 5; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        npy_array a;
        cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s: %s", names[i], attn_last_error());
        cr_assert_eq(a.shape[0], 1, "%s", names[i]);
        npy_free(&a);
    }
}

/* Past a file size limit (ulimit -f) the kernel sends SIGXFSZ to the writing thread: ignored during
 * the hold, the write fails with EFBIG and --save says so, exit 1, leaving no temporary file. The
 * first hold blocked it instead, and it ended the process at the release (exit 153, no message). */
Test(cli, save_past_a_file_size_limit_says_so) {
    char dir[64], cmd[1024];
    make_dir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "ulimit -f 1000 && %s --stage 01 --batch 1 --heads 16384 --seq 1 --dim 256 --save %s",
             attn_bin(), dir);
    const int rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 1, "exit status %d (153: killed by SIGXFSZ): %s", rc, out);
    cr_assert(strstr(out, "File too large (nothing was saved)"), "%s", out);
    expect_empty_dir(dir);
}

/* A child process that holds an flock on path (a file or a directory) for up to 60 s (until killed):
 * another process's lock. Returns once the lock is held. */
static pid_t hold_lock(const char *path) {
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY), fd = open(path, O_RDONLY);
        dup2(null, 1), dup2(null, 2); /* the test's output pipes are not held for a minute */
        if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(1);
        if (write(ready[1], "L", 1) != 1) _exit(1);
        sleep(60);
        _exit(0);
    }
    char c = 0;
    close(ready[1]);
    cr_assert_eq(read(ready[0], &c, 1), 1, "the lock holder did not start");
    close(ready[0]);
    return pid;
}

/* Waits up to `seconds` for pid; 1 with *status set when it ended, else 0 (it is still running). */
static int wait_for(pid_t pid, double seconds, int *status) {
    for (int i = 0; i < (int)(seconds * 100); i++) {
        if (waitpid(pid, status, WNOHANG) == pid) return 1;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    return 0;
}

/* Another process holding an flock on the --save directory (issue 58): the commit waited for it in a
 * blocking flock with the signals held, so a Ctrl-C did nothing until that process let go. Now a
 * signal stops the wait at once (the process ends by it, nothing saved, no temporary left), and
 * without one the run gives up after 10 s, saying why, exit 1. */
Test(cli, save_into_a_locked_directory_stops_at_a_signal_or_gives_up) {
    char dir[64], cmd[1024];
    make_dir(dir, sizeof dir);
    const pid_t holder = hold_lock(dir);
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1), dup2(null, 2);
        signal(SIGINT, SIG_DFL); /* as above: the test's SIGINT must not find it ignored */
        execl(attn_bin(), attn_bin(), "--stage", "01", "--batch", "1", "--heads", "2", "--seq", "9", "--dim",
              "8", "--save", dir, (char *)NULL);
        _exit(127);
    }
    int status = 0, ended = 0;
    for (int i = 0; i < 3000 && !ended && count_tmp_files(dir) < 2; i++) /* o.npy's and lse.npy's: written */
        ended = wait_for(pid, 0.01, &status);
    if (!ended) kill(pid, SIGINT);
    if (!ended) ended = wait_for(pid, 5, &status);
    if (!ended) kill(pid, SIGKILL), waitpid(pid, &status, 0);
    if (!ended) kill(holder, SIGKILL), waitpid(holder, NULL, 0);
    cr_assert(ended && WIFSIGNALED(status) && WTERMSIG(status) == SIGINT,
              "the run did not end by its SIGINT within 5 s while another process held the lock (status %#x)",
              status);
    cr_assert_eq(count_tmp_files(dir), 0, "temporaries left behind: %s", out);
    cr_assert(!file_exists(dir, "o.npy"), "o.npy was saved although the run was stopped");

    snprintf(
        cmd, sizeof cmd,
        "{ timeout -k 5 40 %s --stage 01 --batch 1 --heads 2 --seq 9 --dim 8 --save %s; echo \"exit $?\"; }",
        attn_bin(), dir);
    const time_t t0 = time(NULL);
    run_cmd(cmd, out, sizeof out);
    const long took = (long)(time(NULL) - t0);
    kill(holder, SIGKILL), waitpid(holder, NULL, 0);
    cr_assert(strstr(out, "exit 1\n"), "want exit 1 (124, 137: it waited for the lock): %s", out);
    cr_assert(strstr(out, "busy: another process has held a lock (flock) on the directory for 10 s") &&
                  strstr(out, "(nothing was saved)"),
              "%s", out);
    cr_assert(took >= 9 && took <= 20, "gave up after %ld s, want 10", took);
    cr_assert_eq(count_tmp_files(dir), 0, "temporaries left behind: %s", out);
    snprintf(cmd, sizeof cmd, "--stage 01 --batch 1 --heads 2 --seq 9 --dim 8 --save %s", dir);
    cr_assert_eq(attn(cmd), 0, "the lock released, --save works: %s", out);
}

/* The path DIR/NAME.PID.0123456789ab.tmp, created as an empty file: a temporary named as npy.c names them. */
static void plant_tmp(const char *dir, const char *name, long pid, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s.%ld.0123456789ab.tmp", dir, name, pid);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    fclose(f);
}

/* kill -9 during --save (or a crash) leaves the run's temporaries, up to gigabytes, and no later run
 * removed them (issue 58). A later --save into DIR removes those whose process is gone and which no
 * process holds a lock on; it keeps a live process's (its PID alive, or the file locked: a writer in
 * another PID namespace) and names that are not its own. */
Test(cli, save_removes_the_temporaries_of_runs_killed_mid_save) {
    char dir[64], args[512], live[600], locked[600], other[600];
    make_dir(dir, sizeof dir);
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1), dup2(null, 2);
        execl(attn_bin(), attn_bin(), "--stage", "01", "--batch", "1", "--heads", "16384", "--seq", "1",
              "--dim", "256", "--save", dir, "--save-inputs", (char *)NULL);
        _exit(127);
    }
    int status = 0, ended = 0;
    for (int i = 0; i < 6000 && !ended && count_tmp_files(dir) < 3; i++) ended = wait_for(pid, 0.01, &status);
    kill(pid, SIGKILL), waitpid(pid, &status, 0);
    const int left = count_tmp_files(dir);
    cr_assert(!ended && left >= 3, "the run was not killed mid-save (%d temporaries, status %#x)", left,
              status);
    const pid_t gone = fork(); /* a PID whose process has ended */
    cr_assert_geq(gone, 0);
    if (gone == 0) _exit(0);
    waitpid(gone, NULL, 0);
    plant_tmp(dir, "o.npy", (long)getpid(), live, sizeof live);
    plant_tmp(dir, "lse.npy", (long)gone, locked, sizeof locked);
    plant_tmp(dir, "notes.txt", (long)gone, other, sizeof other);
    const pid_t holder = hold_lock(locked);
    snprintf(args, sizeof args, "--stage 01 --batch 1 --heads 2 --seq 9 --dim 8 --save %s", dir);
    const int rc = attn(args);
    kill(holder, SIGKILL), waitpid(holder, NULL, 0);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "attn: note: --save: removed"), "no word of the removal: %s", out);
    struct stat sb;
    cr_assert(stat(live, &sb) == 0 && stat(locked, &sb) == 0 && stat(other, &sb) == 0,
              "a live process's temporary, or another name, was removed");
    cr_assert_eq(count_tmp_files(dir), 3, "the killed run's %d temporaries were not all removed", left);
    cr_assert(file_exists(dir, "o.npy") && file_exists(dir, "lse.npy"));
}

/* The scripts of make check and make fuzz wrote their probe programs at /tmp/NAME-$$.c, a name anyone
 * can plant a link at beforehand (the PID is the caller's, known to whoever starts it): as root, that
 * wrote through the link into any file. Each script runs here as `exec` from a shell that planted links
 * at its own PID's names first; CC=true and a probe compiler of `true` keep it to the file handling. */
Test(cli, scripts_never_write_through_links_planted_in_tmp) {
    static const struct {
        const char *script, *names; /* PID: the script's */
    } s[] = {
        {"env CC=true sh tests/ensure-criterion.sh", "/tmp/attn-crit-PID.c /tmp/attn-crit-PID"},
        {"sh tests/fuzz/run_fuzz.sh --probe true", "/tmp/attn-fuzz-probe-PID.c /tmp/attn-fuzz-probe-PID"}};
    for (int i = 0; i < 2; i++) {
        char dir[64], cmd[2048], victim[128];
        make_dir(dir, sizeof dir);
        snprintf(victim, sizeof victim, "%s/victim", dir);
        FILE *f = fopen(victim, "w");
        fputs("precious", f);
        fclose(f);
        snprintf(cmd, sizeof cmd,
                 "names='%s'; TMPDIR=/tmp sh -c 'for n in $(echo \"$0\" | sed \"s/PID/$$/g\"); do "
                 "ln -sf %s $n || exit 9; done; echo $$ >%s/pid; exec %s' \"$names\"; rc=$?; "
                 "rm -f $(echo \"$names\" | sed \"s/PID/$(cat %s/pid)/g\"); exit $rc",
                 s[i].names, victim, dir, s[i].script, dir);
        const int rc = run_cmd(cmd, out, sizeof out);
        unsigned char *b;
        size_t n;
        read_file(dir, "victim", &b, &n);
        cr_assert(n == 8 && !memcmp(b, "precious", 8),
                  "%s wrote through a link planted in /tmp (exit %d): %.*s", s[i].script, rc, (int)n, b);
        free(b);
        cr_assert_eq(rc, 0, "%s: %s", s[i].script, out);
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        cr_assert_eq(system(cmd), 0);
    }
}

/* ---- what mutation testing found untested ------------------------------------------------------ */

/* Every --init kind --help names runs and passes its check (a PASS names no worst element "outside the
 * range": that is said only past the tolerance); any other is refused. */
Test(cli, init_takes_its_four_kinds_only) {
    static const char *kinds[] = {"normal", "large", "first-max", "rising"};
    for (int i = 0; i < 4; i++) {
        char args[256];
        snprintf(args, sizeof args, "--stage 01 --batch 1 --heads 2 --seq 130 --dim 64 --init %s --check",
                 kinds[i]);
        cr_assert_eq(attn(args), 0, "--init %s: %s", kinds[i], out);
        cr_assert(strstr(out, "PASS") && !strstr(out, "outside the range"), "--init %s: %s", kinds[i], out);
    }
    EXPECT_USAGE("--stage 01 --init bogus",
                 "--init must be normal, large, first-max or rising (got 'bogus')");
}

/* With --save-inputs, a q.npy, k.npy or v.npy in DIR that is not a file is refused before the run, as
 * o.npy and lse.npy are. */
Test(cli, save_inputs_refuses_inputs_that_are_not_files_before_the_run) {
    char dir[64], path[512], args[512];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/k.npy", dir);
    cr_assert_eq(mkdir(path, 0700), 0);
    snprintf(args, sizeof args, "--stage 01 --batch 1 --heads 2 --seq 9 --dim 8 --save %s --save-inputs",
             dir);
    EXPECT_USAGE(args, "/k.npy' is a directory, not a file");
    cr_assert_null(strstr(out, "time "), "the stage ran before the inputs' paths were checked: %s", out);
    cr_assert_eq(rmdir(path), 0);
    cr_assert_eq(rmdir(dir), 0, "files left in %s", dir);
}

/* A closed stdout is found before the run and said so, not only as a failed write after it. */
Test(cli, closed_stdout_is_refused_before_the_run) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "{ %s --stage 01 --seq 16 --dim 8 >&-; } 2>&1", attn_bin());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "attn: standard output is closed: the results would be lost"), "%s", out);
}

/* The entries of dir besides . and .. */
static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

/* --kv-heads and --seq-k: the rules and messages of the other size flags, the divisibility of H, and a
 * stage that does not take them refused naming the field and the stages that do (from the registry);
 * each refusal exits 2 and leaves nothing in the --save folder. */
Test(cli, kv_heads_and_seq_k_are_parsed_and_refused_by_stages_that_do_not_take_them) {
    char dir[64], args[512];
    make_dir(dir, sizeof dir);
    static const char *const refused[][2] = {
        {"--stage 06m --kv-heads 0", "--kv-heads must be an integer from 1 to 1048576 (got '0')"},
        {"--stage 06m --kv-heads 2x", "--kv-heads must be an integer from 1 to 1048576 (got '2x')"},
        {"--stage 06m --seq-k -3", "--seq-k must be an integer from 1 to 16777216 (got '-3')"},
        {"--stage 06m --seq-k 16777217", "--seq-k must be an integer from 1 to 16777216"},
        {"--stage 06m --seq-k", "--seq-k needs a value"},
        {"--stage 06m --seq-k=5", "write the value as the next argument, '--seq-k 5'"},
        {"--stage 06m --kv-heads 2 --kv-heads 2", "--kv-heads given twice"},
        {"--stage 06m --heads 6 --kv-heads 4", "--kv-heads must divide --heads = 6, 1..6 (got 4)"},
        {"--stage 06m --heads 2 --kv-heads 3", "--kv-heads must divide --heads = 2, 1..2 (got 3)"},
        {"--stage 06m --load /tmp --seq-k 5", "--seq-k cannot be used with --load"},
        {"--stage 01 --heads 6 --kv-heads 2",
         "stage 01 takes H_kv == H only (got H_kv 2 of H 6, --kv-heads)"},
        {"--stage 01 --seq 37 --seq-k 129", "stage 01 takes N_k == N only (got N_k 129 of N 37, --seq-k)"},
        {"--stage 05m --seq 37 --seq-k 12", "stage 05m takes N_k == N only"},
        {"--stage 04m --heads 4 --kv-heads 1", "stage 04m takes H_kv == H only"},
        {"--stage 06e --heads 4 --kv-heads 2",
         "stage 06e takes H_kv == H only"}, /* a GPU stage, built or not */
        {"--stage 13 --seq 64 --seq-k 32", "stage 13 takes N_k == N only"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(args, sizeof args, "--save %s %s", dir, refused[i][0]);
        EXPECT_USAGE(args, refused[i][1]);
        cr_assert_eq(dir_entries(dir), 0, "'%s' left files in %s", args, dir);
    }
    /* the refusal names the stages that do take them, from the registry */
    EXPECT_USAGE("--stage 01 --heads 6 --kv-heads 2",
                 "the stages that take grouped-query attention: 06, 06m, 15, 15p, 15m");
    EXPECT_USAGE("--stage 01 --seq 37 --seq-k 129", "the stages that take N_k != N: 06, 06m, 15, 15p, 15m");
    /* and 06m runs them, checked against the reference */
    cr_assert_eq(attn("--stage 06m --kv-heads 2 --heads 6 --seq 37 --seq-k 129 --causal --check"), 0, "%s",
                 out);
    cr_assert(strstr(out, "H_kv=2 N_k=129") && strstr(out, "\nPASS"), "%s", out);
    /* the defaults are H and N: naming them is the plain problem, which every stage takes */
    snprintf(args, sizeof args,
             "--stage 01 --batch 1 --heads 3 --kv-heads 3 --seq 20 --seq-k 20 --dim 8 --check");
    cr_assert_eq(attn(args), 0, "%s", out);
    cr_assert(strstr(out, "PASS") && !strstr(out, "H_kv="), "%s", out);
    rmdir(dir);
}

/* --varlen LIST: the lengths' rules and messages, the flags it cannot be used with, a stage that takes
 * no cu_seqlens refused naming the field and 06m, which runs it and passes the check. */
Test(cli, varlen_is_parsed_refused_and_run) {
    static const char *const refused[][2] = {
        {"--stage 06m --varlen 5,,6",
         "--varlen must list sequence lengths, each an integer from 1 to 16777216"},
        {"--stage 06m --varlen 0", "--varlen must list sequence lengths"},
        {"--stage 06m --varlen 7,x", "separated by commas (got '7,x')"},
        {"--stage 06m --varlen 7,", "--varlen must list sequence lengths"},
        {"--stage 06m --varlen", "--varlen needs a value"},
        {"--stage 06m --varlen 5 --varlen 6", "--varlen given twice"},
        {"--stage 06m --varlen 5,6 --batch 2", "--batch cannot be used with --varlen"},
        {"--stage 06m --varlen 5,6 --seq 6", "--seq cannot be used with --varlen"},
        {"--stage 06m --varlen 5,6 --seq-k 6", "--seq-k cannot be used with --varlen"},
        {"--stage 06m --varlen 5,6 --save /tmp", "--varlen cannot be used with --save"},
        {"--stage 06m --varlen 5,6 --trace-row 0", "--varlen cannot be used with --trace-row"},
        {"--stage 06m --varlen 5,6 --init rising", "--init rising: not with variable lengths"},
        {"--stage 01 --varlen 5,6", "stage 01 takes no cu_seqlens (variable-length batches); the stages that "
                                    "take them: 06, 06m"},
        {"--stage 05m --varlen 5,6", "stage 05m takes no cu_seqlens"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        EXPECT_USAGE(refused[i][0], refused[i][1]);
    cr_assert_eq(attn("--stage 06m --varlen 100,37,512 --heads 6 --kv-heads 2 --causal --check"), 0, "%s",
                 out);
    cr_assert(strstr(out, "varlen (3 sequences, 649 rows a head)") && strstr(out, "\nPASS"), "%s", out);
}

/* --layout: its values, given twice, and a stage that takes only [B, H, N, D] refused before any input is
 * made, naming --layout and the stages that take other layouts (06), for a CPU model, a road step and a
 * backward stage alike. On a GPU stage 06 runs bnhd against the reference (the check sees [B, H, N, D]). */
Test(cli, layout_is_parsed_and_refused_by_the_stages_that_take_none) {
    static const char *const refused[][2] = {
        {"--stage 06m --layout bshd", "--layout must be bhnd or bnhd (got 'bshd')"},
        {"--stage 06m --layout", "--layout needs a value"},
        {"--stage 06m --layout=bnhd", "write the value as the next argument, '--layout bnhd'"},
        {"--stage 06m --layout bnhd --layout bnhd", "--layout given twice"},
        {"--stage 06m --layout bnhd",
         "--layout bnhd: stage 06m takes contiguous [B, H, N, D] tensors only (--layout bhnd); the stages "
         "that take other layouts: 06"},
        {"--stage 06c --layout bnhd", "--layout bnhd: stage 06c takes contiguous [B, H, N, D] tensors only"},
        {"--stage 13 --layout bnhd", "--layout bnhd: stage 13 takes contiguous"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        EXPECT_USAGE(refused[i][0], refused[i][1]);
    /* bhnd is the default, which every stage takes */
    cr_assert_eq(attn("--stage 06m --layout bhnd --batch 1 --heads 2 --seq 40 --check"), 0, "%s", out);
    cr_assert(strstr(out, "\nPASS") && !strstr(out, "layout="), "%s", out);
    const attn_stage *s06 = attn_find_stage("06");
    if (attn_stage_available(s06) != ATTN_OK)
        return; /* the GPU half: tests/test_shapes.c runs it at odd shapes */
    cr_assert_eq(
        attn("--stage 06 --layout bnhd --batch 2 --heads 6 --kv-heads 2 --seq 77 --seq-k 300 --causal "
             "--check"),
        0, "%s", out);
    cr_assert(strstr(out, "layout=bnhd") && strstr(out, "\nPASS"), "%s", out);
}
