# Builds every program of the trainer. `make train` and `make test` do all
# the set-up on a fresh Debian machine (packages, data, reference files).
# `make help` lists the targets and variables.

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
# The bf16 programs (-DLLMC_BF16: bf16 params, grads and activations, fp32
# master weights and Adam moments, matmuls on oneDNN's bf16 matmul
# primitive) need oneDNN's headers (Debian: libdnnl-dev).
DNNL_HEADER := $(wildcard /usr/include/oneapi/dnnl/dnnl.h)
# the build id of the bf16 matmul calibration (llmc/cpu/matmul_choice.h): a
# hash of the CPU kernels' sources, the flags and the compiler; a
# calibration file of another build id is measured again
KERNELS_ID := $(shell { cat $(sort $(wildcard llmc/cpu/*.h)); echo '$(CFLAGS)'; $(MPICC) --version 2>/dev/null | head -1; } | md5sum | cut -c1-16)
CFLAGS_BF16 = $(CFLAGS) -DLLMC_BF16 -DLLMC_USE_DNNL -DLLMC_KERNELS_ID='"$(KERNELS_ID)"' -std=gnu11 -fopenmp -Wall -Wextra -Wno-unused-function -Wno-unused-parameter -I.
LIBS_BF16 = -ldnnl -lm
HEADERS = $(wildcard llmc/*.h) $(wildcard llmc/cpu/*.h) $(wildcard llmc/zero/*.h) $(wildcard llmc/run/*.h)
PY = /usr/bin/python3
# Open MPI's settings for faults (docs/faults.md), on every launch: mpirun
# declares a node's daemon lost 5 + 5 x 2 = 15 s at most after its link is
# cut (TCP keepalives on the daemons' connections; the default, 300 + 9 x
# 20 s, lets a job with a lost node wait for ever), and on SIGINT/SIGTERM
# it passes SIGTERM to the ranks 10 s later and SIGKILLs them 10 s after
# that: the time a rank has to finish its step and write its checkpoint.
MPI_FAULTS = --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 5 --mca odls_base_sigkill_timeout 10
MPIRUN = mpirun --allow-run-as-root --oversubscribe --bind-to none $(MPI_FAULTS)

NP ?= 2
ZERO ?= 1
STEPS ?= 1700
ARGS ?=
# precision of `make train` (fp32 or bf16); `make bench` runs both unless
# PRECISION is given
PRECISION ?= bf16
ifeq ($(filter fp32 bf16,$(PRECISION)),)
$(error PRECISION=$(PRECISION): must be fp32 or bf16)
endif
TRAIN_PROGRAM = $(if $(filter bf16,$(PRECISION)),train_gpt_cpu_bf16,train_gpt_cpu)
BENCH_PRECISIONS = $(if $(filter command line environment environment override,$(origin PRECISION)),$(PRECISION),fp32 bf16)

TABLE_STEPS ?= 4
FUZZ_SECONDS ?= 15
TABLE_MODEL ?= -e d6 -b 4 -t 256

.PHONY: all help train test check deps data ref docs compare check-model bench bench-offload zero-table cluster-bench fit-demo bench-recompute zeropp-accuracy plots clean sanitize fuzz _dnnl-headers

all: train_gpt_cpu test_gpt_cpu train_gpt_cpu_bf16 test_gpt_cpu_bf16 build/fit/train_gpt_cpu.workspace build/fit/train_gpt_cpu_bf16.matmul build/fit/train_gpt_cpu_bf16.workspace

# the fit check's training workspace of each program, measured once per build (llmc/fit.h)
# at the default thread count (all cores) and at 1 thread (.threads1.workspace:
# every rank of a multi-rank run on 2 cores; the libraries keep per-thread memory).
# The target is the CPU's own level (LLMC_CPU_ISA unset); where the caller's
# environment caps the level (LLMC_CPU_ISA=avx2 make test), that level's files too
# (.<level>.workspace): its runs read those
CALIBRATE = env -u OMP_NUM_THREADS -u LLMC_CPU_ISA ./$(1) $(2) && \
	{ [ "$$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" -le 1 ] || env -u LLMC_CPU_ISA OMP_NUM_THREADS=1 ./$(1) $(2); } && \
	{ [ -z "$$LLMC_CPU_ISA" ] || { env -u OMP_NUM_THREADS ./$(1) $(2) && { [ "$$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" -le 1 ] || OMP_NUM_THREADS=1 ./$(1) $(2); }; }; }
build/fit/%.workspace: %
	@$(call CALIBRATE,$<,--calibrate-workspace)
# the bf16 matmul paths of this CPU and build, measured once per build
# (./train_gpt_cpu_bf16 --calibrate-matmul; llmc/cpu/matmul_choice.h) at
# the default thread count (all cores) and at 1 thread (.threads1.matmul:
# every rank of a multi-rank run on 2 cores), so that no run measures them
# at its start; the test program reads the same files; a provisional file
# (measured at a start-up, not by --calibrate-matmul) is calibrated again
build/fit/train_gpt_cpu_bf16.matmul: train_gpt_cpu_bf16 $(if $(shell grep -qs '^provisional 1' build/fit/train_gpt_cpu_bf16.matmul build/fit/train_gpt_cpu_bf16.threads1.matmul && echo y),_force) | build/fit/train_gpt_cpu.workspace
	@$(call CALIBRATE,train_gpt_cpu_bf16,--calibrate-matmul)
.PHONY: _force
_force:
# one at a time, even under make -j: two trainers starting together reach a
# different (larger, 33-45 MB instead of 20.6) resident workspace; the bf16
# workspace after the matmul paths it runs
build/fit/train_gpt_cpu_bf16.workspace: build/fit/train_gpt_cpu_bf16.matmul | build/fit/train_gpt_cpu.workspace

help:
	@echo "targets:"
	@echo "  make train       train the default GPT on the CPU (installs packages, prepares the Brown corpus, builds)"
	@echo "  make test        every check a CPU machine can run (what CI runs); last line 'N passed, M failed'"
	@echo "  make check       the quick inner loop (1-2 min): unit suites, a short run of each program, stage 3 at 2 ranks"
	@echo "  make all         the four CPU programs: ./train_gpt_cpu ./test_gpt_cpu (fp32), ./train_gpt_cpu_bf16 ./test_gpt_cpu_bf16 (the default target),"
	@echo "                   and build/fit/: each program's workspace, the bf16 matmul paths measured on this CPU"
	@echo "  make zero-table  the ZeRO stage table of the README: memory, wire bytes, ms/step per stage on 2 and 4 ranks"
	@echo "  make bench       CPU speed figures (a benchmark, not a test)"
	@echo "  make cluster-bench   ZeRO stages x link rates on a simulated 2-node cluster (root; scripts/cluster.sh)"
	@echo "  make bench-offload   memory, step time, I/O of --offload-optimizer disk (a benchmark, not a test)"
	@echo "  make fit-demo    which stage fits: GPT-2 124M on 4 memory-limited nodes (root; scripts/cluster.sh --mem; dev/fit_demo.sh)"
	@echo "  make bench-recompute   activation bytes and step time of -r 0..3 (GPT-2 124M B=4 T=1024; make train's model)"
	@echo "  make zeropp-accuracy   ZeRO++'s quantized collectives against the plain run and another seed (make train's run; dev/zeropp_accuracy.sh)"
	@echo "  make plots       the README's pictures (dev/plot.py all; PNGs in PLOT_DIR)"
	@echo "  make cuda        ./train_gpt ./test_gpt (nvcc, NCCL, cuBLASLt); make cuda-dev: dev/cuda kernel checks; make cuda-test:"
	@echo "                   dev/cuda/test_backend (needs a GPU); make cuda-config: what was found (nvcc, MPI, NCCL); make cuda-clean"
	@echo "  make sanitize    ASan+UBSan builds (build/san) on a short set of runs"
	@echo "  make fuzz        fuzz the file readers (libFuzzer; build/fuzz)"
	@echo "  make deps data ref   Debian and npm packages / Brown corpus shards and tokenizer / PyTorch reference files"
	@echo "  make compare     compare runs step by step and checkpoint by checkpoint: RUNS=\"A B\" [PLOT=x.png] (dev/compare_runs.py)"
	@echo "  make check-model a checkpoint's val loss from the trainer (-x 0) and the float64 PyTorch reference, same tokens:"
	@echo "                   CKPT=FILE [DATA='glob'] [VAL_ARGS='-b 4 -t 128 -m 80'] [PROGRAM=...: default the one runs.txt names]"
	@echo "                   (dev/check_model.sh, dev/reference.py --eval)"
	@echo "  make docs        docs/flags.md from the trainer's flag table (./train_gpt_cpu --help-markdown; make test fails when it is stale)"
	@echo "  make clean       remove the programs and build/san, build/fuzz"
	@echo "  make help        this list"
	@echo "variables (make VAR=value ...), with their values now:"
	@echo "  NP=$(NP)                   make train: MPI ranks"
	@echo "  ZERO=$(ZERO)                 make train: ZeRO stage (the trainer's -z default is the same)"
	@echo "  STEPS=$(STEPS)              make train: optimizer steps (-x)"
	@echo "  PRECISION=$(PRECISION)          make train, make zero-table, make plots, make bench-offload, make cluster-bench: the bf16 or the fp32 program; make bench: both unless given"
	@echo "  ARGS='$(ARGS)'                make train, make zero-table: more trainer flags (./train_gpt_cpu_bf16 -h; of a flag given twice the last wins)"
	@echo "  TABLE_STEPS=$(TABLE_STEPS)          make zero-table: steps per run (10 runs: N = 2, 4 x stages 0, 1, 2, 3 with reshard 1 and 0)"
	@echo "  TABLE_MODEL='$(TABLE_MODEL)'   make zero-table: model and batch per rank"
	@echo "  FUZZ_SECONDS=$(FUZZ_SECONDS)        make fuzz: seconds per reader"
	@echo "  CLUSTER_BENCH='$(CLUSTER_BENCH)'      make cluster-bench: environment for dev/cluster_bench.sh, e.g. 'STEPS=3'"
	@echo "  FIT_DEMO='$(FIT_DEMO)'      make fit-demo: environment for dev/fit_demo.sh, e.g. 'NODES=4 STEPS=2'"
	@echo "  BENCH_RECOMPUTE='$(BENCH_RECOMPUTE)'   make bench-recompute: environment for dev/bench_recompute.sh (CONFIGS, OUT)"
	@echo "  BENCH_STEPS BENCH_NP BENCH_ZERO   make bench-offload: steps (4), ranks (1), stage (1)"
	@echo "  PLOT_NP='$(PLOT_NP)' PLOT_STEPS=$(PLOT_STEPS) LOSS_STEPS=$(LOSS_STEPS) PLOT_DIR=$(PLOT_DIR) PLOT_ARGS='$(PLOT_ARGS)'   make plots"
	@echo "  RUNS='$(RUNS)' PLOT='$(PLOT)' COMPARE_ARGS='$(COMPARE_ARGS)'   make compare"
	@echo "  CKPT='$(CKPT)' DATA='$(DATA)' VAL_ARGS='$(VAL_ARGS)'   make check-model (NP ranks)"
	@echo "  CFLAGS MPICC BLAS_CFLAGS BLAS_LIBS   the CPU build"
	@echo "  CUDA_HOME NVCC CUDA_ARCH             the CUDA build (cuda.mk)"

# the CUDA build: make cuda (./train_gpt ./test_gpt), make cuda-dev (dev/cuda kernel checks)
include cuda.mk
# the emulated CUDA device: make emu, make emu-asan (tests/cuda_emu)
include tests/cuda_emu/emu.mk
# the C unit tests (build/test_*; tests/run.sh builds them through it): make unit-tests
include tests/unit/unit.mk

train_gpt_cpu: train_gpt.cu $(HEADERS)
	$(MPICC) $(CFLAGS_ALL) -x c train_gpt.cu -o $@ $(LIBS)

test_gpt_cpu: test_gpt.cu $(HEADERS)
	$(MPICC) $(CFLAGS_ALL) -x c test_gpt.cu -o $@ $(LIBS)

train_gpt_cpu_bf16: train_gpt.cu $(HEADERS) | _dnnl-headers
	$(MPICC) $(CFLAGS_BF16) -x c train_gpt.cu -o $@ $(LIBS_BF16)

test_gpt_cpu_bf16: test_gpt.cu $(HEADERS) | _dnnl-headers
	$(MPICC) $(CFLAGS_BF16) -x c test_gpt.cu -o $@ $(LIBS_BF16)

_dnnl-headers:
ifeq ($(DNNL_HEADER),)
	@echo "error: the bf16 programs need oneDNN's headers (/usr/include/oneapi/dnnl/dnnl.h): apt-get install libdnnl-dev, or make deps" >&2; exit 1
endif

# Debian packages and npm packages, installed only when missing.
deps:
	@bash scripts/install_deps.sh

# the Brown corpus shards and the tokenizer; says something only when it made them
data: deps
	@bash dev/data/prepare.sh --quiet

ref: deps
	@mkdir -p data/ref
	$(PY) dev/reference.py --config all --out data/ref

# (sub-makes: the BLAS choice above must see what `deps` installed)
# scripts/mpirun_fg.sh: Ctrl-C reaches the ranks at once (SIGUSR2 through
# mpirun), a second Ctrl-C exits now, no rank is left running (docs/faults.md)
train: deps data
	@$(MAKE) --no-print-directory $(TRAIN_PROGRAM) build/fit/$(TRAIN_PROGRAM).workspace
	exec bash scripts/mpirun_fg.sh $(MPIRUN) -np $(NP) ./$(TRAIN_PROGRAM) -z $(ZERO) -x $(STEPS) $(ARGS)

test: deps data ref
	@$(MAKE) --no-print-directory all
	bash tests/run.sh

# the inner loop (about 1-2 minutes): the unit suites, a short run of each
# program, stage 3 at 2 ranks; the same last line as make test
# (docs/testing.md: what it leaves out)
check: deps data
	@[ -f data/ref/odd_debug_state.bin ] || $(MAKE) --no-print-directory ref
	@$(MAKE) --no-print-directory all
	bash tests/run.sh --quick

# compare runs (their -o directories): RUNS="A B ..." [PLOT=overlay.png] [COMPARE_ARGS="--tol 1e-5"]
RUNS ?=
PLOT ?=
COMPARE_ARGS ?=
compare:
	@[ -n "$(RUNS)" ] || { echo "error: make compare: give RUNS=\"RUN_A RUN_B ...\" (the -o directories of runs)" >&2; exit 1; }
	$(PY) dev/compare_runs.py $(RUNS) $(if $(PLOT),-o $(PLOT)) $(COMPARE_ARGS)

# a checkpoint against the PyTorch reference over the same val tokens:
# CKPT=FILE [DATA='val glob'] [VAL_ARGS="-b 4 -t 128 -m 80"] [NP=2] [PROGRAM=./train_gpt_cpu_bf16]
# (PROGRAM: the program that evaluates it; default: the one runs.txt beside CKPT names, else by the file's version)
CKPT ?=
PROGRAM ?=
DATA ?= data/brown/brown_val_*.bin
VAL_ARGS ?=
check-model:
	@[ -n "$(CKPT)" ] || { echo "error: make check-model: give CKPT=FILE (a model_*.bin of a run, or any llm.c checkpoint)" >&2; exit 1; }
	@$(MAKE) -s --no-print-directory train_gpt_cpu train_gpt_cpu_bf16
	@NP=$(NP) MPIRUN="$(MPIRUN)" PROGRAM='$(PROGRAM)' bash dev/check_model.sh '$(CKPT)' '$(DATA)' $(VAL_ARGS)

# docs/flags.md: generated from the flag table of train_gpt.cu
docs: train_gpt_cpu
	./train_gpt_cpu --help-markdown > docs/flags.md

bench: deps data
	@$(MAKE) --no-print-directory $(if $(filter fp32,$(BENCH_PRECISIONS)),train_gpt_cpu) $(if $(filter bf16,$(BENCH_PRECISIONS)),train_gpt_cpu_bf16 build/fit/train_gpt_cpu_bf16.matmul)
	@mkdir -p build
	PRECISIONS="$(BENCH_PRECISIONS)" BLAS_CFLAGS="$(BLAS_CFLAGS)" BLAS_LIBS="$(BLAS_LIBS)" KERNELS_ID="$(KERNELS_ID)" bash dev/bench.sh

# the ZeRO table of the README (dev/zero_table.sh): a benchmark, not a test
zero-table: deps data
	@$(MAKE) --no-print-directory $(TRAIN_PROGRAM)
	PROG=./$(TRAIN_PROGRAM) MODEL="$(TABLE_MODEL)" bash dev/zero_table.sh $(strip $(TABLE_STEPS) $(ARGS))

# ZeRO stages on 2 simulated nodes (scripts/cluster.sh) at 100 Mbit/s, 1 and
# 10 Gbit/s: step time, bytes across the link, a simple model. Not a test.
CLUSTER_BENCH ?=
cluster-bench: deps data
	@$(MAKE) --no-print-directory $(TRAIN_PROGRAM)
	PROG=./$(TRAIN_PROGRAM) $(CLUSTER_BENCH) bash dev/cluster_bench.sh

# which stage fits memory-limited nodes (root): FIT_DEMO='NODES=4 STEPS=2 MODEL="-e d12 -b 2 -t 256"'
fit-demo: deps data
	@$(MAKE) --no-print-directory train_gpt_cpu_bf16 build/fit/train_gpt_cpu_bf16.workspace
	$(FIT_DEMO) bash dev/fit_demo.sh

# activation recomputation, measured: BENCH_RECOMPUTE='CONFIGS=...' (dev/bench_recompute.sh)
bench-recompute: deps data
	@$(MAKE) --no-print-directory $(TRAIN_PROGRAM) build/fit/$(TRAIN_PROGRAM).workspace
	PROG=./$(TRAIN_PROGRAM) $(BENCH_RECOMPUTE) bash dev/bench_recompute.sh

# what ZeRO++'s quantization costs in accuracy (make train's run, 3 x 1700 steps)
zeropp-accuracy: deps data
	@$(MAKE) --no-print-directory $(TRAIN_PROGRAM) build/fit/$(TRAIN_PROGRAM).workspace
	PROG=./$(TRAIN_PROGRAM) $(ZEROPP_ACCURACY) bash dev/zeropp_accuracy.sh

bench-offload: deps data
	@$(MAKE) --no-print-directory $(TRAIN_PROGRAM)
	@mkdir -p build
	PROG=./$(TRAIN_PROGRAM) STEPS=$(or $(BENCH_STEPS),4) NP=$(or $(BENCH_NP),1) ZERO=$(or $(BENCH_ZERO),1) bash dev/bench_offload.sh
# The pictures of make train's model (d2, B=4, T=128, the PRECISION program):
# the memory ledger and the traffic of stages 0-3 (and stage 3 with --reshard-after-forward 0) at
# each PLOT_NP rank count for PLOT_STEPS steps, a trace of each at the first
# rank count (timeline), one LOSS_STEPS-step run at 2 ranks, stage 1 (loss;
# 0 skips it), and the cluster bench's results when build/cluster_bench has
# them. Runs and logs in build/plots; PNGs in PLOT_DIR. About 3 minutes on
# 2 cores. PLOT_ARGS: more options of dev/plot.py all (--model, --trace-flags,
# --loss-np, --loss-zero; dev/plot.py all -h).
PLOT_DIR ?= docs/img
PLOT_NP ?= 2 4
PLOT_STEPS ?= 3
LOSS_STEPS ?= 60
PLOT_ARGS ?=
plots: deps data
	@$(MAKE) --no-print-directory $(TRAIN_PROGRAM)
	$(PY) dev/plot.py all --exe ./$(TRAIN_PROGRAM) --out $(PLOT_DIR) --np "$(PLOT_NP)" --steps $(PLOT_STEPS) --loss-steps $(LOSS_STEPS) $(PLOT_ARGS)

sanitize: data ref
	bash tests/suites/sanitizers.sh

fuzz:
	bash tests/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -f train_gpt_cpu test_gpt_cpu train_gpt_cpu_bf16 test_gpt_cpu_bf16 train_gpt test_gpt
	rm -rf build/san build/fuzz
