/*
 * outputs_apart.h: the outputs of a forward call (o, and lse when given) must share no byte with the
 * inputs (q, k, v) or with each other: o with q, k or v races (other blocks still read the keys and
 * values that this block's O overwrites), lse likewise. q, k and v may share memory (they are only
 * read: q == k is self-attention). Used by stage 06's fa2_forward (fa2_api.cu) and by the stage
 * libraries' NAME_forward (stage_lib.c), so that both refuse the same pairs in the same words.
 */
#ifndef ATTN_OUTPUTS_APART_H
#define ATTN_OUTPUTS_APART_H

#include <stddef.h>
#include <stdint.h>

#define ATTN_OVERLAP_WHY "an output must not share memory with an input or with the other output"

/* ptr = {q, k, v, o, lse}; q, k, v and o span `bytes`, lse `lse_bytes` (lse may be NULL: none).
 * The first pair that shares a byte ("o and k", o's pairs first), or NULL when none does. */
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
