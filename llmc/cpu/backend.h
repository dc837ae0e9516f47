/*
 cpu/backend.h: the CPU backend of the trainer: fp32 storage (floatX =
 float), host memory, collectives over MPI on host buffers, and the fp32
 kernels of cpu/kernels.h. The CUDA backend (llmc/cuda/backend.cuh) offers
 the same functions with the same signatures for device memory and NCCL.

 Collectives (sizes in elements; each reports to the Comm counters):
   backend_all_reduce_sum(c, buf, n)               buf[0..n) summed over ranks, in place
   backend_reduce_scatter_sum(c, buf, s)           in place over N*s elements: afterwards
                                                   buf[r*s .. r*s+s) on rank r holds the sum over
                                                   ranks of that shard; the rest of buf is
                                                   undefined (NCCL's in-place convention)
   backend_all_gather(c, buf, s)                   in place: rank r's s elements sit at
                                                   buf + r*s; afterwards every rank has all
*/
#ifndef LLMC_CPU_BACKEND_H
#define LLMC_CPU_BACKEND_H

#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "../utils.h"
#include "../comm.h"
#include "kernels.h"

#define BACKEND_NAME "cpu-fp32"
#define FLOATX_BYTES 4

/* Device / communicator set-up: nothing to do on the CPU (MPI is up). */
/* First call of main, before MPI_Init: with Debian's OpenBLAS on a CPU it
   does not recognise, re-executes the program once with OPENBLAS_CORETYPE
   set so the fast kernels load (see cpu_blas_fast_path); no-op otherwise. */
static inline void backend_preinit(char** argv) { cpu_blas_fast_path(argv); }

/* After MPI_Init: unless OMP_NUM_THREADS is set, give each rank its share
   of the node's cores (cores / ranks on the node, at least 1), so that
   several ranks on one machine do not oversubscribe it. */
static inline void backend_init(Comm* c) {
#ifdef _OPENMP
    if (!getenv("OMP_NUM_THREADS")) {
        int t = omp_get_num_procs() / (c->local_size > 0 ? c->local_size : 1);
        omp_set_num_threads(t > 0 ? t : 1);
    }
#else
    (void)c;
#endif
}

/* Before comm_finalize: nothing to release on the CPU (the CUDA backend
   destroys its NCCL communicator and waits for its streams here). */
static inline void backend_finalize(Comm* c) { (void)c; }

/* Host memory, 64-byte aligned; NULL on failure. */
static inline void* backend_malloc(size_t bytes) {
    size_t n = round_up(bytes, 64);
    return aligned_alloc(64, n);
}
static inline void backend_free(void* p) { free(p); }
static inline void backend_memset_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
static inline void backend_memcpy(void* dst, const void* src, size_t bytes) { memmove(dst, src, bytes); }
/* Host <-> "device" copies: the same memory on the CPU. */
static inline void backend_to_device(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
static inline void backend_to_host(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
static inline void backend_synchronize(void) {}

/* fp32 <-> floatX conversions for checkpoints (identity on the CPU). */
static inline void backend_floats_to_floatX(floatX* dst_device, const float* src_host, size_t n) {
    memcpy(dst_device, src_host, n * sizeof(float));
}
static inline void backend_floatX_to_floats(float* dst_host, const floatX* src_device, size_t n) {
    memcpy(dst_host, src_device, n * sizeof(float));
}

/* MPI counts are int: split large collectives into chunks that fit. */
#define BACKEND_MPI_CHUNK ((size_t)1 << 30)

static inline void backend_all_reduce_sum(Comm* c, floatX* buf, size_t n) {
    for (size_t off = 0; off < n; off += BACKEND_MPI_CHUNK) {
        size_t k = n - off < BACKEND_MPI_CHUNK ? n - off : BACKEND_MPI_CHUNK;
        MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    comm_count(c, COLL_ALL_REDUCE, (unsigned long long)n * sizeof(floatX));
}

static inline void backend_reduce_scatter_sum(Comm* c, floatX* buf, size_t shard) {
    if (shard > BACKEND_MPI_CHUNK) comm_fatal(c, "reduce-scatter of %zu elements per rank exceeds the MPI int count", shard);
    /* MPI's in-place form leaves the reduced shard at the START of buf; move
       it to this rank's place, as NCCL's in-place form does directly. */
    MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, (int)shard, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (c->rank > 0) memcpy(buf + (size_t)c->rank * shard, buf, shard * sizeof(floatX));
    comm_count(c, COLL_REDUCE_SCATTER, (unsigned long long)shard * (unsigned long long)c->world_size * sizeof(floatX));
}

/* Overlap hooks (the CUDA backend runs collectives on their own stream):
   here a collective is complete when it returns, so the fence is 0 and
   waiting is a no-op. */
static inline void backend_wait_comm(unsigned long long fence) { (void)fence; }

static inline void backend_all_gather(Comm* c, floatX* buf, size_t shard) {
    if (shard > BACKEND_MPI_CHUNK) comm_fatal(c, "all-gather of %zu elements per rank exceeds the MPI int count", shard);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)shard, MPI_FLOAT, MPI_COMM_WORLD);
    comm_count(c, COLL_ALL_GATHER, (unsigned long long)shard * (unsigned long long)c->world_size * sizeof(floatX));
}

static inline unsigned long long backend_all_gather_start(Comm* c, floatX* buf, size_t shard) {
    backend_all_gather(c, buf, shard);
    return 0;
}

/* dst[i] += src[i], i < n */
static inline void backend_add(floatX* dst, const floatX* src, size_t n) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)n; i++) dst[i] += src[i];
}

/* Bytes the backend allocated for itself outside the ledger: none on the CPU. */
static inline unsigned long long backend_internal_bytes(void) { return 0; }

/* Peak resident memory of this process in bytes (VmHWM), 0 if unknown:
   an independent measure beside the ledger. */
static inline unsigned long long backend_peak_process_bytes(void) {
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "VmHWM:", 6) == 0) { kb = strtoull(line + 6, NULL, 10); break; }
    }
    fclose(f);
    return kb * 1024ULL;
}

#endif /* LLMC_CPU_BACKEND_H */
