/*
 cuda/encoder.cuh: token + position embedding, forward and backward.

 forward:  out[b,t,:] = wte[inp[b,t], :] + wpe[t, :]              (B,T,C)
 backward: dwte[v, :] += sum over (b,t) with inp[b,t] == v of dout[b,t,:]
           dwpe[t, :] += sum over b of dout[b,t,:]

 The backward is deterministic without atomics: the B*T token ids are sorted
 with their row numbers (CUB's stable radix sort, so rows of one token stay
 in increasing order); one block per run of equal tokens sums its dout rows
 in fp32 in that order and adds the sum to the bf16 dwte row once. dwpe: one
 thread per (t, 8 channels) sums over b. inp is DEVICE memory (B*T ints).
*/
#ifndef LLMC_CUDA_ENCODER_CUH
#define LLMC_CUDA_ENCODER_CUH

#include <cub/device/device_radix_sort.cuh>
#include "common.cuh"

/* vec: 8 channels per thread (C % 8 == 0, 16-byte aligned bases), else 1 */
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                       int BT, int T, int C, int vec) {
    int w = vec ? 8 : 1;
    size_t per_row = (size_t)C / w;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * per_row) return;
    int bt = (int)(idx / per_row);
    int c = (int)(idx % per_row) * w;
    int t = bt % T;
    const floatX* we = wte + (size_t)inp[bt] * C + c;
    const floatX* pe = wpe + (size_t)t * C + c;
    floatX* o = out + (size_t)bt * C + c;
    if (vec) {
        float a[8], b[8];
        load8(a, we);
        load8(b, pe);
#pragma unroll
        for (int i = 0; i < 8; i++) a[i] += b[i];
        store8(o, a);
    } else {
        o[0] = tobf(bf(we[0]) + bf(pe[0]));
    }
}

/* (B,T,C) out = wte[inp] + wpe[t]; inp device (B*T). Writes out. */
static inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                   int B, int T, int C) {
    int BT = B * T;
    int vec = C % 8 == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe);
    size_t work = (size_t)BT * (vec ? C / 8 : C);
    LLMC_LAUNCH(encoder_forward_kernel, cdiv_u(work, 256), 256, 0, cuda_ctx.stream, out, inp, wte, wpe, BT, T, C, vec);
    cudaCheckLaunch("encoder_forward_kernel");
}

/* dwpe[t, c..] += sum_b dout[b, t, c..]; one thread per (t, group of w channels) */
__global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C, int vec) {
    int w = vec ? 8 : 1;
    size_t per_row = (size_t)C / w;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * per_row) return;
    int t = (int)(idx / per_row);
    int c = (int)(idx % per_row) * w;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int b = 0; b < B; b++) {
        const floatX* d = dout + ((size_t)b * T + t) * C + c;
        if (vec) {
            float x[8];
            load8(x, d);
#pragma unroll
            for (int i = 0; i < 8; i++) acc[i] += x[i];
        } else {
            acc[0] += bf(d[0]);
        }
    }
    floatX* p = dwpe + (size_t)t * C + c;
    if (vec) {
        float x[8];
        load8(x, p);
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] += acc[i];
        store8(p, x);
    } else {
        p[0] = tobf(bf(p[0]) + acc[0]);
    }
}

__global__ void iota_kernel(int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

/* keys: token ids sorted ascending, rows: their (b*T+t) in increasing order
   within equal keys. Block i works only if it starts a run of equal keys;
   threads cover w channels each over grid.y. */
__global__ void encoder_backward_wte_kernel(floatX* dwte, const floatX* dout, const unsigned int* keys,
                                            const int* rows, int BT, int C, int vec) {
    int i = blockIdx.x;
    unsigned int tok = keys[i];
    if (i > 0 && keys[i - 1] == tok) return;
    int w = vec ? 8 : 1;
    int c = (blockIdx.y * blockDim.x + threadIdx.x) * w;
    if (c >= C) return;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = i; j < BT && keys[j] == tok; j++) {
        const floatX* d = dout + (size_t)rows[j] * C + c;
        if (vec) {
            float x[8];
            load8(x, d);
#pragma unroll
            for (int q = 0; q < 8; q++) acc[q] += x[q];
        } else {
            acc[0] += bf(d[0]);
        }
    }
    floatX* p = dwte + (size_t)tok * C + c;
    if (vec) {
        float x[8];
        load8(x, p);
#pragma unroll
        for (int q = 0; q < 8; q++) x[q] += acc[q];
        store8(p, x);
    } else {
        p[0] = tobf(bf(p[0]) + acc[0]);
    }
}

/* dwte (V,C) and dwpe (maxT,C) += the embedding gradients of dout (B,T,C);
   inp device (B*T). Deterministic. Scratch: 3 ints per token + CUB's temp. */
static inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp,
                                    int B, int T, int C) {
    int BT = B * T;
    cudaStream_t st = cuda_ctx.stream;
    int vec = C % 8 == 0 && aligned16(dwte) && aligned16(dwpe) && aligned16(dout);
    int w = vec ? 8 : 1;
    LLMC_LAUNCH(encoder_backward_wpe_kernel, cdiv_u((size_t)T * (C / w), 256), 256, 0, st, dwpe, dout, B, T, C, vec);
    cudaCheckLaunch("encoder_backward_wpe_kernel");

    /* sort (token, row) pairs */
    int* buf = (int*)cuda_scratch(SCRATCH_SORT_KEYS, (size_t)3 * BT * sizeof(int));
    unsigned int* keys_out = (unsigned int*)buf;
    int* rows_in = buf + BT;
    int* rows_out = buf + 2 * BT;
    LLMC_LAUNCH(iota_kernel, cdiv_u((size_t)BT, 256), 256, 0, st, rows_in, BT);
    cudaCheckLaunch("iota_kernel");
    size_t temp_bytes = 0;
    cudaCheck(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const unsigned int*)inp, keys_out,
                                              (const int*)rows_in, rows_out, BT, 0, 32, st));
    void* temp = cuda_scratch(SCRATCH_SORT_TEMP, temp_bytes > 0 ? temp_bytes : 1);
    cudaCheck(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, (const unsigned int*)inp, keys_out,
                                              (const int*)rows_in, rows_out, BT, 0, 32, st));
    int threads = 128;
    dim3 grid((unsigned)BT, cdiv_u((size_t)C / w, (size_t)threads));
    LLMC_LAUNCH(encoder_backward_wte_kernel, grid, threads, 0, st, dwte, dout, keys_out, rows_out, BT, C, vec);
    cudaCheckLaunch("encoder_backward_wte_kernel");
}

/* The embedding forward restricted to one vocabulary chunk (gpt.h, twin of
   the CPU kernel): out[b,t,:] = W[inp[b,t] - row0, :] + wpe[t, :] for every
   (b,t) whose token lies in rows [row0, row0 + nrows); other rows of out are
   left alone. One block per (b,t), threads over channels. */
__global__ void encoder_forward_rows_kernel(floatX* out, const int* inp, const floatX* W, int row0, int nrows,
                                            const floatX* wpe, int T, int C) {
    int bt = blockIdx.x;
    int v = inp[bt] - row0;
    if (v < 0 || v >= nrows) return;
    int t = bt % T;
    const floatX* we = W + (size_t)v * C;
    const floatX* pe = wpe + (size_t)t * C;
    floatX* o = out + (size_t)bt * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) o[i] = tobf(bf(we[i]) + bf(pe[i]));
}

static inline void encoder_forward_rows(floatX* out, const int* inp, const floatX* W, int row0, int nrows,
                                        const floatX* wpe, int B, int T, int C) {
    if (B * T <= 0) return;
    LLMC_LAUNCH(encoder_forward_rows_kernel, (unsigned)(B * T), 128, 0, cuda_ctx.stream, out, inp, W, row0, nrows, wpe, T, C);
    cudaCheckLaunch("encoder_forward_rows_kernel");
}

/* The embedding gradient of a range [lo, hi) of one (R, C) table held at
   dst[0 .. hi-lo) (gpt.h, twin of the CPU kernel, same arguments): rows
   (n, C) DEVICE; order, seg (nseg + 1), seg_key (nseg) HOST arrays (made by
   gpt2_embedding_segments), uploaded here. One block per segment (distinct
   table row), threads over its channels in the range, each summing its
   channel over the segment in order: deterministic, no atomics. */
__global__ void embedding_backward_range_kernel(floatX* dst, size_t lo, size_t hi, const floatX* rows,
                                                const int* seg, const int* seg_key, const int* order, int C) {
    int s = blockIdx.x;
    size_t row_lo = (size_t)seg_key[s] * (size_t)C, row_hi = row_lo + (size_t)C;
    size_t e0 = row_lo > lo ? row_lo : lo, e1 = row_hi < hi ? row_hi : hi;
    for (size_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
        size_t c = e - row_lo;
        float acc = 0.0f;
        for (int j = seg[s]; j < seg[s + 1]; j++) acc += bf(rows[(size_t)order[j] * (size_t)C + c]);
        dst[e - lo] = tobf(bf(dst[e - lo]) + bf(tobf(acc)));
    }
}

static inline void embedding_backward_range(floatX* dst, size_t lo, size_t hi, const floatX* rows, const int* order,
                                            const int* seg, const int* seg_key, int nseg, int C) {
    if (nseg <= 0) return;
    int n = seg[nseg];   /* the segments use order[0 .. n) at most */
    size_t head = (size_t)(2 * nseg + 1);
    int* d = (int*)cuda_scratch(SCRATCH_SORT_KEYS, (head + (size_t)n) * sizeof(int));
    cuda_wait_compute(); /* the scratch may still feed a queued kernel; the host arrays are pageable */
    cudaCheck(cudaMemcpy(d, seg, (size_t)(nseg + 1) * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d + nseg + 1, seg_key, (size_t)nseg * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d + head, order, (size_t)n * sizeof(int), cudaMemcpyHostToDevice));
    LLMC_LAUNCH(embedding_backward_range_kernel, (unsigned)nseg, 128, 0, cuda_ctx.stream, dst, lo, hi, rows, d, d + nseg + 1,
                                                                                  d + head, C);
    cudaCheckLaunch("embedding_backward_range_kernel");
}

#endif /* LLMC_CUDA_ENCODER_CUH */
