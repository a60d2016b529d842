/*
 * step09g_own_staging.cu: road step 09g, O staged in a buffer of its own.
 *
 * What it adds to 09f: O / l leaves through the copy engine from a staging buffer beside the ring
 * where shared memory has room (D = 64: 24 KB, D = 128 with 128-key tiles: 32 KB), and from registers
 * where it has none (192-key tiles, D = 256); the Q tile is no longer written. That is what stage 09
 * needs: there the producer reloads Q for the next work item while this one's O is stored.
 * Next, 09h: pairs for non-causal problems only.
 *
 * Run: build/attn --stage 09g --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "09g"
#define ROAD_RUN stage09g_run
#define ROAD_BF16 0
#define ROAD_KERNEL ov_own_staging_kernel
#define OV_THREE_WG 1
#define OV_PIPELINE 1
#define OV_LAZY 1
#define OV_WIDE_TILES 1
#define OV_WARP_RELEASE 1
#define OV_OWN_STAGING 1
#define OV_NONCAUSAL_PAIRS 0
#define OV_PERSISTENT 0
#include "overlap.cuh"
