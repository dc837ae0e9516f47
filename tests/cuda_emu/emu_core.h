/*
 tests/cuda_emu/emu_core.h: the emulated CUDA device's core (issue 47).

 What the stand-in headers of tests/cuda_emu (cuda_runtime.h, cuda_bf16.h,
 cublasLt.h, cublas_v2.h, nccl.h, cub/) share, header-only (each emulated
 program is one translation unit compiled with g++ -std=c++17):

   - errors: emu_fail() prints ONE line "cuda emu: <what> (LLMC_EMU_SEED=<s>
     reruns this schedule)" and ends the process with status 86.
   - the seed: LLMC_EMU_SEED, else one drawn from the clock and the pid
     (different per rank); every random delay and thread order derives from it.
   - device memory registry: every cudaMalloc / cudaMallocAsync /
     cudaMallocHost allocation with its size and kind, so that copies are
     checked against where each pointer came from.
   - streams: each a worker thread that runs its queue in order, with a
     seeded random delay (0..LLMC_EMU_DELAY_US microseconds, default 200,
     before one operation in four); the legacy default stream synchronises
     with every blocking stream as CUDA's does; events are completion marks
     (stream, index of the operation); cudaStreamWaitEvent is a real
     dependency of the waiting stream's later operations.
   - kernels: every thread of a block is a fiber (Boost.Context fcontext, a
     64 KiB stack with a guard page below it); the block's scheduler runs
     the fibers until each waits at a barrier or a warp intrinsic or ends,
     then checks and releases: __syncthreads needs every live thread of the
     block at the same call site; a warp intrinsic needs every lane its mask
     names at the same call site with the same mask. Threads resume after a
     barrier in a seeded random order.
*/
#ifndef LLMC_CUDA_EMU_CORE_H
#define LLMC_CUDA_EMU_CORE_H

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include <time.h>
#include <sys/mman.h>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <boost/context/detail/fcontext.hpp>

namespace emu {

/* ---------------------------------------------------------------- errors, seed */

inline uint64_t seed_value() {
    static uint64_t s = [] {
        const char* e = getenv("LLMC_EMU_SEED");
        if (e && *e) return (uint64_t)strtoull(e, NULL, 10);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t v = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
        return (uint64_t)(v % 1000000007ull);
    }();
    return s;
}

[[noreturn]] inline void fail(const char* fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda emu: error: %s (LLMC_EMU_SEED=%llu reruns this schedule)\n", msg,
            (unsigned long long)seed_value());
    fflush(stderr);
    fflush(stdout);
    _exit(86);
}

/* splitmix64: the seeded generator of delays and orders */
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed = 1) : s(seed) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    uint32_t below(uint32_t n) { return n ? (uint32_t)(next() % n) : 0; }
};

/* ---------------------------------------------------------------- memory registry */

/* the cross-stream race check's hooks (emu_streamrace.h, included below) */
struct Stream;
inline void race_forget(const void* base);
inline void race_host_acquire_stream(Stream* s);

enum MemKind { MEM_DEVICE = 1, MEM_HOST_PINNED = 2 };
struct Alloc { size_t size; int kind; };

inline std::mutex& mem_mutex() { static std::mutex m; return m; }
inline std::map<uintptr_t, Alloc>& mem_map() { static std::map<uintptr_t, Alloc> m; return m; }
inline std::atomic<size_t>& device_bytes() { static std::atomic<size_t> b{0}; return b; }

/* the kind of allocation p points into (0: not ours, i.e. pageable host memory) */
inline int mem_kind(const void* p, size_t* base_off = nullptr, size_t* size = nullptr) {
    std::lock_guard<std::mutex> g(mem_mutex());
    auto& m = mem_map();
    auto it = m.upper_bound((uintptr_t)p);
    if (it == m.begin()) return 0;
    --it;
    uintptr_t a = (uintptr_t)p;
    if (a >= it->first && a < it->first + (it->second.size ? it->second.size : 1)) {
        if (base_off) *base_off = a - it->first;
        if (size) *size = it->second.size;
        return it->second.kind;
    }
    return 0;
}
inline void* mem_alloc(size_t bytes, int kind, int fill) {
    void* p = nullptr;
    if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return nullptr;
    memset(p, fill, bytes);
    std::lock_guard<std::mutex> g(mem_mutex());
    mem_map()[(uintptr_t)p] = Alloc{bytes, kind};
    if (kind == MEM_DEVICE) device_bytes() += bytes;
    return p;
}
inline bool mem_free(void* p, int kind) {
    if (!p) return true;
    {
        std::lock_guard<std::mutex> g(mem_mutex());
        auto it = mem_map().find((uintptr_t)p);
        if (it == mem_map().end() || it->second.kind != kind) return false;
        if (kind == MEM_DEVICE) device_bytes() -= it->second.size;
        mem_map().erase(it);
    }
    race_forget(p);
    free(p);
    return true;
}

/* ---------------------------------------------------------------- never-written reads */

/* cudaMalloc fills with 0xFF bytes; no computation stores an element whose
   bytes are all 0xFF (bf16 0xffff and fp32 0xffffffff are NaNs with every
   payload bit set: the conversions make 0x7fff / quiet NaNs of the inputs).
   So an operand element of all-0xFF bytes that a cuBLAS(Lt) or NCCL call
   reads is device memory nothing wrote (or a copy of it): an error naming
   the call, the operand and the element. LLMC_EMU_UNWRITTEN=0 turns the
   check off. elem: bytes per element (>= 2). */
inline bool unwritten_check_on() {
    static bool on = [] { const char* e = getenv("LLMC_EMU_UNWRITTEN"); return !(e && e[0] == '0'); }();
    return on;
}
inline bool all_ff(const void* p, size_t elem) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < elem; i++) if (b[i] != 0xFF) return false;
    return true;
}
inline void check_written(const char* call, const char* what, const void* p, size_t count, size_t elem) {
    if (!unwritten_check_on() || elem < 2) return;
    for (size_t i = 0; i < count; i++)
        if (all_ff((const char*)p + i * elem, elem))
            fail("%s reads %s element %zu of %zu (%p), whose bytes are all 0xFF, the fill of cudaMalloc: device memory read before anything wrote it",
                 call, what, i, count, (const void*)((const char*)p + i * elem));
}

/* ---------------------------------------------------------------- streams */

struct Stream;
struct Dep { Stream* s; uint64_t idx; };
struct Op {
    std::function<void()> fn;
    std::vector<Dep> deps;
    double* stamp = nullptr;   /* event time stamp written when the op runs */
};

inline double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* one global lock for queue state and completions (simple and race-free:
   the operations themselves run outside it) */
inline std::mutex& q_mutex() { static std::mutex* m = new std::mutex; return *m; }  /* never destroyed: workers wait on it at exit */
inline std::condition_variable& q_cv() { static std::condition_variable* c = new std::condition_variable; return *c; }

inline int delay_us_max() {
    static int d = [] { const char* e = getenv("LLMC_EMU_DELAY_US"); return e ? atoi(e) : 200; }();
    return d;
}

struct Stream {
    int id;
    bool blocking;     /* not cudaStreamNonBlocking: synchronises with the legacy stream */
    bool legacy;       /* the legacy default stream (0) */
    std::deque<Op> q;
    uint64_t enq = 0;  /* operations enqueued */
    uint64_t done = 0; /* operations complete */
    bool stop = false;
    std::thread th;
    Rng rng;
    Stream(int id_, bool blocking_, bool legacy_) : id(id_), blocking(blocking_), legacy(legacy_),
        rng(seed_value() * 1000003ull + (uint64_t)id_ * 7919ull + 17) {
        th = std::thread([this] { run(); });
    }
    void run();
};

inline std::vector<Stream*>& all_streams() { static std::vector<Stream*> v; return v; }
inline std::atomic<int>& stream_ids() { static std::atomic<int> n{0}; return n; }
inline Stream* legacy_stream() {
    static Stream* s = [] {
        std::lock_guard<std::mutex> g(q_mutex());
        Stream* st = new Stream(stream_ids()++, true, true);
        all_streams().push_back(st);
        return st;
    }();
    return s;
}
inline Stream* new_stream(bool blocking) {
    legacy_stream();
    std::lock_guard<std::mutex> g(q_mutex());
    Stream* st = new Stream(stream_ids()++, blocking, false);
    all_streams().push_back(st);
    return st;
}

inline void Stream::run() {
    for (;;) {
        Op op;
        {
            std::unique_lock<std::mutex> lk(q_mutex());
            q_cv().wait(lk, [&] {
                if (stop) return true;
                if (q.empty()) return false;
                for (const Dep& d : q.front().deps) if (d.s->done < d.idx) return false;
                return true;
            });
            if (stop && q.empty()) return;
            op = std::move(q.front());
            q.pop_front();
        }
        int dmax = delay_us_max();
        if (dmax > 0 && rng.below(4) == 0) {
            struct timespec ts = {0, (long)rng.below((uint32_t)dmax + 1) * 1000};
            nanosleep(&ts, NULL);
        }
        if (op.fn) op.fn();
        if (op.stamp) *op.stamp = now_s();
        {
            std::lock_guard<std::mutex> g(q_mutex());
            done++;
        }
        q_cv().notify_all();
    }
}

/* enqueue fn on s (nullptr: the legacy stream) after deps; returns the
   operation's index (1-based: complete when s->done >= index) */
inline uint64_t enqueue(Stream* s, std::function<void()> fn, std::vector<Dep> deps = {}, double* stamp = nullptr) {
    if (!s) s = legacy_stream();
    std::lock_guard<std::mutex> g(q_mutex());
    /* the legacy stream waits for every blocking stream, and every blocking
       stream waits for the legacy stream (CUDA's implicit synchronisation) */
    if (s->legacy) {
        for (Stream* o : all_streams()) if (o != s && o->blocking && o->enq > o->done) deps.push_back(Dep{o, o->enq});
    } else if (s->blocking) {
        Stream* l = all_streams()[0];
        if (l->enq > l->done) deps.push_back(Dep{l, l->enq});
    }
    Op op;
    op.fn = std::move(fn);
    op.deps = std::move(deps);
    op.stamp = stamp;
    s->q.push_back(std::move(op));
    uint64_t idx = ++s->enq;
    q_cv().notify_all();
    return idx;
}

inline bool stream_idle(Stream* s) {
    if (!s) s = legacy_stream();
    bool idle;
    { std::lock_guard<std::mutex> g(q_mutex()); idle = s->done >= s->enq; }
    if (idle) race_host_acquire_stream(s);
    return idle;
}
inline void stream_sync(Stream* s) {
    if (!s) s = legacy_stream();
    std::unique_lock<std::mutex> lk(q_mutex());
    uint64_t target = s->enq;
    q_cv().wait(lk, [&] { return s->done >= target; });
    lk.unlock();
    race_host_acquire_stream(s);
}
inline void device_sync() {
    legacy_stream();
    std::vector<Stream*> v;
    { std::lock_guard<std::mutex> g(q_mutex()); v = all_streams(); }
    for (Stream* s : v) stream_sync(s);
}

/* ---------------------------------------------------------------- events */

struct Event {
    Stream* s = nullptr;   /* nullptr: never recorded (complete) */
    uint64_t idx = 0;
    double t = 0.0;        /* completion time (seconds) */
    bool timing = true;
};

} /* namespace emu */

#include "emu_streamrace.h"

#endif /* LLMC_CUDA_EMU_CORE_H */
