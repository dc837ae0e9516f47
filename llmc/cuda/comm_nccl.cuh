/*
 cuda/comm_nccl.cuh: the CUDA build's process group on the GPUs: device
 selection, the compute and communication streams, and the collectives of
 the ZeRO engine on bf16 device buffers, in one of two modes:

   NCCL        (every rank has its own GPU) ncclReduceScatter / ncclAllGather
               on the comm stream (ncclBfloat16, ncclSum: fp32 inside,
               rounded to bf16 per hop), ordered with events (below).
   host-staged (several ranks share one GPU, which NCCL cannot do) device ->
               host copy, the deterministic MPI collectives of comm.h that
               the CPU build uses (rank-order fp32 sum, one rounding), host
               -> device copy; synchronous (fence 0). Bitwise the CPU bf16
               program's reductions, at the price of the copies: a test and
               development mode (stages 1-3 with N > 1 on one GPU).
 LLMC_COLLECTIVES=nccl|host|auto selects it (default auto: host-staged when
 two ranks see the same GPU, by UUID, else NCCL). The banner says which.

 backend_init(c), right after comm_init:
   - GPU: local_rank on a node with >= local_size visible GPUs; device 0 when
     each rank sees exactly one GPU (slurm --gpus-per-task=1 or
     CUDA_VISIBLE_DEVICES set per rank); in host-staged mode local_rank %
     GPUs; otherwise a clear error.
   - NCCL mode: rank 0 calls ncclGetUniqueId, MPI_Bcast gives the id to every
     rank, ncclCommInitRank(world_size, id, rank). Host-staged: no NCCL.
   - streams: compute (all kernels, copies, memsets) and comm (collectives,
     highest priority), both non-blocking with respect to the legacy stream.

 Ordering of an NCCL collective (sizes in elements, as the CPU backend):
   1. an event recorded on the compute stream; the comm stream waits on it,
      so the collective sees everything computed before the call and never
      overwrites a buffer a queued kernel still reads;
   2. the NCCL call on the comm stream;
   3. an event recorded on the comm stream (its "fence", a sequence number).
 backend_reduce_scatter_start, backend_all_gather_start (both over the shard
 group: all ranks unless HSDP) and backend_all_reduce_replicas_start (HSDP:
 across the replica groups) return the fence
 WITHOUT waiting: the caller calls backend_wait_comm(fence) before any
 kernel touches the buffers, which lets a prefetched all-gather run while
 the compute stream works on the current unit. Nothing in a step
 synchronises the device in NCCL mode; host waits happen only in
 backend_to_host, backend_floatX_to_floats / floats_to_floatX, sum_squares
 and backend_synchronize, and they poll: an asynchronous NCCL error or a wait
 longer than LLMC_GPU_TIMEOUT seconds (default 900, 0 = forever) ends every
 rank through comm_fatal instead of hanging.

 Traffic: each collective calls comm_count() once with the same byte counts
 as the CPU backend (full-buffer bytes, see traffic.h).
*/
#ifndef LLMC_CUDA_COMM_NCCL_CUH
#define LLMC_CUDA_COMM_NCCL_CUH

#include <mpi.h>
#include <nccl.h>
#include "common.cuh"
#include "matmul.cuh"
#include "gelu.cuh"
#include "../comm_host.h"
#include "../quant.h"
#include "../trace.h"

/* ring of comm-stream events (fence n uses n % NCCL_FENCES); a test may
   define it smaller before including the backend, so that the ring wraps */
#ifndef NCCL_FENCES
#define NCCL_FENCES 64
#endif

typedef struct {
    int ready;                            /* backend_init done (streams, events) */
    int host;                             /* 1: host-staged collectives, no NCCL */
    Comm* comm;
    ncclComm_t nccl;                      /* the shard group (all ranks unless HSDP); NULL host-staged */
    ncclComm_t nccl_rep;                  /* the replica group (HSDP), NULL when R = 1 or host-staged */
    cudaStream_t comm_stream;
    cudaEvent_t compute_mark;             /* recorded on compute before each collective */
    cudaEvent_t fences[NCCL_FENCES];      /* recorded on comm after each collective */
    unsigned long long issued;            /* fences handed out (1, 2, ...) */
    unsigned long long waited;            /* compute stream already waits on fences <= this */
    double timeout_s;
    const char* fence_call[NCCL_FENCES];  /* the NCCL call of fence n (n % NCCL_FENCES), for a timeout's message */
    size_t fence_count[NCCL_FENCES];      /* its count argument (elements) */
} NcclState;
static NcclState nccl_state;

/* ------------------------------------------------------------------------ */
/* trace marks on the device (trace.h): a pool of cudaEvents recorded on the
   stream of the event's track, resolved against a base event after the
   traced steps */
#define CUDA_TRACE_EVENTS 65536
static cudaEvent_t cuda_trace_ev[CUDA_TRACE_EVENTS];
static int cuda_trace_n = 0, cuda_trace_based = 0;
static cudaEvent_t cuda_trace_base;
static double cuda_trace_base_s = 0.0;

static int cuda_trace_record(int tid) {
    if (!cuda_trace_based) {
        cudaCheck(cudaEventCreate(&cuda_trace_base));
        cudaCheck(cudaEventRecord(cuda_trace_base, cuda_ctx.stream));
        cudaCheck(cudaEventSynchronize(cuda_trace_base));
        cuda_trace_base_s = wall_seconds() - tracer.t0;
        cuda_trace_based = 1;
    }
    if (cuda_trace_n >= CUDA_TRACE_EVENTS) return -1;
    cudaEvent_t* e = &cuda_trace_ev[cuda_trace_n];
    if (!*e) cudaCheck(cudaEventCreate(e));
    cudaCheck(cudaEventRecord(*e, tid == TRACE_TID_COMM ? nccl_state.comm_stream : cuda_ctx.stream));
    return cuda_trace_n++;
}

static double cuda_trace_resolve(int h) {
    float ms = 0.0f;
    cudaCheck(cudaEventSynchronize(cuda_trace_ev[h]));
    cudaCheck(cudaEventElapsedTime(&ms, cuda_trace_base, cuda_trace_ev[h]));
    return cuda_trace_base_s + 1e-3 * (double)ms;
}


static void nccl_check_(ncclResult_t r, const char* call, const char* file, int line) {
    if (r != ncclSuccess)
        cuda_fatal("NCCL error %s in %s at %s:%d%s%s", ncclGetErrorString(r), call, file, line,
                   nccl_state.nccl ? ": " : "", nccl_state.nccl ? ncclGetLastError(nccl_state.nccl) : "");
}
#define ncclCheck(call) nccl_check_((call), #call, __FILE__, __LINE__)

/* the trainer's fatal hook: one line, then MPI_Abort on every rank */
static void nccl_fatal_hook(const char* msg) {
    comm_fatal(nccl_state.comm, "%s", msg);
}

/* The oldest collective of the comm stream not complete, for the timeout's
   message: "ncclAllGather #12 (count 4096) has not completed", or that every
   collective issued (the last NCCL_FENCES of them are checked) completed.
   Queries the fence events (cudaEventQuery: no wait). */
static void nccl_pending(char* out, size_t n) {
    unsigned long long f0 = nccl_state.issued > NCCL_FENCES ? nccl_state.issued - NCCL_FENCES + 1 : 1;
    for (unsigned long long f = f0; f <= nccl_state.issued; f++) {
        cudaError_t q = cudaEventQuery(nccl_state.fences[f % NCCL_FENCES]);
        if (q == cudaSuccess) continue;
        (void)cudaGetLastError();
        const char* call = nccl_state.fence_call[f % NCCL_FENCES];
        snprintf(out, n, "%s #%llu (count %zu) of the comm stream has not completed", call ? call : "collective", f,
                 nccl_state.fence_count[f % NCCL_FENCES]);
        return;
    }
    snprintf(out, n, "every NCCL collective issued (%llu) completed: the wait is for a kernel or a copy", nccl_state.issued);
}

/* Called by every polling host wait (common.cuh) every 256 polls: ends the
   run on NCCL's asynchronous error state (a collective failed, e.g. a peer
   died) or once the wait exceeds LLMC_GPU_TIMEOUT seconds; a signal found
   waiting writes the flight record (which holds this build's host-staged
   and MPI collectives, not its NCCL calls). */
static void nccl_poll_hook(double waited) {
    if (intr_pending()) {   /* a signal while the GPU is waited for: say where, once (comm_watch.h) */
        double now = wall_seconds();
        comm_notice_signal(MPI_COMM_NULL, 0, NULL, "a wait for the GPU (a kernel or an NCCL collective)", now - waited, now);
    }
    if (nccl_state.nccl) {
        ncclResult_t ar = ncclSuccess;
        ncclCheck(ncclCommGetAsyncError(nccl_state.nccl, &ar));
        if (ar == ncclSuccess && nccl_state.nccl_rep) ncclCheck(ncclCommGetAsyncError(nccl_state.nccl_rep, &ar));
        if (ar != ncclSuccess) {
            ncclCommAbort(nccl_state.nccl);
            nccl_state.nccl = NULL;
            if (nccl_state.nccl_rep) { ncclCommAbort(nccl_state.nccl_rep); nccl_state.nccl_rep = NULL; }
            cuda_fatal("NCCL asynchronous error %s (a collective failed; another rank may have died)",
                       ncclGetErrorString(ar));
        }
    }
    if (nccl_state.timeout_s > 0 && waited > nccl_state.timeout_s) {
        char pending[160];
        nccl_pending(pending, sizeof(pending));
        if (nccl_state.nccl) { ncclCommAbort(nccl_state.nccl); nccl_state.nccl = NULL; }
        if (nccl_state.nccl_rep) { ncclCommAbort(nccl_state.nccl_rep); nccl_state.nccl_rep = NULL; }
        cuda_fatal("waited more than %.0f s for the GPU at step %d (%s; a collective may be waiting for a rank that is "
                   "gone; NCCL communicators aborted; --collective-timeout or LLMC_GPU_TIMEOUT change the limit)",
                   nccl_state.timeout_s, comm_watch.step, pending);
    }
}

/* The collectives' mode from LLMC_COLLECTIVES: 0 NCCL, 1 host-staged, -1 auto. */
static int nccl_mode_from_env(char* err, size_t errlen) {
    const char* m = getenv("LLMC_COLLECTIVES");
    if (!m || !m[0] || !strcmp(m, "auto")) return -1;
    if (!strcmp(m, "nccl")) return 0;
    if (!strcmp(m, "host")) return 1;
    snprintf(err, errlen, "LLMC_COLLECTIVES=%s: must be nccl, host or auto", m);
    return -1;
}

/* Pick the GPU, create streams, cuBLAS(Lt) and, in NCCL mode, the NCCL
   communicator. Collective: every rank must call it (after comm_init).
   Errors end every rank with one line. (About 95 lines: the GPU, the mode
   agreed over the ranks, then the communicators, in the one order NCCL's
   bootstrap needs; each step ends in its own collective error check.) */
static void backend_init(Comm* c) {
    nccl_state.comm = c;
    cuda_fatal_hook = nccl_fatal_hook;
    /* the set-up errors every rank meets alike (no GPU, a bad setting):
       one line from the lowest failing rank, exit 1 everywhere (comm_check_all) */
    char err[256] = "";
    int mode = nccl_mode_from_env(err, sizeof(err));
    {   /* an environment variable is read per rank: every rank must give the
           same LLMC_COLLECTIVES (docs/design.md section 11) */
        int mm[2] = {mode, -mode}, r[2];
        MPI_Allreduce(mm, r, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (!err[0] && r[0] != -r[1])
            snprintf(err, sizeof(err), "LLMC_COLLECTIVES differs between the ranks (this rank: %s): every rank must give the same value, or none",
                     mode == 0 ? "nccl" : mode == 1 ? "host" : "auto");
    }
    int ndev = 0, dev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (!err[0] && (e != cudaSuccess || ndev == 0))
        snprintf(err, sizeof(err), "no usable CUDA device (cudaGetDeviceCount: %s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    (void)cudaGetLastError();
    if (!err[0]) {
        if (ndev >= c->local_size) dev = c->local_rank;
        else if (ndev == 1) dev = 0;
        else if (mode == 1) dev = c->local_rank % ndev;
        else snprintf(err, sizeof(err), "%d ranks on this node but %d visible GPUs: run at most %d ranks per node "
                      "(or give each rank one GPU with CUDA_VISIBLE_DEVICES / --gpus-per-task=1, "
                      "or share GPUs with LLMC_COLLECTIVES=host)", c->local_size, ndev, ndev);
    }
    comm_check_all(c, err);
    cudaCheck(cudaSetDevice(dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    cuda_ctx.device = dev;
    cuda_ctx.num_sms = prop.multiProcessorCount;

    /* does any other rank drive the same GPU? (NCCL needs one GPU per rank) */
    unsigned char* uuids = (unsigned char*)malloc((size_t)16 * c->world_size);
    if (!uuids) cuda_fatal("out of host memory");
    MPI_Allgather(prop.uuid.bytes, 16, MPI_BYTE, uuids, 16, MPI_BYTE, MPI_COMM_WORLD);
    int share_with = -1;
    for (int q = 0; q < c->world_size && share_with < 0; q++)
        if (q != c->rank && !memcmp(uuids + 16 * (size_t)q, uuids + 16 * (size_t)c->rank, 16)) share_with = q;
    int any_share = share_with >= 0 ? 1 : 0, all_share = 0;
    MPI_Allreduce(&any_share, &all_share, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    free(uuids);
    if (mode == -1) mode = all_share ? 1 : 0;
    if (mode == 0 && all_share)
        snprintf(err, sizeof(err), "LLMC_COLLECTIVES=nccl but ranks share a GPU: NCCL needs one GPU per rank; "
                 "use LLMC_COLLECTIVES=host (or auto) to share");
    comm_check_all(c, err);
    nccl_state.host = mode;

    int least = 0, greatest = 0;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithFlags(&cuda_ctx.stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithPriority(&nccl_state.comm_stream, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaEventCreateWithFlags(&nccl_state.compute_mark, cudaEventDisableTiming));
    for (int i = 0; i < NCCL_FENCES; i++) cudaCheck(cudaEventCreateWithFlags(&nccl_state.fences[i], cudaEventDisableTiming));
    cuda_blas_init();
    cublasCheck(cublasSetStream(gemm_state.blas, cuda_ctx.stream));
    const char* to = getenv("LLMC_GPU_TIMEOUT");
    double gpu_timeout = to ? atof(to) : comm_watch.timeout_s;     /* --collective-timeout (comm.h); LLMC_GPU_TIMEOUT overrides */
    MPI_Bcast(&gpu_timeout, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);      /* rank 0's, so every rank waits as long */
    nccl_state.timeout_s = gpu_timeout;
    cuda_poll_hook = nccl_poll_hook;

    nccl_state.nccl_rep = NULL;
    if (!nccl_state.host) {
        /* one NCCL communicator per shard group (its rank 0 makes the id, the
           group's MPI communicator carries it), and per replica group (HSDP) */
        ncclUniqueId id;
        memset(&id, 0, sizeof(id));
        if (c->group_rank == 0) ncclCheck(ncclGetUniqueId(&id));
        MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, c->group_host);
        ncclCheck(ncclCommInitRank(&nccl_state.nccl, c->group_size, id, c->group_rank));
        if (c->replica_size > 1) {
            memset(&id, 0, sizeof(id));
            if (c->replica_rank == 0) ncclCheck(ncclGetUniqueId(&id));
            MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, c->replica_comm);
            ncclCheck(ncclCommInitRank(&nccl_state.nccl_rep, c->replica_size, id, c->replica_rank));
        }
    }
    nccl_state.ready = 1;
    c->backend = &nccl_state;
    tracer.dev_record = cuda_trace_record;
    tracer.dev_resolve = cuda_trace_resolve;
    if (c->rank == 0) {
        int v = 0;
        ncclGetVersion(&v);
        char how[128];
        if (nccl_state.host) snprintf(how, sizeof(how), "collectives host-staged over MPI (deterministic, rank order)");
        else snprintf(how, sizeof(how), "collectives NCCL %d", v);
        printf("backend cuda-bf16: %d rank(s), rank 0 on GPU %d of %d (%s, %d SMs, %.1f GiB), %s%s\n",
               c->world_size, dev, ndev, prop.name, prop.multiProcessorCount,
               (double)prop.totalGlobalMem / (1 << 30), how,
#ifdef LLMC_MPI_STUB
               ", built without MPI (one rank only)"
#else
               ""
#endif
        );
        fflush(stdout);
    }
}

/* Optional clean shutdown (before comm_finalize): waits for both streams and
   destroys the communicator. */
static void backend_finalize(Comm* c) {
    (void)c;
    if (!nccl_state.ready) return;
    cuda_wait_stream(cuda_ctx.stream);
    cuda_wait_stream(nccl_state.comm_stream);
    if (nccl_state.nccl) ncclCommDestroy(nccl_state.nccl);
    nccl_state.nccl = NULL;
    if (nccl_state.nccl_rep) { ncclCommDestroy(nccl_state.nccl_rep); nccl_state.nccl_rep = NULL; }
    nccl_state.ready = 0;
}

static void nccl_require(void) {
    if (!nccl_state.ready) cuda_fatal("a collective was called before backend_init(&comm)");
}

/* step 1 of every collective: comm stream waits for the compute stream */
static void nccl_begin(void) {
    nccl_require();
    cudaCheck(cudaEventRecord(nccl_state.compute_mark, cuda_ctx.stream));
    cudaCheck(cudaStreamWaitEvent(nccl_state.comm_stream, nccl_state.compute_mark, 0));
}

/* the trace event of the collective about to be enqueued */
static void nccl_trace(Comm* c, int kind, unsigned long long bytes) {
    trace_begin_coll(c->cur_unit, bytes, coll_name(c->purpose_embedding && kind == COLL_ALL_GATHER ? COLL_EMB_GATHER : kind));
}

/* step 3: the fence of the collective just enqueued (call: its NCCL
   function's name, count: its count argument, both for a timeout's message) */
static unsigned long long nccl_end(const char* call, size_t count) {
    trace_end(TRACE_TID_COMM);
    unsigned long long f = ++nccl_state.issued;
    nccl_state.fence_call[f % NCCL_FENCES] = call;
    nccl_state.fence_count[f % NCCL_FENCES] = count;
    cudaCheck(cudaEventRecord(nccl_state.fences[f % NCCL_FENCES], nccl_state.comm_stream));
    return f;
}

/* The compute stream waits (on the device, not the host) until the
   collectives up to `fence` are complete. fence 0 = nothing. Waiting on a
   fence older than NCCL_FENCES collectives waits on a later one (its event
   was re-recorded), which is later in the in-order comm stream: safe. */
static inline void backend_wait_comm(unsigned long long fence) {
    if (fence == 0 || fence <= nccl_state.waited) return;
    cudaCheck(cudaStreamWaitEvent(cuda_ctx.stream, nccl_state.fences[fence % NCCL_FENCES], 0));
    nccl_state.waited = fence;
}

/* NCCL's reduce-scatter is in place: no receive area on the device (see
   zero.h); the host-staged mode's receive area is pinned host memory. */
#define BACKEND_RS_SCRATCH 0

/* ---- host-staged collectives: pinned staging buffers (grow-only, host
   memory, outside the device ledger) */
static struct {
    uint16_t* p[3];     /* 0: the N*shard buffer, 1: all-to-all receive area, 2: acc */
    size_t elems[3];
} host_stage;
static uint16_t* host_stage_get(int k, size_t n) {
    if (n > host_stage.elems[k]) {
        if (host_stage.p[k]) {
            cuda_wait_compute(); /* an upload queued from it may still be pending */
            cudaCheck(cudaFreeHost(host_stage.p[k]));
        }
        size_t m = n + n / 4;
        cudaCheck(cudaMallocHost((void**)&host_stage.p[k], m * sizeof(uint16_t)));
        host_stage.elems[k] = m;
    }
    return host_stage.p[k];
}
static void host_stage_check(Comm* c, const char* what, size_t shard) {
    if (shard > (size_t)0x7fffffff) comm_fatal(c, "%s of %zu elements per rank exceeds the MPI int count", what, shard);
}

/* Host-staged reduce-scatter (see backend_reduce_scatter_start): the whole
   buffer (and acc) to the host after every kernel queued before, comm.h's
   hostcoll_reduce_scatter (all-to-all, rank-order fp32 sum, one rounding),
   the result back. The uploads are queued on the compute stream, so later
   kernels see them; the next collective's download, queued behind them,
   cannot overwrite the staging buffers early. Fence 0 (complete). */
static unsigned long long host_reduce_scatter(Comm* c, floatX* buf, size_t shard, floatX* acc) {
    host_stage_check(c, "reduce-scatter", shard);
    size_t n = shard * (size_t)c->group_size;
    uint16_t* h = host_stage_get(0, n);
    uint16_t* scratch = host_stage_get(1, n);
    uint16_t* ha = acc ? host_stage_get(2, shard) : NULL;
    cudaCheck(cudaMemcpyAsync(h, buf, n * sizeof(floatX), cudaMemcpyDeviceToHost, cuda_ctx.stream));
    if (acc) cudaCheck(cudaMemcpyAsync(ha, acc, shard * sizeof(floatX), cudaMemcpyDeviceToHost, cuda_ctx.stream));
    cuda_wait_compute();
    hostcoll_reduce_scatter(c->group_comm, h, shard, 2, scratch, ha, 1);
    if (acc) cudaCheck(cudaMemcpyAsync(acc, ha, shard * sizeof(floatX), cudaMemcpyHostToDevice, cuda_ctx.stream));
    else cudaCheck(cudaMemcpyAsync(buf + (size_t)c->group_rank * shard, h + (size_t)c->group_rank * shard,
                                   shard * sizeof(floatX), cudaMemcpyHostToDevice, cuda_ctx.stream));
    return 0;
}

/* Host-staged all-gather: this rank's shard to the host, comm.h's
   hostcoll_all_gather (MPI_Allgather in place), the whole buffer back. */
static unsigned long long host_all_gather(Comm* c, floatX* buf, size_t shard) {
    host_stage_check(c, "all-gather", shard);
    size_t n = shard * (size_t)c->group_size, off = (size_t)c->group_rank * shard;
    uint16_t* h = host_stage_get(0, n);
    cudaCheck(cudaMemcpyAsync(h + off, buf + off, shard * sizeof(floatX), cudaMemcpyDeviceToHost, cuda_ctx.stream));
    cuda_wait_compute();
    hostcoll_all_gather(c->group_comm, h, shard, 2, 0);
    cudaCheck(cudaMemcpyAsync(buf, h, n * sizeof(floatX), cudaMemcpyHostToDevice, cuda_ctx.stream));
    return 0;
}

/* Host-staged all-reduce over the replica groups (HSDP): comm.h's
   hostcoll_all_reduce (reduce-scatter + all-gather, rank-order sums). */
static unsigned long long host_all_reduce_replicas(Comm* c, floatX* buf, size_t n) {
    host_stage_check(c, "all-reduce", n);
    uint16_t* h = host_stage_get(0, n);
    uint16_t* scratch = host_stage_get(1, n);
    cudaCheck(cudaMemcpyAsync(h, buf, n * sizeof(floatX), cudaMemcpyDeviceToHost, cuda_ctx.stream));
    cuda_wait_compute();
    hostcoll_all_reduce(c->replica_comm, h, n, 2, scratch, 1);
    cudaCheck(cudaMemcpyAsync(buf, h, n * sizeof(floatX), cudaMemcpyHostToDevice, cuda_ctx.stream));
    return 0;
}

/* In place over N*shard elements: the sum over ranks of shard r (NCCL,
   ncclBfloat16, fp32 inside, rounded per hop) lands at buf + r*shard on rank
   r (acc == NULL; the rest of buf is undefined: recvbuff = sendbuff +
   rank*recvcount), or is then added into acc[0..shard) (acc != NULL; an fp32
   add with one rounding, on the comm stream, covered by the fence). Returns
   the fence; the caller waits with backend_wait_comm before touching buf or
   acc. Host-staged: comm.h's deterministic sum, acc[i] = round(acc[i] + sum)
   with ONE rounding (as the CPU build), fence 0. */
static inline unsigned long long backend_reduce_scatter_start(Comm* c, floatX* buf, size_t shard, floatX* acc) {
    unsigned long long bytes = (unsigned long long)shard * (unsigned long long)c->group_size * sizeof(floatX);
    if (nccl_state.host) {
        nccl_require();
        nccl_trace(c, COLL_REDUCE_SCATTER, bytes);
        unsigned long long f = host_reduce_scatter(c, buf, shard, acc);
        trace_end(TRACE_TID_COMM);
        comm_count(c, COLL_REDUCE_SCATTER, bytes, c->group_size);
        return f;
    }
    nccl_begin();
    nccl_trace(c, COLL_REDUCE_SCATTER, (unsigned long long)shard * (unsigned long long)c->group_size * sizeof(floatX));
    floatX* mine = buf + (size_t)c->group_rank * shard;
    ncclCheck(ncclReduceScatter(buf, mine, shard, ncclBfloat16, ncclSum, nccl_state.nccl, nccl_state.comm_stream));
    if (acc) elementwise_launch<2>(acc, acc, mine, shard, "reduce-scatter accumulate", nccl_state.comm_stream);
    unsigned long long f = nccl_end("ncclReduceScatter", shard);
    comm_count(c, COLL_REDUCE_SCATTER, bytes, c->group_size);
    return f;
}

/* HSDP: buf[0..n) summed over the replica groups, in place (NCCL on the comm
   stream, or host-staged: comm.h's deterministic all-reduce, n a multiple of
   the replica count); returns the fence. */
static inline unsigned long long backend_all_reduce_replicas_start(Comm* c, floatX* buf, size_t n) {
    if (c->replica_size <= 1) return 0;
    unsigned long long f;
    if (nccl_state.host) {
        nccl_require();
        nccl_trace(c, COLL_ALL_REDUCE, (unsigned long long)n * sizeof(floatX));
        f = host_all_reduce_replicas(c, buf, n);
        trace_end(TRACE_TID_COMM);
    } else {
        nccl_begin();
        nccl_trace(c, COLL_ALL_REDUCE, (unsigned long long)n * sizeof(floatX));
        ncclCheck(ncclAllReduce(buf, buf, n, ncclBfloat16, ncclSum, nccl_state.nccl_rep, nccl_state.comm_stream));
        f = nccl_end("ncclAllReduce", n);
    }
    comm_count(c, COLL_ALL_REDUCE, (unsigned long long)n * sizeof(floatX), c->replica_size);
    return f;
}

/* Seconds of communication and of waiting for it: not measured on the GPU
   (the comm stream runs asynchronously; a trace would need CUDA events). */
static inline void backend_comm_seconds(double* busy, double* waited) { *busy = 0.0; *waited = 0.0; }

/* qwZ's quantized all-gather (llmc/quant.h): not in the CUDA build yet
   (train_gpt refuses --quantize-weights there before a plan is built);
   the engine's call compiles to this error. */
static inline unsigned long long backend_all_gather_quantized_start(Comm* c, floatX* buf, const QuantLayout* Q, size_t qblocks, int u) {
    (void)buf; (void)Q; (void)qblocks; (void)u;
    comm_fatal(c, "--quantize-weights: the CUDA build has no quantized all-gather yet");
    return 0;
}

/* qgZ's quantized reduce-scatter: not in the CUDA build yet (refused there). */
static inline unsigned long long backend_reduce_scatter_quantized_start(Comm* c, floatX* buf, const QuantLayout* Q, size_t qblocks,
                                                                        floatX* acc, int u) {
    (void)buf; (void)Q; (void)qblocks; (void)acc; (void)u;
    comm_fatal(c, "--quantize-grads: the CUDA build has no quantized reduce-scatter yet");
    return 0;
}

/* hpZ's secondary all-gather: not in the CUDA build yet (refused there). */
static inline unsigned long long backend_all_gather_secondary_start(Comm* c, floatX* buf, size_t part, const floatX* sec) {
    (void)buf; (void)part; (void)sec;
    comm_fatal(c, "--secondary-shard: the CUDA build has no secondary all-gather yet");
    return 0;
}

/* In place: rank r's shard elements sit at buf + r*shard; afterwards every
   rank has all. Returns the fence; the caller waits with backend_wait_comm
   before using buf (see the header comment). */
static inline unsigned long long backend_all_gather_start(Comm* c, floatX* buf, size_t shard) {
    unsigned long long bytes = (unsigned long long)shard * (unsigned long long)c->group_size * sizeof(floatX);
    if (nccl_state.host) {
        nccl_require();
        nccl_trace(c, COLL_ALL_GATHER, bytes);
        unsigned long long f = host_all_gather(c, buf, shard);
        trace_end(TRACE_TID_COMM);
        comm_count(c, COLL_ALL_GATHER, bytes, c->group_size);
        return f;
    }
    nccl_begin();
    nccl_trace(c, COLL_ALL_GATHER, (unsigned long long)shard * (unsigned long long)c->group_size * sizeof(floatX));
    ncclCheck(ncclAllGather(buf + (size_t)c->group_rank * shard, buf, shard, ncclBfloat16, nccl_state.nccl,
                            nccl_state.comm_stream));
    unsigned long long f = nccl_end("ncclAllGather", shard);
    comm_count(c, COLL_ALL_GATHER, bytes, c->group_size);
    return f;
}

static inline void backend_all_gather(Comm* c, floatX* buf, size_t shard) {
    backend_wait_comm(backend_all_gather_start(c, buf, shard));
}

#endif /* LLMC_CUDA_COMM_NCCL_CUH */
