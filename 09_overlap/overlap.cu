/*
 * 09_overlap/overlap.cu: stage 09, the recipe with every step of its road: ping-pong (09a), three
 * consumer warpgroups at D = 64 (09b), softmax under P V (09c), the lazy rescale (09d), wider key tiles
 * (09e), one release a warp (09f), O staged apart from Q (09g), pairs for non-causal problems only
 * (09h) and the persistent grid of work units. The kernel and what each step adds: overlap.cuh.
 *
 * Run it:    build/attn --stage 09 --batch 4 --heads 32 --seq 4096 --dim 128 --check
 * Read it:   sh tools/stage_diff.sh --show 09      (the kernel with this recipe applied)
 */
#define ROAD_ID "09"
#define ROAD_RUN stage09_run
#define ROAD_BF16 1
#define ROAD_KERNEL overlap_kernel
#define OV_THREE_WG 1
#define OV_PIPELINE 1
#define OV_LAZY 1
#define OV_WIDE_TILES 1
#define OV_WARP_RELEASE 1
#define OV_OWN_STAGING 1
#define OV_NONCAUSAL_PAIRS 1
#define OV_PERSISTENT 1
#include "overlap.cuh"
