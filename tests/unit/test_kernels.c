/*
 * tests/unit/test_kernels.c -- checks every kernel of llmc/cpu/kernels.h against a
 * straightforward double-precision loop implementation written here, on odd
 * sizes (and on sizes that take the blocked/threaded code paths). The double
 * references of the backward passes are themselves checked by central
 * finite differences of a scalar loss L = sum(out * w) (w random).
 * A check passes when max|got - ref| <= 1e-5 * max|ref|. Backward kernels
 * are called on gradient buffers that already hold random values, to check
 * that they accumulate (+=); attention scratch is pre-filled with NaN to
 * check that it is never read.
 * Prints one line per check and "N passed, M failed"; exit 1 on failure.
 * `test_kernels --dump DIR` instead writes inputs and outputs of every kernel
 * for dev/kernels_ref.py (the PyTorch float64 per-op reference; fp32 build).
 *
 * Built with -DLLMC_BF16 (the bf16 program's kernels: bf16 storage, fp32
 * arithmetic, oneDNN matmuls) the same tests run on bf16 inputs (random
 * values rounded to bf16, so the double references see exactly the kernel's
 * inputs), and a check asserts ONE rounding per stored element: every
 * element must satisfy |got - ref| <= 2^-8 |ref| + tol * max|ref| (2^-8:
 * bf16's unit roundoff; tol: the fp32 arithmetic, 1e-5, as above). A second
 * rounding anywhere (e.g. of a partial sum, or of an accumulator before the
 * add) breaks this bound. The attention references round at the CUDA
 * program's points (preatt, att, datt, dpreatt) so the same bound holds
 * there up to rounding flips near ties (tol 2e-3). Outputs kept in fp32
 * (layernorm mean/rstd, losses, Adam m, v, master) get no 2^-8 term.
 *
 * build: gcc -O3 -mavx2 -mfma -fopenmp -std=c11 -I. tests/unit/test_kernels.c \
 *            -lopenblas -lm -o test_kernels   (any CBLAS; see bench_kernels.c)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/cpu/kernels.h"

#include "tests/check.h"

/* bf16 build: host arrays stay float; kernels get floatX copies.
   TX: a floatX copy of n floats; FX: copies it back into f and frees it;
   DX: frees it. In the fp32 build all three are no-ops (the same pointer is
   passed), so the fp32 tests are exactly what they were. RB: the value a
   bf16 store gives (identity in fp32). */
#ifdef LLMC_BF16
static floatX* TX(const float* f, size_t n) {
    floatX* x = (floatX*)malloc(n * sizeof(floatX) + 16);
    for (size_t i = 0; i < n; i++) x[i] = stx(f[i]);
    return x;
}
static void FX(float* f, floatX* x, size_t n) {
    for (size_t i = 0; i < n; i++) f[i] = ldx(x[i]);
    free(x);
}
static void DX(floatX* x) { free(x); }
static double RB(double x) { return (double)bf16_round((float)x); }
#else
#define TX(f, n) (f)
#define FX(f, x, n) ((void)0)
#define DX(x) ((void)0)
static double RB(double x) { return x; }
#endif

/* ---- helpers ------------------------------------------------------------ */

static unsigned long long rng_state = 0x2545F4914F6CDD1DULL;
/* uniform in [-1, 1) */
static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static float* frand(size_t n, double scale) {
    float* p = (float*)malloc(n * sizeof(float) + 16);
    for (size_t i = 0; i < n; i++) p[i] = (float)RB((float)(urand() * scale));
    return p;
}
static double* dup_d(const float* x, size_t n) {
    double* p = (double*)malloc(n * sizeof(double) + 16);
    for (size_t i = 0; i < n; i++) p[i] = x[i];
    return p;
}
static float* dup_f(const float* x, size_t n) {
    float* p = (float*)malloc(n * sizeof(float) + 16);
    memcpy(p, x, n * sizeof(float));
    return p;
}
static double* dzeros(size_t n) { return (double*)calloc(n + 2, sizeof(double)); }
static float* fnan(size_t n) {
    float* p = (float*)malloc(n * sizeof(float) + 16);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* compares got (float) against ref (double): error relative to max|ref|.
   bf16 build: every element within 2^-8 |ref| (one rounding; only if
   `rounded`, i.e. the output is stored as floatX) + tol max|ref|; prints
   the worst element's error in units of that bound. */
static void check_r(const char* name, const float* got, const double* ref, size_t n,
                    double tol, int rounded) {
    double maxerr = 0, maxref = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e == e)) bad = 1;
        if (e > maxerr) maxerr = e;
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    }
    double rel = maxerr / (maxref > 0 ? maxref : 1.0);
#ifdef LLMC_BF16
    double worst = 0; /* max over elements of err / bound */
    for (size_t i = 0; i < n; i++) {
        double bound = (rounded ? ldexp(fabs(ref[i]), -8) : 0.0) + tol * (maxref > 0 ? maxref : 1.0);
        double q = fabs((double)got[i] - ref[i]) / bound;
        if (!(q <= worst)) worst = q;
    }
    int ok = !bad && worst <= 1.0;
    printf("%-4s %-44s max_abs_err %.3e  max|ref| %.3e  rel %.3e  err/bound %.2f\n",
           ok ? "ok" : "FAIL", name, maxerr, maxref, rel, worst);
#else
    (void)rounded;
    int ok = !bad && rel <= tol;
    printf("%-4s %-44s max_abs_err %.3e  max|ref| %.3e  rel %.3e\n", ok ? "ok" : "FAIL",
           name, maxerr, maxref, rel);
#endif
    if (ok) check_pass++; else check_fail++;
}
/* a stored (floatX) output; check_f32: an output kept in fp32 */
static void check(const char* name, const float* got, const double* ref, size_t n,
                  double tol) {
    check_r(name, got, ref, n, tol, 1);
}
static void check_f32(const char* name, const float* got, const double* ref, size_t n,
                      double tol) {
    check_r(name, got, ref, n, tol, 0);
}
/* same for two double arrays (finite-difference checks of the references) */
static void check_dd(const char* name, const double* got, const double* ref, size_t n,
                     double tol) {
    double maxerr = 0, maxref = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]);
        if (!(e <= maxerr)) maxerr = e;
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    }
    double rel = maxerr / (maxref > 0 ? maxref : 1.0);
    int ok = rel <= tol;
    printf("%-4s %-44s max_abs_err %.3e  max|ref| %.3e  rel %.3e\n", ok ? "ok" : "FAIL",
           name, maxerr, maxref, rel);
    if (ok) check_pass++; else check_fail++;
}
static void check_true(const char* name, int cond) {
    printf("%-4s %s\n", cond ? "ok" : "FAIL", name);
    if (cond) check_pass++; else check_fail++;
}

static double dot_d(const double* a, const double* b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- double references -------------------------------------------------- */

static void ref_layernorm_fwd(double* out, double* mean, double* rstd, const double* x,
                              const double* w, const double* b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double* xr = x + (size_t)n * C;
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += xr[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (xr[i] - m) * (xr[i] - m);
        v /= C;
        double r = 1.0 / sqrt(v + 1e-5);
        for (int i = 0; i < C; i++) out[(size_t)n * C + i] = (xr[i] - m) * r * w[i] + b[i];
        mean[n] = m;
        rstd[n] = r;
    }
}
static void ref_layernorm_bwd(double* dx, double* dw, double* db, const double* dout,
                              const double* x, const double* w, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double* xr = x + (size_t)n * C;
        const double* d = dout + (size_t)n * C;
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += xr[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (xr[i] - m) * (xr[i] - m);
        v /= C;
        double r = 1.0 / sqrt(v + 1e-5), mg = 0, mgx = 0;
        for (int i = 0; i < C; i++) {
            double xh = (xr[i] - m) * r;
            mg += d[i] * w[i];
            mgx += d[i] * w[i] * xh;
            db[i] += d[i];
            dw[i] += d[i] * xh;
        }
        mg /= C;
        mgx /= C;
        for (int i = 0; i < C; i++) {
            double xh = (xr[i] - m) * r;
            dx[(size_t)n * C + i] += r * (d[i] * w[i] - mg - xh * mgx);
        }
    }
}
static void ref_matmul_fwd(double* out, const double* x, const double* w, const double* b,
                           int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < C; i++) s += x[(size_t)n * C + i] * w[(size_t)o * C + i];
            out[(size_t)n * OC + o] = s;
        }
}
static void ref_matmul_bwd(double* dx, double* dw, double* db, const double* dout,
                           const double* x, const double* w, int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double d = dout[(size_t)n * OC + o];
            if (db) db[o] += d;
            for (int i = 0; i < C; i++) {
                if (dx) dx[(size_t)n * C + i] += d * w[(size_t)o * C + i];
                dw[(size_t)o * C + i] += d * x[(size_t)n * C + i];
            }
        }
}
/* rnd: round preatt and att to bf16 where the bf16 kernels store them
   (RB; identity in the fp32 build) */
static void ref_attention_fwd(double* out, double* att, const double* qkv, int B, int T,
                              int C, int NH, int rnd) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double* a = att + (((size_t)b * NH + h) * T + t) * T;
                double mx = -1e300;
                for (int s = 0; s <= t; s++) {
                    const double* k = qkv + ((size_t)b * T + s) * 3 * C + C + h * hs;
                    a[s] = scale * dot_d(q, k, hs);
                    if (rnd) a[s] = RB(a[s]);
                    if (a[s] > mx) mx = a[s];
                }
                double sum = 0;
                for (int s = 0; s <= t; s++) {
                    a[s] = exp(a[s] - mx);
                    sum += a[s];
                }
                for (int s = 0; s < T; s++) a[s] = s <= t ? a[s] / sum : 0.0;
                if (rnd)
                    for (int s = 0; s <= t; s++) a[s] = RB(a[s]);
                double* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++)
                        acc += a[s] * qkv[((size_t)b * T + s) * 3 * C + 2 * C + h * hs + i];
                    o[i] = acc;
                }
            }
}
/* rnd: round datt and dpreatt to bf16 (as the bf16 kernels store them) */
static void ref_attention_bwd(double* dqkv, const double* dout, const double* qkv,
                              const double* att, int B, int T, int C, int NH, int rnd) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double* da = (double*)malloc(sizeof(double) * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* a = att + (((size_t)b * NH + h) * T + t) * T;
                const double* d = dout + ((size_t)b * T + t) * C + h * hs;
                double dotp = 0;
                for (int s = 0; s <= t; s++) {
                    const double* v = qkv + ((size_t)b * T + s) * 3 * C + 2 * C + h * hs;
                    double* dv = dqkv + ((size_t)b * T + s) * 3 * C + 2 * C + h * hs;
                    da[s] = dot_d(d, v, hs);
                    if (rnd) da[s] = RB(da[s]);
                    for (int i = 0; i < hs; i++) dv[i] += a[s] * d[i];
                    dotp += a[s] * da[s];
                }
                const double* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double* dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                for (int s = 0; s <= t; s++) {
                    double dp = a[s] * (da[s] - dotp) * scale;
                    if (rnd) dp = RB(dp);
                    const double* k = qkv + ((size_t)b * T + s) * 3 * C + C + h * hs;
                    double* dk = dqkv + ((size_t)b * T + s) * 3 * C + C + h * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dp * k[i];
                        dk[i] += dp * q[i];
                    }
                }
            }
    free(da);
}
#define PI_D 3.14159265358979323846
static double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / PI_D) * (x + 0.044715 * x * x * x)));
}
static double ref_gelu_grad(double x) {
    double k = sqrt(2.0 / PI_D), u = k * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
}
/* losses and (if dl) dlogits = dloss (softmax - onehot); pad columns 0 */
static void ref_classifier(double* losses, double* dl, const double* logits,
                           const int* tg, int N, int V, int Vp, double dloss) {
    for (int n = 0; n < N; n++) {
        const double* l = logits + (size_t)n * Vp;
        double mx = -1e300, sum = 0;
        for (int j = 0; j < V; j++) if (l[j] > mx) mx = l[j];
        for (int j = 0; j < V; j++) sum += exp(l[j] - mx);
        losses[n] = log(sum) - (l[tg[n]] - mx);
        if (dl)
            for (int j = 0; j < Vp; j++)
                dl[(size_t)n * Vp + j] =
                    j < V ? dloss * (exp(l[j] - mx) / sum - (j == tg[n])) : 0.0;
    }
}

/* ---- finite-difference checks of the double references ----------------- */
/* L(x) = sum(f(x) * wout); compares the analytic dL/dx with central
   differences, eps 1e-6, at a handful of entries */

static void fd_layernorm(void) {
    int N = 3, C = 9;
    float* xf = frand(N * C, 1.5); float* wf = frand(C, 1); float* bf = frand(C, 1);
    float* gf = frand(N * C, 1);
    double *x = dup_d(xf, N * C), *w = dup_d(wf, C), *b = dup_d(bf, C), *g = dup_d(gf, N * C);
    double *out = dzeros(N * C), *mean = dzeros(N), *rstd = dzeros(N);
    double *dx = dzeros(N * C), *dw = dzeros(C), *db = dzeros(C);
    ref_layernorm_bwd(dx, dw, db, g, x, w, N, C);
    double fd[3 * 27], an[3 * 27];
    int m = 0;
    double* ps[3] = {x, w, b};
    double* gs[3] = {dx, dw, db};
    int ns[3] = {N * C, C, C};
    for (int p = 0; p < 3; p++)
        for (int i = 0; i < ns[p]; i += 2) {
            double old = ps[p][i], lp, lm;
            ps[p][i] = old + 1e-6; ref_layernorm_fwd(out, mean, rstd, x, w, b, N, C);
            lp = dot_d(out, g, N * C);
            ps[p][i] = old - 1e-6; ref_layernorm_fwd(out, mean, rstd, x, w, b, N, C);
            lm = dot_d(out, g, N * C);
            ps[p][i] = old;
            fd[m] = (lp - lm) / 2e-6; an[m] = gs[p][i]; m++;
        }
    check_dd("fd: layernorm reference backward", an, fd, m, 1e-6);
    free(xf); free(wf); free(bf); free(gf); free(x); free(w); free(b); free(g);
    free(out); free(mean); free(rstd); free(dx); free(dw); free(db);
}
static void fd_attention(void) {
    int B = 1, T = 5, C = 6, NH = 2;
    float* qf = frand(B * T * 3 * C, 1.5); float* gf = frand(B * T * C, 1);
    double *qkv = dup_d(qf, B * T * 3 * C), *g = dup_d(gf, B * T * C);
    double *out = dzeros(B * T * C), *att = dzeros(B * NH * T * T), *dq = dzeros(B * T * 3 * C);
    ref_attention_fwd(out, att, qkv, B, T, C, NH, 0);
    ref_attention_bwd(dq, g, qkv, att, B, T, C, NH, 0);
    int n = B * T * 3 * C;
    double* fd = dzeros(n);
    for (int i = 0; i < n; i++) {
        double old = qkv[i], lp, lm;
        qkv[i] = old + 1e-6; ref_attention_fwd(out, att, qkv, B, T, C, NH, 0); lp = dot_d(out, g, B * T * C);
        qkv[i] = old - 1e-6; ref_attention_fwd(out, att, qkv, B, T, C, NH, 0); lm = dot_d(out, g, B * T * C);
        qkv[i] = old;
        fd[i] = (lp - lm) / 2e-6;
    }
    check_dd("fd: attention reference backward", dq, fd, n, 1e-6);
    free(qf); free(gf); free(qkv); free(g); free(out); free(att); free(dq); free(fd);
}
static void fd_gelu_classifier(void) {
    int n = 16;
    double fd[16], an[16];
    for (int i = 0; i < n; i++) {
        double x = -4.0 + 0.5 * i + 0.1;
        fd[i] = (ref_gelu(x + 1e-6) - ref_gelu(x - 1e-6)) / 2e-6;
        an[i] = ref_gelu_grad(x);
    }
    check_dd("fd: gelu reference derivative", an, fd, n, 1e-6);
    int N = 2, V = 7, Vp = 9;
    float* lf = frand(N * Vp, 3);
    double* l = dup_d(lf, N * Vp);
    int tg[2] = {3, 6};
    double losses[2], lp[2], lm[2], dl[18], fdd[18];
    ref_classifier(losses, dl, l, tg, N, V, Vp, 0.5);
    for (int i = 0; i < N * Vp; i++) {
        double old = l[i];
        l[i] = old + 1e-6; ref_classifier(lp, NULL, l, tg, N, V, Vp, 0);
        l[i] = old - 1e-6; ref_classifier(lm, NULL, l, tg, N, V, Vp, 0);
        l[i] = old;
        fdd[i] = (i % Vp) < V ? 0.5 * (lp[0] + lp[1] - lm[0] - lm[1]) / 2e-6 : 0.0;
    }
    check_dd("fd: classifier reference dlogits", dl, fdd, N * Vp, 1e-6);
    free(lf); free(l);
}

/* ---- kernel tests --------------------------------------------------------- */

static const double TOL = 1e-5;
/* bf16 build: slack of the attention checks, whose references round at the
   same points as the kernels but may round a near-tie value the other way */
#ifdef LLMC_BF16
static const double TOL_ATT = 2e-3;
#else
static const double TOL_ATT = 1e-5;
#endif

static void test_encoder(int B, int T, int C, int V) {
    char name[96];
    int* inp = (int*)malloc(sizeof(int) * B * T);
    for (int i = 0; i < B * T; i++) inp[i] = (int)((urand() + 1) * 0.5 * V) % V;
    inp[0] = inp[B * T - 1] = inp[B * T / 2]; /* duplicate token ids */
    float *wte = frand((size_t)V * C, 1), *wpe = frand((size_t)T * C, 1);
    float* out = fnan((size_t)B * T * C);
    floatX *xo = TX(out, (size_t)B * T * C), *xwte = TX(wte, (size_t)V * C), *xwpe = TX(wpe, (size_t)T * C);
    encoder_forward(xo, inp, xwte, xwpe, B, T, C);
    FX(out, xo, (size_t)B * T * C); DX(xwte); DX(xwpe);
    double* ref = dzeros((size_t)B * T * C);
    for (int bt = 0; bt < B * T; bt++)
        for (int i = 0; i < C; i++)
            ref[(size_t)bt * C + i] = (double)wte[(size_t)inp[bt] * C + i] + wpe[(size_t)(bt % T) * C + i];
    snprintf(name, sizeof name, "encoder_forward B%d T%d C%d", B, T, C);
    check(name, out, ref, (size_t)B * T * C, TOL);
    float* dout = frand((size_t)B * T * C, 1);
    float *dwte = frand((size_t)V * C, 1), *dwpe = frand((size_t)T * C, 1);
    double *rwte = dup_d(dwte, (size_t)V * C), *rwpe = dup_d(dwpe, (size_t)T * C);
    floatX *xdwte = TX(dwte, (size_t)V * C), *xdwpe = TX(dwpe, (size_t)T * C), *xdout = TX(dout, (size_t)B * T * C);
    encoder_backward(xdwte, xdwpe, xdout, inp, B, T, C);
    FX(dwte, xdwte, (size_t)V * C); FX(dwpe, xdwpe, (size_t)T * C); DX(xdout);
    for (int bt = 0; bt < B * T; bt++)
        for (int i = 0; i < C; i++) {
            rwte[(size_t)inp[bt] * C + i] += dout[(size_t)bt * C + i];
            rwpe[(size_t)(bt % T) * C + i] += dout[(size_t)bt * C + i];
        }
    snprintf(name, sizeof name, "encoder_backward dwte B%d T%d C%d", B, T, C);
    check(name, dwte, rwte, (size_t)V * C, TOL);
    snprintf(name, sizeof name, "encoder_backward dwpe B%d T%d C%d", B, T, C);
    check(name, dwpe, rwpe, (size_t)T * C, TOL);
    free(inp); free(wte); free(wpe); free(out); free(ref); free(dout); free(dwte);
    free(dwpe); free(rwte); free(rwpe);
}

static void test_layernorm(int N, int C) {
    char name[96];
    float *x = frand((size_t)N * C, 2), *w = frand(C, 1), *b = frand(C, 1);
    for (size_t i = 0; i < (size_t)N * C; i++) x[i] = (float)RB(x[i] + 3.0f); /* non-zero mean */
    float *out = fnan((size_t)N * C), *mean = fnan(N), *rstd = fnan(N);
    floatX *xo = TX(out, (size_t)N * C), *xx = TX(x, (size_t)N * C), *xw = TX(w, C), *xb = TX(b, C);
    layernorm_forward(xo, mean, rstd, xx, xw, xb, N, C);
    FX(out, xo, (size_t)N * C);
    double *xd = dup_d(x, (size_t)N * C), *wd = dup_d(w, C), *bd = dup_d(b, C);
    double *ro = dzeros((size_t)N * C), *rm = dzeros(N), *rr = dzeros(N);
    ref_layernorm_fwd(ro, rm, rr, xd, wd, bd, N, C);
    snprintf(name, sizeof name, "layernorm_forward out N%d C%d", N, C); check(name, out, ro, (size_t)N * C, TOL);
    snprintf(name, sizeof name, "layernorm_forward mean N%d C%d", N, C); check_f32(name, mean, rm, N, TOL);
    snprintf(name, sizeof name, "layernorm_forward rstd N%d C%d", N, C); check_f32(name, rstd, rr, N, TOL);
    float* dout = frand((size_t)N * C, 1);
    float *dx = frand((size_t)N * C, 1), *dw = frand(C, 1), *db = frand(C, 1);
    double *rdx = dup_d(dx, (size_t)N * C), *rdw = dup_d(dw, C), *rdb = dup_d(db, C);
    double* dd = dup_d(dout, (size_t)N * C);
    floatX *xdx = TX(dx, (size_t)N * C), *xdw = TX(dw, C), *xdb = TX(db, C), *xdout = TX(dout, (size_t)N * C);
    layernorm_backward(xdx, xdw, xdb, xdout, xx, xw, mean, rstd, N, C);
    FX(dx, xdx, (size_t)N * C); FX(dw, xdw, C); FX(db, xdb, C); DX(xdout); DX(xx); DX(xw); DX(xb);
    ref_layernorm_bwd(rdx, rdw, rdb, dd, xd, wd, N, C);
    snprintf(name, sizeof name, "layernorm_backward dinp N%d C%d", N, C); check(name, dx, rdx, (size_t)N * C, TOL);
    snprintf(name, sizeof name, "layernorm_backward dweight N%d C%d", N, C); check(name, dw, rdw, C, TOL);
    snprintf(name, sizeof name, "layernorm_backward dbias N%d C%d", N, C); check(name, db, rdb, C, TOL);
    free(x); free(w); free(b); free(out); free(mean); free(rstd); free(xd); free(wd); free(bd);
    free(ro); free(rm); free(rr); free(dout); free(dx); free(dw); free(db); free(rdx); free(rdw);
    free(rdb); free(dd);
}

static void test_matmul(int N, int C, int OC, int with_bias, int with_dinp) {
    char name[96];
    float *x = frand((size_t)N * C, 1), *w = frand((size_t)OC * C, 1), *b = frand(OC, 1);
    float* out = fnan((size_t)N * OC);
    floatX *xo = TX(out, (size_t)N * OC), *xx = TX(x, (size_t)N * C), *xw = TX(w, (size_t)OC * C), *xb = TX(b, OC);
    matmul_forward(xo, xx, xw, with_bias ? xb : NULL, N, C, OC);
    FX(out, xo, (size_t)N * OC); DX(xb);
    double *xd = dup_d(x, (size_t)N * C), *wd = dup_d(w, (size_t)OC * C), *bd = dup_d(b, OC);
    double* ro = dzeros((size_t)N * OC);
    ref_matmul_fwd(ro, xd, wd, with_bias ? bd : NULL, N, C, OC);
    snprintf(name, sizeof name, "matmul_forward N%d C%d OC%d bias%d", N, C, OC, with_bias);
    check(name, out, ro, (size_t)N * OC, TOL);
    float* dout = frand((size_t)N * OC, 1);
    float *dx = frand((size_t)N * C, 1), *dw = frand((size_t)OC * C, 1), *db = frand(OC, 1);
    double *rdx = dup_d(dx, (size_t)N * C), *rdw = dup_d(dw, (size_t)OC * C), *rdb = dup_d(db, OC);
    double* dd = dup_d(dout, (size_t)N * OC);
    floatX *xdx = TX(dx, (size_t)N * C), *xdw = TX(dw, (size_t)OC * C), *xdb = TX(db, OC), *xdout = TX(dout, (size_t)N * OC);
    matmul_backward(with_dinp ? xdx : NULL, xdw, with_bias ? xdb : NULL, xdout, xx, xw, N, C, OC);
    FX(dx, xdx, (size_t)N * C); FX(dw, xdw, (size_t)OC * C); FX(db, xdb, OC); DX(xdout); DX(xx); DX(xw);
    ref_matmul_bwd(with_dinp ? rdx : NULL, rdw, with_bias ? rdb : NULL, dd, xd, wd, N, C, OC);
    snprintf(name, sizeof name, "matmul_backward dinp%s N%d C%d OC%d", with_dinp ? "" : "(NULL)", N, C, OC);
    check(name, dx, rdx, (size_t)N * C, TOL);
    snprintf(name, sizeof name, "matmul_backward dweight N%d C%d OC%d", N, C, OC);
    check(name, dw, rdw, (size_t)OC * C, TOL);
    snprintf(name, sizeof name, "matmul_backward dbias%s N%d C%d OC%d", with_bias ? "" : "(NULL)", N, C, OC);
    check(name, db, rdb, OC, TOL);
    free(x); free(w); free(b); free(out); free(xd); free(wd); free(bd); free(ro); free(dout);
    free(dx); free(dw); free(db); free(rdx); free(rdw); free(rdb); free(dd);
}

/* --invariant 1's products (cpu_inv_T = T, matmul_invariant.h, docs/design.md
   section 13): near the float64 reference, and layout-free bit for bit:
   the forward and dinp rows of B sequences are those of two calls on B/2
   each (on 1 thread against all of them), and dweight and dbias from zero
   over B sequences are the sum (one rounding) of the two halves' (B a power
   of two: each half is a subtree). B = 3 runs the binary counter's tree. */
static int same_bits(const floatX* a, const floatX* b, size_t n) { return memcmp(a, b, n * sizeof(floatX)) == 0; }
static void test_invariant_matmul(int T, int B, int C, int OC) {
    char name[128];
    const int N = B * T, H = N / 2;
    float *x = frand((size_t)N * C, 1), *w = frand((size_t)OC * C, 1), *b = frand(OC, 1), *dout = frand((size_t)N * OC, 1);
    floatX *xx = TX(x, (size_t)N * C), *xw = TX(w, (size_t)OC * C), *xb = TX(b, OC), *xd = TX(dout, (size_t)N * OC);
    floatX* out[2];
    floatX *dinp[2], *dw[3], *db[3];
    for (int k = 0; k < 2; k++) {
        out[k] = (floatX*)calloc((size_t)N * OC, sizeof(floatX));
        dinp[k] = (floatX*)calloc((size_t)N * C, sizeof(floatX));
    }
    for (int k = 0; k < 3; k++) {
        dw[k] = (floatX*)calloc((size_t)OC * C, sizeof(floatX));
        db[k] = (floatX*)calloc(OC, sizeof(floatX));
    }
    int nth = cpu_num_threads();
    cpu_inv_T = T;
    matmul_forward(out[0], xx, xw, xb, N, C, OC);
    matmul_backward(dinp[0], dw[0], db[0], xd, xx, xw, N, C, OC);
    double *xdd = dup_d(x, (size_t)N * C), *wdd = dup_d(w, (size_t)OC * C), *bdd = dup_d(b, OC), *ddd = dup_d(dout, (size_t)N * OC);
    double *ro = dzeros((size_t)N * OC), *rdx = dzeros((size_t)N * C), *rdw = dzeros((size_t)OC * C), *rdb = dzeros(OC);
    ref_matmul_fwd(ro, xdd, wdd, bdd, N, C, OC);
    ref_matmul_bwd(rdx, rdw, rdb, ddd, xdd, wdd, N, C, OC);
    float *fo = fnan((size_t)N * OC), *fdx = fnan((size_t)N * C), *fdw = fnan((size_t)OC * C), *fdb = fnan(OC);
    for (size_t i = 0; i < (size_t)N * OC; i++) fo[i] = ldx(out[0][i]);
    for (size_t i = 0; i < (size_t)N * C; i++) fdx[i] = ldx(dinp[0][i]);
    for (size_t i = 0; i < (size_t)OC * C; i++) fdw[i] = ldx(dw[0][i]);
    for (int i = 0; i < OC; i++) fdb[i] = ldx(db[0][i]);
    snprintf(name, sizeof name, "invariant matmul_forward T%d B%d C%d OC%d", T, B, C, OC);
    check(name, fo, ro, (size_t)N * OC, TOL);
    snprintf(name, sizeof name, "invariant dinp T%d B%d C%d OC%d", T, B, C, OC);
    check(name, fdx, rdx, (size_t)N * C, TOL);
    /* bf16: every leaf and node of the tree is rounded (log2(B) + 2
       roundings on a path, of partial sums up to the leaves' size): a bound
       of (log2(B) + 2) 2^-7 max|ref|; fp32: the usual tolerance */
    double ttol = TOL;
#ifdef LLMC_BF16
    int lv = 0;
    while ((1 << lv) < B) lv++;
    ttol = (lv + 2) * ldexp(1.0, -7);
#endif
    snprintf(name, sizeof name, "invariant dweight T%d B%d C%d OC%d", T, B, C, OC);
    check(name, fdw, rdw, (size_t)OC * C, ttol);
    snprintf(name, sizeof name, "invariant dbias T%d B%d C%d OC%d", T, B, C, OC);
    check(name, fdb, rdb, OC, ttol);
    if ((B & (B - 1)) == 0 && B >= 2) {
        omp_set_num_threads(1);
        for (int h = 0; h < 2; h++) {
            matmul_forward(out[1] + (size_t)h * H * OC, xx + (size_t)h * H * C, xw, xb, H, C, OC);
            matmul_backward(dinp[1] + (size_t)h * H * C, dw[1 + h], db[1 + h], xd + (size_t)h * H * OC, xx + (size_t)h * H * C, xw, H, C, OC);
        }
        omp_set_num_threads(nth);
        for (size_t i = 0; i < (size_t)OC * C; i++) dw[1][i] = stx(ldx(dw[1][i]) + ldx(dw[2][i]));
        for (int i = 0; i < OC; i++) db[1][i] = stx(ldx(db[1][i]) + ldx(db[2][i]));
        snprintf(name, sizeof name, "invariant T%d B%d C%d OC%d: forward and dinp rows = 2 x B/2 on 1 thread", T, B, C, OC);
        check_true(name, same_bits(out[0], out[1], (size_t)N * OC) && same_bits(dinp[0], dinp[1], (size_t)N * C));
        snprintf(name, sizeof name, "invariant T%d B%d C%d OC%d: dweight, dbias = the halves' sum", T, B, C, OC);
        check_true(name, same_bits(dw[0], dw[1], (size_t)OC * C) && same_bits(db[0], db[1], OC));
    }
    cpu_inv_T = 0;
    for (int k = 0; k < 2; k++) { free(out[k]); free(dinp[k]); }
    for (int k = 0; k < 3; k++) { free(dw[k]); free(db[k]); }
    DX(xx); DX(xw); DX(xb); DX(xd);
    free(x); free(w); free(b); free(dout); free(xdd); free(wdd); free(bdd); free(ddd); free(ro); free(rdx); free(rdw); free(rdb);
    free(fo); free(fdx); free(fdw); free(fdb);
}

static void test_attention(int B, int T, int C, int NH) {
    char name[96];
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float* qkv = frand(nq, 1.5);
    float *out = fnan(no), *pre = fnan(na), *att = fnan(na);
    floatX *xo = TX(out, no), *xpre = TX(pre, na), *xatt = TX(att, na), *xqkv = TX(qkv, nq);
    attention_forward(xo, xpre, xatt, xqkv, B, T, C, NH);
    FX(out, xo, no); FX(pre, xpre, na);
    double *qd = dup_d(qkv, nq), *ro = dzeros(no), *ra = dzeros(na);
    ref_attention_fwd(ro, ra, qd, B, T, C, NH, 1);
    snprintf(name, sizeof name, "attention_forward out B%d T%d C%d NH%d", B, T, C, NH);
    check(name, out, ro, no, TOL_ATT);
    float* attf = fnan(na);
#ifdef LLMC_BF16
    for (size_t i = 0; i < na; i++) attf[i] = ldx(xatt[i]);
#else
    memcpy(attf, att, na * sizeof(float));
#endif
    snprintf(name, sizeof name, "attention_forward att B%d T%d C%d NH%d", B, T, C, NH);
    check(name, attf, ra, na, TOL_ATT);
    int zeros_ok = 1;
    for (int bh = 0; bh < B * NH; bh++)
        for (int t = 0; t < T; t++)
            for (int s = t + 1; s < T; s++)
                if (attf[((size_t)bh * T + t) * T + s] != 0.0f) zeros_ok = 0;
    snprintf(name, sizeof name, "attention_forward att exactly 0 for s>t T%d", T);
    check_true(name, zeros_ok);
    float* dout = frand(no, 1);
    float* dq = frand(nq, 1);
    double *rdq = dup_d(dq, nq), *dd = dup_d(dout, no);
    float *dpre = fnan(na), *datt = fnan(na);
    floatX *xdq = TX(dq, nq), *xdpre = TX(dpre, na), *xdatt = TX(datt, na), *xdout = TX(dout, no);
    attention_backward(xdq, xdpre, xdatt, xdout, xqkv, xatt, B, T, C, NH);
    FX(dq, xdq, nq); FX(dpre, xdpre, na); FX(datt, xdatt, na); DX(xdout); DX(xqkv); DX(xatt);
    ref_attention_bwd(rdq, dd, qd, ra, B, T, C, NH, 1);
    snprintf(name, sizeof name, "attention_backward dqkv B%d T%d C%d NH%d", B, T, C, NH);
    check(name, dq, rdq, nq, TOL_ATT);
    free(qkv); free(out); free(pre); free(att); free(attf); free(qd); free(ro); free(ra); free(dout);
    free(dq); free(rdq); free(dd); free(dpre); free(datt);
}

static void test_gelu_residual(int N) {
    char name[96];
    float* x = frand(N, 5);
    float* out = fnan(N);
    floatX *xo = TX(out, N), *xx = TX(x, N);
    gelu_forward(xo, xx, N);
    FX(out, xo, N);
    double* r = dzeros(N);
    for (int i = 0; i < N; i++) r[i] = ref_gelu(x[i]);
    snprintf(name, sizeof name, "gelu_forward N%d", N); check(name, out, r, N, TOL);
    float *dout = frand(N, 1), *dx = frand(N, 1);
    double* rdx = dup_d(dx, N);
    floatX *xdx = TX(dx, N), *xdout = TX(dout, N);
    gelu_backward(xdx, xx, xdout, N);
    FX(dx, xdx, N); DX(xdout);
    for (int i = 0; i < N; i++) rdx[i] += ref_gelu_grad(x[i]) * dout[i];
    snprintf(name, sizeof name, "gelu_backward N%d", N); check(name, dx, rdx, N, TOL);
    float* y = frand(N, 1);
    floatX *xo2 = TX(out, N), *xy = TX(y, N);
    residual_forward(xo2, xx, xy, N);
    FX(out, xo2, N); DX(xx); DX(xy);
    for (int i = 0; i < N; i++) r[i] = (double)x[i] + y[i];
    snprintf(name, sizeof name, "residual_forward N%d", N); check(name, out, r, N, TOL);
    free(x); free(out); free(r); free(dout); free(dx); free(rdx); free(y);
}

static void test_classifier(int N, int V, int Vp, double lscale) {
    char name[96];
    float* logits = frand((size_t)N * Vp, lscale);
    int* tg = (int*)malloc(sizeof(int) * N);
    for (int n = 0; n < N; n++) tg[n] = (int)((urand() + 1) * 0.5 * V) % V;
    tg[0] = 0; tg[N - 1] = V - 1;
    double* ld = dup_d(logits, (size_t)N * Vp);
    double *rl = dzeros(N), *rdl = dzeros((size_t)N * Vp);
    float dloss = 1.0f / N;
    ref_classifier(rl, rdl, ld, tg, N, V, Vp, dloss);
    float* keep = dup_f(logits, (size_t)N * Vp);
    float* losses = fnan(N);
    floatX* xl = TX(logits, (size_t)N * Vp);
    fused_classifier(xl, losses, tg, N, V, Vp, 0.0f);
    FX(logits, xl, (size_t)N * Vp);
    snprintf(name, sizeof name, "fused_classifier losses (dloss=0) N%d V%d", N, V);
    check_f32(name, losses, rl, N, TOL);
    check_true("fused_classifier dloss=0 leaves logits untouched",
               memcmp(keep, logits, sizeof(float) * N * Vp) == 0);
    float* losses2 = fnan(N);
    floatX* xl2 = TX(logits, (size_t)N * Vp);
    fused_classifier(xl2, losses2, tg, N, V, Vp, dloss);
    FX(logits, xl2, (size_t)N * Vp);
    snprintf(name, sizeof name, "fused_classifier losses N%d V%d Vp%d", N, V, Vp);
    check_f32(name, losses2, rl, N, TOL);
    snprintf(name, sizeof name, "fused_classifier dlogits N%d V%d Vp%d", N, V, Vp);
    check(name, logits, rdl, (size_t)N * Vp, TOL);
    free(logits); free(tg); free(ld); free(rl); free(rdl); free(keep); free(losses); free(losses2);
}

/* the classifier over vocabulary chunks (classifier_stats_init,
   classifier_chunk_stats, classifier_losses, classifier_chunk_grad): every
   chunk is its own (N, ncols) array, as gpt.h holds them */
static void test_classifier_chunks(int N, int V, int Vp, int chunk, double lscale) {
    char name[96];
    float* logits = frand((size_t)N * Vp, lscale);
    int* tg = (int*)malloc(sizeof(int) * N);
    for (int n = 0; n < N; n++) tg[n] = (int)((urand() + 1) * 0.5 * V) % V;
    tg[0] = 0; tg[N - 1] = V - 1;
    double* ld = dup_d(logits, (size_t)N * Vp);
    double *rl = dzeros(N), *rdl = dzeros((size_t)N * Vp);
    float dloss = 1.0f / N;
    ref_classifier(rl, rdl, ld, tg, N, V, Vp, dloss);
    int nch = (Vp + chunk - 1) / chunk;
    float *mx = fnan(N), *tl = fnan(N), *losses = fnan(N);
    double* sum = dzeros(N);
    float* part = fnan((size_t)N * chunk);
    float* grad = fnan((size_t)N * Vp);
    classifier_stats_init(mx, sum, tl, N);
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < nch; k++) {
            int col0 = k * chunk, nc = Vp - col0 < chunk ? Vp - col0 : chunk;
            for (int n = 0; n < N; n++)
                memcpy(part + (size_t)n * nc, logits + (size_t)n * Vp + col0, sizeof(float) * nc);
            floatX* xp = TX(part, (size_t)N * nc);
            if (pass == 0) {
                classifier_chunk_stats(xp, N, col0, nc, V, tg, mx, sum, tl);
                DX(xp);
            } else {
                classifier_chunk_grad(xp, N, col0, nc, V, tg, mx, sum, dloss);
                FX(part, xp, (size_t)N * nc);
                for (int n = 0; n < N; n++)
                    memcpy(grad + (size_t)n * Vp + col0, part + (size_t)n * nc, sizeof(float) * nc);
            }
            if (pass == 0 && k == nch - 1) classifier_losses(losses, mx, sum, tl, N);
        }
    snprintf(name, sizeof name, "classifier chunks losses N%d V%d Vp%d chunk%d", N, V, Vp, chunk);
    check_f32(name, losses, rl, N, TOL);
    snprintf(name, sizeof name, "classifier chunks dlogits N%d V%d Vp%d chunk%d", N, V, Vp, chunk);
    check(name, grad, rdl, (size_t)N * Vp, TOL);
    free(logits); free(tg); free(ld); free(rl); free(rdl); free(mx); free(tl); free(losses); free(sum);
    free(part); free(grad);
}

/* encoder_forward_rows over row chunks of wte == encoder_forward; the
   embedding gradient of a range of a table (embedding_backward_range) from
   rows keyed by token, the range cutting the first and last rows: dst =
   round(dst + round(sum of the rows of each key, in `order`)) (two
   roundings by design, see encoder.h; RB models them) */
static void test_embedding_rows(int B, int T, int C, int V, int chunk) {
    char name[96];
    int n = B * T;
    int* inp = (int*)malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) inp[i] = (int)((urand() + 1) * 0.5 * V) % V;
    inp[0] = inp[n - 1] = inp[n / 2];
    float *wte = frand((size_t)V * C, 1), *wpe = frand((size_t)T * C, 1), *out = fnan((size_t)n * C);
    floatX *xo = TX(out, (size_t)n * C), *xwpe = TX(wpe, (size_t)T * C);
    for (int r0 = 0; r0 < V; r0 += chunk) {
        int nr = V - r0 < chunk ? V - r0 : chunk;
        floatX* xw = TX(wte + (size_t)r0 * C, (size_t)nr * C);
        encoder_forward_rows(xo, inp, xw, r0, nr, xwpe, B, T, C);
        DX(xw);
    }
    FX(out, xo, (size_t)n * C); DX(xwpe);
    double* ref = dzeros((size_t)n * C);
    for (int bt = 0; bt < n; bt++)
        for (int i = 0; i < C; i++)
            ref[(size_t)bt * C + i] = (double)wte[(size_t)inp[bt] * C + i] + wpe[(size_t)(bt % T) * C + i];
    snprintf(name, sizeof name, "encoder_forward_rows B%d T%d C%d chunk%d", B, T, C, chunk);
    check(name, out, ref, (size_t)n * C, TOL);
    /* gradient rows keyed by token; the table range [lo, hi) cuts rows */
    float* rows = frand((size_t)n * C, 1);
    int* order = (int*)malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort by (key, index) */
        for (int j = i; j > 0 && inp[order[j - 1]] > inp[order[j]]; j--) {
            int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    size_t lo = (size_t)C / 2, hi = (size_t)V * C - (size_t)C / 3;
    float* dst = frand(hi - lo, 1);
    double* rdst = dup_d(dst, hi - lo);
    double* acc = dzeros((size_t)V * C);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < C; c++) acc[(size_t)inp[i] * C + c] += rows[(size_t)i * C + c];
    int* seen = (int*)calloc(V, sizeof(int));
    for (int i = 0; i < n; i++) seen[inp[i]] = 1;
    for (size_t e = lo; e < hi; e++)
        if (seen[e / C]) rdst[e - lo] = RB(rdst[e - lo] + RB(acc[e]));
    /* the segments: runs of equal token in order, for table rows with
       elements in [lo, hi) (as gpt.h's gpt2_embedding_segments makes them) */
    int *seg = (int*)malloc(sizeof(int) * (n + 1)), *seg_key = (int*)malloc(sizeof(int) * n), nseg = 0;
    int r_first = (int)(lo / C), r_last = (int)((hi - 1) / C), i = 0;
    while (i < n && inp[order[i]] < r_first) i++;
    while (i < n && inp[order[i]] <= r_last) {
        seg[nseg] = i;
        seg_key[nseg++] = inp[order[i]];
        int k = inp[order[i]];
        while (i < n && inp[order[i]] == k) i++;
    }
    seg[nseg] = i;
    floatX *xdst = TX(dst, hi - lo), *xrows = TX(rows, (size_t)n * C);
    embedding_backward_range(xdst, lo, hi, xrows, order, seg, seg_key, nseg, C);
    free(seg); free(seg_key);
    FX(dst, xdst, hi - lo); DX(xrows);
    snprintf(name, sizeof name, "embedding_backward_range n%d C%d V%d", n, C, V);
    check(name, dst, rdst, hi - lo, TOL);
    free(inp); free(wte); free(wpe); free(out); free(ref); free(rows); free(order); free(dst); free(rdst);
    free(acc); free(seen);
}

static void test_sum_squares(size_t n) {
    char name[96];
    float* x = frand(n, 1);
    double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
    floatX* xx = TX(x, n);
    float got = (float)sum_squares(xx, n);
    double rel = fabs(sum_squares(xx, n) - ref) / (ref > 0 ? ref : 1);
    DX(xx);
    snprintf(name, sizeof name, "sum_squares n%zu", n);
    check_f32(name, &got, &ref, 1, 1e-6);
    snprintf(name, sizeof name, "sum_squares n%zu rel err %.2e < 1e-9", n, rel);
    check_true(name, rel < 1e-9);
    free(x);
}

/* --invariant 1's grad norm parts (global_norm.h max_square,
   sum_squares_fixed): bit for bit what the first, scalar versions gave
   (kept here as the reference), on random data at several magnitudes and
   on the edge cases: zeros only, denormals, the largest floats, squares
   just below the grid's 2^31, odd lengths, and a NaN or an infinity
   anywhere (max_square: NaN). Split into pieces at arbitrary points, the
   integer sums add up to the whole's (the order does not matter). */
static double ref_max_square(const floatX* x, size_t n) {
    double m = 0.0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float v = ldx(x[i]);
        bad |= !isfinite(v);
        double s = (double)v * (double)v;
        m = s > m ? s : m;
    }
    return bad ? NAN : m;
}
static void ref_sum_squares_fixed(const floatX* x, size_t n, double scale, unsigned long long* hi, unsigned long long* lo) {
    unsigned long long h = 0, l = 0;
    for (size_t i = 0; i < n; i++) {
        double v = (double)ldx(x[i]);
        double y = v * v * scale;
        unsigned long long yi = (unsigned long long)y;
        h += yi;
        l += (unsigned long long)((y - (double)yi) * 2147483648.0);
    }
    *hi += h; *lo += l;
}
static void check_norm_parts(const char* what, const floatX* x, size_t n) {
    char name[160];
    double m0 = ref_max_square(x, n), m1 = max_square(x, n);
    int same = (isnan(m0) && isnan(m1)) || (!isnan(m0) && !isnan(m1) && memcmp(&m0, &m1, sizeof m0) == 0);
    snprintf(name, sizeof name, "max_square %s n%zu: %.17g as the reference %.17g", what, n, m1, m0);
    check_true(name, same);
    if (isnan(m0) || m0 == 0.0) return;
    double scale = ldexp(1.0, 30 - ilogb(m0));   /* as zero_grad_norm */
    unsigned long long h0 = 0, l0 = 0, h1 = 0, l1 = 0, h2 = 0, l2 = 0;
    ref_sum_squares_fixed(x, n, scale, &h0, &l0);
    sum_squares_fixed(x, n, scale, &h1, &l1);
    size_t cut[3] = {n / 3, n / 3 + 17 < n ? n / 3 + 17 : n, n};
    size_t a = 0;
    for (int k = 0; k < 3; k++) { sum_squares_fixed(x + a, cut[k] - a, scale, &h2, &l2); a = cut[k]; }
    snprintf(name, sizeof name, "sum_squares_fixed %s n%zu: hi %llu lo %llu as the reference, and in 3 pieces", what, n, h1, l1);
    check_true(name, h0 == h1 && l0 == l1 && h2 == h1 && l2 == l1);
}
static void test_norm_parts(void) {
    const size_t n = 100003;
    floatX* x = (floatX*)malloc(n * sizeof(floatX) + 16);
    const double mags[4] = {1.0, 1e-3, 1e-30, 1e30};
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < n; i++) x[i] = stx((float)(urand() * mags[k] * (i % 7 == 0 ? 1e-6 : 1.0)));
        char w[32];
        snprintf(w, sizeof w, "random x %g", mags[k]);
        check_norm_parts(w, x, n);
        check_norm_parts("odd length", x + 1, 37);
    }
    for (size_t i = 0; i < n; i++) x[i] = stx(0.0f);
    check_norm_parts("zeros", x, n);
    x[5] = stx(-0.0f);
    check_norm_parts("zeros and -0", x, n);
    /* denormals (fp32: below 2^-126; bf16 has the same exponent range) */
    for (size_t i = 0; i < n; i++) x[i] = stx((float)(urand() * 1e-39));
    check_norm_parts("denormals", x, n);
    x[7] = stx(1e-45f);
    check_norm_parts("denormals and the smallest", x, 9);
    /* the largest floats: the squares reach 2^256 */
    for (size_t i = 0; i < n; i++) x[i] = stx((float)(urand() * 3e38));
    x[11] = stx(-3.38e38f);   /* bf16: FLT_MAX would round to inf */
    check_norm_parts("largest", x, n);
    /* squares just below the grid's 2^31 (every element near the max) */
    for (size_t i = 0; i < n; i++) x[i] = stx((float)(1.0 - 1e-7 * (i % 5)));
    check_norm_parts("near the max", x, n);
    /* not finite anywhere: NaN from max_square */
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    const size_t at[3] = {0, n / 2, n - 1};
    for (int b = 0; b < 3; b++)
        for (int k = 0; k < 3; k++) {
            for (size_t i = 0; i < n; i++) x[i] = stx((float)urand());
            x[at[k]] = stx(bad[b]);
            char w[48];
            snprintf(w, sizeof w, "%s at %zu", b == 0 ? "NaN" : b == 1 ? "+inf" : "-inf", at[k]);
            check_norm_parts(w, x, n);
        }
    free(x);
}

static void test_adamw(size_t n, int with_master) {
    char name[96];
    float *p = frand(n, 1), *g = frand(n, 0.1), *m = frand(n, 0.01), *v = frand(n, 0.001);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float* master = with_master ? dup_f(p, n) : NULL;
    if (master) for (size_t i = 0; i < n; i++) p[i] = 0; /* params are written from master */
    double *rp = dup_d(with_master ? master : p, n), *rm = dup_d(m, n), *rv = dup_d(v, n);
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
    int t = 3;
    float c1 = 1.0f - powf(b1, t), c2 = 1.0f - powf(b2, t);
    for (size_t i = 0; i < n; i++) {
        double gg = (double)g[i] * gs;
        rm[i] = b1 * rm[i] + (1.0 - b1) * gg;
        rv[i] = b2 * rv[i] + (1.0 - b2) * gg * gg;
        double mh = rm[i] / c1, vh = rv[i] / c2;
        rp[i] = rp[i] - lr * (mh / (sqrt(vh) + eps) + wd * rp[i]);
    }
    floatX *xp = TX(p, n), *xg = TX(g, n);
    adamw_update(xp, master, xg, m, v, n, lr, b1, b2, c1, c2, eps, wd, gs);
    FX(p, xp, n); DX(xg);
    snprintf(name, sizeof name, "adamw_update params master%d n%zu", with_master, n);
    check(name, p, rp, n, TOL);
    if (master) {
        snprintf(name, sizeof name, "adamw_update master n%zu", n);
        check_f32(name, master, rp, n, TOL);
    }
    snprintf(name, sizeof name, "adamw_update m n%zu", n); check_f32(name, m, rm, n, TOL);
    snprintf(name, sizeof name, "adamw_update v n%zu", n); check_f32(name, v, rv, n, TOL);
    free(p); free(g); free(m); free(v); free(master); free(rp); free(rm); free(rv);
}

static void test_expf(void) {
    /* the vectorizable exp used by softmax/gelu: relative error over a range */
    double maxrel = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -87.0f + (175.0f * i) / 200000.0f;
        double r = exp((double)x), e = fabs(cpu_expf(x) - r) / r;
        if (e > maxrel) maxrel = e;
    }
    char name[96];
    snprintf(name, sizeof name, "cpu_expf max rel err on [-87,88] = %.2e < 5e-7", maxrel);
    check_true(name, maxrel < 5e-7);
}

/* ---- --dump DIR: inputs and kernel outputs for dev/kernels_ref.py -------- */

#ifndef LLMC_BF16
static FILE* g_manifest;
static const char* g_dir;
/* writes DIR/name.bin (raw little-endian) and a manifest line
   "name dtype d0 d1 ..." */
static void dump(const char* name, const void* p, const char* dtype, int nd, const int* dims) {
    char path[512];
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)dims[i];
    snprintf(path, sizeof path, "%s/%s.bin", g_dir, name);
    FILE* f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    fwrite(p, 4, n, f);
    fclose(f);
    fprintf(g_manifest, "%s %s", name, dtype);
    for (int i = 0; i < nd; i++) fprintf(g_manifest, " %d", dims[i]);
    fprintf(g_manifest, "\n");
}
#define DUMPF(name, p, ...) do { int d_[] = {__VA_ARGS__}; dump(name, p, "f32", (int)(sizeof d_ / sizeof d_[0]), d_); } while (0)
#define DUMPI(name, p, ...) do { int d_[] = {__VA_ARGS__}; dump(name, p, "i32", (int)(sizeof d_ / sizeof d_[0]), d_); } while (0)

/* runs each kernel once on the brief's odd sizes, gradients from zero */
static int dump_all(const char* dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    g_dir = dir;
    g_manifest = fopen(path, "w");
    if (!g_manifest) { perror(path); return 2; }
    int B = 2, T = 7, C = 12, NH = 3, V = 37, Vp = 40, N = B * T;
    fprintf(g_manifest, "config B %d T %d C %d NH %d V %d Vp %d\n", B, T, C, NH, V, Vp);
    /* encoder */
    int* inp = (int*)malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) inp[i] = (i * 7 + 3) % V;
    inp[1] = inp[5];
    float *wte = frand((size_t)Vp * C, 1), *wpe = frand((size_t)T * C, 1), *enc = fnan((size_t)N * C);
    float *denc = frand((size_t)N * C, 1), *dwte = (float*)calloc((size_t)Vp * C, 4), *dwpe = (float*)calloc((size_t)T * C, 4);
    encoder_forward(enc, inp, wte, wpe, B, T, C);
    encoder_backward(dwte, dwpe, denc, inp, B, T, C);
    DUMPI("enc_inp", inp, N); DUMPF("enc_wte", wte, Vp, C); DUMPF("enc_wpe", wpe, T, C);
    DUMPF("enc_out", enc, N, C); DUMPF("enc_dout", denc, N, C); DUMPF("enc_dwte", dwte, Vp, C);
    DUMPF("enc_dwpe", dwpe, T, C);
    /* layernorm */
    float *x = frand((size_t)N * C, 2), *w = frand(C, 1), *b = frand(C, 1), *out = fnan((size_t)N * C);
    float *mean = fnan(N), *rstd = fnan(N), *dout = frand((size_t)N * C, 1);
    float *dx = (float*)calloc((size_t)N * C, 4), *dw = (float*)calloc(C, 4), *db = (float*)calloc(C, 4);
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
    DUMPF("ln_x", x, N, C); DUMPF("ln_w", w, C); DUMPF("ln_b", b, C); DUMPF("ln_out", out, N, C);
    DUMPF("ln_dout", dout, N, C); DUMPF("ln_dx", dx, N, C); DUMPF("ln_dw", dw, C); DUMPF("ln_db", db, C);
    /* matmul */
    int OC = 3 * C;
    float *mw = frand((size_t)OC * C, 1), *mb = frand(OC, 1), *mo = fnan((size_t)N * OC), *mdo = frand((size_t)N * OC, 1);
    float *mdx = (float*)calloc((size_t)N * C, 4), *mdw = (float*)calloc((size_t)OC * C, 4), *mdb = (float*)calloc(OC, 4);
    matmul_forward(mo, x, mw, mb, N, C, OC);
    matmul_backward(mdx, mdw, mdb, mdo, x, mw, N, C, OC);
    DUMPF("mm_x", x, N, C); DUMPF("mm_w", mw, OC, C); DUMPF("mm_b", mb, OC); DUMPF("mm_out", mo, N, OC);
    DUMPF("mm_dout", mdo, N, OC); DUMPF("mm_dx", mdx, N, C); DUMPF("mm_dw", mdw, OC, C); DUMPF("mm_db", mdb, OC);
    /* attention */
    float *qkv = frand((size_t)N * 3 * C, 1.5), *ao = fnan((size_t)N * C), *pre = fnan((size_t)B * NH * T * T);
    float *att = fnan((size_t)B * NH * T * T), *ado = frand((size_t)N * C, 1), *dqkv = (float*)calloc((size_t)N * 3 * C, 4);
    float *dpre = fnan((size_t)B * NH * T * T), *datt = fnan((size_t)B * NH * T * T);
    attention_forward(ao, pre, att, qkv, B, T, C, NH);
    attention_backward(dqkv, dpre, datt, ado, qkv, att, B, T, C, NH);
    DUMPF("att_qkv", qkv, B, T, 3 * C); DUMPF("att_out", ao, B, T, C); DUMPF("att_att", att, B, NH, T, T);
    DUMPF("att_dout", ado, B, T, C); DUMPF("att_dqkv", dqkv, B, T, 3 * C);
    /* gelu */
    float *gx = frand((size_t)N * 4 * C, 4), *go = fnan((size_t)N * 4 * C), *gdo = frand((size_t)N * 4 * C, 1);
    float* gdx = (float*)calloc((size_t)N * 4 * C, 4);
    gelu_forward(go, gx, N * 4 * C);
    gelu_backward(gdx, gx, gdo, N * 4 * C);
    DUMPF("gelu_x", gx, N * 4 * C); DUMPF("gelu_out", go, N * 4 * C); DUMPF("gelu_dout", gdo, N * 4 * C);
    DUMPF("gelu_dx", gdx, N * 4 * C);
    /* classifier */
    float *lg = frand((size_t)N * Vp, 4), *losses = fnan(N);
    int* tg = (int*)malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) tg[i] = (i * 5 + 1) % V;
    DUMPF("cls_logits", lg, N, Vp); DUMPI("cls_targets", tg, N);
    fused_classifier(lg, losses, tg, N, V, Vp, 1.0f / N);
    DUMPF("cls_losses", losses, N); DUMPF("cls_dlogits", lg, N, Vp);
    /* AdamW: two steps from m = v = 0 (as torch.optim.AdamW starts), with master */
    size_t P = 1000;
    float *p = frand(P, 1), *g1 = frand(P, 0.1), *g2 = frand(P, 0.1), *m = (float*)calloc(P, 4), *v = (float*)calloc(P, 4);
    float* master = dup_f(p, P);
    DUMPF("adam_p0", p, (int)P); DUMPF("adam_g1", g1, (int)P); DUMPF("adam_g2", g2, (int)P);
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    adamw_update(p, master, g1, m, v, P, lr, b1, b2, 1.0f - b1, 1.0f - b2, eps, wd, 1.0f);
    adamw_update(p, master, g2, m, v, P, lr, b1, b2, 1.0f - b1 * b1, 1.0f - b2 * b2, eps, wd, 1.0f);
    DUMPF("adam_p2", p, (int)P); DUMPF("adam_m2", m, (int)P); DUMPF("adam_v2", v, (int)P);
    fclose(g_manifest);
    printf("wrote %s/manifest.txt and the arrays it lists\n", dir);
    return 0;
}
#endif

/* Both compiles of every non-matmul kernel (elementwise.h: name##_avx2 at
   x86-64-v3, name##_avx512 under the AVX-512 target) on the same inputs,
   odd sizes (vector tails, several blocks): the same bits, output by
   output. The dispatcher picks one by the level; this checks that the
   choice never moves a number. Skipped and counted below avx512. */
static floatX* ew_rand(size_t n, double scale) {
    float* f = frand(n, scale);
    floatX* x = (floatX*)malloc((n ? n : 1) * sizeof(floatX));
    for (size_t i = 0; i < n; i++) x[i] = stx(f[i]);
    free(f);
    return x;
}
static floatX* ew_dup(const floatX* x, size_t n) {
    floatX* y = (floatX*)malloc((n ? n : 1) * sizeof(floatX));
    memcpy(y, x, n * sizeof(floatX));
    return y;
}
#ifdef LLMC_BF16
/* --invariant 1's packing of a tile plan's B (matmul_invariant.h): our
   loop (cpu_inv_pack_vnni, oneDNN's BA16a64b2a layout) against oneDNN's
   reorder into the layout the plan's primitive asks for, byte for byte,
   padding included; shapes with K and N off the 32 x 64 blocks. Only where
   the primitive runs and asks for that layout (else skipped, counted). */
static void test_inv_pack(int K, int N, int ldb, int trans) {
    char nm[128];
    snprintf(nm, sizeof(nm), "invariant pack K%d N%d ld%d%s: our loop = oneDNN's reorder", K, N, ldb, trans ? " (B stored transposed)" : "");
    const char* skip = cpu_isa_skip_reason(CPU_ISA_AVX512_BF16);
    if (skip) { check_skip(nm, skip); return; }
    const long long sa[2] = {K, 1}, sb[2] = {trans ? 1 : ldb, trans ? ldb : 1}, sc[2] = {N, 1};
    CpuInvPlan* p = cpu_inv_plan(64, N, K, sa, sb, sc, 0, 0, 0, 1);
    if (p->vnni != 1 + trans) { check_skip(nm, "skipped (the primitive asks for another layout than BA16a64b2a here)"); return; }
    floatX* B = ew_rand((size_t)(trans ? N : K) * ldb, 1.0);
    unsigned char* a = (unsigned char*)malloc(p->bbytes);
    unsigned char* b = (unsigned char*)malloc(p->bbytes);
    memset(a, 0x5a, p->bbytes);
    memset(b, 0xa5, p->bbytes);
    if (trans) cpu_inv_pack_vnni_t((uint16_t*)a, (const uint16_t*)B, ldb, K, N, p->kp, p->np);
    else cpu_inv_pack_vnni((uint16_t*)a, (const uint16_t*)B, ldb, K, N, p->kp, p->np);
    cpu_inv_plan_pack_reorder(p, B, b);
    check_true(nm, memcmp(a, b, p->bbytes) == 0);
    free(B); free(a); free(b);
}
#endif

static void ew_same(const char* kernel, const char* what, const void* a, const void* b, size_t bytes) {
    char nm[160];
    snprintf(nm, sizeof(nm), "%s: %s of the avx2 and avx512 compiles bitwise equal (%zu bytes)", kernel, what, bytes);
    check_true(nm, memcmp(a, b, bytes) == 0);
}
static void test_elementwise_levels(int B, int T, int C, int NH, int V) {
    const char* skip = cpu_isa_skip_reason(CPU_ISA_AVX512);
    char nm[128];
    snprintf(nm, sizeof(nm), "elementwise avx2 vs avx512 compiles B%d T%d C%d NH%d V%d", B, T, C, NH, V);
    if (skip) { check_skip(nm, skip); return; }
    printf("-- %s\n", nm);
    int N = B * T, Vp = (V + 7) / 8 * 8;
    size_t NC = (size_t)N * C;
    int* inp = (int*)malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) inp[i] = (int)((urand() + 1.0) * 0.5 * V) % V;
    /* encoder */
    floatX *wte = ew_rand((size_t)V * C, 1.0), *wpe = ew_rand((size_t)T * C, 1.0);
    floatX *o1 = ew_rand(NC, 1.0), *o2 = ew_dup(o1, NC);
    encoder_forward_avx2(o1, inp, wte, wpe, B, T, C);
    encoder_forward_avx512(o2, inp, wte, wpe, B, T, C);
    ew_same("encoder_forward", "out", o1, o2, NC * sizeof(floatX));
    encoder_forward_rows_avx2(o1, inp, wte + (size_t)3 * C, 3, V / 2, wpe, B, T, C);
    encoder_forward_rows_avx512(o2, inp, wte + (size_t)3 * C, 3, V / 2, wpe, B, T, C);
    ew_same("encoder_forward_rows", "out", o1, o2, NC * sizeof(floatX));
    {
        floatX *dw1 = ew_rand((size_t)V * C, 0.1), *dp1 = ew_rand((size_t)T * C, 0.1);
        floatX *dw2 = ew_dup(dw1, (size_t)V * C), *dp2 = ew_dup(dp1, (size_t)T * C);
        encoder_backward_avx2(dw1, dp1, o1, inp, B, T, C);
        encoder_backward_avx512(dw2, dp2, o1, inp, B, T, C);
        ew_same("encoder_backward", "dwte", dw1, dw2, (size_t)V * C * sizeof(floatX));
        ew_same("encoder_backward", "dwpe", dp1, dp2, (size_t)T * C * sizeof(floatX));
        free(dw1); free(dw2); free(dp1); free(dp2);
    }
    /* layernorm */
    {
        floatX *x = ew_rand(NC, 2.0), *w = ew_rand(C, 1.0), *bb = ew_rand(C, 0.5), *d = ew_rand(NC, 1.0);
        float *m1 = (float*)malloc(N * sizeof(float)), *r1 = (float*)malloc(N * sizeof(float));
        float *m2 = (float*)malloc(N * sizeof(float)), *r2 = (float*)malloc(N * sizeof(float));
        layernorm_forward_avx2(o1, m1, r1, x, w, bb, N, C);
        layernorm_forward_avx512(o2, m2, r2, x, w, bb, N, C);
        ew_same("layernorm_forward", "out", o1, o2, NC * sizeof(floatX));
        ew_same("layernorm_forward", "mean", m1, m2, N * sizeof(float));
        ew_same("layernorm_forward", "rstd", r1, r2, N * sizeof(float));
        floatX *di1 = ew_rand(NC, 0.1), *dw1 = ew_rand(C, 0.1), *db1 = ew_rand(C, 0.1);
        floatX *di2 = ew_dup(di1, NC), *dw2 = ew_dup(dw1, C), *db2 = ew_dup(db1, C);
        layernorm_backward_avx2(di1, dw1, db1, d, x, w, m1, r1, N, C);
        layernorm_backward_avx512(di2, dw2, db2, d, x, w, m1, r1, N, C);
        ew_same("layernorm_backward", "dinp", di1, di2, NC * sizeof(floatX));
        ew_same("layernorm_backward", "dweight", dw1, dw2, C * sizeof(floatX));
        ew_same("layernorm_backward", "dbias", db1, db2, C * sizeof(floatX));
        free(x); free(w); free(bb); free(d); free(m1); free(r1); free(m2); free(r2);
        free(di1); free(dw1); free(db1); free(di2); free(dw2); free(db2);
    }
    /* attention (its products are the matmul path's, the same in both) */
    {
        size_t q3 = (size_t)N * 3 * C, tt = (size_t)B * NH * T * T;
        floatX *qkv = ew_rand(q3, 1.0), *d = ew_rand(NC, 1.0);
        floatX *pa1 = ew_rand(tt, 0.0), *a1 = ew_rand(tt, 0.0), *pa2 = ew_dup(pa1, tt), *a2 = ew_dup(a1, tt);
        attention_forward_avx2(o1, pa1, a1, qkv, B, T, C, NH);
        attention_forward_avx512(o2, pa2, a2, qkv, B, T, C, NH);
        ew_same("attention_forward", "out", o1, o2, NC * sizeof(floatX));
        ew_same("attention_forward", "att", a1, a2, tt * sizeof(floatX));
        floatX *dq1 = ew_rand(q3, 0.0), *dq2 = ew_dup(dq1, q3);
        floatX *dpa1 = ew_rand(tt, 0.0), *da1 = ew_rand(tt, 0.0), *dpa2 = ew_dup(dpa1, tt), *da2 = ew_dup(da1, tt);
        attention_backward_avx2(dq1, dpa1, da1, d, qkv, a1, B, T, C, NH);
        attention_backward_avx512(dq2, dpa2, da2, d, qkv, a1, B, T, C, NH);
        ew_same("attention_backward", "dqkv", dq1, dq2, q3 * sizeof(floatX));
        free(qkv); free(d); free(pa1); free(a1); free(pa2); free(a2);
        free(dq1); free(dq2); free(dpa1); free(da1); free(dpa2); free(da2);
    }
    /* gelu, residual */
    {
        floatX *x = ew_rand(NC * 4, 3.0), *d = ew_rand(NC * 4, 1.0), *g1 = ew_rand(NC * 4, 0.0), *g2 = ew_dup(g1, NC * 4);
        gelu_forward_avx2(g1, x, NC * 4);
        gelu_forward_avx512(g2, x, NC * 4);
        ew_same("gelu_forward", "out", g1, g2, NC * 4 * sizeof(floatX));
        floatX *dx1 = ew_rand(NC * 4, 0.1), *dx2 = ew_dup(dx1, NC * 4);
        gelu_backward_avx2(dx1, x, d, NC * 4);
        gelu_backward_avx512(dx2, x, d, NC * 4);
        ew_same("gelu_backward", "dinp", dx1, dx2, NC * 4 * sizeof(floatX));
        residual_forward_avx2(g1, x, d, NC * 4);
        residual_forward_avx512(g2, x, d, NC * 4);
        ew_same("residual_forward", "out", g1, g2, NC * 4 * sizeof(floatX));
        /* the norms: sums of squares, the largest square, the fixed-point sums */
        double s1 = sum_squares_avx2(x, NC * 4), s2 = sum_squares_avx512(x, NC * 4);
        ew_same("sum_squares", "sum", &s1, &s2, sizeof(double));
        s1 = max_square_avx2(x, NC * 4 - 1); s2 = max_square_avx512(x, NC * 4 - 1);
        ew_same("max_square", "max", &s1, &s2, sizeof(double));
        unsigned long long h[2] = {0, 0}, l[2] = {0, 0};
        double sc = ldexp(1.0, 20);
        sum_squares_fixed_avx2(x, NC * 4, sc, &h[0], &l[0]);
        sum_squares_fixed_avx512(x, NC * 4, sc, &h[1], &l[1]);
        check_true("sum_squares_fixed: the avx2 and avx512 compiles' integer sums equal", h[0] == h[1] && l[0] == l[1]);
        free(x); free(d); free(g1); free(g2); free(dx1); free(dx2);
    }
    /* classifier: fused, and over vocabulary chunks */
    {
        size_t nv = (size_t)N * Vp;
        floatX *lg = ew_rand(nv, 4.0), *l1 = ew_dup(lg, nv), *l2 = ew_dup(lg, nv);
        float *ls1 = (float*)malloc(N * sizeof(float)), *ls2 = (float*)malloc(N * sizeof(float));
        int* tg = (int*)malloc(N * sizeof(int));
        for (int i = 0; i < N; i++) tg[i] = (int)((urand() + 1.0) * 0.5 * V) % V;
        fused_classifier_avx2(l1, ls1, tg, N, V, Vp, 1.0f / N);
        fused_classifier_avx512(l2, ls2, tg, N, V, Vp, 1.0f / N);
        ew_same("fused_classifier", "losses", ls1, ls2, N * sizeof(float));
        ew_same("fused_classifier", "dlogits", l1, l2, nv * sizeof(floatX));
        float mx[2][64], tl[2][64];
        double sm[2][64];
        int n = N < 64 ? N : 64, w = Vp / 2;
        floatX *c1 = ew_dup(lg, (size_t)n * w), *c2 = ew_dup(lg, (size_t)n * w);
        for (int k = 0; k < 2; k++) classifier_stats_init(mx[k], sm[k], tl[k], n);
        classifier_chunk_stats_avx2(c1, n, w, w, V, tg, mx[0], sm[0], tl[0]);
        classifier_chunk_stats_avx512(c2, n, w, w, V, tg, mx[1], sm[1], tl[1]);
        ew_same("classifier_chunk_stats", "max", mx[0], mx[1], n * sizeof(float));
        ew_same("classifier_chunk_stats", "sum", sm[0], sm[1], n * sizeof(double));
        classifier_chunk_grad_avx2(c1, n, w, w, V, tg, mx[0], sm[0], 0.5f);
        classifier_chunk_grad_avx512(c2, n, w, w, V, tg, mx[0], sm[0], 0.5f);
        ew_same("classifier_chunk_grad", "dlogits", c1, c2, (size_t)n * w * sizeof(floatX));
        free(lg); free(l1); free(l2); free(ls1); free(ls2); free(tg); free(c1); free(c2);
    }
    /* AdamW, with and without fp32 masters */
    for (int with_master = 0; with_master < 2; with_master++) {
        size_t n = NC * 3 + 5;
        floatX *p1 = ew_rand(n, 1.0), *gr = ew_rand(n, 0.1), *p2 = ew_dup(p1, n);
        float *ma1 = frand(n, 1.0), *m1 = frand(n, 0.01), *v1 = frand(n, 0.0);
        for (size_t i = 0; i < n; i++) v1[i] = fabsf(v1[i]) + 1e-4f;
        float *ma2 = dup_f(ma1, n), *m2 = dup_f(m1, n), *v2 = dup_f(v1, n);
        adamw_update_avx2(p1, with_master ? ma1 : NULL, gr, m1, v1, n, 1e-3f, 0.9f, 0.95f, 0.1f, 0.05f, 1e-8f, 0.1f, 0.7f);
        adamw_update_avx512(p2, with_master ? ma2 : NULL, gr, m2, v2, n, 1e-3f, 0.9f, 0.95f, 0.1f, 0.05f, 1e-8f, 0.1f, 0.7f);
        const char* k = with_master ? "adamw_update (masters)" : "adamw_update (no masters)";
        ew_same(k, "params", p1, p2, n * sizeof(floatX));
        ew_same(k, "m", m1, m2, n * sizeof(float));
        ew_same(k, "v", v1, v2, n * sizeof(float));
        if (with_master) ew_same(k, "masters", ma1, ma2, n * sizeof(float));
        free(p1); free(gr); free(p2); free(ma1); free(m1); free(v1); free(ma2); free(m2); free(v2);
    }
    free(inp); free(wte); free(wpe); free(o1); free(o2);
}

int main(int argc, char** argv) {
    cpu_blas_fast_path(argv); /* OpenBLAS: its kernels at the ISA level (LLMC_CPU_ISA) */
#ifdef LLMC_BF16
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) {
        fprintf(stderr, "error: --dump: only the fp32 build writes the per-op dump\n");
        return 1;
    }
#else
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump_all(argv[2]);
#endif
    {
        char isa[512];
        cpu_isa_describe(isa, sizeof(isa));
        printf("cpu: %s\n", isa);
        if (cpu_isa_error()[0]) { fprintf(stderr, "error: %s\n", cpu_isa_error()); return 1; }
    }
#ifdef LLMC_BF16
    printf("bf16 build (floatX = bf16), matmul implementation %s, threads: %d\n", cpu_gemm_mode(),
           cpu_num_threads());
#else
    printf("threads: %d\n", cpu_num_threads());
#endif
    fd_layernorm();
    fd_attention();
    fd_gelu_classifier();
    test_expf();
    /* odd sizes of the brief: B=2, T=7, C=12, NH=3, V=37, Vp=40 */
    test_encoder(2, 7, 12, 37);
    test_encoder(3, 33, 100, 50);
    test_layernorm(2 * 7, 12);
    test_layernorm(67, 771);
    test_matmul(2 * 7, 12, 36, 1, 1);
    test_matmul(2 * 7, 12, 37, 0, 0);
    /* sizes that take the threaded split (M >= N and N > M) */
    test_matmul(300, 65, 130, 1, 1);
    test_matmul(70, 130, 700, 1, 1);
    test_attention(2, 7, 12, 3);
    test_attention(2, 130, 48, 3); /* T > the 64-row causal block, partial block */
    test_attention(1, 64, 16, 1);
    test_gelu_residual(2 * 7 * 12);
    test_gelu_residual(10001);
    test_classifier(2 * 7, 37, 40, 3.0);
    test_classifier(5, 1000, 1024, 20.0);
    test_classifier(3, 2051, 2051, 1.0);
    test_sum_squares(37);
    test_sum_squares(1000003);
    test_norm_parts();
    test_invariant_matmul(24, 4, 100, 300);   /* 8-row tiles, ragged tile edges, T not a multiple of 8 */
    test_invariant_matmul(64, 2, 272, 70);
    test_invariant_matmul(16, 8, 64, 520);    /* 8 sequences: the one-pass tree of 8 and of 4 */
    test_invariant_matmul(32, 3, 48, 40);     /* 3: the binary counter */
    test_adamw(1001, 1);
    test_adamw(1001, 0);
    /* several panels per thread in the bf16 program's fp32 path (long K) */
    test_matmul(130, 64, 9000, 1, 1);
    /* the vocabulary-chunk kernels of gpt.h */
    test_classifier_chunks(2 * 7, 37, 40, 16, 3.0);
    test_classifier_chunks(5, 1000, 1024, 300, 20.0);
    test_embedding_rows(2, 7, 12, 37, 10);
    test_embedding_rows(3, 33, 100, 50, 64);
    /* both compiles of the non-matmul kernels (elementwise.h) */
    test_elementwise_levels(2, 7, 12, 3, 37);
    test_elementwise_levels(3, 67, 200, 4, 1003);
#ifdef LLMC_BF16
    test_inv_pack(3072, 768, 768, 0);
    test_inv_pack(768, 2304, 2304, 0);
    test_inv_pack(70, 100, 130, 0);    /* K and N off the blocks: padding */
    test_inv_pack(64, 37, 37, 0);
    test_inv_pack(768, 2304, 768, 1);  /* the forward's W (OC,K) */
    test_inv_pack(3072, 768, 3072, 1);
    test_inv_pack(70, 100, 71, 1);     /* odd K: the last pair half padding */
    test_inv_pack(96, 130, 96, 1);
#endif
#ifdef LLMC_BF16
    /* the other implementation of cpu_gemm_bf16 (matmul_bf16.h) and of the
       attention that follows its choice: oneDNN's bf16 primitive (the AMX
       path) when the default is the fp32 path, and vice versa. The
       primitive needs the ISA level avx512 (oneDNN 2.6 has no bf16 matmul
       below avx512_core): below it these cases are skipped and counted. */
    {
        int def = !strcmp(cpu_gemm_mode(), "fp32");
        const char* skip = def ? cpu_isa_skip_reason(CPU_ISA_AVX512) : NULL;
        const char* cases[13] = {"matmul 14x12->36", "matmul 14x12->37", "matmul 300x65->130", "matmul 70x130->700",
                                 "matmul 130x64->9000", "attention B2 T7 C12 NH3", "attention B2 T130 C48 NH3",
                                 "invariant T24 B4 C100 OC300", "invariant T64 B2 C272 OC70", "invariant T16 B8 C64 OC520",
                                 "invariant T32 B3 C48 OC40", "invariant attention B2 T7 C12 NH3", "invariant attention B2 T130 C48 NH3"};
        if (skip) {
            for (int i = 0; i < 13; i++) {
                char nm[96];
                snprintf(nm, sizeof(nm), "bf16 primitive %s", cases[i]);
                check_skip(nm, skip);
            }
        } else {
            cpu_gemm_set_all(!def);
            printf("-- cpu_gemm_bf16 implementation: %s\n", cpu_gemm_mode());
            test_matmul(2 * 7, 12, 36, 1, 1);
            test_matmul(2 * 7, 12, 37, 0, 0);
            test_matmul(300, 65, 130, 1, 1);
            test_matmul(70, 130, 700, 1, 1);
            test_matmul(130, 64, 9000, 1, 1);
            test_attention(2, 7, 12, 3);
            test_attention(2, 130, 48, 3);
            /* --invariant 1's fixed tiles on this path (the primitive's:
               one tile plan per shape, single-threaded, matmul_invariant.h):
               the same bits at B and 2 x B/2 on 1 thread, as above */
            test_invariant_matmul(24, 4, 100, 300);
            test_invariant_matmul(64, 2, 272, 70);
            test_invariant_matmul(16, 8, 64, 520);
            test_invariant_matmul(32, 3, 48, 40);
            /* --invariant 1's attention on this path (the primitive's: one
               sequence per single-threaded task), against the reference */
            cpu_inv_T = 7;
            test_attention(2, 7, 12, 3);
            cpu_inv_T = 130;
            test_attention(2, 130, 48, 3);
            cpu_inv_T = 0;
            cpu_gemm_set_all(def);
            printf("-- cpu_gemm_bf16 implementation: %s\n", cpu_gemm_mode());
        }
    }
#endif
    return check_summary();
}
