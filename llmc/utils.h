/*
 utils.h: small helpers shared by every program: checked allocation and file
 I/O, formatted error strings, and timing. Errors here are LOCAL: they fill a
 caller-provided message buffer (char err[ERRLEN]) and return non-zero, so the
 caller can turn them into one collective, clean exit on every rank (see
 comm_check_all in comm.h). Nothing here prints or exits on its own except
 the *_or_die helpers used for programming errors (out of memory).
*/
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <errno.h>
#include <math.h>

#define ERRLEN 512

/* Write a printf-style message into err (capacity errlen) and return 1. */
static inline int set_err(char* err, size_t errlen, const char* fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return 1;
}

/* malloc that exits with a message naming the request on failure (host memory). */
static inline void* malloc_or_die(size_t bytes, const char* what) {
    void* p = malloc(bytes > 0 ? bytes : 1);
    if (!p) {
        fprintf(stderr, "error: out of host memory allocating %zu bytes for %s\n", bytes, what);
        exit(1);
    }
    return p;
}

static inline void* calloc_or_die(size_t n, size_t size, const char* what) {
    void* p = calloc(n > 0 ? n : 1, size > 0 ? size : 1);
    if (!p) {
        fprintf(stderr, "error: out of host memory allocating %zu x %zu bytes for %s\n", n, size, what);
        exit(1);
    }
    return p;
}

/* Size of an open file in bytes (64-bit), or -1 on error. Restores position 0. */
static inline long long file_size_bytes(FILE* f) {
    if (fseeko(f, 0, SEEK_END) != 0) return -1;
    long long n = (long long)ftello(f);
    if (fseeko(f, 0, SEEK_SET) != 0) return -1;
    return n;
}

/* Wall-clock seconds from a monotonic clock. */
static inline double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Parse a whole string as a long integer / double; return 0 on success, 1 if
   the string is empty, has trailing junk, or overflows. */
static inline int parse_long(const char* s, long* out) {
    if (!s || !*s) return 1;
    char* end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0') return 1;
    *out = v;
    return 0;
}

static inline int parse_double(const char* s, double* out) {
    if (!s || !*s) return 1;
    char* end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v)) return 1;
    *out = v;
    return 0;
}

/* A "Key:   N kB" field of a /proc file in bytes: proc_field_bytes(
   "/proc/self/status", "VmRSS:") (VmHWM: the peak resident set), or
   ("/proc/meminfo", "MemAvailable:"); 0 if the file or the field is
   missing. The one /proc reader of the project (proc(5): the values are
   in kB = 1024 bytes). */
static inline unsigned long long proc_field_bytes(const char* path, const char* key) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    size_t k = strlen(key);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, k) == 0) { kb = strtoull(line + k, NULL, 10); break; }
    fclose(f);
    return kb * 1024ULL;
}

static inline size_t round_up(size_t x, size_t multiple) {
    return ((x + multiple - 1) / multiple) * multiple;
}

#endif /* LLMC_UTILS_H */
