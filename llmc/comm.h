/*
 comm.h: the process group. MPI bootstrap (rank, world size, local rank on
 the node via MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), collective error
 handling, host-side scalar all-reduces, and the traffic counters that every
 collective of the ZeRO engine reports to.

 Traffic accounting (per rank, bytes handed and on the wire): traffic.h.
 The device collectives themselves (MPI on host buffers for the CPU build,
 NCCL on device buffers for the CUDA build) live in the backend and call
 comm_count() once per call.
*/
#ifndef LLMC_COMM_H
#define LLMC_COMM_H

#include <mpi.h>
#include "utils.h"
#include "bf16.h"
#include "traffic.h"

typedef struct {
    int rank, world_size;       /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* within the node (shared-memory domain) */
    int phase;                  /* PHASE_TRAIN or PHASE_OTHER: where counts go */
    int purpose_embedding;      /* 1 while the model all-gathers embedding rows: an
                                   all-gather is then counted as COLL_EMB_GATHER */
    unsigned long long handed[PHASE_NUM][COLL_NUM];
    unsigned long long wire[PHASE_NUM][COLL_NUM];
    unsigned long long calls[PHASE_NUM][COLL_NUM];
    void* backend;              /* NCCL communicator and stream in the CUDA build */
    void* rs_scratch;           /* receive area of the host reduce-scatter (engine, via the ledger) */
    size_t rs_scratch_bytes;
} Comm;

/* Record one collective of `bytes` (full-buffer bytes, see above). */
static inline void comm_count(Comm* c, int coll, unsigned long long bytes) {
    if (c->purpose_embedding && coll == COLL_ALL_GATHER) coll = COLL_EMB_GATHER;
    c->handed[c->phase][coll] += bytes;
    c->wire[c->phase][coll] += ring_wire_bytes(coll, bytes, c->world_size);
    c->calls[c->phase][coll] += 1;
}

static inline void comm_reset_counters(Comm* c) {
    memset(c->handed, 0, sizeof(c->handed));
    memset(c->wire, 0, sizeof(c->wire));
    memset(c->calls, 0, sizeof(c->calls));
}

/* MPI_Init and discovery of rank / local rank. Errors of MPI itself abort
   (MPI_ERRORS_ARE_FATAL), which ends every rank. */
static inline void comm_init(Comm* c, int* argc, char*** argv) {
    memset(c, 0, sizeof(*c));
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->world_size);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &c->local_rank);
    MPI_Comm_size(local, &c->local_size);
    MPI_Comm_free(&local);
    c->phase = PHASE_TRAIN;
}

static inline void comm_finalize(Comm* c) {
    (void)c;
    MPI_Finalize();
}

/* Collective error check: every rank passes its own error message (NULL or
   "" when fine). If any rank failed, the lowest failing rank prints its
   message as one line "error: ..." on stderr and EVERY rank exits with code 1
   after MPI_Finalize. Must be reached by all ranks (it is a collective). */
static inline void comm_check_all(Comm* c, const char* err) {
    int mine = (err && err[0]) ? c->rank : c->world_size;
    int first = c->world_size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == c->world_size) return;
    if (c->rank == first) {
        fprintf(stderr, "error: %s\n", err);
        fflush(stderr);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    exit(1);
}

/* A local error that other ranks cannot know about (a failed allocation, a
   backend error in the middle of a step): one line naming the rank, then
   MPI_Abort, which ends every rank with a non-zero code, never a hang. */
static inline void comm_fatal(Comm* c, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error (rank %d): ", c ? c->rank : -1);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    va_end(ap);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* ------------------------------------------------------------------------ */
/* Deterministic collectives on host buffers                                */
/*
 Every sum the trainer makes across ranks goes through these functions (the
 CPU backend's collectives, the CUDA backend's host-staged mode, the loss and
 grad-norm scalars). They sum in a FIXED RANK ORDER, q = 0, 1, ..., n-1, in
 fp32 (doubles for the scalars), and round once: the result depends only on
 the ranks' inputs, never on the MPI library's reduction algorithm, the
 network or the stage that called them. So stages 0-3 reduce identical
 gradients to identical bits (stage 0's all-reduce is a reduce-scatter
 followed by an all-gather, the ZeRO paper's 2 Psi).

 Elements: eb = 4 (fp32) or 2 (bf16 bits, llmc/bf16.h; summed in fp32,
 rounded to nearest even once). Sizes in elements; `shard` must be < 2^31.
 On the wire each rank sends (n-1) * shard elements per reduce-scatter or
 all-gather, what a ring sends ((n-1)/n of the full buffer), at eb bytes per
 element: bf16 stays bf16 on the wire and is never summed in bf16.
*/

static inline MPI_Datatype hostcoll_type(int eb) { return eb == 2 ? MPI_UINT16_T : MPI_FLOAT; }

/* Reduce-scatter, in place over n*shard elements of buf (n = size of mc,
   r = this rank in mc): an all-to-all of the n shards (rank q's shard k goes
   to rank k) into `scratch` (n*shard elements, must not overlap buf), then
   s_i = sum over q in rank order of scratch[q*shard + i], in fp32; then
     acc == NULL: buf[r*shard + i] = round(s_i + 0)    (NCCL's in-place layout)
     acc != NULL: acc[i] = round(s_i + acc[i])          (accumulate, shard elements)
   (the + 0 makes both forms agree bit for bit on a zero accumulator)
   threads: 1 to parallelise the sum with OpenMP (caller not in a parallel
   region), 0 to stay on the calling thread (the communication thread). */
static inline void hostcoll_reduce_scatter(MPI_Comm mc, void* buf, size_t shard, int eb, void* scratch, void* acc,
                                           int threads) {
    int n, r;
    MPI_Comm_size(mc, &n);
    MPI_Comm_rank(mc, &r);
    MPI_Alltoall(buf, (int)shard, hostcoll_type(eb), scratch, (int)shard, hostcoll_type(eb), mc);
    long ns = (long)shard;
    if (eb == 4) {
        const float* x = (const float*)scratch;
        float* out = acc ? (float*)acc : (float*)buf + (size_t)r * shard;
        int add = acc != NULL;
#pragma omp parallel for schedule(static) if (threads)
        for (long i = 0; i < ns; i++) {
            float s = x[i];
            for (int q = 1; q < n; q++) s += x[(size_t)q * shard + (size_t)i];
            out[i] = s + (add ? out[i] : 0.0f); /* + 0 either way: -0 sums become +0 as in an accumulator */
        }
    } else {
        const uint16_t* x = (const uint16_t*)scratch;
        uint16_t* out = acc ? (uint16_t*)acc : (uint16_t*)buf + (size_t)r * shard;
        int add = acc != NULL;
#pragma omp parallel for schedule(static) if (threads)
        for (long i = 0; i < ns; i++) {
            float s = bf16_bits_to_float(x[i]);
            for (int q = 1; q < n; q++) s += bf16_bits_to_float(x[(size_t)q * shard + (size_t)i]);
            s += add ? bf16_bits_to_float(out[i]) : 0.0f;
            out[i] = bf16_bits_from_float(s);
        }
    }
}

/* All-gather, in place: rank r's shard elements sit at buf + r*shard;
   afterwards every rank has all n*shard. Exact (no arithmetic). */
static inline void hostcoll_all_gather(MPI_Comm mc, void* buf, size_t shard, int eb) {
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)shard, hostcoll_type(eb), mc);
}

/* Sum k doubles across the ranks of mc in place, in rank order (k <= 16). */
static inline void hostcoll_sum_doubles(MPI_Comm mc, double* x, int k) {
    int n;
    MPI_Comm_size(mc, &n);
    double* all = (double*)malloc_or_die((size_t)n * (size_t)k * sizeof(double), "scalar all-gather");
    MPI_Allgather(x, k, MPI_DOUBLE, all, k, MPI_DOUBLE, mc);
    for (int j = 0; j < k; j++) {
        double s = all[j];
        for (int q = 1; q < n; q++) s += all[(size_t)q * k + j];
        x[j] = s;
    }
    free(all);
}

/* Sum n doubles across ranks in place (host memory; loss, grad-norm squares),
   deterministically (hostcoll_sum_doubles). Counted as COLL_SCALARS with 8
   bytes per value. */
static inline void comm_allreduce_sum_host(Comm* c, double* x, int n) {
    hostcoll_sum_doubles(MPI_COMM_WORLD, x, n);
    comm_count(c, COLL_SCALARS, (unsigned long long)n * sizeof(double));
}

/* All-gather of n ints per rank (host memory): out (size*n) gets rank q's
   values at out + q*n. Counted as an all-gather of the full output. */
static inline void comm_all_gather_ints(Comm* c, const int* mine, int n, int* out) {
    MPI_Allgather(mine, n, MPI_INT, out, n, MPI_INT, MPI_COMM_WORLD);
    comm_count(c, COLL_ALL_GATHER, (unsigned long long)n * (unsigned long long)c->world_size * sizeof(int));
}

static inline double comm_allreduce_max_host(Comm* c, double x) {
    double y = x;
    (void)c;
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return y;
}

static inline void comm_barrier(Comm* c) { (void)c; MPI_Barrier(MPI_COMM_WORLD); }

#endif /* LLMC_COMM_H */
