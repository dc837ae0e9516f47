# cuda.mk: the CUDA build (nvcc, cuBLASLt, NCCL, MPI). Builds ./train_gpt and
# ./test_gpt from the same train_gpt.cu / test_gpt.cu as the CPU build; only
# the backend header differs (llmc/cuda/backend.cuh under __CUDACC__).
#
#   make cuda                      (when included from the Makefile)
#   make -f cuda.mk cuda           (standalone)
#   make -f cuda.mk cuda-dev       the kernel benchmarks of dev/cuda (need a GPU to run)
#   make -f cuda.mk cuda CUDA_ARCH="-gencode arch=compute_90,code=sm_90"   one GPU family only
#
# Needs CUDA 12+ (nvcc, cuBLAS/cuBLASLt, CUB), NCCL >= 2.13 and an MPI with
# mpicc. Variables are CUDA_-prefixed so that the including Makefile's CFLAGS
# / LIBS do not leak in.

_CUDA_MK_PREV_GOAL := $(.DEFAULT_GOAL)

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# host compiler warnings as in the CPU build; nvcc's own warnings stay on
CUDA_WARN ?= -Xcompiler -Wall,-Wextra,-Wno-unused-function,-Wno-unused-parameter
# the MPI C++ bindings are not used (and warn): skip them
CUDA_NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) $(CUDA_WARN) -lineinfo -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX
CUDA_MPICC ?= mpicc
CUDA_MPI_COMPILE := $(shell $(CUDA_MPICC) -showme:compile 2>/dev/null)
CUDA_MPI_LINK := $(shell $(CUDA_MPICC) -showme:link 2>/dev/null)
# nvcc takes -I/-L/-l itself; anything else (-pthread, -Wl,...) goes to the host compiler
CUDA_MPI_INC := $(filter -I%,$(CUDA_MPI_COMPILE))
CUDA_MPI_LIBS := $(filter -L% -l%,$(CUDA_MPI_LINK))
CUDA_MPI_OTHER := $(filter-out -L% -l%,$(CUDA_MPI_LINK))
CUDA_INCLUDES = -I. -I$(CUDA_HOME)/include $(CUDA_MPI_INC)
CUDA_LIBS = -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl $(CUDA_MPI_LIBS) \
            $(if $(strip $(CUDA_MPI_OTHER)),-Xcompiler $(subst $(_cuda_space),$(_cuda_comma),$(strip $(CUDA_MPI_OTHER))),)
_cuda_empty :=
_cuda_space := $(_cuda_empty) $(_cuda_empty)
_cuda_comma := ,
CUDA_HEADERS = $(wildcard llmc/*.h) $(wildcard llmc/cuda/*.cuh)

.PHONY: cuda cuda-dev cuda-clean

cuda: train_gpt test_gpt

train_gpt: train_gpt.cu $(CUDA_HEADERS)
	$(NVCC) $(CUDA_NVCCFLAGS) $(CUDA_INCLUDES) $< -o $@ $(CUDA_LIBS)

test_gpt: test_gpt.cu $(CUDA_HEADERS)
	$(NVCC) $(CUDA_NVCCFLAGS) $(CUDA_INCLUDES) $< -o $@ $(CUDA_LIBS)

# kernel benchmarks: each dev/cuda/<name>.cu is one program (no MPI, no NCCL)
CUDA_DEV_SRCS = $(wildcard dev/cuda/*.cu)
CUDA_DEV_BINS = $(CUDA_DEV_SRCS:.cu=)

cuda-dev: $(CUDA_DEV_BINS)

dev/cuda/%: dev/cuda/%.cu dev/cuda/common.h $(CUDA_HEADERS)
	$(NVCC) $(CUDA_NVCCFLAGS) -I. -I$(CUDA_HOME)/include $< -o $@ -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas

cuda-clean:
	rm -f train_gpt test_gpt $(CUDA_DEV_BINS)

# when included, do not steal the default goal of the including Makefile
ifneq ($(words $(MAKEFILE_LIST)),1)
.DEFAULT_GOAL := $(_CUDA_MK_PREV_GOAL)
endif
