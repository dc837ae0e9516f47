/*
 fuzz_checkpoint.c: libFuzzer target for the llm.c model checkpoint reader
 of llmc/gpt.h. The input is a checkpoint file: gpt2_read_checkpoint_header
 validates it (magic 20240326, version 3 or 5, config, exact size); when its
 config is the tiny model's (fuzz_common.h), gpt2_load_checkpoint loads it
 on one rank at zero_stage 0 and as rank 1 of 3 at zero_stage 3.
 Invariants: a header that passes has a valid config and the file size it
 implies; after a successful load every held param is finite.
*/
#define FUZZ_WITH_MODEL
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_models_init();
    fuzz_write(0, data, size);
    char err[ERRLEN] = "";
    GPT2Config c;
    int version = 0;
    int bad_header = gpt2_read_checkpoint_header(fuzz_path(0), &c, &version, err, ERRLEN);
    if (bad_header) { FUZZ_CHECK(err[0] != 0); }
    else {
        FUZZ_CHECK(version == 3 || version == 5);
        FUZZ_CHECK(gpt2_config_check(&c, "fuzz", NULL, 0) == 0);
    }
    for (int i = 0; i < 2; i++) {
        GPT2* m = &fuzz_models[i].model;
        err[0] = 0;
        int rc = gpt2_load_checkpoint(m, fuzz_path(0), err, ERRLEN);
        if (bad_header) FUZZ_CHECK(rc != 0);
        if (rc) { FUZZ_CHECK(err[0] != 0); continue; }
        FUZZ_CHECK(memcmp(&c, &fuzz_tiny_config, sizeof(c)) == 0);
        size_t np = zero_held_elements(&m->plan, ZB_PARAMS);
        for (size_t k = 0; k < np; k++) FUZZ_CHECK(isfinite(m->engine.params[k]));
    }
    return 0;
}
