/*
 * traffic.c: the bytes stage 12 and its model 12m move (attn_bytes, common/stage.h; the README's
 * "Bytes moved").
 *
 * traffic_backward_tiles (kit/traffic.h) with stage 12's tiles: a block per Bc = 64 keys holds K_j,
 * V_j, dK_j, dV_j on chip and walks the query tiles of Br = 64 rows (causal: from the tile of its
 * first key on), loading each tile's Q, dO, LSE and D and adding its share of dQ into the fp32
 * accumulator, 4 D bytes a row read and written by the atomics. At N = 4096, D = 64, non-causal, the
 * 64 key tiles each walk all 4096 rows, reading 2 x 128 + 8 + 256 bytes a row and writing 256, where
 * HBM sees one pass; L2 holds a head's Q, dO and accumulator (2 MiB) while its blocks run.
 */
#include "backward_tiled.h"
#include "traffic.h"

attn_bytes stage12_bytes(const attn_problem *p, int gpus) { return traffic_backward_tiles(p, 64, 64); }
