/*
 * 07_tma_wgmma/tma_wgmma.cu: stage 07, FlashAttention-2 on Hopper's own data path.
 *
 * What this stage adds. The algorithm is stage 06's, line for line: the Q tile stays on chip, one
 * pass over the key tiles keeps the running max m and sum l and rescales O by alpha, exp2 takes
 * scale*log2(e) as one multiplier, causal tiles on the diagonal (and the tail tile past N) are
 * visited first with the mask and the rest without it, tiles above the diagonal never, and the
 * epilogue writes O / l and LSE = m2 ln 2 + ln l. What changes is how tiles move and multiply:
 *   1. TMA. One thread asks the bulk tensor copy engine for a whole tile (64 columns x Br or Bc rows
 *      per request, from a tensor map built on the host); the engine writes it to shared memory in the
 *      128-byte swizzle and counts the bytes on an mbarrier, which the 256 threads wait on. Stage 06
 *      had 128 threads issue 16-byte cp.async copies and compute swizzled addresses themselves.
 *   2. wgmma. A warpgroup (4 warps, 64 query rows) issues S = Q K^T as 64 x Bc x 16 products straight
 *      from shared memory (no ldmatrix, no register copies of Q or K), and O += P V with P from
 *      registers (the accumulator of S, exponentiated and packed: the same repack as stage 06) and V
 *      read transposed from shared memory by the descriptor. One wgmma m64n128k16 = 262144 flops,
 *      64 times an mma.sync m16n8k16, issued once for four warps.
 *   3. A K/V ring of 2 stages: tile j-1 lands while tile j is used, and j-2 refills j's buffer.
 *      The same threads load and compute (one of them issues the copies); that is stage 08's
 *      change.
 * Changed versus stage 06: 128-thread blocks of 4 warps x 32 rows became 256-thread blocks of 2
 * warpgroups x 64 rows (Br = 128); cp.async + ldmatrix + mma.sync became TMA + wgmma; the hand-made
 * XOR swizzle became the copy engine's 128-byte swizzle; a negative scale negates Q inside wgmma
 * (imm-scale-a = -1) instead of flipping bits in shared memory; a causal grid ends with its last heads
 * side by side, their longest row tiles first (kit/grid_order.h; +13-32% at B = 1, H = 16, N = 4096).
 *
 * Limits: head dim 64, 128 or 256; fp16 or bf16; sm_90 only (H100, H200: wgmma is sm_90a code);
 * 16-byte aligned tensors; N <= 2^30; B*H <= 2^31. Keys past N arrive as zero rows (the tensor
 * map ends at N) and are masked to -inf; query rows past N are computed and never written.
 *
 * Run it:    build/attn --stage 07 --batch 4 --heads 32 --seq 4096 --dim 128 --check
 * SASS:      cuobjdump --dump-sass build/obj/07_tma_wgmma/tma_wgmma.cu.o | grep -c HGMMA
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"
#include "hopper_attn.cuh"
#include "stage07.h"

/*
 * ---- tiles ----------------------------------------------------------------------------------------
 *   D     Br x Bc     warpgroups  stages  smem: Q + stages x (K + V)   registers per thread: S + O + P
 *   64    128 x 64    2           2        16 + 2 x ( 8 +  8) =  48 KB   32 +  32 + 16   (2 blocks/SM)
 *   128   128 x 128   2           2        32 + 2 x (32 + 32) = 160 KB   64 +  64 + 32
 *   256   128 x 64    2           2        64 + 2 x (32 + 32) = 192 KB   32 + 128 + 16
 * Each warpgroup owns 64 rows of the Q tile (wgmma's M is 64). Past D = 64 one block fills an SM's
 * shared memory. At D = 64 two blocks fit, if each keeps to 128 registers a thread: with 128-key
 * tiles ptxas needed 155 and spilled 40-44 bytes when held to 128; with 64-key tiles it needs 106 and
 * spills nothing. Two blocks on an SM overlap one's softmax with the other's wgmma and one's first
 * loads with the other's work, which one block of 07 cannot (its own threads wait for each step).
 */
static constexpr int BR = 128, THREADS = 256, STAGES = 2;
/* Br is 128 at every head dim here (stage 09 varies it) */
static __host__ __device__ constexpr int br_for(int) { return BR; }
static __host__ __device__ constexpr int bc_for(int d) { return d == 128 ? 128 : 64; }
/* __launch_bounds__'s minimum blocks per SM: 2 at D = 64 caps registers at 65536 / 512 = 128 */
static __host__ __device__ constexpr int blocks_per_sm(int d) { return d == 64 ? 2 : 1; }
/* Q, the K ring, the V ring, 1 + 2 x stages mbarriers, and 1 KB to round the base up to 1024 */
static __host__ __device__ constexpr int smem_bytes(int d) {
    return hop_tile_bytes(BR, d) + 2 * STAGES * hop_tile_bytes(bc_for(d), d) + 8 * (1 + 2 * STAGES) + 1024;
}

/* Shared-memory addresses of one block: tiles first (1024-aligned), barriers after. */
typedef struct {
    uint32_t q, k, v;                  /* Q tile; K and V buffer 0 (buffer s at + s * tile bytes) */
    hop_ring_bars q_bar, k_bar, v_bar; /* full barriers only (hopper_pipeline.cuh): no empty ones here */
} smem_layout;

template <int D> static __device__ __forceinline__ smem_layout smem_map(uint32_t base) {
    constexpr int KV = hop_tile_bytes(bc_for(D), D);
    smem_layout s;
    s.q = base;
    s.k = s.q + hop_tile_bytes(BR, D);
    s.v = s.k + STAGES * KV;
    s.q_bar.full = s.v + STAGES * KV;
    s.k_bar.full = s.q_bar.full + 8;
    s.v_bar.full = s.k_bar.full + 8 * STAGES;
    s.q_bar.empty = s.k_bar.empty = s.v_bar.empty = 0;
    return s;
}

/* K_j and V_j into their ring slot, each on its own barrier: S = Q K^T can start before V lands. */
template <int D>
static __device__ __forceinline__ void load_kv(const hop_attn_params *p, const smem_layout *sm,
                                               hop_ring_state st, int j, int bh) {
    constexpr int BC = bc_for(D), KV = hop_tile_bytes(BC, D);
    hop_load_tile<D>(sm->k + st.index * KV, &p->k_map, hop_ring_full(sm->k_bar, st), BC, j * BC, bh);
    hop_load_tile<D>(sm->v + st.index * KV, &p->v_map, hop_ring_full(sm->v_bar, st), BC, j * BC, bh);
}

/*
 * One key tile (the it-th visited, tile j, in ring slot hop_ring_at(it)), for one warpgroup: wait for K_j,
 * S = Q K^T, mask (MASK tiles only), online softmax, O *= alpha, wait for V_j, O += P V. Each wgmma
 * batch is waited for at once: the tensor cores idle while the softmax runs (stage 09's subject).
 * Then every thread of the block is done with the buffer, and thread 0 refills it with the tile
 * visited `stages` steps later.
 */
template <int BF16, int D, int CAUSAL, int MASK>
static __device__ __forceinline__ void key_tile(const hop_attn_params *p, const smem_layout *sm,
                                                hop_rows<D> *r, int it, int j, int row0, int bh,
                                                int n_tiles) {
    constexpr int BC = bc_for(D), KV = hop_tile_bytes(BC, D);
    const hop_ring_state st = hop_ring_at<STAGES>(it);
    float s[BC / 2], alpha[2];
    uint32_t pf[BC / 16][4];

    hop_ring_wait_full(sm->k_bar, st);
    hop_issue_s<BF16, D, BR, BC>(s, sm->q + (threadIdx.x >> 7) * 64 * 128, sm->k + st.index * KV,
                                 p->negate_q);
    hop_wgmma_wait<0>();
    hop_settle(s);
    if (MASK) hop_mask<BC, CAUSAL>(s, j * BC, row0, p->n);
    hop_online_softmax<BC>(s, r->m, r->l, alpha, p->scale_log2);
    hop_pack_p<BF16, BC>(s, pf);
    hop_rescale_o<D>(r->o, alpha);
    hop_ring_wait_full(sm->v_bar, st);
    hop_issue_pv<BF16, D, BC>(r->o, pf, sm->v + st.index * KV);
    hop_wgmma_wait<0>();
    hop_settle(r->o);

    __syncthreads(); /* both warpgroups are done with K_j and V_j */
    if (threadIdx.x == 0 && it + STAGES < n_tiles) load_kv<D>(p, sm, st, j - STAGES, bh); /* into st's slot */
}

extern __shared__ __align__(1024) unsigned char smem_raw[];

template <int BF16, int D, int CAUSAL>
__global__ void __launch_bounds__(THREADS, blocks_per_sm(D))
    tma_wgmma_kernel(const __grid_constant__ hop_attn_params p) {
    constexpr int BC = bc_for(D);
    int mb;
    const int64_t bh = hop_block_head<CAUSAL, 1>(&p, &mb);
    if (bh < 0) return; /* the last grid.z slice may reach past B*H: whole blocks, no barrier skipped */
    const int q0 = mb * BR;
    const smem_layout sm = smem_map<D>((hop_smem_addr(smem_raw) + 1023u) & ~1023u);
    const hop_key_range kr = hop_key_tiles<BR, BC, CAUSAL>(q0, p.n);
    const int j0 = kr.n_tiles - 1; /* visited from the last tile down: the masked ones come first */

    hop_pipeline_init<STAGES, 0>(sm.q_bar, 0, sm.k_bar, sm.v_bar, 0);
    if (threadIdx.x == 0) {
        hop_load_tile<D>(sm.q, &p.q_map, hop_ring_full(sm.q_bar, hop_ring_at<1>(0)), BR, q0, (int)bh);
        for (int t = 0; t < STAGES && t < kr.n_tiles; ++t)
            load_kv<D>(&p, &sm, hop_ring_at<STAGES>(t), j0 - t, (int)bh);
    }

    hop_rows<D> r;
    hop_rows_init<D>(&r);
    const int row0 = q0 + hop_thread_row((int)(threadIdx.x >> 7));
    hop_ring_wait_full(sm.q_bar, hop_ring_at<1>(0));
    int it = 0, j = j0;
    for (; j >= kr.n_plain; --j, ++it)
        key_tile<BF16, D, CAUSAL, 1>(&p, &sm, &r, it, j, row0, (int)bh, kr.n_tiles);
    for (; j >= 0; --j, ++it) key_tile<BF16, D, CAUSAL, 0>(&p, &sm, &r, it, j, row0, (int)bh, kr.n_tiles);
    hop_store_o_lse<BF16, D>(&p, &r, bh, row0);
}

/* ---- host side ----------------------------------------------------------------------------------- */

template <int BF16, int D, int CAUSAL>
static attn_status launch(const hop_attn_params *kp, cudaStream_t stream) {
    void (*kern)(const hop_attn_params) = tma_wgmma_kernel<BF16, D, CAUSAL>;
    attn_status st = hop_smem_opt_in((const void *)kern, smem_bytes(D), "stage 07");
    if (st != ATTN_OK) return st;
    dim3 grid((unsigned)((kp->n + BR - 1) / BR), (unsigned)(kp->bh < HOP_GRID_YZ ? kp->bh : HOP_GRID_YZ),
              (unsigned)((kp->bh + HOP_GRID_YZ - 1) / HOP_GRID_YZ));
    return hop_launch((const void *)kern, grid, THREADS, smem_bytes(D), stream, (void *)kp,
                      "stage 07 kernel (tma_wgmma_kernel)");
}

HOP_STAGE_ENTRY(stage07_run, "07")
