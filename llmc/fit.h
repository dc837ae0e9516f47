/*
 fit.h: does a configuration fit the memory a rank has? The rank's budget
 (where it comes from, in this order): --memory-limit per rank; else the
 memory limit of the rank's cgroup (v1 memory.limit_in_bytes or v2
 memory.max, the smallest on the path to the root, read through
 /proc/self/cgroup) divided by the ranks of its node; else MemAvailable
 divided by the ranks of its node. The predicted per-rank peak: what the
 process holds when the check runs (code, libraries, MPI, threads: measured,
 VmRSS), plus the shard plan's ledger total (exact), plus the host
 the larger of two phases: the parameter I/O staging of the initialisation
 or checkpoint load (exact), or, once training runs, the host bookkeeping
 outside the ledger and the data loaders' buffers (exact) plus the training
 workspace the backend's libraries take (oneDNN's packing buffers, the
 kernels' scratch: measured once per program and build by
 `--calibrate-workspace`, which `make` runs, stored in
 build/fit/<program>.workspace). tests/suites/fit.sh checks the prediction
 against the measured VmHWM.

 Also: sizes as text ("900M", "1.5G": decimal units, as the project's GB =
 1e9 bytes; "900Mi": binary), and the link rates -z auto's cost model uses,
 measured by a short all-gather inside a node and across nodes.
*/
#ifndef LLMC_FIT_H
#define LLMC_FIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mpi.h>
#include "utils.h"
#include "comm.h"

/* "900M", "1.5G", "2T", "512K", "900Mi", "4Gi", or a plain number of bytes:
   K M G T = 1e3 1e6 1e9 1e12, Ki Mi Gi Ti = 2^10 .. 2^40. 0 or 1. */
static inline int fit_parse_size(const char* v, unsigned long long* out) {
    char num[64];
    size_t n = strlen(v);
    if (n == 0 || n >= sizeof(num)) return 1;
    memcpy(num, v, n + 1);
    double mult = 1.0;
    if (n >= 2 && (num[n - 1] == 'i' || num[n - 1] == 'I')) {
        switch (num[n - 2]) {
            case 'k': case 'K': mult = 1024.0; break;
            case 'm': case 'M': mult = 1024.0 * 1024.0; break;
            case 'g': case 'G': mult = 1024.0 * 1024.0 * 1024.0; break;
            case 't': case 'T': mult = 1024.0 * 1024.0 * 1024.0 * 1024.0; break;
            default: return 1;
        }
        num[n - 2] = 0;
    } else {
        switch (num[n - 1]) {
            case 'k': case 'K': mult = 1e3; break;
            case 'm': case 'M': mult = 1e6; break;
            case 'g': case 'G': mult = 1e9; break;
            case 't': case 'T': mult = 1e12; break;
            case 'b': case 'B': mult = 1.0; break;
            default: break;
        }
        if (mult != 1.0 || num[n - 1] == 'b' || num[n - 1] == 'B') num[n - 1] = 0;
    }
    double d;
    if (parse_double(num, &d) || d <= 0 || d * mult > 1.8e19) return 1;
    *out = (unsigned long long)(d * mult + 0.5);
    return 0;
}

/* A field of /proc/self/status in bytes ("VmRSS:", "VmHWM:"), 0 if unknown. */
static inline unsigned long long fit_status_bytes(const char* key) { return proc_field_bytes("/proc/self/status", key); }

/* One unsigned number from a file (a cgroup limit: "max" reads as
   unlimited, ULLONG_MAX); 0 if the file cannot be read. */
static inline int fit_read_number(const char* path, unsigned long long* out) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = "";
    int ok = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    if (!ok) return 0;
    if (!strncmp(buf, "max", 3)) { *out = ~0ULL; return 1; }
    char* end = NULL;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf) return 0;
    *out = v;
    return 1;
}

/* The memory limit of this process's cgroup: the smallest limit on the path
   from its cgroup to the root of the memory hierarchy (v1:
   /sys/fs/cgroup/memory/<path>/memory.limit_in_bytes; v2:
   /sys/fs/cgroup/<path>/memory.max), read through /proc/self/cgroup.
   Returns 1 with *limit and a description ("cgroup v1 /llmc/node1"), 0 when
   there is no limit (none set, or values of 2^62 and above, the kernel's
   "unlimited"). */
static inline int fit_cgroup_limit(unsigned long long* limit, char* where, size_t wn) {
    FILE* f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[1024], v1[768] = "", v2[768] = "";
    int have1 = 0, have2 = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char* a = strchr(line, ':');
        char* b = a ? strchr(a + 1, ':') : NULL;
        if (!a || !b) continue;
        *b = 0;
        const char* ctrl = a + 1;
        const char* path = b + 1;
        if (!strcmp(line, "0") && ctrl[0] == 0) { snprintf(v2, sizeof(v2), "%s", path); have2 = 1; }
        else {
            char cl[256];
            snprintf(cl, sizeof(cl), ",%s,", ctrl);
            if (strstr(cl, ",memory,")) { snprintf(v1, sizeof(v1), "%s", path); have1 = 1; }
        }
    }
    fclose(f);
    const char* root = have1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
    const char* file = have1 ? "memory.limit_in_bytes" : "memory.max";
    char path[768];
    if (have1) snprintf(path, sizeof(path), "%s", v1);
    else if (have2) snprintf(path, sizeof(path), "%s", v2);
    else return 0;
    unsigned long long best = ~0ULL;
    char at[768] = "";
    for (;;) {
        char p[1600];
        snprintf(p, sizeof(p), "%s%s/%s", root, strcmp(path, "/") ? path : "", file);
        unsigned long long x;
        if (fit_read_number(p, &x) && x < best) { best = x; snprintf(at, sizeof(at), "%s", path); }
        if (!strcmp(path, "/") || !path[0]) break;
        char* s = strrchr(path, '/');
        if (!s) break;
        if (s == path) path[1] = 0; else *s = 0;
    }
    if (best >= (1ULL << 62)) return 0;
    *limit = best;
    snprintf(where, wn, "cgroup %s %s", have1 ? "v1" : "v2", at);
    return 1;
}

/* MemAvailable of /proc/meminfo in bytes, 0 if unknown. */
static inline unsigned long long fit_mem_available(void) { return proc_field_bytes("/proc/meminfo", "MemAvailable:"); }

typedef struct {
    unsigned long long bytes;   /* this rank's budget */
    char source[320];           /* where it comes from, e.g. "cgroup v1 /llmc/node1: 0.9000 GB / 2 ranks of the node" */
} FitBudget;

/* This rank's memory budget (see the top). flag_bytes: --memory-limit (0:
   none); ranks_on_node: the ranks sharing the node (Comm.local_size). */
static inline FitBudget fit_budget(unsigned long long flag_bytes, int ranks_on_node) {
    FitBudget b;
    memset(&b, 0, sizeof(b));
    int n = ranks_on_node > 0 ? ranks_on_node : 1;
    unsigned long long lim;
    char where[800];
    if (flag_bytes) {
        b.bytes = flag_bytes;
        snprintf(b.source, sizeof(b.source), "--memory-limit: %.4g GB per rank", flag_bytes / 1e9);
    } else if (fit_cgroup_limit(&lim, where, sizeof(where))) {
        b.bytes = lim / (unsigned long long)n;
        snprintf(b.source, sizeof(b.source), "%.200s: %.4g GB / %d rank%s of the node", where, lim / 1e9, n, n > 1 ? "s" : "");
    } else {
        unsigned long long a = fit_mem_available();
        b.bytes = a / (unsigned long long)n;
        snprintf(b.source, sizeof(b.source), "MemAvailable: %.4g GB / %d rank%s of the node (no --memory-limit, no cgroup limit)",
                 a / 1e9, n, n > 1 ? "s" : "");
    }
    return b;
}

/* The training workspace of this program measured at build time
   (--calibrate-workspace writes build/fit/<program>.workspace beside the
   binary's directory): 1 with *bytes, 0 when not calibrated. */
static inline int fit_calibrated_workspace(unsigned long long* bytes, char* path, size_t pn) {
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (k <= 0) return 0;
    exe[k] = 0;
    char* slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = 0;
    snprintf(path, pn, "%s/build/fit/%s.workspace", exe, slash + 1);
    return fit_read_number(path, bytes);
}

/* The parts of a predicted per-rank peak (bytes). */
typedef struct {
    unsigned long long baseline;  /* VmRSS when the check runs: code, libraries, MPI, threads */
    unsigned long long ledger;    /* the plan's ledger total */
    unsigned long long model_states, activations, transients; /* the ledger's parts */
    unsigned long long host;      /* host bookkeeping outside the ledger (model, data loaders, tokenizer) */
    unsigned long long staging;   /* parameter I/O staging (transient) */
    unsigned long long workspace; /* the libraries' training workspace (calibrated) */
    unsigned long long peak;      /* baseline + ledger + max(staging, host + workspace) */
} FitPeak;

/* The parameter I/O staging is freed before the first step touches the
   data loaders' buffers and the libraries' workspace: the peak is the
   larger of the two phases. */
static inline void fit_peak_total(FitPeak* p) {
    unsigned long long run = p->host + p->workspace;
    p->peak = p->baseline + p->ledger + (p->staging > run ? p->staging : run);
}

/* The link rates of the cost model, bytes per second of ring wire bytes per
   rank: inside a node (shared memory) and across nodes (the network); 0
   where there is nothing to measure (one rank per node; one node).
   Collective: each rate is the best of 3 all-gathers of 4 MB per rank on a
   communicator of the ranks of one node, and of one rank per node. */
static inline void fit_measure_links(Comm* c, double* inside, double* across) {
    *inside = *across = 0.0;
    MPI_Comm node, cross;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    int nl;
    MPI_Comm_size(node, &nl);
    MPI_Comm_split(MPI_COMM_WORLD, c->local_rank, c->rank, &cross);
    int nc;
    MPI_Comm_size(cross, &nc);
    const int per = 1 << 22;
    int kmax = nl > nc ? nl : nc;
    char* sbuf = (char*)malloc_or_die((size_t)per, "link probe");
    char* rbuf = (char*)malloc_or_die((size_t)per * (size_t)kmax, "link probe");
    memset(sbuf, 1, (size_t)per);
    for (int which = 0; which < 2; which++) {
        MPI_Comm m = which ? cross : node;
        int n = which ? nc : nl;
        double best = 1e30;
        if (n > 1) {
            for (int r = 0; r < 3; r++) {
                MPI_Barrier(m);
                double t0 = MPI_Wtime();
                MPI_Allgather(sbuf, per, MPI_BYTE, rbuf, per, MPI_BYTE, m);
                double t = MPI_Wtime() - t0;
                MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, m);
                if (t < best) best = t;
            }
        }
        /* every rank takes the slowest group's rate (groups of one rank have none) */
        double rate = n > 1 ? (double)per * (n - 1) / best : 1e300, lo = rate;
        MPI_Allreduce(&rate, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        if (lo >= 1e299) lo = 0.0;
        if (which) *across = lo; else *inside = lo;
    }
    free(sbuf); free(rbuf);
    MPI_Comm_free(&node); MPI_Comm_free(&cross);
}

#endif /* LLMC_FIT_H */
