/*
 llmc/run/runs_txt.h: what every rank agrees it runs (the flags at start,
 the configuration after -z auto: comm_agree_config) and DIR/runs.txt, one
 line per start. For setup and for dev/check_model.sh's reader.
*/
#ifndef LLMC_RUN_RUNS_TXT_H
#define LLMC_RUN_RUNS_TXT_H
#include "run.h"

/* Collective: every rank was started with the same flags, checked before
   anything is decided from them (comm_agree_config: a mismatch ends every
   rank with one line naming the first difference). The text is the program
   and floatX width, then each argument (long ones by length and 64-bit
   FNV-1a hash, http://www.isthe.com/chongo/tech/comp/fnv/). */
static void agree_flags(Comm* comm, int argc, char** argv) {
    char flags[COMM_CONFIG_TEXT];
    /* the program first: the fp32 and the bf16 program take different
       collectives from here on (backend_agree_kernels) */
    size_t k = (size_t)snprintf(flags, sizeof(flags), "program %s floatX_bytes %d", BACKEND_NAME, (int)sizeof(floatX));
    /* every byte of every argument counts: an argument longer than
       the 1000 characters shown is preceded by its length and the
       64-bit FNV-1a hash of all of it; arguments past the text's room
       are hashed together (with their lengths) into one last pair */
    for (int i = 1; i < argc; i++) {
        size_t len = strlen(argv[i]);
        unsigned long long h = 1469598103934665603ULL;
        if (k + 1200 >= sizeof(flags)) {
            for (int j = i; j < argc; j++) {
                size_t lj = strlen(argv[j]);
                for (size_t b = 0; b <= lj; b++) { h ^= (unsigned char)argv[j][b]; h *= 1099511628211ULL; }   /* the NUL separates */
            }
            snprintf(flags + k, sizeof(flags) - k, " argv[%d..%d] fnv1a:%016llx", i, argc - 1, h);
            break;
        }
        if (len > 1000) {   /* the hash first: a mismatch's message shows a value's first 255 characters */
            for (size_t b = 0; b < len; b++) { h ^= (unsigned char)argv[i][b]; h *= 1099511628211ULL; }
            k += (size_t)snprintf(flags + k, sizeof(flags) - k, " argv[%d] (%zu-chars,fnv1a:%016llx)%.1000s", i, len, h, argv[i]);
        } else k += (size_t)snprintf(flags + k, sizeof(flags) - k, " argv[%d] %s", i, argv[i]);
    }
    comm_agree_config(comm, "flags", flags);
}

/* The configuration this rank is about to run, as "key value" pairs (for
   comm_agree_config: every rank must run the same): the program, the model,
   every flag that shapes the plan, the collectives, the schedule or the
   numbers, after -z auto's choice; floats as exact hex. */
static void run_config_text(const Run* r, char* out, size_t n) {
    const Args* a = &r->a;
    const GPT2Config* c = &r->cfg;
    char kernels[600];
    backend_kernels_text(kernels, sizeof(kernels));   /* the kernel paths (agreed by backend_agree_kernels) and their environment */
    snprintf(out, n, "program %s floatX_bytes %d model L%d/NH%d/C%d/maxT%d/V%d/Vp%d init %s ranks %d zero_stage %d shard_group %d "
             "reshard_after_forward %d prefetch %d reshard_embedding %d vocab_chunk %d keep_logits %d overlap %d recompute %d "
             "B %d T %d total_batch %ld grad_accum %d offload %d:%s quantize_weights %d/%d quantize_grads %d/%d secondary_shard %d node_size %d "
             "steps %d warmup %d lr %a final_frac %a weight_decay %a grad_clip %a val_every %d val_steps %d sample_every %d gen_tokens %d "
             "ckpt_every %d ckpt_version %d seed %llu shuffle %d resume %d collective_timeout %a train %s val %s output %s "
             "train_tokens %zu val_seqs %ld %s",
             BACKEND_NAME, (int)sizeof(floatX), c->num_layers, c->num_heads, c->channels, c->max_seq_len, c->vocab_size, c->padded_vocab_size,
             a->init, r->N, a->zero_stage, a->shard_group > 0 ? a->shard_group : r->N, a->reshard_after_forward, a->prefetch, a->reshard_embedding,
             a->vocab_chunk, a->keep_logits, a->overlap, a->recompute, a->B, a->T, a->total_batch, r->accum, a->offload,
             a->offload_dir ? a->offload_dir : "-", a->quant_weights, a->quant_weights_block, a->quant_grads, a->quant_grads_block, a->secondary,
             a->node_size, a->max_steps, a->warmup, (double)a->lr, (double)a->final_frac, (double)a->weight_decay, (double)a->grad_clip,
             a->val_every, a->val_steps, a->sample_every, a->gen_tokens, a->ckpt_every, a->ckpt_version, a->seed, a->shuffle, a->resume,
             (double)a->collective_timeout, a->train_pattern, a->val_pattern, a->output_dir ? a->output_dir : "-",
             r->have_train ? (size_t)r->train.num_tokens : (size_t)0, r->val_seqs, kernels);
}


/* DIR/runs.txt (rank 0): one line per start, the concrete configuration
   (what -z auto chose; the state itself does not depend on the stage) and
   the program that ran (dev/check_model.sh evaluates a checkpoint with it). */
static void write_runs_txt(const Run* r) {
    const Args* a = &r->a;
    if (!a->output_dir) return;
    /* every rank's OpenMP threads: the numbers depend on them (docs/cluster.md: a job under Slurm's --cpus-per-task
       and the same job under mpirun agree bit for bit only at equal thread counts) */
    int mine = 1, N = r->comm->world_size;
#ifdef _OPENMP
    mine = omp_get_max_threads();
#endif
    int* th = r->comm->rank == 0 ? (int*)malloc_or_die((size_t)N * sizeof(int), "thread counts") : NULL;
    MPI_Gather(&mine, 1, MPI_INT, th, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (r->comm->rank != 0) return;
    char threads[300] = "";
    size_t at = 0;
    for (int q = 0; q < N && at + 16 < sizeof(threads); q++) at += (size_t)snprintf(threads + at, sizeof(threads) - at, "%s%d", q ? "," : "", th[q]);
    if (at + 16 >= sizeof(threads)) snprintf(threads + at, sizeof(threads) - at, ",...");
    free(th);
    char p[4096];
    snprintf(p, sizeof(p), "%s/runs.txt", a->output_dir);
    FILE* f = fopen(p, "a");
    char qw[32] = "none";
    if (a->quant_weights) snprintf(qw, sizeof(qw), "int8/%d", a->quant_weights_block);
    char qg[32] = "none";
    if (a->quant_grads) snprintf(qg, sizeof(qg), "int%d/%d/node %d", a->quant_grads, a->quant_grads_block, a->node_size);
    if (!f) return;
    char kernels[600];
    backend_kernels_text(kernels, sizeof(kernels));
    fprintf(f, "start step %d: ranks %d zero_stage %d shard_group %d reshard_after_forward %d reshard_embedding %d keep_logits %d "
            "recompute %d B %d T %d grad_accum %d offload %s%s quantize_weights %s quantize_grads %s secondary_shard %d program %s %s threads %s%s\n", r->start_step, r->N,
            a->zero_stage, r->comm->group_size, a->reshard_after_forward, a->reshard_embedding, a->keep_logits, a->recompute, a->B, a->T, r->accum,
            a->offload == OFFLOAD_DISK ? "disk:" : a->offload == OFFLOAD_HOST ? "host" : "none",
            a->offload == OFFLOAD_DISK ? a->offload_dir : "", qw, qg, a->secondary > 1 ? a->secondary : 1, PROGRAM_PATH, kernels, threads,
            a->zero_auto ? " (chosen by -z auto)" : "");
    fclose(f);
}

#endif /* LLMC_RUN_RUNS_TXT_H */
