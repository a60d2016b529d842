/*
 * 08_warp_specialized/warp_specialized.cu: stage 08, producer and consumer warps.
 *
 * What this stage adds. Stage 07 loads and computes with the same threads: after each key tile all
 * 256 threads meet at __syncthreads so that thread 0 may refill the buffer they just read, and a
 * warpgroup that finishes its tile early waits there for the other. Here the roles split:
 *   - a producer warpgroup (128 threads, one of which works) only issues TMA copies: Q once, then K_j
 *     and V_j into a ring of stages, each buffer guarded by a "full" mbarrier (the copy engine has
 *     written it) and an "empty" one (every consumer thread has finished reading it);
 *   - two consumer warpgroups (64 query rows each) only compute: wait "full", multiply, arrive on
 *     "empty". K_j's buffer is released as soon as S = Q K^T has finished, V_j's after O += P V, so the
 *     next K can land while this tile's softmax runs.
 * No __syncthreads in the key loop: each consumer runs ahead as far as the ring allows, and the two
 * drift apart, so one's softmax often runs while the other's wgmma does (stage 09 schedules that on
 * purpose). setmaxnreg moves registers to where the work is: at D = 128 and 256 the block starts with
 * 168 a thread (65536 / 384 = 170, in steps of 8); the producer drops to 24, the consumers rise to 240
 * (128 x 24 + 256 x 240 = 64512); at D = 64, two blocks to an SM, 80 become 24 and 104 (tiles table below).
 *
 * Since only producers load, two blocks can share their loads: at D = 128 the grid runs as pairs of
 * blocks (2-block clusters) on adjacent row blocks of one head. Each producer loads half of every K/V
 * tile both blocks visit and TMA multicast writes it into both; a buffer's empty barrier counts the
 * consumer warps of both blocks, so neither half is refilled before both have read it. L2 then sends
 * each K/V byte once per pair: a 64 KB K/V tile feeds 128 query rows, about 4.7 TB/s from L2 at 600
 * TFLOP/s, now halved. On the H200, which runs at its 700 W power cap under this load, bytes not moved
 * are clock kept: +2 to +4% non-causal, +1 to +3% causal at N = 4096-16384 (README). Stage 07 could
 * share only by meeting at a cluster barrier every tile; here the empty barriers already say when.
 *
 * The copy engine also takes O out: each consumer warpgroup writes O / l into its own rows of the Q tile
 * (its last S = Q K^T has read them) and one thread asks for a bulk tensor store, so the block ends once
 * the engine has read that staging, not after D / 4 register stores a thread of half-sector pieces. A
 * block's fixed cost weighs most where it has few tiles (causal, short N): measured at D = 128 causal
 * -0.1 to +4.2% (most at N = 2048), non-causal +3.3% at N = 2048 and -0.3 to -0.7% at N >= 4096; at
 * D = 64 and 256 -0.2 to +2.4% (README).
 *
 * Changed versus stage 07: 384 threads instead of 256; the refill moved from the end of the consumer's
 * tile to the producer's loop; full/empty barrier pairs instead of full barriers and __syncthreads; the
 * ring is deeper where shared memory allows (D = 64: 4 stages; the 128 x 64 tiles and two blocks per SM
 * are stage 07's); D = 128 runs in pairs, whose later causal row block visits its diagonal tile last;
 * O is stored by the copy engine (hop_store_o_through_tma) instead of from registers.
 *
 * Limits: as stage 07 (head dim 64, 128, 256; fp16, bf16; sm_90 only; N <= 2^30; B*H <= 2^31).
 *
 * Run it:    build/attn --stage 08 --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "hopper_attn.cuh"
#include "stage08.h"

/*
 * ---- tiles ----------------------------------------------------------------------------------------
 *   D     Br x Bc     consumer WGs  stages  smem: Q + stages x (K + V)   consumer registers: S + O + P
 *   64    128 x 64    2             4        16 + 4 x ( 8 +  8) =  80 KB   32 +  32 + 16 (of 104; 2/SM)
 *   128   128 x 128   2             2        32 + 2 x (32 + 32) = 160 KB   64 +  64 + 32 (of 240)
 *   256   128 x 64    2             2        64 + 2 x (32 + 32) = 192 KB   32 + 128 + 16 (of 240)
 * Warpgroup 0 is the producer; warpgroups 1 and 2 own rows 0..63 and 64..127 of the Q tile.
 * The tiles are stage 07's, so that the diff shows only the split of roles: at D = 64 two blocks share
 * an SM, and each keeps to 65536 / (2 x 384) = 85 registers a thread, 80 once rounded to 8. The
 * producer gives back 80 - 24 = 56 of its 128 threads' each; the consumers take them: 80 + 56 x 128 / 256
 * = 108, 104 rounded down to 8 (setmaxnreg's unit).
 */
static constexpr int BR = 128, THREADS = 384, CONSUMERS = 256;
static constexpr int PRODUCER_REGS = 24;
/* Br is 128 at every head dim here (stage 09 varies it) */
static __host__ __device__ constexpr int br_for(int) { return BR; }
static __host__ __device__ constexpr int bc_for(int d) { return d == 128 ? 128 : 64; }
static __host__ __device__ constexpr int stages_for(int d) { return d == 64 ? 4 : 2; }
/* D = 128: pairs of blocks share each K/V tile (a 2-block cluster, TMA multicast); the maps' K/V boxes
 * are then half tiles. D = 64 and 256 keep single blocks: in stage 09, pairs gained nothing that its
 * run-to-run swings did not cover there (D = 64: 0 to +1%; D = 256: -0.2 to +1.3%).
 * WARP_SPECIALIZED_NO_PAIRS builds D = 128 without pairs, to time the split of roles alone. */
#ifndef WARP_SPECIALIZED_NO_PAIRS
#define WARP_SPECIALIZED_NO_PAIRS 0 /* -DWARP_SPECIALIZED_NO_PAIRS defines it as 1 */
#endif
static __host__ __device__ constexpr int pairs_for(int d) { return d == 128 && !WARP_SPECIALIZED_NO_PAIRS; }
static int keys_per_tile(int d, int, int64_t) { return bc_for(d) / (pairs_for(d) ? 2 : 1); }
/* __launch_bounds__'s minimum blocks per SM */
static __host__ __device__ constexpr int blocks_per_sm(int d) { return d == 64 ? 2 : 1; }
/* setmaxnreg's claim for the consumers: 240 with the SM to one block, 104 with two (tiles table) */
static __host__ __device__ constexpr int consumer_regs_for(int d) {
    return hop_consumer_regs(THREADS, blocks_per_sm(d), PRODUCER_REGS);
}
static_assert(consumer_regs_for(64) == 104 && consumer_regs_for(128) == 240, "tiles table above");
/* Q, the K ring, the V ring, 1 + 4 x stages mbarriers, and 1 KB to round the base up to 1024 */
static __host__ __device__ constexpr int smem_bytes(int d) {
    return hop_tile_bytes(BR, d) + 2 * stages_for(d) * hop_tile_bytes(bc_for(d), d) +
           8 * (1 + 4 * stages_for(d)) + 1024;
}

/* Shared-memory addresses of one block: tiles first (1024-aligned), barriers after. */
typedef struct {
    uint32_t q, k, v; /* Q tile; K and V buffer 0 (buffer s at + s * tile bytes) */
    /* full: written by the copy engine; empty: read by every consumer thread (pairs: warp, of both
     * blocks); Q's has no empty barrier, it is loaded once (hopper_pipeline.cuh) */
    hop_ring_bars q_bar, k_bar, v_bar;
} smem_layout;

template <int D> static __device__ __forceinline__ smem_layout smem_map(uint32_t base) {
    constexpr int KV = hop_tile_bytes(bc_for(D), D), S = stages_for(D);
    smem_layout s;
    s.q = base;
    s.k = s.q + hop_tile_bytes(BR, D);
    s.v = s.k + S * KV;
    s.q_bar.full = s.v + S * KV;
    s.k_bar.full = s.q_bar.full + 8;
    s.v_bar.full = s.k_bar.full + 8 * S;
    s.k_bar.empty = s.v_bar.full + 8 * S;
    s.v_bar.empty = s.k_bar.empty + 8 * S;
    s.q_bar.empty = 0;
    return s;
}

/* The tile visited at step `it`: the tiles shared with the other block of the pair from the last down
 * to 0, then this block's own (causal: the diagonal tile of the pair's later row block). */
static __device__ __forceinline__ int tile_at(int it, int shared) {
    return it < shared ? shared - 1 - it : it;
}

/* PAIR: a block may leave once both blocks' consumers have released the last shared use of every
 * buffer: the other block then holds every copy this block sent it, and none of its arrivals is still
 * on its way here (a phase completes only after the one before). Its own tiles past the shared ones
 * (causal) it computes alone, while this block's SM takes other work. */
template <int D>
static __device__ __forceinline__ void wait_pair_released(const smem_layout *sm, int shared) {
    constexpr int S = stages_for(D);
    for (int b = 0; b < S && b < shared; ++b) { /* buffer b's last shared tile */
        const hop_ring_state st = hop_ring_last_use<S>(b, shared);
        hop_ring_wait_released(sm->k_bar, st);
        hop_ring_wait_released(sm->v_bar, st);
    }
}

/*
 * The producer (one thread): Q, then K_j and V_j for every tile the row block visits, in visiting
 * order. Each use of a buffer but the first waits until the consumers have released the one before
 * (hop_ring_wait_empty).
 */
template <int D, int PAIR>
static __device__ __forceinline__ void produce(const hop_attn_params *p, const smem_layout *sm, int q0,
                                               int n_tiles, int shared, int bh, unsigned rank) {
    constexpr int BC = bc_for(D), KV = hop_tile_bytes(BC, D), S = stages_for(D);
    hop_load_tile<D>(sm->q, &p->q_map, hop_ring_full(sm->q_bar, hop_ring_at<1>(0)), BR, q0, bh);
    for (int it = 0; it < n_tiles; ++it) {
        const hop_ring_state st = hop_ring_at<S>(it);
        const int j = tile_at(it, shared);
        hop_ring_wait_empty(sm->k_bar, st);
        hop_load_kv_tile<D, BC, PAIR>(sm->k + st.index * KV, &p->k_map, hop_ring_full(sm->k_bar, st), j * BC,
                                      bh, rank, it < shared);
        hop_ring_wait_empty(sm->v_bar, st);
        hop_load_kv_tile<D, BC, PAIR>(sm->v + st.index * KV, &p->v_map, hop_ring_full(sm->v_bar, st), j * BC,
                                      bh, rank, it < shared);
    }
    if (PAIR) wait_pair_released<D>(sm, shared);
}

/*
 * One key tile for one consumer warpgroup: wait for K_j, S = Q K^T, release K_j, mask (MASK tiles only),
 * online softmax, O *= alpha, wait for V_j, O += P V, release V_j. As in stage 07 each wgmma batch is
 * waited for at once; what is gone is the block-wide barrier.
 */
template <int BF16, int D, int CAUSAL, int PAIR, int MASK>
static __device__ __forceinline__ void key_tile(const hop_attn_params *p, const smem_layout *sm,
                                                hop_rows<D> *r, int it, int j, int wg, int row0, int shared) {
    constexpr int BC = bc_for(D), KV = hop_tile_bytes(BC, D), S = stages_for(D);
    const hop_ring_state st = hop_ring_at<S>(it);
    float s[BC / 2], alpha[2];
    uint32_t pf[BC / 16][4];

    hop_ring_wait_full(sm->k_bar, st);
    hop_issue_s<BF16, D, BR, BC>(s, sm->q + wg * 64 * 128, sm->k + st.index * KV, p->negate_q);
    hop_wgmma_wait<0>();
    hop_settle(s);
    hop_ring_release<PAIR>(sm->k_bar, st, shared);
    if (MASK) hop_mask<BC, CAUSAL>(s, j * BC, row0, p->n);
    hop_online_softmax<BC>(s, r->m, r->l, alpha, p->scale_log2);
    hop_pack_p<BF16, BC>(s, pf);
    hop_rescale_o<D>(r->o, alpha);
    hop_ring_wait_full(sm->v_bar, st);
    hop_issue_pv<BF16, D, BC>(r->o, pf, sm->v + st.index * KV);
    hop_wgmma_wait<0>();
    hop_settle(r->o);
    hop_ring_release<PAIR>(sm->v_bar, st, shared);
}

/* A pair's block past N (Tr odd) computes nothing; its consumers only pass each tile on, so that the
 * other block's producer may refill the buffers it shares. */
template <int D> static __device__ __forceinline__ void pass_tiles(const smem_layout *sm, int n_tiles) {
    constexpr int S = stages_for(D);
    for (int it = 0; it < n_tiles; ++it) {
        const hop_ring_state st = hop_ring_at<S>(it);
        hop_ring_wait_full(sm->k_bar, st);
        hop_ring_release<1>(sm->k_bar, st, 1);
        hop_ring_wait_full(sm->v_bar, st);
        hop_ring_release<1>(sm->v_bar, st, 1);
    }
}

/* A consumer warpgroup's whole row block: the shared tiles (masked ones first, then the plain ones),
 * then this block's own (masked), then O and LSE. */
template <int BF16, int D, int CAUSAL, int PAIR>
static __device__ __forceinline__ void consume(const hop_attn_o_params *op, const smem_layout *sm,
                                               hop_key_range kr, int shared, int wg, int q0, int64_t bh) {
    const hop_attn_params *p = &op->a;
    if (PAIR && q0 >= p->n) {
        pass_tiles<D>(sm, kr.n_tiles);
        return;
    }
    hop_rows<D> r;
    hop_rows_init<D>(&r);
    const int row0 = q0 + hop_thread_row(wg);
    hop_ring_wait_full(sm->q_bar, hop_ring_at<1>(0));
    int it = 0, j = shared - 1;
    for (; j >= kr.n_plain; --j, ++it) key_tile<BF16, D, CAUSAL, PAIR, 1>(p, sm, &r, it, j, wg, row0, 1);
    for (; j >= 0; --j, ++it) key_tile<BF16, D, CAUSAL, PAIR, 0>(p, sm, &r, it, j, wg, row0, 1);
    for (j = shared; j < kr.n_tiles; ++j, ++it)
        key_tile<BF16, D, CAUSAL, PAIR, 1>(p, sm, &r, it, j, wg, row0, 0);
    /* O leaves through the copy engine, staged in this warpgroup's rows of the Q tile (region k of the
     * tile at + k * Br rows x 128 bytes), which its last S = Q K^T no longer reads. The block exits as
     * soon as the engine has read the staging, without waiting for the global writes. */
    hop_store_o_through_tma<BF16, D, hop_tile_bytes(BR, 64)>(op, sm->q + wg * hop_tile_bytes(64, 64), &r, bh,
                                                             q0, wg, HOP_BAR_O_STAGING + wg);
    if ((threadIdx.x & 127) == 0) hop_tma_store_wait_read();
}

extern __shared__ __align__(1024) unsigned char smem_raw[];

template <int BF16, int D, int CAUSAL>
__global__ void __launch_bounds__(THREADS, blocks_per_sm(D))
    warp_specialized_kernel(const __grid_constant__ hop_attn_o_params op) {
    const hop_attn_params &p = op.a;
    constexpr int BC = bc_for(D), S = stages_for(D), PAIR = pairs_for(D);
    /* arrivals that free a K/V buffer: every consumer thread; PAIR: every consumer warp of both blocks */
    constexpr int KV_READERS = PAIR ? 2 * CONSUMERS / 32 : CONSUMERS;
    int mb;
    const int64_t bh = hop_block_head<CAUSAL, PAIR + 1>(&p, &mb); /* pairs: units of two row blocks */
    if (bh < 0) return; /* the last grid.z slice may reach past B*H: whole clusters, no barrier skipped */
    const int q0 = mb * BR;
    const smem_layout sm = smem_map<D>((hop_smem_addr(smem_raw) + 1023u) & ~1023u);
    const hop_key_range kr = hop_key_tiles<BR, BC, CAUSAL>(q0, p.n);
    /* the tiles the other block of the pair (row block mb ^ 1) visits too */
    const int shared =
        PAIR ? min(kr.n_tiles, hop_key_tiles<BR, BC, CAUSAL>((mb ^ 1) * BR, p.n).n_tiles) : kr.n_tiles;

    /* PAIR: the other block's barriers must exist before our copies or arrivals reach them */
    hop_pipeline_init<S, PAIR>(sm.q_bar, 0, sm.k_bar, sm.v_bar, KV_READERS);
    const int wg = (int)(threadIdx.x >> 7);
    if (wg == 0) { /* producer: one branch of the if, so that setmaxnreg applies to the whole warpgroup */
        hop_regs_release<PRODUCER_REGS>();
        if (threadIdx.x == 0)
            produce<D, PAIR>(&p, &sm, q0, kr.n_tiles, shared, (int)bh, hop_pair_rank<PAIR>());
    } else {
        hop_regs_claim<consumer_regs_for(D)>();
        consume<BF16, D, CAUSAL, PAIR>(&op, &sm, kr, shared, wg - 1, q0, bh);
    }
}

/* ---- host side ----------------------------------------------------------------------------------- */

template <int BF16, int D, int CAUSAL>
static attn_status launch(const hop_attn_params *kp, cudaStream_t stream) {
    void (*kern)(const hop_attn_o_params) = warp_specialized_kernel<BF16, D, CAUSAL>;
    hop_attn_o_params op = {};
    op.a = *kp;
    attn_status st = hop_tensor_map(&op.o_map, kp->o, kp->bh, kp->n, D, 64); /* one warpgroup's rows */
    if (st != ATTN_OK || (st = hop_smem_opt_in((const void *)kern, smem_bytes(D), "stage 08")) != ATTN_OK)
        return st;
    const unsigned tr = (unsigned)((kp->n + BR - 1) / BR);
    dim3 grid(pairs_for(D) ? (tr + 1u) & ~1u : tr, (unsigned)(kp->bh < HOP_GRID_YZ ? kp->bh : HOP_GRID_YZ),
              (unsigned)((kp->bh + HOP_GRID_YZ - 1) / HOP_GRID_YZ));
    if (!pairs_for(D))
        return hop_launch((const void *)kern, grid, THREADS, smem_bytes(D), stream, (void *)&op,
                          "stage 08 kernel (warp_specialized_kernel)");
    int fit = 0;
    if ((st = hop_pair_clusters_fit((const void *)kern, THREADS, smem_bytes(D), "stage 08's D = 128 kernel",
                                    &fit)) != ATTN_OK)
        return st;
    return hop_launch_pairs((const void *)kern, grid, THREADS, smem_bytes(D), stream, (void *)&op,
                            "stage 08 kernel (warp_specialized_kernel, clusters of two)");
}

HOP_STAGE_ENTRY_PER_PROBLEM(stage08_run, "08")
