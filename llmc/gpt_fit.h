/*
 gpt_fit.h: which configuration of a GPT-2 run fits a rank's memory, and
 which of those is fastest (-z auto), from the shard plan alone: nothing is
 allocated. For every candidate (zero_stage 0-3; --shard-group G over the
 divisors of N made of whole nodes; at stage 3 --reshard-embedding 1 and 0;
 --keep-logits 0 and 1; -r 0..3 unless -r is given; with -d, smaller
 micro-batches with more accumulation; the optimizer offloaded to disk, only when a disk:DIR is
 given and only when nothing else fits) it builds the plan a run would build
 (gpt2_predict), predicts the per-rank peak (fit.h: the process's baseline +
 ledger + host bookkeeping + the larger of I/O staging and the calibrated
 workspace) and the step time of a simple cost model: compute (flops per
 rank / the measured matmul rate) + every collective's ring wire bytes / the
 rate of the link it crosses (inside a node or across nodes; a collective
 whose ranks span nodes runs at the across rate) + the offloaded optimizer's
 disk bytes / the disk rate, with no overlap assumed. The model ranks the
 candidates; its milliseconds are not a forecast (docs/fit.md). The fastest
 candidate that fits wins; differences under 1% are ties, which go to the
 less recomputation, then the lower stage, then the smaller peak (-r 1 and
 2 cost no flops in the model, only elementwise passes).
*/
#ifndef LLMC_GPT_FIT_H
#define LLMC_GPT_FIT_H

#include <malloc.h>
#include <sys/stat.h>
#include "gpt.h"
#include "fit.h"
#include "offload.h"

typedef struct {
    GPT2Options opt;              /* the candidate's options (stage, reshard_embedding, keep_logits, offload, accumulation) */
    int G;                        /* ranks per shard group (HSDP when < N) */
    int B;                        /* micro-batch per rank */
    FitPeak mem;                  /* predicted per-rank peak */
    int fits;
    double inside_bytes, across_bytes; /* ring wire bytes per rank per optimizer step */
    double compute_ms, comm_ms, io_ms, step_ms;
} FitCandidate;

typedef struct {
    const GPT2Config* cfg;
    GPT2Options base;             /* the user's options (vocab_chunk, prefetch, reshard_after_forward, overlap, ...) */
    int N, L;                     /* ranks; ranks per node */
    int B, T;
    long total_batch;             /* tokens per optimizer step, all ranks */
    int batch_given;              /* -d given: smaller micro-batches with accumulation are candidates */
    int offload_dir_given;        /* --offload-optimizer disk:DIR given: offload may be chosen (last resort) */
    const char* offload_dir;      /* its DIR (NULL: the flags say DIR) */
    int recompute_given;          /* -r given: only that level; else -r 0..3 are candidates */
    int from_ckpt, ckpt_in, ckpt_out;
    unsigned long long baseline;  /* VmRSS now (the largest over the ranks) */
    unsigned long long workspace; /* calibrated training workspace (0: not calibrated) */
    unsigned long long loaders;   /* data loaders' and tokenizer's host buffers */
    unsigned long long budget;    /* the smallest budget over the ranks */
    double flops_per_s;           /* measured compute rate (0: not measured) */
    double inside_Bps, across_Bps, disk_Bps; /* link and disk rates (0: not measured / not applicable) */
} FitContext;

/* flops per token of the model (6 Psi + 12 L C T: forward and backward of
   every weight, attention's scores and values), as the trainer counts them */
static inline double gpt2_flops_per_token(const GPT2Config* c, int T) {
    return 6.0 * (double)gpt2_count_parameters(c) + 12.0 * c->num_layers * (double)c->channels * T;
}

/* Predict one candidate (c->opt, c->G, c->B set): its per-rank peak and
   step time. 0, or 1 with a message (an impossible configuration). */
static inline int gpt2_fit_evaluate(const FitContext* x, FitCandidate* c, char* err, size_t errlen) {
    ZeroPlan P;
    GPT2Layout y;
    Ledger L;
    int R = x->N / c->G;
    if (gpt2_predict(&P, &y, &L, x->cfg, &c->opt, c->G, 0, R, c->B, x->T, err, errlen)) return 1;
    FitPeak* m = &c->mem;
    memset(m, 0, sizeof(*m));
    for (int i = 0; i < MEM_NUM; i++) m->ledger += L.predicted[i];
    m->model_states = ledger_model_states(L.predicted);
    m->activations = L.predicted[MEM_ACTIVATIONS];
    m->transients = m->ledger - m->model_states - m->activations;
    unsigned long long held, staging;
    gpt2_host_bytes(x->cfg, &y, &P, c->B, x->T, x->from_ckpt, x->ckpt_in, x->ckpt_out, &held, &staging);
    m->baseline = x->baseline;
    m->host = held + x->loaders;
    m->staging = staging;
    m->workspace = x->workspace;
    fit_peak_total(m);
    c->fits = m->peak <= x->budget;
    /* traffic: ring wire bytes per rank of each collective per step; a
       collective runs across nodes when its ranks span nodes (ranks are
       placed node by node, L per node) */
    unsigned long long h[COLL_NUM];
    zero_predict_traffic(&P, h);
    c->inside_bytes = c->across_bytes = 0.0;
    c->comm_ms = 0.0;
    for (int k = 0; k < COLL_NUM; k++) {
        int n = k == COLL_SCALARS ? x->N : zero_coll_ranks(&P, k);
        if (n < 2 || h[k] == 0) continue;
        double w = (double)ring_wire_bytes(k, h[k], n);
        int spans = k == COLL_ALL_REDUCE || k == COLL_SCALARS ? x->N > x->L : k == COLL_SECONDARY_GATHER ? P.secondary > x->L
                  : k == COLL_QG_INSIDE ? P.qg_local > x->L : k == COLL_QG_ACROSS ? P.num_ranks / P.qg_local > 1 : c->G > x->L;
        double rate = spans ? x->across_Bps : x->inside_Bps;
        if (spans) c->across_bytes += w; else c->inside_bytes += w;
        if (rate > 0) c->comm_ms += 1000.0 * w / rate;
    }
    double tokens = (double)x->total_batch / x->N;
    double flops = tokens * gpt2_flops_per_token(x->cfg, x->T);
    if (!c->opt.keep_logits) flops += tokens * 2.0 * x->cfg->channels * (double)x->cfg->padded_vocab_size; /* the LM head's logits again in backward */
    if (c->opt.recompute >= 3)   /* every block's forward again but fcproj: qkv 6C^2, attproj 2C^2, fc 8C^2, attention 4CT per token */
        flops += tokens * x->cfg->num_layers * (16.0 * x->cfg->channels * (double)x->cfg->channels + 4.0 * x->cfg->channels * (double)x->T);
    c->compute_ms = x->flops_per_s > 0 ? 1000.0 * flops / x->flops_per_s : 0.0;
    unsigned long long off[OFFL_NUM];
    zero_predict_offload_traffic(&P, off);
    double io = (double)off[OFFL_DISK_READ] + (double)off[OFFL_DISK_WRITE];
    c->io_ms = io > 0 && x->disk_Bps > 0 ? 1000.0 * io / x->disk_Bps : 0.0;
    c->step_ms = c->compute_ms + c->comm_ms + c->io_ms;
    zero_plan_free(&P);
    return 0;
}

/* The candidates of -z auto (see the top), evaluated; at most max. Returns
   the count. */
static inline int gpt2_fit_enumerate(const FitContext* x, FitCandidate* out, int max) {
    int n = 0;
    char err[ERRLEN];
    int Bs[16], nb = 0;
    for (int b = x->B; b >= 1 && nb < 16; b = b / 2) {
        if (!x->batch_given && b != x->B) break;
        long tpm = (long)b * x->T * x->N;
        if (x->total_batch % tpm == 0) Bs[nb++] = b;
        if (b == 1) break;
    }
    for (int s = 0; s <= 3; s++)
        for (int G = x->N; G >= 1; G--) {
            if (x->N % G || (s == 0 && G != x->N)) continue;
            if (G != x->N && G % x->L != 0) continue;   /* HSDP: shard groups of whole nodes (one node when G = L) */
            if (s > 0 && G == 1 && x->N > 1) continue;  /* shards of one rank: stage 0's memory with extra copies */
            for (int re = 1; re >= (s == 3 ? 0 : 1); re--)
                for (int kl = 0; kl <= 1; kl++)
                    for (int of = 0; of <= (s >= 1 && x->offload_dir_given ? 1 : 0); of++)
                        for (int ib = 0; ib < nb; ib++)
                        for (int rc = x->recompute_given ? x->base.recompute : 0; rc <= (x->recompute_given ? x->base.recompute : 3) && n < max; rc++) {
                            FitCandidate* c = &out[n];
                            memset(c, 0, sizeof(*c));
                            c->opt = x->base;
                            c->opt.zero_stage = s; c->opt.reshard_embedding = re; c->opt.keep_logits = kl;
                            c->opt.offload = of ? OFFLOAD_DISK : OFFLOAD_NONE; c->opt.recompute = rc;
                            c->opt.grad_accum_steps = (int)(x->total_batch / ((long)Bs[ib] * x->T * x->N));
                            c->G = G; c->B = Bs[ib];
                            if (gpt2_fit_evaluate(x, c, err, sizeof(err)) == 0) n++;
                        }
        }
    return n;
}

/* Is a better than b for -z auto? Only fitting candidates compete; offload
   only when nothing else fits (the caller filters); then the least
   predicted step time (differences under 1% count as ties), then the less
   recomputation, the lower stage, the smaller peak. */
static inline int gpt2_fit_better(const FitCandidate* a, const FitCandidate* b) {
    double lo = a->step_ms < b->step_ms ? a->step_ms : b->step_ms;
    if (fabs(a->step_ms - b->step_ms) > 0.01 * lo + 1e-9) return a->step_ms < b->step_ms;
    if (a->opt.recompute != b->opt.recompute) return a->opt.recompute < b->opt.recompute;   /* -r 1, 2 cost what the model leaves out */
    if (a->opt.zero_stage != b->opt.zero_stage) return a->opt.zero_stage < b->opt.zero_stage;
    return a->mem.peak < b->mem.peak;
}

/* The flags that give candidate c, e.g. "-z 3 --shard-group 2
   --reshard-embedding 0 --keep-logits 1 -b 2" (only what differs from the
   user's options and N, B). */
static inline void gpt2_fit_flags(const FitContext* x, const FitCandidate* c, char* out, size_t n) {
    size_t k = (size_t)snprintf(out, n, "-z %d", c->opt.zero_stage);
    if (c->G != x->N && k < n) k += (size_t)snprintf(out + k, n - k, " --shard-group %d", c->G);
    if (c->opt.zero_stage == 3 && c->opt.reshard_embedding != x->base.reshard_embedding && k < n)
        k += (size_t)snprintf(out + k, n - k, " --reshard-embedding %d", c->opt.reshard_embedding);
    if (c->opt.keep_logits != x->base.keep_logits && k < n) k += (size_t)snprintf(out + k, n - k, " --keep-logits %d", c->opt.keep_logits);
    if (c->B != x->B && k < n) k += (size_t)snprintf(out + k, n - k, " -b %d", c->B);
    if (c->opt.recompute != x->base.recompute && k < n) k += (size_t)snprintf(out + k, n - k, " -r %d", c->opt.recompute);
    if (c->opt.offload == OFFLOAD_DISK && k < n) snprintf(out + k, n - k, " --offload-optimizer disk:%s", x->offload_dir ? x->offload_dir : "DIR");
}

/* One table row (rank 0 prints them): predicted peak, whether it fits,
   wire bytes across and inside nodes, the cost model's times, then the
   flags (mark: "<- chosen" or ""). */
static inline void gpt2_fit_row(FILE* f, const FitContext* x, const FitCandidate* c, const char* mark) {
    char fl[600];
    gpt2_fit_flags(x, c, fl, sizeof(fl));
    fprintf(f, "  %10.4f %5s %10.2f %10.2f %9.1f %9.1f %9.1f  %s%s%s\n", c->mem.peak / 1e9, c->fits ? "yes" : "no",
            c->across_bytes / 1e6, c->inside_bytes / 1e6, c->compute_ms, c->comm_ms + c->io_ms, c->step_ms, fl, mark[0] ? "  " : "", mark);
}

static inline void gpt2_fit_header(FILE* f) {
    fprintf(f, "  %10s %5s %10s %10s %9s %9s %9s  %s\n", "peak GB", "fits", "across MB", "inside MB", "compute", "comm+io", "step ms",
            "configuration (the flags that give it)");
}

/* ------------------------------------------------------------------------ */
/* The decision: the fit check, or -z auto's choice                         */

/* What the flags ask of the decision (train_gpt.cu fills it from its Args). */
typedef struct {
    unsigned long long memory_limit;   /* --memory-limit per rank (0: the cgroup's or MemAvailable) */
    int zero_auto;                     /* -z auto */
    int fit_check;                     /* --fit-check 1: refuse a configuration over the budget */
    int shard_group;                   /* --shard-group G (0: not given) */
    float link_inside_gbps, link_across_gbps; /* --link-gbps (0: measured) */
    const char* init;                  /* -e, for the refusal's message */
} FitRequest;

/* The outcome: the configuration to run with its predicted peak, and the
   budget it was measured against. */
typedef struct {
    FitCandidate run;
    unsigned long long budget;   /* the smallest per-rank budget over the ranks */
    char budget_source[320];
} FitDecision;

/* Stable order of candidate indices idx[0..n) by a key (peak or step time),
   ties by index: the same order on every rank and every run. */
typedef struct { const FitCandidate* cs; int by_peak; } FitOrderKey;
static FitOrderKey gpt2_fit_order_key;
static int gpt2_fit_order_cmp(const void* a, const void* b) {
    int i = *(const int*)a, j = *(const int*)b;
    const FitCandidate* cs = gpt2_fit_order_key.cs;
    double ki = gpt2_fit_order_key.by_peak ? (double)cs[i].mem.peak : cs[i].step_ms;
    double kj = gpt2_fit_order_key.by_peak ? (double)cs[j].mem.peak : cs[j].step_ms;
    if (ki != kj) return ki < kj ? -1 : 1;
    return i < j ? -1 : i > j;
}
static inline void gpt2_fit_order(const FitCandidate* cs, int* idx, int n, int by_peak) {
    gpt2_fit_order_key.cs = cs; gpt2_fit_order_key.by_peak = by_peak;
    qsort(idx, (size_t)n, sizeof(int), gpt2_fit_order_cmp);
}

/* -z auto's table (rank 0): the fitting candidates by predicted time (at
   most 24), then the eight closest to fitting. */
static inline void gpt2_fit_table(FILE* f, const FitContext* x, const FitCandidate* cs, int n, int best) {
    gpt2_fit_header(f);
    int* ord = (int*)malloc_or_die((size_t)(n > 0 ? n : 1) * sizeof(int), "-z auto order");
    int k = 0;
    for (int i = 0; i < n; i++) if (cs[i].fits) ord[k++] = i;
    gpt2_fit_order(cs, ord, k, 0);
    for (int i = 0; i < k && i < 24; i++) gpt2_fit_row(f, x, &cs[ord[i]], ord[i] == best ? "<- chosen" : "");
    if (k > 24) fprintf(f, "  ... %d more that fit\n", k - 24);
    int nf = 0;
    for (int i = 0; i < n; i++) if (!cs[i].fits) ord[nf++] = i;
    gpt2_fit_order(cs, ord, nf, 1);
    for (int i = 0; i < nf && i < 8; i++) gpt2_fit_row(f, x, &cs[ord[i]], "");
    if (nf > 8) fprintf(f, "  ... %d more that do not fit\n", nf - 8);
    free(ord);
}

/* -z auto: measure the rates the cost model needs, enumerate, choose the
   fastest configuration that fits (offload only when nothing else does),
   print the table and the choice (rank 0). Collective; a configuration that
   cannot be chosen ends every rank with one message. */
static inline void gpt2_fit_auto(Comm* comm, FitContext* x, const FitRequest* q, const FitBudget* bud, FitDecision* d) {
    char err[ERRLEN] = "";
    if (q->link_inside_gbps > 0) { x->inside_Bps = q->link_inside_gbps * 1.25e8; x->across_Bps = q->link_across_gbps * 1.25e8; }
    else fit_measure_links(comm, &x->inside_Bps, &x->across_Bps);
    x->flops_per_s = backend_matmul_flops();
    if (x->offload_dir_given) {
        struct stat st;
        if (stat(x->offload_dir, &st) != 0) set_err(err, ERRLEN, "--offload-optimizer disk:%s: %s (-z auto may put the optimizer states there)", x->offload_dir, strerror(errno));
        else if (!S_ISDIR(st.st_mode)) set_err(err, ERRLEN, "--offload-optimizer disk:%s: not a directory (-z auto may put the optimizer states there)", x->offload_dir);
        else x->disk_Bps = offload_probe_rate(x->offload_dir);
        comm_check_all(comm, err);
    }
    /* the probes leave MPI's buffers for the new communicators and the
       libraries' matmul state resident: measure the baseline again */
    malloc_trim(0);   /* the probes' freed buffers back to the system */
    unsigned long long now = backend_host_counts() ? fit_status_bytes("VmRSS:") : 0;
    MPI_Allreduce(&now, &x->baseline, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    int cap = 4096;
    FitCandidate* cs = (FitCandidate*)malloc_or_die((size_t)cap * sizeof(FitCandidate), "-z auto candidates");
    int n = gpt2_fit_enumerate(x, cs, cap);
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++)   /* offload only when nothing else fits */
        for (int i = 0; i < n; i++) {
            FitCandidate* c = &cs[i];
            if (!c->fits || (c->opt.offload == OFFLOAD_DISK) != (pass == 1)) continue;
            if (pass == 1 && !x->offload_dir_given) continue;
            if (q->shard_group > 0 && c->G != q->shard_group) continue;
            if (best < 0 || gpt2_fit_better(c, &cs[best])) best = i;
        }
    if (comm->rank == 0) {
        printf("-z auto: %d configurations on the plan, this rank's budget %.4g GB (%s), links %.3g Gbit/s inside a node, "
               "%.3g across nodes (%s), compute %.1f GFLOP/s per rank (measured)%s\n", n, x->budget / 1e9, bud->source,
               x->inside_Bps / 1.25e8, x->across_Bps / 1.25e8, q->link_inside_gbps > 0 ? "--link-gbps" : "measured", x->flops_per_s / 1e9,
               x->workspace ? "" : "; workspace not calibrated (make builds build/fit/)");
        gpt2_fit_table(stdout, x, cs, n, best);
    }
    if (best < 0) {
        set_err(err, ERRLEN, "-z auto: none of the %d configurations fits this rank's budget of %.4g GB (%s): lower -b/-t or the model size, "
                "add ranks or memory%s", n, x->budget / 1e9, bud->source,
                x->offload_dir_given ? "" : ", or allow the offloaded optimizer (not tried) with --offload-optimizer disk:DIR");
    } else {
        const FitCandidate* c = &cs[best];
        d->run = *c;
        if (comm->rank == 0) {
            char fl[600];
            gpt2_fit_flags(x, c, fl, sizeof(fl));
            printf("-z auto: chose %s: %s of the configurations that fit %.4g GB per rank: %.4g GB per rank predicted, "
                   "%.1f ms per step (compute %.1f, communication and I/O %.1f; no overlap assumed)\n", fl,
                   c->opt.offload == OFFLOAD_DISK ? "nothing fits without offload; the fastest offloaded one" : "the fastest",
                   x->budget / 1e9, c->mem.peak / 1e9, c->step_ms, c->compute_ms, c->comm_ms + c->io_ms);
        }
    }
    free(cs);
    comm_check_all(comm, err);
}

/* A configuration over the budget: the one message of its refusal (into
   out, n bytes), with its peak and parts, the stage's formula in numbers
   and up to three configurations that fit (without offload first, then the
   fastest). */
static inline void gpt2_fit_refusal(FitContext* x, const FitRequest* q, const FitBudget* bud, const FitCandidate* mine, char* out, size_t n) {
    int cap = 4096;
    FitCandidate* cs = (FitCandidate*)malloc_or_die((size_t)cap * sizeof(FitCandidate), "fit alternatives");
    x->offload_dir_given = 1;   /* list the offloaded configurations too */
    int nc = gpt2_fit_enumerate(x, cs, cap);
    char alts[2000] = "";
    int shown = 0, taken[3] = {-1, -1, -1};
    for (; shown < 3; shown++) {
        int best = -1;
        for (int i = 0; i < nc; i++) {
            FitCandidate* c = &cs[i];
            if (!c->fits || i == taken[0] || i == taken[1] || i == taken[2]) continue;
            if (best >= 0) {
                FitCandidate* b = &cs[best];
                int co = c->opt.offload != OFFLOAD_NONE, bo = b->opt.offload != OFFLOAD_NONE;
                if (co != bo ? co > bo : !gpt2_fit_better(c, b)) continue;
            }
            best = i;
        }
        if (best < 0) break;
        taken[shown] = best;
        char fl[600];
        gpt2_fit_flags(x, &cs[best], fl, sizeof(fl));
        size_t l = strlen(alts);
        snprintf(alts + l, sizeof(alts) - l, "%s%s (%.4g GB)", shown ? ", or " : "", fl, cs[best].mem.peak / 1e9);
    }
    free(cs);
    char nothing[200];
    snprintf(nothing, sizeof(nothing), "No stage fits %d rank%s at -b %d -t %d, even offloaded%s: add ranks or memory, or lower -b (with -d for the same "
             "global batch) or -t", x->N, x->N > 1 ? "s" : "", x->B, x->T, x->recompute_given ? "" : " or with -r 3");
    /* the stage's formula in numbers, e.g. "(p+g) Psi + k Psi/N = 4 Psi + 12 Psi/2" */
    int pb = (int)sizeof(floatX), kb = pb == 2 ? 12 : 8;
    char form[160];
    zero_formula_text(form, sizeof(form), mine->opt.zero_stage, pb, pb, kb, mine->G);
    if (mine->opt.offload != OFFLOAD_NONE) snprintf(form + strlen(form), sizeof(form) - strlen(form), ", the optimizer's k Psi/N offloaded");
    const FitPeak* m = &mine->mem;
    set_err(out, n, "-e %s (L=%d C=%d, %.4g parameters) at zero_stage %d needs %.4g GB per rank (model states %.4g GB = %s, activations %.4g GB, other %.4g GB); "
            "this rank's budget is %.4g GB (%s). %s%s (--fit-check 0 runs it anyway)",
            q->init, x->cfg->num_layers, x->cfg->channels, (double)gpt2_count_parameters(x->cfg),
            mine->opt.zero_stage, m->peak / 1e9, m->model_states / 1e9, form, m->activations / 1e9,
            (m->peak - m->model_states - m->activations) / 1e9, x->budget / 1e9, bud->source, shown ? "Fits: " : nothing, alts);
}

/* The fit check and -z auto, before anything of the model is allocated
   (train_gpt.cu's one call): this rank's budget (fit_budget; CUDA: the
   device's free memory), agreed over the ranks (the smallest budget, the
   largest baseline: every rank reaches the same verdict), then either -z
   auto's choice (gpt2_fit_auto) or the predicted peak of the configuration
   x->base with shard group `G`; one over the budget is refused with one
   message on every rank (--fit-check 0 runs it anyway, with a warning).
   Collective. x: filled by the caller except budget and the rates. */
static inline void gpt2_fit_decide(Comm* comm, FitContext* x, const FitRequest* q, int G, FitDecision* d) {
    char err[ERRLEN] = "";
    memset(d, 0, sizeof(*d));
    FitBudget bud = fit_budget(q->memory_limit, comm->local_size);
    if (!q->memory_limit) backend_memory_budget(&bud.bytes, bud.source, sizeof(bud.source), comm->local_rank, comm->local_size); /* CUDA: the device's free memory */
    /* one decision for all ranks: the smallest budget, the largest baseline */
    unsigned long long lo = bud.bytes, hi = x->baseline;
    MPI_Allreduce(&bud.bytes, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&x->baseline, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    x->budget = lo; x->baseline = hi;
    d->budget = lo;
    snprintf(d->budget_source, sizeof(d->budget_source), "%s", bud.source);
    FitCandidate* mine = &d->run;
    mine->opt = x->base; mine->G = G; mine->B = x->B;
    if (q->zero_auto) { gpt2_fit_auto(comm, x, q, &bud, d); return; }
    gpt2_fit_evaluate(x, mine, err, ERRLEN);
    comm_check_all(comm, err);
    if (mine->fits || !q->fit_check) {
        if (comm->rank == 0 && !mine->fits)
            printf("warning: --fit-check 0: zero_stage %d needs %.4g GB per rank, over this rank's budget of %.4g GB (%s): running anyway\n",
                   mine->opt.zero_stage, mine->mem.peak / 1e9, x->budget / 1e9, bud.source);
        return;
    }
    char refusal[3000];   /* longer than ERRLEN: up to three alternatives with their flags */
    gpt2_fit_refusal(x, q, &bud, mine, refusal, sizeof(refusal));
    comm_check_all(comm, refusal);
}

#endif /* LLMC_GPT_FIT_H */
