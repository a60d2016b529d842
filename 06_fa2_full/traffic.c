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

/* K and V of their own shape (06m: H_kv < H, N_k != N). HBM: K and V of the B*H_kv K/V heads read once
 * (L2 keeps a K/V head for the query heads that share it). Tiles: a block loads the keys of the key tiles
 * it visits, up to the one holding its last row's last visible key, i + N_k - N when causal (n_max in
 * fa2_cpu_row_block), none for a block whose rows see no key. */
static attn_bytes stage06_bytes_kv(const attn_problem *p, int br, int bc) {
    const int64_t N = p->N, N_k = p->N_k, Tr = (N + br - 1) / br;
    const double heads = (double)p->B * (double)p->H, row = (double)p->D * TRAFFIC_ELEM;
    const double kv = (double)p->B * (double)p->H_kv * (double)N_k * row, q = traffic_array(p);
    double keys = 0.0;
    for (int64_t qt = 0; qt < Tr; qt++) {
        const int64_t last = ((qt + 1) * br < N ? (qt + 1) * br : N) - 1 + N_k - N;
        const int64_t tiled = last < 0 ? 0 : (last / bc + 1) * bc;
        keys += (double)(!p->causal ? N_k : tiled < N_k ? tiled : N_k);
    }
    attn_bytes b;
    b.hbm_read = heads * q + 2.0 * kv;
    b.hbm_written = heads * (q + 4.0 * (double)N);
    b.tile_read = heads * (q + 2.0 * keys * row);
    b.tile_written = b.hbm_written;
    return b;
}

attn_bytes stage06_bytes(const attn_problem *p, int gpus) {
    if (p->H_kv != p->H || p->N_k != p->N) return stage06_bytes_kv(p, 128, p->D <= 64 ? 128 : 64);
    return traffic_forward_tiles(p, 128, p->D <= 64 ? 128 : 64, 1, 1, 0, 1);
}

attn_bytes stage06_road_bytes(const attn_problem *p, int gpus) {
    return traffic_forward_tiles(p, 64, 64, 1, 1, 0, 1);
}
