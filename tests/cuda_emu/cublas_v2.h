/* tests/cuda_emu/cublas_v2.h: see cublas_api.h */
#include "cuda_bf16.h"
#include "cublas_api.h"
