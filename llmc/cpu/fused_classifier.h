/*
 * llmc/cpu/fused_classifier.h -- softmax + cross-entropy and its gradient, fused: the CPU kernel(s), twin
 * of llmc/cuda/fused_classifier.cuh (same names and signatures). Conventions: common.h.
 */
#ifndef LLMC_CPU_FUSED_CLASSIFIER_H
#define LLMC_CPU_FUSED_CLASSIFIER_H

#include "common.h"

/* ------------------------------------------------------------------------ */
/* classifier: softmax + cross-entropy (+ its gradient), fused              */

/* logits (N,Vp) row-major, columns V..Vp-1 are padding. Per row n:
     losses[n] = log(sum_{j<V} exp(l_j - max)) - (l_target - max)
               = -log softmax(l[0:V])[target]          (targets[n] in [0,V))
   If dloss != 0 the row is overwritten with
     dlogits[j] = dloss * (softmax_j - [j == target])  for j < V, 0 for j >= V
   (dloss is dL/dlosses[n], e.g. 1/(B*T) for a mean loss). The exponentials
   are computed once: stored into the row in the first pass, rescaled in the
   second. Sums: 512-element float blocks added into a double. */
#ifdef LLMC_BF16
/* bf16 program: the same sums; the exponentials are kept in an fp32 row
   buffer per thread (not in the bf16 row), so that each dlogit is rounded
   once, as in the CUDA kernel (llmc/cuda/fused_classifier.cuh):
     dlogits[j] = bf16(exp(l_j - max) * (dloss / sum) - dloss [j == target])
   losses fp32. */
static inline void fused_classifier(floatX* logits, float* losses,
                                    const int* targets, int N, int V, int Vp,
                                    float dloss) {
#pragma omp parallel
    {
        float* ebuf = dloss != 0.0f ? (float*)malloc(sizeof(float) * (V > 0 ? V : 1)) : NULL;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            floatX* l = logits + (size_t)n * Vp;
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < V; j++) mx = ldx(l[j]) > mx ? ldx(l[j]) : mx;
            int tgt = targets[n];
            float lt = ldx(l[tgt]);
            double sum = 0.0;
            for (int j0 = 0; j0 < V; j0 += 512) {
                int j1 = j0 + 512 < V ? j0 + 512 : V;
                float s = 0.0f;
                if (ebuf) {
#pragma omp simd reduction(+ : s)
                    for (int j = j0; j < j1; j++) {
                        float e = cpu_expf(ldx(l[j]) - mx);
                        ebuf[j] = e;
                        s += e;
                    }
                } else {
#pragma omp simd reduction(+ : s)
                    for (int j = j0; j < j1; j++) s += cpu_expf(ldx(l[j]) - mx);
                }
                sum += s;
            }
            if (losses) losses[n] = (float)(log(sum) - ((double)lt - (double)mx));
            if (ebuf) {
                float f = (float)((double)dloss / sum);
#pragma omp simd
                for (int j = 0; j < V; j++) l[j] = stx(ebuf[j] * f);
                l[tgt] = stx(ebuf[tgt] * f - dloss);
                for (int j = V; j < Vp; j++) l[j] = stx(0.0f);
            }
        }
        free(ebuf);
    }
}
#else
static inline void fused_classifier(floatX* logits, float* losses,
                                    const int* targets, int N, int V, int Vp,
                                    float dloss) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        floatX* l = logits + (size_t)n * Vp;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < V; j++) mx = ldx(l[j]) > mx ? ldx(l[j]) : mx;
        int tgt = targets[n];
        float lt = ldx(l[tgt]);
        double sum = 0.0;
        for (int j0 = 0; j0 < V; j0 += 512) {
            int j1 = j0 + 512 < V ? j0 + 512 : V;
            float s = 0.0f;
            if (dloss != 0.0f) {
#pragma omp simd reduction(+ : s)
                for (int j = j0; j < j1; j++) {
                    float e = cpu_expf(ldx(l[j]) - mx);
                    l[j] = stx(e);
                    s += e;
                }
            } else {
#pragma omp simd reduction(+ : s)
                for (int j = j0; j < j1; j++) s += cpu_expf(ldx(l[j]) - mx);
            }
            sum += s;
        }
        if (losses) losses[n] = (float)(log(sum) - ((double)lt - (double)mx));
        if (dloss != 0.0f) {
            float f = (float)((double)dloss / sum);
#pragma omp simd
            for (int j = 0; j < V; j++) l[j] = stx(ldx(l[j]) * f);
            l[tgt] = stx(ldx(l[tgt]) - dloss);
            for (int j = V; j < Vp; j++) l[j] = stx(0.0f);
        }
    }
}

#endif /* LLMC_BF16 */

#endif /* LLMC_CPU_FUSED_CLASSIFIER_H */
