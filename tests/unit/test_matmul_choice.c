/*
 tests/unit/test_matmul_choice.c -- the bf16 program's choice of matmul
 path per shape class (llmc/cpu/matmul_choice.h), without MPI and without
 timing: the selection on given rates (the 2% band, the primitive refused
 where it cannot run), the LLMC_BF16_MATMUL_RATES hook, the calibration
 file (written, read back, refused for another CPU, level, oneDNN or
 build, or when incomplete), rank 0's decision (the variable, the lowest
 level over the ranks, the file, a start-up "measurement" on fake rates
 that writes the file), a per-class decision applied to the kernels
 (matmul_forward / backward take the class of the block or the LM head),
 and the start-up line (the path, the rates, never "AMX" below amx; the
 primitive's oneDNN implementation where it can run, skipped elsewhere).
 Build: gcc -O2 -std=gnu11 -fopenmp -march=x86-64-v3 -I. -DLLMC_BF16
        -DLLMC_KERNELS_ID='"test"' tests/unit/test_matmul_choice.c -ldnnl -lm
*/
#include "llmc/cpu/kernels.h"
#include "tests/check.h"

static void fake(CpuGemmChoice* c, const float* prim, const float* fp32) {
    memset(c, 0, sizeof(*c));
    for (int k = 0; k < CPU_MM_NUM; k++) { c->rate[0][k] = prim[k]; c->rate[1][k] = fp32[k]; }
}

static void test_select(void) {
    check_group_begin();
    /* fwd: primitive 1.5x; dinp: fp32 faster; dweight: +1% (inside the 2% band);
       lm_fwd: +3%; lm_dinp: primitive not measured (0); lm_dweight: equal;
       attention: primitive 1.2x */
    const float prim[CPU_MM_NUM] = {300, 100, 202, 206, 0, 150, 120};
    const float fp32[CPU_MM_NUM] = {200, 200, 200, 200, 200, 150, 100};
    const int want[CPU_MM_NUM] = {0, 1, 1, 0, 1, 1, 0};
    CpuGemmChoice c;
    fake(&c, prim, fp32);
    cpu_gemm_select(&c, 1);
    for (int k = 0; k < CPU_MM_NUM; k++)
        CHECK(c.fp32[k] == want[k], "class %s: path %s, want %s (primitive %.0f, fp32 %.0f GFLOP/s)", cpu_mm_names[k],
              c.fp32[k] ? "fp32" : "primitive", want[k] ? "fp32" : "primitive", (double)prim[k], (double)fp32[k]);
    cpu_gemm_select(&c, 0);   /* the primitive cannot run on some rank: fp32 whatever the rates */
    for (int k = 0; k < CPU_MM_NUM; k++) CHECK(c.fp32[k] == 1, "class %s: primitive taken where it cannot run", cpu_mm_names[k]);
    check_group_end("selection: faster by > 2% takes the primitive; else, or unavailable, fp32");

    check_group_begin();
    setenv("LLMC_BF16_MATMUL_RATES", "fwd=300/200,attention=50/80,lm_dweight=400/100", 1);
    char err[512] = "";
    CHECK(cpu_gemm_fake_rates(&c, err, sizeof(err)) == 1, "valid hook refused: %s", err);
    CHECK(c.rate[0][CPU_MM_FWD] == 300 && c.rate[1][CPU_MM_FWD] == 200, "fwd rates %g/%g", (double)c.rate[0][0], (double)c.rate[1][0]);
    CHECK(c.rate[0][CPU_MM_ATTENTION] == 50 && c.rate[1][CPU_MM_ATTENTION] == 80, "attention rates");
    CHECK(c.rate[0][CPU_MM_LM_DWEIGHT] == 400 && c.rate[0][CPU_MM_DINP] == 0 && c.rate[1][CPU_MM_DINP] == 0, "unnamed classes must be 0/0");
    setenv("LLMC_BF16_MATMUL_RATES", "fwd=300", 1);
    CHECK(cpu_gemm_fake_rates(&c, err, sizeof(err)) == -1 && strstr(err, "class=P/F"), "malformed hook accepted (%s)", err);
    setenv("LLMC_BF16_MATMUL_RATES", "qkv=1/2", 1);
    CHECK(cpu_gemm_fake_rates(&c, err, sizeof(err)) == -1 && strstr(err, "unknown class qkv"), "unknown class accepted (%s)", err);
    unsetenv("LLMC_BF16_MATMUL_RATES");
    CHECK(cpu_gemm_fake_rates(&c, err, sizeof(err)) == 0, "unset hook must be 0");
    check_group_end("LLMC_BF16_MATMUL_RATES: parsed, malformed and unknown classes refused");
}

/* replaces the value of `key` in the file at path */
static void edit_line(const char* path, const char* key, const char* value) {
    char buf[8192] = "", line[512];
    FILE* f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f)) {
        size_t n = strlen(key);
        if (!strncmp(line, key, n) && line[n] == ' ') snprintf(line, sizeof(line), "%s %s\n", key, value);
        strncat(buf, line, sizeof(buf) - strlen(buf) - 1);
    }
    if (f) fclose(f);
    f = fopen(path, "w");
    fputs(buf, f);
    fclose(f);
}

static void test_file(const char* dir) {
    char path[600], why[600], err[512];
    snprintf(path, sizeof(path), "%s/sub/dir/x.matmul", dir);
    const float prim[CPU_MM_NUM] = {300, 100, 202, 206, 0, 150, 120};
    const float fp32[CPU_MM_NUM] = {200, 200, 200, 200, 200, 150, 100};
    CpuGemmChoice c, r;
    fake(&c, prim, fp32);
    c.threads = 2;
    snprintf(c.impl, sizeof(c.impl), "brg:avx512_core_bf16");
    cpu_gemm_select(&c, 1);

    check_group_begin();
    CHECK(cpu_gemm_write_file(path, &c, 1, err, sizeof(err)) == 0, "write (directories made): %s", err);
    memset(&r, 0, sizeof(r));
    CHECK(cpu_gemm_read_file(path, &r, why, sizeof(why)) == 1, "read back: %s", why);
    for (int k = 0; k < CPU_MM_NUM; k++)
        CHECK(r.fp32[k] == c.fp32[k] && r.rate[0][k] == c.rate[0][k] && r.rate[1][k] == c.rate[1][k], "class %s differs after the round trip", cpu_mm_names[k]);
    CHECK(r.threads == 2 && !strcmp(r.impl, "brg:avx512_core_bf16"), "threads %d impl '%s'", r.threads, r.impl);
    check_group_end("calibration file: written and read back (rates, paths, threads, impl)");

    check_group_begin();
    /* another level than this run's: amx, or avx2 where this run is at amx */
    cpu_gemm_write_file(path, &c, 1, err, sizeof(err));
    int at_amx = 0;
    { char line[512]; FILE* f = fopen(path, "r");
      while (f && fgets(line, sizeof(line), f)) if (!strcmp(line, "level amx\n")) at_amx = 1;
      if (f) fclose(f); }
    const char* other_level = at_amx ? "avx2" : "amx";
    const char* level_reason = at_amx ? "for the level avx2" : "for the level amx";
    const char* keys[4][2] = {{"cpu", "Another CPU"}, {"level", other_level}, {"onednn", "9.9.9"}, {"build", "0000"}};
    const char* reasons[4] = {"for another CPU", level_reason, "for oneDNN 9.9.9", "for another build"};
    for (int i = 0; i < 4; i++) {
        cpu_gemm_write_file(path, &c, 1, err, sizeof(err));
        edit_line(path, keys[i][0], keys[i][1]);
        why[0] = 0;
        CHECK(cpu_gemm_read_file(path, &r, why, sizeof(why)) == 0 && strstr(why, reasons[i]), "%s %s: read as valid or wrong reason '%s'",
              keys[i][0], keys[i][1], why);
    }
    cpu_gemm_write_file(path, &c, 1, err, sizeof(err));
    edit_line(path, "class", "attention");   /* every class line broken */
    CHECK(cpu_gemm_read_file(path, &r, why, sizeof(why)) == 0 && strstr(why, "not a complete"), "broken class lines: '%s'", why);
    unlink(path);
    CHECK(cpu_gemm_read_file(path, &r, why, sizeof(why)) == 0 && !strcmp(why, "missing"), "missing: '%s'", why);
    check_group_end("calibration file: another CPU, level, oneDNN, build, incomplete, missing: not used");

    /* rank 0's decision */
    check_group_begin();
    setenv("LLMC_BF16_MATMUL_FILE", path, 1);
    unsetenv("LLMC_BF16_MATMUL");
    setenv("LLMC_BF16_MATMUL_RATES", "fwd=300/200,dinp=100/200,dweight=500/100,lm_fwd=100/300,lm_dinp=300/100,lm_dweight=100/300,attention=90/100", 1);
    /* lowest level avx2 (some rank below avx512): fp32, nothing measured, no file written */
    cpu_gemm_decide(&r, CPU_ISA_AVX2, err, sizeof(err));
    int all = 1;
    for (int k = 0; k < CPU_MM_NUM; k++) all &= r.fp32[k] == 1;
    CHECK(r.how == CPU_GEMM_BY_UNAVAILABLE && all && !err[0], "lowest avx2: how %d, all fp32 %d", r.how, all);
    CHECK(access(path, F_OK) != 0, "lowest avx2 wrote a calibration file");
    /* lowest avx512, no file: "measured" (the hook), selected, written */
    cpu_gemm_decide(&r, CPU_ISA_AVX512, err, sizeof(err));
    const int want[CPU_MM_NUM] = {0, 1, 0, 1, 0, 1, 1};
    CHECK(r.how == CPU_GEMM_BY_MEASURED && strstr(r.where, "measured at start-up") && strstr(r.where, "is missing") &&
          strstr(r.where, "written for the next start"), "no file: how %d where '%s'", r.how, r.where);
    for (int k = 0; k < CPU_MM_NUM; k++) CHECK(r.fp32[k] == want[k], "measured: class %s path %d want %d", cpu_mm_names[k], r.fp32[k], want[k]);
    CpuGemmChoice r2;
    /* the next start reads the file: the same paths, without the hook */
    unsetenv("LLMC_BF16_MATMUL_RATES");
    cpu_gemm_decide(&r2, CPU_ISA_AVX512, err, sizeof(err));
    CHECK(r2.how == CPU_GEMM_BY_FILE && !memcmp(r2.fp32, r.fp32, sizeof(r.fp32)) && r2.rate[0][CPU_MM_DWEIGHT] == 500,
          "second start: how %d (want the file), paths equal %d", r2.how, !memcmp(r2.fp32, r.fp32, sizeof(r.fp32)));
    /* the file says primitive for some classes, but a rank is below avx512: fp32, the file's fp32 rates kept */
    cpu_gemm_decide(&r2, CPU_ISA_AVX2, err, sizeof(err));
    all = 1;
    for (int k = 0; k < CPU_MM_NUM; k++) all &= r2.fp32[k] == 1 && r2.rate[0][k] == 0;
    CHECK(r2.how == CPU_GEMM_BY_UNAVAILABLE && all && r2.rate[1][CPU_MM_LM_FWD] == 300, "file with primitive paths, lowest avx2: how %d", r2.how);
    /* LLMC_BF16_MATMUL forces one path */
    setenv("LLMC_BF16_MATMUL", "fp32", 1);
    cpu_gemm_decide(&r2, CPU_ISA_AVX512, err, sizeof(err));
    all = 1;
    for (int k = 0; k < CPU_MM_NUM; k++) all &= r2.fp32[k] == 1;
    CHECK(r2.how == CPU_GEMM_BY_ENV && all && strstr(r2.where, "LLMC_BF16_MATMUL=fp32"), "forced fp32: how %d", r2.how);
    setenv("LLMC_BF16_MATMUL", "fast", 1);
    err[0] = 0;
    cpu_gemm_decide(&r2, CPU_ISA_AVX512, err, sizeof(err));
    CHECK(strstr(err, "LLMC_BF16_MATMUL=fast: must be primitive or fp32") != NULL, "bad value: '%s'", err);
    unsetenv("LLMC_BF16_MATMUL");
    check_group_end("decision: unavailable -> fp32; no file -> measured and written; the file next; the variable forces");

    /* another thread count: its own file beside the main one, measured once and read after */
    check_group_begin();
    char tp[700];
    cpu_gemm_thread_file_path("/a/b/x.matmul", 3, tp, sizeof(tp));
    CHECK(!strcmp(tp, "/a/b/x.threads3.matmul"), "thread file of x.matmul: '%s'", tp);
    cpu_gemm_thread_file_path("/a/b/x.bin", 1, tp, sizeof(tp));
    CHECK(!strcmp(tp, "/a/b/x.bin.threads1"), "thread file of x.bin: '%s'", tp);
    edit_line(path, "threads", "7");   /* the main file: another thread count's */
    cpu_gemm_thread_file_path(path, cpu_num_threads(), tp, sizeof(tp));
    unlink(tp);
    setenv("LLMC_BF16_MATMUL_RATES", "fwd=100/300,dinp=300/100,dweight=100/300,lm_fwd=300/100,lm_dinp=100/300,lm_dweight=300/100,attention=300/100", 1);
    cpu_gemm_decide(&r2, CPU_ISA_AVX512, err, sizeof(err));
    CHECK(r2.how == CPU_GEMM_BY_MEASURED && r2.fp32[CPU_MM_FWD] == 1 && access(tp, F_OK) == 0 && strstr(r2.where, tp),
          "main file of 7 threads: how %d, thread file written %d, where '%s'", r2.how, access(tp, F_OK) == 0, r2.where);
    CpuGemmChoice r3;
    setenv("LLMC_BF16_MATMUL_RATES", "fwd=300/100", 1);   /* a new timing would choose otherwise: not asked */
    cpu_gemm_decide(&r3, CPU_ISA_AVX512, err, sizeof(err));
    CHECK(r3.how == CPU_GEMM_BY_FILE && !memcmp(r3.fp32, r2.fp32, sizeof(r2.fp32)) && strstr(r3.where, tp), "second start: how %d where '%s'", r3.how, r3.where);
    /* --invariant 1: fp32 everywhere, nothing measured or written */
    unlink(tp);
    cpu_gemm_request.invariant = 1;
    cpu_gemm_decide(&r3, CPU_ISA_AVX512, err, sizeof(err));
    all = 1;
    for (int k = 0; k < CPU_MM_NUM; k++) all &= r3.fp32[k] == 1;
    CHECK(r3.how == CPU_GEMM_BY_INVARIANT && all && access(tp, F_OK) != 0, "invariant: how %d all fp32 %d", r3.how, all);
    /* at avx512_bf16 on every rank: every class's fixed tiles on the primitive */
    cpu_gemm_decide(&r3, CPU_ISA_AVX512_BF16, err, sizeof(err));
    int lin = 1;
    for (int k = 0; k < CPU_MM_NUM; k++) lin &= r3.fp32[k] == 0;
    CHECK(r3.how == CPU_GEMM_BY_INVARIANT && lin && access(tp, F_OK) != 0 && strstr(r3.where, "single-threaded tiles of the primitive"),
          "invariant at avx512_bf16: how %d every class on the primitive %d where '%s'", r3.how, lin, r3.where);
    setenv("LLMC_BF16_MATMUL", "fp32", 1);   /* forced: the fp32-copy path's tiles */
    cpu_gemm_decide(&r3, CPU_ISA_AMX, err, sizeof(err));
    all = 1;
    for (int k = 0; k < CPU_MM_NUM; k++) all &= r3.fp32[k] == 1;
    CHECK(r3.how == CPU_GEMM_BY_INVARIANT && all && strstr(r3.where, "LLMC_BF16_MATMUL=fp32"), "invariant, LLMC_BF16_MATMUL=fp32: how %d all fp32 %d", r3.how, all);
    unsetenv("LLMC_BF16_MATMUL");
    /* -y 1: the state's paths where the primitive runs, whatever the files say; below avx512: fp32 */
    memset(&cpu_gemm_request, 0, sizeof(cpu_gemm_request));
    cpu_gemm_request.resume_have = 1;
    cpu_gemm_request.resume_mask = 0x5;   /* fwd, dweight on the primitive */
    snprintf(cpu_gemm_request.resume_from, sizeof(cpu_gemm_request.resume_from), "out/state_00000004.bin");
    cpu_gemm_decide(&r3, CPU_ISA_AVX512, err, sizeof(err));
    CHECK(r3.how == CPU_GEMM_BY_STATE && r3.fp32[0] == 0 && r3.fp32[1] == 1 && r3.fp32[2] == 0 && r3.fp32[6] == 1 && access(tp, F_OK) != 0 &&
          strstr(r3.where, "out/state_00000004.bin"), "resume: how %d where '%s'", r3.how, r3.where);
    cpu_gemm_decide(&r3, CPU_ISA_AVX2, err, sizeof(err));
    CHECK(r3.how == CPU_GEMM_BY_UNAVAILABLE && r3.fp32[0] == 1, "resume below avx512: how %d", r3.how);
    memset(&cpu_gemm_request, 0, sizeof(cpu_gemm_request));
    unsetenv("LLMC_BF16_MATMUL_RATES");
    check_group_end("decision: another thread count's file measured once then read; --invariant 1 and -y 1 measure nothing");

    /* a per-class decision applied: mode, paths text, the start-up line */
    check_group_begin();
    cpu_gemm_apply(&r);
    CHECK(!strcmp(cpu_gemm_mode(), "per class"), "mode '%s'", cpu_gemm_mode());
    char t[256], d[1600];
    cpu_gemm_paths_text(t, sizeof(t));
    CHECK(!strcmp(t, "fwd:primitive,dinp:fp32,dweight:primitive,lm_fwd:fp32,lm_dinp:primitive,lm_dweight:fp32,attention:fp32"), "paths '%s'", t);
    cpu_gemm_describe(d, sizeof(d));
    CHECK(strstr(d, "per class") && strstr(d, "fwd primitive 300/200") && strstr(d, "attention fp32 90/100") && strstr(d, "measured at start-up"),
          "line '%s'", d);
    CHECK(cpu_isa() == CPU_ISA_AMX || strstr(d, "AMX") == NULL, "the line names AMX below amx: '%s'", d);
    char isa[64];
    snprintf(isa, sizeof(isa), "oneDNN ISA %s", cpu_isa_onednn_name(cpu_isa_state.onednn_isa));
    CHECK(strstr(d, isa) != NULL, "the line does not name oneDNN's ISA (%s): '%s'", isa, d);
    /* the classes the kernels take: blocks and LM head */
    cpu_gemm_lm_head(0);
    CHECK(cpu_gemm_path(CPU_MM_FWD) == 0 && cpu_gemm_path(CPU_MM_LM_FWD) == 1, "paths of fwd / lm_fwd");
    check_group_end("a per-class decision: mode, the agreed text, the start-up line (rates, no AMX below amx, oneDNN's ISA)");
    unsetenv("LLMC_BF16_MATMUL_FILE");

    /* the primitive's implementation as oneDNN names it */
    const char* skip = cpu_isa_skip_reason(CPU_ISA_AVX512);
    if (skip) {
        check_skip("oneDNN's implementation of the bf16 primitive names its ISA (never amx below amx)", skip);
    } else {
        char impl[64];
        cpu_gemm_probe_impl(impl, sizeof(impl));
        const char* o = cpu_isa_onednn_name(cpu_isa_state.onednn_isa);
        check_ok("oneDNN's implementation of the bf16 primitive is named", impl[0] != 0);
        printf("     implementation %s, oneDNN ISA %s\n", impl, o);
        check_ok("the implementation names AMX only at amx", cpu_isa() == CPU_ISA_AMX || strstr(impl, "amx") == NULL);
    }
}

/* matmul_forward / backward at a per-class decision match the reference
   within the bf16 bounds whichever path each class takes (both paths run
   only where the primitive can: skipped and counted elsewhere) */
static void test_mixed_kernels(void) {
    const char* skip = cpu_isa_skip_reason(CPU_ISA_AVX512);
    if (skip) { check_skip("matmul with a per-class mix of paths (blocks primitive, LM head fp32) equals the one-path results within bf16", skip); return; }
    const int N = 64, C = 48, OC = 96;
    floatX *inp = cpu_gemm_xalloc((size_t)N * C, 1), *w = cpu_gemm_xalloc((size_t)OC * C, 2), *b = cpu_gemm_xalloc(OC, 3);
    floatX *o1 = cpu_gemm_xalloc((size_t)N * OC, 4), *o2 = cpu_gemm_xalloc((size_t)N * OC, 4);
    CpuGemmChoice c;
    memset(&c, 0, sizeof(c));
    for (int k = 0; k < CPU_MM_NUM; k++) c.fp32[k] = k >= CPU_MM_LM_FWD;   /* blocks on the primitive, the LM head on fp32 */
    c.how = CPU_GEMM_BY_FILE;
    cpu_gemm_apply(&c);
    cpu_gemm_lm_head(0);
    matmul_forward(o1, inp, w, b, N, C, OC);
    cpu_gemm_lm_head(1);
    matmul_forward(o2, inp, w, b, N, C, OC);
    cpu_gemm_lm_head(0);
    double worst = 0;
    for (size_t i = 0; i < (size_t)N * OC; i++) {
        double d = fabs((double)ldx(o1[i]) - (double)ldx(o2[i])) / (1.0 + fabs((double)ldx(o2[i])));
        if (d > worst) worst = d;
    }
    /* the two paths differ in the order of fp32 sums only: at most one
       bf16 rounding step apart (2^-7 relative) */
    check_ok("a per-class mix: the blocks' primitive and the LM head's fp32 path agree within one bf16 step", worst <= 1.0 / 128);
    printf("     largest relative difference %.3g\n", worst);
    free(inp); free(w); free(b); free(o1); free(o2);
}

int main(void) {
    char isa[512];
    cpu_isa_describe(isa, sizeof(isa));
    printf("cpu: %s\n", isa);
    if (cpu_isa_error()[0]) { fprintf(stderr, "error: %s\n", cpu_isa_error()); return 1; }
    char dir[] = "/tmp/llmc_matmul_choice_XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_select();
    test_file(dir);
    test_mixed_kernels();
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd)) {}
    return check_summary();
}
