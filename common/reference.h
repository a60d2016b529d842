/* reference.h: the independent double reference that --check, the tests and the bench compare every
 * stage against (reference.c), stage 01 included. */
#ifndef ATTN_REFERENCE_H
#define ATTN_REFERENCE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* O and LSE of the listed rows, in double. rows[] holds global row indices (b*H + h)*N + i, sorted
 * ascending (the rows of one head share one decoding of its K and V). Writes o[r*D .. r*D+D-1] and
 * lse[r] for the r-th listed row. */
attn_status attn_reference_rows(const attn_problem *p, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                const int64_t *rows, int64_t nrows, double *o, double *lse);

#ifdef __cplusplus
}
#endif
#endif
