/*
 * step08a_split.cu: road step 08a, producer and consumer warpgroups: stage 07 with its roles split.
 *
 * What it adds to stage 07: a producer warpgroup (one thread of it works) issues every TMA copy, Q
 * and then K_j, V_j into the ring; two consumer warpgroups only compute. Each ring slot gets an
 * "empty" mbarrier beside its "full" one: a consumer arrives there when it has read the buffer (K_j
 * right after S = Q K^T, V_j after O += P V), and the producer waits there before it refills it. So
 * the __syncthreads after every tile leaves the key loop, and each consumer runs ahead as far as the
 * ring allows. setmaxnreg makes the split pay: the producer gives back all but 24 registers a thread,
 * the consumers take them (240 at D = 128 and 256, 104 at D = 64 with two blocks an SM). What it
 * keeps from 07: the tiles, two blocks an SM at D = 64, a ring of 2 stages, O stored from registers.
 * Next, 08b: a deeper ring where shared memory allows.
 *
 * Run: build/attn --stage 08a --batch 4 --heads 32 --seq 4096 --dim 128 --check
 */
#define ROAD_ID "08a"
#define ROAD_RUN stage08a_run
#define ROAD_BF16 0
#define ROAD_KERNEL ws_split_kernel
#define WS_DEEPER_RING 0
#define WS_PAIRS 0
#define WS_CAUSAL_PAIRS 0
#define WS_O_BY_TMA 0
#include "warp_specialized.cuh"
