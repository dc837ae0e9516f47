/*
 test_quant.c: llmc/quant.h (ZeRO++'s block quantization: qwZ, qgZ)
 against a float64 reference, block by block:
   - the layout: blocks restart at every tensor start inside a shard, a
     last partial block, the most blocks of any rank, the record bytes;
   - int8 and int4, fp32 and bf16 elements: q equals round-to-nearest-even
     of x / scale computed in float64 (except within 1e-4 of a tie, where
     fp32's division may round the other way: counted, must be rare), and
     |x' - x| <= scale / 2 (+ the product's one rounding into the element
     type), the bound of the paper's symmetric block quantization;
   - a block of zeros (scale 0, decoded exactly 0), a single huge value
     (3e38: no overflow, the rest of its block becomes 0), the edges of the
     range (FLT_MAX and the bf16 maximum decode finite; blocks whose
     amax / Qmax is subnormal or underflows keep the bound), NaN and +-Inf
     (refused: 1 + the index of the first one), the unused scale slots zero,
     int4 nibbles at odd and even indices for every value -7..7.
 Prints the largest |x' - x| / (scale / 2) seen. Last line: the summary.
*/
#include <stdio.h>
#include <stdlib.h>
#include <float.h>
#include <math.h>
#include "llmc/quant.h"
#include "tests/check.h"

static uint64_t rng = 88172645463325252ULL;
static double urand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (double)(rng >> 11) / 9007199254740992.0; }

/* one shard: values x (fp32), layout Q, rank q; checks encode/decode of eb-byte elements */
static void check_shard(const QuantLayout* Q, int q, size_t nbmax, const float* x, int eb, double* worst, int* ties) {
    size_t s = Q->shard;
    void* in = malloc(s * 4);
    float* xe = malloc(s * 4);   /* the element values as stored */
    for (size_t i = 0; i < s; i++) {
        if (eb == 4) ((float*)in)[i] = x[i];
        else ((uint16_t*)in)[i] = bf16_bits_from_float(x[i]);
        xe[i] = quant_load(in, eb, i);
    }
    size_t rb = quant_record_bytes(nbmax, s, Q->bits);
    unsigned char* rec = malloc(rb);
    memset(rec, 0xAB, rb);
    size_t rc = quant_encode(Q, q, nbmax, in, eb, rec);
    CHECK(rc == 0, "encode of finite values returned %zu", rc);
    void* out = malloc(s * 4);
    quant_decode(Q, q, nbmax, rec, out, eb);
    size_t* starts = malloc((s + 1) * sizeof(size_t));
    size_t nb = quant_blocks(Q, q, starts);
    starts[nb] = s;
    /* the layout itself, independently: blocks tile the shard from 0, none longer than
       the block size, none with a tensor start strictly inside it, each tensor start a block start */
    int tiles = nb > 0 && starts[0] == 0;
    for (size_t b = 0; b < nb && tiles; b++) {
        tiles &= starts[b + 1] > starts[b] && starts[b + 1] - starts[b] <= Q->block;
        for (int k = 0; k < Q->nseg; k++) {
            size_t t = Q->seg[k];
            if (t > (size_t)q * s + starts[b] && t < (size_t)q * s + starts[b + 1]) tiles = 0;
        }
    }
    CHECK(tiles, "rank %d: the blocks do not tile the shard at the tensor starts (block %zu)", q, Q->block);
    const float* scales = (const float*)rec;
    const uint8_t* v = rec + 4 * nbmax;
    double qmax = Q->bits == 4 ? 7.0 : 127.0, u = eb == 4 ? ldexp(1.0, -24) : ldexp(1.0, -8);   /* the element type's unit roundoff */
    for (size_t b = 0; b < nb; b++) {
        double amax = 0;
        for (size_t i = starts[b]; i < starts[b + 1]; i++) amax = fmax(amax, fabs((double)xe[i]));
        double scale = scales[b];
        if (amax / qmax < (double)FLT_MIN && amax > 0) {   /* the tiny edge: the quotient rounded up to a multiple of 2^-149, exactly */
            double want = ldexp(ceil(ldexp(amax, 149) / qmax), -149);
            CHECK(scale == want && scale >= amax / qmax, "block %zu: tiny scale %a, expected %a (amax %a / Qmax)", b, scale, want, amax);
        } else {
            CHECK(fabs(scale - amax / qmax) <= amax / qmax * ldexp(1.0, -23), "block %zu: scale %g, amax / Qmax %g", b, scale, amax / qmax);
        }
        /* one check per block: every element of it (the first bad one is reported) */
        int good = 1;
        char why[200] = "";
        for (size_t i = starts[b]; i < starts[b + 1] && good; i++) {
            int qi = quant_get(v, Q->bits, i);
            double y = quant_load(out, eb, i);
            if (scale == 0) {
                if (qi != 0 || y != 0.0) { good = 0; snprintf(why, sizeof(why), "zero block: element %zu: q %d, x' %g", i, qi, y); }
                continue;
            }
            double r = (double)xe[i] / scale, ref = nearbyint(r);
            if (ref > qmax) ref = qmax;
            if (ref < -qmax) ref = -qmax;
            if (qi != (int)ref) {
                (*ties)++;
                if (fabs(fabs(r - floor(r)) - 0.5) >= 1e-4) { good = 0; snprintf(why, sizeof(why), "element %zu: q %d, float64 reference %g (x/scale %.9g)", i, qi, ref, r); }
            }
            if (!isfinite(y)) { good = 0; snprintf(why, sizeof(why), "element %zu: x %g decoded to %g (finite in, finite out)", i, (double)xe[i], y); continue; }
            double err = fabs(y - (double)xe[i]);
            double bound = scale * (0.5 + qmax * ldexp(1.0, -23)) + fabs(y) * u;
            if (err > bound) { good = 0; snprintf(why, sizeof(why), "element %zu: |x' - x| = %g > bound %g (scale %g)", i, err, bound, scale); }
            if (eb == 4 && err / (scale / 2) > *worst) *worst = err / (scale / 2);
        }
        CHECK(good, "block %zu: %s", b, why);
    }
    for (size_t b = nb; b < nbmax; b++) CHECK(scales[b] == 0.0f, "unused scale slot %zu = %g", b, scales[b]);
    free(in); free(xe); free(rec); free(out); free(starts);
}

int main(void) {
    /* a unit of 4 tensors at offsets 0, 48, 352, 368 (multiples of 16), padded 1024, 4 ranks of 256 */
    size_t seg[4] = {0, 48, 352, 368};
    QuantLayout Q = {seg, 4, 1024, 256, 100, 8, NULL};
    size_t st[64];
    check_group_begin();
    size_t n0 = quant_blocks(&Q, 0, st);   /* [0,48) one block; [48,256): 48, 148, 248 (partial: 8) */
    CHECK(n0 == 4 && st[0] == 0 && st[1] == 48 && st[2] == 148 && st[3] == 248, "rank 0: %zu blocks at %zu %zu %zu", n0, st[0], st[1], st[2]);
    size_t n1 = quant_blocks(&Q, 1, st);   /* [256,352): 0; [352,368): 96; [368,512): 112, 212 */
    CHECK(n1 == 4 && st[0] == 0 && st[1] == 96 && st[2] == 112 && st[3] == 212, "rank 1: %zu blocks", n1);
    size_t n2 = quant_blocks(&Q, 2, st);   /* [512,768): 0, 100, 200 */
    CHECK(n2 == 3 && st[2] == 200, "rank 2: %zu blocks", n2);
    CHECK(quant_max_blocks(&Q, 4) == 4, "most blocks %zu", quant_max_blocks(&Q, 4));
    CHECK(quant_record_bytes(4, 256, 8) == 16 + 256 && quant_record_bytes(4, 256, 4) == 16 + 128, "record bytes");
    check_group_end("layout: tensor starts, partial blocks, records");

    double worst = 0;
    int ties = 0, total = 0;
    float* x = malloc(1024 * 4);
    for (int bits = 8; bits >= 4; bits -= 4)
        for (int eb = 4; eb >= 2; eb -= 2)
            for (size_t block = 1; block <= 512; block = block * 4 + 3) {
                check_group_begin();
                QuantLayout L = {seg, 4, 1024, 256, block, bits, NULL};
                size_t nbmax = quant_max_blocks(&L, 4);
                for (int trial = 0; trial < 20; trial++) {
                    double mag = pow(10.0, -6.0 + 8.0 * urand());
                    for (int i = 0; i < 1024; i++) x[i] = (float)((urand() * 2 - 1) * mag * (i < 48 ? 50.0 : 1.0));
                    if (trial == 1) for (int i = 0; i < 1024; i++) x[i] = 0.0f;                    /* blocks of zeros */
                    if (trial == 2) { x[600] = 3e38f; x[601] = -3e38f; }                         /* huge values */
                    if (trial == 3) for (int i = 0; i < 1024; i++) x[i] = (float)((i % 15) - 7); /* exact levels */
                    for (int q = 0; q < 4; q++) { check_shard(&L, q, nbmax, x + q * 256, eb, &worst, &ties); total += 256; }
                }
                char name[96];
                snprintf(name, sizeof(name), "int%d, %s elements, block %zu: vs float64", bits, eb == 4 ? "fp32" : "bf16", block);
                check_group_end(name);
            }
    printf("fp32 elements (one check per block above): largest |x' - x| / (scale / 2) = %.6f (the bound: 1 + fp32 rounding); %d of %d elements at a tie rounded the other way\n",
           worst, ties, total);
    CHECK(worst <= 1.0 + 1e-5, "fp32: largest error %.7f x scale/2", worst);
    CHECK(ties * 1000 < total, "%d ties of %d", ties, total);

    /* the edges of the range, both element types, int8 and int4: blocks
       holding the largest finite values (fp32 FLT_MAX, the bf16 maximum
       0x7F7F), and blocks of tiny values whose amax / Qmax is subnormal or
       underflows to 0 (amax from 2^-149 up to just below Qmax x 2^-126) */
    for (int bits = 8; bits >= 4; bits -= 4)
        for (int eb = 4; eb >= 2; eb -= 2) {
            check_group_begin();
            QuantLayout E = {seg, 4, 1024, 256, 64, bits, NULL};
            size_t nbm = quant_max_blocks(&E, 4);
            float big = eb == 4 ? FLT_MAX : bf16_bits_to_float(0x7F7F);
            double qm = bits == 4 ? 7.0 : 127.0;
            for (int trial = 0; trial < 6; trial++) {
                for (int i = 0; i < 1024; i++) x[i] = (float)((urand() * 2 - 1) * 0.01);
                if (trial == 0) { x[0] = big; x[1] = -big; x[300] = -big; x[301] = big * 0.999f; }
                if (trial == 1) for (int i = 0; i < 1024; i++) x[i] = (i % 3 ? 1.0f : -1.0f) * big * (float)(0.9 + 0.1 * urand());
                double tiny[4] = {ldexp(1.0, -149), 1e-44, 1e-40, qm * ldexp(1.0, -126) * 0.999};   /* amax of every block */
                if (trial >= 2)
                    for (int i = 0; i < 1024; i++) {
                        double a = tiny[trial - 2];
                        x[i] = (float)(i % 64 == 5 ? -a : a * urand());   /* one element per block of 64 reaches amax */
                    }
                for (int q = 0; q < 4; q++) check_shard(&E, q, nbm, x + q * 256, eb, &worst, &ties);
            }
            char name[96];
            snprintf(name, sizeof(name), "int%d, %s elements: the largest finite values and tiny blocks", bits, eb == 4 ? "fp32" : "bf16");
            check_group_end(name);
        }
    CHECK(worst <= 1.0 + 1e-5, "fp32 at the edges: largest error %.7f x scale/2", worst);

    check_group_begin();
    QuantLayout L = {seg, 4, 1024, 256, 64, 8, NULL};
    size_t nbmax = quant_max_blocks(&L, 4);
    unsigned char rec[1024];
    for (int i = 0; i < 256; i++) x[i] = 0.5f;
    x[77] = NAN;
    CHECK(quant_encode(&L, 0, nbmax, x, 4, rec) == 78, "NaN at 77: encode returned %zu", quant_encode(&L, 0, nbmax, x, 4, rec));
    x[77] = 0.5f; x[200] = INFINITY;
    CHECK(quant_encode(&L, 0, nbmax, x, 4, rec) == 201, "+Inf at 200");
    x[200] = 0.5f; x[3] = -INFINITY;
    CHECK(quant_encode(&L, 0, nbmax, x, 4, rec) == 4, "-Inf at 3");
    uint16_t hb[256];
    for (int i = 0; i < 256; i++) hb[i] = bf16_bits_from_float(1.0f);
    hb[9] = 0x7FC0; /* a bf16 NaN */
    CHECK(quant_encode(&L, 0, nbmax, hb, 2, rec) == 10, "bf16 NaN at 9");
    uint8_t nib[8] = {0};
    int okn = 1;
    for (int a = -7; a <= 7; a++)
        for (int b = -7; b <= 7; b++) {
            quant_put(nib, 4, 2, a); quant_put(nib, 4, 3, b);
            okn &= quant_get(nib, 4, 2) == a && quant_get(nib, 4, 3) == b && nib[0] == 0;
        }
    CHECK(okn, "int4 nibbles: every pair -7..7 at an even and an odd index");
    check_group_end("non-finite values refused, int4 packing");
    free(x);
    return check_summary();
}
