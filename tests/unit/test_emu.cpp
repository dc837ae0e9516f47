/*
 tests/unit/test_emu.cpp: the emulated CUDA device's own checks (issue 47
 item 10, and the launch limits of item 2). Built by `make emu-unit` as
 build/test_emu with g++ against the stand-in headers of tests/cuda_emu
 (the same flags as `make emu`); run ./build/test_emu. The last line is
 "N passed, M failed, K skipped"; the exit status is 1 if any failed.

 The error cases (a divergent __syncthreads, a bad warp mask, an invalid
 cuBLASLt descriptor, ...) end the emulated program with status 86 and one
 "cuda emu: error: ..." line: each runs in a child (this program re-executed
 as `test_emu child <case>`), and the parent asserts the exit status and
 that the message names the kernel / call and the source sites.

 Checks:
   - barrier and warp rules: a divergent __syncthreads (both sites named),
     a lane calling with a mask that does not name it, a mask naming a lane
     that exited, two masks at one site; a uniform kernel passes (control);
   - shuffles (xor, down, up, idx; widths 32..1; every offset 0..31) against
     the PTX ISA's definition of shfl.sync (an independent reference);
     ballot / any / all;
   - atomics under contention: 4 streams x 8 blocks x 128 threads x 50
     atomicAdd on one int, one unsigned long long and one float counter
     (exact integer counts), atomicMax, atomicCAS;
   - streams and events: a kernel on stream B behind cudaStreamWaitEvent of
     an event recorded on stream A after a 100 ms kernel sees A's result;
     cudaEventQuery is cudaErrorNotReady while A runs; the legacy stream
     orders a blocking stream; cudaEventElapsedTime covers the 100 ms;
   - bf16: every bf16 -> float and 1.57 M float -> bf16 (ties, NaN, inf,
     denormals) bit for bit against the CUDA toolkit's host functions
     (build/emu_bf16_ref, compiled against /usr/local/cuda/include/
     cuda_bf16.h; skipped and counted if it is absent);
   - a cuBLASLt operand nothing wrote (cudaMalloc's 0xFF fill) is an error;
   - cuBLASLt through the project's gemm_bf16 (llmc/cuda/matmul.cuh) with
     the transposes, leading dimensions, batch strides and bias epilogue of
     matmul.cuh and attention.cuh, and the cuBLAS fallback, against a
     float64 GEMM of the same bf16 operands: |D - ref| <= 2^-8 |ref| + (k+2)
     2^-24 (sum |a b| + |beta C| + |bias|) (one bf16 rounding of the fp32
     result, fp32 accumulation); the measured worst ratio is printed;
   - launch limits: 1024 threads, block z <= 64, grid x < 2^31, y and z <=
     65535, 48 KiB of static + dynamic shared memory unless cudaFuncSet-
     Attribute(cudaFuncAttributeMaxDynamicSharedMemorySize) raised it (then
     227 KiB): cudaErrorInvalidConfiguration from cudaGetLastError.
*/
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/matmul.cuh"
#include <sys/wait.h>
#include <vector>
#include <string>
#include "emu_bf16_sweep.h"

static int g_pass = 0, g_fail = 0, g_skip = 0;
static const char* g_self = "build/test_emu";

static void check(bool ok, const char* name, const char* fmt = "", ...) {
    char msg[1024] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (ok) { g_pass++; printf("ok   %s %s\n", name, msg); }
    else { g_fail++; printf("FAIL %s %s\n", name, msg); }
    fflush(stdout);
}
static void skip(const char* name, const char* why) { g_skip++; printf("skip %s: %s\n", name, why); fflush(stdout); }

/* runs `test_emu child <what>`; returns its exit status (-1: signal), its
   stderr in *err */
static int run_child(const char* what, std::string* err) {
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(2); }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execl(g_self, g_self, "child", what, (char*)NULL);
        _exit(127);
    }
    close(fds[1]);
    err->clear();
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) err->append(buf, (size_t)n);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }
static std::string site(int line) { return std::string("test_emu.cpp:") + std::to_string(line); }

/* a child case must end with status 86 and a message holding every string */
static void expect_error(const char* what, std::vector<std::string> needles) {
    std::string err;
    int rc = run_child(what, &err);
    bool ok = rc == 86 && has(err, "cuda emu: error:") && has(err, "LLMC_EMU_SEED=");
    std::string missing;
    for (auto& n : needles) if (!has(err, n)) { ok = false; missing += " '" + n + "'"; }
    while (!err.empty() && err.back() == '\n') err.pop_back();
    check(ok, what, "(exit %d%s%s): %s", rc, missing.empty() ? "" : ", missing", missing.c_str(), err.c_str());
}
static void expect_clean(const char* what) {
    std::string err;
    int rc = run_child(what, &err);
    check(rc == 0, what, "(control: exit %d) %s", rc, err.c_str());
}

/* ------------------------------------------------------------------ kernels */

/* the lines of the sites the error messages must name */
static const int kDivA = __LINE__ + 4;
static const int kDivB = __LINE__ + 6;
__global__ void divergent_kernel(int* out) {
    if (threadIdx.x < 40) {
        __syncthreads();
        out[threadIdx.x] = 1;
    } else {
        __syncthreads();
        out[threadIdx.x] = 2;
    }
}
__global__ void uniform_barrier_kernel(int* out) {
    __shared__ int sh[64];
    sh[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = sh[63 - threadIdx.x];
}
static const int kMaskSelf = __LINE__ + 2;
__global__ void mask_self_kernel(float* out) {
    float v = __shfl_xor_sync(0xfffffffeu, (float)threadIdx.x, 1);
    out[threadIdx.x] = v;
}
static const int kMaskExit = __LINE__ + 4;
__global__ void mask_exited_kernel(float* out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x == 7) return;
    v = __shfl_down_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
static const int kMaskTwo = __LINE__ + 3;
__global__ void mask_two_kernel(float* out) {
    unsigned m = threadIdx.x < 16 ? 0x0000ffffu : 0xffffffffu;
    float v = __shfl_xor_sync(m, (float)threadIdx.x, 1);
    out[threadIdx.x] = v;
}

/* every lane: out[(arg * 64) + tid] = shuffle(mode, value(tid), arg, width) */
__device__ __forceinline__ long long shfl_val(int t) { return 1000003LL * t + 7 - ((long long)t << 40); }
__global__ void shuffle_kernel(long long* out, int mode, int width) {
    int t = (int)threadIdx.x;
    long long v = shfl_val(t);
    for (int arg = 0; arg < 32; arg++) {
        long long r = 0;
        if (mode == 0) r = __shfl_xor_sync(0xffffffffu, v, arg, width);
        else if (mode == 1) r = __shfl_down_sync(0xffffffffu, v, (unsigned)arg, width);
        else if (mode == 2) r = __shfl_up_sync(0xffffffffu, v, (unsigned)arg, width);
        else r = __shfl_sync(0xffffffffu, v, arg, width);
        out[arg * 64 + t] = r;
    }
}
/* float and double shuffles (warp_sum, warp_sum_d of common.cuh) */
__global__ void warp_sum_kernel(float* outf, double* outd) {
    outf[threadIdx.x] = warp_sum((float)(threadIdx.x + 1));
    outd[threadIdx.x] = warp_sum_d(0.5 * (threadIdx.x + 1));
}
__global__ void vote_kernel(unsigned* out) {
    int t = (int)threadIdx.x;
    out[t * 3 + 0] = __ballot_sync(0xffffffffu, (t % 3) == 0);
    out[t * 3 + 1] = (unsigned)__any_sync(0xffffffffu, t == 37);
    out[t * 3 + 2] = (unsigned)__all_sync(0xffffffffu, t != 37);
}

__global__ void atomic_kernel(int* ci, unsigned long long* cu, float* cf, int* mx, int iters) {
    for (int i = 0; i < iters; i++) {
        atomicAdd(ci, 1);
        atomicAdd(cu, 3ull);
        atomicAdd(cf, 1.0f);
    }
    atomicMax(mx, (int)(blockIdx.x * blockDim.x + threadIdx.x));
}
/* a spin lock from atomicCAS / atomicExch guarding a non-atomic counter */
__global__ void cas_lock_kernel(int* lock, int* counter, int iters) {
    if (threadIdx.x != 0) return;   /* one thread per block: no intra-warp spin */
    for (int i = 0; i < iters; i++) {
        while (atomicCAS(lock, 0, 1) != 0) {}
        int c = *(volatile int*)counter;
        *(volatile int*)counter = c + 1;
        atomicExch(lock, 0);
    }
}

__global__ void slow_write_kernel(int* p, int v, int ms) {
    for (int i = 0; i < ms; i++) __nanosleep(1000000u);
    *p = v;
}
__global__ void copy_int_kernel(int* dst, const int* src) { *dst = *src; }

__global__ void nop_kernel(int* p) { if (p && threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) *p = 1; }
__global__ void big_shared_kernel(int* p) {
    __shared__ char buf[40 * 1024];
    buf[threadIdx.x] = (char)threadIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) *p = buf[1];
}

/* item 2: one __shared__ object per block, sized exactly, garbage per block */
__global__ void sized_shared_kernel(float* out) {
    __shared__ float a[32], b[16];
    __shared__ double c;
    a[threadIdx.x] = 1.0f; b[threadIdx.x & 15] = 2.0f;
    if (threadIdx.x == 0) c = 3.0;
    __syncthreads();
    out[threadIdx.x] = a[31 - threadIdx.x] + b[15 - (threadIdx.x & 15)] + (float)c;
}
__global__ void stale_shared_kernel(unsigned* out) {
    __shared__ unsigned v[64];
    if (blockIdx.x == 0) v[threadIdx.x] = 1234u;   /* block 1 reads without writing */
    __syncthreads();
    out[blockIdx.x * 64 + threadIdx.x] = v[threadIdx.x];
}
__global__ void shared_exchange_kernel(int* out) {
    __shared__ int sh[256];
    sh[threadIdx.x] = (int)(blockIdx.x * 1000 + threadIdx.x);
    __syncthreads();
    out[blockIdx.x * 256 + threadIdx.x] = sh[255 - threadIdx.x];
}
__global__ void huge_shared_kernel(int* p) {
    __shared__ char huge[48 * 1024 + 16];
    huge[threadIdx.x] = 1;
    *p = huge[0];
}

/* item 3: 16-byte loads / stores (load8 / store8 of llmc/cuda/common.cuh) */
__global__ void load8_kernel(floatX* out, const floatX* in, int off_in, int off_out) {
    float f[8];
    load8(f, in + off_in);
    for (int i = 0; i < 8; i++) f[i] *= 2.0f;
    store8(out + off_out, f);
}

/* shared-memory races and never-written reads (emu_race.h) */
__global__ void race_kernel(int* out, int mode) {
    __shared__ int sh[64];
    __shared__ int cnt;
    int t = threadIdx.x;
    if (mode == 0) {            /* exchange with a barrier: clean */
        sh[t] = t; __syncthreads(); out[t] = sh[63 - t];
    } else if (mode == 1) {     /* the same without it: thread t reads what thread 63 - t wrote */
        sh[t] = t; out[t] = sh[63 - t];
    } else if (mode == 2) {     /* every thread writes one word */
        sh[blockDim.x >> 10] = t; __syncthreads(); out[t] = sh[0];   /* index 0 computed: constant indices are not instrumented (emu_race.h) */
    } else if (mode == 3) {     /* within a warp, ordered by __syncwarp: clean */
        sh[t] = t; __syncwarp(); out[t] = sh[t ^ 1];
    } else if (mode == 4) {     /* within a warp, not ordered */
        sh[t] = t; out[t] = sh[t ^ 1];
    } else if (mode == 5) {     /* atomics on shared memory are exempt: clean */
        if (t == 0) cnt = 0;
        __syncthreads(); atomicAdd(&cnt, 1); __syncthreads();
        out[t] = cnt;
    } else if (mode == 6) {     /* read by all, then written without a barrier (write after read) */
        if (t == 0) sh[blockDim.x >> 10] = 5;
        __syncthreads(); out[t] = sh[blockDim.x >> 10];
        if (t == 40) sh[blockDim.x >> 10] = 6;
    }
}
__global__ void uninit_kernel(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f;
}
__global__ void minus_one_kernel(int* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = -1;   /* all 0xFF bytes, stored by a kernel */
}

/* ------------------------------------------------------------------ children */

/* the cross-stream race check's cases (emu_streamrace.h); 2: not one of them */
static int race_child(const char* what) {
    if (strncmp(what, "race_", 5) != 0) return 2;
    int *src, *dst;
    cudaCheck(cudaMalloc(&src, 64)); cudaCheck(cudaMalloc(&dst, 64));
    cudaCheck(cudaMemset(src, 0, 64)); cudaCheck(cudaMemset(dst, 0, 64));
    cudaStream_t A, B, Bl;
    cudaCheck(cudaStreamCreateWithFlags(&A, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&B, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreate(&Bl));
    cudaEvent_t e;
    cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    std::string w = what;
    if (w == "race_kernels" || w == "race_kernels_waited" || w == "race_kernels_late" || w == "race_stream_sync" || w == "race_event_sync") {
        LLMC_LAUNCH(slow_write_kernel, 1, 1, 0, A, src + 4, 5, 20);   /* A writes src[4] */
        cudaCheck(cudaEventRecord(e, A));
        if (w == "race_kernels_waited") cudaCheck(cudaStreamWaitEvent(B, e, 0));
        if (w == "race_stream_sync") cudaCheck(cudaStreamSynchronize(A));
        if (w == "race_event_sync") cudaCheck(cudaEventSynchronize(e));
        if (w == "race_kernels_late") usleep(100000);   /* A is done by the clock, not by any ordering */
        LLMC_LAUNCH(copy_int_kernel, 1, 1, 0, B, dst, src + 4);        /* B reads it */
    } else if (w == "race_read_read") {
        LLMC_LAUNCH(copy_int_kernel, 1, 1, 0, A, dst, src);            /* two readers of src: no race */
        int* dst2;   /* another allocation: a kernel's pointer argument stands for its whole allocation */
        cudaCheck(cudaMalloc(&dst2, 64));
        LLMC_LAUNCH(copy_int_kernel, 1, 1, 0, B, dst2, src);
    } else if (w == "race_memcpy") {
        LLMC_LAUNCH(copy_int_kernel, 1, 1, 0, A, dst, src + 2);        /* A reads src[2] */
        int h[4] = {1, 2, 3, 4};
        cudaCheck(cudaMemcpyAsync(src, h, sizeof(h), cudaMemcpyHostToDevice, B));   /* B overwrites src[0..4) */
    } else if (w == "race_legacy_blocking") {
        LLMC_LAUNCH(slow_write_kernel, 1, 1, 0, Bl, src, 5, 20);       /* a blocking stream, then the legacy stream */
        LLMC_LAUNCH(copy_int_kernel, 1, 1, 0, 0, dst, src);
    } else if (w == "race_legacy_nonblocking") {
        LLMC_LAUNCH(slow_write_kernel, 1, 1, 0, A, src, 5, 20);        /* a non-blocking stream is not ordered */
        LLMC_LAUNCH(copy_int_kernel, 1, 1, 0, 0, dst, src);
    } else { fprintf(stderr, "test_emu: unknown child case %s\n", what); return 2; }
    cudaCheck(cudaDeviceSynchronize());
    return 0;
}

static int child(const char* what) {
    if (!strncmp(what, "race_", 5)) return race_child(what);
    int* d = NULL;
    cudaCheck(cudaMalloc(&d, 4096));
    if (!strncmp(what, "load8", 5) || !strncmp(what, "store8", 6)) cudaCheck(cudaMemset(d, 0, 4096));   /* the loads read written memory */
    if (!strcmp(what, "divergent_barrier")) LLMC_LAUNCH(divergent_kernel, 1, 64, 0, 0, d);
    else if (!strcmp(what, "uniform_barrier")) LLMC_LAUNCH(uniform_barrier_kernel, 2, 64, 0, 0, d);
    else if (!strcmp(what, "mask_not_self")) LLMC_LAUNCH(mask_self_kernel, 1, 32, 0, 0, (float*)d);
    else if (!strcmp(what, "mask_lane_exited")) LLMC_LAUNCH(mask_exited_kernel, 1, 32, 0, 0, (float*)d);
    else if (!strcmp(what, "mask_two_masks")) LLMC_LAUNCH(mask_two_kernel, 1, 32, 0, 0, (float*)d);
    else if (!strcmp(what, "static_smem_over_48k")) LLMC_LAUNCH(huge_shared_kernel, 1, 32, 0, 0, d);
    else if (!strncmp(what, "shrace_", 7)) LLMC_LAUNCH(race_kernel, 2, 64, 0, 0, d, atoi(what + 7));
    else if (!strcmp(what, "uninit_read") || !strcmp(what, "uninit_memset") || !strcmp(what, "uninit_minus_one")) {
        float* in = NULL;
        cudaCheck(cudaMalloc(&in, 1024 * sizeof(float)));
        if (!strcmp(what, "uninit_memset")) cudaCheck(cudaMemset(in, 0, 1024 * sizeof(float)));
        if (!strcmp(what, "uninit_minus_one")) {
            LLMC_LAUNCH(minus_one_kernel, 4, 256, 0, 0, (int*)in, 1024);
            LLMC_LAUNCH(race_kernel, 1, 64, 0, 0, d, 0);
            LLMC_LAUNCH(minus_one_kernel, 4, 256, 0, 0, d, 64);   /* written back by memcpy below */
            int h[64];
            cudaCheck(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(d + 64, h, sizeof(h), cudaMemcpyHostToDevice));
            LLMC_LAUNCH(uninit_kernel, 1, 64, 0, 0, (float*)d + 128, (const float*)d + 64, 64);
        }
        LLMC_LAUNCH(uninit_kernel, 4, 256, 0, 0, (float*)d, in, 1000);
    }
    else if (!strcmp(what, "load8_misaligned")) LLMC_LAUNCH(load8_kernel, 1, 1, 0, 0, (floatX*)d + 64, (const floatX*)d, 1, 0);
    else if (!strcmp(what, "store8_misaligned")) LLMC_LAUNCH(load8_kernel, 1, 1, 0, 0, (floatX*)d + 64, (const floatX*)d, 0, 4);
    else if (!strcmp(what, "load8_aligned")) LLMC_LAUNCH(load8_kernel, 1, 1, 0, 0, (floatX*)d + 64, (const floatX*)d, 8, 8);
    else if (!strcmp(what, "gemm_unwritten") || !strcmp(what, "gemm_written")) {
        /* D (16x8) = A^T (stored 32x16) B (32x8); B written, A only if "written" */
        floatX *A, *B, *D;
        cudaCheck(cudaMalloc(&A, 32 * 16 * 2)); cudaCheck(cudaMalloc(&B, 32 * 8 * 2)); cudaCheck(cudaMalloc(&D, 16 * 8 * 2));
        cudaCheck(cudaMemset(B, 0, 32 * 8 * 2));
        if (!strcmp(what, "gemm_written")) cudaCheck(cudaMemset(A, 0, 32 * 16 * 2));
        gemm_bf16(1, 0, 16, 8, 32, 1.0f, A, 32, 0, B, 32, 0, 0.0f, D, 16, 0, 1, NULL);
    }
    else if (!strcmp(what, "lt_bad_ld")) {
        cublasLtMatrixLayout_t l;
        cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 64, 8, 32);
    } else if (!strcmp(what, "lt_bad_shape")) {
        /* op(A) 8x16, op(B) 32x4: k differs */
        floatX *A, *B, *D;
        cudaCheck(cudaMalloc(&A, 1024)); cudaCheck(cudaMalloc(&B, 1024)); cudaCheck(cudaMalloc(&D, 1024));
        cublasLtHandle_t h; cublasLtCreate(&h);
        cublasLtMatmulDesc_t op; cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 8, 16, 8);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 32, 4, 32);
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, 8, 4, 8);
        cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulHeuristicResult_t res; int found = 0;
        cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &res, &found);
    } else if (!strcmp(what, "memcpy_wrong_kind")) {
        int host[4] = {0, 0, 0, 0};
        cudaMemcpy(d, host, sizeof(host), cudaMemcpyDeviceToHost);
    } else { fprintf(stderr, "test_emu: unknown child case %s\n", what); return 2; }
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaDeviceSynchronize());
    return 0;
}

/* ------------------------------------------------------------------ tests */

static void test_barrier_and_masks(void) {
    expect_clean("uniform_barrier");
    expect_error("divergent_barrier", {"divergent_kernel", "divergent barrier", site(kDivA), site(kDivB)});
    expect_error("mask_not_self", {"mask_self_kernel", "lane 0", "0xfffffffe", "does not name it", site(kMaskSelf)});
    expect_error("mask_lane_exited", {"mask_exited_kernel", "lane 7", "exited", site(kMaskExit)});
    expect_error("mask_two_masks", {"mask_two_kernel", "0x0000ffff", "0xffffffff", site(kMaskTwo)});
    expect_error("static_smem_over_48k", {"huge_shared_kernel", "49168 bytes of static __shared__"});
    expect_clean("load8_aligned");
    expect_error("load8_misaligned", {"load8_kernel", "16-byte load8", "not 16-byte aligned"});
    expect_error("store8_misaligned", {"load8_kernel", "16-byte store8", "not 16-byte aligned"});
    expect_clean("gemm_written");
    expect_error("gemm_unwritten", {"cublasLtMatmul reads op(A) element (0, 0) of batch 0", "read before anything wrote it"});
    expect_error("lt_bad_ld", {"cublasLtMatrixLayoutCreate", "leading dimension 32 < rows 64"});
    expect_error("lt_bad_shape", {"cublasLtMatmulAlgoGetHeuristic", "op(A) is 8 x 16"});
    expect_error("memcpy_wrong_kind", {"cudaMemcpy", "cudaMemcpyDeviceToHost", "pageable host memory"});
}

/* emu_race.h: a missing barrier is a shared-memory race naming the kernel,
   the threads and the variable; never-written device memory read by a kernel */
static void test_races(void) {
#if LLMC_EMU_ACCESS
    expect_clean("shrace_0");
    expect_error("shrace_1", {"race_kernel", "shared-memory race", "race_kernel(int*, int)::sh", "test_emu.cpp:"});
    expect_error("shrace_2", {"race_kernel", "shared-memory race", "writes byte 0 of race_kernel(int*, int)::sh", "wrote"});
    expect_clean("shrace_3");
    expect_error("shrace_4", {"race_kernel", "shared-memory race", "reads"});
    expect_clean("shrace_5");
    expect_error("shrace_6", {"race_kernel", "shared-memory race", "byte 0 of race_kernel(int*, int)::sh", "thread 40"});
    expect_error("uninit_read", {"uninit_kernel", "reads 4 bytes", "before anything wrote it", "test_emu.cpp:"});
    expect_clean("uninit_memset");
    expect_clean("uninit_minus_one");
#else
    skip("race and never-written checks", "(built without LLMC_EMU_ACCESS: make emu-asan or other flags)");
#endif
}

/* The PTX ISA's shfl.sync (sec. "shfl.sync"): c = ((32 - width) << 8) |
   (up ? 0 : 0x1f); segmask = c[12:8]; maxLane = (lane & segmask) |
   (c[4:0] & ~segmask); minLane = lane & segmask; up: j = lane - b, valid
   j >= maxLane; down: j = lane + b, valid j <= maxLane; bfly: j = lane ^ b,
   valid j <= maxLane; idx: j = minLane | (b[4:0] & ~segmask), valid j <=
   maxLane; not valid: the lane's own value. */
static int ptx_src(int mode, int lane, int b, int width) {
    int up = mode == 2;
    int c = ((32 - width) << 8) | (up ? 0 : 0x1f);
    int segmask = (c >> 8) & 31, clamp = c & 31;
    int maxLane = (lane & segmask) | (clamp & ~segmask), minLane = lane & segmask;
    int j;
    bool ok;
    switch (mode) {
        case 0: j = lane ^ b; ok = j <= maxLane; break;
        case 1: j = lane + b; ok = j <= maxLane; break;
        case 2: j = lane - b; ok = j >= maxLane; break;
        default: j = minLane | (b & 31 & ~segmask); ok = j <= maxLane; break;
    }
    return ok ? j : lane;
}

static void test_shuffles(void) {
    long long* d;
    cudaCheck(cudaMalloc(&d, 32 * 64 * sizeof(long long)));
    std::vector<long long> h(32 * 64);
    const char* names[4] = {"xor", "down", "up", "idx"};
    for (int mode = 0; mode < 4; mode++) {
        long bad = 0, total = 0;
        char first[256] = "";
        for (int width = 32; width >= 1; width >>= 1) {
            LLMC_LAUNCH(shuffle_kernel, 1, 64, 0, 0, d, mode, width);
            cudaCheck(cudaGetLastError());
            cudaCheck(cudaMemcpy(h.data(), d, h.size() * sizeof(long long), cudaMemcpyDeviceToHost));
            for (int arg = 0; arg < 32; arg++)
                for (int t = 0; t < 64; t++) {
                    int lane = t & 31, w = t >> 5;
                    long long want = shfl_val(w * 32 + ptx_src(mode, lane, arg, width));
                    total++;
                    if (h[arg * 64 + t] != want) {
                        if (!bad) snprintf(first, sizeof(first), "first: width %d arg %d thread %d got %lld want %lld", width, arg, t,
                                           h[arg * 64 + t], want);
                        bad++;
                    }
                }
        }
        char nm[64];
        snprintf(nm, sizeof(nm), "shfl_%s_vs_ptx", names[mode]);
        check(bad == 0, nm, "(%ld of %ld results differ from the PTX definition) %s", bad, total, first);
    }
    cudaCheck(cudaFree(d));

    float* f; double* g; unsigned* u;
    cudaCheck(cudaMalloc(&f, 64 * 4)); cudaCheck(cudaMalloc(&g, 64 * 8)); cudaCheck(cudaMalloc(&u, 64 * 3 * 4));
    LLMC_LAUNCH(warp_sum_kernel, 1, 64, 0, 0, f, g);
    LLMC_LAUNCH(vote_kernel, 1, 64, 0, 0, u);
    std::vector<float> hf(64); std::vector<double> hg(64); std::vector<unsigned> hu(64 * 3);
    cudaCheck(cudaMemcpy(hf.data(), f, 64 * 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hg.data(), g, 64 * 8, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hu.data(), u, 64 * 12, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int t = 0; t < 64; t++) {
        int w = t >> 5;
        float wf = w ? (float)(33 + 64) * 16 : (float)(1 + 32) * 16;      /* sum of w*32+1 .. w*32+32 */
        if (hf[t] != wf || hg[t] != 0.5 * wf) bad++;
        unsigned ballot = 0;
        for (int l = 0; l < 32; l++) if (((w * 32 + l) % 3) == 0) ballot |= 1u << l;
        if (hu[t * 3] != ballot || hu[t * 3 + 1] != (unsigned)(w == 1) || hu[t * 3 + 2] != (unsigned)(w == 0)) bad++;
    }
    check(bad == 0, "warp_sum_and_votes", "(%d of 64 threads wrong: warp_sum, warp_sum_d, ballot, any, all)", bad);
    cudaFree(f); cudaFree(g); cudaFree(u);
}

static void test_atomics(void) {
    int *ci, *mx, *lock, *cnt; unsigned long long* cu; float* cf;
    cudaCheck(cudaMalloc(&ci, 4)); cudaCheck(cudaMalloc(&cu, 8)); cudaCheck(cudaMalloc(&cf, 4)); cudaCheck(cudaMalloc(&mx, 4));
    cudaCheck(cudaMalloc(&lock, 4)); cudaCheck(cudaMalloc(&cnt, 4));
    cudaCheck(cudaMemset(ci, 0, 4)); cudaCheck(cudaMemset(cu, 0, 8)); cudaCheck(cudaMemset(cf, 0, 4)); cudaCheck(cudaMemset(mx, 0, 4));
    cudaCheck(cudaMemset(lock, 0, 4)); cudaCheck(cudaMemset(cnt, 0, 4));
    const int S = 4, G = 8, TPB = 128, IT = 50;
    cudaStream_t st[S];
    for (int i = 0; i < S; i++) cudaCheck(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
    /* atomics only: the cross-stream race check does not model them */
    for (const void* p : {(const void*)ci, (const void*)cu, (const void*)cf, (const void*)mx, (const void*)lock, (const void*)cnt}) emu::race_exempt(p);
    for (int i = 0; i < S; i++) {
        LLMC_LAUNCH(atomic_kernel, G, TPB, 0, st[i], ci, cu, cf, mx, IT);
        LLMC_LAUNCH(cas_lock_kernel, G, 32, 0, st[i], lock, cnt, 200);
    }
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaDeviceSynchronize());
    int hi = 0, hm = 0, hc = 0; unsigned long long hu = 0; float hf = 0;
    cudaCheck(cudaMemcpy(&hi, ci, 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&hu, cu, 8, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&hf, cf, 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&hm, mx, 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&hc, cnt, 4, cudaMemcpyDeviceToHost));
    long want = (long)S * G * TPB * IT;
    check(hi == want, "atomicAdd_int_contention", "(%d, want %ld: 4 streams at once)", hi, want);
    check(hu == 3ull * (unsigned long long)want, "atomicAdd_u64_contention", "(%llu, want %llu)", hu, 3ull * (unsigned long long)want);
    check(hf == (float)want, "atomicAdd_float_contention", "(%.1f, want %ld)", hf, want);
    check(hm == G * TPB - 1, "atomicMax", "(%d, want %d)", hm, G * TPB - 1);
    check(hc == S * G * 200, "atomicCAS_lock", "(%d, want %d: a counter under a CAS spin lock)", hc, S * G * 200);
    for (int i = 0; i < S; i++) cudaStreamDestroy(st[i]);
    cudaFree(ci); cudaFree(cu); cudaFree(cf); cudaFree(mx); cudaFree(lock); cudaFree(cnt);
}

static void test_streams_events(void) {
    int *src, *dst, *dst2, *dst3;
    cudaCheck(cudaMalloc(&src, 4)); cudaCheck(cudaMalloc(&dst, 4)); cudaCheck(cudaMalloc(&dst2, 4)); cudaCheck(cudaMalloc(&dst3, 4));
    cudaCheck(cudaMemset(src, 0, 4)); cudaCheck(cudaMemset(dst, 0, 4));
    cudaStream_t A, B, Bl;
    cudaCheck(cudaStreamCreateWithFlags(&A, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&B, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreate(&Bl));   /* blocking: ordered after the legacy stream */
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0)); cudaCheck(cudaEventCreate(&e1));
    /* A: e0, 100 ms, write 4242, e1; B waits e1, copies */
    cudaCheck(cudaEventRecord(e0, A));
    LLMC_LAUNCH(slow_write_kernel, 1, 1, 0, A, src, 4242, 100);
    cudaCheck(cudaEventRecord(e1, A));
    cudaError_t q = cudaEventQuery(e1);
    cudaError_t qs = cudaStreamQuery(A);
    cudaCheck(cudaStreamWaitEvent(B, e1, 0));
    LLMC_LAUNCH(copy_int_kernel, 1, 1, 0, B, dst, src);
    cudaCheck(cudaStreamSynchronize(B));
    int h = 0;
    cudaCheck(cudaMemcpy(&h, dst, 4, cudaMemcpyDeviceToHost));
    check(q == cudaErrorNotReady && qs == cudaErrorNotReady, "event_query_pending", "(cudaEventQuery %d, cudaStreamQuery %d while A sleeps)", (int)q, (int)qs);
    check(h == 4242, "stream_wait_event_orders", "(B read %d, want 4242 written by A after 100 ms)", h);
    check(cudaEventQuery(e1) == cudaSuccess && cudaStreamQuery(A) == cudaSuccess, "event_complete_after_wait", "");
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
    check(ms >= 99.0f && ms < 5000.0f, "event_elapsed_time", "(%.1f ms around a 100 ms kernel)", ms);
    /* the legacy stream: a slow write on stream 0, then a copy on a blocking stream */
    LLMC_LAUNCH(slow_write_kernel, 1, 1, 0, 0, src, 777, 50);
    LLMC_LAUNCH(copy_int_kernel, 1, 1, 0, Bl, dst2, src);
    cudaCheck(cudaStreamSynchronize(Bl));
    cudaCheck(cudaMemcpy(&h, dst2, 4, cudaMemcpyDeviceToHost));
    check(h == 777, "legacy_stream_orders_blocking_stream", "(read %d, want 777)", h);
    /* in order within one stream */
    LLMC_LAUNCH(slow_write_kernel, 1, 1, 0, A, src, 31337, 30);
    LLMC_LAUNCH(copy_int_kernel, 1, 1, 0, A, dst3, src);
    cudaCheck(cudaStreamSynchronize(A));
    cudaCheck(cudaMemcpy(&h, dst3, 4, cudaMemcpyDeviceToHost));
    check(h == 31337, "stream_in_order", "(read %d, want 31337)", h);
    /* without the wait, B's read of A's write is a race: test_stream_race */
    cudaCheck(cudaDeviceSynchronize());
    cudaStreamDestroy(A); cudaStreamDestroy(B); cudaStreamDestroy(Bl);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    cudaFree(src); cudaFree(dst); cudaFree(dst2); cudaFree(dst3);
}

static void test_bf16(void) {
    /* every bf16 -> float is exact: bits << 16 (checked always) */
    std::string ref = std::string(g_self);
    size_t slash = ref.rfind('/');
    ref = (slash == std::string::npos ? std::string(".") : ref.substr(0, slash)) + "/emu_bf16_ref";
    if (access(ref.c_str(), X_OK) != 0) {
        skip("bf16_vs_toolkit", "build/emu_bf16_ref is absent (no /usr/local/cuda/include/cuda_bf16.h)");
        return;
    }
    FILE* p = popen(ref.c_str(), "r");
    std::vector<uint32_t> a(65536);
    std::vector<uint16_t> s((size_t)EMU_BF16_SWEEP_N * 3);
    bool rd = p && fread(a.data(), 4, a.size(), p) == a.size() && fread(s.data(), 2, s.size(), p) == s.size();
    int prc = p ? pclose(p) : -1;
    if (!rd || prc != 0) { check(false, "bf16_vs_toolkit", "(could not read %s's tables, status %d)", ref.c_str(), prc); return; }
    long bad = 0;
    char first[256] = "";
    for (uint32_t b = 0; b < 65536; b++) {
        float f = __bfloat162float(__ushort_as_bfloat16((unsigned short)b));
        float g = __nv_bfloat16(__ushort_as_bfloat16((unsigned short)b));   /* operator float */
        uint32_t u, v;
        memcpy(&u, &f, 4); memcpy(&v, &g, 4);
        if (u != a[b] || v != a[b]) { if (!bad) snprintf(first, sizeof(first), "bf16 0x%04x -> 0x%08x, toolkit 0x%08x", b, u, a[b]); bad++; }
    }
    check(bad == 0, "bf16_to_float_all_65536", "(%ld differ from the toolkit) %s", bad, first);
    long badr[3] = {0, 0, 0};
    first[0] = 0;
    for (uint32_t i = 0; i < EMU_BF16_SWEEP_N; i++) {
        uint32_t u = emu_bf16_sweep(i);
        float f;
        memcpy(&f, &u, 4);
        uint16_t got[3] = {__bfloat16_as_ushort(__float2bfloat16_rn(f)), __bfloat16_as_ushort(__float2bfloat16(f)), 0};
        __nv_bfloat16 c(f);
        got[2] = __bfloat16_as_ushort(c);
        for (int k = 0; k < 3; k++)
            if (got[k] != s[(size_t)i * 3 + k]) {
                if (!badr[0] && !badr[1] && !badr[2])
                    snprintf(first, sizeof(first), "fp32 0x%08x: form %d gives 0x%04x, toolkit 0x%04x", u, k, got[k], s[(size_t)i * 3 + k]);
                badr[k]++;
            }
    }
    check(badr[0] == 0 && badr[1] == 0 && badr[2] == 0, "float_to_bf16_sweep",
          "(%u inputs incl. every tie/NaN/inf/denormal pattern; differ: _rn %ld, __float2bfloat16 %ld, constructor %ld) %s",
          EMU_BF16_SWEEP_N, badr[0], badr[1], badr[2], first);
}

/* ---- cuBLASLt against float64 */
static uint32_t g_lcg = 12345u;
static float urand(void) { g_lcg = g_lcg * 1664525u + 1013904223u; return ((g_lcg >> 8) / 16777216.0f) * 2.0f - 1.0f; }

struct GemmCase { const char* what; int ta, tb, m, n, k, lda, ldb, ldd, batch; long long sA, sB, sD; float alpha, beta; int bias; int lt; };

/* column-major element (i, j) of op(X) for a stored X with ld, transposed t */
static double opel(const std::vector<floatX>& X, size_t off, int t, int i, int j, int ld) {
    return (double)(float)(t ? X[off + j + (size_t)i * ld] : X[off + i + (size_t)j * ld]);
}

static void gemm_case(const GemmCase& c, double* worst) {
    int ra = c.ta ? c.k : c.m, ca = c.ta ? c.m : c.k;     /* stored A rows, cols */
    int rb = c.tb ? c.n : c.k, cb = c.tb ? c.k : c.n;
    size_t nA = (size_t)(c.batch - 1) * c.sA + (size_t)(ca - 1) * c.lda + ra;
    size_t nB = (size_t)(c.batch - 1) * c.sB + (size_t)(cb - 1) * c.ldb + rb;
    size_t nD = (size_t)(c.batch - 1) * c.sD + (size_t)(c.n - 1) * c.ldd + c.m;
    std::vector<floatX> A(nA), B(nB), D0(nD), bias(c.m), D(nD);
    for (auto& x : A) x = __float2bfloat16_rn(urand());
    for (auto& x : B) x = __float2bfloat16_rn(urand());
    for (auto& x : D0) x = __float2bfloat16_rn(urand());
    for (auto& x : bias) x = __float2bfloat16_rn(urand());
    floatX *dA, *dB, *dD, *dbias;
    cudaCheck(cudaMalloc(&dA, nA * 2)); cudaCheck(cudaMalloc(&dB, nB * 2)); cudaCheck(cudaMalloc(&dD, nD * 2)); cudaCheck(cudaMalloc(&dbias, c.m * 2));
    cudaCheck(cudaMemcpy(dA, A.data(), nA * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dB, B.data(), nB * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dD, D0.data(), nD * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dbias, bias.data(), c.m * 2, cudaMemcpyHostToDevice));
    unsigned long long lt0 = gemm_state.lt_calls, fb0 = gemm_state.fallback_calls;
    if (c.lt) {
        gemm_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, dA, c.lda, c.sA, dB, c.ldb, c.sB, c.beta, dD, c.ldd, c.sD, c.batch,
                  c.bias ? dbias : NULL);
    } else {
        cublasCheck(cublasGemmStridedBatchedEx(gemm_state.blas, c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, c.tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                               c.m, c.n, c.k, &c.alpha, dA, CUDA_R_16BF, c.lda, c.sA, dB, CUDA_R_16BF, c.ldb, c.sB,
                                               &c.beta, dD, CUDA_R_16BF, c.ldd, c.sD, c.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    cudaCheck(cudaMemcpy(D.data(), dD, nD * 2, cudaMemcpyDeviceToHost));
    long bad = 0, outside = 0;
    double w = 0;
    char first[256] = "";
    for (int q = 0; q < c.batch; q++)
        for (int j = 0; j < c.n; j++)
            for (int i = 0; i < c.m; i++) {
                double s = 0, sa = 0;
                for (int kk = 0; kk < c.k; kk++) {
                    double x = opel(A, (size_t)q * c.sA, c.ta, i, kk, c.lda) * opel(B, (size_t)q * c.sB, c.tb, kk, j, c.ldb);
                    s += x; sa += fabs(x);
                }
                size_t di = (size_t)q * c.sD + i + (size_t)j * c.ldd;
                double ref = c.alpha * s + (double)c.beta * (float)D0[di] + (c.bias ? (double)(float)bias[i] : 0.0);
                double mag = fabs(c.alpha) * sa + fabs((double)c.beta * (float)D0[di]) + (c.bias ? fabs((double)(float)bias[i]) : 0.0);
                double tol = ldexp(fabs(ref), -8) + (c.k + 2) * ldexp(mag, -24) + 1e-30;
                double err = fabs((double)(float)D[di] - ref);
                if (err / tol > w) w = err / tol;
                if (err > tol) { if (!bad) snprintf(first, sizeof(first), "batch %d (%d,%d): %g vs %.9g", q, i, j, (double)(float)D[di], ref); bad++; }
            }
    /* the gaps between batches and rows past m (ld > m) are untouched */
    std::vector<char> inside(nD, 0);
    for (int q = 0; q < c.batch; q++)
        for (int j = 0; j < c.n; j++)
            for (int i = 0; i < c.m; i++) inside[(size_t)q * c.sD + i + (size_t)j * c.ldd] = 1;
    for (size_t x = 0; x < nD; x++)
        if (!inside[x] && __bfloat16_as_ushort(D[x]) != __bfloat16_as_ushort(D0[x])) outside++;
    bool path = c.lt ? gemm_state.lt_calls == lt0 + 1 : gemm_state.fallback_calls == fb0;
    char nm[128];
    snprintf(nm, sizeof(nm), "gemm_vs_float64 %s", c.what);
    check(bad == 0 && outside == 0 && path, nm, "(m %d n %d k %d batch %d ta %d tb %d beta %g bias %d %s: worst |err|/bound %.3f, %ld over, %ld outside D written) %s",
          c.m, c.n, c.k, c.batch, c.ta, c.tb, c.beta, c.bias, c.lt ? "cublasLtMatmul" : "cublasGemmStridedBatchedEx", w, bad, outside, first);
    if (w > *worst) *worst = w;
    cudaFree(dA); cudaFree(dB); cudaFree(dD); cudaFree(dbias);
}

static void test_gemm(void) {
    int N = 24, C = 40, OC = 56, T = 7, hs = 16, NH = 3, C3 = 3 * NH * hs, Cc = NH * hs;
    GemmCase cases[] = {
        /* matmul_forward: out (OC,N) = weight^T (stored (C,OC)) x inp (C,N) + bias */
        {"matmul_forward", 1, 0, OC, N, C, C, C, OC, 1, 0, 0, 0, 1.0f, 0.0f, 1, 1},
        {"matmul_forward_nobias", 1, 0, OC, N, C, C, C, OC, 1, 0, 0, 0, 1.0f, 0.0f, 0, 1},
        /* matmul_backward dinp (C,N) += weight (C,OC) x dout (OC,N) */
        {"matmul_backward_dinp", 0, 0, C, N, OC, C, OC, C, 1, 0, 0, 0, 1.0f, 1.0f, 0, 1},
        /* dweight (C,OC) += inp (C,N) x dout^T (stored (OC,N)) */
        {"matmul_backward_dweight", 0, 1, C, OC, N, C, OC, C, 1, 0, 0, 0, 1.0f, 1.0f, 0, 1},
        /* attention: pre (T,T) per head = scale k^T q, strided over heads, odd T */
        {"attention_qk", 1, 0, T, T, hs, C3, C3, T, NH, hs, hs, (long long)T * T, 0.25f, 0.0f, 0, 1},
        {"attention_av", 0, 0, hs, T, T, C3, T, Cc, NH, hs, (long long)T * T, hs, 1.0f, 0.0f, 0, 1},
        {"attention_dq", 0, 0, hs, T, T, C3, T, C3, NH, hs, (long long)T * T, hs, 1.0f, 1.0f, 0, 1},
        {"attention_dk", 0, 1, hs, T, T, C3, T, C3, NH, hs, (long long)T * T, hs, 1.0f, 1.0f, 0, 1},
        /* the cuBLAS fallback (LLMC_NO_CUBLASLT=1 or no heuristic result) */
        {"fallback_TN", 1, 0, OC, N, C, C, C, OC, 1, 0, 0, 0, 1.0f, 0.0f, 0, 0},
        {"fallback_NT_batched", 0, 1, hs, T, T, C3, T, C3, NH, hs, (long long)T * T, hs, 1.0f, 1.0f, 0, 0},
    };
    double worst = 0;
    for (const GemmCase& c : cases) gemm_case(c, &worst);
    printf("info cuBLASLt emulation: worst |D - float64| / (2^-8 |ref| + (k+2) 2^-24 sum|ab|) = %.3f over %zu cases\n", worst,
           sizeof(cases) / sizeof(cases[0]));
}

/* ---- launch limits (item 2) */
static cudaError_t launch_err(dim3 g, dim3 b, size_t smem, int* p) {
    (void)cudaGetLastError();
    LLMC_LAUNCH(nop_kernel, g, b, smem, 0, p);
    cudaError_t e = cudaGetLastError();
    cudaDeviceSynchronize();
    return e;
}
static void test_launch_limits(void) {
    int* p;
    cudaCheck(cudaMalloc(&p, 4));
    const cudaError_t ok = cudaSuccess, bad = cudaErrorInvalidConfiguration;
    struct { const char* what; dim3 g, b; size_t smem; cudaError_t want; } cs[] = {
        {"threads_1024", dim3(1), dim3(1024), 0, ok},
        {"threads_1025", dim3(1), dim3(1025), 0, bad},
        {"threads_32x33", dim3(1), dim3(32, 33), 0, bad},
        {"block_z_64", dim3(1), dim3(1, 1, 64), 0, ok},
        {"block_z_65", dim3(1), dim3(1, 1, 65), 0, bad},
        {"block_zero", dim3(1), dim3(0), 0, bad},
        {"grid_x_2^31", dim3(0x80000000u), dim3(1), 0, bad},
        {"grid_y_65535", dim3(1, 65535), dim3(1), 0, ok},
        {"grid_y_65536", dim3(1, 65536), dim3(1), 0, bad},
        {"grid_z_65536", dim3(1, 1, 65536), dim3(1), 0, bad},
        {"grid_zero", dim3(0), dim3(32), 0, bad},
        {"dyn_smem_48k", dim3(1), dim3(32), 48 * 1024, ok},
        {"dyn_smem_48k+1", dim3(1), dim3(32), 48 * 1024 + 1, bad},
    };
    for (auto& c : cs) {
        cudaError_t e = launch_err(c.g, c.b, c.smem, p);
        char nm[64];
        snprintf(nm, sizeof(nm), "launch_limit %s", c.what);
        check(e == c.want, nm, "(grid %u,%u,%u block %u,%u,%u smem %zu: %s, want %s)", c.g.x, c.g.y, c.g.z, c.b.x, c.b.y, c.b.z, c.smem,
              cudaGetErrorName(e), cudaGetErrorName(c.want));
    }
    /* static + dynamic: 40 KiB static + 8 KiB dynamic fits, + 8 KiB + 1 does not */
    (void)cudaGetLastError();
    LLMC_LAUNCH(big_shared_kernel, 1, 64, 8 * 1024, 0, p);
    cudaError_t e1 = cudaGetLastError();
    LLMC_LAUNCH(big_shared_kernel, 1, 64, 8 * 1024 + 1, 0, p);
    cudaError_t e2 = cudaGetLastError();
    cudaCheck(cudaDeviceSynchronize());
    check(e1 == ok && e2 == bad, "launch_limit static+dynamic_48k", "(40 KiB static + 8 KiB: %s; + 8 KiB + 1: %s)", cudaGetErrorName(e1),
          cudaGetErrorName(e2));
    /* the opt-in: cudaFuncSetAttribute raises the dynamic limit up to 227 KiB - static */
    cudaError_t a1 = cudaFuncSetAttribute(nop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);
    cudaError_t l1 = launch_err(dim3(1), dim3(32), 100 * 1024, p);
    cudaError_t l2 = launch_err(dim3(1), dim3(32), 100 * 1024 + 1, p);
    cudaError_t a2 = cudaFuncSetAttribute(nop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
    cudaError_t l3 = launch_err(dim3(1), dim3(32), 227 * 1024, p);
    cudaError_t a3 = cudaFuncSetAttribute(nop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024 + 1);
    cudaError_t a4 = cudaFuncSetAttribute(big_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024 - 40 * 1024 + 1);
    check(a1 == ok && l1 == ok && l2 == bad && a2 == ok && l3 == ok && a3 == cudaErrorInvalidValue && a4 == cudaErrorInvalidValue,
          "launch_limit cudaFuncSetAttribute_optin",
          "(set 100 KiB %d, launch 100 KiB %d, +1 %d, set 227 KiB %d, launch 227 KiB %d, set 227 KiB + 1 %d, 40 KiB static + 187 KiB + 1 %d)",
          (int)a1, (int)l1, (int)l2, (int)a2, (int)l3, (int)a3, (int)a4);
    cudaFree(p);
}

/* the cross-stream race check (emu_streamrace.h): an unordered write/read
   pair on two streams is an error naming both operations and streams, even
   when the clock happened to order them; cudaStreamWaitEvent, a host
   synchronisation and the legacy stream's implicit one order them */
static void test_stream_race(void) {
    expect_error("race_kernels", {"race between streams", "copy_int_kernel (its pointer argument 2) on stream 2 reads",
                                  "slow_write_kernel (its pointer argument 1) on stream 1, enqueued earlier, writes", "cudaStreamWaitEvent"});
    expect_error("race_kernels_late", {"race between streams", "copy_int_kernel", "slow_write_kernel"});
    expect_error("race_memcpy", {"race between streams", "cudaMemcpyAsync (the destination) on stream 2 writes bytes [0, 16)",
                                 "copy_int_kernel (its pointer argument 2) on stream 1, enqueued earlier, reads"});
    expect_error("race_legacy_nonblocking", {"race between streams", "copy_int_kernel", "on stream 0 reads", "slow_write_kernel"});
    expect_clean("race_kernels_waited");
    expect_clean("race_stream_sync");
    expect_clean("race_event_sync");
    expect_clean("race_read_read");
    expect_clean("race_legacy_blocking");
}

static void test_shared(void) {
    size_t sz = emu::kernel_static_smem((const void*)sized_shared_kernel);
    check(sz == 32 * 4 + 16 * 4 + 8, "shared_static_size", "(%zu bytes, want 200: float[32], float[16], double)", sz);
    unsigned* u;
    cudaCheck(cudaMalloc(&u, 2 * 64 * 4));
    LLMC_LAUNCH(stale_shared_kernel, 2, 64, 0, 0, u);
    cudaCheck(cudaGetLastError());
    std::vector<unsigned> h(128);
    cudaCheck(cudaMemcpy(h.data(), u, 128 * 4, cudaMemcpyDeviceToHost));
    int b0 = 0, b1 = 0;
    for (int t = 0; t < 64; t++) { b0 += h[t] == 1234u; b1 += h[64 + t] == 0xffffffffu; }
    check(b0 == 64 && b1 == 64, "shared_refilled_per_block", "(block 0 read its 1234 in %d/64 threads; block 1, which wrote nothing, read 0xffffffff garbage in %d/64)", b0, b1);
    int* x;
    const int G = 6;
    cudaCheck(cudaMalloc(&x, G * 256 * 4));
    /* the same kernel on two streams at once: one object per running block */
    cudaStream_t s1, s2;
    cudaCheck(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    int* y;
    cudaCheck(cudaMalloc(&y, G * 256 * 4));
    LLMC_LAUNCH(shared_exchange_kernel, G, 256, 0, s1, x);
    LLMC_LAUNCH(shared_exchange_kernel, G, 256, 0, s2, y);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<int> hx(G * 256), hy(G * 256);
    cudaCheck(cudaMemcpy(hx.data(), x, hx.size() * 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int bI = 0; bI < G; bI++)
        for (int t = 0; t < 256; t++) {
            int want = bI * 1000 + 255 - t;
            bad += hx[bI * 256 + t] != want;
            bad += hy[bI * 256 + t] != want;
        }
    check(bad == 0, "shared_one_object_per_block", "(%d of %d wrong: 6 blocks x 256 threads exchange through __shared__, one grid on each of 2 streams)", bad, 2 * G * 256);
    cudaStreamDestroy(s1); cudaStreamDestroy(s2);
    cudaFree(u); cudaFree(x); cudaFree(y);
}

int main(int argc, char** argv) {
    g_self = argv[0];
    if (argc == 3 && !strcmp(argv[1], "child")) return child(argv[2]);
    double t0 = cuda_host_seconds();
    printf("test_emu: the emulated CUDA device's checks (LLMC_EMU_SEED=%llu)\n", (unsigned long long)emu::seed_value());
    test_barrier_and_masks();
    test_shuffles();
    test_atomics();
    test_streams_events();
    test_stream_race();
    test_bf16();
    test_gemm();
    test_launch_limits();
    test_shared();
    test_races();
    printf("time %.1f s\n", cuda_host_seconds() - t0);
    printf("%d passed, %d failed, %d skipped\n", g_pass, g_fail, g_skip);
    return g_fail ? 1 : 0;
}
