/*
 * step09a_pingpong.cu: road step 09a, ping-pong between the consumer warpgroups: stage 08 + a token.
 *
 * What it adds to stage 08: named barriers pass a token round the consumer warpgroups; a warpgroup
 * issues a GEMM (S = Q K^T, or O += P V) only while it holds the token and hands it on right after,
 * so the warpgroups take turns on the tensor cores and one's GEMM runs while the other exponentiates.
 * Stage 08's two warpgroups drifted into whatever phase they settled in; here the order is chosen.
 * Everything else is stage 08's: tiles, pairs (causal too), a block per row block, O staged in Q.
 * Next, 09b: three consumer warpgroups at D = 64.
 *
 * Run: build/attn --stage 09a --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "09a"
#define ROAD_RUN stage09a_run
#define ROAD_BF16 0
#define ROAD_KERNEL ov_pingpong_kernel
#define OV_THREE_WG 0
#define OV_PIPELINE 0
#define OV_LAZY 0
#define OV_WIDE_TILES 0
#define OV_WARP_RELEASE 0
#define OV_OWN_STAGING 0
#define OV_NONCAUSAL_PAIRS 0
#define OV_PERSISTENT 0
#include "overlap.cuh"
