/*
 * fuzz_npy_header.c: libFuzzer target for long headers, up to and past the 1 MiB limit (make fuzz).
 *
 * A mutating fuzzer seldom grows an input to a megabyte, so this target builds the image itself:
 *   byte 0:      bit 0: format 2.0 (else 1.0, which a header over 65535 bytes forces to 2.0);
 *                bit 1: 3.0 instead of 2.0
 *   bytes 1-2:   pad16; pad16 * 17 spaces (0 .. 1,114,095: past the 1 MiB limit) are inserted
 *   byte 3:      where: at byte (byte 3 * the text's length / 255) of the text
 *   the rest:    the header text
 * The header length field is the text's exact length, so the parser is always reached. Then:
 *   - a header over 1 MiB must be refused as too large;
 *   - a header that parses to a shape of n data bytes (n <= 4 MiB) is tried again with exactly n
 *     bytes of data, which must parse, and with n + 1, which must be refused as trailing garbage;
 * and every result keeps the contract of fuzz_check.h.
 */
#include <stdio.h>

#include "fuzz_check.h"

#define NAME "hdr.npy"
#define MAX_HEADER ((size_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned char *image(const uint8_t *data, size_t size, size_t ndata, size_t *len) {
    const size_t pad = 17 * (size_t)(data[1] | data[2] << 8), text = size - 4;
    const size_t hlen = text + pad, where = text * data[3] / 255;
    int major = (data[0] & 1) ? ((data[0] & 2) ? 3 : 2) : 1;
    if (major == 1 && hlen > 65535) major = 2;
    const size_t prefix = major == 1 ? 10 : 12;
    *len = prefix + hlen + ndata;
    unsigned char *b = malloc(*len);
    require(b != NULL);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major, b[7] = 0;
    for (size_t k = 0; k < prefix - 8; k++) b[8 + k] = (unsigned char)(hlen >> (8 * k));
    memcpy(b + prefix, data + 4, where);
    memset(b + prefix + where, ' ', pad);
    memcpy(b + prefix + where + pad, data + 4 + where, text - where);
    for (size_t k = 0; k < ndata; k++) b[prefix + hlen + k] = (unsigned char)(k * 131 + 7);
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    const size_t hlen = size - 4 + 17 * (size_t)(data[1] | data[2] << 8);
    size_t len;
    unsigned char *b = image(data, size, 0, &len);
    npy_array a;
    attn_status st = npy_parse(b, len, NAME, &a);
    check_result(st, &a, NAME);
    free(b);
    if (hlen > MAX_HEADER) {
        require(st != ATTN_OK && strstr(attn_last_error(), "is too large (limit 1048576)") != NULL);
        return 0;
    }
    size_t want = 0;
    if (st == ATTN_OK) {
        npy_free(&a); /* an empty array: nothing more to try */
        return 0;
    }
    if (sscanf(reason_of(attn_last_error(), NAME), "truncated: expected %zu bytes of data, found 0", &want) != 1 ||
        want > ((size_t)4 << 20))
        return 0;
    for (int extra = 0; extra <= 1; extra++) {
        b = image(data, size, want + (size_t)extra, &len);
        st = npy_parse(b, len, NAME, &a);
        size_t nbytes = check_result(st, &a, NAME);
        if (!extra) require(st == ATTN_OK && nbytes == want && memcmp(a.data, b + len - want, want) == 0);
        else require(st != ATTN_OK && strstr(attn_last_error(), "trailing garbage: 1 byte after the data"));
        npy_free(&a);
        free(b);
    }
    return 0;
}
