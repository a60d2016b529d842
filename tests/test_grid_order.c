/*
 * test_grid_order.c: the grid order of stages 07 and 08 (kit/grid_order.h), on the CPU with the lines
 * the kernels run: every row block of every head exactly once, pairs on adjacent row blocks of one head,
 * causal heads in turn and then a tail side by side, and the causal grid's last wave short (a replay on
 * the SM counts of the sm_90 GPUs these stages run on).
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "kit/grid_order.h"

typedef struct {
    int64_t bh, n; /* B*H, N */
    int unit;      /* 2: pairs of blocks (stage 08 at D = 128) */
    unsigned gy;   /* grid.y: 65535 in the kernels; smaller here, to make several grid.z slices */
} shape;

static unsigned grid_x(const shape *s) {
    const unsigned tr = (unsigned)((s->n + 127) / 128);
    return s->unit == 2 ? (tr + 1u) & ~1u : tr;
}

/* Calls f(item, launch index) for every block in launch order (x fastest, then y, then z). */
static void walk(const shape *s, int causal, void (*f)(grid_item, int64_t, void *), void *ctx) {
    const unsigned gx = grid_x(s), gz = (unsigned)((s->bh + s->gy - 1) / s->gy);
    int64_t at = 0;
    for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < s->gy; ++y)
            for (unsigned x = 0; x < gx; ++x, ++at)
                f(grid_order(causal, s->unit, s->bh, x, y, z, gx, s->gy), at, ctx);
}

typedef struct {
    const shape *s;
    int *seen;
    long bad;
} count_ctx;

static void count(grid_item it, int64_t at, void *c) {
    count_ctx *cc = c;
    (void)at;
    if (it.bh < 0) return;
    if (it.bh >= cc->s->bh || it.row_block < 0 || it.row_block >= (int)grid_x(cc->s)) {
        ++cc->bad;
        return;
    }
    ++cc->seen[it.bh * grid_x(cc->s) + it.row_block];
}

static const shape shapes[] = {
    {128, 4096, 1, 65535}, {128, 4096, 2, 65535}, {16, 4097, 1, 65535}, {16, 4097, 2, 65535},
    {160, 3001, 1, 65535}, {20, 1000, 1, 7},      {20, 1000, 2, 7},     {3, 1, 2, 65535},
    {1, 65536, 2, 65535},  {37, 383, 1, 65535},   {37, 383, 2, 5},      {9, 129, 2, 4},
};

Test(grid_order, every_row_block_once) {
    for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
        for (int causal = 0; causal < 2; ++causal) {
            const shape *s = &shapes[i];
            const int64_t cells = s->bh * grid_x(s);
            count_ctx c = {s, calloc((size_t)cells, sizeof(int)), 0};
            cr_assert_not_null(c.seen);
            walk(s, causal, count, &c);
            long wrong = 0;
            for (int64_t k = 0; k < cells; ++k) wrong += c.seen[k] != 1;
            cr_expect_eq(c.bad + wrong, 0,
                         "B*H %lld N %lld unit %d grid.y %u causal %d: %ld out of range, %ld of %lld row "
                         "blocks not taken exactly once",
                         (long long)s->bh, (long long)s->n, s->unit, s->gy, causal, c.bad, wrong,
                         (long long)cells);
            free(c.seen);
        }
}

/* The two blocks of a cluster (x = 2c, 2c + 1): one head, row blocks 2t + 1 and 2t. */
Test(grid_order, pairs_take_adjacent_row_blocks_of_one_head) {
    for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
        const shape *s = &shapes[i];
        if (s->unit != 2) continue;
        const unsigned gx = grid_x(s), gz = (unsigned)((s->bh + s->gy - 1) / s->gy);
        for (int causal = 0; causal < 2; ++causal)
            for (unsigned z = 0; z < gz; ++z)
                for (unsigned y = 0; y < s->gy; ++y)
                    for (unsigned x = 0; x < gx; x += 2) {
                        const grid_item a = grid_order(causal, 2, s->bh, x, y, z, gx, s->gy);
                        const grid_item b = grid_order(causal, 2, s->bh, x + 1, y, z, gx, s->gy);
                        cr_assert_eq(a.bh, b.bh, "cluster (%u, %u, %u): heads %lld and %lld", x, y, z,
                                     (long long)a.bh, (long long)b.bh);
                        cr_assert_eq(a.row_block ^ 1, b.row_block,
                                     "cluster (%u, %u, %u): row blocks %d and %d", x, y, z, a.row_block,
                                     b.row_block);
                    }
    }
}

/* Causal: the heads before the tail run one after another (a head's blocks consecutive in launch order,
 * so that the blocks at work share a few heads' K and V); the tail's heads run side by side, their
 * longest row blocks first. Checked on the last grid.z slice's heads. */
typedef struct {
    int64_t *first, *last;
    int *first_row_block;
} span_ctx;
static void span(grid_item it, int64_t at, void *c) {
    span_ctx *sc = c;
    if (it.bh < 0) return;
    if (sc->first[it.bh] < 0) sc->first[it.bh] = at, sc->first_row_block[it.bh] = it.row_block;
    sc->last[it.bh] = at;
}

Test(grid_order, causal_heads_in_turn_then_the_tail_side_by_side) {
    for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
        const shape *s = &shapes[i];
        span_ctx c = {malloc((size_t)s->bh * sizeof(int64_t)), malloc((size_t)s->bh * sizeof(int64_t)),
                      malloc((size_t)s->bh * sizeof(int))};
        cr_assert(c.first && c.last && c.first_row_block);
        for (int64_t h = 0; h < s->bh; ++h) c.first[h] = -1;
        walk(s, 1, span, &c);
        const unsigned gx = grid_x(s);
        const int64_t slice0 = (s->bh - 1) / s->gy * s->gy, heads = s->bh - slice0;
        const int64_t tail = grid_tail_heads(GRID_TAIL_BLOCKS, gx, heads);
        for (int64_t h = slice0; h < s->bh; ++h) {
            const int64_t blocks = c.last[h] - c.first[h] + 1; /* places from its first block to its last */
            if (h < s->bh - tail)
                cr_expect_eq(blocks, gx,
                             "B*H %lld N %lld: head %lld before the tail spans %lld places, not %u",
                             (long long)s->bh, (long long)s->n, (long long)h, (long long)blocks, gx);
            else
                cr_expect_geq(blocks, (int64_t)(gx / s->unit - 1) * tail * s->unit + s->unit,
                              "B*H %lld N %lld: tail head %lld spans %lld places, not the whole tail",
                              (long long)s->bh, (long long)s->n, (long long)h, (long long)blocks);
            cr_expect_geq(c.first_row_block[h], (int)gx - s->unit, "head %lld starts with row block %d of %u",
                          (long long)h, c.first_row_block[h], gx);
        }
        free(c.first);
        free(c.last);
        free(c.first_row_block);
    }
}

/* A replay of the causal grid on `sms` SMs, one block each (stage 07 and 08 at D = 128): blocks start in
 * launch order on the SM that frees first and cost their key tiles + 1 (Br = Bc = 128: row block i
 * visits i + 1 tiles). Returns the busiest SM's time over the mean: 1 is even. */
typedef struct {
    double sm[GRID_MAX_SMS];
    int64_t n;
    int sms;
} replay_ctx;
static void replay_block(grid_item it, int64_t at, void *c) {
    replay_ctx *rc = c;
    (void)at;
    if (it.bh < 0 || (int64_t)it.row_block * 128 >= rc->n) return; /* past B*H or past N: no work */
    int best = 0;
    for (int k = 1; k < rc->sms; ++k) best = rc->sm[k] < rc->sm[best] ? k : best;
    rc->sm[best] += it.row_block + 2;
}
static double replay_order(const shape *s, int sms, int head_after_head) {
    cr_assert(sms > 0 && sms <= GRID_MAX_SMS, "replay on %d SMs: 1 to %d", sms, GRID_MAX_SMS);
    replay_ctx c = {{0}, s->n, sms};
    if (head_after_head) /* stages 03-06: head by head, each head's row blocks longest first */
        for (int64_t h = 0; h < s->bh; ++h)
            for (int x = (int)grid_x(s) - 1; x >= 0; --x) replay_block((grid_item){h, x}, 0, &c);
    else
        walk(s, 1, replay_block, &c);
    double sum = 0, most = 0;
    for (int k = 0; k < sms; ++k) sum += c.sm[k], most = c.sm[k] > most ? c.sm[k] : most;
    return most / (sum / sms);
}

/* GRID_TAIL_BLOCKS is a constant, three waves of GRID_MAX_SMS (grid_order.h says why): replayed on the
 * sm_90 SM counts, H100/H200 SXM 132, H100 PCIe 114 and H20 78. */
Test(grid_order, causal_grid_ends_together) {
    static const int gpus[] = {GRID_MAX_SMS, 114, 78};
    const shape bench = {128, 4096, 1, 65535}, few_heads = {16, 4096, 1, 65535};
    for (unsigned g = 0; g < sizeof gpus / sizeof gpus[0]; ++g) {
        const int sms = gpus[g];
        const double bench_old = replay_order(&bench, sms, 1), bench_new = replay_order(&bench, sms, 0);
        const double few_old = replay_order(&few_heads, sms, 1), few_new = replay_order(&few_heads, sms, 0);
        /* the replay tells the orders apart: head after head leaves a longer last wave at both shapes */
        cr_expect_geq(bench_old - bench_new, 0.01,
                      "%d SMs, B = 4, H = 32, N = 4096: head after head %.4f, ours %.4f", sms, bench_old,
                      bench_new);
        cr_expect_geq(few_old - few_new, 0.1,
                      "%d SMs, B = 1, H = 16, N = 4096: head after head %.4f, ours %.4f", sms, few_old,
                      few_new);
        cr_expect_leq(bench_new, 1.01, "%d SMs, B = 4, H = 32, N = 4096: busiest SM %.4f of the mean", sms,
                      bench_new);
        cr_expect_leq(few_new, 1.04, "%d SMs, B = 1, H = 16, N = 4096: busiest SM %.4f of the mean", sms,
                      few_new);
        cr_log_info("%d SMs: B = 4, H = 32: %.4f -> %.4f; B = 1, H = 16: %.4f -> %.4f", sms, bench_old,
                    bench_new, few_old, few_new);
    }
}
