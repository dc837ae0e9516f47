/*
 zero/estimate.h: the ZeRO paper's closed forms, for any Psi and N, with no
 padding and no plan: per-rank model-state bytes of each stage
 ((p+g+k) Psi; (p+g) Psi + k Psi/N; p Psi + (g+k) Psi/N; (p+g+k) Psi/N),
 the traffic per step (2 Psi at stages 0-2, 3 Psi at stage 3), the smallest
 rank count that fits a memory size, the offloaded-optimizer variants
 (ZeRO-Offload / ZeRO-Infinity), and the estimator's table (--estimate).
 Independent of the plan ON PURPOSE: the plan's exact bytes (zero/plan.h,
 zero/ledger.h) and these formulas cross-check each other; the worked
 numbers of the paper are unit tests (70B on 64 GPUs: 1120 / 293.1 / 155.3
 / 17.5 GB, at least 14 GPUs at stage 3 with 80 GB).
 Source: Rajbhandari et al., arXiv:1910.02054, sections 5 and 7.
*/
#ifndef LLMC_ZERO_ESTIMATE_H
#define LLMC_ZERO_ESTIMATE_H

#include <stdio.h>

/* Per-rank model-state bytes of stage s: p, g bytes per param/grad, k
   optimizer bytes per param (12 for mixed-precision Adam, 8 for fp32). */
static inline double zero_formula_bytes(int stage, double psi, double N, double p, double g, double k) {
    switch (stage) {
        case 0: return (p + g + k) * psi;
        case 1: return (p + g) * psi + k * psi / N;
        case 2: return p * psi + (g + k) * psi / N;
        default: return (p + g + k) * psi / N;
    }
}

/* The formula of zero_formula_bytes as text, the one place it is written:
   "(p+g) Psi + k Psi/N" (p <= 0: the symbols only), with the bytes
   "(p+g) Psi + k Psi/N = 4 Psi + 12 Psi/N" (p, g, k > 0; N <= 0), or with
   the rank count too, "... = 4 Psi + 12 Psi/2" (N > 0). Stage 0 has no N. */
static inline void zero_formula_text(char* out, size_t n, int stage, int p, int g, int k, int N) {
    static const char* forms[4] = {"(p+g+k) Psi", "(p+g) Psi + k Psi/N", "p Psi + (g+k) Psi/N", "(p+g+k) Psi/N"};
    int s = stage < 0 ? 0 : stage > 3 ? 3 : stage;
    if (p <= 0) { snprintf(out, n, "%s", forms[s]); return; }
    char dn[24] = "N";
    if (N > 0) snprintf(dn, sizeof(dn), "%d", N);
    switch (s) {
        case 0: snprintf(out, n, "%s = %d Psi", forms[0], p + g + k); break;
        case 1: snprintf(out, n, "%s = %d Psi + %d Psi/%s", forms[1], p + g, k, dn); break;
        case 2: snprintf(out, n, "%s = %d Psi + %d Psi/%s", forms[2], p, g + k, dn); break;
        default: snprintf(out, n, "%s = %d Psi/%s", forms[3], p + g + k, dn); break;
    }
}

/* Traffic per step in units of Psi elements moved (ring volume, ZeRO paper
   section 7): 2 for stages 0-2, 3 for stage 3. */
static inline double zero_formula_traffic_psi(int stage) { return stage == 3 ? 3.0 : 2.0; }

/* Smallest N for which stage s fits in mem bytes, or 0 for "never".
   Exact integer arithmetic on bytes (psi integer, p,g,k integers). */
static inline unsigned long long zero_min_ranks(int stage, unsigned long long psi, unsigned long long p,
                                                unsigned long long g, unsigned long long k, unsigned long long mem) {
    unsigned long long rep, shard;   /* replicated and sharded bytes */
    switch (stage) {
        case 0: rep = (p + g + k) * psi; shard = 0; break;
        case 1: rep = (p + g) * psi; shard = k * psi; break;
        case 2: rep = p * psi; shard = (g + k) * psi; break;
        default: rep = 0; shard = (p + g + k) * psi; break;
    }
    if (shard == 0) return rep <= mem ? 1 : 0;
    if (rep >= mem) return 0;
    unsigned long long room = mem - rep;
    return (shard + room - 1) / room;
}

/* What the estimator knows beyond Psi (all optional). */
typedef struct {
    const double* traffic_psi;     /* per stage 0..3, from a known model's shard plans (zero_plan_traffic_psi); NULL: the paper's 2 / 3 Psi */
    const char* traffic_source;    /* one phrase naming the model and plan the figures come from */
    double activation_bytes;       /* per rank, added to every stage in the fit check; < 0: not known (ignored) */
    const char* activation_source; /* one phrase naming the model, B, T it was computed for */
    /* a known model, B and T: the full per-rank peak of a run (the trainer's
       fit check, llmc/gpt_fit.h) per stage 0..3 and offloaded 1..3 (index
       s), and the smallest rank count whose peak fits (0: never); NULL:
       the fit columns are the closed forms' lower bound */
    const double* peak_bytes;
    const long long* peak_min_ranks;
    const double* peak_bytes_off;
    const long long* peak_min_ranks_off;
} ZeroEstimateInfo;

/* Offloaded optimizer (ZeRO-Offload / ZeRO-Infinity, stages 1-3): the
   optimizer states, k Psi/N per rank, leave the device, so the device keeps
   the stage's formula with k = 0: stage 1 (p+g) Psi, stage 2 p Psi + g Psi/N,
   stage 3 (p+g) Psi/N; the host or disk holds k Psi/N per rank; with disk
   every step reads and writes them once (2 k Psi/N). The smallest rank count
   whose DEVICE fits is zero_min_ranks with k = 0 (the host or disk capacity
   is not checked). */
static inline double zero_formula_offload_device_bytes(int stage, double psi, double N, double p, double g) {
    return zero_formula_bytes(stage, psi, N, p, g, 0.0);
}
static inline double zero_formula_offload_bytes(double psi, double N, double k) { return k * psi / N; }

static inline void zero_estimate_print_offload(FILE* out, double psi, int N, int p, int g, int k, double gpu_mem, double act,
                                               const double* peak, const long long* peak_min) {
    fprintf(out, "optimizer offloaded (--offload-optimizer host or disk:DIR, stages 1-3): master, m, v = k Psi/N = %d Psi/N per rank off the device\n", k);
    fprintf(out, "%-6s %-28s %14s %10s %14s %14s %6s %10s\n", "stage", "per-rank device bytes", "GB per rank", "peak GB", "offloaded GB", "disk GB/step", "fits", "min ranks");
    static const char* forms[4] = {"", "(p+g) Psi", "p Psi + g Psi/N", "(p+g) Psi/N"};
    for (int s = 1; s < 4; s++) {
        double b = zero_formula_offload_device_bytes(s, psi, (double)N, p, g);
        double off = zero_formula_offload_bytes(psi, (double)N, k);
        char fits[8] = "-", minr[24] = "-", label[16];
        if (gpu_mem > 0 && peak) {
            snprintf(fits, sizeof(fits), "%s", peak[s] <= gpu_mem ? "yes" : "no");
            if (peak_min[s] <= 0) snprintf(minr, sizeof(minr), "never");
            else snprintf(minr, sizeof(minr), "%lld", peak_min[s]);
        } else if (gpu_mem > 0) {
            snprintf(fits, sizeof(fits), "%s", b + act <= gpu_mem ? "yes" : "no");  /* act: activations, 0 when not known */
            unsigned long long m = act >= gpu_mem ? 0 : zero_min_ranks(s, (unsigned long long)(psi + 0.5), (unsigned long long)p,
                                                  (unsigned long long)g, 0ULL, (unsigned long long)(gpu_mem - act + 0.5));
            if (m == 0) snprintf(minr, sizeof(minr), "never");
            else snprintf(minr, sizeof(minr), "%llu", m);
        }
        snprintf(label, sizeof(label), "%d+off", s);
        char pk[24] = "-";
        if (peak) snprintf(pk, sizeof(pk), "%.3f", peak[s] / 1e9);
        fprintf(out, "%-6s %-28s %14.3f %10s %14.3f %14.3f %6s %10s\n", label, forms[s], b / 1e9, pk, off / 1e9, 2.0 * off / 1e9, fits, minr);
    }
}

/* Print the estimator table: per-rank GB (1e9 bytes) of the model states for
   stages 0-3 (the paper's formulas), the full per-rank peak of a run when
   known (info->peak_bytes: what "fits" compares; "-" otherwise, when fits
   compares model states + activations), traffic per step in Psi (the model's
   own shard plan when info->traffic_psi, else the paper's), whether each fits
   in gpu_mem bytes (if > 0; model states plus, when known, the activations)
   and the smallest rank count that fits; then one line on where the traffic
   came from and one on what the fit check included. info may be NULL. */
static inline void zero_estimate_print(FILE* out, double psi, int N, int p, int g, int k, double gpu_mem, const ZeroEstimateInfo* info) {
    ZeroEstimateInfo none = {NULL, NULL, -1.0, NULL, NULL, NULL, NULL, NULL};
    if (!info) info = &none;
    double act = info->activation_bytes >= 0 ? info->activation_bytes : 0.0;
    fprintf(out, "ZeRO estimate: Psi = %.0f parameters (%.4g), N = %d ranks, %d+%d+%d = %d bytes/param", psi, psi, N, p, g, k, p + g + k);
    if (gpu_mem > 0) fprintf(out, ", memory %.6g GB per rank", gpu_mem / 1e9);
    fprintf(out, "\n");
    fprintf(out, "%-6s %-28s %14s %10s %12s %6s %10s\n", "stage", "per-rank model states", "GB per rank", "peak GB", "traffic", "fits", "min ranks");
    for (int s = 0; s < 4; s++) {
        char form[64];
        zero_formula_text(form, sizeof(form), s, 0, 0, 0, 0);
        double b = zero_formula_bytes(s, psi, (double)N, p, g, k);
        char fits[8] = "-", minr[24] = "-";
        if (gpu_mem > 0 && info->peak_bytes) {
            snprintf(fits, sizeof(fits), "%s", info->peak_bytes[s] <= gpu_mem ? "yes" : "no");
            if (info->peak_min_ranks[s] <= 0) snprintf(minr, sizeof(minr), "never");
            else snprintf(minr, sizeof(minr), "%lld", info->peak_min_ranks[s]);
        } else if (gpu_mem > 0) {
            snprintf(fits, sizeof(fits), "%s", b + act <= gpu_mem ? "yes" : "no");
            unsigned long long m = act >= gpu_mem ? 0 : zero_min_ranks(s, (unsigned long long)(psi + 0.5), (unsigned long long)p,
                                                  (unsigned long long)g, (unsigned long long)k, (unsigned long long)(gpu_mem - act + 0.5));
            if (m == 0) snprintf(minr, sizeof(minr), "never");
            else snprintf(minr, sizeof(minr), "%llu", m);
        }
        double tr = info->traffic_psi ? info->traffic_psi[s] : zero_formula_traffic_psi(s);
        char pk[24] = "-";
        if (info->peak_bytes) snprintf(pk, sizeof(pk), "%.3f", info->peak_bytes[s] / 1e9);
        fprintf(out, "%-6d %-28s %14.3f %10s %8.3f Psi %6s %10s\n", s, form, b / 1e9, pk, tr, fits, minr);
    }
    zero_estimate_print_offload(out, psi, N, p, g, k, gpu_mem, act, info->peak_bytes_off, info->peak_min_ranks_off);
    if (info->traffic_psi)
        fprintf(out, "traffic (first table): model-specific, from the shard plan of %s (what a run's traffic table counts)%s\n",
                info->traffic_source ? info->traffic_source : "the model", N == 1 ? "; one rank: nothing crosses the wire" : "");
    else
        fprintf(out, "traffic (first table): the ZeRO paper's 2 Psi (stages 0-2) and 3 Psi (stage 3); give a model (-e) instead of --params for its own figure\n");
    if (info->activation_bytes >= 0)
        fprintf(out, "activations: %.0f bytes = %.3f GB per rank for %s, not sharded by ZeRO%s\n", info->activation_bytes,
                info->activation_bytes / 1e9, info->activation_source ? info->activation_source : "the model",
                gpu_mem > 0 ? (info->peak_bytes ? "; part of every peak below" : "; the fit check adds them to every stage") : "");
    if (gpu_mem > 0 && info->peak_bytes) {
        fprintf(out, "fit check: the full per-rank peak of a run, as the trainer's fit check predicts it before allocating (ledger: model states, "
                "activations, transients; host buffers; I/O staging or workspace; this process's baseline), in both tables; peaks at N = %d:", N);
        for (int s = 0; s < 4; s++) fprintf(out, " %d: %.6g GB%s", s, info->peak_bytes[s] / 1e9, s < 3 ? "," : "");
        fprintf(out, "; offloaded:");
        for (int s = 1; s < 4; s++) fprintf(out, " %d: %.6g GB%s", s, info->peak_bytes_off[s] / 1e9, s < 3 ? "," : "\n");
    } else if (gpu_mem > 0 && info->activation_bytes < 0)
        fprintf(out, "fit check: a lower bound: model states only, activations ignored (give -e, -b and -t for the full per-rank peak)\n");
    else if (gpu_mem > 0)
        fprintf(out, "fit check: a lower bound: model states + activations (no transient buffers, no framework overhead)\n");
}

#endif /* LLMC_ZERO_ESTIMATE_H */
