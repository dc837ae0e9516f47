#!/usr/bin/env bash
# Placements on the simulated Slurm cluster (scripts/cluster.sh up 2 --slurm:
# 2 nodes x 2 tasks), the fp32 CPU program, ZeRO++ at -z 3 (--quantize-weights
# int8 --quantize-grads int4 --secondary-shard node), B=2 T=64, 3 steps. The
# node groups (hpZ's secondary groups, qgZ's two hops, HSDP's shard groups)
# come from the node each rank is on (llmc/comm.h: comm_group_members,
# comm_group_node_layout), whatever order the launcher made:
#  1. block: srun --distribution=block and sbatch run_slurm.sbatch write the
#     checkpoint of mpirun --map-by ppr:2:node, bit for bit (the same
#     program and OpenMP threads: runs.txt records both);
#  2. cyclic (srun --distribution=cyclic, --distribution=plane=1, mpirun
#     --map-by node: ranks 0,2 on node 0 and 1,3 on node 1): taken, the
#     start-up line names the ranks of each node; the three are bitwise
#     equal (the same node sets); hpZ + qwZ without qgZ equal the block run
#     bit for bit (hpZ's secondary groups {0,2}, {1,3} only copy); with qgZ
#     the node partial sums are over {0,2} and {1,3}, not {0,1} and {2,3}:
#     not the block run's bits (docs/zeropp.md);
#  3. uneven (3 ranks on node 0, 1 on node 1): --secondary-shard node is
#     refused, one line naming the ranks of each node; qgZ alone runs one
#     hop with a warning naming them;
#  4. HSDP --shard-group 2 under cyclic: the shard groups are the nodes
#     (ranks 0,2 and 1,3), srun == mpirun --map-by node bitwise;
#  5. the straggler report names each rank's own node under cyclic.
# Needs root and Slurm (make deps). PLACEMENT_CLUSTER names the cluster.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
cannot_run() {
  if [ "${CI:-}" = true ]; then bad "placement: $1"; else skip "placement: skipped ($1)"; fi
  summary; exit
}
[ "$(id -u)" = 0 ] || cannot_run "needs root: network namespaces"
unshare --net --uts --mount true 2>/dev/null || cannot_run "needs network, UTS and mount namespaces"
command -v slurmctld >/dev/null && command -v munged >/dev/null || cannot_run "needs slurmctld, slurmd, slurm-client, munge (make deps)"
make -s train_gpt_cpu >/dev/null 2>&1 || { bad "make train_gpt_cpu"; summary; exit 1; }
NAME=${PLACEMENT_CLUSTER:-llmcplace}
CL="scripts/cluster.sh --name $NAME"
N0=$NAME-node0; N1=$NAME-node1
export OMP_NUM_THREADS=1
tmp=$(mktemp -d -p /var/tmp llmc-placement-test.XXXXXX)
cleanup() { $CL down >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM
if out=$(timeout 60 $CL up 2 --slurm 2>&1); then ok "up 2 --slurm: $out"; else bad "up 2 --slurm: $out"; summary; exit 1; fi
eval "$($CL env)"

D=(-e d2 -i "data/brown/brown_train_*.bin" -v 0 -s 0 -b 2 -t 64 -x 3)
ZPP=(-z 3 --quantize-weights int8 --quantize-grads int4 --secondary-shard node)
ck() { echo "$tmp/$1/model_00000003.bin"; }
same() { cmp -s "$(ck "$1")" "$(ck "$2")" && cmp -s "$tmp/$1/state_00000003.bin" "$tmp/$2/state_00000003.bin"; }
mpi() { # name, mpirun placement args (a string), then trainer args
  local n=$1 m=$2; shift 2
  timeout 180 $CL run -np 4 $m -- ./train_gpt_cpu "${D[@]}" "$@" -o "$tmp/$n" > "$tmp/$n.out" 2>&1
}
sr() { # name, --distribution, then trainer args
  local n=$1 d=$2; shift 2
  timeout 180 srun --mpi=pmix -N 2 --ntasks-per-node=2 --cpus-per-task=1 --distribution="$d" ./train_gpt_cpu "${D[@]}" "$@" -o "$tmp/$n" > "$tmp/$n.out" 2>&1
}
ran() { # name rc: the run wrote its checkpoint
  if [ "$2" = 0 ] && [ -s "$(ck "$1")" ]; then return 0; fi
  bad "$1: exit $2, no checkpoint: $(grep -m1 '^error' "$tmp/$1.out")"; return 1
}
nodes_line() { grep -m1 "^ZeRO++ nodes: " "$tmp/$1.out"; }
CYC="$N0: ranks 0,2; $N1: ranks 1,3"
BLK="$N0: ranks 0,1; $N1: ranks 2,3"

# --- 1. block: mpirun (the reference), srun, sbatch
mpi ref "--map-by ppr:2:node" "${ZPP[@]}"; ran ref $? && case "$(nodes_line ref)" in "ZeRO++ nodes: $BLK "*) ok "mpirun block: $(nodes_line ref)";; *) bad "mpirun block: '$(nodes_line ref)'";; esac
sr blk block "${ZPP[@]}"; ran blk $? && { same blk ref && ok "srun --distribution=block: checkpoint and state bitwise those of mpirun block" || bad "srun block differs from mpirun block"; }
jid=$(timeout 20 sbatch --parsable --chdir="$(pwd)" --output="$tmp/sb.out" --nodes=2 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 \
  --export="ALL,CPU=1,PRECISION=fp32,ZERO=3,B=2,T=64,STEPS=3" scripts/run_slurm.sbatch "${D[@]}" "${ZPP[@]}" -o "$tmp/sb")
st=""
for i in $(seq 1 900); do
  st=$(scontrol show job "$jid" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case "$st" in PENDING|RUNNING|COMPLETING|CONFIGURING|"") sleep 0.2 ;; *) break ;; esac
done
if [ "$st" = COMPLETED ] && [ -s "$(ck sb)" ] && same sb ref; then
  ok "sbatch run_slurm.sbatch (block, PRECISION=fp32, --cpus-per-task=1): checkpoint and state bitwise those of mpirun block"
else bad "sbatch: job $jid $st, checkpoint missing or not that of mpirun block"; tail -3 "$tmp/sb.out"; fi
# what the numbers depend on is visible: the program and every rank's threads, in runs.txt and the job's output
if grep -q "matmul fp32 threads 1,1,1,1" "$tmp/sb/runs.txt" 2>/dev/null && grep -q "matmul fp32 threads 1,1,1,1" "$tmp/ref/runs.txt" 2>/dev/null \
   && grep -q "^run_slurm.sbatch: ./train_gpt_cpu (PRECISION=fp32), OMP_NUM_THREADS=1 per task" "$tmp/sb.out"; then
  ok "runs.txt of both records the program's matmul and the threads of every rank (threads 1,1,1,1); the job's output names the program"
else bad "runs.txt / job output: '$(cat "$tmp/sb/runs.txt" 2>/dev/null)' '$(grep -m1 '^run_slurm' "$tmp/sb.out")'"; fi

# --- 2. cyclic: srun cyclic, srun plane=1, mpirun --map-by node
sr cyc cyclic "${ZPP[@]}" --straggler-report 1; rc=$?
if ran cyc $rc; then
  case "$(nodes_line cyc)" in "ZeRO++ nodes: $CYC (of rank 0's shard group, from the hosts' names: hpZ's secondary groups, qgZ's first hop)") ok "srun --distribution=cyclic taken: $(nodes_line cyc)";;
    *) bad "srun cyclic: '$(nodes_line cyc)'";; esac
  # 5. the straggler report's node names are each rank's own
  if grep -qE "^ +1 +$N1 " "$tmp/cyc.out" && grep -qE "^ +2 +$N0 " "$tmp/cyc.out" && [ "$(grep -cE "^ +[0-3] +$NAME-node[01] +[0-9.]+ +[0-9.]+ +[0-9.]+ +[-0-9.]+ +[-0-9.]+$" "$tmp/cyc.out")" = 4 ]; then
    ok "straggler report under cyclic: rank 1 on $N1, rank 2 on $N0"
  else bad "straggler report under cyclic: $(grep -A5 '^straggler report' "$tmp/cyc.out")"; fi
fi
sr pln plane=1 "${ZPP[@]}"; ran pln $? && case "$(nodes_line pln)" in "ZeRO++ nodes: $CYC "*) same pln cyc && ok "srun --distribution=plane=1 ($CYC): bitwise srun cyclic" || bad "plane=1 differs from cyclic";;
  *) bad "plane=1: '$(nodes_line pln)'";; esac
mpi mnd "--map-by node" "${ZPP[@]}"; ran mnd $? && case "$(nodes_line mnd)" in "ZeRO++ nodes: $CYC "*) same mnd cyc && ok "mpirun --map-by node ($CYC): bitwise srun cyclic" || bad "mpirun --map-by node differs from srun cyclic";;
  *) bad "mpirun --map-by node: '$(nodes_line mnd)'";; esac
if [ -s "$(ck cyc)" ] && [ -s "$(ck ref)" ]; then
  same cyc ref && bad "cyclic with qgZ equals block: its node sums cannot be over {0,2}, {1,3}" \
    || ok "cyclic with qgZ is not the block run's bits (node partials over {0,2}, {1,3} against {0,1}, {2,3}: docs/zeropp.md)"
fi
# hpZ + qwZ without qgZ: the secondary groups are the nodes {0,2}, {1,3}: the block run's bits
mpi ref_w "--map-by ppr:2:node" -z 3 --quantize-weights int8 --secondary-shard node; r1=$?
sr cyc_w cyclic -z 3 --quantize-weights int8 --secondary-shard node; r2=$?
if ran ref_w $r1 && ran cyc_w $r2; then
  case "$(nodes_line cyc_w)" in "ZeRO++ nodes: $CYC (of rank 0's shard group, from the hosts' names: hpZ's secondary groups)") same cyc_w ref_w \
    && ok "hpZ + qwZ: srun cyclic (secondary groups $CYC) bitwise mpirun block ($BLK)" || bad "hpZ + qwZ: cyclic differs from block";;
    *) bad "hpZ + qwZ cyclic: '$(nodes_line cyc_w)'";; esac
fi

# --- 3. uneven: 3 ranks on node 0, 1 on node 1
mpi unv "--host $N0:3,$N1:1" "${ZPP[@]}"; rc=$?
n=$(grep -c "^error" "$tmp/unv.out")
want="error: --secondary-shard node: the nodes hold unequal numbers of the shard group's ranks ($N0: ranks 0,1,2; $N1: rank 3);"
if [ $rc != 0 ] && [ "$n" = 1 ] && grep -qF "$want" "$tmp/unv.out" && [ ! -e "$(ck unv)" ]; then ok "uneven (3 + 1): refused, exit $rc: $(grep '^error' "$tmp/unv.out")"
else bad "uneven: exit $rc, $n error lines: $(grep '^error' "$tmp/unv.out")"; fi

# qgZ alone on them: one hop over the whole group, said in one warning naming the nodes
mpi unq "--host $N0:3,$N1:1" -z 3 --quantize-grads int4; rc=$?
want="warning: --quantize-grads: the nodes hold unequal numbers of the shard group's ranks ($N0: ranks 0,1,2; $N1: rank 3): its reduce-scatter runs as one hop"
if ran unq $rc && grep -qF "$want" "$tmp/unq.out" && grep -qE "^ +reduce-scatter nodes \(qgZ\) +[1-9][0-9]* " "$tmp/unq.out" && grep -qE "^ +reduce-scatter node \(qgZ\) +0 +0 " "$tmp/unq.out"; then
  ok "uneven, qgZ alone: one hop across (the traffic table: 0 calls of the node hop, $(grep -E '^ +reduce-scatter nodes \(qgZ\)' "$tmp/unq.out" | awk '{print $4}') of the hop across), with the warning naming each node's ranks"
else bad "uneven, qgZ alone: $(grep -m1 'quantize-grads' "$tmp/unq.out"); $(grep -E 'reduce-scatter nodes? \(qgZ\)' "$tmp/unq.out" | tr -s ' ')"; fi

# --- 4. HSDP --shard-group 2 under cyclic: the shard groups are the nodes
sr hcy cyclic -z 3 --shard-group 2; r1=$?
mpi hmn "--map-by node" -z 3 --shard-group 2; r2=$?
if ran hcy $r1 && ran hmn $r2; then
  if grep -q "^HSDP: 2 shard groups of 2 ranks (ranks 0,2; ranks 1,3)" "$tmp/hcy.out" && same hcy hmn; then
    ok "HSDP --shard-group 2, srun cyclic: $(grep -m1 '^HSDP' "$tmp/hcy.out" | cut -d: -f2 | cut -d'(' -f1-2 | sed 's/).*/)/'); bitwise mpirun --map-by node"
  else bad "HSDP cyclic: '$(grep -m1 '^HSDP' "$tmp/hcy.out")', srun and mpirun $(same hcy hmn && echo equal || echo differ)"; fi
fi

$CL down >/dev/null 2>&1
summary
