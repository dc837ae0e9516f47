/*
 quant.h: block quantization of a unit's shard for the quantized stage-3
 weight all-gather (ZeRO++'s qwZ: Wang et al. 2023, "ZeRO++: Extremely
 Efficient Collective Communication for Giant Model Training",
 arXiv:2306.10209, section 3.1). No MPI, no floatX: the elements are fp32
 or bf16 bits (eb = 4 or 2 bytes), so the host collectives, both CPU
 programs and the unit test (tests/unit/test_quant.c) share one
 implementation.

 Symmetric int8 (qwZ, qgZ) or int4 (qgZ), one fp32 scale per block, with
 Qmax = 127 (int8) or 7 (int4):
   scale = amax / Qmax (amax = max |x| over the block, in fp32),
   q     = round_to_nearest_even(x / scale), in [-Qmax, Qmax] (0 when scale = 0),
   x'    = q * scale, rounded once to the element type.
 So |x' - x| <= scale / 2 = amax / (2 Qmax) per element (amax/254, amax/14),
 plus one rounding of the product into the element type (fp32: 2^-24
 relative; bf16: 2^-8), and the error of x / scale's own rounding (2^-24
 relative of |q| <= Qmax). At the edges of the range: a block whose
 amax / Qmax is below FLT_MIN gets that quotient rounded up to a multiple
 of 2^-149 (quant_tiny_scale: the bound becomes scale / 2 <= amax / (2
 Qmax) + 2^-150, where a plain quotient would underflow and decode the
 block to zeros), and a product that overflows the element type (amax
 near FLT_MAX or the bf16 maximum) is clamped to its largest finite value
 (quant_finite): every finite block decodes finite and within the bound. int4 values are packed two per byte, element i
 in the low nibble of byte i/2 when i is even, two's complement.

 Blocks never straddle a tensor: a unit (zero/plan.h) is a run of tensors,
 each starting at an offset of its unit (seg[0..nseg), seg[0] = 0; the
 last runs to the unit's padded end, the alignment padding after a tensor
 belonging to it). A rank's shard [lo, hi) of the unit is cut at every
 tensor start inside it and every `block` elements after one, so a block
 holds one tensor's values (a LayerNorm gain of ~1 never shares a scale
 with attention weights of ~0.02). The last block of a piece may be partial.

 A rank's record (what crosses the wire): nbmax fp32 scales (the most
 blocks any rank of the group has in this unit; the unused tail is zero)
 then `shard` int8 values (shard / 2 bytes of int4): quant_record_bytes. Shards are multiples of 16
 elements (ZERO_ALIGN), so a record is a whole number of 4-byte words.
*/
#ifndef LLMC_QUANT_H
#define LLMC_QUANT_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "bf16.h"

/* The block layout of one unit (see above). */
typedef struct {
    const size_t* seg;   /* tensor start offsets within the unit, increasing, seg[0] = 0 */
    int nseg;
    size_t padded;       /* the unit's padded size (elements) */
    size_t shard;        /* elements per rank: padded / N */
    size_t block;        /* elements per scale, >= 1 */
    int bits;            /* 8 (int8) or 4 (int4) */
    const char* const* names; /* the tensors' names (nseg entries; error messages), or NULL */
} QuantLayout;

/* The blocks of rank q's shard [q*shard, (q+1)*shard) under layout Q, in
   order: quant_block_next fills [*start, *end) (relative to the shard) and
   returns 1, or returns 0 after the last. One walk for every user. */
typedef struct { const QuantLayout* Q; size_t lo, hi, s, b; int k; } QuantBlocks;
static inline QuantBlocks quant_blocks_of(const QuantLayout* Q, int q) {
    QuantBlocks it = {Q, (size_t)q * Q->shard, (size_t)q * Q->shard + Q->shard, 0, 0, -1};
    if (Q->block < 1) it.k = Q->nseg;   /* no blocks (a layout of a feature that is off) */
    return it;
}
static inline int quant_block_next(QuantBlocks* it, size_t* start, size_t* end) {
    const QuantLayout* Q = it->Q;
    while (it->s >= it->b) {   /* the next tensor's piece inside the shard */
        if (++it->k >= Q->nseg) return 0;
        size_t a = Q->seg[it->k], b = it->k + 1 < Q->nseg ? Q->seg[it->k + 1] : Q->padded;
        if (b <= it->lo || a >= it->hi) { it->s = it->b = 0; continue; }
        it->s = a < it->lo ? it->lo : a;
        it->b = b > it->hi ? it->hi : b;
    }
    *start = it->s - it->lo;
    it->s = it->s + Q->block < it->b ? it->s + Q->block : it->b;
    *end = it->s - it->lo;
    return 1;
}

/* Blocks of rank q's shard; when starts != NULL, their first elements
   (relative to the shard) are written there in order. */
static inline size_t quant_blocks(const QuantLayout* Q, int q, size_t* starts) {
    QuantBlocks it = quant_blocks_of(Q, q);
    size_t nb = 0, s, e;
    while (quant_block_next(&it, &s, &e)) {
        if (starts) starts[nb] = s;
        nb++;
    }
    return nb;
}

/* The most blocks of any rank's shard (N ranks): the scales every record
   reserves. */
static inline size_t quant_max_blocks(const QuantLayout* Q, int N) {
    size_t m = 0;
    for (int q = 0; q < N; q++) {
        size_t b = quant_blocks(Q, q, NULL);
        if (b > m) m = b;
    }
    return m;
}

/* Bytes of one rank's record: 4 x nbmax scales + shard values of `bits`
   bits (shard even for int4). */
static inline size_t quant_record_bytes(size_t nbmax, size_t shard, int bits) { return 4 * nbmax + (bits == 4 ? shard / 2 : shard); }

static inline void quant_put(uint8_t* v, int bits, size_t i, int q) {
    if (bits == 8) { ((int8_t*)v)[i] = (int8_t)q; return; }
    uint8_t n = (uint8_t)(q & 0xF), *b = v + i / 2;
    *b = (i & 1) ? (uint8_t)((*b & 0x0F) | (n << 4)) : (uint8_t)((*b & 0xF0) | n);
}
static inline int quant_get(const uint8_t* v, int bits, size_t i) {
    if (bits == 8) return ((const int8_t*)v)[i];
    int n = (v[i / 2] >> ((i & 1) * 4)) & 0xF;
    return n >= 8 ? n - 16 : n;
}

static inline float quant_load(const void* x, int eb, size_t i) {
    return eb == 4 ? ((const float*)x)[i] : bf16_bits_to_float(((const uint16_t*)x)[i]);
}

/* The scale of a block whose amax / Qmax is below FLT_MIN (2^-126: the
   quotient would be subnormal, or 0 when amax < Qmax x 2^-150, and a block
   of tiny values would decode to zeros): the quotient rounded UP to a
   multiple of 2^-149, which is exact (every float below 2^-126 is such a
   multiple, and so is amax). Then scale >= amax / Qmax, so |x / scale| <=
   Qmax and |x' - x| <= scale / 2 <= amax / (2 Qmax) + 2^-150. */
static inline float quant_tiny_scale(float amax, float qmax) {
    double k = ceil(ldexp((double)amax, 149) / (double)qmax);   /* exact: amax x 2^149 is an integer below 2^30 */
    return (float)ldexp(k, -149);
}

/* A decoded value q x scale that overflowed the element type (a block whose
   amax is within Qmax x 2^-24 of the type's largest finite value: 127 x
   fl(FLT_MAX / 127) > FLT_MAX) is clamped to the largest finite value of
   its sign, which is within scale / 2 of x: finite in, finite out. */
static inline float quant_finite(float y) { return isinf(y) ? copysignf(FLT_MAX, y) : y; }
static inline uint16_t quant_finite_bf16(uint16_t b) { return (b & 0x7FFF) == 0x7F80 ? (uint16_t)((b & 0x8000) | 0x7F7F) : b; }

/* Quantize rank q's shard x (Q->shard elements of eb bytes) into rec
   (quant_record_bytes(nbmax, shard) bytes). Returns 0, or 1 + the index
   within the shard of the first non-finite element (nothing meaningful is
   written then: the caller ends the run naming the tensor). */
static inline size_t quant_encode(const QuantLayout* Q, int q, size_t nbmax, const void* x, int eb, void* rec) {
    float* scales = (float*)rec;
    uint8_t* v = (uint8_t*)rec + 4 * nbmax;
    const float qmax = Q->bits == 4 ? 7.0f : 127.0f;
    QuantBlocks it = quant_blocks_of(Q, q);
    size_t nb = 0, s, e;
    while (quant_block_next(&it, &s, &e)) {
        float amax = 0.0f;
        for (size_t i = s; i < e; i++) {
            float f = quant_load(x, eb, i);
            if (!isfinite(f)) return 1 + i;
            float m = fabsf(f);
            amax = m > amax ? m : amax;
        }
        float scale = amax / qmax;
        if (amax > 0.0f && !(scale >= FLT_MIN)) scale = quant_tiny_scale(amax, qmax);
        scales[nb++] = scale;
        for (size_t i = s; i < e; i++) {
            float r = scale > 0.0f ? nearbyintf(quant_load(x, eb, i) / scale) : 0.0f;
            r = r > qmax ? qmax : r < -qmax ? -qmax : r;
            quant_put(v, Q->bits, i, (int)r);
        }
    }
    for (size_t j = nb; j < nbmax; j++) scales[j] = 0.0f;
    return 0;
}

/* Dequantize rank q's record into out (Q->shard elements of eb bytes):
   out[i] = q_i * scale of its block, rounded once to the element type. */
static inline void quant_decode(const QuantLayout* Q, int q, size_t nbmax, const void* rec, void* out, int eb) {
    const float* scales = (const float*)rec;
    const uint8_t* v = (const uint8_t*)rec + 4 * nbmax;
    QuantBlocks it = quant_blocks_of(Q, q);
    size_t nb = 0, s, e;
    while (quant_block_next(&it, &s, &e)) {
        float scale = scales[nb++];
        if (eb == 4)
            for (size_t i = s; i < e; i++) ((float*)out)[i] = quant_finite((float)quant_get(v, Q->bits, i) * scale);
        else
            for (size_t i = s; i < e; i++) ((uint16_t*)out)[i] = quant_finite_bf16(bf16_bits_from_float((float)quant_get(v, Q->bits, i) * scale));
    }
}

#endif /* LLMC_QUANT_H */
