/*
 * fuzz_npy_file.c: libFuzzer target for the file reader, npy_read (make fuzz).
 *
 * Each input is written to a file in a private temporary directory and read back with npy_read,
 * which reads a file in parts (prefix, header, size check, data) rather than as one image. Its
 * result must keep the contract of fuzz_check.h and agree with npy_parse on the same bytes: the
 * same status, the same reason after the name, and on success the same dtype, shape and data.
 */
#include <stdio.h>
#include <unistd.h>

#include "fuzz_check.h"

static char dir[64], path[128];

static void remove_dir(void) {
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%.40s/attn-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    require(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/in.npy", dir);
    atexit(remove_dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    require(f != NULL);
    require(fwrite(data, 1, size, f) == size);
    require(fclose(f) == 0);

    npy_array a, b;
    attn_status st = npy_read(path, &a);
    char reason[1024];
    snprintf(reason, sizeof reason, "%s", st == ATTN_OK ? "" : reason_of(attn_last_error(), path));
    size_t nbytes = check_result(st, &a, path);

    attn_status st2 = npy_parse(data, size, "mem.npy", &b);
    check_result(st2, &b, "mem.npy");
    require(st == st2);
    if (st == ATTN_OK) {
        require(a.dtype == b.dtype && a.ndim == b.ndim && a.count == b.count);
        for (int d = 0; d < a.ndim; d++) require(a.shape[d] == b.shape[d]);
        require(memcmp(a.data, b.data, nbytes) == 0);
    } else {
        require(strcmp(reason, reason_of(attn_last_error(), "mem.npy")) == 0);
    }
    npy_free(&a);
    npy_free(&b);
    return 0;
}
