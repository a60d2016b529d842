/*
 * decode_kernel.cuh: stage 15's kernels, flash-decoding on mma.sync (sm_80 and newer).
 *
 *   decode_split_kernel    one block per (sequence b, K/V head g, chunk c) and per 64 query rows
 *                          (grid row y; one row of blocks at decoding's 4 to 64 rows). Its rows are the
 *                          R = (H / H_kv) N_q query rows that read head g, padded to 16 per mma. It
 *                          streams its chunk's keys through a ring of cp.async stages, DECODE_BC = 64
 *                          keys of K and V a stage, and reads each key once for all its rows.
 *   decode_combine_kernel  one warp per query row: the S partials merged in chunk order from (-inf, 0)
 *                          with cp_merge.h's weights, O rounded to 16 bits, LSE stored.
 *
 * Why the ring: a step reads the cache once and does 4 flops a byte at 4 query heads a K/V head, so
 * the kernel's one job is to keep HBM busy. At 4.3 TB/s and about 1 us from request to data, some
 * 4.3 MB must be in flight, 33 KB an SM. Stages of 64 keys are 32 KB of K and V at D = 128; three
 * of them (two in flight while one is multiplied) and two blocks an SM keep up to 128 KB in flight.
 * Two blocks must fit an SM: one sequence of 8 K/V heads is 136 blocks on 132 SMs (choose_chunks), and
 * at one block an SM the last 4 would run as a second wave, doubling the step. Hence at most 113 KB a
 * block (the H100/H200 SM has 228 KB, 1 KB of it reserved per block).
 *
 * Warps. mma.sync multiplies 16 rows at a time and decoding has 4 rows at one query and 4 heads a
 * group. So the 4 warps split the keys, not the rows, where the rows are few (decode_key_warps): at
 * R <= 16 warp w takes keys 16w .. 16w + 15 of every tile, with its own m, l and O, and at the end the
 * block merges its warps' partials by their LSEs, the same merge the combine applies to the chunks.
 *
 * Per warp and tile (Bc / WK keys of its 16-row slice): S = Q K^T (D / 16 x keys / 16 x 2 mma, Q
 * fragments in registers for the whole chunk), stage 06's online softmax in base 2 (fa2_steps.cuh),
 * O += P V with P straight from the S registers (16-bit, as stage 06). The loads are stage 06's too:
 * XOR-swizzled rows of 16-byte chunks, ldmatrix lane maps (fa2_layout.h), cp.async with zero fill.
 */
#ifndef DECODE_KERNEL_CUH
#define DECODE_KERNEL_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "06_fa2_full/fa2_steps.cuh" /* the online softmax's steps, cp.async, ldmatrix, mma, the swizzle */
#include "10_context_parallel/cp_merge.h"
#include "decode_gpu.h"
#include "decode_split.h"
#include "launch_opt_in.cuh"

#define DECODE_THREADS (32 * DECODE_WARPS)

/* ---- shared memory: | Q: rows x D | ring: STAGES x (K tile | V tile), DECODE_BC rows each | ----------
 * Every tile is rows of D / 8 16-byte chunks, XOR-swizzled (FA2_CHUNK_OFFSET). Stages per D: as many as
 * keep about 64-96 KB of K and V in the ring (D = 128: 3 x 32 KB) while two blocks still fit an SM. */
static __host__ __device__ constexpr int decode_stages(int d) { return d <= 32 ? 6 : d <= 64 ? 4 : 3; }
static __host__ __device__ constexpr int decode_tile_bytes(int d) { return DECODE_BC * d * 2; }
static __host__ __device__ constexpr int decode_q_bytes(int d, int wk) {
    return decode_block_rows(wk) * d * 2;
}
static __host__ __device__ constexpr int decode_ring_bytes(int d) {
    return decode_stages(d) * 2 * decode_tile_bytes(d);
}
static __host__ __device__ constexpr int decode_smem_bytes(int d, int wk) {
    return decode_q_bytes(d, wk) + decode_ring_bytes(d);
}
/* After the key loop the ring holds the warps' partials: 16 rows x (D + 8) floats a warp (8 floats of
 * padding: the 8 rows of a float2 store land 8 banks apart), their LSEs, the merge weights, the LSEs. */
#define DECODE_O_STRIDE(d) ((d) + 8)
static __host__ __device__ constexpr int decode_scratch_bytes(int d) {
    return DECODE_WARPS * 16 * DECODE_O_STRIDE(d) * 4 + DECODE_WARPS * 16 * 4 +
           64 * DECODE_WARPS * (int)sizeof(cp_weights) + 64 * 4;
}

extern __shared__ __align__(128) unsigned char decode_smem[];

/* One 16-bit value of dtype DTYPE, round to nearest */
template <int DTYPE> static __device__ __forceinline__ uint16_t decode_to_bits(float x) {
    return (uint16_t)(pack_16x2<DTYPE>(x, 0.f) & 0xffffu);
}

/* The block's place in the grid and its chunk. */
typedef struct {
    int64_t bg;     /* b H_kv + g */
    int64_t b, g;   /* sequence, K/V head */
    int c, r0;      /* chunk, first of the block's rows */
    int len;        /* keys in the sequence's cache */
    int first, end; /* the chunk's keys [first, end) */
    uint32_t smem;  /* shared-memory address of the Q tile; the ring follows it */
} decode_block;

static __device__ __forceinline__ decode_block decode_block_of(const decode_params *p, int rows) {
    decode_block k;
    k.bg = (int64_t)blockIdx.x / p->S;
    k.c = (int)((int64_t)blockIdx.x % p->S);
    k.b = k.bg / p->H_kv;
    k.g = k.bg % p->H_kv;
    k.r0 = (int)blockIdx.y * rows;
    k.len = p->cache_len != NULL ? p->cache_len[k.b] : p->len_all;
    int64_t first, end;
    decode_chunk_keys(k.len, p->S, k.c, &first, &end);
    k.first = (int)first;
    k.end = (int)end;
    k.smem = fa2_smem_address(decode_smem);
    return k;
}

/* The end of the keys any of the block's rows sees: the chunk's end, or causal the last visible key of
 * its largest query index i (query i of N_q sees keys 0 .. len - N_q + i) plus one. Tiles past it are
 * masked for every row and are not loaded: a square causal problem (N_q = N_k) skips about half its
 * tiles, decoding (N_q <= 16 at the cache's end) none but the last. Skipping changes no bit: a tile
 * that is all -inf for a row leaves its m, l and O as they were (alpha = 2^0 = 1, P = 0). */
static __device__ __forceinline__ int decode_block_key_end(const decode_params *p, const decode_block *k,
                                                           int rows) {
    if (!p->causal) return k->end;
    const int r1 = min(k->r0 + rows, p->R); /* one past the block's last real row */
    const int i0 = k->r0 % p->N_q, i1 = (r1 - 1) % p->N_q;
    const int i_max = r1 - k->r0 >= p->N_q || i1 < i0 ? p->N_q - 1 : i1; /* the rows wrap past N_q - 1 */
    return max(k->first, min(k->end, k->len - p->N_q + i_max + 1));
}

/* ---- loads ------------------------------------------------------------------------------------------ */

/* The block's query rows r0 .. r0 + ROWS - 1 of group bg, rows >= R zero-filled. In Q [B, H, N_q, D]
 * the R rows of (b, g) are one run: query head g G + r / N_q, query r % N_q is row bg R + r. */
template <int D, int ROWS>
static __device__ __forceinline__ void decode_load_q(const decode_params *p, const decode_block *k) {
    constexpr int CH = D / 8;
    const uint16_t *src = p->q + (k->bg * p->R + k->r0) * D;
    const int valid = min(ROWS, p->R - k->r0);
    for (int x = (int)threadIdx.x; x < ROWS * CH; x += DECODE_THREADS) {
        const int row = x / CH, ch = x % CH, ok = row < valid;
        fa2_cp_async_16(k->smem + (uint32_t)FA2_CHUNK_OFFSET(CH, 1, row, ch),
                        src + (ok ? row : 0) * D + ch * 8, ok ? 16u : 0u);
    }
}

/* 16 bytes of key row `row` of K and of V into the tile at dst (a ring stage's K tile; its V tile
 * follows), from element offset off of the pools; zero-filled where !ok (nothing is read there). */
template <int D>
static __device__ __forceinline__ void decode_copy_row(const decode_params *p, uint32_t dst, int row, int ch,
                                                       int64_t off, int ok) {
    const uint32_t at = dst + (uint32_t)FA2_CHUNK_OFFSET(D / 8, 1, row, ch);
    fa2_cp_async_16(at, p->k + off, ok ? 16u : 0u);
    fa2_cp_async_16(at + (uint32_t)decode_tile_bytes(D), p->v + off, ok ? 16u : 0u);
}

/*
 * Keys k0 .. k0 + n - 1 (n <= DECODE_BC) of K and V into ring stage `slot`. Rows >= n are zero-filled
 * and their keys never read: a pool's slots past a sequence's end may hold anything, NaN included.
 * Thread t copies chunk t % (D / 8) of rows t / (D / 8) + i STEP: consecutive threads read consecutive
 * 16 bytes of a key row. Key j of sequence b, K/V head g lies in page table[b][j / page_size], slot
 * j % page_size, of pools [pages, H_kv, page_size, D]: the tile's first entry and slot are found once,
 * and each row steps on from there (at most 64 / page_size + 1 pages a tile), K and V of a row sharing
 * its lookup. Without a table the tile is one run of rows (sequence b in page b): one base, and the
 * rows' offsets are constants.
 */
template <int D, int WK>
static __device__ __forceinline__ void decode_load_kv(const decode_params *p, const decode_block *k, int slot,
                                                      int k0, int n) {
    constexpr int CH = D / 8, STEP = DECODE_THREADS / CH;
    static_assert(DECODE_THREADS % CH == 0 && DECODE_BC % STEP == 0, "threads keep their chunk column");
    const int tid = (int)threadIdx.x, ch = tid % CH, row0 = tid / CH;
    const uint32_t dst = k->smem + (uint32_t)(decode_q_bytes(D, WK) + slot * 2 * decode_tile_bytes(D));
    if (p->block_table == NULL) {
        const int64_t base = ((k->b * p->H_kv + k->g) * p->page_size + k0) * D + ch * 8;
#pragma unroll
        for (int i = 0; i < DECODE_BC / STEP; ++i) {
            const int row = row0 + i * STEP, ok = row < n;
            decode_copy_row<D>(p, dst, row, ch, base + (ok ? row : 0) * D, ok);
        }
        return;
    }
    const int ps = (int)p->page_size, e0 = k0 / ps, s0 = k0 - e0 * ps;
    const int32_t *entry = p->block_table + k->b * p->table_stride + e0;
    const int64_t head = k->g * ps * (int64_t)D + ch * 8; /* K/V head g's rows inside a page */
#pragma unroll
    for (int i = 0; i < DECODE_BC / STEP; ++i) {
        const int row = row0 + i * STEP, ok = row < n;
        int e = 0, at = s0 + (ok ? row : 0);
        while (at >= ps) at -= ps, ++e;
        const int64_t page = __ldg(entry + e);
        decode_copy_row<D>(p, dst, row, ch, page * p->H_kv * ps * D + head + (int64_t)at * D, ok);
    }
}

/* This warp's 16-row slice of Q as A fragments, held for the whole chunk (D / 16 x 4 registers). A
 * negative scale runs as -Q: the sign bit of every 16-bit element flipped (fp16 and bf16 alike). */
template <int D, int WK>
static __device__ __forceinline__ void decode_q_fragments(const decode_params *p, const decode_block *k,
                                                          uint32_t (*q_frag)[4]) {
    const int lane = (int)threadIdx.x & 31, slice = ((int)threadIdx.x >> 5) / WK;
    const int row = slice * 16 + fa2_ldmatrix_row_a(lane), ch = fa2_ldmatrix_chunk_a(lane);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        fa2_ldmatrix_x4(q_frag[kk], k->smem + (uint32_t)FA2_CHUNK_OFFSET(D / 8, 1, row, 2 * kk + ch));
        if (p->negate_q)
#pragma unroll
            for (int e = 0; e < 4; ++e) q_frag[kk][e] ^= 0x80008000u;
    }
}

/* ---- one key tile, one warp: its Bc / WK keys of the tile against its 16 rows ---------------------- */

/* S = Q K^T for the warp's KW keys: per 16-wide slice of D, one ldmatrix of K per 16 keys, 2 mma. */
template <int DTYPE, int D, int KW>
static __device__ __forceinline__ void decode_scores(float (*s)[4], const uint32_t (*q_frag)[4],
                                                     uint32_t kbuf, int key_row, int lane) {
    const int krow = key_row + fa2_ldmatrix_row_k(lane), kch = fa2_ldmatrix_chunk_k(lane);
#pragma unroll
    for (int nt = 0; nt < KW / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int nb = 0; nb < KW / 16; ++nb) {
            uint32_t b[4];
            fa2_ldmatrix_x4(b, kbuf + (uint32_t)FA2_CHUNK_OFFSET(D / 8, 1, krow + nb * 16, 2 * kk + kch));
            fa2_mma_16x8x16<DTYPE>(s[2 * nb], q_frag[kk], b[0], b[1]);
            fa2_mma_16x8x16<DTYPE>(s[2 * nb + 1], q_frag[kk], b[2], b[3]);
        }
}

/* O += P V for the warp's KW keys: P from the S registers (fa2_p_as_a_operand), V by ldmatrix.trans. */
template <int DTYPE, int D, int KW>
static __device__ __forceinline__ void decode_accumulate_pv(float (*o)[4], const uint32_t (*p_frag)[2],
                                                            uint32_t vbuf, int key_row, int lane) {
    const int vrow = key_row + fa2_ldmatrix_row_a(lane), vch = fa2_ldmatrix_chunk_a(lane);
#pragma unroll
    for (int kk = 0; kk < KW / 16; ++kk) {
        uint32_t a[4];
        fa2_p_as_a_operand(a, p_frag, kk);
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
            uint32_t b[4];
            fa2_ldmatrix_x4_trans(b,
                                  vbuf + (uint32_t)FA2_CHUNK_OFFSET(D / 8, 1, vrow + kk * 16, 2 * dn + vch));
            fa2_mma_16x8x16<DTYPE>(o[2 * dn], a, b[0], b[1]);
            fa2_mma_16x8x16<DTYPE>(o[2 * dn + 1], a, b[2], b[3]);
        }
    }
}

/*
 * The tile of keys k0 .. k0 + Bc - 1 in ring stage `slot`, for this warp: S, stage 06's online softmax
 * (m, l, alpha in base 2; m on raw scores), O += P V. MASK tiles only: a key is visible to query i of
 * N_q when it lies in the chunk (< end) and, causal, at or before the query's own position in the
 * sequence (<= len - N_q + i); the rest become -inf, so 2^-inf = 0. A row that has seen no key keeps
 * m = -inf and takes 0 as its reference, so that no -inf - (-inf) is formed.
 */
template <int DTYPE, int D, int WK, int MASK>
static __device__ __forceinline__ void decode_tile(const decode_params *p, const decode_block *k, int slot,
                                                   int k0, const uint32_t (*q_frag)[4], float (*o)[D / 8][4],
                                                   float (*m)[2], float (*l)[2]) {
    constexpr int KW = DECODE_BC / WK;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5, slice = warp / WK;
    const int key_row = (warp % WK) * KW; /* the warp's first key of the tile */
    const uint32_t kbuf = k->smem + (uint32_t)(decode_q_bytes(D, WK) + slot * 2 * decode_tile_bytes(D));
    const uint32_t vbuf = kbuf + (uint32_t)decode_tile_bytes(D);
    float s[1][KW / 8][4];
    decode_scores<DTYPE, D, KW>(s[0], q_frag, kbuf, key_row, lane);
    uint32_t p_frag[1][KW / 8][2];
    const int key0 = k0 + key_row + fa2_fragment_col(lane, 0); /* this lane's first key column */
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int visible = 0; /* keys key0 + 8 nt + e < key0 + visible are visible to this row */
        if (MASK) {
            const int i = (k->r0 + slice * 16 + fa2_fragment_row(lane, h)) % p->N_q;
            visible = (p->causal ? min(k->end, k->len - p->N_q + i + 1) : k->end) - key0;
        }
        const float mx = fa2_masked_row_max<KW / 8, MASK>(s[0], h, m[0][h], visible);
        const float m_scaled = __fmul_rn(mx == -INFINITY ? 0.f : mx, p->scale_log2);
        /* two rounded products: an unchanged max gives alpha = 2^0 = 1 exactly, where fmaf's unrounded
         * m sl2 gave 1 - 2^-24 or so at every tile, and l, so the LSE, drifted with the tiles (06m) */
        const float alpha = fast_exp2(__fmul_rn(m[0][h], p->scale_log2) - m_scaled);
        m[0][h] = mx;
        l[0][h] = l[0][h] * alpha +
                  fa2_exponentiate_row<DTYPE, KW / 8>(s[0], p_frag[0], h, p->scale_log2, m_scaled);
        fa2_rescale_o_row<D>(o[0], h, alpha);
    }
    decode_accumulate_pv<DTYPE, D, KW>(o[0], p_frag[0], vbuf, key_row, lane);
}

/* Tile t of the chunk: wait for it, start tile t + STAGES - 1 into the stage tile t - 1 has left, then
 * compute tile t. cp.async.wait_group n leaves at most n of this thread's groups in flight: Q and tiles
 * 0 .. t are the first t + 2 of the STAGES + t committed, so n = STAGES - 2. The barrier makes every
 * thread's copies of tile t visible, and tells that every warp is done with tile t - 1. An empty group
 * is committed past the last tile, so that the count holds to the end. */
template <int DTYPE, int D, int WK, int MASK>
static __device__ __forceinline__ void decode_step(const decode_params *p, const decode_block *k, int t,
                                                   int n_tiles, const uint32_t (*q_frag)[4],
                                                   float (*o)[D / 8][4], float (*m)[2], float (*l)[2]) {
    constexpr int STAGES = decode_stages(D);
    fa2_cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = t + STAGES - 1, next0 = k->first + next * DECODE_BC;
    if (next < n_tiles) decode_load_kv<D, WK>(p, k, next % STAGES, next0, min(DECODE_BC, k->end - next0));
    fa2_cp_async_commit();
    decode_tile<DTYPE, D, WK, MASK>(p, k, t % STAGES, k->first + t * DECODE_BC, q_frag, o, m, l);
}

/* ---- the block's partial: its warps' partials merged, then stored ------------------------------------ */

/* The block's scratch after the key loop, over the ring (the copies are done and every warp is past its
 * last tile): each warp's O / l (16 rows x D floats) and LSE, then per block row the WK merge weights
 * and the merged LSE. */
template <int D> static __device__ __forceinline__ float *decode_scratch_o(int warp) {
    return (float *)decode_smem + warp * 16 * DECODE_O_STRIDE(D);
}
template <int D> static __device__ __forceinline__ float *decode_scratch_lse(void) {
    return (float *)decode_smem + DECODE_WARPS * 16 * DECODE_O_STRIDE(D);
}

/* This warp's partial over its keys of the chunk: O_w = O / l and LSE_w = m sl2 ln 2 + ln l, natural log
 * (O_w = 0 and LSE_w = -inf where the row saw no key: its merge weight is then exactly 0). */
template <int D>
static __device__ __forceinline__ void decode_warp_partial(const decode_params *p, float (*o)[D / 8][4],
                                                           float (*m)[2], float (*l)[2]) {
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    float inv_l[1][2];
    fa2_normalise_o<D, 1>(l, inv_l); /* l summed over the quad */
    float *os = decode_scratch_o<D>(warp);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = fa2_fragment_row(lane, h);
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
            *(float2 *)(os + row * DECODE_O_STRIDE(D) + dt * 8 + fa2_fragment_col(lane, 0)) =
                make_float2(o[0][dt][2 * h] * inv_l[0][h], o[0][dt][2 * h + 1] * inv_l[0][h]);
        if ((lane & 3) == 0)
            decode_scratch_lse<D>()[warp * 16 + row] =
                l[0][h] > 0.f ? m[0][h] * p->scale_log2 * ATTN_LN2 + logf(l[0][h]) : -INFINITY;
    }
}

/*
 * The chunk's partial of each block row: the WK warp partials of its slice merged in warp order from
 * (-inf, 0) with cp_merge.h (the weights once a row, then every element), as the combine merges the
 * chunks. Stored as fp32 partials for the combine, or, with one chunk (S = 1), as O and LSE themselves.
 */
template <int DTYPE, int D, int WK>
static __device__ __forceinline__ void decode_store_block(const decode_params *p, const decode_block *k) {
    constexpr int ROWS = decode_block_rows(WK);
    const int tid = (int)threadIdx.x;
    const float *lse_w = decode_scratch_lse<D>();
    cp_weights *w = (cp_weights *)(decode_scratch_lse<D>() + DECODE_WARPS * 16);
    float *lse_row = (float *)(w + ROWS * WK);
    if (tid < ROWS) {
        float lse = -INFINITY;
#pragma unroll
        for (int x = 0; x < WK; ++x) {
            w[tid * WK + x] = cp_merge_weights(lse, lse_w[((tid / 16) * WK + x) * 16 + tid % 16]);
            lse = w[tid * WK + x].lse;
        }
        lse_row[tid] = lse;
    }
    __syncthreads();
    const int64_t part = (k->bg * p->S + k->c) * p->R; /* row 0 of this chunk's partials */
    for (int e = tid; e < ROWS * D; e += DECODE_THREADS) {
        const int r = e / D, d = e % D, row = k->r0 + r;
        if (row >= p->R) break; /* rows past R are padding; e only grows */
        float acc = 0.f;
#pragma unroll
        for (int x = 0; x < WK; ++x)
            acc = cp_merge_elem(w[r * WK + x], acc,
                                decode_scratch_o<D>((r / 16) * WK + x)[(r % 16) * DECODE_O_STRIDE(D) + d]);
        if (p->S == 1)
            p->o[(k->bg * p->R + row) * D + d] = decode_to_bits<DTYPE>(acc);
        else
            p->part_o[(part + row) * D + d] = acc;
    }
    if (tid < ROWS && k->r0 + tid < p->R) {
        if (p->S == 1)
            p->lse[k->bg * p->R + k->r0 + tid] = lse_row[tid];
        else
            p->part_lse[part + k->r0 + tid] = lse_row[tid];
    }
}

/* ---- the kernels -------------------------------------------------------------------------------------- */

/*
 * Grid (B H_kv S, ceil(R / rows)): x = (b H_kv + g) S + c, so the chunks of one (b, g) run side by side.
 * Tiles wholly below lim0 (every key of the chunk before the first row's own position) are visible to
 * every row and run without the mask; the rest, decoding's last one or two, run with it, and the
 * tiles past what any row sees are skipped (decode_block_key_end).
 */
template <int DTYPE, int D, int WK>
__global__ void __launch_bounds__(DECODE_THREADS, 2) decode_split_kernel(const decode_params p) {
    constexpr int ROWS = decode_block_rows(WK), STAGES = decode_stages(D);
    static_assert(decode_scratch_bytes(D) <= decode_smem_bytes(D, WK), "the merge's scratch fits the ring");
    const decode_block k = decode_block_of(&p, ROWS);
    const int n_tiles = (decode_block_key_end(&p, &k, ROWS) - k.first + DECODE_BC - 1) / DECODE_BC;
    const int lim0 = p.causal ? min(k.end, k.len - p.N_q + 1) : k.end;
    const int n_plain = lim0 > k.first ? (lim0 - k.first) / DECODE_BC : 0;

    decode_load_q<D, ROWS>(&p, &k);
    fa2_cp_async_commit();
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
        const int t0 = k.first + t * DECODE_BC;
        if (t < n_tiles) decode_load_kv<D, WK>(&p, &k, t, t0, min(DECODE_BC, k.end - t0));
        fa2_cp_async_commit();
    }
    fa2_cp_async_wait<STAGES - 1>(); /* Q, the first group, has landed */
    __syncthreads();
    uint32_t q_frag[D / 16][4];
    decode_q_fragments<D, WK>(&p, &k, q_frag);
    float o[1][D / 8][4], m[1][2], l[1][2];
    fa2_init_row_state<D, 1>(o, m, l);
    int t = 0;
    for (; t < n_plain; ++t) decode_step<DTYPE, D, WK, 0>(&p, &k, t, n_tiles, q_frag, o, m, l);
    for (; t < n_tiles; ++t) decode_step<DTYPE, D, WK, 1>(&p, &k, t, n_tiles, q_frag, o, m, l);

    fa2_cp_async_wait<0>();
    __syncthreads(); /* the ring becomes the merge's scratch */
    decode_warp_partial<D>(&p, o, m, l);
    __syncthreads();
    decode_store_block<DTYPE, D, WK>(&p, &k);
}

/* One warp per query row (row = (b H_kv + g) R + r, which is also its row of O and LSE): the row's S
 * partials merged in chunk order from (-inf, 0), D / 32 elements a lane. */
template <int DTYPE, int D>
__global__ void __launch_bounds__(DECODE_THREADS) decode_combine_kernel(const decode_params p, int64_t rows) {
    const int64_t row = (int64_t)blockIdx.x * DECODE_WARPS + (threadIdx.x >> 5);
    const int lane = (int)threadIdx.x & 31;
    if (row >= rows) return;
    const int64_t bg = row / p.R, r = row % p.R;
    const float *po = p.part_o + (bg * p.S * p.R + r) * D, *pl = p.part_lse + bg * p.S * p.R + r;
    float lse = -INFINITY, o[D / 32];
#pragma unroll
    for (int e = 0; e < D / 32; ++e) o[e] = 0.f;
    for (int c = 0; c < p.S; ++c) {
        const cp_weights w = cp_merge_weights(lse, pl[(int64_t)c * p.R]);
#pragma unroll
        for (int e = 0; e < D / 32; ++e)
            o[e] = cp_merge_elem(w, o[e], po[(int64_t)c * p.R * D + lane + 32 * e]);
        lse = w.lse;
    }
#pragma unroll
    for (int e = 0; e < D / 32; ++e) p.o[row * D + lane + 32 * e] = decode_to_bits<DTYPE>(o[e]);
    if (lane == 0) p.lse[row] = lse;
}

/* ---- the launches ------------------------------------------------------------------------------------- */

/* The split kernel for WK warps a slice, opted in once per device (kit/launch_opt_in.cuh). */
template <int DTYPE, int D, int WK>
static cudaError_t decode_launch_split(const decode_params *kp, int64_t B, cudaStream_t stream,
                                       const char **why) {
    constexpr int SMEM = decode_smem_bytes(D, WK), ROWS = decode_block_rows(WK);
    static int configured[KIT_MAX_DEVICES];
    const dim3 grid((unsigned)(B * kp->H_kv * kp->S), (unsigned)((kp->R + ROWS - 1) / ROWS));
    return kit_launch_opted_in((const void *)decode_split_kernel<DTYPE, D, WK>, configured, grid,
                               dim3(DECODE_THREADS), SMEM, kp, stream, "the split kernel's launch failed",
                               why);
}

/* The split kernel for the rows' WK, then (S > 1) the combine. */
template <int DTYPE, int D>
static cudaError_t decode_launch_dim(const decode_params *kp, int64_t B, cudaStream_t stream,
                                     const char **why) {
    const int wk = decode_key_warps(kp->R);
    cudaError_t e = wk == 4   ? decode_launch_split<DTYPE, D, 4>(kp, B, stream, why)
                    : wk == 2 ? decode_launch_split<DTYPE, D, 2>(kp, B, stream, why)
                              : decode_launch_split<DTYPE, D, 1>(kp, B, stream, why);
    if (e != cudaSuccess || kp->S == 1) return e;
    int64_t rows = B * kp->H_kv * kp->R;
    void *args[2] = {(void *)kp, (void *)&rows};
    e = cudaLaunchKernel((const void *)decode_combine_kernel<DTYPE, D>,
                         dim3((unsigned)((rows + DECODE_WARPS - 1) / DECODE_WARPS)), dim3(DECODE_THREADS),
                         args, 0, stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *why = "the combine's launch failed";
    }
    return e;
}

template <int DTYPE>
static cudaError_t decode_launch(const decode_params *kp, int64_t B, int64_t D, cudaStream_t stream,
                                 const char **why) {
    switch (D) {
    case 32: return decode_launch_dim<DTYPE, 32>(kp, B, stream, why);
    case 64: return decode_launch_dim<DTYPE, 64>(kp, B, stream, why);
    case 128: return decode_launch_dim<DTYPE, 128>(kp, B, stream, why);
    }
    *why = "head dim must be " STAGE15_DIMS_TEXT; /* decode_gpu.c refuses it before */
    return cudaErrorInvalidValue;
}

#endif
