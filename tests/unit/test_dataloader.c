/*
 * test_dataloader.c: checks llmc/dataloader.h and llmc/tokenizer.h on small
 * synthetic files written to a temporary directory:
 *   - exact inputs/targets for 1 rank with B=4, and for 2 ranks with B=2 whose
 *     slices concatenate to the 1-rank batch, step after step, across shard
 *     boundaries and the wrap-around to shard 0;
 *   - one epoch visits dataloader_batches_per_epoch() distinct positions and
 *     no sequence twice; seek (resume, also with another world size), reset;
 *   - shuffled order: the tokens at the sequence starts, every sequence once
 *     per epoch, 2 ranks = 1 rank, other seed / other epoch = other order,
 *     resume mid-epoch (1 and 2 ranks) continues the same batches;
 *   - each bad input returns 1 with a one-line message naming the file or
 *     pattern: missing file, empty glob, wrong magic, wrong version, truncated,
 *     too long, shorter than the header, token id >= vocab, shard too small;
 *     a text file (long or short) is named as text, with the tokenizer
 *     command; a shard header, invalid UTF-8 or a NUL byte are not text;
 *   - shard switches per optimizer step (dataloader_set_step): over shards
 *     of 100, 82 and 50 tokens, 5 layouts of a 4-sequence step (1x4, 2x2,
 *     4x1, 2 ranks x B=1 x 2 micro-steps, 1 x B=1 x 4) read the same
 *     sequences step for step, in order and shuffled, for 3 epochs; a
 *     4-rank position resumed on 2 ranks x 2 micro-steps and on 1 rank goes
 *     on alike; a step not a multiple of ranks x B, a shard smaller than a
 *     step are refused with one line;
 *   - the evaluation's reader (dataloader_read_seqs): sequences in file
 *     order across shard boundaries, the same for B=3 and B=1, the count
 *     (dataloader_num_seqs), a read beyond the split or of more than B;
 *   - tokenizer: decode/print_safe of a synthetic file (versions 1 and 2), and
 *     wrong magic / version / truncated / trailing bytes / zero length errors;
 *   - samples as whole UTF-8 characters (Utf8Stream): tokens that split a
 *     character, ill-formed and incomplete sequences, control bytes; every
 *     GPT-2 token streamed gives valid UTF-8 text;
 *   - if present (bash dev/data/prepare.sh), data/gpt2_tokenizer.bin decodes
 *     [15496, 995] to "Hello world" and the Brown train shard loads and decodes.
 * Build and run from the repo root:
 *   gcc -O2 -std=c11 -Wall -Wextra -I. tests/unit/test_dataloader.c -o /tmp/test_dataloader && /tmp/test_dataloader
 * Last line: "N passed, M failed"; exit status 1 if any check failed.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"

#include "tests/check.h"

static char g_dir[256];

static void path_of(char* out, size_t n, const char* name) { snprintf(out, n, "%s/%s", g_dir, name); }

static void put_le32(unsigned char* p, uint32_t v) {
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}

/* write_shard: header (magic, version, header_ntok), then ntok tokens as
 * uint16 LE, then `extra` zero bytes. */
static void write_shard(const char* name, const uint16_t* tok, size_t ntok, int magic, int version,
                        int header_ntok, size_t extra) {
    char p[512];
    path_of(p, sizeof(p), name);
    FILE* f = fopen(p, "wb");
    if (f == NULL) { perror(p); exit(2); }
    unsigned char h[1024];
    memset(h, 0, sizeof(h));
    put_le32(h, (uint32_t)magic);
    put_le32(h + 4, (uint32_t)version);
    put_le32(h + 8, (uint32_t)header_ntok);
    fwrite(h, 1, sizeof(h), f);
    for (size_t i = 0; i < ntok; i++) {
        unsigned char b[2] = {(unsigned char)(tok[i] & 0xff), (unsigned char)(tok[i] >> 8)};
        fwrite(b, 1, 2, f);
    }
    for (size_t i = 0; i < extra; i++) fputc(0, f);
    fclose(f);
}

/* good shards: shard s token i = 10000*(s+1) + i (identifies shard and index) */
#define NSHARD 3
static const size_t g_ntok[NSHARD] = {100, 70, 33};
static uint16_t g_tok[NSHARD][100];

static void make_good_shards(void) {
    for (int s = 0; s < NSHARD; s++) {
        for (size_t i = 0; i < g_ntok[s]; i++) g_tok[s][i] = (uint16_t)(10000 * (s + 1) + i);
        char name[64];
        snprintf(name, sizeof(name), "good_%06d.bin", s);
        write_shard(name, g_tok[s], g_ntok[s], 20240520, 1, (int)g_ntok[s], 0);
    }
}

static int expect_init_error_rank(const char* pattern, int B, int T, int rank, int R, int vocab, const char* must_contain,
                                  const char* what) {
    DataLoader dl;
    char err[1024] = "";
    int rc = dataloader_init(&dl, pattern, B, T, rank, R, vocab, err, sizeof(err));
    CHECK(rc == 1, "%s: init returned %d, expected 1", what, rc);
    CHECK(strstr(err, must_contain) != NULL, "%s: message '%s' does not name '%s'", what, err, must_contain);
    CHECK(strchr(err, '\n') == NULL && strlen(err) > 0, "%s: message must be one non-empty line: '%s'", what, err);
    CHECK(dl.shard_paths == NULL && dl.tokens == NULL && dl.inputs == NULL, "%s: init left memory allocated", what);
    printf("  ok-error (%s): %s\n", what, err);
    if (rc == 0) dataloader_free(&dl);
    return rc;
}

static int expect_init_error(const char* pattern, int B, int T, int R, int vocab, const char* must_contain, const char* what) {
    return expect_init_error_rank(pattern, B, T, 0, R, vocab, must_contain, what);
}

static void test_batches(void) {
    char pat[512], err[1024] = "";
    path_of(pat, sizeof(pat), "good_*.bin");
    const int T = 8, B1 = 4, B2 = 2, R = 2;
    DataLoader one, r0, r1;
    CHECK(dataloader_init(&one, pat, B1, T, 0, 1, 65536, err, sizeof(err)) == 0, "init 1 rank: %s", err);
    CHECK(dataloader_init(&r0, pat, B2, T, 0, R, 65536, err, sizeof(err)) == 0, "init rank 0 of 2: %s", err);
    CHECK(dataloader_init(&r1, pat, B2, T, 1, R, 65536, err, sizeof(err)) == 0, "init rank 1 of 2: %s", err);
    CHECK(one.num_shards == 3 && one.num_tokens == 203, "num_shards %d num_tokens %zu, expected 3, 203", one.num_shards, one.num_tokens);
    size_t M = (size_t)B1 * T;                    /* 32 tokens per global micro-batch */
    size_t epoch = dataloader_batches_per_epoch(&one);
    CHECK(epoch == 99 / M + 69 / M + 32 / M, "batches per epoch %zu, expected 6", epoch);
    CHECK(dataloader_batches_per_epoch(&r0) == epoch, "2-rank epoch differs");

    /* walk 2.5 epochs, tracking the expected (shard, pos) independently */
    int s = 0;
    size_t pos = 0;
    int seen_shard[64];
    size_t seen_pos[64];
    int nseen = 0, shard_changes = 0, wraps = 0;
    int steps = (int)(epoch * 5 / 2);
    for (int step = 0; step < steps; step++) {
        if (step > 0 && step % (int)epoch == 0) {
            CHECK(s == 0 && pos == 0, "step %d: epoch should restart at shard 0 pos 0, at %d %zu", step, s, pos);
        }
        int cs = one.current_shard;
        size_t cp = one.current_position;
        CHECK(cs == s && cp == pos, "step %d: loader at shard %d pos %zu, expected %d %zu", step, cs, cp, s, pos);
        CHECK(dataloader_next_batch(&one, err, sizeof(err)) == 0, "step %d 1-rank: %s", step, err);
        CHECK(dataloader_next_batch(&r0, err, sizeof(err)) == 0, "step %d rank0: %s", step, err);
        CHECK(dataloader_next_batch(&r1, err, sizeof(err)) == 0, "step %d rank1: %s", step, err);
        int ok = 1;
        for (size_t i = 0; i < M; i++) {
            int ein = g_tok[s][pos + i], etg = g_tok[s][pos + i + 1];
            if (one.inputs[i] != ein || one.targets[i] != etg) ok = 0;
        }
        CHECK(ok, "step %d: 1-rank inputs/targets differ from shard %d tokens at %zu", step, s, pos);
        size_t half = (size_t)B2 * T;
        int cat = memcmp(r0.inputs, one.inputs, half * sizeof(int)) == 0 &&
                  memcmp(r1.inputs, one.inputs + half, half * sizeof(int)) == 0 &&
                  memcmp(r0.targets, one.targets, half * sizeof(int)) == 0 &&
                  memcmp(r1.targets, one.targets + half, half * sizeof(int)) == 0;
        CHECK(cat, "step %d: rank slices do not concatenate to the 1-rank batch", step);
        CHECK(r0.current_shard == one.current_shard && r0.current_position == one.current_position &&
              r1.current_shard == one.current_shard && r1.current_position == one.current_position,
              "step %d: ranks disagree on (shard, pos)", step);
        if (step < (int)epoch) {
            for (int k = 0; k < nseen; k++) {
                CHECK(!(seen_shard[k] == s && seen_pos[k] == pos), "step %d: sequence at shard %d pos %zu seen twice in one epoch", step, s, pos);
            }
            seen_shard[nseen] = s;
            seen_pos[nseen] = pos;
            nseen++;
        }
        /* expected advance */
        pos += M;
        if (pos + M + 1 > g_ntok[s]) {
            s = (s + 1) % NSHARD;
            pos = 0;
            shard_changes++;
            if (s == 0) wraps++;
        }
    }
    CHECK(nseen == (int)epoch, "distinct positions in one epoch %d, expected %zu", nseen, epoch);
    CHECK(shard_changes >= 6 && wraps >= 2, "walk crossed %d shard boundaries and %d wraps", shard_changes, wraps);
    printf("  batches: %d steps, %d distinct positions per epoch, %d shard changes, %d wraps\n", steps, nseen, shard_changes, wraps);

    /* seek: resume a 1-rank run's position in a 2-rank run */
    dataloader_seek(&one, 1, 32);
    dataloader_seek(&r0, 1, 32);
    dataloader_seek(&r1, 1, 32);
    for (int step = 0; step < 3; step++) {
        CHECK(dataloader_next_batch(&one, err, sizeof(err)) == 0, "seek step %d: %s", step, err);
        CHECK(dataloader_next_batch(&r0, err, sizeof(err)) == 0, "seek step %d: %s", step, err);
        CHECK(dataloader_next_batch(&r1, err, sizeof(err)) == 0, "seek step %d: %s", step, err);
        if (step == 0) CHECK(one.inputs[0] == 20032 && one.targets[M - 1] == 20064, "seek(1,32): first input %d", one.inputs[0]);
        if (step == 1) CHECK(one.inputs[0] == 30000, "after seek: next shard expected, got %d", one.inputs[0]);
        if (step == 2) CHECK(one.inputs[0] == 10000, "after seek: wrap expected, got %d", one.inputs[0]);
        CHECK(memcmp(r0.inputs, one.inputs, (size_t)B2 * T * sizeof(int)) == 0 &&
              memcmp(r1.targets, one.targets + (size_t)B2 * T, (size_t)B2 * T * sizeof(int)) == 0,
              "seek step %d: rank slices differ", step);
    }
    /* a position with no room for a global micro-batch moves on to the next shard */
    dataloader_seek(&one, 0, 90);
    CHECK(dataloader_next_batch(&one, err, sizeof(err)) == 0 && one.inputs[0] == 20000, "seek(0,90) should continue at shard 1, got %d", one.inputs[0]);
    /* bad seeks are reported by the next call */
    dataloader_seek(&one, 7, 0);
    CHECK(dataloader_next_batch(&one, err, sizeof(err)) == 1 && strstr(err, "shard 7") != NULL, "seek to shard 7: '%s'", err);
    dataloader_seek(&one, 2, 500);
    CHECK(dataloader_next_batch(&one, err, sizeof(err)) == 1 && strstr(err, "good_000002.bin") != NULL, "seek beyond shard: '%s'", err);
    printf("  ok-error (bad seek): %s\n", err);
    dataloader_reset(&one);
    CHECK(one.current_shard == 0 && one.current_position == 0, "reset");
    CHECK(dataloader_next_batch(&one, err, sizeof(err)) == 0 && one.inputs[0] == 10000 && one.targets[0] == 10001, "after reset: %d", one.inputs[0]);

    /* 3 ranks with B=1, T=8: rank r gets tokens [pos + 8r, pos + 8r + 9) */
    DataLoader q;
    CHECK(dataloader_init(&q, pat, 1, 8, 2, 3, 65536, err, sizeof(err)) == 0, "init rank 2 of 3: %s", err);
    CHECK(dataloader_next_batch(&q, err, sizeof(err)) == 0 && q.inputs[0] == 10016 && q.targets[7] == 10024, "rank 2 of 3: %d %d", q.inputs[0], q.targets[7]);
    CHECK(dataloader_next_batch(&q, err, sizeof(err)) == 0 && q.inputs[0] == 10040, "rank 2 of 3 step 2: %d", q.inputs[0]);
    dataloader_free(&q);

    dataloader_free(&one);
    dataloader_free(&r0);
    dataloader_free(&r1);
    CHECK(one.inputs == NULL && one.tokens == NULL, "free must zero the struct");
    dataloader_free(&one); /* double free is safe */
}

/* Shuffled order (dataloader_set_shuffle): sequences of T tokens, a seeded
 * permutation per shard and epoch, a seeded shard order per epoch. */
static void test_shuffle(void) {
    char pat[512], err[1024] = "";
    path_of(pat, sizeof(pat), "good_*.bin");
    const int T = 4;                      /* sequences per shard: 99/4 = 24, 69/4 = 17, 32/4 = 8 */
    const size_t S[NSHARD] = {24, 17, 8};
    DataLoader one, r0, r1, o2, again;
    CHECK(dataloader_init(&one, pat, 4, T, 0, 1, 65536, err, sizeof(err)) == 0, "shuffle init: %s", err);
    CHECK(dataloader_init(&r0, pat, 2, T, 0, 2, 65536, err, sizeof(err)) == 0, "shuffle init r0: %s", err);
    CHECK(dataloader_init(&r1, pat, 2, T, 1, 2, 65536, err, sizeof(err)) == 0, "shuffle init r1: %s", err);
    CHECK(dataloader_init(&o2, pat, 4, T, 0, 1, 65536, err, sizeof(err)) == 0, "shuffle init seed 2: %s", err);
    dataloader_set_shuffle(&one, 1, 1337); dataloader_set_shuffle(&r0, 1, 1337); dataloader_set_shuffle(&r1, 1, 1337);
    dataloader_set_shuffle(&o2, 1, 1338);
    /* global micro-batch of 4 sequences: an epoch uses 24 + 16 + 8 = 48 sequences, 12 batches */
    size_t per_epoch = dataloader_batches_per_epoch(&one);
    CHECK(per_epoch == 12, "shuffled batches per epoch %zu, expected 12", per_epoch);
    const int steps = 36;                 /* three epochs */
    int ok_tokens = 1, ok_ranks = 1, ok_once = 1, ok_state = 1;
    int in_order = 1, same_as_other_seed = 1, epoch_orders_equal = 1;
    static unsigned char seen[3][NSHARD][32];
    memset(seen, 0, sizeof(seen));
    size_t first_epoch[12 * 4];
    long long saved_epoch = -1; int saved_shard = -1; size_t saved_pos = 0;
    int nsaved_steps = 0;
    int32_t after_save[64][16];
    for (int step = 0; step < steps; step++) {
        size_t starts[4];
        int sh = -1;
        CHECK(dataloader_next_starts(&one, starts, &sh, err, sizeof(err)) == 0, "next_starts: %s", err);
        long long ep = one.epoch;
        if (step == 17) { saved_epoch = one.epoch; saved_shard = one.current_shard; saved_pos = one.current_position; } /* mid-epoch, mid-shard */
        CHECK(dataloader_next_batch(&one, err, sizeof(err)) == 0 && dataloader_next_batch(&r0, err, sizeof(err)) == 0 &&
              dataloader_next_batch(&r1, err, sizeof(err)) == 0 && dataloader_next_batch(&o2, err, sizeof(err)) == 0, "shuffled batch %d: %s", step, err);
        if (step >= 17 && nsaved_steps < 64) { memcpy(after_save[nsaved_steps], one.inputs, 16 * sizeof(int)); nsaved_steps++; }
        for (int k = 0; k < 4; k++) {
            size_t st = starts[k];
            if (st % T != 0 || st / T >= S[sh]) { ok_tokens = 0; continue; }
            for (int i = 0; i < T; i++)
                if (one.inputs[k * T + i] != g_tok[sh][st + i] || one.targets[k * T + i] != g_tok[sh][st + i + 1]) ok_tokens = 0;
            if (ep < 3) { if (seen[ep][sh][st / T]) ok_once = 0; seen[ep][sh][st / T] = 1; }
            if (k > 0 && starts[k] != starts[k - 1] + T) in_order = 0;
            if (ep == 0) first_epoch[(step % 12) * 4 + k] = (size_t)sh * 1000 + st;
            if (ep == 1 && first_epoch[(step % 12) * 4 + k] != (size_t)sh * 1000 + st) epoch_orders_equal = 0;
        }
        if (memcmp(r0.inputs, one.inputs, 8 * sizeof(int)) || memcmp(r1.inputs, one.inputs + 8, 8 * sizeof(int)) ||
            memcmp(r0.targets, one.targets, 8 * sizeof(int)) || memcmp(r1.targets, one.targets + 8, 8 * sizeof(int))) ok_ranks = 0;
        if (memcmp(o2.inputs, one.inputs, 16 * sizeof(int))) same_as_other_seed = 0;
        if (r0.current_shard != one.current_shard || r0.current_position != one.current_position || r0.epoch != one.epoch ||
            r1.epoch != one.epoch) ok_state = 0;
    }
    CHECK(ok_tokens, "shuffled inputs/targets are the shard's tokens at the sequence starts");
    CHECK(ok_ranks, "shuffled: 2 ranks x B=2 concatenate to 1 rank x B=4, batch for batch");
    CHECK(ok_state, "shuffled: the ranks agree on (epoch, shard, position)");
    CHECK(ok_once, "shuffled: a sequence read twice within an epoch");
    int used = 0;
    for (int e = 0; e < 3; e++) for (int sh = 0; sh < NSHARD; sh++) for (int i = 0; i < 32; i++) used += seen[e][sh][i];
    CHECK(used == 3 * 48, "shuffled: %d sequences in 3 epochs, expected 3 x 48 (24 + 16 + 8)", used);
    CHECK(!in_order, "shuffled: the sequences came in file order");
    CHECK(!same_as_other_seed, "shuffled: seeds 1337 and 1338 gave the same order");
    CHECK(!epoch_orders_equal, "shuffled: epochs 0 and 1 came in the same order");
    CHECK(one.epoch == 3, "shuffled: epoch %lld after 36 batches, expected 3", one.epoch);
    /* resume at batch 17 (epoch 1, inside a shard) on 1 rank, and on 2 ranks x B=2 */
    CHECK(saved_epoch == 1 && saved_pos > 0, "saved position epoch %lld pos %zu", saved_epoch, saved_pos);
    CHECK(dataloader_init(&again, pat, 4, T, 0, 1, 65536, err, sizeof(err)) == 0, "init again: %s", err);
    dataloader_set_shuffle(&again, 1, 1337);
    dataloader_resume(&again, saved_epoch, saved_shard, saved_pos);
    dataloader_set_shuffle(&r0, 1, 1337); dataloader_set_shuffle(&r1, 1, 1337);
    dataloader_resume(&r0, saved_epoch, saved_shard, saved_pos); dataloader_resume(&r1, saved_epoch, saved_shard, saved_pos);
    int resume_ok = 1;
    for (int k = 0; k < nsaved_steps; k++) {
        CHECK(dataloader_next_batch(&again, err, sizeof(err)) == 0 && dataloader_next_batch(&r0, err, sizeof(err)) == 0 &&
              dataloader_next_batch(&r1, err, sizeof(err)) == 0, "resumed batch %d: %s", k, err);
        if (memcmp(again.inputs, after_save[k], 16 * sizeof(int)) || memcmp(r0.inputs, after_save[k], 8 * sizeof(int)) ||
            memcmp(r1.inputs, after_save[k] + 8, 8 * sizeof(int))) resume_ok = 0;
    }
    CHECK(resume_ok, "shuffled: resuming at (epoch, shard, position) continues with the same %d batches, on 1 and on 2 ranks", nsaved_steps);
    printf("  shuffle: 36 batches, 3 epochs, every sequence once per epoch, 2 ranks = 1 rank, resume at batch 17 continues the same %d batches\n", nsaved_steps);
    dataloader_free(&one); dataloader_free(&r0); dataloader_free(&r1); dataloader_free(&o2); dataloader_free(&again);
}

static void test_dataloader_errors(void) {
    char pat[512], p[512];
    uint16_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint16_t)i;

    path_of(pat, sizeof(pat), "missing_000000.bin");
    expect_init_error(pat, 1, 4, 1, 256, "missing_000000.bin", "missing file");
    path_of(pat, sizeof(pat), "nothing_*.bin");
    expect_init_error(pat, 1, 4, 1, 256, "nothing_*.bin", "empty glob");
    path_of(p, sizeof(p), "dangling_000000.bin");
    CHECK(symlink("/nonexistent/target.bin", p) == 0, "symlink %s", p);
    path_of(pat, sizeof(pat), "dangling_*.bin");
    expect_init_error(pat, 1, 4, 1, 256, "dangling_000000.bin", "unopenable file");

    write_shard("magic_000000.bin", tok, 100, 20240521, 1, 100, 0);
    path_of(pat, sizeof(pat), "magic_*.bin");
    expect_init_error(pat, 1, 4, 1, 256, "magic_000000.bin", "wrong magic");

    write_shard("version_000000.bin", tok, 100, 20240520, 2, 100, 0);
    path_of(pat, sizeof(pat), "version_*.bin");
    expect_init_error(pat, 1, 4, 1, 256, "version_000000.bin", "wrong version");

    write_shard("trunc_000000.bin", tok, 50, 20240520, 1, 100, 0);
    path_of(pat, sizeof(pat), "trunc_*.bin");
    expect_init_error(pat, 1, 4, 1, 256, "trunc_000000.bin", "truncated");
    DataLoader d;
    char err[1024];
    dataloader_init(&d, pat, 1, 4, 0, 1, 256, err, sizeof(err));
    CHECK(strstr(err, "100 tokens") && strstr(err, "1124 bytes") && strstr(err, "truncated"), "truncated message gives both sizes: %s", err);

    write_shard("long_000000.bin", tok, 100, 20240520, 1, 100, 3);
    path_of(pat, sizeof(pat), "long_*.bin");
    expect_init_error(pat, 1, 4, 1, 256, "long_000000.bin", "too long");
    dataloader_init(&d, pat, 1, 4, 0, 1, 256, err, sizeof(err));
    CHECK(strstr(err, "1224 bytes") && strstr(err, "1227 bytes") && strstr(err, "too long"), "too-long message gives both sizes: %s", err);

    path_of(p, sizeof(p), "short_000000.bin");
    FILE* f = fopen(p, "wb");
    fwrite(tok, 1, 100, f);
    fclose(f);
    path_of(pat, sizeof(pat), "short_*.bin");
    expect_init_error(pat, 1, 4, 1, 256, "short_000000.bin", "shorter than header");

    /* the second shard is too small for 2 ranks * B=2 * T=8 + 1 = 33 tokens */
    write_shard("small_000000.bin", tok, 100, 20240520, 1, 100, 0);
    write_shard("small_000001.bin", tok, 32, 20240520, 1, 32, 0);
    path_of(pat, sizeof(pat), "small_*.bin");
    expect_init_error(pat, 2, 8, 2, 256, "small_000001.bin", "shard too small");

    /* token id >= vocab in the second shard: found when that shard is loaded */
    uint16_t bad[100];
    for (int i = 0; i < 100; i++) bad[i] = (uint16_t)i;
    bad[77] = 50300;
    write_shard("vocab_000000.bin", tok, 100, 20240520, 1, 100, 0);
    write_shard("vocab_000001.bin", bad, 100, 20240520, 1, 100, 0);
    path_of(pat, sizeof(pat), "vocab_*.bin");
    CHECK(dataloader_init(&d, pat, 4, 8, 0, 1, 50257, err, sizeof(err)) == 0, "vocab init: %s", err);
    int rc = 0, step = 0;
    for (; step < 10 && rc == 0; step++) rc = dataloader_next_batch(&d, err, sizeof(err));
    CHECK(rc == 1 && step == 4, "bad token: rc %d at step %d, expected failure at step 4", rc, step);
    CHECK(strstr(err, "vocab_000001.bin") && strstr(err, "77") && strstr(err, "50300") && strstr(err, "50257"),
          "bad token message must give file, index, value, vocab: %s", err);
    printf("  ok-error (token id >= vocab): %s\n", err);
    dataloader_free(&d);

    path_of(pat, sizeof(pat), "good_*.bin");
    expect_init_error_rank(pat, 1, 8, 2, 2, 65536, "good_*.bin", "rank >= num_ranks");
    expect_init_error(pat, 0, 8, 1, 65536, "good_*.bin", "B = 0");
}

/* write_tokenizer: header (magic, version, V, eot) then tokens; `cut` bytes
 * removed from the end, `extra` bytes appended. */
static void write_tokenizer(const char* name, int magic, int version, int V, int eot,
                            const char** toks, size_t cut, size_t extra) {
    unsigned char buf[4096];
    memset(buf, 0, 1024);
    put_le32(buf, (uint32_t)magic);
    put_le32(buf + 4, (uint32_t)version);
    put_le32(buf + 8, (uint32_t)V);
    put_le32(buf + 12, (uint32_t)eot);
    size_t n = 1024;
    for (int i = 0; i < V; i++) {
        size_t L = strlen(toks[i]);
        buf[n++] = (unsigned char)L;
        memcpy(buf + n, toks[i], L);
        n += L;
    }
    for (size_t i = 0; i < extra; i++) buf[n++] = 'x';
    n -= cut;
    char p[512];
    path_of(p, sizeof(p), name);
    FILE* f = fopen(p, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

static void expect_tok_error(const char* name, const char* what) {
    char p[512], err[1024] = "";
    path_of(p, sizeof(p), name);
    Tokenizer t;
    int rc = tokenizer_init(&t, p, err, sizeof(err));
    CHECK(rc == 1 && strstr(err, name) != NULL && strchr(err, '\n') == NULL, "%s: rc %d message '%s'", what, rc, err);
    CHECK(t.blob == NULL && !t.init_ok, "%s: init left memory allocated", what);
    printf("  ok-error (%s): %s\n", what, err);
}

static void test_tokenizer(void) {
    const char* toks[5] = {"a", "bc", " world", "\x01", "<|endoftext|>"};
    char p[512], err[1024] = "";
    write_tokenizer("tok_v2.bin", 20240328, 2, 5, 4, toks, 0, 0);
    path_of(p, sizeof(p), "tok_v2.bin");
    Tokenizer t;
    CHECK(tokenizer_init(&t, p, err, sizeof(err)) == 0, "tokenizer v2 init: %s", err);
    CHECK(t.vocab_size == 5 && t.eot_token == 4, "v2 vocab %u eot %u", t.vocab_size, t.eot_token);
    CHECK(strcmp(tokenizer_decode(&t, 2), " world") == 0 && strcmp(tokenizer_decode(&t, 4), "<|endoftext|>") == 0, "v2 decode");
    CHECK(tokenizer_decode(&t, 5) == NULL && tokenizer_decode(&t, 0xffffffffu) == NULL, "decode of id >= vocab must be NULL");
    CHECK(tokenizer_token_length(&t, 2) == 6, "token length");
    char pp[512];
    path_of(pp, sizeof(pp), "print.txt");
    FILE* f = fopen(pp, "w+b");
    uint32_t ids[6] = {0, 3, 1, 2, 9, 0};
    for (int i = 0; i < 6; i++) tokenizer_print_safe(&t, ids[i], f);
    rewind(f);
    char got[64] = "";
    size_t n = fread(got, 1, sizeof(got) - 1, f);
    got[n] = '\0';
    fclose(f);
    CHECK(strcmp(got, "abc worlda") == 0, "print_safe wrote '%s', expected 'abc worlda' (\\x01 and id 9 skipped)", got);
    tokenizer_free(&t);
    CHECK(tokenizer_decode(&t, 0) == NULL, "decode after free must be NULL");

    write_tokenizer("tok_v1.bin", 20240328, 1, 5, 0, toks, 0, 0);
    path_of(p, sizeof(p), "tok_v1.bin");
    CHECK(tokenizer_init(&t, p, err, sizeof(err)) == 0 && t.eot_token == 50256, "v1: eot %u err %s", t.eot_token, err);
    tokenizer_free(&t);

    write_tokenizer("tok_magic.bin", 20240329, 2, 5, 4, toks, 0, 0);
    expect_tok_error("tok_magic.bin", "tokenizer wrong magic");
    write_tokenizer("tok_version.bin", 20240328, 3, 5, 4, toks, 0, 0);
    expect_tok_error("tok_version.bin", "tokenizer wrong version");
    write_tokenizer("tok_trunc.bin", 20240328, 2, 5, 4, toks, 3, 0);
    expect_tok_error("tok_trunc.bin", "tokenizer truncated");
    write_tokenizer("tok_trail.bin", 20240328, 2, 5, 4, toks, 0, 2);
    expect_tok_error("tok_trail.bin", "tokenizer trailing bytes");
    const char* zero[2] = {"a", ""};
    write_tokenizer("tok_zero.bin", 20240328, 2, 2, 0, zero, 0, 0);
    expect_tok_error("tok_zero.bin", "tokenizer zero length");
    expect_tok_error("tok_missing.bin", "tokenizer missing file");
}

/* 1 if the n bytes at p are well-formed UTF-8 (RFC 3629) without ASCII
 * control bytes other than tab, newline, carriage return. An independent
 * decoder (code point ranges), not the stream's byte tables. */
static int valid_utf8_text(const unsigned char* p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) { if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return 0; i++; continue; }
        int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + (size_t)len > n) return 0;
        unsigned cp = c & (0x7F >> len);
        for (int k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        unsigned min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += (size_t)len;
    }
    return 1;
}

/* Print token ids through a Utf8Stream into a temp file; returns the bytes
 * (static buffer) and their count in *n. finish: call utf8_stream_finish. */
static const char* print_stream(const Tokenizer* t, const uint32_t* ids, int k, int finish, size_t* n) {
    static char got[1 << 20];
    char pp[512];
    path_of(pp, sizeof(pp), "utf8.txt");
    FILE* f = fopen(pp, "w+b");
    Utf8Stream s;
    utf8_stream_init(&s);
    for (int i = 0; i < k; i++) tokenizer_print_utf8(t, ids[i], &s, f);
    if (finish) utf8_stream_finish(&s, f);
    rewind(f);
    *n = fread(got, 1, sizeof(got) - 1, f);
    got[*n] = '\0';
    fclose(f);
    return got;
}

/* Samples print whole UTF-8 characters: tokens that split a character
 * (e with acute C3 A9, euro sign E2 82 AC, U+1F600 F0 9F 98 80), bytes that
 * cannot form a character, a control byte, a character left incomplete. */
static void test_utf8_stream(void) {
    const char* toks[14] = {"a", "\xC3", "\xA9" "b", "\xE2\x82", "\xAC", "\xF0", "\x9F\x98", "\x80 ", "\x80", "\x01",
                            "<|endoftext|>", "\xE0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80"};
    write_tokenizer("tok_utf8.bin", 20240328, 2, 14, 10, toks, 0, 0);
    char p[512], err[1024] = "";
    path_of(p, sizeof(p), "tok_utf8.bin");
    Tokenizer t;
    CHECK(tokenizer_init(&t, p, err, sizeof(err)) == 0, "utf8 tokenizer init: %s", err);
    if (!t.init_ok) return;
    size_t n;
    struct { uint32_t ids[16]; int k, finish; const char* want; const char* what; } c[] = {
        {{0, 1}, 2, 0, "a", "a character's first byte is held, not printed"},
        {{0, 1, 2}, 3, 1, "a\xC3\xA9" "b", "C3 | A9 b: printed once complete"},
        {{3, 4}, 2, 1, "\xE2\x82\xAC", "E2 82 | AC"},
        {{5, 6, 7}, 3, 1, "\xF0\x9F\x98\x80 ", "F0 | 9F 98 | 80 space"},
        {{1, 0}, 2, 1, "\xEF\xBF\xBD" "a", "C3 then 'a': U+FFFD, then a"},
        {{8, 0}, 2, 1, "\xEF\xBF\xBD" "a", "a lone continuation byte: U+FFFD"},
        {{0, 9, 0}, 3, 1, "aa", "a control byte is not printed"},
        {{0, 3}, 2, 1, "a\xEF\xBF\xBD", "E2 82 never completed: one U+FFFD at the end"},
        {{0, 3}, 2, 0, "a", "E2 82 held while the stream is open"},
        {{11}, 1, 1, "\xEF\xBF\xBD\xEF\xBF\xBD", "overlong E0 80: two U+FFFD"},
        {{12}, 1, 1, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", "surrogate ED A0 80: three U+FFFD"},
        {{13}, 1, 1, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", "above U+10FFFF: four U+FFFD"},
        {{10, 99, 1, 2}, 4, 1, "<|endoftext|>\xC3\xA9" "b", "eot, an invalid id (nothing), then C3 | A9 b"},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        const char* got = print_stream(&t, c[i].ids, c[i].k, c[i].finish, &n);
        CHECK(n == strlen(c[i].want) && memcmp(got, c[i].want, n) == 0, "utf8 stream, %s: got %zu bytes '%s'", c[i].what, n, got);
        if (c[i].finish) CHECK(valid_utf8_text((const unsigned char*)got, n), "utf8 stream, %s: output is not valid UTF-8 text", c[i].what);
    }
    tokenizer_free(&t);
    printf("  utf8 stream: %zu cases of split, ill-formed and incomplete characters\n", sizeof(c) / sizeof(c[0]));
}

/* real data made by dev/data/prepare.sh, when present */
static void test_real_data(void) {
    Tokenizer t;
    char err[1024] = "";
    if (access("data/gpt2_tokenizer.bin", R_OK) != 0) {
        printf("  skip: data/gpt2_tokenizer.bin not found (run: bash dev/data/prepare.sh)\n");
        return;
    }
    CHECK(tokenizer_init(&t, "data/gpt2_tokenizer.bin", err, sizeof(err)) == 0, "gpt2 tokenizer: %s", err);
    if (!t.init_ok) return;
    CHECK(t.vocab_size == 50257 && t.eot_token == 50256, "gpt2 vocab %u eot %u", t.vocab_size, t.eot_token);
    char hello[64];
    snprintf(hello, sizeof(hello), "%s%s", tokenizer_decode(&t, 15496), tokenizer_decode(&t, 995));
    CHECK(strcmp(hello, "Hello world") == 0, "[15496, 995] decodes to '%s'", hello);
    CHECK(strcmp(tokenizer_decode(&t, 50256), "<|endoftext|>") == 0, "50256 decodes to '%s'", tokenizer_decode(&t, 50256));
    int seen[256] = {0}, singles = 0;
    for (uint32_t i = 0; i < t.vocab_size; i++) {
        if (tokenizer_token_length(&t, i) == 1) { seen[(unsigned char)t.blob[t.offset[i]]]++; singles++; }
    }
    int all = singles == 256;
    for (int b = 0; b < 256; b++) all = all && seen[b] == 1;
    CHECK(all, "gpt2 tokenizer: %d single-byte tokens, expected each of the 256 bytes once", singles);
    printf("  gpt2 tokenizer: [15496, 995] -> '%s'\n", hello);
    /* every token once, then 20000 pseudo-random ids (many end inside a
       character): the stream writes valid UTF-8 text only */
    {
        static uint32_t ids[50257 + 20000];
        int k = 0;
        for (uint32_t i = 0; i < t.vocab_size && k < 50257; i++) ids[k++] = i;
        uint64_t x = 88172645463325252ULL;
        for (int i = 0; i < 20000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; ids[k++] = (uint32_t)(x % t.vocab_size); }
        size_t n;
        const char* got = print_stream(&t, ids, k, 1, &n);
        CHECK(n > 100000 && valid_utf8_text((const unsigned char*)got, n), "gpt2 tokens through the utf8 stream: %zu bytes, not valid UTF-8 text", n);
        int kept = 0; /* the stream must not drop the text: "Hello world" survives */
        uint32_t hw[2] = {15496, 995};
        got = print_stream(&t, hw, 2, 1, &n);
        kept = n == 11 && memcmp(got, "Hello world", 11) == 0;
        CHECK(kept, "gpt2 [15496, 995] through the utf8 stream: '%s'", got);
        printf("  gpt2 tokenizer: %d tokens through the utf8 stream give valid UTF-8 text\n", k);
    }

    if (access("data/brown/brown_train_000000.bin", R_OK) == 0) {
        DataLoader d;
        CHECK(dataloader_init(&d, "data/brown/brown_train_*.bin", 4, 64, 0, 1, 50257, err, sizeof(err)) == 0, "brown: %s", err);
        if (d.inputs != NULL) {
            CHECK(dataloader_next_batch(&d, err, sizeof(err)) == 0, "brown batch: %s", err);
            CHECK(d.inputs[0] == 50256, "brown shard must start with <|endoftext|>, got %d", d.inputs[0]);
            printf("  brown train: %zu tokens, %zu batches of 4x64; first 300 bytes:\n", d.num_tokens, dataloader_batches_per_epoch(&d));
            char text[512];
            size_t n = 0;
            for (int i = 0; i < 4 * 64 && n < 300; i++) {
                size_t L = tokenizer_token_length(&t, (uint32_t)d.inputs[i]);
                if (n + L > 300) break;
                memcpy(text + n, tokenizer_decode(&t, (uint32_t)d.inputs[i]), L);
                n += L;
            }
            text[n] = '\0';
            printf("%s\n", text);
            dataloader_free(&d);
        }
    }
    tokenizer_free(&t);
}

/* The evaluation's reader: sequences in file order across shards, the same
   for any B, and the sequence count; its errors. Shards of 100, 70, 33
   tokens with T = 8 hold floor(99/8) = 12, floor(69/8) = 8, floor(32/8) = 4
   sequences: 24 in all, sequence k of shard s starting at token k*8. */
static void test_read_seqs(void) {
    char pat[512], err[1024] = "";
    path_of(pat, sizeof(pat), "good_*.bin");
    const int T = 8;
    const size_t per[NSHARD] = {12, 8, 4};
    DataLoader a, b;
    CHECK(dataloader_init(&a, pat, 3, T, 0, 1, 65536, err, sizeof(err)) == 0, "read_seqs init B=3: %s", err);
    CHECK(dataloader_init(&b, pat, 1, T, 0, 1, 65536, err, sizeof(err)) == 0, "read_seqs init B=1: %s", err);
    CHECK(dataloader_num_seqs(&a) == 24 && dataloader_num_seqs(&b) == 24, "num_seqs %zu / %zu, expected 24 = 12 + 8 + 4",
          dataloader_num_seqs(&a), dataloader_num_seqs(&b));
    int bad = 0;
    for (size_t first = 0; first + 3 <= 24; first += 3) {   /* B=3 reads cross from shard 0 into 1 at 12 and 1 into 2 at 20 */
        if (dataloader_read_seqs(&a, first, 3, err, sizeof(err)) != 0) { bad++; continue; }
        for (int q = 0; q < 3; q++) {
            size_t k = first + (size_t)q;
            int s = 0;
            while (k >= per[s]) k -= per[s++];
            if (dataloader_read_seqs(&b, first + (size_t)q, 1, err, sizeof(err)) != 0) { bad++; continue; }
            for (int i = 0; i < T; i++) {
                int want_in = 10000 * (s + 1) + (int)k * T + i, want_tg = want_in + 1;
                if (a.inputs[q * T + i] != want_in || a.targets[q * T + i] != want_tg) bad++;
                if (b.inputs[i] != want_in || b.targets[i] != want_tg) bad++;
            }
        }
    }
    CHECK(bad == 0, "read_seqs: %d tokens differ from shard s token k*T+i = 10000(s+1)+k*T+i (B=3 and B=1)", bad);
    CHECK(dataloader_read_seqs(&a, 22, 2, err, sizeof(err)) == 0 && a.inputs[0] == 30000 + 16 && a.targets[2 * T - 1] == 30000 + 32,
          "read_seqs: the last two sequences are shard 2's tokens 16..32: %d .. %d", a.inputs[0], a.targets[2 * T - 1]);
    CHECK(dataloader_read_seqs(&a, 23, 2, err, sizeof(err)) == 1 && strstr(err, "holds only 24 sequences of T=8") && !strchr(err, '\n'),
          "read_seqs beyond the split: '%s'", err);
    CHECK(dataloader_read_seqs(&a, 0, 4, err, sizeof(err)) == 1 && strstr(err, "must be 1..B = 3"), "read_seqs n > B: '%s'", err);
    CHECK(a.current_shard == 0 && a.current_position == 0, "read_seqs moved the training position to %d %zu", a.current_shard, a.current_position);
    dataloader_free(&a); dataloader_free(&b);
}

/* Text given where token shards belong: named as text, with the tokenizer
   command; a shard's own header or binary bytes are not text. */
static void test_text_detection(void) {
    const char* prose = "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election "
                        "produced \"no evidence\" that any irregularities took place. Caf\xc3\xa9 \xe2\x80\x94 na\xc3\xafve.\n\n";
    char big[2048] = "";
    while (strlen(big) + strlen(prose) < sizeof(big)) strcat(big, prose);
    unsigned char hdr[16] = {0};
    put_le32(hdr, 20240520); put_le32(hdr + 4, 1); put_le32(hdr + 8, 100);
    CHECK(dl_looks_like_text_((const unsigned char*)big, strlen(big)) == 1, "ASCII + UTF-8 prose is text");
    CHECK(dl_looks_like_text_((const unsigned char*)"caf\xc3", 4) == 1, "UTF-8 cut by the buffer's end is still text");
    CHECK(dl_looks_like_text_(hdr, sizeof(hdr)) == 0, "a token shard's header is not text");
    CHECK(dl_looks_like_text_((const unsigned char*)"caf\xe9 latin-1", 12) == 0, "invalid UTF-8 (latin-1 0xe9) is not text");
    CHECK(dl_looks_like_text_((const unsigned char*)"ab\0cd", 5) == 0, "a NUL byte is not text");
    char p[512], err[1024] = "";
    path_of(p, sizeof(p), "prose.txt");
    FILE* f = fopen(p, "wb");
    if (f) { fwrite(big, 1, strlen(big), f); fclose(f); }
    DataLoader dl;
    CHECK(dataloader_init(&dl, p, 1, 8, 0, 1, 65536, err, sizeof(err)) == 1 && strstr(err, "it looks like text, not llm.c tokens") &&
          strstr(err, "node dev/data/tokenize.mjs --input ") && strstr(err, "prose.txt --out data/NAME/NAME") && !strchr(err, '\n'),
          "a text file as a shard: '%s'", err);
    printf("  ok-error (text): %s\n", err);
    path_of(p, sizeof(p), "short.txt");
    f = fopen(p, "wb");
    if (f) { fputs("hello world\n", f); fclose(f); }
    CHECK(dataloader_init(&dl, p, 1, 8, 0, 1, 65536, err, sizeof(err)) == 1 && strstr(err, "is 12 bytes of text, not llm.c tokens"),
          "a short text file: '%s'", err);
}

/* Shard switches per optimizer step (dataloader_set_step): shards of 100, 82
   and 50 tokens with T = 8 and a step of 4 sequences (32 tokens + 1) hold 3,
   2 and 1 whole steps; 82 and 50 also hold a further half step (2
   sequences: 17 tokens), which a loader that decided per global micro-batch
   read on 2 ranks x B=1 but not on 1 rank x B=4. Every layout of the step
   (ranks x B x micro-steps = 4) must read the same sequences step for step,
   in order and shuffled, and resume across layouts at a step boundary. */
#define SSHARD 3
static const size_t s_ntok[SSHARD] = {100, 82, 50};
static uint16_t s_tok[SSHARD][100];

/* Reads `steps` optimizer steps with the layout (R ranks, B, micro-steps A;
   R*B*A = 4) into seq[step*4 + k] = the first input token of the step's k-th
   sequence (micro-step, then rank, then b: the global order) and checks that
   each sequence's T inputs and targets are consecutive tokens of one shard.
   shuffle: seed 1337. From (epoch, shard, pos) if resume_shard >= 0. 0 on
   success; 1 with a CHECK failure. */
static int step_walk(const char* pat, int R, int B, int A, int shuffle, int steps, int* seq,
                     long long ep, int resume_shard, size_t resume_pos, long long* end_ep, int* end_shard, size_t* end_pos) {
    const int T = 8;
    char err[1024] = "";
    DataLoader dl[4];
    int bad = 0;
    for (int r = 0; r < R; r++) {
        CHECK(dataloader_init(&dl[r], pat, B, T, r, R, 65536, err, sizeof(err)) == 0, "step init R=%d B=%d: %s", R, B, err);
        dataloader_set_shuffle(&dl[r], shuffle, 1337);
        CHECK(dataloader_set_step(&dl[r], 4, err, sizeof(err)) == 0, "set_step(4) R=%d B=%d: %s", R, B, err);
        if (resume_shard >= 0) dataloader_resume(&dl[r], ep, resume_shard, resume_pos);
    }
    for (int st = 0; st < steps; st++) {
        int k = 0;
        for (int a = 0; a < A; a++) {
            for (int r = 0; r < R; r++) {
                if (dataloader_next_batch(&dl[r], err, sizeof(err)) != 0) { CHECK(0, "step %d R=%d: %s", st, R, err); bad = 1; break; }
                for (int b = 0; b < B; b++) {
                    const int* in = dl[r].inputs + b * T;
                    const int* tg = dl[r].targets + b * T;
                    for (int i = 0; i < T; i++) if (in[i] != in[0] + i || tg[i] != in[0] + i + 1) bad = 1;
                    seq[st * 4 + k++] = in[0];
                }
            }
        }
    }
    CHECK(!bad, "layout R=%d B=%d x %d: a sequence is not T+1 consecutive tokens", R, B, A);
    if (end_ep) { *end_ep = dl[0].epoch; *end_shard = dl[0].current_shard; *end_pos = dl[0].current_position; }
    for (int r = 1; r < R; r++)
        CHECK(dl[r].epoch == dl[0].epoch && dl[r].current_shard == dl[0].current_shard && dl[r].current_position == dl[0].current_position,
              "layout R=%d: rank %d's position differs from rank 0's", R, r);
    for (int r = 0; r < R; r++) dataloader_free(&dl[r]);
    return bad;
}

static void test_step_switch(void) {
    char pat[512], err[1024] = "";
    for (int s = 0; s < SSHARD; s++) {
        for (size_t i = 0; i < s_ntok[s]; i++) s_tok[s][i] = (uint16_t)(10000 * (s + 1) + i);
        char name[64];
        snprintf(name, sizeof(name), "step_%06d.bin", s);
        write_shard(name, s_tok[s], s_ntok[s], 20240520, 1, (int)s_ntok[s], 0);
    }
    path_of(pat, sizeof(pat), "step_*.bin");
    /* the layouts of a step of 4 sequences: ranks, B, micro-steps */
    const int L[5][3] = {{1, 4, 1}, {2, 2, 1}, {4, 1, 1}, {2, 1, 2}, {1, 1, 4}};
    enum { STEPS = 18 };                      /* 3 epochs of 3 + 2 + 1 steps */
    static int seq[2][5][STEPS * 4];
    for (int sh = 0; sh < 2; sh++) {
        for (int l = 0; l < 5; l++) step_walk(pat, L[l][0], L[l][1], L[l][2], sh, STEPS, seq[sh][l], 0, -1, 0, NULL, NULL, NULL);
        for (int l = 1; l < 5; l++)
            CHECK(memcmp(seq[sh][l], seq[sh][0], sizeof(seq[sh][0])) == 0, "%s: %d ranks x B=%d x %d micro-steps read other sequences than "
                  "1 rank x B=4 (steps of 4 sequences over shards of 100, 82, 50 tokens)", sh ? "shuffled" : "in order", L[l][0], L[l][1], L[l][2]);
    }
    /* in order: steps at shard 0 tokens 0, 32, 64; shard 1 0, 32; shard 2 0; then again */
    int bad = 0;
    const int starts[6][2] = {{0, 0}, {0, 32}, {0, 64}, {1, 0}, {1, 32}, {2, 0}};
    for (int st = 0; st < STEPS; st++)
        for (int k = 0; k < 4; k++)
            if (seq[0][0][st * 4 + k] != 10000 * (starts[st % 6][0] + 1) + starts[st % 6][1] + 8 * k) bad++;
    CHECK(bad == 0, "in order: %d sequences are not the steps at (shard, token) (0,0) (0,32) (0,64) (1,0) (1,32) (2,0)", bad);
    /* shuffled: each epoch reads 12 + 8 + 4 distinct sequences, whole steps from one shard */
    bad = 0;
    for (int e = 0; e < 3; e++) {
        int count[SSHARD] = {0, 0, 0};
        for (int st = e * 6; st < e * 6 + 6; st++) {
            int sh = seq[1][0][st * 4] / 10000 - 1;
            for (int k = 0; k < 4; k++) {
                int v = seq[1][0][st * 4 + k];
                if (v / 10000 - 1 != sh || (v % 10000) % 8 != 0) bad++;
                for (int j = e * 24; j < st * 4 + k; j++) if (seq[1][0][j] == v) bad++;
                count[sh]++;
            }
        }
        if (count[0] != 12 || count[1] != 8 || count[2] != 4) bad++;
    }
    CHECK(bad == 0, "shuffled: an epoch is not 12 + 8 + 4 distinct sequences in whole steps of one shard (%d)", bad);
    /* resume: 4 ranks stop after step 4 (epoch 0, in shard 1); 2 ranks x 2 micro-steps and 1 rank x B=4 go on */
    for (int sh = 0; sh < 2; sh++) {
        long long ep; int shard; size_t pos;
        int first[4 * 4], rest[2][(STEPS - 4) * 4];
        step_walk(pat, 4, 1, 1, sh, 4, first, 0, -1, 0, &ep, &shard, &pos);
        step_walk(pat, 2, 1, 2, sh, STEPS - 4, rest[0], ep, shard, pos, NULL, NULL, NULL);
        step_walk(pat, 1, 4, 1, sh, STEPS - 4, rest[1], ep, shard, pos, NULL, NULL, NULL);
        CHECK(memcmp(rest[0], seq[sh][0] + 16, sizeof(rest[0])) == 0 && memcmp(rest[1], seq[sh][0] + 16, sizeof(rest[1])) == 0,
              "%s: resumed after step 4 of 4 ranks (epoch %lld shard %d token %zu) on 2 ranks x 2 micro-steps / 1 rank, the next %d steps differ",
              sh ? "shuffled" : "in order", ep, shard, pos, STEPS - 4);
    }
    /* batches per epoch: 6 steps of 4 sequences = 6 global micro-batches of 4, 12 of 2, 24 of 1 */
    DataLoader a, b;
    CHECK(dataloader_init(&a, pat, 1, 8, 0, 2, 65536, err, sizeof(err)) == 0 && dataloader_set_step(&a, 4, err, sizeof(err)) == 0, "%s", err);
    CHECK(dataloader_batches_per_epoch(&a) == 12, "batches per epoch of 2 ranks x B=1, steps of 4: %zu, expected 12", dataloader_batches_per_epoch(&a));
    /* errors: a step not a multiple of ranks x B; a shard smaller than a step (50 < 6 x 8 + 1) */
    CHECK(dataloader_set_step(&a, 3, err, sizeof(err)) == 1 && strstr(err, "3 sequences is not a positive multiple of num_ranks*B = 2*1 = 2") && !strchr(err, '\n'),
          "set_step(3) on 2 ranks x B=1: '%s'", err);
    printf("  ok-error (step not a multiple): %s\n", err);
    CHECK(dataloader_set_step(&a, 6, err, sizeof(err)) == 0, "set_step(6): 6 x 8 + 1 = 49 tokens fit the 50 of the smallest shard: '%s'", err);
    CHECK(dataloader_set_step(&a, 8, err, sizeof(err)) == 1 && strstr(err, "step_000002.bin has 50 tokens, fewer than one optimizer step (-d) of 8 sequences of T=8 plus the last target = 65")
          && !strchr(err, '\n'), "set_step(8): '%s'", err);
    printf("  ok-error (shard smaller than a step): %s\n", err);
    CHECK(a.step_seqs == 6, "a refused set_step changed the step to %zu (expected the last good one, 6)", a.step_seqs);
    /* the default (no set_step) is one global micro-batch per step: the old behaviour */
    CHECK(dataloader_init(&b, pat, 1, 8, 0, 2, 65536, err, sizeof(err)) == 0 && b.step_seqs == 2, "default step %zu, expected 2", b.step_seqs);
    dataloader_free(&a); dataloader_free(&b);
    printf("  step switch: 5 layouts of a 4-sequence step read the same %d steps (in order and shuffled), resume 4 ranks -> 2 / 1 alike\n", STEPS);
}

int main(void) {
    const char* tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof(g_dir), "%s/test_dataloader_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(g_dir) == NULL) { perror("mkdtemp"); return 2; }
    printf("test_dataloader: temp dir %s\n", g_dir);
    make_good_shards();
    test_batches();
    test_shuffle();
    test_dataloader_errors();
    test_read_seqs();
    test_step_switch();
    test_text_detection();
    test_tokenizer();
    test_utf8_stream();
    test_real_data();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) printf("  note: could not remove %s\n", g_dir);
    return check_summary();
}
