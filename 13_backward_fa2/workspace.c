/* workspace.c: stage 13's scratch and head dims, in C so that the registry can answer them in a build
 * without CUDA too. */
#include "backward_fa2.h"
#include "backward_workspace.h"

int stage13_supports_dim(int64_t D) { return D == 32 || D == 64 || D == 96 || D == 128; }

/* the layout of kit/backward_workspace.h, with 13's 64-row query tiles */
size_t stage13_workspace_bytes(const attn_problem *p) { return bwd_workspace_bytes(p, STAGE13_BR); }
