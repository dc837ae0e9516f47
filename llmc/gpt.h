/*
 gpt.h: the GPT-2 model over the ZeRO engine: configuration, the parameter
 tensors and their units, initialisation, llm.c checkpoints, activations,
 and the forward and backward passes written as a loop over units. Written
 once for both backends: it calls only backend functions (memory, kernels)
 and the engine (zero.h), never MPI, CUDA or BLAS directly.

 Model (Radford et al. 2019, GPT-2): token + learned position embeddings;
 L pre-LayerNorm blocks, each x += attproj(attention(qkv(ln1(x)))) then
 x += fcproj(gelu_tanh(fc(ln2(x)))); final LayerNorm; logits = lnf(x) wte^T
 (LM head tied to wte) over the vocabulary padded to a multiple of 128;
 loss = mean cross-entropy over the real vocabulary.

 Units (DESIGN.md section 1): unit 0 = root {wte (Vp,C), wpe (maxT,C),
 lnfw (C), lnfb (C)}; unit l+1 = block l {ln1w, ln1b (C), qkvw (3C,C),
 qkvb (3C), attprojw (C,C), attprojb (C), ln2w, ln2b (C), fcw (4C,C),
 fcb (4C), fcprojw (C,4C), fcprojb (C)}. Weight decay applies to the 2-D
 tensors: wte, wpe, qkvw, attprojw, fcw, fcprojw.

 Checkpoint (llm.c, tensor-major): int32 header[256] = {20240326, version
 (3: fp32, 5: bf16), maxT, V, L, NH, C, Vp}, then wte, wpe, ln1w[L],
 ln1b[L], qkvw[L], qkvb[L], attprojw[L], attprojb[L], ln2w[L], ln2b[L],
 fcw[L], fcb[L], fcprojw[L], fcprojb[L], lnfw, lnfb.
*/
#ifndef LLMC_GPT_H
#define LLMC_GPT_H

#include <sys/stat.h>
#include "utils.h"
#include "zero.h"
#include "rand.h"

#define CKPT_MAGIC 20240326
#define GPT2_ROOT_TENSORS 4
#define GPT2_BLOCK_TENSORS 12

typedef struct {
    int max_seq_len;        /* maxT */
    int vocab_size;         /* V: real vocabulary */
    int padded_vocab_size;  /* Vp: V rounded up to a multiple of 128 */
    int num_layers;         /* L */
    int num_heads;          /* NH */
    int channels;           /* C */
} GPT2Config;

/* Names in unit order (root, then one block). */
static const char* gpt2_root_names[GPT2_ROOT_TENSORS] = {"wte", "wpe", "lnfw", "lnfb"};
static const char* gpt2_block_names[GPT2_BLOCK_TENSORS] = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                                            "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"};
enum { T_WTE = 0, T_WPE, T_LNFW, T_LNFB };
enum { B_LN1W = 0, B_LN1B, B_QKVW, B_QKVB, B_ATTPROJW, B_ATTPROJB, B_LN2W, B_LN2B, B_FCW, B_FCB, B_FCPROJW, B_FCPROJB };

static inline int gpt2_num_tensors(const GPT2Config* c) { return GPT2_ROOT_TENSORS + GPT2_BLOCK_TENSORS * c->num_layers; }

/* Plan index of block tensor j of layer l. */
static inline int gpt2_block_tensor(int l, int j) { return GPT2_ROOT_TENSORS + l * GPT2_BLOCK_TENSORS + j; }

/* Validate a configuration; 0 or 1 with a message. `what` names its source. */
static inline int gpt2_config_check(const GPT2Config* c, const char* what, char* err, size_t errlen) {
    if (c->max_seq_len < 1 || c->vocab_size < 1 || c->num_layers < 1 || c->num_heads < 1 || c->channels < 1)
        return set_err(err, errlen, "%s: sizes must be positive (maxT %d, V %d, L %d, NH %d, C %d)", what,
                       c->max_seq_len, c->vocab_size, c->num_layers, c->num_heads, c->channels);
    if (c->channels % c->num_heads != 0)
        return set_err(err, errlen, "%s: channels %d not divisible by num_heads %d", what, c->channels, c->num_heads);
    if (c->padded_vocab_size < c->vocab_size)
        return set_err(err, errlen, "%s: padded vocab %d smaller than vocab %d", what, c->padded_vocab_size, c->vocab_size);
    if (c->max_seq_len > 1000000 || c->vocab_size > 10000000 || c->num_layers > 1000 || c->channels > 100000)
        return set_err(err, errlen, "%s: implausible sizes (maxT %d, V %d, L %d, C %d)", what, c->max_seq_len, c->vocab_size, c->num_layers, c->channels);
    return 0;
}

/* The tensor list of the plan (sizes in elements, unit, decay flag). out
   must hold gpt2_num_tensors(c) entries. */
static inline void gpt2_build_tensors(const GPT2Config* c, ZeroTensor* out) {
    size_t C = (size_t)c->channels, Vp = (size_t)c->padded_vocab_size, maxT = (size_t)c->max_seq_len;
    size_t rs[GPT2_ROOT_TENSORS] = {Vp * C, maxT * C, C, C};
    int rd[GPT2_ROOT_TENSORS] = {1, 1, 0, 0};
    size_t bs[GPT2_BLOCK_TENSORS] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    int bd[GPT2_BLOCK_TENSORS] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0};
    int k = 0;
    for (int i = 0; i < GPT2_ROOT_TENSORS; i++, k++) {
        out[k].name = gpt2_root_names[i]; out[k].unit = 0; out[k].size = rs[i]; out[k].decay = rd[i]; out[k].offset = 0;
    }
    for (int l = 0; l < c->num_layers; l++)
        for (int j = 0; j < GPT2_BLOCK_TENSORS; j++, k++) {
            out[k].name = gpt2_block_names[j]; out[k].unit = l + 1; out[k].size = bs[j]; out[k].decay = bd[j]; out[k].offset = 0;
        }
}

/* num_parameters (Psi) of a config: the sum of its tensor sizes, the vocab
   padded to Vp as llm.c counts it. The config must be valid. */
static inline long long gpt2_count_parameters(const GPT2Config* c) {
    int n = gpt2_num_tensors(c);
    ZeroTensor* ts = (ZeroTensor*)malloc_or_die((size_t)n * sizeof(ZeroTensor), "tensor list");
    gpt2_build_tensors(c, ts);
    long long total = 0;
    for (int i = 0; i < n; i++) total += (long long)ts[i].size;
    free(ts);
    return total;
}

/* Checkpoint order: for position i of the 16 llm.c tensor kinds and layer l,
   the plan tensor index. Kinds 0,1 = wte, wpe; 2..13 = block tensors j=kind-2
   for each layer; 14, 15 = lnfw, lnfb. Calls f(plan_tensor) in file order. */
static inline int gpt2_checkpoint_order(const GPT2Config* c, int* order) {
    int k = 0;
    order[k++] = T_WTE; order[k++] = T_WPE;
    for (int j = 0; j < GPT2_BLOCK_TENSORS; j++)
        for (int l = 0; l < c->num_layers; l++) order[k++] = gpt2_block_tensor(l, j);
    order[k++] = T_LNFW; order[k++] = T_LNFB;
    return k;
}

/* ------------------------------------------------------------------------ */

typedef struct {
    GPT2Config config;
    Comm* comm;
    ZeroPlan plan;
    Ledger ledger;
    ZeroEngine engine;
    int B, T;                   /* allocated micro-batch and sequence length */
    /* activations, (B,T,...) per layer where indexed by l */
    floatX *encoded, *ln1, *qkv, *atty, *att, *attproj, *residual2, *ln2, *fch, *fch_gelu, *fcproj, *residual3;
    floatX *lnf, *logits, *preatt;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd, *losses;
    /* backward scratch (one layer's worth, reused) */
    floatX *dres, *dln, *dqkv, *datty, *dfch, *dfch_gelu, *dpreatt, *datt, *dlnf;
    int *inputs, *targets;      /* backend memory */
    float* host_losses;
    size_t activation_bytes;
} GPT2;

/* Closed-form bytes of every activation buffer for (B, T), per rank:
   per layer and token 18C floatX (ln1, qkv 3C, atty, attproj, residual2,
   ln2, fch 4C, fch_gelu 4C, fcproj, residual3) + NH*T floatX (att) + 4 fp32
   LayerNorm statistics; per token C (encoded) + C (lnf) + Vp (logits) + 3
   fp32 (lnf stats, loss); one NH*T*T per sequence preatt scratch; backward
   scratch per token 15C (dres, dln, dqkv 3C, datty, dfch 4C, dfch_gelu 4C,
   dlnf) + 2 NH*T per sequence... (dpreatt, datt: NH*T*T per sequence); two int32 per token. */
static inline size_t gpt2_activation_bytes(const GPT2Config* c, int B, int T) {
    size_t BT = (size_t)B * T, C = (size_t)c->channels, L = (size_t)c->num_layers, NH = (size_t)c->num_heads;
    size_t x = sizeof(floatX);
    size_t per_layer = BT * (18 * C * x + NH * (size_t)T * x + 4 * sizeof(float));
    size_t rest = BT * ((2 * C + (size_t)c->padded_vocab_size) * x + 3 * sizeof(float));
    size_t att_scratch = 3 * (size_t)B * NH * (size_t)T * (size_t)T * x;
    size_t bwd = BT * 15 * C * x;
    size_t ints = 2 * BT * sizeof(int);
    return L * per_layer + rest + att_scratch + bwd + ints;
}

static inline void* gpt2_act(GPT2* m, size_t bytes) {
    m->activation_bytes += bytes;
    return ledger_alloc(&m->ledger, m->comm, MEM_ACTIVATIONS, bytes);
}

/* Build plan, engine and activations for micro-batch B x T on this rank.
   Returns 0, or 1 with a message (impossible plan, T > maxT). */
static inline int gpt2_init(GPT2* m, const GPT2Config* cfg, Comm* comm, int zero_stage, int reshard_after_forward,
                            int prefetch, int grad_accum_steps, int B, int T, char* err, size_t errlen) {
    memset(m, 0, sizeof(*m));
    m->config = *cfg; m->comm = comm; m->B = B; m->T = T;
    if (gpt2_config_check(cfg, "model", err, errlen)) return 1;
    if (T < 1 || T > cfg->max_seq_len) return set_err(err, errlen, "-t %d: sequence length must be in 1..%d (the model's max_seq_len)", T, cfg->max_seq_len);
    if (B < 1) return set_err(err, errlen, "-b %d: micro-batch must be >= 1", B);
    int n = gpt2_num_tensors(cfg);
    ZeroTensor* ts = (ZeroTensor*)malloc_or_die((size_t)n * sizeof(ZeroTensor), "tensor list");
    gpt2_build_tensors(cfg, ts);
    int rc = zero_plan_init(&m->plan, ts, n, cfg->num_layers + 1, zero_stage, comm->world_size, comm->rank,
                            (int)sizeof(floatX), (int)sizeof(floatX), reshard_after_forward, prefetch, grad_accum_steps, err, errlen);
    free(ts);
    if (rc) return 1;
    m->plan.rs_scratch = BACKEND_RS_SCRATCH;
    zero_predict_memory(&m->plan, gpt2_activation_bytes(cfg, B, T), &m->ledger);
    zero_engine_init(&m->engine, &m->plan, &m->ledger, comm);
    size_t BT = (size_t)B * T, C = (size_t)cfg->channels, L = (size_t)cfg->num_layers, NH = (size_t)cfg->num_heads;
    size_t x = sizeof(floatX), f = sizeof(float);
    m->encoded = (floatX*)gpt2_act(m, BT * C * x);
    m->ln1 = (floatX*)gpt2_act(m, L * BT * C * x);
    m->ln1_mean = (float*)gpt2_act(m, L * BT * f);
    m->ln1_rstd = (float*)gpt2_act(m, L * BT * f);
    m->qkv = (floatX*)gpt2_act(m, L * BT * 3 * C * x);
    m->atty = (floatX*)gpt2_act(m, L * BT * C * x);
    m->att = (floatX*)gpt2_act(m, L * BT * NH * (size_t)T * x);
    m->attproj = (floatX*)gpt2_act(m, L * BT * C * x);
    m->residual2 = (floatX*)gpt2_act(m, L * BT * C * x);
    m->ln2 = (floatX*)gpt2_act(m, L * BT * C * x);
    m->ln2_mean = (float*)gpt2_act(m, L * BT * f);
    m->ln2_rstd = (float*)gpt2_act(m, L * BT * f);
    m->fch = (floatX*)gpt2_act(m, L * BT * 4 * C * x);
    m->fch_gelu = (floatX*)gpt2_act(m, L * BT * 4 * C * x);
    m->fcproj = (floatX*)gpt2_act(m, L * BT * C * x);
    m->residual3 = (floatX*)gpt2_act(m, L * BT * C * x);
    m->lnf = (floatX*)gpt2_act(m, BT * C * x);
    m->lnf_mean = (float*)gpt2_act(m, BT * f);
    m->lnf_rstd = (float*)gpt2_act(m, BT * f);
    m->logits = (floatX*)gpt2_act(m, BT * (size_t)cfg->padded_vocab_size * x);
    m->losses = (float*)gpt2_act(m, BT * f);
    m->preatt = (floatX*)gpt2_act(m, (size_t)B * NH * T * T * x);
    m->dpreatt = (floatX*)gpt2_act(m, (size_t)B * NH * T * T * x);
    m->datt = (floatX*)gpt2_act(m, (size_t)B * NH * T * T * x);
    m->dres = (floatX*)gpt2_act(m, BT * C * x);
    m->dln = (floatX*)gpt2_act(m, BT * C * x);
    m->dqkv = (floatX*)gpt2_act(m, BT * 3 * C * x);
    m->datty = (floatX*)gpt2_act(m, BT * C * x);
    m->dfch = (floatX*)gpt2_act(m, BT * 4 * C * x);
    m->dfch_gelu = (floatX*)gpt2_act(m, BT * 4 * C * x);
    m->dlnf = (floatX*)gpt2_act(m, BT * C * x);
    m->inputs = (int*)gpt2_act(m, BT * sizeof(int));
    m->targets = (int*)gpt2_act(m, BT * sizeof(int));
    m->host_losses = (float*)malloc_or_die(BT * f, "host losses");
    if (m->ledger.failed_category >= 0) {
        unsigned long long need = 0;
        for (int i = 0; i < MEM_NUM; i++) need += m->ledger.predicted[i];
        return set_err(err, errlen, "out of memory: cannot allocate %llu bytes for %s on rank %d (this rank needs %.2f GB in all for "
                       "L=%d C=%d Vp=%d, -b %d -t %d, -z %d; lower -b/-t or the model size, or raise -z / the rank count)",
                       m->ledger.failed_bytes, mem_names[m->ledger.failed_category], comm->rank, need / 1e9,
                       cfg->num_layers, cfg->channels, cfg->padded_vocab_size, B, T, zero_stage);
    }
    return 0;
}

/* Pointer to tensor j's data inside a full unit buffer. */
static inline floatX* gpt2_tp(const GPT2* m, floatX* unit_base, int plan_tensor) {
    return unit_base + m->plan.tensors[plan_tensor].offset;
}

/* ------------------------------------------------------------------------ */
/* Setting and reading tensors (host fp32 <-> the rank's held ranges)       */

/* Store full host values (tensor t, fp32, t.size elements) into every range
   this rank holds: params (as floatX) and the fp32 master copy if any. */
static inline void gpt2_set_tensor(GPT2* m, int t, const float* values) {
    const ZeroPlan* P = &m->plan;
    int u = P->tensors[t].unit;
    size_t off = P->tensors[t].offset, lo, hi, a, n;
    zero_held_range(P, ZB_PARAMS, u, &lo, &hi);
    if ((n = zero_tensor_overlap(P, t, lo, hi, &a)))
        backend_floats_to_floatX(m->engine.params + zero_index(P, ZB_PARAMS, u, a), values + (a - off), n);
    if (m->engine.master) {
        zero_held_range(P, ZB_OPT, u, &lo, &hi);
        if ((n = zero_tensor_overlap(P, t, lo, hi, &a)))
            backend_to_device(m->engine.master + zero_index(P, ZB_OPT, u, a), values + (a - off), n * sizeof(float));
    }
}

/* The own shard of tensor t as fp32 (from the master copy when present,
   else the params): writes n values to out and the element offset within
   the tensor to *first; returns n (0 if this rank owns none of it). */
static inline size_t gpt2_get_own(GPT2* m, int t, float* out, size_t* first) {
    const ZeroPlan* P = &m->plan;
    int u = P->tensors[t].unit;
    size_t lo, hi, a;
    zero_own_range(P, u, &lo, &hi);
    size_t n = zero_tensor_overlap(P, t, lo, hi, &a);
    *first = a - P->tensors[t].offset;
    if (!n) return 0;
    if (m->engine.master) backend_to_host(out, m->engine.master + zero_index(P, ZB_OPT, u, a), n * sizeof(float));
    else backend_floatX_to_floats(out, m->engine.params + zero_index(P, ZB_PARAMS, u, a), n);
    return n;
}

/* GPT-2 initialisation, identical for any rank count: weights normal(0,
   0.02), attprojw and fcprojw normal(0, 0.02/sqrt(2L)), biases 0, LayerNorm
   weights 1, wte rows V..Vp-1 zero. Tensor t draws from its own stream
   seeded by (seed, t). */
static inline void gpt2_init_random(GPT2* m, unsigned long long seed) {
    const GPT2Config* c = &m->config;
    const ZeroPlan* P = &m->plan;
    size_t maxsz = 0;
    for (int t = 0; t < P->num_tensors; t++) if (P->tensors[t].size > maxsz) maxsz = P->tensors[t].size;
    float* buf = (float*)malloc_or_die(maxsz * sizeof(float), "init buffer");
    float resid_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    for (int t = 0; t < P->num_tensors; t++) {
        const char* name = P->tensors[t].name;
        size_t n = P->tensors[t].size;
        int is_ln_w = !strcmp(name, "ln1w") || !strcmp(name, "ln2w") || !strcmp(name, "lnfw");
        if (is_ln_w) { for (size_t i = 0; i < n; i++) buf[i] = 1.0f; }
        else if (!P->tensors[t].decay) { memset(buf, 0, n * sizeof(float)); }
        else {
            float std = (!strcmp(name, "attprojw") || !strcmp(name, "fcprojw")) ? resid_std : 0.02f;
            Rng r;
            rng_seed(&r, seed, (unsigned long long)t);
            size_t real = n;
            if (t == T_WTE) real = (size_t)c->vocab_size * (size_t)c->channels;
            for (size_t i = 0; i < real; i++) buf[i] = std * rng_normal(&r);
            for (size_t i = real; i < n; i++) buf[i] = 0.0f;
        }
        gpt2_set_tensor(m, t, buf);
    }
    free(buf);
}

/* Read an llm.c checkpoint header; 0 or 1 with a message naming the file.
   *version gets 3 or 5. */
static inline int gpt2_read_checkpoint_header(const char* path, GPT2Config* c, int* version, char* err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return set_err(err, errlen, "checkpoint %s: not a regular file", path);
    FILE* f = fopen(path, "rb");
    if (!f) return set_err(err, errlen, "checkpoint %s: cannot open (%s)", path, strerror(errno));
    int h[256];
    long long fsz = file_size_bytes(f);
    size_t got = fread(h, sizeof(int), 256, f);
    fclose(f);
    if (got != 256) return set_err(err, errlen, "checkpoint %s: file is %lld bytes, shorter than the 1024-byte header", path, fsz);
    if (h[0] != CKPT_MAGIC) return set_err(err, errlen, "checkpoint %s: bad magic %d (expected %d, an llm.c model file)", path, h[0], CKPT_MAGIC);
    if (h[1] != 3 && h[1] != 5) return set_err(err, errlen, "checkpoint %s: unsupported version %d (expected 3 = fp32 or 5 = bf16)", path, h[1]);
    c->max_seq_len = h[2]; c->vocab_size = h[3]; c->num_layers = h[4]; c->num_heads = h[5]; c->channels = h[6];
    c->padded_vocab_size = h[7];
    *version = h[1];
    if (gpt2_config_check(c, path, err, errlen)) return 1;
    long long total = gpt2_count_parameters(c);
    long long expect = 1024 + total * (h[1] == 3 ? 4 : 2);
    if (fsz != expect) return set_err(err, errlen, "checkpoint %s: %lld bytes, but its header (L=%d C=%d Vp=%d maxT=%d, version %d) implies %lld", path, fsz, c->num_layers, c->channels, c->padded_vocab_size, c->max_seq_len, h[1], expect);
    return 0;
}

static inline float bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Load the parameters of an llm.c checkpoint (version 3 or 5) whose
   config equals m->config into the ranges this rank holds. 0 or 1 with a
   message. */
static inline int gpt2_load_checkpoint(GPT2* m, const char* path, char* err, size_t errlen) {
    GPT2Config c;
    int version;
    if (gpt2_read_checkpoint_header(path, &c, &version, err, errlen)) return 1;
    if (memcmp(&c, &m->config, sizeof(c)) != 0) return set_err(err, errlen, "checkpoint %s: config does not match the model", path);
    FILE* f = fopen(path, "rb");
    if (!f) return set_err(err, errlen, "checkpoint %s: cannot open (%s)", path, strerror(errno));
    const ZeroPlan* P = &m->plan;
    int* order = (int*)malloc_or_die((size_t)P->num_tensors * sizeof(int), "checkpoint order");
    gpt2_checkpoint_order(&c, order);
    size_t maxsz = 0;
    for (int t = 0; t < P->num_tensors; t++) if (P->tensors[t].size > maxsz) maxsz = P->tensors[t].size;
    float* buf = (float*)malloc_or_die(maxsz * sizeof(float), "checkpoint buffer");
    uint16_t* raw = version == 5 ? (uint16_t*)malloc_or_die(maxsz * 2, "checkpoint buffer") : NULL;
    fseeko(f, 1024, SEEK_SET);
    int rc = 0;
    for (int k = 0; k < P->num_tensors && !rc; k++) {
        int t = order[k];
        size_t n = P->tensors[t].size;
        if (version == 3) { if (fread(buf, 4, n, f) != n) rc = set_err(err, errlen, "checkpoint %s: truncated in tensor %s", path, P->tensors[t].name); }
        else {
            if (fread(raw, 2, n, f) != n) rc = set_err(err, errlen, "checkpoint %s: truncated in tensor %s", path, P->tensors[t].name);
            else for (size_t i = 0; i < n; i++) buf[i] = bf16_to_float(raw[i]);
        }
        for (size_t i = 0; i < n && !rc; i++)
            if (!isfinite(buf[i])) rc = set_err(err, errlen, "checkpoint %s: non-finite value in tensor %s at %zu", path, P->tensors[t].name, i);
        if (!rc) gpt2_set_tensor(m, t, buf);
    }
    fclose(f);
    free(buf); free(raw); free(order);
    return rc;
}

/* Byte offset of element 0 of every plan tensor in an fp32 (version 3)
   checkpoint (tensor-major, after the 1024-byte header); also the offsets
   of the Adam m section of a training state (state.h). out: num_tensors. */
static inline void gpt2_checkpoint_offsets(const GPT2Config* c, const ZeroPlan* P, long long* out) {
    int* order = (int*)malloc_or_die((size_t)P->num_tensors * sizeof(int), "checkpoint order");
    gpt2_checkpoint_order(c, order);
    long long off = 1024;
    for (int k = 0; k < P->num_tensors; k++) {
        out[order[k]] = off;
        off += 4LL * (long long)P->tensors[order[k]].size;
    }
    free(order);
}

/* ------------------------------------------------------------------------ */
/* Forward and backward                                                     */

/* Forward of B x T tokens (B <= m->B, T <= m->T) on this rank. inputs and
   targets are host int arrays (B*T); targets may be NULL (no loss). If
   dloss != 0 the classifier also writes dlogits = dloss * (softmax -
   onehot) into the logits buffer, ready for gpt2_backward. Returns the mean
   loss over the B*T tokens (0 when targets is NULL). Stage 3 gathers each
   unit before use and releases it after (reshard_after_forward). */
static inline float gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T, float dloss) {
    const GPT2Config* c = &m->config;
    ZeroEngine* E = &m->engine;
    int C = c->channels, NH = c->num_heads, L = c->num_layers, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T;
    backend_to_device(m->inputs, inputs, BT * sizeof(int));
    if (targets) backend_to_device(m->targets, targets, BT * sizeof(int));
    floatX* root = zero_unit_params(E, 0);
    zero_prefetch_ahead(E, 0, +1);
    encoder_forward(m->encoded, m->inputs, gpt2_tp(m, root, T_WTE), gpt2_tp(m, root, T_WPE), B, T, C);
    for (int l = 0; l < L; l++) {
        floatX* w = zero_unit_params(E, l + 1);
        zero_prefetch_ahead(E, l + 1, +1);
        floatX* x = l == 0 ? m->encoded : m->residual3 + (size_t)(l - 1) * BT * C;
        floatX* ln1 = m->ln1 + (size_t)l * BT * C;
        float* ln1m = m->ln1_mean + (size_t)l * BT;
        float* ln1r = m->ln1_rstd + (size_t)l * BT;
        floatX* qkv = m->qkv + (size_t)l * BT * 3 * C;
        floatX* atty = m->atty + (size_t)l * BT * C;
        floatX* att = m->att + (size_t)l * BT * NH * T;
        floatX* attproj = m->attproj + (size_t)l * BT * C;
        floatX* res2 = m->residual2 + (size_t)l * BT * C;
        floatX* ln2 = m->ln2 + (size_t)l * BT * C;
        float* ln2m = m->ln2_mean + (size_t)l * BT;
        float* ln2r = m->ln2_rstd + (size_t)l * BT;
        floatX* fch = m->fch + (size_t)l * BT * 4 * C;
        floatX* fchg = m->fch_gelu + (size_t)l * BT * 4 * C;
        floatX* fcproj = m->fcproj + (size_t)l * BT * C;
        floatX* res3 = m->residual3 + (size_t)l * BT * C;
        int b0 = gpt2_block_tensor(l, 0);
        layernorm_forward(ln1, ln1m, ln1r, x, gpt2_tp(m, w, b0 + B_LN1W), gpt2_tp(m, w, b0 + B_LN1B), (int)BT, C);
        matmul_forward(qkv, ln1, gpt2_tp(m, w, b0 + B_QKVW), gpt2_tp(m, w, b0 + B_QKVB), (int)BT, C, 3 * C);
        attention_forward(atty, m->preatt, att, qkv, B, T, C, NH);
        matmul_forward(attproj, atty, gpt2_tp(m, w, b0 + B_ATTPROJW), gpt2_tp(m, w, b0 + B_ATTPROJB), (int)BT, C, C);
        residual_forward(res2, x, attproj, (int)(BT * C));
        layernorm_forward(ln2, ln2m, ln2r, res2, gpt2_tp(m, w, b0 + B_LN2W), gpt2_tp(m, w, b0 + B_LN2B), (int)BT, C);
        matmul_forward(fch, ln2, gpt2_tp(m, w, b0 + B_FCW), gpt2_tp(m, w, b0 + B_FCB), (int)BT, C, 4 * C);
        gelu_forward(fchg, fch, (int)(BT * 4 * C));
        matmul_forward(fcproj, fchg, gpt2_tp(m, w, b0 + B_FCPROJW), gpt2_tp(m, w, b0 + B_FCPROJB), (int)BT, 4 * C, C);
        residual_forward(res3, res2, fcproj, (int)(BT * C));
        zero_release_unit(E, l + 1, 1);
    }
    floatX* last = m->residual3 + (size_t)(L - 1) * BT * C;
    layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, last, gpt2_tp(m, root, T_LNFW), gpt2_tp(m, root, T_LNFB), (int)BT, C);
    matmul_forward(m->logits, m->lnf, gpt2_tp(m, root, T_WTE), NULL, (int)BT, C, Vp);
    if (!targets) return 0.0f;
    fused_classifier(m->logits, m->losses, m->targets, (int)BT, V, Vp, dloss);
    backend_to_host(m->host_losses, m->losses, BT * sizeof(float));
    double s = 0.0;
    for (size_t i = 0; i < BT; i++) s += m->host_losses[i];
    return (float)(s / (double)BT);
}

/* Backward of the last gpt2_forward (which must have had dloss != 0), into
   the engine's gradient buffers: each unit's grads are handed to the engine
   as soon as they are complete (stages 2-3 reduce-scatter them at once). */
static inline void gpt2_backward(GPT2* m, int B, int T) {
    const GPT2Config* c = &m->config;
    ZeroEngine* E = &m->engine;
    int C = c->channels, NH = c->num_heads, L = c->num_layers, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, x = sizeof(floatX);
    floatX* root = zero_unit_params(E, 0);
    floatX* groot = zero_unit_grads(E, 0);
    backend_memset_zero(m->dlnf, BT * C * x);
    matmul_backward(m->dlnf, gpt2_tp(m, groot, T_WTE), NULL, m->logits, m->lnf, gpt2_tp(m, root, T_WTE), (int)BT, C, Vp);
    backend_memset_zero(m->dres, BT * C * x);
    floatX* last = m->residual3 + (size_t)(L - 1) * BT * C;
    layernorm_backward(m->dres, gpt2_tp(m, groot, T_LNFW), gpt2_tp(m, groot, T_LNFB), m->dlnf, last,
                       gpt2_tp(m, root, T_LNFW), m->lnf_mean, m->lnf_rstd, (int)BT, C);
    for (int l = L - 1; l >= 0; l--) {
        floatX* w = zero_unit_params(E, l + 1);
        zero_prefetch_ahead(E, l + 1, -1);
        floatX* g = zero_unit_grads(E, l + 1);
        int b0 = gpt2_block_tensor(l, 0);
        floatX* xin = l == 0 ? m->encoded : m->residual3 + (size_t)(l - 1) * BT * C;
        floatX* ln1 = m->ln1 + (size_t)l * BT * C;
        float* ln1m = m->ln1_mean + (size_t)l * BT;
        float* ln1r = m->ln1_rstd + (size_t)l * BT;
        floatX* qkv = m->qkv + (size_t)l * BT * 3 * C;
        floatX* atty = m->atty + (size_t)l * BT * C;
        floatX* att = m->att + (size_t)l * BT * NH * T;
        floatX* res2 = m->residual2 + (size_t)l * BT * C;
        floatX* ln2 = m->ln2 + (size_t)l * BT * C;
        float* ln2m = m->ln2_mean + (size_t)l * BT;
        float* ln2r = m->ln2_rstd + (size_t)l * BT;
        floatX* fch = m->fch + (size_t)l * BT * 4 * C;
        floatX* fchg = m->fch_gelu + (size_t)l * BT * 4 * C;
        /* dres holds d(residual3); the MLP half */
        backend_memset_zero(m->dfch_gelu, BT * 4 * C * x);
        matmul_backward(m->dfch_gelu, gpt2_tp(m, g, b0 + B_FCPROJW), gpt2_tp(m, g, b0 + B_FCPROJB), m->dres, fchg,
                        gpt2_tp(m, w, b0 + B_FCPROJW), (int)BT, 4 * C, C);
        backend_memset_zero(m->dfch, BT * 4 * C * x);
        gelu_backward(m->dfch, fch, m->dfch_gelu, (int)(BT * 4 * C));
        backend_memset_zero(m->dln, BT * C * x);
        matmul_backward(m->dln, gpt2_tp(m, g, b0 + B_FCW), gpt2_tp(m, g, b0 + B_FCB), m->dfch, ln2,
                        gpt2_tp(m, w, b0 + B_FCW), (int)BT, C, 4 * C);
        /* the residual passes dres through; LayerNorm adds its part: dres = d(residual2) */
        layernorm_backward(m->dres, gpt2_tp(m, g, b0 + B_LN2W), gpt2_tp(m, g, b0 + B_LN2B), m->dln, res2,
                           gpt2_tp(m, w, b0 + B_LN2W), ln2m, ln2r, (int)BT, C);
        /* the attention half */
        backend_memset_zero(m->datty, BT * C * x);
        matmul_backward(m->datty, gpt2_tp(m, g, b0 + B_ATTPROJW), gpt2_tp(m, g, b0 + B_ATTPROJB), m->dres, atty,
                        gpt2_tp(m, w, b0 + B_ATTPROJW), (int)BT, C, C);
        backend_memset_zero(m->dqkv, BT * 3 * C * x);
        attention_backward(m->dqkv, m->dpreatt, m->datt, m->datty, qkv, att, B, T, C, NH);
        backend_memset_zero(m->dln, BT * C * x);
        matmul_backward(m->dln, gpt2_tp(m, g, b0 + B_QKVW), gpt2_tp(m, g, b0 + B_QKVB), m->dqkv, ln1,
                        gpt2_tp(m, w, b0 + B_QKVW), (int)BT, C, 3 * C);
        layernorm_backward(m->dres, gpt2_tp(m, g, b0 + B_LN1W), gpt2_tp(m, g, b0 + B_LN1B), m->dln, xin,
                           gpt2_tp(m, w, b0 + B_LN1W), ln1m, ln1r, (int)BT, C);
        zero_unit_grads_done(E, l + 1);
        zero_release_unit(E, l + 1, 0);
    }
    encoder_backward(gpt2_tp(m, groot, T_WTE), gpt2_tp(m, groot, T_WPE), m->dres, m->inputs, B, T, C);
    zero_unit_grads_done(E, 0);
}

static inline void gpt2_free(GPT2* m) {
    /* activations are released with the process; the engine frees the model states */
    zero_engine_free(&m->engine);
    zero_plan_free(&m->plan);
    free(m->host_losses);
}

#endif /* LLMC_GPT_H */
