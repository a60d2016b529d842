/* fa2_cpu.h: stage 06m, a plain-C model of stage 06's FlashAttention-2 algorithm (fa2_cpu.c). */
#ifndef ATTN_FA2_CPU_H
#define ATTN_FA2_CPU_H

#include "06_fa2_full/stage06.h" /* the head dims, stage 06's */
#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif
/* fp16 and bf16, head dims STAGE06_DIMS_TEXT (stage06_supports_dim); writes LSE. Host pointers. */
attn_status stage06m_run(const attn_problem *p, const attn_args *a);
#ifdef __cplusplus
}
#endif
#endif
