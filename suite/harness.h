/*
 * harness.h: inputs, one timed and checked run of a stage, and the check against the double
 * reference. The front end (build/attn), the tests and the bench all go through attn_run().
 */
#ifndef ATTN_HARNESS_H
#define ATTN_HARNESS_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- inputs ------------------------------------------------------------------------------- */

typedef enum {
    ATTN_INIT_NORMAL = 0, /* q, k, v ~ N(0, 1): ordinary scores of a few units */
    ATTN_INIT_LARGE,      /* q, k ~ N(0, 1000 / (|scale| sqrt(D))): scores with a standard deviation
                             of 1000, and exp() without the max subtracted overflows even in fp32 */
    ATTN_INIT_FIRST_MAX,  /* every query's largest score is on key 0, far above the rest: a
                             one-pass kernel must rescale nothing later, and must not lose key 0 */
    ATTN_INIT_RISING,     /* scores rise with the key index, so the running max grows in every
                             key tile and alpha < 1 on every step */
} attn_init;

typedef struct {
    attn_problem p;
    uint16_t *q, *k, *v; /* host, Q [B, H, N, D], K and V [B, H_kv, N_k, D], bit patterns of p.dtype */
    uint16_t *d_o;       /* dO for a backward stage (attn_inputs_random_grad, or do.npy), else NULL */
    unsigned from_f32;   /* attn_inputs_load: bit 0, 1, 2 set when q, k, v were float32 in their file
                            (and so were rounded to p.dtype); bit 3 for do.npy; 0 for random inputs */
} attn_inputs;

/* Fresh random inputs, rounded to p->dtype. Deterministic in seed. */
attn_status attn_inputs_random(attn_inputs *in, const attn_problem *p, uint64_t seed, attn_init kind);
/* dO for a backward stage: N(0, 1), rounded to p.dtype, deterministic in seed (and unlike Q, K and V
 * of the same seed); replaces a dO the inputs held. */
attn_status attn_inputs_random_grad(attn_inputs *in, uint64_t seed);
/* Reads DIR/q.npy ([B, H, N, D]), DIR/k.npy and DIR/v.npy ([B, H_kv, N_k, D], one shape, B and D
 * q.npy's), float16 or float32, C order, all finite. B, H, N, D, H_kv and N_k of *p are replaced by
 * the files'; causal, scale (if 0: 1/sqrt(D)) and dtype are kept; float32 values are rounded to
 * p->dtype. */
attn_status attn_inputs_load(attn_inputs *in, const char *dir, const attn_problem *p);
/* Reads DIR/do.npy (float16 or float32, the shape of in's Q, finite) into in->d_o, rounded to p.dtype
 * (bit 3 of from_f32 set when it was float32). */
attn_status attn_inputs_load_grad(attn_inputs *in, const char *dir);
void attn_inputs_free(attn_inputs *in);
/* Scores s = scale * q.k of these inputs are bounded by |scale| * D * max|q| * max|k|. Every stage
 * computes them accurately, and the float32 LSE stays finite, while
 *   - the unscaled D * max|q| * max|k| <= ATTN_MAX_SCORE (stages 06-09 form q.k in float32),
 *   - |scale| * log2(e) * max|q| <= ATTN_MAX_SCORE (stages 03-05 fold scale * log2(e) into Q),
 *   - |scale| * log2(e) * D * max|q| * max|k| <= ATTN_MAX_SCORE_LOG2 (stages 06-09 subtract the row
 *     max m inside one FFMA, 2^(s * sl2 - fl(m * sl2)): the max's own term is 2 to the power of the
 *     rounding error of fl(m * sl2), at most 1/2 below 2^24 but 2^64 near 2^88, past fp16's range;
 *     at --scale 1e10 the CPU model of stage 06 wrote NaN).
 * ATTN_OK, or ATTN_EINVAL with a message giving the largest |scale| these inputs allow (or saying
 * that the inputs themselves are too large for any scale). */
#define ATTN_MAX_SCORE 0x1p120 /* 1.3e36: FLT_MAX is 2^128, and the stages multiply scores by
                                  log2(e) and subtract two of them (x 2.9); 2^8 leaves room to spare */
#define ATTN_MAX_SCORE_LOG2 0x1p24 /* 1.7e7: float32 still holds every integer up to it */
attn_status attn_inputs_check_scale(const attn_inputs *in);
const char *attn_init_name(attn_init kind);

/* ---- checking ----------------------------------------------------------------------------- */

typedef struct {
    int64_t rows_checked;
    int64_t nonfinite;       /* NaN or inf in the checked part of O or LSE */
    int64_t unwritten;       /* of those, the elements that still hold the poison bits (all ones):
                                never written by the stage; the rest are NaN or inf it wrote */
    int64_t lse_nonfinite;   /* of nonfinite, those in LSE (the rest are in O) */
    int64_t lse_unwritten;   /* of unwritten, those in LSE */
    double max_abs_err;      /* max |O - O_ref| over checked elements */
    double rel_l2;           /* ||O - O_ref||_2 / ||O_ref||_2 over checked rows */
    double worst_ratio;      /* max of |O - O_ref| / tol; the check needs this <= 1 */
    int64_t worst_b, worst_h, worst_n, worst_d;
    double worst_got, worst_want, worst_tol;
    int worst_by_range;      /* 1: the worst element's tol is the rule of the range's (check.c), nearer
                                than tol: V's range over the keys within reach of the row's max */
    double worst_lo, worst_hi; /* that range, [lo_d, hi_d] */
    int lse_checked;         /* 0 when the stage does not write LSE */
    double max_lse_err;      /* max |LSE - LSE_ref| */
    double lse_worst_ratio;  /* max of |LSE - LSE_ref| / tol_lse */
    int pass;
} attn_check;

/* Rows to check, as global row indices (b*H + h)*N + i. All rows when the problem is small;
 * otherwise every row of the first and last (b, h) plus `extra` random rows elsewhere (seeded).
 * With full_heads == 0 only `extra` random rows plus the first and last row of each of those heads.
 * The caller frees *rows. */
attn_status attn_sample_rows(const attn_problem *p, int full_heads, int64_t extra, uint64_t seed,
                             int64_t **rows, int64_t *nrows);
/* Compares O (and LSE, when lse != NULL) on the given rows against the independent double reference
 * (reference.c; never the stage's own code, stage 01 included),
 * with the tolerance documented in check.c. */
attn_status attn_check_output(const attn_inputs *in, const uint16_t *o, const float *lse,
                              const int64_t *rows, int64_t nrows, attn_check *c);

/* The gradients' check (check_backward.c): dQ, dK and dV against the double reference of the
 * backward (reference_backward.c), element by element, with the tolerance derived there. */
typedef struct {
    int64_t checked, nonfinite, unwritten; /* unwritten: NaN with the poison's bits, of nonfinite */
    double max_abs_err, rel_l2, worst_ratio;
    int64_t worst_b, worst_h, worst_n, worst_d; /* worst_n: the row (dQ) or key (dK, dV) */
    double worst_got, worst_want, worst_tol;
} attn_tensor_check;

typedef struct {
    int64_t heads, rows, keys;  /* heads checked; rows of dQ and keys of dK and dV, over those heads */
    int64_t forward_nonfinite;  /* rows whose forward O or LSE is not finite: no tolerance, FAIL */
    attn_tensor_check t[3];     /* dQ, dK, dV */
    int pass;
} attn_grad_check;

/* "dQ", "dK", "dV" for t = 0, 1, 2 */
const char *attn_grad_name(int t);
/* Compares dq, dk, dv ([B, H, N, D], p.dtype) of the backward of the inputs (in->d_o required), whose
 * forward wrote o and lse, with the double reference. Sampled rows, keys and heads take the seed. */
attn_status attn_check_grads(const attn_inputs *in, const uint16_t *o, const float *lse, const uint16_t *dq,
                             const uint16_t *dk, const uint16_t *dv, uint64_t seed, attn_grad_check *c);

/* ---- one run ------------------------------------------------------------------------------ */

typedef struct {
    int warmup;         /* untimed runs before timing; default 2 */
    int repeat;         /* timed runs, the median is reported; default 10 */
    int check;          /* 1: compare with the reference */
    int full_heads;     /* check every row of the first and last (b, h); default 1 */
    int64_t check_rows; /* extra random rows checked; default 256 */
    uint64_t seed;      /* row sampling */
    int cold_l2;        /* GPU stages: 1 writes a buffer of 4x the GPU's L2 size before every timed run
                           (outside the timed window), so no run finds Q, K, V in L2 from the one
                           before; 0 (default): warm, as back-to-back calls in a model see them */
    int gpus;           /* GPUs for a multi-GPU stage (stage 10): 0 = every GPU present; other
                           stages take 0 or 1. Default 0 */
    const attn_stage *forward; /* a backward stage: the forward stage whose O and LSE it reads; NULL:
                                  attn_default_forward() */
    const attn_trace *trace;   /* --trace-row: passed to the stage's first run only (a stage with
                                  `traces`; attn_run refuses the others); NULL: none */
} attn_run_opts;

typedef struct {
    double ms_median, ms_min, ms_max;
    int runs;
    double tflops;           /* attn_flops / median time */
    size_t extra_bytes;      /* workspace the stage needed beyond Q, K, V, O and LSE */
    size_t extra_measured;   /* device memory taken during the run beyond the inputs and outputs,
                                as cudaMemGetInfo saw it (0 for the CPU stage) */
    int identical;           /* 1: the last timed run's O and LSE equal the first run's bit for bit;
                                0: they differ; -1: not compared (no check asked, or one run) */
    int checked;
    attn_check chk;
    int gpus;                /* GPUs the stage was asked to use: 1 for a single-GPU stage, 0 on the CPU */
    int inputs_held;         /* 1: Q, K and V were those held by attn_gpu_hold_inputs, not uploaded */
    double run_wall_ms;      /* wall time of the whole run: set-up, copies, warm-up and timed runs */
    double check_wall_ms;    /* wall time of the check against the reference (0 without --check) */
    /* A backward stage: chk is its forward's check (O and LSE), grad the gradients' check, and the
     * times, TFLOP/s (2.5 x the forward's FLOPs) and identical are the backward's alone. */
    const attn_stage *forward;
    attn_grad_check grad;
} attn_result;

/* Host copies of a backward stage's gradients, [B, H, N, D] each, p.dtype. */
typedef struct {
    uint16_t *dq, *dk, *dv;
} attn_grads;

attn_run_opts attn_run_opts_default(void);
/* Validates the problem against the stage and the scale against the inputs (attn_inputs_check_scale),
 * allocates, poisons O and LSE (all bits set: NaN),
 * runs warmup + repeat times (CUDA events for GPU stages, a monotonic clock for the CPU stage),
 * optionally checks, and copies O and LSE to o_host / lse_host when they are not NULL
 * (lse_host is left untouched for stages that do not write LSE). Frees everything it allocated. */
attn_status attn_run(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                     attn_result *res, uint16_t *o_host, float *lse_host);

/* A backward stage (s->pass != ATTN_FORWARD): runs its forward once, untimed (opt->forward, or
 * attn_default_forward), for O and LSE, then the backward as attn_run runs a forward stage, and with
 * opt->check checks the forward's O and LSE (res->chk) and the gradients (res->grad); res->chk.pass is
 * then both. in->d_o is required. g (may be NULL) receives the gradients. attn_run calls this for a
 * backward stage, with g NULL. */
attn_status attn_run_backward(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                              attn_result *res, attn_grads *g);
/* ATTN_EINVAL with the message for --trace-row on stage s, which follows no row: it names the stages
 * that do (attn_stage.traces), from the registry. */
attn_status attn_trace_refused(const attn_stage *s);
/* The forward a backward stage runs by default: for a GPU stage the fastest forward stage (the last in
 * the registry) that writes LSE, runs on one GPU here and takes the problem, else (bf16 at D = 80, say)
 * stage 01 on the CPU; for a CPU stage stage 01. NULL (with the reason in attn_last_error) when none can. */
const attn_stage *attn_default_forward(const attn_stage *s, const attn_problem *p);
/* attn_flops for a forward stage, 2.5 times that for a backward one (five products of the forward's
 * size, against two: the convention of FlashAttention's benchmarks). */
double attn_stage_flops(const attn_stage *s, const attn_problem *p);

/* ---- the GPU, as the harness sees it (suite/gpu.c) ---------------------------------------- */

/* The GPU half of attn_run: allocates, poisons, runs (first run's O and LSE to o_first and
 * lse_first, host buffers of the full output size), times, compares the last run with the first. */
attn_status attn_run_gpu(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                         attn_result *res, uint16_t *o_first, float *lse_first);
/* The same for a backward stage: uploads o and lse (its forward's) with Q, K, V and dO, and copies the
 * first run's gradients into g. */
attn_status attn_run_gpu_backward(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                                  attn_result *res, const uint16_t *o, const float *lse, attn_grads *g);

/*
 * Holds Q, K and V of `in` on the current device until attn_gpu_release_inputs(), with a host buffer
 * for the repeatability copy: attn_run_gpu() given these same inputs (the same host arrays and size)
 * then neither allocates nor uploads them. For one caller that runs many stages on one set of inputs
 * and leaves the host arrays unchanged meanwhile (the bench); not for concurrent use. Without CUDA,
 * or when the device is short of memory, it returns an error and nothing is held.
 */
attn_status attn_gpu_hold_inputs(const attn_inputs *in);
void attn_gpu_release_inputs(void);

/* ATTN_OK if a usable CUDA device is present, else ATTN_ENODEV with the reason. */
attn_status attn_gpu_available(void);
/* How many CUDA devices this process sees (0 without a GPU or without CUDA). */
int attn_gpu_count(void);
/* "NVIDIA H200" or "none" */
const char *attn_gpu_name(void);
/* What a bench CSV records of the machine beside its rows. attn_gpu_driver: "CUDA 13.0", the newest CUDA
 * the installed driver supports (cudaDriverGetVersion), into buf; "" without a driver or without CUDA.
 * attn_gpu_sm_clock_mhz: the current device's peak SM clock (cudaDevAttrClockRate), 0 when unknown: the
 * clock it is rated for, not the one a run held (the H200's power cap lowers that under load). */
void attn_gpu_driver(char *buf, size_t cap);
int attn_gpu_sm_clock_mhz(void);
attn_status attn_gpu_mem_info(size_t *free_bytes, size_t *total_bytes);

#ifdef __cplusplus
}
#endif
#endif
