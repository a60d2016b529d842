/*
 * step09d_lazy_rescale.cu: road step 09d, O rescaled only when a row's max moves by more than 2^8.
 *
 * What it adds to 09c (from FlashAttention-4): a row keeps its max m unless a tile raises it by more
 * than 8 in base-2 units; then alpha is exactly 1, and a warp whose 16 rows all kept theirs skips
 * O *= alpha, whose D / 2 multiplies a thread would take issue slots from the other warpgroup's
 * softmax. P stays at most 2^8; O / l and the LSE do not depend on which m was subtracted.
 * Next, 09e: wider key tiles at D = 128 and 256.
 *
 * Run: build/attn --stage 09d --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "09d"
#define ROAD_RUN stage09d_run
#define ROAD_BF16 0
#define ROAD_KERNEL ov_lazy_rescale_kernel
#define OV_THREE_WG 1
#define OV_PIPELINE 1
#define OV_LAZY 1
#define OV_WIDE_TILES 0
#define OV_WARP_RELEASE 0
#define OV_OWN_STAGING 0
#define OV_NONCAUSAL_PAIRS 0
#define OV_PERSISTENT 0
#include "overlap.cuh"
