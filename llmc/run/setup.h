/*
 llmc/run/setup.h: the run's set-up phases in their order (setup_run):
 flags checked, resume, data, batch, node size, the fit check or -z auto
 (and -e largest), --invariant 1, shard groups and backend, the model,
 runs.txt. Every error ends every rank with one message (comm_check_all).
 For a reader of what happens before the first step.
*/
#ifndef LLMC_RUN_SETUP_H
#define LLMC_RUN_SETUP_H
#include "run.h"
#include "estimate.h"
#include "kernel_paths.h"
#include "runs_txt.h"

/* The train and val loaders for micro-batch B (again when -z auto changes
   B), and the tokenizer. Errors end every rank with one line. */
static void setup_data(Run* r, int B) {
    const Args* a = &r->a;
    Comm* comm = r->comm;
    char err[ERRLEN] = "";
    if (r->have_train) dataloader_free(&r->train);
    if (r->have_val) dataloader_free(&r->val);
    memset(&r->train, 0, sizeof(r->train));
    r->have_train = a->max_steps > 0 || a->resume; /* -x 0: no training, no train data needed */
    r->have_val = 0;
    r->val_seqs = 0; r->val_capped = 0;
    /* shards switch per optimizer step of -d / T sequences (dataloader_set_step):
       the data order is the same at every rank count and micro-batch with this -d */
    if (r->have_train && dataloader_init(&r->train, a->train_pattern, B, a->T, comm->rank, r->N, r->cfg.vocab_size, err, ERRLEN) == 0) {
        dataloader_set_shuffle(&r->train, a->shuffle, a->seed);
        if (dataloader_set_step(&r->train, (size_t)(a->total_batch / a->T), err, ERRLEN) != 0) dataloader_free(&r->train);
    }
    comm_check_all(comm, err);
    if (a->val_every > 0) {
        /* every rank reads the val split whole, as one rank would: an
           evaluation is the first -m sequences in file order, dealt to
           the ranks (evaluate), the same tokens at every rank count; a split
           with fewer distinct sequences is read once, none counted twice */
        dataloader_init(&r->val, a->val_pattern, B, a->T, 0, 1, r->cfg.vocab_size, err, ERRLEN);
        comm_check_all(comm, err);
        r->have_val = 1;
        size_t distinct = dataloader_num_seqs(&r->val);
        r->val_seqs = (long)a->val_steps;
        if ((size_t)r->val_seqs > distinct) { r->val_seqs = (long)distinct; r->val_capped = 1; }
    }
    if (a->sample_every > 0 && !r->have_tok) {
        if (tokenizer_init(&r->tok, a->tokenizer_path, err, ERRLEN) == 0) r->have_tok = 1;
        else if (access(a->tokenizer_path, F_OK) != 0 && !strcmp(a->tokenizer_path, "data/gpt2_tokenizer.bin")) {
            if (comm->rank == 0) printf("note: no tokenizer at %s, samples print token ids\n", a->tokenizer_path);
            err[0] = 0;
        }
        comm_check_all(comm, err);
    }
}


static int cmp_int(const void* p, const void* q) { int a = *(const int*)p, b = *(const int*)q; return (a > b) - (a < b); }

/* The fit check and -z auto (llmc/gpt_fit.h: gpt2_fit_decide), before
   anything of the model is allocated; -z auto's choice becomes the run's
   flags (and the data loaders again when it changes -b). */
static void fit_or_choose(Run* r) {
    Args* a = &r->a;
    Comm* comm = r->comm;
    FitContext x;
    memset(&x, 0, sizeof(x));
    x.cfg = &r->cfg; x.base = model_options(a, r->accum);
    int* node_of = (int*)malloc_or_die((size_t)r->N * sizeof(int), "placement");
    comm_node_indices(node_of);
    qsort(node_of, (size_t)r->N, sizeof(int), cmp_int);   /* node-major order: the shard groups are its runs (comm_group_members) */
    x.N = r->N; x.node_of = node_of;
    x.B = a->B; x.T = a->T; x.total_batch = a->total_batch; x.batch_given = a->total_batch_given;
    x.B_given = a->B_given; x.keep_logits_given = a->keep_logits_given; x.reshard_emb_given = a->reshard_emb_given;
    x.shard_group = a->shard_group > 0 ? a->shard_group : 0;
    x.offload_dir_given = a->offload == OFFLOAD_DISK;
    x.recompute_given = a->recompute_given;
    x.offload_dir = a->offload == OFFLOAD_DISK ? a->offload_dir : NULL;
    x.from_ckpt = r->from_ckpt; x.ckpt_in = r->ckpt_version_in; x.ckpt_out = a->ckpt_version;
    x.baseline = backend_host_counts() ? fit_status_bytes("VmRSS:") : 0;
    char wpath[4200];
    if (!fit_calibrated_workspace(&x.workspace, wpath, sizeof(wpath))) x.workspace = 0;
    x.loaders = backend_host_counts() ? dataloader_host_bytes(&r->train) * (r->have_train ? 1 : 0) +
                                        dataloader_host_bytes(&r->val) * (r->have_val ? 1 : 0) : 0;
    FitRequest q = {a->memory_limit, a->zero_auto, a->fit_check, a->link_inside_gbps, a->link_across_gbps, a->init,
                    r->links_probed ? "measured by -e largest's probe, the slowest rank's" : NULL};
    FitDecision d;
    gpt2_fit_decide(comm, &x, &q, a->shard_group > 0 ? a->shard_group : r->N, &d);
    free(node_of);
    r->fit = d.run;
    r->budget = d.budget;
    snprintf(r->budget_source, sizeof(r->budget_source), "%s", d.budget_source);
    r->keep_logits_auto = d.keep_logits_auto; r->keep_logits_peak = d.keep_logits_peak;
    if (d.keep_logits_auto) a->keep_logits = d.run.opt.keep_logits;
    if (!a->zero_auto) return;
    const FitCandidate* c = &d.run;
    a->zero_stage = c->opt.zero_stage; a->shard_group = c->G; a->reshard_embedding = c->opt.reshard_embedding;
    a->keep_logits = c->opt.keep_logits; a->B = c->B; a->recompute = c->opt.recompute;
    if (c->opt.offload == OFFLOAD_NONE) a->offload = OFFLOAD_NONE;
    r->tokens_per_micro = (long)a->B * a->T * r->N;
    r->accum = (int)(a->total_batch / r->tokens_per_micro);
    if (a->B != x.B) setup_data(r, a->B);
}

/* The global batch and the micro-steps per optimizer step (-d, or B*T*N). */
static void setup_batch(Run* r) {
    Args* a = &r->a;
    char err[ERRLEN] = "";
    int N = r->N;
    r->tokens_per_micro = (long)a->B * a->T * N;
    if (a->total_batch < 0) a->total_batch = r->tokens_per_micro;
    if (a->total_batch % r->tokens_per_micro != 0)
        set_err(err, ERRLEN, "-d %ld: total batch must be a multiple of B*T*ranks = %d*%d*%d = %ld tokens", a->total_batch, a->B, a->T, N, r->tokens_per_micro);
    if (!err[0] && a->total_batch / r->tokens_per_micro > (1L << 20))
        set_err(err, ERRLEN, "-d %ld: grad accumulation of %ld micro-steps is too large (at most %ld)", a->total_batch, a->total_batch / r->tokens_per_micro, 1L << 20);
    comm_check_all(r->comm, err);
    r->accum = (int)(a->total_batch / r->tokens_per_micro);
}

/* ZeRO++'s ranks per node (--node-size, or read off the hosts' names in
   any placement: comm_group_node_layout) and hpZ's `node` resolved to a
   group size, checked against the shard group. Every rank of the job
   decides alike from the same table of node names. */
static void setup_node_size(Run* r) {
    Args* a = &r->a;
    Comm* comm = r->comm;
    char err[ERRLEN] = "", nodes[1024] = "";
    int N = r->N;
    int Gs = a->shard_group > 0 ? a->shard_group : N, uses_node = a->secondary == -1 || a->quant_grads;
    if (uses_node && a->node_size == 0) {   /* the ranks of the shard group on each node, wherever the launcher put them */
        a->node_size = comm_group_node_layout(comm, Gs, nodes, sizeof(nodes));
        snprintf(r->group_nodes_text, sizeof(r->group_nodes_text), "%s", nodes);
        if (!a->node_size && a->secondary == -1)
            set_err(err, ERRLEN, "--secondary-shard node: the nodes hold unequal numbers of the shard group's ranks (%s); hpZ keeps one "
                    "secondary shard per node, split equally among its ranks: place equal numbers of ranks on each node, or give --secondary-shard K "
                    "(K consecutive ranks, any node)", nodes);
        else if (!a->node_size) {   /* qgZ alone: one hop over the group */
            a->node_size = 1;
            if (comm->rank == 0)
                fprintf(stderr, "warning: --quantize-grads: the nodes hold unequal numbers of the shard group's ranks (%s): its reduce-scatter "
                        "runs as one hop over the whole shard group (no node hop)\n", nodes);
        }
    }
    comm_check_all(comm, err);
    if (uses_node && a->node_size > 0 && Gs % a->node_size)
        set_err(err, ERRLEN, "--node-size %d: must divide the %d ranks of the shard group", a->node_size, Gs);
    if (!err[0] && a->secondary == -1) {   /* --secondary-shard node */
        if (a->node_size == 1)
            set_err(err, ERRLEN, "--secondary-shard node: every node holds one rank of the shard group%s%s%s; there are no ranks to share a secondary shard",
                    nodes[0] ? " (" : "", nodes, nodes[0] ? ")" : "");
        else if (a->node_size >= Gs)
            set_err(err, ERRLEN, "--secondary-shard node: all %d ranks of the shard group are on one node (%s%s); a secondary group must be smaller "
                    "than the shard group: give --secondary-shard K or --node-size L", Gs, a->node_size_given ? "--node-size" : "from the hosts' names: ",
                    a->node_size_given ? "" : nodes);
        a->secondary = a->node_size;
        r->secondary_by_node = 1;
    }
    if (comm->rank == 0 && a->node_size_given && !uses_node)
        fprintf(stderr, "warning: --node-size %d has no effect without --secondary-shard node or --quantize-grads\n", a->node_size);
    comm_check_all(comm, err);
}

/* The communicators of the configuration decided (HSDP's groups, hpZ's,
   qgZ's), then the backend (before it starts its streams / thread), and
   the warnings for flags that have no effect in it (rank 0, once). */
static void setup_groups_backend(Run* r) {
    Args* a = &r->a;
    Comm* comm = r->comm;
    int G = a->shard_group > 0 ? a->shard_group : comm->world_size;
    if (G != comm->world_size) comm_set_groups(comm, G);
    if (a->secondary > 1) comm_set_secondary(comm, a->secondary, r->secondary_by_node);
    if (a->quant_grads) comm_set_qg_groups(comm, a->node_size);
    comm->overlap = a->overlap;
    backend_init(comm); /* GPU + NCCL (CUDA build); -h and --estimate need no device */
    if (comm->rank != 0) return;
    if (comm->group_nodes && (r->secondary_by_node || (a->quant_grads && comm->group_size > 1)))
        printf("ZeRO++ nodes: %s (of rank 0's shard group, from the hosts' names:%s%s)\n", r->group_nodes_text,
               r->secondary_by_node ? " hpZ's secondary groups" : "", a->quant_grads ? (r->secondary_by_node ? ", qgZ's first hop" : " qgZ's first hop") : "");
    if (a->zero_stage < 3) { /* stage-3 flags do nothing at stages 0-2: say so, once */
        if (a->reshard_given) fprintf(stderr, "warning: --reshard-after-forward %d has no effect at zero_stage %d (stage 3 only)\n", a->reshard_after_forward, a->zero_stage);
        if (a->prefetch_given) fprintf(stderr, "warning: --prefetch %d has no effect at zero_stage %d (stage 3 only)\n", a->prefetch, a->zero_stage);
        if (a->reshard_emb_given && !a->zero_auto) fprintf(stderr, "warning: --reshard-embedding %d has no effect at zero_stage %d (stage 3 only)\n", a->reshard_embedding, a->zero_stage);
    }
    if (a->quant_weights && comm->group_size == 1)
        fprintf(stderr, "warning: --quantize-weights int8 has no effect in a shard group of one rank (nothing is all-gathered)\n");
    if (a->quant_grads && comm->group_size == 1)
        fprintf(stderr, "warning: --quantize-grads int%d has no effect in a shard group of one rank (nothing is reduced)\n", a->quant_grads);
    if (a->quant_grads_block_given && !a->quant_grads)
        fprintf(stderr, "warning: --quantize-grads-block %d has no effect without --quantize-grads\n", a->quant_grads_block);
    if (a->quant_block_given && !a->quant_weights)
        fprintf(stderr, "warning: --quantize-weights-block %d has no effect without --quantize-weights int8\n", a->quant_weights_block);
}

/* The model: plan, engine and activations through the ledger (gpt2_init),
   the disk offload's scratch files, then its parameters (checkpoint or
   random init). */
static void setup_model(Run* r) {
    Args* a = &r->a;
    Comm* comm = r->comm;
    char err[ERRLEN] = "";
    GPT2Options mopt = model_options(a, r->accum);
    if (gpt2_init(&r->model, &r->cfg, comm, &mopt, a->B, a->T, err, ERRLEN)) {
        size_t l = strlen(err);
        snprintf(err + l, ERRLEN - l, " [-e %s]", a->init);
    }
    comm_check_all(comm, err);
    if (comm->rank == 0 && r->model.plan.secondary > 1 && r->model.plan.secondary_elements == 0)
        fprintf(stderr, "warning: --secondary-shard %d has no effect: no unit is all-gathered more than once per step "
                "(--reshard-after-forward 0, --reshard-embedding 0 and one micro-step keep every unit)\n", r->model.plan.secondary);
    zero_offload_open(&r->model.engine, a->offload_dir); /* disk: the scratch files, or one error before any step */
    if (r->from_ckpt) gpt2_load_checkpoint(&r->model, a->init, err, ERRLEN);
    else gpt2_init_random(&r->model, a->seed);
    comm_check_all(comm, err);
}


/* -y 1 when -o already holds a checkpoint: the run continues from it
   (weights, Adam state, data position), so the model is that checkpoint.
   -e FILE would be ignored: refused, saying what to do. Without -e the
   model's sizes are read from the checkpoint (a->init names it); a
   descriptor -e dN must match it (state_resume says which fields do not).
   With no checkpoint there yet, -y 1 starts fresh from -e as without it
   (a requeued job's first start). Collective: rank 0 looks, every rank
   learns the step. */
static void resume_init(Run* r) {
    Args* a = &r->a;
    Comm* comm = r->comm;
    char err[ERRLEN] = "";
    if (!a->resume || !a->output_dir) return;
    long step = -1;
    struct stat st;
    if (comm->rank == 0 && stat(a->output_dir, &st) == 0 && S_ISDIR(st.st_mode)) state_find_latest(a->output_dir, &step, err, ERRLEN);
    comm_check_all(comm, err);
    MPI_Request rq;
    MPI_Ibcast(&step, 1, MPI_LONG, 0, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "resume: the step broadcast");
    if (step < 0) return;
    snprintf(r->resume_model, sizeof(r->resume_model), "%s/model_%08ld.bin", a->output_dir, step);
    GPT2Config c;
    int bad = 0;
    int descriptor = gpt2_config_descriptor(a->init, &c, &bad, err, ERRLEN);
    err[0] = 0;   /* a bad descriptor is resolve_config's to report */
    if (a->init_given && !descriptor)
        set_err(err, ERRLEN, "-y 1 -e %s: -o %s holds the checkpoint %s, which -y 1 continues from (its weights, Adam state and data "
                "position), so -e would be ignored: leave out -e to resume it, or, to start a new run from %s, use another -o or "
                "leave out -y 1", a->init, a->output_dir, r->resume_model, a->init);
    comm_check_all(comm, err);
    if (!a->init_given) a->init = r->resume_model;
}

/* -e largest in a run: the largest GPT-2 shape (as --estimate -e largest)
   whose peak fits the agreed budget at the run's stage, or, with -z auto,
   at any stage; chosen by rank 0 with the agreed budget and baseline and
   the data loaders' buffers, broadcast, and set as -e d1 --layers L
   --heads NH --channels C (r->cfg resolved again). At a fixed stage the
   search's --keep-logits and -r become the run's where not given; -z auto
   then chooses them itself. Collective. */
static void choose_largest(Run* r) {
    Args* a = &r->a;
    Comm* comm = r->comm;
    char err[ERRLEN] = "";
    unsigned long long mine_held = fit_own_unreclaimable(), node_held = mine_held;
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm->rank, MPI_INFO_NULL, &node);
    fit_allreduce(&mine_held, &node_held, MPI_UNSIGNED_LONG_LONG, MPI_SUM, node, "-e largest: the sum over the node's ranks");
    MPI_Comm_free(&node);
    FitBudget mb = fit_budget(a->memory_limit, comm->local_size, node_held), bud;
    if (!a->memory_limit) backend_memory_budget(&mb.bytes, mb.source, sizeof(mb.source), comm->local_rank, comm->local_size);
    fit_agree_budget(comm, &mb, &bud);
    if (a->zero_auto) (void)backend_matmul_flops();   /* -z auto's compute-rate measurement leaves the libraries' matmul state resident: the same baseline */
    if (a->zero_auto && a->link_inside_gbps <= 0) {
        /* -z auto's link probe leaves MPI's buffers for its communicators
           resident (gpt2_fit_auto measures its baseline after it): probe
           here too, so that the shape is searched from that baseline */
        double in_Bps, across_Bps;
        unsigned long long probe;
        fit_measure_links(comm, &in_Bps, &across_Bps, &probe);
        malloc_trim(0);
        /* ... and once: -z auto takes these rates (a second probe would
           grow the baseline again, past the shape just searched) */
        a->link_inside_gbps = (float)(in_Bps / 1.25e8); a->link_across_gbps = (float)(across_Bps / 1.25e8);
        r->links_probed = 1;
    }
    unsigned long long base = backend_host_counts() ? fit_status_bytes("VmRSS:") : 0, hi = base;
    fit_allreduce(&base, &hi, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, "-e largest: the baseline (the largest rank's)");
    unsigned long long loaders = backend_host_counts() ? dataloader_host_bytes(&r->train) * (r->have_train ? 1 : 0) +
                                                         dataloader_host_bytes(&r->val) * (r->have_val ? 1 : 0) : 0;
    int pickv[5] = {0, 0, 0, 0, 0};   /* L, C, stage, keep_logits, recompute */
    comm_solo_begin("searching -e largest's shape");   /* rank 0 alone: the others wait under the solo bound, not the collective timeout */
    if (comm->rank == 0) {
        Args s = *a;
        s.est_ranks = r->N;
        LargestShape best, nx, b, n2;
        memset(&best, 0, sizeof(best)); memset(&nx, 0, sizeof(nx));
        int bs = -1;
        for (int st = 0; st < 4; st++) {
            if (!a->zero_auto && st != a->zero_stage) continue;
            if (estimate_largest_stage(&s, st, bud.bytes, hi, loaders, r->accum, &b, &n2)) continue;   /* the run's micro-steps (-d) */
            if (!best.found || b.params > best.params) { best = b; nx = n2; bs = st; }
        }
        if (bs < 0) set_err(err, ERRLEN, "-e largest: no GPT-2 shape fits %.4g GB per rank (%s) at -b %d -t %d%s, not even L=1 C=64", bud.bytes / 1e9,
                            bud.source, a->B, a->T, a->zero_auto ? "" : " at this -z");
        else {
            pickv[0] = best.L; pickv[1] = best.C; pickv[2] = bs; pickv[3] = best.c.opt.keep_logits; pickv[4] = best.c.opt.recompute;
            printf("-e largest: L=%d C=%d NH=%d (%.4g parameters), the largest GPT-2 shape whose predicted peak fits %.4g GB per rank (%s): "
                   "%.4g GB at -z %d%s; the next size up, L=%d C=%d NH=%d (%.4g parameters), fits in no configuration\n", best.L, best.C, best.C / 64,
                   best.params, bud.bytes / 1e9, bud.source, best.c.mem.peak / 1e9, bs, a->zero_auto ? " (-z auto then chooses the fastest configuration of it)" : "",
                   nx.L, nx.C, nx.NH, nx.params);
        }
        fflush(stdout);
    }
    comm_check_all(comm, err);
    comm_solo_end();
    malloc_trim(0);   /* the search's freed plans back to the system: the fit check's baseline is the one searched from */
    MPI_Request rq;
    MPI_Ibcast(pickv, 5, MPI_INT, 0, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "-e largest's shape (a broadcast from rank 0)");
    a->layers = pickv[0]; a->channels = pickv[1]; a->heads = pickv[1] / 64;
    if (!a->zero_auto) {
        if (!a->keep_logits_given) { a->keep_logits = pickv[3]; a->keep_logits_given = 1; }
        if (!a->recompute_given) { a->recompute = pickv[4]; a->recompute_given = 1; }
    }
    resolve_config(a, &r->cfg, &r->from_ckpt, err, ERRLEN);
    comm_check_all(comm, err);
}

/* Setup: flags and their checks, the model's config, the data, the fit
   check (or -z auto's choice), shard groups, the backend, the model (plan,
   engine, activations: every byte through the ledger), its parameters
   (checkpoint or init), log, resume. Every error ends every rank with one
   message (comm_check_all). */
static int is_pow2(long x) { return x > 0 && (x & (x - 1)) == 0; }

/* --invariant 1 (docs/design.md section 13): the layouts it holds for, or
   one line saying why not, on every rank; then the kernels' and the
   collectives' invariant sums are switched on. */
static void setup_invariant(Run* r) {
    const Args* a = &r->a;
    char err[ERRLEN] = "";
    if (!a->invariant) return;
    const char* why = NULL;
    if (!why && !is_pow2(r->N)) why = "the rank count must be a power of two (the cross-rank sums are a complete binary tree)";
    else if (!why && !is_pow2(a->B)) why = "-b must be a power of two (each rank's sequences are a subtree of the global tree)";
    else if (!why && !is_pow2(r->accum)) why = "the micro-steps per step (-d / (B*T*ranks)) must be a power of two";
    else if (!why && a->shard_group > 0 && a->shard_group != r->N)
        why = "HSDP sums across the replica groups in an order the tree does not have yet (the embedding part of wte's gradient is added "
              "to each group's shard before the replica all-reduce): run without --shard-group";
    char sg[64] = "";
    if (a->shard_group > 0 && a->shard_group != r->N)
        snprintf(sg, sizeof(sg), " --shard-group %d%s", a->shard_group, a->zero_auto ? " (chosen by -z auto)" : "");
    if (why) set_err(err, ERRLEN, "--invariant 1 with %d ranks, -b %d, %d micro-step%s, -z %d%s: %s", r->N, a->B, r->accum, r->accum > 1 ? "s" : "",
                     a->zero_stage, sg, why);
    comm_check_all(r->comm, err);
#ifndef LLMC_CUDA
    cpu_inv_T = a->T;
    cpu_inv_malloc_policy();
#endif
#if defined(LLMC_BF16) && !defined(LLMC_CUDA)
    /* (the matmul paths: rank 0 decided them for --invariant 1, cpu_gemm_decide: one path per class whatever the thread
       count, the fixed tiles on the primitive at avx512_bf16 and above on every rank) */
#endif
    hostcoll_pairwise = 1;
}


static void setup_run(Run* r, const Args* args, Comm* comm) {
    char err[ERRLEN] = "";
    memset(r, 0, sizeof(*r));
    r->a = *args; r->comm = comm;
    r->saved_step = -1;
    Args* a = &r->a;
    intr_test_slow("start-up", comm->rank);
    check_args(a, comm->world_size, err, ERRLEN);
    comm_check_all(comm, err);
    resume_init(r);
    int largest = !strcmp(a->init, "largest");   /* the shape is searched below, once the data and the baseline are known */
    if (largest && (a->resume || a->layers > 0 || a->heads > 0 || a->channels > 0))
        set_err(err, ERRLEN, "-e largest searches the shape: it takes no -y 1, --layers, --heads or --channels");
    comm_check_all(comm, err);
    if (largest) a->init = "d1";
    resolve_config(a, &r->cfg, &r->from_ckpt, err, ERRLEN);
    comm_check_all(comm, err);
    r->ckpt_version_in = r->from_ckpt ? gpt2_checkpoint_version(a->init) : 0;
    signal(SIGXFSZ, SIG_IGN); /* a write beyond the file size limit fails with EFBIG, reported at the save */
    r->N = comm->world_size;
    setup_batch(r);
    setup_node_size(r);
    setup_data(r, a->B);
    intr_phase(INTR_EXIT, "start-up (the matmul paths)", 0, -1);
    request_kernel_paths(r);
    backend_agree_kernels(comm);   /* the kernel paths, decided by rank 0 for every rank, before any matmul (-z auto measures one) */
    intr_phase(INTR_EXIT, "start-up (the fit check, -z auto's choice)", 0, -1);
    if (largest) choose_largest(r);
    fit_or_choose(r);
    intr_phase(INTR_EXIT, "start-up", 0, -1);
    setup_invariant(r);
    char conf[COMM_CONFIG_TEXT];
    run_config_text(r, conf, sizeof(conf));
    comm_agree_config(comm, "configurations", conf);   /* taken once, run by all: a mismatch is one error, never a hang */
    if (a->output_dir) {
        state_check_output_dir(comm, a->output_dir);   /* after the fit check: a refused run leaves nothing behind */
        state_lock_output_dir(comm, a->output_dir, a->lock_takeover);    /* one run at a time in -o: a second one is refused before it writes */
        if (!a->resume) state_fresh_output_dir(comm, a->output_dir, a->overwrite);   /* an earlier run's checkpoints: refused, or moved aside (--overwrite 1) */
    }
    setup_groups_backend(r);
    intr_phase(INTR_EXIT, "start-up (the model)", 0, -1);
    setup_model(r);
    if (a->output_dir) {
        if (comm->rank == 0) {
            char p[4096];
            snprintf(p, sizeof(p), "%s/main.log", a->output_dir);
            r->logf = fopen(p, a->resume ? "a" : "w");
            if (!r->logf) set_err(err, ERRLEN, "-o %s: cannot write %s (%s)", a->output_dir, p, strerror(errno));
        }
        comm_check_all(comm, err);
    }
    r->saved.step = -1;
    intr_phase(INTR_EXIT, a->resume ? "start-up (loading -y 1's state)" : "start-up", 0, -1);
    if (a->resume) intr_test_slow("load", comm->rank);
    r->start_step = a->resume ? state_resume(&r->model, &r->train, a->output_dir, a->max_steps, &r->saved, r->resumed, sizeof(r->resumed)) : 0;
    AdamWConfig opt = {a->lr, 0.9f, 0.95f, 1e-8f, a->weight_decay, a->grad_clip};
    r->opt = opt;
    r->dloss = 1.0f / (float)((double)a->B * a->T * r->N * r->accum);
    write_runs_txt(r);
}

#endif /* LLMC_RUN_SETUP_H */
