/*
 * llmc/cpu/matmul_choice.h -- which path each bf16 matmul class runs on
 * (matmul_bf16.h: oneDNN's bf16 primitive or the fp32-copy path), chosen by
 * measuring both on this CPU, not by a rule from one machine. bf16 program
 * only. Conventions: common.h.
 *
 * The classes (CpuMmClass, matmul_bf16.h): forward, dinp and dweight of the
 * blocks' linear layers and of the LM head, and attention's products. For
 * each, the rate (GFLOP/s) of both paths is measured on the model shapes of
 * two configurations, summed over the shapes of the class (total flops /
 * total time):
 *   d6   (N = B*T = 1024 rows, C = 384)   and   GPT-2 124M (N = 256, C = 768):
 *   blocks: (C -> 3C) qkv, (C -> C) attproj, (C -> 4C) fc, (4C -> C) fcproj
 *   LM head: (C -> 8192), one vocabulary chunk of the trainer's default
 *   attention: B = 4, T = 256, NH = 6 and B = 4, T = 64, NH = 12,
 *              forward + backward, counted as 6 B T^2 C flops (causal)
 * and the class takes the primitive where it is faster than the fp32-copy
 * path by more than CPU_GEMM_MARGIN (2%), else the fp32-copy path (a tie
 * keeps the sums of the fp32 program's sgemm, and noise between two
 * calibrations does not flip a path). Below the level avx512 the primitive
 * cannot run (oneDNN 2.6 has no bf16 matmul below avx512_core): every class
 * takes the fp32-copy path, and the file says so.
 *
 * Where the choice comes from (cpu_gemm_decide, rank 0; every rank then
 * uses rank 0's, backend_agree_kernels in backend.h). The paths are a
 * property of the machine, the program and the thread count: decided once,
 * written, and read by every later run, never measured again per run (a
 * timing taken beside other work is noise, and two runs of one
 * configuration must give the same bits):
 *   1. LLMC_BF16_MATMUL=primitive|fp32 forces one path for every class;
 *   2. some rank's level is below avx512: fp32 for every class;
 *   3. --invariant 1 (cpu_gemm_request): nothing measured, one path per
 *      class whatever the thread count: the linear layers' fixed tiles
 *      (matmul_invariant.h) on the primitive where every rank runs at
 *      avx512_bf16 or above (or LLMC_BF16_MATMUL=primitive forces it),
 *      else on the fp32-copy path (or LLMC_BF16_MATMUL=fp32 forces it);
 *      attention likewise, one sequence per single-threaded task;
 *   4. -y 1 (cpu_gemm_request): the paths the resumed state recorded
 *      (state.h, header word 26), so the resumed run goes on with the
 *      numbers of the run it resumes;
 *   5. the calibration file build/fit/train_gpt_cpu_bf16.matmul beside the
 *      binary (.<level>.matmul under an LLMC_CPU_ISA cap below the CPU;
 *      LLMC_BF16_MATMUL_FILE names another), written by
 *      `./train_gpt_cpu_bf16 --calibrate-matmul` (make runs it once per
 *      build), when it is for this CPU and build: the same CPUID brand,
 *      ISA level, oneDNN ISA, oneDNN version and build id (LLMC_KERNELS_ID:
 *      the Makefile's hash of the CPU kernels' sources and flags), and of
 *      this run's thread count; a file of another count is used where
 *      there is nothing to choose, below avx512, with a line saying whose
 *      threads its rates are;
 *   6. else the file of this thread count beside it, <file>.threads<T>.matmul
 *      (cpu_gemm_thread_file_path; make calibrates 1 thread there, the
 *      count of every rank of a 2-core multi-rank run);
 *   7. else a short measurement (one timed call per shape instead of the
 *      best of 3), written to the main file if it is missing or not this
 *      CPU's, else to the thread count's file, atomically (rename) and
 *      under a lock (<file>.lock: two runs that start together measure
 *      once, the second reads the first's), marked "provisional 1" (taken
 *      at a start-up, maybe beside other work): the start-up line says
 *      so, and --calibrate-matmul (at that thread count; make's rule)
 *      replaces it. Every later run reads it: the paths never depend on
 *      the load of the moment a run starts.
 * Test hook: LLMC_BF16_MATMUL_RATES="fwd=P/F,dinp=P/F,..." (GFLOP/s of the
 * primitive P and of the fp32-copy path F per class; a class not named is
 * 0/0) replaces the timing of steps 5-7 (the selection logic then runs on
 * these figures, where the primitive can run).
 */
#ifndef LLMC_CPU_MATMUL_CHOICE_H
#define LLMC_CPU_MATMUL_CHOICE_H

#ifdef LLMC_BF16
#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../interrupt.h"
#include "attention.h"

#ifndef LLMC_KERNELS_ID
#define LLMC_KERNELS_ID "unknown"
#endif
#define CPU_GEMM_MARGIN 0.02
#define CPU_GEMM_FILE_MAGIC "# llmc-zero bf16 matmul paths, version 1"

static inline double cpu_gemm_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* The identity a calibration file must match: "cpu ...", "level ...",
   "onednn_isa ...", "onednn ...", "build ..." (one per line, as the file
   holds them). */
typedef struct {
    char cpu[80], level[24], onednn_isa[32], onednn[48], build[48];
} CpuGemmIdentity;

static inline void cpu_gemm_identity(CpuGemmIdentity* id) {
    const CpuIsaState* s = cpu_isa_init();
    memset(id, 0, sizeof(*id));
    snprintf(id->cpu, sizeof(id->cpu), "%.79s", s->model);
    snprintf(id->level, sizeof(id->level), "%s", cpu_isa_names[s->level]);
    snprintf(id->onednn_isa, sizeof(id->onednn_isa), "%s", cpu_isa_onednn_name(s->onednn_isa));
    const dnnl_version_t* v = dnnl_version();
    snprintf(id->onednn, sizeof(id->onednn), "%d.%d.%d", v->major, v->minor, v->patch);
    snprintf(id->build, sizeof(id->build), "%s", LLMC_KERNELS_ID);
}

/* The calibration file's path: LLMC_BF16_MATMUL_FILE, else
   <directory of this binary>/build/fit/train_gpt_cpu_bf16.matmul (the
   trainer's; the test program beside it reads the same file: one build id
   covers both), or train_gpt_cpu_bf16.<level>.matmul when LLMC_CPU_ISA
   caps the level below the CPU's (each level keeps its own file, so runs
   at several levels do not overwrite each other's). "" if the binary's
   directory is unknown. */
static inline void cpu_gemm_file_path(char* out, size_t n) {
    const char* e = getenv("LLMC_BF16_MATMUL_FILE");
    if (e && e[0]) { snprintf(out, n, "%s", e); return; }
    out[0] = 0;
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (k <= 0) return;
    exe[k] = 0;
    char* slash = strrchr(exe, '/');
    if (!slash) return;
    *slash = 0;
    const CpuIsaState* s = cpu_isa_init();
    char lv[32] = "";
    if (s->level < s->detected) snprintf(lv, sizeof(lv), ".%s", cpu_isa_names[s->level]);
    snprintf(out, n, "%.3900s/build/fit/train_gpt_cpu_bf16%s.matmul", exe, lv);
}

/* Per class: the primitive where its rate beats the fp32-copy path's by
   more than CPU_GEMM_MARGIN and prim_ok (the primitive can run on every
   rank), else fp32. Pure: the selection the tests check on fake rates. */
static inline void cpu_gemm_select(CpuGemmChoice* c, int prim_ok) {
    for (int k = 0; k < CPU_MM_NUM; k++)
        c->fp32[k] = !(prim_ok && c->rate[0][k] > 0 && c->rate[0][k] > c->rate[1][k] * (1.0 + CPU_GEMM_MARGIN));
}

/* LLMC_BF16_MATMUL_RATES (the test hook above) into c->rate; 1 if set and
   valid, 0 if unset, -1 (message in err) if malformed. */
static inline int cpu_gemm_fake_rates(CpuGemmChoice* c, char* err, size_t errlen) {
    const char* e = getenv("LLMC_BF16_MATMUL_RATES");
    if (!e || !e[0]) return 0;
    for (int k = 0; k < CPU_MM_NUM; k++) c->rate[0][k] = c->rate[1][k] = 0;
    const char* p = e;
    while (*p) {
        char name[32];
        float a, b;
        int used = 0;
        if (sscanf(p, "%31[a-z_]=%f/%f%n", name, &a, &b, &used) != 3 || used <= 0) {
            snprintf(err, errlen, "LLMC_BF16_MATMUL_RATES=%s: must be class=P/F,... (GFLOP/s of the primitive and of the fp32 path; classes fwd dinp dweight lm_fwd lm_dinp lm_dweight attention)", e);
            return -1;
        }
        int k = 0;
        while (k < CPU_MM_NUM && strcmp(name, cpu_mm_names[k])) k++;
        if (k == CPU_MM_NUM) { snprintf(err, errlen, "LLMC_BF16_MATMUL_RATES: unknown class %s (fwd dinp dweight lm_fwd lm_dinp lm_dweight attention)", name); return -1; }
        c->rate[0][k] = a; c->rate[1][k] = b;
        p += used;
        if (*p == ',') p++;
    }
    return 1;
}

/* oneDNN's implementation of the bf16 matmul primitive on a d6 qkv shape
   (1024 x 384 -> 1152, bias): its primitive descriptor is created and
   queried (dnnl_query_impl_info_str, e.g. "brg:avx512_core_bf16"), nothing
   runs. "" where oneDNN has none (below avx512_core). */
static inline void cpu_gemm_probe_impl(char* out, size_t n) {
    out[0] = 0;
    if (cpu_isa() < CPU_ISA_AVX512) return;
    cpu_gemm_init();
    dnnl_memory_desc_t a, b, c, bias;
    long long sa[3] = {0, 384, 1}, sb[3] = {0, 1, 384}, sc[3] = {0, 1152, 1}, sbias[3] = {1152, 1152, 1};
    cpu_gemm_md(&a, 1, 1024, 384, sa);
    cpu_gemm_md(&b, 1, 384, 1152, sb);
    cpu_gemm_md(&c, 1, 1024, 1152, sc);
    cpu_gemm_md(&bias, 1, 1, 1152, sbias);
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &a, &b, &bias, &c) != dnnl_success) return;
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &desc, NULL, cpu_gemm_state.engine, NULL) != dnnl_success) return;
    const char* impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl) snprintf(out, n, "%s", impl);
    dnnl_primitive_desc_destroy(pd);
}

/* ------------------------------------------------------------------------ */
/* the measurement                                                          */

static inline void cpu_gemm_fill(floatX* p, size_t n, unsigned seed) {
    unsigned long long s = 0x9E3779B97F4A7C15ULL * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        p[i] = stx((float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0));
    }
}
static inline floatX* cpu_gemm_xalloc(size_t n, unsigned seed) {
    floatX* p = (floatX*)aligned_alloc(64, (n * sizeof(floatX) + 63) / 64 * 64);
    if (!p) { fprintf(stderr, "error: out of memory: %zu bytes for the matmul measurement\n", n * sizeof(floatX)); exit(1); }
    cpu_gemm_fill(p, n, seed);
    return p;
}

/* Seconds of one product of class k (a block or LM-head shape: N rows, C
   in, OC out) on the path in use, best of `reps` after one warm-up call
   (it creates the primitive); *flops gets its flops. */
static inline double cpu_gemm_time_linear(int k, int N, int C, int OC, int reps, double* flops) {
    int base = k % 3, lm = k >= CPU_MM_LM_FWD;
    floatX* inp = cpu_gemm_xalloc((size_t)N * C, 1);
    floatX* w = cpu_gemm_xalloc((size_t)OC * C, 2);
    floatX* out = cpu_gemm_xalloc((size_t)N * OC, 3);
    floatX* bias = cpu_gemm_xalloc((size_t)OC, 4);
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = cpu_gemm_now();
        if (base == 0) cpu_gemm_bf16(k, 0, 1, N, OC, C, inp, C, w, C, 0, out, OC, lm ? NULL : bias);
        else if (base == 1) cpu_gemm_bf16(k, 0, 0, N, C, OC, out, OC, w, C, 1, inp, C, NULL);
        else cpu_gemm_bf16(k, 1, 0, OC, C, N, out, OC, inp, C, 1, w, C, NULL);
        double t = cpu_gemm_now() - t0;
        if (r > 0 && t < best) best = t;
    }
    free(inp); free(w); free(out); free(bias);
    *flops = 2.0 * N * (double)C * OC;
    return best;
}

/* Seconds of attention forward + backward (B, T, C, NH) on the path in
   use, best of `reps` after a warm-up; *flops = 6 B T^2 C (causal). */
static inline double cpu_gemm_time_attention(int B, int T, int C, int NH, int reps, double* flops) {
    size_t BT = (size_t)B * T, tt = (size_t)B * NH * T * T;
    floatX *qkv = cpu_gemm_xalloc(3 * BT * C, 5), *out = cpu_gemm_xalloc(BT * C, 6), *dout = cpu_gemm_xalloc(BT * C, 7);
    floatX *dqkv = cpu_gemm_xalloc(3 * BT * C, 8), *pre = cpu_gemm_xalloc(tt, 9), *att = cpu_gemm_xalloc(tt, 10);
    floatX *dpre = cpu_gemm_xalloc(tt, 11), *datt = cpu_gemm_xalloc(tt, 12);
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        memset(dqkv, 0, 3 * BT * C * sizeof(floatX));
        double t0 = cpu_gemm_now();
        attention_forward(out, pre, att, qkv, B, T, C, NH);
        attention_backward(dqkv, dpre, datt, dout, qkv, att, B, T, C, NH);
        double t = cpu_gemm_now() - t0;
        if (r > 0 && t < best) best = t;
    }
    free(qkv); free(out); free(dout); free(dqkv); free(pre); free(att); free(dpre); free(datt);
    *flops = 6.0 * B * (double)T * T * C;
    return best;
}

/* GFLOP/s of class k on path fp32 (1) or the primitive (0): the class's
   shapes of d6 and 124M (see the top), total flops / total seconds. */
static inline double cpu_gemm_rate(int k, int fp32, int reps) {
    static const int cfg[2][4] = {{1024, 384, 4, 6}, {256, 768, 4, 12}};   /* N, C, B, NH */
    int saved = cpu_gemm_state.fp32[k];
    cpu_gemm_state.fp32[k] = fp32;
    double fl = 0, sec = 0, f;
    for (int c = 0; c < 2; c++) {
        int N = cfg[c][0], C = cfg[c][1];
        if (k == CPU_MM_ATTENTION) {
            sec += cpu_gemm_time_attention(cfg[c][2], N / cfg[c][2], C, cfg[c][3], reps, &f); fl += f;
        } else if (k >= CPU_MM_LM_FWD) {
            sec += cpu_gemm_time_linear(k, N, C, 8192, reps, &f); fl += f;
        } else {
            const int io[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
            for (int s = 0; s < 4; s++) { sec += cpu_gemm_time_linear(k, N, io[s][0], io[s][1], reps, &f); fl += f; }
        }
    }
    cpu_gemm_state.fp32[k] = saved;
    return fl / sec * 1e-9;
}

/* Frees the fp32-copy path's operand buffers (the shared operand and the
   threads' panels) that a measurement grew: the run then holds only what
   its own classes need, as the fit check predicts them
   (cpu_gemm_copy_predict_model; with the primitive for every class, none). */
static inline void cpu_gemm_drop_copies(void) {
    /* and the primitive path's: the cached plans (each sized its scratchpad
       to the shared buffer), the scratchpad, attention's packed heads */
    for (int i = 0; i < CPU_GEMM_CACHE; i++) cpu_gemm_plan_destroy(&cpu_gemm_state.cache[i]);
    cpu_gemm_state.next = 0;
    free(cpu_gemm_state.scratch);
    cpu_gemm_state.scratch = NULL;
    cpu_gemm_state.scratch_bytes = 0;
    free(cpu_gemm_state.att_buf);
    cpu_gemm_state.att_buf = NULL;
    cpu_gemm_state.att_cap = 0;
    free(cpu_gemm_state.shared);
    cpu_gemm_state.shared = NULL;
    cpu_gemm_state.shared_cap = 0;
    for (int i = 0; i < 256; i++) {
        free(cpu_gemm_state.tbuf[i]);
        cpu_gemm_state.tbuf[i] = NULL;
        cpu_gemm_state.tcap[i] = 0;
    }
    malloc_trim(0);   /* back to the system: a later VmRSS (the fit check's baseline, --calibrate-workspace) does not hold them */
}

/* Measures both paths of every class (the primitive only where prim_ok)
   with the best of `reps` timed calls per shape, or takes
   LLMC_BF16_MATMUL_RATES; then selects. 0, or -1 with err (a malformed
   hook). */
static inline int cpu_gemm_measure(CpuGemmChoice* c, int prim_ok, int reps, char* err, size_t errlen) {
    int fake = cpu_gemm_fake_rates(c, err, errlen);
    if (fake < 0) return -1;
    c->threads = cpu_num_threads();
    if (!fake)
        for (int k = 0; k < CPU_MM_NUM; k++) {
            c->rate[1][k] = (float)cpu_gemm_rate(k, 1, reps);
            c->rate[0][k] = prim_ok ? (float)cpu_gemm_rate(k, 0, reps) : 0.0f;
        }
    cpu_gemm_select(c, prim_ok);
    if (prim_ok) cpu_gemm_probe_impl(c->impl, sizeof(c->impl));
    cpu_gemm_drop_copies();
    return 0;
}

/* ------------------------------------------------------------------------ */
/* the calibration file                                                     */

/* Writes c with this CPU's identity to path (a temporary file renamed over
   it; the directory made if missing). 0, or -1 with err. */
static inline int cpu_gemm_write_file(const char* path, const CpuGemmChoice* c, int prim_ok, char* err, size_t errlen) {
    char dir[4500];
    snprintf(dir, sizeof(dir), "%s", path);
    for (char* p = dir + 1; *p; p++)
        if (*p == '/') { *p = 0; mkdir(dir, 0755); *p = '/'; }
    char tmp[4600];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int slot = intr_watch_tmp(tmp);   /* an exit now (a signal during the measurement, interrupt.h) removes it */
    FILE* f = fopen(tmp, "w");
    if (!f) { intr_unwatch(slot); snprintf(err, errlen, "cannot write %.100s (%s)", tmp, strerror(errno)); return -1; }
    CpuGemmIdentity id;
    cpu_gemm_identity(&id);
    fprintf(f, "%s (./train_gpt_cpu_bf16 --calibrate-matmul, or a start-up that found none; llmc/cpu/matmul_choice.h)\n", CPU_GEMM_FILE_MAGIC);
    fprintf(f, "cpu %s\nlevel %s\nonednn_isa %s\nonednn %s\nbuild %s\nthreads %d\nimpl %s\n", id.cpu, id.level, id.onednn_isa, id.onednn,
            id.build, c->threads, c->impl[0] ? c->impl : "-");
    fprintf(f, "# provisional 1: measured at a start-up (one timed call per shape, maybe beside other work); make and --calibrate-matmul replace it\n"
               "provisional %d\n", c->provisional ? 1 : 0);
    fprintf(f, "# class, GFLOP/s of oneDNN's bf16 primitive (0: %s), GFLOP/s of the fp32-copy path, the path taken\n",
            prim_ok ? "not measured" : "unavailable on this CPU (oneDNN 2.6 needs AVX512_CORE)");
    for (int k = 0; k < CPU_MM_NUM; k++)
        fprintf(f, "class %s %.2f %.2f %s\n", cpu_mm_names[k], (double)c->rate[0][k], (double)c->rate[1][k], c->fp32[k] ? "fp32" : "primitive");
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write %.100s (%s)", path, strerror(errno));
        unlink(tmp);
        intr_unwatch(slot);
        return -1;
    }
    intr_unwatch(slot);
    return 0;
}

/* Reads path into c (rates, paths, threads, impl) if it is a calibration
   file of this CPU and build: returns 1; else 0 with the reason in why
   ("missing", "for another CPU: ...", ...). */
static inline int cpu_gemm_read_file(const char* path, CpuGemmChoice* c, char* why, size_t wn) {
    FILE* f = path[0] ? fopen(path, "r") : NULL;
    if (!f) { snprintf(why, wn, "%s", path[0] ? "missing" : "no path (the binary's directory is unknown)"); return 0; }
    CpuGemmIdentity id, have;
    cpu_gemm_identity(&id);
    memset(&have, 0, sizeof(have));
    char line[512];
    int ok = 0, classes = 0, bad = 0;
    if (fgets(line, sizeof(line), f) && !strncmp(line, CPU_GEMM_FILE_MAGIC, strlen(CPU_GEMM_FILE_MAGIC))) ok = 1;
    while (ok && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '#' || !line[0]) continue;
        char* sp = strchr(line, ' ');
        if (!sp) { bad = 1; break; }
        *sp = 0;
        const char *key = line, *val = sp + 1;
        if (!strcmp(key, "cpu")) snprintf(have.cpu, sizeof(have.cpu), "%s", val);
        else if (!strcmp(key, "level")) snprintf(have.level, sizeof(have.level), "%s", val);
        else if (!strcmp(key, "onednn_isa")) snprintf(have.onednn_isa, sizeof(have.onednn_isa), "%s", val);
        else if (!strcmp(key, "onednn")) snprintf(have.onednn, sizeof(have.onednn), "%s", val);
        else if (!strcmp(key, "build")) snprintf(have.build, sizeof(have.build), "%s", val);
        else if (!strcmp(key, "threads")) c->threads = atoi(val);
        else if (!strcmp(key, "provisional")) c->provisional = atoi(val) != 0;
        else if (!strcmp(key, "impl")) snprintf(c->impl, sizeof(c->impl), "%s", strcmp(val, "-") ? val : "");
        else if (!strcmp(key, "class")) {
            char name[32], p[16];
            float a, b;
            if (sscanf(val, "%31s %f %f %15s", name, &a, &b, p) != 4) { bad = 1; break; }
            int k = 0;
            while (k < CPU_MM_NUM && strcmp(name, cpu_mm_names[k])) k++;
            if (k == CPU_MM_NUM || (strcmp(p, "fp32") && strcmp(p, "primitive"))) { bad = 1; break; }
            c->rate[0][k] = a; c->rate[1][k] = b; c->fp32[k] = !strcmp(p, "fp32");
            classes |= 1 << k;
        }
    }
    fclose(f);
    if (!ok || bad || classes != (1 << CPU_MM_NUM) - 1) { snprintf(why, wn, "not a complete calibration file"); return 0; }
    if (strcmp(have.cpu, id.cpu)) { snprintf(why, wn, "for another CPU (%s; this one: %s)", have.cpu, id.cpu); return 0; }
    if (strcmp(have.level, id.level)) { snprintf(why, wn, "for the level %s (this run: %s)", have.level, id.level); return 0; }
    if (strcmp(have.onednn_isa, id.onednn_isa) || strcmp(have.onednn, id.onednn)) {
        snprintf(why, wn, "for oneDNN %s at %s (this run: %s at %s)", have.onednn, have.onednn_isa, id.onednn, id.onednn_isa);
        return 0;
    }
    if (!strcmp(id.build, "unknown") || strcmp(have.build, id.build)) { snprintf(why, wn, "for another build (%s; this one: %s)", have.build, id.build); return 0; }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* the decision (rank 0), the calibration, the start-up line                */

/* What the run asks of the decision beyond the calibration files (set by
   the trainer before backend_agree_kernels, from its flags, which every
   rank shares): --invariant 1 measures nothing and takes one path per
   class whatever the thread count (the decision's item 3 above); -y 1 takes the paths the resumed state recorded
   (resume_mask: bit k = class k on the primitive) wherever this CPU can
   run them (every rank at avx512 or above), whatever a measurement would
   say, so a resume continues on the numbers of the run it resumes. */
typedef struct {
    int invariant;
    int resume_have;            /* 1: resume_mask holds the saved run's paths */
    int resume_mask;
    char resume_from[160];      /* the state file, for the start-up line */
} CpuGemmRequest;
static CpuGemmRequest cpu_gemm_request;

/* The calibration file of `threads` OpenMP threads beside the main one
   (path): "<path without .matmul>.threads<T>.matmul". The main file holds
   the thread count make calibrated at; every other count a run meets gets
   its own file, written once (provisional at a start-up, calibrated by
   --calibrate-matmul at that count) and read by every later run. */
static inline void cpu_gemm_thread_file_path(const char* path, int threads, char* out, size_t n) {
    size_t L = strlen(path);
    if (L > 7 && !strcmp(path + L - 7, ".matmul")) snprintf(out, n, "%.*s.threads%d.matmul", (int)(L - 7), path, threads);
    else snprintf(out, n, "%s.threads%d", path, threads);
}

/* An exclusive lock on "<path>.lock" (made if missing), so that two runs
   that start together without a file of their thread count measure once:
   the second waits and reads what the first wrote. Returns the fd to pass
   to cpu_gemm_unlock_file, or -1 where the file system has no locks (then
   each measures and the last rename wins; the two files are complete). */
static inline int cpu_gemm_lock_file(const char* path) {
    char lp[4400];
    snprintf(lp, sizeof(lp), "%s.lock", path);
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        close(fd);
        return -1;
    }
    return fd;
}
static inline void cpu_gemm_unlock_file(int fd) {
    if (fd >= 0) { flock(fd, LOCK_UN); close(fd); }
}

/* Rank 0's decision for every rank (the steps at the top). lowest: the
   lowest ISA level over the ranks; cpu_gemm_request: the run's
   --invariant 1 and -y 1. Never exits: a malformed test hook leaves a
   message in err (the caller ends every rank). */
static inline void cpu_gemm_decide(CpuGemmChoice* c, int lowest, char* err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    char path[4200], why[600];
    cpu_gemm_file_path(path, sizeof(path));
    int f = cpu_gemm_choose(err, errlen);   /* (the ranks checked their own value already; rank 0's decides) */
    if (f < 0) return;
    int prim_ok = lowest >= CPU_ISA_AVX512;
    if (f == 0 && !prim_ok) {   /* rank 0 forces the primitive, a rank runs below avx512 (it checked only its own value) */
        snprintf(err, errlen, "LLMC_BF16_MATMUL=primitive on rank 0, but a rank runs at level %s: oneDNN's bf16 matmul primitive needs "
                 "AVX512_CORE on every rank (unset LLMC_BF16_MATMUL, or set it to fp32)", cpu_isa_names[lowest]);
        return;
    }
    const CpuGemmRequest* q = &cpu_gemm_request;
    if (q->invariant && f != 0) {   /* one path per class whatever the thread count or the file: nothing to measure */
        int inv_prim = f == 2 && lowest >= CPU_ISA_AVX512_BF16;
        c->how = CPU_GEMM_BY_INVARIANT;
        for (int k = 0; k < CPU_MM_NUM; k++) c->fp32[k] = !inv_prim;
        if (inv_prim) cpu_gemm_probe_impl(c->impl, sizeof(c->impl));
        if (inv_prim)
            snprintf(c->where, sizeof(c->where), "--invariant 1: every class on fixed single-threaded tiles of the primitive (the level is "
                     "avx512_bf16 or above on every rank; attention one sequence per tile); nothing measured");
        else
            snprintf(c->where, sizeof(c->where), "--invariant 1: the fp32-copy path on fixed tiles for every class (%s); nothing measured",
                     f == 1 ? "LLMC_BF16_MATMUL=fp32" : "the primitive's tiles need the level avx512_bf16 on every rank");
        return;
    }
    if (q->invariant) {   /* LLMC_BF16_MATMUL=primitive: every class's tiles on the primitive */
        c->how = CPU_GEMM_BY_INVARIANT;
        for (int k = 0; k < CPU_MM_NUM; k++) c->fp32[k] = 0;
        cpu_gemm_probe_impl(c->impl, sizeof(c->impl));
        snprintf(c->where, sizeof(c->where), "--invariant 1 with LLMC_BF16_MATMUL=primitive: every class on fixed single-threaded tiles "
                 "of the primitive (attention one sequence per tile); nothing measured");
        return;
    }
    if (f != 2) {
        c->how = CPU_GEMM_BY_ENV;
        for (int k = 0; k < CPU_MM_NUM; k++) c->fp32[k] = f;
        if (!f) cpu_gemm_probe_impl(c->impl, sizeof(c->impl));
        snprintf(c->where, sizeof(c->where), "LLMC_BF16_MATMUL=%s", f ? "fp32" : "primitive");
        return;
    }
    int threads = cpu_num_threads();
    int have = cpu_gemm_read_file(path, c, why, sizeof(why));
    const char* prov = have && c->provisional ? "; provisional: measured at a start-up, `./train_gpt_cpu_bf16 --calibrate-matmul` (make) replaces it" : "";
    if (!prim_ok) {   /* the rates of the file (if it is this CPU's) say what the fp32 path does; nothing to choose */
        int other_threads = have && c->threads != threads;
        if (!have) memset(c, 0, sizeof(*c));
        c->how = CPU_GEMM_BY_UNAVAILABLE;
        for (int k = 0; k < CPU_MM_NUM; k++) { c->fp32[k] = 1; c->rate[0][k] = 0; }
        c->impl[0] = 0;
        if (have && other_threads)
            snprintf(c->where, sizeof(c->where), "%.400s; its rates are of %d thread%s, this run has %d: used, there is nothing to choose at this level%s",
                     path, c->threads, c->threads == 1 ? "" : "s", threads, prov);
        else if (have) snprintf(c->where, sizeof(c->where), "%.400s%s", path, prov);
        else snprintf(c->where, sizeof(c->where), "%.400s: %.200s", path, why);
        return;
    }
    if (q->resume_have) {   /* the resumed run's paths: this CPU can run them (prim_ok) */
        memset(c, 0, sizeof(*c));
        c->how = CPU_GEMM_BY_STATE;
        for (int k = 0; k < CPU_MM_NUM; k++) c->fp32[k] = !((q->resume_mask >> k) & 1);
        if (q->resume_mask) cpu_gemm_probe_impl(c->impl, sizeof(c->impl));
        snprintf(c->where, sizeof(c->where), "the paths the resumed state recorded (%.300s), not measured", q->resume_from);
        return;
    }
    if (have && c->threads == threads) {
        c->how = CPU_GEMM_BY_FILE;
        snprintf(c->where, sizeof(c->where), "%.400s%s", path, prov);
        return;
    }
    /* no file of this thread count yet: the main file when it is missing or
       not this CPU's, else the thread count's own file; read again under
       its lock (a run that started beside this one may have written it),
       else measured (one timed call per shape) and written provisional */
    char target[4300];
    if (have) cpu_gemm_thread_file_path(path, threads, target, sizeof(target));
    else snprintf(target, sizeof(target), "%s", path);
    int lk = cpu_gemm_lock_file(target);
    char why2[600] = "";
    CpuGemmChoice keep = *c;   /* the main file's (for the line below) */
    if (cpu_gemm_read_file(target, c, why2, sizeof(why2)) && c->threads == threads) {
        cpu_gemm_unlock_file(lk);
        c->how = CPU_GEMM_BY_FILE;
        snprintf(c->where, sizeof(c->where), "%.400s%s", target,
                 c->provisional ? "; provisional: measured at a start-up, `./train_gpt_cpu_bf16 --calibrate-matmul` (make) replaces it" : "");
        return;
    }
    if (have) snprintf(why, sizeof(why), "for %d thread%s (this run: %d)", keep.threads, keep.threads == 1 ? "" : "s", threads);
    memset(c, 0, sizeof(*c));
    double t0 = cpu_gemm_now();
    if (cpu_gemm_measure(c, 1, 1, err, errlen)) { cpu_gemm_unlock_file(lk); return; }
    c->how = CPU_GEMM_BY_MEASURED;
    c->provisional = 1;
    char werr[150] = "";
    int w = cpu_gemm_write_file(target, c, 1, werr, sizeof(werr));
    cpu_gemm_unlock_file(lk);
    snprintf(c->where, sizeof(c->where), "measured at start-up in %.1f s: the calibration file %.180s is %.100s; %.120s%s%.180s", cpu_gemm_now() - t0,
             path, why, w ? werr : "written for the next start, provisional (--calibrate-matmul replaces it)", !w && have ? " as " : "",
             !w && have ? target : "");
}

/* --calibrate-matmul: measures every class on both paths (best of 3 per
   shape; the primitive only at avx512 and above), selects, writes the
   calibration file and prints what it found. One process. 0, or -1 with
   err. */
static inline int cpu_gemm_calibrate(char* err, size_t errlen) {
    char path[4400];
    cpu_gemm_file_path(path, sizeof(path));
    if (!path[0]) { snprintf(err, errlen, "--calibrate-matmul: the binary's directory is unknown (set LLMC_BF16_MATMUL_FILE)"); return -1; }
    CpuGemmChoice c;
    memset(&c, 0, sizeof(c));
    int prim_ok = cpu_isa() >= CPU_ISA_AVX512;
    double t0 = cpu_gemm_now();
    /* the main file, unless it is this CPU's and of another thread count:
       then this count's own file (make calibrates its count and 1) */
    CpuGemmChoice m;
    char why[600];
    memset(&m, 0, sizeof(m));
    if (cpu_gemm_read_file(path, &m, why, sizeof(why)) && m.threads != cpu_num_threads()) {
        char t[4300];
        cpu_gemm_thread_file_path(path, cpu_num_threads(), t, sizeof(t));
        snprintf(path, sizeof(path), "%s", t);
    }
    if (cpu_gemm_measure(&c, prim_ok, 3, err, errlen)) return -1;
    c.provisional = 0;   /* the calibration: replaces a provisional file */
    int lk = cpu_gemm_lock_file(path);
    int w = cpu_gemm_write_file(path, &c, prim_ok, err, errlen);
    cpu_gemm_unlock_file(lk);
    if (w) return -1;
    c.how = CPU_GEMM_BY_FILE;
    snprintf(c.where, sizeof(c.where), "%.400s", path);
    cpu_gemm_apply(&c);
    printf("calibrated: bf16 matmul paths in %.1f s, %d thread%s (GFLOP/s of oneDNN's bf16 primitive / of the fp32-copy path -> the path):",
           cpu_gemm_now() - t0, c.threads, c.threads == 1 ? "" : "s");
    for (int k = 0; k < CPU_MM_NUM; k++)
        printf(" %s %.0f/%.0f -> %s%s", cpu_mm_names[k], (double)c.rate[0][k], (double)c.rate[1][k], c.fp32[k] ? "fp32" : "primitive",
               k + 1 < CPU_MM_NUM ? "," : "");
    printf("%s: wrote %s\n", prim_ok ? "" : "; primitive: unavailable on this CPU (oneDNN 2.6 needs AVX512_CORE)", path);
    return 0;
}

/* The start-up line "matmul: ..." of the bf16 program: the path of every
   class, the rates that decided it, and where the decision came from. */
static inline void cpu_gemm_describe(char* out, size_t n) {
    cpu_gemm_init();
    const CpuGemmChoice* c = &cpu_gemm_state.choice;
    const char* mode = cpu_gemm_mode();
    char prim[160];
    snprintf(prim, sizeof(prim), "oneDNN's bf16 matmul primitive (%s%s, oneDNN ISA %s)", c->impl[0] ? "implementation " : "",
             c->impl[0] ? c->impl : "implementation not probed", cpu_isa_onednn_name(cpu_isa_state.onednn_isa));
    const char* copy = "oneDNN's fp32 sgemm on exact fp32 copies of the bf16 operands, rounded once to bf16";
    size_t k = 0;
    if (!strcmp(mode, "fp32")) k += (size_t)snprintf(out + k, n - k, "%s, every class", copy);
    else if (!strcmp(mode, "primitive")) k += (size_t)snprintf(out + k, n - k, "%s, fp32 accumulation, every class", prim);
    else k += (size_t)snprintf(out + k, n - k, "per class: primitive = %s, fp32 = %s", prim, copy);
    int rates = 0;
    for (int j = 0; j < CPU_MM_NUM; j++) rates |= c->rate[0][j] > 0 || c->rate[1][j] > 0;
    switch (c->how) {
        case CPU_GEMM_BY_ENV: k += (size_t)snprintf(out + k, n - k, " (forced by %s)", c->where); break;
        case CPU_GEMM_BY_RULE: k += (size_t)snprintf(out + k, n - k, " (%s)", c->where); break;
        case CPU_GEMM_BY_UNAVAILABLE:
            k += (size_t)snprintf(out + k, n - k, "; primitive: unavailable on this CPU (oneDNN 2.6 needs AVX512_CORE%s)",
                                  cpu_isa() >= CPU_ISA_AVX512 ? " on every rank; a rank runs below it" : "");
            break;
        default: break;
    }
    if (k < n && rates) {
        k += (size_t)snprintf(out + k, n - k, "; GFLOP/s %s, %d thread%s:", c->how == CPU_GEMM_BY_UNAVAILABLE ? "of the fp32 path" : "primitive/fp32",
                              c->threads, c->threads == 1 ? "" : "s");
        for (int j = 0; j < CPU_MM_NUM && k < n; j++) {
            if (c->how == CPU_GEMM_BY_UNAVAILABLE) k += (size_t)snprintf(out + k, n - k, " %s %.0f", cpu_mm_names[j], (double)c->rate[1][j]);
            else k += (size_t)snprintf(out + k, n - k, " %s %s %.0f/%.0f", cpu_mm_names[j], c->fp32[j] ? "fp32" : "primitive",
                                       (double)c->rate[0][j], (double)c->rate[1][j]);
        }
    }
    if (k < n && (c->how == CPU_GEMM_BY_FILE || c->how == CPU_GEMM_BY_MEASURED || c->how == CPU_GEMM_BY_UNAVAILABLE ||
                  c->how == CPU_GEMM_BY_STATE || c->how == CPU_GEMM_BY_INVARIANT))
        k += (size_t)snprintf(out + k, n - k, " (%s)", c->where);
}

/* "fwd:fp32,dinp:primitive,...": the paths, for the agreed configuration
   text and runs.txt */
static inline void cpu_gemm_paths_text(char* out, size_t n) {
    cpu_gemm_init();
    size_t k = 0;
    out[0] = 0;
    for (int j = 0; j < CPU_MM_NUM && k < n; j++)
        k += (size_t)snprintf(out + k, n - k, "%s%s:%s", j ? "," : "", cpu_mm_names[j], cpu_gemm_state.fp32[j] ? "fp32" : "primitive");
}

static const char* const cpu_gemm_how_names[] = {"rule", "LLMC_BF16_MATMUL", "primitive-unavailable", "calibration-file", "measured-at-start",
                                                  "resumed-state", "invariant"};

#endif /* LLMC_BF16 */
#endif /* LLMC_CPU_MATMUL_CHOICE_H */
