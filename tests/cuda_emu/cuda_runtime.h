/*
 tests/cuda_emu/cuda_runtime.h: the CUDA runtime of the emulated device
 (issue 47): the calls the trainer, test_gpt and dev/cuda make, with the
 semantics the CUDA runtime documents, on the CPU (emu_core.h, emu_kernel.h).

   cudaMalloc / cudaMallocAsync: 256-byte aligned, filled with 0xFF bytes (a
     NaN in fp32 and bf16: a read before any write shows); exact size (an
     ASan build catches one byte past the end). cudaFree synchronises the
     device, as CUDA's does.
   cudaMemcpy*: the kind is checked against where each pointer came from
     (cudaMemcpyHostToDevice needs a device destination and a host source,
     ...); a wrong kind is an error naming the call. cudaMemcpy is
     synchronous on the legacy stream; the Async forms run on the stream.
   streams and events: emu_core.h. Errors: the launch configuration errors
     are returned by cudaGetLastError (and cleared), as CUDA does.
*/
#ifndef LLMC_CUDA_EMU_RUNTIME_H
#define LLMC_CUDA_EMU_RUNTIME_H

#include "emu_kernel.h"

#ifdef LLMC_EMU_GCOV
/* gcov (emu.mk's EMU_COVERAGE=1) writes a program's counts at exit(); a
   fatal error ends the rank with _exit or MPI_Abort, which skip that. The
   build links with -Wl,--wrap=_exit (and --wrap=MPI_Abort, see nccl.h), so
   those paths write their counts first and the coverage of the suite's
   error checks is measured. */
extern "C" void __gcov_dump(void);
extern "C" void __real__exit(int);
extern "C" void __wrap__exit(int status) { __gcov_dump(); __real__exit(status); }
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef emu::Stream* cudaStream_t;
typedef emu::Event* cudaEvent_t;
struct CUuuid_st { char bytes[16]; };
typedef CUuuid_st cudaUUID_t;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaFuncAttributeMaxDynamicSharedMemorySize 8

struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock, warpSize, maxThreadsPerBlock;
    int maxThreadsDim[3], maxGridSize[3];
    int multiProcessorCount, major, minor;
    size_t sharedMemPerBlockOptin;
};

namespace emu {
inline int device_count() {
    static int n = [] { const char* e = getenv("LLMC_EMU_DEVICES"); int v = e ? atoi(e) : 8; return v < 0 ? 0 : v; }();
    return n;
}
inline thread_local int t_device = 0;
inline const size_t kTotalMem = (size_t)80 << 30;
inline const char* kind_name(int k) { return k == MEM_DEVICE ? "device memory" : k == MEM_HOST_PINNED ? "pinned host memory" : "pageable host memory"; }

/* a copy's kind against the pointers: 0 if consistent, else a message */
inline bool copy_check(const char* call, void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return true;
    int kd = mem_kind(dst), ks = mem_kind(src);
    bool ddev = kd == MEM_DEVICE, sdev = ks == MEM_DEVICE;
    bool ok = true;
    switch (kind) {
        case cudaMemcpyHostToDevice: ok = ddev && !sdev; break;
        case cudaMemcpyDeviceToHost: ok = !ddev && sdev; break;
        case cudaMemcpyDeviceToDevice: ok = ddev && sdev; break;
        case cudaMemcpyHostToHost: ok = !ddev && !sdev; break;
        case cudaMemcpyDefault: ok = true; break;
        default: fail("%s: unknown cudaMemcpyKind %d", call, (int)kind);
    }
    if (!ok)
        fail("%s of %zu bytes: kind %s but the destination %p is %s and the source %p is %s", call, n,
             kind == 1 ? "cudaMemcpyHostToDevice" : kind == 2 ? "cudaMemcpyDeviceToHost" : kind == 3 ? "cudaMemcpyDeviceToDevice" : "cudaMemcpyHostToHost",
             dst, kind_name(kd), src, kind_name(ks));
    /* bounds of the device side (what the GPU's MMU would fault on) */
    size_t off = 0, sz = 0;
    if (ddev && mem_kind(dst, &off, &sz) && off + n > sz)
        fail("%s of %zu bytes writes past the end of a %zu-byte device allocation (offset %zu)", call, n, sz, off);
    if (sdev && mem_kind(src, &off, &sz) && off + n > sz)
        fail("%s of %zu bytes reads past the end of a %zu-byte device allocation (offset %zu)", call, n, sz, off);
    return true;
}
} /* namespace emu */

inline const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    }
    return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        default: return "unknown error";
    }
}
inline cudaError_t cudaGetLastError(void) { cudaError_t e = (cudaError_t)emu::t_last_error; emu::t_last_error = 0; return e; }
inline cudaError_t cudaPeekAtLastError(void) { return (cudaError_t)emu::t_last_error; }

inline cudaError_t cudaGetDeviceCount(int* n) {
    *n = emu::device_count();
    return *n ? cudaSuccess : cudaErrorNoDevice;
}
inline cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= emu::device_count()) return cudaErrorInvalidDevice;
    emu::t_device = d;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) { *d = emu::t_device; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d < 0 || d >= emu::device_count()) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "emulated device %d (tests/cuda_emu, CPU)", d);
    p->uuid.bytes[0] = (char)0xE0; p->uuid.bytes[15] = (char)d;
    p->totalGlobalMem = emu::kTotalMem;
    p->sharedMemPerBlock = 48 * 1024; p->sharedMemPerBlockOptin = 227 * 1024;
    p->regsPerBlock = 65536; p->warpSize = 32; p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->multiProcessorCount = 132; p->major = 9; p->minor = 0;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* fr, size_t* total) {
    size_t used = emu::device_bytes().load();
    *total = emu::kTotalMem;
    *fr = used < emu::kTotalMem ? emu::kTotalMem - used : 0;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize(void) { emu::device_sync(); return cudaSuccess; }

/* ---- memory */
inline cudaError_t cudaMalloc(void** p, size_t n) {
    *p = emu::mem_alloc(n, emu::MEM_DEVICE, 0xFF);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <typename T> inline cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc((void**)p, n); }
inline cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    emu::device_sync();
    if (!emu::mem_free(p, emu::MEM_DEVICE)) emu::fail("cudaFree(%p): not a pointer cudaMalloc returned (or freed twice)", p);
    return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t s) {
    (void)s;
    *p = emu::mem_alloc(n, emu::MEM_DEVICE, 0xFF);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <typename T> inline cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t s) { return cudaMallocAsync((void**)p, n, s); }
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
    if (!p) return cudaSuccess;
    if (emu::mem_kind(p) != emu::MEM_DEVICE) emu::fail("cudaFreeAsync(%p): not device memory", p);
    emu::race_op1(s, "cudaFreeAsync", p, (size_t)-1, true, "the freed allocation");
    emu::enqueue(s, [p] { if (!emu::mem_free(p, emu::MEM_DEVICE)) emu::fail("cudaFreeAsync(%p): freed twice", p); });
    return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t n) {
    *p = emu::mem_alloc(n, emu::MEM_HOST_PINNED, 0xFF);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <typename T> inline cudaError_t cudaMallocHost(T** p, size_t n) { return cudaMallocHost((void**)p, n); }
inline cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    emu::device_sync();
    if (!emu::mem_free(p, emu::MEM_HOST_PINNED)) emu::fail("cudaFreeHost(%p): not a pointer cudaMallocHost returned", p);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s = 0) {
    emu::copy_check("cudaMemcpyAsync", dst, src, n, kind);
    emu::race_copy("cudaMemcpyAsync", s, dst, src, n);
    if (n) emu::enqueue(s, [=] { memcpy(dst, src, n); emu::note_device_write(dst, n); });
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    emu::copy_check("cudaMemcpy", dst, src, n, kind);
    emu::race_copy("cudaMemcpy", nullptr, dst, src, n);
    if (n) emu::enqueue(nullptr, [=] { memcpy(dst, src, n); emu::note_device_write(dst, n); });
    emu::stream_sync(nullptr);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s = 0) {
    size_t off = 0, sz = 0;
    if (n && emu::mem_kind(p, &off, &sz) != emu::MEM_DEVICE) emu::fail("cudaMemsetAsync(%p, %zu bytes): not device memory", p, n);
    if (n && off + n > sz) emu::fail("cudaMemsetAsync of %zu bytes past the end of a %zu-byte allocation (offset %zu)", n, sz, off);
    if (n) emu::race_op1(s, "cudaMemsetAsync", p, n, true, "the destination");
    if (n) emu::enqueue(s, [=] { memset(p, v, n); });   /* 0xFF: poisoning, still never written (emu_race.h) */
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) {
    cudaMemsetAsync(p, v, n, nullptr);
    emu::stream_sync(nullptr);
    return cudaSuccess;
}

/* ---- streams */
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    *s = emu::new_stream(!(flags & cudaStreamNonBlocking));
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int prio) {
    (void)prio;
    return cudaStreamCreateWithFlags(s, flags);
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) { if (s) emu::stream_sync(s); return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { emu::stream_sync(s); return cudaSuccess; }
inline cudaError_t cudaStreamQuery(cudaStream_t s) { return emu::stream_idle(s) ? cudaSuccess : cudaErrorNotReady; }

/* ---- events */
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    *e = new emu::Event();
    (*e)->timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e) return cudaErrorInvalidResourceHandle;
    /* CUDA allows destroying an event whose record is pending: keep it */
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0) {
    if (!e) return cudaErrorInvalidResourceHandle;
    emu::Stream* st = s ? s : emu::legacy_stream();
    /* the mark op; its completion time is the event's time */
    double* stamp = &e->t;
    emu::race_event_record(e, st);
    uint64_t idx = emu::enqueue(st, nullptr, {}, stamp);
    std::lock_guard<std::mutex> g(emu::q_mutex());
    e->s = st;
    e->idx = idx;
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e) return cudaErrorInvalidResourceHandle;
    bool done;
    { std::lock_guard<std::mutex> g(emu::q_mutex()); done = !e->s || e->s->done >= e->idx; }
    if (done) emu::race_host_acquire_event(e);
    return done ? cudaSuccess : cudaErrorNotReady;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return cudaErrorInvalidResourceHandle;
    std::unique_lock<std::mutex> lk(emu::q_mutex());
    emu::Stream* s = e->s;
    uint64_t idx = e->idx;
    if (s) emu::q_cv().wait(lk, [&] { return s->done >= idx; });
    lk.unlock();
    emu::race_host_acquire_event(e);
    return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0) {
    (void)flags;
    if (!e) return cudaErrorInvalidResourceHandle;
    emu::Stream* es;
    uint64_t idx;
    { std::lock_guard<std::mutex> g(emu::q_mutex()); es = e->s; idx = e->idx; }
    if (!es) return cudaSuccess;   /* never recorded: nothing to wait for */
    emu::race_stream_wait(s, e);
    emu::enqueue(s, nullptr, {emu::Dep{es, idx}});
    return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a || !b || !a->timing || !b->timing) return cudaErrorInvalidResourceHandle;
    if (cudaEventQuery(a) != cudaSuccess || cudaEventQuery(b) != cudaSuccess) return cudaErrorNotReady;
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

template <typename F> inline cudaError_t cudaFuncSetAttribute(F* k, int attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    /* the attribute + the kernel's static shared memory <= sharedMemPerBlockOptin */
    if (value < 0 || (size_t)value + emu::kernel_static_smem((const void*)k) > emu::kSmemOptin) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> g(emu::attr_mutex());
    emu::kernel_attrs()[(const void*)k].max_dyn_smem = value;
    return cudaSuccess;
}

/* the one launch macro of the CUDA sources (llmc/cuda/common.cuh) */
#define LLMC_LAUNCH(kernel, grid, block, smem, stream, ...) \
    ::emu::launch(#kernel, kernel, dim3(grid), dim3(block), (size_t)(smem), (cudaStream_t)(stream), __VA_ARGS__)

#endif /* LLMC_CUDA_EMU_RUNTIME_H */
