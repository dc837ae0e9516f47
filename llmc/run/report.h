/*
 llmc/run/report.h: what a run prints about itself: the banner before the
 first step (with a resume's notes), and the memory ledger and traffic
 tables of every rank in rank order. Rank 0 prints; the tables are
 collective.
*/
#ifndef LLMC_RUN_REPORT_H
#define LLMC_RUN_REPORT_H
#include "run.h"
#include "kernel_paths.h"

/* Collective: rank 0 prints text (n bytes) of every rank (all = 1) in rank
   order, or only its own (all = 0). Each rank's text is gathered to rank 0
   (MPI_Gatherv), so the tables never interleave, whatever the launcher does
   with the ranks' stdout. */
static void print_in_rank_order(Comm* c, int all, const char* text, size_t n) {
    if (!all) { if (c->rank == 0) { fwrite(text, 1, n, stdout); fflush(stdout); } return; }
    int len = (int)n, P = c->world_size;
    int* lens = NULL; int* displs = NULL; char* buf = NULL;
    if (c->rank == 0) { lens = (int*)malloc_or_die((size_t)P * sizeof(int), "ledger lengths"); displs = (int*)malloc_or_die((size_t)P * sizeof(int), "ledger offsets"); }
    MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
    size_t total = 0;
    if (c->rank == 0) {
        for (int r = 0; r < P; r++) { displs[r] = (int)total; total += (size_t)lens[r]; }
        buf = (char*)malloc_or_die(total + 1, "ledger text");
    }
    MPI_Gatherv(text, len, MPI_CHAR, buf, lens, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (c->rank == 0) { fwrite(buf, 1, total, stdout); fflush(stdout); }
    free(lens); free(displs); free(buf);
}

/* The memory ledger (traffic = 0) or the traffic table over `steps` steps
   (traffic = 1) of rank 0, or of every rank in rank order (--ledger all);
   *bad += the mismatches of this rank. */
static void print_report_all_ranks(GPT2* m, int all, int traffic, int steps, int* bad) {
    char* text = NULL; size_t n = 0;
    FILE* f = open_memstream(&text, &n);
    if (!f) comm_fatal(m->comm, "open_memstream failed for the %s text", traffic ? "traffic" : "ledger");
    if (all || m->comm->rank == 0)
        *bad += traffic ? zero_print_traffic(f, &m->plan, m->comm, steps) + zero_print_offload_traffic(f, &m->engine, steps)
                        : zero_print_memory(f, &m->plan, &m->ledger);
    fclose(f);
    print_in_rank_order(m->comm, all, text, n);
    free(text);
}


/* -y 1: what was loaded, and what the flags change against the saved run
   (the lr schedule's horizon or shape, the global batch, T): said plainly,
   since the run goes on either way. Rank 0. */
static void print_resume_notes(const Run* r) {
    const Args* a = &r->a;
    const StateRun* o = &r->saved.run;
    printf("%s", r->resumed);
    if (r->saved.step < 0) return;
    int S = r->start_step;
    if (o->max_steps > 0 && (o->max_steps != a->max_steps || o->warmup != a->warmup || o->lr != a->lr || o->final_frac != a->final_frac)) {
        float now = lr_schedule(a->lr, S, a->warmup, a->max_steps, a->final_frac);
        float then = lr_schedule(o->lr, S, o->warmup, o->max_steps, o->final_frac);
        printf("note: resume: the lr schedule changes: the saved run had -x %d -u %d -l %g -q %g, this one has -x %d -u %d -l %g -q %g, "
               "so the schedule is recomputed over %d steps: step %d gets lr %.2e (the saved run's schedule would give %.2e)\n",
               o->max_steps, o->warmup, (double)o->lr, (double)o->final_frac, a->max_steps, a->warmup, (double)a->lr, (double)a->final_frac,
               a->max_steps, S + 1, (double)now, (double)then);
    }
    long long paths = kernel_paths_word();
    if (o->kernel_paths && paths && o->kernel_paths != paths) {
        char was[200], now[200];
        kernel_paths_text(o->kernel_paths, was, sizeof(was)); kernel_paths_text(paths, now, sizeof(now));
        printf("note: resume: the matmul paths differ from the saved run's (saved: %s; this run: %s): the same model and data, but from here on "
               "the numbers are not bitwise those of an uninterrupted run\n", was, now);
    }
    if (o->tokens_per_step > 0 && (o->tokens_per_step != a->total_batch || o->seq_len != a->T))
        printf("note: resume: the global batch changes from %lld tokens per step (%lld sequences of T=%d) to %ld (%ld sequences of T=%d: "
               "%d rank%s x B=%d x %d micro-step%s): the data continues from the saved position, but from here on this is another run "
               "than the saved one would have been\n",
               o->tokens_per_step, o->seq_len > 0 ? o->tokens_per_step / o->seq_len : 0, o->seq_len, a->total_batch, a->total_batch / a->T, a->T,
               r->N, r->N > 1 ? "s" : "", a->B, r->accum, r->accum > 1 ? "s" : "");
}

/* The banner's line on the train tokens an epoch does not read (rank 0):
   a step never crosses a shard, so each shard's last ntok - 1 - read tokens
   (dataloader_shard_read: the read steps' inputs; the token after them is
   the last target; fewer than one step's -d tokens) are never read, as input
   or target, every epoch; nothing when none is skipped; the line gives the total and its share,
   and per shard "skipped of ntok" for the first 4 shards (then the range
   over the others). In file order it is the same tail each epoch; shuffled,
   the leftover sequences differ each epoch. */
static void print_skipped_tail(const Run* r) {
    const DataLoader* dl = &r->train;
    size_t skipped = 0, lo = (size_t)-1, hi = 0;
    for (int i = 0; i < dl->num_shards; i++) skipped += dl->shard_ntok[i] - 1 - dataloader_shard_read(dl, i);
    if (skipped == 0) return;
    printf("data: each epoch skips %zu of the %zu train tokens (%.3g%%; a step of %ld tokens never crosses a shard), %s: ",
           skipped, dl->num_tokens, 100.0 * (double)skipped / (double)dl->num_tokens, r->a.total_batch,
           r->a.shuffle ? "the sequences left over in each shard (which ones changes each epoch)" : "the tail of each shard, the same every epoch");
    for (int i = 0; i < dl->num_shards; i++) {
        size_t k = dl->shard_ntok[i] - 1 - dataloader_shard_read(dl, i);
        if (i < 4) printf("%s%zu of shard %d's %zu", i ? ", " : "", k, i, dl->shard_ntok[i]);
        else { if (k < lo) lo = k; if (k > hi) hi = k; }
    }
    if (dl->num_shards > 4) printf(", %zu to %zu in each of the other %d", lo, hi, dl->num_shards - 4);
    printf("\n");
}

/* What the run is, printed by rank 0 before the first step; the placement
   of every rank; the memory ledger (every rank checks its own). */
static void print_banner(Run* r) {
    const Args* a = &r->a;
    Comm* comm = r->comm;
    if (comm->rank == 0) {
        static const char* rnames[4] = {"", ", recompute -r 1 (GELU)", ", recompute -r 2 (GELU, LayerNorms)", ", recompute -r 3 (whole blocks)"};
        printf("train_gpt (%s): %d rank%s, zero_stage %d%s%s%s%s\n", BACKEND_NAME, r->N, r->N > 1 ? "s" : "", a->zero_stage,
               r->model.opt.eval_only ? ", evaluation only (-x 0: no grads, no optimizer states, no backward; the blocks' forward in one layer's buffers)"
                                      : rnames[a->recompute],
               a->zero_stage == 3 ? (a->reshard_after_forward ? ", reshard_after_forward 1" : ", reshard_after_forward 0") : "",
               a->offload == OFFLOAD_DISK ? ", optimizer states offloaded to disk:" : a->offload == OFFLOAD_HOST ? ", optimizer states offloaded to host memory" : "",
               a->offload == OFFLOAD_DISK ? a->offload_dir : "");
        const FitPeak* f = &r->fit.mem;
        printf("memory: predicted peak %.4g GB per rank = ledger %.4g + baseline %.4g (code, libraries, MPI) + max(I/O staging %.4g, "
               "host %.4g + workspace %.4g) GB; budget %.4g GB (%s)%s", f->peak / 1e9, f->ledger / 1e9, f->baseline / 1e9,
               f->staging / 1e9, f->host / 1e9, f->workspace / 1e9, r->budget / 1e9, r->budget_source,
               r->fit.fits ? "" : ": OVER the budget (--fit-check 0)");
        if (f->decision)   /* -z auto's probe and candidate list: a phase before the model (fit_peak_total) */
            printf("; before the model, -z auto's own buffers (the link probe's, the candidates' list) %.4g GB: %s", f->decision / 1e9,
                   f->baseline + f->decision >= f->peak ? "the larger phase" : "a smaller phase than the model's");
        printf("\n");
        if (r->keep_logits_auto)
            printf("logits: %s (--keep-logits not given: the predicted peak with the B*T*Vp logits kept is %.4g GB per rank, %s the budget; "
                   "--keep-logits %d %s)\n",
                   r->keep_logits_auto > 0 ? "kept from forward to backward" : "recomputed in backward, chunk by chunk",
                   r->keep_logits_peak / 1e9, r->keep_logits_auto > 0 ? "within" : "over",
                   r->keep_logits_auto > 0 ? 0 : 1,
                   r->keep_logits_auto > 0 ? "recomputes them: the same numbers, less memory, 2 C Vp more flops per token" : "keeps them anyway");
        printf("matmul: %s\n", backend_matmul_desc());
        char cpu[1024];
        backend_cpu_desc(cpu, sizeof(cpu));
        printf("cpu: %s\n", cpu);
        printf("model: L=%d NH=%d C=%d maxT=%d V=%d (padded %d), %zu parameters, init %s\n", r->cfg.num_layers, r->cfg.num_heads,
               r->cfg.channels, r->cfg.max_seq_len, r->cfg.vocab_size, r->cfg.padded_vocab_size, r->model.plan.num_parameters,
               r->start_step > 0 ? "from the resumed checkpoint" : r->from_ckpt ? a->init : "random");
        printf("batch: B=%d T=%d per rank, %ld tokens per micro-step, %d micro-step%s per optimizer step (%ld tokens)\n",
               a->B, a->T, r->tokens_per_micro, r->accum, r->accum > 1 ? "s" : "", a->total_batch);
        if (a->invariant) {
            long D = a->total_batch / a->T;   /* sequences per step */
            char ns[256] = "";
            for (long n = 1; n <= D && strlen(ns) < 200; n *= 2) snprintf(ns + strlen(ns), sizeof(ns) - strlen(ns), "%s%ld", n > 1 ? ", " : "", n);
            printf("invariant: bitwise equal to any run of this model and global batch %ld x %d tokens on N ranks x B sequences x A "
                   "micro-steps, all powers of two: N = %s, stages 0-3\n", D, a->T, ns);
        }
        size_t per_epoch = r->have_train ? dataloader_tokens_per_epoch(&r->train) : 0;   /* what an epoch reads: whole steps per shard */
        if (r->have_train) printf("data: train %zu tokens in %d shard(s) (%s), %s; -x %d steps x %ld tokens = %.4g epochs of the %zu tokens an epoch reads",
                                  r->train.num_tokens, r->train.num_shards, a->train_pattern,
                                  a->shuffle ? "shuffled (--shuffle 1: sequences and shards in a seeded random order, new each epoch)" : "in file order (--shuffle 0)",
                                  a->max_steps, a->total_batch, (double)a->max_steps * (double)a->total_batch / (double)per_epoch, per_epoch);
        else printf("data: no training (-x 0)");
        if (r->have_val) printf(", val %zu tokens (%s); each evaluation reads its first %ld sequences of T=%d = %ld tokens (%s%d), "
                                "at every rank count and -b", r->val.num_tokens, a->val_pattern, r->val_seqs, a->T, r->val_seqs * a->T,
                                r->val_capped ? "all it holds, fewer than -m " : "-m ", a->val_steps);
        printf("\n");
        if (r->have_train) print_skipped_tail(r);
        if (r->val_capped)
            printf("note: -m %d sequences: the val split holds only %ld distinct sequence%s of T=%d (%ld tokens); each "
                   "evaluation reads %s once\n", a->val_steps, r->val_seqs,
                   r->val_seqs > 1 ? "s" : "", a->T, r->val_seqs * a->T, r->val_seqs > 1 ? "those" : "that one");
        if (a->sample_every > 0 && a->gen_tokens > a->T - 1)
            printf("note: -g %d: a sample is at most T-1 = %d tokens (its context is one sequence of -t %d): each sample generates %d\n",
                   a->gen_tokens, a->T - 1, a->T, a->T - 1);
        if (a->resume) print_resume_notes(r);
    }
    comm_print_placement(comm, stdout); /* node, local rank, threads, cores of every rank */
    if (comm->rank == 0 && comm->replica_size > 1) {   /* the groups as comm_group_members made them from the nodes */
        char groups[512] = "";
        int W = comm->world_size, G = comm->group_size, shown = 0;
        int* pos = (int*)malloc_or_die((size_t)W * sizeof(int), "HSDP groups");
        comm_node_major(pos, W);   /* the groups are its runs of G (comm_group_members), each in rank order */
        size_t at = 0;
        for (int g = 0; g < W / G && at + 24 < sizeof(groups); g++) {
            if (shown++ == 8) { at += (size_t)snprintf(groups + at, sizeof(groups) - at, "; ..."); break; }
            for (int q = 0, k = 0; q < W && at + 24 < sizeof(groups); q++)
                if (pos[q] / G == g) at += (size_t)snprintf(groups + at, sizeof(groups) - at, "%s%d", k++ ? "," : (g ? "; ranks " : "ranks "), q);
        }
        free(pos);
        printf("HSDP: %d shard groups of %d ranks (%s): shards inside a group, replicas across groups\n",
               comm->replica_size, comm->group_size, groups);
    }
    if (comm->rank == 0 && a->overlap && !comm->thread_multiple)
        printf("note: MPI does not provide MPI_THREAD_MULTIPLE: collectives run without overlap\n");
    if (a->trace_path) {
        trace_init(MEM_NUM, mem_names);
        if (r->a.trace_last > a->max_steps) r->a.trace_last = a->max_steps;
        if (r->a.trace_first > r->a.trace_last) r->a.trace_first = r->a.trace_last;
    }
    print_report_all_ranks(&r->model, a->ledger_all, 0, 0, &r->ledger_bad);
}

#endif /* LLMC_RUN_REPORT_H */
