/*
 * step08b_deeper_ring.cu: road step 08b, a ring of 4 stages at D = 64.
 *
 * What it adds to 08a: at D = 64 the ring holds 4 K/V tiles instead of 2 (80 KB a block, two blocks
 * an SM): the producer, which no longer waits for the consumers' tile, can run up to three tiles
 * ahead, and a consumer finding its next tile landed does not wait at all. D = 128 and 256 keep 2
 * stages (160 and 192 KB); a third at D = 128 (224 KB) measured the same as two.
 * Next, 08c: pairs of blocks share each K/V tile.
 *
 * Run: build/attn --stage 08b --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "08b"
#define ROAD_RUN stage08b_run
#define ROAD_BF16 0
#define ROAD_KERNEL ws_deeper_ring_kernel
#define WS_DEEPER_RING 1
#define WS_PAIRS 0
#define WS_CAUSAL_PAIRS 0
#define WS_O_BY_TMA 0
#include "warp_specialized.cuh"
