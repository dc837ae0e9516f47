#!/usr/bin/env bash
# The trainer across nodes, on a simulated cluster (scripts/cluster.sh: two
# network namespaces on a bridge, links limited to 1 Gbit/s, Open MPI over
# TCP between nodes and shared memory inside a node):
#  1. the cluster: every node has its own hostname and address, the rate is
#     set on the links; a crashed `up` is cleaned by the next one; not root
#     gives one error line;
#  2. 2 nodes x 2 ranks equals the same 4 ranks on one node, bit for bit
#     (losses and checkpoint), at stages 1 and 3 (stage 3 launched through
#     scripts/run_multinode.sh with the cluster's hostfile); each node
#     received at least the all-gathers' lower bound over its link, so the
#     ranks really talked across it;
#  3. the placement table: node, local rank, local size of every rank, and
#     OpenMP threads = the node's cpus / ranks on the node (2x1 and 2x2, cpus
#     shared and split between nodes);
#  4. the slurm and launch scripts: bash -n, the generated command lines,
#     and the trainer accepts the generated flags;
#  5. `down` leaves no namespace, link, /etc/hosts line or temp dir behind
#     (also when a test fails or the suite is interrupted: trap).
# Needs root: otherwise it skips with one line (a failure when CI=true).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
cannot_run() { # reason: the whole suite is one skip (a failure when CI=true, where it must run)
  if [ "${CI:-}" = true ]; then bad "the simulated cluster: $1"; else skip "the simulated cluster: skipped ($1)"; fi
  summary; exit
}
[ "$(id -u)" = 0 ] || cannot_run "needs root: network namespaces"
unshare --net --uts true 2>/dev/null || cannot_run "needs network/UTS namespaces: unshare --net --uts failed on this machine"
command -v tc >/dev/null && command -v ip >/dev/null || cannot_run "needs iproute2 (ip, tc): make deps"

NAME=llmctest
CL="scripts/cluster.sh --name $NAME"
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
cleanup() { $CL down >/dev/null 2>&1; scripts/cluster.sh --name llmccrash down >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM
COMMON="-e d2 --channels 64 --heads 2 --max-seq-len 64 -t 32 -d 256 -x 6 -v 6 -m 2 -s 0 -l 3e-3 -u 2"
STEPS=6

# --- 1. the cluster itself
hosts_before=$(grep -v "# llmc-cluster " /etc/hosts)
netns_mount_before=$(mountpoint -q /run/netns 2>/dev/null && echo mounted || echo not-mounted)
if out=$($CL up 2 --rate 1gbit --cpus all 2>&1); then ok "up 2 --rate 1gbit: $out"; else bad "up 2: $out"; summary; exit 1; fi
S=$(sed -n 's/^subnet=//p' /run/llmc-cluster/$NAME/state)
for i in 0 1; do
  h=$($CL exec $NAME-node$i hostname 2>&1)
  a=$($CL exec $NAME-node$i ip -4 -o addr show dev eth0 2>&1 | awk '{print $4}')
  r=$(nsenter --net=/run/netns/$NAME-node$i tc qdisc show dev eth0 | grep -o "rate [0-9A-Za-z]*")
  if [ "$h" = "$NAME-node$i" ] && [ "$a" = "10.213.$S.$((i + 1))/24" ] && [ "$r" = "rate 1Gbit" ] \
     && grep -q "^10.213.$S.$((i + 1)) $NAME-node$i # llmc-cluster $NAME$" /etc/hosts; then
    ok "node $i: hostname $h, address $a, link $r, in /etc/hosts"
  else bad "node $i: hostname '$h', address '$a', link '$r' (expected $NAME-node$i, 10.213.$S.$((i + 1))/24, rate 1Gbit)"; fi
done
# --name after the command names the cluster too (it used to be ignored: the default cluster was reported)
out=$(scripts/cluster.sh status --name $NAME 2>&1); out2=$(scripts/cluster.sh status --name=zz$$ 2>&1)
if grep -q "^cluster $NAME: 2 nodes on 10.213.$S.0/24" <<<"$out" && [ "$out2" = "cluster zz$$: not up" ]; then
  ok "status --name $NAME (after the command): $(head -1 <<<"$out" | cut -c1-60)...; status --name=zz$$: '$out2'"
else bad "status with --name after the command: '$(head -1 <<<"$out")' / '$out2'"; fi
out=$(scripts/cluster.sh --name $NAME down --name zz$$ 2>&1); rc=$?
[ $rc = 1 ] && [ "$out" = "error: cluster.sh: --name $NAME before the command and --name zz$$ after it: give one" ] && [ -e /run/netns/$NAME-node0 ] &&
  ok "two different --name: one error line, nothing taken down" || bad "two --name (exit $rc): $out"
if out=$($CL up 3 2>&1); then bad "up 3 on a 2-node cluster should fail"; else
  case "$out" in "error: cluster.sh: up 3: cluster $NAME is already up with 2 nodes"*) ok "up with another K: one error line";; *) bad "up 3: '$out'";; esac; fi
# (a world-readable copy, run from /: the checkout may sit in root's home, which nobody cannot enter)
nr=$tmp/nonroot; mkdir -p "$nr" && cp scripts/cluster.sh "$nr/" && chmod 755 "$tmp" "$nr" && chmod 644 "$nr/cluster.sh"
if out=$(cd / && setpriv --reuid=65534 --regid=65534 --clear-groups bash "$nr/cluster.sh" --name $NAME up 2 2>&1); then bad "up as non-root should fail"
else [ "$out" = "error: cluster.sh: up: must run as root (network namespaces, links and tc need CAP_NET_ADMIN; try sudo)" ] \
  && ok "not root: one error line" || bad "not root: '$out'"; fi
# a crashed `up`: state recorded, one namespace made, the rest not
C2="scripts/cluster.sh --name llmccrash"
mkdir -p /run/llmc-cluster/llmccrash
printf 'netns llmccrash-node0\ndir /tmp/llmc-cluster-llmccrash\n' > /run/llmc-cluster/llmccrash/created
echo "subnet=253" > /run/llmc-cluster/llmccrash/state
ip netns add llmccrash-node0; mkdir -p /tmp/llmc-cluster-llmccrash
if $C2 up 1 >/dev/null 2>&1 && $C2 down >/dev/null 2>&1 && ! ip netns list | grep -q llmccrash \
   && [ ! -e /tmp/llmc-cluster-llmccrash ] && [ ! -e /run/llmc-cluster/llmccrash ] && ! grep -q "llmc-cluster llmccrash" /etc/hosts; then
  ok "after a crashed up: up cleans the remains, down removes everything"
else bad "crashed up not cleaned: $(ip netns list | grep llmccrash) $(ls -d /tmp/llmc-cluster-llmccrash /run/llmc-cluster/llmccrash 2>/dev/null)"; fi

# --- 2. 2 nodes x 2 ranks == 4 ranks on one node, bit for bit
counters() { $CL counters; }
node_in_min() { # counters before, after -> fewest bytes a node received
  paste <(echo "$1") <(echo "$2") | awk 'NR == 1 || $5 - $2 < m { m = $5 - $2 } END { print m }'
}
psi() { grep -o "Psi = [0-9]*" "$1" | head -1 | awk '{print $3}'; }
# on_one_node RUN NP trainer-args...: ./train_gpt_cpu on NP ranks of this
# machine, -o $tmp/RUN, output in $tmp/RUN.out (exit 0: ledger and traffic
# matched the plan)
on_one_node() {
  local run=$1 np=$2; shift 2
  if timeout 300 $MPIRUN -np "$np" ./train_gpt_cpu "$@" -o "$tmp/$run" > "$tmp/$run.out" 2>&1; then return 0; fi
  bad "$run: $np ranks on one node: exit $?"; tail -3 "$tmp/$run.out"; return 1
}
# on_cluster RUN K R trainer-args...: the same on K nodes x R ranks of the
# test cluster (VIA=multinode: launched by scripts/run_multinode.sh with the
# cluster's hostfile); LINK_IN_MIN: the fewest bytes a node received over
# its link during the run
on_cluster() {
  local run=$1 K=$2 R=$3; shift 3
  local c0 c1 rc how="scripts/cluster.sh run"
  c0=$(counters)
  if [ "${VIA:-}" = multinode ]; then
    how="scripts/run_multinode.sh with the cluster's hostfile"
    ( eval "$($CL env)"; HOSTFILE=$($CL hostfile) CPU=1 NODES=$K PER_NODE=$R \
      timeout 300 bash scripts/run_multinode.sh "$@" -o "$tmp/$run" ) > "$tmp/$run.out" 2>&1
  else
    timeout 300 $CL run -np $((K * R)) --map-by "ppr:$R:node" -x OMP_NUM_THREADS -- ./train_gpt_cpu "$@" -o "$tmp/$run" > "$tmp/$run.out" 2>&1
  fi
  rc=$?; c1=$(counters)
  LINK_IN_MIN=$(node_in_min "$c0" "$c1")
  if [ $rc = 0 ]; then ok "$run: $K nodes x $R ranks ($how): ledger and traffic match the plan"; return 0; fi
  bad "$run: $K nodes x $R ranks ($how): exit $rc"; tail -5 "$tmp/$run.out"; return 1
}
# same_run LABEL RUN_A RUN_B: train and val losses (main.log) and the final
# checkpoint bitwise equal
same_run() {
  local label=$1 d1=$tmp/$2 d2=$tmp/$3
  local l1 l2 ck; ck=$(printf 'model_%08d.bin' $STEPS)
  l1=$(awk '$3 == "train_loss" || $3 == "val_loss" { print $1, $2, $3, $4 }' "$d1/main.log")
  l2=$(awk '$3 == "train_loss" || $3 == "val_loss" { print $1, $2, $3, $4 }' "$d2/main.log")
  if [ -n "$l1" ] && [ "$l1" = "$l2" ] && [ "$(echo "$l1" | grep -c train_loss)" = $STEPS ] \
     && cmp -s "$d1/$ck" "$d2/$ck"; then
    ok "$label: $STEPS train losses, val losses and the checkpoint bitwise equal (last loss $(echo "$l1" | grep train_loss | tail -1 | awk '{print $4}'))"
  else
    bad "$label: runs differ"; diff <(echo "$l1") <(echo "$l2") | head -6
    cmp "$d1/$ck" "$d2/$ck" 2>&1 | head -2
  fi
}
placement_check() { # name out K R threads
  local name=$1 out=$2 K=$3 R=$4 th=$5
  local got want r
  got=$(awk '/^placement: /{p=1; next} p && /^ +rank +node/{next} p && /^ +[0-9]+ +[^ ]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ of +[0-9]+/{print $1, $2, $3, $4, $5; next} p{exit}' "$out")
  want=$(for ((r = 0; r < K * R; r++)); do echo "$r $NAME-node$((r / R)) $((r % R)) $R $th"; done)
  if [ -n "$got" ] && [ "$got" = "$want" ] && grep -q "^placement: $((K * R)) ranks on $K nodes$" "$out"; then
    ok "$name: placement: $((K * R)) ranks on $K nodes, local ranks 0..$((R - 1)) of $R on each, $th thread(s) per rank"
  else bad "$name: placement table"; echo "got:"; echo "$got"; echo "want:"; echo "$want"; fi
}

for z in 1 3; do
  via=""; [ $z = 3 ] && via=multinode
  on_one_node one_z$z 4 $COMMON -b 2 -z $z || continue
  VIA=$via on_cluster two_z$z 2 2 $COMMON -b 2 -z $z || continue
  same_run "z$z: 2 nodes x 2 ranks == 1 node x 4 ranks" one_z$z two_z$z
  placement_check "z$z" "$tmp/two_z$z.out" 2 2 1
  # every all-gather of the params brings the other node's half into a node: at least STEPS x Psi x 4 / 2 bytes
  p=$(psi "$tmp/two_z$z.out"); need=$((STEPS * p * 4 / 2))
  if [ -n "$p" ] && [ "$LINK_IN_MIN" -ge "$need" ]; then ok "z$z: each node received at least $LINK_IN_MIN bytes over its link (lower bound $need = steps x Psi x 4 B / 2)"
  else bad "z$z: a node received only $LINK_IN_MIN bytes over its link (expected >= $need): ranks did not talk across nodes?"; fi
done
# (more configurations: one line each, e.g. on_cluster RUN 2 2 $COMMON -b 2 -z 3 FLAGS && same_run LABEL two_z3 RUN)
# HSDP with one shard group per node: the same numbers as on one node, and less over the link than flat stage 3
flat_in=${LINK_IN_MIN:-0}
if on_one_node one_hsdp 4 $COMMON -b 2 -z 3 --shard-group 2 && on_cluster two_hsdp 2 2 $COMMON -b 2 -z 3 --shard-group 2; then
  same_run "HSDP z3 G=2: 2 nodes x 2 ranks == 1 node x 4 ranks" one_hsdp two_hsdp
  if [ "$flat_in" -gt 0 ] && [ "$LINK_IN_MIN" -lt "$flat_in" ]; then ok "HSDP z3 G=2: a node received $LINK_IN_MIN bytes over its link, less than flat stage 3's $flat_in"
  else bad "HSDP z3 G=2: a node received $LINK_IN_MIN bytes over its link, flat stage 3 $flat_in"; fi
fi

# --- 3. threads per rank by default (OMP_NUM_THREADS unset): node cpus / ranks on the node
threads_run() { # name cpumode R
  local name=$1 mode=$2 R=$3 out=$tmp/placement_$1.out
  $CL up 2 --cpus "$mode" >/dev/null
  local ncpu; ncpu=$($CL exec $NAME-node0 env -u OMP_NUM_THREADS nproc)
  local th=$((ncpu / R)); [ $th -lt 1 ] && th=1
  if env -u OMP_NUM_THREADS timeout 120 $CL run -np $((2 * R)) --map-by ppr:$R:node -- ./train_gpt_cpu $COMMON -b $((4 / R)) -x 1 -v 0 > "$out" 2>&1; then
    placement_check "$name (cpus $mode, $ncpu per node)" "$out" 2 "$R" "$th"
  else bad "$name: exit $?"; tail -3 "$out"; fi
}
threads_run "2x1" all 1
threads_run "2x2" all 2
nproc_host=$(ncpu)
$CL up 2 --cpus split >/dev/null
n0=$($CL exec $NAME-node0 env -u OMP_NUM_THREADS nproc); n1=$($CL exec $NAME-node1 env -u OMP_NUM_THREADS nproc)
if [ "$nproc_host" -ge 2 ]; then
  [ "$n0" = $((nproc_host / 2)) ] && [ "$n1" = $((nproc_host / 2)) ] && ok "cpus split: each node sees $n0 of $nproc_host cpus" \
    || bad "cpus split: nodes see $n0 and $n1 cpus (expected $((nproc_host / 2)) each)"
  threads_run "2x1 split" split 1
fi

# --- 4. launch scripts: syntax, generated command lines, flags the trainer accepts
for f in scripts/run_slurm.sbatch scripts/run_multinode.sh scripts/run_1node.sh scripts/cluster.sh; do
  bash -n "$f" && ok "bash -n $f" || bad "bash -n $f"
done
# the slurm script's -h prints its variables and starts nothing (no srun, no Slurm configuration needed)
if out=$(env -u SLURM_CONF PATH=/nonexistent:/usr/bin:/bin bash scripts/run_slurm.sbatch -h 2>&1) && grep -q "^values now: CPU=0 PRECISION=bf16 ZERO=3" <<<"$out" && ! grep -q srun: <<<"$out"; then
  ok "run_slurm.sbatch -h: its variables, no srun ($(grep '^values now' <<<"$out" | cut -c1-80)...)"
else bad "run_slurm.sbatch -h: $(tail -2 <<<"$out")"; fi
expect_cmd() { # name expected command...
  local name=$1 want=$2; shift 2
  local got; got=$("$@" 2>&1)
  [ "$got" = "$want" ] && ok "$name: $got" || { bad "$name"; echo "  got:  $got"; echo "  want: $want"; }
}
root=--allow-run-as-root
expect_cmd "slurm GPU command" "srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=none ./train_gpt -z 3 -b 8 -t 1024 -d 524288 -x 5000 -e d48 -o /shared/out" \
  env DRYRUN=1 bash scripts/run_slurm.sbatch -e d48 -o /shared/out
expect_cmd "slurm CPU command" "OMP_NUM_THREADS=16 srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores ./train_gpt_cpu_bf16 -z 1 -b 4 -t 64 -x 10 -e d2" \
  env DRYRUN=1 CPU=1 SLURM_CPUS_PER_TASK=16 ZERO=1 B=4 T=64 STEPS=10 bash scripts/run_slurm.sbatch -e d2
expect_cmd "slurm CPU fp32 command" "OMP_NUM_THREADS=1 srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores ./train_gpt_cpu -z 3 -b 8 -t 128 -x 5000" \
  env DRYRUN=1 CPU=1 PRECISION=fp32 SLURM_CPUS_PER_TASK=1 bash scripts/run_slurm.sbatch
faults="--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 5 --mca odls_base_sigkill_timeout 10"
expect_cmd "multinode GPU command" "bash scripts/mpirun_fg.sh mpirun $root -np 16 --hostfile hosts.txt --map-by ppr:8:node --bind-to none $faults -x NCCL_DEBUG -x LD_LIBRARY_PATH -x PATH -x LLMC_GPU_TIMEOUT=900 ./train_gpt -z 3 -b 8 -t 1024 -d 524288 -x 5000 -e d48" \
  env -u NCCL_SOCKET_IFNAME -u NCCL_IB_HCA DRYRUN=1 HOSTFILE=hosts.txt bash scripts/run_multinode.sh -e d48
expect_cmd "multinode CPU command" "bash scripts/mpirun_fg.sh mpirun $root -np 4 --hostfile hosts.txt --map-by ppr:2:node --bind-to none $faults -x OMP_NUM_THREADS ./train_gpt_cpu -z 2 -b 8 -t 128 -x 500 -e d4" \
  env DRYRUN=1 HOSTFILE=hosts.txt CPU=1 NODES=2 PER_NODE=2 ZERO=2 OMP_NUM_THREADS=1 bash scripts/run_multinode.sh -e d4
# ELASTIC=1 with --shard-group: the kill delay leaves the survivors 20 s after the collective timeout for their checkpoint
expect_cmd "multinode elastic HSDP command (kill delay (60 + 20) / 2 s)" "bash scripts/mpirun_fg.sh mpirun $root --bind-to none ${faults% 10} 40 -x OMP_NUM_THREADS -np 4 --hostfile ${TMPDIR:-/tmp}/llmc-elastic.XXXXXX.hosts --map-by ppr:2:node ./train_gpt_cpu -z 3 -b 8 -t 128 -d 4096 -x 500 -e d4 --shard-group 2 -o out" \
  env DRYRUN=1 HOSTFILE=hosts.txt CPU=1 NODES=2 PER_NODE=2 ZERO=3 ELASTIC=1 OMP_NUM_THREADS=1 bash scripts/run_multinode.sh -e d4 --shard-group 2 -o out
expect_cmd "1-node CPU command" "bash scripts/mpirun_fg.sh mpirun $root --mca odls_base_sigkill_timeout 10 -np 2 --oversubscribe --bind-to none ./train_gpt_cpu -z 1 -b 8 -t 128 -x 500" \
  env DRYRUN=1 CPU=1 bash scripts/run_1node.sh
# the trainer parses the flags the slurm script generates (--estimate: no data, no run)
gen=$(DRYRUN=1 CPU=1 SLURM_CPUS_PER_TASK=1 bash scripts/run_slurm.sbatch -e d2 | sed 's/.*\.\/train_gpt_cpu_bf16 //')
if out=$(./train_gpt_cpu_bf16 $gen --estimate 2>&1) && echo "$out" | grep -q "^ZeRO estimate"; then ok "the trainer accepts the generated flags: $gen"
else bad "the trainer rejects the generated flags '$gen': $out"; fi

# --- 5. down removes everything
$CL down >/dev/null
left=$(ip netns list | grep "^$NAME-"; ip -o link show | grep -oE "lz${S}(br|n[0-9]+|p[0-9]+)\b"; ls -d /tmp/llmc-cluster-$NAME /run/llmc-cluster/$NAME 2>/dev/null)
# /run/netns: a mount point after down only if it was one before (ip netns add makes it one)
netns_mount_after=$(mountpoint -q /run/netns 2>/dev/null && echo mounted || echo not-mounted)
[ -z "$(ls -A /run/netns 2>/dev/null)" ] && [ "$netns_mount_after" != "$netns_mount_before" ] && left="$left /run/netns $netns_mount_after (was $netns_mount_before)"
if [ -z "$left" ] && [ "$(grep -v "# llmc-cluster " /etc/hosts)" = "$hosts_before" ] && ! grep -q "# llmc-cluster $NAME$" /etc/hosts; then
  ok "down: no namespace, link, /etc/hosts line, temp dir or /run/netns mount of the cluster left"
else bad "down left: $left $(grep "# llmc-cluster $NAME$" /etc/hosts)"; fi

summary
