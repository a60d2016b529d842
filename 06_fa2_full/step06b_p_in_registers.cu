/*
 * step06b_p_in_registers.cu: road step 06b, P never leaves registers.
 *
 * What it adds to 06a: the fp32 accumulators of S, exponentiated and rounded to 16 bits, already have
 * the layout of the A operand of P V (two adjacent 16x8 C tiles are one 16x16 A tile: the fragment map
 * in fa2_steps.cuh), so P goes from the S registers straight into the next mma: no shared-memory round
 * trip, no __syncwarp. One of FA2's own points (FA1 kept P in shared memory).
 * Next, 06c: the XOR swizzle.
 *
 * Run: build/attn --stage 06b --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#include "fa2_road.cuh"

FA2_ROAD_STEP("06b", FA2_RECIPE_06B, fa2_p_in_registers_kernel, stage06b_run)
