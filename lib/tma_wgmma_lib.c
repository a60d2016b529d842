/*
 * lib/tma_wgmma_lib.c: stage 07 as a C library (build/libtma_wgmma.so: make shared-libs): tma_wgmma_forward(),
 * with the signature and status codes of fa2_forward (lib/fa2.h); see lib/stage_lib.h.
 */
#ifdef ATTN_HAVE_CUDA
#include "07_tma_wgmma/stage07.h"
#include "hopper_host.h"
#include "stage_lib.h"

ATTN_STAGE_LIBRARY(tma_wgmma, stage07_run, hop_check_head_shape, hop_check_heads, hop_check_device)
#endif
