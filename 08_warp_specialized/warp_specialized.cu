/*
 * 08_warp_specialized/warp_specialized.cu: stage 08, the recipe with every step of its road: the split
 * of roles (08a), the deeper ring (08b), pairs of blocks (08c), causal pairs (08d) and O through the
 * copy engine. The kernel and what each step adds are in warp_specialized.cuh.
 *
 * Run it:    build/attn --stage 08 --batch 4 --heads 32 --seq 4096 --dim 128 --check
 * Read it:   sh tools/stage_diff.sh --show 08      (the kernel with this recipe applied)
 */
#define ROAD_ID "08"
#define ROAD_RUN stage08_run
#define ROAD_BF16 1
#define ROAD_KERNEL warp_specialized_kernel
#define WS_DEEPER_RING 1
#define WS_PAIRS 1
#define WS_CAUSAL_PAIRS 1
#define WS_O_BY_TMA 1
#include "warp_specialized.cuh"
