/*
 cpu/backend.h: the CPU backend of the trainer: host memory, the
 deterministic MPI collectives of comm.h on host buffers, and the kernels
 of the headers beside this one. Two programs come from it: fp32 storage
 (floatX = float, ./train_gpt_cpu) and, with -DLLMC_BF16, bf16 storage with
 fp32 master weights and Adam moments (./train_gpt_cpu_bf16). The CUDA
 backend (llmc/cuda/backend.cuh) offers the same functions with the same
 signatures for device memory and NCCL.

 Collectives of the ZeRO engine (sizes in elements; each reports to the
 Comm counters; each returns a fence, 0 = already complete, to be passed to
 backend_wait_comm before the buffers are touched again). G = ranks of the
 shard group (c->group_comm), r = this rank in it; R = replicas (HSDP):
   backend_reduce_scatter_start(c, buf, s, acc)    in place over G*s elements of buf: the
                                                   sum over the group (rank order, fp32, one
                                                   rounding) of shard r lands at buf + r*s on
                                                   rank r (acc == NULL; the rest of buf is
                                                   undefined: NCCL's in-place convention), or
                                                   is added into acc[0..s) (acc != NULL)
   backend_all_gather_start(c, buf, s)             in place: rank r's s elements sit at
                                                   buf + r*s; afterwards every rank has all
   backend_all_reduce_replicas_start(c, buf, n)    buf[0..n) summed over the R replicas of
                                                   this shard (HSDP; n a multiple of R)
 They run on the communication thread (comm_thread.h) when c->overlap is
 set and MPI provides MPI_THREAD_MULTIPLE, else at once. The reduce-scatter
 and all-reduce receive into c->rs_scratch (one full unit; the engine
 allocates it through the ledger as "comm scratch": BACKEND_RS_SCRATCH).
*/
#ifndef LLMC_CPU_BACKEND_H
#define LLMC_CPU_BACKEND_H

#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <mpi.h>
#include "../utils.h"
#include "../comm_quant.h"
#include "kernels.h"
#include "comm_thread.h"

#ifdef LLMC_BF16
#define BACKEND_NAME "cpu-bf16"
#else
#define BACKEND_NAME "cpu-fp32"
#endif
/* 1 when this process measured the matmul paths at its start-up (no file
   of its level and thread count): the measurement's library buffers are
   then in its memory before any step, and --calibrate-workspace refuses
   to calibrate on top of them (run --calibrate-matmul first, as make does). */
static inline int backend_kernels_measured_here(void) {
#if defined(LLMC_BF16)
    return cpu_gemm_state.choice.how == CPU_GEMM_BY_MEASURED;
#else
    return 0;
#endif
}
/* backend_matmul_desc(): one line for the start-up output saying which
   library multiplies the matrices in this program on this CPU (matmul.h),
   at the ISA level of isa.h; in the bf16 program the path of every shape
   class and the measured rates that decided it (matmul_choice.h). */
static inline const char* backend_matmul_desc(void) {
#if defined(LLMC_BF16)
    static char buf[1600];
    cpu_gemm_describe(buf, sizeof(buf));
    return buf;
#elif defined(LLMC_USE_DNNL)
    return cpu_isa() >= CPU_ISA_AVX512 ? "oneDNN's fp32 sgemm (AVX-512 FMA kernels)" : "oneDNN's fp32 sgemm (AVX2 FMA kernels)";
#else
    return cpu_isa() >= CPU_ISA_AVX512 ? "OpenBLAS's fp32 sgemm (AVX-512 kernels)" : "OpenBLAS's fp32 sgemm (AVX2 kernels)";
#endif
}

/* backend_cpu_desc(): the start-up line naming the CPU, the ISA level its
   kernels run at (isa.h: detection, LLMC_CPU_ISA, oneDNN) and what each
   kernel family runs there. */
static inline void backend_cpu_desc(char* out, size_t n) {
    char isa[512];
    cpu_isa_describe(isa, sizeof(isa));
#ifdef LLMC_BF16
    const char* mode = cpu_gemm_mode();
    int att_prim = !cpu_gemm_path(CPU_MM_ATTENTION);
#endif
    snprintf(out, n, "%s; kernels: matmul %s, attention %s, elementwise %s",
             isa,
#ifdef LLMC_BF16
             !strcmp(mode, "primitive") ? "bf16 primitive" : !strcmp(mode, "fp32") ? "fp32 sgemm on copies" : "per class (see matmul:)",
             att_prim ? "bf16 primitive (heads packed)" : "fp32 sgemm on fp32 tiles"
#else
             "fp32 sgemm", "fp32 sgemm per head"
#endif
             , cpu_ew_desc());
}

/* The LM head's matmuls follow (1) or the blocks' (0): the bf16 program
   chooses the path of each shape class separately (matmul_bf16.h); a no-op
   elsewhere. Called by gpt.h around the LM head's products. */
static inline void backend_matmul_lm_head(int on) {
#ifdef LLMC_BF16
    cpu_gemm_lm_head(on);
#else
    (void)on;
#endif
}

/* The OpenMP threads of this rank: cores / (ranks on its node), at least
   1, unless OMP_NUM_THREADS is set. Idempotent. */
static inline void backend_set_threads(Comm* c) {
#ifdef _OPENMP
    if (!getenv("OMP_NUM_THREADS")) {
        int t = omp_get_num_procs() / (c->local_size > 0 ? c->local_size : 1);
        omp_set_num_threads(t > 0 ? t : 1);
    }
#else
    (void)c;
#endif
}

/* Collective, after comm_init and before any matmul: the kernel paths
   every rank runs, decided once. bf16 program: every rank checks its
   LLMC_BF16_MATMUL (a bad value or the primitive forced below avx512: one
   error, exit 1 on every rank); the lowest ISA level over the ranks is
   all-reduced; rank 0 decides (matmul_choice.h: the variable, the
   calibration file, or a short measurement on its own cores) and
   broadcasts its decision; every rank applies it. The others wait for
   rank 0's decision under comm_solo_begin's bound, not the collective
   timeout (a measurement takes seconds to a minute). A no-op in the fp32
   program. */
static inline void backend_agree_kernels(Comm* c) {
#ifdef LLMC_BF16
    backend_set_threads(c);
    char err[ERRLEN] = "";
    if (cpu_isa_error()[0]) snprintf(err, sizeof(err), "%s", cpu_isa_error());
    else cpu_gemm_choose(err, sizeof(err));
    comm_check_all(c, err);
    int mine = (int)cpu_isa(), lowest = mine;
    MPI_Request rq;
    MPI_Iallreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "the lowest ISA level over the ranks (an all-reduce, for the bf16 matmul paths)");
    CpuGemmChoice ch;
    memset(&ch, 0, sizeof(ch));
    comm_solo_begin("deciding the bf16 matmul paths (it measures them on its own cores when the calibration file is missing or not this CPU's)");
    if (c->rank == 0) { cpu_gemm_decide(&ch, lowest, err, sizeof(err)); comm_test_slow_start(); }
    comm_check_all(c, err);
    comm_solo_end();
    MPI_Ibcast(&ch, (int)sizeof(ch), MPI_BYTE, 0, MPI_COMM_WORLD, &rq);
    comm_wait_request(&rq, 0, "the bf16 matmul paths (a broadcast from rank 0)");
    cpu_gemm_apply(&ch);
#else
    (void)c;
#endif
}

/* The kernel paths as "key value" pairs for the agreed configuration text
   (comm_agree_config): the bf16 program's paths per class (equal on every
   rank after backend_agree_kernels) and this rank's LLMC_BF16_MATMUL
   (environment, which must be the same on every rank); "matmul fp32" in
   the fp32 program. */
static inline void backend_kernels_text(char* out, size_t n) {
#ifdef LLMC_BF16
    char paths[256];
    cpu_gemm_paths_text(paths, sizeof(paths));
    const char* e = getenv("LLMC_BF16_MATMUL");
    snprintf(out, n, "bf16_matmul %s bf16_matmul_by %s bf16_matmul_env %s", paths, cpu_gemm_how_names[cpu_gemm_state.choice.how],
             e && e[0] ? e : "-");
#else
    snprintf(out, n, "matmul fp32");
#endif
}

/* --calibrate-matmul (one process): the bf16 program measures both matmul
   paths per class and writes the calibration file (matmul_choice.h);
   0, or -1 with err. The fp32 program has nothing to choose: says so, 0. */
static inline int backend_calibrate_kernels(Comm* c, char* err, size_t n) {
    backend_set_threads(c);
#ifdef LLMC_BF16
    return cpu_gemm_calibrate(err, n);
#else
    (void)err; (void)n;
    printf("calibrate-matmul: the fp32 program has one matmul path (the fp32 sgemm): nothing to calibrate\n");
    return 0;
#endif
}

/* the reduce-scatter needs a receive area of one full unit (comm.h) */
#define BACKEND_RS_SCRATCH 1

/* Device / communicator set-up: nothing to do on the CPU (MPI is up). */
/* First call of main, before MPI_Init: with Debian's OpenBLAS on a CPU it
   does not recognise, re-executes the program once with OPENBLAS_CORETYPE
   set so the fast kernels load (see cpu_blas_fast_path); no-op otherwise. */
static inline void backend_preinit(char** argv) {
    /* Resident memory that does not depend on the machine's load (the fit
       check predicts it, llmc/fit.h): one malloc arena for all threads
       (glibc opens a new one whenever a thread finds the others locked),
       and a fixed mmap threshold of 128 KiB, so that every large buffer is
       returned to the system when freed (glibc's default raises the
       threshold after each large free and then keeps such buffers in the
       heap). Without them the calibrated training workspace read 28 MB on
       a quiet machine and 36-62 MB beside other work; with them 5.0-5.1 MB
       either way (AMD EPYC, 2 cores). MALLOC_ARENA_MAX /
       MALLOC_MMAP_THRESHOLD_ in the environment take precedence. */
    cpu_malloc_hugepages(argv);   /* may re-execute the program once (cpu/common.h) */
    if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 1);
    if (!getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    cpu_isa_init();   /* the ISA level (isa.h), capped in oneDNN before its first use */
    cpu_blas_fast_path(argv);
}

/* After MPI_Init: unless OMP_NUM_THREADS is set, give each rank its share
   of the node's cores (cores / ranks on the node, at least 1), so that
   several ranks on one machine do not oversubscribe it. */
static inline void backend_init(Comm* c) {
    /* a bad LLMC_CPU_ISA / LLMC_BF16_MATMUL, or a CPU below avx2: one
       error line, exit 1 on every rank */
    char err[ERRLEN] = "";
    if (cpu_isa_error()[0]) snprintf(err, sizeof(err), "%s", cpu_isa_error());
#ifdef LLMC_BF16
    else cpu_gemm_choose(err, sizeof(err));
#endif
    comm_check_all(c, err);
    backend_set_threads(c);
    cpu_ct.comm = c;
    if (c->overlap && c->thread_multiple) ct_start(c);
}

/* Host memory, 64-byte aligned; NULL on failure. */
static inline void* backend_malloc(size_t bytes) {
    size_t n = round_up(bytes, 64);
    return aligned_alloc(64, n);
}
static inline void backend_free(void* p) { free(p); }
static inline void backend_memset_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
/* all bits set: a NaN in fp32 and in bf16 (debug poisoning) */
static inline void backend_memset_nan(void* p, size_t bytes) { memset(p, 0xFF, bytes); }
static inline void backend_memcpy(void* dst, const void* src, size_t bytes) { memmove(dst, src, bytes); }
/* Host <-> "device" copies: the same memory on the CPU. */
static inline void backend_to_device(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
static inline void backend_to_host(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
static inline void backend_synchronize(void) {}

/* fp32 <-> floatX conversions for checkpoints and initialisation (round to
   nearest even into bf16; exact the other way; identity in fp32). */
static inline void backend_floats_to_floatX(floatX* dst_device, const float* src_host, size_t n) {
#ifdef LLMC_BF16
    for (size_t i = 0; i < n; i++) dst_device[i] = stx(src_host[i]);
#else
    memcpy(dst_device, src_host, n * sizeof(float));
#endif
}
static inline void backend_floatX_to_floats(float* dst_host, const floatX* src_device, size_t n) {
#ifdef LLMC_BF16
    for (size_t i = 0; i < n; i++) dst_host[i] = ldx(src_device[i]);
#else
    memcpy(dst_host, src_device, n * sizeof(float));
#endif
}

static inline void backend_check_count(Comm* c, const char* what, size_t shard) {
    if (shard > (size_t)0x7fffffff) comm_fatal(c, "%s of %zu elements per rank exceeds the MPI int count", what, shard);
}

static inline unsigned long long backend_reduce_scatter_start(Comm* c, floatX* buf, size_t shard, floatX* acc) {
    backend_check_count(c, "reduce-scatter", shard);
    size_t need = shard * (size_t)c->group_size * sizeof(floatX);
    if (c->rs_scratch_bytes < need) comm_fatal(c, "reduce-scatter of %zu bytes but the comm scratch holds %zu (a plan bug)", need, c->rs_scratch_bytes);
    unsigned long long bytes = (unsigned long long)shard * (unsigned long long)c->group_size * sizeof(floatX);
    comm_count(c, COLL_REDUCE_SCATTER, bytes, c->group_size);
    CtOp op = {.kind = CT_REDUCE_SCATTER, .mc = c->group_comm, .buf = buf, .count = shard, .acc = acc, .eb = FLOATX_BYTES,
               .trace_kind = COLL_REDUCE_SCATTER, .trace_unit = c->cur_unit, .trace_bytes = bytes};
    return ct_submit(&op);
}

static inline unsigned long long backend_all_gather_start(Comm* c, floatX* buf, size_t shard) {
    backend_check_count(c, "all-gather", shard);
    unsigned long long bytes = (unsigned long long)shard * (unsigned long long)c->group_size * sizeof(floatX);
    int kind = c->purpose_embedding ? COLL_EMB_GATHER : COLL_ALL_GATHER;
    comm_count(c, COLL_ALL_GATHER, bytes, c->group_size);
    CtOp op = {.kind = CT_ALL_GATHER, .mc = c->group_comm, .buf = buf, .count = shard, .eb = FLOATX_BYTES, .trace_kind = kind,
               .trace_unit = c->cur_unit, .trace_bytes = bytes, .keep = c->keep, .keep_off = c->keep_off,
               .keep_count = c->keep_count};
    c->keep = NULL;
    return ct_submit(&op);
}

/* qwZ: the all-gather of backend_all_gather_start with every shard sent as
   int8 blocks and fp32 scales (hostcoll_all_gather_quantized; Q: unit u's
   layout, qblocks its scales per record), received into the comm scratch;
   counted as an all-gather of the records' bytes. */
static inline unsigned long long backend_all_gather_quantized_start(Comm* c, floatX* buf, const QuantLayout* Q, size_t qblocks, int u) {
    size_t rec = quant_record_bytes(qblocks, Q->shard, 8);
    backend_check_count(c, "all-gather (int8)", rec / 4);
    size_t need = rec * (size_t)c->group_size;
    if (c->rs_scratch_bytes < need) comm_fatal(c, "int8 all-gather of %zu bytes but the comm scratch holds %zu (a plan bug)", need, c->rs_scratch_bytes);
    unsigned long long bytes = (unsigned long long)need;
    comm_count(c, COLL_ALL_GATHER, bytes, c->group_size);
    CtOp op = {.kind = CT_ALL_GATHER_QUANTIZED, .mc = c->group_comm, .buf = buf, .count = Q->shard, .eb = FLOATX_BYTES,
               .trace_kind = COLL_ALL_GATHER, .trace_unit = u, .trace_bytes = bytes, .ql = Q, .qblocks = qblocks,
               .keep = c->keep, .keep_off = c->keep_off, .keep_count = c->keep_count};
    c->keep = NULL;
    return ct_submit(&op);
}

/* qgZ: the reduce-scatter of backend_reduce_scatter_start (acc != NULL)
   as hostcoll_reduce_scatter_quantized's two hops of int8/int4 records
   (Q: unit u's layout with its bits, qblocks its scales per record), in the
   comm scratch; counted as COLL_QG_INSIDE (the N records of the first hop)
   and COLL_QG_ACROSS (the M of the second), each where it has peers. */
static inline unsigned long long backend_reduce_scatter_quantized_start(Comm* c, floatX* buf, const QuantLayout* Q, size_t qblocks,
                                                                        floatX* acc, int u) {
    size_t rec = quant_record_bytes(qblocks, Q->shard, Q->bits);
    backend_check_count(c, "reduce-scatter (qgZ)", (size_t)c->qg_M * rec / 4);
    size_t need = 2 * (size_t)c->group_size * rec + 4 * (size_t)c->qg_M * Q->shard + 2 * (size_t)c->qg_M * rec + 4 * Q->shard;
    if (c->rs_scratch_bytes < need) comm_fatal(c, "qgZ reduce-scatter needs %zu bytes but the comm scratch holds %zu (a plan bug)", need, c->rs_scratch_bytes);
    unsigned long long inside = (unsigned long long)c->group_size * rec, across = (unsigned long long)c->qg_M * rec;
    if (c->qg_L > 1) comm_count(c, COLL_QG_INSIDE, inside, c->qg_L);
    if (c->qg_M > 1) comm_count(c, COLL_QG_ACROSS, across, c->qg_M);
    CtOp op = {.kind = CT_REDUCE_SCATTER_QUANTIZED, .mc = c->qg_intra, .buf = buf, .count = Q->shard, .acc = acc,
               .eb = FLOATX_BYTES, .trace_kind = COLL_QG_ACROSS, .trace_unit = u, .trace_bytes = inside + across, .ql = Q,
               .qblocks = qblocks, .mc2 = c->qg_inter, .L = c->qg_L, .M = c->qg_M, .nodes = c->group_nodes};
    return ct_submit(&op);
}

/* hpZ: the all-gather of a unit from the secondary shard, in place over
   the K ranks of c->secondary_comm: this rank's part (part elements, from
   sec) lands at buf + k*part (k = its secondary rank), the others' after
   it; counted as COLL_SECONDARY_GATHER of K*part elements. */
static inline unsigned long long backend_all_gather_secondary_start(Comm* c, floatX* buf, size_t part, const floatX* sec) {
    backend_check_count(c, "secondary all-gather", part);
    unsigned long long bytes = (unsigned long long)part * (unsigned long long)c->secondary_size * sizeof(floatX);
    comm_count(c, COLL_SECONDARY_GATHER, bytes, c->secondary_size);
    CtOp op = {.kind = CT_SECONDARY_GATHER, .mc = c->secondary_comm, .buf = buf, .count = part, .eb = FLOATX_BYTES,
               .trace_kind = COLL_SECONDARY_GATHER, .trace_unit = c->cur_unit, .trace_bytes = bytes, .keep = (void*)sec,
               .keep_count = part};
    return ct_submit(&op);
}

static inline unsigned long long backend_all_reduce_replicas_start(Comm* c, floatX* buf, size_t n) {
    backend_check_count(c, "all-reduce", n);
    if (c->rs_scratch_bytes < n * sizeof(floatX)) comm_fatal(c, "all-reduce of %zu elements but the comm scratch holds %zu bytes (a plan bug)", n, c->rs_scratch_bytes);
    unsigned long long bytes = (unsigned long long)n * sizeof(floatX);
    comm_count(c, COLL_ALL_REDUCE, bytes, c->replica_size);
    CtOp op = {.kind = CT_ALL_REDUCE, .mc = c->replica_comm, .buf = buf, .count = n, .eb = FLOATX_BYTES,
               .trace_kind = COLL_ALL_REDUCE, .trace_unit = c->cur_unit, .trace_bytes = bytes};
    return ct_submit(&op);
}

/* Wait until the collectives up to `fence` are complete (0: nothing). */
static inline void backend_wait_comm(unsigned long long fence) { ct_wait(fence); }

/* Seconds the collectives took and seconds callers were blocked waiting
   for them, since the start (the communication thread's busy time and the
   exposed part of it; without the thread both are the collectives' time). */
static inline void backend_comm_seconds(double* busy, double* waited) {
    *busy = cpu_ct.busy_s; *waited = cpu_ct.wait_s;
}

/* dst[i] = round(dst[i] + src[i]), i < n */
static inline void backend_add(floatX* dst, const floatX* src, size_t n) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)n; i++) dst[i] = stx(ldx(dst[i]) + ldx(src[i]));
}

/* Shutdown hook before comm_finalize: drains and joins the communication
   thread (the CUDA backend destroys NCCL). */
static inline void backend_finalize(Comm* c) { (void)c; ct_stop(); }

/* Bytes the backend allocated for itself outside the ledger: none in the
   fp32 program; in the bf16 program the matmul scratch (matmul_bf16.h: oneDNN's
   scratchpad or the fp32 copies of the operands). */
static inline unsigned long long backend_internal_bytes(void) {
#ifdef LLMC_BF16
    return cpu_gemm_internal_bytes();
#else
    return 0;
#endif
}

/* The fit check's model of the kernels' scratch that depends on the
   shapes (bytes per rank), on this rank's threads: the bf16 program's
   matmul buffers (into *copies as well): the fp32 copies of the operands
   (cpu_gemm_copy_predict_model: L blocks, C channels, LM-head chunks of Vc
   rows (the last of last_rows), B*T rows per micro-step, training or
   eval_only) and the primitive's scratchpad and attention's packed heads
   (cpu_gemm_prim_predict_model: oneDNN's own descriptor of each call); its fp32
   attention's per-thread buffers (cpu_attention_scratch_predict: NH
   heads, T^2 and T*C/NH floats); 0 in the fp32 program (oneDNN's sgemm
   buffers are in the calibrated workspace). backend_matmul_copy_bytes:
   what the run holds of those matmul buffers (after the steps: the same
   buffers, as allocated). */
static inline unsigned long long backend_predict_kernel_scratch(int L, int C, int NH, int Vc, int last_rows, int B, int T, int eval_only,
                                                                unsigned long long* copies) {
#ifdef LLMC_BF16
    int nth = cpu_num_threads();
    *copies = cpu_gemm_copy_predict_model(L, C, Vc, last_rows, B * T, eval_only, nth) +
              cpu_gemm_prim_predict_model(L, C, NH, Vc, last_rows, B * T, T, eval_only);
    return *copies + cpu_attention_scratch_predict(B, T, C, NH, eval_only, nth);
#else
    (void)L; (void)C; (void)NH; (void)Vc; (void)last_rows; (void)B; (void)T; (void)eval_only;
    *copies = 0;
    return 0;
#endif
}
/* Frees the kernels' own buffers that outlive a step (the bf16 program's
   fp32 operand copies, the primitive's plans, scratchpad and packed heads)
   and gives the heap's free memory back to the system (malloc_trim): for
   --calibrate-workspace between its two shapes. */
static inline void backend_release_kernel_buffers(void) {
#ifdef LLMC_BF16
    cpu_gemm_drop_copies();
#else
    malloc_trim(0);
#endif
}
static inline unsigned long long backend_matmul_copy_bytes(void) {
#ifdef LLMC_BF16
    return cpu_gemm_copy_bytes() + cpu_gemm_prim_bytes();
#else
    return 0;
#endif
}

/* The fit check (llmc/fit.h): on the CPU the backend's memory is the
   process's host memory, so the budget is the host's (cgroup, MemAvailable
   or --memory-limit: nothing to change here) and the process's baseline,
   host bookkeeping and data loaders count toward the peak. */
static inline void backend_memory_budget(unsigned long long* bytes, char* source, size_t n, int local_rank, int ranks_on_node) {
    (void)bytes; (void)source; (void)n; (void)local_rank; (void)ranks_on_node;
}
static inline int backend_host_counts(void) { return 1; }
/* The key of the workspace calibration a run reads and --calibrate-workspace
   writes (llmc/fit.h, fit_workspace_path): ".<level>" where LLMC_CPU_ISA
   caps the level below the CPU's, ".threads<T>" where the OpenMP threads
   per rank are not the default (every core the process may use); "" for
   neither. */
static inline void backend_workspace_key(char* out, size_t n) {
    const CpuIsaState* s = cpu_isa_init();
    char lv[32] = "", th[32] = "";
    if (s->level < s->detected) snprintf(lv, sizeof(lv), ".%s", cpu_isa_names[s->level]);
#ifdef _OPENMP
    if (cpu_num_threads() != omp_get_num_procs()) snprintf(th, sizeof(th), ".threads%d", cpu_num_threads());
#endif
    snprintf(out, n, "%s%s", lv, th);
}

/* The compute rate of this program's matmuls on this rank (flops per
   second): the best of 3 products of 512 x 512 x 512 through matmul_forward,
   for -z auto's cost model. Every rank measures at once, so ranks sharing
   cores measure their share. */
static inline double backend_matmul_flops(void) {
    const int n = 512;
    size_t e = (size_t)n * n;
    floatX* a = (floatX*)backend_malloc(e * sizeof(floatX));
    floatX* w = (floatX*)backend_malloc(e * sizeof(floatX));
    floatX* o = (floatX*)backend_malloc(e * sizeof(floatX));
    if (!a || !w || !o) { backend_free(a); backend_free(w); backend_free(o); return 0.0; }
    for (size_t i = 0; i < e; i++) { a[i] = stx(0.001f * (float)(i % 97)); w[i] = stx(0.002f * (float)(i % 89)); }
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        double t0 = wall_seconds();
        matmul_forward(o, a, w, NULL, n, n, n);
        double t = wall_seconds() - t0;
        if (r > 0 && t < best) best = t;   /* the first call creates oneDNN's primitive */
    }
    backend_free(a); backend_free(w); backend_free(o);
    return 2.0 * n * (double)n * n / best;
}

/* Peak resident memory of this process in bytes (VmHWM), 0 if unknown:
   an independent measure beside the ledger. */
static inline unsigned long long backend_peak_process_bytes(void) { return proc_field_bytes("/proc/self/status", "VmHWM:"); }

#endif /* LLMC_CPU_BACKEND_H */
