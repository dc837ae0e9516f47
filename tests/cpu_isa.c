/*
 * tests/cpu_isa.c -- prints the ISA levels of llmc/cpu/isa.h for scripts:
 *   detected <level>     what the CPU and OS offer
 *   level <level>        what the kernels run at (LLMC_CPU_ISA caps it)
 *   cpu <description>    the start-up line's text
 *   model <brand>        the CPUID brand string, as the trainer names the CPU
 *                        (its calibration files, its start-up line): on some
 *                        machines it differs from /proc/cpuinfo's "model name"
 *                        (a Zen 5 VM: "Oxide Virtual Turin-like Processor"
 *                        against "AMD EPYC"), so scripts compare with this
 * and, with an argument LEVEL, exits 0 if the CPU can run LEVEL, else
 * prints "skipped (needs ...; this CPU: ...)" and exits 3. Exit 1 on a bad
 * LLMC_CPU_ISA or level name. Build: gcc -O2 -I. tests/cpu_isa.c
 */
#include "llmc/cpu/isa.h"

int main(int argc, char** argv) {
    const CpuIsaState* s = cpu_isa_init();
    if (s->error[0]) { fprintf(stderr, "error: %s\n", s->error); return 1; }
    if (argc > 1) {
        CpuIsa need = cpu_isa_parse(argv[1]);
        if (need == CPU_ISA_NONE) { fprintf(stderr, "error: '%s' is not a level (avx2, avx512, avx512_bf16, amx)\n", argv[1]); return 1; }
        const char* why = cpu_isa_skip_reason(need);
        if (why) { printf("%s\n", why); return 3; }
        return 0;
    }
    char d[512];
    cpu_isa_describe(d, sizeof(d));
    printf("detected %s\nlevel %s\ncpu %s\nmodel %s\n", cpu_isa_names[s->detected], cpu_isa_names[s->level], d, s->model);
    return 0;
}
