/*
 * flashattn.h: the public C interface of this project, libflashattn.so and libflashattn.a (make lib;
 * make install PREFIX=... installs this header, both libraries and flashattn.pc for pkg-config).
 *
 *   O = softmax(scale * Q K^T [+ causal mask]) V,   LSE = the natural log of each query row's softmax
 *                                                          denominator, sum_j exp(scale * q_i . k_j)
 *   dQ, dK, dV = the gradients of a loss L given O, LSE and dO = dL/dO (FlashAttention-2's Algorithm 2)
 *
 * attn_forward() runs, unless told which, the fastest stage of the suite that this GPU runs for the
 * problem: stage 09 on an sm_90 GPU (H100, H200) at the head dims it takes (64, 128, 256) for
 * contiguous tensors with H_kv == H, N_k == N and no cu_seqlens; stage 06 on every other sm_80 or
 * newer GPU, at the other head dims (32, 96), and for the shapes 09 does not take yet (grouped-query
 * heads, N_k != N, cu_seqlens, strided tensors). attn_backward() runs stage 14
 * on an sm_90 GPU at head dims 64 and 128, stage 13 everywhere else, and 13d when deterministic. Below
 * sm_80 both refuse (ATTN_EUNSUPPORTED, "device: ... (got sm_75)"); with no GPU or driver, ATTN_ENODEV
 * ("no CUDA device ..."). A stage named by its id ("06", "07", "08", "09"; "14", "13", "13d", "14d")
 * runs that stage or says why it cannot.
 *
 * Memory: every pointer is device (or managed) memory of the current device; q, k, v, o, d_o, dq,
 * dk, dv and the workspace 16-byte aligned (cudaMalloc gives 256), lse 4-byte aligned. An output never
 * shares a byte with an input or with another output; inputs may share memory (q == k is fine).
 *
 * Status and messages: every function returns an attn_status and never exits. When it is not ATTN_OK,
 * attn_last_error() says why in one line that names the argument and the value passed ("H_kv: stage
 * 09 takes H_kv == H only (got 8 of 32)"), and nothing was queued on the stream. Refusals decided
 * from the arguments alone make no CUDA call. The calls launch on `stream` (a cudaStream_t of the
 * current device, or NULL for the legacy default stream) and return without synchronising: a fault
 * inside a kernel shows at the caller's next synchronisation. An error that an earlier, unrelated
 * CUDA call left pending in cudaGetLastError() is neither reported as the call's own nor cleared.
 * Every function may be called from several threads at once; attn_last_error() is per thread.
 *
 * C11 or C++; the header needs no CUDA header. Build and link against an installed copy:
 *   cc prog.c $(pkg-config --cflags --libs flashattn)                            (the shared library)
 *   cc prog.c $(pkg-config --cflags flashattn) $(pkg-config --variable=static_libs flashattn)
 * (the static one, with the CUDA runtime beside it: `pkg-config --static --libs` would name
 * -lflashattn, which the linker resolves to the shared library when both are installed).
 * lib/example_main.c is a whole program.
 */
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version (flashattn.pc's): 0.x while the interface may still change. */
#define FLASHATTN_VERSION "0.1.0"

/* The 16-bit element types of Q, K, V, O and the gradients (LSE is always float32). */
typedef enum { ATTN_F16 = 0, ATTN_BF16 = 1 } attn_dtype;

/* What every function of the library (and of the suite around it) returns. */
typedef enum {
    ATTN_OK = 0,
    ATTN_EINVAL = 1,       /* a bad argument: NULL or misaligned pointer, size < 1, a flag not 0 or 1,
                              scale, dtype, overlapping outputs, memory that is not the current device's */
    ATTN_EUNSUPPORTED = 2, /* a valid problem that the stage (or every stage, or this GPU) does not take */
    ATTN_ENOMEM = 3,       /* not enough host or device memory (the suite; the library allocates nothing) */
    ATTN_ENODEV = 4,       /* no CUDA device or driver, or a build without CUDA */
    ATTN_ECUDA = 5,        /* a CUDA call or a kernel launch of the library failed */
    ATTN_EIO = 6,          /* a file could not be read or written (the suite) */
} attn_status;

/* The largest |scale| taken: the kernels multiply the scores by |scale| * log2(e), which must stay a
 * finite float. Results are accurate while every |scale * log2(e) * q . k| is at most 2^24: the kernels
 * subtract the row max m inside one FFMA, 2^(s sl2 - fl(m sl2)), and past 2^24 the rounding of
 * fl(m sl2) exceeds one unit; near 2^88 it overflows the 16-bit P (NaN in O). */
#define ATTN_MAX_SCALE 2.3e38f

/*
 * The problem. Q and O are [B, H, N, D]; K and V are [B, H_kv, N_k, D]: query head h reads K/V head
 * h / (H / H_kv) (grouped-query attention; H_kv = 1 is multi-query). Causal: query i sees keys 0 ..
 * i + N_k - N (the mask aligned to the bottom right, as FlashAttention-2 from 2.1 and PyTorch's
 * causal_lower_right: with N_k == N, keys 0 .. i). attn_problem_make() fills H_kv = H, N_k = N, the
 * scale 1/sqrt(D), fp16 and no variable lengths; set the rest after it.
 * Variable-length batches: cu_seqlens_q and cu_seqlens_k, both or neither, int32 device arrays of
 * B + 1 offsets (0 first): sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of
 * Q and O packed along N (their batch stride unused), its keys likewise rows of K and V, N and N_k the
 * longest sequence of each; the LSE is then [H, total_q] (total_q = cu_seqlens_q[B]). The tensors'
 * strides must be given (stride_h and stride_n; FlashAttention's [total, heads, D] is stride_h D,
 * stride_n heads*D): the contiguous head stride would need the total, which is on the device. A
 * sequence may be empty; one with queries and no keys gets O = 0 and LSE = -inf.
 * What the stages take today: stage 06 takes H_kv < H, N_k != N, cu_seqlens and strided tensors
 * (every stride a multiple of 8 elements, row strides below 2^31); 07-09 and the backward stages
 * take H_kv == H, N_k == N, no cu_seqlens, contiguous tensors, and refuse the rest as
 * ATTN_EUNSUPPORTED, naming the field. Causal with N > N_k: query i < N - N_k sees no key, and its O
 * is 0 and its LSE -inf.
 */
typedef struct {
    int64_t B, H, N, D; /* batch, query heads, query rows, head dim */
    int causal;         /* 0 or 1 */
    float scale;        /* |scale| <= ATTN_MAX_SCALE; 0: uniform attention; negative flips the scores */
    attn_dtype dtype;
    int64_t H_kv;                               /* key/value heads, dividing H */
    int64_t N_k;                                /* keys */
    const int32_t *cu_seqlens_q, *cu_seqlens_k; /* NULL, NULL: every sequence N queries and N_k keys */
} attn_problem;

/* H_kv = H, N_k = N, scale 1/sqrt(D), fp16, no cu_seqlens. */
attn_problem attn_problem_make(int64_t B, int64_t H, int64_t N, int64_t D, int causal);

/* One tensor: its data and its element strides over batch, head and row. The D elements of a row are
 * contiguous. All three strides 0: contiguous row-major [B, heads, rows, D] (strides heads*rows*D,
 * rows*D, D); [B, N, H, D] is stride_b N*H*D, stride_h D, stride_n H*D; a slice of a packed
 * [B, N, 3, H, D] QKV tensor is stride_b 3*N*H*D, stride_h D, stride_n 3*H*D. The stride of a dim of
 * size 1 is never used. */
typedef struct {
    void *data;
    int64_t stride_b, stride_h, stride_n;
} attn_tensor;

typedef struct {
    attn_problem p;
    attn_tensor q, k, v; /* read */
    attn_tensor o;       /* written */
    float *lse;          /* written, contiguous float32 [B, H, N] ([H, total_q] with cu_seqlens); may be
                            NULL for stage 06 (the stages 07-09 always write it, so NULL leaves them out
                            of the choice) */
} attn_forward_args;

typedef struct {
    attn_problem p;              /* the forward's, with the same causal and scale */
    attn_tensor q, k, v, o, d_o; /* read: the forward's inputs and output, and dL/dO */
    const float *lse;            /* read: the forward's LSE, [B, H, N] float32 */
    attn_tensor dq, dk, dv;      /* written */
    void *workspace;             /* scratch of at least attn_backward_workspace_bytes(); contents */
    size_t workspace_bytes;      /* need not be set (the stage zeroes what it sums into)          */
    int deterministic;           /* 1: dQ summed in a fixed order, bit for bit the same every run */
} attn_backward_args;

/* Runs the forward on `stream`. stage: NULL for the fastest this GPU runs for the problem, or "06",
 * "07", "08", "09". */
attn_status attn_forward(const attn_forward_args *a, const char *stage, void *stream);

/* Runs the backward on `stream`. stage: NULL (14 on sm_90 where it takes the problem, else 13; 13d when
 * deterministic), "14", "13", "13d" or "14d". Stages 13 and 14 sum dQ with atomic adds (14: the copy
 * engine's reduce-add), whose order (and so dQ's last bits) changes from run to run; 13d and 14d sum
 * it in a fixed order, and 14d, slower than 13d, runs only when named. */
attn_status attn_backward(const attn_backward_args *a, const char *stage, void *stream);

/* The stage attn_forward(a, stage, ...) would run here, in *id ("09"), after every check that needs
 * no pointer (a's pointers are not looked at, but for whether lse is NULL). stage as for attn_forward.
 * Asks the CUDA runtime for the current GPU. */
attn_status attn_forward_stage(const attn_forward_args *a, const char *stage, const char **id);
attn_status attn_backward_stage(const attn_backward_args *a, const char *stage, const char **id);

/* The scratch attn_backward(a, stage, ...) needs, in *bytes: O(N) per head (the fp32 dQ accumulator,
 * D_i and 13d's or 14d's order counters; one layout for 13 and 14), 4 (D + 1) bytes a row and a little. Why the caller's: a caller such
 * as PyTorch then allocates it from its own caching allocator, which counts and reuses it; the library
 * holds no state and allocates nothing. a's pointers are not looked at. */
attn_status attn_backward_workspace_bytes(const attn_backward_args *a, const char *stage, size_t *bytes);

/* Why this thread's most recent failing call failed, in one line; "" before any. Valid until the
 * thread's next failing call. */
const char *attn_last_error(void);

/* "ok", "invalid argument", "unsupported", "out of memory", "no GPU", "CUDA error", "I/O error", or
 * "unknown status". */
const char *attn_status_name(attn_status s);

#ifdef __cplusplus
}
#endif
#endif
