/*
 test_hostcoll.c: the sums of the host reduce-scatter (llmc/comm_host.h:
 hostcoll_sum_shards, what hostcoll_reduce_scatter runs after its
 exchange) at 2 .. 4096 fake ranks, fp32 and bf16, with and without an
 accumulator, on one thread and on OpenMP's threads:
   - tree = 1 (--invariant 1, hostcoll_pairwise) is bit for bit the
     complete binary tree over the ranks, computed here by an independent
     recursion (each bf16 node rounded to bf16), at every rank count,
     1024 and above included (before issue 49 the tree ran only up to 1024
     ranks, a stack buffer, and fell back to rank order without a word);
   - tree = 0 is bit for bit the rank-order sum;
   - the data are chosen so that the two orders differ at every rank count
     from 4 up (checked), so that a fallback to rank order fails the test.
 No MPI process is started: the sum is local arithmetic.
   mpicc -O2 -std=gnu11 -fopenmp -I. tests/unit/test_hostcoll.c -o build/test_hostcoll -lm && ./build/test_hostcoll
 Last line: the summary.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/comm_host.h"
#include "tests/check.h"

/* rank q's value of element i: large and small magnitudes of both signs,
   so that the order of the additions shows in the fp32 result */
static float value(int q, size_t i) {
    uint64_t z = (uint64_t)q * 1000003ULL + i * 7919ULL + 17;
    z ^= z >> 33; z *= 0xff51afd7ed558ccdULL; z ^= z >> 33; z *= 0xc4ceb9fe1a85ec53ULL; z ^= z >> 33;
    double u = (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    int e = (int)((z >> 3) % 24) - 12;
    return (float)ldexp(u, e);
}

/* the reference tree over ranks [lo, lo + span) cut at n (span a power of
   two): left subtree + right subtree, a node only where both have ranks */
static float ref_tree(const float* x, size_t shard, size_t i, int lo, int span, int n, int bf16) {
    if (span == 1) return x[(size_t)lo * shard + i];
    int h = span / 2;
    float l = ref_tree(x, shard, i, lo, h, n, bf16);
    if (lo + h >= n) return l;
    float s = l + ref_tree(x, shard, i, lo + h, h, n, bf16);
    return bf16 ? bf16_bits_to_float(bf16_bits_from_float(s)) : s;
}

int main(void) {
    const size_t shard = 37;   /* odd: the OpenMP split has uneven chunks */
    int ns[] = {2, 3, 4, 5, 8, 1000, 1023, 1024, 1025, 2048, 3000, 4096};
    for (int eb = 4; eb >= 2; eb -= 2)
        for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++) {
            int n = ns[t];
            float* xf = (float*)malloc((size_t)n * shard * sizeof(float));   /* the values as the sum sees them */
            void* x = malloc((size_t)n * shard * (size_t)eb);
            for (int q = 0; q < n; q++)
                for (size_t i = 0; i < shard; i++) {
                    float v = value(q, i);
                    if (eb == 2) { uint16_t b = bf16_bits_from_float(v); ((uint16_t*)x)[(size_t)q * shard + i] = b; v = bf16_bits_to_float(b); }
                    else ((float*)x)[(size_t)q * shard + i] = v;
                    xf[(size_t)q * shard + i] = v;
                }
            int differ = 0;
            for (int tree = 0; tree <= 1; tree++)
                for (int add = 0; add <= 1; add++)
                    for (int threads = 0; threads <= 1; threads++) {
                        check_group_begin();
                        char* out = (char*)malloc(shard * (size_t)eb);
                        for (size_t i = 0; i < shard; i++) {   /* the accumulator's values (overwritten when add = 0) */
                            float a = add ? value(n + 7, i) : 12345.0f;
                            if (eb == 2) ((uint16_t*)out)[i] = bf16_bits_from_float(a); else ((float*)out)[i] = a;
                        }
                        char* acc0 = (char*)malloc(shard * (size_t)eb);
                        memcpy(acc0, out, shard * (size_t)eb);
                        hostcoll_sum_shards(x, n, shard, eb, out, add, tree, threads);
                        for (size_t i = 0; i < shard; i++) {
                            float s;
                            if (tree) s = ref_tree(xf, shard, i, 0, 1 << 13, n, eb == 2);
                            else { s = xf[i]; for (int q = 1; q < n; q++) s += xf[(size_t)q * shard + i]; }
                            float other = 0.0f;   /* the other order's sum */
                            if (!tree) other = ref_tree(xf, shard, i, 0, 1 << 13, n, eb == 2);
                            if (!tree && !add && threads && other != s) differ++;
                            float a = add ? (eb == 2 ? bf16_bits_to_float(((uint16_t*)acc0)[i]) : ((float*)acc0)[i]) : 0.0f;
                            if (eb == 4) {
                                float want = s + a, got = ((float*)out)[i];
                                CHECK(!memcmp(&want, &got, 4), "n %d fp32 tree %d add %d threads %d element %zu: %.9g, want %.9g", n, tree, add, threads, i, got, want);
                            } else {
                                uint16_t want = bf16_bits_from_float(s + a), got = ((uint16_t*)out)[i];
                                CHECK(want == got, "n %d bf16 tree %d add %d threads %d element %zu: 0x%04x, want 0x%04x", n, tree, add, threads, i, got, want);
                            }
                        }
                        char name[160];
                        snprintf(name, sizeof(name), "%s n=%d %s%s%s", eb == 4 ? "fp32" : "bf16", n, tree ? "pairwise tree" : "rank order",
                                 add ? " +acc" : "", threads ? " (OpenMP)" : "");
                        check_group_end(name);
                        free(out); free(acc0);
                    }
            if (n >= 4) {   /* at 3 ranks the tree is the rank order: (x0 + x1) + x2 */
                char name[120];
                snprintf(name, sizeof(name), "%s n=%d: the tree and rank order differ on %d of %zu elements (the data can tell them apart)",
                         eb == 4 ? "fp32" : "bf16", n, differ, shard);
                check_ok(name, differ > 0);
            }
            free(x); free(xf);
        }
    return check_summary();
}
