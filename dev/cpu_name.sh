#!/usr/bin/env bash
# dev/cpu_name.sh -- the CPU's name for the headers of benches and reports:
# /proc/cpuinfo's "model name" and, where it differs, the CPUID brand string
# the trainer names the CPU by (its start-up line, its calibration files;
# llmc/cpu/isa.h). They differ on some machines: a Zen 5 VM says "AMD EPYC"
# in /proc/cpuinfo and "Oxide Virtual Turin-like Processor" in CPUID.
# Prints one line, e.g. "AMD EPYC (CPUID: Oxide Virtual Turin-like Processor)".
cd "$(dirname "$0")/.." || exit 1
name=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
tool=build/cpu_isa
{ [ -x $tool ] && [ $tool -nt tests/cpu_isa.c ] && [ $tool -nt llmc/cpu/isa.h ]; } ||
  { mkdir -p build && gcc -O2 -I. tests/cpu_isa.c -o $tool 2>/dev/null; }
brand=$(env -u LLMC_CPU_ISA ./$tool 2>/dev/null | sed -n 's/^model //p')
if [ -n "$brand" ] && [ "$brand" != "$name" ]; then echo "${name:-unknown} (CPUID: $brand)"; else echo "${name:-$brand}"; fi
