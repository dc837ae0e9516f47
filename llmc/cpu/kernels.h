/*
 * llmc/cpu/kernels.h -- every CPU kernel of the trainer, one header per
 * operation (the same names as the headers in llmc/cuda/); conventions in common.h.
 */
#ifndef LLMC_CPU_KERNELS_H
#define LLMC_CPU_KERNELS_H

#include "elementwise.h"   /* encoder, layernorm, matmul, attention, gelu,
                              fused_classifier, global_norm, adamw: the
                              non-matmul kernels compiled per ISA level */
#include "matmul_choice.h"

#endif /* LLMC_CPU_KERNELS_H */
