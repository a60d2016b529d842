/*
 * step06a_first_mma.cu: road step 06a, the first tensor-core version: stage 05 with its products
 * moved onto mma.sync.
 *
 * What it adds to stage 05: S = Q K^T and O += P V are mma.sync.m16n8k16 (fp16 in, fp32 accumulate)
 * with operands read by ldmatrix from fp16 tiles kept as they are (stage 05 converted them to fp32);
 * each of the 4 warps owns 16 query rows, so a row's max and sum finish inside one quad of 4 lanes.
 * What it keeps from stage 05: 64 x 64 tiles, plain row-major shared memory, K and V loaded and waited
 * for before any compute, Q re-read from shared memory for every key tile, and P written to shared
 * memory and read back (here as the A operand of P V, per warp).
 * Next, 06b: P stays in registers.
 *
 * Run: build/attn --stage 06a --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#include "fa2_road.cuh"

FA2_ROAD_STEP("06a", FA2_RECIPE_06A, fa2_first_mma_kernel, stage06a_run)
