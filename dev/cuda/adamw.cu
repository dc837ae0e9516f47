/*
 dev/cuda/adamw.cu: the optimizer-side kernels of llmc/cuda against the CPU:
 AdamW (fp32 master and moments, bf16 params written with round-to-nearest-
 even, checked bit for bit against the host conversion of the CPU's master)
 and sum_squares (double accumulation; the grad norm); and the host twin of
 the AdamW kernel (adamw_host_update, the offloaded optimizer) bit for bit
 against the device.
 ./dev/cuda/adamw
*/
#include "dev/cuda/common.h"
#include "llmc/cuda/adamw.cuh"
#include "llmc/cuda/global_norm.cuh"

int main(int argc, char** argv) {
    (void)argc; (void)argv;
    const size_t n = DEV_SHAPE(10 * 1000 * 1000 + 7, 100 * 1000 + 7);
    auto master = rand_floats(n, 0.1f, 71), g = rand_floats(n, 0.01f, 72), m = rand_floats(n, 0.001f, 73), v = rand_floats(n, 1e-5f, 74);
    for (auto& x : v) x = fabsf(x);
    round_bf16(g);
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.7f;
    int t = 3;
    float b1c = 1.0f - powf(b1, (float)t), b2c = 1.0f - powf(b2, (float)t);
    std::vector<float> rm = m, rv = v, rw = master, rp(n);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * scale;
        float mi = rm[i] + (1 - b1) * (gi - rm[i]);
        float vi = b2 * rv[i] + (1 - b2) * gi * gi;
        rm[i] = mi; rv[i] = vi;
        rw[i] = rw[i] * (1 - lr * wd) - (lr / b1c) * (mi / (sqrtf(vi) / sqrtf(b2c) + eps));
        rp[i] = host_bf16_bits_to_float(host_float_to_bf16_bits(rw[i]));
    }
    float *d_master = to_device_f32(master), *d_m = to_device_f32(m), *d_v = to_device_f32(v);
    floatX *d_g = to_device(g), *d_p;
    cudaCheck(cudaMalloc(&d_p, n * 2));
    printf("adamw, n=%zu\n", n);
    adamw_update(d_p, d_master, d_g, d_m, d_v, n, lr, b1, b2, b1c, b2c, eps, wd, scale);
    check("master", from_device_f32(d_master, n), rw, 1e-7, 1e-6);
    check("m", from_device_f32(d_m, n), rm, 1e-9, 1e-6);
    check("v", from_device_f32(d_v, n), rv, 1e-12, 1e-6);
    auto p = from_device(d_p, n);
    /* params must be the RNE bf16 of the GPU's own master values */
    auto gm = from_device_f32(d_master, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) if (p[i] != host_bf16_bits_to_float(host_float_to_bf16_bits(gm[i]))) bad++;
    printf("  %-34s %s  (%zu mismatches)\n", "params == RNE(master)", bad ? "FAIL" : "OK  ", bad);
    if (bad) dev_failures++;
    /* the offloaded optimizer's host twin (--offload-optimizer host/disk):
       adamw_host_update on the same inputs must give the device's bits */
    {
        std::vector<float> hm = m, hv = v, hw = master;
        std::vector<floatX> hg(n), hp(n);
        for (size_t i = 0; i < n; i++) { uint16_t b = host_float_to_bf16_bits(g[i]); memcpy((void*)&hg[i], &b, 2); }
        adamw_host_update(hp.data(), hw.data(), hg.data(), hm.data(), hv.data(), n, lr, b1, b2, b1c, b2c, eps, wd, scale);
        auto dm = from_device_f32(d_m, n), dv = from_device_f32(d_v, n);
        size_t diff = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t pb;
            memcpy(&pb, (const void*)&hp[i], 2);
            if (memcmp(&hw[i], &gm[i], 4) || memcmp(&hm[i], &dm[i], 4) || memcmp(&hv[i], &dv[i], 4) || host_bf16_bits_to_float(pb) != p[i]) diff++;
        }
        printf("  %-34s %s  (%zu elements differ in master, m, v or params)\n", "host twin == device, bit for bit", diff ? "FAIL" : "OK  ", diff);
        if (diff) dev_failures++;
    }
    float ms = time_ms([&]() { adamw_update(d_p, d_master, d_g, d_m, d_v, n, lr, b1, b2, b1c, b2c, eps, wd, scale); }, 10);
    printf("  %.4f ms, %.0f GB/s\n", ms, 30.0 * n / ms / 1e6);

    printf("sum_squares\n");
    double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (double)g[i] * g[i];
    double got = sum_squares(d_g, n);
    double rel = fabs(got - ref) / ref;
    printf("  %-34s %s  %.12g vs %.12g (rel %.2e)\n", "sum of squares", rel < 1e-9 ? "OK  " : "FAIL", got, ref, rel);
    if (rel >= 1e-9) dev_failures++;
    double again = sum_squares(d_g, n);
    printf("  %-34s %s\n", "bitwise identical on a rerun", again == got ? "OK" : "FAIL");
    if (again != got) dev_failures++;
    printf("  %.4f ms (with the host sync)\n", time_ms([&]() { (void)sum_squares(d_g, n); }, 10));
    return dev_finish("adamw");
}
