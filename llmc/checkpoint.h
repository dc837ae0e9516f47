/*
 checkpoint.h: writing llm.c model checkpoints (version 3, fp32) from a
 sharded model, collectively and atomically. Every rank writes the tensor
 elements of its OWN shard (from the fp32 master copy when there is one,
 else from the params) at their place in the tensor-major file with
 pwrite(2); nothing is gathered to rank 0, so the same code serves every
 ZeRO stage. Rank 0 creates "<path>.tmp" with the header and its full size,
 all ranks write and fsync, and only when every rank has succeeded does
 rank 0 rename it to <path>. A failure anywhere leaves any previous <path>
 untouched and removes the temporary file. All ranks must see the same
 file system (one node, or a shared file system across nodes). The same
 collective writer (CollectiveFile) serves the training state (state.h).
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <fcntl.h>
#include <unistd.h>
#include "gpt.h"

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
   with one message (comm_check_all). All calls are collective. */
typedef struct {
    Comm* c;
    const char* what;      /* "checkpoint", "state": names the file in messages */
    const char* path;
    char tmp[4096];
    int fd;
    char err[ERRLEN];
} CollectiveFile;

static inline void cfile_begin(CollectiveFile* f, Comm* c, const char* what, const char* path,
                               const void* header, size_t header_bytes, long long total_bytes, const char* pre_err) {
    memset(f, 0, sizeof(*f));
    f->c = c; f->what = what; f->path = path; f->fd = -1;
    if (pre_err && pre_err[0]) snprintf(f->err, ERRLEN, "%s", pre_err);
    if (!f->err[0] && snprintf(f->tmp, sizeof(f->tmp), "%s.tmp", path) >= (int)sizeof(f->tmp))
        set_err(f->err, ERRLEN, "%s path %s is too long", what, path);
    if (c->rank == 0 && !f->err[0]) {
        int fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) set_err(f->err, ERRLEN, "cannot write %s %s (%s)", what, f->tmp, strerror(errno));
        else {
            if (pwrite_all(fd, header, header_bytes, 0) != 0 || ftruncate(fd, (off_t)total_bytes) != 0)
                set_err(f->err, ERRLEN, "cannot write %s %s (%s)", what, f->tmp, strerror(errno));
            close(fd);
            if (f->err[0]) unlink(f->tmp);
        }
    }
    comm_check_all(c, f->err);
    f->fd = open(f->tmp, O_WRONLY);
    if (f->fd < 0) set_err(f->err, ERRLEN, "cannot open %s %s on rank %d (%s)", what, f->tmp, c->rank, strerror(errno));
}

/* 1 while this rank can still write (no error so far). */
static inline int cfile_ok(const CollectiveFile* f) { return f->fd >= 0 && !f->err[0]; }

static inline void cfile_write(CollectiveFile* f, const void* p, size_t n, long long off) {
    if (!cfile_ok(f)) return;
    if (pwrite_all(f->fd, p, n, off) != 0)
        set_err(f->err, ERRLEN, "writing %s %s failed on rank %d (%s)", f->what, f->tmp, f->c->rank, strerror(errno));
}

static inline void cfile_commit(CollectiveFile* f) {
    Comm* c = f->c;
    if (f->fd >= 0) {
        if (!f->err[0] && fsync(f->fd) != 0) set_err(f->err, ERRLEN, "fsync of %s %s failed on rank %d (%s)", f->what, f->tmp, c->rank, strerror(errno));
        close(f->fd);
        f->fd = -1;
    }
    /* everyone must have written before the rename */
    int mine = f->err[0] ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
        if (c->rank == 0) unlink(f->tmp);
        comm_check_all(c, f->err); /* some rank has a message: every rank exits here */
    }
    if (c->rank == 0) {
        if (rename(f->tmp, f->path) != 0) {
            set_err(f->err, ERRLEN, "cannot rename %s to %s (%s)", f->tmp, f->path, strerror(errno));
            unlink(f->tmp);
        } else {
            /* make the rename durable: fsync the directory */
            char dir[4096];
            snprintf(dir, sizeof(dir), "%s", f->path);
            char* slash = strrchr(dir, '/');
            if (slash) { if (slash == dir) slash[1] = 0; else *slash = 0; } else snprintf(dir, sizeof(dir), ".");
            int dfd = open(dir, O_RDONLY);
            if (dfd >= 0) { fsync(dfd); close(dfd); }
        }
    }
    comm_check_all(c, f->err);
}

/* Write the model as an llm.c version-3 checkpoint: every rank writes the
   elements of its own shard (gpt2_get_own) in place. Collective. */
static inline void gpt2_save_checkpoint(GPT2* m, const char* path) {
    const ZeroPlan* P = &m->plan;
    int h[256];
    memset(h, 0, sizeof(h));
    const GPT2Config* g = &m->config;
    h[0] = CKPT_MAGIC; h[1] = 3; h[2] = g->max_seq_len; h[3] = g->vocab_size; h[4] = g->num_layers;
    h[5] = g->num_heads; h[6] = g->channels; h[7] = g->padded_vocab_size;
    long long total = 1024 + 4LL * (long long)P->num_parameters;
    CollectiveFile f;
    cfile_begin(&f, m->comm, "checkpoint", path, h, sizeof(h), total, NULL);
    long long* offs = (long long*)malloc_or_die((size_t)P->num_tensors * sizeof(long long), "checkpoint offsets");
    gpt2_checkpoint_offsets(&m->layout, P, offs);
    size_t maxsz = 0;
    for (int t = 0; t < P->num_tensors; t++) if (P->tensors[t].size > maxsz) maxsz = P->tensors[t].size;
    float* buf = (float*)malloc_or_die(maxsz * sizeof(float), "checkpoint buffer");
    for (int t = 0; t < P->num_tensors && cfile_ok(&f) && m->comm->replica_rank == 0; t++) {  /* HSDP: one group writes */
        size_t first;
        size_t n = gpt2_get_own(m, t, buf, &first);
        if (n) cfile_write(&f, buf, n * sizeof(float), offs[t] + 4LL * (long long)first);
    }
    free(buf); free(offs);
    cfile_commit(&f);
}

#endif /* LLMC_CHECKPOINT_H */
