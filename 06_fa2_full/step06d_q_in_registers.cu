/*
 * step06d_q_in_registers.cu: road step 06d, Q fragments held in registers.
 *
 * What it adds to 06c: the Q tile's A fragments are read by ldmatrix once, after Q lands, and kept in
 * registers for the whole key loop (D/4 registers per 16-row slice) instead of being re-read for every
 * key tile: one ldmatrix per 16-wide slice of D saved per key tile.
 * Next, 06e: cp.async double buffering of K and V.
 *
 * Run: build/attn --stage 06d --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#include "fa2_road.cuh"

FA2_ROAD_STEP("06d", FA2_RECIPE_06D, fa2_q_in_registers_kernel, stage06d_run)
