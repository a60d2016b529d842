/*
 * step06e_double_buffer.cu: road step 06e, K and V double-buffered with cp.async.
 *
 * What it adds to 06d: two K and two V buffers; at the top of key tile j the block waits for K_j, then
 * starts K_{j-1} and V_{j-1} into the other buffers, and waits for V_j only before P V_j. The loads of
 * the next tile run under the products of this one (fa2_wait_k_prefetch_next, fa2_wait_v).
 * Next: stage 06 itself, the same kernel with FA2's tiles per head dim (fa2_traits.cuh): 128 query rows
 * per block, 32 per warp, 128 or 64 keys per tile (fa2_kernel.cuh, fa2_f16.cu, fa2_bf16.cu).
 *
 * Run: build/attn --stage 06e --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#include "fa2_road.cuh"

FA2_ROAD_STEP("06e", FA2_RECIPE_06E, fa2_double_buffered_kernel, stage06e_run)
