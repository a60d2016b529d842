/*
 * step09c_softmax_under_pv.cu: road step 09c, the softmax of tile j under O += P_(j-1) V_(j-1).
 *
 * What it adds to 09b: the key loop becomes a software pipeline (prologue, steps, epilogue). A step
 * issues S_j and P_(j-1) V_(j-1) in one window of the ping-pong, rescales O by alpha_(j-1) while S_j
 * runs, waits for S_j only (wgmma.wait_group 1) and computes softmax j while P V is on the tensor
 * cores; P_j is packed only after P V has read the previous P (one P buffer: no register a wgmma in
 * flight reads is rewritten). At D = 64 it needs 09b's registers: on 08's 104 a consumer it spilled.
 * Next, 09d: the lazy rescale.
 *
 * Run: build/attn --stage 09c --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "09c"
#define ROAD_RUN stage09c_run
#define ROAD_BF16 0
#define ROAD_KERNEL ov_softmax_under_pv_kernel
#define OV_THREE_WG 1
#define OV_PIPELINE 1
#define OV_LAZY 0
#define OV_WIDE_TILES 0
#define OV_WARP_RELEASE 0
#define OV_OWN_STAGING 0
#define OV_NONCAUSAL_PAIRS 0
#define OV_PERSISTENT 0
#include "overlap.cuh"
