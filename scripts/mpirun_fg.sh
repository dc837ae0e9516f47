#!/usr/bin/env bash
# mpirun_fg.sh: run an mpirun command line so that Ctrl-C reaches the ranks
# at once. Usage: bash scripts/mpirun_fg.sh mpirun [mpirun flags] PROGRAM [args]
# (`make train` and scripts/run_1node.sh, run_multinode.sh use it).
#
# Why (Open MPI 4.1.4, measured: docs/faults.md): mpirun puts each rank in a
# process group of its own, so the terminal's SIGINT reaches only mpirun,
# which does not pass it on: it sends the ranks SIGCONT, SIGTERM
# odls_base_sigkill_timeout seconds later, and forwards none of their output
# meanwhile; a second Ctrl-C makes mpirun exit at once and leaves the ranks
# running. mpirun does forward SIGUSR1 and SIGUSR2 to every rank at once
# (ess_base_forward_signals), and the trainer takes SIGUSR2 as SIGINT
# (llmc/interrupt.h). So:
#   - mpirun runs in a session of its own (setsid): the terminal's SIGINT
#     (and SIGQUIT, SIGTSTP) reaches only this script;
#   - each Ctrl-C (SIGINT) here is passed on as SIGUSR2: the first, a stop
#     at the end of the step with its checkpoint (exit 130), a second, exit
#     now (no partial file); a third sends mpirun SIGTERM (its own ending
#     of the job: SIGTERM to the ranks after the kill delay, then SIGKILL);
#   - SIGTERM and SIGHUP here: SIGTERM to mpirun (what it did before);
#     SIGUSR1, SIGUSR2: passed on as they are;
#   - mpirun's exit code is this script's (mpirun exits with the ranks'
#     code: 130 after a Ctrl-C, 143 after SIGTERM, 138 after SIGUSR1);
#     after a signal passed on, when every rank here has exited and mpirun
#     lingers in its kill delay, mpirun is ended and the ranks' code is
#     this script's (below).
# Ctrl-Z stops this script only (mpirun and the ranks go on); Ctrl-\ is
# ignored.
# stdout and stderr are mpirun's own (the terminal, a pipe, a file); stdin
# is /dev/null (the trainer reads none), so this works without a terminal
# (CI, nohup) the same way.
set -u
if [ $# -lt 1 ]; then
  echo "mpirun_fg.sh: usage: mpirun_fg.sh mpirun [flags] PROGRAM [args] (no command given)" >&2
  exit 2
fi
ints=0
pid=
fwd=0   # 1 once a signal went to the ranks through mpirun (Ctrl-C, SIGUSR1, SIGUSR2)
on_int() {
  ints=$((ints + 1))
  [ -n "$pid" ] || return 0
  if [ "$ints" -le 2 ]; then kill -USR2 "$pid" 2>/dev/null; fwd=1
  else kill -TERM "$pid" 2>/dev/null
  fi
}
trap on_int INT
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null' TERM HUP
trap '[ -n "$pid" ] && kill -USR1 "$pid" 2>/dev/null; fwd=1' USR1
trap '[ -n "$pid" ] && kill -USR2 "$pid" 2>/dev/null; fwd=1' USR2
trap '' QUIT
# ranks_done: every child of mpirun has exited and awaits its reaping (a
# zombie); prints the largest of their exit codes (a shell's form: 128 + a
# signal that ended one). /proc/PID/stat: field 3 the state, field 52 the
# exit status as waitpid(2) gives it (proc(5), Linux 3.5 and later).
# Fails when mpirun has no child, or one still runs (ssh to other nodes:
# a run over several nodes is left to mpirun).
ranks_done() {
  local kids k s rest code max=-1
  kids=$(pgrep -P "$pid") || return 1
  for k in $kids; do
    s=$(cat "/proc/$k/stat" 2>/dev/null) || return 1
    read -r -a rest <<< "${s##*) }"
    [ "${rest[0]}" = Z ] && [ -n "${rest[49]:-}" ] || return 1
    code=${rest[49]}
    if (( code & 0x7f )); then code=$((128 + (code & 0x7f))); else code=$(((code >> 8) & 0xff)); fi
    (( code > max )) && max=$code
  done
  echo "$max"
}
# Without job control a background command is not a process group leader,
# so setsid(1) calls setsid(2) in place and execs mpirun: $! is mpirun.
setsid "$@" < /dev/null &
pid=$!
# A trapped signal ends `wait` early (status > 128): wait again while
# mpirun is there (a zombie too: kill -0 succeeds until it is reaped); then
# `wait` gives its exit status (bash keeps a reaped child's status).
# After a signal went to the ranks: when one rank exits non-zero before the
# others (130, 138: a stop), mpirun (Open MPI 4.1.4) "aborts" the job: it
# sends the ranks still alive SIGCONT, sleeps odls_base_sigkill_timeout,
# sends SIGTERM, sleeps as long again, and reaps nothing and forwards no
# output meanwhile, though the ranks have exited (measured: exit 19.4 s
# after a stop that took 0.4 s, kill delay 10). So when every rank has
# exited (zombies) for 2 s and mpirun is still there, it is ended
# (SIGKILL: nothing of it is left to run but that sleep) and the ranks'
# exit code is this script's.
n=0
while kill -0 "$pid" 2>/dev/null; do
  if [ "$fwd" = 0 ]; then wait "$pid"; continue; fi
  sleep 0.2
  if code=$(ranks_done); then
    n=$((n + 1))
    if [ "$n" -ge 10 ] && kill -0 "$pid" 2>/dev/null; then
      echo "mpirun_fg.sh: every rank has exited (exit $code); ending mpirun, which would wait out its kill delay (odls_base_sigkill_timeout) twice" >&2
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      exit "$code"
    fi
  else n=0; fi
done
wait "$pid"
exit $?
