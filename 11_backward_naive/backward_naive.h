/* backward_naive.h: stage 11, the backward pass through N x N matrices P and dS in device memory. */
#ifndef ATTN_BACKWARD_NAIVE_H
#define ATTN_BACKWARD_NAIVE_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif
attn_status stage11_run(const attn_problem *p, const attn_args *a);
/* 8 bytes per score (P and dS in fp32, B*H*N*N of each) and 4 per row (D). */
size_t stage11_workspace_bytes(const attn_problem *p);
/* The bytes stage 11's five kernels move (traffic.c): P and dS, N x N fp32, written once, read twice each. */
attn_bytes stage11_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
