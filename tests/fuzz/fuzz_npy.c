/*
 * fuzz_npy.c: libFuzzer target for the in-memory .npy parser (make fuzz, see tests/reliability.mk).
 *
 * Feeds every input to npy_parse. Besides the sanitizers' checks (out-of-bounds reads, overflow,
 * leaks) it aborts when the result breaks the contract of fuzz_check.h, or when a parsed array's
 * data is not exactly the input's last bytes.
 */
#include "fuzz_check.h"

#define NAME "fuzz.npy"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npy_array a;
    attn_status st = npy_parse(data, size, NAME, &a);
    size_t nbytes = check_result(st, &a, NAME);
    /* the data is the input's last nbytes bytes */
    if (st == ATTN_OK) require(nbytes <= size && memcmp(a.data, data + size - nbytes, nbytes) == 0);
    npy_free(&a);
    return 0;
}
