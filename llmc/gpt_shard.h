/*
 gpt_shard.h: the model-to-plan adapter of GPT-2 (this project's
 parallelize step): how the model's tensors are cut into the ZeRO engine's
 units, and the ZeroSpec it fills for the one call that builds the plan
 (gpt2_plan_init). The model itself (gpt.h) only names units and tensors
 through the functions here.

 Units (docs/design.md section 1; the granules of ZeRO-3 gathering), in the
 order of the flat buffer:
   unit 0            the root {wpe (maxT,C), lnfw (C), lnfb (C)}
   units 1..K        the vocabulary chunks of wte: chunk k holds rows
                     [k*Vc, min((k+1)*Vc, Vp)) of wte (Vp,C) as one tensor
                     piece; Vc is chosen so that every chunk but the last
                     fills whole shard granules, so wte stays contiguous in
                     a full buffer
   units K+1..K+L    transformer block l {ln1w, ln1b (C), qkvw (3C,C),
                     qkvb (3C), attprojw (C,C), attprojb (C), ln2w, ln2b (C),
                     fcw (4C,C), fcb (4C), fcprojw (C,4C), fcprojb (C)}
 Weight decay applies to the 2-D tensors: wte, wpe, qkvw, attprojw, fcw,
 fcprojw. Unit classes (zero/plan.h): the root is kept gathered for the
 optimizer step; the chunks are gathered for each use (embedding forward,
 LM-head forward, LM-head backward) unless --reshard-embedding 0 keeps them
 for the step (the whole embedding then moves once per step); the blocks
 are gathered for forward and again for backward (reshard_after_forward).
 The stage-3 use schedules (gpt2_schedules) list the units in the order
 forward and backward use them, for prefetching.
*/
#ifndef LLMC_GPT_SHARD_H
#define LLMC_GPT_SHARD_H

#include "gpt_config.h"
#include "zero.h"

#define GPT2_BLOCK_TENSORS 12

static const char* gpt2_block_names[GPT2_BLOCK_TENSORS] = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                                            "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"};
enum { B_LN1W = 0, B_LN1B, B_QKVW, B_QKVB, B_ATTPROJW, B_ATTPROJB, B_LN2W, B_LN2B, B_FCW, B_FCB, B_FCPROJW, B_FCPROJB };
/* plan tensor indices of the root */
enum { T_WPE = 0, T_LNFW, T_LNFB, T_WTE0 };
enum { GPT2_CLASS_ROOT = 0, GPT2_CLASS_CHUNKS, GPT2_CLASS_BLOCKS };

/* Where the units and tensors are: K vocabulary chunks of chunk_rows rows
   (the last has last_rows), then L blocks. */
typedef struct {
    int num_layers;
    int num_chunks;         /* K */
    int chunk_rows;         /* Vc */
    int last_rows;          /* rows of chunk K-1 (<= Vc) */
} GPT2Layout;

static inline int gpt2_unit_root(void) { return 0; }
static inline int gpt2_unit_chunk(const GPT2Layout* y, int k) { (void)y; return 1 + k; }
static inline int gpt2_unit_block(const GPT2Layout* y, int l) { return 1 + y->num_chunks + l; }
static inline int gpt2_num_units(const GPT2Layout* y) { return 1 + y->num_chunks + y->num_layers; }
static inline int gpt2_num_tensors(const GPT2Layout* y) { return T_WTE0 + y->num_chunks + GPT2_BLOCK_TENSORS * y->num_layers; }
static inline int gpt2_tensor_chunk(const GPT2Layout* y, int k) { (void)y; return T_WTE0 + k; }
/* Plan index of block tensor j of layer l. */
static inline int gpt2_block_tensor(const GPT2Layout* y, int l, int j) { return T_WTE0 + y->num_chunks + l * GPT2_BLOCK_TENSORS + j; }
static inline int gpt2_chunk_row0(const GPT2Layout* y, int k) { return k * y->chunk_rows; }
static inline int gpt2_chunk_nrows(const GPT2Layout* y, int k) { return k == y->num_chunks - 1 ? y->last_rows : y->chunk_rows; }

static inline size_t gpt2_gcd(size_t a, size_t b) { while (b) { size_t t = a % b; a = b; b = t; } return a; }

/* The vocabulary chunking for shard groups of G ranks and R replica
   groups: about target_rows rows per chunk (1..Vp; >= Vp gives one chunk),
   equal chunks but the last, and every chunk but the last a whole number of
   shard granules (zero_granule(G, R) elements), so that it needs no padding
   and wte is contiguous in a full buffer. */
static inline void gpt2_layout_init(GPT2Layout* y, int num_layers, int Vp, int C, int G, int R, int target_rows) {
    size_t granule = zero_granule(G, R);
    size_t step = granule / gpt2_gcd((size_t)C, granule);   /* rows per granule multiple */
    if (target_rows < 1) target_rows = 1;
    int K = (Vp + target_rows - 1) / target_rows;
    size_t rows = round_up((size_t)((Vp + K - 1) / K), step);
    if (rows >= (size_t)Vp) rows = (size_t)Vp;
    y->num_layers = num_layers;
    y->chunk_rows = (int)rows;
    y->num_chunks = (int)(((size_t)Vp + rows - 1) / rows);
    y->last_rows = Vp - (y->num_chunks - 1) * y->chunk_rows;
}

/* The tensor list of the plan (sizes in elements, unit, decay flag). out
   must hold gpt2_num_tensors(y) entries. */
static inline void gpt2_build_tensors(const GPT2Config* c, const GPT2Layout* y, ZeroTensor* out) {
    size_t C = (size_t)c->channels, maxT = (size_t)c->max_seq_len;
    size_t bs[GPT2_BLOCK_TENSORS] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    int bd[GPT2_BLOCK_TENSORS] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0};
    memset(out, 0, (size_t)gpt2_num_tensors(y) * sizeof(ZeroTensor));
    out[T_WPE].name = "wpe"; out[T_WPE].unit = gpt2_unit_root(); out[T_WPE].size = maxT * C; out[T_WPE].decay = 1;
    out[T_LNFW].name = "lnfw"; out[T_LNFW].unit = gpt2_unit_root(); out[T_LNFW].size = C;
    out[T_LNFB].name = "lnfb"; out[T_LNFB].unit = gpt2_unit_root(); out[T_LNFB].size = C;
    for (int k = 0; k < y->num_chunks; k++) {
        ZeroTensor* t = &out[gpt2_tensor_chunk(y, k)];
        t->name = "wte"; t->unit = gpt2_unit_chunk(y, k); t->size = (size_t)gpt2_chunk_nrows(y, k) * C; t->decay = 1;
    }
    for (int l = 0; l < y->num_layers; l++)
        for (int j = 0; j < GPT2_BLOCK_TENSORS; j++) {
            ZeroTensor* t = &out[gpt2_block_tensor(y, l, j)];
            t->name = gpt2_block_names[j]; t->unit = gpt2_unit_block(y, l); t->size = bs[j]; t->decay = bd[j];
        }
}

/* Random-stream number of each plan tensor for initialisation: the same for
   any chunking (all wte pieces draw from one stream, in row order). */
static inline unsigned long long gpt2_init_stream(const GPT2Layout* y, int t) {
    if (t == T_WPE) return 1;
    if (t >= T_WTE0 && t < T_WTE0 + y->num_chunks) return 0;
    if (t == T_LNFW) return 2;
    if (t == T_LNFB) return 3;
    return 4 + (unsigned long long)(t - T_WTE0 - y->num_chunks);
}

/* ------------------------------------------------------------------------ */

/* Options of the model's execution (not of the architecture). */
typedef struct {
    int zero_stage;             /* 0..3 */
    int reshard_after_forward;  /* stage 3, blocks: 1 free after forward, 0 keep until backward */
    int reshard_embedding;      /* stage 3, wte chunks: 1 gather for each use, 0 keep for the step */
    int prefetch;               /* stage 3: units gathered ahead of use */
    int grad_accum_steps;       /* micro-steps per optimizer step */
    int vocab_chunk;            /* target rows of wte per vocabulary chunk */
    int keep_logits;            /* 1: keep every chunk's logits from forward to backward (B*T*Vp) */
    int overlap;                /* 1: two unit-grad buffers per class */
    int offload;                /* OFFLOAD_NONE, _HOST or _DISK (zero.h): where master, m, v live */
    int recompute;              /* activation recomputation (-r): 0 keep all, 1 GELU, 2 + LayerNorms, 3 whole blocks (gpt.h) */
    int quant_weights_block;    /* stage 3, qwZ (--quantize-weights int8): elements per fp32 scale; 0 off */
    int secondary;              /* stage 3, hpZ (--secondary-shard): K ranks share a secondary shard; 0 off */
    int quant_grads_bits;       /* stage 3, qgZ (--quantize-grads): 8 or 4; 0 off */
    int quant_grads_block;      /* qgZ: elements per fp32 scale */
    int quant_grads_local;      /* qgZ: ranks per node (the first hop) */
    int invariant;              /* --invariant 1: the layout-invariant sums (docs/design.md section 13) */
    int eval_only;              /* 1: no training (-x 0): no grads or optimizer states, no backward buffers;
                                   the blocks' forward writes one layer's buffers (recompute = 3's layout) */
} GPT2Options;

static inline GPT2Options gpt2_default_options(void) {
    GPT2Options o = {0, 1, 1, 1, 1, 8192, 0, 1, OFFLOAD_NONE, 0, 0, 0, 0, 256, 1, 0, 0};
    return o;
}

/* The shard plan of the model for rank group_rank of a shard group of G
   ranks, `replicas` groups (HSDP; 1: all ranks shard), with elem_bytes per
   param and grad element (sizeof(floatX) in a run): the layout (vocabulary
   chunks), then ONE ZeroSpec with every input (the tensors, the unit
   classes with their gathering modes, the stage options, the backend's
   needs, the embedding-row all-gather of a B x T micro-batch) and one call
   of zero_plan_init. gpt2_init uses it, and so does the estimator
   (train_gpt.cu --estimate), so that its traffic is the plan's of a run.
   0, or 1 with a message (nothing left allocated). */
static inline int gpt2_plan_init(ZeroPlan* P, GPT2Layout* y, const GPT2Config* cfg, const GPT2Options* opt, int G, int group_rank,
                                 int replicas, int elem_bytes, int B, int T, char* err, size_t errlen) {
    if (opt->vocab_chunk < 1) return set_err(err, errlen, "--vocab-chunk %d: must be >= 1 (rows of wte per chunk)", opt->vocab_chunk);
    gpt2_layout_init(y, cfg->num_layers, cfg->padded_vocab_size, cfg->channels, G, replicas, opt->vocab_chunk);
    int n = gpt2_num_tensors(y), nu = gpt2_num_units(y);
    ZeroTensor* ts = (ZeroTensor*)malloc_or_die((size_t)n * sizeof(ZeroTensor), "tensor list");
    gpt2_build_tensors(cfg, y, ts);
    int* uc = (int*)malloc_or_die((size_t)nu * sizeof(int), "unit classes");
    for (int u = 0; u < nu; u++) uc[u] = u == 0 ? GPT2_CLASS_ROOT : u <= y->num_chunks ? GPT2_CLASS_CHUNKS : GPT2_CLASS_BLOCKS;
    size_t BT = (size_t)B * T, C = (size_t)cfg->channels;
    ZeroSpec s;
    memset(&s, 0, sizeof(s));
    s.tensors = ts; s.num_tensors = n; s.num_units = nu;
    s.zero_stage = opt->zero_stage; s.num_ranks = G; s.rank = group_rank; s.replicas = replicas;
    s.param_bytes = elem_bytes; s.grad_bytes = elem_bytes;
    s.reshard_after_forward = opt->reshard_after_forward; s.prefetch = opt->prefetch; s.grad_accum_steps = opt->grad_accum_steps;
    s.num_classes = 3; s.unit_class = uc;
    /* chunks: embedding forward, LM-head forward, LM-head backward; blocks: forward, backward */
    const ZeroClassSpec classes[3] = {{"root (wpe, lnf)", ZERO_KEEP_STEP, 1},
                                      {"wte chunks", opt->reshard_embedding ? ZERO_RESHARD : ZERO_KEEP_STEP, 3},
                                      {"blocks", opt->reshard_after_forward ? ZERO_RESHARD : ZERO_KEEP_MICRO, 2}};
    for (int c = 0; c < 3; c++) s.classes[c] = classes[c];
    s.overlap = opt->overlap;
    s.rs_scratch = BACKEND_RS_SCRATCH;
    s.offload = opt->offload;
    s.offload_staging = opt->offload != OFFLOAD_NONE && BACKEND_OFFLOAD_STAGING;
    s.quant_weights_block = opt->quant_weights_block;
    s.secondary = opt->secondary;
    s.quant_grads_bits = opt->quant_grads_bits; s.quant_grads_block = (size_t)opt->quant_grads_block; s.quant_grads_local = opt->quant_grads_local;
    s.eval_only = opt->eval_only;
    s.invariant = opt->invariant;
    s.emb_gather_bytes = G > 1 ? (unsigned long long)G * BT * (C * (size_t)elem_bytes + sizeof(int)) : 0; /* exchanged inside the shard group */
    int rc = zero_plan_init(P, &s, err, errlen);
    free(ts); free(uc);
    return rc;
}

/* Name of unit u ("root", "wte chunk k", "block l"), for traces. */
static inline void gpt2_unit_name(const GPT2Layout* y, int u, char* out, size_t n) {
    if (u == 0) snprintf(out, n, "root");
    else if (u <= y->num_chunks) snprintf(out, n, "wte chunk %d", u - 1);
    else snprintf(out, n, "block %d", u - 1 - y->num_chunks);
}

/* The stage-3 use schedules (zero_begin_pass): train (forward then
   backward) = root, chunks (embedding), blocks, chunks (LM head); then
   chunks (LM-head backward), root, blocks in reverse; its first *fwd_len
   entries are a forward alone. train needs gpt2_schedule_len(y) entries;
   chunks (the chunks alone, for logits) num_chunks. */
static inline int gpt2_schedule_len(const GPT2Layout* y) { return 2 + 3 * y->num_chunks + 2 * y->num_layers; }
static inline void gpt2_schedules(const GPT2Layout* y, int* train, int* fwd_len, int* chunks) {
    int K = y->num_chunks, nl = y->num_layers, q = 0;
    train[q++] = gpt2_unit_root();
    for (int k = 0; k < K; k++) train[q++] = gpt2_unit_chunk(y, k);
    for (int l = 0; l < nl; l++) train[q++] = gpt2_unit_block(y, l);
    for (int k = 0; k < K; k++) train[q++] = gpt2_unit_chunk(y, k);
    *fwd_len = q;
    for (int k = 0; k < K; k++) train[q++] = gpt2_unit_chunk(y, k);
    train[q++] = gpt2_unit_root();
    for (int l = nl - 1; l >= 0; l--) train[q++] = gpt2_unit_block(y, l);
    for (int k = 0; k < K; k++) chunks[k] = gpt2_unit_chunk(y, k);
}

#endif /* LLMC_GPT_SHARD_H */
