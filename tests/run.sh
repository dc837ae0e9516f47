#!/usr/bin/env bash
# Runs every check a CPU machine can run (called by `make test`, which first
# installs packages, prepares the data, regenerates the PyTorch reference
# files and builds). Each suite prints "N passed, M failed, K skipped" (or
# "N passed, M failed") as its last line; this script adds them up, prints
# "N passed, M failed, K skipped" and exits non-zero if any suite failed.
# A check this CPU cannot run is skipped and counted with the ISA it needs;
# the kernel suites run again at every lower ISA level (LLMC_CPU_ISA), so
# an AVX-512 or AMX machine also tests what an AVX2-only machine runs.
# Each suite's line gives its time; the five slowest are listed at the end.
# The unit tests are built by tests/unit/unit.mk: a second run compiles
# only what changed.
# --quick (make check): the reference files' self-test on the odd config,
# the unit suites at this CPU's ISA level and tests/suites/quick.sh (a
# short run of each program, stage 3 at 2 ranks, against PyTorch and each
# other), about 1-2 minutes; docs/testing.md says what it leaves out.
set -u
QUICK=0
case "${1:-}" in
  --quick) QUICK=1 ;;
  "") ;;
  *) echo "usage: bash tests/run.sh [--quick]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
. tests/lib.sh
total_pass=0; total_fail=0; total_skip=0; failed_suites=(); times=()
t_all=$(date +%s)
mkdir -p build

suite() { # name command...
  local name=$1; shift
  echo "=== $name"
  local log="build/test_${name// /_}.log"
  local t0=$(date +%s)
  "$@" > "$log" 2>&1
  local rc=$?
  local last=$(grep -E "^[0-9]+ passed, [0-9]+ failed" "$log" | tail -1)
  local p=$(echo "$last" | awk '{print $1}'); local f=$(echo "$last" | awk '{print $3}')
  local k=$(echo "$last" | awk '$6 == "skipped" {print $5}')
  [ -z "$p" ] && { p=0; f=1; }
  [ -z "$k" ] && k=0
  [ $rc -ne 0 ] && [ "$f" = 0 ] && f=1
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + k))
  grep -E "^skip " "$log" | sed 's/^/    /' | head -20
  if [ "$f" != 0 ] || [ $rc -ne 0 ]; then
    failed_suites+=("$name"); grep -E "^FAIL" "$log" | head -20; echo "    ... the log's last lines ($log):"; tail -25 "$log"
  fi
  local dt=$(( $(date +%s) - t0 ))
  times+=("$dt $name")
  echo "    $name: ${last:-no summary line} (exit $rc, $dt s)"
}
# the end: the five slowest suites, the total time, the sum of the counts
finish() {
  echo
  echo "slowest suites:"
  printf '%s\n' "${times[@]}" | sort -rn | head -5 | awk '{ t = $1; $1 = ""; printf "    %5d s %s\n", t, substr($0, 2) }'
  echo "all suites: $(( $(date +%s) - t_all )) s"
  [ ${#failed_suites[@]} -gt 0 ] && echo "failed suites: ${failed_suites[*]}"
  echo "$total_pass passed, $total_fail failed, $total_skip skipped"
  [ $total_fail -eq 0 ]
}

# make check: the odd config only (the one its reference runs use)
if [ $QUICK = 1 ]; then suite "reference selftest" /usr/bin/python3 tests/suites/reference_selftest.py --dir data/ref --configs odd
else suite "reference selftest" /usr/bin/python3 tests/suites/reference_selftest.py --dir data/ref; fi
# the unit tests: built by tests/unit/unit.mk (only what changed since the last run)
unit() { # name binary [runner...]
  local name=$1 bin=$2; shift 2
  suite "$name" bash -c "make -s --no-print-directory -f tests/unit/unit.mk build/$bin && $* ./build/$bin"
}
unit "dataloader" test_dataloader
unit "shard plan" test_zero
unit "fit budget" test_fit
unit "fit choice" test_fit_choose $MPIRUN -np 1
unit "block quantization" test_quant
unit "host collectives" test_hostcoll
unit "quantized collectives" test_quant_coll $MPIRUN -np 4
unit "cpu kernels" test_kernels
unit "cpu kernels bf16" test_kernels_bf16
unit "matmul choice" test_matmul_choice
# the fp32 kernels on oneDNN's sgemm, as the programs build them when oneDNN is installed
unit "cpu kernels onednn" test_kernels_dnnl
if [ $QUICK = 1 ]; then
  suite "quick training" bash tests/suites/quick.sh
  finish; exit
fi
# again at every ISA level below this CPU's (the same binaries, capped by LLMC_CPU_ISA)
detected=$(cpu_isa_detected)
for L in $CPU_ISA_ALL; do
  [ "$L" = "$detected" ] && break
  suite "cpu kernels at $L" env LLMC_CPU_ISA=$L ./build/test_kernels
  suite "cpu kernels onednn at $L" env LLMC_CPU_ISA=$L ./build/test_kernels_dnnl
  suite "cpu kernels bf16 at $L" env LLMC_CPU_ISA=$L ./build/test_kernels_bf16
done
suite "isa levels" bash tests/suites/isa.sh
suite "bf16 matmul paths" bash tests/suites/matmul_choice.sh
suite "estimator" bash tests/suites/estimator.sh
suite "zero sweep" bash tests/suites/zero_sweep.sh
suite "zero sweep bf16" env PROG=./test_gpt_cpu_bf16 bash tests/suites/zero_sweep.sh
suite "bf16 reference" bash tests/suites/bf16.sh
suite "cuda emulation" bash tests/suites/cuda_emu.sh
suite "overlap and hsdp" bash tests/suites/overlap.sh
suite "overlap and hsdp bf16" env PROG=./train_gpt_cpu_bf16 bash tests/suites/overlap.sh
suite "memory by stage" bash tests/suites/memory.sh
suite "fit check and -z auto" bash tests/suites/fit.sh
suite "fit details" bash tests/suites/fit_details.sh
suite "activation recompute" bash tests/suites/recompute.sh
suite "layout invariance" bash tests/suites/invariance.sh
suite "zero++" bash tests/suites/zeropp.sh
suite "training" bash tests/suites/train.sh
suite "cluster" bash tests/suites/cluster.sh
suite "network faults" bash tests/suites/net_faults.sh
suite "interrupts and flight records" bash tests/suites/interrupt.sh
suite "kill at any moment" bash tests/suites/kill.sh
suite "flight records" bash tests/suites/flight.sh
suite "slurm" bash tests/suites/slurm.sh
suite "placement" bash tests/suites/placement.sh
suite "elastic" bash tests/suites/elastic.sh
suite "bad input" bash tests/suites/bad_input.sh
suite "plots" bash tests/suites/plots.sh
suite "resume" bash tests/suites/resume.sh
suite "resume bf16" env TRAIN_GPT=./train_gpt_cpu_bf16 bash tests/suites/resume.sh
suite "faults" bash tests/suites/faults.sh
suite "offload" bash tests/suites/offload.sh
suite "docs" bash tests/suites/docs.sh
suite "entry points" bash tests/suites/entry_points.sh
suite "compare runs" bash tests/suites/compare.sh
suite "check a model" bash tests/suites/check_model.sh
suite "sanitizers" bash tests/suites/sanitizers.sh
suite "fuzz smoke" bash tests/fuzz/run.sh 15
suite "gpu dry run" bash tests/suites/gpu_dry_run.sh

finish
