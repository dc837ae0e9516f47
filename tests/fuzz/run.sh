#!/usr/bin/env bash
# tests/fuzz/run.sh: builds and runs the fuzz targets of the file readers:
#   dataloader  token shards: dataloader_init, dataloader_seek, next_batch
#   checkpoint  llm.c model files: gpt2_read_checkpoint_header, gpt2_load_checkpoint
#   state       training state files: state_read_header, state_load (llmc/state.h)
#   tokenizer   tokenizer decode files: tokenizer_init, decode, print
# Engine: libFuzzer (clang -fsanitize=fuzzer,address,undefined; leak checks
# on, every UB fatal) when clang is installed (apt-get install clang-14),
# else tests/fuzz/standalone.c, a deterministic mutation loop, built with gcc
# and the same sanitizers. Seeds: tests/fuzz/corpus/<target> (made by
# make_seeds.py); new inputs go to build/fuzz/corpus/<target>, crashes to
# build/fuzz/crash-<target>-*.
# Usage: bash tests/fuzz/run.sh [SECONDS per target, default 15] [TARGET...]
#   smoke run (the test suite): bash tests/fuzz/run.sh 15
#   longer run: bash tests/fuzz/run.sh 300 (5 minutes per target, about 22
#   minutes in all; what the runs found: tests/fuzz/README.md)
# Last line: "N passed, M failed"; exit 1 if any target crashed or failed
# to build.
set -u
cd "$(dirname "$0")/../.."
SECS=${1:-15}; shift || true
TARGETS=${*:-dataloader checkpoint state tokenizer}
B=build/fuzz
mkdir -p $B
pass=0; fail=0
[ -f tests/fuzz/corpus/state/tiny.bin ] || /usr/bin/python3 tests/fuzz/make_seeds.py > /dev/null
CLANG=$(command -v clang-14 || command -v clang || true)
MPIC=$(mpicc --showme:compile); MPIL=$(mpicc --showme:link)
SAN="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
build() { # target
  local t=$1
  if [ -n "$CLANG" ]; then
    $CLANG $SAN -fsanitize=fuzzer -fopenmp -march=x86-64-v3 -I. $MPIC tests/fuzz/fuzz_$t.c -o $B/fuzz_$t $MPIL -lopenblas -lm
  else
    gcc $SAN -fopenmp -march=x86-64-v3 -std=gnu11 -I. $MPIC tests/fuzz/standalone.c tests/fuzz/fuzz_$t.c -o $B/fuzz_$t $MPIL -lopenblas -lm
  fi
}
pids=(); for t in $TARGETS; do build $t > $B/build_$t.log 2>&1 & pids+=($!); done
i=0; built=""
for t in $TARGETS; do
  if wait ${pids[$i]}; then built="$built $t"; else fail=$((fail+1)); echo "FAIL build of fuzz_$t:"; head -20 $B/build_$t.log; fi
  i=$((i+1))
done
engine=libFuzzer; [ -z "$CLANG" ] && engine="standalone mutation loop (no clang)"
export OMP_NUM_THREADS=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in $built; do
  mkdir -p $B/corpus/$t
  log=$B/run_$t.log
  if [ -n "$CLANG" ]; then
    timeout $((SECS + 60)) ./$B/fuzz_$t -max_total_time=$SECS -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix=$B/crash-$t- $B/corpus/$t tests/fuzz/corpus/$t > $log 2>&1
  else
    (cd $B && timeout $((SECS + 60)) ./fuzz_$t -max_total_time=$SECS ../../tests/fuzz/corpus/$t corpus/$t) > $log 2>&1
  fi
  rc=$?
  if [ $rc -eq 0 ]; then
    pass=$((pass+1))
    if [ -n "$CLANG" ]; then
      echo "ok   fuzz_$t ($engine, ${SECS} s): $(grep -E "^stat::number_of_executed_units" $log | awk '{print $2}') inputs, $(grep -E "^#[0-9]+" $log | tail -1 | grep -oE "cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9a-zA-Z]+"), no crash"
    else echo "ok   fuzz_$t ($engine, ${SECS} s): $(tail -1 $log)"; fi
  else
    fail=$((fail+1)); echo "FAIL fuzz_$t (exit $rc): $(ls $B/crash-$t-* 2>/dev/null | head -3)"; grep -E -A12 "ERROR:|runtime error|invariant failed" $log | head -30
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
