#!/usr/bin/env bash
# What a new user runs first works as documented:
#   - every Python entry point, started with the first `python3` on PATH
#     (which may lack numpy / torch / matplotlib), either runs (dev/pyreq.py
#     re-runs it under /usr/bin/python3) or fails with one "error:" line
#     naming the interpreter to use, never a traceback; under a Python that
#     cannot import them (/usr/bin/python3 -S) it is that one line, exit 1;
#   - ./test_gpt_cpu -h prints its usage (exit 0), and the reference-check
#     commands of docs/testing.md run as written and pass;
#   - DRYRUN=1 of the run scripts prints the command they run: the argv a
#     run of the same script (with a fake mpirun or srun that records its
#     own and, for mpirun, its parent's: scripts/mpirun_fg.sh) starts.
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
# DRYRUN=1 prints what the script runs. The fakes record argv one word a line:
# mpirun its parent's (/proc/PPID/cmdline: mpirun_fg.sh execs it through setsid
# in place, so the parent is the wrapper's bash), srun its own; a dry line is
# taken apart by the shell (eval) into the same form.
mkdir -p "$tmp/bin" "$tmp/o"
cat > "$tmp/bin/mpirun" <<'EOS'
#!/usr/bin/env bash
tr '\0' '\n' < /proc/$PPID/cmdline > "$FAKE_REC"
EOS
cat > "$tmp/bin/srun" <<'EOS'
#!/usr/bin/env bash
{ [ -n "${OMP_NUM_THREADS:-}" ] && echo "OMP_NUM_THREADS=$OMP_NUM_THREADS"; echo srun; printf '%s\n' "$@"; } > "$FAKE_REC"
EOS
printf '#!/bin/sh\necho n1\necho n2\n' > "$tmp/bin/scontrol"
chmod +x "$tmp/bin/mpirun" "$tmp/bin/srun" "$tmp/bin/scontrol"
printf 'n1 slots=2\nn2 slots=2\n' > "$tmp/hosts"
dry_is_run() { # name script [VAR=value...] -- args...
  local name=$1 script=$2; shift 2
  local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local dry; dry=$(env PATH="$tmp/bin:$PATH" MPIRUN="$tmp/bin/mpirun" FAKE_REC="$tmp/rec" "${envs[@]}" DRYRUN=1 bash "$script" "$@" 2>&1)
  rm -f "$tmp/rec"
  env PATH="$tmp/bin:$PATH" MPIRUN="$tmp/bin/mpirun" FAKE_REC="$tmp/rec" "${envs[@]}" bash "$script" "$@" > "$tmp/run.out" 2>&1
  local words; words=$(eval "printf '%s\n' $(tail -1 <<<"$dry")" 2>&1)   # the command: the last line (a note may precede it)
  # the elastic loop's hostfile: a mktemp file; the dry run names its template
  [ -f "$tmp/rec" ] && words=$(sed "s|^$tmp/llmc-elastic.XXXXXX.hosts\$|$(grep -m1 "^$tmp/llmc-elastic\..*\.hosts$" "$tmp/rec")|" <<<"$words")
  if [ -s "$tmp/rec" ] && [ "$words" = "$(cat "$tmp/rec")" ]; then ok "DRYRUN=1 $name prints what runs: $(cut -c1-110 <<<"$dry")..."
  else bad "DRYRUN=1 $name: printed '$dry', ran '$(tr '\n' ' ' < "$tmp/rec" 2>/dev/null)' ($(tail -1 "$tmp/run.out"))"; fi
}
dry_is_run "run_1node.sh" scripts/run_1node.sh CPU=1 -- -e d2
dry_is_run "run_multinode.sh" scripts/run_multinode.sh HOSTFILE="$tmp/hosts" CPU=1 NODES=2 PER_NODE=2 -- -e d2
dry_is_run "run_multinode.sh ELASTIC=1 --shard-group (the loop's first launch)" scripts/run_multinode.sh TMPDIR="$tmp" HOSTFILE="$tmp/hosts" CPU=1 NODES=2 PER_NODE=2 ZERO=3 ELASTIC=1 -- -e d2 --shard-group 2 -o "$tmp/o"
dry_is_run "run_slurm.sbatch CPU=1" scripts/run_slurm.sbatch CPU=1 SLURM_CPUS_PER_TASK=1 -- -e d2
dry_is_run "run_slurm.sbatch ELASTIC=1 (the loop's first launch)" scripts/run_slurm.sbatch CPU=1 SLURM_CPUS_PER_TASK=1 ELASTIC=1 SLURM_JOB_NODELIST='n[1-2]' SLURM_NTASKS=4 -- -e d2 -o "$tmp/o"
summary
