/*
 cuda/layernorm.cuh: LayerNorm over the last dimension C of N rows.

 forward (per row x):  mean = sum x / C, var = sum (x - mean)^2 / C (biased,
   two passes), rstd = 1 / sqrt(var + 1e-5),
   out = (x - mean) * rstd * weight + bias; mean, rstd (N floats, fp32) saved.
 backward, with xhat = (x - mean) * rstd and g = dout * weight:
   dinp    += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
   dweight += sum over rows of dout * xhat
   dbias   += sum over rows of dout

 One warp per row for the row statistics (fp32, 8 channels per lane per step
 when C % 8 == 0). dweight / dbias: a column kernel sums LN_ROWS rows per
 block into fp32 partials (thread = channel, rows in order), a second kernel
 adds the partials in chunk order: deterministic, no atomics.
*/
#ifndef LLMC_CUDA_LAYERNORM_CUH
#define LLMC_CUDA_LAYERNORM_CUH

#include "common.cuh"

#define LN_ROWS 64

__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                         const floatX* weight, const floatX* bias, size_t N, int C, int vec) {
    size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    floatX* o = out + (size_t)row * C;
    float s = 0.0f;
    if (vec) {
        for (int c = lane * 8; c < C; c += 256) {
            float v[8];
            load8(v, x + c);
#pragma unroll
            for (int i = 0; i < 8; i++) s += v[i];
        }
    } else {
        for (int c = lane; c < C; c += 32) s += bf(x[c]);
    }
    float m = warp_sum(s) / (float)C;
    float q = 0.0f;
    if (vec) {
        for (int c = lane * 8; c < C; c += 256) {
            float v[8];
            load8(v, x + c);
#pragma unroll
            for (int i = 0; i < 8; i++) { float d = v[i] - m; q += d * d; }
        }
    } else {
        for (int c = lane; c < C; c += 32) { float d = bf(x[c]) - m; q += d * d; }
    }
    float r = 1.0f / sqrtf(warp_sum(q) / (float)C + 1e-5f);
    if (vec) {
        for (int c = lane * 8; c < C; c += 256) {
            float v[8], w[8], b[8];
            load8(v, x + c);
            load8(w, weight + c);
            load8(b, bias + c);
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = (v[i] - m) * r * w[i] + b[i];
            store8(o + c, v);
        }
    } else {
        for (int c = lane; c < C; c += 32) o[c] = tobf((bf(x[c]) - m) * r * bf(weight[c]) + bf(bias[c]));
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

/* (N,C) out = LayerNorm(inp) * weight + bias; mean, rstd (N) may be NULL.
   N rows (B*T: size_t), C channels. */
static inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                                     const floatX* weight, const floatX* bias, size_t N, int C) {
    if (N == 0) return;
    int vec = C % 8 == 0 && aligned16(out) && aligned16(inp) && aligned16(weight) && aligned16(bias);
    int rows_per_block = 8;
    LLMC_LAUNCH(layernorm_forward_kernel, cdiv_u(N, rows_per_block), 32 * rows_per_block, 0, cuda_ctx.stream, 
        out, mean, rstd, inp, weight, bias, N, C, vec);
    cudaCheckLaunch("layernorm_forward_kernel");
}

/* dinp rows: one warp per row */
__global__ void layernorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                               const floatX* weight, const float* mean, const float* rstd,
                                               size_t N, int C, int vec) {
    size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    const floatX* d = dout + (size_t)row * C;
    floatX* di = dinp + (size_t)row * C;
    float m = mean[row], r = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    if (vec) {
        for (int c = lane * 8; c < C; c += 256) {
            float xv[8], dv[8], wv[8];
            load8(xv, x + c); load8(dv, d + c); load8(wv, weight + c);
#pragma unroll
            for (int i = 0; i < 8; i++) { float g = dv[i] * wv[i]; sg += g; sgx += g * (xv[i] - m) * r; }
        }
    } else {
        for (int c = lane; c < C; c += 32) { float g = bf(d[c]) * bf(weight[c]); sg += g; sgx += g * (bf(x[c]) - m) * r; }
    }
    float mg = warp_sum(sg) / (float)C, mgx = warp_sum(sgx) / (float)C;
    if (vec) {
        for (int c = lane * 8; c < C; c += 256) {
            float xv[8], dv[8], wv[8], ov[8];
            load8(xv, x + c); load8(dv, d + c); load8(wv, weight + c); load8(ov, di + c);
#pragma unroll
            for (int i = 0; i < 8; i++) { float xh = (xv[i] - m) * r; ov[i] += r * (dv[i] * wv[i] - mg - xh * mgx); }
            store8(di + c, ov);
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            float xh = (bf(x[c]) - m) * r;
            di[c] = tobf(bf(di[c]) + r * (bf(d[c]) * bf(weight[c]) - mg - xh * mgx));
        }
    }
}

/* partials[chunk][0..C) = sum dout*xhat, partials[chunk][C..2C) = sum dout
   over the LN_ROWS rows of the chunk; grid (chunks, cdiv(C, blockDim)) */
__global__ void layernorm_backward_partials_kernel(float* partials, const floatX* dout, const floatX* inp,
                                                   const float* mean, const float* rstd, size_t N, int C) {
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    size_t r0 = (size_t)blockIdx.x * LN_ROWS, r1 = r0 + LN_ROWS < N ? r0 + LN_ROWS : N;
    float aw = 0.0f, ab = 0.0f;
    for (size_t r = r0; r < r1; r++) {
        float d = bf(dout[(size_t)r * C + c]);
        float xh = (bf(inp[(size_t)r * C + c]) - mean[r]) * rstd[r];
        aw += d * xh;
        ab += d;
    }
    float* p = partials + (size_t)blockIdx.x * 2 * C;
    p[c] = aw;
    p[C + c] = ab;
}

__global__ void layernorm_backward_finish_kernel(floatX* dweight, floatX* dbias, const float* partials,
                                                 int chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float aw = 0.0f, ab = 0.0f;
    for (int i = 0; i < chunks; i++) {
        aw += partials[(size_t)i * 2 * C + c];
        ab += partials[(size_t)i * 2 * C + C + c];
    }
    dweight[c] = tobf(bf(dweight[c]) + aw);
    dbias[c] = tobf(bf(dbias[c]) + ab);
}

/* Backward of layernorm_forward; ACCUMULATES into dinp (N,C), dweight (C),
   dbias (C). mean, rstd (N) from the forward. N rows (size_t). Deterministic. */
static inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout,
                                      const floatX* inp, const floatX* weight, const float* mean,
                                      const float* rstd, size_t N, int C) {
    if (N == 0) return;
    cudaStream_t st = cuda_ctx.stream;
    int vec = C % 8 == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight);
    int rows_per_block = 8;
    LLMC_LAUNCH(layernorm_backward_dinp_kernel, cdiv_u(N, rows_per_block), 32 * rows_per_block, 0, st, 
        dinp, dout, inp, weight, mean, rstd, N, C, vec);
    cudaCheckLaunch("layernorm_backward_dinp_kernel");
    int chunks = (int)cdiv_u(N, LN_ROWS);
    float* part = (float*)cuda_scratch(SCRATCH_PARTIALS, (size_t)chunks * 2 * C * sizeof(float));
    dim3 grid((unsigned)chunks, cdiv_u((size_t)C, 128));
    LLMC_LAUNCH(layernorm_backward_partials_kernel, grid, 128, 0, st, part, dout, inp, mean, rstd, N, C);
    cudaCheckLaunch("layernorm_backward_partials_kernel");
    LLMC_LAUNCH(layernorm_backward_finish_kernel, cdiv_u((size_t)C, 256), 256, 0, st, dweight, dbias, part, chunks, C);
    cudaCheckLaunch("layernorm_backward_finish_kernel");
}

#endif /* LLMC_CUDA_LAYERNORM_CUH */
