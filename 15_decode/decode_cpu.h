/*
 * decode_cpu.h: stage 15m, a plain-C model of flash-decoding (decode_cpu.c). One decoding step: each
 * of B sequences brings N_q new queries (1 to 16) against a cache of cache_len[b] keys. The keys of
 * each (sequence, K/V head) are cut into chunks, one block per chunk; each block writes a partial O
 * and its LSE for every query row of the heads that share the K/V head, and a combine step merges
 * the partials by their LSEs (10_context_parallel/cp_merge.h, the merge stage 10 does across GPUs).
 *
 * Layouts (16-bit elements of `dtype`, row-major):
 *   Q, O   [B, H, N_q, D]; LSE float32 [B, H, N_q], natural log (common/attn.h's contract)
 *   cache  pages of page_size keys: K and V pools [num_pages, H_kv, page_size, D]. Key j of sequence
 *          b, K/V head g, lies in page block_table[b * table_stride + j / page_size], slot
 *          j % page_size. A contiguous cache [B, H_kv, N_max, D] is this pool with page_size = N_max
 *          and the identity table (sequence b owns page b): decode_cpu_contiguous says so.
 * Query head h reads K/V head h / (H / H_kv). Causal: query i of N_q sees keys 0 .. cache_len - N_q + i
 * (the mask aligned to the bottom right: the new queries are the last N_q positions of the sequence).
 */
#ifndef ATTN_DECODE_CPU_H
#define ATTN_DECODE_CPU_H

#include "attn.h"
#include "decode_split.h" /* decode_chunk_keys, DECODE_BC: the kernel's split, shared */
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t B, H, H_kv, N_q, D; /* sequences, query heads, K/V heads (dividing H), new queries, head dim */
    int causal;                 /* 0 or 1 */
    float scale;                /* as attn_problem's: 1/sqrt(D) by convention, the caller sets it */
    attn_dtype dtype;
    const int32_t *cache_len; /* [B]: the keys in each sequence's cache, 1 .. ATTN_MAX_N */
} decode_shape;

typedef struct {
    const uint16_t *k, *v; /* the pools, [num_pages, H_kv, page_size, D] each */
    int64_t num_pages, page_size;
    const int32_t *block_table; /* [B, table_stride]: page ids 0 .. num_pages - 1 */
    int64_t table_stride;       /* entries per sequence, at least ceil(cache_len[b] / page_size) */
} decode_cache;

/* Planted bugs, for the tests alone: each must make the tests fail (tests/test_decode.c). */
typedef enum {
    DECODE_EXACT = 0,
    DECODE_BUG_DROP_LAST_CHUNK, /* the combine forgets the last chunk's partial */
    DECODE_BUG_HEAD_MODULO,     /* query head h reads K/V head h % H_kv instead of h / (H / H_kv) */
    DECODE_BUG_IGNORE_TABLE,    /* pages read as if the block table were the identity */
} decode_bug;

typedef struct {
    int64_t chunks; /* 0: choose_chunks(); else this many chunks per sequence (tests) */
    int sms;        /* the SM count choose_chunks plans for; 0: DECODE_DEFAULT_SMS */
    decode_bug bug; /* DECODE_EXACT but in the planted-bug tests */
} decode_opts;

#define DECODE_DEFAULT_SMS 132    /* H100 SXM and H200: 132 SMs */
#define DECODE_MIN_CHUNK_KEYS 256 /* the fewest keys choose_chunks gives a chunk (decode_cpu.c says why) */
#define DECODE_MAX_CHUNKS 128     /* the most chunks choose_chunks makes of one sequence */

/* The number of chunks S of every sequence's keys, for B sequences of H_kv K/V heads whose longest
 * cache holds max_len keys, on a GPU of `sms` SMs. The grid is B * H_kv * S blocks; decode_cpu.c
 * gives the rule and its numbers. */
int64_t choose_chunks(int64_t B, int64_t H_kv, int64_t max_len, int sms);

/* The longest of the B caches, max_b cache_len[b] (what choose_chunks plans for). */
int64_t decode_longest_cache(const decode_shape *s);

/* ATTN_OK, or ATTN_EINVAL naming the argument and its allowed range. */
attn_status decode_validate(const decode_shape *s, const decode_cache *c, const decode_opts *opt);
/* The same but for the block table's entries, which a GPU caller keeps on the device (decode_gpu.h):
 * the table's pointer and size are checked, its page ids are the caller's to vouch for. */
attn_status decode_validate_device(const decode_shape *s, const decode_cache *c, const decode_opts *opt);

/* O and LSE of one decoding step from a paged cache. opt may be NULL (chosen chunks, no bug). lse may
 * be NULL. Allocates its partials (ATTN_ENOMEM with the size when it cannot). */
attn_status decode_cpu_paged(const decode_shape *s, const uint16_t *q, const decode_cache *c,
                             const decode_opts *opt, uint16_t *o, float *lse);
/* The same from a contiguous cache K, V [B, H_kv, N_max, D], cache_len[b] <= N_max. */
attn_status decode_cpu_contiguous(const decode_shape *s, const uint16_t *q, const uint16_t *k,
                                  const uint16_t *v, int64_t N_max, const decode_opts *opt, uint16_t *o,
                                  float *lse);

/* The registry's stage 15m: B sequences of N = N_q queries over N_k cached keys each (K, V contiguous
 * [B, H_kv, N_k, D]). Host pointers; writes LSE. */
attn_status stage15m_run(const attn_problem *p, const attn_args *a);
/* The bytes the split kernel and the combine move (traffic.c). */
attn_bytes stage15_bytes(const attn_problem *p, int gpus);

#ifdef __cplusplus
}
#endif
#endif
