/*
 fit.h: does a configuration fit the memory a rank has? The rank's budget
 (where it comes from, in this order): --memory-limit per rank; else the
 memory limit of the rank's cgroup (v1 memory.limit_in_bytes or v2
 memory.max: of the limits on the path to the root the one that leaves the
 least room, read through /proc/self/cgroup: fit_cgroup_limit), less what that cgroup already
 holds beyond the node's ranks (the MPI or Slurm step daemon and any other
 resident: its usage less its page cache less the ranks' own anonymous
 memory), divided by the ranks of its node; else MemAvailable divided by
 the ranks of its node. The predicted per-rank peak: what the
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
 1e9 bytes; "900Mi": binary). No MPI here: tests/unit/test_fit.c runs it
 alone on fake cgroup trees. The link probe, the cost model and the
 decision are llmc/gpt_fit.h's.
*/
#ifndef LLMC_FIT_H
#define LLMC_FIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "utils.h"

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

/* A "key value" line of a cgroup's memory.stat (v1: total_inactive_file,
   v2: inactive_file, ...) in bytes; 0 if missing. */
static inline unsigned long long fit_stat_field(const char* path, const char* key) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    unsigned long long v = 0;
    size_t k = strlen(key);
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, key, k) && line[k] == ' ') { v = strtoull(line + k + 1, NULL, 10); break; }
    fclose(f);
    return v;
}

/* What the cgroup directory dir (cgroup version 1 or 2) holds that the
   kernel cannot take back (bytes): its usage (v1 memory.usage_in_bytes, v2
   memory.current) minus its page cache (memory.stat: v1 total_active_file
   + total_inactive_file, v2 active_file + inactive_file: reclaimable under
   the limit). 0 if the files cannot be read. */
static inline unsigned long long fit_cgroup_unreclaimable(const char* dir, int version) {
    char p[1500];
    unsigned long long usage = 0;
    snprintf(p, sizeof(p), "%s/%s", dir, version == 1 ? "memory.usage_in_bytes" : "memory.current");
    if (!fit_read_number(p, &usage)) return 0;
    snprintf(p, sizeof(p), "%s/memory.stat", dir);
    unsigned long long file = version == 1 ? fit_stat_field(p, "total_active_file") + fit_stat_field(p, "total_inactive_file")
                                           : fit_stat_field(p, "active_file") + fit_stat_field(p, "inactive_file");
    return usage > file ? usage - file : 0;
}

/* The memory cgroup that limits this process (fit_cgroup_limit). */
typedef struct {
    int version;                 /* 1 or 2 */
    unsigned long long limit;    /* bytes: the limit of the binding cgroup on the path to the root */
    unsigned long long other;    /* what that cgroup holds beyond the caller's ranks (bytes, unreclaimable) */
    char file[1440];             /* the limit's file, e.g. /sys/fs/cgroup/llmc/node1/memory.max */
    char dir[1400];              /* its cgroup directory (usage and memory.stat are read there) */
} FitCgroup;

/* The mount of a cgroup hierarchy in a mountinfo file (proc(5): "ID PARENT
   MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS",
   octal escapes \040 etc. in ROOT and MOUNTPOINT): version 1, the "cgroup"
   mount whose super options include "memory"; version 2, the "cgroup2"
   mount. 1 with its root (the hierarchy's path mounted there) and mount
   point, else 0. */
static inline void fit_unescape(char* s) {
    char* o = s;
    for (char* p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else *o++ = *p;
    }
    *o = 0;
}
static inline int fit_mountinfo_cgroup(const char* path, int version, char* root, size_t rn, char* point, size_t pn) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char* dash = strstr(line, " - ");
        if (!dash) continue;
        *dash = 0;
        char fstype[64] = "", src[256] = "", sopts[1024] = "";
        if (sscanf(dash + 3, "%63s %255s %1023s", fstype, src, sopts) < 2) continue;
        if (version == 1) {
            char so[1100];
            snprintf(so, sizeof(so), ",%s,", sopts);
            if (strcmp(fstype, "cgroup") || !strstr(so, ",memory,")) continue;
        } else if (strcmp(fstype, "cgroup2")) continue;
        char r[1500], m[1500];
        if (sscanf(line, "%*s %*s %*s %1499s %1499s", r, m) != 2) continue;
        fit_unescape(r); fit_unescape(m);
        snprintf(root, rn, "%.*s", (int)(rn - 1), r); snprintf(point, pn, "%.*s", (int)(pn - 1), m);
        found = 1;
    }
    fclose(f);
    return found;
}

/* The memory cgroup of this process that binds it: of the memory limits on
   the path from its cgroup to the root of the memory hierarchy (a parent's
   limit counts when the leaf says "max"; limits of 2^62 and above are the
   kernel's "unlimited"), the one that leaves the least room, limit - what
   that cgroup holds beyond `ranks_held` bytes (fit_cgroup_unreclaimable:
   another job step's daemon in a node's cgroup, say), read through
   $LLMC_PROC_SELF_CGROUP (default /proc/self/cgroup: lines
   "hierarchy-ID:controllers:path", cgroups(7)) under $LLMC_CGROUP_ROOT
   (default /sys/fs/cgroup):
     v1: the line whose controllers include "memory"; ROOT/memory/PATH/memory.limit_in_bytes
     v2: the line "0::PATH"; ROOT/PATH/memory.max ("max": no limit)
   A hybrid host (v1 controllers beside a v2 hierarchy without the memory
   controller) reads v1; a v1 line whose hierarchy is not mounted falls
   back to v2. Returns 1 with *cg, or 0 when no limit applies. The
   environment lets a test hand it fake trees (tests/unit/test_fit.c). */
static inline int fit_cgroup_limit(FitCgroup* cg, unsigned long long ranks_held) {
    const char* root = getenv("LLMC_CGROUP_ROOT");
    const char* self = getenv("LLMC_PROC_SELF_CGROUP");
    if (!root || !root[0]) root = "/sys/fs/cgroup";
    if (!self || !self[0]) self = "/proc/self/cgroup";
    FILE* f = fopen(self, "r");
    if (!f) return 0;
    char line[1024], v1[760] = "", v2[760] = "", v1ctrl[256] = "";
    int have1 = 0, have2 = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char* a = strchr(line, ':');
        char* b = a ? strchr(a + 1, ':') : NULL;
        if (!a || !b) continue;
        *a = 0; *b = 0;   /* line: the hierarchy id; a + 1: the controllers; b + 1: the path */
        const char* ctrl = a + 1;
        const char* path = b + 1;
        if (!strcmp(line, "0") && ctrl[0] == 0) { snprintf(v2, sizeof(v2), "%s", path); have2 = 1; }
        else {
            char cl[256];
            snprintf(cl, sizeof(cl), ",%s,", ctrl);
            if (strstr(cl, ",memory,")) { snprintf(v1, sizeof(v1), "%s", path); snprintf(v1ctrl, sizeof(v1ctrl), "%s", ctrl); have1 = 1; }
        }
    }
    fclose(f);
    char base[600] = "";
    int ver = 0;
    /* where the hierarchy is mounted: /proc/self/mountinfo (a v1 memory
       hierarchy need not be at ROOT/memory; a container mounts its own
       subtree, whose root is taken off the path); read unless
       LLMC_CGROUP_ROOT names a tree and LLMC_PROC_SELF_MOUNTINFO does not (a
       test's fake tree). Else v1 at ROOT/memory or ROOT/<controllers>, v2
       at ROOT. v1 first (a hybrid host), then v2. */
    const char* mi = getenv("LLMC_PROC_SELF_MOUNTINFO");
    const char* re = getenv("LLMC_CGROUP_ROOT");
    int use_mi = (mi && mi[0]) || !re || !re[0];
    if (!mi || !mi[0]) mi = "/proc/self/mountinfo";
    for (int v = 1; v <= 2 && !ver; v++) {
        char* cgpath = v == 1 ? v1 : v2;
        if (!(v == 1 ? have1 : have2)) continue;
        char mroot[760], mpoint[600];
        if (use_mi && fit_mountinfo_cgroup(mi, v, mroot, sizeof(mroot), mpoint, sizeof(mpoint)) && access(mpoint, R_OK) == 0) {
            size_t rl = strlen(mroot);
            if (strcmp(mroot, "/") && !strncmp(cgpath, mroot, rl) && (cgpath[rl] == '/' || cgpath[rl] == 0)) {
                char rest[760];
                snprintf(rest, sizeof(rest), "%s", cgpath[rl] ? cgpath + rl : "/");
                snprintf(cgpath, 760, "%s", rest);
            }
            snprintf(base, sizeof(base), "%s", mpoint);
            ver = v;
        } else if (v == 1) {   /* a v1 memory hierarchy that is not mounted here (some containers): try v2 */
            snprintf(base, sizeof(base), "%s/memory", root);
            if (access(base, R_OK) == 0) ver = 1;
            else {   /* co-mounted controllers without a memory link: ROOT/cpu,memory */
                snprintf(base, sizeof(base), "%.300s/%.250s", root, v1ctrl);
                if (access(base, R_OK) == 0) ver = 1;
            }
        } else { snprintf(base, sizeof(base), "%s", root); ver = 2; }
    }
    if (!ver) return 0;
    const char* file = ver == 1 ? "memory.limit_in_bytes" : "memory.max";
    char path[760];
    snprintf(path, sizeof(path), "%s", ver == 1 ? v1 : v2);
    unsigned long long best = ~0ULL, room = ~0ULL;
    for (;;) {
        char d[1400], p[1400 + 32];
        snprintf(d, sizeof(d), "%.600s%.760s", base, strcmp(path, "/") ? path : "");
        snprintf(p, sizeof(p), "%s/%s", d, file);
        unsigned long long x;
        if (fit_read_number(p, &x) && x < (1ULL << 62)) {
            unsigned long long held = fit_cgroup_unreclaimable(d, ver), other = held > ranks_held ? held - ranks_held : 0;
            unsigned long long r = x > other ? x - other : 0;
            if (r < room) {
                room = r; best = x; cg->other = other;
                snprintf(cg->file, sizeof(cg->file), "%s", p); snprintf(cg->dir, sizeof(cg->dir), "%s", d);
            }
        }
        if (!strcmp(path, "/") || !path[0]) break;
        char* sl = strrchr(path, '/');
        if (!sl) break;
        if (sl == path) path[1] = 0; else *sl = 0;
    }
    if (best >= (1ULL << 62)) return 0;
    cg->version = ver;
    cg->limit = best;
    return 1;
}

/* MemAvailable of /proc/meminfo in bytes, 0 if unknown. */
static inline unsigned long long fit_mem_available(void) { return proc_field_bytes("/proc/meminfo", "MemAvailable:"); }

typedef struct {
    unsigned long long bytes;   /* this rank's budget */
    char source[640];           /* where it comes from, e.g. "cgroup v1 /sys/fs/cgroup/memory/llmc/node1/memory.limit_in_bytes: 0.9 GB / 2 ranks of the node" */
} FitBudget;

/* This rank's memory budget (see the top). flag_bytes: --memory-limit (0:
   none); ranks_on_node: the ranks sharing the node (Comm.local_size);
   ranks_held: what those ranks hold now, summed over the node (their
   RssAnon + RssShmem: the part of their resident memory the cgroup cannot
   reclaim; fit_own_unreclaimable). With a cgroup limit, what the cgroup
   holds beyond the ranks (the MPI or Slurm step daemon, other processes:
   fit_cgroup_unreclaimable minus ranks_held) is taken off the limit before
   it is divided among the ranks. */
static inline FitBudget fit_budget(unsigned long long flag_bytes, int ranks_on_node, unsigned long long ranks_held) {
    FitBudget b;
    memset(&b, 0, sizeof(b));
    int n = ranks_on_node > 0 ? ranks_on_node : 1;
    FitCgroup cg;
    memset(&cg, 0, sizeof(cg));
    if (flag_bytes) {
        b.bytes = flag_bytes;
        snprintf(b.source, sizeof(b.source), "--memory-limit: %.4g GB per rank", flag_bytes / 1e9);
    } else if (fit_cgroup_limit(&cg, ranks_held)) {
        unsigned long long other = cg.other;
        unsigned long long left = cg.limit > other ? cg.limit - other : 0;
        b.bytes = left / (unsigned long long)n;
        snprintf(b.source, sizeof(b.source), "cgroup v%d %.300s: %.4g GB, less %.4g GB held by other processes of the cgroup, / %d rank%s of the node",
                 cg.version, cg.file, cg.limit / 1e9, other / 1e9, n, n > 1 ? "s" : "");
    } else {
        unsigned long long a = fit_mem_available();
        b.bytes = a / (unsigned long long)n;
        snprintf(b.source, sizeof(b.source), "MemAvailable: %.4g GB / %d rank%s of the node (no --memory-limit, no cgroup limit)",
                 a / 1e9, n, n > 1 ? "s" : "");
    }
    return b;
}

/* A process's resident memory that its cgroup cannot reclaim, from its
   status file (RssAnon) and its smaps_rollup (Pss_Shmem): its anonymous
   pages plus its proportional share of the shared memory it maps (its
   file-backed pages are page cache). Summed over the ranks of a node, a
   shared segment they all map (MPI's shared-memory transport) counts once,
   as the cgroup charges it; RssShmem counted it once per rank, so the
   node's other residents were under-counted by (ranks - 1) x the segment.
   Without Pss_Shmem (kernels before 5.x) RssShmem is taken. */
static inline unsigned long long fit_unreclaimable_of(const char* status, const char* rollup) {
    unsigned long long anon = proc_field_bytes(status, "RssAnon:");
    FILE* f = fopen(rollup, "r");
    int has_pss = 0;
    if (f) {
        char line[256];
        while (fgets(line, sizeof(line), f)) if (!strncmp(line, "Pss_Shmem:", 10)) { has_pss = 1; break; }
        fclose(f);
    }
    return anon + (has_pss ? proc_field_bytes(rollup, "Pss_Shmem:") : proc_field_bytes(status, "RssShmem:"));
}
static inline unsigned long long fit_own_unreclaimable(void) {
    return fit_unreclaimable_of("/proc/self/status", "/proc/self/smaps_rollup");
}

/* The training workspace of this program measured at build time
   (--calibrate-workspace writes build/fit/<program>.workspace beside the
   binary's directory, or the thread count's file): 1 with *bytes, 0 when
   not calibrated. */
/* The workspace file's path for the calibration key `key` ("" : the CPU's
   own level at the default thread count, all cores:
   build/fit/<program>.workspace; else <program><key>.workspace, the key
   from backend_workspace_key: ".<level>" where LLMC_CPU_ISA caps the level
   (other kernels, other library buffers) and ".threads<T>" at another
   thread count (make calibrates 1 thread, the count of every rank of a
   multi-rank run on 2 cores: the libraries keep per-thread memory)). 0
   when the binary's path is unknown. */
static inline int fit_workspace_path(char* path, size_t pn, const char* key) {
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (k <= 0) return 0;
    exe[k] = 0;
    char* slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = 0;
    snprintf(path, pn, "%s/build/fit/%s%s.workspace", exe, slash + 1, key);
    return 1;
}

/* Reads the calibration of this run's key (backend_workspace_key) when
   there is one, else the default's (the CPU's level, all cores); *path
   names the file read (or the default's, when none). */
static inline int fit_calibrated_workspace(unsigned long long* bytes, char* path, size_t pn) {
    char key[64];
    backend_workspace_key(key, sizeof(key));
    if (key[0] && fit_workspace_path(path, pn, key) && fit_read_number(path, bytes)) return 1;
    return fit_workspace_path(path, pn, "") && fit_read_number(path, bytes);
}

/* The parts of a predicted per-rank peak (bytes). */
typedef struct {
    unsigned long long baseline;  /* VmRSS when the check runs: code, libraries, MPI, threads */
    unsigned long long ledger;    /* the plan's ledger total */
    unsigned long long model_states, activations, transients; /* the ledger's parts */
    unsigned long long host;      /* host bookkeeping outside the ledger (model, data loaders, tokenizer) */
    unsigned long long staging;   /* parameter I/O staging (transient) */
    unsigned long long workspace; /* the libraries' training workspace: calibrated, plus the modelled matmul scratch */
    unsigned long long kernel_scratch; /* of which the kernels' shape-dependent scratch (the bf16 program's fp32 operand copies and attention buffers; backend_predict_kernel_scratch) */
    unsigned long long matmul_copies;  /* of that, the bf16 matmuls' buffers (fp32 operand copies, oneDNN scratchpad, attention's packed heads) (the part a run can read back: backend_matmul_copy_bytes) */
    unsigned long long decision;  /* the decision's own buffers before the model (-z auto: the link probe's, rank 0's candidate list; freed) */
    unsigned long long peak;      /* baseline + max(decision, ledger + max(staging, host + workspace)) */
} FitPeak;

/* The parameter I/O staging is freed before the first step touches the
   data loaders' buffers and the libraries' workspace: the peak is the
   larger of the two phases. The decision's buffers (-z auto's link probe
   and candidate list) are freed before the model is allocated: a third
   phase, before both. */
static inline void fit_peak_total(FitPeak* p) {
    unsigned long long run = p->host + p->workspace;
    unsigned long long model = p->ledger + (p->staging > run ? p->staging : run);
    p->peak = p->baseline + (p->decision > model ? p->decision : model);
}

#endif /* LLMC_FIT_H */
