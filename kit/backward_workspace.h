/*
 * backward_workspace.h: the scratch of the backward stages that sum dQ over key tiles (13, 13d, 14,
 * 14d), in plain C, so that the registry can size it in a build without CUDA and the kernels split it
 * the same way. One layout for all of them:
 *
 *     | dQ accumulator: fp32 [B, H, N, D] | D_i = dO_i . O_i: fp32 [B, H, N] | order: int [B, H, Tr] |
 *
 * The accumulator is zeroed before the main kernel, which adds every key tile's share of dQ into it;
 * the last kernel turns it into dQ. `order` is the deterministic modes' (13d, 14d): per query tile of
 * Br rows, how many key tiles have added their share so far. O(N) per head, never O(N^2).
 */
#ifndef ATTN_BACKWARD_WORKSPACE_H
#define ATTN_BACKWARD_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

typedef struct {
    float *dq_acc; /* B H N D floats */
    float *delta;  /* B H N floats */
    int *order;    /* B H ceil(N / Br) ints */
} bwd_workspace;

/* Bytes of the layout above for query tiles of br rows; (size_t)-1 past 9e18 (the harness refuses it). */
static inline size_t bwd_workspace_bytes(const attn_problem *p, int br) {
    const double rows = (double)p->B * (double)p->H * (double)p->N;
    const double tiles = (double)p->B * (double)p->H * (double)((p->N + br - 1) / br);
    /* dQ in fp32 (4 D bytes a row), D_i (4 bytes a row), a counter per query tile (4 bytes) */
    const double bytes = rows * 4.0 * (double)p->D + rows * 4.0 + tiles * 4.0;
    return bytes > 9.0e18 ? (size_t)-1 : (size_t)bytes;
}

/* The three arrays inside the caller's workspace (bwd_workspace_bytes of it). */
static inline bwd_workspace bwd_workspace_split(void *workspace, const attn_problem *p) {
    const int64_t rows = p->B * p->H * p->N;
    bwd_workspace w;
    w.dq_acc = (float *)workspace;
    w.delta = w.dq_acc + rows * p->D;
    w.order = (int *)(w.delta + rows);
    return w;
}

#endif
