/* reference.h: the independent double reference that --check, the tests and the bench compare every
 * stage against (reference.c), stage 01 included. */
#ifndef ATTN_REFERENCE_H
#define ATTN_REFERENCE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* O and LSE of the listed rows, in double. rows[] holds global row indices (b*H + h)*N + i, sorted
 * ascending (the rows of one head share one decoding of its K and V). K and V are [B, H_kv, N_k, D],
 * query head h reading K/V head h / (H / H_kv); causal is aligned to the bottom right (query i sees
 * keys 0 .. i + N_k - N). A row that sees no key (causal, N > N_k) gets O = 0 and LSE = -inf, the
 * contract's rule (common/attn.h). Writes o[r*D .. r*D+D-1] and lse[r] for the r-th listed row.
 * cu_seqlens are not taken yet (ATTN_EUNSUPPORTED). */
attn_status attn_reference_rows(const attn_problem *p, const uint16_t *q, const uint16_t *k,
                                const uint16_t *v, const int64_t *rows, int64_t nrows, double *o,
                                double *lse);

/* ATTN_OK when p is valid and rows[] sorted and within it, as the functions here need; else ATTN_EINVAL. */
attn_status attn_reference_rows_valid(const attn_problem *p, const int64_t *rows, int64_t nrows);

/* What the check (check.c) asks of the reference besides O and LSE, for the r-th listed row, from the
 * same double scores and weights as o (check.c's header says what each is for):
 *   - when reach[r] >= 0, the range of V over the keys whose score is within reach[r] of the row's
 *     largest: lo[r*D + d] and hi[r*D + d], the least and largest v_jd over the keys j the row sees
 *     with s_j >= max_j s_j - reach[r] (the rule of the range); reach[r] < 0 asks for no range:
 *     lo = -inf, hi = +inf, and the row costs nothing more;
 *   - mag[r*D + d] = sum_j p_j |v_jd| and sub[r*D + d] = sum_j min(p_j, eta / l) |v_jd|, over the keys
 *     the row sees, with p_j = e^(s_j - m) / l and l = sum_j e^(s_j - m). */
typedef struct {
    const double *reach; /* [nrows] */
    double eta;
    double *lo, *hi, *mag, *sub; /* [nrows * D] each */
} attn_reference_extras;

/* attn_reference_rows, and x's arrays filled for every listed row (x NULL: O and LSE alone). */
attn_status attn_reference_rows_extras(const attn_problem *p, const uint16_t *q, const uint16_t *k,
                                       const uint16_t *v, const int64_t *rows, int64_t nrows,
                                       const attn_reference_extras *x, double *o, double *lse);

/* How a check spreads its rows over the threads. Short heads (N * D <= 64 Ki, more than two heads'
 * rows listed) go a head per thread, each decoding its own K and V; long heads one at a time, their
 * keys and rows spread over the threads. Walked a head at a time, B*H = 90,000 heads of 19 keys made
 * 180,000 parallel regions, each waking every thread: 20-30 s per check on the H200 host's 16 cores
 * under OMP_WAIT_POLICY=passive, for 4 GFLOP of work. */
int attn_heads_in_parallel(const attn_problem *p, int64_t nrows);

/* One pass over sorted rows[], a head at a time, shared by the reference and the check's bounds:
 * decode() fills `head` (head_bytes, one per thread) for query head bh (from the K/V head it reads,
 * attn_kv_head), then row() handles the r-th listed
 * row of that head with `scratch` (row_bytes, one per thread). `parallel` says whether decode() may
 * spread its own loop over the threads (long heads) or runs on one (short heads). */
typedef struct {
    size_t head_bytes, row_bytes;
    void (*decode)(void *ctx, int64_t bh, void *head, int parallel);
    void (*row)(void *ctx, int64_t r, const void *head, void *scratch);
    void *ctx;
} attn_head_walk;

/* Nonzero when a thread's head or row scratch could not be allocated. */
int attn_walk_heads(const attn_problem *p, const int64_t *rows, int64_t nrows, const attn_head_walk *w);

#ifdef __cplusplus
}
#endif
#endif
