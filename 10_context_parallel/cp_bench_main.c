/*
 * cp_bench_main.c: build/cp_bench, stage 10's scaling measurement. The shards are loaded into the G
 * GPUs once (no scatter, no gather: what `build/attn --stage 10` also times), then the ring alone is
 * timed three ways: as the stage runs it (compute and K/V exchange overlapped), its local calls
 * alone, and its exchange alone. Against it: the same local stage on one GPU at the full shape.
 * Reported: both times and their ratio, the K/V bytes each GPU sends and how much of the exchange
 * the overlap hides, the device memory each GPU took, and the ring's output against the double
 * reference (sampled rows) and against the one-GPU output (every row).
 *
 *   build/cp_bench --gpus 2 --heads 32 --seq 65536 --dim 128 [--causal]
 *
 * The last line, "cp_bench: key=value ...", is for 10_context_parallel/gpu_proof.sh.
 * Exit status: 0 the checks passed; 1 a check failed or the run could not be made; 2 bad input.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "10_context_parallel/cp_ring.h"
#include "10_context_parallel/stage10.h"
#include "half.h"
#include "harness.h"

#define GIB(x) ((double)(x) / 1073741824.0)

typedef struct {
    int G, one_gpu, causal, repeat, warmup, single;
    long long B, H, N, D, seed, check_rows;
    attn_dtype dtype;
} opts;

static int usage(const char *why) {
    if (why) fprintf(stderr, "cp_bench: %s\n", why);
    fprintf(why ? stderr : stdout,
            "usage: build/cp_bench [--gpus G] [--one-gpu] [--batch B] [--heads H] [--seq N] [--dim D]\n"
            "                      [--causal] [--dtype fp16|bf16] [--seed S] [--repeat R] [--warmup W]\n"
            "                      [--check-rows K] [--no-single]\n"
            "Times stage 10's ring on G GPUs (default: all present; 2 with --one-gpu) with the shards\n"
            "resident, against its local stage on one GPU; defaults B=1 H=32 N=65536 D=128 fp16, R=5,\n"
            "W=1, K=256. --one-gpu puts every rank on GPU 0 (cudaMemcpyAsync for NCCL): a look at the\n"
            "schedule, not a scaling measurement. --check-rows 0 skips the reference check.\n"
            "--no-single leaves out the one-GPU run (with G = 1 the ring's run is that run, so it stays).\n");
    return why ? 2 : 0;
}

static int parse_ll(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    if (attn_parse_integer(s, lo, hi, out) != 0) {
        fprintf(stderr, "cp_bench: %s must be an integer from %lld to %lld (got '%s')\n", flag, lo, hi,
                s ? s : "");
        return -1;
    }
    return 0;
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){0, 0, 0, 5, 1, 1, 1, 32, 65536, 128, 1, 256, ATTN_F16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
#define VAL(flag, lo, hi, dst)                                                                               \
    if (!strcmp(a, flag)) {                                                                                  \
        if (parse_ll(flag, v, lo, hi, &x)) return 2;                                                         \
        dst = x, i++;                                                                                        \
        continue;                                                                                            \
    }
        VAL("--gpus", 1, ATTN_MAX_GPUS, o->G)
        VAL("--batch", 1, ATTN_MAX_B, o->B)
        VAL("--heads", 1, ATTN_MAX_H, o->H)
        VAL("--seq", 1, ATTN_MAX_N, o->N)
        VAL("--dim", 1, ATTN_MAX_D, o->D)
        VAL("--seed", 0, LLONG_MAX, o->seed)
        VAL("--repeat", 1, 1000, o->repeat)
        VAL("--warmup", 0, 100, o->warmup)
        VAL("--check-rows", 0, 1000000, o->check_rows)
#undef VAL
        if (!strcmp(a, "--one-gpu"))
            o->one_gpu = 1;
        else if (!strcmp(a, "--causal"))
            o->causal = 1;
        else if (!strcmp(a, "--no-single"))
            o->single = 0;
        else if (!strcmp(a, "--dtype") && v && !strcmp(v, "fp16"))
            o->dtype = ATTN_F16, i++;
        else if (!strcmp(a, "--dtype") && v && !strcmp(v, "bf16"))
            o->dtype = ATTN_BF16, i++;
        else if (!strcmp(a, "--dtype"))
            return usage("--dtype must be fp16 or bf16");
        else if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return usage(NULL) - 1;
        else {
            fprintf(stderr, "cp_bench: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
    }
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median wall time of `repeat` passes of the ring (what: CP_RUN_*), each waited for. */
static attn_status time_ring(cp_ring *R, const attn_problem *p, int what, const opts *o, double *ms) {
    double t[1000];
    attn_status st = ATTN_OK;
    for (int i = 0; i < o->warmup + o->repeat && st == ATTN_OK; i++) {
        const double t0 = now_ms();
        st = cp_ring_run(R, p->scale, what);
        if (st == ATTN_OK) st = cp_ring_sync(R);
        if (i >= o->warmup) t[i - o->warmup] = now_ms() - t0;
    }
    if (st == ATTN_OK) *ms = median(t, o->repeat);
    return st;
}

/* Free memory of every GPU the ring uses. */
static void free_memory(int G, int one_gpu, size_t *freeb) {
    for (int r = 0; r < (one_gpu ? 1 : G); r++) {
        size_t total = 0;
        freeb[r] = 0;
        if (cudaSetDevice(r) != cudaSuccess || cudaMemGetInfo(&freeb[r], &total) != cudaSuccess)
            cudaGetLastError();
    }
    cudaSetDevice(0);
}

typedef struct {
    double ring_ms, compute_ms, comm_ms, single_ms;
    size_t mem_used; /* the most any GPU's free memory dropped */
    cp_ring_info info;
} measures;

static attn_status run_ring(const opts *o, const attn_inputs *in, uint16_t *o_ring, float *l_ring,
                            measures *m) {
    const attn_problem *p = &in->p;
    size_t before[ATTN_MAX_GPUS], after[ATTN_MAX_GPUS];
    cp_ring *R = NULL;
    free_memory(o->G, o->one_gpu, before);
    const attn_stage *local = stage10_local_stage(p);
    attn_status st = local ? cp_ring_create(&R, p, local, o->G, o->one_gpu) : ATTN_EUNSUPPORTED;
    if (st == ATTN_OK) st = cp_ring_load_host(R, in->q, in->k, in->v);
    /* One pass first: NCCL connects its peers on the first send, and that memory counts too. */
    if (st == ATTN_OK) st = cp_ring_run(R, p->scale, CP_RUN_ALL);
    if (st == ATTN_OK) st = cp_ring_sync(R);
    if (st == ATTN_OK) {
        free_memory(o->G, o->one_gpu, after);
        for (int r = 0; r < (o->one_gpu ? 1 : o->G); r++)
            if (before[r] > after[r] && before[r] - after[r] > m->mem_used)
                m->mem_used = before[r] - after[r];
        cp_ring_describe(R, &m->info);
    }
    if (st == ATTN_OK) st = time_ring(R, p, CP_RUN_COMPUTE, o, &m->compute_ms);
    if (st == ATTN_OK) st = time_ring(R, p, CP_RUN_COMM, o, &m->comm_ms);
    if (st == ATTN_OK) st = time_ring(R, p, CP_RUN_ALL, o, &m->ring_ms); /* last: its output is read */
    if (st == ATTN_OK) st = cp_ring_gather_host(R, o_ring, l_ring);
    cp_ring_destroy(R);
    return st;
}

/* The local stage on GPU 0 at the full shape, timed with CUDA events as the harness does. */
static attn_status run_single(const attn_stage *local, const opts *o, const attn_inputs *in, uint16_t *out,
                              float *lse, double *ms) {
    const attn_problem *p = &in->p;
    const size_t bytes = (size_t)attn_qkv_elems(p) * 2, lbytes = (size_t)attn_rows(p) * 4;
    void *q = NULL, *k = NULL, *v = NULL, *od = NULL;
    float *ld = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    attn_status st = ATTN_OK;
    double t[1000];
    cudaSetDevice(0);
    if (cudaMalloc(&q, bytes) || cudaMalloc(&k, bytes) || cudaMalloc(&v, bytes) || cudaMalloc(&od, bytes) ||
        cudaMalloc((void **)&ld, lbytes) || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) ||
        cudaEventCreate(&e0) || cudaEventCreate(&e1) || cudaMemcpy(q, in->q, bytes, cudaMemcpyHostToDevice) ||
        cudaMemcpy(k, in->k, bytes, cudaMemcpyHostToDevice) ||
        cudaMemcpy(v, in->v, bytes, cudaMemcpyHostToDevice) ||
        cudaDeviceSynchronize()) /* a pageable copy may return before it lands; s does not wait for it */
        st = attn_fail(ATTN_ENOMEM, "one GPU at the full shape: %s", cudaGetErrorString(cudaGetLastError()));
    attn_args a = {.q = q, .k = k, .v = v, .o = od, .lse = ld, .stream = (void *)s, .gpus = 1};
    for (int i = 0; i < o->warmup + o->repeat && st == ATTN_OK; i++) {
        float f = 0;
        cudaEventRecord(e0, s);
        st = local->run(p, &a);
        cudaEventRecord(e1, s);
        if (st == ATTN_OK && (cudaEventSynchronize(e1) || cudaEventElapsedTime(&f, e0, e1)))
            st = attn_fail(ATTN_ECUDA, "one GPU: %s", cudaGetErrorString(cudaGetLastError()));
        if (i >= o->warmup) t[i - o->warmup] = f;
    }
    if (st == ATTN_OK) *ms = median(t, o->repeat);
    if (st == ATTN_OK && (cudaMemcpy(out, od, bytes, cudaMemcpyDeviceToHost) ||
                          cudaMemcpy(lse, ld, lbytes, cudaMemcpyDeviceToHost)))
        st = attn_fail(ATTN_ECUDA, "one GPU: copying O back: %s", cudaGetErrorString(cudaGetLastError()));
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(od), cudaFree(ld);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
    cudaGetLastError();
    return st;
}

/* max |a - b| over every element of O and of LSE. */
static void compare_all(const attn_problem *p, const uint16_t *oa, const float *la, const uint16_t *ob,
                        const float *lb, double *max_do, double *max_dlse) {
    double mo = 0, ml = 0;
    const int64_t n = attn_qkv_elems(p), rows = attn_rows(p);
#pragma omp parallel for reduction(max : mo)
    for (int64_t e = 0; e < n; e++) {
        const double d = fabs((double)attn_to_f32(oa[e], p->dtype) - (double)attn_to_f32(ob[e], p->dtype));
        mo = fmax(mo, isnan(d) ? INFINITY : d); /* a NaN on either side is the largest difference */
    }
#pragma omp parallel for reduction(max : ml)
    for (int64_t r = 0; r < rows; r++) {
        const double d = fabs((double)la[r] - (double)lb[r]);
        ml = fmax(ml, isnan(d) ? INFINITY : d);
    }
    *max_do = mo, *max_dlse = ml;
}

static const char *verdict(const attn_check *c) { return c->pass ? "PASS" : "FAIL"; }

/* The options read and checked against the problem and the machine, the local stage found.
 * Returns -1 to go on, else main's exit status (0 after --help). */
static int prepare(int argc, char **argv, opts *o, attn_problem *p, const attn_stage **local) {
    const int rc = parse(argc, argv, o);
    if (rc) return rc < 0 ? 0 : rc;
    *p = attn_problem_make(o->B, o->H, o->N, o->D, o->causal);
    p->dtype = o->dtype;
    const attn_stage *s10 = attn_find_stage("10");
    if (attn_problem_validate(p) != ATTN_OK || attn_stage_supports(s10, p) != ATTN_OK)
        return usage(attn_last_error());
    if (attn_stage_available(s10) != ATTN_OK) {
        fprintf(stderr, "cp_bench: %s\n", attn_last_error());
        return 1;
    }
    const int present = attn_gpu_count();
    if (!o->G) o->G = o->one_gpu ? 2 : present;
    if (!o->one_gpu && o->G > present) {
        fprintf(stderr,
                "cp_bench: --gpus %d, but this machine has %d GPU%s (--gpus 1..%d here; --one-gpu puts G "
                "ranks on one)\n",
                o->G, present, present == 1 ? "" : "s", present);
        return 2;
    }
    if (!(*local = stage10_local_stage(p))) return usage(attn_last_error());
    if (o->G == 1) o->single = 1; /* one GPU: stage 10 is its local stage (stage10.c); that run is both */
    return -1;
}

typedef struct {
    uint16_t *o_ring, *o_one; /* o_one, l_one: NULL with --no-single */
    float *l_ring, *l_one;
    size_t ob, lb; /* bytes of one O and of one LSE */
} outputs;

static void outputs_free(outputs *out) {
    free(out->o_ring), free(out->l_ring), free(out->o_one), free(out->l_one);
}

/* The ring (G >= 2) and the one-GPU run (unless --no-single) into out; with G = 1 the one run is both. */
static attn_status run_all(const opts *o, const attn_stage *local, const attn_inputs *in, outputs *out,
                           measures *m) {
    const attn_problem *p = &in->p;
    out->ob = (size_t)attn_qkv_elems(p) * 2, out->lb = (size_t)attn_rows(p) * 4;
    out->o_ring = malloc(out->ob), out->l_ring = malloc(out->lb);
    out->o_one = o->single ? malloc(out->ob) : NULL, out->l_one = o->single ? malloc(out->lb) : NULL;
    if (!out->o_ring || !out->l_ring || (o->single && (!out->o_one || !out->l_one)))
        return attn_fail(ATTN_ENOMEM, "cannot allocate %.2f GiB of host memory for the outputs",
                         GIB(2 * (out->ob + out->lb)));
    attn_status st = ATTN_OK;
    if (o->G >= 2) st = run_ring(o, in, out->o_ring, out->l_ring, m);
    if (st == ATTN_OK && o->single) st = run_single(local, o, in, out->o_one, out->l_one, &m->single_ms);
    if (st == ATTN_OK && o->G == 1) {
        memcpy(out->o_ring, out->o_one, out->ob), memcpy(out->l_ring, out->l_one, out->lb);
        m->ring_ms = m->compute_ms = m->single_ms;
    }
    return st;
}

typedef struct {
    attn_check ring, one;    /* sampled rows against the double reference */
    double max_do, max_dlse; /* ring against one GPU, every row (NaN without the one-GPU run) */
    int identical, pass;
} verdicts;

static attn_status check_all(const opts *o, const attn_inputs *in, const outputs *out, verdicts *v) {
    memset(v, 0, sizeof *v);
    v->ring.pass = v->one.pass = 1;
    v->max_do = v->max_dlse = NAN;
    attn_status st = ATTN_OK;
    if (o->check_rows > 0) {
        int64_t *rows = NULL, nrows = 0;
        st = attn_sample_rows(&in->p, 0, o->check_rows, (uint64_t)o->seed, &rows, &nrows);
        if (st == ATTN_OK) st = attn_check_output(in, out->o_ring, out->l_ring, rows, nrows, &v->ring);
        if (st == ATTN_OK && out->o_one)
            st = attn_check_output(in, out->o_one, out->l_one, rows, nrows, &v->one);
        free(rows);
    }
    if (st == ATTN_OK && out->o_one) {
        compare_all(&in->p, out->o_ring, out->l_ring, out->o_one, out->l_one, &v->max_do, &v->max_dlse);
        v->identical = !memcmp(out->o_ring, out->o_one, out->ob) && !memcmp(out->l_ring, out->l_one, out->lb);
    }
    v->pass = v->ring.pass && v->one.pass;
    return st;
}

/* The ring's lines: its plan, the memory each GPU took, the K/V traffic and the three times. */
static void print_ring(const opts *o, const measures *m, double io_one, double hidden) {
    const cp_plan *pl = &m->info.plan;
    int64_t calls;
    double work;
    cp_rank_work(pl, 0, &calls, &work);
    printf("ring     %d %s, %d chunks of %lld rows (%lld padding), %d per GPU; %d steps, %lld local calls "
           "on GPU 0\n",
           o->G, o->one_gpu ? "ranks on GPU 0" : "GPUs", pl->n, (long long)pl->c,
           (long long)((int64_t)pl->n * pl->c - o->N), pl->S, o->G, (long long)calls);
    printf("memory   %.3f GiB allocated by stage 10 per GPU; free memory dropped by %.3f GiB at most (NCCL "
           "included); one GPU at this shape holds Q, K, V, O, LSE = %.3f GiB\n",
           GIB(m->info.rank_bytes), GIB(m->mem_used), GIB(io_one));
    printf("traffic  each GPU sends %.3f GiB of K/V per pass (%d x %.3f GiB); the exchange alone %.3f ms, "
           "%.1f GB/s per GPU\n",
           GIB(m->info.sent_bytes), o->G - 1, GIB(m->info.shard_bytes), m->comm_ms,
           m->comm_ms > 0 ? (double)m->info.sent_bytes / (m->comm_ms * 1e6) : 0.0);
    printf("time     ring %.3f ms (local calls alone %.3f ms; the overlap hides %.0f%% of the exchange)\n",
           m->ring_ms, m->compute_ms, 100.0 * hidden);
}

/* The human lines, then the one "cp_bench: key=value ..." line that gpu_proof.sh reads. */
static void print_report(const opts *o, const attn_stage *local, const measures *m, const outputs *out,
                         const verdicts *v) {
    const double ratio = m->single_ms > 0 ? m->ring_ms / m->single_ms : NAN;
    const double hidden = o->G >= 2 && m->comm_ms > 0
                              ? fmax(0.0, fmin(1.0, (m->compute_ms + m->comm_ms - m->ring_ms) / m->comm_ms))
                              : NAN;
    const double io_one = 4.0 * (double)out->ob + (double)out->lb;
    printf("shape    B=%lld H=%lld N=%lld D=%lld %s %s; local stage %s %s on %s\n", o->B, o->H, o->N, o->D,
           o->causal ? "causal" : "non-causal", attn_dtype_name(o->dtype), local->id, local->name,
           attn_gpu_name());
    if (o->G >= 2) print_ring(o, m, io_one, hidden);
    if (out->o_one)
        printf("one GPU  %.3f ms (stage %s); ring / one GPU = %.3f\n", m->single_ms, local->id, ratio);
    if (o->check_rows > 0)
        printf("check    %lld rows vs the double reference: ring err/tol %.3f, LSE %.3f %s; one GPU err/tol "
               "%.3f %s\n",
               (long long)v->ring.rows_checked, v->ring.worst_ratio, v->ring.lse_worst_ratio,
               verdict(&v->ring), v->one.worst_ratio, out->o_one ? verdict(&v->one) : "-");
    if (out->o_one)
        printf("compare  ring vs one GPU, every row: max |dO| %.3g, max |dLSE| %.3g%s\n", v->max_do,
               v->max_dlse, v->identical ? " (bit-identical)" : "");
    printf("cp_bench: G=%d one_gpu=%d B=%lld H=%lld N=%lld D=%lld causal=%d dtype=%s local=%s ring_ms=%.4f "
           "compute_ms=%.4f comm_ms=%.4f single_ms=%.4f ratio=%.4f hidden=%.3f sent_gib=%.4f mem_gib=%.4f "
           "alloc_gib=%.4f one_gpu_gib=%.4f ring_err=%.3f ring_lse_err=%.3f single_err=%.3f max_do=%.3g "
           "max_dlse=%.3g identical=%d result=%s\n",
           o->G, o->one_gpu, o->B, o->H, o->N, o->D, o->causal, attn_dtype_name(o->dtype), local->id,
           m->ring_ms, m->compute_ms, m->comm_ms, m->single_ms, ratio, hidden, GIB(m->info.sent_bytes),
           GIB(m->mem_used), GIB(m->info.rank_bytes), GIB(io_one), v->ring.worst_ratio,
           v->ring.lse_worst_ratio, v->one.worst_ratio, v->max_do, v->max_dlse, v->identical,
           v->pass ? "PASS" : "FAIL");
}

int main(int argc, char **argv) {
    opts o;
    attn_problem p;
    const attn_stage *local = NULL;
    const int rc = prepare(argc, argv, &o, &p, &local);
    if (rc >= 0) return rc;
    attn_inputs in;
    if (attn_inputs_random(&in, &p, (uint64_t)o.seed, ATTN_INIT_NORMAL) != ATTN_OK) {
        fprintf(stderr, "cp_bench: %s\n", attn_last_error());
        return 1;
    }
    outputs out;
    measures m;
    verdicts v;
    memset(&out, 0, sizeof out), memset(&m, 0, sizeof m);
    attn_status st = run_all(&o, local, &in, &out, &m);
    if (st == ATTN_OK) st = check_all(&o, &in, &out, &v);
    if (st == ATTN_OK)
        print_report(&o, local, &m, &out, &v);
    else
        fprintf(stderr, "cp_bench: %s\n", attn_last_error());
    outputs_free(&out);
    attn_inputs_free(&in);
    return st == ATTN_OK && v.pass ? 0 : 1;
}
