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

/* Writes one file atomically: npy_out_create, npy_out_write and npy_out_commit in path's directory.
 * A failure leaves no file and no temporary behind, and an existing PATH untouched. */
attn_status npy_write(const char *path, npy_dtype dtype, int ndim, const int64_t *shape,
                      const void *data);

/* Files that appear together or not at all (build/attn --save: o.npy and lse.npy). Each output is a
 * temporary file with a unique name, created exclusively (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0666
 * less the umask) inside an open directory, so nothing planted there is ever written through:
 *   npy_out_create   creates NAME.PID.RANDOM.tmp in dirfd (dir is dirfd's name, for messages)
 *   npy_out_write    writes the header and data, fsyncs and closes it (it stays temporary)
 *   npy_out_commit   under an flock of the directory (waited for NPY_LOCK_WAIT_MS at most): removes
 *                    the `stale` names (files an earlier run left that this one does not write),
 *                    then renames every output onto its NAME (at most 8 names in all). What each name held is kept as a hard link
 *                    until the end: if a step fails, the steps before it are undone from those
 *                    links, so the directory keeps its old files (where a file system cannot link,
 *                    the new file is removed instead: never a new file beside an old partner).
 *                    Then fsyncs the directory.
 *   npy_out_discard  removes the temporary file; harmless after a commit or a failure
 *   npy_out_sweep    removes the temporaries of processes that ended before discarding theirs
 * Every failure discards the temporaries it concerns; the caller still calls npy_out_discard on
 * every path (it is idempotent). */
typedef struct {
    int dirfd;         /* the directory, owned by the caller */
    const char *dir;   /* its name, for messages */
    char name[256];    /* the final name in the directory */
    char tmp[320];     /* the temporary name, "" when there is none */
    int fd;            /* the temporary file while it is written, else -1 */
    int held;          /* another descriptor of it, holding its flock until it is renamed or removed */
    int state;         /* 0 nothing pending, 1 created, 2 written */
} npy_out;

attn_status npy_out_create(npy_out *o, int dirfd, const char *dir, const char *name);
attn_status npy_out_write(npy_out *o, npy_dtype dtype, int ndim, const int64_t *shape, const void *data);
attn_status npy_out_commit(npy_out *outs, int n, const char *const *stale, int nstale);

/* Removes what runs that ended mid-write (kill -9, a crash) left in the directory: NAME.PID.RANDOM.tmp
 * for each NAME of names[0..n-1], a regular file whose process PID is gone and on which no process holds
 * a lock. A writer holds one on each of its temporaries until it is renamed or removed, so a live writer
 * of another PID namespace, whose PID may look free here, keeps its files. Runs under the directory's
 * lock, and not at all while another process holds it (a commit's backup links are live then).
 * Returns how many files it removed. */
int npy_out_sweep(int dirfd, const char *const *names, int n);

/* How long a commit waits for the directory's lock, in ms. Another commit holds it for its renames and
 * one directory fsync (a pair of files: 5.7 ms on average, 14 ms at worst over 50 commits on ext4 here),
 * so 10 s is some 700 such commits queued; a process holding it for longer is stuck or hostile, and a
 * commit that waited without limit (a blocking flock) hung build/attn with its signals held. */
#define NPY_LOCK_WAIT_MS 10000
/* npy_out_commit with the wait given: at most wait_ms for the lock (then "busy", the temporaries
 * discarded), and stop(), when not NULL, asked while waiting: non-zero gives up at once ("interrupted";
 * build/attn passes attn_signals_noted, so that a Ctrl-C during the wait ends the run now).
 * npy_out_commit is this with NPY_LOCK_WAIT_MS and no stop. */
attn_status npy_out_commit_wait(npy_out *outs, int n, const char *const *stale, int nstale, int wait_ms,
                                int (*stop)(void));
void npy_out_discard(npy_out *o);

#ifdef __cplusplus
}
#endif
#endif
