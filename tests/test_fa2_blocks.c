/*
 * test_fa2_blocks.c: the building blocks of stage 06, one at a time.
 *
 * On the host (every build, no GPU): the index functions of 06_fa2_full/fa2_layout.h, the very ones the
 * kernel uses. The swizzle maps a tile's chunks one to one into the tile; stepping a lane's address by
 * XOR, as the kernel does, lands on the chunk the layout says; every 8-lane phase of an ldmatrix, of a
 * cp.async store and of the epilogue's 16-byte loads touches 8 different groups of 4 banks (no bank
 * conflict), and without the swizzle the same phases do conflict (the check can fail); the mma fragment
 * map covers every element of a 16 x 8 tile exactly once.
 * On the GPU (fa2_selftest.cu): the same functions driving cp.async, ldmatrix and mma.sync, checked
 * against what the hardware returns: tile copy + swizzle + ldmatrix in all three operand patterns, the
 * accumulator's rows and columns, and P repacked from the S accumulators into the A operand of P V.
 */
#include "06_fa2_full/fa2_layout.h"
#include "test_util.h"

#ifdef ATTN_HAVE_CUDA
#include "fa2_selftest.h"
#endif

static const int dims[] = {32, 64, 80, 96, 128, 192, 256};
#define NUM_DIMS 7
#define TILE_ROWS 128

/* The 16-byte group of 4 banks (0..7) a chunk at byte offset `off` falls in. */
static int bank_group(int off) { return (off / 16) % 8; }

/* 1 when the 8 offsets hit 8 different bank groups (one wavefront for 8 x 16 bytes). */
static int conflict_free(const int off[8]) {
    int seen = 0;
    for (int i = 0; i < 8; i++) seen |= 1 << bank_group(off[i]);
    return seen == 0xff;
}

Test(fa2_layout, swizzle_is_a_bijection_onto_the_tile) {
    static unsigned char used[TILE_ROWS * 32];
    for (int di = 0; di < NUM_DIMS; di++)
        for (int sw = 0; sw <= 1; sw++) {
            const int d = dims[di], rc = fa2_row_chunks(d, sw);
            cr_assert(rc >= d / 8 && (sw || rc == d / 8), "D=%d: %d chunks per row", d, rc);
            memset(used, 0, sizeof used);
            for (int r = 0; r < TILE_ROWS; r++)
                for (int c = 0; c < d / 8; c++) {
                    const int off = FA2_CHUNK_OFFSET(rc, sw, r, c);
                    cr_assert(off % 16 == 0 && off >= r * rc * 16 && off < (r + 1) * rc * 16,
                              "D=%d swizzle=%d: chunk (%d, %d) at %d leaves its row", d, sw, r, c, off);
                    cr_assert_eq(used[off / 16], 0, "D=%d swizzle=%d: two chunks at %d", d, sw, off);
                    used[off / 16] = 1;
                }
        }
}

/* The kernel steps a lane's address to chunk pair kk by XOR (fa2_at_chunk_pair) and to 16-row block rb by
 * adding 16 rows: that must be the chunk the layout puts there. For the A (Q, P, V) and K lane patterns. */
Test(fa2_layout, xor_stepping_lands_on_the_layouts_chunk) {
    for (int di = 0; di < NUM_DIMS; di++) {
        const int d = dims[di], rc = fa2_row_chunks(d, 1);
        for (int lane = 0; lane < 32; lane++)
            for (int kk = 0; kk < d / 16; kk++)
                for (int k = 0; k <= 1; k++)
                    for (int rb = 0; rb < TILE_ROWS / 16; rb++) {
                        const int row = k ? fa2_ldmatrix_row_k(lane) : fa2_ldmatrix_row_a(lane);
                        const int chunk = k ? fa2_ldmatrix_chunk_k(lane) : fa2_ldmatrix_chunk_a(lane);
                        const int addr =
                            (FA2_CHUNK_OFFSET(rc, 1, row, chunk) ^ (kk << 5)) + rb * 16 * rc * 16;
                        cr_assert_eq(addr, FA2_CHUNK_OFFSET(rc, 1, 16 * rb + row, chunk + 2 * kk),
                                     "D=%d lane %d kk %d block %d (%s pattern)", d, lane, kk, rb,
                                     k ? "K" : "A");
                    }
    }
}

/* Each 8x8 matrix of an ldmatrix.x4 is one phase: lanes 8i..8i+7 give its 8 row addresses. */
static int ldmatrix_conflicts(int d, int sw) {
    const int rc = fa2_row_chunks(d, sw);
    int bad = 0;
    for (int rb = 0; rb < TILE_ROWS / 16; rb++)
        for (int kk = 0; kk < d / 16; kk++)
            for (int k = 0; k <= 1; k++)
                for (int m = 0; m < 4; m++) {
                    int off[8];
                    for (int i = 0; i < 8; i++) {
                        const int lane = 8 * m + i;
                        const int row = 16 * rb + (k ? fa2_ldmatrix_row_k(lane) : fa2_ldmatrix_row_a(lane));
                        const int chunk =
                            2 * kk + (k ? fa2_ldmatrix_chunk_k(lane) : fa2_ldmatrix_chunk_a(lane));
                        off[i] = FA2_CHUNK_OFFSET(rc, sw, row, chunk);
                    }
                    bad += !conflict_free(off);
                }
    return bad;
}

Test(fa2_layout, ldmatrix_phases_are_conflict_free_with_the_swizzle) {
    for (int di = 0; di < NUM_DIMS; di++) cr_assert_eq(ldmatrix_conflicts(dims[di], 1), 0, "D=%d", dims[di]);
    /* and the check has teeth: 128- and 256-byte rows without the swizzle conflict on every phase */
    cr_assert_gt(ldmatrix_conflicts(64, 0), 0);
    cr_assert_gt(ldmatrix_conflicts(128, 0), 0);
    cr_assert_gt(ldmatrix_conflicts(256, 0), 0);
}

/* 16-byte stores (cp.async) and loads (the epilogue) go 8 lanes per phase, thread t at chunk t mod C of
 * row t / C. Lanes that sit out (D = 96: chunks 12..15) take no part. */
static int copy_conflicts(int d, int sw) {
    const int rc = fa2_row_chunks(d, sw);
    int bad = 0;
    for (int t0 = 0; t0 < 256; t0 += 8) {
        int off[8], n = 0;
        for (int t = t0; t < t0 + 8; t++)
            if (fa2_copy_chunk(d, t) < d / 8)
                off[n++] = FA2_CHUNK_OFFSET(rc, sw, fa2_copy_row(d, t), fa2_copy_chunk(d, t));
        int seen = 0, distinct = 1;
        for (int i = 0; i < n; i++) {
            distinct &= !(seen >> bank_group(off[i]) & 1);
            seen |= 1 << bank_group(off[i]);
        }
        bad += !distinct;
    }
    return bad;
}

Test(fa2_layout, copy_and_epilogue_phases_are_conflict_free) {
    for (int di = 0; di < NUM_DIMS; di++) {
        cr_assert_eq(copy_conflicts(dims[di], 1), 0, "D=%d", dims[di]);
        cr_assert(fa2_copy_chunks(dims[di]) >= dims[di] / 8 && 32 % fa2_copy_chunks(dims[di]) == 0);
    }
}

/* Lane 4g + t holds rows g, g + 8 and columns 2t, 2t + 1: 32 lanes x 4 values = the 128 of a 16 x 8 tile. */
Test(fa2_layout, fragment_map_covers_the_tile_once) {
    int seen[16][8] = {{0}};
    for (int lane = 0; lane < 32; lane++)
        for (int h = 0; h < 2; h++)
            for (int e = 0; e < 2; e++) {
                const int r = fa2_fragment_row(lane, h), c = fa2_fragment_col(lane, e);
                cr_assert(r >= 0 && r < 16 && c >= 0 && c < 8, "lane %d h %d e %d -> (%d, %d)", lane, h, e, r,
                          c);
                seen[r][c]++;
            }
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++) cr_assert_eq(seen[r][c], 1, "element (%d, %d)", r, c);
}

/* ---- on the GPU --------------------------------------------------------------------------------------- */

#ifdef ATTN_HAVE_CUDA
#define SKIP_WITHOUT_GPU()                                                                                   \
    do {                                                                                                     \
        if (attn_gpu_available() != ATTN_OK) cr_skip_test("needs a GPU: %s", attn_last_error());             \
    } while (0)
#else
#define SKIP_WITHOUT_GPU()                                                                                   \
    cr_skip_test("needs a GPU: this build has no CUDA (nvcc was not found, or NO_CUDA=1 was given)")
#endif

Test(fa2_blocks, tile_copy_swizzle_and_ldmatrix_on_the_gpu) {
    SKIP_WITHOUT_GPU();
#ifdef ATTN_HAVE_CUDA
    char msg[512];
    for (int di = 0; di < NUM_DIMS; di++)
        for (int sw = 0; sw <= 1; sw++)
            cr_assert_eq(fa2_selftest_ldmatrix(dims[di], sw, msg, sizeof msg), 0, "%s", msg);
#endif
}

/* One mma's accumulators at the rows and columns of the fragment map, and P repacked from them into the
 * A operand of P V (times the identity: P again), for both dtypes. */
Test(fa2_blocks, mma_fragments_and_p_repack_on_the_gpu) {
    SKIP_WITHOUT_GPU();
#ifdef ATTN_HAVE_CUDA
    char msg[512];
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        cr_assert_eq(fa2_selftest_fragment_rows(bf16, msg, sizeof msg), 0, "%s", msg);
        cr_assert_eq(fa2_selftest_p_repack(bf16, msg, sizeof msg), 0, "%s", msg);
    }
#endif
}
