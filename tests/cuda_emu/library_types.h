/* tests/cuda_emu/library_types.h: CUDA's data type enum (the values of the
   CUDA toolkit's library_types.h), for the emulated cuBLAS(Lt) and NCCL. */
#ifndef LLMC_CUDA_EMU_LIBRARY_TYPES_H
#define LLMC_CUDA_EMU_LIBRARY_TYPES_H
typedef enum cudaDataType_t {
    CUDA_R_16F = 2, CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16BF = 14, CUDA_R_8I = 3, CUDA_R_32I = 10
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;
#endif
