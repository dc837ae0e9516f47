/*
 offload.h: the disk tier of the optimizer states (--offload-optimizer
 disk:DIR). One scratch file per rank and an I/O thread that executes, in
 order, the reads and writes the optimizer step queues, so that reading the
 next unit's optimizer shard and writing the previous one back overlap the
 AdamW arithmetic of the current unit (ZeRO-Infinity's overlap-centric
 design, Rajbhandari et al. 2021, arXiv:2104.07857, section 6; here with
 plain POSIX pread/pwrite through the page cache, no O_DIRECT, no libaio).

 The file: DIR/optim_rank<r>.bin, created with O_EXCL, given its full size
 with posix_fallocate (so that a full file system shows at start-up, never
 in the middle of a step), and UNLINKED at once: the open descriptor keeps
 the space, and the kernel frees it when the process ends, however it ends
 (a killed rank leaves no scratch file behind). Its layout is the engine's
 business (zero.h: unit by unit, [master | m | v] of the unit's own shard).

 Requests are served in submission order by one thread, so a read queued
 after a write of the same buffer sees the buffer only after the write has
 taken its bytes: the optimizer's double buffer needs nothing more. The
 first failure (errno, or end of file) is kept; later requests are skipped
 and every wait reports it. Plain C11 / C++17 common subset, pthreads.
*/
#ifndef LLMC_OFFLOAD_H
#define LLMC_OFFLOAD_H

#include <pthread.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include "utils.h"

#define OFFLOAD_QUEUE 8      /* requests in flight at most (the step uses 2) */

typedef struct {
    void* buf;
    size_t bytes;
    long long offset;
    int write;               /* 1: pwrite buf -> file, 0: pread file -> buf */
} OffloadRequest;

typedef struct {
    int fd;                          /* -1: not open */
    char path[4096];                 /* name it had when created (now unlinked) */
    long long size;                  /* bytes reserved (posix_fallocate) */
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    OffloadRequest q[OFFLOAD_QUEUE];
    unsigned long long submitted, completed;  /* request counts; a ticket is the count after submission */
    int stop;
    int error;                       /* first failure: errno, or -1 for an unexpected end of file */
    int error_write;
    long long error_offset;
    unsigned long long bytes_read, bytes_written;   /* transferred by the I/O thread */
    double io_seconds;               /* time the thread spent inside pread/pwrite */
} OffloadFile;

/* Transfer exactly `bytes` at `offset` (loops over short transfers and
   EINTR). 0, errno, or -1 when a read meets the end of the file. */
static inline int offload_rw(int fd, int write, void* buf, size_t bytes, long long offset) {
    char* p = (char*)buf;
    while (bytes > 0) {
        size_t chunk = bytes < ((size_t)1 << 30) ? bytes : ((size_t)1 << 30);
        ssize_t k = write ? pwrite(fd, p, chunk, (off_t)offset) : pread(fd, p, chunk, (off_t)offset);
        if (k < 0) { if (errno == EINTR) continue; return errno ? errno : EIO; }
        if (k == 0) return write ? ENOSPC : -1;
        p += k; bytes -= (size_t)k; offset += k;
    }
    return 0;
}

static void* offload_thread_main(void* arg) {
    OffloadFile* F = (OffloadFile*)arg;
    pthread_mutex_lock(&F->mu);
    for (;;) {
        while (!F->stop && F->completed == F->submitted) pthread_cond_wait(&F->cv_work, &F->mu);
        if (F->completed == F->submitted) break; /* stop, nothing left */
        OffloadRequest r = F->q[F->completed % OFFLOAD_QUEUE];
        int skip = F->error != 0;
        pthread_mutex_unlock(&F->mu);
        int e = 0;
        double t0 = wall_seconds();
        if (!skip) e = offload_rw(F->fd, r.write, r.buf, r.bytes, r.offset);
        double dt = wall_seconds() - t0;
        pthread_mutex_lock(&F->mu);
        if (e && !F->error) { F->error = e; F->error_write = r.write; F->error_offset = r.offset; }
        if (!skip && !e) { if (r.write) F->bytes_written += r.bytes; else F->bytes_read += r.bytes; }
        F->io_seconds += dt;
        F->completed++;
        pthread_cond_broadcast(&F->cv_done);
    }
    pthread_mutex_unlock(&F->mu);
    return NULL;
}

/* Bytes available to an unprivileged writer in the file system holding dir
   (statvfs f_bavail * f_frsize); -1 with errno set if dir cannot be queried. */
static inline long long offload_free_bytes(const char* dir) {
    struct statvfs s;
    if (statvfs(dir, &s) != 0) return -1;
    return (long long)s.f_bavail * (long long)s.f_frsize;
}

/* Create the scratch file dir/optim_rank<rank>.bin of `bytes` bytes (all
   zero), unlink its name, start the I/O thread. 0, or 1 with one message in
   err naming the file and the errno text (cannot create: missing or
   read-only dir; cannot reserve: no space). The caller checks the free
   space first, so that its message can name the total the node needs. */
/* The rate (bytes per second, write and read together) of a 32 MB scratch
   file in dir written and read back as the offloaded optimizer does
   (pwrite, pread: through the page cache), for -z auto's cost model; 0 when
   dir cannot be used (the offload's own checks then say why). */
static inline double offload_probe_rate(const char* dir) {
    char p[4096];
    snprintf(p, sizeof(p), "%s/.llmc_probe.%d", dir, (int)getpid());
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 0.0;
    unlink(p);
    size_t n = 32u << 20;
    char* buf = (char*)malloc(n);
    double rate = 0.0;
    if (buf) {
        memset(buf, 1, n);
        double t0 = wall_seconds();
        int bad = offload_rw(fd, 1, buf, n, 0) != 0 || offload_rw(fd, 0, buf, n, 0) != 0;
        double t = wall_seconds() - t0;
        if (!bad && t > 0) rate = 2.0 * (double)n / t;
        free(buf);
    }
    close(fd);
    return rate;
}

static inline int offload_file_create(OffloadFile* F, const char* dir, int rank, long long bytes, char* err, size_t errlen) {
    memset(F, 0, sizeof(*F));
    F->fd = -1;
    snprintf(F->path, sizeof(F->path), "%s/optim_rank%d.bin", dir, rank);
    int fd = open(F->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return set_err(err, errlen, "--offload-optimizer disk:%s: %s already exists (the scratch files are unlinked at creation, so it is "
                           "not ours: remove it or use another DIR)", dir, F->path);
        return set_err(err, errlen, "--offload-optimizer disk:%s: cannot create the scratch file %s (%s)", dir, F->path, strerror(errno));
    }
    unlink(F->path);
    int e = bytes > 0 ? posix_fallocate(fd, 0, (off_t)bytes) : 0;
    if (e == EOPNOTSUPP || e == EINVAL) e = ftruncate(fd, (off_t)bytes) == 0 ? 0 : errno;  /* file systems without fallocate */
    if (e) {
        close(fd);
        return set_err(err, errlen, "--offload-optimizer disk:%s: cannot reserve %lld bytes for %s (%s)", dir, bytes, F->path, strerror(e));
    }
    F->fd = fd;
    F->size = bytes;
    pthread_mutex_init(&F->mu, NULL);
    pthread_cond_init(&F->cv_work, NULL);
    pthread_cond_init(&F->cv_done, NULL);
    if (pthread_create(&F->thread, NULL, offload_thread_main, F) != 0) {
        close(fd); F->fd = -1;
        return set_err(err, errlen, "--offload-optimizer disk:%s: cannot start the I/O thread", dir);
    }
    F->running = 1;
    return 0;
}

/* Queue a transfer; returns its ticket (wait with offload_wait). Blocks
   only when OFFLOAD_QUEUE requests are in flight. buf must stay valid and
   untouched until the ticket completes. */
static inline unsigned long long offload_submit(OffloadFile* F, int write, void* buf, size_t bytes, long long offset) {
    pthread_mutex_lock(&F->mu);
    while (F->submitted - F->completed >= OFFLOAD_QUEUE) pthread_cond_wait(&F->cv_done, &F->mu);
    OffloadRequest* r = &F->q[F->submitted % OFFLOAD_QUEUE];
    r->buf = buf; r->bytes = bytes; r->offset = offset; r->write = write;
    unsigned long long ticket = ++F->submitted;
    pthread_cond_signal(&F->cv_work);
    pthread_mutex_unlock(&F->mu);
    return ticket;
}

/* Wait until request `ticket` (and every earlier one) is done; 0, or the
   first error of the file (see OffloadFile.error). */
static inline int offload_wait(OffloadFile* F, unsigned long long ticket) {
    pthread_mutex_lock(&F->mu);
    while (F->completed < ticket) pthread_cond_wait(&F->cv_done, &F->mu);
    int e = F->error;
    pthread_mutex_unlock(&F->mu);
    return e;
}

/* Wait for everything queued; 0 or the first error. */
static inline int offload_drain(OffloadFile* F) {
    pthread_mutex_lock(&F->mu);
    unsigned long long t = F->submitted;
    pthread_mutex_unlock(&F->mu);
    return offload_wait(F, t);
}

/* A synchronous transfer on the calling thread, after the queue drained
   (initialisation, checkpoints, training states). Not counted in the
   thread's counters. 0 or errno (-1: end of file). */
static inline int offload_sync_io(OffloadFile* F, int write, void* buf, size_t bytes, long long offset) {
    int e = offload_drain(F);
    return e ? e : offload_rw(F->fd, write, buf, bytes, offset);
}

/* One line describing an error code of this file (for comm_fatal). */
static inline const char* offload_strerror(int e) { return e == -1 ? "unexpected end of file" : strerror(e); }

/* Stop the thread (after the queued requests) and close the file; its space
   returns to the file system. Safe on a file never opened. */
static inline void offload_file_close(OffloadFile* F) {
    if (F->running) {
        pthread_mutex_lock(&F->mu);
        F->stop = 1;
        pthread_cond_signal(&F->cv_work);
        pthread_mutex_unlock(&F->mu);
        pthread_join(F->thread, NULL);
        F->running = 0;
        pthread_mutex_destroy(&F->mu);
        pthread_cond_destroy(&F->cv_work);
        pthread_cond_destroy(&F->cv_done);
    }
    if (F->fd >= 0) { close(F->fd); F->fd = -1; }
}

#endif /* LLMC_OFFLOAD_H */
