#!/usr/bin/env bash
# gpu_check.sh: the prepared check of the CUDA build on a machine with ONE GPU
# that may have nothing of the project's (e.g. an H200 with nvcc 13, cuBLAS,
# PyTorch in `python3`, NCCL only as the nvidia-nccl-cu13 wheel, no MPI, no
# network). One command, one time budget:
#
#   bash scripts/gpu_prepare.sh                 on a prepared machine, once: build/gpu-carry/
#                                               (Open MPI .debs, data, references)
#   bash scripts/gpu_check.sh                   on the GPU machine, in a copy of the working
#                                               tree with build/gpu-carry beside it
#   GPU_CHECK_DRY_RUN=1 bash scripts/gpu_check.sh    without a GPU: the same path (see below)
#
# Stages (each reports PASS / FAIL / SKIP with its time; a failure never stops
# the next stage; the table at the end lists them all):
#   machine      nvidia-smi, nvcc, python3 (+ torch), cores
#   cublas       the toolkit's cuBLAS, else links to the pip wheel's (CUDA_CUBLAS_HOME)
#   kernel build dev/cuda kernel checks (no MPI, no NCCL), sm_90 + compute_90 PTX only
#   kernel <k>   each dev/cuda check against its CPU reference (needs the GPU)
#   mpi unpack   build/gpu-carry/debs unpacked with `dpkg -x` into a private
#                prefix (never /): PATH, LD_LIBRARY_PATH, OPAL_PREFIX set only
#                for the MPI build and runs; mpicc -showme must work
#   nccl         headers and libnccl.so.2 from the python3 wheel (nvidia.nccl),
#                else the CUDA toolkit
#   build        ./train_gpt ./test_gpt dev/cuda/test_backend with the carried
#                MPI; if that fails (or there is no MPI), with the single-rank
#                stand-in (CUDA_MPICC=false): everything below then runs 1 rank
#   mpi run      mpirun -np 2 of the CUDA binary's MPI start-up (--estimate)
#   references   dev/reference.py with that machine's python3, in the background
#                from the start: small (90 MB, cannot travel) and odd/tiny,
#                compared bitwise with the carried copies made here
#   test_backend the backend's collectives, fence ring and uploads: 1 rank
#                with NCCL, 2 and 4 ranks host-staged (LLMC_COLLECTIVES=host)
#   test_gpt     ZeRO stages 0-3 against the PyTorch reference, N ranks on the
#                one GPU: N = 1 with NCCL and N = 1, 2, 4 host-staged (configs
#                odd and small; tiny at N = 1 and 4), stage 3 with
#                --reshard-after-forward 0 --accum 2, with --prefetch 2, and
#                HSDP (--shard-group 2 of 4 ranks: the replica all-reduce)
#   gpt2-124m    GPT-2 124M (-e d12, T=1024, B=$B): a short calibration, then
#                TRAIN_SECONDS of training: tokens/s, MFU, peak device memory,
#                beside llm.c's published figure (run after the odd config's
#                tests, before the rest, so that the budget keeps it)
# Budget: GPU_CHECK_BUDGET seconds in all (default 450, so that the whole
# check, with a machine's start-up, fits in 10 minutes); the kernel checks
# get at most KERNEL_SECONDS (150) of it; a stage that would not fit is
# SKIPped. Output: everything on stdout; with $OUT set (a directory) also
# $OUT/gpu_check.log, $OUT/gpu_check_summary.txt and $OUT/train_d12.log.
# Env: B (micro-batch of the timed run, default 32), TRAIN_SECONDS (45),
# JOBS (make -j, default nproc), GPU_CARRY (build/gpu-carry), CUDA_ARCH.
#
# Dry run (GPU_CHECK_DRY_RUN=1, what `make test` runs as tests/suites/gpu_dry_run.sh):
# the working tree (tracked + untracked files, no data/ link) and the carry are
# copied to a fresh temp dir and the check runs there in a private mount
# namespace (unshare -m) where every file of the carried Debian packages
# installed on THIS machine (mpicc, mpirun, libmpi, their libraries), ssh,
# and the CUDA toolkit's NCCL and cuBLAS are hidden; `python3` is
# /usr/bin/python3 with stand-in nvidia/nccl and nvidia/cu13 wheels (the
# toolkit's headers and versioned libraries, no unversioned .so) on
# PYTHONPATH. So the unpack, the builds, the NCCL and cuBLAS discovery, mpirun
# and the reference generation run as on the GPU machine, and every stage
# that needs the GPU says so and is skipped, except the test_gpt stages on
# the tiny reference: those run on the CPU-emulated device (./test_gpt_emu,
# made before the namespace; docs/gpu.md) and are counted as "emulated"
# (EMUL), never as passed (GPU_CHECK_EMU=0 skips them). Without unshare the dry run
# still runs, unisolated, and says so. (Debian's torch here links libibverbs,
# libnuma, ...: those packages stay visible; the closure stage checks them.)
# Exit status: 0 if no stage failed.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DRY=${GPU_CHECK_DRY_RUN:-0}
CARRY=${GPU_CARRY:-build/gpu-carry}
[ "${CARRY#/}" = "$CARRY" ] && CARRY="$ROOT/$CARRY"

# ============================================================== dry run: outer
# sets up the isolated copy and re-runs this script inside it
dry_run_outer() {
  echo "gpu_check dry run: no GPU is used; the stages that need one are skipped"
  if [ ! -f "$CARRY/debs/packages.txt" ]; then
    echo "error: $CARRY/debs missing: run scripts/gpu_prepare.sh first"; return 1
  fi
  DRY_DIR=$(mktemp -d /tmp/gpu_dry.XXXXXX)
  trap 'rm -rf "$DRY_DIR"' EXIT
  local D=$DRY_DIR
  mkdir -p "$D/tree" "$D/bin" "$D/site/nvidia/nccl/include" "$D/site/nvidia/nccl/lib"
  # what a copy of the working tree holds: tracked and untracked-not-ignored files (a
  # symbolic link such as data/ travels as a link that points nowhere there)
  { git ls-files -z; git ls-files -z --others --exclude-standard; } | \
    (cd "$ROOT" && tar --null --no-recursion -T - -cf -) 2>/dev/null | tar -xf - -C "$D/tree"
  rm -f "$D/tree/data"
  mkdir -p "$D/tree/build"
  cp -r "$CARRY" "$D/tree/build/gpu-carry"
  # the emulated device's programs (make emu; tests/cuda_emu), built here with
  # this machine's MPI before it is hidden: the GPU stages they can run
  # (test_gpt on the tiny reference) run on them inside and are counted as
  # "emulated", never as passed on a GPU. GPU_CHECK_EMU=0: no emulation.
  if [ "${GPU_CHECK_EMU:-1}" = 1 ]; then
    mkdir -p "$D/tree/build/emu-bins"
    if (cd "$ROOT" && make -q train_gpt_emu test_gpt_emu 2>/dev/null); then
      cp "$ROOT/train_gpt_emu" "$ROOT/test_gpt_emu" "$D/tree/build/emu-bins/"
    elif (cd "$D/tree" && nice make -s train_gpt_emu test_gpt_emu) > "$D/emu_build.log" 2>&1; then
      cp "$D/tree/train_gpt_emu" "$D/tree/test_gpt_emu" "$D/tree/build/emu-bins/"
    else
      echo "note: make train_gpt_emu test_gpt_emu failed here: the GPU stages are skipped, not emulated"; tail -5 "$D/emu_build.log"
    fi
  fi
  # python3 = the one with torch; a stand-in for the nvidia-nccl wheel
  ln -s /usr/bin/python3 "$D/bin/python3"
  local cuda_home=/usr/local/cuda nvcc_path
  nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x /usr/local/cuda/bin/nvcc ] || cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")
  local nccl_h nccl_so
  nccl_h=$(readlink -f "$cuda_home/include/nccl.h" 2>/dev/null)
  nccl_so=$(readlink -f "$cuda_home/lib64/libnccl.so.2" 2>/dev/null)
  if [ -f "$nccl_h" ] && [ -f "$nccl_so" ]; then
    cp "$(dirname "$nccl_h")"/nccl*.h "$D/site/nvidia/nccl/include/"
    touch "$D/site/nvidia/nccl/lib/libnccl.so.2"
  else
    echo "note: no NCCL in the CUDA toolkit here: the stand-in wheel is empty"
    nccl_so=""
  fi
  # a stand-in for the cuBLAS wheel too (nvidia/cu13: headers and versioned
  # libraries only), the toolkit's cuBLAS hidden: the GPU image may hold
  # cuBLAS only as a wheel
  mkdir -p "$D/site/nvidia/cu13/include" "$D/site/nvidia/cu13/lib"
  local blas_binds="" f
  cp "$cuda_home"/include/cublas*.h "$D/site/nvidia/cu13/include/" 2>/dev/null
  for f in "$cuda_home"/lib64/libcublas.so.* "$cuda_home"/lib64/libcublasLt.so.*; do
    [ -e "$f" ] || continue
    touch "$D/site/nvidia/cu13/lib/$(basename "$f")"
    blas_binds="$blas_binds $(readlink -f "$f")=$D/site/nvidia/cu13/lib/$(basename "$f")"
  done
  # files to hide: the carried packages as installed here, ssh, the toolkit's
  # NCCL. Not hidden: packages whose libraries this machine's torch loads
  # (Debian's torch links libibverbs, libnuma, ...: the GPU machine's pip
  # torch does not need them from the system); that the carry holds every
  # library Open MPI loads is checked by the closure stage instead.
  local torchlibs keep="" hide="$D/hide.txt" p l
  torchlibs=$(ldd $(/usr/bin/python3 -c 'import torch, glob, os; print(" ".join(glob.glob(os.path.join(os.path.dirname(torch.__file__), "_C*.so"))))' 2>/dev/null) 2>/dev/null | awk '/=>/ {print $1}' | sort -u)
  : > "$hide"
  for p in $(awk '{print $1}' "$CARRY/debs/packages.txt") libhwloc-plugins openssh-client; do
    for l in $(dpkg -L "$p" 2>/dev/null | grep '\.so' | xargs -r -n1 basename); do
      if echo "$torchlibs" | grep -q -x -F "$l"; then keep="$keep $p"; continue 2; fi
    done
    dpkg -L "$p" 2>/dev/null | grep -v -E '^/usr/share/(doc|man|lintian)/' >> "$hide" || true
  done
  [ -n "$keep" ] && echo "not hidden (this machine's torch loads them):$keep"
  ls "$cuda_home"/lib64/libnccl* "$cuda_home"/include/nccl*.h 2>/dev/null >> "$hide"
  ls "$cuda_home"/lib64/libcublas* "$cuda_home"/include/cublas*.h 2>/dev/null >> "$hide"
  cat > "$D/inner.sh" <<EOF
set -u
if [ -n "$nccl_so" ]; then mount --bind "$nccl_so" "$D/site/nvidia/nccl/lib/libnccl.so.2" || exit 97; fi
for b in $blas_binds; do mount --bind "\${b%%=*}" "\${b#*=}" || exit 97; done
n=0
while read -r f; do
  f=\$(readlink -f "\$f" 2>/dev/null) || continue
  if [ -f "\$f" ] && [ ! -c "\$f" ]; then mount --bind /dev/null "\$f" 2>/dev/null && n=\$((n+1)); fi
done < "$hide"
echo "dry run: hid \$n files of this machine's Open MPI, its libraries, ssh and the toolkit's NCCL and cuBLAS (private mount namespace)"
export GPU_CHECK_ISOLATED=1
cd "$D/tree" && exec bash scripts/gpu_check.sh
EOF
  export GPU_CHECK_INSIDE=1 GPU_CHECK_DRY_RUN=1 PATH="$D/bin:$PATH" PYTHONPATH="$D/site" GPU_CARRY=build/gpu-carry
  unset OUT
  local rc
  if unshare -m true 2>/dev/null; then
    unshare -m bash "$D/inner.sh"; rc=$?
  else
    echo "note: unshare -m is not permitted here: the dry run is NOT isolated from this machine's MPI and NCCL"
    [ -n "$nccl_so" ] && ln -sf "$nccl_so" "$D/site/nvidia/nccl/lib/libnccl.so.2"
    for b in $blas_binds; do ln -sf "${b%%=*}" "${b#*=}"; done
    (cd "$D/tree" && GPU_CHECK_ISOLATED=0 bash scripts/gpu_check.sh); rc=$?
  fi
  return $rc
}

if [ "$DRY" = 1 ] && [ "${GPU_CHECK_INSIDE:-0}" != 1 ]; then
  dry_run_outer
  exit $?
fi

# ============================================================== the check
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-450}
B=${B:-32}
TRAIN_SECONDS=${TRAIN_SECONDS:-45}
JOBS=${JOBS:-$(nproc)}
CUDA_ARCH=${CUDA_ARCH:-"-gencode arch=compute_90,code=[sm_90,compute_90]"}
WORK="$ROOT/build/gpu-check"
rm -rf "$WORK"
mkdir -p "$WORK"
OUTDIR=${OUT:-$WORK}
mkdir -p "$OUTDIR"
LOG="$OUTDIR/gpu_check.log"
SUMMARY="$OUTDIR/gpu_check_summary.txt"
exec > >(tee "$LOG") 2>&1
TEE_PID=$!

RES_NAME=(); RES_STAT=(); RES_SECS=(); RES_NOTE=()
record() { # name status seconds note
  RES_NAME+=("$1"); RES_STAT+=("$2"); RES_SECS+=("$3"); RES_NOTE+=("$4")
  echo ">>> $2  $1 (${3} s)${4:+: $4}"
}
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
note() { echo; echo "=== [$(elapsed) s] $*"; }
# run_stage NAME NEEDS_GPU MIN_SECONDS MAX_SECONDS FUNCTION [ARGS]: the
# function returns 0 (PASS), 1 (FAIL) or 2 (SKIP) and may set STAGE_NOTE;
# it must keep each command under $STAGE_LIMIT seconds (use `tmo`)
STAGE_LIMIT=0; STAGE_START=0; STAGE_NOTE=""
tmo() { local l=$(( STAGE_LIMIT - ($(date +%s) - STAGE_START) )); [ $l -lt 1 ] && l=1; timeout -k 5 $l "$@"; }
# A dry run's GPU stage runs on the emulated device (build/emu-bins, made by
# the outer dry run) when it is a test_gpt stage on the tiny reference (the
# emulated device takes ~80 s for odd, minutes for small and the kernel
# benchmarks): ./test_gpt and ./train_gpt are the emulated programs during
# the stage; it is recorded EMUL ("emulated": ran on the CPU-emulated device,
# not a GPU result) or FAIL, never PASS.
emu_stage() { # fn args...: 0 when the dry run emulates this stage
  [ "$DRY" = 1 ] && [ -x build/emu-bins/test_gpt_emu ] && [ "$1" = st_test_gpt ] && [ "$2" = tiny ]
}
run_stage() {
  local name=$1 gpu=$2 min=$3 max=$4 fn=$5; shift 5
  local emu=0
  if [ "$gpu" = 1 ] && [ "$DRY" = 1 ]; then
    if emu_stage "$fn" "$@" && [ -n "$BIN_KIND" ]; then emu=1
    else record "$name" SKIP 0 "dry run: needs the GPU"; return 0; fi
  fi
  local l; l=$(left)
  if [ $((l - 15)) -lt "$min" ]; then record "$name" SKIP 0 "time budget: ${l} s left, needs ${min} s"; return 0; fi
  STAGE_LIMIT=$(( max < l - 15 ? max : l - 15 )); STAGE_START=$(date +%s); STAGE_NOTE=""
  note "$name (limit ${STAGE_LIMIT} s)$( [ $emu = 1 ] && echo ' on the emulated device')"
  [ $emu = 1 ] && cp build/emu-bins/test_gpt_emu ./test_gpt && cp build/emu-bins/train_gpt_emu ./train_gpt
  "$fn" "$@"; local rc=$?
  [ $emu = 1 ] && use_bins "$BIN_KIND"
  local s=$(( $(date +%s) - STAGE_START ))
  [ $emu = 1 ] && [ $rc = 0 ] && { record "$name" EMUL $s "emulated device (not a GPU): $STAGE_NOTE"; return 0; }
  case $rc in 0) record "$name" PASS $s "$STAGE_NOTE";; 2) record "$name" SKIP $s "$STAGE_NOTE";;
              124|137) record "$name" FAIL $s "timed out after ${STAGE_LIMIT} s${STAGE_NOTE:+; $STAGE_NOTE}";;
              *) record "$name" FAIL $s "${STAGE_NOTE:-exit $rc}";; esac
  return 0
}

# ---------------------------------------------------------------- machine
st_machine() {
  echo "dry run: $DRY, isolated: ${GPU_CHECK_ISOLATED:-n/a}, budget ${BUDGET} s, carry $CARRY"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null \
    || echo "nvidia-smi: not available"
  command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
  if ! command -v nvcc >/dev/null 2>&1; then STAGE_NOTE="no nvcc"; return 1; fi
  nvcc --version | tail -2
  PY=$(command -v python3 || true)
  echo "python3: ${PY:-none} $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tail -1)"
  echo "cores: $(nproc), memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  STAGE_NOTE="${GPU_NAME:-no GPU}, $(nvcc --version | grep -o 'release [0-9.]*'), $(nproc) cores"
  [ -n "$PY" ] || { STAGE_NOTE="$STAGE_NOTE; no python3"; return 1; }
  return 0
}

# ---------------------------------------------------------------- references (background)
# odd and tiny are carried (made here); small is generated there. The job
# writes $WORK/ref-gen and its log; st_refs waits for it.
REF_PID=""
start_refs() {
  local cfgs="small odd tiny"
  [ "$DRY" = 1 ] && cfgs="tiny"   # the rehearsal: same path, the fast config only
  mkdir -p "$WORK/ref-gen"
  ( for c in $cfgs; do
      timeout 300 python3 dev/reference.py --config $c --out "$WORK/ref-gen" || echo "reference $c: exit $?"
    done ) > "$WORK/ref-gen/log.txt" 2>&1 &
  REF_PID=$!
  REF_CFGS=$cfgs
}
st_refs() {
  [ -n "$REF_PID" ] || { STAGE_NOTE="not started"; return 1; }
  local waited=0
  while kill -0 "$REF_PID" 2>/dev/null; do
    if [ $(( $(date +%s) - STAGE_START )) -ge "$STAGE_LIMIT" ]; then kill "$REF_PID" 2>/dev/null; STAGE_NOTE="generation did not finish in time"; break; fi
    sleep 1; waited=$((waited + 1))
  done
  cat "$WORK/ref-gen/log.txt" | tail -20
  mkdir -p "$WORK/ref"
  local made="" same="" differ="" c
  for c in $REF_CFGS; do
    if [ -f "$WORK/ref-gen/${c}_debug_state.bin" ] && [ -f "$WORK/ref-gen/${c}_model.bin" ]; then
      made="$made $c"
      if [ -f "$CARRY/ref/${c}_debug_state.bin" ]; then
        if cmp -s "$WORK/ref-gen/${c}_debug_state.bin" "$CARRY/ref/${c}_debug_state.bin" && \
           cmp -s "$WORK/ref-gen/${c}_model.bin" "$CARRY/ref/${c}_model.bin"; then same="$same $c"; else differ="$differ $c"; fi
      fi
    fi
  done
  # use the carried copies where present (made here, the CPU suite's files), else the generated ones
  for c in small odd tiny; do
    if [ -f "$CARRY/ref/${c}_debug_state.bin" ]; then cp "$CARRY/ref/${c}_model.bin" "$CARRY/ref/${c}_debug_state.bin" "$WORK/ref/"
    elif [ -f "$WORK/ref-gen/${c}_debug_state.bin" ]; then cp "$WORK/ref-gen/${c}_model.bin" "$WORK/ref-gen/${c}_debug_state.bin" "$WORK/ref/"; fi
  done
  REF_AVAIL=$(ls "$WORK/ref" | sed -n 's/_debug_state.bin$//p' | tr '\n' ' ')
  STAGE_NOTE="generated:${made:- none}; bitwise equal to the carried copy:${same:- none}${differ:+; DIFFERENT:$differ}; using: $REF_AVAIL"
  [ -z "$made" ] && return 1
  [ -n "$differ" ] && return 1
  return 0
}

# ---------------------------------------------------------------- cuBLAS
# the toolkit's, else a folder of links to the pip wheel's (nvidia/cu13 or
# nvidia/cublas: headers, libcublas.so.N, libcublasLt.so.N, no unversioned
# names), passed to make as CUDA_CUBLAS_HOME
CUBLAS_HOME=""
st_cublas() {
  local cuda_home; cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  if [ -f "$cuda_home/include/cublasLt.h" ] && [ -e "$cuda_home/lib64/libcublasLt.so" ] && [ -e "$cuda_home/lib64/libcublas.so" ]; then
    STAGE_NOTE="the CUDA toolkit's ($cuda_home)"; return 0
  fi
  echo "no cuBLAS in $cuda_home; looking in python3's nvidia wheels"
  local roots h lt b
  roots=$(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null)
  [ -n "$roots" ] || { STAGE_NOTE="no cuBLAS in the toolkit and no nvidia package in python3"; return 1; }
  h=$(find $roots -maxdepth 4 -name cublasLt.h 2>/dev/null | head -1)
  lt=$(find $roots -maxdepth 4 -name 'libcublasLt.so.*' 2>/dev/null | sort | head -1)
  b=$(find $roots -maxdepth 4 -name 'libcublas.so.*' 2>/dev/null | sort | head -1)
  echo "cublasLt.h: ${h:-none}, libcublasLt: ${lt:-none}, libcublas: ${b:-none}"
  [ -n "$h" ] && [ -n "$lt" ] && [ -n "$b" ] || { STAGE_NOTE="no cuBLAS headers or libraries in the wheels either"; return 1; }
  CUBLAS_HOME="$WORK/cublas"
  mkdir -p "$CUBLAS_HOME/include" "$CUBLAS_HOME/lib"
  local f
  for f in "$(dirname "$h")"/cublas*.h; do ln -sf "$f" "$CUBLAS_HOME/include/"; done
  ln -sf "$lt" "$CUBLAS_HOME/lib/libcublasLt.so"; ln -sf "$b" "$CUBLAS_HOME/lib/libcublas.so"
  ln -sf "$lt" "$CUBLAS_HOME/lib/$(basename "$lt")"; ln -sf "$b" "$CUBLAS_HOME/lib/$(basename "$b")"
  STAGE_NOTE="wheel: $(dirname "$(dirname "$lt")")"
  return 0
}

# ---------------------------------------------------------------- kernels
st_kernel_build() {
  tmo make -j"$JOBS" -f cuda.mk cuda-dev CUDA_ARCH="$CUDA_ARCH" ${CUBLAS_HOME:+CUDA_CUBLAS_HOME=$CUBLAS_HOME} \
    > "$WORK/build_kernels.log" 2>&1
  local rc=$?
  grep -i -E "error|warning" "$WORK/build_kernels.log" | head -20
  STAGE_NOTE="$(ls dev/cuda/*.cu | grep -v test_backend | wc -l) programs, $(grep -c -i warning "$WORK/build_kernels.log") warning lines"
  [ $rc -ne 0 ] && tail -30 "$WORK/build_kernels.log"
  return $rc
}
st_kernel_run() { # name
  [ -x "dev/cuda/$1" ] || { STAGE_NOTE="not built"; return 1; }
  tmo "./dev/cuda/$1" > "$WORK/kernel_$1.log" 2>&1; local rc=$?
  cat "$WORK/kernel_$1.log"
  STAGE_NOTE="$(grep -c "OK  " "$WORK/kernel_$1.log") checks OK, $(grep -c "FAIL" "$WORK/kernel_$1.log") FAIL"
  return $rc
}

# ---------------------------------------------------------------- MPI from the carry
MPI_OK=0; MPI=""
mpi_env() { # for the MPI build and runs only (not for python3)
  export PATH="$MPI/bin:$PATH" OPAL_PREFIX="$MPI/usr" PMIX_INSTALL_PREFIX="$MPI/usr"
  export LD_LIBRARY_PATH="$MPI_LDPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # one node, no ssh, no InfiniBand: Debian's defaults from /etc/openmpi (not
  # carried) and the launcher that needs no ssh
  export OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_mtl='^ofi' OMPI_MCA_btl='^uct,openib,ofi' OMPI_MCA_pml='^ucx' OMPI_MCA_osc='^ucx,pt2pt'
  export OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_rmaps_base_oversubscribe=1
}
with_mpi() { ( mpi_env; exec "$@" ); }
st_mpi_unpack() {
  [ -f "$CARRY/debs/packages.txt" ] || { STAGE_NOTE="no $CARRY/debs (run scripts/gpu_prepare.sh here first)"; return 1; }
  MPI="$WORK/mpi"
  rm -rf "$MPI"; mkdir -p "$MPI/bin"
  local f n=0
  for f in "$CARRY"/debs/*.deb; do
    if command -v dpkg >/dev/null 2>&1; then dpkg -x "$f" "$MPI" || return 1
    else # no dpkg: a .deb is an ar archive holding data.tar.*
      python3 - "$f" "$MPI" <<'EOF' || return 1
import sys, tarfile, io
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'!<arch>\n'
i = 8
while i < len(data):
    name = data[i:i+16].decode().strip().rstrip('/'); size = int(data[i+48:i+58]); body = data[i+60:i+60+size]
    if name.startswith('data.tar'):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2])
    i += 60 + size + (size & 1)
EOF
    fi
    n=$((n + 1))
  done
  ln -sf ../usr/bin/opal_wrapper "$MPI/bin/mpicc"
  ln -sf ../usr/bin/orterun "$MPI/bin/mpirun"
  ln -sf ../usr/bin/orted "$MPI/bin/orted"
  # soname links that Debian's maintainer scripts (alternatives) would make
  local d so
  if command -v ldconfig >/dev/null 2>&1 || [ -x /sbin/ldconfig ]; then
    for d in $(find "$MPI" -name '*.so*' -printf '%h\n' | sort -u); do "$(command -v ldconfig || echo /sbin/ldconfig)" -n "$d" 2>/dev/null; done
  else # the same by hand: a link named after each library's SONAME
    for f in $(find "$MPI" -type f -name '*.so.*'); do
      so=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
      [ -n "$so" ] && [ ! -e "$(dirname "$f")/$so" ] && ln -s "$(basename "$f")" "$(dirname "$f")/$so"
    done
  fi
  MPI_LDPATH="$MPI/usr/lib/x86_64-linux-gnu:$MPI/lib/x86_64-linux-gnu:$MPI/usr/lib/x86_64-linux-gnu/openmpi/lib:$MPI/usr/lib/libpsm1"
  echo "unpacked $n packages into $MPI ($(du -sh "$MPI" | cut -f1))"
  with_mpi mpicc -showme:compile && with_mpi mpicc -showme:link || { STAGE_NOTE="mpicc -showme failed"; return 1; }
  with_mpi mpirun --version | head -1
  if [ "$DRY" = 1 ]; then
    # isolation: the carried mpicc must be the one found, the system's unusable
    echo "mpicc found: $(with_mpi bash -c 'command -v mpicc')"
    if [ "${GPU_CHECK_ISOLATED:-0}" = 1 ] && /usr/bin/mpicc -showme >/dev/null 2>&1; then
      STAGE_NOTE="this machine's mpicc still works: not isolated"; return 1; fi
  fi
  MPI_OK=1
  STAGE_NOTE="$n packages, $(with_mpi mpirun --version 2>/dev/null | head -1 | grep -o '[0-9][0-9.]*' | head -1)"
  return 0
}

# every ELF file of the carried prefix must find each library it needs in the
# prefix or among those any image with nvcc has (glibc, libgcc_s, libstdc++,
# zlib) or the GPU driver and CUDA libraries: else it would fail on the GPU
# machine although it works here
BASE_LIBS='^(linux-vdso\.so|ld-linux-x86-64\.so|lib(c|m|dl|pthread|rt|resolv|util|gcc_s|stdc\+\+|z)\.so|lib(cuda|cudart|nvidia-ml|cublas|cublasLt|nccl)\.so)'
closure() { # files...: prints "file: lib => where" for every library outside the prefix and the base set
  local f
  for f in "$@"; do
    ldd "$f" 2>/dev/null | awk -v f="$f" -v pfx="$MPI" -v base="$BASE_LIBS" '
      /=>/ { lib = $1; where = $3; if (where == "not") where = "NOT FOUND"
             if (index(where, pfx) == 1) next
             if (lib ~ base && where != "NOT FOUND") next
             printf "%s: %s => %s\n", f, lib, where }'
  done
}
st_mpi_closure() {
  [ $MPI_OK = 1 ] || { STAGE_NOTE="no carried MPI"; return 2; }
  local files; files=$(find "$MPI" -type f \( -name '*.so*' -o -path '*/bin/*' \) | sort)
  ( mpi_env; closure $files ) > "$WORK/closure.txt"
  local nfiles; nfiles=$(echo "$files" | wc -l)
  if [ -s "$WORK/closure.txt" ]; then
    echo "libraries the carry does not provide:"; awk '{print $2, $3, $4}' "$WORK/closure.txt" | sort | uniq -c | sort -rn | head -30
    STAGE_NOTE="$nfiles files; $(awk '{print $2}' "$WORK/closure.txt" | sort -u | tr '\n' ' ')missing"
    return 1
  fi
  STAGE_NOTE="$nfiles files: every library in the carry or the base set (glibc, libgcc_s, libstdc++, zlib, CUDA)"
  return 0
}

# ---------------------------------------------------------------- NCCL
NCCL_HOME=""
st_nccl() {
  local pkg inc lib
  pkg=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [ -n "$pkg" ]; then
    inc=$(find "$pkg" -maxdepth 3 -name nccl.h | head -1)
    lib=$(find "$pkg" -maxdepth 3 -name 'libnccl.so*' | sort | head -1)
    echo "wheel: $pkg, nccl.h: ${inc:-none}, library: ${lib:-none}"
    if [ -n "$inc" ] && [ -n "$lib" ]; then
      if [ "$inc" = "$pkg/include/nccl.h" ] && [ -e "$pkg/lib/libnccl.so.2" ]; then NCCL_HOME=$pkg
      else # another layout: a shim with the names cuda.mk expects
        NCCL_HOME="$WORK/nccl"; mkdir -p "$NCCL_HOME/lib"
        ln -sfn "$(dirname "$inc")" "$NCCL_HOME/include"
        ln -sf "$lib" "$NCCL_HOME/lib/libnccl.so.2"
      fi
      ls "$pkg/lib" 2>/dev/null | grep -q '^libnccl\.so$' && echo "note: the wheel has an unversioned libnccl.so"
      STAGE_NOTE="wheel $pkg"
      return 0
    fi
  fi
  local cuda_home; cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  if [ -f "$cuda_home/include/nccl.h" ] && [ -e "$cuda_home/lib64/libnccl.so.2" ]; then
    STAGE_NOTE="no nvidia.nccl wheel in python3; the CUDA toolkit's ($cuda_home)"; return 0
  fi
  STAGE_NOTE="no NCCL (no nvidia.nccl wheel in python3, none in $cuda_home)"; return 1
}

# ---------------------------------------------------------------- builds
BIN_KIND=""     # mpi or stub: which build ./train_gpt ./test_gpt are
make_cuda() { # extra make args...
  local a=(-j"$JOBS" -f cuda.mk cuda cuda-test CUDA_ARCH="$CUDA_ARCH")
  [ -n "$NCCL_HOME" ] && a+=(CUDA_NCCL_HOME="$NCCL_HOME")
  [ -n "$CUBLAS_HOME" ] && a+=(CUDA_CUBLAS_HOME="$CUBLAS_HOME")
  tmo make "${a[@]}" "$@"
}
check_ldd() { # binaries...: every library resolves
  local b bad=0
  for b in "$@"; do
    if ldd "$b" | grep -q "not found"; then echo "$b: unresolved libraries:"; ldd "$b" | grep "not found"; bad=1; fi
  done
  return $bad
}
st_build_mpi() {
  [ $MPI_OK = 1 ] || { STAGE_NOTE="no usable MPI from the carry"; return 1; }
  with_mpi make -f cuda.mk cuda-config CUDA_ARCH="$CUDA_ARCH" ${NCCL_HOME:+CUDA_NCCL_HOME=$NCCL_HOME} ${CUBLAS_HOME:+CUDA_CUBLAS_HOME=$CUBLAS_HOME}
  ( mpi_env; make_cuda ) > "$WORK/build_mpi.log" 2>&1; local rc=$?
  grep -i -E "error|warning" "$WORK/build_mpi.log" | head -20
  [ $rc -ne 0 ] && { tail -30 "$WORK/build_mpi.log"; STAGE_NOTE="build failed"; return 1; }
  ( mpi_env; check_ldd ./train_gpt ./test_gpt ./dev/cuda/test_backend ) || { STAGE_NOTE="unresolved libraries"; return 1; }
  BIN_KIND=mpi
  mkdir -p "$WORK/bin-mpi" && cp train_gpt test_gpt dev/cuda/test_backend "$WORK/bin-mpi/"
  STAGE_NOTE="$(grep -c -i warning "$WORK/build_mpi.log") warning lines; ldd: every library found"
  return 0
}
st_build_stub() {
  make -f cuda.mk cuda-config CUDA_MPICC=false CUDA_ARCH="$CUDA_ARCH" ${NCCL_HOME:+CUDA_NCCL_HOME=$NCCL_HOME} ${CUBLAS_HOME:+CUDA_CUBLAS_HOME=$CUBLAS_HOME}
  # the dry run compiles test_backend once (MPI build): its stand-in twin differs only in mpi.h
  if [ "$DRY" = 1 ]; then tmo make -j"$JOBS" -f cuda.mk cuda CUDA_ARCH="$CUDA_ARCH" CUDA_MPICC=false ${NCCL_HOME:+CUDA_NCCL_HOME=$NCCL_HOME} \
                            ${CUBLAS_HOME:+CUDA_CUBLAS_HOME=$CUBLAS_HOME}
  else make_cuda CUDA_MPICC=false; fi > "$WORK/build_stub.log" 2>&1; local rc=$?
  grep -i -E "error|warning" "$WORK/build_stub.log" | head -20
  [ $rc -ne 0 ] && { tail -30 "$WORK/build_stub.log"; STAGE_NOTE="build failed"; return 1; }
  check_ldd ./train_gpt ./test_gpt || { STAGE_NOTE="unresolved libraries"; return 1; }
  if ldd ./train_gpt | grep -q libmpi; then STAGE_NOTE="links libmpi although built without MPI"; return 1; fi
  ./train_gpt --estimate --params 124e6 --dtype bf16 --ranks 1 --gpu-mem 141 | tail -2 || { STAGE_NOTE="--estimate failed"; return 1; }
  mkdir -p "$WORK/bin-stub" && cp train_gpt test_gpt "$WORK/bin-stub/"
  [ "$DRY" = 1 ] || cp dev/cuda/test_backend "$WORK/bin-stub/"
  STAGE_NOTE="single rank, no MPI; $(grep -c -i warning "$WORK/build_stub.log") warning lines"
  return 0
}
use_bins() {
  cp "$WORK/bin-$1"/train_gpt "$WORK/bin-$1"/test_gpt . || return 1
  [ -f "$WORK/bin-$1/test_backend" ] && cp "$WORK/bin-$1/test_backend" dev/cuda/
  BIN_KIND=$1
}

# N ranks of the current binaries, within the stage's time limit
launch() { # nranks cmd...
  local n=$1; shift
  if [ "$BIN_KIND" = mpi ]; then ( mpi_env; tmo mpirun --allow-run-as-root --oversubscribe -np "$n" "$@" )
  else tmo "$@"; fi
}

st_mpi_run() {
  [ "$BIN_KIND" = mpi ] || { STAGE_NOTE="no MPI build"; return 2; }
  launch 2 ./train_gpt --estimate --params 124e6 --dtype bf16 --ranks 2 --gpu-mem 141 > "$WORK/mpi_run.log" 2>&1
  local rc=$?
  cat "$WORK/mpi_run.log"
  if grep -q "unable to open" "$WORK/mpi_run.log"; then STAGE_NOTE="MCA components failed to load (missing libraries)"; return 1; fi
  [ $rc -ne 0 ] && { STAGE_NOTE="exit $rc"; return 1; }
  grep -q "ZeRO estimate" "$WORK/mpi_run.log" || { STAGE_NOTE="no estimate printed"; return 1; }
  STAGE_NOTE="2 ranks of ./train_gpt under the carried mpirun"
  return 0
}
# dry run only: without a GPU, test_gpt must end with one error line and exit 1 on every rank
st_no_gpu_error() {
  [ -x ./test_gpt ] || { STAGE_NOTE="no ./test_gpt"; return 2; }
  local n=1; [ "$BIN_KIND" = mpi ] && n=2
  launch $n ./test_gpt -e "$CARRY/ref/tiny_model.bin" -s "$CARRY/ref/tiny_debug_state.bin" > "$WORK/no_gpu.log" 2>&1
  local rc=$?
  cat "$WORK/no_gpu.log" | head -20
  local lines; lines=$(grep -c "^error" "$WORK/no_gpu.log")
  STAGE_NOTE="$n rank(s): exit $rc, $lines error line(s) (expected: exit 1, one line 'error: no usable CUDA device')"
  [ $rc -eq 1 ] && [ "$lines" = 1 ] && grep -q "^error: no usable CUDA device" "$WORK/no_gpu.log"
}

# ---------------------------------------------------------------- GPU runs
# NRANKS MODE: N ranks on the one GPU; MODE nccl (N = 1 only: NCCL needs a
# GPU per rank) or host (host-staged collectives, LLMC_COLLECTIVES=host)
ranks_ok() { # nranks
  [ "$1" = 1 ] || [ "$BIN_KIND" = mpi ] || { STAGE_NOTE="$1 ranks need the MPI build (this is the single-rank build)"; return 1; }
}
st_test_backend() { # nranks mode
  ranks_ok "$1" || return 2
  local log="$WORK/test_backend_$1_$2.log"
  ( export LLMC_COLLECTIVES=$2; launch "$1" ./dev/cuda/test_backend ) > "$log" 2>&1; local rc=$?
  cat "$log"
  STAGE_NOTE=$(grep -E "^[0-9]+ passed" "$log" | tail -1)
  [ -z "$STAGE_NOTE" ] && { tail -5 "$log"; STAGE_NOTE="exit $rc, no summary"; }
  return $rc
}
st_test_gpt() { # config nranks mode extra-args...
  local c=$1 n=$2 mode=$3; shift 3
  ranks_ok "$n" || return 2
  [ -f "$WORK/ref/${c}_debug_state.bin" ] || { STAGE_NOTE="no reference files for $c"; return 2; }
  local log="$WORK/test_gpt_${c}_${n}_${mode}_$(echo "$*" | tr -c 'a-z0-9' '_').log"
  ( export LLMC_COLLECTIVES=$mode; launch "$n" ./test_gpt -e "$WORK/ref/${c}_model.bin" -s "$WORK/ref/${c}_debug_state.bin" "$@" ) > "$log" 2>&1
  local rc=$?
  grep -E "^(OK|FAIL)|passed|error|backend" "$log" | head -40
  STAGE_NOTE=$(grep -E "^[0-9]+ passed" "$log" | tail -1)
  [ -z "$STAGE_NOTE" ] && { tail -5 "$log"; STAGE_NOTE="exit $rc, no summary"; }
  return $rc
}
test_gpt_stages() { # config nranks mode
  local z
  for z in 0 1 2 3; do run_stage "test_gpt $1 N=$2 $3 -z $z" 1 8 90 st_test_gpt "$1" "$2" "$3" -z $z; done
}

# activation recomputation: -r 1, 2, 3 must give -r 0's checkpoint bit for bit (as on the CPU)
st_recompute() { # nranks
  ranks_ok "$1" || return 2
  local r rc differ="" same=""
  for r in 0 1 2 3; do
    launch "$1" ./train_gpt -e d2 -i "$CARRY/data/brown/brown_train_*.bin" --tokenizer "$CARRY/data/gpt2_tokenizer.bin" \
      -b 4 -t 128 -x 3 -v 0 -s 0 -z 3 -r $r -o "$WORK/rc$1_$r" > "$WORK/rc$1_$r.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && { tail -5 "$WORK/rc$1_$r.log"; STAGE_NOTE="-r $r: exit $rc"; return 1; }
    [ $r = 0 ] && continue
    if cmp -s "$WORK/rc$1_0/model_00000003.bin" "$WORK/rc$1_$r/model_00000003.bin"; then same="$same $r"; else differ="$differ $r"; fi
  done
  grep -E "^  (activations|recompute)" "$WORK/rc$1_3.log"
  STAGE_NOTE="-z 3, N=$1: -r equal to -r 0:${same:- none}${differ:+; DIFFERENT:$differ}"
  [ -z "$differ" ]
}

TRAIN_LOG="$OUTDIR/train_d12.log"
run_d12() { # steps batch logfile
  launch 1 ./train_gpt -e d12 -i "$CARRY/data/brown/brown_train_*.bin" -j "$CARRY/data/brown/brown_val_*.bin" \
    --tokenizer "$CARRY/data/gpt2_tokenizer.bin" -b "$2" -t 1024 -x "$1" -v 0 -s 0 -u 10 -l 6e-4 > "$3" 2>&1
}
st_d12() {
  local b=$B
  note "calibration: 12 steps, B=$b T=1024"
  run_d12 12 $b "$WORK/calib.log"; local rc=$?
  if [ $rc -ne 0 ] && grep -q -i "out of memory" "$WORK/calib.log"; then
    b=$((B / 2)); echo "B=$B does not fit; B=$b"
    run_d12 12 $b "$WORK/calib.log"; rc=$?
  fi
  grep -E "^step|average|peak|error|model:" "$WORK/calib.log" | tail -8
  [ $rc -ne 0 ] && { tail -20 "$WORK/calib.log"; STAGE_NOTE="calibration run failed (exit $rc)"; return 1; }
  local ms steps
  ms=$(grep -o "average [0-9.]* ms" "$WORK/calib.log" | awk '{print $2}')
  [ -n "$ms" ] || { STAGE_NOTE="no 'average ... ms' in the log"; return 1; }
  local avail=$(( STAGE_LIMIT - ($(date +%s) - STAGE_START) - 25 ))
  local secs=$TRAIN_SECONDS; [ $avail -lt $secs ] && secs=$avail
  steps=$(awk -v ms="$ms" -v s="$secs" 'BEGIN { n = int(1000 * s / ms); if (n < 20) n = 20; if (n > 5000) n = 5000; print n }')
  note "GPT-2 124M: $steps steps (~$secs s at $ms ms/step), B=$b T=1024"
  run_d12 "$steps" $b "$TRAIN_LOG"; rc=$?
  grep -E "^step +(1|2|3|10|$steps)/|average|peak|error" "$TRAIN_LOG" | tail -12
  [ $rc -ne 0 ] && { STAGE_NOTE="training run failed (exit $rc)"; return 1; }
  d12_figures "$TRAIN_LOG" "$b" "$steps"
}
# tokens/s, MFU, peak memory beside llm.c's published figure
D12_LINE=""
d12_figures() { # log B steps
  awk -v B="$2" -v steps="$3" -v gpu="${GPU_NAME:-GPU}" '
    /parameters/ && match($0, /[0-9]+ parameters/) { split(substr($0, RSTART, RLENGTH), a, " "); P = a[1] }
    /average/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "ms") ms = $i; if ($(i+1) == "tokens/s,") tok = $i; if ($i ~ /flops\/token/) fpt = $(i-1) } }
    /flops\/token/ && match($0, /= [0-9.e+]+ flops/) { split(substr($0, RSTART, RLENGTH), f, " "); fpt = f[2] }
    /device memory used/ && match($0, /used [0-9.]+ MB/) { split(substr($0, RSTART, RLENGTH), m, " "); mem = m[2] }
    /^step/ && match($0, /loss [0-9.]+/) { split(substr($0, RSTART, RLENGTH), l, " "); if (first == "") first = l[2]; last = l[2] }
    END {
      if (tok == "" || fpt == "") { print "could not parse the training log"; exit 1 }
      peak = 989e12
      mfu = 100 * tok * fpt / peak
      printf "GPT-2 124M on %s, B=%d T=1024, %d steps: %.1f ms/step, %.0f tokens/s, %.3g flops/token (6 Psi + 12 L C T)\n", gpu, B, steps, ms, tok, fpt
      printf "MFU %.1f%% of 989 TFLOP/s (H100/H200 SXM dense bf16 datasheet)\n", mfu
      printf "peak device memory %.1f GB (cudaMemGetInfo); loss %s at step 1 -> %s at step %d\n", mem / 1000, first, last, steps
      printf "llm.c, published (karpathy/llm.c Discussion #481, GPT-2 124M, T=1024): \"up to ~60%% model flops utilization\"; 10B tokens in ~90 min on 8x A100 80GB SXM = ~231K tokens/s per A100 (60%% of its 312 TFLOP/s); the same 60%% MFU on this GPU would be %.0f tokens/s\n", 0.6 * peak / fpt
      printf "D12 %.0f tok/s, MFU %.1f%%, peak %.1f GB (llm.c: ~60%% MFU)\n", tok, mfu, mem / 1000 > "/dev/stderr"
    }' "$1" 2> "$WORK/d12_line.txt"
  local rc=$?
  D12_LINE=$(sed 's/^D12 //' "$WORK/d12_line.txt")
  STAGE_NOTE="$D12_LINE"
  return $rc
}

# ================================================================ run
note "gpu_check: $( [ "$DRY" = 1 ] && echo "DRY RUN (no GPU used)" || echo "GPU run" ), budget $BUDGET s, B=$B"
run_stage "machine" 0 5 30 st_machine
start_refs
run_stage "cublas (toolkit, else the python3 wheel)" 0 2 30 st_cublas
run_stage "kernel build (dev/cuda, sm_90)" 0 30 240 st_kernel_build
KERNEL_DEADLINE=$(( $(date +%s) + ${KERNEL_SECONDS:-150} ))   # the kernel checks' share of the budget
for k in $(ls dev/cuda/*.cu | xargs -n1 basename | sed 's/\.cu$//' | grep -v '^test_backend$'); do
  krem=$(( KERNEL_DEADLINE - $(date +%s) ))
  if [ "$DRY" != 1 ] && [ $krem -lt 10 ]; then record "kernel $k" SKIP 0 "the kernel checks' ${KERNEL_SECONDS:-150} s are spent"; continue; fi
  run_stage "kernel $k" 1 10 $(( krem < 60 ? krem : 60 )) st_kernel_run "$k"
done
run_stage "mpi unpack (carried Open MPI)" 0 5 60 st_mpi_unpack
run_stage "mpi closure (ldd of every carried file)" 0 5 60 st_mpi_closure
run_stage "nccl (python3 wheel)" 0 2 30 st_nccl
run_stage "build with MPI (train_gpt test_gpt test_backend)" 0 30 240 st_build_mpi
if [ "$BIN_KIND" != mpi ] || [ "$DRY" = 1 ]; then
  # the fallback (and, in a dry run, its rehearsal): one rank, no MPI
  run_stage "build without MPI (single-rank stand-in)" 0 30 240 st_build_stub
  if [ "$BIN_KIND" = "" ] && [ -d "$WORK/bin-stub" ]; then BIN_KIND=stub; fi
  if [ "$DRY" = 1 ] && [ -d "$WORK/bin-mpi" ]; then use_bins mpi; fi
fi
run_stage "mpi run (2 ranks, carried mpirun)" 0 5 60 st_mpi_run
if [ "$DRY" = 1 ]; then
  run_stage "no-GPU error path ($BIN_KIND build)" 0 5 60 st_no_gpu_error
  if [ -d "$WORK/bin-stub" ]; then
    use_bins stub
    run_stage "no-GPU error path (stub build)" 0 5 60 st_no_gpu_error
    [ -d "$WORK/bin-mpi" ] && use_bins mpi
  fi
fi
run_stage "references (python3 dev/reference.py)" 0 5 150 st_refs
if [ -z "$BIN_KIND" ]; then
  record "GPU runs" FAIL 0 "no build of ./test_gpt succeeded"
else
  # in order of importance: a stage that no longer fits the budget is skipped
  run_stage "test_backend N=1 nccl (collectives, fences, uploads)" 1 10 60 st_test_backend 1 nccl
  run_stage "test_backend N=2 host" 1 10 60 st_test_backend 2 host
  run_stage "test_backend N=4 host" 1 10 60 st_test_backend 4 host
  test_gpt_stages odd 1 nccl
  test_gpt_stages odd 2 host
  test_gpt_stages odd 4 host
  run_stage "GPT-2 124M timed run" 1 60 $((TRAIN_SECONDS + 120)) st_d12
  run_stage "train_gpt -r 1,2,3 == -r 0 bitwise (N=1)" 1 10 90 st_recompute 1
  test_gpt_stages small 1 nccl
  test_gpt_stages small 2 host
  test_gpt_stages small 4 host
  test_gpt_stages odd 1 host
  test_gpt_stages tiny 1 nccl
  test_gpt_stages tiny 4 host
  run_stage "test_gpt odd N=1 nccl -z 3 reshard 0, accum 2" 1 8 90 st_test_gpt odd 1 nccl -z 3 --reshard-after-forward 0 --accum 2
  run_stage "test_gpt odd N=2 host -z 3 reshard 0, accum 2" 1 8 90 st_test_gpt odd 2 host -z 3 --reshard-after-forward 0 --accum 2
  run_stage "test_gpt odd N=1 nccl -z 3 prefetch 2" 1 8 90 st_test_gpt odd 1 nccl -z 3 --prefetch 2
  run_stage "test_gpt odd N=4 host -z 3 prefetch 2" 1 8 90 st_test_gpt odd 4 host -z 3 --prefetch 2
  run_stage "test_gpt odd N=4 host -z 3 HSDP (--shard-group 2)" 1 8 90 st_test_gpt odd 4 host -z 3 --shard-group 2
  run_stage "test_gpt odd N=4 host -z 2 HSDP (--shard-group 2)" 1 8 90 st_test_gpt odd 4 host -z 2 --shard-group 2
fi
[ -n "$REF_PID" ] && kill "$REF_PID" 2>/dev/null

# ---------------------------------------------------------------- summary
np=0; nf=0; ns=0; ne=0
for i in "${!RES_NAME[@]}"; do
  case ${RES_STAT[$i]} in PASS) np=$((np+1));; FAIL) nf=$((nf+1));; EMUL) ne=$((ne+1));; *) ns=$((ns+1));; esac
done
{
  echo
  echo "=== gpu_check summary ($( [ "$DRY" = 1 ] && echo "dry run, no GPU" || echo "${GPU_NAME:-GPU}"), $(elapsed) s of $BUDGET s)"
  printf '%-50s %-5s %5s  %s\n' "stage" "" "s" "detail"
  for i in "${!RES_NAME[@]}"; do
    printf '%-50s %-5s %5s  %s\n' "${RES_NAME[$i]}" "${RES_STAT[$i]}" "${RES_SECS[$i]}" "${RES_NOTE[$i]}"
  done
  [ -n "$D12_LINE" ] && echo "GPT-2 124M: $D12_LINE"
  [ "$DRY" = 1 ] && echo "$ne emulated (GPU stages run on the CPU-emulated device, tests/cuda_emu: not counted as passed)"
  echo "$np passed, $nf failed, $ns skipped"
} > "$SUMMARY"
cat "$SUMMARY"
rc=0; [ "$nf" -eq 0 ] || rc=1
exec 1>&- 2>&-      # let tee write the last lines of the log before the exit
wait "$TEE_PID" 2>/dev/null
exit $rc
