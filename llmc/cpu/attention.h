/*
 * llmc/cpu/attention.h -- causal multi-head self-attention, forward and backward: the CPU kernel(s), twin
 * of llmc/cuda/attention.cuh (same names and signatures). Conventions: common.h.
 */
#if !defined(LLMC_CPU_ATTENTION_H) || (defined(CPU_EW_AGAIN) && !defined(LLMC_CPU_ATTENTION_H_AVX512))
#ifndef CPU_EW
#error "llmc/cpu/attention.h: include llmc/cpu/kernels.h, which compiles it once per ISA level (elementwise.h)"
#endif
#ifdef CPU_EW_AGAIN
#define LLMC_CPU_ATTENTION_H_AVX512
#endif
#define LLMC_CPU_ATTENTION_H

#include "common.h"

/* ------------------------------------------------------------------------ */
/* attention                                                                */

/* Row-block size of the causal (lower-triangular) products: a block of
   CPU_ATT_BLOCK query rows only multiplies against the keys up to its last
   row, which skips most of the masked upper triangle. */
#ifndef CPU_ATT_BLOCK
#define CPU_ATT_BLOCK 64
#endif

/* The softmax backward of one causal row t (row length T): with a the
   probabilities and da = dL/da of the row, dp[s] = scale * a[s] * (da[s] -
   sum_s' a[s'] da[s']) for s <= t, and exactly 0 for s > t (the masked
   keys). fp32 arithmetic, one rounding per stored value. */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void cpu_att_softmax_backward_row(floatX* dp, const floatX* a, const floatX* da,
                                                int t, int T, float scale) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot) safelen(CPU_EW_LANES)
    for (int s = 0; s <= t; s++) dot += ldx(a[s]) * ldx(da[s]);
#pragma omp simd
    for (int s = 0; s <= t; s++) dp[s] = stx(scale * ldx(a[s]) * (ldx(da[s]) - dot));
    for (int s = t + 1; s < T; s++) dp[s] = stx(0.0f);
}
#endif /* CPU_EW_SHARED */

#ifdef LLMC_BF16
#include "matmul.h"

/* ------------------------------------------------------------------------ */
/* bf16 program, two implementations, the paths of cpu_gemm_bf16 (matmul_bf16.h:
   "primitive" and "fp32"), chosen as its class CPU_MM_ATTENTION; both
   round at the CUDA program's points (llmc/cuda/attention.cuh):
     forward:  preatt = bf16(scale q.k)           (fp32 sum of exact products)
               att    = bf16(exp(preatt - max) / sum)   (softmax in fp32 of
                        the ROUNDED preatt; 0 for s > t)
               out    = bf16(sum_s att v)          (of the ROUNDED att)
     backward: datt    = bf16(dout . v)
               dpreatt = bf16(scale att (datt - sum_s' att datt))  (fp32, of
                         the rounded att and datt; 0 for s > t)
               dq, dk, dv = bf16(old + fp32 sum over the ROUNDED dpreatt / att)
   "primitive": per sequence b, the NH heads' q, k, v (and dout, and the
   dq, dk, dv slices being accumulated) are copied into contiguous (NH, T,
   hs) bf16 tensors (exact), and each product is ONE batched oneDNN bf16
   matmul over the NH heads (as the CUDA program's strided-batched GEMMs):
   full T x T products (2x the causal flops: the masked half is computed and
   ignored, or multiplied by att's zeros), scale in the primitive (output
   scale), += through the sum post-op; softmax rows in fp32 between them.
   Called from serial code; scratch: 7 (NH, T, hs) tensors, counted in
   cpu_gemm_internal_bytes. */

/* dst (NH, T, hs) packed <- the heads of one sequence's (T, ld) rows at
   src, head h at columns h*hs (exact copies); unpack is the reverse */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void cpu_att_pack(floatX* dst, const floatX* src, int T, int NH, int hs, int ld) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < NH * T; r++) {
        int h = r / T, t = r % T;
        memcpy(dst + (size_t)r * hs, src + (size_t)t * ld + (size_t)h * hs, sizeof(floatX) * hs);
    }
}
#endif /* CPU_EW_SHARED */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void cpu_att_unpack(floatX* dst, const floatX* src, int T, int NH, int hs, int ld) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < NH * T; r++) {
        int h = r / T, t = r % T;
        memcpy(dst + (size_t)t * ld + (size_t)h * hs, src + (size_t)r * hs, sizeof(floatX) * hs);
    }
}
#endif /* CPU_EW_SHARED */
/* the same, rows [0, NH T) on this thread alone (--invariant 1's per-sequence tasks) */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void cpu_att_pack1(floatX* dst, const floatX* src, int T, int NH, int hs, int ld) {
    for (int r = 0; r < NH * T; r++)
        memcpy(dst + (size_t)r * hs, src + (size_t)(r % T) * ld + (size_t)(r / T) * hs, sizeof(floatX) * hs);
}
#endif /* CPU_EW_SHARED */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void cpu_att_unpack1(floatX* dst, const floatX* src, int T, int NH, int hs, int ld) {
    for (int r = 0; r < NH * T; r++)
        memcpy(dst + (size_t)(r % T) * ld + (size_t)(r / T) * hs, src + (size_t)r * hs, sizeof(floatX) * hs);
}
#endif /* CPU_EW_SHARED */
/* att row t <- bf16(softmax of the rounded preatt row p over s <= t), 0 past t */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void cpu_att_softmax_row(floatX* ar, const floatX* p, int t, int T) {
    float mx = -INFINITY;
    for (int s = 0; s <= t; s++) mx = ldx(p[s]) > mx ? ldx(p[s]) : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum) safelen(CPU_EW_LANES)
    for (int s = 0; s <= t; s++) sum += cpu_expf(ldx(p[s]) - mx);
    float inv = 1.0f / sum;
#pragma omp simd
    for (int s = 0; s <= t; s++) ar[s] = stx(cpu_expf(ldx(p[s]) - mx) * inv);
    for (int s = t + 1; s < T; s++) ar[s] = stx(0.0f);
}
#endif /* CPU_EW_SHARED */
/* the backward's seven (NH, T, hs) tensors of one sequence, consecutive at
   Q: its q, k, v (rows of C3 at q), dout (rows of C at d) and the dq, dk,
   dv being accumulated (rows of C3 at dq); one = 1: on this thread alone
   (cpu_att_pack1), else by all threads (cpu_att_pack). unpack_bwd: the
   three accumulated ones back into dq. Exact copies. */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void cpu_att_pack_bwd(floatX* Q, const floatX* q, const floatX* d, const floatX* dq, int T, int NH, int hs, int C, int one) {
    const size_t th = (size_t)T * hs;
    const floatX* src[7] = {q, q + C, q + 2 * C, d, dq, dq + C, dq + 2 * C};
    for (int i = 0; i < 7; i++) {
        if (one) cpu_att_pack1(Q + i * NH * th, src[i], T, NH, hs, i == 3 ? C : 3 * C);
        else cpu_att_pack(Q + i * NH * th, src[i], T, NH, hs, i == 3 ? C : 3 * C);
    }
}
#endif /* CPU_EW_SHARED */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void cpu_att_unpack_bwd(floatX* dq, const floatX* GQ, int T, int NH, int hs, int C, int one) {
    const size_t th = (size_t)T * hs;
    for (int i = 0; i < 3; i++) {
        if (one) cpu_att_unpack1(dq + i * C, GQ + i * NH * th, T, NH, hs, 3 * C);
        else cpu_att_unpack(dq + i * C, GQ + i * NH * th, T, NH, hs, 3 * C);
    }
}
#endif /* CPU_EW_SHARED */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline floatX* cpu_att_scratch(size_t elems) {
    return (floatX*)cpu_gemm_grow(&cpu_gemm_state.att_buf, &cpu_gemm_state.att_cap, (elems + 1) / 2);
}
#endif /* CPU_EW_SHARED */

static inline void CPU_EW(attention_forward_prim)(floatX* out, floatX* preatt, floatX* att, const floatX* qkv,
                                          int B, int T, int C, int NH) {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long th = (long long)T * hs, tt = (long long)T * T;
    floatX* Q = cpu_att_scratch(4 * (size_t)NH * th);
    floatX *Kh = Q + NH * th, *Vh = Kh + NH * th, *Oh = Vh + NH * th;
    const long long s_rows[3] = {th, hs, 1};   /* (NH, T, hs) packed */
    const long long s_kt[3] = {th, 1, hs};     /* its transpose (NH, hs, T) */
    const long long s_tt[3] = {tt, T, 1};      /* (NH, T, T) */
    for (int b = 0; b < B; b++) {
        const floatX* q = qkv + (size_t)b * T * C3;
        cpu_att_pack(Q, q, T, NH, hs, C3);
        cpu_att_pack(Kh, q + C, T, NH, hs, C3);
        cpu_att_pack(Vh, q + 2 * C, T, NH, hs, C3);
        floatX* pre = preatt + (size_t)b * NH * tt;
        floatX* a = att + (size_t)b * NH * tt;
        cpu_gemm_bf16_prim(NH, T, T, hs, scale, Q, s_rows, Kh, s_kt, 0, pre, s_tt, NULL);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < NH * T; r++) cpu_att_softmax_row(a + (size_t)r * T, pre + (size_t)r * T, r % T, T);
        cpu_gemm_bf16_prim(NH, T, hs, T, 1.0f, a, s_tt, Vh, s_rows, 0, Oh, s_rows, NULL);
        cpu_att_unpack(out + (size_t)b * T * C, Oh, T, NH, hs, C);
    }
}

static inline void CPU_EW(attention_backward_prim)(floatX* dqkv, floatX* dpreatt, floatX* datt, const floatX* dout,
                                           const floatX* qkv, const floatX* att, int B, int T, int C, int NH) {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long th = (long long)T * hs, tt = (long long)T * T;
    floatX* Q = cpu_att_scratch(7 * (size_t)NH * th);
    floatX *Kh = Q + NH * th, *Vh = Kh + NH * th, *Dh = Vh + NH * th;
    floatX *GQ = Dh + NH * th, *GK = GQ + NH * th, *GV = GK + NH * th;
    const long long s_rows[3] = {th, hs, 1};
    const long long s_kt[3] = {th, 1, hs};
    const long long s_tt[3] = {tt, T, 1};
    const long long s_ttT[3] = {tt, 1, T};     /* the transpose of (NH, T, T) */
    for (int b = 0; b < B; b++) {
        const floatX* q = qkv + (size_t)b * T * C3;
        floatX* dq = dqkv + (size_t)b * T * C3;
        cpu_att_pack_bwd(Q, q, dout + (size_t)b * T * C, dq, T, NH, hs, C, 0);
        const floatX* a = att + (size_t)b * NH * tt;
        floatX* dp = dpreatt + (size_t)b * NH * tt;
        floatX* da = datt + (size_t)b * NH * tt;
        cpu_gemm_bf16_prim(NH, T, T, hs, 1.0f, Dh, s_rows, Vh, s_kt, 0, da, s_tt, NULL);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < NH * T; r++)
            cpu_att_softmax_backward_row(dp + (size_t)r * T, a + (size_t)r * T, da + (size_t)r * T, r % T, T, scale);
        cpu_gemm_bf16_prim(NH, T, hs, T, 1.0f, dp, s_tt, Kh, s_rows, 1, GQ, s_rows, NULL);
        cpu_gemm_bf16_prim(NH, T, hs, T, 1.0f, dp, s_ttT, Q, s_rows, 1, GK, s_rows, NULL);
        cpu_gemm_bf16_prim(NH, T, hs, T, 1.0f, a, s_ttT, Dh, s_rows, 1, GV, s_rows, NULL);
        cpu_att_unpack_bwd(dq, GQ, T, NH, hs, C, 0);
    }
}

/* --invariant 1 on the primitive (cpu_inv_T != 0, the class on the
   primitive: cpu_gemm_decide): the same products and roundings per
   sequence, each sequence one task on one thread (its heads packed into
   the thread's buffer, cpu_gemm_thread_buf: 4 (forward) or 7 (backward)
   (NH, T, hs) tensors), each product a tile plan of the primitive
   (matmul_invariant.h: created for one thread, run on the calling one), so
   a sequence's bits depend neither on B nor on the thread count. */
static inline void CPU_EW(attention_forward_inv)(floatX* out, floatX* preatt, floatX* att, const floatX* qkv, int B, int T, int C, int NH) {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long th = (long long)T * hs, tt = (long long)T * T;
    const long long s_rows[3] = {th, hs, 1}, s_kt[3] = {th, 1, hs}, s_tt[3] = {tt, T, 1};
    cpu_inv_prim.call++;
    CpuInvPlan* pqk = cpu_inv_plan3(NH, T, T, hs, scale, s_rows, s_kt, s_tt, 0, 0, 0, 0);
    CpuInvPlan* pav = cpu_inv_plan3(NH, T, hs, T, 1.0f, s_tt, s_rows, s_rows, 0, 0, 0, 0);
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        floatX* Q = (floatX*)cpu_gemm_thread_buf(ith, (4 * (size_t)NH * th + 1) / 2);
        floatX *Kh = Q + NH * th, *Vh = Kh + NH * th, *Oh = Vh + NH * th;
#pragma omp for schedule(dynamic, 1)
        for (int b = 0; b < B; b++) {
            const floatX* q = qkv + (size_t)b * T * C3;
            cpu_att_pack1(Q, q, T, NH, hs, C3);
            cpu_att_pack1(Kh, q + C, T, NH, hs, C3);
            cpu_att_pack1(Vh, q + 2 * C, T, NH, hs, C3);
            floatX* pre = preatt + (size_t)b * NH * tt;
            floatX* a = att + (size_t)b * NH * tt;
            cpu_inv_plan_run(pqk, ith, Q, Kh, pre, NULL);
            for (int r = 0; r < NH * T; r++) cpu_att_softmax_row(a + (size_t)r * T, pre + (size_t)r * T, r % T, T);
            cpu_inv_plan_run(pav, ith, a, Vh, Oh, NULL);
            cpu_att_unpack1(out + (size_t)b * T * C, Oh, T, NH, hs, C);
        }
    }
}

static inline void CPU_EW(attention_backward_inv)(floatX* dqkv, floatX* dpreatt, floatX* datt, const floatX* dout,
                                          const floatX* qkv, const floatX* att, int B, int T, int C, int NH) {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long th = (long long)T * hs, tt = (long long)T * T;
    const long long s_rows[3] = {th, hs, 1}, s_kt[3] = {th, 1, hs}, s_tt[3] = {tt, T, 1}, s_ttT[3] = {tt, 1, T};
    cpu_inv_prim.call++;
    CpuInvPlan* pdv = cpu_inv_plan3(NH, T, T, hs, 1.0f, s_rows, s_kt, s_tt, 0, 0, 0, 0);
    CpuInvPlan* pgq = cpu_inv_plan3(NH, T, hs, T, 1.0f, s_tt, s_rows, s_rows, 0, 1, 0, 0);
    CpuInvPlan* pgk = cpu_inv_plan3(NH, T, hs, T, 1.0f, s_ttT, s_rows, s_rows, 0, 1, 0, 0);
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        floatX* Q = (floatX*)cpu_gemm_thread_buf(ith, (7 * (size_t)NH * th + 1) / 2);
        floatX *Kh = Q + NH * th, *Vh = Kh + NH * th, *Dh = Vh + NH * th;
        floatX *GQ = Dh + NH * th, *GK = GQ + NH * th, *GV = GK + NH * th;
#pragma omp for schedule(dynamic, 1)
        for (int b = 0; b < B; b++) {
            const floatX* q = qkv + (size_t)b * T * C3;
            floatX* dq = dqkv + (size_t)b * T * C3;
            cpu_att_pack_bwd(Q, q, dout + (size_t)b * T * C, dq, T, NH, hs, C, 1);
            const floatX* a = att + (size_t)b * NH * tt;
            floatX* dp = dpreatt + (size_t)b * NH * tt;
            floatX* da = datt + (size_t)b * NH * tt;
            cpu_inv_plan_run(pdv, ith, Dh, Vh, da, NULL);
            for (int r = 0; r < NH * T; r++)
                cpu_att_softmax_backward_row(dp + (size_t)r * T, a + (size_t)r * T, da + (size_t)r * T, r % T, T, scale);
            cpu_inv_plan_run(pgq, ith, dp, Kh, GQ, NULL);
            cpu_inv_plan_run(pgk, ith, dp, Q, GK, NULL);
            cpu_inv_plan_run(pgk, ith, a, Dh, GV, NULL);
            cpu_att_unpack_bwd(dq, GQ, T, NH, hs, C, 1);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* bf16 program, "fp32" implementation: the same blocked causal products
   in fp32 as the fp32 program (single-threaded sgemm per (b,h), tasks split
   among threads), on fp32 copies of the head's bf16 q, k, v, dout tiles
   (exact); each stored value is rounded at the points listed above, and the
   later products read the rounded value (kept in fp32 tiles). Scratch per
   thread: 7 T*hs + 2 T*T floats. */

/* dst (T, hs) fp32 contiguous <- src rows t*ld .. (bf16, exact) */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline void cpu_att_load(float* dst, const floatX* src, int T, int hs, int ld) {
    for (int t = 0; t < T; t++) {
        const floatX* s = src + (size_t)t * ld;
        float* d = dst + (size_t)t * hs;
#pragma omp simd
        for (int i = 0; i < hs; i++) d[i] = ldx(s[i]);
    }
}
#endif /* CPU_EW_SHARED */

static inline void CPU_EW(attention_forward)(floatX* out, floatX* preatt, floatX* att,
                                     const floatX* qkv, int B, int T, int C,
                                     int NH) {
    if (!cpu_gemm_path(CPU_MM_ATTENTION)) {
        if (cpu_inv_T) CPU_EW(attention_forward_inv)(out, preatt, att, qkv, B, T, C, NH);
        else CPU_EW(attention_forward_prim)(out, preatt, att, qkv, B, T, C, NH);
        return;
    }
    cpu_blas_init();
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t th = (size_t)T * hs, tt = (size_t)T * T;
#pragma omp parallel
    {
        float* buf = cpu_thread_scratch(4 * th + tt);
        float *qf = buf, *kf = qf + th, *vf = kf + th, *of = vf + th, *P = of + th;
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            const floatX* q = qkv + (size_t)b * T * C3 + h * hs;
            cpu_att_load(qf, q, T, hs, C3);
            cpu_att_load(kf, q + C, T, hs, C3);
            cpu_att_load(vf, q + 2 * C, T, hs, C3);
            floatX* pre = preatt + (size_t)bh * tt;
            floatX* a = att + (size_t)bh * tt;
            floatX* o = out + (size_t)b * T * C + h * hs;
            for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
                int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
                /* P[r0:r1, 0:r1] = scale * q[r0:r1] k[0:r1]^T */
                cpu_sgemm(0, 1, r1 - r0, r1, hs, scale, qf + (size_t)r0 * hs, hs, kf, hs, 0.0f,
                          P + (size_t)r0 * T, T);
            }
            for (int t = 0; t < T; t++) {
                float* pr = P + (size_t)t * T;
                floatX* prx = pre + (size_t)t * T;
                floatX* ar = a + (size_t)t * T;
#pragma omp simd
                for (int s = 0; s <= t; s++) {
                    prx[s] = stx(pr[s]);
                    pr[s] = ldx(prx[s]);
                }
                float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
                for (int s = 0; s <= t; s++) mx = pr[s] > mx ? pr[s] : mx;
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum) safelen(CPU_EW_LANES_F32)
                for (int s = 0; s <= t; s++) {
                    float e = cpu_expf(pr[s] - mx);
                    pr[s] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
#pragma omp simd
                for (int s = 0; s <= t; s++) {
                    ar[s] = stx(pr[s] * inv);
                    pr[s] = ldx(ar[s]);
                }
                for (int s = t + 1; s < T; s++) {
                    ar[s] = stx(0.0f);
                    pr[s] = 0.0f;
                }
            }
            for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
                int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
                /* O[r0:r1] = att[r0:r1, 0:r1] v[0:r1] (att is 0 past t) */
                cpu_sgemm(0, 0, r1 - r0, hs, r1, 1.0f, P + (size_t)r0 * T, T, vf, hs, 0.0f,
                          of + (size_t)r0 * hs, hs);
            }
            for (int t = 0; t < T; t++) {
                floatX* orow = o + (size_t)t * C;
                const float* frow = of + (size_t)t * hs;
#pragma omp simd
                for (int i = 0; i < hs; i++) orow[i] = stx(frow[i]);
            }
        }
    }
}

/* (the bf16 program's fp32-tile path, about 85 lines: one pass over the
   heads and row blocks with its scratch, as in the forward above; split, the
   tile bookkeeping would be passed around instead of read once) */
static inline void CPU_EW(attention_backward)(floatX* dqkv, floatX* dpreatt,
                                      floatX* datt, const floatX* dout,
                                      const floatX* qkv, const floatX* att,
                                      int B, int T, int C, int NH) {
    if (!cpu_gemm_path(CPU_MM_ATTENTION)) {
        if (cpu_inv_T) CPU_EW(attention_backward_inv)(dqkv, dpreatt, datt, dout, qkv, att, B, T, C, NH);
        else CPU_EW(attention_backward_prim)(dqkv, dpreatt, datt, dout, qkv, att, B, T, C, NH);
        return;
    }
    cpu_blas_init();
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t th = (size_t)T * hs, tt = (size_t)T * T;
#pragma omp parallel
    {
        float* buf = cpu_thread_scratch(7 * th + 2 * tt);
        float *qf = buf, *kf = qf + th, *vf = kf + th, *df = vf + th;
        float *gq = df + th, *gk = gq + th, *gv = gk + th, *A = gv + th, *D = A + tt;
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            const floatX* q = qkv + (size_t)b * T * C3 + h * hs;
            floatX* dq = dqkv + (size_t)b * T * C3 + h * hs;
            const floatX* d = dout + (size_t)b * T * C + h * hs;
            cpu_att_load(qf, q, T, hs, C3);
            cpu_att_load(kf, q + C, T, hs, C3);
            cpu_att_load(vf, q + 2 * C, T, hs, C3);
            cpu_att_load(df, d, T, hs, C);
            const floatX* a = att + (size_t)bh * tt;
            floatX* dp = dpreatt + (size_t)bh * tt;
            floatX* da = datt + (size_t)bh * tt;
            for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
                int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
                /* D[r0:r1, 0:r1] = dout_h[r0:r1] v[0:r1]^T */
                cpu_sgemm(0, 1, r1 - r0, r1, hs, 1.0f, df + (size_t)r0 * hs, hs, vf, hs, 0.0f,
                          D + (size_t)r0 * T, T);
            }
            for (int t = 0; t < T; t++) {
                const floatX* ar = a + (size_t)t * T;
                floatX* dar = da + (size_t)t * T;
                floatX* dpr = dp + (size_t)t * T;
                float* Ar = A + (size_t)t * T;
                float* Dr = D + (size_t)t * T;
#pragma omp simd
                for (int s = 0; s <= t; s++) {
                    Ar[s] = ldx(ar[s]);
                    dar[s] = stx(Dr[s]);
                    Dr[s] = ldx(dar[s]);
                }
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot) safelen(CPU_EW_LANES_F32)
                for (int s = 0; s <= t; s++) dot += Ar[s] * Dr[s];
#pragma omp simd
                for (int s = 0; s <= t; s++) {
                    dpr[s] = stx(scale * Ar[s] * (Dr[s] - dot));
                    Dr[s] = ldx(dpr[s]);
                }
                for (int s = t + 1; s < T; s++) {
                    dpr[s] = stx(0.0f);
                    Ar[s] = 0.0f;
                    Dr[s] = 0.0f;
                }
            }
            for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
                int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
                /* gq[r0:r1] = dpreatt[r0:r1, 0:r1] k[0:r1] */
                cpu_sgemm(0, 0, r1 - r0, hs, r1, 1.0f, D + (size_t)r0 * T, T, kf, hs, 0.0f,
                          gq + (size_t)r0 * hs, hs);
                /* gk[r0:r1] = dpreatt[r0:T, r0:r1]^T q[r0:T];
                   gv[r0:r1] = att[r0:T, r0:r1]^T dout_h[r0:T] */
                cpu_sgemm(1, 0, r1 - r0, hs, T - r0, 1.0f, D + (size_t)r0 * T + r0, T,
                          qf + (size_t)r0 * hs, hs, 0.0f, gk + (size_t)r0 * hs, hs);
                cpu_sgemm(1, 0, r1 - r0, hs, T - r0, 1.0f, A + (size_t)r0 * T + r0, T,
                          df + (size_t)r0 * hs, hs, 0.0f, gv + (size_t)r0 * hs, hs);
            }
            for (int t = 0; t < T; t++) {
                floatX* r = dq + (size_t)t * C3;
                const size_t o = (size_t)t * hs;
#pragma omp simd
                for (int i = 0; i < hs; i++) {
                    r[i] = stx(ldx(r[i]) + gq[o + i]);
                    r[C + i] = stx(ldx(r[C + i]) + gk[o + i]);
                    r[2 * C + i] = stx(ldx(r[2 * C + i]) + gv[o + i]);
                }
            }
        }
    }
}

/* The fp32 path's per-thread attention scratch, predicted (bytes): each
   thread's cpu_thread_scratch buffer is kept at its largest, forward
   4 T hs + T^2 floats, backward 7 T hs + 2 T^2 (training); it is resident
   in the threads that run at least one (b, h) of the B*NH (the dynamic
   schedule: min(nth, B NH)), a page-rounded malloc each. 0 where attention
   takes the primitive (its scratch, att_buf, is in the calibrated
   workspace). */
#if CPU_EW_SHARED   /* a helper: compiled once, inlined into both compiles */
static inline unsigned long long cpu_attention_scratch_predict(int B, int T, int C, int NH, int eval_only, int nth) {
    cpu_gemm_init();
    if (!cpu_gemm_state.fp32[CPU_MM_ATTENTION] || NH <= 0 || nth <= 0) return 0;
    size_t th = (size_t)T * (size_t)(C / NH), tt = (size_t)T * T;
    size_t n = eval_only ? 4 * th + tt : 7 * th + 2 * tt;
    unsigned long long per = ((unsigned long long)n * sizeof(float) + 4095) / 4096 * 4096;
    int active = B * NH < nth ? B * NH : nth;
    return per * (unsigned long long)active;
}
#endif /* CPU_EW_SHARED */

#else /* fp32 program */

/* Causal multi-head self-attention, one (b, h) per task, tasks split among
   threads, BLAS single-threaded per task. hs = C/NH, scale = 1/sqrt(hs).
   qkv (B,T,3C) = [q | k | v]; head h uses channels h*hs .. h*hs+hs-1 of each.
     preatt[b,h,t,s] = scale * q[b,t,h,:] . k[b,s,h,:]          (s <= t)
     att[b,h,t,s]    = exp(preatt - max) / sum_{s'<=t} exp(...)   (s <= t),
                       exactly 0 for s > t
     out[b,t,h*hs+i] = sum_{s<=t} att[b,h,t,s] v[b,s,h*hs+i]
   preatt, att: (B,NH,T,T); entries of preatt with s > t are left undefined.
   Writes out, preatt, att (no accumulation). */
static inline void CPU_EW(attention_forward)(floatX* out, floatX* preatt, floatX* att,
                                     const floatX* qkv, int B, int T, int C,
                                     int NH) {
    cpu_blas_init();
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const floatX* q = qkv + (size_t)b * T * C3 + h * hs;
        const floatX* k = q + C;
        const floatX* v = q + 2 * C;
        floatX* pre = preatt + (size_t)bh * T * T;
        floatX* a = att + (size_t)bh * T * T;
        floatX* o = out + (size_t)b * T * C + h * hs;
        for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
            int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
            /* pre[r0:r1, 0:r1] = scale * q[r0:r1] k[0:r1]^T */
            cpu_sgemm(0, 1, r1 - r0, r1, hs, scale, q + (size_t)r0 * C3, C3, k,
                      C3, 0.0f, pre + (size_t)r0 * T, T);
        }
        for (int t = 0; t < T; t++) {
            const floatX* p = pre + (size_t)t * T;
            floatX* ar = a + (size_t)t * T;
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int s = 0; s <= t; s++) mx = ldx(p[s]) > mx ? ldx(p[s]) : mx;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum) safelen(CPU_EW_LANES)
            for (int s = 0; s <= t; s++) {
                float e = cpu_expf(ldx(p[s]) - mx);
                ar[s] = stx(e);
                sum += e;
            }
            float inv = 1.0f / sum;
#pragma omp simd
            for (int s = 0; s <= t; s++) ar[s] = stx(ldx(ar[s]) * inv);
            for (int s = t + 1; s < T; s++) ar[s] = stx(0.0f);
        }
        for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
            int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
            /* out[r0:r1] = att[r0:r1, 0:r1] v[0:r1] (att is 0 past t) */
            cpu_sgemm(0, 0, r1 - r0, hs, r1, 1.0f, a + (size_t)r0 * T, T, v, C3,
                      0.0f, o + (size_t)r0 * C, C);
        }
    }
}

/* Backward of attention_forward; accumulates into dqkv (B,T,3C):
     datt[t,s]    = dout[t,h,:] . v[s,h,:]                          (s <= t)
     dpreatt[t,s] = scale * att[t,s] (datt[t,s] - sum_s' att[t,s'] datt[t,s'])
     dq += dpreatt @ k ;  dk += dpreatt^T @ q ;  dv += att^T @ dout_h
   (the 1/sqrt(hs) scale is folded into dpreatt). dpreatt and datt
   (B,NH,T,T) are scratch that this kernel overwrites, their prior contents
   are never read: on return datt holds dL/datt for s <= t (other entries
   undefined) and dpreatt holds scale-included dL/dpreatt for s <= t and
   exactly 0 for s > t. dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) as in the
   forward. Each (b,h) writes a disjoint set of dqkv columns: race-free. */
static inline void CPU_EW(attention_backward)(floatX* dqkv, floatX* dpreatt,
                                      floatX* datt, const floatX* dout,
                                      const floatX* qkv, const floatX* att,
                                      int B, int T, int C, int NH) {
    cpu_blas_init();
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const floatX* q = qkv + (size_t)b * T * C3 + h * hs;
        const floatX* k = q + C;
        const floatX* v = q + 2 * C;
        floatX* dq = dqkv + (size_t)b * T * C3 + h * hs;
        floatX* dk = dq + C;
        floatX* dv = dq + 2 * C;
        const floatX* a = att + (size_t)bh * T * T;
        floatX* dp = dpreatt + (size_t)bh * T * T;
        floatX* da = datt + (size_t)bh * T * T;
        const floatX* d = dout + (size_t)b * T * C + h * hs;
        for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
            int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
            /* datt[r0:r1, 0:r1] = dout_h[r0:r1] v[0:r1]^T */
            cpu_sgemm(0, 1, r1 - r0, r1, hs, 1.0f, d + (size_t)r0 * C, C, v, C3,
                      0.0f, da + (size_t)r0 * T, T);
        }
        for (int t = 0; t < T; t++)
            cpu_att_softmax_backward_row(dp + (size_t)t * T, a + (size_t)t * T, da + (size_t)t * T, t, T, scale);
        for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
            int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
            /* dq[r0:r1] += dpreatt[r0:r1, 0:r1] k[0:r1] */
            cpu_sgemm(0, 0, r1 - r0, hs, r1, 1.0f, dp + (size_t)r0 * T, T, k, C3,
                      1.0f, dq + (size_t)r0 * C3, C3);
            /* keys/values s in [r0,r1) get contributions from queries t >= r0:
               dk[r0:r1] += dpreatt[r0:T, r0:r1]^T q[r0:T]
               dv[r0:r1] += att[r0:T, r0:r1]^T dout_h[r0:T] */
            cpu_sgemm(1, 0, r1 - r0, hs, T - r0, 1.0f,
                      dp + (size_t)r0 * T + r0, T, q + (size_t)r0 * C3, C3, 1.0f,
                      dk + (size_t)r0 * C3, C3);
            cpu_sgemm(1, 0, r1 - r0, hs, T - r0, 1.0f,
                      a + (size_t)r0 * T + r0, T, d + (size_t)r0 * C, C, 1.0f,
                      dv + (size_t)r0 * C3, C3);
        }
    }
}

#endif /* LLMC_BF16 */

#endif /* LLMC_CPU_ATTENTION_H */
