/*
 gpt_config.h: the architecture of a GPT-2 (Radford et al. 2019): sizes,
 their validation, the parameter count num_parameters (Psi) as llm.c counts
 it (the vocabulary padded to a multiple of 128), and llm.c's dN model
 descriptors. No buffers, no backend: the estimator, the shard adapter
 (gpt_shard.h), the checkpoint reader and the model (gpt.h) all start here.
*/
#ifndef LLMC_GPT_CONFIG_H
#define LLMC_GPT_CONFIG_H

#include <string.h>
#include "utils.h"

typedef struct {
    int max_seq_len;        /* maxT */
    int vocab_size;         /* V: real vocabulary */
    int padded_vocab_size;  /* Vp: V rounded up to a multiple of 128 */
    int num_layers;         /* L */
    int num_heads;          /* NH */
    int channels;           /* C */
} GPT2Config;

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

/* The fields in which a (`an`, e.g. "the file") and b (`bn`, e.g. "the
   model") differ, written into out (n bytes) as "L=2 in the file, 6 in the
   model; C=128 in the file, 384 in the model", in the order L, NH, C, maxT,
   V, Vp (the header words' names). Returns how many fields differ (0: out
   is ""). */
static inline int gpt2_config_diff(const GPT2Config* a, const GPT2Config* b, const char* an, const char* bn, char* out, size_t n) {
    const char* names[6] = {"L", "NH", "C", "maxT", "V", "Vp"};
    int va[6] = {a->num_layers, a->num_heads, a->channels, a->max_seq_len, a->vocab_size, a->padded_vocab_size};
    int vb[6] = {b->num_layers, b->num_heads, b->channels, b->max_seq_len, b->vocab_size, b->padded_vocab_size};
    int k = 0;
    size_t len = 0;
    if (n) out[0] = 0;
    for (int i = 0; i < 6; i++) {
        if (va[i] == vb[i]) continue;
        if (len < n) len += (size_t)snprintf(out + len, n - len, "%s%s=%d in %s, %d in %s", k ? "; " : "", names[i], va[i], an, vb[i], bn);
        k++;
    }
    return k;
}

/* num_parameters (Psi) of a config: the sum of its tensor sizes, the vocab
   padded to Vp as llm.c counts it. The config must be valid. */
static inline long long gpt2_count_parameters(const GPT2Config* c) {
    long long C = c->channels, L = c->num_layers;
    return (long long)c->padded_vocab_size * C + (long long)c->max_seq_len * C + L * (12 * C * C + 13 * C) + 2 * C;
}

/* The config of descriptor dN (1 <= N <= 200): llm.c's names for the GPT-2
   sizes d12 (12 layers, 12 heads, 768 channels), d24 (24, 16, 1024), d36
   (36, 20, 1280), d48 (48, 25, 1600); any other N: N layers, N heads, 64N
   channels; maxT 1024 and GPT-2's vocabulary 50257 (padded 50304). Returns
   1 if `name` is a descriptor (*c set, or *bad = 1 with a message for an
   N out of range), 0 if it is not one (a checkpoint path). */
static inline int gpt2_config_descriptor(const char* name, GPT2Config* c, int* bad, char* err, size_t errlen) {
    *bad = 0;
    if (name[0] != 'd' || name[1] < '0' || name[1] > '9') return 0;
    long depth;
    if (parse_long(name + 1, &depth) || depth < 1 || depth > 200) {
        *bad = 1;
        set_err(err, errlen, "flag -e: descriptor '%s' must be dN with N in 1..200", name);
        return 1;
    }
    static const int named[4][4] = {{12, 12, 12, 768}, {24, 24, 16, 1024}, {36, 36, 20, 1280}, {48, 48, 25, 1600}};
    c->num_layers = (int)depth; c->num_heads = (int)depth; c->channels = 64 * (int)depth;
    for (int k = 0; k < 4; k++)
        if (named[k][0] == depth) { c->num_layers = named[k][1]; c->num_heads = named[k][2]; c->channels = named[k][3]; }
    c->max_seq_len = 1024; c->vocab_size = 50257;
    c->padded_vocab_size = (int)round_up((size_t)c->vocab_size, 128);
    return 1;
}

#endif /* LLMC_GPT_CONFIG_H */
