/*
 tests/unit/test_mpi_stub.c: the single-rank MPI stand-in (llmc/mpi_stub/mpi.h)
 against what MPI defines for a communicator of one process. Built with a
 plain C compiler (no mpicc):
   gcc -std=gnu11 -I. -Illmc/mpi_stub tests/unit/test_mpi_stub.c -o build/test_mpi_stub
   ./build/test_mpi_stub              every check, "N passed, M failed"
   ./build/test_mpi_stub unmatched    a receive no send matches: one error line, exit 1
 tests/suites/gpu_dry_run.sh also runs it with OMPI_COMM_WORLD_SIZE=2 (a
 multi-process launch: refused with one error line, exit 1) and builds
 test_gpt_cpu against the stand-in to compare with the real MPI at N = 1.
*/
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>

#ifndef LLMC_MPI_STUB
#error "build with -Illmc/mpi_stub"
#endif

#include "tests/check.h"
static void check(int ok, const char* what) { check_ok(what, ok); }

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    if (argc > 1 && !strcmp(argv[1], "unmatched")) {
        int x;
        MPI_Recv(&x, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE); /* must end the process */
        printf("unreachable\n");
        return 0;
    }
    int rank = -1, size = -1, flag = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Initialized(&flag);
    check(rank == 0 && size == 1 && flag == 1, "rank 0 of 1, initialized");

    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    int lr = -1, ls = -1;
    MPI_Comm_rank(local, &lr);
    MPI_Comm_size(local, &ls);
    MPI_Comm_free(&local);
    check(lr == 0 && ls == 1 && local == MPI_COMM_NULL, "split_type: rank 0 of 1, freed to MPI_COMM_NULL");

    /* reductions over one member are the value itself, bitwise */
    float f[5] = {1.5f, -0.0f, 3.25e-30f, 7.0f, -2.0f}, g[5] = {0};
    MPI_Allreduce(f, g, 5, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    check(!memcmp(f, g, sizeof(f)), "Allreduce out of place copies bitwise (incl. -0.0)");
    double d[3] = {1, 2, 3};
    MPI_Allreduce(MPI_IN_PLACE, d, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    check(d[0] == 1 && d[1] == 2 && d[2] == 3, "Allreduce in place leaves the buffer");
    long long ll = 5, llo = 0;
    MPI_Allreduce(&ll, &llo, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    check(llo == 5, "Allreduce MPI_LONG_LONG (8-byte type)");
    int rs[4] = {1, 2, 3, 4}, rso[4] = {0};
    MPI_Reduce_scatter_block(rs, rso, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check(rso[0] == 1 && rso[3] == 4, "Reduce_scatter_block: the one block");
    MPI_Reduce_scatter_block(MPI_IN_PLACE, rs, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check(rs[0] == 1 && rs[3] == 4, "Reduce_scatter_block in place");
    float ag[3] = {9, 8, 7}, ago[3] = {0};
    MPI_Allgather(ag, 3, MPI_FLOAT, ago, 3, MPI_FLOAT, MPI_COMM_WORLD);
    check(ago[0] == 9 && ago[2] == 7, "Allgather out of place");
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ag, 3, MPI_FLOAT, MPI_COMM_WORLD);
    check(ag[0] == 9 && ag[2] == 7, "Allgather in place");
    int agv[6] = {0}, cnt[1] = {2}, disp[1] = {3}, src[2] = {5, 6};
    MPI_Allgatherv(src, 2, MPI_INT, agv, cnt, disp, MPI_INT, MPI_COMM_WORLD);
    check(agv[2] == 0 && agv[3] == 5 && agv[4] == 6 && agv[5] == 0, "Allgatherv honours the displacement");
    float ia[4] = {1, 2, 3, 4}, iao[4] = {0};
    MPI_Request ir;
    MPI_Ialltoall(ia, 4, MPI_FLOAT, iao, 4, MPI_FLOAT, MPI_COMM_WORLD, &ir);
    int done = 0;
    MPI_Test(&ir, &done, MPI_STATUS_IGNORE);
    uint16_t ig[2] = {7, 9};
    MPI_Request ir2;
    MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ig, 2, MPI_UINT16_T, MPI_COMM_WORLD, &ir2);
    MPI_Wait(&ir2, MPI_STATUS_IGNORE);
    check(done && iao[0] == 1 && iao[3] == 4 && ig[0] == 7 && ig[1] == 9 && ir == MPI_REQUEST_NULL,
          "Ialltoall + Test, Iallgather in place + Wait");
    double gs[3] = {1.5, 2.5, 3.5}, gr[3] = {0};
    MPI_Request ir3;
    MPI_Igather(gs, 3, MPI_DOUBLE, gr, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD, &ir3);
    MPI_Wait(&ir3, MPI_STATUS_IGNORE);
    check(gr[0] == 1.5 && gr[2] == 3.5 && ir3 == MPI_REQUEST_NULL, "Igather to rank 0 + Wait");
    int b = 42;
    MPI_Bcast(&b, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    check(b == 42, "Bcast and Barrier");
    int ts = 0;
    MPI_Type_size(MPI_DOUBLE, &ts);
    check(ts == 8, "Type_size(MPI_DOUBLE) = 8");

    /* messages to oneself: tag matching in order, posted receives */
    int a1 = 11, a2 = 22, a3 = 33, r1 = 0, r2 = 0, r3 = 0;
    MPI_Send(&a1, 1, MPI_INT, 0, 1, MPI_COMM_WORLD);
    MPI_Send(&a2, 1, MPI_INT, 0, 2, MPI_COMM_WORLD);
    MPI_Send(&a3, 1, MPI_INT, 0, 1, MPI_COMM_WORLD);
    MPI_Status st;
    MPI_Recv(&r2, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, &st);
    MPI_Recv(&r1, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(&r3, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int c = 0;
    MPI_Get_count(&st, MPI_INT, &c);
    check(r1 == 11 && r2 == 22 && r3 == 33 && st.MPI_TAG == 2 && c == 1, "Send/Recv to self: tags, order, status");
    double x[4] = {1, 2, 3, 4}, y[4] = {0};
    MPI_Request rq[2];
    MPI_Irecv(y, 4, MPI_DOUBLE, 0, 5, MPI_COMM_WORLD, &rq[0]); /* posted before the send */
    MPI_Isend(x, 4, MPI_DOUBLE, 0, 5, MPI_COMM_WORLD, &rq[1]);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    check(y[0] == 1 && y[3] == 4 && rq[0] == MPI_REQUEST_NULL, "Irecv posted before Isend, Waitall");
    int s1 = 3, s2 = 0;
    MPI_Sendrecv(&s1, 1, MPI_INT, 0, 9, &s2, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    check(s2 == 3, "Sendrecv with oneself");

    double t0 = MPI_Wtime(), t1 = MPI_Wtime();
    check(t1 >= t0 && t0 > 0, "Wtime is monotonic");
    MPI_Finalize();
    MPI_Finalized(&flag);
    check(flag == 1, "finalized");
    return check_summary();
}
