/*
 * llmc/cpu/fused_classifier.h -- softmax + cross-entropy and its gradient, fused: the CPU kernel(s), twin
 * of llmc/cuda/fused_classifier.cuh (same names and signatures). Conventions: common.h.
 */
#if !defined(LLMC_CPU_FUSED_CLASSIFIER_H) || (defined(CPU_EW_AGAIN) && !defined(LLMC_CPU_FUSED_CLASSIFIER_H_AVX512))
#ifndef CPU_EW
#error "llmc/cpu/fused_classifier.h: include llmc/cpu/kernels.h, which compiles it once per ISA level (elementwise.h)"
#endif
#ifdef CPU_EW_AGAIN
#define LLMC_CPU_FUSED_CLASSIFIER_H_AVX512
#endif
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
static inline void CPU_EW(fused_classifier)(floatX* logits, float* losses,
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
#pragma omp simd reduction(+ : s) safelen(CPU_EW_LANES)
                    for (int j = j0; j < j1; j++) {
                        float e = cpu_expf(ldx(l[j]) - mx);
                        ebuf[j] = e;
                        s += e;
                    }
                } else {
#pragma omp simd reduction(+ : s) safelen(CPU_EW_LANES)
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
static inline void CPU_EW(fused_classifier)(floatX* logits, float* losses,
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
#pragma omp simd reduction(+ : s) safelen(CPU_EW_LANES)
                for (int j = j0; j < j1; j++) {
                    float e = cpu_expf(ldx(l[j]) - mx);
                    l[j] = stx(e);
                    s += e;
                }
            } else {
#pragma omp simd reduction(+ : s) safelen(CPU_EW_LANES)
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

/* The classifier over vocabulary chunks (gpt.h), in three steps per row n
   of N, with an online softmax (Milakov & Gimelshein, arXiv:1805.02867):
   classifier_stats_init sets mx = -inf, sum = 0, tl = 0; for each chunk,
   classifier_chunk_stats takes logits (N, ncols) of vocabulary entries
   col0 .. col0+ncols-1 (entries >= V are padding, ignored) and updates
     mx' = max(mx, max_j l_j),  sum' = sum exp(mx - mx') + sum_j exp(l_j - mx'),
     tl = l_target when the target lies in the chunk;
   classifier_losses then gives losses[n] = log(sum) - (tl - mx)
   = -log softmax(l[0:V])[target]. Exponentials in fp32 (cpu_expf), summed
   in 512-element fp32 blocks into fp64, as fused_classifier does. */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void classifier_stats_init(float* mx, double* sum, float* tl, int N) {
    for (int n = 0; n < N; n++) { mx[n] = -INFINITY; sum[n] = 0.0; tl[n] = 0.0f; }
}
#endif /* CPU_EW_SHARED */

static inline void CPU_EW(classifier_chunk_stats)(const floatX* logits, int N, int col0, int ncols, int V, const int* targets,
                                          float* mx, double* sum, float* tl) {
    int valid = V - col0 < ncols ? V - col0 : ncols;
    if (valid <= 0) return;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const floatX* l = logits + (size_t)n * ncols;
        float cm = -INFINITY;
#pragma omp simd reduction(max : cm)
        for (int j = 0; j < valid; j++) { float v = ldx(l[j]); cm = v > cm ? v : cm; }
        float m_old = mx[n], m_new = cm > m_old ? cm : m_old;
        double s = 0.0;
        for (int j0 = 0; j0 < valid; j0 += 512) {
            int j1 = j0 + 512 < valid ? j0 + 512 : valid;
            float b = 0.0f;
#pragma omp simd reduction(+ : b) safelen(CPU_EW_LANES)
            for (int j = j0; j < j1; j++) b += cpu_expf(ldx(l[j]) - m_new);
            s += b;
        }
        sum[n] = (m_old == -INFINITY ? 0.0 : sum[n] * exp((double)m_old - (double)m_new)) + s;
        mx[n] = m_new;
        int t = targets[n] - col0;
        if (t >= 0 && t < valid) tl[n] = ldx(l[t]);
    }
}

#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void classifier_losses(float* losses, const float* mx, const double* sum, const float* tl, int N) {
    for (int n = 0; n < N; n++) losses[n] = (float)(log(sum[n]) - ((double)tl[n] - (double)mx[n]));
}
#endif /* CPU_EW_SHARED */

/* dlogits of one chunk, in place over its logits (N, ncols), from the
   final statistics: d_j = dloss (exp(l_j - mx)/sum - [col0 + j == target])
   for vocabulary entries, 0 for padding (one rounding per element). */
static inline void CPU_EW(classifier_chunk_grad)(floatX* logits, int N, int col0, int ncols, int V, const int* targets,
                                         const float* mx, const double* sum, float dloss) {
    int valid = V - col0 < ncols ? (V - col0 > 0 ? V - col0 : 0) : ncols;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        floatX* l = logits + (size_t)n * ncols;
        float m = mx[n];
        float f = (float)((double)dloss / sum[n]);
        int t = targets[n] - col0;
        /* the target's -dloss is applied after the loop (the loop gives
           exp * f, the target exp * f - dloss, one rounding each) so that
           the loop has no branch and vectorizes (gcc does not if-convert a
           select in it). The same arithmetic in both programs: x * f - 0 is
           x * f, and the target's value is computed from the same exp and
           the same product (fp32 program: bitwise what the loop with the
           select computed; dev/bitwise_matrix.sh) */
        int has_t = t >= 0 && t < valid;
        float lt = has_t ? ldx(l[t]) : 0.0f;
#pragma omp simd
        for (int j = 0; j < valid; j++) l[j] = stx(cpu_expf(ldx(l[j]) - m) * f);
        if (has_t) l[t] = stx(cpu_expf(lt - m) * f - dloss);
        for (int j = valid; j < ncols; j++) l[j] = stx(0.0f);
    }
}

#endif /* LLMC_CPU_FUSED_CLASSIFIER_H */
