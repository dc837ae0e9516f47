/* tests/shims/fs_faults.c: an LD_PRELOAD shim that makes the file system
   misbehave as some network file systems and full disks do, for the tests
   of llmc/state.h and llmc/checkpoint.h (tests/suites/faults.sh).
     LLMC_SHIM_FLOCK=ENOSYS (or ENOLCK, EOPNOTSUPP): every flock(2) fails
       with that errno (Lustre mounted noflock answers ENOSYS).
     LLMC_SHIM_FLOCK_WAIT=FILE: a flock(2) of a file named *.llmc.lock
       (the -o lock, llmc/state.h) first creates FILE.waiting, then waits
       until FILE exists (at most 120 s): it widens the window between the
       trainer's open and its flock of the lock file to any length.
     LLMC_SHIM_ENOSPC=TEXT: every pwrite(2)/pwrite64 at byte 1024 or
       beyond, and every write(2), to a file whose path (/proc/self/fd)
       contains TEXT fails with ENOSPC: a disk that fills up in the middle
       of that file (e.g. "state_00000006.bin.tmp": rank 0 writes the
       1024-byte header, the ranks' own elements then fail).
   Build: gcc -shared -fPIC -O2 tests/shims/fs_faults.c -o fs_faults.so -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int shim_errno(const char* s) {
    if (!strcmp(s, "ENOSYS")) return ENOSYS;
    if (!strcmp(s, "ENOLCK")) return ENOLCK;
    if (!strcmp(s, "EOPNOTSUPP")) return EOPNOTSUPP;
    return EIO;
}

static int shim_fd_path(int fd, char* path, size_t n) {
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, path, n - 1);
    if (k <= 0) return -1;
    path[k] = 0;
    return 0;
}

int flock(int fd, int op) {
    const char* e = getenv("LLMC_SHIM_FLOCK");
    if (e && e[0]) { errno = shim_errno(e); return -1; }
    const char* w = getenv("LLMC_SHIM_FLOCK_WAIT");
    char path[4096];
    if (w && w[0] && shim_fd_path(fd, path, sizeof(path)) == 0 && strstr(path, ".llmc.lock")) {
        char mark[4200];
        snprintf(mark, sizeof(mark), "%s.waiting", w);
        FILE* f = fopen(mark, "w");
        if (f) fclose(f);
        for (int i = 0; i < 1200 && access(w, F_OK) != 0; i++) usleep(100000);
    }
    int (*real)(int, int) = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
    return real(fd, op);
}

/* 1 if fd's path contains LLMC_SHIM_ENOSPC */
static int shim_full(int fd) {
    const char* e = getenv("LLMC_SHIM_ENOSPC");
    if (!e || !e[0]) return 0;
    char path[4096];
    return shim_fd_path(fd, path, sizeof(path)) == 0 && strstr(path, e) != NULL;
}

ssize_t write(int fd, const void* p, size_t n) {
    if (shim_full(fd)) { errno = ENOSPC; return -1; }
    ssize_t (*real)(int, const void*, size_t) = (ssize_t (*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
    return real(fd, p, n);
}
ssize_t pwrite(int fd, const void* p, size_t n, off_t off) {
    if (off >= 1024 && shim_full(fd)) { errno = ENOSPC; return -1; }
    ssize_t (*real)(int, const void*, size_t, off_t) = (ssize_t (*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    return real(fd, p, n, off);
}
ssize_t pwrite64(int fd, const void* p, size_t n, off_t off) {
    if (off >= 1024 && shim_full(fd)) { errno = ENOSPC; return -1; }
    ssize_t (*real)(int, const void*, size_t, off_t) = (ssize_t (*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
    return real(fd, p, n, off);
}
