/*
 dev/cuda/common.h: helpers of the kernel benchmarks in dev/cuda (llm.c
 style: each program holds several versions of one kernel, checks every
 version against a plain CPU reference computed in double/float from the
 SAME bf16-rounded inputs, then times it). The shipped version is the one in
 llmc/cuda/, included here as the last version of each program.

 Build: make -f cuda.mk cuda-dev   (from the repository root)
 Run:   ./dev/cuda/<name> [version]   exit status 1 if any check fails.
 No MPI, no NCCL: the llmc/cuda headers run on the legacy default stream.
*/
#ifndef DEV_CUDA_COMMON_H
#define DEV_CUDA_COMMON_H

#include "llmc/cuda/common.cuh"
#include <vector>

static int dev_failures = 0;

/* Under the emulated device (make emu: LLMC_CUDA_EMU, the kernels run on the
   CPU, tests/cuda_emu) every program runs its checks at a small shape,
   DEV_SHAPE(gpu, emu) picks one, and time_ms runs the timed function once
   without warm-up (the numbers are the CPU's, not a GPU's), so each program
   finishes in seconds. With nvcc: the benchmark shapes and timing loops. */
#ifdef LLMC_CUDA_EMU
#define DEV_EMU 1
#else
#define DEV_EMU 0
#endif
#define DEV_SHAPE(gpu, emu) (DEV_EMU ? (emu) : (gpu))

/* deterministic pseudo-random floats in [-scale, scale] (xorshift) */
static inline std::vector<float> rand_floats(size_t n, float scale, unsigned long long seed) {
    std::vector<float> v(n);
    unsigned long long s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        v[i] = scale * (2.0f * (float)((s >> 11) * (1.0 / 9007199254740992.0)) - 1.0f);
    }
    return v;
}

/* round every value to bf16 (the CPU reference sees what the GPU sees) */
static inline void round_bf16(std::vector<float>& v) {
    for (auto& x : v) x = host_bf16_bits_to_float(host_float_to_bf16_bits(x));
}

static inline floatX* to_device(const std::vector<float>& h) {
    std::vector<uint16_t> b(h.size());
    for (size_t i = 0; i < h.size(); i++) b[i] = host_float_to_bf16_bits(h[i]);
    floatX* d = NULL;
    cudaCheck(cudaMalloc(&d, b.size() * 2 + 16));
    cudaCheck(cudaMemcpy(d, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
    return d;
}
static inline float* to_device_f32(const std::vector<float>& h) {
    float* d = NULL;
    cudaCheck(cudaMalloc(&d, h.size() * 4 + 16));
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    return d;
}
static inline std::vector<float> from_device(const floatX* d, size_t n) {
    cudaCheck(cudaDeviceSynchronize());
    std::vector<uint16_t> b(n);
    cudaCheck(cudaMemcpy(b.data(), d, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = host_bf16_bits_to_float(b[i]);
    return h;
}
static inline std::vector<float> from_device_f32(const float* d, size_t n) {
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
    return h;
}

/* max |got - ref| <= atol + rtol * max|ref|; prints one line */
static inline int check(const char* what, const std::vector<float>& got, const std::vector<float>& ref,
                        double atol, double rtol) {
    double maxerr = 0, maxref = 0;
    size_t worst = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= maxerr)) { maxerr = e; worst = i; }
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    }
    double tol = atol + rtol * maxref;
    int ok = maxerr <= tol;
    printf("  %-34s %s  max err %.3e at %zu (got %.6g ref %.6g), tol %.3e\n", what, ok ? "OK  " : "FAIL", maxerr,
           worst, ref.empty() ? 0.0 : got[worst], ref.empty() ? 0.0 : ref[worst], tol);
    if (!ok) dev_failures++;
    return ok;
}

/* average milliseconds of f() over reps runs (after one warm-up) */
template <class F>
static inline float time_ms(F f, int reps) {
    if (DEV_EMU) reps = 1;
    else f();
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    cudaCheck(cudaEventRecord(a, cuda_ctx.stream));
    for (int i = 0; i < reps; i++) f();
    cudaCheck(cudaEventRecord(b, cuda_ctx.stream));
    cudaCheck(cudaEventSynchronize(b));
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, a, b));
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    return ms / reps;
}

static inline int dev_version_arg(int argc, char** argv) { return argc > 1 ? atoi(argv[1]) : 0; }

static inline int dev_finish(const char* name) {
    printf("%s: %s\n", name, dev_failures ? "FAILED" : "all checks passed");
    return dev_failures ? 1 : 0;
}

#endif /* DEV_CUDA_COMMON_H */
