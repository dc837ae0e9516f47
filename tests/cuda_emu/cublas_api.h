/*
 tests/cuda_emu/cublas_api.h: cuBLAS and cuBLASLt of the emulated device
 (issue 47), as the project calls them: column-major GEMMs D = alpha op(A)
 op(B) + beta C (+ bias per row, CUBLASLT_EPILOGUE_BIAS), strided batches,
 bf16 operands and outputs, computed in fp32 on the CPU (products summed in
 k order, one rounding to bf16 on the store), on the stream's worker.
 Every descriptor is validated when it is used: types (bf16 matrices, fp32
 compute and scale), leading dimension >= rows, shapes of op(A), op(B), D
 consistent, every pointer inside its device allocation (the last element of
 the last batch), the alignment the heuristic was asked for (the pointers of
 cublasLtMatmul must be at least as aligned as CUBLASLT_MATMUL_PREF_MIN_
 ALIGNMENT_*), and the bias pointer set with the bias epilogue (also before
 the heuristic query, which checks the bias's alignment on a GPU). A misuse
 is an error naming the call.
*/
#ifndef LLMC_CUDA_EMU_CUBLAS_API_H
#define LLMC_CUDA_EMU_CUBLAS_API_H

#include "cuda_runtime.h"
#include "library_types.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77, CUBLAS_COMPUTE_16F = 64 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

inline const char* cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        default: return "CUBLAS_STATUS_(other)";
    }
}

struct cublasContext { cudaStream_t stream = nullptr; void* ws = nullptr; size_t ws_bytes = 0; };
typedef cublasContext* cublasHandle_t;
inline cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = new cublasContext(); return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { h->stream = s; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* ws, size_t n) {
    size_t off = 0, sz = 0;
    if (n && (emu::mem_kind(ws, &off, &sz) != emu::MEM_DEVICE || off + n > sz))
        emu::fail("cublasSetWorkspace: %zu bytes at %p are not inside one device allocation", n, ws);
    h->ws = ws; h->ws_bytes = n;
    return CUBLAS_STATUS_SUCCESS;
}

namespace emu {
/* one matrix operand: stored (rows, cols) column-major, ld, batch stride */
struct MatRef { const void* p; int rows, cols; long long ld, stride; };

inline void check_extent(const char* call, const char* what, const void* p, long long rows, long long cols, long long ld,
                         long long stride, int batch) {
    if (ld < rows) fail("%s: %s has leading dimension %lld < rows %lld", call, what, ld, rows);
    if (rows <= 0 || cols <= 0) return;
    size_t off = 0, sz = 0;
    if (mem_kind(p, &off, &sz) != MEM_DEVICE) fail("%s: %s (%p) is not device memory", call, what, p);
    unsigned long long last = (unsigned long long)((cols - 1) * ld + rows) + (unsigned long long)(batch - 1) * (unsigned long long)stride;
    if (off + last * 2 > sz)
        fail("%s: %s (%lld x %lld, ld %lld, batch %d stride %lld) ends %llu bytes past its %zu-byte allocation", call, what,
             rows, cols, ld, batch, stride, (unsigned long long)(off + last * 2 - sz), sz);
}

/* D = alpha op(A) op(B) + beta D + bias (bf16 storage, fp32 math), batched */
/* its loads need no hooks (emu_race.h); -O2 whatever EMU_OPT says: at -O1
   gcc kept the four sums below in memory (the d2 test_gpt's products spent
   most of their time in those stores) */
__attribute__((no_sanitize_address, optimize("O2")))
inline void gemm_run(int ta, int tb, int m, int n, int k, float alpha, const __nv_bfloat16* A, long long lda, long long sA,
                     const __nv_bfloat16* B, long long ldb, long long sB, float beta, __nv_bfloat16* D, long long ldd,
                     long long sD, int batch, const __nv_bfloat16* bias, const char* call) {
    std::vector<float> a((size_t)m * k), b((size_t)n * k);
    bool chk = unwritten_check_on();
    auto bad = [&](const char* what, int q, int i, int j, const void* p) {
        fail("%s reads %s element (%d, %d) of batch %d (%p) = 0xffff, the fill of cudaMalloc: device memory read before anything wrote it",
             call, what, i, j, q, p);
    };
    if (chk && bias)
        for (int i = 0; i < m; i++) if (bias[i].__x == 0xffffu) bad("the bias", 0, i, 0, bias + i);
    for (int q = 0; q < batch; q++) {
        const __nv_bfloat16* Aq = A + q * sA; const __nv_bfloat16* Bq = B + q * sB; __nv_bfloat16* Dq = D + q * sD;
        for (int i = 0; i < m; i++)
            for (int kk = 0; kk < k; kk++) {
                const __nv_bfloat16* e = ta ? &Aq[kk + i * lda] : &Aq[i + kk * lda];
                if (chk && e->__x == 0xffffu) bad("op(A)", q, i, kk, e);
                a[(size_t)i * k + kk] = (float)*e;
            }
        for (int j = 0; j < n; j++)
            for (int kk = 0; kk < k; kk++) {
                const __nv_bfloat16* e = tb ? &Bq[j + kk * ldb] : &Bq[kk + j * ldb];
                if (chk && e->__x == 0xffffu) bad("op(B)", q, kk, j, e);
                b[(size_t)j * k + kk] = (float)*e;
            }
        /* each element's sum runs over kk in order, one rounding per product
           and per addition; four columns at a time only so that four such
           chains are in flight (the same bits as one column at a time) */
        auto store = [&](int i, int j, float s) __attribute__((no_sanitize_address)) {
            float r = alpha * s;
            if (beta != 0.0f) {
                if (chk && Dq[i + j * ldd].__x == 0xffffu) bad("C (beta != 0)", q, i, j, &Dq[i + j * ldd]);
                r += beta * (float)Dq[i + j * ldd];
            }
            if (bias) r += (float)bias[i];
            Dq[i + j * ldd] = __float2bfloat16_rn(r);
        };
        int j = 0;
        for (; j + 4 <= n; j += 4)
            for (int i = 0; i < m; i++) {
                const float* x = &a[(size_t)i * k];
                const float *y0 = &b[(size_t)j * k], *y1 = y0 + k, *y2 = y1 + k, *y3 = y2 + k;
                float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
                for (int kk = 0; kk < k; kk++) {
                    float xv = x[kk];
                    s0 += xv * y0[kk]; s1 += xv * y1[kk]; s2 += xv * y2[kk]; s3 += xv * y3[kk];
                }
                store(i, j, s0); store(i, j + 1, s1); store(i, j + 2, s2); store(i, j + 3, s3);
            }
        for (; j < n; j++)
            for (int i = 0; i < m; i++) {
                const float* x = &a[(size_t)i * k]; const float* y = &b[(size_t)j * k];
                float s = 0.0f;
                for (int kk = 0; kk < k; kk++) s += x[kk] * y[kk];
                store(i, j, s);
            }
    }
}
} /* namespace emu */

/* cuBLAS strided batched GEMM (the fallback of llmc/cuda/matmul.cuh) */
inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t opA, cublasOperation_t opB, int m, int n, int k,
                                                 const void* alpha, const void* A, cudaDataType_t tA, int lda, long long sA,
                                                 const void* B, cudaDataType_t tB, int ldb, long long sB, const void* beta,
                                                 void* D, cudaDataType_t tD, int ldd, long long sD, int batch,
                                                 cublasComputeType_t ct, cublasGemmAlgo_t algo) {
    (void)algo;
    const char* call = "cublasGemmStridedBatchedEx";
    if (tA != CUDA_R_16BF || tB != CUDA_R_16BF || tD != CUDA_R_16BF || ct != CUBLAS_COMPUTE_32F)
        emu::fail("%s: types A %d B %d D %d compute %d (the emulated device has bf16 with CUBLAS_COMPUTE_32F)", call, tA, tB, tD, ct);
    if (m < 0 || n < 0 || k < 0 || batch < 1) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    int ta = opA != CUBLAS_OP_N, tb = opB != CUBLAS_OP_N;
    emu::check_extent(call, "A", A, ta ? k : m, ta ? m : k, lda, sA, batch);
    emu::check_extent(call, "B", B, tb ? n : k, tb ? k : n, ldb, sB, batch);
    emu::check_extent(call, "C/D", D, m, n, ldd, sD, batch);
    float al = *(const float*)alpha, be = *(const float*)beta;
    {
        emu::RaceAccess ra[3] = {{A, emu::race_matrix_bytes(ta ? k : m, ta ? m : k, lda, sA, batch), false, "A", -1},
                                 {B, emu::race_matrix_bytes(tb ? n : k, tb ? k : n, ldb, sB, batch), false, "B", -1},
                                 {D, emu::race_matrix_bytes(m, n, ldd, sD, batch), true, "C/D", -1}};
        emu::race_op(h->stream, call, ra, 3);
    }
    emu::enqueue(h->stream, [=] {
        emu::gemm_run(ta, tb, m, n, k, al, (const __nv_bfloat16*)A, lda, sA, (const __nv_bfloat16*)B, ldb, sB, be,
                      (__nv_bfloat16*)D, ldd, sD, batch, nullptr, "cublasGemmStridedBatchedEx");
    });
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t opA, cublasOperation_t opB, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType_t tA, int lda, const void* B,
                                   cudaDataType_t tB, int ldb, const void* beta, void* D, cudaDataType_t tD, int ldd,
                                   cublasComputeType_t ct, cublasGemmAlgo_t algo) {
    return cublasGemmStridedBatchedEx(h, opA, opB, m, n, k, alpha, A, tA, lda, 0, B, tB, ldb, 0, beta, D, tD, ldd, 0, 1, ct, algo);
}

/* ---------------------------------------------------------------- cuBLASLt */

typedef enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_RELU = 2, CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU = 32,
               CUBLASLT_EPILOGUE_GELU_BIAS = 36 } cublasLtEpilogue_t;
typedef enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
               CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26 } cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6 } cublasLtMatrixLayoutAttribute_t;
typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8 } cublasLtMatmulPreferenceAttributes_t;

struct cublasLtContext { int magic = 0x17; };
typedef cublasLtContext* cublasLtHandle_t;
struct cublasLtMatmulDescOpaque_t {
    int compute, scale, ta = 0, tb = 0, epilogue = CUBLASLT_EPILOGUE_DEFAULT, bias_type = -1;
    const void* bias = nullptr;
};
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutOpaque_t { int type; uint64_t rows, cols; int64_t ld; int32_t batch = 1; int64_t stride = 0; };
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
struct cublasLtMatmulPreferenceOpaque_t { uint64_t ws = 0; uint32_t al[4] = {256, 256, 256, 256}; };
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
struct cublasLtMatmulAlgo_t { uint64_t data[8]; };
struct cublasLtMatmulHeuristicResult_t {
    cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4];
};

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = new cublasLtContext(); return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t ct, cudaDataType_t st) {
    *d = new cublasLtMatmulDescOpaque_t();
    (*d)->compute = ct; (*d)->scale = st;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* v, size_t n) {
    auto need = [&](size_t want, const char* name) {
        if (n != want) emu::fail("cublasLtMatmulDescSetAttribute(%s): %zu bytes, the attribute has %zu", name, n, want);
    };
    switch (a) {
        case CUBLASLT_MATMUL_DESC_TRANSA: need(4, "TRANSA"); d->ta = *(const int*)v; break;
        case CUBLASLT_MATMUL_DESC_TRANSB: need(4, "TRANSB"); d->tb = *(const int*)v; break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE: need(4, "EPILOGUE"); d->epilogue = *(const int*)v; break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: need(sizeof(void*), "BIAS_POINTER"); memcpy(&d->bias, v, sizeof(void*)); break;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: need(4, "BIAS_DATA_TYPE"); d->bias_type = *(const int*)v; break;
        default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows) emu::fail("cublasLtMatrixLayoutCreate: leading dimension %lld < rows %llu", (long long)ld, (unsigned long long)rows);
    *l = new cublasLtMatrixLayoutOpaque_t();
    (*l)->type = t; (*l)->rows = rows; (*l)->cols = cols; (*l)->ld = ld;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void* v, size_t n) {
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) {
        if (n != 4) emu::fail("cublasLtMatrixLayoutSetAttribute(BATCH_COUNT): %zu bytes, the attribute is int32", n);
        l->batch = *(const int32_t*)v;
    } else if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) {
        if (n != 8) emu::fail("cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET): %zu bytes, the attribute is int64", n);
        l->stride = *(const int64_t*)v;
    } else return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) { *p = new cublasLtMatmulPreferenceOpaque_t(); return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void* v, size_t n) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (n != 8) emu::fail("cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES): %zu bytes, the attribute is uint64", n);
        p->ws = *(const uint64_t*)v;
    } else if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        if (n != 4) emu::fail("cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT): %zu bytes, the attribute is uint32", n);
        p->al[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = *(const uint32_t*)v;
    } else return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

namespace emu {
/* the shapes of a matmul: op(A) (m,k), op(B) (k,n), C and D (m,n) */
inline void lt_check(const char* call, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                     cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld, int* m, int* n, int* k) {
    if (op->compute != CUBLAS_COMPUTE_32F || op->scale != CUDA_R_32F)
        fail("%s: compute type %d, scale type %d (the project uses CUBLAS_COMPUTE_32F, CUDA_R_32F)", call, op->compute, op->scale);
    const cublasLtMatrixLayout_t ls[4] = {la, lb, lc, ld};
    const char* nm[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++)
        if (ls[i]->type != CUDA_R_16BF) fail("%s: layout %s has type %d, not CUDA_R_16BF", call, nm[i], ls[i]->type);
    *m = (int)(op->ta ? la->cols : la->rows);
    *k = (int)(op->ta ? la->rows : la->cols);
    int kb = (int)(op->tb ? lb->cols : lb->rows);
    *n = (int)(op->tb ? lb->rows : lb->cols);
    if (kb != *k) fail("%s: op(A) is %d x %d but op(B) has %d rows", call, *m, *k, kb);
    if ((int)ld->rows != *m || (int)ld->cols != *n || lc->rows != ld->rows || lc->cols != ld->cols)
        fail("%s: D is %llu x %llu (C %llu x %llu), op(A) op(B) is %d x %d", call, (unsigned long long)ld->rows,
             (unsigned long long)ld->cols, (unsigned long long)lc->rows, (unsigned long long)lc->cols, *m, *n);
    if (la->batch != lb->batch || la->batch != ld->batch || lc->batch != ld->batch)
        fail("%s: batch counts A %d B %d C %d D %d differ", call, la->batch, lb->batch, lc->batch, ld->batch);
    if (op->epilogue != CUBLASLT_EPILOGUE_DEFAULT && op->epilogue != CUBLASLT_EPILOGUE_BIAS)
        fail("%s: epilogue %d is not emulated", call, op->epilogue);
    if (op->epilogue == CUBLASLT_EPILOGUE_BIAS) {
        if (op->bias_type != CUDA_R_16BF && op->bias_type != -1) fail("%s: bias type %d with bf16 D", call, op->bias_type);
        if (!op->bias) fail("%s: CUBLASLT_EPILOGUE_BIAS but CUBLASLT_MATMUL_DESC_BIAS_POINTER is not set", call);
        if (la->batch > 1) fail("%s: the bias epilogue with a batch of %d", call, la->batch);
    }
}
inline uint32_t align_of(const void* p) { uintptr_t a = (uintptr_t)p | 256; return (uint32_t)(a & (~a + 1)); }
} /* namespace emu */

/* The heuristic: one algorithm (the CPU loop) whenever the descriptors are
   valid; it remembers the alignments and workspace it was promised.
   LLMC_EMU_LT_ALGOS=0: no algorithm for any shape (0 results and
   CUBLAS_STATUS_NOT_SUPPORTED, as cuBLASLt answers a layout it has no
   kernel for), so the caller's fallback path runs. */
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                                                     cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                                                     cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t* res,
                                                     int* found) {
    (void)h;
    int m, n, k;
    emu::lt_check("cublasLtMatmulAlgoGetHeuristic", op, la, lb, lc, ld, &m, &n, &k);
    if (op->epilogue == CUBLASLT_EPILOGUE_BIAS && emu::align_of(op->bias) < pref->al[0] && pref->al[0] > 2)
        emu::fail("cublasLtMatmulAlgoGetHeuristic: the bias pointer %p is less aligned than the %u bytes promised for A",
                  op->bias, pref->al[0]);
    *found = 0;
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    static bool no_algos = [] { const char* e = getenv("LLMC_EMU_LT_ALGOS"); return e && e[0] == '0'; }();
    if (no_algos) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(res, 0, sizeof(*res));
    for (int i = 0; i < 4; i++) res->algo.data[i] = pref->al[i];
    res->algo.data[4] = pref->ws;
    res->algo.data[5] = 0x5A17;
    res->state = CUBLAS_STATUS_SUCCESS;
    res->wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                                     cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta,
                                     const void* C, cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld,
                                     const cublasLtMatmulAlgo_t* algo, void* ws, size_t ws_bytes, cudaStream_t s) {
    (void)h;
    const char* call = "cublasLtMatmul";
    int m, n, k;
    emu::lt_check(call, op, la, lb, lc, ld, &m, &n, &k);
    if (!algo || algo->data[5] != 0x5A17) emu::fail("%s: an algorithm the heuristic did not return", call);
    const void* ptr[4] = {A, B, C, D};
    const char* nm[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++)
        if (emu::align_of(ptr[i]) < algo->data[i])
            emu::fail("%s: %s at %p is %u-byte aligned, but the heuristic was promised %llu bytes (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%s_BYTES)",
                      call, nm[i], ptr[i], emu::align_of(ptr[i]), (unsigned long long)algo->data[i], nm[i]);
    if (ws_bytes > algo->data[4]) emu::fail("%s: workspace %zu bytes > the %llu the heuristic was given", call, ws_bytes, (unsigned long long)algo->data[4]);
    if (ws_bytes) {
        size_t off = 0, sz = 0;
        if (emu::mem_kind(ws, &off, &sz) != emu::MEM_DEVICE || off + ws_bytes > sz) emu::fail("%s: the workspace is not %zu bytes of device memory", call, ws_bytes);
    }
    if (C != D && !(lc->ld == ld->ld)) emu::fail("%s: C != D with another leading dimension (not emulated)", call);
    if (C != D) emu::fail("%s: C != D is not emulated (the project computes in place)", call);
    emu::check_extent(call, "A", A, la->rows, la->cols, la->ld, la->stride, la->batch);
    emu::check_extent(call, "B", B, lb->rows, lb->cols, lb->ld, lb->stride, lb->batch);
    emu::check_extent(call, "D", D, ld->rows, ld->cols, ld->ld, ld->stride, ld->batch);
    const void* bias = op->epilogue == CUBLASLT_EPILOGUE_BIAS ? op->bias : nullptr;
    if (bias) {
        size_t off = 0, sz = 0;
        if (emu::mem_kind(bias, &off, &sz) != emu::MEM_DEVICE || off + (size_t)m * 2 > sz)
            emu::fail("%s: the bias (%d bf16) is not inside a device allocation", call, m);
    }
    float al = *(const float*)alpha, be = *(const float*)beta;
    int ta = op->ta != CUBLAS_OP_N, tb = op->tb != CUBLAS_OP_N, batch = la->batch;
    long long lda = la->ld, ldb = lb->ld, ldd = ld->ld, sA = la->stride, sB = lb->stride, sD = ld->stride;
    {
        emu::RaceAccess ra[5] = {{A, emu::race_matrix_bytes(la->rows, la->cols, la->ld, la->stride, la->batch), false, "A", -1},
                                 {B, emu::race_matrix_bytes(lb->rows, lb->cols, lb->ld, lb->stride, lb->batch), false, "B", -1},
                                 {D, emu::race_matrix_bytes(ld->rows, ld->cols, ld->ld, ld->stride, ld->batch), true, "C/D", -1},
                                 {bias, bias ? (size_t)m * 2 : 0, false, "the bias", -1},
                                 {ws, ws_bytes, true, "the workspace", -1}};
        emu::race_op(s, call, ra, 5);
    }
    emu::enqueue(s, [=] {
        emu::gemm_run(ta, tb, m, n, k, al, (const __nv_bfloat16*)A, lda, sA, (const __nv_bfloat16*)B, ldb, sB, be,
                      (__nv_bfloat16*)D, ldd, sD, batch, (const __nv_bfloat16*)bias, "cublasLtMatmul");
    });
    return CUBLAS_STATUS_SUCCESS;
}

#endif /* LLMC_CUDA_EMU_CUBLAS_API_H */
