/*
 * test_npy.c: the .npy reader and writer (suite/npy.c).
 *
 * Round trips through files, byte images built here the way NumPy writes them, and the malformed
 * files of tests/npy_cases/ (written by make_cases.py; expected.tsv names the text each message
 * must contain). Every bad file must fail with ATTN_EIO and a one-line message that begins with
 * the file's path, and must leave the output array empty.
 *
 * The failures a disk rarely gives on demand (a file that grows while it is read, an fsync that
 * fails) come from fsync and pread defined at the end of this file: the executable's definitions come
 * before libc's when the test binary is linked, so npy.c calls these. They pass every call through to
 * the system call unless a test here arms a fault; Criterion runs each test in a process of its own.
 * (Linux only: elsewhere those tests skip, saying so.)
 */
#define _GNU_SOURCE /* syscall(), for the pass-through */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "half.h"
#include "npy.h"

/* ---- helpers ------------------------------------------------------------------------------ */

/* tests/npy_cases, found next to this source file (or $ATTN_NPY_CASES). */
static const char *cases_dir(void) {
    static char dir[4096];
    const char *env = getenv("ATTN_NPY_CASES");
    if (env && *env) return env;
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    if (slash)
        snprintf(dir, sizeof dir, "%.*s/npy_cases", (int)(slash - file), file);
    else
        snprintf(dir, sizeof dir, "npy_cases");
    return dir;
}

typedef struct {
    char path[4096];
} tmpdir;

static void tmpdir_make(tmpdir *t) {
    snprintf(t->path, sizeof t->path, "/tmp/test_npy_XXXXXX");
    cr_assert_not_null(mkdtemp(t->path), "mkdtemp: %s", strerror(errno));
}

/* Removes the files in the directory (no subdirectories are made) and the directory. */
static void tmpdir_remove(tmpdir *t) {
    DIR *d = opendir(t->path);
    if (!d) return;
    struct dirent *e;
    char p[8192];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", t->path, e->d_name);
        remove(p);
    }
    closedir(d);
    rmdir(t->path);
}

static int dir_entries(const char *path) {
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* A .npy image the way NumPy lays it out: magic, version, header length (2 bytes for 1.0, 4 for
 * 2.0 and 3.0), the text padded with spaces and ended by '\n' so that the data starts at a multiple
 * of `align` (NumPy: 64, before 1.14: 16), then the data. The caller frees. */
static unsigned char *make_image(const char *text, int major, size_t align, const void *data,
                                 size_t nbytes, size_t *len) {
    size_t lenbytes = major == 1 ? 2 : 4, prefix = 8 + lenbytes, tl = strlen(text);
    size_t pad = align - (prefix + tl + 1) % align;
    size_t hlen = tl + pad + 1;
    *len = prefix + hlen + nbytes;
    unsigned char *b = malloc(*len ? *len : 1);
    cr_assert_not_null(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    for (size_t k = 0; k < lenbytes; k++) b[8 + k] = (unsigned char)(hlen >> (8 * k));
    memcpy(b + prefix, text, tl);
    memset(b + prefix + tl, ' ', pad);
    b[prefix + tl + pad] = '\n';
    if (nbytes) memcpy(b + prefix + hlen, data, nbytes);
    return b;
}

static void assert_one_line_from(const char *name) {
    const char *m = attn_last_error();
    cr_assert_not_null(m);
    cr_assert_eq(strncmp(m, name, strlen(name)), 0, "message does not begin with '%s': %s", name, m);
    cr_assert_eq(m[strlen(name)], ':', "message: %s", m);
    cr_assert_null(strchr(m, '\n'), "message is not one line: %s", m);
}

/* The product of the dims, 0 if any is 0 (the others may then be huge). */
static int64_t product(int ndim, const int64_t *shape) {
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) return 0;
    int64_t c = 1;
    for (int d = 0; d < ndim; d++) c *= shape[d];
    return c;
}

static void assert_empty(const npy_array *a) {
    cr_assert_null(a->data);
    cr_assert_eq(a->ndim, 0);
    cr_assert_eq(a->count, 0);
}

/* ---- round trips -------------------------------------------------------------------------- */

static void round_trip(const char *dir, npy_dtype t, int ndim, const int64_t *shape) {
    int64_t count = product(ndim, shape);
    size_t isz = t == NPY_F32 ? 4 : 2, nbytes = (size_t)count * isz;
    unsigned char *data = malloc(nbytes ? nbytes : 1);
    cr_assert_not_null(data);
    /* distinct values: i as fp16 (exact up to 2048) or as a float with a fraction */
    for (int64_t i = 0; i < count; i++) {
        if (t == NPY_F32) {
            float f = (float)i * 0.25f - 3.0f;
            memcpy(data + i * 4, &f, 4);
        } else {
            uint16_t h = attn_f2h((float)(i % 2048) - 7.0f);
            memcpy(data + i * 2, &h, 2);
        }
    }
    char path[8192];
    snprintf(path, sizeof path, "%s/rt_%d_%d.npy", dir, (int)t, ndim);
    cr_assert_eq(npy_write(path, t, ndim, shape, data), ATTN_OK, "%s", attn_last_error());

    /* NumPy's layout: version 1.0, data at a multiple of 64, header ended by '\n' */
    size_t len;
    unsigned char *img = slurp(path, &len);
    cr_assert(len >= 10 + nbytes);
    cr_assert_eq(memcmp(img, "\x93NUMPY\x01\x00", 8), 0);
    size_t hlen = (size_t)img[8] | (size_t)img[9] << 8;
    cr_assert_eq((10 + hlen) % 64, 0, "data offset %zu is not a multiple of 64", 10 + hlen);
    cr_assert_eq(len, 10 + hlen + nbytes);
    cr_assert_eq(img[10 + hlen - 1], '\n');
    free(img);

    npy_array a;
    cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(a.dtype, t);
    cr_assert_eq(a.ndim, ndim);
    for (int d = 0; d < ndim; d++) cr_assert_eq(a.shape[d], shape[d], "dim %d", d);
    cr_assert_eq(a.count, count);
    cr_assert_not_null(a.data);
    cr_assert_eq(memcmp(a.data, data, nbytes), 0, "data differs after the round trip");
    npy_free(&a);
    cr_assert_null(a.data);
    free(data);
}

Test(npy, round_trip_f16_and_f32_1_to_4_dims) {
    tmpdir t;
    tmpdir_make(&t);
    static const int64_t s1[] = {5}, s2[] = {3, 7}, s3[] = {2, 3, 4}, s4[] = {2, 3, 5, 64};
    const int64_t *shapes[] = {s1, s2, s3, s4};
    for (int nd = 1; nd <= 4; nd++) {
        round_trip(t.path, NPY_F16, nd, shapes[nd - 1]);
        round_trip(t.path, NPY_F32, nd, shapes[nd - 1]);
    }
    cr_assert_eq(dir_entries(t.path), 8, "a .tmp file was left behind");
    tmpdir_remove(&t);
}

Test(npy, round_trip_zero_size_and_scalar) {
    tmpdir t;
    tmpdir_make(&t);
    static const int64_t z2[] = {0, 3}, z4[] = {2, 3, 0, 64}, big_zero[] = {INT64_MAX, 0};
    round_trip(t.path, NPY_F16, 2, z2);
    round_trip(t.path, NPY_F32, 4, z4);
    round_trip(t.path, NPY_F16, 2, big_zero); /* a huge dim next to 0 is still 0 elements */
    round_trip(t.path, NPY_F32, 0, NULL);     /* shape (): one element */
    tmpdir_remove(&t);
}

/* Headers of many lengths, so that some land just before, on and after a 64-byte boundary. */
Test(npy, header_padding_for_many_lengths) {
    tmpdir t;
    tmpdir_make(&t);
    int64_t shape[8];
    for (int nd = 1; nd <= 8; nd++) {
        for (int w = 0; w < 4; w++) {
            /* the first dim's digits change NumPy's growth padding; long other dims with a final 0
             * make long headers of empty arrays */
            static const int64_t first[4] = {1, 12, 123457, 5};
            for (int d = 0; d < nd; d++) shape[d] = d == 0 ? first[w] : (w == 3 ? 123456789012 : 1);
            if (w == 3 && nd > 1) shape[nd - 1] = 0;
            round_trip(t.path, w % 2 ? NPY_F32 : NPY_F16, nd, shape);
        }
    }
    tmpdir_remove(&t);
}

/* The bytes NumPy (1.24 and later) writes for np.zeros((2, 3), np.float16) + values: the dict with
 * sorted keys and a trailing ", ", 21 - len("2") spaces of room to grow, padding to 128 bytes. */
Test(npy, writer_matches_numpy_bytes) {
    static const char dict[] = "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }";
    unsigned char want[128 + 12];
    memcpy(want, "\x93NUMPY\x01\x00\x76\x00", 10); /* header length 118 = 0x76 */
    memcpy(want + 10, dict, sizeof dict - 1);
    memset(want + 10 + sizeof dict - 1, ' ', 128 - 10 - (sizeof dict - 1));
    want[127] = '\n';
    uint16_t vals[6];
    for (int i = 0; i < 6; i++) vals[i] = attn_f2h((float)i - 2.5f);
    memcpy(want + 128, vals, 12);

    tmpdir t;
    tmpdir_make(&t);
    char path[8192];
    snprintf(path, sizeof path, "%s/x.npy", t.path);
    cr_assert_eq(npy_write(path, NPY_F16, 2, (int64_t[]){2, 3}, vals), ATTN_OK, "%s", attn_last_error());
    size_t len;
    unsigned char *got = slurp(path, &len);
    cr_assert_eq(len, sizeof want);
    cr_assert_eq(memcmp(got, want, sizeof want), 0, "header: %.118s", (const char *)got + 10);
    free(got);

    /* 1-d shapes are written as 1-tuples */
    snprintf(path, sizeof path, "%s/y.npy", t.path);
    float f[5] = {1, 2, 3, 4, 5};
    cr_assert_eq(npy_write(path, NPY_F32, 1, (int64_t[]){5}, f), ATTN_OK);
    got = slurp(path, &len);
    cr_assert_not_null(strstr((const char *)got + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }"));
    free(got);
    tmpdir_remove(&t);
}

/* The same for shapes whose header lengths put the 21-digit growth room across a 64-byte boundary:
 * the expected image is the dict text NumPy writes, padded by make_image (NumPy's rule). */
Test(npy, writer_matches_numpy_layout_for_many_shapes) {
    static const int64_t shapes[][8] = {
        {7},          {0, 1000000, 1000000, 1000000, 1000000, 1000000},
        {1, 2, 3, 4}, {123456789, 0, 1, 1, 1, 1, 1, 99999999999},
        {0},          {1000000000000, 0},
        {0, 1000000000000000000, 10000000, 10000000}, /* 10 + 118 bytes: on a 64-byte edge, padded 64 more */
    };
    static const int ndims[] = {1, 6, 4, 8, 1, 2, 4};
    tmpdir t;
    tmpdir_make(&t);
    for (size_t k = 0; k < sizeof ndims / sizeof ndims[0]; k++) {
        int nd = ndims[k];
        const int64_t *sh = shapes[k];
        char text[512], dims[300] = "";
        size_t dl = 0;
        for (int d = 0; d < nd; d++)
            dl += (size_t)snprintf(dims + dl, sizeof dims - dl, "%s%lld", d ? ", " : "", (long long)sh[d]);
        int n = snprintf(text, sizeof text, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s%s), }", dims,
                         nd == 1 ? "," : "");
        char first[32];
        int fl = snprintf(first, sizeof first, "%lld", (long long)sh[0]);
        for (int g = fl; g < 21; g++) text[n++] = ' ';
        text[n] = '\0';
        int64_t count = product(nd, sh);
        float *data = calloc((size_t)count + 1, sizeof(float));
        cr_assert_not_null(data);
        for (int64_t i = 0; i < count; i++) data[i] = (float)i + 0.5f;
        size_t wl;
        unsigned char *want = make_image(text, 1, 64, data, (size_t)count * 4, &wl);

        char path[8192];
        snprintf(path, sizeof path, "%s/s%zu.npy", t.path, k);
        cr_assert_eq(npy_write(path, NPY_F32, nd, sh, data), ATTN_OK, "%s", attn_last_error());
        size_t gl;
        unsigned char *got = slurp(path, &gl);
        cr_assert_eq(gl, wl, "shape %zu: %zu bytes, NumPy writes %zu", k, gl, wl);
        cr_assert_eq(memcmp(got, want, wl), 0, "shape %zu: header\n got  %.*s\n want %.*s", k, (int)(wl - (size_t)count * 4 - 10),
                     (const char *)got + 10, (int)(wl - (size_t)count * 4 - 10), (const char *)want + 10);
        free(got);
        free(want);
        free(data);
    }
    tmpdir_remove(&t);
}

Test(npy, write_replaces_an_existing_file) {
    tmpdir t;
    tmpdir_make(&t);
    char path[8192];
    snprintf(path, sizeof path, "%s/q.npy", t.path);
    uint16_t a[4] = {1, 2, 3, 4}, b[2] = {9, 8};
    cr_assert_eq(npy_write(path, NPY_F16, 1, (int64_t[]){4}, a), ATTN_OK);
    cr_assert_eq(npy_write(path, NPY_F16, 2, (int64_t[]){1, 2}, b), ATTN_OK);
    npy_array r;
    cr_assert_eq(npy_read(path, &r), ATTN_OK);
    cr_assert_eq(r.ndim, 2);
    cr_assert_eq(r.count, 2);
    cr_assert_eq(((uint16_t *)r.data)[0], 9);
    cr_assert_eq(((uint16_t *)r.data)[1], 8);
    npy_free(&r);
    cr_assert_eq(dir_entries(t.path), 1);
    tmpdir_remove(&t);
}

/* ---- images built here -------------------------------------------------------------------- */

Test(npy, parses_numpy_style_f16_image) {
    uint16_t vals[6];
    for (int i = 0; i < 6; i++) vals[i] = attn_f2h(0.5f * (float)i - 1.0f);
    size_t len;
    unsigned char *img = make_image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }"
                                    "                    ",
                                    1, 64, vals, sizeof vals, &len);
    cr_assert_eq(len, 128 + 12);
    npy_array a;
    cr_assert_eq(npy_parse(img, len, "q.npy", &a), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(a.dtype, NPY_F16);
    cr_assert_eq(a.ndim, 2);
    cr_assert_eq(a.shape[0], 2);
    cr_assert_eq(a.shape[1], 3);
    cr_assert_eq(a.count, 6);
    for (int i = 0; i < 6; i++)
        cr_assert_float_eq(attn_h2f(((uint16_t *)a.data)[i]), 0.5f * (float)i - 1.0f, 0.0f, "element %d", i);
    npy_free(&a);
    free(img);
}

Test(npy, parses_versions_2_and_3) {
    float vals[3] = {1.5f, -2.0f, 1e-8f};
    for (int major = 2; major <= 3; major++) {
        size_t len;
        unsigned char *img = make_image("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", major,
                                        64, vals, sizeof vals, &len);
        cr_assert_eq(img[8 + 4 + 0x0], '{', "4-byte length field expected");
        npy_array a;
        cr_assert_eq(npy_parse(img, len, "v.npy", &a), ATTN_OK, "version %d.0: %s", major, attn_last_error());
        cr_assert_eq(a.dtype, NPY_F32);
        cr_assert_eq(a.ndim, 1);
        cr_assert_eq(a.shape[0], 3);
        cr_assert_eq(memcmp(a.data, vals, sizeof vals), 0);
        npy_free(&a);
        /* the same image read as if its length field had 2 bytes is garbage */
        img[6] = 1;
        cr_assert_eq(npy_parse(img, len, "v.npy", &a), ATTN_EIO);
        free(img);
    }
}

Test(npy, accepts_python_literal_variants) {
    static const char *ok[] = {
        "{\"descr\": \"<f2\", \"fortran_order\": False, \"shape\": (2, 2)}",
        "{'shape': (2, 2), 'fortran_order': False, 'descr': '<f2'}",
        "{ 'descr' : '=f2' ,\n 'fortran_order':False,'shape':(2,2,),}",
        "{'descr': '<f2', 'fortran_order': False, 'shape': (2L, 2L), }", /* Python 2 NumPy */
    };
    uint16_t vals[4] = {0x3c00, 0x4000, 0x4200, 0x4400};
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        size_t len;
        unsigned char *img = make_image(ok[k], 1, 16, vals, sizeof vals, &len);
        npy_array a;
        cr_assert_eq(npy_parse(img, len, "lit.npy", &a), ATTN_OK, "%s -> %s", ok[k], attn_last_error());
        cr_assert_eq(a.ndim, 2);
        cr_assert_eq(a.count, 4);
        cr_assert_eq(((uint16_t *)a.data)[3], 0x4400);
        npy_free(&a);
        free(img);
    }
}

Test(npy, rejects_in_memory_with_specific_messages) {
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", "unsupported dtype '<f8'"},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", "big-endian dtype '>f4'"},
        {"{'descr': '<f2', 'fortran_order': True, 'shape': (2, 2), }",
         "fortran order is not supported; save with np.ascontiguousarray"},
        {"{'descr': '<f2', 'fortran_order': Falsey, 'shape': (2, 2), }", "True or False"},
        {"{'descr': '<f2', 'shape': (2, 2), }", "missing key 'fortran_order'"},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), 'shape': (2, 2)}", "duplicate key 'shape'"},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2)", "unterminated dict"},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2)} }", "after the dict"},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (2, +2)}", "malformed header"},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (2,, 2)}", "malformed header"},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (2, 9223372036854775808)}", "overflows"},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (3037000500, 3037000500)}", "shape is too large"},
        {"{'descr': 'f2', 'fortran_order': False, 'shape': (2, 2)}", "unsupported dtype 'f2'"},
        {"{'descr': '<f2\\n', 'fortran_order': False, 'shape': (2, 2)}", "escapes"},
        {"{,}", "malformed header"},
        {"{'descr': '<f2\x7f', 'fortran_order': False, 'shape': (2, 2)}", "control byte 0x7f at byte 24"},
    };
    uint16_t vals[4] = {0};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        size_t len;
        unsigned char *img = make_image(bad[k].text, 1, 64, vals, sizeof vals, &len);
        npy_array a;
        attn_clear_error();
        cr_assert_eq(npy_parse(img, len, "mem.npy", &a), ATTN_EIO, "accepted: %s", bad[k].text);
        assert_one_line_from("mem.npy");
        cr_assert_not_null(strstr(attn_last_error(), bad[k].want), "for %s\n want '%s'\n got  '%s'", bad[k].text,
                           bad[k].want, attn_last_error());
        assert_empty(&a);
        npy_free(&a); /* harmless on a failed parse */
        free(img);
    }
}

Test(npy, data_length_must_be_exact) {
    uint16_t vals[7] = {1, 2, 3, 4, 5, 6, 7};
    const char *text = "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }";
    size_t len;
    unsigned char *img = make_image(text, 1, 64, vals, sizeof vals, &len); /* 14 bytes of data */
    npy_array a;
    cr_assert_eq(npy_parse(img, len, "d.npy", &a), ATTN_EIO);
    cr_assert_not_null(strstr(attn_last_error(), "trailing garbage: 2 bytes after the data"), "%s", attn_last_error());
    cr_assert_eq(npy_parse(img, len - 1, "d.npy", &a), ATTN_EIO, "one byte too many accepted");
    cr_assert_not_null(strstr(attn_last_error(), "trailing garbage: 1 byte after the data"), "%s", attn_last_error());
    cr_assert_eq(npy_parse(img, len - 2, "d.npy", &a), ATTN_OK, "%s", attn_last_error());
    npy_free(&a);
    cr_assert_eq(npy_parse(img, len - 3, "d.npy", &a), ATTN_EIO);
    cr_assert_not_null(strstr(attn_last_error(), "truncated: expected 12 bytes of data, found 11"), "%s",
                       attn_last_error());
    free(img);
}

/* Every proper prefix of a valid image fails cleanly; only the whole image parses. */
Test(npy, every_truncation_fails) {
    float vals[4] = {1, 2, 3, 4};
    size_t len;
    unsigned char *img = make_image("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 1, 64, vals,
                                    sizeof vals, &len);
    for (size_t n = 0; n < len; n++) {
        /* a copy of exactly n bytes, so that ASan sees any read past the end */
        unsigned char *cut = malloc(n ? n : 1);
        memcpy(cut, img, n);
        npy_array a;
        cr_assert_eq(npy_parse(n ? cut : NULL, n, "cut.npy", &a), ATTN_EIO, "prefix of %zu bytes accepted", n);
        assert_one_line_from("cut.npy");
        assert_empty(&a);
        free(cut);
    }
    npy_array a;
    cr_assert_eq(npy_parse(img, len, "cut.npy", &a), ATTN_OK);
    npy_free(&a);
    free(img);
}

/* Every single-byte change of a valid image either parses to a consistent array or fails cleanly. */
Test(npy, byte_flips_never_crash) {
    uint16_t vals[6] = {1, 2, 3, 4, 5, 6};
    size_t len;
    unsigned char *img = make_image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 1, 64, vals,
                                    sizeof vals, &len);
    static const unsigned char subst[] = {0x00, 0xff, '\'', '"', ',', ')', '}', '(', '9', ' ', 0x80};
    for (size_t i = 0; i < len; i++) {
        for (size_t s = 0; s < sizeof subst; s++) {
            unsigned char *m = malloc(len);
            memcpy(m, img, len);
            m[i] = subst[s];
            npy_array a;
            attn_status st = npy_parse(m, len, "flip.npy", &a);
            cr_assert(st == ATTN_OK || st == ATTN_EIO);
            if (st == ATTN_OK) {
                cr_assert_eq(product(a.ndim, a.shape), a.count);
                cr_assert_not_null(a.data);
            } else {
                assert_one_line_from("flip.npy");
                assert_empty(&a);
            }
            npy_free(&a);
            free(m);
        }
    }
    free(img);
}

/* ---- files on disk ------------------------------------------------------------------------ */

Test(npy, read_missing_file_names_path_and_reason) {
    tmpdir t;
    tmpdir_make(&t);
    char path[8192];
    snprintf(path, sizeof path, "%s/q.npy", t.path);
    npy_array a;
    cr_assert_eq(npy_read(path, &a), ATTN_EIO);
    char want[8300];
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", path);
    cr_assert_str_eq(attn_last_error(), want);
    assert_empty(&a);
    /* a directory is not a .npy file */
    cr_assert_eq(npy_read(t.path, &a), ATTN_EIO);
    assert_one_line_from(t.path);
    cr_assert_not_null(strstr(attn_last_error(), "not a regular file"), "%s", attn_last_error());
    tmpdir_remove(&t);
}

Test(npy, write_errors_leave_nothing_behind) {
    tmpdir t;
    tmpdir_make(&t);
    uint16_t v[2] = {1, 2};
    char path[8192];
    /* into a directory that does not exist */
    snprintf(path, sizeof path, "%s/no/such/dir/o.npy", t.path);
    cr_assert_eq(npy_write(path, NPY_F16, 1, (int64_t[]){2}, v), ATTN_EIO);
    assert_one_line_from(path);
    cr_assert_not_null(strstr(attn_last_error(), "No such file or directory"), "%s", attn_last_error());
    /* onto a directory: the write succeeds, the rename fails, the .tmp file must be gone */
    snprintf(path, sizeof path, "%s/adir", t.path);
    cr_assert_eq(mkdir(path, 0700), 0);
    char inner[8300];
    snprintf(inner, sizeof inner, "%s/keep", path);
    spit(inner, "x", 1); /* a non-empty directory cannot be replaced by rename() */
    cr_assert_eq(npy_write(path, NPY_F16, 1, (int64_t[]){2}, v), ATTN_EIO);
    assert_one_line_from(path);
    cr_assert_not_null(strstr(attn_last_error(), "rename"), "%s", attn_last_error());
    cr_assert_eq(dir_entries(t.path), 1, "the .tmp file was left behind");
    remove(inner);
    rmdir(path);
    /* a failing fwrite/fclose: a file size limit of 100 bytes (EFBIG instead of SIGXFSZ) */
    {
        struct rlimit old, lim;
        cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
        lim = old;
        lim.rlim_cur = 100;
        signal(SIGXFSZ, SIG_IGN);
        cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
        static uint16_t big[4096];
        snprintf(path, sizeof path, "%s/big.npy", t.path);
        attn_status st = npy_write(path, NPY_F16, 1, (int64_t[]){4096}, big);
        cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
        cr_assert_eq(st, ATTN_EIO);
        assert_one_line_from(path);
        cr_assert_not_null(strstr(attn_last_error(), "cannot"), "%s", attn_last_error());
        cr_assert_eq(dir_entries(t.path), 0, "a failed write left a file");
    }
    /* bad arguments */
    snprintf(path, sizeof path, "%s/bad.npy", t.path);
    cr_assert_eq(npy_write(path, NPY_F16, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, v), ATTN_EIO);
    cr_assert_not_null(strstr(attn_last_error(), "ndim 9"), "%s", attn_last_error());
    cr_assert_eq(npy_write(path, NPY_F16, 2, (int64_t[]){2, -1}, v), ATTN_EIO);
    cr_assert_not_null(strstr(attn_last_error(), "negative dimension"), "%s", attn_last_error());
    cr_assert_eq(npy_write(path, NPY_F32, 2, (int64_t[]){INT64_MAX, 2}, v), ATTN_EIO);
    cr_assert_eq(npy_write(path, NPY_F16, 1, (int64_t[]){2}, NULL), ATTN_EIO);
    cr_assert_eq(npy_write(path, (npy_dtype)7, 1, (int64_t[]){2}, v), ATTN_EIO);
    cr_assert_eq(dir_entries(t.path), 0, "a failed write left a file");
    tmpdir_remove(&t);
}

/* ---- the regression corpus tests/npy_cases/ ----------------------------------------------- */

typedef struct {
    char file[256];
    char want[256];
    int seen;
} expectation;

static int load_expected(expectation *ex, int cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/expected.tsv", cases_dir());
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s (run from the repository root, or set ATTN_NPY_CASES)", path);
    char line[600];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char *tab = strchr(line, '\t');
        cr_assert_not_null(tab, "expected.tsv: no tab in '%s'", line);
        *tab = '\0';
        char *want = tab + 1;
        want[strcspn(want, "\r\n")] = '\0';
        cr_assert(n < cap);
        snprintf(ex[n].file, sizeof ex[n].file, "%.255s", line);
        snprintf(ex[n].want, sizeof ex[n].want, "%.255s", want);
        ex[n].seen = 0;
        n++;
    }
    fclose(f);
    return n;
}

static int has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
static int has_suffix(const char *s, const char *x) {
    size_t n = strlen(s), m = strlen(x);
    return n >= m && strcmp(s + n - m, x) == 0;
}

Test(npy_cases, every_bad_file_fails_with_its_message) {
    static expectation ex[512];
    int nex = load_expected(ex, 512);
    cr_assert_geq(nex, 40, "expected.tsv lists only %d cases", nex);
    DIR *d = opendir(cases_dir());
    cr_assert_not_null(d, "cannot open %s", cases_dir());
    struct dirent *e;
    int nbad = 0;
    while ((e = readdir(d)) != NULL) {
        if (!has_prefix(e->d_name, "bad_")) continue;
        char path[4500];
        snprintf(path, sizeof path, "%s/%s", cases_dir(), e->d_name);
        int k = 0;
        while (k < nex && strcmp(ex[k].file, e->d_name) != 0) k++;
        cr_assert_lt(k, nex, "%s is not listed in expected.tsv", e->d_name);
        ex[k].seen = 1;
        npy_array a;
        attn_clear_error();
        attn_status st = npy_read(path, &a);
        cr_assert_eq(st, ATTN_EIO, "%s: status %d, message '%s'", e->d_name, (int)st, attn_last_error());
        assert_one_line_from(path);
        cr_assert_not_null(strstr(attn_last_error(), ex[k].want), "%s:\n want '%s'\n got  '%s'", e->d_name,
                           ex[k].want, attn_last_error());
        assert_empty(&a);

        /* the same bytes through npy_parse give the same message under another name */
        size_t len;
        unsigned char *img = slurp(path, &len);
        cr_assert_eq(npy_parse(len ? img : NULL, len, e->d_name, &a), ATTN_EIO);
        assert_one_line_from(e->d_name);
        cr_assert_not_null(strstr(attn_last_error(), ex[k].want), "%s", attn_last_error());
        free(img);
        nbad++;
    }
    closedir(d);
    for (int k = 0; k < nex; k++) cr_assert(ex[k].seen, "%s is listed in expected.tsv but missing", ex[k].file);
    cr_assert_geq(nbad, 40);
}

Test(npy_cases, every_valid_file_loads) {
    DIR *d = opendir(cases_dir());
    cr_assert_not_null(d, "cannot open %s", cases_dir());
    struct dirent *e;
    int nvalid = 0;
    while ((e = readdir(d)) != NULL) {
        if (!has_prefix(e->d_name, "valid_") || !has_suffix(e->d_name, ".npy")) continue;
        char path[4500];
        snprintf(path, sizeof path, "%s/%s", cases_dir(), e->d_name);
        npy_array a;
        cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
        cr_assert_eq(product(a.ndim, a.shape), a.count);
        cr_assert_not_null(a.data);
        cr_assert_eq(a.dtype, strstr(e->d_name, "f32") ? NPY_F32 : NPY_F16, "%s", e->d_name);
        npy_free(&a);
        nvalid++;
    }
    closedir(d);
    cr_assert_geq(nvalid, 8);
}

/* Values of two of them, as make_cases.py wrote them. */
Test(npy_cases, valid_file_values) {
    char path[4500];
    npy_array a;
    snprintf(path, sizeof path, "%s/valid_f16_2x3_numpy.npy", cases_dir());
    cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
    static const float want16[6] = {0.5f, -1.0f, 2.0f, 3.25f, -0.125f, 65504.0f};
    cr_assert_eq(a.ndim, 2);
    cr_assert_eq(a.shape[0], 2);
    cr_assert_eq(a.shape[1], 3);
    for (int i = 0; i < 6; i++) cr_assert_float_eq(attn_h2f(((uint16_t *)a.data)[i]), want16[i], 0.0f);
    npy_free(&a);

    snprintf(path, sizeof path, "%s/valid_f32_4_old_numpy_align16.npy", cases_dir());
    cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
    static const float want32[4] = {1.0f, -2.0f, 3.5f, 1e-3f};
    cr_assert_eq(a.ndim, 1);
    cr_assert_eq(a.shape[0], 4);
    cr_assert_eq(memcmp(a.data, want32, sizeof want32), 0);
    npy_free(&a);

    snprintf(path, sizeof path, "%s/valid_f32_scalar.npy", cases_dir());
    cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(a.ndim, 0);
    cr_assert_eq(a.count, 1);
    cr_assert_float_eq(((float *)a.data)[0], 42.0f, 0.0f);
    npy_free(&a);
}

Test(npy, free_is_safe_on_null_and_twice) {
    npy_free(NULL);
    npy_array a;
    memset(&a, 0, sizeof a);
    npy_free(&a);
    npy_free(&a);
    cr_assert_null(a.data);
}

/* ---- files that are not what they seem ------------------------------------------------------ */

/* A FIFO where q.npy should be: refused at once (opening it to read used to wait for a writer
 * forever). The alarm kills the test, and so fails it, if it blocks. (Criterion's .timeout is not
 * used: two tests with one, running at once, leak 48 bytes inside Criterion under LSan.) */
Test(npy, read_refuses_a_fifo_without_blocking) {
    alarm(20);
    tmpdir t;
    tmpdir_make(&t);
    char path[8192];
    snprintf(path, sizeof path, "%s/q.npy", t.path);
    cr_assert_eq(mkfifo(path, 0600), 0, "mkfifo: %s", strerror(errno));
    npy_array a;
    cr_assert_eq(npy_read(path, &a), ATTN_EIO);
    assert_one_line_from(path);
    cr_assert_not_null(strstr(attn_last_error(), "not a regular file (a FIFO)"), "%s", attn_last_error());
    assert_empty(&a);
    /* a character device too, read without blocking */
    cr_assert_eq(npy_read("/dev/zero", &a), ATTN_EIO);
    cr_assert_not_null(strstr(attn_last_error(), "not a regular file (a character device)"), "%s", attn_last_error());
    alarm(0);
    tmpdir_remove(&t);
}

static long max_rss_kib(void) {
    struct rusage ru;
    cr_assert_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_maxrss;
}

/* A 512 MiB file whose header declares 256 values is refused from its header and size alone: the
 * reader used to load the whole file first (512 MiB of memory, most of a second). The file is
 * sparse, so it costs no disk; the peak resident memory of this process shows what was read. */
Test(npy, read_checks_the_size_before_allocating) {
    tmpdir t;
    tmpdir_make(&t);
    char path[8192];
    snprintf(path, sizeof path, "%s/big.npy", t.path);
    uint16_t vals[256] = {0};
    size_t len;
    unsigned char *img = make_image("{'descr': '<f2', 'fortran_order': False, 'shape': (256,), }", 1, 64, vals,
                                    sizeof vals, &len);
    spit(path, img, len);
    free(img);
    const off_t big = (off_t)512 << 20;
    cr_assert_eq(truncate(path, big), 0, "truncate: %s", strerror(errno));
    const long before = max_rss_kib();
    npy_array a;
    cr_assert_eq(npy_read(path, &a), ATTN_EIO);
    const long grew = max_rss_kib() - before;
    cr_assert_not_null(strstr(attn_last_error(), "trailing garbage"), "%s", attn_last_error());
    cr_assert_lt(grew, 64 * 1024, "reading a file that its header contradicts took %ld KiB", grew);
    assert_empty(&a);
    /* and the opposite lie, a header declaring 2^40 values in a small file */
    img = make_image("{'descr': '<f2', 'fortran_order': False, 'shape': (1099511627776,), }", 1, 64, vals,
                     sizeof vals, &len);
    spit(path, img, len);
    free(img);
    cr_assert_eq(npy_read(path, &a), ATTN_EIO);
    cr_assert_not_null(strstr(attn_last_error(), "truncated: expected 2199023255552 bytes"), "%s",
                       attn_last_error());
    tmpdir_remove(&t);
}

/* ---- outputs committed together ----------------------------------------------------------- */

static int exists_in(const char *dir, const char *name) {
    char p[8300];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

/* Two outputs become visible together, and a name listed as stale is removed with them. */
Test(npy, outputs_commit_as_a_pair_and_remove_stale_files) {
    tmpdir t;
    tmpdir_make(&t);
    int dirfd = open(t.path, O_RDONLY | O_DIRECTORY);
    cr_assert_geq(dirfd, 0);
    char path[8300];
    snprintf(path, sizeof path, "%s/lse.npy", t.path);
    spit(path, "old", 3); /* left by an earlier run */
    npy_out o[2];
    uint16_t h[3] = {1, 2, 3};
    float f[2] = {4, 5};
    cr_assert_eq(npy_out_create(&o[0], dirfd, t.path, "o.npy"), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(npy_out_create(&o[1], dirfd, t.path, "x.npy"), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(dir_entries(t.path), 3, "two temporaries beside lse.npy");
    cr_assert(!exists_in(t.path, "o.npy") && !exists_in(t.path, "x.npy"), "nothing visible before the commit");
    cr_assert_eq(npy_out_write(&o[0], NPY_F16, 1, (int64_t[]){3}, h), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(npy_out_write(&o[1], NPY_F32, 1, (int64_t[]){2}, f), ATTN_OK, "%s", attn_last_error());
    cr_assert(!exists_in(t.path, "o.npy") && !exists_in(t.path, "x.npy"), "nothing visible before the commit");
    static const char *const stale[1] = {"lse.npy"};
    cr_assert_eq(npy_out_commit(o, 2, stale, 1), ATTN_OK, "%s", attn_last_error());
    cr_assert(exists_in(t.path, "o.npy") && exists_in(t.path, "x.npy") && !exists_in(t.path, "lse.npy"));
    cr_assert_eq(dir_entries(t.path), 2, "a temporary was left behind");
    npy_out_discard(&o[0]); /* harmless after the commit */
    npy_out_discard(&o[1]);
    cr_assert_eq(dir_entries(t.path), 2);

    /* the second rename fails (x.npy is now a non-empty directory): the old o.npy comes back (it used
     * to be removed with the new one, leaving neither), and so does a stale file removed before */
    char opath[8300];
    snprintf(opath, sizeof opath, "%s/o.npy", t.path);
    size_t n_old;
    unsigned char *o_old = slurp(opath, &n_old);
    snprintf(path, sizeof path, "%s/x.npy", t.path);
    cr_assert_eq(remove(path), 0);
    cr_assert_eq(mkdir(path, 0700), 0);
    char inner[8400], stale_path[8300];
    snprintf(inner, sizeof inner, "%s/keep", path);
    spit(inner, "k", 1);
    snprintf(stale_path, sizeof stale_path, "%s/lse.npy", t.path);
    spit(stale_path, "old", 3);
    const uint16_t h2[3] = {7, 8, 9};
    for (int had_o = 1; had_o >= 0; had_o--) { /* with an old o.npy, then without one */
        cr_assert_eq(npy_out_create(&o[0], dirfd, t.path, "o.npy"), ATTN_OK);
        cr_assert_eq(npy_out_create(&o[1], dirfd, t.path, "x.npy"), ATTN_OK);
        cr_assert_eq(npy_out_write(&o[0], NPY_F16, 1, (int64_t[]){3}, h2), ATTN_OK);
        cr_assert_eq(npy_out_write(&o[1], NPY_F32, 1, (int64_t[]){2}, f), ATTN_OK);
        cr_assert_eq(npy_out_commit(o, 2, stale, 1), ATTN_EIO);
        cr_assert_not_null(strstr(attn_last_error(), "x.npy: cannot rename"), "%s", attn_last_error());
        if (had_o) {
            size_t n;
            unsigned char *now = slurp(opath, &n);
            cr_assert(n == n_old && memcmp(now, o_old, n) == 0, "the old o.npy was not put back");
            free(now);
            cr_assert_not_null(strstr(attn_last_error(), "put back as they were"), "%s", attn_last_error());
            cr_assert_eq(remove(opath), 0);
        } else {
            cr_assert(!exists_in(t.path, "o.npy"), "a new o.npy stayed without its partner");
        }
        size_t n;
        unsigned char *st = slurp(stale_path, &n);
        cr_assert(n == 3 && !memcmp(st, "old", 3), "the stale lse.npy was not put back");
        free(st);
        cr_assert_eq(dir_entries(t.path), 2, "temporaries or backups were left behind");
    }
    free(o_old);
    remove(stale_path);
    remove(inner);
    rmdir(path);
    close(dirfd);
    tmpdir_remove(&t);
}

static int stop_now(void) { return SIGINT; }

static double seconds_since(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* A commit waits for the directory's lock at most the time given (it used to block in flock for as long
 * as another holder kept it) and stops at once when stop() says so; either way the old file stays and
 * the temporary goes. The lock here is this process's own, on another open of the directory: flock
 * locks of two opens exclude each other as two processes' do. */
Test(npy, commit_waits_for_a_held_lock_with_a_limit) {
    tmpdir t;
    tmpdir_make(&t);
    char path[8300];
    snprintf(path, sizeof path, "%s/o.npy", t.path);
    const uint16_t old[2] = {1, 2}, h[2] = {3, 4};
    cr_assert_eq(npy_write(path, NPY_F16, 1, (int64_t[]){2}, old), ATTN_OK, "%s", attn_last_error());
    const int lockfd = open(t.path, O_RDONLY | O_DIRECTORY), dirfd = open(t.path, O_RDONLY | O_DIRECTORY);
    cr_assert(lockfd >= 0 && dirfd >= 0 && flock(lockfd, LOCK_EX) == 0);
    for (int stop = 0; stop < 2; stop++) {
        npy_out o;
        cr_assert_eq(npy_out_create(&o, dirfd, t.path, "o.npy"), ATTN_OK, "%s", attn_last_error());
        cr_assert_eq(npy_out_write(&o, NPY_F16, 1, (int64_t[]){2}, h), ATTN_OK, "%s", attn_last_error());
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        const attn_status st = npy_out_commit_wait(&o, 1, NULL, 0, stop ? 60000 : 300, stop ? stop_now : NULL);
        const double took = seconds_since(&t0);
        npy_out_discard(&o);
        cr_assert_eq(st, ATTN_EIO);
        cr_assert_not_null(strstr(attn_last_error(), stop ? "interrupted while waiting for another process's lock"
                                                          : "busy: another process has held a lock (flock) on "
                                                            "the directory for 0.3 s"),
                           "%s", attn_last_error());
        cr_assert(stop ? took < 1 : took >= 0.3 && took < 5, "gave up after %.2f s", took);
        npy_array a;
        cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
        cr_assert(a.count == 2 && !memcmp(a.data, old, sizeof old), "the old o.npy was changed");
        npy_free(&a);
        cr_assert_eq(dir_entries(t.path), 1, "the temporary was left behind");
    }
    cr_assert_eq(flock(lockfd, LOCK_UN), 0);
    cr_assert_eq(npy_write(path, NPY_F16, 1, (int64_t[]){2}, h), ATTN_OK, "unlocked: %s", attn_last_error());
    close(lockfd), close(dirfd);
    tmpdir_remove(&t);
}

/* DIR/ENTRY as an empty file (or a FIFO). */
static void plant(const tmpdir *t, const char *entry, int fifo) {
    char path[8400];
    snprintf(path, sizeof path, "%s/%s", t->path, entry);
    if (fifo) cr_assert_eq(mkfifo(path, 0600), 0, "%s", path);
    else spit(path, "", 0);
}

/* npy_out_sweep removes the temporaries of ended processes (kill -9 left them, and nothing ever did)
 * and nothing else: not a live writer's (its PID, or its lock: a writer of another PID namespace), not
 * a FIFO or a name of another form, not another output's; and nothing at all while another process
 * holds the directory's lock (a commit's backup links are live then). */
Test(npy, sweep_removes_only_what_ended_runs_left) {
    tmpdir t;
    tmpdir_make(&t);
    const pid_t gone = fork(); /* a PID whose process has ended */
    cr_assert_geq(gone, 0);
    if (gone == 0) _exit(0);
    waitpid(gone, NULL, 0);
    char dead[300], fifo[300], short_hex[300], other[300], path[8400];
    snprintf(dead, sizeof dead, "o.npy.%ld.0123456789ab.tmp", (long)gone);
    snprintf(fifo, sizeof fifo, "lse.npy.%ld.0123456789ab.tmp", (long)gone);
    snprintf(short_hex, sizeof short_hex, "o.npy.%ld.0123456789a.tmp", (long)gone);
    snprintf(other, sizeof other, "x.npy.%ld.0123456789ab.tmp", (long)gone);
    plant(&t, dead, 0), plant(&t, fifo, 1), plant(&t, short_hex, 0), plant(&t, other, 0);
    const int dirfd = open(t.path, O_RDONLY | O_DIRECTORY);
    cr_assert_geq(dirfd, 0);
    npy_out live, locked;
    cr_assert_eq(npy_out_create(&live, dirfd, t.path, "o.npy"), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(npy_out_write(&live, NPY_F16, 1, (int64_t[]){1}, (uint16_t[]){1}), ATTN_OK);
    cr_assert_eq(npy_out_create(&locked, dirfd, t.path, "lse.npy"), ATTN_OK, "%s", attn_last_error());
    char renamed[300]; /* the locked one under a dead PID's name: a live writer its PID does not show */
    snprintf(renamed, sizeof renamed, "lse.npy.%ld.00000000000a.tmp", (long)gone);
    cr_assert_eq(renameat(dirfd, locked.tmp, dirfd, renamed), 0);
    static const char *const names[2] = {"o.npy", "lse.npy"};
    const int lockfd = open(t.path, O_RDONLY | O_DIRECTORY);
    cr_assert(lockfd >= 0 && flock(lockfd, LOCK_EX) == 0);
    cr_assert_eq(npy_out_sweep(dirfd, names, 2), 0, "it swept while another held the directory's lock");
    cr_assert(exists_in(t.path, dead));
    cr_assert_eq(flock(lockfd, LOCK_UN), 0);
    close(lockfd);
    cr_assert_eq(npy_out_sweep(dirfd, names, 2), 1, "only the dead writer's regular file goes");
    cr_assert(!exists_in(t.path, dead), "the dead run's temporary stayed");
    cr_assert(exists_in(t.path, fifo) && exists_in(t.path, short_hex) && exists_in(t.path, other) &&
              exists_in(t.path, renamed) && exists_in(t.path, live.tmp));
    cr_assert_eq(npy_out_commit(&live, 1, NULL, 0), ATTN_OK, "%s", attn_last_error());
    cr_assert(exists_in(t.path, "o.npy"));
    npy_out_discard(&live), npy_out_discard(&locked); /* locked's own name is gone: its lock goes */
    cr_assert_eq(npy_out_sweep(dirfd, names, 2), 1, "let go, the renamed one is an ended run's");
    snprintf(path, sizeof path, "%s/%s", t.path, fifo);
    remove(path);
    close(dirfd);
    tmpdir_remove(&t);
}

/* Temporary names are unique and created exclusively: whatever is planted under a name like them
 * is never written through; the new file's mode comes from the umask. */
Test(npy, write_never_follows_planted_files) {
    tmpdir t;
    tmpdir_make(&t);
    char path[8300], victim[8300], planted[8300];
    snprintf(path, sizeof path, "%s/o.npy", t.path);
    snprintf(victim, sizeof victim, "%s/victim", t.path);
    spit(victim, "precious", 8);
    snprintf(planted, sizeof planted, "%s/o.npy.tmp", t.path); /* the old fixed name */
    cr_assert_eq(symlink(victim, planted), 0);
    cr_assert_eq(symlink(victim, path), 0); /* o.npy itself a link to the victim */
    mode_t old = umask(027);
    uint16_t h[4] = {1, 2, 3, 4};
    attn_status st = npy_write(path, NPY_F16, 1, (int64_t[]){4}, h);
    umask(old);
    cr_assert_eq(st, ATTN_OK, "%s", attn_last_error());
    size_t n;
    unsigned char *v = slurp(victim, &n);
    cr_assert(n == 8 && memcmp(v, "precious", 8) == 0, "the victim was written through a link");
    free(v);
    struct stat sb;
    cr_assert_eq(lstat(path, &sb), 0);
    cr_assert(S_ISREG(sb.st_mode), "o.npy is not a regular file");
    cr_assert_eq(sb.st_mode & 0777, 0640, "mode %o, want 0666 less the umask 027", sb.st_mode & 0777);
    cr_assert_eq(dir_entries(t.path), 3, "o.npy, the victim and the planted link, nothing else");
    tmpdir_remove(&t);
}

/* Processes writing one path at the same time: every write succeeds, and the file is always one
 * writer's whole image (they used to share the temporary PATH.tmp: truncated under each other's
 * writes, renamed away under each other, and one writer's file could hold another's values). */
Test(npy, concurrent_writes_to_one_path_stay_whole) {
    enum { WRITERS = 6, WRITES = 12, COUNT = 1 << 20 };
    tmpdir t;
    tmpdir_make(&t);
    char path[8300];
    snprintf(path, sizeof path, "%s/o.npy", t.path);
    pid_t pid[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pid[w] = fork();
        cr_assert_geq(pid[w], 0);
        if (pid[w] == 0) {
            uint16_t *v = malloc((size_t)COUNT * 2);
            for (int i = 0; i < COUNT; i++) v[i] = (uint16_t)(w + 1);
            int bad = 0;
            for (int k = 0; k < WRITES; k++) bad += npy_write(path, NPY_F16, 1, (int64_t[]){COUNT}, v) != ATTN_OK;
            _exit(bad ? 1 : 0);
        }
    }
    int failed = 0;
    for (int w = 0; w < WRITERS; w++) {
        int st = 0;
        cr_assert_eq(waitpid(pid[w], &st, 0), pid[w]);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    cr_assert_eq(failed, 0, "%d of %d writers saw a write fail", failed, WRITERS);
    npy_array a;
    cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
    cr_assert_eq(a.count, COUNT);
    const uint16_t *v = a.data;
    int64_t other = 0;
    for (int i = 0; i < COUNT; i++) other += v[i] != v[0];
    cr_assert_eq(other, 0, "o.npy mixes writers: %lld of %d values are not writer %d's", (long long)other, COUNT, v[0]);
    npy_free(&a);
    cr_assert_eq(dir_entries(t.path), 1, "temporaries were left behind");
    tmpdir_remove(&t);
}

/* ---- failures of the disk, through fsync and pread ---------------------------------------- */

#ifdef __linux__ /* the pass-through is Linux's syscall() */

static int fail_data_fsync, fail_dir_fsync; /* the errno an fsync of a file, of a directory, fails with */
static off_t grows_at = -1;                 /* a pread at this offset finds a byte: the file grew */

int fsync(int fd) {
    struct stat sb;
    const int e = fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode) ? fail_dir_fsync : fail_data_fsync;
    if (e) {
        errno = e;
        return -1;
    }
    return (int)syscall(SYS_fsync, fd);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    if (off == grows_at && n > 0) {
        *(unsigned char *)buf = 0;
        return 1;
    }
    return (ssize_t)syscall(SYS_pread64, fd, buf, n, off);
}

/* A whole f16 file of shape (3, 5) in a fresh folder; its size. */
static off_t write_small(tmpdir *t, char *path, size_t cap) {
    tmpdir_make(t);
    snprintf(path, cap, "%s/a.npy", t->path);
    const int64_t shape[2] = {3, 5};
    uint16_t v[15] = {0};
    cr_assert_eq(npy_write(path, NPY_F16, 2, shape, v), ATTN_OK, "%s", attn_last_error());
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    return sb.st_size;
}

/* Bytes past the size the file had when it was opened: the data read may not be the file's, refused. */
Test(npy_faults, a_file_that_grows_while_read_is_refused) {
    tmpdir t;
    char path[8192];
    grows_at = write_small(&t, path, sizeof path);
    npy_array a;
    cr_assert_eq(npy_read(path, &a), ATTN_EIO, "a file that grew was read");
    cr_assert_not_null(strstr(attn_last_error(), "changed size while it was being read (it grew)"), "%s",
                       attn_last_error());
    cr_assert_null(a.data);
    grows_at = -1;
    cr_assert_eq(npy_read(path, &a), ATTN_OK, "%s", attn_last_error());
    npy_free(&a);
    tmpdir_remove(&t);
}

/* The data never reached the disk: reported, and neither the file nor a temporary one is left. */
Test(npy_faults, a_failed_fsync_of_the_data_leaves_nothing) {
    tmpdir t;
    char path[8192];
    write_small(&t, path, sizeof path);
    cr_assert_eq(unlink(path), 0);
    fail_data_fsync = EIO;
    const int64_t shape[1] = {4};
    uint16_t v[4] = {0};
    cr_assert_eq(npy_write(path, NPY_F16, 1, shape, v), ATTN_EIO, "a write whose fsync failed succeeded");
    cr_assert_not_null(strstr(attn_last_error(), "cannot flush the data to disk: Input/output error"), "%s",
                       attn_last_error());
    cr_assert_eq(dir_entries(t.path), 0, "the failed write left files behind");
    tmpdir_remove(&t);
}

/* A file system that cannot sync a directory says EINVAL: the write stands. Any other failure of
 * the directory's fsync (EIO) is reported. */
Test(npy_faults, the_directory_fsync_tolerates_einval_only) {
    tmpdir t;
    char path[8192];
    write_small(&t, path, sizeof path);
    const int64_t shape[1] = {4};
    uint16_t v[4] = {0};
    fail_dir_fsync = EINVAL;
    cr_assert_eq(npy_write(path, NPY_F16, 1, shape, v), ATTN_OK, "EINVAL from a directory: %s", attn_last_error());
    fail_dir_fsync = EIO;
    cr_assert_eq(npy_write(path, NPY_F16, 1, shape, v), ATTN_EIO, "EIO from the directory's fsync was ignored");
    cr_assert_not_null(strstr(attn_last_error(), "cannot flush the directory: Input/output error"), "%s",
                       attn_last_error());
    tmpdir_remove(&t);
}
#else
Test(npy_faults, disk_failures) { cr_skip_test("the fsync and pread stand-ins are written for Linux"); }
#endif
