#!/usr/bin/env bash
# tests/cuda_mutations.sh: proof that the emulated CUDA device's checks can
# fail (issue 47 item 7). Each mutation is applied with sed to a COPY of the
# sources (a temp directory: llmc/, tests/cuda_emu/, the .cu files), that
# copy is compiled with the emulator (g++ -O0 -g1, the flags of `make emu`; the
# ASan flags of `make emu-asan` where the mutation is an out-of-bounds
# access), run on the tiny PyTorch reference (data/ref/tiny_*), and must
# FAIL. A failure counts as "detected, named" when the output names the
# mutated kernel or call (the regex per mutation below), as "detected,
# unnamed" when the run fails only through a wrong number (a reference check
# or a NaN loss), and as "NOT DETECTED" when the run passes.
#   bash tests/cuda_mutations.sh            every mutation; one line each
#   MUTATIONS="shfl nccl" bash ...          only those
# Sourced by tests/suites/cuda_emu.sh (it calls mutations_run) or run alone.
# Every run prints the seed (LLMC_EMU_SEED) of its random delays and orders;
# LLMC_EMU_SEED=<seed> reruns one exactly.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -n "${MPIRUN:-}" ] || . tests/lib.sh

# name | file | sed script | program (test|asan) | ranks | extra args | regex naming the kernel/call
MUTATION_TABLE='
sync|llmc/cuda/common.cuh|/double block_sum_d/,/^}/{/sh\[warp\] = v/{n;s/__syncthreads();//}}|test|2|-z 0|shared-memory race.*(block_sum_d|sum_squares|sum_partials|classifier_chunk_stats)
wait|llmc/cuda/comm_nccl.cuh|/^static inline void backend_wait_comm/,/^}/s/cudaCheck(cudaStreamWaitEvent(cuda_ctx.stream[^;]*;//|test|2|-z 3|race between streams: .*nccl(AllGather|ReduceScatter|AllReduce).*cudaStreamWaitEvent
bounds|llmc/cuda/fused_classifier.cuh|/^__global__ void classifier_stats_init_kernel/,/^}/s/if (n < N)/if (n <= N)/|asan|1|-z 0|classifier_stats_init_kernel
shfl|llmc/cuda/common.cuh|/float warp_sum(float v)/,/^}/s/0xffffffffu/0x7fffffffu/|test|1|-z 0|warp_sum|__shfl_xor_sync|0x7fffffff
nccl|llmc/cuda/comm_nccl.cuh|s/ncclCheck(ncclAllGather(/if (c->group_rank != 1) ncclCheck(ncclAllGather(/|test|2|-z 3|ncclAllGather
uninit|llmc/gpt.h|s/^\(    \)classifier_stats_init(m->lm_max/\1if (0) classifier_stats_init(m->lm_max/|test|1|-z 0|classifier_chunk_stats_kernel.*before anything wrote it
'

mutation_copy() { # dir: the sources the emulated programs compile from
  mkdir -p "$1"
  tar cf - llmc tests/cuda_emu train_gpt.cu test_gpt.cu | tar xf - -C "$1"
  ln -s "$PWD/data" "$1/data"
}

mutation_build() { # dir kind(test|asan) out
  local flags
  flags="-std=c++17 -O0 -g1 -x c++ -DLLMC_CUDA=1 -DLLMC_CUDA_EMU=1 -DOMPI_SKIP_MPICXX -Itests/cuda_emu -I. -w -pthread"
  if [ "$2" = asan ]; then flags="$flags -fsanitize=address,alignment -fno-sanitize-recover=all -fno-omit-frame-pointer"
  else # the load/store hooks of tests/cuda_emu/emu_race.h (EMU_ACCESS_FLAGS of emu.mk)
    flags="$flags -DLLMC_EMU_ACCESS=1 -fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 --param asan-stack=0 --param asan-globals=0"
  fi
  (cd "$1" && g++ $flags $(mpicc -showme:compile) test_gpt.cu -o "$3" $(mpicc -showme:link) -lboost_context -pthread)
}

# mutations_run [names...]: runs each; ok/bad per mutation (tests/lib.sh).
# The mutated copies are compiled two at a time (xargs -P 2), then run one
# after another; LLMC_GPU_TIMEOUT=10 bounds a hang (a skipped collective).
mutations_run() {
  local want="${*:-sync wait bounds shfl nccl uninit}" base line name file script kind np args re t0 out rc dir verdict msg
  local seed=${LLMC_EMU_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000007 ))}
  base=$(mktemp -d)
  echo "mutations: LLMC_EMU_SEED=$seed (every run's random delays and resume orders; set it to rerun)"
  t0=$(date +%s)
  : > "$base/list"
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    IFS='|' read -r name file script kind np args re <<< "$line"
    case " $want " in *" $name "*) ;; *) continue ;; esac
    dir="$base/$name"; mutation_copy "$dir"
    sed -i "$script" "$dir/$file"
    if cmp -s "$file" "$dir/$file"; then
      bad "mutation $name: the sed script did not change $file (the source moved; update tests/cuda_mutations.sh)"
      continue
    fi
    echo "$name $kind" >> "$base/list"
  done <<< "$MUTATION_TABLE"
  export -f mutation_build
  xargs -P 2 -L 1 bash -c 'mutation_build "$0/$1" "$2" "$0/$1/prog" > "$0/$1/build.log" 2>&1' "$base" < "$base/list"
  echo "mutations: $(wc -l < "$base/list") mutated copies compiled in $(( $(date +%s) - t0 )) s"
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    IFS='|' read -r name file script kind np args re <<< "$line"
    grep -q "^$name " "$base/list" || continue
    dir="$base/$name"; t0=$(date +%s)
    if [ ! -x "$dir/prog" ]; then
      bad "mutation $name: the mutated copy does not compile"; tail -5 "$dir/build.log"; continue
    fi
    out="$dir/run.log"
    # LLMC_POISON_ACTIVATIONS=1: activations start as 0xFF, not the ledger's zeros, so a
    # kernel reading one before the forward wrote it is named (llmc/zero/ledger.h, emu_race.h)
    (cd "$dir" && ASAN_OPTIONS=detect_leaks=0 LLMC_EMU_SEED=$seed LLMC_GPU_TIMEOUT=10 LLMC_POISON_ACTIVATIONS=1 timeout 120 $MPIRUN -x ASAN_OPTIONS \
        -x LLMC_EMU_SEED -x LLMC_GPU_TIMEOUT -x LLMC_POISON_ACTIVATIONS -np "$np" ./prog -e data/ref/tiny_model.bin -s data/ref/tiny_debug_state.bin $args) \
        > "$out" 2>&1 < /dev/null
    rc=$?
    msg=$(grep -E -m1 "$re" "$out" || grep -E -m1 "cuda emu|ERROR: AddressSanitizer|FAIL|error" "$out")
    msg=$(echo "$msg" | cut -c1-260)
    if [ $rc -eq 0 ] && grep -q " 0 failed" "$out"; then verdict="NOT DETECTED"
    elif grep -E -q "$re" "$out"; then verdict="detected, named"
    else verdict="detected, unnamed"; fi
    case "$verdict" in
      "detected, named") ok "mutation $name ($file): detected, the message names it: $msg" ;;
      "detected, unnamed") bad "mutation $name ($file): the run fails (rc $rc) but no message names the kernel/call ($re): $msg" ;;
      *) bad "mutation $name ($file): NOT DETECTED: the mutated run passes ($(tail -1 "$out"))" ;;
    esac
    [ "$verdict" = "detected, named" ] || { echo "  LLMC_EMU_SEED=$seed; output: /tmp/cuda_mutation_$name.log"; cp "$out" "/tmp/cuda_mutation_$name.log" 2>/dev/null; }
  done <<< "$MUTATION_TABLE"
  rm -rf "$base"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  export OMP_NUM_THREADS=1
  mutations_run ${MUTATIONS:-}
  summary
fi
