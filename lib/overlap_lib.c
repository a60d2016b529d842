/*
 * lib/overlap_lib.c: stage 09 as a C library (build/liboverlap.so: make shared-libs): overlap_forward(),
 * with the signature and status codes of fa2_forward (lib/fa2.h); see lib/stage_lib.h.
 */
#ifdef ATTN_HAVE_CUDA
#include "09_overlap/stage09.h"
#include "hopper_host.h"
#include "stage_lib.h"

ATTN_STAGE_LIBRARY(overlap, stage09_run, hop_check_head_shape, hop_check_heads, hop_check_device)
#endif
