/*
 * fuzz_npy_roundtrip.c: libFuzzer target for npy_write -> npy_read (make fuzz).
 *
 * The input chooses a dtype, 0..8 dimensions (small, or huge beside a zero) and the data's bytes
 * (any bit patterns, NaNs included). The array is written with npy_write, or as a pair through
 * npy_out_create/write/commit (which also removes a stale file), into a private temporary
 * directory, then read back with npy_read and parsed from its bytes with npy_parse: both must give
 * back exactly what was written, the file must have NumPy's layout (version 1.0, the data at a
 * multiple of 64 bytes, nothing after it), and no temporary file may be left behind.
 *   byte 0: bit 0 dtype (f16, f32), bit 1 pair mode
 *   byte 1: ndim = byte % 9
 *   then one byte per dimension: byte % 7, or >= 0xf8: a dimension of 2^40 + byte (the
 *   array is then made empty by a zero last dimension)
 *   the rest: the data, repeated to fill the array (at most 4096 elements)
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "fuzz_check.h"

static char dir[64];

static void clear_dir(void) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

static void remove_dir(void) {
    clear_dir();
    rmdir(dir);
}

static int entries(void) {
    DIR *d = opendir(dir);
    require(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%.40s/attn-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    require(mkdtemp(dir) != NULL);
    atexit(remove_dir);
    return 0;
}

/* Reads path back both ways and compares with what was written. */
static void read_back(const char *path, npy_dtype t, int ndim, const int64_t *shape, int64_t count,
                      const void *values) {
    const size_t nbytes = (size_t)count * fuzz_itemsize(t);
    npy_array a, b;
    attn_status st = npy_read(path, &a);
    check_result(st, &a, path);
    require(st == ATTN_OK);
    require(a.dtype == t && a.ndim == ndim && a.count == count);
    for (int d = 0; d < ndim; d++) require(a.shape[d] == shape[d]);
    require(memcmp(a.data, values, nbytes) == 0);

    /* NumPy's layout, byte for byte where it matters */
    FILE *f = fopen(path, "rb");
    require(f != NULL);
    static unsigned char img[8192 + 4096 * 4];
    size_t len = fread(img, 1, sizeof img, f);
    fclose(f);
    require(len >= 10 && memcmp(img, "\x93NUMPY\x01\x00", 8) == 0);
    size_t hlen = (size_t)img[8] | (size_t)img[9] << 8;
    require((10 + hlen) % 64 == 0 && img[10 + hlen - 1] == '\n' && len == 10 + hlen + nbytes);
    st = npy_parse(img, len, "img.npy", &b);
    check_result(st, &b, "img.npy");
    require(st == ATTN_OK && b.count == count && memcmp(b.data, values, nbytes) == 0);
    npy_free(&a);
    npy_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const npy_dtype t = (data[0] & 1) ? NPY_F32 : NPY_F16;
    const int pair = (data[0] & 2) != 0;
    const int ndim = data[1] % 9;
    size_t at = 2;
    int64_t shape[NPY_MAX_DIMS];
    int huge = 0;
    for (int d = 0; d < ndim; d++) {
        const uint8_t v = at < size ? data[at++] : 1;
        if (v >= 0xf8) {
            shape[d] = ((int64_t)1 << 40) + v;
            huge = 1;
        } else {
            shape[d] = v % 7;
        }
    }
    if (huge) shape[ndim - 1] = 0;
    int64_t count = 1;
    int zero = 0;
    for (int d = 0; d < ndim; d++) zero |= shape[d] == 0;
    for (int d = 0; d < ndim && !zero; d++) count *= shape[d]; /* at most 6^8 */
    if (zero) count = 0;
    if (count > 4096) return 0;
    const size_t nbytes = (size_t)count * fuzz_itemsize(t);
    static unsigned char values[4096 * 4];
    for (size_t k = 0; k < nbytes; k++) values[k] = size > at ? data[at + k % (size - at)] : (unsigned char)k;

    char path[128];
    if (!pair) {
        snprintf(path, sizeof path, "%s/x.npy", dir);
        require(npy_write(path, t, ndim, shape, values) == ATTN_OK);
        read_back(path, t, ndim, shape, count, values);
        require(entries() == 1);
    } else {
        /* the pair: this array, and a 1-d array of the other dtype; x.npy is stale and must go */
        snprintf(path, sizeof path, "%s/x.npy", dir);
        FILE *f = fopen(path, "wb");
        require(f && fclose(f) == 0);
        int dirfd = open(dir, O_RDONLY | O_DIRECTORY);
        require(dirfd >= 0);
        npy_out o[2];
        const npy_dtype t2 = t == NPY_F32 ? NPY_F16 : NPY_F32;
        const int64_t n2 = (int64_t)(nbytes / fuzz_itemsize(t2));
        require(npy_out_create(&o[0], dirfd, dir, "o.npy") == ATTN_OK);
        require(npy_out_create(&o[1], dirfd, dir, "lse.npy") == ATTN_OK);
        require(entries() == 3);
        require(npy_out_write(&o[0], t, ndim, shape, values) == ATTN_OK);
        require(npy_out_write(&o[1], t2, 1, &n2, values) == ATTN_OK);
        static const char *const stale[1] = {"x.npy"};
        require(npy_out_commit(o, 2, stale, 1) == ATTN_OK);
        npy_out_discard(&o[0]);
        npy_out_discard(&o[1]);
        close(dirfd);
        require(entries() == 2);
        snprintf(path, sizeof path, "%s/o.npy", dir);
        read_back(path, t, ndim, shape, count, values);
        snprintf(path, sizeof path, "%s/lse.npy", dir);
        read_back(path, t2, 1, &n2, n2, values);
    }
    clear_dir();
    return 0;
}
