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

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Sets "NAME: <formatted text>" as the last error and returns ATTN_EIO. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static attn_status npy_fail(const char *name, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return attn_fail(ATTN_EIO, "%s: %s", name ? name : "(unnamed .npy)", msg);
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

/* Validates a whole image: everything but copying the data. On success, *a has dtype, ndim, shape
 * and count (data NULL), and the data is buf[*data_off .. *data_off + *nbytes), which ends exactly
 * at len. */
static attn_status parse_image(const unsigned char *buf, size_t len, const char *name, npy_array *a,
                               size_t *data_off, size_t *nbytes) {
    if (len == 0) return npy_fail(name, "empty file (0 bytes), not a .npy file");
    size_t m = len < NPY_MAGIC_LEN ? len : NPY_MAGIC_LEN;
    if (memcmp(buf, NPY_MAGIC, m) != 0) return npy_fail(name, "not a .npy file (bad magic)");
    if (len < NPY_MAGIC_LEN + 2)
        return npy_fail(name, "truncated header: %zu bytes, too short for the magic and version", len);
    unsigned major = buf[6], minor = buf[7];
    if (!((major == 1 || major == 2 || major == 3) && minor == 0))
        return npy_fail(name, "unsupported .npy format version %u.%u (supported: 1.0, 2.0, 3.0)", major, minor);
    size_t lenbytes = major == 1 ? 2 : 4;
    size_t prefix = NPY_MAGIC_LEN + 2 + lenbytes;
    if (len < prefix)
        return npy_fail(name, "truncated header: %zu bytes, too short for the header length field", len);
    uint64_t hlen = 0;
    for (size_t k = 0; k < lenbytes; k++) hlen |= (uint64_t)buf[8 + k] << (8 * k);
    if (hlen > NPY_MAX_HEADER)
        return npy_fail(name, "header length %llu is too large (limit %zu)", (unsigned long long)hlen,
                        NPY_MAX_HEADER);
    if (hlen > len - prefix)
        return npy_fail(name, "truncated header: header length %llu runs past the end of the file (%zu bytes)",
                        (unsigned long long)hlen, len);
    const unsigned char *h = buf + prefix;
    for (size_t k = 0; k < hlen; k++) {
        unsigned char ch = h[k];
        if (ch >= 0x80)
            return npy_fail(name, "header has a non-ASCII byte 0x%02x at byte %zu", ch, prefix + k);
        if (ch < 0x20 && !is_space(ch))
            return npy_fail(name, "header has a control byte 0x%02x at byte %zu", ch, prefix + k);
        if (ch == 0x7f) return npy_fail(name, "header has a control byte 0x7f at byte %zu", prefix + k);
    }

    cursor c = {(const char *)h, (size_t)hlen, 0, prefix, name};
    attn_status st = parse_dict(&c, a);
    if (st != ATTN_OK) return st;

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
    size_t have = len - prefix - (size_t)hlen;
    if (have < want)
        return npy_fail(name, "truncated: expected %zu bytes of data, found %zu", want, have);
    if (have > want) return npy_fail(name, "trailing garbage: %zu bytes after the data", have - want);
    *data_off = prefix + (size_t)hlen;
    *nbytes = want;
    return ATTN_OK;
}

attn_status npy_parse(const void *buf, size_t len, const char *name, npy_array *out) {
    if (!name) name = "(unnamed .npy)";
    if (!out) return npy_fail(name, "npy_parse: no output array given");
    memset(out, 0, sizeof *out);
    if (!buf && len) return npy_fail(name, "npy_parse: NULL buffer of %zu bytes", len);
    if (!buf) buf = "";
    npy_array a;
    memset(&a, 0, sizeof a);
    size_t off = 0, nbytes = 0;
    attn_status st = parse_image((const unsigned char *)buf, len, name, &a, &off, &nbytes);
    if (st != ATTN_OK) return st;
    a.data = malloc(nbytes ? nbytes : 1);
    if (!a.data) return npy_fail(name, "out of memory for %zu bytes of data", nbytes);
    if (nbytes) memcpy(a.data, (const unsigned char *)buf + off, nbytes);
    *out = a;
    return ATTN_OK;
}

attn_status npy_read(const char *path, npy_array *out) {
    if (!path) path = "(null path)";
    if (!out) return npy_fail(path, "npy_read: no output array given");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return npy_fail(path, "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        int e = errno;
        fclose(f);
        return npy_fail(path, "cannot stat: %s", strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        fclose(f);
        return npy_fail(path, "not a regular file");
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > NPY_MAX_BYTES) {
        fclose(f);
        return npy_fail(path, "file size %lld is out of range", (long long)sb.st_size);
    }
    size_t size = (size_t)sb.st_size;
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) {
        fclose(f);
        return npy_fail(path, "out of memory reading %zu bytes", size);
    }
    size_t got = size ? fread(buf, 1, size, f) : 0;
    int read_err = ferror(f);
    int e = errno;
    /* One more byte means the file grew after fstat; read it as "trailing garbage". */
    unsigned char extra;
    int grew = !read_err && got == size && fread(&extra, 1, 1, f) == 1;
    fclose(f);
    if (read_err) {
        free(buf);
        return npy_fail(path, "read error: %s", strerror(e));
    }
    if (grew) {
        free(buf);
        return npy_fail(path, "the file changed size while it was being read");
    }
    npy_array a;
    memset(&a, 0, sizeof a);
    size_t off = 0, nbytes = 0;
    attn_status st = parse_image(buf, got, path, &a, &off, &nbytes);
    if (st != ATTN_OK) {
        free(buf);
        return st;
    }
    /* Keep the one buffer: move the data to its front and give back the header's bytes. */
    memmove(buf, buf + off, nbytes);
    unsigned char *shrunk = realloc(buf, nbytes ? nbytes : 1);
    a.data = shrunk ? shrunk : buf;
    *out = a;
    return ATTN_OK;
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

attn_status npy_write(const char *path, npy_dtype dtype, int ndim, const int64_t *shape,
                      const void *data) {
    if (!path || !*path) return npy_fail("(null path)", "npy_write: no path given");
    if (dtype != NPY_F16 && dtype != NPY_F32)
        return npy_fail(path, "npy_write: unknown dtype %d (NPY_F16 or NPY_F32)", (int)dtype);
    if (ndim < 0 || ndim > NPY_MAX_DIMS)
        return npy_fail(path, "npy_write: ndim %d is out of range 0..%d", ndim, NPY_MAX_DIMS);
    if (ndim > 0 && !shape) return npy_fail(path, "npy_write: no shape given for %d dimensions", ndim);
    uint64_t count = 1;
    int zero = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return npy_fail(path, "npy_write: negative dimension %lld (dimension %d)", (long long)shape[d], d);
        zero |= shape[d] == 0;
    }
    if (zero) {
        count = 0;
    } else {
        for (int d = 0; d < ndim; d++) {
            if ((uint64_t)shape[d] > NPY_MAX_BYTES / itemsize(dtype) / count)
                return npy_fail(path, "npy_write: shape is too large");
            count *= (uint64_t)shape[d];
        }
    }
    size_t nbytes = (size_t)count * itemsize(dtype);
    if (nbytes && !data) return npy_fail(path, "npy_write: no data given for %zu bytes", nbytes);

    char prefix[1024];
    size_t plen = build_prefix(prefix, sizeof prefix, dtype, ndim, shape);
    if (plen == 0) return npy_fail(path, "npy_write: header does not fit"); /* cannot happen */

    size_t pl = strlen(path);
    char *tmp = malloc(pl + 5);
    if (!tmp) return npy_fail(path, "out of memory");
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp", 5);

    FILE *f = fopen(tmp, "wb");
    if (!f) {
        attn_status st = npy_fail(path, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    const char *what = NULL;
    int e = 0;
    if (fwrite(prefix, 1, plen, f) != plen) what = "cannot write the header", e = errno;
    else if (nbytes && fwrite(data, 1, nbytes, f) != nbytes) what = "cannot write the data", e = errno;
    if (fclose(f) != 0 && !what) what = "cannot close", e = errno;
    if (!what && rename(tmp, path) != 0) what = "cannot rename the .tmp file onto it", e = errno;
    if (what) {
        remove(tmp);
        free(tmp);
        return npy_fail(path, "%s: %s", what, e ? strerror(e) : "unknown error");
    }
    free(tmp);
    return ATTN_OK;
}
