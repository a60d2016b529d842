/*
 * traffic.c: the bytes stage 13 and 13d move (attn_bytes, common/stage.h; the README's "Bytes moved").
 *
 * traffic_backward_tiles (kit/traffic.h) with stage 13's tiles: a block per Bc = 128 keys walks the
 * query tiles of Br = 64 rows (causal: from query tile 2j, its first key's), so half as many walks of
 * Q, dO and the dQ accumulator as stage 12's 64-key blocks. 13d adds its shares with plain loads and
 * stores instead of atomics: the same bytes (its counters, 4 bytes a query tile, are left out).
 */
#include "backward_fa2.h"
#include "traffic.h"

attn_bytes stage13_bytes(const attn_problem *p, int gpus) { return traffic_backward_tiles(p, 64, 128); }
