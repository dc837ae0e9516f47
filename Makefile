# Builds every program of the trainer. `make train` and `make test` do all
# the set-up on a fresh Debian machine (packages, data, reference files).
#
#   make train [NP=2 ZERO=1 STEPS=... ARGS="..."]   train the default GPT on the CPU
#   make test                                        every check a CPU machine can run
#   make bench                                       CPU speed figures (not a test)
#   make cluster-bench [CLUSTER_BENCH="STEPS=3 ..."] ZeRO stages x link rates on a simulated 2-node cluster (root)
#   make bench-offload [BENCH_STEPS=4 BENCH_NP=1 BENCH_ZERO=1]  memory, step time, I/O of --offload-optimizer disk (not a test)
#   make cuda                                        ./train_gpt ./test_gpt (nvcc, NCCL, cuBLASLt)
#   make sanitize                                    ASan+UBSan builds (build/san) on a short set of runs
#   make fuzz [FUZZ_SECONDS=300]                     fuzz the file readers (libFuzzer; build/fuzz)

SHELL := /bin/bash
MPICC ?= mpicc
CFLAGS ?= -O3 -march=x86-64-v3 -fno-math-errno
CFLAGS_ALL = $(CFLAGS) $(BLAS_CFLAGS) -std=gnu11 -fopenmp -Wall -Wextra -Wno-unused-function -Wno-unused-parameter -I.
# BLAS: oneDNN's sgemm when its runtime is installed (fastest here, and it
# picks AVX-512 kernels by itself), else OpenBLAS (the trainer re-executes
# itself with OPENBLAS_CORETYPE set when OpenBLAS does not recognise the CPU).
DNNL_LIB := $(wildcard /usr/lib/x86_64-linux-gnu/libdnnl.so.2)
ifneq ($(DNNL_LIB),)
BLAS_CFLAGS ?= -DLLMC_USE_DNNL
BLAS_LIBS ?= -l:libdnnl.so.2 -lopenblas
else
BLAS_CFLAGS ?=
BLAS_LIBS ?= -lopenblas
endif
LIBS = $(BLAS_LIBS) -lm
HEADERS = $(wildcard llmc/*.h) $(wildcard llmc/cpu/*.h)
PY = /usr/bin/python3
MPIRUN = mpirun --allow-run-as-root --oversubscribe

NP ?= 2
ZERO ?= 1
STEPS ?= 500
ARGS ?=

.PHONY: all train test deps data ref bench bench-offload clean sanitize fuzz cluster-bench

all: train_gpt_cpu test_gpt_cpu

# the CUDA build: make cuda (./train_gpt ./test_gpt), make cuda-dev (dev/cuda kernel checks)
include cuda.mk

train_gpt_cpu: train_gpt.cu $(HEADERS)
	$(MPICC) $(CFLAGS_ALL) -x c train_gpt.cu -o $@ $(LIBS)

test_gpt_cpu: test_gpt.cu $(HEADERS)
	$(MPICC) $(CFLAGS_ALL) -x c test_gpt.cu -o $@ $(LIBS)

# Debian packages and npm packages, installed only when missing.
deps:
	@bash scripts/install_deps.sh

data: deps
	@bash dev/data/prepare.sh

ref: deps
	@mkdir -p data/ref
	$(PY) dev/reference.py --config all --out data/ref

# (sub-makes: the BLAS choice above must see what `deps` installed)
train: deps data
	@$(MAKE) --no-print-directory train_gpt_cpu
	$(MPIRUN) -np $(NP) ./train_gpt_cpu -z $(ZERO) -x $(STEPS) $(ARGS)

test: deps data ref
	@$(MAKE) --no-print-directory all
	bash dev/run_tests.sh

bench: deps data
	@$(MAKE) --no-print-directory train_gpt_cpu
	@mkdir -p build
	BLAS_CFLAGS="$(BLAS_CFLAGS)" BLAS_LIBS="$(BLAS_LIBS)" bash dev/bench.sh

# ZeRO stages on 2 simulated nodes (scripts/cluster.sh) at 100 Mbit/s, 1 and
# 10 Gbit/s: step time, bytes across the link, a simple model. Not a test.
CLUSTER_BENCH ?=
cluster-bench: deps data
	@$(MAKE) --no-print-directory train_gpt_cpu
	$(CLUSTER_BENCH) bash dev/cluster_bench.sh

bench-offload: deps data
	@$(MAKE) --no-print-directory train_gpt_cpu
	@mkdir -p build
	STEPS=$(or $(BENCH_STEPS),4) NP=$(or $(BENCH_NP),1) ZERO=$(or $(BENCH_ZERO),1) bash dev/bench_offload.sh

sanitize: data ref
	bash dev/test_sanitizers.sh

FUZZ_SECONDS ?= 15
fuzz:
	bash dev/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -f train_gpt_cpu test_gpt_cpu train_gpt test_gpt
	rm -rf build/san build/fuzz
