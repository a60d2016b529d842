/*
 * npy.c: the NumPy .npy reader and writer (see npy.h).
 *
 * The file layout (numpy.lib.format):
 *   "\x93NUMPY"  major  minor  header_len  header  data
 *   6 bytes      1      1      2 bytes (1.0) or 4 bytes (2.0, 3.0), little-endian
 * The header is the text of a Python dict literal, e.g.
 *   {'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n' so that the data starts at a multiple of 64 bytes.
 *
 * Every input is untrusted. The reader only ever looks at bytes below `len`, checks every number
 * for overflow, and allocates nothing until the data it would hold has been found in the buffer.
 */
#include "npy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The data is copied as-is, so the host must store numbers the way the files do. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host (the .npy files it reads and writes are '<f2' / '<f4')"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER ((size_t)1 << 20) /* larger headers are refused as insane */
#define NPY_ALIGN 64                     /* as NumPy's ARRAY_ALIGN */
#define NPY_GROWTH_DIGITS 21             /* as NumPy's GROWTH_AXIS_MAX_DIGITS */

/* The largest data size accepted: it must fit in both size_t and int64_t. */
#define NPY_MAX_BYTES ((uint64_t)(SIZE_MAX < INT64_MAX ? SIZE_MAX : INT64_MAX))

static size_t itemsize(npy_dtype t) { return t == NPY_F32 ? 4 : 2; }

/* Sets "NAME: <formatted text>" as the last error and returns ATTN_EIO. A name of more than 1000
 * bytes is shown as its first and last 480, so that the reason after it is never cut off. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static attn_status npy_fail_st(attn_status st, const char *name, const char *fmt, ...) {
    char msg[1024], shortname[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!name) name = "(unnamed .npy)";
    const size_t nl = strlen(name);
    if (nl > 1000) {
        snprintf(shortname, sizeof shortname, "%.480s...%s", name, name + nl - 480);
        name = shortname;
    }
    return attn_fail(st, "%s: %s", name, msg);
}
#define npy_fail(...) npy_fail_st(ATTN_EIO, __VA_ARGS__)

/* Out of host memory is not a bad file: ATTN_ENOMEM, so that the front end exits 1, not 2. */
static attn_status npy_oom(const char *name, size_t bytes) {
    return npy_fail_st(ATTN_ENOMEM, name, "out of memory for %zu bytes", bytes);
}

/* ---- the header dict ---------------------------------------------------------------------- */

typedef struct {
    const char *s; /* header text, not NUL-terminated */
    size_t n, i;   /* length, cursor */
    size_t base;   /* the header's offset in the file, for messages */
    const char *name;
} cursor;

static int at_end(const cursor *c) { return c->i >= c->n; }
static int peek(const cursor *c) { return at_end(c) ? -1 : (unsigned char)c->s[c->i]; }
static int is_space(int ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }
static int is_digit(int ch) { return ch >= '0' && ch <= '9'; }
static int is_ident(int ch) {
    return is_digit(ch) || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}
static void skip_space(cursor *c) {
    while (!at_end(c) && is_space(peek(c))) c->i++;
}

/* A short, printable description of what is at the cursor, for messages. */
static void describe_here(const cursor *c, char *out, size_t cap) {
    if (at_end(c)) {
        snprintf(out, cap, "the end of the header");
        return;
    }
    size_t k = 0;
    out[k++] = '\'';
    for (size_t j = c->i; j < c->n && k + 2 < cap && j < c->i + 12; j++) {
        char ch = c->s[j];
        out[k++] = (ch == '\n' || ch == '\r' || ch == '\t') ? ' ' : ch;
    }
    out[k++] = '\'';
    out[k] = '\0';
}

static attn_status expected(const cursor *c, const char *what) {
    char here[32];
    describe_here(c, here, sizeof here);
    return npy_fail(c->name, "malformed header: expected %s at byte %zu, found %s", what, c->base + c->i,
                    here);
}

/* A Python string literal in single or double quotes, without escapes. On success str and len
 * give its text inside the header. */
static attn_status parse_string(cursor *c, const char *what, const char **str, size_t *len) {
    int q = peek(c);
    if (q != '\'' && q != '"') return expected(c, what);
    size_t start = ++c->i;
    while (!at_end(c) && peek(c) != q) {
        int ch = peek(c);
        if (ch == '\\') return npy_fail(c->name, "malformed header: escapes in strings are not supported (byte %zu)", c->base + c->i);
        if (ch < 0x20) return npy_fail(c->name, "malformed header: unterminated string at byte %zu", c->base + start - 1);
        c->i++;
    }
    if (at_end(c)) return npy_fail(c->name, "malformed header: unterminated string at byte %zu", c->base + start - 1);
    *str = c->s + start;
    *len = c->i - start;
    c->i++; /* closing quote */
    return ATTN_OK;
}

/* A non-negative decimal integer (an optional Python 2 'L' suffix is allowed), checked for int64
 * overflow. */
static attn_status parse_dim(cursor *c, int index, int64_t *v) {
    if (peek(c) == '-')
        return npy_fail(c->name, "negative dimension in shape (dimension %d)", index);
    if (!is_digit(peek(c))) return expected(c, "a dimension (a non-negative integer)");
    int64_t x = 0;
    while (is_digit(peek(c))) {
        int d = peek(c) - '0';
        if (x > (INT64_MAX - d) / 10)
            return npy_fail(c->name, "dimension %d of the shape overflows a 64-bit integer", index);
        x = x * 10 + d;
        c->i++;
    }
    if (peek(c) == 'L' || peek(c) == 'l') c->i++;
    if (is_ident(peek(c))) return expected(c, "',' or ')' after a dimension");
    *v = x;
    return ATTN_OK;
}

/* A tuple of 0..NPY_MAX_DIMS dimensions: "()", "(5,)", "(2, 3)", "(2, 3,)". */
static attn_status parse_shape(cursor *c, npy_array *a) {
    if (peek(c) != '(') {
        if (peek(c) == '[')
            return npy_fail(c->name, "malformed header: shape must be a tuple, not a list");
        return expected(c, "a shape tuple '('");
    }
    c->i++;
    int nd = 0, commas = 0;
    skip_space(c);
    while (peek(c) != ')') {
        if (nd == NPY_MAX_DIMS)
            return npy_fail(c->name, "shape has more than %d dimensions", NPY_MAX_DIMS);
        attn_status st = parse_dim(c, nd, &a->shape[nd]);
        if (st != ATTN_OK) return st;
        nd++;
        skip_space(c);
        if (peek(c) == ',') {
            c->i++;
            commas++;
            skip_space(c);
        } else if (peek(c) != ')') {
            return expected(c, "',' or ')' in the shape");
        }
    }
    c->i++; /* ')' */
    /* "(5)" is the integer 5 in Python, not a tuple, and NumPy refuses it. */
    if (nd == 1 && commas == 0)
        return npy_fail(c->name, "malformed header: shape (%lld) is not a tuple; a 1-tuple is written (%lld,)",
                        (long long)a->shape[0], (long long)a->shape[0]);
    a->ndim = nd;
    return ATTN_OK;
}

static attn_status parse_bool(cursor *c, int *v) {
    static const char t[] = "True", f[] = "False";
    const char *word = NULL;
    size_t wl = 0;
    if (c->n - c->i >= 4 && memcmp(c->s + c->i, t, 4) == 0) word = t, wl = 4, *v = 1;
    else if (c->n - c->i >= 5 && memcmp(c->s + c->i, f, 5) == 0) word = f, wl = 5, *v = 0;
    if (!word || (c->i + wl < c->n && is_ident((unsigned char)c->s[c->i + wl])))
        return expected(c, "True or False for 'fortran_order'");
    c->i += wl;
    return ATTN_OK;
}

static attn_status check_descr(const char *name, const char *d, size_t n, npy_dtype *t) {
    if (n == 3 && (d[0] == '<' || d[0] == '=' || d[0] == '|') && d[1] == 'f') {
        if (d[2] == '2') return *t = NPY_F16, ATTN_OK;
        if (d[2] == '4') return *t = NPY_F32, ATTN_OK;
    }
    int shown = n > 40 ? 40 : (int)n;
    if (n >= 1 && d[0] == '>')
        return npy_fail(name, "big-endian dtype '%.*s' is not supported (supported: '<f2' float16, '<f4' float32)",
                        shown, d);
    return npy_fail(name, "unsupported dtype '%.*s'%s (supported: '<f2' float16, '<f4' float32)", shown, d,
                    n > 40 ? "..." : "");
}

enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4 };

/* Parses the dict text. Fills a->dtype, a->ndim, a->shape. */
static attn_status parse_dict(cursor *c, npy_array *a) {
    unsigned seen = 0;
    int fortran = 0;
    attn_status st;
    skip_space(c);
    if (peek(c) != '{') return expected(c, "'{' (the header is not a dict)");
    c->i++;
    for (;;) {
        skip_space(c);
        if (at_end(c)) return npy_fail(c->name, "malformed header: unterminated dict (no closing '}')");
        if (peek(c) == '}') break;
        const char *key;
        size_t kl;
        size_t key_at = c->i;
        if ((st = parse_string(c, "a quoted key", &key, &kl)) != ATTN_OK) return st;
        unsigned which = 0;
        if (kl == 5 && memcmp(key, "descr", 5) == 0) which = KEY_DESCR;
        else if (kl == 13 && memcmp(key, "fortran_order", 13) == 0) which = KEY_FORTRAN;
        else if (kl == 5 && memcmp(key, "shape", 5) == 0) which = KEY_SHAPE;
        else
            return npy_fail(c->name, "unexpected key '%.*s' in the header (expected 'descr', 'fortran_order', 'shape')",
                            kl > 40 ? 40 : (int)kl, key);
        if (seen & which)
            return npy_fail(c->name, "duplicate key '%.*s' in the header (byte %zu)", (int)kl, key, c->base + key_at);
        seen |= which;
        skip_space(c);
        if (peek(c) != ':') return expected(c, "':' after a key");
        c->i++;
        skip_space(c);
        if (which == KEY_DESCR) {
            const char *d;
            size_t dl;
            if (peek(c) == '[')
                return npy_fail(c->name, "unsupported dtype: structured arrays are not supported (supported: '<f2' float16, '<f4' float32)");
            if ((st = parse_string(c, "a quoted dtype string for 'descr'", &d, &dl)) != ATTN_OK) return st;
            if ((st = check_descr(c->name, d, dl, &a->dtype)) != ATTN_OK) return st;
        } else if (which == KEY_FORTRAN) {
            if ((st = parse_bool(c, &fortran)) != ATTN_OK) return st;
        } else {
            if ((st = parse_shape(c, a)) != ATTN_OK) return st;
        }
        skip_space(c);
        if (peek(c) == ',') {
            c->i++;
        } else if (peek(c) != '}') {
            if (at_end(c)) return npy_fail(c->name, "malformed header: unterminated dict (no closing '}')");
            return expected(c, "',' or '}' after a value");
        }
    }
    c->i++; /* '}' */
    skip_space(c);
    if (!at_end(c)) return expected(c, "only spaces and a newline after the dict");
    if (!(seen & KEY_DESCR)) return npy_fail(c->name, "malformed header: missing key 'descr'");
    if (!(seen & KEY_FORTRAN)) return npy_fail(c->name, "malformed header: missing key 'fortran_order'");
    if (!(seen & KEY_SHAPE)) return npy_fail(c->name, "malformed header: missing key 'shape'");
    if (fortran) return npy_fail(c->name, "fortran order is not supported; save with np.ascontiguousarray");
    return ATTN_OK;
}

/* The fixed part of an image of len bytes: magic, version and header length. buf holds its first
 * min(len, NPY_PREFIX_MAX) bytes, so a file is checked before more of it is read. *prefix is the
 * header text's offset, *hlen its length; the text is known to lie inside the image. */
#define NPY_PREFIX_MAX 12
static attn_status parse_prefix(const unsigned char *buf, size_t len, const char *name, size_t *prefix,
                                size_t *hlen) {
    if (len == 0) return npy_fail(name, "empty file (0 bytes), not a .npy file");
    size_t m = len < NPY_MAGIC_LEN ? len : NPY_MAGIC_LEN;
    if (memcmp(buf, NPY_MAGIC, m) != 0) return npy_fail(name, "not a .npy file (bad magic)");
    if (len < NPY_MAGIC_LEN + 2)
        return npy_fail(name, "truncated header: %zu bytes, too short for the magic and version", len);
    unsigned major = buf[6], minor = buf[7];
    if (!((major == 1 || major == 2 || major == 3) && minor == 0))
        return npy_fail(name, "unsupported .npy format version %u.%u (supported: 1.0, 2.0, 3.0)", major, minor);
    size_t lenbytes = major == 1 ? 2 : 4;
    *prefix = NPY_MAGIC_LEN + 2 + lenbytes;
    if (len < *prefix)
        return npy_fail(name, "truncated header: %zu bytes, too short for the header length field", len);
    uint64_t h = 0;
    for (size_t k = 0; k < lenbytes; k++) h |= (uint64_t)buf[8 + k] << (8 * k);
    if (h > NPY_MAX_HEADER)
        return npy_fail(name, "header length %llu is too large (limit %zu)", (unsigned long long)h, NPY_MAX_HEADER);
    if (h > len - *prefix)
        return npy_fail(name, "truncated header: header length %llu runs past the end of the file (%zu bytes)",
                        (unsigned long long)h, len);
    *hlen = (size_t)h;
    return ATTN_OK;
}

/* The header text h[0 .. hlen), found at byte `prefix` of the image: fills dtype, ndim and shape. */
static attn_status parse_header(const unsigned char *h, size_t hlen, size_t prefix, const char *name,
                                npy_array *a) {
    for (size_t k = 0; k < hlen; k++) {
        unsigned char ch = h[k];
        if (ch >= 0x80)
            return npy_fail(name, "header has a non-ASCII byte 0x%02x at byte %zu", ch, prefix + k);
        if (ch < 0x20 && !is_space(ch))
            return npy_fail(name, "header has a control byte 0x%02x at byte %zu", ch, prefix + k);
        if (ch == 0x7f) return npy_fail(name, "header has a control byte 0x7f at byte %zu", prefix + k);
    }
    cursor c = {(const char *)h, hlen, 0, prefix, name};
    return parse_dict(&c, a);
}

/* Sets a->count from the shape and checks that the `have` bytes after the header are exactly the
 * data: nothing is allocated for a file whose size disagrees with its header. */
static attn_status check_data_size(npy_array *a, const char *name, size_t have, size_t *nbytes) {
    /* count: a zero dimension makes the array empty whatever the others are */
    int64_t count = 1;
    int zero = 0;
    for (int d = 0; d < a->ndim; d++) zero |= a->shape[d] == 0;
    if (zero) {
        count = 0;
    } else {
        const uint64_t limit = NPY_MAX_BYTES / itemsize(a->dtype);
        for (int d = 0; d < a->ndim; d++) {
            if ((uint64_t)a->shape[d] > limit / (uint64_t)count)
                return npy_fail(name, "shape is too large: the array would exceed %llu bytes",
                                (unsigned long long)NPY_MAX_BYTES);
            count *= a->shape[d];
        }
    }
    a->count = count;
    size_t want = (size_t)count * itemsize(a->dtype);
    if (have < want) return npy_fail(name, "truncated: expected %zu bytes of data, found %zu", want, have);
    if (have > want)
        return npy_fail(name, "trailing garbage: %zu byte%s after the data", have - want, have - want > 1 ? "s" : "");
    *nbytes = want;
    return ATTN_OK;
}

attn_status npy_parse(const void *buf, size_t len, const char *name, npy_array *out) {
    if (!name) name = "(unnamed .npy)";
    if (!out) return npy_fail(name, "npy_parse: no output array given");
    memset(out, 0, sizeof *out);
    if (!buf && len) return npy_fail(name, "npy_parse: NULL buffer of %zu bytes", len);
    if (!buf) buf = "";
    const unsigned char *b = buf;
    npy_array a;
    memset(&a, 0, sizeof a);
    size_t prefix = 0, hlen = 0, nbytes = 0;
    attn_status st = parse_prefix(b, len, name, &prefix, &hlen);
    if (st == ATTN_OK) st = parse_header(b + prefix, hlen, prefix, name, &a);
    if (st == ATTN_OK) st = check_data_size(&a, name, len - prefix - hlen, &nbytes);
    if (st != ATTN_OK) return st;
    a.data = attn_alloc(nbytes);
    if (!a.data) return npy_oom(name, nbytes);
    if (nbytes) memcpy(a.data, b + prefix + hlen, nbytes);
    *out = a;
    return ATTN_OK;
}

/* pread until n bytes or the end of the file; the bytes read, or -1 with errno set. */
static ssize_t read_at(int fd, void *buf, size_t n, off_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (unsigned char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a plain file";
}

/* Reads exactly n bytes at off of a file of `size` bytes, or fails naming what happened. */
static attn_status read_part(int fd, void *buf, size_t n, off_t off, const char *path, const char *what) {
    ssize_t r = read_at(fd, buf, n, off);
    if (r < 0) return npy_fail(path, "read error in the %s: %s", what, strerror(errno));
    if ((size_t)r < n) return npy_fail(path, "the file changed size while it was being read (it shrank)");
    return ATTN_OK;
}

/* The prefix, then the header, then the size check, and only then the data: a file that lies about
 * its size costs its header's bytes, not its size. */
static attn_status read_fd(int fd, size_t size, const char *path, npy_array *a) {
    unsigned char pre[NPY_PREFIX_MAX];
    size_t np = size < NPY_PREFIX_MAX ? size : NPY_PREFIX_MAX, prefix = 0, hlen = 0, nbytes = 0;
    attn_status st = read_part(fd, pre, np, 0, path, "header");
    if (st == ATTN_OK) st = parse_prefix(pre, size, path, &prefix, &hlen);
    if (st != ATTN_OK) return st;
    unsigned char *h = attn_alloc(hlen);
    if (!h) return npy_oom(path, hlen);
    st = read_part(fd, h, hlen, (off_t)prefix, path, "header");
    if (st == ATTN_OK) st = parse_header(h, hlen, prefix, path, a);
    free(h);
    if (st == ATTN_OK) st = check_data_size(a, path, size - prefix - hlen, &nbytes);
    if (st != ATTN_OK) return st;
    a->data = attn_alloc(nbytes);
    if (!a->data) return npy_oom(path, nbytes);
    st = read_part(fd, a->data, nbytes, (off_t)(prefix + hlen), path, "data");
    unsigned char extra;
    if (st == ATTN_OK && read_at(fd, &extra, 1, (off_t)size) != 0)
        st = npy_fail(path, "the file changed size while it was being read (it grew)");
    if (st != ATTN_OK) {
        free(a->data);
        a->data = NULL;
    }
    return st;
}

attn_status npy_read(const char *path, npy_array *out) {
    if (!path) path = "(null path)";
    if (!out) return npy_fail(path, "npy_read: no output array given");
    memset(out, 0, sizeof *out);
    /* O_NONBLOCK: opening a FIFO to read waits for a writer, forever if none comes. Opened without
     * waiting, the file's type is checked before a byte is read, and the flag is cleared again. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return npy_fail(path, "cannot open: %s", strerror(errno));
    struct stat sb;
    attn_status st = ATTN_OK;
    if (fstat(fd, &sb) != 0) st = npy_fail(path, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(sb.st_mode)) st = npy_fail(path, "not a regular file (%s)", file_kind(sb.st_mode));
    else if (sb.st_size < 0 || (uint64_t)sb.st_size > NPY_MAX_BYTES)
        st = npy_fail(path, "file size %lld is out of range", (long long)sb.st_size);
    else {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
            st = npy_fail(path, "cannot clear O_NONBLOCK: %s", strerror(errno));
    }
    npy_array a;
    memset(&a, 0, sizeof a);
    if (st == ATTN_OK) st = read_fd(fd, (size_t)sb.st_size, path, &a);
    close(fd);
    if (st == ATTN_OK) *out = a;
    return st;
}

void npy_free(npy_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ---- writing ------------------------------------------------------------------------------ */

/* Builds the full prefix (magic, version, length, header text, padding, '\n') the way NumPy 1.24+
 * writes it. Returns its length, or 0 if it does not fit in cap. */
static size_t build_prefix(char *p, size_t cap, npy_dtype dtype, int ndim, const int64_t *shape) {
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     dtype == NPY_F32 ? "<f4" : "<f2");
    for (int d = 0; d < ndim; d++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, d ? ", %lld" : "%lld", (long long)shape[d]);
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    if (ndim > 0) {
        /* NumPy leaves room for the first dimension to grow to 21 digits in place. */
        char first[24];
        int fl = snprintf(first, sizeof first, "%lld", (long long)shape[0]);
        for (int k = fl; k < NPY_GROWTH_DIGITS; k++) dict[n++] = ' ';
    }
    size_t text = (size_t)n + 1; /* + '\n' */
    size_t lenbytes = 2;
    int major = 1;
    size_t pad = NPY_ALIGN - ((NPY_MAGIC_LEN + 2 + lenbytes + text) % NPY_ALIGN);
    if (text + pad > 65535) { /* never for our headers, but it is NumPy's rule */
        lenbytes = 4;
        major = 2;
        pad = NPY_ALIGN - ((NPY_MAGIC_LEN + 2 + lenbytes + text) % NPY_ALIGN);
    }
    size_t hlen = text + pad;
    size_t total = NPY_MAGIC_LEN + 2 + lenbytes + hlen;
    if (total > cap) return 0;
    memcpy(p, NPY_MAGIC, NPY_MAGIC_LEN);
    p[6] = (char)major;
    p[7] = 0;
    for (size_t k = 0; k < lenbytes; k++) p[8 + k] = (char)((hlen >> (8 * k)) & 0xff);
    char *h = p + 8 + lenbytes;
    memcpy(h, dict, (size_t)n);
    memset(h + n, ' ', pad);
    h[(size_t)n + pad] = '\n';
    return total;
}

/* Checks the arguments of a write and builds the prefix; *nbytes is the data's size. */
static attn_status write_args(const char *shown, npy_dtype dtype, int ndim, const int64_t *shape,
                              const void *data, char *prefix, size_t cap, size_t *plen, size_t *nbytes) {
    if (dtype != NPY_F16 && dtype != NPY_F32)
        return npy_fail(shown, "npy_write: unknown dtype %d (NPY_F16 or NPY_F32)", (int)dtype);
    if (ndim < 0 || ndim > NPY_MAX_DIMS)
        return npy_fail(shown, "npy_write: ndim %d is out of range 0..%d", ndim, NPY_MAX_DIMS);
    if (ndim > 0 && !shape) return npy_fail(shown, "npy_write: no shape given for %d dimensions", ndim);
    uint64_t count = 1;
    int zero = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return npy_fail(shown, "npy_write: negative dimension %lld (dimension %d)", (long long)shape[d], d);
        zero |= shape[d] == 0;
    }
    if (zero) {
        count = 0;
    } else {
        for (int d = 0; d < ndim; d++) {
            if ((uint64_t)shape[d] > NPY_MAX_BYTES / itemsize(dtype) / count)
                return npy_fail(shown, "npy_write: shape is too large");
            count *= (uint64_t)shape[d];
        }
    }
    *nbytes = (size_t)count * itemsize(dtype);
    if (*nbytes && !data) return npy_fail(shown, "npy_write: no data given for %zu bytes", *nbytes);
    *plen = build_prefix(prefix, cap, dtype, ndim, shape);
    if (*plen == 0) return npy_fail(shown, "npy_write: header does not fit"); /* cannot happen */
    return ATTN_OK;
}

/* "DIR/NAME" for messages. */
static const char *out_shown(const npy_out *o, char *buf, size_t cap) {
    if (!o->dir || !strcmp(o->dir, ".")) snprintf(buf, cap, "%s", o->name);
    else snprintf(buf, cap, "%s%s%s", o->dir, o->dir[strlen(o->dir) - 1] == '/' ? "" : "/", o->name);
    return buf;
}

/* A name nobody can have planted on purpose: NAME.PID.RANDOM.tmp. O_EXCL makes a collision harmless
 * anyway (it fails, and the next name is tried). */
static void tmp_name(npy_out *o, unsigned attempt) {
    static atomic_uint serial;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40) ^
                 ((uint64_t)atomic_fetch_add(&serial, 1) << 20) ^ attempt ^ (uint64_t)(uintptr_t)o;
    x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull; /* spread the bits over the 12 hex digits shown */
    x ^= x >> 29;
    snprintf(o->tmp, sizeof o->tmp, "%s.%ld.%012llx.tmp", o->name, (long)getpid(),
             (unsigned long long)(x & 0xffffffffffffull));
}

attn_status npy_out_create(npy_out *o, int dirfd, const char *dir, const char *name) {
    memset(o, 0, sizeof *o);
    o->fd = o->held = -1;
    o->dirfd = dirfd;
    o->dir = dir;
    char shown[8192];
    if (!name || !*name || strchr(name, '/') || strlen(name) >= sizeof o->name)
        return npy_fail(name ? name : "(null name)", "npy_out_create: the name must be 1..%zu bytes without '/'",
                        sizeof o->name - 1);
    snprintf(o->name, sizeof o->name, "%s", name);
    /* O_EXCL: a new file or nothing, never one planted there (a symlink to another file, a FIFO, a
     * file of another user). O_NOFOLLOW says the same for symlinks. Mode 0666 less the umask, as any
     * new file gets. */
    for (unsigned attempt = 0; attempt < 100; attempt++) {
        tmp_name(o, attempt);
        o->fd = openat(dirfd, o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (o->fd >= 0 || errno != EEXIST) break;
    }
    if (o->fd < 0) {
        int e = errno;
        o->tmp[0] = '\0';
        return npy_fail(out_shown(o, shown, sizeof shown), "cannot create its temporary file: %s", strerror(e));
    }
    /* a lock on it for as long as it may be renamed, which npy_out_sweep respects: held through a
     * second descriptor, so that npy_out_write still closes (and checks the close of) the first */
    o->held = flock(o->fd, LOCK_SH | LOCK_NB) == 0 ? fcntl(o->fd, F_DUPFD_CLOEXEC, 0) : -1;
    o->state = 1;
    return ATTN_OK;
}

static int write_all(int fd, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

attn_status npy_out_write(npy_out *o, npy_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    char shown[8192], prefix[1024];
    out_shown(o, shown, sizeof shown);
    if (o->state != 1) return npy_fail(shown, "npy_out_write: not a freshly created output");
    size_t plen = 0, nbytes = 0;
    attn_status st = write_args(shown, dtype, ndim, shape, data, prefix, sizeof prefix, &plen, &nbytes);
    const char *what = NULL;
    int e = 0;
    if (st == ATTN_OK) {
        if (write_all(o->fd, prefix, plen) != 0) what = "cannot write the header", e = errno;
        else if (nbytes && write_all(o->fd, data, nbytes) != 0) what = "cannot write the data", e = errno;
        else if (fsync(o->fd) != 0) what = "cannot flush the data to disk", e = errno;
    }
    if (close(o->fd) != 0 && st == ATTN_OK && !what) what = "cannot close", e = errno;
    o->fd = -1;
    o->state = 2;
    if (st == ATTN_OK && what) st = npy_fail(shown, "%s: %s", what, strerror(e));
    if (st != ATTN_OK) npy_out_discard(o);
    return st;
}

/* The temporary's lock let go: it is renamed or removed. */
static void let_go(npy_out *o) {
    if (o->held >= 0) close(o->held);
    o->held = -1;
}

void npy_out_discard(npy_out *o) {
    if (!o || o->state == 0) return;
    if (o->fd >= 0) close(o->fd);
    if (o->tmp[0]) unlinkat(o->dirfd, o->tmp, 0);
    let_go(o);
    o->fd = -1;
    o->tmp[0] = '\0';
    o->state = 0;
}

/* At most this many names in one commit (outputs and stale names together). */
#define NPY_COMMIT_MAX 8

/* A hard link to what is now at NAME, under a temporary name, so that a commit that fails can put it
 * back. 1: linked (b->tmp is its name); 0: nothing is at NAME; -1: it cannot be linked (a directory,
 * or a file system without hard links), and the commit goes on without a backup of it. */
static int backup(npy_out *b, int dirfd, const char *dir, const char *name) {
    memset(b, 0, sizeof *b);
    b->fd = b->held = -1, b->dirfd = dirfd, b->dir = dir;
    snprintf(b->name, sizeof b->name, "%s", name);
    for (unsigned attempt = 0; attempt < 100; attempt++) {
        tmp_name(b, attempt);
        if (linkat(dirfd, name, dirfd, b->tmp, 0) == 0) return 1; /* the link itself, not its target */
        if (errno != EEXIST) break;
    }
    b->tmp[0] = '\0';
    return errno == ENOENT ? 0 : -1;
}

/* Undoes the first `ntouched` changes of a commit (names[i] removed or replaced): each old file comes
 * back from its backup, and a name that held nothing is removed again, so no new file stays beside
 * an old partner. had[i] is backup()'s answer. Returns 1 when the directory is as it was. */
static int roll_back(int dirfd, const char *const *names, npy_out *bak, const int *had, int ntouched) {
    int all = 1;
    for (int i = 0; i < ntouched; i++) {
        if (had[i] == 1 && renameat(dirfd, bak[i].tmp, dirfd, names[i]) == 0) {
            bak[i].tmp[0] = '\0';
            continue;
        }
        unlinkat(dirfd, names[i], 0);
        all &= had[i] == 0;
    }
    return all;
}

/* Under an flock of the directory: each name to change (stale names first, then the outputs) gets a
 * backup link of what it holds now; then the stale names are removed and the outputs renamed onto
 * their names. If one step fails, the steps before it are undone from the backups, so the directory
 * holds its old files again rather than a new file beside an old partner, or nothing; the backups go. */
static attn_status commit_locked(npy_out *outs, int n, const char *const *stale, int nstale) {
    char shown[8192];
    const int dirfd = outs[0].dirfd, total = nstale + n;
    const char *names[NPY_COMMIT_MAX];
    npy_out bak[NPY_COMMIT_MAX];
    int had[NPY_COMMIT_MAX];
    for (int i = 0; i < total; i++) {
        names[i] = i < nstale ? stale[i] : outs[i - nstale].name;
        had[i] = backup(&bak[i], dirfd, outs[0].dir, names[i]);
    }
    attn_status st = ATTN_OK;
    int done = 0;
    for (; done < total; done++) {
        npy_out *o = done < nstale ? NULL : &outs[done - nstale];
        int ok = o ? renameat(dirfd, o->tmp, dirfd, o->name) == 0
                   : unlinkat(dirfd, names[done], 0) == 0 || errno == ENOENT;
        if (!ok) {
            const int e = errno;
            npy_out shownat = outs[0];
            snprintf(shownat.name, sizeof shownat.name, "%s", names[done]);
            const int all = roll_back(dirfd, names, bak, had, done);
            st = npy_fail(out_shown(&shownat, shown, sizeof shown), "%s: %s%s",
                          o ? "cannot rename the temporary file onto it"
                            : "cannot remove it (left from an earlier run)",
                          strerror(e),
                          !done ? ""
                          : all ? " (the files changed before it were put back as they were)"
                                : " (the new files written before it were removed, not left unpaired)");
            break;
        }
        if (o) o->tmp[0] = '\0', o->state = 0, let_go(o);
    }
    for (int i = 0; i < total; i++)
        if (bak[i].tmp[0]) unlinkat(dirfd, bak[i].tmp, 0);
    return st;
}

/* The PID in `entry` when it is a temporary of `name` as tmp_name writes them (NAME.PID.RANDOM.tmp, 12
 * lower-case hex digits), else 0. */
static long tmp_owner(const char *entry, const char *name) {
    const size_t n = strlen(name);
    if (strncmp(entry, name, n) || entry[n] != '.') return 0;
    const char *pid = entry + n + 1, *hex = pid + strspn(pid, "0123456789") + 1;
    if (hex - pid < 2 || hex - pid > 11 || hex[-1] != '.') return 0; /* 1..10 digits: PIDs < 2^31 */
    if (strspn(hex, "0123456789abcdef") != 12 || strcmp(hex + 12, ".tmp")) return 0;
    const long v = strtol(pid, NULL, 10);
    return v > 0 && v <= 0x7fffffffL ? v : 0;
}

/* Removes `entry`, a temporary of process pid, if that run has ended: the process is gone (ESRCH: not
 * merely another user's, EPERM), and the entry is a regular file that nobody holds a lock on (taken here
 * before the unlink, so that no writer can take it in between). 1 when removed. */
static int remove_if_left(int dirfd, const char *entry, long pid) {
    if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) return 0;
    const int fd = openat(dirfd, entry, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat sb;
    const int gone = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
                     unlinkat(dirfd, entry, 0) == 0;
    close(fd);
    return gone;
}

int npy_out_sweep(int dirfd, const char *const *names, int n) {
    const int locked = flock(dirfd, LOCK_EX | LOCK_NB) == 0; /* else unsupported (then unlocked), or busy */
    if (!locked && (errno == EWOULDBLOCK || errno == EINTR)) return 0;
    const int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* closedir closes it */
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0) close(fd);
    int removed = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        for (int i = 0; i < n; i++) {
            const long pid = tmp_owner(e->d_name, names[i]);
            if (pid) {
                removed += remove_if_left(dirfd, e->d_name, pid);
                break;
            }
        }
    if (d) closedir(d);
    if (locked) flock(dirfd, LOCK_UN);
    return removed;
}

/* The directory's lock, polled every 10 ms: a blocking flock waited as long as another process held it,
 * deaf to build/attn's held signals. 1: locked; 0: flock unsupported here (some network file systems:
 * the renames go ahead unlocked, as before); -1: busy past wait_ms, or stop() said so (message set). */
static int lock_dir(const npy_out *o, int wait_ms, int (*stop)(void)) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (flock(o->dirfd, LOCK_EX | LOCK_NB) == 0) return 1;
        if (errno != EWOULDBLOCK && errno != EINTR) return 0;
        if (stop && stop())
            return npy_fail(o->dir, "interrupted while waiting for another process's lock (flock) on it"), -1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000.0 + (now.tv_nsec - t0.tv_nsec) / 1e6 >= wait_ms)
            return npy_fail(o->dir, "busy: another process has held a lock (flock) on the directory for %g s",
                            wait_ms / 1000.0),
                   -1;
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL); /* a signal cuts it short: stop() then sees it */
    }
}

attn_status npy_out_commit(npy_out *outs, int n, const char *const *stale, int nstale) {
    return npy_out_commit_wait(outs, n, stale, nstale, NPY_LOCK_WAIT_MS, NULL);
}

attn_status npy_out_commit_wait(npy_out *outs, int n, const char *const *stale, int nstale, int wait_ms,
                                int (*stop)(void)) {
    char shown[8192];
    attn_status st = ATTN_OK;
    if (n < 1) return npy_fail("npy_out_commit", "no outputs given");
    if (nstale < 0 || n + nstale > NPY_COMMIT_MAX)
        return npy_fail("npy_out_commit", "at most %d names in one commit (got %d outputs, %d stale)",
                        NPY_COMMIT_MAX, n, nstale);
    for (int i = 0; i < n && st == ATTN_OK; i++)
        if (outs[i].state != 2 || outs[i].dirfd != outs[0].dirfd)
            st = npy_fail(out_shown(&outs[i], shown, sizeof shown),
                          "npy_out_commit: not written, or in another directory");
    /* Two runs saving to one directory commit one after the other, so the pair that stays is one
     * run's (lock_dir). */
    const int dirfd = outs[0].dirfd;
    const int locked = st == ATTN_OK ? lock_dir(&outs[0], wait_ms, stop) : 0;
    if (locked < 0) st = ATTN_EIO;
    if (st == ATTN_OK) st = commit_locked(outs, n, stale, nstale);
    /* The renames themselves on disk; EINVAL: the file system cannot sync a directory. */
    if (st == ATTN_OK && fsync(dirfd) != 0 && errno != EINVAL && errno != EROFS)
        st = npy_fail(out_shown(&outs[0], shown, sizeof shown), "cannot flush the directory: %s", strerror(errno));
    if (locked > 0) flock(dirfd, LOCK_UN);
    for (int i = 0; i < n; i++) npy_out_discard(&outs[i]);
    return st;
}

attn_status npy_write(const char *path, npy_dtype dtype, int ndim, const int64_t *shape,
                      const void *data) {
    if (!path || !*path) return npy_fail("(null path)", "npy_write: no path given");
    /* The directory part, opened once: the file is created and renamed inside that directory. */
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base) return npy_fail(path, "npy_write: the path names a directory, not a file");
    char *dir = NULL;
    if (slash) {
        size_t dl = slash == path ? 1 : (size_t)(slash - path);
        dir = attn_alloc(dl + 1);
        if (!dir) return npy_oom(path, dl + 1);
        memcpy(dir, path, dl);
        dir[dl] = '\0';
    }
    int dirfd = open(dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        attn_status st = npy_fail(path, "cannot open its directory: %s", strerror(errno));
        free(dir);
        return st;
    }
    npy_out o;
    attn_status st = npy_out_create(&o, dirfd, dir ? dir : ".", base);
    if (st == ATTN_OK) st = npy_out_write(&o, dtype, ndim, shape, data);
    if (st == ATTN_OK) st = npy_out_commit(&o, 1, NULL, 0);
    npy_out_discard(&o);
    close(dirfd);
    free(dir);
    return st;
}
