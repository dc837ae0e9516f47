#!/usr/bin/env bash
# A run stopped by a signal keeps its steps, and a hung run says where every
# rank stopped (llmc/interrupt.h, llmc/flight.h, dev/flight.py):
#  1. SIGTERM to every rank after step 3 of a 12-step run (each step made
#     0.3 s longer by the test hook LLMC_TEST_SLOW=step:0.3, so that the run
#     cannot end before the signal lands): every rank agrees at the next
#     step boundary K, writes model_K.bin and state_K.bin and exits 143
#     ("interrupted at step K: wrote checkpoint K; resume with -y 1"); -y 1
#     resumes to step 12 bitwise equal (model and state) to the
#     uninterrupted run;
#  2. a repeat of SIGTERM is the same stop however late it comes: a second
#     SIGTERM 1 s after the first, while the state is being written (a test
#     hook pauses the write), and SIGTERM twice 0.7 s apart during a step
#     (issue 38's repro): the checkpoint of the step is written, exit 143;
#     SIGINT twice (Ctrl-C twice) during the state write exits at once with
#     130: no .tmp, no state, and not the pair's model either;
#  3. no -o: the line says nothing was written, exit 143;
#  4. SIGTERM to mpirun: it passes SIGTERM to the ranks after
#     odls_base_sigkill_timeout (3 s here), and they write their checkpoint;
#  5. a hang made on purpose (LLMC_TEST_HANG: rank 2 stops at step 3 and
#     answers signals, rank 3 stops silently), --collective-timeout 15: the
#     job ends with mpirun's exit 1, and dev/flight.py names ranks 0, 1
#     waiting, rank 2 elsewhere (its last record is earlier) and rank 3
#     without a dump;
#  6. with Slurm (scripts/cluster.sh up 2 --slurm, cluster llmcsig):
#     sbatch --requeue scripts/run_slurm.sbatch with REQUEUE=1; SIGUSR1 to
#     the batch shell (what --signal=B:USR1@T sends) after step 3: the
#     script passes it to the step, the ranks write their checkpoint, the
#     job requeues itself, resumes with -y 1 by itself and ends bitwise
#     equal to the uninterrupted run (needs root and Slurm; else skipped);
#  7. a signal outside the training steps: a -x 0 evaluation stops at the
#     next forward with 143 (one process; and 2 ranks with SIGTERM to rank 1
#     only); a sample during training (SIGTERM to rank 1 only) stops with the
#     checkpoint of its step and no further step; start-up, a -y 1 load and
#     --calibrate-workspace exit 143 within 5 s, writing nothing, its line
#     saying what stopped (a calibration, not a training run);
#  8. run_slurm.sbatch requeues only when the step exits 138 (a fake srun and
#     scontrol on PATH: no Slurm needed): SIGUSR1, the step exits 1: not
#     requeued; exits 138: requeued.
#  9. Ctrl-C through scripts/mpirun_fg.sh (how make train and scripts/run_*.sh
#     start mpirun), as a terminal sends it (SIGINT to the wrapper's process
#     group), kill delay 10 s: rank 0's "SIGINT: stopping at the end of step
#     N" line within 5 s, the checkpoint of the step (model and state), exit
#     130, no rank left; Ctrl-C twice (the second during the state write):
#     exit 130 within 10 s, no .tmp, no state, no lone model, no rank left.
# Every wait is bounded.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
make -s train_gpt_cpu >/dev/null 2>&1 || { bad "make train_gpt_cpu"; summary; exit 1; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d -p /var/tmp llmc-interrupt-test.XXXXXX)
JOB=""; CL=""
cleanup() {
  [ -n "$JOB" ] && kill "$JOB" 2>/dev/null
  [ -n "$CL" ] && $CL down >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM
DATA=(-i "data/brown/brown_train_*.bin" -v 0 -s 0)
M=(-e d2 -b 1 -t 32 -z 3)
wait_for() { # file regex seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
ranks_of() { pgrep -P "$1" | xargs; }   # mpirun's children: the ranks it started here
start() { # out extra-mpirun-args -- trainer args: mpirun in the background, JOB its pid
  local out=$1; shift
  local margs=(); while [ "$1" != -- ]; do margs+=("$1"); shift; done; shift
  $MPIRUN "${margs[@]}" ./train_gpt_cpu "${DATA[@]}" "${M[@]}" "$@" > "$out" 2>&1 &
  JOB=$!
}
finish() { # seconds: wait for JOB at most that long; rc in RC
  local i
  for ((i = 0; i < $1 * 10; i++)); do kill -0 "$JOB" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$JOB" 2>/dev/null; then kill "$JOB"; wait "$JOB" 2>/dev/null; RC=124; else wait "$JOB"; RC=$?; fi
  JOB=""
}

# --- 1. SIGTERM to every rank, resume, bitwise (12 steps: at ~70 ms a step, a 6-step
# run could end before the signal was seen at a boundary)
timeout 120 $MPIRUN -np 2 ./train_gpt_cpu "${DATA[@]}" "${M[@]}" -x 12 -o "$tmp/ref" > "$tmp/ref.out" 2>&1 || bad "the uninterrupted run (exit $?)"
start "$tmp/int.out" -np 2 -x LLMC_TEST_SLOW=step:0.3 -- -x 12 -o "$tmp/int"
if wait_for "$tmp/int.out" "^step +3/" 60; then
  kill -TERM $(ranks_of $JOB)
  finish 60
  K=$(sed -n 's/^interrupted at step \([0-9]*\): wrote checkpoint \1; resume with -y 1 (SIGTERM, exiting [0-9.]* s after it)$/\1/p' "$tmp/int.out")
  k8=$(printf %08d "${K:-0}")
  if [ "$RC" = 143 ] && [ -n "$K" ] && [ "$K" -ge 3 ] && [ "$K" -lt 12 ] && [ -s "$tmp/int/model_$k8.bin" ] && [ -s "$tmp/int/state_$k8.bin" ] \
     && ! ls "$tmp/int"/*.tmp >/dev/null 2>&1 && [ -s "$tmp/int/flight/rank_0.json" ] && [ -s "$tmp/int/flight/rank_1.json" ] \
     && grep -q "^SIGTERM: stopping at the end of step [0-9]* (checkpoint [0-9]*, then exit 143)$" "$tmp/int.out"; then
    ok "SIGTERM to both ranks after step 3: at once '$(grep "^SIGTERM: stopping" "$tmp/int.out")'; exit 143, $(grep "^interrupted" "$tmp/int.out"); model and state of step $K written, no .tmp, both flight records"
  else bad "SIGTERM to both ranks: exit $RC, K '$K'"; tail -5 "$tmp/int.out"; ls "$tmp/int"; fi
  timeout 120 $MPIRUN -np 2 ./train_gpt_cpu "${DATA[@]}" "${M[@]}" -x 12 -o "$tmp/int" -y 1 > "$tmp/res.out" 2>&1; rc=$?
  if [ $rc = 0 ] && grep -q "^resumed from step $K:" "$tmp/res.out" && cmp -s "$tmp/int/model_00000012.bin" "$tmp/ref/model_00000012.bin" \
     && cmp -s "$tmp/int/state_00000012.bin" "$tmp/ref/state_00000012.bin"; then
    ok "-y 1 resumed from step $K to 12: model and state bitwise the uninterrupted run's (cmp)"
  else bad "the resume: exit $rc; $(grep -m1 -E '^resumed|^error' "$tmp/res.out")"; fi
else bad "never reached step 3"; tail -3 "$tmp/int.out"; finish 1; fi

# --- 2. a repeat of SIGTERM is the same stop; SIGINT twice exits now
start "$tmp/two.out" -np 2 -x LLMC_TEST_PAUSE_IN_SAVE=4 -- -x 20 -o "$tmp/two"
if wait_for "$tmp/two.out" "^step +2/" 60; then
  kill -TERM $(ranks_of $JOB)
  if wait_for "$tmp/two.out" "^test hook LLMC_TEST_PAUSE_IN_SAVE: rank 1 pauses" 60; then
    sleep 1   # a late repeat (the old rule took one more than 0.5 s after the first as "exit now")
    kill -TERM $(ranks_of $JOB)
    finish 60
    K=$(sed -n 's/^interrupted at step \([0-9]*\): wrote checkpoint \1; resume with -y 1 (SIGTERM, exiting .*/\1/p' "$tmp/two.out")
    k8=$(printf %08d "${K:-0}")
    if [ "$RC" = 143 ] && [ -n "$K" ] && [ -s "$tmp/two/model_$k8.bin" ] && [ -s "$tmp/two/state_$k8.bin" ] && ! ls "$tmp/two"/*.tmp >/dev/null 2>&1 \
       && grep -q "^SIGTERM again: the same stop as the first SIGTERM" "$tmp/two.out"; then
      ok "a second SIGTERM 1 s later, during the state write: the same stop, exit 143, model and state of step $K complete, no .tmp"
    else bad "the second SIGTERM: exit $RC, K '$K', left: $(ls "$tmp/two" | tr '\n' ' ')"; tail -3 "$tmp/two.out"; fi
  else bad "the state write never paused"; tail -3 "$tmp/two.out"; finish 1; fi
else bad "never reached step 2"; finish 1; fi

start "$tmp/rep.out" -np 2 -x LLMC_TEST_SLOW=step:1 -- -x 20 -o "$tmp/rep"
if wait_for "$tmp/rep.out" "^step +2/" 60; then
  R=$(ranks_of $JOB); kill -TERM $R; sleep 0.7; kill -TERM $R
  finish 60
  K=$(sed -n 's/^interrupted at step \([0-9]*\): wrote checkpoint \1; resume with -y 1 (SIGTERM, exiting .*/\1/p' "$tmp/rep.out")
  k8=$(printf %08d "${K:-0}")
  if [ "$RC" = 143 ] && [ -n "$K" ] && [ -s "$tmp/rep/model_$k8.bin" ] && [ -s "$tmp/rep/state_$k8.bin" ] && ! ls "$tmp/rep"/*.tmp >/dev/null 2>&1; then
    ok "SIGTERM to both ranks after step 2, again 0.7 s later: checkpoint $K written, exit 143"
  else bad "SIGTERM twice 0.7 s apart: exit $RC, K '$K', left: $(ls "$tmp/rep" | tr '\n' ' ')"; grep -E "^(SIG|interrupted)" "$tmp/rep.out"; fi
else bad "never reached step 2 (twice 0.7 s)"; finish 1; fi

start "$tmp/int2.out" -np 2 -x LLMC_TEST_PAUSE_IN_SAVE=30 -- -x 20 -o "$tmp/int2"
if wait_for "$tmp/int2.out" "^step +2/" 60; then
  kill -INT $(ranks_of $JOB)
  if wait_for "$tmp/int2.out" "^test hook LLMC_TEST_PAUSE_IN_SAVE: rank 1 pauses" 60; then
    t0=$(date +%s.%N)
    tmpfile=$(ls "$tmp/int2"/*.tmp 2>/dev/null | head -1)
    kill -INT $(ranks_of $JOB)
    finish 20
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ "$RC" = 130 ] && [ -n "$tmpfile" ] && ! ls "$tmp/int2"/*.tmp >/dev/null 2>&1 && ! ls "$tmp/int2"/state_*.bin >/dev/null 2>&1 \
       && ! ls "$tmp/int2"/model_*.bin >/dev/null 2>&1 && grep -q "^SIGINT again: exiting now with 130" "$tmp/int2.out" && awk -v d="$dt" 'BEGIN { exit !(d < 10) }'; then
      ok "SIGINT twice (the second during the state write): exit 130 in $dt s, $(basename "$tmpfile") and the pair's model removed, no state file"
    else bad "SIGINT twice: exit $RC after $dt s, tmp '$tmpfile', left: $(ls "$tmp/int2" | tr '\n' ' ')"; tail -3 "$tmp/int2.out"; fi
  else bad "the state write never paused (SIGINT)"; tail -3 "$tmp/int2.out"; finish 1; fi
else bad "never reached step 2 (SIGINT)"; finish 1; fi

# --- 3. no -o
start "$tmp/noo.out" -np 2 -- -x 20
if wait_for "$tmp/noo.out" "^step +2/" 60; then
  kill -TERM $(ranks_of $JOB); finish 60
  if [ "$RC" = 143 ] && grep -qE "^interrupted at step [0-9]+: no -o, so nothing was written" "$tmp/noo.out"; then ok "no -o: exit 143, $(grep "^interrupted" "$tmp/noo.out")"
  else bad "no -o: exit $RC"; tail -3 "$tmp/noo.out"; fi
else bad "never reached step 2 (no -o)"; finish 1; fi

# --- 4. SIGTERM to mpirun: the ranks hear of it odls_base_sigkill_timeout later
# (-x 400: at ~70 ms a step 40 steps ended before the 3 s had passed; the ranks stop at the signal)
start "$tmp/mpi.out" -np 2 --mca odls_base_sigkill_timeout 3 -- -x 400 -o "$tmp/mpi"
if wait_for "$tmp/mpi.out" "^step +2/" 60; then
  t0=$(date +%s.%N); kill -TERM $JOB; finish 30
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  K=$(sed -n 's/^interrupted at step \([0-9]*\): wrote checkpoint.*/\1/p' "$tmp/mpi.out")
  # mpirun's own code when it stopped the job: 1 (the ranks exit 143; Open MPI 4.1.4)
  if [ -n "$K" ] && [ -s "$tmp/mpi/state_$(printf %08d "$K").bin" ] && [ "$RC" = 1 ]; then
    ok "SIGTERM to mpirun (odls_base_sigkill_timeout 3): the ranks wrote checkpoint $K; mpirun exited $RC after $dt s"
  else bad "SIGTERM to mpirun: exit $RC after $dt s, K '$K'"; tail -4 "$tmp/mpi.out"; fi
else bad "never reached step 2 (mpirun)"; finish 1; fi

# --- 5. a hang made on purpose, and dev/flight.py
# (--collective-timeout 15: 5 s was too little for the start-up of 4 ranks on 2 busy cores)
# (odls_base_sigkill_timeout 10: the hung rank 2 writes its dump on mpirun's SIGTERM before the SIGKILL; the default 1 s was too little under load)
start "$tmp/hang.out" -np 4 --mca odls_base_sigkill_timeout 10 -x LLMC_TEST_HANG=2:3,3:3:silent -- -x 10 -o "$tmp/hang" --collective-timeout 15
finish 120
fl=$(python3 dev/flight.py "$tmp/hang" 2>&1); frc=$?
if [ "$RC" = 1 ] && grep -qE "^error \(rank [01], node .*\): .* did not complete in 15 s" "$tmp/hang.out"; then
  ok "LLMC_TEST_HANG (ranks 2, 3 stop at step 3): ranks 0, 1 timed out, the job ended (exit $RC)"
else bad "the hang: exit $RC"; tail -4 "$tmp/hang.out"; fi
if [ $frc = 0 ] && grep -qE "^  ranks 0, 1 \(node [^)]*\): waiting in .*step 3" <<<"$fl" \
   && grep -qE "^verdict: rank 3 \(node [^)]*\) left no dump" <<<"$fl" \
   && grep -qE "^verdict: rank 2 \(node [^)]*\) never reached it and waits in no collective" <<<"$fl" \
   && grep -qE "^  rank 2 \(node [^)]*\): behind: its last call on the world is [0-9]+: .*step 2" <<<"$fl"; then
  ok "dev/flight.py: ranks 0, 1 wait at step 3, rank 2's last record is of step 2, rank 3 left no dump"
  echo "$fl" | sed 's/^/    /'
else bad "dev/flight.py on the hang (exit $frc):"; echo "$fl"; fi
o=$(python3 dev/flight.py "$tmp/nothing" 2>&1); rc=$?
[ $rc = 1 ] && [ "$(wc -l <<<"$o")" = 1 ] && grep -q "^error: flight.py: " <<<"$o" && ok "dev/flight.py on a missing directory: one line, exit 1" || bad "flight.py on a missing dir: exit $rc: $o"

# --- 7. a signal outside the training steps
# a -x 0 evaluation (d2, 512 sequences of 256 tokens, B=8: about a minute on one core): stops at the next forward
EV=(-e d2 -x 0 -j "data/brown/brown_val_*.bin" -b 8 -t 256 -m 512 -s 0)
./train_gpt_cpu "${EV[@]}" > "$tmp/ev.out" 2>&1 & JOB=$!
if wait_for "$tmp/ev.out" "^ledger: OK|ledger: OK" 60; then
  sleep 1; t0=$(date +%s.%N); kill -TERM $JOB; finish 30
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$RC" = 143 ] && grep -q "^SIGTERM during evaluation: stopping after this forward (nothing new to write; exit 143)$" "$tmp/ev.out" \
     && grep -q "^interrupted at step 0: -x 0, nothing to write (SIGTERM, exiting [0-9.]* s after it)$" "$tmp/ev.out" && ! grep -q "^val loss" "$tmp/ev.out" \
     && awk -v d="$dt" 'BEGIN { exit !(d < 15) }'; then
    ok "SIGTERM during a -x 0 evaluation: exit 143 after $dt s, $(grep "^interrupted" "$tmp/ev.out")"
  else bad "SIGTERM during a -x 0 evaluation: exit $RC after $dt s"; tail -3 "$tmp/ev.out"; fi
else bad "the -x 0 evaluation never started"; tail -3 "$tmp/ev.out"; finish 1; fi
$MPIRUN -np 2 ./train_gpt_cpu "${EV[@]}" > "$tmp/ev2.out" 2>&1 & JOB=$!
if wait_for "$tmp/ev2.out" "ledger: OK" 60; then
  sleep 1; R=($(ranks_of $JOB)); t0=$(date +%s.%N); kill -TERM "${R[1]}"; finish 30
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$RC" = 143 ] && grep -qE "^interrupted at step 0: -x 0, nothing to write \(SIGTERM (to another rank|, exiting)" "$tmp/ev2.out" && ! grep -q "^val loss" "$tmp/ev2.out" \
     && awk -v d="$dt" 'BEGIN { exit !(d < 15) }'; then
    ok "SIGTERM to one of 2 ranks during a -x 0 evaluation: both stopped at the same forward, exit 143 after $dt s"
  else bad "SIGTERM to one rank during an evaluation: exit $RC after $dt s"; tail -3 "$tmp/ev2.out"; fi
else bad "the 2-rank evaluation never started"; tail -3 "$tmp/ev2.out"; finish 1; fi
# a sample at step 2 of a training run (the hook holds each rank 3 s, as a long forward, or until its own signal), SIGTERM to rank 1 only
start "$tmp/smp.out" -np 2 -x LLMC_TEST_SLOW=sample:3 -- -x 10 -s 2 -g 8 -o "$tmp/smp"
if wait_for "$tmp/smp.out" "^test hook LLMC_TEST_SLOW: rank 0 in the sample|^test hook LLMC_TEST_SLOW: rank 0 in sample" 60; then
  R=($(ranks_of $JOB)); t0=$(date +%s.%N); kill -TERM "${R[1]}"; finish 60
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$RC" = 143 ] && grep -q "^interrupted at step 2: wrote checkpoint 2; resume with -y 1 (SIGTERM to another rank)$" "$tmp/smp.out" && awk -v d="$dt" 'BEGIN { exit !(d < 15) }' \
     && [ -s "$tmp/smp/model_00000002.bin" ] && [ -s "$tmp/smp/state_00000002.bin" ] && ! grep -q "^step +3/" "$tmp/smp.out"; then
    ok "SIGTERM to rank 1 during the sample at step 2: checkpoint 2, no step 3, exit 143 after $dt s"
  else bad "SIGTERM during a sample: exit $RC after $dt s"; grep -E "^(step|interrupted|SIG)" "$tmp/smp.out" | tail -4; fi
else bad "the sample never started"; tail -3 "$tmp/smp.out"; finish 1; fi
# start-up and a -y 1 load (the hook holds each 60 s): exit 143 within 5 s, nothing written
for ph in start-up load; do
  ls "$tmp/int" > "$tmp/before.txt"
  start "$tmp/su.out" -np 2 -x "LLMC_TEST_SLOW=$ph:60" -- -x 12 -o "$tmp/int" -y 1
  if wait_for "$tmp/su.out" "^test hook LLMC_TEST_SLOW: rank 1 in $ph" 60; then
    t0=$(date +%s.%N); kill -TERM $(ranks_of $JOB); finish 30
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ "$RC" = 143 ] && grep -q "^SIGTERM during start-up.*: exiting now with 143" "$tmp/su.out" && awk -v d="$dt" 'BEGIN { exit !(d < 5) }' \
       && ls "$tmp/int" | cmp -s - "$tmp/before.txt"; then
      ok "SIGTERM in $ph (-y 1): '$(grep -m1 "^SIGTERM during" "$tmp/su.out")', exit 143 after $dt s, -o unchanged"
    else bad "SIGTERM in $ph: exit $RC after $dt s"; tail -3 "$tmp/su.out"; fi
  else bad "never reached $ph"; tail -3 "$tmp/su.out"; finish 1; fi
done
# (only this calibration's own files: another suite may calibrate other levels beside it, tests/run.sh's lanes)
wsf=$(ls build/fit/train_gpt_cpu.workspace 2>/dev/null; true)
wsb=$( [ -n "$wsf" ] && md5sum < "$wsf")
./train_gpt_cpu --calibrate-workspace > "$tmp/cal.out" 2>&1 & JOB=$!
sleep 1; t0=$(date +%s.%N); kill -TERM $JOB; finish 30
dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
# the line says what the calibration did (not a training run's "no step has run")
if [ "$RC" = 143 ] && grep -q "^SIGTERM during --calibrate-workspace: exiting now with 143 (a calibration, not a training run: its measuring steps stopped, no workspace file written, a previous one kept)$" "$tmp/cal.out" \
   && ! grep -q "no step has run" "$tmp/cal.out" && awk -v d="$dt" 'BEGIN { exit !(d < 5) }' \
   && { [ -z "$wsf" ] || [ "$(md5sum < "$wsf")" = "$wsb" ]; } && ! ls build/fit/train_gpt_cpu.workspace.tmp build/fit/train_gpt_cpu.threads1.workspace.tmp >/dev/null 2>&1; then
  ok "SIGTERM 1 s into --calibrate-workspace: '$(grep -m1 "^SIGTERM during" "$tmp/cal.out")', exit 143 after $dt s, the calibration file untouched"
else bad "SIGTERM during --calibrate-workspace: exit $RC after $dt s"; tail -3 "$tmp/cal.out"; fi

# --- 8. run_slurm.sbatch requeues only on exit 138 (fake srun and scontrol)
mkdir -p "$tmp/fake"
cat > "$tmp/fake/srun" <<'EOS'
#!/usr/bin/env bash
trap 'exit $FAKE_RC' USR1
: > "$FAKE_DIR/started"
for ((i = 0; i < 600; i++)); do sleep 0.1; done
EOS
printf '#!/usr/bin/env bash\necho "$*" >> "$FAKE_DIR/scontrol.log"\n' > "$tmp/fake/scontrol"
chmod +x "$tmp/fake/srun" "$tmp/fake/scontrol"
for frc in 1 138; do
  rm -f "$tmp/fake/started" "$tmp/fake/scontrol.log"
  FAKE_DIR="$tmp/fake" FAKE_RC=$frc PATH="$tmp/fake:$PATH" SLURM_JOB_ID=4242 REQUEUE=1 CPU=1 PRECISION=fp32 \
    bash scripts/run_slurm.sbatch -e d2 -o "$tmp/fakeo" > "$tmp/fake.out" 2>&1 & JOB=$!
  for ((i = 0; i < 100; i++)); do [ -e "$tmp/fake/started" ] && break; sleep 0.1; done
  kill -USR1 $JOB; finish 30
  if [ $frc = 138 ]; then
    [ "$RC" = 138 ] && [ "$(cat "$tmp/fake/scontrol.log" 2>/dev/null)" = "requeue 4242" ] && ok "run_slurm.sbatch: SIGUSR1, the step exited 138: scontrol requeue 4242" \
      || { bad "run_slurm.sbatch, step exit 138: exit $RC, scontrol '$(cat "$tmp/fake/scontrol.log" 2>/dev/null)'"; cat "$tmp/fake.out"; }
  else
    [ "$RC" = 1 ] && [ ! -e "$tmp/fake/scontrol.log" ] && grep -q "^run_slurm.sbatch: SIGUSR1 came, but the step exited 1 (138 is a stop for a requeue): not requeued$" "$tmp/fake.out" \
      && ok "run_slurm.sbatch: SIGUSR1, the step exited 1: not requeued" \
      || { bad "run_slurm.sbatch, step exit 1: exit $RC, scontrol '$(cat "$tmp/fake/scontrol.log" 2>/dev/null)'"; cat "$tmp/fake.out"; }
  fi
done

# --- 9. Ctrl-C through scripts/mpirun_fg.sh (make train, scripts/run_*.sh): the wrapper in a
# session of its own, SIGINT to its process group as a terminal sends it; the Makefile's kill
# delay (odls_base_sigkill_timeout 10), so a stop that went mpirun's way would say SIGTERM
FG=(bash scripts/mpirun_fg.sh $MPIRUN --bind-to none --mca odls_base_sigkill_timeout 10 -np 2)
# a command started with & here ignores SIGINT (bash, no job control), and a shell cannot trap
# what it ignored on entry: start the wrapper as a terminal's shell would, SIGINT at its default
FGEXEC='import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])'
fg_start() { # out extra-mpirun-args -- trainer args: the wrapper as a session leader, JOB its pid (= its PGID)
  local out=$1; shift
  local margs=(); while [ "$1" != -- ]; do margs+=("$1"); shift; done; shift
  /usr/bin/python3 -c "$FGEXEC" "${FG[@]}" "${margs[@]}" ./train_gpt_cpu "${DATA[@]}" "${M[@]}" "$@" > "$out" 2>&1 &
  JOB=$!
}
fg_ranks() { local m; m=$(pgrep -P "$JOB" | head -1); [ -n "$m" ] && pgrep -P "$m" | xargs; }
left_of() { # the pids of $1 still running (a zombie has exited: not running)
  local p l=""
  for p in $1; do kill -0 "$p" 2>/dev/null && [ "$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)" != Z ] && l="$l $p"; done
  echo "${l# }"
}
fg_start "$tmp/fg1.out" -x LLMC_TEST_SLOW=step:0.3 -- -x 400 -o "$tmp/fg1"
if wait_for "$tmp/fg1.out" "^step +2/" 60; then
  R=$(fg_ranks); t0=$(date +%s.%N)
  kill -INT -- -"$JOB"
  seen=no; wait_for "$tmp/fg1.out" "^SIGINT: stopping at the end of step [0-9]+ \(checkpoint [0-9]+, then exit 130\)$" 5 && seen=yes
  dl=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  finish 30
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  K=$(sed -n 's/^interrupted at step \([0-9]*\): wrote checkpoint \1; resume with -y 1 (SIGINT, exiting [0-9.]* s after it)$/\1/p' "$tmp/fg1.out")
  k8=$(printf %08d "${K:-0}"); L=$(left_of "$R")
  if [ "$seen" = yes ] && [ "$RC" = 130 ] && [ -n "$K" ] && [ -s "$tmp/fg1/model_$k8.bin" ] && [ -s "$tmp/fg1/state_$k8.bin" ] \
     && ! ls "$tmp/fg1"/*.tmp >/dev/null 2>&1 && [ -n "$R" ] && [ -z "$L" ]; then
    ok "Ctrl-C (SIGINT to mpirun_fg.sh's process group) after step 2: '$(grep "^SIGINT: stopping" "$tmp/fg1.out")' within $dl s; checkpoint $K (model and state), exit 130 after $dt s, no .tmp, no rank left (of $R)"
  else bad "Ctrl-C through mpirun_fg.sh: line seen '$seen' after $dl s, exit $RC after $dt s, K '$K', ranks left '$L' (of '$R'), in -o: $(ls "$tmp/fg1" | tr '\n' ' ')"; tail -5 "$tmp/fg1.out"; fi
else bad "never reached step 2 (mpirun_fg.sh)"; tail -3 "$tmp/fg1.out"; finish 1; fi

fg_start "$tmp/fg2.out" -x LLMC_TEST_PAUSE_IN_SAVE=30 -- -x 20 -o "$tmp/fg2"
if wait_for "$tmp/fg2.out" "^step +2/" 60; then
  R=$(fg_ranks)
  kill -INT -- -"$JOB"
  if wait_for "$tmp/fg2.out" "^test hook LLMC_TEST_PAUSE_IN_SAVE: rank 1 pauses" 60; then
    tmpfile=$(ls "$tmp/fg2"/*.tmp 2>/dev/null | head -1); t0=$(date +%s.%N)
    kill -INT -- -"$JOB"
    finish 20
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    L=$(left_of "$R")
    if [ "$RC" = 130 ] && [ -n "$tmpfile" ] && ! ls "$tmp/fg2"/*.tmp >/dev/null 2>&1 && ! ls "$tmp/fg2"/state_*.bin >/dev/null 2>&1 \
       && ! ls "$tmp/fg2"/model_*.bin >/dev/null 2>&1 && grep -q "^SIGINT again: exiting now with 130" "$tmp/fg2.out" \
       && awk -v d="$dt" 'BEGIN { exit !(d < 10) }' && [ -n "$R" ] && [ -z "$L" ]; then
      ok "Ctrl-C twice through mpirun_fg.sh (the second during the state write): exit 130 in $dt s, $(basename "$tmpfile") and the pair's model removed, no state, no rank left (of $R)"
    else bad "Ctrl-C twice through mpirun_fg.sh: exit $RC after $dt s, tmp '$tmpfile', ranks left '$L' (of '$R'), in -o: $(ls "$tmp/fg2" | tr '\n' ' ')"; tail -4 "$tmp/fg2.out"; fi
  else bad "the state write never paused (mpirun_fg.sh)"; tail -3 "$tmp/fg2.out"; finish 1; fi
else bad "never reached step 2 (mpirun_fg.sh, twice)"; finish 1; fi

# --- 6. Slurm: SIGUSR1 to the batch shell, the job requeues and resumes itself
slurm_case() {
  timeout 120 $MPIRUN -np 4 ./train_gpt_cpu "${DATA[@]}" "${M[@]}" -x 6 -o "$tmp/ref4" > "$tmp/ref4.out" 2>&1 || { bad "slurm: the 4-rank reference (exit $?)"; return; }
  CL="scripts/cluster.sh --name llmcsig"
  timeout 90 $CL up 2 --slurm >/dev/null 2>&1 || { bad "cluster.sh --name llmcsig up 2 --slurm"; return; }
  eval "$($CL env)"   # SLURM_CONF and the MCA settings, for sbatch --export=ALL (the last case: no local mpirun after it)
  state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
  local jid i st K
  jid=$(timeout 20 sbatch --parsable --requeue --chdir="$(pwd)" --output="$tmp/%j.out" --open-mode=append --nodes=2 --ntasks-per-node=2 \
    --gpus-per-node=0 --cpus-per-task=1 --export="ALL,CPU=1,PRECISION=fp32,ZERO=3,B=1,T=32,STEPS=6,REQUEUE=1" \
    scripts/run_slurm.sbatch -e d2 "${DATA[@]}" -o "$tmp/slurm")
  [ -n "$jid" ] || { bad "slurm: sbatch failed"; return; }
  if ! wait_for "$tmp/$jid.out" "^step +3/" 90; then bad "slurm: job $jid never reached step 3 ($(state "$jid"))"; scancel "$jid"; return; fi
  scancel --signal=USR1 --batch "$jid"
  for ((i = 0; i < 150; i++)); do [ "$(state "$jid")" = PENDING ] && break; sleep 0.2; done
  # a requeued job waits 2 minutes (Slurm's requeue delay); start it now, but not within the second its first run
  # was killed: slurmd refuses a batch job whose credential is that old ("Job N already killed")
  sleep 3; scontrol update JobId="$jid" StartTime=now
  for ((i = 0; i < 450; i++)); do case "$(state "$jid")" in COMPLETED|FAILED|CANCELLED|TIMEOUT) break ;; esac; sleep 0.2; done
  st=$(state "$jid")
  K=$(sed -n 's/^interrupted at step \([0-9]*\): wrote checkpoint \1; resume with -y 1 (SIGUSR1.*)$/\1/p' "$tmp/$jid.out")
  if [ "$st" = COMPLETED ] && [ -n "$K" ] && grep -q "^run_slurm.sbatch: stopped by SIGUSR1 (exit 138): scontrol requeue $jid" "$tmp/$jid.out" \
     && grep -q "^run_slurm.sbatch: $tmp/slurm holds checkpoint $K: resuming with -y 1" "$tmp/$jid.out" && grep -q "^resumed from step $K:" "$tmp/$jid.out"; then
    ok "slurm: SIGUSR1 to the batch shell stopped job $jid at step $K (checkpoint written); it requeued itself and resumed with -y 1: $st"
  else bad "slurm: job $jid $st, K '$K'"; grep -E "^(interrupted|run_slurm|resumed|error)|srun: error" "$tmp/$jid.out" | head -6; fi
  if cmp -s "$tmp/slurm/model_00000006.bin" "$tmp/ref4/model_00000006.bin" && cmp -s "$tmp/slurm/state_00000006.bin" "$tmp/ref4/state_00000006.bin"; then
    ok "slurm: the requeued job's model and state of step 6 are bitwise the uninterrupted run's"
  else bad "slurm: the requeued job's step 6 differs from the uninterrupted run or is missing"; fi
}
if [ "$(id -u)" != 0 ] || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! unshare --net --uts --mount true 2>/dev/null; then
  if [ "${CI:-}" = true ]; then bad "slurm requeue: needs root, namespaces and Slurm"; else skip "slurm requeue: skipped (needs root, namespaces and slurmctld, slurmd, munge)"; fi
else
  slurm_case
  [ -n "$CL" ] && $CL down >/dev/null 2>&1; CL=""
fi
summary
