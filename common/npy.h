/*
 * npy.h: NumPy .npy files (format 1.0, 2.0 and 3.0), the way --load and --save exchange tensors
 * with NumPy and PyTorch. The reader treats every file as untrusted: it checks the magic, the
 * header length, the dict's keys and values, the dtype, the order, the shape (overflow and the
 * file's real size) and that no bytes trail the data, and fails with a message naming the file.
 */
#ifndef ATTN_NPY_H
#define ATTN_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NPY_MAX_DIMS 8

typedef enum { NPY_F16 = 0, NPY_F32 = 1 } npy_dtype;

typedef struct {
    npy_dtype dtype;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    int64_t count;     /* product of shape */
    void *data;        /* count elements, host-endian, malloc'd */
} npy_array;

/* Parses a whole .npy image held in memory (what the fuzzer calls). `name` is used in messages.
 * Accepts little-endian '<f2' / '<f4' (or '|'/'=' byte order for them), fortran_order False.
 * On success fills *out (free with npy_free); on failure returns ATTN_EIO (ATTN_ENOMEM when the
 * data does not fit in host memory) with the message, and leaves *out empty. */
attn_status npy_parse(const void *buf, size_t len, const char *name, npy_array *out);
/* The same for a file. A FIFO, device or directory is refused before a byte is read (it is opened
 * without waiting); the header is read and checked, then the file's size against it, and only then
 * is memory allocated for the data and the data read. */
attn_status npy_read(const char *path, npy_array *out);
void npy_free(npy_array *a);

/* Writes atomically: to PATH.tmp, then renamed over PATH, so a failure leaves no half file. */
attn_status npy_write(const char *path, npy_dtype dtype, int ndim, const int64_t *shape,
                      const void *data);

#ifdef __cplusplus
}
#endif
#endif
