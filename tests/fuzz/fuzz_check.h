/*
 * fuzz_check.h: the contract every .npy fuzz target checks (make fuzz, tests/reliability.mk).
 * On success: a supported dtype, 0..NPY_MAX_DIMS dimensions, count = the product of the shape
 * (0 when a dimension is 0), and data. On failure: ATTN_EIO (ATTN_ENOMEM only when out of memory),
 * a one-line message that begins with "NAME: ", and an empty array. A broken promise aborts, which
 * libFuzzer reports as a crash with the input.
 */
#ifndef ATTN_FUZZ_CHECK_H
#define ATTN_FUZZ_CHECK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

static inline void require(int ok) {
    if (!ok) abort();
}

static inline size_t fuzz_itemsize(npy_dtype t) { return t == NPY_F32 ? 4u : 2u; }

/* Checks a result of npy_parse / npy_read against the contract; returns the data's size in bytes
 * on success. */
static inline size_t check_result(attn_status st, const npy_array *a, const char *name) {
    if (st != ATTN_OK) {
        require(st == ATTN_EIO || st == ATTN_ENOMEM);
        const char *m = attn_last_error();
        const size_t nl = strlen(name);
        require(m != NULL && strncmp(m, name, nl) == 0 && m[nl] == ':' && m[nl + 1] == ' ');
        require(strchr(m, '\n') == NULL);
        require(a->data == NULL && a->ndim == 0 && a->count == 0);
        return 0;
    }
    require(a->ndim >= 0 && a->ndim <= NPY_MAX_DIMS);
    require(a->dtype == NPY_F16 || a->dtype == NPY_F32);
    int zero = 0;
    for (int d = 0; d < a->ndim; d++) {
        require(a->shape[d] >= 0);
        zero |= a->shape[d] == 0;
    }
    int64_t count = 1;
    if (zero) count = 0;
    else
        for (int d = 0; d < a->ndim; d++) require(!__builtin_mul_overflow(count, a->shape[d], &count));
    require(count == a->count);
    require(a->data != NULL);
    return (size_t)count * fuzz_itemsize(a->dtype);
}

/* The message after "NAME: ". */
static inline const char *reason_of(const char *msg, const char *name) { return msg + strlen(name) + 2; }

#endif
