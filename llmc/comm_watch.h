/*
 comm_watch.h: the collective watch, included by comm.h (it depends on
 utils.h, interrupt.h and flight.h only, never on comm.h: the process
 group's error check and configuration check, in comm.h, wait through it).
 Every
 wait of the trainer's collectives on host buffers goes through
 hostcoll_wait_peers (one message per peer: it knows whose data came) or
 comm_wait_request (MPI's own collectives); both apply
 --collective-timeout, record arrivals for the straggler report and the
 flight recorder (flight.h), and notice a signal (interrupt.h). Also here:
 Open MPI's keepalive bound, the agreed watch settings, the straggler
 report.
*/
#ifndef LLMC_COMM_WATCH_H
#define LLMC_COMM_WATCH_H

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "utils.h"
#include "interrupt.h"
#include "flight.h"

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
    double keepalive_s;         /* Open MPI's daemon keepalive bound (comm_keepalive_bound), 0: not set */
    int signal_reported;        /* a signal found this rank waiting: said once (comm_notice_signal) */
    const char* out_dir;        /* -o, for the messages that name the flight records */
    double entry_sum;           /* the straggler report: the sum of this rank's entry times into its collectives
                                   (seconds since an epoch every rank shares, entry_epoch) */
    unsigned long long entry_n; /* and their count */
    double entry_epoch;         /* rank 0's CLOCK_REALTIME at comm_straggler_init, minus the CLOCK_MONOTONIC offset of this rank */
} CommWatch;
static CommWatch comm_watch = {60.0, 0, 0, 1, NULL, PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0.0, 0, NULL, 0.0, 0, 0.0};
/* what the calling thread's next collective is for (messages): e.g.
   "reduce-scatter" and the unit; NULL / -1 when unknown */
static __thread const char* comm_ctx_what = NULL;
static __thread int comm_ctx_unit = -1;

/* MPI_Abort with a grace of COMM_ABORT_GRACE_S: the abort asks the
   launcher to end every rank (mpirun's "MPI_ABORT was invoked on rank R",
   srun kills the step), but when the launcher is ending the job already
   (mpirun has lost a node) it blocks until the launcher's SIGKILL
   (measured: odls_base_sigkill_timeout x 2, docs/faults.md); a thread
   started first ends this rank with exit code 1 when the abort has not
   returned by then. Never returns. */
#define COMM_ABORT_GRACE_S 2
static void* comm_abort_grace(void* arg) {
    (void)arg;
    struct timespec ts = {COMM_ABORT_GRACE_S, 0};
    nanosleep(&ts, NULL);
    _exit(1);
    return NULL;
}
static inline void comm_abort(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, comm_abort_grace, NULL) == 0) pthread_detach(t);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}


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
    int found = 0;   /* a communicator of the flight recorder's registry: its world ranks, no MPI call */
    pthread_mutex_lock(&flight_mu);
    for (int i = 0; i < flight.ncomms && !found; i++)
        if (flight.comms[i].mc == mc && flight.comms[i].n == n) { memcpy(out, flight.comms[i].world, (size_t)n * sizeof(int)); found = 1; }
    pthread_mutex_unlock(&flight_mu);
    if (found) return 0;
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

/* World ranks ranks[0..n) as a list grouped by node, the form of every
   message that names ranks: "2, 3 (node llmc-node1), 5 (node llmc-node2)"
   (a node named after its last rank in a run of ranks on it). Returns the
   length written into out (cap bytes; a list that does not fit ends early). */
static inline size_t comm_format_ranks(char* out, size_t cap, const int* ranks, int n) {
    const CommWatch* w = &comm_watch;
    size_t k = 0;
    const char* last_host = NULL;
    out[0] = 0;
    for (int i = 0; i < n && k + 80 < cap; i++) {
        const char* h = w->host ? w->host[ranks[i]] : "?";
        if (last_host && strcmp(h, last_host)) k += (size_t)snprintf(out + k, cap - k, " (node %s)", last_host);
        k += (size_t)snprintf(out + k, cap - k, "%s%d", i ? ", " : "", ranks[i]);
        last_host = h;
    }
    if (last_host && k < cap) k += (size_t)snprintf(out + k, cap - k, " (node %s)", last_host);
    return k < cap ? k : cap - 1;
}

/* Open MPI's bound on noticing a lost node, in seconds: its daemons'
   connections to mpirun carry TCP keepalives (ompi_info --all: MCA oob tcp
   oob_tcp_keepalive_time, _intvl, _probes; the launch scripts and make's
   MPIRUN set them, docs/faults.md), so mpirun declares a daemon lost at
   most time + intvl x probes seconds after its link is cut, if it has not
   sent that daemon anything since (a message left unacknowledged falls
   back to TCP's retransmission timeout, about 15 minutes). mpirun passes
   its MCA settings to the ranks as OMPI_MCA_* variables; 0 when they are
   not set (Slurm's srun, another launcher, the default 300 + 9 x 20 s). */
static inline double comm_keepalive_bound(void) {
    const char* t = getenv("OMPI_MCA_oob_tcp_keepalive_time");
    const char* i = getenv("OMPI_MCA_oob_tcp_keepalive_intvl");
    const char* p = getenv("OMPI_MCA_oob_tcp_keepalive_probes");
    if (!t) return 0.0;
    double tt = atof(t), ii = i ? atof(i) : 20.0, pp = p ? atof(p) : 9.0;
    return tt > 0 && tt + ii * pp < 600 ? tt + ii * pp : 0.0;
}

/* The collective timeout, Open MPI's keepalive bound and the flight
   recorder's size: rank 0's values, broadcast, so that every rank waits
   as long and records as much (docs/design.md section 11). Collective
   over MPI_COMM_WORLD, at start-up. */
static inline void comm_agree_watch(float* timeout_s, int* flight_k) {
    double v[3] = {*timeout_s, comm_keepalive_bound(), (double)*flight_k};
    MPI_Bcast(v, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    *timeout_s = (float)v[0]; comm_watch.timeout_s = v[0];
    comm_watch.keepalive_s = v[1];
    *flight_k = (int)v[2];
}

static inline const char* comm_my_node(void) { return comm_watch.host ? comm_watch.host[comm_watch.rank] : "?"; }

/* Rank 0's work alone at start-up (measuring the bf16 matmul paths when
   the calibration file is missing or not this CPU's; -z auto's candidates):
   the other ranks wait for it in the collective that follows, a wait that
   lasts as long as that work, not a lost peer. Between comm_solo_begin and
   comm_solo_end (called by every rank alike, main thread) the waits run
   under a bound sized to such work instead of --collective-timeout:
   COMM_SOLO_FACTOR times the timeout, at least COMM_SOLO_MIN_S; a rank that
   has waited past the plain timeout says once what rank 0 is doing (rank 1
   only: one line), and a timeout's line names it too. */
#define COMM_SOLO_FACTOR 10.0
#define COMM_SOLO_MIN_S 600.0
static const char* comm_solo_what = NULL;   /* what rank 0 is doing (a literal), NULL: none */
static int comm_solo_said = 0;
static inline void comm_solo_begin(const char* what) { comm_solo_what = what; comm_solo_said = 0; }
static inline void comm_solo_end(void) { comm_solo_what = NULL; }
/* The bound of the calling wait (0: none). */
static inline double comm_wait_limit(void) {
    double t = comm_watch.timeout_s;
    if (t <= 0 || !comm_solo_what || flight_thread) return t;
    return t * COMM_SOLO_FACTOR > COMM_SOLO_MIN_S ? t * COMM_SOLO_FACTOR : COMM_SOLO_MIN_S;
}
/* Test hook LLMC_TEST_SLOW_START_S=S: rank 0's work alone at start-up
   takes S seconds longer (a slow CPU measuring its matmul paths, a large
   -z auto enumeration), so that a CPU on which nothing is measured can
   test the others' wait. */
static inline void comm_test_slow_start(void) {
    const char* e = getenv("LLMC_TEST_SLOW_START_S");
    double s = e ? atof(e) : 0.0;
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}
/* In a wait past the plain timeout while rank 0 works alone: the line. */
static inline void comm_solo_note(double waited) {
    if (!comm_solo_what || flight_thread || comm_solo_said || comm_watch.timeout_s <= 0 || waited <= comm_watch.timeout_s) return;
    comm_solo_said = 1;
    if (comm_watch.rank != 1) return;
    fprintf(stderr, "rank 1 (node %s): waiting %.0f s for rank 0, which is %s: the collective timeout (%.0f s) does not apply to this wait, "
            "which may last %.0f s\n", comm_my_node(), waited, comm_solo_what, comm_watch.timeout_s, comm_wait_limit());
    fflush(stderr);
}

/* The peers q of mc (n ranks) with miss[q] != 0 as world ranks, formatted
   as comm_format_ranks does, and the nodes among them other than this
   rank's (", "-separated) in others. */
static inline void comm_missing_text(MPI_Comm mc, int n, const char* miss, char* list, size_t cap, char* others, size_t ocap) {
    list[0] = others[0] = 0;
    int* wr = (int*)malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    if (!wr || mc == MPI_COMM_NULL || comm_world_ranks(mc, n, wr) != 0) { free(wr); return; }
    int k = 0;
    for (int q = 0; q < n; q++) if (miss[q]) wr[k++] = wr[q];   /* the missing ones, in order */
    comm_format_ranks(list, cap, wr, k);
    size_t ok = 0;
    const CommWatch* w = &comm_watch;
    for (int i = 0; i < k && w->host; i++) {
        const char* h = w->host[wr[i]];
        if (!strcmp(h, comm_my_node())) continue;
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(w->host[wr[j]], h);
        if (!seen && ok + strlen(h) + 8 < ocap) ok += (size_t)snprintf(others + ok, ocap - ok, "%s%s", ok ? ", " : "", h);
    }
    free(wr);
}

/* The timeout's one line (see above), the flight record, then MPI_Abort
   (every rank ends, mpirun or srun exits non-zero). missing[q] != 0: the
   peers (ranks q of mc) whose data did not arrive (recv = 1) or that did
   not take this rank's (recv = 0). When the missing ranks are on other
   nodes the line says how to go on without them. Before the abort the rank
   waits until Open MPI's keepalive bound (comm_keepalive_bound) plus
   COMM_ABORT_MARGIN_S has passed since the collective began, so that
   mpirun has noticed a lost node before the abort makes it send that
   node's daemon a message it could only retry (measured: docs/faults.md).
   A signal (the launcher is ending the job already) ends the wait and the
   rank with _exit(1) instead of the abort, which would block until the
   launcher's SIGKILL. */
#define COMM_ABORT_MARGIN_S 5.0
/* Before an exit that mpirun will see, wait until Open MPI's keepalive
   bound plus COMM_ABORT_MARGIN_S has passed since the collective began
   (waited seconds ago), unless a signal comes (the launcher is ending the
   job already): see comm_watch_expired. */
static inline void comm_wait_keepalive(double waited) {
    for (double t = waited; comm_watch.keepalive_s > 0 && t < comm_watch.keepalive_s + COMM_ABORT_MARGIN_S && !intr_pending(); t += 0.1) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
}
/* The rescue (rescue.h, HSDP): when set, a timeout calls it after its line
   and flight record, from the thread that timed out. It returns when its
   shard group cannot write the checkpoint (the abort follows as before);
   otherwise it writes it and ends the process itself. */
static void (*comm_rescue_hook)(double waited) = NULL;
static inline void comm_watch_expired(MPI_Comm mc, int n, const char* missing, int recv, const char* what, double waited) {
    CommWatch* w = &comm_watch;
    char list[1024] = "", others[512] = "";
    int nmiss = 0;
    for (int q = 0; q < n; q++) nmiss += missing[q] != 0;
    comm_missing_text(mc, n, missing, list, sizeof(list), others, sizeof(others));
    char unit[32] = "", step[32] = "", hint[1024] = "";
    if (comm_ctx_unit >= 0) snprintf(unit, sizeof(unit), " of unit %d", comm_ctx_unit);
    if (w->step > 0) snprintf(step, sizeof(step), " (step %d)", w->step);
    if (others[0] && recv)
        snprintf(hint, sizeof(hint), "; if node%s %s %s gone, resume on the remaining nodes with -y 1 (docs/faults.md)",
                 strchr(others, ',') ? "s" : "", others, strchr(others, ',') ? "are" : "is");
    if (flight.K && flight.dir[0])
        snprintf(hint + strlen(hint), sizeof(hint) - strlen(hint), "; where every rank stopped: python3 dev/flight.py %s",
                 w->out_dir ? w->out_dir : "OUT");
    char line[3072], solo[400] = "";
    if (comm_solo_what && !flight_thread)
        snprintf(solo, sizeof(solo), " while rank 0 was %.300s (a bound of %.0f s for that work)", comm_solo_what, comm_wait_limit());
    snprintf(line, sizeof(line), "error (rank %d, node %s): %s%s%s did not complete in %.0f s%s: %s%s%s (--collective-timeout %.0f; 0 waits forever)%s",
             w->rank, comm_my_node(), what, unit, step, waited, solo,
             list[0] ? (recv ? (nmiss > 1 ? "no data from ranks " : "no data from rank ") : (nmiss > 1 ? "ranks " : "rank ")) : "a rank of the communicator did not take part",
             list, list[0] && !recv ? " did not take this rank's data" : "", w->timeout_s, hint);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    /* the launcher's SIGTERM finds the other thread still waiting later: its
       notice (comm_notice_signal) must not replace this record, which names
       the cause, by one that says only "SIGTERM" */
    __atomic_store_n(&w->signal_reported, 1, __ATOMIC_SEQ_CST);
    flight_dump("collective timeout", line, comm_my_node(), w->step);
    if (comm_rescue_hook) comm_rescue_hook(waited);
    comm_wait_keepalive(waited);
    if (!intr_pending()) comm_abort();
    _exit(1);
}

/* A signal (interrupt.h) while this rank waits: once the wait has lasted a
   second past both its start (t0) and the signal, the rank says so once
   (one line naming the collective and, when known, the peers it waits for:
   miss[q] != 0 for rank q of mc) and writes its flight record; it goes on
   waiting (the step boundary where the run stops, the collective timeout,
   or the launcher's SIGKILL ends it). Called from the wait loops, normal
   context. */
static inline void comm_notice_signal(MPI_Comm mc, int n, const char* miss, const char* what, double t0, double now) {
    CommWatch* w = &comm_watch;
    int s = intr_pending();
    if (!s || w->signal_reported || now - t0 < 1.0 || now - intr_first_s() < 1.0) return;
    if (__sync_lock_test_and_set(&w->signal_reported, 1)) return;
    char list[1024] = "", others[512] = "", unit[32] = "", step[32] = "", line[3072];
    int nmiss = 0;
    for (int q = 0; miss && q < n; q++) nmiss += miss[q] != 0;
    if (miss) comm_missing_text(mc, n, miss, list, sizeof(list), others, sizeof(others));
    if (comm_ctx_unit >= 0) snprintf(unit, sizeof(unit), " of unit %d", comm_ctx_unit);
    if (w->step > 0) snprintf(step, sizeof(step), " (step %d)", w->step);
    int k = snprintf(line, sizeof(line), "rank %d (node %s): %s, but %s%s%s has waited %.1f s %s%s", w->rank, comm_my_node(), intr_signame(s), what,
                     unit, step, now - t0, list[0] ? (nmiss > 1 ? "for data from ranks " : "for data from rank ") : "", list[0] ? list : miss ? "" : "(the peers it waits for are not known)");
    if (others[0])
        k += snprintf(line + k, sizeof(line) - (size_t)k, "; if node%s %s %s gone, resume on the remaining nodes with -y 1 (docs/faults.md)",
                      strchr(others, ',') ? "s" : "", others, strchr(others, ',') ? "are" : "is");
    if (flight.dir[0] && flight.K)
        snprintf(line + k, sizeof(line) - (size_t)k, "; wrote its flight record (python3 dev/flight.py %s: where every rank stopped)", w->out_dir ? w->out_dir : "OUT");
    flight_dump(intr_signame(s), line, comm_my_node(), w->step);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

/* Wait for one collective's receives rreq[q] and sends sreq[q] (q != r: the
   peers of mc; rreq[r] = sreq[r] = MPI_REQUEST_NULL), adding to the watch
   how long this rank waited for each peer's data and to the flight record
   fid (flight.h) which peers' data came. poll = 1 sleeps 20 us between
   rounds of tests once 64 rounds found nothing (the communication thread:
   a thread waiting on the network leaves the cores to the compute threads;
   Open MPI progresses the transfers inside each MPI_Test), 0 spins (the
   main thread). The timeout and a signal: see above. */
static inline void hostcoll_wait_peers(MPI_Comm mc, int n, int r, MPI_Request* rreq, MPI_Request* sreq, int poll, const char* what,
                                       unsigned long long fid) {
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
            if (!done[q]) {
                MPI_Test(&rreq[q], &flag, MPI_STATUS_IGNORE);
                if (flag) { done[q] = 1; left--; arr[q] = wall_seconds(); flight_arrived(fid, q); }
            }
            if (!done[n + q]) { MPI_Test(&sreq[q], &flag, MPI_STATUS_IGNORE); if (flag) { done[n + q] = 1; left--; } }
        }
        if (left == 0) break;
        if ((spins & 63) == 63 || poll) {
            now = wall_seconds();
            if (intr_pending()) {
                char miss[256];
                for (int q = 0; q < n && q < 256; q++) miss[q] = !done[q];
                comm_notice_signal(mc, n > 256 ? 256 : n, miss, what, t0, now);
            }
        }
        if (comm_solo_what) comm_solo_note(now - t0);
        if (comm_wait_limit() > 0 && now - t0 > comm_wait_limit()) {
            int any_recv = 0;
            char* miss = (char*)calloc((size_t)n, 1);
            for (int q = 0; q < n && miss; q++) if (!done[q]) { miss[q] = 1; any_recv = 1; }
            if (miss && !any_recv) for (int q = 0; q < n; q++) miss[q] = !done[n + q];
            comm_watch_expired(mc, n, miss ? miss : done, any_recv, what, now - t0);
        }
        if (poll && spins > 64) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
    }
    flight_done(fid);
    /* arrival times: the wait for each peer's data; the entry time (the straggler report) */
    if (w->wait_for && n > 1) {
        int stack_wr[256];   /* no allocation per collective up to 256 ranks */
        int* wr = n <= 256 ? stack_wr : (int*)malloc((size_t)n * sizeof(int));
        if (wr && comm_world_ranks(mc, n, wr) == 0) {
            pthread_mutex_lock(&w->mu);
            for (int q = 0; q < n; q++) if (q != r) { w->wait_for[wr[q]] += arr[q] - t0; w->waits[wr[q]]++; }
            w->entry_sum += t0 - w->entry_epoch; w->entry_n++;
            pthread_mutex_unlock(&w->mu);
        }
        if (wr != stack_wr) free(wr);
    }
    if (done != stack_done) free(done);
    if (arr != stack_arr) free(arr);
}

/* Wait for one request of MPI's own collectives over mc (n ranks) with the
   watch's timeout (what names it; the peers are not known), recorded in
   the flight recorder as what, on mc's call counter (a communicator the
   recorder does not know gets no call number: the world's stays the same
   on every rank). poll as hostcoll_wait_peers; it polls even with no
   timeout, so that a signal is noticed. */
static inline void comm_wait_request_on(MPI_Comm mc, int n, MPI_Request* req, int poll, const char* what) {
    CommWatch* w = &comm_watch;
    unsigned long long fid = flight_start(mc, n, what, -1, w->step, -1, 0);
    double t0 = wall_seconds();
    int flag = 0;
    for (unsigned long spins = 0;; spins++) {
        MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (flag) { flight_done(fid); return; }
        double now = wall_seconds();
        if (intr_pending()) comm_notice_signal(mc, n, NULL, what, t0, now);
        if (comm_solo_what) comm_solo_note(now - t0);
        if (comm_wait_limit() > 0 && now - t0 > comm_wait_limit()) comm_watch_expired(MPI_COMM_NULL, 0, "", 0, what, now - t0);
        if (poll || spins > 1000) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
    }
}
/* The same over MPI_COMM_WORLD (most callers'). */
static inline void comm_wait_request(MPI_Request* req, int poll, const char* what) {
    comm_wait_request_on(MPI_COMM_WORLD, comm_watch.world, req, poll, what);
}

/* --straggler-report, per training step: how long this rank waited per
   receive for each peer's data during the step (its mean), for the last
   COMM_STEP_RING timed steps, in a ring allocated once
   (comm_straggler_init); the report takes the median over those steps, so
   that a few slow steps (another process took the core once) do not name
   a rank: a straggler is late step after step. comm_watch_step_begin /
   _end bracket one optimizer step (evaluation and checkpoints between
   steps are not counted); end with record = 0 (a process's first step,
   which waits for the others' start-up) only moves the snapshot. */
#define COMM_STEP_RING 64
typedef struct {
    double* snap_wait;             /* per world rank: wait_for at the step's begin */
    unsigned long long* snap_n;
    double* steps;                 /* COMM_STEP_RING x world: mean wait per receive (s), -1 none */
    double snap_entry;             /* entry_sum, entry_n at the step's begin */
    unsigned long long snap_entry_n;
    double* entry;                 /* COMM_STEP_RING x 2: the step's sum of entry times and their count */
    int nsteps;                    /* steps recorded */
} CommStepWaits;
static CommStepWaits comm_steps;

static inline void comm_straggler_init(int world) {
    /* the epoch every rank measures entry times from: rank 0's Unix time, each rank's CLOCK_MONOTONIC
       offset to Unix time applied (one clock on one machine; on a cluster, as close as the nodes' clocks) */
    struct timespec m, u;
    clock_gettime(CLOCK_MONOTONIC, &m);
    clock_gettime(CLOCK_REALTIME, &u);
    double off = ((double)u.tv_sec + 1e-9 * u.tv_nsec) - ((double)m.tv_sec + 1e-9 * m.tv_nsec), epoch = off + wall_seconds();
    MPI_Bcast(&epoch, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    comm_watch.entry_epoch = epoch - off;
    comm_steps.entry = (double*)calloc_or_die((size_t)COMM_STEP_RING * 2, sizeof(double), "straggler report");
    comm_steps.snap_wait = (double*)calloc_or_die((size_t)world, sizeof(double), "straggler report");
    comm_steps.snap_n = (unsigned long long*)calloc_or_die((size_t)world, sizeof(unsigned long long), "straggler report");
    comm_steps.steps = (double*)calloc_or_die((size_t)COMM_STEP_RING * (size_t)world, sizeof(double), "straggler report");
}
static inline void comm_watch_step_begin(void) {
    CommWatch* w = &comm_watch;
    if (!comm_steps.steps) return;
    pthread_mutex_lock(&w->mu);
    memcpy(comm_steps.snap_wait, w->wait_for, (size_t)w->world * sizeof(double));
    memcpy(comm_steps.snap_n, w->waits, (size_t)w->world * sizeof(unsigned long long));
    comm_steps.snap_entry = w->entry_sum; comm_steps.snap_entry_n = w->entry_n;
    pthread_mutex_unlock(&w->mu);
}
static inline void comm_watch_step_end(int record) {
    CommWatch* w = &comm_watch;
    if (!comm_steps.steps || !record) return;
    double* row = comm_steps.steps + (size_t)(comm_steps.nsteps % COMM_STEP_RING) * (size_t)w->world;
    pthread_mutex_lock(&w->mu);
    for (int q = 0; q < w->world; q++) {
        unsigned long long dn = w->waits[q] - comm_steps.snap_n[q];
        row[q] = dn ? (w->wait_for[q] - comm_steps.snap_wait[q]) / (double)dn : -1.0;
    }
    double* e = comm_steps.entry + (size_t)(comm_steps.nsteps % COMM_STEP_RING) * 2;
    e[0] = w->entry_sum - comm_steps.snap_entry; e[1] = (double)(w->entry_n - comm_steps.snap_entry_n);
    pthread_mutex_unlock(&w->mu);
    comm_steps.nsteps++;
}

static inline int comm_cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}
/* the median of the n values v[0], v[stride], ... (0 when n = 0); sorts a copy in tmp */
static inline double comm_median_all(const double* v, int n, int stride, double* tmp) {
    for (int i = 0; i < n; i++) tmp[i] = v[(size_t)i * stride];
    if (!n) return 0.0;
    qsort(tmp, (size_t)n, sizeof(double), comm_cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}
/* the median of the n values of v that are >= 0 (-1 when none); sorts a copy in tmp */
static inline double comm_median(const double* v, int n, int stride, double* tmp) {
    int k = 0;
    for (int i = 0; i < n; i++) if (v[(size_t)i * stride] >= 0) tmp[k++] = v[(size_t)i * stride];
    if (!k) return -1.0;
    qsort(tmp, (size_t)k, sizeof(double), comm_cmp_double);
    return k % 2 ? tmp[k / 2] : 0.5 * (tmp[k / 2 - 1] + tmp[k / 2]);
}

/* The rule that names a straggler: per timed step, how much later than the
   median rank it entered its collectives (its entry times' sum minus the
   median rank's, over their count: every rank enters the same collectives
   in the same order), the median over the steps, over COMM_STRAGGLER_SHARE
   of the median step time and at least COMM_STRAGGLER_MS. The waits for a
   peer's data ("others waited") were too noisy a measure: they hold the
   transfer and the receiver's own wake-up, which a loaded core delays by
   milliseconds, so with two nodes sharing the 2 cores of an AMD EPYC (Zen
   1) beside other work (load average 5-10) and a busy loop on each core, an
   unslowed node had up to 4.1x the other's (12 runs), against 7.9-27x for a
   node held to 5% of its cpus. Entry lateness there, 2 nodes x 1 rank,
   -e d2 -b 1 -t 32 -z 1 -x 5: no node slowed 0.08-4.2 ms per collective
   (4 runs, steps of 490-640 ms: up to 0.70% of the step); node 1 at 5% of
   its cpus (cluster.sh cpu) 26.2-29.8 ms (3 runs, steps of 1.2-1.3 s: from
   2.1% of the step). The bar, 1.2%, sits between the two by the same factor
   (about 1.7) either way. Entry times are compared across ranks on
   CLOCK_REALTIME from a shared epoch (comm_straggler_init): one clock on
   one machine, as close as the nodes' clocks on a cluster (NTP: about a
   millisecond). */
#define COMM_STRAGGLER_SHARE 0.012
#define COMM_STRAGGLER_MS 2.0

/* --straggler-report: every rank's mean step (step_ms), compute and wait
   (wait_ms) times over its `timed` steps, its lateness (above), and how
   long the other ranks waited for its data (from posting a collective's
   receive to that peer's data arriving, per receive: the median over the
   timed steps of each step's mean, then the mean over the other ranks). A
   rank that breaks the rule above is named, with its node. Collective over
   all ranks; rank 0 prints. */
static inline void comm_straggler_report(double step_ms, double wait_ms, int timed) {
    int N = comm_watch.world, R = COMM_STEP_RING, rank0 = comm_watch.rank == 0;
    CommWatch* w = &comm_watch;
    int rowlen = 4 + R * N + 2 * R;
    double* row = (double*)calloc_or_die((size_t)rowlen, sizeof(double), "straggler report");
    row[0] = step_ms; row[1] = wait_ms;
    row[2] = comm_steps.nsteps < R ? comm_steps.nsteps : R;
    if (comm_steps.steps) memcpy(row + 4, comm_steps.steps, (size_t)R * N * sizeof(double));
    if (comm_steps.entry) memcpy(row + 4 + R * N, comm_steps.entry, (size_t)R * 2 * sizeof(double));
    double* all = rank0 ? (double*)malloc_or_die((size_t)N * rowlen * sizeof(double), "straggler report") : NULL;
    MPI_Request rq;
    MPI_Igather(row, rowlen, MPI_DOUBLE, all, rowlen, MPI_DOUBLE, 0, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "the straggler report's gather");
    if (rank0) {
        double* late = (double*)malloc_or_die((size_t)N * sizeof(double), "straggler report");
        double* tmp = (double*)malloc_or_die((size_t)(R > N ? R : N) * sizeof(double), "straggler report");
        for (int p = 0; p < N; p++) {   /* mean over observers o != p of (median over o's steps of o's wait for p per receive) */
            double sum = 0.0;
            int k = 0;
            for (int o = 0; o < N; o++) {
                const double* ro = all + (size_t)o * rowlen;
                if (o == p) continue;
                double m = comm_median(ro + 4 + p, (int)ro[2], N, tmp);
                if (m >= 0) { sum += m; k++; }
            }
            late[p] = k ? 1000.0 * sum / k : 0.0;
        }
        /* lateness: per timed step, how much later than the median rank this rank entered its collectives, per
           collective (the sum of its entry times minus the median sum, over the count); then the median over steps */
        double* lat = (double*)malloc_or_die((size_t)N * sizeof(double), "straggler report");
        double* per = (double*)malloc_or_die((size_t)R * N * sizeof(double), "straggler report");
        int S = (int)all[2];
        for (int o = 1; o < N; o++) if ((int)all[(size_t)o * rowlen + 2] < S) S = (int)all[(size_t)o * rowlen + 2];
        for (int j = 0; j < S; j++) {
            int same = 1;
            double cnt = all[4 + (size_t)R * N + 2 * j + 1];
            for (int o = 0; o < N; o++) {
                const double* e = all + (size_t)o * rowlen + 4 + (size_t)R * N + 2 * j;
                tmp[o] = e[0];
                if (e[1] != cnt || cnt <= 0) same = 0;
            }
            double med = same ? comm_median_all(tmp, N, 1, tmp) : 0.0;
            for (int p = 0; p < N; p++)
                per[(size_t)j * N + p] = same ? (all[(size_t)p * rowlen + 4 + (size_t)R * N + 2 * j] - med) / cnt : -1e30;
        }
        for (int p = 0; p < N; p++) {
            int k = 0;
            for (int j = 0; j < S; j++) if (per[(size_t)j * N + p] > -1e29) tmp[k++] = per[(size_t)j * N + p];
            lat[p] = 1000.0 * comm_median_all(tmp, k, 1, tmp);
        }
        printf("straggler report (%d timed steps; \"late\": how much later than the median rank it entered its collectives, ms per collective, "
               "the median over the steps; \"others waited\": from posting a collective's receive to this rank's data arriving, ms per receive, "
               "the median over the steps, the mean over the other ranks):\n", timed);
        printf("  %5s  %-24s %10s %11s %10s %10s %15s\n", "rank", "node", "step ms", "compute ms", "waited ms", "late ms", "others waited");
        for (int p = 0; p < N; p++) {
            const double* rp = all + (size_t)p * rowlen;
            printf("  %5d  %-24s %10.1f %11.1f %10.1f %10.3f %15.3f\n", p, w->host[p], rp[0], rp[0] - rp[1], rp[1], lat[p], late[p]);
        }
        char names[512] = "";
        int* slow = (int*)malloc_or_die((size_t)N * sizeof(int), "straggler report");
        int ns = 0;
        double worst = 0.0, step_med = 0.0;
        for (int p = 0; p < N; p++) tmp[p] = all[(size_t)p * rowlen];
        step_med = comm_median_all(tmp, N, 1, tmp);
        double bar = COMM_STRAGGLER_SHARE * step_med > COMM_STRAGGLER_MS ? COMM_STRAGGLER_SHARE * step_med : COMM_STRAGGLER_MS;
        for (int p = 0; p < N && N > 1; p++) {
            if (!(lat[p] > bar)) continue;
            slow[ns++] = p;
            if (lat[p] > worst) worst = lat[p];
        }
        comm_format_ranks(names, sizeof(names), slow, ns);
        free(slow);
        if (names[0]) printf("straggler: rank%s %s: entered its collectives %.3f ms after the median rank, per collective (named over %.3f ms: "
                             "%.1f%% of the %.1f ms step, at least %.0f ms)\n", strchr(names, ',') ? "s" : "", names, worst, bar,
                             100.0 * COMM_STRAGGLER_SHARE, step_med, COMM_STRAGGLER_MS);
        else printf("straggler: none (no rank entered its collectives over %.3f ms after the median rank, per collective: %.1f%% of the %.1f ms "
                    "step, at least %.0f ms)\n", bar, 100.0 * COMM_STRAGGLER_SHARE, step_med, COMM_STRAGGLER_MS);
        free(lat); free(per);
        free(tmp); free(late); free(all);
    }
    free(row);
}

/* The node of every world rank as a dense index (out: world size
   entries; node 0 is rank 0's, the next new name is node 1, ...), from the
   node names every rank gathered at comm_init: the same on every rank. */
static inline int comm_node_indices(int* out) {
    const CommWatch* w = &comm_watch;
    int nodes = 0;
    for (int r = 0; r < w->world; r++) {
        out[r] = -1;
        for (int q = 0; q < r && out[r] < 0; q++) if (!strcmp(w->host[q], w->host[r])) out[r] = out[q];
        if (out[r] < 0) out[r] = nodes++;
    }
    return nodes;
}

#endif /* LLMC_COMM_WATCH_H */
