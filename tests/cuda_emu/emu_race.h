/*
 tests/cuda_emu/emu_race.h: the memory checks of the emulated device that
 need every load and store of kernel code (issue 47 items 2, 3 and 7):

   - shared-memory races: a read by thread t of a __shared__ byte that
     another thread u wrote in the same barrier epoch (no __syncthreads
     between), a write of a byte that another thread wrote or read in that
     epoch: an error naming the kernel, the block, both threads, the
     variable and byte offset, and both source lines;
   - never-written device memory: a kernel load of cudaMalloc memory whose
     bytes are all 0xFF (the fill of cudaMalloc) and that nothing wrote: an
     error naming the kernel, block, thread, allocation offset and line.

 The interception. Kernel code is the unchanged CUDA source: shared arrays
 are plain C++ arrays (static thread_local, emu_shared.h) that kernels pass
 on as raw pointers (block_sum_d(double v, double* sh)), and global memory
 is read through raw pointers, so neither a proxy element type (it would
 not convert to double*) nor page protection (the __shared__ variables sit
 in the worker thread's TLS block next to the emulator's own thread_locals)
 fits. The emulated programs are instead compiled with GCC's
 -fsanitize=kernel-address and --param asan-instrumentation-with-call-
 threshold=0 (no stack or global redzones, no runtime library): the compiler
 calls __asan_loadN_noabort(addr) / __asan_storeN_noabort(addr) before
 every load and store, and this header defines those functions
 (LLMC_EMU_ACCESS=1, set by emu.mk with the flags). Outside a kernel (no
 block running on the calling thread) a hook returns at once. Atomic
 builtins are not instrumented: atomics on shared memory are exempt, as
 they should be. The address sanitizer build (make emu-asan) cannot combine
 with it and runs without these two checks.

 Races, precisely: per byte of the kernel's __shared__ variables a shadow
 of the last writer (thread, barrier epoch, warp epoch, pc) and the readers
 of the epoch (the first, whether others read, their warp). A barrier
 release starts a new epoch. A warp intrinsic that every live lane of a
 warp reaches (__syncwarp, shuffles, votes with a mask naming them all)
 starts a new warp epoch of that warp: accesses of two lanes of one warp in
 different warp epochs are ordered. Intrinsics with a partial mask order
 nothing here (none in the project). Not covered: __shared__ variables
 declared in __device__ functions or template kernels (emu_shared.h does
 not know them), races through global memory between blocks.

 Never-written reads, precisely: a load of 2, 4 or 8 bytes that are all
 0xFF, or a 16-byte load with an all-0xFF 4-byte unit, inside a cudaMalloc
 allocation. Computations do not store such values (bf16 0xffff and fp32
 0xffffffff are NaNs with every payload bit set; conversions make quiet
 NaNs); where a program does store all-0xFF bytes (an int -1), the store is
 seen: a kernel store (checked at the next access of the worker thread and
 at the block's end), cudaMemcpy into device memory (emu::note_device_write);
 cudaMemset with 0xFF is poisoning (backend_memset_nan) and stays "never
 written". Not covered: 1-byte loads, a load of an element
 whose other bytes were written, a D2D copy of never-written memory (the
 copy counts as written), reads by the cuBLAS(Lt) / NCCL emulation (checked
 by check_written, emu_core.h). LLMC_EMU_UNWRITTEN=0 turns it off,
 LLMC_EMU_RACE=0 the race check.
*/
#ifndef LLMC_CUDA_EMU_RACE_H
#define LLMC_CUDA_EMU_RACE_H

#include <set>

/* the checks' own code is not instrumented (its loads would call the hooks) */
#define EMU_NOSAN __attribute__((no_sanitize_address))

namespace emu {

struct SharedRaceByte {
    uint32_t we = 0, wwe = 0;      /* writer's barrier epoch, warp epoch */
    int32_t w = -1;                /* writer thread (linear index) */
    uint32_t re = 0, rwe = 0;      /* readers' barrier epoch, last reader's warp epoch */
    int32_t r = -1;                /* first reader of the epoch */
    int16_t rwarp = -1;            /* the readers' warp, -2 several warps */
    uint8_t rmany = 0;             /* more than one reader */
    uintptr_t wpc = 0, rpc = 0;    /* code addresses of the write, the first read */
};

struct SharedRaceState {
    bool on = false;               /* this block is tracked (shared variables, LLMC_EMU_RACE != 0) */
    const char* kernel = nullptr;
    const SharedFn* shf = nullptr;
    char* lo = nullptr;            /* the kernel's __shared__ bytes in this worker's TLS: [lo, lo + len) */
    size_t len = 0;
    std::vector<SharedRaceByte> sh;
    uint32_t epoch = 0;            /* monotone per worker thread: new block, each barrier release */
    std::vector<uint32_t> wep;     /* per warp */
    uintptr_t pend = 0;            /* a store of 0xFF bytes to check (pending_store_flush) */
    size_t pend_n = 0;
};
inline thread_local SharedRaceState t_race;
/* the hot path's state as plain thread_locals (no TLS init wrapper): the
   kernel's shared range, the last store outside it (checked for 0xFF bytes
   at the next access), the recursion guard, LLMC_EMU_UNWRITTEN */
inline thread_local uintptr_t t_race_lo = 0, t_pend = 0;
inline thread_local size_t t_race_len = 0, t_pend_n = 0;
inline thread_local int t_race_in = 0, t_unw_on = 0;

inline bool race_check_on() {
    static bool on = [] { const char* e = getenv("LLMC_EMU_RACE"); return !(e && e[0] == '0'); }();
    return on;
}

/* all bytes 0xFF, n in 2, 4, 8 (not instrumented, unlike all_ff) */
EMU_NOSAN inline bool ff_n(uintptr_t a, size_t n) {
    if (n == 2) { uint16_t v; memcpy(&v, (const void*)a, 2); return v == 0xFFFFu; }
    if (n == 4) { uint32_t v; memcpy(&v, (const void*)a, 4); return v == 0xFFFFFFFFu; }
    uint64_t v; memcpy(&v, (const void*)a, 8); return v == ~0ull;
}

/* device ranges written by copies / memsets that hold all-0xFF units, and
   kernel stores of all-0xFF bytes (2-byte units): these reads are not flagged */
inline std::mutex& ffw_mutex() { static std::mutex m; return m; }
inline std::map<uintptr_t, size_t>& ffw_ranges() { static std::map<uintptr_t, size_t> m; return m; }
inline std::set<uintptr_t>& ffw_units() { static std::set<uintptr_t> s; return s; }

/* cudaMemcpy* wrote n bytes at dst (device or not): remember it
   if the bytes hold a 0xFF 0xFF pair (called on the stream worker, after the copy) */
EMU_NOSAN inline void note_device_write(const void* dst, size_t n) {
    if (!n || !memmem(dst, n, "\xff\xff", 2) || mem_kind(dst) != MEM_DEVICE) return;
    std::lock_guard<std::mutex> g(ffw_mutex());
    size_t& cur = ffw_ranges()[(uintptr_t)dst];
    cur = std::max(cur, n);
}

EMU_NOSAN inline bool ffw_known(uintptr_t a) {
    std::lock_guard<std::mutex> g(ffw_mutex());
    if (ffw_units().count(a & ~(uintptr_t)1)) return true;
    auto& m = ffw_ranges();
    auto it = m.upper_bound(a);
    if (it == m.begin()) return false;
    --it;
    return a < it->first + it->second;
}

/* "file:line (function)" of a code address, from addr2line (error path only) */
inline std::string describe_pc(uintptr_t pc) {
    if (!pc) return "?";
    uintptr_t bias = 0;
    dl_iterate_phdr(phdr_cb, &bias);
    char cmd[256], line[512];
    snprintf(cmd, sizeof(cmd), "addr2line -C -f -e /proc/%d/exe 0x%lx 2>/dev/null", (int)getpid(), (unsigned long)(pc - 1 - bias));
    std::string fn, loc;
    if (FILE* f = popen(cmd, "r")) {
        if (fgets(line, sizeof(line), f)) { fn = line; while (!fn.empty() && fn.back() == '\n') fn.pop_back(); }
        if (fgets(line, sizeof(line), f)) { loc = line; while (!loc.empty() && loc.back() == '\n') loc.pop_back(); }
        pclose(f);
    }
    size_t cut = fn.find('(');
    if (cut != std::string::npos) fn = fn.substr(0, cut);
    char buf[64];
    snprintf(buf, sizeof(buf), "pc 0x%lx", (unsigned long)(pc - bias));
    if (loc.empty() || loc[0] == '?') return buf;
    size_t d = loc.find(" (discriminator");
    if (d != std::string::npos) loc = loc.substr(0, d);
    return loc + " (" + fn + ")";
}

EMU_NOSAN inline std::string shared_var_at(const SharedRaceState& r, size_t off, size_t* var_off) {
    char* base = (char*)&t_threadIdx - shared_info().anchor_off;
    for (const SharedVar& v : r.shf->vars)
        if (r.lo + off >= base + v.off && r.lo + off < base + v.off + v.size) {
            *var_off = (size_t)(r.lo + off - (base + v.off));
            return v.name;
        }
    *var_off = off;
    return "__shared__ memory";
}

EMU_NOSAN [[noreturn]] inline void race_fail(const char* what, int t, uintptr_t tpc, int u, uintptr_t upc, const char* uwhat, size_t off) {
    SharedRaceState& r = t_race;
    t_race_in++;
    size_t voff = 0;
    std::string var = shared_var_at(r, off, &voff);
    std::string ts = describe_pc(tpc), us = describe_pc(upc);
    char who[32];
    if (u >= 0) snprintf(who, sizeof(who), "thread %d", u); else snprintf(who, sizeof(who), "other threads");
    fail("kernel %s, block (%u,%u,%u): shared-memory race: thread %d %s byte %zu of %s at %s, which %s %s at %s "
         "in the same barrier epoch (no __syncthreads between: a missing barrier?)",
         r.kernel, t_blockIdx.x, t_blockIdx.y, t_blockIdx.z, t, what, voff, var.c_str(), ts.c_str(), who, uwhat, us.c_str());
}

/* a load or store of n bytes at a by the running thread of the block */
EMU_NOSAN inline void race_shared(size_t off, size_t n, bool write, uintptr_t pc) {
    SharedRaceState& r = t_race;
    int t = t_block->cur, warp = t >> 5;
    uint32_t E = r.epoch, cw = r.wep[warp];
    if (off + n > r.len) n = r.len - off;
    for (size_t i = 0; i < n; i++) {
        SharedRaceByte& s = r.sh[off + i];
        /* ordered with the last write: same thread, another epoch, or the same warp in another warp epoch */
        bool w_conf = s.we == E && s.w != t && s.w >= 0 && !((s.w >> 5) == warp && s.wwe != cw);
        if (write) {
            if (w_conf) race_fail("writes", t, pc, s.w, s.wpc, "wrote", off + i);
            if (s.re == E && s.r >= 0 && (s.rmany || s.r != t)) {
                bool ordered = s.rwarp == warp && s.rwe != cw;
                if (!ordered) race_fail("writes", t, pc, s.r == t ? -1 : s.r, s.rpc, s.rmany ? "(and other threads) read" : "read", off + i);
            }
            s.we = E; s.w = t; s.wwe = cw; s.wpc = pc;
        } else {
            if (w_conf) race_fail("reads", t, pc, s.w, s.wpc, "wrote", off + i);
            if (s.re != E) { s.re = E; s.r = t; s.rwarp = (int16_t)warp; s.rwe = cw; s.rmany = 0; s.rpc = pc; }
            else if (s.r != t || s.rmany) {
                if (s.r != t) s.rmany = 1;
                if (s.rwarp != warp) s.rwarp = -2;
                s.rwe = std::max(s.rwe, cw);
            }
        }
    }
}

EMU_NOSAN inline void pending_store_flush() {
    SharedRaceState& r = t_race;
    uintptr_t a = r.pend;
    r.pend = 0;
    for (size_t u = 0; u + 2 <= r.pend_n; u += 2)
        if (ff_n(a + u, 2) && mem_kind((const void*)a) == MEM_DEVICE) {
            std::lock_guard<std::mutex> g(ffw_mutex());
            ffw_units().insert((a + u) & ~(uintptr_t)1);
        }
}

EMU_NOSAN inline void unwritten_load(uintptr_t a, size_t n, uintptr_t pc) {
    size_t unit = n <= 8 ? n : 4;
    for (size_t u = 0; u < n; u += unit) {
        if (!ff_n(a + u, unit)) continue;
        size_t off = 0, sz = 0;
        if (mem_kind((const void*)(a + u), &off, &sz) != MEM_DEVICE || ffw_known(a + u)) continue;
        std::string where = describe_pc(pc);
        fail("kernel %s, block (%u,%u,%u), thread (%u,%u,%u): reads %zu bytes at %p (byte %zu of a %zu-byte cudaMalloc allocation) at %s, "
             "whose bytes are all 0xFF, the fill of cudaMalloc: device memory read before anything wrote it",
             t_block->kernel, t_blockIdx.x, t_blockIdx.y, t_blockIdx.z, t_threadIdx.x, t_threadIdx.y, t_threadIdx.z,
             unit, (const void*)(a + u), off, sz, where.c_str());
    }
}

/* every instrumented load / store (the hooks below); the hot path is
   plain thread_locals: kernel code running (t_kernel_code, set by
   run_block around each fiber's run), the shared range, the pending store */
EMU_NOSAN inline void on_access(uintptr_t a, size_t n, bool write, uintptr_t pc) {
    if (!t_kernel_code || t_race_in) return;
    if (t_pend) {
        uintptr_t p = t_pend;
        t_pend = 0;
        bool ff = false;
        for (size_t u = 0; u + 2 <= t_pend_n; u += 2) ff |= ff_n(p + u, 2);
        if (ff) { t_race_in++; t_race.pend = p; t_race.pend_n = t_pend_n; pending_store_flush(); t_race_in--; }
    }
    if (a - t_race_lo < t_race_len) {
        if (t_race.on) { t_race_in++; race_shared(a - t_race_lo, n, write, pc); t_race_in--; }
        return;
    }
    if (write) { if (n >= 2) { t_pend = a; t_pend_n = n; } return; }
    if (n < 2 || !t_unw_on) return;
    bool ff = false;
    if (n <= 8) ff = (n == 2 || n == 4 || n == 8) && ff_n(a, n);
    else if (n % 4 == 0) for (size_t u = 0; u < n; u += 4) ff |= ff_n(a + u, 4);
    if (ff) { t_race_in++; unwritten_load(a, n, pc); t_race_in--; }
}

/* the scheduler's calls (emu_kernel.h) */
EMU_NOSAN inline void race_block_begin(BlockRun* b, const SharedFn* shf) {
    SharedRaceState& r = t_race;
    r.kernel = b->kernel;
    r.shf = shf;
    r.epoch++;
    r.wep.assign((b->nthreads + 31) / 32, 0);
    r.pend = 0; t_pend = 0;
    r.lo = nullptr; r.len = 0; r.on = false;
    t_race_lo = 0; t_race_len = 0;
    t_unw_on = unwritten_check_on();
    if (!shf || shf->vars.empty()) return;
    char* base = (char*)&t_threadIdx - shared_info().anchor_off;
    size_t lo = SIZE_MAX, hi = 0;
    for (const SharedVar& v : shf->vars) { lo = std::min(lo, v.off); hi = std::max(hi, v.off + v.size); }
    r.lo = base + lo;
    r.len = hi - lo;
    r.on = race_check_on();
    if (r.on && r.sh.size() < r.len) r.sh.resize(r.len);
    t_race_lo = (uintptr_t)r.lo; t_race_len = r.len;
}
EMU_NOSAN inline void race_barrier() { t_race.epoch++; }
/* a warp intrinsic released the lanes of mask m of warp w: a new warp epoch
   if m names every lane of the warp that has not exited */
EMU_NOSAN inline void race_warp_sync(BlockRun* b, int w, unsigned m) {
    int base = w * 32, n = (int)std::min<unsigned>(32, b->nthreads - (unsigned)base);
    for (int l = 0; l < n; l++) if (!(m >> l & 1u) && b->f[base + l].state != F_DONE) return;
    t_race.wep[w]++;
}
EMU_NOSAN inline void race_block_end() {
    SharedRaceState& r = t_race;
    if (t_pend) { t_race_in++; r.pend = t_pend; r.pend_n = t_pend_n; t_pend = 0; pending_store_flush(); t_race_in--; }
    r.lo = nullptr; r.len = 0; r.on = false;
    t_race_lo = 0; t_race_len = 0;
}

} /* namespace emu */

#if LLMC_EMU_ACCESS
/* the calls of -fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 */
#define EMU_HOOK __attribute__((no_sanitize_address, used)) void
#define EMU_PC ((uintptr_t)__builtin_return_address(0))
extern "C" {
EMU_HOOK __asan_load1_noabort(void* p) { emu::on_access((uintptr_t)p, 1, false, EMU_PC); }
EMU_HOOK __asan_load2_noabort(void* p) { emu::on_access((uintptr_t)p, 2, false, EMU_PC); }
EMU_HOOK __asan_load4_noabort(void* p) { emu::on_access((uintptr_t)p, 4, false, EMU_PC); }
EMU_HOOK __asan_load8_noabort(void* p) { emu::on_access((uintptr_t)p, 8, false, EMU_PC); }
EMU_HOOK __asan_load16_noabort(void* p) { emu::on_access((uintptr_t)p, 16, false, EMU_PC); }
EMU_HOOK __asan_loadN_noabort(void* p, long n) { emu::on_access((uintptr_t)p, (size_t)n, false, EMU_PC); }
EMU_HOOK __asan_store1_noabort(void* p) { emu::on_access((uintptr_t)p, 1, true, EMU_PC); }
EMU_HOOK __asan_store2_noabort(void* p) { emu::on_access((uintptr_t)p, 2, true, EMU_PC); }
EMU_HOOK __asan_store4_noabort(void* p) { emu::on_access((uintptr_t)p, 4, true, EMU_PC); }
EMU_HOOK __asan_store8_noabort(void* p) { emu::on_access((uintptr_t)p, 8, true, EMU_PC); }
EMU_HOOK __asan_store16_noabort(void* p) { emu::on_access((uintptr_t)p, 16, true, EMU_PC); }
EMU_HOOK __asan_storeN_noabort(void* p, long n) { emu::on_access((uintptr_t)p, (size_t)n, true, EMU_PC); }
EMU_HOOK __asan_handle_no_return(void) {}
}
#undef EMU_HOOK
#undef EMU_PC
#endif

#undef EMU_NOSAN

#endif /* LLMC_CUDA_EMU_RACE_H */
