/*
 dev/cuda/test_backend.cu: the CUDA backend's collectives and uploads on a
 real communicator, checked on the GPU. At N = 1 (one GPU) the ZeRO engine
 skips every collective, so this is what runs comm_nccl.cuh's code there:
 the NCCL calls with their in-place pointers, the event ordering between the
 compute and comm streams, and the fence ring, made small here
 (NCCL_FENCES 4) so that it wraps many times. With several ranks on one GPU
 (host-staged collectives, LLMC_COLLECTIVES=host or auto) it checks the real
 sums over 2..N ranks.

   make -f cuda.mk cuda-test
   ./dev/cuda/test_backend                                   (1 rank, NCCL)
   LLMC_COLLECTIVES=host mpirun -np 4 ./dev/cuda/test_backend   (4 ranks, one GPU)

 Checks (each prints one line; the last line is "N passed, M failed"):
   1. reduce-scatter (into the rank's own shard, and added into an
      accumulator) and all-gather (start + wait) on buffers of N*shard bf16
      elements for shard in {1, 7, 4099, 2^20+3}: every element equals the
      sum over ranks (plus the accumulator) or its owner's value. Values are
      small integers (-4..4), so every sum is exact in bf16 whatever the
      order: bitwise.
   2. (NCCL mode) ordering, compute -> comm: a kernel on the compute stream
      that writes a flag after ~2 ms, then a collective; a kernel queued on
      the comm stream right after the collective must see the flag.
   3. (NCCL mode) ordering, comm -> compute: a kernel on the comm stream that
      writes a flag after ~2 ms, then backend_all_gather_start; after
      backend_wait_comm(fence) a compute kernel must see the flag.
   4. (NCCL mode) fence ring wrap: fence f and fence f + NCCL_FENCES share an
      event; the flag is written on the comm stream between them; waiting on
      the older fence f must still order the compute kernel after the flag
      (it waits on the re-recorded, later event: the header's promise).
      (host-staged mode: every fence is 0, checked instead)
   5. uploads: backend_to_device from pageable memory that the host refills
      at once, behind a slow kernel, in sizes below, at and above the 4 MiB
      staging chunk: the device must hold each upload's own values.
   6. traffic: calls and handed bytes counted per collective equal the sums
      this program expects.
*/
#define NCCL_FENCES 4
#include "llmc/cuda/backend.cuh"
#include <vector>

static int passed = 0, failed = 0;

static void report(Comm* c, int ok_local, const char* what, unsigned long long detail) {
    int ok = ok_local, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all) passed++; else failed++;
    if (c->rank == 0) printf("%s %-64s (%llu)\n", all ? "OK  " : "FAIL", what, detail);
    fflush(stdout);
}

__device__ __forceinline__ int val(int rank, size_t i, int salt) {
    return (int)((i * 7 + (size_t)salt * 3 + (size_t)rank * 5) % 9) - 4;
}

/* buf[i] = val(rank, i, salt) for i in [lo, hi), junk (100) elsewhere */
__global__ void fill_kernel(floatX* buf, size_t n, size_t lo, size_t hi, int rank, int salt) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        buf[i] = tobf(i >= lo && i < hi ? (float)val(rank, i, salt) : 100.0f);
}

/* mode 0: buf[i] == sum over ranks of val(r, i); mode 1: buf[i] == val(i / shard, i);
   mode 2 (accumulator of `shard` elements for the shard starting at lo):
   buf[j] == val(99, j) + sum over ranks of val(r, lo + j) */
__global__ void check_kernel(const floatX* buf, size_t lo, size_t hi, size_t shard, int nranks, int salt, int mode,
                             unsigned long long* bad) {
    size_t n = mode == 2 ? shard : hi - lo;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        size_t i = mode == 2 ? k : lo + k;
        int want = 0;
        if (mode == 1) want = val((int)(i / shard), i, salt);
        else {
            size_t g = mode == 2 ? lo + k : i;
            for (int r = 0; r < nranks; r++) want += val(r, g, salt);
            if (mode == 2) want += val(99, k, salt);
        }
        if (bf(buf[i]) != (float)want) atomicAdd(bad, 1ULL);
    }
}

/* the GPU's nanosecond timer (%globaltimer); the emulated device has no
   PTX: its __globaltimer() reads CLOCK_MONOTONIC (tests/cuda_emu) */
__device__ __forceinline__ unsigned long long global_ns(void) {
#ifdef LLMC_CUDA_EMU
    return __globaltimer();
#else
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}
/* spins ns nanoseconds, then *flag = value */
__global__ void delayed_write_kernel(volatile int* flag, int value, unsigned long long ns) {
    unsigned long long t0 = global_ns();
    while (global_ns() - t0 < ns) { }
    *flag = value;
}
__global__ void expect_flag_kernel(const volatile int* flag, int value, unsigned long long* bad) {
    if (*flag != value) atomicAdd(bad, 1ULL);
}
/* counts elements of d (n bytes) that differ from the byte pattern seed+i */
__global__ void check_bytes_kernel(const unsigned char* d, size_t n, unsigned int seed, unsigned long long* bad) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (d[i] != (unsigned char)(seed + i * 131u)) atomicAdd(bad, 1ULL);
}

static unsigned long long* d_bad;
static unsigned long long read_bad(void) {
    unsigned long long h = 0;
    backend_to_host(&h, d_bad, sizeof(h));
    backend_memset_zero(d_bad, sizeof(h));
    return h;
}

int main(int argc, char** argv) {
    Comm comm;
    comm_init(&comm, &argc, &argv);
    backend_init(&comm);
    Comm* c = &comm;
    const int N = c->world_size, me = c->rank;
    cudaStream_t cs = cuda_ctx.stream, ks = nccl_state.comm_stream;
    d_bad = (unsigned long long*)backend_malloc(sizeof(unsigned long long));
    int* d_flag = (int*)backend_malloc(sizeof(int));
    if (!d_bad || !d_flag) comm_fatal(c, "out of device memory");
    backend_memset_zero(d_bad, sizeof(unsigned long long));
    if (me == 0) printf("test_backend: %d rank(s), %s, NCCL_FENCES %d\n", N, nccl_state.host ? "host-staged" : "NCCL", NCCL_FENCES);

    unsigned long long want_calls[COLL_NUM] = {0}, want_bytes[COLL_NUM] = {0};
    const size_t shards[] = {1, 7, 4099, ((size_t)1 << 20) + 3};
    const int G = 256, TPB = 256;
    int salt = 0;

    /* 1. the collectives, three rounds per size (the fences wrap) */
    for (size_t si = 0; si < sizeof(shards) / sizeof(shards[0]); si++) {
        size_t shard = shards[si], n = shard * (size_t)N, lo = (size_t)me * shard, hi = lo + shard;
        floatX* buf = (floatX*)backend_malloc(n * sizeof(floatX));
        floatX* acc = (floatX*)backend_malloc(shard * sizeof(floatX));
        if (!buf || !acc) comm_fatal(c, "out of device memory");
        unsigned long long bad_rs = 0, bad_acc = 0, bad_ag = 0, nonzero = 0;
        for (int round = 0; round < 3; round++) {
            salt++;
            LLMC_LAUNCH(fill_kernel, G, TPB, 0, cs, buf, n, 0, n, me, salt);
            unsigned long long f = backend_reduce_scatter_start(c, buf, shard, NULL);
            if (nccl_state.host && f != 0) nonzero++;
            backend_wait_comm(f);
            LLMC_LAUNCH(check_kernel, G, TPB, 0, cs, buf, lo, hi, shard, N, salt, 0, d_bad);
            bad_rs += read_bad();
            want_calls[COLL_REDUCE_SCATTER]++; want_bytes[COLL_REDUCE_SCATTER] += n * sizeof(floatX);

            salt++;
            LLMC_LAUNCH(fill_kernel, G, TPB, 0, cs, buf, n, 0, n, me, salt);
            LLMC_LAUNCH(fill_kernel, G, TPB, 0, cs, acc, shard, 0, shard, 99, salt);
            f = backend_reduce_scatter_start(c, buf, shard, acc);
            if (nccl_state.host && f != 0) nonzero++;
            backend_wait_comm(f);
            LLMC_LAUNCH(check_kernel, G, TPB, 0, cs, acc, lo, hi, shard, N, salt, 2, d_bad);
            bad_acc += read_bad();
            want_calls[COLL_REDUCE_SCATTER]++; want_bytes[COLL_REDUCE_SCATTER] += n * sizeof(floatX);

            salt++;
            LLMC_LAUNCH(fill_kernel, G, TPB, 0, cs, buf, n, lo, hi, me, salt);
            f = backend_all_gather_start(c, buf, shard);
            if (nccl_state.host && f != 0) nonzero++;
            backend_wait_comm(f);
            LLMC_LAUNCH(check_kernel, G, TPB, 0, cs, buf, 0, n, shard, N, salt, 1, d_bad);
            bad_ag += read_bad();
            want_calls[COLL_ALL_GATHER]++; want_bytes[COLL_ALL_GATHER] += n * sizeof(floatX);
        }
        char what[128];
        snprintf(what, sizeof(what), "reduce-scatter, shard %zu x %d ranks: own shard = exact sums", shard, N);
        report(c, bad_rs == 0, what, bad_rs);
        snprintf(what, sizeof(what), "reduce-scatter into an accumulator, shard %zu: acc + sums", shard);
        report(c, bad_acc == 0, what, bad_acc);
        snprintf(what, sizeof(what), "all-gather start + wait, shard %zu: every shard", shard);
        report(c, bad_ag == 0, what, bad_ag);
        if (nccl_state.host) report(c, nonzero == 0, "host-staged collectives are complete on return (fence 0)", nonzero);
        backend_free(buf);
        backend_free(acc);
    }

    size_t shard = 4096, n = shard * (size_t)N;
    floatX* buf = (floatX*)backend_malloc(n * sizeof(floatX));
    if (!buf) comm_fatal(c, "out of device memory");
    backend_memset_zero(buf, n * sizeof(floatX));   /* the ordering checks gather it: defined bytes (the emulated device refuses to send cudaMalloc's fill) */
    const unsigned long long delay_ns = 2000000ULL; /* 2 ms */

    if (nccl_state.host && me == 0) printf("(host-staged mode: no comm stream, the ordering checks 2-4 do not apply)\n");
    /* 2. compute -> comm */
    if (!nccl_state.host) {
        unsigned long long bad = 0;
        for (int k = 1; k <= 6; k++) {
            backend_memset_zero(d_flag, sizeof(int));
            LLMC_LAUNCH(delayed_write_kernel, 1, 1, 0, cs, d_flag, k, delay_ns);
            unsigned long long f = backend_all_gather_start(c, buf, shard);
            LLMC_LAUNCH(expect_flag_kernel, 1, 1, 0, ks, d_flag, k, d_bad);
            backend_wait_comm(f);
            want_calls[COLL_ALL_GATHER]++; want_bytes[COLL_ALL_GATHER] += n * sizeof(floatX);
            backend_synchronize();
            bad += read_bad();
        }
        report(c, bad == 0, "compute -> comm: the collective starts after earlier kernels", bad);
    }

    /* 3. comm -> compute */
    if (!nccl_state.host) {
        unsigned long long bad = 0;
        for (int k = 1; k <= 6; k++) {
            backend_memset_zero(d_flag, sizeof(int));
            backend_synchronize(); /* the memset is done before the comm-stream kernel runs */
            LLMC_LAUNCH(delayed_write_kernel, 1, 1, 0, ks, d_flag, k, delay_ns);
            unsigned long long f = backend_all_gather_start(c, buf, shard);
            backend_wait_comm(f);
            LLMC_LAUNCH(expect_flag_kernel, 1, 1, 0, cs, d_flag, k, d_bad);
            want_calls[COLL_ALL_GATHER]++; want_bytes[COLL_ALL_GATHER] += n * sizeof(floatX);
            bad += read_bad();
        }
        report(c, bad == 0, "comm -> compute: backend_wait_comm orders later kernels", bad);
    }

    /* 4. a fence older than the ring: fence f and f + NCCL_FENCES share an event */
    if (!nccl_state.host) {
        unsigned long long bad = 0, wrong_waited = 0;
        for (int k = 1; k <= 3; k++) {
            backend_memset_zero(d_flag, sizeof(int));
            backend_synchronize();
            unsigned long long f0 = backend_all_gather_start(c, buf, shard);
            want_calls[COLL_ALL_GATHER]++; want_bytes[COLL_ALL_GATHER] += n * sizeof(floatX);
            for (int j = 1; j < NCCL_FENCES; j++) {
                backend_all_gather_start(c, buf, shard);
                want_calls[COLL_ALL_GATHER]++; want_bytes[COLL_ALL_GATHER] += n * sizeof(floatX);
            }
            LLMC_LAUNCH(delayed_write_kernel, 1, 1, 0, ks, d_flag, k, delay_ns);
            unsigned long long f1 = backend_all_gather_start(c, buf, shard); /* same event as f0 */
            want_calls[COLL_ALL_GATHER]++; want_bytes[COLL_ALL_GATHER] += n * sizeof(floatX);
            if (f1 != f0 + NCCL_FENCES) wrong_waited++;
            backend_wait_comm(f0);
            LLMC_LAUNCH(expect_flag_kernel, 1, 1, 0, cs, d_flag, k, d_bad);
            backend_wait_comm(f1);
            if (nccl_state.waited != f1) wrong_waited++;
            backend_wait_comm(f0); /* older than waited: no-op */
            if (nccl_state.waited != f1) wrong_waited++;
            bad += read_bad();
        }
        report(c, bad == 0, "fence ring wrap: an old fence waits on a later event", bad);
        report(c, wrong_waited == 0, "fence numbering and backend_wait_comm bookkeeping", wrong_waited);
    }
    backend_free(buf);

    /* 5. uploads from pageable memory refilled at once, behind a slow kernel */
    {
        const size_t sizes[] = {1, 4099, CUDA_UPLOAD_CHUNK, 3 * CUDA_UPLOAD_CHUNK + 12345};
        unsigned long long bad = 0;
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
            size_t bytes = sizes[si];
            std::vector<unsigned char> host(bytes);
            unsigned char* dev[3];
            for (int k = 0; k < 3; k++) {
                dev[k] = (unsigned char*)backend_malloc(bytes);
                if (!dev[k]) comm_fatal(c, "out of device memory");
            }
            backend_memset_zero(d_flag, sizeof(int));
            LLMC_LAUNCH(delayed_write_kernel, 1, 1, 0, cs, d_flag, 1, delay_ns); /* copies queue behind it */
            for (int k = 0; k < 3; k++) {
                for (size_t i = 0; i < bytes; i++) host[i] = (unsigned char)(1000u * (unsigned)(k + 1) + si + i * 131u);
                backend_to_device(dev[k], host.data(), bytes);
            }
            memset(host.data(), 0xee, bytes); /* the last source is overwritten too */
            for (int k = 0; k < 3; k++)
                LLMC_LAUNCH(check_bytes_kernel, G, TPB, 0, cs, dev[k], bytes, 1000u * (unsigned)(k + 1) + (unsigned)si, d_bad);
            bad += read_bad();
            for (int k = 0; k < 3; k++) backend_free(dev[k]);
        }
        report(c, bad == 0, "backend_to_device: pageable source reusable on return", bad);
    }

    /* 6. traffic counters */
    {
        unsigned long long off = 0;
        for (int k = 0; k < COLL_SCALARS; k++) {
            if (c->calls[PHASE_TRAIN][k] != want_calls[k]) off++;
            if (c->handed[PHASE_TRAIN][k] != want_bytes[k]) off++;
        }
        report(c, off == 0, "traffic: calls and handed bytes per collective", off);
    }

    backend_synchronize();
    backend_free(d_bad);
    backend_free(d_flag);
    if (me == 0) printf("%d passed, %d failed\n", passed, failed);
    backend_finalize(c);
    comm_finalize(c);
    return failed ? 1 : 0;
}
