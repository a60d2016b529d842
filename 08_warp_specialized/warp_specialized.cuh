/*
 * 08_warp_specialized/warp_specialized.cuh: stage 08, producer and consumer warps: the kernel body
 * that stage 08 (warp_specialized.cu) and its road (step08a_*.cu .. step08d_*.cu) build. Each of
 * those files is a recipe: #define lines that say which of the road's ideas it has taken, then
 * #include of this file, whose `#if WS_...` regions the recipe decides:
 *   08a  stage 07 + the split of roles below, with setmaxnreg    (every WS_ bit 0)
 *   08b  + WS_DEEPER_RING   4 stages at D = 64 instead of 07's 2
 *   08c  + WS_PAIRS         pairs of blocks share each K/V tile at D = 128 (non-causal)
 *   08d  + WS_CAUSAL_PAIRS  causal problems in pairs too: the shared tiles first, the own one last
 *   08   + WS_O_BY_TMA      O leaves through the copy engine
 * `make diff A=08b B=08c` shows the code one idea adds (tools/stage_diff.sh applies the recipes);
 * `sh tools/stage_diff.sh --show 08` prints the kernel of one recipe as if written by hand.
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
 *
 * No include guard: a recipe file includes this once, after its #define lines.
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
/* Warpgroup 0 produces; consumers_for() warpgroups of 64 query rows compute: Br is 128 at every head
 * dim here (stage 09 varies it) */
static __host__ __device__ constexpr int consumers_for(int) { return 2; }
static __host__ __device__ constexpr int br_for(int d) { return 64 * consumers_for(d); }
static __host__ __device__ constexpr int threads_for(int d) { return 128 * (1 + consumers_for(d)); }
#if WS_DEEPER_RING
static __host__ __device__ constexpr int stages_for(int d) { return d == 64 ? 4 : 2; }
#else
static __host__ __device__ constexpr int stages_for(int) { return 2; } /* stage 07's ring */
#endif
/* __launch_bounds__'s minimum blocks per SM */
static __host__ __device__ constexpr int blocks_per_sm(int d) { return d == 64 ? 2 : 1; }
static __host__ __device__ constexpr int bc_for(int d) { return d == 128 ? 128 : 64; }
#if WS_PAIRS
/* D = 128: pairs of blocks share each K/V tile (a 2-block cluster, TMA multicast); the maps' K/V boxes
 * are then half tiles. D = 64 and 256 keep single blocks: in stage 09, pairs gained nothing that its
 * run-to-run swings did not cover there (D = 64: 0 to +1%; D = 256: -0.2 to +1.3%).
 * WARP_SPECIALIZED_NO_PAIRS builds D = 128 without pairs, to time the split of roles alone. */
#ifndef WARP_SPECIALIZED_NO_PAIRS
#define WARP_SPECIALIZED_NO_PAIRS 0 /* -DWARP_SPECIALIZED_NO_PAIRS defines it as 1 */
#endif
static __host__ __device__ constexpr int pairs_for(int d) { return d == 128 && !WARP_SPECIALIZED_NO_PAIRS; }
#if WS_CAUSAL_PAIRS
static int use_pairs(int d, int) { return pairs_for(d); }
#else
static int use_pairs(int d, int causal) { return pairs_for(d) && !causal; } /* causal: unequal tiles */
#endif
static int keys_per_tile(int d, int causal, int64_t) { return bc_for(d) / (use_pairs(d, causal) ? 2 : 1); }
#endif
/* setmaxnreg's claim for the consumers: 240 with the SM to one block, 104 with two (tiles table) */
static constexpr int PRODUCER_REGS = 24;
static __host__ __device__ constexpr int consumer_regs_for(int d) {
    return hop_consumer_regs(threads_for(d), blocks_per_sm(d), PRODUCER_REGS);
}
static_assert(consumer_regs_for(64) == 104 && consumer_regs_for(128) == 240, "tiles table above");
/* Q, the K ring, the V ring, 1 + 4 x stages mbarriers, and 1 KB to round the base up to 1024 */
static __host__ __device__ constexpr int smem_bytes(int d) {
    return hop_tile_bytes(br_for(d), d) + 2 * stages_for(d) * hop_tile_bytes(bc_for(d), d) +
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
    smem_layout s; /* empty barriers for K and V; Q's has none */
    hop_pipeline_smem<S>(base, hop_tile_bytes(br_for(D), D), KV, &s.q, &s.k, &s.v, &s.q_bar, &s.k_bar,
                         &s.v_bar, 1);
    return s;
}

#if !WS_PAIRS
/*
 * The producer (one thread): Q, then K_j and V_j for every tile the row block visits, in visiting
 * order (hop_produce_kv: each use of a buffer but the first waits until the consumers have released
 * the one before). Pairs (08c on) call the kit's hop_produce_row_block instead.
 */
template <int D>
static __device__ __forceinline__ void produce(const hop_attn_params *p, const smem_layout *sm, int q0,
                                               int n_tiles, int bh) {
    constexpr int BC = bc_for(D), S = stages_for(D);
    hop_load_tile<D>(sm->q, &p->q_map, hop_ring_full(sm->q_bar, hop_ring_at<1>(0)), br_for(D), q0, bh);
    for (int it = 0; it < n_tiles; ++it) /* from the last tile down (the masked ones first), whole tiles */
        hop_produce_kv<D, BC, 0>(p, sm->k, sm->v, sm->k_bar, sm->v_bar, hop_ring_at<S>(it), n_tiles - 1 - it,
                                 bh, 0, 0);
}
#endif

/*
 * One key tile for one consumer warpgroup (hop_key_tile): wait for K_j, S = Q K^T, release K_j, mask
 * (MASK tiles only), online softmax, O *= alpha, wait for V_j, O += P V, release V_j. As in stage 07
 * each wgmma batch is waited for at once; what is gone is the block-wide barrier.
 */
#if WS_PAIRS
template <int BF16, int D, int BC, int CAUSAL, int PAIR, int MASK>
static __device__ __forceinline__ void key_tile(const hop_attn_params *p, const smem_layout *sm,
                                                hop_rows<D> *r, int it, int j, int wg, int row0, int shared) {
#else
template <int BF16, int D, int CAUSAL, int MASK>
static __device__ __forceinline__ void key_tile(const hop_attn_params *p, const smem_layout *sm,
                                                hop_rows<D> *r, int it, int j, int wg, int row0) {
    constexpr int BC = bc_for(D), PAIR = 0, shared = 0; /* releases: one arrival a thread, this block's */
#endif
    constexpr int S = stages_for(D);
    const hop_ring_state st = hop_ring_at<S>(it);
    hop_key_tile<BF16, D, br_for(D), BC, CAUSAL, MASK>(p, sm->q + wg * 64 * 128, sm->k, sm->v, sm->k_bar,
                                                       sm->v_bar, st, r, j, row0, hop_no_window(), 0,
                                                       hop_ring_releaser<PAIR>{shared});
}

#if WS_PAIRS
/* A consumer warpgroup's row block: the tiles it shares with the other block of a pair (all of them,
 * but for a causal pair's later block) from the last down, masked ones first, then this block's own
 * (masked), then O and LSE. */
template <int BF16, int D, int BC, int CAUSAL, int PAIR>
#if WS_O_BY_TMA
static __device__ __forceinline__ void consume_item(const hop_attn_o_params *op, const smem_layout *sm,
                                                    int q0, int64_t bh, int wg, hop_key_range kr,
                                                    int shared) {
    const hop_attn_params *p = &op->a;
#else
static __device__ __forceinline__ void consume_item(const hop_attn_params *p, const smem_layout *sm, int q0,
                                                    int64_t bh, int wg, hop_key_range kr, int shared) {
#endif
#else
/* A consumer warpgroup's row block: the masked tiles first, then the plain ones, then O and LSE. */
template <int BF16, int D, int CAUSAL>
static __device__ __forceinline__ void consume(const hop_attn_params *p, const smem_layout *sm,
                                               hop_key_range kr, int wg, int q0, int64_t bh) {
#endif
    hop_rows<D> r;
    hop_rows_init<D>(&r);
    const int row0 = q0 + hop_thread_row(wg);
    hop_ring_wait_full(sm->q_bar, hop_ring_at<1>(0));
#if WS_PAIRS
    int it = 0, j = shared - 1;
    for (; j >= kr.n_plain; --j, ++it) key_tile<BF16, D, BC, CAUSAL, PAIR, 1>(p, sm, &r, it, j, wg, row0, 1);
    for (; j >= 0; --j, ++it) key_tile<BF16, D, BC, CAUSAL, PAIR, 0>(p, sm, &r, it, j, wg, row0, 1);
#if WS_CAUSAL_PAIRS
    for (j = shared; j < kr.n_tiles; ++j, ++it)
        key_tile<BF16, D, BC, CAUSAL, PAIR, 1>(p, sm, &r, it, j, wg, row0, 0);
#endif
#else
    int it = 0, j = kr.n_tiles - 1;
    for (; j >= kr.n_plain; --j, ++it) key_tile<BF16, D, CAUSAL, 1>(p, sm, &r, it, j, wg, row0);
    for (; j >= 0; --j, ++it) key_tile<BF16, D, CAUSAL, 0>(p, sm, &r, it, j, wg, row0);
#endif
#if WS_O_BY_TMA
    /* O leaves through the copy engine, staged in this warpgroup's rows of the Q tile (region k of the
     * tile at + k * Br rows x 128 bytes), which its last S = Q K^T no longer reads. */
    hop_store_o_through_tma<BF16, D, hop_tile_bytes(br_for(D), 64)>(op, sm->q + wg * hop_tile_bytes(64, 64),
                                                                    &r, bh, q0, wg, HOP_BAR_O_STAGING + wg);
#else
    hop_store_o_lse<BF16, D>(p, &r, bh, row0);
#endif
}

#if WS_PAIRS
/* A consumer warpgroup: a pair's block past N only passes the tiles on (hop_ring_pass). */
template <int BF16, int D, int BC, int CAUSAL, int PAIR>
#if WS_O_BY_TMA
static __device__ __forceinline__ void consume(const hop_attn_o_params *op, const smem_layout *sm, int wg,
                                               int q0, int64_t bh, hop_key_range kr, int shared) {
    if (PAIR && q0 >= op->a.n) {
#else
static __device__ __forceinline__ void consume(const hop_attn_params *op, const smem_layout *sm, int wg,
                                               int q0, int64_t bh, hop_key_range kr, int shared) {
    if (PAIR && q0 >= op->n) {
#endif
        hop_ring_pass<stages_for(D)>(sm->k_bar, sm->v_bar, kr.n_tiles);
        return;
    }
    consume_item<BF16, D, BC, CAUSAL, PAIR>(op, sm, q0, bh, wg, kr, shared);
#if WS_O_BY_TMA
    /* the block exits once the engine has read the staging, without waiting for the global writes */
    if ((threadIdx.x & 127) == 0) hop_tma_store_wait_read();
#endif
}

#endif
extern __shared__ __align__(1024) unsigned char smem_raw[];

#if WS_PAIRS
template <int BF16, int D, int BC, int CAUSAL, int PAIR>
__global__ void __launch_bounds__(threads_for(D), blocks_per_sm(D))
#if WS_O_BY_TMA
    ROAD_KERNEL(const __grid_constant__ hop_attn_o_params op) {
    const hop_attn_params &p = op.a;
#else
    ROAD_KERNEL(const __grid_constant__ hop_attn_params p) {
    const hop_attn_params &op = p;
#endif
    constexpr int S = stages_for(D), CONSUMERS = 128 * consumers_for(D);
    /* arrivals that free a K/V buffer: every consumer thread; PAIR: every consumer warp of both blocks */
    constexpr int KV_READERS = PAIR ? 2 * CONSUMERS / 32 : CONSUMERS;
    int mb;
    const int64_t bh = hop_block_head<CAUSAL, PAIR + 1>(&p, &mb); /* pairs: units of two row blocks */
    if (bh < 0) return; /* the last grid.z slice may reach past B*H: whole clusters, no barrier skipped */
#else
template <int BF16, int D, int CAUSAL>
__global__ void __launch_bounds__(threads_for(D), blocks_per_sm(D))
    ROAD_KERNEL(const __grid_constant__ hop_attn_params p) {
    constexpr int BC = bc_for(D), S = stages_for(D), CONSUMERS = 128 * consumers_for(D);
    constexpr int KV_READERS = CONSUMERS; /* arrivals that free a K/V buffer: every consumer thread */
    int mb;
    const int64_t bh = hop_block_head<CAUSAL, 1>(&p, &mb);
    if (bh < 0) return; /* the last grid.z slice may reach past B*H: whole blocks, no barrier skipped */
#endif
    const int q0 = mb * br_for(D);
    const smem_layout sm = smem_map<D>((hop_smem_addr(smem_raw) + 1023u) & ~1023u);
    const hop_key_range kr = hop_key_tiles<br_for(D), BC, CAUSAL>(q0, p.n);
#if WS_PAIRS
#if WS_CAUSAL_PAIRS
    /* the tiles the other block of the pair (row block mb ^ 1) visits too */
    const int shared =
        PAIR ? min(kr.n_tiles, hop_key_tiles<br_for(D), BC, CAUSAL>((mb ^ 1) * br_for(D), p.n).n_tiles)
             : kr.n_tiles;
#else
    const int shared = kr.n_tiles; /* non-causal: both blocks of a pair visit every tile */
#endif
    /* PAIR: the other block's barriers must exist before our copies or arrivals reach them */
    hop_pipeline_init<S, PAIR>(sm.q_bar, 0, sm.k_bar, sm.v_bar, KV_READERS);
#else

    hop_pipeline_init<S, 0>(sm.q_bar, 0, sm.k_bar, sm.v_bar, KV_READERS);
#endif
    const int wg = (int)(threadIdx.x >> 7);
    if (wg == 0) { /* producer: one branch of the if, so that setmaxnreg applies to the whole warpgroup */
        hop_regs_release<PRODUCER_REGS>();
        if (threadIdx.x == 0)
#if WS_PAIRS
            hop_produce_row_block<D, br_for(D), BC, S, PAIR>(&p, sm.q, sm.q_bar, sm.k, sm.v, sm.k_bar,
                                                             sm.v_bar, q0, kr.n_tiles, shared, (int)bh,
                                                             hop_pair_rank<PAIR>());
#else
            produce<D>(&p, &sm, q0, kr.n_tiles, (int)bh);
#endif
    } else {
        hop_regs_claim<consumer_regs_for(D)>();
#if WS_PAIRS
        consume<BF16, D, BC, CAUSAL, PAIR>(&op, &sm, wg - 1, q0, bh, kr, shared);
#else
        consume<BF16, D, CAUSAL>(&p, &sm, kr, wg - 1, q0, bh);
#endif
    }
}

/* ---- host side ----------------------------------------------------------------------------------- */

#if WS_PAIRS
/* A block per row block (kit/grid_order.h); pairs at D = 128 as clusters of two. */
template <int BF16, int D, int BC, int CAUSAL, int PAIR>
static attn_status launch_tiles(const hop_attn_params *kp, cudaStream_t stream) {
#if WS_O_BY_TMA
    void (*kern)(const hop_attn_o_params) = ROAD_KERNEL<BF16, D, BC, CAUSAL, PAIR>;
    hop_attn_o_params op = {};
    op.a = *kp;
    attn_status st = hop_tensor_map(&op.o_map, kp->o, kp->bh, kp->n, D, 64); /* one warpgroup's rows */
    if (st != ATTN_OK ||
        (st = hop_smem_opt_in((const void *)kern, smem_bytes(D), "stage " ROAD_ID)) != ATTN_OK)
        return st;
#else
    void (*kern)(const hop_attn_params) = ROAD_KERNEL<BF16, D, BC, CAUSAL, PAIR>;
    hop_attn_params op = *kp;
    attn_status st = hop_smem_opt_in((const void *)kern, smem_bytes(D), "stage " ROAD_ID);
    if (st != ATTN_OK) return st;
#endif
    const unsigned tr = (unsigned)((kp->n + br_for(D) - 1) / br_for(D));
    dim3 grid(PAIR ? (tr + 1u) & ~1u : tr, (unsigned)(kp->bh < HOP_GRID_YZ ? kp->bh : HOP_GRID_YZ),
              (unsigned)((kp->bh + HOP_GRID_YZ - 1) / HOP_GRID_YZ));
    if (!PAIR)
        return hop_launch((const void *)kern, grid, threads_for(D), smem_bytes(D), stream, (void *)&op,
                          "stage " ROAD_ID " kernel (" HOP_STR(ROAD_KERNEL) ")");
    int fit = 0;
    if ((st = hop_pair_clusters_fit((const void *)kern, threads_for(D), smem_bytes(D),
                                    "stage " ROAD_ID "'s D = 128 kernel", &fit)) != ATTN_OK)
        return st;
    return hop_launch_pairs((const void *)kern, grid, threads_for(D), smem_bytes(D), stream, (void *)&op,
                            "stage " ROAD_ID " kernel (" HOP_STR(ROAD_KERNEL) ", clusters of two)");
}
template <int BF16, int D, int CAUSAL>
static attn_status launch(const hop_attn_params *kp, cudaStream_t stream) {
#if WS_CAUSAL_PAIRS
    if constexpr (pairs_for(D))
#else
    if constexpr (pairs_for(D) && !CAUSAL)
#endif
        return launch_tiles<BF16, D, bc_for(D), CAUSAL, 1>(kp, stream);
    else
        return launch_tiles<BF16, D, bc_for(D), CAUSAL, 0>(kp, stream);
}

HOP_STAGE_ENTRY_PER_PROBLEM_FOR(ROAD_RUN, ROAD_ID, ROAD_BF16)
#else
template <int BF16, int D, int CAUSAL>
static attn_status launch(const hop_attn_params *kp, cudaStream_t stream) {
    void (*kern)(const hop_attn_params) = ROAD_KERNEL<BF16, D, CAUSAL>;
    attn_status st = hop_smem_opt_in((const void *)kern, smem_bytes(D), "stage " ROAD_ID);
    if (st != ATTN_OK) return st;
    dim3 grid((unsigned)((kp->n + br_for(D) - 1) / br_for(D)),
              (unsigned)(kp->bh < HOP_GRID_YZ ? kp->bh : HOP_GRID_YZ),
              (unsigned)((kp->bh + HOP_GRID_YZ - 1) / HOP_GRID_YZ));
    return hop_launch((const void *)kern, grid, threads_for(D), smem_bytes(D), stream, (void *)kp,
                      "stage " ROAD_ID " kernel (" HOP_STR(ROAD_KERNEL) ")");
}

HOP_STAGE_ENTRY_FOR(ROAD_RUN, ROAD_ID, ROAD_BF16)
#endif
