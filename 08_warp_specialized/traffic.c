/*
 * traffic.c: the bytes stage 08 moves (attn_bytes, common/stage.h; the README's "Bytes moved").
 *
 * Stage 07's tiles (Br = 128; Bc = 64 at D = 64 and 256, 128 at D = 128), with one change at D = 128:
 * pairs of blocks on adjacent row tiles (pairs_for in warp_specialized.cu), causal or not, each load
 * half of every K/V tile and TMA multicast writes it into both, so a pair reads a tile once. The
 * count pairs row tiles 2i and 2i+1 of one head; the grid pairs them across the heads when Tr is odd,
 * which moves at most one tile walk a head.
 */
#include "traffic.h"
#include "stage08.h"

attn_bytes stage08_bytes(const attn_problem *p, int gpus) {
    return traffic_forward_tiles(p, 128, p->D == 128 ? 128 : 64, 1, 1, p->D == 128, 1);
}
