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

/* Keys one head of n queries and n_k keys loads: every key tile up to the one holding the last row's
 * last visible key, row n - 1 seeing keys up to n_k - 1 when causal (n_max in fa2_cpu_row_block), none
 * for a block whose rows see no key. */
static double head_keys(int64_t n, int64_t n_k, int causal, int br, int bc) {
    double keys = 0.0;
    for (int64_t qt = 0; qt * br < n; qt++) {
        const int64_t last = ((qt + 1) * br < n ? (qt + 1) * br : n) - 1 + n_k - n;
        const int64_t tiled = last < 0 ? 0 : (last / bc + 1) * bc;
        keys += (double)(!causal ? n_k : tiled < n_k ? tiled : n_k);
    }
    return keys;
}

/* K and V of their own shape (06m: H_kv < H, N_k != N, cu_seqlens). HBM: Q, O and LSE once, K and V
 * of the K/V heads once (L2 keeps a K/V head for the query heads that share it). Tiles: each block's
 * Q and the keys of the key tiles it visits (head_keys), for each sequence of its length. */
static attn_bytes stage06_bytes_kv(const attn_problem *p, int br, int bc) {
    const double row = (double)p->D * TRAFFIC_ELEM, rows = (double)attn_rows(p);
    double keys = 0.0;
    for (int64_t b = 0; b < p->B; b++) {
        const int64_t n = p->cu_seqlens_q ? p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b] : p->N;
        const int64_t n_k = p->cu_seqlens_k ? p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b] : p->N_k;
        keys += (double)p->H * head_keys(n, n_k, p->causal, br, bc);
    }
    attn_bytes b;
    b.hbm_read = rows * row + 2.0 * (double)attn_kv_elems(p) * TRAFFIC_ELEM;
    b.hbm_written = rows * (row + 4.0);
    b.tile_read = rows * row + 2.0 * keys * row;
    b.tile_written = b.hbm_written;
    return b;
}

attn_bytes stage06_bytes(const attn_problem *p, int gpus) {
    if (p->H_kv != p->H || p->N_k != p->N || p->cu_seqlens_q)
        return stage06_bytes_kv(p, 128, p->D <= 64 ? 128 : 64);
    return traffic_forward_tiles(p, 128, p->D <= 64 ? 128 : 64, 1, 1, 0, 1);
}

attn_bytes stage06_road_bytes(const attn_problem *p, int gpus) {
    return traffic_forward_tiles(p, 64, 64, 1, 1, 0, 1);
}
