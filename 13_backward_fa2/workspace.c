/* workspace.c: stage 13's scratch, head dims and limits, in C so that the registry and the library
 * can answer them in a build without CUDA too. */
#include "backward_fa2.h"

int stage13_supports_dim(int64_t D) { return D == 32 || D == 64 || D == 96 || D == 128; }

size_t stage13_workspace_bytes(const attn_problem *p) {
    const double rows = (double)p->B * (double)p->H * (double)p->N;
    const double tiles = (double)p->B * (double)p->H * (double)((p->N + STAGE13_BR - 1) / STAGE13_BR);
    /* dQ in fp32 (4 D bytes a row), D_i (4 bytes a row), a counter per query tile (4 bytes) */
    const double bytes = rows * 4.0 * (double)p->D + rows * 4.0 + tiles * 4.0;
    return bytes > 9.0e18 ? (size_t)-1 : (size_t)bytes;
}

/* One launch holds 2^31 - 1 blocks along x and 65535 along y; bwd_run splits past 2^31 - 1 into rows of
 * 2^30, so it takes up to 65535 * 2^30 blocks, one per (b, h, 128-key tile). */
#define STAGE13_MAX_BLOCKS ((int64_t)65535 << 30)

attn_status stage13_check_limits(const attn_problem *p) {
    if (!stage13_supports_dim(p->D))
        return attn_fail(ATTN_EUNSUPPORTED, "D: the backward (stage 13) takes head dims " STAGE13_DIMS_TEXT " (got %lld)",
                         (long long)p->D);
    if (p->N > ATTN_MAX_N) /* rows are indexed with 32-bit ints */
        return attn_fail(ATTN_EUNSUPPORTED, "N: the backward (stage 13) takes at most 2^24 rows (got %lld)",
                         (long long)p->N);
    const int64_t key_tiles = (p->N + STAGE13_BC - 1) / STAGE13_BC;
    if (p->B * p->H > STAGE13_MAX_BLOCKS / key_tiles)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "B*H: the backward (stage 13) takes at most %lld at N = %lld (one launch holds 65535 * "
                         "2^30 blocks of %d keys) (got %lld)",
                         (long long)(STAGE13_MAX_BLOCKS / key_tiles), (long long)p->N, STAGE13_BC,
                         (long long)(p->B * p->H));
    if (p->dtype != ATTN_F16 && p->dtype != ATTN_BF16)
        return attn_fail(ATTN_EUNSUPPORTED, "dtype: the backward (stage 13) takes fp16 and bf16 (got %d)",
                         (int)p->dtype);
    return ATTN_OK;
}
