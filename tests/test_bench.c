/*
 * test_bench.c: build/attn-bench as a user meets it, without a GPU (--cpu-only). A bad flag gives exit
 * status 2 and one line naming the flag and the values it takes; a sweep writes one row per stage and
 * point, the CPU stages' rows checked against the reference; the CSV goes through a new temporary file
 * beside it, never through a file planted there, and two runs on one path leave one run's whole CSV.
 */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stage.h"
#include "test_util.h"

static char out[65536];

/* Where build/attn-bench is: `make check` passes BENCH_BIN. */
static const char *bench_bin(void) {
    const char *b = getenv("BENCH_BIN");
    return b && *b ? b : "build/attn-bench";
}

static int bench(const char *args) { return run_bin(bench_bin(), args, out, sizeof out); }

#define EXPECT_BAD(args, needle) EXPECT_REFUSED(bench, out, args, needle)

static const char HEADER[] = "gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes,"
                             "workspace_bytes,max_abs_err,check,repeats,l2,note\n";

/* A small sweep: 2 sequence lengths x causal and not, D = 32 (which the CPU models 03m-06m take). */
#define SWEEP "--cpu-only --batch 1 --heads 2 --seqs 17,33 --dims 32 --causal both --warmup-ms 5 --repeat-ms 1"
#define POINTS 4

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

/* DIR/victim holding "keep", and DIR/LINK -> victim: the temporary name an earlier version used. */
static void plant_link(const char *dir, const char *link) {
    char victim[600], path[600];
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(path, sizeof path, "%s/%s", dir, link);
    FILE *v = fopen(victim, "w");
    cr_assert_not_null(v);
    fputs("keep\n", v);
    fclose(v);
    cr_assert_eq(symlink(victim, path), 0, "symlink: %s", strerror(errno));
}

/* The victim is untouched; then DIR and everything in it go. */
static void expect_victim_kept_and_clean(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/victim", dir);
    cr_assert_str_eq(slurp(path), "keep\n", "the planted link's target was written");
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name), unlink(path);
    if (d) closedir(d);
    rmdir(dir);
}

Test(bench, bad_flags_exit_2_naming_what_they_take) {
    EXPECT_BAD("--batch 0", "--batch must be an integer from 1 to 1048576 (got '0')");
    EXPECT_BAD("--heads x", "--heads must be an integer from 1 to 1048576 (got 'x')");
    EXPECT_BAD("--seqs 1,0", "--seqs must be a comma-separated list of 1 to 32 integers from 1 to 16777216");
    EXPECT_BAD("--dims 257", "--dims must be a comma-separated list of 1 to 32 integers from 1 to 256");
    EXPECT_BAD("--stages 99", "--stages must be a comma-separated list of stage ids");
    EXPECT_BAD("--check-rows -1", "--check-rows must be an integer from 0 to 1048576");
    EXPECT_BAD("--causal 2", "--causal must be both, 0 or 1 (got '2')");
    EXPECT_BAD("--repeat-ms -1", "--repeat-ms must be a finite number >= 0");
    EXPECT_BAD("--warmup-ms nan", "--warmup-ms must be a finite number >= 0");
    EXPECT_BAD("--cpu-limit inf", "--cpu-limit must be a finite number >= 0");
    EXPECT_BAD("--seqs", "--seqs needs a value");
    EXPECT_BAD("--frobnicate", "unknown option '--frobnicate'");
}

Test(bench, bad_flag_writes_nothing) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(args, sizeof args, SWEEP " --csv %s/b.csv --warmup-ms -3", dir);
    cr_assert_eq(bench(args), 2, "%s", out);
    cr_assert_eq(count_entries(dir), 0, "a refused run left files in %s", dir);
    rmdir(dir);
}

/* One row per registered stage and point: the CPU stages ok and checked, the GPU stages no-gpu. */
static void expect_sweep_rows(const char *csv, const char *commit) {
    char *text = slurp(csv);
    cr_assert_not_null(text, "%s not written", csv);
    cr_assert(!strncmp(text, HEADER, strlen(HEADER)), "header: %.200s", text);
    int rows = 0;
    for (char *save = NULL, *line = strtok_r(text + strlen(HEADER), "\n", &save); line;
         line = strtok_r(NULL, "\n", &save), rows++) {
        char copy[1024], *field[22];
        int nf = 1;
        snprintf(copy, sizeof copy, "%s", line);
        field[0] = copy;
        for (char *p = copy; *p && nf < 22; p++)
            if (*p == ',') *p = '\0', field[nf++] = p + 1;
        cr_assert_eq(nf, 21, "row %d has %d fields: %s", rows, nf, line);
        cr_assert_str_eq(field[2], commit, "row %d: %s", rows, line);
        const attn_stage *s = attn_find_stage(field[3]);
        cr_assert_not_null(s, "unknown stage in row %d: %s", rows, line);
        if (s->on_gpu) {
            cr_assert_str_eq(field[11], "no-gpu", "%s", line);
            cr_assert(field[20][0], "no reason given: %s", line); /* --cpu-only, or the build has no CUDA */
        } else if (!s->supports_dim(32)) {
            cr_assert_str_eq(field[11], "unsupported", "%s", line);
        } else {
            cr_assert_str_eq(field[11], "ok", "%s", line);
            cr_assert_str_eq(field[17], "pass", "%s", line);
            cr_assert(atof(field[12]) > 0, "no time: %s", line);
        }
    }
    cr_assert_eq(rows, attn_num_stages * POINTS, "%d rows, want %d stages x %d points", rows, attn_num_stages,
                 POINTS);
}

Test(bench, cpu_only_sweep_writes_one_checked_row_per_stage_and_point) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024], csv[600];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(csv, sizeof csv, "%s/b.csv", dir);
    snprintf(args, sizeof args, SWEEP " --commit t1 --csv %s", csv);
    cr_assert_eq(bench(args), 0, "%s", out);
    expect_sweep_rows(csv, "t1");
    struct stat st;
    cr_assert_eq(stat(csv, &st), 0);
    const mode_t mask = umask(0);
    umask(mask);
    cr_assert_eq(st.st_mode & 0777, 0666 & ~mask, "mode %o, want %o", st.st_mode & 0777, 0666 & ~mask);
    cr_assert_eq(count_entries(dir), 1, "temporary files left in %s", dir);
    unlink(csv);
    rmdir(dir);
}

Test(bench, csv_is_never_written_through_a_planted_file) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600], args[1024];
    cr_assert_not_null(mkdtemp(dir));
    plant_link(dir, "b.csv.tmp");
    snprintf(args, sizeof args, SWEEP " --commit t2 --csv %s/b.csv", dir);
    cr_assert_eq(bench(args), 0, "%s", out);
    snprintf(path, sizeof path, "%s/b.csv", dir);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_assert(S_ISREG(st.st_mode), "b.csv is not a regular file");
    expect_sweep_rows(path, "t2");
    cr_assert_eq(count_entries(dir), 3, "want victim, the planted link and b.csv only");
    expect_victim_kept_and_clean(dir);
}

Test(bench, two_runs_on_one_path_leave_one_whole_csv) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", cmd[2048], csv[600];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(csv, sizeof csv, "%s/b.csv", dir);
    snprintf(cmd, sizeof cmd, "%s " SWEEP " --commit ra --csv %s & %s " SWEEP " --commit rb --csv %s & wait",
             bench_bin(), csv, bench_bin(), csv);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    char *text = slurp(csv);
    cr_assert_not_null(text);
    const char *commit = strstr(text, ",ra,") ? "ra" : "rb";
    cr_assert(!(strstr(text, ",ra,") && strstr(text, ",rb,")), "rows of both runs in one file");
    expect_sweep_rows(csv, commit);
    cr_assert_eq(count_entries(dir), 1, "temporary files left in %s", dir);
    unlink(csv);
    rmdir(dir);
}

Test(bench, unwritable_csv_exits_1_and_leaves_nothing) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(args, sizeof args, SWEEP " --csv %s/missing/b.csv", dir);
    cr_assert_eq(bench(args), 1, "%s", out);
    cr_assert(strstr(out, "cannot create a temporary file beside"), "%s", out);
    cr_assert_eq(count_entries(dir), 0);
    rmdir(dir);
}

/* bench/report.sh merge, which make bench runs after attn-bench: the same rule for its output. */
Test(bench, report_merge_is_never_written_through_a_planted_file) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[600], cmd[2048];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(csv, sizeof csv, "%s/b.csv", dir);
    snprintf(cmd, sizeof cmd, "%s " SWEEP " --commit t3 --csv %s", bench_bin(), csv);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    plant_link(dir, "m.csv.tmp");
    snprintf(cmd, sizeof cmd, "sh bench/report.sh merge %s/m.csv %s", dir, csv);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/m.csv", dir);
    expect_sweep_rows(cmd, "t3");
    cr_assert_eq(count_entries(dir), 4, "want b.csv, m.csv, victim and the planted link only");
    expect_victim_kept_and_clean(dir);
}

/* bench/peers.py's CSV writer (write_csv needs no PyTorch): the same rule. */
Test(bench, peers_csv_is_never_written_through_a_planted_file) {
    if (run_cmd("python3 -c 'import sys'", out, sizeof out) != 0) cr_skip_test("python3 not found: peers.py not tested");
    char dir[] = "/tmp/attn-bench-test.XXXXXX", cmd[2048];
    cr_assert_not_null(mkdtemp(dir));
    plant_link(dir, "p.csv.tmp");
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import sys; sys.path.insert(0, \"bench\"); import peers; "
             "peers.write_csv(\"%s/p.csv\", [\"a,b\", \"1,2\"])'",
             dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/p.csv", dir);
    cr_assert_str_eq(slurp(cmd), "a,b\n1,2\n");
    struct stat st;
    cr_assert_eq(lstat(cmd, &st), 0);
    const mode_t mask = umask(0);
    umask(mask);
    cr_assert(S_ISREG(st.st_mode) && (st.st_mode & 0777) == (0666 & ~mask), "mode %o", st.st_mode & 0777);
    cr_assert_eq(count_entries(dir), 3, "want p.csv, victim and the planted link only");
    expect_victim_kept_and_clean(dir);
}
