/* workspace.c: stage 13's scratch and head dims, in C so that the registry can answer them in a build
 * without CUDA too. */
#include "backward_fa2.h"

int stage13_supports_dim(int64_t D) { return D == 32 || D == 64 || D == 96 || D == 128; }

size_t stage13_workspace_bytes(const attn_problem *p) {
    const double rows = (double)p->B * (double)p->H * (double)p->N;
    const double tiles = (double)p->B * (double)p->H * (double)((p->N + STAGE13_BR - 1) / STAGE13_BR);
    /* dQ in fp32 (4 D bytes a row), D_i (4 bytes a row), a counter per query tile (4 bytes) */
    const double bytes = rows * 4.0 * (double)p->D + rows * 4.0 + tiles * 4.0;
    return bytes > 9.0e18 ? (size_t)-1 : (size_t)bytes;
}
