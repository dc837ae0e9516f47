/*
 * llmc/cpu/gelu.h -- GELU (tanh approximation) and the residual add: the CPU kernel(s), twin
 * of llmc/cuda/gelu.cuh (same names and signatures). Conventions: common.h.
 */
#ifndef LLMC_CPU_GELU_H
#define LLMC_CPU_GELU_H

#include "common.h"

/* ------------------------------------------------------------------------ */
/* GELU, residual                                                           */

#define CPU_GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* out (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp.
   Writes out. */
static inline void gelu_forward(floatX* out, const floatX* inp, int N) {
#pragma omp parallel for simd schedule(static)
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        float u = CPU_GELU_K * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + cpu_tanhf(u));
    }
}

/* dinp (N) += gelu'(x) * dout, with u as in the forward and
   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi)
              (1 + 3 * 0.044715 x^2). */
static inline void gelu_backward(floatX* dinp, const floatX* inp,
                                 const floatX* dout, int N) {
#pragma omp parallel for simd schedule(static)
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        float u = CPU_GELU_K * (x + 0.044715f * x * x * x);
        float th = cpu_tanhf(u);
        float g = 0.5f * (1.0f + th) +
                  0.5f * x * (1.0f - th * th) * CPU_GELU_K *
                      (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += g * dout[i];
    }
}

/* out (N) = inp1 + inp2 (out may alias an input). Writes out. */
static inline void residual_forward(floatX* out, const floatX* inp1,
                                    const floatX* inp2, int N) {
#pragma omp parallel for simd schedule(static)
    for (int i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

#endif /* LLMC_CPU_GELU_H */
