/*
 * traffic.c: the bytes stage 03 and its model 03m move (attn_bytes, common/stage.h; the README's
 * "Bytes moved").
 *
 * HBM: Q, K, V read once and O written once: the N x N matrix never leaves the chip. Tiles: a block
 * of Br = 64 query rows loads its Q tile once, then walks every key tile twice, K alone in pass one
 * and K and V in pass two: Tr = ceil(N / 64) row tiles each read 3 N D e bytes of K and V (e = 2).
 * Causal changes nothing: every tile is loaded and masked. At N = 4096 that is 64 x 3 = 192 times
 * the N D e of K, which L2 serves: a head's K and V (1 MiB at D = 64) stay there while its blocks run.
 */
#include "tiled.h"
#include "traffic.h"

attn_bytes stage03_bytes(const attn_problem *p, int gpus) {
    return traffic_forward_tiles(p, 64, 64, 2, 0, 0, 0); /* Br = Bc = 64, K twice, no skipping, no LSE */
}
