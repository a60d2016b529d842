/*
 * decode_gpu.h: stage 15 on the GPU, the kernel that 15m models (decode_kernel.cuh, decode_gpu.c).
 *
 * Two launches, as in the model: the split kernel, one block per (sequence, K/V head, chunk) and grid
 * row per 64 query rows, writes each chunk's partial O (fp32) and LSE into a workspace; the combine
 * merges the S partials of every row by their LSEs (cp_merge.h) into O and LSE. With S = 1 the split
 * kernel writes O and LSE itself and the combine is not launched.
 *
 * Entry points:
 *   decode_gpu_paged     one step from a paged cache, every pointer on the device but shape->cache_len
 *                        (the host's copy of the lengths: the chunk count and the checks read it)
 *   stage15_run          the registry's stage 15: the suite's contiguous K, V [B, H_kv, N_k, D], the
 *                        identity table (sequence b owns page b, of N_k keys)
 *   stage15p_run         road step 15p: the same kernel through the harness's shuffled block table
 *                        (attn_args' pages, ATTN_TAKES_PAGED)
 */
#ifndef ATTN_DECODE_GPU_H
#define ATTN_DECODE_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "decode_cpu.h" /* decode_shape, decode_cache, decode_opts */
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STAGE15_DIMS_TEXT "32, 64, 128"
/* 1 for the head dims the kernel is built for. Always built (no CUDA needed). */
int stage15_supports_dim(int64_t D);

/* What the split kernel and the combine receive (by value). Element offsets are 64-bit. */
typedef struct {
    const uint16_t *q;          /* [B, H, N_q, D]: the R rows of K/V head g of sequence b are contiguous */
    const uint16_t *k, *v;      /* pools [pages, H_kv, page_size, D] */
    const int32_t *block_table; /* [B, table_stride] page ids; NULL: the identity, sequence b in page b */
    const int32_t *cache_len;   /* [B] keys a sequence; NULL: every sequence has len_all */
    uint16_t *o;                /* [B, H, N_q, D] */
    float *lse;                 /* [B, H, N_q] */
    float *part_o, *part_lse;   /* S > 1: [B H_kv, S, R, D] and [B H_kv, S, R], the chunks' partials */
    int64_t table_stride, page_size;
    int len_all;          /* the length of every sequence when cache_len is NULL */
    int H_kv, N_q, R, S;  /* K/V heads, new queries a sequence, rows a (b, g), chunks a sequence */
    int causal, negate_q; /* negate_q: scale < 0 runs as -Q with |scale| (attn_exp2_scale) */
    float scale_log2;     /* |scale| log2 e */
} decode_params;

/* Launches for one dtype (decode_f16.cu, decode_bf16.cu): the split kernel over B H_kv blocks of S
 * chunks and ceil(R / rows) row groups, then the combine when S > 1. Limits already checked. Returns
 * the launch's own CUDA error (an earlier one left in cudaGetLastError is neither reported nor cleared),
 * with *why saying which step failed. */
int decode_launch_f16(const decode_params *kp, int64_t B, int64_t D, void *stream, const char **why);
int decode_launch_bf16(const decode_params *kp, int64_t B, int64_t D, void *stream, const char **why);

/* The dynamic shared memory of the split kernel at head dim D for R rows a (b, g) (decode_f16.cu): the
 * Q tile and the ring; 0 for a D it is not built for. */
int decode_smem_bytes_of(int64_t D, int64_t R);

/* The bytes of partials a step of S chunks writes to its workspace: 0 when S = 1. */
size_t decode_gpu_workspace_bytes(const decode_shape *s, int64_t S);
/* The chunks S of a step on the current device (its SM count, or opt->sms; opt->chunks forces S). */
int64_t decode_gpu_chunks(const decode_shape *s, const decode_opts *opt);

/* One step from a paged cache, on the GPU. q, o, lse, c->k, c->v, c->block_table (NULL: the identity)
 * and cache_len_dev are device pointers; s->cache_len is the host's copy of the same lengths.
 * workspace: decode_gpu_workspace_bytes(s, decode_gpu_chunks(s, opt)) bytes of device memory (NULL
 * when that is 0). Launches on `stream` (a cudaStream_t) and does not synchronise. opt may be NULL;
 * its bug must be DECODE_EXACT (the planted bugs are the model's). */
attn_status decode_gpu_paged(const decode_shape *s, const int32_t *cache_len_dev, const void *q,
                             const decode_cache *c, const decode_opts *opt, void *o, float *lse,
                             void *workspace, size_t workspace_bytes, void *stream);

/* The registry's entries (CUDA builds; the registry takes them through GPU_RUN). */
attn_status stage15_run(const attn_problem *p, const attn_args *a);
attn_status stage15p_run(const attn_problem *p, const attn_args *a);
/* The workspace either takes for problem p on this device: the partials. Always built. */
size_t stage15_workspace_bytes(const attn_problem *p);

#ifdef __cplusplus
}
#endif
#endif
