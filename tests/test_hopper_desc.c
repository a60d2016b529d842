/*
 * test_hopper_desc.c: the wgmma shared-memory descriptor of stages 07-09 (kit/hopper_desc.h), on the
 * CPU with the lines the kernels run. The kernels build one descriptor per tile and advance it per
 * k-step (hop_desc_advance); that is only right if advancing by b bytes gives exactly the descriptor of
 * the address b bytes further on, for every address and step the kernels use. CI has no GPU: a slip in
 * a field (a wrong shift, an add that carries into the leading offset) would otherwise show only as
 * wrong attention outputs on a Hopper machine.
 */
#include <criterion/criterion.h>

#include "kit/hopper_desc.h"

/* The fields where the PTX ISA puts them, for one address and both operand kinds the kernels use. */
Test(hopper_desc, fields_at_their_bits) {
    const uint64_t k_major = hop_desc_sw128(0x1230u, 16, 1024);
    cr_expect_eq(k_major & 0x3FFFu, 0x1230u >> 4, "start address, bits 0-13");
    cr_expect_eq((k_major >> 16) & 0x3FFFu, 1u, "leading byte offset 16 B, bits 16-29");
    cr_expect_eq((k_major >> 32) & 0x3FFFu, 1024u >> 4, "stride byte offset 1024 B, bits 32-45");
    cr_expect_eq(k_major >> 62, 1u, "128-byte swizzle, bits 62-63");
    cr_expect_eq(k_major & 0x3FFFC000C000C000ull, 0u, "reserved bits stay 0");
    const uint64_t mn_major = hop_desc_sw128(0x6000u, 192 * 128, 1024); /* V of a 192-key tile */
    cr_expect_eq((mn_major >> 16) & 0x3FFFu, 192u * 128u >> 4, "leading offset = Bc x 128 bytes");
}

/* Every 16-byte-aligned start address in the window, advanced by every multiple of 16 up to 64 KB
 * (the largest step a kernel takes inside one tile is under 48 KB: 3 regions of a 192-row Q tile),
 * while the end stays in the window: the same descriptor as built from the end address. */
Test(hopper_desc, advance_equals_descriptor_of_the_address) {
    const uint32_t lead[] = {16, 128 * 128, 192 * 128}, stride = 1024;
    long checked = 0, wrong = 0;
    for (unsigned l = 0; l < sizeof lead / sizeof lead[0]; ++l)
        for (uint32_t a = 0; a < HOP_SMEM_WINDOW; a += 16) {
            const uint64_t base = hop_desc_sw128(a, lead[l], stride);
            for (uint32_t b = 0; b <= 65536 && a + b < HOP_SMEM_WINDOW; b += 16, ++checked)
                wrong += hop_desc_advance(base, b) != hop_desc_sw128(a + b, lead[l], stride);
        }
    cr_expect_gt(checked, 100000000L, "the sweep ran (%ld pairs)", checked);
    cr_expect_eq(wrong, 0, "%ld of %ld (address, step) pairs differ", wrong, checked);
}

/* The window matters: past 256 KB the start field would carry into the reserved bits, and the
 * advanced descriptor would differ from a rebuilt one. This pins the assumption the kernels rely on
 * (shared addresses < 228 KB) to the place where it stops holding. */
Test(hopper_desc, advance_breaks_only_past_the_field) {
    const uint64_t last = hop_desc_sw128(0x3FFF0u, 16, 1024);
    cr_expect_neq(hop_desc_advance(last, 16) & 0xC000u, 0u, "a carry out of the 14-bit field reaches bit 14");
    cr_expect_neq(hop_desc_advance(last, 16), hop_desc_sw128(0x40000u, 16, 1024),
                  "and the advanced descriptor is no longer the rebuilt one");
    cr_expect(HOP_SMEM_WINDOW <= 0x40000u, "the window fits the 14-bit field of 16-byte units");
}
