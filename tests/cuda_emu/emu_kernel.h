/*
 tests/cuda_emu/emu_kernel.h: kernels on the emulated device (issue 47).

 A launch (LLMC_LAUNCH -> emu::launch) checks the configuration as a GPU
 does (at most 1024 threads per block, block (1024, 1024, 64), grid x < 2^31,
 y and z <= 65535, no zero dimension, static __shared__ <= 48 KiB, dynamic
 shared memory <= 48 KiB - static unless cudaFuncSetAttribute raised the
 kernel's limit (up to 227 KiB - static)), copies the arguments, and
 enqueues the grid on the stream. The stream's worker runs the blocks one
 after another (blockIdx in order); each block's threads are fibers:

   - threadIdx / blockIdx / blockDim / gridDim are thread_local values that
     the scheduler sets before it resumes a fiber;
   - __syncthreads(): the fiber waits; when no fiber of the block can run,
     the scheduler releases the barrier if every live thread waits at the
     same call site, else it fails naming the kernel and the two sites;
   - warp intrinsics (__shfl_*_sync, __ballot_sync, __any_sync, __all_sync,
     __syncwarp): the calling lane must be in the mask; every lane the mask
     names must reach the same intrinsic (same site) with the same mask;
     a lane that exited, or waits elsewhere, is an error naming both sites;
   - a deadlock (live threads none of which can be released) is an error.

 Stacks: 64 KiB each, with a PROT_NONE guard page below (a stack overflow
 faults at once), pooled per worker thread. __shared__ variables are
 `static thread_local` in section emu_shared: one object per worker thread,
 i.e. per running block (the blocks of one worker run one at a time), sized
 from the symbol table and refilled with 0xFF before each block
 (emu_shared.h); the launch checks static + dynamic shared memory.
*/
#ifndef LLMC_CUDA_EMU_KERNEL_H
#define LLMC_CUDA_EMU_KERNEL_H

#include "emu_core.h"
#include "emu_shared.h"

struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace emu {

namespace ctx = boost::context::detail;

inline thread_local uint3 t_threadIdx, t_blockIdx;
inline thread_local dim3 t_blockDim, t_gridDim;

enum FState { F_RUN = 0, F_BAR = 1, F_WARP = 2, F_DONE = 3 };
enum WKind { W_SHFL_XOR, W_SHFL_DOWN, W_SHFL_UP, W_SHFL_IDX, W_BALLOT, W_ANY, W_ALL, W_SYNCWARP };

struct FiberT {
    ctx::fcontext_t fc = nullptr;
    int state = F_RUN;
    const char* file = nullptr;
    int line = 0;
    /* warp intrinsic */
    int wkind = 0;
    unsigned mask = 0;
    int arg = 0, width = 32;
    uint64_t val = 0, out = 0;
};

struct StackPool {
    std::vector<char*> free_;
    static const size_t kStack = 64 * 1024;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char* get() {
        if (!free_.empty()) { char* s = free_.back(); free_.pop_back(); return s; }
        void* p = mmap(nullptr, kStack + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) fail("mmap of a fiber stack failed");
        if (mprotect(p, page, PROT_NONE) != 0) fail("mprotect of a fiber stack's guard page failed");
        return (char*)p + page;   /* usable bottom; the guard page is below */
    }
    void put(char* s) { free_.push_back(s); }
};

struct BlockRun {
    const char* kernel;
    const std::function<void()>* body;
    std::vector<FiberT> f;
    std::vector<char*> stacks;
    std::vector<int> order;
    ctx::fcontext_t sched = nullptr;
    int cur = -1;
    unsigned nthreads = 0;
    dim3 bdim;
};

inline thread_local BlockRun* t_block = nullptr;

/* the shared-memory race and never-written-read checks (emu_race.h); the
   scheduler's own code is not instrumented by -fsanitize=kernel-address */
#define EMU_SCHED __attribute__((no_sanitize_address))
inline void race_block_begin(BlockRun* b, const SharedFn* shf);
inline void race_barrier();
inline void race_warp_sync(BlockRun* b, int w, unsigned m);
inline void race_block_end();
inline thread_local int t_kernel_code = 0;   /* 1 while a fiber (kernel code) runs */
inline thread_local StackPool* t_pool = nullptr;
inline thread_local Rng* t_rng = nullptr;

EMU_SCHED inline void fiber_entry(ctx::transfer_t t) {
    BlockRun* b = t_block;
    b->sched = t.fctx;
    (*b->body)();
    b = t_block;
    b->f[b->cur].state = F_DONE;
    ctx::jump_fcontext(b->sched, nullptr);
    fail("a finished fiber was resumed");
}

/* the calling fiber waits; back in the scheduler until released */
EMU_SCHED inline void fiber_yield() {
    BlockRun* b = t_block;
    ctx::transfer_t t = ctx::jump_fcontext(b->sched, nullptr);
    t_block->sched = t.fctx;
}

EMU_SCHED inline void set_tid(BlockRun* b, int i) {
    unsigned x = (unsigned)i % b->bdim.x, r = (unsigned)i / b->bdim.x;
    t_threadIdx = uint3{x, r % b->bdim.y, r / b->bdim.y};
}

inline const char* state_name(const FiberT& f, char* buf, size_t n) {
    if (f.state == F_DONE) snprintf(buf, n, "exited");
    else if (f.state == F_BAR) snprintf(buf, n, "__syncthreads at %s:%d", f.file, f.line);
    else if (f.state == F_WARP) snprintf(buf, n, "a warp intrinsic (mask 0x%08x) at %s:%d", f.mask, f.file, f.line);
    else snprintf(buf, n, "running");
    return buf;
}

/* resolve the warp intrinsics every waiting lane of warp w is at; returns
   the number of lanes released */
EMU_SCHED inline int resolve_warp(BlockRun* b, int w) {
    FiberT* F = b->f.data();
    int base = w * 32, n = (int)std::min<unsigned>(32, b->nthreads - (unsigned)base);
    int released = 0;
    bool handled[32] = {false};
    for (int l = 0; l < n; l++) {
        FiberT& a = F[base + l];
        if (a.state != F_WARP || handled[l]) continue;
        unsigned m = a.mask;
        bool ready = true;
        for (int k = 0; k < 32; k++) {
            if (!(m >> k & 1u)) continue;
            char s1[256], s2[256];
            if (k >= n) fail("kernel %s, block (%u,%u,%u): warp %d lane %d at %s:%d names lane %d in mask 0x%08x, which does not exist (blockDim %u)",
                             b->kernel, t_blockIdx.x, t_blockIdx.y, t_blockIdx.z, w, l, a.file, a.line, k, m, b->nthreads);
            FiberT& o = F[base + k];
            if (o.state == F_RUN) { ready = false; continue; }
            if (o.state != F_WARP || o.file != a.file || o.line != a.line || o.mask != m || o.wkind != a.wkind)
                fail("kernel %s, block (%u,%u,%u), warp %d: lane %d is at %s but lane %d, which its mask 0x%08x names, %s %s",
                     b->kernel, t_blockIdx.x, t_blockIdx.y, t_blockIdx.z, w, l, state_name(a, s1, sizeof(s1)), k, m,
                     o.state == F_DONE ? "has" : "is at", state_name(o, s2, sizeof(s2)));
        }
        if (!ready) continue;
        /* two masks at one site: a lane outside this group, waiting at the
           same intrinsic, whose mask names a lane of the group */
        for (int o = 0; o < n; o++) {
            FiberT& x = F[base + o];
            if ((m >> o & 1u) || x.state != F_WARP || x.file != a.file || x.line != a.line || !(x.mask & m)) continue;
            fail("kernel %s, block (%u,%u,%u), warp %d: two masks at one warp intrinsic at %s:%d: lane %d has mask 0x%08x, lane %d has mask 0x%08x, which names lanes of the first",
                 b->kernel, t_blockIdx.x, t_blockIdx.y, t_blockIdx.z, w, a.file, a.line, l, m, o, x.mask);
        }
        /* compute every lane's result */
        uint32_t ballot = 0;
        for (int k = 0; k < 32; k++) if (m >> k & 1u) { handled[k] = true; if (F[base + k].val) ballot |= 1u << k; }
        for (int k = 0; k < 32; k++) {
            if (!(m >> k & 1u)) continue;
            FiberT& me = F[base + k];
            int width = me.width, seg = k & ~(width - 1), src = k;
            switch (me.wkind) {
                /* PTX shfl.sync.bfly: a lane may read an earlier segment, not a later one */
                case W_SHFL_XOR: src = (k ^ me.arg); if (src >= seg + width) src = k; break;
                case W_SHFL_DOWN: src = k + me.arg; if (src >= seg + width) src = k; break;
                case W_SHFL_UP: src = k - me.arg; if (src < seg) src = k; break;
                case W_SHFL_IDX: src = seg + (me.arg & (width - 1)); break;
                default: break;
            }
            if (me.wkind <= W_SHFL_IDX) {
                if (!(m >> src & 1u))
                    fail("kernel %s: lane %d of warp %d reads lane %d with a shuffle at %s:%d, but mask 0x%08x does not name lane %d",
                         b->kernel, k, w, src, me.file, me.line, m, src);
                me.out = F[base + src].val;
            } else if (me.wkind == W_BALLOT) me.out = ballot;
            else if (me.wkind == W_ANY) me.out = ballot != 0;
            else if (me.wkind == W_ALL) me.out = ballot == m;
            me.state = F_RUN;
            released++;
        }
        race_warp_sync(b, w, m);
    }
    return released;
}

EMU_SCHED inline void run_block(BlockRun* b) {
    unsigned n = b->nthreads;
    b->f.assign(n, FiberT());
    if (b->stacks.size() < n) {
        for (size_t i = b->stacks.size(); i < n; i++) b->stacks.push_back(t_pool->get());
    }
    b->order.resize(n);
    for (unsigned i = 0; i < n; i++) {
        b->order[i] = (int)i;
        b->f[i].fc = ctx::make_fcontext(b->stacks[i] + StackPool::kStack, StackPool::kStack, fiber_entry);
    }
    /* raw pointers from here: std::vector's operator[] is a function of its
       own, instrumented by -fsanitize=kernel-address (every element access a
       call to a hook of emu_race.h), and the scheduler ran most of its time
       in those calls */
    FiberT* F = b->f.data();
    int* ord = b->order.data();
    unsigned live = n;
    for (;;) {
        /* run every runnable fiber until it waits or ends */
        for (unsigned oi = 0; oi < n; oi++) {
            int i = ord[oi];
            FiberT& fb = F[i];
            if (fb.state != F_RUN) continue;
            b->cur = i;
            set_tid(b, i);
            t_kernel_code = 1;
            ctx::transfer_t t = ctx::jump_fcontext(fb.fc, nullptr);
            t_kernel_code = 0;
            F[i].fc = t.fctx;
            if (F[i].state == F_DONE) live--;
        }
        if (live == 0) break;
        /* warp intrinsics first */
        int released = 0, nwarps = (int)((n + 31) / 32);
        for (int w = 0; w < nwarps; w++) released += resolve_warp(b, w);
        if (released) continue;
        /* the block barrier: every live thread at the same site */
        int first = -1;
        for (unsigned i = 0; i < n; i++) {
            FiberT& fb = F[i];
            if (fb.state == F_DONE) continue;
            if (first < 0) { first = (int)i; continue; }
            FiberT& a = F[first];
            char s1[256], s2[256];
            if (fb.state != F_BAR || a.state != F_BAR || fb.file != a.file || fb.line != a.line)
                fail("kernel %s, block (%u,%u,%u): divergent barrier: thread %d is at %s, thread %u at %s",
                     b->kernel, t_blockIdx.x, t_blockIdx.y, t_blockIdx.z, first, state_name(a, s1, sizeof(s1)), i,
                     state_name(fb, s2, sizeof(s2)));
        }
        for (unsigned i = 0; i < n; i++) if (F[i].state == F_BAR) F[i].state = F_RUN;
        race_barrier();
        /* threads resume in a seeded random order */
        for (unsigned i = n; i > 1; i--) {
            unsigned r = t_rng->below(i);
            int t = ord[i - 1]; ord[i - 1] = ord[r]; ord[r] = t;
        }
    }
}

/* a warp intrinsic of the calling thread */
EMU_SCHED inline uint64_t warp_op(int kind, unsigned mask, uint64_t val, int arg, int width, const char* file, int line) {
    BlockRun* b = t_block;
    if (!b) fail("a warp intrinsic at %s:%d called outside a kernel", file, line);
    int tid = b->cur, lane = tid & 31;
    if (!(mask >> lane & 1u))
        fail("kernel %s: lane %d of warp %d calls a warp intrinsic at %s:%d with mask 0x%08x, which does not name it",
             b->kernel, lane, tid / 32, file, line, mask);
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fail("kernel %s: warp intrinsic at %s:%d with width %d (must be a power of two <= 32)", b->kernel, file, line, width);
    t_kernel_code = 0;   /* the scheduler's bookkeeping is not kernel code */
    FiberT& f = b->f[tid];
    f.state = F_WARP; f.wkind = kind; f.mask = mask; f.val = val; f.arg = arg; f.width = width; f.file = file; f.line = line;
    fiber_yield();
    BlockRun* b2 = t_block;
    return b2->f[b2->cur].out;
}

EMU_SCHED inline void syncthreads(const char* file, int line) {
    BlockRun* b = t_block;
    if (!b) fail("__syncthreads at %s:%d called outside a kernel", file, line);
    t_kernel_code = 0;
    FiberT& f = b->f[b->cur];
    f.state = F_BAR; f.file = file; f.line = line;
    fiber_yield();
}

/* a 128-bit load / store (load8 / store8 of llmc/cuda/common.cuh through
   LLMC_CHECK_ALIGN16): the GPU traps on a misaligned address, x86 would not */
inline void check_align16(const void* p, const char* what) {
    if (((uintptr_t)p & 15u) == 0) return;
    BlockRun* b = t_block;
    if (b)
        fail("kernel %s, block (%u,%u,%u), thread (%u,%u,%u): 16-byte %s through %p, which is not 16-byte aligned (a GPU traps: misaligned address)",
             b->kernel, t_blockIdx.x, t_blockIdx.y, t_blockIdx.z, t_threadIdx.x, t_threadIdx.y, t_threadIdx.z, what, p);
    fail("16-byte %s through %p, which is not 16-byte aligned (a GPU traps: misaligned address)", what, p);
}

template <typename T> inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles of at most 8 bytes");
    uint64_t u = 0; memcpy(&u, &v, sizeof(T)); return u;
}
template <typename T> inline T from_bits(uint64_t u) { T v; memcpy(&v, &u, sizeof(T)); return v; }

/* ---------------------------------------------------------------- launch */

static const size_t kSmemDefault = 48 * 1024, kSmemOptin = 227 * 1024;   /* per block, bytes (sm_90) */

struct KernelAttr { int max_dyn_smem = -1; };   /* -1: not set (48 KiB - static) */
inline std::mutex& attr_mutex() { static std::mutex m; return m; }
inline std::map<const void*, KernelAttr>& kernel_attrs() { static std::map<const void*, KernelAttr> m; return m; }

inline thread_local int t_last_error = 0;   /* cudaError_t of the last launch on this host thread */

/* per-kernel launch counts (tests/cuda_emu/coverage: which kernels ran) */
inline std::mutex& count_mutex() { static std::mutex m; return m; }
inline std::map<std::string, unsigned long long>& launch_counts() { static std::map<std::string, unsigned long long> m; return m; }

inline void run_grid(const char* name, dim3 g, dim3 bd, const std::function<void()>& body, const SharedFn* shf) {
    thread_local StackPool pool;
    thread_local Rng rng(seed_value() * 31 + 7);
    thread_local BlockRun br;
    t_pool = &pool;
    t_rng = &rng;
    br.kernel = name;
    br.body = &body;
    br.bdim = bd;
    br.nthreads = bd.x * bd.y * bd.z;
    t_blockDim = bd;
    t_gridDim = g;
    BlockRun* saved = t_block;
    t_block = &br;
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++)
            for (unsigned x = 0; x < g.x; x++) {
                t_blockIdx = uint3{x, y, z};
                shared_refill(shf, &t_threadIdx);   /* garbage, as the previous block left it */
                race_block_begin(&br, shf);
                run_block(&br);
                race_block_end();
            }
    t_block = saved;
}

/* cudaErrorInvalidConfiguration = 9, cudaErrorInvalidValue = 1 (cuda_runtime.h) */
template <typename... P, typename... A>
inline void launch(const char* name, void (*k)(P...), dim3 g, dim3 b, size_t smem, Stream* s, A&&... a) {
    unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    int max_dyn;
    const SharedFn* shf = kernel_shared((const void*)k);
    size_t stat = shf ? shf->bytes : 0;
    if (stat > kSmemDefault)
        fail("kernel %s declares %zu bytes of static __shared__ memory, more than the %zu a block may have (ptxas refuses it)", name, stat, kSmemDefault);
    { std::lock_guard<std::mutex> lk(attr_mutex()); max_dyn = kernel_attrs()[(const void*)k].max_dyn_smem; }
    if (max_dyn < 0) max_dyn = (int)(kSmemDefault - stat);
    if (nt == 0 || g.x == 0 || g.y == 0 || g.z == 0 || nt > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
        g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535 || smem > (size_t)max_dyn) {
        fprintf(stderr, "cuda emu: launch of %s: invalid configuration grid (%u,%u,%u) block (%u,%u,%u) dynamic shared %zu bytes "
                        "+ static %zu (limits: 1024 threads, block (1024,1024,64), grid (2^31-1,65535,65535), %d bytes of dynamic shared memory: "
                        "48 KiB - static unless cudaFuncSetAttribute raised it)\n",
                name, g.x, g.y, g.z, b.x, b.y, b.z, smem, stat, max_dyn);
        t_last_error = 9;
        return;
    }
    { std::lock_guard<std::mutex> lk(count_mutex()); launch_counts()[name]++; }
    auto args = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(a)...);
    race_kernel(name, s, *args);   /* emu_streamrace.h */
    enqueue(s, [name, k, g, b, args, shf] {
        std::function<void()> body = [k, args] { std::apply(k, *args); };
        run_grid(name, g, b, body, shf);
    });
}

} /* namespace emu */

#include "emu_race.h"

#define threadIdx (::emu::t_threadIdx)
#define blockIdx (::emu::t_blockIdx)
#define blockDim (::emu::t_blockDim)
#define gridDim (::emu::t_gridDim)
static constexpr int warpSize = 32;

#define __syncthreads() ::emu::syncthreads(__FILE__, __LINE__)
#define LLMC_CHECK_ALIGN16(p, what) ::emu::check_align16((const void*)(p), what)
#define __syncwarp(...) ((void)::emu::warp_op(::emu::W_SYNCWARP, emu_syncwarp_mask(__VA_ARGS__), 0, 0, 32, __FILE__, __LINE__))
inline unsigned emu_syncwarp_mask(unsigned m = 0xffffffffu) { return m; }

template <typename T> inline T emu_shfl(int kind, unsigned mask, T v, int arg, int width, const char* file, int line) {
    return emu::from_bits<T>(emu::warp_op(kind, mask, emu::to_bits(v), arg, width, file, line));
}
#define __shfl_xor_sync(mask, v, o, ...) emu_shfl(::emu::W_SHFL_XOR, (mask), (v), (o), emu_width(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_down_sync(mask, v, o, ...) emu_shfl(::emu::W_SHFL_DOWN, (mask), (v), (o), emu_width(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_up_sync(mask, v, o, ...) emu_shfl(::emu::W_SHFL_UP, (mask), (v), (o), emu_width(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_sync(mask, v, o, ...) emu_shfl(::emu::W_SHFL_IDX, (mask), (v), (o), emu_width(__VA_ARGS__), __FILE__, __LINE__)
inline int emu_width(int w = 32) { return w; }
#define __ballot_sync(mask, p) ((unsigned)::emu::warp_op(::emu::W_BALLOT, (mask), (p) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, p) ((int)::emu::warp_op(::emu::W_ANY, (mask), (p) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __all_sync(mask, p) ((int)::emu::warp_op(::emu::W_ALL, (mask), (p) ? 1 : 0, 0, 32, __FILE__, __LINE__))

/* atomics: real atomics (streams run concurrently on worker threads) */
template <typename T> inline T emu_atomic_add_fp(T* p, T v) {
    using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    U* up = reinterpret_cast<U*>(p);
    U old = __atomic_load_n(up, __ATOMIC_RELAXED), nw;
    for (;;) {
        T o; memcpy(&o, &old, sizeof(T));
        T n = o + v; memcpy(&nw, &n, sizeof(T));
        if (__atomic_compare_exchange_n(up, &old, nw, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return o;
    }
}
inline float atomicAdd(float* p, float v) { return emu_atomic_add_fp(p, v); }
inline double atomicAdd(double* p, double v) { return emu_atomic_add_fp(p, v); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline int atomicMax(int* p, int v) { int o = __atomic_load_n(p, __ATOMIC_RELAXED); while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {} return o; }
inline unsigned atomicMax(unsigned* p, unsigned v) { unsigned o = __atomic_load_n(p, __ATOMIC_RELAXED); while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {} return o; }
inline int atomicCAS(int* p, int c, int v) { __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
inline unsigned atomicCAS(unsigned* p, unsigned c, unsigned v) { __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long c, unsigned long long v) { __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __nanosleep(unsigned ns) { struct timespec ts = {0, (long)ns}; nanosleep(&ts, NULL); }
inline long long clock64(void) { return (long long)(emu::now_s() * 1e9); }
inline unsigned long long __globaltimer(void) { return (unsigned long long)(emu::now_s() * 1e9); }
template <typename T> inline T __ldg(const T* p) { return *p; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __shared__ __attribute__((section("emu_shared"))) static thread_local   /* emu_shared.h */
#define __constant__ static
#define __launch_bounds__(...)

using std::min;
using std::max;
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }

#endif /* LLMC_CUDA_EMU_KERNEL_H */
