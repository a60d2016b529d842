/*
 * traffic.c: the bytes stage 02 moves (attn_bytes, common/stage.h; the README's "Bytes moved").
 *
 * Three kernels, each reading its inputs from device memory and writing its result there, per head
 * (e = 2 bytes, N x N scores):
 *     kernel 1  reads Q, K (2 N D e)                writes S, fp32 (4 N^2)
 *     kernel 2  reads S (4 N^2; causal: the 4 N(N+1)/2 visible scores)
 *                                                   writes P, fp16 (2 N^2), LSE (4 N)
 *     kernel 3  reads P (2 N^2), V (N D e)          writes O (N D e)
 * A block of kernel 2 sweeps its row three times, and kernel 1's threads reread q_i and k_j; those
 * re-reads hit L1 or L2 (a row of S is 16 KiB at N = 4096, a head's K 512 KiB), so they count once.
 * At N = 4096, D = 64 that is 12.1 bytes a score (12 of them S and P), where stage 03 moves 0.125
 * (8 N D bytes a head): 97 times as many. No tiles.
 */
#include "naive_gpu.h"
#include "traffic.h"

attn_bytes stage02_bytes(const attn_problem *p, int gpus) {
    const double heads = (double)p->B * (double)p->H, arr = traffic_array(p), N = (double)p->N;
    const double s_read = p->causal ? 4.0 * N * (N + 1.0) / 2.0 : 4.0 * N * N;
    return traffic_untiled(heads * (2.0 * arr + s_read + 2.0 * N * N + arr),
                           heads * (4.0 * N * N + 2.0 * N * N + 4.0 * N + arr));
}
