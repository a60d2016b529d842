/*
 * fa2_switches.h: the compile-time switches of stage 06's road, shared by fa2.cu (which obeys them)
 * and road_main.c (which prints them). The defaults are the final kernel.
 */
#ifndef FA2_SWITCHES_H
#define FA2_SWITCHES_H

/* ---- the road: compile-time switches; the defaults are the final kernel -----------------------
 *   FA2_TILE_SET  0: Br = Bc = 64 on 4 warps for every D.  1: FA2's tiles per head dim (fa2.cu's table)
 *   FA2_SWIZZLE   0: plain row-major smem tiles.  1: XOR swizzle of 16-byte chunks
 *   FA2_PIPE      -1: per head dim (fa2.cu's table).  0: load, wait, compute.  1: FA2's K/V ping-pong (V_j loads
 *                 during S_j, K_{j-1} during P V_j).  2: K and V double-buffered (tile j-1 loads during
 *                 all of tile j)
 *   FA2_QREGS     0: Q fragments re-read by ldmatrix for every key tile.  1: held in registers for the
 *                 whole kernel where the register budget allows (fa2.cu's table)
 *   FA2_ROAD      1: instantiate only D = 64 and 128 (quicker builds of the road variants)
 */
#ifndef FA2_TILE_SET
#define FA2_TILE_SET 1
#endif
#ifndef FA2_SWIZZLE
#define FA2_SWIZZLE 1
#endif
#ifndef FA2_PIPE
#define FA2_PIPE -1
#endif
#ifndef FA2_QREGS
#define FA2_QREGS 1
#endif
#ifndef FA2_ROAD
#define FA2_ROAD 0
#endif

#endif
