/*
 * llmc/cpu/encoder.h -- token + position embedding, forward and backward: the CPU kernel(s), twin
 * of llmc/cuda/encoder.cuh (same names and signatures). Conventions: common.h.
 */
#ifndef LLMC_CPU_ENCODER_H
#define LLMC_CPU_ENCODER_H

#include "common.h"

/* ------------------------------------------------------------------------ */
/* encoder                                                                  */

/* out (B,T,C) = wte (V,C) [inp (B,T)] + wpe (maxT,C) [t]: token embedding
   row plus position embedding row. Writes out (no accumulation). */
static inline void encoder_forward(floatX* out, const int* inp,
                                   const floatX* wte, const floatX* wpe, int B,
                                   int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        floatX* o = out + (size_t)bt * C;
        const floatX* we = wte + (size_t)inp[bt] * C;
        const floatX* pe = wpe + (size_t)t * C;
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = stx(ldx(we[i]) + ldx(pe[i]));
    }
}

/* dwte (V,C) [inp[b,t],:] += dout[b,t,:]; dwpe (maxT,C) [t,:] += sum_b
   dout[b,t,:]. Race-free with repeated token ids: the C channels are split
   among threads and each thread walks all B*T rows for its own channels
   (rows in order, so the result is deterministic). */
static inline void encoder_backward(floatX* dwte, floatX* dwpe,
                                    const floatX* dout, const int* inp, int B,
                                    int T, int C) {
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        size_t lo, hi;
        cpu_split_range((size_t)C, ith, nth, 16, &lo, &hi);
        for (int bt = 0; bt < B * T && hi > lo; bt++) {
            int t = bt % T;
            const floatX* d = dout + (size_t)bt * C;
            floatX* we = dwte + (size_t)inp[bt] * C;
            floatX* pe = dwpe + (size_t)t * C;
#pragma omp simd
            for (size_t i = lo; i < hi; i++) {
                we[i] = stx(ldx(we[i]) + ldx(d[i]));
                pe[i] = stx(ldx(pe[i]) + ldx(d[i]));
            }
        }
    }
}

#endif /* LLMC_CPU_ENCODER_H */
