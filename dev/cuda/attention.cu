/*
 dev/cuda/attention.cu: causal self-attention, forward and backward, of
 llmc/cuda/attention.cuh (batched GEMMs + softmax kernels) against a double-
 precision CPU reference, on a regular shape and an odd one (T = 37, the kind
 sampling produces, where cuBLASLt must cope with odd leading dimensions),
 plus two versions of the causal softmax kernel:
   1  one thread per row (three serial passes over the row)
   2  llmc: one warp per row
 ./dev/cuda/attention [version]
*/
#include "dev/cuda/common.h"
#include "llmc/cuda/attention.cuh"

__global__ void softmax_v1(floatX* att, const floatX* preatt, int rows, int T) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    int t = row % T;
    const floatX* p = preatt + (size_t)row * T;
    float mx = -INFINITY, sum = 0;
    for (int s = 0; s <= t; s++) mx = fmaxf(mx, bf(p[s]));
    for (int s = 0; s <= t; s++) sum += expf(bf(p[s]) - mx);
    for (int s = 0; s < T; s++) att[(size_t)row * T + s] = tobf(s <= t ? expf(bf(p[s]) - mx) / sum : 0.0f);
}

static void run_case(int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t BT = (size_t)B * T;
    printf("attention B=%d T=%d C=%d NH=%d\n", B, T, C, NH);
    auto qkv = rand_floats(BT * 3 * C, 1.0f, 11), dout = rand_floats(BT * C, 1.0f, 12);
    auto dqkv0 = rand_floats(BT * 3 * C, 0.1f, 13);
    round_bf16(qkv); round_bf16(dout); round_bf16(dqkv0);
    std::vector<float> out(BT * C), dqkv = dqkv0, att((size_t)B * NH * T * T);
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            auto q = [&](int t, int i) { return (double)qkv[((size_t)b * T + t) * 3 * C + h * hs + i]; };
            auto k = [&](int t, int i) { return (double)qkv[((size_t)b * T + t) * 3 * C + C + h * hs + i]; };
            auto v = [&](int t, int i) { return (double)qkv[((size_t)b * T + t) * 3 * C + 2 * C + h * hs + i]; };
            std::vector<double> a((size_t)T * T, 0.0), da((size_t)T * T, 0.0), dp((size_t)T * T, 0.0);
            for (int t = 0; t < T; t++) {
                double mx = -1e300;
                std::vector<double> p(t + 1);
                for (int s = 0; s <= t; s++) {
                    double d = 0; for (int i = 0; i < hs; i++) d += q(t, i) * k(s, i);
                    p[s] = d * scale; mx = p[s] > mx ? p[s] : mx;
                }
                double sum = 0; for (int s = 0; s <= t; s++) { p[s] = exp(p[s] - mx); sum += p[s]; }
                for (int s = 0; s <= t; s++) a[(size_t)t * T + s] = p[s] / sum;
                for (int i = 0; i < hs; i++) {
                    double o = 0; for (int s = 0; s <= t; s++) o += a[(size_t)t * T + s] * v(s, i);
                    out[((size_t)b * T + t) * C + h * hs + i] = (float)o;
                }
            }
            for (size_t i = 0; i < (size_t)T * T; i++) att[((size_t)b * NH + h) * T * T + i] = (float)a[i];
            auto d = [&](int t, int i) { return (double)dout[((size_t)b * T + t) * C + h * hs + i]; };
            for (int t = 0; t < T; t++) {
                double dot = 0;
                for (int s = 0; s <= t; s++) {
                    double x = 0; for (int i = 0; i < hs; i++) x += d(t, i) * v(s, i);
                    da[(size_t)t * T + s] = x; dot += a[(size_t)t * T + s] * x;
                }
                for (int s = 0; s <= t; s++) dp[(size_t)t * T + s] = scale * a[(size_t)t * T + s] * (da[(size_t)t * T + s] - dot);
            }
            for (int t = 0; t < T; t++)
                for (int i = 0; i < hs; i++) {
                    double gq = 0, gk = 0, gv = 0;
                    for (int s = 0; s < T; s++) {
                        gq += dp[(size_t)t * T + s] * k(s, i);      /* dq[t] = sum_s dp[t,s] k[s] */
                        gk += dp[(size_t)s * T + t] * q(s, i);      /* dk[t] = sum_s dp[s,t] q[s] */
                        gv += a[(size_t)s * T + t] * d(s, i);       /* dv[t] = sum_s att[s,t] dout[s] */
                    }
                    size_t base = ((size_t)b * T + t) * 3 * C + h * hs + i;
                    dqkv[base] += (float)gq; dqkv[base + C] += (float)gk; dqkv[base + 2 * C] += (float)gv;
                }
        }
    floatX *d_qkv = to_device(qkv), *d_dout = to_device(dout), *d_dqkv = to_device(dqkv0), *d_out;
    floatX *d_pre, *d_att, *d_dpre, *d_datt;
    size_t tt = (size_t)B * NH * T * T;
    cudaCheck(cudaMalloc(&d_out, BT * C * 2));
    cudaCheck(cudaMalloc(&d_pre, tt * 2)); cudaCheck(cudaMalloc(&d_att, tt * 2));
    cudaCheck(cudaMalloc(&d_dpre, tt * 2)); cudaCheck(cudaMalloc(&d_datt, tt * 2));
    attention_forward(d_out, d_pre, d_att, d_qkv, B, T, C, NH);
    check("forward out", from_device(d_out, BT * C), out, 1e-2, 1e-2);
    check("forward att", from_device(d_att, tt), att, 5e-3, 1e-2);
    attention_backward(d_dqkv, d_dpre, d_datt, d_dout, d_qkv, d_att, B, T, C, NH);
    check("backward dqkv", from_device(d_dqkv, BT * 3 * C), dqkv, 1e-2, 2e-2);
    float ms_f = time_ms([&]() { attention_forward(d_out, d_pre, d_att, d_qkv, B, T, C, NH); }, 10);
    float ms_b = time_ms([&]() { attention_backward(d_dqkv, d_dpre, d_datt, d_dout, d_qkv, d_att, B, T, C, NH); }, 10);
    double fl = 4.0 * B * NH * (double)T * T * hs; /* two T x T x hs GEMMs, 2 flops per MAC */
    printf("  forward %.4f ms (%.1f TFLOP/s on full T x T), backward %.4f ms\n", ms_f, fl / ms_f / 1e9, ms_b);
    printf("  GEMMs so far: %llu via cuBLASLt, %llu via the cuBLAS fallback\n", gemm_state.lt_calls, gemm_state.fallback_calls);
    cudaFree(d_qkv); cudaFree(d_dout); cudaFree(d_dqkv); cudaFree(d_out);
    cudaFree(d_pre); cudaFree(d_att); cudaFree(d_dpre); cudaFree(d_datt);
}

int main(int argc, char** argv) {
    int version = dev_version_arg(argc, argv);
    run_case(DEV_SHAPE(4, 2), DEV_SHAPE(256, 64), DEV_SHAPE(384, 96), DEV_SHAPE(6, 3));
    run_case(2, 37, 96, 3);

    /* softmax versions on a GPT-2 124M shape */
    int B = DEV_SHAPE(8, 2), NH = DEV_SHAPE(12, 2), T = DEV_SHAPE(1024, 96), rows = B * NH * T;
    size_t n = (size_t)rows * T;
    auto pre = rand_floats(n, 4.0f, 21);
    round_bf16(pre);
    std::vector<float> ref(n);
    for (int r = 0; r < rows; r++) {
        int t = r % T;
        const float* p = &pre[(size_t)r * T];
        double mx = -1e300, sum = 0;
        for (int s = 0; s <= t; s++) mx = p[s] > mx ? p[s] : mx;
        for (int s = 0; s <= t; s++) sum += exp(p[s] - mx);
        for (int s = 0; s < T; s++) ref[(size_t)r * T + s] = s <= t ? (float)(exp(p[s] - mx) / sum) : 0.0f;
    }
    floatX *d_pre = to_device(pre), *d_att;
    cudaCheck(cudaMalloc(&d_att, n * 2));
    printf("causal softmax, %d rows of T=%d\n", rows, T);
    for (int v = 1; v <= 2; v++) {
        if (version && version != v) continue;
        auto run = [&]() {
            if (v == 1) LLMC_LAUNCH(softmax_v1, cdiv_u(rows, 128), 128, 0, 0, d_att, d_pre, rows, T);
            else LLMC_LAUNCH(causal_softmax_kernel, cdiv_u(rows, 8), 256, 0, 0, d_att, d_pre, rows, T);
            cudaCheckLaunch("softmax");
        };
        run();
        printf(" version %d\n", v);
        check("att", from_device(d_att, n), ref, 2e-3, 1e-2);
        float ms = time_ms(run, 10);
        printf("  %.4f ms, %.0f GB/s\n", ms, 4.0 * n / ms / 1e6);
    }
    return dev_finish("attention");
}
