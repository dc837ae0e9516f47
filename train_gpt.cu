/*
 train_gpt.cu: the trainer. Trains GPT-2 on llm.c token shards on one or
 many ranks (MPI), data parallel with the model states sharded by ZeRO stage
 -z 0|1|2|3. The same source builds the CPU program (a C compiler, fp32,
 OpenMP, BLAS, MPI: ./train_gpt_cpu) and the CUDA program (nvcc, bf16,
 cuBLASLt, NCCL: ./train_gpt); only the backend header differs.

 One optimizer step: for each of A micro-steps every rank reads its slice
 of the global micro-batch, runs forward and backward over the units (the
 engine gathers / reduces as its stage says), then the engine reduces what
 is left, clips by the global grad norm, runs AdamW on the rank's range and
 refreshes the params. Every run prints the shard plan's predicted bytes per
 category beside the bytes allocated, and at the end the traffic counted on
 every collective beside the traffic predicted.

 Run ./train_gpt_cpu -h for the flags.
*/
#ifdef __CUDACC__
#include "llmc/cuda/backend.cuh"
#else
#include "llmc/cpu/backend.h"
#endif
#include <sys/stat.h>
#include <unistd.h>
#include "llmc/gpt.h"
#include "llmc/checkpoint.h"
#include "llmc/state.h"
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
    long total_batch;            /* tokens per optimizer step, all ranks */
    float lr, final_frac, weight_decay, grad_clip;
    int warmup, max_steps, val_every, val_steps, sample_every, gen_tokens, ckpt_every;
    int zero_stage, reshard_after_forward, prefetch;
    int reshard_embedding, vocab_chunk, keep_logits, overlap;
    int shard_group;             /* HSDP: ranks per shard group (-1: all) */
    const char* trace_path;      /* --trace FILE */
    int trace_first, trace_last; /* --trace-steps a:b (optimizer steps, 1-based, inclusive) */
    int resume;                  /* -y 1: continue from the latest model_*.bin + state_*.bin in -o */
    int offload;                 /* --offload-optimizer: OFFLOAD_NONE, _HOST (CUDA build) or _DISK */
    const char* offload_dir;     /* disk:DIR */
    int ledger_all, ledger_every;
    int B_given, T_given;        /* -b / -t on the command line (the estimator adds activations then) */
    int reshard_given, prefetch_given, reshard_emb_given; /* stage-3 flags on the command line (warned about at stages 0-2) */
    int ckpt_version;            /* --checkpoint-dtype: 3 (fp32) or 5 (bf16) */
    int shuffle;                 /* --shuffle: train batches in a seeded random order (1) or file order (0) */
    unsigned long long seed;
    /* architecture overrides (-1: from descriptor / checkpoint) */
    int layers, heads, channels, max_seq_len, vocab;
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

static void usage(FILE* out) {
    fprintf(out,
"usage: mpirun -np N " PROGRAM_PATH " [flags]   (the same flags: ./train_gpt_cpu_bf16, ./train_gpt_cpu (fp32), ./train_gpt (CUDA))\n"
"data and model\n"
"  -i <glob>   train token shards (llm.c format)          default data/brown/brown_train_*.bin\n"
"  -j <glob>   validation token shards                    default data/brown/brown_val_*.bin\n"
"  -e <str>    init: an llm.c checkpoint file, or a descriptor dN: llm.c's GPT-2 sizes for\n"
"              d12 (12 layers, 12 heads, 768 channels), d24 (24, 16, 1024), d36 (36, 20, 1280),\n"
"              d48 (48, 25, 1600); any other N: N layers, N heads, 64*N channels; maxT 1024,\n"
"              GPT-2 vocabulary  default d2\n"
"  -o <dir>    output dir: main.log, model checkpoints     default none\n"
"  --tokenizer <file>  llm.c tokenizer decode file          default data/gpt2_tokenizer.bin\n"
"  --layers/--heads/--channels/--max-seq-len/--vocab <n>  override the descriptor; with a\n"
"              checkpoint they must agree with its header   default from -e\n"
"  --seed <n>  seed of the random init and of the data order (--shuffle)  default 1337\n"
"batch\n"
"  --shuffle <0|1>  1: read the training sequences (T tokens each) and shards in a\n"
"              random order seeded by --seed, a new one each epoch, as llm.c does; the\n"
"              same for any rank count with the same global batch, resumable; 0: in\n"
"              file order  default 1\n"
"  -b <n>      micro-batch per rank (sequences)            default 4\n"
"  -t <n>      sequence length                             default 128\n"
"  -d <n>      total batch in tokens per optimizer step (all ranks); must be a multiple\n"
"              of B*T*ranks; the quotient is the grad accumulation  default B*T*ranks\n"
"optimizer (AdamW, beta1 0.9, beta2 0.95, eps 1e-8)\n"
"  -l <f>      peak learning rate                          default 2e-3\n"
"  -u <n>      warmup steps                                default 20\n"
"  -q <f>      final lr as a fraction of the peak (cosine)   default 0.1\n"
"  -c <f>      weight decay (2-D tensors only)             default 0.1\n"
"  --grad-clip <f>  clip by global grad norm (0: off)      default 1.0\n"
"  -x <n>      optimizer steps; 0: load (-e) or init, evaluate, sample, print the ledger\n"
"              and exit (no training, no checkpoint, no train data needed)  default 1700\n"
"evaluation and output\n"
"  -v <n>      val loss every n steps (0: never)           default 300\n"
"  -m <n>      val batches (global, ranks*B*T tokens each) per evaluation, from the start\n"
"              of the val split; at most the split's distinct batches  default 10\n"
"  -s <n>      sample every n steps (0: never)             default 850\n"
"  -g <n>      tokens to generate per sample (< T)         default 64\n"
"  -n <n>      checkpoint every n steps (0: only at the end, with -o)  default 0\n"
"  --checkpoint-dtype <fp32|bf16>  model files as llm.c version 3 (fp32) or 5 (bf16, rounded\n"
"              to nearest even; llm.c's CUDA trainer reads only 5; the training state\n"
"              beside it then holds the fp32 master weights, so a resume stays exact)  default fp32\n"
"  -y <0|1>    resume from the latest model_N.bin + state_N.bin in -o (none there: start fresh)  default 0\n"
"ZeRO\n"
"  -z <0..3>   zero_stage: 0 DDP, 1 shard optimizer states, 2 + gradients, 3 + params\n"
"              default 1 (as make train's ZERO)\n"
"  --reshard-after-forward <0|1>  stage 3: free blocks after forward  default 1\n"
"  --prefetch <n>  stage 3: units gathered ahead of use      default 1\n"
"  --reshard-embedding <0|1>  stage 3: gather each wte chunk for every use (1), or keep\n"
"              the whole embedding gathered for the optimizer step (0: less traffic, more memory)  default 1\n"
"              (these three do nothing at stages 0-2; given there, a warning says so)\n"
"  --vocab-chunk <n>  rows of wte per vocabulary chunk (the LM head and stage 3 work chunk by chunk)  default 8192\n"
"  --keep-logits <0|1>  keep every chunk's logits from forward to backward (B*T*Vp) instead of\n"
"              recomputing them in backward (same numbers, less compute, more memory)  default 0\n"
"  --offload-optimizer <none|disk:DIR"
#ifdef __CUDACC__
"|host"
#endif
">  stages 1-3: keep the fp32 master weights and Adam m, v\n"
"              off the backend's memory: disk:DIR streams them unit by unit through a scratch file\n"
"              per rank in DIR (DIR/optim_rank<r>.bin, unlinked at once: it never outlives the run)"
#ifdef __CUDACC__
";\n              host keeps them in page-locked host memory and runs AdamW on the CPU"
#endif
"\n              (the same numbers as without offload, bit for bit)  default none\n"
"  --shard-group <G>  HSDP: shard over groups of G consecutive ranks (one node when G = ranks\n"
"              per node), replicate across the N/G groups (stages 1-3; G must divide N)  default N\n"
"  --overlap <0|1>  run collectives beside computation (CPU: a communication thread)  default 1\n"
"timeline\n"
"  --trace <file>  write a Chrome trace-event JSON timeline (open in Perfetto / chrome://tracing)\n"
"  --trace-steps <a:b>  the optimizer steps it covers                   default 2:3\n"
"  --ledger <rank0|all>  print the memory ledger for rank 0 or every rank  default rank0\n"
"  --ledger-every <n>    print the traffic table every n steps (0: only at the end)  default 0\n"
"estimator (no training, no data)\n"
"  --estimate  print per-rank model-state memory for stages 0-3 and exit\n"
"  --params <n>  parameter count: 124M, 1.5B, 70B, 70e9 (else from -e; then the traffic\n"
"              column is the model's own shard plan, else the paper's 2 / 3 Psi)\n"
"              with -e, -b and -t given, the fit check adds the activations\n"
"  --dtype <bf16|fp32>  2+2+12 or 4+4+8 bytes/param          default bf16\n"
"  --ranks <n>   data-parallel ranks                        default the MPI world size\n"
"  --gpu-mem <f> device memory in GB (1e9 bytes)             default 0 (no fit check)\n"
"  -h          this help\n");
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

static int parse_args(int argc, char** argv, Args* a, int world, char* err, size_t errlen, int* want_help) {
    memset(a, 0, sizeof(*a));
    a->train_pattern = "data/brown/brown_train_*.bin";
    a->val_pattern = "data/brown/brown_val_*.bin";
    a->init = "d2"; a->output_dir = NULL; a->tokenizer_path = "data/gpt2_tokenizer.bin";
    a->B = 4; a->T = 128; a->total_batch = -1;
    a->lr = 2e-3f; a->final_frac = 0.1f; a->weight_decay = 0.1f; a->grad_clip = 1.0f;
    a->warmup = 20; a->max_steps = 1700; a->val_every = 300; a->val_steps = 10; a->sample_every = 850; a->gen_tokens = 64;
    a->ckpt_every = 0; a->zero_stage = 1; /* the same as make train's ZERO */ a->reshard_after_forward = 1; a->prefetch = 1;
    a->reshard_embedding = 1; a->vocab_chunk = 8192; a->keep_logits = 0; a->overlap = 1;
    a->shard_group = -1; a->trace_path = NULL; a->trace_first = 2; a->trace_last = 3;
    a->seed = 1337; a->layers = a->heads = a->channels = a->max_seq_len = a->vocab = -1;
    a->est_dtype = "bf16"; a->est_ranks = world;
    a->ckpt_version = 3; a->shuffle = 1;
    *want_help = 0;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) { *want_help = 1; return 0; }
        if (!strcmp(f, "--estimate")) { a->estimate = 1; continue; }
        static const char* known[] = {"-i", "-j", "-e", "-o", "--tokenizer", "-b", "-t", "-d", "-l", "-u", "-q", "-c", "--grad-clip",
            "-x", "-v", "-m", "-s", "-g", "-n", "-y", "-z", "--reshard-after-forward", "--prefetch", "--ledger-every", "--layers", "--heads",
            "--reshard-embedding", "--vocab-chunk", "--keep-logits", "--shard-group", "--overlap", "--trace", "--trace-steps",
            "--offload-optimizer",
            "--channels", "--max-seq-len", "--vocab", "--ranks", "--seed", "--ledger", "--params", "--gpu-mem", "--dtype", "--checkpoint-dtype", "--shuffle"};
        int is_known = 0;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++) if (!strcmp(f, known[k])) is_known = 1;
        if (!is_known) return set_err(err, errlen, "unknown flag '%s' (see -h)", f);
        if (i + 1 >= argc) return set_err(err, errlen, "flag %s needs a value (see -h)", f);
        const char* v = argv[++i];
        if (!v[0]) return set_err(err, errlen, "flag %s: the value must not be empty", f);
        long n = 0; double d = 0;
#define INTFLAG(name, field, lo, hi) if (!strcmp(f, name)) { if (parse_long(v, &n) || n < (lo) || n > (hi)) return set_err(err, errlen, "flag %s: '%s' must be an integer in %ld..%ld", f, v, (long)(lo), (long)(hi)); field = (int)n; continue; }
#define FLOATFLAG(name, field, lo, hi) if (!strcmp(f, name)) { if (parse_double(v, &d) || d < (lo) || d > (hi)) return set_err(err, errlen, "flag %s: '%s' must be a number in %g..%g", f, v, (double)(lo), (double)(hi)); field = (float)d; continue; }
        if (!strcmp(f, "-i")) { a->train_pattern = v; continue; }
        if (!strcmp(f, "-j")) { a->val_pattern = v; continue; }
        if (!strcmp(f, "-e")) { a->init = v; continue; }
        if (!strcmp(f, "-o")) { a->output_dir = v; continue; }
        if (!strcmp(f, "--tokenizer")) { a->tokenizer_path = v; continue; }
        if (!strcmp(f, "-b")) a->B_given = 1;
        if (!strcmp(f, "-t")) a->T_given = 1;
        if (!strcmp(f, "--reshard-after-forward")) a->reshard_given = 1;
        if (!strcmp(f, "--prefetch")) a->prefetch_given = 1;
        if (!strcmp(f, "--reshard-embedding")) a->reshard_emb_given = 1;
        INTFLAG("-b", a->B, 1, 1 << 20)
        INTFLAG("-t", a->T, 1, 1 << 20)
        if (!strcmp(f, "-d")) { if (parse_long(v, &n) || n < 1) return set_err(err, errlen, "flag -d: '%s' must be a positive integer (tokens)", v); a->total_batch = n; continue; }
        FLOATFLAG("-l", a->lr, 0.0, 10.0)
        INTFLAG("-u", a->warmup, 0, 1 << 30)
        FLOATFLAG("-q", a->final_frac, 0.0, 1.0)
        FLOATFLAG("-c", a->weight_decay, 0.0, 10.0)
        FLOATFLAG("--grad-clip", a->grad_clip, 0.0, 1e9)
        INTFLAG("-x", a->max_steps, 0, 1 << 30)
        INTFLAG("-v", a->val_every, 0, 1 << 30)
        INTFLAG("-m", a->val_steps, 1, 1 << 30)
        INTFLAG("-s", a->sample_every, 0, 1 << 30)
        INTFLAG("-g", a->gen_tokens, 1, 1 << 20)
        INTFLAG("-n", a->ckpt_every, 0, 1 << 30)
        INTFLAG("-y", a->resume, 0, 1)
        INTFLAG("--shuffle", a->shuffle, 0, 1)
        INTFLAG("-z", a->zero_stage, 0, 3)
        INTFLAG("--reshard-after-forward", a->reshard_after_forward, 0, 1)
        INTFLAG("--prefetch", a->prefetch, 0, 64)
        INTFLAG("--reshard-embedding", a->reshard_embedding, 0, 1)
        INTFLAG("--vocab-chunk", a->vocab_chunk, 1, 1 << 24)
        INTFLAG("--keep-logits", a->keep_logits, 0, 1)
        INTFLAG("--shard-group", a->shard_group, 1, 1 << 20)
        INTFLAG("--overlap", a->overlap, 0, 1)
        if (!strcmp(f, "--trace")) { a->trace_path = v; continue; }
        if (!strcmp(f, "--trace-steps")) {
            const char* colon = strchr(v, ':');
            long x = 0, y = 0;
            char tmp[64];
            if (!colon || strlen(v) >= sizeof(tmp)) return set_err(err, errlen, "flag --trace-steps: '%s' must be a:b (first and last optimizer step, 1-based)", v);
            memcpy(tmp, v, (size_t)(colon - v)); tmp[colon - v] = 0;
            if (parse_long(tmp, &x) || parse_long(colon + 1, &y) || x < 1 || y < x)
                return set_err(err, errlen, "flag --trace-steps: '%s' must be a:b with 1 <= a <= b", v);
            a->trace_first = (int)x; a->trace_last = (int)y;
            continue;
        }
        INTFLAG("--ledger-every", a->ledger_every, 0, 1 << 30)
        INTFLAG("--layers", a->layers, 1, 1000)
        INTFLAG("--heads", a->heads, 1, 10000)
        INTFLAG("--channels", a->channels, 1, 100000)
        INTFLAG("--max-seq-len", a->max_seq_len, 1, 1000000)
        INTFLAG("--vocab", a->vocab, 1, 10000000)
        INTFLAG("--ranks", a->est_ranks, 1, 1 << 30)
        if (!strcmp(f, "--seed")) { if (parse_long(v, &n) || n < 0) return set_err(err, errlen, "flag --seed: '%s' must be a non-negative integer", v); a->seed = (unsigned long long)n; continue; }
        if (!strcmp(f, "--offload-optimizer")) {
            if (!strcmp(v, "none")) { a->offload = OFFLOAD_NONE; a->offload_dir = NULL; }
            else if (!strcmp(v, "host")) {
#ifdef __CUDACC__
                a->offload = OFFLOAD_HOST; a->offload_dir = NULL;
#else
                return set_err(err, errlen, "flag --offload-optimizer: 'host' is for the CUDA build (the CPU build's memory is host memory already); use disk:DIR");
#endif
            } else if (!strncmp(v, "disk:", 5) && v[5]) { a->offload = OFFLOAD_DISK; a->offload_dir = v + 5; }
            else return set_err(err, errlen, "flag --offload-optimizer: '%s' must be none, %sdisk:DIR (a directory)", v,
#ifdef __CUDACC__
                                "host or "
#else
                                ""
#endif
                                );
            continue;
        }
        if (!strcmp(f, "--ledger")) {
            if (!strcmp(v, "all")) a->ledger_all = 1; else if (!strcmp(v, "rank0")) a->ledger_all = 0;
            else return set_err(err, errlen, "flag --ledger: '%s' must be rank0 or all", v);
            continue;
        }
        if (!strcmp(f, "--params")) { if (parse_count(v, &d) || d < 1) return set_err(err, errlen, "flag --params: '%s' must be a positive count such as 124M, 1.5B, 70B or 70e9", v); a->est_params = d; continue; }
        if (!strcmp(f, "--gpu-mem")) { if (parse_double(v, &d) || d < 0) return set_err(err, errlen, "flag --gpu-mem: '%s' must be a non-negative number of GB", v); a->est_gpu_mem = d * 1e9; continue; }
        if (!strcmp(f, "--checkpoint-dtype")) {
            if (!strcmp(v, "fp32")) a->ckpt_version = 3; else if (!strcmp(v, "bf16")) a->ckpt_version = 5;
            else return set_err(err, errlen, "flag --checkpoint-dtype: '%s' must be fp32 or bf16", v);
            continue;
        }
        if (!strcmp(f, "--dtype")) {
            if (strcmp(v, "bf16") && strcmp(v, "fp32")) return set_err(err, errlen, "flag --dtype: '%s' must be bf16 or fp32", v);
            a->est_dtype = v; continue;
        }
#undef INTFLAG
#undef FLOATFLAG
        return set_err(err, errlen, "unknown flag '%s' (see -h)", f);
    }
    /* Stage 0 keeps the whole optimizer on every rank: offloading N identical
       copies multiplies the host or disk bytes and the I/O by N for nothing;
       ZeRO-Offload starts from the sharded optimizer (stage 1 has the same
       traffic as stage 0). */
    if (!a->estimate && a->offload != OFFLOAD_NONE && a->zero_stage == 0)
        return set_err(err, errlen, "--offload-optimizer %s%s: needs -z 1, 2 or 3 (stage 0 replicates the optimizer states on every rank; "
                       "offloading N identical copies is not ZeRO-Offload: use -z 1, which moves the same bytes per step)",
                       a->offload == OFFLOAD_DISK ? "disk:" : "host", a->offload == OFFLOAD_DISK ? a->offload_dir : "");
    return 0;
}

/* Model config from -e (checkpoint or dN) and the override flags. */
static int resolve_config(const Args* a, GPT2Config* c, int* from_checkpoint, char* err, size_t errlen) {
    const char* e = a->init;
    *from_checkpoint = 0;
    if (e[0] == 'd' && e[1] >= '0' && e[1] <= '9') {
        long depth;
        if (parse_long(e + 1, &depth) || depth < 1 || depth > 200) return set_err(err, errlen, "flag -e: descriptor '%s' must be dN with N in 1..200", e);
        /* llm.c's names for the GPT-2 sizes; any other dN: N layers, N heads, 64N channels */
        static const int named[4][4] = {{12, 12, 12, 768}, {24, 24, 16, 1024}, {36, 36, 20, 1280}, {48, 48, 25, 1600}};
        c->num_layers = (int)depth; c->num_heads = (int)depth; c->channels = 64 * (int)depth;
        for (int k = 0; k < 4; k++)
            if (named[k][0] == depth) { c->num_layers = named[k][1]; c->num_heads = named[k][2]; c->channels = named[k][3]; }
        c->max_seq_len = 1024; c->vocab_size = 50257;
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

/* Mean loss over val_steps batches of the validation set, all ranks. */
static float evaluate(GPT2* m, DataLoader* val, int steps, Comm* comm) {
    char err[ERRLEN] = "";
    double s = 0.0;
    dataloader_reset(val);
    for (int i = 0; i < steps; i++) {
        if (dataloader_next_batch(val, err, ERRLEN)) break;
        s += gpt2_forward(m, val->inputs, val->targets, m->B, m->T, 0.0f);
    }
    comm_check_all(comm, err);
    zero_release_all(&m->engine); /* stage 3: the next training step gathers afresh */
    comm_allreduce_sum_host(comm, &s, 1);
    return (float)(s / ((double)steps * comm->world_size));
}

/* Sample gen tokens after <|endoftext|>, every rank in lockstep (stage 3
   needs all ranks for the gathers); rank 0 prints. */
static void sample(GPT2* m, Tokenizer* tok, int have_tok, int gen, unsigned long long seed, int step) {
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
    for (int t = 1; t <= gen; t++) {
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
    if (m->comm->rank == 0) { utf8_stream_finish(&utf8, stdout); printf("\n"); fflush(stdout); }
    zero_release_all(&m->engine);
    free(toks); free(probs);
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

/* The memory ledger of rank 0, or of every rank in rank order (--ledger all);
   *bad += the categories where this rank's allocation differs from the plan. */
static void print_ledger_all_ranks(GPT2* m, int all, int* bad) {
    char* text = NULL; size_t n = 0;
    FILE* f = open_memstream(&text, &n);
    if (!f) comm_fatal(m->comm, "open_memstream failed for the ledger text");
    if (all || m->comm->rank == 0) *bad += zero_print_memory(f, &m->plan, &m->ledger);
    fclose(f);
    print_in_rank_order(m->comm, all, text, n);
    free(text);
}

/* The traffic table of rank 0, or of every rank in rank order. */
static void print_traffic_all_ranks(GPT2* m, int all, int steps, int* bad) {
    char* text = NULL; size_t n = 0;
    FILE* f = open_memstream(&text, &n);
    if (!f) comm_fatal(m->comm, "open_memstream failed for the traffic text");
    if (all || m->comm->rank == 0) *bad += zero_print_traffic(f, &m->plan, m->comm, steps) + zero_print_offload_traffic(f, &m->engine, steps);
    fclose(f);
    print_in_rank_order(m->comm, all, text, n);
    free(text);
}

/* The model's execution options from the flags (one place: the run and
   the estimator's plans). */
static GPT2Options model_options(const Args* a, int accum) {
    GPT2Options o = gpt2_default_options();
    o.zero_stage = a->zero_stage; o.reshard_after_forward = a->reshard_after_forward; o.prefetch = a->prefetch;
    o.reshard_embedding = a->reshard_embedding; o.vocab_chunk = a->vocab_chunk; o.keep_logits = a->keep_logits;
    o.overlap = a->overlap; o.grad_accum_steps = accum; o.offload = a->offload;
    return o;
}

int main(int argc, char** argv) {
    backend_preinit(argv);
    Comm comm;
    comm_init(&comm, &argc, &argv);
    char err[ERRLEN] = "";
    Args a;
    int want_help = 0;
    parse_args(argc, argv, &a, comm.world_size, err, ERRLEN, &want_help);
    comm_check_all(&comm, err);
    if (want_help) { if (comm.rank == 0) usage(stdout); comm_finalize(&comm); return 0; }

    GPT2Config cfg;
    int from_ckpt = 0;
    if (a.estimate) {
        double psi = a.est_params;
        int known = psi <= 0; /* no --params: the model of -e (a checkpoint or dN) */
        if (known) {
            resolve_config(&a, &cfg, &from_ckpt, err, ERRLEN);
            comm_check_all(&comm, err);
            psi = (double)gpt2_count_parameters(&cfg);
        }
        int bf16 = !strcmp(a.est_dtype, "bf16"), pb = bf16 ? 2 : 4;
        ZeroEstimateInfo info = {NULL, NULL, -1.0, NULL};
        double traffic[4];
        char tsrc[512], asrc[512];
        if (known) {
            /* the traffic a run of this model would count: the shard plan a
               run builds (gpt2_plan_init), for each stage; the embedding-row
               all-gather depends on B x T */
            if (a.T_given && a.T > cfg.max_seq_len) set_err(err, ERRLEN, "-t %d: sequence length must be in 1..%d (the model's max_seq_len)", a.T, cfg.max_seq_len);
            comm_check_all(&comm, err);
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
            comm_check_all(&comm, err);
            snprintf(tsrc, sizeof(tsrc), "-e %s (L=%d NH=%d C=%d Vp=%d) on %d rank%s, B=%d T=%d per rank%s, 1 micro-step per step, "
                     "reshard_after_forward %d, reshard_embedding %d",
                     a.init, cfg.num_layers, cfg.num_heads, cfg.channels, cfg.padded_vocab_size, a.est_ranks, a.est_ranks > 1 ? "s" : "",
                     a.B, a.T, a.B_given && a.T_given ? "" : " (the -b/-t defaults)", a.reshard_after_forward, a.reshard_embedding);
            info.traffic_psi = traffic; info.traffic_source = tsrc;
            if (a.B_given && a.T_given) {
                mopt.zero_stage = a.zero_stage;
                info.activation_bytes = (double)gpt2_activation_bytes(&cfg, &lay, &mopt, a.B, a.T);
                snprintf(asrc, sizeof(asrc), "-e %s, B=%d, T=%d (%d-byte activations of this build, as its memory ledger counts them)",
                         a.init, a.B, a.T, (int)sizeof(floatX));
                info.activation_source = asrc;
            }
        }
        if (comm.rank == 0) zero_estimate_print(stdout, psi, a.est_ranks, pb, pb, bf16 ? 12 : 8, a.est_gpu_mem, &info);
        if (comm.rank == 0 && a.shard_group > 0)
            printf("note: --shard-group %d is not modelled here: the table shards over all %d ranks\n", a.shard_group, a.est_ranks);
        comm_finalize(&comm);
        return 0;
    }

    /* shard groups (HSDP) and overlap, before the backend starts its streams / thread */
    int G = a.shard_group > 0 ? a.shard_group : comm.world_size;
    if (comm.world_size % G != 0)
        set_err(err, ERRLEN, "--shard-group %d: must divide the number of ranks %d", G, comm.world_size);
    else if (G != comm.world_size && a.zero_stage == 0)
        set_err(err, ERRLEN, "--shard-group %d: stage 0 shards nothing; HSDP needs -z 1, 2 or 3", G);
    comm_check_all(&comm, err);
    if (G != comm.world_size) comm_set_groups(&comm, G);
    comm.overlap = a.overlap;
    backend_init(&comm); /* GPU + NCCL (CUDA build); -h and --estimate above need no device */
    if (comm.rank == 0 && a.zero_stage < 3) { /* stage-3 flags do nothing at stages 0-2: say so, once */
        if (a.reshard_given) fprintf(stderr, "warning: --reshard-after-forward %d has no effect at zero_stage %d (stage 3 only)\n", a.reshard_after_forward, a.zero_stage);
        if (a.prefetch_given) fprintf(stderr, "warning: --prefetch %d has no effect at zero_stage %d (stage 3 only)\n", a.prefetch, a.zero_stage);
        if (a.reshard_emb_given) fprintf(stderr, "warning: --reshard-embedding %d has no effect at zero_stage %d (stage 3 only)\n", a.reshard_embedding, a.zero_stage);
    }

    resolve_config(&a, &cfg, &from_ckpt, err, ERRLEN);
    if (!err[0] && a.resume && !a.output_dir) set_err(err, ERRLEN, "-y 1: resuming needs -o <dir> (where the checkpoints are)");
    comm_check_all(&comm, err);
    signal(SIGXFSZ, SIG_IGN); /* a write beyond the file size limit fails with EFBIG, reported at the save */
    if (a.output_dir) state_check_output_dir(&comm, a.output_dir);
    int N = comm.world_size;
    long tokens_per_micro = (long)a.B * a.T * N;
    if (a.total_batch < 0) a.total_batch = tokens_per_micro;
    if (a.total_batch % tokens_per_micro != 0)
        set_err(err, ERRLEN, "-d %ld: total batch must be a multiple of B*T*ranks = %d*%d*%d = %ld tokens", a.total_batch, a.B, a.T, N, tokens_per_micro);
    if (!err[0] && a.total_batch / tokens_per_micro > (1L << 20))
        set_err(err, ERRLEN, "-d %ld: grad accumulation of %ld micro-steps is too large (at most %ld)", a.total_batch, a.total_batch / tokens_per_micro, 1L << 20);
    comm_check_all(&comm, err);
    int accum = (int)(a.total_batch / tokens_per_micro);

    GPT2 model;
    GPT2Options mopt = model_options(&a, accum);
    if (gpt2_init(&model, &cfg, &comm, &mopt, a.B, a.T, err, ERRLEN)) {
        size_t l = strlen(err);
        snprintf(err + l, ERRLEN - l, " [-e %s]", a.init);
    }
    comm_check_all(&comm, err);
    zero_offload_open(&model.engine, a.offload_dir); /* disk: the scratch files, or one error before any step */
    if (from_ckpt) gpt2_load_checkpoint(&model, a.init, err, ERRLEN);
    else gpt2_init_random(&model, a.seed);
    comm_check_all(&comm, err);

    DataLoader train, val;
    memset(&train, 0, sizeof(train));
    int have_val = 0, val_batches = a.val_steps, val_capped = 0;
    int have_train = a.max_steps > 0 || a.resume; /* -x 0: no training, no train data needed */
    if (have_train && dataloader_init(&train, a.train_pattern, a.B, a.T, comm.rank, N, cfg.vocab_size, err, ERRLEN) == 0)
        dataloader_set_shuffle(&train, a.shuffle, a.seed);
    comm_check_all(&comm, err);
    if (a.val_every > 0) {
        dataloader_init(&val, a.val_pattern, a.B, a.T, comm.rank, N, cfg.vocab_size, err, ERRLEN);
        comm_check_all(&comm, err);
        have_val = 1;
        /* an evaluation reads -m global batches from the start of the val
           split; a split with fewer distinct batches is read once, never
           counted twice */
        size_t distinct = dataloader_batches_per_epoch(&val);
        if ((size_t)val_batches > distinct) { val_batches = (int)distinct; val_capped = 1; }
    }
    Tokenizer tok;
    int have_tok = 0;
    if (a.sample_every > 0) {
        if (tokenizer_init(&tok, a.tokenizer_path, err, ERRLEN) == 0) have_tok = 1;
        else if (access(a.tokenizer_path, F_OK) != 0 && !strcmp(a.tokenizer_path, "data/gpt2_tokenizer.bin")) {
            if (comm.rank == 0) printf("note: no tokenizer at %s, samples print token ids\n", a.tokenizer_path);
            err[0] = 0;
        }
        comm_check_all(&comm, err);
    }
    FILE* logf = NULL;
    if (a.output_dir) {
        if (comm.rank == 0) {
            mkdir(a.output_dir, 0755);
            char p[4096];
            snprintf(p, sizeof(p), "%s/main.log", a.output_dir);
            logf = fopen(p, a.resume ? "a" : "w");
            if (!logf) set_err(err, ERRLEN, "-o %s: cannot write %s (%s)", a.output_dir, p, strerror(errno));
        }
        comm_check_all(&comm, err);
    }
    int start_step = a.resume ? state_resume(&model, &train, a.output_dir, a.max_steps) : 0;

    if (comm.rank == 0) {
        printf("train_gpt (%s): %d rank%s, zero_stage %d%s%s%s\n", BACKEND_NAME, N, N > 1 ? "s" : "", a.zero_stage,
               a.zero_stage == 3 ? (a.reshard_after_forward ? ", reshard_after_forward 1" : ", reshard_after_forward 0") : "",
               a.offload == OFFLOAD_DISK ? ", optimizer states offloaded to disk:" : a.offload == OFFLOAD_HOST ? ", optimizer states offloaded to host memory" : "",
               a.offload == OFFLOAD_DISK ? a.offload_dir : "");
        printf("matmul: %s\n", backend_matmul_desc());
        char cpu[1024];
        backend_cpu_desc(cpu, sizeof(cpu));
        printf("cpu: %s\n", cpu);
        printf("model: L=%d NH=%d C=%d maxT=%d V=%d (padded %d), %zu parameters, init %s\n", cfg.num_layers, cfg.num_heads,
               cfg.channels, cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size, model.plan.num_parameters,
               start_step > 0 ? "from the resumed checkpoint" : from_ckpt ? a.init : "random");
        printf("batch: B=%d T=%d per rank, %ld tokens per micro-step, %d micro-step%s per optimizer step (%ld tokens)\n",
               a.B, a.T, tokens_per_micro, accum, accum > 1 ? "s" : "", a.total_batch);
        if (have_train) printf("data: train %zu tokens in %d shard(s) (%s), %s", train.num_tokens, train.num_shards, a.train_pattern,
                               a.shuffle ? "shuffled (--shuffle 1: sequences and shards in a seeded random order, new each epoch)" : "in file order (--shuffle 0)");
        else printf("data: no training (-x 0)");
        if (have_val) printf(", val %zu tokens (%s); each evaluation reads %d global batch%s x %ld = %ld distinct val tokens",
                             val.num_tokens, a.val_pattern, val_batches, val_batches > 1 ? "es" : "", tokens_per_micro,
                             (long)val_batches * tokens_per_micro);
        printf("\n");
        if (val_capped)
            printf("note: -m %d: the val split holds only %d distinct global batches of %ld tokens; each evaluation uses those %d, "
                   "none counted twice\n", a.val_steps, val_batches, tokens_per_micro, val_batches);
    }
    comm_print_placement(&comm, stdout); /* node, local rank, threads of every rank */
    if (comm.rank == 0 && comm.replica_size > 1)
        printf("HSDP: %d shard groups of %d ranks (ranks %d..%d, ...): shards inside a group, replicas across groups\n",
               comm.replica_size, comm.group_size, 0, comm.group_size - 1);
    if (comm.rank == 0 && a.overlap && !comm.thread_multiple)
        printf("note: MPI does not provide MPI_THREAD_MULTIPLE: collectives run without overlap\n");
    if (a.trace_path) {
        trace_init(MEM_NUM, mem_names);
        if (a.trace_last > a.max_steps) a.trace_last = a.max_steps;
        if (a.trace_first > a.trace_last) a.trace_first = a.trace_last;
    }
    int ledger_bad = 0;
    print_ledger_all_ranks(&model, a.ledger_all, &ledger_bad);

    AdamWConfig opt = {a.lr, 0.9f, 0.95f, 1e-8f, a.weight_decay, a.grad_clip};
    float dloss = 1.0f / (float)((double)a.B * a.T * N * accum);
    double total_ms = 0; int timed = 0;
    for (int step = start_step; step <= a.max_steps; step++) {
        int last = step == a.max_steps;
        comm.phase = PHASE_OTHER;
        if (have_val && (step % a.val_every == 0 || last)) {
            float vl = evaluate(&model, &val, val_batches, &comm);
            if (comm.rank == 0) { printf("val loss %.6f at step %d\n", vl, step); fflush(stdout); }
            if (logf) { fprintf(logf, "step %d val_loss %.6f\n", step, vl); fflush(logf); }
        }
        if (a.sample_every > 0 && ((step > 0 && step % a.sample_every == 0) || last))
            sample(&model, &tok, have_tok, a.gen_tokens, a.seed, step);
        if (a.output_dir && step > start_step && ((a.ckpt_every > 0 && step % a.ckpt_every == 0) || last)) {
            char p[4096];
            snprintf(p, sizeof(p), "%s/model_%08d.bin", a.output_dir, step);
            gpt2_save_checkpoint(&model, p, a.ckpt_version);
            if (comm.rank == 0) printf("wrote checkpoint %s (llm.c version %d, %s)\n", p, a.ckpt_version, a.ckpt_version == 5 ? "bf16" : "fp32");
            snprintf(p, sizeof(p), "%s/state_%08d.bin", a.output_dir, step);
            state_save(&model, p, step, &train, a.seed, a.ckpt_version == 5 /* a bf16 model file: keep the exact master weights */);
            if (comm.rank == 0) printf("wrote state %s\n", p);
        }
        if (last) break;
        comm.phase = PHASE_TRAIN;
        tracer.on = a.trace_path && step + 1 >= a.trace_first && step + 1 <= a.trace_last;
        trace_begin(TRACE_TID_COMPUTE, -1, "step %d", step + 1);
        if (tracer.on) zero_trace_memory(&model.engine);
        double busy0, wait0;
        backend_comm_seconds(&busy0, &wait0);
        double t0 = wall_seconds();
        gpt2_begin_step(&model);
        double loss = 0.0;
        for (int micro = 0; micro < accum; micro++) {
            state_log_position(&train, step + 1, micro);
            dataloader_next_batch(&train, err, ERRLEN);
            comm_check_all(&comm, err);
            loss += gpt2_forward(&model, train.inputs, train.targets, a.B, a.T, dloss);
            gpt2_backward(&model, a.B, a.T);
        }
        gpt2_reduce_grads(&model);
        opt.lr = lr_schedule(a.lr, step, a.warmup, a.max_steps, a.final_frac);
        trace_begin(TRACE_TID_COMPUTE, -1, "optimizer");
        double norm = zero_optimizer_step(&model.engine, &opt, step + 1);
        trace_end(TRACE_TID_COMPUTE);
        comm_allreduce_sum_host(&comm, &loss, 1);
        loss /= (double)accum * N;
        backend_synchronize();
        double ms = 1000.0 * (wall_seconds() - t0);
        trace_end(TRACE_TID_COMPUTE);
        tracer.on = 0;
        double busy1, wait1;
        backend_comm_seconds(&busy1, &wait1);
        double comm_ms = 1000.0 * (busy1 - busy0), wait_ms = 1000.0 * (wait1 - wait0);
        char commtxt[96] = "";
        if (comm_ms > 0.0)
            snprintf(commtxt, sizeof(commtxt), " | comm %.1f ms, waited %.1f ms (%.0f%% hidden)", comm_ms, wait_ms,
                     100.0 * (comm_ms > wait_ms ? 1.0 - wait_ms / comm_ms : 0.0));
        if (step > start_step) { total_ms += ms; timed++; } /* the first step of a process warms up: not timed */
        double tps = (double)a.total_batch / (ms / 1000.0);
        if (comm.rank == 0) {
            printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s | mem %.1f MB%s\n", step + 1, a.max_steps,
                   loss, opt.lr, norm, ms, tps, model.ledger.current / 1e6, commtxt);
            fflush(stdout);
        }
        if (logf) { fprintf(logf, "step %d train_loss %.6f lr %.6e norm %.6f ms %.3f tok_per_s %.1f comm_ms %.3f wait_ms %.3f compute_ms %.3f\n",
                            step + 1, loss, opt.lr, norm, ms, tps, comm_ms, wait_ms, ms - wait_ms); fflush(logf); }
        if (!isfinite(loss)) comm_fatal(&comm, "loss became %f at step %d (lower -l?)", loss, step + 1);
        if (a.ledger_every > 0 && (step + 1) % a.ledger_every == 0 && step + 1 < a.max_steps) {
            int dummy = 0;
            print_traffic_all_ranks(&model, a.ledger_all, step + 1 - start_step, &dummy);
        }
    }
    if (a.trace_path) {
        size_t mcap = 1024 + 32 * (size_t)model.plan.num_units, ml;
        char* meta = (char*)malloc_or_die(mcap, "trace metadata");
        snprintf(meta, mcap, "\"zero_stage\": %d, \"num_ranks\": %d, \"shard_group\": %d, \"reshard_after_forward\": %d, "
                 "\"reshard_embedding\": %d, \"prefetch\": %d, \"overlap\": %d, \"backend\": \"%s\", \"steps\": \"%d:%d\", \"unit_names\": [",
                 a.zero_stage, N, comm.group_size, a.reshard_after_forward, a.reshard_embedding, a.prefetch, a.overlap,
                 BACKEND_NAME, a.trace_first, a.trace_last);
        for (int u = 0; u < model.plan.num_units; u++) {
            char nm[32];
            gpt2_unit_name(&model.layout, u, nm, sizeof(nm));
            ml = strlen(meta);
            snprintf(meta + ml, mcap - ml, "%s\"%s\"", u ? ", " : "", nm);
        }
        ml = strlen(meta);
        snprintf(meta + ml, mcap - ml, "]");
        trace_write(a.trace_path, comm.rank, N, meta, err, ERRLEN);
        free(meta);
        comm_check_all(&comm, err);
        if (comm.rank == 0) printf("wrote trace %s (steps %d..%d; open it in https://ui.perfetto.dev or chrome://tracing)\n",
                                   a.trace_path, a.trace_first, a.trace_last);
    }
    int traffic_bad = 0;
    if (a.max_steps > start_step) print_traffic_all_ranks(&model, a.ledger_all, a.max_steps - start_step, &traffic_bad);
    else if (comm.rank == 0) printf("no optimizer steps to run (-x %d%s): no traffic table, no checkpoint written\n", a.max_steps,
                                    start_step > 0 ? ", reached by the resumed checkpoint" : "");
    if (comm.rank == 0) {
        printf("peak: ledger %.1f MB (gathered units in use at most %.1f MB), backend workspace %.1f MB outside the plan, "
#ifdef __CUDACC__
               "device memory used %.1f MB on rank 0\n",
#else
               "process resident %.1f MB on rank 0\n",
#endif
               model.ledger.peak / 1e6, model.ledger.gathered_peak / 1e6, backend_internal_bytes() / 1e6, backend_peak_process_bytes() / 1e6);
        if (timed > 0) {
            double tps = (double)a.total_batch * timed / (total_ms / 1000.0);
            /* flops per token: 6 Psi (forward + backward of every weight) + 12 L C T (attention scores and values) */
            double fpt = 6.0 * (double)model.plan.num_parameters + 12.0 * cfg.num_layers * (double)cfg.channels * a.T;
            printf("average %.1f ms per optimizer step (steps %d..%d, %d timed), %.0f tokens/s, %.1f GFLOP/s achieved (6*Psi + 12*L*C*T = %.3g flops/token)\n",
                   total_ms / timed, start_step + 2, a.max_steps, timed, tps, tps * fpt / 1e9, fpt);
        }
    }
    if (logf) fclose(logf);
    dataloader_free(&train);
    if (have_val) dataloader_free(&val);
    if (have_tok) tokenizer_free(&tok);
    gpt2_free(&model);
    int bad = ledger_bad + traffic_bad, anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    backend_finalize(&comm);
    comm_finalize(&comm);
    return anybad ? 2 : 0;
}
