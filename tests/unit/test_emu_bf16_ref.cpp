/*
 tests/unit/test_emu_bf16_ref.cpp: the reference side of the bf16 check of
 tests/unit/test_emu.cpp (issue 47 item 10). Compiled by g++ as host code
 against the CUDA toolkit's own cuda_bf16.h (-I/usr/local/cuda/include;
 `make emu-unit` builds it as build/emu_bf16_ref when the header exists).
 Writes to stdout, raw little-endian:
   65536 x uint32: the fp32 bits of __bfloat162float(b) for every bf16 b;
   EMU_BF16_SWEEP_N x 3 x uint16: for each fp32 input of emu_bf16_sweep():
     __float2bfloat16_rn(f), __float2bfloat16(f), __nv_bfloat16(f).
*/
#include <cuda_bf16.h>
#include <stdio.h>
#include <string.h>
#include <vector>
#include "emu_bf16_sweep.h"

int main() {
    std::vector<uint32_t> a(65536);
    for (uint32_t b = 0; b < 65536; b++) {
        float f = __bfloat162float(__ushort_as_bfloat16((unsigned short)b));
        memcpy(&a[b], &f, 4);
    }
    std::vector<uint16_t> s((size_t)EMU_BF16_SWEEP_N * 3);
    for (uint32_t i = 0; i < EMU_BF16_SWEEP_N; i++) {
        uint32_t u = emu_bf16_sweep(i);
        float f;
        memcpy(&f, &u, 4);
        s[(size_t)i * 3 + 0] = __bfloat16_as_ushort(__float2bfloat16_rn(f));
        s[(size_t)i * 3 + 1] = __bfloat16_as_ushort(__float2bfloat16(f));
        __nv_bfloat16 c(f);
        s[(size_t)i * 3 + 2] = __bfloat16_as_ushort(c);
    }
    if (fwrite(a.data(), 4, a.size(), stdout) != a.size() || fwrite(s.data(), 2, s.size(), stdout) != s.size()) {
        fprintf(stderr, "emu_bf16_ref: write failed\n");
        return 1;
    }
    return 0;
}
