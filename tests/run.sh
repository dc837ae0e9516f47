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
t_all=$(date +%s)
mkdir -p build
LANES=${LLMC_TEST_LANES:-$([ "$(ncpu)" -ge 2 ] && echo 3 || echo 1)}
case "$LANES" in 1|2|3) ;; *) echo "LLMC_TEST_LANES=$LANES: must be 1, 2 or 3" >&2; exit 2 ;; esac
# one line per finished suite: seconds, passed, failed, skipped, name (tab-separated)
RESULTS=build/test_results.tsv
: > "$RESULTS"

# suite NAME COMMAND...: runs it with its output in build/test_<name>.log,
# then prints its report (skips, failures, the count line with its time) in
# one write, so that the reports of two lanes do not mix
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
  local dt=$(( $(date +%s) - t0 ))
  local rep
  rep=$(grep -E "^skip " "$log" | sed 's/^/    /' | head -20
        if [ "$f" != 0 ]; then
          grep -E "^FAIL" "$log" | head -20; echo "    ... the log's last lines ($log):"; tail -25 "$log"
        fi
        echo "    $name: ${last:-no summary line} (exit $rc, $dt s)")
  printf '%s\n' "$rep"
  printf '%s\t%s\t%s\t%s\t%s\n' "$dt" "$p" "$f" "$k" "$name" >> "$RESULTS"
}
# the end: the five slowest suites, the total time, the sum of the counts
finish() {
  local LANES_USED=1
  [ -n "${LANE_B:-}" ] && { wait "$LANE_B"; LANE_B=""; LANES_USED=2; }
  [ -n "${LANE_C:-}" ] && { wait "$LANE_C"; LANE_C=""; LANES_USED=3; }
  local total_pass total_fail total_skip failed
  read -r total_pass total_fail total_skip < <(awk -F'\t' '{p += $2; f += $3; k += $4} END {print p + 0, f + 0, k + 0}' "$RESULTS")
  failed=$(awk -F'\t' '$3 != 0 {printf "%s%s", s, $5; s = ", "}' "$RESULTS")
  echo
  echo "slowest suites:"
  sort -t$'\t' -k1,1 -rn "$RESULTS" | head -5 | awk -F'\t' '{ printf "    %5d s %s\n", $1, $5 }'
  echo "all suites: $(( $(date +%s) - t_all )) s$([ "$LANES_USED" = 2 ] && echo " (two lanes: the cluster and waiting suites beside the others)")$([ "$LANES_USED" = 3 ] && echo " (three lanes: the cluster suites and the other waiting suites beside the others)")"
  if [ -n "$failed" ]; then
    # the failures again, at the end, where a truncated CI log still shows them
    awk -F'\t' '$3 != 0 {print $5}' "$RESULTS" | while IFS= read -r name; do
      echo "failures of $name (build/test_${name// /_}.log):"
      # each FAIL line and the 3 after it (a suite's own diagnosis: fit details prints the run's
      # memory lines and the level's calibration there)
      grep -E -A3 "^FAIL" "build/test_${name// /_}.log" | grep -v '^--$' | head -16 | cut -c1-600 | sed 's/^/  /'
    done
    echo "failed suites: $failed"
  fi
  echo "$total_pass passed, $total_fail failed, $total_skip skipped"
  [ "$total_fail" -eq 0 ]
}
# the level this CPU has, and build/cpu_isa, once before the lanes start
detected=$(cpu_isa_detected)

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
# Lanes (LLMC_TEST_LANES; the default 3 on 2 or more cores, 1 on one).
# Lane A, in the foreground, runs the suites that keep the cores busy.
# Lanes B and C run the suites that mostly wait (on collective timeouts,
# kill delays, probes, Slurm): B most of those that bring up a simulated
# cluster (scripts/cluster.sh: each its own name, subnet, Slurm ports and
# munged, so two clusters can be up at once) and the flight records, C
# the others, with every suite that uses build/fit/ (fit details,
# interrupts, fit check); bad input, faults, sanitizers, the GPU dry run
# (its nvcc builds), check a model, the fuzz smoke and the fit check even
# out the lanes' times (the first three-lane run: lanes B and C ended at
# 870-1060 s, lane A at 1507 s). LLMC_TEST_LANES=2 runs B
# then C in one background lane (the layout until 2026-12-07: make test
# 30m29s on a quiet 2-core Zen 4, all suites 1685 s, the background lane
# the longer one, 44% of the two cores idle), 1 runs everything in order.
# One lane, quiet 2-core Zen 5: elastic 687 s, network faults 265, fit
# details 224, gpu dry run 215, flight 133, interrupts 119, kill 85,
# placement 71, slurm 62, cluster 44.
lane_b() {
  suite "elastic" bash tests/suites/elastic.sh
  suite "network faults" bash tests/suites/net_faults.sh
  suite "slurm" bash tests/suites/slurm.sh
  suite "cluster" bash tests/suites/cluster.sh
  suite "placement" bash tests/suites/placement.sh
  suite "flight records" bash tests/suites/flight.sh
  suite "bad input" bash tests/suites/bad_input.sh
  suite "faults" bash tests/suites/faults.sh
  suite "sanitizers" bash tests/suites/sanitizers.sh
}
lane_c() {
  suite "fit details" bash tests/suites/fit_details.sh
  suite "interrupts and flight records" bash tests/suites/interrupt.sh
  suite "kill at any moment" bash tests/suites/kill.sh
  suite "gpu dry run" bash tests/suites/gpu_dry_run.sh
  suite "check a model" bash tests/suites/check_model.sh
  suite "fuzz smoke" bash tests/fuzz/run.sh 15
  suite "fit check and -z auto" bash tests/suites/fit.sh
}
LANE_B=""; LANE_C=""
# stopped (Ctrl-C, CI's time limit): each background lane's suite gets
# SIGTERM (each suite removes what it made on TERM), then the lane
stop_lane() { [ -n "$1" ] && { pkill -TERM -P "$1"; kill -TERM "$1"; wait "$1"; } 2>/dev/null; }
stop_lanes() { stop_lane "$LANE_B"; stop_lane "$LANE_C"; }
case "$LANES" in
  2) { lane_b; lane_c; } & LANE_B=$! ;;
  3) lane_b & LANE_B=$!; lane_c & LANE_C=$! ;;
esac
[ "$LANES" != 1 ] && trap 'echo "interrupted"; stop_lanes; exit 130' INT TERM
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
suite "activation recompute" bash tests/suites/recompute.sh
suite "layout invariance" bash tests/suites/invariance.sh
suite "zero++" bash tests/suites/zeropp.sh
suite "training" bash tests/suites/train.sh
suite "plots" bash tests/suites/plots.sh
suite "resume" bash tests/suites/resume.sh
suite "resume bf16" env TRAIN_GPT=./train_gpt_cpu_bf16 bash tests/suites/resume.sh
suite "offload" bash tests/suites/offload.sh
suite "docs" bash tests/suites/docs.sh
suite "entry points" bash tests/suites/entry_points.sh
suite "compare runs" bash tests/suites/compare.sh
[ "$LANES" = 1 ] && { lane_b; lane_c; }

finish
