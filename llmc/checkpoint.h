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
 file system (one node, or a shared file system across nodes).
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <fcntl.h>
#include <unistd.h>
#include "gpt.h"

/* Collective: every rank calls it. Returns 0; on failure every rank exits
   with one message (comm_check_all). */
static inline int gpt2_save_checkpoint(GPT2* m, const char* path) {
    Comm* c = m->comm;
    char err[ERRLEN] = "";
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) set_err(err, ERRLEN, "checkpoint path %s is too long", path);
    long long total = 1024;
    for (int t = 0; t < m->plan.num_tensors; t++) total += 4LL * (long long)m->plan.tensors[t].size;
    if (c->rank == 0 && !err[0]) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) set_err(err, ERRLEN, "cannot write checkpoint %s (%s)", tmp, strerror(errno));
        else {
            int h[256];
            memset(h, 0, sizeof(h));
            const GPT2Config* g = &m->config;
            h[0] = CKPT_MAGIC; h[1] = 3; h[2] = g->max_seq_len; h[3] = g->vocab_size; h[4] = g->num_layers;
            h[5] = g->num_heads; h[6] = g->channels; h[7] = g->padded_vocab_size;
            if (pwrite(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) || ftruncate(fd, (off_t)total) != 0)
                set_err(err, ERRLEN, "cannot write checkpoint %s (%s)", tmp, strerror(errno));
            close(fd);
            if (err[0]) unlink(tmp);
        }
    }
    comm_check_all(c, err);
    int fd = open(tmp, O_WRONLY);
    if (fd < 0) set_err(err, ERRLEN, "cannot open checkpoint %s on rank %d (%s)", tmp, c->rank, strerror(errno));
    size_t maxsz = 0;
    for (int t = 0; t < m->plan.num_tensors; t++) if (m->plan.tensors[t].size > maxsz) maxsz = m->plan.tensors[t].size;
    float* buf = (float*)malloc_or_die(maxsz * sizeof(float), "checkpoint buffer");
    for (int t = 0; t < m->plan.num_tensors && fd >= 0 && !err[0]; t++) {
        size_t first;
        size_t n = gpt2_get_own(m, t, buf, &first);
        if (!n) continue;
        off_t off = (off_t)(gpt2_checkpoint_offset(m, t) + 4LL * (long long)first);
        const char* p = (const char*)buf;
        size_t left = n * sizeof(float);
        while (left > 0) {
            ssize_t w = pwrite(fd, p, left, off);
            if (w <= 0) { set_err(err, ERRLEN, "writing checkpoint %s failed on rank %d (%s)", tmp, c->rank, strerror(errno)); break; }
            p += w; off += w; left -= (size_t)w;
        }
    }
    free(buf);
    if (fd >= 0) {
        if (!err[0] && fsync(fd) != 0) set_err(err, ERRLEN, "fsync of checkpoint %s failed (%s)", tmp, strerror(errno));
        close(fd);
    }
    /* everyone must have written before the rename */
    int mine = err[0] ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
        if (c->rank == 0) unlink(tmp);
        comm_check_all(c, err[0] ? err : NULL);
    }
    if (c->rank == 0 && rename(tmp, path) != 0) {
        set_err(err, ERRLEN, "cannot rename %s to %s (%s)", tmp, path, strerror(errno));
        unlink(tmp);
    }
    comm_check_all(c, err);
    return 0;
}

#endif /* LLMC_CHECKPOINT_H */
