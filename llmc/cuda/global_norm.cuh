/*
 cuda/global_norm.cuh: sum of squares of n bf16 elements (a shard of one
 tensor's gradient), returned to the host as a double; the engine sums the
 results of every tensor of its own shard and all-reduces them for the
 global grad norm (zero.h, zero_grad_norm).

 Each thread squares and sums its elements in double (grid-stride), blocks
 reduce in a fixed order into per-block partials, one block adds the
 partials in order: deterministic for a given n (the grid depends on n
 only). HOST SYNC: the result is copied to pinned host memory and the
 compute stream is synchronised before returning.
*/
#ifndef LLMC_CUDA_GLOBAL_NORM_CUH
#define LLMC_CUDA_GLOBAL_NORM_CUH

#include "common.cuh"

#define NORM_THREADS 512
#define NORM_MAX_BLOCKS 1024

__global__ void sum_squares_partial_kernel(double* partials, const floatX* x, size_t n) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double v = (double)bf(x[i]);
        acc += v * v;
    }
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

/* partials[0] = sum of partials[0..count) (one block) */
__global__ void sum_partials_kernel(double* partials, int count) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) partials[0] = acc;
}

static double* sum_squares_host = NULL; /* pinned, 1 double */

/* sum_i x[i]^2, x device (n bf16). Synchronises the host with the compute stream. */
static inline double sum_squares(const floatX* x, size_t n) {
    if (n == 0) return 0.0;
    if (!sum_squares_host) cudaCheck(cudaMallocHost((void**)&sum_squares_host, sizeof(double)));
    unsigned int blocks = cdiv_u(n, (size_t)NORM_THREADS * 8);
    if (blocks > NORM_MAX_BLOCKS) blocks = NORM_MAX_BLOCKS;
    double* part = (double*)cuda_scratch(SCRATCH_NORM, NORM_MAX_BLOCKS * sizeof(double));
    LLMC_LAUNCH(sum_squares_partial_kernel, blocks, NORM_THREADS, 0, cuda_ctx.stream, part, x, n);
    cudaCheckLaunch("sum_squares_partial_kernel");
    LLMC_LAUNCH(sum_partials_kernel, 1, NORM_THREADS, 0, cuda_ctx.stream, part, (int)blocks);
    cudaCheckLaunch("sum_partials_kernel");
    cudaCheck(cudaMemcpyAsync(sum_squares_host, part, sizeof(double), cudaMemcpyDeviceToHost, cuda_ctx.stream));
    cuda_wait_compute();
    return *sum_squares_host;
}

#endif /* LLMC_CUDA_GLOBAL_NORM_CUH */
