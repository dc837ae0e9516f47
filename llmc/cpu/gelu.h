/*
 * llmc/cpu/gelu.h -- GELU (tanh approximation) and the residual add: the CPU kernel(s), twin
 * of llmc/cuda/gelu.cuh (same names and signatures). Conventions: common.h.
 */
#if !defined(LLMC_CPU_GELU_H) || (defined(CPU_EW_AGAIN) && !defined(LLMC_CPU_GELU_H_AVX512))
#ifndef CPU_EW
#error "llmc/cpu/gelu.h: include llmc/cpu/kernels.h, which compiles it once per ISA level (elementwise.h)"
#endif
#ifdef CPU_EW_AGAIN
#define LLMC_CPU_GELU_H_AVX512
#endif
#define LLMC_CPU_GELU_H

#include "common.h"

/* ------------------------------------------------------------------------ */
/* GELU, residual                                                           */

#define CPU_GELU_K 0.7978845608028654f /* sqrt(2/pi) */

#ifdef LLMC_BF16
/* bf16 program: the same arithmetic, in blocks of CPU_GELU_BLOCK elements
   whose fp32 results are rounded and stored in a second loop (one rounding
   per element, as before): fusing the bf16 store into the tanh loop runs
   out of vector registers and costs ~35% (measured, d6 sizes). */
#define CPU_GELU_BLOCK 256

static inline void CPU_EW(gelu_forward)(floatX* out, const floatX* inp, size_t N) {
    size_t nb = (N + CPU_GELU_BLOCK - 1) / CPU_GELU_BLOCK;
#pragma omp parallel for schedule(static)
    for (size_t blk = 0; blk < nb; blk++) {
        float r[CPU_GELU_BLOCK];
        size_t i0 = blk * CPU_GELU_BLOCK, n = N - i0 < CPU_GELU_BLOCK ? N - i0 : CPU_GELU_BLOCK;
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float x = ldx(inp[i0 + i]);
            float u = CPU_GELU_K * (x + 0.044715f * x * x * x);
            r[i] = 0.5f * x * (1.0f + cpu_tanhf(u));
        }
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i0 + i] = stx(r[i]);
    }
}

static inline void CPU_EW(gelu_backward)(floatX* dinp, const floatX* inp,
                                 const floatX* dout, size_t N) {
    size_t nb = (N + CPU_GELU_BLOCK - 1) / CPU_GELU_BLOCK;
#pragma omp parallel for schedule(static)
    for (size_t blk = 0; blk < nb; blk++) {
        float r[CPU_GELU_BLOCK];
        size_t i0 = blk * CPU_GELU_BLOCK, n = N - i0 < CPU_GELU_BLOCK ? N - i0 : CPU_GELU_BLOCK;
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float x = ldx(inp[i0 + i]);
            float u = CPU_GELU_K * (x + 0.044715f * x * x * x);
            float th = cpu_tanhf(u);
            r[i] = 0.5f * (1.0f + th) +
                   0.5f * x * (1.0f - th * th) * CPU_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        }
#pragma omp simd
        for (size_t i = 0; i < n; i++)
            dinp[i0 + i] = stx(ldx(dinp[i0 + i]) + r[i] * ldx(dout[i0 + i]));
    }
}
#else
/* out (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp.
   Writes out. */
static inline void CPU_EW(gelu_forward)(floatX* out, const floatX* inp, size_t N) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) {
        float x = ldx(inp[i]);
        float u = CPU_GELU_K * (x + 0.044715f * x * x * x);
        out[i] = stx(0.5f * x * (1.0f + cpu_tanhf(u)));
    }
}

/* dinp (N) += gelu'(x) * dout, with u as in the forward and
   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi)
              (1 + 3 * 0.044715 x^2). */
static inline void CPU_EW(gelu_backward)(floatX* dinp, const floatX* inp,
                                 const floatX* dout, size_t N) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) {
        float x = ldx(inp[i]);
        float u = CPU_GELU_K * (x + 0.044715f * x * x * x);
        float th = cpu_tanhf(u);
        float g = 0.5f * (1.0f + th) +
                  0.5f * x * (1.0f - th * th) * CPU_GELU_K *
                      (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = stx(ldx(dinp[i]) + g * ldx(dout[i]));
    }
}
#endif

/* out (N) = inp1 + inp2 (out may alias an input). Writes out. */
static inline void CPU_EW(residual_forward)(floatX* out, const floatX* inp1,
                                    const floatX* inp2, size_t N) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) out[i] = stx(ldx(inp1[i]) + ldx(inp2[i]));
}

#endif /* LLMC_CPU_GELU_H */
