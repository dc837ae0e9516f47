/*
 fuzz_common.h: shared by the fuzz targets in tests/fuzz (libFuzzer entry
 point LLVMFuzzerTestOneInput; tests/fuzz/standalone.c drives the same entry
 point without libFuzzer). The readers under test take a path, so each
 input is written to a per-process file in /dev/shm (or $TMPDIR) first.
 FUZZ_CHECK(cond) traps when an invariant of a reader that returned success
 does not hold: a logic bug, reported like a crash.

 The checkpoint and state targets need a model: a tiny GPT-2 (maxT 4, V 8,
 Vp 8, L 1, NH 1, C 4: 300 parameters) built twice without MPI_Init (the
 model and engine make no MPI calls): one rank of one at zero_stage 0
 (holds everything) and rank 1 of 3 at zero_stage 3 (holds shards only).
*/
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_CHECK(cond) do { if (!(cond)) { fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); __builtin_trap(); } } while (0)

static char fuzz_paths_[4][256];
static inline void fuzz_cleanup_(void) {
    for (int k = 0; k < 4; k++) if (fuzz_paths_[k][0]) unlink(fuzz_paths_[k]);
}

/* Path of this process's scratch file number k (k < 4); removed at exit. */
static inline const char* fuzz_path(int k) {
    char (*paths)[256] = fuzz_paths_;
    static int registered = 0;
    if (!registered) { registered = 1; atexit(fuzz_cleanup_); }
    if (!paths[k][0]) {
        const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        snprintf(paths[k], sizeof(paths[k]), "%s/llmc_fuzz_%d_%d.bin", dir, (int)getpid(), k);
    }
    return paths[k];
}

/* Write n bytes to scratch file k (truncating). */
static inline void fuzz_write(int k, const uint8_t* data, size_t n) {
    FILE* f = fopen(fuzz_path(k), "wb");
    if (!f) { perror(fuzz_path(k)); abort(); }
    if (n && fwrite(data, 1, n, f) != n) { perror("fwrite"); abort(); }
    fclose(f);
}

#ifdef FUZZ_WITH_MODEL
#include "llmc/cpu/backend.h"
#include "llmc/gpt.h"
#include "llmc/checkpoint.h"

static const GPT2Config fuzz_tiny_config = {4, 8, 8, 1, 1, 4}; /* maxT, V, Vp, L, NH, C */

typedef struct { Comm comm; GPT2 model; } FuzzModel;
static FuzzModel fuzz_models[2];

/* Build the two tiny models once. */
static inline void fuzz_models_init(void) {
    static int done = 0;
    if (done) return;
    done = 1;
    const int ranks[2] = {1, 3}, rank[2] = {0, 1}, stage[2] = {0, 3};
    for (int i = 0; i < 2; i++) {
        FuzzModel* f = &fuzz_models[i];
        memset(&f->comm, 0, sizeof(f->comm));
        f->comm.world_size = ranks[i]; f->comm.rank = rank[i];
        f->comm.group_size = ranks[i]; f->comm.group_rank = rank[i]; f->comm.replica_size = 1;
        char err[ERRLEN] = "";
        GPT2Options o = gpt2_default_options();
        o.zero_stage = stage[i];
        if (gpt2_init(&f->model, &fuzz_tiny_config, &f->comm, &o, 1, 4, err, ERRLEN)) {
            fprintf(stderr, "fuzz: tiny model: %s\n", err);
            abort();
        }
    }
}
#endif

#endif /* FUZZ_COMMON_H */
