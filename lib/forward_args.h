/*
 * forward_args.h: the argument rules that the libraries share, so that they refuse the same arguments in
 * the same words: stage 06's fa2_forward (fa2_api.cu), the stage libraries' NAME_forward (stage_lib.c)
 * and the backward's backward_fa2_backward (backward_lib.c). Each caller turns a refusal into its own
 * status and message ("what: why (got value)") and keeps the checks whose words name its own constants
 * (the scale bound, the dtype names, its head dims). The rules take a list of pointers with their names,
 * so that the backward's ten pointers go through the same loops as the forward's five; the forward's
 * wrappers below fix ptr = {q, k, v, o, lse} and size = {B, H, N, D}.
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

/* A NULL among ptr[0 .. n-1], named by name[i]. 1 with *r set at the first refusal, 0 when none (as for
 * every check here). */
static inline int attn_refuse_null(const void *const ptr[], const char *const name[], int n,
                                   attn_refusal *r) {
    for (int i = 0; i < n; i++)
        if (ptr[i] == NULL) return attn_refuse(r, name[i], "must be a device pointer, not NULL", 0, 0);
    return 0;
}

/* B, H, N or D below 1 */
static inline int attn_refuse_sizes(const int64_t size[4], attn_refusal *r) {
    static const char *const size_name[4] = {"B", "H", "N", "D"};
    for (int i = 0; i < 4; i++)
        if (size[i] < 1) return attn_refuse(r, size_name[i], "must be at least 1", 1, (long long)size[i]);
    return 0;
}

/* A flag (causal; the backward's deterministic) other than 0 or 1 */
static inline int attn_refuse_flag(const char *what, int value, attn_refusal *r) {
    return value != 0 && value != 1 ? attn_refuse(r, what, "must be 0 or 1", 1, value) : 0;
}

/* The forward's first checks: a NULL pointer (lse only where the caller requires it), a size below 1,
 * causal other than 0 or 1. */
static inline int attn_refuse_pointers_and_sizes(const void *const ptr[5], const int64_t size[4], int causal,
                                                 int lse_required, attn_refusal *r) {
    return attn_refuse_null(ptr, attn_forward_arg_name, lse_required ? 5 : 4, r) ||
           attn_refuse_sizes(size, r) || attn_refuse_flag("causal", causal, r);
}

/* ptr[i] not on a multiple of align[i] bytes, 16 or 4 (a NULL pointer is aligned) */
static inline int attn_refuse_misaligned_list(const void *const ptr[], const char *const name[],
                                              const unsigned align[], int n, attn_refusal *r) {
    for (int i = 0; i < n; i++)
        if ((uintptr_t)ptr[i] % align[i])
            return attn_refuse(r, name[i],
                               align[i] == 16 ? "must be 16-byte aligned" : "must be 4-byte aligned", 0, 0);
    return 0;
}

/* q, k, v and o 16-byte aligned (the kernels load 8 halves at a time), lse 4-byte (a NULL lse is). */
static inline int attn_refuse_misaligned(const void *const ptr[5], attn_refusal *r) {
    static const unsigned align[5] = {16, 16, 16, 16, 4};
    return attn_refuse_misaligned_list(ptr, attn_forward_arg_name, align, 5, r);
}

/* 1 when the bytes of B*H*N*D 16-bit elements cannot be counted in an int64_t (sizes already >= 1):
 * asked after the caller's head-dim and N limits, before its limit on B*H ("B*H*N*D: overflows 64 bits") */
static inline int attn_sizes_overflow(const int64_t size[4]) {
    const int64_t B = size[0], H = size[1], N = size[2], D = size[3];
    return B > INT64_MAX / H || B * H > INT64_MAX / N || B * H * N > INT64_MAX / 2 / D;
}

#define ATTN_OVERLAP_WHY "an output must not share memory with an input or with the other output"

/* The first pair that shares a byte: each output ptr[first_out .. n-1] against every pointer before it
 * (the inputs ptr[0 .. first_out-1], which may share memory with each other since they are only read,
 * then the earlier outputs); ptr[i] spans bytes[i], a NULL pointer nothing. 1 with *out and *in set
 * (out > in), 0 when no pair shares a byte. */
static inline int attn_first_overlap(const void *const ptr[], const uint64_t bytes[], int first_out, int n,
                                     int *out, int *in) {
    for (int x = first_out; x < n; x++) {
        if (ptr[x] == NULL) continue;
        const uintptr_t a = (uintptr_t)ptr[x];
        for (int y = 0; y < x; y++) {
            const uintptr_t b = (uintptr_t)ptr[y];
            if (ptr[y] != NULL && a < b + bytes[y] && b < a + bytes[x]) return *out = x, *in = y, 1;
        }
    }
    return 0;
}

/* The forward's outputs (o, and lse when given) must share no byte with the inputs (q, k, v) or with
 * each other: o with q, k or v races (other blocks still read the keys and values that this block's O
 * overwrites), lse likewise. q, k and v may share memory (they are only read: q == k is
 * self-attention). q, k, v and o span `bytes`, lse `lse_bytes` (lse may be NULL: none). The first
 * pair that shares a byte ("o and k", o's pairs first), or NULL when none does. */
static inline const char *attn_overlapping_outputs(const void *const ptr[5], uint64_t bytes,
                                                   uint64_t lse_bytes) {
    static const char *const pair[2][4] = {{"o and q", "o and k", "o and v", NULL},
                                           {"lse and q", "lse and k", "lse and v", "lse and o"}};
    const uint64_t span[5] = {bytes, bytes, bytes, bytes, lse_bytes};
    int out = 0, in = 0;
    return attn_first_overlap(ptr, span, 3, 5, &out, &in) ? pair[out - 3][in] : NULL;
}

#endif
