/*
 * forward_args.h: the argument rules that stage 06's fa2_forward (fa2_api.cu) and the stage libraries'
 * NAME_forward (stage_lib.c) share, so that both refuse the same arguments in the same words. Each
 * caller turns a refusal into its own status and message ("what: why (got value)") and keeps the
 * checks whose words name its own constants (the scale bound, the dtype names, its head dims).
 * ptr = {q, k, v, o, lse}, size = {B, H, N, D}.
 */
#ifndef ATTN_FORWARD_ARGS_H
#define ATTN_FORWARD_ARGS_H

#include <stddef.h>
#include <stdint.h>

/* One refused argument: its name, why, and the value given where there is one (has_got). */
typedef struct {
    const char *what, *why;
    long long got;
    int has_got;
} attn_refusal;

static inline int attn_refuse(attn_refusal *r, const char *what, const char *why, int has_got,
                              long long got) {
    r->what = what, r->why = why, r->has_got = has_got, r->got = got;
    return 1;
}

static const char *const attn_forward_arg_name[5] = {"q", "k", "v", "o", "lse"};

/* First: a NULL pointer (lse only where the caller requires it), a size below 1, causal other than 0
 * or 1. 1 with *r set at the first refusal, 0 when none. */
static inline int attn_refuse_pointers_and_sizes(const void *const ptr[5], const int64_t size[4], int causal,
                                                 int lse_required, attn_refusal *r) {
    static const char *const size_name[4] = {"B", "H", "N", "D"};
    for (int i = 0; i < (lse_required ? 5 : 4); i++)
        if (ptr[i] == NULL)
            return attn_refuse(r, attn_forward_arg_name[i], "must be a device pointer, not NULL", 0, 0);
    for (int i = 0; i < 4; i++)
        if (size[i] < 1) return attn_refuse(r, size_name[i], "must be at least 1", 1, (long long)size[i]);
    if (causal != 0 && causal != 1) return attn_refuse(r, "causal", "must be 0 or 1", 1, causal);
    return 0;
}

/* q, k, v and o 16-byte aligned (the kernels load 8 halves at a time), lse 4-byte (a NULL lse is). */
static inline int attn_refuse_misaligned(const void *const ptr[5], attn_refusal *r) {
    for (int i = 0; i < 5; i++)
        if ((uintptr_t)ptr[i] % (i < 4 ? 16u : 4u))
            return attn_refuse(r, attn_forward_arg_name[i],
                               i < 4 ? "must be 16-byte aligned" : "must be 4-byte aligned", 0, 0);
    return 0;
}

/* 1 when the bytes of B*H*N*D 16-bit elements cannot be counted in an int64_t (sizes already >= 1):
 * asked after the caller's head-dim and N limits, before its limit on B*H ("B*H*N*D: overflows 64 bits") */
static inline int attn_sizes_overflow(const int64_t size[4]) {
    const int64_t B = size[0], H = size[1], N = size[2], D = size[3];
    return B > INT64_MAX / H || B * H > INT64_MAX / N || B * H * N > INT64_MAX / 2 / D;
}

#define ATTN_OVERLAP_WHY "an output must not share memory with an input or with the other output"

/* The outputs (o, and lse when given) must share no byte with the inputs (q, k, v) or with each
 * other: o with q, k or v races (other blocks still read the keys and values that this block's O
 * overwrites), lse likewise. q, k and v may share memory (they are only read: q == k is
 * self-attention). q, k, v and o span `bytes`, lse `lse_bytes` (lse may be NULL: none). The first
 * pair that shares a byte ("o and k", o's pairs first), or NULL when none does. */
static inline const char *attn_overlapping_outputs(const void *const ptr[5], uint64_t bytes,
                                                   uint64_t lse_bytes) {
    static const char *const pair[2][4] = {{"o and q", "o and k", "o and v", NULL},
                                           {"lse and q", "lse and k", "lse and v", "lse and o"}};
    for (int out = 3; out < 5; out++) {
        if (ptr[out] == NULL) continue;
        const uintptr_t x = (uintptr_t)ptr[out], nx = out == 4 ? lse_bytes : bytes;
        for (int in = 0; in < out; in++) {
            const uintptr_t y = (uintptr_t)ptr[in];
            if (x < y + bytes && y < x + nx) return pair[out - 3][in];
        }
    }
    return NULL;
}

#endif
