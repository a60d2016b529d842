/*
 * fast_math.cuh: the two one-instruction helpers every GPU stage from 04 on needs, kept once here.
 *
 *   fast_exp2(x)          2^x on the special-function unit (ex2.approx.ftz.f32, MUFU.EX2): one
 *                         instruction, where expf costs a multiply, an ex2 and range fix-ups. The
 *                         stages fold log2(e) into the softmax scale so that every exponential of
 *                         the online softmax is this one.
 *   pack_16x2<BF16>(lo,hi) two fp32 values -> one 32-bit register of two fp16 (BF16 = 0) or bf16
 *                         (BF16 = 1) values, round to nearest, lo in bits 0..15: the layout the
 *                         tensor cores read a row pair in and the one a 4-byte store writes.
 *
 * ex2.approx.ftz flushes results below 2^-126 to 0: for probabilities <= 1 that only drops terms
 * fp16 (smallest subnormal 2^-24) and bf16 could not hold anyway; 2^(-inf) = +0, which is what a
 * masked score must become.
 */
#ifndef ATTN_FAST_MATH_CUH
#define ATTN_FAST_MATH_CUH

#include <stdint.h>

static __device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* cvt.rn.{f16,bf16}x2.f32 d, a, b puts a in the upper half and b in the lower one. */
template <int BF16> static __device__ __forceinline__ uint32_t pack_16x2(float lo, float hi) {
    uint32_t r;
    if (BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

#endif
