/*
 * example_main.c: the public library (flashattn.h) from plain C, outside the suite: one causal fp16
 * attention (B=1, H=2, N=256, D=64) on the fastest stage this GPU runs, checked against a CPU loop in
 * double over every output element and every LSE. Against an installed copy (make install PREFIX=p):
 *
 *   export PKG_CONFIG_PATH=p/lib/pkgconfig
 *   cc example_main.c $(pkg-config --cflags --libs flashattn) -I$(pkg-config --variable=cudaincludedir \
 *       flashattn) -L$(pkg-config --variable=cudalibdir flashattn) -lcudart_static -ldl -lrt -lpthread
 *   LD_LIBRARY_PATH=p/lib ./a.out
 *
 * (the program's own cudaMalloc and cudaMemcpy need a CUDA runtime of their own: the shared library
 * keeps its runtime inside); or statically, with the library's runtime:
 *
 *   cc example_main.c $(pkg-config --cflags flashattn) -I$(pkg-config --variable=cudaincludedir \
 *       flashattn) $(pkg-config --variable=static_libs flashattn)
 *
 * In the tree: make flashattn-example && build/flashattn_example. tests/install_test.sh (make check)
 * builds it both ways outside the tree and asserts the exit status below.
 *
 * Exit status: 0 ok (the result agrees with the CPU); 1 could not run (a refusal, a CUDA error) or the
 * result disagrees; 2 bad usage (it takes no arguments); 3 no CUDA device here (the library said
 * ATTN_ENODEV, and its reason is printed): nothing to run on.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "flashattn.h"

#define B 1
#define H 2
#define N 256
#define D 64
#define ELEMS (B * H * N * D)
#define EXIT_NO_DEVICE 3

/* float -> fp16 bits for the small normal values used here (|x| in [2^-14, 65504]; 0 stays 0) */
static uint16_t to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e < 113) return (uint16_t)sign; /* too small for a normal fp16: flush to zero */
    uint32_t h = ((e - 112u) << 10) | (m >> 13);
    if ((m & 0x1fffu) > 0x1000u || ((m & 0x1fffu) == 0x1000u && (h & 1u))) h++; /* round to nearest even */
    return (uint16_t)(sign | h);
}
static float from_half(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1fu,
             x = ((uint32_t)(h & 0x8000u) << 16) | ((e + 112u) << 23) | ((h & 0x3ffu) << 13);
    float f;
    if (e == 0) return 0.f;
    memcpy(&f, &x, 4);
    return f;
}

#define CHECK_CUDA(call)                                                                                     \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "flashattn_example: %s failed: %s\n", #call, cudaGetErrorString(e_));            \
            return 1;                                                                                        \
        }                                                                                                    \
    } while (0)

static uint16_t hq[ELEMS], hk[ELEMS], hv[ELEMS], ho[ELEMS];
static float hlse[B * H * N];

/* The library's refusal, and the exit status it means. */
static int refused(const char *what, attn_status s) {
    fprintf(stderr, "flashattn_example: %s: %s: %s\n", what, attn_status_name(s), attn_last_error());
    return s == ATTN_ENODEV ? EXIT_NO_DEVICE : 1;
}

/* Which stage runs (asked first: without a GPU that is the library's refusal), then Q, K, V to the
 * device, attn_forward, O and LSE back. 0 on success, else the exit status. */
static int run_on_gpu(void) {
    attn_forward_args a;
    memset(&a, 0, sizeof a); /* strides 0: contiguous [B, H, N, D] */
    a.p = attn_problem_make(B, H, N, D, /*causal=*/1);
    const char *stage = NULL;
    attn_status s = attn_forward_stage(&a, NULL, &stage);
    if (s != ATTN_OK) return refused("attn_forward_stage", s);
    printf("stage %s (the fastest this GPU runs for B=%d H=%d N=%d D=%d causal fp16)\n", stage, B, H, N, D);

    const size_t bytes = sizeof hq;
    CHECK_CUDA(cudaMalloc(&a.q.data, bytes));
    CHECK_CUDA(cudaMalloc(&a.k.data, bytes));
    CHECK_CUDA(cudaMalloc(&a.v.data, bytes));
    CHECK_CUDA(cudaMalloc(&a.o.data, bytes));
    CHECK_CUDA(cudaMalloc((void **)&a.lse, sizeof hlse));
    CHECK_CUDA(cudaMemcpy(a.q.data, hq, bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(a.k.data, hk, bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(a.v.data, hv, bytes, cudaMemcpyHostToDevice));
    if ((s = attn_forward(&a, NULL, /*stream=*/NULL)) != ATTN_OK) return refused("attn_forward", s);
    CHECK_CUDA(cudaDeviceSynchronize()); /* errors inside the kernel surface here */
    CHECK_CUDA(cudaMemcpy(ho, a.o.data, bytes, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(hlse, a.lse, sizeof hlse, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaFree(a.q.data));
    CHECK_CUDA(cudaFree(a.k.data));
    CHECK_CUDA(cudaFree(a.v.data));
    CHECK_CUDA(cudaFree(a.o.data));
    CHECK_CUDA(cudaFree(a.lse));
    return 0;
}

/* The worst |O - CPU| and |LSE - CPU| over every row, in double; row i sees keys 0..i. */
static void check_on_cpu(double scale, double *o_err, double *lse_err) {
    static double sc[N];
    *o_err = *lse_err = 0.0;
    for (int h = 0; h < B * H; h++)
        for (int i = 0; i < N; i++) {
            const uint16_t *q = hq + ((size_t)h * N + i) * D;
            double mx = -INFINITY, l = 0.0;
            for (int j = 0; j <= i; j++) {
                double dot = 0.0;
                for (int d = 0; d < D; d++)
                    dot += (double)from_half(q[d]) * from_half(hk[((size_t)h * N + j) * D + d]);
                sc[j] = dot * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = 0; j <= i; j++) l += (sc[j] = exp(sc[j] - mx));
            for (int d = 0; d < D; d++) {
                double o = 0.0;
                for (int j = 0; j <= i; j++) o += sc[j] * from_half(hv[((size_t)h * N + j) * D + d]);
                const double err = fabs(from_half(ho[((size_t)h * N + i) * D + d]) - o / l);
                if (!(err <= *o_err)) *o_err = err; /* a NaN is kept */
            }
            const double err = fabs(hlse[h * N + i] - (mx + log(l)));
            if (!(err <= *lse_err)) *lse_err = err;
        }
}

int main(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr, "usage: %s (no arguments)\n", argv[0]);
        return 2;
    }
    srand(1);
    for (size_t i = 0; i < ELEMS; ++i) {
        hq[i] = to_half((float)rand() / RAND_MAX - 0.5f);
        hk[i] = to_half((float)rand() / RAND_MAX - 0.5f);
        hv[i] = to_half((float)rand() / RAND_MAX - 0.5f);
    }
    const int rc = run_on_gpu();
    if (rc != 0) return rc;
    double o_err, lse_err;
    check_on_cpu((double)(float)(1.0 / sqrt((double)D)), &o_err, &lse_err);
    printf("max |O - CPU| = %.3g, max |LSE - CPU| = %.3g over %d rows\n", o_err, lse_err, B * H * N);
    /* |O| < 0.5: half an fp16 ulp is below 2.5e-4, and P is rounded to 16 bits before P V (1e-3 of each
     * term at most); the LSE is float32 of magnitude < 6 */
    if (!(o_err <= 2e-3 && lse_err <= 1e-3)) {
        fprintf(stderr, "flashattn_example: the GPU result disagrees with the CPU\n");
        return 1;
    }
    printf("matches the CPU\n");
    return 0;
}
