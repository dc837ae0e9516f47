# tests/unit/unit.mk: the C unit tests of tests/unit as make targets, for
# tests/run.sh (make test, make check), which builds each suite's binary
# with `make -s -f tests/unit/unit.mk build/test_NAME` before it runs it.
# Each binary depends on its source, the headers it includes (gcc -MMD:
# build/test_NAME.d) and this file, so a second run compiles nothing; a
# change to any header a test includes rebuilds that test only. Standalone
# (no variable of the Makefile needed) and included by the Makefile, so
# `make build/test_kernels` works too.

UNIT_CC = gcc -O2 -std=gnu11 -Wall -I. -MMD -MP
UNIT_MPICC = mpicc -O2 -std=gnu11 -Wall -fopenmp -I. -MMD -MP
UNIT_KERNELS = -O3 -march=x86-64-v3 -fopenmp
UNIT_TESTS = build/test_dataloader build/test_zero build/test_fit build/test_fit_choose build/test_quant \
             build/test_hostcoll build/test_quant_coll build/test_kernels build/test_kernels_bf16 \
             build/test_matmul_choice build/test_kernels_dnnl

.PHONY: unit-tests
unit-tests: $(UNIT_TESTS)

build/test_dataloader: tests/unit/test_dataloader.c tests/unit/unit.mk
	@mkdir -p build
	$(UNIT_CC) $< -o $@
build/test_zero build/test_fit build/test_quant: build/test_%: tests/unit/test_%.c tests/unit/unit.mk
	@mkdir -p build
	$(UNIT_CC) $< -o $@ -lm
build/test_fit_choose: tests/unit/test_fit_choose.c tests/unit/unit.mk
	@mkdir -p build
	$(UNIT_MPICC) -march=x86-64-v3 $< -o $@ -lopenblas -lm
build/test_hostcoll build/test_quant_coll: build/test_%: tests/unit/test_%.c tests/unit/unit.mk
	@mkdir -p build
	$(UNIT_MPICC) $< -o $@ -lm
build/test_kernels: tests/unit/test_kernels.c tests/unit/unit.mk
	@mkdir -p build
	$(UNIT_CC) $(UNIT_KERNELS) $< -o $@ -lopenblas -lm
build/test_kernels_bf16: tests/unit/test_kernels.c tests/unit/unit.mk
	@mkdir -p build
	$(UNIT_CC) $(UNIT_KERNELS) -DLLMC_BF16 $< -o $@ -ldnnl -lm
# the fp32 kernels on oneDNN's sgemm, as the programs build them when oneDNN is installed
build/test_kernels_dnnl: tests/unit/test_kernels.c tests/unit/unit.mk
	@mkdir -p build
	$(UNIT_CC) $(UNIT_KERNELS) -DLLMC_USE_DNNL $< -o $@ -l:libdnnl.so.2 -lm
build/test_matmul_choice: tests/unit/test_matmul_choice.c tests/unit/unit.mk
	@mkdir -p build
	$(UNIT_CC) -march=x86-64-v3 -fopenmp -DLLMC_BF16 -DLLMC_KERNELS_ID='"test"' $< -o $@ -ldnnl -lm

-include $(wildcard build/test_*.d)
