#!/usr/bin/env bash
# cluster.sh: a cluster of K "nodes" on one Linux machine, to run and test
# multi-node MPI jobs for real. Each node is a network namespace with its
# own interface (eth0, an address in a private /24), joined to the other
# nodes by a bridge through a veth pair whose rate can be limited (tc tbf,
# both directions), its own hostname (a UTS namespace per launch) and its
# own TMPDIR (Open MPI's session directories must not collide). Open MPI
# starts its daemons inside the nodes through an rsh agent (this script),
# so ranks on one node talk through shared memory (vader) and ranks on
# different nodes through TCP over the limited link. The file system is the
# machine's, so every node sees the working directory, as on a cluster with
# a shared file system. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
#
#   scripts/cluster.sh up K [--rate R] [--mem M] [--cpus split|all] [--slots S] [--slurm]
#                          make K nodes (again: idempotent; a crashed `up` is cleaned first);
#                          --slurm: a Slurm cluster on them (munged, slurmctld, one slurmd per node)
#   scripts/cluster.sh run [mpirun args] -- program args
#                          mpirun across the nodes, e.g. run -np 4 --map-by ppr:2:node -- ./train_gpt_cpu -z 3
#   scripts/cluster.sh rate R [NODE] change the link rate of the running cluster (of one node: a straggler)
#   scripts/cluster.sh link NODE down|up   cut a node's link (the bridge-side veth down: no packet in or
#                                    out, no reset either, as a pulled cable) or restore it
#   scripts/cluster.sh node NODE down|up   down: SIGKILL every process on the node (its namespace's and
#                                    cgroups': MPI daemon, ranks, slurmd), a node that loses power; up:
#                                    its link up, its slurmd started again if dead, back in service
#   scripts/cluster.sh mem M         change the memory size of every node of the running cluster
#   scripts/cluster.sh cpu NODE F    give NODE only the fraction F (0 < F <= 1, or none) of its cpus' time
#                                    (a cpu cgroup quota: a slow node, unmistakable whatever else runs);
#                                    processes already on the node move into it
#   scripts/cluster.sh status        nodes, addresses, cpus, rates, byte counters (exit 1 when not up)
#   scripts/cluster.sh down          remove everything `up` made, and only that
#   scripts/cluster.sh env           print `export OMPI_MCA_...` lines: `eval "$(scripts/cluster.sh env)"`
#                                    makes any plain mpirun (or scripts/run_multinode.sh) use the cluster;
#                                    with --slurm also SLURM_CONF, so sinfo, srun, sbatch, scontrol use it
#   scripts/cluster.sh hostfile      print the path of the Open MPI hostfile (node slots=S per line)
#   scripts/cluster.sh exec NODE cmd...   run a command on a node (e.g. exec llmc-node1 nproc)
#   scripts/cluster.sh counters      per node: bytes into and out of the node over its link
#                                    (the bridge-side veth's tx_bytes and rx_bytes, Ethernet frames)
#
# LLMC_SLURMD_TIMEOUT=S (up --slurm): slurm.conf's SlurmdTimeout (default
# Slurm's 300 s): how long slurmctld waits for a silent slurmd before it
# marks the node DOWN, e.g. 10 for a test that loses a job's batch host.
#
# Options (before or after the command; not among the program's words after
# run's -- or exec's NODE): --name NAME (or LLMC_CLUSTER=NAME; default
# llmc) runs several clusters side by side: nodes are NAME-node0..K-1.
#
# R: a tc rate, NUMBER followed by bit, kbit, mbit, gbit (e.g. 100mbit, 1gbit,
# 10gbit; decimal units, as tc counts them), or none for no limit. It limits
# every node's link in each direction (full duplex, like a NIC): what leaves
# node i through its eth0 and what the bridge sends into node i. The rate
# counts whole Ethernet frames (TCP/IP headers included: with MTU 1500 the
# payload is about 95.6% of R). On this kind of machine an unlimited veth
# moves about 11 Gbit/s between two nodes, so 10gbit is close to the CPU's
# own limit there.
# M: every node's memory, a size such as 900M, 1.5G, 2Gi (K M G T = 1e3 ..
# 1e12 bytes, Ki Mi Gi Ti binary), or none. Each node is a memory cgroup
# below the caller's own (v1: memory.limit_in_bytes and
# memory.memsw.limit_in_bytes, so it cannot swap either; v2: memory.max and
# memory.swap.max = 0) that every process started on the node joins (the
# agent writes its pid into cgroup.procs before it runs anything): the
# node's MPI daemon and all its ranks share M, and the kernel's OOM killer
# ends a rank that goes over, as on a node without swap. The trainer reads
# the limit (llmc/fit.h) and divides it by the ranks of the node.
# F (cpu): each node is also a cpu cgroup below the caller's (v1: cpu.cfs_quota_us
# = F x cpu.cfs_period_us (100 ms) x the node's cpus; v2: cpu.max; only v1
# has been run here), made by the first `cpu` command, which every process
# later started on the node joins and which the node's running processes
# are moved into: the node's ranks get at most F of its cpus' time, however
# idle the machine is; none removes the limit.
# --slurm (Debian's slurm-wlm 22.05 and munge: apt-get install slurmctld
# slurmd slurm-client munge): munged with its own key and socket in the
# state dir; slurmctld on the machine, in a UTS namespace named NAME-ctl,
# reached at the bridge address; one slurmd per node inside the node's
# namespaces with the node's hostname and cpus, and its own TmpFS
# (slurm.conf's TmpFS=STATE/slurm/tmp/%n: PMIx's per-step directories
# collide in a shared /tmp; a private /tmp would hide a checkout under /tmp
# from the jobs); a generated slurm.conf
# (proctrack/linuxproc: no systemd; no accounting database, so `sacct` has
# nothing: `scontrol show job` keeps a finished job's state for 10 minutes).
# Each slurmd runs inside its node's memory cgroup (--mem), and on cgroup v1
# Slurm's own task/cgroup confines every job to its --mem in a cgroup
# inside the node's (CR_CPU_Memory, RealMemory = M; each slurmd's
# cgroup.conf mounts its node's cgroup as CgroupMountpoint/memory); on v2,
# task/none and the node's limit only. `srun --mpi=pmix` launches MPI
# ranks; Open MPI also reads a Slurm allocation, so mpirun inside sbatch
# works too. `down` stops every daemon it started, by the PID it recorded.
# --cpus split (default, when the machine has at least K cpus): node i gets
# its own contiguous share of the cpus (taskset), as real nodes have their
# own cores, so `nproc` and OpenMP's default inside a node see that share;
# --cpus all: every node sees every cpu. --slots S: Open MPI slots per node
# in the hostfile (default: the node's cpu count, at least 2).
#
# Addresses: 10.213.S.0/24 with the first S in 1..254 that no other cluster
# of this script and no interface or route of the machine uses; node i is
# 10.213.S.(i+1), the bridge 10.213.S.254. Names: bridge lzSbr, veth lzSnI
# (bridge side), namespace and hostname NAME-nodeI, /etc/hosts lines marked
# "# llmc-cluster NAME". State: /run/llmc-cluster/NAME/ (what was created is
# recorded there before it is created, so `down` after a crash removes
# exactly that); node temp dirs: /tmp/llmc-cluster-NAME/NODE; memory cgroups:
# <the caller's memory cgroup>/llmc-NAME/NODE.
set -euo pipefail
SELF=$(readlink -f "${BASH_SOURCE[0]}")
STATE_ROOT=/run/llmc-cluster
NAME=${LLMC_CLUSTER:-llmc}; NAME_GIVEN=""

die() { echo "error: cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$SELF" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --name) [ $# -ge 2 ] || die "--name needs a value"; NAME=$2; NAME_GIVEN=1; shift 2 ;;
    --name=*) NAME=${1#--name=}; NAME_GIVEN=1; shift ;;
    -h|--help|help) usage; exit 0 ;;
    *) break ;;
  esac
done
[[ "$NAME" =~ ^[a-z][a-z0-9]{0,9}$ ]] || die "--name $NAME: must be 1-10 characters, a lowercase letter then letters or digits"
CMD=${1:-}; [ -n "$CMD" ] || { usage >&2; exit 1; }; shift
# --name after the command counts as before it (a `status --name nc` or a `down --name nc` must never act on
# the default cluster); not among the words of the program (after run's --, after exec's NODE)
NAME_AFTER=""; rest=(); own=1; k=0
[ "$CMD" = agent ] && own=0   # (Open MPI's remote command: its words are never ours)
while [ "$CMD" != agent ] && [ $# -gt 0 ]; do
  if [ $own = 1 ]; then
    case "$1" in
      --name) [ $# -ge 2 ] || die "--name needs a value"; NAME_AFTER=$2; shift 2; continue ;;
      --name=*) NAME_AFTER=${1#--name=}; shift; continue ;;
      --) [ "$CMD" = run ] && own=0 ;;
      *) [ "$CMD" = exec ] && [ $k = 0 ] && own=2 ;;
    esac
  fi
  [ $own = 2 ] && { k=1; rest+=("$1"); shift; own=0; continue; }
  rest+=("$1"); shift
done
[ "$CMD" = agent ] || set -- ${rest[@]+"${rest[@]}"}
if [ -n "$NAME_AFTER" ]; then
  [ -n "$NAME_GIVEN" ] && [ "$NAME_AFTER" != "$NAME" ] && die "--name $NAME before the command and --name $NAME_AFTER after it: give one"
  NAME=$NAME_AFTER
  [[ "$NAME" =~ ^[a-z][a-z0-9]{0,9}$ ]] || die "--name $NAME: must be 1-10 characters, a lowercase letter then letters or digits"
fi
DIR=$STATE_ROOT/$NAME
TMPBASE=/tmp/llmc-cluster-$NAME

need_root() {
  [ "$(id -u)" = 0 ] || die "$CMD: must run as root (network namespaces, links and tc need CAP_NET_ADMIN; try sudo)"
}
need_tools() {
  local t
  for t in ip tc unshare nsenter taskset flock; do
    command -v "$t" >/dev/null 2>&1 || die "$CMD: '$t' not found (apt-get install iproute2 util-linux)"
  done
}
need_netns() {
  local msg
  msg=$(unshare --net --uts true 2>&1) || die "$CMD: network/UTS namespaces are not available here (unshare --net --uts: ${msg:-failed})"
}
lock() { mkdir -p "$STATE_ROOT"; exec 9>"$STATE_ROOT/.lock"; flock 9; }

# --- state: $DIR/state holds key=value lines; $DIR/created one resource a line
st() { sed -n "s/^$1=//p" "$DIR/state" 2>/dev/null | tail -1; }
st_set() { # key value
  touch "$DIR/state"
  grep -v "^$1=" "$DIR/state" > "$DIR/state.new" || true
  echo "$1=$2" >> "$DIR/state.new"; mv "$DIR/state.new" "$DIR/state"
}
record() { echo "$*" >> "$DIR/created"; }
# innode NODE cmd...: run cmd in NODE's network namespace. nsenter, not
# `ip -n` / `ip netns exec` / `tc -n`: those also remount / as a slave in a
# new mount namespace, which fails where / is not a mount point (a chroot).
innode() { local n=$1; shift; nsenter --net="/run/netns/$n" "$@"; }
is_up() { [ "$(st complete)" = 1 ]; }

# --- rates: tc syntax -> bits per second ("" for none)
rate_bps() {
  local r=${1,,}
  case "$r" in none|off|0|unlimited) echo ""; return 0 ;; esac
  [[ "$r" =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit)$ ]] || return 1
  local n=${BASH_REMATCH[1]} u=${BASH_REMATCH[3]} m=1
  case "$u" in kbit) m=1e3 ;; mbit) m=1e6 ;; gbit) m=1e9 ;; tbit) m=1e12 ;; esac
  awk -v n="$n" -v m="$m" 'BEGIN { v = n * m; if (v < 8000) exit 1; printf "%.0f\n", v }'
}
apply_rate() { # rate string [node index]
  local bps burst i node veth K only=${2:-}
  bps=$(rate_bps "$1") || die "rate $1: expected a tc rate such as 100mbit, 1gbit, 10gbit (at least 8kbit), or none"
  K=$(st nodes)
  for ((i = 0; i < K; i++)); do
    [ -z "$only" ] || [ "$only" = "$i" ] || continue
    node=$NAME-node$i; veth=$(st "veth$i")
    if [ -z "$bps" ]; then
      innode "$node" tc qdisc del dev eth0 root 2>/dev/null || true
      tc qdisc del dev "$veth" root 2>/dev/null || true
    else
      # burst: 2 ms of traffic, at least 64 KiB (a GSO packet); queue: 50 ms
      burst=$(awk -v b="$bps" 'BEGIN { x = b / 8 * 0.002; if (x < 65536) x = 65536; printf "%.0f\n", x }')
      innode "$node" tc qdisc replace dev eth0 root tbf rate "$bps"bit burst "$burst" latency 50ms \
        || die "rate $1: tc tbf failed on $node eth0 (is the sch_tbf qdisc available?)"
      tc qdisc replace dev "$veth" root tbf rate "$bps"bit burst "$burst" latency 50ms \
        || die "rate $1: tc tbf failed on $veth"
    fi
    st_set "rate$i" "${1,,}"
  done
  if [ -z "$only" ]; then st_set rate "${1,,}"; else st_set rate mixed; fi
}

# --- memory: sizes -> bytes ("" for none); the node cgroups
mem_bytes() {
  local m=$1
  case "${m,,}" in none|off|unlimited) echo ""; return 0 ;; esac
  [[ "$m" =~ ^([0-9]+(\.[0-9]+)?)([kKmMgGtT]i?)?$ ]] || return 1
  local n=${BASH_REMATCH[1]} u=${BASH_REMATCH[3]} f=1
  case "$u" in
    k|K) f=1e3 ;; m|M) f=1e6 ;; g|G) f=1e9 ;; t|T) f=1e12 ;;
    ki|Ki|KI|kI) f=1024 ;; mi|Mi|MI|mI) f=1048576 ;; gi|Gi|GI|gI) f=1073741824 ;; ti|Ti|TI|tI) f=1099511627776 ;;
  esac
  awk -v n="$n" -v f="$f" 'BEGIN { v = n * f; if (v < 16777216) exit 1; printf "%.0f\n", v }'
}
# the caller's memory cgroup directory (v1 memory controller, else v2)
cg_parent() {
  local p
  p=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup | head -1)
  if [ -n "$p" ] && [ -d /sys/fs/cgroup/memory ]; then echo "v1 /sys/fs/cgroup/memory${p%/}"; return 0; fi
  p=$(sed -n 's/^0::\(.*\)$/\1/p' /proc/self/cgroup | head -1)
  if [ -n "$p" ] && [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo "v2 /sys/fs/cgroup${p%/}"; return 0; fi
  return 1
}
node_cgroups_make() { # controller "ver dir" key what: the node cgroups under dir/llmc-NAME (recorded first); sets state <key>ver, <key><i>
  local ctrl=$1 par=$2 key=$3 what=$4 K i ver base
  ver=${par%% *}; base="${par#* }/llmc-$NAME"
  if [ "$ver" = v2 ]; then
    grep -qw "$ctrl" "${par#* }/cgroup.controllers" 2>/dev/null || die "$what: the $ctrl controller is not available in ${par#* } (cgroup v2)"
    grep -qw "$ctrl" "${par#* }/cgroup.subtree_control" 2>/dev/null || echo "+$ctrl" > "${par#* }/cgroup.subtree_control" 2>/dev/null \
      || die "$what: cannot enable the $ctrl controller below ${par#* } (cgroup v2 allows it only in a cgroup without processes of its own)"
  fi
  K=$(st nodes)
  record cgroup "$base"; mkdir -p "$base" || die "$what: cannot create the cgroup $base"
  if [ "$ver" = v2 ]; then echo "+$ctrl" > "$base/cgroup.subtree_control" 2>/dev/null || die "$what: cannot enable the $ctrl controller in $base"; fi
  for ((i = 0; i < K; i++)); do
    record cgroup "$base/$NAME-node$i"; mkdir -p "$base/$NAME-node$i"
    st_set "$key$i" "$base/$NAME-node$i"
  done
  st_set "${key}ver" "$ver"
}
mem_make() { # create the node memory cgroups; sets state cgver, cg<i>
  local par
  par=$(cg_parent) || die "--mem: no memory cgroup hierarchy here (/sys/fs/cgroup/memory or cgroup v2)"
  node_cgroups_make memory "$par" cg --mem
}
apply_mem() { # size string
  local b i K cg ver lim
  b=$(mem_bytes "$1") || die "mem $1: expected a size such as 900M, 1.5G, 2Gi (at least 16 MiB), or none"
  [ -n "$(st cg0)" ] || mem_make
  K=$(st nodes); ver=$(st cgver)
  for ((i = 0; i < K; i++)); do
    cg=$(st "cg$i")
    if [ "$ver" = v1 ]; then
      lim=${b:--1}
      # memsw >= limit at every moment: raise memsw first, lower it last
      if [ -f "$cg/memory.memsw.limit_in_bytes" ]; then
        echo -1 > "$cg/memory.memsw.limit_in_bytes" || die "mem $1: cannot write $cg/memory.memsw.limit_in_bytes"
      fi
      echo "$lim" > "$cg/memory.limit_in_bytes" || die "mem $1: cannot set $cg/memory.limit_in_bytes to $lim (the node uses more now?)"
      if [ -f "$cg/memory.memsw.limit_in_bytes" ]; then
        echo "$lim" > "$cg/memory.memsw.limit_in_bytes" || die "mem $1: cannot write $cg/memory.memsw.limit_in_bytes"
      fi
    else
      echo "${b:-max}" > "$cg/memory.max" || die "mem $1: cannot write $cg/memory.max"
      [ ! -f "$cg/memory.swap.max" ] || echo "$([ -n "$b" ] && echo 0 || echo max)" > "$cg/memory.swap.max" || true
    fi
  done
  st_set mem "${b:+$1}"; [ -n "$b" ] || st_set mem none
}
# the caller's cpu cgroup directory (v1 cpu controller, else v2)
cpu_cg_parent() {
  local p mnt
  p=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}cpu\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup | head -1)
  mnt=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/mounts)
  if [ -n "$p" ] && [ -n "$mnt" ] && [ -f "$mnt/cpu.cfs_quota_us" ]; then echo "v1 $mnt${p%/}"; return 0; fi
  p=$(sed -n 's/^0::\(.*\)$/\1/p' /proc/self/cgroup | head -1)
  if [ -n "$p" ] && [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo "v2 /sys/fs/cgroup${p%/}"; return 0; fi
  return 1
}
cpu_make() { # create the node cpu cgroups; sets state cpucgver, cpucg<i>
  local par
  par=$(cpu_cg_parent) || die "cpu: no cpu cgroup hierarchy here (a v1 cpu controller or cgroup v2)"
  node_cgroups_make cpu "$par" cpucg cpu
}
apply_cpu() { # node index, fraction string
  local i=$1 f=$2 cg ncpu quota period=100000 pid
  if [ "${f,,}" != none ]; then
    awk -v f="$f" 'BEGIN { exit !(f ~ /^[0-9]*\.?[0-9]+$/ && f > 0 && f <= 1) }' || die "cpu $f: expected a fraction of the node's cpus in (0, 1], e.g. 0.25, or none"
  fi
  [ -n "$(st cpucg0)" ] || cpu_make
  cg=$(st "cpucg$i"); ncpu=$(st "cpus$i" | tr ',' '\n' | wc -l)
  quota=-1
  [ "${f,,}" = none ] || quota=$(awk -v f="$f" -v p=$period -v n="$ncpu" 'BEGIN { q = f * p * n; if (q < 1000) q = 1000; printf "%.0f\n", q }')
  if [ "$(st cpucgver)" = v1 ]; then
    echo $period > "$cg/cpu.cfs_period_us" && echo "$quota" > "$cg/cpu.cfs_quota_us" || die "cpu $f: cannot write $cg/cpu.cfs_quota_us"
  else
    echo "$([ "$quota" = -1 ] && echo max || echo "$quota") $period" > "$cg/cpu.max" || die "cpu $f: cannot write $cg/cpu.max"
  fi
  for pid in $(ip netns pids "$NAME-node$i" 2>/dev/null); do echo "$pid" > "$cg/cgroup.procs" 2>/dev/null || true; done
  st_set "cpufrac$i" "${f,,}"
}

# end every process in a cgroup of ours (each was started on the node), then remove it
# (and the cgroups below it, deepest first: Slurm's job cgroups on a node)
cg_procs() { find "$1" -name cgroup.procs -exec cat {} + 2>/dev/null; }
cg_remove() {
  local cg=$1 pid
  [ -d "$cg" ] || return 0
  for pid in $(cg_procs "$cg"); do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do [ -z "$(cg_procs "$cg")" ] && break; sleep 0.2; done
  for pid in $(cg_procs "$cg"); do kill -KILL "$pid" 2>/dev/null || true; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    find "$cg" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null
    rmdir "$cg" 2>/dev/null && return 0; sleep 0.2
  done
  echo "warning: cluster.sh: could not remove the cgroup $cg" >&2
}

# --- slurm (--slurm): daemons recorded as "daemon NAME PIDFILE" before they start,
# and started without fd 9 (the state lock: a daemon holding it would block every later command)
slurm_dir() { echo "$DIR/slurm"; }
daemon_stop() { # name pidfile: TERM, then KILL, only the process the pid file names if it is that daemon
  local name=$1 pf=$2 pid
  [ -f "$pf" ] || return 0
  pid=$(cat "$pf" 2>/dev/null)
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 25); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}
# slurmd_start I: start node I's slurmd (its config from state slurmconf<I>)
slurmd_start() {
  local i=$1 node=$NAME-node$1
  # slurmd (and so every job step it starts) lives in the node's memory cgroup, as on a real node
  nsenter --net="/run/netns/$node" unshare --uts --mount -- taskset -c "$(st "cpus$i")" \
    sh -c 'if [ -n "$4" ]; then echo $$ > "$4/cgroup.procs" || exit 1; fi; hostname "$1" && exec slurmd -f "$3" -N "$1"' \
    sh "$node" "$TMPBASE/$node" "$(st "slurmconf$i")" "$(st "cg$i")" 9>&-
}
# slurmd_alive I: 0 when node I's slurmd (its pid file) runs
slurmd_alive() {
  local pid; pid=$(cat "$(slurm_dir)/slurmd.$NAME-node$1.pid" 2>/dev/null)
  [[ "$pid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmd ] \
    && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]   # a killed slurmd not yet reaped is dead
}
# node_pids I: every process running on node I: those in its network
# namespace (its MPI daemon, its ranks, its slurmd and their job steps),
# and those in its memory and cpu cgroups
node_pids() {
  local g
  { ip netns pids "$NAME-node$1" 2>/dev/null
    for g in "$(st "cg$1")" "$(st "cpucg$1")"; do [ -n "$g" ] && cg_procs "$g"; done; } | sort -un
}
slurm_up() {
  local t
  for t in slurmctld slurmd munged srun sinfo sbatch scontrol; do
    command -v "$t" >/dev/null 2>&1 || die "up --slurm: '$t' not found (apt-get install slurmctld slurmd slurm-client munge)"
  done
  local K S i sd conf ctl; K=$(st nodes); S=$(st subnet); sd=$(slurm_dir); conf=$sd/slurm.conf; ctl=$NAME-ctl
  mkdir -p "$sd/munge" "$sd/ctld" "$sd/d"; chmod 700 "$sd/munge"
  dd if=/dev/urandom of="$sd/munge.key" bs=128 count=1 2>/dev/null; chmod 400 "$sd/munge.key"
  record daemon munged "$sd/munge/munged.pid"
  munged --force --socket="$sd/munge/munge.sock" --key-file="$sd/munge.key" --pid-file="$sd/munge/munged.pid" \
    --log-file="$sd/munge/munged.log" --seed-file="$sd/munge/munged.seed" 9>&- || die "up --slurm: munged did not start (see $sd/munge/munged.log)"
  local port=$((20000 + 2 * S))
  # Slurm's own cgroups (task/cgroup, cgroup/v1): where the nodes are v1 memory
  # cgroups (--mem), each slurmd gets a CgroupMountpoint whose memory/ is a
  # bind mount of its node's cgroup, so every job's cgroup
  # (slurm_NODE/uid_U/job_J/step_S, limited to the job's --mem) is created
  # inside the node's, as on a real node; the trainer reads the smaller
  # limit. On cgroup v2 (Slurm 22.05's cgroup/v2 plugin makes its step
  # scopes through systemd, which the nodes do not run) the jobs keep
  # task/none and the node's limit only (docs/cluster.md).
  local cgslurm=0 realmem=""
  if [ -n "$(st cg0)" ] && [ "$(st cgver)" = v1 ] && [ -n "$(st mem)" ] && [ "$(st mem)" != none ]; then
    cgslurm=1
    realmem=$(( $(mem_bytes "$(st mem)") / 1048576 ))
  fi
  {
    echo "# generated by scripts/cluster.sh up --slurm for cluster $NAME"
    echo "ClusterName=$NAME"
    echo "SlurmctldHost=$ctl(10.213.$S.254)"
    echo "SlurmctldPort=$port"
    echo "SlurmdPort=$((port + 1))"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$sd/munge/munge.sock"
    echo "CredType=cred/munge"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$sd/ctld"
    echo "SlurmdSpoolDir=$sd/d/%n"
    echo "TmpFS=$sd/tmp/%n"
    echo "SlurmctldPidFile=$sd/slurmctld.pid"
    echo "SlurmdPidFile=$sd/slurmd.%n.pid"
    echo "SlurmctldLogFile=$sd/slurmctld.log"
    echo "SlurmdLogFile=$sd/slurmd.%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    if [ "$cgslurm" = 1 ]; then   # memory a consumable resource, each job in a cgroup of that size (task/cgroup)
      echo "TaskPlugin=task/cgroup"
      echo "SchedulerType=sched/builtin"
      echo "SelectType=select/cons_tres"
      echo "SelectTypeParameters=CR_CPU_Memory"
    else
      echo "TaskPlugin=task/none"
      echo "SchedulerType=sched/builtin"
      echo "SelectType=select/cons_tres"
      echo "SelectTypeParameters=CR_CPU"
    fi
    echo "SlurmdParameters=config_overrides"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "MinJobAge=600"
    echo "KillWait=5"
    [ -n "${LLMC_SLURMD_TIMEOUT:-}" ] && echo "SlurmdTimeout=$LLMC_SLURMD_TIMEOUT"
    for ((i = 0; i < K; i++)); do
      local c; c=$(st "cpus$i" | tr ',' '\n' | wc -l)
      echo "NodeName=$NAME-node$i NodeAddr=10.213.$S.$((i + 1)) CPUs=$(( c < 2 ? 2 : c ))${realmem:+ RealMemory=$realmem} State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } > "$conf"
  # the controller's name, beside the nodes' in /etc/hosts (the same marked lines)
  echo "10.213.$S.254 $ctl $(HOSTS_MARK)" >> /etc/hosts
  record daemon slurmctld "$sd/slurmctld.pid"
  unshare --uts sh -c 'hostname "$1" && exec slurmctld -f "$2"' sh "$ctl" "$conf" 9>&- || die "up --slurm: slurmctld did not start (see $sd/slurmctld.log)"
  for ((i = 0; i < K; i++)); do
    local node=$NAME-node$i nconf=$conf
    mkdir -p "$TMPBASE/$node" "$sd/tmp/$node"
    if [ "$cgslurm" = 1 ]; then   # the node's own config dir: the same slurm.conf, its cgroup.conf
      mkdir -p "$sd/conf/$node" "$sd/cg/$node/memory"
      cp "$conf" "$sd/conf/$node/slurm.conf"; nconf=$sd/conf/$node/slurm.conf
      printf '%s\n' "# generated by scripts/cluster.sh: the jobs' cgroups inside $node's memory cgroup" "CgroupPlugin=cgroup/v1" \
        "CgroupMountpoint=$sd/cg/$node" "CgroupAutomount=no" "ConstrainRAMSpace=yes" "ConstrainSwapSpace=yes" "AllowedSwapSpace=0" \
        "ConstrainCores=no" "ConstrainDevices=no" > "$sd/conf/$node/cgroup.conf"
      record mount "$sd/cg/$node/memory"
      mount --bind "$(st "cg$i")" "$sd/cg/$node/memory" || die "up --slurm: cannot bind-mount $node's cgroup $(st "cg$i") for Slurm"
    fi
    record daemon slurmd "$sd/slurmd.$node.pid"
    st_set "slurmconf$i" "$nconf"
    slurmd_start "$i" || die "up --slurm: slurmd on $node did not start (see $sd/slurmd.$node.log)"
  done
  local idle=""
  for _ in $(seq 1 100); do
    idle=$(SLURM_CONF=$conf sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [ "$idle" = "$K" ] && break
    sleep 0.2
  done
  [ "$idle" = "$K" ] || die "up --slurm: $idle of $K nodes idle after 20 s (see $sd/slurmctld.log, $sd/slurmd.*.log)"
  st_set slurm 1
  st_set slurmcg "$cgslurm"
}

# --- cpus: the machine's allowed cpus as a list, and node i's share
cpu_list() { # expand e.g. 0-3,6 into "0 1 2 3 6"
  local spec part a b
  spec=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  for part in ${spec//,/ }; do
    a=${part%-*}; b=${part#*-}
    seq "$a" "$b"
  done | tr '\n' ' '
}
assign_cpus() { # mode
  local mode=$1 K cpus n per i
  K=$(st nodes); read -r -a cpus <<< "$(cpu_list)"; n=${#cpus[@]}
  if [ "$mode" = split ] && [ "$n" -lt "$K" ]; then
    echo "note: $n cpus for $K nodes: nodes share all cpus (--cpus all)" >&2; mode=all
  fi
  per=$((n / K))
  for ((i = 0; i < K; i++)); do
    if [ "$mode" = all ]; then st_set "cpus$i" "$(IFS=,; echo "${cpus[*]}")"
    else st_set "cpus$i" "$(IFS=,; echo "${cpus[*]:$((i * per)):$per}")"; fi
  done
  st_set cpumode "$mode"
}
write_hostfile() {
  local K slots i c
  K=$(st nodes); : > "$DIR/hostfile"
  for ((i = 0; i < K; i++)); do
    slots=$(st slots)
    if [ -z "$slots" ]; then c=$(st "cpus$i" | tr ',' '\n' | wc -l); slots=$((c < 2 ? 2 : c)); fi
    echo "$NAME-node$i slots=$slots" >> "$DIR/hostfile"
  done
}

# --- /etc/hosts: our lines end with the marker; rewritten in place (the
# file may be a bind mount, so no rename)
HOSTS_MARK() { echo "# llmc-cluster $NAME"; }
hosts_remove() {
  [ -f /etc/hosts ] || return 0
  local mark; mark=$(HOSTS_MARK)
  grep -qF -- "$mark" /etc/hosts || return 0
  local tmp; tmp=$(mktemp)
  awk -v m="$mark" '{ if (length($0) >= length(m) && substr($0, length($0) - length(m) + 1) == m) next; print }' /etc/hosts > "$tmp"
  cat "$tmp" > /etc/hosts; rm -f "$tmp"
}

# --- teardown of whatever $DIR/created lists, newest first
do_down() {
  [ -d "$DIR" ] || return 0
  local kind what pid
  if [ -f "$DIR/created" ]; then
    while read -r kind what; do
      case "$kind" in
        netns)
          # processes still running on the node (a hung rank or daemon) were started through this cluster
          for pid in $(ip netns pids "$what" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
          for _ in 1 2 3 4 5 6 7 8 9 10; do [ -z "$(ip netns pids "$what" 2>/dev/null)" ] && break; sleep 0.2; done
          for pid in $(ip netns pids "$what" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
          ip netns del "$what" 2>/dev/null || true ;;
        runnetns)   # only when no namespace (ours or anyone's) is left in it
          if mountpoint -q /run/netns 2>/dev/null && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
            umount /run/netns 2>/dev/null || true
          fi ;;
        link) ip link del "$what" 2>/dev/null || true ;;
        hosts) hosts_remove ;;
        dir) case "$what" in /tmp/llmc-cluster-*) rm -rf -- "$what" ;; esac ;;
        cgroup) case "$what" in */llmc-"$NAME"|*/llmc-"$NAME"/*) cg_remove "$what" ;; esac ;;
        daemon) set -- $what; daemon_stop "$1" "$2" ;;
        mount) case "$what" in "$DIR"/*) umount "$what" 2>/dev/null || umount -l "$what" 2>/dev/null || true ;; esac ;;
      esac
    done < <(tac "$DIR/created")
  fi
  rm -rf -- "$DIR"
}

pick_subnet() {
  local used s d
  used=" "
  for d in "$STATE_ROOT"/*/; do
    [ -f "$d/state" ] && used+="$(sed -n 's/^subnet=//p' "$d/state") "
  done
  local addrs; addrs=$(ip -4 addr show; ip -4 route show table all 2>/dev/null || true)
  for ((s = 1; s <= 254; s++)); do
    case "$used" in *" $s "*) continue ;; esac
    grep -q "10\.213\.$s\." <<< "$addrs" && continue
    ip link show "lz${s}br" >/dev/null 2>&1 && continue
    echo "$s"; return 0
  done
  return 1
}

cmd_up() {
  local K="" rate="" cpumode="" slots="" mem="" slurm=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate) [ $# -ge 2 ] || die "up: --rate needs a value"; rate=$2; shift 2 ;;
      --mem) [ $# -ge 2 ] || die "up: --mem needs a size"; mem=$2; shift 2 ;;
      --slurm) slurm=1; shift ;;
      --cpus) [ $# -ge 2 ] || die "up: --cpus needs split or all"; cpumode=$2; shift 2 ;;
      --slots) [ $# -ge 2 ] || die "up: --slots needs a value"; slots=$2; shift 2 ;;
      *) [ -z "$K" ] || die "up: unexpected argument '$1'"; K=$1; shift ;;
    esac
  done
  [[ "$K" =~ ^[0-9]+$ ]] && [ "$K" -ge 1 ] && [ "$K" -le 200 ] || die "up ${K:-}: the node count K must be a number in 1..200"
  [ -z "$rate" ] || rate_bps "$rate" >/dev/null || die "--rate $rate: expected a tc rate such as 100mbit, 1gbit, 10gbit (at least 8kbit), or none"
  [ -z "$mem" ] || mem_bytes "$mem" >/dev/null || die "--mem $mem: expected a size such as 900M, 1.5G, 2Gi (at least 16 MiB), or none"
  case "$cpumode" in ""|split|all) ;; *) die "--cpus $cpumode: must be split or all" ;; esac
  [ -z "$slots" ] || [[ "$slots" =~ ^[1-9][0-9]*$ ]] || die "--slots $slots: must be a positive number"
  need_root; need_tools; need_netns; lock
  if is_up; then
    [ "$(st nodes)" = "$K" ] || die "up $K: cluster $NAME is already up with $(st nodes) nodes (run '$0 --name $NAME down' first, or use another --name)"
    [ -n "$rate" ] && apply_rate "$rate"
    [ -n "$slots" ] && st_set slots "$slots"
    [ -n "$cpumode" ] && assign_cpus "$cpumode"
    [ -n "$mem" ] && apply_mem "$mem"
    [ $slurm = 1 ] && [ "$(st slurm)" != 1 ] && die "up --slurm: cluster $NAME is up without Slurm (run '$0 --name $NAME down' first)"
    if [ "$(st slurm)" = 1 ]; then   # a slurmd that died (a node down) is started again
      for ((i = 0; i < K; i++)); do
        slurmd_alive "$i" && continue
        slurmd_start "$i" || die "up: slurmd on $NAME-node$i did not start (see $(slurm_dir)/slurmd.$NAME-node$i.log)"
        echo "cluster $NAME: slurmd on $NAME-node$i was not running: started" >&2
      done
    fi
    write_hostfile
    echo "cluster $NAME: already up, $K nodes on 10.213.$(st subnet).0/24, rate $(st rate), mem $(st mem), cpus $(st cpumode)"
    return 0
  fi
  [ -d "$DIR" ] && { echo "cluster $NAME: removing the remains of an incomplete 'up'" >&2; do_down; }
  # refuse to touch anything with our names that we did not record
  local i node
  for ((i = 0; i < K; i++)); do
    node=$NAME-node$i
    [ ! -e "/run/netns/$node" ] || die "up: network namespace $node exists but cluster $NAME did not record it (remove it yourself, or use another --name)"
  done
  local S; S=$(pick_subnet) || die "up: no free subnet 10.213.S.0/24 (S in 1..254)"
  mkdir -p "$DIR"; : > "$DIR/created"
  UP_DONE=0
  trap '[ "$UP_DONE" = 1 ] || { echo "error: cluster.sh: up failed; removing what it made" >&2; do_down; }' EXIT
  st_set subnet "$S"; st_set nodes "$K"; st_set rate none; st_set slots "$slots"
  local br=lz${S}br
  record link "$br"
  ip link add "$br" type bridge
  ip addr add "10.213.$S.254/24" dev "$br"
  sysctl -qw "net.ipv6.conf.$br.disable_ipv6=1" 2>/dev/null || true
  ip link set "$br" up
  record dir "$TMPBASE"; mkdir -p "$TMPBASE"
  record hosts /etc/hosts
  local hosts_lines="" veth peer
  # the first `ip netns add` makes /run/netns a mount point (a bind mount on
  # itself); if it is not one yet, that is ours to undo once it is empty
  mountpoint -q /run/netns 2>/dev/null || record runnetns /run/netns
  for ((i = 0; i < K; i++)); do
    node=$NAME-node$i; veth=lz${S}n$i; peer=lz${S}p$i
    record netns "$node"; ip netns add "$node"
    record link "$veth"; ip link add "$veth" type veth peer name "$peer"
    ip link set "$peer" netns "$node"
    innode "$node" ip link set "$peer" name eth0
    innode "$node" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
    innode "$node" ip addr add "10.213.$S.$((i + 1))/24" dev eth0
    innode "$node" ip link set lo up
    innode "$node" ip link set eth0 up
    sysctl -qw "net.ipv6.conf.$veth.disable_ipv6=1" 2>/dev/null || true
    ip link set "$veth" master "$br"
    ip link set "$veth" up
    st_set "veth$i" "$veth"
    mkdir -p "$TMPBASE/$node"
    hosts_lines+="10.213.$S.$((i + 1)) $node $(HOSTS_MARK)"$'\n'
  done
  hosts_remove
  [ ! -s /etc/hosts ] || [ -z "$(tail -c1 /etc/hosts)" ] || echo >> /etc/hosts
  printf '%s' "$hosts_lines" >> /etc/hosts
  assign_cpus "${cpumode:-split}"
  write_hostfile
  printf '#!/bin/sh\nexec bash %s --name %s agent "$@"\n' "$SELF" "$NAME" > "$DIR/agent"; chmod +x "$DIR/agent"
  apply_rate "${rate:-none}"
  st_set mem none
  [ -z "$mem" ] || apply_mem "$mem"
  [ $slurm = 0 ] || slurm_up
  st_set complete 1
  UP_DONE=1
  echo "cluster $NAME: up, $K nodes ($NAME-node0..$((K - 1))) on 10.213.$S.0/24, rate $(st rate), mem $(st mem), cpus $(st cpumode); hostfile $DIR/hostfile$([ $slurm = 1 ] && echo "; slurm: SLURM_CONF=$(slurm_dir)/slurm.conf, controller $NAME-ctl")"
}

cmd_down() {
  need_root; lock
  if [ ! -d "$DIR" ]; then echo "cluster $NAME: not up (nothing to remove)"; return 0; fi
  do_down
  echo "cluster $NAME: down (namespaces, links, bridge, /etc/hosts lines and temp dirs removed)"
}

need_up() { is_up || die "$CMD: cluster $NAME is not up (run: $0${NAME:+ --name $NAME} up K)"; }

cmd_env() {
  need_up
  local S; S=$(st subnet)
  cat <<EOF
export OMPI_MCA_plm_rsh_agent=$DIR/agent
export OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_orte_default_hostfile=$DIR/hostfile
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=10.213.$S.0/24
export OMPI_MCA_oob_tcp_if_include=10.213.$S.0/24
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_oob_tcp_keepalive_time=5
export OMPI_MCA_oob_tcp_keepalive_intvl=2
export OMPI_MCA_oob_tcp_keepalive_probes=5
export OMPI_MCA_odls_base_sigkill_timeout=10
EOF
  [ "$(st slurm)" = 1 ] && echo "export SLURM_CONF=$(slurm_dir)/slurm.conf"
  return 0
}

cmd_run() {
  need_root; need_up
  local margs=() have_sep=0
  while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then have_sep=1; shift; break; fi
    margs+=("$1"); shift
  done
  [ $have_sep = 1 ] && [ $# -ge 1 ] || die "run: usage: $0 run [mpirun args] -- program args"
  eval "$(cmd_env)"
  exec mpirun --allow-run-as-root "${margs[@]}" "$@"
}

# Open MPI's plm_rsh_agent: `agent HOST remote-command...`, as ssh would run
# it: the words joined and run by a shell, here inside HOST's namespace
# with its own hostname, TMPDIR and cpus. The network namespace is entered
# with nsenter, not `ip netns exec`: the latter also remounts / as a slave
# in a new mount namespace, which fails where / is not a mount point (a
# chroot, e.g. ../shared/tools/fresh-machine.sh); nothing here needs its
# /sys remount or /etc/netns files (Open MPI finds the node's interface by
# getifaddrs).
cmd_agent() {
  local node=${1:-}; shift || true
  [ -n "$node" ] && [ $# -ge 1 ] || die "agent: usage: agent NODE command..."
  need_up
  local i=${node##*-node}
  [ "$node" = "$NAME-node$i" ] && [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -lt "$(st nodes)" ] || die "agent: $node is not a node of cluster $NAME"
  local cpus; cpus=$(st "cpus$i")
  local cg; cg=$(st "cg$i")
  local ccg; ccg=$(st "cpucg$i")
  mkdir -p "$TMPBASE/$node"
  exec nsenter --net="/run/netns/$node" unshare --uts -- env TMPDIR="$TMPBASE/$node" taskset -c "$cpus" \
    sh -c 'for g in "$2" "$3"; do if [ -n "$g" ]; then echo $$ > "$g/cgroup.procs" || exit 1; fi; done; hostname "$1" || exit 1; shift 3; eval "$*"' \
    sh "$node" "$cg" "$ccg" "$@"
}

cmd_exec() {
  need_root
  [ $# -ge 2 ] || die "exec: usage: $0 exec NODE command..."
  local node=$1; shift
  local q; q=$(printf '%q ' "$@")
  cmd_agent "$node" "$q"
}

node_index() { # NODE name -> index, or die
  local node=$1 i=${1##*-node}
  [ "$node" = "$NAME-node$i" ] && [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -lt "$(st nodes)" ] || die "$CMD: $node is not a node of cluster $NAME ($NAME-node0..$(( $(st nodes) - 1 )))"
  echo "$i"
}
cmd_rate() {
  [ $# = 1 ] || [ $# = 2 ] || die "rate: usage: $0 rate R [NODE] (e.g. 100mbit, 1gbit, none)"
  need_root; lock; need_up
  if [ $# = 2 ]; then
    local i; i=$(node_index "$2")
    apply_rate "$1" "$i"
    echo "cluster $NAME: rate ${1,,} on $2's link"
  else
    apply_rate "$1"
    echo "cluster $NAME: rate $(st rate) on every node's link"
  fi
}
cmd_link() {
  [ $# = 2 ] && { [ "$2" = down ] || [ "$2" = up ]; } || die "link: usage: $0 link NODE down|up"
  need_root; lock; need_up
  local i; i=$(node_index "$1")
  ip link set "$(st "veth$i")" "$2" || die "link $1 $2: ip link set $(st "veth$i") $2 failed"
  st_set "link$i" "$2"
  echo "cluster $NAME: $1's link $2"
}

cmd_mem() {
  [ $# = 1 ] || die "mem: usage: $0 mem M (e.g. 900M, 1.5G, none)"
  need_root; lock; need_up
  apply_mem "$1"
  echo "cluster $NAME: mem $(st mem) on every node"
}

cmd_cpu() {
  [ $# = 2 ] || die "cpu: usage: $0 cpu NODE FRACTION (e.g. llmc-node1 0.25, or none)"
  need_root; lock; need_up
  local i; i=$(node_index "$1")
  apply_cpu "$i" "$2"
  echo "cluster $NAME: $1 gets $([ "${2,,}" = none ] && echo "all of its cpus' time (no quota)" || echo "$2 of its cpus' time (cpu cgroup $(st "cpucg$i"))")"
}

# node NODE down: SIGKILL every process on the node (node_pids), as a node
# that loses power: its peers see their connections reset, Slurm sees the
# node not responding; its link stays as it was. node NODE up: the link up,
# its slurmd started again when it is not running, and the node returned to
# service (scontrol update State=RESUME).
cmd_node() {
  [ $# = 2 ] && { [ "$2" = down ] || [ "$2" = up ]; } || die "node: usage: $0 node NODE down|up"
  need_root; lock; need_up
  local i p n=0; i=$(node_index "$1")
  if [ "$2" = down ]; then
    for _ in 1 2 3; do   # a process may start one more as it dies: until none is left
      for p in $(node_pids "$i"); do [ "$p" != $$ ] && kill -KILL "$p" 2>/dev/null && n=$((n + 1)); done
      [ -z "$(node_pids "$i")" ] && break; sleep 0.2
    done
    st_set "node$i" down
    echo "cluster $NAME: $1 down ($n processes killed)"
  else
    ip link set "$(st "veth$i")" up || die "node $1 up: ip link set $(st "veth$i") up failed"
    st_set "link$i" up
    local what=""
    if [ "$(st slurm)" = 1 ]; then
      if ! slurmd_alive "$i"; then
        slurmd_start "$i" || die "node $1 up: slurmd did not start (see $(slurm_dir)/slurmd.$1.log)"
        what=", slurmd started"
      fi
      SLURM_CONF=$(slurm_dir)/slurm.conf scontrol update NodeName="$1" State=RESUME >/dev/null 2>&1 || true
      local s=""
      for _ in $(seq 1 100); do
        s=$(SLURM_CONF=$(slurm_dir)/slurm.conf sinfo -h -n "$1" -o %T 2>/dev/null)
        [ "$s" = idle ] || [ "$s" = allocated ] || [ "$s" = mixed ] && break; sleep 0.2
      done
      what="$what, Slurm: $s"
    fi
    st_set "node$i" up
    echo "cluster $NAME: $1 up (link up$what)"
  fi
}

cmd_counters() {
  need_up
  local K i; K=$(st nodes)
  for ((i = 0; i < K; i++)); do
    local v; v=$(st "veth$i")
    echo "$NAME-node$i $(cat "/sys/class/net/$v/statistics/tx_bytes") $(cat "/sys/class/net/$v/statistics/rx_bytes")"
  done
}

cmd_status() {
  if ! is_up; then echo "cluster $NAME: not up"; return 1; fi
  local K S i; K=$(st nodes); S=$(st subnet)
  echo "cluster $NAME: $K nodes on 10.213.$S.0/24 (bridge lz${S}br 10.213.$S.254), rate $(st rate), mem $(st mem), cpus $(st cpumode)"
  echo "  hostfile $DIR/hostfile; state $DIR; node temp dirs $TMPBASE/"
  printf '  %-16s %-14s %-8s %-10s %-14s %16s %16s\n' node address cpus link qdisc "bytes in" "bytes out"
  while read -r node inb outb; do
    i=${node##*-node}
    local q; q=$(tc qdisc show dev "$(st "veth$i")" root 2>/dev/null | awk '/tbf/ { for (j = 1; j <= NF; j++) if ($j == "rate") print $(j + 1) }')
    local state; state=$(cat "/sys/class/net/$(st "veth$i")/operstate" 2>/dev/null)
    printf '  %-16s %-14s %-8s %-10s %-14s %16s %16s\n' "$node" "10.213.$S.$((i + 1))" "$(st "cpus$i")" "$(st "veth$i")$([ "$state" = down ] && echo " DOWN")" \
      "$([ -n "$q" ] && echo "tbf $q" || echo none)" "$inb" "$outb"
  done < <(cmd_counters)
  if [ "$(st slurm)" = 1 ]; then
    echo "  slurm: SLURM_CONF=$(slurm_dir)/slurm.conf (eval \"\$($0 --name $NAME env)\"), controller $NAME-ctl; sinfo:"
    SLURM_CONF=$(slurm_dir)/slurm.conf sinfo 2>&1 | sed 's/^/    /'
  fi
  if [ -n "$(st cpucg0)" ]; then
    for ((i = 0; i < K; i++)); do
      local fr; fr=$(st "cpufrac$i"); [ "${fr:-none}" = none ] && fr=all
      printf '  %-16s cpu cgroup %s: %s of its cpus'"'"' time\n' "$NAME-node$i" "$(st "cpucg$i")" "$fr"
    done
  fi
  if [ -n "$(st cg0)" ]; then
    printf '  %-16s %-54s %14s %14s %14s %8s\n' node "memory cgroup" "limit B" "usage B" "max usage B" "OOM kills"
    for ((i = 0; i < K; i++)); do
      local cg lim use mx oom
      cg=$(st "cg$i")
      if [ "$(st cgver)" = v1 ]; then
        lim=$(cat "$cg/memory.limit_in_bytes" 2>/dev/null); use=$(cat "$cg/memory.usage_in_bytes" 2>/dev/null)
        mx=$(cat "$cg/memory.max_usage_in_bytes" 2>/dev/null); oom=$(sed -n 's/^oom_kill //p' "$cg/memory.oom_control" 2>/dev/null)
      else
        lim=$(cat "$cg/memory.max" 2>/dev/null); use=$(cat "$cg/memory.current" 2>/dev/null)
        mx=$(cat "$cg/memory.peak" 2>/dev/null || echo -); oom=$(sed -n 's/^oom_kill //p' "$cg/memory.events" 2>/dev/null)
      fi
      printf '  %-16s %-54s %14s %14s %14s %8s\n' "$NAME-node$i" "$cg" "${lim:--}" "${use:--}" "${mx:--}" "${oom:--}"
    done
  fi
  [ "$(id -u)" = 0 ] || return 0
  for ((i = 0; i < K; i++)); do
    ip netns pids "$NAME-node$i" >/dev/null 2>&1 || echo "  warning: namespace $NAME-node$i is missing (run down, then up)"
  done
}

case "$CMD" in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  run) cmd_run "$@" ;;
  rate) cmd_rate "$@" ;;
  link) cmd_link "$@" ;;
  node) cmd_node "$@" ;;
  mem) cmd_mem "$@" ;;
  cpu) cmd_cpu "$@" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  hostfile) need_up; echo "$DIR/hostfile" ;;
  exec) cmd_exec "$@" ;;
  counters) cmd_counters ;;
  agent) cmd_agent "$@" ;;
  *) die "$CMD: unknown command (up, run, rate, link, mem, cpu, status, down, env, hostfile, exec, counters; -h for help)" ;;
esac
