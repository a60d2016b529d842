/*
 * cp_plan.c: the chunks, their placement on the ring and the local calls of each pair (cp_plan.h).
 * Always built: the front end, the tests and the CPU test of the plan need no GPU.
 */
#include "cp_plan.h"

cp_plan cp_plan_make(int64_t N, int G, int causal) {
    cp_plan pl;
    pl.N = N;
    pl.G = G;
    pl.causal = causal ? 1 : 0;
    /* Causal work grows with the chunk's position (chunk i sees i+1 chunks of keys), so each rank
     * takes one chunk from each end: i and n-1-i see n+1 chunks between them, the same for every
     * rank. Non-causal work is flat: one chunk per rank. */
    pl.S = pl.causal ? 2 : 1;
    pl.n = pl.S * G;
    pl.c = (N + pl.n - 1) / pl.n;
    return pl;
}

int cp_chunk(const cp_plan *pl, int rank, int slot) { return slot == 0 ? rank : pl->n - 1 - rank; }

int64_t cp_chunk_rows(const cp_plan *pl, int chunk) {
    const int64_t left = pl->N - (int64_t)chunk * pl->c;
    return left <= 0 ? 0 : left < pl->c ? left : pl->c;
}

int cp_kv_source(const cp_plan *pl, int rank, int step) { return ((rank - step) % pl->G + pl->G) % pl->G; }

cp_mask cp_pair_mask(const cp_plan *pl, int q_chunk, int k_chunk) {
    if (cp_chunk_rows(pl, q_chunk) == 0 || cp_chunk_rows(pl, k_chunk) == 0) return CP_SKIP;
    if (!pl->causal) return CP_FULL;
    return k_chunk > q_chunk ? CP_SKIP : k_chunk == q_chunk ? CP_DIAG : CP_FULL;
}

int cp_pair_call(const cp_plan *pl, int q_chunk, int k_chunk, int64_t *k, cp_call *call) {
    const cp_mask m = cp_pair_mask(pl, q_chunk, k_chunk);
    const int64_t a = cp_chunk_rows(pl, q_chunk), b = cp_chunk_rows(pl, k_chunk);
    const int64_t done = *k; /* query rows of the chunk merged so far */
    if (m == CP_SKIP || done >= a) return 0;
    if (m == CP_DIAG || b == pl->c) {
        /* The slots as they are: c rows, padding queries computed and never merged. */
        *call = (cp_call){pl->c, 0, 0, a, m == CP_DIAG, 0};
        *k = a;
        return 1;
    }
    /* Non-causal against the short chunk: b real keys, so calls of b rows. The query rows go in
     * windows of b; the last window is moved back to end at row a (it overlaps the one before, whose
     * rows are not merged twice) rather than padded past the chunk's c rows. */
    if (a <= b) {
        *call = (cp_call){b, 0, 0, a, 0, 1};
        *k = a;
        return 1;
    }
    const int64_t w = done < a - b ? done : a - b;
    *call = (cp_call){b, w, done - w, b, 0, 1};
    *k = w + b;
    return 1;
}

void cp_rank_work(const cp_plan *pl, int rank, int64_t *calls, double *work) {
    *calls = 0;
    *work = 0.0;
    for (int step = 0; step < pl->G; step++) {
        const int src = cp_kv_source(pl, rank, step);
        for (int qs = 0; qs < pl->S; qs++)
            for (int ks = 0; ks < pl->S; ks++) {
                cp_call call;
                int64_t k = 0;
                while (cp_pair_call(pl, cp_chunk(pl, rank, qs), cp_chunk(pl, src, ks), &k, &call)) {
                    const double f = (double)call.n / (double)pl->c;
                    *calls += 1;
                    *work += f * f * (call.causal ? 0.5 : 1.0);
                }
            }
    }
}
