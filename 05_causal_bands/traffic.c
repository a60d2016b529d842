/*
 * traffic.c: the bytes stage 05 and its model 05m move (attn_bytes, common/stage.h; the README's
 * "Bytes moved").
 *
 * HBM: Q, K, V read once, O written once. Tiles: stage 04's, but a causal row tile qt loads only the
 * key tiles 0 .. kt_end - 1 (its keys up to its last row), Tr (Tr + 1) / 2 of the Tr^2 tiles: at
 * N = 4096, 2080 of 4096, so 51% of stage 04's K and V loads. Non-causal is stage 04's count.
 */
#include "causal_bands.h"
#include "traffic.h"

attn_bytes stage05_bytes(const attn_problem *p, int gpus) {
    return traffic_forward_tiles(p, 64, 64, 1, 1, 0, 0); /* Br = Bc = 64, causal tiles skipped */
}
