/*
 * Stage 12m: stage 12's backward (FlashAttention-2's Algorithm 2) as plain C on the CPU (a model of
 * backward_tiled.cu).
 *
 * What it models: the same tiles (Br = Bc = 64), the same loop order and the same equations in
 * fp32, with sl2 = scale * log2(e):
 *     preprocess   D_i = rowsum(dO_i * O_i), dQacc = 0
 *     key tile j   K_j, V_j loaded once; dK_j = dV_j = 0; for each query tile i it sees:
 *                      S = Q_i K_j^T,  P = 2^(S sl2 - LSE_i log2 e)  (masked: -inf -> 0)
 *                      dP = dO_i V_j^T,  dS = P (dP - D_i)
 *                      dV_j += P^T dO_i,  dK_j += dS^T Q_i,  dQacc_i += dS K_j
 *                  dK_j = scale dK_j, dV_j rounded to 16 bits
 *     convert      dQ = scale dQacc, rounded to 16 bits
 * Causal: key tile kt visits query tiles qt_begin .. Tr-1, the diagonal ones (qt < qt_full) masked,
 * and the ragged last key tile masked; rows >= N get LSE = +inf (P = 0). As the kernel.
 *
 * Versus the kernel: `diff` shows the tile loop of stage12_kernel and stage12c_key_tile side by side.
 * A block's 256 threads, its shared memory and its barriers are one call here, and tile_pv on a
 * transposed tile is cpu_tile_pv on a transposed copy. One thing differs on purpose: the kernel adds
 * each key tile's share of dQ to a global fp32 accumulator by atomics, in the order the blocks
 * happen to run; the model runs a head's key tiles kt = 0, 1, ... one after the other on one OpenMP
 * thread and adds the shares in that order, so it is bit-for-bit repeatable (ATTN_BACKWARD) and
 * needs no atomics. The preprocess and convert kernels are loops over the head's rows.
 *
 * Limits: fp16, head dim 32, 64 or 128 (those of stage 12); any N >= 1. One head per OpenMP
 * thread: a problem with one head runs on one core. Scratch: N * (D + 2) floats per thread.
 * Run:    build/attn --stage 12m --batch 2 --heads 3 --seq 129 --dim 64 --causal --check
 *         (build/nocuda/attn after make NO_CUDA=1, or where make finds no nvcc)
 */
#include "backward_tiled.h"
#include "tiles_cpu.h"

#define ID "12m" /* this model's registry id */
#define BR 64    /* Br: query rows per query tile, TILE_BR of tiles.cuh */
#define BC 64    /* Bc: keys per key tile, TILE_BC */

/* One head, as the kernel's blocks of that head see it. */
typedef struct {
    const uint16_t *q, *k, *v, *o, *d_o; /* this head's [N, D] */
    uint16_t *dq, *dk, *dv;
    const float *lse; /* this head's [N] */
    int N, D, Tr, Tc, causal;
    float scale;
} bwd_head;

/* One OpenMP thread's tiles (the kernel's shared memory and registers), and its head's dQacc and D
 * (the kernel's workspace). */
typedef struct {
    float *Qs, *dOs;      /* Br x D */
    float *Ks, *Kt, *Vt;  /* Bc x D, and K and V transposed, D x Bc */
    float *S, *dP, *T;    /* Br x Bc: S then P, dP then dS; T: P^T or dS^T, Bc x Br */
    float *dK, *dV;       /* Bc x D */
    float *dq_acc, *delta; /* N x D, N */
} bwd_scratch;

static void bwd_scratch_free(bwd_scratch *w) {
    free(w->Qs), free(w->dOs), free(w->Ks), free(w->Kt), free(w->Vt), free(w->S), free(w->dP), free(w->T);
    free(w->dK), free(w->dV), free(w->dq_acc), free(w->delta);
}

static int bwd_scratch_alloc(bwd_scratch *w, int N, int D) {
    const size_t f = sizeof(float), tile = (size_t)BR * D * f;
    w->Qs = attn_alloc(tile), w->dOs = attn_alloc(tile);
    w->Ks = attn_alloc(tile), w->Kt = attn_alloc(tile), w->Vt = attn_alloc(tile);
    w->S = attn_alloc((size_t)BR * BC * f), w->dP = attn_alloc((size_t)BR * BC * f), w->T = attn_alloc((size_t)BR * BC * f);
    w->dK = attn_alloc(tile), w->dV = attn_alloc(tile);
    w->dq_acc = attn_alloc((size_t)N * D * f), w->delta = attn_alloc((size_t)N * f);
    return w->Qs && w->dOs && w->Ks && w->Kt && w->Vt && w->S && w->dP && w->T && w->dK && w->dV && w->dq_acc &&
           w->delta;
}

/* dst[c][r] = src[r][c] for a rows x cols tile: the kernel's bwd_store_t. */
static void bwd_transpose(float *dst, const float *src, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(int64_t)c * rows + r] = src[(int64_t)r * cols + c];
}

/* acc * mult rounded to 16 bits into rows row0 .. row0+rows-1 < N of the head. */
static void bwd_store_rows(uint16_t *head, const float *acc, float mult, int row0, int rows, int N, int D) {
    for (int r = 0; r < rows && row0 + r < N; r++)
        for (int x = 0; x < D; x++) head[(int64_t)(row0 + r) * D + x] = attn_f2h(acc[(int64_t)r * D + x] * mult);
}

/* P and dS of a query tile, in place: S = Q K^T (unscaled) becomes P = 2^(S sl2 - LSE_i log2 e), with
 * the mask where `masked` (the diagonal, or the ragged last key tile) applied to the exponent; dP
 * becomes dS = P (dP - D_i). Rows >= N get LSE = +inf: P = 0, dS = 0. The kernel's bwd_p_and_ds. */
static void stage12c_p_and_ds(float *S, float *dP, const bwd_head *h, const float *delta, int q0, int key0,
                              int masked) {
    const float sl2 = h->scale * ATTN_LOG2E;
    for (int r = 0; r < BR; r++) {
        const float lse2 = q0 + r < h->N ? h->lse[q0 + r] * ATTN_LOG2E : INFINITY;
        for (int c = 0; c < BC; c++) S[r * BC + c] = fmaf(S[r * BC + c], sl2, -lse2); /* log2 P */
    }
    if (masked) cpu_tile_mask(S, BR, BC, q0, key0, h->N, h->causal);
    for (int r = 0; r < BR; r++) {
        const float d_i = q0 + r < h->N ? delta[q0 + r] : 0.0f;
        for (int c = 0; c < BC; c++) {
            S[r * BC + c] = exp2f(S[r * BC + c]);                     /* P; 2^-inf = 0 */
            dP[r * BC + c] = S[r * BC + c] * (dP[r * BC + c] - d_i); /* dS */
        }
    }
}

/* One key tile kt of one head: one block of stage12_kernel. */
static void stage12c_key_tile(const bwd_head *h, int kt, bwd_scratch *w) {
    const int N = h->N, D = h->D, key0 = kt * BC;
    float *S = w->S, *dP = w->dP;

    /* K_j (row-major for dQ, transposed for S) and V_j (transposed for dP), unscaled, loaded once */
    cpu_tile_load_rows(w->Ks, h->k, key0, BC, N, D, 1.0f, ATTN_F16);
    cpu_tile_load_keys(w->Kt, h->k, key0, BC, N, D, ATTN_F16);
    cpu_tile_load_keys(w->Vt, h->v, key0, BC, N, D, ATTN_F16);
    memset(w->dK, 0, (size_t)BC * D * sizeof(float));
    memset(w->dV, 0, (size_t)BC * D * sizeof(float));

    /* Causal: query tiles qt_begin .. qt_full-1 masked (the diagonal), qt_full .. Tr-1 unmasked, those
     * before qt_begin skipped. Non-causal: every query tile, masked only in the ragged last key tile. */
    const int qt_begin = h->causal ? key0 / BR : 0;
    const int qt_full = h->causal ? (key0 + BC - 1 + BR - 1) / BR : 0;
    const int tail = key0 + BC > N;

    for (int qt = qt_begin; qt < h->Tr; qt++) {
        const int q0 = qt * BR, rows = q0 + BR < N ? BR : N - q0;
        cpu_tile_load_rows(w->Qs, h->q, q0, BR, N, D, 1.0f, ATTN_F16);
        cpu_tile_load_rows(w->dOs, h->d_o, q0, BR, N, D, 1.0f, ATTN_F16);
        cpu_tile_scores(S, w->Qs, BR, w->Kt, BC, 0, BC, D);
        cpu_tile_scores(dP, w->dOs, BR, w->Vt, BC, 0, BC, D);
        stage12c_p_and_ds(S, dP, h, w->delta, q0, key0, qt < qt_full || tail);
        bwd_transpose(w->T, S, BR, BC);
        cpu_tile_pv(w->dV, w->T, BC, BR, w->dOs, 0, D); /* dV_j += P^T dO_i */
        bwd_transpose(w->T, dP, BR, BC);
        cpu_tile_pv(w->dK, w->T, BC, BR, w->Qs, 0, D); /* dK_j += dS^T Q_i */
        cpu_tile_pv(w->dq_acc + (int64_t)q0 * D, dP, rows, BC, w->Ks, 0, D); /* dQacc_i += dS K_j */
    }

    bwd_store_rows(h->dk, w->dK, h->scale, key0, BC, N, D);
    bwd_store_rows(h->dv, w->dV, 1.0f, key0, BC, N, D);
}

/* One head: the preprocess kernel, the head's key-tile blocks in order kt = 0, 1, ..., the convert
 * kernel. */
static void stage12c_head(const bwd_head *h, bwd_scratch *w) {
    const int N = h->N, D = h->D;
    for (int i = 0; i < N; i++) { /* D_i = dO_i . O_i, in order d = 0 .. D-1 */
        float acc = 0.0f;
        for (int x = 0; x < D; x++) acc += attn_h2f(h->d_o[(int64_t)i * D + x]) * attn_h2f(h->o[(int64_t)i * D + x]);
        w->delta[i] = acc;
    }
    memset(w->dq_acc, 0, (size_t)N * D * sizeof(float));
    for (int kt = 0; kt < h->Tc; kt++) stage12c_key_tile(h, kt, w);
    bwd_store_rows(h->dq, w->dq_acc, h->scale, 0, N, N, D);
}

attn_status stage12m_run(const attn_problem *p, const attn_args *a) {
    attn_status st = cpu_tiles_check_f16_d32_to_128(ID, p);
    if (st == ATTN_OK) st = attn_problem_validate(p);
    if (st != ATTN_OK) return st;
    const int64_t BH = p->B * p->H, N = p->N, D = p->D;
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        bwd_scratch w;
        /* Every thread must reach the omp for and its barrier: one without its scratch skips its heads,
         * and the run says ENOMEM (as cpu_tiles_run). */
        const int have = bwd_scratch_alloc(&w, (int)N, (int)D);
        failed = !have;
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < BH; bh++) {
            if (!have) continue;
            const int64_t off = bh * N * D;
            const bwd_head h = {(const uint16_t *)a->q + off, (const uint16_t *)a->k + off,
                                (const uint16_t *)a->v + off, (const uint16_t *)a->o + off,
                                (const uint16_t *)a->d_o + off, (uint16_t *)a->dq + off, (uint16_t *)a->dk + off,
                                (uint16_t *)a->dv + off, a->lse + bh * N, (int)N, (int)D,
                                (int)((N + BR - 1) / BR), (int)((N + BC - 1) / BC), p->causal != 0, p->scale};
            stage12c_head(&h, &w);
        }
        bwd_scratch_free(&w);
    }
    if (failed) return attn_fail(ATTN_ENOMEM, "stage %s: cannot allocate the scratch of one thread", ID);
    return ATTN_OK;
}
