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
#include <pthread.h>
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
#include "quant.h"

/* The collective watch (see "Timeouts and arrival times" below): one per
   process. */
typedef struct {
    double timeout_s;           /* --collective-timeout: a collective not complete after this many seconds ends the rank (0: wait forever) */
    volatile int step;          /* the optimizer step in progress, 1-based (0: before or after training), for the messages */
    int rank, world;
    char (*host)[64];           /* the node name of every world rank */
    pthread_mutex_t mu;         /* the two threads both complete collectives */
    double* wait_for;           /* per world rank: seconds this rank waited for that rank's data (the straggler report) */
    unsigned long long* waits;  /* per world rank: receives from it */
} CommWatch;
static CommWatch comm_watch = {60.0, 0, 0, 1, NULL, PTHREAD_MUTEX_INITIALIZER, NULL, NULL};
/* what the calling thread's next collective is for (messages): e.g.
   "reduce-scatter" and the unit; NULL / -1 when unknown */
static __thread const char* comm_ctx_what = NULL;
static __thread int comm_ctx_unit = -1;

typedef struct {
    int rank, world_size;       /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* within the node (shared-memory domain) */
    /* The shard group (docs/design.md section 4: G ranks share the shards; G = N unless
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
    /* hpZ: the secondary group, K consecutive ranks of the shard group (one
       node), and the secondary rank in it (comm_set_secondary); K = 1: none */
    MPI_Comm secondary_comm;
    int secondary_size, secondary_rank;
    /* hpZ: the next weight all-gather also copies its output's elements
       [keep_off, keep_off + keep_count) into keep (the secondary shard),
       once they have arrived; the backend takes and clears them */
    void* keep;
    size_t keep_off, keep_count;
    /* qgZ: the node (L consecutive ranks of the shard group) and the nodes
       (the M = G / L ranks of one local index) of the two hops
       (comm_set_qg_groups; a hop of one rank is skipped, not called) */
    MPI_Comm qg_intra, qg_inter;
    int qg_L, qg_M;
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
    c->group_comm = c->replica_comm = c->group_host = c->secondary_comm = c->qg_intra = c->qg_inter = MPI_COMM_NULL;
    c->qg_L = c->qg_M = 1;
    c->secondary_size = 1;
    comm_set_groups(c, c->world_size);
    /* the watch: every rank's node name, the per-peer wait sums */
    CommWatch* w = &comm_watch;
    w->rank = c->rank; w->world = c->world_size;
    w->host = (char (*)[64])calloc((size_t)c->world_size, 64);
    w->wait_for = (double*)calloc((size_t)c->world_size, sizeof(double));
    w->waits = (unsigned long long*)calloc((size_t)c->world_size, sizeof(unsigned long long));
    if (!w->host || !w->wait_for || !w->waits) { fprintf(stderr, "error: out of host memory for %d ranks' names\n", c->world_size); MPI_Abort(MPI_COMM_WORLD, 1); }
    char me[64] = "";
    int len = 0;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Get_processor_name(name, &len);
    snprintf(me, sizeof(me), "%.63s", name);
    MPI_Allgather(me, 64, MPI_CHAR, w->host, 64, MPI_CHAR, MPI_COMM_WORLD);
}

/* hpZ: the secondary groups, K consecutive ranks of the shard group each
   (K divides the group's size; the caller checks). Collective over the
   shard group. */
static inline void comm_set_secondary(Comm* c, int K) {
    if (c->secondary_comm != MPI_COMM_NULL) MPI_Comm_free(&c->secondary_comm);
    MPI_Comm_split(c->group_comm, c->group_rank / K, c->group_rank, &c->secondary_comm);
    MPI_Comm_size(c->secondary_comm, &c->secondary_size);
    MPI_Comm_rank(c->secondary_comm, &c->secondary_rank);
}

/* qgZ: the two hops' communicators for L ranks per node (L divides the
   shard group's size; the caller checks). Collective over the group. */
static inline void comm_set_qg_groups(Comm* c, int L) {
    if (c->qg_intra != MPI_COMM_NULL) MPI_Comm_free(&c->qg_intra);
    if (c->qg_inter != MPI_COMM_NULL) MPI_Comm_free(&c->qg_inter);
    c->qg_L = L; c->qg_M = c->group_size / L;
    MPI_Comm_split(c->group_comm, c->group_rank / L, c->group_rank, &c->qg_intra);
    MPI_Comm_split(c->group_comm, c->group_rank % L, c->group_rank, &c->qg_inter);
}

/* hpZ's "node": the ranks of this rank's shard group (G consecutive world
   ranks) that run on its node (the node names of the watch), when every
   node of the group holds the same number of consecutive group ranks; else
   0 with a message. All ranks decide alike from the same table. */
static inline int comm_group_ranks_per_node(const Comm* c, int G, char* err, size_t errlen) {
    int base = c->rank - c->rank % G, L = 0;
    while (L < G && !strcmp(comm_watch.host[base + L], comm_watch.host[base])) L++;
    int ok = G % L == 0;
    for (int j = 0; ok && j < G; j++) {
        int start = j - j % L;
        if (strcmp(comm_watch.host[base + j], comm_watch.host[base + start])) ok = 0;
        if (start > 0 && !strcmp(comm_watch.host[base + start], comm_watch.host[base + start - 1])) ok = 0;
    }
    if (!ok) { set_err(err, errlen, "--secondary-shard node: the nodes of the shard group must hold equal runs of consecutive ranks (rank %d's node %s holds %d of them first)", base, comm_watch.host[base], L); return 0; }
    return L;
}

static inline void comm_finalize(Comm* c) {
    if (c->secondary_comm != MPI_COMM_NULL) MPI_Comm_free(&c->secondary_comm);
    if (c->qg_intra != MPI_COMM_NULL) MPI_Comm_free(&c->qg_intra);
    if (c->qg_inter != MPI_COMM_NULL) MPI_Comm_free(&c->qg_inter);
    if (c->group_comm != MPI_COMM_NULL) {
        MPI_Comm_free(&c->group_comm); MPI_Comm_free(&c->replica_comm); MPI_Comm_free(&c->group_host);
    }
    MPI_Finalize();
}

static inline void comm_wait_request(MPI_Request* req, int poll, const char* what);

/* Collective error check: every rank passes its own error message (NULL or
   "" when fine). If any rank failed, the lowest failing rank prints its
   message as one line "error: ..." on stderr and EVERY rank exits with code 1
   after MPI_Finalize. Must be reached by all ranks (it is a collective). */
static inline void comm_check_all(Comm* c, const char* err) {
    int mine = (err && err[0]) ? c->rank : c->world_size;
    int first = c->world_size;
    MPI_Request req;
    MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req);
    comm_wait_request(&req, 0, comm_ctx_what ? comm_ctx_what : "the error check (an all-reduce over every rank)");
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

/* ------------------------------------------------------------------------ */
/* Timeouts and arrival times
 Every collective of the trainer on host buffers is made of point-to-point
 messages, one per peer (MPI_Irecv from each, MPI_Isend to each: the bytes
 a ring moves, (n-1) shards per rank), so that its wait knows WHICH peers'
 data has arrived. Two uses:
   - a timeout (--collective-timeout S, default 60; 0 waits forever): a
     collective not complete after S seconds ends this rank with one line
     naming the collective, the unit, the optimizer step and the ranks whose
     data never came, with their nodes, e.g.
       error (rank 0, node llmc-node0): reduce-scatter of unit 3 (step 7) did not complete in 60 s: no data from ranks 2, 3 (node llmc-node1)
     and exit code 1, without MPI_Finalize (which would wait for the lost
     peers too). A cut link or a lost node thus ends every live rank within
     S seconds instead of a hang in the TCP transport;
   - the straggler report (--straggler-report): how long each rank waited
     for each peer's data, summed; a peer the others wait for is behind.
 The few collectives that stay MPI's own (the error check, a barrier,
 state positions) wait with the same timeout and name the communicator
 instead of the peers. The results do not change: the messages carry the
 same bytes into the same places, and every sum is still made in rank
 order afterwards. */

static inline int comm_world_ranks(MPI_Comm mc, int n, int* out) {
    MPI_Group g, w;
    MPI_Comm_group(mc, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    int* in = (int*)malloc((size_t)n * sizeof(int));
    if (!in) return 1;
    for (int q = 0; q < n; q++) in[q] = q;
    MPI_Group_translate_ranks(g, n, in, w, out);
    free(in);
    MPI_Group_free(&g);
    MPI_Group_free(&w);
    return 0;
}

/* The timeout's one line (see above) and exit 1. missing[q] != 0: the
   peers (ranks q of mc) whose data did not arrive (recv = 1) or that did
   not take this rank's (recv = 0). */
static inline void comm_watch_expired(MPI_Comm mc, int n, const char* missing, int recv, const char* what, double waited) {
    CommWatch* w = &comm_watch;
    int* wr = (int*)malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    char list[1024] = "";
    size_t k = 0;
    int nmiss = 0;
    for (int q = 0; q < n; q++) nmiss += missing[q] != 0;
    if (wr && mc != MPI_COMM_NULL && comm_world_ranks(mc, n, wr) == 0) {
        const char* last_host = NULL;
        int first = 1;
        for (int q = 0; q < n && k < sizeof(list) - 80; q++) {
            if (!missing[q]) continue;
            const char* h = w->host ? w->host[wr[q]] : "?";
            if (last_host && strcmp(h, last_host)) k += (size_t)snprintf(list + k, sizeof(list) - k, " (node %s)", last_host);
            k += (size_t)snprintf(list + k, sizeof(list) - k, "%s%d", first ? "" : ", ", wr[q]);
            first = 0; last_host = h;
        }
        if (last_host) snprintf(list + k, sizeof(list) - k, " (node %s)", last_host);
    }
    char unit[32] = "", step[32] = "";
    if (comm_ctx_unit >= 0) snprintf(unit, sizeof(unit), " of unit %d", comm_ctx_unit);
    if (w->step > 0) snprintf(step, sizeof(step), " (step %d)", w->step);
    fprintf(stderr, "error (rank %d, node %s): %s%s%s did not complete in %.0f s: %s%s%s (--collective-timeout %.0f; 0 waits forever)\n",
            w->rank, w->host ? w->host[w->rank] : "?", what, unit, step, waited,
            list[0] ? (recv ? (nmiss > 1 ? "no data from ranks " : "no data from rank ") : (nmiss > 1 ? "ranks " : "rank ")) : "a rank of the communicator did not take part",
            list, list[0] && !recv ? " did not take this rank's data" : "", w->timeout_s);
    fflush(stderr);
    free(wr);
    _exit(1);
}

/* Wait for one collective's receives rreq[q] and sends sreq[q] (q != r: the
   peers of mc; rreq[r] = sreq[r] = MPI_REQUEST_NULL), adding to the watch
   how long this rank waited for each peer's data. poll = 1 sleeps 20 us
   between rounds of tests once 64 rounds found nothing (the communication
   thread: a thread waiting on the network leaves the cores to the compute
   threads; Open MPI progresses the transfers inside each MPI_Test), 0 spins
   (the main thread). The timeout: see above. */
static inline void hostcoll_wait_peers(MPI_Comm mc, int n, int r, MPI_Request* rreq, MPI_Request* sreq, int poll, const char* what) {
    CommWatch* w = &comm_watch;
    double t0 = wall_seconds(), now = t0;
    char stack_done[512];
    double stack_arr[256];
    char* done = n * 2 <= (int)sizeof(stack_done) ? stack_done : (char*)malloc((size_t)n * 2);
    double* arr = n <= 256 ? stack_arr : (double*)malloc((size_t)n * sizeof(double));
    if (!done || !arr) { fprintf(stderr, "error: out of host memory in a collective\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    int left = 0;
    for (int q = 0; q < n; q++) {
        done[q] = q == r; done[n + q] = q == r; arr[q] = t0;
        left += 2 * (q != r);
    }
    for (unsigned long spins = 0; left > 0; spins++) {
        for (int q = 0; q < n; q++) {
            int flag;
            if (!done[q]) { MPI_Test(&rreq[q], &flag, MPI_STATUS_IGNORE); if (flag) { done[q] = 1; left--; arr[q] = wall_seconds(); } }
            if (!done[n + q]) { MPI_Test(&sreq[q], &flag, MPI_STATUS_IGNORE); if (flag) { done[n + q] = 1; left--; } }
        }
        if (left == 0) break;
        if ((spins & 63) == 63 || poll) now = wall_seconds();
        if (w->timeout_s > 0 && now - t0 > w->timeout_s) {
            int any_recv = 0;
            char* miss = (char*)calloc((size_t)n, 1);
            for (int q = 0; q < n && miss; q++) if (!done[q]) { miss[q] = 1; any_recv = 1; }
            if (miss && !any_recv) for (int q = 0; q < n; q++) miss[q] = !done[n + q];
            comm_watch_expired(mc, n, miss ? miss : done, any_recv, what, now - t0);
        }
        if (poll && spins > 64) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
    }
    /* arrival times: the wait for each peer's data */
    if (w->wait_for && n > 1) {
        int* wr = (int*)malloc((size_t)n * sizeof(int));
        if (wr && comm_world_ranks(mc, n, wr) == 0) {
            pthread_mutex_lock(&w->mu);
            for (int q = 0; q < n; q++) if (q != r) { w->wait_for[wr[q]] += arr[q] - t0; w->waits[wr[q]]++; }
            pthread_mutex_unlock(&w->mu);
        }
        free(wr);
    }
    if (done != stack_done) free(done);
    if (arr != stack_arr) free(arr);
}

/* Wait for one request of MPI's own collectives with the watch's timeout
   (what names it; the peers are not known). poll as hostcoll_wait_peers. */
static inline void comm_wait_request(MPI_Request* req, int poll, const char* what) {
    CommWatch* w = &comm_watch;
    if (w->timeout_s <= 0) { MPI_Wait(req, MPI_STATUS_IGNORE); return; }
    double t0 = wall_seconds();
    int flag = 0;
    for (unsigned long spins = 0;; spins++) {
        MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (flag) return;
        double now = wall_seconds();
        if (now - t0 > w->timeout_s) comm_watch_expired(MPI_COMM_NULL, 0, "", 0, what, now - t0);
        if (poll || spins > 1000) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
    }
}

/* The messages of one collective over mc (n ranks, this one r), shard
   elements of eb bytes each: alltoall = 1: block q of send goes to rank q,
   rank q's block for this rank lands at recv + q*shard (the own block is
   copied; send and recv must not overlap); alltoall = 0, an all-gather in
   place (send == recv): the own block at recv + r*shard goes to every peer,
   rank q's lands at recv + q*shard. Then hostcoll_wait_peers. */
static inline void hostcoll_exchange(MPI_Comm mc, int n, int r, void* send, void* recv, size_t shard, int eb, int alltoall, int poll,
                                     const char* what) {
    MPI_Request sr[64], ss[64];
    MPI_Request* rq = n <= 64 ? sr : (MPI_Request*)malloc((size_t)n * sizeof(MPI_Request));
    MPI_Request* sq = n <= 64 ? ss : (MPI_Request*)malloc((size_t)n * sizeof(MPI_Request));
    if (!rq || !sq) { fprintf(stderr, "error: out of host memory in a collective\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    MPI_Datatype t = hostcoll_type(eb);
    size_t bb = shard * (size_t)eb;
    const int tag = alltoall ? 711 : 712;
    for (int q = 0; q < n; q++) {
        rq[q] = sq[q] = MPI_REQUEST_NULL;
        if (q != r) MPI_Irecv((char*)recv + (size_t)q * bb, (int)shard, t, q, tag, mc, &rq[q]);
    }
    if (alltoall) memcpy((char*)recv + (size_t)r * bb, (const char*)send + (size_t)r * bb, bb);
    for (int k = 1; k < n; k++) {   /* to r+1, r+2, ...: the peers do not all send to rank 0 first */
        int q = (r + k) % n;
        const char* src = alltoall ? (const char*)send + (size_t)q * bb : (const char*)send + (size_t)r * bb;
        MPI_Isend(src, (int)shard, t, q, tag, mc, &sq[q]);
    }
    hostcoll_wait_peers(mc, n, r, rq, sq, poll, what);
    if (rq != sr) free(rq);
    if (sq != ss) free(sq);
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
    hostcoll_exchange(mc, n, r, buf, scratch, shard, eb, 1, !threads, comm_ctx_what ? comm_ctx_what : "reduce-scatter");
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
   hostcoll_wait_peers. */
static inline void hostcoll_all_gather(MPI_Comm mc, void* buf, size_t shard, int eb, int poll) {
    int n, r;
    MPI_Comm_size(mc, &n);
    MPI_Comm_rank(mc, &r);
    hostcoll_exchange(mc, n, r, buf, buf, shard, eb, 0, poll, comm_ctx_what ? comm_ctx_what : "all-gather");
}

/* A non-finite value where a quantized collective must send it (bad = 1 +
   its index in shard q of the unit): one line naming the flag, the tensor,
   the element and the step, then MPI_Abort (every rank ends). */
static inline void quant_refuse_nonfinite(const QuantLayout* Q, int q, size_t bad, int unit, const char* flag, const char* what) {
    size_t at = (size_t)q * Q->shard + bad - 1;
    int k = 0;
    while (k + 1 < Q->nseg && Q->seg[k + 1] <= at) k++;
    fprintf(stderr, "error (rank %d): %s: %s tensor %s (unit %d) has a non-finite value at element %zu at step %d; "
            "int%d blocks cannot carry it, so the run ends here (lower -l?)\n",
            comm_watch.rank, flag, what, Q->names ? Q->names[k] : "?", unit, at - Q->seg[k], comm_watch.step, Q->bits);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* qgZ's reduce-scatter (ZeRO++ section 3.3: a hierarchical all-to-all of
   quantized blocks), over the shard group of N = L x M ranks, rank
   r = m L + l (node m, local index l), on buf: the full unit's grads (N
   shards of Q->shard elements of eb bytes; Q->bits 8 or 4):
     1. quantize every shard j of buf (quant_encode, shard j's layout) and
        all-to-all inside the node (intra, L ranks): local rank l' gets the M
        shards j = m' L + l' from each of the L ranks of its node;
     2. dequantize and sum them in fp32 in local rank order: the node's
        partial sum of each of those M shards; quantize each;
     3. all-to-all across the nodes (inter: the M ranks of local index l):
        node m' gets the partial of shard m' L + l; dequantize and sum in
        fp32 in node order: s_i; then acc[i] = round(s_i + acc[i]).
   Deterministic: the same order of sums on every run and rank. L = 1: no
   first hop (the partials are this rank's own values, unquantized); M = 1:
   no second hop (the partial is the sum, not quantized again); intra or
   inter is then unused. So each value is quantized once per hop it takes.
   scratch: zero_qg_scratch_bytes. nbmax: scales per record. A non-finite
   gradient ends the run (quant_refuse_nonfinite). */
/* (the scratch layout: send1, recv1: N records each; part: M x s fp32;
   send2, recv2: M records each; tmp: s fp32) */
static inline void hostcoll_reduce_scatter_quantized(MPI_Comm intra, MPI_Comm inter, int L, int M, void* buf, const QuantLayout* Q,
                                                     size_t nbmax, int eb, void* scratch, void* acc, int unit, int poll) {
    int l = 0, m = 0;
    if (L > 1) MPI_Comm_rank(intra, &l);
    if (M > 1) MPI_Comm_rank(inter, &m);
    size_t s = Q->shard, rec = quant_record_bytes(nbmax, s, Q->bits), N = (size_t)L * M;
    char* send1 = (char*)scratch;               /* N records: [l'][m'] = shard m' L + l' */
    char* recv1 = send1 + N * rec;               /* N records: [p][m'] = local rank p's shard m' L + l */
    float* part = (float*)(recv1 + N * rec);     /* M x s fp32 partial sums */
    char* send2 = (char*)(part + (size_t)M * s); /* M records: [m'] = partial of shard m' L + l */
    char* recv2 = send2 + (size_t)M * rec;       /* M records: [p] = node p's partial of shard m L + l */
    float* tmp = (float*)(recv2 + (size_t)M * rec);   /* one shard of fp32 */
    if (L > 1) {
        for (int lp = 0; lp < L; lp++)
            for (int mp = 0; mp < M; mp++) {
                int j = mp * L + lp;
                size_t bad = quant_encode(Q, j, nbmax, (const char*)buf + (size_t)j * s * (size_t)eb, eb, send1 + ((size_t)lp * M + mp) * rec);
                if (bad) quant_refuse_nonfinite(Q, j, bad, unit, "--quantize-grads", "gradient of");
            }
        hostcoll_exchange(intra, L, l, send1, recv1, (size_t)M * rec / 4, 4, 1, poll, comm_ctx_what ? comm_ctx_what : "reduce-scatter node (qgZ)");
    }
    for (int mp = 0; mp < M; mp++) {
        int j = mp * L + l;
        float* ps = part + (size_t)mp * s;
        if (L == 1) for (size_t i = 0; i < s; i++) ps[i] = quant_load((const char*)buf + (size_t)j * s * (size_t)eb, eb, i);
        for (int p = 0; p < L && L > 1; p++) {
            quant_decode(Q, j, nbmax, recv1 + ((size_t)p * M + mp) * rec, p == 0 ? ps : tmp, 4);
            if (p > 0) for (size_t i = 0; i < s; i++) ps[i] += tmp[i];
        }
        if (M > 1) {
            size_t bad = quant_encode(Q, j, nbmax, ps, 4, send2 + (size_t)mp * rec);
            if (bad) quant_refuse_nonfinite(Q, j, bad, unit, "--quantize-grads", L > 1 ? "node-summed gradient of" : "gradient of");
        }
    }
    float* sum = part;   /* M = 1: the node's partial is the sum; else the partials are sent and part[0..s) is reused */
    if (M > 1) {
        hostcoll_exchange(inter, M, m, send2, recv2, rec / 4, 4, 1, poll, comm_ctx_what ? comm_ctx_what : "reduce-scatter nodes (qgZ)");
        int me = m * L + l;
        for (int p = 0; p < M; p++) {
            quant_decode(Q, me, nbmax, recv2 + (size_t)p * rec, p == 0 ? sum : tmp, 4);
            if (p > 0) for (size_t i = 0; i < s; i++) sum[i] += tmp[i];
        }
    }
    if (eb == 4) for (size_t i = 0; i < s; i++) ((float*)acc)[i] = sum[i] + ((float*)acc)[i];
    else for (size_t i = 0; i < s; i++) ((uint16_t*)acc)[i] = bf16_bits_from_float(sum[i] + bf16_bits_to_float(((uint16_t*)acc)[i]));
}

/* qwZ's all-gather, in place as hostcoll_all_gather (buf: n shards of
   Q->shard elements of eb bytes; Q: the unit's block layout, nbmax its
   scales per record): this rank's shard is quantized (quant_encode) into
   its record in `scratch` (n records of quant_record_bytes), the records
   are all-gathered, and every shard of buf, this rank's too, becomes the
   dequantized values of its record. A non-finite value in this rank's
   shard ends the run with one line naming the tensor, the element and the
   step (MPI_Abort: every rank ends). unit: for that message. */
static inline void hostcoll_all_gather_quantized(MPI_Comm mc, void* buf, const QuantLayout* Q, size_t nbmax, int eb,
                                                 void* scratch, int unit, int poll) {
    int n, r;
    MPI_Comm_size(mc, &n);
    MPI_Comm_rank(mc, &r);
    size_t rec = quant_record_bytes(nbmax, Q->shard, Q->bits), sb = Q->shard * (size_t)eb;
    size_t bad = quant_encode(Q, r, nbmax, (char*)buf + (size_t)r * sb, eb, (char*)scratch + (size_t)r * rec);
    if (bad) quant_refuse_nonfinite(Q, r, bad, unit, "--quantize-weights", "parameter");
    hostcoll_exchange(mc, n, r, scratch, scratch, rec / 4, 4, 0, poll, comm_ctx_what ? comm_ctx_what : "all-gather (int8)");
    for (int q = 0; q < n; q++) quant_decode(Q, q, nbmax, (const char*)scratch + (size_t)q * rec, (char*)buf + (size_t)q * sb, eb);
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
    int n, r;
    MPI_Comm_size(mc, &n);
    MPI_Comm_rank(mc, &r);
    double* all = (double*)malloc_or_die((size_t)n * (size_t)k * sizeof(double), "scalar all-gather");
    memcpy(all + (size_t)r * k, x, (size_t)k * sizeof(double));
    /* an all-gather in place of k doubles = 2k floats (the bits unchanged) */
    hostcoll_exchange(mc, n, r, all, all, (size_t)(2 * k), 4, 0, 0, comm_ctx_what ? comm_ctx_what : "scalar all-gather (loss, grad norm)");
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
    memcpy(out + (size_t)c->group_rank * n, mine, (size_t)n * sizeof(int));
    hostcoll_exchange(c->group_host, c->group_size, c->group_rank, out, out, (size_t)n, 4, 0, 0, "the embedding rows' token all-gather");
    comm_count(c, COLL_ALL_GATHER, (unsigned long long)n * (unsigned long long)c->group_size * sizeof(int), c->group_size);
}

static inline double comm_allreduce_max_host(Comm* c, double x) {
    double y = x;
    (void)c;
    MPI_Request req;
    MPI_Iallreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req);
    comm_wait_request(&req, 0, "a max all-reduce over every rank");
    return y;
}

static inline void comm_barrier(Comm* c) {
    (void)c;
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    comm_wait_request(&req, 0, comm_ctx_what ? comm_ctx_what : "a barrier over every rank");
}

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
