/*
 gpt_params.h: the model's parameters as whole tensors: store fp32 values
 into every range this rank holds (gpt2_set_tensor: the params, rounded to
 nearest even in bf16, and the fp32 master copy), read this rank's own
 shard of a tensor (gpt2_get_own), and GPT-2's random initialisation,
 identical for any rank count, stage and chunking (gpt2_init_random).
 Checkpoints (checkpoint.h) and training states (state.h) read and write
 through the first two.
*/
#ifndef LLMC_GPT_PARAMS_H
#define LLMC_GPT_PARAMS_H

#include "gpt.h"

/* ------------------------------------------------------------------------ */
/* Setting and reading tensors (host fp32 <-> the rank's held ranges)       */

/* Store full host values (tensor t, fp32, t.size elements) into every range
   this rank holds: params (as floatX, rounded to nearest even in bf16) and
   the fp32 master copy if any. */
static inline void gpt2_set_tensor(GPT2* m, int t, const float* values) {
    const ZeroPlan* P = &m->plan;
    int u = P->tensors[t].unit;
    size_t off = P->tensors[t].offset, lo, hi, a, n;
    zero_held_range(P, ZB_PARAMS, u, &lo, &hi);
    if ((n = zero_tensor_overlap(P, t, lo, hi, &a)))
        backend_floats_to_floatX(m->engine.params + zero_index(P, ZB_PARAMS, u, a), values + (a - off), n);
    if (P->master_bytes) {
        zero_held_range(P, ZB_OPT, u, &lo, &hi);
        if ((n = zero_tensor_overlap(P, t, lo, hi, &a)))
            zero_opt_set(&m->engine, ZO_MASTER, u, a, values + (a - off), n);
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
    if (P->master_bytes) zero_opt_get(&m->engine, ZO_MASTER, u, a, out, n);
    else backend_floatX_to_floats(out, m->engine.params + zero_index(P, ZB_PARAMS, u, a), n);
    return n;
}

/* GPT-2 initialisation, identical for any rank count, stage and chunking:
   weights normal(0, 0.02), attprojw and fcprojw normal(0, 0.02/sqrt(2L)),
   biases 0, LayerNorm weights 1, wte rows V..Vp-1 zero. Each logical tensor
   draws from its own stream seeded by (seed, gpt2_init_stream); wte is drawn
   whole, in row order, and its pieces set from it. */
static inline void gpt2_init_random(GPT2* m, unsigned long long seed) {
    const GPT2Config* c = &m->config;
    const GPT2Layout* y = &m->layout;
    const ZeroPlan* P = &m->plan;
    size_t wte_n = (size_t)c->padded_vocab_size * c->channels, maxsz = wte_n;
    for (int t = 0; t < P->num_tensors; t++) if (P->tensors[t].size > maxsz) maxsz = P->tensors[t].size;
    float* buf = (float*)malloc_or_die(maxsz * sizeof(float), "init buffer");
    float resid_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    /* wte, all pieces */
    {
        Rng r;
        rng_seed(&r, seed, 0ULL);
        size_t real = (size_t)c->vocab_size * (size_t)c->channels;
        for (size_t i = 0; i < real; i++) buf[i] = 0.02f * rng_normal(&r);
        for (size_t i = real; i < wte_n; i++) buf[i] = 0.0f;
        for (int k = 0; k < y->num_chunks; k++)
            gpt2_set_tensor(m, gpt2_tensor_chunk(y, k), buf + (size_t)gpt2_chunk_row0(y, k) * c->channels);
    }
    for (int t = 0; t < P->num_tensors; t++) {
        if (t >= T_WTE0 && t < T_WTE0 + y->num_chunks) continue;
        const char* name = P->tensors[t].name;
        size_t n = P->tensors[t].size;
        int is_ln_w = !strcmp(name, "ln1w") || !strcmp(name, "ln2w") || !strcmp(name, "lnfw");
        if (is_ln_w) { for (size_t i = 0; i < n; i++) buf[i] = 1.0f; }
        else if (!P->tensors[t].decay) { memset(buf, 0, n * sizeof(float)); }
        else {
            float std = (!strcmp(name, "attprojw") || !strcmp(name, "fcprojw")) ? resid_std : 0.02f;
            Rng r;
            rng_seed(&r, seed, gpt2_init_stream(y, t));
            for (size_t i = 0; i < n; i++) buf[i] = std * rng_normal(&r);
        }
        gpt2_set_tensor(m, t, buf);
    }
    free(buf);
}

#endif /* LLMC_GPT_PARAMS_H */
