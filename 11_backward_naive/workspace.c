/* workspace.c: stage 11's scratch, in C so that the registry can size it in a build without CUDA
 * too (the bench then still reports how much the two N x N matrices would take). */
#include "backward_naive.h"

size_t stage11_workspace_bytes(const attn_problem *p) {
    /* P and dS in fp32: 8 bytes per score, B*H*N*N of each; then D in fp32, 4 bytes per row. */
    const double bh = (double)p->B * (double)p->H, n = (double)p->N;
    const double bytes = bh * n * n * 8.0 + bh * n * 4.0;
    return bytes > 9.0e18 ? (size_t)-1 : (size_t)bytes; /* saturate: "needs more than exists" */
}
