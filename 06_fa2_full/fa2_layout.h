/*
 * fa2_layout.h: where every element of stage 06 sits, as plain integer functions. The kernel (CUDA)
 * and the host tests (C: tests/test_fa2_blocks.c) include this same file, so the tests check the very
 * index functions the kernel uses: the shared-memory tile and its XOR swizzle, the ldmatrix lane
 * addresses, the cp.async copy layout and the mma fragment maps (pictures in fa2_smem.cuh and
 * fa2_steps.cuh).
 */
#ifndef FA2_LAYOUT_H
#define FA2_LAYOUT_H

#ifdef __CUDACC__
#define FA2_INDEX static __host__ __device__ __forceinline__ constexpr
#else
#define FA2_INDEX static inline
#endif

/* ---- the shared-memory tile: rows of 16-byte chunks (8 halves each) ----------------------------- */

/* Chunks per smem row of a D-wide tile: D/8, except that a swizzled row of more than 8 chunks is padded
 * to a power of two (D = 80: 10 -> 16, D = 96: 12 -> 16, D = 192: 24 -> 32), so that the XOR below
 * never leaves its row (the swizzle works on whole 128-byte groups) and a row is a power of two bytes
 * (fa2_at_chunk_pair XORs the address: at 384-byte rows bit 7 would belong to the row). */
FA2_INDEX int fa2_row_chunks(int d, int swizzle) {
    return (swizzle && d / 8 > 8) ? (d / 8 <= 16 ? 16 : 32) : d / 8;
}

/* The XOR term of row r. Rows of 8 or more chunks (128 bytes or more) use r mod 8; 4-chunk rows (D = 32,
 * two rows per 128-byte group) use (r / 2) mod 4. 0 without the swizzle. */
FA2_INDEX int fa2_swizzle_xor(int row_chunks, int swizzle, int row) {
    return swizzle == 0 ? 0 : (row_chunks >= 8 ? (row & 7) : ((row >> 1) & 3));
}

/* Byte offset, inside a tile, of logical chunk c of row r: it is stored at physical chunk c ^ xor(r).
 * A macro, not a function: expanded in place the compiler sees row * (row bytes) + ..., a form that
 * folds into the load's immediate; through a function boundary it factors out the << 4 first and the
 * kernel needs more integer instructions per key tile (measured in the PTX of stage 06). */
#define FA2_CHUNK_OFFSET(row_chunks, swizzle, row, chunk)                                                    \
    ((row) * ((row_chunks)*16) + (((chunk) ^ fa2_swizzle_xor((row_chunks), (swizzle), (row))) << 4))

/* ---- ldmatrix.x4: which row and chunk each lane points at ------------------------------------------
 * Lanes 8i .. 8i+7 give the 8 row addresses of matrix i. For an A operand (Q, P) and for V (.trans):
 * row = lane mod 16, chunk = lane / 16. For K (the B operand of S = Q K^T): row = lane mod 8 +
 * 8 (lane / 16), chunk = (lane / 8) mod 2. The next 16-wide slice of D adds 2 to the chunk. */
FA2_INDEX int fa2_ldmatrix_row_a(int lane) { return lane & 15; }
FA2_INDEX int fa2_ldmatrix_chunk_a(int lane) { return lane >> 4; }
FA2_INDEX int fa2_ldmatrix_row_k(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
FA2_INDEX int fa2_ldmatrix_chunk_k(int lane) { return (lane >> 3) & 1; }

/* ---- mma.m16n8k16 fragments: lane = 4g + t holds rows g and g + 8 (h = 0, 1), columns 2t, 2t + 1 ----
 * of its 16 x 8 accumulator tile (S or O), and the same rows and columns (plus 8) of the A operand. */
FA2_INDEX int fa2_fragment_row(int lane, int h) { return (lane >> 2) + 8 * h; }
FA2_INDEX int fa2_fragment_col(int lane, int e) { return 2 * (lane & 3) + e; }

/* ---- the cp.async copy: thread i takes chunk i mod C of row i / C, then steps down the rows ----------
 * C = D/8 rounded up to a power of two (D = 80: 10 -> 16, D = 96: 12 -> 16, D = 192: 24 -> 32, and the
 * threads with a chunk >= D/8 sit out), so consecutive threads read consecutive 16 bytes of a row
 * (coalesced) and a thread keeps its column. */
FA2_INDEX int fa2_copy_chunks(int d) { return d / 8 <= 4 ? 4 : d / 8 <= 8 ? 8 : d / 8 <= 16 ? 16 : 32; }
FA2_INDEX int fa2_copy_chunk(int d, int thread) { return thread % fa2_copy_chunks(d); }
FA2_INDEX int fa2_copy_row(int d, int thread) { return thread / fa2_copy_chunks(d); }

#endif
