/*
 * step09e_wide_tiles.cu: road step 09e, wider key tiles: 80 keys at D = 256, 192 at D = 128 per problem.
 *
 * What it adds to 09d: fewer, wider key tiles mean fewer barriers, row maxima and rescales per key.
 * D = 256 takes 80 keys a tile instead of 64 (two stages of 80-key K and V tiles and Q fill 224 of the
 * 227 KB). Non-causal problems at D = 128 take 192 keys when their padded key count is within 1/64 of
 * the 128-key tiling's (tile_keys(): N rounds up to a whole tile, and padding is computed like real
 * keys); the kernel takes Bc as a template parameter beside D.
 * Next, 09f: one release a warp where the ring has two stages.
 *
 * Run: build/attn --stage 09e --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "09e"
#define ROAD_RUN stage09e_run
#define ROAD_BF16 0
#define ROAD_KERNEL ov_wide_tiles_kernel
#define OV_THREE_WG 1
#define OV_PIPELINE 1
#define OV_LAZY 1
#define OV_WIDE_TILES 1
#define OV_WARP_RELEASE 0
#define OV_OWN_STAGING 0
#define OV_NONCAUSAL_PAIRS 0
#define OV_PERSISTENT 0
#include "overlap.cuh"
