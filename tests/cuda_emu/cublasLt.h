/* tests/cuda_emu/cublasLt.h: see cublas_api.h */
#include "cuda_bf16.h"
#include "cublas_api.h"
