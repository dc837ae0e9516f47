/*
 llmc/run/run.h: the trainer's run, as train_gpt.cu and the phases in
 llmc/run/ share it: the flags' values (Args), the checks that need only
 them and the rank count, the model config and options they give, and the
 Run every phase fills and the loop reads. For a reader of any phase.
 Included by train_gpt.cu and every llmc/run/ file; includes only the
 engine (llmc/) and the backend train_gpt.cu chose before it.
*/
#ifndef LLMC_RUN_RUN_H
#define LLMC_RUN_RUN_H
#include "../flags.h"
#include "../gpt.h"
#include "../gpt_fit.h"
#include "../checkpoint.h"
#include "../state.h"
#include "../output_dir.h"
#include "../rescue.h"
#include "../dataloader.h"
#include "../tokenizer.h"
#include "../schedulers.h"
#include "../trace.h"

typedef struct {
    const char* train_pattern;
    const char* val_pattern;
    const char* init;            /* checkpoint path or descriptor dN */
    const char* output_dir;
    const char* tokenizer_path;
    int B, T;
    long total_batch;            /* tokens per optimizer step, all ranks (-1: B*T*ranks) */
    float lr, final_frac, weight_decay, grad_clip;
    int warmup, max_steps, val_every, val_steps, sample_every, gen_tokens, ckpt_every;
    int zero_stage, reshard_after_forward, prefetch;
    int reshard_embedding, vocab_chunk, keep_logits, overlap;
    int shard_group;             /* HSDP: ranks per shard group (-1: all) */
    const char* trace_path;      /* --trace FILE */
    int trace_first, trace_last; /* --trace-steps a:b (optimizer steps, 1-based, inclusive) */
    int resume;                  /* -y 1: continue from the latest model_*.bin + state_*.bin in -o */
    int keep_ckpts;              /* --keep-checkpoints K: only the newest K checkpoints stay in -o (0: all) */
    int overwrite;               /* --overwrite 1: a fresh run into an -o that holds checkpoints moves them aside (0: refused) */
    const char* lock_takeover;   /* --lock-takeover HOSTS: comma list of lost hosts whose runs' -o lock may be taken over */
    int offload;                 /* --offload-optimizer: OFFLOAD_NONE, _HOST (CUDA build) or _DISK */
    const char* offload_dir;     /* disk:DIR */
    int ledger_all, ledger_every;
    float collective_timeout;    /* --collective-timeout seconds (0: wait forever), comm.h's watch */
    int straggler_report;        /* --straggler-report: per-rank waits at the end */
    int flight_recorder;         /* --flight-recorder K: each rank's last K collectives (llmc/flight.h), 0 off */
    int B_given, T_given;        /* -b / -t on the command line (the estimator adds activations then) */
    int init_given;              /* -e on the command line (-y 1 without it takes the model from the checkpoint it resumes) */
    int reshard_given, prefetch_given, reshard_emb_given; /* stage-3 flags on the command line (warned about at stages 0-2) */
    int keep_logits_given;       /* --keep-logits on the command line (-z auto keeps it) */
    int recompute, recompute_given; /* -r: activation recomputation (gpt.h); given: -z auto keeps it */
    int quant_weights;           /* --quantize-weights int8 (1) or none (0): qwZ, stage 3 (llmc/quant.h) */
    int quant_weights_block, quant_block_given; /* --quantize-weights-block: elements per fp32 scale */
    int secondary;               /* --secondary-shard: hpZ's K (0 none, -1 node: the ranks per node, resolved at start) */
    int quant_grads, quant_grads_block, quant_grads_block_given; /* --quantize-grads: qgZ's bits (0 none, 8, 4) */
    int node_size, node_size_given; /* --node-size: ranks per node of the shard group for hpZ's node and qgZ's hops (0: from the node names) */
    int ckpt_version;            /* --checkpoint-dtype: 3 (fp32) or 5 (bf16) */
    int total_batch_given;       /* -d on the command line (-z auto may then trade micro-batch for accumulation) */
    int shuffle;                 /* --shuffle: train batches in a seeded random order (1) or file order (0) */
    unsigned long long seed;
    /* architecture overrides (-1: from descriptor / checkpoint) */
    int layers, heads, channels, max_seq_len, vocab;
    /* memory: the fit check, -z auto (llmc/fit.h, llmc/gpt_fit.h) */
    unsigned long long memory_limit; /* --memory-limit per rank (0: the cgroup's or MemAvailable) */
    int fit_check;               /* --fit-check 1: refuse a configuration over the budget before allocating */
    int zero_auto;               /* -z auto */
    int invariant;               /* --invariant 1: bits independent of the layout (docs/design.md section 13) */
    float link_inside_gbps, link_across_gbps; /* --link-gbps (0: measured) */
    int calibrate_workspace;     /* --calibrate-workspace (make runs it once per program and build) */
    int calibrate_matmul;        /* --calibrate-matmul (make runs it once per build of the bf16 program) */
    /* estimator */
    int estimate;
    double est_params, est_gpu_mem;
    int est_ranks;
    const char* est_dtype;
} Args;

#if defined(LLMC_CUDA)
#define PROGRAM_PATH "./train_gpt"
#elif defined(LLMC_BF16)
#define PROGRAM_PATH "./train_gpt_cpu_bf16"
#else
#define PROGRAM_PATH "./train_gpt_cpu"
#endif

/* The checks that need only the flags and the rank count (the model's are
   gpt2_init's): one message, or 0. */
static int check_args(const Args* a, int world, char* err, size_t errlen) {
    /* Stage 0 keeps the whole optimizer on every rank: offloading N identical
       copies multiplies the host or disk bytes and the I/O by N for nothing;
       ZeRO-Offload starts from the sharded optimizer (stage 1 has the same
       traffic as stage 0). */
    if (a->offload != OFFLOAD_NONE && a->zero_stage == 0 && !a->zero_auto)
        return set_err(err, errlen, "--offload-optimizer %s%s: needs -z 1, 2 or 3 (stage 0 replicates the optimizer states on every rank; "
                       "offloading N identical copies is not ZeRO-Offload: use -z 1, which moves the same bytes per step)",
                       a->offload == OFFLOAD_DISK ? "disk:" : "host", a->offload == OFFLOAD_DISK ? a->offload_dir : "");
    int G = a->shard_group > 0 ? a->shard_group : world;
    if (world % G != 0) return set_err(err, errlen, "--shard-group %d: must divide the number of ranks %d", G, world);
    if (G != world && a->zero_stage == 0 && !a->zero_auto) return set_err(err, errlen, "--shard-group %d: stage 0 shards nothing; HSDP needs -z 1, 2 or 3", G);
    if (a->resume && !a->output_dir) return set_err(err, errlen, "-y 1: resuming needs -o <dir> (where the checkpoints are)");
    if (a->overwrite && a->resume) return set_err(err, errlen, "--overwrite 1 with -y 1: -y 1 resumes the checkpoints in -o, --overwrite 1 starts over without them: give one");
    if (a->overwrite && !a->output_dir) return set_err(err, errlen, "--overwrite 1: needs -o <dir> (whose earlier checkpoints it moves aside)");
    if (a->quant_weights && (a->zero_stage != 3 || a->zero_auto))
        return set_err(err, errlen, "--quantize-weights int8: quantizes the stage-3 weight all-gather (qwZ); needs -z 3%s",
                       a->zero_auto ? " (-z auto does not consider it yet: give -z 3)" : "");
    if (a->quant_grads && (a->zero_stage != 3 || a->zero_auto))
        return set_err(err, errlen, "--quantize-grads int%d: quantizes the stage-3 grad reduce-scatter (qgZ); needs -z 3%s", a->quant_grads,
                       a->zero_auto ? " (-z auto does not consider it yet: give -z 3)" : "");
    if (a->secondary && (a->zero_stage != 3 || a->zero_auto))
        return set_err(err, errlen, "--secondary-shard: hpZ keeps a secondary copy of the stage-3 params; needs -z 3%s",
                       a->zero_auto ? " (-z auto does not consider it yet: give -z 3)" : "");
    if (a->invariant && (a->quant_weights || a->quant_grads))
        return set_err(err, errlen, "--invariant 1: --quantize-%s changes the numbers with the layout (its blocks are per shard); use one or the other",
                       a->quant_weights ? "weights" : "grads");
    if (a->invariant && G != world)
        return set_err(err, errlen, "--invariant 1: --shard-group %d (HSDP) sums across the replica groups in an order the tree does not have yet; "
                       "drop --shard-group", G);
#ifdef LLMC_CUDA
    if (a->invariant) return set_err(err, errlen, "--invariant 1: the CUDA build does not have the layout-invariant kernels yet (the fp32 CPU program does)");
#endif
#ifdef LLMC_CUDA
    if (a->quant_weights) return set_err(err, errlen, "--quantize-weights int8: the CUDA build has no quantized all-gather yet (the CPU programs do)");
    if (a->secondary) return set_err(err, errlen, "--secondary-shard: the CUDA build has no secondary all-gather yet (the CPU programs do)");
    if (a->quant_grads) return set_err(err, errlen, "--quantize-grads: the CUDA build has no quantized reduce-scatter yet (the CPU programs do)");
#endif
    return 0;
}

/* Model config from -e (checkpoint or dN) and the override flags. */
static int resolve_config(const Args* a, GPT2Config* c, int* from_checkpoint, char* err, size_t errlen) {
    const char* e = a->init;
    int bad = 0;
    *from_checkpoint = 0;
    if (gpt2_config_descriptor(e, c, &bad, err, errlen)) {
        if (bad) return 1;
        if (a->layers > 0) c->num_layers = a->layers;
        if (a->heads > 0) c->num_heads = a->heads;
        if (a->channels > 0) c->channels = a->channels;
        if (a->max_seq_len > 0) c->max_seq_len = a->max_seq_len;
        if (a->vocab > 0) c->vocab_size = a->vocab;
        c->padded_vocab_size = (int)round_up((size_t)c->vocab_size, 128);
        return gpt2_config_check(c, "model flags", err, errlen);
    }
    int version;
    if (gpt2_read_checkpoint_header(e, c, &version, err, errlen)) return 1;
    *from_checkpoint = 1;
    struct { int flag; int value; const char* name; } chk[5] = {
        {a->layers, c->num_layers, "--layers"}, {a->heads, c->num_heads, "--heads"}, {a->channels, c->channels, "--channels"},
        {a->max_seq_len, c->max_seq_len, "--max-seq-len"}, {a->vocab, c->vocab_size, "--vocab"}};
    for (int k = 0; k < 5; k++)
        if (chk[k].flag > 0 && chk[k].flag != chk[k].value)
            return set_err(err, errlen, "checkpoint %s has %s %d but the flag says %d", e, chk[k].name + 2, chk[k].value, chk[k].flag);
    return 0;
}

/* The model's execution options from the flags (one place: the run and
   the estimator's plans). */
static GPT2Options model_options(const Args* a, int accum) {
    GPT2Options o = gpt2_default_options();
    o.zero_stage = a->zero_stage; o.reshard_after_forward = a->reshard_after_forward; o.prefetch = a->prefetch;
    o.reshard_embedding = a->reshard_embedding; o.vocab_chunk = a->vocab_chunk; o.keep_logits = a->keep_logits;
    o.overlap = a->overlap; o.grad_accum_steps = accum; o.invariant = a->invariant; o.offload = a->offload; o.recompute = a->recompute;
    o.quant_weights_block = a->quant_weights ? a->quant_weights_block : 0;
    o.secondary = a->secondary > 1 ? a->secondary : a->secondary == -1 && a->node_size > 1 ? a->node_size : 0;   /* node: resolved at start; the estimator takes --node-size */
    o.quant_grads_bits = a->quant_grads; o.quant_grads_block = a->quant_grads_block; o.quant_grads_local = a->node_size > 0 ? a->node_size : 1;
    if (a->max_steps == 0 && !a->resume) {   /* -x 0: evaluate and sample only (no grads, no optimizer, no backward) */
        o.eval_only = 1;
        o.recompute = 3;   /* the forward writes one layer's buffers for every layer: nothing is kept for a backward */
        o.offload = OFFLOAD_NONE;
    }
    return o;
}

/* ------------------------------------------------------------------------ */
/* A run: everything set up once, used by the loop                          */

typedef struct {
    Args a;
    Comm* comm;
    GPT2Config cfg;
    int from_ckpt, N, accum;
    long tokens_per_micro;
    GPT2 model;
    DataLoader train, val;
    int have_train, have_val, val_capped;
    long val_seqs;               /* sequences of T tokens each evaluation reads: -m, at most the split's */
    Tokenizer tok;
    int have_tok;
    FILE* logf;
    int start_step;
    int saved_step;              /* the step of the last checkpoint this process wrote (-1: none) */
    TrainState saved;            /* -y 1: the header of the state resumed from (saved.step -1: none) */
    char resumed[2048];          /* -y 1: what was loaded, printed with the banner */
    char resume_model[4096];     /* -y 1: the checkpoint it continues from ("" if none) */
    AdamWConfig opt;
    float dloss;
    double total_ms;             /* timed steps (all but a process's first) */
    double total_opt_ms;         /* their optimizer steps (grad norm, clip, AdamW, stages 1-2's param all-gather) */
    double total_wait_ms;        /* their waits on communication (this rank's) */
    int timed;
    int ledger_bad;
    int ckpt_version_in;         /* the -e checkpoint's version (3, 5), 0 for a random init */
    FitCandidate fit;            /* the configuration run and its predicted peak (fit_or_choose) */
    int secondary_by_node;       /* --secondary-shard node: hpZ's secondary groups are the nodes (comm_group_node_layout) */
    char group_nodes_text[1024]; /* the shard group's nodes and their ranks (comm_group_node_layout), for the start-up line */
    int links_probed;            /* -e largest with -z auto measured the link rates (choose_largest) */
    int keep_logits_auto;        /* --keep-logits not given: 1 kept (they fit), -1 recomputed (they do not), 0 not decided (FitDecision) */
    unsigned long long keep_logits_peak; /* the per-rank peak with them kept (bytes) */
    unsigned long long budget;   /* the smallest per-rank budget over the ranks */
    char budget_source[640];
} Run;

#endif /* LLMC_RUN_RUN_H */
