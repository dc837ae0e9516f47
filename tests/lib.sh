# tests/lib.sh -- sourced by every shell suite: the one place the summary
# contract is written. A suite calls ok / bad / skip once per check and
# ends with `summary`, whose line "N passed, M failed, K skipped" is what
# tests/run.sh adds up (it also accepts the older "N passed, M failed").
# A check that cannot run on this CPU or machine is skipped and counted,
# never passed: skip names what it needs, e.g.
#   skip "bf16 primitive: skipped (needs AVX512_CORE; this CPU: AVX2)"
# Also: MPIRUN (mpirun as root, more ranks than cores), the CPU's ISA
# levels (cpu_isa_can LEVEL, from tests/cpu_isa.c: llmc/cpu/isa.h).
pass=0; fail=0; skip=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
skip() { skip=$((skip + 1)); echo "skip $*"; }
summary() { echo "$pass passed, $fail failed, $skip skipped"; [ "$fail" -eq 0 ]; }
MPIRUN="mpirun --allow-run-as-root --oversubscribe"

# the cpus this process may use: nproc without OMP_NUM_THREADS and OMP_THREAD_LIMIT, which GNU
# nproc honours (in a suite that exports OMP_NUM_THREADS=1, plain nproc says 1 on any machine)
ncpu() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }

# build/cpu_isa (once): the levels of this CPU
cpu_isa_tool() {
  [ -x build/cpu_isa ] && [ build/cpu_isa -nt tests/cpu_isa.c ] && [ build/cpu_isa -nt llmc/cpu/isa.h ] ||
    { mkdir -p build && gcc -O2 -I. tests/cpu_isa.c -o build/cpu_isa; } || return 1
  echo build/cpu_isa
}
# the detected level (ignores LLMC_CPU_ISA): avx2, avx512, avx512_bf16, amx
cpu_isa_detected() { env -u LLMC_CPU_ISA "$(cpu_isa_tool)" | awk '$1 == "detected" {print $2}'; }
# the CPU as the trainer names it (the CPUID brand string; its calibration files' "cpu" line)
cpu_isa_model() { env -u LLMC_CPU_ISA "$(cpu_isa_tool)" | sed -n 's/^model //p'; }
# cpu_isa_can LEVEL: 0 if this CPU runs LEVEL; else prints the skip reason and returns 3
cpu_isa_can() { env -u LLMC_CPU_ISA "$(cpu_isa_tool)" "$1"; }
CPU_ISA_ALL="avx2 avx512 avx512_bf16 amx"
