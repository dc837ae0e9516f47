/*
 tests/cuda_emu/nccl.h: NCCL on the emulated device (issue 47), over MPI
 between the real ranks (MPI_THREAD_MULTIPLE: the collectives run on the
 stream's worker thread while the host thread goes on).

   ncclGetUniqueId: 128 bytes, random (clock, pid); ncclCommInitRank(comm,
     nranks, id, rank): MPI_Comm_split of MPI_COMM_WORLD by a hash of the id
     (every rank of the world calls it, in the same order, as the trainer's
     backend_init does), checked: the group has nranks ranks and this one is
     rank `rank` in it.
   ncclAllReduce / ncclReduceScatter / ncclAllGather (ncclBfloat16 or
     ncclFloat, ncclSum): on the stream, in place or not; sums in fp32 in
     rank order, one rounding (NCCL rounds per hop: its results may differ
     from these in the last bit).
   Before each collective, the ranks compare their calls: (collective,
     count, type, op) and the call's index on the communicator; a mismatch,
     which would hang or corrupt on real NCCL, is an error naming both
     ranks' calls.
   ncclCommGetAsyncError: the error of a failed collective; ncclCommAbort
     marks the communicator aborted (later collectives fail).
*/
#ifndef LLMC_CUDA_EMU_NCCL_H
#define LLMC_CUDA_EMU_NCCL_H

#include <chrono>
#include <thread>
#include <mpi.h>
#include "cuda_runtime.h"
#ifdef LLMC_EMU_GCOV
/* the counts of a rank that ends in MPI_Abort (cuda_runtime.h: --wrap=_exit's twin) */
extern "C" int __real_MPI_Abort(MPI_Comm, int);
extern "C" int __wrap_MPI_Abort(MPI_Comm c, int e) { __gcov_dump(); return __real_MPI_Abort(c, e); }
#endif
#include "cuda_bf16.h"

typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
               ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7 } ncclResult_t;
typedef enum { ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
               ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 } ncclDataType_t;
#define ncclFloat ncclFloat32
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
#define NCCL_VERSION_CODE 21900

struct ncclComm {
    MPI_Comm mc;
    int nranks, rank;
    unsigned long long calls = 0;
    std::atomic<int> async_err{0};
    std::atomic<int> aborted{0};
    char last[512] = "";
};
typedef ncclComm* ncclComm_t;

inline const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclSystemError: return "unhandled system error";
        default: return "internal error";
    }
}
inline const char* ncclGetLastError(ncclComm_t c) { return c ? c->last : ""; }
inline ncclResult_t ncclGetVersion(int* v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    emu::Rng r((uint64_t)getpid() * 1000003ull ^ (uint64_t)(emu::now_s() * 1e9));
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i += 8) { uint64_t v = r.next(); memcpy(id->internal + i, &v, 8); }
    memcpy(id->internal, "EMUNCCL", 7);
    return ncclSuccess;
}

inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
        emu::fail("ncclCommInitRank: the emulated NCCL needs MPI_THREAD_MULTIPLE (the MPI library gave level %d)", provided);
    if (memcmp(id.internal, "EMUNCCL", 7) != 0) emu::fail("ncclCommInitRank: the id was not made by ncclGetUniqueId (rank %d)", rank);
    if (rank < 0 || rank >= nranks) return ncclInvalidArgument;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) { h ^= (unsigned char)id.internal[i]; h *= 1099511628211ull; }
    ncclComm* c = new ncclComm();
    MPI_Comm_split(MPI_COMM_WORLD, (int)(h & 0x3fffffff), rank, &c->mc);
    int sz = 0, me = 0;
    MPI_Comm_size(c->mc, &sz);
    MPI_Comm_rank(c->mc, &me);
    if (sz != nranks || me != rank)
        emu::fail("ncclCommInitRank: rank %d of %d, but %d ranks gave this id (this one is %d among them)", rank, nranks, sz, me);
    c->nranks = nranks;
    c->rank = rank;
    *comm = c;
    return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t c) { if (c) { MPI_Comm_free(&c->mc); delete c; } return ncclSuccess; }
inline ncclResult_t ncclCommAbort(ncclComm_t c) { if (c) c->aborted = 1; return ncclSuccess; }
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* r) { *r = c ? (ncclResult_t)c->async_err.load() : ncclSuccess; return ncclSuccess; }
inline ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
inline ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

namespace emu {
enum { NC_ALL_REDUCE = 1, NC_REDUCE_SCATTER = 2, NC_ALL_GATHER = 3 };
inline const char* nc_name(long long k) { return k == 1 ? "ncclAllReduce" : k == 2 ? "ncclReduceScatter" : k == 3 ? "ncclAllGather" : "?"; }
inline size_t nc_size(ncclDataType_t t) {
    switch (t) { case ncclBfloat16: case ncclFloat16: return 2; case ncclFloat32: case ncclInt32: case ncclUint32: return 4;
                 case ncclFloat64: case ncclInt64: case ncclUint64: return 8; default: return 1; }
}
inline float nc_get(const void* p, size_t i, ncclDataType_t t) {
    return t == ncclBfloat16 ? (float)((const __nv_bfloat16*)p)[i] : ((const float*)p)[i];
}
inline void nc_put(void* p, size_t i, float v, ncclDataType_t t) {
    if (t == ncclBfloat16) ((__nv_bfloat16*)p)[i] = __float2bfloat16_rn(v);
    else ((float*)p)[i] = v;
}
/* runs on the stream's worker: the call check, then the data */
inline void nc_run(ncclComm_t c, int kind, const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                   unsigned long long seq) {
    if (c->aborted) { c->async_err = ncclInvalidUsage; return; }
    long long mine[5] = {kind, (long long)count, (long long)t, (long long)op, (long long)seq};
    std::vector<long long> all((size_t)5 * c->nranks);
    MPI_Allgather(mine, 5, MPI_LONG_LONG, all.data(), 5, MPI_LONG_LONG, c->mc);
    for (int q = 0; q < c->nranks; q++) {
        const long long* o = &all[(size_t)5 * q];
        if (memcmp(o, mine, sizeof(mine)) != 0)
            fail("NCCL calls differ between ranks (a real NCCL would hang or corrupt): rank %d's call %llu is %s(count %lld, type %lld, op %lld), "
                 "rank %d's call %lld is %s(count %lld, type %lld, op %lld)", c->rank, seq, nc_name(kind), (long long)count, (long long)t,
                 (long long)op, q, o[4], nc_name(o[0]), o[1], o[2], o[3]);
    }
    size_t es = nc_size(t), n = c->nranks;
    if (mem_kind(send) == MEM_DEVICE)
        check_written(nc_name(kind), "the send buffer's", send, kind == NC_REDUCE_SCATTER ? count * n : count, es);
    if (t != ncclBfloat16 && t != ncclFloat32 && kind != NC_ALL_GATHER) fail("%s: type %d is not emulated", nc_name(kind), (int)t);
    if (op != ncclSum && kind != NC_ALL_GATHER) fail("%s: op %d is not emulated (ncclSum only)", nc_name(kind), (int)op);
    if (kind == NC_ALL_GATHER) {
        std::vector<char> tmp(count * es * n);
        MPI_Allgather(send, (int)(count * es), MPI_BYTE, tmp.data(), (int)(count * es), MPI_BYTE, c->mc);
        memcpy(recv, tmp.data(), tmp.size());
    } else if (kind == NC_REDUCE_SCATTER) {
        std::vector<char> tmp(count * es * n);
        MPI_Alltoall(send, (int)(count * es), MPI_BYTE, tmp.data(), (int)(count * es), MPI_BYTE, c->mc);
        for (size_t i = 0; i < count; i++) {
            float s = 0.0f;
            for (size_t q = 0; q < n; q++) s += nc_get(tmp.data() + q * count * es, i, t);
            nc_put(recv, i, s, t);
        }
    } else {
        std::vector<char> tmp(count * es * n);
        MPI_Allgather(send, (int)(count * es), MPI_BYTE, tmp.data(), (int)(count * es), MPI_BYTE, c->mc);
        for (size_t i = 0; i < count; i++) {
            float s = 0.0f;
            for (size_t q = 0; q < n; q++) s += nc_get(tmp.data() + q * count * es, i, t);
            nc_put(recv, i, s, t);
        }
    }
}
inline ncclResult_t nc_enqueue(const char* call, ncclComm_t c, int kind, const void* send, void* recv, size_t count, size_t send_elems,
                               size_t recv_elems, ncclDataType_t t, ncclRedOp_t op, cudaStream_t s) {
    if (!c) return ncclInvalidArgument;
    if (c->aborted) { snprintf(c->last, sizeof(c->last), "%s on an aborted communicator", call); return ncclInvalidUsage; }
    size_t es = nc_size(t), off = 0, sz = 0;
    if (count && (mem_kind(send, &off, &sz) != MEM_DEVICE || off + send_elems * es > sz))
        fail("%s: the send buffer (%zu elements) is not inside a device allocation", call, send_elems);
    if (count && (mem_kind(recv, &off, &sz) != MEM_DEVICE || off + recv_elems * es > sz))
        fail("%s: the receive buffer (%zu elements) is not inside a device allocation", call, recv_elems);
    if (count * es * (size_t)c->nranks > (size_t)0x7fffffff) fail("%s of %zu elements: past the emulation's MPI int count", call, count);
    RaceAccess ra[2] = {{send, send_elems * es, false, "the send buffer", -1}, {recv, recv_elems * es, true, "the receive buffer", -1}};
    race_op(s, call, ra, 2);   /* emu_streamrace.h */
    unsigned long long seq = ++c->calls;
    /* LLMC_EMU_NCCL_DELAY_US=N: every collective waits N us on its stream before it runs (a slow or
       stuck interconnect: the caller's GPU wait sees the NCCL call pending) */
    static long slow_us = [] { const char* e = getenv("LLMC_EMU_NCCL_DELAY_US"); return e ? atol(e) : 0L; }();
    enqueue(s, [=] {
        if (slow_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(slow_us));
        nc_run(c, kind, send, recv, count, t, op, seq);
    });
    return ncclSuccess;
}
} /* namespace emu */

inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    return emu::nc_enqueue("ncclAllReduce", c, emu::NC_ALL_REDUCE, send, recv, count, count, count, t, op, s);
}
/* recv = the sum of every rank's send[rank * count ...): count elements */
inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    return emu::nc_enqueue("ncclReduceScatter", c, emu::NC_REDUCE_SCATTER, send, recv, count, count * (c ? c->nranks : 1), count, t, op, s);
}
inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    return emu::nc_enqueue("ncclAllGather", c, emu::NC_ALL_GATHER, send, recv, count, count, count * (c ? c->nranks : 1), t, ncclSum, s);
}

#endif /* LLMC_CUDA_EMU_NCCL_H */
