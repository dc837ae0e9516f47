/*
 * llmc/cpu/isa.h -- what this CPU can run, decided in ONE place. Every CPU
 * kernel family asks cpu_isa() and picks its implementation from the one
 * answer; the start-up lines print it (cpu_isa_describe).
 *
 * Levels (each includes the ones before it):
 *   avx2         AVX2 + FMA (x86-64-v3; e.g. AMD EPYC Zen 3). The whole
 *                program is compiled for this level (-march=x86-64-v3), so
 *                a CPU below it cannot run it: cpu_isa_init says so.
 *   avx512       AVX-512 F, BW, VL, DQ (oneDNN's avx512_core)
 *   avx512_bf16  + AVX512-BF16 (vdpbf16ps; oneDNN's avx512_core_bf16)
 *   amx          + AMX-BF16 tiles, with the OS's permission to use them
 *                (Linux arch_prctl ARCH_REQ_XCOMP_PERM; oneDNN's
 *                avx512_core_amx)
 * Detected from CPUID (leaf 1, leaf 7 subleaves 0 and 1) and XGETBV (the OS
 * saves the YMM / ZMM / tile state), then lowered to what oneDNN reports
 * (dnnl_get_effective_cpu_isa) where the build links oneDNN.
 *
 * LLMC_CPU_ISA=avx2|avx512|avx512_bf16|amx caps the level: a better machine
 * then runs exactly what a lesser one runs. The cap is applied to oneDNN too
 * (dnnl_set_max_cpu_isa, before its first use) and, in an OpenBLAS build,
 * to OpenBLAS's kernels (OPENBLAS_CORETYPE, common.h). A cap above the CPU
 * changes nothing (the level is what the CPU has); a value that is not a
 * level is an error (cpu_isa_error).
 *
 * What each kernel family runs at each level (the start-up line says it):
 *   fp32 matmul (both programs' sgemm): oneDNN's dnnl_sgemm (or OpenBLAS),
 *     whose kernels follow the level: AVX2 FMA kernels at avx2, AVX-512 FMA
 *     kernels above (AMX has no fp32 instructions). The two kernels sum K
 *     in different blockings: an fp32 run at avx2 differs from one at
 *     avx512 in the last bits; avx512, avx512_bf16 and amx run the same
 *     sgemm and agree bit for bit.
 *   bf16 matmul (the bf16 program, matmul_bf16.h): oneDNN's bf16 matmul
 *     primitive at amx (AMX tiles); the exact-fp32-copy path on the fp32
 *     sgemm at every other level. The primitive can be forced at avx512 and
 *     above (LLMC_BF16_MATMUL=primitive: oneDNN 2.6 has no bf16 matmul below
 *     avx512_core); at avx2 forcing it is an error naming the missing ISA.
 *   everything else (layernorm, attention's softmax, GELU, the classifier,
 *     AdamW, encoder, norms): plain C vectorized by gcc for x86-64-v3, the
 *     same instructions at every level, so the same bits.
 */
#ifndef LLMC_CPU_ISA_H
#define LLMC_CPU_ISA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <unistd.h>
#include <sys/syscall.h>
#endif

typedef enum { CPU_ISA_NONE = 0, CPU_ISA_AVX2, CPU_ISA_AVX512, CPU_ISA_AVX512_BF16, CPU_ISA_AMX, CPU_ISA_NUM } CpuIsa;

/* the level names as LLMC_CPU_ISA takes them, and as the ISA names that a
   "skipped (needs ...)" line prints */
static const char* const cpu_isa_names[CPU_ISA_NUM] = {"below-avx2", "avx2", "avx512", "avx512_bf16", "amx"};
static const char* const cpu_isa_upper[CPU_ISA_NUM] = {"SSE", "AVX2", "AVX512_CORE", "AVX512_BF16", "AMX_BF16"};

typedef struct {
    int ready;
    CpuIsa detected;      /* what the CPU and the OS offer */
    CpuIsa cap;           /* LLMC_CPU_ISA (CPU_ISA_AMX when unset) */
    int cap_given;
    CpuIsa level;         /* min(detected, cap), lowered to oneDNN's answer: what runs */
    int onednn_isa;       /* dnnl_get_effective_cpu_isa() after the cap; -1 without oneDNN */
    /* the features behind `detected` */
    int avx, avx2, fma, avx512f, avx512bw, avx512vl, avx512dq, avx512_bf16, amx_bf16, amx_tile, amx_os;
    char model[80];       /* CPUID brand string */
    char error[256];      /* a bad LLMC_CPU_ISA or a CPU below avx2; "" when fine */
} CpuIsaState;

static CpuIsaState cpu_isa_state;

/* oneDNN's dnnl_cpu_isa_t values of the levels (dnnl_types.h, oneDNN 2.x) */
static inline int cpu_isa_onednn_value(CpuIsa l) {
    switch (l) {
        case CPU_ISA_AVX2: return 0x7;           /* dnnl_cpu_isa_avx2 */
        case CPU_ISA_AVX512: return 0x27;        /* dnnl_cpu_isa_avx512_core */
        case CPU_ISA_AVX512_BF16: return 0xe7;   /* dnnl_cpu_isa_avx512_core_bf16 */
        case CPU_ISA_AMX: return 0x3e7;          /* dnnl_cpu_isa_avx512_core_amx */
        default: return 0x1;                     /* dnnl_cpu_isa_sse41 */
    }
}
/* the highest level whose oneDNN value `v` includes (oneDNN's values are bit sets) */
static inline CpuIsa cpu_isa_from_onednn(int v) {
    for (int l = CPU_ISA_AMX; l >= CPU_ISA_AVX2; l--) {
        int need = cpu_isa_onednn_value((CpuIsa)l);
        if ((v & need) == need) return (CpuIsa)l;
    }
    return CPU_ISA_NONE;
}
static inline const char* cpu_isa_onednn_name(int v) {
    switch (v) {
        case 0x3e7: return "avx512_core_amx";
        case 0xe7: return "avx512_core_bf16";
        case 0x67: return "avx512_core_vnni";
        case 0x27: return "avx512_core";
        case 0x407: return "avx2_vnni";
        case 0x7: return "avx2";
        default: return v < 0 ? "not linked" : "other";
    }
}

#if defined(LLMC_USE_DNNL) && !defined(ONEAPI_DNNL_DNNL_H)
/* oneDNN's ISA controls (dnnl.h), declared here so the fp32 program needs
   only the runtime library (as dnnl_sgemm in common.h) */
#ifdef __cplusplus
extern "C" {
#endif
int dnnl_set_max_cpu_isa(int isa);
int dnnl_get_effective_cpu_isa(void);
#ifdef __cplusplus
}
#endif
#endif

#if defined(__x86_64__) && defined(__GNUC__)
static inline unsigned long long cpu_isa_xgetbv(unsigned idx) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(idx));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

/* Reads CPUID and XGETBV into cpu_isa_state (features, brand, detected). */
static inline void cpu_isa_detect(CpuIsaState* s) {
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    unsigned max = __get_cpuid_max(0, NULL);
    if (max >= 1 && __get_cpuid(1, &a, &b, &c, &d)) {
        int osxsave = (c >> 27) & 1;
        unsigned long long xcr0 = osxsave ? cpu_isa_xgetbv(0) : 0;
        int ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
        s->fma = ((c >> 12) & 1) && ymm;
        s->avx = ((c >> 28) & 1) && ymm;
        if (max >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            s->avx2 = ((b >> 5) & 1) && ymm;
            s->avx512f = ((b >> 16) & 1) && zmm;
            s->avx512dq = ((b >> 17) & 1) && zmm;
            s->avx512bw = ((b >> 30) & 1) && zmm;
            s->avx512vl = ((b >> 31) & 1) && zmm;
            s->amx_bf16 = (d >> 22) & 1;
            s->amx_tile = (d >> 24) & 1;
            unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
            if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) s->avx512_bf16 = ((a1 >> 5) & 1) && zmm;
            /* AMX: XCR0 bits 17-18 (tile config and data) and, on Linux, the
               process's permission to use the tile data (what oneDNN asks for
               too: ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18) */
            if (s->amx_tile && osxsave && (cpu_isa_xgetbv(0) & 0x60000ULL) == 0x60000ULL) {
#if defined(__linux__) && defined(SYS_arch_prctl)
                s->amx_os = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#endif
            }
        }
    }
    unsigned brand[12];
    memset(brand, 0, sizeof(brand));
    if (__get_cpuid_max(0x80000000, NULL) >= 0x80000004) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
        memcpy(s->model, brand, 48);
        s->model[48] = 0;
        char* p = s->model;
        while (*p == ' ') p++;
        memmove(s->model, p, strlen(p) + 1);
        for (size_t n = strlen(s->model); n > 0 && s->model[n - 1] == ' '; n--) s->model[n - 1] = 0;
    }
#endif
    if (!s->model[0]) snprintf(s->model, sizeof(s->model), "unknown CPU");
    s->detected = CPU_ISA_NONE;
    if (s->avx && s->avx2 && s->fma) s->detected = CPU_ISA_AVX2;
    if (s->detected == CPU_ISA_AVX2 && s->avx512f && s->avx512bw && s->avx512vl && s->avx512dq) s->detected = CPU_ISA_AVX512;
    if (s->detected == CPU_ISA_AVX512 && s->avx512_bf16) s->detected = CPU_ISA_AVX512_BF16;
    if (s->detected == CPU_ISA_AVX512_BF16 && s->amx_bf16 && s->amx_tile && s->amx_os) s->detected = CPU_ISA_AMX;
}

/* Parses a level name (LLMC_CPU_ISA's values); CPU_ISA_NONE if not one. */
static inline CpuIsa cpu_isa_parse(const char* v) {
    for (int l = CPU_ISA_AVX2; l < CPU_ISA_NUM; l++)
        if (!strcmp(v, cpu_isa_names[l])) return (CpuIsa)l;
    return CPU_ISA_NONE;
}

/* Decides the level once: detection, the LLMC_CPU_ISA cap, oneDNN's cap
   and its answer. Idempotent. Call it before anything uses oneDNN or the
   BLAS (the trainer: backend_preinit, first thing in main). Never exits:
   a bad LLMC_CPU_ISA or a CPU below avx2 leaves a message in
   cpu_isa_error() for the caller to report on every rank. */
static inline const CpuIsaState* cpu_isa_init(void) {
    CpuIsaState* s = &cpu_isa_state;
    if (s->ready) return s;
    cpu_isa_detect(s);
    s->cap = CPU_ISA_AMX;
    const char* e = getenv("LLMC_CPU_ISA");
    if (e && e[0]) {
        CpuIsa c = cpu_isa_parse(e);
        if (c == CPU_ISA_NONE)
            snprintf(s->error, sizeof(s->error), "LLMC_CPU_ISA=%s: must be one of avx2, avx512, avx512_bf16, amx (the ISA level to cap the kernels at)", e);
        else { s->cap = c; s->cap_given = 1; }
    }
    if (s->detected == CPU_ISA_NONE)
        snprintf(s->error, sizeof(s->error), "this CPU (%s) lacks AVX2 and FMA (x86-64-v3), which this program is compiled for", s->model);
    s->level = s->detected < s->cap ? s->detected : s->cap;
    s->onednn_isa = -1;
#ifdef LLMC_USE_DNNL
    if (s->level >= CPU_ISA_AVX2) {
        dnnl_set_max_cpu_isa(cpu_isa_onednn_value(s->level));  /* fails only after oneDNN's first use: then its own answer below */
        s->onednn_isa = (int)dnnl_get_effective_cpu_isa();
        CpuIsa o = cpu_isa_from_onednn(s->onednn_isa);
        if (o < s->level) s->level = o;   /* e.g. DNNL_MAX_CPU_ISA set lower in the environment */
    }
#endif
    s->ready = 1;
    return s;
}

/* The level every kernel family runs at (cpu_isa_init first if needed). */
static inline CpuIsa cpu_isa(void) { return cpu_isa_init()->level; }

/* "" or the one error line's text (bad LLMC_CPU_ISA, CPU below avx2). */
static inline const char* cpu_isa_error(void) { return cpu_isa_init()->error; }

/* One line: the CPU, the level that runs, what was detected, the cap, and
   oneDNN's ISA; e.g. "Intel(R) Xeon(R) Processor, level amx (detected: avx2
   fma avx512f/bw/vl/dq avx512_bf16 amx_bf16+tile (OS permits AMX); oneDNN
   avx512_core_amx)". */
static inline void cpu_isa_describe(char* out, size_t n) {
    const CpuIsaState* s = cpu_isa_init();
    char cap[96] = "";
    if (s->cap_given)
        snprintf(cap, sizeof(cap), ", capped by LLMC_CPU_ISA=%s%s", cpu_isa_names[s->cap],
                 s->cap > s->detected ? " (above this CPU: no effect)" : "");
    snprintf(out, n, "%s, level %s (detected %s:%s%s%s%s%s%s%s%s%s%s; oneDNN %s)", s->model, cpu_isa_names[s->level],
             cpu_isa_names[s->detected], s->avx2 ? " avx2" : "", s->fma ? " fma" : "",
             s->avx512f ? " avx512f" : "", s->avx512bw && s->avx512vl && s->avx512dq ? "/bw/vl/dq" : "",
             s->avx512_bf16 ? " avx512_bf16" : "", s->amx_bf16 ? " amx_bf16" : "", s->amx_tile ? "+tile" : "",
             s->amx_tile ? (s->amx_os ? " (OS permits AMX)" : " (OS does not permit AMX)") : "", cap, "",
             cpu_isa_onednn_name(s->onednn_isa));
}

/* For tests and benches: "skipped (needs AVX512_BF16; this CPU: AVX2)" when
   `need` is above the level in use, else NULL. The level named is the one
   in use (the cap, when LLMC_CPU_ISA lowers it). */
static inline const char* cpu_isa_skip_reason(CpuIsa need) {
    static char buf[128];
    CpuIsa l = cpu_isa();
    if (l >= need) return NULL;
    snprintf(buf, sizeof(buf), "skipped (needs %s; this CPU: %s%s)", cpu_isa_upper[need], cpu_isa_upper[l],
             cpu_isa_state.cap_given && cpu_isa_state.cap < cpu_isa_state.detected ? ", as LLMC_CPU_ISA caps it" : "");
    return buf;
}

#endif /* LLMC_CPU_ISA_H */
