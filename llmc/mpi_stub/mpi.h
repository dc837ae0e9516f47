/*
 mpi_stub/mpi.h: a single-rank stand-in for MPI, for builds on a machine
 without an MPI library (a GPU machine may have none). Selected by putting
 this directory first on the include path (-Illmc/mpi_stub), so every
 `#include <mpi.h>` of the project finds it and no source changes; cuda.mk
 does that when no mpicc is found or CUDA_MPICC=false is given:

   make -f cuda.mk cuda CUDA_MPICC=false     ./train_gpt ./test_gpt for ONE rank

 What it implements: the MPI-3.1 C calls and constants the trainer uses, plus
 the common collectives and point-to-point calls, with the semantics MPI
 defines for a communicator of exactly one process:
   - rank 0 of size 1 in every communicator (MPI_COMM_WORLD, splits, dups);
   - a collective with one member copies its send buffer to its receive
     buffer (nothing with MPI_IN_PLACE); the reduction op does not matter,
     since a reduction over one value is that value (bitwise);
   - a message to oneself (dest 0, source 0 or MPI_ANY_SOURCE) is matched by
     tag in order: a send goes to the oldest posted MPI_Irecv that fits, else
     it is buffered until a receive takes it; a receive (or a wait) that no
     send of this rank can ever match would wait forever in real MPI: here
     it ends the process with one error line (exit 1);
   - MPI_Abort exits with the code; MPI_Wtime is CLOCK_MONOTONIC.
 Launched by mpirun/srun as more than one process (OMPI_COMM_WORLD_SIZE,
 PMI_SIZE or PMIX_SIZE > 1 in the environment), MPI_Init refuses with one
 error line and exit 1 on every process, instead of running N copies that
 each believe they are rank 0 of 1.

 Non-blocking collectives (MPI_Iallgather, MPI_Ialltoall, ...) complete at
 once (request MPI_REQUEST_NULL). Not implemented (no caller in the
 project): one-sided communication, MPI-IO, derived datatypes,
 intercommunicators.
 Plain C11 / C++17, header only (every function static).
*/
#ifndef LLMC_MPI_STUB_MPI_H
#define LLMC_MPI_STUB_MPI_H

#define LLMC_MPI_STUB 1

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MPI_VERSION 3
#define MPI_SUBVERSION 1

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;
typedef int MPI_Info;
typedef int MPI_Errhandler;
typedef int MPI_Group;
typedef long MPI_Aint;
typedef long long MPI_Offset;
typedef long long MPI_Count;
typedef struct {
    int MPI_SOURCE, MPI_TAG, MPI_ERROR;
    long long count_bytes; /* received bytes (MPI_Get_count) */
} MPI_Status;
typedef int MPI_Request;

#define MPI_SUCCESS 0
#define MPI_ERR_OTHER 15
#define MPI_COMM_NULL 0
#define MPI_COMM_WORLD 1
#define MPI_COMM_SELF 2
#define MPI_COMM_TYPE_SHARED 1
#define MPI_INFO_NULL 0
#define MPI_GROUP_NULL 0
#define MPI_ERRORS_ARE_FATAL 1
#define MPI_ERRORS_RETURN 2
#define MPI_UNDEFINED (-32766)
#define MPI_ANY_SOURCE (-1)
#define MPI_ANY_TAG (-1)
#define MPI_PROC_NULL (-2)
#define MPI_ROOT (-3)
#define MPI_REQUEST_NULL 0
#define MPI_IN_PLACE ((void*)1)
#define MPI_BOTTOM ((void*)0)
#define MPI_STATUS_IGNORE ((MPI_Status*)0)
#define MPI_STATUSES_IGNORE ((MPI_Status*)0)
#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_ERROR_STRING 256
#define MPI_MAX_LIBRARY_VERSION_STRING 256
#define MPI_THREAD_SINGLE 0
#define MPI_THREAD_FUNNELED 1
#define MPI_THREAD_SERIALIZED 2
#define MPI_THREAD_MULTIPLE 3

/* reduction ops: irrelevant for one member, distinct for readability */
#define MPI_OP_NULL 0
#define MPI_MAX 1
#define MPI_MIN 2
#define MPI_SUM 3
#define MPI_PROD 4
#define MPI_LAND 5
#define MPI_BAND 6
#define MPI_LOR 7
#define MPI_BOR 8
#define MPI_LXOR 9
#define MPI_BXOR 10
#define MPI_MAXLOC 11
#define MPI_MINLOC 12

/* datatypes: (index << 8) | size in bytes */
#define LLMC_MPI_TYPE(i, s) ((MPI_Datatype)(((i) << 8) | (int)(s)))
#define MPI_DATATYPE_NULL 0
#define MPI_CHAR LLMC_MPI_TYPE(1, sizeof(char))
#define MPI_SIGNED_CHAR LLMC_MPI_TYPE(2, sizeof(signed char))
#define MPI_UNSIGNED_CHAR LLMC_MPI_TYPE(3, sizeof(unsigned char))
#define MPI_BYTE LLMC_MPI_TYPE(4, 1)
#define MPI_SHORT LLMC_MPI_TYPE(5, sizeof(short))
#define MPI_UNSIGNED_SHORT LLMC_MPI_TYPE(6, sizeof(unsigned short))
#define MPI_INT LLMC_MPI_TYPE(7, sizeof(int))
#define MPI_UNSIGNED LLMC_MPI_TYPE(8, sizeof(unsigned))
#define MPI_LONG LLMC_MPI_TYPE(9, sizeof(long))
#define MPI_UNSIGNED_LONG LLMC_MPI_TYPE(10, sizeof(unsigned long))
#define MPI_LONG_LONG LLMC_MPI_TYPE(11, sizeof(long long))
#define MPI_LONG_LONG_INT MPI_LONG_LONG
#define MPI_UNSIGNED_LONG_LONG LLMC_MPI_TYPE(12, sizeof(unsigned long long))
#define MPI_FLOAT LLMC_MPI_TYPE(13, sizeof(float))
#define MPI_DOUBLE LLMC_MPI_TYPE(14, sizeof(double))
#define MPI_LONG_DOUBLE LLMC_MPI_TYPE(15, sizeof(long double))
#define MPI_C_BOOL LLMC_MPI_TYPE(16, 1)
#define MPI_INT8_T LLMC_MPI_TYPE(17, 1)
#define MPI_UINT8_T LLMC_MPI_TYPE(18, 1)
#define MPI_INT16_T LLMC_MPI_TYPE(19, 2)
#define MPI_UINT16_T LLMC_MPI_TYPE(20, 2)
#define MPI_INT32_T LLMC_MPI_TYPE(21, 4)
#define MPI_UINT32_T LLMC_MPI_TYPE(22, 4)
#define MPI_INT64_T LLMC_MPI_TYPE(23, 8)
#define MPI_UINT64_T LLMC_MPI_TYPE(24, 8)
#define MPI_AINT LLMC_MPI_TYPE(25, sizeof(MPI_Aint))
#define MPI_OFFSET LLMC_MPI_TYPE(26, sizeof(MPI_Offset))
#define MPI_COUNT LLMC_MPI_TYPE(27, sizeof(MPI_Count))
#define MPI_FLOAT_INT LLMC_MPI_TYPE(28, sizeof(float) + sizeof(int))
#define MPI_DOUBLE_INT LLMC_MPI_TYPE(29, sizeof(double) + sizeof(int) + 4)
#define MPI_2INT LLMC_MPI_TYPE(30, 2 * sizeof(int))
#define MPI_LONG_INT LLMC_MPI_TYPE(31, sizeof(long) + sizeof(int) + 4)

static int llmc_mpi_initialized = 0, llmc_mpi_finalized = 0;

static void llmc_mpi_die(const char* msg) {
    fprintf(stderr, "error: MPI stand-in (single rank, built without MPI): %s\n", msg);
    fflush(stderr);
    exit(1);
}

/* p == MPI_IN_PLACE, with the constant hidden from the optimiser: inlined
   into a caller, a plain comparison lets GCC follow a path on which the
   caller's buffer "is" address 1 and warn about the caller's free() */
static inline int llmc_mpi_in_place(const void* p) {
    const void* q = MPI_IN_PLACE;
#if defined(__GNUC__)
    __asm__ __volatile__("" : "+r"(q));
#endif
    return p == q;
}

static inline size_t llmc_mpi_bytes(int count, MPI_Datatype t) {
    if (count < 0) llmc_mpi_die("negative count");
    return (size_t)count * (size_t)(t & 0xff);
}

/* copy count elements of type t from send to recv unless in place / same */
static inline void llmc_mpi_copy(const void* send, void* recv, int count, MPI_Datatype t) {
    if (llmc_mpi_in_place(send) || send == recv || !count) return;
    memmove(recv, send, llmc_mpi_bytes(count, t));
}

static inline void llmc_mpi_check_comm(MPI_Comm c) {
    if (c == MPI_COMM_NULL) llmc_mpi_die("MPI_COMM_NULL used as a communicator");
}

/* refuse a multi-process launch: every process would think it is alone */
static inline int llmc_mpi_launched_size(void) {
    const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"};
    for (int i = 0; i < 4; i++) {
        const char* v = getenv(vars[i]);
        if (v && atoi(v) > 1) return atoi(v);
    }
    return 1;
}

static inline int MPI_Init(int* argc, char*** argv) {
    (void)argc; (void)argv;
    int n = llmc_mpi_launched_size();
    if (n > 1) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "launched as %d processes, but this program runs one rank only "
                 "(rebuild with an MPI library: make -f cuda.mk cuda CUDA_MPICC=mpicc)", n);
        llmc_mpi_die(msg);
    }
    llmc_mpi_initialized = 1;
    return MPI_SUCCESS;
}
static inline int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
    if (provided) *provided = required;
    return MPI_Init(argc, argv);
}
static inline int MPI_Initialized(int* flag) { *flag = llmc_mpi_initialized; return MPI_SUCCESS; }
static inline int MPI_Finalized(int* flag) { *flag = llmc_mpi_finalized; return MPI_SUCCESS; }
static inline int MPI_Query_thread(int* provided) { *provided = MPI_THREAD_MULTIPLE; return MPI_SUCCESS; }
static inline int MPI_Abort(MPI_Comm c, int code) { (void)c; fflush(stdout); fflush(stderr); exit(code); }
static inline int MPI_Get_version(int* v, int* sv) { *v = MPI_VERSION; *sv = MPI_SUBVERSION; return MPI_SUCCESS; }
static inline int MPI_Get_library_version(char* s, int* len) {
    const char* v = "llmc single-rank MPI stand-in (llmc/mpi_stub/mpi.h)";
    snprintf(s, MPI_MAX_LIBRARY_VERSION_STRING, "%s", v);
    *len = (int)strlen(s);
    return MPI_SUCCESS;
}
static inline int MPI_Get_processor_name(char* name, int* len) {
    if (gethostname(name, MPI_MAX_PROCESSOR_NAME) != 0) snprintf(name, MPI_MAX_PROCESSOR_NAME, "localhost");
    name[MPI_MAX_PROCESSOR_NAME - 1] = 0;
    *len = (int)strlen(name);
    return MPI_SUCCESS;
}
static inline int MPI_Error_string(int code, char* s, int* len) {
    snprintf(s, MPI_MAX_ERROR_STRING, "MPI error %d", code);
    *len = (int)strlen(s);
    return MPI_SUCCESS;
}
static inline double MPI_Wtime(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static inline double MPI_Wtick(void) { return 1e-9; }
static inline int MPI_Type_size(MPI_Datatype t, int* size) { *size = t & 0xff; return MPI_SUCCESS; }

/* communicators */
static inline int MPI_Comm_rank(MPI_Comm c, int* rank) { llmc_mpi_check_comm(c); *rank = 0; return MPI_SUCCESS; }
static inline int MPI_Comm_size(MPI_Comm c, int* size) { llmc_mpi_check_comm(c); *size = 1; return MPI_SUCCESS; }
static inline int MPI_Comm_dup(MPI_Comm c, MPI_Comm* out) { llmc_mpi_check_comm(c); *out = MPI_COMM_SELF; return MPI_SUCCESS; }
static inline int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm* out) {
    (void)key;
    llmc_mpi_check_comm(c);
    *out = color == MPI_UNDEFINED ? MPI_COMM_NULL : MPI_COMM_SELF;
    return MPI_SUCCESS;
}
static inline int MPI_Comm_split_type(MPI_Comm c, int type, int key, MPI_Info info, MPI_Comm* out) {
    (void)info;
    return MPI_Comm_split(c, type, key, out);
}
static inline int MPI_Comm_free(MPI_Comm* c) { *c = MPI_COMM_NULL; return MPI_SUCCESS; }
/* groups: one process, so every group is {0} and a translation is the identity */
static inline int MPI_Comm_group(MPI_Comm c, MPI_Group* g) { llmc_mpi_check_comm(c); *g = 1; return MPI_SUCCESS; }
static inline int MPI_Group_free(MPI_Group* g) { *g = 0; return MPI_SUCCESS; }
static inline int MPI_Group_translate_ranks(MPI_Group a, int n, const int* in, MPI_Group b, int* out) {
    (void)a; (void)b;
    for (int i = 0; i < n; i++) out[i] = in[i];
    return MPI_SUCCESS;
}
typedef void MPI_Comm_errhandler_function(MPI_Comm*, int*, ...);
static inline int MPI_Comm_create_errhandler(MPI_Comm_errhandler_function* f, MPI_Errhandler* e) { (void)f; *e = 0; return MPI_SUCCESS; }
static inline int MPI_Comm_set_errhandler(MPI_Comm c, MPI_Errhandler e) { (void)c; (void)e; return MPI_SUCCESS; }
static inline int MPI_Finalize(void) { llmc_mpi_finalized = 1; return MPI_SUCCESS; }

/* collectives over one member */
static inline int MPI_Barrier(MPI_Comm c) { llmc_mpi_check_comm(c); return MPI_SUCCESS; }
static inline int MPI_Bcast(void* buf, int count, MPI_Datatype t, int root, MPI_Comm c) {
    (void)buf; (void)count; (void)t;
    llmc_mpi_check_comm(c);
    if (root != 0) llmc_mpi_die("MPI_Bcast root is not rank 0");
    return MPI_SUCCESS;
}
static inline int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    (void)op;
    llmc_mpi_check_comm(c);
    llmc_mpi_copy(send, recv, count, t);
    return MPI_SUCCESS;
}
static inline int MPI_Reduce(const void* send, void* recv, int count, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c) {
    if (root != 0) llmc_mpi_die("MPI_Reduce root is not rank 0");
    return MPI_Allreduce(send, recv, count, t, op, c);
}
static inline int MPI_Scan(const void* send, void* recv, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    return MPI_Allreduce(send, recv, count, t, op, c);
}
static inline int MPI_Exscan(const void* send, void* recv, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    (void)send; (void)recv; (void)count; (void)t; (void)op; /* rank 0's result is undefined */
    llmc_mpi_check_comm(c);
    return MPI_SUCCESS;
}
static inline int MPI_Reduce_scatter_block(const void* send, void* recv, int recvcount, MPI_Datatype t, MPI_Op op,
                                           MPI_Comm c) {
    return MPI_Allreduce(send, recv, recvcount, t, op, c);
}
static inline int MPI_Reduce_scatter(const void* send, void* recv, const int recvcounts[], MPI_Datatype t, MPI_Op op,
                                     MPI_Comm c) {
    return MPI_Allreduce(send, recv, recvcounts[0], t, op, c);
}
static inline int MPI_Allgather(const void* send, int scount, MPI_Datatype st, void* recv, int rcount, MPI_Datatype rt,
                                MPI_Comm c) {
    (void)rcount; (void)rt;
    llmc_mpi_check_comm(c);
    llmc_mpi_copy(send, recv, scount, st);
    return MPI_SUCCESS;
}
static inline int MPI_Gather(const void* send, int scount, MPI_Datatype st, void* recv, int rcount, MPI_Datatype rt,
                             int root, MPI_Comm c) {
    if (root != 0) llmc_mpi_die("MPI_Gather root is not rank 0");
    return MPI_Allgather(send, scount, st, recv, rcount, rt, c);
}
static inline int MPI_Allgatherv(const void* send, int scount, MPI_Datatype st, void* recv, const int rcounts[],
                                 const int displs[], MPI_Datatype rt, MPI_Comm c) {
    (void)rcounts;
    llmc_mpi_check_comm(c);
    if (!llmc_mpi_in_place(send)) llmc_mpi_copy(send, (char*)recv + llmc_mpi_bytes(displs[0], rt), scount, st);
    return MPI_SUCCESS;
}
static inline int MPI_Gatherv(const void* send, int scount, MPI_Datatype st, void* recv, const int rcounts[],
                              const int displs[], MPI_Datatype rt, int root, MPI_Comm c) {
    if (root != 0) llmc_mpi_die("MPI_Gatherv root is not rank 0");
    return MPI_Allgatherv(send, scount, st, recv, rcounts, displs, rt, c);
}
static inline int MPI_Scatter(const void* send, int scount, MPI_Datatype st, void* recv, int rcount, MPI_Datatype rt,
                              int root, MPI_Comm c) {
    (void)scount; (void)st;
    if (root != 0) llmc_mpi_die("MPI_Scatter root is not rank 0");
    llmc_mpi_check_comm(c);
    if (!llmc_mpi_in_place(recv)) llmc_mpi_copy(send, recv, rcount, rt);
    return MPI_SUCCESS;
}
static inline int MPI_Scatterv(const void* send, const int scounts[], const int displs[], MPI_Datatype st, void* recv,
                               int rcount, MPI_Datatype rt, int root, MPI_Comm c) {
    (void)scounts;
    if (root != 0) llmc_mpi_die("MPI_Scatterv root is not rank 0");
    llmc_mpi_check_comm(c);
    if (!llmc_mpi_in_place(recv)) llmc_mpi_copy((const char*)send + llmc_mpi_bytes(displs[0], st), recv, rcount, rt);
    return MPI_SUCCESS;
}
static inline int MPI_Alltoall(const void* send, int scount, MPI_Datatype st, void* recv, int rcount, MPI_Datatype rt,
                               MPI_Comm c) {
    return MPI_Allgather(send, scount, st, recv, rcount, rt, c);
}
static inline int MPI_Alltoallv(const void* send, const int scounts[], const int sdispls[], MPI_Datatype st, void* recv,
                                const int rcounts[], const int rdispls[], MPI_Datatype rt, MPI_Comm c) {
    (void)rcounts;
    llmc_mpi_check_comm(c);
    if (!llmc_mpi_in_place(send))
        llmc_mpi_copy((const char*)send + llmc_mpi_bytes(sdispls[0], st), (char*)recv + llmc_mpi_bytes(rdispls[0], rt),
                      scounts[0], st);
    return MPI_SUCCESS;
}

/* non-blocking collectives complete at once (one member: a copy) */
static inline int MPI_Iallreduce(const void* send, void* recv, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                                 MPI_Request* r) {
    *r = MPI_REQUEST_NULL;
    return MPI_Allreduce(send, recv, count, t, op, c);
}
static inline int MPI_Ireduce_scatter_block(const void* send, void* recv, int recvcount, MPI_Datatype t, MPI_Op op,
                                            MPI_Comm c, MPI_Request* r) {
    *r = MPI_REQUEST_NULL;
    return MPI_Reduce_scatter_block(send, recv, recvcount, t, op, c);
}
static inline int MPI_Iallgather(const void* send, int scount, MPI_Datatype st, void* recv, int rcount, MPI_Datatype rt,
                                 MPI_Comm c, MPI_Request* r) {
    *r = MPI_REQUEST_NULL;
    return MPI_Allgather(send, scount, st, recv, rcount, rt, c);
}
static inline int MPI_Igather(const void* send, int scount, MPI_Datatype st, void* recv, int rcount, MPI_Datatype rt,
                              int root, MPI_Comm c, MPI_Request* r) {
    *r = MPI_REQUEST_NULL;
    return MPI_Gather(send, scount, st, recv, rcount, rt, root, c);
}
static inline int MPI_Ialltoall(const void* send, int scount, MPI_Datatype st, void* recv, int rcount, MPI_Datatype rt,
                                MPI_Comm c, MPI_Request* r) {
    *r = MPI_REQUEST_NULL;
    return MPI_Alltoall(send, scount, st, recv, rcount, rt, c);
}
static inline int MPI_Ibcast(void* buf, int count, MPI_Datatype t, int root, MPI_Comm c, MPI_Request* r) {
    *r = MPI_REQUEST_NULL;
    return MPI_Bcast(buf, count, t, root, c);
}
static inline int MPI_Ibarrier(MPI_Comm c, MPI_Request* r) {
    *r = MPI_REQUEST_NULL;
    return MPI_Barrier(c);
}

/* point to point: messages to oneself. A send first matches the oldest
   posted non-blocking receive whose tag fits, else it is buffered; a receive
   takes the oldest buffered message whose tag fits. */
typedef struct LlmcMpiMsg { int tag; size_t bytes; void* data; struct LlmcMpiMsg* next; } LlmcMpiMsg;
typedef struct LlmcMpiRecv {
    int id, tag, done;
    void* buf;
    size_t cap, got;
    struct LlmcMpiRecv* next;
} LlmcMpiRecv;
static LlmcMpiMsg* llmc_mpi_queue = NULL;
static LlmcMpiRecv* llmc_mpi_posted = NULL;
static int llmc_mpi_next_request = 1;

static inline void llmc_mpi_set_status(MPI_Status* st, int source, int tag, size_t bytes) {
    if (st) { st->MPI_SOURCE = source; st->MPI_TAG = tag; st->MPI_ERROR = 0; st->count_bytes = (long long)bytes; }
}

static inline int MPI_Send(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
    llmc_mpi_check_comm(c);
    if (dest == MPI_PROC_NULL) return MPI_SUCCESS;
    if (dest != 0) llmc_mpi_die("MPI_Send to a rank other than 0");
    size_t n = llmc_mpi_bytes(count, t);
    for (LlmcMpiRecv* r = llmc_mpi_posted; r; r = r->next) {
        if (r->done || (r->tag != MPI_ANY_TAG && r->tag != tag)) continue;
        if (n > r->cap) llmc_mpi_die("receive buffer smaller than the message (truncation)");
        memcpy(r->buf, buf, n);
        r->got = n;
        r->tag = tag;
        r->done = 1;
        return MPI_SUCCESS;
    }
    LlmcMpiMsg* m = (LlmcMpiMsg*)calloc(1, sizeof(LlmcMpiMsg));
    if (!m || !(m->data = malloc(n ? n : 1))) llmc_mpi_die("out of memory buffering a message");
    memcpy(m->data, buf, n);
    m->tag = tag;
    m->bytes = n;
    LlmcMpiMsg** p = &llmc_mpi_queue;
    while (*p) p = &(*p)->next;
    *p = m;
    return MPI_SUCCESS;
}
static inline int MPI_Ssend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
    return MPI_Send(buf, count, t, dest, tag, c);
}
/* 1 and the message copied into buf if a buffered one fits the tag, else 0 */
static inline int llmc_mpi_take(void* buf, size_t cap, int tag, MPI_Status* st) {
    for (LlmcMpiMsg** p = &llmc_mpi_queue; *p; p = &(*p)->next) {
        LlmcMpiMsg* m = *p;
        if (tag != MPI_ANY_TAG && m->tag != tag) continue;
        if (m->bytes > cap) llmc_mpi_die("receive buffer smaller than the message (truncation)");
        memcpy(buf, m->data, m->bytes);
        llmc_mpi_set_status(st, 0, m->tag, m->bytes);
        *p = m->next;
        free(m->data);
        free(m);
        return 1;
    }
    return 0;
}
static inline int llmc_mpi_source_ok(int source, const char* call) {
    if (source == MPI_PROC_NULL) return 0;
    if (source != 0 && source != MPI_ANY_SOURCE) {
        char msg[128];
        snprintf(msg, sizeof(msg), "%s from a rank other than 0", call);
        llmc_mpi_die(msg);
    }
    return 1;
}
static inline int MPI_Recv(void* buf, int count, MPI_Datatype t, int source, int tag, MPI_Comm c, MPI_Status* st) {
    llmc_mpi_check_comm(c);
    if (!llmc_mpi_source_ok(source, "MPI_Recv")) { llmc_mpi_set_status(st, MPI_PROC_NULL, MPI_ANY_TAG, 0); return MPI_SUCCESS; }
    if (!llmc_mpi_take(buf, llmc_mpi_bytes(count, t), tag, st))
        llmc_mpi_die("MPI_Recv with no matching message from this rank (real MPI would wait forever)");
    return MPI_SUCCESS;
}
static inline int MPI_Sendrecv(const void* sbuf, int scount, MPI_Datatype st, int dest, int stag, void* rbuf, int rcount,
                               MPI_Datatype rt, int source, int rtag, MPI_Comm c, MPI_Status* status) {
    MPI_Send(sbuf, scount, st, dest, stag, c);
    return MPI_Recv(rbuf, rcount, rt, source, rtag, c, status);
}
/* a non-blocking send is buffered at once (complete); a non-blocking
   receive takes a buffered message at once or waits in the posted list for
   a later send; waiting on one that no send matched ends the process */
static inline int MPI_Isend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request* r) {
    *r = MPI_REQUEST_NULL;
    return MPI_Send(buf, count, t, dest, tag, c);
}
static inline int MPI_Irecv(void* buf, int count, MPI_Datatype t, int source, int tag, MPI_Comm c, MPI_Request* r) {
    llmc_mpi_check_comm(c);
    *r = MPI_REQUEST_NULL;
    if (!llmc_mpi_source_ok(source, "MPI_Irecv")) return MPI_SUCCESS;
    size_t cap = llmc_mpi_bytes(count, t);
    if (llmc_mpi_take(buf, cap, tag, MPI_STATUS_IGNORE)) return MPI_SUCCESS;
    LlmcMpiRecv* p = (LlmcMpiRecv*)calloc(1, sizeof(LlmcMpiRecv));
    if (!p) llmc_mpi_die("out of memory posting a receive");
    p->id = llmc_mpi_next_request++;
    p->tag = tag;
    p->buf = buf;
    p->cap = cap;
    LlmcMpiRecv** q = &llmc_mpi_posted;
    while (*q) q = &(*q)->next;
    *q = p;
    *r = p->id;
    return MPI_SUCCESS;
}
static inline int MPI_Test(MPI_Request* r, int* flag, MPI_Status* st) {
    *flag = 1;
    if (*r == MPI_REQUEST_NULL) { llmc_mpi_set_status(st, 0, 0, 0); return MPI_SUCCESS; }
    for (LlmcMpiRecv** q = &llmc_mpi_posted; *q; q = &(*q)->next) {
        LlmcMpiRecv* p = *q;
        if (p->id != *r) continue;
        if (!p->done) { *flag = 0; return MPI_SUCCESS; }
        llmc_mpi_set_status(st, 0, p->tag, p->got);
        *q = p->next;
        free(p);
        *r = MPI_REQUEST_NULL;
        return MPI_SUCCESS;
    }
    llmc_mpi_die("MPI_Test/MPI_Wait on an unknown request");
    return MPI_ERR_OTHER;
}
static inline int MPI_Wait(MPI_Request* r, MPI_Status* st) {
    int flag = 0;
    MPI_Test(r, &flag, st);
    if (!flag) llmc_mpi_die("MPI_Wait on a receive that no send of this rank matches (real MPI would wait forever)");
    return MPI_SUCCESS;
}
static inline int MPI_Waitall(int n, MPI_Request r[], MPI_Status st[]) {
    for (int i = 0; i < n; i++) MPI_Wait(&r[i], st ? &st[i] : MPI_STATUS_IGNORE);
    return MPI_SUCCESS;
}
static inline int MPI_Get_count(const MPI_Status* st, MPI_Datatype t, int* count) {
    int s = t & 0xff;
    *count = s ? (int)(st->count_bytes / s) : 0;
    return MPI_SUCCESS;
}

#endif /* LLMC_MPI_STUB_MPI_H */
