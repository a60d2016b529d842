/*
 * stage09.h: stage 09 (overlap) and its road as the registry sees them. The kernel is in overlap.cuh,
 * built by the recipe files overlap.cu (stage 09) and step09*.cu (the road) as sm_90a machine code
 * only (overlap.mk); the registry lists them as sm_90 only.
 */
#ifndef STAGE09_H
#define STAGE09_H

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* head dim 64, 128, 256; fp16 and bf16; writes LSE; no workspace; launches on a->stream. */
attn_status stage09_run(const attn_problem *p, const attn_args *a);
/* The road from stage 08 to stage 09 (fp16, head dim 64, 128, 256; step09*.cu): 09a 08 + ping-pong,
 * 09b + 3 consumer warpgroups at D = 64, 09c + softmax under P V, 09d + lazy rescale, 09e + wider key
 * tiles (80 at D = 256, 192 at D = 128 per problem), 09f + one release a warp on 2-stage rings, 09g + O
 * staged apart from Q, 09h pairs for non-causal problems only; stage 09 adds the persistent grid. */
attn_status stage09a_run(const attn_problem *p, const attn_args *a);
attn_status stage09b_run(const attn_problem *p, const attn_args *a);
attn_status stage09c_run(const attn_problem *p, const attn_args *a);
attn_status stage09d_run(const attn_problem *p, const attn_args *a);
attn_status stage09e_run(const attn_problem *p, const attn_args *a);
attn_status stage09f_run(const attn_problem *p, const attn_args *a);
attn_status stage09g_run(const attn_problem *p, const attn_args *a);
attn_status stage09h_run(const attn_problem *p, const attn_args *a);

/* The bytes stage 09 moves (traffic.c): 192-row tiles at D = 64, pairs at D = 128 non-causal. */
attn_bytes stage09_bytes(const attn_problem *p, int gpus);
/* The road's (traffic.c): 09a moves stage 08's bytes, 09b-09d three-warpgroup tiles at D = 64 with
 * 08's pairs (causal too), 09e-09g the same with 80-key tiles at D = 256; 09h moves stage 09's. */
attn_bytes stage09b_bytes(const attn_problem *p, int gpus);
attn_bytes stage09e_bytes(const attn_problem *p, int gpus);
#ifdef __cplusplus
}
#endif
#endif
