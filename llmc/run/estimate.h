/*
 llmc/run/estimate.h: --estimate (the memory table per stage, no data, no
 training) and -e largest's search for the largest model that fits, as
 the run's own fit check predicts it (llmc/gpt_fit.h). For a user sizing a
 run before starting it, and for setup.h's choose_largest.
*/
#ifndef LLMC_RUN_ESTIMATE_H
#define LLMC_RUN_ESTIMATE_H
#include "run.h"

/* ------------------------------------------------------------------------ */
/* The estimator (--estimate): the paper's table, no data, no training      */

/* The full per-rank peak (llmc/gpt_fit.h) of a run of cfg with the
   estimator's -b, -t on N ranks, stage s, accumulation 1, optimizer offloaded
   to disk or not. The baseline is this process's VmRSS now; the data
   loaders are not counted (they depend on the shards: a few MB). */
static int estimate_peak(const Args* a, const GPT2Config* cfg, int from_ckpt, int N, int s, int off, unsigned long long budget,
                         FitCandidate* c, char* err) {
    FitContext x;
    memset(&x, 0, sizeof(x));
    x.cfg = cfg; x.base = model_options(a, 1);
    x.N = N; x.B = a->B; x.T = a->T; x.total_batch = (long)a->B * a->T * N;
    x.from_ckpt = from_ckpt; x.ckpt_in = 3; x.ckpt_out = a->ckpt_version;
    x.baseline = backend_host_counts() ? fit_status_bytes("VmRSS:") : 0;
    char wpath[4200];
    if (!fit_calibrated_workspace(&x.workspace, wpath, sizeof(wpath))) x.workspace = 0;
    x.budget = budget;
    memset(c, 0, sizeof(*c));
    c->opt = x.base; c->opt.zero_stage = s; c->opt.offload = off ? OFFLOAD_DISK : OFFLOAD_NONE;
    c->G = N; c->B = a->B;
    return gpt2_fit_evaluate(&x, c, err, ERRLEN);
}

/* Per stage (and offloaded, stages 1-3): the peak at -n ranks and the
   smallest rank count whose peak fits budget (0: none up to 2^20; the peak
   falls as N grows except for the replicated parts, so a doubling search
   then a bisection). */
static void estimate_peaks(const Args* a, const GPT2Config* cfg, int from_ckpt, unsigned long long budget, double* peak, long long* pmin,
                           double* peak_off, long long* pmin_off, char* err) {
    for (int off = 0; off <= 1; off++)
        for (int s = off; s < 4; s++) {
            FitCandidate c;
            if (estimate_peak(a, cfg, from_ckpt, a->est_ranks, s, off, budget, &c, err)) return;
            (off ? peak_off : peak)[s] = (double)c.mem.peak;
            long long lo = 0, hi = 1, found = 0;   /* lo: known not to fit */
            for (; hi <= (1LL << 20); lo = hi, hi *= 2) {
                if (estimate_peak(a, cfg, from_ckpt, (int)hi, s, off, budget, &c, err)) { err[0] = 0; continue; }
                if (c.fits) { found = 1; break; }
                if (s == 0) break;   /* nothing of stage 0 shrinks with N */
            }
            if (found)
                while (hi - lo > 1) {
                    long long mid = lo + (hi - lo) / 2;
                    if (estimate_peak(a, cfg, from_ckpt, (int)mid, s, off, budget, &c, err) == 0 && c.fits) hi = mid;
                    else { err[0] = 0; lo = mid; }
                }
            (off ? pmin_off : pmin)[s] = found ? hi : 0;
        }
}

/* --estimate -e largest: the largest GPT-2 shape whose full predicted peak
   fits the budget, per stage. The shapes: L = 1..48 blocks and C = 64..1600
   channels in steps of 64 with heads of 64 channels (NH = C/64: GPT-2's
   head size; d12 = GPT-2 124M is L 12, C 768), maxT 1024 and the GPT-2
   vocabulary unless the flags give them; per shape and stage the
   configurations -z auto varies at a fixed stage (--keep-logits 0 and 1,
   -r 0..3, the optimizer offloaded to disk when --offload-optimizer
   disk:DIR is given; a flag given stays fixed) on --ranks ranks at -b, -t,
   with `accum` micro-steps per step (-d / (B*T*ranks): the run's; its
   buffers, e.g. stages 0-1's embedding accumulator and --invariant 1's
   micro-step tree, are in the peak) and the data loaders' host bytes
   `loaders` (the same model of the peak as the run's own fit check).
   "Largest": the most parameters (ties: the smaller peak). Prints, per
   stage, that shape, its peak and flags, the command that trains it, and
   the next size up (the fewest parameters above it) with its smallest
   peak. 0 with *out (the best over the stages) or 1 when nothing fits. */
typedef struct { int L, C, NH, found; FitCandidate c; double params; } LargestShape;
static int estimate_largest_stage(const Args* a, int s, unsigned long long budget, unsigned long long baseline, unsigned long long loaders,
                                  int accum, LargestShape* best, LargestShape* next) {
    memset(best, 0, sizeof(*best)); memset(next, 0, sizeof(*next));
    char err[ERRLEN];
    int maxT = a->max_seq_len > 0 ? a->max_seq_len : 1024, V = a->vocab > 0 ? a->vocab : 50257;
    for (int L = 1; L <= 48; L++)
        for (int C = 64; C <= 1600; C += 64) {
            GPT2Config cfg = {maxT, V, (int)round_up((size_t)V, 128), L, C / 64, C};
            double params = (double)gpt2_count_parameters(&cfg);
            FitContext x;
            memset(&x, 0, sizeof(x));
            x.cfg = &cfg; x.base = model_options(a, accum); x.base.zero_stage = s;
            x.N = a->est_ranks; x.B = a->B; x.T = a->T > maxT ? maxT : a->T; x.total_batch = (long)x.B * x.T * x.N * accum;
            x.ckpt_in = 3; x.ckpt_out = a->ckpt_version;
            x.baseline = baseline ? baseline : backend_host_counts() ? fit_status_bytes("VmRSS:") : 0;
            x.loaders = loaders;
            char wpath[4200];
            if (!fit_calibrated_workspace(&x.workspace, wpath, sizeof(wpath))) x.workspace = 0;
            x.budget = budget;
            FitCandidate c, pick;
            int fits = 0;
            for (int kl = 0; kl <= 1; kl++) {
                if (a->keep_logits_given && kl != a->keep_logits) continue;
                for (int rc = 0; rc <= 3; rc++) {
                    if (a->recompute_given && rc != a->recompute) continue;
                    for (int of = 0; of <= (s >= 1 && a->offload == OFFLOAD_DISK ? 1 : 0); of++) {
                        memset(&c, 0, sizeof(c));
                        c.opt = x.base; c.opt.keep_logits = kl; c.opt.recompute = rc; c.opt.offload = of ? OFFLOAD_DISK : OFFLOAD_NONE;
                        c.G = x.N; c.B = x.B;
                        if (gpt2_fit_evaluate(&x, &c, err, sizeof(err))) continue;
                        /* of those that fit: no offload, less recomputation, then the smaller peak */
                        if (c.fits && (!fits || (c.opt.offload != pick.opt.offload ? c.opt.offload < pick.opt.offload
                                                 : c.opt.recompute != pick.opt.recompute ? c.opt.recompute < pick.opt.recompute
                                                 : c.mem.peak < pick.mem.peak))) { pick = c; fits = 1; }
                    }
                }
            }
            if (fits && (!best->found || params > best->params || (params == best->params && pick.mem.peak < best->c.mem.peak))) {
                best->L = L; best->C = C; best->NH = C / 64; best->found = 1; best->c = pick; best->params = params;
            }
        }
    /* the next size up: the fewest parameters above the best (none of them fits) */
    if (!best->found) return 1;
    for (int L = 1; L <= 48; L++)
        for (int C = 64; C <= 1600; C += 64) {
            GPT2Config cfg = {maxT, V, (int)round_up((size_t)V, 128), L, C / 64, C};
            double params = (double)gpt2_count_parameters(&cfg);
            if (params <= best->params || (next->found && params >= next->params)) continue;
            next->L = L; next->C = C; next->NH = C / 64; next->found = 1; next->params = params;
        }
    return 0;
}

static void largest_flags(const Args* a, const LargestShape* b, int s, char* out, size_t n) {
    const FitCandidate* c = &b->c;
    size_t k = (size_t)snprintf(out, n, "-e d%d --layers %d --heads %d --channels %d -b %d -t %d -z %d", b->L, b->L, b->NH, b->C, a->B, a->T, s);
    if (a->total_batch_given && k < n) k += (size_t)snprintf(out + k, n - k, " -d %ld", a->total_batch);
    if (a->invariant && k < n) k += (size_t)snprintf(out + k, n - k, " --invariant 1");
    if (!a->keep_logits_given && k < n) k += (size_t)snprintf(out + k, n - k, " --keep-logits %d", c->opt.keep_logits);
    if (!a->recompute_given && k < n) k += (size_t)snprintf(out + k, n - k, " -r %d", c->opt.recompute);
    if (c->opt.offload == OFFLOAD_DISK && k < n) snprintf(out + k, n - k, " --offload-optimizer disk:%s", a->offload_dir ? a->offload_dir : "DIR");
}

/* --estimate -e largest: the host bytes the named run's data loaders will
   hold (dataloader_host_bytes of -i's split when it trains, -j's when it
   evaluates, at -b, -t on --ranks ranks), as its fit check counts them;
   0 for a split whose files are not here (said in `src`). */
static unsigned long long estimate_loader_bytes(const Args* a, char* src, size_t n) {
    unsigned long long b = 0;
    char e[ERRLEN];
    size_t k = (size_t)snprintf(src, n, "the data loaders");
    for (int v = 0; v < 2; v++) {
        if (v == 0 ? a->max_steps == 0 && !a->resume : a->val_every <= 0) continue;
        DataLoader dl;
        memset(&dl, 0, sizeof(dl));
        const char* pat = v ? a->val_pattern : a->train_pattern;
        int vocab = a->vocab > 0 ? a->vocab : 50257;
        if (dataloader_init(&dl, pat, a->B, a->T, 0, v ? 1 : a->est_ranks, vocab, e, sizeof(e)) == 0) {
            if (!v) dataloader_set_shuffle(&dl, a->shuffle, a->seed);
            unsigned long long h = dataloader_host_bytes(&dl);
            b += h;
            if (k < n) k += (size_t)snprintf(src + k, n - k, " %s %.3g MB", v ? "-j" : "-i", h / 1e6);
            dataloader_free(&dl);
        } else if (k < n) k += (size_t)snprintf(src + k, n - k, " %s not counted (%.80s: no shards here)", v ? "-j" : "-i", pat);
    }
    return b;
}

static int run_estimate_largest(Args* a, Comm* comm) {
    char err[ERRLEN] = "";
    if (a->est_params > 0) set_err(err, ERRLEN, "--estimate -e largest searches the model: --params has no place beside it");
    /* the micro-steps of the run it names (-d / (B*T*ranks)), as the run's own fit check counts them */
    long tpm = (long)a->B * a->T * a->est_ranks;
    if (!err[0] && a->total_batch_given && a->total_batch % tpm != 0)
        set_err(err, ERRLEN, "-d %ld: total batch must be a multiple of B*T*ranks = %d*%d*%d = %ld tokens (--ranks %d)", a->total_batch, a->B, a->T,
                a->est_ranks, tpm, a->est_ranks);
    int accum = a->total_batch_given && !err[0] ? (int)(a->total_batch / tpm) : 1;
    comm_check_all(comm, err);
    char lsrc[300];
    unsigned long long loaders = estimate_loader_bytes(a, lsrc, sizeof(lsrc));
    backend_init(comm);   /* the baseline a run measures includes the backend's libraries */
    FitBudget bud;
    memset(&bud, 0, sizeof(bud));
    if (a->memory_limit) { bud.bytes = a->memory_limit; snprintf(bud.source, sizeof(bud.source), "--memory-limit: %.4g GB per rank", a->memory_limit / 1e9); }
    else bud = fit_budget(0, comm->local_size, fit_own_unreclaimable());
    if (comm->rank == 0) {
        printf("largest model per stage: GPT-2 shapes (L = 1..48 blocks, C = 64..1600 channels in steps of 64, heads of 64 channels, "
               "maxT %d, vocabulary %d) on %d rank%s, B=%d T=%d, %d micro-step%s per step%s, in %.4g GB per rank (%s); the full predicted peak of a run of this build "
               "(%s: the model of its own fit check, %s), --keep-logits%s, -r%s%s\n", a->max_seq_len > 0 ? a->max_seq_len : 1024, a->vocab > 0 ? a->vocab : 50257,
               a->est_ranks, a->est_ranks > 1 ? "s" : "", a->B, a->T, accum, accum > 1 ? "s" : "", a->invariant ? ", --invariant 1" : "",
               bud.bytes / 1e9, bud.source, PROGRAM_PATH, lsrc,
               a->keep_logits_given ? " as given" : " 0 and 1", a->recompute_given ? " as given" : " 0..3",
               a->offload == OFFLOAD_DISK ? ", the optimizer offloaded to disk as a last resort" : "");
        for (int s = 0; s < 4; s++) {
            LargestShape b, nx;
            if (estimate_largest_stage(a, s, bud.bytes, 0, loaders, accum, &b, &nx)) { printf("  -z %d: nothing fits (not even L=1 C=64)\n", s); continue; }
            char fl[400];
            largest_flags(a, &b, s, fl, sizeof(fl));
            printf("  -z %d: L=%d C=%d NH=%d, %.4g parameters, peak %.4g GB: %s%s %s\n", s, b.L, b.C, b.NH, b.params, b.c.mem.peak / 1e9,
                   a->est_ranks > 1 ? "mpirun -np N " : "", PROGRAM_PATH, fl);
            if (nx.found) printf("        next size up: L=%d C=%d NH=%d, %.4g parameters: over the budget in every configuration\n", nx.L, nx.C, nx.NH, nx.params);
        }
        if (a->est_ranks > 1) printf("  (N = %d)\n", a->est_ranks);
    }
    backend_finalize(comm);
    comm_finalize(comm);
    return 0;
}

static int run_estimate(Args* ap, Comm* comm) {
    Args a = *ap;
    char err[ERRLEN] = "";
    if (!strcmp(a.init, "largest")) return run_estimate_largest(&a, comm);
    GPT2Config cfg;
    int from_ckpt = 0;
    double psi = a.est_params;
    int known = psi <= 0; /* no --params: the model of -e (a checkpoint or dN) */
    if (known) {
        resolve_config(&a, &cfg, &from_ckpt, err, ERRLEN);
        comm_check_all(comm, err);
        psi = (double)gpt2_count_parameters(&cfg);
    }
    int bf16 = !strcmp(a.est_dtype, "bf16"), pb = bf16 ? 2 : 4;
    if (a.est_gpu_mem <= 0 && a.memory_limit) a.est_gpu_mem = (double)a.memory_limit;   /* --memory-limit: the same budget */
    ZeroEstimateInfo info = {NULL, NULL, -1.0, NULL, NULL, NULL, NULL, NULL};
    double peak[4] = {0}, peak_off[4] = {0};
    long long pmin[4] = {0}, pmin_off[4] = {0};
    double traffic[4];
    char tsrc[512], asrc[512];
    if (known) {
        /* the traffic a run of this model would count: the shard plan a
           run builds (gpt2_plan_init), for each stage; the embedding-row
           all-gather depends on B x T */
        if (a.T_given && a.T > cfg.max_seq_len) set_err(err, ERRLEN, "-t %d: sequence length must be in 1..%d (the model's max_seq_len)", a.T, cfg.max_seq_len);
        comm_check_all(comm, err);
        if (!a.T_given && a.T > cfg.max_seq_len) a.T = cfg.max_seq_len;
        GPT2Options mopt = model_options(&a, 1);
        GPT2Layout lay;
        for (int s = 0; s < 4 && !err[0]; s++) {
            ZeroPlan P;
            mopt.zero_stage = s;
            if (gpt2_plan_init(&P, &lay, &cfg, &mopt, a.est_ranks, 0, 1, pb, a.B, a.T, err, ERRLEN)) break;
            traffic[s] = zero_plan_traffic_psi(&P);
            zero_plan_free(&P);
        }
        comm_check_all(comm, err);
        snprintf(tsrc, sizeof(tsrc), "-e %s (L=%d NH=%d C=%d Vp=%d) on %d rank%s, B=%d T=%d per rank%s, 1 micro-step per step, "
                 "reshard_after_forward %d, reshard_embedding %d",
                 a.init, cfg.num_layers, cfg.num_heads, cfg.channels, cfg.padded_vocab_size, a.est_ranks, a.est_ranks > 1 ? "s" : "",
                 a.B, a.T, a.B_given && a.T_given ? "" : " (the -b/-t defaults)", a.reshard_after_forward, a.reshard_embedding);
        if (a.quant_weights || a.quant_grads || a.secondary) {   /* ZeRO++ (stage 3's row): bytes in units of the element bytes x Psi */
            size_t l = strlen(tsrc);
            snprintf(tsrc + l, sizeof(tsrc) - l, "; stage 3 with ZeRO++:%s%s%s%s (quantized bytes in units of p or g bytes x Psi)",
                     a.quant_weights ? " qwZ int8" : "", a.quant_grads == 8 ? " qgZ int8" : a.quant_grads == 4 ? " qgZ int4" : "",
                     a.secondary ? " hpZ" : "", a.quant_grads || a.secondary == -1 ? " over --node-size / the ranks per node" : "");
        }
        info.traffic_psi = traffic; info.traffic_source = tsrc;
        if (a.B_given && a.T_given) {
            mopt.zero_stage = a.zero_stage;
            info.activation_bytes = (double)(gpt2_activation_bytes(&cfg, &lay, &mopt, a.B, a.T) + gpt2_recompute_bytes(&cfg, &mopt, a.B, a.T));
            snprintf(asrc, sizeof(asrc), "-e %s, B=%d, T=%d (%d-byte activations of this build, as its memory ledger counts them; %s)",
                     a.init, a.B, a.T, (int)sizeof(floatX),
                     a.keep_logits ? "the B*T*Vp logits kept, --keep-logits 1"
                     : a.keep_logits_given ? "one chunk of logits, --keep-logits 0"
                                           : "one chunk of logits, as --keep-logits 0: a run keeps all B*T*Vp where they fit its budget");
            info.activation_source = asrc;
            if (a.est_gpu_mem > 0 && bf16 == (sizeof(floatX) == 2)) {
                backend_init(comm);   /* the baseline a run measures includes the backend's libraries */
                estimate_peaks(&a, &cfg, from_ckpt, (unsigned long long)a.est_gpu_mem, peak, pmin, peak_off, pmin_off, err);
                comm_check_all(comm, err);
                info.peak_bytes = peak; info.peak_min_ranks = pmin; info.peak_bytes_off = peak_off; info.peak_min_ranks_off = pmin_off;
            }
        }
    }
    if (comm->rank == 0) zero_estimate_print(stdout, psi, a.est_ranks, pb, pb, bf16 ? 12 : 8, a.est_gpu_mem, &info);
    if (comm->rank == 0 && info.peak_bytes)
        printf("fit check: baseline %.4g GB (this process's resident memory before a model; a run measures its own), data loaders not "
               "counted (a few MB, they depend on the shards)\n", (backend_host_counts() ? fit_status_bytes("VmRSS:") : 0) / 1e9);
    else if (comm->rank == 0 && known && a.est_gpu_mem > 0 && a.B_given && a.T_given)
        printf("note: --dtype %s is not this build's precision: the full per-rank peak needs %s\n", a.est_dtype,
               sizeof(floatX) == 2 ? "train_gpt_cpu (fp32)" : "train_gpt_cpu_bf16");
    if (info.peak_bytes) backend_finalize(comm);
    if (comm->rank == 0 && a.shard_group > 0)
        printf("note: --shard-group %d is not modelled here: the table shards over all %d ranks\n", a.shard_group, a.est_ranks);
    comm_finalize(comm);
    return 0;
}

#endif /* LLMC_RUN_ESTIMATE_H */
