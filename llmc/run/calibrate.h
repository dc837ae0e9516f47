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

/* What the backend's libraries take during training beyond the ledger (the
   fit check's "workspace", llmc/fit.h): one rank trains d6 (B=4, T=256,
   random tokens, no data files) for 3 steps; the largest VmRSS after a step
   minus the VmRSS before the model was allocated minus the ledger is
   written to build/fit/<program>.workspace beside the binary. make runs it
   once per program and build. */
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
    GPT2Config cfg;
    int bad = 0;
    gpt2_config_descriptor("d6", &cfg, &bad, err, ERRLEN);
    const int B = 4, T = 256;
    GPT2Options o = gpt2_default_options();
    unsigned long long base = fit_status_bytes("VmRSS:");
    GPT2 m;
    if (gpt2_init(&m, &cfg, comm, &o, B, T, err, ERRLEN) == 0) gpt2_init_random(&m, 1337);
    comm_check_all(comm, err);
    int* tok = (int*)malloc_or_die((size_t)(B * T + 1) * sizeof(int), "calibration tokens");
    Rng rg;
    rng_seed(&rg, 7, 11);
    for (int i = 0; i <= B * T; i++) tok[i] = (int)(rng_uniform(&rg) * cfg.vocab_size) % cfg.vocab_size;
    AdamWConfig opt = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    long long extra = 0;
    for (int step = 0; step < 3; step++) {
        gpt2_begin_step(&m);
        gpt2_forward(&m, tok, tok + 1, B, T, 1.0f / (B * T));
        gpt2_backward(&m, B, T);
        gpt2_reduce_grads(&m);
        zero_optimizer_step(&m.engine, &opt, step + 1);
        long long e = (long long)fit_status_bytes("VmRSS:") - (long long)base - (long long)m.ledger.current;
        if (e > extra) extra = e;
    }
    /* the matmul scratch the fit check models from a run's shapes (the bf16
       program's fp32 operand copies) is not part of the calibrated figure */
    unsigned long long copies = backend_matmul_copy_bytes(), predicted_copies = 0;
    unsigned long long scratch = backend_predict_kernel_scratch(cfg.num_layers, cfg.channels, cfg.num_heads, m.layout.chunk_rows, m.layout.last_rows,
                                                                B, T, 0, &predicted_copies);
    extra -= (long long)(scratch - predicted_copies + copies);   /* (the attention buffers as modelled, the copies as allocated) */
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
    printf("calibrated: training workspace %.2f MB beyond the ledger%s (d6, B=%d, T=%d, 1 rank, 3 steps, %s): wrote %s\n", extra / 1e6,
           scratch ? " and the modelled kernel scratch" : "", B, T, backend_matmul_desc(), path);
    if (scratch) printf("calibrated: (the kernels' scratch of this shape, predicted for each run from its shapes: %.2f MB, of it the bf16 matmuls' buffers (fp32 copies, "
                        "scratchpad, packed heads) %.2f MB)\n", (scratch - predicted_copies + copies) / 1e6, copies / 1e6);
    free(tok);
    gpt2_free(&m);
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
