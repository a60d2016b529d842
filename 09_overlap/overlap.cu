/*
 * 09_overlap/overlap.cu: stage 09, the softmax overlapped with the tensor cores.
 *
 * What this stage adds. In stage 08 a consumer warpgroup waits for every wgmma it issues: while it
 * computes exp2 (the special-function unit runs 16 per SM cycle against the tensor cores' 2048
 * multiply-adds per cycle: at D = 64 the exponentials of a tile cost about as long as its two GEMMs)
 * the tensor cores have nothing of its to do. Two schedules hide that work:
 *   1. Ping-pong between the consumer warpgroups (2, or 3 at D = 64). Named barriers (ids 4..3+W) hand
 *      a token round: a warpgroup issues its GEMMs only while it holds the token, then passes it, so
 *      the GEMMs of one run while another does its softmax:
 *          WG 1:  [GEMMs j] softmax j ......... [GEMMs j+1] softmax j+1 ...
 *          WG 2:  ......... [GEMMs j] softmax j ............ [GEMMs j+1] ...
 *   2. Inside a warpgroup, the softmax of tile j runs under O += P_(j-1) V_(j-1): each window issues
 *      S_j = Q K_j^T, rescales O by alpha_(j-1) while S_j runs, and issues the previous tile's P V; it
 *      waits only for S_j (wgmma.wait_group 1) and computes softmax j while P V runs:
 *          window j:  S_j = Q K_j^T;  O = alpha_(j-1) O;  O += P_(j-1) V_(j-1)
 *          then:      softmax j -> P_j, alpha_j      (under P V)
 *      so O always waits for exactly one alpha, applied just before the next P V is added.
 * Changed versus stage 08: the key loop became a software pipeline (a prologue computing S_0 and its
 * softmax, steps issuing S_j with P_(j-1) V_(j-1), an epilogue issuing the last P V); the GEMM issue is
 * bracketed by the ping-pong barriers. Engineering measured in README.md's road table: 3 consumer
 * warpgroups at D = 64, a key-tile width per problem at D = 128 (128 or 192 keys), and blocks that
 * loop over work units (a persistent grid; causal units pair a head's longest row block with its
 * shortest, and the last heads go in single row blocks, longest first: work_units.h), with an empty
 * barrier so that the producer can reload Q, and a lazy rescale of O (a row keeps its max m until a
 * tile's exponentials would pass 2^8, so most tiles skip O *= alpha), and at
 * D = 128 non-causal, pairs of blocks (a 2-block cluster) that share each K/V tile: each block loads
 * half of it and TMA multicast writes that half into both (use_pairs(), +1-6%). O leaves through the
 * copy engine as in stage 08 (hop_store_o_through_tma(), +1-8% here), but from a staging buffer of its
 * own where that fits: the Q tile, 08's staging, is already being refilled for the next work unit.
 *
 * Limits: as stage 07 (head dim 64, 128, 256; fp16, bf16; sm_90 only; N <= 2^30; B*H <= 2^31).
 *
 * Run it:    build/attn --stage 09 --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "hopper_attn.cuh"
#include "stage09.h"
#include "work_units.h"

/*
 * ---- tiles ----------------------------------------------------------------------------------------
 *   D     Br x Bc     consumer WGs  stages  smem: Q + stages x (K + V) + O     registers: S + O + P (of)
 *   64    192 x 128   3             4        24 + 4 x (16 + 16) + 24 = 176 KB   64 +  32 + 32 (160)
 *   128   128 x 128   2             2        32 + 2 x (32 + 32) + 32 = 192 KB   64 +  64 + 32 (240)
 *   128   128 x 192   2             2        32 + 2 x (48 + 48)      = 224 KB   96 +  64 + 48 (240)
 *   256   128 x 80    2             2        64 + 2 x (40 + 40)      = 224 KB   40 + 128 + 20 (240)
 * Warpgroup 0 is the producer; consumer warpgroup c (1..W) owns rows 64(c-1) .. 64c-1 of the Q tile.
 *
 * The tile shape per head dim (README.md's road table has what each choice measured). D = 64 runs
 * three consumer warpgroups (Br = 192): its GEMMs are short next to its exponentials, so two
 * warpgroups can be in their softmax while the third multiplies (+12 to +19% over two). D = 128
 * chooses its Bc per problem, tile_keys() below. */
static __host__ __device__ constexpr int consumers_for(int d) { return d == 64 ? 3 : 2; }
static __host__ __device__ constexpr int br_for(int d) { return 64 * consumers_for(d); }
static __host__ __device__ constexpr int threads_for(int d) { return 128 * (1 + consumers_for(d)); }
static __host__ __device__ constexpr int stages_for(int d) { return d == 64 ? 4 : 2; }
/* Bc: 128 keys, 80 at D = 256 (shared memory: 2 stages of 80-key K and V tiles and Q fill 224 of the
 * 227 KB; 80 keys measured +3 to +8% non-causal, 0 to +3% causal over 64, road table); D = 128
 * non-causal may take 192 (tile_keys) */
static __host__ __device__ constexpr int narrow_bc_for(int d) { return d == 256 ? 80 : 128; }
static constexpr int WIDE_BC_128 = 192;
/*
 * Keys per tile for a problem. Wider tiles mean fewer tiles per row, so fewer barriers, row maxima and
 * O rescales, but N rounds up to a whole tile and the padding is computed. Measured at D = 128 (road
 * table): non-causal, 192-key tiles are 1-2% faster per key than 128-key ones at N = 8192 and 16384,
 * but at N = 4096 they pad to 4224 keys (22 tiles) where 128 pads to none, and lose 7-8% (176-key
 * tiles, padding the same, 4%). So 192 is taken when its padded keys are within 1/64 of 128's.
 * Causal: 128, whose diagonal band is one tile wide (+1.4 to +3.3% over 176-key tiles at N <= 8192,
 * -1% at 16384).
 */
static int tile_keys(int d, int causal, int64_t n) {
    const int narrow = narrow_bc_for(d);
    if (d != 128 || causal) return narrow;
    const int64_t narrow_keys = (n + narrow - 1) / narrow * narrow;
    const int64_t wide_keys = (n + WIDE_BC_128 - 1) / WIDE_BC_128 * WIDE_BC_128;
    return wide_keys <= narrow_keys + narrow_keys / 64 ? WIDE_BC_128 : narrow;
}
/*
 * Pairs: non-causal problems at D = 128 run as clusters of two blocks on adjacent row blocks, which
 * (but for at most one pair in Tr, unit_item()) belong to one head. Both need every K and V tile; each
 * block loads half of it and the copy engine writes that half into both blocks, so L2 serves each K/V
 * byte once per pair. With 128 x 128 tiles a K/V tile (64 KB) feeds 128 query rows: 128 flops a byte,
 * about 4.7 TB/s of K and V at 600 TFLOP/s; pairs halve that. D = 64 and 256 measured no gain (0 to
 * +1%, and -2 to +1% at D = 256 against run-to-run swings of 5%) and run single blocks.
 * OVERLAP_NO_PAIRS builds without them.
 */
static __host__ __device__ constexpr int pairs_for(int d) {
#ifdef OVERLAP_NO_PAIRS
    return 0 * d;
#else
    return d == 128;
#endif
}
static int use_pairs(int d, int causal) { return pairs_for(d) && !causal; }
/* The K/V box of the tensor maps (HOP_STAGE_ENTRY_PER_PROBLEM asks for it): a whole tile, or half of
 * one when a pair shares it. */
static int keys_per_tile(int d, int causal, int64_t n) {
    return tile_keys(d, causal, n) / (use_pairs(d, causal) ? 2 : 1);
}
/* setmaxnreg: the producer keeps 24 registers, the consumers share the rest of the 65536, rounded down
 * to a multiple of 8 (2 consumers: 240, 3 consumers: 160) */
static constexpr int PRODUCER_REGS = 24;
static __host__ __device__ constexpr int consumer_regs_for(int d) {
    return hop_consumer_regs(threads_for(d), 1, PRODUCER_REGS);
}
static_assert(consumer_regs_for(64) == 160 && consumer_regs_for(128) == 240, "tiles table above");
/* Q, the K ring, the V ring, 2 + 4 x stages mbarriers, and 1 KB to round the base up to 1024 */
static __host__ __device__ constexpr int smem_without_staging(int d, int bc) {
    return hop_tile_bytes(br_for(d), d) + 2 * stages_for(d) * hop_tile_bytes(bc, d) +
           8 * (2 + 4 * stages_for(d)) + 1024;
}
/* Where shared memory has room for it (227 KB a block), each consumer warpgroup stages its 64-row tile
 * of O there and the copy engine stores it (hop_store_o_through_tma): D = 64 (+24 KB), D = 128 with 128-key
 * tiles (+32 KB). The 192-key tiles at D = 128 and D = 256's tiles leave no room: they store O from
 * registers. */
static __host__ __device__ constexpr int o_staging_bytes(int d, int bc) {
    return smem_without_staging(d, bc) + consumers_for(d) * hop_tile_bytes(64, d) <= 227 * 1024
               ? consumers_for(d) * hop_tile_bytes(64, d)
               : 0;
}
static __host__ __device__ constexpr int stores_o_by_tma(int d, int bc) { return o_staging_bytes(d, bc) > 0; }
static_assert(stores_o_by_tma(64, 128) && stores_o_by_tma(128, 128) && !stores_o_by_tma(128, 192) &&
                  !stores_o_by_tma(256, 80),
              "the comment above");
static __host__ __device__ constexpr int smem_bytes(int d, int bc) {
    return smem_without_staging(d, bc) + o_staging_bytes(d, bc);
}

/* Shared-memory addresses of one block: tiles first (1024-aligned), barriers after. */
typedef struct {
    uint32_t q, k, v;                  /* Q tile; K and V buffer 0 (buffer s at + s * tile bytes) */
    uint32_t o_staging;                /* consumer warpgroup wg's O tile at + wg * 64 rows x D x 2 B */
    hop_ring_bars q_bar, k_bar, v_bar; /* full: written by the copy engine; empty: read by the consumers */
} smem_layout;

template <int D, int BC> static __device__ __forceinline__ smem_layout smem_map(uint32_t base) {
    constexpr int KV = hop_tile_bytes(BC, D), S = stages_for(D);
    smem_layout s;
    s.q = base;
    s.k = s.q + hop_tile_bytes(br_for(D), D);
    s.v = s.k + S * KV;
    s.o_staging = s.v + S * KV;
    s.q_bar.full = s.o_staging + o_staging_bytes(D, BC);
    s.k_bar.full = s.q_bar.full + 8;
    s.v_bar.full = s.k_bar.full + 8 * S;
    s.q_bar.empty = s.v_bar.full + 8 * S;
    s.k_bar.empty = s.q_bar.empty + 8;
    s.v_bar.empty = s.k_bar.empty + 8 * S;
    return s;
}

/* A consumer has read K_j or V_j. With a ring of two stages (D = 128, 256) the producer's refill of this
 * buffer waits for the release, and 256 arrivals on one mbarrier are served one after another: there
 * each warp arrives once, when all its lanes are done (road table: D = 128 causal +3 to +6% at B = 4,
 * H = 32; D = 256 -0.4 to +3.4%). With four (D = 64) the refill is three tiles ahead and each thread
 * arrives for itself (one a warp measured -1.0 to +0.6% there at B = 4, H = 32, -3.4% at 2 x 8 x
 * 4097). PAIR: the buffer is refilled by both blocks' copies, so each warp (pairs always arrive per
 * warp) tells both blocks' producers (the other block's barrier found from this one's rank). The
 * barriers count what this rule sends (KV_READERS in overlap_kernel). */
static __host__ __device__ constexpr int release_per_warp(int d, int pair) {
    return pair || stages_for(d) == 2;
}
template <int D, int PAIR>
static __device__ __forceinline__ void release_kv(hop_ring_bars bars, hop_ring_state st) {
    hop_ring_release<release_per_warp(D, PAIR)>(bars, st, PAIR);
}

/*
 * The producer (one thread): for each work item, Q (once the consumers have released the previous
 * item's: Q is a ring of one buffer, its use the item), then K_j and V_j for every tile the item
 * visits, in visiting order. The ring runs on across items: `it` counts every tile the block has
 * loaded, and each use of a buffer but the first waits until the consumers have released the one
 * before (hop_ring_wait_empty). Counters are unsigned: S is a power of two, so the slot and the
 * parities hop_ring_at derives from them survive wrapping.
 */
template <int D, int BC, int CAUSAL, int PAIR>
static __device__ __forceinline__ void produce(const hop_attn_params *p, const smem_layout *sm,
                                               unsigned rank) {
    constexpr int BR = br_for(D), KV = hop_tile_bytes(BC, D), S = stages_for(D);
    const int tr = (p->n + BR - 1) / BR;
    const int64_t units = unit_count(CAUSAL, PAIR, tr, p->bh, gridDim.x);
    uint32_t it = 0, item = 0;
    int64_t u;
    for (int64_t t = 0; (u = block_unit(CAUSAL, PAIR, blockIdx.x, gridDim.x, t)) < units; ++t)
        for (int half = 0; half <= CAUSAL; ++half, ++item) {
            const work_item w = unit_item(CAUSAL, PAIR, rank, u, half, tr, p->bh, gridDim.x);
            if (w.row_block < 0) break;
            const int bh = (int)w.bh, q0 = w.row_block * BR;
            const hop_key_range kr = hop_key_tiles<BR, BC, CAUSAL>(q0, p->n);
            const hop_ring_state qs = hop_ring_at<1>(item);
            hop_ring_wait_empty(sm->q_bar, qs);
            hop_load_tile<D>(sm->q, &p->q_map, hop_ring_full(sm->q_bar, qs), BR, q0, bh);
            for (int j = kr.n_tiles - 1; j >= 0; --j, ++it) {
                const hop_ring_state st = hop_ring_at<S>(it);
                hop_ring_wait_empty(sm->k_bar, st);
                hop_load_kv_tile<D, BC, PAIR>(sm->k + st.index * KV, &p->k_map, hop_ring_full(sm->k_bar, st),
                                              j * BC, bh, rank, w.shared_kv);
                hop_ring_wait_empty(sm->v_bar, st);
                hop_load_kv_tile<D, BC, PAIR>(sm->v + st.index * KV, &p->v_map, hop_ring_full(sm->v_bar, st),
                                              j * BC, bh, rank, w.shared_kv);
            }
        }
}

/*
 * The ping-pong token, passed round the W consumer warpgroups: warpgroup wg may issue GEMMs after
 * bar.sync on its barrier, which completes when the warpgroup before it has arrived there (256
 * threads: the one waiting and the one handing over); then it arrives on the next one's. The last
 * warpgroup starts by arriving on warpgroup 0's barrier, so 0 goes first, and skips its final
 * hand-back, which nobody would take.
 */
static constexpr int PINGPONG_THREADS = 256;
static __device__ __forceinline__ void gemm_window_open(int wg) {
    hop_bar_sync(HOP_BAR_PINGPONG + wg, PINGPONG_THREADS);
}
template <int W> static __device__ __forceinline__ void gemm_window_close(int wg, int last) {
    if (!(last && wg == W - 1)) hop_bar_arrive(HOP_BAR_PINGPONG + (wg + 1) % W, PINGPONG_THREADS);
}

/* What one step hands to the next: P of the tile just computed, and the alpha that O must be scaled by
 * before P V is added to it. */
template <int BC> struct pending_pv {
    uint32_t p[BC / 16][4];
    float alpha[2];
};

/* O *= alpha, skipped when no row of the warp moved its max (the lazy softmax's alpha is exactly 1
 * then): after the first tiles that is most of them, and each skip saves 64 multiplies a thread at
 * D = 128 (D / 2) that would compete for issue slots with the other warpgroup's softmax. */
template <int D>
static __device__ __forceinline__ void rescale_o_if_needed(float (&o)[D / 2], const float (&alpha)[2]) {
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) hop_rescale_o<D>(o, alpha);
}

/* First tile of an item (the block's it-th): S_0 = Q K_0^T in its own window, waited for, then its
 * softmax (O is 0: alpha_0 scales 0). */
template <int BF16, int D, int BC, int CAUSAL, int MASK, int PAIR>
static __device__ __forceinline__ void pipeline_prologue(const hop_attn_params *p, const smem_layout *sm,
                                                         hop_rows<D> *r, pending_pv<BC> *pv, uint32_t it,
                                                         int j, int wg, int row0) {
    constexpr int KV = hop_tile_bytes(BC, D), S = stages_for(D);
    const hop_ring_state st = hop_ring_at<S>(it);
    float s[BC / 2];
    hop_ring_wait_full(sm->k_bar, st);
    gemm_window_open(wg);
    hop_issue_s<BF16, D, br_for(D), BC>(s, sm->q + wg * 64 * 128, sm->k + st.index * KV, p->negate_q);
    gemm_window_close<consumers_for(D)>(wg, 0);
    hop_wgmma_wait<0>();
    hop_settle(s);
    release_kv<D, PAIR>(sm->k_bar, st);
    if (MASK) hop_mask<BC, CAUSAL>(s, j * BC, row0, p->n);
    hop_online_softmax<BC, 1>(s, r->m, r->l, pv->alpha, p->scale_log2);
    hop_pack_p<BF16, BC>(s, pv->p);
}

/*
 * Step it (tile j, it >= 1). In one window: issue S_j; O *= alpha_(j-1) (its wgmma has finished; the
 * multiplies run under S_j); issue O += P_(j-1) V_(j-1). Then wait for S_j only, release K_j, mask,
 * softmax j while P V runs; wait for P V, release V_(j-1), and only then pack P_j into the registers
 * P V has finished reading: one P buffer, no register read by a wgmma in flight is rewritten.
 */
template <int BF16, int D, int BC, int CAUSAL, int MASK, int PAIR>
static __device__ __forceinline__ void pipeline_step(const hop_attn_params *p, const smem_layout *sm,
                                                     hop_rows<D> *r, pending_pv<BC> *pv, uint32_t it, int j,
                                                     int wg, int row0) {
    constexpr int KV = hop_tile_bytes(BC, D), S = stages_for(D);
    const hop_ring_state st = hop_ring_at<S>(it), prev = hop_ring_at<S>(it - 1); /* V: a tile behind K */
    float s[BC / 2];
    hop_ring_wait_full(sm->k_bar, st);
    gemm_window_open(wg);
    hop_issue_s<BF16, D, br_for(D), BC>(s, sm->q + wg * 64 * 128, sm->k + st.index * KV, p->negate_q);
    rescale_o_if_needed<D>(r->o, pv->alpha);
    hop_ring_wait_full(sm->v_bar, prev);
    hop_issue_pv<BF16, D, BC>(r->o, pv->p, sm->v + prev.index * KV);
    gemm_window_close<consumers_for(D)>(wg, 0);
    hop_wgmma_wait<1>(); /* S_j done, P V may still run */
    hop_settle(s);
    release_kv<D, PAIR>(sm->k_bar, st);
    if (MASK) hop_mask<BC, CAUSAL>(s, j * BC, row0, p->n);
    hop_online_softmax<BC, 1>(s, r->m, r->l, pv->alpha, p->scale_log2);
    hop_wgmma_wait<0>();
    hop_settle(r->o);
    release_kv<D, PAIR>(sm->v_bar, prev);
    hop_pack_p<BF16, BC>(s, pv->p);
}

/* The item's last P V. Every S = Q K^T of the item has completed, so Q (the item's use qs of its
 * one-buffer ring) is released first: the producer loads the next item's Q while this P V and the
 * stores run. `last`: the block's last item, whose window is the last one. */
template <int BF16, int D, int BC, int PAIR>
static __device__ __forceinline__ void pipeline_epilogue(const smem_layout *sm, hop_rows<D> *r,
                                                         const pending_pv<BC> *pv, uint32_t it,
                                                         hop_ring_state qs, int wg, int last) {
    constexpr int KV = hop_tile_bytes(BC, D), S = stages_for(D);
    const hop_ring_state prev = hop_ring_at<S>(it - 1);
    hop_ring_release<0>(sm->q_bar, qs, 0); /* every consumer thread arrives */
    rescale_o_if_needed<D>(r->o, pv->alpha);
    hop_ring_wait_full(sm->v_bar, prev);
    gemm_window_open(wg);
    hop_issue_pv<BF16, D, BC>(r->o, pv->p, sm->v + prev.index * KV);
    gemm_window_close<consumers_for(D)>(wg, last);
    hop_wgmma_wait<0>();
    hop_settle(r->o);
    release_kv<D, PAIR>(sm->v_bar, prev);
}

/* O through the copy engine (stores_o_by_tma, hop_store_o_through_tma): measured against storing from
 * registers (README.md's road table), +0.5 to +3.7% at D = 64, +1.7 to +8.2% at D = 128 (most where an
 * item has few key tiles). Each consumer warpgroup has its own staging buffer and named barrier. */
/* One consumer warpgroup's work items: per item the masked tiles first, then the plain ones, then O and
 * LSE. `it` runs on across items, as the producer's. */
template <int BF16, int D, int BC, int CAUSAL, int PAIR>
static __device__ __forceinline__ void consume(const hop_attn_o_params *op, const smem_layout *sm, int wg,
                                               unsigned rank) {
    const hop_attn_params *p = &op->a;
    constexpr int BR = br_for(D);
    const int tr = (p->n + BR - 1) / BR;
    const int64_t units = unit_count(CAUSAL, PAIR, tr, p->bh, gridDim.x);
    uint32_t it = 0, item = 0;
    if (wg == consumers_for(D) - 1) hop_bar_arrive(HOP_BAR_PINGPONG + 0, PINGPONG_THREADS); /* 0 goes first */
    int64_t u;
    for (int64_t t = 0; (u = block_unit(CAUSAL, PAIR, blockIdx.x, gridDim.x, t)) < units; ++t)
        for (int half = 0; half <= CAUSAL; ++half, ++item) {
            const work_item w = unit_item(CAUSAL, PAIR, rank, u, half, tr, p->bh, gridDim.x);
            if (w.row_block < 0) break;
            const int last = last_item(CAUSAL, PAIR, blockIdx.x, gridDim.x, t, u, half, tr, p->bh, units);
            const int q0 = w.row_block * BR;
            const hop_key_range kr = hop_key_tiles<BR, BC, CAUSAL>(q0, p->n);
            hop_rows<D> r;
            hop_rows_init<D>(&r);
            pending_pv<BC> pv;
            const int row0 = q0 + hop_thread_row(wg);
            const hop_ring_state qs = hop_ring_at<1>(item);
            hop_ring_wait_full(sm->q_bar, qs);
            int j = kr.n_tiles - 1;
            if (j >= kr.n_plain)
                pipeline_prologue<BF16, D, BC, CAUSAL, 1, PAIR>(p, sm, &r, &pv, it, j, wg, row0);
            else
                pipeline_prologue<BF16, D, BC, CAUSAL, 0, PAIR>(p, sm, &r, &pv, it, j, wg, row0);
            for (--j, ++it; j >= kr.n_plain; --j, ++it)
                pipeline_step<BF16, D, BC, CAUSAL, 1, PAIR>(p, sm, &r, &pv, it, j, wg, row0);
            for (; j >= 0; --j, ++it)
                pipeline_step<BF16, D, BC, CAUSAL, 0, PAIR>(p, sm, &r, &pv, it, j, wg, row0);
            pipeline_epilogue<BF16, D, BC, PAIR>(sm, &r, &pv, it, qs, wg, last);
            if constexpr (stores_o_by_tma(D, BC))
                hop_store_o_through_tma<BF16, D, hop_tile_bytes(64, 64)>(
                    op, sm->o_staging + wg * hop_tile_bytes(64, D), &r, w.bh, q0, wg, HOP_BAR_O_STAGING + wg);
            else
                hop_store_o_lse<BF16, D>(p, &r, w.bh, row0);
        }
    if constexpr (stores_o_by_tma(D, BC))
        if ((threadIdx.x & 127) == 0) hop_tma_store_wait_all(); /* the last store, before the block exits */
}

extern __shared__ __align__(1024) unsigned char smem_raw[];

template <int BF16, int D, int BC, int CAUSAL, int PAIR>
__global__ void __launch_bounds__(threads_for(D), 1)
    overlap_kernel(const __grid_constant__ hop_attn_o_params op) {
    const hop_attn_params &p = op.a;
    constexpr int S = stages_for(D), CONSUMERS = 128 * consumers_for(D);
    /* arrivals that release a K/V buffer (release_kv): one per consumer warp or thread, from both blocks
     * for PAIR */
    constexpr int KV_READERS = (release_per_warp(D, PAIR) ? CONSUMERS / 32 : CONSUMERS) * (PAIR ? 2 : 1);
    const smem_layout sm = smem_map<D, BC>((hop_smem_addr(smem_raw) + 1023u) & ~1023u);
    /* PAIR: the other block's barriers must exist before its producer's copies or our arrivals reach it */
    hop_pipeline_init<S, PAIR>(sm.q_bar, CONSUMERS, sm.k_bar, sm.v_bar, KV_READERS);
    const int wg = (int)(threadIdx.x >> 7);
    const unsigned rank = hop_pair_rank<PAIR>(); /* read once, passed to both roles */
    if (wg == 0) { /* producer: one branch of the if, so that setmaxnreg applies to the whole warpgroup */
        hop_regs_release<PRODUCER_REGS>();
        if (threadIdx.x == 0) produce<D, BC, CAUSAL, PAIR>(&p, &sm, rank);
    } else {
        hop_regs_claim<consumer_regs_for(D)>();
        consume<BF16, D, BC, CAUSAL, PAIR>(&op, &sm, wg - 1, rank);
        /* PAIR: no block leaves while the other's consumers may still arrive on its barriers. The
         * producer's threads exit instead (the cluster barrier waits for threads that have not exited;
         * holding its 24 registers across the barrier cost a spill): every copy it issued into the other
         * block has landed once that block's consumers are here. */
        if (PAIR) hop_cluster_sync();
    }
}

/* ---- host side ----------------------------------------------------------------------------------- */

/* Clusters of two blocks, as many as fit at once (a cluster's blocks share a GPC: with an odd number
 * of free SMs in a GPC one stays idle), never more than there are units. */
static attn_status launch_pairs(void (*kern)(const hop_attn_o_params), const hop_attn_o_params *kp,
                                int64_t units, int threads, int smem, cudaStream_t stream) {
    int fit = 0;
    attn_status st = hop_pair_clusters_fit((const void *)kern, (unsigned)threads, smem,
                                           "stage 09's D = 128 non-causal kernel", &fit);
    if (st != ATTN_OK) return st;
    const dim3 grid((unsigned)(2 * (units < fit ? units : fit)));
    return hop_launch_pairs((const void *)kern, grid, (unsigned)threads, smem, stream, (void *)kp,
                            "stage 09 kernel (overlap_kernel, clusters of two)");
}

/* One block per SM (a block takes 152-208 KB of shared memory: one fits), never more than there are
 * units. Non-causal units cost the same, so taking every gridDim.x-th one balances. Causal items differ
 * up to Tr-fold: striding over them left some SMs with twice the work of others (measured: D=64 N=2048
 * causal 242 TFLOP/s persistent, 335 with one item per block), hence work_units.h's (long, short)
 * units, which make causal rounds even, and its tail of single row blocks, longest first, which makes
 * the last rounds end together. */
template <int BF16, int D, int BC, int CAUSAL, int PAIR>
static attn_status launch_tiles(const hop_attn_params *kp, cudaStream_t stream) {
    void (*kern)(const hop_attn_o_params) = overlap_kernel<BF16, D, BC, CAUSAL, PAIR>;
    hop_attn_o_params op = {};
    op.a = *kp;
    attn_status st;
    if constexpr (stores_o_by_tma(D, BC)) /* boxes of 64 columns x one warpgroup's 64 rows */
        if ((st = hop_tensor_map(&op.o_map, kp->o, kp->bh, kp->n, D, 64)) != ATTN_OK) return st;
    if ((st = hop_smem_opt_in((const void *)kern, smem_bytes(D, BC), "stage 09")) != ATTN_OK) return st;
    int dev = 0, sms = 0;
    ATTN_CUDA(cudaGetDevice(&dev));
    ATTN_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int64_t tr = (kp->n + br_for(D) - 1) / br_for(D);
    const int64_t units = unit_count(CAUSAL, PAIR, (int)tr, kp->bh, (unsigned)sms);
    if (!PAIR) {
        const int64_t blocks = units < sms ? units : sms;
        return hop_launch((const void *)kern, dim3((unsigned)blocks), threads_for(D), smem_bytes(D, BC),
                          stream, &op, "stage 09 kernel (overlap_kernel)");
    }
    return launch_pairs(kern, &op, units, threads_for(D), smem_bytes(D, BC), stream);
}

/* The kernel with the Bc that tile_keys() chose (the K/V boxes come from keys_per_tile()): only D = 128
 * non-causal has two (the wide one is instantiated there only). tile_keys() runs again here: a few
 * integer operations per launch, where storing Bc in hop_attn_params would change 07's and 08's. */
template <int BF16, int D, int CAUSAL, int PAIR>
static attn_status launch_bc(const hop_attn_params *kp, cudaStream_t stream) {
    if constexpr (D == 128 && !CAUSAL)
        if (tile_keys(D, CAUSAL, kp->n) == WIDE_BC_128)
            return launch_tiles<BF16, D, WIDE_BC_128, CAUSAL, PAIR>(kp, stream);
    return launch_tiles<BF16, D, narrow_bc_for(D), CAUSAL, PAIR>(kp, stream);
}
template <int BF16, int D, int CAUSAL>
static attn_status launch(const hop_attn_params *kp, cudaStream_t stream) {
    if constexpr (!CAUSAL && pairs_for(D)) return launch_bc<BF16, D, CAUSAL, 1>(kp, stream);
    return launch_bc<BF16, D, CAUSAL, 0>(kp, stream);
}

HOP_STAGE_ENTRY_PER_PROBLEM(stage09_run, "09")
