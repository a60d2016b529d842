/*
 * test_backward_hopper_layout.c: stage 14's element maps (14_backward_hopper/backward_hopper_layout.h),
 * on the CPU, with the lines the kernel stores through, against the layouts as the PTX ISA draws them.
 * CI has no GPU, and the stage was written without one: a transposed index or a swizzle off by a chunk
 * would otherwise show only as wrong gradients on a Hopper machine. What is checked:
 *   - the wgmma accumulator map is one-to-one onto the 64 x N tile;
 *   - the accumulator of S^T (and dP^T) read as the A fragment of dV += P^T dO (kit's hop_pack_p:
 *     registers 8 kk + 2 r and + 1 into A register r of k-step kk) is the A layout of wgmma's m64k16;
 *   - the dS^T stores of both warpgroups fill the 16 KB buffer once, each element where wgmma reads
 *     A(m = query, k = key) of an MN-major operand in the 128-byte swizzle, and without bank conflicts;
 *   - the dQ stores fill the staging once, each element where the copy engine reads it from a box of the
 *     fp32 tensor map (32 x 64, 128-byte swizzle), at most 2-way bank conflicted.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "14_backward_hopper/backward_hopper_layout.h"

/* wgmma's A fragment (PTX ISA, "Register fragments: wgmma .m64nNk16", matrix A, 16-bit types): thread
 * tid of the warpgroup, register r (0..3), element e (0, 1) holds row 16 w + g + 8 (r % 2) and column
 * 2 t + e + 8 (r / 2) of the 64 x 16 slice, with w = tid / 32, lane = 4 g + t. */
static void a_fragment(int tid, int r, int e, int *row, int *col) {
    const int lane = tid & 31, g = lane >> 2, t = lane & 3;
    *row = 16 * (tid >> 5) + g + 8 * (r & 1);
    *col = 2 * t + e + 8 * (r >> 1);
}

/* A tile written by the copy engine in the 128-byte swizzle, or read by wgmma as an MN-major operand
 * (PTX ISA, "Shared Memory Matrix Layout", 128B swizzling): rows of 128 bytes, the 16-byte chunk c of row
 * r at chunk c XOR (r mod 8), atoms of 8 rows 1024 bytes apart (the descriptor's stride byte offset). For
 * A MN-major: a row per k, 64 m (16 bits) across it. */
static uint32_t mn_major_a(int m, int k) {
    return (uint32_t)((k / 8) * 1024 + (k % 8) * 128 + (((m / 8) ^ (k % 8)) * 16) + (m % 8) * 2);
}
/* The same swizzle for a box of 32 fp32 columns x 64 rows, boxes 8 KB apart (the fp32 tensor map). */
static uint32_t f32_box(int row, int col) {
    return (uint32_t)((col / 32) * 8192 + row * 128 + ((((col % 32) * 4 / 16) ^ (row % 8)) * 16) +
                      (col * 4) % 16);
}

/* Wavefronts of one warp's shared-memory access: 32 lanes of `bytes` (4 or 8) at addr[lane]. 8-byte
 * accesses go as two half-warps; each wavefront serves one 4-byte word per bank. */
static int wavefronts(const uint32_t *addr, int bytes) {
    const int per = bytes == 8 ? 16 : 32;
    int total = 0;
    for (int h = 0; h < 32 / per; ++h) {
        uint32_t words[32][64];
        int n[32] = {0}, worst = 0;
        for (int l = h * per; l < (h + 1) * per; ++l)
            for (int w = 0; w < bytes / 4; ++w) {
                const uint32_t word = addr[l] / 4 + (uint32_t)w, bank = word % 32;
                int seen = 0;
                for (int i = 0; i < n[bank]; ++i) seen |= words[bank][i] == word;
                if (!seen) words[bank][n[bank]++] = word;
                if (n[bank] > worst) worst = n[bank];
            }
        total += worst;
    }
    return total;
}

Test(backward_hopper_layout, accumulator_is_one_to_one) {
    for (int N = 64; N <= 128; N *= 2) {
        static unsigned char hit[64][128];
        memset(hit, 0, sizeof hit);
        for (int tid = 0; tid < 128; ++tid)
            for (int idx = 0; idx < N / 2; ++idx) {
                const int r = bwh_acc_row(tid, idx), c = bwh_acc_col(tid, idx);
                cr_assert(r >= 0 && r < 64 && c >= 0 && c < N, "tid %d idx %d -> (%d, %d)", tid, idx, r, c);
                hit[r][c]++;
            }
        for (int r = 0; r < 64; ++r)
            for (int c = 0; c < N; ++c)
                cr_expect_eq(hit[r][c], 1, "N %d: (%d, %d) held %d times", N, r, c, hit[r][c]);
    }
}

/* hop_pack_p's rule: A register r of k-step kk packs accumulator registers 8 kk + 2 r (low half) and + 1. */
Test(backward_hopper_layout, accumulator_is_the_next_products_a_fragment) {
    for (int tid = 0; tid < 128; ++tid)
        for (int kk = 0; kk < 4; ++kk)
            for (int r = 0; r < 4; ++r)
                for (int e = 0; e < 2; ++e) {
                    const int idx = 8 * kk + 2 * r + e;
                    int row, col;
                    a_fragment(tid, r, e, &row, &col);
                    cr_expect_eq(bwh_acc_row(tid, idx), row, "tid %d kk %d r %d e %d: row", tid, kk, r, e);
                    cr_expect_eq(bwh_acc_col(tid, idx), 16 * kk + col, "tid %d kk %d r %d e %d: column", tid,
                                 kk, r, e);
                }
}

/* store_ds: warpgroup wg, thread tid, A registers (kk, r) of dS^T, a 32-bit pair (queries col, col + 1). */
Test(backward_hopper_layout, ds_stores_land_where_wgmma_reads_a_transposed) {
    static unsigned char hit[16384];
    memset(hit, 0, sizeof hit);
    int worst = 0;
    for (int wg = 0; wg < 2; ++wg)
        for (int kk = 0; kk < 4; ++kk)
            for (int r = 0; r < 4; ++r)
                for (int w = 0; w < 4; ++w) {
                    uint32_t addr[32];
                    for (int lane = 0; lane < 32; ++lane) {
                        const int tid = 32 * w + lane, idx = 8 * kk + 2 * r;
                        const int key = 64 * wg + bwh_acc_row(tid, idx), query = bwh_acc_col(tid, idx);
                        addr[lane] = bwh_ds_offset(key, query);
                        cr_assert(addr[lane] % 4 == 0 && addr[lane] < 16384);
                        for (int e = 0; e < 2; ++e) {
                            cr_expect_eq(addr[lane] + 2u * (uint32_t)e, mn_major_a(query + e, key),
                                         "dS^T(key %d, query %d)", key, query + e);
                            hit[addr[lane] + 2 * e]++;
                        }
                    }
                    const int wf = wavefronts(addr, 4);
                    if (wf > worst) worst = wf;
                }
    for (int b = 0; b < 16384; b += 2) cr_expect_eq(hit[b], 1, "byte %d written %d times", b, hit[b]);
    cr_expect_eq(worst, 1, "a warp's dS^T store takes %d wavefronts, 1 without conflicts", worst);
    /* k-step kk of dQ = dS K (keys 16 kk ..) is the same layout 2048 bytes on: the descriptor's advance */
    for (int k = 0; k < 128; ++k)
        for (int m = 0; m < 64; ++m)
            cr_expect_eq(mn_major_a(m, k), (uint32_t)(k / 16) * 2048 + mn_major_a(m, k % 16), "(%d, %d)", m,
                         k);
}

/* reduce_dq: thread tid, accumulator registers idx and idx + 1 (columns col, col + 1) as one 8-byte store. */
Test(backward_hopper_layout, dq_stores_land_where_the_copy_engine_reads_them) {
    for (int D = 64; D <= 128; D *= 2) {
        static unsigned char hit[64 * 128 * 4];
        memset(hit, 0, sizeof hit);
        int worst = 0;
        for (int idx = 0; idx < D / 2; idx += 2)
            for (int w = 0; w < 4; ++w) {
                uint32_t addr[32];
                for (int lane = 0; lane < 32; ++lane) {
                    const int tid = 32 * w + lane, row = bwh_acc_row(tid, idx), col = bwh_acc_col(tid, idx);
                    cr_assert_eq(bwh_acc_row(tid, idx + 1), row);
                    cr_assert_eq(bwh_acc_col(tid, idx + 1), col + 1);
                    addr[lane] = bwh_dq_offset(row, col);
                    cr_assert(addr[lane] % 8 == 0 && addr[lane] < (uint32_t)(64 * D * 4), "D %d (%d, %d)", D,
                              row, col);
                    for (int e = 0; e < 2; ++e) {
                        cr_expect_eq(addr[lane] + 4u * (uint32_t)e, f32_box(row, col + e), "D %d dQ(%d, %d)",
                                     D, row, col + e);
                        hit[addr[lane] + 4 * e]++;
                    }
                }
                const int wf = wavefronts(addr, 8);
                if (wf > worst) worst = wf;
            }
        for (int b = 0; b < 64 * D * 4; b += 4)
            cr_expect_eq(hit[b], 1, "D %d: byte %d written %d times", D, b, hit[b]);
        cr_expect_leq(worst, 4, "D %d: a warp's dQ store takes %d wavefronts (2 ideal, 4 at 2-way conflicts)",
                      D, worst);
    }
}
