/*
 * test_work_units.c: stage 09's work order (09_overlap/work_units.h), run on the CPU with the lines the
 * kernel runs. The persistent grid hands each block units in a loop; a pair of blocks (a cluster) walks
 * all heads' row blocks two at a time; causal units pair a head's longest row block with its shortest.
 * For many shapes and grids, the test replays every block's loop as the kernel does and checks:
 * every row block of every head is computed exactly once; a pair's two blocks take adjacent row blocks
 * and share K/V exactly when they are on one head; only an odd total of row blocks makes a block work
 * past N, once, on the last head's row block Tr; causal units carry Tr + 1 row blocks' worth of keys.
 * A slip here (a row block taken twice or never) would otherwise show only on a GPU.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "09_overlap/work_units.h"

/* The kernel's loops for one block (producer and consumers walk the same), each item recorded. */
typedef struct {
    int *visits;   /* per (head, row block): how often it was computed */
    int ghosts;    /* items past N (row block Tr) */
    int straddles; /* pair units whose two blocks are on different heads (counted by rank 0) */
} replay;

static void replay_block(replay *r, int causal, int pair, unsigned block, unsigned grid, int tr,
                         int64_t heads) {
    const int64_t units = unit_count(causal, pair, tr, heads);
    const unsigned rank = pair ? block & 1u : 0u;
    for (int64_t u = first_unit(pair, block); u < units; u += unit_stride(pair, grid))
        for (int half = 0; half <= causal; ++half) {
            const work_item w = unit_item(causal, pair, rank, u, half, tr, heads);
            if (w.row_block < 0) break;
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
            if (pair) {
                const work_item peer = unit_item(causal, pair, rank ^ 1u, u, half, tr, heads);
                const int64_t mine = w.bh * tr + w.row_block, theirs = peer.bh * tr + peer.row_block;
                cr_assert_eq(theirs, rank ? mine - 1 : mine + 1, "the pair's row blocks are not adjacent");
                cr_assert_eq(w.shared_kv, peer.bh == w.bh, "shared_kv %d with heads %lld and %lld",
                             w.shared_kv, (long long)w.bh, (long long)peer.bh);
                cr_assert_eq(peer.shared_kv, w.shared_kv);
                if (rank == 0 && !w.shared_kv) r->straddles++;
            }
        }
}

static void check_shape(int causal, int pair, unsigned grid, int tr, int64_t heads) {
    replay r = {calloc((size_t)(tr * heads), sizeof(int)), 0, 0};
    cr_assert_not_null(r.visits);
    for (unsigned b = 0; b < grid; b++) replay_block(&r, causal, pair, b, grid, tr, heads);
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

/* Causal units even out: the two halves of unit i see (Tr - i) + (i + 1) = Tr + 1 row blocks of keys
 * (the middle one of an odd Tr alone: (Tr + 1) / 2), so striding over units balances the SMs. */
Test(work_units, causal_units_carry_tr_plus_one) {
    for (int tr = 1; tr <= 64; tr++)
        for (int64_t u = 0; u < unit_count(1, 0, tr, 3); u++) {
            int keys = 0;
            for (int half = 0; half <= 1; half++) {
                const work_item w = unit_item(1, 0, 0, u, half, tr, 3);
                if (w.row_block < 0) break;
                keys += w.row_block + 1; /* causal row block i sees key blocks 0..i */
            }
            const int i = (int)(u % ((tr + 1) / 2));
            cr_assert_eq(keys, tr % 2 == 1 && i == tr / 2 ? (tr + 1) / 2 : tr + 1, "tr %d unit %lld", tr,
                         (long long)u);
        }
}
