/*
 dev/cuda/encoder.cu: token + position embedding, forward and backward.
 backward versions (dwte with repeated tokens is the hard part):
   1  fp32 atomicAdd per (token row, channel) into a float copy of dwte
      (fast, NOT deterministic: the order of the adds varies)
   2  llmc/cuda/encoder.cuh: stable radix sort of (token, row), one block per
      run of equal tokens sums its rows in order (deterministic); checked to
      give bitwise identical results on two runs
 ./dev/cuda/encoder [version]
*/
#include "dev/cuda/common.h"
#include "llmc/cuda/encoder.cuh"

__global__ void enc_bwd_v1(float* dwte, float* dwpe, const floatX* dout, const int* inp, int BT, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * C) return;
    int bt = (int)(idx / C), c = (int)(idx % C);
    float d = bf(dout[idx]);
    atomicAdd(&dwte[(size_t)inp[bt] * C + c], d);
    atomicAdd(&dwpe[(size_t)(bt % T) * C + c], d);
}

int main(int argc, char** argv) {
    int version = dev_version_arg(argc, argv);
    const int B = DEV_SHAPE(8, 2), T = DEV_SHAPE(1024, 64), C = DEV_SHAPE(768, 96), V = DEV_SHAPE(50304, 1000), maxT = DEV_SHAPE(1024, 96);
    size_t BT = (size_t)B * T;
    auto wte = rand_floats((size_t)V * C, 0.1f, 41), wpe = rand_floats((size_t)maxT * C, 0.1f, 42);
    auto dout = rand_floats(BT * C, 1.0f, 43);
    round_bf16(wte); round_bf16(wpe); round_bf16(dout);
    std::vector<int> inp(BT);
    /* a skewed token distribution: many repeats of a few tokens, as in text */
    for (size_t i = 0; i < BT; i++) { unsigned long long h = i * 0x9E3779B97F4A7C15ULL; inp[i] = (h >> 40) % 7 == 0 ? (int)((h >> 20) % 5) : (int)((h >> 13) % V); }
    std::vector<float> out(BT * C), dwte((size_t)V * C, 0.0f), dwpe((size_t)maxT * C, 0.0f);
    std::vector<double> awte((size_t)V * C, 0.0), awpe((size_t)maxT * C, 0.0);
    for (size_t bt = 0; bt < BT; bt++) {
        int t = (int)(bt % T);
        for (int c = 0; c < C; c++) {
            out[bt * C + c] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
            awte[(size_t)inp[bt] * C + c] += dout[bt * C + c];
            awpe[(size_t)t * C + c] += dout[bt * C + c];
        }
    }
    for (size_t i = 0; i < awte.size(); i++) dwte[i] = (float)awte[i];
    for (size_t i = 0; i < awpe.size(); i++) dwpe[i] = (float)awpe[i];
    int* d_inp;
    cudaCheck(cudaMalloc(&d_inp, BT * 4));
    cudaCheck(cudaMemcpy(d_inp, inp.data(), BT * 4, cudaMemcpyHostToDevice));
    floatX *d_wte = to_device(wte), *d_wpe = to_device(wpe), *d_dout = to_device(dout), *d_out;
    cudaCheck(cudaMalloc(&d_out, BT * C * 2));
    printf("encoder forward B=%d T=%d C=%d\n", B, T, C);
    encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C);
    check("out", from_device(d_out, BT * C), out, 1e-6, 8e-3);
    printf("  %.4f ms\n", time_ms([&]() { encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C); }, 20));

    printf("encoder backward\n");
    std::vector<float> zte((size_t)V * C, 0.0f), zpe((size_t)maxT * C, 0.0f);
    for (int v = 1; v <= 2; v++) {
        if (version && version != v) continue;
        printf(" version %d\n", v);
        if (v == 1) {
            float *f_wte = to_device_f32(zte), *f_wpe = to_device_f32(zpe);
            auto run = [&]() { LLMC_LAUNCH(enc_bwd_v1, cdiv_u(BT * C, 256), 256, 0, 0, f_wte, f_wpe, d_dout, d_inp, (int)BT, T, C); cudaCheckLaunch("enc_bwd_v1"); };
            run();
            check("dwte", from_device_f32(f_wte, (size_t)V * C), dwte, 1e-4, 1e-5);
            check("dwpe", from_device_f32(f_wpe, (size_t)maxT * C), dwpe, 1e-4, 1e-5);
            printf("  %.4f ms\n", time_ms(run, 10));
            cudaFree(f_wte); cudaFree(f_wpe);
        } else {
            floatX *g_wte = to_device(zte), *g_wpe = to_device(zpe);
            encoder_backward(g_wte, g_wpe, d_dout, d_inp, B, T, C);
            auto r1 = from_device(g_wte, (size_t)V * C);
            check("dwte", r1, dwte, 1e-6, 8e-3);
            check("dwpe", from_device(g_wpe, (size_t)maxT * C), dwpe, 1e-6, 8e-3);
            cudaCheck(cudaMemset(g_wte, 0, (size_t)V * C * 2));
            encoder_backward(g_wte, g_wpe, d_dout, d_inp, B, T, C);
            auto r2 = from_device(g_wte, (size_t)V * C);
            int same = memcmp(r1.data(), r2.data(), r1.size() * 4) == 0;
            printf("  %-34s %s\n", "bitwise identical on a rerun", same ? "OK" : "FAIL");
            if (!same) dev_failures++;
            printf("  %.4f ms\n", time_ms([&]() { encoder_backward(g_wte, g_wpe, d_dout, d_inp, B, T, C); }, 10));
            cudaFree(g_wte); cudaFree(g_wpe);
        }
    }
    return dev_finish("encoder");
}
