/*
 * traffic.c: the bytes flash-decoding moves (attn_bytes, common/stage.h; README.md's bandwidth
 * arithmetic): stage 15's kernel (and 15p, and the model 15m, which counts its kernel's bytes), with
 * the chunks choose_chunks makes on 132 SMs.
 *
 * The split kernel: each of the B H_kv S blocks (per 64 query rows) loads its rows of Q and its
 * chunk's keys of K and V, once each: every key of the cache is read once for all the query heads that
 * share its head (the point of packing them as rows), once per grid row of 64 rows where R = (H / H_kv)
 * N exceeds 64. It writes R partial rows of D + 1 floats; the combine reads every partial once and
 * writes O (16 bits) and LSE. With one chunk (S = 1: B H_kv >= 132) the split kernel writes O and LSE
 * itself and no partial exists. HBM: Q, K, V and the partials read once, O, LSE and the partials
 * written once. 15p's block table adds 4 bytes per 64 keys of a sequence (B N_k / 16 bytes), not counted;
 * nor that a causal problem with many rows skips the tiles past its rows' last keys (a square one about
 * half of tile_read's K and V; decoding's 1 to 16 queries at the cache's end skip nothing).
 * At B = 1, H = 32, H_kv = 8, N = 1, N_k = 20000, D = 128 (S = 17): K and V are 2 x 8 x 20000 x 128 x 2
 * = 81.9 MB, the partials 32 x 17 x 129 x 4 = 281 KB each way.
 */
#include "traffic.h"
#include "decode_cpu.h"

attn_bytes stage15_bytes(const attn_problem *p, int gpus) {
    const int64_t S = choose_chunks(p->B, p->H_kv, p->N_k, DECODE_DEFAULT_SMS);
    const int64_t R = p->H / p->H_kv * p->N, rows = decode_block_rows(decode_key_warps(R));
    const double groups = (double)((R + rows - 1) / rows); /* grid rows: each reads the chunk's K and V */
    const double all = (double)p->B * (double)p->H * (double)p->N, D = (double)p->D;
    const double q = all * D * TRAFFIC_ELEM,
                 kv = 2.0 * (double)p->B * (double)p->H_kv * (double)p->N_k * D * TRAFFIC_ELEM;
    const double parts = S > 1 ? all * (double)S * (D + 1.0) * 4.0 : 0.0,
                 out = all * (D * TRAFFIC_ELEM + 4.0);
    attn_bytes b;
    b.hbm_read = q + kv + parts;
    b.hbm_written = parts + out;
    b.tile_read = (double)S * q + groups * kv + parts;
    b.tile_written = b.hbm_written;
    return b;
}
