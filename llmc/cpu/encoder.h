/*
 * llmc/cpu/encoder.h -- token + position embedding, forward and backward: the CPU kernel(s), twin
 * of llmc/cuda/encoder.cuh (same names and signatures). Conventions: common.h.
 */
#if !defined(LLMC_CPU_ENCODER_H) || (defined(CPU_EW_AGAIN) && !defined(LLMC_CPU_ENCODER_H_AVX512))
#ifndef CPU_EW
#error "llmc/cpu/encoder.h: include llmc/cpu/kernels.h, which compiles it once per ISA level (elementwise.h)"
#endif
#ifdef CPU_EW_AGAIN
#define LLMC_CPU_ENCODER_H_AVX512
#endif
#define LLMC_CPU_ENCODER_H

#include <stdio.h>
#include "common.h"

/* ------------------------------------------------------------------------ */
/* encoder                                                                  */

/* out (B,T,C) = wte (V,C) [inp (B,T)] + wpe (maxT,C) [t]: token embedding
   row plus position embedding row. Writes out (no accumulation). */
static inline void CPU_EW(encoder_forward)(floatX* out, const int* inp,
                                   const floatX* wte, const floatX* wpe, int B,
                                   int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        floatX* o = out + (size_t)bt * C;
        const floatX* we = wte + (size_t)inp[bt] * C;
        const floatX* pe = wpe + (size_t)t * C;
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = stx(ldx(we[i]) + ldx(pe[i]));
    }
}

#ifdef LLMC_BF16
/* (token id, row) pairs ordered by token, then row */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static int cpu_enc_cmp(const void* a, const void* b) {
    unsigned long long x = *(const unsigned long long*)a, y = *(const unsigned long long*)b;
    return x < y ? -1 : x > y;
}
#endif /* CPU_EW_SHARED */

/* bf16 program, rounding as the CUDA kernel (llmc/cuda/encoder.cuh):
     dwte[v,:] = bf16(dwte[v,:] + fp32 sum, rows in increasing order, of the
                 dout rows whose token is v)          (one rounding per row)
     dwpe[t,:] = bf16(dwpe[t,:] + fp32 sum over b of dout[b,t,:])
   The B*T (token, row) pairs are sorted once; the C channels are split
   among threads, each summing every run of equal tokens for its channels.
   Deterministic. */
static inline void CPU_EW(encoder_backward)(floatX* dwte, floatX* dwpe,
                                    const floatX* dout, const int* inp, int B,
                                    int T, int C) {
    const int BT = B * T;
    unsigned long long* keys = (unsigned long long*)malloc(sizeof(unsigned long long) * (BT > 0 ? BT : 1));
    for (int bt = 0; bt < BT; bt++) keys[bt] = ((unsigned long long)(unsigned)inp[bt] << 32) | (unsigned)bt;
    qsort(keys, (size_t)BT, sizeof(unsigned long long), cpu_enc_cmp);
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        size_t lo, hi;
        cpu_split_range((size_t)C, ith, nth, 16, &lo, &hi);
        if (hi > lo) {
            size_t w = hi - lo;
            float* acc = (float*)malloc(sizeof(float) * w);
            for (int i = 0; i < BT;) {
                unsigned tok = (unsigned)(keys[i] >> 32);
                for (size_t c = 0; c < w; c++) acc[c] = 0.0f;
                for (; i < BT && (unsigned)(keys[i] >> 32) == tok; i++) {
                    const floatX* d = dout + (size_t)(unsigned)keys[i] * C + lo;
#pragma omp simd
                    for (size_t c = 0; c < w; c++) acc[c] += ldx(d[c]);
                }
                floatX* we = dwte + (size_t)tok * C + lo;
#pragma omp simd
                for (size_t c = 0; c < w; c++) we[c] = stx(ldx(we[c]) + acc[c]);
            }
            for (int t = 0; t < T; t++) {
                for (size_t c = 0; c < w; c++) acc[c] = 0.0f;
                for (int b = 0; b < B; b++) {
                    const floatX* d = dout + ((size_t)b * T + t) * C + lo;
#pragma omp simd
                    for (size_t c = 0; c < w; c++) acc[c] += ldx(d[c]);
                }
                floatX* pe = dwpe + (size_t)t * C + lo;
#pragma omp simd
                for (size_t c = 0; c < w; c++) pe[c] = stx(ldx(pe[c]) + acc[c]);
            }
            free(acc);
        }
    }
    free(keys);
}
#else
/* dwte (V,C) [inp[b,t],:] += dout[b,t,:]; dwpe (maxT,C) [t,:] += sum_b
   dout[b,t,:]. Race-free with repeated token ids: the C channels are split
   among threads and each thread walks all B*T rows for its own channels
   (rows in order, so the result is deterministic). */
static inline void CPU_EW(encoder_backward)(floatX* dwte, floatX* dwpe,
                                    const floatX* dout, const int* inp, int B,
                                    int T, int C) {
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        size_t lo, hi;
        cpu_split_range((size_t)C, ith, nth, 16, &lo, &hi);
        for (int bt = 0; bt < B * T && hi > lo; bt++) {
            int t = bt % T;
            const floatX* d = dout + (size_t)bt * C;
            floatX* we = dwte + (size_t)inp[bt] * C;
            floatX* pe = dwpe + (size_t)t * C;
#pragma omp simd
            for (size_t i = lo; i < hi; i++) {
                we[i] = stx(ldx(we[i]) + ldx(d[i]));
                pe[i] = stx(ldx(pe[i]) + ldx(d[i]));
            }
        }
    }
}

#endif /* LLMC_BF16 */

/* The embedding forward restricted to one vocabulary chunk (gpt.h): for
   every (b,t) whose token lies in rows [row0, row0 + nrows) of wte,
     out[b,t,:] = W[inp[b,t] - row0, :] + wpe[t, :]
   where W (nrows, C) holds those rows (a gathered chunk at stage 3); other
   rows of out are left alone. Calling it for every chunk writes every row
   once, with the same values as one call over all of wte. */
static inline void CPU_EW(encoder_forward_rows)(floatX* out, const int* inp, const floatX* W, int row0, int nrows,
                                        const floatX* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int v = inp[bt] - row0;
        if (v < 0 || v >= nrows) continue;
        int t = bt % T;
        floatX* o = out + (size_t)bt * C;
        const floatX* we = W + (size_t)v * C;
        const floatX* pe = wpe + (size_t)t * C;
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = stx(ldx(we[i]) + ldx(pe[i]));
    }
}

/* The embedding gradient of a range of one table (gpt.h): the table is
   (R, C) row-major (wte or wpe); the caller holds its elements [lo, hi) at
   dst[0 .. hi-lo). rows (n, C) are d(embedding output) rows of every rank
   of the shard group (all-gathered); order lists row indices sorted by
   (table row, index), and the nseg segments order[seg[s] .. seg[s+1]) are
   the rows keyed to table row seg_key[s] (ascending, each with elements in
   [lo, hi); gpt2_embedding_segments makes them). For every segment: s =
   the sum of its rows in order (fp32), then
     dst[x] = round(dst[x] + round(s[x]))   for the elements x of row seg_key in [lo, hi)
   (two roundings to floatX, none in fp32), so the result does not depend on
   how the rows were split among ranks or on which rank holds the range.
   Distinct table rows are independent: threads split the segments. */
/* --invariant 1: out[c0..c1) = the pairwise tree over sequences (row index
   / cpu_inv_T; sequences [s0, s0 + span), span a power of two, an empty
   half skipped, so any span covering the rows gives the same sums) of each
   sequence's rows summed in order (fp32) over order[j0..j1) (j1 > j0, row
   indices ascending). scratch: C floats per level below. */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void embedding_seq_tree(float* out, float* scratch, const floatX* rows, const int* order, int j0, int j1,
                                      long s0, long span, int c0, int c1, int C) {
    int T = cpu_inv_T;
    while (span > 1) {   /* descend while one half is empty */
        long mid = s0 + span / 2;
        int jm = j0;
        while (jm < j1 && order[jm] / T < mid) jm++;
        if (jm == j1) { span /= 2; continue; }
        if (jm == j0) { s0 = mid; span /= 2; continue; }
        embedding_seq_tree(out, scratch + C, rows, order, j0, jm, s0, span / 2, c0, c1, C);
        embedding_seq_tree(scratch, scratch + C, rows, order, jm, j1, mid, span / 2, c0, c1, C);
        for (int c = c0; c < c1; c++) out[c] = cpu_inv_round(out[c] + scratch[c]);
        return;
    }
    for (int c = c0; c < c1; c++) out[c] = 0.0f;
    for (int j = j0; j < j1; j++) {
        const floatX* r = rows + (size_t)order[j] * (size_t)C;
#pragma omp simd
        for (int c = c0; c < c1; c++) out[c] += ldx(r[c]);
    }
    for (int c = c0; c < c1; c++) out[c] = cpu_inv_round(out[c]);
}
#endif /* CPU_EW_SHARED */

static inline void CPU_EW(embedding_backward_range)(floatX* dst, size_t lo, size_t hi, const floatX* rows, const int* order,
                                            const int* seg, const int* seg_key, int nseg, int C) {
#pragma omp parallel
    {
        float* acc = (float*)malloc((size_t)C * (cpu_inv_T ? 34 : 1) * sizeof(float));
        if (!acc) { fprintf(stderr, "error: out of host memory in embedding_backward_range\n"); exit(1); }
#pragma omp for schedule(dynamic, 4)
        for (int s = 0; s < nseg; s++) {
            size_t row_lo = (size_t)seg_key[s] * (size_t)C, row_hi = row_lo + (size_t)C;
            size_t e0 = row_lo > lo ? row_lo : lo, e1 = row_hi < hi ? row_hi : hi;
            int c0 = (int)(e0 - row_lo), c1 = (int)(e1 - row_lo);
            if (cpu_inv_T) {   /* --invariant 1: per sequence, then a pairwise tree over them */
                embedding_seq_tree(acc, acc + C, rows, order, seg[s], seg[s + 1], 0, 1L << 31, c0, c1, C);
            } else {
                for (int c = c0; c < c1; c++) acc[c] = 0.0f;
                for (int j = seg[s]; j < seg[s + 1]; j++) {
                    const floatX* r = rows + (size_t)order[j] * (size_t)C;
#pragma omp simd
                    for (int c = c0; c < c1; c++) acc[c] += ldx(r[c]);
                }
            }
            floatX* d = dst + (e0 - lo);
#pragma omp simd
            for (int c = c0; c < c1; c++) d[c - c0] = stx(ldx(d[c - c0]) + ldx(stx(acc[c])));
        }
        free(acc);
    }
}

#endif /* LLMC_CPU_ENCODER_H */
