/*
 * traffic.h: the arithmetic behind each stage's byte count (attn_bytes, common/stage.h), in plain C so
 * that a build without CUDA counts the GPU stages' bytes too. A stage's traffic.c says which tiles it
 * loads; the sums over its row tiles or key tiles are here, once.
 *
 * The unit of every count is one head (B*H of them run the same tiles). With e = 2 bytes an element
 * (fp16 and bf16 alike), one [N, D] array is N*D*e bytes: at N = 4096, D = 64, 512 KiB. A tile that
 * holds rows past N reads only the real ones (the loads zero-fill the rest on chip, TMA included), so
 * a pass over every key tile reads exactly N rows of K.
 */
#ifndef ATTN_TRAFFIC_H
#define ATTN_TRAFFIC_H

#include <stdint.h>

#include "attn.h"
#include "stage.h"

#define TRAFFIC_ELEM 2.0 /* bytes of one fp16 or bf16 element */

/* One [N, D] 16-bit array of one head, in bytes. */
static inline double traffic_array(const attn_problem *p) { return (double)p->N * (double)p->D * TRAFFIC_ELEM; }

/* Keys a row tile of rows q0 .. q0+br-1 loads under a causal mask when the tiles past its last row's
 * key tile are skipped (stage 05's kt_end, 06's n_max, 07-09's hop_key_tiles): whole key tiles up to
 * the one holding key min(N, q0 + br) - 1, and no key past N. */
static inline int64_t traffic_causal_keys(int64_t N, int64_t q0, int br, int bc) {
    const int64_t last = (q0 + br < N ? q0 + br : N), tiles = (last + bc - 1) / bc;
    return tiles * bc < N ? tiles * bc : N;
}

/*
 * A forward stage of row tiles (03-09): a block per br query rows of one head loads its Q rows once,
 * then K (k_loads times: 2 for stage 03's two passes) and V of every key tile it visits, and stores
 * its O rows (and LSE). skips: 1 when a causal block skips the tiles above the diagonal (05 on), 0
 * when it loads them and masks them (03, 04). pairs: 1 when two blocks of adjacent row tiles (2i,
 * 2i+1) share each K/V tile, each loading half (08 and 09 at D = 128): the pair loads what its later
 * block visits, once. HBM: Q, K, V read once, O (and LSE) written once, whatever the tiles.
 */
static inline attn_bytes traffic_forward_tiles(const attn_problem *p, int br, int bc, int k_loads, int skips,
                                                 int pairs, int writes_lse) {
    const int64_t N = p->N, Tr = (N + br - 1) / br;
    const double heads = (double)p->B * (double)p->H, arr = traffic_array(p), row = (double)p->D * TRAFFIC_ELEM;
    double keys = 0.0; /* key rows loaded (K, and V alike) over the head's row tiles */
    for (int64_t qt = 0; qt < Tr; qt += pairs ? 2 : 1) {
        const int64_t last_qt = pairs && qt + 1 < Tr ? qt + 1 : qt;
        keys += (double)(p->causal && skips ? traffic_causal_keys(N, last_qt * br, br, bc) : N);
    }
    const double lse = writes_lse ? 4.0 * (double)N : 0.0;
    attn_bytes b;
    b.hbm_read = heads * 3.0 * arr;
    b.hbm_written = heads * (arr + lse);
    b.tile_read = heads * (arr + (k_loads + 1) * keys * row);
    b.tile_written = b.hbm_written;
    return b;
}

/*
 * A backward stage of key tiles (12, 13): three kernels per head.
 *   preprocess  reads O and dO, writes D (4 bytes a row) and zeroes the fp32 dQ accumulator (4 D a row)
 *   main        a block per bc keys loads K_j and V_j once, and for every query tile it visits the
 *               rows' Q, dO, LSE and D, and adds its share of dQ into the accumulator (a read and a
 *               write of 4 D bytes a row: an atomic add, or 13d's load and store); it writes dK, dV
 *   convert     reads the accumulator, writes dQ
 * Causal: the block of keys key0 .. visits the query rows from the first query tile that sees key0,
 * (key0 / br) * br, to N. HBM: each array once per kernel, the accumulator's adds kept by L2.
 */
static inline attn_bytes traffic_backward_tiles(const attn_problem *p, int br, int bc) {
    const int64_t N = p->N, Tc = (N + bc - 1) / bc;
    const double heads = (double)p->B * (double)p->H, arr = traffic_array(p), D = (double)p->D;
    const double acc = 4.0 * D * (double)N, rows = 4.0 * (double)N; /* the accumulator; D or LSE */
    double visits = 0.0; /* query rows visited, summed over the key tiles */
    for (int64_t kt = 0; kt < Tc; kt++) visits += (double)(N - (p->causal ? (kt * bc / br) * br : 0));
    attn_bytes b;
    b.hbm_read = heads * (2.0 * arr + 4.0 * arr + 2.0 * rows + acc + acc);
    b.hbm_written = heads * (rows + acc + acc + 2.0 * arr + arr);
    b.tile_read = heads * (2.0 * arr + 2.0 * arr + visits * (2.0 * D * TRAFFIC_ELEM + 8.0 + 4.0 * D) + acc);
    b.tile_written = heads * (rows + acc + visits * 4.0 * D + 2.0 * arr + arr);
    return b;
}

/* a + b, count by count: the kernels of a multi-step stage (stage 10's calls). */
static inline attn_bytes traffic_add(attn_bytes a, attn_bytes b, double times) {
    a.hbm_read += times * b.hbm_read, a.hbm_written += times * b.hbm_written;
    a.tile_read += times * b.tile_read, a.tile_written += times * b.tile_written;
    return a;
}

/* No tiles (01, 02, 11): what the blocks load is what each kernel reads, once. */
static inline attn_bytes traffic_untiled(double read, double written) {
    const attn_bytes b = {read, written, read, written};
    return b;
}

#endif
