/*
 * half.h: fp16 and bf16 on the host, as raw 16-bit patterns, converted in software so that the host
 * code needs neither _Float16 nor CUDA. Rounding is to nearest, ties to even, as the GPU does.
 */
#ifndef ATTN_HALF_H
#define ATTN_HALF_H

#include <stdint.h>
#include <string.h>

#include "attn.h"

static inline uint32_t attn_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float attn_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float attn_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return attn_bits_f32(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    return attn_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t attn_f2h(float f) {
    uint32_t x = attn_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN (keep NaN quiet and non-zero) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {
        /* result is subnormal in fp16 (|f| < 2^-14): round f / 2^-24 to an integer, ties to even */
        if (ax < 0x33000000u) return sign; /* < 2^-25: rounds to zero */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* value = m * 2^(e-150); want m * 2^(e-150+24) */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000u; /* rebias 127 -> 15 */
    uint32_t rem = r & 0x1fffu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

static inline float attn_bf2f(uint16_t b) { return attn_bits_f32((uint32_t)b << 16); }

static inline uint16_t attn_f2bf(float f) {
    uint32_t x = attn_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float attn_to_f32(uint16_t bits, attn_dtype t) {
    return t == ATTN_BF16 ? attn_bf2f(bits) : attn_h2f(bits);
}
static inline uint16_t attn_from_f32(float f, attn_dtype t) {
    return t == ATTN_BF16 ? attn_f2bf(f) : attn_f2h(f);
}
/* Unit roundoff of the 16-bit type: 2^-11 for fp16 (10 stored mantissa bits), 2^-8 for bf16. */
static inline double attn_unit_roundoff(attn_dtype t) {
    return t == ATTN_BF16 ? 0.00390625 : 0.00048828125;
}

#endif
