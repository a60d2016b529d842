/*
 * lib/warp_specialized_lib.c: stage 08 as a C library (build/libwarp_specialized.so: make shared-libs): warp_specialized_forward(),
 * with the signature and status codes of fa2_forward (lib/fa2.h); see lib/stage_lib.h.
 */
#ifdef ATTN_HAVE_CUDA
#include "08_warp_specialized/stage08.h"
#include "hopper_host.h"
#include "stage_lib.h"

ATTN_STAGE_LIBRARY(warp_specialized, stage08_run, hop_check_head_shape, hop_check_heads, hop_check_device)
#endif
