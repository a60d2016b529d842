/*
 * tiles_cpu.h: the tile machinery of the CPU models, the plain-C counterpart of tiles.cuh. Each GPU
 * stage from 03 to 06 has a model beside its kernel (03_tiled/tiled_cpu.c, ...) that runs the same
 * algorithm on the CPU: the same tiles Br x Bc, the same loop over Tc key tiles, the same names (m,
 * l, alpha, O) and equations, in fp32 as on the GPU. What a GPU thread block does to one row tile,
 * a model does in one call of its row-tile function; OpenMP hands the (b, h, row tile) blocks to the
 * cores the way the GPU hands them to the SMs. A model has no threads inside a block, no shared
 * memory and no shuffles: where the kernel splits a row over 16 threads (or a quad), the model
 * keeps the whole row. So `diff` between two neighbouring models shows the idea alone, and every
 * idea can be run, stepped through in a debugger and broken on a laptop.
 *
 * What lives here (the models' files hold only their algorithm):
 *   - cpu_tile_load_rows / cpu_tile_load_keys: rows of Q or V, and K transposed, from 16-bit memory
 *     into fp32 tiles, rows >= N zero-filled (inputs are never padded);
 *   - cpu_tile_scores: S = Q K^T for a tile; cpu_tile_mask: -inf for keys >= N and, when causal,
 *     keys j > i (cpu_tile_mask_offset: keys >= N_k, j > i + N_k - N); cpu_tile_row_max;
 *   - cpu_tile_pv: O += P V; cpu_tile_store_o: O / l rounded to 16 bits, rows >= N never written;
 *   - cpu_tiles_run: the "launch": checks, scratch per OpenMP thread, the loop over blocks;
 *     cpu_tiles_run_kv the same for a model that takes K/V of their own shape (06m).
 *
 * Layout (floats, row-major): Q tile Br x D, K tile stored transposed D x Bc (so that the inner loop
 * of S = Q K^T runs over contiguous keys and the compiler can vectorise it), V tile Bc x D, S or P
 * Br x Bc, O Br x D. Each element of S is summed over d in order 0..D-1 and each element of O over
 * the keys in order, whatever the vector width: a model is bit-for-bit repeatable, with any number
 * of threads (each block's rows are written by one thread only).
 */
#ifndef ATTN_TILES_CPU_H
#define ATTN_TILES_CPU_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "half.h"
#include "stage.h"

/* One head of the problem, as a row-tile function sees it. */
typedef struct {
    const uint16_t *q, *k, *v; /* this head's Q [N, D]; K and V [N_k, D] of the K/V head it reads */
    uint16_t *o;               /* this head's [N, D] */
    float *lse;                /* this head's [N], or NULL */
    int N, D;
    int N_k;                   /* keys: N but for a model that takes N_k != N (cpu_tiles_run_kv) */
    int Br, Bc;                /* query rows per row tile, keys per key tile */
    int Tr, Tc;                /* ceil(N / Br) row tiles, ceil(N_k / Bc) key tiles */
    int causal;
    float scale;
    attn_dtype dtype;
    const attn_trace *trace; /* --trace-row, or NULL */
    int64_t trace_row;       /* the row of this head that trace follows; -1: none here */
} cpu_tile_params;

/* One OpenMP thread's tiles, reused for every block it runs (the model's "shared memory" and
 * "registers"). */
typedef struct {
    float *Qs; /* Br x D */
    float *Kt; /* D x Bc: the K tile, transposed */
    float *Vs; /* Bc x D */
    float *S;  /* Br x Bc: scores, then P */
    float *O;  /* Br x D: the accumulator */
    float *m, *l; /* Br */
    float trace_alpha; /* the traced row's alpha of the current tile (cpu_trace_alpha) */
} cpu_tile_scratch;

typedef void (*cpu_row_tile_fn)(const cpu_tile_params *prm, int qt, cpu_tile_scratch *w);

/* ---- 16-bit memory -> fp32 tiles ------------------------------------------------------------ */

/* Rows row0 .. row0+rows-1 of one head ([N, D] at src) into dst (rows x D), times mult; rows >= N
 * are zeros, like tile_load_rows. */
static inline void cpu_tile_load_rows(float *dst, const uint16_t *src, int row0, int rows, int N, int D,
                                      float mult, attn_dtype t) {
    for (int r = 0; r < rows; r++) {
        float *d = dst + (int64_t)r * D;
        if (row0 + r >= N) {
            memset(d, 0, (size_t)D * sizeof(float));
            continue;
        }
        const uint16_t *s = src + (int64_t)(row0 + r) * D;
        for (int x = 0; x < D; x++) d[x] = attn_to_f32(s[x], t) * mult;
    }
}

/* Keys key0 .. key0+keys-1 of one head into Kt transposed (Kt[d * keys + c] = k[key0 + c][d]),
 * zeros past N. */
static inline void cpu_tile_load_keys(float *Kt, const uint16_t *k, int key0, int keys, int N, int D,
                                      attn_dtype t) {
    for (int c = 0; c < keys; c++) {
        const int j = key0 + c;
        for (int x = 0; x < D; x++)
            Kt[(int64_t)x * keys + c] = j < N ? attn_to_f32(k[(int64_t)j * D + x], t) : 0.0f;
    }
}

/* ---- S = Q K^T, the mask, the row max --------------------------------------------------------- */

/* S[r][c] = Qs[r] . K[c0 + c] over D, for rows x keys, from a K tile of ldk keys (transposed). Four
 * steps of d per pass over a row of S (one load and one store of S per 4 products, not per product);
 * the parentheses keep each S[r][c] summed over d in order 0, 1, 2, ..., as a plain loop would. */
static inline void cpu_tile_scores(float *S, const float *Qs, int rows, const float *Kt, int ldk, int c0,
                                   int keys, int D) {
    memset(S, 0, (size_t)rows * keys * sizeof(float));
    for (int r = 0; r < rows; r++) {
        float *s = S + (int64_t)r * keys;
        const float *q = Qs + (int64_t)r * D;
        int x = 0;
        for (; x + 4 <= D; x += 4) {
            const float *k0 = Kt + (int64_t)x * ldk + c0, *k1 = k0 + ldk, *k2 = k1 + ldk, *k3 = k2 + ldk;
            const float q0 = q[x], q1 = q[x + 1], q2 = q[x + 2], q3 = q[x + 3];
#pragma omp simd
            for (int c = 0; c < keys; c++) s[c] = (((s[c] + q0 * k0[c]) + q1 * k1[c]) + q2 * k2[c]) + q3 * k3[c];
        }
        for (; x < D; x++) {
            const float *kx = Kt + (int64_t)x * ldk + c0;
#pragma omp simd
            for (int c = 0; c < keys; c++) s[c] += q[x] * kx[c];
        }
    }
}

/* -inf where key j may not be seen by query i: j >= N (the tail of the last key tile) or, when
 * causal, j > i. q0 and key0 are the first query row and the first key of the tile. */
static inline void cpu_tile_mask(float *S, int rows, int keys, int q0, int key0, int N, int causal) {
    for (int r = 0; r < rows; r++) {
        const int i = q0 + r;
        for (int c = 0; c < keys; c++) {
            const int j = key0 + c;
            if (j >= N || (causal && j > i)) S[(int64_t)r * keys + c] = -INFINITY;
        }
    }
}

/* cpu_tile_mask for K/V of their own length (06m): j >= N_k, or when causal j > i + off, off = N_k - N
 * (the mask aligned to the bottom right, common/attn.h). A function of its own, so that the models of
 * 03-05 keep the plain mask their kernels have. */
static inline void cpu_tile_mask_offset(float *S, int rows, int keys, int q0, int key0, int N_k, int causal,
                                        int off) {
    for (int r = 0; r < rows; r++) {
        const int i = q0 + r;
        for (int c = 0; c < keys; c++) {
            const int j = key0 + c;
            if (j >= N_k || (causal && j > i + off)) S[(int64_t)r * keys + c] = -INFINITY;
        }
    }
}

static inline float cpu_tile_row_max(const float *s, int keys) {
    float mx = -INFINITY;
    for (int c = 0; c < keys; c++) mx = fmaxf(mx, s[c]);
    return mx;
}

/* ---- O += P V, and the store ------------------------------------------------------------------ */

/* O[r] += sum_c P[r][c] V[c0 + c] over the keys of P (rows x keys). Four keys per pass over a row
 * of O, with the parentheses keeping each O[r][x] summed over the keys in order. */
static inline void cpu_tile_pv(float *O, const float *P, int rows, int keys, const float *Vs, int c0, int D) {
    for (int r = 0; r < rows; r++) {
        float *o = O + (int64_t)r * D;
        const float *p = P + (int64_t)r * keys, *V = Vs + (int64_t)c0 * D;
        int c = 0;
        for (; c + 4 <= keys; c += 4) {
            const float *v0 = V + (int64_t)c * D, *v1 = v0 + D, *v2 = v1 + D, *v3 = v2 + D;
            const float p0 = p[c], p1 = p[c + 1], p2 = p[c + 2], p3 = p[c + 3];
#pragma omp simd
            for (int x = 0; x < D; x++) o[x] = (((o[x] + p0 * v0[x]) + p1 * v1[x]) + p2 * v2[x]) + p3 * v3[x];
        }
        for (; c < keys; c++) {
            const float *v = V + (int64_t)c * D;
#pragma omp simd
            for (int x = 0; x < D; x++) o[x] += p[c] * v[x];
        }
    }
}

/* O / l rounded to 16 bits into rows q0 .. q0+rows-1 of the head; rows >= N are never written.
 * Every stored row has l >= 1 (its largest score gives exp(0) = 1); the guard is tile_store_o's. */
static inline void cpu_tile_store_o(uint16_t *o_head, const float *O, const float *l, int q0, int rows, int N,
                                    int D, attn_dtype t) {
    for (int r = 0; r < rows && q0 + r < N; r++) {
        const float inv_l = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        uint16_t *orow = o_head + (int64_t)(q0 + r) * D;
        for (int x = 0; x < D; x++) orow[x] = attn_from_f32(O[(int64_t)r * D + x] * inv_l, t);
    }
}

/* ---- --trace-row: one row followed through the key loop (attn_trace in common/stage.h) ----------- */

/* In a model's row loop: keeps the traced row's alpha, which the model computes and uses at once. */
static inline void cpu_trace_alpha(const cpu_tile_params *prm, cpu_tile_scratch *w, int row, float alpha) {
    if (row == prm->trace_row) w->trace_alpha = alpha;
}

/* After a key tile's O += P V: reports the traced row if it is one of rows row0 .. row0+rows-1, whose
 * m, l and O start at m, l and O. keys key0 .. key0+keys-1 are the tile's, those past N left out; m_ln
 * turns the model's m into the LSE's units (attn_trace_step). */
static inline void cpu_trace_tile(const cpu_tile_params *prm, const cpu_tile_scratch *w, int row0, int rows,
                                  const float *m, const float *l, const float *O, int key0, int keys, float m_ln) {
    const int64_t r = prm->trace_row - row0;
    if (prm->trace_row < 0 || r < 0 || r >= rows) return;
    const int last = (key0 + keys < prm->N_k ? key0 + keys : prm->N_k) - 1;
    const attn_trace_step st = {key0, last, m[r], l[r], w->trace_alpha, m_ln, O + r * prm->D, prm->D};
    prm->trace->step(prm->trace, &st);
}

/* ---- the launch ------------------------------------------------------------------------------- */

static inline void cpu_tile_scratch_free(cpu_tile_scratch *w) {
    free(w->Qs), free(w->Kt), free(w->Vs), free(w->S), free(w->O), free(w->m), free(w->l);
}

/* attn_alloc, not malloc: ATTN_FAIL_ALLOC=n then reaches each of the 7 x (threads) allocations here. */
static inline int cpu_tile_scratch_alloc(cpu_tile_scratch *w, int Br, int Bc, int D) {
    w->Qs = attn_alloc((size_t)Br * D * sizeof(float));
    w->Kt = attn_alloc((size_t)D * Bc * sizeof(float));
    w->Vs = attn_alloc((size_t)Bc * D * sizeof(float));
    w->S = attn_alloc((size_t)Br * Bc * sizeof(float));
    w->O = attn_alloc((size_t)Br * D * sizeof(float));
    w->m = attn_alloc((size_t)Br * sizeof(float));
    w->l = attn_alloc((size_t)Br * sizeof(float));
    return w->Qs && w->Kt && w->Vs && w->S && w->O && w->m && w->l;
}

/* The models of stages 03-05 take what their kernels take: fp16, head dim 32, 64 or 128. */
static inline attn_status cpu_tiles_check_f16_d32_to_128(const char *stage, const attn_problem *p) {
    if (p->D != 32 && p->D != 64 && p->D != 128)
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s supports head dim 32, 64, 128 (got %lld)", stage,
                         (long long)p->D);
    if (p->dtype != ATTN_F16)
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s supports dtype fp16 (got %s)", stage,
                         attn_dtype_name(p->dtype));
    return ATTN_OK;
}

/* Where head bh = b*H + h of the problem lives: its n query rows from row q0 of Q, O and LSE, its n_k
 * keys from row k0 of K and V, those of K/V head h / (H / H_kv) of batch b (grouped-query attention).
 * Plain: [B, H, N, D] and [B, H_kv, N_k, D]. With cu_seqlens the packed layout of common/attn.h: Q
 * [H, total_q, D], sequence b of head h from row h*total_q + cu_seqlens_q[b], its length n. Worked out
 * here and not by attn_head_span, the reference's: a model is never checked against its own code. */
typedef struct {
    int64_t q0, n, k0, n_k;
} cpu_head;

static inline cpu_head cpu_tiles_head(const attn_problem *p, int64_t bh) {
    const int64_t H = p->H, b = bh / H, h = bh % H, g = h / (H / p->H_kv);
    cpu_head x;
    if (!p->cu_seqlens_q) {
        x.q0 = bh * p->N, x.n = p->N;
        x.k0 = (b * p->H_kv + g) * p->N_k, x.n_k = p->N_k;
    } else {
        const int32_t *cq = p->cu_seqlens_q, *ck = p->cu_seqlens_k;
        x.q0 = h * (int64_t)cq[p->B] + cq[b], x.n = cq[b + 1] - cq[b];
        x.k0 = g * (int64_t)ck[p->B] + ck[b], x.n_k = ck[b + 1] - ck[b];
    }
    return x;
}

/* The launch of cpu_tiles_run and cpu_tiles_run_kv, once the problem is known to be one the model
 * takes: every (b, h, row tile) block, in parallel over the blocks. */
static inline attn_status cpu_tiles_launch(const char *stage, const attn_problem *p, const attn_args *a, int Br,
                                           int Bc, cpu_row_tile_fn row_tile) {
    const int64_t BH = p->B * p->H, N = p->N, D = p->D;
    const int Tr = (int)((N + Br - 1) / Br); /* of the longest sequence: shorter ones skip their last */
    const int64_t blocks = BH * Tr;
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        cpu_tile_scratch w;
        /* Every thread must reach the omp for and its barrier, or the others wait there forever: a
         * thread without its tiles takes its share of blocks and skips them, and the run says ENOMEM. */
        const int have = cpu_tile_scratch_alloc(&w, Br, Bc, (int)D);
        failed = !have;
#pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < blocks; blk++) {
            if (!have) continue;
            /* Row tiles run last to first, as on the GPU: under a causal mask the last ones are
             * the longest, and starting them first keeps the end of the loop short. */
            const int64_t bh = blk / Tr;
            const int qt = Tr - 1 - (int)(blk % Tr);
            const cpu_head h = cpu_tiles_head(p, bh);
            if ((int64_t)qt * Br >= h.n) continue; /* a sequence shorter than N: no rows in this tile */
            const cpu_tile_params prm = {(const uint16_t *)a->q + h.q0 * D, (const uint16_t *)a->k + h.k0 * D,
                                         (const uint16_t *)a->v + h.k0 * D, (uint16_t *)a->o + h.q0 * D,
                                         a->lse ? a->lse + h.q0 : NULL, (int)h.n, (int)D, (int)h.n_k, Br, Bc,
                                         (int)((h.n + Br - 1) / Br), (int)((h.n_k + Bc - 1) / Bc),
                                         p->causal != 0, p->scale, p->dtype, a->trace,
                                         a->trace && bh == 0 ? a->trace->row : -1};
            row_tile(&prm, qt, &w);
        }
        cpu_tile_scratch_free(&w);
    }
    if (failed) return attn_fail(ATTN_ENOMEM, "stage %s: cannot allocate the tiles of one thread", stage);
    return ATTN_OK;
}

/* Runs row_tile on every (b, h, row tile) block, in parallel over the blocks. `stage` is "03m" etc.
 * The caller has checked D and the dtype. K and V must be of Q's shape: the models of 03-05 index
 * them so (the registry refuses other shapes first). */
static inline attn_status cpu_tiles_run(const char *stage, const attn_problem *p, const attn_args *a, int Br,
                                        int Bc, cpu_row_tile_fn row_tile) {
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    if (p->H_kv != p->H || p->N_k != p->N || p->cu_seqlens_q)
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s takes H_kv == H, N_k == N and no cu_seqlens (got H_kv %lld of H %lld, "
                         "N_k %lld of N %lld)", stage, (long long)p->H_kv, (long long)p->H, (long long)p->N_k,
                         (long long)p->N);
    return cpu_tiles_launch(stage, p, a, Br, Bc, row_tile);
}

/* cpu_tiles_run for a model whose row_tile reads prm->N_k keys of the mapped K/V head and masks with
 * the bottom-right offset N_k - N (06m): grouped-query attention, N_k != N and cu_seqlens (each
 * sequence a head of its own lengths, prm->N and prm->N_k). */
static inline attn_status cpu_tiles_run_kv(const char *stage, const attn_problem *p, const attn_args *a, int Br,
                                           int Bc, cpu_row_tile_fn row_tile) {
    attn_status st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    return cpu_tiles_launch(stage, p, a, Br, Bc, row_tile);
}

#endif
