/*
 * attn_main.c: build/attn, the front end. Runs one stage on one problem, times it, reports
 * TFLOP/s and memory, and with --check compares it with the double reference.
 *
 * Exit status: 0 done (and PASS with --check); 1 the check FAILED, or the stage could not run
 * (no GPU, not enough memory, a CUDA error), or its results could not be written after the run
 * (stdout, --save); 2 bad input (a flag, a value, an input file, or a --save directory refused before
 * the run).
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "half.h"
#include "harness.h"
#include "hold_signals.h"
#include "npy.h"
#include "reference.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* The example runs on the build that prints it: stage 06 (no N x N scratch: 0.27 GiB of Q, K, V, O at this
 * shape, so it fits any GPU that runs 06) where the build has CUDA, else a CPU model (04m). */
#if ATTN_HAVE_CUDA
#define USAGE_EXAMPLE "--stage 06 --batch 4 --heads 32 --seq 4096 --dim 64 --causal --check"
#else
#define USAGE_EXAMPLE "--stage 04m --seq 512 --dim 64 --causal --check"
#endif

/* prog: argv[0], so that the text names the binary that was run (build/attn or build/nocuda/attn). */
static void usage(FILE *f, const char *prog) {
    if (!prog || !prog[0]) prog = "attn";
    fprintf(f, "usage: %s --stage ID [options]\n", prog);
    fprintf(f, "       %s --list | --list-ids [gpu|cpu|all] | --list-dims ID | --source ID | --help\n", prog);
    fprintf(f,
            "\n"
            "Runs one stage of the suite on one problem: the median time of R timed runs after\n"
            "warm-up (CUDA events on the GPU), TFLOP/s (4*B*H*N*N*D, half when causal; 2.5 times that\n"
            "for a backward stage), the device memory the stage needs beyond its inputs and\n"
            "outputs (Q, K, V, O and LSE; and dO, dQ, dK, dV for a backward stage), and the bytes\n"
            "it moves through HBM and between L2 and the SMs, computed from its tiles (not measured).\n"
            "\n"
            "  --stage ID        stage to run: an id (01, 02, .., 06a..06e: the road to 06, 03m: the CPU\n"
            "                    model of 03, .., 11-13: the backward), or its folder or name (see --list)\n"
            "  --forward ID      a backward stage (11 on): the forward stage whose O and LSE it reads, run\n"
            "                    once untimed first (default: the last GPU stage in --list that writes\n"
            "                    LSE and runs here, but for decoding's 15 and 15p, for a GPU stage; 01\n"
            "                    for a CPU one)\n"
            "  --batch B         batch size, 1..%d (default 2)\n"
            "  --heads H         heads, 1..%d (default 8)\n"
            "  --seq N           sequence length of the queries (and of the keys unless --seq-k),\n"
            "                    1..%d (default 1024)\n"
            "  --dim D           head dim, 1..%d, and one the stage supports (default 64)\n"
            "  --kv-heads H_kv   K/V heads, 1..%d, dividing H (default H): query head h reads K/V head\n"
            "                    h / (H / H_kv), grouped-query attention (1: multi-query)\n"
            "  --seq-k N_k       keys, 1..%d (default N); K and V are [B, H_kv, N_k, D]. A stage that\n"
            "                    does not take --kv-heads or --seq-k refuses it, naming those that do\n"
            "  --varlen LIST     variable-length sequences, their lengths separated by commas\n"
            "                    (100,37,512): B is their count, N the longest, queries and keys\n"
            "                    alike, packed (Q, O [H, total, D]; LSE [H, total]). Not with --batch,\n"
            "                    --seq, --seq-k, --load, --save or --trace-row\n"
            "  --layout L        how Q, K, V and O lie in GPU memory: bhnd, [B, H, N, D] contiguous\n"
            "                    (default), or bnhd, [B, N, H, D] as PyTorch and FlashAttention keep\n"
            "                    them ([total, H, D] with --varlen); the inputs, the reference and\n"
            "                    --save stay [B, H, N, D]. A stage that takes only bhnd refuses bnhd,\n"
            "                    naming those that take it\n"
            "  --causal          query i sees keys 0..i only (0..i + N_k - N: the mask aligned to the\n"
            "                    bottom right; a row that sees no key has O = 0 and LSE = -inf)\n"
            "  --scale S         score scale (default 1/sqrt(D)), a normal non-zero float32, small\n"
            "                    enough that |S| log2(e) D max|q| max|k| <= 2^24 (every stage's\n"
            "                    exponent stays exact to a unit; a larger one is refused with the\n"
            "                    bound for the inputs)\n"
            "  --dtype T         fp16 or bf16 (default fp16; bf16 where the stage supports it)\n"
            "  --gpus G          GPUs of this host that a multi-GPU stage (10) splits the problem\n"
            "                    over, 1..%d and at most the GPUs present (default: all of them);\n"
            "                    single-GPU stages take 1 only\n"
            "  --seed N          seed of the random inputs, 0..2^63-1 (default 1), and of the rows\n"
            "                    --check samples (with --load, --seed needs --check)\n"
            "  --init KIND       random inputs: normal, large (scores in the thousands), first-max\n"
            "                    (each row's max on key 0), rising (max grows every key tile)\n"
            "  --repeat R        timed runs, 1..100000 (default 10 on the GPU, 1 on the CPU)\n"
            "  --warmup W        untimed runs first, 0..1000 (default 2 on the GPU, 0 on the CPU)\n"
            "  --check           compare with the double CPU reference: max abs error, relative L2\n"
            "                    error, worst element, LSE error, PASS or FAIL (exit 1). Problems\n"
            "                    over 2^31 reference multiply-adds are checked on every row of the\n"
            "                    first and last (b, h) plus --check-rows random rows\n"
            "  --check-rows K    with --check: random rows checked besides those, 0..1000000 (default 256)\n"
            "  --load DIR        read DIR/q.npy, DIR/k.npy, DIR/v.npy, and DIR/do.npy for a backward\n"
            "                    stage (float16 or float32, [B, H, N, D], C order, finite, one shape);\n"
            "                    the shape comes from the files, so\n"
            "                    --batch, --heads, --seq, --dim and --init are refused with it; float32\n"
            "                    values, and float16 ones with --dtype bf16, are rounded to --dtype (a\n"
            "                    note on stderr says so)\n"
            "  --save DIR        write DIR/o.npy (float16 [B, H, N, D]; with --dtype fp16 only) and\n"
            "                    DIR/lse.npy (float32 [B, H, N]) when the stage writes LSE (a backward\n"
            "                    stage: DIR/dq.npy, dk.npy, dv.npy, float16 [B, H, N, D]): all whole\n"
            "                    and together, or neither (DIR is tried with a temporary file before\n"
            "                    the run; the results go to unique temporary files after it, renamed\n"
            "                    together, and a failed rename puts the old files back); an o.npy or\n"
            "                    lse.npy there that is not a file (a directory, a FIFO) is refused at\n"
            "                    once; a stage without LSE removes an old lse.npy; a q.npy, k.npy\n"
            "                    or v.npy there is refused (they would not be this run's inputs)\n"
            "                    unless --save-inputs replaces them or DIR is the --load one\n"
            "  --trace-row I     a CPU model of the online softmax (04m, 05m, 06m): after every key\n"
            "                    tile, query row I of the first head's m, l, alpha, the LSE of the keys so\n"
            "                    far and O/l, its output so far (4 dims); then the stage's output row and\n"
            "                    the double reference's. 0..N-1\n"
            "  --save-inputs     with --save: also DIR/q.npy, DIR/k.npy, DIR/v.npy (and do.npy), the\n"
            "                    inputs of this run (float16 [B, H, N, D]), committed with the\n"
            "                    results: a folder that\n"
            "                    --load reads, to edit or to feed another stage; refused into the\n"
            "                    --load folder when its files are float32 (they would be replaced\n"
            "                    by their float16 rounding)\n"
            "  --list            the stages: id, folder, where it runs, pass (fwd, bwd), head dims,\n"
            "                    dtypes, LSE, idea\n"
            "  --list-ids [W]    the stage ids, one per line (W: gpu, cpu or all; default all)\n"
            "  --list-dims ID    the test head dims the stage supports, one per line\n"
            "  --source ID       the file that holds the stage's idea (what make diff A=ID B=ID compares)\n"
            "  --help            this text\n"
            "\n"
            "Exit status: 0 ok (PASS), 1 FAIL or the stage could not run (no GPU, out of memory,\n"
            "CUDA error, the results could not be written to stdout or DIR after the run), 2 bad\n"
            "input (a flag, a value, an input file, a --save DIR refused before the run).\n",
            ATTN_MAX_B, ATTN_MAX_H, ATTN_MAX_N, ATTN_MAX_D, ATTN_MAX_H, ATTN_MAX_N, ATTN_MAX_GPUS);
    fprintf(f, "Example: %s " USAGE_EXAMPLE "\n", prog);
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

/* Whole-string integer in [lo, hi] (attn_parse_integer); 0 on success, else -1 with the message. */
static int parse_i64(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    if (attn_parse_integer(s, lo, hi, out) == 0) return 0;
    fprintf(stderr, "attn: %s must be an integer from %lld to %lld (got '%s')\n", flag, lo, hi, s ? s : "");
    return -1;
}

static void list_stages(void) {
    printf("%-3s %-20s %-4s %-4s %-21s %-10s %-4s %-5s %s\n", "id", "folder", "runs", "pass", "dims",
           "dtypes", "LSE", "here", "idea");
    int unavailable = 0;
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        const int ok = attn_stage_available(s) == ATTN_OK;
        printf("%-3s %-20s %-4s %-4s %-21s %-10s %-4s %-5s %s\n", s->id, s->folder, s->on_gpu ? "gpu" : "cpu",
               s->pass == ATTN_FORWARD ? "fwd" : "bwd", s->dims_text,
               (s->dtypes & ATTN_DTYPE_BIT(ATTN_BF16)) ? "fp16,bf16" : "fp16",
               s->pass != ATTN_FORWARD ? "in"
               : s->writes_lse         ? "yes"
                                       : "no",
               ok ? "yes" : "no", s->idea);
        unavailable += !ok;
    }
    if (unavailable) printf("\nnot runnable here:\n");
    for (int i = 0; i < attn_num_stages; i++)
        if (attn_stage_available(&attn_stages[i]) != ATTN_OK) printf("  %s\n", attn_last_error());
}

/* Bytes in decimal units, as bandwidths are quoted: "25.17 MB", "1.074 GB". */
static const char *bytes_text(double b, char *buf, size_t cap) {
    static const char *const unit[] = {"bytes", "kB", "MB", "GB", "TB", "PB"};
    int u = 0;
    for (; b >= 1000.0 && u < 5; u++) b /= 1000.0;
    snprintf(buf, cap, u ? "%.4g %s" : "%.0f %s", b, unit[u]);
    return buf;
}

/* The bytes the stage's tiles move (attn_bytes, common/stage.h): HBM's, over the median time on a GPU,
 * then the tiles' own traffic where it differs. A CPU model (not stage 01) runs its kernel's tiles:
 * its bytes are the kernel's on a GPU, and its own time says nothing of them; stage 01's RAM traffic
 * over its time would not say what limits it either (its caches do the work). */
static void print_bytes(const attn_stage *s, const attn_problem *p, const attn_result *r) {
    if (!s->bytes_moved) return;
    const attn_bytes b = s->bytes_moved(p, s->max_gpus > 1 ? r->gpus : 1);
    const attn_stage *kernel = attn_find_stage(s->folder);
    const int model = !s->on_gpu && kernel != s;
    char a[32], w[32], t[32];
    printf("bytes    ");
    if (model) printf("stage %s's kernel: ", kernel->id);
    printf("%s %s read, %s written", s->on_gpu || model ? "HBM" : "RAM", bytes_text(b.hbm_read, a, sizeof a),
           bytes_text(b.hbm_written, w, sizeof w));
    if (s->on_gpu && r->ms_median > 0)
        printf(", %s/s", bytes_text((b.hbm_read + b.hbm_written) / (r->ms_median * 1e-3), t, sizeof t));
    printf(" (a model, not a measurement)\n");
    if (b.tile_read != b.hbm_read || b.tile_written != b.hbm_written)
        printf(
            "         tiles: %s loaded and %s stored by the blocks, %.1fx HBM's reads: L2 serves the rest\n",
            bytes_text(b.tile_read, a, sizeof a), bytes_text(b.tile_written, w, sizeof w),
            b.hbm_read > 0 ? b.tile_read / b.hbm_read : 0.0);
}

static void print_result(const attn_stage *s, const attn_problem *p, attn_layout layout,
                         const attn_result *r) {
    if (s->max_gpus > 1)
        printf("stage    %s %s (%d x %s)\n", s->id, s->name, r->gpus, attn_gpu_name());
    else
        printf("stage    %s %s (%s)\n", s->id, s->name, s->on_gpu ? attn_gpu_name() : "cpu");
    printf("shape    B=%lld H=%lld N=%lld D=%lld ", (long long)p->B, (long long)p->H, (long long)p->N,
           (long long)p->D);
    if (p->H_kv != p->H || p->N_k != p->N) /* K and V of their own shape */
        printf("H_kv=%lld N_k=%lld ", (long long)p->H_kv, (long long)p->N_k);
    if (p->cu_seqlens_q) /* N is the longest sequence */
        printf("varlen (%lld sequences, %lld rows a head) ", (long long)p->B,
               (long long)p->cu_seqlens_q[p->B]);
    if (layout != ATTN_LAYOUT_BHND) /* on the GPU; the check saw [B, H, N, D] */
        printf("layout=%s ", attn_layout_name(layout));
    printf("%s %s scale=%g\n", p->causal ? "causal" : "non-causal", attn_dtype_name(p->dtype),
           (double)p->scale);
    const int backward = s->pass != ATTN_FORWARD;
    if (backward)
        printf("forward  %s %s (O and LSE for the backward, run once, untimed)\n", r->forward->id,
               r->forward->name);
    printf("time     %.4f ms (median of %d; min %.4f, max %.4f)%s\n", r->ms_median, r->runs, r->ms_min,
           r->ms_max, backward ? ", the backward alone" : "");
    printf("speed    %.4g TFLOP/s%s\n", r->tflops, backward ? " (2.5 x the forward's FLOPs)" : "");
    printf("memory   %.3f GiB beyond %s", (double)r->extra_bytes / 1073741824.0,
           backward ? "Q, K, V, O, LSE, dO, dQ, dK and dV" : "Q, K, V, O and LSE");
    if (s->on_gpu)
        printf(" (device free memory dropped by %.3f GiB)", (double)r->extra_measured / 1073741824.0);
    printf("\n");
    print_bytes(s, p, r);
}

/* "6400 of O and 200 of LSE", leaving out a part that is zero. */
static void print_o_and_lse(int64_t in_o, int64_t in_lse) {
    if (in_o) printf("%lld of O", (long long)in_o);
    if (in_o && in_lse) printf(" and ");
    if (in_lse) printf("%lld of LSE", (long long)in_lse);
}

/* The worst element of O; a non-finite one has no error or tolerance to show. */
static void print_worst(const attn_check *c) {
    if (c->worst_ratio == 0.0) { /* no element differs, and there is no worst one to show */
        printf("  worst element   none: every checked element equals the reference\n");
        return;
    }
    printf("  worst element   [b=%lld, h=%lld, n=%lld, d=%lld] got %.6g want %.6g", (long long)c->worst_b,
           (long long)c->worst_h, (long long)c->worst_n, (long long)c->worst_d, c->worst_got, c->worst_want);
    if (isfinite(c->worst_got) && c->worst_by_range && c->worst_ratio > 1.0) /* check.c's rule of the range */
        printf(" tol %.3g (err/tol %.3f): outside the range of V over the keys within reach of the max, "
               "[%.6g, %.6g]\n",
               c->worst_tol, c->worst_ratio, c->worst_lo, c->worst_hi);
    else if (isfinite(c->worst_got))
        printf(" tol %.3g (err/tol %.3f)\n", c->worst_tol, c->worst_ratio);
    else
        printf(" (not finite)\n");
}

static int print_check(const attn_stage *s, int64_t D, const attn_result *r) {
    const attn_check *c = &r->chk;
    const int64_t o_nonfinite = c->nonfinite - c->lse_nonfinite,
                  o_unwritten = c->unwritten - c->lse_unwritten;
    printf("check    %lld rows against the double reference\n", (long long)c->rows_checked);
    if (c->rows_checked > 0 &&
        o_nonfinite == c->rows_checked * D) { /* the errors below are over O's finite elements: none */
        printf("  max abs error   - (no checked element of O is finite)\n");
        printf("  rel L2 error    -\n");
    } else {
        const char *finite_only = o_nonfinite ? " over the finite elements of O" : "";
        printf("  max abs error   %.3e%s\n", c->max_abs_err, finite_only);
        printf("  rel L2 error    %.3e%s\n", c->rel_l2, finite_only);
    }
    print_worst(c);
    if (c->lse_checked)
        printf("  LSE max error   %.3e (err/tol %.3f)\n", c->max_lse_err, c->lse_worst_ratio);
    else
        printf("  LSE             not written by stage %s\n", s->id);
    if (c->unwritten) {
        printf("  never written   ");
        print_o_and_lse(o_unwritten, c->lse_unwritten);
        printf(" (they still hold the poison)\n");
    }
    if (c->nonfinite > c->unwritten) {
        printf("  non-finite      ");
        print_o_and_lse(o_nonfinite - o_unwritten, (c->lse_nonfinite - c->lse_unwritten));
        printf(" written as NaN or inf\n");
    }
    if (r->identical >= 0)
        printf("  repeat          %s\n",
               r->identical ? "bit-identical to the first run" : "DIFFERS from the first run");
    printf("%s\n", c->pass ? "PASS" : "FAIL");
    return c->pass ? 0 : EXIT_FAIL;
}

/* A backward stage's check: the forward's O and LSE (its own check), then dQ, dK and dV. */
static int print_check_backward(const attn_stage *s, const attn_result *r) {
    const attn_check *f = &r->chk;
    const attn_grad_check *g = &r->grad;
    printf("check    dQ on %lld rows, dK and dV on %lld keys, of %lld heads, against the double reference\n",
           (long long)g->rows, (long long)g->keys, (long long)g->heads);
    printf("  forward %-6s O err/tol %.3f, LSE err/tol %.3f over %lld rows: %s\n", r->forward->id,
           f->worst_ratio, f->lse_worst_ratio, (long long)f->rows_checked, f->pass ? "pass" : "FAIL");
    if (g->forward_nonfinite)
        printf("  forward         %lld rows of O or LSE not finite: the gradients' tolerance needs them\n",
               (long long)g->forward_nonfinite);
    for (int t = 0; t < 3; t++) {
        const attn_tensor_check *c = &g->t[t];
        printf("  %s  max abs error %.3e  rel L2 %.3e", attn_grad_name(t), c->max_abs_err, c->rel_l2);
        if (c->worst_b >= 0 && isfinite(c->worst_got))
            printf("  worst [b=%lld, h=%lld, %s=%lld, d=%lld] got %.6g want %.6g tol %.3g (err/tol %.3f)",
                   (long long)c->worst_b, (long long)c->worst_h, t == 0 ? "n" : "key", (long long)c->worst_n,
                   (long long)c->worst_d, c->worst_got, c->worst_want, c->worst_tol, c->worst_ratio);
        else if (c->worst_b >= 0)
            printf("  worst [b=%lld, h=%lld, %s=%lld, d=%lld] not finite", (long long)c->worst_b,
                   (long long)c->worst_h, t == 0 ? "n" : "key", (long long)c->worst_n, (long long)c->worst_d);
        printf("\n");
        if (c->unwritten)
            printf("      never written: %lld elements (they still hold the poison)\n",
                   (long long)c->unwritten);
        if (c->nonfinite > c->unwritten)
            printf("      non-finite: %lld elements written as NaN or inf\n",
                   (long long)(c->nonfinite - c->unwritten));
    }
    if (r->identical >= 0)
        printf("  repeat          %s\n",
               r->identical ? "bit-identical to the first run"
               : s->pass == ATTN_BACKWARD_ATOMIC
                   ? "differs from the first run in the last bits (dQ's atomic sums)"
                   : "DIFFERS from the first run");
    const int pass = f->pass && g->pass; /* as the forward's: a repeat that differs is reported, not failed */
    printf("%s\n", pass ? "PASS" : "FAIL");
    return pass ? 0 : EXIT_FAIL;
}

/* Everything the command line asks for. */
typedef struct {
    const char *stage_key, *load_dir, *save_dir;
    long long B, H, N, D, seed, repeat, warmup, check_rows;
    int causal, check, have_scale;
    double scale;
    attn_dtype dtype;
    attn_init init;
    const char *shape_flag, *init_flag; /* the first shape flag (--batch .. --seq-k), and --init, if given */
    int check_rows_given, seed_given;
    long long gpus;          /* --gpus: 0 = the stage's default */
    int save_inputs;         /* --save-inputs: q.npy, k.npy, v.npy beside the results */
    const char *forward_key; /* --forward: the forward stage a backward stage reads */
    long long trace_row;     /* --trace-row: the query row to follow; -1: none */
    long long H_kv, N_k;     /* --kv-heads, --seq-k; 0: not given (H and N) */
    unsigned shape_given;    /* a bit per shape flag given, in int_flags' order */
    const char *varlen;      /* --varlen: the sequence lengths, "100,37,512"; NULL: none */
    attn_layout layout;      /* --layout: Q, K, V and O on the GPU (default bhnd) */
} cli;

/* 1 (with the message printed) when flag a was given before: the later value would silently replace
 * the earlier one. seen holds a bit per flag of the list. */
static int given_twice(const char *a, unsigned *seen) {
    static const char *const once[] = {"--stage",    "--batch",  "--heads",       "--seq",     "--dim",
                                       "--causal",   "--scale",  "--dtype",       "--gpus",    "--seed",
                                       "--init",     "--repeat", "--warmup",      "--check",   "--check-rows",
                                       "--load",     "--save",   "--save-inputs", "--forward", "--trace-row",
                                       "--kv-heads", "--seq-k",  "--varlen",      "--layout"};
    for (unsigned f = 0; f < sizeof once / sizeof once[0]; f++) {
        if (strcmp(a, once[f])) continue;
        if (*seen & (1u << f)) return bad("%s given twice", a), 1;
        *seen |= 1u << f;
    }
    return 0;
}

/* A list flag prints and exits, so anything else on the line would be silently ignored ("--list
 * --bogus", "--stage 01 --check --list"): it must stand alone with its value (used: 0 or 1 words). */
static int list_flag_alone(int argc, char **argv, int i, int used) {
    for (int k = 1; k < argc; k++)
        if (k < i || k > i + used)
            return bad("%s prints %s and exits: give it alone (got '%s' too)", argv[i],
                       strcmp(argv[i], "--source") ? "a list" : "a path", argv[k]);
    return -1;
}

/* --source ID: the file that holds the stage's idea, for make diff (tools/stage_diff.sh). */
static int print_source(const char *val) {
    if (!val) return bad("--source needs a value");
    const attn_stage *s = attn_find_stage(val);
    if (!s) return bad("--source: unknown stage '%s' (see --list)", val);
    printf("%s\n", s->source);
    return 0;
}

/* The flags that print and exit: --help (with anything), --list, --list-ids [gpu|cpu|all], --list-dims
 * ID and --source ID (alone). Returns the exit status, or -1 when argv[*i] is none of them; *i moves past
 * a value taken. */
static int run_info_flag(int argc, char **argv, int *i) {
    const char *a = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout, argv[0]), 0;
    const int takes = !strcmp(a, "--list-dims") || !strcmp(a, "--source") ||
                      (!strcmp(a, "--list-ids") && val && val[0] != '-');
    if ((!strcmp(a, "--list") || !strcmp(a, "--list-ids") || !strcmp(a, "--list-dims") ||
         !strcmp(a, "--source")) &&
        list_flag_alone(argc, argv, *i, takes) >= 0)
        return EXIT_USAGE;
    if (!strcmp(a, "--source")) return print_source(val);
    if (!strcmp(a, "--list")) return list_stages(), 0;
    if (!strcmp(a, "--list-ids")) {
        const char *w = takes ? argv[++*i] : "all";
        if (strcmp(w, "gpu") && strcmp(w, "cpu") && strcmp(w, "all"))
            return bad("--list-ids takes gpu, cpu or all (got '%s')", w);
        for (int s = 0; s < attn_num_stages; s++)
            if (!strcmp(w, "all") || (!strcmp(w, "gpu")) == attn_stages[s].on_gpu)
                printf("%s\n", attn_stages[s].id);
        return 0;
    }
    if (strcmp(a, "--list-dims")) return -1;
    if (!val) return bad("%s needs a value", a);
    const attn_stage *s = attn_find_stage(val);
    if (!s) return bad("--list-dims: unknown stage '%s' (see --list)", val);
    for (int d = 0; d < attn_num_test_dims; d++)
        if (s->supports_dim(attn_test_dims[d])) printf("%d\n", attn_test_dims[d]);
    return 0;
}

/* The integer flags: where each goes and the range it takes. The first six are the shape. */
typedef struct {
    const char *name;
    size_t field; /* offsetof(cli, ...) */
    long long lo, hi;
} int_flag;
static const int_flag int_flags[] = {
    {"--batch", offsetof(cli, B), 1, ATTN_MAX_B},
    {"--heads", offsetof(cli, H), 1, ATTN_MAX_H},
    {"--seq", offsetof(cli, N), 1, ATTN_MAX_N},
    {"--dim", offsetof(cli, D), 1, ATTN_MAX_D},
    {"--kv-heads", offsetof(cli, H_kv), 1, ATTN_MAX_H},
    {"--seq-k", offsetof(cli, N_k), 1, ATTN_MAX_N},
    {"--seed", offsetof(cli, seed), 0, LLONG_MAX},
    {"--repeat", offsetof(cli, repeat), 1, 100000},
    {"--warmup", offsetof(cli, warmup), 0, 1000},
    {"--gpus", offsetof(cli, gpus), 1, ATTN_MAX_GPUS},
    {"--check-rows", offsetof(cli, check_rows), 0, 1000000},
    {"--trace-row", offsetof(cli, trace_row), 0, ATTN_MAX_N - 1},
};
enum { SHAPE_FLAGS = 6, INT_FLAGS = sizeof int_flags / sizeof int_flags[0] };

static const int_flag *find_int_flag(const char *a) {
    for (int f = 0; f < INT_FLAGS; f++)
        if (!strcmp(a, int_flags[f].name)) return &int_flags[f];
    return NULL;
}

static int parse_int_flag(cli *c, const int_flag *f, const char *val) {
    if (parse_i64(f->name, val, f->lo, f->hi, (long long *)((char *)c + f->field))) return EXIT_USAGE;
    if (f < int_flags + SHAPE_FLAGS && !c->shape_flag) c->shape_flag = f->name;
    if (f < int_flags + SHAPE_FLAGS) c->shape_given |= 1u << (f - int_flags);
    c->seed_given |= !strcmp(f->name, "--seed");
    c->check_rows_given |= !strcmp(f->name, "--check-rows");
    return -1;
}

/* --varlen's list, "100,37,512": each length an integer from 1 to ATTN_MAX_N, at most VARLEN_MAX of them,
 * their sum within the int32 offsets. Writes the count and the longest, and when cu is not NULL the
 * count + 1 offsets (0 first). 0, or -1 with the message. */
#define VARLEN_MAX 65536
static int parse_varlen(const char *val, int32_t *cu, long long *count, long long *longest) {
    char item[32];
    long long n = 0, total = 0, len;
    *longest = 0;
    for (const char *s = val;; s++) {
        const size_t k = strcspn(s, ",");
        if (k >= sizeof item || n >= VARLEN_MAX) {
            fprintf(stderr, "attn: --varlen lists at most %d lengths, each at most %d (got '%s')\n",
                    VARLEN_MAX, ATTN_MAX_N, val);
            return -1;
        }
        memcpy(item, s, k), item[k] = '\0';
        if (attn_parse_integer(item, 1, ATTN_MAX_N, &len) != 0) {
            fprintf(stderr,
                    "attn: --varlen must list sequence lengths, each an integer from 1 to %d, separated "
                    "by commas (got '%s')\n",
                    ATTN_MAX_N, val);
            return -1;
        }
        if (cu) cu[n] = (int32_t)total;
        total += len, n++;
        *longest = len > *longest ? len : *longest;
        if (total > INT32_MAX) {
            fprintf(
                stderr,
                "attn: --varlen: the lengths must sum to at most %d, the int32 offsets' limit (got '%s')\n",
                INT32_MAX, val);
            return -1;
        }
        s += k;
        if (!*s) break;
    }
    if (cu) cu[n] = (int32_t)total;
    *count = n;
    return 0;
}

/* The other flags that take a value. Returns -1 to go on, or the exit status. */
static int parse_text_flag(cli *c, const char *a, const char *val) {
    if (!strcmp(a, "--stage"))
        c->stage_key = val;
    else if (!strcmp(a, "--forward"))
        c->forward_key = val;
    else if (!strcmp(a, "--varlen")) {
        long long count, longest;
        if (parse_varlen(val, NULL, &count, &longest) != 0) return EXIT_USAGE;
        c->varlen = val;
    } else if (!strcmp(a, "--load")) {
        if (!*val) return bad("--load needs a directory (got an empty name)"); /* not "/q.npy" */
        c->load_dir = val;
    } else if (!strcmp(a, "--save"))
        c->save_dir = val;
    else if (!strcmp(a, "--scale")) {
        /* the stages take it as a float: it must be one, and a normal one (a subnormal scale loses
         * bits, and its log2(e) multiple in the stages' exponent would too); written as strictly as
         * the integer flags (attn_parse_real: " 0.5" was taken where --batch " 4" was refused) */
        const int parsed = attn_parse_real(val, &c->scale) == 0;
        const float f = (float)c->scale;
        if (!parsed || !isfinite(f) || f == 0.0f || fabsf(f) < FLT_MIN)
            return bad("--scale must be a finite non-zero number in float32's normal range, %g to %g in "
                       "magnitude, written in decimal (0.125, -0.5, 1e-3) (got '%s')",
                       (double)FLT_MIN, (double)FLT_MAX, val);
        c->have_scale = 1;
    } else if (!strcmp(a, "--layout")) {
        if (!strcmp(val, "bhnd"))
            c->layout = ATTN_LAYOUT_BHND;
        else if (!strcmp(val, "bnhd"))
            c->layout = ATTN_LAYOUT_BNHD;
        else
            return bad("--layout must be bhnd or bnhd (got '%s')", val);
    } else if (!strcmp(a, "--dtype")) {
        if (!strcmp(val, "fp16"))
            c->dtype = ATTN_F16;
        else if (!strcmp(val, "bf16"))
            c->dtype = ATTN_BF16;
        else
            return bad("--dtype must be fp16 or bf16 (got '%s')", val);
    } else { /* --init */
        attn_init k = ATTN_INIT_NORMAL;
        while (k <= ATTN_INIT_RISING && strcmp(val, attn_init_name(k))) k++;
        if (k > ATTN_INIT_RISING)
            return bad("--init must be normal, large, first-max or rising (got '%s')", val);
        c->init = k;
        c->init_flag = "--init";
    }
    return -1;
}

static int is_text_flag(const char *a) {
    static const char *const text[] = {"--stage", "--load",    "--save",   "--scale", "--dtype",
                                       "--init",  "--forward", "--varlen", "--layout"};
    for (unsigned f = 0; f < sizeof text / sizeof text[0]; f++)
        if (!strcmp(a, text[f])) return 1;
    return 0;
}

/* "--seq=64" is "--seq 64" written the other common way: say so rather than only "unknown". */
static int unknown_argument(const char *a) {
    const char *eq = strchr(a, '=');
    char flag[32];
    if (eq && eq - a < (ptrdiff_t)sizeof flag) {
        memcpy(flag, a, (size_t)(eq - a)), flag[eq - a] = '\0';
        if (find_int_flag(flag) || is_text_flag(flag))
            return bad("unknown argument '%s': write the value as the next argument, '%s %s'", a, flag,
                       eq + 1);
    }
    return bad("unknown argument '%s' (see --help)", a);
}

/* Flags that would be silently ignored are refused instead. */
static int refuse_ignored_flags(const cli *c) {
    if (c->load_dir && c->shape_flag)
        return bad("%s cannot be used with --load: the shape comes from the files ([B, H, N, D])",
                   c->shape_flag);
    if (c->load_dir && c->init_flag)
        return bad("--init cannot be used with --load: the inputs come from the files");
    if (c->load_dir && c->seed_given && !c->check) /* with --check it still picks the rows checked */
        return bad("--seed cannot be used with --load without --check: the inputs come from the files");
    if (c->check_rows_given && !c->check) return bad("--check-rows needs --check");
    static const int from_the_list[3] = {0, 2, 5}; /* --batch, --seq, --seq-k */
    for (int i = 0; c->varlen && i < 3; i++)
        if (c->shape_given >> from_the_list[i] & 1)
            return bad("%s cannot be used with --varlen: the batch and the lengths come from its list",
                       int_flags[from_the_list[i]].name);
    if (c->varlen && (c->load_dir || c->save_dir || c->trace_row >= 0))
        return bad(
            "--varlen cannot be used with %s yet (the files and the traced row are of the [B, H, N, D] "
            "layout)",
            c->load_dir   ? "--load"
            : c->save_dir ? "--save"
                          : "--trace-row");
    if (c->H_kv && c->H % c->H_kv) /* each K/V head serves H / H_kv query heads */
        return bad("--kv-heads must divide --heads = %lld, 1..%lld (got %lld)", c->H, c->H, c->H_kv);
    if (c->save_inputs && !c->save_dir)
        return bad("--save-inputs needs --save DIR (the folder it writes to)");
    if (!c->stage_key) return bad("--stage is required (one of the ids in --list)");
    return -1;
}

/* Parses argv into *c. Returns -1 to go on, or the exit status (0 after --help and the lists). */
static int parse_args(int argc, char **argv, cli *c) {
    unsigned seen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (given_twice(a, &seen)) return EXIT_USAGE;
        int st = run_info_flag(argc, argv, &i);
        if (st >= 0) return st;
        if (!strcmp(a, "--causal")) {
            c->causal = 1;
            continue;
        }
        if (!strcmp(a, "--check")) {
            c->check = 1;
            continue;
        }
        if (!strcmp(a, "--save-inputs")) {
            c->save_inputs = 1;
            continue;
        }
        const int_flag *f = find_int_flag(a);
        if (!f && !is_text_flag(a)) return unknown_argument(a);
        if (i + 1 >= argc) return bad("%s needs a value", a);
        st = f ? parse_int_flag(c, f, argv[++i]) : parse_text_flag(c, a, argv[++i]);
        if (st >= 0) return st;
    }
    return refuse_ignored_flags(c);
}

/* --save's files: a forward stage's results (o.npy, and lse.npy where it writes LSE) or a backward
 * stage's (dq.npy, dk.npy, dv.npy), then with --save-inputs the inputs (q.npy, k.npy, v.npy, and do.npy
 * for a backward stage). */
enum { SAVE_O, SAVE_LSE, SAVE_DQ, SAVE_DK, SAVE_DV, SAVE_Q, SAVE_K, SAVE_V, SAVE_DO, SAVE_FILES };
static const char *const save_names[SAVE_FILES] = {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy",
                                                   "q.npy", "k.npy",   "v.npy",  "do.npy"};

/* The files of a run in save_names' order: its results first (all of them, lse.npy included, when
 * with_lse: a forward stage without LSE removes an old lse.npy, so it is one of its files too), then
 * its inputs from *first_input on. Returns the count. */
static int save_files(int backward, int with_lse, int *first_input, int files[SAVE_FILES]) {
    int n = 0;
    if (backward)
        files[n++] = SAVE_DQ, files[n++] = SAVE_DK, files[n++] = SAVE_DV;
    else {
        files[n++] = SAVE_O;
        if (with_lse) files[n++] = SAVE_LSE;
    }
    *first_input = n;
    files[n++] = SAVE_Q, files[n++] = SAVE_K, files[n++] = SAVE_V;
    if (backward) files[n++] = SAVE_DO;
    return n;
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m)                 ? "a directory"
           : S_ISFIFO(m)              ? "a FIFO"
           : S_ISSOCK(m)              ? "a socket"
           : S_ISCHR(m) || S_ISBLK(m) ? "a device"
                                      : "not a regular file";
}

/* The index in save_names of an input (q.npy, k.npy, v.npy; do.npy for a backward stage) in the --save
 * directory that this run leaves there unchanged although it is not its input, or -1. Without
 * --save-inputs, inputs from an earlier run (or another source) would stay beside the new results, and
 * `--load DIR --check` would check the new results against them. They are this run's when DIR is the
 * --load directory itself. */
/* 1 when the --save directory (dirfd) is the --load one, by whatever name. */
static int saves_into_load_dir(const cli *c, int dirfd) {
    struct stat save_sb, load_sb;
    return c->load_dir && fstat(dirfd, &save_sb) == 0 && stat(c->load_dir, &load_sb) == 0 &&
           save_sb.st_dev == load_sb.st_dev && save_sb.st_ino == load_sb.st_ino;
}

static int stale_inputs(const cli *c, int dirfd, int backward) {
    if (c->save_inputs || saves_into_load_dir(c, dirfd)) return -1;
    int files[SAVE_FILES], first;
    const int n = save_files(backward, 1, &first, files);
    for (int i = first; i < n; i++) {
        struct stat sb;
        if (fstatat(dirfd, save_names[files[i]], &sb, AT_SYMLINK_NOFOLLOW) == 0) return files[i];
    }
    return -1;
}

/* --save: before anything is computed, the directory is opened, a result (or with --save-inputs, an
 * input) file in it that is not a file (or a link, which the rename replaces) is refused, as are inputs
 * there that this run would leave beside its results (stale_inputs), and a temporary file is created
 * there and removed at once: a directory that cannot take the results is refused now, not after the
 * run. The results' own temporary files are created only when they are written (save_commit), so a run
 * interrupted before that leaves nothing in DIR. Returns -1 to go on, or the exit status. */
static int save_begin(const cli *c, int backward, int *dirfd) {
    if (c->dtype != ATTN_F16) return bad("--save writes float16 files: use it with --dtype fp16");
    *dirfd = open(c->save_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*dirfd < 0) return bad("--save: '%s' is not a writable directory (%s)", c->save_dir, strerror(errno));
    const int swept = npy_out_sweep(*dirfd, save_names, SAVE_FILES); /* kill -9 mid-save left them */
    if (swept)
        fprintf(stderr,
                "attn: note: --save: removed %d temporary file%s that runs ended mid-save left in '%s'\n",
                swept, swept == 1 ? "" : "s", c->save_dir);
    int files[SAVE_FILES], first;
    const int n = save_files(backward, 1, &first, files); /* lse.npy too: a stage without LSE removes it */
    for (int i = 0; i < (c->save_inputs ? n : first); i++) {
        struct stat sb;
        if (fstatat(*dirfd, save_names[files[i]], &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(sb.st_mode) &&
            !S_ISLNK(sb.st_mode))
            return bad(
                "--save: '%s%s%s' is %s, not a file: it would be replaced (remove it or save elsewhere)",
                c->save_dir, attn_dir_sep(c->save_dir), save_names[files[i]], file_kind(sb.st_mode));
    }
    const int stale = stale_inputs(c, *dirfd, backward);
    if (stale >= 0)
        return bad("--save: '%s%s%s' holds inputs that this run does not write: its results would sit beside "
                   "inputs they may not belong to (add --save-inputs to write this run's q.npy, k.npy and "
                   "v.npy%s, or remove them)",
                   c->save_dir, attn_dir_sep(c->save_dir), save_names[stale], backward ? " and do.npy" : "");
    npy_out probe;
    attn_held_signals held;
    attn_signals_hold(&held); /* a Ctrl-C between the two calls would leave the probe behind */
    attn_status st = npy_out_create(&probe, *dirfd, c->save_dir, save_names[files[0]]);
    npy_out_discard(&probe);
    attn_signals_release(&held);
    if (st != ATTN_OK)
        return bad("--save: '%s' is not a writable directory: %s", c->save_dir, attn_last_error());
    return -1;
}

/* 1 for a file of K's shape, [B, H_kv, N_k, D]: k.npy, v.npy and their gradients. */
static int of_kv(int file) { return file == SAVE_K || file == SAVE_V || file == SAVE_DK || file == SAVE_DV; }

/* Writes the results (o.npy and lse.npy, or dq.npy, dk.npy and dv.npy; with --save-inputs the inputs
 * too) and commits them together; a forward stage without LSE removes an lse.npy that an earlier run
 * left, so that no lse.npy ever sits beside an o.npy it does not belong to. data[] is indexed as
 * save_names. */
static int save_commit(const cli *c, const attn_stage *s, const attn_inputs *in, int dirfd,
                       const void *const data[SAVE_FILES]) {
    const attn_problem *p = &in->p;
    const int64_t shape[4] = {p->B, p->H, p->N, p->D}, kv_shape[4] = {p->B, p->H_kv, p->N_k, p->D};
    static const char *const stale[1] = {"lse.npy"};
    const int backward = s->pass != ATTN_FORWARD, with_lse = !backward && s->writes_lse;
    int files[SAVE_FILES], first;
    const int n = save_files(backward, with_lse, &first, files), nouts = c->save_inputs ? n : first;
    npy_out outs[SAVE_FILES];
    int made = 0;
    attn_status st = ATTN_OK;
    attn_held_signals held;
    attn_signals_hold(&held); /* from the first temporary file to the last rename (hold_signals.h) */
    for (; made < nouts && st == ATTN_OK; made++)
        st = npy_out_create(&outs[made], dirfd, c->save_dir, save_names[files[made]]);
    for (int i = 0; i < nouts && st == ATTN_OK; i++)
        st = files[i] == SAVE_LSE
                 ? npy_out_write(&outs[i], NPY_F32, 3, shape, data[SAVE_LSE])
                 : npy_out_write(&outs[i], NPY_F16, 4, of_kv(files[i]) ? kv_shape : shape, data[files[i]]);
    if (st == ATTN_OK) /* a Ctrl-C while another process holds DIR's lock stops the wait (hold_signals.h) */
        st = npy_out_commit_wait(outs, nouts, stale, backward || with_lse ? 0 : 1, NPY_LOCK_WAIT_MS,
                                 attn_signals_noted);
    for (int i = 0; i < made; i++) npy_out_discard(&outs[i]);
    attn_signals_release(&held);
    if (st != ATTN_OK) {
        fprintf(stderr, "attn: --save: %s (nothing was saved)\n", attn_last_error());
        return EXIT_FAIL;
    }
    return 0;
}

/* The input files of mask, "q.npy, k.npy" (bit 0, 1, 2, 3 for q.npy, k.npy, v.npy, do.npy), into list[40]. */
static const char *input_names(unsigned mask, char list[40]) {
    static const char *const names[4] = {"q.npy", "k.npy", "v.npy", "do.npy"};
    size_t n = 0;
    list[0] = '\0';
    for (int i = 0; i < 4; i++)
        if (mask >> i & 1) n += (size_t)snprintf(list + n, 40 - n, "%s%s", n ? ", " : "", names[i]);
    return list;
}

/* The note for inputs rounded to t on loading (mask as input_names'). */
static void note_rounded(unsigned mask, const char *held, attn_dtype t) {
    char list[40];
    fprintf(stderr, "attn: note: %s held %s values, rounded to %s (the type the stages read)\n",
            input_names(mask, list), held, attn_dtype_name(t));
}

/* --save-inputs writes the run's inputs as float16: into the --load folder, over float32 files, that
 * would replace the user's inputs by their rounding (it did, silently). Refused after loading (only
 * then are the files' types known) and before the run; float16 files are written back bit for bit.
 * Returns -1 to go on, or the exit status. */
static int refuse_rounding_the_loaded_inputs(const cli *c, const attn_inputs *in, int dirfd, int backward) {
    const unsigned f32 = in->from_f32 & (backward ? 15u : 7u);
    if (!c->save_inputs || !f32 || !saves_into_load_dir(c, dirfd)) return -1;
    char list[40];
    return bad(
        "--save '%s' is the --load folder and its %s held float32 values: --save-inputs would replace "
        "them with their float16 rounding (drop --save-inputs: the folder's own inputs stay beside the "
        "results; or --save into another folder)",
        c->save_dir, input_names(f32, list));
}

/* Loads or makes the inputs and checks the scale against them. Returns -1 to go on, or the exit
 * status. */
static int make_inputs(const cli *c, const attn_stage *s, attn_problem *p, attn_inputs *in) {
    attn_status st;
    memset(in, 0, sizeof *in);
    if (c->load_dir) {
        if ((st = attn_inputs_load(in, c->load_dir, p)) != ATTN_OK) {
            fprintf(stderr, "attn: --load: %s\n", attn_last_error());
            return st == ATTN_ENOMEM ? EXIT_FAIL : EXIT_USAGE;
        }
        *p = in->p;
        if (in->from_f32) note_rounded(in->from_f32, "float32", p->dtype);
        /* the files hold float16 or float32: the others were float16, which bf16 rounds too */
        if (p->dtype != ATTN_F16 && (~in->from_f32 & 7)) note_rounded(~in->from_f32 & 7, "float16", p->dtype);
    }
    if ((st = attn_problem_validate(p)) != ATTN_OK || (st = attn_stage_supports(s, p)) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        return EXIT_USAGE;
    }
    if (attn_stage_available(s) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        const attn_stage *model = attn_cpu_model_of(s);
        if (model && attn_stage_available(model) == ATTN_OK)
            fprintf(stderr, "attn: its CPU model runs here: --stage %s\n", model->id);
        return EXIT_FAIL;
    }
    if (!c->load_dir && (st = attn_inputs_random(in, p, (uint64_t)c->seed, c->init)) != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_last_error());
        return st == ATTN_EINVAL ? EXIT_USAGE : EXIT_FAIL; /* --init and --scale that overflow the inputs */
    }
    if (s->pass != ATTN_FORWARD) { /* dO: random, or do.npy beside the --load inputs */
        st = c->load_dir ? attn_inputs_load_grad(in, c->load_dir)
                         : attn_inputs_random_grad(in, (uint64_t)c->seed);
        if (st != ATTN_OK) {
            fprintf(stderr, "attn: %s%s\n", c->load_dir ? "--load: " : "", attn_last_error());
            return st == ATTN_ENOMEM ? EXIT_FAIL : EXIT_USAGE;
        }
        if (c->load_dir && (in->from_f32 & 8))
            note_rounded(8, "float32", p->dtype);
        else if (c->load_dir && p->dtype != ATTN_F16)
            note_rounded(8, "float16", p->dtype);
    }
    if (attn_inputs_check_scale(in) != ATTN_OK) {
        fprintf(stderr, "attn: %s: %s\n",
                c->have_scale ? "--scale"
                : c->load_dir ? "--load"
                              : "--init",
                attn_last_error());
        return EXIT_USAGE;
    }
    return -1;
}

/* The stage --stage names, and the forward --forward names (NULL: the default), or the exit status. */
static int find_stages(const cli *c, const attn_stage **s, const attn_stage **f) {
    *s = attn_find_stage(c->stage_key);
    *f = NULL;
    if (!*s) {
        fprintf(stderr, "attn: --stage: unknown stage '%s'; the stages are", c->stage_key);
        for (int i = 0; i < attn_num_stages; i++) fprintf(stderr, "%s %s", i ? "," : "", attn_stages[i].id);
        fprintf(stderr, " (or a folder or name: see --list)\n");
        return EXIT_USAGE;
    }
    if (attn_stage_gpus_ok(*s, (int)c->gpus) != ATTN_OK) return bad("%s", attn_last_error());
    if (c->trace_row >= 0 && !(*s)->traces) return attn_trace_refused(*s), bad("%s", attn_last_error());
    if (attn_stage_takes_layout(*s, c->layout) != ATTN_OK) return bad("%s", attn_last_error());
    if (!c->forward_key) return -1;
    if ((*s)->pass == ATTN_FORWARD)
        return bad(
            "--forward: stage %s is a forward stage; --forward names the forward that a backward stage "
            "(11 on) reads",
            (*s)->id);
    if (!(*f = attn_find_stage(c->forward_key)))
        return bad("--forward: unknown stage '%s' (see --list)", c->forward_key);
    if ((*f)->pass != ATTN_FORWARD || !(*f)->writes_lse)
        return bad("--forward %s: a backward stage reads the O and LSE of a forward stage that writes LSE "
                   "(see --list: fwd, LSE yes)",
                   c->forward_key);
    return -1;
}

/* --trace-row: a header before the run, one line a key tile from the model while it runs (trace_step),
 * and after it the output row the stage wrote and the reference's, which the last line must reach. */
#define TRACE_DIMS 4

static void trace_begin(const attn_stage *s, long long row) {
    printf("trace    query row %lld of head (b=0, h=0) through stage %s's key tiles: m and l as the model\n"
           "         keeps them, alpha (the rescale of O and l), the LSE of the keys so far (m in the LSE's\n"
           "         units + ln l) and O/l, the row's output so far; then the stage's output and the "
           "reference\n",
           row, s->id);
    printf("  %-12s%10s %10s %9s %11s", "keys", "m", "l", "alpha", "LSE so far");
    for (int d = 0; d < TRACE_DIMS; d++) printf("    O/l[%d]", d);
    printf("\n");
}

static void trace_step(const attn_trace *t, const attn_trace_step *st) {
    char keys[32];
    const int past_n = st->key_last < st->key_first; /* 06m: a 64-key step of the tail tile wholly past N */
    snprintf(keys, sizeof keys, past_n ? "%d.." : "%d-%d", st->key_first, st->key_last);
    printf("  %-12s%10.5f %10.5f %9.6f", keys, (double)st->m, (double)st->l, (double)st->alpha);
    if (!(st->l > 0.0f)) { /* no key seen yet: no LSE and no output to show */
        printf(" %11s  (no visible key yet)\n", "-");
        return;
    }
    printf(" %11.6f", (double)st->m * st->m_ln + log((double)st->l));
    for (int d = 0; d < st->D && d < TRACE_DIMS; d++) printf(" %9.5f", (double)(st->o[d] / st->l));
    printf("%s\n", past_n ? "  (every key past N: masked)" : "");
    (void)t;
}

static void trace_end(const attn_inputs *in, const uint16_t *o, int64_t row) {
    const attn_problem *p = &in->p;
    const int dims = p->D < TRACE_DIMS ? (int)p->D : TRACE_DIMS;
    printf("  %-11s %43s", "output", "");
    for (int d = 0; d < dims; d++) printf(" %9.5f", (double)attn_to_f32(o[row * p->D + d], p->dtype));
    double *ref = attn_alloc((size_t)p->D * sizeof(double)), lse;
    if (ref && attn_reference_rows(p, in->q, in->k, in->v, &row, 1, ref, &lse) == ATTN_OK) {
        printf("\n  %-11s %31s %11.6f", "reference", "", lse);
        for (int d = 0; d < dims; d++) printf(" %9.5f", ref[d]);
    }
    printf("\n");
    free(ref);
}

/* Host buffers for what the run hands back: O and LSE, or dQ, dK and dV. Returns -1, or the exit status. */
static int alloc_outputs(int backward, const attn_problem *p, void *out[5]) {
    const size_t bytes = (size_t)attn_qkv_elems(p) * 2;
    const int n = backward ? 3 : 2;
    for (int i = 0; i < n; i++) out[i] = attn_alloc(!backward && i == 1 ? (size_t)attn_rows(p) * 4 : bytes);
    for (int i = 0; i < n; i++)
        if (!out[i]) {
            fprintf(stderr, "attn: cannot allocate host memory for the outputs\n");
            return EXIT_FAIL;
        }
    return -1;
}

static attn_run_opts run_opts(const cli *c, const attn_stage *s, const attn_stage *f) {
    attn_run_opts opt = attn_run_opts_default();
    opt.repeat = c->repeat >= 0 ? (int)c->repeat : (s->on_gpu ? 10 : 1);
    opt.warmup = c->warmup >= 0 ? (int)c->warmup : (s->on_gpu ? 2 : 0);
    opt.check = c->check;
    opt.check_rows = c->check_rows;
    opt.seed = (uint64_t)c->seed;
    opt.gpus = (int)c->gpus;
    opt.forward = f;
    opt.layout = c->layout;
    return opt;
}

/* --varlen: B sequences of the listed lengths, queries and keys alike (cu_seqlens_q = cu_seqlens_k),
 * N and N_k the longest. *cu is the caller's to free. Returns -1 to go on, or the exit status. */
static int varlen_problem(const cli *c, attn_problem *p, int32_t **cu) {
    long long count, longest;
    parse_varlen(c->varlen, NULL, &count, &longest); /* taken by parse_args already */
    *cu = attn_alloc((size_t)(count + 1) * sizeof(int32_t));
    if (!*cu) {
        fprintf(stderr, "attn: cannot allocate the --varlen offsets\n");
        return EXIT_FAIL;
    }
    parse_varlen(c->varlen, *cu, &count, &longest);
    p->B = count, p->N = p->N_k = longest;
    p->cu_seqlens_q = p->cu_seqlens_k = *cu;
    return -1;
}

static int run(const cli *c) {
    const attn_stage *s, *f;
    int rc = find_stages(c, &s, &f);
    if (rc >= 0) return rc;
    const int backward = s->pass != ATTN_FORWARD, tracing = c->trace_row >= 0;
    int dirfd = -1;
    void *out[5] = {NULL, NULL, NULL, NULL, NULL}; /* o, lse; or dq, dk, dv: the results to save */
    attn_inputs in;
    memset(&in, 0, sizeof in);
    if (c->save_dir) rc = save_begin(c, backward, &dirfd);

    attn_problem p = attn_problem_make(c->B, c->H, c->N, c->D, c->causal);
    p.dtype = c->dtype;
    if (c->H_kv) p.H_kv = c->H_kv;
    if (c->N_k) p.N_k = c->N_k;
    int32_t *cu = NULL; /* --varlen: the offsets, queries and keys alike */
    if (rc < 0 && c->varlen) rc = varlen_problem(c, &p, &cu);
    if (c->have_scale)
        p.scale = (float)c->scale;
    else if (c->load_dir)
        p.scale = 0.0f; /* 1/sqrt(D) once the files give D */
    if (rc < 0) rc = make_inputs(c, s, &p, &in);
    if (rc < 0 && c->save_dir) rc = refuse_rounding_the_loaded_inputs(c, &in, dirfd, backward);
    if (rc < 0 && tracing && c->trace_row >= p.N)
        rc = bad("--trace-row must be a query row, 0 to N - 1 = %lld (got %lld)", (long long)p.N - 1,
                 c->trace_row);
    attn_run_opts opt = run_opts(c, s, f);
    const attn_trace trace = {c->trace_row, trace_step, NULL};
    if (rc < 0 && (c->save_dir || tracing)) rc = alloc_outputs(backward, &p, out);
    if (rc < 0 && tracing) opt.trace = &trace, trace_begin(s, c->trace_row);
    if (rc < 0) {
        attn_result r;
        attn_grads g = {out[0], out[1], out[2]};
        attn_status st = backward ? attn_run_backward(s, &in, &opt, &r, c->save_dir ? &g : NULL)
                                  : attn_run(s, &in, &opt, &r, out[0], out[1]);
        rc = 0;
        if (st != ATTN_OK) {
            fprintf(stderr, "attn: %s\n", attn_last_error());
            rc = (st == ATTN_EINVAL || st == ATTN_EUNSUPPORTED) ? EXIT_USAGE : EXIT_FAIL;
        } else {
            if (tracing) trace_end(&in, out[0], c->trace_row);
            print_result(s, &p, c->layout, &r);
            const void *data[SAVE_FILES] = {out[0], out[1], out[0], out[1], out[2], in.q, in.k, in.v, in.d_o};
            if (c->save_dir) rc = save_commit(c, s, &in, dirfd, data);
            if (r.checked && (backward ? print_check_backward(s, &r) : print_check(s, p.D, &r)) != 0)
                rc = EXIT_FAIL;
        }
    }
    if (dirfd >= 0) close(dirfd);
    free(cu);
    for (int i = 0; i < 5; i++) free(out[i]);
    attn_inputs_free(&in);
    return rc;
}

/* With fd 0, 1 or 2 closed, the next open() would get that number, and printf or a message could
 * land in an output file. Closed stdin and stderr become /dev/null; a closed stdout is refused,
 * since the results would be lost. Returns 0, or the exit status. */
static int guard_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        int nfd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (nfd != fd) return EXIT_FAIL; /* cannot happen: the lowest free number is fd */
        if (fd == 1) {
            fprintf(stderr, "attn: standard output is closed: the results would be lost\n");
            return EXIT_FAIL;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (guard_std_fds() != 0) return EXIT_FAIL;
    cli c = {NULL,
             NULL,
             NULL,
             2,
             8,
             1024,
             64,
             1,
             -1,
             -1,
             256,
             0,
             0,
             0,
             0.0,
             ATTN_F16,
             ATTN_INIT_NORMAL,
             NULL,
             NULL,
             0,
             0,
             0,
             0,
             NULL,
             -1,
             0,
             0,
             0,
             NULL,
             ATTN_LAYOUT_BHND};
    int rc;
    if (argc == 1) {
        usage(stderr, argv[0]);
        rc = EXIT_USAGE;
    } else if ((rc = parse_args(argc, argv, &c)) < 0) {
        rc = run(&c);
    }
    /* Results that never reached stdout (a full disk, a closed pipe) are a failure, not a success:
     * printf's errors surface here, when the buffer is written. */
    int e = fflush(stdout) != 0 ? errno : 0;
    if (e || ferror(stdout)) {
        fprintf(stderr, "attn: cannot write the results to standard output: %s\n",
                e ? strerror(e) : "write error");
        if (rc == 0) rc = EXIT_FAIL;
    }
    return rc;
}
