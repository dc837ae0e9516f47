/*
 fuzz_state.c: libFuzzer target for the training-state reader of
 llmc/state.h. The input is a state file (format: llmc/state.h). It is read
 with state_read_header, then loaded with state_load into the tiny model on
 one rank at zero_stage 0 and as rank 1 of 3 at zero_stage 3 (fuzz_common.h).
 Invariants after a successful load: the header fields are in range and the
 file size matches them; every held Adam m is finite, every held v finite
 and >= 0; with a master section the params are finite.
*/
#define FUZZ_WITH_MODEL
#include "fuzz_common.h"
#include "llmc/state.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_models_init();
    fuzz_write(0, data, size);
    char err[ERRLEN] = "";
    TrainState s;
    int bad_header = state_read_header(fuzz_path(0), &s, err, ERRLEN);
    if (bad_header) FUZZ_CHECK(err[0] != 0);
    else {
        FUZZ_CHECK(s.step >= 0 && s.num_parameters > 0 && (s.has_master == 0 || s.has_master == 1));
        FUZZ_CHECK((long long)size == STATE_HEADER_BYTES + 4LL * s.num_parameters * (2 + s.has_master));
        FUZZ_CHECK(s.data_shard >= 0 && s.data_shard < s.data_num_shards && s.data_position <= s.data_num_tokens);
    }
    for (int i = 0; i < 2; i++) {
        GPT2* m = &fuzz_models[i].model;
        err[0] = 0;
        int rc = state_load(m, fuzz_path(0), &s, err, ERRLEN);
        if (bad_header) FUZZ_CHECK(rc != 0);
        if (rc) { FUZZ_CHECK(err[0] != 0); continue; }
        size_t n = zero_held_elements(&m->plan, ZB_OPT);
        for (size_t k = 0; k < n; k++) {
            FUZZ_CHECK(isfinite(m->engine.adam_m[k]));
            FUZZ_CHECK(isfinite(m->engine.adam_v[k]) && m->engine.adam_v[k] >= 0.0f);
        }
        if (s.has_master) {
            size_t np = zero_held_elements(&m->plan, ZB_PARAMS);
            for (size_t k = 0; k < np; k++) FUZZ_CHECK(isfinite(m->engine.params[k]));
        }
    }
    return 0;
}
