/*
 comm_straggler.h: --straggler-report, for the trainer's loop (train_gpt.cu):
 per training step, how long this rank waited for each peer's data and when
 it entered its collectives (what comm_watch.h records at every wait),
 kept for the last COMM_STEP_RING steps, and at the end of the run rank 0's
 report naming the ranks that were late step after step. Included by
 comm.h; depends on comm_watch.h only (its CommWatch and its waits).
*/
#ifndef LLMC_COMM_STRAGGLER_H
#define LLMC_COMM_STRAGGLER_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "utils.h"
#include "comm_watch.h"

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

#endif /* LLMC_COMM_STRAGGLER_H */
