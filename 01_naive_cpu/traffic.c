/*
 * traffic.c: the bytes stage 01 moves (attn_bytes, common/stage.h; the README's "Bytes moved").
 *
 * Each input read once and each output written once, per head: Q, K, V (3 N D e bytes, e = 2), O
 * (N D e) and LSE (4 N). That is the least any stage can move. The stage decodes a head's K and V to
 * float once (2 N D 4 bytes: 256 KiB at N = 512, D = 64) and reads them again for every row; they stay
 * in the CPU's caches, so they count as on chip, as a GPU's shared memory would. No tiles.
 */
#include "naive_cpu.h"
#include "traffic.h"

attn_bytes stage01_bytes(const attn_problem *p, int gpus) {
    const double heads = (double)p->B * (double)p->H, arr = traffic_array(p);
    return traffic_untiled(heads * 3.0 * arr, heads * (arr + 4.0 * (double)p->N));
}
