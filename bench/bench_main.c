/*
 * bench_main.c: every registered stage side by side, the measuring half of `make bench`.
 *
 * It sweeps (D, N, causal) points and runs every stage of attn_stages[] at every point it can
 * through attn_run(): warm-up, the median of adaptive repeats, a spot check of sampled rows against
 * the double CPU reference. It writes one CSV row per stage and point and one progress line per run
 * on stderr, nothing else: tables, README blocks and plots come from bench/report.sh, which reads
 * this CSV (and the peers' CSV) and needs only sh and awk. A point a stage cannot run is a row with
 * the reason: OOM, cpu-skip, gpu-skip, unsupported, unavailable, no-gpu; a wrong result is FAIL. A
 * backward stage (11 on, 12m) is timed alone after its forward, its TFLOP/s at 2.5 times the forward's
 * FLOPs, and its gradients checked; --no-backward and --no-forward leave one pass out.
 *
 * Exit status: 0; 2 for bad input, refused before the sweep: a bad flag, a point of the sweep that is no
 * valid problem (B x H x N x D past 2^62 elements), a --csv that is not a file's path (empty, ending in
 * '/', under a file, a directory, a FIFO, a device) or where no file can be created (a missing folder,
 * no permission); 1 when the CSV cannot be written after the sweep, or a stage FAILed or errored.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "harness.h"
#include "hold_signals.h"
#include "stage.h"

#define MAX_LIST 32
#define MAX_STAGES 64
#define MIN_REP 3 /* timed runs per point: at least 3 for a median, at most 50 */
#define MAX_REP 50
#define MAX_WARMUP 20000 /* untimed runs: 100 ms of a 5 us kernel */
#define DEFAULT_DIR "build/bench"
#define DEFAULT_CSV DEFAULT_DIR "/bench_stages.csv"
#define DECODE_CSV DEFAULT_DIR "/decode_stages.csv" /* --decode's default */

typedef struct {
    int quick, cpu_only, cold, dry_run, help, no_backward, no_forward;
    int decode; /* --decode: the decoding sweep (N_q new queries over N_k cached keys, --seqs as N_k) */
    const char *csv;
    char commit[304]; /* clean_field()'s, at most 300 bytes */
    int64_t B, H, seqs[MAX_LIST], dims[MAX_LIST];
    int64_t kv_heads, queries, batches[MAX_LIST]; /* --decode's H_kv, N_q and batch sizes */
    int nseqs, ndims, nbatches, causal_mode;      /* causal_mode -1: both */
    double repeat_ms, warmup_ms, cpu_limit_s, gpu_limit_s;
    int64_t check_rows;
    int stage_sel[MAX_STAGES], nstage_sel, cpu_limit_set, causal_set;
} cfg_t;

/* One stage at one point: one CSV line. NAN where a value is absent. */
typedef struct {
    const attn_stage *s;
    attn_problem p;
    char status[16], check[8], note[320];
    double ms, tflops, extra, workspace, max_err, run_s, check_s; /* run_s, check_s: see progress() */
    int repeats;
    int gpus; /* the GPUs the run used (stage 10: every one present); 0 before it ran */
} row_t;

static void usage(FILE *f) {
    fprintf(f,
        "usage: attn-bench [options]\n"
        "Runs every registered stage over a sweep of shapes: one CSV row per stage and point, one\n"
        "progress line per run on stderr. bench/report.sh turns the CSV into tables and plots.\n\n"
        "  --quick            small sweep: B=1 H=4 N=128,512,1024 D=64, causal and not\n"
        "  --batch B          batch (default 4 with a GPU, 1 without)\n"
        "  --heads H          heads (default 32 with a GPU, 4 without)\n"
        "  --seqs LIST        sequence lengths (default 512,...,16384 with a GPU, 256,512,1024 without)\n"
        "  --dims LIST        head dims (default 64,128)\n"
        "  --causal both|0|1  (default both)\n"
        "  --stages LIST      only these stages, e.g. 02,06 (default: every registered one)\n"
        "  --no-backward      the forward stages alone (no backward stage: 11 on, 12m)\n"
        "  --no-forward       the backward stages alone (each still runs its forward, untimed)\n"
        "  --repeat-ms MS     timed work to aim for per point (default 300), in 3..50 runs; a run of\n"
        "                     250 ms or more is timed once\n"
        "  --warmup-ms MS     untimed work before a GPU stage's timed runs (default 100; 0: 1 or 2\n"
        "                     runs): the H200 drops its clock about 20%% within 100 ms of full load\n"
        "                     (power cap), so 100 times every point at the clock it holds under load\n"
        "  --check-rows K     random rows spot-checked per point against the double reference\n"
        "                     (default 48; 0..1048576; 0 checks nothing: the check column reads -)\n"
        "  --cpu-limit S      skip the CPU stage (cpu-skip) where one run is estimated above S\n"
        "                     seconds from its measured FLOP rate (default 1; 5 with --quick)\n"
        "  --gpu-limit S      skip a GPU stage (gpu-skip) where one run is estimated above S seconds\n"
        "                     from its time at the largest smaller N of the panel, scaled by the\n"
        "                     FLOPs (default 10: the slowest full-sweep row, stage 02 at N = 8192,\n"
        "                     D = 128, took 5.3 s on the H200); a stage out of memory stays OOM\n"
        "  --cold             cold L2: write 4x the L2 size before every timed GPU run (default warm)\n"
        "  --cpu-only         run no GPU stage, as on a machine without one\n"
        "  --csv PATH         CSV to write (default build/bench/bench_stages.csv), tried before the\n"
        "                     sweep; a directory, FIFO or device there is refused, never replaced,\n"
        "                     as is a path that names no file (empty, ending in '/', under a file)\n"
        "  --dry-run          check the flags, every point's shape and the CSV path, print the plan\n"
        "                     line, run nothing (make bench asks this before the peers run)\n"
        "  --commit STR       commit recorded in the CSV (make passes git rev-parse --short HEAD);\n"
        "                     ',' and '|' become ';', '\"' becomes \"'\", white space one space\n"
        "  --decode           the decoding sweep instead (make bench-decode): --queries new queries\n"
        "                     a sequence over a cache of N_k keys, --seqs the N_k (default\n"
        "                     8192,...,131072), --batches B (default 1,8), --heads 32, --kv-heads 8,\n"
        "                     --dims 128, --causal 0; every forward stage that takes the shape (the\n"
        "                     rest: unsupported rows); its CSV (default build/bench/decode_stages.csv)\n"
        "                     has H_kv, N_q, N_k and the K/V bandwidth, kv_gbps = K and V bytes / time\n"
        "  --batches LIST     --decode's batch sizes\n"
        "  --kv-heads H_KV    --decode's K/V heads, dividing --heads (default 8)\n"
        "  --queries N_Q      --decode's new queries a sequence (default 1)\n"
        "  --help\n");
}

/* s as a CSV field, by bench/peers.py's rule (clean()), so both write the same commit: ',' and '|'
 * become ';', '"' becomes \'; runs of white space (newlines too) one space, none at the ends; at most
 * 300 bytes; "unknown" if nothing is left. */
static void clean_field(char *dst, size_t cap, const char *s) {
    const size_t max = cap - 1 < 300 ? cap - 1 : 300;
    size_t n = 0;
    int space = 0; /* a space is written only before the next other character: none at the ends */
    for (; *s; s++) {
        const char ch = *s == ',' || *s == '|' ? ';' : *s == '"' ? '\'' : *s;
        if (isspace((unsigned char)ch)) {
            space = n > 0;
            continue;
        }
        if (space && n < max) dst[n++] = ' ';
        if (n < max) dst[n++] = ch;
        space = 0;
    }
    dst[n] = '\0';
    if (!n) snprintf(dst, cap, "unknown");
}

/* Whole-string integer in [lo, hi] (attn_parse_integer); 0 on success. */
static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    long long v;
    if (attn_parse_integer(s, lo, hi, &v) != 0) return -1;
    *out = v;
    return 0;
}

/* The items of a comma-separated list, each one checked by item(); an empty item (",64", "64,,128")
 * is refused, where strtok would skip it. -1: bad; -2: an item repeats (the message printed, naming
 * it: a repeated shape or stage would give duplicate rows). */
static int parse_items(const char *flag, const char *s, int max, int (*item)(const char *, void *, int),
                       void *ctx, int *n) {
    char buf[512];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    *n = 0;
    for (char *p = buf, *comma; p; p = comma ? comma + 1 : NULL) {
        if ((comma = strchr(p, ','))) *comma = '\0';
        if (!*p || *n == max) return -1;
        const int r = item(p, ctx, (*n)++);
        if (r == -2) fprintf(stderr, "attn-bench: %s lists %s twice (got '%s')\n", flag, p, s);
        if (r) return r;
    }
    return 0;
}

typedef struct {
    int64_t lo, hi, *out;
} int_list;

static int int_item(const char *tok, void *ctx, int k) {
    const int_list *l = ctx;
    if (parse_i64(tok, l->lo, l->hi, &l->out[k]) != 0) return -1;
    for (int j = 0; j < k; j++)
        if (l->out[j] == l->out[k]) return -2;
    return 0;
}

static int stage_item(const char *tok, void *ctx, int k) {
    int *sel = ctx;
    const attn_stage *st = attn_find_stage(tok);
    if (!st) return -1;
    sel[k] = (int)(st - attn_stages);
    for (int j = 0; j < k; j++)
        if (sel[j] == sel[k]) return -2; /* also "01,naive_cpu": one stage by two names */
    return 0;
}

static int parse_list(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out, int *n) {
    int_list l = {lo, hi, out};
    return parse_items(flag, s, MAX_LIST, int_item, &l, n);
}

/* One flag with its value; -1 with the message printed when the value is bad: the message names what
 * the flag takes, from the same bounds the parse used (lo..hi; list: a comma-separated list). */
static int set_flag(cfg_t *c, const char *flag, const char *val) {
    int bad = 0, list = 0;
    int64_t lo = 1, hi = 0; /* hi > 0: an integer flag */
    double d = 0;
    if (!strcmp(flag, "--repeat-ms") || !strcmp(flag, "--warmup-ms") || !strcmp(flag, "--cpu-limit") ||
        !strcmp(flag, "--gpu-limit")) {
        /* as strictly as build/attn's --scale: strtod alone took " 5", "+5" and "0x10" */
        bad = attn_parse_real(val, &d) != 0 || !(d >= 0) || !isfinite(d);
    }
    if (bad) {
    } else if (!strcmp(flag, "--batch")) hi = ATTN_MAX_B, bad = parse_i64(val, lo, hi, &c->B);
    else if (!strcmp(flag, "--heads")) hi = ATTN_MAX_H, bad = parse_i64(val, lo, hi, &c->H);
    else if (!strcmp(flag, "--kv-heads")) hi = ATTN_MAX_H, bad = parse_i64(val, lo, hi, &c->kv_heads);
    else if (!strcmp(flag, "--queries")) hi = ATTN_MAX_N, bad = parse_i64(val, lo, hi, &c->queries);
    else if (!strcmp(flag, "--batches"))
        hi = ATTN_MAX_B, list = 1, bad = parse_list(flag, val, lo, hi, c->batches, &c->nbatches);
    else if (!strcmp(flag, "--seqs"))
        hi = ATTN_MAX_N, list = 1, bad = parse_list(flag, val, lo, hi, c->seqs, &c->nseqs);
    else if (!strcmp(flag, "--dims"))
        hi = ATTN_MAX_D, list = 1, bad = parse_list(flag, val, lo, hi, c->dims, &c->ndims);
    else if (!strcmp(flag, "--stages"))
        bad = parse_items(flag, val, MAX_STAGES, stage_item, c->stage_sel, &c->nstage_sel);
    else if (!strcmp(flag, "--check-rows"))
        lo = 0, hi = 1 << 20, bad = parse_i64(val, lo, hi, &c->check_rows);
    else if (!strcmp(flag, "--repeat-ms")) c->repeat_ms = d;
    else if (!strcmp(flag, "--warmup-ms")) c->warmup_ms = d;
    else if (!strcmp(flag, "--cpu-limit")) c->cpu_limit_s = d, c->cpu_limit_set = 1;
    else if (!strcmp(flag, "--gpu-limit")) c->gpu_limit_s = d;
    else if (!strcmp(flag, "--csv")) c->csv = val;
    else if (!strcmp(flag, "--commit"))
        clean_field(c->commit, sizeof c->commit, val);
    else if (!strcmp(flag, "--causal")) {
        c->causal_set = 1;
        if (!strcmp(val, "both")) c->causal_mode = -1;
        else if (!strcmp(val, "0") || !strcmp(val, "1")) c->causal_mode = val[0] - '0';
        else bad = 1;
    }
    if (!bad) return 0;
    if (bad == -2) return -1; /* a repeated item: parse_items said so */
    char what[160];
    if (list)
        snprintf(what, sizeof what, "a comma-separated list of 1 to %d integers from %lld to %lld", MAX_LIST,
                 (long long)lo, (long long)hi);
    else if (hi > 0)
        snprintf(what, sizeof what, "an integer from %lld to %lld", (long long)lo, (long long)hi);
    else if (!strcmp(flag, "--stages"))
        snprintf(what, sizeof what, "a comma-separated list of stage ids (build/attn --list shows them)");
    else if (!strcmp(flag, "--causal")) snprintf(what, sizeof what, "both, 0 or 1");
    else snprintf(what, sizeof what, "a finite number >= 0");
    fprintf(stderr, "attn-bench: %s must be %s (got '%s')\n", flag, what, val);
    return -1;
}

/* The flags, matched whole: the switches, then those that take a value (FLAG VALUE or FLAG=VALUE). */
static const char *const switches[] = {"--quick", "--cold", "--cpu-only", "--dry-run", "--no-backward", "--no-forward",
                                       "--decode"};
static const char *const value_flags[] = {"--batch",     "--heads",     "--seqs",      "--dims",      "--causal",
                                          "--stages",    "--repeat-ms", "--warmup-ms", "--check-rows", "--cpu-limit",
                                          "--gpu-limit", "--csv",       "--commit",    "--batches",   "--kv-heads",
                                          "--queries"};
#define NSWITCH (int)(sizeof switches / sizeof switches[0])
#define NFLAGS (NSWITCH + (int)(sizeof value_flags / sizeof value_flags[0]))

/* The index of flag name a (its first len bytes) in switches then value_flags; -1 if none. */
static int flag_index(const char *a, size_t len) {
    for (int f = 0; f < NFLAGS; f++) {
        const char *name = f < NSWITCH ? switches[f] : value_flags[f - NSWITCH];
        if (strlen(name) == len && !strncmp(a, name, len)) return f;
    }
    return -1;
}

static int print_usage_to_stdout(void) {
    usage(stdout);
    /* a --help that never reached stdout (a full disk, a closed pipe) is a failure, as in build/attn */
    int e = fflush(stdout) != 0 ? errno : 0;
    if (!e && !ferror(stdout)) return 0;
    fprintf(stderr, "attn-bench: cannot write to standard output: %s\n", e ? strerror(e) : "write error");
    return 1;
}

static int parse_args(int argc, char **argv, cfg_t *c) {
    memset(c, 0, sizeof *c);
    c->causal_mode = -1, c->repeat_ms = 300, c->warmup_ms = 100, c->cpu_limit_s = 1.0, c->gpu_limit_s = 10.0;
    c->check_rows = 48;
    snprintf(c->commit, sizeof c->commit, "unknown");
    c->csv = DEFAULT_CSV;
    int seen[NFLAGS] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '='), *val = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return c->help = 1, 0; /* main prints it */
        const size_t len = eq && !strncmp(a, "--", 2) ? (size_t)(eq - a) : strlen(a); /* --flag=value */
        const int f = flag_index(a, len);
        if (f < 0 || (f < NSWITCH && eq))
            return fprintf(stderr, "attn-bench: unknown option '%s' (see --help)\n", a), -1;
        const char *flag = f < NSWITCH ? switches[f] : value_flags[f - NSWITCH];
        if (seen[f]++) return fprintf(stderr, "attn-bench: %s given twice\n", flag), -1;
        if (f < NSWITCH) {
            int *const on[NSWITCH] = {&c->quick,       &c->cold,       &c->cpu_only, &c->dry_run,
                                      &c->no_backward, &c->no_forward, &c->decode};
            *on[f] = 1;
            continue;
        }
        val = eq && len < strlen(a) ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!val) return fprintf(stderr, "attn-bench: %s needs a value (see --help)\n", flag), -1;
        if (set_flag(c, flag, val) != 0) return -1;
    }
    if (c->no_backward && c->no_forward)
        return fprintf(stderr, "attn-bench: --no-backward and --no-forward together leave no stage to run\n"), -1;
    if (c->nstage_sel && (c->no_backward || c->no_forward))
        return fprintf(stderr, "attn-bench: --stages and %s together: --stages alone says which stages run\n",
                       c->no_backward ? "--no-backward" : "--no-forward"), -1;
    if (!c->decode && (c->nbatches || c->kv_heads || c->queries))
        return fprintf(stderr, "attn-bench: --batches, --kv-heads and --queries are --decode's\n"), -1;
    if (c->decode && (c->B || c->quick || c->no_backward || c->no_forward))
        return fprintf(stderr, "attn-bench: --decode takes --batches, not --batch, and runs the forward stages "
                       "alone (no --quick, --no-backward, --no-forward)\n"), -1;
    return 0;
}

/* --decode's sweep, issue 60's cache-bound shapes: B = 1 and 8, H = 32 query heads over H_kv = 8, one
 * new query, D = 128, N_k = 8k to 128k cached keys, non-causal (one query at the end of its sequence
 * sees every key either way); every forward stage. Flags given override them. */
static void apply_decode_defaults(cfg_t *c) {
    static const int64_t seqs[] = {8192, 16384, 32768, 65536, 131072}, batches[] = {1, 8};
    if (!c->nbatches) memcpy(c->batches, batches, (size_t)(c->nbatches = 2) * sizeof *batches);
    if (!c->nseqs) memcpy(c->seqs, seqs, (size_t)(c->nseqs = 5) * sizeof *seqs);
    if (!c->ndims) c->dims[0] = 128, c->ndims = 1;
    if (!c->H) c->H = 32;
    if (!c->kv_heads) c->kv_heads = 8;
    if (!c->queries) c->queries = 1;
    if (!c->causal_set) c->causal_mode = 0;
    if (!strcmp(c->csv, DEFAULT_CSV)) c->csv = DECODE_CSV;
    if (!c->nstage_sel)
        for (int i = 0; i < attn_num_stages && i < MAX_STAGES; i++)
            if (attn_stages[i].pass == ATTN_FORWARD) c->stage_sel[c->nstage_sel++] = i;
}

/* Defaults that depend on whether the GPU stages can run; flags given override them. */
static void apply_defaults(cfg_t *c, int gpu) {
    if (c->decode) {
        apply_decode_defaults(c);
        return;
    }
    static const int64_t gpu_seqs[] = {512, 1024, 2048, 4096, 8192, 16384};
    static const int64_t cpu_seqs[] = {256, 512, 1024}, quick_seqs[] = {128, 512, 1024};
    static const int64_t dims[] = {64, 128};
    const int64_t *seqs = c->quick ? quick_seqs : gpu ? gpu_seqs : cpu_seqs;
    int nseqs = c->quick || !gpu ? 3 : 6;
    if (!c->B) c->B = gpu && !c->quick ? 4 : 1;
    if (!c->H) c->H = gpu && !c->quick ? 32 : 4;
    if (c->quick && !c->cpu_limit_set) c->cpu_limit_s = 5.0; /* the CPU stage runs every quick point */
    if (!c->nseqs) memcpy(c->seqs, seqs, (size_t)(c->nseqs = nseqs) * sizeof *seqs);
    if (!c->ndims) memcpy(c->dims, dims, (size_t)(c->ndims = c->quick ? 1 : 2) * sizeof *dims);
    if (!c->nstage_sel)
        for (int i = 0; i < attn_num_stages && i < MAX_STAGES; i++)
            if (attn_stages[i].pass == ATTN_FORWARD ? !c->no_forward : !c->no_backward) c->stage_sel[c->nstage_sel++] = i;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A message as a CSV field: the characters that would break the CSV or a Markdown table replaced. */
__attribute__((format(printf, 2, 3))) static void set_note(row_t *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note, sizeof r->note, fmt, ap);
    va_end(ap);
    for (char *p = r->note; *p; p++)
        *p = *p == ',' || *p == '|' ? ';' : *p == '"' ? '\'' : (*p == '\n' || *p == '\r' || *p == '\t') ? ' ' : *p;
}

/* ---- the sweep ------------------------------------------------------------------------------ */

typedef struct {
    const cfg_t *c;
    row_t *rows; /* sw->total of them */
    size_t nrows;
    int gpu_ok, failed, total;
    char gpu_why[256];
    double *cpu_gflops; /* per stage (its index in attn_stages), a CPU stage's last measured rate: 0 before
                           the first, -1 if that failed; each stage is judged by its own (on the 2-core
                           machine 01 measured 4-5 GFLOP/s, 03m 11-16) */
    uint16_t *o_host; float *lse_host; /* O and LSE of every run at one point (NULL: attn_run's own) */
    char driver[32]; /* the run's facts for every row: "CUDA 13.0" or "no-gpu" (attn_gpu_driver) */
    char sm_clock[16]; /* the peak SM clock in MHz, "" unknown, "no-gpu" */
} sweep_t;

/* The sweep's next row: main allocates sw->total of them before the sweep, one per (D, N, causal, stage). */
static row_t *new_row(sweep_t *sw, const attn_stage *s, const attn_problem *p) {
    row_t *r = &sw->rows[sw->nrows++];
    memset(r, 0, sizeof *r);
    r->s = s, r->p = *p;
    r->ms = r->tflops = r->extra = r->workspace = r->max_err = NAN;
    return r;
}

/* A status of attn_run() other than OK, as a row; counts the ones that are the stage's fault. */
static void status_row(sweep_t *sw, row_t *r, attn_status st, const char *msg) {
    const char *word = st == ATTN_ENOMEM ? "OOM" : st == ATTN_EUNSUPPORTED ? "unsupported"
                     : st == ATTN_ENODEV ? "no-gpu" : "error";
    snprintf(r->status, sizeof r->status, "%s", word);
    if (strcmp(word, "error")) set_note(r, "%s", msg);
    else set_note(r, "%s: %s", attn_status_name(st), msg), sw->failed++;
}

/* The time of one run, from this stage's largest measured smaller N of the same panel scaled by
 * the FLOP ratio (N^2); 0 when there is none. */
static double estimate_from_rows(const sweep_t *sw, const attn_stage *s, const attn_problem *p) {
    const row_t *best = NULL;
    for (size_t i = 0; i < sw->nrows; i++) {
        const row_t *r = &sw->rows[i];
        if (r->s == s && !strcmp(r->status, "ok") && r->p.D == p->D && r->p.causal == p->causal &&
            r->p.N < p->N && (!best || r->p.N > best->p.N))
            best = r;
    }
    return best ? best->ms * attn_flops(p) / attn_flops(&best->p) : 0;
}

/* A CPU stage's rate is measured on 8 heads of 512 rows: enough rows per head that the OpenMP loop's
 * set-up does not dominate, as at 4 x 256 (3.4 GFLOP/s there on 16 cores, 24.5 at the sweep's sizes).
 * A timed point of fewer rows would lower it (run_point). */
enum { CALIBRATION_HEADS = 8, CALIBRATION_N = 512 };

/* Stage s's entry of sw->cpu_gflops. */
static double *cpu_rate(const sweep_t *sw, const attn_stage *s) { return &sw->cpu_gflops[s - attn_stages]; }

static void calibrate_cpu(sweep_t *sw, const attn_stage *s) {
    double *rate = cpu_rate(sw, s);
    if (*rate != 0) return;
    *rate = -1;
    attn_problem p = attn_problem_make(1, CALIBRATION_HEADS, CALIBRATION_N, sw->c->dims[0], 0);
    if (attn_stage_supports(s, &p) != ATTN_OK) p = attn_problem_make(1, CALIBRATION_HEADS, CALIBRATION_N, 64, 0);
    attn_inputs in;
    attn_result res;
    attn_run_opts o = attn_run_opts_default();
    o.warmup = 1, o.repeat = 1;
    if (attn_inputs_random(&in, &p, 12345, ATTN_INIT_NORMAL) != ATTN_OK) return;
    if ((s->pass == ATTN_FORWARD || attn_inputs_random_grad(&in, 12346) == ATTN_OK) &&
        attn_run(s, &in, &o, &res, NULL, NULL) == ATTN_OK && res.ms_median > 0)
        *rate = attn_stage_flops(s, &p) / (res.ms_median * 1e6);
    attn_inputs_free(&in);
}

static int cpu_too_slow(const sweep_t *sw, const attn_stage *s, const attn_problem *p, double *est_ms) {
    const double rate = *cpu_rate(sw, s);
    *est_ms = rate > 0 ? attn_stage_flops(s, p) / (rate * 1e6) : 0;
    return *est_ms > sw->c->cpu_limit_s * 1e3;
}

/* 1 when a GPU stage's run at p, estimated at est_ms, is above --gpu-limit and would run: a stage whose
 * workspace does not fit the free memory goes on to attn_run, which refuses it at once, before running
 * anything (OOM: the row the plots mark, as stage 11's 256 GiB at N = 16384). Stage 02 at N = 8192,
 * D = 128, the slowest row of the forward's sweep, took 5.3 s on the H200: under the default 10 s. */
static int gpu_too_slow(const sweep_t *sw, const attn_stage *s, const attn_problem *p, double est_ms) {
    size_t free_b = 0, total_b = 0;
    if (!(est_ms > sw->c->gpu_limit_s * 1e3)) return 0;
    return !(s->workspace_bytes && attn_gpu_mem_info(&free_b, &total_b) == ATTN_OK && s->workspace_bytes(p) > free_b);
}

/* Why stage s cannot run at p here, as a status word and a note; 0 when it can. */
static int cannot_run(const sweep_t *sw, const attn_stage *s, const attn_problem *p, row_t *r) {
    const char *st = !s->run ? "no-gpu" : s->on_gpu && !sw->gpu_ok ? "no-gpu"
                   : attn_stage_available(s) != ATTN_OK ? "unavailable"
                   : attn_stage_supports(s, p) != ATTN_OK ? "unsupported" : NULL;
    if (!st) return 0;
    if (r) {
        snprintf(r->status, sizeof r->status, "%s", st);
        if (!s->run) attn_stage_available(s); /* the reason it was not built: no nvcc, or (stage 10) no NCCL */
        set_note(r, "%s", s->run && s->on_gpu && !sw->gpu_ok ? sw->gpu_why : attn_last_error());
    }
    return 1;
}

/* secs: the whole row. run, check: wall time of its last run (set-up, copies, runs) and check */
static void progress(const sweep_t *sw, const row_t *r, double secs) {
    fprintf(stderr, "[%*zu/%d] D=%-3lld %-10s N=%-6lld %s %-14s ", sw->total >= 100 ? 3 : 2, sw->nrows,
            sw->total, (long long)r->p.D, r->p.causal ? "causal" : "non-causal", (long long)r->p.N,
            r->s->id, r->s->name);
    if (sw->c->decode) fprintf(stderr, "B=%-3lld N_k=%-7lld ", (long long)r->p.B, (long long)r->p.N_k);
    const double kv = 4.0 * (double)r->p.B * (double)r->p.H_kv * (double)r->p.N_k * (double)r->p.D;
    if ((!strcmp(r->status, "ok") || !strcmp(r->status, "FAIL")) && sw->c->decode)
        fprintf(stderr, "%9.4g ms %8.1f GB/s K,V %3d reps  %s%s%s  (%.1f s: run %.2f, check %.2f)\n", r->ms,
                kv / (r->ms * 1e6), r->repeats, r->check, r->note[0] ? "  " : "", r->note, secs, r->run_s,
                r->check_s);
    else if (!strcmp(r->status, "ok") || !strcmp(r->status, "FAIL"))
        fprintf(stderr, "%9.4g ms %8.4g TFLOP/s %3d reps  %s%s%s  (%.1f s: run %.2f, check %.2f)\n", r->ms,
                r->tflops, r->repeats, r->check, r->note[0] ? "  " : "", r->note, secs, r->run_s, r->check_s);
    else
        fprintf(stderr, "%s: %s  (%.1f s)\n", r->status, r->note, secs);
}

/* Repeats: about repeat_ms of timed work, in [MIN_REP, MAX_REP]; a run of 250 ms or more once, after the
 * checked first run (3 timed runs of stage 02 and the CPU stages there took 23 s of a 5-minute sweep).
 * Warm-up: on the GPU, about warmup_ms of untimed runs. Measured on the H200 (stage 09 and cuDNN, D = 128,
 * N = 4096, runs of 1.7 ms): from idle the SM clock holds 1980 MHz for a few runs, then the power cap
 * brings it to about 1575 MHz within 100 ms, so 50 runs timed from idle read 690 TFLOP/s at first and
 * 614 at the end: without a warm-up the median depends on what ran just before (cuDNN at D = 128,
 * N = 4096 non-causal read 603, 664 and 663 in the last three full sweeps without it, 574-592 in four
 * readings with it). Hence 100 by default (since 2026-12-04; a full sweep takes about a minute longer,
 * 432 s against 365 s on the H200). */
static void pick_repeats(const cfg_t *c, double est_ms, int on_gpu, attn_run_opts *o) {
    double want = est_ms > 1e-4 ? ceil(c->repeat_ms / est_ms) : MAX_REP;
    want = want < MIN_REP ? MIN_REP : want > MAX_REP ? MAX_REP : want;
    o->repeat = est_ms >= 250 ? 1 : (int)want;
    o->warmup = est_ms >= 250 ? 0 : est_ms >= 20 ? 1 : 2;
    if (on_gpu && est_ms < 250) {
        double warm = ceil(c->warmup_ms / (est_ms > 1e-3 ? est_ms : 1e-3));
        if (warm > o->warmup) o->warmup = warm < MAX_WARMUP ? (int)warm : MAX_WARMUP;
    }
}

/* A backward stage's row: its forward's check and its gradients' (the largest error of dQ, dK, dV). */
static void record_grad_check(sweep_t *sw, row_t *r, const attn_result *res) {
    const attn_grad_check *g = &res->grad;
    const int pass = !res->checked || (res->chk.pass && g->pass);
    snprintf(r->status, sizeof r->status, "%s", pass ? "ok" : "FAIL");
    snprintf(r->check, sizeof r->check, "%s", !res->checked ? "-" : pass ? "pass" : "FAIL");
    if (!res->checked) return;
    int w = 0;
    for (int t = 0; t < 3; t++) {
        if (!(g->t[t].max_abs_err <= r->max_err)) r->max_err = g->t[t].max_abs_err; /* NAN at first */
        if (g->t[t].worst_ratio > g->t[w].worst_ratio) w = t;
    }
    if (pass) return;
    const attn_tensor_check *t = &g->t[w];
    set_note(r, "forward %s %s; %s worst at b=%lld h=%lld n=%lld d=%lld: got %.5g want %.5g (tol %.3g); %lld non-finite",
             res->forward->id, res->chk.pass ? "pass" : "FAIL", attn_grad_name(w), (long long)t->worst_b,
             (long long)t->worst_h, (long long)t->worst_n, (long long)t->worst_d, t->worst_got, t->worst_want,
             t->worst_tol, (long long)(g->t[0].nonfinite + g->t[1].nonfinite + g->t[2].nonfinite));
    sw->failed++;
}

static void record_check(sweep_t *sw, row_t *r, const attn_result *res) {
    if (r->s->pass != ATTN_FORWARD) {
        record_grad_check(sw, r, res);
        return;
    }
    const attn_check *k = &res->chk;
    int pass = !res->checked || k->pass;
    snprintf(r->status, sizeof r->status, "%s", pass ? "ok" : "FAIL");
    snprintf(r->check, sizeof r->check, "%s", !res->checked ? "-" : pass ? "pass" : "FAIL");
    if (res->checked) r->max_err = k->max_abs_err;
    if (!pass) {
        set_note(r, "%lld rows: max abs err %.3g; rel l2 %.3g; %lld non-finite; worst at b=%lld h=%lld "
                 "n=%lld d=%lld: got %.5g want %.5g (tol %.3g)", (long long)k->rows_checked,
                 k->max_abs_err, k->rel_l2, (long long)k->nonfinite, (long long)k->worst_b,
                 (long long)k->worst_h, (long long)k->worst_n, (long long)k->worst_d, k->worst_got,
                 k->worst_want, k->worst_tol);
        sw->failed++;
    } else if (res->identical == 0) {
        set_note(r, "warning: the last timed run's output differs from the first run's");
    }
}

static void run_point(sweep_t *sw, const attn_stage *s, const attn_inputs *in) {
    const cfg_t *c = sw->c;
    const attn_problem *p = &in->p;
    row_t *r = new_row(sw, s, p);
    double t0 = now_s(), est_ms = 0;
    if (cannot_run(sw, s, p, r)) {
        if (strcmp(r->status, "no-gpu")) progress(sw, r, 0); /* the banner said why, once */
        return;
    }
    if (!s->on_gpu) {
        calibrate_cpu(sw, s);
        if (cpu_too_slow(sw, s, p, &est_ms) || !in->q) {
            snprintf(r->status, sizeof r->status, "cpu-skip");
            set_note(r, "est. %.1f s per run (%.1f GFLOP at %.2f GFLOP/s measured) > %.1f s limit",
                     est_ms / 1e3, attn_stage_flops(s, p) / 1e9, *cpu_rate(sw, s), c->cpu_limit_s);
            progress(sw, r, now_s() - t0);
            return;
        }
    } else if ((est_ms = estimate_from_rows(sw, s, p)) > 0 && gpu_too_slow(sw, s, p, est_ms)) {
        snprintf(r->status, sizeof r->status, "gpu-skip");
        set_note(r, "est. %.1f s per run (its time at a smaller N scaled by the FLOPs) > %.1f s limit", est_ms / 1e3,
                 c->gpu_limit_s);
        progress(sw, r, now_s() - t0);
        return;
    }
    attn_result res;
    attn_run_opts o = attn_run_opts_default();
    attn_status st = ATTN_OK;
    if (est_ms <= 0) { /* no estimate yet: one untimed and one timed run, unchecked */
        o.warmup = o.repeat = 1;
        st = attn_run(s, in, &o, &res, sw->o_host, sw->lse_host);
        est_ms = res.ms_median > 0 ? res.ms_median : 1e-3;
    }
    if (st == ATTN_OK) {
        pick_repeats(c, est_ms, s->on_gpu, &o);
        o.check = c->check_rows > 0, o.full_heads = 0, o.check_rows = c->check_rows;
        o.seed = 0x5eedULL + (uint64_t)p->N * 131 + (uint64_t)p->D * 7 + (uint64_t)p->causal;
        o.cold_l2 = c->cold;
        st = attn_run(s, in, &o, &res, sw->o_host, sw->lse_host);
    }
    if (st != ATTN_OK) status_row(sw, r, st, attn_last_error());
    else {
        r->ms = res.ms_median;
        r->tflops = attn_stage_flops(s, p) / (res.ms_median * 1e9);
        r->repeats = res.runs, r->run_s = res.run_wall_ms / 1e3, r->check_s = res.check_wall_ms / 1e3;
        r->gpus = res.gpus;
        r->workspace = (double)res.extra_bytes;
        r->extra = (double)(res.extra_measured > res.extra_bytes ? res.extra_measured : res.extra_bytes);
        /* a point of at least the calibration's rows refines the stage's rate; a smaller one, where
         * the OpenMP set-up weighs, would make every later estimate too slow */
        if (!s->on_gpu && res.ms_median > 0 && attn_rows(p) >= CALIBRATION_HEADS * CALIBRATION_N)
            *cpu_rate(sw, s) = attn_stage_flops(s, p) / (res.ms_median * 1e6);
        record_check(sw, r, &res);
    }
    progress(sw, r, now_s() - t0);
}

/* 1 when some selected stage will run at p, so inputs are worth generating (the CPU stage alone
 * needs none where it would be skipped anyway). */
static int inputs_needed(sweep_t *sw, const attn_problem *p) {
    for (int k = 0; k < sw->c->nstage_sel; k++) {
        const attn_stage *s = &attn_stages[sw->c->stage_sel[k]];
        if (cannot_run(sw, s, p, NULL)) continue;
        if (!s->on_gpu) {
            attn_problem pc = *p;
            double est;
            pc.causal = sw->c->causal_mode != 0; /* the cheaper setting */
            calibrate_cpu(sw, s);
            if (cpu_too_slow(sw, s, &pc, &est)) continue;
        }
        return 1;
    }
    return 0;
}

/* 1 when a selected stage is a backward one (11 on): the points' inputs then need dO too. */
static int backward_selected(const cfg_t *c) {
    for (int k = 0; k < c->nstage_sel; k++)
        if (attn_stages[c->stage_sel[k]].pass != ATTN_FORWARD) return 1;
    return 0;
}

/* One point of a sweep: its inputs (one set for both causal settings: they do not change the inputs;
 * seed from the point's place in the sweep), then every selected stage, causal and not as asked. */
static void sweep_point(sweep_t *sw, const attn_problem *p, uint64_t seed) {
    const cfg_t *c = sw->c;
    attn_inputs in;
    memset(&in, 0, sizeof in);
    attn_status ist = ATTN_OK;
    char why[256] = "";
    const int need = inputs_needed(sw, p);
    if (need) {
        double t0 = now_s();
        fprintf(stderr, "inputs B=%lld H=%lld N=%lld D=%lld", (long long)p->B, (long long)p->H, (long long)p->N,
                (long long)p->D);
        if (c->decode) fprintf(stderr, " H_kv=%lld N_k=%lld", (long long)p->H_kv, (long long)p->N_k);
        fprintf(stderr, " ... ");
        ist = attn_inputs_random(&in, p, 0xA77E + seed, ATTN_INIT_NORMAL);
        if (ist == ATTN_OK && backward_selected(c)) /* dO for the backward stages */
            ist = attn_inputs_random_grad(&in, 0xD0A77E + seed);
        if (ist == ATTN_OK && sw->gpu_ok) (void)attn_gpu_hold_inputs(&in); /* one upload per point */
        sw->o_host = ist == ATTN_OK ? attn_alloc((size_t)attn_qkv_elems(p) * 2) : NULL;
        sw->lse_host = ist == ATTN_OK ? attn_alloc((size_t)attn_rows(p) * 4) : NULL;
        if (ist != ATTN_OK) snprintf(why, sizeof why, "inputs: %s", attn_last_error());
        fprintf(stderr, "%s (%.1f s)\n", ist == ATTN_OK ? "done" : why, now_s() - t0);
    }
    for (int ci = 0; ci < (c->causal_mode < 0 ? 2 : 1); ci++) {
        in.p = *p;
        in.p.causal = c->causal_mode < 0 ? ci : c->causal_mode;
        for (int k = 0; k < c->nstage_sel; k++) {
            const attn_stage *s = &attn_stages[c->stage_sel[k]];
            if (ist == ATTN_OK) run_point(sw, s, &in);
            else status_row(sw, new_row(sw, s, &in.p), ist == ATTN_ENOMEM ? ist : ATTN_EINVAL, why);
        }
    }
    if (need && ist == ATTN_OK) attn_inputs_free(&in);
    attn_gpu_release_inputs(), free(sw->o_host), free(sw->lse_host);
    sw->o_host = NULL, sw->lse_host = NULL;
}

/* The point of a sweep: (D, N) of the square sweep, or --decode's (D, B, N_k) with N = N_q queries. */
static attn_problem sweep_problem(const cfg_t *c, int di, int bi, int ni) {
    if (!c->decode) return attn_problem_make(c->B, c->H, c->seqs[ni], c->dims[di], 0);
    attn_problem p = attn_problem_make(c->batches[bi], c->H, c->queries, c->dims[di], 0);
    p.H_kv = c->kv_heads, p.N_k = c->seqs[ni];
    return p;
}

static void run_sweep(sweep_t *sw) {
    const cfg_t *c = sw->c;
    for (int di = 0; di < c->ndims; di++)
        for (int bi = 0; bi < (c->decode ? c->nbatches : 1); bi++)
            for (int ni = 0; ni < c->nseqs; ni++) {
                const attn_problem p = sweep_problem(c, di, bi, ni);
                sweep_point(sw, &p, (uint64_t)(c->decode ? (di * 64 + bi) * 64 + ni : di * 64 + ni));
            }
}

/* ---- CSV: written to a new temporary file beside PATH, renamed when complete ------------------ */

static void csv_num(FILE *f, double v, const char *fmt) {
    if (isfinite(v)) fprintf(f, fmt, v);
    fputc(',', f);
}

static void csv_rows(FILE *f, const sweep_t *sw, const char *gpu, const char *date) {
    /* hbm_*, tile_*: the bytes the stage's tiles move at this point (attn_bytes, common/stage.h), on the
     * GPUs it ran on: a model, written for every row of a stage that has one (bench/roofline.sh) */
    fprintf(f, "gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes,"
               "workspace_bytes,max_abs_err,check,repeats,l2,note,pass,hbm_read,hbm_written,tile_read,"
               "tile_written,warmup_ms,gpus,driver,sm_clock_mhz,power_limit_w,torch,cudnn,triton,fa4\n");
    for (size_t i = 0; i < sw->nrows; i++) {
        const row_t *r = &sw->rows[i];
        fprintf(f, "%s,%s,%s,%s,%s,%lld,%lld,%lld,%lld,%d,%s,%s,", gpu, date, sw->c->commit, r->s->id,
                r->s->name, (long long)r->p.B, (long long)r->p.H, (long long)r->p.N, (long long)r->p.D,
                r->p.causal, attn_dtype_name(r->p.dtype), r->status);
        csv_num(f, r->ms, "%.6g");
        csv_num(f, r->tflops, "%.6g");
        csv_num(f, r->extra, "%.0f");
        csv_num(f, r->workspace, "%.0f");
        csv_num(f, r->max_err, "%.4g");
        fprintf(f, "%s,", r->check);
        if (r->repeats > 0) fprintf(f, "%d", r->repeats);
        fprintf(f, ",%s,%s,%s,", !r->s->on_gpu || !isfinite(r->ms) ? "-" : sw->c->cold ? "cold" : "warm",
                r->note, r->s->pass == ATTN_FORWARD ? "fwd" : "bwd");
        const attn_bytes b = r->s->bytes_moved ? r->s->bytes_moved(&r->p, r->gpus > 1 ? r->gpus : 1)
                                               : (attn_bytes){NAN, NAN, NAN, NAN};
        csv_num(f, b.hbm_read, "%.0f");
        csv_num(f, b.hbm_written, "%.0f");
        csv_num(f, b.tile_read, "%.0f");
        csv_num(f, b.tile_written, "%.0f");
        /* The run's facts, so that a figure taken from the CSV can say how it was measured: the warm-up
         * asked for, the GPUs the row ran on (stage 10's rows would otherwise pass for one GPU's; 0: a
         * CPU stage, empty: it did not run), the driver and the peak SM clock. The power limit is
         * nvidia-smi's, which make bench fills in (report.sh merge --set): "no-gpu" here when none was
         * used. PyTorch, cuDNN, Triton and FlashAttention-4 are the peers' to record. */
        fprintf(f, "%g,", sw->c->warmup_ms);
        if (r->repeats > 0) fprintf(f, "%d", r->gpus);
        fprintf(f, ",%s,%s,%s,,,,\n", sw->driver, sw->sm_clock, sw->gpu_ok ? "" : "no-gpu");
    }
}

/* --decode's rows: the shape in full (H_kv, N_q, N_k), and the bandwidth the step reached, kv_gbps = the
 * K and V bytes it must read (2 B H_kv N_k D x 2 bytes, kv_bytes) / its time: decoding is bound by them
 * (15_decode/README.md), so this is the column to hold against the device's copy bandwidth. */
static void csv_decode_rows(FILE *f, const sweep_t *sw, const char *gpu, const char *date) {
    fprintf(f, "gpu,date,commit,stage,name,B,H,H_kv,N_q,N_k,D,causal,dtype,status,ms,kv_bytes,kv_gbps,tflops,"
               "check,max_abs_err,repeats,l2,note,warmup_ms,driver,sm_clock_mhz\n");
    for (size_t i = 0; i < sw->nrows; i++) {
        const row_t *r = &sw->rows[i];
        const attn_problem *p = &r->p;
        const double kv = 2.0 * (double)p->B * (double)p->H_kv * (double)p->N_k * (double)p->D * 2.0;
        fprintf(f, "%s,%s,%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%d,%s,%s,", gpu, date, sw->c->commit, r->s->id,
                r->s->name, (long long)p->B, (long long)p->H, (long long)p->H_kv, (long long)p->N,
                (long long)p->N_k, (long long)p->D, p->causal, attn_dtype_name(p->dtype), r->status);
        csv_num(f, r->ms, "%.6g");
        csv_num(f, kv, "%.0f");
        csv_num(f, r->ms > 0 ? kv / (r->ms * 1e6) : NAN, "%.6g");
        csv_num(f, r->tflops, "%.6g");
        fprintf(f, "%s,", r->check);
        csv_num(f, r->max_err, "%.4g");
        if (r->repeats > 0) fprintf(f, "%d", r->repeats);
        fprintf(f, ",%s,%s,%g,%s,%s\n", !r->s->on_gpu || !isfinite(r->ms) ? "-" : sw->c->cold ? "cold" : "warm",
                r->note, sw->c->warmup_ms, sw->driver, sw->sm_clock);
    }
}

/* 0 when PATH may be replaced: it does not exist, or is a file or a link (the rename replaces the link,
 * never what it points to). Refused, with the message: a directory, FIFO, device or socket, as the
 * rename would put the CSV in its place (as root, even instead of /dev/full); and a PATH that names no
 * file, which csv_try's trial file beside it cannot catch: an empty one (the trial ".XXXXXX" is made in
 * the current folder, the rename to "" fails only after the sweep), one ending in '/' (a folder's name)
 * and one lstat cannot look up for another reason than its absence (a file on the way: ENOTDIR). */
static int csv_target_ok(const char *path) {
    struct stat sb;
    if (!path[0]) {
        fprintf(stderr, "attn-bench: --csv: a file's path is needed (got '')\n");
        return -1;
    }
    if (path[strlen(path) - 1] == '/') {
        fprintf(stderr, "attn-bench: --csv: '%s' ends in '/', a folder's name (give a file's path)\n", path);
        return -1;
    }
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return 0; /* a missing folder on the way is csv_temp's to report */
        fprintf(stderr, "attn-bench: --csv: cannot look up '%s': %s\n", path, strerror(errno));
        return -1;
    }
    if (S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode)) return 0;
    const char *kind = S_ISDIR(sb.st_mode)    ? "a directory"
                       : S_ISFIFO(sb.st_mode) ? "a FIFO"
                       : S_ISSOCK(sb.st_mode) ? "a socket"
                                              : "a device";
    fprintf(stderr, "attn-bench: --csv: '%s' is %s, not a file: it would be replaced (give a file's path)\n",
            path, kind);
    return -1;
}

/* PATH.XXXXXX from mkstemp: created exclusively, so a planted file or symlink of that name is never
 * written through, and two runs never share one. The fd, or -1 with the message printed. */
static int csv_temp(const char *path, char *tmp, size_t cap) {
    int fd = -1;
    if (snprintf(tmp, cap, "%s.XXXXXX", path) < (int)cap)
        fd = mkstemp(tmp);
    else
        errno = ENAMETOOLONG;
    if (fd < 0)
        fprintf(stderr, "attn-bench: cannot create a temporary file beside %s: %s\n", path, strerror(errno));
    return fd;
}

/* Before the sweep: PATH is checked, the default folder made (as peers.py makes its CSV's) and a
 * temporary file created beside it and removed, so that a CSV that cannot be written is refused at
 * once, not after the sweep. PATH is checked first so that a refused one makes no folder. Signals are
 * held while the trial file exists: a Ctrl-C there would have left it behind (they take effect once it
 * is gone). 0, or the exit status: 2 for a PATH that is not a file's or where none can be created (bad
 * input, as build/attn's --save DIR), 1 when the trial file cannot be removed. */
static int csv_try(const cfg_t *c) {
    if (csv_target_ok(c->csv) != 0) return 2;
    if (!strcmp(c->csv, DEFAULT_CSV) || !strcmp(c->csv, DECODE_CSV))
        mkdir("build", 0777), mkdir(DEFAULT_DIR, 0777); /* EEXIST is fine */
    attn_held_signals held;
    attn_signals_hold(&held);
    char tmp[4096];
    int fd = csv_temp(c->csv, tmp, sizeof tmp), rc = fd < 0 ? 2 : 0;
    if (fd >= 0) {
        close(fd);
        if (remove(tmp) != 0) {
            fprintf(stderr, "attn-bench: cannot remove the trial file %s: %s\n", tmp, strerror(errno));
            rc = 1;
        }
    }
    attn_signals_release(&held);
    return rc;
}

/* Written to a new temporary file (csv_temp), given the mode a new file gets (0666 less the umask:
 * mkstemp makes it 0600), renamed over PATH only when complete, and only if PATH is still one that
 * may be replaced. */
static int write_csv_file(const sweep_t *sw, const char *gpu, const char *date) {
    const char *path = sw->c->csv;
    char tmp[4096];
    int fd = csv_temp(path, tmp, sizeof tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) {
            fprintf(stderr, "attn-bench: writing %s failed: %s\n", path, strerror(errno));
            close(fd), remove(tmp);
        }
        return -1;
    }
    const mode_t mask = umask(0);
    umask(mask);
    if (sw->c->decode) csv_decode_rows(f, sw, gpu, date);
    else csv_rows(f, sw, gpu, date);
    int ok = fflush(f) == 0 && !ferror(f) && fchmod(fd, 0666 & ~mask) == 0;
    ok = fclose(f) == 0 && ok;
    if (ok && csv_target_ok(path) != 0) { /* it became a FIFO or a directory during the sweep */
        remove(tmp);
        return -1;
    }
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "attn-bench: writing %s failed: %s\n", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

/* The CSV with signals held from its temporary file's creation to the rename (hold_signals.h). */
static int write_csv(const sweep_t *sw, const char *gpu, const char *date) {
    attn_held_signals held;
    attn_signals_hold(&held);
    const int rc = write_csv_file(sw, gpu, date);
    attn_signals_release(&held);
    return rc;
}

/* Every point of the sweep as a problem, before anything runs: flags valid one by one can still make
 * a shape past the limits (B x H x N x D over 2^62 elements), bad input to refuse now rather than rows
 * of errors after the rest of the sweep. 0, or -1 with the message printed. */
static int points_valid(const cfg_t *c) {
    for (int di = 0; di < c->ndims; di++)
        for (int bi = 0; bi < (c->decode ? c->nbatches : 1); bi++)
            for (int ni = 0; ni < c->nseqs; ni++) {
                const attn_problem p = sweep_problem(c, di, bi, ni);
                if (attn_problem_validate(&p) == ATTN_OK) continue;
                if (c->decode)
                    fprintf(stderr, "attn-bench: --decode: B = %lld of --batches, --heads %lld, --kv-heads %lld, "
                            "--queries %lld, N_k = %lld of --seqs and D = %lld of --dims: %s\n", (long long)p.B,
                            (long long)p.H, (long long)p.H_kv, (long long)p.N, (long long)p.N_k,
                            (long long)p.D, attn_last_error());
                else
                    fprintf(stderr, "attn-bench: --batch %lld, --heads %lld, N = %lld of --seqs and D = %lld of "
                            "--dims: %s\n", (long long)c->B, (long long)c->H, (long long)c->seqs[ni],
                            (long long)c->dims[di], attn_last_error());
                return -1;
            }
    return 0;
}

int main(int argc, char **argv) {
    cfg_t c;
    if (parse_args(argc, argv, &c) != 0) return 2;
    if (c.help) return print_usage_to_stdout();
    const double t_start = now_s();
    sweep_t sw;
    memset(&sw, 0, sizeof sw);
    sw.c = &c;
    if (c.cpu_only) snprintf(sw.gpu_why, sizeof sw.gpu_why, "--cpu-only was given");
    else if (!attn_built_with_cuda())
        snprintf(sw.gpu_why, sizeof sw.gpu_why, "this build has no CUDA (" ATTN_NO_CUDA_WHY ")");
    else if (attn_gpu_available() != ATTN_OK) snprintf(sw.gpu_why, sizeof sw.gpu_why, "%s", attn_last_error());
    sw.gpu_ok = !sw.gpu_why[0];
    snprintf(sw.driver, sizeof sw.driver, "no-gpu");
    snprintf(sw.sm_clock, sizeof sw.sm_clock, "no-gpu");
    if (sw.gpu_ok) {
        const int mhz = attn_gpu_sm_clock_mhz();
        attn_gpu_driver(sw.driver, sizeof sw.driver);
        if (mhz > 0) snprintf(sw.sm_clock, sizeof sw.sm_clock, "%d", mhz);
        else sw.sm_clock[0] = '\0';
    }
    apply_defaults(&c, sw.gpu_ok);
    if (points_valid(&c) != 0) return 2;
    int rc = csv_try(&c);
    if (rc) return rc;
    char gpu[128], date[32];
    snprintf(gpu, sizeof gpu, "%s", sw.gpu_ok ? attn_gpu_name() : "none");
    for (char *p = gpu; *p; p++) *p = *p == ',' ? ';' : *p;
    time_t tt = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tt));

    char shape[160]; /* --decode: the batches, the K/V heads, N = N_q new queries over N_k keys */
    if (c.decode)
        snprintf(shape, sizeof shape, "B=%lld..%lld (%d) H=%lld H_kv=%lld N=%lld N_k=%lld..%lld (%d)",
                 (long long)c.batches[0], (long long)c.batches[c.nbatches - 1], c.nbatches, (long long)c.H,
                 (long long)c.kv_heads, (long long)c.queries, (long long)c.seqs[0], (long long)c.seqs[c.nseqs - 1],
                 c.nseqs);
    else
        snprintf(shape, sizeof shape, "B=%lld H=%lld N=%lld..%lld (%d)", (long long)c.B, (long long)c.H,
                 (long long)c.seqs[0], (long long)c.seqs[c.nseqs - 1], c.nseqs);
    fprintf(stderr, "attn-bench: GPU %s; %s D=%lld..%lld (%d) causal=%s; %d stages; "
            "aim %.0f ms of timed work per point (%d..%d repeats) after %.0f ms of untimed GPU work "
            "(0: 1 or 2 runs); L2 %s; check %lld random rows per point\n",
            gpu, shape, (long long)c.dims[0], (long long)c.dims[c.ndims - 1], c.ndims, c.causal_mode < 0 ? "both"
            : c.causal_mode ? "1" : "0", c.nstage_sel, c.repeat_ms, MIN_REP, MAX_REP, c.warmup_ms,
            c.cold ? "cold" : "warm", (long long)c.check_rows);
    if (!sw.gpu_ok)
        fprintf(stderr, "attn-bench: GPU stages skipped: %s. Running the CPU stages only, at CPU-sized "
                "shapes.\n", sw.gpu_why);
    if (c.dry_run) return fprintf(stderr, "attn-bench: --dry-run: the flags, shapes and CSV path are good\n"), 0;
    sw.total = c.ndims * (c.decode ? c.nbatches : 1) * c.nseqs * (c.causal_mode < 0 ? 2 : 1) * c.nstage_sel;
    sw.rows = calloc((size_t)sw.total, sizeof *sw.rows);
    sw.cpu_gflops = calloc((size_t)attn_num_stages, sizeof *sw.cpu_gflops);
    if (!sw.rows || !sw.cpu_gflops) {
        fprintf(stderr, "attn-bench: cannot allocate the sweep's %d rows of results\n", sw.total);
        free(sw.rows), free(sw.cpu_gflops);
        return 1;
    }
    run_sweep(&sw);
    for (int i = 0; i < attn_num_stages; i++)
        if (sw.cpu_gflops[i] > 0)
            fprintf(stderr, "attn-bench: CPU stage %s: %.2f GFLOP/s measured; points above %.1f s per run (~%.0f "
                    "GFLOP) are cpu-skip for it (--cpu-limit)\n", attn_stages[i].id, sw.cpu_gflops[i],
                    c.cpu_limit_s, sw.cpu_gflops[i] * c.cpu_limit_s);
    rc = write_csv(&sw, gpu, date) == 0 ? 0 : 1;
    const double secs = now_s() - t_start;
    fprintf(stderr, "attn-bench: %zu rows %s %s in %.1f s (%.1f min)%s\n", sw.nrows, rc ? "NOT written to" : "in",
            c.csv, secs, secs / 60, sw.failed ? "; some stages FAILED or errored: see their rows" : "");
    free(sw.rows), free(sw.cpu_gflops);
    return rc ? rc : sw.failed ? 1 : 0;
}
