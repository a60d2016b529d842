/* workspace.c: stage 12's scratch, in C so that the registry can size it in a build without CUDA
 * too. It grows as N, not N^2: at B=4, H=32, N=16384, D=128 it is 1.0 GiB (the dQ accumulator) and
 * 8 MiB (D), where stage 11's two N x N matrices would take 256 GiB. */
#include "backward_tiled.h"

size_t stage12_workspace_bytes(const attn_problem *p) {
    /* the fp32 dQ accumulator, B*H*N*D floats, then D, B*H*N floats */
    const double rows = (double)p->B * (double)p->H * (double)p->N;
    const double bytes = rows * (double)p->D * 4.0 + rows * 4.0;
    return bytes > 9.0e18 ? (size_t)-1 : (size_t)bytes; /* saturate: "needs more than exists" */
}
