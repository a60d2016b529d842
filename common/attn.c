/* attn.c: the problem description, status names and the thread's last error message. */
#include "attn.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Long enough for two full paths (PATH_MAX 4096 each on Linux) and a reason. */
#define ATTN_ERR_MAX 8192
static _Thread_local char attn_err_msg[ATTN_ERR_MAX];

attn_problem attn_problem_make(int64_t B, int64_t H, int64_t N, int64_t D, int causal) {
    attn_problem p;
    p.B = B;
    p.H = H;
    p.N = N;
    p.D = D;
    p.causal = causal ? 1 : 0;
    p.scale = D > 0 ? (float)(1.0 / sqrt((double)D)) : 1.0f;
    p.dtype = ATTN_F16;
    p.H_kv = H;
    p.N_k = N;
    p.cu_seqlens_q = p.cu_seqlens_k = NULL;
    return p;
}

float attn_exp2_scale(float scale) { return fmaxf(fabsf(scale) * ATTN_LOG2E, FLT_MIN); }

/* cu_seqlens_q and cu_seqlens_k (host arrays in the suite): both or neither, B + 1 offsets from 0, each
 * sequence 0 .. N queries and 0 .. N_k keys long. */
static attn_status validate_seqlens(const attn_problem *p) {
    if (!p->cu_seqlens_q != !p->cu_seqlens_k)
        return attn_fail(ATTN_EINVAL, "cu_seqlens_q and cu_seqlens_k: both or neither");
    for (int t = 0; p->cu_seqlens_q && t < 2; t++) {
        const int32_t *cu = t ? p->cu_seqlens_k : p->cu_seqlens_q;
        const int64_t most = t ? p->N_k : p->N;
        const char *name = t ? "cu_seqlens_k" : "cu_seqlens_q";
        if (cu[0] != 0) return attn_fail(ATTN_EINVAL, "%s: must start at 0 (got %d)", name, (int)cu[0]);
        for (int64_t b = 0; b < p->B; b++)
            if (cu[b + 1] < cu[b] || cu[b + 1] - cu[b] > most)
                return attn_fail(ATTN_EINVAL, "%s: sequence %lld must be 0..%lld long (got %lld)", name,
                                 (long long)b, (long long)most, (long long)cu[b + 1] - (long long)cu[b]);
    }
    return ATTN_OK;
}

attn_status attn_problem_validate(const attn_problem *p) {
    if (p->B < 1 || p->B > ATTN_MAX_B)
        return attn_fail(ATTN_EINVAL, "batch must be 1..%d (got %lld)", ATTN_MAX_B, (long long)p->B);
    if (p->H < 1 || p->H > ATTN_MAX_H)
        return attn_fail(ATTN_EINVAL, "heads must be 1..%d (got %lld)", ATTN_MAX_H, (long long)p->H);
    if (p->N < 1 || p->N > ATTN_MAX_N)
        return attn_fail(ATTN_EINVAL, "seq must be 1..%d (got %lld)", ATTN_MAX_N, (long long)p->N);
    if (p->D < 1 || p->D > ATTN_MAX_D)
        return attn_fail(ATTN_EINVAL, "dim must be 1..%d (got %lld)", ATTN_MAX_D, (long long)p->D);
    /* a subnormal scale has lost bits, and the stages' scale * log2(e) (06m clamps it to FLT_MIN) more */
    if (!isfinite(p->scale) || fabsf(p->scale) < FLT_MIN)
        return attn_fail(ATTN_EINVAL, "scale must be a finite non-zero float32 of magnitude %g to %g (got %g)",
                         (double)FLT_MIN, (double)FLT_MAX, (double)p->scale);
    if (p->dtype != ATTN_F16 && p->dtype != ATTN_BF16)
        return attn_fail(ATTN_EINVAL, "dtype must be fp16 or bf16");
    /* GQA and a key count of its own: K and V are [B, H_kv, N_k, D], query head h reading K/V head
     * h / (H / H_kv) (attn_kv_head) */
    if (p->H_kv < 1 || p->H_kv > p->H || p->H % p->H_kv != 0)
        return attn_fail(ATTN_EINVAL, "kv heads must divide heads = %lld, 1..%lld (got %lld)", (long long)p->H,
                         (long long)p->H, (long long)p->H_kv);
    if (p->N_k < 1 || p->N_k > ATTN_MAX_N)
        return attn_fail(ATTN_EINVAL, "seq-k must be 1..%d (got %lld)", ATTN_MAX_N, (long long)p->N_k);
    /* B*H*N*D must fit in int64 and its bytes in size_t: with the bounds above B*H*N <= 2^64 would
     * not hold, so check the product against 2^62 elements (8 EiB of fp16, far past any device). */
    double elems = (double)p->B * (double)p->H * (double)p->N * (double)p->D;
    if (elems > 0x1p62) /* 2^62 itself is valid; a product that rounds down onto it is still far inside int64 */
        return attn_fail(ATTN_EINVAL, "batch*heads*seq*dim = %.3g elements is too large (limit 2^62)", elems);
    elems = (double)p->B * (double)p->H_kv * (double)p->N_k * (double)p->D;
    if (elems > 0x1p62)
        return attn_fail(ATTN_EINVAL, "batch*kv-heads*seq-k*dim = %.3g elements is too large (limit 2^62)", elems);
    return validate_seqlens(p);
}

/* Rows of one head's Q summed over the batch: B*N, or the packed total cu_seqlens_q[B]. */
static int64_t q_rows_per_head(const attn_problem *p) { return p->cu_seqlens_q ? p->cu_seqlens_q[p->B] : p->B * p->N; }
static int64_t k_rows_per_head(const attn_problem *p) {
    return p->cu_seqlens_k ? p->cu_seqlens_k[p->B] : p->B * p->N_k;
}

int64_t attn_qkv_elems(const attn_problem *p) { return attn_rows(p) * p->D; }
int64_t attn_rows(const attn_problem *p) { return p->H * q_rows_per_head(p); }
int64_t attn_kv_elems(const attn_problem *p) { return p->H_kv * k_rows_per_head(p) * p->D; }
int64_t attn_kv_head(const attn_problem *p, int64_t bh) {
    return bh / p->H * p->H_kv + bh % p->H / (p->H / p->H_kv);
}

attn_span attn_head_span(const attn_problem *p, int64_t bh) {
    const int64_t b = bh / p->H, h = bh % p->H, g = h / (p->H / p->H_kv);
    attn_span s;
    if (!p->cu_seqlens_q) {
        s.q0 = bh * p->N, s.n = p->N;
        s.k0 = (b * p->H_kv + g) * p->N_k, s.n_k = p->N_k;
        return s;
    }
    const int32_t *cq = p->cu_seqlens_q, *ck = p->cu_seqlens_k;
    s.q0 = h * q_rows_per_head(p) + cq[b], s.n = cq[b + 1] - cq[b];
    s.k0 = g * k_rows_per_head(p) + ck[b], s.n_k = ck[b + 1] - ck[b];
    return s;
}

int64_t attn_row_head(const attn_problem *p, int64_t row) {
    if (!p->cu_seqlens_q) return row / p->N;
    const int64_t total = q_rows_per_head(p), h = row / total, t = row % total;
    int64_t lo = 0, hi = p->B - 1; /* the sequence b with cu[b] <= t < cu[b + 1] (empty ones skipped) */
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (p->cu_seqlens_q[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo * p->H + h;
}

int64_t attn_keys_seen(int causal, int64_t n, int64_t n_k, int64_t i) {
    if (!causal) return n_k;
    const int64_t last = i + n_k - n; /* the bottom-right diagonal */
    return last < 0 ? 0 : last + 1;
}

double attn_flops(const attn_problem *p) {
    double pairs = (double)p->B * (double)p->N * (double)p->N_k; /* query-key pairs of one head */
    if (p->cu_seqlens_q) {
        pairs = 0.0;
        for (int64_t b = 0; b < p->B; b++)
            pairs += (double)(p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b]) *
                     (double)(p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b]);
    }
    double f = 4.0 * (double)p->H * pairs * (double)p->D;
    return p->causal ? f / 2.0 : f;
}

const char *attn_dtype_name(attn_dtype t) { return t == ATTN_BF16 ? "bf16" : "fp16"; }

const char *attn_status_name(attn_status s) {
    switch (s) {
    case ATTN_OK: return "ok";
    case ATTN_EINVAL: return "invalid argument";
    case ATTN_EUNSUPPORTED: return "unsupported";
    case ATTN_ENOMEM: return "out of memory";
    case ATTN_ENODEV: return "no GPU";
    case ATTN_ECUDA: return "CUDA error";
    case ATTN_EIO: return "I/O error";
    }
    return "unknown status";
}

attn_status attn_fail(attn_status s, const char *fmt, ...) {
    /* Format into a buffer of its own first: callers may pass attn_last_error() as an argument
     * ("%s: %s", path, attn_last_error()), and vsnprintf into the buffer it reads from is undefined
     * behaviour (glibc printed "q.npy: q.npy: " and lost the reason). */
    static _Thread_local char next[ATTN_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(next, sizeof next, fmt, ap);
    va_end(ap);
    memcpy(attn_err_msg, next, strlen(next) + 1);
    return s;
}

const char *attn_last_error(void) { return attn_err_msg; }
void attn_clear_error(void) { attn_err_msg[0] = '\0'; }

void *attn_alloc(size_t bytes) {
    static atomic_llong calls;
    const char *fail = getenv("ATTN_FAIL_ALLOC");
    if (fail && *fail) {
        const long long n = atomic_fetch_add(&calls, 1) + 1;
        if (n == atoll(fail)) return NULL;
    }
    return malloc(bytes ? bytes : 1);
}

const char *attn_dir_sep(const char *dir) {
    const size_t n = strlen(dir);
    return n > 0 && dir[n - 1] == '/' ? "" : "/";
}

char *attn_size_text(double bytes, char *buf, size_t cap) {
    if (bytes < 1024.0)
        snprintf(buf, cap, "%.0f bytes", bytes);
    else if (bytes < 1048576.0)
        snprintf(buf, cap, "%.1f KiB", bytes / 1024.0);
    else if (bytes < 1073741824.0)
        snprintf(buf, cap, "%.1f MiB", bytes / 1048576.0);
    else
        snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
    return buf;
}

int attn_parse_integer(const char *s, long long lo, long long hi, long long *out) {
    const char *digits = s && *s == '-' ? s + 1 : s;
    if (!s || !*digits || strspn(digits, "0123456789") != strlen(digits)) return -1;
    errno = 0;
    const long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int attn_parse_real(const char *s, double *out) {
    if (!s) return -1;
    const char *p = s + (*s == '-');
    const size_t whole = strspn(p, "0123456789");
    p += whole;
    const size_t frac = *p == '.' ? strspn(p + 1, "0123456789") : 0;
    if (*p == '.') p += 1 + frac;
    if (whole + frac == 0) return -1; /* "", "-", ".", "e5" */
    if (*p == 'e' || *p == 'E') {
        p += 1 + (p[1] == '-' || p[1] == '+');
        const size_t exp = strspn(p, "0123456789");
        if (!exp) return -1;
        p += exp;
    }
    if (*p) return -1;
    *out = strtod(s, NULL); /* past double's range: +-inf or 0, which the caller's range refuses */
    return 0;
}
