/*
 * traffic.c: the bytes stage 06 (and 06m), and the road's steps 06a-06e, move (attn_bytes,
 * common/stage.h; the README's "Bytes moved").
 *
 * HBM: Q, K, V read once, O and LSE (4 bytes a row) written once. Tiles: a block of Br query rows
 * loads Q once and K, V of every key tile it visits once; causal blocks stop at the tile holding
 * their last row's key (n_max in fa2_attention_block). Stage 06 takes FA2's tiles, Br = 128 at every
 * head dim (fa2_final_tiles in fa2_traits.cuh), Bc = 128 at D <= 64 and 64 above: half as many row
 * tiles as the road's 64-row ones, so half the K and V loads (N = 4096: 32 row tiles, 64 on the road).
 * The steps 06a-06e keep stage 05's 64 x 64 tiles and change nothing of the bytes: registers,
 * swizzle and pipeline are on chip.
 */
#include "traffic.h"
#include "stage06.h"

attn_bytes stage06_bytes(const attn_problem *p, int gpus) {
    return traffic_forward_tiles(p, 128, p->D <= 64 ? 128 : 64, 1, 1, 0, 1);
}

attn_bytes stage06_road_bytes(const attn_problem *p, int gpus) {
    return traffic_forward_tiles(p, 64, 64, 1, 1, 0, 1);
}
