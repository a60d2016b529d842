/* workspace.c: stage 02's scratch, in C so that the registry can size it in a build without CUDA
 * too (the bench then still reports how much the N x N matrix would take). */
#include "naive_gpu.h"

size_t stage02_workspace_bytes(const attn_problem *p) {
    /* 6 bytes per score: S in fp32 (4) and P in fp16 (2), B*H*N*N of each. */
    const double n2 = (double)p->B * (double)p->H * (double)p->N * (double)p->N;
    const double bytes = n2 * 6.0;
    return bytes > 9.0e18 ? (size_t)-1 : (size_t)bytes; /* saturate: "needs more than exists" */
}
