/*
 * test_work_units.c: stage 09's work order (09_overlap/work_units.h), run on the CPU with the lines the
 * kernel runs. The persistent grid hands each block units in a loop; a pair of blocks (a cluster) walks
 * all heads' row blocks two at a time; causal units pair a head's longest row block with its shortest,
 * and the last heads go in single row blocks, longest first.
 * For many shapes and grids, the test replays every block's loop as the kernel does and checks:
 * every row block of every head is computed exactly once; a pair's two blocks take adjacent row blocks
 * and share K/V exactly when they are on one head; only an odd total of row blocks makes a block work
 * past N, once, on the last head's row block Tr; causal units carry Tr + 1 row blocks' worth of keys;
 * the busiest block of a causal grid has at most 1/0.85 of the average work (or one longest row block);
 * the kernel, which counts units with its launched grid, counts what the launch did; exactly a block's
 * final item is flagged last (its consumers' last GEMM window skips the hand-back).
 * A slip here (a row block taken twice or never, SMs idle at the end) would otherwise show only on a GPU.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "09_overlap/work_units.h"

/* The kernel's loops for one block (producer and consumers walk the same), each item recorded. */
typedef struct {
    int *visits;   /* per (head, row block): how often it was computed */
    int64_t keys;  /* causal: key blocks this block visits (row block i: i + 1), its work */
    int ghosts;    /* items past N (row block Tr) */
    int straddles; /* pair units whose two blocks are on different heads (counted by rank 0) */
} replay;

static void replay_block(replay *r, int causal, int pair, unsigned block, unsigned grid, int tr,
                         int64_t heads) {
    const int64_t units = unit_count(causal, pair, tr, heads, grid);
    const unsigned rank = pair ? block & 1u : 0u;
    int64_t u, items = 0, last_at = -1;
    for (int64_t t = 0; (u = block_unit(causal, pair, block, grid, t)) < units; ++t)
        for (int half = 0; half <= causal; ++half) {
            const work_item w = unit_item(causal, pair, rank, u, half, tr, heads, grid);
            if (w.row_block < 0) break;
            if (last_item(causal, pair, block, grid, t, u, half, tr, heads, units)) {
                cr_assert_eq(last_at, -1, "block %u: two items flagged last", block);
                last_at = items;
            }
            items++;
            cr_assert(w.bh >= 0 && w.bh < heads, "head %lld of %lld (unit %lld)", (long long)w.bh,
                      (long long)heads, (long long)u);
            cr_assert(w.row_block >= 0 && w.row_block <= tr, "row block %d, Tr %d", w.row_block, tr);
            if (w.row_block == tr) {
                cr_assert(pair && rank == 1 && w.bh == heads - 1 && (tr * heads) % 2 == 1,
                          "a row block past N outside the odd last pair: tr %d heads %lld", tr,
                          (long long)heads);
                r->ghosts++;
                continue;
            }
            r->visits[w.bh * tr + w.row_block]++;
            r->keys += w.row_block + 1;
            if (pair) {
                const work_item peer = unit_item(causal, pair, rank ^ 1u, u, half, tr, heads, grid);
                const int64_t mine = w.bh * tr + w.row_block, theirs = peer.bh * tr + peer.row_block;
                cr_assert_eq(theirs, rank ? mine - 1 : mine + 1, "the pair's row blocks are not adjacent");
                cr_assert_eq(w.shared_kv, peer.bh == w.bh, "shared_kv %d with heads %lld and %lld",
                             w.shared_kv, (long long)w.bh, (long long)peer.bh);
                cr_assert_eq(peer.shared_kv, w.shared_kv);
                if (rank == 0 && !w.shared_kv) r->straddles++;
            }
        }
    /* the consumers' last window skips its hand-back: exactly on the block's final item */
    cr_assert_eq(last_at, items - 1,
                 "causal %d pair %d block %u of %u, Tr %d heads %lld: item %lld of %lld "
                 "flagged last",
                 causal, pair, block, grid, tr, (long long)heads, (long long)last_at, (long long)items);
}

/* Replays every block of a grid; returns the most key blocks one block visits (causal: its work). */
static int64_t check_shape(int causal, int pair, unsigned grid, int tr, int64_t heads) {
    replay r = {calloc((size_t)(tr * heads), sizeof(int)), 0, 0, 0};
    int64_t busiest = 0;
    cr_assert_not_null(r.visits);
    for (unsigned b = 0; b < grid; b++) {
        r.keys = 0;
        replay_block(&r, causal, pair, b, grid, tr, heads);
        busiest = r.keys > busiest ? r.keys : busiest;
    }
    for (int64_t k = 0; k < tr * heads; k++)
        cr_assert_eq(r.visits[k], 1,
                     "causal %d pair %d grid %u Tr %d heads %lld: head %lld row block %lld "
                     "computed %d times",
                     causal, pair, grid, tr, (long long)heads, (long long)(k / tr), (long long)(k % tr),
                     r.visits[k]);
    cr_assert_eq(r.ghosts, pair && (tr * heads) % 2 == 1, "tr %d heads %lld: %d row blocks past N", tr,
                 (long long)heads, r.ghosts);
    /* a pair straddles at most every other head boundary, and never when Tr is even */
    cr_assert(pair ? r.straddles <= heads / 2 && (tr % 2 == 1 || r.straddles == 0) : r.straddles == 0,
              "tr %d heads %lld: %d straddling pairs", tr, (long long)heads, r.straddles);
    free(r.visits);
    return busiest;
}

Test(work_units, every_row_block_once) {
    static const unsigned grids[] = {1, 2, 6, 66, 132};
    for (int tr = 1; tr <= 37; tr++)
        for (int64_t heads = 1; heads <= 9; heads++)
            for (int g = 0; g < (int)(sizeof grids / sizeof grids[0]); g++) {
                check_shape(0, 0, grids[g], tr, heads);
                check_shape(1, 0, grids[g], tr, heads);
                if (grids[g] % 2 == 0) check_shape(0, 1, grids[g], tr, heads); /* clusters of two */
            }
}

/* Causal units before the tail even out: the two halves of unit i see (Tr - i) + (i + 1) = Tr + 1 row
 * blocks of keys; the tail's units are single row blocks. */
Test(work_units, causal_units_carry_tr_plus_one) {
    const unsigned grid = 16;
    const int64_t heads = 40;
    for (int tr = 1; tr <= 64; tr++) {
        const int64_t paired = (heads - tail_heads(tr, heads, grid)) * (tr / 2);
        cr_assert(tr < 4 || paired > 0, "tr %d: no units before the tail", tr);
        for (int64_t u = 0; u < unit_count(1, 0, tr, heads, grid); u++) {
            int keys = 0, items = 0;
            for (int half = 0; half <= 1; half++, items++) {
                const work_item w = unit_item(1, 0, 0, u, half, tr, heads, grid);
                if (w.row_block < 0) break;
                keys += w.row_block + 1; /* causal row block i sees key blocks 0..i */
            }
            if (u < paired)
                cr_assert_eq(keys, tr + 1, "tr %d unit %lld: %d key blocks", tr, (long long)u, keys);
            else
                cr_assert_eq(items, 1, "tr %d unit %lld of the tail: %d row blocks", tr, (long long)u, items);
        }
    }
}

/*
 * The causal grid as the launch makes it (min(units, SMs) blocks) ends its work together: the busiest
 * block visits at most 1/0.85 of the average block's key blocks, or of one longest row block's (Tr),
 * whichever is more. Equal (long, short) units alone fail this: B x H = 16 at Tr = 33 (N = 4097,
 * D = 128) on 132 SMs takes three rounds, the last with 8 blocks busy: 0.67. Tr >= 8: with fewer row
 * blocks a row block is a large share of a block's work, and rounding alone misses the bound.
 */
Test(work_units, causal_rounds_end_together) {
    static const unsigned sms_list[] = {16, 66, 78, 114, 132};
    static const int64_t heads_list[] = {1, 2, 3, 5, 8, 13, 16, 21, 32, 40, 64, 100, 128, 256};
    for (int s = 0; s < (int)(sizeof sms_list / sizeof sms_list[0]); s++)
        for (int tr = 8; tr <= 79; tr++)
            for (int h = 0; h < (int)(sizeof heads_list / sizeof heads_list[0]); h++) {
                const int64_t heads = heads_list[h], units = unit_count(1, 0, tr, heads, sms_list[s]);
                const unsigned grid = units < sms_list[s] ? (unsigned)units : sms_list[s];
                cr_assert_eq(unit_count(1, 0, tr, heads, grid), units,
                             "sms %u tr %d heads %lld: the kernel's grid of %u counts other units",
                             sms_list[s], tr, (long long)heads, grid);
                const int64_t busiest = check_shape(1, 0, grid, tr, heads);
                const double average = (double)heads * tr * (tr + 1) / 2 / sms_list[s];
                const double floor_ = average > tr ? average : tr;
                cr_assert(busiest * 0.85 <= floor_,
                          "sms %u tr %d heads %lld: the busiest block visits %lld key blocks, %.1f "
                          "would be even",
                          sms_list[s], tr, (long long)heads, (long long)busiest, floor_);
            }
}
