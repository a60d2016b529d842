/* reference_backward.h: the independent double reference of the backward pass (reference_backward.c):
 * dQ, dK and dV of one head, and the weighted sums of magnitudes that the gradients' check turns into
 * a tolerance (check_backward.c). Written apart from every stage, as reference.c is for the forward. */
#ifndef ATTN_REFERENCE_BACKWARD_H
#define ATTN_REFERENCE_BACKWARD_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The weights of one row i in the bound sums (check_backward.c says what they stand for):
 *     w_ij = P_ij (alpha |dP_ij - D_i| + beta A_ij + gamma) + eta,   A_ij = sum_d |dO_id| |v_jd|
 *     tq_id = sum_j w_ij |k_jd|,   tk_jd = sum_i w_ij |q_id|,   tv_jd = sum_i (delta P_ij + eta) |dO_id| */
typedef struct {
    double alpha, beta, gamma, delta;
} attn_grad_weights;

/* Called once for every row i of the head, with the row's exact LSE, O (D values), D_i = dO_i . O_i
 * and Sabs_i = max_j |scale| sum_d |q_id k_jd|, before any sum uses its weights. */
typedef void (*attn_grad_weigh_fn)(void *ctx, int64_t bh, int64_t i, double lse, const double *o,
                                   double delta, double sabs, attn_grad_weights *w);

typedef struct {
    /* the rows whose dQ and the keys whose dK and dV are wanted: indices inside the head, sorted,
     * each list NULL for all N */
    const int64_t *rows, *keys;
    int64_t nrows, nkeys;
    /* NULL: gradients only (tq, tk, tv are not written); else the weights of every row, and eta */
    attn_grad_weigh_fn weigh;
    void *ctx;
    double eta;
    /* out: dq and tq [nrows * D], dk, dv, tk and tv [nkeys * D] (tq, tk, tv may be NULL without weigh) */
    double *dq, *dk, *dv, *tq, *tk, *tv;
} attn_grad_request;

/* The gradients of head bh (0 .. B*H-1) of Q, K, V and dO ([B, H, N, D] 16-bit, p->dtype) in double,
 * for the loss L = sum over O's elements of dO * O. ATTN_EINVAL for a bad problem, head or list,
 * ATTN_ENOMEM when the head's double copies (8 N D doubles) cannot be allocated. */
attn_status attn_reference_grads_head(const attn_problem *p, const uint16_t *q, const uint16_t *k,
                                      const uint16_t *v, const uint16_t *d_o, int64_t bh,
                                      const attn_grad_request *req);

#ifdef __cplusplus
}
#endif
#endif
