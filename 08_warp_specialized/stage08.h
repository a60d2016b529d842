/*
 * stage08.h: stage 08 (warp specialization) and its road as the registry sees them. The kernel is in
 * warp_specialized.cuh, built by the recipe files warp_specialized.cu (stage 08) and step08*.cu (the
 * road) as sm_90a machine code only (warp_specialized.mk); the registry lists them as sm_90 only.
 */
#ifndef STAGE08_H
#define STAGE08_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* head dim 64, 128, 256; fp16 and bf16; writes LSE; no workspace; launches on a->stream. */
attn_status stage08_run(const attn_problem *p, const attn_args *a);
/* The road from stage 07 to stage 08 (fp16, head dim 64, 128, 256; step08*.cu): 08a 07 with producer
 * and consumer warpgroups and setmaxnreg, 08b + a 4-stage ring at D = 64, 08c + pairs of blocks at
 * D = 128 (non-causal), 08d + causal pairs; stage 08 adds O through the copy engine. */
attn_status stage08a_run(const attn_problem *p, const attn_args *a);
attn_status stage08b_run(const attn_problem *p, const attn_args *a);
attn_status stage08c_run(const attn_problem *p, const attn_args *a);
attn_status stage08d_run(const attn_problem *p, const attn_args *a);

/* The bytes stage 08 moves (traffic.c): at D = 128 pairs of blocks load each K/V tile once. */
attn_bytes stage08_bytes(const attn_problem *p, int gpus);
/* Road step 08c's: as stage 08 but for causal problems, which run single blocks there (08a and 08b
 * move stage 07's bytes, 08d stage 08's). */
attn_bytes stage08c_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
