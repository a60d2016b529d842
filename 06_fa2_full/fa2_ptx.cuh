/*
 * fa2_ptx.cuh: the PTX instructions stage 06 is made of (all sm_80), each behind a small function
 * named after it. Nothing here knows about attention.
 *
 *   cp.async.cg        16 bytes global -> shared, no registers, L1 bypassed; src-size 0 writes zeros
 *   ldmatrix .x4       four 8x8 16-bit matrices from shared memory into the mma fragment layout
 *   mma.m16n8k16       D (16x8 fp32) += A (16x16) B (16x8), fp16 or bf16 in: 4096 flops per warp
 *   ld/st.shared.v4 (cvt.rn.f16x2/bf16x2 and ex2.approx are kit/fast_math.cuh, shared with 04-09)
 */
#ifndef FA2_PTX_CUH
#define FA2_PTX_CUH

#include <stdint.h>

#include "attn.h"        /* ATTN_F16, ATTN_BF16: the DTYPE template parameter */
#include "fast_math.cuh" /* fast_exp2, pack_16x2<DTYPE> (ATTN_BF16 = 1) */

static __device__ __forceinline__ uint32_t fa2_smem_address(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* threadIdx.x through asm volatile: the compiler can neither hoist nor merge these reads, so the
 * per-lane offsets derived from them are recomputed near their uses (a few integer ops per key tile)
 * instead of being computed once and kept alive through the whole key loop. At 255 registers with O,
 * S, m and l live every long-lived register counts (measured: with plain threadIdx.x, D = 64 causal
 * spills 32 bytes at sm_90). */
static __device__ __forceinline__ int fa2_thread_index(void) {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
    return t;
}

/* 16 bytes global -> shared, bypassing L1 (.cg). src_bytes = 0 reads nothing and writes 16 zeros:
 * that is how rows past N become zero rows of the tile. */
static __device__ __forceinline__ void fa2_cp_async_16(uint32_t dst, const void *src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
static __device__ __forceinline__ void fa2_cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N> static __device__ __forceinline__ void fa2_cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

static __device__ __forceinline__ void fa2_ldmatrix_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
static __device__ __forceinline__ void fa2_ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
static __device__ __forceinline__ void fa2_ld_shared_16(uint32_t r[4], uint32_t addr) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
static __device__ __forceinline__ void fa2_st_shared_16(uint32_t addr, const uint32_t r[4]) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]),
                 "r"(r[3])
                 : "memory");
}
/* a * b as a 64-bit number, one IMAD.WIDE (mul.wide.s32). Written as (int64_t)a * b, the compiler
 * multiplies in 64 bits (three IMAD and a shift) wherever b was widened in another block, as stage
 * 06's runtime row strides are: in the row offsets outside the key loop that cost 128 instructions a
 * block at D = 128 (3678 against 3550). In the loop the C form stays: there IMAD.WIDE also adds the
 * address, which the asm would leave to a 64-bit add. */
static __device__ __forceinline__ int64_t fa2_mul_wide(int a, int b) {
    int64_t r;
    asm("mul.wide.s32 %0, %1, %2;" : "=l"(r) : "r"(a), "r"(b));
    return r;
}

/* One 16-byte global store (ptr 16-byte aligned). Stage 06 writes O through it: from a strided row
 * address the compiler cannot prove the alignment of a uint4 store and splits it into four. */
static __device__ __forceinline__ void fa2_st_global_16(void *ptr, const uint32_t r[4]) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(ptr), "r"(r[0]), "r"(r[1]), "r"(r[2]),
                 "r"(r[3])
                 : "memory");
}
static __device__ __forceinline__ void fa2_st_shared_4(uint32_t addr, uint32_t x) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(x) : "memory");
}

/* C (16x8, fp32) += A (16x16, 16-bit, row) * B (16x8, 16-bit, col). */
template <int DTYPE>
static __device__ __forceinline__ void fa2_mma_16x8x16(float c[4], const uint32_t a[4], uint32_t b0,
                                                       uint32_t b1) {
    if (DTYPE == ATTN_F16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif
