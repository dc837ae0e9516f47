/*
 comm.h: the process group. MPI bootstrap (rank, world size, local rank on
 the node via MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), the shard and
 replica groups (HSDP) and ZeRO++'s groups, the collective error contract
 (comm_check_all, comm_fatal), the collective watch (every wait's timeout,
 the per-peer arrival times: comm_watch.h), the traffic counters that every
 collective of the ZeRO engine reports to, and the placement table.

 The collectives themselves: comm_host.h (the deterministic collectives on
 host buffers: reduce-scatter, all-gather, all-reduce, the scalar sums) and
 comm_quant.h (ZeRO++'s quantized all-gather and reduce-scatter), each
 including this header. Traffic accounting (per rank, bytes handed and on
 the wire): traffic.h. The backends (MPI on host buffers for the CPU build,
 NCCL on device buffers for the CUDA build) call comm_count() once per call.
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
#include "interrupt.h"
#include "flight.h"
#include "comm_watch.h"   /* the waits of every collective (timeouts, arrivals, signals): below the process group, never above it */
#include "comm_straggler.h"   /* --straggler-report over the waits comm_watch.h records */

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
    /* the nodes of the shard group as the hosts' names place them (any
       order: block, cyclic, plane), for hpZ's `node` and qgZ's two hops:
       group_nodes[m * L + l] = the group rank of the l-th rank (in rank
       order) of the group's m-th node (nodes in order of their lowest
       rank); NULL: runs of L consecutive group ranks (--node-size L) */
    int* group_nodes;
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

static inline int comm_node_indices(int* out);

/* pos[q] (world entries): world rank q's place in node-major order (the
   ranks ordered by their node, nodes in order of their lowest rank, then
   by rank), from the node names of comm_watch.host. */
static inline void comm_node_major(int* pos, int world) {
    int* node = (int*)malloc_or_die((size_t)world * 2 * sizeof(int), "node-major order");
    int* count = node + world;
    int nodes = comm_node_indices(node);
    for (int m = 0; m < nodes; m++) count[m] = 0;
    for (int q = 0; q < world; q++) count[node[q]]++;
    for (int m = 0, at = 0; m < nodes; m++) { int n = count[m]; count[m] = at; at += n; }   /* each node's first place */
    for (int q = 0; q < world; q++) pos[q] = count[node[q]]++;
    free(node);
}

/* The shard group of world rank r for groups of G ranks (G divides the
   world size): out[0..G) = its members, the world ranks in rank order;
   returns r's index among them (its group rank). The groups are the runs
   of G ranks in node-major order (the ranks ordered by their node, nodes
   in order of their lowest rank, then by rank: the node names of
   comm_watch.host), so a group of the ranks per node is one node however
   the launcher placed the ranks (block: ranks 0..G-1, G..2G-1, ...;
   cyclic on 2 nodes: 0,2,... and 1,3,...). Under block placement this is
   ranks G*(r/G) .. G*(r/G)+G-1, whatever the nodes. G = world: every
   rank. The same on every rank (no communication). */
static inline int comm_group_members(int r, int G, int world, int* out) {
    if (G >= world || !comm_watch.host) {
        for (int q = 0; q < G; q++) out[q] = (r - r % G) + q;
        return r % G;
    }
    int* pos = (int*)malloc_or_die((size_t)world * sizeof(int), "shard groups");
    comm_node_major(pos, world);
    int k = 0, me = 0, g = pos[r] / G;
    for (int q = 0; q < world; q++)
        if (pos[q] / G == g) { if (q == r) me = k; out[k++] = q; }
    free(pos);
    return me;
}

/* The shard group of G ranks (see Comm and comm_group_members: the runs
   of G ranks in node-major order, in rank order inside each) and the
   replica groups (the ranks of one group rank, in the order of their
   groups' lowest ranks); G must
   divide the world size (the caller checks and reports). Collective over
   MPI_COMM_WORLD; may be called again (the previous groups are freed). */
static inline void comm_set_groups(Comm* c, int G) {
    if (c->group_comm != MPI_COMM_NULL) {
        flight_forget_comm(c->group_comm); flight_forget_comm(c->replica_comm); flight_forget_comm(c->group_host);
        MPI_Comm_free(&c->group_comm); MPI_Comm_free(&c->replica_comm); MPI_Comm_free(&c->group_host);
    }
    int* mem = (int*)malloc_or_die((size_t)G * sizeof(int), "shard groups");
    comm_group_members(c->rank, G, c->world_size, mem);
    int lowest = mem[0];   /* names the group; the replicas are in the order of their groups' lowest ranks */
    MPI_Comm_split(MPI_COMM_WORLD, lowest, c->rank, &c->group_comm);
    MPI_Comm_dup(c->group_comm, &c->group_host);
    MPI_Comm_size(c->group_comm, &c->group_size);
    MPI_Comm_rank(c->group_comm, &c->group_rank);
    MPI_Comm_split(MPI_COMM_WORLD, c->group_rank, lowest, &c->replica_comm);
    MPI_Comm_size(c->replica_comm, &c->replica_size);
    MPI_Comm_rank(c->replica_comm, &c->replica_rank);
    free(mem);
    flight_register_comm(c->group_comm, "shard group");
    flight_register_comm(c->replica_comm, "replica group");
    flight_register_comm(c->group_host, "shard group (main thread)");
}

/* MPI_Init_thread (MPI_THREAD_MULTIPLE when the library offers it: the CPU
   build's communication thread issues collectives while the main thread
   does its own on other communicators) and discovery of rank / local rank;
   the shard group is the world until comm_set_groups. Errors of MPI itself
   end the rank as a failed collective does (comm_mpi_error: one line, the
   flight record, exit 1; MPI_Abort ends the others). */
static inline void comm_init(Comm* c, int* argc, char*** argv) {
    memset(c, 0, sizeof(*c));
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    c->thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    comm_lost_peer_install();   /* Open MPI's "peer hung up" ends a collective's wait at once (comm_watch.h) */
    comm_mpi_errors_install();  /* an MPI call's error ends the rank with our line and exit 1 (comm_watch.h) */
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
    flight_register_comm(MPI_COMM_WORLD, "world");
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
    flight.nodes = w->host;
}

/* hpZ: the secondary groups, K ranks of the shard group each (K divides
   the group's size; the caller checks): with c->group_nodes (hpZ's
   `node`, K = its L) the ranks of one node, else K consecutive group
   ranks; the secondary rank is the place in the group's rank order. Any
   K ranks of equal count compute the same: a secondary all-gather only
   copies the K parts of a unit back together. Collective over the shard
   group. */
static inline void comm_set_secondary(Comm* c, int K, int by_node) {
    if (c->secondary_comm != MPI_COMM_NULL) { flight_forget_comm(c->secondary_comm); MPI_Comm_free(&c->secondary_comm); }
    int color = c->group_rank / K;
    if (by_node && c->group_nodes)
        for (int i = 0; i < c->group_size; i++) if (c->group_nodes[i] == c->group_rank) color = i / K;
    MPI_Comm_split(c->group_comm, color, c->group_rank, &c->secondary_comm);
    MPI_Comm_size(c->secondary_comm, &c->secondary_size);
    MPI_Comm_rank(c->secondary_comm, &c->secondary_rank);
    flight_register_comm(c->secondary_comm, "secondary group (hpZ)");
}

/* qgZ: the two hops' communicators for L ranks per node (L divides the
   shard group's size; the caller checks): intra, the L ranks of this
   rank's node in rank order (its local index l); inter, the M = G / L
   ranks of local index l, one per node, in node order (c->group_nodes'
   order, else runs of L consecutive group ranks). Collective over the
   group. */
static inline void comm_set_qg_groups(Comm* c, int L) {
    if (c->qg_intra != MPI_COMM_NULL) { flight_forget_comm(c->qg_intra); MPI_Comm_free(&c->qg_intra); }
    if (c->qg_inter != MPI_COMM_NULL) { flight_forget_comm(c->qg_inter); MPI_Comm_free(&c->qg_inter); }
    c->qg_L = L; c->qg_M = c->group_size / L;
    int m = c->group_rank / L, l = c->group_rank % L;
    if (c->group_nodes)
        for (int i = 0; i < c->group_size; i++) if (c->group_nodes[i] == c->group_rank) { m = i / L; l = i % L; }
    MPI_Comm_split(c->group_comm, m, c->group_rank, &c->qg_intra);
    MPI_Comm_split(c->group_comm, l, m, &c->qg_inter);
    flight_register_comm(c->qg_intra, "node (qgZ)");
    flight_register_comm(c->qg_inter, "nodes (qgZ)");
}

/* The nodes of this rank's shard group of G ranks (comm_group_members),
   from the node names of the watch, in any placement: when every node
   holds the same number L of the group's ranks, returns L and sets
   c->group_nodes (see Comm; the same table on every rank of the group);
   else 0 and c->group_nodes NULL. text (when not NULL): the group's nodes
   and their ranks for messages, "NODE: ranks 0,2; NODE: ranks 1,3" (world
   ranks, in rank order; nodes in order of their lowest rank). */
static inline int comm_group_node_layout(Comm* c, int G, char* text, size_t textlen) {
    int* mem = (int*)malloc_or_die((size_t)G * 3 * sizeof(int), "node layout");
    int* nodeof = mem + G;   /* per member: its node's place in the group (in order of the node's lowest member) */
    int* order = mem + 2 * G;
    comm_group_members(c->rank, G, c->world_size, mem);
    int nodes = 0;
    for (int i = 0; i < G; i++) {
        nodeof[i] = -1;
        for (int j = 0; j < i && nodeof[i] < 0; j++) if (!strcmp(comm_watch.host[mem[j]], comm_watch.host[mem[i]])) nodeof[i] = nodeof[j];
        if (nodeof[i] < 0) nodeof[i] = nodes++;
    }
    int k = 0, L = 0, even = 1;
    size_t at = 0;
    if (text && textlen) text[0] = 0;
    for (int m = 0; m < nodes; m++) {
        int n = 0, first = k;
        for (int i = 0; i < G; i++) if (nodeof[i] == m) { order[k++] = i; n++; }
        if (m == 0) L = n; else if (n != L) even = 0;
        for (int i = first; text && i < k && at + 16 < textlen; i++) {
            if (i == first) at += (size_t)snprintf(text + at, textlen - at, "%s%s: rank%s", m ? "; " : "", comm_watch.host[mem[order[i]]], n > 1 ? "s " : " ");
            if (at + 16 < textlen) at += (size_t)snprintf(text + at, textlen - at, "%s%d", i > first ? "," : "", mem[order[i]]);
        }
    }
    if (text && at + 16 >= textlen && textlen > 4) snprintf(text + textlen - 4, 4, "...");
    free(c->group_nodes);
    c->group_nodes = NULL;
    if (even) {
        c->group_nodes = (int*)malloc_or_die((size_t)G * sizeof(int), "node layout");
        memcpy(c->group_nodes, order, (size_t)G * sizeof(int));
    }
    free(mem);
    return even ? L : 0;
}

static inline void comm_finalize(Comm* c) {
    for (int i = 0; i < flight.ncomms; i++) if (flight.comms[i].mc != MPI_COMM_WORLD) flight_forget_comm(flight.comms[i].mc);
    if (c->secondary_comm != MPI_COMM_NULL) MPI_Comm_free(&c->secondary_comm);
    free(c->group_nodes); c->group_nodes = NULL;
    if (c->qg_intra != MPI_COMM_NULL) MPI_Comm_free(&c->qg_intra);
    if (c->qg_inter != MPI_COMM_NULL) MPI_Comm_free(&c->qg_inter);
    if (c->group_comm != MPI_COMM_NULL) {
        MPI_Comm_free(&c->group_comm); MPI_Comm_free(&c->replica_comm); MPI_Comm_free(&c->group_host);
    }
    MPI_Finalize();
}

/* Collective error check: every rank passes its own error message (NULL or
   "" when fine). If any rank failed, the lowest failing rank prints its
   message as one line "error: ..." on stderr and EVERY rank exits with code 1
   after MPI_Finalize. Must be reached by all ranks (it is a collective).
   Under the collective timeout like every collective (comm_watch.h); up to
   COMM_CHECK_PEERS_MAX ranks its timeout names the ranks that never
   answered. */
#define COMM_CHECK_PEERS_MAX 256
/* Called by comm_check_all on every rank once an error is agreed, before
   the barrier that precedes every rank's exit(1): what must be undone
   before any rank exits (the -o lock file, output_dir.h). mpirun ends the
   job at the first rank's exit, so an atexit handler of rank 0 can be cut
   short by another rank's exit (tests/suites/offload.sh saw the lock file
   of a refused run left in -o once). NULL: nothing. */
static void (*comm_before_error_exit)(void) = NULL;
static inline void comm_check_all(Comm* c, const char* err) {
    int mine = (err && err[0]) ? c->rank : c->world_size;
    int first = c->world_size;
    const char* what = comm_ctx_what ? comm_ctx_what : "the error check (an all-reduce over every rank)";
    const int n = c->world_size, r = c->rank;
    if (n > 1 && n <= COMM_CHECK_PEERS_MAX) {
        /* up to COMM_CHECK_PEERS_MAX ranks: one int to and from every peer
           (tag 713), so that a timeout names the ranks whose answer never
           came (hostcoll_wait_peers), as the collectives' timeouts do; the
           minimum over all is MPI_MIN's */
        int vals[COMM_CHECK_PEERS_MAX];
        MPI_Request rq[COMM_CHECK_PEERS_MAX], sq[COMM_CHECK_PEERS_MAX];
        unsigned long long fid = flight_start(MPI_COMM_WORLD, n, what, -1, comm_watch.step, (long long)sizeof(int) * (n - 1), 1);
        for (int q = 0; q < n; q++) {
            rq[q] = sq[q] = MPI_REQUEST_NULL;
            vals[q] = mine;
            if (q != r) MPI_Irecv(&vals[q], 1, MPI_INT, q, 713, MPI_COMM_WORLD, &rq[q]);
        }
        for (int k = 1; k < n; k++) MPI_Isend(&mine, 1, MPI_INT, (r + k) % n, 713, MPI_COMM_WORLD, &sq[(r + k) % n]);
        hostcoll_wait_peers(MPI_COMM_WORLD, n, r, rq, sq, 0, what, fid);
        for (int q = 0; q < n; q++) if (vals[q] < first) first = vals[q];
    } else {
        MPI_Request req;
        MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req);
        comm_wait_request(&req, 0, what);
    }
    if (first == c->world_size) return;
    if (c->rank == first) {
        fprintf(stderr, "error: %s\n", err);
        fflush(stderr);
    }
    if (comm_before_error_exit) comm_before_error_exit();
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    exit(1);
}

/* Collective: every rank runs the same configuration. desc is this rank's
   resolved configuration as "key value" pairs separated by single spaces
   (the trainer's: every flag that shapes the plan, the collectives or the
   numbers, after -z auto; train_gpt.cu run_config_text). Each rank
   all-gathers a 64-bit FNV-1a hash of it; if any rank's differs from rank
   0's, every rank ends (comm_check_all) with one line from the lowest such
   rank naming the first pair that differs, both values, and every rank
   that differs: a mismatch is one error, never a hang in a collective
   whose shapes disagree. what names the kind ("configurations", "flags"). */
#define COMM_CONFIG_TEXT 32768   /* the longest desc: room for five 4096-byte paths and every flag */
static inline void comm_agree_config(Comm* c, const char* what, const char* desc) {
    char err[ERRLEN] = "";
    unsigned long long h = 1469598103934665603ULL;
    for (const unsigned char* p = (const unsigned char*)desc; *p; p++) { h ^= *p; h *= 1099511628211ULL; }
    unsigned long long* all = (unsigned long long*)malloc_or_die((size_t)c->world_size * sizeof(unsigned long long), "config hashes");
    MPI_Request rq;
    MPI_Iallgather(&h, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "the configuration check (an all-gather of every rank's hash)");
    int differ = 0;
    for (int r = 1; r < c->world_size; r++) differ += all[r] != all[0];
    if (differ) {
        char ref[COMM_CONFIG_TEXT];
        snprintf(ref, sizeof(ref), "%s", desc);
        MPI_Ibcast(ref, (int)sizeof(ref), MPI_CHAR, 0, MPI_COMM_WORLD, &rq);
        comm_wait_request(&rq, 0, "the configuration check (rank 0's configuration)");
        if (all[c->rank] != all[0]) {
            int* ranks = (int*)malloc_or_die((size_t)differ * sizeof(int), "config ranks");
            int k = 0;
            for (int r = 1; r < c->world_size; r++) if (all[r] != all[0]) ranks[k++] = r;
            char list[600];
            comm_format_ranks(list, sizeof(list), ranks, k);
            free(ranks);
            /* the first "key value" pair that differs */
            const char* a = desc; const char* b = ref;
            char mk[128] = "?", mv[256] = "?", rv[256] = "?";
            while (*a || *b) {
                const char* ae = strchr(a, ' '); const char* be = strchr(b, ' ');
                const char* av = ae ? ae + 1 : a + strlen(a); const char* bv = be ? be + 1 : b + strlen(b);
                const char* an = strchr(av, ' '); const char* bn = strchr(bv, ' ');
                if (!an) an = av + strlen(av);
                if (!bn) bn = bv + strlen(bv);
                if ((size_t)(an - a) != (size_t)(bn - b) || strncmp(a, b, (size_t)(an - a))) {
                    snprintf(mk, sizeof(mk), "%.*s", ae ? (int)(ae - a) : (int)strlen(a), a);
                    snprintf(mv, sizeof(mv), "%.*s", (int)(an - av), av);
                    snprintf(rv, sizeof(rv), "%.*s", (int)(bn - bv), bv);
                    break;
                }
                a = *an ? an + 1 : an; b = *bn ? bn + 1 : bn;
            }
            set_err(err, ERRLEN, "the ranks would run different %s: rank %d has %s = %s where rank 0 has %s = %s (the ranks that differ from rank 0: %s); "
                    "every rank must run the same program with the same flags and environment", what, c->rank, mk, mv, mk, rv, list);
        }
    }
    free(all);
    comm_check_all(c, err);
}

/* A local error that other ranks cannot know about (a failed allocation, a
   backend error in the middle of a step): one line naming the rank, the
   flight record (flight.h), then MPI_Abort (comm_abort), which ends every
   rank with a non-zero code, never a hang. */
static inline void comm_fatal(Comm* c, const char* fmt, ...) {
    va_list ap;
    char msg[2048];
    int k = snprintf(msg, sizeof(msg), "error (rank %d): ", c ? c->rank : -1);
    va_start(ap, fmt);
    vsnprintf(msg + k, sizeof(msg) - (size_t)k, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
    flight_dump("abort", msg, comm_watch.host ? comm_watch.host[comm_watch.rank] : NULL, comm_watch.step);
    comm_abort();
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
