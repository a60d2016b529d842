/*
 * traffic.c: the bytes stage 07 moves (attn_bytes, common/stage.h; the README's "Bytes moved").
 *
 * Stage 06's count with 07's tiles (the table in tma_wgmma.cu): Br = 128 rows a block, Bc = 64 keys
 * at D = 64 and 256, 128 at D = 128; causal blocks stop at their last row's key tile (hop_key_tiles).
 * TMA reads no row past N (it fills them with zeros on chip), so a full walk reads N rows of K and V.
 */
#include "traffic.h"
#include "stage07.h"

attn_bytes stage07_bytes(const attn_problem *p, int gpus) {
    return traffic_forward_tiles(p, 128, p->D == 128 ? 128 : 64, 1, 1, 0, 1);
}
