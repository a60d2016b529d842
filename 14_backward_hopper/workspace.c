/* workspace.c: stage 14's scratch and head dims, in C so that the registry can answer them in a build
 * without CUDA too. */
#include "backward_hopper.h"
#include "backward_workspace.h"

/* 64 and 128: at 256, K, V and the ring of Q and dO alone would take 256 KB of shared memory (an SM has
 * 227 KB for a block), and dK, dV 256 fp32 registers a thread */
int stage14_supports_dim(int64_t D) { return D == 64 || D == 128; }

/* the layout of kit/backward_workspace.h, with 14's 64-row query tiles */
size_t stage14_workspace_bytes(const attn_problem *p) { return bwd_workspace_bytes(p, STAGE14_BR); }
