/*
 * harness.c: inputs (random or from .npy files) and one timed, optionally checked, run of any
 * registered stage. The GPU half of a run lives in gpu.c, the check in check.c.
 */
#include "harness.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "half.h"
#include "npy.h"

/* ---- random inputs ------------------------------------------------------------------------ */

/* Counter-based: element e of tensor t gets hash(seed, t, e), so inputs are the same whatever the
 * number of threads that fill them. */
static uint64_t hash64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static double uniform01(uint64_t h) { return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
/* A standard normal from two hashes (Box-Muller). */
static double normal_at(uint64_t seed, uint64_t tensor, uint64_t e) {
    uint64_t base = hash64(seed ^ hash64(tensor * 0x632be59bd9b4e019ull + e));
    double u1 = uniform01(base), u2 = uniform01(hash64(base));
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

const char *attn_init_name(attn_init kind) {
    switch (kind) {
    case ATTN_INIT_NORMAL: return "normal";
    case ATTN_INIT_LARGE: return "large";
    case ATTN_INIT_FIRST_MAX: return "first-max";
    case ATTN_INIT_RISING: return "rising";
    }
    return "?";
}

void attn_inputs_free(attn_inputs *in) {
    free(in->q), free(in->k), free(in->v), free(in->d_o);
    in->q = in->k = in->v = in->d_o = NULL;
}

static attn_status alloc_inputs(attn_inputs *in, const attn_problem *p) {
    memset(in, 0, sizeof *in);
    in->p = *p;
    const size_t bytes = (size_t)attn_qkv_elems(p) * 2, kv_bytes = (size_t)attn_kv_elems(p) * 2;
    in->q = attn_alloc(bytes), in->k = attn_alloc(kv_bytes), in->v = attn_alloc(kv_bytes);
    if (!in->q || !in->k || !in->v) {
        attn_inputs_free(in);
        char size[32];
        return attn_fail(ATTN_ENOMEM, "cannot allocate %s of host memory for Q, K and V",
                         attn_size_text((double)bytes + 2.0 * (double)kv_bytes, size, sizeof size));
    }
    return ATTN_OK;
}

attn_status attn_inputs_random(attn_inputs *in, const attn_problem *p, uint64_t seed, attn_init kind) {
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    /* first-max and rising place keys by their index in a head, which packed sequences do not have */
    if (p->cu_seqlens_q && kind != ATTN_INIT_NORMAL && kind != ATTN_INIT_LARGE)
        return attn_fail(ATTN_EINVAL, "--init %s: not with variable lengths (normal or large)", attn_init_name(kind));
    if ((st = alloc_inputs(in, p)) != ATTN_OK) return st;
    /* K and V ([B, H_kv, N_k, D]) count their own elements: element e of each tensor is the same value
     * whatever the other's shape, and with H_kv = H, N_k = N the inputs are those of before GQA */
    const int64_t N = p->N_k, D = p->D, nq = attn_qkv_elems(p), nkv = attn_kv_elems(p);
    const int64_t total = nq > nkv ? nq : nkv;
    const double scale = fabs((double)p->scale), sqrtD = sqrt((double)D);
    /* first-max and rising aim the scores' sign: with a negative scale their keys are negated, so that
     * key 0 is still each row's max and the scores still rise */
    const double sign = p->scale < 0.0f ? -1.0 : 1.0;
    /* LARGE: q, k ~ N(0, sigma^2) with sigma^2 = 1000 / (scale sqrt(D)), so that scale * q.k has a
     * standard deviation of 1000: scores in the thousands, exp(s) overflows fp32 past s = 88. */
    const double sigma_large = sqrt(1000.0 / (scale * sqrtD));
    /* FIRST_MAX: q > 0 in every coordinate (mean about 1.3) and k_0 = c in every coordinate, with c
     * chosen so that s_i0 = scale * c * sum(q) is about 40 while the other scores are N(0, ~2):
     * key 0 outweighs the others by e^30 or more. */
    const double c_first = 40.0 / (scale * 1.3 * (double)D);
    /* RISING: q > 0, and k_j carries a ramp so that scores rise by about 20 from key 0 to key N-1:
     * the running max rises in every key tile and alpha < 1 on every rescale. */
    const double ramp = 20.0 / (scale * 0.9 * (double)D);
    int overflow = 0;
#pragma omp parallel for schedule(static) reduction(| : overflow)
    for (int64_t e = 0; e < total; e++) {
        const int64_t j = (e / D) % N; /* the key inside its K/V head */
        double q = normal_at(seed, 1, (uint64_t)e), k = normal_at(seed, 2, (uint64_t)e);
        double v = normal_at(seed, 3, (uint64_t)e);
        switch (kind) {
        case ATTN_INIT_NORMAL: break;
        case ATTN_INIT_LARGE: q *= sigma_large, k *= sigma_large; break;
        case ATTN_INIT_FIRST_MAX:
            q = fabs(q) + 0.5;
            if (j == 0) k = sign * c_first;
            break;
        case ATTN_INIT_RISING:
            q = 0.5 * fabs(q) + 0.5;
            k = 0.5 * k + sign * ramp * (N > 1 ? (double)j / (double)(N - 1) : 0.0);
            break;
        }
        if (e < nq) {
            in->q[e] = attn_from_f32((float)q, p->dtype);
            overflow |= !isfinite(attn_to_f32(in->q[e], p->dtype));
        }
        if (e < nkv) {
            in->k[e] = attn_from_f32((float)k, p->dtype);
            in->v[e] = attn_from_f32((float)v, p->dtype);
            overflow |= !isfinite(attn_to_f32(in->k[e], p->dtype));
        }
    }
    if (overflow) { /* large, first-max and rising grow as 1 / |scale| to keep the scores in range */
        attn_inputs_free(in);
        return attn_fail(ATTN_EINVAL, "--init %s: at |scale| %g its q or k values overflow %s (they grow as 1 /"
                         " |scale| to keep the scores in range): use a larger |scale|, or --init normal",
                         attn_init_name(kind), scale, attn_dtype_name(p->dtype));
    }
    return ATTN_OK;
}

attn_status attn_inputs_random_grad(attn_inputs *in, uint64_t seed) {
    const attn_problem *p = &in->p;
    const int64_t total = attn_qkv_elems(p);
    uint16_t *g = attn_alloc((size_t)total * 2);
    if (!g) {
        char size[32];
        return attn_fail(ATTN_ENOMEM, "cannot allocate %s of host memory for dO",
                         attn_size_text(2.0 * (double)total, size, sizeof size));
    }
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < total; e++) g[e] = attn_from_f32((float)normal_at(seed, 4, (uint64_t)e), p->dtype);
    free(in->d_o);
    in->d_o = g;
    return ATTN_OK;
}

/* ---- inputs from .npy files --------------------------------------------------------------- */

static attn_status convert_tensor(const npy_array *a, const char *path, attn_dtype t, uint16_t *dst) {
    for (int64_t e = 0; e < a->count; e++) {
        float f = a->dtype == NPY_F16 ? attn_h2f(((const uint16_t *)a->data)[e]) : ((const float *)a->data)[e];
        if (!isfinite(f))
            return attn_fail(ATTN_EIO, "%s: element %lld is %s; inputs must be finite", path,
                             (long long)e, isnan(f) ? "NaN" : "infinite");
        uint16_t bits = attn_from_f32(f, t);
        if (!isfinite(attn_to_f32(bits, t)))
            return attn_fail(ATTN_EIO, "%s: element %lld (%g) overflows %s", path, (long long)e,
                             (double)f, attn_dtype_name(t));
        dst[e] = bits;
    }
    return ATTN_OK;
}

attn_status attn_inputs_load(attn_inputs *in, const char *dir, const attn_problem *p0) {
    static const char *names[3] = {"q", "k", "v"};
    npy_array arr[3];
    char path[3][4096];
    attn_status st = ATTN_OK;
    memset(arr, 0, sizeof arr);
    memset(in, 0, sizeof *in);
    int nread = 0;
    for (int t = 0; t < 3 && st == ATTN_OK; t++) {
        if ((size_t)snprintf(path[t], sizeof path[t], "%s%s%s.npy", dir, attn_dir_sep(dir), names[t]) >= sizeof path[t]) {
            st = attn_fail(ATTN_EINVAL, "directory name is too long (%zu bytes; limit %zu)", strlen(dir),
                           sizeof path[t] - sizeof "/q.npy"); /* the caller names --load */
            break;
        }
        st = npy_read(path[t], &arr[t]);
        if (st == ATTN_OK) nread++;
    }
    for (int t = 0; t < 3 && st == ATTN_OK; t++) {
        if (arr[t].ndim != 4)
            st = attn_fail(ATTN_EIO, "%s: shape must be [B, H, N, D] (4 dimensions), got %d", path[t],
                           arr[t].ndim);
        /* K is [B, H_kv, N_k, D]: its B and D are Q's, its heads and keys its own; V is K's shape */
        const int of = t == 2 ? 1 : 0;
        for (int d = 0; d < 4 && st == ATTN_OK && t > 0; d++)
            if (arr[t].shape[d] != arr[of].shape[d] && (t == 2 || d == 0 || d == 3))
                st = attn_fail(ATTN_EIO,
                               "%s: shape (%lld, %lld, %lld, %lld) differs from %s's (%lld, %lld, %lld, %lld)%s",
                               path[t], (long long)arr[t].shape[0], (long long)arr[t].shape[1],
                               (long long)arr[t].shape[2], (long long)arr[t].shape[3], path[of],
                               (long long)arr[of].shape[0], (long long)arr[of].shape[1],
                               (long long)arr[of].shape[2], (long long)arr[of].shape[3],
                               t == 1 ? " in B or D (k.npy and v.npy are [B, H_kv, N_k, D])" : "");
    }
    attn_problem p = *p0;
    if (st == ATTN_OK) {
        p.B = arr[0].shape[0], p.H = arr[0].shape[1], p.N = arr[0].shape[2], p.D = arr[0].shape[3];
        p.H_kv = arr[1].shape[1], p.N_k = arr[1].shape[2];
        if (!(p0->scale > 0.0f || p0->scale < 0.0f) && p.D > 0) p.scale = (float)(1.0 / sqrt((double)p.D));
        /* Q's shape first, then K's against it: the message names the file whose shape is refused */
        attn_problem pq = p;
        pq.H_kv = p.H, pq.N_k = p.N;
        const int bad = attn_problem_validate(&pq) != ATTN_OK ? 0 : attn_problem_validate(&p) != ATTN_OK ? 1 : -1;
        if (bad >= 0) {
            char why[512]; /* attn_fail writes the buffer attn_last_error() points to */
            snprintf(why, sizeof why, "%s", attn_last_error());
            st = attn_fail(ATTN_EIO, "%s: %s", path[bad], why);
        }
    }
    if (st == ATTN_OK) st = alloc_inputs(in, &p);
    for (int t = 0; t < 3 && st == ATTN_OK; t++) in->from_f32 |= (arr[t].dtype == NPY_F32) << t;
    if (st == ATTN_OK) st = convert_tensor(&arr[0], path[0], p.dtype, in->q);
    if (st == ATTN_OK) st = convert_tensor(&arr[1], path[1], p.dtype, in->k);
    if (st == ATTN_OK) st = convert_tensor(&arr[2], path[2], p.dtype, in->v);
    for (int t = 0; t < nread; t++) npy_free(&arr[t]);
    if (st != ATTN_OK) attn_inputs_free(in);
    return st;
}

attn_status attn_inputs_load_grad(attn_inputs *in, const char *dir) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s%sdo.npy", dir, attn_dir_sep(dir)) >= sizeof path)
        return attn_fail(ATTN_EINVAL, "directory name is too long (%zu bytes)", strlen(dir));
    npy_array a;
    memset(&a, 0, sizeof a);
    attn_status st = npy_read(path, &a);
    if (st != ATTN_OK) {
        char why[1024]; /* attn_fail writes the buffer attn_last_error() points to */
        snprintf(why, sizeof why, "%s", attn_last_error());
        return attn_fail(st, "%s (a backward stage reads dO from do.npy beside q.npy, k.npy and v.npy)", why);
    }
    const attn_problem *p = &in->p;
    const int64_t want[4] = {p->B, p->H, p->N, p->D};
    int same = a.ndim == 4;
    for (int d = 0; same && d < 4; d++) same = a.shape[d] == want[d];
    uint16_t *g = same ? attn_alloc((size_t)attn_qkv_elems(p) * 2) : NULL;
    if (!same)
        st = attn_fail(ATTN_EIO, "%s: shape must be q.npy's, (%lld, %lld, %lld, %lld)", path, (long long)p->B,
                       (long long)p->H, (long long)p->N, (long long)p->D);
    else if (!g)
        st = attn_fail(ATTN_ENOMEM, "cannot allocate host memory for dO");
    else
        st = convert_tensor(&a, path, p->dtype, g);
    if (st == ATTN_OK) {
        free(in->d_o);
        in->d_o = g;
        in->from_f32 |= (unsigned)(a.dtype == NPY_F32) << 3;
    } else {
        free(g);
    }
    npy_free(&a);
    return st;
}

static double max_abs(const uint16_t *x, int64_t n, attn_dtype t) {
    double m = 0.0;
#pragma omp parallel for reduction(max : m) schedule(static)
    for (int64_t e = 0; e < n; e++) {
        /* over the finite values: --load and the generator refuse NaN and inf, and what a library
         * caller's non-finite values do is the stages' to handle (tests/test_limits.c runs them) */
        const double a = fabs((double)attn_to_f32(x[e], t));
        if (a > m && isfinite(a)) m = a;
    }
    return m;
}

attn_status attn_inputs_check_scale(const attn_inputs *in) {
    const attn_problem *p = &in->p;
    const double qmax = max_abs(in->q, attn_qkv_elems(p), p->dtype);
    const double kmax = max_abs(in->k, attn_kv_elems(p), p->dtype);
    const double log2e = ATTN_LOG2E; /* the stages' exponent is base 2: scale * log2(e), in float */
    const double dot = (double)p->D * qmax * kmax, sl2 = fabs((double)p->scale) * log2e;
    if (!(dot <= ATTN_MAX_SCORE))
        return attn_fail(ATTN_EINVAL, "the inputs are too large for float32 scores at any scale: D * max|q| * max|k|"
                         " = %lld * %g * %g = %.3g, limit 2^120 = %.3g", (long long)p->D, qmax, kmax, dot,
                         ATTN_MAX_SCORE);
    if (!(sl2 * dot <= ATTN_MAX_SCORE_LOG2))
        return attn_fail(ATTN_EINVAL, "|scale| must be at most %.3g for these inputs (got %g): |scale| * log2(e) * D"
                         " * max|q| * max|k| (D %lld, max|q| %g, max|k| %g) must stay below 2^24 = %.3g, where"
                         " float32 still counts in whole units (stages 06-09 subtract the row max inside one FFMA)",
                         ATTN_MAX_SCORE_LOG2 / (log2e * dot), (double)p->scale, (long long)p->D,
                         qmax, kmax, ATTN_MAX_SCORE_LOG2);
    if (!(sl2 * qmax <= ATTN_MAX_SCORE))
        return attn_fail(ATTN_EINVAL, "|scale| must be at most %.3g for these inputs (got %g): stages 03-05 multiply Q"
                         " by |scale| * log2(e) in float32, and max|q| is %g (limit 2^120 = %.3g)",
                         ATTN_MAX_SCORE / (log2e * qmax), (double)p->scale, qmax, ATTN_MAX_SCORE);
    return ATTN_OK;
}

/* ---- one run ------------------------------------------------------------------------------ */

attn_run_opts attn_run_opts_default(void) {
    attn_run_opts o;
    o.warmup = 2;
    o.repeat = 10;
    o.check = 0;
    o.full_heads = 1;
    o.check_rows = 256;
    o.seed = 1;
    o.cold_l2 = 0;
    o.gpus = 0;
    o.forward = NULL;
    o.trace = NULL;
    o.layout = ATTN_LAYOUT_BHND;
    return o;
}

const char *attn_layout_name(attn_layout l) { return l == ATTN_LAYOUT_BNHD ? "bnhd" : "bhnd"; }

attn_status attn_stage_takes_layout(const attn_stage *s, attn_layout l) {
    char ids[256];
    if (l == ATTN_LAYOUT_BHND || (s->takes & ATTN_TAKES_STRIDES)) return ATTN_OK;
    return attn_fail(ATTN_EUNSUPPORTED, "--layout %s: stage %s takes contiguous [B, H, N, D] tensors only "
                     "(--layout bhnd); the stages that take other layouts: %s", attn_layout_name(l), s->id,
                     attn_stages_taking(ATTN_TAKES_STRIDES, ids, sizeof ids));
}

attn_strides attn_layout_strides(attn_layout l, int64_t heads, int64_t rows, int64_t D, int packed) {
    attn_strides s;
    if (l == ATTN_LAYOUT_BNHD)
        s.b = rows * heads * D, s.h = D, s.n = heads * D;
    else
        s.b = heads * rows * D, s.h = rows * D, s.n = D;
    if (packed) s.b = 0; /* sequences are rows: the batch stride is unused (stage.h) */
    return s;
}

void attn_transpose_heads(uint16_t *dst, const uint16_t *src, int64_t outer, int64_t a, int64_t b, int64_t D) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < a; i++)
            for (int64_t j = 0; j < b; j++)
                memcpy(dst + ((o * b + j) * a + i) * D, src + ((o * a + i) * b + j) * D, (size_t)D * 2);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What a CPU run writes: O and LSE (forward), or dQ, dK and dV (backward); each poisoned before every
 * run, and with a check and more than one run the first run's copy is kept to compare the last one
 * with, bit for bit, as the GPU half does. n outputs; copy[i] 0 for an output not compared (the LSE of a
 * stage that does not write it). */
typedef struct {
    void *buf[3];
    size_t bytes[3];
    int copy[3], n;
} cpu_outputs;

static attn_status run_cpu(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                           attn_result *res, const attn_args *a, const cpu_outputs *out) {
    const attn_problem *p = &in->p;
    const int runs = opt->repeat > 0 ? opt->repeat : 1;
    double *ms = attn_alloc((size_t)runs * sizeof(double));
    if (!ms) return attn_fail(ATTN_ENOMEM, "cannot allocate the timing array");
    const int compare = opt->check && runs > 1;
    void *first[3] = {NULL, NULL, NULL};
    attn_status st = ATTN_OK;
    for (int i = 0; i < out->n && compare && st == ATTN_OK; i++)
        if (!(first[i] = malloc(out->bytes[i]))) st = attn_fail(ATTN_ENOMEM, "cannot allocate the repeatability copy");
    /* a trace follows the first run alone: a row's story once, not once a run */
    attn_args traced = *a;
    traced.trace = opt->trace;
    for (int w = 0; w < opt->warmup && st == ATTN_OK; w++) st = s->run(p, w == 0 ? &traced : a);
    for (int r = 0; r < runs && st == ATTN_OK; r++) {
        for (int i = 0; i < out->n; i++) memset(out->buf[i], 0xff, out->bytes[i]); /* poison: NaN in every float */
        double t0 = now_ms();
        st = s->run(p, r == 0 && opt->warmup == 0 ? &traced : a);
        ms[r] = now_ms() - t0;
        res->runs = r + 1;
        for (int i = 0; i < out->n && st == ATTN_OK && compare && r == 0; i++) memcpy(first[i], out->buf[i], out->bytes[i]);
    }
    if (st == ATTN_OK) {
        qsort(ms, (size_t)res->runs, sizeof *ms, cmp_double);
        res->ms_min = ms[0], res->ms_max = ms[res->runs - 1];
        res->ms_median = res->runs % 2 ? ms[res->runs / 2] : 0.5 * (ms[res->runs / 2 - 1] + ms[res->runs / 2]);
    }
    res->identical = -1;
    if (st == ATTN_OK && compare) {
        res->identical = 1;
        for (int i = 0; i < out->n; i++)
            if (out->copy[i] && memcmp(out->buf[i], first[i], out->bytes[i]) != 0) res->identical = 0;
    }
    free(ms);
    for (int i = 0; i < 3; i++) free(first[i]);
    return st;
}

/* The forward stage on the CPU: O and LSE. */
static attn_status run_cpu_forward(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                                   attn_result *res, uint16_t *o, float *lse) {
    const attn_problem *p = &in->p;
    const attn_args a = {.q = in->q, .k = in->k, .v = in->v, .o = o, .lse = lse, .gpus = 1};
    const cpu_outputs out = {{o, lse, NULL},
                             {(size_t)attn_qkv_elems(p) * 2, (size_t)attn_rows(p) * 4, 0},
                             {1, s->writes_lse, 0},
                             2};
    return run_cpu(s, in, opt, res, &a, &out);
}

attn_status attn_trace_refused(const attn_stage *s) {
    char ids[128] = "";
    size_t n = 0;
    for (int i = 0; i < attn_num_stages; i++)
        if (attn_stages[i].traces && n < sizeof ids)
            n += (size_t)snprintf(ids + n, sizeof ids - n, "%s%s", n ? ", " : "", attn_stages[i].id);
    return attn_fail(ATTN_EINVAL, "--trace-row: stage %s follows no row through its key tiles; the stages that "
                     "do: %s (the CPU models of the online softmax)", s->id, ids);
}

attn_status attn_run(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                     attn_result *res, uint16_t *o_host, float *lse_host) {
    if (s->pass != ATTN_FORWARD) return attn_run_backward(s, in, opt, res, NULL);
    memset(res, 0, sizeof *res);
    res->identical = -1;
    const attn_problem *p = &in->p;
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    if ((st = attn_stage_supports(s, p)) != ATTN_OK) return st;
    if ((st = attn_stage_available(s)) != ATTN_OK) return st;
    /* the scale's bound for these inputs, as build/attn asks it: past it a stage's output is not
     * accurate (06-09) or not finite (03-05), and no check could call that a PASS fairly */
    if ((st = attn_inputs_check_scale(in)) != ATTN_OK) return st;
    if (opt->repeat < 0 || opt->warmup < 0)
        return attn_fail(ATTN_EINVAL, "repeat and warmup must be >= 0");
    if ((st = attn_stage_gpus_ok(s, opt->gpus)) != ATTN_OK) return st;
    if (opt->trace && !s->traces) return attn_trace_refused(s);
    if ((st = attn_stage_takes_layout(s, opt->layout)) != ATTN_OK) return st;
    /* The default: every GPU present for a multi-GPU stage (a stage that cannot use that many says
     * so), one for the others. */
    attn_run_opts o_gpus = *opt;
    if (o_gpus.gpus == 0) {
        const int n = attn_gpu_count();
        o_gpus.gpus = s->max_gpus > 1 ? (n < 1 ? 1 : n > s->max_gpus ? s->max_gpus : n) : 1;
    }
    res->gpus = s->on_gpu ? o_gpus.gpus : 0;
    opt = &o_gpus;
    /* A valid problem has at most 2^62 elements, so O's bytes fit in 64 bits; LSE's (4 * rows, rows up
     * to 2^62 when D = 1) might not. */
    if ((uint64_t)attn_rows(p) > SIZE_MAX / 4)
        return attn_fail(ATTN_ENOMEM, "LSE would need %.3g EiB of host memory", (double)attn_rows(p) * 4.0 / 0x1p60);
    const size_t o_bytes = (size_t)attn_qkv_elems(p) * 2, lse_bytes = (size_t)attn_rows(p) * 4;
    uint16_t *o = o_host ? o_host : attn_alloc(o_bytes);
    float *lse = lse_host && s->writes_lse ? lse_host : attn_alloc(lse_bytes);
    if (!o || !lse) {
        const int lse_failed = o != NULL; /* read before the free: the message names the one that failed */
        if (o != o_host) free(o);
        if (lse != lse_host) free(lse);
        char size[32];
        return attn_fail(ATTN_ENOMEM, "cannot allocate %s of host memory for %s",
                         attn_size_text(lse_failed ? (double)lse_bytes : (double)o_bytes, size, sizeof size),
                         lse_failed ? "LSE" : "O");
    }
    double t0 = now_ms();
    st = s->on_gpu ? attn_run_gpu(s, in, opt, res, o, lse) : run_cpu_forward(s, in, opt, res, o, lse);
    res->run_wall_ms = now_ms() - t0;
    if (st == ATTN_OK && res->ms_median > 0.0) res->tflops = attn_stage_flops(s, p) / (res->ms_median * 1e9);
    if (st == ATTN_OK && opt->check) {
        t0 = now_ms();
        int64_t *rows = NULL, nrows = 0;
        st = attn_sample_rows(p, opt->full_heads, opt->check_rows, opt->seed, &rows, &nrows);
        if (st == ATTN_OK) st = attn_check_output(in, o, s->writes_lse ? lse : NULL, rows, nrows, &res->chk);
        if (st == ATTN_OK) res->checked = 1;
        free(rows);
        res->check_wall_ms = now_ms() - t0;
    }
    if (o != o_host) free(o);
    if (lse != lse_host) free(lse);
    return st;
}

/* ---- one run of a backward stage ---------------------------------------------------------- */

double attn_stage_flops(const attn_stage *s, const attn_problem *p) {
    return s->pass == ATTN_FORWARD ? attn_flops(p) : 2.5 * attn_flops(p);
}

const attn_stage *attn_default_forward(const attn_stage *s, const attn_problem *p) {
    if (!s->on_gpu) {
        const attn_stage *f = attn_find_stage("01");
        return attn_stage_supports(f, p) == ATTN_OK ? f : NULL;
    }
    for (int i = attn_num_stages - 1; i >= 0; i--) {
        const attn_stage *f = &attn_stages[i];
        if (f->pass == ATTN_FORWARD && f->on_gpu && f->max_gpus == 1 && f->writes_lse &&
            !(f->takes & ATTN_FOR_DECODING) && attn_stage_supports(f, p) == ATTN_OK &&
            attn_stage_available(f) == ATTN_OK)
            return f;
    }
    /* No GPU forward takes the problem (stage 02 is fp16 only, 06-10 take a few D: bf16 at D = 1, 3 or 80
     * has none), so the CPU reference, which takes every D and dtype, writes the O and LSE the GPU
     * backward reads: the harness hands a backward host copies of them whichever stage made them. */
    const attn_stage *cpu = attn_find_stage("01");
    if (attn_stage_available(s) == ATTN_OK && attn_stage_supports(cpu, p) == ATTN_OK) return cpu;
    attn_fail(ATTN_ENODEV, "no GPU forward stage that writes LSE runs here with D = %lld, %s, for stage %s to "
              "read (--forward names one)", (long long)p->D, attn_dtype_name(p->dtype), s->id);
    return NULL;
}

/* The checks a backward run makes before it allocates anything. */
static attn_status backward_ok(const attn_stage *s, const attn_stage *f, const attn_inputs *in,
                               const attn_run_opts *opt) {
    const attn_problem *p = &in->p;
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    if ((st = attn_stage_supports(s, p)) != ATTN_OK || (st = attn_stage_available(s)) != ATTN_OK) return st;
    if ((st = attn_inputs_check_scale(in)) != ATTN_OK) return st;
    if (opt->repeat < 0 || opt->warmup < 0) return attn_fail(ATTN_EINVAL, "repeat and warmup must be >= 0");
    if ((st = attn_stage_gpus_ok(s, opt->gpus)) != ATTN_OK) return st;
    if (opt->trace && !s->traces) return attn_trace_refused(s);
    if ((st = attn_stage_takes_layout(s, opt->layout)) != ATTN_OK) return st;
    if (!in->d_o)
        return attn_fail(ATTN_EINVAL, "stage %s is a backward stage: the inputs need dO (random, or do.npy with "
                         "--load)", s->id);
    if (!f) return ATTN_ENODEV; /* attn_default_forward said why */
    if (f->pass != ATTN_FORWARD || !f->writes_lse)
        return attn_fail(ATTN_EINVAL, "--forward %s: stage %s reads the O and LSE of a forward stage that writes "
                         "LSE (01, 02, 06, 06m, 07-10)", f->id, s->id);
    return ATTN_OK;
}

attn_status attn_run_backward(const attn_stage *s, const attn_inputs *in, const attn_run_opts *opt,
                              attn_result *res, attn_grads *g) {
    memset(res, 0, sizeof *res);
    res->identical = -1;
    if (s->pass == ATTN_FORWARD) return attn_fail(ATTN_EINVAL, "stage %s is a forward stage", s->id);
    const attn_problem *p = &in->p;
    const attn_stage *f = opt->forward ? opt->forward : attn_problem_validate(p) == ATTN_OK ? attn_default_forward(s, p) : NULL;
    attn_status st = backward_ok(s, f, in, opt);
    if (st != ATTN_OK) return st;
    const size_t bytes = (size_t)attn_qkv_elems(p) * 2, lse_bytes = (size_t)attn_rows(p) * 4;
    uint16_t *o = attn_alloc(bytes), *dq = g ? g->dq : attn_alloc(bytes), *dk = g ? g->dk : attn_alloc(bytes),
             *dv = g ? g->dv : attn_alloc(bytes);
    float *lse = attn_alloc(lse_bytes);
    if (!o || !lse || !dq || !dk || !dv) st = attn_fail(ATTN_ENOMEM, "cannot allocate host memory for O, LSE and the gradients");
    /* the forward, once and untimed; with a check its O and LSE are checked too, since the gradients'
     * tolerance counts their errors as measured (check_backward.c) */
    attn_run_opts fo = attn_run_opts_default();
    fo.warmup = 0, fo.repeat = 1, fo.check = opt->check, fo.check_rows = opt->check_rows, fo.seed = opt->seed;
    fo.full_heads = opt->full_heads;
    attn_result fr;
    if (st == ATTN_OK && (st = attn_run(f, in, &fo, &fr, o, lse)) != ATTN_OK) {
        char why[1024]; /* attn_fail writes the buffer attn_last_error() points to */
        snprintf(why, sizeof why, "%s", attn_last_error());
        st = attn_fail(st, "the forward (stage %s) that stage %s reads: %s", f->id, s->id, why);
    }
    res->forward = f;
    res->gpus = s->on_gpu ? 1 : 0;
    double t0 = now_ms();
    if (st == ATTN_OK && s->on_gpu) {
        attn_grads mine = {dq, dk, dv};
        st = attn_run_gpu_backward(s, in, opt, res, o, lse, &mine);
    } else if (st == ATTN_OK) {
        const attn_args a = {.q = in->q, .k = in->k, .v = in->v, .o = o, .lse = lse, .gpus = 1,
                             .d_o = in->d_o, .dq = dq, .dk = dk, .dv = dv};
        const cpu_outputs out = {{dq, dk, dv}, {bytes, bytes, bytes}, {1, 1, 1}, 3};
        st = run_cpu(s, in, opt, res, &a, &out);
    }
    res->run_wall_ms = now_ms() - t0;
    if (st == ATTN_OK && res->ms_median > 0.0) res->tflops = attn_stage_flops(s, p) / (res->ms_median * 1e9);
    if (st == ATTN_OK && opt->check) {
        t0 = now_ms();
        res->chk = fr.chk;
        st = attn_check_grads(in, o, lse, dq, dk, dv, opt->seed, &res->grad);
        if (st == ATTN_OK) res->checked = 1;
        res->check_wall_ms = now_ms() - t0;
    }
    free(o), free(lse);
    if (!g) free(dq), free(dk), free(dv);
    return st;
}
