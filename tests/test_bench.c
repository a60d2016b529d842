/*
 * test_bench.c: build/attn-bench as a user meets it, without a GPU (--cpu-only). A bad flag gives exit
 * status 2 and one line naming the flag and the values it takes; a sweep writes one row per stage and
 * point, the CPU stages' rows checked against the reference; the CSV goes through a new temporary file
 * beside it, never through a file planted there, and two runs on one path leave one run's whole CSV.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
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

/* attn-bench's header; the report tests write the peers' (no pass column: a row reads as the forward's) */
static const char HEADER[] = "gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes,"
                             "workspace_bytes,max_abs_err,check,repeats,l2,note,pass,hbm_read,hbm_written,"
                             "tile_read,tile_written,warmup_ms,gpus,driver,sm_clock_mhz,power_limit_w,torch,"
                             "cudnn,triton,fa4\n";
static const char REPORT_HEADER[] = "gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes,"
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

/* A new folder from the template in dir, and path = dir/in.csv opened for writing, its header written */
static FILE *temp_dir_and_report_csv(char *dir, char *path, size_t cap) {
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, cap, "%s/in.csv", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(REPORT_HEADER, f);
    return f;
}

/* report.sh's tables of the CSV at path into out; it must exit 0 */
static void report_tables(const char *path) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "sh bench/report.sh tables %s 2>&1", path);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
}

/* Removes dir/in.csv and then dir, which fails if anything else was left in it */
static void remove_report_dir(const char *dir) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm %s/in.csv && rmdir %s", dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "files left in %s: %s", dir, out);
}

/* A new folder from the template in dir (mkdtemp), and csv = dir/b.csv */
static void temp_dir_and_csv(char *dir, char *csv, size_t cap) {
    cr_assert_not_null(mkdtemp(dir));
    snprintf(csv, cap, "%s/b.csv", dir);
}

/* A new folder and csv as temp_dir_and_csv, a link planted there first when `link` is not NULL
 * (plant_link), then `attn-bench FLAGS --csv csv`, which must exit 0 */
static void bench_beside_link(char *dir, char *csv, size_t cap, const char *link, const char *flags) {
    char args[2048];
    temp_dir_and_csv(dir, csv, cap);
    if (link) plant_link(dir, link);
    snprintf(args, sizeof args, "%s --csv %s", flags, csv);
    cr_assert_eq(bench(args), 0, "%s", out);
}
static void bench_into_fresh_csv(char *dir, char *csv, size_t cap, const char *flags) {
    bench_beside_link(dir, csv, cap, NULL, flags);
}

/* path exists and is a regular file, not a link (lstat) */
static void expect_regular_file(const char *path) {
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0, "%s: %s", path, strerror(errno));
    cr_assert(S_ISREG(st.st_mode), "%s is not a regular file", path);
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

/* args refused as bad input: exit 2, no sweep run, nothing left in dir (where its --csv points) */
static void expect_refused_before_the_sweep(const char *dir, const char *args) {
    cr_assert_eq(bench(args), 2, "%s: %s", args, out);
    cr_assert_null(strstr(out, "inputs B="), "the sweep ran: %s", out);
    cr_assert_eq(count_entries(dir), 0, "a refused run left files in %s", dir);
}

Test(bench, bad_flag_writes_nothing) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(args, sizeof args, SWEEP " --csv %s/b.csv --warmup-ms -3", dir);
    expect_refused_before_the_sweep(dir, args);
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
        char copy[1024], *field[36];
        int nf = 1;
        snprintf(copy, sizeof copy, "%s", line);
        field[0] = copy;
        for (char *p = copy; *p && nf < 36; p++)
            if (*p == ',') *p = '\0', field[nf++] = p + 1;
        cr_assert_eq(nf, 35, "row %d has %d fields: %s", rows, nf, line);
        /* the run's facts: the warm-up asked for on every row; no GPU used, so the driver, SM clock and
         * power limit say so, and a CPU stage that ran ran on 0 GPUs (a stage that did not: empty) */
        cr_assert_str_eq(field[26], "5", "row %d: warmup_ms %s", rows, line);
        cr_assert(!strcmp(field[28], "no-gpu") && !strcmp(field[29], "no-gpu") && !strcmp(field[30], "no-gpu"),
                  "row %d: driver, clock, power limit: %s", rows, line);
        for (int k = 31; k < 35; k++) cr_assert_str_eq(field[k], "", "row %d: a peer's library column: %s", rows, line);
        /* the bytes, on every row, ran or not: HBM at least Q, K and V once (2 x 17 x 32 x 2 bytes each at
         * N = 17), the tiles at least what HBM reads */
        const double inputs = 3.0 * 2 * atof(field[7]) * 32 * 2;
        cr_assert(atof(field[22]) >= inputs && atof(field[23]) > 0, "row %d: hbm bytes %s %s", rows, field[22],
                  field[23]);
        cr_assert(atof(field[24]) >= atof(field[22]) && atof(field[25]) >= atof(field[23]), "row %d: tiles %s",
                  rows, line);
        cr_assert_str_eq(field[2], commit, "row %d: %s", rows, line);
        const attn_stage *s = attn_find_stage(field[3]);
        cr_assert_not_null(s, "unknown stage in row %d: %s", rows, line);
        cr_assert_str_eq(field[21], s->pass == ATTN_FORWARD ? "fwd" : "bwd", "row %d: pass %s", rows, line);
        cr_assert_str_eq(field[27], strcmp(field[11], "ok") ? "" : "0", "row %d: gpus %s", rows, line);
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
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[600];
    bench_into_fresh_csv(dir, csv, sizeof csv, SWEEP " --commit t1");
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
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600];
    bench_beside_link(dir, path, sizeof path, "b.csv.tmp", SWEEP " --commit t2");
    expect_regular_file(path);
    expect_sweep_rows(path, "t2");
    cr_assert_eq(count_entries(dir), 3, "want victim, the planted link and b.csv only");
    expect_victim_kept_and_clean(dir);
}

Test(bench, two_runs_on_one_path_leave_one_whole_csv) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", cmd[2048], csv[600];
    temp_dir_and_csv(dir, csv, sizeof csv);
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

/* A --csv where no file can be created is bad input, refused before the sweep with exit 2, as build/attn
 * refuses such a --save DIR (it was 1, the status of a failure after the run). */
Test(bench, unwritable_csv_exits_2_and_leaves_nothing) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(args, sizeof args, SWEEP " --csv %s/missing/b.csv", dir);
    expect_refused_before_the_sweep(dir, args);
    cr_assert(strstr(out, "cannot create a temporary file beside"), "%s", out);
    rmdir(dir);
}

/* bench/report.sh merge, which make bench runs after attn-bench: the same rule for its output. */
Test(bench, report_merge_is_never_written_through_a_planted_file) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[600], cmd[2048];
    bench_into_fresh_csv(dir, csv, sizeof csv, SWEEP " --commit t3");
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

/* ---- what a reviewer found: flags, the CSV's path and fields, report.sh, peers.py ------------ */

/* One stage at one point: a sweep of a second or so. */
#define TINY "--cpu-only --batch 1 --heads 2 --seqs 17 --dims 32 --causal 0 --stages 01 --repeat-ms 1"

/* Flags are matched whole: an empty argument or two flags in one used to match as substrings of the
 * list of names (`attn-bench "" --cold` swallowed --cold). A flag given twice is refused, as in attn. */
Test(bench, flags_are_matched_whole) {
    EXPECT_BAD("'' --cold", "unknown option ''");
    EXPECT_BAD("'--seqs --dims' 999", "unknown option '--seqs --dims'");
    EXPECT_BAD("--seq 64", "unknown option '--seq'");
    EXPECT_BAD("--quick=1", "unknown option '--quick=1'");
    EXPECT_BAD("--quick --quick", "--quick given twice");
    EXPECT_BAD("--batch 1 --batch=2", "--batch given twice");
}

/* Integers are digits (an optional '-' gives the range error); lists take no empty item and no repeat
 * (a repeated N or stage gave duplicate rows). */
Test(bench, numbers_and_lists_are_strict) {
    EXPECT_BAD("--seqs ' 12'", "--seqs must be a comma-separated list");
    EXPECT_BAD("--seqs +5", "--seqs must be a comma-separated list");
    EXPECT_BAD("--batch '1 '", "--batch must be an integer from 1 to 1048576");
    EXPECT_BAD("--seqs ,64,,64,", "--seqs must be a comma-separated list");
    EXPECT_BAD("--dims 64,", "--dims must be a comma-separated list");
    EXPECT_BAD("--seqs 64,128,64", "--seqs lists 64 twice");
    EXPECT_BAD("--stages 01,01", "--stages lists 01 twice");
    EXPECT_BAD("--stages 01,naive_cpu", "--stages lists naive_cpu twice");
    EXPECT_BAD("--stages 01,", "--stages must be a comma-separated list of stage ids");
    /* the real flags as strictly as build/attn's --scale (strtod alone took " 5", "+5" and "0x10") */
    EXPECT_BAD("--warmup-ms ' 5'", "--warmup-ms must be a finite number >= 0 (got ' 5')");
    EXPECT_BAD("--repeat-ms +5", "--repeat-ms must be a finite number >= 0 (got '+5')");
    EXPECT_BAD("--cpu-limit 0x10", "--cpu-limit must be a finite number >= 0 (got '0x10')");
    EXPECT_BAD("--cpu-limit -1", "--cpu-limit must be a finite number >= 0 (got '-1')");
    cr_assert_eq(bench(TINY " --warmup-ms .5 --dry-run"), 0, "%s", out);
}

/* A --csv that is a FIFO or a directory is refused before the sweep (exit 2): the rename would have
 * put the file in its place (as root, /dev/full became a text file). */
Test(bench, csv_that_is_not_a_file_is_refused_at_once) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600], args[1024];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fifo", dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    snprintf(args, sizeof args, TINY " --csv %s", path);
    EXPECT_BAD(args, "--csv: ");
    cr_assert(strstr(out, "is a FIFO, not a file"), "%s", out);
    cr_assert_null(strstr(out, "inputs B="), "the sweep ran first: %s", out);
    struct stat st;
    cr_assert(lstat(path, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
    snprintf(args, sizeof args, TINY " --csv %s", dir);
    EXPECT_BAD(args, "is a directory, not a file");
    cr_assert_eq(count_entries(dir), 1, "files left in %s", dir);
    unlink(path);
    rmdir(dir);
}

/* build/attn-bench as a path that works from another folder (a test that cd's there needs it), and one
 * with a space in it, as any path is in a checkout under "My projects/": a link in a new folder
 * "/tmp/attn bench.XXXXXX" (link_dir, removed by the caller with its link). The commands these tests
 * built used it unquoted, and failed only where the checkout's path had a space (issue 58). */
static void bench_bin_abs(char *bin, size_t cap, char link_dir[32]) {
    char cwd[1024], real[2048];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    const int rel = bench_bin()[0] != '/';
    snprintf(real, sizeof real, "%s%s%s", rel ? cwd : "", rel ? "/" : "", bench_bin());
    snprintf(link_dir, 32, "/tmp/attn bench.XXXXXX");
    cr_assert_not_null(mkdtemp(link_dir));
    snprintf(bin, cap, "%s/attn-bench", link_dir);
    cr_assert_eq(symlink(real, bin), 0, "%s", bin);
}

static void remove_bin_link(const char *bin, const char *link_dir) {
    cr_assert_eq(unlink(bin), 0);
    cr_assert_eq(rmdir(link_dir), 0);
}

/* `make bench` with a CSV (and PLOTS_DIR) path holding spaces (issue 58): the recipe split it into
 * words, so attn-bench said "unknown option" and `mkdir -p $(dir $(CSV))` made a folder named after the
 * middle word in the current one. Run through make with the build's own attn-bench (-o: make rebuilds
 * nothing, whatever build this is), one stage at one point, no peers. */
Test(bench, make_bench_takes_a_csv_path_with_spaces) {
    char top[] = "/tmp/attn-bench-make.XXXXXX", cmd[4096], csv[256], build[512];
    cr_assert_not_null(mkdtemp(top));
    const char *word = strrchr(top, '/') + 1; /* the middle word of the path: a stray folder's name */
    snprintf(csv, sizeof csv, "%s/a %s/with space.csv", top, word);
    snprintf(build, sizeof build, "%s", bench_bin());
    *strrchr(build, '/') = '\0';
    snprintf(cmd, sizeof cmd,
             "env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory NO_CUDA=1 BUILD='%s' -o '%s' bench "
             "PEERS=0 CSV='%s' PLOTS_DIR='%s/plots and more' BENCH_ARGS='" TINY "' 2>&1",
             build, bench_bin(), csv, top);
    const int rc = run_cmd(cmd, out, sizeof out);
    struct stat st;
    const int stray = stat(word, &st) == 0;
    if (stray) { /* remove what the old recipe made here before failing */
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", word);
        cr_assert_eq(system(cmd), 0);
    }
    cr_assert_not(stray, "make bench made a folder '%s' in the current one", word);
    cr_assert_eq(rc, 0, "make bench: %s", out);
    cr_assert_null(strstr(out, "unknown option"), "%s", out);
    char *text = slurp(csv);
    cr_assert_not_null(text, "no CSV at '%s': %s", csv, out);
    cr_assert(strstr(text, ",01,") && strstr(text, ",ok,"), "%s", text);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    cr_assert_eq(system(cmd), 0);
}

/* A --csv that names no file is refused before the sweep (exit 2, naming --csv), and nothing is made in
 * the current folder. An empty one passed the early check (its temporary file ".XXXXXX" could be made
 * there) and failed at the rename after the whole sweep (exit 1); a path ending in '/' can only be a
 * folder; one under a file cannot be looked up (the early check took lstat's ENOTDIR for "absent"). */
Test(bench, csv_that_names_no_file_is_refused_before_the_sweep) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", bin[2048], under_file[2300], cmd[4096], link_dir[32];
    char word[2200], path[2100];
    cr_assert_not_null(mkdtemp(dir));
    bench_bin_abs(bin, sizeof bin, link_dir);
    snprintf(path, sizeof path, "%s/b.csv", bin); /* a file is no folder */
    snprintf(under_file, sizeof under_file, "--csv %s", sh_word(path, word, sizeof word));
    const char *bad[][2] = {
        {"--csv ''", "--csv: a file's path is needed (got '')"},
        {"--csv=", "--csv: a file's path is needed (got '')"},
        {"--csv b.csv/", "--csv: 'b.csv/' ends in '/'"},
        {"--csv new/", "--csv: 'new/' ends in '/'"},
        {under_file, "--csv: cannot look up '"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "cd %s && %s " TINY " %s", dir, sh_word(bin, word, sizeof word), bad[i][0]);
        const int rc = run_cmd(cmd, out, sizeof out);
        cr_assert_eq(rc, 2, "'%s' exited %d, want 2: %s", bad[i][0], rc, out);
        cr_assert(strstr(out, bad[i][1]), "'%s': message lacks '%s': %s", bad[i][0], bad[i][1], out);
        cr_assert_null(strstr(out, "inputs B="), "'%s': the sweep ran first: %s", bad[i][0], out);
        cr_assert_eq(count_entries(dir), 0, "'%s' left files in %s", bad[i][0], dir);
    }
    remove_bin_link(bin, link_dir);
    cr_assert_eq(rmdir(dir), 0, "files left in %s", dir);
}

/* A CSV that cannot be written is found before the sweep, not after it; the default folder
 * (build/bench/ under the current one) is made when missing, as peers.py makes its own. */
Test(bench, csv_path_is_tried_before_the_sweep) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024], cmd[4096], bin[2048], link_dir[32], word[2100];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(args, sizeof args, TINY " --csv %s/missing/b.csv", dir);
    cr_assert_eq(bench(args), 2, "%s", out);
    cr_assert(strstr(out, "cannot create a temporary file beside"), "%s", out);
    cr_assert_null(strstr(out, "inputs B="), "the sweep ran before the CSV was tried: %s", out);
    bench_bin_abs(bin, sizeof bin, link_dir);
    snprintf(cmd, sizeof cmd, "cd %s && %s " TINY " --commit t4", dir, sh_word(bin, word, sizeof word));
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    remove_bin_link(bin, link_dir);
    snprintf(cmd, sizeof cmd, "%s/build/bench/bench_stages.csv", dir);
    char *text = slurp(cmd);
    cr_assert(text && strstr(text, ",t4,01,"), "no CSV in the default folder: %s", out);
    unlink(cmd);
    snprintf(cmd, sizeof cmd, "%s/build/bench", dir), rmdir(cmd);
    snprintf(cmd, sizeof cmd, "%s/build", dir), rmdir(cmd);
    cr_assert_eq(rmdir(dir), 0, "files left in %s", dir);
}

/* --commit goes into the CSV cleaned as peers.py cleans it: a comma or newline would break the row. */
Test(bench, commit_is_cleaned_for_the_csv) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[600], args[1024];
    bench_into_fresh_csv(dir, csv, sizeof csv, TINY " --commit ' a,b|c\"d\n  e\t'");
    char *text = slurp(csv);
    cr_assert_not_null(text);
    cr_assert(strstr(text, ",a;b;c'd e,01,"), "%s", text);
    cr_assert_eq(strlen(text) - strlen(HEADER), strcspn(text + strlen(HEADER), "\n") + 1, "not one row: %s",
                 text);
    snprintf(args, sizeof args, TINY " --csv %s --commit ' \n'", csv); /* nothing left: unknown, as before */
    cr_assert_eq(bench(args), 0, "%s", out);
    cr_assert(strstr(slurp(csv), ",unknown,01,"), "%s", slurp(csv));
    unlink(csv);
    rmdir(dir);
}

/* --help that cannot be written is a failure, as build/attn's. */
Test(bench, help_write_error_exits_1) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "{ %s --help >/dev/full; } 2>&1", bench_bin());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "standard output"), "%s", out);
    cr_assert_eq(bench("--help"), 0, "%s", out);
}

/* report.sh merge into a FIFO or a directory is refused (a directory took the file inside it, exit 0). */
Test(bench, report_merge_refuses_what_is_not_a_file) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", cmd[2048];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "cd %s && printf '%s' > in.csv && mkfifo f && mkdir d", dir, REPORT_HEADER);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "sh bench/report.sh merge %s/d %s/in.csv", dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "is a directory, not a file"), "%s", out);
    snprintf(cmd, sizeof cmd, "sh bench/report.sh merge %s/f %s/in.csv", dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "is not a regular file"), "%s", out);
    snprintf(cmd, sizeof cmd, "test -p %s/f && rmdir %s/d && rm %s/f %s/in.csv && rmdir %s", dir, dir, dir,
             dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "the FIFO was replaced, or files were left: %s", out);
}

/* Rows whose numbers are not numbers, or that hold a '"' (a quoted field the awk split silently),
 * are skipped with a warning, and not merged. */
Test(bench, report_skips_malformed_rows) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600], cmd[2048];
    FILE *f = temp_dir_and_report_csv(dir, path, sizeof path);
    fputs("g,d,c,01,good,1,2,64,16,0,fp16,ok,1.5,0.1,0,0,0.0002,pass,5,-,\n", f);
    fputs("g,d,c,01,badN,1,2,6x4,16,0,fp16,ok,1.5,0.1,0,0,0.0002,pass,5,-,\n", f);
    fputs("g,d,c,01,badms,1,2,128,16,0,fp16,ok,fast,0.1,0,0,0.0002,pass,5,-,\n", f);
    fputs("g,d,c,01,badB,x,2,256,16,0,fp16,ok,1.5,0.1,0,0,0.0002,pass,5,-,\n", f);
    fputs("g,d,c,01,quoted,1,2,512,16,0,fp16,ok,1.5,0.1,0,0,0.0002,pass,5,-,\"a,b\"\n", f);
    fputs("g,d,c,01,badcausal,1,2,1024,16,maybe,fp16,ok,1.5,0.1,0,0,0.0002,pass,5,-,\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "sh bench/report.sh merge %s/m.csv %s 2>&1 && cat %s/m.csv", dir, path, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    int warnings = 0;
    for (const char *p = out; (p = strstr(p, "skipped a malformed row")); p++) warnings++;
    cr_assert_eq(warnings, 5, "%s", out);
    cr_assert(strstr(out, ",good,") && !strstr(out, ",bad") && !strstr(out, "quoted"), "%s", out);
    snprintf(cmd, sizeof cmd, "rm %s/m.csv %s && rmdir %s", dir, path, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
}

/* The tables list each panel's sequence lengths in rising order, whatever order the CSV has them in
 * (a CSV is often several runs merged): 61 lengths, scrambled, in two panels, must come out sorted,
 * each once. */
Test(bench, report_orders_sequence_lengths) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600];
    FILE *f = temp_dir_and_report_csv(dir, path, sizeof path);
    enum { LENGTHS = 61 };
    for (int causal = 0; causal < 2; causal++)
        for (int i = 0; i < LENGTHS; i++) /* 37 i mod 61 visits 0..60 once each, out of order */
            fprintf(f, "g,d,c,01,cpu,1,2,%d,16,%d,fp16,ok,1.5,0.1,0,0,0.0002,pass,5,-,\n", 1 + 37 * i % LENGTHS * 5,
                    causal);
    /* N = 6 again, written as 006 (merged CSVs, hand edits): the same length, not a 62nd */
    fputs("g,d,c,01,cpu,1,2,006,16,0,fp16,ok,1.5,0.1,0,0,0.0002,pass,5,-,\n", f);
    fclose(f);
    report_tables(path);
    int rows = 0, last = 0;
    for (const char *p = out; (p = strstr(p, " 01 cpu ")); p++) {
        const char *line = p;
        while (line > out && line[-1] != '\n') line--;
        const int n = atoi(line);
        cr_assert_gt(n, rows % LENGTHS ? last : 0, "N = %d after %d in\n%s", n, last, out);
        last = n, rows++;
    }
    cr_assert_eq(rows, 2 * LENGTHS, "%s", out);
    remove_report_dir(dir);
}

/* A row without TFLOP/s (hand-made, or an older CSV) gets them from its time: 4 B H N^2 D flops, half
 * when causal, where causal may be written 1, true or True (Python's csv module); and the merged CSV
 * is a file like any other (0644 under umask 022), not mktemp's private 0600. */
Test(bench, report_derives_tflops_and_reads_every_causal_spelling) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600], cmd[2048];
    FILE *f = temp_dir_and_report_csv(dir, path, sizeof path);
    /* 4 * 1 * 2 * 1000^2 * 64 flops in 1 ms: 0.512 TFLOP/s, 0.256 causal; N = 2000 in 4 ms: the same */
    fputs("g,d,c,01,cpu,1,2,1000,64,false,fp16,ok,1,,0,0,0.0002,pass,5,-,\n", f);
    fputs("g,d,c,01,cpu,1,2,1000,64,true,fp16,ok,1,,0,0,0.0002,pass,5,-,\n", f);
    fputs("g,d,c,01,cpu,1,2,2000,64,True,fp16,ok,4,,0,0,0.0002,pass,5,-,\n", f);
    fclose(f);
    report_tables(path);
    const char *plain = strstr(out, "== D=64, non-causal"), *causal = strstr(out, "== D=64, causal");
    cr_assert(plain && causal && plain < causal, "two panels, non-causal first:\n%s", out);
    const char *p1 = strstr(plain, "1000  01 cpu  1.000    0.512"), *p2 = strstr(causal, "1000  01 cpu  1.000    0.256"),
               *p3 = strstr(causal, "2000  01 cpu  4.000    0.256");
    cr_assert(p1 && p1 < causal && p2 && p3, "derived TFLOP/s or causal panels wrong:\n%s", out);
    snprintf(cmd, sizeof cmd, "umask 022 && sh bench/report.sh merge %s/m.csv %s && stat -c %%a %s/m.csv", dir, path,
             dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(!strcmp(out, "644\n"), "merged CSV mode: %s", out);
    snprintf(cmd, sizeof cmd, "rm %s %s/m.csv && rmdir %s", path, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
}

/* report.sh plots puts the CSV's gpu, date, commit and names and the output folder into a gnuplot
 * script: a backquote there ran a shell command, a quote let a name call system(). None may run. */
/* The lines of text that are `line`, and the most and fewest unescaped '|' on a table line. */
static int lines_equal(const char *text, const char *line, int *most_bars, int *fewest_bars) {
    int n = 0;
    *most_bars = 0, *fewest_bars = 1 << 30;
    for (const char *l = text; *l;) {
        const size_t len = strcspn(l, "\n");
        int bars = 0;
        for (size_t k = 0; k < len; k++) bars += l[k] == '|' && (k == 0 || l[k - 1] != '\\');
        if (len && l[0] == '|') *most_bars = bars > *most_bars ? bars : *most_bars;
        if (len && l[0] == '|') *fewest_bars = bars < *fewest_bars ? bars : *fewest_bars;
        n += len == strlen(line) && !strncmp(l, line, len);
        l += len + (l[len] == '\n');
    }
    return n;
}

/* report.sh copies the CSV's text into the READMEs and onto the terminal (issue 58): a field holding a
 * block's end marker made the README grow on every run (the next run's block ended at the copy), a '|'
 * split a table cell in two, and escape sequences reached the terminal. In a copy of the report's tree
 * (its own README.md, bench/README.md and a stage folder), two runs of `report.sh readme` leave each
 * README the same, with one line for each marker, every table line with as many cells as its header,
 * and no control character; `report.sh tables` prints none either. */
Test(bench, report_neutralises_what_a_csv_holds) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", cmd[4096];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "cd %s && mkdir bench 06_x && cp \"$OLDPWD\"/bench/report.sh \"$OLDPWD\"/bench/report.awk bench/ && "
             "printf 'top\\n<!-- bench:begin -->\\nold\\n<!-- bench:end -->\\ntail\\n' >README.md && "
             "printf 'b\\n<!-- bench:tables:begin -->\\n<!-- bench:tables:end -->\\n' >bench/README.md && "
             "printf 's\\n<!-- bench:stage:06:begin -->\\n<!-- bench:stage:06:end -->\\n' >06_x/README.md",
             dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    char path[700];
    snprintf(path, sizeof path, "%s/r.csv", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(REPORT_HEADER, f);
    const char *end = "<!-- bench:end --><!-- bench:tables:end --><!-- bench:stage:06:end -->";
    fprintf(f, "GPU|x\033[2J,d\033]0;t\007,c|1,06,fa2%s|y,1,4,64,16,0,fp16,ok,1.5,0.1,0,0,0.0002,pass,5,-,n%s|z\033[31m\n",
            end, end);
    fprintf(f, "GPU|x\033[2J,d\033]0;t\007,c|1,torch_naive,,1,4,64,16,0,fp16,ok,3.0,0.05,0,0,,,5,-,\n");
    fclose(f);
    static const char *const readme[3][2] = {
        {"README.md", "bench:"}, {"bench/README.md", "bench:tables:"}, {"06_x/README.md", "bench:stage:06:"}};
    char *first[3] = {NULL, NULL, NULL};
    for (int run = 0; run < 2; run++) {
        snprintf(cmd, sizeof cmd, "cd %s && sh bench/report.sh readme r.csv", dir);
        cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, readme[i][0]);
            char *text = slurp(path), marker[64];
            cr_assert_not_null(text);
            if (!run) first[i] = strdup(text);
            else cr_assert_str_eq(text, first[i], "%s changed on the second run", readme[i][0]);
            int most, fewest;
            for (int e = 0; e < 2; e++) {
                snprintf(marker, sizeof marker, "<!-- %s%s -->", readme[i][1], e ? "end" : "begin");
                cr_assert_eq(lines_equal(text, marker, &most, &fewest), 1, "%s: %s not one line's:\n%s",
                             readme[i][0], marker, text);
            }
            cr_assert_eq(most, fewest, "%s: a table line with another cell count:\n%s", readme[i][0], text);
            cr_assert_null(strpbrk(text, "\033\007"), "%s: a control character:\n%s", readme[i][0], text);
        }
    }
    snprintf(cmd, sizeof cmd, "sh bench/report.sh tables %s/r.csv", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_null(strpbrk(out, "\033\007"), "tables print a control character: %s", out);
    snprintf(cmd, sizeof cmd, "cd %s && BENCH_CMD='make bench %s' sh bench/report.sh readme r.csv", dir, end);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "report: readme: the BENCH_CMD 'make bench <!-- bench:end -->"), "%s", out);
    for (int i = 0; i < 3; i++) free(first[i]);
    snprintf(cmd, sizeof cmd, "rm -r %s", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(bench, report_plots_never_run_what_a_csv_holds) {
    if (run_cmd("command -v gnuplot", out, sizeof out) != 0)
        cr_skip_test("gnuplot not found: plots not tested");
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600], cmd[4096];
    FILE *f = temp_dir_and_report_csv(dir, path, sizeof path);
    fprintf(f,
            "G`touch %s/p1`,d`touch %s/p2`,`touch %s/p3`,01,x'.system('touch %s/p4').',1,4,64,16,0,fp16,ok,"
            "1.5,0.1,0,0,0.0002,pass,5,-,\n",
            dir, dir, dir, dir);
    fprintf(f, "G,d,c,02,y\"`touch %s/p5`\",1,4,64,16,0,fp16,ok,1.0,0.2,0,0,0.0002,pass,5,-,\n", dir);
    fprintf(f, "G,d,c,03,z@x,1,4,128,16,0,fp16,ok,1.0,0.2,0,0,0.0002,pass,5,-,\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "sh bench/report.sh plots %s \"%s/o'\\`touch %s/p6\\`\"", path, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "find %s -name 'p[0-9]'", dir);
    run_cmd(cmd, out, sizeof out);
    cr_assert_eq(out[0], '\0', "the CSV or the folder's name ran a command: %s", out);
    snprintf(cmd, sizeof cmd, "test -s \"%s/o'\\`touch %s/p6\\`/latency.png\" && rm -r %s", dir, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "no latency.png: %s", out);
}

/* peers.py refuses a --csv that is not a file (its write_csv too, whatever calls it), and values
 * outside attn-bench's ranges, naming the flag; it needs no PyTorch to say so. */
Test(bench, peers_refuses_bad_values_and_csv_paths) {
    if (run_cmd("python3 -c 'import sys'", out, sizeof out) != 0)
        cr_skip_test("python3 not found: peers.py not tested");
    static const char *bad[][2] = {
        {"--repeat-ms nan", "--repeat-ms: must be a finite number >= 0"},
        {"--repeat-ms inf", "--repeat-ms: must be a finite number >= 0"},
        {"--repeat-ms -5", "--repeat-ms: must be a finite number >= 0"},
        {"--check-rows -3", "--check-rows: must be an integer from 0 to 1048576"},
        {"--heads 100000000", "--heads: must be an integer from 1 to 1048576"},
        {"--batch +5", "--batch: must be an integer from 1 to 1048576"},
        {"--seqs 64,,128", "--seqs: must be a comma-separated list"},
        {"--dims 64,64", "--dims: must be a comma-separated list of 1 to 32 distinct integers from 1 to 256"},
        /* these said only "bad --batch, --heads or repeat bounds", and 10^12 was taken */
        {"--min-repeat 0", "--min-repeat: must be an integer from 1 to 1000 (got '0')"},
        {"--max-repeat 1000000000000", "--max-repeat: must be an integer from 1 to 1000"},
        {"--min-repeat +3", "--min-repeat: must be an integer from 1 to 1000"},
        {"--min-repeat 5 --max-repeat 4", "--max-repeat must be at least --min-repeat (got 4 and 5)"},
        {"--peers bogus,sdpa_flash",
         "--peers must be a comma-separated list of distinct names from torch_naive,"},
        {"--csv /tmp", "--csv: '/tmp' is a directory, not a file"},
        /* these failed only after the sweep (os.replace to ''), or with a NotADirectoryError traceback */
        {"--csv ''", "--csv: a file's path is needed (got '')"},
        {"--csv=", "--csv: a file's path is needed (got '')"},
        {"--csv build/no-such-folder/", "--csv: 'build/no-such-folder/' ends in '/'"},
        {"--csv /etc/passwd/x.csv", "--csv: cannot look up '/etc/passwd/x.csv': "},
        {"--csv bench/peers.py/x.csv", "--csv: cannot look up 'bench/peers.py/x.csv': "},
    };
    char cmd[2048];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "python3 bench/peers.py %s", bad[i][0]);
        int rc = run_cmd(cmd, out, sizeof out);
        cr_assert_eq(rc, 2, "'%s' exited %d, want 2: %s", bad[i][0], rc, out);
        cr_assert(strstr(out, bad[i][1]), "'%s': message lacks '%s': %s", bad[i][0], bad[i][1], out);
        cr_assert_null(strstr(out, "Traceback"), "'%s': %s", bad[i][0], out);
    }
    char dir[] = "/tmp/attn-bench-test.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "mkfifo %s/f && python3 -c 'import sys; sys.path.insert(0, \"bench\"); import peers; "
             "peers.write_csv(\"%s/f\", [\"a,b\"])'",
             dir, dir);
    cr_assert_neq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "is a FIFO, not a file"), "%s", out);
    snprintf(cmd, sizeof cmd, "test -p %s/f && rm %s/f && rmdir %s", dir, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "the FIFO was replaced, or files were left: %s", out);
}

/* Flags valid one by one can make a point past the limits (2^20 x 2^20 x 2^24 x 256 elements): refused
 * before the sweep, exit 2, nothing written. It used to run the sweep and write error rows (exit 1), or
 * with the CPU stage's default limit a cpu-skip row and exit 0. */
Test(bench, points_past_the_limits_are_refused_before_the_sweep) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024];
    cr_assert_not_null(mkdtemp(dir));
    const char *huge = "--cpu-only --batch 1048576 --heads 1048576 --seqs 16,16777216 --dims 256 --stages 01";
    snprintf(args, sizeof args, "%s --causal 0 --csv %s/b.csv", huge, dir);
    EXPECT_BAD(args, "N = 16777216 of --seqs and D = 256 of --dims: ");
    cr_assert(strstr(out, "2^62"), "the limit is not named: %s", out);
    snprintf(args, sizeof args, "%s --causal 0 --cpu-limit 1e300 --csv %s/b.csv", huge, dir);
    expect_refused_before_the_sweep(dir, args);
    rmdir(dir);
}

/* --dry-run checks what the sweep would refuse and runs nothing: make bench asks it before the peers. */
Test(bench, dry_run_checks_everything_and_writes_nothing) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(args, sizeof args, SWEEP " --dry-run --csv %s/b.csv", dir);
    cr_assert_eq(bench(args), 0, "%s", out);
    cr_assert(strstr(out, "--dry-run: the flags, shapes and CSV path are good"), "%s", out);
    cr_assert_null(strstr(out, "inputs B="), "the sweep ran: %s", out);
    cr_assert_eq(count_entries(dir), 0, "a dry run left files in %s", dir);
    snprintf(args, sizeof args, SWEEP " --dry-run --csv %s/missing/b.csv", dir);
    expect_refused_before_the_sweep(dir, args);
    snprintf(args, sizeof args, SWEEP " --dry-run --batch 1048576 --heads 1048576 --seqs 16777216 --dims 256 --csv %s/b.csv", dir);
    expect_refused_before_the_sweep(dir, args);
    EXPECT_BAD("--dry-run=1", "unknown option '--dry-run=1'");
    cr_assert_eq(count_entries(dir), 0, "a dry run left files in %s", dir);
    rmdir(dir);
}

/* report.sh merge that reads no row (every CSV without the columns it needs) fails and leaves OUT as
 * it was: it used to replace OUT by a bare header and exit 0. */
Test(bench, report_merge_of_no_rows_fails_and_keeps_out) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", cmd[2048];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "cd %s && printf 'a,b\\n1,2\\n' > bad.csv && printf 'old\\n' > m.csv", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "sh bench/report.sh merge %s/m.csv %s/bad.csv", dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "no rows to merge"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s/m.csv", dir);
    char *text = slurp(cmd);
    cr_assert(text && !strcmp(text, "old\n"), "OUT was replaced: %s", text ? text : "(gone)");
    snprintf(cmd, sizeof cmd, "cd %s && rm m.csv bad.csv && cd / && rmdir %s", dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "files left in %s: %s", dir, out);
}

/* ---- what mutation testing found untested: defaults, the columns of a row, list bounds --------- */

/* Field k (0-based) of the CSV row that begins at line, into buf: "" past the row's end. */
static const char *csv_field(const char *line, int k, char *buf, size_t cap) {
    for (; k > 0 && *line && *line != '\n'; line++)
        if (*line == ',') k--;
    const size_t n = k ? 0 : strcspn(line, ",\n");
    snprintf(buf, cap, "%.*s", (int)n, line);
    return buf;
}

/* The row of stage id in CSV text (after the header), or NULL. */
static const char *csv_row(const char *text, const char *id) {
    char f[64];
    for (const char *line = text + strlen(HEADER); *line; line += strcspn(line, "\n") + (line[strcspn(line, "\n")] == '\n'))
        if (!strcmp(csv_field(line, 3, f, sizeof f), id)) return line;
    return NULL;
}

/* Without a GPU (or with --cpu-only) the sweep is the one --help names: B=1 H=4, N=256,512,1024,
 * D=64,128; --quick: N=128,512,1024 and D=64 alone. */
Test(bench, defaults_without_a_gpu_are_the_documented_ones) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024], csv[600];
    temp_dir_and_csv(dir, csv, sizeof csv);
    snprintf(args, sizeof args, "--cpu-only --dry-run --csv %s", csv);
    cr_assert_eq(bench(args), 0, "%s", out);
    cr_assert(strstr(out, " B=1 H=4 N=256..1024 (3) D=64..128 (2) causal=both; "), "%s", out);
    snprintf(args, sizeof args, "--cpu-only --quick --dry-run --csv %s", csv);
    cr_assert_eq(bench(args), 0, "%s", out);
    cr_assert(strstr(out, " B=1 H=4 N=128..1024 (3) D=64..64 (1) causal=both; "), "%s", out);
    cr_assert_eq(rmdir(dir), 0, "files left in %s", dir);
}

/* --causal 0 and --causal 1 sweep that setting alone: one row per stage and point, its causal column
 * the one asked for, and the progress counts that one row. */
Test(bench, causal_flag_sweeps_that_setting_alone) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024], csv[600], f[32];
    temp_dir_and_csv(dir, csv, sizeof csv);
    for (int want = 0; want < 2; want++) {
        snprintf(args, sizeof args, "--cpu-only --batch 1 --heads 2 --seqs 17 --dims 32 --stages 01 --repeat-ms 1 "
                 "--causal %d --csv %s", want, csv);
        cr_assert_eq(bench(args), 0, "%s", out);
        cr_assert(strstr(out, "[ 1/1] "), "not one run: %s", out);
        const char *text = slurp(csv), *row = text ? csv_row(text, "01") : NULL;
        cr_assert_not_null(row, "%s", text ? text : "(no CSV)");
        cr_assert_str_eq(csv_field(row, 9, f, sizeof f), want ? "1" : "0", "--causal %d: %s", want, text);
        cr_assert_eq(strlen(text) - strlen(HEADER), strcspn(row, "\n") + 1, "not one row: %s", text);
    }
    unlink(csv);
    rmdir(dir);
}

/* A row's columns: a CPU stage's l2 reads '-' (it has no L2 to be warm or cold) and its repeats are
 * --repeat-ms's, within 3..50 (0 ms: the 3 of a median; far more than a run: 50); a stage that did not
 * run leaves every number empty; --check-rows 0 checks nothing and the check column reads '-'. */
Test(bench, row_columns_say_what_ran) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024], csv[600], f[64];
    temp_dir_and_csv(dir, csv, sizeof csv);
    const char *tiny = "--cpu-only --batch 1 --heads 2 --seqs 17 --dims 32 --causal 0 --stages 01,02";
    snprintf(args, sizeof args, "%s --repeat-ms 0 --csv %s", tiny, csv);
    cr_assert_eq(bench(args), 0, "%s", out);
    const char *text = slurp(csv), *r01 = csv_row(text, "01"), *r02 = csv_row(text, "02");
    cr_assert(r01 && r02, "%s", text);
    cr_assert_str_eq(csv_field(r01, 18, f, sizeof f), "3", "repeats at --repeat-ms 0: %s", text);
    cr_assert_str_eq(csv_field(r01, 19, f, sizeof f), "-", "l2 of a CPU stage: %s", text);
    cr_assert_str_eq(csv_field(r02, 11, f, sizeof f), "no-gpu", "%s", text);
    for (int k = 12; k <= 18; k++) cr_assert_str_eq(csv_field(r02, k, f, sizeof f), "", "column %d: %s", k, text);
    cr_assert_str_eq(csv_field(r02, 19, f, sizeof f), "-", "l2 of a stage that did not run: %s", text);
    snprintf(args, sizeof args, "%s --repeat-ms 1e6 --check-rows 0 --csv %s", tiny, csv);
    cr_assert_eq(bench(args), 0, "%s", out);
    text = slurp(csv), r01 = csv_row(text, "01");
    cr_assert_not_null(r01, "%s", text);
    cr_assert_str_eq(csv_field(r01, 18, f, sizeof f), "50", "repeats at --repeat-ms 1e6: %s", text);
    cr_assert_str_eq(csv_field(r01, 17, f, sizeof f), "-", "check column at --check-rows 0: %s", text);
    cr_assert_str_eq(csv_field(r01, 16, f, sizeof f), "", "max_abs_err at --check-rows 0: %s", text);
    unlink(csv);
    rmdir(dir);
}

/* Lists take 1 to 32 items (a 33rd would run past the arrays); 0 is a valid --repeat-ms, --warmup-ms
 * and --cpu-limit ("a finite number >= 0"), an empty value is not; a repeated item is one line, not
 * that line and the range's as well. */
Test(bench, list_and_number_bounds) {
    char args[1024] = "--dry-run --cpu-only --dims 64 --seqs 1", *p = args + strlen(args);
    for (int i = 2; i <= 32; i++) p += sprintf(p, ",%d", i);
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[600];
    temp_dir_and_csv(dir, csv, sizeof csv);
    sprintf(p, " --csv %s", csv);
    cr_assert_eq(bench(args), 0, "32 sequence lengths: %s", out);
    cr_assert(strstr(out, "N=1..32 (32)"), "%s", out);
    sprintf(p, ",33 --csv %s", csv);
    EXPECT_BAD(args, "--seqs must be a comma-separated list of 1 to 32 integers from 1 to 16777216");
    snprintf(args, sizeof args, "--dry-run --cpu-only --repeat-ms 0 --warmup-ms 0 --cpu-limit 0 --csv %s", csv);
    cr_assert_eq(bench(args), 0, "zeros refused: %s", out);
    snprintf(args, sizeof args, "--dry-run --cpu-only --repeat-ms '' --csv %s", csv);
    EXPECT_BAD(args, "--repeat-ms must be a finite number >= 0 (got '')");
    EXPECT_BAD("--seqs 64,128,64", "--seqs lists 64 twice");
    cr_assert_null(strstr(out, "must be"), "more than the one line: %s", out);
    cr_assert_eq(rmdir(dir), 0, "files left in %s", dir);
}

/* --commit keeps at most 300 bytes, as peers.py's clean() does. */
Test(bench, commit_keeps_300_bytes) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[600], flags[1024], commit[401], f[512];
    memset(commit, 'c', 400), commit[400] = '\0';
    snprintf(flags, sizeof flags, TINY " --commit %s", commit);
    bench_into_fresh_csv(dir, csv, sizeof csv, flags);
    const char *row = csv_row(slurp(csv), "01");
    cr_assert_not_null(row);
    cr_assert_eq(strlen(csv_field(row, 2, f, sizeof f)), 300, "commit of %zu bytes", strlen(f));
    unlink(csv);
    rmdir(dir);
}

/* A --csv that is a symbolic link is replaced by the CSV (the rename replaces the link); the file it
 * pointed to is never written. */
Test(bench, csv_that_is_a_link_is_replaced_not_written_through) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600];
    bench_beside_link(dir, path, sizeof path, "b.csv", TINY " --commit t5");
    expect_regular_file(path);
    cr_assert(strstr(slurp(path), ",t5,01,"), "%s", slurp(path));
    cr_assert_eq(count_entries(dir), 2, "want victim and b.csv only");
    expect_victim_kept_and_clean(dir);
}

/* --cpu-limit 0 skips every CPU stage (cpu-skip, the limit named in the note), --quick or not: the
 * quick sweep's limit of 5 s is its default, not a value that replaces the one given. */
Test(bench, cpu_limit_given_is_the_limit) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024], csv[600], f[400];
    bench_into_fresh_csv(dir, csv, sizeof csv, "--cpu-only --quick --stages 01,06m --causal 1 --cpu-limit 0");
    char *text = slurp(csv);
    int rows = 0;
    for (const char *line = text + strlen(HEADER); *line; line += strcspn(line, "\n") + 1, rows++) {
        cr_assert_str_eq(csv_field(line, 11, f, sizeof f), "cpu-skip", "%s", text);
        cr_assert(strstr(csv_field(line, 20, f, sizeof f), "> 0.0 s limit"), "note: %s", f);
    }
    cr_assert_eq(rows, 6, "want 2 stages x 3 points: %s", text);
    cr_assert_null(strstr(out, "inputs B="), "inputs made for no run: %s", out);
    /* a head dim the stage does not take is unsupported, whatever the limit */
    snprintf(args, sizeof args, "--cpu-only --batch 1 --heads 2 --seqs 17 --dims 80 --stages 03m --cpu-limit 0 --csv %s",
             csv);
    cr_assert_eq(bench(args), 0, "%s", out);
    text = slurp(csv);
    cr_assert(strstr(text, ",unsupported,") && strstr(text, "stage 03m supports head dim 32; 64; 128 (got 80)"), "%s",
              text);
    unlink(csv);
    rmdir(dir);
}

/* Each CPU stage's runs are estimated from its own measured rate (--help: "its measured FLOP rate"):
 * the cpu-skip note of stage 01 (double, naive) and of 03m (tiled) each carry the rate that stage's own
 * measurement printed ("CPU stage 03m: 8.03 GFLOP/s measured"). One rate shared by every CPU stage gave
 * both notes the first stage's number. (Comparing the two notes with each other was flaky: under ASan
 * both stages once measured 0.93 GFLOP/s.) */
static void expect_note_has_own_rate(const char *text, const char *stage) {
    char f[400], tag[64], want[128];
    const char *row = csv_row(text, stage);
    cr_assert(row, "no row for stage %s: %s", stage, text);
    snprintf(tag, sizeof tag, "CPU stage %s: ", stage);
    const char *at = strstr(out, tag);
    cr_assert(at, "no measured rate printed for stage %s: %s", stage, out);
    at += strlen(tag);
    snprintf(want, sizeof want, " at %.*s GFLOP/s measured)", (int)strcspn(at, " "), at);
    cr_assert(strstr(csv_field(row, 20, f, sizeof f), want), "stage %s: note '%s' lacks its own rate '%s'", stage,
              f, want);
}
Test(bench, cpu_stages_are_judged_by_their_own_rates) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[600];
    bench_into_fresh_csv(dir, csv, sizeof csv,
                         "--cpu-only --batch 1 --heads 2 --seqs 1024 --dims 32 --causal 0 --stages 01,03m --cpu-limit 0");
    const char *text = slurp(csv);
    expect_note_has_own_rate(text, "01");
    expect_note_has_own_rate(text, "03m");
    unlink(csv);
    rmdir(dir);
}

/* The line of text that holds needle (at its first occurrence), into buf; "" if none. */
static const char *line_with(const char *text, const char *needle, char *buf, size_t cap) {
    const char *at = strstr(text, needle), *start = at;
    buf[0] = '\0';
    if (!at) return buf;
    while (start > text && start[-1] != '\n') start--;
    snprintf(buf, cap, "%.*s", (int)(strcspn(start, "\n")), start);
    return buf;
}

/* report.sh tables: panels in rising D (128 after 64, as numbers, not as text); "vs best" is the
 * fastest row's time over this row's; a FAIL row shows no time; a no-gpu row is no table row but the
 * header says which GPU stages were skipped and why, with the GPU of a row that ran; a row without a
 * time is no point's best; fast stages
 * (06 on) get their table against the peers; a row with a size of 0 or a field too many is skipped
 * with a warning. */
Test(bench, report_tables_order_compare_and_skip) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600];
    FILE *f = temp_dir_and_report_csv(dir, path, sizeof path);
    fputs("G0,d,c,02,naive_gpu,1,2,64,64,0,fp16,no-gpu,,,,,,,,-,no GPU here; sorry\n", f);
    fputs("G1,d,c,01,cpu,1,2,64,128,0,fp16,ok,12.5,,0,0,0.0002,pass,5,-,\n", f);
    fputs("G1,d,c,01,cpu,1,2,64,64,0,fp16,ok,2,,0,0,0.0002,pass,5,-,\n", f);
    fputs("G1,d,c,03m,tiled_cpu,1,2,64,64,0,fp16,ok,1,,0,0,0.0002,pass,5,-,\n", f);
    fputs("G1,d,c,04m,online_cpu,1,2,64,64,0,fp16,FAIL,0.25,,0,0,0.5,FAIL,5,-,wrong\n", f);
    fputs("G1,d,c,06,fa2_full,1,2,64,64,0,fp16,ok,0.5,,0,0,0.0002,pass,5,warm,\n", f);
    fputs("G1,d,c,sdpa_flash,sdpa_flash,1,2,64,64,0,fp16,ok,1,,0,0,,,5,warm,\n", f);
    fputs("G1,d,c,05m,untimed,1,2,64,64,0,fp16,ok,,,0,0,,,,-,\n", f); /* ok without a time: no best */
    fputs("G1,d,c,01,zeroN,1,2,0,64,0,fp16,ok,2,,0,0,0.0002,pass,5,-,\n", f);
    fputs("G1,d,c,01,xfield,1,2,32,64,0,fp16,ok,2,,0,0,0.0002,pass,5,-,,x\n", f);
    fclose(f);
    report_tables(path);
    int warnings = 0;
    for (const char *p = out; (p = strstr(p, "skipped a malformed row")); p++) warnings++;
    cr_assert_eq(warnings, 2, "%s", out);
    cr_assert(!strstr(out, "zeroN") && !strstr(out, "xfield"), "%s", out);
    cr_assert(strstr(out, "GPU: G1 ") && strstr(out, "GPU stages skipped (02): no GPU here, sorry."), "%s", out);
    cr_assert_null(strstr(out, "naive_gpu"), "a no-gpu row in a table: %s", out);
    const char *d64 = strstr(out, "== D=64, non-causal"), *d128 = strstr(out, "== D=128, non-causal");
    cr_assert(d64 && d128 && d64 < d128, "panels not in rising D:\n%s", out);
    char line[512];
    cr_assert(strstr(line_with(d64, " 01 cpu ", line, sizeof line), " 2.000 ") && strstr(line, " 0.25x "),
              "01's row (vs best: 0.5 / 2):\n%s", out);
    cr_assert(strstr(line_with(d64, " 03m tiled_cpu ", line, sizeof line), " 1.000 ") && strstr(line, " 0.50x "),
              "03m's row:\n%s", out);
    cr_assert(strstr(line_with(d64, " 04m online_cpu ", line, sizeof line), " FAIL ") && !strstr(line, "0.250"),
              "a FAIL row's time is shown:\n%s", out);
    cr_assert(strstr(line_with(d128, " 01 cpu ", line, sizeof line), " 12.50 "), "ms from 10 to 100, 2 decimals:\n%s", out);
    cr_assert(strstr(out, "== Stage 06 against the peers (FA2)"), "no table against the peers:\n%s", out);
    remove_report_dir(dir);
}

/* "vs best" of a backward row is against the backward rows of its point alone: a backward stage does
 * 2.5 times a forward's work, and a forward's time is no best for it (12m read 0.20x against 05m). */
Test(bench, report_vs_best_keeps_backward_rows_apart) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600], line[512];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/in.csv", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes,workspace_bytes,"
          "max_abs_err,check,repeats,l2,note,pass\n", f);
    fputs("G1,d,c,05m,bands,1,2,64,64,0,fp16,ok,1,,0,0,0.0002,pass,5,-,,fwd\n", f);
    fputs("G1,d,c,12m,bwd_model,1,2,64,64,0,fp16,ok,4,,0,0,0.0002,pass,5,-,,bwd\n", f);
    fputs("G1,d,c,13,bwd_fast,1,2,64,64,0,fp16,ok,2,,0,0,0.0002,pass,5,-,,bwd\n", f);
    fclose(f);
    report_tables(path);
    cr_assert(strstr(line_with(out, " 12m bwd_model ", line, sizeof line), " 0.50x "), "2 / 4, not 1 / 4:\n%s", out);
    cr_assert(strstr(line_with(out, " 13 bwd_fast ", line, sizeof line), " 1.00x "), "%s", out);
    cr_assert(strstr(line_with(out, " 05m bands ", line, sizeof line), " 1.00x "), "%s", out);
    remove_report_dir(dir);
}

/* report.sh merge into an OUT that is a symbolic link replaces the link, never what it points to: not
 * even a FIFO there is refused or written to (the rename never opens it). */
Test(bench, report_merge_replaces_a_link_out) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", path[600], cmd[2048];
    FILE *f = temp_dir_and_report_csv(dir, path, sizeof path);
    fputs("g,d,c,01,cpu,1,2,64,16,0,fp16,ok,1.5,0.1,0,0,0.0002,pass,5,-,\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd %s && mkfifo fifo && ln -s fifo m.csv", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "sh bench/report.sh merge %s/m.csv %s", dir, path);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/m.csv", dir);
    expect_regular_file(cmd);
    cr_assert(strstr(slurp(cmd), ",01,cpu,"), "%s", slurp(cmd));
    snprintf(cmd, sizeof cmd, "test -p %s/fifo && rm %s/fifo %s/m.csv %s && rmdir %s", dir, dir, dir, path, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "the FIFO was replaced, or files were left: %s", out);
}

/* report.sh merge without a CSV says so (awk would read stdin), and a CSV without a status column is
 * skipped, named: neither merges anything. */
Test(bench, report_merge_needs_csvs_with_the_columns) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", cmd[2048];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "sh bench/report.sh merge %s/m.csv </dev/null", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "report: nothing to merge into"), "%s", out);
    snprintf(cmd, sizeof cmd,
             "printf 'gpu,date,commit,stage,name,B,H,N,D,causal,dtype,ms\\ng,d,c,01,cpu,1,2,64,16,0,fp16,1.5\\n' > %s/in.csv",
             dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "sh bench/report.sh merge %s/m.csv %s/in.csv", dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "in.csv has no stage, N, D or status column; skipped") && strstr(out, "no rows to merge"),
              "%s", out);
    remove_report_dir(dir);
}

/* ---- the backward: attn-bench's rows, the switches, the report's backward tables --------------- */

/* A backward stage's row (12m, the CPU model of stage 12) says pass bwd and counts 2.5 times the
 * forward's FLOPs: 2.5 x 4 B H N^2 D, half when causal, over its time; the forward stage's beside it
 * says fwd and counts 4 B H N^2 D. Both are checked (12m's gradients against the double reference). */
Test(bench, backward_rows_count_two_and_a_half_forwards) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[600], f[64];
    bench_into_fresh_csv(dir, csv, sizeof csv,
                         "--cpu-only --batch 1 --heads 2 --seqs 33 --dims 32 --causal 1 --stages 01,12m --repeat-ms 1");
    const char *text = slurp(csv);
    const char *stages[2] = {"01", "12m"}, *pass[2] = {"fwd", "bwd"};
    const double times[2] = {1.0, 2.5}, flops = 4.0 * 1 * 2 * 33 * 33 * 32 / 2;
    for (int s = 0; s < 2; s++) {
        const char *row = csv_row(text, stages[s]);
        cr_assert_not_null(row, "no row of %s: %s", stages[s], text);
        cr_assert_str_eq(csv_field(row, 21, f, sizeof f), pass[s], "%s", row);
        cr_assert_str_eq(csv_field(row, 11, f, sizeof f), "ok", "%s", row);
        cr_assert_str_eq(csv_field(row, 17, f, sizeof f), "pass", "%s", row);
        const double ms = atof(csv_field(row, 12, f, sizeof f)), tf = atof(csv_field(row, 13, f, sizeof f));
        const double want = times[s] * flops / (ms * 1e9);
        cr_assert(ms > 0 && fabs(tf - want) <= 1e-5 * want, "%s: %g TFLOP/s, want %g from %g ms", stages[s], tf, want, ms);
    }
    unlink(csv);
    rmdir(dir);
}

/* --no-backward runs the forward stages alone, --no-forward the backward ones: the dry run's stage
 * count is the registry's of that pass; both together, or either with --stages, is bad input. */
Test(bench, pass_switches_select_the_stages) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[600], args[1024], want[64];
    temp_dir_and_csv(dir, csv, sizeof csv);
    int nbwd = 0;
    for (int i = 0; i < attn_num_stages; i++) nbwd += attn_stages[i].pass != ATTN_FORWARD;
    cr_assert_gt(nbwd, 0, "no backward stage registered");
    const char *sw[2] = {"--no-backward", "--no-forward"};
    const int count[2] = {attn_num_stages - nbwd, nbwd};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "--cpu-only --dry-run %s --csv %s", sw[k], csv);
        cr_assert_eq(bench(args), 0, "%s", out);
        snprintf(want, sizeof want, "; %d stages; ", count[k]);
        cr_assert(strstr(out, want), "%s: want '%s' in %s", sw[k], want, out);
    }
    EXPECT_BAD("--no-backward --no-forward", "--no-backward and --no-forward together leave no stage to run");
    EXPECT_BAD("--stages 01 --no-forward", "--stages and --no-forward together");
    EXPECT_BAD("--gpu-limit -2", "--gpu-limit must be a finite number >= 0 (got '-2')");
    cr_assert_eq(rmdir(dir), 0, "files left in %s", dir);
}

/* The forward's rows and the backward's of one point, B=1 H=2 N=64 D=64 (4 B H N^2 D = 2097152 FLOPs
 * forward): the peers sdpa_flash and sdpa_cudnn in both passes under one name. */
static const char FWD_ROWS[] =
    "g,d,c,01,cpu,1,2,64,64,0,fp16,ok,4,,0,0,0.0002,pass,5,-,,fwd\n"
    "g,d,c,06,fa2_full,1,2,64,64,0,fp16,ok,0.5,,0,0,0.0002,pass,5,warm,,fwd\n"
    "g,d,c,sdpa_flash,sdpa_flash,1,2,64,64,0,fp16,ok,1,,0,0,0.0001,pass,5,warm,,fwd\n";
static const char BWD_ROWS[] =
    "g,d,c,11,backward_naive,1,2,64,64,0,fp16,ok,8,,65536,65536,0.001,pass,5,warm,,bwd\n"
    "g,d,c,12,backward_tiled,1,2,64,64,0,fp16,ok,2,,33280,33280,0.001,pass,5,warm,,bwd\n"
    "g,d,c,13,backward_fa2,1,2,64,64,0,fp16,ok,1,,33280,33280,0.001,pass,5,warm,,bwd\n"
    "g,d,c,13d,backward_fa2_deterministic,1,2,64,64,0,fp16,ok,1.25,,33296,33296,0.001,pass,5,warm,,bwd\n"
    "g,d,c,sdpa_flash,sdpa_flash,1,2,64,64,0,fp16,ok,1.5,,32768,,0.001,pass,5,warm,,bwd\n"
    "g,d,c,sdpa_cudnn,sdpa_cudnn,1,2,64,64,0,fp16,ok,0.25,,0,,0.001,pass,5,warm,,bwd\n";

/* The header of attn-bench's CSV up to pass, as before the bytes columns: the rows above have no bytes. */
static const char PASS_HEADER[] = "gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes,"
                                  "workspace_bytes,max_abs_err,check,repeats,l2,note,pass\n";

/* dir/NAME holding PASS_HEADER and rows; its path into path */
static void write_csv_file(const char *dir, const char *name, const char *rows, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(PASS_HEADER, f), fputs(rows, f), fclose(f);
}

/* The line of text after `from` that begins with `first`, into buf; "" if none. */
static const char *table_line(const char *from, const char *first, char *buf, size_t cap) {
    char needle[64];
    snprintf(needle, sizeof needle, "\n%s", first);
    const char *at = from ? strstr(from, needle) : NULL;
    buf[0] = '\0';
    if (at) snprintf(buf, cap, "%.*s", (int)strcspn(at + 1, "\n"), at + 1);
    return buf;
}

/* report.sh MODE on path into out (exit status returned) */
static int report(const char *mode, const char *path, const char *extra) {
    char cmd[800];
    snprintf(cmd, sizeof cmd, "sh bench/report.sh %s %s %s 2>&1", mode, path, extra);
    return run_cmd(cmd, out, sizeof out);
}

/* The backward's rows change nothing of the forward's tables (the tables of the forward's rows alone
 * are the start of the tables of both, byte for byte: no backward row enters a forward panel, its "vs
 * best" or its comparison with the peers), and get panels of their own after them: vs 11 (stage 11's
 * time over the row's), vs best among the backward rows, the memory beyond the inputs and gradients,
 * TFLOP/s at 2.5 times the forward's FLOPs, each fast backward stage against the peers' backward, and
 * the road table 12 vs 11, 13 vs 12, 13d vs 13. */
Test(bench, report_backward_panels_beside_an_unchanged_forward) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", fwd[700], both[700], rows[4096];
    cr_assert_not_null(mkdtemp(dir));
    write_csv_file(dir, "fwd.csv", FWD_ROWS, fwd, sizeof fwd);
    snprintf(rows, sizeof rows, "%s%s", FWD_ROWS, BWD_ROWS);
    write_csv_file(dir, "both.csv", rows, both, sizeof both);
    static char alone[sizeof out];
    cr_assert_eq(report("tables", fwd, ""), 0, "%s", out);
    snprintf(alone, sizeof alone, "%s", out);
    cr_assert_eq(report("tables", both, ""), 0, "%s", out);
    cr_assert(!strncmp(out, alone, strlen(alone)), "the forward's tables changed:\n%s\n---- alone:\n%s", out, alone);
    const char *bw = out + strlen(alone), *panel = strstr(bw, "== Backward: D=64, non-causal");
    cr_assert(panel && !strstr(alone, "backward_"), "no backward panel, or a backward row in the forward's:\n%s", out);
    char line[512];
    cr_assert(strstr(line_with(alone, " 06 fa2_full ", line, sizeof line), " 1.00x "), "06's vs best: %s", line);
    cr_assert(strstr(line_with(panel, " 11 backward_naive ", line, sizeof line), " 64.0 KiB "), "11: %s", line);
    /* 12: 2 ms, 4.00x stage 11, 0.12x the best (cuDNN's 0.25 ms); 2.5 x 2097152 FLOPs in 2 ms */
    cr_assert(strstr(line_with(panel, " 12 backward_tiled ", line, sizeof line), " 2.000 ") && strstr(line, " 4.00x ") &&
                  strstr(line, " 0.12x ") && strstr(line, " 0.00262 "), "12: %s", line);
    cr_assert(strstr(line_with(panel, " sdpa_flash ", line, sizeof line), " 1.500 "), "FA2's backward: %s", line);
    cr_assert(strstr(bw, "stage 13 against the peers' backward (FA2, cuDNN)") &&
                  strstr(bw, "stage 13d against the peers' backward"), "%s", bw);
    cr_assert(strstr(table_line(strstr(bw, "stage 13 against"), "64 ", line, sizeof line), " 1.50 ") &&
                  strstr(line, " 0.25"), "13 vs FA2 (1.5 / 1) and cuDNN (0.25 / 1): %s", line);
    const char *road = strstr(bw, "12 vs 11  13 vs 12  13d vs 13");
    cr_assert(road && strstr(table_line(road, "64  no ", line, sizeof line), " 4.00 ") && strstr(line, " 2.00 ") &&
                  strstr(line, " 0.80"), "the road table:\n%s", bw);
    cr_assert(strstr(table_line(strstr(alone, "== Stage 06 against the peers (FA2)"), "64 ", line, sizeof line), " 2.00"),
              "06 against the forward's FA2 (1 / 0.5):\n%s", alone);
    snprintf(rows, sizeof rows, "rm %s %s && rmdir %s", fwd, both, dir);
    cr_assert_eq(run_cmd(rows, out, sizeof out), 0, "%s", out);
}

/* A backward stage's README table (report.sh stage) has vs 11, vs the stage before it (13d: 13) and the
 * peers' backward; the top README's backward table (bcompact) the speedups over stage 11; a CSV with
 * no backward row has no backward table (exit 3). A bwd row without TFLOP/s gets 2.5 times the
 * forward's FLOPs over its time; a pass other than fwd or bwd is a malformed row; merge keeps the
 * pass, and a CSV without the column merges as the forward's. */
Test(bench, report_backward_stage_table_compact_and_merge) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", fwd[700], both[700], rows[4096], cmd[2048], line[512];
    cr_assert_not_null(mkdtemp(dir));
    write_csv_file(dir, "fwd.csv", FWD_ROWS, fwd, sizeof fwd);
    snprintf(rows, sizeof rows, "%s%sg,d,c,12,sideways,1,2,64,64,0,fp16,ok,2,,0,0,0.001,pass,5,warm,,up\n", FWD_ROWS,
             BWD_ROWS);
    write_csv_file(dir, "both.csv", rows, both, sizeof both);
    cr_assert_eq(report("stage", both, "13d"), 0, "%s", out);
    cr_assert(strstr(out, "| vs 11 | vs 13 | extra mem | check | FA2 TFLOP/s | cuDNN TFLOP/s | vs FA2 | vs cuDNN |"), "%s",
              out);
    /* 13d: 1.25 ms; 6.40x stage 11; 13's time over its own 0.80; FA2 1.5 / 1.25, cuDNN 0.25 / 1.25 */
    cr_assert(strstr(out, "| 64 | no | 64 | 1.250 | 0.00419 | 6.40x | 0.80 | 32.5 KiB | pass 1.0e-03 | 0.00350 | 0.021 | 1.20 | 0.20 |"),
              "%s", out);
    cr_assert(strstr(out, "skipped a malformed row"), "the pass 'up' was taken: %s", out);
    cr_assert_eq(report("bcompact", both, ""), 0, "%s", out);
    cr_assert(strstr(out, "**Backward TFLOP/s at N = 64**") && strstr(line_with(out, "| 12 backward_tiled |", line, sizeof line),
                                                                      "0.00262 (4.00x)"), "%s", out);
    cr_assert_null(strstr(out, "fa2_full"), "a forward row in the backward's table: %s", out);
    cr_assert_eq(report("bcompact", fwd, ""), 3, "%s", out);
    cr_assert_eq(out[0], '\0', "%s", out);
    snprintf(cmd, sizeof cmd, "printf '%sg,d,c,sdpa_cudnn,sdpa_cudnn,1,2,64,64,0,fp16,ok,1,,0,,,,5,warm,\\n' > %s/old.csv && "
             "sh bench/report.sh merge %s/m.csv %s %s/old.csv && cat %s/m.csv", REPORT_HEADER, dir, dir, both, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    /* merged with the TFLOP/s derived: 2.5 x 2097152 / 1.25 ms backward, 2097152 / 1 ms forward; the four
     * byte columns after pass, and the nine of the run's facts, stay empty for rows that had none */
    cr_assert(strstr(out, ",13d,backward_fa2_deterministic,1,2,64,64,0,fp16,ok,1.25,0.0041943,") &&
                  strstr(out, ",warm,,bwd,,,,,,,,,,,,,\n") &&
                  strstr(out, ",sdpa_cudnn,sdpa_cudnn,1,2,64,64,0,fp16,ok,1,0.00209715,0,,,,5,warm,,fwd,,,,,,,,,,,,,\n"),
              "%s", out);
    snprintf(cmd, sizeof cmd, "rm %s %s %s/old.csv %s/m.csv && rmdir %s", fwd, both, dir, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
}

/* ---- the run's facts, the summary of ratios, and the peers' check against the stages' ------------ */

/* The full header: attn-bench's, with the nine facts of the run after the bytes. */
static const char FACTS_HEADER[] = "gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes,"
                                   "workspace_bytes,max_abs_err,check,repeats,l2,note,pass,hbm_read,hbm_written,"
                                   "tile_read,tile_written,warmup_ms,gpus,driver,sm_clock_mhz,power_limit_w,torch,"
                                   "cudnn,triton,fa4\n";

/* dir/NAME holding header and rows; its path into path */
static void write_with_header(const char *dir, const char *name, const char *header, const char *rows, char *path,
                              size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(header, f), fputs(rows, f), fclose(f);
}

/* A CSV from before the facts (bench/results/bench.csv is one) still renders, and says what it did not
 * record: every fact "not recorded", stage 10's GPUs too, in the line above the tables and beside stage
 * 10 in the top README's table. */
Test(bench, report_of_a_csv_without_the_facts_says_not_recorded) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[700];
    cr_assert_not_null(mkdtemp(dir));
    write_with_header(dir, "old.csv", REPORT_HEADER,
                      "G,d,c,09,overlap,1,2,64,64,0,fp16,ok,1,,0,0,0.0002,pass,5,warm,\n"
                      "G,d,c,10,context_parallel,1,2,64,64,0,fp16,ok,1.1,,0,0,0.0002,pass,5,warm,\n"
                      "G,d,c,torch_naive,torch_naive,1,2,64,64,0,fp16,ok,4,,0,0,0.0002,pass,5,warm,\n",
                      csv, sizeof csv);
    cr_assert_eq(report("facts", csv, ""), 0, "%s", out);
    cr_assert(strstr(out, "**Recorded with the run:** warm-up not recorded; L2 warm; GPUs a row ran on: not recorded, "
                          "stage 10's GPUs not recorded; driver not recorded; SM clock (the peak the device reports) "
                          "not recorded; power limit not recorded; PyTorch not recorded, cuDNN not recorded, Triton not recorded, FlashAttention-4 "
                          "not recorded."),
              "%s", out);
    cr_assert_eq(report("compact", csv, ""), 0, "%s", out);
    cr_assert(strstr(out, "| 10 context_parallel (GPUs not recorded) |"), "%s", out);
    cr_assert_eq(report("tables", csv, "md"), 0, "%s", out);
    cr_assert(strstr(out, "warm-up not recorded"), "the tables' header lacks the facts: %s", out);
    unlink(csv);
    rmdir(dir);
}

/* A CPU-only sweep records that no GPU was used (driver, SM clock, power limit) and the warm-up it
 * was given, and its report says so, and that no peer ran. */
Test(bench, cpu_only_sweep_says_no_gpu_in_its_facts) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[600];
    bench_into_fresh_csv(dir, csv, sizeof csv,
                         "--cpu-only --batch 1 --heads 2 --seqs 33 --dims 32 --causal 0 --stages 01,10 --warmup-ms 7 "
                         "--repeat-ms 1");
    cr_assert_eq(report("facts", csv, ""), 0, "%s", out);
    cr_assert(strstr(out, "warm-up 7 ms of untimed runs before each GPU point's timing; L2 not used (no GPU row was "
                          "timed); GPUs a row ran on: none (the CPU stages alone ran), stage 10 did not run; driver no "
                          "GPU; SM clock (the peak the device reports) no GPU; power limit no GPU; PyTorch, cuDNN, Triton, FlashAttention-4: no peer "
                          "ran."),
              "%s", out);
    unlink(csv);
    rmdir(dir);
}

/* make bench's facts from nvidia-smi go into the rows that left them empty (never over a row's own:
 * attn-bench's "no-gpu" stays), the peers' versions and stage 10's GPUs reach the report, a library the
 * peers did not find reads "not run"; a --set of another column, or of a value that could break the CSV
 * or a README, is refused. */
Test(bench, report_merge_sets_the_facts_only_where_empty) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[700], cmd[2048];
    cr_assert_not_null(mkdtemp(dir));
    write_with_header(dir, "in.csv", FACTS_HEADER,
                      "G,d,c,09,overlap,1,2,64,64,0,fp16,ok,1,,0,0,0.0002,pass,5,warm,,fwd,,,,,100,1,CUDA 13.0,1980,,,,,\n"
                      "G,d,c,10,context_parallel,1,2,64,64,0,fp16,ok,1.1,,0,0,0.0002,pass,5,warm,,fwd,,,,,100,2,CUDA 13.0,"
                      "1980,,,,,\n"
                      "G,d,c,01,naive_cpu,1,2,64,64,0,fp16,ok,9,,0,0,0.0002,pass,5,-,,fwd,,,,,100,0,no-gpu,no-gpu,no-gpu,,,,\n"
                      "G,d,c,sdpa_cudnn,sdpa_cudnn,1,2,64,64,0,fp16,ok,1.2,,0,,0.0002,pass,5,warm,,fwd,,,,,100,1,,,,2.9.1,"
                      "91002,-,-\n",
                      csv, sizeof csv);
    snprintf(cmd, sizeof cmd, "sh bench/report.sh merge --set power_limit_w=700.00 --set sm_clock_mhz=1980 %s/m.csv %s "
             "&& cat %s/m.csv && sh bench/report.sh facts %s/m.csv && sh bench/report.sh stage %s/m.csv 10",
             dir, csv, dir, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, ",100,1,CUDA 13.0,1980,700.00,,,,\n") && strstr(out, ",no-gpu,no-gpu,no-gpu,,,,\n") &&
                  strstr(out, ",100,1,,1980,700.00,2.9.1,91002,-,-\n"),
              "%s", out);
    cr_assert(strstr(out, "GPUs a row ran on: 1, 2, stage 10 on 2 GPUs; driver CUDA 13.0, no GPU; SM clock (the peak the device "
                          "reports) 1980 MHz, no GPU; power limit 700.00 W, no GPU; PyTorch 2.9.1, cuDNN 91002, Triton not run, FlashAttention-4 not "
                          "run."),
              "%s", out);
    cr_assert(strstr(out, "Stage 10 on **G** (B=1, H=2, fp16; 2 GPUs; date d, commit `c`)"), "%s", out);
    const char *bad[] = {"--set gpu=x", "--set power_limit_w=7,00", "--set torch='2|9'", "--set driver=", "--set"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd, "sh bench/report.sh merge %s %s/x.csv %s", bad[i], dir, csv);
        cr_assert_eq(run_cmd(cmd, out, sizeof out), 2, "%s: %s", bad[i], out);
        cr_assert(strstr(out, "report: merge: "), "%s: %s", bad[i], out);
    }
    snprintf(cmd, sizeof cmd, "test ! -e %s/x.csv && rm %s %s/m.csv && rmdir %s", dir, csv, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
}

/* The summary under the top README's table: each pair's ratio (the second's time over the first's) as
 * its range over N >= 4096 in every (D, causal), and the points below 4096 where it is under 1. */
Test(bench, report_summary_ranges_and_points_under_one) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", csv[700];
    cr_assert_not_null(mkdtemp(dir));
    write_with_header(dir, "s.csv", PASS_HEADER,
                      "G,d,c,09,overlap,1,2,2048,64,0,fp16,ok,1,,0,0,0.0002,pass,5,warm,,fwd\n"
                      "G,d,c,sdpa_cudnn,sdpa_cudnn,1,2,2048,64,0,fp16,ok,0.9,,0,0,0.0002,pass,5,warm,,fwd\n"
                      "G,d,c,09,overlap,1,2,1024,64,0,fp16,ok,1,,0,0,0.0002,pass,5,warm,,fwd\n"
                      "G,d,c,sdpa_cudnn,sdpa_cudnn,1,2,1024,64,0,fp16,ok,1.5,,0,0,0.0002,pass,5,warm,,fwd\n"
                      "G,d,c,09,overlap,1,2,4096,64,0,fp16,ok,2,,0,0,0.0002,pass,5,warm,,fwd\n"
                      "G,d,c,sdpa_cudnn,sdpa_cudnn,1,2,4096,64,0,fp16,ok,2.2,,0,0,0.0002,pass,5,warm,,fwd\n"
                      "G,d,c,09,overlap,1,2,8192,64,0,fp16,ok,4,,0,0,0.0002,pass,5,warm,,fwd\n"
                      "G,d,c,sdpa_cudnn,sdpa_cudnn,1,2,8192,64,0,fp16,ok,5,,0,0,0.0002,pass,5,warm,,fwd\n"
                      "G,d,c,09,overlap,1,2,8192,64,1,fp16,FAIL,4,,0,0,0.1,FAIL,5,warm,,fwd\n"
                      "G,d,c,sdpa_cudnn,sdpa_cudnn,1,2,8192,64,1,fp16,ok,5,,0,0,0.0002,pass,5,warm,,fwd\n",
                      csv, sizeof csv);
    cr_assert_eq(report("summary", csv, ""), 0, "%s", out);
    cr_assert(strstr(out, "| ratio | D=64, N >= 4096 | D=64 causal, N >= 4096 | N < 4096: under 1 at |"), "%s", out);
    /* 2.2 / 2 and 5 / 4; a FAILed row is no ratio; at 1024 09 is faster, at 2048 cuDNN (0.9) */
    cr_assert(strstr(out, "| 09 / cuDNN | 1.100-1.250 | - | 1 of 2: D=64: N=2048 (0.900) |"), "%s", out);
    unlink(csv);
    rmdir(dir);
}

/* The peers' forward check is the stages' (suite/check.c): the tolerance bench/peers.py gives the element
 * the C check found worst is the one build/attn printed for it, with the same err/tol, at an ordinary
 * scale and at scales where the rule of the range takes over. Before, the peers' scores bound held fp16's
 * u as well (their tolerance about 10x the stages'). Skipped without python3 (no PyTorch needed). */
Test(bench, peers_check_o_by_the_stages_rule) {
    if (run_cmd("python3 -c 'import sys'", out, sizeof out) != 0) cr_skip_test("python3 not found: peers.py not tested");
    const char *scales[] = {"0.25", "60", "200"};
    for (size_t i = 0; i < sizeof scales / sizeof *scales; i++) {
        char dir[] = "/tmp/attn-bench-test.XXXXXX", args[800], cmd[1600], want[64] = "", ratio[32] = "";
        long long b, h, n, d;
        cr_assert_not_null(mkdtemp(dir));
        snprintf(args, sizeof args, "--stage 01 --batch 1 --heads 2 --seq 33 --dim 16 --scale %s --save %s "
                 "--save-inputs --check", scales[i], dir);
        cr_assert_eq(run_bin(attn_bin(), args, out, sizeof out), 0, "%s", out);
        const char *w = strstr(out, "worst element   [b=");
        cr_assert(w && sscanf(w, "worst element   [b=%lld, h=%lld, n=%lld, d=%lld] got %*s want %*s tol %63s "
                              "(err/tol %31[0-9.]", &b, &h, &n, &d, want, ratio) == 6, "%s", out);
        snprintf(cmd, sizeof cmd, "python3 tests/peers_tolerance.py %s 1 2 33 16 0 %s %lld %lld %lld %lld", dir,
                 scales[i], b, h, n, d);
        cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
        snprintf(args, sizeof args, "tol %s ratio %s\n", want, ratio);
        cr_assert_str_eq(out, args, "scale %s: the peers' rule against build/attn's", scales[i]);
        snprintf(cmd, sizeof cmd, "rm -r %s", dir);
        cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    }
}

/* --decode (issue 60): one row per forward stage and (B, N_k) point, in the decoding CSV's columns
 * (H_kv, N_q, N_k; kv_bytes = 2 B H_kv N_k D x 2 bytes; kv_gbps = kv_bytes / time): the model 15m runs
 * and is checked, the stages that take no grouped-query heads say unsupported. bench/decode_peers.py
 * writes the same columns (make bench-decode merges the two under one header). */
static const char DECODE_HEADER[] = "gpu,date,commit,stage,name,B,H,H_kv,N_q,N_k,D,causal,dtype,status,ms,"
                                    "kv_bytes,kv_gbps,tflops,check,max_abs_err,repeats,l2,note,warmup_ms,driver,"
                                    "sm_clock_mhz\n";

Test(bench, decode_sweep_writes_the_decoding_columns) {
    char dir[] = "/tmp/attn-bench-test.XXXXXX", args[1024], csv[600], f[64];
    temp_dir_and_csv(dir, csv, sizeof csv);
    snprintf(args, sizeof args, "--decode --cpu-only --batches 1,2 --heads 8 --kv-heads 2 --queries 3 --seqs 40 "
             "--dims 32 --warmup-ms 0 --repeat-ms 1 --csv %s", csv);
    cr_assert_eq(bench(args), 0, "%s", out);
    const char *text = slurp(csv);
    cr_assert(text && !strncmp(text, DECODE_HEADER, strlen(DECODE_HEADER)), "header: %.300s", text ? text : "");
    int rows = 0, forward = 0, m15 = 0;
    for (int i = 0; i < attn_num_stages; i++) forward += attn_stages[i].pass == ATTN_FORWARD;
    for (const char *line = text + strlen(DECODE_HEADER); *line; line += strcspn(line, "\n") + 1, rows++) {
        const long long B = atoll(csv_field(line, 5, f, sizeof f));
        cr_assert(!strcmp(csv_field(line, 7, f, sizeof f), "2") && !strcmp(csv_field(line, 8, f, sizeof f), "3") &&
                      !strcmp(csv_field(line, 9, f, sizeof f), "40"), "H_kv, N_q, N_k: %.200s", line);
        cr_assert_eq(atoll(csv_field(line, 15, f, sizeof f)), 2 * B * 2 * 40 * 32 * 2, "kv_bytes: %.200s", line);
        if (strncmp(csv_field(line, 3, f, sizeof f), "15m", 4)) continue;
        m15++;
        cr_assert(!strcmp(csv_field(line, 13, f, sizeof f), "ok") && !strcmp(csv_field(line, 18, f, sizeof f), "pass"),
                  "15m: %.300s", line);
        cr_assert(atof(csv_field(line, 16, f, sizeof f)) > 0, "no bandwidth: %.300s", line);
    }
    cr_assert(rows == 2 * forward && m15 == 2, "%d rows (want %d), %d of 15m", rows, 2 * forward, m15);
    if (run_cmd("python3 -c 'import sys; sys.path.insert(0, \"bench\"); import decode_peers; "
                "print(\",\".join(decode_peers.COLS))'", out, sizeof out) == 0)
        cr_assert_str_eq(out, DECODE_HEADER, "bench/decode_peers.py's columns");
    unlink(csv);
    rmdir(dir);
}
