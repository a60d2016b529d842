/*
 * Stage 13: the backward pass on tensor cores (FlashAttention-2, Algorithm 2, on mma.sync).
 *
 * What it adds: stage 12's algorithm with stage 06's machinery. A block owns Bc = 128 keys (16 per
 * warp, 8 warps) and walks the query tiles of Br = 64 rows; every product is an mma.m16n8k16 with fp32
 * accumulators, every tile comes through cp.async into XOR-swizzled shared memory (06_fa2_full's layout
 * functions), and what feeds the next product stays in registers:
 *     S^T  = K_j Q_i^T        warp: its 16 keys x 64 queries; A = K from smem, B = Q (ldmatrix)
 *     P^T  = exp2(S^T scale log2(e) - LSE_i log2(e))           in the S^T registers
 *     dP^T = V_j dO_i^T       same shape; A = V, B = dO
 *     dS^T = P^T (dP^T - D_i)                                   in the dP^T registers
 *     dV_j += P^T dO_i        A = P^T straight from its accumulators (06b's trick), B = dO (.trans)
 *     dK_j += dS^T Q_i        A = dS^T from registers, B = Q (.trans)
 *     dQ_i += dS K_j          dS^T through shared memory: a query row's dQ sums over all 128 keys, which
 *                             8 warps hold; each warp then takes 16 rows x D/2 columns of dQ_i
 * The transposed orientation (keys as the M side) is what lets P^T and dS^T be A operands without a trip
 * through shared memory: the products that consume them, dV and dK, have keys as their rows. Only dS
 * makes the trip, once, for dQ. dV_j and dK_j (16 keys x D per warp) stay in registers for the whole
 * loop and are written once; dQ_i is added into an fp32 accumulator in global memory, by atomic adds
 * (stage 13), or in a fixed order (13d: block j adds after block j - 1, a counter per query tile), and
 * converted to 16 bits by a last kernel.
 *
 * Versus stage 12: tensor cores instead of FFMA, 16-bit P and dS in the products (as FA2), K and V tiles
 * of 128 keys, the next Q and dO tiles loading (cp.async) while this one is multiplied.
 * Versus stage 06: the same swizzle, ldmatrix lane maps and fragment maps (fa2_layout.h); the loop runs
 * over query tiles with a block per key tile, the forward's mirror image.
 *
 * Per step of the loop, per block: 5 products of 128 x 64 x D, i.e. 10 x 128 x 64 x D flops: 10.5 MFLOP
 * at D = 128. Shared memory: K, V (128 rows), Q and dO twice (64 rows), dS (128 x 64, 16 KB), LSE and D
 * twice: 145 KB at D = 128 (one block per SM), 81 KB at D = 64 (two on an H100/H200).
 * Registers: dV and dK (16 x D fp32 per warp: D/4 each a thread), S^T and dP^T (16 x 64: 32 each).
 *
 * Limits: fp16 and bf16; D = 32, 64, 96, 128 (256 does not fit this split: dK and dV alone would take
 * 256 registers a thread); N_q = N_k; contiguous [B, H, N, D].
 * Run:    build/attn --stage 13 --batch 4 --heads 32 --seq 4096 --dim 128 --causal --check
 *         build/attn --stage 13d --batch 4 --heads 32 --seq 4096 --dim 128 --causal --check
 *         (13d: dQ in a fixed order, bit-for-bit repeatable)
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "06_fa2_full/fa2_layout.h"
#include "06_fa2_full/fa2_ptx.cuh"
#include "backward_fa2.h"
#include "cuda_check.h"

#define BWD_WARPS 8
#define BWD_THREADS (32 * BWD_WARPS)
#define BWD_BR STAGE13_BR
#define BWD_BC STAGE13_BC

/* ---- shared memory: every tile rows of 16-byte chunks, XOR-swizzled (fa2_layout.h), 1024-aligned ----
 *     | K: Bc rows | V: Bc rows | Q: 2 x Br rows | dO: 2 x Br rows | dS^T: Bc rows x Br | LSE, D: 2 x Br |
 * Rows of a D-wide tile are fa2_row_chunks(D, 1) chunks (D = 96 padded to 16, so the XOR stays inside
 * the row); dS^T rows hold Br = 64 queries, 8 chunks. */
#define BWD_ROW_CHUNKS(D) fa2_row_chunks((D), 1)
#define BWD_ROW_BYTES(D) (BWD_ROW_CHUNKS(D) * 16)
#define BWD_K_OFF(D) 0
#define BWD_V_OFF(D) (BWD_BC * BWD_ROW_BYTES(D))
#define BWD_Q_OFF(D) (2 * BWD_BC * BWD_ROW_BYTES(D))
#define BWD_DO_OFF(D) (BWD_Q_OFF(D) + 2 * BWD_BR * BWD_ROW_BYTES(D))
#define BWD_DS_OFF(D) (BWD_DO_OFF(D) + 2 * BWD_BR * BWD_ROW_BYTES(D))
#define BWD_DS_CHUNKS (BWD_BR / 8)
#define BWD_STATS_OFF(D) (BWD_DS_OFF(D) + BWD_BC * BWD_BR * 2)
#define BWD_SMEM_BYTES(D) (BWD_STATS_OFF(D) + 4 * BWD_BR * 4 + 1024) /* + 1024: the base rounded up */
#define BWD_TILE_BYTES(D) (BWD_BR * BWD_ROW_BYTES(D)) /* one Q or dO buffer */

extern __shared__ __align__(16) unsigned char bwd_smem[];

typedef struct {
    const uint16_t *q, *k, *v, *o, *d_o;
    const float *lse;
    uint16_t *dq, *dk, *dv;
    float *dq_acc; /* B H N D, zeroed before the main kernel */
    float *delta;  /* D_i = dO_i . O_i, B H N */
    int *order;    /* 13d: per (b, h, query tile), how many key tiles have added their dQ share */
    int64_t bh_count;
    int N, Tr, Tc, causal;
    float scale;
} bwd_params;

/* ---- loads (cp.async) ------------------------------------------------------------------------- */

/* 4 bytes global -> shared; src_bytes 0 writes a zero (a row past N: LSE and D read as 0, finite). */
static __device__ __forceinline__ void bwd_cp_async_4(uint32_t dst, const void *src, uint32_t src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

/* Rows row0 .. row0 + ROWS - 1 of one head ([N, D] at head) into the swizzled tile at dst; rows past N
 * are zero-filled (their source clamped to the head's last row, inside the tensor). */
template <int ROWS, int D>
static __device__ __forceinline__ void bwd_load_tile(uint32_t dst, const uint16_t *head, int row0, int N) {
    constexpr int CHUNKS = D / 8, RC = BWD_ROW_CHUNKS(D);
#pragma unroll
    for (int idx = (int)threadIdx.x; idx < ROWS * CHUNKS; idx += BWD_THREADS) {
        const int r = idx / CHUNKS, c = idx % CHUNKS, row = row0 + r;
        const uint16_t *src = head + (int64_t)min(row, N - 1) * D + c * 8;
        fa2_cp_async_16(dst + FA2_CHUNK_OFFSET(RC, 1, r, c), src, row < N ? 16u : 0u);
    }
}

/* Query tile i's Q, dO, LSE and D into buffer buf. */
template <int D>
static __device__ __forceinline__ void bwd_load_query_tile(const bwd_params *p, uint32_t base, int64_t bh, int i,
                                                           int buf) {
    const int64_t head = bh * p->N * D;
    const int q0 = i * BWD_BR;
    bwd_load_tile<BWD_BR, D>(base + BWD_Q_OFF(D) + buf * BWD_TILE_BYTES(D), p->q + head, q0, p->N);
    bwd_load_tile<BWD_BR, D>(base + BWD_DO_OFF(D) + buf * BWD_TILE_BYTES(D), p->d_o + head, q0, p->N);
    const int t = (int)threadIdx.x;
    if (t < 2 * BWD_BR) { /* threads 0..63 take LSE, 64..127 take D */
        const int r = t % BWD_BR, row = q0 + r;
        const float *src = (t < BWD_BR ? p->lse : p->delta) + bh * p->N + min(row, p->N - 1);
        const uint32_t dst = base + BWD_STATS_OFF(D) + ((t / BWD_BR) * 2 + buf) * BWD_BR * 4 + r * 4;
        bwd_cp_async_4(dst, src, row < p->N ? 4u : 0u);
    }
    fa2_cp_async_commit();
}

/* ---- S^T and dP^T: a warp's 16 keys against the tile's 64 queries ------------------------------ */

/* acc[n] (16 x 8, queries 8n .. 8n + 7) = A_w . B^T over D: A = 16 rows of a Bc-row tile (K or V) from
 * row 16 w, B = the Br-row tile (Q or dO). A through the A lane map, B through the K lane map (B's rows
 * are the N side of the product, as K's are in the forward's S = Q K^T). */
template <int D, int DTYPE>
static __device__ __forceinline__ void bwd_mma_rows_by_queries(float acc[BWD_BR / 8][4], uint32_t a_tile,
                                                              uint32_t b_tile, int warp, int lane) {
    constexpr int RC = BWD_ROW_CHUNKS(D);
#pragma unroll
    for (int n = 0; n < BWD_BR / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    const uint32_t a_lane = a_tile + FA2_CHUNK_OFFSET(RC, 1, 16 * warp + fa2_ldmatrix_row_a(lane), fa2_ldmatrix_chunk_a(lane));
    const uint32_t b_lane = b_tile + FA2_CHUNK_OFFSET(RC, 1, fa2_ldmatrix_row_k(lane), fa2_ldmatrix_chunk_k(lane));
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        fa2_ldmatrix_x4(a, a_lane ^ ((uint32_t)kk << 5));
#pragma unroll
        for (int np = 0; np < BWD_BR / 16; np++) {
            uint32_t b[4];
            fa2_ldmatrix_x4(b, (b_lane + np * 16 * BWD_ROW_BYTES(D)) ^ ((uint32_t)kk << 5));
            fa2_mma_16x8x16<DTYPE>(acc[2 * np], a, b[0], b[1]);
            fa2_mma_16x8x16<DTYPE>(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

/* ---- the softmax's backward, element by element ------------------------------------------------
 * Lane 4g + t holds, in acc[n][e], key 16 w + g + 8 (e / 2) and query 8 n + 2 t + e % 2. */

/* S^T -> P^T = exp2(S^T scale log2(e) - LSE log2(e)); masked elements (a key past N, or causal and the
 * key after the query) 0. MASK is block-uniform: only tiles on the diagonal band and the last key tile
 * take it. */
template <int MASK>
static __device__ __forceinline__ void bwd_probabilities(float s[BWD_BR / 8][4], const float *lse, float sl2,
                                                         int key0, int q0, int N, int causal, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int n = 0; n < BWD_BR / 8; n++) {
        const float2 l = *reinterpret_cast<const float2 *>(lse + 8 * n + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float x = fast_exp2(fmaf(s[n][e], sl2, -(e & 1 ? l.y : l.x) * ATTN_LOG2E));
            if (MASK) {
                const int key = key0 + g + 8 * (e >> 1), query = q0 + 8 * n + 2 * t + (e & 1);
                if (key >= N || (causal && key > query)) x = 0.0f;
            }
            s[n][e] = x;
        }
    }
}

/* dP^T -> dS^T = P^T (dP^T - D), in place. */
static __device__ __forceinline__ void bwd_dsoftmax(float dp[BWD_BR / 8][4], const float p[BWD_BR / 8][4],
                                                    const float *delta, int lane) {
    const int t = lane & 3;
#pragma unroll
    for (int n = 0; n < BWD_BR / 8; n++) {
        const float2 d = *reinterpret_cast<const float2 *>(delta + 8 * n + 2 * t);
        dp[n][0] = p[n][0] * (dp[n][0] - d.x);
        dp[n][1] = p[n][1] * (dp[n][1] - d.y);
        dp[n][2] = p[n][2] * (dp[n][2] - d.x);
        dp[n][3] = p[n][3] * (dp[n][3] - d.y);
    }
}

/* ---- dV += P^T dO and dK += dS^T Q: the 16 x 64 accumulators as A operands --------------------- */

/* The A fragment of k-step kq (queries 16 kq .. 16 kq + 15) from accumulator tiles 2 kq and 2 kq + 1:
 * the C layout of two m16n8 tiles is the A layout of one m16k16 (rows g, g + 8; columns 2t, 2t + 1 and
 * 8 + 2t, 9 + 2t), rounded to 16 bits. */
template <int DTYPE>
static __device__ __forceinline__ void bwd_a_from_accumulators(uint32_t a[4], const float x[BWD_BR / 8][4], int kq) {
    a[0] = pack_16x2<DTYPE>(x[2 * kq][0], x[2 * kq][1]);
    a[1] = pack_16x2<DTYPE>(x[2 * kq][2], x[2 * kq][3]);
    a[2] = pack_16x2<DTYPE>(x[2 * kq + 1][0], x[2 * kq + 1][1]);
    a[3] = pack_16x2<DTYPE>(x[2 * kq + 1][2], x[2 * kq + 1][3]);
}

/* acc (16 keys x D) += X (16 keys x 64 queries, from registers) . T (64 queries x D: dO or Q), T read
 * with ldmatrix.trans through the A lane map (its rows are the K side of the product, as V's in P V). */
template <int D, int DTYPE>
static __device__ __forceinline__ void bwd_mma_keys_by_d(float acc[D / 8][4], const float x[BWD_BR / 8][4],
                                                        uint32_t t_tile, int lane) {
    constexpr int RC = BWD_ROW_CHUNKS(D);
    const uint32_t t_lane = t_tile + FA2_CHUNK_OFFSET(RC, 1, fa2_ldmatrix_row_a(lane), fa2_ldmatrix_chunk_a(lane));
#pragma unroll
    for (int kq = 0; kq < BWD_BR / 16; kq++) {
        uint32_t a[4];
        bwd_a_from_accumulators<DTYPE>(a, x, kq);
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            fa2_ldmatrix_x4_trans(b, (t_lane + kq * 16 * BWD_ROW_BYTES(D)) ^ ((uint32_t)dp << 5));
            fa2_mma_16x8x16<DTYPE>(acc[2 * dp], a, b[0], b[1]);
            fa2_mma_16x8x16<DTYPE>(acc[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

/* ---- dQ_i += dS K_j ------------------------------------------------------------------------------ */

/* dS^T into shared memory, 16 bits, [key][query]: the warp's rows 16 w .. 16 w + 15. */
template <int DTYPE>
static __device__ __forceinline__ void bwd_store_ds(uint32_t ds_tile, const float ds[BWD_BR / 8][4], int warp,
                                                    int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int n = 0; n < BWD_BR / 8; n++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int key = 16 * warp + g + 8 * h;
            fa2_st_shared_4(ds_tile + FA2_CHUNK_OFFSET(BWD_DS_CHUNKS, 1, key, n) + 4 * t,
                            pack_16x2<DTYPE>(ds[n][2 * h], ds[n][2 * h + 1]));
        }
}

/* A warp's share of dQ_i: rows 16 (w % 4) .. + 15, columns (w / 4) D/2 .. + D/2 - 1, summed over the
 * block's 128 keys. A = dS (query rows, key columns) read transposed from dS^T (the K lane map on its
 * [key][query] storage: ldmatrix.trans turns each 8 x 8 back), B = K (.trans, the A lane map). */
#define BWD_DQ_COLS(D) ((D) / 2)
template <int D, int DTYPE>
static __device__ __forceinline__ void bwd_mma_dq(float acc[BWD_DQ_COLS(D) / 8][4], uint32_t ds_tile, uint32_t k_tile,
                                                  int warp, int lane) {
    constexpr int RC = BWD_ROW_CHUNKS(D), NT = BWD_DQ_COLS(D) / 8;
    const int rg = warp % (BWD_BR / 16), col_chunk0 = (warp / (BWD_BR / 16)) * (BWD_DQ_COLS(D) / 8);
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    const uint32_t a_lane =
        ds_tile + FA2_CHUNK_OFFSET(BWD_DS_CHUNKS, 1, fa2_ldmatrix_row_k(lane), 2 * rg + fa2_ldmatrix_chunk_k(lane));
#pragma unroll
    for (int kk = 0; kk < BWD_BC / 16; kk++) {
        uint32_t a[4];
        fa2_ldmatrix_x4_trans(a, a_lane + kk * 16 * BWD_DS_CHUNKS * 16);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            const int row = 16 * kk + fa2_ldmatrix_row_a(lane), chunk = col_chunk0 + 2 * np + fa2_ldmatrix_chunk_a(lane);
            uint32_t b[4];
            fa2_ldmatrix_x4_trans(b, k_tile + FA2_CHUNK_OFFSET(RC, 1, row, chunk));
            fa2_mma_16x8x16<DTYPE>(acc[2 * np], a, b[0], b[1]);
            fa2_mma_16x8x16<DTYPE>(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

/* The share into the fp32 accumulator, rows below N only: atomic adds (13), or, in the fixed order (13d),
 * after the key tiles before this one have added theirs: thread 0 waits for the tile's counter to reach
 * j, the block adds with plain loads and stores through L2 (.cg: L1 is not coherent between SMs), then
 * publishes j + 1 after a fence. Key tiles 0, 1, ... of a query tile are exactly the blocks that touch it
 * (causal too: tile j starts at query tile j Bc / Br), and block (b, h, j - 1) runs before (b, h, j) in
 * the grid's order, so the wait cannot deadlock. */
template <int D, int DET>
static __device__ __forceinline__ void bwd_add_dq(const bwd_params *p, const float acc[BWD_DQ_COLS(D) / 8][4],
                                                  int64_t bh, int i, int j, int warp, int lane) {
    const int rg = warp % (BWD_BR / 16), col0 = (warp / (BWD_BR / 16)) * BWD_DQ_COLS(D);
    const int g = lane >> 2, t = lane & 3;
    int *counter = p->order + bh * p->Tr + i;
    if (DET) {
        if (threadIdx.x == 0)
            while (atomicAdd(counter, 0) != j) __nanosleep(64);
        __syncthreads();
        __threadfence();
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = i * BWD_BR + 16 * rg + g + 8 * h;
        if (row >= p->N) continue;
        float *dst = p->dq_acc + (bh * p->N + row) * D + col0 + 2 * t;
#pragma unroll
        for (int n = 0; n < BWD_DQ_COLS(D) / 8; n++) {
            if (DET) {
                float2 v = __ldcg(reinterpret_cast<const float2 *>(dst + 8 * n));
                v.x += acc[n][2 * h], v.y += acc[n][2 * h + 1];
                __stcg(reinterpret_cast<float2 *>(dst + 8 * n), v);
            } else {
                atomicAdd(dst + 8 * n, acc[n][2 * h]);
                atomicAdd(dst + 8 * n + 1, acc[n][2 * h + 1]);
            }
        }
    }
    if (DET) {
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) atomicExch(counter, j + 1);
    }
}

/* ---- the block: key tile j of head bh ---------------------------------------------------------- */

/* dK (times scale) and dV of the warp's 16 keys, 16 bits, keys below N only. */
template <int D, int DTYPE>
static __device__ __forceinline__ void bwd_store_dkdv(const bwd_params *p, const float dk[D / 8][4],
                                                      const float dv[D / 8][4], int64_t bh, int key0, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int key = key0 + g + 8 * h;
        if (key >= p->N) continue;
        const int64_t row = (bh * p->N + key) * D + 2 * t;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            *reinterpret_cast<uint32_t *>(p->dk + row + 8 * n) =
                pack_16x2<DTYPE>(dk[n][2 * h] * p->scale, dk[n][2 * h + 1] * p->scale);
            *reinterpret_cast<uint32_t *>(p->dv + row + 8 * n) = pack_16x2<DTYPE>(dv[n][2 * h], dv[n][2 * h + 1]);
        }
    }
}

/* Which head and key tile a block owns: key tile major, so that under a causal mask the longest blocks
 * (tile 0 walks every query tile) start first, and block (b, h, j - 1) always precedes (b, h, j). */
static __device__ __forceinline__ int bwd_block_coords(const bwd_params *p, int64_t *bh, int *j) {
    const int64_t blk = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    if (blk >= p->bh_count * p->Tc) return 0;
    *j = (int)(blk / p->bh_count);
    *bh = blk % p->bh_count;
    return 1;
}

template <int D, int DTYPE, int DET>
__global__ void __launch_bounds__(BWD_THREADS, 1) bwd_kernel(const bwd_params prm) {
    int64_t bh;
    int j;
    if (!bwd_block_coords(&prm, &bh, &j)) return;
    const uint32_t base = (fa2_smem_address(bwd_smem) + 1023u) & ~1023u;
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int N = prm.N, key0 = j * BWD_BC;
    const float *stats = reinterpret_cast<const float *>(bwd_smem + (base - fa2_smem_address(bwd_smem)) + BWD_STATS_OFF(D));
    const float sl2 = prm.scale * ATTN_LOG2E;

    /* causal: the first query tile with a row at or past key0; the diagonal band (some key after some
     * row) runs through the mask, as does the last key tile (keys past N) */
    const int i0 = prm.causal ? key0 / BWD_BR : 0;
    const int64_t head = bh * N * D;
    bwd_load_tile<BWD_BC, D>(base + BWD_K_OFF(D), prm.k + head, key0, N);
    bwd_load_tile<BWD_BC, D>(base + BWD_V_OFF(D), prm.v + head, key0, N);
    bwd_load_query_tile<D>(&prm, base, bh, i0, 0);

    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

    for (int i = i0; i < prm.Tr; i++) {
        const int buf = (i - i0) & 1, q0 = i * BWD_BR;
        fa2_cp_async_wait<0>();
        __syncthreads(); /* tile i has landed; every warp is done with tile i - 1 (its buffers, dS) */
        if (i + 1 < prm.Tr) bwd_load_query_tile<D>(&prm, base, bh, i + 1, buf ^ 1);
        const uint32_t q_tile = base + BWD_Q_OFF(D) + buf * BWD_TILE_BYTES(D);
        const uint32_t do_tile = base + BWD_DO_OFF(D) + buf * BWD_TILE_BYTES(D);
        const float *lse = stats + buf * BWD_BR, *delta = stats + (2 + buf) * BWD_BR;

        float s[BWD_BR / 8][4], dp[BWD_BR / 8][4];
        bwd_mma_rows_by_queries<D, DTYPE>(s, base + BWD_K_OFF(D), q_tile, warp, lane);
        if ((prm.causal && q0 < key0 + BWD_BC - 1) || key0 + BWD_BC > N)
            bwd_probabilities<1>(s, lse, sl2, key0 + 16 * warp, q0, N, prm.causal, lane);
        else
            bwd_probabilities<0>(s, lse, sl2, key0 + 16 * warp, q0, N, prm.causal, lane);
        bwd_mma_rows_by_queries<D, DTYPE>(dp, base + BWD_V_OFF(D), do_tile, warp, lane);
        bwd_dsoftmax(dp, s, delta, lane);
        bwd_mma_keys_by_d<D, DTYPE>(dv, s, do_tile, lane);
        bwd_mma_keys_by_d<D, DTYPE>(dk, dp, q_tile, lane);
        bwd_store_ds<DTYPE>(base + BWD_DS_OFF(D), dp, warp, lane);
        __syncthreads(); /* dS^T of all 128 keys is in shared memory */
        float dq[BWD_DQ_COLS(D) / 8][4];
        bwd_mma_dq<D, DTYPE>(dq, base + BWD_DS_OFF(D), base + BWD_K_OFF(D), warp, lane);
        bwd_add_dq<D, DET>(&prm, dq, bh, i, j, warp, lane);
    }
    bwd_store_dkdv<D, DTYPE>(&prm, dk, dv, bh, key0 + 16 * warp, lane);
}

/* ---- before and after: D_i = dO_i . O_i, and dQ to 16 bits ------------------------------------ */

/* One warp per row: D_i in fp32 from the 16-bit dO and O (two elements per lane per step). */
template <int D, int DTYPE>
__global__ void bwd_preprocess(const bwd_params prm) {
    const int64_t rows = prm.bh_count * prm.N;
    const int lane = (int)threadIdx.x % 32;
    for (int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows;
         row += (int64_t)gridDim.x * (blockDim.x / 32)) {
        float sum = 0.0f;
        for (int d = 2 * lane; d < D; d += 64) {
            const uint32_t g = *reinterpret_cast<const uint32_t *>(prm.d_o + row * D + d);
            const uint32_t o = *reinterpret_cast<const uint32_t *>(prm.o + row * D + d);
            float2 gf, of;
            if (DTYPE == ATTN_BF16) {
                gf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&g));
                of = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&o));
            } else {
                gf = __half22float2(*reinterpret_cast<const __half2 *>(&g));
                of = __half22float2(*reinterpret_cast<const __half2 *>(&o));
            }
            sum = fmaf(gf.x, of.x, fmaf(gf.y, of.y, sum));
        }
        for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (lane == 0) prm.delta[row] = sum;
    }
}

/* dQ = scale * the accumulator, rounded to 16 bits, two elements per thread per step. */
template <int DTYPE>
__global__ void bwd_convert_dq(const bwd_params prm, int64_t pairs) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < pairs; e += (int64_t)gridDim.x * blockDim.x) {
        const float2 x = reinterpret_cast<const float2 *>(prm.dq_acc)[e];
        reinterpret_cast<uint32_t *>(prm.dq)[e] = pack_16x2<DTYPE>(x.x * prm.scale, x.y * prm.scale);
    }
}

/* ---- host side ----------------------------------------------------------------------------------- */

typedef void (*bwd_main_fn)(bwd_params);
typedef void (*bwd_side_fn)(bwd_params);
typedef void (*bwd_convert_fn)(bwd_params, int64_t);

typedef struct {
    bwd_main_fn main;
    bwd_side_fn pre;
    bwd_convert_fn convert;
    size_t smem;
} bwd_kernels;

template <int D, int DTYPE, int DET> static bwd_kernels bwd_kernels_for(void) {
    return bwd_kernels{bwd_kernel<D, DTYPE, DET>, bwd_preprocess<D, DTYPE>, bwd_convert_dq<DTYPE>, (size_t)BWD_SMEM_BYTES(D)};
}

template <int DTYPE, int DET> static int bwd_pick_d(int64_t D, bwd_kernels *k) {
    switch (D) {
    case 32: *k = bwd_kernels_for<32, DTYPE, DET>(); return 1;
    case 64: *k = bwd_kernels_for<64, DTYPE, DET>(); return 1;
    case 96: *k = bwd_kernels_for<96, DTYPE, DET>(); return 1;
    case 128: *k = bwd_kernels_for<128, DTYPE, DET>(); return 1;
    }
    return 0;
}

static unsigned bwd_grid_1d(int64_t work, int per_block) {
    const int64_t b = (work + per_block - 1) / per_block;
    return (unsigned)(b < 65535 * 64 ? (b > 0 ? b : 1) : 65535 * 64);
}

static attn_status bwd_run(const char *id, int det, const attn_problem *p, const attn_args *a) {
    const attn_status limits = stage13_check_limits(p);
    if (limits != ATTN_OK) return limits;
    bwd_kernels k;
    const int bf16 = p->dtype == ATTN_BF16;
    const int ok = bf16 ? (det ? bwd_pick_d<ATTN_BF16, 1>(p->D, &k) : bwd_pick_d<ATTN_BF16, 0>(p->D, &k))
                        : (det ? bwd_pick_d<ATTN_F16, 1>(p->D, &k) : bwd_pick_d<ATTN_F16, 0>(p->D, &k));
    if (!ok) return attn_fail(ATTN_EUNSUPPORTED, "stage %s: no kernel for D = %lld", id, (long long)p->D);

    bwd_params prm;
    prm.q = (const uint16_t *)a->q, prm.k = (const uint16_t *)a->k, prm.v = (const uint16_t *)a->v;
    prm.o = (const uint16_t *)a->o, prm.d_o = (const uint16_t *)a->d_o, prm.lse = a->lse;
    prm.dq = (uint16_t *)a->dq, prm.dk = (uint16_t *)a->dk, prm.dv = (uint16_t *)a->dv;
    prm.bh_count = p->B * p->H;
    prm.N = (int)p->N;
    prm.Tr = (prm.N + BWD_BR - 1) / BWD_BR;
    prm.Tc = (prm.N + BWD_BC - 1) / BWD_BC;
    prm.causal = p->causal != 0;
    prm.scale = p->scale;
    const int64_t rows = prm.bh_count * prm.N, elems = rows * p->D;
    prm.dq_acc = (float *)a->workspace;
    prm.delta = prm.dq_acc + elems;
    prm.order = (int *)(prm.delta + rows);
    cudaStream_t stream = (cudaStream_t)a->stream;

    int dev = 0, smem_max = 0;
    ATTN_CUDA(cudaGetDevice(&dev));
    ATTN_CUDA(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (k.smem > (size_t)smem_max)
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s at head dim %lld needs %zu KB of shared memory per block; this GPU "
                         "allows %d KB", id, (long long)p->D, k.smem / 1024, smem_max / 1024);
    ATTN_CUDA(cudaFuncSetAttribute((const void *)k.main, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)k.smem));

    /* zero the accumulator (and 13d's counters), then D_i, the main loop, dQ to 16 bits */
    ATTN_CUDA(cudaMemsetAsync(prm.dq_acc, 0, (size_t)elems * sizeof(float), stream));
    if (det) ATTN_CUDA(cudaMemsetAsync(prm.order, 0, (size_t)(prm.bh_count * prm.Tr) * sizeof(int), stream));
    k.pre<<<bwd_grid_1d(rows, 8), 256, 0, stream>>>(prm);
    ATTN_CUDA_LAUNCHED("stage 13 D_i kernel");
    const int64_t blocks = prm.bh_count * prm.Tc;
    int64_t gx = blocks, gy = 1;
    if (gx > 2147483647) {
        gx = (int64_t)1 << 30;
        gy = (blocks + gx - 1) / gx;
        if (gy > 65535) return attn_fail(ATTN_EINVAL, "stage %s: %lld blocks is more than one launch holds", id, (long long)blocks);
    }
    k.main<<<dim3((unsigned)gx, (unsigned)gy, 1), BWD_THREADS, k.smem, stream>>>(prm);
    ATTN_CUDA_LAUNCHED("stage 13 main kernel");
    k.convert<<<bwd_grid_1d(elems / 2, 256), 256, 0, stream>>>(prm, elems / 2);
    ATTN_CUDA_LAUNCHED("stage 13 dQ kernel");
    return ATTN_OK;
}

extern "C" attn_status stage13_run(const attn_problem *p, const attn_args *a) { return bwd_run("13", 0, p, a); }
extern "C" attn_status stage13d_run(const attn_problem *p, const attn_args *a) { return bwd_run("13d", 1, p, a); }
