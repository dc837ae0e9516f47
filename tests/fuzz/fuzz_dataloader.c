/*
 fuzz_dataloader.c: libFuzzer target for the token shard reader
 (llmc/dataloader.h): dataloader_init on one or two shard files, then
 dataloader_seek (as a resume does) and dataloader_next_batch.
 Input: 10 bytes of parameters, then the file bytes:
   [0] B = 1 + x%4   [1] T = 1 + x%8   [2] num_ranks = 1 + x%3
   [3] rank = x % num_ranks   [4] vocab_size: x%4 = 0: 50257, 1: 65536,
       else 1 + x  [5] next_batch calls = x%16
   [6] bit 7: seek before reading, to shard x&3 (2, 3 do not exist in a
       one- or two-shard set) and position [7]*3 (shuffled: dataloader_resume
       at epoch [5]>>4); bit 6: shuffled order (dataloader_set_shuffle, seed [7])
   [8..9] little-endian length of the first shard file; the rest of the
       input, if any, is a second shard file (shard_1)
 Invariants after each successful next_batch: ids in 0..vocab_size-1,
 targets[i] == inputs[i+1] within the rank's slice (within each sequence
 when shuffled), and the loader's next position leaves room for a global
 micro-batch in its shard. Then dataloader_read_seqs (the evaluation's
 reader) walks the split's sequences from the start, 1..B at a time: ids in
 range, targets[i] == inputs[i+1] within each sequence, and a read beyond
 dataloader_num_seqs is an error.
*/
#include "fuzz_common.h"
#include "llmc/dataloader.h"

static char p0[300], p1[300], pattern[300];
static void remove_shards(void) { unlink(p0); unlink(p1); }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 10) return 0;
    int B = 1 + data[0] % 4, T = 1 + data[1] % 8, N = 1 + data[2] % 3, r = data[3] % N;
    int vsel = data[4] % 4, V = vsel == 0 ? 50257 : vsel == 1 ? 65536 : 1 + data[4];
    int calls = data[5] % 16, seek = data[6] & 0x80, seek_shard = data[6] & 3;
    size_t seek_pos = (size_t)data[7] * 3;
    size_t n1 = (size_t)data[8] | ((size_t)data[9] << 8);
    const uint8_t* body = data + 10;
    size_t rest = size - 10;
    if (n1 > rest) n1 = rest;
    /* files named <base>_shard_0 / _shard_1 so one glob matches both */
    if (!p0[0]) {
        snprintf(p0, sizeof(p0), "%s_shard_0", fuzz_path(1));
        snprintf(p1, sizeof(p1), "%s_shard_1", fuzz_path(1));
        snprintf(pattern, sizeof(pattern), "%s_shard_*", fuzz_path(1));
        atexit(remove_shards);
    }
    FILE* f = fopen(p0, "wb"); fwrite(body, 1, n1, f); fclose(f);
    unlink(p1);
    if (rest > n1) { f = fopen(p1, "wb"); fwrite(body + n1, 1, rest - n1, f); fclose(f); }
    DataLoader dl;
    char err[512] = "";
    if (dataloader_init(&dl, pattern, B, T, r, N, V, err, sizeof(err))) {
        FUZZ_CHECK(err[0] != 0);
        return 0;
    }
    FUZZ_CHECK(dl.num_shards == (rest > n1 ? 2 : 1));
    int shuffled = (data[6] & 0x40) != 0;
    if (shuffled) dataloader_set_shuffle(&dl, 1, data[7]);
    if (seek && shuffled) dataloader_resume(&dl, data[5] >> 4, seek_shard, seek_pos);
    else if (seek) dataloader_seek(&dl, seek_shard, seek_pos);
    size_t BT = (size_t)B * T, M = (size_t)N * BT;
    for (int i = 0; i < calls; i++) {
        err[0] = 0;
        if (dataloader_next_batch(&dl, err, sizeof(err))) { FUZZ_CHECK(err[0] != 0); break; }
        for (size_t k = 0; k < BT; k++) {
            FUZZ_CHECK(dl.inputs[k] >= 0 && dl.inputs[k] < V && dl.targets[k] >= 0 && dl.targets[k] < V);
            if (k + 1 < BT && (!shuffled || (k + 1) % (size_t)T != 0)) FUZZ_CHECK(dl.targets[k] == dl.inputs[k + 1]);
        }
        FUZZ_CHECK(dl.current_shard >= 0 && dl.current_shard < dl.num_shards);
        if (shuffled) FUZZ_CHECK(dl.current_position / (size_t)T + (size_t)N * B <= (dl.shard_ntok[dl.current_shard] - 1) / (size_t)T);
        else FUZZ_CHECK(dl.current_position + M + 1 <= dl.shard_ntok[dl.current_shard]);
    }
    /* the evaluation's reader: sequences in file order from the start,
       n = 1..B at a time, up to (and one read beyond) the split's count */
    size_t S = dataloader_num_seqs(&dl), first = 0;
    for (int i = 0; i < calls && first <= S; i++) {
        int n = 1 + (data[7] + i) % B;
        err[0] = 0;
        int rc = dataloader_read_seqs(&dl, first, n, err, sizeof(err));
        if (first + (size_t)n > S) { FUZZ_CHECK(rc == 1 && err[0] != 0); break; }
        if (rc) { FUZZ_CHECK(err[0] != 0); break; }   /* a token id >= vocab_size in a shard loaded now */
        for (size_t k = 0; k < (size_t)n * T; k++) {
            FUZZ_CHECK(dl.inputs[k] >= 0 && dl.inputs[k] < V && dl.targets[k] >= 0 && dl.targets[k] < V);
            if ((k + 1) % (size_t)T != 0) FUZZ_CHECK(dl.targets[k] == dl.inputs[k + 1]);
        }
        first += (size_t)n;
    }
    dataloader_free(&dl);
    return 0;
}
