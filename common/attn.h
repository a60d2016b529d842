/*
 * attn.h: what the suite adds around the problem and the status codes of the public library
 * (lib/flashattn.h: attn_problem, attn_status, attn_dtype, attn_last_error, one definition of each):
 * the problem's bounds and sizes, the last-error message a failing status leaves, and the constants of
 * the base-2 exponent.
 *
 * Contract (shared by all stages):
 *   Q, O        contiguous row-major [B, H, N, D], 16-bit (fp16, or bf16 where a stage supports it)
 *   K, V        contiguous row-major [B, H_kv, N_k, D]; query head h reads K/V head h / (H / H_kv).
 *               Every stage takes H_kv = H, N_k = N; the registry says which take more (stage.h:
 *               06, 06m, 15m). A stage with ATTN_TAKES_STRIDES (06) finds Q, K, V and O in device
 *               memory by the strides of attn_args ([B, N, H, D] with build/attn --layout bnhd); the
 *               reference, the check and the host copies stay in this contract's layout
 *   LSE         float32 [B, H, N], natural log of sum_j exp(scale * q_i . k_j) over the keys that
 *               query i may see (all N_k, or 0 .. i + N_k - N when causal: the mask aligned to the
 *               bottom right, as FlashAttention-2 from 2.1; keys 0..i when N_k = N)
 *   varlen      cu_seqlens_q and cu_seqlens_k (host int32 arrays of B + 1 offsets in the suite): Q and
 *               O packed [H, total_q, D], K and V [H_kv, total_k, D], LSE [H, total_q]; sequence b
 *               has its own n and n_k, N and N_k bound them, causal aligned per sequence
 *               (attn_head_span). Only the reference, 06 and 06m take it (the registry's takes)
 *   empty row   causal with N > N_k: query i < N - N_k sees no key. Its O is 0 and its LSE -inf
 *               (FlashAttention's choice: the sum over no key is 0, and ln 0 = -inf); the check
 *               takes exactly that, and no NaN
 *   scale       defaults to 1/sqrt(D)
 * Library functions never exit: they return an attn_status and leave a one-line message in
 * attn_last_error(). Only main() turns a status into an exit code.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h" /* attn_status, attn_dtype, attn_problem: the public library's, one of each */

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_MAX_D 256
/* Upper bounds that keep every size product inside int64 and every stage's grid launchable. */
#define ATTN_MAX_B (1 << 20)
#define ATTN_MAX_H (1 << 20)
#define ATTN_MAX_N (1 << 24)

#define ATTN_DTYPE_BIT(t) (1u << (t)) /* an attn_dtype in a set of them (attn_stage.dtypes) */

/* log2(e) and ln(2), the one definition of each: the kernels and the CPU models exponentiate in base
 * 2 (exp(x) = 2^(x log2 e), ex2.approx on the GPU) and turn a base-2 max back into the natural-log LSE
 * (m ln 2). Floats, as every kernel multiplies in float32. */
#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.69314718055994531f

/* The multiplier of the exponent in stages 06-09 and 06m: |scale| * log2(e), at least FLT_MIN. A
 * negative scale runs as -Q with |scale| (the row max stays the max); scale = 0 (uniform attention)
 * runs as FLT_MIN: every |s| * FLT_MIN < 2^-60 and 2^x rounds to exactly 1, as 2^0 would, and a positive
 * multiplier keeps -inf * it = -inf for the mask. The one place this is derived. */
float attn_exp2_scale(float scale);

/* ATTN_OK, or ATTN_EINVAL with a message naming the field and its allowed range. */
attn_status attn_problem_validate(const attn_problem *p);

int64_t attn_qkv_elems(const attn_problem *p); /* B*H*N*D: Q and O (and K, V when H_kv = H, N_k = N) */
int64_t attn_kv_elems(const attn_problem *p);  /* B*H_kv*N_k*D: K and V, each */
int64_t attn_rows(const attn_problem *p);      /* B*H*N   */
/* (with cu_seqlens: H*total_q*D, H_kv*total_k*D and H*total_q, total_x = cu_seqlens_x[B]) */
/* The K/V head, b*H_kv + h / (H / H_kv), that query head bh = b*H + h reads. */
int64_t attn_kv_head(const attn_problem *p, int64_t bh);
/* Where head bh = b*H + h lives: its n query rows are rows q0 .. q0+n-1 of Q, O and LSE, its n_k keys
 * rows k0 .. k0+n_k-1 of K and V (those of K/V head attn_kv_head). Without cu_seqlens q0 = bh*N,
 * n = N, n_k = N_k; with them the layout is packed, Q and O [H, total_q, D], K and V
 * [H_kv, total_k, D], LSE [H, total_q]: sequence b of head h is rows h*total_q + cu_seqlens_q[b] ..
 * of Q, n = its length. */
typedef struct {
    int64_t q0, n, k0, n_k;
} attn_span;
attn_span attn_head_span(const attn_problem *p, int64_t bh);
/* The head bh = b*H + h that row `row` of Q (0 .. attn_rows - 1) belongs to. */
int64_t attn_row_head(const attn_problem *p, int64_t row);
/* How many keys query row i (0..n-1) of a head of n queries and n_k keys sees, keys 0 .. that - 1:
 * n_k, or when causal i + n_k - n + 1 (bottom-right), 0 for the rows i < n - n_k that see none. */
int64_t attn_keys_seen(int causal, int64_t n, int64_t n_k, int64_t i);
/* 4*B*H*N*N_k*D (with cu_seqlens 4*H*D times the sum of n*n_k over the sequences), half of that when
 * causal (the convention FlashAttention's benchmarks use). */
double attn_flops(const attn_problem *p);
const char *attn_dtype_name(attn_dtype t);

/* Formats the thread's last error message (printf-style, up to 8191 bytes) and returns s, so that
 * callers can write `return attn_fail(ATTN_EINVAL, "--seq must be ...")`. The arguments may include
 * attn_last_error() itself, to prefix a reason with context: the text is formatted aside first. */
attn_status attn_fail(attn_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void attn_clear_error(void);

/* malloc for the host buffers of the library and the front end, with a fault injector for the
 * tests: when the environment variable ATTN_FAIL_ALLOC is a number N >= 1, the Nth call in this
 * process (counted over all threads, from 1) returns NULL, so that every out-of-memory path can be
 * reached on purpose. Free the result with free(). */
void *attn_alloc(size_t bytes);

/* A byte count in the unit that reads best in a message: "512 bytes", "4.1 KiB", "96.0 MiB", "3.00 GiB"
 * (an out-of-memory line for a small problem used to read "0.00 GiB"). Writes at most `cap` bytes into
 * buf and returns buf. */
char *attn_size_text(double bytes, char *buf, size_t cap);

/* The separator between a directory as the user typed it and a file name in it: "" after a trailing
 * '/' ("inputs/" + "q.npy"), "/" otherwise; so that messages name "inputs/q.npy", not "inputs//q.npy". */
const char *attn_dir_sep(const char *dir);

/* An integer flag's value: the whole string, digits only after an optional '-' (strtoll alone takes
 * " 12" and "+5", and "12 " only with its end pointer checked), within [lo, hi]. 0, or -1 when it is
 * not; the caller names the flag in its message. */
int attn_parse_integer(const char *s, long long lo, long long hi, long long *out);

/* A real flag's value, as strictly: the whole string a decimal number, an optional '-', digits with an
 * optional '.', an optional exponent ("0.125", "-.5", "1e-3"). strtod alone takes " 0.5" (leading
 * space), "+0.5", "0x1p-3", "inf" and "nan(...)", none of which an integer flag takes. 0 with *out set,
 * or -1; the range is the caller's (it names the flag in its message). */
int attn_parse_real(const char *s, double *out);

#ifdef __cplusplus
}
#endif
#endif
