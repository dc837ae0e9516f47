/*
 llmc/run/kernel_paths.h: the matmul paths a run takes, as the state
 records them (header word 26, llmc/state.h), and a resume's request to
 take the paths its state recorded. For setup, the banner and checkpoints.
*/
#ifndef LLMC_RUN_KERNEL_PATHS_H
#define LLMC_RUN_KERNEL_PATHS_H
#include "run.h"

/* The matmul paths this run takes, as the state records them (header word
   26, llmc/state.h): the bf16 CPU program's per class; the fp32 program's
   one path; 0 (not recorded) in the CUDA build. */
static long long kernel_paths_word(void) {
#if defined(LLMC_CUDA)
    return 0;
#elif defined(LLMC_BF16)
    cpu_gemm_init();
    long long w = STATE_PATHS_RECORDED | STATE_PATHS_BF16;
    for (int k = 0; k < CPU_MM_NUM; k++) if (!cpu_gemm_state.fp32[k]) w |= 1LL << k;
    return w;
#else
    return STATE_PATHS_RECORDED;
#endif
}
/* What the run asks of rank 0's decision of the matmul paths beyond the
   calibration files (llmc/cpu/matmul_choice.h, cpu_gemm_request): the
   bf16 CPU program with --invariant 1 measures nothing; with -y 1 it takes
   the paths the newest complete state in -o recorded (header word 26),
   wherever this CPU can run them, so the resumed run goes on with the
   numbers of the run it resumes whatever the load at its start. Rank 0
   reads the header; an unreadable one leaves the choice to the files (the
   resume itself then reports the error). A no-op elsewhere. */
static void request_kernel_paths(const Run* r) {
#if defined(LLMC_BF16) && !defined(LLMC_CUDA)
    const Args* a = &r->a;
    memset(&cpu_gemm_request, 0, sizeof(cpu_gemm_request));
    cpu_gemm_request.invariant = a->invariant;
    if (!a->resume || !a->output_dir || r->comm->rank != 0) return;
    long step = -1;
    char err[ERRLEN] = "", sp[4200];
    if (state_find_latest(a->output_dir, &step, err, ERRLEN) || step < 0) return;
    snprintf(sp, sizeof(sp), "%s/state_%08ld.bin", a->output_dir, step);
    TrainState s;
    if (state_read_header(sp, &s, err, ERRLEN)) return;
    long long w = s.run.kernel_paths;
    if (!(w & STATE_PATHS_RECORDED) || !(w & STATE_PATHS_BF16)) return;
    cpu_gemm_request.resume_have = 1;
    cpu_gemm_request.resume_mask = (int)(w & ((1LL << CPU_MM_NUM) - 1));
    snprintf(cpu_gemm_request.resume_from, sizeof(cpu_gemm_request.resume_from), "%.150s", sp);
#else
    (void)r;
#endif
}

/* ... as text: "the fp32 program's sgemm" or "fwd:fp32,dinp:primitive,..." */
static void kernel_paths_text(long long w, char* out, size_t n) {
    if (!(w & STATE_PATHS_BF16)) { snprintf(out, n, "the fp32 program's sgemm"); return; }
    size_t k = 0;
    out[0] = 0;
    static const char* const names[] = {"fwd", "dinp", "dweight", "lm_fwd", "lm_dinp", "lm_dweight", "attention"};   /* llmc/cpu/matmul.h's classes */
    for (int j = 0; j < 7 && k < n; j++) k += (size_t)snprintf(out + k, n - k, "%s%s:%s", j ? "," : "", names[j], (w >> j) & 1 ? "primitive" : "fp32");
}

#endif /* LLMC_RUN_KERNEL_PATHS_H */
