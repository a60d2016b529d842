/*
 * bench_main.c: every registered stage side by side, the program behind `make bench`.
 *
 * It sweeps (D, N, causal) points, runs every stage of attn_stages[] at every point it can through
 * attn_run() (warm-up, median of adaptive repeats, a spot check of sampled rows against the double
 * CPU reference), prints one table per (D, causal) on stdout (plain or --markdown), progress on
 * stderr, and writes one CSV row per stage and point. A point a stage cannot run becomes a row with
 * the reason: OOM, cpu-skip, unsupported, no-gpu; a wrong result is FAIL and is never counted as a
 * timing. Rows of peers (bench/peers.py, PyTorch) in the same CSV format can be merged in with
 * --peers, and --from renders the tables of a CSV made elsewhere without running anything.
 *
 * Exit status: 0, or 1 for a usage or file error, or 3 when a stage FAILed its check or errored
 * (after the tables and the CSV are written).
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

#include "attn.h"
#include "harness.h"
#include "stage.h"

#define MAX_LIST 32
#define BASELINE_ID "02" /* the stage every other is compared with: the naive GPU kernel */

/* ---- rows: one stage (or peer) at one point; also one CSV line ------------------------------ */

typedef struct {
    char gpu[96], date[32], commit[48], stage[32], name[48], dtype[8], status[16], check[8];
    int64_t B, H, N, D;
    int causal;
    double ms, tflops, sp02, spbest; /* NAN when absent */
    double extra;                    /* bytes beyond Q, K, V, O, LSE: max(workspace, measured) */
    double workspace;                /* the stage's declared workspace, bytes */
    double max_err;
    int repeats;
    char note[320];
} row_t;

typedef struct {
    row_t *v;
    size_t n, cap;
} rows_t;

static row_t *rows_add(rows_t *r) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        row_t *v = realloc(r->v, cap * sizeof *v);
        if (!v) {
            fprintf(stderr, "attn-bench: out of host memory\n");
            exit(1);
        }
        r->v = v;
        r->cap = cap;
    }
    row_t *x = &r->v[r->n++];
    memset(x, 0, sizeof *x);
    x->ms = x->tflops = x->sp02 = x->spbest = x->extra = x->workspace = x->max_err = NAN;
    return x;
}

/* Copies src into a fixed field, with the characters that would break the CSV or a Markdown
 * table replaced. */
static void set_str(char *dst, size_t size, const char *src) {
    size_t i = 0;
    for (; src && src[i] && i + 1 < size; i++) {
        char ch = src[i];
        if (ch == ',' || ch == '|') ch = ';';
        else if (ch == '"') ch = '\'';
        else if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
        dst[i] = ch;
    }
    dst[i] = 0;
}

static void set_note(row_t *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void set_note(row_t *r, const char *fmt, ...) {
    char buf[sizeof r->note];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    set_str(r->note, sizeof r->note, buf);
}

static int is_ok(const row_t *r) { return strcmp(r->status, "ok") == 0 && r->ms > 0; }
static int same_point(const row_t *a, const row_t *b) {
    return a->B == b->B && a->H == b->H && a->N == b->N && a->D == b->D && a->causal == b->causal &&
           strcmp(a->dtype, b->dtype) == 0;
}
static int same_panel(const row_t *a, const row_t *b) {
    return a->B == b->B && a->H == b->H && a->D == b->D && a->causal == b->causal &&
           strcmp(a->dtype, b->dtype) == 0;
}

/* ---- options -------------------------------------------------------------------------------- */

typedef struct {
    int quick, markdown, cpu_only;
    const char *csv, *peers, *from, *commit, *stage_table;
    int64_t B, H;
    int64_t seqs[MAX_LIST], dims[MAX_LIST];
    int nseqs, ndims;
    int causal_mode; /* -1: both, 0, 1 */
    double repeat_ms, cpu_limit_s;
    int min_rep, max_rep;
    int64_t check_rows;
    int stage_sel[64], nstage_sel;
    int csv_set, B_set, H_set, causal_set, cpu_limit_set;
} cfg_t;

static void usage(FILE *f) {
    fprintf(f,
        "usage: attn-bench [options]\n"
        "Runs every registered stage over a sweep of shapes; tables on stdout, progress on stderr,\n"
        "one CSV row per stage and point.\n\n"
        "  --quick            small sweep: B=1 H=4 N=128,512,1024 D=64, causal and not\n"
        "  --batch B          batch (default 4 with a GPU, 1 without)\n"
        "  --heads H          heads (default 32 with a GPU, 4 without)\n"
        "  --seqs LIST        sequence lengths, e.g. 512,1024 (default 512..16384 with a GPU,\n"
        "                     256,512,1024 without)\n"
        "  --dims LIST        head dims (default 64,128)\n"
        "  --causal both|0|1  (default both)\n"
        "  --stages LIST      only these stages, e.g. 02,06 (default: all registered)\n"
        "  --repeat-ms MS     timed work to aim for per point (default 400); repeats are clamped to\n"
        "                     [--min-repeat, --max-repeat] (default 3, 50)\n"
        "  --check-rows K     random rows spot-checked per point (default 48)\n"
        "  --cpu-limit S      skip the CPU stage (cpu-skip) where one run is estimated above S\n"
        "                     seconds from its measured FLOP rate (default 2; 5 with --quick)\n"
        "  --cpu-only         run no GPU stage, as on a machine without one\n"
        "  --csv PATH         CSV to write (default build/bench/bench.csv; with --from: none)\n"
        "  --peers CSV        merge rows of bench/peers.py (same CSV format) into tables and CSV\n"
        "  --from CSV         run nothing: render the tables of this CSV\n"
        "  --stage-table ID   print only this stage's rows (D, causal, N, ms, TFLOP/s, memory)\n"
        "  --markdown         Markdown tables instead of plain text\n"
        "  --commit STR       commit recorded in the CSV (make passes git rev-parse --short HEAD)\n"
        "  --help\n");
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_list(const char *s, int64_t lo, int64_t hi, int64_t *out, int *n) {
    char buf[512];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST || parse_i64(tok, lo, hi, &out[*n]) != 0) return -1;
        (*n)++;
    }
    return *n > 0 ? 0 : -1;
}

static int parse_double(const char *s, double lo, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo) || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int bad(const char *flag, const char *val) {
    fprintf(stderr, "attn-bench: bad value for %s: '%s' (see --help)\n", flag, val ? val : "");
    return -1;
}

static int parse_args(int argc, char **argv, cfg_t *c) {
    memset(c, 0, sizeof *c);
    c->causal_mode = -1;
    c->repeat_ms = 400;
    c->cpu_limit_s = 2.0;
    c->min_rep = 3;
    c->max_rep = 50;
    c->check_rows = 48;
    c->commit = "unknown";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        char flag[64];
        const char *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) == 0 && eq && (size_t)(eq - a) < sizeof flag) {
            memcpy(flag, a, (size_t)(eq - a));
            flag[eq - a] = 0;
            val = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", a);
        }
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(flag, "--quick")) { c->quick = 1; continue; }
        if (!strcmp(flag, "--markdown")) { c->markdown = 1; continue; }
        if (!strcmp(flag, "--cpu-only")) { c->cpu_only = 1; continue; }
        static const char *const with_value[] = {
            "--batch", "--heads", "--seqs", "--dims", "--causal", "--stages", "--repeat-ms",
            "--min-repeat", "--max-repeat", "--check-rows", "--cpu-limit", "--csv", "--peers",
            "--from", "--stage-table", "--commit"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            if (!strcmp(flag, with_value[k])) known = 1;
        if (!known) {
            fprintf(stderr, "attn-bench: unknown option '%s' (see --help)\n", a);
            return -1;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "attn-bench: %s needs a value (see --help)\n", flag);
                return -1;
            }
            val = argv[++i];
        }
        int64_t v;
        if (!strcmp(flag, "--batch")) {
            if (parse_i64(val, 1, ATTN_MAX_B, &c->B)) return bad(flag, val);
            c->B_set = 1;
        } else if (!strcmp(flag, "--heads")) {
            if (parse_i64(val, 1, ATTN_MAX_H, &c->H)) return bad(flag, val);
            c->H_set = 1;
        } else if (!strcmp(flag, "--seqs")) {
            if (parse_list(val, 1, ATTN_MAX_N, c->seqs, &c->nseqs)) return bad(flag, val);
        } else if (!strcmp(flag, "--dims")) {
            if (parse_list(val, 1, ATTN_MAX_D, c->dims, &c->ndims)) return bad(flag, val);
        } else if (!strcmp(flag, "--causal")) {
            if (!strcmp(val, "both")) c->causal_mode = -1;
            else if (!strcmp(val, "0") || !strcmp(val, "1")) c->causal_mode = val[0] - '0';
            else return bad(flag, val);
            c->causal_set = 1;
        } else if (!strcmp(flag, "--stages")) {
            char buf[256];
            if (strlen(val) >= sizeof buf) return bad(flag, val);
            strcpy(buf, val);
            c->nstage_sel = 0;
            for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save)) {
                const attn_stage *s = attn_find_stage(tok);
                if (!s || c->nstage_sel == 64) {
                    fprintf(stderr, "attn-bench: no stage '%s' (build/attn --list shows them)\n", tok);
                    return -1;
                }
                c->stage_sel[c->nstage_sel++] = (int)(s - attn_stages);
            }
        } else if (!strcmp(flag, "--repeat-ms")) {
            if (parse_double(val, 0, &c->repeat_ms)) return bad(flag, val);
        } else if (!strcmp(flag, "--min-repeat")) {
            if (parse_i64(val, 1, 100000, &v)) return bad(flag, val);
            c->min_rep = (int)v;
        } else if (!strcmp(flag, "--max-repeat")) {
            if (parse_i64(val, 1, 100000, &v)) return bad(flag, val);
            c->max_rep = (int)v;
        } else if (!strcmp(flag, "--check-rows")) {
            if (parse_i64(val, 0, 1 << 20, &c->check_rows)) return bad(flag, val);
        } else if (!strcmp(flag, "--cpu-limit")) {
            if (parse_double(val, 0, &c->cpu_limit_s)) return bad(flag, val);
            c->cpu_limit_set = 1;
        } else if (!strcmp(flag, "--csv")) {
            c->csv = val;
            c->csv_set = 1;
        } else if (!strcmp(flag, "--peers")) {
            c->peers = val;
        } else if (!strcmp(flag, "--from")) {
            c->from = val;
        } else if (!strcmp(flag, "--stage-table")) {
            const attn_stage *s = attn_find_stage(val);
            c->stage_table = s ? s->id : val;
        } else if (!strcmp(flag, "--commit")) {
            c->commit = val[0] ? val : "unknown";
        }
    }
    if (c->min_rep > c->max_rep) {
        fprintf(stderr, "attn-bench: --min-repeat %d is above --max-repeat %d\n", c->min_rep, c->max_rep);
        return -1;
    }
    return 0;
}

/* Defaults that depend on whether the GPU stages can run; flags given override them. */
static void apply_defaults(cfg_t *c, int gpu) {
    static const int64_t gpu_seqs[] = {512, 1024, 2048, 4096, 8192, 16384};
    static const int64_t cpu_seqs[] = {256, 512, 1024};
    static const int64_t quick_seqs[] = {128, 512, 1024};
    int64_t B = gpu ? 4 : 1, H = gpu ? 32 : 4;
    const int64_t *seqs = gpu ? gpu_seqs : cpu_seqs;
    int nseqs = gpu ? 6 : 3;
    int64_t dims[2] = {64, 128};
    int ndims = 2;
    if (c->quick) {
        B = 1, H = 4, seqs = quick_seqs, nseqs = 3, ndims = 1;
        if (!c->cpu_limit_set) c->cpu_limit_s = 5.0; /* the CPU stage runs every quick point */
    }
    if (!c->B_set) c->B = B;
    if (!c->H_set) c->H = H;
    if (!c->nseqs) {
        memcpy(c->seqs, seqs, (size_t)nseqs * sizeof *seqs);
        c->nseqs = nseqs;
    }
    if (!c->ndims) {
        memcpy(c->dims, dims, (size_t)ndims * sizeof *dims);
        c->ndims = ndims;
    }
    if (!c->nstage_sel) {
        for (int i = 0; i < attn_num_stages && i < 64; i++) c->stage_sel[i] = i;
        c->nstage_sel = attn_num_stages < 64 ? attn_num_stages : 64;
    }
}

/* ---- small helpers -------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void fmt_ms(char *b, size_t n, double ms) {
    if (ms >= 1000) snprintf(b, n, "%.0f", ms);
    else if (ms >= 100) snprintf(b, n, "%.1f", ms);
    else if (ms >= 10) snprintf(b, n, "%.2f", ms);
    else snprintf(b, n, "%.3f", ms);
}
static void fmt_tf(char *b, size_t n, double t) {
    if (!(t >= 0)) snprintf(b, n, "-");
    else if (t >= 100) snprintf(b, n, "%.0f", t);
    else if (t >= 10) snprintf(b, n, "%.1f", t);
    else if (t >= 1) snprintf(b, n, "%.2f", t);
    else if (t >= 0.01) snprintf(b, n, "%.3f", t);
    else snprintf(b, n, "%.5f", t);
}
static void fmt_x(char *b, size_t n, double x) {
    if (!(x > 0)) snprintf(b, n, "-");
    else if (x >= 100) snprintf(b, n, "%.0fx", x);
    else if (x >= 10) snprintf(b, n, "%.1fx", x);
    else if (x >= 0.01) snprintf(b, n, "%.2fx", x);
    else snprintf(b, n, "%.4fx", x);
}
static void fmt_bytes(char *b, size_t n, double v) {
    if (!(v >= 0)) snprintf(b, n, "-");
    else if (v < 1) snprintf(b, n, "0");
    else if (v < 1024) snprintf(b, n, "%.0f B", v);
    else if (v < 1024.0 * 1024) snprintf(b, n, "%.1f KiB", v / 1024);
    else if (v < 1024.0 * 1024 * 1024) snprintf(b, n, "%.1f MiB", v / (1024.0 * 1024));
    else snprintf(b, n, "%.1f GiB", v / (1024.0 * 1024 * 1024));
}

static const char *causal_word(int causal) { return causal ? "causal" : "non-causal"; }

/* The label of a row in tables: "02 naive_gpu" for a stage, "sdpa_flash" for a peer. */
static void row_label(char *b, size_t n, const row_t *r) {
    if (r->name[0] && strcmp(r->name, r->stage)) snprintf(b, n, "%s %s", r->stage, r->name);
    else snprintf(b, n, "%s", r->stage);
}

static int mkdir_p_parent(const char *path) {
    char buf[1024];
    if (strlen(path) >= sizeof buf) return -1;
    strcpy(buf, path);
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf) return 0;
    *slash = 0;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* ---- the sweep ------------------------------------------------------------------------------ */

typedef struct {
    const cfg_t *c;
    rows_t *rows;
    const char *gpu, *date;
    int gpu_ok;
    char gpu_why[256];
    double cpu_gflops; /* the CPU stage's last measured rate; 0 before the first */
    int cpu_calibrated;
    int runs, total, failed;
} sweep_t;

static void fill_ids(sweep_t *sw, row_t *r, const attn_stage *s, const attn_problem *p) {
    set_str(r->gpu, sizeof r->gpu, sw->gpu);
    set_str(r->date, sizeof r->date, sw->date);
    set_str(r->commit, sizeof r->commit, sw->c->commit);
    set_str(r->stage, sizeof r->stage, s->id);
    set_str(r->name, sizeof r->name, s->name);
    set_str(r->dtype, sizeof r->dtype, attn_dtype_name(p->dtype));
    r->B = p->B, r->H = p->H, r->N = p->N, r->D = p->D, r->causal = p->causal;
}

/* A status of attn_run() other than OK, as a row. */
static void status_row(row_t *r, attn_status st, const char *msg) {
    switch (st) {
    case ATTN_ENOMEM: snprintf(r->status, sizeof r->status, "OOM"); break;
    case ATTN_EUNSUPPORTED: snprintf(r->status, sizeof r->status, "unsupported"); break;
    case ATTN_ENODEV: snprintf(r->status, sizeof r->status, "no-gpu"); break;
    default: snprintf(r->status, sizeof r->status, "error"); break;
    }
    if (st == ATTN_ENOMEM || st == ATTN_EUNSUPPORTED || st == ATTN_ENODEV)
        set_note(r, "%s", msg);
    else
        set_note(r, "%s: %s", attn_status_name(st), msg);
}

/* The time of one run, estimated from this stage's largest measured smaller point of the same
 * panel, scaled by the FLOP ratio; 0 when there is none. */
static double estimate_from_rows(const sweep_t *sw, const attn_stage *s, const attn_problem *p) {
    const row_t *best = NULL;
    for (size_t i = 0; i < sw->rows->n; i++) {
        const row_t *r = &sw->rows->v[i];
        if (strcmp(r->stage, s->id) || !is_ok(r) || r->D != p->D || r->causal != p->causal ||
            r->B != p->B || r->H != p->H || r->N >= p->N)
            continue;
        if (!best || r->N > best->N) best = r;
    }
    if (!best) return 0;
    attn_problem q = *p;
    q.N = best->N;
    return best->ms * attn_flops(p) / attn_flops(&q);
}

static void calibrate_cpu(sweep_t *sw, const attn_stage *s) {
    sw->cpu_calibrated = 1;
    /* 8 heads of 512 rows (0.5 GFLOP at D=64): enough rows per head that the per-head set-up of the
     * OpenMP loop does not dominate, as it did at 4 x 256 (3.4 GFLOP/s measured there on 16 cores,
     * 24.5 at the sweep's sizes). */
    attn_problem p = attn_problem_make(1, 8, 512, sw->c->dims[0], 0);
    if (attn_stage_supports(s, &p) != ATTN_OK) p = attn_problem_make(1, 8, 512, 64, 0);
    attn_inputs in;
    memset(&in, 0, sizeof in);
    if (attn_inputs_random(&in, &p, 12345, ATTN_INIT_NORMAL) != ATTN_OK) return;
    attn_run_opts o = attn_run_opts_default();
    o.warmup = 1, o.repeat = 1, o.check = 0;
    attn_result res;
    memset(&res, 0, sizeof res);
    if (attn_run(s, &in, &o, &res, NULL, NULL) == ATTN_OK && res.ms_median > 0)
        sw->cpu_gflops = attn_flops(&p) / (res.ms_median * 1e6);
    attn_inputs_free(&in);
}

static int clamp_reps(const cfg_t *c, double est_ms) {
    double want = est_ms > 1e-4 ? ceil(c->repeat_ms / est_ms) : c->max_rep;
    if (want < c->min_rep) want = c->min_rep;
    if (want > c->max_rep) want = c->max_rep;
    return (int)want;
}
static int pick_warmup(double est_ms) { return est_ms >= 250 ? 0 : est_ms >= 20 ? 1 : 2; }

static void progress_start(sweep_t *sw, const attn_stage *s, const attn_problem *p) {
    fprintf(stderr, "[%*d/%d] D=%-3lld %-10s N=%-6lld %s %-14s ", sw->total >= 100 ? 3 : 2,
            sw->runs, sw->total, (long long)p->D, causal_word(p->causal), (long long)p->N, s->id,
            s->name);
    fflush(stderr);
}

static void progress_end(const row_t *r, double secs) {
    if (!strcmp(r->status, "ok") || !strcmp(r->status, "FAIL")) {
        char ms[32], tf[32];
        fmt_ms(ms, sizeof ms, r->ms);
        fmt_tf(tf, sizeof tf, r->tflops);
        fprintf(stderr, "%9s ms %8s TFLOP/s  %2d reps  %s", ms, tf, r->repeats, r->check);
        if (!strcmp(r->status, "FAIL")) fprintf(stderr, "  FAIL: %s", r->note);
    } else {
        fprintf(stderr, "%s: %s", r->status, r->note);
    }
    fprintf(stderr, "  (%.1f s)\n", secs);
}

static void run_point(sweep_t *sw, const attn_stage *s, const attn_inputs *in) {
    const cfg_t *c = sw->c;
    const attn_problem *p = &in->p;
    row_t *r = rows_add(sw->rows);
    fill_ids(sw, r, s, p);
    sw->runs++;
    double t0 = now_s();

    if (!s->run) {
        snprintf(r->status, sizeof r->status, "no-gpu");
        attn_stage_available(s); /* the reason it was not built: no nvcc, or (stage 10) no NCCL */
        set_note(r, "%s", attn_last_error());
    } else if (s->on_gpu && !sw->gpu_ok) {
        snprintf(r->status, sizeof r->status, "no-gpu");
        set_note(r, "%s", sw->gpu_why);
    } else if (attn_stage_available(s) != ATTN_OK) {
        snprintf(r->status, sizeof r->status, "unavailable");
        set_note(r, "%s", attn_last_error());
    } else if (attn_stage_supports(s, p) != ATTN_OK) {
        snprintf(r->status, sizeof r->status, "unsupported");
        set_note(r, "%s", attn_last_error());
    }
    if (r->status[0]) {
        if (strcmp(r->status, "no-gpu")) { /* the banner at the start said why, once */
            progress_start(sw, s, p);
            progress_end(r, now_s() - t0);
        }
        return;
    }
    progress_start(sw, s, p);

    double est_ms = 0;
    if (!s->on_gpu) {
        if (!sw->cpu_calibrated) calibrate_cpu(sw, s);
        if (sw->cpu_gflops > 0) {
            est_ms = attn_flops(p) / (sw->cpu_gflops * 1e6);
            if (est_ms > c->cpu_limit_s * 1e3 || !in->q) {
                snprintf(r->status, sizeof r->status, "cpu-skip");
                set_note(r, "est. %.1f s per run (%.1f GFLOP at %.2f GFLOP/s measured) > %.1f s limit",
                         est_ms / 1e3, attn_flops(p) / 1e9, sw->cpu_gflops, c->cpu_limit_s);
                progress_end(r, now_s() - t0);
                return;
            }
        }
    } else {
        est_ms = estimate_from_rows(sw, s, p);
    }

    attn_result res;
    attn_run_opts o = attn_run_opts_default();
    attn_status st;
    if (est_ms <= 0) {
        /* No estimate yet: one untimed and one timed run, without the check. */
        o.warmup = 1, o.repeat = 1, o.check = 0;
        memset(&res, 0, sizeof res);
        st = attn_run(s, in, &o, &res, NULL, NULL);
        if (st != ATTN_OK) {
            status_row(r, st, attn_last_error());
            if (st != ATTN_ENOMEM && st != ATTN_EUNSUPPORTED && st != ATTN_ENODEV) sw->failed++;
            progress_end(r, now_s() - t0);
            return;
        }
        est_ms = res.ms_median > 0 ? res.ms_median : 1e-3;
    }
    o = attn_run_opts_default();
    o.repeat = clamp_reps(c, est_ms);
    o.warmup = pick_warmup(est_ms);
    o.check = c->check_rows > 0;
    o.full_heads = 0;
    o.check_rows = c->check_rows;
    o.seed = 0x5eedULL + (uint64_t)p->N * 131 + (uint64_t)p->D * 7 + (uint64_t)p->causal;
    memset(&res, 0, sizeof res);
    st = attn_run(s, in, &o, &res, NULL, NULL);
    if (st != ATTN_OK) {
        status_row(r, st, attn_last_error());
        if (st != ATTN_ENOMEM && st != ATTN_EUNSUPPORTED && st != ATTN_ENODEV) sw->failed++;
        progress_end(r, now_s() - t0);
        return;
    }
    r->ms = res.ms_median;
    r->tflops = res.tflops > 0 ? res.tflops : attn_flops(p) / (res.ms_median * 1e9);
    r->repeats = res.runs > 0 ? res.runs : o.repeat;
    r->workspace = (double)res.extra_bytes;
    r->extra = (double)(res.extra_measured > res.extra_bytes ? res.extra_measured : res.extra_bytes);
    if (!s->on_gpu && res.ms_median > 0) sw->cpu_gflops = attn_flops(p) / (res.ms_median * 1e6);
    if (res.checked) {
        r->max_err = res.chk.max_abs_err;
        if (res.chk.pass) {
            snprintf(r->status, sizeof r->status, "ok");
            snprintf(r->check, sizeof r->check, "pass");
        } else {
            snprintf(r->status, sizeof r->status, "FAIL");
            snprintf(r->check, sizeof r->check, "FAIL");
            set_note(r, "%lld rows: max abs err %.3g; rel l2 %.3g; %lld non-finite; worst at "
                     "b=%lld h=%lld n=%lld d=%lld: got %.5g want %.5g (tol %.3g)",
                     (long long)res.chk.rows_checked, res.chk.max_abs_err, res.chk.rel_l2,
                     (long long)res.chk.nonfinite, (long long)res.chk.worst_b,
                     (long long)res.chk.worst_h, (long long)res.chk.worst_n,
                     (long long)res.chk.worst_d, res.chk.worst_got, res.chk.worst_want,
                     res.chk.worst_tol);
            sw->failed++;
        }
    } else {
        snprintf(r->status, sizeof r->status, "ok");
        snprintf(r->check, sizeof r->check, "-");
    }
    if (res.identical == 0 && !r->note[0])
        set_note(r, "warning: the last timed run's output differs from the first run's");
    progress_end(r, now_s() - t0);
}

static void run_sweep(sweep_t *sw) {
    const cfg_t *c = sw->c;
    int nc = c->causal_mode < 0 ? 2 : 1;
    sw->total = c->ndims * c->nseqs * nc * c->nstage_sel;
    for (int di = 0; di < c->ndims; di++) {
        for (int ni = 0; ni < c->nseqs; ni++) {
            attn_problem p = attn_problem_make(c->B, c->H, c->seqs[ni], c->dims[di], 0);
            attn_inputs in;
            memset(&in, 0, sizeof in);
            /* One set of inputs per (D, N), used for both causal settings (they do not change
             * the inputs). */
            int need = 0;
            for (int k = 0; k < c->nstage_sel; k++) {
                const attn_stage *s = &attn_stages[c->stage_sel[k]];
                if (!s->run || (s->on_gpu && !sw->gpu_ok) || attn_stage_available(s) != ATTN_OK ||
                    attn_stage_supports(s, &p) != ATTN_OK)
                    continue;
                if (!s->on_gpu) {
                    /* The CPU stage alone needs no inputs where it would be skipped anyway. */
                    if (!sw->cpu_calibrated) calibrate_cpu(sw, s);
                    attn_problem pc = p;
                    pc.causal = c->causal_mode != 0; /* the cheaper setting */
                    if (sw->cpu_gflops > 0 && attn_flops(&pc) / (sw->cpu_gflops * 1e6) > c->cpu_limit_s * 1e3)
                        continue;
                }
                need = 1;
            }
            attn_status ist = ATTN_OK;
            char imsg[256] = "";
            if (need) {
                double t0 = now_s();
                fprintf(stderr, "inputs B=%lld H=%lld N=%lld D=%lld ... ", (long long)p.B,
                        (long long)p.H, (long long)p.N, (long long)p.D);
                fflush(stderr);
                ist = attn_problem_validate(&p);
                if (ist == ATTN_OK) ist = attn_inputs_random(&in, &p, 0xA77E + (uint64_t)(di * 64 + ni), ATTN_INIT_NORMAL);
                if (ist != ATTN_OK) snprintf(imsg, sizeof imsg, "%s", attn_last_error());
                fprintf(stderr, "%s (%.1f s)\n", ist == ATTN_OK ? "done" : imsg, now_s() - t0);
            }
            for (int ci = 0; ci < nc; ci++) {
                int causal = c->causal_mode < 0 ? ci : c->causal_mode;
                in.p = p;
                in.p.causal = causal;
                for (int k = 0; k < c->nstage_sel; k++) {
                    const attn_stage *s = &attn_stages[c->stage_sel[k]];
                    if (ist != ATTN_OK) {
                        row_t *r = rows_add(sw->rows);
                        fill_ids(sw, r, s, &in.p);
                        status_row(r, ist, imsg);
                        sw->runs++;
                        sw->failed++;
                        continue;
                    }
                    run_point(sw, s, &in);
                }
            }
            if (need && ist == ATTN_OK) attn_inputs_free(&in);
        }
    }
}

/* ---- CSV ------------------------------------------------------------------------------------ */

static const char *const csv_cols[] = {
    "gpu", "date", "commit", "stage", "name", "B", "H", "N", "D", "causal", "dtype", "status", "ms",
    "tflops", "speedup_vs_02", "speedup_vs_fastest", "extra_bytes", "workspace_bytes",
    "max_abs_err", "check", "repeats", "note"};
#define NCOLS ((int)(sizeof csv_cols / sizeof *csv_cols))

static void csv_num(FILE *f, double v, const char *fmt) {
    if (isfinite(v)) fprintf(f, fmt, v);
}

static int write_csv(const char *path, const rows_t *rows) {
    if (mkdir_p_parent(path) != 0) {
        fprintf(stderr, "attn-bench: cannot create the folder of %s: %s\n", path, strerror(errno));
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "attn-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (int i = 0; i < NCOLS; i++) fprintf(f, "%s%s", csv_cols[i], i + 1 < NCOLS ? "," : "\n");
    for (size_t i = 0; i < rows->n; i++) {
        const row_t *r = &rows->v[i];
        fprintf(f, "%s,%s,%s,%s,%s,%lld,%lld,%lld,%lld,%d,%s,%s,", r->gpu, r->date, r->commit,
                r->stage, r->name, (long long)r->B, (long long)r->H, (long long)r->N,
                (long long)r->D, r->causal, r->dtype, r->status);
        csv_num(f, r->ms, "%.6g");
        fputc(',', f);
        csv_num(f, r->tflops, "%.6g");
        fputc(',', f);
        csv_num(f, r->sp02, "%.5g");
        fputc(',', f);
        csv_num(f, r->spbest, "%.5g");
        fputc(',', f);
        csv_num(f, r->extra, "%.0f");
        fputc(',', f);
        csv_num(f, r->workspace, "%.0f");
        fputc(',', f);
        csv_num(f, r->max_err, "%.4g");
        fprintf(f, ",%s,", r->check);
        if (r->repeats > 0) fprintf(f, "%d", r->repeats);
        fprintf(f, ",%s\n", r->note);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "attn-bench: writing %s failed: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Splits one CSV line (RFC 4180 quotes allowed) into at most max fields, in place. */
static int csv_split(char *line, char **fields, int max) {
    int n = 0;
    char *p = line;
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    for (;;) {
        if (n == max) return n;
        if (*p == '"') {
            char *w = ++p;
            fields[n++] = w;
            for (;;) {
                if (!*p) break;
                if (*p == '"' && p[1] == '"') { *w++ = '"'; p += 2; continue; }
                if (*p == '"') { p++; break; }
                *w++ = *p++;
            }
            while (*p && *p != ',') p++;
            int end = !*p;
            *w = 0;
            if (end) return n;
            p++;
        } else {
            fields[n++] = p;
            char *comma = strchr(p, ',');
            if (!comma) return n;
            *comma = 0;
            p = comma + 1;
        }
    }
}

static double num_or_nan(const char *s) {
    if (!s || !*s) return NAN;
    char *end;
    double v = strtod(s, &end);
    return end == s ? NAN : v;
}

static int read_csv(const char *path, rows_t *rows) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "attn-bench: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[4096];
    char *fields[64];
    int idx[NCOLS];
    if (!fgets(line, sizeof line, f)) {
        fprintf(stderr, "attn-bench: %s is empty\n", path);
        fclose(f);
        return -1;
    }
    int nh = csv_split(line, fields, 64);
    for (int k = 0; k < NCOLS; k++) {
        idx[k] = -1;
        for (int j = 0; j < nh; j++)
            if (!strcmp(fields[j], csv_cols[k])) idx[k] = j;
    }
    static const int required[] = {3, 5, 6, 7, 8, 9, 11}; /* stage B H N D causal status */
    for (size_t k = 0; k < sizeof required / sizeof *required; k++) {
        if (idx[required[k]] < 0) {
            fprintf(stderr, "attn-bench: %s has no column '%s'\n", path, csv_cols[required[k]]);
            fclose(f);
            return -1;
        }
    }
    int lineno = 1, added = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '\n' || line[0] == '#') continue;
        int n = csv_split(line, fields, 64);
        const char *v[NCOLS];
        for (int k = 0; k < NCOLS; k++) v[k] = idx[k] >= 0 && idx[k] < n ? fields[idx[k]] : "";
        row_t *r = rows_add(rows);
        set_str(r->gpu, sizeof r->gpu, v[0]);
        set_str(r->date, sizeof r->date, v[1]);
        set_str(r->commit, sizeof r->commit, v[2]);
        set_str(r->stage, sizeof r->stage, v[3]);
        set_str(r->name, sizeof r->name, v[4]);
        r->B = (int64_t)num_or_nan(v[5]);
        r->H = (int64_t)num_or_nan(v[6]);
        r->N = (int64_t)num_or_nan(v[7]);
        r->D = (int64_t)num_or_nan(v[8]);
        r->causal = atoi(v[9]) != 0 || !strcmp(v[9], "True") || !strcmp(v[9], "true");
        set_str(r->dtype, sizeof r->dtype, v[10][0] ? v[10] : "fp16");
        set_str(r->status, sizeof r->status, v[11]);
        r->ms = num_or_nan(v[12]);
        r->tflops = num_or_nan(v[13]);
        r->extra = num_or_nan(v[16]);
        r->workspace = num_or_nan(v[17]);
        r->max_err = num_or_nan(v[18]);
        set_str(r->check, sizeof r->check, v[19]);
        r->repeats = v[20][0] ? atoi(v[20]) : 0;
        set_str(r->note, sizeof r->note, v[21]);
        if (!r->stage[0] || r->N <= 0 || r->D <= 0 || r->B <= 0 || r->H <= 0) {
            fprintf(stderr, "attn-bench: %s:%d: skipped a malformed row\n", path, lineno);
            rows->n--;
            continue;
        }
        if (!(r->tflops >= 0) && r->ms > 0) {
            attn_problem p = attn_problem_make(r->B, r->H, r->N, r->D, r->causal);
            r->tflops = attn_flops(&p) / (r->ms * 1e9);
        }
        added++;
    }
    fclose(f);
    return added;
}

/* ---- comparisons ---------------------------------------------------------------------------- */

static void compute_speedups(rows_t *rows) {
    for (size_t i = 0; i < rows->n; i++) {
        row_t *r = &rows->v[i];
        r->sp02 = r->spbest = NAN;
        if (!is_ok(r)) continue;
        double base = NAN, best = INFINITY;
        for (size_t j = 0; j < rows->n; j++) {
            const row_t *q = &rows->v[j];
            if (!is_ok(q) || !same_point(r, q)) continue;
            if (!strcmp(q->stage, BASELINE_ID)) base = q->ms;
            if (q->ms < best) best = q->ms;
        }
        if (base > 0) r->sp02 = base / r->ms;
        r->spbest = best / r->ms;
    }
}

/* Series (stages, then peers) in display order: registry order, then by first appearance. */
typedef struct {
    char id[32];
} series_t;

static int build_series(const rows_t *rows, series_t *out, int max) {
    int n = 0;
    for (int i = 0; i < attn_num_stages && n < max; i++)
        for (size_t j = 0; j < rows->n; j++)
            if (!strcmp(rows->v[j].stage, attn_stages[i].id)) {
                snprintf(out[n++].id, sizeof out->id, "%s", attn_stages[i].id);
                break;
            }
    for (size_t j = 0; j < rows->n && n < max; j++) {
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= !strcmp(out[k].id, rows->v[j].stage);
        if (!seen) snprintf(out[n++].id, sizeof out->id, "%s", rows->v[j].stage);
    }
    return n;
}

static int cmp_panel(const void *a, const void *b) {
    const row_t *x = *(const row_t *const *)a, *y = *(const row_t *const *)b;
    if (x->D != y->D) return x->D < y->D ? -1 : 1;
    if (x->causal != y->causal) return x->causal - y->causal;
    if (x->B != y->B) return x->B < y->B ? -1 : 1;
    if (x->H != y->H) return x->H < y->H ? -1 : 1;
    return strcmp(x->dtype, y->dtype);
}

/* One representative row per panel (B, H, D, causal, dtype), sorted; the caller frees. */
static int build_panels(const rows_t *rows, const row_t ***out) {
    const row_t **pan = malloc((rows->n + 1) * sizeof *pan);
    int n = 0;
    for (size_t i = 0; i < rows->n; i++) {
        int seen = 0;
        for (int k = 0; k < n && !seen; k++) seen = same_panel(pan[k], &rows->v[i]);
        if (!seen) pan[n++] = &rows->v[i];
    }
    qsort(pan, (size_t)n, sizeof *pan, cmp_panel);
    *out = pan;
    return n;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorted distinct N of a panel; the caller frees. */
static int panel_seqs(const rows_t *rows, const row_t *panel, int64_t **out) {
    int64_t *v = malloc((rows->n + 1) * sizeof *v);
    int n = 0;
    for (size_t i = 0; i < rows->n; i++) {
        if (!same_panel(panel, &rows->v[i])) continue;
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= v[k] == rows->v[i].N;
        if (!seen) v[n++] = rows->v[i].N;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    *out = v;
    return n;
}

static const row_t *find_row(const rows_t *rows, const row_t *panel, int64_t N, const char *stage) {
    for (size_t i = 0; i < rows->n; i++) {
        const row_t *r = &rows->v[i];
        if (same_panel(panel, r) && r->N == N && !strcmp(r->stage, stage)) return r;
    }
    return NULL;
}

/* ---- tables: the same cells, as aligned text or as Markdown --------------------------------- */

#define TMAX_COLS 16
typedef struct {
    int ncols;
    const char *hdr[TMAX_COLS];
    char right[TMAX_COLS]; /* 1: right-aligned */
    char **cells;
    int nrows, cap;
    char spec[512]; /* the headers point into this */
} table_t;

static void table_init(table_t *t, const char *spec) {
    /* spec: "N>|stage<|ms>" ... columns separated by '|', ending in '>' (right) or '<' (left) */
    memset(t, 0, sizeof *t);
    snprintf(t->spec, sizeof t->spec, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(t->spec, "|", &save); tok && t->ncols < TMAX_COLS;
         tok = strtok_r(NULL, "|", &save)) {
        size_t len = strlen(tok);
        t->right[t->ncols] = tok[len - 1] == '>';
        tok[len - 1] = 0;
        t->hdr[t->ncols++] = tok;
    }
}

static void table_row(table_t *t, const char *const *cells) {
    if (t->nrows == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 32;
        t->cells = realloc(t->cells, (size_t)t->cap * TMAX_COLS * sizeof *t->cells);
        if (!t->cells) exit(1);
    }
    for (int k = 0; k < t->ncols; k++) {
        char *s = strdup(cells[k] ? cells[k] : "");
        if (!s) exit(1);
        t->cells[t->nrows * TMAX_COLS + k] = s;
    }
    t->nrows++;
}

static void table_free(table_t *t) {
    for (int i = 0; i < t->nrows; i++)
        for (int k = 0; k < t->ncols; k++) free(t->cells[i * TMAX_COLS + k]);
    free(t->cells);
    t->cells = NULL;
    t->nrows = t->cap = 0;
}

static int utf8_width(const char *s) {
    int w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

static void pad(FILE *f, int n) {
    for (; n > 0; n--) fputc(' ', f);
}

static void table_print(table_t *t, int markdown, FILE *f) {
    int width[TMAX_COLS];
    for (int k = 0; k < t->ncols; k++) {
        width[k] = utf8_width(t->hdr[k]);
        for (int i = 0; i < t->nrows; i++) {
            int w = utf8_width(t->cells[i * TMAX_COLS + k]);
            if (w > width[k]) width[k] = w;
        }
    }
    if (markdown) {
        for (int k = 0; k < t->ncols; k++) fprintf(f, "| %s ", t->hdr[k]);
        fprintf(f, "|\n");
        for (int k = 0; k < t->ncols; k++) fprintf(f, "|%s", t->right[k] ? "---:" : ":---");
        fprintf(f, "|\n");
        for (int i = 0; i < t->nrows; i++) {
            for (int k = 0; k < t->ncols; k++) fprintf(f, "| %s ", t->cells[i * TMAX_COLS + k]);
            fprintf(f, "|\n");
        }
    } else {
        for (int line = -2; line < t->nrows; line++) {
            for (int k = 0; k < t->ncols; k++) {
                const char *s = line == -2 ? t->hdr[k] : line == -1 ? NULL : t->cells[line * TMAX_COLS + k];
                int last = k + 1 == t->ncols;
                if (k) fputs("  ", f);
                if (!s) {
                    for (int j = 0; j < width[k]; j++) fputc('-', f);
                    continue;
                }
                int w = utf8_width(s);
                if (t->right[k]) pad(f, width[k] - w);
                fputs(s, f);
                if (!t->right[k] && !last) pad(f, width[k] - w);
            }
            fputc('\n', f);
        }
    }
    table_free(t);
}

/* The cells every table shares for one row: ms, TFLOP/s, vs 02, vs best, extra mem, check. */
static void metric_cells(const row_t *r, char c[6][340]) {
    for (int k = 0; k < 6; k++) c[k][0] = 0;
    int ok = !strcmp(r->status, "ok"), fail = !strcmp(r->status, "FAIL");
    if (ok || fail) {
        /* A wrong result's time means nothing: the CSV keeps it, the table shows FAIL. */
        if (fail) snprintf(c[0], 340, "FAIL");
        else fmt_ms(c[0], 340, r->ms);
        fmt_tf(c[1], 340, fail ? NAN : r->tflops);
        fmt_x(c[2], 340, ok ? r->sp02 : NAN);
        fmt_x(c[3], 340, ok ? r->spbest : NAN);
        fmt_bytes(c[4], 340, r->extra);
        if (fail)
            snprintf(c[5], 340, "**FAIL** %s", r->note);
        else if (isfinite(r->max_err))
            snprintf(c[5], 340, "%s %.1e%s%.300s", r->check[0] ? r->check : "pass", r->max_err,
                     r->note[0] ? "; " : "", r->note);
        else
            snprintf(c[5], 340, "%s%s%.300s", r->check[0] ? r->check : "-", r->note[0] ? "; " : "",
                     r->note);
    } else {
        snprintf(c[0], 340, "%s", r->status);
        snprintf(c[1], 340, "-");
        snprintf(c[2], 340, "-");
        snprintf(c[3], 340, "-");
        snprintf(c[4], 340, "-");
        snprintf(c[5], 340, "%s", r->note);
    }
}

static void strip_bold(char *s, int markdown) {
    if (markdown) return;
    char *p;
    while ((p = strstr(s, "**")) != NULL) memmove(p, p + 2, strlen(p + 2) + 1);
}

static void print_header(const rows_t *rows, int markdown, FILE *f) {
    const row_t *first = rows->n ? &rows->v[0] : NULL;
    for (size_t i = 0; i < rows->n; i++)
        if (strcmp(rows->v[i].status, "no-gpu")) {
            first = &rows->v[i];
            break;
        }
    if (!first) return;
    if (markdown)
        fprintf(f, "GPU: **%s** · date: %s · commit: `%s`\n\n", first->gpu, first->date, first->commit);
    else
        fprintf(f, "attn-bench  GPU: %s  date: %s  commit: %s\n\n", first->gpu, first->date, first->commit);
    /* GPU stages that did not run anywhere, and why. */
    char skipped[256] = "", why[320] = "";
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        int any = 0, ran = 0;
        for (size_t j = 0; j < rows->n; j++) {
            const row_t *r = &rows->v[j];
            if (strcmp(r->stage, s->id)) continue;
            any = 1;
            if (strcmp(r->status, "no-gpu")) ran = 1;
            else if (!why[0]) snprintf(why, sizeof why, "%s", r->note);
        }
        if (any && !ran) {
            size_t len = strlen(skipped);
            snprintf(skipped + len, sizeof skipped - len, "%s%s", len ? ", " : "", s->id);
        }
    }
    if (skipped[0])
        fprintf(f, "%sGPU stages skipped (%s): %s.%s\n\n", markdown ? "**" : "", skipped, why,
                markdown ? "**" : "");
}

static void print_legend(int markdown, FILE *f) {
    const char *b = markdown ? "*" : "";
    fprintf(f,
        "%sms%s: median of the timed runs after warm-up. %sTFLOP/s%s: 4·B·H·N²·D FLOPs (half when "
        "causal) / time. %svs 02%s, %svs best%s: the time of stage 02, or of the fastest row at that "
        "point, over this row's time (above 1: faster). %sextra mem%s: device memory beyond Q, K, V, "
        "O and LSE. %scheck%s: max |O - O_ref| on sampled rows against the double CPU reference; a "
        "FAIL row is never counted as a timing. OOM: the stage's workspace does not fit; cpu-skip: "
        "the CPU stage would take longer than the limit; unavailable: the stage does not run on this "
        "GPU (its note says why); unsupported: a head dim the stage does not take.\n\n",
        b, b, b, b, b, b, b, b, b, b, b, b);
}

static void panel_title(const row_t *p, int markdown, FILE *f) {
    if (markdown)
        fprintf(f, "**D = %lld, %s** (B=%lld, H=%lld, %s)\n\n", (long long)p->D,
                causal_word(p->causal), (long long)p->B, (long long)p->H, p->dtype);
    else
        fprintf(f, "== D=%lld, %s  (B=%lld, H=%lld, %s) ==\n", (long long)p->D,
                causal_word(p->causal), (long long)p->B, (long long)p->H, p->dtype);
}

static void print_tables(const rows_t *rows, int markdown, FILE *f) {
    series_t series[64];
    int ns = build_series(rows, series, 64);
    const row_t **pan;
    int np = build_panels(rows, &pan);
    for (int pi = 0; pi < np; pi++) {
        int64_t *seqs;
        int nn = panel_seqs(rows, pan[pi], &seqs);
        table_t t;
        table_init(&t, "N>|stage<|ms>|TFLOP/s>|vs 02>|vs best>|extra mem>|check<");
        for (int ni = 0; ni < nn; ni++) {
            int first = 1;
            for (int si = 0; si < ns; si++) {
                const row_t *r = find_row(rows, pan[pi], seqs[ni], series[si].id);
                if (!r || !strcmp(r->status, "no-gpu")) continue;
                char n[32], label[96], m[6][340];
                snprintf(n, sizeof n, "%lld", (long long)seqs[ni]);
                row_label(label, sizeof label, r);
                metric_cells(r, m);
                strip_bold(m[5], markdown);
                const char *cells[8] = {first ? n : "", label, m[0], m[1], m[2], m[3], m[4], m[5]};
                table_row(&t, cells);
                first = 0;
            }
        }
        if (t.nrows) {
            panel_title(pan[pi], markdown, f);
            table_print(&t, markdown, f);
            fputc('\n', f);
        } else {
            table_free(&t);
        }
        free(seqs);
    }
    free(pan);
}

/* The PyTorch SDPA peers that stage <last> is set against: FlashAttention-2 and cuDNN. */
static const char *const sdpa_peer[2] = {"sdpa_flash", "sdpa_cudnn"};
static const char *const sdpa_label[2] = {"FA2", "cuDNN"};

/* The highest-numbered stage with a timing in these rows (06, the full FA2), or NULL. */
static const char *top_stage(const rows_t *rows) {
    const char *mine = NULL;
    for (size_t j = 0; j < rows->n; j++) {
        const char *id = rows->v[j].stage;
        if (!is_ok(&rows->v[j]) || !id[0] || strspn(id, "0123456789") != strlen(id)) continue;
        if (!mine || atoi(id) > atoi(mine)) mine = id;
    }
    return mine;
}

static int have_sdpa_rows(const rows_t *rows) {
    for (size_t i = 0; i < rows->n; i++)
        if (!strcmp(rows->v[i].stage, sdpa_peer[0]) || !strcmp(rows->v[i].stage, sdpa_peer[1])) return 1;
    return 0;
}

/* Stage <last> against the PyTorch SDPA peers: the peer's time over the stage's (above 1: the
 * stage is faster). Printed only when such peer rows exist. */
static void print_peer_ratios(const rows_t *rows, int markdown, FILE *f) {
    const char *mine = top_stage(rows);
    if (!have_sdpa_rows(rows) || !mine) return;
    const row_t **pan;
    int np = build_panels(rows, &pan);
    if (np > 7) np = 7; /* 1 + 2 * 7 columns fit TMAX_COLS */
    /* Distinct N over all panels. */
    int64_t *all = malloc((rows->n + 1) * sizeof *all);
    int nn = 0;
    for (size_t i = 0; i < rows->n; i++) {
        int seen = 0;
        for (int k = 0; k < nn; k++) seen |= all[k] == rows->v[i].N;
        if (!seen) all[nn++] = rows->v[i].N;
    }
    qsort(all, (size_t)nn, sizeof *all, cmp_i64);
    char spec[512] = "N>", hdr[TMAX_COLS][64];
    for (int pi = 0; pi < np; pi++)
        for (int k = 0; k < 2; k++) {
            snprintf(hdr[2 * pi + k], sizeof hdr[0], "D=%lld%s vs %s", (long long)pan[pi]->D,
                     pan[pi]->causal ? " causal" : "", sdpa_label[k]);
            size_t len = strlen(spec);
            snprintf(spec + len, sizeof spec - len, "|%s>", hdr[2 * pi + k]);
        }
    table_t t;
    table_init(&t, spec);
    for (int ni = 0; ni < nn; ni++) {
        char cells[TMAX_COLS][64];
        const char *cp[TMAX_COLS];
        snprintf(cells[0], sizeof cells[0], "%lld", (long long)all[ni]);
        int any = 0;
        for (int pi = 0; pi < np; pi++)
            for (int k = 0; k < 2; k++) {
                char *c = cells[1 + 2 * pi + k];
                const row_t *a = find_row(rows, pan[pi], all[ni], mine);
                const row_t *b = find_row(rows, pan[pi], all[ni], sdpa_peer[k]);
                if (!a || !b) snprintf(c, 64, "-");
                else if (!is_ok(b)) snprintf(c, 64, "%s %s", sdpa_label[k], b->status);
                else if (!is_ok(a)) snprintf(c, 64, "%s %s", mine, a->status);
                else {
                    snprintf(c, 64, "%.2f", b->ms / a->ms);
                    any = 1;
                }
            }
        for (int k = 0; k < 1 + 2 * np; k++) cp[k] = cells[k];
        if (any) table_row(&t, cp);
    }
    if (t.nrows) {
        if (markdown)
            fprintf(f, "**Stage %s against PyTorch SDPA** (FlashAttention-2 and cuDNN backends): the "
                       "peer's time over stage %s's; above 1, stage %s is faster.\n\n", mine, mine, mine);
        else
            fprintf(f, "== Stage %s against PyTorch SDPA: peer time / stage %s time (above 1: %s is faster) ==\n",
                    mine, mine, mine);
        table_print(&t, markdown, f);
        fputc('\n', f);
    } else {
        table_free(&t);
    }
    free(all);
    free(pan);
}

/* One stage's rows, for its README: D, causal, N, ms, TFLOP/s, vs 02, extra mem, check. The last
 * stage (06) also gets the SDPA peers of the same run when the CSV has them: their TFLOP/s and the
 * peer's time over the stage's, so its README holds the whole comparison the goal is judged by. */
static int print_stage_table(const rows_t *rows, const char *id, int markdown, FILE *f) {
    const row_t **pan;
    int np = build_panels(rows, &pan);
    const char *top = top_stage(rows);
    const int with_peers = top && !strcmp(top, id) && have_sdpa_rows(rows);
    table_t t;
    table_init(&t, with_peers ? "D>|causal<|N>|ms>|TFLOP/s>|vs 02>|extra mem>|check<|FA2 TFLOP/s>|cuDNN TFLOP/s>"
                                "|vs FA2>|vs cuDNN>"
                              : "D>|causal<|N>|ms>|TFLOP/s>|vs 02>|extra mem>|check<");
    const row_t *any = NULL;
    for (int pi = 0; pi < np; pi++) {
        int64_t *seqs;
        int nn = panel_seqs(rows, pan[pi], &seqs);
        for (int ni = 0; ni < nn; ni++) {
            const row_t *r = find_row(rows, pan[pi], seqs[ni], id);
            if (!r) continue;
            any = r;
            char d[32], n[32], m[6][340];
            snprintf(d, sizeof d, "%lld", (long long)r->D);
            snprintf(n, sizeof n, "%lld", (long long)r->N);
            metric_cells(r, m);
            strip_bold(m[5], markdown);
            char pc[4][340];
            const char *cells[12] = {d, r->causal ? "yes" : "no", n, m[0], m[1], m[2], m[4], m[5],
                                     pc[0], pc[1], pc[2], pc[3]};
            for (int k = 0; with_peers && k < 2; k++) {
                const row_t *b = find_row(rows, pan[pi], seqs[ni], sdpa_peer[k]);
                if (b && is_ok(b)) fmt_tf(pc[k], sizeof pc[k], b->tflops);
                else snprintf(pc[k], sizeof pc[k], "%s", b ? b->status : "-");
                if (b && is_ok(b) && is_ok(r)) snprintf(pc[2 + k], sizeof pc[k], "%.2f", b->ms / r->ms);
                else snprintf(pc[2 + k], sizeof pc[k], "-");
            }
            table_row(&t, cells);
        }
        free(seqs);
    }
    free(pan);
    if (!any) {
        table_free(&t);
        fprintf(stderr, "attn-bench: no rows for stage %s in this CSV\n", id);
        return -1;
    }
    if (markdown)
        fprintf(f, "Stage %s on **%s** (B=%lld, H=%lld, %s; date %s, commit `%s`):\n\n", id, any->gpu,
                (long long)any->B, (long long)any->H, any->dtype, any->date, any->commit);
    else
        fprintf(f, "stage %s on %s (B=%lld, H=%lld, %s; date %s, commit %s)\n", id, any->gpu,
                (long long)any->B, (long long)any->H, any->dtype, any->date, any->commit);
    table_print(&t, markdown, f);
    return 0;
}

/* ---- main ----------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    cfg_t c;
    if (parse_args(argc, argv, &c) != 0) return 1;
    double t_start = now_s();
    rows_t rows = {0};
    int failed = 0;

    if (c.from) {
        if (read_csv(c.from, &rows) < 0) return 1;
    } else {
        sweep_t sw;
        memset(&sw, 0, sizeof sw);
        sw.c = &c;
        sw.rows = &rows;
        attn_status g = ATTN_ENODEV;
        if (c.cpu_only) {
            snprintf(sw.gpu_why, sizeof sw.gpu_why, "--cpu-only was given");
        } else if (!attn_built_with_cuda()) {
            snprintf(sw.gpu_why, sizeof sw.gpu_why,
                     "this build has no CUDA (nvcc was not found when it was compiled)");
        } else if ((g = attn_gpu_available()) != ATTN_OK) {
            snprintf(sw.gpu_why, sizeof sw.gpu_why, "%s", attn_last_error());
        }
        sw.gpu_ok = g == ATTN_OK && !c.cpu_only;
        apply_defaults(&c, sw.gpu_ok);
        sw.gpu = sw.gpu_ok ? attn_gpu_name() : "none";
        char date[32];
        time_t tt = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tt));
        sw.date = date;
        if (!c.csv) c.csv = "build/bench/bench.csv";

        char dims[256] = "", seqs[512] = "";
        for (int i = 0; i < c.ndims; i++)
            snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", i ? "," : "", (long long)c.dims[i]);
        for (int i = 0; i < c.nseqs; i++)
            snprintf(seqs + strlen(seqs), sizeof seqs - strlen(seqs), "%s%lld", i ? "," : "", (long long)c.seqs[i]);
        fprintf(stderr, "attn-bench: GPU %s; B=%lld H=%lld N=%s D=%s causal=%s; %d stages; aim %.0f ms "
                "of timed work per point (%d..%d repeats); check %lld random rows per point\n",
                sw.gpu, (long long)c.B, (long long)c.H, seqs, dims,
                c.causal_mode < 0 ? "both" : c.causal_mode ? "1" : "0", c.nstage_sel, c.repeat_ms,
                c.min_rep, c.max_rep, (long long)c.check_rows);
        if (!sw.gpu_ok)
            fprintf(stderr, "attn-bench: GPU stages skipped: %s. Running the CPU stage only, at CPU-sized "
                    "shapes.\n", sw.gpu_why);
        run_sweep(&sw);
        failed = sw.failed;

        int cpu_stage = 0;
        for (int k = 0; k < c.nstage_sel; k++) cpu_stage |= !attn_stages[c.stage_sel[k]].on_gpu;
        if (!c.markdown && !c.stage_table) {
            if (cpu_stage && sw.cpu_gflops > 0)
                printf("CPU stage: %.2f GFLOP/s measured; points it would need more than %.1f s per run "
                       "for (above ~%.0f GFLOP) are cpu-skip (--cpu-limit).\n", sw.cpu_gflops,
                       c.cpu_limit_s, sw.cpu_gflops * c.cpu_limit_s);
        }
    }

    if (c.peers) {
        size_t before = rows.n;
        int n = read_csv(c.peers, &rows);
        if (n < 0) return 1;
        int orphans = 0;
        for (size_t i = before; i < rows.n; i++) {
            int match = 0;
            for (size_t j = 0; j < before && !match; j++) match = same_point(&rows.v[i], &rows.v[j]);
            orphans += !match;
        }
        fprintf(stderr, "attn-bench: merged %d peer rows from %s", n, c.peers);
        if (orphans && before) fprintf(stderr, " (%d at points this sweep did not run)", orphans);
        fprintf(stderr, "\n");
    }

    compute_speedups(&rows);

    int rc = 0;
    if (c.csv && (!c.from || c.csv_set)) {
        if (write_csv(c.csv, &rows) == 0) fprintf(stderr, "attn-bench: wrote %zu rows to %s\n", rows.n, c.csv);
        else rc = 1;
    }

    if (c.stage_table) {
        if (print_stage_table(&rows, c.stage_table, c.markdown, stdout) != 0) rc = rc ? rc : 1;
    } else {
        if (!c.from && !c.markdown) fputc('\n', stdout);
        print_header(&rows, c.markdown, stdout);
        print_legend(c.markdown, stdout);
        print_tables(&rows, c.markdown, stdout);
        print_peer_ratios(&rows, c.markdown, stdout);
    }
    if (!c.from) {
        double secs = now_s() - t_start;
        fprintf(stderr, "attn-bench: %zu rows in %.1f s (%.1f min)%s\n", rows.n, secs, secs / 60,
                failed ? "; some stages FAILED or errored, see the table" : "");
        if (!c.markdown && !c.stage_table) printf("Total time: %.1f s.\n", secs);
    }
    free(rows.v);
    if (rc) return rc;
    return failed ? 3 : 0;
}
