/*
 interrupt.h: SIGINT (and SIGUSR2, the same), SIGTERM and SIGUSR1 end a run where its work is
 kept: a training run at a step boundary with the checkpoint of the last
 completed step, anything else (start-up, an evaluation, a sample, the
 calibrations, --estimate) within about a second with nothing written.

 What sends them: Ctrl-C (SIGINT, to the terminal's foreground process
 group: a process run without mpirun; mpirun puts its ranks in a process
 group of their own and passes it on as SIGTERM, below); `kill`; Slurm's
 time limit, preemption and `scancel` (SIGTERM to every task, then SIGKILL
 after KillWait, slurm.conf(5); srun forwards the SIGTERM it gets too, so
 a task may get two); `sbatch --signal=B:USR1@120` (SIGUSR1 to the batch
 shell only: scripts/run_slurm.sbatch forwards it to the step). mpirun
 (Open MPI 4.1) forwards SIGUSR1 and SIGUSR2 to every rank at once
 (ess_base_forward_signals); on SIGINT or SIGTERM it sends the ranks
 SIGCONT, then SIGTERM odls_base_sigkill_timeout seconds later, then
 SIGKILL as long again (measured: docs/faults.md), so that parameter is
 the time a rank has to finish its step and write.

 What a signal does (docs/faults.md has the table):
   - the first one is recorded (intr_state.sig) and rank 0 prints at once
     one line saying what will happen, from the phase the main thread
     declared (intr_phase):
       INTR_EXIT (start-up: flags, -y 1's load, -z auto's probes and
         enumeration, the matmul measurement; --calibrate-*, --estimate):
         exit now with 128 + the signal (nothing of a run is written yet;
         a file being written, as the matmul calibration file, is a
         watched .tmp and removed first); the line says "no step has run"
         for a training run's start-up and what was stopped for a run that
         trains nothing (intr_phase_no_training);
       INTR_STEP (a training step): the ranks agree at the end of the step
         (comm_agree_interrupt, comm_host.h), write the checkpoint and
         state of that step and exit 128 + the signal;
       INTR_FORWARD (an evaluation, a sample): the ranks agree before each
         forward and stop at the next one; a training run then writes the
         checkpoint of the last completed step (if not yet written);
       INTR_WRITE (a checkpoint or state being written): the write ends,
         then the run stops as after a step;
       INTR_FINISH (after the last checkpoint: the tables): the run ends
         as it would have, exit 0; every rank that gets it says so
         ("rank 1: SIGTERM after the last step: ..."), so that a late
         signal is told from an ignored one;
     a collective that fails after the line (a lost peer, the timeout:
     comm_watch.h) withdraws its promise in the rank's error line
     ("SIGTERM's stop cannot be kept: ... checkpoint N will not be
     written and the exit is 1, not 143");
   - a repeat of SIGTERM or SIGUSR1, however late, is the same stop (a
     launcher and the batch system both deliver it; Slurm's
     --signal=B:USR1 comes before the time limit's SIGTERM): one line on
     rank 0, nothing else;
   - SIGINT after a first signal is a person pressing Ctrl-C again: exit
     now with 130 (rank 0 first, with its line; the others 0.5 s later,
     so that the launcher, which ends the job at the first exit, does not
     drop that line). The rank first unlinks the .tmp being written
     (intr_watch_tmp) and a model file whose state is not yet complete
     (intr_state.pair), so -o holds complete model+state pairs only: rank
     0 releases them when it renames the state (a rename into place and
     the release of its watches are one against an exit now:
     intr_critical_begin), the others when the write's completion check
     is done (a rank stopped by the scheduler between rank 0's rename and
     that moment, then exiting now, would remove the model of a complete
     pair: a state without its model, which a resume skips). Per-rank
     files (a trace, a flight record) are unlinked by their own rank.
     SIGKILL cannot be caught: a rank killed while writing leaves
     <path>.tmp, which a resume never reads and the next write of that
     step replaces, or a model without its state (a resume takes the
     latest complete pair).
   A signal to one rank only: where the ranks agree (below) all stop
   together; in start-up (INTR_EXIT) that rank exits alone and the
   launcher ends the others (mpirun: SIGTERM after its kill delay, so
   143; srun --kill-on-bad-exit). mpirun never passes on a Ctrl-C at once
   (docs/faults.md): the ranks hear of it as SIGTERM after the kill delay.
   So `make train` and scripts/run_*.sh start mpirun through
   scripts/mpirun_fg.sh, which runs it in a session of its own (the
   terminal's Ctrl-C reaches only the wrapper) and passes each Ctrl-C on
   as SIGUSR2, which mpirun forwards to every rank at once; a rank takes
   SIGUSR2 as SIGINT in everything (the line names SIGINT, exit 130, a
   second one exits now).

 Exit codes: 128 + the signal's number (the code a shell gives a process
 that signal ended: 130 SIGINT, 143 SIGTERM, 138 SIGUSR1); where the ranks
 agree (INTR_STEP, INTR_FORWARD, INTR_WRITE) it is the largest signal
 number any rank got, on every rank.

 Ordering: sig, first_ns, phase, step, crit and exiting are shared between the signal
 thread (or a handler on a thread that existed before intr_install) and
 the main, OpenMP and communication threads; they are accessed with the
 C11 memory model's atomics (GCC's __atomic builtins, which the CUDA
 build's C++ compiler takes too): first_ns is stored before sig is
 published with release, and read after an acquire load of sig saw it.
 Every function the handler calls is async-signal-safe (signal-safety(7):
 clock_gettime, write, unlink, _exit; lock-free atomics).
*/
#ifndef LLMC_INTERRUPT_H
#define LLMC_INTERRUPT_H

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define INTR_SLOTS 6           /* files that can be in progress at once (checkpoint/state, the pair's model, trace, flight record) */

enum { INTR_EXIT = 0, INTR_STEP = 1, INTR_FORWARD = 2, INTR_WRITE = 3, INTR_FINISH = 4 };

typedef struct {
    int sig;                            /* atomic: the first signal (0: none) */
    long long first_ns;                 /* atomic: CLOCK_MONOTONIC of the first, ns (stored before sig) */
    int repeats;                        /* atomic: signals after the first (the same stop) */
    int installed;
    int rank;                           /* who prints: rank 0 */
    int phase;                          /* atomic: INTR_* */
    int step;                           /* atomic: INTR_STEP: the step running (1-based); else the steps completed */
    int ckpt;                           /* atomic: the step whose checkpoint a stop now writes, -1: none (no -o, or nothing new) */
    const char* what;                   /* atomic: the phase in words (a string literal) */
    const char* note;                   /* atomic: INTR_EXIT of a run that trains nothing (a calibration, --estimate): the exit line's
                                           words in parentheses (a string literal); NULL: a training run's start-up */
    int crit;                           /* atomic: 1 while the main thread renames a file into place (intr_critical_begin) */
    int exiting;                        /* atomic: 1 once an exit now has begun */
    int pair;                           /* 1 + the slot of the model file whose state is being written (0: none; rank 0) */
    int tmp_on[INTR_SLOTS];             /* atomic: 0 free, 2 being claimed, 1 path complete */
    char tmp[INTR_SLOTS][4096];
} IntrState;
static IntrState intr_state;

static inline long long intr_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);   /* async-signal-safe (signal-safety(7)) */
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline const char* intr_signame(int s) {
    return s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : s == SIGUSR1 ? "SIGUSR1" : "a signal";
}

/* The first signal's number, or 0. Acquire: a non-zero value makes
   intr_first_s() valid. The wait loops poll it. */
static inline int intr_pending(void) { return __atomic_load_n(&intr_state.sig, __ATOMIC_ACQUIRE); }

/* CLOCK_MONOTONIC seconds of the first signal (valid once intr_pending() != 0). */
static inline double intr_first_s(void) { return 1e-9 * (double)__atomic_load_n(&intr_state.first_ns, __ATOMIC_RELAXED); }

/* Seconds since the first signal (0 when none came). */
static inline double intr_since_s(void) {
    return intr_pending() ? 1e-9 * (double)(intr_now_ns() - __atomic_load_n(&intr_state.first_ns, __ATOMIC_RELAXED)) : 0.0;
}

/* Declare what the main thread does now, for what a signal does (above):
   phase INTR_*, what (a string literal: "start-up", "evaluation", ...),
   step (INTR_STEP: the step being run, 1-based; else the steps completed),
   ckpt (the step whose checkpoint a stop now would write; -1 none),
   note (intr_phase_no_training; NULL otherwise).
   Release: a signal that sees the phase sees its words. intr_phase: note NULL. */
static inline void intr_phase_note(int phase, const char* what, int step, int ckpt, const char* note) {
    __atomic_store_n(&intr_state.note, note, __ATOMIC_RELAXED);
    __atomic_store_n(&intr_state.what, what, __ATOMIC_RELAXED);
    __atomic_store_n(&intr_state.step, step, __ATOMIC_RELAXED);
    __atomic_store_n(&intr_state.ckpt, ckpt, __ATOMIC_RELAXED);
    __atomic_store_n(&intr_state.phase, phase, __ATOMIC_RELEASE);
}
static inline void intr_phase(int phase, const char* what, int step, int ckpt) { intr_phase_note(phase, what, step, ckpt, NULL); }

/* Declare a run that trains nothing (--calibrate-workspace,
   --calibrate-matmul, --estimate): phase INTR_EXIT, what (a string
   literal: the flag), note (a string literal: what the run was doing and
   what a stop leaves, said in parentheses on the exit line in place of a
   training run's "no step has run: no checkpoint to write"). */
static inline void intr_phase_no_training(const char* what, const char* note) { intr_phase_note(INTR_EXIT, what, 0, -1, note); }

/* Async-signal-safe line building: append s / a non-negative integer. */
static inline void intr_cat(char* b, size_t* k, size_t cap, const char* s) {
    while (s && *s && *k + 1 < cap) b[(*k)++] = *s++;
    b[*k] = 0;
}
static inline void intr_cat_int(char* b, size_t* k, size_t cap, long long v) {
    char d[24];
    int n = 0;
    if (v < 0) { intr_cat(b, k, cap, "-"); v = -v; }
    do { d[n++] = (char)('0' + v % 10); v /= 10; } while (v && n < 23);
    while (n && *k + 1 < cap) b[(*k)++] = d[--n];
    b[*k] = 0;
}

/* The rest of the line about the checkpoint a stop writes and the exit code. */
static inline void intr_cat_then(char* b, size_t* k, size_t cap, int ckpt, int s) {
    if (ckpt >= 0) { intr_cat(b, k, cap, "checkpoint "); intr_cat_int(b, k, cap, ckpt); intr_cat(b, k, cap, ", then exit "); }
    else intr_cat(b, k, cap, "nothing new to write; exit ");
    intr_cat_int(b, k, cap, 128 + s);
}

/* Remove every watched file (a .tmp being written; a pair's model whose
   state is not complete). */
static inline void intr_unlink_watched(void) {
    for (int i = 0; i < INTR_SLOTS; i++)   /* only a slot whose path is complete (1; 2: being claimed) */
        if (__atomic_load_n(&intr_state.tmp_on[i], __ATOMIC_ACQUIRE) == 1) unlink(intr_state.tmp[i]);
}

static void intr_handler(int s) {
    if (s == SIGUSR2) s = SIGINT;   /* a Ctrl-C passed on by scripts/mpirun_fg.sh (mpirun forwards SIGUSR2 at once): SIGINT in all */
    char line[512];
    size_t k = 0;
    int first = 0;
    if (__atomic_load_n(&intr_state.sig, __ATOMIC_ACQUIRE) == 0) {
        /* claim the first: sigwait and a handler on an older thread may both run */
        static int claimed = 0;
        if (!__atomic_exchange_n(&claimed, 1, __ATOMIC_ACQ_REL)) {
            __atomic_store_n(&intr_state.first_ns, intr_now_ns(), __ATOMIC_RELAXED);
            __atomic_store_n(&intr_state.sig, s, __ATOMIC_RELEASE);
            first = 1;
        }
    }
    int phase = __atomic_load_n(&intr_state.phase, __ATOMIC_ACQUIRE);
    const char* what = __atomic_load_n(&intr_state.what, __ATOMIC_RELAXED);
    int step = __atomic_load_n(&intr_state.step, __ATOMIC_RELAXED), ckpt = __atomic_load_n(&intr_state.ckpt, __ATOMIC_RELAXED);
    int now = first ? phase == INTR_EXIT : s == SIGINT;   /* start-up work; Ctrl-C twice */
    if (!first && !now) {   /* SIGTERM, SIGUSR1 again: the same stop */
        if (__atomic_fetch_add(&intr_state.repeats, 1, __ATOMIC_RELAXED) == 0 && intr_state.rank == 0) {
            intr_cat(line, &k, sizeof(line), intr_signame(s));
            intr_cat(line, &k, sizeof(line), " again: the same stop as the first ");
            intr_cat(line, &k, sizeof(line), intr_signame(__atomic_load_n(&intr_state.sig, __ATOMIC_ACQUIRE)));
            intr_cat(line, &k, sizeof(line), " (only a second Ctrl-C, SIGINT, exits at once)\n");
            ssize_t w = write(2, line, k);
            (void)w;
        }
        return;
    }
    if (now) {
        /* a rename into place under way (intr_critical_begin) ends first, so
           that the files it completes (a state, and with it its model's pair)
           are not taken for partial ones; the main thread then waits (Dekker:
           both flags sequentially consistent). At most 2 s: on the main
           thread itself (no signal thread) it would never end. */
        __atomic_store_n(&intr_state.exiting, 1, __ATOMIC_SEQ_CST);
        for (int i = 0; i < 200 && __atomic_load_n(&intr_state.crit, __ATOMIC_SEQ_CST); i++) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);   /* async-signal-safe */
        }
        intr_unlink_watched();
        if (intr_state.rank == 0) {
            intr_cat(line, &k, sizeof(line), intr_signame(s));
            if (first) {
                intr_cat(line, &k, sizeof(line), " during ");
                intr_cat(line, &k, sizeof(line), what ? what : "start-up");
                intr_cat(line, &k, sizeof(line), ": exiting now with ");
                intr_cat_int(line, &k, sizeof(line), 128 + s);
                const char* note = __atomic_load_n(&intr_state.note, __ATOMIC_RELAXED);   /* published with the phase */
                intr_cat(line, &k, sizeof(line), " (");
                intr_cat(line, &k, sizeof(line), note ? note : "no step has run: no checkpoint to write");
                intr_cat(line, &k, sizeof(line), ")\n");
            } else {
                intr_cat(line, &k, sizeof(line), " again: exiting now with ");
                intr_cat_int(line, &k, sizeof(line), 128 + s);
                intr_cat(line, &k, sizeof(line), ", without a checkpoint (a file being written was removed; resume with -y 1 from the last complete one)\n");
            }
            ssize_t w = write(2, line, k);
            (void)w;
        } else {
            /* rank 0 exits first: the launcher ends the job at the first
               exit it sees (mpirun: "Primary job terminated normally, but 1
               process returned a non-zero exit code") and drops what a rank
               still alive had printed; rank 0's line was lost that way when
               the others' exit came first (measured: rank 0 0.3 s late
               loses it every time). The files are already removed. */
            struct timespec ts = {0, 500000000};
            nanosleep(&ts, NULL);   /* async-signal-safe */
        }
        _exit(128 + s);
    }
    /* rank 0 says what will happen; after the last step (nothing to agree:
       each rank finishes alone) every rank says that its signal came too
       late to stop anything, so that a stop that did not happen is never
       taken for one that was ignored (tests/suites/kill.sh) */
    if (intr_state.rank != 0 && phase != INTR_FINISH) return;
    if (intr_state.rank != 0) {
        intr_cat(line, &k, sizeof(line), "rank ");
        intr_cat_int(line, &k, sizeof(line), intr_state.rank);
        intr_cat(line, &k, sizeof(line), ": ");
    }
    intr_cat(line, &k, sizeof(line), intr_signame(s));
    if (phase == INTR_STEP) {
        intr_cat(line, &k, sizeof(line), ": stopping at the end of step ");
        intr_cat_int(line, &k, sizeof(line), step);
        intr_cat(line, &k, sizeof(line), " (");
        intr_cat_then(line, &k, sizeof(line), ckpt, s);
    } else if (phase == INTR_FORWARD) {
        intr_cat(line, &k, sizeof(line), " during ");
        intr_cat(line, &k, sizeof(line), what);
        intr_cat(line, &k, sizeof(line), ": stopping after this forward (");
        intr_cat_then(line, &k, sizeof(line), ckpt, s);
    } else if (phase == INTR_WRITE) {
        intr_cat(line, &k, sizeof(line), " during ");
        intr_cat(line, &k, sizeof(line), what);
        intr_cat(line, &k, sizeof(line), " of step ");
        intr_cat_int(line, &k, sizeof(line), step);
        intr_cat(line, &k, sizeof(line), ": stopping when it is complete (then exit ");
        intr_cat_int(line, &k, sizeof(line), 128 + s);
    } else {
        intr_cat(line, &k, sizeof(line), " after the last step: ");
        intr_cat(line, &k, sizeof(line), what);
        intr_cat(line, &k, sizeof(line), " (the run is complete: exit 0");
    }
    intr_cat(line, &k, sizeof(line), ")\n");
    ssize_t w = write(2, line, k);
    (void)w;
}

/* The thread that takes the four signals (intr_install): sigwait, then
   what the handler does, outside any signal frame. */
static sigset_t intr_set;
static void* intr_thread(void* arg) {
    (void)arg;
    for (;;) {
        int s = 0;
        if (sigwait(&intr_set, &s) == 0) intr_handler(s);
    }
    return NULL;
}

/* SIGPIPE. Open MPI's TCP transport writes to its sockets without
   MSG_NOSIGNAL, so a send to a peer process that died raised SIGPIPE in the
   rank, whose default action ended it with 141 before its lost-peer line
   (comm_watch.h) could say what happened: tests/suites/net_faults.sh's
   "SIGTERM, then rank 1 lost" under a busy loop per core, 1 run in 5. The
   handler keeps the default for a closed stdout or stderr (a reader such as
   `| head` or mpirun that ended: the write end of a pipe without readers
   polls POLLERR) and otherwise returns: the send then fails with EPIPE
   inside the library, which reports the lost peer as for a closed socket.
   Only async-signal-safe calls (poll, signal, raise). */
static void intr_sigpipe(int s) {
    (void)s;
    struct pollfd p[2] = {{1, 0, 0}, {2, 0, 0}};
    if (poll(p, 2, 0) > 0 && ((p[0].revents | p[1].revents) & (POLLERR | POLLHUP))) {
        signal(SIGPIPE, SIG_DFL);
        raise(SIGPIPE);
    }
}

/* Install the handler for SIGINT, SIGTERM, SIGUSR1 and SIGUSR2 (SIGUSR2 is
   SIGINT: a Ctrl-C that scripts/mpirun_fg.sh passes through mpirun; after MPI_Init: the
   library's own handlers are for faults, not these), in phase INTR_EXIT
   ("start-up"). SA_RESTART: a read or write the signal interrupts is
   restarted, not failed. Then block the four in this thread, so in every
   thread it starts later (OpenMP's, the communication thread), and take
   them on a thread of their own with sigwait: a handler run on a compute
   thread interrupted oneDNN's JIT kernels, and 4 of 12 SIGTERMed runs on
   an AVX-512 Xeon then died of heap corruption inside dnnl_sgemm
   (tests/suites/interrupt.sh). Threads that existed before (MPI's) keep
   the handler. */
static inline void intr_install(int rank) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = intr_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    intr_state.rank = rank;
    intr_phase(INTR_EXIT, "start-up", 0, -1);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    struct sigaction sp;   /* SIGPIPE: see intr_sigpipe (every thread, not blocked) */
    memset(&sp, 0, sizeof(sp));
    sp.sa_handler = intr_sigpipe;
    sp.sa_flags = SA_RESTART;
    sigemptyset(&sp.sa_mask);
    sigaction(SIGPIPE, &sp, NULL);
    sigemptyset(&intr_set);
    sigaddset(&intr_set, SIGINT);
    sigaddset(&intr_set, SIGTERM);
    sigaddset(&intr_set, SIGUSR1);
    sigaddset(&intr_set, SIGUSR2);
    pthread_t t;
    if (pthread_sigmask(SIG_BLOCK, &intr_set, NULL) == 0 && pthread_create(&t, NULL, intr_thread, NULL) == 0) pthread_detach(t);
    else pthread_sigmask(SIG_UNBLOCK, &intr_set, NULL);   /* no thread: the handler takes them wherever they land */
    intr_state.installed = 1;
}

/* A file about to be created as path (a .tmp renamed when complete; a
   pair's model until its state is complete): a SIGINT after a first
   signal, or a first in phase INTR_EXIT, unlinks it before the exit.
   Returns the slot for intr_unwatch (-1 when every slot is taken: then it
   is not watched). */
static inline int intr_watch_tmp(const char* path) {
    size_t n = strlen(path);
    if (n >= sizeof(intr_state.tmp[0])) return -1;
    for (int i = 0; i < INTR_SLOTS; i++) {
        /* claim the slot (0 -> 2) atomically: the main and the communication
           thread both write files; the handler, on any thread, reads only a
           slot published as 1 after its path is complete */
        int free_slot = 0;
        if (!__atomic_compare_exchange_n(&intr_state.tmp_on[i], &free_slot, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) continue;
        memcpy(intr_state.tmp[i], path, n + 1);
        __atomic_store_n(&intr_state.tmp_on[i], 1, __ATOMIC_RELEASE);
        return i;
    }
    return -1;
}
static inline void intr_unwatch(int slot) {
    if (slot >= 0 && slot < INTR_SLOTS) __atomic_store_n(&intr_state.tmp_on[slot], 0, __ATOMIC_RELEASE);
}

/* At exit (exit(), an error's exit(1) on every rank: a failed state write,
   a full disk): a pair's model whose state is not complete (intr_state.pair)
   is removed by rank 0, so that -o keeps whole model+state pairs only (a
   signal's exit removes it in the handler). A SIGKILL or _exit between the
   model's rename and the state's leaves the model alone: no resume reads it
   (state_find_latest), --keep-checkpoints does not count it (state_prune),
   and a later write of that step replaces it. Registered once, by
   intr_watch_pair. */
static void intr_drop_pair_at_exit(void) {
    int pair = intr_state.pair;
    if (pair > 0 && intr_state.rank == 0 && __atomic_load_n(&intr_state.tmp_on[pair - 1], __ATOMIC_ACQUIRE) == 1) unlink(intr_state.tmp[pair - 1]);
}
/* The model file `path` of a pair whose state is about to be written:
   watched (intr_watch_tmp) until the state is in place (cfile_commit
   releases it), removed by an exit before that (the signal handler, or
   intr_drop_pair_at_exit). Sets intr_state.pair. */
static inline void intr_watch_pair(const char* path) {
    static int registered = 0;
    if (!registered) { registered = 1; atexit(intr_drop_pair_at_exit); }
    intr_state.pair = 1 + intr_watch_tmp(path);
}

/* Around a rename that puts a complete file into place (and the release of
   its watch): an exit now (above) waits for the end of it, or, when it
   began first, this waits for the exit. */
static inline void intr_critical_begin(void) {
    __atomic_store_n(&intr_state.crit, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&intr_state.exiting, __ATOMIC_SEQ_CST)) {
        __atomic_store_n(&intr_state.crit, 0, __ATOMIC_SEQ_CST);   /* let the exit go on */
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
}
static inline void intr_critical_end(void) { __atomic_store_n(&intr_state.crit, 0, __ATOMIC_SEQ_CST); }

/* Test hook (LLMC_TEST_SLOW=WHAT:S[,WHAT:S...]; tests/suites/kill.sh,
   dev/kill_fuzz.sh): the phase named WHAT ("start-up", "evaluation",
   "sample", "checkpoint", "state", "load", "step") announces itself on stderr
   ("test hook LLMC_TEST_SLOW: rank R in WHAT") and sleeps S seconds in
   0.05 s naps, so that a test can land a signal in it; in an evaluation
   or a sample (phase INTR_FORWARD) the sleep ends at a signal, as a long
   forward would. Not for use outside tests. */
static inline void intr_test_slow(const char* what, int rank) {
    const char* e = getenv("LLMC_TEST_SLOW");
    if (!e || !*e) return;
    size_t n = strlen(what);
    for (const char* p = e; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        if (strncmp(p, what, n) != 0 || p[n] != ':') continue;
        double sec = atof(p + n + 1);
        fprintf(stderr, "test hook LLMC_TEST_SLOW: rank %d in %s\n", rank, what);
        fflush(stderr);
        for (double t = 0; t < sec && !(intr_pending() && __atomic_load_n(&intr_state.phase, __ATOMIC_ACQUIRE) == INTR_FORWARD); t += 0.05) {
            struct timespec ts = {0, 50000000};
            nanosleep(&ts, NULL);
        }
        return;
    }
}

#endif /* LLMC_INTERRUPT_H */
