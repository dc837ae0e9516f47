/*
 rand.h: a small seeded random number generator for initialisation and
 sampling: xoshiro256** (Blackman & Vigna, 2018) seeded through splitmix64
 from (seed, stream), so that every tensor has its own reproducible stream
 independent of the rank count. rng_normal uses the Box-Muller transform.
*/
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <stdint.h>
#include <math.h>

typedef struct { uint64_t s[4]; int has_spare; double spare; } Rng;

static inline uint64_t splitmix64(uint64_t* x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Seed the generator from a seed and a stream number (e.g. tensor index). */
static inline void rng_seed(Rng* r, unsigned long long seed, unsigned long long stream) {
    uint64_t x = (uint64_t)seed * 0x100000001B3ULL ^ ((uint64_t)stream + 0x632BE59BD9B4E019ULL);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    r->has_spare = 0;
    r->spare = 0.0;
}

static inline uint64_t rng_next(Rng* r) {
    uint64_t* s = r->s;
    uint64_t result = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double rng_uniform(Rng* r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Standard normal sample (Box-Muller, both values used). */
static inline float rng_normal(Rng* r) {
    if (r->has_spare) { r->has_spare = 0; return (float)r->spare; }
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    r->spare = rad * sin(th);
    r->has_spare = 1;
    return (float)(rad * cos(th));
}

#endif /* LLMC_RAND_H */
