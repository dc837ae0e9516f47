/*
 * dataloader.h: reads llm.c token shards and hands each data-parallel rank its
 * slice of every global micro-batch, so that N ranks with micro-batch B read,
 * sequence for sequence, what 1 rank with micro-batch N*B reads.
 *
 * Token shard format (llm.c): a header of 256 int32 little-endian values,
 *   [0] = 20240520 (magic), [1] = 1 (version), [2] = ntok (number of tokens),
 * followed by ntok uint16 little-endian token ids. File size = 1024 + 2*ntok.
 *
 * Batching. Shards are the files matching a glob(3) pattern, in sorted order.
 * Let M = num_ranks*B*T. A global micro-batch is the M+1 consecutive tokens
 * x[pos .. pos+M] of the current shard; rank r takes x[pos + r*B*T ..
 * pos + r*B*T + B*T]: inputs = its first B*T tokens, targets = the same shifted
 * by one (targets[i] = inputs[i+1], the last target being the first token of
 * the next rank's slice). Then pos += M.
 *
 * Shard switches follow the optimizer step, not the micro-batch
 * (dataloader_set_step: step_seqs = the global batch in sequences, -d / T;
 * num_ranks*B unless set). A step is step_seqs/(num_ranks*B) global
 * micro-batches read back to back from one shard. At a step's start (the
 * sequences consumed in the shard, pos/T, a multiple of step_seqs: shards
 * start at 0 and a step consumes step_seqs) the loader moves to the next
 * shard, wrapping from the last to the first, at pos 0, when the whole step
 * would not fit (pos + step_seqs*T + 1 > ntok); within a step every
 * micro-batch fits. So where a shard ends depends only on step_seqs and T:
 * 4 ranks x B=2, 2 ranks x B=2 x 2 micro-steps and 1 rank x B=8 read the
 * same sequences in every step (before, the switch was decided per
 * micro-batch, and 2 ranks read a last half step from a shard that 4 ranks
 * had left). One epoch is sum over shards of floor((ntok-1)/(step_seqs*T))
 * steps.
 *
 * Shuffling (dataloader_set_shuffle, off unless set; the trainer's --shuffle,
 * as llm.c's loader does): the unit is one sequence of T tokens (plus its
 * target), so that the order does not depend on how a step is split into
 * ranks, micro-batches and micro-steps. Shard s holds S_s = floor((ntok-1)/T)
 * sequences, sequence i being tokens [i*T, i*T+T]. Every epoch e visits the
 * shards in a seeded random order and each shard's sequences in a seeded
 * random permutation (Fisher-Yates, xoshiro256** streams from (seed, e) and
 * (seed, e, shard)); a global micro-batch takes the next num_ranks*B entries
 * of that permutation, rank r the B entries from r*B. current_position then
 * counts the tokens of the permuted stream consumed in the current shard
 * (sequences consumed * T), and a new shard starts, at a step's start, when
 * fewer than step_seqs sequences are left. (current_shard, current_position,
 * epoch) is therefore the whole position, the same on every rank and, at a
 * step boundary, for every rank count and micro-batch with the same global
 * batch (step_seqs): dataloader_resume restores it.
 *
 * Memory: one shard at a time is held in memory as uint16 (2*ntok bytes of the
 * largest shard), loaded when it becomes current and checked then: every token
 * id must be < vocab_size. Every shard's header and size are checked at init.
 * Plain stdio (fopen/fread) and stat(2) for sizes (64-bit off_t); no MPI.
 *
 * Errors: functions returning int return 0 on success and 1 on error, having
 * written ONE line into err (when err != NULL and errlen > 0) that names the
 * file or pattern, the value, and the rule it broke.
 */
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <glob.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "rand.h"

#define DATALOADER_MAGIC 20240520
#define DATALOADER_VERSION 1
#define DATALOADER_HEADER_BYTES 1024

typedef struct DataLoader {
    /* public, read-only for callers */
    int B, T;                 /* micro-batch size (sequences) and sequence length (tokens) of THIS rank */
    int rank, num_ranks;      /* this rank's slice of each global micro-batch of num_ranks*B*T tokens */
    size_t step_seqs;         /* sequences per optimizer step over all ranks (dataloader_set_step; num_ranks*B by default) */
    int vocab_size;           /* every token id must be < vocab_size */
    size_t num_tokens;        /* tokens summed over all shards */
    int num_shards;
    int current_shard;        /* shard (file index) holding the next global micro-batch */
    size_t current_position;  /* token index in current_shard where the next global micro-batch starts
                                 (shuffled: tokens of the permuted stream consumed in it) */
    int shuffle;              /* 1: seeded random order of shards and sequences (dataloader_set_shuffle) */
    unsigned long long shuffle_seed;
    long long epoch;          /* passes over all shards completed (counts wraps to the first shard) */
    int* inputs;              /* (B, T) token ids of the last batch */
    int* targets;             /* (B, T) inputs shifted by one token */
    /* private */
    char** shard_paths;       /* num_shards paths, sorted */
    size_t* shard_ntok;       /* tokens per shard, from the validated headers */
    uint16_t* tokens;         /* the loaded shard, host order */
    size_t tokens_cap;        /* capacity of tokens (largest shard) */
    int loaded_shard;         /* index of the shard in tokens, -1 if none */
    int seek_error;           /* set by a bad dataloader_seek, reported by the next dataloader_next_batch */
    size_t seek_position;     /* the bad position, for that message */
    int seek_shard;
    int shard_slot;           /* position of current_shard in this epoch's shard order */
    int* shard_order;         /* num_shards file indices: the order of this epoch (shuffled) */
    uint32_t* perm;           /* shuffled: the permutation of the sequences of perm_shard in perm_epoch */
    size_t perm_cap;
    int perm_shard;           /* -1: none */
    long long perm_epoch;
} DataLoader;

/* dl_errf_: writes one formatted line into err (truncating) if err is usable; returns 1. */
static inline int dl_errf_(char* err, size_t errlen, const char* fmt, ...) {
    if (err == NULL || errlen == 0) return 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 1;
}

static inline uint32_t dl_le32_(const unsigned char* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* dl_looks_like_text_: 1 if the n bytes (a file's first 1024) are text:
 * well-formed UTF-8 (ASCII included, a character cut at the end of the
 * buffer allowed) without NUL or control bytes other than tab, newline,
 * carriage return and form feed. A token shard's header (magic 20240520 =
 * bytes 0x48 0xd4 0x34 0x01) never is. */
static inline int dl_looks_like_text_(const unsigned char* p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) {
            if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') return 0;
            if (c == 0x7f) return 0;
            i++;
            continue;
        }
        int k = (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (k < 0 || (k == 1 && c < 0xc2) || c > 0xf4) return 0;
        for (int j = 1; j <= k; j++) {
            if (i + (size_t)j >= n) return 1;   /* cut by the buffer's end */
            if ((p[i + (size_t)j] & 0xc0) != 0x80) return 0;
        }
        i += (size_t)k + 1;
    }
    return 1;
}

/* dl_check_shard_: validates the header and size of one shard file.
 * On success *ntok = tokens in it. Returns 0 or 1 with err naming the file. */
static inline int dl_check_shard_(const char* path, size_t* ntok, char* err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        dl_errf_(err, errlen, "dataloader: cannot stat token shard %s", path);
        return 1;
    }
    if (!S_ISREG(st.st_mode)) {
        dl_errf_(err, errlen, "dataloader: token shard %s is not a regular file", path);
        return 1;
    }
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        dl_errf_(err, errlen, "dataloader: cannot open token shard %s", path);
        return 1;
    }
    unsigned long long size = (unsigned long long)st.st_size;
    unsigned char h[DATALOADER_HEADER_BYTES];
    size_t got = fread(h, 1, sizeof(h), f);
    fclose(f);
    int text = got > 0 && dl_looks_like_text_(h, got);
    int32_t magic = got >= 4 ? (int32_t)dl_le32_(h) : 0;
    if (text && (size < DATALOADER_HEADER_BYTES || magic != DATALOADER_MAGIC)) {   /* text given as data */
        char what[96];
        if (size < DATALOADER_HEADER_BYTES) snprintf(what, sizeof(what), "is %llu bytes of text", size);
        else snprintf(what, sizeof(what), "has magic %d, expected %d: it looks like text", (int)magic, DATALOADER_MAGIC);
        dl_errf_(err, errlen, "dataloader: token shard %s %s, not llm.c tokens; tokenize it first: "
                 "node dev/data/tokenize.mjs --input %s --out data/NAME/NAME (writes data/NAME/NAME_train_000000.bin "
                 "for -i and data/NAME/NAME_val_000000.bin for -j)", path, what, path);
        return 1;
    }
    if (size < DATALOADER_HEADER_BYTES) {
        dl_errf_(err, errlen, "dataloader: token shard %s has %llu bytes, less than the %d-byte header",
                 path, size, DATALOADER_HEADER_BYTES);
        return 1;
    }
    if (got != sizeof(h)) {
        dl_errf_(err, errlen, "dataloader: token shard %s: could not read its 1024-byte header", path);
        return 1;
    }
    int32_t version = (int32_t)dl_le32_(h + 4), n = (int32_t)dl_le32_(h + 8);
    if (magic != DATALOADER_MAGIC) {
        dl_errf_(err, errlen, "dataloader: token shard %s has magic %d, expected %d (llm.c token shard)",
                 path, (int)magic, DATALOADER_MAGIC);
        return 1;
    }
    if (version != DATALOADER_VERSION) {
        dl_errf_(err, errlen, "dataloader: token shard %s has version %d, expected %d",
                 path, (int)version, DATALOADER_VERSION);
        return 1;
    }
    if (n < 0) {
        dl_errf_(err, errlen, "dataloader: token shard %s has a negative token count %d in its header", path, (int)n);
        return 1;
    }
    unsigned long long expect = DATALOADER_HEADER_BYTES + 2ull * (unsigned long long)n;
    if (size != expect) {
        dl_errf_(err, errlen, "dataloader: token shard %s is %s: header says %d tokens (%llu bytes) but the file has %llu bytes",
                 path, size < expect ? "truncated" : "too long", (int)n, expect, size);
        return 1;
    }
    *ntok = (size_t)n;
    return 0;
}

/* dl_load_shard_: reads shard s whole into dl->tokens and checks every token
 * id < vocab_size. Returns 0 or 1 with err naming file, token index, value. */
static inline int dl_load_shard_(DataLoader* dl, int s, char* err, size_t errlen) {
    const char* path = dl->shard_paths[s];
    size_t n = dl->shard_ntok[s];
    dl->loaded_shard = -1;
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        dl_errf_(err, errlen, "dataloader: cannot open token shard %s", path);
        return 1;
    }
    unsigned char h[DATALOADER_HEADER_BYTES];
    if (fread(h, 1, sizeof(h), f) != sizeof(h) || (int32_t)dl_le32_(h) != DATALOADER_MAGIC ||
        (size_t)dl_le32_(h + 8) != n) {
        fclose(f);
        dl_errf_(err, errlen, "dataloader: token shard %s changed since init (header no longer says %zu tokens)", path, n);
        return 1;
    }
    size_t got = 0;
    while (got < n) {
        size_t r = fread(dl->tokens + got, sizeof(uint16_t), n - got, f);
        if (r == 0) break;
        got += r;
    }
    fclose(f);
    if (got != n) {
        dl_errf_(err, errlen, "dataloader: token shard %s: read %zu of its %zu tokens (file shrank since init?)", path, got, n);
        return 1;
    }
    const uint16_t one = 1;
    if (*(const unsigned char*)&one != 1) { /* big-endian host: file is little-endian */
        for (size_t i = 0; i < n; i++) dl->tokens[i] = (uint16_t)((dl->tokens[i] >> 8) | (dl->tokens[i] << 8));
    }
    for (size_t i = 0; i < n; i++) {
        if ((int)dl->tokens[i] >= dl->vocab_size) {
            dl_errf_(err, errlen, "dataloader: token shard %s: token index %zu has id %d, must be < vocab_size %d",
                     path, i, (int)dl->tokens[i], dl->vocab_size);
            return 1;
        }
    }
    dl->loaded_shard = s;
    return 0;
}

/* dataloader_free: releases everything dataloader_init allocated and zeroes
 * the struct; safe on a zeroed or already freed DataLoader. */
static inline void dataloader_free(DataLoader* dl) {
    if (dl == NULL) return;
    if (dl->shard_paths != NULL) {
        for (int i = 0; i < dl->num_shards; i++) free(dl->shard_paths[i]);
    }
    free(dl->shard_paths);
    free(dl->shard_ntok);
    free(dl->tokens);
    free(dl->inputs);
    free(dl->targets);
    free(dl->shard_order);
    free(dl->perm);
    memset(dl, 0, sizeof(*dl));
    dl->loaded_shard = -1;
    dl->perm_shard = -1;
}

/* The arguments of dataloader_init: 0, or 1 with err. */
static inline int dl_check_args_(const char* pattern, int B, int T, int rank, int num_ranks, int vocab_size, char* err, size_t errlen) {
    if (pattern == NULL || pattern[0] == '\0') return dl_errf_(err, errlen, "dataloader: empty token shard pattern");
    if (B < 1 || T < 1) return dl_errf_(err, errlen, "dataloader: B=%d T=%d for %s: both must be >= 1", B, T, pattern);
    if (num_ranks < 1 || rank < 0 || rank >= num_ranks)
        return dl_errf_(err, errlen, "dataloader: rank %d of %d ranks for %s: need 0 <= rank < num_ranks", rank, num_ranks, pattern);
    if (vocab_size < 1 || vocab_size > 65536)
        return dl_errf_(err, errlen, "dataloader: vocab_size %d for %s: must be in 1..65536 (token ids are uint16)", vocab_size, pattern);
    size_t BT = (size_t)B * (size_t)T;
    if (BT / (size_t)B != (size_t)T || BT > ((size_t)-1) / 4 / (size_t)num_ranks)
        return dl_errf_(err, errlen, "dataloader: num_ranks*B*T = %d*%d*%d overflows for %s", num_ranks, B, T, pattern);
    return 0;
}

/* The shards matching `pattern` (glob(3), sorted) into dl->shard_paths and
 * shard_ntok, each checked (dl_check_shard_) and holding at least `need`
 * tokens (one global micro-batch of num_ranks x B x T plus the final
 * target). 0 with *maxtok (the largest shard), or 1 with err (dl freed). */
static inline int dl_list_shards_(DataLoader* dl, const char* pattern, int B, int T, int num_ranks, size_t need, size_t* maxtok,
                                  char* err, size_t errlen) {
    glob_t g;
    memset(&g, 0, sizeof(g));
    int gr = glob(pattern, 0, NULL, &g);
    if (gr != 0 || g.gl_pathc == 0) {
        if (gr != GLOB_NOMATCH && gr != 0) dl_errf_(err, errlen, "dataloader: glob(3) failed (code %d) on pattern %s", gr, pattern);
        else dl_errf_(err, errlen, "dataloader: no file matches the token shard pattern %s", pattern);
        globfree(&g);
        return 1;
    }
    if (g.gl_pathc > 1000000) {
        dl_errf_(err, errlen, "dataloader: pattern %s matches %zu files, more than 1000000", pattern, (size_t)g.gl_pathc);
        globfree(&g);
        return 1;
    }
    int ns = (int)g.gl_pathc;
    dl->shard_paths = (char**)calloc((size_t)ns, sizeof(char*));
    dl->shard_ntok = (size_t*)calloc((size_t)ns, sizeof(size_t));
    int rc = 0;
    if (dl->shard_paths == NULL || dl->shard_ntok == NULL) rc = dl_errf_(err, errlen, "dataloader: out of memory listing %d shards of %s", ns, pattern);
    else dl->num_shards = ns;
    *maxtok = 0;
    for (int i = 0; i < ns && !rc; i++) {
        const char* p = g.gl_pathv[i];
        size_t len = strlen(p), n = 0;
        dl->shard_paths[i] = (char*)malloc(len + 1);
        if (dl->shard_paths[i] == NULL) { rc = dl_errf_(err, errlen, "dataloader: out of memory listing shards of %s", pattern); break; }
        memcpy(dl->shard_paths[i], p, len + 1);
        if (dl_check_shard_(p, &n, err, errlen) != 0) { rc = 1; break; }
        if (n < need) {
            if (num_ranks > 1)
                dl_errf_(err, errlen, "dataloader: token shard %s is too small for the global micro-batch: it has %zu tokens, "
                         "needs at least num_ranks*B*T+1 = %d*%d*%d+1 = %zu (use a smaller -b/-t, fewer ranks or more text; "
                         "for a small validation split, -v 0 skips validation)",
                         p, n, num_ranks, B, T, need);
            else
                dl_errf_(err, errlen, "dataloader: token shard %s is too small for a micro-batch: it has %zu tokens, "
                         "needs at least B*T+1 = %d*%d+1 = %zu (use a smaller -b/-t or more text; "
                         "for a small validation split, -v 0 skips validation)",
                         p, n, B, T, need);
            rc = 1;
            break;
        }
        dl->shard_ntok[i] = n;
        dl->num_tokens += n;
        if (n > *maxtok) *maxtok = n;
    }
    globfree(&g);
    if (rc) dataloader_free(dl);
    return rc;
}

/* dataloader_init: opens the shards matching `pattern` (glob(3), sorted) for a
 * rank `rank` of `num_ranks` reading micro-batches of B sequences of T tokens.
 *   B, T >= 1; 0 <= rank < num_ranks; 1 <= vocab_size <= 65536 (ids are uint16).
 * Checks every shard: opens, size >= 1024 bytes, magic 20240520, version 1,
 * size == 1024 + 2*ntok, and ntok >= num_ranks*B*T + 1 (one global micro-batch
 * plus the final target). Token ids are checked when a shard is loaded.
 * Allocates inputs/targets (B*T ints each) and a uint16 buffer of the largest
 * shard. Starts at shard 0, position 0. Returns 0, or 1 with a one-line err
 * naming the pattern or file, leaving nothing allocated (dl zeroed). */
static inline int dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int rank, int num_ranks,
                           int vocab_size, char* err, size_t errlen) {
    memset(dl, 0, sizeof(*dl));
    dl->loaded_shard = -1;
    dl->perm_shard = -1;
    if (dl_check_args_(pattern, B, T, rank, num_ranks, vocab_size, err, errlen)) return 1;
    size_t BT = (size_t)B * (size_t)T, maxtok = 0;
    if (dl_list_shards_(dl, pattern, B, T, num_ranks, (size_t)num_ranks * BT + 1, &maxtok, err, errlen)) return 1;
    int ns = dl->num_shards;
    dl->tokens = (uint16_t*)malloc(maxtok * sizeof(uint16_t));
    dl->inputs = (int*)malloc(BT * sizeof(int));
    dl->targets = (int*)malloc(BT * sizeof(int));
    dl->shard_order = (int*)malloc((size_t)ns * sizeof(int));
    if (dl->tokens == NULL || dl->inputs == NULL || dl->targets == NULL || dl->shard_order == NULL) {
        dataloader_free(dl);
        dl_errf_(err, errlen, "dataloader: out of memory for a %zu-token shard buffer of %s", maxtok, pattern);
        return 1;
    }
    dl->tokens_cap = maxtok;
    dl->B = B;
    dl->T = T;
    dl->rank = rank;
    dl->num_ranks = num_ranks;
    dl->vocab_size = vocab_size;
    dl->current_shard = 0;
    dl->current_position = 0;
    dl->step_seqs = (size_t)num_ranks * (size_t)B;
    for (int i = 0; i < ns; i++) dl->shard_order[i] = i;
    return 0;
}

/* dataloader_set_step: the optimizer step is step_seqs sequences of T tokens
 * over all ranks (the trainer's -d / T), read as step_seqs / (num_ranks*B)
 * global micro-batches from one shard: the loader moves to the next shard
 * only at a step's start, so the data order depends on step_seqs and T only,
 * not on the rank count, B or the micro-steps (top comment). step_seqs must
 * be a positive multiple of num_ranks*B, and every shard must hold one step
 * (ntok >= step_seqs*T + 1; then it also holds step_seqs shuffled
 * sequences). Call after dataloader_init, before the first batch. 0, or 1
 * with err naming the shard, its tokens and the step (step unchanged). */
static inline int dataloader_set_step(DataLoader* dl, size_t step_seqs, char* err, size_t errlen) {
    size_t NB = (size_t)dl->num_ranks * (size_t)dl->B, T = (size_t)dl->T;
    if (step_seqs < 1 || step_seqs % NB != 0)
        return dl_errf_(err, errlen, "dataloader: a step of %zu sequences is not a positive multiple of num_ranks*B = %d*%d = %zu",
                        step_seqs, dl->num_ranks, dl->B, NB);
    if (step_seqs > ((size_t)-1) / 4 / T)
        return dl_errf_(err, errlen, "dataloader: a step of %zu sequences of T=%d overflows", step_seqs, dl->T);
    for (int i = 0; i < dl->num_shards; i++) {
        if (dl->shard_ntok[i] < step_seqs * T + 1)
            return dl_errf_(err, errlen, "dataloader: token shard %s has %zu tokens, fewer than one optimizer step (-d) of %zu sequences "
                            "of T=%d plus the last target = %zu: every shard must hold a whole step (use a smaller -d or -t, or larger shards)",
                            dl->shard_paths[i], dl->shard_ntok[i], step_seqs, dl->T, step_seqs * T + 1);
    }
    dl->step_seqs = step_seqs;
    return 0;
}

/* Uniform integer in [0, n), n >= 1, without modulo bias (rejection). */
static inline uint64_t dl_below_(Rng* r, uint64_t n) {
    uint64_t lim = (0 - n) % n; /* 2^64 mod n: values below it would favour small results */
    for (;;) { uint64_t x = rng_next(r); if (x >= lim) return x % n; }
}

/* The shard order of epoch e: identity unshuffled, else a seeded permutation. */
static inline void dl_shard_order_(DataLoader* dl, long long e) {
    for (int i = 0; i < dl->num_shards; i++) dl->shard_order[i] = i;
    if (!dl->shuffle) return;
    Rng r;
    rng_seed(&r, dl->shuffle_seed, 0x5348415244ULL + 0x100000000ULL * (unsigned long long)e); /* "SHARD", epoch */
    for (int i = dl->num_shards - 1; i > 0; i--) {
        int j = (int)dl_below_(&r, (uint64_t)i + 1);
        int t = dl->shard_order[i]; dl->shard_order[i] = dl->shard_order[j]; dl->shard_order[j] = t;
    }
}

/* Sequences of T tokens (plus target) in shard s. */
static inline size_t dl_num_seqs_(const DataLoader* dl, int s) { return (dl->shard_ntok[s] - 1) / (size_t)dl->T; }

/* Shuffled: make perm the permutation of the current shard's sequences for
   the current epoch. 0, or 1 with err (out of memory). */
static inline int dl_make_perm_(DataLoader* dl, char* err, size_t errlen) {
    if (dl->perm_shard == dl->current_shard && dl->perm_epoch == dl->epoch) return 0;
    size_t S = dl_num_seqs_(dl, dl->current_shard);
    if (S > dl->perm_cap) {
        uint32_t* p = (uint32_t*)realloc(dl->perm, S * sizeof(uint32_t));
        if (p == NULL) { dl_errf_(err, errlen, "dataloader: out of memory for the order of %zu sequences of %s", S, dl->shard_paths[dl->current_shard]); return 1; }
        dl->perm = p; dl->perm_cap = S;
    }
    for (size_t i = 0; i < S; i++) dl->perm[i] = (uint32_t)i;
    Rng r;
    rng_seed(&r, dl->shuffle_seed, 0x5345510000000000ULL ^ ((unsigned long long)dl->epoch << 24) ^ (unsigned long long)dl->current_shard); /* "SEQ" */
    for (size_t i = S; i > 1; i--) {
        size_t j = (size_t)dl_below_(&r, (uint64_t)i);
        uint32_t t = dl->perm[i - 1]; dl->perm[i - 1] = dl->perm[j]; dl->perm[j] = t;
    }
    dl->perm_shard = dl->current_shard;
    dl->perm_epoch = dl->epoch;
    return 0;
}

/* Host bytes this loader holds at most once it reads (the fit check counts
   them: llmc/fit.h): the largest shard's tokens, the batch's inputs and
   targets, the shard order and, shuffled, the permutation of the largest
   shard's sequences. 0 for a loader never initialised. */
static inline unsigned long long dataloader_host_bytes(const DataLoader* dl) {
    if (!dl || !dl->shard_ntok) return 0;
    unsigned long long BT = (unsigned long long)dl->B * (unsigned long long)dl->T;
    unsigned long long b = (unsigned long long)dl->tokens_cap * sizeof(uint16_t) + 2 * BT * sizeof(int)
                         + (unsigned long long)dl->num_shards * (sizeof(int) + sizeof(size_t) + sizeof(char*));
    if (dl->shuffle && dl->T > 0) b += ((unsigned long long)dl->tokens_cap / (unsigned long long)dl->T + 1) * sizeof(uint32_t);
    return b;
}

/* dataloader_set_shuffle: on = 1 reads the shards and their sequences in a
 * seeded random order (see the top comment), 0 in file order. Restarts at
 * epoch 0, the first shard of its order, position 0. */
static inline void dataloader_set_shuffle(DataLoader* dl, int on, unsigned long long seed) {
    dl->shuffle = on ? 1 : 0;
    dl->shuffle_seed = seed;
    dl->epoch = 0;
    dl->perm_shard = -1;
    dl_shard_order_(dl, 0);
    dl->shard_slot = 0;
    dl->current_shard = dl->shard_order[0];
    dl->current_position = 0;
    dl->seek_error = 0;
}

/* Next shard of the epoch's order at position 0; after the last, the next
   epoch (a new order when shuffled). */
static inline void dl_next_shard_(DataLoader* dl) {
    dl->shard_slot++;
    if (dl->shard_slot >= dl->num_shards) {
        dl->shard_slot = 0;
        dl->epoch++;
        dl_shard_order_(dl, dl->epoch);
    }
    dl->current_shard = dl->shard_order[dl->shard_slot];
    dl->current_position = 0;
}

/* Does the read at the current position fit in its shard? At a step's
   start (sequences consumed a multiple of step_seqs) the whole step must
   fit, else the global micro-batch (a step that fit at its start always
   does; a position saved mid-step by another layout, or a seek, is checked
   so). */
static inline int dl_fits_(const DataLoader* dl) {
    size_t NB = (size_t)dl->num_ranks * (size_t)dl->B, T = (size_t)dl->T;
    size_t step = dl->step_seqs > 0 ? dl->step_seqs : NB;
    size_t need = dl->current_position % T == 0 && (dl->current_position / T) % step == 0 ? step : NB;
    if (dl->shuffle) return dl->current_position / T + need <= dl_num_seqs_(dl, dl->current_shard);
    return dl->current_position + need * T + 1 <= dl->shard_ntok[dl->current_shard];
}

/* dataloader_next_batch: fills inputs and targets (B, T) with this rank's
 * slice of the global micro-batch at (current_shard, current_position), then
 * advances current_position by num_ranks*B*T, moving to the next shard
 * (wrapping to shard 0) at position 0 when the next read would not fit (at
 * a step's start: the whole step of step_seqs sequences, dl_fits_). A shard is read and its token ids checked when it is first needed.
 * If the position (e.g. after dataloader_seek with another world size) leaves
 * no room for a global micro-batch, the loader first moves to the next shard.
 * Returns 0, or 1 with err (unreadable shard, token id >= vocab_size naming
 * the file, token index and value, or a bad earlier dataloader_seek). */
static inline int dataloader_next_batch(DataLoader* dl, char* err, size_t errlen) {
    if (dl->seek_error) {
        if (dl->seek_shard < 0 || dl->seek_shard >= dl->num_shards) {
            dl_errf_(err, errlen, "dataloader: seek to shard %d: only shards 0..%d exist (first: %s)",
                     dl->seek_shard, dl->num_shards - 1, dl->num_shards > 0 ? dl->shard_paths[0] : "(none)");
        } else {
            dl_errf_(err, errlen, "dataloader: seek to position %zu of token shard %s, which has only %zu tokens",
                     dl->seek_position, dl->shard_paths[dl->seek_shard], dl->shard_ntok[dl->seek_shard]);
        }
        return 1;
    }
    size_t BT = (size_t)dl->B * (size_t)dl->T;
    size_t M = (size_t)dl->num_ranks * BT;
    if (!dl_fits_(dl)) dl_next_shard_(dl);
    if (dl->loaded_shard != dl->current_shard) {
        if (dl_load_shard_(dl, dl->current_shard, err, errlen) != 0) return 1;
    }
    if (dl->shuffle) {
        if (dl_make_perm_(dl, err, errlen) != 0) return 1;
        size_t T = (size_t)dl->T;
        size_t first = dl->current_position / T + (size_t)dl->rank * (size_t)dl->B;
        for (int b = 0; b < dl->B; b++) {
            const uint16_t* x = dl->tokens + (size_t)dl->perm[first + (size_t)b] * T;
            for (size_t i = 0; i < T; i++) {
                dl->inputs[(size_t)b * T + i] = (int)x[i];
                dl->targets[(size_t)b * T + i] = (int)x[i + 1];
            }
        }
    } else {
        const uint16_t* x = dl->tokens + dl->current_position + (size_t)dl->rank * BT;
        for (size_t i = 0; i < BT; i++) {
            dl->inputs[i] = (int)x[i];
            dl->targets[i] = (int)x[i + 1];
        }
    }
    dl->current_position += M;
    if (!dl_fits_(dl)) dl_next_shard_(dl);
    return 0;
}

/* dataloader_next_starts: the token offsets (in shard *shard) of the
 * num_ranks*B sequences the next dataloader_next_batch reads, in order
 * (rank 0's B first), written to starts; for logging and tests. Moves to the
 * next shard first if the batch does not fit (as next_batch would). 0, or 1
 * with err. */
static inline int dataloader_next_starts(DataLoader* dl, size_t* starts, int* shard, char* err, size_t errlen) {
    if (dl->seek_error) return dataloader_next_batch(dl, err, errlen);
    if (!dl_fits_(dl)) dl_next_shard_(dl);
    size_t NB = (size_t)dl->num_ranks * (size_t)dl->B, T = (size_t)dl->T;
    if (dl->shuffle && dl_make_perm_(dl, err, errlen) != 0) return 1;
    for (size_t k = 0; k < NB; k++)
        starts[k] = dl->shuffle ? (size_t)dl->perm[dl->current_position / T + k] * T : dl->current_position + k * T;
    *shard = dl->current_shard;
    return 0;
}

/* dataloader_seek: makes (shard, position) the start of the next global
 * micro-batch, e.g. to resume from a checkpoint that saved current_shard and
 * current_position, in the current epoch (dataloader_resume sets the epoch
 * too). The shard is loaded (and checked) by the next
 * dataloader_next_batch; an out-of-range shard or a position beyond the
 * shard's tokens is reported by that call. */
static inline void dataloader_seek(DataLoader* dl, int shard, size_t position) {
    if (shard < 0 || shard >= dl->num_shards || position > dl->shard_ntok[shard]) {
        dl->seek_error = 1;
        dl->seek_shard = shard;
        dl->seek_position = position;
        return;
    }
    dl->seek_error = 0;
    dl->current_shard = shard;
    dl->current_position = position;
    for (int i = 0; i < dl->num_shards; i++) if (dl->shard_order[i] == shard) dl->shard_slot = i; /* the epoch's order goes on from here */
}

/* dataloader_reset: back to epoch 0, its first shard (shard 0 unshuffled),
 * position 0 (e.g. before each evaluation pass over the val split). Keeps the
 * loaded shard if it is that one. */
static inline void dataloader_reset(DataLoader* dl) {
    dl->seek_error = 0;
    dl->epoch = 0;
    dl_shard_order_(dl, 0);
    dl->shard_slot = 0;
    dl->current_shard = dl->shard_order[0];
    dl->current_position = 0;
}

/* dataloader_resume: the position a training state saved: epoch, shard
 * (file index) and current_position, under the current shuffle setting
 * (the shard order of that epoch is recomputed, so the following shards
 * come in the same order as in the run that saved it). Errors as seek. */
static inline void dataloader_resume(DataLoader* dl, long long epoch, int shard, size_t position) {
    dl->epoch = epoch < 0 ? 0 : epoch;
    dl_shard_order_(dl, dl->epoch);
    dataloader_seek(dl, shard, position);
}

/* dataloader_batches_per_epoch: global micro-batches in one pass over all
 * shards = step_seqs/(num_ranks*B) x the steps, sum over shards of
 * floor((ntok - 1) / (step_seqs*T)) (shuffled: of floor(floor((ntok - 1) /
 * T) / step_seqs)); the same number on every rank. */
static inline size_t dataloader_batches_per_epoch(const DataLoader* dl) {
    size_t NB = (size_t)dl->num_ranks * (size_t)dl->B;
    size_t step = dl->step_seqs > 0 ? dl->step_seqs : NB;
    size_t M = step * (size_t)dl->T;
    size_t n = 0;
    for (int i = 0; i < dl->num_shards; i++) n += dl->shuffle ? dl_num_seqs_(dl, i) / step : (dl->shard_ntok[i] - 1) / M;
    return n * (step / NB);
}

/* dataloader_shard_read: the tokens of shard i that one epoch reads as
 * inputs: whole steps of step_seqs sequences of T tokens (M = step_seqs*T
 * tokens), steps_i * M, steps_i = floor((ntok_i - 1) / M) in file order
 * (shuffled: floor(floor((ntok_i - 1) / T) / step_seqs)); a step never
 * crosses a shard. Token steps_i * M is the last step's final target; the
 * other ntok_i - 1 - steps_i * M tokens of the shard are never read, as
 * input or target, in an epoch (in file order the same tail each time;
 * shuffled, the sequences left over differ each epoch, their count does
 * not). The same on every rank. */
static inline size_t dataloader_shard_read(const DataLoader* dl, int i) {
    size_t NB = (size_t)dl->num_ranks * (size_t)dl->B;
    size_t step = dl->step_seqs > 0 ? dl->step_seqs : NB;
    size_t M = step * (size_t)dl->T;
    size_t steps = dl->shuffle ? dl_num_seqs_(dl, i) / step : (dl->shard_ntok[i] - 1) / M;
    return steps * M;
}

/* dataloader_tokens_per_epoch: tokens one epoch reads as inputs, the sum of
 * dataloader_shard_read over the shards (= dataloader_batches_per_epoch x
 * num_ranks*B*T); at most num_tokens. */
static inline size_t dataloader_tokens_per_epoch(const DataLoader* dl) {
    size_t n = 0;
    for (int i = 0; i < dl->num_shards; i++) n += dataloader_shard_read(dl, i);
    return n;
}

/* dataloader_num_seqs: the split's distinct sequences of T tokens (each
 * with its target) in file order: sum over shards of floor((ntok - 1) / T).
 * Sequence k of shard s is tokens [k*T, k*T + T] of that shard; shards
 * follow each other in sorted order. Independent of B and the rank count. */
static inline size_t dataloader_num_seqs(const DataLoader* dl) {
    size_t n = 0;
    for (int i = 0; i < dl->num_shards; i++) n += dl_num_seqs_(dl, i);
    return n;
}

/* dataloader_read_seqs: inputs and targets (n, T), 1 <= n <= B, are the
 * split's sequences first .. first + n - 1 in file order (dataloader_num_seqs
 * numbers them; a run of them may cross into the next shard), whatever the
 * rank and shuffle settings: the evaluation's reader, the same tokens at
 * every rank count. Loads each shard when first needed (one buffer: reading
 * in increasing order loads each shard once) and checks its token ids.
 * Leaves the training position (current_shard, current_position) alone.
 * 0, or 1 with err (n out of range, a sequence beyond the split, an
 * unreadable shard, a token id >= vocab_size naming file, index, value). */
static inline int dataloader_read_seqs(DataLoader* dl, size_t first, int n, char* err, size_t errlen) {
    if (n < 1 || n > dl->B) return dl_errf_(err, errlen, "dataloader: read of %d sequences: must be 1..B = %d", n, dl->B);
    size_t T = (size_t)dl->T, total = dataloader_num_seqs(dl);
    if (first + (size_t)n > total)
        return dl_errf_(err, errlen, "dataloader: sequences %zu..%zu: %s holds only %zu sequences of T=%d",
                        first, first + (size_t)n - 1, dl->num_shards > 0 ? dl->shard_paths[0] : "(no shard)", total, dl->T);
    int s = 0;
    size_t k = first;
    while (k >= dl_num_seqs_(dl, s)) { k -= dl_num_seqs_(dl, s); s++; }
    for (int b = 0; b < n; b++) {
        while (k >= dl_num_seqs_(dl, s)) { k -= dl_num_seqs_(dl, s); s++; }
        if (dl->loaded_shard != s && dl_load_shard_(dl, s, err, errlen) != 0) return 1;
        const uint16_t* x = dl->tokens + k * T;
        for (size_t i = 0; i < T; i++) {
            dl->inputs[(size_t)b * T + i] = (int)x[i];
            dl->targets[(size_t)b * T + i] = (int)x[i + 1];
        }
        k++;
    }
    return 0;
}

#endif /* LLMC_DATALOADER_H */
