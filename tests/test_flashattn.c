/*
 * test_flashattn.c: the contract of the public library (lib/flashattn.h), called as a user calls it.
 *
 * In every build, no GPU needed: each refusal of the argument check (the one check of the forward and
 * the backward), named and with the value passed; outputs overlapping inputs refused, inputs
 * overlapping each other and outputs touching inputs end to end taken; the scale bound that the header
 * states is the one enforced; attn_last_error() per thread; what valid arguments reach (a build
 * without CUDA: "no GPU stage"; a CUDA build without a GPU: "no CUDA device").
 * In a CUDA build, still no GPU needed: every named stage's own limits and what it does not take yet
 * (H_kv, N_k, cu_seqlens, strides), in the words the issue asks for; the stage a call without a name
 * gets on each GPU (ATTN_FAKE_SM: sm_90 09, sm_80 06, sm_75 refused); the library's stages agree with
 * the registry's head dims and GPUs.
 * With a GPU: host memory refused; an earlier error is neither reported nor consumed; the library
 * works after cudaDeviceReset() and from 8 threads at once; every stage's results and the default
 * stage's against the double reference, the backward's gradients too (13d bit for bit twice); a
 * Hopper stage on another GPU refuses and writes nothing; scale 0 is uniform attention. Criterion runs
 * each test in its own process (the ATTN_FAKE_SM settings stay there).
 */
#include <math.h>
#include <pthread.h>

#include "test_util.h"

#include "13_backward_fa2/backward_fa2.h"
#include "flashattn.h"

#ifdef ATTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "half.h"
#endif

/* Distinct, aligned addresses no one owns: enough for refusals decided before any CUDA call. */
#define FAKE(i) ((void *)(uintptr_t)(0x10000000u * (i)))
/* The same, 2^40 bytes apart: room for tensors of N = 2^30 rows. */
#define FAR(i) ((void *)((uintptr_t)(i) << 40))

/* Arguments that pass every check but the pointers' memory: B x H x N x D at FAKE addresses. */
static attn_forward_args fwd_args(int64_t B, int64_t H, int64_t N, int64_t D) {
    attn_forward_args a;
    memset(&a, 0, sizeof a);
    a.p = attn_problem_make(B, H, N, D, 0);
    a.q.data = FAKE(1), a.k.data = FAKE(2), a.v.data = FAKE(3), a.o.data = FAKE(4);
    a.lse = (float *)FAKE(5);
    return a;
}

static attn_backward_args bwd_args(int64_t B, int64_t H, int64_t N, int64_t D) {
    attn_backward_args a;
    memset(&a, 0, sizeof a);
    a.p = attn_problem_make(B, H, N, D, 0);
    a.q.data = FAKE(1), a.k.data = FAKE(2), a.v.data = FAKE(3), a.o.data = FAKE(4);
    a.lse = (const float *)FAKE(5);
    a.d_o.data = FAKE(6), a.dq.data = FAKE(7), a.dk.data = FAKE(8), a.dv.data = FAKE(9);
    a.workspace = FAKE(10), a.workspace_bytes = (size_t)1 << 26;
    return a;
}

#define EXPECT_REFUSAL(call, want, text)                                                                     \
    do {                                                                                                     \
        const attn_status s_ = (call);                                                                       \
        cr_assert_eq(s_, (want), "%s: got %s (%s)", #call, attn_status_name(s_), attn_last_error());         \
        cr_assert(strstr(attn_last_error(), (text)), "%s: message '%s' lacks '%s'", #call,                   \
                  attn_last_error(), (text));                                                                \
    } while (0)

/* Past the argument check: whatever stops the call, it is not the words `text` begins. */
#define EXPECT_PAST(call, text)                                                                              \
    do {                                                                                                     \
        (void)(call);                                                                                        \
        cr_assert(strncmp(attn_last_error(), (text), strlen(text)) != 0, "%s: %s", #call,                    \
                  attn_last_error());                                                                        \
    } while (0)

Test(flashattn, refuses_bad_arguments_and_names_them) {
    attn_forward_args a = fwd_args(1, 2, 64, 64);
#define WITH(field, value) (a = fwd_args(1, 2, 64, 64), a.field = (value), attn_forward(&a, NULL, NULL))
    EXPECT_REFUSAL(WITH(q.data, NULL), ATTN_EINVAL, "q: must be a device pointer, not NULL");
    EXPECT_REFUSAL(WITH(v.data, NULL), ATTN_EINVAL, "v: must be a device pointer, not NULL");
    EXPECT_REFUSAL(WITH(p.N, 0), ATTN_EINVAL, "N: must be at least 1 (got 0)");
    EXPECT_REFUSAL(WITH(p.D, -3), ATTN_EINVAL, "D: must be at least 1 (got -3)");
    EXPECT_REFUSAL(WITH(p.H_kv, 0), ATTN_EINVAL, "H_kv: must be at least 1 (got 0)");
    EXPECT_REFUSAL(WITH(p.N_k, -1), ATTN_EINVAL, "N_k: must be at least 1 (got -1)");
    EXPECT_REFUSAL(WITH(p.causal, 7), ATTN_EINVAL, "causal: must be 0 or 1 (got 7)");
    EXPECT_REFUSAL(WITH(p.causal, -1), ATTN_EINVAL, "causal: must be 0 or 1 (got -1)");
    EXPECT_REFUSAL(WITH(p.dtype, (attn_dtype)7), ATTN_EINVAL,
                   "dtype: must be ATTN_F16 (0) or ATTN_BF16 (1) (got 7)");
    EXPECT_REFUSAL(WITH(p.dtype, (attn_dtype)-1), ATTN_EINVAL,
                   "dtype: must be ATTN_F16 (0) or ATTN_BF16 (1) (got -1)");
    EXPECT_REFUSAL(WITH(p.scale, NAN), ATTN_EINVAL, "scale: must be finite");
    EXPECT_REFUSAL(WITH(p.D, 300), ATTN_EUNSUPPORTED,
                   "D: must be at most 256, the largest head dim of any stage (got 300)");
    EXPECT_REFUSAL(WITH(p.H_kv, 3), ATTN_EINVAL,
                   "H_kv: must divide H, each K/V head serving H / H_kv query heads (got 3 of 2)");
    EXPECT_REFUSAL(WITH(p.cu_seqlens_q, (const int32_t *)FAKE(6)), ATTN_EINVAL,
                   "cu_seqlens_k: must be given with cu_seqlens_q");
    EXPECT_REFUSAL(WITH(k.stride_n, -64), ATTN_EINVAL, "k.stride_n: must be at least 0 (got -64)");
    EXPECT_REFUSAL(WITH(q.data, (char *)FAKE(1) + 8), ATTN_EINVAL, "q: must be 16-byte aligned");
    EXPECT_REFUSAL(WITH(lse, (float *)((char *)FAKE(5) + 2)), ATTN_EINVAL, "lse: must be 4-byte aligned");
    /* sizes past 2^53 exactly as passed (through a double they read -9.22337204e+18) */
    EXPECT_REFUSAL(WITH(p.N, INT64_MIN), ATTN_EINVAL, "N: must be at least 1 (got -9223372036854775808)");
    a = fwd_args((int64_t)1 << 40, (int64_t)1 << 40, 64, 64);
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL,
                   "B*H*N*D: overflows 64 bits (got B=1099511627776 H=1099511627776 N=64 D=64)");
    a = fwd_args(2, 2, 64, 64);
    a.k.stride_b = INT64_MAX / 2, a.k.stride_h = 4096, a.k.stride_n = 64;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "k: its strides reach past 2^63 bytes");
    /* B*H*N*D = 2^63 bytes exactly overflows */
    a = fwd_args(1 << 13, 1 << 13, (int64_t)1 << 30, 64);
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "B*H*N*D: overflows 64 bits");
#undef WITH
}

/* The header promises every |scale| <= ATTN_MAX_SCALE and refuses the rest, saying so. */
Test(flashattn, the_scale_bound_is_the_documented_one) {
    attn_forward_args a = fwd_args(1, 2, 64, 64);
    a.p.scale = 3e38f;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL,
                   "scale: must be finite with |scale| <= ATTN_MAX_SCALE = 2.3e38 (got 3.00000001e+38)");
    a.p.scale = -INFINITY;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "scale");
    for (int sign = -1; sign <= 1; sign += 2) {
        a.p.scale = (float)sign * ATTN_MAX_SCALE;
        EXPECT_PAST(attn_forward(&a, NULL, NULL), "scale");
    }
    a.p.scale = 0.f; /* uniform attention */
    EXPECT_PAST(attn_forward(&a, NULL, NULL), "scale");
}

/* Outputs must not share a byte with an input or the other output; inputs may (q == k is
 * self-attention), and an output may touch an input end to end. */
Test(flashattn, refuses_outputs_that_overlap) {
    const int64_t N = 64, D = 64, bytes = 2 * N * D * 2, lse_bytes = 2 * N * 4; /* B = 1, H = 2 */
    char *base = (char *)FAKE(1);
    attn_forward_args a = fwd_args(1, 2, N, D);
    a.o.data = a.k.data;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "o and k: an output must not share memory");
    a = fwd_args(1, 2, N, D);
    a.o.data = (char *)a.v.data + 16;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "o and v");
    a.o.data = (char *)a.q.data - bytes + 16;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "o and q");
    a = fwd_args(1, 2, N, D);
    a.lse = (float *)((char *)a.o.data + bytes - 64);
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "lse and o");
    a.lse = (float *)a.q.data;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "lse and q");
    a.lse = (float *)((char *)a.q.data - lse_bytes + 4); /* its last float is q's first */
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "lse and q");
    /* touching is not sharing: o ending where q begins, then lse ending there */
    a = fwd_args(1, 2, N, D);
    a.o.data = base - bytes;
    EXPECT_PAST(attn_forward(&a, NULL, NULL), "o and");
    a = fwd_args(1, 2, N, D);
    a.lse = (float *)(base - lse_bytes);
    EXPECT_PAST(attn_forward(&a, NULL, NULL), "lse and");
    /* q == k == v share memory only with each other */
    a = fwd_args(1, 2, N, D);
    a.k.data = a.v.data = a.q.data;
    attn_forward(&a, NULL, NULL);
    cr_assert(!strstr(attn_last_error(), "must not share"), "%s", attn_last_error());
    /* a strided tensor spans from its first element to its last (a conservative test): o and q as the two
     * halves of one [B, N, 2H, D] share no byte, yet their spans meet */
    a = fwd_args(1, 2, N, D);
    a.o.data = base + 3 * bytes, a.o.stride_b = N * 4 * D, a.o.stride_h = D, a.o.stride_n = 4 * D;
    a.q.data = base + 3 * bytes + 2 * D * 2, a.q.stride_b = N * 4 * D, a.q.stride_h = D, a.q.stride_n = 4 * D;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "o and q");
    /* the kernel reads cu_seqlens while it writes O and LSE: no output may share their bytes; with them the
     * packed total is on the device, so O is judged on its first row of every head, the LSE on its first
     * float, and an O right after a Q of fewer rows than B * N is taken */
    a = fwd_args(3, 2, N, D);
    a.q.stride_h = a.k.stride_h = a.v.stride_h = a.o.stride_h = D; /* [total, H, D] */
    a.q.stride_n = a.k.stride_n = a.v.stride_n = a.o.stride_n = 2 * D;
    a.p.cu_seqlens_q = (const int32_t *)((char *)a.o.data + 2 * D * 2 - 8),
    a.p.cu_seqlens_k = a.p.cu_seqlens_q;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "o and cu_seqlens_q: an output must not share");
    a.p.cu_seqlens_q = a.p.cu_seqlens_k = (const int32_t *)FAKE(6);
    a.o.data = (char *)a.q.data + 2 * D * 2 * N; /* right after N rows of Q: fewer than B * N = 3N */
    EXPECT_PAST(attn_forward(&a, NULL, NULL), "o and");
}

/* The backward's ten pointers go through the same check, in the same words. */
Test(flashattn, the_backward_is_checked_alike) {
    attn_backward_args a = bwd_args(1, 2, 64, 64);
#define WITH(field, value) (a = bwd_args(1, 2, 64, 64), a.field = (value), attn_backward(&a, NULL, NULL))
    EXPECT_REFUSAL(WITH(dq.data, NULL), ATTN_EINVAL, "dq: must be a device pointer, not NULL");
    EXPECT_REFUSAL(WITH(lse, NULL), ATTN_EINVAL, "lse: must be a device pointer, not NULL");
    EXPECT_REFUSAL(WITH(workspace, NULL), ATTN_EINVAL, "workspace: must be a device pointer, not NULL");
    EXPECT_REFUSAL(WITH(deterministic, 2), ATTN_EINVAL, "deterministic: must be 0 or 1 (got 2)");
    EXPECT_REFUSAL(WITH(deterministic, -1), ATTN_EINVAL, "deterministic: must be 0 or 1 (got -1)");
    EXPECT_REFUSAL(WITH(p.causal, 3), ATTN_EINVAL, "causal: must be 0 or 1 (got 3)");
    EXPECT_REFUSAL(WITH(d_o.data, (char *)FAKE(6) + 4), ATTN_EINVAL, "d_o: must be 16-byte aligned");
    EXPECT_REFUSAL(WITH(workspace, (char *)FAKE(10) + 8), ATTN_EINVAL, "workspace: must be 16-byte aligned");
    EXPECT_REFUSAL(WITH(dq.data, FAKE(1)), ATTN_EINVAL, "dq and q: an output must not share memory");
    EXPECT_REFUSAL(WITH(dv.data, FAKE(8)), ATTN_EINVAL, "dv and dk");
    EXPECT_REFUSAL(WITH(workspace, (char *)FAKE(6) + 64), ATTN_EINVAL, "workspace and d_o");
    /* the inputs may share memory: o == q is only read by the backward */
    EXPECT_PAST(WITH(o.data, FAKE(1)), "o and");
#undef WITH
}

Test(flashattn, null_arguments_and_queries) {
    EXPECT_REFUSAL(attn_forward(NULL, NULL, NULL), ATTN_EINVAL, "a: must point to the arguments, not NULL");
    EXPECT_REFUSAL(attn_backward(NULL, NULL, NULL), ATTN_EINVAL, "a: must point to the arguments");
    attn_forward_args a = fwd_args(1, 2, 64, 64);
    EXPECT_REFUSAL(attn_forward_stage(&a, NULL, NULL), ATTN_EINVAL, "id: must not be NULL");
    attn_backward_args b = bwd_args(1, 2, 64, 64);
    EXPECT_REFUSAL(attn_backward_workspace_bytes(&b, "13", NULL), ATTN_EINVAL, "bytes: must not be NULL");
    /* the queries look at no pointer: NULL pointers pass, a bad size does not */
    memset(&a, 0, sizeof a);
    a.p = attn_problem_make(1, 2, 64, 64, 1);
    const char *id = NULL;
    EXPECT_PAST(attn_forward_stage(&a, NULL, &id), "q:");
    a.p.B = 0;
    EXPECT_REFUSAL(attn_forward_stage(&a, NULL, &id), ATTN_EINVAL, "B: must be at least 1 (got 0)");
}

/* Two threads refused at the same time keep their own reasons. */
typedef struct {
    pthread_barrier_t *both_called;
    int64_t N;
    float scale;
    char seen[256];
} refusal_job;

static void *refuse_in_thread(void *arg) {
    refusal_job *j = arg;
    attn_forward_args a = fwd_args(1, 2, j->N, 64);
    a.p.scale = j->scale;
    attn_forward(&a, NULL, NULL);
    pthread_barrier_wait(j->both_called);
    snprintf(j->seen, sizeof j->seen, "%s", attn_last_error());
    return NULL;
}

Test(flashattn, last_error_is_per_thread) {
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    refusal_job jobs[2] = {{&b, 0, 0.125f, ""}, {&b, 64, NAN, ""}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&t[i], NULL, refuse_in_thread, &jobs[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&b);
    cr_assert(strstr(jobs[0].seen, "N: must be at least 1"), "thread 0 saw '%s'", jobs[0].seen);
    cr_assert(strstr(jobs[1].seen, "scale"), "thread 1 saw '%s'", jobs[1].seen);
}

Test(flashattn, status_names) {
    static const char *const want[8] = {"ok",     "invalid argument", "unsupported", "out of memory",
                                        "no GPU", "CUDA error",       "I/O error",   "unknown status"};
    for (int s = 0; s < 8; s++) cr_assert_str_eq(attn_status_name((attn_status)s), want[s], "status %d", s);
}

/* Valid arguments at made-up addresses get past the argument check to what this build and machine
 * have: no GPU stage (no CUDA), no device (no GPU, the library's words first), or with a GPU the
 * question what the pointers are. Neither branch skips. */
Test(flashattn, valid_arguments_reach_the_device) {
    attn_forward_args a = fwd_args(1, 2, 64, 64);
    const attn_status s = attn_forward(&a, NULL, NULL);
    if (!attn_built_with_cuda()) {
        EXPECT_REFUSAL(s, ATTN_ENODEV, "this library has no GPU stage: " ATTN_NO_CUDA_WHY);
        return;
    }
    char why[512];
    snprintf(why, sizeof why, "%s", attn_last_error());
    if (attn_gpu_available() == ATTN_OK) {
        cr_assert(s == ATTN_EINVAL && !strncmp(why, "q: ", 3), "%s: %s", attn_status_name(s), why);
    } else {
        cr_assert(s == ATTN_ENODEV && strstr(why, "no CUDA device (no NVIDIA GPU or driver here"), "%s: %s",
                  attn_status_name(s), why);
        cr_assert(strlen(strstr(why, "): ")) > 3, "no runtime reason: %s", why);
    }
}

#ifdef ATTN_HAVE_CUDA

/* ---- a CUDA build, no GPU needed: the stages ------------------------------------------------------ */

/* A named stage's own limits and what it does not take yet, refused before any CUDA call. */
Test(flashattn, a_named_stage_refuses_what_it_does_not_take) {
    attn_forward_args a = fwd_args(1, 32, 1024, 64);
#define WITH(stage, field, value)                                                                            \
    (a = fwd_args(1, 32, 1024, 64), a.field = (value), attn_forward(&a, stage, NULL))
    EXPECT_REFUSAL(WITH("09", p.H_kv, 8), ATTN_EUNSUPPORTED,
                   "H_kv: stage 09 takes H_kv == H only (got 8 of 32)");
    EXPECT_PAST(WITH("06", p.H_kv, 1), "H_kv:"); /* stage 06 takes grouped-query heads, N_k != N, ... */
    EXPECT_PAST(WITH("06", p.N_k, 16384), "N_k:");
    EXPECT_REFUSAL(WITH("09", p.N_k, 16384), ATTN_EUNSUPPORTED,
                   "N_k: stage 09 takes N_k == N only (got 16384 of 1024)");
    a = fwd_args(1, 32, 1024, 64);
    a.p.cu_seqlens_q = (const int32_t *)FAKE(6), a.p.cu_seqlens_k = (const int32_t *)FAKE(7);
    EXPECT_REFUSAL(attn_forward(&a, "07", NULL), ATTN_EUNSUPPORTED,
                   "cu_seqlens_q: stage 07 takes no variable-length");
    /* [B, N, H, D]: a transpose away from the contiguous layout */
    a = fwd_args(2, 32, 1024, 64);
    a.q.stride_b = 1024 * 32 * 64, a.q.stride_h = 64, a.q.stride_n = 32 * 64;
    EXPECT_REFUSAL(
        attn_forward(&a, "09", NULL), ATTN_EUNSUPPORTED,
        "q: stage 09 takes contiguous [B, H, N, D] tensors only (got stride_b 2097152, stride_h 64, "
        "stride_n 2048)");
    EXPECT_PAST(attn_forward(&a, "06", NULL), "q"); /* ... and strides */
    /* stage 06's own rules for strides: 16-byte rows, row strides below 2^31, and with cu_seqlens the
     * strides given (the packed head stride needs the total, which is on the device) */
    a.q.stride_h = 68;
    EXPECT_REFUSAL(attn_forward(&a, "06", NULL), ATTN_EUNSUPPORTED,
                   "q.stride_h: stage 06 moves rows 16 bytes at a time: strides must be multiples of 8 "
                   "elements (got 68)");
    a = fwd_args(1, 32, 1024, 64);
    a.o.stride_b = 3, a.o.stride_h = 1024 * 64, a.o.stride_n = 64; /* B = 1: stride_b is never used */
    EXPECT_PAST(attn_forward(&a, "06", NULL), "o");
    a = fwd_args(1, 32, 2, 64); /* two rows 2^31 elements apart: 8 GiB, at addresses 2^40 apart */
    a.q.data = FAR(1), a.k.data = FAR(2), a.v.data = FAR(3), a.o.data = FAR(4), a.lse = (float *)FAR(5);
    a.v.stride_h = 64, a.v.stride_n = (int64_t)1 << 31;
    EXPECT_REFUSAL(attn_forward(&a, "06", NULL), ATTN_EUNSUPPORTED,
                   "v.stride_n: stage 06 takes row strides up to 2^31 - 1 elements (got 2147483648)");
    a = fwd_args(4, 32, 1024, 64);
    a.p.cu_seqlens_q = (const int32_t *)FAKE(6), a.p.cu_seqlens_k = (const int32_t *)FAKE(7);
    EXPECT_REFUSAL(attn_forward(&a, "06", NULL), ATTN_EUNSUPPORTED,
                   "q: with cu_seqlens stage 06 needs the packed tensor's strides");
    a.q.stride_h = a.k.stride_h = a.v.stride_h = a.o.stride_h = 64; /* [total, H, D] */
    a.q.stride_n = a.k.stride_n = a.v.stride_n = a.o.stride_n = 32 * 64;
    EXPECT_PAST(attn_forward(&a, "06", NULL), "q");
    /* the contiguous strides spelled out are contiguous, and a size-1 dim's stride does not matter */
    a = fwd_args(1, 32, 1024, 64);
    a.k.stride_b = 12345, a.k.stride_h = 1024 * 64, a.k.stride_n = 64;
    EXPECT_PAST(attn_forward(&a, "09", NULL), "k:");
    EXPECT_REFUSAL(WITH("09", lse, NULL), ATTN_EUNSUPPORTED,
                   "lse: stage 09 always writes the LSE: must not be NULL");
    EXPECT_REFUSAL(WITH("07", p.D, 32), ATTN_EUNSUPPORTED, "D: head dim must be 64, 128 or 256 (got 32)");
    EXPECT_REFUSAL(WITH("06", p.D, 72), ATTN_EUNSUPPORTED,
                   "D: stage 06 takes head dims 32, 64, 80, 96, 128, 192, 256 (got 72)");
    a = fwd_args(1, 1, (int64_t)1 << 30, 64);
    a.q.data = FAR(1), a.k.data = FAR(2), a.v.data = FAR(3), a.o.data = FAR(4), a.lse = (float *)FAR(5);
    EXPECT_PAST(attn_forward(&a, "06", NULL), "N:");
    a.p.N = a.p.N_k = ((int64_t)1 << 30) + 1;
    EXPECT_REFUSAL(attn_forward(&a, "06", NULL), ATTN_EUNSUPPORTED,
                   "N: stage 06 takes at most 2^30 rows (got 1073741825)");
    EXPECT_REFUSAL(attn_forward(&a, "08", NULL), ATTN_EUNSUPPORTED,
                   "N: must be at most 2^30 (got 1073741825)");
    a = fwd_args(65536, 65536, 1, 64);
    a.q.data = FAR(1), a.k.data = FAR(2), a.v.data = FAR(3), a.o.data = FAR(4), a.lse = (float *)FAR(5);
    EXPECT_REFUSAL(attn_forward(&a, "06", NULL), ATTN_EUNSUPPORTED,
                   "B*H: stage 06 takes at most 65535^2 heads (grid.y x grid.z) (got 4294967296)");
    EXPECT_REFUSAL(attn_forward(&a, "09", NULL), ATTN_EUNSUPPORTED,
                   "B*H: must be at most 2^31 (got 4294967296)");
    a.p.B = 65535, a.p.H = a.p.H_kv = 65535;
    EXPECT_PAST(attn_forward(&a, "06", NULL), "B*H");
    EXPECT_REFUSAL(WITH("05", p.D, 64), ATTN_EINVAL,
                   "stage: must be NULL (the fastest this GPU runs) or one of 09, 08, 07, 06 (got \"05\")");
    EXPECT_REFUSAL(WITH("13", p.D, 64), ATTN_EINVAL, "stage: must be NULL");
#undef WITH
}

Test(flashattn, the_backward_stage_and_its_workspace) {
    attn_backward_args a = bwd_args(2, 3, 100, 64);
    size_t bytes = 0;
    cr_assert_eq(attn_backward_workspace_bytes(&a, "13", &bytes), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(bytes, stage13_workspace_bytes(&a.p)); /* asks no CUDA call with a named stage */
    a.workspace_bytes = bytes - 1;
    EXPECT_REFUSAL(attn_backward(&a, "13d", NULL), ATTN_EINVAL, "workspace_bytes: stage 13d needs at least");
    a.workspace_bytes = bytes, a.deterministic = 1;
    EXPECT_REFUSAL(attn_backward(&a, "13", NULL), ATTN_EUNSUPPORTED,
                   "deterministic: stage 13 sums dQ by atomic adds, whose order changes from run to run");
    a = bwd_args(1, 2, 64, 256);
    EXPECT_REFUSAL(attn_backward_workspace_bytes(&a, "13", &bytes), ATTN_EUNSUPPORTED,
                   "D: the backward (stage 13) takes head dims 32, 64, 96, 128 (got 256)");
    a = bwd_args(1, 8, 64, 64);
    a.p.H_kv = 2;
    EXPECT_REFUSAL(attn_backward(&a, "13", NULL), ATTN_EUNSUPPORTED,
                   "H_kv: stage 13 takes H_kv == H only (got 2 of 8)");
    EXPECT_REFUSAL(attn_backward(&a, "09", NULL), ATTN_EINVAL,
                   "stage: must be NULL (the fastest this GPU runs) or one of 14, 13, 13d, 14d");
    /* stage 14's own limits, asked before any CUDA call */
    a = bwd_args(1, 2, 64, 96);
    EXPECT_REFUSAL(attn_backward_workspace_bytes(&a, "14", &bytes), ATTN_EUNSUPPORTED,
                   "D: the backward (stage 14) takes head dims 64, 128 (got 96)");
    a = bwd_args(1, 2, 64, 64);
    cr_assert_eq(attn_backward_workspace_bytes(&a, "14d", &bytes), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(bytes, stage13_workspace_bytes(&a.p), "one workspace layout for 13 and 14");
    a.deterministic = 1;
    EXPECT_REFUSAL(attn_backward(&a, "14", NULL), ATTN_EUNSUPPORTED,
                   "deterministic: stage 14 sums dQ by atomic adds, whose order changes from run to run "
                   "(13d and 14d are deterministic)");
}

/* The stage a call without a name gets, GPU by GPU (ATTN_FAKE_SM answers for the device, no GPU
 * needed): 09 on sm_90 where it takes the problem, else 06; the backward 14 on sm_90 where it takes
 * the problem, else 13; 13d when deterministic (14d, slower, by name only). */
static const char *forward_stage_on(const char *sm, int64_t D, int with_lse) {
    setenv("ATTN_FAKE_SM", sm, 1);
    attn_forward_args a = fwd_args(2, 4, 100, D);
    if (!with_lse) a.lse = NULL;
    const char *id = NULL;
    return attn_forward_stage(&a, NULL, &id) == ATTN_OK ? id : NULL;
}

Test(flashattn, the_choice_follows_the_gpu) {
    cr_assert_str_eq(forward_stage_on("90", 64, 1), "09");
    cr_assert_str_eq(forward_stage_on("90", 256, 1), "09");
    cr_assert_str_eq(forward_stage_on("90", 96, 1), "06", "09 lacks D = 96");
    cr_assert_str_eq(forward_stage_on("90", 80, 1), "06", "09 lacks D = 80");
    cr_assert_str_eq(forward_stage_on("90", 192, 1), "06", "09 lacks D = 192");
    cr_assert_str_eq(forward_stage_on("90", 64, 0), "06", "09 always writes the LSE");
    cr_assert_str_eq(forward_stage_on("80", 64, 1), "06");
    cr_assert_str_eq(forward_stage_on("120", 128, 1), "06", "sm_90a code runs on sm_90 alone");
    cr_assert_null(forward_stage_on("75", 64, 1));
    cr_assert(strstr(attn_last_error(), "device: stages 06 and 13 need an sm_80 or newer GPU") &&
                  strstr(attn_last_error(), "(got sm_75)"),
              "%s", attn_last_error());
    /* grouped-query heads, N_k != N, strides: 09 takes none yet, 06 all of them */
    setenv("ATTN_FAKE_SM", "90", 1);
    attn_forward_args g = fwd_args(2, 32, 1024, 128);
    const char *gid = NULL;
    g.p.H_kv = 8;
    cr_assert_eq(attn_forward_stage(&g, NULL, &gid), ATTN_OK, "%s", attn_last_error());
    cr_assert_str_eq(gid, "06", "09 takes H_kv == H only");
    g = fwd_args(2, 32, 1024, 128);
    g.p.N_k = 16384;
    cr_assert_eq(attn_forward_stage(&g, NULL, &gid), ATTN_OK, "%s", attn_last_error());
    cr_assert_str_eq(gid, "06", "09 takes N_k == N only");
    g = fwd_args(2, 32, 1024, 128);
    g.q.stride_b = 1024 * 32 * 128, g.q.stride_h = 128, g.q.stride_n = 32 * 128;
    cr_assert_eq(attn_forward_stage(&g, NULL, &gid), ATTN_OK, "%s", attn_last_error());
    cr_assert_str_eq(gid, "06", "09 takes contiguous tensors only");
    /* no stage takes it: the last one tried says why */
    cr_assert_null(forward_stage_on("90", 72, 1));
    cr_assert(strstr(attn_last_error(), "D: stage 06 takes head dims"), "%s", attn_last_error());
    setenv("ATTN_FAKE_SM", "90", 1);
    attn_backward_args b = bwd_args(2, 4, 100, 64);
    const char *id = NULL;
    cr_assert_eq(attn_backward_stage(&b, NULL, &id), ATTN_OK, "%s", attn_last_error());
    cr_assert_str_eq(id, "14");
    b.p.D = 96;
    cr_assert_eq(attn_backward_stage(&b, NULL, &id), ATTN_OK, "%s", attn_last_error());
    cr_assert_str_eq(id, "13", "14 lacks D = 96");
    b.p.D = 128;
    setenv("ATTN_FAKE_SM", "80", 1);
    cr_assert_eq(attn_backward_stage(&b, NULL, &id), ATTN_OK, "%s", attn_last_error());
    cr_assert_str_eq(id, "13", "sm_90a code runs on sm_90 alone");
    setenv("ATTN_FAKE_SM", "90", 1);
    b.p.D = 256; /* no backward takes it: the broadest one, 13, says why */
    cr_assert_neq(attn_backward_stage(&b, NULL, &id), ATTN_OK);
    cr_assert(strstr(attn_last_error(), "D: the backward (stage 13) takes head dims"), "%s",
              attn_last_error());
    b.p.D = 64;
    b.deterministic = 1;
    cr_assert_eq(attn_backward_stage(&b, NULL, &id), ATTN_OK, "%s", attn_last_error());
    cr_assert_str_eq(id, "13d", "14d is slower than 13d: by name only");
    b.p.D = 256;
    cr_assert_neq(attn_backward_stage(&b, NULL, &id), ATTN_OK);
    cr_assert(strstr(attn_last_error(), "D: the backward (stage 13) takes head dims"), "%s",
              attn_last_error());
    b.p.D = 64;
    size_t bytes = 0;
    cr_assert_eq(attn_backward_workspace_bytes(&b, NULL, &bytes), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(bytes, stage13_workspace_bytes(&b.p));
}

/* The library's stages take the head dims and GPUs the registry says they do: every registered stage
 * the library knows by name, at every D from 1 to 256 and on GPUs from sm_70 to sm_120. The library
 * must know 06 and 09 (the forward it picks) and 13, 13d, 14 and 14d (its backward). */
Test(flashattn, the_stages_agree_with_the_registry) {
    static const char *const sms[] = {"70", "75", "80", "86", "89", "90", "100", "120"};
    int known = 0;
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        if (!s->on_gpu || s->max_gpus != 1) continue;
        const int forward = s->pass == ATTN_FORWARD;
        attn_forward_args a = fwd_args(1, 2, 64, 64);
        attn_backward_args b = bwd_args(1, 2, 64, 64);
        b.deterministic = s->pass == ATTN_BACKWARD;
        const char *id = NULL;
        setenv("ATTN_FAKE_SM", "90", 1);
        if ((forward ? attn_forward_stage(&a, s->id, &id) : attn_backward_stage(&b, s->id, &id)) != ATTN_OK &&
            strstr(attn_last_error(), "stage: must be NULL"))
            continue; /* not one of the library's */
        known += !strcmp(s->id, "06") + !strcmp(s->id, "09") + !strcmp(s->id, "13") + !strcmp(s->id, "13d") +
                 !strcmp(s->id, "14") + !strcmp(s->id, "14d");
        for (int64_t D = 1; D <= ATTN_MAX_D; D++) {
            a.p.D = b.p.D = D;
            const int takes = (forward ? attn_forward_stage(&a, s->id, &id)
                                       : attn_backward_stage(&b, s->id, &id)) == ATTN_OK;
            cr_assert_eq(takes, s->supports_dim(D) != 0,
                         "stage %s D=%lld: the library %s, the registry %s (%s)", s->id, (long long)D,
                         takes ? "takes it" : "does not", s->supports_dim(D) ? "does" : "does not",
                         attn_last_error());
        }
        a.p.D = b.p.D = 64;
        for (size_t k = 0; k < sizeof sms / sizeof sms[0]; k++) {
            setenv("ATTN_FAKE_SM", sms[k], 1);
            const int sm = atoi(sms[k]);
            const int runs = (forward ? attn_forward_stage(&a, s->id, &id)
                                      : attn_backward_stage(&b, s->id, &id)) == ATTN_OK;
            const int registry = sm >= s->min_sm && (s->max_sm == 0 || sm <= s->max_sm);
            cr_assert_eq(runs, registry, "stage %s on sm_%d: the library %s, the registry %s (%s)", s->id, sm,
                         runs ? "runs it" : "does not", registry ? "does" : "does not", attn_last_error());
        }
    }
    cr_assert_eq(known, 6, "the library lacks 06, 09, 13, 13d, 14 or 14d");
}

/* ---- on the GPU ----------------------------------------------------------------------------------- */

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

/* Device copies of random inputs (B = 2, H = 3) and a poisoned O and LSE. */
typedef struct {
    attn_problem p;
    attn_inputs in;
    void *q, *k, *v, *o, *d_o, *dq, *dk, *dv, *ws;
    float *lse;
    size_t bytes, lse_bytes, ws_bytes;
} device_case;

static int case_free(device_case *c) {
    cudaFree(c->q), cudaFree(c->k), cudaFree(c->v), cudaFree(c->o), cudaFree(c->lse);
    cudaFree(c->d_o), cudaFree(c->dq), cudaFree(c->dk), cudaFree(c->dv), cudaFree(c->ws);
    attn_inputs_free(&c->in);
    return -1;
}

/* 0, or -1 with `why` (the inputs, or dO and the gradients' buffers too when backward) */
static int case_make(device_case *c, int64_t N, int64_t D, int causal, attn_dtype dtype, uint64_t seed,
                     int backward, char *why, size_t cap) {
    memset(c, 0, sizeof *c);
    c->p = attn_problem_make(2, 3, N, D, causal);
    c->p.dtype = dtype;
    if (attn_inputs_random(&c->in, &c->p, seed, ATTN_INIT_NORMAL) != ATTN_OK ||
        (backward && attn_inputs_random_grad(&c->in, seed ^ 0xd0) != ATTN_OK)) {
        snprintf(why, cap, "no inputs: %s", attn_last_error());
        return -1;
    }
    c->bytes = (size_t)attn_qkv_elems(&c->p) * 2, c->lse_bytes = (size_t)attn_rows(&c->p) * 4;
    c->ws_bytes = backward ? stage13_workspace_bytes(&c->p) : 0;
    if (cudaMalloc(&c->q, c->bytes) || cudaMalloc(&c->k, c->bytes) || cudaMalloc(&c->v, c->bytes) ||
        cudaMalloc(&c->o, c->bytes) || cudaMalloc((void **)&c->lse, c->lse_bytes) ||
        (backward &&
         (cudaMalloc(&c->d_o, c->bytes) || cudaMalloc(&c->dq, c->bytes) || cudaMalloc(&c->dk, c->bytes) ||
          cudaMalloc(&c->dv, c->bytes) || cudaMalloc(&c->ws, c->ws_bytes)))) {
        snprintf(why, cap, "allocation failed");
        return case_free(c);
    }
    if (cudaMemcpy(c->q, c->in.q, c->bytes, cudaMemcpyHostToDevice) ||
        cudaMemcpy(c->k, c->in.k, c->bytes, cudaMemcpyHostToDevice) ||
        cudaMemcpy(c->v, c->in.v, c->bytes, cudaMemcpyHostToDevice) || cudaMemset(c->o, 0xff, c->bytes) ||
        cudaMemset(c->lse, 0xff, c->lse_bytes) ||
        (backward && (cudaMemcpy(c->d_o, c->in.d_o, c->bytes, cudaMemcpyHostToDevice) ||
                      cudaMemset(c->dq, 0xff, c->bytes) || cudaMemset(c->dk, 0xff, c->bytes) ||
                      cudaMemset(c->dv, 0xff, c->bytes)))) {
        snprintf(why, cap, "copy failed");
        return case_free(c);
    }
    return 0;
}

static attn_forward_args case_forward(const device_case *c) {
    attn_forward_args a;
    memset(&a, 0, sizeof a);
    a.p = c->p;
    a.q.data = c->q, a.k.data = c->k, a.v.data = c->v, a.o.data = c->o, a.lse = c->lse;
    return a;
}

/* attn_forward on fresh random inputs (B = 2, H = 3) into a poisoned O; when it returns ATTN_OK, O and
 * LSE are checked against the double reference on the first and last heads and 64 random rows.
 * Returns its status, or -1 when the result is wrong; `why` says what went wrong. Asserts nothing, so
 * that threads may call it. */
static int forward_and_check(const char *stage, int64_t N, int64_t D, int causal, uint64_t seed, char *why,
                             size_t cap, error_probe *probe) {
    device_case c;
    if (case_make(&c, N, D, causal, ATTN_F16, seed, 0, why, cap)) return -1;
    uint16_t *ho = malloc(c.bytes);
    float *hlse = malloc(c.lse_bytes);
    const attn_forward_args a = case_forward(&c);
    int rc = -1;
    if (!ho || !hlse) {
        snprintf(why, cap, "host allocation failed");
    } else if (probe && (probe->planted = plant_an_error()) == cudaSuccess) {
        snprintf(why, cap, "could not leave an error in cudaGetLastError() to test with");
    } else if ((rc = attn_forward(&a, stage, NULL)), probe && ((probe->left = cudaGetLastError()), 0)) {
        /* never: cudaGetLastError() read right after the call, whatever it returned */
    } else if (rc != ATTN_OK) {
        snprintf(why, cap, "attn_forward(stage %s): %s: %s", stage ? stage : "NULL",
                 attn_status_name((attn_status)rc), attn_last_error());
    } else if (cudaDeviceSynchronize() || cudaMemcpy(ho, c.o, c.bytes, cudaMemcpyDeviceToHost) ||
               cudaMemcpy(hlse, c.lse, c.lse_bytes, cudaMemcpyDeviceToHost)) {
        snprintf(why, cap, "the kernel or the copy back failed");
        rc = -1;
    } else {
        int64_t *rows = NULL, nrows = 0;
        attn_check k = {0};
        if (attn_sample_rows(&c.p, 1, 64, seed, &rows, &nrows) != ATTN_OK ||
            attn_check_output(&c.in, ho, hlse, rows, nrows, &k) != ATTN_OK || !k.pass) {
            snprintf(why, cap, "wrong result: worst ratio %g, non-finite %lld", k.worst_ratio,
                     (long long)k.nonfinite);
            rc = -1;
        }
        free(rows);
    }
    free(ho), free(hlse);
    case_free(&c);
    return rc;
}

/* Skips unless registered stage `id` runs here, saying why as the registry does. */
#define SKIP_UNLESS_STAGE(id) SKIP_UNLESS_RUNNABLE(attn_find_stage(id))

Test(flashattn, refuses_host_memory) {
    SKIP_WITHOUT_GPU();
    const size_t bytes = 2 * 64 * 64 * 2;
    void *k, *v, *o, *pinned, *managed, *host = aligned_alloc(256, bytes);
    float *lse;
    cr_assert(host && !cudaMalloc(&k, bytes) && !cudaMalloc(&v, bytes) && !cudaMalloc(&o, bytes) &&
              !cudaMalloc((void **)&lse, 2 * 64 * 4));
    cr_assert(!cudaMallocHost(&pinned, bytes) && !cudaMallocManaged(&managed, bytes, cudaMemAttachGlobal));
    attn_forward_args a;
    memset(&a, 0, sizeof a);
    a.p = attn_problem_make(1, 2, 64, 64, 0);
    a.k.data = k, a.v.data = v, a.o.data = o, a.lse = lse;
    a.q.data = host;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "q: host memory");
    a.q.data = pinned;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "q: host memory");
    a.q.data = k, a.lse = (float *)host;
    EXPECT_REFUSAL(attn_forward(&a, NULL, NULL), ATTN_EINVAL, "lse: host memory");
    memset(host, 0, bytes);
    cr_assert_eq(cudaMemcpy(managed, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    cr_assert_eq(cudaMemset(k, 0, bytes) | cudaMemset(v, 0, bytes), cudaSuccess);
    a.q.data = managed, a.lse = lse;
    cr_assert_eq(attn_forward(&a, NULL, NULL), ATTN_OK, "managed q: %s", attn_last_error());
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(lse), cudaFreeHost(pinned), cudaFree(managed), free(host);
}

/* An error some earlier call left behind is not the library's, and stays for its owner (issue 15),
 * whichever stage runs. */
Test(flashattn, an_earlier_error_is_not_reported_as_its_own) {
    SKIP_WITHOUT_GPU();
    static const char *const stages[2] = {"06", NULL};
    for (int i = 0; i < 2; i++) {
        error_probe probe = {cudaSuccess, cudaSuccess};
        char why[256] = "";
        cr_assert_eq(forward_and_check(stages[i], 300, 64, 1, 51, why, sizeof why, &probe), ATTN_OK, "%s",
                     why);
        cr_assert_eq(
            probe.left, probe.planted,
            "stage %s consumed the earlier error: cudaGetLastError() gave %s, the planted one was %s",
            stages[i] ? stages[i] : "NULL", cudaGetErrorName(probe.left), cudaGetErrorName(probe.planted));
    }
}

/* The shared-memory opt-in (D = 64: 81 KB) is redone after a device reset (issue 15). */
Test(flashattn, works_after_cuda_device_reset) {
    SKIP_WITHOUT_GPU();
    char why[256] = "";
    cr_assert_eq(forward_and_check("06", 300, 64, 1, 52, why, sizeof why, NULL), ATTN_OK, "%s", why);
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    cr_assert_eq(forward_and_check("06", 300, 64, 1, 53, why, sizeof why, NULL), ATTN_OK,
                 "after the reset: %s", why);
    cr_assert_eq(forward_and_check(NULL, 200, 128, 0, 54, why, sizeof why, NULL), ATTN_OK,
                 "after the reset: %s", why);
}

/* First calls (each configuring its kernel) from 8 threads at once (issue 15). */
typedef struct {
    int64_t N, D;
    int causal, rc;
    char why[256];
} forward_job;

static void *forward_in_thread(void *arg) {
    forward_job *j = arg;
    j->rc = forward_and_check("06", j->N, j->D, j->causal, 60 + (uint64_t)j->D + (uint64_t)j->causal, j->why,
                              sizeof j->why, NULL);
    return NULL;
}

Test(flashattn, first_calls_from_many_threads_at_once) {
    SKIP_WITHOUT_GPU();
    forward_job jobs[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        jobs[i] = (forward_job){100 + 37 * i, i % 4 == 3 ? 256 : 32 << (i % 3), i / 4, 0, ""};
        cr_assert_eq(pthread_create(&t[i], NULL, forward_in_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(jobs[i].rc, ATTN_OK, "D=%lld causal=%d: %s", (long long)jobs[i].D, jobs[i].causal,
                     jobs[i].why);
}

/* Every stage of the library by name, and the default, against the double reference at odd N, causal
 * and not, at every head dim the stage takes. */
Test(flashattn, every_stage_is_right) {
    SKIP_WITHOUT_GPU();
    static const char *const stages[5] = {"06", "07", "08", "09", NULL};
    static const int64_t dims[7] = {32, 64, 80, 96, 128, 192, 256};
    for (int i = 0; i < 5; i++) {
        const attn_stage *s = stages[i] ? attn_find_stage(stages[i]) : NULL;
        if (s && attn_stage_available(s) != ATTN_OK) continue; /* 07-09 on another GPU than sm_90 */
        for (int d = 0; d < 7; d++)
            for (int causal = 0; causal <= 1; causal++) {
                if (s && !s->supports_dim(dims[d])) continue;
                char why[256] = "";
                cr_assert_eq(forward_and_check(stages[i], 173 + 64 * d + causal, dims[d], causal,
                                               70 + 10 * (uint64_t)i + 2 * d + causal, why, sizeof why, NULL),
                             0, "stage %s D=%lld causal=%d: %s", stages[i] ? stages[i] : "NULL",
                             (long long)dims[d], causal, why);
            }
    }
}

/* The default is the fastest stage the registry can run here: 09 where it runs, else 06. */
Test(flashattn, the_default_is_the_fastest_stage_here) {
    SKIP_WITHOUT_GPU();
    attn_forward_args a = fwd_args(4, 32, 4096, 128);
    const char *id = NULL;
    cr_assert_eq(attn_forward_stage(&a, NULL, &id), ATTN_OK, "%s", attn_last_error());
    const int hopper = attn_stage_available(attn_find_stage("09")) == ATTN_OK;
    cr_assert_str_eq(id, hopper ? "09" : "06");
}

/* On a GPU other than sm_90 a Hopper stage refuses as unsupported, naming the device's architecture,
 * and writes nothing; ATTN_FAKE_SM makes the H200 answer as an A100 would (device_sm.h). The same call
 * with the H200 answering as itself then runs, so the refusal comes from the device, not the call. */
Test(flashattn, a_hopper_stage_refuses_another_gpu) {
    SKIP_UNLESS_STAGE("09");
    device_case c;
    char why[256] = "";
    cr_assert_eq(case_make(&c, 100, 64, 0, ATTN_F16, 80, 0, why, sizeof why), 0, "%s", why);
    uint16_t *ho = malloc(c.bytes);
    cr_assert(ho);
    const attn_forward_args a = case_forward(&c);
    static const char *const stages[3] = {"07", "08", "09"};
    for (int i = 0; i < 3; i++) {
        setenv("ATTN_FAKE_SM", "80", 1);
        EXPECT_REFUSAL(attn_forward(&a, stages[i], NULL), ATTN_EUNSUPPORTED,
                       "device: stages 07-09 need an sm_90 GPU (H100, H200)");
        cr_assert(strstr(attn_last_error(), "(got sm_80)"), "%s: %s", stages[i], attn_last_error());
        cr_assert(!cudaDeviceSynchronize() && !cudaMemcpy(ho, c.o, c.bytes, cudaMemcpyDeviceToHost));
        for (size_t e = 0; e < c.bytes / 2; e++)
            cr_assert_eq(ho[e], 0xffff, "stage %s wrote O[%zu] though it refused", stages[i], e);
        setenv("ATTN_FAKE_SM", "90", 1);
        cr_assert_eq(attn_forward(&a, stages[i], NULL), ATTN_OK, "%s: %s", stages[i], attn_last_error());
        cr_assert(!cudaDeviceSynchronize() && !cudaMemset(c.o, 0xff, c.bytes));
    }
    unsetenv("ATTN_FAKE_SM");
    free(ho);
    case_free(&c);
}

/* scale = 0 is uniform attention in every stage: each row of O is the mean of the V rows it sees (all
 * N, or 0..i when causal) and its LSE is the log of their count. */
static void check_uniform_attention(const char *stage, int64_t N, int64_t D, int causal) {
    device_case c;
    char why[256] = "";
    cr_assert_eq(case_make(&c, N, D, causal, ATTN_F16, 90 + (uint64_t)N, 0, why, sizeof why), 0, "%s", why);
    const size_t rows = (size_t)attn_rows(&c.p);
    const uint16_t *hv = c.in.v;
    uint16_t *ho = malloc(c.bytes);
    float *hlse = malloc(rows * 4);
    cr_assert(ho && hlse);
    attn_forward_args a = case_forward(&c);
    a.p.scale = 0.f;
    a.k.data = a.q.data;
    cr_assert_eq(attn_forward(&a, stage, NULL), ATTN_OK, "stage %s scale 0: %s", stage, attn_last_error());
    cr_assert(!cudaDeviceSynchronize() && !cudaMemcpy(ho, c.o, c.bytes, cudaMemcpyDeviceToHost) &&
              !cudaMemcpy(hlse, c.lse, rows * 4, cudaMemcpyDeviceToHost));
    for (size_t r = 0; r < rows; r++) {
        const size_t head = r / (size_t)N, i = r % (size_t)N, seen = causal ? i + 1 : (size_t)N;
        const double want_lse = log((double)seen);
        cr_assert(fabs(hlse[r] - want_lse) <= 1e-4 * (1 + want_lse),
                  "stage %s N=%lld causal=%d row %zu: LSE %g, want %g", stage, (long long)N, causal, r,
                  (double)hlse[r], want_lse);
        for (int64_t col = 0; col < D; col++) {
            double mean = 0;
            for (size_t j = 0; j < seen; j++)
                mean += attn_h2f(hv[(head * (size_t)N + j) * (size_t)D + (size_t)col]);
            mean /= (double)seen;
            const double got = attn_h2f(ho[r * (size_t)D + (size_t)col]);
            cr_assert(fabs(got - mean) <= 2e-3 + 1e-3 * fabs(mean),
                      "stage %s N=%lld causal=%d row %zu col %lld: %g, want %g", stage, (long long)N, causal,
                      r, (long long)col, got, mean);
        }
    }
    free(ho), free(hlse);
    case_free(&c);
}

Test(flashattn, scale_zero_is_uniform_attention) {
    SKIP_WITHOUT_GPU();
    static const char *const stages[4] = {"06", "07", "08", "09"};
    for (int i = 0; i < 4; i++) {
        if (attn_stage_available(attn_find_stage(stages[i])) != ATTN_OK) continue;
        for (int causal = 0; causal <= 1; causal++) check_uniform_attention(stages[i], 131, 64, causal);
    }
}

/* The backward through the library, after its forward: dQ, dK and dV against the double reference (the
 * gradients' check of suite/check_backward.c), both stages, fp16 and bf16, causal and not; 13d bit for
 * bit the same twice. */
Test(flashattn, the_backward_is_right) {
    SKIP_WITHOUT_GPU();
    static const char *const stages[2] = {"13", "13d"};
    for (int i = 0; i < 2; i++)
        for (int t = 0; t <= 1; t++)
            for (int causal = 0; causal <= 1; causal++) {
                device_case c;
                char why[256] = "";
                const uint64_t seed = 300 + 4 * (uint64_t)i + 2 * (uint64_t)t + (uint64_t)causal;
                cr_assert_eq(case_make(&c, 129, 64, causal, (attn_dtype)t, seed, 1, why, sizeof why), 0, "%s",
                             why);
                const attn_forward_args f = case_forward(&c);
                cr_assert_eq(attn_forward(&f, NULL, NULL), ATTN_OK, "%s", attn_last_error());
                attn_backward_args b;
                memset(&b, 0, sizeof b);
                b.p = c.p;
                b.q.data = c.q, b.k.data = c.k, b.v.data = c.v, b.o.data = c.o, b.lse = c.lse,
                b.d_o.data = c.d_o;
                b.dq.data = c.dq, b.dk.data = c.dk, b.dv.data = c.dv, b.workspace = c.ws,
                b.workspace_bytes = c.ws_bytes;
                b.deterministic = i;
                const size_t n = c.bytes / 2;
                uint16_t *h = malloc(5 * c.bytes);
                float *hlse = malloc(c.lse_bytes);
                cr_assert(h && hlse);
                for (int run = 0; run < 2; run++) {
                    cr_assert_eq(attn_backward(&b, stages[i], NULL), ATTN_OK, "%s", attn_last_error());
                    cr_assert(!cudaDeviceSynchronize());
                    uint16_t *dst = run ? h + 4 * n : h;
                    cr_assert(!cudaMemcpy(dst, c.dq, c.bytes, cudaMemcpyDeviceToHost));
                    if (run == 0)
                        cr_assert(!cudaMemcpy(h + n, c.dk, c.bytes, cudaMemcpyDeviceToHost) &&
                                  !cudaMemcpy(h + 2 * n, c.dv, c.bytes, cudaMemcpyDeviceToHost) &&
                                  !cudaMemcpy(h + 3 * n, c.o, c.bytes, cudaMemcpyDeviceToHost) &&
                                  !cudaMemcpy(hlse, c.lse, c.lse_bytes, cudaMemcpyDeviceToHost));
                }
                attn_grad_check k;
                cr_assert_eq(attn_check_grads(&c.in, h + 3 * n, hlse, h, h + n, h + 2 * n, seed, &k), ATTN_OK,
                             "%s", attn_last_error());
                cr_assert(k.pass, "stage %s %s causal=%d: dQ %g, dK %g, dV %g of their tolerance", stages[i],
                          attn_dtype_name((attn_dtype)t), causal, k.t[0].worst_ratio, k.t[1].worst_ratio,
                          k.t[2].worst_ratio);
                if (i == 1) cr_assert(!memcmp(h, h + 4 * n, c.bytes), "13d's dQ differs between two runs");
                free(h), free(hlse);
                case_free(&c);
            }
}

/* ---- the shapes models hold (issue 56), through the library on the GPU ---------------------------- */

/* The library's call as a model makes it: Q and O [B, N, H, D] (PyTorch's layout), K and V slices of one
 * packed [B, N_k, 2, H_kv, D] tensor (K at slot 0, V at slot 1, so their rows lie 2 H_kv D apart),
 * H_kv < H, N_k != N, causal at the bottom right, and no stage named: 09 takes none of it, so 06 runs.
 * O and LSE against the double reference, every row, after O is read back into [B, H, N, D]. With
 * cu_seqlens the same tensors are packed [total, heads, D] and the batch is the lengths' (cu != NULL).
 * Returns 0, or -1 with why. */
static int strided_gqa_call(int64_t B, int64_t H, int64_t H_kv, int64_t N, int64_t N_k, int64_t D, int causal,
                            attn_dtype dtype, const int32_t *cu_q, const int32_t *cu_k, uint64_t seed,
                            char *why, size_t cap) {
    attn_problem p = attn_problem_make(B, H, N, D, causal);
    p.H_kv = H_kv, p.N_k = N_k, p.dtype = dtype;
    p.cu_seqlens_q = cu_q,
    p.cu_seqlens_k = cu_k; /* host copies: the suite's inputs and reference read them */
    attn_inputs in;
    if (attn_inputs_random(&in, &p, seed, ATTN_INIT_NORMAL) != ATTN_OK) {
        snprintf(why, cap, "no inputs: %s", attn_last_error());
        return -1;
    }
    const int packed = cu_q != NULL;
    const int64_t outer = packed ? 1 : B, rq = packed ? cu_q[B] : N, rk = packed ? cu_k[B] : N_k;
    const size_t q_elems = (size_t)(outer * rq * H * D), kv_elems = (size_t)(outer * rk * H_kv * D);
    const size_t lse_bytes = (size_t)attn_rows(&p) * 4;
    uint16_t *hq = malloc(q_elems * 2), *hkv = malloc(2 * kv_elems * 2), *ho = malloc(q_elems * 2);
    uint16_t *o_bhnd = malloc(q_elems * 2);
    float *hlse = malloc(lse_bytes);
    void *dq = NULL, *dkv = NULL, *dout = NULL, *dlse = NULL, *dcu = NULL;
    int rc = -1;
    if (!hq || !hkv || !ho || !o_bhnd || !hlse) {
        snprintf(why, cap, "host allocation failed");
        goto done;
    }
    attn_transpose_heads(hq, in.q, outer, H, rq, D); /* [B, H, N, D] -> [B, N, H, D] */
    for (int64_t b = 0; b < outer; b++)              /* K and V -> [B, N_k, 2, H_kv, D] */
        for (int64_t h = 0; h < H_kv; h++)
            for (int64_t j = 0; j < rk; j++)
                for (int t = 0; t < 2; t++)
                    memcpy(hkv + (((b * rk + j) * 2 + t) * H_kv + h) * D,
                           (t ? in.v : in.k) + ((b * H_kv + h) * rk + j) * D, (size_t)D * 2);
    if (cudaMalloc(&dq, q_elems * 2) || cudaMalloc(&dkv, 2 * kv_elems * 2) ||
        cudaMalloc(&dout, q_elems * 2) || cudaMalloc(&dlse, lse_bytes) ||
        cudaMalloc(&dcu, 2 * (size_t)(B + 1) * 4) ||
        cudaMemcpy(dq, hq, q_elems * 2, cudaMemcpyHostToDevice) ||
        cudaMemcpy(dkv, hkv, 2 * kv_elems * 2, cudaMemcpyHostToDevice) ||
        cudaMemset(dout, 0xff, q_elems * 2) || cudaMemset(dlse, 0xff, lse_bytes) ||
        (packed && (cudaMemcpy(dcu, cu_q, (size_t)(B + 1) * 4, cudaMemcpyHostToDevice) ||
                    cudaMemcpy((int32_t *)dcu + B + 1, cu_k, (size_t)(B + 1) * 4, cudaMemcpyHostToDevice)))) {
        snprintf(why, cap, "device allocation or copy failed");
        goto done;
    }
    attn_forward_args a;
    memset(&a, 0, sizeof a);
    a.p = p;
    if (packed) a.p.cu_seqlens_q = dcu, a.p.cu_seqlens_k = (int32_t *)dcu + B + 1;
    a.q = (attn_tensor){dq, packed ? 0 : N * H * D, D, H * D};
    a.o = (attn_tensor){dout, packed ? 0 : N * H * D, D, H * D};
    a.k = (attn_tensor){dkv, packed ? 0 : N_k * 2 * H_kv * D, D, 2 * H_kv * D};
    a.v = (attn_tensor){(uint16_t *)dkv + H_kv * D, packed ? 0 : N_k * 2 * H_kv * D, D, 2 * H_kv * D};
    a.lse = dlse;
    const char *id = NULL;
    if (attn_forward_stage(&a, NULL, &id) != ATTN_OK || strcmp(id, "06")) {
        snprintf(why, cap, "the library chose %s, not 06: %s", id ? id : "none", attn_last_error());
        goto done;
    }
    if (attn_forward(&a, NULL, NULL) != ATTN_OK) {
        snprintf(why, cap, "attn_forward: %s", attn_last_error());
        goto done;
    }
    if (cudaDeviceSynchronize() || cudaMemcpy(ho, dout, q_elems * 2, cudaMemcpyDeviceToHost) ||
        cudaMemcpy(hlse, dlse, lse_bytes, cudaMemcpyDeviceToHost)) {
        snprintf(why, cap, "the kernel or the copy back failed");
        goto done;
    }
    attn_transpose_heads(o_bhnd, ho, outer, rq, H, D);
    int64_t *rows = NULL, nrows = 0;
    attn_check k;
    memset(&k, 0, sizeof k);
    if (attn_sample_rows(&p, 1, 0, seed, &rows, &nrows) != ATTN_OK ||
        attn_check_output(&in, o_bhnd, hlse, rows, nrows, &k) != ATTN_OK || !k.pass || k.nonfinite ||
        k.rows_checked != attn_rows(&p))
        snprintf(why, cap, "wrong result: err/tol %g, LSE %g, %lld non-finite, %lld of %lld rows checked",
                 k.worst_ratio, k.lse_worst_ratio, (long long)k.nonfinite, (long long)k.rows_checked,
                 (long long)attn_rows(&p));
    else
        rc = 0;
    free(rows);
done:
    cudaFree(dq), cudaFree(dkv), cudaFree(dout), cudaFree(dlse), cudaFree(dcu);
    free(hq), free(hkv), free(ho), free(o_bhnd), free(hlse);
    attn_inputs_free(&in);
    return rc;
}

/* A strided GQA call is right, causal (rows that see no key when N > N_k) and not, fp16 and bf16, at
 * D = 64 and 128; and the same packed by cu_seqlens. A kernel that ignored the strides (read Q as
 * [B, H, N, D]), the K/V head map (h for h / (H / H_kv)), N_k, the bottom-right offset or the sequences
 * fails the check; one that left the empty rows unwritten fails on their poison (NaN). */
Test(flashattn, a_strided_gqa_call_is_right) {
    SKIP_WITHOUT_GPU();
    char why[256] = "";
    for (int causal = 0; causal <= 1; causal++)
        for (int t = 0; t <= 1; t++) {
            cr_assert_eq(strided_gqa_call(2, 6, 2, 77, 300, 64, causal, (attn_dtype)t, NULL, NULL, 400 + t,
                                          why, sizeof why),
                         0, "H 6, H_kv 2, N 77, N_k 300, D 64, causal %d, %s: %s", causal,
                         attn_dtype_name((attn_dtype)t), why);
            cr_assert_eq(strided_gqa_call(1, 8, 1, 300, 77, 128, causal, (attn_dtype)t, NULL, NULL, 410 + t,
                                          why, sizeof why),
                         0, "H 8, H_kv 1, N 300, N_k 77, D 128, causal %d, %s: %s", causal,
                         attn_dtype_name((attn_dtype)t), why);
        }
    static const int32_t cu_q[] = {0, 1, 18, 147, 1147}, cu_k[] = {0, 300, 301, 430, 507};
    for (int causal = 0; causal <= 1; causal++)
        cr_assert_eq(
            strided_gqa_call(4, 6, 2, 1000, 300, 64, causal, ATTN_F16, cu_q, cu_k, 420, why, sizeof why), 0,
            "cu_seqlens (1, 17, 129, 1000 queries; 300, 1, 129, 77 keys), causal %d: %s", causal, why);
}

#endif
