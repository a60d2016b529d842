/*
 * step08d_causal_pairs.cu: road step 08d, causal problems run in pairs too.
 *
 * What it adds to 08c: a causal pair's later row block sees one tile more (its diagonal), so the
 * blocks would fill their rings out of step. Both walk the shared tiles first, from the last down to
 * 0 (hop_pair_tile_at()), so that shared tile j lands in the same slot of both rings; the later block then
 * visits its own diagonal tile last, alone, loading both halves itself, while the earlier one leaves.
 * Next: stage 08 itself, which stores O through the copy engine (warp_specialized.cu).
 *
 * Run: build/attn --stage 08d --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "08d"
#define ROAD_RUN stage08d_run
#define ROAD_BF16 0
#define ROAD_KERNEL ws_causal_pairs_kernel
#define WS_DEEPER_RING 1
#define WS_PAIRS 1
#define WS_CAUSAL_PAIRS 1
#define WS_O_BY_TMA 0
#include "warp_specialized.cuh"
