/*
 gpt.h: the GPT-2 model over the ZeRO engine: its parameters (through the
 plan of gpt_shard.h), activations, initialisation, and the forward and
 backward passes written as a loop over units. Written once for both
 backends: it calls only backend functions (memory, kernels, collectives)
 and the engine (zero.h), never MPI, CUDA or BLAS directly. The llm.c
 checkpoint format, both directions, is checkpoint.h's.

 Model (Radford et al. 2019, GPT-2): token + learned position embeddings;
 L pre-LayerNorm blocks, each x += attproj(attention(qkv(ln1(x)))) then
 x += fcproj(gelu_tanh(fc(ln2(x)))); final LayerNorm; logits = lnf(x) wte^T
 (LM head tied to wte) over the vocabulary padded to a multiple of 128;
 loss = mean cross-entropy over the real vocabulary. Units, tensors and
 their classes: gpt_shard.h.

 The LM head and the loss never hold a (B*T, Vp) logits buffer: the
 forward runs over the vocabulary chunks with an online softmax (running
 max and sum of exponentials per row, Milakov & Gimelshein 2018), the
 backward recomputes each chunk's logits (or reads them back with
 --keep-logits 1), forms dlogits = dloss (softmax - onehot) and
 accumulates dlnf and the chunk's gradient, which stages 2-3 reduce-scatter
 at once. Every stage runs this same code, so every stage computes the same
 numbers.

 The embedding gradient is formed where it is held: every rank all-gathers
 the rows of d(embedding output) and their token ids (B*T*C values per
 rank, much less than wte), and each rank adds, for the rows of wte and wpe
 in its own shard, the sum over all ranks' rows in rank order (one
 rounding), after the reduce-scatter of the LM head's part. No rank ever
 holds a wte-sized gradient buffer for the embedding, and stages 0-3 add
 the same sums in the same order.
*/
#ifndef LLMC_GPT_H
#define LLMC_GPT_H

#include <sys/stat.h>
#include "utils.h"
#include "bf16.h"
#include "gpt_shard.h"
#include "gpt_memory.h"
#include "rand.h"

typedef struct {
    GPT2Config config;
    GPT2Layout layout;
    GPT2Options opt;
    Comm* comm;
    ZeroPlan plan;
    Ledger ledger;
    ZeroEngine engine;
    int B, T;                   /* allocated micro-batch and sequence length */
    /* activations, (B,T,...) per layer where indexed by l */
    floatX *encoded, *ln1, *qkv, *atty, *att, *attproj, *residual2, *ln2, *fch, *fch_gelu, *fcproj, *residual3;
    floatX *lnf, *preatt;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd, *losses;
    /* LM head: logits of one chunk (B*T, Vc), or of all chunks with keep_logits
       (chunk k at B*T*k*Vc); the online-softmax statistics per row; the
       logits of each sequence's last position (sampling, B x Vp) */
    floatX *logits, *last_logits;
    float *lm_max, *lm_target;
    double* lm_sum;
    /* backward scratch (one layer's worth, reused) */
    floatX *dres, *dln, *dqkv, *datty, *dfch, *dfch_gelu, *dpreatt, *datt, *dlnf;
    int *inputs, *targets;      /* backend memory */
    float* host_losses;
    float dloss;                /* of the last forward */
    double loss_sum;            /* --invariant 1: the last forward's B*T losses summed as a tree over its sequences */
    /* embedding gradient: every rank's d(embedding) rows (N*B*T, C) and token
       ids, their order by token and by position, the accumulator of stages
       0-1 with grad accumulation (own shards of the root and chunk units) */
    floatX* emb_rows;
    floatX* emb_acc;
    size_t* emb_acc_off;        /* per unit: offset in emb_acc (units 0..K) */
    int *host_tokens, *emb_tokens, *emb_positions, *emb_order_tok, *emb_order_pos, *emb_seg, *emb_seg_key;
    int emb_pending;            /* stages 0-1, one micro-step: rows kept for gpt2_reduce_grads */
    ZeroInvTree emb_tree;       /* --invariant 1, A > 1: the micro-step tree of the embedding gradient (emb_acc: its leaf) */
    /* stage-3 use schedules (gpt2_schedules): forward (the first sched_fwd_len
       entries of sched_train), forward + backward, chunks only */
    int *sched_train, *sched_chunks;
    int sched_fwd_len, sched_train_len;
    size_t activation_bytes;
} GPT2;

/* The activations of layer l of the last forward (B x T rows of C, 3C, 4C
   or NH*T), where the forward wrote them and the backward reads them. */
typedef struct {
    floatX *in;                 /* the block's input: encoded (l = 0) or the previous residual3 */
    floatX *ln1, *qkv, *atty, *att, *attproj, *res2, *ln2, *fch, *fchg, *fcproj, *res3;
    float *ln1m, *ln1r, *ln2m, *ln2r;
} GPT2BlockActs;

/* With recomputation (-r) some buffers hold one layer, reused by every
   layer: index 0 then (gpt2_recompute_layout). */
static inline GPT2BlockActs gpt2_block_acts(const GPT2* m, int l, int B, int T) {
    size_t BT = (size_t)B * T, C = (size_t)m->config.channels, NH = (size_t)m->config.num_heads, k = (size_t)l;
    int r = m->opt.recompute;
    size_t kb = r >= 3 ? 0 : k, kln = r >= 2 ? 0 : k, kg = r >= 1 ? 0 : k;   /* block, LayerNorm outputs, GELU output */
    GPT2BlockActs a;
    a.in = l == 0 ? m->encoded : m->residual3 + (k - 1) * BT * C;
    a.ln1 = m->ln1 + kln * BT * C;
    a.ln1m = m->ln1_mean + kb * BT;
    a.ln1r = m->ln1_rstd + kb * BT;
    a.qkv = m->qkv + kb * BT * 3 * C;
    a.atty = m->atty + kb * BT * C;
    a.att = m->att + kb * BT * NH * (size_t)T;
    a.attproj = m->attproj + kb * BT * C;
    a.res2 = m->residual2 + kb * BT * C;
    a.ln2 = m->ln2 + kln * BT * C;
    a.ln2m = m->ln2_mean + kb * BT;
    a.ln2r = m->ln2_rstd + kb * BT;
    a.fch = m->fch + kb * BT * 4 * C;
    a.fchg = m->fch_gelu + kg * BT * 4 * C;
    a.fcproj = m->fcproj + kb * BT * C;
    a.res3 = m->residual3 + k * BT * C;
    return a;
}

static inline void* gpt2_alloc(GPT2* m, int cat, size_t bytes) {
    if (cat == MEM_ACTIVATIONS) m->activation_bytes += bytes;
    return ledger_alloc(&m->ledger, cat, bytes);
}
static inline void* gpt2_act(GPT2* m, size_t bytes) { return gpt2_alloc(m, MEM_ACTIVATIONS, bytes); }

/* Units whose gradient the embedding backward forms in place: the root
   (its wpe) and the vocabulary chunks (wte): units 0..K. */
static inline int gpt2_num_emb_units(const GPT2* m) { return 1 + m->layout.num_chunks; }

static int gpt2_cmp_pair(const void* a, const void* b) {
    const int* x = (const int*)a;
    const int* y = (const int*)b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* The activations of micro-batch B x T through the ledger (category
   MEM_ACTIVATIONS, or MEM_RECOMPUTE for the one-layer buffers that -r
   recomputes into), in the order gpt2_predict counts them. */
static inline void gpt2_alloc_activations(GPT2* m, int B, int T) {
    const GPT2Config* cfg = &m->config;
    const GPT2Options* opt = &m->opt;
    const GPT2Layout* y = &m->layout;
    size_t BT = (size_t)B * T, C = (size_t)cfg->channels, L = (size_t)cfg->num_layers, NH = (size_t)cfg->num_heads;
    unsigned long long emb_rows = m->ledger.predicted[MEM_EMB_ROWS], emb_acc = m->ledger.predicted[MEM_EMB_ACC];
    size_t x = sizeof(floatX), f = sizeof(float), Vp = (size_t)cfg->padded_vocab_size;
    /* the blocks' buffers: L layers, or one layer reused by every layer
       (category MEM_RECOMPUTE) where -r recomputes them; at -r 2 ln1 and
       ln2 share one buffer (gpt2_recompute_per_token) */
    int r = opt->recompute;
    size_t Lb = r >= 3 ? 1 : L, Lln = r >= 2 ? 1 : L, Lg = r >= 1 ? 1 : L;
    int cb = r >= 3 ? MEM_RECOMPUTE : MEM_ACTIVATIONS, cln = r >= 2 ? MEM_RECOMPUTE : MEM_ACTIVATIONS, cg = r >= 1 ? MEM_RECOMPUTE : MEM_ACTIVATIONS;
    m->encoded = (floatX*)gpt2_act(m, BT * C * x);
    m->ln1 = (floatX*)gpt2_alloc(m, cln, Lln * BT * C * x);
    m->ln1_mean = (float*)gpt2_alloc(m, cb, Lb * BT * f);
    m->ln1_rstd = (float*)gpt2_alloc(m, cb, Lb * BT * f);
    m->qkv = (floatX*)gpt2_alloc(m, cb, Lb * BT * 3 * C * x);
    m->atty = (floatX*)gpt2_alloc(m, cb, Lb * BT * C * x);
    m->att = (floatX*)gpt2_alloc(m, cb, Lb * BT * NH * (size_t)T * x);
    m->attproj = (floatX*)gpt2_alloc(m, cb, Lb * BT * C * x);
    m->residual2 = (floatX*)gpt2_alloc(m, cb, Lb * BT * C * x);
    m->ln2 = r == 2 ? m->ln1 : (floatX*)gpt2_alloc(m, cln, Lln * BT * C * x);
    m->ln2_mean = (float*)gpt2_alloc(m, cb, Lb * BT * f);
    m->ln2_rstd = (float*)gpt2_alloc(m, cb, Lb * BT * f);
    m->fch = (floatX*)gpt2_alloc(m, cb, Lb * BT * 4 * C * x);
    m->fch_gelu = (floatX*)gpt2_alloc(m, cg, Lg * BT * 4 * C * x);
    m->fcproj = (floatX*)gpt2_alloc(m, cb, Lb * BT * C * x);
    m->residual3 = (floatX*)gpt2_act(m, L * BT * C * x);
    m->lnf = (floatX*)gpt2_act(m, BT * C * x);
    m->lnf_mean = (float*)gpt2_act(m, BT * f);
    m->lnf_rstd = (float*)gpt2_act(m, BT * f);
    m->logits = (floatX*)gpt2_act(m, BT * (opt->keep_logits ? Vp : (size_t)y->chunk_rows) * x);
    m->lm_max = (float*)gpt2_act(m, BT * f);
    m->lm_target = (float*)gpt2_act(m, BT * f);
    m->lm_sum = (double*)gpt2_act(m, BT * sizeof(double));
    m->losses = (float*)gpt2_act(m, BT * f);
    m->last_logits = (floatX*)gpt2_act(m, (size_t)B * Vp * x);
    m->preatt = (floatX*)gpt2_act(m, (size_t)B * NH * T * T * x);
    if (!opt->eval_only) {   /* the backward's buffers (-x 0 runs no backward) */
        m->dpreatt = (floatX*)gpt2_act(m, (size_t)B * NH * T * T * x);
        m->datt = (floatX*)gpt2_act(m, (size_t)B * NH * T * T * x);
        m->dres = (floatX*)gpt2_act(m, BT * C * x);
        m->dln = (floatX*)gpt2_act(m, BT * C * x);
        m->dqkv = (floatX*)gpt2_act(m, BT * 3 * C * x);
        m->datty = (floatX*)gpt2_act(m, BT * C * x);
        m->dfch = (floatX*)gpt2_act(m, BT * 4 * C * x);
        m->dfch_gelu = (floatX*)gpt2_act(m, BT * 4 * C * x);
    }
    m->dlnf = (floatX*)gpt2_act(m, BT * C * x);   /* also a forward's last positions (sampling) */
    m->inputs = (int*)gpt2_act(m, BT * sizeof(int));
    m->targets = (int*)gpt2_act(m, BT * sizeof(int));
    m->emb_rows = emb_rows ? (floatX*)gpt2_alloc(m, MEM_EMB_ROWS, emb_rows) : m->dres;
    m->emb_acc = emb_acc ? (floatX*)gpt2_alloc(m, MEM_EMB_ACC, emb_acc) : NULL;
    int nb = zero_inv_tree_buffers(&m->plan);
    if (nb) {
        size_t n = gpt2_emb_shard_elems(&m->plan, y);
        zero_inv_tree_init(&m->emb_tree, (floatX*)gpt2_alloc(m, MEM_INV_TREE, (size_t)nb * n * sizeof(floatX)), nb, n);
    }
}

/* Host-side bookkeeping outside the ledger: the losses, the embedding
   gradient's token and position orders (ints) and the stage-3 schedules. */
static inline void gpt2_alloc_host(GPT2* m, int B, int T) {
    const ZeroPlan* P = &m->plan;
    const GPT2Layout* y = &m->layout;
    int N = m->comm->group_size;   /* the embedding rows are exchanged inside the shard group */
    size_t BT = (size_t)B * T, f = sizeof(float);
    m->host_losses = (float*)malloc_or_die(BT * f, "host losses");
    /* host-side bookkeeping of the embedding gradient (ints, outside the ledger) */
    size_t nrows = (size_t)N * BT;
    m->host_tokens = (int*)malloc_or_die(BT * sizeof(int), "embedding tokens");
    m->emb_tokens = (int*)malloc_or_die(nrows * sizeof(int), "embedding tokens");
    m->emb_positions = (int*)malloc_or_die(nrows * sizeof(int), "embedding positions");
    m->emb_order_tok = (int*)malloc_or_die(nrows * sizeof(int), "embedding order");
    m->emb_order_pos = (int*)malloc_or_die(nrows * sizeof(int), "embedding order");
    m->emb_seg = (int*)malloc_or_die((nrows + 1) * sizeof(int), "embedding segments");
    m->emb_seg_key = (int*)malloc_or_die(nrows * sizeof(int), "embedding segments");
    m->emb_acc_off = (size_t*)malloc_or_die((size_t)gpt2_num_emb_units(m) * sizeof(size_t), "embedding offsets");
    {
        size_t off = 0;
        for (int u = 0; u < gpt2_num_emb_units(m); u++) { m->emb_acc_off[u] = off; off += P->units[u].shard; }
        /* gathered row i = (rank q, sequence b, position t) = q*B*T + b*T + t; ordered by (t, i) */
        size_t k = 0;
        for (size_t i = 0; i < nrows; i++) m->emb_positions[i] = (int)(i % (size_t)T);
        for (int t = 0; t < T; t++)
            for (size_t i = (size_t)t; i < nrows; i += (size_t)T) m->emb_order_pos[k++] = (int)i;
    }
    /* stage-3 schedules (gpt_shard.h) */
    m->sched_train_len = gpt2_schedule_len(y);
    m->sched_train = (int*)malloc_or_die((size_t)m->sched_train_len * sizeof(int), "schedule");
    m->sched_chunks = (int*)malloc_or_die((size_t)y->num_chunks * sizeof(int), "schedule");
    gpt2_schedules(y, m->sched_train, &m->sched_fwd_len, m->sched_chunks);
}

/* Build plan, engine and activations for micro-batch B x T on this rank.
   Returns 0, or 1 with a message (impossible plan, T > maxT, a failed
   allocation). */
static inline int gpt2_init(GPT2* m, const GPT2Config* cfg, Comm* comm, const GPT2Options* opt, int B, int T,
                            char* err, size_t errlen) {
    memset(m, 0, sizeof(*m));
    m->config = *cfg; m->comm = comm; m->B = B; m->T = T; m->opt = *opt;
    if (gpt2_predict(&m->plan, &m->layout, &m->ledger, cfg, opt, comm->group_size, comm->group_rank, comm->replica_size, B, T, err, errlen)) return 1;
    zero_engine_init(&m->engine, &m->plan, &m->ledger, comm);
    gpt2_alloc_activations(m, B, T);
    if (m->ledger.failed_category >= 0) {
        unsigned long long need = 0;
        for (int i = 0; i < MEM_NUM; i++) need += m->ledger.predicted[i];
        return set_err(err, errlen, "out of memory: cannot allocate %llu bytes for %s on rank %d (this rank needs %.2f GB in all for "
                       "L=%d C=%d Vp=%d, -b %d -t %d, -z %d; lower -b/-t or the model size, or raise -z / the rank count)",
                       m->ledger.failed_bytes, mem_names[m->ledger.failed_category], comm->rank, need / 1e9,
                       cfg->num_layers, cfg->channels, cfg->padded_vocab_size, B, T, opt->zero_stage);
    }
    gpt2_alloc_host(m, B, T);
    return 0;
}

/* Pointer to tensor j's data inside a full unit buffer. */
static inline floatX* gpt2_tp(const GPT2* m, floatX* unit_base, int plan_tensor) {
    return unit_base + m->plan.tensors[plan_tensor].offset;
}

/* ------------------------------------------------------------------------ */
/* Forward and backward                                                     */

/* Logits of the rows `rows` (n rows of lnf, C) over vocabulary chunk k into
   out (n, nrows_k); W = the chunk's wte rows (gathered at stage 3). */
static inline void gpt2_chunk_logits(GPT2* m, floatX* out, const floatX* rows, int n, const floatX* W, int k) {
    backend_matmul_lm_head(1);   /* the LM head's shape classes (the CPU bf16 program chooses their path apart) */
    matmul_forward(out, rows, W, NULL, n, m->config.channels, gpt2_chunk_nrows(&m->layout, k));
    backend_matmul_lm_head(0);
}

/* Where chunk k's logits live: the one-chunk buffer, or its place in the
   keep-logits buffer. */
static inline floatX* gpt2_chunk_logits_buf(GPT2* m, size_t BT, int k) {
    return m->opt.keep_logits ? m->logits + BT * (size_t)gpt2_chunk_row0(&m->layout, k) : m->logits;
}

/* Forward of B x T tokens (B <= m->B, T <= m->T) on this rank. inputs and
   targets are host int arrays (B*T). With targets: returns the mean loss
   over the B*T tokens, the LM head running over the vocabulary chunks
   (online softmax: m->lm_max, m->lm_sum, m->lm_target per row); dloss != 0
   marks a training forward (gpt2_backward follows, with dL/dloss_row =
   dloss). Without targets (sampling): m->last_logits (B, Vp) gets the
   logits of each sequence's last position; returns 0. Stage 3 gathers
   every unit before its use and releases it after, as its class says. */
/* One block's forward from a->in with the block's gathered params w
   (tensor b0 its first): every activation of a; full = 0 (the recompute of
   -r 3 in backward) stops after the GELU: backward reads neither fcproj
   nor the block's output. The same kernels on the same inputs: the
   recompute writes the bits the first forward wrote. */
static inline void gpt2_block_forward(GPT2* m, const GPT2BlockActs* a, floatX* w, int b0, int B, int T, int full) {
    int C = m->config.channels, NH = m->config.num_heads;
    size_t BT = (size_t)B * T;
    layernorm_forward(a->ln1, a->ln1m, a->ln1r, a->in, gpt2_tp(m, w, b0 + B_LN1W), gpt2_tp(m, w, b0 + B_LN1B), (int)BT, C);
    matmul_forward(a->qkv, a->ln1, gpt2_tp(m, w, b0 + B_QKVW), gpt2_tp(m, w, b0 + B_QKVB), (int)BT, C, 3 * C);
    attention_forward(a->atty, m->preatt, a->att, a->qkv, B, T, C, NH);
    matmul_forward(a->attproj, a->atty, gpt2_tp(m, w, b0 + B_ATTPROJW), gpt2_tp(m, w, b0 + B_ATTPROJB), (int)BT, C, C);
    residual_forward(a->res2, a->in, a->attproj, BT * C);
    layernorm_forward(a->ln2, a->ln2m, a->ln2r, a->res2, gpt2_tp(m, w, b0 + B_LN2W), gpt2_tp(m, w, b0 + B_LN2B), (int)BT, C);
    matmul_forward(a->fch, a->ln2, gpt2_tp(m, w, b0 + B_FCW), gpt2_tp(m, w, b0 + B_FCB), (int)BT, C, 4 * C);
    gelu_forward(a->fchg, a->fch, BT * 4 * C);
    if (!full) return;
    matmul_forward(a->fcproj, a->fchg, gpt2_tp(m, w, b0 + B_FCPROJW), gpt2_tp(m, w, b0 + B_FCPROJB), (int)BT, 4 * C, C);
    residual_forward(a->res3, a->res2, a->fcproj, BT * C);
}

static inline float gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T, float dloss) {
    const GPT2Config* c = &m->config;
    const GPT2Layout* y = &m->layout;
    ZeroEngine* E = &m->engine;
    int C = c->channels, L = c->num_layers, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T;
    m->dloss = dloss;
    backend_to_device(m->inputs, inputs, BT * sizeof(int));
    if (targets) backend_to_device(m->targets, targets, BT * sizeof(int));
    memcpy(m->host_tokens, inputs, BT * sizeof(int));
    zero_begin_pass(E, m->sched_train, dloss != 0.0f ? m->sched_train_len : m->sched_fwd_len);  /* a forward alone: its first part */
    trace_begin(TRACE_TID_COMPUTE, -1, "forward");
    floatX* root = zero_unit_params(E, gpt2_unit_root());
    /* embedding: each token's row from the chunk that holds it */
    for (int k = 0; k < y->num_chunks; k++) {
        int u = gpt2_unit_chunk(y, k);
        floatX* W = zero_unit_params(E, u);
        trace_begin(TRACE_TID_COMPUTE, u, "embedding chunk %d", k);
        encoder_forward_rows(m->encoded, m->inputs, W, gpt2_chunk_row0(y, k), gpt2_chunk_nrows(y, k),
                             gpt2_tp(m, root, T_WPE), B, T, C);
        zero_release_unit(E, u, 1);
        trace_end(TRACE_TID_COMPUTE);
    }
    for (int l = 0; l < L; l++) {
        int u = gpt2_unit_block(y, l);
        floatX* w = zero_unit_params(E, u);
        trace_begin(TRACE_TID_COMPUTE, u, "block %d", l);
        GPT2BlockActs a = gpt2_block_acts(m, l, B, T);
        gpt2_block_forward(m, &a, w, gpt2_block_tensor(y, l, 0), B, T, 1);
        zero_release_unit(E, u, 1);
        trace_end(TRACE_TID_COMPUTE);
    }
    floatX* last = m->residual3 + (size_t)(L - 1) * BT * C;
    layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, last, gpt2_tp(m, root, T_LNFW), gpt2_tp(m, root, T_LNFB), (int)BT, C);
    if (!targets) {
        /* the last position of each sequence, gathered into dlnf (free in a forward) */
        for (int b = 0; b < B; b++)
            backend_memcpy(m->dlnf + (size_t)b * C, m->lnf + ((size_t)b * T + T - 1) * C, (size_t)C * sizeof(floatX));
        for (int k = 0; k < y->num_chunks; k++) {
            int u = gpt2_unit_chunk(y, k), nr = gpt2_chunk_nrows(y, k);
            floatX* W = zero_unit_params(E, u);
            trace_begin(TRACE_TID_COMPUTE, u, "lm head chunk %d", k);
            gpt2_chunk_logits(m, m->logits, m->dlnf, B, W, k);
            for (int b = 0; b < B; b++)
                backend_memcpy(m->last_logits + (size_t)b * Vp + gpt2_chunk_row0(y, k), m->logits + (size_t)b * nr,
                               (size_t)nr * sizeof(floatX));
            zero_release_unit(E, u, 1);
            trace_end(TRACE_TID_COMPUTE);
        }
        trace_end(TRACE_TID_COMPUTE);
        return 0.0f;
    }
    classifier_stats_init(m->lm_max, m->lm_sum, m->lm_target, (int)BT);
    for (int k = 0; k < y->num_chunks; k++) {
        int u = gpt2_unit_chunk(y, k), nr = gpt2_chunk_nrows(y, k);
        floatX* W = zero_unit_params(E, u);
        trace_begin(TRACE_TID_COMPUTE, u, "lm head chunk %d", k);
        floatX* lg = gpt2_chunk_logits_buf(m, BT, k);
        gpt2_chunk_logits(m, lg, m->lnf, (int)BT, W, k);
        classifier_chunk_stats(lg, (int)BT, gpt2_chunk_row0(y, k), nr, V, m->targets, m->lm_max, m->lm_sum, m->lm_target);
        zero_release_unit(E, u, 1);
        trace_end(TRACE_TID_COMPUTE);
    }
    classifier_losses(m->losses, m->lm_max, m->lm_sum, m->lm_target, (int)BT);
    trace_end(TRACE_TID_COMPUTE);
    backend_to_host(m->host_losses, m->losses, BT * sizeof(float));
    double s = 0.0;
    for (size_t i = 0; i < BT; i++) s += m->host_losses[i];
    if (m->opt.invariant) {   /* the sum of the B*T losses as a pairwise tree over the sequences (each in order, in double) */
        double q[64];
        int nq = 0;
        for (int b = 0; b < B; b++) {
            double v = 0.0;
            for (int t = 0; t < T; t++) v += m->host_losses[(size_t)b * T + t];
            int c = b;
            while (c & 1) { v = q[--nq] + v; c >>= 1; }
            q[nq++] = v;
        }
        while (nq > 1) { double v = q[--nq]; q[nq - 1] = q[nq - 1] + v; }
        m->loss_sum = q[0];
    }
    return (float)(s / (double)BT);
}

/* The segments of embedding_backward_range: in order (row indices sorted by
   (key, index)), the runs of rows whose key (table row) lies in [r_first,
   r_last]: seg[s] .. seg[s+1] is run s, seg_key[s] its table row. seg needs
   room for n + 1 entries, seg_key for n. Returns the number of runs. */
static inline int gpt2_embedding_segments(const int* keys, const int* order, int n, long r_first, long r_last,
                                          int* seg, int* seg_key) {
    int a = 0, b = n;
    while (a < b) { int mid = (a + b) / 2; if (keys[order[mid]] < r_first) a = mid + 1; else b = mid; }
    int nseg = 0, i = a;
    while (i < n && keys[order[i]] <= r_last) {
        seg[nseg] = i;
        seg_key[nseg++] = keys[order[i]];
        int k = keys[order[i]];
        while (i < n && keys[order[i]] == k) i++;
    }
    seg[nseg] = i;
    return nseg;
}

/* The embedding gradient of the last micro-step's rows (m->emb_rows,
   m->emb_tokens and their orders) for this rank's own shard of units
   0..K, added with one rounding per element into dst_of(u) + (a - lo)
   where [lo, hi) is the own range of unit u and a the table element. dst
   is the grad shard (stages 2-3), the own part of the full grads after
   their reduce-scatter (stages 0-1, one micro-step) or the accumulator
   (stages 0-1, several micro-steps). */
enum { GPT2_EMB_TO_GRADS = 0, GPT2_EMB_TO_ACC };
static inline void gpt2_embedding_apply(GPT2* m, int B, int T, int where) {
    const ZeroPlan* P = &m->plan;
    const GPT2Layout* y = &m->layout;
    ZeroEngine* E = &m->engine;
    int C = m->config.channels, n = P->num_ranks * B * T;
    for (int u = 0; u < gpt2_num_emb_units(m); u++) {
        int t = u == 0 ? T_WPE : gpt2_tensor_chunk(y, u - 1);
        size_t lo, hi, a;
        zero_own_range(P, u, &lo, &hi);
        size_t cnt = zero_tensor_overlap(P, t, lo, hi, &a);
        if (!cnt) continue;
        size_t tab = a - P->tensors[t].offset;   /* element offset in the table (wpe or this piece of wte) */
        floatX* dst = where == GPT2_EMB_TO_ACC ? m->emb_acc + m->emb_acc_off[u] + (a - lo)
                                               : E->grads + zero_index(P, ZB_GRADS, u, a);
        /* wpe: keyed by position; a wte piece: by token, in whole-table coordinates */
        size_t base = u == 0 ? 0 : (size_t)gpt2_chunk_row0(y, u - 1) * (size_t)C;
        const int* keys = u == 0 ? m->emb_positions : m->emb_tokens;
        const int* order = u == 0 ? m->emb_order_pos : m->emb_order_tok;
        size_t lo_t = base + tab, hi_t = base + tab + cnt;
        int nseg = gpt2_embedding_segments(keys, order, n, (long)(lo_t / (size_t)C), (long)((hi_t - 1) / (size_t)C),
                                           m->emb_seg, m->emb_seg_key);
        embedding_backward_range(dst, lo_t, hi_t, m->emb_rows, order, m->emb_seg, m->emb_seg_key, nseg, C);
    }
}

/* Embedding backward of the last micro-step: d(embedding output) is in
   m->dres. All-gather every rank's rows and token ids (N > 1), order them
   by token, then form the embedding gradient of the own shard (see the top
   of the file): into the grad shards at once (stages 2-3, after the
   reduce-scatters of the LM head's part landed), into the accumulator
   (stages 0-1 with several micro-steps), or later in gpt2_reduce_grads
   (stages 0-1, one micro-step: the rows stay in m->emb_rows). */
static inline void gpt2_embedding_backward(GPT2* m, int B, int T) {
    const ZeroPlan* P = &m->plan;
    Comm* comm = m->comm;
    int N = P->num_ranks, C = m->config.channels;
    size_t BT = (size_t)B * T, n = (size_t)N * BT;
    if (N > 1) {
        backend_memcpy(m->emb_rows + (size_t)P->rank * BT * C, m->dres, BT * C * sizeof(floatX));
        comm->purpose_embedding = 1;
        comm->cur_unit = -1;
        unsigned long long f = backend_all_gather_start(comm, m->emb_rows, BT * C);
        comm_group_gather_ints(comm, m->host_tokens, (int)BT, m->emb_tokens);
        comm->purpose_embedding = 0;
        backend_wait_comm(f);
    } else {
        memcpy(m->emb_tokens, m->host_tokens, BT * sizeof(int));
    }
    /* rows by (token, row index): a stable order, the same on every rank */
    int* pairs = (int*)malloc_or_die(2 * n * sizeof(int), "embedding sort");
    for (size_t i = 0; i < n; i++) { pairs[2 * i] = m->emb_tokens[i]; pairs[2 * i + 1] = (int)i; }
    qsort(pairs, n, 2 * sizeof(int), gpt2_cmp_pair);
    for (size_t i = 0; i < n; i++) m->emb_order_tok[i] = pairs[2 * i + 1];
    free(pairs);
    if (m->emb_tree.nbuf) {
        /* --invariant 1: the embedding part of the wte and wpe grads is a
           tree over the sequences of its own, added to the LM head's part
           once, after the last micro-step (gpt2_reduce_grads) */
        gpt2_embedding_apply(m, B, T, GPT2_EMB_TO_ACC);
    } else if (P->zero_stage >= 2) {
        zero_wait_grads(&m->engine);
        gpt2_embedding_apply(m, B, T, GPT2_EMB_TO_GRADS);
    } else if (P->grad_accum_steps > 1) {
        gpt2_embedding_apply(m, B, T, GPT2_EMB_TO_ACC);
    } else {
        m->emb_pending = 1;
    }
}

/* LLMC_POISON=1: the one-layer recompute buffers filled with NaN before a
   layer's backward, so anything backward reads that the recompute did not
   write again shows in the loss. */
static inline void gpt2_poison_recompute(GPT2* m, int B, int T) {
    size_t BT = (size_t)B * T, C = (size_t)m->config.channels, NH = (size_t)m->config.num_heads, x = sizeof(floatX), f = sizeof(float);
    int r = m->opt.recompute;
    void* p[13] = {m->fch_gelu, m->ln1, m->ln2, m->qkv, m->atty, m->att, m->attproj, m->residual2, m->fch, m->fcproj,
                   m->ln1_mean, m->ln1_rstd, m->ln2_mean};
    size_t b[13] = {4 * C * x, C * x, C * x, 3 * C * x, C * x, NH * (size_t)m->T * x, C * x, C * x, 4 * C * x, C * x, f, f, f};
    int n = r >= 3 ? 13 : r == 2 ? 2 : 1;   /* -r 1: fch_gelu; -r 2: + the shared LayerNorm buffer; -r 3: the whole block */
    for (int i = 0; i < n; i++) backend_memset_nan(p[i], BT * b[i]);
    if (r >= 3) backend_memset_nan(m->ln2_rstd, BT * f);
}

/* Backward of the last gpt2_forward (which must have had targets and
   dloss != 0), into the engine's gradient buffers: each unit's grads are
   handed to the engine as soon as they are complete (stages 2-3
   reduce-scatter them at once).
   One function of about 90 lines on purpose: the order of the units'
   gathers, recomputation, kernels and reduce-scatters IS the backward
   pass, and reads top to bottom as the engine sees it. */
static inline void gpt2_backward(GPT2* m, int B, int T) {
    const GPT2Config* c = &m->config;
    const GPT2Layout* y = &m->layout;
    ZeroEngine* E = &m->engine;
    int C = c->channels, NH = c->num_heads, L = c->num_layers, V = c->vocab_size;
    size_t BT = (size_t)B * T, x = sizeof(floatX);
    if (B != m->B || T != m->T) comm_fatal(m->comm, "gpt2_backward: micro-batch %dx%d differs from the allocated %dx%d", B, T, m->B, m->T);
    trace_begin(TRACE_TID_COMPUTE, -1, "backward");
    if (m->emb_tree.nbuf) {   /* --invariant 1, A > 1: this micro-step's leaves */
        zero_inv_begin_micro(E);
        m->emb_acc = zero_inv_tree_leaf(&m->emb_tree);
    }
    floatX* root = zero_unit_params(E, gpt2_unit_root());
    /* LM head: per vocabulary chunk, dlogits from the saved statistics, dlnf
       += dlogits W, dW = dlogits^T lnf, handed to the engine at once */
    backend_memset_zero(m->dlnf, BT * C * x);
    for (int k = 0; k < y->num_chunks; k++) {
        int u = gpt2_unit_chunk(y, k), nr = gpt2_chunk_nrows(y, k);
        floatX* W = zero_unit_params(E, u);
        trace_begin(TRACE_TID_COMPUTE, u, "lm head chunk %d", k);
        floatX* lg = gpt2_chunk_logits_buf(m, BT, k);
        if (!m->opt.keep_logits) gpt2_chunk_logits(m, lg, m->lnf, (int)BT, W, k);
        classifier_chunk_grad(lg, (int)BT, gpt2_chunk_row0(y, k), nr, V, m->targets, m->lm_max, m->lm_sum, m->dloss);
        floatX* g = zero_unit_grads(E, u);
        backend_matmul_lm_head(1);
        matmul_backward(m->dlnf, g, NULL, lg, m->lnf, W, (int)BT, C, nr);
        backend_matmul_lm_head(0);
        zero_unit_grads_done(E, u);
        zero_release_unit(E, u, 0);
        trace_end(TRACE_TID_COMPUTE);
    }
    trace_begin(TRACE_TID_COMPUTE, gpt2_unit_root(), "root");
    floatX* groot = zero_unit_grads(E, gpt2_unit_root());
    backend_memset_zero(m->dres, BT * C * x);
    floatX* last = m->residual3 + (size_t)(L - 1) * BT * C;
    layernorm_backward(m->dres, gpt2_tp(m, groot, T_LNFW), gpt2_tp(m, groot, T_LNFB), m->dlnf, last,
                       gpt2_tp(m, root, T_LNFW), m->lnf_mean, m->lnf_rstd, (int)BT, C);
    zero_unit_grads_done(E, gpt2_unit_root());
    trace_end(TRACE_TID_COMPUTE);
    for (int l = L - 1; l >= 0; l--) {
        int u = gpt2_unit_block(y, l);
        floatX* w = zero_unit_params(E, u);
        floatX* g = zero_unit_grads(E, u);
        trace_begin(TRACE_TID_COMPUTE, u, "block %d", l);
        int b0 = gpt2_block_tensor(y, l, 0);
        GPT2BlockActs a = gpt2_block_acts(m, l, B, T);
        int r = m->opt.recompute;
        if (r > 0 && m->engine.poison) gpt2_poison_recompute(m, B, T);   /* LLMC_POISON=1: what is not recomputed reads NaN */
        if (r >= 3) {   /* the block's forward again, from its input, with the params this backward gathered */
            trace_begin(TRACE_TID_COMPUTE, u, "recompute block %d", l);
            gpt2_block_forward(m, &a, w, b0, B, T, 0);
            trace_end(TRACE_TID_COMPUTE);
        } else if (r >= 1) {
            trace_begin(TRACE_TID_COMPUTE, u, "recompute gelu%s %d", r >= 2 ? ", ln2" : "", l);
            gelu_forward(a.fchg, a.fch, BT * 4 * C);
            if (r >= 2)
                layernorm_forward(a.ln2, a.ln2m, a.ln2r, a.res2, gpt2_tp(m, w, b0 + B_LN2W), gpt2_tp(m, w, b0 + B_LN2B), (int)BT, C);
            trace_end(TRACE_TID_COMPUTE);
        }
        /* dres holds d(residual3); the MLP half */
        backend_memset_zero(m->dfch_gelu, BT * 4 * C * x);
        matmul_backward(m->dfch_gelu, gpt2_tp(m, g, b0 + B_FCPROJW), gpt2_tp(m, g, b0 + B_FCPROJB), m->dres, a.fchg,
                        gpt2_tp(m, w, b0 + B_FCPROJW), (int)BT, 4 * C, C);
        backend_memset_zero(m->dfch, BT * 4 * C * x);
        gelu_backward(m->dfch, a.fch, m->dfch_gelu, BT * 4 * C);
        backend_memset_zero(m->dln, BT * C * x);
        matmul_backward(m->dln, gpt2_tp(m, g, b0 + B_FCW), gpt2_tp(m, g, b0 + B_FCB), m->dfch, a.ln2,
                        gpt2_tp(m, w, b0 + B_FCW), (int)BT, C, 4 * C);
        /* the residual passes dres through; LayerNorm adds its part: dres = d(residual2) */
        layernorm_backward(m->dres, gpt2_tp(m, g, b0 + B_LN2W), gpt2_tp(m, g, b0 + B_LN2B), m->dln, a.res2,
                           gpt2_tp(m, w, b0 + B_LN2W), a.ln2m, a.ln2r, (int)BT, C);
        /* the attention half */
        backend_memset_zero(m->datty, BT * C * x);
        matmul_backward(m->datty, gpt2_tp(m, g, b0 + B_ATTPROJW), gpt2_tp(m, g, b0 + B_ATTPROJB), m->dres, a.atty,
                        gpt2_tp(m, w, b0 + B_ATTPROJW), (int)BT, C, C);
        backend_memset_zero(m->dqkv, BT * 3 * C * x);
        attention_backward(m->dqkv, m->dpreatt, m->datt, m->datty, a.qkv, a.att, B, T, C, NH);
        if (r == 2) {   /* ln1 shares its buffer with ln2: recomputed now */
            trace_begin(TRACE_TID_COMPUTE, u, "recompute ln1 %d", l);
            layernorm_forward(a.ln1, a.ln1m, a.ln1r, a.in, gpt2_tp(m, w, b0 + B_LN1W), gpt2_tp(m, w, b0 + B_LN1B), (int)BT, C);
            trace_end(TRACE_TID_COMPUTE);
        }
        backend_memset_zero(m->dln, BT * C * x);
        matmul_backward(m->dln, gpt2_tp(m, g, b0 + B_QKVW), gpt2_tp(m, g, b0 + B_QKVB), m->dqkv, a.ln1,
                        gpt2_tp(m, w, b0 + B_QKVW), (int)BT, C, 3 * C);
        layernorm_backward(m->dres, gpt2_tp(m, g, b0 + B_LN1W), gpt2_tp(m, g, b0 + B_LN1B), m->dln, a.in,
                           gpt2_tp(m, w, b0 + B_LN1W), a.ln1m, a.ln1r, (int)BT, C);
        zero_unit_grads_done(E, u);
        zero_release_unit(E, u, 0);
        trace_end(TRACE_TID_COMPUTE);
    }
    trace_begin(TRACE_TID_COMPUTE, -1, "embedding");
    gpt2_embedding_backward(m, B, T);
    trace_end(TRACE_TID_COMPUTE);
    if (m->emb_tree.nbuf) {
        zero_inv_end_micro(E);
        zero_inv_tree_push(&m->emb_tree);
    }
    trace_end(TRACE_TID_COMPUTE);
}

/* After the last micro-step of an optimizer step: every rank's own shard of
   the gradients holds the sum over ranks and micro-steps. Stages 0-1:
   reduce-scatter the full grads, add the embedding gradient (after the LM
   head's part, as stages 2-3 do: the same sums in the same order), and at
   stage 0 all-gather the result (stage 0's all-reduce). Stages 2-3: wait
   for the reduce-scatters still running. HSDP: the group's sums are then
   all-reduced across the replica groups. */
static inline void gpt2_reduce_grads(GPT2* m) {
    const ZeroPlan* P = &m->plan;
    ZeroEngine* E = &m->engine;
    trace_begin(TRACE_TID_COMPUTE, -1, "reduce grads");
    zero_reduce_scatter_grads(E);
    if (m->emb_tree.nbuf) m->emb_acc = zero_inv_tree_root(&m->emb_tree);   /* --invariant 1, A > 1 */
    if (P->zero_stage <= 1 || m->emb_tree.nbuf) {
        if (m->emb_pending) {
            gpt2_embedding_apply(m, m->B, m->T, GPT2_EMB_TO_GRADS);
            m->emb_pending = 0;
        } else if (m->emb_acc) {
            for (int u = 0; u < gpt2_num_emb_units(m); u++) {
                size_t lo, hi;
                zero_own_range(P, u, &lo, &hi);
                backend_add(E->grads + zero_index(P, ZB_GRADS, u, lo), m->emb_acc + m->emb_acc_off[u], hi - lo);
            }
        }
    }
    zero_all_reduce_replicas(E);
    zero_all_gather_grads(E);
    trace_end(TRACE_TID_COMPUTE);
}

/* Start of an optimizer step: zero the gradient accumulators. */
static inline void gpt2_begin_step(GPT2* m) {
    zero_begin_step(&m->engine);
    if (m->emb_acc && !m->emb_tree.nbuf) {
        unsigned long long acc_bytes = m->ledger.allocated[MEM_EMB_ACC];
        backend_memset_zero(m->emb_acc, (size_t)acc_bytes);
    }
    if (m->emb_tree.nbuf) { zero_inv_tree_reset(&m->emb_tree); m->emb_acc = NULL; }
    m->emb_pending = 0;
}

/* Logits of every row of the last forward (B x T, which had targets) into
   host fp32 out (B*T, V), recomputed chunk by chunk (a check for tests;
   stage 3 gathers the chunks again). */
static inline void gpt2_logits_to_host(GPT2* m, int B, int T, float* out) {
    const GPT2Layout* y = &m->layout;
    ZeroEngine* E = &m->engine;
    size_t BT = (size_t)B * T;
    int V = m->config.vocab_size;
    float* row = (float*)malloc_or_die((size_t)y->chunk_rows * sizeof(float), "logit row");
    zero_begin_pass(E, m->sched_chunks, y->num_chunks);
    for (int k = 0; k < y->num_chunks; k++) {
        int u = gpt2_unit_chunk(y, k), nr = gpt2_chunk_nrows(y, k), r0 = gpt2_chunk_row0(y, k);
        floatX* W = zero_unit_params(E, u);
        floatX* lg = m->logits; /* recomputed (with keep_logits: over the first chunk's place) */
        gpt2_chunk_logits(m, lg, m->lnf, (int)BT, W, k);
        int ncopy = r0 + nr <= V ? nr : (r0 < V ? V - r0 : 0);
        for (size_t i = 0; i < BT && ncopy > 0; i++) {
            backend_floatX_to_floats(row, lg + i * (size_t)nr, (size_t)ncopy);
            memcpy(out + i * (size_t)V + r0, row, (size_t)ncopy * sizeof(float));
        }
        zero_release_unit(E, u, 0);
    }
    free(row);
}

static inline void gpt2_free(GPT2* m) {
    /* activations are released with the process; the engine frees the model states */
    zero_engine_free(&m->engine);
    zero_plan_free(&m->plan);
    free(m->host_losses); free(m->host_tokens); free(m->emb_tokens); free(m->emb_positions);
    free(m->emb_order_tok); free(m->emb_order_pos); free(m->emb_seg); free(m->emb_seg_key); free(m->emb_acc_off);
    free(m->sched_train); free(m->sched_chunks);
}

#endif /* LLMC_GPT_H */
