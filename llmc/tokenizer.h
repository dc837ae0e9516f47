/*
 * tokenizer.h: GPT-2 token id -> bytes, read from llm.c's tokenizer decode
 * file, to print generated samples. (Encoding text is done offline by
 * dev/data/tokenize.mjs.)
 *
 * File format (llm.c): a header of 256 int32 little-endian values,
 *   [0] = 20240328 (magic), [1] = version (1 or 2), [2] = vocab_size,
 *   [3] = eot token id (version 2 only; version 1 implies 50256),
 * then for each id 0 .. vocab_size-1: one uint8 length L (1..255) followed by
 * the L raw bytes of the token (a token may be part of a UTF-8 character).
 * The file must end exactly after the last token.
 *
 * Samples are printed through a Utf8Stream (below): whole UTF-8 characters
 * only, the bytes of a character split over tokens held until complete.
 *
 * Errors: tokenizer_init returns 1 with ONE line in err (when err != NULL and
 * errlen > 0) naming the file, the value and the rule it broke.
 */
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_HEADER_BYTES 1024

typedef struct Tokenizer {
    uint32_t vocab_size;  /* number of token ids */
    uint32_t eot_token;   /* <|endoftext|> id */
    int init_ok;          /* 1 after a successful tokenizer_init */
    char* blob;           /* each token's bytes followed by a NUL */
    uint32_t* offset;     /* vocab_size offsets of the tokens into blob */
    uint8_t* length;      /* vocab_size byte lengths (1..255) */
} Tokenizer;

static inline int tok_errf_(char* err, size_t errlen, const char* fmt, ...) {
    if (err == NULL || errlen == 0) return 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 1;
}

/* tokenizer_free: releases what tokenizer_init allocated and zeroes t; safe on
 * a zeroed or already freed Tokenizer. */
static inline void tokenizer_free(Tokenizer* t) {
    if (t == NULL) return;
    free(t->blob);
    free(t->offset);
    free(t->length);
    memset(t, 0, sizeof(*t));
}

/* The whole decode file at `path` into a new buffer (*buf, *size bytes):
 * a regular file of 1024 bytes to 4 GiB that reads completely. 0, or 1
 * with err (nothing allocated). */
static inline int tokenizer_read_file_(const char* path, unsigned char** buf, unsigned long long* size, char* err, size_t errlen) {
    struct stat st;
    if (path == NULL || stat(path, &st) != 0) return tok_errf_(err, errlen, "tokenizer: cannot open tokenizer file %s", path ? path : "(null)");
    if (!S_ISREG(st.st_mode)) return tok_errf_(err, errlen, "tokenizer: %s is not a regular file", path);
    *size = (unsigned long long)st.st_size;
    if (*size < TOKENIZER_HEADER_BYTES)
        return tok_errf_(err, errlen, "tokenizer: %s has %llu bytes, less than the %d-byte header", path, *size, TOKENIZER_HEADER_BYTES);
    if (*size > (1ull << 32)) return tok_errf_(err, errlen, "tokenizer: %s has %llu bytes, more than 4 GiB", path, *size);
    FILE* f = fopen(path, "rb");
    if (f == NULL) return tok_errf_(err, errlen, "tokenizer: cannot open tokenizer file %s", path);
    *buf = (unsigned char*)malloc((size_t)*size);
    if (*buf == NULL) {
        fclose(f);
        return tok_errf_(err, errlen, "tokenizer: out of memory reading %s (%llu bytes)", path, *size);
    }
    size_t got = fread(*buf, 1, (size_t)*size, f);
    fclose(f);
    if (got != (size_t)*size) {
        free(*buf); *buf = NULL;
        return tok_errf_(err, errlen, "tokenizer: read %zu of the %llu bytes of %s", got, *size, path);
    }
    return 0;
}

/* The header of a decode file in buf: magic, version 1 or 2, vocab_size in
 * 1..2^24, eot (version 2) below it. 0 with *V, *eot, or 1 with err. */
static inline int tokenizer_check_header_(const unsigned char* buf, const char* path, uint32_t* V, uint32_t* eot, char* err, size_t errlen) {
    int32_t h[4];
    for (int i = 0; i < 4; i++) {
        const unsigned char* p = buf + 4 * i;
        h[i] = (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
    }
    if (h[0] != TOKENIZER_MAGIC)
        return tok_errf_(err, errlen, "tokenizer: %s has magic %d, expected %d (llm.c tokenizer file)", path, (int)h[0], TOKENIZER_MAGIC);
    if (h[1] != 1 && h[1] != 2) return tok_errf_(err, errlen, "tokenizer: %s has version %d, expected 1 or 2", path, (int)h[1]);
    if (h[2] < 1 || h[2] > (1 << 24)) return tok_errf_(err, errlen, "tokenizer: %s has vocab_size %d, must be in 1..16777216", path, (int)h[2]);
    *V = (uint32_t)h[2];
    *eot = 50256;
    if (h[1] == 2) {
        if (h[3] < 0 || (uint32_t)h[3] >= *V)
            return tok_errf_(err, errlen, "tokenizer: %s has eot token %d, must be in 0..vocab_size-1 = %u", path, (int)h[3], *V - 1);
        *eot = (uint32_t)h[3];
    }
    return 0;
}

/* Pass 1 over the V length-prefixed tokens after the header: every length
 * in 1..255, none past the end, no trailing bytes. 0 with *total (the bytes
 * of the NUL-terminated strings), or 1 with err. */
static inline int tokenizer_scan_(const unsigned char* buf, unsigned long long size, uint32_t V, const char* path, size_t* total,
                                  char* err, size_t errlen) {
    size_t pos = TOKENIZER_HEADER_BYTES;
    *total = 0;
    for (uint32_t i = 0; i < V; i++) {
        if (pos >= (size_t)size)
            return tok_errf_(err, errlen, "tokenizer: %s is truncated: it ends (%llu bytes) before the length byte of token %u of %u",
                             path, size, i, V);
        unsigned L = buf[pos];
        if (L == 0) return tok_errf_(err, errlen, "tokenizer: %s: token %u has length 0 (at byte %zu), must be 1..255", path, i, pos);
        if (pos + 1 + L > (size_t)size)
            return tok_errf_(err, errlen, "tokenizer: %s is truncated: token %u needs %u bytes at byte %zu but the file has %llu bytes",
                             path, i, L, pos + 1, size);
        pos += 1 + L;
        *total += L + 1;
    }
    if (pos != (size_t)size)
        return tok_errf_(err, errlen, "tokenizer: %s has %llu trailing bytes after its %u tokens (file %llu bytes, tokens end at %zu)",
                         path, size - (unsigned long long)pos, V, size, pos);
    return 0;
}

/* tokenizer_init: reads the decode file at `path` (format above).
 * Checks: file opens, >= 1024 bytes, magic 20240328, version 1 or 2,
 * 1 <= vocab_size <= 16777216, eot < vocab_size (version 2), every length
 * byte > 0, the file not truncated and without trailing bytes.
 * Returns 0 (t->init_ok = 1), or 1 with a one-line err naming the file,
 * leaving t zeroed and nothing allocated. */
static inline int tokenizer_init(Tokenizer* t, const char* path, char* err, size_t errlen) {
    memset(t, 0, sizeof(*t));
    unsigned char* buf = NULL;
    unsigned long long size = 0;
    uint32_t V = 0, eot = 0;
    size_t total = 0;
    if (tokenizer_read_file_(path, &buf, &size, err, errlen)) return 1;
    if (tokenizer_check_header_(buf, path, &V, &eot, err, errlen) || tokenizer_scan_(buf, size, V, path, &total, err, errlen)) {
        free(buf);
        return 1;
    }
    /* pass 2: copy into NUL-terminated strings */
    t->blob = (char*)malloc(total);
    t->offset = (uint32_t*)malloc((size_t)V * sizeof(uint32_t));
    t->length = (uint8_t*)malloc((size_t)V);
    if (t->blob == NULL || t->offset == NULL || t->length == NULL) {
        free(buf);
        tokenizer_free(t);
        tok_errf_(err, errlen, "tokenizer: out of memory for the %u tokens of %s", V, path);
        return 1;
    }
    size_t pos = TOKENIZER_HEADER_BYTES, o = 0;
    for (uint32_t i = 0; i < V; i++) {
        unsigned L = buf[pos];
        t->offset[i] = (uint32_t)o;
        t->length[i] = (uint8_t)L;
        memcpy(t->blob + o, buf + pos + 1, L);
        t->blob[o + L] = '\0';
        o += L + 1;
        pos += 1 + L;
    }
    free(buf);
    t->vocab_size = V;
    t->eot_token = eot;
    t->init_ok = 1;
    return 0;
}

/* tokenizer_decode: the bytes of token `id` as a NUL-terminated string (a
 * token holding a 0x00 byte reads as shorter; tokenizer_token_length gives the
 * true length). NULL if the tokenizer is not initialized or id >= vocab_size.
 * The pointer stays valid until tokenizer_free. */
static inline const char* tokenizer_decode(const Tokenizer* t, uint32_t id) {
    if (t == NULL || !t->init_ok || id >= t->vocab_size) return NULL;
    return t->blob + t->offset[id];
}

/* tokenizer_token_length: number of bytes (1..255) of token id, 0 if invalid. */
static inline size_t tokenizer_token_length(const Tokenizer* t, uint32_t id) {
    if (t == NULL || !t->init_ok || id >= t->vocab_size) return 0;
    return t->length[id];
}

/* tokenizer_print_safe: writes the bytes of token id to out, except when the
 * token is a single byte that is neither printable nor whitespace (a control
 * byte, or a lone byte of a multi-byte UTF-8 character), or id is invalid. */
static inline void tokenizer_print_safe(const Tokenizer* t, uint32_t id, FILE* out) {
    const char* s = tokenizer_decode(t, id);
    if (s == NULL) return;
    size_t L = t->length[id];
    if (L == 1) {
        unsigned char c = (unsigned char)s[0];
        if (!(isprint(c) || isspace(c))) return;
    }
    fwrite(s, 1, L, out);
}

/* Printing a stream of tokens as whole UTF-8 characters. A GPT-2 token may
 * end inside a multi-byte character (byte-level BPE), so the bytes of a
 * character can arrive in two or more tokens. Utf8Stream holds the bytes of
 * an incomplete character until later bytes complete it, and writes:
 *   - every complete, well-formed character (RFC 3629: no overlong forms, no
 *     surrogates, nothing above U+10FFFF) as it is;
 *   - U+FFFD (EF BF BD) for each ill-formed byte sequence, as the Unicode
 *     standard's "maximal subpart" practice does (a byte that cannot continue
 *     the held bytes ends them with one U+FFFD and starts anew);
 *   - nothing for ASCII control bytes other than tab, newline and carriage
 *     return (so the output stays text that grep and editors accept).
 * utf8_stream_finish writes U+FFFD for bytes still held (a character that
 * never completed) and resets the stream. */
typedef struct {
    unsigned char held[4];  /* bytes of the incomplete character so far */
    int nheld;              /* 0..3 */
    int need;               /* total bytes of the character held[0] starts */
} Utf8Stream;

static inline void utf8_stream_init(Utf8Stream* s) { memset(s, 0, sizeof(*s)); }

/* Is byte c allowed at position pos (1..3) of a character starting with lead? */
static inline int utf8_continues_(unsigned char lead, int pos, unsigned char c) {
    if (pos == 1) {
        if (lead == 0xE0) return c >= 0xA0 && c <= 0xBF;  /* no overlong 3-byte forms */
        if (lead == 0xED) return c >= 0x80 && c <= 0x9F;  /* no surrogates */
        if (lead == 0xF0) return c >= 0x90 && c <= 0xBF;  /* no overlong 4-byte forms */
        if (lead == 0xF4) return c >= 0x80 && c <= 0x8F;  /* nothing above U+10FFFF */
    }
    return c >= 0x80 && c <= 0xBF;
}

static inline void utf8_replacement_(FILE* out) { fwrite("\xEF\xBF\xBD", 1, 3, out); }

/* Feed n bytes; writes what is complete to out, holds the rest. */
static inline void utf8_stream_write(Utf8Stream* s, const unsigned char* p, size_t n, FILE* out) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (s->nheld > 0) {
            if (utf8_continues_(s->held[0], s->nheld, c)) {
                s->held[s->nheld++] = c;
                if (s->nheld == s->need) { fwrite(s->held, 1, (size_t)s->need, out); s->nheld = 0; }
                continue;
            }
            utf8_replacement_(out); /* the held bytes can never complete */
            s->nheld = 0;
        }
        if (c < 0x80) {
            if (c >= 0x20 || c == '\t' || c == '\n' || c == '\r') fputc(c, out);
            continue;
        }
        int need = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (need == 0) { utf8_replacement_(out); continue; } /* a lone continuation byte, C0, C1, F5..FF */
        s->held[0] = c; s->nheld = 1; s->need = need;
    }
}

/* End of the stream: an incomplete character becomes one U+FFFD. */
static inline void utf8_stream_finish(Utf8Stream* s, FILE* out) {
    if (s->nheld > 0) utf8_replacement_(out);
    s->nheld = 0;
}

/* tokenizer_print_utf8: the bytes of token id into the stream s (whole
 * characters only, see Utf8Stream); nothing for an invalid id. */
static inline void tokenizer_print_utf8(const Tokenizer* t, uint32_t id, Utf8Stream* s, FILE* out) {
    const char* b = tokenizer_decode(t, id);
    if (b == NULL) return;
    utf8_stream_write(s, (const unsigned char*)b, t->length[id], out);
}

#endif /* LLMC_TOKENIZER_H */
