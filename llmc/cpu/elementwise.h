/*
 * llmc/cpu/elementwise.h -- every kernel that is not a matmul (the encoder,
 * layernorm, attention's softmax and its products' callers, GELU and the
 * residual, the classifier, the norms, AdamW), compiled twice in one binary
 * and picked at run time by the ISA level (isa.h):
 *
 *   name##_avx2    the file's code as the program is compiled
 *                  (-march=x86-64-v3: 8 fp32 lanes, FMA)
 *   name##_avx512  the same code under #pragma GCC target(AVX-512 F, BW,
 *                  VL, DQ, CD; 512-bit vectors preferred): 16 fp32 lanes
 *
 * and `name(...)` calls name##_avx512 where cpu_isa() is avx512 or above
 * (LLMC_CPU_ISA caps it, as it caps oneDNN), name##_avx2 below. The same
 * source, two instruction sets: no second copy of any kernel to keep in step.
 *
 * Bits: an elementwise loop gives each element the same operations at any
 * vector width (the same FMA contractions, made before vectorization). A
 * vectorized reduction (`omp simd reduction`) sums one partial per lane, so
 * its order depends on the width: every such loop in these headers carries
 * `safelen(CPU_EW_LANES)` / `safelen(CPU_EW_LANES_F64)`, the AVX2 width for
 * its type, so both compiles sum in the same order. Result: the two
 * compiles give the same bits for every kernel, checked bitwise by
 * tests/unit/test_kernels.c ("... avx2 and avx512 compiles bitwise equal").
 *
 * How: each kernel header is included twice, with CPU_EW(name) naming the
 * functions of that pass; its shared helpers (static inline, called by the
 * kernels and inlined into both compiles) sit in `#if CPU_EW_SHARED` blocks
 * that only the first pass compiles. Include this file (kernels.h does),
 * never a kernel header alone.
 */
#ifndef LLMC_CPU_ELEMENTWISE_H
#define LLMC_CPU_ELEMENTWISE_H

#include "common.h"

/* the AVX2 vector width in fp32 and fp64 lanes: the safelen of every
   vectorized reduction (the order of its partial sums) in both compiles */
#ifdef LLMC_BF16
#define CPU_EW_LANES 16
#else
#define CPU_EW_LANES 8
#endif
#define CPU_EW_LANES_F32 8
#define CPU_EW_LANES_F64 4

/* pass 1: the program's own flags (x86-64-v3) */
#define CPU_EW(name) name##_avx2
#define CPU_EW_SHARED 1
#include "encoder.h"
#include "layernorm.h"
#include "matmul.h"
#include "attention.h"
#include "gelu.h"
#include "fused_classifier.h"
#include "global_norm.h"
#include "adamw.h"
#undef CPU_EW
#undef CPU_EW_SHARED

/* pass 2: the same functions for AVX-512 (512-bit vectors preferred: gcc's
   generic tuning would otherwise keep 256-bit ones). No arch= here: the
   helpers compiled for x86-64-v3 stay inlinable (same arch, subset ISA). */
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512cd,prefer-vector-width=512")
#define CPU_EW(name) name##_avx512
#define CPU_EW_SHARED 0
#define CPU_EW_AGAIN 1
#include "encoder.h"
#include "layernorm.h"
#include "attention.h"
#include "gelu.h"
#include "fused_classifier.h"
#include "global_norm.h"
#include "adamw.h"
#undef CPU_EW
#undef CPU_EW_SHARED
#pragma GCC pop_options

/* 1 where the elementwise kernels run their AVX-512 compile: the level in
   use (after LLMC_CPU_ISA) is avx512 or above. A speed choice only: both
   compiles give the same bits. */
static inline int cpu_ew_wide(void) { return cpu_isa() >= CPU_ISA_AVX512; }

/* "AVX-512 (16 lanes)" or "AVX2+FMA (8 lanes)": the start-up line's words */
static inline const char* cpu_ew_desc(void) {
    return cpu_ew_wide() ? "AVX-512 (16 fp32 lanes; reductions in the AVX2 order: the same bits at every level)"
                         : "AVX2+FMA (8 fp32 lanes)";
}

#define CPU_EW_CALL(f, ...) (cpu_ew_wide() ? f##_avx512(__VA_ARGS__) : f##_avx2(__VA_ARGS__))

#define encoder_forward(...) CPU_EW_CALL(encoder_forward, __VA_ARGS__)
#define encoder_backward(...) CPU_EW_CALL(encoder_backward, __VA_ARGS__)
#define encoder_forward_rows(...) CPU_EW_CALL(encoder_forward_rows, __VA_ARGS__)
#define embedding_backward_range(...) CPU_EW_CALL(embedding_backward_range, __VA_ARGS__)
#define layernorm_forward(...) CPU_EW_CALL(layernorm_forward, __VA_ARGS__)
#define layernorm_backward(...) CPU_EW_CALL(layernorm_backward, __VA_ARGS__)
#define attention_forward(...) CPU_EW_CALL(attention_forward, __VA_ARGS__)
#define attention_backward(...) CPU_EW_CALL(attention_backward, __VA_ARGS__)
#define gelu_forward(...) CPU_EW_CALL(gelu_forward, __VA_ARGS__)
#define gelu_backward(...) CPU_EW_CALL(gelu_backward, __VA_ARGS__)
#define residual_forward(...) CPU_EW_CALL(residual_forward, __VA_ARGS__)
#define fused_classifier(...) CPU_EW_CALL(fused_classifier, __VA_ARGS__)
#define classifier_chunk_stats(...) CPU_EW_CALL(classifier_chunk_stats, __VA_ARGS__)
#define classifier_chunk_grad(...) CPU_EW_CALL(classifier_chunk_grad, __VA_ARGS__)
#define sum_squares(...) CPU_EW_CALL(sum_squares, __VA_ARGS__)
#define max_square(...) CPU_EW_CALL(max_square, __VA_ARGS__)
#define sum_squares_fixed(...) CPU_EW_CALL(sum_squares_fixed, __VA_ARGS__)
#define adamw_update(...) CPU_EW_CALL(adamw_update, __VA_ARGS__)

#endif /* LLMC_CPU_ELEMENTWISE_H */
