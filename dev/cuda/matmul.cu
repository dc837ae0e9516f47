/*
 dev/cuda/matmul.cu: the linear layer out = inp @ weight^T + bias and its
 backward, bf16 storage, fp32 accumulation.
 forward versions:
   1  naive kernel, one thread per output (reference for the others' layout)
   2  cuBLAS cublasGemmEx, bias written first and accumulated (beta = 1)
   3  llmc/cuda/matmul.cuh: cuBLASLt with the bias in the epilogue
 backward: llmc matmul_backward (dinp, dweight by cuBLASLt with beta = 1,
 dbias by the deterministic column sum) against the CPU.
 ./dev/cuda/matmul [version]
*/
#include "dev/cuda/common.h"
#include "llmc/cuda/matmul.cuh"

__global__ void matmul_v1(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int C, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * OC) return;
    int n = (int)(idx / OC), o = (int)(idx % OC);
    float s = bias ? bf(bias[o]) : 0.0f;
    for (int c = 0; c < C; c++) s += bf(inp[(size_t)n * C + c]) * bf(w[(size_t)o * C + c]);
    out[idx] = tobf(s);
}

int main(int argc, char** argv) {
    int version = dev_version_arg(argc, argv);
    const int N = DEV_SHAPE(8 * 1024, 256), C = DEV_SHAPE(768, 128), OC = DEV_SHAPE(3072, 384);
    auto x = rand_floats((size_t)N * C, 1.0f, 51), w = rand_floats((size_t)OC * C, 0.05f, 52), b = rand_floats(OC, 0.5f, 53);
    auto dout = rand_floats((size_t)N * OC, 0.05f, 54);
    round_bf16(x); round_bf16(w); round_bf16(b); round_bf16(dout);
    /* CPU reference on a sample of rows (the full product is slow on a CPU) */
    const int rows = 64;
    std::vector<float> ref((size_t)rows * OC);
    for (int r = 0; r < rows; r++) {
        int n = (int)(((size_t)r * 7919) % N);
        for (int o = 0; o < OC; o++) {
            double s = b[o];
            for (int c = 0; c < C; c++) s += (double)x[(size_t)n * C + c] * w[(size_t)o * C + c];
            ref[(size_t)r * OC + o] = (float)s;
        }
    }
    floatX *d_x = to_device(x), *d_w = to_device(w), *d_b = to_device(b), *d_out;
    cudaCheck(cudaMalloc(&d_out, (size_t)N * OC * 2));
    cuda_blas_init();
    printf("matmul forward N=%d C=%d OC=%d\n", N, C, OC);
    for (int v = 1; v <= 3; v++) {
        if (version && version != v) continue;
        auto run = [&]() {
            if (v == 1) { LLMC_LAUNCH(matmul_v1, cdiv_u((size_t)N * OC, 256), 256, 0, 0, d_out, d_x, d_w, d_b, N, C, OC); cudaCheckLaunch("matmul_v1"); }
            else if (v == 2) {
                LLMC_LAUNCH(gemm_bias_fill_kernel, cdiv_u((size_t)N * OC, 256), 256, 0, 0, d_out, d_b, OC, N, OC);
                float one = 1.0f;
                cublasCheck(cublasGemmEx(gemm_state.blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, d_w, CUDA_R_16BF, C,
                                         d_x, CUDA_R_16BF, C, &one, d_out, CUDA_R_16BF, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            } else matmul_forward(d_out, d_x, d_w, d_b, N, C, OC);
        };
        run();
        auto all = from_device(d_out, (size_t)N * OC);
        std::vector<float> got((size_t)rows * OC);
        for (int r = 0; r < rows; r++) memcpy(&got[(size_t)r * OC], &all[(((size_t)r * 7919) % N) * OC], OC * 4);
        printf(" version %d\n", v);
        check("out (64 sampled rows)", got, ref, 1e-2, 8e-3);
        float ms = time_ms(run, v == 1 ? 2 : 20);
        printf("  %.4f ms, %.1f TFLOP/s\n", ms, 2.0 * N * C * OC / ms / 1e9);
    }

    printf("matmul backward (llmc)\n");
    /* reference on a smaller shape, all outputs */
    const int n2 = 256, c2 = 96, o2 = 288;
    auto x2 = rand_floats((size_t)n2 * c2, 1.0f, 61), w2 = rand_floats((size_t)o2 * c2, 0.1f, 62);
    auto d2 = rand_floats((size_t)n2 * o2, 0.1f, 63), di0 = rand_floats((size_t)n2 * c2, 0.1f, 64);
    auto dw0 = rand_floats((size_t)o2 * c2, 0.1f, 65), db0 = rand_floats(o2, 0.1f, 66);
    round_bf16(x2); round_bf16(w2); round_bf16(d2); round_bf16(di0); round_bf16(dw0); round_bf16(db0);
    std::vector<float> di = di0, dw = dw0, db = db0;
    for (int n = 0; n < n2; n++)
        for (int c = 0; c < c2; c++) { double s = 0; for (int o = 0; o < o2; o++) s += (double)d2[(size_t)n * o2 + o] * w2[(size_t)o * c2 + c]; di[(size_t)n * c2 + c] += (float)s; }
    for (int o = 0; o < o2; o++) {
        for (int c = 0; c < c2; c++) { double s = 0; for (int n = 0; n < n2; n++) s += (double)d2[(size_t)n * o2 + o] * x2[(size_t)n * c2 + c]; dw[(size_t)o * c2 + c] += (float)s; }
        double s = 0; for (int n = 0; n < n2; n++) s += d2[(size_t)n * o2 + o]; db[o] += (float)s;
    }
    floatX *g_x = to_device(x2), *g_w = to_device(w2), *g_d = to_device(d2), *g_di = to_device(di0), *g_dw = to_device(dw0), *g_db = to_device(db0);
    matmul_backward(g_di, g_dw, g_db, g_d, g_x, g_w, n2, c2, o2);
    check("dinp (+=)", from_device(g_di, (size_t)n2 * c2), di, 1e-2, 8e-3);
    check("dweight (+=)", from_device(g_dw, (size_t)o2 * c2), dw, 1e-2, 8e-3);
    check("dbias (+=)", from_device(g_db, o2), db, 1e-2, 8e-3);
    printf("GEMMs: %llu via cuBLASLt, %llu via the cuBLAS fallback\n", gemm_state.lt_calls, gemm_state.fallback_calls);
    return dev_finish("matmul");
}
