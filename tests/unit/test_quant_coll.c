/*
 test_quant_coll.c: ZeRO++'s quantized collectives of llmc/comm.h on N
 ranks (mpirun -np 4), against float64 references computed by every rank
 from the same seeded values:
   - qwZ's all-gather (hostcoll_all_gather_quantized), fp32 and bf16: every
     element within scale / 2 of its rank's original (+ the element type's
     rounding), every rank holding the same bytes afterwards;
   - qgZ's reduce-scatter (hostcoll_reduce_scatter_quantized), int8 and int4,
     with L x M = 2 x 2 (two hops), 1 x 4 (across only), 4 x 1 (inside
     only), and 2 x 2 on cyclic nodes (nodes {0,2} and {1,3}: the group_nodes
     table of llmc/comm.h, as srun --distribution=cyclic places 4 ranks on 2
     nodes): each element of this rank's shard within the bound of its
     quantizations, sum over the ranks of amax_r / (2 Qmax) for the first
     hop plus sum over the nodes of (the node partial's amax bound) /
     (2 Qmax) for the second, of the exact float64 sum; and bitwise equal
     when run twice.
 Prints the largest error as a fraction of its bound. Last line: summary.
*/
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "llmc/comm_quant.h"
#include "llmc/zero/plan.h"
#include "tests/check.h"

static float value(int rank, size_t i, int salt) {   /* deterministic, every rank can recompute it */
    uint64_t z = (uint64_t)rank * 1000003ULL + i * 7919ULL + (uint64_t)salt * 104729ULL + 1;
    z ^= z >> 33; z *= 0xff51afd7ed558ccdULL; z ^= z >> 33; z *= 0xc4ceb9fe1a85ec53ULL; z ^= z >> 33;
    double u = (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    return (float)(u * (i < 64 ? 3.0 : 0.02) * (1 + rank));   /* a "LayerNorm" tensor of ~1 then "weights" of ~0.02 */
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int r, N;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &N);
    comm_watch.rank = r;
    if (r > 0 && !freopen("/dev/null", "w", stdout)) return 1;   /* rank 0 prints; the others' failures are counted below */
    const size_t shard = 256, padded = shard * (size_t)N;
    size_t seg[3] = {0, 64, 400};   /* three tensors; a shard boundary inside the second */
    double worst_ag = 0, worst_rs = 0;
    for (int eb = 4; eb >= 2; eb -= 2) {
        check_group_begin();
        QuantLayout Q = {seg, 3, padded, shard, 96, 8, NULL};
        size_t nbmax = quant_max_blocks(&Q, N), rec = quant_record_bytes(nbmax, shard, 8);
        char* buf = calloc(padded, 4);
        char* scratch = calloc((size_t)N * rec + 64, 1);   /* + 64 guard bytes, checked below */
        memset(scratch + (size_t)N * rec, 0x5A, 64);
        for (size_t i = 0; i < shard; i++) {
            float v = value(r, i, 1);
            if (eb == 4) ((float*)buf)[r * shard + i] = v; else ((uint16_t*)buf)[r * shard + i] = bf16_bits_from_float(v);
        }
        hostcoll_all_gather_quantized(MPI_COMM_WORLD, buf, &Q, nbmax, eb, scratch, 0, 0);
        for (int q = 0; q < N; q++) {
            size_t st[64];
            size_t nb = quant_blocks(&Q, q, st);
            st[nb] = shard;
            for (size_t b = 0; b < nb; b++) {
                double amax = 0;
                for (size_t i = st[b]; i < st[b + 1]; i++) {
                    float v = value(q, i, 1);
                    double x = eb == 4 ? v : bf16_round(v);
                    amax = fmax(amax, fabs(x));
                }
                for (size_t i = st[b]; i < st[b + 1]; i++) {
                    float v = value(q, i, 1);
                    double x = eb == 4 ? v : bf16_round(v), y = quant_load(buf + q * shard * eb, eb, i);
                    double bound = amax / 254.0 * (1 + 1e-6) + fabs(y) * (eb == 4 ? ldexp(1, -24) : ldexp(1, -8));
                    CHECK(fabs(y - x) <= bound, "rank %d's element %zu: |x' - x| = %g > %g", q, i, fabs(y - x), bound);
                    if (eb == 4 && amax > 0) worst_ag = fmax(worst_ag, fabs(y - x) / (amax / 254.0));
                }
            }
        }
        unsigned long long h = 1469598103934665603ULL, all[64];
        for (size_t i = 0; i < padded * eb; i++) h = (h ^ (unsigned char)buf[i]) * 1099511628211ULL;
        MPI_Allgather(&h, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD);
        int same = 1;
        for (int q = 0; q < N; q++) same &= all[q] == all[0];
        CHECK(same, "the gathered bytes differ between ranks");
        int guard = 1;
        for (int i = 0; i < 64; i++) guard &= (unsigned char)scratch[(size_t)N * rec + i] == 0x5A;
        CHECK(guard, "the all-gather wrote past its N records");
        free(buf); free(scratch);
        check_group_end(eb == 4 ? "qwZ all-gather, fp32: within scale/2, the same on every rank" : "qwZ all-gather, bf16: within scale/2 + bf16 rounding, the same on every rank");
    }
    int shapes[4][2] = {{2, 2}, {1, 4}, {4, 1}, {2, 2}}, shapes_run = 0;
    for (int bits = 8; bits >= 4; bits -= 4)
        for (int k = 0; k < 4; k++) {
            int L = shapes[k][0], M = shapes[k][1];
            /* k = 3: cyclic nodes, node m = {m, m + M}: nodes[m L + l] = m + l M (group rank of node m's l-th rank) */
            int cyc = k == 3, nodes[64];
            for (int m = 0; m < M; m++) for (int l = 0; l < L; l++) nodes[m * L + l] = cyc ? m + l * M : m * L + l;
            if (L * M != N) continue;
            check_group_begin();
            double qmax = bits == 8 ? 127.0 : 7.0;
            QuantLayout Q = {seg, 3, padded, shard, 64, bits, NULL};
            size_t nbmax = quant_max_blocks(&Q, N), rec = quant_record_bytes(nbmax, shard, bits);
            size_t sb = zero_qg_scratch_bytes(rec, shard, N, L);
            float* g = malloc(padded * 4);
            char* scratch = calloc(sb + 64, 1);   /* + 64 guard bytes: the scratch formula must cover every write */
            memset(scratch + sb, 0x5A, 64);
            float* acc = calloc(shard, 4), *acc2 = calloc(shard, 4);
            MPI_Comm intra, inter;
            int my_m = 0, my_l = 0;
            for (int i = 0; i < N; i++) if (nodes[i] == r) { my_m = i / L; my_l = i % L; }
            MPI_Comm_split(MPI_COMM_WORLD, my_m, r, &intra);   /* as comm_set_qg_groups */
            MPI_Comm_split(MPI_COMM_WORLD, my_l, my_m, &inter);
            for (int rep = 0; rep < 2; rep++) {
                for (size_t i = 0; i < padded; i++) g[i] = value(r, i, 2);
                hostcoll_reduce_scatter_quantized(intra, inter, L, M, cyc ? nodes : NULL, g, &Q, nbmax, 4, scratch, rep ? acc2 : acc, 0, 0);
            }
            CHECK(!memcmp(acc, acc2, shard * 4), "the same reduce-scatter twice differs");
            int guard = 1;
            for (int i = 0; i < 64; i++) guard &= (unsigned char)scratch[sb + i] == 0x5A;
            CHECK(guard, "the reduce-scatter wrote past zero_qg_scratch_bytes");
            shapes_run++;
            /* the bound, block by block of this rank's shard */
            size_t st[64];
            size_t nb = quant_blocks(&Q, r, st);
            st[nb] = shard;
            for (size_t b = 0; b < nb; b++) {
                double hop1 = 0, hop2 = 0;
                for (int m = 0; m < M; m++) {
                    double node_amax = 0;
                    for (int l = 0; l < L; l++) {
                        double amax = 0;
                        for (size_t i = st[b]; i < st[b + 1]; i++) amax = fmax(amax, fabs(value(nodes[m * L + l], r * shard + i, 2)));
                        if (L > 1) hop1 += amax / (2 * qmax);
                        node_amax += amax * (1 + 1e-6);
                    }
                    if (M > 1) hop2 += node_amax / (2 * qmax);
                }
                for (size_t i = st[b]; i < st[b + 1]; i++) {
                    double ref = 0, mag = 0;
                    for (int q = 0; q < N; q++) { ref += value(q, r * shard + i, 2); mag += fabs(value(q, r * shard + i, 2)); }
                    double bound = hop1 + hop2 + 8 * mag * ldexp(1, -24);
                    double err = fabs((double)acc[i] - ref);
                    CHECK(err <= bound, "element %zu: |sum' - sum| = %g > %g (L %d, M %d)", i, err, bound, L, M);
                    if (hop1 + hop2 > 0) worst_rs = fmax(worst_rs, err / (hop1 + hop2));
                }
            }
            MPI_Comm_free(&intra); MPI_Comm_free(&inter);
            free(g); free(scratch); free(acc); free(acc2);
            char name[96];
            snprintf(name, sizeof(name), "qgZ reduce-scatter int%d, %d x %d%s: within the bound, repeatable", bits, L, M,
                     cyc ? " on cyclic nodes {0,2} {1,3}" : "");
            check_group_end(name);
        }
    CHECK(shapes_run == 8, "%d of the 8 reduce-scatter shapes ran (run it on 4 ranks)", shapes_run);
    double w[2] = {worst_ag, worst_rs}, mx[2];
    MPI_Allreduce(w, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int rc = 0;
    if (r == 0) {
        printf("largest error / bound: all-gather (fp32) %.4f of scale/2; reduce-scatter %.4f of the hops' bound\n", mx[0], mx[1]);
        rc = check_summary();
    } else {
        rc = check_fail ? 1 : 0;
    }
    int any = 0;
    MPI_Allreduce(&check_fail, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (r == 0 && any && !check_fail) printf("another rank failed %d checks\n", any);
    MPI_Finalize();
    return rc || any;
}
