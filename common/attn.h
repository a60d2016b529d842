/*
 * attn.h: the problem every stage solves, the status codes every library function returns, and the
 * last-error message that goes with a failing status.
 *
 * Contract (shared by all stages):
 *   Q, K, V, O  contiguous row-major [B, H, N, D], 16-bit (fp16, or bf16 where a stage supports it)
 *   LSE         float32 [B, H, N], natural log of sum_j exp(scale * q_i . k_j) over the keys that
 *               query i may see (all N, or 0..i when causal)
 *   scale       defaults to 1/sqrt(D)
 * Library functions never exit: they return an attn_status and leave a one-line message in
 * attn_last_error(). Only main() turns a status into an exit code.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_MAX_D 256
/* Upper bounds that keep every size product inside int64 and every stage's grid launchable. */
#define ATTN_MAX_B (1 << 20)
#define ATTN_MAX_H (1 << 20)
#define ATTN_MAX_N (1 << 24)

typedef enum { ATTN_F16 = 0, ATTN_BF16 = 1 } attn_dtype;
#define ATTN_DTYPE_BIT(t) (1u << (t))

typedef enum {
    ATTN_OK = 0,
    ATTN_EINVAL = 1,       /* a bad argument: shape, scale, flag */
    ATTN_EUNSUPPORTED = 2, /* a valid problem this stage does not take (head dim, dtype) */
    ATTN_ENOMEM = 3,       /* not enough host or device memory */
    ATTN_ENODEV = 4,       /* no GPU, no driver, or built without CUDA */
    ATTN_ECUDA = 5,        /* a CUDA call or a kernel launch failed */
    ATTN_EIO = 6,          /* a file could not be read or written, or is malformed */
} attn_status;

typedef struct {
    int64_t B, H, N, D;
    int causal;      /* 1: query i sees keys 0..i */
    float scale;     /* multiplies q . k; 1/sqrt(D) by default */
    attn_dtype dtype;
} attn_problem;

/* Fills a problem with the default scale 1/sqrt(D) and fp16. */
attn_problem attn_problem_make(int64_t B, int64_t H, int64_t N, int64_t D, int causal);
/* ATTN_OK, or ATTN_EINVAL with a message naming the field and its allowed range. */
attn_status attn_problem_validate(const attn_problem *p);

int64_t attn_qkv_elems(const attn_problem *p); /* B*H*N*D */
int64_t attn_rows(const attn_problem *p);      /* B*H*N   */
/* 4*B*H*N*N*D, half of that when causal (the convention FlashAttention's benchmarks use). */
double attn_flops(const attn_problem *p);
const char *attn_dtype_name(attn_dtype t);

const char *attn_status_name(attn_status s);
/* Formats the thread's last error message (printf-style, up to 8191 bytes) and returns s, so that
 * callers can write `return attn_fail(ATTN_EINVAL, "--seq must be ...")`. The arguments may include
 * attn_last_error() itself, to prefix a reason with context: the text is formatted aside first. */
attn_status attn_fail(attn_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
const char *attn_last_error(void);
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
