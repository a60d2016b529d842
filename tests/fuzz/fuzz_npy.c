/*
 * fuzz_npy.c: libFuzzer target for the .npy reader (make fuzz, see tests/reliability.mk).
 *
 * Feeds every input to npy_parse. Besides the sanitizers' checks (out-of-bounds reads, overflow,
 * leaks) it aborts when the result breaks the contract: on success a consistent shape and exactly
 * the input's data; on failure ATTN_EIO, a one-line message that begins with the name, and an
 * empty array.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

#define NAME "fuzz.npy"

static void require(int ok) {
    if (!ok) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npy_array a;
    attn_status st = npy_parse(data, size, NAME, &a);
    if (st == ATTN_OK) {
        require(a.ndim >= 0 && a.ndim <= NPY_MAX_DIMS);
        require(a.dtype == NPY_F16 || a.dtype == NPY_F32);
        int zero = 0;
        for (int d = 0; d < a.ndim; d++) {
            require(a.shape[d] >= 0);
            zero |= a.shape[d] == 0;
        }
        int64_t count = 1;
        if (zero) count = 0;
        else
            for (int d = 0; d < a.ndim; d++) require(!__builtin_mul_overflow(count, a.shape[d], &count));
        require(count == a.count);
        require(a.data != NULL);
        size_t nbytes = (size_t)count * (a.dtype == NPY_F32 ? 4u : 2u);
        /* the data is the input's last nbytes bytes */
        require(nbytes <= size && memcmp(a.data, data + size - nbytes, nbytes) == 0);
    } else {
        require(st == ATTN_EIO);
        const char *m = attn_last_error();
        require(m != NULL && strncmp(m, NAME ": ", sizeof NAME + 1) == 0 && strchr(m, '\n') == NULL);
        require(a.data == NULL && a.ndim == 0 && a.count == 0);
    }
    npy_free(&a);
    return 0;
}
