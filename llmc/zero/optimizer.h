/*
 zero/optimizer.h: the optimizer step of the engine, over the optimizer
 states that zero/engine.h allocates. Where the fp32 master weights and Adam m, v live: in the backend's
 memory (k Psi/N per rank at stages 1-3, k Psi at stage 0), or offloaded
 (--offload-optimizer, stages 1-3; ZeRO-Offload, Ren et al. 2021,
 arXiv:2101.06840; ZeRO-Infinity, arXiv:2104.07857) to page-locked host
 memory (host, the CUDA build) or to a scratch file per rank streamed unit
 by unit through two buffers (disk, llmc/offload.h). The step: the global
 grad norm over the own shards, clipping (torch's clip_grad_norm_), AdamW
 on this rank's range of every tensor (the same adamw_update on the same
 elements whatever the tier: bitwise the same numbers), then the
 all-gather of the updated params (stages 1-2) or the release of every
 gathered unit (stage 3). Included through llmc/zero.h, after engine.h.
*/
#ifndef LLMC_ZERO_OPTIMIZER_H
#define LLMC_ZERO_OPTIMIZER_H

#include "engine.h"

/* ------------------------------------------------------------------------ */
/* Optimizer offload: the scratch file, access, the streamed step           */

/* Collective (every rank calls it, after zero_engine_init): with
   --offload-optimizer disk:DIR, create this rank's scratch file
   DIR/optim_rank<r>.bin holding the own shards of master (when p < 4), m and
   v (zero_predict_offload_memory's disk bytes; zero, like the buffers they
   replace). First every rank checks that DIR is a directory and that its
   file system has room for the ranks of this node (they share DIR: local
   ranks x bytes); then every rank creates and reserves its file. Any
   failure ends every rank with one line naming DIR and the bytes needed
   (comm_check_all, exit 1), before a training step. Records the file's
   fstat size and reserved blocks in the ledger. No-op without disk offload. */
static inline void zero_offload_open(ZeroEngine* E, const char* dir) {
    const ZeroPlan* P = E->plan;
    Ledger* L = E->ledger;
    Comm* c = E->comm;
    if (P->offload != OFFLOAD_DISK) return;
    char err[ERRLEN] = "";
    unsigned long long need = 0;
    for (int i = 0; i < MEM_NUM; i++) need += L->predicted_disk[i];
    long long node = (long long)need * (c->local_size > 0 ? c->local_size : 1);
    struct stat st;
    if (!dir || !dir[0]) set_err(err, ERRLEN, "--offload-optimizer disk:DIR: DIR must not be empty");
    else if (stat(dir, &st) != 0) set_err(err, ERRLEN, "--offload-optimizer disk:%s: %s (the optimizer states need %llu bytes there per rank)", dir, strerror(errno), need);
    else if (!S_ISDIR(st.st_mode)) set_err(err, ERRLEN, "--offload-optimizer disk:%s: not a directory (the optimizer states need %llu bytes there per rank)", dir, need);
    else {
        long long avail = offload_free_bytes(dir);
        if (avail < 0) set_err(err, ERRLEN, "--offload-optimizer disk:%s: cannot query its free space (%s)", dir, strerror(errno));
        else if (avail < node)
            set_err(err, ERRLEN, "--offload-optimizer disk:%s: the optimizer states need %lld bytes there (%d rank(s) on this node x %llu bytes: "
                    "the own shards of %s), but only %lld bytes are free", dir, node, c->local_size, need,
                    P->master_bytes ? "master, m, v" : "m, v", avail);
    }
    comm_check_all(c, err);
    if (offload_file_create(&E->off_file, dir, c->rank, (long long)need, err, ERRLEN) == 0) {
        if (fstat(E->off_file.fd, &st) != 0) set_err(err, ERRLEN, "--offload-optimizer disk:%s: fstat of %s failed (%s)", dir, E->off_file.path, strerror(errno));
        else { L->disk_file_bytes = (long long)st.st_size; L->disk_reserved_bytes = (long long)st.st_blocks * 512LL; }
        snprintf(L->disk_file, sizeof(L->disk_file), "%s", E->off_file.path);
        for (int i = 0; i < MEM_NUM; i++) L->allocated_disk[i] = L->predicted_disk[i];  /* the file's regions */
    }
    comm_check_all(c, err);
}

/* The optimizer arrays, for zero_opt_get / zero_opt_set. */
enum { ZO_MASTER = 0, ZO_M, ZO_V };

/* Byte offset in the scratch file of element x (unit coordinate, inside the
   own shard) of array `which` of unit u. Layout: unit after unit, each unit
   [master | m | v] of its own shard (master only when p < 4), so one unit's
   optimizer shard is one contiguous read and one write; the file holds
   4 x zero_offload_arrays x shard_parameters bytes. */
static inline long long zero_offload_file_offset(const ZeroPlan* P, int which, int u, size_t x) {
    size_t lo, hi;
    zero_update_range(P, u, &lo, &hi);
    int nm = P->master_bytes ? 1 : 0;
    long long slot = which == ZO_MASTER ? 0 : nm + (which - ZO_M);
    long long base = (long long)zero_offload_arrays(P) * (long long)zero_index(P, ZB_OPT, u, lo);
    return 4LL * (base + slot * (long long)(hi - lo) + (long long)(x - lo));
}

static inline void zero_opt_io(ZeroEngine* E, int which, int u, size_t x, float* host, size_t n, int write) {
    const ZeroPlan* P = E->plan;
    if (n == 0) return;
    if (which == ZO_MASTER && !P->master_bytes) comm_fatal(E->comm, "a master weight accessed without a master copy (a bug)");
    if (P->offload == OFFLOAD_DISK) {
        if (E->off_file.fd < 0) comm_fatal(E->comm, "optimizer states offloaded to disk but no scratch file is open (zero_offload_open not called: a bug)");
        long long off = zero_offload_file_offset(P, which, u, x);
        int e = offload_sync_io(&E->off_file, write, host, n * sizeof(float), off);
        if (e) comm_fatal(E->comm, "--offload-optimizer: %s %s at byte %lld failed (%s)", write ? "write to" : "read of", E->off_file.path, off, offload_strerror(e));
        if (write) E->off_other_written += n * sizeof(float); else E->off_other_read += n * sizeof(float);
        return;
    }
    float* base = which == ZO_MASTER ? E->master : which == ZO_M ? E->adam_m : E->adam_v;
    float* p = base + zero_index(P, ZB_OPT, u, x);
    if (P->offload == OFFLOAD_HOST) { if (write) memcpy(p, host, n * sizeof(float)); else memcpy(host, p, n * sizeof(float)); }
    else if (write) backend_to_device(p, host, n * sizeof(float));
    else backend_to_host(host, p, n * sizeof(float));
}

/* Read n fp32 values of optimizer array `which` (ZO_MASTER, ZO_M, ZO_V) of
   unit u from unit coordinate x on (x..x+n-1 inside zero_held_range(ZB_OPT))
   into host memory `out`, wherever the array lives (the backend's memory,
   host memory, the scratch file). zero_opt_set writes them. A failed disk
   transfer ends the job (comm_fatal: a scratch-file I/O error). Used for
   initialisation, checkpoints and training states (counted outside the
   steps), never by the optimizer step. */
static inline void zero_opt_get(ZeroEngine* E, int which, int u, size_t x, float* out, size_t n) {
    zero_opt_io(E, which, u, x, out, n, 0);
}
static inline void zero_opt_set(ZeroEngine* E, int which, int u, size_t x, const float* in, size_t n) {
    zero_opt_io(E, which, u, x, (float*)in, n, 1);
}

static inline void zero_offload_fail(ZeroEngine* E) {
    OffloadFile* F = &E->off_file;
    comm_fatal(E->comm, "--offload-optimizer: %s %s at byte %lld failed (%s)", F->error_write ? "write to" : "read of", F->path,
               F->error_offset, offload_strerror(F->error));
}

/* Global grad norm: each rank sums the squares of its OWN shard of every
   unit (whatever the stage; padding grads are zero: never written by a
   kernel, zeroed with the buffers), the sums are all-reduced. One sum per
   unit keeps the host waits of the CUDA backend to num_units per step. */
static inline double zero_grad_norm(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
#ifndef LLMC_CUDA   /* the CUDA build refuses --invariant 1 (train_gpt.cu check_args) */
    if (P->invariant) {   /* --invariant 1: exact integer sums on a grid set by the largest square (global_norm.h) */
        double m = 0.0;
        for (int u = 0; u < P->num_units; u++) {
            size_t lo, hi;
            zero_own_range(P, u, &lo, &hi);
            double mu = max_square(E->grads + zero_index(P, ZB_GRADS, u, lo), hi - lo);
            m = isnan(mu) || isnan(m) ? NAN : mu > m ? mu : m;
        }
        m = comm_allreduce_max_host(E->comm, isnan(m) ? INFINITY : m);
        if (!isfinite(m)) return NAN;
        if (m == 0.0) { double z[5] = {0}; comm_group_sum_host(E->comm, z, 4); return 0.0; }
        int e = 30 - ilogb(m);
        double scale = ldexp(1.0, e);
        unsigned long long h = 0, l = 0;
        for (int u = 0; u < P->num_units; u++) {
            size_t lo, hi;
            zero_own_range(P, u, &lo, &hi);
            sum_squares_fixed(E->grads + zero_index(P, ZB_GRADS, u, lo), hi - lo, scale, &h, &l);
        }
        /* 31-bit halves: each below 2^32, so their double sums over the ranks are exact */
        double x[5] = {(double)(h >> 31), (double)(h & 0x7fffffffULL), (double)(l >> 31), (double)(l & 0x7fffffffULL), 0.0};
        comm_group_sum_host(E->comm, x, 4);
        unsigned long long H = (unsigned long long)x[0] * 2147483648ULL + (unsigned long long)x[1];
        unsigned long long L = (unsigned long long)x[2] * 2147483648ULL + (unsigned long long)x[3];
        return sqrt(ldexp((double)H + (double)L / 2147483648.0, -e));
    }
#endif
    double ss = 0.0;
    for (int u = 0; u < P->num_units; u++) {
        size_t lo, hi;
        zero_own_range(P, u, &lo, &hi);
        ss += sum_squares(E->grads + zero_index(P, ZB_GRADS, u, lo), hi - lo);
    }
    double buf[2] = {ss, 0.0};
    comm_group_sum_host(E->comm, buf, 1);   /* one copy of every gradient per shard group */
    return sqrt(buf[0]);
}

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
} AdamWConfig;

/* AdamW over an offloaded optimizer (stages 1-3), unit by unit: for unit u
   the own shard [lo, hi) of master, m, v is taken from host memory (host)
   or from the streaming buffer that the I/O thread filled (disk: the read
   of unit u+1 is queued before u is computed, the write of u after, so the
   file transfers overlap the arithmetic; two buffers suffice because the
   thread serves requests in order), and every tensor of u is updated on its
   overlap with [lo, hi) by the same adamw_update call, with the same
   arguments, as the in-memory step: the same elements, the same arithmetic,
   hence the same bits (the order of tensors is the plan's, as there; AdamW
   is elementwise). A staging backend (CUDA) copies u's reduced grad shard
   to host memory, runs adamw_host_update there and copies the param shard
   back (the shard's padding stays zero, as everywhere). A failed transfer
   ends the job (comm_fatal). */
static inline void zero_offload_adamw(ZeroEngine* E, const AdamWConfig* cfg, float scale, float b1c, float b2c) {
    const ZeroPlan* P = E->plan;
    int disk = P->offload == OFFLOAD_DISK, nm = P->master_bytes ? 1 : 0, U = P->num_units;
    OffloadFile* F = &E->off_file;
    unsigned long long ticket[2] = {0, 0}, last = 0;
    if (disk) {
        if (F->fd < 0) comm_fatal(E->comm, "optimizer states offloaded to disk but no scratch file is open (zero_offload_open not called: a bug)");
        size_t lo, hi;
        zero_update_range(P, 0, &lo, &hi);
        ticket[0] = offload_submit(F, 0, E->off_buf[0], 4 * (size_t)zero_offload_arrays(P) * (hi - lo), zero_offload_file_offset(P, nm ? ZO_MASTER : ZO_M, 0, lo));
    }
    int t = 0;
    for (int u = 0; u < U; u++) {
        size_t lo, hi;
        zero_update_range(P, u, &lo, &hi);
        size_t len = hi - lo;
        float *w, *m, *v;
        if (disk) {
            double t0 = wall_seconds();
            if (offload_wait(F, ticket[u & 1])) zero_offload_fail(E);
            E->off_wait_seconds += wall_seconds() - t0;
            if (u + 1 < U) {
                size_t lo1, hi1;
                zero_update_range(P, u + 1, &lo1, &hi1);
                ticket[(u + 1) & 1] = offload_submit(F, 0, E->off_buf[(u + 1) & 1], 4 * (size_t)zero_offload_arrays(P) * (hi1 - lo1),
                                                     zero_offload_file_offset(P, nm ? ZO_MASTER : ZO_M, u + 1, lo1));
            }
            float* b = E->off_buf[u & 1];
            w = nm ? b : NULL; m = b + (size_t)nm * len; v = m + len;
        } else {
            size_t io = zero_index(P, ZB_OPT, u, lo);
            w = E->master ? E->master + io : NULL; m = E->adam_m + io; v = E->adam_v + io;
        }
#if BACKEND_OFFLOAD_STAGING
        if (P->offload_staging) {
            backend_to_host(E->off_grads, E->grads + zero_index(P, ZB_GRADS, u, lo), len * sizeof(floatX));
            E->off_staged[OFFL_TO_HOST] += len * sizeof(floatX);
            if (!w) {
                backend_to_host(E->off_params, E->params + zero_index(P, ZB_PARAMS, u, lo), len * sizeof(floatX));
                E->off_staged[OFFL_TO_HOST] += len * sizeof(floatX);
            } else {
                memset(E->off_params, 0, len * sizeof(floatX));
            }
        }
#endif
        for (; t < P->num_tensors && P->tensors[t].unit == u; t++) {
            size_t a, n = zero_tensor_overlap(P, t, lo, hi, &a);
            if (!n) continue;
            size_t k = a - lo;
            float decay = P->tensors[t].decay ? cfg->weight_decay : 0.0f;
#if BACKEND_OFFLOAD_STAGING
            if (P->offload_staging) {
                adamw_host_update(E->off_params + k, w ? w + k : NULL, E->off_grads + k, m + k, v + k, n,
                                  cfg->lr, cfg->beta1, cfg->beta2, b1c, b2c, cfg->eps, decay, scale);
                continue;
            }
#endif
            adamw_update(E->params + zero_index(P, ZB_PARAMS, u, a), w ? w + k : NULL,
                         E->grads + zero_index(P, ZB_GRADS, u, a), m + k, v + k, n,
                         cfg->lr, cfg->beta1, cfg->beta2, b1c, b2c, cfg->eps, decay, scale);
        }
#if BACKEND_OFFLOAD_STAGING
        if (P->offload_staging) {
            backend_to_device(E->params + zero_index(P, ZB_PARAMS, u, lo), E->off_params, len * sizeof(floatX));
            E->off_staged[OFFL_TO_BACKEND] += len * sizeof(floatX);
        }
#endif
        if (disk) last = offload_submit(F, 1, E->off_buf[u & 1], 4 * (size_t)zero_offload_arrays(P) * len, zero_offload_file_offset(P, nm ? ZO_MASTER : ZO_M, u, lo));
    }
    if (disk && offload_wait(F, last)) zero_offload_fail(E);
}

/* AdamW (Loshchilov & Hutter) on this rank's range of every tensor (all of it
   at stage 0, the own shard at 1-3), weight decay only where the tensor says
   so, gradients clipped by the global norm (torch's clip_grad_norm_: scale
   min(1, clip/(norm+1e-6))). step t counts from 1. Then stages 1-2
   all-gather the updated params; stage 3 drops every gathered unit.
   Returns the grad norm before clipping. */
static inline double zero_optimizer_step(ZeroEngine* E, const AdamWConfig* cfg, int t) {
    const ZeroPlan* P = E->plan;
    double norm = zero_grad_norm(E);
    float scale = 1.0f;
    if (cfg->grad_clip > 0.0f && norm > cfg->grad_clip) scale = (float)(cfg->grad_clip / (norm + 1e-6));
    float b1c = 1.0f - powf(cfg->beta1, (float)t);
    float b2c = 1.0f - powf(cfg->beta2, (float)t);
    __atomic_store_n(&E->updating, 1, __ATOMIC_SEQ_CST);   /* the own shard changes from here: neither step t-1 nor t until the loop ends */
    if (P->offload != OFFLOAD_NONE) zero_offload_adamw(E, cfg, scale, b1c, b2c);
    else
    for (int i = 0; i < P->num_tensors; i++) {
        int u = P->tensors[i].unit;
        size_t lo, hi, a;
        zero_update_range(P, u, &lo, &hi);
        size_t n = zero_tensor_overlap(P, i, lo, hi, &a);
        if (!n) continue;
        size_t io = zero_index(P, ZB_OPT, u, a);
        adamw_update(E->params + zero_index(P, ZB_PARAMS, u, a),
                     E->master ? E->master + io : NULL,
                     E->grads + zero_index(P, ZB_GRADS, u, a),
                     E->adam_m + io, E->adam_v + io, n,
                     cfg->lr, cfg->beta1, cfg->beta2, b1c, b2c, cfg->eps,
                     P->tensors[i].decay ? cfg->weight_decay : 0.0f, scale);
    }
    /* CUDA: the update is queued on the compute stream; a rescue's reads (zero_opt_get, gpt2_get_own) copy after it */
    __atomic_store_n(&E->steps_applied, t, __ATOMIC_SEQ_CST);
    __atomic_store_n(&E->updating, 0, __ATOMIC_SEQ_CST);
    if ((P->zero_stage == 1 || P->zero_stage == 2) && P->num_ranks > 1) {
        unsigned long long f = 0;
        for (int u = 0; u < P->num_units; u++) {
            E->comm->cur_unit = u;
            f = backend_all_gather_start(E->comm, E->params + P->units[u].offset, P->units[u].shard);
        }
        backend_wait_comm(f); /* collectives complete in issue order */
    }
    zero_release_all(E);
    return norm;
}

#endif /* LLMC_ZERO_OPTIMIZER_H */
