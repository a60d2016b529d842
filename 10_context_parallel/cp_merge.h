/*
 * cp_merge.h: the merge of two partial attentions of one query row by their log-sum-exps. The same
 * functions run in the merge kernel (cp_kernels.cu) and on the host (the CPU tests call cp_merge_row).
 *
 * A partial over a key set K_i has LSE_i = log sum_{j in K_i} e^{s_j} and O_i = sum_{j in K_i}
 * e^{s_j - LSE_i} v_j. Over two disjoint key sets:
 *     LSE = log(e^{LSE_a} + e^{LSE_b})
 *     O   = e^{LSE_a - LSE} O_a + e^{LSE_b - LSE} O_b
 * computed with M = max(LSE_a, LSE_b) taken out, so that no exponential overflows however large the
 * LSEs (scores in the thousands give LSEs in the thousands):
 *     e_a = e^{LSE_a - M},  e_b = e^{LSE_b - M}    one of them is 1, the other in [0, 1]
 *     LSE = M + log(e_a + e_b),  w_a = e_a / (e_a + e_b),  w_b = e_b / (e_a + e_b)
 * A partial over no keys has LSE = -inf: its weight is exactly 0 and its O is never read (0 * NaN is
 * NaN, and the O of an empty partial may be anything). Both empty: LSE stays -inf, O becomes 0.
 * A NaN LSE gives NaN weights, and NaN reaches O and LSE: a broken partial is never hidden.
 * Merging is commutative and associative up to rounding, so the ring merges each step's partial
 * into a running (LSE, O) as it arrives.
 */
#ifndef CP_MERGE_H
#define CP_MERGE_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define CP_HD static __host__ __device__ __forceinline__
#else
#define CP_HD static inline
#endif

typedef struct {
    float lse;    /* the merged LSE */
    float wa, wb; /* the weights of O_a and O_b, summing to 1 (or both 0) */
} cp_weights;

CP_HD cp_weights cp_merge_weights(float lse_a, float lse_b) {
    cp_weights w;
    /* fmaxf drops a NaN argument; e_a or e_b below brings it back. */
    const float m = fmaxf(lse_a, lse_b);
    if (m == -INFINITY) {
        w.lse = -INFINITY, w.wa = 0.0f, w.wb = 0.0f;
        return w;
    }
    const float ea = expf(lse_a - m), eb = expf(lse_b - m); /* exp(-inf) = 0 */
    const float sum = ea + eb;                               /* in [1, 2] */
    w.lse = m + logf(sum);
    w.wa = ea / sum;
    w.wb = eb / sum;
    return w;
}

/* One element of the merged O. A weight of exactly 0 skips its operand. */
CP_HD float cp_merge_elem(cp_weights w, float oa, float ob) {
    return (w.wa != 0.0f ? w.wa * oa : 0.0f) + (w.wb != 0.0f ? w.wb * ob : 0.0f);
}

/* The host form of the kernel's work for one row: (lse_a, o_a[0..D)) <- merge with (lse_b, o_b). */
CP_HD void cp_merge_row(float *lse_a, float *o_a, float lse_b, const float *o_b, int64_t D) {
    const cp_weights w = cp_merge_weights(*lse_a, lse_b);
    for (int64_t d = 0; d < D; d++) o_a[d] = cp_merge_elem(w, o_a[d], o_b[d]);
    *lse_a = w.lse;
}

#endif
