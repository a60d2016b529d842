/* naive_cpu.h: stage 01, attention as its definition, in double (--check compares every stage, this
 * one included, with the separate suite/reference.c). */
#ifndef ATTN_NAIVE_CPU_H
#define ATTN_NAIVE_CPU_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Stage 01 for a chosen set of rows, as suite/reference.c does for --check: a sample of a large
 * problem without computing all B*H*N rows on the CPU (tests/test_reference.c compares the two).
 * rows[] holds global row indices (b*H + h)*N + i, sorted ascending (rows of one head are computed
 * together, sharing one conversion of its K and V). Writes o[r*D .. r*D+D-1] and lse[r] for the
 * r-th listed row, in double. */
attn_status naive_cpu_rows(const attn_problem *p, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, const int64_t *rows, int64_t nrows, double *o,
                           double *lse);

/* The stage itself: every row, O rounded to the problem's dtype, LSE as float32. */
attn_status stage01_run(const attn_problem *p, const attn_args *a);
int stage01_supports_dim(int64_t D);

/* The bytes stage 01 moves (traffic.c): Q, K, V read and O, LSE written, once each. */
attn_bytes stage01_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
