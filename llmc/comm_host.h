/*
 comm_host.h: the deterministic collectives on host buffers, made of one
 message per peer (so that a wait knows whose data came: comm.h's watch):
 reduce-scatter, all-gather and all-reduce of fp32 or bf16 elements, the
 rank-order sums of doubles (loss, grad norm), the shard group's int
 all-gather, a max and a barrier with the watch's timeout. The CPU
 backend's collectives and the CUDA backend's host-staged mode are these.
*/
#ifndef LLMC_COMM_HOST_H
#define LLMC_COMM_HOST_H

#include "comm.h"

/* ------------------------------------------------------------------------ */
/* Deterministic collectives on host buffers                                */
/*
 Every sum the trainer makes across ranks goes through these functions (the
 CPU backend's collectives, the CUDA backend's host-staged mode, the loss and
 grad-norm scalars). They sum in a FIXED RANK ORDER, q = 0, 1, ..., n-1, in
 fp32 (doubles for the scalars), and round once: the result depends only on
 the ranks' inputs, never on the MPI library's reduction algorithm, the
 network or the stage that called them. So stages 0-3 reduce identical
 gradients to identical bits (stage 0's all-reduce is a reduce-scatter
 followed by an all-gather, the ZeRO paper's 2 Psi).

 Elements: eb = 4 (fp32) or 2 (bf16 bits, llmc/bf16.h; summed in fp32,
 rounded to nearest even once). Sizes in elements; `shard` must be < 2^31.
 On the wire each rank sends (n-1) * shard elements per reduce-scatter or
 all-gather, what a ring sends ((n-1)/n of the full buffer), at eb bytes per
 element: bf16 stays bf16 on the wire and is never summed in bf16.
*/

/* --invariant 1 (docs/design.md section 13): the sums of the reduce-scatter
   over the n ranks (n a power of two) follow the complete binary tree,
   ((x0 + x1) + (x2 + x3)) ..., instead of the rank order: each rank's input
   is then a subtree of the global batch's tree of sequences. Set once at
   start-up, the same on every rank. */
static int hostcoll_pairwise = 0;

/* the pairwise (complete binary tree) sum of v[0..n-1] in fp32; v is
   overwritten */
static inline float hostcoll_tree_sum(float* v, int n) {
    for (int h = 1; h < n; h *= 2)
        for (int q = 0; q + h < n; q += 2 * h) v[q] = v[q] + v[q + h];
    return v[0];
}

static inline MPI_Datatype hostcoll_type(int eb) { return eb == 2 ? MPI_UINT16_T : MPI_FLOAT; }

/* The messages of one collective over mc (n ranks, this one r), shard
   elements of eb bytes each: alltoall = 1: block q of send goes to rank q,
   rank q's block for this rank lands at recv + q*shard (the own block is
   copied; send and recv must not overlap); alltoall = 0, an all-gather in
   place (send == recv): the own block at recv + r*shard goes to every peer,
   rank q's lands at recv + q*shard. Then hostcoll_wait_peers. One flight
   record (flight.h) per call: this rank sends (n-1) x shard x eb bytes. */
static inline void hostcoll_exchange(MPI_Comm mc, int n, int r, void* send, void* recv, size_t shard, int eb, int alltoall, int poll,
                                     const char* what) {
    MPI_Request sr[64], ss[64];
    MPI_Request* rq = n <= 64 ? sr : (MPI_Request*)malloc((size_t)n * sizeof(MPI_Request));
    MPI_Request* sq = n <= 64 ? ss : (MPI_Request*)malloc((size_t)n * sizeof(MPI_Request));
    if (!rq || !sq) { fprintf(stderr, "error: out of host memory in a collective\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    MPI_Datatype t = hostcoll_type(eb);
    size_t bb = shard * (size_t)eb;
    const int tag = alltoall ? 711 : 712;
    unsigned long long fid = flight_start(mc, n, what, comm_ctx_unit, comm_watch.step, (long long)bb * (n - 1), 1);
    for (int q = 0; q < n; q++) {
        rq[q] = sq[q] = MPI_REQUEST_NULL;
        if (q != r) MPI_Irecv((char*)recv + (size_t)q * bb, (int)shard, t, q, tag, mc, &rq[q]);
    }
    if (alltoall) memcpy((char*)recv + (size_t)r * bb, (const char*)send + (size_t)r * bb, bb);
    for (int k = 1; k < n; k++) {   /* to r+1, r+2, ...: the peers do not all send to rank 0 first */
        int q = (r + k) % n;
        const char* src = alltoall ? (const char*)send + (size_t)q * bb : (const char*)send + (size_t)r * bb;
        MPI_Isend(src, (int)shard, t, q, tag, mc, &sq[q]);
    }
    hostcoll_wait_peers(mc, n, r, rq, sq, poll, what, fid);
    if (rq != sr) free(rq);
    if (sq != ss) free(sq);
}

/* The sums of a reduce-scatter after its exchange: x holds n shards of
   `shard` elements of eb bytes (4: fp32, 2: bf16 bits), rank q's at
   x + q*shard; s_i = the sum over q of x[q*shard + i] in fp32, in rank
   order (tree = 0) or as the pairwise tree over q (tree = 1:
   hostcoll_tree_sum's, for any n, no limit on the rank count; bf16: each
   node of the tree rounded to bf16, as the kernels' trees); then out[i] =
   round(s_i + (add ? out[i] : 0)). Each thread holds the n values of its
   element in a heap buffer of n floats (exits the job if it cannot be
   had). threads: 1 to parallelise over the elements with OpenMP. */
static inline void hostcoll_sum_shards(const void* scratch, int n, size_t shard, int eb, void* outp, int add, int tree, int threads) {
    long ns = (long)shard;
#pragma omp parallel if (threads)
    {
        float* v = tree ? (float*)malloc((size_t)n * sizeof(float)) : NULL;
        if (tree && !v) { fprintf(stderr, "error: out of host memory in a collective (the tree over %d ranks)\n", n); MPI_Abort(MPI_COMM_WORLD, 1); }
        if (eb == 4) {
            const float* x = (const float*)scratch;
            float* out = (float*)outp;
#pragma omp for schedule(static)
            for (long i = 0; i < ns; i++) {
                float s = x[i];
                if (tree) {
                    for (int q = 0; q < n; q++) v[q] = x[(size_t)q * shard + (size_t)i];
                    s = hostcoll_tree_sum(v, n);
                } else
                    for (int q = 1; q < n; q++) s += x[(size_t)q * shard + (size_t)i];
                out[i] = s + (add ? out[i] : 0.0f); /* + 0 either way: -0 sums become +0 as in an accumulator */
            }
        } else {
            const uint16_t* x = (const uint16_t*)scratch;
            uint16_t* out = (uint16_t*)outp;
#pragma omp for schedule(static)
            for (long i = 0; i < ns; i++) {
                float s = bf16_bits_to_float(x[i]);
                if (tree) {
                    for (int q = 0; q < n; q++) v[q] = bf16_bits_to_float(x[(size_t)q * shard + (size_t)i]);
                    for (int h = 1; h < n; h *= 2)   /* rounded to bf16 at every node: the tree of the kernels (cpu_inv_round) */
                        for (int q = 0; q + h < n; q += 2 * h) v[q] = bf16_bits_to_float(bf16_bits_from_float(v[q] + v[q + h]));
                    s = v[0];
                } else
                    for (int q = 1; q < n; q++) s += bf16_bits_to_float(x[(size_t)q * shard + (size_t)i]);
                s += add ? bf16_bits_to_float(out[i]) : 0.0f;
                out[i] = bf16_bits_from_float(s);
            }
        }
        free(v);
    }
}

/* Reduce-scatter, in place over n*shard elements of buf (n = size of mc,
   r = this rank in mc): an all-to-all of the n shards (rank q's shard k goes
   to rank k) into `scratch` (n*shard elements, must not overlap buf), then
   s_i = sum over q in rank order of scratch[q*shard + i], in fp32 (with
   --invariant 1, hostcoll_pairwise: the pairwise tree over q, at any rank
   count); then (hostcoll_sum_shards)
     acc == NULL: buf[r*shard + i] = round(s_i + 0)    (NCCL's in-place layout)
     acc != NULL: acc[i] = round(s_i + acc[i])          (accumulate, shard elements)
   (the + 0 makes both forms agree bit for bit on a zero accumulator)
   threads: 1 to parallelise the sum with OpenMP and block in MPI_Wait (the
   main thread, not in a parallel region), 0 to stay on the calling thread
   and poll (the communication thread). */
static inline void hostcoll_reduce_scatter(MPI_Comm mc, void* buf, size_t shard, int eb, void* scratch, void* acc,
                                           int threads) {
    int n, r;
    MPI_Comm_size(mc, &n);
    MPI_Comm_rank(mc, &r);
    hostcoll_exchange(mc, n, r, buf, scratch, shard, eb, 1, !threads, comm_ctx_what ? comm_ctx_what : "reduce-scatter");
    void* out = acc ? acc : (char*)buf + (size_t)r * shard * (size_t)eb;
    hostcoll_sum_shards(scratch, n, shard, eb, out, acc != NULL, hostcoll_pairwise, threads);
}

/* All-gather, in place: rank r's shard elements sit at buf + r*shard;
   afterwards every rank has all n*shard. Exact (no arithmetic). poll as
   hostcoll_wait_peers. */
static inline void hostcoll_all_gather(MPI_Comm mc, void* buf, size_t shard, int eb, int poll) {
    int n, r;
    MPI_Comm_size(mc, &n);
    MPI_Comm_rank(mc, &r);
    hostcoll_exchange(mc, n, r, buf, buf, shard, eb, 0, poll, comm_ctx_what ? comm_ctx_what : "all-gather");
}

/* All-reduce of n elements in place, deterministic: a reduce-scatter of the
   n/k-element parts (k = ranks of mc, n a multiple of k) and an all-gather,
   the sums in rank order as hostcoll_reduce_scatter. scratch: n elements. */
static inline void hostcoll_all_reduce(MPI_Comm mc, void* buf, size_t n, int eb, void* scratch, int threads) {
    int k;
    MPI_Comm_size(mc, &k);
    if (k == 1) return;
    hostcoll_reduce_scatter(mc, buf, n / (size_t)k, eb, scratch, NULL, threads);
    hostcoll_all_gather(mc, buf, n / (size_t)k, eb, !threads);
}

/* Sum k doubles across the ranks of mc in place, in rank order (k <= 16). */
static inline void hostcoll_sum_doubles(MPI_Comm mc, double* x, int k) {
    int n, r;
    MPI_Comm_size(mc, &n);
    MPI_Comm_rank(mc, &r);
    double* all = (double*)malloc_or_die((size_t)n * (size_t)k * sizeof(double), "scalar all-gather");
    memcpy(all + (size_t)r * k, x, (size_t)k * sizeof(double));
    /* an all-gather in place of k doubles = 2k floats (the bits unchanged) */
    hostcoll_exchange(mc, n, r, all, all, (size_t)(2 * k), 4, 0, 0, comm_ctx_what ? comm_ctx_what : "scalar all-gather (loss, grad norm)");
    for (int j = 0; j < k; j++) {
        double s = all[j];
        if (hostcoll_pairwise && (n & (n - 1)) == 0) {   /* --invariant 1: the complete binary tree over the ranks */
            for (int h = 1; h < n; h *= 2)
                for (int q = 0; q + h < n; q += 2 * h) all[(size_t)q * k + j] = all[(size_t)q * k + j] + all[(size_t)(q + h) * k + j];
            s = all[j];
        } else
            for (int q = 1; q < n; q++) s += all[(size_t)q * k + j];
        x[j] = s;
    }
    free(all);
}

/* Sum n doubles across ranks in place (host memory; the loss),
   deterministically (hostcoll_sum_doubles). Counted as COLL_SCALARS with 8
   bytes per value. */
static inline void comm_allreduce_sum_host(Comm* c, double* x, int n) {
    hostcoll_sum_doubles(MPI_COMM_WORLD, x, n);
    comm_count(c, COLL_SCALARS, (unsigned long long)n * sizeof(double), c->world_size);
}

/* The same over the shard group (the grad-norm squares: each group holds
   one copy of every gradient). */
static inline void comm_group_sum_host(Comm* c, double* x, int n) {
    hostcoll_sum_doubles(c->group_host, x, n);
    comm_count(c, COLL_SCALARS, (unsigned long long)n * sizeof(double), c->group_size);
}

/* All-gather of n ints per rank of the shard group (host memory): out
   (group_size*n) gets group rank q's values at out + q*n. Counted as an
   all-gather of the full output. */
static inline void comm_group_gather_ints(Comm* c, const int* mine, int n, int* out) {
    memcpy(out + (size_t)c->group_rank * n, mine, (size_t)n * sizeof(int));
    hostcoll_exchange(c->group_host, c->group_size, c->group_rank, out, out, (size_t)n, 4, 0, 0, "the embedding rows' token all-gather");
    comm_count(c, COLL_ALL_GATHER, (unsigned long long)n * (unsigned long long)c->group_size * sizeof(int), c->group_size);
}

/* The interrupt check at a step boundary (interrupt.h): the largest signal
   number any rank received (0: none), on every rank. An all-gather of one
   int per rank over MPI_COMM_WORLD made of one message per peer, so that a
   timeout in it names the ranks that never came (MPI's own all-reduce could
   not); not counted in the traffic table (it is no collective of the ZeRO
   engine, like comm_check_all's). The buffer is allocated once. Collective. */
static inline int comm_agree_interrupt(Comm* c) {
    static int* all = NULL;
    static int cap = 0;
    int mine = intr_pending(), n = c->world_size;
    if (n == 1) return mine;
    if (cap < n) { free(all); all = (int*)malloc_or_die((size_t)n * sizeof(int), "the interrupt check"); cap = n; }
    all[c->rank] = mine;
    hostcoll_exchange(MPI_COMM_WORLD, n, c->rank, all, all, 1, 4, 0, 0, "the interrupt check (at the end of each step)");
    int any = 0;
    for (int q = 0; q < n; q++) if (all[q] > any) any = all[q];
    return any;
}

static inline double comm_allreduce_max_host(Comm* c, double x) {
    double y = x;
    (void)c;
    MPI_Request req;
    MPI_Iallreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req);
    comm_wait_request(&req, 0, "a max all-reduce over every rank");
    return y;
}

static inline void comm_barrier(Comm* c) {
    (void)c;
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    comm_wait_request(&req, 0, comm_ctx_what ? comm_ctx_what : "a barrier over every rank");
}


#endif /* LLMC_COMM_HOST_H */
