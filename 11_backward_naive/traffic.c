/*
 * traffic.c: the bytes stage 11 moves (attn_bytes, common/stage.h; the README's "Bytes moved").
 *
 * Five kernels, each array read once per kernel that reads it, per head (e = 2; P and dS fp32 N x N):
 *     kernel 1  D        reads O, dO (2 N D e)                    writes D (4 N)
 *     kernel 2  P        reads Q, K (2 N D e), LSE (4 N)          writes P (4 N^2)
 *     kernel 3  dS       reads P (4 N^2), dO, V (2 N D e), D      writes dS (4 N^2)
 *     kernel 4  dV, dK   reads P, dS (8 N^2), dO, Q (2 N D e)     writes dV, dK (2 N D e)
 *     kernel 5  dQ       reads dS (4 N^2), K (N D e)              writes dQ (N D e)
 * 24 bytes a score in all, 16 of them read: at N = 4096, D = 64, 24.4 bytes a score with the N D
 * terms, where stage 12 moves 0.53. Kernels 4 and 5 walk P and dS down their columns, one thread an
 * element; the count assumes the threads of a column share its reads through L2, which ncu would
 * confirm or not. No tiles.
 */
#include "backward_naive.h"
#include "traffic.h"

attn_bytes stage11_bytes(const attn_problem *p, int gpus) {
    const double heads = (double)p->B * (double)p->H, arr = traffic_array(p), N = (double)p->N;
    const double read = 2.0 * arr + (2.0 * arr + 4.0 * N) + (4.0 * N * N + 2.0 * arr + 4.0 * N) +
                        (8.0 * N * N + 2.0 * arr) + (4.0 * N * N + arr);
    const double written = 4.0 * N + 4.0 * N * N + 4.0 * N * N + 2.0 * arr + arr;
    return traffic_untiled(heads * read, heads * written);
}
