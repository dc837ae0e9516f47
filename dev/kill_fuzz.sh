#!/usr/bin/env bash
# kill_fuzz.sh: stop a 2-rank training run by a signal at a random moment
# of every phase, many times, and check after each stop that nothing was
# lost or left half-written (llmc/interrupt.h; docs/faults.md, docs/testing.md).
#
#   bash dev/kill_fuzz.sh [TRIALS] [SEED]       (default 40 trials, seed 1)
#   PLAN=cover bash dev/kill_fuzz.sh 14         (tests/suites/kill.sh: trial i takes
#                                                phase i mod 7 and kind i mod 5)
#   PRELOAD=SO   the trials' ranks run with LD_PRELOAD=SO (kill.sh's planted
#   bug: build/ignore_signals.so, from tests/ignore_signals.c, must fail)
#   GAP_MAX=15 (seconds, the largest gap between a repeated signal's two
#   deliveries; 0.1 s the smallest, log-uniform), KEEP=1 keeps the work dir.
#
# The run: d2, 2 ranks, -z 3, 8 steps of B=1 T=32, evaluation every 4 steps
# (-m 2), a sample every 4, a checkpoint every 2 (-o). The reference is the
# same run uninterrupted. A trial picks
#   phase: start-up | step | evaluation | sample | checkpoint | state | load
#     (load: -y 1 from the reference's checkpoint 4); the test hook
#     LLMC_TEST_SLOW=PHASE:S (interrupt.h) holds that phase S seconds and
#     announces it on stderr, the trial waits for a random occurrence of it
#     (step: a random step; evaluation: of step 0, 4 or 8; ...), then a random
#     moment inside it;
#   kind: once-all (the signal to both ranks), once-one (to one rank),
#     twice-all / twice-one (the same signal again 0.1..GAP_MAX s later),
#     kill-one (SIGKILL to one rank);
#   signal: SIGTERM, SIGUSR1 or SIGINT.
# Each rank runs under a small wrapper that records its exit code (and
# passes TERM, INT, USR1 from mpirun on). After the trial:
#   1. -o holds no .tmp (after SIGKILL: counted, not failed: SIGKILL cannot
#      be caught, and a resume never reads a .tmp);
#   2. every model_S.bin has its state_S.bin and the reverse, and a pair of
#      an even step is bitwise the reference's (cmp);
#   3. the exit codes: catchable signals: both ranks' codes present and
#      equal, 0 or 128 + the signal (0 only when the signal did not reach
#      a live rank, or a rank said "SIGTERM after the last step": it came
#      past the last checkpoint; a run that ignored it fails); but a signal to one rank in
#      start-up or a -y 1 load exits that rank at once (no collective to
#      agree in), and so does SIGINT twice to one rank (exit now, alone): it
#      has 128 + the signal and the other stopped with it or was ended by
#      mpirun (SIGTERM: 143, or SIGKILL: no code); kill-one: the killed
#      rank 137;
#      after SIGKILL a .tmp or a model without its state may stay (SIGKILL
#      cannot be caught; mpirun SIGKILLs the survivors as well): counted, and
#      the resume below must still hold;
#   4. -y 1 from what -o holds runs to step 8 and its model and state are
#      bitwise the reference's (cmp).
# Prints one line per trial and, at the end, the trials per phase and kind
# and the failures. Exit status: 0 when every check of every trial held.
set -u
cd "$(dirname "$0")/.." || exit 1
TRIALS=${1:-40}; SEED=${2:-1}; PLAN=${PLAN:-random}; GAP_MAX=${GAP_MAX:-15}
MPIRUN=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}
export OMP_NUM_THREADS=1
make -s train_gpt_cpu >/dev/null 2>&1 || { echo "error: kill_fuzz.sh: make train_gpt_cpu failed"; exit 1; }
W=$(mktemp -d -p /var/tmp llmc-kill-fuzz.XXXXXX)
JOB=""
nfail=0
cleanup() { [ -n "$JOB" ] && kill "$JOB" 2>/dev/null; if [ "${KEEP:-0}" = 1 ] || [ $nfail != 0 ]; then echo "kept $W (the failed trials' -o, output and resume output)"; else rm -rf "$W"; fi; }
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM
RANDOM=$SEED
ARGS=(-i "data/brown/brown_train_*.bin" -j "data/brown/brown_val_*.bin" -e d2 -b 1 -t 32 -z 3 -x 8 -n 2 -v 4 -m 2 -s 4 -g 4)
PHASES=(start-up step evaluation sample checkpoint state load)
KINDS=(once-all once-one twice-all twice-one kill-one)
SIGS=(TERM USR1 INT)
declare -A NOCC=([start-up]=1 [step]=8 [evaluation]=3 [sample]=2 [checkpoint]=4 [state]=4 [load]=1)
declare -A HOLD=([start-up]=2 [step]=0.4 [evaluation]=1.5 [sample]=1.5 [checkpoint]=1.5 [state]=1.5 [load]=2)
declare -A SIGNUM=([TERM]=15 [USR1]=10 [INT]=2)
cat > "$W/rank.sh" <<'EOF'
#!/usr/bin/env bash
# one rank: the trainer as a child; TERM, INT, USR1 (mpirun's) passed on; its exit code recorded
"$@" &
c=$!
echo $c > "$RCDIR/pid_$OMPI_COMM_WORLD_RANK"
for s in TERM INT USR1; do trap "kill -$s $c 2>/dev/null" $s; done
while :; do wait $c; rc=$?; kill -0 $c 2>/dev/null || break; done
echo $rc > "$RCDIR/rc_$OMPI_COMM_WORLD_RANK"
exit $rc
EOF
chmod +x "$W/rank.sh"
# uniform and log-uniform in [a, b], from bash's seeded RANDOM (awk's srand of a
# larger number than it holds gave the same value again and again)
uni() { awk -v r="$RANDOM" -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a + (b - a) * r / 32767 }'; }
loguni() { awk -v r="$RANDOM" -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", exp(log(a) + (log(b) - log(a)) * r / 32767) }'; }
wait_n() { # file regex count seconds: until the regex matched count lines
  local i
  local c
  for ((i = 0; i < $4 * 20; i++)); do c=$(grep -cE "$2" "$1" 2>/dev/null); [ "${c:-0}" -ge "$3" ] && return 0; kill -0 "$JOB" 2>/dev/null || return 1; sleep 0.05; done
  return 1
}
finish() { # seconds: wait for JOB; RC
  local i
  for ((i = 0; i < $1 * 10; i++)); do kill -0 "$JOB" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$JOB" 2>/dev/null; then kill "$JOB"; wait "$JOB" 2>/dev/null; RC=124; else wait "$JOB"; RC=$?; fi
  JOB=""
}

echo "kill_fuzz: $TRIALS trials, seed $SEED, plan $PLAN, gap 0.1..$GAP_MAX s; $(bash dev/cpu_name.sh), $(nproc) cores"
timeout 300 $MPIRUN -np 2 ./train_gpt_cpu "${ARGS[@]}" -o "$W/ref" > "$W/ref.out" 2>&1 || { echo "error: kill_fuzz.sh: the reference run failed"; tail -3 "$W/ref.out"; exit 1; }
[ -s "$W/ref/model_00000008.bin" ] && [ -s "$W/ref/state_00000008.bin" ] || { echo "error: kill_fuzz.sh: the reference wrote no checkpoint 8"; exit 1; }
declare -A N FAILS
nfail=0; ntmp=0; t_start=$(date +%s)
for ((i = 0; i < TRIALS; i++)); do
  if [ "$PLAN" = cover ]; then ph=${PHASES[$((i % 7))]}; kind=${KINDS[$((i % 5))]}; sig=${SIGS[$((i % 3))]}
  else ph=${PHASES[$((RANDOM % 7))]}; kind=${KINDS[$((RANDOM % 5))]}; sig=${SIGS[$((RANDOM % 3))]}; fi
  [ "$kind" = kill-one ] && sig=KILL
  occ=$((1 + RANDOM % ${NOCC[$ph]})); who=$((RANDOM % 2)); hold=${HOLD[$ph]}
  at=$(uni 0 "$(awk -v h="$hold" 'BEGIN { print h * 0.9 }')")
  gap=$(loguni 0.1 "$GAP_MAX")
  o="$W/t$i"; rcd="$W/rc$i"; mkdir -p "$rcd"
  extra=()
  if [ $ph = load ]; then mkdir -p "$o"; cp "$W/ref/model_00000004.bin" "$W/ref/state_00000004.bin" "$o/"; extra=(-y 1); fi
  desc="trial $i: $ph #$occ, $kind SIG$sig$([ "${kind#once}" = "$kind" ] && [ $kind != kill-one ] && echo " +${gap}s")$([ "${kind%one}" != "$kind" ] && echo " to rank $who") at +${at}s"
  $MPIRUN -np 2 --mca odls_base_sigkill_timeout 3 -x LLMC_TEST_SLOW="$ph:$hold" -x RCDIR="$rcd" ${PRELOAD:+-x LD_PRELOAD="$PRELOAD"} \
    "$W/rank.sh" ./train_gpt_cpu "${ARGS[@]}" -o "$o" "${extra[@]}" > "$W/t$i.out" 2>&1 &
  JOB=$!
  hook="^test hook LLMC_TEST_SLOW: rank 0 in $ph\$"
  [ $ph = load ] && hook="^test hook LLMC_TEST_SLOW: rank 0 in load\$"
  problems=()
  if wait_n "$W/t$i.out" "$hook" "$occ" 120; then
    sleep "$at"
    p0=$(cat "$rcd/pid_0" 2>/dev/null); p1=$(cat "$rcd/pid_1" 2>/dev/null); pw=$(cat "$rcd/pid_$who" 2>/dev/null)
    # landed: the first signal reached a live trainer (kill succeeded on
    # a process that was not a zombie): the run must then exit 128 + the
    # signal, or a rank must say the signal came after its last step
    landed=0
    alive() { local q; for q in "$@"; do [ -e "/proc/$q/stat" ] && [ "$(awk '{print $3}' "/proc/$q/stat" 2>/dev/null)" != Z ] && return 0; done; return 1; }
    case $kind in
      once-all|twice-all) alive $p0 $p1 && kill -$sig $p0 $p1 2>/dev/null && landed=1 ;;
      once-one|twice-one) alive $pw && kill -$sig $pw 2>/dev/null && landed=1 ;;
      kill-one) kill -KILL $pw 2>/dev/null ;;
    esac
    case $kind in twice-all) sleep "$gap"; kill -$sig $p0 $p1 2>/dev/null ;; twice-one) sleep "$gap"; kill -$sig $pw 2>/dev/null ;; esac
    finish 120
  else
    problems+=("the phase $ph #$occ never came"); finish 120
  fi
  # 1. no .tmp
  tmps=$(ls "$o"/*.tmp 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')
  if [ -n "$tmps" ]; then
    if [ $kind = kill-one ]; then ntmp=$((ntmp + 1)); else problems+=(".tmp left: $tmps"); fi
  fi
  lone=""
  # 2. complete pairs
  for f in "$o"/model_*.bin "$o"/state_*.bin; do
    [ -e "$f" ] || continue
    b=$(basename "$f"); s=${b#*_}; s=${s%.bin}
    if ! [ -e "$o/model_$s.bin" ] || ! [ -e "$o/state_$s.bin" ]; then
      if [ $kind = kill-one ]; then lone="$lone $b"; else problems+=("$b without its pair"); fi
    fi
    if [ $((10#$s % 2)) = 0 ] && [ -e "$W/ref/$b" ] && ! cmp -s "$f" "$W/ref/$b"; then problems+=("$b differs from the reference's"); fi
  done
  # 3. exit codes
  r0=$(cat "$rcd/rc_0" 2>/dev/null); r1=$(cat "$rcd/rc_1" 2>/dev/null)
  if [ $kind = kill-one ]; then
    rk=$(cat "$rcd/rc_$who" 2>/dev/null)
    [ "$rk" = 137 ] || problems+=("the killed rank's code '$rk'")
  elif [ "${kind%one}" != "$kind" ] && { [ $ph = start-up ] || [ $ph = load ] || [ "$kind $sig" = "twice-one INT" ]; }; then
    want=$((128 + ${SIGNUM[$sig]})); ro=$(cat "$rcd/rc_$((1 - who))" 2>/dev/null); rw=$(cat "$rcd/rc_$who" 2>/dev/null)
    if [ "$rw" != $want ] || { [ -n "$ro" ] && [ "$ro" != 143 ] && [ "$ro" != "$want" ]; }; then
      problems+=("exit codes: the signalled rank '$rw' (want $want), the other '$ro' (want 143 from mpirun's SIGTERM, $want, or none: SIGKILLed)")
    fi
  else
    want=$((128 + ${SIGNUM[$sig]}))
    if [ -z "$r0" ] || [ -z "$r1" ] || [ "$r0" != "$r1" ] || { [ "$r0" != 0 ] && [ "$r0" != $want ]; }; then
      problems+=("exit codes rank 0 '$r0', rank 1 '$r1' (want both 0 or $want)")
    elif [ "$r0" = 0 ] && [ "${landed:-0}" = 1 ] && ! grep -qE "^(rank [0-9]+: )?SIG$sig after the last step" "$W/t$i.out"; then
      problems+=("exit 0/0, but SIG$sig reached a live rank and no rank said it came after the last step (want $want: the signal was ignored)")
    fi
  fi
  latest=$(ls "$o" 2>/dev/null | sed -n 's/^state_0*\([0-9][0-9]*\)\.bin$/\1/p' | sort -n | tail -1)
  # 4. -y 1 ends bitwise the reference
  timeout 300 $MPIRUN -np 2 ./train_gpt_cpu "${ARGS[@]}" -o "$o" -y 1 > "$W/t$i.res" 2>&1; rrc=$?
  if [ $rrc != 0 ] || ! cmp -s "$o/model_00000008.bin" "$W/ref/model_00000008.bin" || ! cmp -s "$o/state_00000008.bin" "$W/ref/state_00000008.bin"; then
    problems+=("-y 1 (exit $rrc: $(grep -m1 -E '^error' "$W/t$i.res" || grep -m1 -E '^resumed' "$W/t$i.res")) does not end bitwise the reference")
  fi
  key="$ph $kind"; N[$key]=$(( ${N[$key]:-0} + 1 ))
  if [ ${#problems[@]} = 0 ]; then
    echo "ok   $desc: exit $r0/$r1 (mpirun $RC), resumed from ${latest:-nothing}$([ -n "$tmps" ] && echo ", .tmp after SIGKILL: $tmps")$([ -n "$lone" ] && echo ", without a pair after SIGKILL:$lone")"
    rm -rf "$o"
  else
    echo "FAIL $desc: exit $r0/$r1 (mpirun $RC): $(IFS=';'; echo "${problems[*]}")"
    grep -E "^(SIG|interrupted|error|test hook)" "$W/t$i.out" | tail -4 | sed 's/^/     /'
    grep -E "^error" "$W/t$i.res" 2>/dev/null | head -2 | sed 's/^/     resume: /'
    nfail=$((nfail + 1)); FAILS[$key]=$(( ${FAILS[$key]:-0} + 1 ))
  fi
done
echo "trials per phase and kind (failures in brackets), $((($(date +%s) - t_start))) s:"
printf '  %-11s' phase; for k in "${KINDS[@]}"; do printf ' %10s' "$k"; done; echo
for ph in "${PHASES[@]}"; do
  printf '  %-11s' "$ph"
  for k in "${KINDS[@]}"; do c=${N["$ph $k"]:-0}; f=${FAILS["$ph $k"]:-0}; printf ' %10s' "$c$([ "$f" != 0 ] && echo "[$f]")"; done; echo
done
echo "kill_fuzz: $TRIALS trials, $nfail failed; SIGKILL left a .tmp in $ntmp"
[ $nfail = 0 ]
