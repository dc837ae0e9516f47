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
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#include "utils.h"
#include "bf16.h"
#include "traffic.h"

typedef struct {
    int rank, world_size;       /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* within the node (shared-memory domain) */
    /* The shard group (DESIGN.md: G ranks share the shards; G = N unless
       HSDP, --shard-group G: groups of G consecutive ranks, replicated across
       the R = N/G groups) and the replica group (the R ranks holding the same
       shard index in each group). Engine collectives use group_comm and
       replica_comm (from the communication thread when there is one); the
       main thread's group-wide collectives use group_host (a duplicate, so
       the two threads never share a communicator). */
    int group_size, group_rank;
    int replica_size, replica_rank;
    MPI_Comm group_comm, replica_comm, group_host;
    int thread_multiple;        /* MPI_Init_thread provided MPI_THREAD_MULTIPLE */
    int overlap;                /* run the engine's collectives beside computation (CPU: a
                                   communication thread; CUDA: the comm stream) */
    int cur_unit;               /* the unit the engine's next collective is for (traces) */
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

/* Record one collective of `bytes` (full-buffer bytes, see traffic.h) over
   `nranks` participants (the shard group, the replicas or the world). */
static inline void comm_count(Comm* c, int coll, unsigned long long bytes, int nranks) {
    if (c->purpose_embedding && coll == COLL_ALL_GATHER) coll = COLL_EMB_GATHER;
    c->handed[c->phase][coll] += bytes;
    c->wire[c->phase][coll] += ring_wire_bytes(coll, bytes, nranks);
    c->calls[c->phase][coll] += 1;
}

static inline void comm_reset_counters(Comm* c) {
    memset(c->handed, 0, sizeof(c->handed));
    memset(c->wire, 0, sizeof(c->wire));
    memset(c->calls, 0, sizeof(c->calls));
}

/* The shard group of G ranks (see Comm); G must divide the world size
   (the caller checks and reports). Collective over MPI_COMM_WORLD; may be
   called again (the previous groups are freed). */
static inline void comm_set_groups(Comm* c, int G) {
    if (c->group_comm != MPI_COMM_NULL) {
        MPI_Comm_free(&c->group_comm); MPI_Comm_free(&c->replica_comm); MPI_Comm_free(&c->group_host);
    }
    MPI_Comm_split(MPI_COMM_WORLD, c->rank / G, c->rank, &c->group_comm);
    MPI_Comm_split(MPI_COMM_WORLD, c->rank % G, c->rank, &c->replica_comm);
    MPI_Comm_dup(c->group_comm, &c->group_host);
    MPI_Comm_size(c->group_comm, &c->group_size);
    MPI_Comm_rank(c->group_comm, &c->group_rank);
    MPI_Comm_size(c->replica_comm, &c->replica_size);
    MPI_Comm_rank(c->replica_comm, &c->replica_rank);
}

/* MPI_Init_thread (MPI_THREAD_MULTIPLE when the library offers it: the CPU
   build's communication thread issues collectives while the main thread
   does its own on other communicators) and discovery of rank / local rank;
   the shard group is the world until comm_set_groups. Errors of MPI itself
   abort (MPI_ERRORS_ARE_FATAL), which ends every rank. */
static inline void comm_init(Comm* c, int* argc, char*** argv) {
    memset(c, 0, sizeof(*c));
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    c->thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->world_size);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &c->local_rank);
    MPI_Comm_size(local, &c->local_size);
    MPI_Comm_free(&local);
    c->phase = PHASE_TRAIN;
    c->group_comm = c->replica_comm = c->group_host = MPI_COMM_NULL;
    comm_set_groups(c, c->world_size);
}

static inline void comm_finalize(Comm* c) {
    if (c->group_comm != MPI_COMM_NULL) {
        MPI_Comm_free(&c->group_comm); MPI_Comm_free(&c->replica_comm); MPI_Comm_free(&c->group_host);
    }
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

/* Completes a non-blocking collective. poll = 0: MPI_Wait (the main
   thread). poll = 1 (the communication thread): MPI_Test, sleeping 20 us
   between tests, so that a thread waiting on the network leaves the cores
   to the compute threads instead of spinning (Open MPI progresses the
   transfer inside each MPI_Test; kernel socket buffers carry TCP between). */
static inline void hostcoll_complete(MPI_Request* req, int poll) {
    if (!poll) { MPI_Wait(req, MPI_STATUS_IGNORE); return; }
    int done = 0;
    for (unsigned long spins = 0;; spins++) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (spins > 64) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
    }
}

/* Reduce-scatter, in place over n*shard elements of buf (n = size of mc,
   r = this rank in mc): an all-to-all of the n shards (rank q's shard k goes
   to rank k) into `scratch` (n*shard elements, must not overlap buf), then
   s_i = sum over q in rank order of scratch[q*shard + i], in fp32; then
     acc == NULL: buf[r*shard + i] = round(s_i + 0)    (NCCL's in-place layout)
     acc != NULL: acc[i] = round(s_i + acc[i])          (accumulate, shard elements)
   (the + 0 makes both forms agree bit for bit on a zero accumulator)
   threads: 1 to parallelise the sum with OpenMP and block in MPI_Wait (the
   main thread, not in a parallel region), 0 to stay on the calling thread
   and poll (the communication thread). */
static inline void hostcoll_reduce_scatter(MPI_Comm mc, void* buf, size_t shard, int eb, void* scratch, void* acc,
                                           int threads) {
    int n, r;
    MPI_Comm_size(mc, &n);
    MPI_Comm_rank(mc, &r);
    MPI_Request req;
    MPI_Ialltoall(buf, (int)shard, hostcoll_type(eb), scratch, (int)shard, hostcoll_type(eb), mc, &req);
    hostcoll_complete(&req, !threads);
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
   afterwards every rank has all n*shard. Exact (no arithmetic). poll as
   hostcoll_complete. */
static inline void hostcoll_all_gather(MPI_Comm mc, void* buf, size_t shard, int eb, int poll) {
    MPI_Request req;
    MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)shard, hostcoll_type(eb), mc, &req);
    hostcoll_complete(&req, poll);
}

/* All-reduce of n elements in place, deterministic: a reduce-scatter of the
   n/k-element parts (k = ranks of mc, n a multiple of k) and an all-gather,
   the sums in rank order as hostcoll_reduce_scatter. scratch: n elements. */
static inline void hostcoll_all_reduce(MPI_Comm mc, void* buf, size_t n, int eb, void* scratch, int threads) {
    int k;
    MPI_Comm_size(mc, &k);
    if (k == 1) return;
    hostcoll_reduce_scatter(mc, buf, n / (size_t)k, eb, scratch, NULL, threads);
    hostcoll_all_gather(mc, buf, n / (size_t)k, eb, !threads);
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

/* Sum n doubles across ranks in place (host memory; the loss),
   deterministically (hostcoll_sum_doubles). Counted as COLL_SCALARS with 8
   bytes per value. */
static inline void comm_allreduce_sum_host(Comm* c, double* x, int n) {
    hostcoll_sum_doubles(MPI_COMM_WORLD, x, n);
    comm_count(c, COLL_SCALARS, (unsigned long long)n * sizeof(double), c->world_size);
}

/* The same over the shard group (the grad-norm squares: each group holds
   one copy of every gradient). */
static inline void comm_group_sum_host(Comm* c, double* x, int n) {
    hostcoll_sum_doubles(c->group_host, x, n);
    comm_count(c, COLL_SCALARS, (unsigned long long)n * sizeof(double), c->group_size);
}

/* All-gather of n ints per rank of the shard group (host memory): out
   (group_size*n) gets group rank q's values at out + q*n. Counted as an
   all-gather of the full output. */
static inline void comm_group_gather_ints(Comm* c, const int* mine, int n, int* out) {
    MPI_Allgather(mine, n, MPI_INT, out, n, MPI_INT, c->group_host);
    comm_count(c, COLL_ALL_GATHER, (unsigned long long)n * (unsigned long long)c->group_size * sizeof(int), c->group_size);
}

static inline double comm_allreduce_max_host(Comm* c, double x) {
    double y = x;
    (void)c;
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return y;
}

static inline void comm_barrier(Comm* c) { (void)c; MPI_Barrier(MPI_COMM_WORLD); }

/* Cores this process may run on (its affinity mask), and the cores of its
   node: the affinity mask of its parent (mpirun, Open MPI's orted or
   slurmstepd, which the launcher, a node's taskset or Slurm's allocation
   bound), else the online cores. Linux; elsewhere both are the online
   cores. */
static inline int comm_affinity_count(int pid) {
#if defined(__linux__) && defined(SYS_sched_getaffinity)
    unsigned long long mask[16];   /* 1024 cpus */
    memset(mask, 0, sizeof(mask));
    long got = syscall(SYS_sched_getaffinity, pid, sizeof(mask), mask);
    if (got <= 0) return -1;
    int n = 0;
    for (size_t i = 0; i < sizeof(mask) / sizeof(mask[0]); i++) n += __builtin_popcountll(mask[i]);
    return n;
#else
    (void)pid;
    return -1;
#endif
}
static inline void comm_cores(int* own, int* node) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int a = comm_affinity_count(0), p = comm_affinity_count((int)getppid());
    *own = a > 0 ? a : (online > 0 ? (int)online : 1);
    *node = p >= *own ? p : (online > *own ? (int)online : *own);
}

/* Collective: rank 0 prints every rank's node, local rank, OpenMP threads
   and cores (its affinity mask, and its share of its node's cores: node
   cores / ranks on the node). A rank whose mask holds fewer cores than its
   share runs fewer threads than it could (Open MPI binds each rank to one
   core by default when there are at most 2 ranks): a note names those
   ranks and the fix. */
static inline void comm_print_placement(Comm* c, FILE* out) {
    typedef struct { char node[64]; int local_rank, local_size, threads, cores, node_cores; } Place;
    Place me;
    memset(&me, 0, sizeof(me));
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_Get_processor_name(name, &len);
    size_t n = (size_t)(len < 0 ? 0 : len);
    if (n > sizeof(me.node) - 1) n = sizeof(me.node) - 1; /* longer names are cut */
    memcpy(me.node, name, n);
    me.local_rank = c->local_rank;
    me.local_size = c->local_size;
#ifdef _OPENMP
    me.threads = omp_get_max_threads();
#else
    me.threads = 1;
#endif
    comm_cores(&me.cores, &me.node_cores);
    Place* all = c->rank == 0 ? (Place*)malloc(sizeof(Place) * (size_t)c->world_size) : NULL;
    if (c->rank == 0 && !all) comm_fatal(c, "out of memory: placement table of %d ranks", c->world_size);
    MPI_Gather(&me, (int)sizeof(Place), MPI_BYTE, all, (int)sizeof(Place), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (c->rank != 0) return;
    int nodes = 0;
    for (int r = 0; r < c->world_size; r++) {
        int seen = 0;
        for (int q = 0; q < r && !seen; q++) seen = !strcmp(all[q].node, all[r].node);
        nodes += !seen;
    }
    fprintf(out, "placement: %d rank%s on %d node%s\n", c->world_size, c->world_size > 1 ? "s" : "", nodes, nodes > 1 ? "s" : "");
    fprintf(out, "  %5s  %-24s %11s %11s %8s %6s %11s\n", "rank", "node", "local rank", "local size", "threads", "cores", "share");
    int shown = c->world_size < 64 ? c->world_size : 64, under = 0, first = -1;
    for (int r = 0; r < c->world_size; r++) {
        int share = all[r].node_cores / (all[r].local_size > 0 ? all[r].local_size : 1);
        if (share < 1) share = 1;
        if (all[r].cores < share) { under++; if (first < 0) first = r; }
        if (r < shown)
            fprintf(out, "  %5d  %-24s %11d %11d %8d %6d %4d of %3d%s\n", r, all[r].node, all[r].local_rank, all[r].local_size,
                    all[r].threads, all[r].cores, share, all[r].node_cores, all[r].cores < share ? "  <-- bound to fewer cores" : "");
    }
    if (shown < c->world_size) fprintf(out, "  ... %d more ranks\n", c->world_size - shown);
    if (under) {
        const Place* q = &all[first];
        int share = q->node_cores / (q->local_size > 0 ? q->local_size : 1);
        if (under == 1)
            fprintf(out, "note: rank %d is bound to %d core%s, but its share of its node is %d (%d cores / %d rank%s): it runs %d OpenMP thread%s.",
                    first, q->cores, q->cores > 1 ? "s" : "", share, q->node_cores, q->local_size, q->local_size > 1 ? "s" : "",
                    q->threads, q->threads > 1 ? "s" : "");
        else
            fprintf(out, "note: %d ranks (rank %d first: %d core%s, its share %d) are bound to fewer cores than their share of their node.",
                    under, first, q->cores, q->cores > 1 ? "s" : "", share);
        fprintf(out, " Open MPI binds each rank to one core when there are at most 2 ranks; give each rank its share with "
                "mpirun --bind-to none (or --map-by slot:PE=%d)\n", share);
    }
    fflush(out);
    free(all);
}

#endif /* LLMC_COMM_H */
