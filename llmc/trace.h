/*
 trace.h: a timeline of what every rank does, in the Chrome trace-event
 format (JSON, what chrome://tracing and Perfetto open; "Trace Event
 Format", Google, 2016): one process per rank (pid = rank), two tracks per
 process (tid 0 = compute: the main thread's forward, backward, optimizer,
 one event per unit use and the waits on communication; tid 1 = comm: one
 event per collective, as the communication thread or the synchronous path
 ran it, with its kind, unit and bytes in "args"), and "memory" counter
 events ("ph":"C") with the bytes in use per ledger category whenever they
 change (the gathered units and unit grads that stage 3 holds only while
 it uses them).

 Events are "B"/"E" pairs with "ts" in microseconds since the trace
 started (a barrier on every rank). On a GPU the host only enqueues work,
 so the backend may install device marks (tracer.dev_record/dev_resolve):
 each begin/end then also records a device event on the stream of its
 track, and trace_write replaces the host time by the device time (the
 CUDA build records cudaEvents on the compute and comm streams). Each thread records into its own
 growable buffer (no locks); recording is on only while trace_on is set
 (the trainer sets it for the steps chosen by --trace-steps). trace_write
 gathers every rank's events to rank 0, which writes FILE.tmp and renames
 it to FILE.
*/
#ifndef LLMC_TRACE_H
#define LLMC_TRACE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <mpi.h>
#include "utils.h"
#include "interrupt.h"

enum { TRACE_TID_COMPUTE = 0, TRACE_TID_COMM = 1, TRACE_TIDS = 2 };
#define TRACE_MEM_MAX 12

typedef struct {
    double ts;                      /* seconds since trace start */
    char ph;                        /* 'B', 'E', 'C' */
    char name[39];
    int unit;                       /* -1: none */
    unsigned long long bytes;       /* comm events */
    unsigned long long mem[TRACE_MEM_MAX];  /* 'C' events */
    int dev;                        /* device mark (dev_record), -1: host time only */
} TraceEvent;

typedef struct {
    TraceEvent* ev;
    size_t n, cap;
} TraceBuf;

typedef struct {
    volatile int on;                /* recording now */
    int enabled;                    /* --trace given */
    double t0;
    TraceBuf buf[TRACE_TIDS];
    int num_mem;
    const char* mem_names[TRACE_MEM_MAX];
    /* device timestamps (optional): dev_record(tid) marks "now" on the
       track's stream and returns a handle (-1: none); dev_resolve(handle)
       returns its time in seconds since the trace started, after the work
       completed (called from trace_write) */
    int (*dev_record)(int tid);
    double (*dev_resolve)(int handle);
} Tracer;

static Tracer tracer;

static inline TraceEvent* trace_push(int tid) {
    TraceBuf* b = &tracer.buf[tid];
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 4096;
        TraceEvent* e = (TraceEvent*)realloc(b->ev, cap * sizeof(TraceEvent));
        if (!e) { tracer.on = 0; return NULL; }   /* out of memory: stop tracing, keep training */
        b->ev = e; b->cap = cap;
    }
    TraceEvent* e = &b->ev[b->n++];
    memset(e, 0, sizeof(*e));
    e->dev = tracer.dev_record ? tracer.dev_record(tid) : -1;
    return e;
}

/* Begin / end a duration event on track tid (the name is formatted like
   printf, cut at 38 characters). unit: the unit it concerns, or -1. */
static inline void trace_begin(int tid, int unit, const char* fmt, ...) {
    if (!tracer.on) return;
    TraceEvent* e = trace_push(tid);
    if (!e) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof(e->name), fmt, ap);
    va_end(ap);
    e->ph = 'B'; e->ts = wall_seconds() - tracer.t0; e->unit = unit;
}

/* Begin a collective's event on the comm track (kind, unit, bytes). */
static inline void trace_begin_coll(int unit, unsigned long long bytes, const char* kind) {
    if (!tracer.on) return;
    TraceEvent* e = trace_push(TRACE_TID_COMM);
    if (!e) return;
    snprintf(e->name, sizeof(e->name), "%s", kind);
    e->ph = 'B'; e->ts = wall_seconds() - tracer.t0; e->unit = unit; e->bytes = bytes;
}

static inline void trace_end(int tid) {
    if (!tracer.on) return;
    TraceEvent* e = trace_push(tid);
    if (!e) return;
    e->ph = 'E'; e->ts = wall_seconds() - tracer.t0; e->unit = -1;
}

/* A finished event [t0, t1] (wall_seconds) on track tid: a collective
   (unit, bytes) or a wait (host times: no device marks). */
static inline void trace_complete(int tid, const char* name, double t0, double t1, int unit, unsigned long long bytes) {
    if (!tracer.on) return;
    TraceEvent* b = trace_push(tid);
    if (!b) return;
    snprintf(b->name, sizeof(b->name), "%s", name);
    b->ph = 'B'; b->ts = t0 - tracer.t0; b->unit = unit; b->bytes = bytes; b->dev = -1;
    TraceEvent* e = trace_push(tid);
    if (!e) return;
    e->ph = 'E'; e->ts = t1 - tracer.t0; e->unit = -1; e->dev = -1;
}

/* The bytes in use per category (n <= TRACE_MEM_MAX values, names given
   once to trace_init). */
static inline void trace_memory(const unsigned long long* bytes) {
    if (!tracer.on) return;
    TraceEvent* e = trace_push(TRACE_TID_COMPUTE);
    if (!e) return;
    e->ph = 'C'; e->ts = wall_seconds() - tracer.t0; e->unit = -1;
    snprintf(e->name, sizeof(e->name), "memory");
    for (int i = 0; i < tracer.num_mem; i++) e->mem[i] = bytes[i];
}

/* Enable tracing (collective: a barrier sets the common origin). */
static inline void trace_init(int num_mem, const char* const* mem_names) {
    int (*rec)(int) = tracer.dev_record;
    double (*res)(int) = tracer.dev_resolve;
    memset(&tracer, 0, sizeof(tracer));
    tracer.dev_record = rec; tracer.dev_resolve = res;
    tracer.enabled = 1;
    tracer.num_mem = num_mem < TRACE_MEM_MAX ? num_mem : TRACE_MEM_MAX;
    for (int i = 0; i < tracer.num_mem; i++) tracer.mem_names[i] = mem_names[i];
    MPI_Barrier(MPI_COMM_WORLD);
    tracer.t0 = wall_seconds();
}

/* Append s to a growable string. */
static inline void trace_cat(char** s, size_t* n, size_t* cap, const char* fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(*s + *n, *cap - *n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < *cap - *n) { *n += (size_t)k; return; }
        size_t nc = 2 * *cap + (size_t)(k > 0 ? k : 256);
        char* p = (char*)realloc(*s, nc);
        if (!p) { fprintf(stderr, "error: out of host memory writing the trace\n"); exit(1); }
        *s = p; *cap = nc;
    }
}

static inline void trace_json_string(char** s, size_t* n, size_t* cap, const char* str) {
    trace_cat(s, n, cap, "\"");
    for (const char* c = str; *c; c++) {
        if (*c == '"' || *c == '\\') trace_cat(s, n, cap, "\\%c", *c);
        else if ((unsigned char)*c < 0x20) trace_cat(s, n, cap, "\\u%04x", (unsigned)*c);
        else trace_cat(s, n, cap, "%c", *c);
    }
    trace_cat(s, n, cap, "\"");
}

/* Gather every rank's events to rank 0 and write `path` (Chrome JSON);
   meta: extra "metadata" members, a JSON fragment ("\"k\": v, ..."), may be
   "". Collective. Returns 0, or 1 with a message in err (rank 0: the file
   could not be written). */
static inline int trace_write(const char* path, int rank, int nranks, const char* meta, char* err, size_t errlen) {
    tracer.on = 0;
    size_t n = 0, cap = 1 << 16;
    char* s = (char*)malloc(cap);
    if (!s) { fprintf(stderr, "error: out of host memory writing the trace\n"); exit(1); }
    s[0] = 0;
    static const char* tname[TRACE_TIDS] = {"compute", "comm"};
    trace_cat(&s, &n, &cap, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}},\n", rank, rank);
    for (int t = 0; t < TRACE_TIDS; t++)
        trace_cat(&s, &n, &cap, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n", rank, t, tname[t]);
    for (int t = 0; t < TRACE_TIDS; t++) {
        TraceBuf* b = &tracer.buf[t];
        for (size_t i = 0; i < b->n; i++) {
            TraceEvent* e = &b->ev[i];
            if (e->dev >= 0 && tracer.dev_resolve) e->ts = tracer.dev_resolve(e->dev);
            if (e->ph == 'C') {
                trace_cat(&s, &n, &cap, "{\"name\":\"memory\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{", e->ts * 1e6, rank, t);
                for (int k = 0; k < tracer.num_mem; k++) {
                    trace_json_string(&s, &n, &cap, tracer.mem_names[k]);
                    trace_cat(&s, &n, &cap, ":%llu%s", e->mem[k], k + 1 < tracer.num_mem ? "," : "");
                }
                trace_cat(&s, &n, &cap, "}},\n");
            } else if (e->ph == 'B') {
                trace_cat(&s, &n, &cap, "{\"name\":");
                trace_json_string(&s, &n, &cap, e->name);
                trace_cat(&s, &n, &cap, ",\"ph\":\"B\",\"ts\":%.3f,\"pid\":%d,\"tid\":%d", e->ts * 1e6, rank, t);
                if (e->unit >= 0 || e->bytes) {
                    trace_cat(&s, &n, &cap, ",\"args\":{\"unit\":%d", e->unit);
                    if (t == TRACE_TID_COMM) {
                        trace_cat(&s, &n, &cap, ",\"bytes\":%llu,\"kind\":", e->bytes);
                        trace_json_string(&s, &n, &cap, e->name);
                    }
                    trace_cat(&s, &n, &cap, "}");
                }
                trace_cat(&s, &n, &cap, "},\n");
            } else {
                trace_cat(&s, &n, &cap, "{\"ph\":\"E\",\"ts\":%.3f,\"pid\":%d,\"tid\":%d},\n", e->ts * 1e6, rank, t);
            }
        }
        free(b->ev); b->ev = NULL; b->n = b->cap = 0;
    }
    int mine = (int)n;
    int* counts = rank == 0 ? (int*)malloc((size_t)nranks * sizeof(int)) : NULL;
    MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int* displs = NULL;
    char* all = NULL;
    long long total = 0;
    if (rank == 0) {
        displs = (int*)malloc((size_t)nranks * sizeof(int));
        for (int r = 0; r < nranks; r++) { displs[r] = (int)total; total += counts[r]; }
        all = (char*)malloc((size_t)total + 1);
        if (!all || total > 0x7fffffffLL) { fprintf(stderr, "error: the trace is too large (%lld bytes); trace fewer steps\n", total); MPI_Abort(MPI_COMM_WORLD, 1); }
    }
    MPI_Gatherv(s, mine, MPI_CHAR, all, counts, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
    free(s);
    int rc = 0;
    if (rank == 0) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        int slot = intr_watch_tmp(tmp);   /* an exit now (interrupt.h) removes it */
        FILE* f = fopen(tmp, "w");
        if (!f) rc = set_err(err, errlen, "--trace %s: cannot write %s (%s)", path, tmp, strerror(errno));
        else {
            while (total > 0 && (all[total - 1] == '\n' || all[total - 1] == ',')) total--;  /* the last separator */
            fprintf(f, "{\"displayTimeUnit\":\"ms\",\"metadata\":{%s},\"traceEvents\":[\n", meta ? meta : "");
            size_t wr = fwrite(all, 1, (size_t)total, f);
            fprintf(f, "\n]}\n");
            int bad = wr != (size_t)total || ferror(f);
            if (fclose(f) != 0) bad = 1;
            if (bad || rename(tmp, path) != 0) { remove(tmp); rc = set_err(err, errlen, "--trace %s: cannot write (%s)", path, strerror(errno)); }
        }
        intr_unwatch(slot);
        free(all); free(counts); free(displs);
    }
    return rc;
}

#endif /* LLMC_TRACE_H */
