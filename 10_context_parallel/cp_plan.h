/*
 * cp_plan.h: how stage 10 cuts one sequence into chunks, which GPU holds which, and which local
 * attention calls each GPU makes at each step of the ring. Plain C, no CUDA: the tests check on the
 * CPU that the plan covers every visible (query, key) pair exactly once (tests/test_context_parallel.c).
 *
 * The sequence (N rows, queries and keys alike) is cut into n = S*G chunks of c = ceil(N/n) rows;
 * the n*c - N < n missing rows are padding at the very end (zero rows in memory). Rank r (one per GPU)
 * holds S chunks in its slots:
 *     non-causal: S = 1, slot 0 holds chunk r
 *     causal:     S = 2, slot 0 holds chunk r, slot 1 its mirror n-1-r (balanced: see README.md)
 * At step s (0 .. G-1) rank r holds the K/V shard of rank (r - s) mod G: each step every rank passes
 * the shard it holds to rank r+1 and takes one from rank r-1.
 *
 * The local stage takes square problems only: Nq = Nk = n, causal meaning "query i sees keys 0..i".
 * A pair (query chunk qc, key chunk kc) becomes one or more such calls (cp_pair_call):
 *     causal, kc >  qc: nothing (every key after every query)
 *     causal, kc == qc: one causal call of c rows. The chunk's padding keys sit after its last real
 *                       query, so the mask hides them.
 *     causal, kc <  qc: one non-causal call of c rows (kc < qc means kc holds no padding)
 *     non-causal:       one non-causal call of c rows, unless kc holds padding keys (the chunk with
 *                       row N-1, when n does not divide N): b < c real keys need calls of b rows,
 *                       and the a query rows go in as windows of b rows (cp_pair_call).
 */
#ifndef CP_PLAN_H
#define CP_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CP_MAX_SLOTS 2

typedef struct {
    int64_t N;   /* real rows */
    int G;       /* ranks, one per GPU */
    int causal;
    int S;       /* chunks per rank */
    int n;       /* chunks: S*G */
    int64_t c;   /* rows per chunk, padding included: ceil(N / n) */
} cp_plan;

typedef enum { CP_SKIP = 0, CP_FULL = 1, CP_DIAG = 2 } cp_mask;

cp_plan cp_plan_make(int64_t N, int G, int causal);
/* The chunk held in a rank's slot. */
int cp_chunk(const cp_plan *pl, int rank, int slot);
/* Real (non-padding) rows of a chunk: 0 .. c. */
int64_t cp_chunk_rows(const cp_plan *pl, int chunk);
/* The rank whose K/V shard `rank` holds at `step`. */
int cp_kv_source(const cp_plan *pl, int rank, int step);
/* What the query chunk sees of the key chunk; CP_SKIP also when either chunk is all padding. */
cp_mask cp_pair_mask(const cp_plan *pl, int q_chunk, int k_chunk);

/* One local call of a pair: n rows (queries = keys = n). The call's query rows are the chunk's rows
 * q0 .. q0+n-1; its output rows from .. to-1 are merged into the chunk's rows q0+from .. q0+to-1.
 * gather: the call's inputs are copies (n < c rows: the short key chunk), not the slots themselves. */
typedef struct {
    int64_t n, q0, from, to;
    int causal, gather;
} cp_call;

/* The calls of one pair, in order: *k is the iterator (start at 0). Returns 0 when there are no more. */
int cp_pair_call(const cp_plan *pl, int q_chunk, int k_chunk, int64_t *k, cp_call *call);

/* Local calls and pair work of one rank over one pass, for reports: calls, and work in units of a
 * c x c non-causal call (a causal diagonal call counts half; a call of b rows (b/c)^2). */
void cp_rank_work(const cp_plan *pl, int rank, int64_t *calls, double *work);

#ifdef __cplusplus
}
#endif
#endif
