/*
 interrupt.h: SIGINT, SIGTERM and SIGUSR1 end a training run at a step
 boundary with a checkpoint, instead of at once with nothing written.

 What sends them: Ctrl-C (SIGINT, to the terminal's foreground process:
 mpirun, which passes it on as SIGTERM, below); `kill`; Slurm's time
 limit, preemption and `scancel` (SIGTERM to every task, then SIGKILL
 after KillWait, slurm.conf(5)); `sbatch --signal=B:USR1@120` (SIGUSR1 to
 the batch shell only: scripts/run_slurm.sbatch forwards it to the step).
 mpirun (Open MPI 4.1) forwards SIGUSR1 and SIGUSR2 to every rank at once
 (ess_base_forward_signals); on SIGINT or SIGTERM it sends the ranks
 SIGCONT, then SIGTERM odls_base_sigkill_timeout seconds later, then
 SIGKILL as long again (measured: docs/faults.md), so that parameter is
 the time a rank has to finish its step and write (the launch scripts and
 make's MPIRUN set it).

 The handler (async-signal-safe: it only sets flags, unlink(2)s and
 write(2)s, as signal-safety(7) allows):
   - the first signal sets intr_state.sig; nothing else happens in the
     handler. At every step boundary the ranks agree on it
     (comm_agree_interrupt in comm_host.h: one int exchanged with every
     peer, not counted in the traffic table, like comm_check_all's), and if
     any rank was signalled every rank writes the checkpoint and state of
     the step just completed and
     exits with 128 + the signal's number (the code a shell gives a process
     the signal ended: 130 SIGINT, 143 SIGTERM, 138 SIGUSR1), after rank 0
     printed "interrupted at step K: wrote checkpoint K; resume with -y 1".
     The wait loops of comm.h poll the flag, so that a rank stuck in a
     collective when it comes writes its flight record (flight.h);
   - a second signal, more than INTR_SAME_S after the first (a launcher
     and the batch system may both deliver one stop: srun forwards the
     SIGTERM that slurmstepd also sends), exits at once with 128 + its
     number; a checkpoint or state <path>.tmp being written (intr_watch_tmp)
     is unlinked first, so no partial file remains. SIGKILL cannot be
     caught: a rank killed while writing leaves <path>.tmp, which a resume
     never reads and the next write of that step replaces.
*/
#ifndef LLMC_INTERRUPT_H
#define LLMC_INTERRUPT_H

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define INTR_SLOTS 4           /* files that can be in progress at once (checkpoint/state, trace, flight record) */
#define INTR_SAME_S 0.5        /* a second signal this soon after the first is the same stop delivered twice */

typedef struct {
    volatile sig_atomic_t sig;          /* the first signal (0: none) */
    volatile sig_atomic_t installed;
    volatile sig_atomic_t rank;         /* who prints the second signal's line: rank 0 */
    double first_s;                     /* CLOCK_MONOTONIC of the first (written in the handler, read after sig) */
    volatile sig_atomic_t tmp_on[INTR_SLOTS];
    char tmp[INTR_SLOTS][4096];
} IntrState;
static IntrState intr_state;

static inline double intr_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);   /* async-signal-safe (signal-safety(7)) */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline const char* intr_signame(int s) {
    return s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : s == SIGUSR1 ? "SIGUSR1" : "a signal";
}

static void intr_handler(int s) {
    if (!intr_state.sig) { intr_state.first_s = intr_now(); intr_state.sig = s; return; }
    if (intr_now() - intr_state.first_s < INTR_SAME_S) return;
    for (int i = 0; i < INTR_SLOTS; i++)   /* only a slot whose path is complete (1; 2: being claimed) */
        if (__atomic_load_n(&intr_state.tmp_on[i], __ATOMIC_ACQUIRE) == 1) unlink(intr_state.tmp[i]);
    if (intr_state.rank == 0) {
        static const char msg[] = "interrupted again: exiting now without a checkpoint (a file being written was removed; "
                                  "resume with -y 1 from the last complete one)\n";
        ssize_t w = write(2, msg, sizeof(msg) - 1);
        (void)w;
    }
    _exit(128 + s);
}

/* The thread that takes the three signals (intr_install): sigwait, then
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

/* Install the handler for SIGINT, SIGTERM and SIGUSR1 (after MPI_Init: the
   library's own handlers are for faults, not these). SA_RESTART: a read or
   write the signal interrupts is restarted, not failed. Then block the
   three in this thread, so in every thread it starts later (OpenMP's, the
   communication thread), and take them on a thread of their own with
   sigwait: a handler run on a compute thread interrupted oneDNN's JIT
   kernels, and 4 of 12 SIGTERMed runs on an AVX-512 Xeon then died of heap
   corruption inside dnnl_sgemm (tests/suites/interrupt.sh). Threads that
   existed before (MPI's) keep the handler. */
static inline void intr_install(int rank) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = intr_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    intr_state.rank = rank;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigemptyset(&intr_set);
    sigaddset(&intr_set, SIGINT);
    sigaddset(&intr_set, SIGTERM);
    sigaddset(&intr_set, SIGUSR1);
    pthread_t t;
    if (pthread_sigmask(SIG_BLOCK, &intr_set, NULL) == 0 && pthread_create(&t, NULL, intr_thread, NULL) == 0) pthread_detach(t);
    else pthread_sigmask(SIG_UNBLOCK, &intr_set, NULL);   /* no thread: the handler takes them wherever they land */
    intr_state.installed = 1;
}

/* The first signal's number, or 0 (a plain read: the wait loops poll it). */
static inline int intr_pending(void) { return intr_state.sig; }

/* A file about to be created as path (a .tmp renamed when complete):
   a second signal unlinks it. Returns the slot for intr_unwatch (-1 when
   every slot is taken: then it is not watched). */
static inline int intr_watch_tmp(const char* path) {
    size_t n = strlen(path);
    if (n >= sizeof(intr_state.tmp[0])) return -1;
    for (int i = 0; i < INTR_SLOTS; i++) {
        /* claim the slot (0 -> 2) atomically: the main and the communication
           thread both write files; the handler, on any thread, reads only a
           slot published as 1 after its path is complete */
        sig_atomic_t free_slot = 0;
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

#endif /* LLMC_INTERRUPT_H */
