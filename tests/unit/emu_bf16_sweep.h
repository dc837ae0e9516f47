/*
 tests/unit/emu_bf16_sweep.h: the float inputs of the bf16 conversion check
 (issue 47 item 10), shared by tests/unit/test_emu.cpp (the emulated
 cuda_bf16.h) and tests/unit/test_emu_bf16_ref.cpp (the CUDA toolkit's real
 cuda_bf16.h): the same list of fp32 bit patterns in both programs.

 emu_bf16_sweep(i) for i in [0, EMU_BF16_SWEEP_N):
   - i < 65536 * 8: every bf16 value's upper half with the 8 low halves
     0x0000, 0x0001, 0x7fff, 0x8000 (a tie), 0x8001, 0xffff, 0x4000, 0xc000:
     ties to even and odd, just below / above a tie, NaN payloads (any NaN's
     low half), +-inf, denormals, the overflow to inf at the largest finite;
   - the rest: a stride-4099 walk over all 2^32 patterns.
*/
#ifndef EMU_BF16_SWEEP_H
#define EMU_BF16_SWEEP_H
#include <stdint.h>

#define EMU_BF16_SWEEP_N (65536u * 8u + 1048576u)

static inline uint32_t emu_bf16_sweep(uint32_t i) {
    static const uint32_t lows[8] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x4000u, 0xc000u};
    if (i < 65536u * 8u) return ((i >> 3) << 16) | lows[i & 7u];
    return (i - 65536u * 8u) * 4099u + 12345u;
}
#endif
