/*
 * test_errors.c: failures reported as they happen. A last-error message survives being quoted in
 * the next one, and a long path does not push the reason out of it; every shell script of the
 * repository parses, and the Criterion installer prints its advice where it cannot install; an
 * allocation that fails anywhere in loading, stage 01, the CPU models 03m-06m, the check or saving
 * gives exit status 1 and one line, never a hang (an OpenMP region), a crash, exit status 2 or a
 * half-saved result; stage 01 called with a bad shape says EINVAL, not ENOMEM; a signal held while
 * files are written takes its action once, at the release.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "01_naive_cpu/naive_cpu.h"
#include "half.h"
#include "hold_signals.h"
#include "npy.h"
#include "test_util.h"

static char out[65536];

/* The repository's root, from this file's path (make compiles tests/test_errors.c from the root). */
static const char *repo_root(void) {
    static char dir[1024];
    const char *file = __FILE__, *slash = strrchr(file, '/');
    if (!slash || slash == file) return ".";
    snprintf(dir, sizeof dir, "%.*s/..", (int)(slash - file) % 1000, file);
    return dir;
}

Test(errors, message_may_quote_the_last_error) {
    attn_fail(ATTN_EIO, "inner reason %d", 7);
    attn_fail(ATTN_EIO, "q.npy: %s", attn_last_error());
    cr_assert_str_eq(attn_last_error(), "q.npy: inner reason 7");
    /* twice more, the way the loader and the front end wrap a reason */
    attn_fail(ATTN_EIO, "%s: %s", "/d/q.npy", attn_last_error());
    cr_assert_str_eq(attn_last_error(), "/d/q.npy: q.npy: inner reason 7");
}

Test(errors, long_context_keeps_the_reason) {
    static char path[4200];
    memset(path, 'p', 4090);
    path[0] = '/';
    path[4090] = '\0';
    attn_fail(ATTN_EIO, "%s: cannot open: %s", path, "No such file or directory");
    const char *m = attn_last_error();
    cr_assert_eq(strlen(m), 4090 + strlen(": cannot open: No such file or directory"));
    cr_assert_not_null(strstr(m, "cannot open: No such file or directory"));
    /* npy names longer than 1000 bytes are shortened in the middle, never at the reason */
    static char longname[9000];
    memset(longname, 'n', 8990);
    longname[8990] = '\0';
    npy_array a;
    cr_assert_eq(npy_read(longname, &a), ATTN_EIO);
    cr_assert_not_null(strstr(attn_last_error(), "...nnn"), "%.100s", attn_last_error());
    cr_assert_not_null(strstr(attn_last_error(), ": cannot open: File name too long"), "%s", attn_last_error());
}

/* ---- the shell scripts -------------------------------------------------------------------- */

/* Sizes in messages: the unit that keeps the number readable, at each unit's edges. */
Test(errors, sizes_read_in_their_unit) {
    char buf[32];
    cr_expect_str_eq(attn_size_text(0, buf, sizeof buf), "0 bytes");
    cr_expect_str_eq(attn_size_text(1023, buf, sizeof buf), "1023 bytes");
    cr_expect_str_eq(attn_size_text(1024, buf, sizeof buf), "1.0 KiB");
    cr_expect_str_eq(attn_size_text(4176, buf, sizeof buf), "4.1 KiB");
    cr_expect_str_eq(attn_size_text(96.0 * 1048576, buf, sizeof buf), "96.0 MiB");
    cr_expect_str_eq(attn_size_text(1048576, buf, sizeof buf), "1.0 MiB");
    cr_expect_str_eq(attn_size_text(1073741824, buf, sizeof buf), "1.00 GiB");
    cr_expect_str_eq(attn_size_text(3.0 * 1073741824, buf, sizeof buf), "3.00 GiB");
    cr_expect_str_eq(attn_size_text(3.0 * 1073741824, buf, 5), "3.00", "cut to the buffer, terminated");
}

/* What every speed figure divides by: 4 B H N^2 D flops, half of them when causal (the tiles above
 * the diagonal are skipped, and the bench's and the CLI's TFLOP/s say so). */
Test(errors, flops_count_is_4bhn2d_halved_when_causal) {
    attn_problem p = attn_problem_make(3, 5, 1000, 64, 0);
    cr_assert_eq(attn_flops(&p), 4.0 * 3 * 5 * 1000.0 * 1000.0 * 64);
    p.causal = 1;
    cr_assert_eq(attn_flops(&p), 2.0 * 3 * 5 * 1000.0 * 1000.0 * 64);
}

/* The element limit is 2^62 (B*H*N*D fits int64, its fp16 bytes size_t): 2^62 itself is valid, twice
 * that is refused with the limit named. 4.6e18 used to stand in for 2^62 and refused 2^62 itself. */
Test(errors, problem_element_limit_is_2_pow_62) {
    attn_problem p = attn_problem_make(ATTN_MAX_B, ATTN_MAX_H, 1 << 22, 1, 0);
    cr_assert_eq(attn_problem_validate(&p), ATTN_OK, "2^62 elements refused: %s", attn_last_error());
    p.D = 2;
    cr_assert_eq(attn_problem_validate(&p), ATTN_EINVAL, "2^63 elements accepted");
    cr_assert(strstr(attn_last_error(), "too large (limit 2^62)"), "%s", attn_last_error());
    p.D = 1, p.N = 1 << 23;
    cr_assert_eq(attn_problem_validate(&p), ATTN_EINVAL, "2^63 elements accepted");
}

Test(errors, every_shell_script_parses) {
    char cmd[4096];
    /* sh -n for #!/bin/sh scripts (dash here: stricter than bash), bash -n for bash ones */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && n=0; for f in $(find . -name '*.sh' -not -path './build/*'); do n=$((n+1)); "
             "case \"$(head -n 1 \"$f\")\" in *bash*) sh=bash;; *) sh=sh;; esac; "
             "$sh -n \"$f\" || echo \"SYNTAX ERROR: $f\"; done; echo \"scripts: $n\"",
             repo_root());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_null(strstr(out, "SYNTAX ERROR"), "%s", out);
    int n = 0;
    const char *k = strstr(out, "scripts: ");
    cr_assert(k && sscanf(k, "scripts: %d", &n) == 1 && n >= 3, "no scripts found: %s", out);
    snprintf(cmd, sizeof cmd, "sh -n '%s/tests/ensure-criterion.sh'", repo_root());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "tests/ensure-criterion.sh: %s", out);
}

/* Without Criterion and without apt-get (a PATH holding only rm, id and mktemp, which makes the probe's
 * private folder, a compiler that fails), the installer must say what to install and exit 1, not stop on
 * a syntax error. */
Test(errors, ensure_criterion_says_what_to_install) {
    char bin[64], cmd[4096];
    snprintf(bin, sizeof bin, "/tmp/attn-nocrit-XXXXXX");
    cr_assert_not_null(mkdtemp(bin));
    snprintf(cmd, sizeof cmd,
             "for t in rm id mktemp; do ln -s \"$(command -v $t)\" %s/$t || exit 9; done; "
             "env PATH=%s CC=/bin/false /bin/sh '%s/tests/ensure-criterion.sh'",
             bin, bin, repo_root());
    int rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 1, "exit status %d: %s", rc, out);
    cr_assert_not_null(strstr(out, "Criterion is missing and this is not a Debian/Ubuntu system"), "%s", out);
    cr_assert_not_null(strstr(out, "'-lcriterion' links"), "%s", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", bin);
    run_cmd(cmd, out, sizeof out);
}

/* ---- injected allocation failures ---------------------------------------------------------- */

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* ATTN_FAIL_ALLOC=n fails the n-th allocation: n = 1, 2, ... until the run gets through. Every run
 * before that must exit 1 with a line that says what could not be allocated, within 60 s (stage 01
 * used to allocate inside its OpenMP region, where one thread's failure left the others waiting at
 * a barrier forever), and must leave the --save directory as it was. At least one of them must say
 * `reason`: the stage's own allocations are among those reached, not only the front end's. */
static void sweep(const char *args, const char *save_dir, int expect_files, const char *reason) {
    char cmd[4096];
    int n, seen = 0;
    for (n = 1; n < 2000; n++) {
        snprintf(cmd, sizeof cmd, "ATTN_FAIL_ALLOC=%d OMP_NUM_THREADS=4 timeout 60 %s %s", n, attn_bin(), args);
        int rc = run_cmd(cmd, out, sizeof out);
        if (rc == 0) break;
        cr_assert_eq(rc, 1, "allocation %d failed: exit status %d (124: it hung), want 1: %s", n, rc, out);
        cr_assert(strstr(out, "allocate") || strstr(out, "out of memory"), "allocation %d: %s", n, out);
        seen += strstr(out, reason) != NULL;
        cr_assert(!strstr(out, " 0.0 ") && !strstr(out, " 0.00 "), "allocation %d: a size that reads as zero: %s", n,
                  out);
        cr_assert_null(strstr(out, "Sanitizer"), "allocation %d: %s", n, out);
        if (save_dir) cr_assert_eq(count_entries(save_dir), 0, "allocation %d left files in %s", n, save_dir);
    }
    cr_assert(n > 5 && n < 2000, "the sweep ended after %d allocations: %s", n, out);
    cr_assert(seen > 0, "%s: no failed allocation said '%s'", args, reason);
    cr_assert_not_null(strstr(out, "PASS"), "%s", out);
    if (save_dir) cr_assert_eq(count_entries(save_dir), expect_files);
    cr_log_info("%s: %d allocations, each failure handled", args, n - 1);
}

Test(faults, every_allocation_failure_exits_1) {
    char in_dir[64], out_dir[64], args[512];
    snprintf(in_dir, sizeof in_dir, "/tmp/attn-fault-in-XXXXXX");
    snprintf(out_dir, sizeof out_dir, "/tmp/attn-fault-out-XXXXXX");
    cr_assert_not_null(mkdtemp(in_dir));
    cr_assert_not_null(mkdtemp(out_dir));
    const int64_t shape[4] = {1, 3, 29, 8};
    const char *names[3] = {"q", "k", "v"};
    for (int t = 0; t < 3; t++) {
        float v[3 * 29 * 8];
        for (int e = 0; e < 3 * 29 * 8; e++) v[e] = (float)(e % 13) * 0.1f - 0.6f + (float)t;
        char path[256];
        snprintf(path, sizeof path, "%s/%s.npy", in_dir, names[t]);
        cr_assert_eq(npy_write(path, NPY_F32, 4, shape, v), ATTN_OK, "%s", attn_last_error());
    }
    /* loading (a host out-of-memory there is exit 1, not 2 "bad input"), stage 01, check, save */
    snprintf(args, sizeof args, "--stage 01 --causal --load %s --save %s --check", in_dir, out_dir);
    sweep(args, out_dir, 2, "stage 01: cannot allocate");
    /* random inputs */
    sweep("--stage 01 --batch 2 --heads 2 --seq 37 --dim 5 --check", NULL, 0, "stage 01: cannot allocate");
}

/* The CPU models share cpu_tiles_run (kit/tiles_cpu.h), which allocates each OpenMP thread's tiles
 * inside its parallel region: a thread whose tiles failed once skipped the omp for, and the other 3
 * threads waited at its barrier forever. 130 rows are 3 row tiles of 64 (06m: 2 of 128), the last one
 * short, in each of 2 heads: a block or more for each of the 4 threads. A sweep is 39 runs (7 tiles x 4
 * threads, and the front end's and the check's), each of a few ms. */
Test(faults, cpu_models_allocation_failure_exits_1) {
    const char *models[4][2] = {{"03m", ""}, {"04m", ""}, {"05m", " --causal"}, {"06m", " --causal"}};
    for (int s = 0; s < 4; s++) {
        char args[256], reason[64];
        snprintf(args, sizeof args, "--stage %s --batch 1 --heads 2 --seq 130 --dim 64%s --check",
                 models[s][0], models[s][1]);
        snprintf(reason, sizeof reason, "stage %s: cannot allocate the tiles of one thread", models[s][0]);
        sweep(args, NULL, 0, reason);
    }
}

/* A bad shape is EINVAL before anything is allocated: stage 01 sized its scratch by N first, so N = -5
 * failed as ENOMEM, and B = 0 ran no head and returned OK. */
Test(faults, stage01_bad_shape_is_einval) {
    const attn_problem bad[2] = {attn_problem_make(1, 1, -5, 64, 0), attn_problem_make(0, 1, 16, 64, 0)};
    const attn_args a = {.gpus = 1};
    for (int i = 0; i < 2; i++) {
        attn_clear_error();
        cr_assert_eq(stage01_run(&bad[i], &a), ATTN_EINVAL, "problem %d: %s", i, attn_last_error());
        cr_assert(strstr(attn_last_error(), i == 0 ? "seq must be" : "batch must be"), "%s",
                  attn_last_error());
    }
}

/* The loader's two allocations, named: the header, then the data. */
Test(faults, loader_out_of_memory_is_exit_1) {
    char in_dir[64], cmd[512];
    snprintf(in_dir, sizeof in_dir, "/tmp/attn-fault-in-XXXXXX");
    cr_assert_not_null(mkdtemp(in_dir));
    const int64_t shape[4] = {1, 1, 4, 8};
    uint16_t v[32] = {0};
    const char *names[3] = {"q", "k", "v"};
    for (int t = 0; t < 3; t++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s.npy", in_dir, names[t]);
        cr_assert_eq(npy_write(path, NPY_F16, 4, shape, v), ATTN_OK, "%s", attn_last_error());
    }
    for (int n = 1; n <= 2; n++) {
        snprintf(cmd, sizeof cmd, "ATTN_FAIL_ALLOC=%d %s --stage 01 --load %s", n, attn_bin(), in_dir);
        cr_assert_eq(run_cmd(cmd, out, sizeof out), 1, "%s", out);
        cr_assert_not_null(strstr(out, "q.npy: out of memory for"), "%s", out);
    }
}

/* ---- the signal hold (hold_signals.c) ------------------------------------------------------ */

static volatile sig_atomic_t usr1_count;
static void count_usr1(int sig) { (void)sig, usr1_count++; }
static atomic_int worker_stop;
static void *idle_worker(void *arg) { /* a thread that does not block the held signals, as OpenMP's */
    (void)arg;
    while (!atomic_load(&worker_stop)) {
        const struct timespec t = {0, 1000000L};
        nanosleep(&t, NULL);
    }
    return NULL;
}

/* A signal that arrives during the hold takes its own action at the release, exactly once, whether
 * it was sent to the holding thread (blocked there: pending) or taken by another thread (the hold's
 * handler notes it and the release raises it again); SIGXFSZ during the hold is dropped, so the
 * release does not end the process with it. */
Test(errors, held_signals_are_delivered_once_at_release) {
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_handler = count_usr1;
    cr_assert_eq(sigaction(SIGUSR1, &a, NULL), 0);
    attn_held_signals h;
    attn_signals_hold(&h);
    raise(SIGUSR1);
    cr_assert_eq(usr1_count, 0, "delivered during the hold");
    attn_signals_release(&h);
    cr_assert_eq(usr1_count, 1, "raised in the holding thread: delivered %d times", (int)usr1_count);

    pthread_t worker;
    cr_assert_eq(pthread_create(&worker, NULL, idle_worker, NULL), 0);
    usr1_count = 0;
    attn_signals_hold(&h);
    kill(getpid(), SIGUSR1); /* to the process: the worker, which does not block it, takes it */
    const struct timespec wait = {0, 50000000L};
    nanosleep(&wait, NULL);
    cr_assert_eq(usr1_count, 0, "the original action ran during the hold");
    attn_signals_release(&h);
    cr_assert_eq(usr1_count, 1, "taken by another thread: delivered %d times", (int)usr1_count);
    atomic_store(&worker_stop, 1);
    pthread_join(worker, NULL);

    attn_signals_hold(&h);
    raise(SIGXFSZ); /* its default action ends the process: dropped, it must not come back */
    attn_signals_release(&h);
    cr_assert(sigaction(SIGUSR1, NULL, &a) == 0 && a.sa_handler == count_usr1, "the action is put back");
}

/* Each field of a problem is refused at 0 and one past its limit, the message naming the field and
 * its range; a dtype other than fp16 and bf16 is refused. */
Test(errors, problem_fields_are_checked_one_by_one) {
    static const struct {
        const char *needle;
        int64_t max;
        int field;
    } f[] = {{"batch must be 1..", ATTN_MAX_B, 0}, {"heads must be 1..", ATTN_MAX_H, 1},
             {"seq must be 1..", ATTN_MAX_N, 2},   {"dim must be 1..", ATTN_MAX_D, 3}};
    for (int i = 0; i < 4; i++)
        for (int end = 0; end < 2; end++) {
            int64_t v[4] = {1, 1, 8, 8};
            v[f[i].field] = end ? f[i].max + 1 : 0;
            attn_problem p = attn_problem_make(v[0], v[1], v[2], v[3], 0);
            p.scale = 0.125f;
            cr_assert_eq(attn_problem_validate(&p), ATTN_EINVAL, "%s %lld accepted", f[i].needle,
                         (long long)v[f[i].field]);
            cr_assert(strstr(attn_last_error(), f[i].needle), "%s", attn_last_error());
        }
    attn_problem p = attn_problem_make(1, 1, 8, 8, 0);
    p.dtype = (attn_dtype)7;
    cr_assert_eq(attn_problem_validate(&p), ATTN_EINVAL, "dtype 7 accepted");
    cr_assert(strstr(attn_last_error(), "dtype must be fp16 or bf16"), "%s", attn_last_error());
}

/* attn_run's first allocation fails (ATTN_FAIL_ALLOC counts from when it is set, once per process:
 * Criterion runs each test in its own): O's when the caller gives no O, else LSE's. The message names
 * the one that failed. */
static void expect_run_names_the_failed_output(int give_o) {
    const attn_stage *s = attn_find_stage("01");
    attn_problem p = attn_problem_make(1, 2, 16, 8, 0);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 3, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    uint16_t o[2 * 16 * 8];
    attn_run_opts opt = attn_run_opts_default();
    attn_result r;
    setenv("ATTN_FAIL_ALLOC", "1", 1);
    const attn_status st = attn_run(s, &in, &opt, &r, give_o ? o : NULL, NULL);
    unsetenv("ATTN_FAIL_ALLOC");
    cr_assert_eq(st, ATTN_ENOMEM, "status %d: %s", st, attn_last_error());
    const char *want = give_o ? "of host memory for LSE" : "of host memory for O";
    cr_assert(strstr(attn_last_error(), want), "want '%s': %s", want, attn_last_error());
    attn_inputs_free(&in);
}
Test(faults, run_names_o_when_o_fails) { expect_run_names_the_failed_output(0); }
Test(faults, run_names_lse_when_lse_fails) { expect_run_names_the_failed_output(1); }
