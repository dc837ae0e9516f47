/*
 llmc/run/calibrate.h: the two calibrations make runs once per program
 and build: --calibrate-workspace (what the backend's libraries take
 beyond the ledger, llmc/fit.h) and --calibrate-matmul (the bf16 matmul
 paths of this CPU, llmc/cpu/matmul_choice.h). One process each.
*/
#ifndef LLMC_RUN_CALIBRATE_H
#define LLMC_RUN_CALIBRATE_H
#include "run.h"

/* ------------------------------------------------------------------------ */
/* --calibrate-workspace: the training workspace of this program and build  */

/* Writes "5" to /proc/self/clear_refs: the process's peak resident set
   (VmHWM) restarts from its current one (Linux 4.0+). 0 where it cannot. */
static int calibration_reset_peak(void) {
    FILE* f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    if (fclose(f) != 0) ok = 0;
    return ok;
}

/* One shape of the workspace calibration: one rank trains cfg at B x T for
   3 steps (random tokens, no data files). *extra: what the backend's
   libraries hold beyond the ledger after a step (the largest VmRSS after a
   step less the VmRSS before the model was allocated and the ledger),
   less the kernels' scratch the fit check models from a run's own shapes
   (the bf16 program's fp32 operand copies as allocated, attention's buffers
   as modelled; *scratch, of it *copies). *transient: what a step holds only
   inside itself (oneDNN's sgemm maps its packing buffers per call and
   unmaps them: backend_preinit's 128 KiB mmap threshold), the largest of
   the second and third steps' peak (VmHWM, reset before the step) over the
   VmRSS before the step (the first step also grows buffers for good);
   *have_peak 0 and *transient 0 where the peak cannot be reset. The kernels'
   own buffers are released at the end. 1 on error (err set). */
static int calibration_shape(Comm* comm, const GPT2Config* cfg, int B, int T, long long* extra_out, long long* transient_out,
                             unsigned long long* scratch_out, unsigned long long* copies_out, int* have_peak, char* err) {
    GPT2Options o = gpt2_default_options();
    unsigned long long base = fit_status_bytes("VmRSS:");
    GPT2 m;
    if (gpt2_init(&m, cfg, comm, &o, B, T, err, ERRLEN) == 0) gpt2_init_random(&m, 1337);
    if (err[0]) return 1;
    int* tok = (int*)malloc_or_die((size_t)(B * T + 1) * sizeof(int), "calibration tokens");
    Rng rg;
    rng_seed(&rg, 7, 11);
    for (int i = 0; i <= B * T; i++) tok[i] = (int)(rng_uniform(&rg) * cfg->vocab_size) % cfg->vocab_size;
    AdamWConfig opt = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    long long extra = 0, transient = 0;
    int peak = 1;
    for (int step = 0; step < 3; step++) {
        unsigned long long before = fit_status_bytes("VmRSS:");
        peak = peak && calibration_reset_peak();
        gpt2_begin_step(&m);
        gpt2_forward(&m, tok, tok + 1, B, T, 1.0f / (B * T));
        gpt2_backward(&m, B, T);
        gpt2_reduce_grads(&m);
        zero_optimizer_step(&m.engine, &opt, step + 1);
        long long e = (long long)fit_status_bytes("VmRSS:") - (long long)base - (long long)m.ledger.current;
        if (e > extra) extra = e;
        long long t = (long long)fit_status_bytes("VmHWM:") - (long long)before;
        if (peak && step > 0 && t > transient) transient = t;
    }
    unsigned long long copies = backend_matmul_copy_bytes(), predicted_copies = 0;
    unsigned long long scratch = backend_predict_kernel_scratch(cfg->num_layers, cfg->channels, cfg->num_heads, m.layout.chunk_rows,
                                                                m.layout.last_rows, B, T, 0, &predicted_copies);
    *scratch_out = scratch - predicted_copies + copies;   /* (the attention buffers as modelled, the copies as allocated) */
    *extra_out = extra - (long long)*scratch_out;
    *transient_out = peak ? transient : 0;
    *copies_out = copies;
    *have_peak = peak;
    free(tok);
    gpt2_free(&m);
    backend_release_kernel_buffers();
    return 0;
}

/* --calibrate-workspace: the training workspace of this program and build
   (the fit check's "workspace", llmc/fit.h), written to
   build/fit/<program><key>.workspace beside the binary (key:
   backend_workspace_key); make runs it once per program and build. Two
   shapes in one process (calibration_shape), for the two regimes of a GPT
   run:
   - the vocabulary-dominated one first, from a clean start (d6, GPT-2's
     50257 tokens, B=4, T=256): what the libraries hold after a step;
   - then the sequence-dominated one (d2, a 256-token vocabulary, B=2,
     T=1024, where the workspace side of the fit check's peak is the
     larger): what its step holds only inside itself, added.
   The figure: d6's held memory plus d2's in-step transient. The fit check
   compares its prediction with the run's peak (VmHWM), which holds the
   transient; the held memory alone missed it where the libraries' per-call
   buffers are mapped rather than kept in the heap: CI on an AVX512_BF16
   machine capped at avx512 calibrated the bf16 program 3.9 MB short of
   what its d2 and d3 runs at T=1024 took (used / predicted 1.033-1.065),
   where this Zen 5 keeps those buffers in the heap (its transient: 0-0.5
   MB). d6's own transient is printed, not added: the fp32 program's sgemm
   packs the 50304-row LM head inside the step (5.7-12 MB on this Zen 5),
   which small-vocabulary runs never hold and which GPT-2-vocabulary runs'
   parameter staging outweighs (d6 -b 4 -t 256: used / predicted 1.001
   with or without it). */
static int run_calibration(Comm* comm) {
    char err[ERRLEN] = "";
    if (comm->world_size != 1) set_err(err, ERRLEN, "--calibrate-workspace: run it as one process (it measures one rank)");
    comm_check_all(comm, err);
    backend_agree_kernels(comm);   /* the matmul paths a run takes (the calibration file when there is one) */
    if (backend_kernels_measured_here())
        set_err(err, ERRLEN, "--calibrate-workspace: no matmul paths of this level and thread count were on file, so this start measured them and "
                "their buffers would count as workspace: run ./train_gpt_cpu_bf16 --calibrate-matmul first (with the same LLMC_CPU_ISA and "
                "OMP_NUM_THREADS; make does)");
    comm_check_all(comm, err);
    backend_init(comm);
    struct { const char* d; int V, B, T; } shapes[2] = {{"d6", 0, 4, 256}, {"d2", 256, 2, 1024}};
    long long ex[2] = {0, 0}, tr[2] = {0, 0};
    unsigned long long sc[2] = {0, 0}, cp[2] = {0, 0};
    int hw[2] = {0, 0};
    for (int k = 0; k < 2 && !err[0]; k++) {
        GPT2Config cfg;
        int bad = 0;
        gpt2_config_descriptor(shapes[k].d, &cfg, &bad, err, ERRLEN);
        if (shapes[k].V) { cfg.vocab_size = shapes[k].V; cfg.padded_vocab_size = (int)round_up((size_t)shapes[k].V, 128); }
        if (!err[0]) calibration_shape(comm, &cfg, shapes[k].B, shapes[k].T, &ex[k], &tr[k], &sc[k], &cp[k], &hw[k], err);
    }
    comm_check_all(comm, err);
    long long extra = ex[0] + tr[1];
    char path[4200];
    char key[64];
    backend_workspace_key(key, sizeof(key));
    if (!fit_workspace_path(path, sizeof(path), key))
        set_err(err, ERRLEN, "--calibrate-workspace: cannot find this program's path (/proc/self/exe)");
    comm_check_all(comm, err);
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash) { *slash = 0; state_mkdir_p(dir); }
    char tmp[4300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int slot = intr_watch_tmp(tmp);   /* written whole or not at all: a signal's exit removes the .tmp (interrupt.h) */
    FILE* f = fopen(tmp, "w");
    int bad_w = !f;
    if (f) { bad_w = fprintf(f, "%lld\n", extra) < 0; bad_w |= fclose(f) != 0; }
    if (bad_w || rename(tmp, path) != 0) { set_err(err, ERRLEN, "--calibrate-workspace: cannot write %s (%s)", path, strerror(errno)); unlink(tmp); }
    intr_unwatch(slot);
    comm_check_all(comm, err);
    printf("calibrated: training workspace %.2f MB beyond the ledger%s: d6 (V=50257 B=4 T=256) holds %.2f MB after a step, d2 (V=256 B=2 T=1024) "
           "%.2f MB more inside its step%s (d6 inside its step: %.2f MB more, not added); 1 rank, 3 steps each; %s: wrote %s\n", extra / 1e6,
           sc[0] || sc[1] ? " and the modelled kernel scratch" : "", ex[0] / 1e6, tr[1] / 1e6,
           hw[1] ? "" : " (not measured: /proc/self/clear_refs cannot reset the peak here)", tr[0] / 1e6, backend_matmul_desc(), path);
    for (int k = 0; k < 2; k++)
        if (sc[k]) printf("calibrated: (%s: the kernels' scratch of that shape, predicted for each run from its shapes: %.2f MB, of it the bf16 matmuls' buffers "
                          "(fp32 copies, scratchpad, packed heads) %.2f MB)\n", shapes[k].d, sc[k] / 1e6, cp[k] / 1e6);
    backend_finalize(comm);
    comm_finalize(comm);
    return 0;
}

/* --calibrate-matmul: the bf16 program times both matmul paths (oneDNN's
   bf16 primitive, the fp32-copy path) on every shape class of d6 and 124M
   and writes the calibration file build/fit/train_gpt_cpu_bf16.matmul
   beside the binary (llmc/cpu/matmul_choice.h); every later start on this
   CPU and build reads it. One process. */
static int run_matmul_calibration(Comm* comm) {
    char err[ERRLEN] = "";
    if (comm->world_size != 1) set_err(err, ERRLEN, "--calibrate-matmul: run it as one process (it measures one rank's cores)");
    comm_check_all(comm, err);
    if (backend_calibrate_kernels(comm, err, ERRLEN)) comm_check_all(comm, err);
    comm_check_all(comm, err);
    comm_finalize(comm);
    return 0;
}

#endif /* LLMC_RUN_CALIBRATE_H */
