/*
 * decode_cpu.c: stage 15m, flash-decoding as plain C on the CPU: the model of stage 15's kernel
 * (decode_kernel.cuh) and its combine.
 *
 * Two "launches", as the GPU runs them:
 *   split    one block per (sequence b, K/V head g, chunk c): B * H_kv * S blocks. The block's rows
 *            are the R = (H / H_kv) * N_q query rows that read head g (the grouped heads packed as
 *            rows: row r is query head g * (H / H_kv) + r / N_q, query r % N_q), so each key of the
 *            chunk is read once for all of them. It walks its chunk in key tiles of DECODE_BC keys.
 *            Each tile's keys are split among WK warps (decode_key_warps: 4 at R <= 16), warp w
 *            taking keys w Bc / WK .. of every tile with its own online softmax (stage 04's m, l,
 *            alpha, exp2 with scale * log2 e); the block then merges its WK warp partials by their
 *            LSEs, in warp order, and writes per row the chunk's partial O_c = O / l in fp32 and
 *            LSE_c = m ln 2 + ln l (the m in log2 units).
 *   combine  one block per (b, g): each row's S partials merged by their LSEs in chunk order, with
 *            stage 10's merge (cp_merge_row), then O rounded to 16 bits and the LSE stored.
 * A row that sees none of a chunk's keys (causal: the chunk lies past the row's last key; or a chunk
 * past the sequence's end) has l = 0: its partial is O_c = 0 and LSE_c = -inf, whose merge weight is
 * exactly 0 (cp_merge.h), so no 0/0 reaches O. The same holds for a warp's share of a chunk.
 *
 * P is rounded to the inputs' 16 bits before P V, as the kernel's mma takes it; l sums it unrounded.
 * The kernel's rows are padded to 16 and split over lanes; the model keeps whole rows and no padding.
 * Every element is summed in a fixed order whatever the threads: the model is bit-for-bit repeatable.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "10_context_parallel/cp_merge.h"
#include "decode_cpu.h"
#include "half.h"
#include "tiles_cpu.h"

/*
 * choose_chunks: the number of chunks S per sequence. The grid is B * H_kv * S blocks, and decoding
 * is bound by reading the cache (README.md: about N_q H / H_kv flops a byte), so the aim is every SM
 * streaming keys.
 *   1. B * H_kv >= sms: the blocks already cover every SM (32 sequences of 8 K/V heads: 256 blocks on
 *      132 SMs); S = 1, as a split would only add the partials' traffic and a second launch.
 *   2. Else S = ceil(sms / (B * H_kv)): one block per SM at least. One sequence of 8 K/V heads on 132
 *      SMs: S = 17, 136 blocks, where without the split 8 SMs would read the whole cache.
 *   3. Each chunk keeps DECODE_MIN_CHUNK_KEYS = 256 keys at least: a chunk's partials cost 2 * 4 (D + 1)
 *      bytes a row (written, then read by the combine) against 2 * 2 D bytes a key of K and V. At 256
 *      keys, D = 128 that is 4128 bytes for R = 4 rows (N_q 1, 4 query heads a K/V head) against 128
 *      KiB of keys, 3%; at R = 64 (N_q 16) already half as much again as the keys themselves.
 *   4. At most DECODE_MAX_CHUNKS = 128, so that the combine's walk over one row's partials stays short.
 * A choice to start from, not a tuned one: it ignores that a second, partly filled wave of blocks costs
 * a whole wave's time.
 */
int64_t choose_chunks(int64_t B, int64_t H_kv, int64_t max_len, int sms) {
    const int64_t blocks = B * H_kv, sm = sms > 0 ? sms : DECODE_DEFAULT_SMS;
    if (blocks >= sm) return 1;
    int64_t S = (sm + blocks - 1) / blocks;
    const int64_t by_keys = (max_len + DECODE_MIN_CHUNK_KEYS - 1) / DECODE_MIN_CHUNK_KEYS;
    if (S > by_keys) S = by_keys;
    if (S > DECODE_MAX_CHUNKS) S = DECODE_MAX_CHUNKS;
    return S > 1 ? S : 1;
}

/* ---- arguments -------------------------------------------------------------------------------- */

static attn_status validate_shape(const decode_shape *s) {
    if (s->B < 1 || s->B > ATTN_MAX_B)
        return attn_fail(ATTN_EINVAL, "decode: B must be 1..%d (got %lld)", ATTN_MAX_B, (long long)s->B);
    if (s->H < 1 || s->H > ATTN_MAX_H)
        return attn_fail(ATTN_EINVAL, "decode: H must be 1..%d (got %lld)", ATTN_MAX_H, (long long)s->H);
    if (s->H_kv < 1 || s->H_kv > s->H || s->H % s->H_kv)
        return attn_fail(ATTN_EINVAL, "decode: H_kv must divide H = %lld, 1..%lld (got %lld)",
                         (long long)s->H, (long long)s->H, (long long)s->H_kv);
    if (s->N_q < 1 || s->N_q > ATTN_MAX_N)
        return attn_fail(ATTN_EINVAL, "decode: N_q must be 1..%d (got %lld)", ATTN_MAX_N, (long long)s->N_q);
    if (s->D < 1 || s->D > ATTN_MAX_D)
        return attn_fail(ATTN_EINVAL, "decode: D must be 1..%d (got %lld)", ATTN_MAX_D, (long long)s->D);
    if (s->causal != 0 && s->causal != 1)
        return attn_fail(ATTN_EINVAL, "decode: causal must be 0 or 1 (got %d)", s->causal);
    if (!isfinite(s->scale))
        return attn_fail(ATTN_EINVAL, "decode: scale must be finite (got %g)", (double)s->scale);
    if (s->dtype != ATTN_F16 && s->dtype != ATTN_BF16)
        return attn_fail(ATTN_EINVAL, "decode: dtype must be fp16 or bf16");
    if (!s->cache_len) return attn_fail(ATTN_EINVAL, "decode: cache_len must point to B lengths (got NULL)");
    for (int64_t b = 0; b < s->B; b++) {
        const int64_t len = s->cache_len[b];
        if (len < 1 || len > ATTN_MAX_N)
            return attn_fail(ATTN_EINVAL, "decode: cache_len[%lld] must be 1..%d (got %lld)", (long long)b,
                             ATTN_MAX_N, (long long)len);
        if (s->causal && s->N_q > len)
            return attn_fail(ATTN_EINVAL,
                             "decode: causal needs N_q <= cache_len[%lld], i.e. N_q 1..%lld (got N_q %lld): "
                             "the new queries are the cache's last N_q positions",
                             (long long)b, (long long)len, (long long)s->N_q);
    }
    return ATTN_OK;
}

/* Every block-table entry a sequence uses (its first ceil(cache_len / page_size)) names a page; read
 * only where the table is on the host (read_table). */
static attn_status validate_cache(const decode_shape *s, const decode_cache *c, int read_table) {
    if (!c->k || !c->v) return attn_fail(ATTN_EINVAL, "decode: the K and V pools must not be NULL");
    if (c->page_size < 1 || c->page_size > ATTN_MAX_N)
        return attn_fail(ATTN_EINVAL, "decode: page_size must be 1..%d (got %lld)", ATTN_MAX_N,
                         (long long)c->page_size);
    if (c->num_pages < 1 || c->num_pages > INT32_MAX)
        return attn_fail(ATTN_EINVAL, "decode: num_pages must be 1..%d (got %lld)", INT32_MAX,
                         (long long)c->num_pages);
    if (!c->block_table)
        return attn_fail(ATTN_EINVAL,
                         "decode: block_table must point to B x table_stride page ids (got NULL)");
    for (int64_t b = 0; b < s->B; b++) {
        const int64_t pages = (s->cache_len[b] + c->page_size - 1) / c->page_size;
        if (c->table_stride < pages)
            return attn_fail(
                ATTN_EINVAL,
                "decode: table_stride must be at least %lld, the pages of cache_len[%lld] = %d at "
                "page_size %lld (got %lld)",
                (long long)pages, (long long)b, s->cache_len[b], (long long)c->page_size,
                (long long)c->table_stride);
        for (int64_t e = 0; e < pages && read_table; e++) {
            const int32_t id = c->block_table[b * c->table_stride + e];
            if (id < 0 || id >= c->num_pages)
                return attn_fail(
                    ATTN_EINVAL,
                    "decode: block_table[%lld][%lld] must be a page 0..%lld of the pool (got %d)",
                    (long long)b, (long long)e, (long long)c->num_pages - 1, id);
        }
    }
    return ATTN_OK;
}

static attn_status validate(const decode_shape *s, const decode_cache *c, const decode_opts *opt,
                            int read_table) {
    if (!s || !c) return attn_fail(ATTN_EINVAL, "decode: the shape and the cache must not be NULL");
    attn_status st = validate_shape(s);
    if (st == ATTN_OK) st = validate_cache(s, c, read_table);
    if (st == ATTN_OK && opt && (opt->chunks < 0 || opt->chunks > ATTN_MAX_N))
        return attn_fail(ATTN_EINVAL, "decode: chunks must be 0 (choose) or 1..%d (got %lld)", ATTN_MAX_N,
                         (long long)opt->chunks);
    if (st == ATTN_OK && opt && opt->sms < 0)
        return attn_fail(ATTN_EINVAL, "decode: sms must be 0 (default) or more (got %d)", opt->sms);
    return st;
}

attn_status decode_validate(const decode_shape *s, const decode_cache *c, const decode_opts *opt) {
    return validate(s, c, opt, 1);
}

attn_status decode_validate_device(const decode_shape *s, const decode_cache *c, const decode_opts *opt) {
    return validate(s, c, opt, 0);
}

/* ---- the split: one block per (sequence, K/V head, chunk) ------------------------------------- */

typedef struct {
    const decode_shape *s;
    const decode_cache *c;
    const uint16_t *q;
    decode_bug bug;
    int64_t S, G, R; /* chunks a sequence, query heads a K/V head, rows a block (G * N_q) */
    int64_t WK;      /* warps sharing a tile's keys (decode_key_warps(R)), Bc / WK keys each */
    float sl2;       /* |scale| log2 e, the one multiplier of exp2 (attn_exp2_scale) */
    float *part_o;   /* [B, H_kv, S, R, D] fp32: each chunk's O / l */
    float *part_lse; /* [B, H_kv, S, R]: each chunk's LSE, natural log */
} decode_ctx;

/* One thread's tiles, reused by every block it runs (the block's shared memory and registers). */
typedef struct {
    float *Qs;    /* R x D: the block's query rows, times the sign of scale */
    float *Kt;    /* D x DECODE_BC: a key tile, transposed */
    float *Vs;    /* DECODE_BC x D */
    float *S;     /* R x Bc / WK: one warp's scores, then P */
    float *O;     /* WK x R x D: each warp's accumulator */
    float *m, *l; /* WK x R: each warp's running max (raw score units) and sum */
    float *row;   /* D: one warp's partial of one row, on its way into the merge */
} decode_scratch;

/* The query head that row group hh (0 .. G-1) of K/V head g's block is: g G + hh. */
static int64_t query_head(const decode_ctx *x, int64_t g, int64_t hh) {
    if (x->bug == DECODE_BUG_HEAD_MODULO) return hh * x->s->H_kv + g; /* planted: h % H_kv == g */
    return g * x->G + hh;
}

/* Key j of sequence b, K/V head g, in `pool`: through the block table to its page and slot. */
static const uint16_t *cache_row(const decode_ctx *x, const uint16_t *pool, int64_t b, int64_t g, int64_t j) {
    const decode_cache *c = x->c;
    const int64_t entry = b * c->table_stride + j / c->page_size;
    const int64_t page = x->bug == DECODE_BUG_IGNORE_TABLE ? entry % c->num_pages /* planted */
                                                           : (int64_t)c->block_table[entry];
    return pool + ((page * x->s->H_kv + g) * c->page_size + j % c->page_size) * x->s->D;
}

static void load_block_queries(const decode_ctx *x, decode_scratch *w, int64_t b, int64_t g) {
    const decode_shape *s = x->s;
    const float sign = s->scale < 0.0f ? -1.0f : 1.0f; /* a negative scale runs as -Q, |scale| */
    for (int64_t r = 0; r < x->R; r++) {
        const int64_t h = query_head(x, g, r / s->N_q), i = r % s->N_q;
        const uint16_t *src = x->q + ((b * s->H + h) * s->N_q + i) * s->D;
        for (int64_t d = 0; d < s->D; d++) w->Qs[r * s->D + d] = attn_to_f32(src[d], s->dtype) * sign;
    }
}

/* Keys k0 .. k0+n-1 into Kt (transposed, n columns) and Vs, page by page. */
static void load_key_tile(const decode_ctx *x, decode_scratch *w, int64_t b, int64_t g, int64_t k0, int n) {
    const int64_t D = x->s->D;
    for (int c = 0; c < n; c++) {
        const uint16_t *k = cache_row(x, x->c->k, b, g, k0 + c), *v = cache_row(x, x->c->v, b, g, k0 + c);
        for (int64_t d = 0; d < D; d++) {
            w->Kt[d * n + c] = attn_to_f32(k[d], x->s->dtype);
            w->Vs[c * D + d] = attn_to_f32(v[d], x->s->dtype);
        }
    }
}

/* Causal, bottom-right: query i of N_q sees keys 0 .. len - N_q + i; the rest of the tile is -inf. */
static void mask_causal(const decode_ctx *x, decode_scratch *w, int64_t len, int64_t k0, int n) {
    for (int64_t r = 0; r < x->R; r++) {
        const int64_t last = len - x->s->N_q + r % x->s->N_q;
        for (int c = 0; c < n; c++)
            if (k0 + c > last) w->S[r * n + c] = -INFINITY;
    }
}

static float round16(float x, attn_dtype t) { return attn_to_f32(attn_from_f32(x, t), t); }

/* Stage 04's step for every row, over warp w's n keys of the tile (P in S, n to a row): m_new =
 * max(m, max_j s_j), alpha = 2^((m - m_new) sl2), l and O rescaled by alpha, P = 2^((s - m_new) sl2)
 * added. A row with no visible key yet keeps m = -inf and takes m_new sl2 as 0, so that no
 * -inf - (-inf) is formed: its P and alpha are 2^-inf = 0. alpha subtracts two rounded products, so
 * that an unchanged max gives exactly 1 (06m says why: an fma's unrounded product drifted the LSE). */
static void online_softmax_update(const decode_ctx *x, decode_scratch *w, int64_t part, int c0, int n) {
    const int64_t D = x->s->D;
    float *m = w->m + part * x->R, *l = w->l + part * x->R;
    for (int64_t r = 0; r < x->R; r++) {
        float *s = w->S + r * n, *O = w->O + (part * x->R + r) * D;
        const float mx = fmaxf(m[r], cpu_tile_row_max(s, n));
        const float msc = (mx == -INFINITY ? 0.0f : mx) * x->sl2;
        const float alpha = exp2f(m[r] * x->sl2 - msc);
        float rowsum = 0.0f;
        for (int c = 0; c < n; c++) {
            const float p = exp2f(fmaf(s[c], x->sl2, -msc));
            rowsum += p;
            s[c] = round16(p, x->s->dtype); /* the mma's 16-bit A operand */
        }
        m[r] = mx;
        l[r] = l[r] * alpha + rowsum;
        for (int64_t d = 0; d < D; d++) O[d] *= alpha;
    }
    cpu_tile_pv(w->O + part * x->R * D, w->S, (int)x->R, n, w->Vs, c0, (int)D);
}

/* The chunk's partial of every row: each warp's O_w = O / l and LSE_w = m sl2 ln 2 + ln l (a warp that
 * saw no key of the row: O_w = 0, LSE_w = -inf, its weight exactly 0), merged in warp order from
 * (-inf, 0) with cp_merge_row, as the kernel merges them in shared memory. */
static void store_partial(const decode_ctx *x, decode_scratch *w, int64_t blk) {
    const int64_t D = x->s->D;
    float *o = x->part_o + blk * x->R * D, *lse = x->part_lse + blk * x->R;
    for (int64_t r = 0; r < x->R; r++) {
        lse[r] = -INFINITY;
        memset(o + r * D, 0, (size_t)D * sizeof(float));
        for (int64_t part = 0; part < x->WK; part++) {
            const int64_t i = part * x->R + r;
            const float l = w->l[i], inv = l > 0.0f ? 1.0f / l : 0.0f;
            for (int64_t d = 0; d < D; d++) w->row[d] = w->O[i * D + d] * inv;
            cp_merge_row(&lse[r], o + r * D, l > 0.0f ? w->m[i] * x->sl2 * ATTN_LN2 + logf(l) : -INFINITY,
                         w->row, D);
        }
    }
}

/* Block blk = (b H_kv + g) S + c: its chunk's keys in tiles of DECODE_BC, each tile's keys split among
 * the WK warps (keys w Bc / WK .. of every tile, fewer or none in a chunk's short last tile), then its
 * partials. */
static void split_block(const decode_ctx *x, decode_scratch *w, int64_t blk) {
    const int64_t c = blk % x->S, bg = blk / x->S, b = bg / x->s->H_kv, g = bg % x->s->H_kv;
    const int64_t len = x->s->cache_len[b], D = x->s->D, kw = DECODE_BC / x->WK;
    int64_t first, end;
    decode_chunk_keys(len, x->S, c, &first, &end);
    load_block_queries(x, w, b, g);
    for (int64_t i = 0; i < x->WK * x->R; i++) w->m[i] = -INFINITY, w->l[i] = 0.0f;
    memset(w->O, 0, (size_t)(x->WK * x->R * D) * sizeof(float));
    for (int64_t k0 = first; k0 < end; k0 += DECODE_BC) {
        const int n = (int)(end - k0 < DECODE_BC ? end - k0 : DECODE_BC);
        load_key_tile(x, w, b, g, k0, n);
        for (int64_t part = 0; part < x->WK && part * kw < n; part++) {
            const int c0 = (int)(part * kw), nw = (int)(n - c0 < kw ? n - c0 : kw);
            cpu_tile_scores(w->S, w->Qs, (int)x->R, w->Kt, n, c0, nw, (int)D);
            if (x->s->causal) mask_causal(x, w, len, k0 + c0, nw);
            online_softmax_update(x, w, part, c0, nw);
        }
    }
    store_partial(x, w, blk);
}

/* ---- the combine: one block per (sequence, K/V head) ------------------------------------------ */

/* Row r's S partials of group bg = b H_kv + g merged into o (D floats) in chunk order, from
 * (LSE = -inf, O = 0), the partial over no key: LSE = log sum_c e^LSE_c, O = sum_c e^(LSE_c - LSE) O_c.
 * Returns the LSE. */
static float merge_partials(const decode_ctx *x, int64_t bg, int64_t r, float *o) {
    const int64_t D = x->s->D, S = x->bug == DECODE_BUG_DROP_LAST_CHUNK ? x->S - 1 : x->S; /* planted */
    float lse = -INFINITY;
    memset(o, 0, (size_t)D * sizeof(float));
    for (int64_t c = 0; c < S; c++) {
        const int64_t part = (bg * x->S + c) * x->R + r;
        cp_merge_row(&lse, o, x->part_lse[part], x->part_o + part * D, D);
    }
    return lse;
}

static void combine_block(const decode_ctx *x, int64_t bg, float *row, uint16_t *o, float *lse) {
    const decode_shape *s = x->s;
    const int64_t b = bg / s->H_kv, g = bg % s->H_kv;
    for (int64_t r = 0; r < x->R; r++) {
        const float l = merge_partials(x, bg, r, row);
        const int64_t dst = (b * s->H + query_head(x, g, r / s->N_q)) * s->N_q + r % s->N_q;
        for (int64_t d = 0; d < s->D; d++) o[dst * s->D + d] = attn_from_f32(row[d], s->dtype);
        if (lse) lse[dst] = l;
    }
}

/* ---- the launches ----------------------------------------------------------------------------- */

static void scratch_free(decode_scratch *w) {
    free(w->Qs), free(w->Kt), free(w->Vs), free(w->S), free(w->O), free(w->m), free(w->l), free(w->row);
}

static int scratch_alloc(decode_scratch *w, int64_t R, int64_t WK, int64_t D) {
    const size_t f = sizeof(float);
    w->Qs = attn_alloc((size_t)(R * D) * f), w->Kt = attn_alloc((size_t)(D * DECODE_BC) * f);
    w->Vs = attn_alloc((size_t)(DECODE_BC * D) * f), w->S = attn_alloc((size_t)(R * DECODE_BC) * f);
    w->O = attn_alloc((size_t)(WK * R * D) * f), w->m = attn_alloc((size_t)(WK * R) * f),
    w->l = attn_alloc((size_t)(WK * R) * f), w->row = attn_alloc((size_t)D * f);
    return w->Qs && w->Kt && w->Vs && w->S && w->O && w->m && w->l && w->row;
}

/* The split kernel: every block of the grid, spread over the threads as the SMs take blocks. Every
 * thread reaches the omp for (and its barrier) even without its tiles: it skips its blocks, and the
 * launch says ENOMEM. */
static int launch_split(const decode_ctx *x) {
    const int64_t blocks = x->s->B * x->s->H_kv * x->S;
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        decode_scratch w;
        const int have = scratch_alloc(&w, x->R, x->WK, x->s->D);
        failed |= !have;
#pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < blocks; blk++)
            if (have) split_block(x, &w, blk);
        scratch_free(&w);
    }
    return failed;
}

static int launch_combine(const decode_ctx *x, uint16_t *o, float *lse) {
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        float *row = attn_alloc((size_t)x->s->D * sizeof(float));
        failed |= !row;
#pragma omp for schedule(dynamic, 1)
        for (int64_t bg = 0; bg < x->s->B * x->s->H_kv; bg++)
            if (row) combine_block(x, bg, row, o, lse);
        free(row);
    }
    return failed;
}

int64_t decode_longest_cache(const decode_shape *s) {
    int64_t max_len = 0;
    for (int64_t b = 0; b < s->B; b++)
        if (s->cache_len[b] > max_len) max_len = s->cache_len[b];
    return max_len;
}

attn_status decode_cpu_paged(const decode_shape *s, const uint16_t *q, const decode_cache *c,
                             const decode_opts *opt, uint16_t *o, float *lse) {
    attn_status st = decode_validate(s, c, opt);
    if (st != ATTN_OK) return st;
    if (!q || !o) return attn_fail(ATTN_EINVAL, "decode: Q and O must not be NULL");
    decode_ctx x = {.s = s,
                    .c = c,
                    .q = q,
                    .bug = opt ? opt->bug : DECODE_EXACT,
                    .G = s->H / s->H_kv,
                    .sl2 = attn_exp2_scale(s->scale)};
    x.R = x.G * s->N_q;
    x.WK = decode_key_warps(x.R);
    if (x.R > ATTN_MAX_N)
        return attn_fail(ATTN_EINVAL,
                         "decode: (H / H_kv) * N_q, the rows of one block, must be 1..%d (got %lld)",
                         ATTN_MAX_N, (long long)x.R);
    x.S = opt && opt->chunks ? opt->chunks
                             : choose_chunks(s->B, s->H_kv, decode_longest_cache(s), opt ? opt->sms : 0);
    const double parts = (double)s->B * (double)s->H_kv * (double)x.S * (double)x.R;
    char size[32];
    attn_size_text(parts * (double)(s->D + 1) * sizeof(float), size, sizeof size);
    if (parts * (double)(s->D + 1) * sizeof(float) < 0x1p46) { /* 64 TiB: past any host's memory */
        x.part_o = attn_alloc((size_t)parts * (size_t)s->D * sizeof(float));
        x.part_lse = attn_alloc((size_t)parts * sizeof(float));
    }
    if (!x.part_o || !x.part_lse)
        st = attn_fail(ATTN_ENOMEM, "decode: cannot allocate the partials of %lld chunks (%s)",
                       (long long)x.S, size);
    else if (launch_split(&x))
        st = attn_fail(ATTN_ENOMEM, "decode: cannot allocate the tiles of one thread");
    else if (launch_combine(&x, o, lse))
        st = attn_fail(ATTN_ENOMEM, "decode: cannot allocate the combine's row");
    free(x.part_o), free(x.part_lse);
    return st;
}

attn_status decode_cpu_contiguous(const decode_shape *s, const uint16_t *q, const uint16_t *k,
                                  const uint16_t *v, int64_t N_max, const decode_opts *opt, uint16_t *o,
                                  float *lse) {
    if (!s || s->B < 1 || s->B > ATTN_MAX_B)
        return attn_fail(ATTN_EINVAL, "decode: B must be 1..%d (got %lld)", ATTN_MAX_B,
                         s ? (long long)s->B : 0LL);
    int32_t *table = attn_alloc((size_t)s->B * sizeof(int32_t));
    if (!table)
        return attn_fail(ATTN_ENOMEM, "decode: cannot allocate the block table of %lld sequences",
                         (long long)s->B);
    for (int64_t b = 0; b < s->B; b++) table[b] = (int32_t)b; /* sequence b owns page b, of N_max keys */
    const decode_cache c = {k, v, s->B, N_max, table, 1};
    const attn_status st = decode_cpu_paged(s, q, &c, opt, o, lse);
    free(table);
    return st;
}

/* ---- the registry's entry ------------------------------------------------------------------- */

attn_status stage15m_run(const attn_problem *p, const attn_args *a) {
    if (p->cu_seqlens_q || p->cu_seqlens_k)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "stage 15m takes no cu_seqlens (its own entry points take per-sequence lengths)");
    if (p->causal && p->N > p->N_k)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "stage 15m: causal needs N <= N_k, the N new queries being the last of N_k "
                         "cached keys (got N %lld, N_k %lld)",
                         (long long)p->N, (long long)p->N_k);
    if (p->N_k < 1 || p->N_k > ATTN_MAX_N) /* cache_len is int32 */
        return attn_fail(ATTN_EINVAL, "stage 15m: N_k must be 1..%d (got %lld)", ATTN_MAX_N,
                         (long long)p->N_k);
    int32_t *len = attn_alloc((size_t)p->B * sizeof(int32_t));
    if (!len)
        return attn_fail(ATTN_ENOMEM, "stage 15m: cannot allocate the cache lengths of %lld sequences",
                         (long long)p->B);
    for (int64_t b = 0; b < p->B; b++) len[b] = (int32_t)p->N_k;
    const decode_shape s = {p->B, p->H, p->H_kv, p->N, p->D, p->causal, p->scale, p->dtype, len};
    const attn_status st = decode_cpu_contiguous(&s, a->q, a->k, a->v, p->N_k, NULL, a->o, a->lse);
    free(len);
    return st;
}
