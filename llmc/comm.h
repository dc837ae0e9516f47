/*
 comm.h: the process group. MPI bootstrap (rank, world size, local rank on
 the node via MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), collective error
 handling, host-side scalar all-reduces, and the traffic counters that every
 collective of the ZeRO engine reports to.

 Traffic accounting (per rank, bytes):
   handed: the bytes of the full buffer a collective works on (all-reduce: n;
           reduce-scatter: the full input of N*shard; all-gather: the full
           output of N*shard), i.e. the quantity the ZeRO paper counts as Psi.
   wire:   what a ring algorithm sends per rank: all-reduce 2(N-1)/N * n,
           reduce-scatter and all-gather (N-1)/N * (N*shard) = (N-1)*shard.
 The device collectives themselves (MPI on host buffers for the CPU build,
 NCCL on device buffers for the CUDA build) live in the backend and call
 comm_count() once per call.
*/
#ifndef LLMC_COMM_H
#define LLMC_COMM_H

#include <mpi.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "utils.h"

enum { COLL_ALL_REDUCE = 0, COLL_REDUCE_SCATTER, COLL_ALL_GATHER, COLL_SCALARS, COLL_NUM };
/* PHASE_TRAIN: traffic of optimizer steps (predicted by the shard plan);
   PHASE_OTHER: evaluation, sampling, checkpoint I/O (reported, not predicted). */
enum { PHASE_TRAIN = 0, PHASE_OTHER, PHASE_NUM };

static const char* coll_names[COLL_NUM] = {"all-reduce", "reduce-scatter", "all-gather", "scalars all-reduce"};

typedef struct {
    int rank, world_size;       /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* within the node (shared-memory domain) */
    int phase;                  /* PHASE_TRAIN or PHASE_OTHER: where counts go */
    unsigned long long handed[PHASE_NUM][COLL_NUM];
    unsigned long long wire[PHASE_NUM][COLL_NUM];
    unsigned long long calls[PHASE_NUM][COLL_NUM];
    void* backend;              /* NCCL communicator and stream in the CUDA build */
} Comm;

/* Ring wire bytes per rank for a collective over a full buffer of `bytes`
   bytes on N ranks (see header comment). bytes is a multiple of N for
   reduce-scatter/all-gather by construction of the shard plan. */
static inline unsigned long long ring_wire_bytes(int coll, unsigned long long bytes, int N) {
    if (N <= 1) return 0;
    if (coll == COLL_ALL_REDUCE || coll == COLL_SCALARS) return 2ULL * (unsigned long long)(N - 1) * bytes / (unsigned long long)N;
    return (unsigned long long)(N - 1) * (bytes / (unsigned long long)N);
}

/* Record one collective of `bytes` (full-buffer bytes, see above). */
static inline void comm_count(Comm* c, int coll, unsigned long long bytes) {
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

/* Sum n doubles across ranks in place (host memory; loss, grad-norm squares).
   Counted as COLL_SCALARS with 8 bytes per value. */
static inline void comm_allreduce_sum_host(Comm* c, double* x, int n) {
    MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    comm_count(c, COLL_SCALARS, (unsigned long long)n * sizeof(double));
}

static inline double comm_allreduce_max_host(Comm* c, double x) {
    double y = x;
    (void)c;
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return y;
}

static inline void comm_barrier(Comm* c) { (void)c; MPI_Barrier(MPI_COMM_WORLD); }

/* Rank placement, printed by rank 0 at start: for every rank its node
   (MPI_Get_processor_name: the hostname), its local rank and the number of
   ranks on that node (MPI_COMM_TYPE_SHARED, as in comm_init) and its
   OpenMP threads (omp_get_max_threads(): set by OMP_NUM_THREADS, else by
   backend_init; 1 in a build without OpenMP). Collective (MPI_Gather of
   76 bytes per rank); rows for at most 64 ranks, then a count. */
static inline void comm_print_placement(Comm* c, FILE* out) {
    typedef struct { char node[64]; int local_rank, local_size, threads; } Place;
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
    fprintf(out, "  %5s  %-24s %11s %11s %8s\n", "rank", "node", "local rank", "local size", "threads");
    int shown = c->world_size < 64 ? c->world_size : 64;
    for (int r = 0; r < shown; r++)
        fprintf(out, "  %5d  %-24s %11d %11d %8d\n", r, all[r].node, all[r].local_rank, all[r].local_size, all[r].threads);
    if (shown < c->world_size) fprintf(out, "  ... %d more ranks\n", c->world_size - shown);
    fflush(out);
    free(all);
}

#endif /* LLMC_COMM_H */
