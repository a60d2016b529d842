/*
 * 06_fa2_full/fa2.cu: stage 06, the complete FlashAttention-2 forward kernel, and fa2_forward(), the
 * C entry point of build/libfa2.a (stage06_run() in stage06.c goes through the same code).
 *
 * What this stage adds. The algorithm is stage 05's: the Q tile stays on chip for the whole kernel,
 * one pass over the key tiles keeps a running max m, a running sum l and rescales by alpha, exp2
 * takes scale*log2(e) as one multiplier, and under a causal mask the tiles below the diagonal run
 * unmasked, the tiles on it masked, the tiles above it are never visited. What changes is the
 * machinery that runs it:
 *   1. Tensor cores. S = Q K^T and O += P V are mma.sync.m16n8k16 (fp16 or bf16 in, fp32 accumulate),
 *      operands read from shared memory by ldmatrix (.trans for V). One mma = 4096 flops.
 *   2. The FA2 work split. Each warp owns whole 16-row slices of the Q tile, so a row's max and sum
 *      are finished inside one quad of 4 lanes (2 shuffles): no cross-warp reduction, no barrier.
 *   3. P never leaves registers. The fp32 accumulator of S, exponentiated and rounded to 16 bits,
 *      already has the layout of the A operand of P V (fragment map below).
 *   4. K and V arrive by cp.async (16 bytes, L1 bypassed), double-buffered: tile j-1 is in flight
 *      while tile j is multiplied.
 *   5. Shared memory is XOR-swizzled in 16-byte chunks: no bank conflicts for the cp.async stores
 *      or the ldmatrix reads, and no padding.
 *   6. LSE: O is divided by l once at the end; LSE = m2 ln 2 + ln l turns the base-2 running values
 *      into the natural log the contract asks for. bf16 as well as fp16.
 * Changed versus stage 05: its fp32 FFMA micro-tiles (4x4 per thread, fp16 converted to fp32 when
 * staged, rows padded to D+4 floats, P written to shared memory for P V, 16 threads per row, plain
 * loads, 64x64 tiles) became mma.sync on fp16/bf16 kept as they are in swizzled smem, P in registers,
 * one quad per row, a cp.async pipeline and 128-row tiles; LSE and bf16 are new.
 *
 * Limits: head dim 32, 64, 96, 128 or 256 (64 and 128 tuned; D=96 pads its smem rows to 128 halves),
 * fp16 or bf16, sm_80 or newer, 16-byte aligned tensors, N <= 2^30, B*H <= 65535^2. Rows past N are
 * read as zeros and never written.
 *
 * Run it:    build/attn --stage 06 --batch 4 --heads 32 --seq 4096 --dim 128 --check
 * The road:  make fa2-road && bash 06_fa2_full/road.sh   (one binary per setting of the switches below)
 * Registers: make fa2-sass                                 (ptxas report: 0 spills for every kernel)
 */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "fa2.h"
#include "fa2_internal.h"

#include "fa2_switches.h" /* the road's compile-time switches; defaults = the final kernel */

#define FA2_LOG2E 1.4426950408889634f
#define FA2_LN2 0.69314718055994531f
#define FA2_MAX_DEVICES 64
#define FA2_GRID_YZ 65535 /* grid.y and grid.z limit */

enum { FA2_DT_F16 = 0, FA2_DT_BF16 = 1 };

/*
 * ---- tile table ---------------------------------------------------------------------------------
 * Br query rows per block, Bc keys per loaded K/V tile, Bcs keys per compute step (Bcs <= Bc), warps
 * per block; each warp owns MT = Br / (16 warps) slices of 16 rows. Registers per thread of the big
 * arrays (fp32, or 16-bit pairs for Q):  O: MT*D/2   S: MT*Bcs/2   Q fragments if held: MT*D/4.
 */
// clang-format off
/*
 *   D     Br x Bc (Bcs)   warps  MT  O + S regs  Q       K/V buffers     smem     blocks/SM (H200)
 *   32    128 x 128 (64)  4      2   32 + 64     regs    2 + 2 (double)  41 KB    2 (registers)
 *   64    128 x 128 (64)  4      2   64 + 64     regs    2 + 2 (double)  81 KB    2
 *   96    128 x  64       4      2   96 + 64     smem    2 + 2 (double)  97 KB    2
 *   128   128 x  64       4      2  128 + 64     smem    2 + 2 (double)  97 KB    2
 *   256   128 x  64       8      1  128 + 32     smem    1 + 1 (FA2)    129 KB    1
 */
// clang-format on
/*
 * These are FA2's own tiles (D=64 128x128, D=128 128x64, D=256 128x64 on 8 warps). Two 4-warp blocks
 * per SM: 2 x 128 threads x 255 registers fill the 64K register file, 2 x 97 KB fit the 227 KB of an
 * H100/H200 SM. 32 rows per warp (MT = 2) make every ldmatrix'd K or V fragment feed 2 mma, which
 * keeps shared-memory bandwidth below the tensor cores' need; at D=128 that leaves no room to hold
 * Q in registers (128 + 64 + 64 > 255), so Q is re-read by ldmatrix for each key tile, as FA2 does.
 * D <= 64 loads 128-key tiles (half the barriers per key) but runs the softmax 64 keys at a time.
 */
static __host__ __device__ constexpr int fa2_cfg_br(int d) {
    return FA2_TILE_SET == 0 ? 64 : (d > 0 ? 128 : 0);
}
static __host__ __device__ constexpr int fa2_cfg_bc(int d) {
    return FA2_TILE_SET == 0 ? 64 : (d <= 64 ? 128 : 64);
}
static __host__ __device__ constexpr int fa2_cfg_warps(int d) {
    return (FA2_TILE_SET != 0 && d == 256) ? 8 : 4;
}
static __host__ __device__ constexpr int fa2_cfg_minblocks(int d) { return fa2_cfg_warps(d) == 4 ? 2 : 1; }
/* D=256 uses FA2's ping-pong (one K and one V buffer): 64 KB Q + 2 x 32 KB = 128 KB, which the 163 KB
 * of an A100 can hold; double buffers would need 192 KB. */
static __host__ __device__ constexpr int fa2_cfg_pipe(int d) {
    return FA2_PIPE >= 0 ? FA2_PIPE : (d == 256 ? 1 : 2);
}
/* The ping-pong reloads K before P V, so it cannot split a tile into compute steps: Bcs = Bc there. */
static __host__ __device__ constexpr int fa2_cfg_bcs(int d) {
    return (fa2_cfg_bc(d) > 64 && fa2_cfg_pipe(d) != 1) ? 64 : fa2_cfg_bc(d);
}
static __host__ __device__ constexpr int fa2_cfg_mt(int d) { return fa2_cfg_br(d) / (16 * fa2_cfg_warps(d)); }
/* Q fragments stay in registers when O + S + Q <= 180 registers (the rest is headroom for operand
 * prefetch and addresses; measured: at 192 + 64 = 256 ptxas spills). */
static __host__ __device__ constexpr int fa2_cfg_qreg(int d) {
    return FA2_QREGS != 0 && fa2_cfg_mt(d) * (d / 4 + d / 2 + fa2_cfg_bcs(d) / 2) <= 180;
}
/* Row stride of a smem tile in 16-byte chunks: D/8, rounded up to a multiple of 8 where the swizzle
 * needs whole 128-byte groups (only D=96: 12 -> 16 chunks, 25% padding). */
static __host__ __device__ constexpr int fa2_srow(int d) {
    return (FA2_SWIZZLE && d / 8 > 8) ? (d / 8 + 7) / 8 * 8 : d / 8;
}
static __host__ __device__ constexpr int fa2_kv_bufs(int d) { return fa2_cfg_pipe(d) == 2 ? 2 : 1; }
/* Q tile + K buffers + V buffers, plus 1 KB so that the base can be rounded up to 1024 bytes. */
static __host__ __device__ constexpr int fa2_smem_bytes(int d) {
    return (fa2_cfg_br(d) + 2 * fa2_kv_bufs(d) * fa2_cfg_bc(d)) * fa2_srow(d) * 16 + 1024;
}

typedef struct {
    const uint16_t *q, *k, *v; /* [B, H, N, D] */
    uint16_t *o;               /* [B, H, N, D] */
    float *lse;                /* [B, H, N] or NULL */
    int64_t bh;                /* B*H heads */
    int n;                     /* N */
    int tr;                    /* Tr = ceil(N / Br) */
    float scale_log2;          /* |scale| * log2(e), at least FLT_MIN: the one multiplier of exp2 */
    int negate_q;              /* scale < 0: run with -Q and |scale| (the same scores, max stays max) */
} fa2_params;

/* ---- PTX wrappers -------------------------------------------------------------------------------- */

static __device__ __forceinline__ uint32_t fa2_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, bypassing L1 (.cg). src_bytes = 0 reads nothing and writes 16 zeros:
 * that is how rows past N become zero rows of the tile. */
static __device__ __forceinline__ void fa2_cp_async16(uint32_t dst, const void *src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
static __device__ __forceinline__ void fa2_cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N> static __device__ __forceinline__ void fa2_cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

static __device__ __forceinline__ void fa2_ldsm4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
static __device__ __forceinline__ void fa2_ldsm4_t(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
static __device__ __forceinline__ void fa2_lds128(uint32_t r[4], uint32_t addr) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
static __device__ __forceinline__ void fa2_sts128(uint32_t addr, const uint32_t r[4]) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]),
                 "r"(r[3])
                 : "memory");
}
static __device__ __forceinline__ void fa2_sts32(uint32_t addr, uint32_t x) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(x) : "memory");
}

/* D (16x8, fp32) += A (16x16, 16-bit, row) * B (16x8, 16-bit, col). */
template <int DT>
static __device__ __forceinline__ void fa2_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if (DT == FA2_DT_F16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats -> one register of two 16-bit values, lo in bits 0..15 (the lower column index). */
template <int DT> static __device__ __forceinline__ uint32_t fa2_pack(float lo, float hi) {
    uint32_t r;
    if (DT == FA2_DT_F16)
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* 2^x on the special-function unit; 2^-inf = +0. */
static __device__ __forceinline__ float fa2_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/*
 * ---- the swizzled smem tile -------------------------------------------------------------------------
 * A tile is rows of SROW 16-byte chunks (8 halves each). Shared memory has 32 banks of 4 bytes, so a
 * 128-byte group of 8 chunks spans every bank once. ldmatrix reads one chunk from each of 8
 * consecutive rows per 8x8 matrix; in a plain layout with a 128- or 256-byte row those 8 chunks sit in
 * the same 4 banks (8-way conflict). Storing logical chunk c of row r at physical chunk c ^ (r & 7)
 * puts them in 8 different groups. D=128 (16 chunks per row; the XOR touches the low 3 bits):
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
 * D=32 has 4 chunks (64 bytes) per row, two rows per 128-byte group, so the XOR uses (r >> 1) & 3.
 * The cp.async side writes with the same function, so writer and reader agree by construction; a
 * 16-byte cp.async store or 16-byte epilogue load by 8 consecutive lanes covers 8 distinct chunks of
 * one row (or of two rows at D=32), again all 32 banks.
 */
template <int SROW> static __device__ __forceinline__ int fa2_swz(int r) {
    static_assert(SROW >= 4, "head dim below 32 is not supported");
    return FA2_SWIZZLE == 0 ? 0 : (SROW >= 8 ? (r & 7) : ((r >> 1) & 3));
}

/* Address of chunk pair k (32-byte step) or chunk k (16-byte step) from a lane's base address whose
 * chunk bits hold the lane's own swizzle term. With the base 1024-aligned and rows a power of two
 * bytes, XOR-ing the address equals XOR-ing the chunk index: one LOP3, the row offsets then fold into
 * the instruction's immediate. Unswizzled, it is a plain add. */
#if FA2_SWIZZLE
#define FA2_AT32(base, k) ((base) ^ ((uint32_t)(k) << 5))
#define FA2_AT16(base, k) ((base) ^ ((uint32_t)(k) << 4))
#else
#define FA2_AT32(base, k) ((base) + ((uint32_t)(k) << 5))
#define FA2_AT16(base, k) ((base) + ((uint32_t)(k) << 4))
#endif

/* Copy layout: a thread keeps one chunk column c and steps down the rows, NT/CPRP at a time, with
 * CPRP = D/8 rounded up to a power of two (D=96: 12 -> 16, and threads with c >= 12 sit out). When
 * that step is a multiple of 8 (every tuned tile) all rows a thread touches have the same swizzle
 * term: the per-copy offsets are constants that fold into the instructions. */
static __host__ __device__ constexpr int fa2_cprp(int d) { return d / 8 == 12 ? 16 : d / 8; }

typedef struct {
    uint32_t soff; /* smem offset of this thread's first chunk inside a tile */
    int goff;      /* element offset of the same chunk in global memory (row r0, column 8c) */
    int r0;        /* first row */
    int c;         /* chunk column */
    int active;    /* c < D/8 (only D=96 has idle threads) */
} fa2_copy;

/* threadIdx.x through asm volatile: the front end can neither hoist nor merge these reads, so the
 * per-lane offsets derived from them are recomputed near their uses (a few integer ops per key tile)
 * instead of being computed once and kept alive through the whole key loop. At 255 registers with O,
 * S, m and l live every long-lived register counts (measured: with plain threadIdx.x, D=64 causal
 * spills 32 bytes at sm_90). */
static __device__ __forceinline__ int fa2_tid(void) {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
    return t;
}

template <int D, int NT> static __device__ __forceinline__ fa2_copy fa2_copy_setup(void) {
    constexpr int CPRP = fa2_cprp(D), SROW = fa2_srow(D), ROWB = SROW * 16;
    static_assert(NT % CPRP == 0, "a thread keeps its chunk column");
    const int tid = fa2_tid();
    fa2_copy cp;
    cp.c = tid % CPRP;
    cp.r0 = tid / CPRP;
    cp.soff = (uint32_t)(cp.r0 * ROWB + ((cp.c ^ fa2_swz<SROW>(cp.r0)) << 4));
    cp.goff = cp.r0 * D + cp.c * 8;
    cp.active = cp.c < D / 8;
    return cp;
}

/* smem offset of a thread's i-th chunk of a tile */
template <int D, int NT> static __device__ __forceinline__ uint32_t fa2_copy_dst(const fa2_copy *cp, int i) {
    constexpr int CPRP = fa2_cprp(D), SROW = fa2_srow(D), ROWB = SROW * 16, STEP = NT / CPRP;
    if (STEP % 8 == 0) return cp->soff + (uint32_t)(i * STEP * ROWB);
    const int r = cp->r0 + i * STEP; /* D=256 on 4 warps (TILE_SET 0): the term alternates */
    return (uint32_t)(r * ROWB + ((cp->c ^ fa2_swz<SROW>(r)) << 4));
}

/* Starts the copy of a ROWS x D tile (rows_valid of them inside N) into the swizzled tile at sdst.
 * Consecutive threads take consecutive 16-byte chunks of a row: fully coalesced global reads.
 * CHECK = 0: the caller knows the tile is whole (every key tile but the last one, Tc-1); the copies
 * are one base address plus constants. CHECK = 1: rows >= rows_valid are zero-filled (src-size 0);
 * their source address is clamped to the last valid row so that it stays inside the tensor. */
template <int ROWS, int D, int NT, int CHECK>
static __device__ __forceinline__ void fa2_load_tile(uint32_t sdst, const uint16_t *src, int rows_valid,
                                                     const fa2_copy *cp) {
    constexpr int CPRP = fa2_cprp(D), STEP = NT / CPRP;
    static_assert(ROWS % STEP == 0, "tile rows must split evenly over the threads");
    if (D / 8 != CPRP && !cp->active) return;
    if (!CHECK || rows_valid >= ROWS) {
        const uint16_t *g = src + cp->goff;
#pragma unroll
        for (int i = 0; i < ROWS / STEP; ++i)
            fa2_cp_async16(sdst + fa2_copy_dst<D, NT>(cp, i), g + i * STEP * D, 16u);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / STEP; ++i) {
            const int r = cp->r0 + i * STEP;
            fa2_cp_async16(sdst + fa2_copy_dst<D, NT>(cp, i), src + min(r, rows_valid - 1) * D + cp->c * 8,
                           r < rows_valid ? 16u : 0u);
        }
    }
}

/* scale < 0 only: flips the sign bit of the Q chunks this thread copied (after its own wait). */
template <int ROWS, int D, int NT>
static __device__ __forceinline__ void fa2_negate_tile(uint32_t sdst, const fa2_copy *cp) {
    constexpr int CPRP = fa2_cprp(D), STEP = NT / CPRP;
    if (D / 8 != CPRP && !cp->active) return;
#pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
        const uint32_t a = sdst + fa2_copy_dst<D, NT>(cp, i);
        uint32_t x[4];
        fa2_lds128(x, a);
#pragma unroll
        for (int e = 0; e < 4; ++e) x[e] ^= 0x80008000u;
        fa2_sts128(a, x);
    }
}

/*
 * ---- fragments ------------------------------------------------------------------------------------
 * mma.m16n8k16, lane = 4g + t (g = lane >> 2 the group, t = lane & 3 the thread in the quad).
 * ldmatrix.x4: lanes 8i..8i+7 give the 8 row addresses of matrix i; per matrix every lane receives
 * the two halves (row g, cols 2t, 2t+1), the A/C layout; with .trans it receives (rows 2t, 2t+1;
 * col g), the B layout. The matrices are ordered so that each mma's B pair (b0, b1) comes out in two
 * consecutive registers: an HMMA operand is a register pair, any other order costs 2 MOVs per mma.
 */
// clang-format off
/*
 *   A 16x16 (Q or P), 4 regs         B 16x8 (K^T or V), 2 regs      C 16x8 fp32 (S or O), 4 floats
 *            k: 0..7       8..15            n: 0..7                        n: 0..7
 *   row g    a0 (2t,2t+1)  a2        k 2t,2t+1    b0 (col g)       row g    c0 c1 (cols 2t, 2t+1)
 *   row g+8  a1            a3        k 2t+8,2t+9  b1 (col g)       row g+8  c2 c3
 *
 *   P reuse: S n-tiles 2kk and 2kk+1 (keys 16kk .. 16kk+15), fp32 -> 16-bit pairs:
 *     a0 = pack(S[2kk].c0, S[2kk].c1)      a2 = pack(S[2kk+1].c0, S[2kk+1].c1)
 *     a1 = pack(S[2kk].c2, S[2kk].c3)      a3 = pack(S[2kk+1].c2, S[2kk+1].c3)
 *   C of two adjacent n8 tiles IS A of one k16 slice: no shuffle, no shared memory.
 *
 *   operand               matrix 0          matrix 1          matrix 2          matrix 3
 *   Q  (A, 16 rows)       rows 0-7,  k 0-7  rows 8-15, k 0-7  rows 0-7, k 8-15  rows 8-15, k 8-15
 *                         -> a0             -> a1             -> a2             -> a3
 *                         lane address: row = lane & 15, chunk = lane >> 4
 *   K  (B, 16 keys)       keys 0-7,  d 0-7  keys 0-7, d 8-15  keys 8-15, d 0-7  keys 8-15, d 8-15
 *                         -> b0 n-tile 0    -> b1 n-tile 0    -> b0 n-tile 1    -> b1 n-tile 1
 *                         lane address: row = (lane & 7) + 8 (lane >> 4), chunk = (lane >> 3) & 1
 *   V  (B .trans, k=keys) keys 0-7,  d 0-7  keys 8-15, d 0-7  keys 0-7, d 8-15  keys 8-15, d 8-15
 *                         -> b0 d-tile 0    -> b1 d-tile 0    -> b0 d-tile 1    -> b1 d-tile 1
 *                         lane address: as Q
 *
 * ---- warp / row split (Br = 128, 4 warps, MT = 2) ----------------------------------------------------
 *   Q tile rows   0..15   16..31  | 32..47   48..63  | 64..79   80..95  | 96..111  112..127
 *   owner         warp 0 (mi=0,1) | warp 1           | warp 2           | warp 3
 *   In a 16-row slice lane 4g+t holds rows g and g+8, columns 2t, 2t+1 of every n8 tile: a row's
 *   max and sum are finished by two __shfl_xor_sync (1, 2) inside the quad, and l is kept as a
 *   per-lane partial sum until the epilogue.
 */
// clang-format on

/* ldmatrix lane offsets inside a 16-row block of a tile (see the fragment map): Q and V use
 * row = lane & 15, chunk = lane >> 4; K uses row = (lane & 7) + 8 (lane >> 4), chunk = (lane >> 3) & 1.
 * The chunk bits carry the lane's swizzle term, so chunk pair kk is one XOR away (FA2_AT32). */
template <int D> static __device__ __forceinline__ uint32_t fa2_lane_qv(int lane) {
    constexpr int SROW = fa2_srow(D), ROWB = SROW * 16;
    return (uint32_t)((lane & 15) * ROWB + (((lane >> 4) ^ fa2_swz<SROW>(lane & 15)) << 4));
}
template <int D> static __device__ __forceinline__ uint32_t fa2_lane_k(int lane) {
    constexpr int SROW = fa2_srow(D), ROWB = SROW * 16;
    const int krow = (lane & 7) + ((lane >> 4) << 3);
    return (uint32_t)(krow * ROWB + ((((lane >> 3) & 1) ^ fa2_swz<SROW>(krow)) << 4));
}

/* The block-uniform state of the key loop (per-lane values are recomputed per tile, see fa2_tid).
 * N, the scale and the tensor pointers are read from the kernel parameters (constant bank). */
typedef struct {
    uint32_t sbase; /* 1024-aligned smem base: the Q tile, then the K buffers, then the V buffers */
    int64_t head;   /* element offset of this head in Q, K, V and O: bh * N * D */
    int q0;         /* first query row of the tile */
} fa2_ctx;

/*
 * One key tile j (the it-th visited): wait for its data, start the next loads, then per compute
 * sub-tile of Bcs keys: S = Q K^T, mask (MASK tiles only), online softmax, O = alpha O + P V.
 * Tiles are visited from the last (on the diagonal or the tail) down to 0, so the MASK tiles come
 * first and the loop over the rest has no mask code.
 */
template <int DT, int D, int CAUSAL, int MASK>
static __device__ __forceinline__ void fa2_tile(const fa2_params *p, const fa2_ctx *c, int j, int it,
                                                uint32_t (*qf)[D / 16][4], float (*o)[D / 8][4],
                                                float (*m)[2], float (*l)[2]) {
    constexpr int BR = fa2_cfg_br(D), BC = fa2_cfg_bc(D), BCS = fa2_cfg_bcs(D), NT = fa2_cfg_warps(D) * 32;
    constexpr int MT = fa2_cfg_mt(D), PIPE = fa2_cfg_pipe(D), QREG = fa2_cfg_qreg(D);
    constexpr int ROWB = fa2_srow(D) * 16, KVB = BC * ROWB;
    constexpr int KT = D / 16, NBS = BCS / 16, NTS = BCS / 8, DN = D / 16, DT8 = D / 8;
    static_assert(BC % BCS == 0 && BCS % 16 == 0, "compute sub-tiles split the key tile");
    static_assert(PIPE != 1 || BCS == BC, "the ping-pong reloads K before P V: no sub-tiles");

    const int n = p->n;
    const int buf = PIPE == 2 ? (it & 1) : 0;
    const uint32_t sk = c->sbase + BR * ROWB, sv = sk + fa2_kv_bufs(D) * KVB;
    const uint32_t kbuf = sk + (uint32_t)(buf * KVB), vbuf = sv + (uint32_t)(buf * KVB);
    const uint16_t *gk = p->k + c->head, *gv = p->v + c->head;
    const fa2_copy cpy = fa2_copy_setup<D, NT>();

    /* ---- the pipeline: K_j is ready after this block, V_j may still be in flight ---- */
    /* Only the tile holding key N-1 can be partial, and it is a MASK tile: the row checks of the
     * copy are compiled into the MASK loop only. */
    if (PIPE == 0) {
        if (it > 0) {
            /* the prologue loaded the first tile; every warp is done with the previous K and V */
            __syncthreads();
            fa2_load_tile<BC, D, NT, MASK>(kbuf, gk + (int64_t)j * BC * D, n - j * BC, &cpy);
            fa2_load_tile<BC, D, NT, MASK>(vbuf, gv + (int64_t)j * BC * D, n - j * BC, &cpy);
            fa2_cp_async_commit();
            fa2_cp_async_wait<0>();
            __syncthreads();
        }
    } else if (PIPE == 1) {
        fa2_cp_async_wait<0>(); /* K_j (issued before the previous P V) */
        __syncthreads();        /* K_j visible; every warp is done with V_{j+1}: V buffer free */
        fa2_load_tile<BC, D, NT, MASK>(vbuf, gv + (int64_t)j * BC * D, n - j * BC, &cpy);
        fa2_cp_async_commit();
    } else {
        fa2_cp_async_wait<1>(); /* in flight: K_j, V_j -> K_j done, V_j may pend */
        __syncthreads();        /* K_j visible; every warp is done with tile j+1: the other buffers free */
        if (j > 0) { /* tile j-1 < Tc-1 is whole: only the first tile visited can be the tail one */
            const uint32_t nb = (uint32_t)((buf ^ 1) * KVB);
            fa2_load_tile<BC, D, NT, 0>(sk + nb, gk + (int64_t)(j - 1) * BC * D, BC, &cpy);
            fa2_cp_async_commit();
            fa2_load_tile<BC, D, NT, 0>(sv + nb, gv + (int64_t)(j - 1) * BC * D, BC, &cpy);
            fa2_cp_async_commit();
        }
    }

    const float sl2 = p->scale_log2;
    const int tid = fa2_tid(), lane = tid & 31, warp = tid >> 5;
    const uint32_t q_ld = c->sbase + (uint32_t)(warp * MT * 16 * ROWB) + fa2_lane_qv<D>(lane);
    const uint32_t k_ld = kbuf + fa2_lane_k<D>(lane), v_ld = vbuf + fa2_lane_qv<D>(lane);
#pragma unroll
    for (int sb = 0; sb < BC / BCS; ++sb) {
        /* ---- S = Q K^T for keys sb*Bcs ..: per 16-wide slice of D, MT A fragments x NBS ldmatrix
         * of K x 2 mma each. Unrolled two slices at a time when Q comes from smem: ptxas then hoists
         * the ldmatrix of the next slice over the mma of the current one (latency hidden) but cannot
         * hoist all 8 slices' loads to the top, which with 192 accumulator registers (O + S) live
         * pushes it past 255 and into spills. With Q in registers the loop unrolls fully (qf is
         * indexed by kk). ---- */
        float s[MT][NTS][4];
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int nt = 0; nt < NTS; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mi][nt][e] = 0.f;
#pragma unroll(QREG ? KT : 2)
        for (int kk = 0; kk < KT; ++kk) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) {
                if (QREG) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) a[mi][e] = qf[mi][kk][e];
                } else {
                    fa2_ldsm4(a[mi], FA2_AT32(q_ld, kk) + (uint32_t)(mi * 16 * ROWB));
                }
            }
            const uint32_t kaddr = FA2_AT32(k_ld, kk) + (uint32_t)(sb * BCS * ROWB);
#pragma unroll
            for (int nb = 0; nb < NBS; ++nb) {
                uint32_t b[4];
                fa2_ldsm4(b, kaddr + (uint32_t)(nb * 16 * ROWB));
#pragma unroll
                for (int mi = 0; mi < MT; ++mi) {
                    fa2_mma<DT>(s[mi][2 * nb], a[mi], b[0], b[1]);
                    fa2_mma<DT>(s[mi][2 * nb + 1], a[mi], b[2], b[3]);
                }
            }
        }

        /* ---- online softmax, base 2: x = s * scale * log2(e), p = 2^(x - m2), m2 = m * scale * log2(e).
         * m is kept on raw scores: scale * log2(e) > 0 here (the host flips the sign of Q for a
         * negative scale and raises 0 to FLT_MIN), so the max of s is the max of x, and a masked
         * score set to -inf (MASK tiles only: key >= N, or key > query when causal) gives
         * p = 2^(-inf * scale * log2(e) - m2) = 2^-inf = 0 with no second select. */
        uint32_t pp[MT][NTS][2]; /* P as 16-bit pairs: pp[mi][nt][h] = row g + 8h, keys 8nt + 2t, +1 */
        const int kbase = j * BC + sb * BCS + 2 * (lane & 3);
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                /* keys < lim are visible to this row (lim = N, or min(N, query + 1) when causal);
                 * key kbase + 8nt + e is visible iff 8nt + e < left */
                const int qi = c->q0 + (warp * MT + mi) * 16 + (lane >> 2) + 8 * h;
                const int left = MASK ? (CAUSAL ? min(n, qi + 1) : n) - kbase : 0;
                float mx = m[mi][h];
#pragma unroll
                for (int nt = 0; nt < NTS; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        if (MASK && nt * 8 + e >= left) s[mi][nt][2 * h + e] = -INFINITY;
                        mx = fmaxf(mx, s[mi][nt][2 * h + e]);
                    }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                /* a row with no visible key so far has mx = -inf: use 0 as the reference so that
                 * x - m never becomes -inf - (-inf) = NaN; its p are all 0 anyway. alpha =
                 * 2^(m_old - m_new) in base-2 units; m_old = -inf gives 2^-inf = 0 (O and l are 0). */
                const float msc = (mx == -INFINITY ? 0.f : mx) * sl2;
                const float alpha = fa2_ex2(fmaf(m[mi][h], sl2, -msc));
                m[mi][h] = mx;
                float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
                for (int nt = 0; nt < NTS; ++nt) {
                    const float p0 = fa2_ex2(fmaf(s[mi][nt][2 * h], sl2, -msc));
                    const float p1 = fa2_ex2(fmaf(s[mi][nt][2 * h + 1], sl2, -msc));
                    sum0 += p0;
                    sum1 += p1;
                    pp[mi][nt][h] = fa2_pack<DT>(p0, p1);
                }
                /* l stays a per-lane partial sum (alpha is the same in the whole quad): reduced once
                 * at the end */
                l[mi][h] = l[mi][h] * alpha + (sum0 + sum1);
#pragma unroll
                for (int dt = 0; dt < DT8; ++dt) {
                    o[mi][dt][2 * h] *= alpha;
                    o[mi][dt][2 * h + 1] *= alpha;
                }
            }
        }

        /* ---- V_j must have landed (once per tile) ---- */
        if (sb == 0) {
            if (PIPE == 1) {
                fa2_cp_async_wait<0>();
                __syncthreads(); /* V_j visible; every warp is done with K_j: the K buffer is free */
                if (j > 0) {
                    fa2_load_tile<BC, D, NT, 0>(kbuf, gk + (int64_t)(j - 1) * BC * D, BC, &cpy);
                    fa2_cp_async_commit();
                }
            } else if (PIPE == 2) {
                if (j > 0)
                    fa2_cp_async_wait<2>(); /* in flight: V_j, K_{j-1}, V_{j-1} -> V_j done */
                else
                    fa2_cp_async_wait<0>();
                __syncthreads();
            }
        }

        /* ---- O += P V: per 16-key slice, A = P from registers, B = V by ldmatrix.trans ---- */
#pragma unroll
        for (int kk = 0; kk < NBS; ++kk) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) {
                a[mi][0] = pp[mi][2 * kk][0];
                a[mi][1] = pp[mi][2 * kk][1];
                a[mi][2] = pp[mi][2 * kk + 1][0];
                a[mi][3] = pp[mi][2 * kk + 1][1];
            }
#pragma unroll
            for (int dn = 0; dn < DN; ++dn) {
                uint32_t b[4];
                fa2_ldsm4_t(b, FA2_AT32(v_ld, dn) + (uint32_t)((sb * BCS + kk * 16) * ROWB));
#pragma unroll
                for (int mi = 0; mi < MT; ++mi) {
                    fa2_mma<DT>(o[mi][2 * dn], a[mi], b[0], b[1]);
                    fa2_mma<DT>(o[mi][2 * dn + 1], a[mi], b[2], b[3]);
                }
            }
        }
    }
}

/* Grid (Tr, min(B*H, 65535), ceil(B*H / 65535)): blocks are dispatched x first, so the row tiles of
 * a head run together (its K and V stay in L2), and B*H may exceed grid.y's 65535. Causal: each
 * head's tiles run from the last (most key tiles) to the first, so the light tiles end the grid and
 * its tail is short. Everything here is block-uniform (no division), so it lives in the uniform
 * registers of sm_75+ and costs none of the 255 per thread. Returns bh, or -1 past B*H. */
template <int CAUSAL> static __device__ __forceinline__ int64_t fa2_block_head(const fa2_params *p, int *mb) {
    const int64_t bh = (int64_t)blockIdx.z * gridDim.y + blockIdx.y;
    *mb = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    return bh < p->bh ? bh : -1;
}

/* One work item: one row tile of one head. */
template <int DT, int D, int CAUSAL>
static __device__ __forceinline__ void fa2_row_block(const fa2_params *p, uint32_t sbase) {
    constexpr int BR = fa2_cfg_br(D), BC = fa2_cfg_bc(D), NW = fa2_cfg_warps(D), NT = NW * 32;
    constexpr int MT = fa2_cfg_mt(D), PIPE = fa2_cfg_pipe(D), QREG = fa2_cfg_qreg(D);
    constexpr int CPR = D / 8, SROW = fa2_srow(D), ROWB = SROW * 16;
    constexpr int KT = D / 16, DT8 = D / 8;
    static_assert(BR == 16 * NW * MT, "every warp owns MT whole 16-row slices");
    static_assert(BC % 16 == 0 && D % 16 == 0, "tiles are whole mma shapes");
    static_assert(PIPE >= 0 && PIPE <= 2, "FA2_PIPE is -1 (table), 0, 1 or 2");

    const int n = p->n;
    int mb;
    const int64_t bh = fa2_block_head<CAUSAL>(p, &mb);
    if (bh < 0) return; /* the last grid.z slice may reach past B*H (whole block: no barrier skipped) */
    const int64_t head = bh * n * D;
    const int q0 = mb * BR;

    fa2_ctx c;
    c.sbase = sbase;
    c.head = head;
    c.q0 = q0;
    const fa2_copy cpy = fa2_copy_setup<D, NT>();

    /* causal: the last visible key of row q0 + Br - 1 bounds the tiles; tiles j < n_full are fully
     * visible to every row of the block ((j+1) Bc - 1 <= q0). Tiles past N / Bc hold keys >= N. */
    const int n_max = CAUSAL ? (min(n, q0 + BR) + BC - 1) / BC : (n + BC - 1) / BC;
    const int n_full = CAUSAL ? (q0 + 1) / BC : n_max;
    const int n_plain = min(n_full, n / BC); /* tiles 0 .. n_plain-1 need no mask at all */

    float o[MT][DT8][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            m[mi][h] = -INFINITY;
            l[mi][h] = 0.f;
#pragma unroll
            for (int dt = 0; dt < DT8; ++dt) {
                o[mi][dt][2 * h] = 0.f;
                o[mi][dt][2 * h + 1] = 0.f;
            }
        }

    /* ---- prologue: Q (rows >= N as zeros), then the first key tile (the highest, j0) ---- */
    const int j0 = n_max - 1;
    const uint32_t sk = sbase + BR * ROWB, sv = sk + fa2_kv_bufs(D) * BC * ROWB;
    fa2_load_tile<BR, D, NT, 1>(sbase, p->q + head + (int64_t)q0 * D, n - q0, &cpy);
    fa2_cp_async_commit();
    if (PIPE == 1) {
        fa2_load_tile<BC, D, NT, 1>(sk, p->k + head + (int64_t)j0 * BC * D, n - j0 * BC, &cpy);
        fa2_cp_async_commit();
        fa2_cp_async_wait<1>(); /* Q landed, K_j0 may pend */
    } else if (PIPE == 0) {
        fa2_load_tile<BC, D, NT, 1>(sk, p->k + head + (int64_t)j0 * BC * D, n - j0 * BC, &cpy);
        fa2_load_tile<BC, D, NT, 1>(sv, p->v + head + (int64_t)j0 * BC * D, n - j0 * BC, &cpy);
        fa2_cp_async_commit();
        fa2_cp_async_wait<0>(); /* load, wait, compute: no overlap at all */
    } else if (PIPE == 2) {
        fa2_load_tile<BC, D, NT, 1>(sk, p->k + head + (int64_t)j0 * BC * D, n - j0 * BC, &cpy);
        fa2_cp_async_commit();
        fa2_load_tile<BC, D, NT, 1>(sv, p->v + head + (int64_t)j0 * BC * D, n - j0 * BC, &cpy);
        fa2_cp_async_commit();
        fa2_cp_async_wait<2>(); /* Q landed, K_j0 and V_j0 may pend */
    }
    if (p->negate_q) fa2_negate_tile<BR, D, NT>(sbase, &cpy); /* own chunks: no barrier needed before */
    __syncthreads();

    uint32_t qf[MT][KT][4]; /* only with QREG; otherwise never touched and never allocated */
    if (QREG) {
        const int lane = fa2_tid() & 31, warp = fa2_tid() >> 5;
        const uint32_t q_ld = sbase + (uint32_t)(warp * MT * 16 * ROWB) + fa2_lane_qv<D>(lane);
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int kk = 0; kk < KT; ++kk)
                fa2_ldsm4(qf[mi][kk], FA2_AT32(q_ld, kk) + (uint32_t)(mi * 16 * ROWB));
    }

    /* ---- the key loop: diagonal / tail tiles with the mask, then the plain ones ---- */
    int j = j0, it = 0;
    for (; j >= n_plain; --j, ++it) fa2_tile<DT, D, CAUSAL, 1>(p, &c, j, it, qf, o, m, l);
    for (; j >= 0; --j, ++it) fa2_tile<DT, D, CAUSAL, 0>(p, &c, j, it, qf, o, m, l);

    /* ---- epilogue: l over the quad, O / l once, O through smem (this warp's own Q rows) ---- */
    const int tid = fa2_tid(), warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    float inv[MT][2];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float x = l[mi][h];
            x += __shfl_xor_sync(0xffffffffu, x, 1);
            x += __shfl_xor_sync(0xffffffffu, x, 2);
            l[mi][h] = x;
            inv[mi][h] = x > 0.f ? 1.f / x : 0.f; /* key 0 is always visible, so x > 0; guard anyway */
        }

    __syncwarp(); /* this warp's last reads of its Q rows are done before they are overwritten */
    const uint32_t o_st = sbase + (uint32_t)((warp * MT * 16 + g) * ROWB + (fa2_swz<SROW>(g) << 4) + 4 * t);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int dt = 0; dt < DT8; ++dt)
                fa2_sts32(FA2_AT16(o_st, dt) + (uint32_t)((mi * 16 + 8 * h) * ROWB),
                          fa2_pack<DT>(o[mi][dt][2 * h] * inv[mi][h], o[mi][dt][2 * h + 1] * inv[mi][h]));
    __syncwarp();

    /* read back 16-byte chunks, CPRP lanes per row (D=96: 16, lanes 12..15 idle), store coalesced */
    constexpr int CPRP = fa2_cprp(D), RPI = 32 / CPRP;
    const int cc = lane % CPRP, row0 = warp * MT * 16 + lane / CPRP;
    const int64_t row_base = bh * n + q0;
    uint16_t *go = p->o + (row_base + row0) * D + cc * 8;
    if (CPR == CPRP || cc < CPR) {
#pragma unroll
        for (int i = 0; i < MT * 16 / RPI; ++i) {
            const int row = row0 + i * RPI;
            uint32_t x[4];
            fa2_lds128(x, sbase + (uint32_t)(row * ROWB + ((cc ^ fa2_swz<SROW>(row)) << 4)));
            if (q0 + row < n) {
                uint4 v4;
                v4.x = x[0];
                v4.y = x[1];
                v4.z = x[2];
                v4.w = x[3];
                *(uint4 *)(go + (int64_t)i * RPI * D) = v4;
            }
        }
    }

    /* LSE: l = sum_j 2^(x_j - m2) with x_j = s_j * scale * log2(e) and m2 = m * scale * log2(e), so
     * sum_j e^(scale s_j) = sum_j 2^(x_j) = 2^m2 * l and LSE = m2 * ln 2 + ln l. */
    if (p->lse != NULL && t == 0) {
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = (warp * MT + mi) * 16 + g + 8 * h; /* row inside the tile */
                if (q0 + r < n)
                    p->lse[row_base + r] =
                        l[mi][h] > 0.f ? m[mi][h] * p->scale_log2 * FA2_LN2 + logf(l[mi][h]) : -INFINITY;
            }
    }
}

extern __shared__ __align__(16) unsigned char fa2_smem[];

/* One block per (row tile, head); fa2_block_head() gives the mapping and the order. */
template <int DT, int D, int CAUSAL>
__global__ void __launch_bounds__(fa2_cfg_warps(D) * 32, fa2_cfg_minblocks(D))
    fa2_fwd_kernel(const fa2_params p) {
    const uint32_t sbase = (fa2_smem_addr(fa2_smem) + 1023u) & ~1023u;
    fa2_row_block<DT, D, CAUSAL>(&p, sbase);
}

/* ---- host side ---------------------------------------------------------------------------------- */

template <int DT, int D, int CAUSAL>
static fa2_status fa2_launch(const fa2_params *kp, cudaStream_t stream, cudaError_t *cuda_err,
                             const char **why) {
    void (*kern)(const fa2_params) = fa2_fwd_kernel<DT, D, CAUSAL>;
    const int smem = fa2_smem_bytes(D);
    /* > 48 KB of dynamic smem needs an opt-in per kernel (and per device); the carveout asks for the
     * largest smem share so that two 97 KB blocks fit on one SM. Benign race: setting it twice is fine. */
    static int configured[FA2_MAX_DEVICES];
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) {
        *cuda_err = e;
        *why = "cudaGetDevice failed (no usable CUDA device?)";
        return FA2_ECUDA;
    }
    if (dev < 0 || dev >= FA2_MAX_DEVICES || !configured[dev]) {
        e = cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute((const void *)kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     (int)cudaSharedmemCarveoutMaxShared);
        if (e != cudaSuccess) {
            *cuda_err = e;
            *why = "cudaFuncSetAttribute failed (the GPU has less shared memory per block than the kernel "
                   "needs, or is older than sm_80)";
            return FA2_ECUDA;
        }
        if (dev >= 0 && dev < FA2_MAX_DEVICES) configured[dev] = 1;
    }
    dim3 grid((unsigned)kp->tr, (unsigned)(kp->bh < FA2_GRID_YZ ? kp->bh : FA2_GRID_YZ),
              (unsigned)((kp->bh + FA2_GRID_YZ - 1) / FA2_GRID_YZ));
    kern<<<grid, fa2_cfg_warps(D) * 32, (size_t)smem, stream>>>(*kp);
    return FA2_OK;
}

template <int DT, int CAUSAL>
static fa2_status fa2_dispatch_d(int64_t D, const fa2_params *kp, cudaStream_t s, cudaError_t *ce,
                                 const char **why) {
    switch (D) {
#if !FA2_ROAD
    case 32: return fa2_launch<DT, 32, CAUSAL>(kp, s, ce, why);
    case 96: return fa2_launch<DT, 96, CAUSAL>(kp, s, ce, why);
    case 256: return fa2_launch<DT, 256, CAUSAL>(kp, s, ce, why);
#endif
    case 64: return fa2_launch<DT, 64, CAUSAL>(kp, s, ce, why);
    case 128: return fa2_launch<DT, 128, CAUSAL>(kp, s, ce, why);
    default: break;
    }
    *why = "this build (FA2_ROAD=1) has only head dims 64 and 128";
    return FA2_EUNSUPPORTED;
}

static int fa2_aligned16(const void *ptr) { return ((uintptr_t)ptr & 15u) == 0; }

extern "C" fa2_status fa2_forward_nocheck(const void *q, const void *k, const void *v, void *o, float *lse,
                                          int64_t B, int64_t H, int64_t N, int64_t D, int causal, float scale,
                                          fa2_dtype dtype, cudaStream_t stream, cudaError_t *cuda_err,
                                          const char **why) {
    static const char *dummy_why;
    cudaError_t dummy_err;
    if (why == NULL) why = &dummy_why;
    if (cuda_err == NULL) cuda_err = &dummy_err;
    *why = "";
    *cuda_err = cudaSuccess;

    if (q == NULL || k == NULL || v == NULL || o == NULL) {
        *why = "q, k, v and o must be device pointers, not NULL";
        return FA2_EINVAL;
    }
    if (B < 1 || H < 1 || N < 1 || D < 1) {
        *why = "B, H, N and D must be at least 1";
        return FA2_EINVAL;
    }
    if (dtype != FA2_F16 && dtype != FA2_BF16) {
        *why = "dtype must be FA2_F16 or FA2_BF16";
        return FA2_EINVAL;
    }
    if (!isfinite(scale) || !isfinite(fabsf(scale) * FA2_LOG2E)) {
        *why = "scale must be a finite number";
        return FA2_EINVAL;
    }
    if (!fa2_aligned16(q) || !fa2_aligned16(k) || !fa2_aligned16(v) || !fa2_aligned16(o) ||
        ((uintptr_t)lse & 3u) != 0) {
        *why = "q, k, v and o must be 16-byte aligned (lse 4-byte aligned)";
        return FA2_EINVAL;
    }
    if (D != 32 && D != 64 && D != 96 && D != 128 && D != 256) {
        *why = "head dim must be 32, 64, 96, 128 or 256";
        return FA2_EUNSUPPORTED;
    }
    if (N > ((int64_t)1 << 30)) {
        *why = "N must be at most 2^30";
        return FA2_EUNSUPPORTED;
    }
    /* B*H*N*D elements must be addressable with int64 */
    if (B > INT64_MAX / H || B * H > INT64_MAX / N || B * H * N > INT64_MAX / D) {
        *why = "B*H*N*D overflows 64 bits";
        return FA2_EINVAL;
    }

    fa2_params kp;
    kp.q = (const uint16_t *)q;
    kp.k = (const uint16_t *)k;
    kp.v = (const uint16_t *)v;
    kp.o = (uint16_t *)o;
    kp.lse = lse;
    kp.n = (int)N;
    /* scale = 0 (uniform attention) runs as FLT_MIN: every |s| * FLT_MIN < 2^-60 and 2^x rounds to
     * exactly 1, as 2^0 would; keeping the multiplier positive keeps -inf * it = -inf for masking */
    kp.scale_log2 = fmaxf(fabsf(scale) * FA2_LOG2E, FLT_MIN);
    kp.negate_q = scale < 0.f;

    const int br = fa2_cfg_br((int)D); /* Br of this D (the same for all D in both tile sets) */
    kp.tr = (int)((N + br - 1) / br);
    kp.bh = B * H;
    if (kp.bh > (int64_t)FA2_GRID_YZ * FA2_GRID_YZ) {
        *why = "B*H must be at most 65535^2 (grid.y x grid.z)";
        return FA2_EUNSUPPORTED;
    }

    const int bf = dtype == FA2_BF16;
    if (causal)
        return bf ? fa2_dispatch_d<FA2_DT_BF16, 1>(D, &kp, stream, cuda_err, why)
                  : fa2_dispatch_d<FA2_DT_F16, 1>(D, &kp, stream, cuda_err, why);
    return bf ? fa2_dispatch_d<FA2_DT_BF16, 0>(D, &kp, stream, cuda_err, why)
              : fa2_dispatch_d<FA2_DT_F16, 0>(D, &kp, stream, cuda_err, why);
}

extern "C" fa2_status fa2_forward(const void *q, const void *k, const void *v, void *o, float *lse, int64_t B,
                                  int64_t H, int64_t N, int64_t D, int causal, float scale, fa2_dtype dtype,
                                  cudaStream_t stream) {
    cudaError_t ce = cudaSuccess;
    const char *why = NULL;
    fa2_status s = fa2_forward_nocheck(q, k, v, o, lse, B, H, N, D, causal, scale, dtype, stream, &ce, &why);
    if (s != FA2_OK) return s;
    if (cudaGetLastError() != cudaSuccess) return FA2_ECUDA;
    return FA2_OK;
}

extern "C" const char *fa2_status_string(fa2_status s) {
    switch (s) {
    case FA2_OK: return "ok";
    case FA2_EINVAL: return "invalid argument";
    case FA2_EUNSUPPORTED: return "unsupported";
    case FA2_ECUDA: return "CUDA error";
    }
    return "unknown status";
}
