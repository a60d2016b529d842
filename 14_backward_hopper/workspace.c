/* workspace.c: stage 14's scratch, head dims and limits, in C so that the registry and the library can
 * answer them in a build without CUDA too. */
#include "backward_hopper.h"
#include "backward_workspace.h"

/* 64 and 128: at 256, K, V and the ring of Q and dO alone would take 256 KB of shared memory (an SM has
 * 227 KB for a block), and dK, dV 256 fp32 registers a thread */
int stage14_supports_dim(int64_t D) { return D == 64 || D == 128; }

/* the layout of kit/backward_workspace.h, with 14's 64-row query tiles */
size_t stage14_workspace_bytes(const attn_problem *p) { return bwd_workspace_bytes(p, STAGE14_BR); }

/* One launch holds 2^31 - 1 blocks along x and 65535 along y; launch() splits past 2^31 - 1 into rows of
 * 2^30, so it takes up to 65535 * 2^30 blocks, one per (b, h, 128-key tile). */
#define STAGE14_MAX_BLOCKS ((int64_t)65535 << 30)

attn_status stage14_check_limits(const attn_problem *p) {
    if (!stage14_supports_dim(p->D))
        return attn_fail(ATTN_EUNSUPPORTED,
                         "D: the backward (stage 14) takes head dims " STAGE14_DIMS_TEXT " (got %lld)",
                         (long long)p->D);
    if (p->N > ((int64_t)1 << 30)) /* the tensor maps' row coordinate */
        return attn_fail(ATTN_EUNSUPPORTED, "N: the backward (stage 14) takes at most 2^30 rows (got %lld)",
                         (long long)p->N);
    if (p->B * p->H > ((int64_t)1 << 31)) /* the tensor maps' head coordinate */
        return attn_fail(ATTN_EUNSUPPORTED,
                         "B*H: the backward (stage 14) takes at most 2^31 heads (got %lld)",
                         (long long)(p->B * p->H));
    const int64_t key_tiles = (p->N + STAGE14_BC - 1) / STAGE14_BC;
    if (p->B * p->H > STAGE14_MAX_BLOCKS / key_tiles)
        return attn_fail(
            ATTN_EUNSUPPORTED,
            "B*H: the backward (stage 14) takes at most %lld at N = %lld (one launch holds 65535 * "
            "2^30 blocks of %d keys) (got %lld)",
            (long long)(STAGE14_MAX_BLOCKS / key_tiles), (long long)p->N, STAGE14_BC,
            (long long)(p->B * p->H));
    if (p->dtype != ATTN_F16 && p->dtype != ATTN_BF16)
        return attn_fail(ATTN_EUNSUPPORTED, "dtype: the backward (stage 14) takes fp16 and bf16 (got %d)",
                         (int)p->dtype);
    return ATTN_OK;
}
