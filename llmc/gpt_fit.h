/*
 gpt_fit.h: which configuration of a GPT-2 run fits a rank's memory, and
 which of those is fastest (-z auto), from the shard plan alone: nothing is
 allocated. Decided ONCE for all ranks (docs/design.md section 11): the
 budget is the smallest over the ranks, the baseline the largest, the
 measured rates the slowest, and -z auto's choice is made by rank 0 and
 broadcast; the trainer then checks that every rank runs the same
 configuration (comm_agree_config).

 Candidates (gpt2_fit_enumerate): zero_stage 0-3; --shard-group G over the
 divisors of N (only G = N with --invariant 1: HSDP is not layout-invariant); at stage 3 --reshard-embedding 1 and 0; --keep-logits 0
 and 1; -r 0..3; with -d, smaller micro-batches with more accumulation; the
 optimizer offloaded to disk (chosen only when a disk:DIR is given and
 nothing else fits; always evaluated, so that the advice can say whether it
 would fit). Every flag the user gives (--shard-group, --reshard-embedding,
 --keep-logits, -r, -b) stays fixed in the search. An evaluation-only run
 (-x 0) has no grads, no optimizer and no backward: only the stage and the
 shard group vary.

 For every candidate it builds the plan a run would build (gpt2_predict),
 predicts the per-rank peak (fit.h: the process's baseline + ledger + host
 bookkeeping + the larger of I/O staging and the calibrated workspace) and
 the step time of a simple cost model: compute (flops per rank / the
 measured matmul rate) + every collective's ring wire bytes / the rate of
 the link it crosses (a collective whose groups of ranks span nodes, as the
 ranks' real placement says, runs at the across rate: a cyclic placement or
 nodes of different sizes are modelled as they are) + the offloaded
 optimizer's disk bytes / the disk rate, with no overlap assumed. The model
 ranks the candidates; its milliseconds are not a forecast (docs/fit.md).

 The choice (gpt2_fit_choose) does not depend on the order of the
 candidates: among those that fit, every candidate within 1% of the
 fastest predicted time is a tie, and ties go to the less recomputation,
 then the lower stage, then the smaller peak, then the larger shard group,
 --keep-logits 0, --reshard-embedding 1 and the larger micro-batch (-r 1
 and 2 cost no flops in the model, only elementwise passes).
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
    int N;                        /* ranks */
    const int* node_of;           /* the node of every rank (N entries, 0-based, the same on every rank); NULL: one node */
    int B, T;
    long total_batch;             /* tokens per optimizer step, all ranks */
    int batch_given;              /* -d given: smaller micro-batches with accumulation are candidates (unless -b is given) */
    int B_given;                  /* -b given: the micro-batch is fixed */
    int keep_logits_given;        /* --keep-logits given: fixed */
    int reshard_emb_given;        /* --reshard-embedding given: fixed */
    int shard_group;              /* --shard-group G given: fixed (0: searched) */
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
    unsigned long long decision;  /* the decision's own buffers before the model (bytes per rank, the largest rank's: FitPeak.decision) */
} FitContext;

/* flops per token of the model (6 Psi + 12 L C T: forward and backward of
   every weight, attention's scores and values), as the trainer counts them */
static inline double gpt2_flops_per_token(const GPT2Config* c, int T) {
    return 6.0 * (double)gpt2_count_parameters(c) + 12.0 * c->num_layers * (double)c->channels * T;
}

/* Does a group of ranks span nodes? The groups of k consecutive ranks
   (ranks jk .. jk+k-1: the shard groups for k = G, hpZ's and qgZ's
   first-hop groups inside them), from the placement x->node_of. */
static inline int fit_consecutive_span(const FitContext* x, int k) {
    if (!x->node_of || k < 2) return 0;
    for (int r = 0; r < x->N; r++)
        if (x->node_of[r] != x->node_of[r - r % k]) return 1;
    return 0;
}
/* ... and the strided groups: inside each block of `block` consecutive
   ranks, the ranks q, q + k, q + 2k, ... (the replica groups of HSDP for
   k = G and block = N; qgZ's second hop for k = L and block = G). */
static inline int fit_strided_span(const FitContext* x, int k, int block) {
    if (!x->node_of || k < 1 || block <= k) return 0;
    for (int r = 0; r < x->N; r++) {
        int base = r - r % block, q = (r - base) % k;
        if (x->node_of[r] != x->node_of[base + q]) return 1;
    }
    return 0;
}

/* Predict one candidate (c->opt, c->G, c->B set): its per-rank peak and
   step time. 0, or 1 with a message (an impossible configuration). */
static inline int gpt2_fit_evaluate(const FitContext* x, FitCandidate* c, char* err, size_t errlen) {
    ZeroPlan P;
    GPT2Layout y;
    Ledger L;
    memset(&P, 0, sizeof(P)); memset(&y, 0, sizeof(y));   /* (gcc's -Wmaybe-uninitialized when gpt2_predict fails early) */
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
    /* the calibrated workspace (what the libraries take beyond the modelled
       scratch) + the kernels' scratch of this run's shapes (the bf16
       program's fp32 operand copies and attention buffers: training's, or
       -x 0's forward alone) */
    m->kernel_scratch = backend_predict_kernel_scratch(x->cfg->num_layers, x->cfg->channels, x->cfg->num_heads, y.chunk_rows, y.last_rows,
                                                       c->B, x->T, c->opt.eval_only, &m->matmul_copies);
    m->workspace = x->workspace + m->kernel_scratch;
    m->decision = x->decision;
    fit_peak_total(m);
    c->fits = m->peak <= x->budget;
    /* traffic: ring wire bytes per rank of each collective per step; a
       collective runs across nodes when one of its groups spans nodes */
    unsigned long long h[COLL_NUM];
    zero_predict_traffic(&P, h);
    c->inside_bytes = c->across_bytes = 0.0;
    c->comm_ms = 0.0;
    for (int k = 0; k < COLL_NUM && !c->opt.eval_only; k++) {
        int n = k == COLL_SCALARS ? x->N : zero_coll_ranks(&P, k);
        if (n < 2 || h[k] == 0) continue;
        double w = (double)ring_wire_bytes(k, h[k], n);
        int spans = k == COLL_ALL_REDUCE ? fit_strided_span(x, c->G, x->N)
                  : k == COLL_SCALARS ? fit_consecutive_span(x, x->N)
                  : k == COLL_SECONDARY_GATHER ? fit_consecutive_span(x, P.secondary)
                  : k == COLL_QG_INSIDE ? fit_consecutive_span(x, P.qg_local)
                  : k == COLL_QG_ACROSS ? fit_strided_span(x, P.qg_local, c->G)
                  : fit_consecutive_span(x, c->G);
        double rate = spans ? x->across_Bps : x->inside_Bps;
        if (spans) c->across_bytes += w; else c->inside_bytes += w;
        if (rate > 0) c->comm_ms += 1000.0 * w / rate;
    }
    double tokens = (double)x->total_batch / x->N;
    double flops = tokens * gpt2_flops_per_token(x->cfg, x->T);
    if (!c->opt.keep_logits) flops += tokens * 2.0 * x->cfg->channels * (double)x->cfg->padded_vocab_size; /* the LM head's logits again in backward */
    if (c->opt.recompute >= 3)   /* every block's forward again but fcproj: qkv 6C^2, attproj 2C^2, fc 8C^2, attention 4CT per token */
        flops += tokens * x->cfg->num_layers * (16.0 * x->cfg->channels * (double)x->cfg->channels + 4.0 * x->cfg->channels * (double)x->T);
    c->compute_ms = x->flops_per_s > 0 && !c->opt.eval_only ? 1000.0 * flops / x->flops_per_s : 0.0;
    unsigned long long off[OFFL_NUM];
    zero_predict_offload_traffic(&P, off);
    double io = (double)off[OFFL_DISK_READ] + (double)off[OFFL_DISK_WRITE];
    c->io_ms = io > 0 && x->disk_Bps > 0 ? 1000.0 * io / x->disk_Bps : 0.0;
    c->step_ms = c->compute_ms + c->comm_ms + c->io_ms;
    zero_plan_free(&P);
    return 0;
}

/* The candidates of -z auto (see the top), evaluated; at most max (out
   NULL: none evaluated, the count of the configurations the loops list:
   gpt2_fit_count). Returns the count. The user's flags stay fixed;
   offloaded candidates (stages 1-3) are listed whether or not a DIR is
   given (gpt2_fit_choose takes them only when one is). */
static inline int gpt2_fit_enumerate(const FitContext* x, FitCandidate* out, int max) {
    int n = 0;
    char err[ERRLEN];
    int Bs[16], nb = 0, ev = x->base.eval_only;
    for (int b = x->B; b >= 1 && nb < 16; b = b / 2) {
        if ((!x->batch_given || x->B_given || ev) && b != x->B) break;
        long tpm = (long)b * x->T * x->N;
        if (x->total_batch % tpm == 0) Bs[nb++] = b;
        if (b == 1) break;
    }
    int kl0 = x->keep_logits_given || ev ? x->base.keep_logits : 0, kl1 = x->keep_logits_given || ev ? x->base.keep_logits : 1;
    int rc0 = x->recompute_given || ev ? x->base.recompute : 0, rc1 = x->recompute_given || ev ? x->base.recompute : 3;
    for (int s = 0; s <= 3; s++)
        for (int G = x->N; G >= 1; G--) {
            if (x->N % G || (s == 0 && G != x->N)) continue;
            if (x->shard_group > 0 && G != x->shard_group) continue;
            if (s > 0 && G == 1 && x->N > 1) continue;  /* shards of one rank: stage 0's memory with extra copies */
            if (x->base.invariant && G != x->N) continue;   /* --invariant 1: no HSDP (its replica sum is not the tree; setup_invariant) */
            int re0 = s == 3 && !x->reshard_emb_given ? 0 : x->base.reshard_embedding, re1 = s == 3 && !x->reshard_emb_given ? 1 : x->base.reshard_embedding;
            for (int re = re1; re >= re0; re--)
                for (int kl = kl0; kl <= kl1; kl++)
                    for (int of = 0; of <= (s >= 1 && !ev ? 1 : 0); of++)
                        for (int ib = 0; ib < nb; ib++)
                            for (int rc = rc0; rc <= rc1 && n < max; rc++) {
                                if (!out) { n++; continue; }
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

/* How many configurations gpt2_fit_enumerate lists for x (an upper bound
   of what it returns: a configuration the plan refuses is left out): the
   size of the list that holds them all, no stage cut. */
static inline int gpt2_fit_count(const FitContext* x) { return gpt2_fit_enumerate(x, NULL, 1 << 30); }

/* The order after the predicted time: <0 when a goes first. Less
   recomputation, the lower stage, the smaller peak, then (a total order
   over what the candidates vary) the larger shard group, --keep-logits 0,
   --reshard-embedding 1, the larger micro-batch, no offload. */
static inline int gpt2_fit_tiebreak(const FitCandidate* a, const FitCandidate* b) {
    if (a->opt.recompute != b->opt.recompute) return a->opt.recompute < b->opt.recompute ? -1 : 1;   /* -r 1, 2 cost what the model leaves out */
    if (a->opt.zero_stage != b->opt.zero_stage) return a->opt.zero_stage < b->opt.zero_stage ? -1 : 1;
    if (a->mem.peak != b->mem.peak) return a->mem.peak < b->mem.peak ? -1 : 1;
    if (a->G != b->G) return a->G > b->G ? -1 : 1;
    if (a->opt.keep_logits != b->opt.keep_logits) return a->opt.keep_logits < b->opt.keep_logits ? -1 : 1;
    if (a->opt.reshard_embedding != b->opt.reshard_embedding) return a->opt.reshard_embedding > b->opt.reshard_embedding ? -1 : 1;
    if (a->B != b->B) return a->B > b->B ? -1 : 1;
    if (a->opt.offload != b->opt.offload) return a->opt.offload < b->opt.offload ? -1 : 1;
    return 0;
}

/* The best of the candidates that fit, are offloaded or not as `offload`
   says, and are not in skip[0..nskip): the fastest predicted time, every
   candidate within 1% of it a tie, ties by gpt2_fit_tiebreak. The same
   answer for any order of cs. -1 if none. */
static inline int gpt2_fit_choose(const FitCandidate* cs, int n, int offload, const int* skip, int nskip) {
    double t = 0.0;
    int any = 0;
    for (int pass = 0; pass < 2; pass++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int skipped = 0;
            for (int j = 0; j < nskip; j++) skipped |= skip[j] == i;
            if (skipped || !cs[i].fits || (cs[i].opt.offload != OFFLOAD_NONE) != (offload != 0)) continue;
            if (pass == 0) { if (!any || cs[i].step_ms < t) t = cs[i].step_ms; any = 1; continue; }
            if (cs[i].step_ms > t * 1.01 + 1e-9) continue;
            if (best < 0 || gpt2_fit_tiebreak(&cs[i], &cs[best]) < 0) best = i;
        }
        if (pass == 0 && !any) return -1;
        if (pass == 1) return best;
    }
    return -1;
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

/* The link probe's bytes per rank of one all-gather over k ranks: 4 MiB,
   less where the k-rank receive buffer would pass FIT_PROBE_RECV (16 MiB):
   16 MiB / k rounded down to 4 KiB, at least 64 KiB. Its buffers hold
   (k + 1) x that (the send and the receive buffer): at most 16.06 MiB per
   rank for up to 256 ranks per node or nodes, and 4 MiB x 5 = 20 MiB for
   k <= 4 (an all-gather's rate at 64 KiB per rank is still a bandwidth
   figure: the ring moves (k-1) x 64 KiB per rank). */
#define FIT_PROBE_MAX (4ULL << 20)
#define FIT_PROBE_RECV (16ULL << 20)
static inline unsigned long long fit_probe_per_rank(int k) {
    if (k < 1) k = 1;
    unsigned long long per = FIT_PROBE_RECV / (unsigned long long)k / 4096ULL * 4096ULL;
    if (per > FIT_PROBE_MAX) per = FIT_PROBE_MAX;
    if (per < (64ULL << 10)) per = 64ULL << 10;
    return per;
}
/* ... and what the probe holds per rank (bytes) for a node of nl ranks
   among nc nodes (the counting side of fit_measure_links). */
static inline unsigned long long fit_probe_bytes(int nl, int nc) {
    int k = nl > nc ? nl : nc;
    return fit_probe_per_rank(k) * (unsigned long long)(k + 1);
}

/* The link rates of the cost model, bytes per second of ring wire bytes per
   rank: inside a node (shared memory) and across nodes (the network); 0
   where there is nothing to measure (one rank per node; one node).
   Collective: each rate is the best of 3 all-gathers of
   fit_probe_per_rank(k) bytes per rank (4 MiB up to 4 ranks, bounded so
   that the receive buffer stays within 16 MiB) on a communicator of the
   ranks of one node, and of one rank per node (every wait under the
   collective timeout: comm_wait_request); every rank takes the slowest
   group's rate. *held: the bytes its buffers held (fit_probe_bytes), the
   largest over the ranks. */
static inline void fit_measure_links(Comm* c, double* inside, double* across, unsigned long long* held) {
    *inside = *across = 0.0;
    MPI_Comm node, cross;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    int nl;
    MPI_Comm_size(node, &nl);
    MPI_Comm_split(MPI_COMM_WORLD, c->local_rank, c->rank, &cross);
    int nc;
    MPI_Comm_size(cross, &nc);
    int kmax = nl > nc ? nl : nc;
    const int per = (int)fit_probe_per_rank(kmax);
    unsigned long long mine = fit_probe_bytes(nl, nc);
    MPI_Request hq;
    MPI_Iallreduce(&mine, held, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, &hq);
    comm_wait_request(&hq, 0, "the link probe of -z auto (its size)");
    char* sbuf = (char*)malloc_or_die((size_t)per, "link probe");
    char* rbuf = (char*)malloc_or_die((size_t)per * (size_t)kmax, "link probe");
    memset(sbuf, 1, (size_t)per);
    for (int which = 0; which < 2; which++) {
        MPI_Comm m = which ? cross : node;
        int n = which ? nc : nl;
        double best = 1e30;
        MPI_Request rq;
        if (n > 1) {
            for (int r = 0; r < 3; r++) {
                MPI_Ibarrier(m, &rq);
                comm_wait_request_on(m, n, &rq, 0, "the link probe of -z auto (a barrier)");
                double t0 = MPI_Wtime();
                MPI_Iallgather(sbuf, per, MPI_BYTE, rbuf, per, MPI_BYTE, m, &rq);
                comm_wait_request_on(m, n, &rq, 0, "the link probe of -z auto (an all-gather)");
                double t = MPI_Wtime() - t0, tmax = t;
                MPI_Iallreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, m, &rq);
                comm_wait_request_on(m, n, &rq, 0, "the link probe of -z auto");
                if (tmax < best) best = tmax;
            }
        }
        /* every rank takes the slowest group's rate (groups of one rank have none) */
        double rate = n > 1 ? (double)per * (n - 1) / best : 1e300, lo = rate;
        MPI_Iallreduce(&rate, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD, &rq);
        comm_wait_request(&rq, 0, "the link probe of -z auto");
        if (lo >= 1e299) lo = 0.0;
        if (which) *across = lo; else *inside = lo;
    }
    free(sbuf); free(rbuf);
    MPI_Comm_free(&node); MPI_Comm_free(&cross);
}

/* ------------------------------------------------------------------------ */
/* The decision: the fit check, or -z auto's choice                         */

/* What the flags ask of the decision (train_gpt.cu fills it from its Args). */
typedef struct {
    unsigned long long memory_limit;   /* --memory-limit per rank (0: the cgroup's or MemAvailable) */
    int zero_auto;                     /* -z auto */
    int fit_check;                     /* --fit-check 1: refuse a configuration over the budget */
    float link_inside_gbps, link_across_gbps; /* --link-gbps (0: measured) */
    const char* init;                  /* -e, for the refusal's message */
    const char* link_source;           /* where the given link rates come from (NULL: --link-gbps) */
} FitRequest;

/* The outcome: the configuration to run with its predicted peak, and the
   budget it was measured against. */
typedef struct {
    FitCandidate run;
    int keep_logits_auto;        /* --keep-logits not given, a training run that fits: 1 keeps the logits (they fit too), -1 recomputes them (they do not), 0 not decided here */
    unsigned long long keep_logits_peak; /* the per-rank peak with the logits kept (bytes; 0 unless keep_logits_auto != 0) */
    unsigned long long budget;   /* the smallest per-rank budget over the ranks */
    char budget_source[640];     /* where it comes from: "rank R on node H, the smallest over the N ranks: SOURCE" (SOURCE: that rank's fit_budget text) */
    int budget_rank;             /* the rank whose budget it is (the lowest of those with the smallest) */
} FitDecision;

/* The smallest budget over the ranks, with the text of the rank it is
   (collective): *out gets its bytes and, with more than one rank, "rank R
   on node H, the smallest over the N ranks: " before that rank's source
   (R: the lowest rank among those with the smallest budget). Returns R. */
static inline int fit_agree_budget(Comm* comm, const FitBudget* mine, FitBudget* out) {
    int N = comm->world_size, who = 0;
    unsigned long long* all = (unsigned long long*)malloc_or_die((size_t)N * sizeof(unsigned long long), "the ranks' budgets");
    MPI_Request rq;
    MPI_Iallgather(&mine->bytes, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "the fit check's budget (every rank's)");
    for (int r = 1; r < N; r++) if (all[r] < all[who]) who = r;
    char src[sizeof(mine->source)];
    snprintf(src, sizeof(src), "%s", mine->source);
    MPI_Ibcast(src, (int)sizeof(src), MPI_CHAR, who, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "the fit check's budget (the source of the smallest)");
    memset(out, 0, sizeof(*out));
    out->bytes = all[who];
    if (N > 1) snprintf(out->source, sizeof(out->source), "rank %d on node %.64s, the smallest over the %d ranks: %.500s", who,
                        comm_watch.host ? comm_watch.host[who] : "?", N, src);
    else snprintf(out->source, sizeof(out->source), "%s", src);
    free(all);
    return who;
}

/* Stable order of candidate indices idx[0..n) by a key (peak or step time),
   ties by gpt2_fit_tiebreak: the same order on every run. */
typedef struct { const FitCandidate* cs; int by_peak; } FitOrderKey;
static FitOrderKey gpt2_fit_order_key;
static int gpt2_fit_order_cmp(const void* a, const void* b) {
    int i = *(const int*)a, j = *(const int*)b;
    const FitCandidate* cs = gpt2_fit_order_key.cs;
    double ki = gpt2_fit_order_key.by_peak ? (double)cs[i].mem.peak : cs[i].step_ms;
    double kj = gpt2_fit_order_key.by_peak ? (double)cs[j].mem.peak : cs[j].step_ms;
    if (ki != kj) return ki < kj ? -1 : 1;
    int t = gpt2_fit_tiebreak(&cs[i], &cs[j]);
    return t ? t : (i < j ? -1 : i > j);
}
static inline void gpt2_fit_order(const FitCandidate* cs, int* idx, int n, int by_peak) {
    gpt2_fit_order_key.cs = cs; gpt2_fit_order_key.by_peak = by_peak;
    qsort(idx, (size_t)n, sizeof(int), gpt2_fit_order_cmp);
}

/* -z auto's table (rank 0): the fitting candidates that may be chosen, by
   predicted time (at most 24), then the eight closest to fitting. */
static inline void gpt2_fit_table(FILE* f, const FitContext* x, const FitCandidate* cs, int n, int best) {
    gpt2_fit_header(f);
    int* ord = (int*)malloc_or_die((size_t)(n > 0 ? n : 1) * sizeof(int), "-z auto order");
    int k = 0;
    for (int i = 0; i < n; i++) if (cs[i].fits && (x->offload_dir_given || cs[i].opt.offload == OFFLOAD_NONE)) ord[k++] = i;
    gpt2_fit_order(cs, ord, k, 0);
    for (int i = 0; i < k && i < 24; i++) gpt2_fit_row(f, x, &cs[ord[i]], ord[i] == best ? "<- chosen" : "");
    if (k > 24) fprintf(f, "  ... %d more that fit\n", k - 24);
    int nf = 0;
    for (int i = 0; i < n; i++) if (!cs[i].fits && (x->offload_dir_given || cs[i].opt.offload == OFFLOAD_NONE)) ord[nf++] = i;
    gpt2_fit_order(cs, ord, nf, 1);
    for (int i = 0; i < nf && i < 8; i++) gpt2_fit_row(f, x, &cs[ord[i]], "");
    if (nf > 8) fprintf(f, "  ... %d more that do not fit\n", nf - 8);
    free(ord);
}

/* Up to three configurations that fit, as text: "FLAGS (X GB), or ..."
   (without offload first, then offloaded ones; each pick gpt2_fit_choose's).
   Returns how many. */
static inline int gpt2_fit_alternatives(const FitContext* x, const FitCandidate* cs, int n, char* out, size_t cap) {
    int taken[3], shown = 0;
    out[0] = 0;
    for (int off = 0; off <= 1 && shown < 3; off++)
        for (;;) {
            if (shown >= 3) break;
            int best = gpt2_fit_choose(cs, n, off, taken, shown);
            if (best < 0) break;
            taken[shown] = best;
            char fl[600];
            gpt2_fit_flags(x, &cs[best], fl, sizeof(fl));
            size_t l = strlen(out);
            snprintf(out + l, cap - l, "%s%s (%.4g GB)", shown ? ", or " : "", fl, cs[best].mem.peak / 1e9);
            shown++;
        }
    return shown;
}

/* MPI_Allreduce of one value with the collective timeout (comm_wait_request). */
static inline void fit_allreduce(const void* in, void* out, MPI_Datatype t, MPI_Op op, MPI_Comm mc, const char* what) {
    MPI_Request rq;
    MPI_Iallreduce(in, out, 1, t, op, mc, &rq);
    int n = 0;
    MPI_Comm_size(mc, &n);
    comm_wait_request_on(mc, n, &rq, 0, what);
}

/* -z auto: measure the rates the cost model needs (agreed: the slowest over
   the ranks), then rank 0 enumerates and chooses the fastest configuration
   that fits (offload only when nothing else does and a DIR is given),
   prints the table and the choice, and broadcasts it: every rank runs
   rank 0's choice. Collective; when nothing can be chosen every rank ends
   with rank 0's one message, which names an offloaded configuration only
   when one is predicted to fit. */
static inline void gpt2_fit_auto(Comm* comm, FitContext* x, const FitRequest* q, const FitBudget* bud, FitDecision* d) {
    char err[ERRLEN] = "";
    unsigned long long probe = 0;   /* the link probe's buffers (none with --link-gbps) */
    if (q->link_inside_gbps > 0 || q->link_across_gbps > 0) { x->inside_Bps = q->link_inside_gbps * 1.25e8; x->across_Bps = q->link_across_gbps * 1.25e8; }
    else fit_measure_links(comm, &x->inside_Bps, &x->across_Bps, &probe);
    double f = backend_matmul_flops(), lo = f;
    const char* scale = getenv("LLMC_TEST_FLOPS_SCALE");   /* test hook: this rank measures as if its cores were that much slower or faster */
    if (scale && atof(scale) > 0) f *= atof(scale);
    fit_allreduce(&f, &lo, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD, "-z auto's compute rate (the slowest rank's)");
    x->flops_per_s = lo;
    if (x->offload_dir_given) {
        struct stat st;
        if (stat(x->offload_dir, &st) != 0) set_err(err, ERRLEN, "--offload-optimizer disk:%s: %s (-z auto may put the optimizer states there)", x->offload_dir, strerror(errno));
        else if (!S_ISDIR(st.st_mode)) set_err(err, ERRLEN, "--offload-optimizer disk:%s: not a directory (-z auto may put the optimizer states there)", x->offload_dir);
        else x->disk_Bps = offload_probe_rate(x->offload_dir);
        comm_check_all(comm, err);
        double dl = x->disk_Bps;
        fit_allreduce(&x->disk_Bps, &dl, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD, "-z auto's disk rate (the slowest rank's)");
        x->disk_Bps = dl;
    }
    /* the probes leave MPI's buffers for the new communicators and the
       libraries' matmul state resident: measure the baseline again */
    malloc_trim(0);   /* the probes' freed buffers back to the system */
    unsigned long long now = backend_host_counts() ? fit_status_bytes("VmRSS:") : 0;
    fit_allreduce(&now, &x->baseline, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, "-z auto's baseline (the largest rank's)");
    int best = -1;
    FitCandidate chosen;
    memset(&chosen, 0, sizeof(chosen));
    comm_solo_begin("enumerating -z auto's configurations");
    if (comm->rank == 0) {   /* one decision, broadcast below */
        comm_test_slow_start();
        int cap = gpt2_fit_count(x);   /* every configuration: none cut */
        unsigned long long list = (unsigned long long)(cap > 0 ? cap : 1) * sizeof(FitCandidate);
        /* the decision's own buffers, counted in every candidate's peak: the
           probe's (every rank, freed above) and this list (rank 0, freed below) */
        x->decision = probe > list ? probe : list;
        FitCandidate* cs = (FitCandidate*)malloc_or_die((size_t)(cap > 0 ? cap : 1) * sizeof(FitCandidate), "-z auto candidates");
        int n = gpt2_fit_enumerate(x, cs, cap), nallowed = 0;
        for (int i = 0; i < n; i++) nallowed += x->offload_dir_given || cs[i].opt.offload == OFFLOAD_NONE;
        best = gpt2_fit_choose(cs, n, 0, NULL, 0);
        if (best < 0 && x->offload_dir_given) best = gpt2_fit_choose(cs, n, 1, NULL, 0);
        char probe_text[200] = "";
        if (probe) snprintf(probe_text, sizeof(probe_text), "; the probe's buffers %.4g MB per rank", probe / 1e6);
        printf("-z auto: %d configurations on the plan, the budget %.4g GB per rank (%s), links %.3g Gbit/s inside a node, "
               "%.3g across nodes (%s%s), compute %.1f GFLOP/s per rank (measured, the slowest rank's)%s; counted in every peak: "
               "the decision's buffers %.4g MB per rank before the model (the link probe's, the %d candidates' list)\n", nallowed, x->budget / 1e9, bud->source,
               x->inside_Bps / 1.25e8, x->across_Bps / 1.25e8,
               q->link_source ? q->link_source : q->link_inside_gbps > 0 || q->link_across_gbps > 0 ? "--link-gbps" : "measured, the slowest rank's", probe_text,
               x->flops_per_s / 1e9, x->workspace ? "" : "; workspace not calibrated (make builds build/fit/)", x->decision / 1e6, cap);
        gpt2_fit_table(stdout, x, cs, n, best);
        if (best >= 0) {
            chosen = cs[best];
            char fl[600];
            gpt2_fit_flags(x, &chosen, fl, sizeof(fl));
            printf("-z auto: chose %s: %s of the configurations that fit %.4g GB per rank: %.4g GB per rank predicted, "
                   "%.1f ms per step (compute %.1f, communication and I/O %.1f; no overlap assumed)\n", fl,
                   chosen.opt.offload == OFFLOAD_DISK ? "nothing fits without offload; the fastest offloaded one" : "the fastest",
                   x->budget / 1e9, chosen.mem.peak / 1e9, chosen.step_ms, chosen.compute_ms, chosen.comm_ms + chosen.io_ms);
        } else {
            int off = x->offload_dir_given ? -1 : gpt2_fit_choose(cs, n, 1, NULL, 0);
            char hint[700] = "";
            if (off >= 0) {
                char fl[600];
                gpt2_fit_flags(x, &cs[off], fl, sizeof(fl));
                snprintf(hint, sizeof(hint), "; with the optimizer offloaded it would fit: %s (%.4g GB)", fl, cs[off].mem.peak / 1e9);
            }
            set_err(err, ERRLEN, "-z auto: none of the %d configurations fits the budget of %.4g GB per rank (%s): lower -b/-t or the model size, "
                    "or add ranks or memory%s", nallowed, x->budget / 1e9, bud->source,
                    off >= 0 ? hint : x->base.eval_only || x->offload_dir_given ? "" : " (not even with the optimizer offloaded)");
        }
        fflush(stdout);
        free(cs);
    }
    comm_check_all(comm, err);
    comm_solo_end();
    MPI_Request rq;
    MPI_Ibcast(&chosen, (int)sizeof(chosen), MPI_BYTE, 0, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "-z auto's choice (a broadcast from rank 0)");
    d->run = chosen;
}

/* A configuration over the budget: the one message of its refusal (into
   out, n bytes), with its peak and parts, the stage's formula in numbers
   and up to three configurations predicted to fit (without offload first),
   or, when none does, what to change. */
static inline void gpt2_fit_refusal(FitContext* x, const FitRequest* q, const FitBudget* bud, const FitCandidate* mine, char* out, size_t n) {
    int cap = gpt2_fit_count(x);   /* every configuration: none cut */
    FitCandidate* cs = (FitCandidate*)malloc_or_die((size_t)(cap > 0 ? cap : 1) * sizeof(FitCandidate), "fit alternatives");
    int nc = gpt2_fit_enumerate(x, cs, cap);
    char alts[2000];
    int shown = gpt2_fit_alternatives(x, cs, nc, alts, sizeof(alts));
    free(cs);
    char nothing[240];
    snprintf(nothing, sizeof(nothing), "No stage fits %d rank%s at -b %d -t %d%s%s: add ranks or memory, or lower -b (with -d for the same "
             "global batch) or -t", x->N, x->N > 1 ? "s" : "", x->B, x->T, x->base.eval_only ? "" : ", even offloaded",
             x->recompute_given || x->base.eval_only ? "" : " or with -r 3");
    /* the stage's formula in numbers, e.g. "(p+g) Psi + k Psi/N = 4 Psi + 12 Psi/2" */
    int pb = (int)sizeof(floatX), kb = pb == 2 ? 12 : 8;
    char form[200];
    zero_formula_text(form, sizeof(form), mine->opt.zero_stage, pb, pb, kb, mine->G);
    if (mine->opt.eval_only && mine->opt.zero_stage == 3) snprintf(form, sizeof(form), "p Psi/N = %d Psi/%d (-x 0: the params only)", pb, mine->G);
    else if (mine->opt.eval_only) snprintf(form, sizeof(form), "p Psi = %d Psi (-x 0: the params only)", pb);
    if (mine->opt.offload != OFFLOAD_NONE) snprintf(form + strlen(form), sizeof(form) - strlen(form), ", the optimizer's k Psi/N offloaded");
    const FitPeak* m = &mine->mem;
    set_err(out, n, "-e %s (L=%d C=%d, %.4g parameters) at zero_stage %d needs %.4g GB per rank (model states %.4g GB = %s, activations %.4g GB, other %.4g GB); "
            "the budget is %.4g GB per rank (%s). %s%s (--fit-check 0 runs it anyway)",
            q->init, x->cfg->num_layers, x->cfg->channels, (double)gpt2_count_parameters(x->cfg),
            mine->opt.zero_stage, m->peak / 1e9, m->model_states / 1e9, form, m->activations / 1e9,
            (m->peak - m->model_states - m->activations) / 1e9, x->budget / 1e9, bud->source, shown ? "Fits: " : nothing, shown ? alts : "");
}

/* The fit check and -z auto, before anything of the model is allocated
   (train_gpt.cu's one call): this rank's budget (fit_budget, less what the
   node's cgroup holds beyond its ranks; CUDA: the device's free memory),
   agreed over the ranks (the smallest budget, the largest baseline), then
   either -z auto's choice (gpt2_fit_auto, made by rank 0) or the predicted
   peak of the configuration x->base with shard group `G`, whose verdict is
   agreed too (it fits only if it fits on every rank); one over the budget
   is refused with one message on every rank (--fit-check 0 runs it anyway,
   with a warning). Collective. x: filled by the caller except budget and
   the rates. */
static inline void gpt2_fit_decide(Comm* comm, FitContext* x, const FitRequest* q, int G, FitDecision* d) {
    char err[ERRLEN] = "";
    memset(d, 0, sizeof(*d));
    /* what this node's ranks hold now (their cgroup charges it beside the other residents) */
    unsigned long long mine_held = fit_own_unreclaimable(), node_held = mine_held;
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm->rank, MPI_INFO_NULL, &node);
    fit_allreduce(&mine_held, &node_held, MPI_UNSIGNED_LONG_LONG, MPI_SUM, node, "the fit check's sum over the node's ranks");
    MPI_Comm_free(&node);
    FitBudget mine_bud = fit_budget(q->memory_limit, comm->local_size, node_held);
    if (!q->memory_limit) backend_memory_budget(&mine_bud.bytes, mine_bud.source, sizeof(mine_bud.source), comm->local_rank, comm->local_size); /* CUDA: the device's free memory */
    /* one decision for all ranks: the smallest budget (named by its rank and
       that rank's source text: the lowest such rank), the largest baseline */
    FitBudget bud;
    int who = fit_agree_budget(comm, &mine_bud, &bud);
    unsigned long long hi = x->baseline;
    fit_allreduce(&x->baseline, &hi, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, "the fit check's baseline (the largest rank's)");
    x->budget = bud.bytes; x->baseline = hi;
    d->budget = bud.bytes; d->budget_rank = who;
    snprintf(d->budget_source, sizeof(d->budget_source), "%s", bud.source);
    FitCandidate* mine = &d->run;
    mine->opt = x->base; mine->G = G; mine->B = x->B;
    if (q->zero_auto) { gpt2_fit_auto(comm, x, q, &bud, d); return; }
    gpt2_fit_evaluate(x, mine, err, ERRLEN);
    comm_check_all(comm, err);
    int fits = mine->fits, all = fits;
    fit_allreduce(&fits, &all, MPI_INT, MPI_MIN, MPI_COMM_WORLD, "the fit check's verdict (every rank's)");
    mine->fits = all;
    /* --keep-logits not given (a training run): keep the B*T*Vp logits from
       forward to backward when the run with them fits every rank's budget
       (the same numbers bit for bit, without the LM head's second forward
       matmul in backward: 2 C Vp flops per token); else recompute them.
       One verdict for all ranks (the MIN of every rank's; mine->fits is
       agreed above, so every rank takes this branch or none). */
    if (!x->keep_logits_given && !mine->opt.eval_only && !mine->opt.keep_logits && mine->fits) {
        FitCandidate k = *mine;
        k.opt.keep_logits = 1;
        int kf = gpt2_fit_evaluate(x, &k, err, ERRLEN) == 0 && k.fits, kall = kf;
        err[0] = 0;
        fit_allreduce(&kf, &kall, MPI_INT, MPI_MIN, MPI_COMM_WORLD, "the fit check's verdict on keeping the logits (every rank's)");
        d->keep_logits_auto = kall ? 1 : -1;
        d->keep_logits_peak = k.mem.peak;
        if (kall) *mine = k;
    }
    if (mine->fits || !q->fit_check) {
        if (comm->rank == 0 && !mine->fits)
            printf("warning: --fit-check 0: zero_stage %d needs %.4g GB per rank, over the budget of %.4g GB per rank (%s): running anyway\n",
                   mine->opt.zero_stage, mine->mem.peak / 1e9, x->budget / 1e9, bud.source);
        return;
    }
    char refusal[3000] = "";   /* longer than ERRLEN: up to three alternatives with their flags */
    if (comm->rank == 0) gpt2_fit_refusal(x, q, &bud, mine, refusal, sizeof(refusal));
    comm_check_all(comm, comm->rank == 0 ? refusal : "");
}

#endif /* LLMC_GPT_FIT_H */
