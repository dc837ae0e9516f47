/*
 train_gpt.cu: the trainer. Trains GPT-2 on llm.c token shards on one or
 many ranks (MPI), data parallel with the model states sharded by ZeRO stage
 -z 0|1|2|3. The same source builds the CPU programs (a C compiler, OpenMP,
 oneDNN or BLAS, MPI: ./train_gpt_cpu in fp32, ./train_gpt_cpu_bf16 with
 -DLLMC_BF16) and the CUDA program (nvcc, bf16, cuBLASLt, NCCL:
 ./train_gpt); only the backend header differs.

 One optimizer step (train_step below): for each of A micro-steps every rank
 reads its slice of the global micro-batch, runs forward and backward over
 the units (the engine gathers / reduces as its stage says), then the
 engine reduces what is left, clips by the global grad norm, runs AdamW on
 the rank's range and refreshes the params. Every run prints the shard
 plan's predicted bytes per category beside the bytes allocated, and at the
 end the traffic counted on every collective beside the traffic predicted.

 The flags are one table (FLAGS below): the parser, -h and docs/flags.md
 (./train_gpt_cpu --help-markdown, make docs) come from it.
 This file is the outline: the flag table, main, the loop, train_step and
 the end; each phase it calls lives in one file of llmc/run/ (run.h: Args
 and Run; setup.h, estimate.h, calibrate.h, eval.h, kernel_paths.h,
 runs_txt.h, report.h; docs/design.md section 12).
*/
/* LLMC_CUDA selects the CUDA build: set here under nvcc; the emulated device
   (tests/cuda_emu, make emu) compiles this file with g++ and -DLLMC_CUDA */
#if defined(__CUDACC__) && !defined(LLMC_CUDA)
#define LLMC_CUDA 1
#endif
#ifdef LLMC_CUDA
#include "llmc/cuda/backend.cuh"
#else
#include "llmc/cpu/backend.h"
#endif
#include <stddef.h>
#include <sys/stat.h>
#include <malloc.h>
#include <unistd.h>
#include "llmc/run/run.h"
#include "llmc/run/estimate.h"
#include "llmc/run/calibrate.h"
#include "llmc/run/eval.h"
#include "llmc/run/kernel_paths.h"
#include "llmc/run/runs_txt.h"
#include "llmc/run/setup.h"
#include "llmc/run/report.h"


/* ------------------------------------------------------------------------ */
/* Flags: defaults, the values with a syntax of their own, the table        */

static void args_defaults(Args* a, int world) {
    memset(a, 0, sizeof(*a));
    a->train_pattern = "data/brown/brown_train_*.bin";
    a->val_pattern = "data/brown/brown_val_*.bin";
    a->init = "d2"; a->output_dir = NULL; a->tokenizer_path = "data/gpt2_tokenizer.bin";
    a->B = 4; a->T = 128; a->total_batch = -1;
    a->lr = 2e-3f; a->final_frac = 0.1f; a->weight_decay = 0.1f; a->grad_clip = 1.0f;
    a->warmup = 20; a->max_steps = 1700; a->val_every = 300; a->val_steps = 80; a->sample_every = 850; a->gen_tokens = 64;
    a->ckpt_every = 0; a->zero_stage = 1; /* the same as make train's ZERO */ a->reshard_after_forward = 1; a->prefetch = 1;
    a->reshard_embedding = 1; a->vocab_chunk = 8192; a->keep_logits = 0; a->overlap = 1;
    a->shard_group = -1; a->trace_path = NULL; a->trace_first = 2; a->trace_last = 3;
    a->collective_timeout = 60.0f; a->straggler_report = 0; a->flight_recorder = 64;
    a->seed = 1337; a->layers = a->heads = a->channels = a->max_seq_len = a->vocab = -1;
    a->est_dtype = "bf16"; a->est_ranks = world;
    a->ckpt_version = 3; a->shuffle = 1;
    a->fit_check = 1;
    a->quant_weights_block = 256;
    a->quant_grads_block = 256;
}

/* A count with an optional suffix: 124M, 1.5B, 70B, 2T, 350K (K = 1e3, M = 1e6,
   B or G = 1e9, T = 1e12, either case), or a plain number such as 70e9. 0 or 1. */
static int parse_count(const char* v, double* out) {
    char num[64];
    size_t n = strlen(v);
    if (n == 0 || n >= sizeof(num)) return 1;
    double mult = 1.0;
    switch (v[n - 1]) {
        case 'k': case 'K': mult = 1e3; break;
        case 'm': case 'M': mult = 1e6; break;
        case 'b': case 'B': case 'g': case 'G': mult = 1e9; break;
        case 't': case 'T': mult = 1e12; break;
        default: break;
    }
    memcpy(num, v, n + 1);
    if (mult != 1.0) num[n - 1] = 0;
    double d;
    if (parse_double(num, &d)) return 1;
    *out = d * mult;
    return 0;
}

static int flag_total_batch(void* p, const char* f, const char* v, char* err, size_t errlen) {
    long n;
    (void)f;
    if (parse_long(v, &n) || n < 1) return set_err(err, errlen, "flag -d: '%s' must be a positive integer (tokens)", v);
    ((Args*)p)->total_batch = n;
    ((Args*)p)->total_batch_given = 1;
    return 0;
}
static int flag_trace_steps(void* p, const char* f, const char* v, char* err, size_t errlen) {
    const char* colon = strchr(v, ':');
    long x = 0, y = 0;
    char tmp[64];
    (void)f;
    if (!colon || strlen(v) >= sizeof(tmp)) return set_err(err, errlen, "flag --trace-steps: '%s' must be a:b (first and last optimizer step, 1-based)", v);
    memcpy(tmp, v, (size_t)(colon - v)); tmp[colon - v] = 0;
    if (parse_long(tmp, &x) || parse_long(colon + 1, &y) || x < 1 || y < x)
        return set_err(err, errlen, "flag --trace-steps: '%s' must be a:b with 1 <= a <= b", v);
    ((Args*)p)->trace_first = (int)x; ((Args*)p)->trace_last = (int)y;
    return 0;
}
static int flag_seed(void* p, const char* f, const char* v, char* err, size_t errlen) {
    long n;
    (void)f;
    if (parse_long(v, &n) || n < 0) return set_err(err, errlen, "flag --seed: '%s' must be a non-negative integer", v);
    ((Args*)p)->seed = (unsigned long long)n;
    return 0;
}
static int flag_quantize_weights(void* p, const char* f, const char* v, char* err, size_t errlen) {
    (void)f;
    if (!strcmp(v, "none")) { ((Args*)p)->quant_weights = 0; return 0; }
    if (!strcmp(v, "int8")) { ((Args*)p)->quant_weights = 1; return 0; }
    return set_err(err, errlen, "flag --quantize-weights: '%s' must be none or int8", v);
}

static int flag_quantize_grads(void* p, const char* f, const char* v, char* err, size_t errlen) {
    (void)f;
    Args* a = (Args*)p;
    if (!strcmp(v, "none")) { a->quant_grads = 0; return 0; }
    if (!strcmp(v, "int8")) { a->quant_grads = 8; return 0; }
    if (!strcmp(v, "int4")) { a->quant_grads = 4; return 0; }
    return set_err(err, errlen, "flag --quantize-grads: '%s' must be none, int8 or int4", v);
}

static int flag_keep_logits(void* p, const char* f, const char* v, char* err, size_t errlen) {
    (void)f;
    Args* a = (Args*)p;
    if (!strcmp(v, "auto")) { a->keep_logits = 0; a->keep_logits_given = 0; return 0; }
    if (strcmp(v, "0") && strcmp(v, "1")) return set_err(err, errlen, "flag --keep-logits: '%s' must be auto, 0 or 1", v);
    a->keep_logits = v[0] - '0';
    a->keep_logits_given = 1;
    return 0;
}

static int flag_node_size(void* p, const char* f, const char* v, char* err, size_t errlen) {
    (void)f;
    long k = 0;
    if (!strcmp(v, "auto")) { ((Args*)p)->node_size = 0; return 0; }
    if (parse_long(v, &k) || k < 1 || k > (1 << 20)) return set_err(err, errlen, "flag --node-size: '%s' must be auto or a rank count >= 1", v);
    ((Args*)p)->node_size = (int)k;
    ((Args*)p)->node_size_given = 1;
    return 0;
}

static int flag_secondary(void* p, const char* f, const char* v, char* err, size_t errlen) {
    (void)f;
    Args* a = (Args*)p;
    if (!strcmp(v, "none")) { a->secondary = 0; return 0; }
    if (!strcmp(v, "node")) { a->secondary = -1; return 0; }
    long k = 0;
    if (parse_long(v, &k) || k < 2 || k > (1 << 20))
        return set_err(err, errlen, "flag --secondary-shard: '%s' must be none, node or a rank count K >= 2", v);
    a->secondary = (int)k;
    return 0;
}

static int flag_offload(void* p, const char* f, const char* v, char* err, size_t errlen) {
    Args* a = (Args*)p;
    (void)f;
    if (!strcmp(v, "none")) { a->offload = OFFLOAD_NONE; a->offload_dir = NULL; return 0; }
    if (!strcmp(v, "host")) {
#ifdef LLMC_CUDA
        a->offload = OFFLOAD_HOST; a->offload_dir = NULL;
        return 0;
#else
        return set_err(err, errlen, "flag --offload-optimizer: 'host' is for the CUDA build (the CPU build's memory is host memory already); use disk:DIR");
#endif
    }
    if (!strncmp(v, "disk:", 5) && v[5]) { a->offload = OFFLOAD_DISK; a->offload_dir = v + 5; return 0; }
    return set_err(err, errlen, "flag --offload-optimizer: '%s' must be none, %sdisk:DIR (a directory)", v,
#ifdef LLMC_CUDA
                   "host or "
#else
                   ""
#endif
                   );
}
static int flag_ledger(void* p, const char* f, const char* v, char* err, size_t errlen) {
    (void)f;
    if (!strcmp(v, "all")) ((Args*)p)->ledger_all = 1;
    else if (!strcmp(v, "rank0")) ((Args*)p)->ledger_all = 0;
    else return set_err(err, errlen, "flag --ledger: '%s' must be rank0 or all", v);
    return 0;
}
static int flag_params(void* p, const char* f, const char* v, char* err, size_t errlen) {
    double d;
    (void)f;
    if (parse_count(v, &d) || d < 1) return set_err(err, errlen, "flag --params: '%s' must be a positive count such as 124M, 1.5B, 70B or 70e9", v);
    ((Args*)p)->est_params = d;
    return 0;
}
static int flag_gpu_mem(void* p, const char* f, const char* v, char* err, size_t errlen) {
    double d;
    (void)f;
    if (parse_double(v, &d) || d < 0) return set_err(err, errlen, "flag --gpu-mem: '%s' must be a non-negative number of GB", v);
    ((Args*)p)->est_gpu_mem = d * 1e9;
    return 0;
}
static int flag_ckpt_dtype(void* p, const char* f, const char* v, char* err, size_t errlen) {
    (void)f;
    if (!strcmp(v, "fp32")) ((Args*)p)->ckpt_version = 3;
    else if (!strcmp(v, "bf16")) ((Args*)p)->ckpt_version = 5;
    else return set_err(err, errlen, "flag --checkpoint-dtype: '%s' must be fp32 or bf16", v);
    return 0;
}
static int flag_zero(void* p, const char* f, const char* v, char* err, size_t errlen) {
    Args* a = (Args*)p;
    long n;
    (void)f;
    if (!strcmp(v, "auto")) { a->zero_auto = 1; return 0; }
    if (parse_long(v, &n) || n < 0 || n > 3) return set_err(err, errlen, "flag -z: '%s' must be an integer in 0..3 or auto", v);
    a->zero_stage = (int)n; a->zero_auto = 0;
    return 0;
}
static int flag_memory_limit(void* p, const char* f, const char* v, char* err, size_t errlen) {
    (void)f;
    if (fit_parse_size(v, &((Args*)p)->memory_limit))
        return set_err(err, errlen, "flag --memory-limit: '%s' must be a size per rank such as 450M, 1.5G or 900Mi (M, G: 1e6, 1e9 bytes; Mi, Gi: 2^20, 2^30)", v);
    return 0;
}
static int flag_link_gbps(void* p, const char* f, const char* v, char* err, size_t errlen) {
    Args* a = (Args*)p;
    char tmp[64];
    (void)f;
    if (strlen(v) >= sizeof(tmp)) return set_err(err, errlen, "flag --link-gbps: '%s' is too long", v);
    snprintf(tmp, sizeof(tmp), "%s", v);
    char* comma = strchr(tmp, ',');
    if (comma) *comma = 0;
    double in = 0, across = 0;
    if (parse_double(tmp, &in) || in <= 0 || (comma && (parse_double(comma + 1, &across) || across <= 0)))
        return set_err(err, errlen, "flag --link-gbps: '%s' must be INSIDE[,ACROSS]: positive Gbit/s inside a node and across nodes", v);
    a->link_inside_gbps = (float)in; a->link_across_gbps = (float)(comma ? across : in);
    return 0;
}
static int flag_dtype(void* p, const char* f, const char* v, char* err, size_t errlen) {
    (void)f;
    if (strcmp(v, "bf16") && strcmp(v, "fp32")) return set_err(err, errlen, "flag --dtype: '%s' must be bf16 or fp32", v);
    ((Args*)p)->est_dtype = v;
    return 0;
}

#define AO(field) offsetof(Args, field)
#define GIVEN(field) (offsetof(Args, field) + 1)
#define I(sec, name, arg, field, lo, hi, given, help) {sec, name, arg, FLAG_INT, AO(field), lo, hi, NULL, given, NULL, help}
#define ID(sec, name, arg, field, lo, hi, def, help) {sec, name, arg, FLAG_INT, AO(field), lo, hi, NULL, 0, def, help}
#define F(sec, name, arg, field, lo, hi, help) {sec, name, arg, FLAG_FLOAT, AO(field), lo, hi, NULL, 0, NULL, help}
#define S(sec, name, arg, field, help) {sec, name, arg, FLAG_STR, AO(field), 0, 0, NULL, 0, NULL, help}
#define SG(sec, name, arg, field, given, help) {sec, name, arg, FLAG_STR, AO(field), 0, 0, NULL, given, NULL, help}
#define FN(sec, name, arg, fn, def, help) {sec, name, arg, FLAG_FN, 0, 0, 0, fn, 0, def, help}
static const Flag FLAGS[] = {
    S("data and model", "-i", "<glob>", train_pattern, "train token shards (llm.c format)"),
    S(NULL, "-j", "<glob>", val_pattern, "validation token shards"),
    SG(NULL, "-e", "<str>", init, GIVEN(init_given), "init: an llm.c checkpoint file, or a descriptor dN: llm.c's GPT-2 sizes for\n"
      "d12 (12 layers, 12 heads, 768 channels), d24 (24, 16, 1024), d36 (36, 20, 1280),\n"
      "d48 (48, 25, 1600); any other N: N layers, N heads, 64*N channels; maxT 1024,\nGPT-2 vocabulary"
      " (with -y 1 and a checkpoint in -o: the model is that checkpoint's;\na file given here is refused, a descriptor must match it);"
      " largest: the largest GPT-2 shape\nwhose predicted peak fits the budget (with --estimate: per stage, with the command)"),
    S(NULL, "-o", "<dir>", output_dir, "output dir: main.log, model checkpoints"),
    S(NULL, "--tokenizer", "<file>", tokenizer_path, "llm.c tokenizer decode file"),
    ID(NULL, "--layers", "<n>", layers, 1, 1000, "from -e", "override the descriptor's layers; with a checkpoint it must agree with its header"),
    ID(NULL, "--heads", "<n>", heads, 1, 10000, "from -e", "override the heads (as --layers)"),
    ID(NULL, "--channels", "<n>", channels, 1, 100000, "from -e", "override the channels (as --layers)"),
    ID(NULL, "--max-seq-len", "<n>", max_seq_len, 1, 1000000, "from -e", "override maxT (as --layers)"),
    ID(NULL, "--vocab", "<n>", vocab, 1, 10000000, "from -e", "override the vocabulary (as --layers)"),
    FN(NULL, "--seed", "<n>", flag_seed, "1337", "seed of the random init and of the data order (--shuffle)"),
    I("batch", "--shuffle", "<0|1>", shuffle, 0, 1, 0, "1: read the training sequences (T tokens each) and shards in a\n"
      "random order seeded by --seed, a new one each epoch, as llm.c does; the\n"
      "same for any rank count with the same global batch, resumable; 0: in file order"),
    I(NULL, "-b", "<n>", B, 1, 1 << 20, GIVEN(B_given), "micro-batch per rank (sequences)"),
    I(NULL, "-t", "<n>", T, 1, 1 << 20, GIVEN(T_given), "sequence length"),
    FN(NULL, "-d", "<n>", flag_total_batch, "B*T*ranks", "total batch in tokens per optimizer step (all ranks); must be a multiple\n"
       "of B*T*ranks; the quotient is the grad accumulation"),
    F("optimizer (AdamW, beta1 0.9, beta2 0.95, eps 1e-8)", "-l", "<f>", lr, 0.0, 10.0, "peak learning rate"),
    I(NULL, "-u", "<n>", warmup, 0, 1 << 30, 0, "warmup steps"),
    F(NULL, "-q", "<f>", final_frac, 0.0, 1.0, "final lr as a fraction of the peak (cosine)"),
    F(NULL, "-c", "<f>", weight_decay, 0.0, 10.0, "weight decay (2-D tensors only)"),
    F(NULL, "--grad-clip", "<f>", grad_clip, 0.0, 1e9, "clip by global grad norm (0: off)"),
    I(NULL, "-x", "<n>", max_steps, 0, 1 << 30, 0, "optimizer steps; 0: load (-e) or init, evaluate, sample, print the ledger\n"
      "and exit (no training, no checkpoint, no train data needed)"),
    I("evaluation and output", "-v", "<n>", val_every, 0, 1 << 30, 0, "val loss every n steps (0: never)"),
    I(NULL, "-m", "<n>", val_steps, 1, 1 << 30, 0, "val sequences of T tokens per evaluation: the first n sequences of the val\n"
      "split in file order (n*T tokens), the same at every rank count and -b;\n"
      "at most the split's distinct sequences"),
    I(NULL, "-s", "<n>", sample_every, 0, 1 << 30, 0, "sample every n steps (0: never)"),
    I(NULL, "-g", "<n>", gen_tokens, 1, 1 << 20, 0, "tokens to generate per sample (< T)"),
    I(NULL, "-n", "<n>", ckpt_every, 0, 1 << 30, 0, "checkpoint every n steps (0: only at the end, with -o)"),
    I(NULL, "--keep-checkpoints", "<K>", keep_ckpts, 0, 1 << 30, 0, "keep only the newest K checkpoints (model + state) in -o: older ones are\n"
      "removed once a newer pair is complete (0: keep every one)"),
    I(NULL, "--overwrite", "<0|1>", overwrite, 0, 1, 0, "1: a fresh run (no -y 1) into an -o that holds checkpoints moves them\n"
      "(model_*, state_*, main.log) into -o's new subfolder earlier_run_<date>\n"
      "first; 0: such a run is refused (resume with -y 1, or give another -o)"),
    S(NULL, "--lock-takeover", "<hosts>", lock_takeover, "comma list of hosts known to be gone (a lost node): a lock of -o held\n"
      "by a run on one of them is taken over (a shared file system keeps a dead\n"
      "client's lock: NFSv4 until its state expires, NFSv3 until it reboots, Lustre until\n"
      "eviction)"),
    FN(NULL, "--checkpoint-dtype", "<fp32|bf16>", flag_ckpt_dtype, "fp32", "model files as llm.c version 3 (fp32) or 5 (bf16, rounded\n"
       "to nearest even; llm.c's CUDA trainer reads only 5; the training state\n"
       "beside it then holds the fp32 master weights, so a resume stays exact)"),
    I(NULL, "-y", "<0|1>", resume, 0, 1, 0, "resume from the latest model_N.bin + state_N.bin in -o (none there: start fresh,\n"
      "from -e); the model's sizes come from that checkpoint unless -e gives a descriptor"),
    FN("ZeRO", "-z", "<0..3|auto>", flag_zero, "1", "zero_stage: 0 DDP, 1 shard optimizer states, 2 + gradients, 3 + params;\n"
       "auto: the fastest configuration that fits every rank's memory, predicted from the plan\n"
       "(stages, --shard-group, --reshard-embedding, --keep-logits, -r 0..3, -b with -d,\n"
       "offload last; a flag you give stays fixed), chosen by rank 0 for all ranks\n"
       "(1 is make train's ZERO too)"),
    I(NULL, "--reshard-after-forward", "<0|1>", reshard_after_forward, 0, 1, GIVEN(reshard_given), "stage 3: free blocks after forward"),
    I(NULL, "--prefetch", "<n>", prefetch, 0, 64, GIVEN(prefetch_given), "stage 3: units gathered ahead of use"),
    I(NULL, "--reshard-embedding", "<0|1>", reshard_embedding, 0, 1, GIVEN(reshard_emb_given),
      "stage 3: gather each wte chunk for every use (1), or keep the whole\n"
      "embedding gathered for the optimizer step (0: less traffic, more memory)\n"
      "(these three do nothing at stages 0-2; given there, a warning says so)"),
    FN(NULL, "--quantize-weights", "<none|int8>", flag_quantize_weights, "none",
       "stage 3: send every weight all-gather as int8 blocks with one fp32 scale each\n"
       "(ZeRO++'s qwZ; every rank computes with the dequantized weights, the optimizer\n"
       "updates the exact shards; changes the numbers: docs/zeropp.md)"),
    I(NULL, "--quantize-weights-block", "<n>", quant_weights_block, 1, 1 << 20, GIVEN(quant_block_given),
      "elements per scale (blocks never straddle a tensor)"),
    FN(NULL, "--secondary-shard", "<none|node|K>", flag_secondary, "none",
       "stage 3: ZeRO++'s hpZ: the ranks of a node (node; any placement, equal\n"
       "numbers per node) or K consecutive ranks\n"
       "keep 1/K of every unit gathered more than once per step after its first\n"
       "all-gather; the later all-gathers of the step run among those K only\n"
       "(the same numbers as --reshard-after-forward 0, bit for bit; memory p Psi/K)"),
    FN(NULL, "--quantize-grads", "<none|int8|int4>", flag_quantize_grads, "none",
       "stage 3: ZeRO++'s qgZ: every grad reduce-scatter as int8 or int4 blocks with\n"
       "an fp32 scale each, an all-to-all inside each node, fp32 sums in rank order,\n"
       "requantized, an all-to-all across the nodes (changes the numbers: docs/zeropp.md)"),
    I(NULL, "--quantize-grads-block", "<n>", quant_grads_block, 1, 1 << 20, GIVEN(quant_grads_block_given),
      "elements per scale of --quantize-grads"),
    FN(NULL, "--node-size", "<auto|L>", flag_node_size, "auto", "ranks per node of the shard group for --secondary-shard node and the two\n"
       "hops of --quantize-grads (auto: from the hosts' names, in any placement;\n"
       "L: runs of L consecutive ranks, to try a hierarchy on one machine)"),
    I(NULL, "--vocab-chunk", "<n>", vocab_chunk, 1, 1 << 24, 0, "rows of wte per vocabulary chunk (the LM head and stage 3 work chunk by chunk)"),
    FN(NULL, "--keep-logits", "<auto|0|1>", flag_keep_logits, "auto", "1: keep every chunk's logits from forward to backward (B*T*Vp); 0: recompute\n"
       "them in backward, chunk by chunk (the same numbers bit for bit; 1 saves 2 C Vp\n"
       "flops per token, 0 the memory); auto: 1 when the run with them fits every\n"
       "rank's memory budget (the fit check's prediction, one verdict for all ranks)"),
    I(NULL, "-r", "<0..3>", recompute, 0, 3, GIVEN(recompute_given), "activation recomputation: 0 keep every activation; 1 recompute GELU in\n"
      "backward, 2 + both LayerNorms (llm.c's -r 1, 2); 3 keep only each block's output\n"
      "and rerun the block's forward in its backward (activation checkpointing);\n"
      "the same numbers bit for bit, less memory, more compute (llm.c's default is 1)"),
    FN(NULL, "--offload-optimizer",
#ifdef LLMC_CUDA
       "<none|disk:DIR|host>",
#else
       "<none|disk:DIR>",
#endif
       flag_offload, "none", "stages 1-3: keep the fp32 master weights and Adam m, v off the backend's\n"
       "memory: disk:DIR streams them unit by unit through a scratch file per rank in\n"
       "DIR (DIR/optim_rank<r>.bin, unlinked at once: it never outlives the run)"
#ifdef LLMC_CUDA
       ";\nhost keeps them in page-locked host memory and runs AdamW on the CPU"
#endif
       "\n(the same numbers as without offload, bit for bit)"),
    ID(NULL, "--shard-group", "<G>", shard_group, 1, 1 << 20, "N (all ranks)", "HSDP: shard over groups of G ranks, runs of G in node-major order (one\n"
      "node when G = ranks per node, in any placement), replicate across the N/G\n"
      "groups (stages 1-3; G must divide N)"),
    I(NULL, "--overlap", "<0|1>", overlap, 0, 1, 0, "run collectives beside computation (CPU: a communication thread)"),
    I(NULL, "--invariant", "<0|1>", invariant, 0, 1, 0, "1: layout-invariant training: the losses, checkpoints and state are bit for bit\n"
      "those of any run of the same model and global batch (-d) on a power-of-two\n"
      "number of ranks, micro-batch and micro-steps (the start-up line says which);\n"
      "every sum over sequences follows one fixed pairwise tree (docs/design.md 13)"),
    FN("memory (docs/estimator.md)", "--memory-limit", "<size>", flag_memory_limit, "cgroup or MemAvailable",
       "this rank's budget (e.g. 450M, 1.5G); else its cgroup's limit / ranks of the node,\n"
       "else MemAvailable / ranks of the node"),
    I(NULL, "--fit-check", "<0|1>", fit_check, 0, 1, 0, "1: refuse, before allocating anything, a configuration whose predicted\n"
      "per-rank peak exceeds the budget (the message says what fits); 0: run anyway"),
    FN(NULL, "--link-gbps", "<in[,across]>", flag_link_gbps, "measured", "-z auto's link rates in Gbit/s inside a node and across nodes\n"
       "(else measured at start-up by a short all-gather)"),
    {NULL, "--calibrate-workspace", "", FLAG_BOOL, AO(calibrate_workspace), 0, 0, NULL, 0, "off",
     "measure the training workspace of this program (make runs it once: build/fit/)"},
    {NULL, "--calibrate-matmul", "", FLAG_BOOL, AO(calibrate_matmul), 0, 0, NULL, 0, "off",
     "time both bf16 matmul paths per shape class and store the faster (make runs it once: build/fit/)"},
    S("timeline", "--trace", "<file>", trace_path, "write a Chrome trace-event JSON timeline (open in Perfetto / chrome://tracing)"),
    FN(NULL, "--trace-steps", "<a:b>", flag_trace_steps, "2:3", "the optimizer steps it covers"),
    FN(NULL, "--ledger", "<rank0|all>", flag_ledger, "rank0", "print the memory ledger for rank 0 or every rank"),
    I(NULL, "--ledger-every", "<n>", ledger_every, 0, 1 << 30, 0, "print the traffic table every n steps (0: only at the end)"),
    F("faults (docs/faults.md)", "--collective-timeout", "<s>", collective_timeout, 0, 1e6,
      "a collective not complete after s seconds ends the job with one line naming\n"
      "the collective, unit, step and the ranks (and nodes) whose data never came\n"
      "(a cut link, a lost node); 0: wait forever. Longer than the slowest checkpoint\n"
      "write; rank 0's value is every rank's"),
    I(NULL, "--straggler-report", "<0|1>", straggler_report, 0, 1, 0, "at the end, per rank: step, compute and wait times, and how long the\n"
      "others waited for its data; names the rank (and node) the others wait for"),
    I(NULL, "--flight-recorder", "<K>", flight_recorder, 0, 1 << 20, 0, "each rank keeps its last K collectives (kind, unit, step, bytes, peers,\n"
      "times, state) and writes them to -o's flight/rank_R.json on a collective\n"
      "timeout, a signal or an abort; python3 dev/flight.py DIR says where the ranks\n"
      "part ways (0: off)"),
    {"estimator (no training, no data)", "--estimate", "", FLAG_BOOL, AO(estimate), 0, 0, NULL, 0, "off",
     "print per-rank model-state memory for stages 0-3 and exit"},
    FN(NULL, "--params", "<n>", flag_params, "from -e", "parameter count: 124M, 1.5B, 70B, 70e9 (else from -e; then the traffic\n"
       "column is the model's own shard plan, else the paper's 2 / 3 Psi)\n"
       "with -e, -b and -t given, the fit check adds the activations"),
    FN(NULL, "--dtype", "<bf16|fp32>", flag_dtype, "bf16", "2+2+12 or 4+4+8 bytes/param"),
    {NULL, "--ranks", "<n>", FLAG_INT, AO(est_ranks), 1, 1 << 30, NULL, 0, "the MPI world size", "data-parallel ranks"},
    FN(NULL, "--gpu-mem", "<f>", flag_gpu_mem, "0", "device memory in GB (1e9 bytes); 0: no fit check"),
};
#undef I
#undef ID
#undef F
#undef S
#undef FN
#define NUM_FLAGS ((int)(sizeof(FLAGS) / sizeof(FLAGS[0])))

static void usage(FILE* out, int world) {
    Args d;
    args_defaults(&d, world);
    flags_usage(out, FLAGS, NUM_FLAGS, &d,
                "usage: mpirun -np N " PROGRAM_PATH " [flags]   (the same flags: ./train_gpt_cpu_bf16, ./train_gpt_cpu (fp32), ./train_gpt (CUDA))\n");
    fprintf(out, "  %-22s this help; --help-markdown: the same as Markdown (docs/flags.md)\n", "-h, --help");
}


/* The model checkpoint and training state of `step` (steps completed; the
   train loader at that step boundary) in -o. Collective. */
static void save_checkpoint(Run* r, int step) {
    const Args* a = &r->a;
    char p[4096];
    intr_phase(INTR_WRITE, "the checkpoint write", step, step);
    snprintf(p, sizeof(p), "%s/model_%08d.bin", a->output_dir, step);
    /* an exit now before the state is complete removes the model too, so
       that only whole pairs stay (released by the state's rename on rank 0,
       by its completion check on the others: cfile_commit) */
    intr_watch_pair(p);   /* an exit (a signal, a failed state write) before the state is complete removes the model too */
    double t0 = wall_seconds();
    gpt2_save_checkpoint(&r->model, p, a->ckpt_version, NULL);
    double t1 = wall_seconds();
    if (r->comm->rank == 0) printf("wrote checkpoint %s (llm.c version %d, %s) in %.2f s\n", p, a->ckpt_version, a->ckpt_version == 5 ? "bf16" : "fp32", t1 - t0);
    snprintf(p, sizeof(p), "%s/state_%08d.bin", a->output_dir, step);
    StateRun run = {a->max_steps, a->warmup, a->lr, a->final_frac, a->total_batch, a->T, kernel_paths_word()};
    state_save(&r->model, p, step, &r->train, a->seed, a->ckpt_version == 5 /* a bf16 model file: keep the exact master weights */, &run, NULL);
    if (intr_state.pair > 0) { intr_unwatch(intr_state.pair - 1); intr_state.pair = 0; }   /* cfile_commit released it; this only makes sure */
    r->saved_step = step;
    rescue_written(step);   /* HSDP: a rescue after this writes only a newer step */
    double t2 = wall_seconds();
    if (r->comm->rank == 0) printf("wrote state %s in %.2f s (the checkpoint with its state: %.2f s)\n", p, t2 - t1, t2 - t0);
    if (a->keep_ckpts > 0 && r->comm->rank == 0) {   /* the pair of `step` is complete on every rank (state_save's last collective) */
        char gone[600];
        int n = state_prune(a->output_dir, step, a->keep_ckpts, gone, sizeof(gone));
        if (n) printf("removed the checkpoint%s of step%s %s (--keep-checkpoints %d: the newest %d stay)\n", n > 1 ? "s" : "", n > 1 ? "s" : "",
                      gone, a->keep_ckpts, a->keep_ckpts);
    }
    fflush(stdout);
}

/* Before step `step` (and after the last): evaluation, a sample, a
   checkpoint with its training state, as their flags say. Returns the
   signal that stopped it (the ranks agreed: at a forward of the
   evaluation or the sample, or after the checkpoint), 0 when none. */
static int periodic(Run* r, int step, int last) {
    const Args* a = &r->a;
    int ckpt = a->output_dir && step > r->start_step ? step : -1, ran = 0, stop = 0;
    r->comm->phase = PHASE_OTHER;
    if (r->have_val && (step % a->val_every == 0 || last)) {
        intr_phase(INTR_FORWARD, "evaluation", step, ckpt);
        ran = 1;
        float vl = evaluate(&r->model, &r->val, r->val_seqs, r->comm, &stop);
        if (stop) return stop;
        long ntok = r->val_seqs * a->T;
        if (r->comm->rank == 0 && a->max_steps == 0)
            printf("val loss %.6f of the model %s (%ld tokens; -x 0: evaluated, not trained)\n", vl, r->from_ckpt ? a->init : "as initialised", ntok);
        else if (r->comm->rank == 0) printf("val loss %.6f at step %d (%ld tokens)\n", vl, step, ntok);
        fflush(stdout);
        if (r->logf) { fprintf(r->logf, "step %d val_loss %.6f val_tokens %ld\n", step, vl, ntok); fflush(r->logf); }
    }
    if (a->sample_every > 0 && ((step > 0 && step % a->sample_every == 0) || last)) {
        intr_phase(INTR_FORWARD, "the sample", step, ckpt);
        ran = 1;
        if ((stop = sample(&r->model, &r->tok, r->have_tok, a->gen_tokens, a->seed, step)) != 0) return stop;
    }
    if (a->output_dir && step > r->start_step && ((a->ckpt_every > 0 && step % a->ckpt_every == 0) || last)) { save_checkpoint(r, step); ran = 1; }
    return ran ? comm_agree_interrupt(r->comm) : 0;   /* a signal during the checkpoint write (or after the last forward) */
}

typedef struct { double loss, norm, ms, opt_ms, comm_ms, wait_ms; float lr; } StepStats;

/* Test hook (LLMC_TEST_HANG=R:S[:silent][:reduce|:update][,R:S...]): rank
   R stops in step S and never goes on, as a rank that is somewhere else (a
   hung file system, a debugger, a lost node that still holds its
   connections): the others' collectives time out. Where (`where`, the
   caller's point): at the step's start (0, the default), before the
   gradient reduction (1, ":reduce": after forward and backward, so that
   the others wait in the reduction, HSDP's replica all-reduce on the
   communication thread), or after the optimizer update (2, ":update": the
   others wait in the loss's all-reduce). It polls the signal flag
   (interrupt.h) and writes its flight record when a signal comes
   (":silent": it does not, as a rank spinning in a kernel). */
static void test_hang(Comm* c, int step, int where) {
    static int at = -2, silent = 0, at_where = 0;
    if (at == -2) {
        at = -1;
        const char* e = getenv("LLMC_TEST_HANG");
        for (const char* p = e; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
            int rr = -1, ss = -1;
            if (sscanf(p, "%d:%d", &rr, &ss) == 2 && rr == c->rank) {
                at = ss;
                const char* end = strchr(p, ',');
                const char* sl = strstr(p, ":silent");
                silent = sl && (!end || sl < end);
                const char* rd = strstr(p, ":reduce");
                const char* up = strstr(p, ":update");
                at_where = rd && (!end || rd < end) ? 1 : up && (!end || up < end) ? 2 : 0;
            }
        }
    }
    if (step != at || where != at_where) return;
    static const char* names[3] = {"at the start of", "before the gradient reduction of", "after the optimizer update of"};
    fprintf(stderr, "test hook LLMC_TEST_HANG: rank %d stops %s step %d%s\n", c->rank, names[where], step, silent ? " (silent)" : "");
    fflush(stderr);
    int dumped = 0;
    for (;;) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
        if (!silent && !dumped && intr_pending()) {
            char d[256];
            snprintf(d, sizeof(d), "%s while stopped by the test hook LLMC_TEST_HANG %s step %d", intr_signame(intr_pending()), names[where], step);
            flight_dump(intr_signame(intr_pending()), d, comm_my_node(), step);
            dumped = 1;
        }
    }
}

/* Test hook (LLMC_TEST_MPI_ERROR=R:S): rank R, at the start of step S,
   makes an MPI call that fails (a send to rank world_size, which does not
   exist: MPI_ERR_RANK), so that the error handler's end of the rank
   (comm_mpi_error, comm_watch.h) can be checked without killing a peer. */
static void test_mpi_error(Comm* c, int step) {
    static int at = -2;   /* the step of this rank's failing call, -1: none (parsed once) */
    if (at == -2) {
        const char* e = getenv("LLMC_TEST_MPI_ERROR");
        int rr = -1, ss = -1;
        at = e && sscanf(e, "%d:%d", &rr, &ss) == 2 && rr == c->rank ? ss : -1;
    }
    if (step != at) return;
    fprintf(stderr, "test hook LLMC_TEST_MPI_ERROR: rank %d sends to rank %d in step %d\n", c->rank, c->world_size, step);
    fflush(stderr);
    int x = 0;
    MPI_Send(&x, 1, MPI_INT, c->world_size, 0, MPI_COMM_WORLD);
}

/* One optimizer step (0-based `step`): A micro-steps of forward and
   backward over this rank's slice of the global batch, the engine's
   remaining reductions, then clip + AdamW on the own shard. */
static StepStats train_step(Run* r, int step) {
    const Args* a = &r->a;
    GPT2* m = &r->model;
    char err[ERRLEN] = "";
    StepStats s;
    r->comm->phase = PHASE_TRAIN;
    comm_watch.step = step + 1;   /* for a timeout's message */
    tracer.on = a->trace_path && step + 1 >= a->trace_first && step + 1 <= a->trace_last;
    trace_begin(TRACE_TID_COMPUTE, -1, "step %d", step + 1);
    if (tracer.on) zero_trace_memory(&m->engine);
    double busy0, wait0, busy1, wait1;
    backend_comm_seconds(&busy0, &wait0);
    double t0 = wall_seconds();
    gpt2_begin_step(m);
    double loss = 0.0;
    double* lsum = a->invariant ? (double*)calloc_or_die((size_t)r->accum, sizeof(double), "losses") : NULL;
    rescue_note(step, &r->train);   /* HSDP: the loader at the boundary of `step`, for a rescue before this step's update */
    test_hang(r->comm, step + 1, 0);
    test_mpi_error(r->comm, step + 1);
    intr_test_slow("step", r->comm->rank);   /* test hook LLMC_TEST_SLOW=step:S (interrupt.h) */
    for (int micro = 0; micro < r->accum; micro++) {
        flight.micro = micro;
        state_log_position(&r->train, step + 1, micro);
        dataloader_next_batch(&r->train, err, ERRLEN);
        comm_check_all(r->comm, err);
        loss += gpt2_forward(m, r->train.inputs, r->train.targets, a->B, a->T, r->dloss);
        if (a->invariant) lsum[micro] = m->loss_sum;
        gpt2_backward(m, a->B, a->T);
    }
    flight.micro = 0;
    test_hang(r->comm, step + 1, 1);
    gpt2_reduce_grads(m);
    r->opt.lr = lr_schedule(a->lr, step, a->warmup, a->max_steps, a->final_frac);
    trace_begin(TRACE_TID_COMPUTE, -1, "optimizer");
    double t_opt = wall_seconds();
    s.norm = zero_optimizer_step(&m->engine, &r->opt, step + 1);
    rescue_note(step + 1, &r->train);   /* the own shard now holds step + 1 (engine.steps_applied), the loader its boundary */
    test_hang(r->comm, step + 1, 2);
    s.opt_ms = 1000.0 * (wall_seconds() - t_opt);
    trace_end(TRACE_TID_COMPUTE);
    if (a->invariant) {   /* each micro-step's sum over the ranks, then over the micro-steps: the global tree */
        comm_allreduce_sum_host(r->comm, lsum, r->accum);
        for (int h = 1; h < r->accum; h *= 2)
            for (int q = 0; q + h < r->accum; q += 2 * h) lsum[q] = lsum[q] + lsum[q + h];
        s.loss = lsum[0] / ((double)a->total_batch);
        free(lsum);
    } else {
        comm_allreduce_sum_host(r->comm, &loss, 1);
        s.loss = loss / ((double)r->accum * r->N);
    }
    backend_synchronize();
    s.ms = 1000.0 * (wall_seconds() - t0);
    trace_end(TRACE_TID_COMPUTE);
    tracer.on = 0;
    backend_comm_seconds(&busy1, &wait1);
    s.comm_ms = 1000.0 * (busy1 - busy0); s.wait_ms = 1000.0 * (wait1 - wait0);
    s.lr = r->opt.lr;
    return s;
}

/* The step's line (rank 0) and main.log row; a non-finite loss ends the
   run; the traffic table every --ledger-every steps. */
static void log_step(Run* r, int step, const StepStats* s) {
    const Args* a = &r->a;
    char commtxt[192] = "";
    if (s->comm_ms > 0.0 && s->comm_ms >= s->wait_ms)
        snprintf(commtxt, sizeof(commtxt), " | comm %.1f ms, waited %.1f ms (%.0f%% hidden)", s->comm_ms, s->wait_ms,
                 100.0 * (1.0 - s->wait_ms / s->comm_ms));
    else if (s->comm_ms > 0.0)   /* a wait also covers waking the communication thread and its hand-offs (comm_thread.h) */
        snprintf(commtxt, sizeof(commtxt), " | comm %.1f ms, waited %.1f ms (0%% hidden; the waits also cover the hand-offs to the communication thread)",
                 s->comm_ms, s->wait_ms);
    if (step > r->start_step) { r->total_ms += s->ms; r->total_opt_ms += s->opt_ms; r->total_wait_ms += s->wait_ms; r->timed++; } /* the first step of a process warms up: not timed */
    double tps = (double)a->total_batch / (s->ms / 1000.0);
    if (r->comm->rank == 0) {
        printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s | mem %.1f MB%s\n", step + 1, a->max_steps,
               s->loss, s->lr, s->norm, s->ms, tps, r->model.ledger.current / 1e6, commtxt);
        fflush(stdout);
    }
    if (r->logf) { fprintf(r->logf, "step %d train_loss %.6f lr %.6e norm %.6f ms %.3f tok_per_s %.1f comm_ms %.3f wait_ms %.3f compute_ms %.3f\n",
                           step + 1, s->loss, s->lr, s->norm, s->ms, tps, s->comm_ms, s->wait_ms, s->ms - s->wait_ms); fflush(r->logf); }
    if (!isfinite(s->loss)) comm_fatal(r->comm, "loss became %f at step %d (lower -l?)", s->loss, step + 1);
    if (a->ledger_every > 0 && (step + 1) % a->ledger_every == 0 && step + 1 < a->max_steps) {
        int dummy = 0;
        print_report_all_ranks(&r->model, a->ledger_all, 1, step + 1 - r->start_step, &dummy);
    }
}

/* A signal stopped the run (interrupt.h; every rank agreed at the end of
   step `step`, or at a forward of the evaluation or sample before step
   `step`, or after its checkpoint): the checkpoint and state of that step
   in -o (none without -o; none when no step ran since the start; not again
   when written), the flight record, one line from rank 0 with how long
   after the signal it exits, then every rank finalizes MPI and exits with
   128 + the signal's number (130 SIGINT, 143 SIGTERM, 138 SIGUSR1: a
   shell's code for a process that signal ended, distinct from 1, an
   error, and 2, a ledger mismatch). */
static void interrupted(Run* r, int step, int sig) {
    const Args* a = &r->a;
    Comm* c = r->comm;
    c->phase = PHASE_OTHER;
    int fresh = step > r->start_step;
    if (a->output_dir && fresh && r->saved_step != step) save_checkpoint(r, step);
    char line[512], when[96];
    if (a->output_dir && fresh) snprintf(line, sizeof(line), "interrupted at step %d: wrote checkpoint %d; resume with -y 1", step, step);
    else if (!fresh && a->max_steps == 0) snprintf(line, sizeof(line), "interrupted at step %d: -x 0, nothing to write", step);
    else if (!fresh && step > 0 && a->output_dir) snprintf(line, sizeof(line), "interrupted at step %d: no step since the resume, checkpoint %d is the latest; resume with -y 1", step, step);
    else if (!fresh) snprintf(line, sizeof(line), "interrupted at step %d: no step completed, nothing written", step);
    else snprintf(line, sizeof(line), "interrupted at step %d: no -o, so nothing was written (the steps are lost: give -o DIR to keep them)", step);
    if (intr_pending()) snprintf(when, sizeof(when), "%s, exiting %.1f s after it", intr_signame(sig), intr_since_s());
    else snprintf(when, sizeof(when), "%s to another rank", intr_signame(sig));
    if (c->rank == 0) { printf("%s (%s)\n", line, when); fflush(stdout); }
    if (r->logf) { fprintf(r->logf, "step %d interrupted %s\n", step, intr_signame(sig)); fclose(r->logf); r->logf = NULL; }
    flight_dump("interrupted", line, comm_my_node(), step);
    backend_finalize(c);
    comm_finalize(c);
    exit(128 + sig);
}

/* After the last step: the trace, the traffic table, the peaks and the
   average; frees everything. Returns the exit code: 2 when any rank's
   ledger or traffic differed from the plan. */
static int finish(Run* r) {
    const Args* a = &r->a;
    Comm* comm = r->comm;
    char err[ERRLEN] = "";
    GPT2* m = &r->model;
    if (a->trace_path) {
        size_t mcap = 1024 + 32 * (size_t)m->plan.num_units, ml;
        char* meta = (char*)malloc_or_die(mcap, "trace metadata");
        snprintf(meta, mcap, "\"zero_stage\": %d, \"num_ranks\": %d, \"shard_group\": %d, \"reshard_after_forward\": %d, "
                 "\"reshard_embedding\": %d, \"prefetch\": %d, \"overlap\": %d, \"backend\": \"%s\", \"steps\": \"%d:%d\", \"unit_names\": [",
                 a->zero_stage, r->N, comm->group_size, a->reshard_after_forward, a->reshard_embedding, a->prefetch, a->overlap,
                 BACKEND_NAME, a->trace_first, a->trace_last);
        for (int u = 0; u < m->plan.num_units; u++) {
            char nm[32];
            gpt2_unit_name(&m->layout, u, nm, sizeof(nm));
            ml = strlen(meta);
            snprintf(meta + ml, mcap - ml, "%s\"%s\"", u ? ", " : "", nm);
        }
        ml = strlen(meta);
        snprintf(meta + ml, mcap - ml, "]");
        trace_write(a->trace_path, comm->rank, r->N, meta, err, ERRLEN);
        free(meta);
        comm_check_all(comm, err);
        if (comm->rank == 0) printf("wrote trace %s (steps %d..%d; open it in https://ui.perfetto.dev or chrome://tracing)\n",
                                    a->trace_path, a->trace_first, a->trace_last);
    }
    int traffic_bad = 0;
    if (a->max_steps > r->start_step) print_report_all_ranks(m, a->ledger_all, 1, a->max_steps - r->start_step, &traffic_bad);
    else if (comm->rank == 0) printf("no optimizer steps to run (-x %d%s): no traffic table, no checkpoint written\n", a->max_steps,
                                     r->start_step > 0 ? ", reached by the resumed checkpoint" : "");
    if (comm->rank == 0) {
        printf("peak: ledger %.1f MB (gathered units in use at most %.1f MB), backend workspace %.1f MB outside the plan, "
#ifdef LLMC_CUDA
               "device memory used %.1f MB on rank 0\n",
#else
               "process resident %.1f MB on rank 0\n",
#endif
               m->ledger.peak / 1e6, m->ledger.gathered_peak / 1e6, backend_internal_bytes() / 1e6, backend_peak_process_bytes() / 1e6);
    }
    /* the fit check's prediction against what the ranks used (the largest) */
    unsigned long long used = backend_peak_process_bytes(), used_max = used;
    MPI_Allreduce(&used, &used_max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    if (comm->rank == 0) {
        if (r->fit.mem.peak > 0 && used_max > 0)
            printf("fit check: predicted peak %.1f MB per rank, used %.1f MB (the largest %s over the ranks): used / predicted = %.3f; budget %.1f MB (%s)\n",
                   r->fit.mem.peak / 1e6, used_max / 1e6, backend_host_counts() ? "VmHWM" : "device memory", (double)used_max / (double)r->fit.mem.peak,
                   r->budget / 1e6, r->budget_source);
        unsigned long long copies = backend_matmul_copy_bytes();
        /* printed by every bf16 CPU run, also when the primitive runs every class and both sides are 0 B */
#if defined(LLMC_BF16) && !defined(__CUDACC__)
        const int bf16_cpu = 1;
#else
        const int bf16_cpu = 0;
#endif
        if (r->fit.mem.kernel_scratch || copies || bf16_cpu)
            printf("fit check: the kernels' scratch of these shapes %.4g MB predicted (in the workspace); of it the bf16 matmuls' buffers "
                   "(fp32 operand copies, oneDNN's scratchpad, attention's packed heads): predicted %llu B, allocated %llu B (rank 0)\n", r->fit.mem.kernel_scratch / 1e6, r->fit.mem.matmul_copies, copies);
        if (r->timed > 0) {
            double tps = (double)a->total_batch * r->timed / (r->total_ms / 1000.0);
            /* flops per token: 6 Psi (forward + backward of every weight) + 12 L C T (attention scores and values) */
            double fpt = 6.0 * (double)m->plan.num_parameters + 12.0 * r->cfg.num_layers * (double)r->cfg.channels * a->T;
            printf("average %.1f ms per optimizer step (steps %d..%d, %d timed), %.0f tokens/s, %.1f GFLOP/s achieved (6*Psi + 12*L*C*T = %.3g flops/token); "
                   "of it the optimizer (grad norm, clip, AdamW%s) %.1f ms\n",
                   r->total_ms / r->timed, r->start_step + 2, a->max_steps, r->timed, tps, tps * fpt / 1e9, fpt,
                   (a->zero_stage == 1 || a->zero_stage == 2) && r->N > 1 ? ", the params' all-gather" : "", r->total_opt_ms / r->timed);
        }
    }
    if (a->straggler_report)
        comm_straggler_report(r->timed ? r->total_ms / r->timed : 0.0, r->timed ? r->total_wait_ms / r->timed : 0.0, r->timed);
    if (r->logf) fclose(r->logf);
    dataloader_free(&r->train);
    if (r->have_val) dataloader_free(&r->val);
    if (r->have_tok) tokenizer_free(&r->tok);
    gpt2_free(m);
    int bad = r->ledger_bad + traffic_bad, anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    backend_finalize(comm);
    comm_finalize(comm);
    return anybad ? 2 : 0;
}

int main(int argc, char** argv) {
    backend_preinit(argv);
    Comm comm;
    comm_init(&comm, &argc, &argv);
    char err[ERRLEN] = "";
    Args a;
    int want_help = 0, want_md = 0;
    args_defaults(&a, comm.world_size);
    flags_parse(FLAGS, NUM_FLAGS, &a, argc, argv, err, ERRLEN, &want_help, &want_md);
    comm_check_all(&comm, err);
    comm_agree_watch(&a.collective_timeout, &a.flight_recorder);   /* rank 0's values on every rank */
    flight_init(a.flight_recorder, a.output_dir, comm.rank, comm.world_size);
    comm_watch.out_dir = a.output_dir;
    intr_install(comm.rank);
    if (a.straggler_report) comm_straggler_init(comm.world_size);
    agree_flags(&comm, argc, argv);   /* every rank was started with the same flags (before anything is decided from them) */
    if (want_help || want_md) {
        Args d;
        args_defaults(&d, comm.world_size);
        if (comm.rank == 0 && want_help) usage(stdout, comm.world_size);
        if (comm.rank == 0 && want_md)
            flags_markdown(stdout, FLAGS, NUM_FLAGS, &d, "Flags of the trainer",
                           "Generated by `" PROGRAM_PATH " --help-markdown` (`make docs`) from the flag table in train_gpt.cu; "
                           "the same flags for `./train_gpt_cpu` (fp32), `./train_gpt_cpu_bf16` and `./train_gpt` (CUDA). "
                           "A flag given twice takes the last value. The CUDA build's `--offload-optimizer` also takes `host` "
                           "(page-locked host memory, AdamW on the CPU).");
        comm_finalize(&comm);
        return 0;
    }
    if (a.estimate) {
        intr_phase_no_training("--estimate", "an estimate, not a training run: nothing written");
        return run_estimate(&a, &comm);
    }
    if (a.calibrate_workspace) {
        intr_phase_no_training("--calibrate-workspace", "a calibration, not a training run: its measuring steps stopped, "
                                                        "no workspace file written, a previous one kept");
        return run_calibration(&comm);
    }
    if (a.calibrate_matmul) {
        intr_phase_no_training("--calibrate-matmul", "a calibration, not a training run: its timing of the matmul paths stopped, "
                                                     "no calibration file written, a previous one kept");
        return run_matmul_calibration(&comm);
    }

    Run r;
    setup_run(&r, &a, &comm);
    {   /* HSDP with -o: a shard group that outlives a lost node writes the checkpoint of its last step (rescue.h) */
        StateRun run = {r.a.max_steps, r.a.warmup, r.a.lr, r.a.final_frac, r.a.total_batch, r.a.T, kernel_paths_word()};
        rescue_init(&comm, &r.model, &r.train, r.a.output_dir, r.a.ckpt_version, r.a.ckpt_version == 5, r.a.seed, &run, r.start_step,
                    r.saved.step >= 0 ? (int)r.saved.step : -1);
    }
    print_banner(&r);
    for (int step = r.start_step; step <= r.a.max_steps; step++) {
        int last = step == r.a.max_steps;
        int sig = periodic(&r, step, last);   /* eval, sample, checkpoint; a signal stops them at the next forward */
        if (sig) interrupted(&r, step, sig);
        if (last) break;
        intr_phase(INTR_STEP, "step", step + 1, r.a.output_dir ? step + 1 : -1);
        comm_watch_step_begin();              /* --straggler-report: this step's waits */
        StepStats s = train_step(&r, step);   /* forward + backward per micro-step, reduce, AdamW */
        comm_watch_step_end(step > r.start_step);   /* a process's first step waits for the others' start-up */
        log_step(&r, step, &s);
        sig = comm_agree_interrupt(&comm);   /* a signal on any rank: every rank stops here */
        if (sig) interrupted(&r, step + 1, sig);
    }
    intr_phase(INTR_FINISH, "writing the trace and the tables", r.a.max_steps, -1);
    return finish(&r);
}
