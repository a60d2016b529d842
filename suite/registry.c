/*
 * registry.c: the one list of stages. The front end, the tests and the bench read it; a stage that
 * is not here does not exist for them. GPU stages are compiled only in a CUDA build (nvcc found, and
 * no NO_CUDA=1); without one their entries stay (so --list and the tests can say what was skipped)
 * with run == NULL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "stage.h"

#include "01_naive_cpu/naive_cpu.h"
#include "02_naive_gpu/naive_gpu.h"
#include "03_tiled/tiled.h"
#include "04_online_softmax/online_softmax.h"
#include "05_causal_bands/causal_bands.h"
#include "06_fa2_full/fa2_cpu.h"
#include "06_fa2_full/stage06.h"
#include "07_tma_wgmma/stage07.h"
#include "08_warp_specialized/stage08.h"
#include "09_overlap/stage09.h"
#include "10_context_parallel/stage10.h"
#include "11_backward_naive/backward_naive.h"
#include "12_backward_tiled/backward_tiled.h"
#include "13_backward_fa2/backward_fa2.h"
#include "14_backward_hopper/backward_hopper.h"
#include "15_decode/decode_cpu.h"
#include "15_decode/decode_gpu.h"

#ifdef ATTN_HAVE_CUDA
#define GPU_RUN(fn) (fn)
#else
#define GPU_RUN(fn) NULL
#endif
/* Stage 10 also needs NCCL (10_context_parallel/cp.mk looks for it). */
#if defined(ATTN_HAVE_CUDA) && defined(ATTN_HAVE_NCCL)
#define NCCL_RUN(fn) (fn)
#else
#define NCCL_RUN(fn) NULL
#endif

/* The head dims each family of kernels takes. Plain C, so that a build without CUDA still answers. */
static int dims_any(int64_t D) { return D >= 1 && D <= ATTN_MAX_D; }
static int dims_tiles(int64_t D) { return D == 32 || D == 64 || D == 128; }
static int dims_hopper(int64_t D) { return D == 64 || D == 128 || D == 256; }

/* Each GPU stage from 03 on has a CPU model beside its kernel (NN_x/x_cpu.c, id NNm): the same tiles,
 * loop order and equations in plain C, so that every algorithm runs, is tested and can be broken on
 * a machine without a GPU. A model takes its stage's head dims and dtypes (15m, decoding's, takes
 * every D: its kernel's 32, 64 and 128 among them). */

/* Where the GPU stages run: the CUDA-core stages 02-05 from sm_70 on (V100, and the T4 of free notebook
 * services; the Makefile passes sm_75 when its nvcc, CUDA 13 or newer, no longer builds sm_70), the
 * mma.sync stage from sm_80 on, the Hopper stages (wgmma, setmaxnreg: sm_90a code) on sm_90 alone;
 * the last number is how many GPUs a stage drives. Stage 10 runs on every GPU of the host that it is
 * given, each sm_80 or newer. */
#define CPU_ONLY 0, 0, 0, "the CPU", 0
#ifndef ATTN_CUDA_CORES_MIN_SM
#define ATTN_CUDA_CORES_MIN_SM 70
#endif
#if ATTN_CUDA_CORES_MIN_SM == 70
#define SM70_UP 1, 70, 0, "sm_70 or newer (V100, T4, A100, RTX 20/30/40, H100, H200)", 1
#else
#define SM70_UP 1, ATTN_CUDA_CORES_MIN_SM, 0, "sm_75 or newer (T4, A100, RTX 20/30/40, H100, H200)", 1
#endif
#define SM80_UP 1, 80, 0, "sm_80 or newer (A100, RTX 30/40, H100, H200)", 1
#define SM90_ONLY 1, 90, 90, "sm_90 (H100, H200)", 1
#define SM80_UP_MULTI 1, 80, 0, "sm_80 or newer GPUs of one host, through NCCL", ATTN_MAX_GPUS

/* What a stage takes beyond K and V of Q's shape (attn_stage.takes): nothing, for all but 06, 06m and 15m. */
#define PLAIN 0u
/* Stage 06: grouped-query heads, N_k != N, cu_seqlens and strided tensors (issue 56) */
#define ANY_SHAPE (ATTN_TAKES_GQA | ATTN_TAKES_SEQ_K | ATTN_TAKES_VARLEN | ATTN_TAKES_STRIDES)

#define F16_ONLY ATTN_DTYPE_BIT(ATTN_F16)
#define F16_BF16 (ATTN_DTYPE_BIT(ATTN_F16) | ATTN_DTYPE_BIT(ATTN_BF16))

const attn_stage attn_stages[] = {
    {"01", "01_naive_cpu", "naive_cpu",
     "the OpenMP CPU reference in double: S = QK^T*scale, mask, softmax, O = PV, LSE",
     CPU_ONLY, 1, F16_BF16, "1..256", stage01_supports_dim, NULL, NULL, stage01_run, ATTN_FORWARD,
     stage01_bytes, 0, "01_naive_cpu/naive_cpu.c", PLAIN},
    {"02", "02_naive_gpu", "naive_gpu",
     "the same on the GPU, materialising the N x N scores in device memory",
     SM70_UP, 1, F16_ONLY, "1..256", dims_any, stage02_workspace_bytes,
     "the N x N scores", GPU_RUN(stage02_run), ATTN_FORWARD,
     stage02_bytes, 0, "02_naive_gpu/naive_gpu.cu", PLAIN},
    {"03", "03_tiled", "tiled",
     "tiles of Q, K, V through shared memory, no N x N matrix; two passes: row max, then sum and PV",
     SM70_UP, 0, F16_ONLY, "32, 64, 128", dims_tiles, NULL, NULL, GPU_RUN(stage03_run), ATTN_FORWARD,
     stage03_bytes, 0, "03_tiled/tiled.cu", PLAIN},
    {"03m", "03_tiled", "tiled_cpu",
     "stage 03's two passes over 64x64 tiles as plain C on the CPU (a model of the kernel)",
     CPU_ONLY, 0, F16_ONLY, "32, 64, 128", dims_tiles, NULL, NULL, stage03m_run, ATTN_FORWARD,
     stage03_bytes, 0, "03_tiled/tiled_cpu.c", PLAIN},
    {"04", "04_online_softmax", "online_softmax",
     "one pass: running max m and sum l, alpha = exp2(m_old - m_new) rescales O and l",
     SM70_UP, 0, F16_ONLY, "32, 64, 128", dims_tiles, NULL, NULL, GPU_RUN(stage04_run), ATTN_FORWARD,
     stage04_bytes, 0, "04_online_softmax/online_softmax.cu", PLAIN},
    {"04m", "04_online_softmax", "online_softmax_cpu",
     "stage 04's one pass with m, l and alpha as plain C on the CPU (a model of the kernel)",
     CPU_ONLY, 0, F16_ONLY, "32, 64, 128", dims_tiles, NULL, NULL, stage04m_run, ATTN_FORWARD,
     stage04_bytes, 1, "04_online_softmax/online_softmax_cpu.c", PLAIN},
    {"05", "05_causal_bands", "causal_bands",
     "causal: key tiles below the diagonal unmasked, on it masked, above it never visited",
     SM70_UP, 0, F16_ONLY, "32, 64, 128", dims_tiles, NULL, NULL, GPU_RUN(stage05_run), ATTN_FORWARD,
     stage05_bytes, 0, "05_causal_bands/causal_bands.cu", PLAIN},
    {"05m", "05_causal_bands", "causal_bands_cpu",
     "stage 05's causal bands as plain C on the CPU (a model of the kernel)",
     CPU_ONLY, 0, F16_ONLY, "32, 64, 128", dims_tiles, NULL, NULL, stage05m_run, ATTN_FORWARD,
     stage05_bytes, 1, "05_causal_bands/causal_bands_cpu.c", PLAIN},
    /* Stage 06's road: each step one idea on the way from stage 05 to stage 06 (06_fa2_full/step06*.cu). */
    {"06a", "06_fa2_full", "fa2_first_mma",
     "road: stage 05 on mma.sync (64 x 64 tiles, P through smem, load then compute, Q re-read)",
     SM80_UP, 1, F16_ONLY, "64, 128", stage06_road_supports_dim, NULL, NULL, GPU_RUN(stage06a_run), ATTN_FORWARD,
     stage06_road_bytes, 0, "06_fa2_full/step06a_first_mma.cu", PLAIN},
    {"06b", "06_fa2_full", "fa2_p_in_registers", "road: 06a + P kept in registers (the S accumulators)",
     SM80_UP, 1, F16_ONLY, "64, 128", stage06_road_supports_dim, NULL, NULL, GPU_RUN(stage06b_run), ATTN_FORWARD,
     stage06_road_bytes, 0, "06_fa2_full/step06b_p_in_registers.cu", PLAIN},
    {"06c", "06_fa2_full", "fa2_swizzle", "road: 06b + XOR-swizzled shared memory (no bank conflicts)",
     SM80_UP, 1, F16_ONLY, "64, 128", stage06_road_supports_dim, NULL, NULL, GPU_RUN(stage06c_run), ATTN_FORWARD,
     stage06_road_bytes, 0, "06_fa2_full/step06c_swizzle.cu", PLAIN},
    {"06d", "06_fa2_full", "fa2_q_in_registers", "road: 06c + Q fragments held in registers",
     SM80_UP, 1, F16_ONLY, "64, 128", stage06_road_supports_dim, NULL, NULL, GPU_RUN(stage06d_run), ATTN_FORWARD,
     stage06_road_bytes, 0, "06_fa2_full/step06d_q_in_registers.cu", PLAIN},
    {"06e", "06_fa2_full", "fa2_double_buffer", "road: 06d + cp.async double buffering of K and V",
     SM80_UP, 1, F16_ONLY, "64, 128", stage06_road_supports_dim, NULL, NULL, GPU_RUN(stage06e_run), ATTN_FORWARD,
     stage06_road_bytes, 0, "06_fa2_full/step06e_double_buffer.cu", PLAIN},
    {"06", "06_fa2_full", "fa2_full",
     "FlashAttention-2: 06e with FA2's tiles per head dim (128 rows, 32 per warp; 16 at D = 256), bf16, D up to 256",
     SM80_UP, 1, F16_BF16, STAGE06_DIMS_TEXT, stage06_supports_dim, NULL, NULL, GPU_RUN(stage06_run), ATTN_FORWARD,
     stage06_bytes, 0, "06_fa2_full/fa2_kernel.cuh", ANY_SHAPE},
    {"06m", "06_fa2_full", "fa2_cpu",
     "stage 06's FA2 order, warp row slices, P in 16 bits and LSE as plain C on the CPU (a model)",
     CPU_ONLY, 1, F16_BF16, STAGE06_DIMS_TEXT, stage06_supports_dim, NULL, NULL, stage06m_run, ATTN_FORWARD,
     stage06_bytes, 1, "06_fa2_full/fa2_cpu.c", ATTN_TAKES_GQA | ATTN_TAKES_SEQ_K | ATTN_TAKES_VARLEN},
    {"07", "07_tma_wgmma", "tma_wgmma",
     "Hopper's data path: TMA copies tiles to smem on an mbarrier, wgmma multiplies from smem, P from registers",
     SM90_ONLY, 1, F16_BF16, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage07_run), ATTN_FORWARD,
     stage07_bytes, 0, "07_tma_wgmma/tma_wgmma.cu", PLAIN},
    /* Stage 08's road: each step one idea on the way from stage 07 to stage 08 (08_warp_specialized/step08*.cu). */
    {"08a", "08_warp_specialized", "ws_split",
     "road: stage 07 with a producer warpgroup (TMA into a full/empty ring) and consumer warpgroups, setmaxnreg",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage08a_run), ATTN_FORWARD,
     stage07_bytes, 0, "08_warp_specialized/step08a_split.cu", PLAIN},
    {"08b", "08_warp_specialized", "ws_deeper_ring", "road: 08a + a ring of 4 K/V stages at D = 64",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage08b_run), ATTN_FORWARD,
     stage07_bytes, 0, "08_warp_specialized/step08b_deeper_ring.cu", PLAIN},
    {"08c", "08_warp_specialized", "ws_pairs",
     "road: 08b + pairs of blocks sharing each K/V tile by TMA multicast (D = 128, non-causal)",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage08c_run), ATTN_FORWARD,
     stage08c_bytes, 0, "08_warp_specialized/step08c_pairs.cu", PLAIN},
    {"08d", "08_warp_specialized", "ws_causal_pairs",
     "road: 08c + causal pairs (the shared tiles first, the later block's diagonal tile last)",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage08d_run), ATTN_FORWARD,
     stage08_bytes, 0, "08_warp_specialized/step08d_causal_pairs.cu", PLAIN},
    {"08", "08_warp_specialized", "warp_specialized",
     "warp specialization: 08d with O stored by the copy engine (the road: 08a producer/consumer split .. 08d)",
     SM90_ONLY, 1, F16_BF16, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage08_run), ATTN_FORWARD,
     stage08_bytes, 0, "08_warp_specialized/warp_specialized.cu", PLAIN},
    /* Stage 09's road: each step one idea on the way from stage 08 to stage 09 (09_overlap/step09*.cu). */
    {"09a", "09_overlap", "ov_pingpong",
     "road: stage 08 + ping-pong: the consumer warpgroups take turns issuing their GEMMs (named barriers)",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage09a_run), ATTN_FORWARD,
     stage08_bytes, 0, "09_overlap/step09a_pingpong.cu", PLAIN},
    {"09b", "09_overlap", "ov_three_consumers",
     "road: 09a + three consumer warpgroups at D = 64 (192 x 128 tiles, one block an SM)",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage09b_run), ATTN_FORWARD,
     stage09b_bytes, 0, "09_overlap/step09b_three_consumers.cu", PLAIN},
    {"09c", "09_overlap", "ov_softmax_under_pv",
     "road: 09b + softmax j under O += P V of tile j-1 (a software pipeline)",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage09c_run), ATTN_FORWARD,
     stage09b_bytes, 0, "09_overlap/step09c_softmax_under_pv.cu", PLAIN},
    {"09d", "09_overlap", "ov_lazy_rescale",
     "road: 09c + O rescaled only when a row's max moves by more than 2^8 (lazy rescale)",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage09d_run), ATTN_FORWARD,
     stage09b_bytes, 0, "09_overlap/step09d_lazy_rescale.cu", PLAIN},
    {"09e", "09_overlap", "ov_wide_tiles",
     "road: 09d + 80-key tiles at D = 256, 192-key tiles at D = 128 where they pad little",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage09e_run), ATTN_FORWARD,
     stage09e_bytes, 0, "09_overlap/step09e_wide_tiles.cu", PLAIN},
    {"09f", "09_overlap", "ov_warp_release",
     "road: 09e + one empty-barrier arrival a warp where the ring has two stages",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage09f_run), ATTN_FORWARD,
     stage09e_bytes, 0, "09_overlap/step09f_warp_release.cu", PLAIN},
    {"09g", "09_overlap", "ov_own_staging",
     "road: 09f + O staged in a buffer of its own (or stored from registers), not in the Q tile",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage09g_run), ATTN_FORWARD,
     stage09e_bytes, 0, "09_overlap/step09g_own_staging.cu", PLAIN},
    {"09h", "09_overlap", "ov_noncausal_pairs",
     "road: 09g with pairs for non-causal problems only (every tile a pair visits is shared)",
     SM90_ONLY, 1, F16_ONLY, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage09h_run), ATTN_FORWARD,
     stage09_bytes, 0, "09_overlap/step09h_noncausal_pairs.cu", PLAIN},
    {"09", "09_overlap", "overlap",
     "softmax under the tensor cores: 09h with a persistent grid of work units (the road: 09a ping-pong .. 09h)",
     SM90_ONLY, 1, F16_BF16, "64, 128, 256", dims_hopper, NULL, NULL, GPU_RUN(stage09_run), ATTN_FORWARD,
     stage09_bytes, 0, "09_overlap/overlap.cu", PLAIN},
    {"10", "10_context_parallel", "context_parallel",
     "past one GPU: Q stays, K/V shards travel a ring of GPUs (NCCL), partials merged by their LSE",
     SM80_UP_MULTI, 1, F16_BF16, STAGE10_DIMS_TEXT, stage10_supports_dim, NULL, NULL,
     NCCL_RUN(stage10_run), ATTN_FORWARD,
     stage10_bytes, 0, "10_context_parallel/cp_ring.c", PLAIN},
    /* The backward stages: dQ, dK, dV from Q, K, V, the forward's O and LSE, and dO. */
    {"11", "11_backward_naive", "backward_naive",
     "the backward as autograd does it: P (from the LSE) and dS as N x N matrices in device memory",
     SM70_UP, 0, F16_BF16, "1..256", dims_any, stage11_workspace_bytes,
     "the N x N P and dS", GPU_RUN(stage11_run), ATTN_BACKWARD,
     stage11_bytes, 0, "11_backward_naive/backward_naive.cu", PLAIN},
    {"12", "12_backward_tiled", "backward_tiled",
     "FA2's backward on CUDA cores: a block per key tile holds K, V, dK, dV, walks the query tiles; dQ by atomics",
     SM70_UP, 0, F16_ONLY, "32, 64, 128", dims_tiles, stage12_workspace_bytes,
     "the fp32 dQ accumulator and D", GPU_RUN(stage12_run), ATTN_BACKWARD_ATOMIC,
     stage12_bytes, 0, "12_backward_tiled/backward_tiled.cu", PLAIN},
    {"12m", "12_backward_tiled", "backward_tiled_cpu",
     "stage 12's key-tile loop as plain C on the CPU, dQ summed per head in key-tile order (a model)",
     CPU_ONLY, 0, F16_ONLY, "32, 64, 128", dims_tiles, NULL, NULL, stage12m_run, ATTN_BACKWARD,
     stage12_bytes, 0, "12_backward_tiled/backward_tiled_cpu.c", PLAIN},
    {"13", "13_backward_fa2", "backward_fa2",
     "backward on tensor cores: a block per 128 keys walks the query tiles, P and dS feed dV and dK from registers",
     SM80_UP, 0, F16_BF16, STAGE13_DIMS_TEXT, stage13_supports_dim, stage13_workspace_bytes,
     "the fp32 dQ accumulator and D", GPU_RUN(stage13_run), ATTN_BACKWARD_ATOMIC,
     stage13_bytes, 0, "13_backward_fa2/backward_fa2.cu", PLAIN},
    {"13d", "13_backward_fa2", "backward_fa2_deterministic",
     "stage 13 with dQ summed over the key tiles in a fixed order: bit-for-bit repeatable",
     SM80_UP, 0, F16_BF16, STAGE13_DIMS_TEXT, stage13_supports_dim, stage13_workspace_bytes,
     "the fp32 dQ accumulator, D and the order counters", GPU_RUN(stage13d_run), ATTN_BACKWARD,
     stage13_bytes, 0, "13_backward_fa2/backward_fa2.cu", PLAIN},
    {"14", "14_backward_hopper", "backward_hopper",
     "backward on Hopper: TMA rings Q, dO to wgmma warpgroups of 64 keys each; dQ added by the copy engine",
     SM90_ONLY, 0, F16_BF16, STAGE14_DIMS_TEXT, stage14_supports_dim, stage14_workspace_bytes,
     "the fp32 dQ accumulator and D", GPU_RUN(stage14_run), ATTN_BACKWARD_ATOMIC,
     stage14_bytes, 0, "14_backward_hopper/backward_hopper.cu", PLAIN},
    {"14d", "14_backward_hopper", "backward_hopper_deterministic",
     "stage 14 with dQ summed over the key tiles in a fixed order: bit-for-bit repeatable",
     SM90_ONLY, 0, F16_BF16, STAGE14_DIMS_TEXT, stage14_supports_dim, stage14_workspace_bytes,
     "the fp32 dQ accumulator, D and the order counters", GPU_RUN(stage14d_run), ATTN_BACKWARD,
     stage14_bytes, 0, "14_backward_hopper/backward_hopper.cu", PLAIN},
    /* Decoding: a few new queries a sequence against a long cache, grouped-query heads and N_k != N
     * (N <= N_k when causal). Per-sequence cache lengths and caches paged at any size go through the
     * entry points of 15_decode/decode_gpu.h and decode_cpu.h; 15p reads the harness's pages of
     * ATTN_PAGE_SIZE keys, shuffled. */
    {"15", "15_decode", "decode",
     "flash-decoding: a block per (sequence, K/V head, chunk of keys), grouped heads as its rows, partials merged by LSE",
     SM80_UP, 1, F16_BF16, STAGE15_DIMS_TEXT, stage15_supports_dim, stage15_workspace_bytes,
     "the chunks' partial O and LSE", GPU_RUN(stage15_run), ATTN_FORWARD,
     stage15_bytes, 0, "15_decode/decode_kernel.cuh", ATTN_TAKES_GQA | ATTN_TAKES_SEQ_K | ATTN_FOR_DECODING},
    {"15p", "15_decode", "decode_paged",
     "road: stage 15 reading K and V through a block table, pages of 64 keys in a shuffled pool (a paged KV cache)",
     SM80_UP, 1, F16_BF16, STAGE15_DIMS_TEXT, stage15_supports_dim, stage15_workspace_bytes,
     "the chunks' partial O and LSE", GPU_RUN(stage15p_run), ATTN_FORWARD,
     stage15_bytes, 0, "15_decode/decode_kernel.cuh",
     ATTN_TAKES_GQA | ATTN_TAKES_SEQ_K | ATTN_TAKES_PAGED | ATTN_FOR_DECODING},
    {"15m", "15_decode", "decode_cpu",
     "flash-decoding: each sequence's keys cut into chunks, one block each, partials merged by their LSE",
     CPU_ONLY, 1, F16_BF16, "1..256", dims_any, NULL, NULL, stage15m_run, ATTN_FORWARD,
     stage15_bytes, 0, "15_decode/decode_cpu.c", ATTN_TAKES_GQA | ATTN_TAKES_SEQ_K},
};
const int attn_num_stages = (int)(sizeof attn_stages / sizeof attn_stages[0]);

const int attn_test_dims[] = {1, 3, 32, 64, 80, 96, 128, 192, 256};
const int attn_num_test_dims = (int)(sizeof attn_test_dims / sizeof attn_test_dims[0]);

int attn_built_with_cuda(void) {
#ifdef ATTN_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

/* 1 when the id is a stage number alone ("06"), not a road step or a CPU model ("06c", "06m") */
static int id_is_number(const char *id) { return id[0] && strspn(id, "0123456789") == strlen(id); }

/* The stage a folder stands for: its numbered stage; in a folder without a kernel, its CPU model, the
 * folder's one stage. NULL when no stage lives in `folder`. */
static const attn_stage *folder_stage(const char *folder) {
    const attn_stage *model = NULL;
    for (int s = 0; s < attn_num_stages; s++) {
        if (strcmp(folder, attn_stages[s].folder)) continue;
        if (id_is_number(attn_stages[s].id)) return &attn_stages[s];
        if (!model && !attn_stages[s].on_gpu) model = &attn_stages[s];
    }
    return model;
}

/* An exact id or name first. Then a number with an optional one-letter suffix, the leading zero
 * optional and the letter in either case: "3" and "03" name stage 03, "3m" and "03M" its CPU model,
 * "6a" the road's first step. A folder, and a number alone, name the numbered stage in it (not its
 * road steps or CPU model), or its model where there is no kernel. */
const attn_stage *attn_find_stage(const char *key) {
    if (!key || !*key) return NULL;
    for (int s = 0; s < attn_num_stages; s++)
        if (strcmp(key, attn_stages[s].id) == 0 || strcmp(key, attn_stages[s].name) == 0) return &attn_stages[s];
    char *end = NULL;
    const long n = key[0] >= '0' && key[0] <= '9' ? strtol(key, &end, 10) : -1;
    if (n >= 0 && n < 100 && strlen(end) <= 1)
        for (int s = 0; s < attn_num_stages; s++) {
            char *id_end = NULL;
            if (strtol(attn_stages[s].id, &id_end, 10) == n && strcasecmp(id_end, end) == 0) return &attn_stages[s];
        }
    if (n >= 0 && n < 100 && !*end)
        for (int s = 0; s < attn_num_stages; s++)
            if (strtol(attn_stages[s].id, NULL, 10) == n) return folder_stage(attn_stages[s].folder);
    return folder_stage(key);
}

const attn_stage *attn_cpu_model_of(const attn_stage *s) {
    char id[16];
    if (!s || !s->on_gpu || !id_is_number(s->id) || snprintf(id, sizeof id, "%sm", s->id) >= (int)sizeof id)
        return NULL;
    for (int i = 0; i < attn_num_stages; i++)
        if (!strcmp(attn_stages[i].id, id) && !attn_stages[i].on_gpu) return &attn_stages[i];
    return NULL;
}

attn_status attn_stage_gpus_ok(const attn_stage *s, int gpus) {
    if (gpus < 0 || gpus > ATTN_MAX_GPUS)
        return attn_fail(ATTN_EINVAL, "--gpus must be an integer from 1 to %d (got %d)", ATTN_MAX_GPUS, gpus);
    if (gpus > 1 && s->max_gpus < gpus)
        return attn_fail(ATTN_EINVAL, "--gpus %d: stage %s runs on %s; only a multi-GPU stage (see --list) "
                         "takes --gpus above 1", gpus, s->id, s->max_gpus ? "one GPU" : "the CPU");
    return ATTN_OK;
}

const char *attn_stages_taking(unsigned what, char *ids, size_t cap) {
    size_t n = 0;
    ids[0] = '\0';
    for (int i = 0; i < attn_num_stages && n < cap; i++)
        if (attn_stages[i].takes & what)
            n += (size_t)snprintf(ids + n, cap - n, "%s%s", n ? ", " : "", attn_stages[i].id);
    if (!n) snprintf(ids, cap, "none");
    return ids;
}

/* The problem's shapes beyond Q's (attn_problem): what the stage's `takes` does not hold is refused,
 * naming the field, the option that sets it and the stages that take it. */
static attn_status stage_takes(const attn_stage *s, const attn_problem *p) {
    char ids[256];
    if (p->H_kv != p->H && !(s->takes & ATTN_TAKES_GQA))
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s takes H_kv == H only (got H_kv %lld of H %lld, --kv-heads); "
                         "the stages that take grouped-query attention: %s", s->id, (long long)p->H_kv,
                         (long long)p->H, attn_stages_taking(ATTN_TAKES_GQA, ids, sizeof ids));
    if (p->N_k != p->N && !(s->takes & ATTN_TAKES_SEQ_K))
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s takes N_k == N only (got N_k %lld of N %lld, --seq-k); "
                         "the stages that take N_k != N: %s", s->id, (long long)p->N_k, (long long)p->N,
                         attn_stages_taking(ATTN_TAKES_SEQ_K, ids, sizeof ids));
    if ((p->cu_seqlens_q || p->cu_seqlens_k) && !(s->takes & ATTN_TAKES_VARLEN))
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s takes no cu_seqlens (variable-length batches); the stages "
                         "that take them: %s", s->id, attn_stages_taking(ATTN_TAKES_VARLEN, ids, sizeof ids));
    return ATTN_OK;
}

attn_status attn_stage_supports(const attn_stage *s, const attn_problem *p) {
    if (!s->supports_dim(p->D))
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s supports head dim %s (got %lld)", s->id,
                         s->dims_text, (long long)p->D);
    if (!(s->dtypes & ATTN_DTYPE_BIT(p->dtype)))
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s supports dtype %s (got %s)", s->id,
                         (s->dtypes & ATTN_DTYPE_BIT(ATTN_BF16)) ? "fp16, bf16" : "fp16",
                         attn_dtype_name(p->dtype));
    return stage_takes(s, p);
}
