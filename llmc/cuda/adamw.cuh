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
 grid-stride; fp32 arithmetic as in the CPU kernel, with every multiply-add
 written as an explicit fmaf (adamw_element) so that the host twin used by
 the offloaded optimizer (adamw_host_update) computes the same bits.
*/
#ifndef LLMC_CUDA_ADAMW_CUH
#define LLMC_CUDA_ADAMW_CUH

#include "common.cuh"
#include <pthread.h>
#include <unistd.h>

/* One element of AdamW, the SAME code on the device (adamw_kernel) and on
   the host (adamw_host_update, the offloaded optimizer): every product is an
   explicit fmaf (a lone product as fmaf(a, b, 0)), every other operation one
   IEEE-rounded fp32 operation (sub, add, sqrtf, division: nvcc's defaults
   -prec-div=true -prec-sqrt=true, no -use_fast_math; glibc's fmaf is
   correctly rounded), so neither compiler has a multiply-add left to
   contract its own way and both sides give the same bits. Updates *m, *v
   and returns the new weight. */
__host__ __device__ inline float adamw_element(float g_raw, float* m, float* v, float w, float beta1, float beta2, float decay,
                                               float step, float bc2_sqrt, float eps, float grad_scale) {
    const float om1 = 1.0f - beta1, om2 = 1.0f - beta2;
    float g = fmaf(g_raw, grad_scale, 0.0f);
    float mi = fmaf(om1, g - *m, *m);                              /* m + (1-beta1)(g - m) */
    float vi = fmaf(beta2, *v, fmaf(fmaf(om2, g, 0.0f), g, 0.0f)); /* beta2 v + ((1-beta2) g) g */
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    return fmaf(w, decay, -fmaf(step, mi / denom, 0.0f));          /* w (1 - lr wd) - step m / denom */
}

__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                             float beta1, float beta2, float decay, float step, float bc2_sqrt, float eps,
                             float grad_scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float w = master ? master[i] : bf(params[i]);
        w = adamw_element(bf(grads[i]), &m[i], &v[i], w, beta1, beta2, decay, step, bc2_sqrt, eps, grad_scale);
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
    LLMC_LAUNCH(adamw_kernel, blocks, 256, 0, cuda_ctx.stream, params, master, grads, m, v, n, beta1, beta2, decay, step,
                                                      bc2_sqrt, eps, grad_scale);
    cudaCheckLaunch("adamw_kernel");
}

/* ------------------------------------------------------------------------ */
/* The offloaded optimizer's host path (--offload-optimizer host / disk,     */
/* llmc/zero.h zero_offload_adamw): AdamW on CPU threads over host arrays.   */

#define BACKEND_OFFLOAD_STAGING 1

/* Page-locked host memory (cudaMallocHost: copies to and from it run at
   full PCIe speed); NULL on failure. */
static inline void* backend_host_malloc(size_t bytes) {
    void* p = NULL;
    if (cudaMallocHost(&p, bytes > 0 ? bytes : 1) != cudaSuccess) { (void)cudaGetLastError(); return NULL; }
    return p;
}
static inline void backend_host_free(void* p) {
    if (p) cudaCheck(cudaFreeHost(p));
}

typedef struct {
    floatX* params; float* master; const floatX* grads; float* m; float* v;
    size_t lo, hi;
    float beta1, beta2, decay, step, bc2_sqrt, eps, grad_scale;
} AdamwHostJob;

static void* adamw_host_worker(void* arg) {
    const AdamwHostJob* j = (const AdamwHostJob*)arg;
    for (size_t i = j->lo; i < j->hi; i++) {
        uint16_t gb, pb;
        memcpy(&gb, &j->grads[i], 2);
        float w;
        if (j->master) w = j->master[i];
        else { memcpy(&pb, &j->params[i], 2); w = host_bf16_bits_to_float(pb); }
        w = adamw_element(host_bf16_bits_to_float(gb), &j->m[i], &j->v[i], w, j->beta1, j->beta2, j->decay, j->step,
                          j->bc2_sqrt, j->eps, j->grad_scale);
        if (j->master) j->master[i] = w;
        pb = host_float_to_bf16_bits(w);  /* round to nearest even, as __float2bfloat16_rn */
        memcpy((void*)&j->params[i], &pb, 2);
    }
    return NULL;
}

/* AdamW on n elements in HOST memory (params, grads: bf16; master, m, v:
   fp32), the same arguments and the same bits as adamw_update on the
   device (adamw_element). Synchronous; splits the elements over up to
   OMP_NUM_THREADS (else the online cores, at most 64) pthreads when n is
   large. Elementwise, so the thread count never changes a number. */
static inline void adamw_host_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                                     float lr, float beta1, float beta2, float beta1_correction, float beta2_correction,
                                     float eps, float weight_decay, float grad_scale) {
    if (n == 0) return;
    AdamwHostJob base;
    base.params = params; base.master = master; base.grads = grads; base.m = m; base.v = v;
    base.beta1 = beta1; base.beta2 = beta2;
    base.decay = 1.0f - lr * weight_decay;
    base.step = lr / beta1_correction;
    base.bc2_sqrt = sqrtf(beta2_correction);
    base.eps = eps; base.grad_scale = grad_scale;
    long nt = 1;
    const char* e = getenv("OMP_NUM_THREADS");
    if (e && atol(e) > 0) nt = atol(e);
    else nt = sysconf(_SC_NPROCESSORS_ONLN);
    if (nt > 64) nt = 64;
    if (nt < 1 || n < ((size_t)1 << 16)) nt = 1;
    AdamwHostJob jobs[64];
    pthread_t th[64];
    int started[64] = {0};
    size_t per = (n + (size_t)nt - 1) / (size_t)nt;
    for (long k = 0; k < nt; k++) {
        jobs[k] = base;
        jobs[k].lo = (size_t)k * per < n ? (size_t)k * per : n;
        jobs[k].hi = jobs[k].lo + per < n ? jobs[k].lo + per : n;
        if (k > 0) started[k] = pthread_create(&th[k], NULL, adamw_host_worker, &jobs[k]) == 0;
        if (k > 0 && !started[k]) adamw_host_worker(&jobs[k]);  /* no thread: do it here */
    }
    adamw_host_worker(&jobs[0]);
    for (long k = 1; k < nt; k++) if (started[k]) pthread_join(th[k], NULL);
}

#endif /* LLMC_CUDA_ADAMW_CUH */
