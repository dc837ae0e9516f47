/*
 cuda/matmul.cuh: matrix products on cuBLASLt (bf16 inputs and outputs, fp32
 accumulation and scaling: CUBLAS_COMPUTE_32F), the bias in the GEMM
 epilogue (CUBLASLT_EPILOGUE_BIAS), and the linear layer's forward and
 backward.

 gemm_bf16() is the one entry point (also used by attention.cuh): a column-
 major, optionally strided-batched D = alpha op(A) op(B) + beta D. Its
 cuBLASLt descriptors and the heuristic's algorithm are cached per shape,
 transposes, strides and pointer alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*
 is set from the real pointers, so odd shapes such as T = 7 in sampling get
 an algorithm that is valid for them). When the heuristic offers nothing (or
 LLMC_NO_CUBLASLT=1 is set) it falls back to cublasGemmStridedBatchedEx,
 which accepts any alignment. cuBLAS(Lt) results are bitwise reproducible
 run to run on the same GPU and library.

 Row-major tensors are read as their column-major transposes: a row-major
 (R, K) matrix is a column-major (K, R) matrix with ld = K.

 Memory: one 32 MiB workspace shared by cuBLASLt and cuBLAS (both only ever
 run on the compute stream, one call at a time), outside the ledger.
*/
#ifndef LLMC_CUDA_MATMUL_CUH
#define LLMC_CUDA_MATMUL_CUH

#include <cublas_v2.h>
#include <cublasLt.h>
#include "common.cuh"

static inline void cublas_check_(cublasStatus_t s, const char* call, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) cuda_fatal("cuBLAS error %s in %s at %s:%d", cublasGetStatusString(s), call, file, line);
}
#define cublasCheck(call) cublas_check_((call), #call, __FILE__, __LINE__)

#define CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)
#define GEMM_CACHE_SIZE 256

typedef struct {
    int valid;
    /* key */
    int ta, tb, m, n, k, lda, ldb, ldd, batch, has_bias, align;
    long long sA, sB, sD;
    /* plan */
    int use_lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} GemmPlan;

static struct {
    int ready;
    int no_lt;                   /* LLMC_NO_CUBLASLT=1: always cuBLAS */
    cublasLtHandle_t lt;
    cublasHandle_t blas;
    void* workspace;
    GemmPlan cache[GEMM_CACHE_SIZE];
    int next;                    /* round-robin eviction */
    unsigned long long lt_calls, fallback_calls;
} gemm_state;

/* Handles and workspace; idempotent. Call after the compute stream exists
   (backend_init does); dev programs may rely on the lazy call in gemm_bf16. */
static void cuda_blas_init(void) {
    if (gemm_state.ready) return;
    cublasCheck(cublasLtCreate(&gemm_state.lt));
    cublasCheck(cublasCreate(&gemm_state.blas));
    cudaCheck(cudaMalloc(&gemm_state.workspace, CUBLAS_WORKSPACE_BYTES));
    cuda_ctx.internal_bytes += CUBLAS_WORKSPACE_BYTES;
    cublasCheck(cublasSetStream(gemm_state.blas, cuda_ctx.stream));
    cublasCheck(cublasSetWorkspace(gemm_state.blas, gemm_state.workspace, CUBLAS_WORKSPACE_BYTES));
    const char* e = getenv("LLMC_NO_CUBLASLT");
    gemm_state.no_lt = e && e[0] == '1';
    gemm_state.ready = 1;
}

static void gemm_plan_destroy(GemmPlan* p) {
    if (p->valid && p->use_lt) {
        cublasLtMatmulDescDestroy(p->op);
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->ld);
    }
    p->valid = 0;
}

/* Largest power of two <= 256 dividing the address (and the batch stride). */
static inline int gemm_align(const void* p, long long stride_bytes, int batch) {
    uintptr_t a = (uintptr_t)p | (uintptr_t)256;
    if (batch > 1) a |= (uintptr_t)stride_bytes;
    return (int)(a & (~a + 1));
}

static cublasLtMatrixLayout_t gemm_layout(int rows, int cols, int ld, int batch, long long stride) {
    cublasLtMatrixLayout_t l;
    cublasCheck(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, (uint64_t)rows, (uint64_t)cols, (int64_t)ld));
    if (batch > 1) {
        int32_t bc = batch;
        int64_t st = stride;
        cublasCheck(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc)));
        cublasCheck(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof(st)));
    }
    return l;
}

/* Build the cuBLASLt plan of p's key; use_lt = 0 if no algorithm exists.
   bias: the call's bias (NULL without): the epilogue's pointer is set before
   the heuristic query, which checks it (its alignment) on a GPU; each
   gemm_bf16 call sets its own bias again before cublasLtMatmul. */
static void gemm_plan_build(GemmPlan* p, const floatX* bias) {
    p->use_lt = 0;
    if (gemm_state.no_lt) return;
    cublasOperation_t opA = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
    cublasLtEpilogue_t epi = p->has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (p->has_bias) {
        cudaDataType_t bt = CUDA_R_16BF;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    /* stored shapes: A is (m,k) or (k,m) if transposed; B is (k,n) or (n,k) */
    p->la = p->ta ? gemm_layout(p->k, p->m, p->lda, p->batch, p->sA) : gemm_layout(p->m, p->k, p->lda, p->batch, p->sA);
    p->lb = p->tb ? gemm_layout(p->n, p->k, p->ldb, p->batch, p->sB) : gemm_layout(p->k, p->n, p->ldb, p->batch, p->sB);
    p->ld = gemm_layout(p->m, p->n, p->ldd, p->batch, p->sD);
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = CUBLAS_WORKSPACE_BYTES;
    uint32_t al = (uint32_t)p->align;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof(al)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof(al)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof(al)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof(al)));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(gemm_state.lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
        p->algo = res.algo;
        p->use_lt = 1;
    } else {
        cublasLtMatmulDescDestroy(p->op);
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->ld);
    }
}

/* D (m,n) col-major, ld ldd: D[i + j*ldd] = bias[i] (the fallback's bias) */
__global__ void gemm_bias_fill_kernel(floatX* D, const floatX* bias, int m, int n, int ldd) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)m * n) return;
    int i = (int)(idx % (size_t)m);
    size_t j = idx / (size_t)m;
    D[i + j * (size_t)ldd] = bias[i];
}

/* D = alpha op(A) op(B) + beta D (+ bias[i] added to row i of D), column-
   major, bf16 storage, fp32 accumulation; op(A) is (m,k), op(B) (k,n), D
   (m,n); ta/tb: the stored A is (k,m) / B is (n,k) and is transposed.
   Strided batch of `batch` products, strides sA, sB, sD in elements (ignored
   when batch == 1). bias (m elements, bf16) only with batch == 1 and
   beta == 0. Runs on the compute stream; asynchronous. */
static void gemm_bf16(int ta, int tb, int m, int n, int k, float alpha,
                      const floatX* A, int lda, long long sA,
                      const floatX* B, int ldb, long long sB,
                      float beta, floatX* D, int ldd, long long sD, int batch,
                      const floatX* bias) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    cuda_blas_init();
    if (batch == 1) sA = sB = sD = 0;
    int al = gemm_align(A, sA * 2, batch);
    int a2 = gemm_align(B, sB * 2, batch); if (a2 < al) al = a2;
    a2 = gemm_align(D, sD * 2, batch); if (a2 < al) al = a2;
    if (bias) { a2 = gemm_align(bias, 0, 1); if (a2 < al) al = a2; }
    int has_bias = bias != NULL;
    GemmPlan* p = NULL;
    for (int i = 0; i < GEMM_CACHE_SIZE; i++) {
        GemmPlan* q = &gemm_state.cache[i];
        if (q->valid && q->ta == ta && q->tb == tb && q->m == m && q->n == n && q->k == k && q->lda == lda &&
            q->ldb == ldb && q->ldd == ldd && q->batch == batch && q->has_bias == has_bias && q->align == al &&
            q->sA == sA && q->sB == sB && q->sD == sD) { p = q; break; }
    }
    if (!p) {
        p = &gemm_state.cache[gemm_state.next];
        gemm_state.next = (gemm_state.next + 1) % GEMM_CACHE_SIZE;
        gemm_plan_destroy(p);
        p->ta = ta; p->tb = tb; p->m = m; p->n = n; p->k = k; p->lda = lda; p->ldb = ldb; p->ldd = ldd;
        p->batch = batch; p->has_bias = has_bias; p->align = al; p->sA = sA; p->sB = sB; p->sD = sD;
        gemm_plan_build(p, bias);
        p->valid = 1;
    }
    if (p->use_lt) {
        if (has_bias) cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        cublasCheck(cublasLtMatmul(gemm_state.lt, p->op, &alpha, A, p->la, B, p->lb, &beta, D, p->ld, D, p->ld,
                                   &p->algo, gemm_state.workspace, CUBLAS_WORKSPACE_BYTES, cuda_ctx.stream));
        gemm_state.lt_calls++;
        return;
    }
    /* fallback: plain cuBLAS; the bias is written first and accumulated */
    if (has_bias) {
        LLMC_LAUNCH(gemm_bias_fill_kernel, cdiv_u((size_t)m * n, 256), 256, 0, cuda_ctx.stream, D, bias, m, n, ldd);
        cudaCheckLaunch("gemm_bias_fill_kernel");
        beta = 1.0f;
    }
    cublasCheck(cublasGemmStridedBatchedEx(gemm_state.blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                           m, n, k, &alpha, A, CUDA_R_16BF, lda, sA, B, CUDA_R_16BF, ldb, sB,
                                           &beta, D, CUDA_R_16BF, ldd, sD, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    gemm_state.fallback_calls++;
}

/* ------------------------------------------------------------------------ */
/* column sums: dbias (OC) += sum over N rows of dout (N, OC)               */

#define COLSUM_ROWS 64   /* rows per partial sum */

/* partials[chunk * OC + c] = sum of dout[r, c] over rows r of the chunk
   (fp32, rows in order); grid (chunks, cdiv(OC, blockDim)) */
__global__ void colsum_partials_kernel(float* partials, const floatX* dout, size_t N, int OC) {
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    size_t r0 = (size_t)blockIdx.x * COLSUM_ROWS, r1 = r0 + COLSUM_ROWS < N ? r0 + COLSUM_ROWS : N;
    float s = 0.0f;
    for (size_t r = r0; r < r1; r++) s += bf(dout[r * OC + c]);
    partials[(size_t)blockIdx.x * OC + c] = s;
}

/* out[c] += sum over chunks of partials (in chunk order, fp32) */
__global__ void colsum_finish_kernel(floatX* out, const float* partials, int chunks, int OC) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    float s = 0.0f;
    for (int i = 0; i < chunks; i++) s += partials[(size_t)i * OC + c];
    out[c] = tobf(bf(out[c]) + s);
}

/* dbias (OC) += column sums of dout (N, OC). Deterministic (no atomics). */
static void bias_backward(floatX* dbias, const floatX* dout, size_t N, int OC) {
    if (N == 0) return;
    int chunks = (int)cdiv_u(N, COLSUM_ROWS);
    float* part = (float*)cuda_scratch(SCRATCH_PARTIALS, (size_t)chunks * OC * sizeof(float));
    dim3 grid((unsigned)chunks, cdiv_u((size_t)OC, 128));
    LLMC_LAUNCH(colsum_partials_kernel, grid, 128, 0, cuda_ctx.stream, part, dout, N, OC);
    cudaCheckLaunch("colsum_partials_kernel");
    LLMC_LAUNCH(colsum_finish_kernel, cdiv_u((size_t)OC, 256), 256, 0, cuda_ctx.stream, dbias, part, chunks, OC);
    cudaCheckLaunch("colsum_finish_kernel");
}

/* ------------------------------------------------------------------------ */
/* the linear layer                                                         */

/* Rows per GEMM call: cuBLAS takes int dimensions, the row count N (B*T)
   is size_t; larger N is done in blocks of rows (never in practice). */
#define GEMM_MAX_ROWS ((size_t)1 << 30)

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL.
   Writes out. Column-major: out^T (OC,N) = weight^T... i.e. transa = T on
   the stored (C,OC) weight, B = inp as (C,N); bias in the epilogue. */
static inline void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                                  size_t N, int C, int OC) {
    for (size_t r0 = 0; r0 < N; r0 += GEMM_MAX_ROWS) {
        int n = (int)(N - r0 < GEMM_MAX_ROWS ? N - r0 : GEMM_MAX_ROWS);
        gemm_bf16(1, 0, OC, n, C, 1.0f, weight, C, 0, inp + r0 * C, C, 0, 0.0f, out + r0 * OC, OC, 0, 1, bias);
    }
}

/* Backward of matmul_forward; all three ACCUMULATE (beta = 1):
     dinp (N,C)     += dout (N,OC) @ weight (OC,C)      (skipped if NULL)
     dweight (OC,C) += dout^T @ inp
     dbias (OC)     += column sums of dout               (skipped if NULL) */
static inline void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout,
                                   const floatX* inp, const floatX* weight, size_t N, int C, int OC) {
    for (size_t r0 = 0; r0 < N; r0 += GEMM_MAX_ROWS) {
        int n = (int)(N - r0 < GEMM_MAX_ROWS ? N - r0 : GEMM_MAX_ROWS);
        if (dinp) gemm_bf16(0, 0, C, n, OC, 1.0f, weight, C, 0, dout + r0 * OC, OC, 0, 1.0f, dinp + r0 * C, C, 0, 1, NULL);
        gemm_bf16(0, 1, C, OC, n, 1.0f, inp + r0 * C, C, 0, dout + r0 * OC, OC, 0, 1.0f, dweight, C, 0, 1, NULL);
    }
    if (dbias) bias_backward(dbias, dout, N, OC);
}

#endif /* LLMC_CUDA_MATMUL_CUH */
