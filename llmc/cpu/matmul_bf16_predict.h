/*
 * llmc/cpu/matmul_bf16_predict.h -- the bf16 program's matmul buffers
 * (matmul_bf16.h: the fp32-copy path's copies and panels, the primitive's
 * scratchpad and attention's packed heads) predicted from the model's
 * shapes before anything runs, for the fit check (gpt_fit.h, through
 * backend.h), and what they hold now, which fit_details.sh compares with
 * the prediction. Memory outside the ledger. Empty in the fp32 program.
 * Conventions: common.h.
 */
#ifndef LLMC_CPU_MATMUL_BF16_PREDICT_H
#define LLMC_CPU_MATMUL_BF16_PREDICT_H

#include "matmul_bf16.h"

#ifdef LLMC_BF16
/* The fp32-copy path's buffers (cpu_gemm_bf16_fp32), predicted: for one
   product op(A) (M,K) x op(B) (K,N) on nth threads, the shared operand
   (the one whose output dimension is not split: N*K floats when M >= N,
   else M*K) and every working thread's panel buffer (CPU_GEMM_PANEL x
   min(K, CPU_GEMM_KTILE) + CPU_GEMM_PANEL x the other dimension; thread 0
   alone below CPU_GEMM_SPLIT_MIN flops, else the threads whose
   cpu_split_range share of the split dimension is not empty). Each buffer
   keeps the largest size it was grown to (cpu_gemm_grow): *shared and
   tcap[0..nth) take the max. Floats. */
static inline void cpu_gemm_copy_predict(size_t* shared, size_t* tcap, int nth, int M, int N, int K) {
    const int split_m = M >= N;
    size_t S = split_m ? (size_t)N * K : (size_t)M * K;
    if (S > *shared) *shared = S;
    const int whole = (double)M * N * K < CPU_GEMM_SPLIT_MIN;
    const int KT = K < CPU_GEMM_KTILE ? K : CPU_GEMM_KTILE;
    size_t need = (size_t)CPU_GEMM_PANEL * KT + (size_t)CPU_GEMM_PANEL * (size_t)(split_m ? N : M);
    size_t dim = (size_t)(split_m ? M : N);
    for (int ith = 0; ith < nth && ith < 256; ith++) {
        size_t lo = 0, hi = 0;
        if (whole || nth <= 1) { if (ith == 0) hi = dim; }
        else cpu_split_range(dim, ith, nth, 64, &lo, &hi);
        if (hi > lo && need > tcap[ith]) tcap[ith] = need;
    }
}

/* The bytes the fp32-copy path holds after a training step (or an
   evaluation's forward, eval_only) of a GPT-2 of L blocks and C channels,
   the LM head in chunks of Vc rows (the last of last_rows), `rows` = B*T
   rows per micro-step, on nth threads: every class on the fp32-copy path
   (cpu_gemm_state.fp32) contributes its products (forward: (rows, OC, Cin)
   for qkv, attproj, fc, fcproj and (rows, Vc, C) per LM-head chunk;
   backward: dinp (rows, Cin, OC) and dweight (OC, Cin, rows)). What
   cpu_gemm_copy_bytes() then reads, exactly (tests/suites/fit_details.sh). */
static inline unsigned long long cpu_gemm_copy_predict_model(int L, int C, int Vc, int last_rows, int rows, int eval_only, int nth) {
    cpu_gemm_init();
    size_t shared = 0, tcap[256];
    memset(tcap, 0, sizeof(tcap));
    const int io[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};   /* (Cin, OC) of qkv, attproj, fc, fcproj */
    const int* fp = cpu_gemm_state.fp32;
    for (int j = 0; j < 4 && L > 0; j++) {
        if (fp[CPU_MM_FWD]) cpu_gemm_copy_predict(&shared, tcap, nth, rows, io[j][1], io[j][0]);
        if (eval_only) continue;
        if (fp[CPU_MM_DINP]) cpu_gemm_copy_predict(&shared, tcap, nth, rows, io[j][0], io[j][1]);
        if (fp[CPU_MM_DWEIGHT]) cpu_gemm_copy_predict(&shared, tcap, nth, io[j][1], io[j][0], rows);
    }
    int vr[2] = {Vc, last_rows};
    for (int k = 0; k < 2; k++) {
        if (vr[k] <= 0) continue;
        if (fp[CPU_MM_LM_FWD]) cpu_gemm_copy_predict(&shared, tcap, nth, rows, vr[k], C);
        if (eval_only) continue;
        if (fp[CPU_MM_LM_DINP]) cpu_gemm_copy_predict(&shared, tcap, nth, rows, C, vr[k]);
        if (fp[CPU_MM_LM_DWEIGHT]) cpu_gemm_copy_predict(&shared, tcap, nth, vr[k], C, rows);
    }
    unsigned long long b = (shared * sizeof(float) + 63) / 64 * 64;
    for (int i = 0; i < 256; i++) b += (tcap[i] * sizeof(float) + 63) / 64 * 64;
    return b;
}

/* The primitive path's buffers, predicted (bytes, as allocated): oneDNN's
   user scratchpad, one buffer kept at the largest of the primitives' needs
   (cpu_gemm_plan_build), over the products of the classes that take the
   primitive, each asked of its primitive descriptor
   (cpu_gemm_prim_scratch_query: the same descriptor the call builds), and
   attention's packed heads (attention.h, cpu_att_scratch: 4 (NH, T, hs)
   bf16 tensors forward, 7 in training) where attention takes the
   primitive. The arguments as cpu_gemm_copy_predict_model's, plus NH heads
   and T (rows = B*T). What cpu_gemm_prim_bytes() then reads. */
static inline unsigned long long cpu_gemm_prim_predict_model(int L, int C, int NH, int Vc, int last_rows, int rows, int T,
                                                             int eval_only) {
    cpu_gemm_init();
    const int* fp = cpu_gemm_state.fp32;
    size_t sp = 0, n;
#define CPU_GEMM_SP(x) do { n = (x); if (n > sp) sp = n; } while (0)
    const int io[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};   /* (Cin, OC) of qkv, attproj, fc, fcproj */
    for (int j = 0; j < 4 && L > 0; j++) {
        const int Cin = io[j][0], OC = io[j][1];
        if (!fp[CPU_MM_FWD]) CPU_GEMM_SP(cpu_gemm_prim_scratch_query2(0, 1, rows, OC, Cin, Cin, Cin, OC, 1, 0));
        if (eval_only) continue;
        if (!fp[CPU_MM_DINP]) CPU_GEMM_SP(cpu_gemm_prim_scratch_query2(0, 0, rows, Cin, OC, OC, Cin, Cin, 0, 1));
        if (!fp[CPU_MM_DWEIGHT]) CPU_GEMM_SP(cpu_gemm_prim_scratch_query2(1, 0, OC, Cin, rows, OC, Cin, Cin, 0, 1));
    }
    int vr[2] = {Vc, last_rows};
    for (int k = 0; k < 2; k++) {
        if (vr[k] <= 0) continue;
        if (!fp[CPU_MM_LM_FWD]) CPU_GEMM_SP(cpu_gemm_prim_scratch_query2(0, 1, rows, vr[k], C, C, C, vr[k], 0, 0));
        if (eval_only) continue;
        if (!fp[CPU_MM_LM_DINP]) CPU_GEMM_SP(cpu_gemm_prim_scratch_query2(0, 0, rows, C, vr[k], vr[k], C, C, 0, 1));
        if (!fp[CPU_MM_LM_DWEIGHT]) CPU_GEMM_SP(cpu_gemm_prim_scratch_query2(1, 0, vr[k], C, rows, vr[k], C, C, 0, 1));
    }
    unsigned long long att = 0;
    if (!fp[CPU_MM_ATTENTION] && L > 0 && NH > 0 && T > 0) {
        const int hs = C / NH;
        const long long th = (long long)T * hs, tt = (long long)T * T;
        const long long s_rows[3] = {th, hs, 1}, s_kt[3] = {th, 1, hs}, s_tt[3] = {tt, T, 1}, s_ttT[3] = {tt, 1, T};
        const float scale = 1.0f / sqrtf((float)hs);
        CPU_GEMM_SP(cpu_gemm_prim_scratch_query(NH, T, T, hs, scale, s_rows, s_kt, s_tt, 0, 0));
        CPU_GEMM_SP(cpu_gemm_prim_scratch_query(NH, T, hs, T, 1.0f, s_tt, s_rows, s_rows, 0, 0));
        if (!eval_only) {
            CPU_GEMM_SP(cpu_gemm_prim_scratch_query(NH, T, T, hs, 1.0f, s_rows, s_kt, s_tt, 0, 0));
            CPU_GEMM_SP(cpu_gemm_prim_scratch_query(NH, T, hs, T, 1.0f, s_tt, s_rows, s_rows, 0, 1));
            CPU_GEMM_SP(cpu_gemm_prim_scratch_query(NH, T, hs, T, 1.0f, s_ttT, s_rows, s_rows, 0, 1));
        }
        size_t elems = (size_t)(eval_only ? 4 : 7) * (size_t)NH * (size_t)th;   /* bf16 elements, cpu_att_scratch */
        att = (((elems + 1) / 2) * sizeof(float) + 63) / 64 * 64;
    }
#undef CPU_GEMM_SP
    return (unsigned long long)sp + att;
}

/* What the fp32-copy path holds now (bytes, as allocated: 64-byte rounded). */
static inline unsigned long long cpu_gemm_copy_bytes(void) {
    unsigned long long b = cpu_gemm_state.shared_cap ? (cpu_gemm_state.shared_cap * sizeof(float) + 63) / 64 * 64 : 0;
    for (int i = 0; i < 256; i++) if (cpu_gemm_state.tcap[i]) b += (cpu_gemm_state.tcap[i] * sizeof(float) + 63) / 64 * 64;
    return b;
}

/* What the primitive path holds now (bytes, as allocated): the scratchpad
   and attention's packed heads (cpu_gemm_prim_predict_model's two parts). */
static inline unsigned long long cpu_gemm_prim_bytes(void) {
    return (unsigned long long)cpu_gemm_state.scratch_bytes +
           (cpu_gemm_state.att_cap ? (cpu_gemm_state.att_cap * sizeof(float) + 63) / 64 * 64 : 0);
}

#endif /* LLMC_BF16 */

#endif /* LLMC_CPU_MATMUL_BF16_PREDICT_H */
