/*
 flight.h: the flight recorder. Every rank keeps its last K collectives
 (--flight-recorder K, default 64; 0: off) in a ring allocated once, so
 that after a hang one can tell where each rank stopped: most collective
 timeouts are a rank that is somewhere else, not a slow network (PyTorch's
 flight recorder, torch.distributed; NCCL itself keeps nothing of the
 kind, NVIDIA/nccl issue 1324).

 A record: the collective's kind ("all-gather", "the error check", ...),
 its unit, the optimizer step (1-based) and micro-step it was issued in,
 the bytes this rank sends (-1 when not known: MPI's own collectives), the
 communicator (its label and world ranks) and the record's call number on
 it (1, 2, ...: every rank calls a communicator's collectives in the same
 order, so equal numbers are the same collective), the thread (main or
 comm), the state (issued: queued for the communication thread; waiting;
 done), and the times it was issued, started and ended, plus which peers'
 data has arrived (the wait of comm.h knows: one message per peer).

 Cost: off (K = 0) every call returns at its first test. On: a mutex (no
 system call when not contended) and a few stores per record and per
 arriving peer; no allocation after flight_init, no system call. The two
 threads (main, comm) write their own records under that mutex; a ring
 slot reused while its owner still waits (more than K collectives issued
 since) is detected by its sequence number and left alone.

 Dumps (flight_dump): on a collective timeout (comm.h), on a signal that
 finds the rank waiting or at the step boundary it stops at
 (interrupt.h), and on comm_fatal's abort, each rank writes
 OUT/flight/rank_R.json (OUT = -o; none without -o) through rank_R.json.tmp
 and rename(2). A dump never blocks the rank's end: the ring and the
 registry are copied under flight_mu and the JSON is formatted and written
 outside it; the file is opened O_NONBLOCK (a fifo without a reader fails
 at once, ENXIO); and a watchdog thread ends the rank (one line on stderr,
 exit 1, or 128 + the signal when one is pending) when the dump has not
 finished FLIGHT_DUMP_BOUND_S seconds after it began (a hung file system:
 the abort that follows a dump must still come). JSON, one object:
   {"format": "llmc-flight 2", "run" (the run id: 16 hex digits, rank 0's,
    broadcast at flight_init, so every dump of one run carries the same),
    "run_start" (rank 0's Unix time at flight_init), "rank", "world",
    "node", "pid", "reason",
    "detail", "time" (Unix seconds), "step", "micro_step", "capacity",
    "nodes" (every world rank's node), "recorded" (records ever made),
    "communicators": [{"id", "label",
    "ranks": [world ranks], "calls"}], "records": [{"seq", "comm", "call",
    "kind", "unit", "step", "micro_step", "bytes", "thread", "state",
    "issued", "started", "ended" (Unix seconds or null), "arrived",
    "waiting_for" (world ranks; null over 64 ranks and for MPI's own
    collectives, whose peers are not known)}], oldest first}
 dev/flight.py OUT merges the newest run's dumps (the greatest run_start;
 files of other runs, e.g. of a 4-rank run later resumed on 2 ranks into
 the same -o, are named and ignored) and says where the ranks part ways.
*/
#ifndef LLMC_FLIGHT_H
#define LLMC_FLIGHT_H

#include <mpi.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "utils.h"
#include "interrupt.h"

enum { FLIGHT_ISSUED = 1, FLIGHT_WAITING, FLIGHT_DONE };
#define FLIGHT_COMMS 16

typedef struct {
    unsigned long long seq;        /* 1, 2, ... (0: an empty slot) */
    unsigned long long call;       /* its call number on its communicator */
    const char* kind;              /* a string that outlives the run (a literal or coll_name) */
    int unit, step, micro, thread, state, comm;   /* comm: index into the registry, -1 unknown */
    int n;                         /* ranks of the communicator */
    int known;                     /* 1: arrived says whose data came (one message per peer); 0: MPI's own collective */
    long long bytes;
    unsigned long long arrived;    /* bit q: rank q of the communicator (q < 64) sent its data */
    int narrived;
    double t_issue, t_start, t_end;  /* CLOCK_MONOTONIC seconds (wall_seconds) */
} FlightRec;

typedef struct {
    MPI_Comm mc;
    const char* label;
    int n, *world;                 /* its ranks' world ranks */
    unsigned long long calls;
} FlightComm;

typedef struct {
    int K;                         /* ring capacity; 0: off */
    FlightRec* ring;
    unsigned long long next;       /* records made */
    char dir[4096];                /* OUT/flight ("" without -o) */
    int rank, world;
    volatile int micro;            /* the micro-step in progress (the loop sets it) */
    FlightComm comms[FLIGHT_COMMS];
    int ncomms;
    int dumped;                    /* dumps written */
    double mono_to_unix;           /* add to a CLOCK_MONOTONIC time for Unix time */
    char (*nodes)[64];             /* every world rank's node name (comm.h's watch), or NULL */
    char run[17];                  /* the run id: rank 0's, broadcast (16 hex digits) */
    double run_start;              /* rank 0's Unix time at flight_init */
    FlightRec* snap;               /* K records: the ring's copy a dump formats outside flight_mu */
    double stall_s;                /* test hook LLMC_TEST_FLIGHT_STALL_S: a dump stalls this long after opening its file (a hung file system) */
} FlightRecorder;
static FlightRecorder flight;   /* zero: off until flight_init */
static pthread_mutex_t flight_mu = PTHREAD_MUTEX_INITIALIZER;        /* the ring and the registry */
static pthread_mutex_t flight_dump_mu = PTHREAD_MUTEX_INITIALIZER;   /* one dump at a time */
/* the record the calling thread's next exchange continues (the
   communication thread's operation, issued by the main thread) */
static __thread unsigned long long flight_pending = 0;
static __thread int flight_thread = 0;   /* 0 main, 1 communication thread */

/* Allocate the ring of K records (K = 0: the recorder is off) and note
   where dumps go: out_dir/flight (NULL: no dumps); the run id and start
   time are rank 0's, broadcast. Once, at start-up; collective over
   MPI_COMM_WORLD. */
static inline void flight_init(int K, const char* out_dir, int rank, int world) {
    flight.K = K > 0 ? K : 0;
    flight.rank = rank; flight.world = world;
    flight.dir[0] = 0;
    if (out_dir && out_dir[0]) snprintf(flight.dir, sizeof(flight.dir), "%s/flight", out_dir);
    if (flight.K) {
        flight.ring = (FlightRec*)calloc_or_die((size_t)flight.K, sizeof(FlightRec), "the flight recorder");
        flight.snap = (FlightRec*)calloc_or_die((size_t)flight.K, sizeof(FlightRec), "the flight recorder");
    }
    struct timespec m, u;
    clock_gettime(CLOCK_MONOTONIC, &m);
    clock_gettime(CLOCK_REALTIME, &u);
    flight.mono_to_unix = ((double)u.tv_sec + 1e-9 * u.tv_nsec) - ((double)m.tv_sec + 1e-9 * m.tv_nsec);
    /* the run id: rank 0's Unix time in ns, its pid and a word of its stack address mixed (splitmix64's finalizer) */
    unsigned long long v[2];
    unsigned long long z = (unsigned long long)u.tv_sec * 1000000000ULL + (unsigned long long)u.tv_nsec;
    z ^= ((unsigned long long)getpid() << 40) ^ (unsigned long long)(uintptr_t)&z;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    v[0] = z ^ (z >> 31);
    double start = (double)u.tv_sec + 1e-9 * u.tv_nsec;
    memcpy(&v[1], &start, sizeof(double));
    MPI_Bcast(v, 2, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    snprintf(flight.run, sizeof(flight.run), "%016llx", v[0]);
    memcpy(&flight.run_start, &v[1], sizeof(double));
    const char* st = getenv("LLMC_TEST_FLIGHT_STALL_S");
    flight.stall_s = st ? atof(st) : 0.0;
}

/* Name a communicator for the records (label: a literal) and note its
   members' world ranks. Local (MPI_Group_translate_ranks); call it where
   the communicator is made, on every rank alike; again after a
   communicator was freed and remade: its call count restarts. */
static inline void flight_register_comm(MPI_Comm mc, const char* label) {
    if (mc == MPI_COMM_NULL) return;
    int n = 0;
    MPI_Comm_size(mc, &n);
    int* in = (int*)malloc_or_die((size_t)n * sizeof(int), "flight recorder ranks");
    int* out = (int*)malloc_or_die((size_t)n * sizeof(int), "flight recorder ranks");
    MPI_Group g, w;
    MPI_Comm_group(mc, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    for (int q = 0; q < n; q++) in[q] = q;
    MPI_Group_translate_ranks(g, n, in, w, out);
    MPI_Group_free(&g);
    MPI_Group_free(&w);
    free(in);
    pthread_mutex_lock(&flight_mu);
    int i = 0;
    while (i < flight.ncomms && flight.comms[i].mc != mc) i++;
    if (i == flight.ncomms && flight.ncomms < FLIGHT_COMMS) flight.ncomms++;   /* a new one (a forgotten slot keeps its records' label) */
    if (i < flight.ncomms) {
        free(flight.comms[i].world);
        flight.comms[i].mc = mc; flight.comms[i].label = label; flight.comms[i].n = n; flight.comms[i].world = out;
        flight.comms[i].calls = 0;
        out = NULL;
    }
    pthread_mutex_unlock(&flight_mu);
    free(out);
}

/* Before MPI_Comm_free(mc): drop it from the registry (MPI may hand its
   handle to a later communicator). */
static inline void flight_forget_comm(MPI_Comm mc) {
    pthread_mutex_lock(&flight_mu);
    for (int i = 0; i < flight.ncomms; i++)
        if (flight.comms[i].mc == mc) flight.comms[i].mc = MPI_COMM_NULL;   /* its ranks stay, for the records made on it */
    pthread_mutex_unlock(&flight_mu);
}

static inline FlightRec* flight_slot_(unsigned long long id) {
    FlightRec* x = &flight.ring[id % (unsigned long long)flight.K];
    return x->seq == id ? x : NULL;
}
static inline FlightRec* flight_new_(const char* kind, int unit, int step, long long bytes, double now) {
    unsigned long long id = ++flight.next;
    FlightRec* x = &flight.ring[id % (unsigned long long)flight.K];
    memset(x, 0, sizeof(*x));
    x->seq = id; x->kind = kind; x->unit = unit; x->step = step; x->micro = flight.micro; x->bytes = bytes;
    x->thread = flight_thread; x->comm = -1; x->t_issue = now;
    return x;
}

/* A collective queued for the communication thread (the main thread, at
   issue): a record in state issued. Returns its id for the operation, 0
   when off. */
static inline unsigned long long flight_issue(const char* kind, int unit, int step, long long bytes) {
    if (!flight.K) return 0;
    double now = wall_seconds();
    pthread_mutex_lock(&flight_mu);
    FlightRec* x = flight_new_(kind, unit, step, bytes, now);
    x->state = FLIGHT_ISSUED; x->thread = 1;
    unsigned long long id = x->seq;
    pthread_mutex_unlock(&flight_mu);
    return id;
}

/* A collective starts waiting on mc (n ranks): continues the calling
   thread's pending record (flight_pending: the queued operation it runs)
   while that is still in state issued, else makes one (with the pending
   operation's issue time, step and unit when there is one). known = 1:
   the caller reports each peer's arrival (flight_arrived); 0: MPI's own
   collective, whose peers are not known. Returns its id (0 when off). */
static inline unsigned long long flight_start(MPI_Comm mc, int n, const char* kind, int unit, int step, long long bytes, int known) {
    if (!flight.K) return 0;
    double now = wall_seconds();
    pthread_mutex_lock(&flight_mu);
    FlightRec* p = flight_pending ? flight_slot_(flight_pending) : NULL;
    FlightRec* x = p;
    if (!p || p->state != FLIGHT_ISSUED) {   /* a new record; a later exchange of a queued operation keeps its issue */
        double issued = p ? p->t_issue : now;
        int pstep = p ? p->step : step, pmicro = p ? p->micro : flight.micro, punit = p ? p->unit : unit;
        x = flight_new_(kind, punit, pstep, bytes, now);
        x->t_issue = issued; x->micro = pmicro;
    }
    x->kind = kind; x->bytes = bytes;
    x->state = FLIGHT_WAITING; x->t_start = now; x->n = n; x->known = known;
    x->comm = -1;
    for (int i = 0; i < flight.ncomms; i++)
        if (flight.comms[i].mc == mc) { x->comm = i; x->call = ++flight.comms[i].calls; break; }
    unsigned long long id = x->seq;
    pthread_mutex_unlock(&flight_mu);
    return id;
}

/* Rank q of the record's communicator sent its data. */
static inline void flight_arrived(unsigned long long id, int q) {
    if (!flight.K || !id) return;
    pthread_mutex_lock(&flight_mu);
    FlightRec* x = flight_slot_(id);
    if (x) { if (q < 64) x->arrived |= 1ULL << q; x->narrived++; }
    pthread_mutex_unlock(&flight_mu);
}

/* The collective completed. */
static inline void flight_done(unsigned long long id) {
    if (!flight.K || !id) return;
    double now = wall_seconds();
    pthread_mutex_lock(&flight_mu);
    FlightRec* x = flight_slot_(id);
    if (x) { x->state = FLIGHT_DONE; x->t_end = now; }
    pthread_mutex_unlock(&flight_mu);
}

/* The end of a queued operation: its record, if no exchange took it
   (nothing to send: a group of one), is done; the pending record ends. */
static inline void flight_close(unsigned long long id) {
    if (!flight.K || !id) return;
    double now = wall_seconds();
    pthread_mutex_lock(&flight_mu);
    FlightRec* x = flight_slot_(id);
    if (x && x->state == FLIGHT_ISSUED) { x->state = FLIGHT_DONE; x->t_start = x->t_end = now; }
    pthread_mutex_unlock(&flight_mu);
    flight_pending = 0;
}

static inline void flight_json_str(FILE* f, const char* s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}
static inline void flight_json_time(FILE* f, double t) {
    if (t > 0) fprintf(f, "%.6f", t + flight.mono_to_unix); else fputs("null", f);
}

/* The dump watchdog: a dump still running FLIGHT_DUMP_BOUND_S seconds
   after it began ends the rank (a hung file system under -o must not turn
   a timeout or an abort into a hang). A dump writes a few kB; the bound is
   generous for any working file system, loaded or not. */
#define FLIGHT_DUMP_BOUND_S 10.0
static unsigned long long flight_dump_busy = 0;   /* the dump in progress (its number), 0: none */
static char flight_dump_msg[4600];                /* the watchdog's line, made before the dump begins */
static void* flight_watchdog(void* arg) {
    unsigned long long gen = (unsigned long long)(uintptr_t)arg;
    double until = wall_seconds() + FLIGHT_DUMP_BOUND_S;
    for (;;) {
        if (__atomic_load_n(&flight_dump_busy, __ATOMIC_ACQUIRE) != gen) return NULL;   /* it finished */
        if (wall_seconds() >= until) break;
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    ssize_t w = write(2, flight_dump_msg, strlen(flight_dump_msg));   /* write(2), not stdio: stderr's lock may be held */
    (void)w;
    int s = intr_pending();
    _exit(s ? 128 + s : 1);
    return NULL;
}

/* Write OUT/flight/rank_R.json (see above): reason ("collective timeout",
   "signal SIGTERM", "interrupted", "abort") and detail (the message that
   went with it). Normal context only (never from a signal handler); any
   thread; a later dump replaces an earlier one. node: this rank's node
   name; nodes (flight_set_nodes): every world rank's, or NULL. The ring is
   copied under flight_mu, formatted in memory and written outside it to a
   file opened O_NONBLOCK, under the watchdog above (which ends the rank
   after FLIGHT_DUMP_BOUND_S). Returns 0, or -1 when there is nowhere to
   write (no -o) or the write failed (the caller goes on: a dump never
   changes how a run ends). */
static inline int flight_dump(const char* reason, const char* detail, const char* node, int step) {
    if (!flight.dir[0] || !flight.K) return -1;   /* no -o, or --flight-recorder 0 */
    pthread_mutex_lock(&flight_dump_mu);
    char path[4200], tmp[4300];
    snprintf(path, sizeof(path), "%s/rank_%d.json", flight.dir, flight.rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    static unsigned long long gen = 0;
    snprintf(flight_dump_msg, sizeof(flight_dump_msg),
             "error (rank %d): writing its flight record %s took over %.0f s (a hung file system under -o?): ending this rank without it\n",
             flight.rank, path, FLIGHT_DUMP_BOUND_S);
    __atomic_store_n(&flight_dump_busy, ++gen, __ATOMIC_RELEASE);
    pthread_t wd;
    if (pthread_create(&wd, NULL, flight_watchdog, (void*)(uintptr_t)gen) == 0) pthread_detach(wd);
    /* the copy, under the lock: the records in the ring, the registry's labels, sizes and call counts */
    FlightComm comms[FLIGHT_COMMS];
    int ncomms, nrec = 0;
    unsigned long long recorded;
    pthread_mutex_lock(&flight_mu);
    recorded = flight.next;
    ncomms = flight.ncomms;
    memcpy(comms, flight.comms, sizeof(comms));
    for (int i = 0; i < ncomms; i++) {   /* the world ranks: a communicator re-registered later frees its array */
        int* wr = (int*)malloc((size_t)(comms[i].n > 0 ? comms[i].n : 1) * sizeof(int));
        if (wr && comms[i].world) memcpy(wr, comms[i].world, (size_t)comms[i].n * sizeof(int));
        else if (wr) comms[i].n = 0;
        comms[i].world = wr;
        if (!wr) comms[i].n = 0;
    }
    unsigned long long first = flight.next > (unsigned long long)flight.K ? flight.next - (unsigned long long)flight.K + 1 : 1;
    for (unsigned long long id = first; id <= flight.next; id++) {
        const FlightRec* x = flight_slot_(id);
        if (x) flight.snap[nrec++] = *x;
    }
    int micro = flight.micro;
    pthread_mutex_unlock(&flight_mu);
    /* formatted in memory, outside the lock */
    char* buf = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    int rc = -1;
    if (f) {
        fprintf(f, "{\"format\": \"llmc-flight 2\", \"run\": \"%s\", \"run_start\": %.6f, \"rank\": %d, \"world\": %d, \"node\": ",
                flight.run, flight.run_start, flight.rank, flight.world);
        flight_json_str(f, node ? node : "?");
        fprintf(f, ", \"pid\": %d, \"reason\": ", (int)getpid());
        flight_json_str(f, reason);
        fputs(", \"detail\": ", f);
        flight_json_str(f, detail ? detail : "");
        fprintf(f, ", \"time\": %.6f, \"step\": %d, \"micro_step\": %d, \"capacity\": %d,\n", wall_seconds() + flight.mono_to_unix, step,
                micro, flight.K);
        fputs(" \"nodes\": [", f);
        for (int q = 0; flight.nodes && q < flight.world; q++) { if (q) fputs(", ", f); flight_json_str(f, flight.nodes[q]); }
        fprintf(f, "],\n \"recorded\": %llu, \"communicators\": [", recorded);
        for (int i = 0; i < ncomms; i++) {
            const FlightComm* c = &comms[i];
            fprintf(f, "%s\n  {\"id\": %d, \"label\": ", i ? "," : "", i);
            flight_json_str(f, c->label);
            fputs(", \"ranks\": [", f);
            for (int q = 0; q < c->n; q++) fprintf(f, "%s%d", q ? ", " : "", c->world[q]);
            fprintf(f, "], \"calls\": %llu}", c->calls);
        }
        fputs("],\n \"records\": [", f);
        for (int k = 0; k < nrec; k++) {
            const FlightRec* x = &flight.snap[k];
            static const char* states[4] = {"?", "issued", "waiting", "done"};
            fprintf(f, "%s\n  {\"seq\": %llu, \"comm\": %d, \"call\": %llu, \"kind\": ", k ? "," : "", x->seq, x->comm, x->call);
            flight_json_str(f, x->kind);
            fprintf(f, ", \"unit\": %d, \"step\": %d, \"micro_step\": %d, \"bytes\": ", x->unit, x->step, x->micro);
            if (x->bytes >= 0) fprintf(f, "%lld", x->bytes); else fputs("null", f);
            fprintf(f, ", \"thread\": \"%s\", \"state\": \"%s\", \"issued\": ", x->thread ? "comm" : "main", states[x->state & 3]);
            flight_json_time(f, x->t_issue);
            fputs(", \"started\": ", f);
            flight_json_time(f, x->t_start);
            fputs(", \"ended\": ", f);
            flight_json_time(f, x->t_end);
            const FlightComm* c = x->comm >= 0 && x->comm < ncomms ? &comms[x->comm] : NULL;
            if (c && c->n > 0 && c->n <= 64 && x->state != FLIGHT_ISSUED && x->known) {
                for (int pass = 0; pass < 2; pass++) {
                    fputs(pass ? ", \"waiting_for\": [" : ", \"arrived\": [", f);
                    int m = 0;
                    for (int q = 0; q < c->n; q++) {
                        if (c->world[q] == flight.rank) continue;
                        int got = x->state == FLIGHT_DONE || ((x->arrived >> q) & 1);
                        if (got != !pass) continue;
                        fprintf(f, "%s%d", m++ ? ", " : "", c->world[q]);
                    }
                    fputc(']', f);
                }
            } else fputs(", \"arrived\": null, \"waiting_for\": null", f);
            fputc('}', f);
        }
        fputs("]}\n", f);
        rc = ferror(f) ? -1 : 0;
        if (fclose(f) != 0) rc = -1;
    }
    for (int i = 0; i < ncomms; i++) free(comms[i].world);
    /* the file: opened non-blocking (a fifo without a reader: ENXIO at once; a full pipe: EAGAIN, not a wait) */
    if (rc == 0) {
        mkdir(flight.dir, 0755);
        int slot = intr_watch_tmp(tmp);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);
        if (fd < 0) rc = -1;
        if (fd >= 0 && flight.stall_s > 0) {   /* the test hook: a write that hangs */
            struct timespec ts = {(time_t)flight.stall_s, (long)((flight.stall_s - (double)(time_t)flight.stall_s) * 1e9)};
            nanosleep(&ts, NULL);
        }
        for (size_t off = 0; fd >= 0 && rc == 0 && off < len;) {
            ssize_t w = write(fd, buf + off, len - off);
            if (w > 0) off += (size_t)w;
            else if (w < 0 && errno == EINTR) continue;
            else rc = -1;
        }
        if (fd >= 0 && close(fd) != 0) rc = -1;
        if (rc == 0 && rename(tmp, path) != 0) rc = -1;
        if (rc != 0 && fd >= 0) unlink(tmp);
        intr_unwatch(slot);
    }
    free(buf);
    __atomic_store_n(&flight_dump_busy, 0, __ATOMIC_RELEASE);
    if (rc == 0) flight.dumped++;
    pthread_mutex_unlock(&flight_dump_mu);
    return rc;
}

#endif /* LLMC_FLIGHT_H */
