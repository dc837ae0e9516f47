/*
 cuda/attention.cuh: causal multi-head self-attention, forward and backward,
 as strided batched GEMMs (cuBLASLt via gemm_bf16) around two softmax
 kernels. hs = C/NH, scale = 1/sqrt(hs); qkv (B,T,3C) = [q | k | v], head h
 uses channels h*hs .. h*hs+hs-1 of each; preatt, att, dpreatt, datt are
 (B,NH,T,T) bf16 buffers owned by the model.

 forward:
   preatt[b,h,t,s] = scale * q[b,t,h,:] . k[b,s,h,:]        (all s; s > t unused)
   att[b,h,t,s]    = softmax over s <= t of preatt[b,h,t,:]   (0 for s > t)
   out[b,t,h*hs+i] = sum_s att[b,h,t,s] v[b,s,h*hs+i]
 backward (accumulates into dqkv (B,T,3C); dpreatt, datt overwritten):
   datt[t,s]    = dout[t,h,:] . v[s,h,:]
   dpreatt[t,s] = scale * att[t,s] (datt[t,s] - sum_{s'<=t} att[t,s'] datt[t,s'])  (0 for s > t)
   dq += dpreatt @ k ;  dk += dpreatt^T @ q ;  dv += att^T @ dout_h

 GEMM batching: q, k, v of head h of sequence b start at qkv + b*T*3C + h*hs
 (+C, +2C) with row stride 3C, so one GEMM call covers the NH heads of one
 sequence (batch stride hs) and the B sequences are a loop of B calls. This
 reads q, k, v in place: no permuted copies, no memory beyond the model's
 buffers. The products are full T x T (the masked half is computed and
 ignored / multiplied by zeros): 2x the causal flops, as a plain GEMM must.
 Softmax rows: one warp per (b,h,t) row, fp32, expf.
*/
#ifndef LLMC_CUDA_ATTENTION_CUH
#define LLMC_CUDA_ATTENTION_CUH

#include "common.cuh"
#include "matmul.cuh"

/* rows = B*NH*T; row r is query t = r % T of its (b,h) */
__global__ void causal_softmax_kernel(floatX* att, const floatX* preatt, size_t rows, int T) {
    size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = (int)(row % (size_t)T);
    const floatX* p = preatt + (size_t)row * T;
    floatX* a = att + (size_t)row * T;
    float mx = -INFINITY;
    for (int s = lane; s <= t; s += 32) mx = fmaxf(mx, bf(p[s]));
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int s = lane; s <= t; s += 32) sum += expf(bf(p[s]) - mx);
    float inv = 1.0f / warp_sum(sum);
    for (int s = lane; s < T; s += 32) a[s] = s <= t ? tobf(expf(bf(p[s]) - mx) * inv) : tobf(0.0f);
}

__global__ void causal_softmax_backward_kernel(floatX* dpreatt, const floatX* datt, const floatX* att,
                                               size_t rows, int T, float scale) {
    size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = (int)(row % (size_t)T);
    const floatX* a = att + (size_t)row * T;
    const floatX* da = datt + (size_t)row * T;
    floatX* dp = dpreatt + (size_t)row * T;
    float dot = 0.0f;
    for (int s = lane; s <= t; s += 32) dot += bf(a[s]) * bf(da[s]);
    dot = warp_sum(dot);
    for (int s = lane; s < T; s += 32) dp[s] = s <= t ? tobf(scale * bf(a[s]) * (bf(da[s]) - dot)) : tobf(0.0f);
}

/* out (B,T,C), preatt and att (B,NH,T,T) written; qkv (B,T,3C). */
static inline void attention_forward(floatX* out, floatX* preatt, floatX* att, const floatX* qkv,
                                     int B, int T, int C, int NH) {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const floatX* q = qkv + (size_t)b * T * C3;
        const floatX* k = q + C;
        floatX* pre = preatt + (size_t)b * NH * TT;
        /* column-major: pre_h (s,t) = sum_i K_h(i,s) Q_h(i,t): A = K^T, B = Q */
        gemm_bf16(1, 0, T, T, hs, scale, k, C3, hs, q, C3, hs, 0.0f, pre, T, TT, NH, NULL);
    }
    size_t rows = (size_t)B * NH * T;
    LLMC_LAUNCH(causal_softmax_kernel, cdiv_u(rows, 8), 256, 0, cuda_ctx.stream, att, preatt, rows, T);
    cudaCheckLaunch("causal_softmax_kernel");
    for (int b = 0; b < B; b++) {
        const floatX* v = qkv + (size_t)b * T * C3 + 2 * C;
        const floatX* a = att + (size_t)b * NH * TT;
        floatX* o = out + (size_t)b * T * C;
        /* o_h (i,t) = sum_s V_h(i,s) att_h(s,t) (att_h stored (s,t) col-major, ld T) */
        gemm_bf16(0, 0, hs, T, T, 1.0f, v, C3, hs, a, T, TT, 0.0f, o, C, hs, NH, NULL);
    }
}

/* Backward of attention_forward; ACCUMULATES into dqkv (B,T,3C); dpreatt and
   datt (B,NH,T,T) are scratch (overwritten); dout (B,T,C). */
static inline void attention_backward(floatX* dqkv, floatX* dpreatt, floatX* datt, const floatX* dout,
                                      const floatX* qkv, const floatX* att, int B, int T, int C, int NH) {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const floatX* v = qkv + (size_t)b * T * C3 + 2 * C;
        const floatX* d = dout + (size_t)b * T * C;
        floatX* da = datt + (size_t)b * NH * TT;
        /* datt_h (s,t) = sum_i V_h(i,s) dO_h(i,t) */
        gemm_bf16(1, 0, T, T, hs, 1.0f, v, C3, hs, d, C, hs, 0.0f, da, T, TT, NH, NULL);
    }
    size_t rows = (size_t)B * NH * T;
    LLMC_LAUNCH(causal_softmax_backward_kernel, cdiv_u(rows, 8), 256, 0, cuda_ctx.stream, dpreatt, datt, att, rows, T, scale);
    cudaCheckLaunch("causal_softmax_backward_kernel");
    for (int b = 0; b < B; b++) {
        const floatX* q = qkv + (size_t)b * T * C3;
        const floatX* k = q + C;
        floatX* dq = dqkv + (size_t)b * T * C3;
        floatX* dk = dq + C;
        floatX* dv = dq + 2 * C;
        const floatX* dp = dpreatt + (size_t)b * NH * TT;
        const floatX* a = att + (size_t)b * NH * TT;
        const floatX* d = dout + (size_t)b * T * C;
        /* dq_h (i,t) += sum_s K_h(i,s) dP_h(s,t) */
        gemm_bf16(0, 0, hs, T, T, 1.0f, k, C3, hs, dp, T, TT, 1.0f, dq, C3, hs, NH, NULL);
        /* dk_h (i,s) += sum_t Q_h(i,t) dP_h(s,t) */
        gemm_bf16(0, 1, hs, T, T, 1.0f, q, C3, hs, dp, T, TT, 1.0f, dk, C3, hs, NH, NULL);
        /* dv_h (i,s) += sum_t dO_h(i,t) att_h(s,t) */
        gemm_bf16(0, 1, hs, T, T, 1.0f, d, C, hs, a, T, TT, 1.0f, dv, C3, hs, NH, NULL);
    }
}

#endif /* LLMC_CUDA_ATTENTION_CUH */
