/*
 * step08c_pairs.cu: road step 08c, pairs of blocks share each K/V tile (D = 128, non-causal).
 *
 * What it adds to 08b: once only producers load, two blocks can share the loading. At D = 128 the grid
 * runs as 2-block clusters on adjacent row blocks of one head; each producer loads half of every K/V
 * tile and TMA multicast writes that half into both blocks. A buffer's empty barrier counts the
 * consumer warps of both blocks (each warp arrives on its own block's and, through mapa, on the
 * other's), so neither half is refilled before both have read it; a block past N passes its tiles on,
 * and a block leaves once the other has released the last use of each buffer. L2 sends each K/V byte
 * once per pair. Causal problems keep single blocks here: the two row blocks of a pair visit unequal
 * tiles.
 * Next, 08d: causal problems in pairs too.
 *
 * Run: build/attn --stage 08c --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "08c"
#define ROAD_RUN stage08c_run
#define ROAD_BF16 0
#define ROAD_KERNEL ws_pairs_kernel
#define WS_DEEPER_RING 1
#define WS_PAIRS 1
#define WS_CAUSAL_PAIRS 0
#define WS_O_BY_TMA 0
#include "warp_specialized.cuh"
