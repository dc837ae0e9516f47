/*
 standalone.c: a deterministic mutation fuzzer for the targets in tests/fuzz,
 for machines without clang/libFuzzer. Link it with one target:
   gcc -fsanitize=address,undefined -I. tests/fuzz/standalone.c tests/fuzz/fuzz_state.c ...
 Usage: ./fuzz_x [-runs=N] [-max_total_time=S] [-seed=K] corpus_dir_or_file...
 Runs every seed, then N mutants (or until S seconds): each mutant is a seed
 with 1-8 mutations drawn from a fixed xorshift stream: bit flip, random
 byte, interesting byte (0, 1, 0x7f, 0x80, 0xff), interesting int32 or int64
 (0, 1, -1, INT_MIN/MAX, the file magics, sizes), truncation, extension,
 chunk duplication. A crash or failed invariant ends the run (sanitizer
 report, non-zero exit) after writing the input to crash-standalone.bin.
*/
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static uint64_t rs = 88172645463325252ULL;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

typedef struct { uint8_t* d; size_t n; } Buf;
static Buf* seeds; static int nseeds, capseeds;

static void add_file(const char* p) {
    FILE* f = fopen(p, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    Buf b = {(uint8_t*)malloc(n > 0 ? n : 1), (size_t)(n > 0 ? n : 0)};
    if (n > 0 && fread(b.d, 1, n, f) != (size_t)n) { fclose(f); free(b.d); return; }
    fclose(f);
    if (nseeds == capseeds) { capseeds = capseeds ? 2 * capseeds : 16; seeds = (Buf*)realloc(seeds, capseeds * sizeof(Buf)); }
    seeds[nseeds++] = b;
}

static void add_path(const char* p) {
    struct stat st;
    if (stat(p, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) { add_file(p); return; }
    DIR* d = opendir(p); struct dirent* e;
    char q[4096];
    while (d && (e = readdir(d))) { if (e->d_name[0] == '.') continue; snprintf(q, sizeof(q), "%s/%s", p, e->d_name); add_file(q); }
    if (d) closedir(d);
}

static uint8_t* cur; static size_t curn;
static void run_one(const uint8_t* d, size_t n) {
    cur = (uint8_t*)d; curn = n;
    FILE* f = fopen("crash-standalone.bin", "wb"); /* overwritten each run: left behind on a crash */
    if (f) { fwrite(d, 1, n, f); fclose(f); }
    LLVMFuzzerTestOneInput(d, n);
}

int main(int argc, char** argv) {
    long runs = 100000, max_time = 0;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "-runs=", 6)) runs = atol(argv[i] + 6);
        else if (!strncmp(argv[i], "-max_total_time=", 16)) max_time = atol(argv[i] + 16);
        else if (!strncmp(argv[i], "-seed=", 6)) rs ^= (uint64_t)atoll(argv[i] + 6) * 0x9E3779B97F4A7C15ULL;
        else if (argv[i][0] != '-') add_path(argv[i]);
    }
    if (nseeds == 0) { uint8_t z = 0; run_one(&z, 0); fprintf(stderr, "no seeds\n"); return 0; }
    for (int i = 0; i < nseeds; i++) run_one(seeds[i].d, seeds[i].n);
    static const int64_t interesting[] = {0, 1, -1, 2, 3, 4, 7, 8, 16, 255, 256, 1023, 1024, 65535, 65536, 0x7fffffff, -0x7fffffffLL - 1,
                                          20240326, 20240328, 20240520, 20240612, 50257, 50304, 300, 0x7fffffffffffffffLL};
    time_t t0 = time(NULL);
    long r;
    uint8_t* buf = NULL; size_t cap = 0;
    for (r = 0; r < runs; r++) {
        if (max_time > 0 && time(NULL) - t0 >= max_time) break;
        Buf* s = &seeds[rnd() % nseeds];
        size_t n = s->n;
        if (cap < n + 4096) { cap = n + 4096; buf = (uint8_t*)realloc(buf, cap); }
        memcpy(buf, s->d, n);
        int k = 1 + (int)(rnd() % 8);
        for (int j = 0; j < k; j++) {
            size_t pos = n ? rnd() % n : 0;
            switch (rnd() % 9) {
                case 0: if (n) buf[pos] ^= (uint8_t)(1u << (rnd() % 8)); break;
                case 1: if (n) buf[pos] = (uint8_t)rnd(); break;
                case 2: { static const uint8_t v[5] = {0, 1, 0x7f, 0x80, 0xff}; if (n) buf[pos] = v[rnd() % 5]; break; }
                case 3: { int32_t v = (int32_t)interesting[rnd() % (sizeof(interesting) / 8)]; pos &= ~(size_t)3; if (pos + 4 <= n) memcpy(buf + pos, &v, 4); break; }
                case 4: { int64_t v = interesting[rnd() % (sizeof(interesting) / 8)]; pos &= ~(size_t)7; if (pos + 8 <= n) memcpy(buf + pos, &v, 8); break; }
                case 5: n = n ? rnd() % n : 0; break;
                case 6: { size_t add = 1 + rnd() % 64; if (n + add <= cap) { for (size_t q = 0; q < add; q++) buf[n + q] = (uint8_t)rnd(); n += add; } break; }
                case 7: { if (n > 8) { size_t a = rnd() % n, len = 1 + rnd() % (n - a < 256 ? n - a : 256); if (n + len <= cap) { memcpy(buf + n, buf + a, len); n += len; } } break; }
                default: { if (n >= 4) { size_t w = (rnd() % (n / 4)) * 4; uint32_t v; memcpy(&v, buf + w, 4); v += (uint32_t)(rnd() % 33) - 16u; memcpy(buf + w, &v, 4); } break; }
            }
        }
        run_one(buf, n);
    }
    remove("crash-standalone.bin");
    free(buf);
    for (int i = 0; i < nseeds; i++) free(seeds[i].d);
    free(seeds);
    printf("standalone fuzzer: %d seeds, %ld mutants, %ld s, no crash\n", nseeds, r, (long)(time(NULL) - t0));
    return 0;
}
