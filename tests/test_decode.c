/*
 * test_decode.c: stage 15m, flash-decoding's model (15_decode/decode_cpu.c), through its own entry
 * points: per-sequence cache lengths, paged caches with shuffled block tables, forced chunk counts.
 * Each sequence b is checked against the independent double reference as its own problem (B = 1,
 * N = N_q, N_k = cache_len[b], H, H_kv) by the suite's check (attn_check_output: check.c's tolerance,
 * NaN and never-written elements fail), on fresh random inputs, with O and LSE poisoned (all bits
 * set, NaN) before the run. The pool's spare pages and the slots past each sequence's end hold NaN:
 * a model that reads a key it should not writes NaN, which no check passes. Planted bugs
 * (decode_opts.bug) must fail the same check.
 * The kernel, stage 15 (15_decode/decode_gpu.h), runs the same cases on the GPU through
 * decode_gpu_paged (tests decode_gpu::*, skipped with the reason where it cannot run), and through the
 * registry as 15 and 15p; a block table read wrongly must fail there too.
 */
#include <math.h>

#include "15_decode/decode_cpu.h"
#include "half.h"
#include "test_util.h"

#define SPARE_PAGES 3 /* pages of NaN in the pool that no table entry names */

typedef struct {
    decode_shape s;
    int32_t *len;
    attn_inputs *seq; /* sequence b alone: Q [1, H, N_q, D], K and V [1, H_kv, len[b], D] */
    uint16_t *q;      /* [B, H, N_q, D]: the sequences' Q side by side */
    uint16_t *k, *v;  /* the pools (paged) or [B, H_kv, n_max, D] (contiguous) */
    int32_t *table;   /* paged: [B, stride] */
    decode_cache c;   /* paged; page_size 0 in the case: contiguous, through decode_cpu_contiguous */
    int64_t n_max;    /* contiguous: keys a sequence's slot holds, past the longest cache */
    uint16_t *o;
    float *lse;
} decode_case;

static uint64_t next_random(uint64_t *x) { /* xorshift64*: shuffles only */
    *x ^= *x >> 12, *x ^= *x << 25, *x ^= *x >> 27;
    return *x * 0x2545f4914f6cdd1dull;
}

static uint16_t *nan_filled(int64_t elems, attn_dtype t) {
    uint16_t *a = malloc((size_t)elems * sizeof(uint16_t));
    cr_assert(a, "out of memory");
    const uint16_t nan = attn_from_f32(NAN, t);
    for (int64_t e = 0; e < elems; e++) a[e] = nan;
    return a;
}

/* Sequence b's keys into the cache: page by page through the table, or into its contiguous slot. */
static void place_keys(decode_case *t, int64_t b, int64_t ps) {
    const decode_shape *s = &t->s;
    const attn_inputs *in = &t->seq[b];
    for (int64_t g = 0; g < s->H_kv; g++)
        for (int64_t j = 0; j < t->len[b]; j++) {
            const int64_t src = (g * t->len[b] + j) * s->D;
            const int64_t dst =
                ps ? (((int64_t)t->table[b * t->c.table_stride + j / ps] * s->H_kv + g) * ps + j % ps) * s->D
                   : ((b * s->H_kv + g) * t->n_max + j) * s->D;
            memcpy(t->k + dst, in->k + src, (size_t)s->D * sizeof(uint16_t));
            memcpy(t->v + dst, in->v + src, (size_t)s->D * sizeof(uint16_t));
        }
}

/* B sequences of lens[b] keys of dtype dt, fresh inputs from seed; page size ps (pages handed out in a
 * shuffled order), or ps = 0 for the contiguous cache. */
static void case_make_dtype(decode_case *t, int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t D,
                            int causal, const int32_t *lens, int64_t ps, uint64_t seed, attn_dtype dt) {
    memset(t, 0, sizeof *t);
    t->len = malloc((size_t)B * sizeof(int32_t));
    t->seq = calloc((size_t)B, sizeof(attn_inputs));
    t->q = malloc((size_t)(B * H * N_q * D) * sizeof(uint16_t));
    cr_assert(t->len && t->seq && t->q);
    memcpy(t->len, lens, (size_t)B * sizeof(int32_t));
    t->s = (decode_shape){B, H, H_kv, N_q, D, causal, 1.0f / sqrtf((float)D), dt, t->len};
    int64_t max_len = 0, pages = 0;
    for (int64_t b = 0; b < B; b++) {
        attn_problem p = attn_problem_make(1, H, N_q, D, causal);
        p.H_kv = H_kv, p.N_k = lens[b], p.dtype = dt;
        cr_assert_eq(attn_inputs_random(&t->seq[b], &p, seed * 7919 + (uint64_t)b, ATTN_INIT_NORMAL), ATTN_OK,
                     "%s", attn_last_error());
        memcpy(t->q + b * H * N_q * D, t->seq[b].q, (size_t)(H * N_q * D) * sizeof(uint16_t));
        if (lens[b] > max_len) max_len = lens[b];
        if (ps) pages += (lens[b] + ps - 1) / ps;
    }
    if (ps) {
        const int64_t stride = (max_len + ps - 1) / ps, pool = pages + SPARE_PAGES;
        int32_t *order = malloc((size_t)pool * sizeof(int32_t));
        t->table = malloc((size_t)(B * stride) * sizeof(int32_t));
        cr_assert(order && t->table);
        for (int64_t e = 0; e < pool; e++) order[e] = (int32_t)e;
        uint64_t x = seed | 1;
        for (int64_t e = pool - 1; e > 0; e--) { /* Fisher-Yates */
            const int64_t f = (int64_t)(next_random(&x) % (uint64_t)(e + 1));
            const int32_t tmp = order[e];
            order[e] = order[f], order[f] = tmp;
        }
        int64_t used = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t e = 0; e < stride; e++) /* entries past a sequence's pages: never read, -1 */
                t->table[b * stride + e] = e < (lens[b] + ps - 1) / ps ? order[used++] : -1;
        free(order);
        t->k = nan_filled(pool * H_kv * ps * D, dt), t->v = nan_filled(pool * H_kv * ps * D, dt);
        t->c = (decode_cache){t->k, t->v, pool, ps, t->table, stride};
    } else {
        t->n_max = max_len + 5; /* 5 NaN keys past the longest cache */
        t->k = nan_filled(B * H_kv * t->n_max * D, dt), t->v = nan_filled(B * H_kv * t->n_max * D, dt);
    }
    for (int64_t b = 0; b < B; b++) place_keys(t, b, ps);
    t->o = malloc((size_t)(B * H * N_q * D) * sizeof(uint16_t));
    t->lse = malloc((size_t)(B * H * N_q) * sizeof(float));
    cr_assert(t->o && t->lse);
}

static void case_make(decode_case *t, int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t D, int causal,
                      const int32_t *lens, int64_t ps, uint64_t seed) {
    case_make_dtype(t, B, H, H_kv, N_q, D, causal, lens, ps, seed, ATTN_F16);
}

static void case_free(decode_case *t) {
    for (int64_t b = 0; b < t->s.B; b++) attn_inputs_free(&t->seq[b]);
    free(t->seq), free(t->len), free(t->q), free(t->k), free(t->v), free(t->table), free(t->o), free(t->lse);
}

/* Poison O and LSE, run the model with `chunks` (0: its choice) and `bug`. */
static attn_status case_run(decode_case *t, int64_t chunks, decode_bug bug) {
    const decode_shape *s = &t->s;
    memset(t->o, 0xff, (size_t)(s->B * s->H * s->N_q * s->D) * sizeof(uint16_t));
    memset(t->lse, 0xff, (size_t)(s->B * s->H * s->N_q) * sizeof(float));
    const decode_opts opt = {chunks, 0, bug};
    return t->table ? decode_cpu_paged(s, t->q, &t->c, &opt, t->o, t->lse)
                    : decode_cpu_contiguous(s, t->q, t->k, t->v, t->n_max, &opt, t->o, t->lse);
}

/* Every row of every sequence against the reference; 1 when all pass. The worst sequence is logged. */
static int case_passes(const decode_case *t, char *why, size_t cap) {
    const decode_shape *s = &t->s;
    const int64_t rows = s->H * s->N_q;
    int64_t *idx = malloc((size_t)rows * sizeof(int64_t));
    cr_assert(idx);
    for (int64_t r = 0; r < rows; r++) idx[r] = r;
    int pass = 1;
    for (int64_t b = 0; b < s->B && pass; b++) {
        attn_check c;
        cr_assert_eq(attn_check_output(&t->seq[b], t->o + b * rows * s->D, t->lse + b * rows, idx, rows, &c),
                     ATTN_OK, "%s", attn_last_error());
        pass = c.pass && c.lse_checked;
        if (!pass)
            snprintf(why, cap,
                     "sequence %lld (%d keys): worst [h=%lld n=%lld d=%lld] got %g want %g (err/tol %g), "
                     "LSE err/tol %g, non-finite %lld (never written %lld)",
                     (long long)b, t->len[b], (long long)c.worst_h, (long long)c.worst_n,
                     (long long)c.worst_d, c.worst_got, c.worst_want, c.worst_ratio, c.lse_worst_ratio,
                     (long long)c.nonfinite, (long long)c.unwritten);
    }
    free(idx);
    return pass;
}

/* The model at this case, each chunk count in chunks[] (0: chosen), must pass. */
static void expect_exact(decode_case *t, const int64_t *chunks, int n, const char *what) {
    char why[512] = "";
    for (int i = 0; i < n; i++) {
        cr_assert_eq(case_run(t, chunks[i], DECODE_EXACT), ATTN_OK, "%s: %s", what, attn_last_error());
        cr_expect(case_passes(t, why, sizeof why), "%s, chunks %lld: %s", what, (long long)chunks[i], why);
    }
}

/* ---- against the reference ------------------------------------------------------------------- */

static const int64_t chosen[] = {0};

Test(decode, cache_of_one_key) {
    static const int32_t lens[3] = {1, 1, 1};
    for (int causal = 0; causal <= 1; causal++)
        for (int ps = 0; ps <= 16; ps += 16) {
            decode_case t;
            case_make(&t, 3, 32, 8, 1, 64, causal, lens, ps, 11 + (uint64_t)(causal * 2 + ps));
            static const int64_t chunks[] = {0, 1, 7};
            expect_exact(&t, chunks, 3, causal ? "1 key, causal" : "1 key");
            case_free(&t);
        }
}

/* Lengths that are multiples of neither the pages (16, 64), the key tile (64) nor the chunks. */
Test(decode, ragged_lengths_pages_and_chunks) {
    static const int32_t lens[5] = {17, 65, 129, 1000, 333};
    static const int64_t chunks[] = {0, 1, 2, 7};
    char what[96];
    for (int causal = 0; causal <= 1; causal++)
        for (int p = 0; p < 3; p++) {
            const int64_t ps = p == 0 ? 0 : p == 1 ? 16 : 64;
            decode_case t;
            case_make(&t, 5, 32, 8, 3, 64, causal, lens, ps, 23 + (uint64_t)(causal * 3 + p));
            snprintf(what, sizeof what, "N_q 3, page %lld%s", (long long)ps, causal ? ", causal" : "");
            expect_exact(&t, chunks, 4, what);
            case_free(&t);
        }
}

/* One sequence of 20000 keys and one query: choose_chunks cuts it into 17 chunks of 1177 keys. */
Test(decode, one_long_sequence) {
    static const int32_t lens[1] = {20000};
    static const int64_t chunks[] = {0, 7};
    for (int causal = 0; causal <= 1; causal++) {
        decode_case t;
        case_make(&t, 1, 32, 8, 1, 64, causal, lens, 64, 31 + (uint64_t)causal);
        expect_exact(&t, chunks, 2, causal ? "20000 keys, causal" : "20000 keys");
        case_free(&t);
    }
}

/* What runs a case and checks it: the model (expect_exact) or the kernel (expect_gpu_exact, below). */
typedef void (*decode_runner)(decode_case *t, const int64_t *chunks, int n, const char *what);

/* 37 sequences of 1 to 300 keys (causal: at least N_q) in pages of 16, at each N_q of nq[], head dim D,
 * chunks chosen. */
static void short_sequences(decode_runner run, const int64_t *nq, int n, int64_t D, uint64_t seed) {
    int32_t lens[37];
    char what[64];
    for (int causal = 0; causal <= 1; causal++)
        for (int a = 0; a < n; a++) {
            for (int b = 0; b < 37; b++) {
                lens[b] = 1 + (b * 83) % 300;
                if (causal && lens[b] < nq[a]) lens[b] = (int32_t)nq[a];
            }
            decode_case t;
            case_make(&t, 37, 32, 8, nq[a], D, causal, lens, 16, seed + (uint64_t)(causal * n + a));
            snprintf(what, sizeof what, "37 sequences, N_q %lld%s", (long long)nq[a],
                     causal ? ", causal" : "");
            run(&t, chosen, 1, what);
            case_free(&t);
        }
}

/* H = 32 query heads over 8, 1 (multi-query: 512 rows at N_q = 16) and 32 (multi-head) K/V heads, chunks
 * chosen and 2. */
static void grouped_heads(decode_runner run, uint64_t seed) {
    static const int32_t lens[3] = {300, 45, 129};
    static const int64_t kv[] = {8, 1, 32}, chunks[] = {0, 2};
    char what[64];
    for (int causal = 0; causal <= 1; causal++)
        for (int a = 0; a < 3; a++) {
            decode_case t;
            case_make(&t, 3, 32, kv[a], 16, 64, causal, lens, 64, seed + (uint64_t)(causal * 3 + a));
            snprintf(what, sizeof what, "H 32, H_kv %lld%s", (long long)kv[a], causal ? ", causal" : "");
            run(&t, chunks, 2, what);
            case_free(&t);
        }
}

Test(decode, many_short_sequences) {
    static const int64_t nq[] = {1, 3, 16};
    short_sequences(expect_exact, nq, 3, 64, 41);
}

Test(decode, grouped_query_heads) { grouped_heads(expect_exact, 53); }

/* Forced chunk counts 1, 2, 7 and one chunk per key of the longest cache: the shorter caches then have
 * empty chunks, and causal rows see none of the chunks past their last key (LSE -inf, no NaN). */
Test(decode, forced_chunk_counts) {
    static const int32_t lens[3] = {16, 77, 300};
    static const int64_t chunks[] = {1, 2, 7, 300};
    for (int causal = 0; causal <= 1; causal++) {
        decode_case t;
        case_make(&t, 3, 8, 2, 16, 32, causal, lens, 16, 61 + (uint64_t)causal);
        expect_exact(&t, chunks, 4, causal ? "forced chunks, causal" : "forced chunks");
        case_free(&t);
    }
}

/* The contiguous cache is the identity block table: the same inputs through a shuffled table give the
 * same bits (the same chunks, tiles and order of every sum). */
Test(decode, contiguous_equals_paged_bit_for_bit) {
    static const int32_t lens[4] = {5, 130, 64, 200};
    decode_case a, b;
    case_make(&a, 4, 8, 4, 3, 64, 1, lens, 0, 71);
    case_make(&b, 4, 8, 4, 3, 64, 1, lens, 16, 71); /* the same seed: the same Q, K, V */
    for (int64_t chunks = 0; chunks <= 7; chunks += 7) {
        cr_assert_eq(case_run(&a, chunks, DECODE_EXACT), ATTN_OK, "%s", attn_last_error());
        cr_assert_eq(case_run(&b, chunks, DECODE_EXACT), ATTN_OK, "%s", attn_last_error());
        cr_assert(!memcmp(a.o, b.o, (size_t)(4 * 8 * 3 * 64) * sizeof(uint16_t)), "O differs, chunks %lld",
                  (long long)chunks);
        cr_assert(!memcmp(a.lse, b.lse, (size_t)(4 * 8 * 3) * sizeof(float)), "LSE differs, chunks %lld",
                  (long long)chunks);
    }
    case_free(&a), case_free(&b);
}

/* ---- the check can fail: planted bugs --------------------------------------------------------- */

static void expect_caught(decode_bug bug, int64_t H_kv, int64_t ps, int64_t chunks, const char *what) {
    static const int32_t lens[3] = {100, 257, 40};
    decode_case t;
    char why[512] = "";
    case_make(&t, 3, 32, H_kv, 3, 64, 1, lens, ps, 83 + (uint64_t)bug);
    cr_assert_eq(case_run(&t, chunks, DECODE_EXACT), ATTN_OK, "%s", attn_last_error());
    cr_assert(case_passes(&t, why, sizeof why), "%s: the exact model fails first: %s", what, why);
    cr_assert_eq(case_run(&t, chunks, bug), ATTN_OK, "%s", attn_last_error());
    cr_assert(!case_passes(&t, why, sizeof why), "planted bug passed the check: %s", what);
    cr_log_info("%s: caught (%s)", what, why);
    case_free(&t);
}

Test(decode, planted_bugs_fail_the_check) {
    expect_caught(DECODE_BUG_DROP_LAST_CHUNK, 8, 16, 2, "the merge drops the last chunk");
    expect_caught(DECODE_BUG_DROP_LAST_CHUNK, 8, 16, 0, "the merge drops the last chosen chunk");
    expect_caught(DECODE_BUG_HEAD_MODULO, 8, 16, 0, "query head h reads K/V head h % H_kv");
    expect_caught(DECODE_BUG_IGNORE_TABLE, 8, 16, 0, "the block table ignored");
}

/* ---- the choice of chunks, and bad input ------------------------------------------------------ */

Test(decode, choose_chunks_follows_its_rule) {
    cr_assert_eq(choose_chunks(1, 8, 20000, 132), 17, "one wave: ceil(132 / 8)");
    cr_assert_eq(choose_chunks(32, 8, 20000, 132), 1, "256 blocks already cover 132 SMs");
    cr_assert_eq(choose_chunks(1, 1, 1000, 132), 4, "chunks of 256 keys at least: ceil(1000 / 256)");
    cr_assert_eq(choose_chunks(1, 1, 1 << 20, 132), 128, "at most DECODE_MAX_CHUNKS");
    cr_assert_eq(choose_chunks(1, 8, 1, 132), 1);
    cr_assert_eq(choose_chunks(1, 8, 20000, 0), 17, "sms 0: DECODE_DEFAULT_SMS");
    int64_t f, e;
    decode_chunk_keys(10, 7, 4, &f, &e); /* 2 keys a chunk: chunk 4 is keys 8, 9 */
    cr_assert(f == 8 && e == 10, "%lld %lld", (long long)f, (long long)e);
    decode_chunk_keys(10, 7, 5, &f, &e); /* past the last key: empty */
    cr_assert(f == e, "%lld %lld", (long long)f, (long long)e);
}

/* The refusal's status and a piece of its message (the argument and its range). No poison: the case's
 * shape may have been changed past its buffers, which a refusal never touches. */
static void expect_einval(decode_case *t, const char *needle) {
    cr_assert_eq(decode_cpu_paged(&t->s, t->q, &t->c, NULL, t->o, t->lse), ATTN_EINVAL,
                 "want EINVAL with \"%s\"", needle);
    cr_assert(strstr(attn_last_error(), needle), "message: %s (want \"%s\")", attn_last_error(), needle);
}

Test(decode, bad_input_is_refused_naming_the_argument) {
    static const int32_t lens[2] = {40, 3};
    decode_case t;
    case_make(&t, 2, 8, 2, 3, 16, 1, lens, 16, 97);
    t.c.page_size = 0;
    expect_einval(&t, "page_size must be 1..");
    t.c.page_size = 16;
    const int32_t saved = t.table[1];
    t.table[1] = (int32_t)t.c.num_pages; /* one past the pool */
    expect_einval(&t, "block_table[0][1] must be a page 0..");
    t.table[1] = -1;
    expect_einval(&t, "block_table[0][1] must be a page 0..");
    t.table[1] = saved;
    t.s.N_q = 4; /* sequence 1 holds 3 keys */
    expect_einval(&t, "causal needs N_q <= cache_len[1], i.e. N_q 1..3 (got N_q 4)");
    t.s.N_q = 3, t.s.H_kv = 3;
    expect_einval(&t, "H_kv must divide H = 8");
    t.s.H_kv = 2, t.len[1] = 0;
    expect_einval(&t, "cache_len[1] must be 1..");
    t.len[1] = 3;
    const decode_opts opt = {-1, 0, DECODE_EXACT};
    cr_assert_eq(decode_cpu_paged(&t.s, t.q, &t.c, &opt, t.o, t.lse), ATTN_EINVAL);
    cr_assert(strstr(attn_last_error(), "chunks must be 0 (choose) or 1.."), "%s", attn_last_error());
    cr_assert_eq(case_run(&t, 0, DECODE_EXACT), ATTN_OK, "restored: %s", attn_last_error());
    case_free(&t);
}

/* Through the registry and the suite's run and check (attn_run), at the shapes of decoding that the
 * front end cannot ask for yet: grouped heads and N_k != N, every sequence the same cache. */
Test(decode, registry_runs_grouped_heads_over_a_longer_cache) {
    const attn_stage *s = attn_find_stage("15m");
    cr_assert_not_null(s);
    for (int causal = 0; causal <= 1; causal++) {
        attn_problem p = attn_problem_make(3, 8, 3, 64, causal);
        p.H_kv = 2, p.N_k = 500;
        attn_inputs in;
        cr_assert_eq(attn_inputs_random(&in, &p, 101 + (uint64_t)causal, ATTN_INIT_NORMAL), ATTN_OK, "%s",
                     attn_last_error());
        attn_run_opts opt = attn_run_opts_default();
        opt.warmup = 0, opt.repeat = 2, opt.check = 1;
        attn_result r;
        cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_OK, "%s", attn_last_error());
        cr_assert(r.chk.pass && r.chk.lse_checked && r.identical == 1,
                  "causal %d: err/tol %g, LSE err/tol %g, non-finite %lld, identical %d", causal,
                  r.chk.worst_ratio, r.chk.lse_worst_ratio, (long long)r.chk.nonfinite, r.identical);
        attn_inputs_free(&in);
    }
}

/* Through the registry: causal with N > N_k is not decoding; the suite's path refuses it, naming both. */
Test(decode, registry_refuses_causal_past_the_cache) {
    const attn_stage *s = attn_find_stage("15m");
    cr_assert_not_null(s);
    attn_problem p = attn_problem_make(1, 4, 9, 32, 1);
    p.N_k = 8;
    cr_assert_eq(attn_stage_supports(s, &p), ATTN_OK, "GQA and N_k != N are taken");
    const attn_args a = {0};
    cr_assert_eq(s->run(&p, &a), ATTN_EUNSUPPORTED);
    cr_assert(strstr(attn_last_error(), "N 9, N_k 8"), "%s", attn_last_error());
}

/* ---- the kernel (stage 15) on the GPU: the same cases, the same check ----------------------------
 * Skipped, with the reason, where stage 15 cannot run (no CUDA build, no GPU, older than sm_80). The
 * cases are the model's: the NaN in the spare pages and past each sequence's end stay, so a kernel that
 * reads a key it should not fails as the model would. */

#ifdef ATTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "15_decode/decode_gpu.h"

typedef struct {
    void *q, *k, *v, *o, *ws;
    float *lse;
    int32_t *table, *len;
} gpu_case;

static void gpu_case_free(gpu_case *g) {
    cudaFree(g->q), cudaFree(g->k), cudaFree(g->v), cudaFree(g->o), cudaFree(g->ws), cudaFree(g->lse);
    cudaFree(g->table), cudaFree(g->len);
    cudaGetLastError();
}

/* The case's cache as the kernel reads it: its pool and table, or (contiguous) the identity table over
 * pages of n_max keys. *ident is the identity, B entries, allocated here. */
static decode_cache gpu_cache_of(const decode_case *t, int32_t **ident) {
    *ident = NULL;
    if (t->table) return t->c;
    *ident = malloc((size_t)t->s.B * sizeof(int32_t));
    cr_assert(*ident);
    for (int64_t b = 0; b < t->s.B; b++) (*ident)[b] = (int32_t)b;
    return (decode_cache){t->k, t->v, t->s.B, t->n_max, *ident, 1};
}

/* Poison O and LSE, run decode_gpu_paged on the case with `chunks` (0: chosen for this GPU), copy O and
 * LSE back into the case. swap: the first block-table entries of sequences 0 and 1 exchanged on the way
 * to the device, so that each reads its first page from the other (a swap inside one sequence would
 * only reorder its keys, which attention without a mask cannot see). */
static attn_status gpu_case_run(decode_case *t, int64_t chunks, int swap) {
    const decode_shape *s = &t->s;
    int32_t *ident;
    const decode_cache c = gpu_cache_of(t, &ident);
    const decode_opts opt = {chunks, 0, DECODE_EXACT};
    const size_t pool = (size_t)(c.num_pages * s->H_kv * c.page_size * s->D) * 2,
                 qb = (size_t)(s->B * s->H * s->N_q * s->D) * 2, lb = (size_t)(s->B * s->H * s->N_q) * 4,
                 tb = (size_t)(s->B * c.table_stride) * 4,
                 wb = decode_gpu_workspace_bytes(s, decode_gpu_chunks(s, &opt));
    int32_t *table = malloc(tb);
    cr_assert(table);
    memcpy(table, c.block_table, tb);
    if (swap) {
        const int32_t first = table[0];
        table[0] = table[c.table_stride], table[c.table_stride] = first;
    }
    gpu_case g = {0};
    cr_assert(!cudaMalloc(&g.q, qb) && !cudaMalloc(&g.k, pool) && !cudaMalloc(&g.v, pool) &&
              !cudaMalloc(&g.o, qb) && !cudaMalloc((void **)&g.lse, lb) &&
              !cudaMalloc((void **)&g.table, tb) && !cudaMalloc((void **)&g.len, (size_t)s->B * 4) &&
              (!wb || !cudaMalloc(&g.ws, wb)));
    cr_assert(!cudaMemcpy(g.q, t->q, qb, cudaMemcpyHostToDevice) &&
              !cudaMemcpy(g.k, c.k, pool, cudaMemcpyHostToDevice) &&
              !cudaMemcpy(g.v, c.v, pool, cudaMemcpyHostToDevice) &&
              !cudaMemcpy(g.table, table, tb, cudaMemcpyHostToDevice) &&
              !cudaMemcpy(g.len, s->cache_len, (size_t)s->B * 4, cudaMemcpyHostToDevice) &&
              !cudaMemset(g.o, 0xff, qb) && !cudaMemset(g.lse, 0xff, lb));
    decode_cache dc = c;
    dc.k = g.k, dc.v = g.v, dc.block_table = g.table;
    attn_status st = decode_gpu_paged(s, g.len, g.q, &dc, &opt, g.o, g.lse, g.ws, wb, NULL);
    if (st == ATTN_OK && (cudaDeviceSynchronize() || cudaMemcpy(t->o, g.o, qb, cudaMemcpyDeviceToHost) ||
                          cudaMemcpy(t->lse, g.lse, lb, cudaMemcpyDeviceToHost)))
        st = attn_fail(ATTN_ECUDA, "decode_gpu_paged ran, then: %s", cudaGetErrorString(cudaGetLastError()));
    gpu_case_free(&g);
    free(table), free(ident);
    return st;
}

/* The kernel at this case, each chunk count in chunks[] (0: chosen), must pass the check. */
static void expect_gpu_exact(decode_case *t, const int64_t *chunks, int n, const char *what) {
    char why[512] = "";
    for (int i = 0; i < n; i++) {
        cr_assert_eq(gpu_case_run(t, chunks[i], 0), ATTN_OK, "%s: %s", what, attn_last_error());
        cr_expect(case_passes(t, why, sizeof why), "GPU, %s, chunks %lld: %s", what, (long long)chunks[i],
                  why);
    }
}
#else
static void expect_gpu_exact(decode_case *t, const int64_t *chunks, int n, const char *what) {
    (void)t, (void)chunks, (void)n, (void)what;
    cr_skip_test("stage 15's kernel is not in this build (" ATTN_NO_CUDA_WHY ")");
}
#endif

#define SKIP_UNLESS_KERNEL() SKIP_UNLESS_RUNNABLE(attn_find_stage("15"))

/* Cache length 1, lengths that are multiples of neither the pages, the 64-key tiles nor the chunks,
 * causal and not, N_q 1 and 3, pages of 16 and 64 and the contiguous cache, chosen and forced chunk
 * counts (7: chunks of 143 keys at 1000, and empty ones for the short caches), fp16 and bf16. */
Test(decode_gpu, ragged_lengths_pages_and_chunks) {
    SKIP_UNLESS_KERNEL();
    static const int32_t lens[6] = {1, 17, 65, 129, 1000, 333};
    static const int64_t chunks[] = {0, 1, 7};
    char what[128];
    for (int dt = 0; dt <= 1; dt++)
        for (int causal = 0; causal <= 1; causal++)
            for (int p = 0; p < 3; p++) {
                const int64_t ps = p == 0 ? 0 : p == 1 ? 16 : 64, nq = causal ? 1 : 3;
                decode_case t;
                case_make_dtype(&t, 6, 32, 8, nq, dt ? 128 : 64, causal, lens, ps,
                                201 + (uint64_t)(dt * 6 + causal * 3 + p), (attn_dtype)dt);
                snprintf(what, sizeof what, "%s D %d, N_q %lld, page %lld%s", dt ? "bf16" : "fp16",
                         dt ? 128 : 64, (long long)nq, (long long)ps, causal ? ", causal" : "");
                expect_gpu_exact(&t, chunks, 3, what);
                case_free(&t);
            }
}

/* One sequence of 60000 keys in pages of 256 (chosen: 17 chunks of 3530 keys), and beside it one of 3
 * keys, whose other 16 chunks are empty. */
Test(decode_gpu, one_long_sequence_and_a_short_one) {
    SKIP_UNLESS_KERNEL();
    static const int32_t lens[2] = {60000, 3};
    static const int64_t chunks[] = {0, 128};
    for (int causal = 0; causal <= 1; causal++) {
        decode_case t;
        case_make(&t, 2, 32, 8, causal ? 3 : 1, 128, causal, lens, 256, 211 + (uint64_t)causal);
        expect_gpu_exact(&t, chunks, 2, causal ? "60000 and 3 keys, causal" : "60000 and 3 keys");
        case_free(&t);
    }
}

/* N_q 1, 4, 8 and 16 at 4 heads a group: R = 4, 16, 32 and 64 rows, so every width of the kernel's warp
 * split (decode_key_warps: 4, 4, 2 and 1 warps a 16-row slice), at D = 32. */
Test(decode_gpu, many_short_sequences) {
    SKIP_UNLESS_KERNEL();
    static const int64_t nq[] = {1, 4, 8, 16};
    short_sequences(expect_gpu_exact, nq, 4, 32, 221);
}

/* Multi-query at N_q = 16 is 512 rows: 8 grid rows of 64, each reading the chunk. */
Test(decode_gpu, grouped_query_heads) {
    SKIP_UNLESS_KERNEL();
    grouped_heads(expect_gpu_exact, 231);
}

#ifdef ATTN_HAVE_CUDA
/* The check can fail the kernel: the same case with the first table entries of its two sequences swapped
 * on the device (each reads 64 of the other's keys in place of its own) must FAIL, causal and not. */
Test(decode_gpu, a_swapped_table_entry_fails_the_check) {
    SKIP_UNLESS_KERNEL();
    static const int32_t lens[2] = {200, 90};
    char why[512] = "";
    for (int causal = 0; causal <= 1; causal++) {
        decode_case t;
        case_make(&t, 2, 32, 8, 3, 64, causal, lens, 64, 241 + (uint64_t)causal);
        cr_assert_eq(gpu_case_run(&t, 0, 0), ATTN_OK, "%s", attn_last_error());
        cr_assert(case_passes(&t, why, sizeof why), "the exact kernel fails first: %s", why);
        cr_assert_eq(gpu_case_run(&t, 0, 1), ATTN_OK, "%s", attn_last_error());
        cr_assert(!case_passes(&t, why, sizeof why), "a swapped table entry passed the check (causal %d)",
                  causal);
        cr_log_info("swapped table entry, causal %d: caught (%s)", causal, why);
        case_free(&t);
    }
}
#endif

/* Through the registry, the suite's run and check (attn_run: poison, two runs bit for bit): 15 on the
 * contiguous cache and 15p on the harness's shuffled pages, at decoding's shapes: H 32 over H_kv 8 and 1,
 * N = N_q 1, 5 and 16 new queries over N_k = 1, 64, 4097 and 20000 cached keys. */
Test(decode_gpu, registry_stages_at_decode_shapes) {
    SKIP_UNLESS_KERNEL();
    static const char *const ids[] = {"15", "15p"};
    static const int64_t nk[] = {1, 64, 4097, 20000}, nq[] = {1, 5, 16}, kv[] = {8, 1};
    for (int i = 0; i < 2; i++)
        for (int a = 0; a < 4; a++)
            for (int c = 0; c < 3; c++)
                for (int causal = 0; causal <= 1; causal++) {
                    if (causal && nq[c] > nk[a]) continue;
                    attn_problem p = attn_problem_make(2, 32, nq[c], 128, causal);
                    p.H_kv = kv[(a + c) % 2], p.N_k = nk[a], p.dtype = (attn_dtype)(c % 2);
                    attn_inputs in;
                    cr_assert_eq(attn_inputs_random(&in, &p, 251 + (uint64_t)(a * 8 + c * 2 + causal),
                                                    ATTN_INIT_NORMAL),
                                 ATTN_OK, "%s", attn_last_error());
                    attn_run_opts opt = attn_run_opts_default();
                    opt.warmup = 0, opt.repeat = 2, opt.check = 1, opt.check_rows = 1024;
                    attn_result r;
                    cr_assert_eq(attn_run(attn_find_stage(ids[i]), &in, &opt, &r, NULL, NULL), ATTN_OK, "%s",
                                 attn_last_error());
                    cr_expect(
                        r.chk.pass && r.chk.lse_checked && r.identical == 1,
                        "stage %s, N_q %lld, N_k %lld, H_kv %lld, causal %d: err/tol %g, LSE err/tol %g, "
                        "non-finite %lld, identical %d",
                        ids[i], (long long)p.N, (long long)p.N_k, (long long)p.H_kv, causal,
                        r.chk.worst_ratio, r.chk.lse_worst_ratio, (long long)r.chk.nonfinite, r.identical);
                    attn_inputs_free(&in);
                }
}
