/*
 gpt_memory.h: what a GPT-2 run holds, from the plan alone (nothing is
 allocated): the activation bytes each -r keeps and the recompute buffers
 (per layer and token, closed forms), the embedding-gradient buffers, the
 whole ledger a run would allocate (gpt2_predict: the fit check, the
 estimator and gpt2_init use the same call) and the host memory outside it.
 gpt.h allocates exactly these bytes, category by category.
*/
#ifndef LLMC_GPT_MEMORY_H
#define LLMC_GPT_MEMORY_H

#include "gpt_shard.h"

/* Activation recomputation (-r, GPT2Options.recompute), the memory side:
   what one layer keeps from forward to backward, bytes per token (x =
   sizeof(floatX); 16 = the four fp32 LayerNorm statistics):
     -r 0  18 C x + NH T x + 16  everything: ln1, qkv (3C), atty, att (NH T),
                                 attproj, res2, ln2, fch (4C), fch_gelu (4C),
                                 fcproj, res3
     -r 1  14 C x + NH T x + 16  the GELU output is recomputed from fch in
                                 backward (llm.c's -r 1)
     -r 2  12 C x + NH T x + 16  + both LayerNorm outputs, from their inputs
                                 and the kept statistics (llm.c's -r 2)
     -r 3   1 C x                the block's output only (the residual
                                 stream); backward reruns the block's forward
                                 from the previous block's output (activation
                                 checkpointing per block: DeepSpeed's
                                 checkpointing, FSDP's full checkpointing)
   and the one-layer buffers the recompute writes into, reused by every
   layer (ledger: "recompute buffers (transient)"), bytes per token:
     -r 1  4 C x (fch_gelu); -r 2  5 C x (+ one LayerNorm output, shared by
     ln1 and ln2); -r 3  17 C x + NH T x + 16 (one block's every activation
     but its output). */
static inline void gpt2_recompute_per_token(int r, int C, int NH, int T, size_t x, size_t* kept, size_t* transient) {
    size_t c = (size_t)C, h = (size_t)NH * (size_t)T;
    switch (r) {
        case 0: *kept = 18 * c * x + h * x + 16; *transient = 0; break;
        case 1: *kept = 14 * c * x + h * x + 16; *transient = 4 * c * x; break;
        case 2: *kept = 12 * c * x + h * x + 16; *transient = 5 * c * x; break;
        default: *kept = c * x; *transient = 17 * c * x + h * x + 16; break;
    }
}

/* Bytes of the recompute buffers (-r 1..3; 0 at -r 0), per rank. */
static inline size_t gpt2_recompute_bytes(const GPT2Config* c, const GPT2Options* o, int B, int T) {
    size_t kept, tr;
    gpt2_recompute_per_token(o->recompute, c->channels, c->num_heads, T, sizeof(floatX), &kept, &tr);
    return (size_t)B * (size_t)T * tr;
}

/* Closed-form bytes of every activation buffer for (B, T), per rank (the
   recompute buffers apart: gpt2_recompute_bytes): per layer and token what
   -r keeps (gpt2_recompute_per_token; -r 0: 18C floatX (ln1, qkv 3C, atty,
   attproj, residual2, ln2, fch 4C, fch_gelu 4C, fcproj, residual3) + NH*T
   floatX (att) + 4 fp32 LayerNorm statistics); per token 2C floatX (encoded, lnf) + the LM head
   (a chunk of logits: Vc floatX per token, or Vp with keep_logits; running
   max, target logit and loss in fp32, running sum in fp64: 20 bytes) + 2
   fp32 lnf statistics; B*Vp floatX last-position logits; three NH*T*T per
   sequence (preatt, dpreatt, datt); backward scratch per token 15C floatX
   (dres, dln, dqkv 3C, datty, dfch 4C, dfch_gelu 4C, dlnf); two int32 per
   token (inputs, targets). Evaluation only (o->eval_only): no backward
   scratch but dlnf (a forward's last positions), one NH*T*T (preatt). */
static inline size_t gpt2_activation_bytes(const GPT2Config* c, const GPT2Layout* y, const GPT2Options* o, int B, int T) {
    size_t BT = (size_t)B * T, C = (size_t)c->channels, L = (size_t)c->num_layers, NH = (size_t)c->num_heads;
    size_t x = sizeof(floatX), kept, tr;
    gpt2_recompute_per_token(o->recompute, (int)C, (int)NH, T, x, &kept, &tr);
    size_t per_layer = BT * kept;   /* -r 0: 18C x + NH T x + 16 */
    size_t lm_cols = o->keep_logits ? (size_t)c->padded_vocab_size : (size_t)y->chunk_rows;
    size_t rest = BT * (2 * C * x + lm_cols * x + 3 * sizeof(float) + sizeof(double) + 2 * sizeof(float));
    size_t last = (size_t)B * (size_t)c->padded_vocab_size * x;
    size_t att_scratch = (o->eval_only ? 1 : 3) * (size_t)B * NH * (size_t)T * (size_t)T * x;
    size_t bwd = BT * (o->eval_only ? 1 : 15) * C * x;
    size_t ints = 2 * BT * sizeof(int);
    return L * per_layer + rest + last + att_scratch + bwd + ints;
}

/* Bytes of the embedding-gradient buffers of plan P (C channels): the
   all-gathered rows (N > 1) and the accumulator (stages 0-1 with more than
   one micro-step): the own shards of units 0..K. */
/* elements of the own shards of units 0..K (wpe and the wte chunks): the
   embedding gradient's accumulator */
static inline size_t gpt2_emb_shard_elems(const ZeroPlan* P, const GPT2Layout* y) {
    size_t n = 0;
    for (int u = 0; u < 1 + y->num_chunks; u++) n += P->units[u].shard;
    return n;
}

static inline void gpt2_emb_bytes(const ZeroPlan* P, const GPT2Layout* y, int C, int B, int T, unsigned long long* rows, unsigned long long* acc) {
    *rows = P->num_ranks > 1 && !P->eval_only ? (unsigned long long)P->num_ranks * B * T * C * sizeof(floatX) : 0;
    *acc = 0;
    if (P->eval_only) return;   /* no backward */
    if (P->zero_stage <= 1 && P->grad_accum_steps > 1 && !zero_inv_tree_buffers(P))   /* --invariant 1: the micro-step tree (gpt.h) */
        for (int u = 0; u < 1 + y->num_chunks; u++) *acc += (unsigned long long)P->units[u].shard * sizeof(floatX);
}

/* What a run of this model would allocate through the ledger on rank
   group_rank of a shard group of G ranks (R replica groups), micro-batch
   B x T: builds the plan and the layout (P, y: the caller frees P) and
   fills L's predicted column (model states, transients, activations,
   embedding rows). gpt2_init allocates exactly this; the fit check and
   -z auto compare it with a rank's budget before anything is allocated.
   0, or 1 with a message (an impossible configuration). */
static inline int gpt2_predict(ZeroPlan* P, GPT2Layout* y, Ledger* L, const GPT2Config* cfg, const GPT2Options* opt, int G, int group_rank,
                               int R, int B, int T, char* err, size_t errlen) {
    if (gpt2_config_check(cfg, "model", err, errlen)) return 1;
    if (T < 1 || T > cfg->max_seq_len) return set_err(err, errlen, "-t %d: sequence length must be in 1..%d (the model's max_seq_len)", T, cfg->max_seq_len);
    if (B < 1) return set_err(err, errlen, "-b %d: micro-batch must be >= 1", B);
    if (gpt2_plan_init(P, y, cfg, opt, G, group_rank, R, (int)sizeof(floatX), B, T, err, errlen)) return 1;
    size_t act = gpt2_activation_bytes(cfg, y, opt, B, T);
    zero_predict_memory(P, act, L);
    gpt2_emb_bytes(P, y, cfg->channels, B, T, &L->predicted[MEM_EMB_ROWS], &L->predicted[MEM_EMB_ACC]);
    L->predicted[MEM_INV_TREE] += (unsigned long long)zero_inv_tree_buffers(P) * gpt2_emb_shard_elems(P, y) * sizeof(floatX);
    L->predicted[MEM_RECOMPUTE] = gpt2_recompute_bytes(cfg, opt, B, T);
    /* the closed forms beside the ledger's activation rows */
    static const char* kept_form[4] = {"18C x + NH T x + 16", "14C x + NH T x + 16", "12C x + NH T x + 16", "C x"};
    static const char* tr_form[4] = {"", "4C x", "5C x", "17C x + NH T x + 16"};
    size_t kept, tr, BT = (size_t)B * T, Lr = (size_t)cfg->num_layers;
    int r = opt->recompute < 0 ? 0 : opt->recompute > 3 ? 3 : opt->recompute;
    gpt2_recompute_per_token(r, cfg->channels, cfg->num_heads, T, sizeof(floatX), &kept, &tr);
    snprintf(L->formula[MEM_ACTIVATIONS], sizeof(L->formula[MEM_ACTIVATIONS]),
             "%s%d: L B T (%s) = %zu + %zu outside the blocks (x = %zu)", opt->eval_only ? "-x 0, forward only, as -r " : "-r ", r, kept_form[r],
             Lr * BT * kept, act - Lr * BT * kept, sizeof(floatX));
    if (r > 0)
        snprintf(L->formula[MEM_RECOMPUTE], sizeof(L->formula[MEM_RECOMPUTE]), "%s%d: one layer, B T (%s)%s", opt->eval_only ? "-x 0, as -r " : "-r ", r,
                 tr_form[r], opt->eval_only ? ", every layer's forward in turn" : "");
    return 0;
}

/* Host memory a run uses outside the ledger, from the plan alone: *held,
   the model's bookkeeping for the whole run (losses; the embedding-row
   exchange's token ids, positions, orders and segments: N x B x T ints
   each, and the sort's pairs; the stage-3 schedules; a sample's
   probabilities); *staging, the largest transient of parameter I/O: the
   random init draws wte whole (4 Vp C bytes, or the largest tensor),
   loading a checkpoint reads one tensor piece at a time (4 bytes per
   element, 6 from a bf16 file), saving a checkpoint or a state likewise
   (4, +2 for a bf16 file). Bytes. */
static inline void gpt2_host_bytes(const GPT2Config* cfg, const GPT2Layout* y, const ZeroPlan* P, int B, int T, int from_checkpoint,
                                   int ckpt_version_in, int ckpt_version_out, unsigned long long* held, unsigned long long* staging) {
    unsigned long long BT = (unsigned long long)B * T, rows = (unsigned long long)P->num_ranks * BT, i4 = 4;
    unsigned long long maxsz = 0;
    for (int t = 0; t < P->num_tensors; t++) if (P->tensors[t].size > maxsz) maxsz = P->tensors[t].size;
    *held = BT * 4 + BT * i4                          /* host losses, host tokens */
          + rows * i4 * 6 + i4                        /* emb tokens, positions, order by token and position, seg (+1), seg key */
          + rows * 2 * i4                             /* the sort's (token, row) pairs */
          + (unsigned long long)(1 + y->num_chunks) * sizeof(size_t)
          + (unsigned long long)(2 + 3 * y->num_chunks + 2 * y->num_layers + y->num_chunks) * i4   /* schedules */
          + (unsigned long long)cfg->vocab_size * 4 + (unsigned long long)T * i4;                  /* a sample */
    unsigned long long wte = (unsigned long long)cfg->padded_vocab_size * cfg->channels;
    unsigned long long init = 4 * (wte > maxsz ? wte : maxsz);
    unsigned long long load = maxsz * (ckpt_version_in == 5 ? 6 : 4);
    unsigned long long save = maxsz * (ckpt_version_out == 5 ? 6 : 4);
    unsigned long long in = from_checkpoint ? load : init;
    *staging = in > save ? in : save;
}

#endif /* LLMC_GPT_MEMORY_H */
