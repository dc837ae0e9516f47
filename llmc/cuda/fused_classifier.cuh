/*
 cuda/fused_classifier.cuh: softmax + cross-entropy loss + its gradient,
 fused, over logits (N,Vp) whose columns V..Vp-1 are padding. Per row n:
   losses[n] = log(sum_{j<V} exp(l_j - max)) - (l_target - max)
 and if dloss != 0 the row is overwritten with
   dlogits[j] = dloss * (softmax_j - [j == target])  for j < V, 0 for j >= V.
 One block per row. Pass 1 keeps a running (max, sum) per thread ("online
 softmax": sum is rescaled by exp(old max - new max) when the max grows);
 the block combines the pairs in a fixed order. Pass 2 (only with dloss != 0)
 recomputes exp(l_j - max) / sum and writes the gradient. fp32 throughout.
 losses is a DEVICE buffer of N floats (may be NULL); targets DEVICE ints.
*/
#ifndef LLMC_CUDA_FUSED_CLASSIFIER_CUH
#define LLMC_CUDA_FUSED_CLASSIFIER_CUH

#include "common.cuh"

#define CLASSIFIER_THREADS 512

__device__ __forceinline__ void online_add(float& m, float& s, float x) {
    if (x > m) { s = s * expf(m - x) + 1.0f; m = x; }
    else s += expf(x - m);
}
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) { m = m2; s = s2; return; }
    float M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

__global__ void fused_classifier_kernel(floatX* logits, float* losses, const int* targets, int V, int Vp,
                                        float dloss, int vec) {
    __shared__ float shm[32], shs[32];
    __shared__ float lt_sh;
    int row = blockIdx.x;
    floatX* l = logits + (size_t)row * Vp;
    int tgt = targets[row];
    if (threadIdx.x == 0) lt_sh = bf(l[tgt]);
    float m = -INFINITY, s = 0.0f;
    if (vec) {
        for (int j0 = threadIdx.x * 8; j0 < V; j0 += blockDim.x * 8) {
            float x[8];
            load8(x, l + j0);
#pragma unroll
            for (int i = 0; i < 8; i++) if (j0 + i < V) online_add(m, s, x[i]);
        }
    } else {
        for (int j = threadIdx.x; j < V; j += blockDim.x) online_add(m, s, bf(l[j]));
    }
    /* warp, then block: pairs merged in a fixed order */
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, m2, s2);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { shm[warp] = m; shs[warp] = s; }
    __syncthreads();
    m = -INFINITY; s = 0.0f;
    for (int w = 0; w < nw; w++) online_merge(m, s, shm[w], shs[w]);
    /* every thread now holds the row's max m and sum s; lt_sh was written
       before the barrier above and before any thread overwrites the row */
    if (threadIdx.x == 0 && losses) losses[row] = logf(s) - (lt_sh - m);
    if (dloss == 0.0f) return;
    float inv = 1.0f / s;
    if (vec) {
        for (int j0 = threadIdx.x * 8; j0 < Vp; j0 += blockDim.x * 8) {
            float x[8];
            load8(x, l + j0);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int j = j0 + i;
                x[i] = j < V ? dloss * (expf(x[i] - m) * inv - (j == tgt ? 1.0f : 0.0f)) : 0.0f;
            }
            store8(l + j0, x);
        }
    } else {
        for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
            float x = bf(l[j]);
            l[j] = tobf(j < V ? dloss * (expf(x - m) * inv - (j == tgt ? 1.0f : 0.0f)) : 0.0f);
        }
    }
}

/* logits (N,Vp) bf16, losses (N) fp32 device or NULL, targets (N) device;
   N rows (B*T: size_t), launched in pieces of at most 2^30 rows (blocks). */
static inline void fused_classifier(floatX* logits, float* losses, const int* targets, size_t N, int V, int Vp,
                                    float dloss) {
    const size_t max_rows = (size_t)1 << 30;
    int vec = Vp % 8 == 0 && aligned16(logits);
    for (size_t r0 = 0; r0 < N; r0 += max_rows) {
        unsigned int rows = (unsigned int)(N - r0 < max_rows ? N - r0 : max_rows);
        LLMC_LAUNCH(fused_classifier_kernel, rows, CLASSIFIER_THREADS, 0, cuda_ctx.stream, 
            logits + r0 * (size_t)Vp, losses ? losses + r0 : NULL, targets + r0, V, Vp, dloss, vec);
        cudaCheckLaunch("fused_classifier_kernel");
    }
}

/* The classifier over vocabulary chunks (gpt.h; twins of the CPU kernels,
   see llmc/cpu/fused_classifier.h for the math; N rows = B*T, size_t as in
   fused_classifier, one block per row): online-softmax statistics
   per row (running max mx, running sum of exponentials in fp64, the
   target's logit tl), the losses from them, and each chunk's dlogits in
   place. One block per row; block reductions in a fixed order. */
__global__ void classifier_stats_init_kernel(float* mx, double* sum, float* tl, size_t N) {
    size_t n = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) { mx[n] = -INFINITY; sum[n] = 0.0; tl[n] = 0.0f; }
}

static inline void classifier_stats_init(float* mx, double* sum, float* tl, size_t N) {
    if (N == 0) return;
    LLMC_LAUNCH(classifier_stats_init_kernel, cdiv_u(N, 256), 256, 0, cuda_ctx.stream, mx, sum, tl, N);
    cudaCheckLaunch("classifier_stats_init_kernel");
}

__global__ void classifier_chunk_stats_kernel(const floatX* logits, int ncols, int valid, int col0, const int* targets,
                                              float* mx, double* sum, float* tl) {
    __shared__ float shm[32];
    __shared__ double shd[32];
    int n = blockIdx.x;
    const floatX* l = logits + (size_t)n * ncols;
    float cm = -INFINITY;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) cm = fmaxf(cm, bf(l[j]));
    cm = warp_max(cm);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) shm[warp] = cm;
    __syncthreads();
    cm = -INFINITY;
    for (int w = 0; w < nw; w++) cm = fmaxf(cm, shm[w]);
    float m_old = mx[n], m_new = fmaxf(cm, m_old);
    double s = 0.0;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) s += (double)expf(bf(l[j]) - m_new);
    s = block_sum_d(s, shd);
    if (threadIdx.x == 0) {
        sum[n] = (m_old == -INFINITY ? 0.0 : sum[n] * exp((double)m_old - (double)m_new)) + s;
        mx[n] = m_new;
        int t = targets[n] - col0;
        if (t >= 0 && t < valid) tl[n] = bf(l[t]);
    }
}

static inline void classifier_chunk_stats(const floatX* logits, size_t N, int col0, int ncols, int V, const int* targets,
                                          float* mx, double* sum, float* tl) {
    int valid = V - col0 < ncols ? V - col0 : ncols;
    if (valid <= 0 || N == 0) return;
    LLMC_LAUNCH(classifier_chunk_stats_kernel, (unsigned)N, 256, 0, cuda_ctx.stream, logits, ncols, valid, col0, targets, mx, sum, tl);
    cudaCheckLaunch("classifier_chunk_stats_kernel");
}

__global__ void classifier_losses_kernel(float* losses, const float* mx, const double* sum, const float* tl, size_t N) {
    size_t n = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) losses[n] = (float)(log(sum[n]) - ((double)tl[n] - (double)mx[n]));
}

static inline void classifier_losses(float* losses, const float* mx, const double* sum, const float* tl, size_t N) {
    if (N == 0) return;
    LLMC_LAUNCH(classifier_losses_kernel, cdiv_u(N, 256), 256, 0, cuda_ctx.stream, losses, mx, sum, tl, N);
    cudaCheckLaunch("classifier_losses_kernel");
}

__global__ void classifier_chunk_grad_kernel(floatX* logits, int ncols, int valid, int col0, const int* targets,
                                             const float* mx, const double* sum, float dloss) {
    int n = blockIdx.x;
    floatX* l = logits + (size_t)n * ncols;
    float m = mx[n];
    float f = (float)((double)dloss / sum[n]);
    int t = targets[n] - col0;
    for (int j = threadIdx.x; j < ncols; j += blockDim.x)
        l[j] = tobf(j < valid ? expf(bf(l[j]) - m) * f - (j == t ? dloss : 0.0f) : 0.0f);
}

static inline void classifier_chunk_grad(floatX* logits, size_t N, int col0, int ncols, int V, const int* targets,
                                         const float* mx, const double* sum, float dloss) {
    int valid = V - col0 < ncols ? (V - col0 > 0 ? V - col0 : 0) : ncols;
    if (N == 0) return;
    LLMC_LAUNCH(classifier_chunk_grad_kernel, (unsigned)N, 256, 0, cuda_ctx.stream, logits, ncols, valid, col0, targets, mx, sum, dloss);
    cudaCheckLaunch("classifier_chunk_grad_kernel");
}

#endif /* LLMC_CUDA_FUSED_CLASSIFIER_CUH */
