# cuda.mk: the CUDA build (nvcc, cuBLASLt, NCCL, MPI). Builds ./train_gpt and
# ./test_gpt from the same train_gpt.cu / test_gpt.cu as the CPU build; only
# the backend header differs (llmc/cuda/backend.cuh under LLMC_CUDA: nvcc, or the emulated device of tests/cuda_emu).
#
#   make cuda                      (when included from the Makefile)
#   make -f cuda.mk cuda           (standalone)
#   make -f cuda.mk cuda-dev       the kernel checks of dev/cuda (need a GPU to run; no MPI, no NCCL)
#   make -f cuda.mk cuda-test      dev/cuda/test_backend (collectives, fences, uploads; needs a GPU)
#   make -f cuda.mk cuda CUDA_ARCH="-gencode arch=compute_90,code=[sm_90,compute_90]"   one GPU family only
#   make -f cuda.mk cuda CUDA_MPICC=false      no MPI: the single-rank stand-in llmc/mpi_stub/mpi.h
#   make -f cuda.mk cuda-config    print what was found (nvcc, MPI, NCCL)
#
# Needs CUDA 12+ (nvcc, cuBLAS/cuBLASLt, CUB) and NCCL >= 2.13. Found as:
#   nvcc: $(CUDA_HOME)/bin/nvcc, else the nvcc on PATH (CUDA_HOME then follows it)
#   cuBLAS: CUDA_CUBLAS_HOME (include/, lib/ with libcublas.so, libcublasLt.so),
#         else $(CUDA_HOME)/include and lib64 (scripts/gpu_check.sh makes such a
#         folder of links when only a pip wheel holds cuBLAS)
#   MPI:  `$(CUDA_MPICC) -showme` (Open MPI); with no such mpicc (or
#         CUDA_MPICC=false) the build uses llmc/mpi_stub/mpi.h and runs ONE rank
#   NCCL: CUDA_NCCL_HOME (with include/nccl.h and lib/libnccl.so.2), else the
#         nvidia-nccl wheel of $(CUDA_PYTHON) (site-packages/nvidia/nccl), else
#         the CUDA toolkit's include/ and lib64/. Linked as -l:libnccl.so.2
#         (the wheel has no unversioned libnccl.so) with an rpath to its folder.
# Variables are CUDA_-prefixed so that the including Makefile's CFLAGS / LIBS
# do not leak in. A change of flags (another MPI, NCCL or CUDA_ARCH)
# rebuilds the programs (build/cuda_flags.txt).

_CUDA_MK_PREV_GOAL := $(.DEFAULT_GOAL)

CUDA_HOME ?= $(if $(wildcard /usr/local/cuda/bin/nvcc),/usr/local/cuda,$(patsubst %/bin/nvcc,%,$(realpath $(shell command -v nvcc 2>/dev/null))))
NVCC ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null) nvcc)
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# host compiler warnings as in the CPU build; nvcc's own warnings stay on. The
# OpenMP pragmas of the shared headers (comm.h's host sums) are ignored here:
# the CUDA build has no OpenMP runtime (one fewer library on the GPU machine)
CUDA_WARN ?= -Xcompiler -Wall,-Wextra,-Wno-unused-function,-Wno-unused-parameter,-Wno-unknown-pragmas
# the MPI C++ bindings are not used (and warn): skip them
CUDA_NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) $(CUDA_WARN) -lineinfo -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX
CUDA_PYTHON ?= python3

# ---- MPI (evaluated once, only when a CUDA target is built)
CUDA_MPICC ?= mpicc
_cuda_mpi_compile = $(shell $(CUDA_MPICC) -showme:compile 2>/dev/null)
_cuda_mpi_link = $(shell $(CUDA_MPICC) -showme:link 2>/dev/null)
CUDA_MPI_COMPILE = $(eval CUDA_MPI_COMPILE := $(_cuda_mpi_compile))$(CUDA_MPI_COMPILE)
CUDA_MPI_LINK = $(eval CUDA_MPI_LINK := $(_cuda_mpi_link))$(CUDA_MPI_LINK)
CUDA_MPI_KIND = $(if $(strip $(CUDA_MPI_LINK)),mpi,stub)
# nvcc takes -I/-L/-l itself; -Wl,... and -pthread go to the host compiler
CUDA_MPI_INC = $(if $(filter stub,$(CUDA_MPI_KIND)),-Illmc/mpi_stub,$(filter -I%,$(CUDA_MPI_COMPILE)))
CUDA_MPI_LIBS = $(filter -L% -l%,$(CUDA_MPI_LINK)) \
                $(addprefix -Xlinker -rpath=,$(patsubst -L%,%,$(filter -L%,$(CUDA_MPI_LINK))))
CUDA_MPI_OTHER = $(filter-out -L% -l%,$(CUDA_MPI_LINK))

# ---- NCCL
_cuda_nccl_wheel = $(shell $(CUDA_PYTHON) -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
CUDA_NCCL_HOME ?= $(eval CUDA_NCCL_HOME := $(_cuda_nccl_wheel))$(CUDA_NCCL_HOME)
CUDA_NCCL_INCDIR = $(if $(strip $(CUDA_NCCL_HOME)),$(CUDA_NCCL_HOME)/include,$(CUDA_HOME)/include)
CUDA_NCCL_LIBDIR = $(if $(strip $(CUDA_NCCL_HOME)),$(CUDA_NCCL_HOME)/lib,$(CUDA_HOME)/lib64)
CUDA_NCCL_LIBS = -L$(CUDA_NCCL_LIBDIR) -l:libnccl.so.2 -Xlinker -rpath=$(CUDA_NCCL_LIBDIR)

# ---- cuBLAS / cuBLASLt: CUDA_CUBLAS_HOME (include/cublasLt.h, lib/libcublas.so,
# lib/libcublasLt.so) if given, else the toolkit's
CUDA_CUBLAS_HOME ?=
CUDA_CUBLAS_INCDIR = $(if $(strip $(CUDA_CUBLAS_HOME)),$(CUDA_CUBLAS_HOME)/include,$(CUDA_HOME)/include)
CUDA_CUBLAS_LIBDIR = $(if $(strip $(CUDA_CUBLAS_HOME)),$(CUDA_CUBLAS_HOME)/lib,$(CUDA_HOME)/lib64)

_cuda_empty :=
_cuda_space := $(_cuda_empty) $(_cuda_empty)
_cuda_comma := ,
# NCCL's folders come before the toolkit's, whose own nccl.h / libnccl.so.2 (if
# any) must not shadow the ones chosen
_cuda_blas_inc = -I$(CUDA_CUBLAS_INCDIR) $(filter-out -I$(CUDA_CUBLAS_INCDIR),-I$(CUDA_HOME)/include)
CUDA_INCLUDES = -I. $(CUDA_MPI_INC) -I$(CUDA_NCCL_INCDIR) $(filter-out -I$(CUDA_NCCL_INCDIR),$(_cuda_blas_inc))
CUDA_BLAS_LIBS = -L$(CUDA_CUBLAS_LIBDIR) -lcublasLt -lcublas -Xlinker -rpath=$(CUDA_CUBLAS_LIBDIR)
CUDA_LIBS = $(CUDA_NCCL_LIBS) $(CUDA_BLAS_LIBS) $(CUDA_MPI_LIBS) \
            $(if $(strip $(CUDA_MPI_OTHER)),-Xcompiler $(subst $(_cuda_space),$(_cuda_comma),$(strip $(CUDA_MPI_OTHER))),)
CUDA_HEADERS = $(wildcard llmc/*.h) $(wildcard llmc/zero/*.h) $(wildcard llmc/run/*.h) $(wildcard llmc/cuda/*.cuh) $(wildcard llmc/mpi_stub/*.h)
CUDA_FLAGS_FILE = build/cuda_flags.txt

.PHONY: cuda cuda-dev cuda-test cuda-clean cuda-config _cuda_force

cuda: train_gpt test_gpt

# the flags of the last CUDA build; rewritten (and so newer than the
# programs) only when they change
$(CUDA_FLAGS_FILE): _cuda_force
	@mkdir -p $(dir $@)
	@echo '$(NVCC) $(CUDA_NVCCFLAGS) $(CUDA_INCLUDES) $(CUDA_LIBS)' | cmp -s - $@ 2>/dev/null || \
	  echo '$(NVCC) $(CUDA_NVCCFLAGS) $(CUDA_INCLUDES) $(CUDA_LIBS)' > $@

cuda-config:
	@echo "nvcc:  $(NVCC) ($(CUDA_HOME))"
	@echo "arch:  $(CUDA_ARCH)"
	@echo "MPI:   $(if $(filter stub,$(CUDA_MPI_KIND)),none: single-rank stand-in llmc/mpi_stub/mpi.h ($(CUDA_MPICC) -showme gave nothing),$(CUDA_MPICC): $(CUDA_MPI_INC) $(CUDA_MPI_LINK))"
	@echo "cuBLAS: $(CUDA_CUBLAS_INCDIR)/cublasLt.h, $(CUDA_CUBLAS_LIBDIR)/libcublasLt.so"
	@echo "NCCL:  $(CUDA_NCCL_INCDIR)/nccl.h, $(CUDA_NCCL_LIBDIR)/libnccl.so.2$(if $(strip $(CUDA_NCCL_HOME)), (CUDA_NCCL_HOME or the $(CUDA_PYTHON) wheel), (CUDA toolkit))"

train_gpt: train_gpt.cu $(CUDA_HEADERS) $(CUDA_FLAGS_FILE)
	$(NVCC) $(CUDA_NVCCFLAGS) $(CUDA_INCLUDES) $< -o $@ $(CUDA_LIBS)

test_gpt: test_gpt.cu $(CUDA_HEADERS) $(CUDA_FLAGS_FILE)
	$(NVCC) $(CUDA_NVCCFLAGS) $(CUDA_INCLUDES) $< -o $@ $(CUDA_LIBS)

# the backend's collectives and uploads on a real communicator (NCCL + MPI or the stand-in)
cuda-test: dev/cuda/test_backend

dev/cuda/test_backend: dev/cuda/test_backend.cu $(CUDA_HEADERS) $(CUDA_FLAGS_FILE)
	$(NVCC) $(CUDA_NVCCFLAGS) $(CUDA_INCLUDES) $< -o $@ $(CUDA_LIBS)

# kernel checks: each other dev/cuda/<name>.cu is one program (no MPI, no NCCL)
CUDA_DEV_SRCS = $(filter-out dev/cuda/test_backend.cu,$(wildcard dev/cuda/*.cu))
CUDA_DEV_BINS = $(CUDA_DEV_SRCS:.cu=)

cuda-dev: $(CUDA_DEV_BINS)

$(CUDA_DEV_BINS): dev/cuda/%: dev/cuda/%.cu dev/cuda/common.h $(CUDA_HEADERS) $(CUDA_FLAGS_FILE)
	$(NVCC) $(CUDA_NVCCFLAGS) -I. $(_cuda_blas_inc) $< -o $@ $(CUDA_BLAS_LIBS)

cuda-clean:
	rm -f train_gpt test_gpt dev/cuda/test_backend $(CUDA_DEV_BINS) $(CUDA_FLAGS_FILE)

# when included, do not steal the default goal of the including Makefile
ifneq ($(words $(MAKEFILE_LIST)),1)
.DEFAULT_GOAL := $(_CUDA_MK_PREV_GOAL)
endif
