/*
 * traffic.c: the bytes stage 09 moves (attn_bytes, common/stage.h; the README's "Bytes moved").
 *
 * 09's tiles (br_for, narrow_bc_for, use_pairs in overlap.cu): Br = 192 at D = 64 (three consumer
 * warpgroups), 128 above; a causal block stops at its last row's key tile of Bc = 128 keys (80 at
 * D = 256); at D = 128 non-causal, pairs of blocks load each K/V tile once between them. A
 * non-causal walk reads N rows whatever its Bc (tile_keys picks 128 or 192: the padding is not read).
 * So at D = 64 a head's K and V are loaded ceil(N / 192) times, two thirds of stage 07's.
 */
#include "traffic.h"
#include "stage09.h"

attn_bytes stage09_bytes(const attn_problem *p, int gpus) {
    const int br = p->D == 64 ? 192 : 128, bc = p->D == 256 ? 80 : 128;
    return traffic_forward_tiles(p, br, bc, 1, 1, p->D == 128 && !p->causal, 1);
}
