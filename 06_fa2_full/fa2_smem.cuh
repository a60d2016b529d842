/*
 * fa2_smem.cuh: stage 06's shared memory. One block holds
 *
 *     | Q tile (Br rows) | K buffer(s) (Bc rows each) | V buffer(s) | P tiles (06a only, one per warp) |
 *
 * from a base rounded up to 1024 bytes, every tile rows of D/8 16-byte chunks (index functions in
 * fa2_layout.h). Here: the XOR swizzle, the cp.async copy of a tile, and the ldmatrix lane addresses.
 *
 * The swizzle. Shared memory has 32 banks of 4 bytes, so a 128-byte group of 8 chunks spans every bank
 * once. ldmatrix reads one chunk from each of 8 consecutive rows per 8x8 matrix; in a plain layout with
 * a 128- or 256-byte row those 8 chunks sit in the same 4 banks (an 8-way conflict). Storing logical
 * chunk c of row r at physical chunk c ^ (r & 7) puts them in 8 different groups. D = 128 (16 chunks
 * per row; the XOR touches the low 3 bits):
 */
// clang-format off
/*
 *             physical chunk: 0    1    2    3    4    5    6    7  | 8 .. 15
 *   row 0 holds logical      c0   c1   c2   c3   c4   c5   c6   c7  | c8  .. c15
 *   row 1                    c1   c0   c3   c2   c5   c4   c7   c6  | c9  c8 ..
 *   row 2                    c2   c3   c0   c1   c6   c7   c4   c5  | c10 c11 ..
 *   ...
 *   row 7                    c7   c6   c5   c4   c3   c2   c1   c0  | c15 .. c8
 *   -> logical chunk 0 of rows 0..7 lies in physical chunks 0..7: all 32 banks, one wavefront.
 */
// clang-format on
/*
 * D = 32 has 4 chunks (64 bytes) per row, two rows per 128-byte group, so the XOR uses (r >> 1) & 3.
 * The cp.async side writes with the same function, so writer and reader agree by construction; a
 * 16-byte cp.async store or 16-byte epilogue load by 8 consecutive lanes covers 8 distinct chunks of
 * one row (or of two rows at D = 32), again all 32 banks. tests/test_fa2_blocks.c checks both claims.
 */
#ifndef FA2_SMEM_CUH
#define FA2_SMEM_CUH

#include "fa2_layout.h"
#include "fa2_ptx.cuh"
#include "fa2_traits.cuh"

/* The dynamic shared memory of every stage 06 kernel; the kernels round its address up to 1024 bytes. */
extern __shared__ __align__(16) unsigned char fa2_smem[];

/* Address of chunk pair k (32-byte step) or chunk k (16-byte step) from a lane's base address whose
 * chunk bits hold the lane's own swizzle term. With the base 1024-aligned and rows a power of two
 * bytes, XOR-ing the address equals XOR-ing the chunk index: one LOP3, and the row offsets then fold
 * into the instruction's immediate. Unswizzled, it is a plain add. */
template <int SWIZZLE> static __device__ __forceinline__ uint32_t fa2_at_chunk_pair(uint32_t base, int k) {
    return SWIZZLE ? base ^ ((uint32_t)k << 5) : base + ((uint32_t)k << 5);
}
template <int SWIZZLE> static __device__ __forceinline__ uint32_t fa2_at_chunk(uint32_t base, int k) {
    return SWIZZLE ? base ^ ((uint32_t)k << 4) : base + ((uint32_t)k << 4);
}

/* ldmatrix lane offsets inside a 16-row block of a tile: Q, V and P use the A pattern, K its own
 * (fa2_layout.h). The chunk bits carry the lane's swizzle term, so the next 16 columns are one
 * fa2_at_chunk_pair away. */
template <int ROW_CHUNKS, int SWIZZLE>
static __device__ __forceinline__ uint32_t fa2_lane_offset_a(int lane) {
    return (uint32_t)FA2_CHUNK_OFFSET(ROW_CHUNKS, SWIZZLE, fa2_ldmatrix_row_a(lane),
                                      fa2_ldmatrix_chunk_a(lane));
}
template <int ROW_CHUNKS, int SWIZZLE>
static __device__ __forceinline__ uint32_t fa2_lane_offset_k(int lane) {
    return (uint32_t)FA2_CHUNK_OFFSET(ROW_CHUNKS, SWIZZLE, fa2_ldmatrix_row_k(lane),
                                      fa2_ldmatrix_chunk_k(lane));
}

/* ---- the cp.async copy of one tile ------------------------------------------------------------------
 * A thread keeps one chunk column and steps down the rows, threads / C at a time (C from
 * fa2_copy_chunks). When that step is a multiple of 8 (every tuned tile) all rows a thread touches
 * have the same swizzle term: the per-copy offsets are constants that fold into the instructions. */
typedef struct {
    uint32_t smem_offset; /* smem offset of this thread's first chunk inside a tile */
    int global_offset;    /* element offset of the same chunk in global memory (row `row`, column 8 chunk) */
    int row;              /* first row */
    int chunk;            /* chunk column */
    int active;           /* chunk < D/8 (only D = 96 has idle threads) */
} fa2_copy;

template <int D, int RECIPE> static __device__ __forceinline__ fa2_copy fa2_copy_setup(void) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    static_assert(T.threads % fa2_copy_chunks(D) == 0, "a thread keeps its chunk column");
    const int tid = fa2_thread_index();
    fa2_copy cp;
    cp.chunk = fa2_copy_chunk(D, tid);
    cp.row = fa2_copy_row(D, tid);
    cp.smem_offset = (uint32_t)FA2_CHUNK_OFFSET(T.row_chunks, T.swizzle, cp.row, cp.chunk);
    cp.global_offset = cp.row * D + cp.chunk * 8;
    cp.active = cp.chunk < D / 8;
    return cp;
}

/* Element offset of row r of a tile whose rows lie ld apart. The road's ld is D (contiguous): its
 * offsets stay the ints they were (r * D < 2^15 inside a tile), so that its kernels keep their code;
 * stage 06's rows may lie up to 2^31 elements apart, and r * ld is one IMAD.WIDE. */
template <int D, int RECIPE> static __device__ __forceinline__ int64_t fa2_row_offset(int r, int ld) {
    if (!fa2_traits_of(D, RECIPE).any_shape) return r * D;
    return fa2_mul_wide(r, ld);
}

/* Element offset of n groups of `per` rows, rows ld apart, n * per up to 2^30: the road's
 * (int64_t)n * per * D as it was written (its ld is D), stage 06's one IMAD.WIDE. */
template <int D, int RECIPE>
static __device__ __forceinline__ int64_t fa2_rows_offset(int n, int per, int ld) {
    if (!fa2_traits_of(D, RECIPE).any_shape) return (int64_t)n * per * D;
    return fa2_mul_wide(n * per, ld);
}

/* smem offset of a thread's i-th chunk of a tile */
template <int D, int RECIPE>
static __device__ __forceinline__ uint32_t fa2_copy_destination(const fa2_copy *cp, int i) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    constexpr int STEP = T.threads / fa2_copy_chunks(D);
    if (STEP % 8 == 0) return cp->smem_offset + (uint32_t)(i * STEP * T.row_bytes);
    const int r = cp->row + i * STEP; /* D = 256 on 4 warps (the road's tiles): the term alternates */
    return (uint32_t)FA2_CHUNK_OFFSET(T.row_chunks, T.swizzle, r, cp->chunk);
}

/* Starts the copy of a ROWS x D tile (rows_valid of them inside N), row r at src + r * ld, into the
 * tile at sdst. Consecutive threads take consecutive 16-byte chunks of a row: fully coalesced global
 * reads (within a row; ld apart, rows are as coalesced as the layout lets them be).
 * CHECK = 0: the caller knows the tile is whole (every key tile but the last one, Tc-1); the copies
 * are one base address plus constants. CHECK = 1: rows >= rows_valid are zero-filled (src-size 0);
 * their source address is clamped to the last valid row so that it stays inside the tensor. */
template <int ROWS, int D, int RECIPE, int CHECK>
static __device__ __forceinline__ void fa2_copy_tile(uint32_t sdst, const uint16_t *src, int ld,
                                                     int rows_valid, const fa2_copy *cp) {
    constexpr int STEP = fa2_traits_of(D, RECIPE).threads / fa2_copy_chunks(D);
    static_assert(ROWS % STEP == 0, "tile rows must split evenly over the threads");
    if (D / 8 != fa2_copy_chunks(D) && !cp->active) return;
    if (!CHECK || rows_valid >= ROWS) {
        const uint16_t *g = src + (fa2_traits_of(D, RECIPE).any_shape ? (int64_t)cp->row * ld + cp->chunk * 8
                                                                      : cp->global_offset);
#pragma unroll
        for (int i = 0; i < ROWS / STEP; ++i)
            fa2_cp_async_16(sdst + fa2_copy_destination<D, RECIPE>(cp, i), g + (int64_t)(i * STEP) * ld, 16u);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / STEP; ++i) {
            const int r = cp->row + i * STEP;
            fa2_cp_async_16(sdst + fa2_copy_destination<D, RECIPE>(cp, i),
                            src + fa2_row_offset<D, RECIPE>(min(r, rows_valid - 1), ld) + cp->chunk * 8,
                            r < rows_valid ? 16u : 0u);
        }
    }
}

/* scale < 0 only: flips the sign bit of the Q chunks this thread copied (after its own wait). */
template <int ROWS, int D, int RECIPE>
static __device__ __forceinline__ void fa2_negate_tile(uint32_t sdst, const fa2_copy *cp) {
    constexpr int STEP = fa2_traits_of(D, RECIPE).threads / fa2_copy_chunks(D);
    if (D / 8 != fa2_copy_chunks(D) && !cp->active) return;
#pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
        const uint32_t a = sdst + fa2_copy_destination<D, RECIPE>(cp, i);
        uint32_t x[4];
        fa2_ld_shared_16(x, a);
#pragma unroll
        for (int e = 0; e < 4; ++e) x[e] ^= 0x80008000u;
        fa2_st_shared_16(a, x);
    }
}

#endif
