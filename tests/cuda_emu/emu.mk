# tests/cuda_emu/emu.mk: the emulated CUDA device (issue 47), included by the
# Makefile. The same sources as `make cuda` (train_gpt.cu, test_gpt.cu,
# llmc/cuda/*, dev/cuda/*), compiled with g++ -std=c++17 as host C++ against
# the stand-in headers of tests/cuda_emu (CUDA runtime, cuda_bf16.h,
# cuBLAS(Lt), NCCL over MPI, CUB), run on the CPU. tests/cuda_emu/NOTES.md.
#
#   make emu        ./train_gpt_emu ./test_gpt_emu, dev/cuda/*_emu (kernel checks at small shapes: DEV_SHAPE)
#   make emu-unit   build/test_emu: the emulator's own checks (./build/test_emu)
#   make emu-asan   the same with AddressSanitizer and UBSan's alignment check (build/emu-asan/;
#                   without the race / never-written checks of emu_race.h, which use the same hooks)
#   EMU_COVERAGE=0  without gcov instrumentation (default 1: --coverage for llmc/ and train_gpt.cu
#                   only, so a run writes PROGRAM-SOURCE.gcda beside the program, or under
#                   $$GCOV_PREFIX; tests/suites/cuda_emu.sh sums its runs with tests/cuda_emu/coverage.py)

EMU_CXX ?= g++
EMU_MPI_COMPILE = $(shell $(MPICC) -showme:compile 2>/dev/null)
EMU_MPI_LINK = $(shell $(MPICC) -showme:link 2>/dev/null)
# -g1: function names and line tables (enough for a backtrace's file:line);
# full -g made train_gpt_emu's compile 30% slower (18.6 s against 14.3 s of
# user time on a 2-core Zen 5) and the suite builds eleven such programs
EMU_OPT ?= -O1 -g1
# gcov counters only in the project's CUDA code and the trainer (not the emulator's own
# headers: gemm_run's inner loop would carry a counter per multiply-add); not in emu-asan
EMU_COVERAGE ?= 1
EMU_COV_FLAGS = $(if $(filter 1,$(EMU_COVERAGE)),--coverage '-fprofile-filter-files=llmc/;train_gpt\.cu' -DLLMC_EMU_GCOV=1 \
                  -Wl$(comma)--wrap=_exit -Wl$(comma)--wrap=MPI_Abort,)
comma := ,
# every load and store of the emulated programs calls the hooks of
# tests/cuda_emu/emu_race.h (shared-memory races, never-written device reads)
EMU_ACCESS_FLAGS = -DLLMC_EMU_ACCESS=1 -fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 \
                   --param asan-stack=0 --param asan-globals=0
EMU_CXXFLAGS = $(EMU_CXXFLAGS_BASE) $(EMU_COV_FLAGS) $(EMU_ACCESS_FLAGS)
EMU_CXXFLAGS_BASE = -std=c++17 $(EMU_OPT) -x c++ -DLLMC_CUDA=1 -DLLMC_CUDA_EMU=1 -DOMPI_SKIP_MPICXX \
               -Itests/cuda_emu -I. -Wall -Wno-unused-function -Wno-unused-parameter -Wno-unknown-pragmas \
               -Wno-unused-variable -Wno-sign-compare -Wno-class-memaccess -pthread
EMU_LIBS = -lboost_context -pthread
EMU_HEADERS = $(CUDA_HEADERS) $(wildcard tests/cuda_emu/*.h tests/cuda_emu/cub/device/*.cuh)
EMU_DEV_SRCS = $(filter-out dev/cuda/test_backend.cu,$(wildcard dev/cuda/*.cu))
EMU_DEV_BINS = $(EMU_DEV_SRCS:.cu=_emu)
EMU_ASAN_FLAGS = -fsanitize=address,alignment -fno-sanitize-recover=all -fno-omit-frame-pointer

.PHONY: emu emu-asan emu-clean emu-unit

# dev/cuda/test_backend_emu: the backend's streams, fences and NCCL over MPI (mpirun -np 1/2, LLMC_COLLECTIVES=host)
emu: train_gpt_emu test_gpt_emu $(EMU_DEV_BINS) dev/cuda/test_backend_emu

train_gpt_emu: train_gpt.cu $(EMU_HEADERS)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_MPI_COMPILE) $< -o $@ $(EMU_MPI_LINK) $(EMU_LIBS)

test_gpt_emu: test_gpt.cu $(EMU_HEADERS)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_MPI_COMPILE) $< -o $@ $(EMU_MPI_LINK) $(EMU_LIBS)

dev/cuda/test_backend_emu: dev/cuda/test_backend.cu $(EMU_HEADERS)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_MPI_COMPILE) $< -o $@ $(EMU_MPI_LINK) $(EMU_LIBS)

$(EMU_DEV_BINS): dev/cuda/%_emu: dev/cuda/%.cu dev/cuda/common.h $(EMU_HEADERS)
	$(EMU_CXX) $(EMU_CXXFLAGS) $< -o $@ $(EMU_LIBS)

# the emulator's own checks (issue 47 item 10): build/test_emu; the bf16
# reference table program build/emu_bf16_ref uses the CUDA toolkit's real
# cuda_bf16.h (host code, g++) when it is installed (else test_emu skips it)
EMU_TOOLKIT_INC ?= /usr/local/cuda/include
EMU_BF16_REF = $(if $(wildcard $(EMU_TOOLKIT_INC)/cuda_bf16.h),build/emu_bf16_ref,)
emu-unit: build/test_emu $(EMU_BF16_REF)

build/test_emu: tests/unit/test_emu.cpp tests/unit/emu_bf16_sweep.h $(EMU_HEADERS)
	@mkdir -p build
	$(EMU_CXX) $(EMU_CXXFLAGS) -Itests/unit $< -o $@ $(EMU_LIBS)

build/emu_bf16_ref: tests/unit/test_emu_bf16_ref.cpp tests/unit/emu_bf16_sweep.h
	@mkdir -p build
	$(EMU_CXX) -std=c++17 -O1 -I$(EMU_TOOLKIT_INC) -Itests/unit $< -o $@

emu-asan:
	@mkdir -p build/emu-asan
	$(EMU_CXX) $(EMU_CXXFLAGS_BASE) $(EMU_ASAN_FLAGS) $(EMU_MPI_COMPILE) train_gpt.cu -o build/emu-asan/train_gpt_emu $(EMU_MPI_LINK) $(EMU_LIBS)
	$(EMU_CXX) $(EMU_CXXFLAGS_BASE) $(EMU_ASAN_FLAGS) $(EMU_MPI_COMPILE) test_gpt.cu -o build/emu-asan/test_gpt_emu $(EMU_MPI_LINK) $(EMU_LIBS)

emu-clean:
	rm -f build/test_emu build/emu_bf16_ref train_gpt_emu test_gpt_emu dev/cuda/test_backend_emu $(EMU_DEV_BINS)
	rm -rf build/emu-asan
	rm -f *_emu-*.gcno *_emu-*.gcda dev/cuda/*_emu-*.gcno dev/cuda/*_emu-*.gcda build/test_emu-*.gcno build/test_emu-*.gcda
