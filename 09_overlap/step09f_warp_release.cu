/*
 * step09f_warp_release.cu: road step 09f, one empty-barrier arrival a warp on two-stage rings.
 *
 * What it adds to 09e: at D = 128 and 256 the ring has two stages, so the producer's refill waits for
 * the release, and 256 arrivals on one mbarrier are served one after another: each warp arrives once,
 * when all its lanes are done (release_per_warp()). D = 64's four stages keep one arrival a thread.
 * Next, 09g: O staged in a buffer of its own.
 *
 * Run: build/attn --stage 09f --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "09f"
#define ROAD_RUN stage09f_run
#define ROAD_BF16 0
#define ROAD_KERNEL ov_warp_release_kernel
#define OV_THREE_WG 1
#define OV_PIPELINE 1
#define OV_LAZY 1
#define OV_WIDE_TILES 1
#define OV_WARP_RELEASE 1
#define OV_OWN_STAGING 0
#define OV_NONCAUSAL_PAIRS 0
#define OV_PERSISTENT 0
#include "overlap.cuh"
