/*
 * road_main.c: times one compile-time variant of stage 06 (the road from the first tensor-core
 * version to the final kernel). `make fa2-road` builds this file once per variant, each linked with
 * its own build of fa2.cu (-DFA2_TILE_SET=.. -DFA2_SWIZZLE=.. -DFA2_PIPE=.. -DFA2_QREGS=..), into
 * build/road/road_<step>; 06_fa2_full/road.sh runs them all and prints the table.
 *
 *   build/road/road_r4 [--batch 4] [--heads 32] [--seq 4096] [--dim 128] [--causal] [--bf16]
 *                      [--warmup 5] [--reps 30]
 *
 * Prints one line: step, switches, median ms over the timed runs (CUDA events around each run),
 * TFLOP/s = 4*B*H*N*N*D / time (half of that when causal, as FlashAttention counts), and the largest
 * error of O against a double-precision CPU reference on a few rows (exit status 2 if it is too big).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "fa2.h"
#include "half.h"

#include "fa2_switches.h"

#define CK(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));                               \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform01(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((rng_state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
/* uniform on [-sqrt(3), sqrt(3)]: mean 0, variance 1, cheap for 200 M values */
static float unit_random(void) { return (float)((2.0 * uniform01() - 1.0) * 1.7320508075688772); }

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int64_t B = 4, H = 32, N = 4096, D = 128;
    int causal = 0, warmup = 5, reps = 30;
    attn_dtype dt = ATTN_F16;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const int more = i + 1 < argc;
        if (!strcmp(a, "--batch") && more)
            B = atoll(argv[++i]);
        else if (!strcmp(a, "--heads") && more)
            H = atoll(argv[++i]);
        else if (!strcmp(a, "--seq") && more)
            N = atoll(argv[++i]);
        else if (!strcmp(a, "--dim") && more)
            D = atoll(argv[++i]);
        else if (!strcmp(a, "--warmup") && more)
            warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && more)
            reps = atoi(argv[++i]);
        else if (!strcmp(a, "--causal"))
            causal = 1;
        else if (!strcmp(a, "--bf16"))
            dt = ATTN_BF16;
        else {
            fprintf(stderr,
                    "usage: %s [--batch B] [--heads H] [--seq N] [--dim D] [--causal] [--bf16] "
                    "[--warmup W] [--reps R]\n",
                    argv[0]);
            return 1;
        }
    }
    if (B < 1 || H < 1 || N < 1 || D < 1 || reps < 1 || reps > 1000 || warmup < 0) {
        fprintf(stderr, "bad sizes\n");
        return 1;
    }
    const char *step = strrchr(argv[0], '_') ? strrchr(argv[0], '_') + 1 : argv[0];

    const size_t n = (size_t)(B * H * N * D), bytes = n * 2, rows = (size_t)(B * H * N);
    uint16_t *hq = malloc(bytes), *hk = malloc(bytes), *hv = malloc(bytes), *ho = malloc(bytes);
    float *hlse = malloc(rows * sizeof(float));
    if (!hq || !hk || !hv || !ho || !hlse) {
        fprintf(stderr, "out of host memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; ++i) {
        hq[i] = attn_from_f32(unit_random(), dt);
        hk[i] = attn_from_f32(unit_random(), dt);
        hv[i] = attn_from_f32(unit_random(), dt);
    }
    void *q, *k, *v, *o;
    float *lse;
    CK(cudaMalloc(&q, bytes));
    CK(cudaMalloc(&k, bytes));
    CK(cudaMalloc(&v, bytes));
    CK(cudaMalloc(&o, bytes));
    CK(cudaMalloc((void **)&lse, rows * sizeof(float)));
    CK(cudaMemcpy(q, hq, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(k, hk, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v, hv, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(o, 0xff, bytes));

    const float scale = 1.0f / sqrtf((float)D);
    const fa2_dtype fdt = dt == ATTN_BF16 ? FA2_BF16 : FA2_F16;
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    for (int r = 0; r < warmup + 1; ++r) {
        const fa2_status s = fa2_forward(q, k, v, o, lse, B, H, N, D, causal, scale, fdt, st);
        if (s != FA2_OK) {
            fprintf(stderr, "fa2_forward: %s\n", fa2_status_string(s));
            return 1;
        }
    }
    CK(cudaStreamSynchronize(st));

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *ms = malloc((size_t)reps * sizeof(float));
    if (!ms) return 1;
    for (int r = 0; r < reps; ++r) {
        CK(cudaEventRecord(e0, st));
        fa2_forward(q, k, v, o, lse, B, H, N, D, causal, scale, fdt, st);
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    CK(cudaGetLastError());
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    const double med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    const double flops = 4.0 * (double)B * H * (double)N * (double)N * D * (causal ? 0.5 : 1.0);

    /* check a few rows of the first and the last head against a double reference */
    CK(cudaMemcpy(ho, o, bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hlse, lse, rows * sizeof(float), cudaMemcpyDeviceToHost));
    double max_err = 0.0, max_lse_err = 0.0;
    double *p = malloc((size_t)N * sizeof(double));
    if (!p) return 1;
    const int64_t heads[2] = {0, B * H - 1};
    const int64_t qrows[4] = {0, N / 3, N / 2 + 1, N - 1};
    for (int hi = 0; hi < 2; ++hi)
        for (int ri = 0; ri < 4; ++ri) {
            const int64_t bh = heads[hi], i = qrows[ri], kmax = causal ? i + 1 : N;
            const size_t qoff = (size_t)((bh * N + i) * D);
            double mx = -INFINITY, l = 0.0;
            for (int64_t j = 0; j < kmax; ++j) {
                double dot = 0.0;
                const size_t koff = (size_t)((bh * N + j) * D);
                for (int64_t d = 0; d < D; ++d)
                    dot += (double)attn_to_f32(hq[qoff + d], dt) * attn_to_f32(hk[koff + d], dt);
                p[j] = dot * scale;
                if (p[j] > mx) mx = p[j];
            }
            for (int64_t j = 0; j < kmax; ++j) {
                p[j] = exp(p[j] - mx);
                l += p[j];
            }
            for (int64_t d = 0; d < D; ++d) {
                double acc = 0.0;
                for (int64_t j = 0; j < kmax; ++j)
                    acc += p[j] * attn_to_f32(hv[(size_t)((bh * N + j) * D + d)], dt);
                const double err = fabs(attn_to_f32(ho[qoff + d], dt) - acc / l);
                if (!(err <= max_err)) max_err = err; /* NaN counts as the worst */
            }
            const double lerr = fabs(hlse[bh * N + i] - (mx + log(l)));
            if (!(lerr <= max_lse_err)) max_lse_err = lerr;
        }
    const double tol = dt == ATTN_BF16 ? 2e-2 : 3e-3;
    const int ok = max_err <= tol && max_lse_err <= 1e-3;

    printf("%-3s tiles=%d swizzle=%d pipe=%2d qregs=%d  B=%lld H=%lld N=%lld D=%lld %s %s  %9.3f ms  %7.1f "
           "TFLOP/s  "
           "max|dO| %.1e  max|dLSE| %.1e  %s\n",
           step, FA2_TILE_SET, FA2_SWIZZLE, FA2_PIPE, FA2_QREGS, (long long)B, (long long)H, (long long)N,
           (long long)D, causal ? "causal    " : "non-causal", dt == ATTN_BF16 ? "bf16" : "fp16", med,
           flops / (med * 1e-3) / 1e12, max_err, max_lse_err, ok ? "ok" : "CHECK FAILED");

    free(p);
    free(ms);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(st);
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    cudaFree(lse);
    free(hq);
    free(hk);
    free(hv);
    free(ho);
    free(hlse);
    return ok ? 0 : 2;
}
