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
*/
#ifdef __CUDACC__
#include "llmc/cuda/backend.cuh"
#else
#include "llmc/cpu/backend.h"
#endif
#include <stddef.h>
#include <sys/stat.h>
#include <malloc.h>
#include <unistd.h>
#include "llmc/flags.h"
#include "llmc/gpt.h"
#include "llmc/gpt_fit.h"
#include "llmc/checkpoint.h"
#include "llmc/state.h"
#include "llmc/rescue.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/schedulers.h"
#include "llmc/trace.h"

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

#if defined(__CUDACC__)
#define PROGRAM_PATH "./train_gpt"
#elif defined(LLMC_BF16)
#define PROGRAM_PATH "./train_gpt_cpu_bf16"
#else
#define PROGRAM_PATH "./train_gpt_cpu"
#endif

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
#ifdef __CUDACC__
        a->offload = OFFLOAD_HOST; a->offload_dir = NULL;
        return 0;
#else
        return set_err(err, errlen, "flag --offload-optimizer: 'host' is for the CUDA build (the CPU build's memory is host memory already); use disk:DIR");
#endif
    }
    if (!strncmp(v, "disk:", 5) && v[5]) { a->offload = OFFLOAD_DISK; a->offload_dir = v + 5; return 0; }
    return set_err(err, errlen, "flag --offload-optimizer: '%s' must be none, %sdisk:DIR (a directory)", v,
#ifdef __CUDACC__
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
#ifdef __CUDACC__
       "<none|disk:DIR|host>",
#else
       "<none|disk:DIR>",
#endif
       flag_offload, "none", "stages 1-3: keep the fp32 master weights and Adam m, v off the backend's\n"
       "memory: disk:DIR streams them unit by unit through a scratch file per rank in\n"
       "DIR (DIR/optim_rank<r>.bin, unlinked at once: it never outlives the run)"
#ifdef __CUDACC__
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
#ifdef __CUDACC__
    if (a->invariant) return set_err(err, errlen, "--invariant 1: the CUDA build does not have the layout-invariant kernels yet (the fp32 CPU program does)");
#endif
#ifdef __CUDACC__
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
   disk:DIR is given; a flag given stays fixed) on --ranks ranks at -b, -t.
   "Largest": the most parameters (ties: the smaller peak). Prints, per
   stage, that shape, its peak and flags, the command that trains it, and
   the next size up (the fewest parameters above it) with its smallest
   peak. 0 with *out (the best over the stages) or 1 when nothing fits. */
typedef struct { int L, C, NH, found; FitCandidate c; double params; } LargestShape;
static int estimate_largest_stage(const Args* a, int s, unsigned long long budget, unsigned long long baseline, unsigned long long loaders,
                                  LargestShape* best, LargestShape* next) {
    memset(best, 0, sizeof(*best)); memset(next, 0, sizeof(*next));
    char err[ERRLEN];
    int maxT = a->max_seq_len > 0 ? a->max_seq_len : 1024, V = a->vocab > 0 ? a->vocab : 50257;
    for (int L = 1; L <= 48; L++)
        for (int C = 64; C <= 1600; C += 64) {
            GPT2Config cfg = {maxT, V, (int)round_up((size_t)V, 128), L, C / 64, C};
            double params = (double)gpt2_count_parameters(&cfg);
            FitContext x;
            memset(&x, 0, sizeof(x));
            x.cfg = &cfg; x.base = model_options(a, 1); x.base.zero_stage = s;
            x.N = a->est_ranks; x.B = a->B; x.T = a->T > maxT ? maxT : a->T; x.total_batch = (long)x.B * x.T * x.N;
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
    if (!a->keep_logits_given && k < n) k += (size_t)snprintf(out + k, n - k, " --keep-logits %d", c->opt.keep_logits);
    if (!a->recompute_given && k < n) k += (size_t)snprintf(out + k, n - k, " -r %d", c->opt.recompute);
    if (c->opt.offload == OFFLOAD_DISK && k < n) snprintf(out + k, n - k, " --offload-optimizer disk:%s", a->offload_dir ? a->offload_dir : "DIR");
}

static int run_estimate_largest(Args* a, Comm* comm) {
    char err[ERRLEN] = "";
    if (a->est_params > 0) set_err(err, ERRLEN, "--estimate -e largest searches the model: --params has no place beside it");
    comm_check_all(comm, err);
    backend_init(comm);   /* the baseline a run measures includes the backend's libraries */
    FitBudget bud;
    memset(&bud, 0, sizeof(bud));
    if (a->memory_limit) { bud.bytes = a->memory_limit; snprintf(bud.source, sizeof(bud.source), "--memory-limit: %.4g GB per rank", a->memory_limit / 1e9); }
    else bud = fit_budget(0, comm->local_size, fit_own_unreclaimable());
    if (comm->rank == 0) {
        printf("largest model per stage: GPT-2 shapes (L = 1..48 blocks, C = 64..1600 channels in steps of 64, heads of 64 channels, "
               "maxT %d, vocabulary %d) on %d rank%s, B=%d T=%d, in %.4g GB per rank (%s); the full predicted peak of a run of this build "
               "(%s), --keep-logits%s, -r%s%s\n", a->max_seq_len > 0 ? a->max_seq_len : 1024, a->vocab > 0 ? a->vocab : 50257,
               a->est_ranks, a->est_ranks > 1 ? "s" : "", a->B, a->T, bud.bytes / 1e9, bud.source, PROGRAM_PATH,
               a->keep_logits_given ? " as given" : " 0 and 1", a->recompute_given ? " as given" : " 0..3",
               a->offload == OFFLOAD_DISK ? ", the optimizer offloaded to disk as a last resort" : "");
        for (int s = 0; s < 4; s++) {
            LargestShape b, nx;
            if (estimate_largest_stage(a, s, bud.bytes, 0, 0, &b, &nx)) { printf("  -z %d: nothing fits (not even L=1 C=64)\n", s); continue; }
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

/* ------------------------------------------------------------------------ */
/* --calibrate-workspace: the training workspace of this program and build  */

/* What the backend's libraries take during training beyond the ledger (the
   fit check's "workspace", llmc/fit.h): one rank trains d6 (B=4, T=256,
   random tokens, no data files) for 3 steps; the largest VmRSS after a step
   minus the VmRSS before the model was allocated minus the ledger is
   written to build/fit/<program>.workspace beside the binary. make runs it
   once per program and build. */
static int run_calibration(Comm* comm) {
    char err[ERRLEN] = "";
    if (comm->world_size != 1) set_err(err, ERRLEN, "--calibrate-workspace: run it as one process (it measures one rank)");
    comm_check_all(comm, err);
    backend_agree_kernels(comm);   /* the matmul paths a run takes (the calibration file when there is one) */
    backend_init(comm);
    GPT2Config cfg;
    int bad = 0;
    gpt2_config_descriptor("d6", &cfg, &bad, err, ERRLEN);
    const int B = 4, T = 256;
    GPT2Options o = gpt2_default_options();
    unsigned long long base = fit_status_bytes("VmRSS:");
    GPT2 m;
    if (gpt2_init(&m, &cfg, comm, &o, B, T, err, ERRLEN) == 0) gpt2_init_random(&m, 1337);
    comm_check_all(comm, err);
    int* tok = (int*)malloc_or_die((size_t)(B * T + 1) * sizeof(int), "calibration tokens");
    Rng rg;
    rng_seed(&rg, 7, 11);
    for (int i = 0; i <= B * T; i++) tok[i] = (int)(rng_uniform(&rg) * cfg.vocab_size) % cfg.vocab_size;
    AdamWConfig opt = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    long long extra = 0;
    for (int step = 0; step < 3; step++) {
        gpt2_begin_step(&m);
        gpt2_forward(&m, tok, tok + 1, B, T, 1.0f / (B * T));
        gpt2_backward(&m, B, T);
        gpt2_reduce_grads(&m);
        zero_optimizer_step(&m.engine, &opt, step + 1);
        long long e = (long long)fit_status_bytes("VmRSS:") - (long long)base - (long long)m.ledger.current;
        if (e > extra) extra = e;
    }
    /* the matmul scratch the fit check models from a run's shapes (the bf16
       program's fp32 operand copies) is not part of the calibrated figure */
    unsigned long long copies = backend_matmul_copy_bytes(), predicted_copies = 0;
    unsigned long long scratch = backend_predict_kernel_scratch(cfg.num_layers, cfg.channels, cfg.num_heads, m.layout.chunk_rows, m.layout.last_rows,
                                                                B, T, 0, &predicted_copies);
    extra -= (long long)(scratch - predicted_copies + copies);   /* (the attention buffers as modelled, the copies as allocated) */
    char path[4200];
    unsigned long long dummy;
    fit_calibrated_workspace(&dummy, path, sizeof(path));
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash) { *slash = 0; state_mkdir_p(dir); }
    char tmp[4300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int slot = intr_watch_tmp(tmp);   /* written whole or not at all: a signal's exit removes the .tmp (interrupt.h) */
    FILE* f = fopen(tmp, "w");
    int bad_w = !f;
    if (f) { bad_w = fprintf(f, "%lld\n", extra) < 0; bad_w |= fclose(f) != 0; }
    if (bad_w || rename(tmp, path) != 0) { set_err(err, ERRLEN, "--calibrate-workspace: cannot write %s (%s)", path, strerror(errno)); unlink(tmp); }
    intr_unwatch(slot);
    comm_check_all(comm, err);
    printf("calibrated: training workspace %.2f MB beyond the ledger%s (d6, B=%d, T=%d, 1 rank, 3 steps, %s): wrote %s\n", extra / 1e6,
           scratch ? " and the modelled kernel scratch" : "", B, T, backend_matmul_desc(), path);
    if (scratch) printf("calibrated: (the kernels' scratch of this shape, predicted for each run from its shapes: %.2f MB, of it the fp32 copies of "
                        "the bf16 matmul operands %.2f MB)\n", (scratch - predicted_copies + copies) / 1e6, copies / 1e6);
    free(tok);
    gpt2_free(&m);
    backend_finalize(comm);
    comm_finalize(comm);
    return 0;
}

/* --calibrate-matmul: the bf16 program times both matmul paths (oneDNN's
   bf16 primitive, the fp32-copy path) on every shape class of d6 and 124M
   and writes the calibration file build/fit/train_gpt_cpu_bf16.matmul
   beside the binary (llmc/cpu/matmul_choice.h); every later start on this
   CPU and build reads it. One process. */
static int run_matmul_calibration(Comm* comm) {
    char err[ERRLEN] = "";
    if (comm->world_size != 1) set_err(err, ERRLEN, "--calibrate-matmul: run it as one process (it measures one rank's cores)");
    comm_check_all(comm, err);
    if (backend_calibrate_kernels(comm, err, ERRLEN)) comm_check_all(comm, err);
    comm_check_all(comm, err);
    comm_finalize(comm);
    return 0;
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

/* Mean loss over the first nseq sequences of the val split (its file
   order: dataloader_read_seqs), the same tokens at every rank count. They
   are dealt as global micro-batches of N x B sequences, rank r taking
   sequences j*N*B + r*B .. + B-1 of batch j; in the last batch some ranks
   get fewer than B or none (a rank with none forwards one sequence of
   token 0 and does not count it: stage 3 needs every rank at the gathers).
   The loss is the mean over all nseq*T tokens: each forward's mean times its
   sequence count, summed in double and over the ranks in rank order
   (comm_allreduce_sum_host), divided by nseq. A read error does not stop
   the loop (the others would wait at the next gather): it is reported
   collectively after it. A signal (interrupt.h) stops it at the next
   forward: before each, the ranks agree (comm_agree_interrupt: a signal to
   any one rank stops all at the same forward); then *stop is the signal
   and the loss is not computed (0). */
static float evaluate(GPT2* m, DataLoader* val, long nseq, Comm* comm, int* stop) {
    char err[ERRLEN] = "";
    long NB = (long)comm->world_size * m->B, batches = (nseq + NB - 1) / NB;
    double s = 0.0;
    /* --invariant 1: each sequence's loss sum (double, in token order) at its
       place in the val set, zero elsewhere; the all-reduce adds only +0.0 to
       each (exact in any order), and the sum runs in sequence order: the
       printed val loss does not depend on N or B */
    double* seq_sum = m->opt.invariant ? (double*)calloc_or_die((size_t)nseq, sizeof(double), "val loss per sequence") : NULL;
    intr_test_slow("evaluation", comm->rank);
    for (long j = 0; j < batches; j++) {
        if ((*stop = comm_agree_interrupt(comm)) != 0) { zero_release_all(&m->engine); free(seq_sum); return 0.0f; }
        long first = j * NB + (long)comm->rank * m->B, n = nseq - first;
        if (n > m->B) n = m->B;
        if (n > 0 && !err[0] && dataloader_read_seqs(val, (size_t)first, (int)n, err, ERRLEN) == 0) {
            s += (double)gpt2_forward(m, val->inputs, val->targets, (int)n, m->T, 0.0f) * (double)n;
            for (long b = 0; seq_sum && b < n; b++) {
                double v = 0.0;
                for (int t = 0; t < m->T; t++) v += m->host_losses[(size_t)b * m->T + t];
                seq_sum[first + b] = v;
            }
        } else {
            memset(val->inputs, 0, (size_t)m->T * sizeof(int));
            memset(val->targets, 0, (size_t)m->T * sizeof(int));
            gpt2_forward(m, val->inputs, val->targets, 1, m->T, 0.0f);
        }
    }
    comm_check_all(comm, err);
    zero_release_all(&m->engine); /* stage 3: the next training step gathers afresh */
    if (seq_sum) {
        for (long i0 = 0; i0 < nseq; i0 += 1 << 20) comm_allreduce_sum_host(comm, seq_sum + i0, (int)(nseq - i0 < (1 << 20) ? nseq - i0 : 1 << 20));
        s = 0.0;
        for (long i = 0; i < nseq; i++) s += seq_sum[i];
        free(seq_sum);
        return (float)(s / ((double)nseq * (double)m->T));
    }
    comm_allreduce_sum_host(comm, &s, 1);
    return (float)(s / (double)nseq);
}

/* Sample gen tokens after <|endoftext|>, every rank in lockstep (stage 3
   needs all ranks for the gathers); rank 0 prints. A signal stops it at
   the next forward, as evaluate: returns the signal (0: complete). */
static int sample(GPT2* m, Tokenizer* tok, int have_tok, int gen, unsigned long long seed, int step) {
    int stop = 0;
    int T = m->T;
    int eot = have_tok ? (int)tok->eot_token : 50256;
    if (eot >= m->config.vocab_size) eot = 0;
    if (gen > T - 1) gen = T - 1;
    int* toks = (int*)malloc_or_die((size_t)T * sizeof(int), "sample tokens");
    float* probs = (float*)malloc_or_die((size_t)m->config.vocab_size * sizeof(float), "sample probs");
    for (int i = 0; i < T; i++) toks[i] = eot;
    Rng r;
    rng_seed(&r, seed, 1000003ULL + (unsigned long long)step);
    int V = m->config.vocab_size;
    if (m->comm->rank == 0) printf("sample at step %d: ", step);
    Utf8Stream utf8; /* whole UTF-8 characters only: a token may end inside one */
    utf8_stream_init(&utf8);
    intr_test_slow("sample", m->comm->rank);
    for (int t = 1; t <= gen; t++) {
        if ((stop = comm_agree_interrupt(m->comm)) != 0) break;
        gpt2_forward(m, toks, NULL, 1, t, 0.0f);
        backend_floatX_to_floats(probs, m->last_logits, (size_t)V);
        float mx = probs[0];
        for (int v = 1; v < V; v++) if (probs[v] > mx) mx = probs[v];
        double sum = 0.0;
        for (int v = 0; v < V; v++) { probs[v] = expf(probs[v] - mx); sum += probs[v]; }
        double u = rng_uniform(&r) * sum, cdf = 0.0;
        int next = V - 1;
        for (int v = 0; v < V; v++) { cdf += probs[v]; if (u < cdf) { next = v; break; } }
        toks[t] = next;
        if (m->comm->rank == 0) {
            if (have_tok) tokenizer_print_utf8(tok, (uint32_t)next, &utf8, stdout);
            else printf("%d ", next);
        }
    }
    if (m->comm->rank == 0) { utf8_stream_finish(&utf8, stdout); printf("%s\n", stop ? " [stopped]" : ""); fflush(stdout); }
    zero_release_all(&m->engine);
    free(toks); free(probs);
    return stop;
}

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
            if (estimate_largest_stage(&s, st, bud.bytes, hi, loaders, &b, &n2)) continue;
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
    if (why) set_err(err, ERRLEN, "--invariant 1 with %d ranks, -b %d, %d micro-step%s, -z %d: %s", r->N, a->B, r->accum, r->accum > 1 ? "s" : "",
                     a->zero_stage, why);
    comm_check_all(r->comm, err);
#ifndef __CUDACC__
    cpu_inv_T = a->T;
#endif
#if defined(LLMC_BF16) && !defined(__CUDACC__)
    cpu_gemm_set_all(1);   /* one path for every class whatever the thread count: the fp32-copy path, on fixed tiles (matmul.h) */
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
        state_lock_output_dir(comm, a->output_dir);    /* one run at a time in -o: a second one is refused before it writes */
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

/* The matmul paths this run takes, as the state records them (header word
   26, llmc/state.h): the bf16 CPU program's per class; the fp32 program's
   one path; 0 (not recorded) in the CUDA build. */
static long long kernel_paths_word(void) {
#if defined(__CUDACC__)
    return 0;
#elif defined(LLMC_BF16)
    cpu_gemm_init();
    long long w = STATE_PATHS_RECORDED | STATE_PATHS_BF16;
    for (int k = 0; k < CPU_MM_NUM; k++) if (!cpu_gemm_state.fp32[k]) w |= 1LL << k;
    return w;
#else
    return STATE_PATHS_RECORDED;
#endif
}
/* ... as text: "the fp32 program's sgemm" or "fwd:fp32,dinp:primitive,..." */
static void kernel_paths_text(long long w, char* out, size_t n) {
    if (!(w & STATE_PATHS_BF16)) { snprintf(out, n, "the fp32 program's sgemm"); return; }
    size_t k = 0;
    out[0] = 0;
    static const char* const names[] = {"fwd", "dinp", "dweight", "lm_fwd", "lm_dinp", "lm_dweight", "attention"};   /* llmc/cpu/matmul.h's classes */
    for (int j = 0; j < 7 && k < n; j++) k += (size_t)snprintf(out + k, n - k, "%s%s:%s", j ? "," : "", names[j], (w >> j) & 1 ? "primitive" : "fp32");
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
        if (r->have_train) printf("data: train %zu tokens in %d shard(s) (%s), %s; -x %d steps x %ld tokens = %.4g epochs of it",
                                  r->train.num_tokens, r->train.num_shards, a->train_pattern,
                                  a->shuffle ? "shuffled (--shuffle 1: sequences and shards in a seeded random order, new each epoch)" : "in file order (--shuffle 0)",
                                  a->max_steps, a->total_batch, (double)a->max_steps * (double)a->total_batch / (double)r->train.num_tokens);
        else printf("data: no training (-x 0)");
        if (r->have_val) printf(", val %zu tokens (%s); each evaluation reads its first %ld sequences of T=%d = %ld tokens (%s%d), "
                                "at every rank count and -b", r->val.num_tokens, a->val_pattern, r->val_seqs, a->T, r->val_seqs * a->T,
                                r->val_capped ? "all it holds, fewer than -m " : "-m ", a->val_steps);
        printf("\n");
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
    intr_state.pair = 1 + intr_watch_tmp(p);
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
#ifdef __CUDACC__
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
        if (r->fit.mem.kernel_scratch || copies)
            printf("fit check: the kernels' scratch of these shapes %.4g MB predicted (in the workspace); of it the fp32 copies of the bf16 "
                   "matmul operands: predicted %llu B, allocated %llu B (rank 0)\n", r->fit.mem.kernel_scratch / 1e6, r->fit.mem.matmul_copies, copies);
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
    {   /* every rank was started with the same flags (before anything is decided from them) */
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
        comm_agree_config(&comm, "flags", flags);
    }
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
    if (a.estimate) { intr_phase(INTR_EXIT, "--estimate", 0, -1); return run_estimate(&a, &comm); }
    if (a.calibrate_workspace) { intr_phase(INTR_EXIT, "--calibrate-workspace", 0, -1); return run_calibration(&comm); }
    if (a.calibrate_matmul) { intr_phase(INTR_EXIT, "--calibrate-matmul", 0, -1); return run_matmul_calibration(&comm); }

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
