/*
 fuzz_tokenizer.c: libFuzzer target for tokenizer_init (llmc/tokenizer.h).
 The input is a tokenizer decode file (magic 20240328). Invariants after a
 successful init: eot < vocab_size for a version-2 file (version 1
 implies eot 50256, whatever the vocabulary, as in llm.c), every token decodes to a string of at
 most its length (1..255) bytes, an id past the vocabulary decodes to NULL,
 and tokenizer_print_safe of every id runs.
*/
#include "fuzz_common.h"
#include "llmc/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_write(0, data, size);
    static FILE* sink = NULL;
    if (!sink) sink = fopen("/dev/null", "w");
    char err[512] = "";
    Tokenizer t;
    if (tokenizer_init(&t, fuzz_path(0), err, sizeof(err))) {
        FUZZ_CHECK(err[0] != 0 && !t.init_ok && t.blob == NULL);
        return 0;
    }
    int version = size >= 8 ? (int)(data[4] | (data[5] << 8) | (data[6] << 16) | ((uint32_t)data[7] << 24)) : -1;
    FUZZ_CHECK(t.init_ok && t.vocab_size >= 1 && (version == 1 || version == 2));
    FUZZ_CHECK(version == 2 ? t.eot_token < t.vocab_size : t.eot_token == 50256);
    for (uint32_t id = 0; id < t.vocab_size; id++) {
        const char* s = tokenizer_decode(&t, id);
        size_t L = tokenizer_token_length(&t, id);
        FUZZ_CHECK(s != NULL && L >= 1 && L <= 255 && strlen(s) <= L);
        tokenizer_print_safe(&t, id, sink);
    }
    FUZZ_CHECK(tokenizer_decode(&t, t.vocab_size) == NULL);
    tokenizer_free(&t);
    return 0;
}
