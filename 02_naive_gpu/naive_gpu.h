/* naive_gpu.h: stage 02, attention through an N x N score matrix in device memory. */
#ifndef ATTN_NAIVE_GPU_H
#define ATTN_NAIVE_GPU_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif
attn_status stage02_run(const attn_problem *p, const attn_args *a);
/* 6 bytes per score: S in fp32 and P in fp16, B*H*N*N of each. */
size_t stage02_workspace_bytes(const attn_problem *p);
/* The bytes stage 02's three kernels move (traffic.c): the N x N S and P dominate. */
attn_bytes stage02_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
