/*
 * traffic.c: the bytes stage 04 and its model 04m move (attn_bytes, common/stage.h; the README's
 * "Bytes moved").
 *
 * HBM: as stage 03, Q, K, V read once and O written once. Tiles: one pass, so each of the Tr =
 * ceil(N / 64) row tiles reads K and V once, 2 N D e bytes (e = 2): two thirds of stage 03's. Causal
 * still loads every tile (stage 05 skips those above the diagonal).
 */
#include "online_softmax.h"
#include "traffic.h"

attn_bytes stage04_bytes(const attn_problem *p, int gpus) {
    return traffic_forward_tiles(p, 64, 64, 1, 0, 0, 0); /* Br = Bc = 64, one pass, no skipping */
}
