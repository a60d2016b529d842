/*
 * step09h_noncausal_pairs.cu: road step 09h, causal problems leave the pairs.
 *
 * What it changes in 09g: causal problems at D = 128 run single blocks again (stage 08's road step
 * 08c), so that every tile a pair visits is shared and each release tells both blocks: the `shared`
 * flags stage 08's causal pairs needed leave the key loop. This is what stage 09's persistent grid
 * keeps: its causal units put a long row block with a short one in one block, and two such units
 * would not visit the same tiles, so its pairs take non-causal row blocks only.
 * Next: stage 09 itself, the persistent grid of work units (overlap.cu).
 *
 * Run: build/attn --stage 09h --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "09h"
#define ROAD_RUN stage09h_run
#define ROAD_BF16 0
#define ROAD_KERNEL ov_noncausal_pairs_kernel
#define OV_THREE_WG 1
#define OV_PIPELINE 1
#define OV_LAZY 1
#define OV_WIDE_TILES 1
#define OV_WARP_RELEASE 1
#define OV_OWN_STAGING 1
#define OV_NONCAUSAL_PAIRS 1
#define OV_PERSISTENT 0
#include "overlap.cuh"
