/*
 cuda/backend.cuh: the CUDA backend of the trainer: bf16 storage (floatX =
 __nv_bfloat16), fp32 master weights and Adam moments, device memory, NCCL
 or host-staged collectives, and the kernels of the other headers in this
 directory. It offers exactly the functions of llmc/cpu/backend.h and the
 CPU kernel headers, with the same names and signatures, plus
 backend_init(Comm*) (GPU, streams, NCCL or host-staged collectives; call it
 right after comm_init) and backend_finalize (before comm_finalize).

 Execution model (what gpt.h and zero.h can rely on):
   - every kernel, memset and device copy runs on ONE compute stream, in
     program order; the calls return before the GPU is done (asynchronous);
   - NCCL collectives run on a comm stream, ordered against the compute
     stream by events (comm_nccl.cuh); no device-wide synchronisation inside
     a step. Host-staged collectives (ranks sharing a GPU) wait for the
     compute stream, sum on the host and return complete (fence 0);
   - the host waits for the GPU only in: backend_to_host, backend_floatX_to_
     floats, backend_floats_to_floatX, sum_squares (the grad norm),
     backend_synchronize, backend_free (cudaFree), backend_malloc
     (cudaMalloc may synchronise), backend_to_device (only until an earlier
     upload has left its pinned staging buffer, see there) and the
     host-staged collectives. gpt2_forward with targets therefore waits once
     per micro-step (the losses), zero_grad_norm once per tensor.
   - all int* token arrays given to kernels are device memory.

 Memory: backend_malloc = cudaMalloc (NULL on failure; 256-byte aligned).
 Outside the ledger, and seen only by backend_peak_process_bytes(): the CUDA
 context, the 32 MiB cuBLAS workspace, NCCL's buffers, the stream-ordered
 scratch of some kernels (column-sum partials, the token sort) and pinned
 host staging buffers (host memory, not counted: 2 x 4 MiB for uploads, a
 grow-only one for the bf16 conversions, three grow-only ones for the
 host-staged collectives).
*/
#ifndef LLMC_CUDA_BACKEND_CUH
#define LLMC_CUDA_BACKEND_CUH

#include "common.cuh"   /* floatX = __nv_bfloat16 before anything checks it */
#include <mpi.h>
#include "../utils.h"
#include "../comm_host.h"
#include "encoder.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "attention.cuh"
#include "gelu.cuh"
#include "fused_classifier.cuh"
#include "adamw.cuh"
#include "global_norm.cuh"
#include "comm_nccl.cuh"

#define BACKEND_NAME "cuda-bf16"
/* one line for the start-up output: what multiplies the matrices */
/* no start-up measurement on the GPU (llmc/cpu/backend.h) */
static inline int backend_kernels_measured_here(void) { return 0; }
static inline const char* backend_matmul_desc(void) { return "cuBLASLt bf16, fp32 accumulation"; }
/* the twin of the CPU backend's start-up line: here the kernels run on the GPU */
static inline void backend_cpu_desc(char* out, size_t n) { snprintf(out, n, "kernels on the GPU (CUDA, cuBLASLt); the host CPU only drives them"); }
/* the twins of the CPU backend's kernel-path hooks: cuBLASLt is the one
   matmul path here, so there is nothing to choose or agree on */
static inline void backend_matmul_lm_head(int on) { (void)on; }
static inline void backend_agree_kernels(Comm* c) { (void)c; }
static inline void backend_kernels_text(char* out, size_t n) { snprintf(out, n, "matmul cublaslt"); }
static inline int backend_calibrate_kernels(Comm* c, char* err, size_t n) {
    (void)c; (void)err; (void)n;
    printf("calibrate-matmul: the CUDA build has one matmul path (cuBLASLt): nothing to calibrate\n");
    return 0;
}

/* ------------------------------------------------------------------------ */
/* device memory use (an independent measure beside the ledger)             */

static unsigned long long cuda_mem_peak_used = 0;

/* Samples cudaMemGetInfo: used = total - free on this rank's GPU, i.e. ALL
   memory in use on the device (this process's allocations, context,
   workspaces, NCCL, memory pools, and any other process on the same GPU). */
static inline void cuda_mem_sample(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) { (void)cudaGetLastError(); return; }
    unsigned long long used = (unsigned long long)(total_b - free_b);
    if (used > cuda_mem_peak_used) cuda_mem_peak_used = used;
}

/* Peak device memory in use on this rank's GPU, in bytes, from cudaMemGetInfo
   sampled after every backend_malloc, at every backend_synchronize and now.
   Memory is only allocated at start-up and on first use of a shape (scratch
   growth), so sampling at these points sees the peak. 0 if unknown. */
/* Bytes the backend allocated for itself (kernel scratch, cuBLAS
   workspace): outside the shard plan, reported beside the ledger. */
/* First call of main, before MPI_Init: nothing to do for the CUDA build. */
static inline void backend_preinit(char** argv) { (void)argv; }

static inline unsigned long long backend_internal_bytes(void) { return cuda_ctx.internal_bytes; }
/* the CPU bf16 program's shape-dependent matmul scratch (llmc/cpu/backend.h): none here */
static inline unsigned long long backend_predict_kernel_scratch(int L, int C, int NH, int Vc, int last_rows, int B, int T, int eval_only,
                                                                unsigned long long* copies) {
    (void)L; (void)C; (void)NH; (void)Vc; (void)last_rows; (void)B; (void)T; (void)eval_only;
    *copies = 0;
    return 0;
}
static inline unsigned long long backend_matmul_copy_bytes(void) { return 0; }
/* the CPU build's calibration hook (llmc/run/calibrate.h): the GPU's buffers are the ledger's */
static inline void backend_release_kernel_buffers(void) {}

/* The fit check (llmc/fit.h) on a GPU: the budget is the free memory of this
   rank's device (cudaMemGetInfo, device local_rank mod the devices, as
   backend_init picks it) divided by the local ranks that share it; the
   host's baseline and buffers do not count (they are host memory). Untested
   on a GPU. */
static inline void backend_memory_budget(unsigned long long* bytes, char* source, size_t n, int local_rank, int ranks_on_node) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) { (void)cudaGetLastError(); return; }
    int dev = local_rank % ndev, share = 0;
    for (int r = 0; r < ranks_on_node; r++) share += r % ndev == dev;
    if (share < 1) share = 1;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(dev) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) { (void)cudaGetLastError(); return; }
    *bytes = (unsigned long long)free_b / (unsigned long long)share;
    snprintf(source, n, "GPU %d: %.4g GB free / %d rank%s sharing it", dev, free_b / 1e9, share, share > 1 ? "s" : "");
}
static inline int backend_host_counts(void) { return 0; }
/* one calibration file on the GPU (llmc/fit.h, fit_workspace_path) */
static inline void backend_workspace_key(char* out, size_t n) { if (n) out[0] = 0; }
/* compute rate for -z auto: not measured on the GPU (the cost model then
   compares communication only) */
static inline double backend_matmul_flops(void) { return 0.0; }

static inline unsigned long long backend_peak_process_bytes(void) {
    cuda_mem_sample();
    return cuda_mem_peak_used;
}

/* ------------------------------------------------------------------------ */
/* buffers                                                                  */

/* Device memory; NULL on failure (the ledger turns that into one message). */
static inline void* backend_malloc(size_t bytes) {
    void* p = NULL;
    if (cudaMalloc(&p, bytes > 0 ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    cuda_mem_sample();
    return p;
}
static inline void backend_free(void* p) {
    if (p) cudaCheck(cudaFree(p));
}
/* async on the compute stream */
static inline void backend_memset_zero(void* p, size_t bytes) {
    if (bytes) cudaCheck(cudaMemsetAsync(p, 0, bytes, cuda_ctx.stream));
}
/* all bits set: a NaN in bf16 (debug poisoning), async on the compute stream */
static inline void backend_memset_nan(void* p, size_t bytes) {
    if (bytes) cudaCheck(cudaMemsetAsync(p, 0xFF, bytes, cuda_ctx.stream));
}
/* device to device, async on the compute stream; regions must not overlap */
static inline void backend_memcpy(void* dst, const void* src, size_t bytes) {
    if (bytes && dst != src) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_ctx.stream));
}

/* Host -> device uploads are staged through two pinned buffers of
   CUDA_UPLOAD_CHUNK bytes, used in turn: each chunk is copied (memcpy) into
   the next staging buffer, then cudaMemcpyAsync'd from there on the compute
   stream, and an event marks when that copy has read it. So the caller's
   buffer may be refilled as soon as this returns, whatever memory it is
   (CUDA only says a copy from pageable memory "might be synchronous"), and
   the host waits only when a staging buffer is still being read by the
   copy issued two chunks earlier (large uploads: a pipeline; small ones,
   such as the tokens of each micro-step: no wait on work queued after that
   copy). */
#define CUDA_UPLOAD_CHUNK ((size_t)4 << 20)
static struct {
    void* buf[2];
    cudaEvent_t done[2];
    int pending[2];  /* an event was recorded after the last copy from buf[k] */
    int next;
} cuda_upload;

/* Host -> device, ordered on the compute stream (see above); dst device
   memory, src any host memory, reusable on return. */
static inline void backend_to_device(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    if (!cuda_upload.buf[0]) {
        for (int k = 0; k < 2; k++) {
            cudaCheck(cudaMallocHost(&cuda_upload.buf[k], CUDA_UPLOAD_CHUNK));
            cudaCheck(cudaEventCreateWithFlags(&cuda_upload.done[k], cudaEventDisableTiming));
        }
    }
    for (size_t off = 0; off < bytes; off += CUDA_UPLOAD_CHUNK) {
        size_t n = bytes - off < CUDA_UPLOAD_CHUNK ? bytes - off : CUDA_UPLOAD_CHUNK;
        int k = cuda_upload.next;
        cuda_upload.next ^= 1;
        if (cuda_upload.pending[k]) cuda_wait_event(cuda_upload.done[k]);
        memcpy(cuda_upload.buf[k], (const char*)src + off, n);
        cudaCheck(cudaMemcpyAsync((char*)dst + off, cuda_upload.buf[k], n, cudaMemcpyHostToDevice, cuda_ctx.stream));
        cudaCheck(cudaEventRecord(cuda_upload.done[k], cuda_ctx.stream));
        cuda_upload.pending[k] = 1;
    }
}

/* Device -> host; waits for everything queued before it (host sync). */
static inline void backend_to_host(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_ctx.stream));
    cuda_wait_compute();
}

/* The host waits until the compute and comm streams are idle. */
static inline void backend_synchronize(void) {
    cuda_wait_compute();
    if (nccl_state.ready) cuda_wait_stream(nccl_state.comm_stream);
    cuda_mem_sample();
}

/* pinned host staging for the conversions (grow-only) */
static uint16_t* cuda_staging = NULL;
static size_t cuda_staging_elems = 0;
static uint16_t* cuda_staging_get(size_t n) {
    if (n > cuda_staging_elems) {
        if (cuda_staging) cudaCheck(cudaFreeHost(cuda_staging));
        size_t m = n < ((size_t)1 << 20) ? ((size_t)1 << 20) : n;
        cudaCheck(cudaMallocHost((void**)&cuda_staging, m * sizeof(uint16_t)));
        cuda_staging_elems = m;
    }
    return cuda_staging;
}

/* host fp32 -> device bf16, round to nearest even (host sync). */
static inline void backend_floats_to_floatX(floatX* dst_device, const float* src_host, size_t n) {
    if (!n) return;
    cuda_wait_compute(); /* the staging buffer may still feed an earlier copy */
    uint16_t* s = cuda_staging_get(n);
    for (size_t i = 0; i < n; i++) s[i] = host_float_to_bf16_bits(src_host[i]);
    cudaCheck(cudaMemcpyAsync(dst_device, s, n * sizeof(uint16_t), cudaMemcpyHostToDevice, cuda_ctx.stream));
    cuda_wait_compute();
}

/* device bf16 -> host fp32 (exact; host sync). */
static inline void backend_floatX_to_floats(float* dst_host, const floatX* src_device, size_t n) {
    if (!n) return;
    uint16_t* s = cuda_staging_get(n);
    cudaCheck(cudaMemcpyAsync(s, src_device, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, cuda_ctx.stream));
    cuda_wait_compute();
    for (size_t i = 0; i < n; i++) dst_host[i] = host_bf16_bits_to_float(s[i]);
}

/* dst[i] += src[i], i < n (device, fp32 add, round to nearest even) */
static inline void backend_add(floatX* dst, const floatX* src, size_t n) {
    cuda_add_inplace(dst, src, n);
}

#endif /* LLMC_CUDA_BACKEND_CUH */
