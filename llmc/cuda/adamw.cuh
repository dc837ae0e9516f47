/*
 cuda/adamw.cuh: AdamW on n elements of a shard, mixed precision: bf16
 params and grads, fp32 master weights and moments m, v. In
 torch.optim.AdamW's order (Loshchilov & Hutter, decoupled weight decay):
   g = grads[i] * grad_scale                      (grad_scale: clipping factor)
   m = m + (1-beta1) (g - m)
   v = beta2 v + (1-beta2) g^2
   w = master[i] (or the bf16 param when master == NULL)
   w = w (1 - lr weight_decay) - (lr/beta1_correction) m / (sqrt(v)/sqrt(beta2_correction) + eps)
 w is stored to master (fp32) and to params as bf16 with ROUND-TO-NEAREST-EVEN
 (__float2bfloat16_rn); no stochastic rounding, so every rank holding the
 same master value derives the same bf16 parameter. One thread per element,
 grid-stride; fp32 arithmetic as in the CPU kernel.
*/
#ifndef LLMC_CUDA_ADAMW_CUH
#define LLMC_CUDA_ADAMW_CUH

#include "common.cuh"

__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                             float beta1, float beta2, float decay, float step, float bc2_sqrt, float eps,
                             float grad_scale) {
    const float om1 = 1.0f - beta1, om2 = 1.0f - beta2;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = bf(grads[i]) * grad_scale;
        float mi = m[i] + om1 * (g - m[i]);
        float vi = beta2 * v[i] + om2 * g * g;
        m[i] = mi;
        v[i] = vi;
        float w = master ? master[i] : bf(params[i]);
        w = w * decay - step * (mi / (sqrtf(vi) / bc2_sqrt + eps));
        if (master) master[i] = w;
        params[i] = __float2bfloat16_rn(w); /* round to nearest even */
    }
}

/* Same signature and semantics as the CPU kernel (llmc/cpu/kernels.h);
   all pointers are device memory; asynchronous on the compute stream. */
static inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                                float lr, float beta1, float beta2, float beta1_correction, float beta2_correction,
                                float eps, float weight_decay, float grad_scale) {
    if (n == 0) return;
    const float decay = 1.0f - lr * weight_decay;
    const float step = lr / beta1_correction;
    const float bc2_sqrt = sqrtf(beta2_correction);
    unsigned int blocks = cdiv_u(n, 256);
    unsigned int cap = (unsigned int)(cuda_ctx.num_sms > 0 ? cuda_ctx.num_sms * 16 : 2048);
    if (blocks > cap) blocks = cap;
    adamw_kernel<<<blocks, 256, 0, cuda_ctx.stream>>>(params, master, grads, m, v, n, beta1, beta2, decay, step,
                                                      bc2_sqrt, eps, grad_scale);
    cudaCheckLaunch("adamw_kernel");
}

#endif /* LLMC_CUDA_ADAMW_CUH */
