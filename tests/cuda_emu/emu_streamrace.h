/*
 tests/cuda_emu/emu_streamrace.h: the emulated device's cross-stream race
 check (issue 47 items 3 and 7), a happens-before detector over the
 operations the host enqueues.

 Clocks. Every stream has a vector clock (one counter per stream id); each
 tracked operation (kernel launch, cudaMemcpy(Async), cudaMemset(Async), cuBLAS(Lt),
 NCCL collective, cudaFreeAsync) enqueued on stream S ticks S's own entry.
 cudaEventRecord copies S's clock into the event; cudaStreamWaitEvent joins
 the event's clock into the waiting stream's. The host has a clock too: it
 acquires a stream's clock in cudaStreamSynchronize (and so in cudaMemcpy,
 cudaMemset, cudaDeviceSynchronize, cudaFree, cudaFreeHost) and in a
 cudaStreamQuery that returns cudaSuccess, an event's clock in
 cudaEventSynchronize and in a cudaEventQuery that returns cudaSuccess;
 every enqueue joins the host's clock (what the host saw complete is
 ordered before what it enqueues next). The legacy default stream joins
 every blocking stream's clock, and a blocking stream the legacy stream's
 (CUDA's implicit synchronisation). The check runs on the host, at enqueue,
 on these logical clocks: its verdict does not depend on the random delays
 of the stream workers (a race is reported even when the schedule happened
 to order the two operations).

 Accesses. Each device or pinned-host allocation keeps the accesses not yet
 known to be ordered before every stream: (byte range, stream, tick,
 operation, read/write). NCCL calls, cuBLAS(Lt) operands, copies and memsets
 have exact ranges. A kernel's pointer arguments have no extent: each is
 taken to touch its whole allocation (LLMC_EMU_RACE_EXTENT=alloc, the
 default: the most conservative; measured without a false report on every
 emulated run of tests/suites/cuda_emu.sh), or from p to the end of its
 allocation (=tail), or only the element it points to (=point); a pointer
 to const is a read, any other pointer a read and a write. Pointers inside
 structures and pointers to pointers' targets are not followed.

 An operation on stream S whose access conflicts (overlapping bytes, one of
 the two a write, another stream) with an access not ordered before it is
 an error naming both operations, both streams, the access kinds and the
 buffer. LLMC_EMU_RACE=0 turns the check off. Atomics are not modelled: a
 buffer that kernels on several streams update only with atomics is
 exempted by emu::race_exempt(p) (the emulator's own tests only).
*/
#ifndef LLMC_CUDA_EMU_STREAMRACE_H
#define LLMC_CUDA_EMU_STREAMRACE_H

#include "emu_core.h"
#include <set>
#include <unordered_map>

namespace emu {

inline bool race_on() {
    static bool on = [] { const char* e = getenv("LLMC_EMU_RACE"); return !(e && e[0] == '0'); }();
    return on;
}
enum { RACE_ALLOC = 0, RACE_TAIL = 1, RACE_POINT = 2 };
inline int race_extent() {
    static int m = [] {
        const char* e = getenv("LLMC_EMU_RACE_EXTENT");
        if (!e || !*e || !strcmp(e, "alloc")) return (int)RACE_ALLOC;
        if (!strcmp(e, "point")) return (int)RACE_POINT;
        if (!strcmp(e, "tail")) return (int)RACE_TAIL;
        fail("LLMC_EMU_RACE_EXTENT=%s: want point, tail or alloc", e);
    }();
    return m;
}

/* a vector clock: entry i is the last tick of stream id i known ordered */
struct VClock {
    std::vector<uint64_t> c;
    uint64_t get(int i) const { return (size_t)i < c.size() ? c[(size_t)i] : 0; }
    void join(const VClock& o) {
        if (o.c.size() > c.size()) c.resize(o.c.size(), 0);
        for (size_t i = 0; i < o.c.size(); i++) c[i] = std::max(c[i], o.c[i]);
    }
    uint64_t tick(int i) {
        if ((size_t)i >= c.size()) c.resize((size_t)i + 1, 0);
        return ++c[(size_t)i];
    }
};

/* one access of an operation: bytes == 0 with kernel_arg >= 0 means a
   kernel's pointer argument (extent: race_extent()) */
struct RaceAccess { const void* p; size_t bytes; bool write; const char* what; int kernel_arg; };

struct RaceRec {
    uintptr_t lo, hi;
    int stream;
    uint64_t tick;
    const char* op;
    const char* what;
    int arg;
    bool write;
};
struct RaceAlloc { std::vector<RaceRec> recs; size_t prune_at = 64; };

struct RaceState {
    std::mutex m;
    std::unordered_map<int, VClock> stream_clock;
    std::unordered_map<const void*, VClock> event_clock;   /* Event* -> the clock at its last record */
    VClock host;
    std::map<uintptr_t, RaceAlloc> allocs;                 /* allocation base -> its accesses */
    std::set<uintptr_t> exempt;
    unsigned long long ops = 0, pairs = 0;   /* operations checked; conflicting cross-stream pairs found ordered */
};
inline RaceState& race_state() { static RaceState* s = new RaceState; return *s; }   /* never destroyed: workers may free at exit */
/* LLMC_EMU_RACE_STATS=1: one line at exit (operations checked, conflicting
   cross-stream access pairs that the clocks ordered) */
inline void race_stats_print() {
    RaceState& R = race_state();
    fprintf(stderr, "cuda emu: race check: %llu operations checked, %llu conflicting cross-stream access pairs, all ordered\n", R.ops, R.pairs);
}

/* the clock of stream s as an enqueue sees it (host and legacy joins);
   the caller holds race_state().m */
inline VClock& race_prepare(Stream* s) {
    RaceState& R = race_state();
    VClock& c = R.stream_clock[s->id];
    c.join(R.host);
    if (s->legacy || s->blocking) {
        std::vector<Stream*> v;
        { std::lock_guard<std::mutex> g(q_mutex()); v = all_streams(); }
        for (Stream* o : v) {
            if (o == s) continue;
            if (s->legacy ? o->blocking : o->legacy) c.join(R.stream_clock[o->id]);
        }
    }
    return c;
}

inline const char* race_kind(bool write) { return write ? "writes" : "reads"; }

inline void race_describe(char* out, size_t n, const char* op, const char* what, int arg) {
    if (arg >= 0) snprintf(out, n, "%s (its pointer argument %d)", op, arg + 1);
    else snprintf(out, n, "%s (%s)", op, what ? what : "a buffer");
}

/* checks and records the accesses of operation `op` about to be enqueued on
   stream s (nullptr: the legacy stream); an unordered conflict is an error */
inline void race_op(Stream* s, const char* op, const RaceAccess* acc, int nacc) {
    if (!race_on()) return;
    if (!s) s = legacy_stream();
    /* resolve the allocations first (mem_mutex, not under race_state().m) */
    struct Res { uintptr_t base, lo, hi; size_t size; int kind; };
    std::vector<Res> res((size_t)nacc);
    for (int i = 0; i < nacc; i++) {
        size_t off = 0, sz = 0;
        int kind = acc[i].p ? mem_kind(acc[i].p, &off, &sz) : 0;
        Res& r = res[(size_t)i];
        r.kind = kind;
        if (!kind) continue;
        uintptr_t p = (uintptr_t)acc[i].p;
        r.base = p - off;
        r.size = sz;
        if (acc[i].kernel_arg >= 0 && acc[i].bytes == 0) {
            int ext = race_extent();
            r.lo = ext == RACE_ALLOC ? r.base : p;
            r.hi = ext == RACE_POINT ? p + 1 : r.base + (sz ? sz : 1);
        } else {
            if (acc[i].bytes == 0) { r.kind = 0; continue; }
            r.lo = p;
            r.hi = acc[i].bytes >= sz - off ? r.base + (sz ? sz : 1) : p + acc[i].bytes;
        }
    }
    RaceState& R = race_state();
    std::lock_guard<std::mutex> g(R.m);
    VClock& c = race_prepare(s);
    uint64_t t = c.tick(s->id);
    if (R.ops++ == 0) {
        const char* e = getenv("LLMC_EMU_RACE_STATS");
        if (e && e[0] == '1') atexit(race_stats_print);
    }
    for (int i = 0; i < nacc; i++) {
        const Res& r = res[(size_t)i];
        if (!r.kind || R.exempt.count(r.base)) continue;
        const RaceAccess& a = acc[i];
        RaceAlloc& A = R.allocs[r.base];
        for (const RaceRec& q : A.recs) {
            if (q.hi <= r.lo || r.hi <= q.lo) continue;
            if (!q.write && !a.write) continue;
            if (q.stream == s->id) continue;
            if (c.get(q.stream) >= q.tick) { R.pairs++; continue; }
            char now[256], before[256];
            race_describe(now, sizeof(now), op, a.what, a.kernel_arg);
            race_describe(before, sizeof(before), q.op, q.what, q.arg);
            uintptr_t lo = std::max(q.lo, r.lo), hi = std::min(q.hi, r.hi);
            fail("race between streams: %s on stream %d %s bytes [%zu, %zu) of the %zu-byte %s allocation at %p while %s on stream %d, "
                 "enqueued earlier, %s them: nothing orders the two (no cudaStreamWaitEvent on an event recorded after it, "
                 "no host synchronisation with stream %d), they may run at the same time",
                 now, s->id, race_kind(a.write), (size_t)(lo - r.base), (size_t)(hi - r.base), r.size,
                 r.kind == MEM_DEVICE ? "device" : "pinned host", (void*)r.base, before, q.stream, race_kind(q.write), q.stream);
        }
        /* an earlier access ordered before this one and inside its range is
           superseded (a read does not supersede a write) */
        auto& v = A.recs;
        v.erase(std::remove_if(v.begin(), v.end(), [&](const RaceRec& q) {
            return q.lo >= r.lo && q.hi <= r.hi && (a.write || !q.write) &&
                   (q.stream == s->id || c.get(q.stream) >= q.tick);
        }), v.end());
        v.push_back(RaceRec{r.lo, r.hi, s->id, t, op, a.what, a.kernel_arg, a.write});
        if (v.size() > A.prune_at) {
            /* drop the accesses every stream and the host are ordered after */
            VClock floor = R.host;
            for (auto& kv : R.stream_clock)
                for (size_t j = 0; j < floor.c.size(); j++) floor.c[j] = std::min(floor.c[j], kv.second.get((int)j));
            v.erase(std::remove_if(v.begin(), v.end(), [&](const RaceRec& q) { return floor.get(q.stream) >= q.tick; }), v.end());
            A.prune_at = std::max<size_t>(64, 2 * v.size());
        }
    }
}
inline void race_op1(Stream* s, const char* op, const void* p, size_t bytes, bool write, const char* what) {
    RaceAccess a{p, bytes, write, what, -1};
    race_op(s, op, &a, 1);
}

/* a copy of n bytes (cudaMemcpy*: stream nullptr is the legacy stream) */
inline void race_copy(const char* call, Stream* s, const void* dst, const void* src, size_t n) {
    if (!n) return;
    RaceAccess a[2] = {{src, n, false, "the source", -1}, {dst, n, true, "the destination", -1}};
    race_op(s, call, a, 2);
}
/* the bytes of a bf16 matrix rows x cols (leading dimension ld), batch of
   them stride elements apart (cuBLAS(Lt) operands) */
inline size_t race_matrix_bytes(long long rows, long long cols, long long ld, long long stride, int batch) {
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return 2 * (size_t)((cols - 1) * ld + rows + (long long)(batch - 1) * stride);
}

/* a kernel launch: every pointer argument (a pointer to const: read) */
template <typename T> inline void race_kernel_arg(RaceAccess* acc, int* n, const T& x, int i) {
    if constexpr (std::is_pointer<T>::value) {
        acc[(*n)++] = RaceAccess{(const void*)x, 0, !std::is_const<std::remove_pointer_t<T>>::value, nullptr, i};
    }
}
template <typename Tup, size_t... I>
inline void race_kernel_impl(const char* name, Stream* s, const Tup& t, std::index_sequence<I...>) {
    RaceAccess acc[sizeof...(I) + 1];
    int n = 0;
    (race_kernel_arg(acc, &n, std::get<I>(t), (int)I), ...);
    if (n) race_op(s, name, acc, n);
    else race_op(s, name, nullptr, 0);
}
template <typename... P>
inline void race_kernel(const char* name, Stream* s, const std::tuple<P...>& t) {
    if (!race_on()) return;
    race_kernel_impl(name, s, t, std::index_sequence_for<P...>{});
}

/* cudaEventRecord(e, s): the event carries s's clock */
inline void race_event_record(const void* e, Stream* s) {
    if (!race_on()) return;
    if (!s) s = legacy_stream();
    RaceState& R = race_state();
    std::lock_guard<std::mutex> g(R.m);
    R.event_clock[e] = race_prepare(s);
}
/* cudaStreamWaitEvent(s, e): s's later operations are ordered after e */
inline void race_stream_wait(Stream* s, const void* e) {
    if (!race_on()) return;
    if (!s) s = legacy_stream();
    RaceState& R = race_state();
    std::lock_guard<std::mutex> g(R.m);
    VClock& c = race_prepare(s);
    auto it = R.event_clock.find(e);
    if (it != R.event_clock.end()) c.join(it->second);
}
/* the host saw every operation enqueued on s so far complete */
inline void race_host_acquire_stream(Stream* s) {
    if (!race_on()) return;
    if (!s) s = legacy_stream();
    RaceState& R = race_state();
    std::lock_guard<std::mutex> g(R.m);
    R.host.join(race_prepare(s));
}
/* the host saw event e complete */
inline void race_host_acquire_event(const void* e) {
    if (!race_on()) return;
    RaceState& R = race_state();
    std::lock_guard<std::mutex> g(R.m);
    auto it = R.event_clock.find(e);
    if (it != R.event_clock.end()) R.host.join(it->second);
}
/* an allocation freed: its accesses are forgotten (base: its start) */
inline void race_forget(const void* base) {
    if (!race_on()) return;
    RaceState& R = race_state();
    std::lock_guard<std::mutex> g(R.m);
    R.allocs.erase((uintptr_t)base);
    R.exempt.erase((uintptr_t)base);
}
/* the allocation holding p is updated only with atomics: not checked */
inline void race_exempt(const void* p) {
    size_t off = 0;
    if (!mem_kind(p, &off)) return;
    RaceState& R = race_state();
    std::lock_guard<std::mutex> g(R.m);
    R.exempt.insert((uintptr_t)p - off);
}

} /* namespace emu */

#endif /* LLMC_CUDA_EMU_STREAMRACE_H */
