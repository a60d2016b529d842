/*
 * test_fa2_api.c: the contract of libfa2's fa2_forward() (lib/fa2.h), called directly, and
 * the same contract of the stage libraries' NAME_forward() (stages 07-09, lib/stage_lib.h).
 *
 * Without a GPU (any CUDA build): every refusal that needs no CUDA call, with the argument named in
 * fa2_last_error(); outputs overlapping inputs refused, inputs overlapping each other taken; the scale
 * bound that fa2.h states is the one enforced; fa2_last_error() is per thread.
 * With a GPU: host memory refused; an error left by an earlier, unrelated CUDA call is not reported as
 * fa2_forward's own (and stays for its owner); fa2_forward works after cudaDeviceReset() (the
 * shared-memory opt-in is redone); first calls from 8 threads at once all work. Results are checked
 * against the double reference. Criterion runs each test in its own process.
 * The stage libraries: the same refusals, in the same words (without a GPU: a clear CUDA-status
 * refusal, not a misleading "q"); with an sm_90 GPU: host memory refused, results checked, an earlier
 * error kept, and scale 0 as uniform attention (O the mean of the visible V rows, LSE log of their
 * count), for fa2_forward too.
 */
#include <math.h>

#include "test_util.h"

#ifdef ATTN_HAVE_CUDA
#include <pthread.h>

#include <cuda_runtime_api.h>

#include "fa2.h"
#include "half.h"
#include "stage_lib.h"

ATTN_STAGE_LIBRARY_API(tma_wgmma)
ATTN_STAGE_LIBRARY_API(warp_specialized)
ATTN_STAGE_LIBRARY_API(overlap)

/* Distinct, aligned addresses no one owns: enough for refusals decided before any CUDA call. */
#define FAKE(i) ((void *)(uintptr_t)(0x10000000u * (i)))

static fa2_status call(const void *q, const void *k, const void *v, void *o, float *lse, int64_t N, int64_t D,
                       float scale, int dtype) {
    return fa2_forward(q, k, v, o, lse, 1, 2, N, D, 0, scale, (fa2_dtype)dtype, 0);
}

#define EXPECT_REFUSAL(status, want, text)                                                                   \
    do {                                                                                                     \
        fa2_status s_ = (status);                                                                            \
        cr_assert_eq(s_, (want), "%s: got %s (%s)", #status, fa2_status_string(s_), fa2_last_error());       \
        cr_assert(strstr(fa2_last_error(), (text)), "%s: message '%s' lacks '%s'", #status,                  \
                  fa2_last_error(), (text));                                                                 \
    } while (0)

Test(fa2_api, refuses_bad_arguments_and_names_them) {
    void *q = FAKE(1), *k = FAKE(2), *v = FAKE(3), *o = FAKE(4);
    float *lse = (float *)FAKE(5);
    EXPECT_REFUSAL(call(NULL, k, v, o, lse, 64, 64, 0.125f, FA2_F16), FA2_EINVAL,
                   "q: must be a device pointer, not NULL");
    EXPECT_REFUSAL(call(q, k, NULL, o, lse, 64, 64, 0.125f, FA2_F16), FA2_EINVAL,
                   "v: must be a device pointer");
    EXPECT_REFUSAL(call(q, k, v, o, lse, 0, 64, 0.125f, FA2_F16), FA2_EINVAL,
                   "N: must be at least 1 (got 0)");
    EXPECT_REFUSAL(call(q, k, v, o, lse, 64, -3, 0.125f, FA2_F16), FA2_EINVAL,
                   "D: must be at least 1 (got -3)");
    EXPECT_REFUSAL(fa2_forward(q, k, v, o, lse, 1, 2, 64, 64, 7, 0.125f, FA2_F16, 0), FA2_EINVAL,
                   "causal: must be 0 or 1 (got 7)");
    EXPECT_REFUSAL(call(q, k, v, o, lse, 64, 64, 0.125f, 7), FA2_EINVAL,
                   "dtype: must be FA2_F16 (0) or FA2_BF16 (1) (got 7)");
    EXPECT_REFUSAL(call(q, k, v, o, lse, 64, 64, NAN, FA2_F16), FA2_EINVAL, "scale: must be finite");
    EXPECT_REFUSAL(call(q, k, v, o, lse, 64, 80, 0.125f, FA2_F16), FA2_EUNSUPPORTED,
                   "D: head dim must be 32, 64, 96, 128 or 256 (got 80)");
    EXPECT_REFUSAL(call(q, k, v, o, lse, (int64_t)1 << 31, 64, 0.125f, FA2_F16), FA2_EUNSUPPORTED,
                   "N: must be at most 2^30 (got 2147483648)");
    EXPECT_REFUSAL(call((char *)q + 8, k, v, o, lse, 64, 64, 0.125f, FA2_F16), FA2_EINVAL,
                   "q: must be 16-byte aligned");
    EXPECT_REFUSAL(call(q, k, v, o, (float *)((char *)lse + 2), 64, 64, 0.125f, FA2_F16), FA2_EINVAL,
                   "lse: must be 4-byte aligned");
    /* a negative dtype is shown as the caller passed it, and the size limits give the values */
    EXPECT_REFUSAL(call(q, k, v, o, lse, 64, 64, 0.125f, (fa2_dtype)-1), FA2_EINVAL,
                   "dtype: must be FA2_F16 (0) or FA2_BF16 (1) (got -1)");
    EXPECT_REFUSAL(
        fa2_forward(q, k, v, o, lse, (int64_t)1 << 40, (int64_t)1 << 40, 64, 64, 0, 0.125f, FA2_F16, 0),
        FA2_EINVAL, "B*H*N*D: overflows 64 bits (got B=1099511627776 H=1099511627776 N=64 D=64)");
    EXPECT_REFUSAL(fa2_forward(q, k, v, o, lse, 65536, 65536, 1, 64, 0, 0.125f, FA2_F16, 0), FA2_EUNSUPPORTED,
                   "B*H: must be at most 65535^2 (grid.y x grid.z) (got 4294967296)");
    /* values past 2^53 exactly, as passed (through a double they read -9.22337204e+18) */
    EXPECT_REFUSAL(call(q, k, v, o, lse, INT64_MIN, 64, 0.125f, FA2_F16), FA2_EINVAL,
                   "N: must be at least 1 (got -9223372036854775808)");
    EXPECT_REFUSAL(call(q, k, v, o, lse, 64, ((int64_t)1 << 60) + 1, 0.125f, FA2_F16), FA2_EUNSUPPORTED,
                   "(got 1152921504606846977)");
}

/* fa2.h promises every |scale| <= FA2_MAX_SCALE and refuses the rest, saying so. */
Test(fa2_api, the_scale_bound_is_the_documented_one) {
    void *q = FAKE(1), *k = FAKE(2), *v = FAKE(3), *o = FAKE(4);
    EXPECT_REFUSAL(call(q, k, v, o, NULL, 64, 64, 3e38f, FA2_F16), FA2_EINVAL,
                   "|scale| <= FA2_MAX_SCALE = 2.3e38 (got 3.00000001e+38)");
    EXPECT_REFUSAL(call(q, k, v, o, NULL, 64, 64, -INFINITY, FA2_F16), FA2_EINVAL, "scale");
    for (int sign = -1; sign <= 1; sign += 2) {
        /* past the argument checks: what stops these fake pointers is the memory check, not the scale */
        fa2_status s = call(q, k, v, o, NULL, 64, 64, (float)sign * FA2_MAX_SCALE, FA2_F16);
        cr_assert(s != FA2_OK && strncmp(fa2_last_error(), "scale", 5) != 0, "scale %g: %s",
                  (double)sign * FA2_MAX_SCALE, fa2_last_error());
    }
}

/* Outputs must not share a byte with an input or the other output; inputs may (q == k is self-attention). */
Test(fa2_api, refuses_outputs_that_overlap) {
    const int64_t N = 64, D = 64, bytes = 2 * N * D * 2; /* B = 1, H = 2 */
    char *base = (char *)FAKE(1);
    void *q = base, *k = base + bytes, *v = base + 2 * bytes, *o = base + 3 * bytes;
    float *lse = (float *)(base + 4 * bytes);
    EXPECT_REFUSAL(call(q, k, v, k, lse, N, D, 0.125f, FA2_F16), FA2_EINVAL,
                   "o and k: an output must not share");
    EXPECT_REFUSAL(call(q, k, v, base + 2 * bytes + 16, lse, N, D, 0.125f, FA2_F16), FA2_EINVAL, "o and v");
    EXPECT_REFUSAL(call(q, k, v, base + bytes - 16, lse, N, D, 0.125f, FA2_F16), FA2_EINVAL, "o and q");
    EXPECT_REFUSAL(call(q, k, v, o, (float *)((char *)o + bytes - 64), N, D, 0.125f, FA2_F16), FA2_EINVAL,
                   "lse and o");
    EXPECT_REFUSAL(call(q, k, v, o, (float *)q, N, D, 0.125f, FA2_F16), FA2_EINVAL, "lse and q");
    /* q == k == v overlap each other only: past the argument checks */
    call(q, q, q, o, lse, N, D, 0.125f, FA2_F16);
    cr_assert(!strstr(fa2_last_error(), "must not share"), "%s", fa2_last_error());
}

/* Two threads refused at the same time keep their own reasons. */
typedef struct {
    pthread_barrier_t *both_called;
    int64_t D;
    float scale;
    char seen[256];
} refusal_job;

static void *refuse_in_thread(void *arg) {
    refusal_job *j = arg;
    call(FAKE(1), FAKE(2), FAKE(3), FAKE(4), NULL, 64, j->D, j->scale, FA2_F16);
    pthread_barrier_wait(j->both_called);
    snprintf(j->seen, sizeof j->seen, "%s", fa2_last_error());
    return NULL;
}

Test(fa2_api, last_error_is_per_thread) {
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    refusal_job jobs[2] = {{&b, 80, 0.125f, ""}, {&b, 64, NAN, ""}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&t[i], NULL, refuse_in_thread, &jobs[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&b);
    cr_assert(strstr(jobs[0].seen, "head dim"), "thread 0 saw '%s'", jobs[0].seen);
    cr_assert(strstr(jobs[1].seen, "scale"), "thread 1 saw '%s'", jobs[1].seen);
}

/* Aligned addresses no one owns, 2^40 bytes apart: room for tensors of N = 2^30 rows */
#define FAR(i) ((void *)((uintptr_t)(i) << 40))

/* The bounds fa2.h states are exact: D 32, 64, 96, 128 and 256, N = 2^30 and B*H = 65535^2 pass their
 * checks (what stops these fake pointers is a later check), one head more is refused; causal is 0 or 1
 * only (-1 too is refused); B*H*N*D of exactly 2^63 bytes overflows. */
Test(fa2_api, size_limits_are_exact) {
    static const int64_t dims[5] = {32, 64, 96, 128, 256};
    for (int d = 0; d < 5; d++) {
        const fa2_status s = call(FAKE(1), FAKE(2), FAKE(3), FAKE(4), NULL, 64, dims[d], 0.125f, FA2_F16);
        cr_assert(s != FA2_EUNSUPPORTED && !strstr(fa2_last_error(), "head dim"), "D=%lld: %s",
                  (long long)dims[d], fa2_last_error());
    }
    fa2_forward(FAR(1), FAR(2), FAR(3), FAR(4), NULL, 1, 1, (int64_t)1 << 30, 64, 0, 0.125f, FA2_F16, 0);
    cr_assert(strncmp(fa2_last_error(), "N:", 2) != 0, "N = 2^30: %s", fa2_last_error());
    const fa2_status s =
        fa2_forward(FAR(1), FAR(2), FAR(3), FAR(4), NULL, 65535, 65535, 1, 64, 0, 0.125f, FA2_F16, 0);
    cr_assert(s != FA2_EUNSUPPORTED && !strstr(fa2_last_error(), "B*H"), "B*H = 65535^2: %s",
              fa2_last_error());
    EXPECT_REFUSAL(
        fa2_forward(FAR(1), FAR(2), FAR(3), FAR(4), NULL, 65535, 65536, 1, 64, 0, 0.125f, FA2_F16, 0),
        FA2_EUNSUPPORTED, "B*H: must be at most 65535^2 (grid.y x grid.z) (got 4294901760)");
    EXPECT_REFUSAL(
        fa2_forward(FAKE(1), FAKE(2), FAKE(3), FAKE(4), NULL, 1, 2, 64, 64, -1, 0.125f, FA2_F16, 0),
        FA2_EINVAL, "causal: must be 0 or 1 (got -1)");
    EXPECT_REFUSAL(fa2_forward(FAKE(1), FAKE(2), FAKE(3), FAKE(4), NULL, 1 << 13, 1 << 13, (int64_t)1 << 30,
                               64, 0, 0.125f, FA2_F16, 0),
                   FA2_EINVAL, "B*H*N*D: overflows 64 bits");
}

/* What the libraries say when the runtime cannot answer about the pointers: "no CUDA device" where it
 * finds no GPU or no driver (its own text then named a driver version and read as the reason: issue 58),
 * else that it cannot ask. */
static const char *no_answer_words(void) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
               ? "no CUDA device (no NVIDIA GPU or driver here, or a driver older than this CUDA runtime): "
               : "cannot ask the CUDA runtime about the pointers (no usable device?): ";
}

/* Past the argument checks, what the pointers are: as for the stage libraries, without a usable GPU that
 * question has no answer, a CUDA-status refusal with the runtime's reason appended (not "q: ..."); with
 * one, these made-up addresses are no device memory. Neither branch skips. */
Test(fa2_api, fake_pointers_are_refused_for_what_they_are) {
    const int gpu = attn_gpu_available() == ATTN_OK;
    const fa2_status s = call(FAKE(1), FAKE(2), FAKE(3), FAKE(4), (float *)FAKE(5), 64, 64, 0.125f, FA2_F16);
    if (gpu) {
        EXPECT_REFUSAL(s, FA2_EINVAL, "q: ");
    } else {
        EXPECT_REFUSAL(s, FA2_ECUDA, no_answer_words());
        cr_assert(strlen(strstr(fa2_last_error(), "): ")) > 3, "no runtime reason: %s", fa2_last_error());
    }
}

/* ---- on the GPU --------------------------------------------------------------------------------------- */

#define SKIP_WITHOUT_GPU()                                                                                   \
    do {                                                                                                     \
        if (attn_gpu_available() != ATTN_OK) cr_skip_test("needs a GPU: %s", attn_last_error());             \
    } while (0)

/* Leaves an error in cudaGetLastError() and returns it, or cudaSuccess when no way tried did (whether a
 * failed call is recorded there is the runtime's business, so the test checks before relying on it). */
static cudaError_t plant_an_error(void) {
    void *huge = NULL;
    cudaError_t e = cudaMalloc(&huge, (size_t)1 << 62);
    if (e != cudaSuccess && cudaPeekAtLastError() == e) return e;
    struct cudaFuncAttributes attr; /* a host function is no kernel: cudaErrorInvalidDeviceFunction */
    e = cudaFuncGetAttributes(&attr, (const void *)plant_an_error);
    if (e != cudaSuccess && cudaPeekAtLastError() == e) return e;
    e = cudaMemcpy(NULL, NULL, 16, (enum cudaMemcpyKind)99); /* no such copy kind */
    if (e != cudaSuccess && cudaPeekAtLastError() == e) return e;
    return cudaSuccess;
}

typedef struct {
    cudaError_t planted, left; /* planted just before the call; what cudaGetLastError() gave just after */
} error_probe;

/* A library with fa2_forward's signature: libfa2 itself, or a stage library (07-09) */
typedef int (*forward_fn)(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B,
                          int64_t H, int64_t N, int64_t D, int causal, float scale, int dtype,
                          cudaStream_t stream);
typedef struct {
    const char *name;
    forward_fn forward;
    const char *(*last_error)(void);
    const char
        *stage; /* the registry's id: a GPU test skips, with the registry's reason, where it cannot run */
} library;

static int fa2_as_library(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B,
                          int64_t H, int64_t N, int64_t D, int causal, float scale, int dtype,
                          cudaStream_t stream) {
    return (int)fa2_forward(q, k, v, o, lse, B, H, N, D, causal, scale, (fa2_dtype)dtype, stream);
}

static const library FA2 = {"fa2", fa2_as_library, fa2_last_error, "06"};
static const library STAGE_LIBS[3] = {
    {"tma_wgmma", tma_wgmma_forward, tma_wgmma_last_error, "07"},
    {"warp_specialized", warp_specialized_forward, warp_specialized_last_error, "08"},
    {"overlap", overlap_forward, overlap_last_error, "09"}};

/* The library's forward with B = 2, H = 3, fp16; with a probe, cudaGetLastError() read right after it */
static int forward_probed(const library *lib, const void *q, const void *k, const void *v, void *o,
                          float *lse, int64_t N, int64_t D, int causal, float scale, error_probe *probe) {
    const int rc = lib->forward(q, k, v, o, lse, 2, 3, N, D, causal, scale, 0, 0);
    if (probe) probe->left = cudaGetLastError();
    return rc;
}

/* fa2_forward on fresh random fp16 inputs (B = 2, H = 3) into a poisoned O; when it returns FA2_OK, O
 * and LSE are checked against the double reference on the first and last heads and 64 random rows.
 * Returns fa2_forward's status, or -1 when the result is wrong; `why` says what went wrong. Asserts
 * nothing, so that threads may call it. */
static int forward_and_check(const library *lib, int64_t N, int64_t D, int causal, uint64_t seed, char *why,
                             size_t cap, error_probe *probe) {
    attn_problem p = attn_problem_make(2, 3, N, D, causal);
    attn_inputs in;
    if (attn_inputs_random(&in, &p, seed, ATTN_INIT_NORMAL) != ATTN_OK) {
        snprintf(why, cap, "no inputs: %s", attn_last_error());
        return -1;
    }
    const size_t bytes = (size_t)attn_qkv_elems(&p) * 2, lse_bytes = (size_t)attn_rows(&p) * 4;
    void *q = NULL, *k = NULL, *v = NULL, *o = NULL;
    float *lse = NULL, *hlse = malloc(lse_bytes);
    uint16_t *ho = malloc(bytes);
    int rc = -1;
    if (cudaMalloc(&q, bytes) || cudaMalloc(&k, bytes) || cudaMalloc(&v, bytes) || cudaMalloc(&o, bytes) ||
        cudaMalloc((void **)&lse, lse_bytes) || !ho || !hlse) {
        snprintf(why, cap, "allocation failed");
    } else if (cudaMemcpy(q, in.q, bytes, cudaMemcpyHostToDevice) ||
               cudaMemcpy(k, in.k, bytes, cudaMemcpyHostToDevice) ||
               cudaMemcpy(v, in.v, bytes, cudaMemcpyHostToDevice) || cudaMemset(o, 0xff, bytes)) {
        snprintf(why, cap, "copy failed");
    } else if (probe && (probe->planted = plant_an_error()) == cudaSuccess) {
        snprintf(why, cap, "could not leave an error in cudaGetLastError() to test with");
    } else if ((rc = forward_probed(lib, q, k, v, o, lse, N, D, causal, p.scale, probe)) != FA2_OK) {
        snprintf(why, cap, "%s_forward: %s: %s", lib->name, fa2_status_string((fa2_status)rc),
                 lib->last_error());
    } else if (cudaDeviceSynchronize() || cudaMemcpy(ho, o, bytes, cudaMemcpyDeviceToHost) ||
               cudaMemcpy(hlse, lse, lse_bytes, cudaMemcpyDeviceToHost)) {
        snprintf(why, cap, "the kernel or the copy back failed");
        rc = -1;
    } else {
        int64_t *rows = NULL, nrows = 0;
        attn_check c = {0};
        if (attn_sample_rows(&p, 1, 64, seed, &rows, &nrows) != ATTN_OK ||
            attn_check_output(&in, ho, hlse, rows, nrows, &c) != ATTN_OK || !c.pass) {
            snprintf(why, cap, "wrong result: worst ratio %g, non-finite %lld", c.worst_ratio,
                     (long long)c.nonfinite);
            rc = -1;
        }
        free(rows);
    }
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(lse);
    free(ho), free(hlse);
    attn_inputs_free(&in);
    return rc;
}

Test(fa2_api, refuses_host_memory) {
    SKIP_WITHOUT_GPU();
    const size_t bytes = 2 * 64 * 64 * 2;
    void *k, *v, *o, *pinned, *managed, *host = aligned_alloc(256, bytes);
    cr_assert(host && !cudaMalloc(&k, bytes) && !cudaMalloc(&v, bytes) && !cudaMalloc(&o, bytes));
    cr_assert(!cudaMallocHost(&pinned, bytes) && !cudaMallocManaged(&managed, bytes, cudaMemAttachGlobal));
    EXPECT_REFUSAL(call(host, k, v, o, NULL, 64, 64, 0.125f, FA2_F16), FA2_EINVAL, "q: host memory");
    EXPECT_REFUSAL(call(k, v, host, o, NULL, 64, 64, 0.125f, FA2_F16), FA2_EINVAL, "v: host memory");
    EXPECT_REFUSAL(call(k, k, v, o, (float *)host, 64, 64, 0.125f, FA2_F16), FA2_EINVAL, "lse: host memory");
    EXPECT_REFUSAL(call(pinned, k, v, o, NULL, 64, 64, 0.125f, FA2_F16), FA2_EINVAL, "q: host memory");
    memset(host, 0, bytes);
    cr_assert_eq(cudaMemcpy(managed, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    cr_assert_eq(cudaMemset(k, 0, bytes) | cudaMemset(v, 0, bytes), cudaSuccess);
    cr_assert_eq(call(managed, k, v, o, NULL, 64, 64, 0.125f, FA2_F16), FA2_OK, "managed q: %s",
                 fa2_last_error());
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(k), cudaFree(v), cudaFree(o), cudaFreeHost(pinned), cudaFree(managed), free(host);
}

/* Issue 15 item 10: an error some earlier call left behind is not fa2_forward's, and stays for its owner. */
Test(fa2_api, an_earlier_error_is_not_reported_as_its_own) {
    SKIP_WITHOUT_GPU();
    /* planted after the test's own allocations and copies and read back right after fa2_forward, so
     * that only fa2_forward's calls lie between the two */
    error_probe probe = {cudaSuccess, cudaSuccess};
    char why[256] = "";
    cr_assert_eq(forward_and_check(&FA2, 300, 64, 1, 51, why, sizeof why, &probe), FA2_OK, "%s", why);
    cr_assert_eq(probe.left, probe.planted,
                 "the earlier error was consumed: cudaGetLastError() gave %s, the planted one was %s",
                 cudaGetErrorName(probe.left), cudaGetErrorName(probe.planted));
}

/* Issue 15 item 9: the shared-memory opt-in (D = 64: 81 KB) is redone after a device reset. */
Test(fa2_api, works_after_cuda_device_reset) {
    SKIP_WITHOUT_GPU();
    char why[256] = "";
    cr_assert_eq(forward_and_check(&FA2, 300, 64, 1, 52, why, sizeof why, NULL), FA2_OK, "%s", why);
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    cr_assert_eq(forward_and_check(&FA2, 300, 64, 1, 53, why, sizeof why, NULL), FA2_OK,
                 "after cudaDeviceReset: %s", why);
    cr_assert_eq(forward_and_check(&FA2, 200, 128, 0, 54, why, sizeof why, NULL), FA2_OK,
                 "after cudaDeviceReset: %s", why);
}

/* Issue 15 item 9: first calls (each configuring its kernel) from 8 threads at once. */
typedef struct {
    int64_t N, D;
    int causal, rc;
    char why[256];
} forward_job;

static void *forward_in_thread(void *arg) {
    forward_job *j = arg;
    j->rc = forward_and_check(&FA2, j->N, j->D, j->causal, 60 + (uint64_t)j->D + (uint64_t)j->causal, j->why,
                              sizeof j->why, NULL);
    return NULL;
}

Test(fa2_api, first_calls_from_many_threads_at_once) {
    SKIP_WITHOUT_GPU();
    forward_job jobs[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        jobs[i] = (forward_job){100 + 37 * i, i % 4 == 3 ? 256 : 32 << (i % 3), i / 4, 0, ""};
        cr_assert_eq(pthread_create(&t[i], NULL, forward_in_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(jobs[i].rc, FA2_OK, "D=%lld causal=%d: %s", (long long)jobs[i].D, jobs[i].causal,
                     jobs[i].why);
}

/* ---- the stage libraries (07-09): fa2_forward's contract ---------------------------------------- */

#define EXPECT_LIB_REFUSAL(lib, call_expr, want, text)                                                       \
    do {                                                                                                     \
        int s_ = (call_expr);                                                                                \
        cr_assert_eq(s_, (want), "%s: %s: got %d (%s)", (lib)->name, #call_expr, s_, (lib)->last_error());   \
        cr_assert(strstr((lib)->last_error(), (text)), "%s: %s: message '%s' lacks '%s'", (lib)->name,       \
                  #call_expr, (lib)->last_error(), (text));                                                  \
    } while (0)

/* The refusals decided before any CUDA call, each naming the argument and the value passed */
Test(stage_lib_api, refuses_bad_arguments_and_names_them) {
    const int64_t N = 64, D = 64, bytes = 2 * N * D * 2; /* B = 1, H = 2 */
    char *base = (char *)FAKE(1);
    void *q = base, *k = base + bytes, *v = base + 2 * bytes, *o = base + 3 * bytes;
    float *lse = (float *)(base + 4 * bytes);
    for (int i = 0; i < 3; i++) {
        const library *L = &STAGE_LIBS[i];
        forward_fn f = L->forward;
        EXPECT_LIB_REFUSAL(L, f(q, k, NULL, o, lse, 1, 2, N, D, 0, 0.125f, 0, 0), 1,
                           "v: must be a device pointer, not NULL");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, NULL, 1, 2, N, D, 0, 0.125f, 0, 0), 1,
                           "lse: must be a device pointer");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 0, N, D, 0, 0.125f, 0, 0), 1,
                           "H: must be at least 1 (got 0)");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 2, -5, D, 0, 0.125f, 0, 0), 1,
                           "N: must be at least 1 (got -5)");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 2, N, D, 7, 0.125f, 0, 0), 1,
                           "causal: must be 0 or 1 (got 7)");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 2, N, D, 0, NAN, 0, 0), 1,
                           "scale: must be finite with |scale| <= 2.3e+38 (got nan)");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 2, N, D, 0, 3e38f, 0, 0), 1, "scale: must be finite");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 2, N, D, 0, 0.125f, 9, 0), 1,
                           "dtype: must be 0 (fp16) or 1 (bf16) (got 9)");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, base + 3 * bytes + 8, lse, 1, 2, N, D, 0, 0.125f, 0, 0), 1,
                           "o: must be 16-byte aligned");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, (float *)((char *)lse + 2), 1, 2, N, D, 0, 0.125f, 0, 0), 1,
                           "lse: must be 4-byte aligned");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, (int64_t)1 << 40, (int64_t)1 << 40, N, D, 0, 0.125f, 0, 0),
                           1, "B*H*N*D: overflows 64 bits");
        /* the stages' own limits, before any CUDA call as in fa2_forward: unsupported (2), not a CUDA error */
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 2, N, 32, 0, 0.125f, 0, 0), 2,
                           "D: head dim must be 64, 128 or 256 (got 32)");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 2, N, 300, 0, 0.125f, 0, 0), 2, "(got 300)");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 1, ((int64_t)1 << 30) + 1, D, 0, 0.125f, 0, 0), 2,
                           "N: must be at most 2^30 (got 1073741825)");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 65536, 65536, 1, D, 0, 0.125f, 0, 0), 2,
                           "B*H: must be at most 2^31 (got 4294967296)");
        /* the head is the copy engine's signed 32-bit coordinate: 2^31 heads pass, one more does not */
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, ((int64_t)1 << 31) + 1, 1, 1, D, 0, 0.125f, 0, 0), 2,
                           "B*H: must be at most 2^31 (got 2147483649)");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, (int64_t)1 << 30, 2, 1, D, 0, 0.125f, 0, 0), 1,
                           "o and q"); /* past the limits, refused by the next check: these tensors overlap */
        EXPECT_LIB_REFUSAL(L, f(q, k, v, q, lse, 1, 2, N, D, 0, 0.125f, 0, 0), 1,
                           "o and q: an output must not share memory");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, base + 2 * bytes + 16, lse, 1, 2, N, D, 1, 0.125f, 0, 0), 1,
                           "o and v");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, (float *)((char *)o + bytes - 64), 1, 2, N, D, 0, 0.125f, 0, 0),
                           1, "lse and o");
        /* q == k == v share memory only with each other: past the argument checks */
        f(q, q, q, o, lse, 1, 2, N, D, 0, 0.125f, 0, 0);
        cr_assert(!strstr(L->last_error(), "must not share"), "%s: %s", L->name, L->last_error());
    }
}

/* Past the argument checks, what the pointers are: without a usable GPU that question has no answer,
 * which is a CUDA-status refusal (3), not "q is not device memory" (1, as before); with one, these made
 * up addresses are no device memory. Neither branch skips. */
Test(stage_lib_api, fake_pointers_are_refused_for_what_they_are) {
    const int gpu = attn_gpu_available() == ATTN_OK;
    for (int i = 0; i < 3; i++) {
        const library *L = &STAGE_LIBS[i];
        const int s =
            L->forward(FAKE(1), FAKE(2), FAKE(3), FAKE(4), (float *)FAKE(5), 1, 2, 64, 64, 0, 0.f, 0, 0);
        if (gpu)
            EXPECT_LIB_REFUSAL(L, s, 1, "q: ");
        else
            EXPECT_LIB_REFUSAL(L, s, 3, no_answer_words());
    }
}

/* The libraries' bounds are exact (stage_lib.h): D 64, 128 and 256 and N = 2^30 pass the limits;
 * |scale| = ATTN_LIB_MAX_SCALE of either sign passes and 3e38 of either sign does not; a negative dtype
 * is refused as passed; B*H*N*D of exactly 2^63 bytes overflows. */
Test(stage_lib_api, bounds_are_exact) {
    void *q = FAKE(1), *k = FAKE(2), *v = FAKE(3), *o = FAKE(4);
    float *lse = (float *)FAKE(5);
    static const int64_t dims[3] = {64, 128, 256};
    for (int i = 0; i < 3; i++) {
        const library *L = &STAGE_LIBS[i];
        forward_fn f = L->forward;
        for (int d = 0; d < 3; d++) {
            const int s = f(q, k, v, o, lse, 1, 2, 64, dims[d], 0, 0.125f, 0, 0);
            cr_assert(s != 2 && !strstr(L->last_error(), "head dim"), "%s D=%lld: %s", L->name,
                      (long long)dims[d], L->last_error());
        }
        f(FAR(1), FAR(2), FAR(3), FAR(4), (float *)FAR(5), 1, 1, (int64_t)1 << 30, 64, 0, 0.125f, 0, 0);
        cr_assert(strncmp(L->last_error(), "N:", 2) != 0, "%s N = 2^30: %s", L->name, L->last_error());
        for (int sign = -1; sign <= 1; sign += 2) {
            f(q, k, v, o, lse, 1, 2, 64, 64, 0, (float)sign * ATTN_LIB_MAX_SCALE, 0, 0);
            cr_assert(strncmp(L->last_error(), "scale", 5) != 0, "%s scale %g: %s", L->name,
                      (double)sign * ATTN_LIB_MAX_SCALE, L->last_error());
            EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 2, 64, 64, 0, (float)sign * 3e38f, 0, 0), 1,
                               "scale: must be finite");
        }
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1, 2, 64, 64, 0, 0.125f, -1, 0), 1,
                           "dtype: must be 0 (fp16) or 1 (bf16) (got -1)");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, 1 << 13, 1 << 13, (int64_t)1 << 30, 64, 0, 0.125f, 0, 0), 1,
                           "B*H*N*D: overflows 64 bits");
    }
}

/* fa2_forward and the libraries ask their limits in one order: the head's shape (D, N), then whether
 * B*H*N*D fits 64 bits, then B*H. So one input that breaks two rules gets the same refusal from each:
 * a head dim no stage has (300) or N = 2^30 + 1 with B*H*N*D past 64 bits is "unsupported" (2), named
 * by D or N; B*H past every limit with the product overflowing is the overflow (1). */
Test(stage_lib_api, limits_are_asked_in_fa2_forwards_order) {
    void *q = FAKE(1), *k = FAKE(2), *v = FAKE(3), *o = FAKE(4);
    float *lse = (float *)FAKE(5);
    const int64_t huge = (int64_t)1 << 40, n_over = ((int64_t)1 << 30) + 1;
    const library *libs[4] = {&FA2, &STAGE_LIBS[0], &STAGE_LIBS[1], &STAGE_LIBS[2]};
    for (int i = 0; i < 4; i++) {
        const library *L = libs[i];
        forward_fn f = L->forward;
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, huge, huge, 64, 300, 0, 0.125f, 0, 0), 2, "D: head dim");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, huge, huge, n_over, 64, 0, 0.125f, 0, 0), 2,
                           "N: must be at most 2^30");
        EXPECT_LIB_REFUSAL(L, f(q, k, v, o, lse, huge, 1 << 20, 1 << 10, 64, 0, 0.125f, 0, 0), 1,
                           "B*H*N*D: overflows 64 bits");
    }
}

/* Outputs may touch inputs end to end (o just before q; lse just after v, or ending where q begins);
 * lse spans B*H*N floats, so one that reaches 4 bytes into q is refused. fa2_forward and the libraries. */
Test(stage_lib_api, outputs_may_touch_inputs) {
    const int64_t N = 64, D = 64, bytes = 2 * N * D * 2, lse_bytes = 2 * N * 4; /* B = 1, H = 2 */
    char *base = (char *)FAKE(1), *q = base + bytes, *k = base + 2 * bytes, *v = base + 3 * bytes;
    const library *libs[4] = {&FA2, &STAGE_LIBS[0], &STAGE_LIBS[1], &STAGE_LIBS[2]};
    for (int i = 0; i < 4; i++) {
        const library *L = libs[i];
        L->forward(q, k, v, base, (float *)(base + 4 * bytes), 1, 2, N, D, 0, 0.125f, 0, 0);
        cr_assert(!strstr(L->last_error(), "must not share"), "%s, o before q: %s", L->name, L->last_error());
        L->forward(q, k, v, base + 4 * bytes, (float *)(q - lse_bytes), 1, 2, N, D, 0, 0.125f, 0, 0);
        cr_assert(!strstr(L->last_error(), "must not share"), "%s, lse before q: %s", L->name,
                  L->last_error());
        EXPECT_LIB_REFUSAL(
            L,
            L->forward(q, k, v, base + 4 * bytes, (float *)(q - lse_bytes + 4), 1, 2, N, D, 0, 0.125f, 0, 0),
            1, "lse and q: an output must not share");
    }
}

/* The status codes by name (fa2.h, stage_lib.h): the same words in every library, "unknown status" past them */
Test(stage_lib_api, status_strings_name_the_codes) {
    static const char *const want[5] = {"ok", "invalid argument", "unsupported", "CUDA error",
                                        "unknown status"};
    const char *(*const lib_string[3])(int) = {tma_wgmma_status_string, warp_specialized_status_string,
                                               overlap_status_string};
    for (int s = 0; s < 5; s++) {
        cr_assert_str_eq(fa2_status_string((fa2_status)s), want[s], "fa2 status %d", s);
        for (int i = 0; i < 3; i++)
            cr_assert_str_eq(lib_string[i](s), want[s], "%s status %d", STAGE_LIBS[i].name, s);
    }
}

/* Skips the test unless every stage library can run here (sm_90), saying why as the registry does */
#define SKIP_UNLESS_STAGE_LIBS_RUN()                                                                         \
    do {                                                                                                     \
        for (int i_ = 0; i_ < 3; i_++) SKIP_UNLESS_RUNNABLE(attn_find_stage(STAGE_LIBS[i_].stage));          \
    } while (0)

Test(stage_lib_api, refuses_host_memory) {
    SKIP_WITHOUT_GPU();
    const size_t bytes = 2 * 64 * 64 * 2;
    void *k, *v, *o, *host = aligned_alloc(256, bytes);
    float *lse;
    cr_assert(host && !cudaMalloc(&k, bytes) && !cudaMalloc(&v, bytes) && !cudaMalloc(&o, bytes) &&
              !cudaMalloc((void **)&lse, 2 * 64 * 4));
    for (int i = 0; i < 3; i++) {
        const library *L = &STAGE_LIBS[i];
        EXPECT_LIB_REFUSAL(L, L->forward(host, k, v, o, lse, 1, 2, 64, 64, 0, 0.125f, 0, 0), 1,
                           "q: host memory");
        EXPECT_LIB_REFUSAL(L, L->forward(k, v, v, o, (float *)host, 1, 2, 64, 64, 0, 0.125f, 0, 0), 1,
                           "lse: host memory");
    }
    cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(lse), free(host);
}

/* On a GPU other than sm_90 the libraries refuse as unsupported (2), naming the device's architecture,
 * and write nothing; ATTN_FAKE_SM makes the H200 answer as an A100 would (device_sm.h). The same call
 * with the H200 answering as itself then runs, so the refusal comes from the device, not the call. */
Test(stage_lib_api, refuses_a_gpu_other_than_sm_90) {
    SKIP_UNLESS_STAGE_LIBS_RUN();
    const int64_t N = 100, D = 64, elems = 2 * N * D; /* B = 1, H = 2 */
    void *qkv, *o;
    float *lse;
    cr_assert(!cudaMalloc(&qkv, (size_t)elems * 2) && !cudaMalloc(&o, (size_t)elems * 2) &&
              !cudaMalloc((void **)&lse, 2 * N * 4) && !cudaMemset(qkv, 0, (size_t)elems * 2));
    uint16_t *ho = malloc((size_t)elems * 2);
    cr_assert(ho);
    for (int i = 0; i < 3; i++) {
        const library *L = &STAGE_LIBS[i];
        cr_assert(!cudaMemset(o, 0xff, (size_t)elems * 2) && !cudaMemset(lse, 0xff, 2 * N * 4));
        setenv("ATTN_FAKE_SM", "80", 1);
        EXPECT_LIB_REFUSAL(L, L->forward(qkv, qkv, qkv, o, lse, 1, 2, N, D, 0, 0.125f, 0, 0), 2,
                           "device: stages 07-09 need an sm_90 GPU (H100, H200)");
        cr_assert(strstr(L->last_error(), "(got sm_80)"), "%s: %s", L->name, L->last_error());
        cr_assert(!cudaDeviceSynchronize() && !cudaMemcpy(ho, o, (size_t)elems * 2, cudaMemcpyDeviceToHost));
        for (int64_t e = 0; e < elems; e++)
            cr_assert_eq(ho[e], 0xffff, "%s wrote O[%lld] though it refused", L->name, (long long)e);
        setenv("ATTN_FAKE_SM", "90", 1);
        cr_assert_eq(L->forward(qkv, qkv, qkv, o, lse, 1, 2, N, D, 0, 0.125f, 0, 0), 0, "%s: %s", L->name,
                     L->last_error());
        cr_assert(!cudaDeviceSynchronize());
    }
    unsetenv("ATTN_FAKE_SM");
    cudaFree(qkv), cudaFree(o), cudaFree(lse), free(ho);
}

/* Results against the double reference at odd N, causal and not, every supported head dim; the first
 * call of each with an error planted in cudaGetLastError(), which must come back unreported and kept. */
Test(stage_lib_api, results_are_right_and_an_earlier_error_is_kept) {
    SKIP_UNLESS_STAGE_LIBS_RUN();
    static const int64_t dims[3] = {64, 128, 256};
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 3; d++)
            for (int causal = 0; causal <= 1; causal++) {
                error_probe probe = {cudaSuccess, cudaSuccess};
                char why[256] = "";
                const int first = d == 0 && causal == 0;
                const int64_t N = 173 + 64 * d + causal;
                cr_assert_eq(forward_and_check(&STAGE_LIBS[i], N, dims[d], causal,
                                               70 + 6 * (uint64_t)i + 2 * d + causal, why, sizeof why,
                                               first ? &probe : NULL),
                             0, "%s D=%lld causal=%d: %s", STAGE_LIBS[i].name, (long long)dims[d], causal,
                             why);
                if (first)
                    cr_assert_eq(probe.left, probe.planted,
                                 "%s consumed the earlier error: %s left, %s planted", STAGE_LIBS[i].name,
                                 cudaGetErrorName(probe.left), cudaGetErrorName(probe.planted));
            }
}

/* scale = 0 is uniform attention in every library (fa2.h, stage_lib.h): each row of O is the mean of
 * the V rows it sees (all N, or 0..i when causal) and its LSE is the log of their count. */
static void check_uniform_attention(const library *lib, int64_t N, int64_t D, int causal) {
    const attn_problem p = attn_problem_make(2, 3, N, D, causal);
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 90 + (uint64_t)N, ATTN_INIT_NORMAL), ATTN_OK, "%s",
                 attn_last_error());
    const size_t bytes = (size_t)attn_qkv_elems(&p) * 2, rows = (size_t)attn_rows(&p);
    const uint16_t *hv = in.v;
    uint16_t *ho = malloc(bytes);
    float *hlse = malloc(rows * 4);
    cr_assert(ho && hlse);
    void *q, *v, *o;
    float *lse;
    cr_assert(!cudaMalloc(&q, bytes) && !cudaMalloc(&v, bytes) && !cudaMalloc(&o, bytes) &&
              !cudaMalloc((void **)&lse, rows * 4));
    cr_assert(!cudaMemcpy(v, hv, bytes, cudaMemcpyHostToDevice) &&
              !cudaMemcpy(q, in.q, bytes, cudaMemcpyHostToDevice) && !cudaMemset(o, 0xff, bytes) &&
              !cudaMemset(lse, 0xff, rows * 4));
    const int rc = lib->forward(q, q, v, o, lse, 2, 3, N, D, causal, 0.f, 0, 0);
    cr_assert_eq(rc, 0, "%s scale 0: %s", lib->name, lib->last_error());
    cr_assert(!cudaDeviceSynchronize() && !cudaMemcpy(ho, o, bytes, cudaMemcpyDeviceToHost) &&
              !cudaMemcpy(hlse, lse, rows * 4, cudaMemcpyDeviceToHost));
    for (size_t r = 0; r < rows; r++) {
        const size_t head = r / (size_t)N, i = r % (size_t)N, seen = causal ? i + 1 : (size_t)N;
        const double want_lse = log((double)seen);
        cr_assert(fabs(hlse[r] - want_lse) <= 1e-4 * (1 + want_lse),
                  "%s N=%lld causal=%d row %zu: LSE %g, want %g", lib->name, (long long)N, causal, r,
                  (double)hlse[r], want_lse);
        for (int64_t c = 0; c < D; c++) {
            double mean = 0;
            for (size_t j = 0; j < seen; j++)
                mean += attn_h2f(hv[(head * (size_t)N + j) * (size_t)D + (size_t)c]);
            mean /= (double)seen;
            const double got = attn_h2f(ho[r * (size_t)D + (size_t)c]);
            cr_assert(fabs(got - mean) <= 2e-3 + 1e-3 * fabs(mean),
                      "%s N=%lld causal=%d row %zu col %lld: %g, want %g", lib->name, (long long)N, causal, r,
                      (long long)c, got, mean);
        }
    }
    cudaFree(q), cudaFree(v), cudaFree(o), cudaFree(lse), free(ho), free(hlse);
    attn_inputs_free(&in);
}

Test(stage_lib_api, scale_zero_is_uniform_attention) {
    SKIP_WITHOUT_GPU();
    for (int causal = 0; causal <= 1; causal++) check_uniform_attention(&FA2, 131, 64, causal);
    SKIP_UNLESS_STAGE_LIBS_RUN();
    for (int i = 0; i < 3; i++)
        for (int causal = 0; causal <= 1; causal++) check_uniform_attention(&STAGE_LIBS[i], 131, 64, causal);
}

#else
Test(fa2_api, needs_the_cuda_build) {
    cr_skip_test("libfa2 is built only with CUDA (nvcc was not found, or NO_CUDA=1 was given)");
}
Test(stage_lib_api, needs_the_cuda_build) {
    cr_skip_test("the stage libraries are built only with CUDA (nvcc was not found, or NO_CUDA=1 was given)");
}
#endif
