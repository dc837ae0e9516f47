/*
 tests/cuda_emu/cuda_bf16.h: __nv_bfloat16 of the emulated device (issue 47).
 Two bytes, the same bits as CUDA's. The conversions are bit for bit the
 CUDA toolkit's host functions (cuda_bf16.hpp): float -> bf16 rounds to
 nearest even, any NaN becomes 0x7fff; bf16 -> float is exact. Checked
 against the toolkit's own header by tests/cuda_emu/unit.cpp.
*/
#ifndef LLMC_CUDA_EMU_BF16_H
#define LLMC_CUDA_EMU_BF16_H

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16_raw { unsigned short x; };

inline unsigned short emu_f2bf_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    uint32_t rem = x << 16;
    unsigned short r = (unsigned short)(x >> 16);
    if (rem > 0x80000000u || (rem == 0x80000000u && (r & 1u))) r++;
    return r;
}
inline float emu_bf2f(unsigned short b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(emu_f2bf_bits(f)) {}
    __nv_bfloat16(double f) : __x(emu_f2bf_bits((float)f)) {}
    __nv_bfloat16(int v) : __x(emu_f2bf_bits((float)v)) {}
    operator float() const { return emu_bf2f(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
};
typedef __nv_bfloat16 nv_bfloat16;
static_assert(sizeof(__nv_bfloat16) == 2, "bf16 is two bytes");

inline __nv_bfloat16 __float2bfloat16_rn(float f) { __nv_bfloat16_raw r{emu_f2bf_bits(f)}; return __nv_bfloat16(r); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return emu_bf2f(b.__x); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16_raw r{u}; return __nv_bfloat16(r); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }

#endif /* LLMC_CUDA_EMU_BF16_H */
