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
 report's inputs (the steps and the report: comm_straggler.h).
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
#include <stdarg.h>
#include <dlfcn.h>
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
/* A lost peer, as the transport reports it. Open MPI 4.1's TCP transport
   (btl tcp, between nodes) finds a peer's connection closed when the peer
   process died (SIGKILL, a crash, its node's processes killed: the kernel
   closes its sockets) and says so through its help system, once per peer:
   opal_show_help("help-mpi-btl-tcp.txt", "peer hung up", ...), "An MPI
   communication peer process has unexpectedly disconnected"; the requests
   to and from that peer then never complete (Open MPI 4.1 has no ULFM: an
   error handler such as MPI_ERRORS_RETURN is never called for them). In
   Open MPI opal_show_help is a public function pointer (opal/util/
   show_help.h, installed with the development headers; ORTE points it at
   its own), so comm_lost_peer_install, after MPI_Init, points it at
   comm_show_help_hook, which notes the report (comm_lost_peer_t, seconds
   of wall_seconds) and prints the message as before (opal_show_vhelp: on
   this rank's stderr). A wait of a collective that is still incomplete
   when a peer is reported lost ends at once, as at its timeout, with a
   line that says so (comm_watch_expired), instead of after the whole
   --collective-timeout. A cut link closes nothing: the timeout stays the
   bound for it. LLMC_NO_LOST_PEER=1 keeps the hook but ignores the report
   (the wait then lasts the timeout); another MPI (no opal_show_help
   symbol) is left alone.
   The hook also serializes Open MPI's help messages: opal_show_help parses
   its help files with a flex lexer that holds global state and no lock, so
   two threads in it at once (the "peer hung up" of the progress engine and
   the "MPI_ABORT was invoked" of a rank's error exit) crashed the rank in
   opal_show_help_yylex (SIGSEGV, seen in tests/suites/net_faults.sh). Each
   call runs under comm_help_mu, and the report is noted only after its
   message is printed, so the error exit it starts cannot overlap it. */
static volatile int comm_lost_peer = 0;      /* atomic: a peer was reported lost */
static double comm_lost_peer_t = 0.0;        /* when (wall_seconds) */
static volatile int comm_lost_peer_off = 0;  /* atomic: the rescue's own waits ignore it (rescue.h) */
typedef int (*comm_vhelp_fn)(const char*, const char*, int, va_list);
static comm_vhelp_fn comm_vhelp_orig = NULL;
static int comm_lost_peer_ignore = 0;        /* LLMC_NO_LOST_PEER=1: set once before the hook is in place */
static pthread_mutex_t comm_help_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int comm_help_depth = 0;     /* a help message inside one (same thread) does not lock again */
static int comm_show_help_hook(const char* file, const char* topic, int want_error_header, ...) {
    va_list ap;
    va_start(ap, want_error_header);
    if (comm_help_depth++ == 0) pthread_mutex_lock(&comm_help_mu);
    int r = comm_vhelp_orig ? comm_vhelp_orig(file, topic, want_error_header, ap) : 0;
    if (--comm_help_depth == 0) pthread_mutex_unlock(&comm_help_mu);
    va_end(ap);
    if (!comm_lost_peer_ignore && file && topic && !strcmp(file, "help-mpi-btl-tcp.txt") && !strcmp(topic, "peer hung up") &&
        !__atomic_load_n(&comm_lost_peer, __ATOMIC_ACQUIRE)) {
        comm_lost_peer_t = wall_seconds();
        __atomic_store_n(&comm_lost_peer, 1, __ATOMIC_RELEASE);
    }
    return r;
}
/* After MPI_Init, on every rank: see above. Returns 1 when the hook is in place
   (Open MPI); with LLMC_NO_LOST_PEER=1 it serializes the help messages only. */
static inline int comm_lost_peer_install(void) {
    const char* off = getenv("LLMC_NO_LOST_PEER");
    comm_lost_peer_ignore = off && !strcmp(off, "1");
    void* h = dlsym(RTLD_DEFAULT, "opal_show_help");
    void* vh = dlsym(RTLD_DEFAULT, "opal_show_vhelp");
    if (!h || !vh || !*(void**)vh) return 0;
    comm_vhelp_orig = *(comm_vhelp_fn*)vh;
    *(int (**)(const char*, const char*, int, ...))h = comm_show_help_hook;
    return 1;
}
/* 1 when a wait that is still incomplete should end now: a peer was reported lost */
static inline int comm_peer_lost(void) {
    return __atomic_load_n(&comm_lost_peer, __ATOMIC_ACQUIRE) && !__atomic_load_n(&comm_lost_peer_off, __ATOMIC_ACQUIRE);
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
/* appends "; where every rank stopped: python3 dev/flight.py OUT" to
   hint (n bytes) where flight records are on: the error lines' pointer to
   dev/flight.py */
static inline void comm_flight_hint(char* hint, size_t n) {
    if (flight.K && flight.dir[0])
        snprintf(hint + strlen(hint), n - strlen(hint), "; where every rank stopped: python3 dev/flight.py %s",
                 comm_watch.out_dir ? comm_watch.out_dir : "OUT");
}

/* The end of a rank whose collective failed (comm_watch_expired) or whose
   MPI call failed (comm_mpi_error): line (kl characters so far, cap bytes)
   gets the withdrawn promise of a pending signal's stop, is printed, the
   flight record written (reason), rank 0 removes what a cut write left
   half-written, the rescue hook runs (waited: seconds, for its bound), and
   the rank ends with exit 1 (MPI_Abort unless a signal is pending).
   Never returns. */
static int comm_failing = 0;              /* a thread is in comm_fail_end */
static __thread int comm_failing_here = 0; /* ... this one */
static void comm_fail_end(char* line, size_t cap, int kl, int lost, double waited, const char* reason) {
    CommWatch* w = &comm_watch;
    __atomic_store_n(&comm_failing, 1, __ATOMIC_SEQ_CST);
    comm_failing_here = 1;
    /* a stop a signal promised (interrupt.h: "stopping at the end of step
       N (checkpoint N, then exit 143)") cannot be kept now: said here, on
       the rank that promised it (rank 0) and on every other that fails */
    int sig = intr_pending(), ph = __atomic_load_n(&intr_state.phase, __ATOMIC_ACQUIRE);
    int ck = __atomic_load_n(&intr_state.ckpt, __ATOMIC_RELAXED);
    if (sig && kl > 0 && (size_t)kl < cap && (ph == INTR_STEP || ph == INTR_FORWARD || ph == INTR_WRITE)) {
        char what_ck[80] = "";
        if (ph == INTR_WRITE) snprintf(what_ck, sizeof(what_ck), "the checkpoint being written will not be complete and ");
        else if (ck >= 0) snprintf(what_ck, sizeof(what_ck), "checkpoint %d will not be written and ", ck);
        snprintf(line + kl, cap - (size_t)kl, "; %s's stop cannot be kept: a collective failed, so %sthe exit is 1, not %d%s",
                 intr_signame(sig), what_ck, 128 + sig,
                 comm_rescue_hook ? " (unless the rescue below writes the last completed step)" : "; resume with -y 1 from the latest complete checkpoint");
    }
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    /* nothing half-written (docs/faults.md, exit 1): a checkpoint or state
       write this timeout cuts is never published, so rank 0, the one rank
       that renames it, removes its .tmp and a model whose state is not
       complete, as a second signal does (interrupt.h). The other ranks leave
       them: rank 0 may have passed the write's completion check and renamed
       it while their own wait for its answer ran out. (A make test beside a
       busy loop on every core cut the link during checkpoint 15's write and
       left model_00000015.bin.tmp.) */
    if (w->rank == 0) intr_unlink_watched();
    /* the launcher's SIGTERM finds the other thread still waiting later: its
       notice (comm_notice_signal) must not replace this record, which names
       the cause, by one that says only "SIGTERM" */
    __atomic_store_n(&w->signal_reported, 1, __ATOMIC_SEQ_CST);
    flight_dump(reason, line, comm_my_node(), w->step);
    __atomic_store_n(&comm_lost_peer_off, 1, __ATOMIC_RELEASE);   /* the rescue's waits are among the survivors */
    if (comm_rescue_hook) comm_rescue_hook(waited);
    comm_wait_keepalive(waited);
    if (!intr_pending()) comm_abort();
    _exit(1);
}

/* MPI's own errors. Open MPI's default handler (MPI_ERRORS_ARE_FATAL)
   ends a rank whose MPI call fails with a message of its own and the error
   code as the exit status: exit 17 (MPI_ERR_INTERN) was seen from rank 0
   when rank 1 was SIGKILLed during a SIGTERM stop under load (a call on a
   connection the TCP transport had found closed, before the lost-peer
   report ended the wait), with no line of the trainer's and the signal's
   promise not withdrawn (tests/suites/net_faults.sh, 12-07). This handler,
   set on MPI_COMM_WORLD right after MPI_Init (every communicator split or
   duplicated from it inherits it), ends the rank as a failed collective
   does (comm_fail_end): one line naming the error (MPI_Error_string), the
   step, the collective when known and a lost peer when reported, the
   withdrawn promise, the flight record, exit 1. An MPI error while another
   thread is already ending the rank waits for that thread's exit; one in
   the thread that is ending it (its rescue's calls) exits 1 at once.
   Never returns. */
static void comm_mpi_error(MPI_Comm* mc, int* code, ...) {
    (void)mc;
    CommWatch* w = &comm_watch;
    char es[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(*code, es, &len);
    char step[32] = "", cause[256] = "", line[3072];
    if (w->step > 0) snprintf(step, sizeof(step), " (step %d)", w->step);
    int lost = comm_peer_lost();
    if (lost)
        snprintf(cause, sizeof(cause), ", %.1f s after Open MPI reported a lost peer (\"peer hung up\": a peer process died)",
                 wall_seconds() - comm_lost_peer_t);
    char hint[600] = "";
    if (lost) snprintf(hint, sizeof(hint), "; if a node is gone, resume on the remaining nodes with -y 1 (docs/faults.md)");
    comm_flight_hint(hint, sizeof(hint));
    int kl = snprintf(line, sizeof(line), "error (rank %d, node %s): an MPI call%s%s%s failed%s: %s (MPI error %d)%s",
                      w->rank, comm_my_node(), comm_ctx_what ? " of the " : "", comm_ctx_what ? comm_ctx_what : "", step, cause, es, *code, hint);
    if (__atomic_load_n(&comm_failing, __ATOMIC_SEQ_CST)) {
        if (comm_failing_here) { fprintf(stderr, "%s\n", line); fflush(stderr); _exit(1); }
        for (;;) pause();   /* the thread in comm_fail_end ends the rank */
    }
    comm_fail_end(line, sizeof(line), kl, lost, 0.0, lost ? "lost peer" : "MPI error");
}

/* comm_mpi_error on MPI_COMM_WORLD (and so on every communicator made from
   it later). Call right after MPI_Init. */
static inline void comm_mpi_errors_install(void) {
    MPI_Errhandler eh;
    if (MPI_Comm_create_errhandler(comm_mpi_error, &eh) == MPI_SUCCESS) MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
}

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
    comm_flight_hint(hint, sizeof(hint));
    char line[3072], solo[400] = "";
    if (comm_solo_what && !flight_thread)
        snprintf(solo, sizeof(solo), " while rank 0 was %.300s (a bound of %.0f s for that work)", comm_solo_what, comm_wait_limit());
    char cause[256];
    int lost = comm_peer_lost();
    if (lost)
        snprintf(cause, sizeof(cause), "ended after %.1f s, %.1f s after Open MPI reported a lost peer (\"peer hung up\": a peer process died; LLMC_NO_LOST_PEER=1 waits the timeout instead)",
                 waited, wall_seconds() - comm_lost_peer_t);
    else snprintf(cause, sizeof(cause), "did not complete in %.0f s", waited);
    int kl = snprintf(line, sizeof(line), "error (rank %d, node %s): %s%s%s %s%s: %s%s%s (--collective-timeout %.0f; 0 waits forever)%s",
             w->rank, comm_my_node(), what, unit, step, cause, solo,
             list[0] ? (recv ? (nmiss > 1 ? "no data from ranks " : "no data from rank ") : (nmiss > 1 ? "ranks " : "rank ")) : "a rank of the communicator did not take part",
             list, list[0] && !recv ? " did not take this rank's data" : "", w->timeout_s, hint);
    comm_fail_end(line, sizeof(line), kl, lost, waited, lost ? "lost peer" : "collective timeout");
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
        if ((comm_wait_limit() > 0 && now - t0 > comm_wait_limit()) || comm_peer_lost()) {
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
        if ((comm_wait_limit() > 0 && now - t0 > comm_wait_limit()) || comm_peer_lost()) comm_watch_expired(MPI_COMM_NULL, 0, "", 0, what, now - t0);
        if (poll || spins > 1000) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
    }
}
/* The same over MPI_COMM_WORLD (most callers'). */
static inline void comm_wait_request(MPI_Request* req, int poll, const char* what) {
    comm_wait_request_on(MPI_COMM_WORLD, comm_watch.world, req, poll, what);
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
