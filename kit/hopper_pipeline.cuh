/*
 * hopper_pipeline.cuh: the ring of shared-memory buffers that the Hopper stages (07-09, and the
 * backward to come) stream tiles through, its mbarriers, and the ids of the named barriers. Kept once
 * here so that no stage writes slot or parity arithmetic or a barrier's address by hand.
 *
 * The ring. A block streams tiles t = 0, 1, 2, ... (stage 07-09: K_j and V_j, in visiting order)
 * through S slots (S a power of two: 2 or 4 in 07-09). Tile t goes into slot t % S and is that slot's
 * use t / S (its 0th, 1st, ... filling). A slot of one operand (K, or V: both operands of tile t share
 * slot t % S but not their barriers, so that S = Q K^T can start before V lands) has two mbarriers:
 *
 *     full   1 arrival (the producer's expect_tx) + the bytes of the copy; phase u completes when use u
 *            has landed. Consumers of use u wait for parity u & 1.
 *     empty  one arrival per consumer thread or warp (the stage's `readers`); phase u completes when
 *            every consumer has finished reading use u. The producer, before it fills use u >= 1,
 *            waits for phase u - 1: parity (u - 1) & 1. Use 0 finds the slot empty.
 *
 *     producer:  wait_empty(t) -> expect_tx + TMA into slot t % S, counted on full
 *     consumer:  wait_full(t)  -> wgmma reads the slot -> release(t), an arrival on empty
 *
 * An mbarrier tells only the parity of its phases, so a waiter two phases behind would take a later
 * phase for its own; the ring cannot get there: the producer fills use u + 1 only after every
 * consumer has released use u, and each consumer waits for every use in turn.
 *
 * Where the ring stands is one count, t, carried by the stage's loop (it counts the tiles anyway);
 * hop_ring_at<S>(t) gives the slot, the use and its parity together, so they can never drift apart,
 * and the stage writes neither t % S nor a parity. Derived from one count rather than stepped as a
 * pair (CUTLASS's PipelineState steps index and phase): the stages' loops already carry t, and the
 * machine code stays the one they had (a shift and two masks for a power of two): stages 07 and 08
 * compile to the same SASS as with their hand-written arithmetic. A backward stage walking query
 * tiles does the same with its own count.
 *
 * A one-slot ring (S = 1) is a tile loaded once per work item, the Q tile: slot 0, use = the item.
 */
#ifndef ATTN_HOPPER_PIPELINE_CUH
#define ATTN_HOPPER_PIPELINE_CUH

#include <stdint.h>

#include "hopper.cuh"

/* Tile t's place in a ring: its slot (t % S), which use of that slot it is (t / S), and that use's
 * phase parity, the one its barriers are waited for with. The parity is computed here, where the
 * state is made, not at each wait: 08 computed its parity once a tile, before its K and V waits, and
 * keeps its SASS so (09 computed it at each wait: its consumers' integer ops move, see its commit). */
typedef struct {
    uint32_t index; /* the slot: the buffer and its two barriers */
    uint32_t phase; /* use & 1 */
    uint32_t use;   /* how many times the slot was filled before this tile */
} hop_ring_state;

template <int S> static __device__ __forceinline__ hop_ring_state hop_ring_at(uint32_t t) {
    static_assert(S > 0 && (S & (S - 1)) == 0, "a ring's slots are a power of two: t % S is a mask");
    hop_ring_state st;
    st.index = t % S;
    st.phase = (t / S) & 1u;
    st.use = t / S;
    return st;
}

/* The last use of slot `index` among tiles 0 .. n - 1 (n > index): tile index + S u, u = (n - 1 - index)
 * / S. Stage 08's pairs wait for its release before a block may leave. */
template <int S> static __device__ __forceinline__ hop_ring_state hop_ring_last_use(uint32_t index, int n) {
    hop_ring_state st;
    st.index = index;
    st.phase = (uint32_t)(((n - 1 - (int)index) / S) & 1);
    st.use = (uint32_t)((n - 1 - (int)index) / S);
    return st;
}

/* One operand's barriers (shared-memory addresses): slot b's at full + 8 b and empty + 8 b, an
 * mbarrier being 8 bytes. empty is unused in a ring without one (stage 07: its threads meet at
 * __syncthreads instead). */
typedef struct {
    uint32_t full;  /* the producer's expect_tx and the copy engine's bytes */
    uint32_t empty; /* the consumers' arrivals */
} hop_ring_bars;

static __device__ __forceinline__ uint32_t hop_ring_full(hop_ring_bars b, hop_ring_state st) {
    return b.full + 8 * st.index;
}
static __device__ __forceinline__ uint32_t hop_ring_empty(hop_ring_bars b, hop_ring_state st) {
    return b.empty + 8 * st.index;
}

/* Consumer: until the copy into this use of the slot has landed. */
static __device__ __forceinline__ void hop_ring_wait_full(hop_ring_bars b, hop_ring_state st) {
    hop_mbar_wait(hop_ring_full(b, st), st.phase);
}
/* Producer: until every consumer has released the slot's previous use; use 0 finds it empty. */
static __device__ __forceinline__ void hop_ring_wait_empty(hop_ring_bars b, hop_ring_state st) {
    if (st.use > 0) hop_mbar_wait(hop_ring_empty(b, st), (st.use - 1) & 1u);
}
/* Until every consumer has released this use itself (a block that must not leave before: 08's pairs) */
static __device__ __forceinline__ void hop_ring_wait_released(hop_ring_bars b, hop_ring_state st) {
    hop_mbar_wait(hop_ring_empty(b, st), st.phase);
}
/* Producer: its one arrival on the full barrier, announcing the bytes the copy engine will count
 * there. hop_load_tile and hop_load_kv_tile (hopper_attn.cuh) make it themselves, given
 * hop_ring_full(): this is for a producer that issues its copies by hand. */
static __device__ __forceinline__ void hop_ring_expect_tx(hop_ring_bars b, hop_ring_state st,
                                                          uint32_t bytes) {
    hop_mbar_arrive_expect_tx(hop_ring_full(b, st), bytes);
}

/* A consumer has read a K or V buffer: it arrives on the buffer's empty barrier. PER_WARP: once a warp,
 * when all its lanes are done (the barrier counts warps), and with `remote` also on the other block's
 * barrier, whose producer refills its half of both blocks' buffers (pairs). */
template <int PER_WARP> static __device__ __forceinline__ void hop_release_kv(uint32_t bar, int remote) {
    if (!PER_WARP) {
        hop_mbar_arrive(bar);
        return;
    }
    __syncwarp();
    if ((threadIdx.x & 31) != 0) return;
    hop_mbar_arrive(bar);
    if (remote) hop_mbar_arrive_cluster(hop_cluster_map(bar, hop_cluster_rank() ^ 1u));
}
/* Consumer: done reading this use of the slot (hop_release_kv on its empty barrier). */
template <int PER_WARP>
static __device__ __forceinline__ void hop_ring_release(hop_ring_bars b, hop_ring_state st, int remote) {
    hop_release_kv<PER_WARP>(hop_ring_empty(b, st), remote);
}

/*
 * The barriers of a block's pipeline, made once by thread 0 and shown to every thread (PAIR: to both
 * blocks of the cluster, whose copies and arrivals reach this block's barriers) before any copy: the
 * one-slot ring q (the Q tile) and the S-slot ring of two operands k and v. Full barriers take one
 * arrival, the producer's; empty ones `readers` (0: the ring has none, as stage 07's).
 */
template <int S, int PAIR>
static __device__ __forceinline__ void hop_pipeline_init(hop_ring_bars q, uint32_t q_readers, hop_ring_bars k,
                                                         hop_ring_bars v, uint32_t kv_readers) {
    if (threadIdx.x == 0) {
        hop_mbar_init(q.full, 1);
        if (q_readers) hop_mbar_init(q.empty, q_readers);
        for (int s = 0; s < S; ++s) {
            hop_mbar_init(k.full + 8 * s, 1);
            hop_mbar_init(v.full + 8 * s, 1);
            if (kv_readers) {
                hop_mbar_init(k.empty + 8 * s, kv_readers);
                hop_mbar_init(v.empty + 8 * s, kv_readers);
            }
        }
        hop_fence_barrier_init();
    }
    if (PAIR)
        hop_cluster_sync();
    else
        __syncthreads();
}

/*
 * Named barriers: bar.sync's ids (16 a block; 0 is __syncthreads), each use its own range with one id
 * per consumer warpgroup (at most 3: stage 09 at D = 64), so that two uses never meet on one id.
 */
enum hop_named_barrier {
    HOP_BAR_O_STAGING = 1, /* 08, 09: wg's staging of O is written and read: ids 1 + wg, 1..3 */
    HOP_BAR_PINGPONG = 4,  /* 09: consumer warpgroup wg may issue its GEMMs: ids 4 + wg, 4..6 */
    HOP_BAR_FIRST_FREE = 7 /* the first id no stage takes yet */
};

#endif
