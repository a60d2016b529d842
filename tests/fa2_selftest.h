/*
 * fa2_selftest.h: device tests of stage 06's building blocks, run by tests/test_fa2_blocks.c (make
 * check) on the GPU. Each runs a small kernel made of the stage's own functions and compares what the
 * hardware did with what the fragment maps in fa2_steps.cuh say.
 *
 * Each returns the number of mismatching elements (0: pass), or -1 when it could not run (no GPU, a
 * CUDA error). `msg` (cap bytes) receives one line: the first mismatch, or why it could not run.
 * Linked into the test binary only (not libattn, nor libflashattn), and only in a CUDA build.
 */
#ifndef FA2_SELFTEST_H
#define FA2_SELFTEST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A tile of `D` columns copied into shared memory by the kernel's cp.async copy (the last rows past
 * "N" zero-filled), swizzled or not, then read back by ldmatrix with the kernel's lane addresses in all
 * three patterns (A: Q and P; B: K; B .trans: V). D = 32, 64, 80, 96, 128, 192 or 256. */
int fa2_selftest_ldmatrix(int d, int swizzle, char *msg, size_t cap);

/* One mma whose product is C[r][n] = 16 r + n: every lane's accumulators must sit at the rows and
 * columns fa2_fragment_row() and fa2_fragment_col() name (the masks and the epilogue rely on them). */
int fa2_selftest_fragment_rows(int bf16, char *msg, size_t cap);

/* S (two 16x8 accumulator tiles) rounded to 16 bits and repacked by fa2_p_as_a_operand() is the A
 * operand of P V: P times the identity must give P back, element for element. */
int fa2_selftest_p_repack(int bf16, char *msg, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
