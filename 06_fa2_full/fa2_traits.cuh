/*
 * fa2_traits.cuh: what one kernel of stage 06 is built with. Two inputs decide everything:
 *   - the head dim D, through the tile table below (FA2's own tiles per D);
 *   - the recipe, the set of road steps the kernel has taken (06a .. 06e, then stage 06 itself).
 * fa2_traits_of(D, recipe) turns them into numbers (Br, Bc, warps, pipeline, smem bytes, ...) at compile
 * time; every step function reads its variant from there, so one code base builds every road step.
 */
#ifndef FA2_TRAITS_CUH
#define FA2_TRAITS_CUH

#include "fa2_layout.h"

/* ---- the road: each step adds one idea; a kernel's recipe is the steps it has taken ---------------- */
enum {
    FA2_P_IN_REGISTERS = 1,    /* 06b: P goes from the S accumulators straight into P V (else via smem) */
    FA2_SWIZZLE = 2,           /* 06c: XOR-swizzled shared-memory tiles (else plain row-major) */
    FA2_Q_IN_REGISTERS = 4,    /* 06d: Q fragments stay in registers where the budget allows */
    FA2_CP_ASYNC_PIPELINE = 8, /* 06e: the next K/V tile loads while this one is multiplied */
    FA2_FINAL_TILES = 16,      /* 06:  FA2's tiles per head dim (the table below) instead of 64 x 64 */
    FA2_ANY_SHAPE = 32,        /* 06:  strided Q, K, V, O, H_kv < H, N_k != N, cu_seqlens (issue 56); the
                                  road's kernels take contiguous [B, H, N, D] with N_k = N only */
};
#define FA2_RECIPE_06A 0 /* the first mma.sync kernel: 64 x 64 tiles, P through smem, load then compute */
#define FA2_RECIPE_06B (FA2_RECIPE_06A | FA2_P_IN_REGISTERS)
#define FA2_RECIPE_06C (FA2_RECIPE_06B | FA2_SWIZZLE)
#define FA2_RECIPE_06D (FA2_RECIPE_06C | FA2_Q_IN_REGISTERS)
#define FA2_RECIPE_06E (FA2_RECIPE_06D | FA2_CP_ASYNC_PIPELINE)
#define FA2_RECIPE_FINAL (FA2_RECIPE_06E | FA2_FINAL_TILES | FA2_ANY_SHAPE) /* stage 06 */

/* How K and V tiles reach shared memory. */
enum {
    FA2_LOAD_THEN_COMPUTE = 0, /* load K_j and V_j, wait, compute: no overlap */
    FA2_PING_PONG = 1,         /* FA2's: V_j loads during S = Q K_j^T, K_{j-1} during P V_j (1 + 1 buffers) */
    FA2_DOUBLE_BUFFER = 2,     /* K_{j-1} and V_{j-1} load during all of tile j (2 + 2 buffers) */
};

typedef struct {
    int br, bc;         /* Br query rows per block, Bc keys per loaded K/V tile */
    int bcs;            /* keys per softmax step (Bcs <= Bc): S registers = Br/warps * Bcs / 32 */
    int warps;          /* each owns Br / warps whole query rows */
    int pipeline;       /* FA2_LOAD_THEN_COMPUTE, FA2_PING_PONG or FA2_DOUBLE_BUFFER */
    int q_in_registers; /* Q fragments held for the whole kernel (with FA2_Q_IN_REGISTERS) */
} fa2_tiles;

/*
 * FA2's tiles (D = 64: 128 x 128, D = 128: 128 x 64, D = 256: 128 x 64 on 8 warps). Two 4-warp blocks
 * per SM: 2 x 128 threads x 255 registers fill the 64K register file, 2 x 97 KB fit the 227 KB of an
 * H100/H200 SM. 32 rows per warp make every ldmatrix'd K or V fragment feed 2 mma, which keeps
 * shared-memory bandwidth below the tensor cores' need. Registers per thread of the big arrays (fp32,
 * or 16-bit pairs for Q), with 2 slices of 16 rows per warp: O D, S Bcs, Q fragments D/2. Q stays in
 * registers where O + S + Q <= 180 (the rest is headroom for operand prefetch and addresses; measured:
 * at 192 + 64 = 256 ptxas spills), so at D = 128 it is re-read by ldmatrix per key tile, as FA2 does.
 * D <= 64 loads 128-key tiles (half the barriers per key) but runs the softmax 64 keys at a time. D = 256
 * uses the ping-pong: 64 KB Q + 2 x 32 KB = 128 KB fit the 163 KB of an A100; double buffers need 192.
 * D = 80 and 192 (issue 56) take the tiles of the next dim up, 96 and 256: their smem rows are padded
 * to 16 and 32 chunks (fa2_row_chunks), so they cost that dim's shared memory and occupancy, while
 * their products and registers are their own (D/16 = 5 and 12 k-slices; O 80 and 96 floats a lane).
 */
static __host__ __device__ constexpr fa2_tiles fa2_final_tiles(int d) {
    // clang-format off
    /*                         Br,  Bc, Bcs, warps, K/V loads,         Q regs      smem  blocks/SM */
    return d ==  32 ? fa2_tiles{128, 128,  64,     4, FA2_DOUBLE_BUFFER, 1} /*  41 KB  2 (registers) */
         : d ==  64 ? fa2_tiles{128, 128,  64,     4, FA2_DOUBLE_BUFFER, 1} /*  81 KB  2 */
         : d ==  80 ? fa2_tiles{128,  64,  64,     4, FA2_DOUBLE_BUFFER, 0} /*  97 KB  2 (rows padded to 128) */
         : d ==  96 ? fa2_tiles{128,  64,  64,     4, FA2_DOUBLE_BUFFER, 0} /*  97 KB  2 (rows padded to 128) */
         : d == 128 ? fa2_tiles{128,  64,  64,     4, FA2_DOUBLE_BUFFER, 0} /*  97 KB  2 */
         : d == 192 ? fa2_tiles{128,  64,  64,     8, FA2_PING_PONG,     1} /* 129 KB  1 (rows padded to 256) */
         : d == 256 ? fa2_tiles{128,  64,  64,     8, FA2_PING_PONG,     0} /* 129 KB  1 */
         : fa2_tiles{0, 0, 0, 0, 0, 0};
    // clang-format on
}

/* The road's tiles before its last step: 64 x 64 on 4 warps of 16 rows each, for every D. */
static __host__ __device__ constexpr fa2_tiles fa2_first_tiles(int d) {
    return fa2_tiles{64, 64, 64, 4, FA2_DOUBLE_BUFFER, 1};
}

/* The rule behind the table's Q column (16-row slices per warp x registers of O + S + Q <= 180). */
static __host__ __device__ constexpr int fa2_q_fits_in_registers(int d, fa2_tiles t) {
    return t.br / (16 * t.warps) * (d / 2 + t.bcs / 2 + d / 4) <= 180;
}

typedef struct {
    int br, bc, bcs, warps, threads;
    int slices;     /* 16-row slices of Q per warp: Br / (16 warps) */
    int min_blocks; /* __launch_bounds__: blocks that must fit on one SM */
    int pipeline;   /* FA2_LOAD_THEN_COMPUTE, FA2_PING_PONG, FA2_DOUBLE_BUFFER */
    int kv_buffers; /* K (and V) tiles in shared memory */
    int swizzle, q_in_registers, p_in_registers;
    int any_shape;    /* FA2_ANY_SHAPE: the layout and lengths come from fa2_params' second part */
    int row_chunks;   /* 16-byte chunks per smem row of a Q, K or V tile */
    int row_bytes;    /* row_chunks * 16 */
    int p_row_chunks; /* of the per-warp P tiles (only without FA2_P_IN_REGISTERS) */
    int p_tile_bytes; /* one warp's P tile: 16 slices rows x Bcs keys */
    int smem_bytes;   /* Q + K/V buffers (+ P tiles) + 1 KB to align the base to 1024 */
} fa2_traits;

static __host__ __device__ constexpr fa2_traits fa2_traits_of(int d, int recipe) {
    const fa2_tiles t = (recipe & FA2_FINAL_TILES) ? fa2_final_tiles(d) : fa2_first_tiles(d);
    fa2_traits x{};
    x.br = t.br, x.bc = t.bc, x.bcs = t.bcs, x.warps = t.warps, x.threads = 32 * t.warps;
    x.slices = t.br / (16 * t.warps);
    x.min_blocks = t.warps == 4 ? 2 : 1;
    x.pipeline = (recipe & FA2_CP_ASYNC_PIPELINE) ? t.pipeline : FA2_LOAD_THEN_COMPUTE;
    x.kv_buffers = x.pipeline == FA2_DOUBLE_BUFFER ? 2 : 1;
    x.swizzle = (recipe & FA2_SWIZZLE) != 0;
    x.q_in_registers =
        (recipe & FA2_Q_IN_REGISTERS) != 0 && t.q_in_registers && fa2_q_fits_in_registers(d, t);
    x.p_in_registers = (recipe & FA2_P_IN_REGISTERS) != 0;
    x.any_shape = (recipe & FA2_ANY_SHAPE) != 0;
    x.row_chunks = fa2_row_chunks(d, x.swizzle);
    x.row_bytes = 16 * x.row_chunks;
    x.p_row_chunks = t.bcs / 8;
    x.p_tile_bytes = x.p_in_registers ? 0 : 16 * x.slices * t.bcs * 2;
    x.smem_bytes = (t.br + 2 * x.kv_buffers * t.bc) * x.row_bytes + t.warps * x.p_tile_bytes + 1024;
    return x;
}

/* The table says what the rule says. */
static_assert(fa2_final_tiles(32).q_in_registers == fa2_q_fits_in_registers(32, fa2_final_tiles(32)), "D=32");
static_assert(fa2_final_tiles(64).q_in_registers == fa2_q_fits_in_registers(64, fa2_final_tiles(64)), "D=64");
static_assert(fa2_final_tiles(80).q_in_registers == fa2_q_fits_in_registers(80, fa2_final_tiles(80)), "D=80");
static_assert(fa2_final_tiles(96).q_in_registers == fa2_q_fits_in_registers(96, fa2_final_tiles(96)), "D=96");
static_assert(fa2_final_tiles(128).q_in_registers == fa2_q_fits_in_registers(128, fa2_final_tiles(128)),
              "128");
static_assert(fa2_final_tiles(192).q_in_registers == fa2_q_fits_in_registers(192, fa2_final_tiles(192)),
              "192");
static_assert(fa2_final_tiles(256).q_in_registers == fa2_q_fits_in_registers(256, fa2_final_tiles(256)),
              "256");

#endif
