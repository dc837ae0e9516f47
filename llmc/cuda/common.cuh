/*
 cuda/common.cuh: what every CUDA kernel header of the trainer shares.

   - floatX = __nv_bfloat16 (2 bytes): parameters, gradients and activations
     are stored in bf16; every kernel computes and accumulates in fp32 and
     rounds once when it stores (round to nearest even, __float2bfloat16_rn).
   - the compute stream (cuda_ctx.stream): EVERY kernel, memset and copy of
     the trainer is enqueued on it, so they run in program order without any
     host synchronisation. It is 0 (the legacy default stream) until
     backend_init() creates the real one; the dev/cuda benchmarks use 0.
   - error handling: cudaCheck(call) turns any CUDA error into ONE line naming
     the call, file and line, then cuda_fatal(): the trainer installs a hook
     that calls comm_fatal (MPI_Abort, every rank ends); without the hook
     (dev/cuda programs) it prints and exits.
   - stream-ordered scratch (cuda_scratch): grow-only device buffers that some
     kernels need beyond their arguments (partial sums of the column
     reductions, the token sort of encoder_backward). They are backend
     internals, outside the memory ledger; backend_peak_process_bytes()
     (device used memory) sees them.
   - 16-byte packs of 8 bf16 for the vectorised paths, warp / block reductions,
     and host-side fp32 <-> bf16 conversions (round to nearest even).

 Vectorised kernels take the 8-wide path only when every pointer is 16-byte
 aligned and the row length is a multiple of 8; otherwise they fall back to
 one element per thread, so every size (odd T in sampling, any C) works.
*/
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <cuda_runtime.h>

/* LLMC_LAUNCH(kernel, grid, block, smem, stream, args...): every kernel launch
   of the CUDA sources. Under nvcc it is kernel<<<grid, block, smem, stream>>>
   (args...); the emulated device (tests/cuda_emu/cuda_runtime.h, make emu)
   defines it first as its own launch, which runs the same kernel on the CPU.
   LLMC_CUDA: the CUDA build (nvcc or the emulated device). */
#ifndef LLMC_CUDA
#define LLMC_CUDA 1
#endif
#ifndef LLMC_LAUNCH
#define LLMC_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#include <math.h>
#include <sched.h>
#include <time.h>

#ifndef FLOATX_DEFINED
#define FLOATX_DEFINED
typedef __nv_bfloat16 floatX;
#endif
#ifndef FLOATX_BYTES
#define FLOATX_BYTES 2
#endif
static_assert(sizeof(floatX) == 2, "the CUDA backend stores floatX as bf16: include llmc/cuda/backend.cuh first");

/* ------------------------------------------------------------------------ */
/* errors                                                                   */

/* Called with the one-line message of a fatal CUDA/cuBLAS/NCCL error; must
   not return (the trainer's hook calls comm_fatal -> MPI_Abort). */
typedef void (*cuda_fatal_hook_t)(const char* msg);
static cuda_fatal_hook_t cuda_fatal_hook = NULL;

static void cuda_fatal(const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (cuda_fatal_hook) cuda_fatal_hook(msg);
    fprintf(stderr, "error: %s\n", msg);
    fflush(stderr);
    exit(1);
}

static inline void cuda_check_(cudaError_t e, const char* call, const char* file, int line) {
    if (e != cudaSuccess)
        cuda_fatal("CUDA error %s (%s) in %s at %s:%d", cudaGetErrorName(e), cudaGetErrorString(e), call, file, line);
}
#define cudaCheck(call) cuda_check_((call), #call, __FILE__, __LINE__)
/* after a kernel launch: launch-configuration errors are reported at once,
   faults inside the kernel at the next synchronising call */
#define cudaCheckLaunch(kernel_name) cuda_check_(cudaGetLastError(), kernel_name, __FILE__, __LINE__)

/* ------------------------------------------------------------------------ */
/* context: compute stream, device facts, scratch                           */

enum { SCRATCH_PARTIALS = 0, /* fp32 partial sums of column reductions */
       SCRATCH_NORM,         /* double partials of sum_squares */
       SCRATCH_SORT_KEYS,    /* encoder_backward: sorted token ids + row ids */
       SCRATCH_SORT_TEMP,    /* encoder_backward: CUB radix-sort temp storage */
       SCRATCH_NUM };

typedef struct {
    cudaStream_t stream;           /* compute stream (0 = legacy default until backend_init) */
    int device, num_sms;
    void* scratch[SCRATCH_NUM];
    size_t scratch_bytes[SCRATCH_NUM];
    unsigned long long internal_bytes; /* scratch + cuBLAS workspace: outside the ledger */
} CudaContext;
static CudaContext cuda_ctx;

/* A device buffer of at least `bytes` for scratch slot `slot`, valid for
   work enqueued on the compute stream from now on. Grows (never shrinks)
   with stream-ordered cudaFreeAsync / cudaMallocAsync, so growing never
   synchronises and never frees memory a queued kernel still uses. */
static void* cuda_scratch(int slot, size_t bytes) {
    if (bytes <= cuda_ctx.scratch_bytes[slot] && cuda_ctx.scratch[slot]) return cuda_ctx.scratch[slot];
    if (cuda_ctx.scratch[slot]) {
        cudaCheck(cudaFreeAsync(cuda_ctx.scratch[slot], cuda_ctx.stream));
        cuda_ctx.internal_bytes -= cuda_ctx.scratch_bytes[slot];
    }
    size_t nb = bytes + bytes / 4;
    nb = (nb + 65535) / 65536 * 65536;
    void* p = NULL;
    cudaCheck(cudaMallocAsync(&p, nb, cuda_ctx.stream));
    cuda_ctx.scratch[slot] = p;
    cuda_ctx.scratch_bytes[slot] = nb;
    cuda_ctx.internal_bytes += nb;
    return p;
}

/* Host waits for the GPU. Without a hook (the dev/cuda programs) they block
   in cudaStreamSynchronize / cudaEventSynchronize. The trainer's backend
   installs cuda_poll_hook: the waits then poll (cudaStreamQuery /
   cudaEventQuery, yielding, then sleeping 20 us between polls) and call the
   hook every 256 polls with the seconds waited so far; the hook ends the run
   on an asynchronous NCCL error (a peer that died) or a timeout instead of
   letting it hang. */
typedef void (*cuda_poll_hook_t)(double waited_seconds);
static cuda_poll_hook_t cuda_poll_hook = NULL;

static double cuda_host_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* polls until query() says done; stream or event */
static void cuda_poll_wait(cudaStream_t s, cudaEvent_t ev) {
    double t0 = cuda_host_seconds();
    for (unsigned long spins = 1;; spins++) {
        cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(s);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady)
            cuda_check_(e, ev ? "cudaEventQuery (waiting for the GPU)" : "cudaStreamQuery (waiting for the GPU)",
                        __FILE__, __LINE__);
        (void)cudaGetLastError(); /* NotReady is not an error */
        if (spins % 256 == 0) cuda_poll_hook(cuda_host_seconds() - t0);
        if (spins > 2000) {
            struct timespec ts = {0, 20000}; /* 20 us */
            nanosleep(&ts, NULL);
        } else {
            sched_yield();
        }
    }
}

/* Host waits until every operation queued on stream s is complete. */
static void cuda_wait_stream(cudaStream_t s) {
    if (cuda_poll_hook) cuda_poll_wait(s, NULL);
    else cudaCheck(cudaStreamSynchronize(s));
}
/* Host waits until the work before event ev's record is complete. */
static void cuda_wait_event(cudaEvent_t ev) {
    if (cuda_poll_hook) cuda_poll_wait(NULL, ev);
    else cudaCheck(cudaEventSynchronize(ev));
}
static void cuda_wait_compute(void) { cuda_wait_stream(cuda_ctx.stream); }

static inline unsigned int cdiv_u(size_t a, size_t b) { return (unsigned int)((a + b - 1) / b); }

/* 1 if p is 16-byte aligned (NULL counts as aligned). */
static inline int aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

/* ------------------------------------------------------------------------ */
/* device helpers                                                           */

/* 8 bf16 in one 16-byte load/store; p must be 16-byte aligned (a GPU
   traps on a misaligned 128-bit access: "misaligned address").
   LLMC_CHECK_ALIGN16(p, what): nothing under nvcc; the emulated device
   (tests/cuda_emu/cuda_runtime.h) defines it as a check that names the
   kernel, because x86 would tolerate the misaligned access. */
struct alignas(16) bf16x8 { __nv_bfloat16 v[8]; };
#ifndef LLMC_CHECK_ALIGN16
#define LLMC_CHECK_ALIGN16(p, what) ((void)0)
#endif

__device__ __forceinline__ void load8(float* f, const floatX* p) {
    LLMC_CHECK_ALIGN16(p, "load8");
    bf16x8 x = *reinterpret_cast<const bf16x8*>(p);
#pragma unroll
    for (int i = 0; i < 8; i++) f[i] = __bfloat162float(x.v[i]);
}
__device__ __forceinline__ void store8(floatX* p, const float* f) {
    bf16x8 x;
#pragma unroll
    for (int i = 0; i < 8; i++) x.v[i] = __float2bfloat16_rn(f[i]);
    LLMC_CHECK_ALIGN16(p, "store8");
    *reinterpret_cast<bf16x8*>(p) = x;
}
__device__ __forceinline__ float bf(floatX x) { return __bfloat162float(x); }
__device__ __forceinline__ floatX tobf(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
   gets the result. Fixed order: deterministic. `sh` holds 32 values. */
__device__ __forceinline__ double block_sum_d(double v, double* sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return warp_sum_d(v);
}

/* ------------------------------------------------------------------------ */
/* host conversions (round to nearest even; NaN stays NaN)                  */

static inline uint16_t host_float_to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float host_bf16_bits_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif /* LLMC_CUDA_COMMON_CUH */
