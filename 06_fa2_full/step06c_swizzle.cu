/*
 * step06c_swizzle.cu: road step 06c, XOR-swizzled shared memory.
 *
 * What it adds to 06b: logical chunk c of tile row r is stored at physical chunk c ^ (r & 7), so the 8
 * row addresses of every ldmatrix phase fall in 8 different groups of 4 banks instead of the same group
 * (an 8-way conflict with 128- or 256-byte rows). The cp.async copies write with the same function, so
 * writer and reader agree; no padding (picture in fa2_smem.cuh; tests/test_fa2_blocks.c checks it).
 * Next, 06d: Q fragments held in registers.
 *
 * Run: build/attn --stage 06c --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#include "fa2_road.cuh"

FA2_ROAD_STEP("06c", FA2_RECIPE_06C, fa2_swizzled_kernel, stage06c_run)
