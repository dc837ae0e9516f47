/*
 checkpoint.h: llm.c's model checkpoint format, both directions, for a
 sharded model. File (tensor-major): int32 header[256] = {20240326, version
 (3: fp32, 5: bf16), maxT, V, L, NH, C, Vp}, then wte, wpe, ln1w[L],
 ln1b[L], qkvw[L], qkvb[L], attprojw[L], attprojb[L], ln2w[L], ln2b[L],
 fcw[L], fcb[L], fcprojw[L], fcprojb[L], lnfw, lnfb (gpt2_checkpoint_order
 maps the plan's unit-major tensors to this order).

 Reading (gpt2_read_checkpoint_header, gpt2_load_checkpoint): the header
 is checked against the file's size; every rank reads the tensors and
 keeps the ranges it holds (from llm.c's fp32 or bf16 files alike).

 Writing (gpt2_save_checkpoint, version 3 or 5), collectively and
 atomically: every rank writes the tensor elements of its OWN shard (from
 the fp32 master copy when there is one, else from the params) at their
 place in the file with pwrite(2); nothing is gathered to rank 0, so the
 same code serves every ZeRO stage. Rank 0 creates "<path>.tmp" with the
 header and its full size, all ranks write and fsync, and only when every
 rank has succeeded does rank 0 rename it to <path>. A failure anywhere
 leaves any previous <path> untouched and removes the temporary file. All
 ranks must see the same file system (one node, or a shared file system
 across nodes). The same collective writer (CollectiveFile) serves the
 training state (state.h).
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <fcntl.h>
#include <unistd.h>
#include "gpt_params.h"

#define CKPT_MAGIC 20240326


/* Checkpoint order: the plan tensor index of each tensor (piece) in file
   order: wte's pieces in row order, wpe, then each block tensor kind for
   all layers, lnfw, lnfb. Returns the count (gpt2_num_tensors). */
static inline int gpt2_checkpoint_order(const GPT2Layout* y, int* order) {
    int k = 0;
    for (int c = 0; c < y->num_chunks; c++) order[k++] = gpt2_tensor_chunk(y, c);
    order[k++] = T_WPE;
    for (int j = 0; j < GPT2_BLOCK_TENSORS; j++)
        for (int l = 0; l < y->num_layers; l++) order[k++] = gpt2_block_tensor(y, l, j);
    order[k++] = T_LNFW; order[k++] = T_LNFB;
    return k;
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

/* The version (3 or 5) of an llm.c checkpoint whose header was checked
   (gpt2_read_checkpoint_header), 0 if it cannot be read. */
static inline int gpt2_checkpoint_version(const char* path) {
    FILE* f = fopen(path, "rb");
    int h[2] = {0, 0};
    if (f) { if (fread(h, sizeof(int), 2, f) != 2) h[1] = 0; fclose(f); }
    return h[1] == 3 || h[1] == 5 ? h[1] : 0;
}

/* Load the parameters of an llm.c checkpoint (version 3 or 5) whose
   config equals m->config into the ranges this rank holds. 0 or 1 with a
   message. */
static inline int gpt2_load_checkpoint(GPT2* m, const char* path, char* err, size_t errlen) {
    GPT2Config c;
    int version;
    if (gpt2_read_checkpoint_header(path, &c, &version, err, errlen)) return 1;
    char diff[512];
    if (gpt2_config_diff(&c, &m->config, "the file", "the model", diff, sizeof(diff)))
        return set_err(err, errlen, "checkpoint %s: config does not match the model: %s", path, diff);
    FILE* f = fopen(path, "rb");
    if (!f) return set_err(err, errlen, "checkpoint %s: cannot open (%s)", path, strerror(errno));
    const ZeroPlan* P = &m->plan;
    int* order = (int*)malloc_or_die((size_t)P->num_tensors * sizeof(int), "checkpoint order");
    gpt2_checkpoint_order(&m->layout, order);
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
            else for (size_t i = 0; i < n; i++) buf[i] = bf16_bits_to_float(raw[i]);
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
static inline void gpt2_checkpoint_offsets(const GPT2Layout* y, const ZeroPlan* P, long long* out) {
    int* order = (int*)malloc_or_die((size_t)P->num_tensors * sizeof(int), "checkpoint order");
    gpt2_checkpoint_order(y, order);
    long long off = 1024;
    for (int k = 0; k < P->num_tensors; k++) {
        out[order[k]] = off;
        off += 4LL * (long long)P->tensors[order[k]].size;
    }
    free(order);
}

/* pwrite of exactly n bytes at off (loops over short writes, retries
   EINTR). 0, or -1 with errno (ENOSPC for a write of 0 bytes). */
static inline int pwrite_all(int fd, const void* p, size_t n, long long off) {
    const char* c = (const char*)p;
    while (n > 0) {
        ssize_t w = pwrite(fd, c, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { if (w == 0) errno = ENOSPC; return -1; }
        c += w; off += w; n -= (size_t)w;
    }
    return 0;
}

/* A file written by every rank in place and published atomically:
   cfile_begin (rank 0 creates PATH.tmp with the header and the full size;
   every rank opens it), cfile_write (each rank pwrites its own pieces; an
   error is recorded, not fatal), cfile_commit (fsync, all ranks agree, rank 0
   renames PATH.tmp to PATH and fsyncs the directory). Any failure on any rank
   removes the .tmp, leaves an earlier PATH untouched, and ends every rank
   with one message (comm_check_all); a second Ctrl-C (SIGINT after a first
   signal, interrupt.h) unlinks the .tmp before the rank exits. All calls
   are collective. */
/* Who writes a checkpoint or state, and over which ranks the write's
   collective checks run. The normal writers (ckpt_writers_all): every rank
   takes part over MPI_COMM_WORLD, the ranks of replica group 0 pwrite (all
   ranks without HSDP), rank 0 renames PATH.tmp to PATH, and an error ends
   every rank (comm_check_all). A rescue's (rescue.h): one shard group,
   over its own communicator (so no rank outside it is needed); every
   member pwrites its own shard; the tmp file is PATH.tmp.gK (K: the
   group's lowest world rank, so that two groups never write the same
   file); group rank 0 publishes it with link(2), which never replaces a
   PATH that another group or an earlier write published (every replica
   holds the same bytes); an error, or a member that does not answer within
   timeout_s seconds, ends the rank with exit 1 after one line, the .tmp
   removed and nothing published. */
typedef struct {
    MPI_Comm mc;           /* the writers' communicator */
    int rank, size;        /* this rank's place in it */
    int writes;            /* 1: this rank pwrites its own shard */
    int rescue;            /* 0: the normal write; 1: a rescue's (above) */
    int group;             /* rescue: the group's lowest world rank (the .tmp's suffix) */
    double timeout_s;      /* rescue: the bound of each check, seconds (0: none) */
    int published_before;  /* out, rescue: 1 when PATH existed already (the link found it), 0 when this write published it */
} CkptWriters;

/* The normal writers of c (see CkptWriters). */
static inline CkptWriters ckpt_writers_all(Comm* c) {
    CkptWriters w;
    memset(&w, 0, sizeof(w));
    w.mc = MPI_COMM_WORLD; w.rank = c->rank; w.size = c->world_size;
    w.writes = c->replica_rank == 0;   /* HSDP: one group writes */
    return w;
}

typedef struct {
    Comm* c;
    CkptWriters* w;        /* who writes, over which ranks (set by cfile_begin) */
    CkptWriters own;       /* cfile_begin with w NULL: the normal writers */
    const char* what;      /* "checkpoint", "state": names the file in messages */
    const char* path;
    char tmp[4096];
    int fd;
    int watch;             /* interrupt.h's slot: an exit now (a second SIGINT) unlinks tmp */
    char err[ERRLEN];
} CollectiveFile;

/* A rescue's collective: MPI_Iallreduce of n elements of type dt (op:
   MPI_MIN, MPI_MAX) over w->mc, waited for at most w->timeout_s seconds by polling (never
   through the collective watch, whose timeout would start the rescue
   again). 0 when it completed, 1 when it did not (a member is gone or
   stuck elsewhere: the caller ends the rank). */
static inline int ckpt_rescue_allreduce(const CkptWriters* w, const void* in, void* out, int n, MPI_Datatype dt, MPI_Op op) {
    MPI_Request rq;
    MPI_Iallreduce(in, out, n, dt, op, w->mc, &rq);
    double t0 = wall_seconds();
    for (;;) {
        int flag = 0;
        MPI_Test(&rq, &flag, MPI_STATUS_IGNORE);
        if (flag) return 0;
        if (w->timeout_s > 0 && wall_seconds() - t0 > w->timeout_s) return 1;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

/* The write's collective error check over its writers: the normal writers
   end every rank with one line (comm_check_all); a rescue's end this rank
   with exit 1 after one line (the lowest failing member's, or the
   timeout's), the .tmp removed by group rank 0: nothing is published. */
static inline void cfile_check(CollectiveFile* f, const char* err) {
    CkptWriters* w = f->w;
    if (!w->rescue) { comm_check_all(f->c, err); return; }
    int mine = err && err[0] ? w->rank : w->size, first = w->size;
    if (ckpt_rescue_allreduce(w, &mine, &first, 1, MPI_INT, MPI_MIN)) {
        fprintf(stderr, "error (rank %d): rescue: writing %s %s: a rank of the shard group did not answer within %.0f s: nothing written by this group\n",
                f->c->rank, f->what, f->tmp, w->timeout_s);
        if (w->rank == 0) unlink(f->tmp);
        fflush(stderr);
        _exit(1);
    }
    if (first == w->size) return;
    if (w->rank == first) fprintf(stderr, "error (rank %d): rescue: %s: nothing written by this group\n", f->c->rank, err);
    if (w->rank == 0) unlink(f->tmp);
    fflush(stderr);
    _exit(1);
}

static inline void cfile_begin(CollectiveFile* f, Comm* c, CkptWriters* w, const char* what, const char* path,
                               const void* header, size_t header_bytes, long long total_bytes, const char* pre_err) {
    memset(f, 0, sizeof(*f));
    f->c = c; f->what = what; f->path = path; f->fd = -1; f->watch = -1;
    if (!w) { f->own = ckpt_writers_all(c); w = &f->own; }
    f->w = w;
    if (pre_err && pre_err[0]) snprintf(f->err, ERRLEN, "%s", pre_err);
    int tl = w->rescue ? snprintf(f->tmp, sizeof(f->tmp), "%s.tmp.g%d", path, w->group) : snprintf(f->tmp, sizeof(f->tmp), "%s.tmp", path);
    if (!f->err[0] && tl >= (int)sizeof(f->tmp))
        set_err(f->err, ERRLEN, "%s path %s is too long", what, path);
    /* before it exists: an exit now (interrupt.h) on any rank removes it,
       so that a rank that exits alone does not leave rank 0 a write it can
       never complete; the others release it when the completion check
       below is done, rank 0 when it renames */
    if (!f->err[0]) f->watch = intr_watch_tmp(f->tmp);
    if (w->rank == 0 && !f->err[0]) {
        int fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) set_err(f->err, ERRLEN, "cannot write %s %s (%s)", what, f->tmp, strerror(errno));
        else {
            if (pwrite_all(fd, header, header_bytes, 0) != 0 || ftruncate(fd, (off_t)total_bytes) != 0)
                set_err(f->err, ERRLEN, "cannot write %s %s (%s)", what, f->tmp, strerror(errno));
            close(fd);
            if (f->err[0]) unlink(f->tmp);
        }
    }
    cfile_check(f, f->err);
    f->fd = open(f->tmp, O_WRONLY);
    if (f->fd < 0) set_err(f->err, ERRLEN, "cannot open %s %s on rank %d (%s)", what, f->tmp, c->rank, strerror(errno));
    intr_test_slow(what, c->rank);   /* test hook LLMC_TEST_SLOW=checkpoint:S / state:S (interrupt.h): the .tmp exists */
}

/* 1 while this rank can still write (no error so far). */
static inline int cfile_ok(const CollectiveFile* f) { return f->fd >= 0 && !f->err[0]; }

static inline void cfile_write(CollectiveFile* f, const void* p, size_t n, long long off) {
    if (!cfile_ok(f)) return;
    if (pwrite_all(f->fd, p, n, off) != 0)
        set_err(f->err, ERRLEN, "writing %s %s failed on rank %d (%s)", f->what, f->tmp, f->c->rank, strerror(errno));
}

/* fsync the directory that holds `path` (its last '/' or "."): makes a
   rename or link into it durable. Errors are ignored (a directory some file
   systems will not open or sync loses only that durability). */
static inline void fsync_parent_dir(const char* path) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash) { if (slash == dir) slash[1] = 0; else *slash = 0; } else snprintf(dir, sizeof(dir), ".");
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
}

/* A rescue's commit (CkptWriters): every member fsyncs; when all did,
   group rank 0 links PATH.tmp.gK to PATH (EEXIST: published already, by
   another group or an earlier write of the same step: the same bytes) and
   removes the .tmp; then the members agree once more, so that no member
   exits (which ends the others under srun --kill-on-bad-exit) before the
   file is in place. */
static inline void cfile_commit_rescue(CollectiveFile* f) {
    CkptWriters* w = f->w;
    if (f->fd >= 0) {
        if (!f->err[0] && fsync(f->fd) != 0) set_err(f->err, ERRLEN, "fsync of %s %s failed on rank %d (%s)", f->what, f->tmp, f->c->rank, strerror(errno));
        close(f->fd);
        f->fd = -1;
    }
    cfile_check(f, f->err);
    w->published_before = 0;
    if (w->rank == 0) {
        if (link(f->tmp, f->path) != 0) {
            if (errno == EEXIST) w->published_before = 1;
            else set_err(f->err, ERRLEN, "cannot link %s to %s (%s)", f->tmp, f->path, strerror(errno));
        }
        unlink(f->tmp);
        fsync_parent_dir(f->path);
    }
    intr_unwatch(f->watch);
    f->watch = -1;
    cfile_check(f, f->err);
    int pb = w->published_before, any = 0;
    if (ckpt_rescue_allreduce(w, &pb, &any, 1, MPI_INT, MPI_MAX)) {
        fprintf(stderr, "error (rank %d): rescue: a rank of the shard group did not answer after %s %s was published\n", f->c->rank, f->what, f->path);
        fflush(stderr);
        _exit(1);
    }
    w->published_before = any;
}

static inline void cfile_commit(CollectiveFile* f) {
    if (f->w->rescue) { cfile_commit_rescue(f); return; }
    Comm* c = f->c;
    if (f->fd >= 0) {
        if (!f->err[0] && fsync(f->fd) != 0) set_err(f->err, ERRLEN, "fsync of %s %s failed on rank %d (%s)", f->what, f->tmp, c->rank, strerror(errno));
        close(f->fd);
        f->fd = -1;
    }
    /* everyone must have written before the rename */
    int mine = f->err[0] ? 1 : 0, any = 0;
    MPI_Request rq;
    MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "the checkpoint write's completion check (raise --collective-timeout above the slowest rank's write)");
    if (c->rank != 0 && !any) {
        /* every rank wrote: rank 0 renames now, and this rank's exit now
           must no longer remove the file or, for a state, its model */
        intr_unwatch(f->watch); f->watch = -1;
        if (!strcmp(f->what, "state") && intr_state.pair > 0) { intr_unwatch(intr_state.pair - 1); intr_state.pair = 0; }
    }
    if (any) {
        if (c->rank == 0) unlink(f->tmp);
        intr_unwatch(f->watch);
        comm_check_all(c, f->err); /* some rank has a message: every rank exits here */
    }
    if (c->rank == 0) {
        /* the rename and the release of the watches as one, against an exit
           now (interrupt.h): a state renamed into place completes its pair,
           so the model's watch (intr_state.pair) goes with it */
        intr_critical_begin();
        int rn = rename(f->tmp, f->path);
        if (rn == 0) {
            intr_unwatch(f->watch); f->watch = -1;
            if (!strcmp(f->what, "state") && intr_state.pair > 0) { intr_unwatch(intr_state.pair - 1); intr_state.pair = 0; }
        }
        intr_critical_end();
        if (rn != 0) {
            set_err(f->err, ERRLEN, "cannot rename %s to %s (%s)", f->tmp, f->path, strerror(errno));
            unlink(f->tmp);
        } else {
            fsync_parent_dir(f->path);   /* make the rename durable */
        }
    }
    intr_unwatch(f->watch);
    comm_check_all(c, f->err);
}

/* fp32 -> bf16, rounding to nearest even (what torch's .to(torch.bfloat16)
   and so llm.c's exporter do); NaN stays a quiet NaN. */
static inline uint16_t float_to_bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Write the model as an llm.c checkpoint, version 3 (fp32: the values
   exactly) or 5 (bf16, rounded to nearest even: what llm.c's CUDA trainer
   reads): every rank writes the elements of its own shard (gpt2_get_own,
   from the fp32 master copy when there is one) in place. A version-5 file
   does not hold the master weights exactly: write the training state
   beside it with the master copy (state_save with_master) for an exact
   resume. Collective over the writers w (CkptWriters; NULL: every rank,
   the normal write). */
static inline void gpt2_save_checkpoint(GPT2* m, const char* path, int version, CkptWriters* w) {
    const ZeroPlan* P = &m->plan;
    int h[256];
    memset(h, 0, sizeof(h));
    const GPT2Config* g = &m->config;
    long long esz = version == 5 ? 2 : 4;
    h[0] = CKPT_MAGIC; h[1] = version == 5 ? 5 : 3; h[2] = g->max_seq_len; h[3] = g->vocab_size; h[4] = g->num_layers;
    h[5] = g->num_heads; h[6] = g->channels; h[7] = g->padded_vocab_size;
    long long total = 1024 + esz * (long long)P->num_parameters;
    CollectiveFile f;
    cfile_begin(&f, m->comm, w, "checkpoint", path, h, sizeof(h), total, NULL);
    long long* offs = (long long*)malloc_or_die((size_t)P->num_tensors * sizeof(long long), "checkpoint offsets");
    gpt2_checkpoint_offsets(&m->layout, P, offs); /* fp32 offsets: 1024 + 4 * (elements before) */
    size_t maxsz = 0;
    for (int t = 0; t < P->num_tensors; t++) if (P->tensors[t].size > maxsz) maxsz = P->tensors[t].size;
    float* buf = (float*)malloc_or_die(maxsz * sizeof(float), "checkpoint buffer");
    uint16_t* half = esz == 2 ? (uint16_t*)malloc_or_die(maxsz * sizeof(uint16_t), "checkpoint bf16 buffer") : NULL;
    for (int t = 0; t < P->num_tensors && cfile_ok(&f) && f.w->writes; t++) {  /* HSDP: one group writes (a rescue: its group) */
        size_t first;
        size_t n = gpt2_get_own(m, t, buf, &first);
        if (!n) continue;
        long long off = 1024 + (offs[t] - 1024) / 4 * esz + esz * (long long)first;
        if (half) {
            for (size_t i = 0; i < n; i++) half[i] = float_to_bf16_rne(buf[i]);
            cfile_write(&f, half, n * sizeof(uint16_t), off);
        } else {
            cfile_write(&f, buf, n * sizeof(float), off);
        }
    }
    free(buf); free(half); free(offs);
    cfile_commit(&f);
}

#endif /* LLMC_CHECKPOINT_H */
