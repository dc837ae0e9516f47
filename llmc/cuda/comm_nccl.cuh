/*
 cuda/comm_nccl.cuh: the CUDA build's process group on the GPUs: device
 selection, the NCCL communicator (bootstrapped over MPI), the compute and
 communication streams, and the collectives of the ZeRO engine on bf16
 device buffers (ncclBfloat16, ncclSum; NCCL reduces in fp32 internally and
 rounds to bf16 per hop).

 backend_init(c), right after comm_init:
   - GPU: local_rank on a node with >= local_size visible GPUs; device 0 when
     each rank sees exactly one GPU (slurm --gpus-per-task=1 or
     CUDA_VISIBLE_DEVICES set per rank); otherwise a clear error.
   - rank 0 calls ncclGetUniqueId, MPI_Bcast gives the id to every rank,
     ncclCommInitRank(world_size, id, rank).
   - streams: compute (all kernels, copies, memsets) and comm (collectives,
     highest priority), both non-blocking with respect to the legacy stream.

 Ordering of a collective (sizes in elements, as the CPU backend):
   1. an event recorded on the compute stream; the comm stream waits on it,
      so the collective sees everything computed before the call and never
      overwrites a buffer a queued kernel still reads;
   2. the NCCL call on the comm stream;
   3. an event recorded on the comm stream (its "fence", a sequence number).
 backend_all_reduce_sum, backend_reduce_scatter_sum and backend_all_gather
 then make the compute stream wait on that fence at once (safe for every
 caller, no host synchronisation). backend_all_gather_start returns the
 fence WITHOUT waiting: the caller must call backend_wait_comm(fence) before
 any kernel uses the gathered buffer, which lets a prefetched all-gather run
 while the compute stream works on the current unit. Nothing in a step
 synchronises the device; host waits happen only in backend_to_host,
 backend_floatX_to_floats / floats_to_floatX, sum_squares and
 backend_synchronize, and they poll: an asynchronous NCCL error or a wait
 longer than LLMC_GPU_TIMEOUT seconds (default 900, 0 = forever) ends every
 rank through comm_fatal instead of hanging.

 Traffic: each collective calls comm_count() once with the same byte counts
 as the CPU backend (full-buffer bytes, see comm.h).
*/
#ifndef LLMC_CUDA_COMM_NCCL_CUH
#define LLMC_CUDA_COMM_NCCL_CUH

#include <mpi.h>
#include <nccl.h>
#include "common.cuh"
#include "matmul.cuh"
#include "../comm.h"

/* ring of comm-stream events (fence n uses n % NCCL_FENCES); a test may
   define it smaller before including the backend, so that the ring wraps */
#ifndef NCCL_FENCES
#define NCCL_FENCES 64
#endif

typedef struct {
    int ready;
    Comm* comm;
    ncclComm_t nccl;
    cudaStream_t comm_stream;
    cudaEvent_t compute_mark;             /* recorded on compute before each collective */
    cudaEvent_t fences[NCCL_FENCES];      /* recorded on comm after each collective */
    unsigned long long issued;            /* fences handed out (1, 2, ...) */
    unsigned long long waited;            /* compute stream already waits on fences <= this */
    double timeout_s;
} NcclState;
static NcclState nccl_state;

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

/* Called by every polling host wait (common.cuh) every 256 polls: ends the
   run on NCCL's asynchronous error state (a collective failed, e.g. a peer
   died) or once the wait exceeds LLMC_GPU_TIMEOUT seconds. */
static void nccl_poll_hook(double waited) {
    if (nccl_state.ready) {
        ncclResult_t ar = ncclSuccess;
        ncclCheck(ncclCommGetAsyncError(nccl_state.nccl, &ar));
        if (ar != ncclSuccess) {
            ncclCommAbort(nccl_state.nccl);
            nccl_state.nccl = NULL;
            nccl_state.ready = 0;
            cuda_fatal("NCCL asynchronous error %s (a collective failed; another rank may have died)",
                       ncclGetErrorString(ar));
        }
    }
    if (nccl_state.timeout_s > 0 && waited > nccl_state.timeout_s) {
        if (nccl_state.ready) { ncclCommAbort(nccl_state.nccl); nccl_state.nccl = NULL; nccl_state.ready = 0; }
        cuda_fatal("waited more than %.0f s for the GPU (a collective may be waiting for a rank that is "
                   "gone; set LLMC_GPU_TIMEOUT to change the limit)", nccl_state.timeout_s);
    }
}

/* Pick the GPU, create streams, cuBLAS(Lt) and the NCCL communicator.
   Collective: every rank must call it (after comm_init). Errors end every
   rank with one line. */
static void backend_init(Comm* c) {
    nccl_state.comm = c;
    cuda_fatal_hook = nccl_fatal_hook;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0)
        cuda_fatal("no usable CUDA device on this rank (cudaGetDeviceCount: %s)",
                   e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    int dev;
    if (ndev >= c->local_size) dev = c->local_rank;
    else if (ndev == 1) dev = 0;
    else {
        cuda_fatal("%d ranks on this node but %d visible GPUs: run at most %d ranks per node "
                   "(or give each rank one GPU with CUDA_VISIBLE_DEVICES / --gpus-per-task=1)",
                   c->local_size, ndev, ndev);
        dev = 0;
    }
    cudaCheck(cudaSetDevice(dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    cuda_ctx.device = dev;
    cuda_ctx.num_sms = prop.multiProcessorCount;
    int least = 0, greatest = 0;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithFlags(&cuda_ctx.stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithPriority(&nccl_state.comm_stream, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaEventCreateWithFlags(&nccl_state.compute_mark, cudaEventDisableTiming));
    for (int i = 0; i < NCCL_FENCES; i++) cudaCheck(cudaEventCreateWithFlags(&nccl_state.fences[i], cudaEventDisableTiming));
    cuda_blas_init();
    cublasCheck(cublasSetStream(gemm_state.blas, cuda_ctx.stream));
    const char* to = getenv("LLMC_GPU_TIMEOUT");
    nccl_state.timeout_s = to ? atof(to) : 900.0;
    cuda_poll_hook = nccl_poll_hook;

    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (c->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclCheck(ncclCommInitRank(&nccl_state.nccl, c->world_size, id, c->rank));
    nccl_state.ready = 1;
    c->backend = &nccl_state;
    if (c->rank == 0) {
        int v = 0;
        ncclGetVersion(&v);
        printf("backend cuda-bf16: %d rank(s), rank 0 on GPU %d of %d (%s, %d SMs, %.1f GiB), NCCL %d%s\n",
               c->world_size, dev, ndev, prop.name, prop.multiProcessorCount,
               (double)prop.totalGlobalMem / (1 << 30), v,
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
    ncclCommDestroy(nccl_state.nccl);
    nccl_state.nccl = NULL;
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

/* step 3: the fence of the collective just enqueued */
static unsigned long long nccl_end(void) {
    unsigned long long f = ++nccl_state.issued;
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

/* NCCL's reduce-scatter is in place: no receive area (see zero.h). */
#define BACKEND_RS_SCRATCH 0

/* In place over N*shard elements: the sum over ranks of shard r (NCCL,
   ncclBfloat16, fp32 inside, rounded per hop) lands at buf + r*shard on rank
   r (acc == NULL; the rest of buf is undefined: recvbuff = sendbuff +
   rank*recvcount), or is then added into acc[0..shard) (acc != NULL; an fp32
   add with one rounding, on the comm stream, covered by the fence). Returns
   the fence; the caller waits with backend_wait_comm before touching buf or
   acc. */
static inline unsigned long long backend_reduce_scatter_start(Comm* c, floatX* buf, size_t shard, floatX* acc) {
    nccl_begin();
    floatX* mine = buf + (size_t)c->rank * shard;
    ncclCheck(ncclReduceScatter(buf, mine, shard, ncclBfloat16, ncclSum, nccl_state.nccl, nccl_state.comm_stream));
    if (acc) elementwise_launch<2>(acc, acc, mine, shard, "reduce-scatter accumulate", nccl_state.comm_stream);
    unsigned long long f = nccl_end();
    comm_count(c, COLL_REDUCE_SCATTER, (unsigned long long)shard * (unsigned long long)c->world_size * sizeof(floatX));
    return f;
}

/* In place: rank r's shard elements sit at buf + r*shard; afterwards every
   rank has all. Returns the fence; the caller waits with backend_wait_comm
   before using buf (see the header comment). */
static inline unsigned long long backend_all_gather_start(Comm* c, floatX* buf, size_t shard) {
    nccl_begin();
    ncclCheck(ncclAllGather(buf + (size_t)c->rank * shard, buf, shard, ncclBfloat16, nccl_state.nccl,
                            nccl_state.comm_stream));
    unsigned long long f = nccl_end();
    comm_count(c, COLL_ALL_GATHER, (unsigned long long)shard * (unsigned long long)c->world_size * sizeof(floatX));
    return f;
}

static inline void backend_all_gather(Comm* c, floatX* buf, size_t shard) {
    backend_wait_comm(backend_all_gather_start(c, buf, shard));
}

#endif /* LLMC_CUDA_COMM_NCCL_CUH */
