/*
 * llmc/cpu/adamw.h -- AdamW on a shard of the parameters: the CPU kernel(s), twin
 * of llmc/cuda/adamw.cuh (same names and signatures). Conventions: common.h.
 */
#if !defined(LLMC_CPU_ADAMW_H) || (defined(CPU_EW_AGAIN) && !defined(LLMC_CPU_ADAMW_H_AVX512))
#ifndef CPU_EW
#error "llmc/cpu/adamw.h: include llmc/cpu/kernels.h, which compiles it once per ISA level (elementwise.h)"
#endif
#ifdef CPU_EW_AGAIN
#define LLMC_CPU_ADAMW_H_AVX512
#endif
#define LLMC_CPU_ADAMW_H

#include "common.h"

/* ------------------------------------------------------------------------ */
/* optimizer                                                                */

/* AdamW on n elements (any shard), in torch.optim.AdamW's order:
     g = grads[i] * grad_scale
     m = m + (1-beta1) (g - m)            (= beta1 m + (1-beta1) g)
     v = beta2 v + (1-beta2) g^2
     w = (master ? master[i] : params[i])
     w = w (1 - lr weight_decay) - (lr/beta1_correction) m /
         (sqrt(v)/sqrt(beta2_correction) + eps)
   which equals w - lr (mhat/(sqrt(vhat)+eps) + weight_decay w) with
   mhat = m/beta1_correction, vhat = v/beta2_correction,
   beta{1,2}_correction = 1 - beta{1,2}^step. Stores w to master (if not
   NULL) and params; m, v (n) updated in place. */
/* One element of AdamW (the formula above), the arithmetic every variant
   below shares (the CPU twin of the CUDA kernels' adamw_element): g_raw is
   the element's gradient as loaded, w its weight (master or param); m, v
   updated in place; returns the new weight. decay = 1 - lr weight_decay,
   step = lr / beta1_correction, bc2_sqrt = sqrt(beta2_correction),
   om1 = 1 - beta1, om2 = 1 - beta2. */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline float adamw_element(float g_raw, float* m, float* v, float w, float grad_scale, float om1, float beta2,
                                  float om2, float decay, float step, float bc2_sqrt, float eps) {
    float g = g_raw * grad_scale;
    float mi = *m + om1 * (g - *m);
    float vi = beta2 * *v + om2 * (g * g);
    *m = mi;
    *v = vi;
    return w * decay - step * (mi / (sqrtf(vi) / bc2_sqrt + eps));
}
#endif /* CPU_EW_SHARED */

static inline void CPU_EW(adamw_update)(floatX* params, float* master,
                                const floatX* grads, float* m, float* v,
                                size_t n, float lr, float beta1, float beta2,
                                float beta1_correction, float beta2_correction,
                                float eps, float weight_decay,
                                float grad_scale) {
    const float decay = 1.0f - lr * weight_decay;
    const float step = lr / beta1_correction;
    const float bc2_sqrt = sqrtf(beta2_correction);
    const float om1 = 1.0f - beta1, om2 = 1.0f - beta2;
#ifdef LLMC_BF16
    if (master) {
        /* bf16 program: blocks of 256 whose new weights are rounded and
           stored in a second loop (fewer live vector registers; ~5% faster
           measured); the same arithmetic and one rounding per element */
        size_t nb = (n + 255) / 256;
#pragma omp parallel for schedule(static)
        for (size_t blk = 0; blk < nb; blk++) {
            float wb[256];
            size_t i0 = blk * 256, k = n - i0 < 256 ? n - i0 : 256;
#pragma omp simd
            for (size_t j = 0; j < k; j++) {
                size_t i = i0 + j;
                float w = adamw_element(ldx(grads[i]), &m[i], &v[i], master[i], grad_scale, om1, beta2, om2, decay, step, bc2_sqrt, eps);
                master[i] = w;
                wb[j] = w;
            }
#pragma omp simd
            for (size_t j = 0; j < k; j++) params[i0 + j] = stx(wb[j]);
        }
        return;
    }
#endif
    if (master) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) {
            float w = adamw_element(ldx(grads[i]), &m[i], &v[i], master[i], grad_scale, om1, beta2, om2, decay, step, bc2_sqrt, eps);
            master[i] = w;
            params[i] = stx(w);
        }
    } else {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            params[i] = stx(adamw_element(ldx(grads[i]), &m[i], &v[i], ldx(params[i]), grad_scale, om1, beta2, om2, decay, step, bc2_sqrt, eps));
    }
}

#endif /* LLMC_CPU_ADAMW_H */
