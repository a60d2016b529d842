/*
 * step09b_three_consumers.cu: road step 09b, three consumer warpgroups at D = 64.
 *
 * What it adds to 09a: at D = 64 a tile's exponentials take as long as its two GEMMs, so two
 * warpgroups may be in their softmax while a third multiplies. D = 64 runs 192 x 128 tiles on three
 * consumer warpgroups (512 threads, one block an SM, 160 registers a consumer) instead of stage 08's
 * 128 x 64 on two, two blocks an SM; the ping-pong token goes round three.
 * Next, 09c: softmax j under P V of tile j-1, inside each warpgroup.
 *
 * Run: build/attn --stage 09b --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "09b"
#define ROAD_RUN stage09b_run
#define ROAD_BF16 0
#define ROAD_KERNEL ov_three_consumers_kernel
#define OV_THREE_WG 1
#define OV_PIPELINE 0
#define OV_LAZY 0
#define OV_WIDE_TILES 0
#define OV_WARP_RELEASE 0
#define OV_OWN_STAGING 0
#define OV_NONCAUSAL_PAIRS 0
#define OV_PERSISTENT 0
#include "overlap.cuh"
