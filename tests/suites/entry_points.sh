#!/usr/bin/env bash
# What a new user runs first works as documented:
#   - every Python entry point, started with the first `python3` on PATH
#     (which may lack numpy / torch / matplotlib), either runs (dev/pyreq.py
#     re-runs it under /usr/bin/python3) or fails with one "error:" line
#     naming the interpreter to use, never a traceback; under a Python that
#     cannot import them (/usr/bin/python3 -S) it is that one line, exit 1;
#   - ./test_gpt_cpu -h prints its usage (exit 0), and the reference-check
#     commands of docs/testing.md run as written and pass.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
FIRST=$(command -v python3)
echo "first python3 on PATH: $FIRST ($($FIRST --version 2>&1))"
for spec in "dev/plot.py:matplotlib" "dev/reference.py:numpy" "dev/kernels_ref.py:numpy" "dev/bench_pytorch.py:torch" \
            "dev/bf16_emulation.py:numpy" "tests/suites/reference_selftest.py:numpy" "dev/check_trace.py:" "dev/flight.py:"; do
  f=${spec%%:*}; need=${spec#*:}
  python3 "$f" --help > "$tmp/out" 2>&1; rc=$?
  if [ $rc -eq 0 ] && ! grep -q Traceback "$tmp/out"; then ok "$f --help under $FIRST: exit 0, no traceback"
  else bad "$f --help under $FIRST: exit $rc: $(head -3 "$tmp/out" | tr '\n' ' ')"; fi
  [ -n "$need" ] || continue
  /usr/bin/python3 -S "$f" --help > "$tmp/out" 2>&1; rc=$?
  if [ $rc -ne 0 ] && [ "$(wc -l < "$tmp/out")" -eq 1 ] && grep -q "^error: $(basename "$f"): .*has no .*$need" "$tmp/out"; then
    ok "$f under a Python without $need: one line, exit $rc ($(cut -c1-90 "$tmp/out")...)"
  else bad "$f under a Python without $need: exit $rc, $(wc -l < "$tmp/out") lines: $(head -2 "$tmp/out" | tr '\n' ' ')"; fi
done
[ -x ./test_gpt_cpu ] || { bad "./test_gpt_cpu is missing (make all)"; summary; exit 1; }
if ./test_gpt_cpu -h > "$tmp/out" 2>&1 && grep -q "^usage: .*test_gpt_cpu -e MODEL -s DEBUG_STATE" "$tmp/out"; then ok "./test_gpt_cpu -h prints its usage"
else bad "./test_gpt_cpu -h: $(head -2 "$tmp/out")"; fi
# the reference-check commands of docs/testing.md, as written (mpirun as root needs --allow-run-as-root)
n=0
while IFS= read -r cmd; do
  n=$((n + 1))
  run=${cmd/#mpirun /$MPIRUN }
  if OMP_NUM_THREADS=1 timeout 300 bash -c "$run" > "$tmp/out" 2>&1 && grep -q "^[0-9]* passed, 0 failed" "$tmp/out"; then ok "docs/testing.md: $cmd: $(tail -1 "$tmp/out")"
  else bad "docs/testing.md: $cmd: $(tail -2 "$tmp/out" | tr '\n' ' ')"; fi
done < <(grep -E '^(\./test_gpt_cpu|mpirun -np [0-9]+ \./test_gpt_cpu)' docs/testing.md)
[ $n -ge 2 ] && ok "docs/testing.md shows $n reference-check commands" || bad "docs/testing.md shows $n reference-check commands (expected 2)"
summary
