/*
 * traffic.c: the bytes flash-decoding moves (attn_bytes, common/stage.h; README.md's bandwidth
 * arithmetic), for the kernel that 15m models, with the chunks choose_chunks makes on 132 SMs.
 *
 * The split kernel: each of the B H_kv S blocks loads its R = (H / H_kv) N rows of Q and its chunk's
 * keys of K and V, once each: every key of the cache is read once, for all the query heads that share
 * its head (the point of packing them as rows). It writes R partial rows of D + 1 floats. The combine
 * reads every partial once and writes O (16 bits) and LSE. HBM: Q, K, V and the partials read once, O,
 * LSE and the partials written once. The tiles read Q once per chunk. At B = 1, H = 32, H_kv = 8, N = 1,
 * N_k = 20000, D = 128 (S = 17): K and V are 2 x 8 x 20000 x 128 x 2 = 81.9 MB, the partials 32 x 17 x
 * 129 x 4 = 281 KB each way.
 */
#include "traffic.h"
#include "decode_cpu.h"

attn_bytes stage15_bytes(const attn_problem *p, int gpus) {
    const int64_t S = choose_chunks(p->B, p->H_kv, p->N_k, DECODE_DEFAULT_SMS);
    const double rows = (double)p->B * (double)p->H * (double)p->N, D = (double)p->D;
    const double q = rows * D * TRAFFIC_ELEM,
                 kv = 2.0 * (double)p->B * (double)p->H_kv * (double)p->N_k * D * TRAFFIC_ELEM;
    const double parts = rows * (double)S * (D + 1.0) * 4.0, out = rows * (D * TRAFFIC_ELEM + 4.0);
    attn_bytes b;
    b.hbm_read = q + kv + parts;
    b.hbm_written = parts + out;
    b.tile_read = (double)S * q + kv + parts;
    b.tile_written = b.hbm_written;
    return b;
}
