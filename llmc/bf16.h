/*
 bf16.h: bfloat16 <-> fp32 conversions on the host, shared by the CPU bf16
 program, the CUDA program's host side, the checkpoint writer and the host
 collectives, so that every program rounds the same way.

 bfloat16 (Google Brain; IEEE fp32 with the low 16 mantissa bits dropped):
 1 sign bit, 8 exponent bits, 7 stored mantissa bits (8 significant bits),
 so relative rounding error <= 2^-8 under round-to-nearest (half of the
 2^-7 spacing of 1 + k/128).

 Rounding: ROUND TO NEAREST, TIES TO EVEN, the mode of CUDA's
 __float2bfloat16_rn and of llm.c's model exporter; finite values whose
 rounding overflows become +-inf as in IEEE; NaN stays a (quiet) NaN.
 Plain C11 / C++17 common subset, no intrinsics.
*/
#ifndef LLMC_BF16_H
#define LLMC_BF16_H

#include <stdint.h>
#include <string.h>

/* fp32 -> bf16 bits, round to nearest even. */
static inline uint16_t bf16_bits_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x0040u;              /* quiet NaN, sign and payload top kept */
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* bf16 bits -> fp32 (exact). */
static inline float bf16_bits_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* fp32 -> fp32 rounded to the nearest bf16 value (what storing then loading
   a bf16 gives). */
static inline float bf16_round(float f) { return bf16_bits_to_float(bf16_bits_from_float(f)); }

#endif /* LLMC_BF16_H */
