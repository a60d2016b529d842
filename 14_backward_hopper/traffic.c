/*
 * traffic.c: the bytes stage 14 and 14d move (attn_bytes, common/stage.h; the README's "Bytes moved").
 *
 * Stage 13's tiles (traffic_backward_tiles, kit/traffic.h): a block per Bc = 128 keys walks the query
 * tiles of Br = 64 rows. What changes is who moves them (the copy engine: Q, dO, K, V in, and dQ's
 * shares added into the fp32 accumulator by its reduce-add, a read and a write of 4 D bytes a row at
 * L2 as an atomic add is), not how many; 14d adds with plain loads and stores, the same bytes.
 */
#include "traffic.h"
#include "backward_hopper.h"

attn_bytes stage14_bytes(const attn_problem *p, int gpus) {
    return traffic_backward_tiles(p, STAGE14_BR, STAGE14_BC);
}
