/*
 * llmc/cpu/matmul_invariant.h -- --invariant 1's products on fixed tiles and
 * fixed trees (docs/design.md section 13), for matmul.h's matmul_forward and
 * matmul_backward when cpu_inv_T != 0 (common.h): a row's bits and a weight
 * gradient's sum order depend neither on B (= N/T) nor on the thread count.
 * Both programs: the transposed copy and the pairwise tree of the weight
 * gradient (cpu_inv_dweight_tree); the fp32 program's row tiles on the
 * sgemm (cpu_inv_rows_gemm); the bf16 program's on the fp32-copy path of
 * matmul_bf16.h (cpu_inv_gemm_rows_bf16, its buffers). Conventions: common.h.
 */
#ifndef LLMC_CPU_MATMUL_INVARIANT_H
#define LLMC_CPU_MATMUL_INVARIANT_H

#include "common.h"
#include "matmul_bf16.h"   /* the bf16 program's buffers and epilogue (empty in the fp32 program) */

/* ------------------------------------------------------------------------ */
/* --invariant 1's weight gradient, both programs (cpu_inv_T != 0, common.h) */

#if defined(__AVX2__)
#include <immintrin.h>
/* 8 consecutive elements as fp32 (bf16: the bits shifted into the high half) */
static inline __m256 cpu_load8(const floatX* p) {
#ifdef LLMC_BF16
    __m128i h = _mm_loadu_si128((const __m128i*)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
#else
    return _mm256_loadu_ps(p);
#endif
}
#endif

/* dst[i ldd + t] = src[t lds + i] as fp32, for i < ni, t < nt: a transposed
   copy (8 x 8 blocks in AVX2 registers where it has them). Exact. */
static inline void cpu_transpose_cvt(float* dst, size_t ldd, const floatX* src, size_t lds, int ni, int nt) {
    int ib = 0;
#if defined(__AVX2__)
    const int nt8 = nt & ~7;
    for (; ib + 8 <= ni; ib += 8) {
        for (int t0 = 0; t0 < nt8; t0 += 8) {
            __m256 r0 = cpu_load8(src + (size_t)(t0 + 0) * lds + ib), r1 = cpu_load8(src + (size_t)(t0 + 1) * lds + ib);
            __m256 r2 = cpu_load8(src + (size_t)(t0 + 2) * lds + ib), r3 = cpu_load8(src + (size_t)(t0 + 3) * lds + ib);
            __m256 r4 = cpu_load8(src + (size_t)(t0 + 4) * lds + ib), r5 = cpu_load8(src + (size_t)(t0 + 5) * lds + ib);
            __m256 r6 = cpu_load8(src + (size_t)(t0 + 6) * lds + ib), r7 = cpu_load8(src + (size_t)(t0 + 7) * lds + ib);
            __m256 a0 = _mm256_unpacklo_ps(r0, r1), a1 = _mm256_unpackhi_ps(r0, r1);
            __m256 a2 = _mm256_unpacklo_ps(r2, r3), a3 = _mm256_unpackhi_ps(r2, r3);
            __m256 a4 = _mm256_unpacklo_ps(r4, r5), a5 = _mm256_unpackhi_ps(r4, r5);
            __m256 a6 = _mm256_unpacklo_ps(r6, r7), a7 = _mm256_unpackhi_ps(r6, r7);
            __m256 b0 = _mm256_shuffle_ps(a0, a2, _MM_SHUFFLE(1, 0, 1, 0)), b1 = _mm256_shuffle_ps(a0, a2, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 b2 = _mm256_shuffle_ps(a1, a3, _MM_SHUFFLE(1, 0, 1, 0)), b3 = _mm256_shuffle_ps(a1, a3, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 b4 = _mm256_shuffle_ps(a4, a6, _MM_SHUFFLE(1, 0, 1, 0)), b5 = _mm256_shuffle_ps(a4, a6, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 b6 = _mm256_shuffle_ps(a5, a7, _MM_SHUFFLE(1, 0, 1, 0)), b7 = _mm256_shuffle_ps(a5, a7, _MM_SHUFFLE(3, 2, 3, 2));
            float* d = dst + (size_t)ib * ldd + t0;
            _mm256_storeu_ps(d + 0 * ldd, _mm256_permute2f128_ps(b0, b4, 0x20));
            _mm256_storeu_ps(d + 1 * ldd, _mm256_permute2f128_ps(b1, b5, 0x20));
            _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(b2, b6, 0x20));
            _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(b3, b7, 0x20));
            _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(b0, b4, 0x31));
            _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(b1, b5, 0x31));
            _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(b2, b6, 0x31));
            _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(b3, b7, 0x31));
        }
        for (int t = nt8; t < nt; t++)
            for (int q = 0; q < 8; q++) dst[(size_t)(ib + q) * ldd + t] = ldx(src[(size_t)t * lds + ib + q]);
    }
#endif
    for (int t = 0; t < nt; t++)
        for (int i = ib; i < ni; i++) dst[(size_t)i * ldd + t] = ldx(src[(size_t)t * lds + i]);
}

/* d[j] = d[j] + the complete binary tree over the nseq (1, 2, 4 or 8)
   leaves L[s][j], for j < n, every leaf and node rounded by cpu_inv_round
   (bf16; nothing in fp32), in one pass: the sums cpu_tree_push and
   cpu_tree_root form for those leaves ((L0 + L1) + (L2 + L3) for 4), the
   pairing being all that matters (fp32 addition is commutative). */
static inline void cpu_inv_tree_add(floatX* d, float* const* L, int nseq, int n) {
#define R_(x) cpu_inv_round(x)
    const float *l0 = L[0], *l1 = L[nseq > 1], *l2 = L[nseq > 2 ? 2 : 0], *l3 = L[nseq > 2 ? 3 : 0];
    if (nseq == 1) {
#pragma omp simd
        for (int j = 0; j < n; j++) d[j] = stx(ldx(d[j]) + R_(l0[j]));
    } else if (nseq == 2) {
#pragma omp simd
        for (int j = 0; j < n; j++) d[j] = stx(ldx(d[j]) + R_(R_(l0[j]) + R_(l1[j])));
    } else if (nseq == 4) {
#pragma omp simd
        for (int j = 0; j < n; j++) d[j] = stx(ldx(d[j]) + R_(R_(R_(l0[j]) + R_(l1[j])) + R_(R_(l2[j]) + R_(l3[j]))));
    } else {
        const float *l4 = L[4], *l5 = L[5], *l6 = L[6], *l7 = L[7];
#pragma omp simd
        for (int j = 0; j < n; j++) {
            float a = R_(R_(R_(l0[j]) + R_(l1[j])) + R_(R_(l2[j]) + R_(l3[j])));
            float b = R_(R_(R_(l4[j]) + R_(l5[j])) + R_(R_(l6[j]) + R_(l7[j])));
            d[j] = stx(ldx(d[j]) + R_(a + b));
        }
    }
#undef R_
}

/* dweight (OC,C) += the pairwise tree over the nseq = N/T sequences s of
   dout_s^T (OC,T) @ inp_s (T,C), output tile by output tile: per tile of
   64 rows (of OC) x CPU_INV_COLS columns (of C), each sequence's product is
   one single-threaded sgemm with K = T (the leaf, rounded to the storage
   type by cpu_inv_round: bf16, or nothing in fp32), the leaves are added as
   the complete binary tree (every node rounded likewise) and the root is
   added to dweight (one rounding): for nseq = 1, 2, 4, 8 all leaves are
   kept and the tree and the add run in one pass (cpu_inv_tree_add), else
   as a binary counter (cpu_tree_push; the same sums). The tiles split among
   the threads, row block by row block; a tile's leaves and tree stay in the
   thread's cache (never a full-size leaf). The sgemm's A is the tile's 64
   columns of dout_s transposed into a packed fp32 (64,T) block (once per
   row block and thread, cpu_transpose_cvt; an A read in place, transposed,
   with the leading dimension OC, ran at half speed), its B the rows of an
   fp32 copy of inp with CPU_INV_BPAD floats of padding after each row (C a
   multiple of 256 and 64-byte aligned rows put the tile's T rows in the
   same few cache sets: twice the time for C = 3072 on an AMD EPYC Zen 3).
   The tile shape and the operands' layout do not depend on N or on the
   thread count, so no element's tree does. dout (N,OC), inp (N,C), N a
   multiple of T. shared(n): n floats for the copy of inp (N (C +
   CPU_INV_BPAD)), held for the call; scratch(ith, n): n floats owned by
   thread ith for the call (max(nseq, log2(nseq) + 2) 64 CPU_INV_COLS + 64 N
   at most). */
#define CPU_INV_BPAD 16   /* floats of padding after each row of the B copy (see cpu_inv_dweight_tree) */
static inline void cpu_inv_dweight_tree(floatX* dweight, const floatX* dout, const floatX* inp, int N, int C, int OC,
                                        float* (*shared)(size_t n), float* (*scratch)(int ith, size_t n)) {
    cpu_blas_init();
    const int T = cpu_inv_T, nseq = N / T, no = (OC + 63) / 64, nc = (C + CPU_INV_COLS - 1) / CPU_INV_COLS;
    int levels = 1;
    while ((1 << (levels - 1)) < nseq) levels++;
    const size_t w = (size_t)64 * CPU_INV_COLS;
    const int ldb = C + CPU_INV_BPAD;
    const int fused = nseq == 1 || nseq == 2 || nseq == 4 || nseq == 8;   /* cpu_inv_tree_add */
    const int nbuf = fused ? nseq : levels + 1;
    float* inpf = shared((size_t)N * ldb);
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const floatX* x = inp + (size_t)n * C;
            float* b = inpf + (size_t)n * ldb;
#pragma omp simd
            for (int j = 0; j < C; j++) b[j] = ldx(x[j]);
        }
        float* sc = scratch(ith, (size_t)nbuf * w + (size_t)N * 64);
        float* At = sc + (size_t)nbuf * w;   /* per sequence: the row block's (ow,T) block of dout_s^T */
        int last_o0 = -1;
#pragma omp for schedule(static)
        for (int k = 0; k < no * nc; k++) {
            int o0 = (k / nc) * 64, c0 = (k % nc) * CPU_INV_COLS;
            int ow = OC - o0 < 64 ? OC - o0 : 64, cw = C - c0 < CPU_INV_COLS ? C - c0 : CPU_INV_COLS;
            if (o0 != last_o0) {   /* the tiles of one row block follow each other: packed once */
                for (int s = 0; s < nseq; s++)
                    cpu_transpose_cvt(At + (size_t)s * ow * T, T, dout + (size_t)s * T * OC + o0, OC, ow, T);
                last_o0 = o0;
            }
            size_t tw = (size_t)ow * cw;
            if (fused) {   /* every leaf kept, the tree and the add to dweight in one pass per row */
                float* L[8];
                for (int s = 0; s < nseq; s++) {
                    L[s] = sc + (size_t)s * w;
                    cpu_sgemm(0, 0, ow, cw, T, 1.0f, At + (size_t)s * ow * T, T, inpf + (size_t)s * T * ldb + c0, ldb, 0.0f, L[s], cw);
                }
                for (int i = 0; i < ow; i++) {
                    float* Li[8] = {0};
                    for (int s = 0; s < nseq; s++) Li[s] = L[s] + (size_t)i * cw;
                    cpu_inv_tree_add(dweight + (size_t)(o0 + i) * C + c0, Li, nseq, cw);
                }
                continue;
            }
            float* stack[40] = {0};
            float* freel[40];
            int nfree = 0;
            for (int l = 0; l <= levels; l++) freel[nfree++] = sc + (size_t)l * w;
            for (int s = 0; s < nseq; s++) {
                float* leaf = freel[--nfree];
                cpu_sgemm(0, 0, ow, cw, T, 1.0f, At + (size_t)s * ow * T, T, inpf + (size_t)s * T * ldb + c0, ldb, 0.0f, leaf, cw);
#ifdef LLMC_BF16
#pragma omp simd
                for (size_t i = 0; i < tw; i++) leaf[i] = cpu_inv_round(leaf[i]);
#endif
                cpu_tree_push(stack, freel, &nfree, leaf, tw);
            }
            float* root = cpu_tree_root(stack, levels + 1, tw);
            for (int i = 0; i < ow && root; i++) {
                floatX* d = dweight + (size_t)(o0 + i) * C + c0;
                const float* r = root + (size_t)i * cw;
#pragma omp simd
                for (int j = 0; j < cw; j++) d[j] = stx(ldx(d[j]) + r[j]);
            }
        }
    }
}

#ifdef LLMC_BF16
/* --invariant 1 (cpu_inv_T != 0, common.h), the bf16 program: the
   fp32-copy path on fixed tiles. C (N,OC) = A (N,K) @ op(W) [+ bias]
   [+ C] with W stored (OC,K) (tb = 1, the forward) or (K,OC) (tb = 0,
   dinp): A converted to fp32 once (the shared buffer), then column block
   by column block (CPU_INV_COLS columns of C) the block's panel of W
   converted (the thread's buffer) and, per tile of cpu_inv_rows(T) rows,
   one single-threaded sgemm over the whole K and one rounding in the
   epilogue: a row's bits depend neither on N nor on the thread count. The
   fp32 copies have CPU_INV_BPAD floats of padding after each row (rows of
   a multiple of 256 floats would share cache sets: see
   cpu_inv_dweight_tree). */
static void cpu_inv_gemm_rows_bf16(floatX* C, const floatX* A, const floatX* W, const floatX* bias, int N, int K, int OC,
                                   int tb, int accumulate) {
    cpu_blas_init();
    const int lda = K + CPU_INV_BPAD, ldp = tb ? K + CPU_INV_BPAD : CPU_INV_COLS + CPU_INV_BPAD;
    const int R = cpu_inv_rows(cpu_inv_T), nr = N / R, nc = (OC + CPU_INV_COLS - 1) / CPU_INV_COLS;
    float* Af = cpu_gemm_grow(&cpu_gemm_state.shared, &cpu_gemm_state.shared_cap, (size_t)N * lda);
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int r = 0; r < N; r++) cpu_gemm_cvt(Af + (size_t)r * lda, A, r, 1, 0, K, K);
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        /* the panel: tb = 1 the block's cw rows of W (cw, K); tb = 0 its cw columns (K, cw) */
        size_t pn = tb ? (size_t)CPU_INV_COLS * ldp : (size_t)K * ldp;
        float* buf = cpu_gemm_grow(&cpu_gemm_state.tbuf[ith], &cpu_gemm_state.tcap[ith], pn + (size_t)R * CPU_INV_COLS);
        float* Wp = buf;
        float* Cf = buf + pn;
        int last_c0 = -1;
#pragma omp for schedule(static)
        for (int k = 0; k < nr * nc; k++) {
            int c0 = (k / nr) * CPU_INV_COLS, i0 = (k % nr) * R, cw = OC - c0 < CPU_INV_COLS ? OC - c0 : CPU_INV_COLS;
            if (c0 != last_c0) {
                if (tb) for (int i = 0; i < cw; i++) cpu_gemm_cvt(Wp + (size_t)i * ldp, W, c0 + i, 1, 0, K, K);
                else for (int i = 0; i < K; i++) cpu_gemm_cvt(Wp + (size_t)i * ldp, W, i, 1, c0, cw, OC);
                last_c0 = c0;
            }
            cpu_sgemm(0, tb, R, cw, K, 1.0f, Af + (size_t)i0 * lda, lda, Wp, ldp, 0.0f, Cf, cw);
            cpu_gemm_epilogue(C, OC, i0, R, c0, cw, Cf, bias, accumulate);
        }
    }
}

/* thread ith's buffer of the fp32-copy path (counted by cpu_gemm_internal_bytes) */
static float* cpu_gemm_thread_buf(int ith, size_t n) {
    return cpu_gemm_grow(&cpu_gemm_state.tbuf[ith], &cpu_gemm_state.tcap[ith], n);
}

/* the fp32 path's shared buffer (counted by cpu_gemm_internal_bytes) */
static float* cpu_gemm_shared_buf(size_t n) {
    return cpu_gemm_grow(&cpu_gemm_state.shared, &cpu_gemm_state.shared_cap, n);
}

/* --invariant 1, the bf16 program: dweight (OC,C) += the pairwise tree
   over the N/T sequences of dout_s^T inp_s (cpu_inv_dweight_tree: leaves
   and nodes rounded to bf16, then dweight = round(dweight + root)); the
   fp32 copies (inp, dout's tile blocks) in the fp32 path's buffers. */
static void cpu_inv_dweight_bf16(floatX* dweight, const floatX* dout, const floatX* inp, int N, int C, int OC) {
    cpu_inv_dweight_tree(dweight, dout, inp, N, C, OC, cpu_gemm_shared_buf, cpu_gemm_thread_buf);
}

#else /* fp32 program */

/* ------------------------------------------------------------------------ */
/* layout-invariant products (cpu_inv_T != 0, common.h)                     */

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T [+ bias] (beta = 0: overwrite,
   1: accumulate into out) on fixed tiles of cpu_inv_rows(T) rows x
   cpu_inv_cols(OC) columns, one single-threaded sgemm per tile: a row's bits do
   not depend on N (= B*T) or on the thread count. The tiles run column
   block by column block (the block's weights stay in cache over its row
   tiles). tb: weight stored (OC,C) (1) or (C,OC) (0, the dinp product:
   dinp = dout @ weight). */
static inline void cpu_inv_rows_gemm(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                                     int tb, float beta) {
    cpu_blas_init();
    int R = cpu_inv_rows(cpu_inv_T), nr = N / R, tc = cpu_inv_cols(OC), nc = (OC + tc - 1) / tc;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nr * nc; k++) {
        int c0 = (k / nr) * tc, i0 = (k % nr) * R, cw = OC - c0 < tc ? OC - c0 : tc;
        float* o = out + (size_t)i0 * OC + c0;
        float b = beta;
        if (bias) { for (int i = 0; i < R; i++) memcpy(o + (size_t)i * OC, bias + c0, sizeof(float) * cw); b = 1.0f; }
        cpu_sgemm(0, tb, R, cw, C, 1.0f, inp + (size_t)i0 * C, C, tb ? weight + (size_t)c0 * C : weight + c0, tb ? C : OC, b, o, OC);
    }
}

static float* cpu_inv_thread_scratch(int ith, size_t n) { (void)ith; return cpu_thread_scratch(n); }
/* --invariant 1's copy of a dweight product's input (cpu_inv_dweight_tree),
   kept and grown to the largest N (C + CPU_INV_BPAD) floats: memory
   outside the ledger, as the thread scratch (at most a few MB: 3.2 MB for
   GPT-2 124M's fcproj at B*T = 256). Exits on allocation failure. */
static float* cpu_inv_shared(size_t n) {
    static float* buf = NULL;
    static size_t cap = 0;
    if (n > cap) {
        free(buf);
        buf = (float*)aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
        if (!buf) { fprintf(stderr, "error: out of memory: %zu bytes of matmul scratch\n", n * sizeof(float)); exit(1); }
        cap = n;
    }
    return buf;
}

/* dweight (OC,C) += the pairwise tree over the N/T sequences of dout_s^T
   (OC,T) @ inp_s (T,C) (cpu_inv_dweight_tree): one fixed tree per element
   whatever B and the thread count. */
static inline void cpu_inv_dweight(float* dweight, const float* dout, const float* inp, int N, int C, int OC) {
    cpu_inv_dweight_tree(dweight, dout, inp, N, C, OC, cpu_inv_shared, cpu_inv_thread_scratch);
}

#endif /* LLMC_BF16 */

#endif /* LLMC_CPU_MATMUL_INVARIANT_H */
