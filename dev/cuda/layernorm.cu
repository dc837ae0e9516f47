/*
 dev/cuda/layernorm.cu: LayerNorm forward and backward kernels (bf16 storage,
 fp32 math), checked against a double-precision CPU reference and timed.

 forward versions:
   1  one thread per row, scalar loops (simple, poor coalescing)
   2  one warp per row, scalar loads
   3  llmc/cuda/layernorm.cuh: one warp per row, 16-byte loads
 backward versions:
   1  one warp per row; dweight/dbias by fp32 atomicAdd into a float buffer
      (fast but NOT deterministic: the summation order varies run to run)
   2  llmc/cuda/layernorm.cuh: column partials + ordered finish (deterministic)

 ./dev/cuda/layernorm [version]   (0 = all)
*/
#include "dev/cuda/common.h"
#include "llmc/cuda/layernorm.cuh"

__global__ void ln_fwd_v1(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                          const floatX* b, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float s = 0;
    for (int c = 0; c < C; c++) s += bf(x[c]);
    float m = s / C, v = 0;
    for (int c = 0; c < C; c++) { float d = bf(x[c]) - m; v += d * d; }
    float r = 1.0f / sqrtf(v / C + 1e-5f);
    for (int c = 0; c < C; c++) out[(size_t)row * C + c] = tobf((bf(x[c]) - m) * r * bf(w[c]) + bf(b[c]));
    mean[row] = m; rstd[row] = r;
}

__global__ void ln_fwd_v2(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                          const floatX* b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float s = 0;
    for (int c = lane; c < C; c += 32) s += bf(x[c]);
    float m = warp_sum(s) / C, v = 0;
    for (int c = lane; c < C; c += 32) { float d = bf(x[c]) - m; v += d * d; }
    float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
    for (int c = lane; c < C; c += 32) out[(size_t)row * C + c] = tobf((bf(x[c]) - m) * r * bf(w[c]) + bf(b[c]));
    if (lane == 0) { mean[row] = m; rstd[row] = r; }
}

__global__ void ln_bwd_v1(floatX* dinp, float* dw, float* db, const floatX* dout, const floatX* inp,
                          const floatX* w, const float* mean, const float* rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    const floatX* d = dout + (size_t)row * C;
    float m = mean[row], r = rstd[row], sg = 0, sgx = 0;
    for (int c = lane; c < C; c += 32) { float g = bf(d[c]) * bf(w[c]); sg += g; sgx += g * (bf(x[c]) - m) * r; }
    sg = warp_sum(sg) / C; sgx = warp_sum(sgx) / C;
    for (int c = lane; c < C; c += 32) {
        float xh = (bf(x[c]) - m) * r;
        dinp[(size_t)row * C + c] = tobf(bf(dinp[(size_t)row * C + c]) + r * (bf(d[c]) * bf(w[c]) - sg - xh * sgx));
        atomicAdd(&dw[c], bf(d[c]) * xh);
        atomicAdd(&db[c], bf(d[c]));
    }
}

int main(int argc, char** argv) {
    int version = dev_version_arg(argc, argv);
    const int N = DEV_SHAPE(8 * 1024, 256), C = DEV_SHAPE(768, 200);
    auto x = rand_floats((size_t)N * C, 2.0f, 1), w = rand_floats(C, 1.0f, 2), b = rand_floats(C, 0.5f, 3);
    auto dout = rand_floats((size_t)N * C, 1.0f, 4), dinp0 = rand_floats((size_t)N * C, 0.1f, 5);
    auto dw0 = rand_floats(C, 0.1f, 6), db0 = rand_floats(C, 0.1f, 7);
    round_bf16(x); round_bf16(w); round_bf16(b); round_bf16(dout); round_bf16(dinp0); round_bf16(dw0); round_bf16(db0);

    /* CPU reference in double */
    std::vector<float> out((size_t)N * C), mean(N), rstd(N), dinp = dinp0, dw = dw0, db = db0;
    std::vector<double> adw(C, 0), adb(C, 0);
    for (int n = 0; n < N; n++) {
        const float* xr = &x[(size_t)n * C];
        double s = 0; for (int c = 0; c < C; c++) s += xr[c];
        double m = s / C, v = 0; for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        double r = 1.0 / sqrt(v / C + 1e-5);
        mean[n] = (float)m; rstd[n] = (float)r;
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (float)((xr[c] - m) * r * w[c] + b[c]);
        const float* d = &dout[(size_t)n * C];
        double sg = 0, sgx = 0;
        for (int c = 0; c < C; c++) { double g = (double)d[c] * w[c]; sg += g; sgx += g * (xr[c] - m) * r; }
        sg /= C; sgx /= C;
        for (int c = 0; c < C; c++) {
            double xh = (xr[c] - m) * r;
            dinp[(size_t)n * C + c] += (float)(r * ((double)d[c] * w[c] - sg - xh * sgx));
            adw[c] += d[c] * xh; adb[c] += d[c];
        }
    }
    for (int c = 0; c < C; c++) { dw[c] += (float)adw[c]; db[c] += (float)adb[c]; }

    floatX *d_x = to_device(x), *d_w = to_device(w), *d_b = to_device(b), *d_out;
    floatX *d_dout = to_device(dout), *d_dinp = to_device(dinp0), *d_dw = to_device(dw0), *d_db = to_device(db0);
    float *d_mean, *d_rstd;
    cudaCheck(cudaMalloc(&d_out, (size_t)N * C * 2));
    cudaCheck(cudaMalloc(&d_mean, N * 4));
    cudaCheck(cudaMalloc(&d_rstd, N * 4));
    double bytes = 2.0 * 2 * N * C;

    printf("layernorm forward, N=%d C=%d\n", N, C);
    for (int v = 1; v <= 3; v++) {
        if (version && version != v) continue;
        auto run = [&]() {
            if (v == 1) LLMC_LAUNCH(ln_fwd_v1, cdiv_u(N, 128), 128, 0, 0, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
            else if (v == 2) LLMC_LAUNCH(ln_fwd_v2, cdiv_u(N, 8), 256, 0, 0, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
            else layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
            cudaCheckLaunch("layernorm forward");
        };
        run();
        printf(" version %d\n", v);
        check("out", from_device(d_out, (size_t)N * C), out, 1e-2, 8e-3);
        check("mean", from_device_f32(d_mean, N), mean, 1e-5, 1e-5);
        check("rstd", from_device_f32(d_rstd, N), rstd, 1e-5, 1e-4);
        float ms = time_ms(run, 20);
        printf("  %.4f ms, %.0f GB/s\n", ms, bytes / ms / 1e6);
    }

    printf("layernorm backward\n");
    /* mean/rstd from the reference, so every version sees the same statistics */
    cudaCheck(cudaMemcpy(d_mean, mean.data(), N * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_rstd, rstd.data(), N * 4, cudaMemcpyHostToDevice));
    float *f_dw, *f_db;
    cudaCheck(cudaMalloc(&f_dw, C * 4));
    cudaCheck(cudaMalloc(&f_db, C * 4));
    for (int v = 1; v <= 2; v++) {
        if (version && version != v) continue;
        auto reset = [&]() {
            std::vector<uint16_t> t((size_t)N * C);
            for (size_t i = 0; i < t.size(); i++) t[i] = host_float_to_bf16_bits(dinp0[i]);
            cudaCheck(cudaMemcpy(d_dinp, t.data(), t.size() * 2, cudaMemcpyHostToDevice));
            for (int c = 0; c < C; c++) t[c] = host_float_to_bf16_bits(dw0[c]);
            cudaCheck(cudaMemcpy(d_dw, t.data(), C * 2, cudaMemcpyHostToDevice));
            for (int c = 0; c < C; c++) t[c] = host_float_to_bf16_bits(db0[c]);
            cudaCheck(cudaMemcpy(d_db, t.data(), C * 2, cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(f_dw, dw0.data(), C * 4, cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(f_db, db0.data(), C * 4, cudaMemcpyHostToDevice));
        };
        auto run = [&]() {
            if (v == 1) LLMC_LAUNCH(ln_bwd_v1, cdiv_u(N, 8), 256, 0, 0, d_dinp, f_dw, f_db, d_dout, d_x, d_w, d_mean, d_rstd, N, C);
            else layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_x, d_w, d_mean, d_rstd, N, C);
            cudaCheckLaunch("layernorm backward");
        };
        reset();
        run();
        printf(" version %d\n", v);
        check("dinp", from_device(d_dinp, (size_t)N * C), dinp, 1e-2, 8e-3);
        check("dweight", v == 1 ? from_device_f32(f_dw, C) : from_device(d_dw, C), dw, 1e-2, 8e-3);
        check("dbias", v == 1 ? from_device_f32(f_db, C) : from_device(d_db, C), db, 1e-2, 8e-3);
        float ms = time_ms(run, 20);
        printf("  %.4f ms\n", ms);
    }
    return dev_finish("layernorm");
}
