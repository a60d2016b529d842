/*
 * Stage 12: FlashAttention-2's backward pass (Algorithm 2) on CUDA cores: no N x N matrix; P is
 * recomputed tile by tile from the forward's LSE, and dQ is summed across blocks by fp32 atomics.
 *
 * What it adds, versus stage 11 (which writes P and dS, 8 bytes per score, to device memory): the
 * tiling of stages 03-05 applied to the backward. The five products share their operands tile by
 * tile, so a block that holds K_j and V_j on chip can do all of them for one query tile at a time:
 *     S    = Q_i K_j^T                  tile_scores(Qs, Ks)   64 x 64, fp32 FFMA
 *     P    = 2^(S sl2 - LSE_i log2 e)   sl2 = scale log2(e); masked scores -> -inf -> P = 0
 *     dP   = dO_i V_j^T                 tile_scores(dOs, Vs)
 *     dS   = P (dP - D_i)               D_i = dO_i . O_i from the preprocess kernel
 *     dV_j += P^T dO_i                  tile_pv, P stored transposed
 *     dK_j += dS^T Q_i                  tile_pv, dS stored transposed   (times scale at the end)
 *     dQ_i += dS K_j                    tile_pv, dS as it is; atomicAdd into fp32 (times scale at
 *                                       the end, in the convert kernel)
 * dK_j and dV_j stay in registers for the whole walk and are written once; dQ_i gets a share from
 * every key tile, that is from every block of the head, so it is summed in an fp32 accumulator in
 * the workspace by atomic adds, in whatever order the blocks come: two runs agree to rounding, not
 * bit for bit (ATTN_BACKWARD_ATOMIC). Three kernels on the stream:
 *     1. preprocess   D_i = rowsum(dO_i * O_i) (fp32), and dQacc = 0     one warp per row
 *     2. key tiles    the loop above, one block per (b, h, key tile j)    this file's idea
 *     3. convert      dQ = fp16(scale * dQacc)                             one thread per 4 elements
 * Workspace: dQacc (4 B*H*N*D bytes) and D (4 B*H*N): O(N) per head. At B=4, H=32, N=4096, D=64:
 * 130 MiB, where stage 11 needs 16 GiB.
 *
 * Causal: key tile kt is seen by query rows >= 64 kt only, so the block visits query tiles
 * qt >= kt; the diagonal tile qt = kt is masked (j > i), the ones below it are not (the mirror image
 * of stage 05's bands, with the roles of rows and keys swapped). Key tile 0 then visits all Tr query
 * tiles and the last one a single tile: the blocks of a head run kt = 0 first, the longest first.
 * Tails: rows >= N get LSE = +inf (P = 0, so they add nothing to dK, dV) and are never added to
 * dQ; keys >= N are masked (-inf) in the last key tile and never stored. Tiles are never padded in
 * memory (tile_load_rows zero-fills them in shared memory).
 *
 * Why these numbers (256 threads, Br = Bc = 64, tiles.cuh's 4 x 4 micro-tiles):
 *   - Shared memory, fp32, rows padded to D + 4: K_j, V_j (held), Q_i, dO_i (per query tile) and one
 *     64 x 68 tile that holds P^T, then dS^T, then dS:
 *         (4 * 64 * (D + 4) + 64 * 68) * 4 bytes = 53 KB at D = 32, 85 KB at D = 64, 149 KB at D = 128.
 *     An H100/H200 SM (228 KB) holds two blocks at D = 64 (16 warps) and one at D = 128; an A100
 *     (164 KB per block) runs all three; a V100 (96 KB) or an sm_86/89 GPU (99 KB) stops at D = 64,
 *     a T4 (64 KB) at D = 32, and the rest is refused there with the numbers.
 *   - Registers: dK_j and dV_j are 2 x 4 x D/16 floats per thread (64 at D = 128), S and dP 32 more.
 *     __launch_bounds__(256, 2) caps D = 32 and 64 at 128 registers (ptxas spills 8 and 16 bytes
 *     there; unbounded it takes 160 and 182, and one block would fit); D = 128 takes 254 of 255.
 *   - Work per query tile: 5 products of 64 x 64 x D = 5120 FFMAs per thread at D = 64, against 16 KB
 *     of Q and dO read from L2 (80 FFMAs per byte) and 64 * D dQ atomics per block (one RED per
 *     320 FFMAs; 4-wide on sm_90). Inside the products, 8 FFMAs per shared-memory load (tiles.cuh).
 *   - The transposed stores (P^T, dS^T) are 2-way bank conflicted (row stride 68 = 4 banks, rows tx
 *     and tx + 8 share a bank): 32 stores per thread per query tile, beside 5120 FFMAs.
 *   - 7 barriers per query tile: the single 64 x 68 staging tile is reused three times.
 *
 * Limits: fp16 in and out, fp32 arithmetic on CUDA cores (tensor cores: stage 13); head dim 32, 64
 * or 128; any N >= 1; B*H past 65535 (heads and key tiles folded into one 64-bit block index).
 * Run:    build/attn --stage 12 --batch 4 --heads 32 --seq 4096 --dim 64 --causal --check
 */
// clang-format off
/*
 * Query tiles visited by each key tile (one block each), causal, N = 300 (Tr = Tc = 5; the last
 * tiles hold rows and keys 256..299, the rest of them is the masked tail):
 *
 *                    key tile kt (block):  0   1   2   3   4
 *     query tile qt = 0                    M   .   .   .   .      F  fully visible: unmasked
 *                     1                    F   M   .   .   .      M  diagonal: masked (j > i, and
 *                     2                    F   F   M   .   .         keys >= N in the last tile)
 *                     3                    F   F   F   M   .      .  never visited
 *                     4                    F   F   F   F   M
 *     block kt walks its column down: kt = 0 visits 5 tiles, kt = 4 one, so kt = 0 starts first.
 *
 * Inside one block (key tile j), for each query tile i it visits:
 *
 *     K_j, V_j (smem, held)       Q_i, dO_i (smem)           registers
 *          |                           |
 *          +---- S = Q_i K_j^T --------+                      S, dP: 4 x 4 per thread
 *          +---- dP = dO_i V_j^T ------+
 *          P = 2^(S sl2 - LSE sl), dS = P (dP - D)            smem tile T: P^T | dS^T | dS in turn
 *          dV_j += P^T dO_i     dK_j += dS^T Q_i              dK_j, dV_j: 4 x D/16 each, all walk
 *          dQ_i += dS K_j  --atomicAdd-->  dQacc (fp32, global)
 */
// clang-format on
#include "backward_tiled.h"
#include "tiles.cuh"

/* The tiles: K, V, Q, dO (64 x (D + 4) floats each) and T (64 x 68). */
#define BWD_SMEM_FLOATS(D) ((2 * TILE_BC + 2 * TILE_BR) * TILE_QS(D) + TILE_BR * TILE_PS)
#define BWD_MIN_BLOCKS(D) ((D) >= 128 ? 1 : 2)
#define BWD_PRE_WARPS 8 /* rows per block of the preprocess kernel: one warp each */
#define BWD_MAX_BLOCKS 65535u

typedef struct {
    const __half *q, *k, *v, *d_o;
    __half *dk, *dv;
    const float *lse, *delta; /* [B*H, N]: the forward's LSE (natural log), D */
    float *dq_acc;            /* [B*H, N, D], zeroed by the preprocess kernel */
    int64_t blocks;           /* Tc * B * H: launched blocks past this exit at once */
    int N, Tr, Tc, causal;
    float scale;
} bwd_params;

/* Which (b, h) and key tile this block owns. A head's blocks are consecutive (they read the same Q
 * and dO while it is in L2) and run kt = 0 first: under a causal mask it visits the most tiles. */
static __device__ __forceinline__ int bwd_coords(const bwd_params *p, int64_t *bh, int *kt) {
    const int64_t blk = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    if (blk >= p->blocks) return 0;
    *bh = blk / p->Tc;
    *kt = (int)(blk % p->Tc);
    return 1;
}

/* T[key][query] = x[query][key]: the thread's 4 x 4 scores, transposed, so that tile_pv (which sums
 * over a row of its first operand) can form P^T dO and dS^T Q. */
static __device__ __forceinline__ void bwd_store_t(float *Ts, const float x[TILE_ROWS][TILE_KEYS], int ty, int tx) {
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++)
#pragma unroll
        for (int c = 0; c < TILE_KEYS; c++) Ts[(tx + c * TILE_TX) * TILE_PS + ty + r * TILE_TY] = x[r][c];
}

/* P and dS of the thread's 4 x 4 scores, in place: s = q . k (unscaled) becomes P = 2^(s sl2 - LSE_i
 * log2 e), with the mask where `masked` (block-uniform: the diagonal, or the ragged last key tile)
 * applied to the exponent, after the scale, so that a negative scale masks the same way; dp = dO . v
 * becomes dS = P (dP - D_i). Rows >= N get LSE = +inf, so P = 0 and dS = 0: they add nothing. */
static __device__ __forceinline__ void bwd_p_and_ds(float s[TILE_ROWS][TILE_KEYS], float dp[TILE_ROWS][TILE_KEYS],
                                                    const float *lse_head, const float *delta_head, float sl2,
                                                    int q0, int key0, int N, int causal, int masked, int ty, int tx) {
    float delta[TILE_ROWS];
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++) {
        const int i = q0 + ty + r * TILE_TY;
        const float lse2 = i < N ? __ldg(lse_head + i) * ATTN_LOG2E : INFINITY;
        delta[r] = i < N ? __ldg(delta_head + i) : 0.0f;
#pragma unroll
        for (int c = 0; c < TILE_KEYS; c++) s[r][c] = fmaf(s[r][c], sl2, -lse2); /* log2 P */
    }
    if (masked) tile_mask(s, q0, key0, N, causal, ty, tx);
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++)
#pragma unroll
        for (int c = 0; c < TILE_KEYS; c++) {
            s[r][c] = fast_exp2(s[r][c]);                /* P; 2^-inf = 0 */
            dp[r][c] = s[r][c] * (dp[r][c] - delta[r]); /* dS */
        }
}

/* dQacc[i] += dq[r] for the thread's rows i = q0 + ty + 16 r < N and its columns (tile_pv's map). The
 * return values are unused, so these compile to RED (fire and forget), not to ATOM. */
template <int D>
static __device__ __forceinline__ void bwd_dq_add(float *acc_head, const float dq[TILE_ROWS][TILE_COLS(D)], int q0,
                                                  int N, int ty, int tx) {
    constexpr int VEC = TILE_VEC(D), CHUNKS = TILE_COLS(D) / VEC;
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++) {
        const int i = q0 + ty + r * TILE_TY;
        if (i >= N) continue;
        float *row = acc_head + (int64_t)i * D + tx * VEC;
#pragma unroll
        for (int cc = 0; cc < CHUNKS; cc++) {
            float *dst = row + cc * TILE_TX * VEC; /* 16-byte aligned (8 at D = 32): D % 32 == 0 */
            const float *x = &dq[r][cc * VEC];
#if __CUDA_ARCH__ >= 900 /* sm_90 adds 2- and 4-wide float atomics: a quarter of the L2 operations */
            if constexpr (VEC == 4)
                atomicAdd(reinterpret_cast<float4 *>(dst), make_float4(x[0], x[1], x[2], x[3]));
            else
                atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(x[0], x[1]));
#else
#pragma unroll
            for (int e = 0; e < VEC; e++) atomicAdd(dst + e, x[e]);
#endif
        }
    }
}

/* acc * mult rounded to fp16 into rows row0 + ty + 16 r < N of the head: dK (mult = scale), dV. */
template <int D>
static __device__ __forceinline__ void bwd_store_rows(__half *head, const float acc[TILE_ROWS][TILE_COLS(D)],
                                                      float mult, int row0, int N, int ty, int tx) {
    constexpr int VEC = TILE_VEC(D), CHUNKS = TILE_COLS(D) / VEC;
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++) {
        const int j = row0 + ty + r * TILE_TY;
        if (j >= N) continue;
        __half *row = head + (int64_t)j * D;
#pragma unroll
        for (int cc = 0; cc < CHUNKS; cc++) {
            const float *x = &acc[r][cc * VEC];
            if constexpr (VEC == 4) /* 4 halves: one 8-byte store, 16 threads = 128 bytes */
                *(reinterpret_cast<uint2 *>(row) + cc * TILE_TX + tx) =
                    make_uint2(tile_pack_half2(x[0] * mult, x[1] * mult), tile_pack_half2(x[2] * mult, x[3] * mult));
            else
                *(reinterpret_cast<uint32_t *>(row) + cc * TILE_TX + tx) = tile_pack_half2(x[0] * mult, x[1] * mult);
        }
    }
}

/* Kernel 1: D_i = dO_i . O_i in fp32 and dQacc row i = 0; one warp per row, lanes over d, then 5
 * shuffles (a fixed order: D is the same on every run). Memory-bound: 2 + 2 + 4 bytes per element. */
__global__ void stage12_preprocess(const __half *o, const __half *d_o, float *delta, float *dq_acc, int64_t rows,
                                   int D) {
    const int lane = (int)threadIdx.x % 32;
    for (int64_t row = (int64_t)blockIdx.x * BWD_PRE_WARPS + threadIdx.x / 32; row < rows;
         row += (int64_t)gridDim.x * BWD_PRE_WARPS) {
        const __half *orow = o + row * D, *grow = d_o + row * D;
        float acc = 0.0f;
        for (int d = lane; d < D; d += 32) acc = fmaf(__half2float(grow[d]), __half2float(orow[d]), acc);
#pragma unroll
        for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0) delta[row] = acc;
        for (int d = lane; d < D; d += 32) dq_acc[row * D + d] = 0.0f;
    }
}

/* Kernel 2: one block per (b, h, key tile kt): K_j, V_j held, the query tiles walked (see above). */
template <int D>
__global__ void __launch_bounds__(TILE_THREADS, BWD_MIN_BLOCKS(D)) stage12_kernel(bwd_params prm) {
    int64_t bh;
    int kt;
    if (!bwd_coords(&prm, &bh, &kt)) return;
    extern __shared__ float4 tile_smem[];
    float *Ks = reinterpret_cast<float *>(tile_smem);
    float *Vs = Ks + TILE_BC * TILE_QS(D);
    float *Qs = Vs + TILE_BC * TILE_QS(D);
    float *dOs = Qs + TILE_BR * TILE_QS(D);
    float *Ts = dOs + TILE_BR * TILE_QS(D); /* P^T, then dS^T, then dS */
    const int tx = (int)threadIdx.x % TILE_TX, ty = (int)threadIdx.x / TILE_TX;
    const int N = prm.N, key0 = kt * TILE_BC;
    const int64_t head = bh * N * D;
    const float *lse_head = prm.lse + bh * N, *delta_head = prm.delta + bh * N;
    const float sl2 = prm.scale * ATTN_LOG2E;

    /* K_j and V_j, unscaled, loaded once: S is scaled inside the exponent, and Q stays unscaled for dK */
    tile_load_rows<D>(Ks, prm.k + head, key0, N, 1.0f);
    tile_load_rows<D>(Vs, prm.v + head, key0, N, 1.0f);
    float dk[TILE_ROWS][TILE_COLS(D)], dv[TILE_ROWS][TILE_COLS(D)];
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++)
#pragma unroll
        for (int x = 0; x < TILE_COLS(D); x++) dk[r][x] = dv[r][x] = 0.0f;

    /* Causal: query tiles qt_begin .. qt_full-1 masked (the diagonal), qt_full .. Tr-1 unmasked, those
     * before qt_begin skipped. In general (any Br, Bc): qt_begin = key0 / Br holds the first row that
     * sees key0; from qt_full on every row q0 >= key0 + Bc - 1 sees the whole tile. Non-causal: every
     * query tile, masked only when this is the ragged last key tile. */
    const int qt_begin = prm.causal ? key0 / TILE_BR : 0;
    const int qt_full = prm.causal ? (key0 + TILE_BC - 1 + TILE_BR - 1) / TILE_BR : 0;
    const int tail = key0 + TILE_BC > N;

    for (int qt = qt_begin; qt < prm.Tr; qt++) {
        const int q0 = qt * TILE_BR;
        __syncthreads(); /* the previous query tile's products are done with Qs, dOs and Ts */
        tile_load_rows<D>(Qs, prm.q + head, q0, N, 1.0f);
        tile_load_rows<D>(dOs, prm.d_o + head, q0, N, 1.0f);
        __syncthreads();
        float s[TILE_ROWS][TILE_KEYS], dp[TILE_ROWS][TILE_KEYS];
        tile_scores<D>(s, Qs, Ks, ty, tx);
        tile_scores<D>(dp, dOs, Vs, ty, tx);
        bwd_p_and_ds(s, dp, lse_head, delta_head, sl2, q0, key0, N, prm.causal, qt < qt_full || tail, ty, tx);
        bwd_store_t(Ts, s, ty, tx); /* P^T */
        __syncthreads();
        tile_pv<D>(dv, Ts, dOs, ty, tx); /* dV_j += P^T dO_i */
        __syncthreads();
        bwd_store_t(Ts, dp, ty, tx); /* dS^T */
        __syncthreads();
        tile_pv<D>(dk, Ts, Qs, ty, tx); /* dK_j += dS^T Q_i */
        __syncthreads();
        tile_store_p(Ts, dp, ty, tx); /* dS */
        __syncthreads();
        float dq[TILE_ROWS][TILE_COLS(D)];
#pragma unroll
        for (int r = 0; r < TILE_ROWS; r++)
#pragma unroll
            for (int x = 0; x < TILE_COLS(D); x++) dq[r][x] = 0.0f;
        tile_pv<D>(dq, Ts, Ks, ty, tx); /* dS K_j: this key tile's share of dQ_i */
        bwd_dq_add<D>(prm.dq_acc + head, dq, q0, N, ty, tx);
    }

    bwd_store_rows<D>(prm.dk + head, dk, prm.scale, key0, N, ty, tx);
    bwd_store_rows<D>(prm.dv + head, dv, 1.0f, key0, N, ty, tx);
}

/* Kernel 3: dQ = fp16(scale * dQacc), 4 elements per thread and step (B*H*N*D is a multiple of 32). */
__global__ void stage12_convert(const float4 *acc, uint2 *dq, int64_t n4, float scale) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n4; e += (int64_t)gridDim.x * blockDim.x) {
        const float4 a = acc[e];
        dq[e] = make_uint2(tile_pack_half2(a.x * scale, a.y * scale), tile_pack_half2(a.z * scale, a.w * scale));
    }
}

typedef void (*bwd_kernel)(bwd_params);

static unsigned bwd_blocks_for(int64_t work, unsigned per_block) {
    const int64_t b = (work + per_block - 1) / per_block;
    return (unsigned)(b < (int64_t)BWD_MAX_BLOCKS ? (b > 0 ? b : 1) : BWD_MAX_BLOCKS);
}

/* The problem's checks, and the shared-memory opt-in of the key-tile kernel for D. */
static attn_status stage12_check(const attn_problem *p, const attn_args *a, bwd_kernel kern, size_t smem) {
    if (p->dtype != ATTN_F16)
        return attn_fail(ATTN_EUNSUPPORTED, "stage 12 supports dtype fp16 (got %s)", attn_dtype_name(p->dtype));
    if (p->N < 1 || p->N > ATTN_MAX_N || p->B < 1 || p->H < 1)
        return attn_fail(ATTN_EINVAL, "stage 12: bad shape B=%lld H=%lld N=%lld", (long long)p->B, (long long)p->H,
                         (long long)p->N);
    /* 8-byte tensors for the uint2 loads and stores, 16 bytes of workspace for the float4 ones */
    const uintptr_t tensors = (uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v | (uintptr_t)a->o |
                              (uintptr_t)a->d_o | (uintptr_t)a->dq | (uintptr_t)a->dk | (uintptr_t)a->dv;
    if ((tensors & 7u) || ((uintptr_t)a->workspace & 15u) || !a->workspace)
        return attn_fail(ATTN_EINVAL, "stage 12 needs its tensors aligned to 8 bytes and a workspace aligned to 16");
    /* D = 128 takes 149 KB: more than a V100 (96 KB) or an sm_86/89 GPU (99 KB) gives one block. */
    int dev = 0, smem_max = 0;
    ATTN_CUDA(cudaGetDevice(&dev));
    ATTN_CUDA(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem > (size_t)smem_max)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "stage 12 at head dim %d needs %zu KB of shared memory per block; this GPU allows "
                         "%d KB (a smaller head dim runs)", (int)p->D, smem / 1024, smem_max / 1024);
    if (smem > 48 * 1024)
        ATTN_CUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    /* Shared memory over L1: the tiles are the only reuse; Q and dO are shared through L2. */
    ATTN_CUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   (int)cudaSharedmemCarveoutMaxShared));
    return ATTN_OK;
}

/* The three launches on the caller's stream, each checked, none waited for. */
extern "C" attn_status stage12_run(const attn_problem *p, const attn_args *a) {
    bwd_kernel kern;
    switch (p->D) {
    case 32: kern = stage12_kernel<32>; break;
    case 64: kern = stage12_kernel<64>; break;
    case 128: kern = stage12_kernel<128>; break;
    default:
        return attn_fail(ATTN_EUNSUPPORTED, "stage 12 supports head dim 32, 64, 128 (got %lld)", (long long)p->D);
    }
    const size_t smem = (size_t)BWD_SMEM_FLOATS((int)p->D) * sizeof(float);
    attn_status st = stage12_check(p, a, kern, smem);
    if (st != ATTN_OK) return st;

    bwd_params prm;
    const int64_t BH = p->B * p->H, rows = BH * p->N;
    float *dq_acc = (float *)a->workspace, *delta = dq_acc + rows * p->D; /* stage12_workspace_bytes */
    prm.q = (const __half *)a->q, prm.k = (const __half *)a->k, prm.v = (const __half *)a->v;
    prm.d_o = (const __half *)a->d_o, prm.dk = (__half *)a->dk, prm.dv = (__half *)a->dv;
    prm.lse = a->lse, prm.delta = delta, prm.dq_acc = dq_acc;
    prm.N = (int)p->N;
    prm.Tr = (prm.N + TILE_BR - 1) / TILE_BR;
    prm.Tc = (prm.N + TILE_BC - 1) / TILE_BC;
    prm.blocks = (int64_t)prm.Tc * BH;
    prm.causal = p->causal != 0;
    prm.scale = p->scale;

    /* One block per (b, h, key tile), folded into x; y only when that passes 2^31 - 1 blocks. */
    int64_t gx = prm.blocks, gy = 1;
    if (gx > 2147483647) {
        gx = (int64_t)1 << 30;
        gy = (prm.blocks + gx - 1) / gx;
        if (gy > 65535)
            return attn_fail(ATTN_EINVAL, "stage 12: %lld blocks is more than one launch holds", (long long)prm.blocks);
    }
    cudaStream_t stream = (cudaStream_t)a->stream;
    stage12_preprocess<<<bwd_blocks_for(rows, BWD_PRE_WARPS), 32 * BWD_PRE_WARPS, 0, stream>>>(
        (const __half *)a->o, prm.d_o, delta, dq_acc, rows, (int)p->D);
    ATTN_CUDA_LAUNCHED("stage 12 preprocess kernel");
    char what[48];
    snprintf(what, sizeof what, "stage 12 key-tile kernel (D=%d)", (int)p->D);
    kern<<<dim3((unsigned)gx, (unsigned)gy, 1), TILE_THREADS, smem, stream>>>(prm);
    ATTN_CUDA_LAUNCHED(what);
    const int64_t n4 = rows * p->D / 4;
    stage12_convert<<<bwd_blocks_for(n4, 256), 256, 0, stream>>>((const float4 *)dq_acc, (uint2 *)a->dq, n4, p->scale);
    ATTN_CUDA_LAUNCHED("stage 12 convert kernel");
    return ATTN_OK;
}
