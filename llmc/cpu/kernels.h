/*
 * llmc/cpu/kernels.h -- every CPU kernel of the trainer, one header per
 * operation (the same names as the headers in llmc/cuda/); conventions in common.h.
 */
#ifndef LLMC_CPU_KERNELS_H
#define LLMC_CPU_KERNELS_H

#include "encoder.h"
#include "layernorm.h"
#include "matmul.h"
#include "attention.h"
#include "gelu.h"
#include "fused_classifier.h"
#include "global_norm.h"
#include "adamw.h"
#include "matmul_choice.h"

#endif /* LLMC_CPU_KERNELS_H */
