/*
 state.h: the training state beside a model checkpoint, so that a run can
 stop anywhere and resume exactly, with any rank count and ZeRO stage.

 What a resume needs beyond the weights (which model_%08d.bin holds, in
 llm.c's format, see checkpoint.h): the optimizer step, the Adam moments m
 and v, and where the train data loader stands. None of it depends on the
 world size: m and v are stored whole, in the checkpoint's tensor-major
 order, and the data position is the global token position of the next
 global micro-batch, identical on every rank.

 File state_%08d.bin (little-endian, the host order of every machine the
 trainer runs on). Header: 128 int64 words = 1024 bytes:
   [0]  20240612 (STATE_MAGIC)           [1]  1 (STATE_VERSION)
   [2]  step: optimizer steps completed  [3]  num_parameters (Psi, unpadded)
   [4]  max_seq_len  [5] vocab_size  [6] padded_vocab_size
   [7]  num_layers   [8] num_heads   [9] channels        (the model config)
   [10] data current_shard   [11] data current_position (token index in
        that shard where the next global micro-batch starts: the train
        loader at the step boundary, the same on every rank)
   [12] train shards and [13] train tokens the position refers to (a resume
        with other train data is refused)
   [14] seed (--seed)
   [15], [16] 0 (files written before the state became stage- and
        world-size-independent byte for byte hold the writer's zero_stage
        and world size there; they are ignored)
   [17] has_master: 1 if the fp32 master weights follow v
   [18] shuffle: 1 if the train loader reads in a seeded random order
        (--shuffle; its seed is [14]), 0 in file order
   [19] epoch: passes over the train shards completed (with [10], [11] the
        whole loader position; shuffled, [11] counts the tokens of the
        shard's permuted sequences consumed)
   [20] the run's optimizer steps (-x: the lr schedule's horizon),
   [21] warmup steps (-u), [22] peak lr (-l) and [23] final lr fraction (-q)
        as the bits of their float32 values, [24] tokens per optimizer step
        (the global batch: ranks x B x T x micro-steps), [25] T: what a
        resume compares with its own flags to say what changed (0 in older
        files: not known)
   [26] the matmul paths the run took (STATE_PATHS_*: 0 not recorded, in
        older files; else bit 20 set, bit 19 for the bf16 program, and bit k
        for each class k of llmc/cpu/matmul.h on oneDNN's bf16 primitive
        rather than the fp32-copy path): a resume that takes other paths
        says so (the numbers from there on are not bitwise an uninterrupted
        run's)
   [27..127] 0 (reserved; a file of the first layout, with 0 at [18], [19],
        reads as unshuffled, epoch 0)
 Nothing in the file depends on the ZeRO stage or the rank count: at one
 rank count, runs at stages 0-3 write byte-identical states (and model
 files); across rank counts with the same global batch the header is the
 same and m, v agree to the last bits of the sums (another batch split).
 Then fp32 arrays of num_parameters elements each, in checkpoint order
 (gpt2_checkpoint_order: wte, wpe, ln1w[L], ..., fcprojb[L], lnfw, lnfb):
   Adam m at byte 1024, Adam v at 1024 + 4 Psi, and if has_master the fp32
   master weights at 1024 + 8 Psi. Element i of tensor t therefore sits at
   the same offset as in an fp32 model checkpoint, plus 0, 4 Psi or 8 Psi.
 File size = 1024 + 4 Psi (2 + has_master).

 Master weights: not stored beside an fp32 (version 3) model checkpoint:
 that file is written from the fp32 master copy when one exists (else from
 the fp32 params), so it already holds the master weights exactly, and the
 resume loads them from it (gpt2_load_checkpoint sets the params and the
 master copy). Beside a bf16 (version 5) model file, which holds them
 rounded, they are stored (--checkpoint-dtype bf16 sets with_master); so
 does LLMC_STATE_MASTER=1 (to test the code path). A resume then takes the
 weights from the state file, exactly.

 Writing (state_save, collective): like checkpoint.h. Rank 0 creates
 <path>.tmp with the header and its full size; every rank pwrite(2)s the
 elements of its OWN shard (zero_own_range) of m and v (and master) at their
 file offsets and fsyncs; only when every rank succeeded does rank 0 rename
 it to <path> (and fsync the directory). A failure (e.g. a full disk: EFBIG,
 ENOSPC) is one error line on every rank's behalf and removes the .tmp; the
 previous complete checkpoint is untouched.
 Reading (state_load, local): each rank preads the elements of its HELD
 range of the optimizer buffers (zero_held_range(ZB_OPT): everything at
 stage 0, the own shard at stages 1-3). So a state saved with N ranks at
 stage s resumes with M ranks at stage t.

 Resume (state_resume, collective, flag -y 1): in the -o directory the
 latest step S for which both model_S.bin and state_S.bin exist (never a
 .tmp) is loaded: weights from the former, m, v, step and data position from
 the latter; training continues at step S+1. With none, training starts
 fresh (one line says so). After a resume with another world size the loader
 continues at the same token; only where a shard ends can the two runs
 differ (a global micro-batch of another size fits there or not).

 Test hooks (environment): LLMC_TEST_DIE_IN_SAVE=S makes rank 1 (rank 0 on
 one rank) _exit(3) in the middle of writing state_S.bin.tmp (m written, v
 not); LLMC_TEST_PAUSE_IN_SAVE=SECONDS makes every rank pause that long at
 the same point of every state write (a second Ctrl-C then finds the .tmp
 in progress, interrupt.h); LLMC_LOG_POSITIONS=1 makes rank 0 print the data position of every
 training micro-step (state_log_position).
*/
#ifndef LLMC_STATE_H
#define LLMC_STATE_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpt.h"
#include "checkpoint.h"
#include "dataloader.h"

#define STATE_MAGIC 20240612
#define STATE_VERSION 1
#define STATE_HEADER_BYTES 1024
#define STATE_HEADER_WORDS 128

/* What a run records about its schedule and batch (header words 20..25),
   so that a resume can say what changed. */
typedef struct {
    int max_steps, warmup;        /* -x, -u */
    float lr, final_frac;         /* -l, -q */
    long long tokens_per_step;    /* ranks x B x T x micro-steps */
    int seq_len;                  /* T */
    long long kernel_paths;       /* the matmul paths (header word 26: STATE_PATHS_RECORDED | STATE_PATHS_BF16 | bit k = class k on the primitive; 0: not recorded) */
} StateRun;
#define STATE_PATHS_RECORDED (1LL << 20)
#define STATE_PATHS_BF16 (1LL << 19)

static inline int64_t state_float_word(float f) { uint32_t u; memcpy(&u, &f, 4); return (int64_t)u; }
static inline float state_word_float(int64_t w) { uint32_t u = (uint32_t)w; float f; memcpy(&f, &u, 4); return f; }

typedef struct {
    long long step;
    long long num_parameters;
    GPT2Config config;
    long long data_shard, data_position;
    long long data_num_shards, data_num_tokens;
    unsigned long long seed;
    int has_master;
    int shuffle;
    long long epoch;
    StateRun run;                 /* the saved run's schedule and batch (0: not recorded) */
} TrainState;

/* Byte offset of element 0 of every plan tensor in the m section: the
   same as in an fp32 model checkpoint (both headers are 1024 bytes). */
static inline void state_tensor_offsets(const GPT2Layout* c, const ZeroPlan* P, long long* out) {
    gpt2_checkpoint_offsets(c, P, out);
}

/* Psi of a config, computed as the model does (no plan needed). -1 when the
   config is not valid. */
static inline long long state_config_parameters(const GPT2Config* c) {
    if (gpt2_config_check(c, "state", NULL, 0)) return -1;
    return gpt2_count_parameters(c);
}

/* pread of exactly n bytes (loops over short reads). 0, or -1 with errno
   (0 for a read that met the end of the file). pwrite_all: checkpoint.h. */
static inline int state_pread_all(int fd, void* p, size_t n, long long off) {
    char* c = (char*)p;
    while (n > 0) {
        ssize_t r = pread(fd, c, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { if (r == 0) errno = 0; return -1; }
        c += r; off += r; n -= (size_t)r;
    }
    return 0;
}

/* Read and validate the header of a state file: magic, version, a valid
   config whose Psi equals num_parameters, sane fields, and the exact file
   size. Local (no MPI). 0, or 1 with one line in err naming the file. */
static inline int state_read_header(const char* path, TrainState* s, char* err, size_t errlen) {
    memset(s, 0, sizeof(*s));
    int fd = open(path, O_RDONLY);
    if (fd < 0) return set_err(err, errlen, "state %s: cannot open (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return set_err(err, errlen, "state %s: not a regular file", path); }
    long long fsz = (long long)st.st_size;
    int64_t h[STATE_HEADER_WORDS];
    int rc = state_pread_all(fd, h, sizeof(h), 0);
    close(fd);
    if (rc) return set_err(err, errlen, "state %s: file is %lld bytes, shorter than the %d-byte header", path, fsz, STATE_HEADER_BYTES);
    if (h[0] != STATE_MAGIC) return set_err(err, errlen, "state %s: bad magic %lld (expected %d, a training state file)", path, (long long)h[0], STATE_MAGIC);
    if (h[1] != STATE_VERSION) return set_err(err, errlen, "state %s: unsupported version %lld (expected %d)", path, (long long)h[1], STATE_VERSION);
    for (int i = 4; i <= 9; i++)
        if (h[i] < 1 || h[i] > 100000000) return set_err(err, errlen, "state %s: header word %d (model config) is %lld, not a valid size", path, i, (long long)h[i]);
    GPT2Config* c = &s->config;
    c->max_seq_len = (int)h[4]; c->vocab_size = (int)h[5]; c->padded_vocab_size = (int)h[6];
    c->num_layers = (int)h[7]; c->num_heads = (int)h[8]; c->channels = (int)h[9];
    char cerr[ERRLEN];
    if (gpt2_config_check(c, "config", cerr, sizeof(cerr))) return set_err(err, errlen, "state %s: %s", path, cerr);
    long long psi = state_config_parameters(c);
    if (h[3] != psi) return set_err(err, errlen, "state %s: num_parameters %lld does not match its config (L=%d C=%d Vp=%d maxT=%d: %lld)", path,
                                    (long long)h[3], c->num_layers, c->channels, c->padded_vocab_size, c->max_seq_len, psi);
    if (h[2] < 0 || h[2] > (1LL << 30)) return set_err(err, errlen, "state %s: step %lld out of range", path, (long long)h[2]);
    if (h[12] < 1 || h[13] < 1 || h[10] < 0 || h[10] >= h[12] || h[11] < 0 || h[11] > h[13])
        return set_err(err, errlen, "state %s: data position (shard %lld, token %lld of %lld shards, %lld tokens) is invalid", path,
                       (long long)h[10], (long long)h[11], (long long)h[12], (long long)h[13]);
    if (h[20] < 0 || h[20] > (1LL << 30) || h[21] < 0 || h[21] > (1LL << 30) || h[24] < 0 || h[25] < 0 || h[25] > 100000000)
        return set_err(err, errlen, "state %s: run record (steps %lld, warmup %lld, tokens per step %lld, T %lld) is invalid", path,
                       (long long)h[20], (long long)h[21], (long long)h[24], (long long)h[25]);
    if (h[26] != 0 && (!(h[26] & STATE_PATHS_RECORDED) || h[26] >= 2 * STATE_PATHS_RECORDED || (h[26] & (STATE_PATHS_BF16 - 1) && !(h[26] & STATE_PATHS_BF16))))
        return set_err(err, errlen, "state %s: header word 26 (the matmul paths) is %lld, not a record of them", path, (long long)h[26]);
    if (h[17] != 0 && h[17] != 1) return set_err(err, errlen, "state %s: has_master flag %lld must be 0 or 1", path, (long long)h[17]);
    if (h[18] != 0 && h[18] != 1) return set_err(err, errlen, "state %s: shuffle flag %lld must be 0 or 1", path, (long long)h[18]);
    if (h[19] < 0 || h[19] > (1LL << 40)) return set_err(err, errlen, "state %s: data epoch %lld out of range", path, (long long)h[19]);
    long long expect = STATE_HEADER_BYTES + 4LL * psi * (2 + h[17]);
    if (fsz != expect) return set_err(err, errlen, "state %s: %lld bytes, but its header (%lld parameters, m, v%s) implies %lld", path, fsz,
                                      psi, h[17] ? ", master" : "", expect);
    s->step = h[2]; s->num_parameters = h[3];
    s->data_shard = h[10]; s->data_position = h[11]; s->data_num_shards = h[12]; s->data_num_tokens = h[13];
    s->seed = (unsigned long long)h[14]; s->has_master = (int)h[17];
    s->shuffle = (int)h[18]; s->epoch = h[19];
    s->run.max_steps = (int)h[20]; s->run.warmup = (int)h[21];
    s->run.lr = state_word_float(h[22]); s->run.final_frac = state_word_float(h[23]);
    s->run.tokens_per_step = h[24]; s->run.seq_len = (int)h[25];
    s->run.kernel_paths = h[26];
    return 0;
}

/* Load a state file into the model on this rank: validates the header and
   that its config equals m->config, then reads m and v of the rank's held
   optimizer range (and, if stored, the master weights: params and master of
   every held range), checking that m is finite and v finite and >= 0.
   Local (no MPI): the caller makes the error collective (comm_check_all).
   0, or 1 with one line in err naming the file. */
static inline int state_load(GPT2* m, const char* path, TrainState* s, char* err, size_t errlen) {
    if (state_read_header(path, s, err, errlen)) return 1;
    const GPT2Config* a = &s->config; const GPT2Config* b = &m->config;
    char diff[512];
    if (gpt2_config_diff(a, b, "the state", "the model", diff, sizeof(diff)))
        return set_err(err, errlen, "state %s: model config does not match the model: %s", path, diff);
    const ZeroPlan* P = &m->plan;
    if ((long long)P->num_parameters != s->num_parameters)
        return set_err(err, errlen, "state %s: %lld parameters, the model has %zu", path, s->num_parameters, P->num_parameters);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return set_err(err, errlen, "state %s: cannot open (%s)", path, strerror(errno));
    long long* offs = (long long*)malloc_or_die((size_t)P->num_tensors * sizeof(long long), "state offsets");
    state_tensor_offsets(&m->layout, P, offs);
    size_t maxsz = 0;
    for (int t = 0; t < P->num_tensors; t++) if (P->tensors[t].size > maxsz) maxsz = P->tensors[t].size;
    float* buf = (float*)malloc_or_die(maxsz * sizeof(float), "state buffer");
    long long psi4 = 4LL * s->num_parameters;
    int rc = 0;
    for (int t = 0; t < P->num_tensors && !rc; t++) {
        int u = P->tensors[t].unit;
        size_t lo, hi, x;
        zero_held_range(P, ZB_OPT, u, &lo, &hi);
        size_t n = zero_tensor_overlap(P, t, lo, hi, &x);
        if (!n) continue;
        size_t first = x - P->tensors[t].offset;
        for (int which = 0; which < 2 && !rc; which++) {
            long long off = offs[t] + which * psi4 + 4LL * (long long)first;
            if (state_pread_all(fd, buf, n * sizeof(float), off)) {
                rc = set_err(err, errlen, "state %s: read of adam %c, tensor %s failed at byte %lld (%s)", path, which ? 'v' : 'm',
                             P->tensors[t].name, off, errno ? strerror(errno) : "end of file");
                break;
            }
            for (size_t i = 0; i < n; i++)
                if (!isfinite(buf[i]) || (which == 1 && buf[i] < 0.0f)) {
                    rc = set_err(err, errlen, "state %s: adam %c of tensor %s element %zu is %g (must be finite%s)", path, which ? 'v' : 'm',
                                 P->tensors[t].name, first + i, (double)buf[i], which ? " and >= 0" : "");
                    break;
                }
            if (!rc) zero_opt_set(&m->engine, which ? ZO_V : ZO_M, u, x, buf, n);
        }
    }
    for (int t = 0; t < P->num_tensors && !rc && s->has_master; t++) {
        size_t n = P->tensors[t].size;
        long long off = offs[t] + 2 * psi4;
        if (state_pread_all(fd, buf, n * sizeof(float), off)) {
            rc = set_err(err, errlen, "state %s: read of master weights, tensor %s failed at byte %lld (%s)", path, P->tensors[t].name, off,
                         errno ? strerror(errno) : "end of file");
            break;
        }
        for (size_t i = 0; i < n && !rc; i++)
            if (!isfinite(buf[i])) rc = set_err(err, errlen, "state %s: master weight of tensor %s element %zu is not finite", path, P->tensors[t].name, i);
        if (!rc) gpt2_set_tensor(m, t, buf);
    }
    close(fd);
    free(buf); free(offs);
    return rc;
}

/* Test hook: the step at which rank 1 dies inside state_save, or -1. */
static inline long state_test_die_step(void) {
    const char* e = getenv("LLMC_TEST_DIE_IN_SAVE");
    long v;
    if (!e || parse_long(e, &v)) return -1;
    return v;
}

/* Collective: write the training state of optimizer step `step` (steps
   completed) to `path`, atomically (see the top comment). train is the
   train loader at the step boundary; seed and the run's schedule and batch
   (run) are recorded. with_master = 1 (or
   LLMC_STATE_MASTER=1) stores the fp32 master weights too: needed for an
   exact resume when the model file beside it is bf16 (version 5). On failure every
   rank exits with one message (comm_check_all); the previous file at path,
   if any, is untouched and no .tmp is left behind. Collective over the
   writers w (checkpoint.h's CkptWriters; NULL: every rank, the normal
   write; a rescue's: one shard group, whose errors end only its ranks). */
static inline void state_save(GPT2* m, const char* path, int step, const DataLoader* train, unsigned long long seed, int with_master,
                              const StateRun* run, CkptWriters* w) {
    Comm* c = m->comm;
    const ZeroPlan* P = &m->plan;
    char err[ERRLEN] = "";
    const char* me = getenv("LLMC_STATE_MASTER");
    int has_master = with_master || (me && me[0] == '1');
    long long psi = (long long)P->num_parameters;
    /* the data position must agree on every rank (it is global); whether
       the masters are stored is agreed (any rank's LLMC_STATE_MASTER=1
       stores them on every rank: the file's layout is one decision) */
    long long pos[4] = {train->current_shard, (long long)train->current_position, train->epoch, has_master}, lo[4], hi[4];
    if (w && w->rescue) {
        if (ckpt_rescue_allreduce(w, pos, lo, 4, MPI_LONG_LONG, MPI_MIN) || ckpt_rescue_allreduce(w, pos, hi, 4, MPI_LONG_LONG, MPI_MAX)) {
            fprintf(stderr, "error (rank %d): rescue: the state's data-position check: a rank of the shard group did not answer within %.0f s: "
                    "nothing written by this group\n", c->rank, w->timeout_s);
            fflush(stderr);
            _exit(1);
        }
    } else {
        MPI_Request rq[2];
        MPI_Iallreduce(pos, lo, 4, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD, &rq[0]);
        MPI_Iallreduce(pos, hi, 4, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, &rq[1]);
        comm_wait_request(&rq[0], 0, "the state's data-position check");
        comm_wait_request(&rq[1], 0, "the state's data-position check");
    }
    has_master = (int)hi[3];
    long long total = STATE_HEADER_BYTES + 4LL * psi * (2 + has_master);
    if (lo[0] != hi[0] || lo[1] != hi[1] || lo[2] != hi[2])
        set_err(err, ERRLEN, "state %s: the ranks' data positions differ (shard %lld..%lld, token %lld..%lld, epoch %lld..%lld)", path, lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]);
    int64_t h[STATE_HEADER_WORDS];
    memset(h, 0, sizeof(h));
    const GPT2Config* g = &m->config;
    h[0] = STATE_MAGIC; h[1] = STATE_VERSION; h[2] = step; h[3] = psi;
    h[4] = g->max_seq_len; h[5] = g->vocab_size; h[6] = g->padded_vocab_size;
    h[7] = g->num_layers; h[8] = g->num_heads; h[9] = g->channels;
    h[10] = train->current_shard; h[11] = (int64_t)train->current_position;
    h[12] = train->num_shards; h[13] = (int64_t)train->num_tokens;
    h[14] = (int64_t)seed; h[17] = has_master;
    h[18] = train->shuffle; h[19] = train->epoch;
    h[20] = run->max_steps; h[21] = run->warmup; h[22] = state_float_word(run->lr); h[23] = state_float_word(run->final_frac);
    h[24] = run->tokens_per_step; h[25] = run->seq_len; h[26] = run->kernel_paths;
    CollectiveFile f;
    cfile_begin(&f, c, w, "state", path, h, sizeof(h), total, err);
    long long* offs = (long long*)malloc_or_die((size_t)P->num_tensors * sizeof(long long), "state offsets");
    state_tensor_offsets(&m->layout, P, offs);
    size_t maxsz = 0;
    for (int t = 0; t < P->num_tensors; t++) if (P->tensors[t].size > maxsz) maxsz = P->tensors[t].size;
    float* buf = (float*)malloc_or_die(maxsz * sizeof(float), "state buffer");
    int die = state_test_die_step() == step && c->rank == (c->world_size > 1 ? 1 : 0);
    for (int which = 0; which < 2 + has_master && cfile_ok(&f); which++) {
        if (which == 1 && die) {
            fprintf(stderr, "test hook LLMC_TEST_DIE_IN_SAVE: rank %d exits while writing %s\n", c->rank, f.tmp);
            fflush(stderr);
            _exit(3);
        }
        if (which == 1 && getenv("LLMC_TEST_PAUSE_IN_SAVE")) {   /* the second-signal test: a signal lands mid-write */
            double secs = atof(getenv("LLMC_TEST_PAUSE_IN_SAVE")), t0 = wall_seconds();
            fprintf(stderr, "test hook LLMC_TEST_PAUSE_IN_SAVE: rank %d pauses %.1f s while writing %s\n", c->rank, secs, f.tmp);
            fflush(stderr);
            while (wall_seconds() - t0 < secs) { struct timespec ts = {0, 10000000}; nanosleep(&ts, NULL); }
        }
        for (int t = 0; t < P->num_tensors && cfile_ok(&f) && f.w->writes; t++) {  /* HSDP: one group writes (a rescue: its group) */
            int u = P->tensors[t].unit;
            size_t lo_, hi_, x, first = 0, n;
            if (which < 2) {
                zero_own_range(P, u, &lo_, &hi_);
                n = zero_tensor_overlap(P, t, lo_, hi_, &x);
                if (!n) continue;
                first = x - P->tensors[t].offset;
                zero_opt_get(&m->engine, which ? ZO_V : ZO_M, u, x, buf, n);
            } else {
                n = gpt2_get_own(m, t, buf, &first);
                if (!n) continue;
            }
            cfile_write(&f, buf, n * sizeof(float), offs[t] + which * 4LL * psi + 4LL * (long long)first);
        }
    }
    free(buf); free(offs);
    cfile_commit(&f);
}

/* Is name exactly "<prefix>%08d.bin" (8 to 10 digits as printf writes a
   step < 2^31 with %08d, nothing after: a .tmp never matches)? Sets *step. */
static inline int state_match_name(const char* name, const char* prefix, long* step) {
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0) return 0;
    const char* d = name + pl;
    int nd = 0;
    long v = 0;
    while (d[nd] >= '0' && d[nd] <= '9' && nd < 10) { v = v * 10 + (d[nd] - '0'); nd++; }
    if (nd < 8 || strcmp(d + nd, ".bin") != 0) return 0;
    if (nd > 8 && d[0] == '0') return 0; /* %08d pads to 8 digits only */
    if (v > 0x7fffffffL) return 0;
    *step = v;
    return 1;
}

/* The latest step S in dir for which dir/model_S.bin and dir/state_S.bin
   both exist as regular files (%08d; a .tmp never counts): *step = S, or
   -1 if there is none. Local. 0, or 1 with err if dir cannot be read. */
static inline int state_find_latest(const char* dir, long* step, char* err, size_t errlen) {
    *step = -1;
    DIR* d = opendir(dir);
    if (!d) return set_err(err, errlen, "-y 1: cannot read the output directory %s (%s)", dir, strerror(errno));
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        long s;
        if (!state_match_name(e->d_name, "state_", &s) || s <= *step) continue;
        char p[4096];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        snprintf(p, sizeof(p), "%s/model_%08ld.bin", dir, s);
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        *step = s;
    }
    closedir(d);
    return 0;
}

/* Collective (-y 1): find the latest complete checkpoint in dir (rank 0
   looks, the step is broadcast), load the weights from model_S.bin, m, v
   from state_S.bin, seek the train loader to the saved data position.
   Returns S, the optimizer steps already done, with the loaded header in
   *saved (the caller compares the saved run's schedule and batch with its
   own, saved->run) and what was loaded in `said` (one or two lines, for the
   caller to print with its banner; "starting fresh" when dir holds no
   checkpoint, and then saved->step = -1). Every error (a corrupt or
   mismatched file, other train data, S > max_steps) ends every rank with
   one line. */
static inline int state_resume(GPT2* m, DataLoader* train, const char* dir, int max_steps, TrainState* saved, char* said, size_t saidlen) {
    Comm* c = m->comm;
    char err[ERRLEN] = "";
    long step = -1;
    memset(saved, 0, sizeof(*saved));
    saved->step = -1;
    said[0] = 0;
    if (c->rank == 0) state_find_latest(dir, &step, err, ERRLEN);
    comm_check_all(c, err);
    MPI_Request rq;
    MPI_Ibcast(&step, 1, MPI_LONG, 0, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "resume: the step broadcast");
    if (step < 0) {
        snprintf(said, saidlen, "resume: no complete checkpoint (model_*.bin with state_*.bin) in %s, starting fresh\n", dir);
        return 0;
    }
    char mp[4096], sp[4096];
    snprintf(mp, sizeof(mp), "%s/model_%08ld.bin", dir, step);
    snprintf(sp, sizeof(sp), "%s/state_%08ld.bin", dir, step);
    if (step > max_steps) set_err(err, ERRLEN, "-y 1: the latest checkpoint %s is at step %ld, beyond -x %d", sp, step, max_steps);
    comm_check_all(c, err);
    GPT2Config fc;
    int fv;
    char diff[512];
    if (gpt2_read_checkpoint_header(mp, &fc, &fv, err, ERRLEN) == 0 &&
        gpt2_config_diff(&fc, &m->config, "the checkpoint", "this run's model", diff, sizeof(diff)))
        set_err(err, ERRLEN, "-y 1: %s does not match the model: %s; leave out -e and the size flags "
                "(--layers --heads --channels --max-seq-len --vocab): -y 1 then takes them from the checkpoint", mp, diff);
    if (!err[0]) gpt2_load_checkpoint(m, mp, err, ERRLEN);
    comm_check_all(c, err);
    TrainState s;
    if (!state_load(m, sp, &s, err, ERRLEN)) {
        if (s.step != step) set_err(err, ERRLEN, "state %s: its header says step %lld", sp, s.step);
        else if (s.data_num_shards != train->num_shards || s.data_num_tokens != (long long)train->num_tokens)
            set_err(err, ERRLEN, "state %s: saved for train data of %lld tokens in %lld shard(s), but -i matches %zu tokens in %d shard(s)", sp,
                    s.data_num_tokens, s.data_num_shards, train->num_tokens, train->num_shards);
        else if (s.data_position > (long long)train->shard_ntok[s.data_shard])
            set_err(err, ERRLEN, "state %s: data position %lld beyond the %zu tokens of shard %lld", sp, s.data_position, train->shard_ntok[s.data_shard], s.data_shard);
    }
    comm_check_all(c, err);
    /* the data order continues as saved: the state's seed, epoch, shard, position */
    if (train->shuffle) dataloader_set_shuffle(train, 1, s.seed);
    dataloader_resume(train, s.epoch, (int)s.data_shard, (size_t)s.data_position);
    size_t n = (size_t)snprintf(said, saidlen, "resumed from step %ld: %s and %s%s, data at epoch %lld shard %lld token %lld%s\n", step, mp, sp,
                                s.has_master ? " (with master weights)" : "", s.epoch, s.data_shard, s.data_position, s.shuffle ? " (shuffled)" : "");
    if (s.shuffle != train->shuffle && n < saidlen)
        snprintf(said + n, saidlen - n, "note: the state was written with --shuffle %d, this run has --shuffle %d: the data order changes from here on\n",
                 s.shuffle, train->shuffle);
    *saved = s;
    return (int)step;
}

/* Debug (LLMC_LOG_POSITIONS=1): rank 0 prints where the global micro-batch
   that the next dataloader_next_batch reads starts, one line per micro-step:
   "data position: step S micro K shard H start P tokens M" (M = global
   micro-batch in tokens, the next read covers tokens [P, P+M) of shard H
   plus one target token); shuffled, "data position: step S micro K epoch E
   shard H starts P1,P2,... T t" (the first token of each of its sequences,
   rank 0's first). Call it just before dataloader_next_batch. */
static inline void state_log_position(DataLoader* dl, int step, int micro) {
    static int enabled = -1;
    if (enabled < 0) { const char* e = getenv("LLMC_LOG_POSITIONS"); enabled = e && e[0] == '1'; }
    if (!enabled || dl->rank != 0) return;
    size_t NB = (size_t)dl->num_ranks * (size_t)dl->B, M = NB * (size_t)dl->T;
    size_t* starts = (size_t*)malloc_or_die(NB * sizeof(size_t), "position log");
    int shard = 0;
    char err[ERRLEN];
    if (dataloader_next_starts(dl, starts, &shard, err, ERRLEN) == 0) { /* moves on as next_batch would */
        if (!dl->shuffle) printf("data position: step %d micro %d shard %d start %zu tokens %zu\n", step, micro, shard, starts[0], M);
        else {
            printf("data position: step %d micro %d epoch %lld shard %d starts", step, micro, dl->epoch, shard);
            for (size_t k = 0; k < NB; k++) printf("%c%zu", k ? ',' : ' ', starts[k]);
            printf(" T %d\n", dl->T);
        }
        fflush(stdout);
    }
    free(starts);
}

#endif /* LLMC_STATE_H */
