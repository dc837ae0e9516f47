/*
 cuda/gelu.cuh: the elementwise kernels: GELU (tanh approximation) forward
 and backward, the residual add, and dst += src (backend_add).

   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)

 Each thread handles 8 consecutive elements: one 16-byte load/store per
 operand when every pointer is 16-byte aligned, element by element
 otherwise (and for the tail). fp32 arithmetic, one rounding per store.
*/
#ifndef LLMC_CUDA_GELU_CUH
#define LLMC_CUDA_GELU_CUH

#include "common.cuh"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

__device__ __forceinline__ float gelu_f(float x) {
    float u = GELU_K * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
    float u = GELU_K * (x + 0.044715f * x * x * x);
    float th = tanhf(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

/* op 0: out = gelu(a); op 1: out += gelu'(a) * b; op 2: out = a + b */
template <int OP>
__global__ void elementwise_kernel(floatX* out, const floatX* a, const floatX* b, size_t n, int vec) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    if (vec && i0 + 8 <= n) {
        float x[8], y[8], o[8];
        load8(x, a + i0);
        if (OP != 0) load8(y, b + i0);
        if (OP == 1) load8(o, out + i0);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            if (OP == 0) o[i] = gelu_f(x[i]);
            else if (OP == 1) o[i] += gelu_grad_f(x[i]) * y[i];
            else o[i] = x[i] + y[i];
        }
        store8(out + i0, o);
    } else {
        size_t i1 = i0 + 8 < n ? i0 + 8 : n;
        for (size_t i = i0; i < i1; i++) {
            float x = bf(a[i]);
            if (OP == 0) out[i] = tobf(gelu_f(x));
            else if (OP == 1) out[i] = tobf(bf(out[i]) + gelu_grad_f(x) * bf(b[i]));
            else out[i] = tobf(x + bf(b[i]));
        }
    }
}

template <int OP>
static inline void elementwise_launch(floatX* out, const floatX* a, const floatX* b, size_t n, const char* name,
                                      cudaStream_t stream = cuda_ctx.stream) {
    if (n == 0) return;
    int vec = aligned16(out) && aligned16(a) && aligned16(b);
    LLMC_LAUNCH(elementwise_kernel<OP>, cdiv_u(n, 8 * 256), 256, 0, stream, out, a, b, n, vec);
    cudaCheckLaunch(name);
}

/* Element counts are size_t: the callers pass products such as B*T*4*C,
   which exceed 2^31 for shapes a GPU run uses (B=64, T=1024, C=8192). */

/* out (N) = gelu(inp). Writes out. */
static inline void gelu_forward(floatX* out, const floatX* inp, size_t N) {
    elementwise_launch<0>(out, inp, NULL, N, "gelu_forward");
}

/* dinp (N) += gelu'(inp) * dout */
static inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t N) {
    elementwise_launch<1>(dinp, inp, dout, N, "gelu_backward");
}

/* out (N) = inp1 + inp2 (out may alias an input: each element is read
   before it is written, by the same thread). */
static inline void residual_forward(floatX* out, const floatX* inp1, const floatX* inp2, size_t N) {
    elementwise_launch<2>(out, inp1, inp2, N, "residual_forward");
}

/* dst (n) += src (n), fp32 add, one rounding: the ZeRO engine's shard
   accumulation (stages 2-3). */
static inline void cuda_add_inplace(floatX* dst, const floatX* src, size_t n) {
    elementwise_launch<2>(dst, dst, src, n, "backend_add");
}

#endif /* LLMC_CUDA_GELU_CUH */
