/*
 cpu/comm_thread.h: the CPU twin of the CUDA build's communication stream.
 One thread per rank runs the ZeRO engine's collectives (comm.h's
 deterministic host collectives) in the order they were issued, while the
 OpenMP threads compute: an all-gather of the next unit runs during the
 current unit's forward, a unit's reduce-scatter during the next unit's
 backward.

 Issue order and fences: ct_submit() queues an operation and returns its
 fence, the operation's sequence number (1, 2, ...); ct_wait(f) blocks the
 caller until every operation up to f is complete. Operations run one at a
 time, in issue order, so every rank runs the same collectives in the same
 order on each communicator, and one receive area (the comm scratch) serves
 them all. The results do not depend on when they run: overlap changes
 timing, never a number.

 MPI threading: MPI_THREAD_MULTIPLE (comm_init asks for it; Open MPI 4.1
 provides it). The thread only uses the group and replica communicators
 (and ZeRO++'s secondary and qgZ node / nodes ones, split from the group);
 the main thread uses MPI_COMM_WORLD and group_host, so no communicator is
 ever used by two threads and each sees its collectives in issue order. The
 thread waits on the network by polling with short sleeps
 (hostcoll_wait_peers), so it leaves the cores to the compute threads. Without
 MPI_THREAD_MULTIPLE, or with --overlap 0, there is no thread and every
 collective runs to completion when it is issued (fence 0).

 Timing: the thread adds up the time its operations take (comm busy); the
 callers of ct_wait add up the time they were blocked (comm exposed). Per
 step, hidden = 1 - exposed / busy is the share of communication that ran
 beside computation.
*/
#ifndef LLMC_CPU_COMM_THREAD_H
#define LLMC_CPU_COMM_THREAD_H

#include <pthread.h>
#include "../comm_quant.h"
#include "../trace.h"

enum { CT_REDUCE_SCATTER = 0, CT_ALL_GATHER, CT_ALL_REDUCE, CT_ALL_GATHER_QUANTIZED, CT_SECONDARY_GATHER, CT_REDUCE_SCATTER_QUANTIZED };

typedef struct {
    int kind;
    MPI_Comm mc;
    void* buf;
    size_t count;        /* shard elements (reduce-scatter, all-gather) or n (all-reduce) */
    void* acc;           /* reduce-scatter: accumulate into, or NULL */
    int eb;              /* element bytes */
    int trace_kind, trace_unit;
    unsigned long long trace_bytes;
    const QuantLayout* ql; /* CT_ALL_GATHER_QUANTIZED: the unit's block layout and scales per record */
    size_t qblocks;
    void* keep;            /* hpZ: all-gathers: afterwards copy buf's elements [keep_off, + keep_count) to keep;
                              CT_SECONDARY_GATHER: first copy keep (count elements) to this rank's part */
    size_t keep_off, keep_count;
    MPI_Comm mc2;          /* CT_REDUCE_SCATTER_QUANTIZED: mc = the node's ranks, mc2 = the nodes' (qgZ) */
    int L, M;
    const int* nodes;      /* CT_REDUCE_SCATTER_QUANTIZED: Comm's group_nodes (NULL: runs of L consecutive ranks) */
    unsigned long long flight_id;  /* its flight record (flight.h), made at issue; 0: none */
} CtOp;

#define CT_QUEUE 4096

typedef struct {
    int running;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    CtOp q[CT_QUEUE];
    unsigned long long issued, done;   /* fences handed out / completed */
    int stop;
    Comm* comm;
    double busy_s, wait_s;             /* cumulative, seconds */
} CommThread;

static CommThread cpu_ct;

static inline void ct_execute(const CtOp* op, int on_thread, void* scratch) {
    comm_ctx_what = coll_name(op->trace_kind); comm_ctx_unit = op->trace_unit;   /* for a timeout's message */
    flight_pending = op->flight_id;   /* the first exchange continues the record made at issue */
    switch (op->kind) {
        case CT_REDUCE_SCATTER: hostcoll_reduce_scatter(op->mc, op->buf, op->count, op->eb, scratch, op->acc, !on_thread); break;
        case CT_ALL_GATHER: hostcoll_all_gather(op->mc, op->buf, op->count, op->eb, on_thread); break;
        case CT_ALL_GATHER_QUANTIZED: hostcoll_all_gather_quantized(op->mc, op->buf, op->ql, op->qblocks, op->eb, scratch, op->trace_unit, on_thread); break;
        case CT_REDUCE_SCATTER_QUANTIZED:
            hostcoll_reduce_scatter_quantized(op->mc, op->mc2, op->L, op->M, op->nodes, op->buf, op->ql, op->qblocks, op->eb, scratch, op->acc,
                                              op->trace_unit, on_thread);
            break;
        case CT_SECONDARY_GATHER: {
            int r;
            MPI_Comm_rank(op->mc, &r);
            memcpy((char*)op->buf + (size_t)r * op->count * (size_t)op->eb, op->keep, op->count * (size_t)op->eb);
            hostcoll_all_gather(op->mc, op->buf, op->count, op->eb, on_thread);
            break;
        }
        default: hostcoll_all_reduce(op->mc, op->buf, op->count, op->eb, scratch, !on_thread); break;
    }
    if (op->keep && op->kind != CT_SECONDARY_GATHER)
        memcpy(op->keep, (const char*)op->buf + op->keep_off * (size_t)op->eb, op->keep_count * (size_t)op->eb);
    flight_close(op->flight_id);
    comm_ctx_what = NULL; comm_ctx_unit = -1;
}

static void* ct_main(void* arg) {
    CommThread* t = (CommThread*)arg;
    flight_thread = 1;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (t->done == t->issued && !t->stop) pthread_cond_wait(&t->cv_work, &t->mu);
        if (t->done == t->issued && t->stop) break;
        CtOp op = t->q[t->done % CT_QUEUE];
        pthread_mutex_unlock(&t->mu);
        double t0 = wall_seconds();
        ct_execute(&op, 1, t->comm->rs_scratch);
        double t1 = wall_seconds();
        trace_complete(TRACE_TID_COMM, coll_name(op.trace_kind), t0, t1, op.trace_unit, op.trace_bytes);
        pthread_mutex_lock(&t->mu);
        t->busy_s += t1 - t0;
        t->done++;
        pthread_cond_broadcast(&t->cv_done);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Start the thread (once). */
static inline void ct_start(Comm* c) {
    CommThread* t = &cpu_ct;
    if (t->running) return;
    memset(t, 0, sizeof(*t));
    t->comm = c;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv_work, NULL);
    pthread_cond_init(&t->cv_done, NULL);
    if (pthread_create(&t->thread, NULL, ct_main, t) != 0) comm_fatal(c, "cannot start the communication thread");
    t->running = 1;
}

/* Queue op; returns its fence. Without the thread: runs it now, returns 0. */
static inline unsigned long long ct_submit(const CtOp* op) {
    CommThread* t = &cpu_ct;
    if (!t->running) {
        double t0 = wall_seconds();
        ct_execute(op, 0, t->comm ? t->comm->rs_scratch : NULL);
        double t1 = wall_seconds();
        trace_complete(TRACE_TID_COMM, coll_name(op->trace_kind), t0, t1, op->trace_unit, op->trace_bytes);
        t->busy_s += t1 - t0;
        t->wait_s += t1 - t0;
        return 0;
    }
    pthread_mutex_lock(&t->mu);
    while (t->issued - t->done >= CT_QUEUE) pthread_cond_wait(&t->cv_done, &t->mu);
    t->q[t->issued % CT_QUEUE] = *op;
    t->q[t->issued % CT_QUEUE].flight_id = flight_issue(coll_name(op->trace_kind), op->trace_unit, comm_watch.step, -1);
    unsigned long long f = ++t->issued;
    pthread_cond_signal(&t->cv_work);
    pthread_mutex_unlock(&t->mu);
    return f;
}

/* Block until every operation up to fence f is complete (0: nothing). The
   wait wakes every 100 ms: a signal that finds it waiting writes the flight
   record (comm_notice_signal), since the thread it waits for may be inside
   MPI itself (a peer's hang-up is handled there), where no loop of ours
   polls. */
static inline void ct_wait(unsigned long long f) {
    CommThread* t = &cpu_ct;
    if (f == 0 || !t->running) return;
    pthread_mutex_lock(&t->mu);
    if (t->done >= f) { pthread_mutex_unlock(&t->mu); return; }
    double t0 = wall_seconds();
    while (t->done < f) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&t->cv_done, &t->mu, &ts);
        if (t->done < f && intr_pending()) {
            pthread_mutex_unlock(&t->mu);
            comm_notice_signal(MPI_COMM_NULL, 0, NULL, "the wait for the communication thread", t0, wall_seconds());
            pthread_mutex_lock(&t->mu);
        }
    }
    double t1 = wall_seconds();
    t->wait_s += t1 - t0;
    pthread_mutex_unlock(&t->mu);
    trace_complete(TRACE_TID_COMPUTE, "wait comm", t0, t1, -1, 0);
}

/* Drain the queue and join the thread. */
static inline void ct_stop(void) {
    CommThread* t = &cpu_ct;
    if (!t->running) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->cv_work);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    t->running = 0;
}

#endif /* LLMC_CPU_COMM_THREAD_H */
