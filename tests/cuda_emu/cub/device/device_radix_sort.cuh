/* tests/cuda_emu/cub/device/device_radix_sort.cuh: CUB's DeviceRadixSort::
   SortPairs on the emulated device (issue 47): a stable sort by the key
   bits [begin_bit, end_bit) on the stream's worker. The size query (temp
   NULL) asks for n * 8 + 256 bytes; the call checks that the temporary
   storage, keys and values are device memory of the sizes used. */
#ifndef LLMC_CUDA_EMU_CUB_SORT_H
#define LLMC_CUDA_EMU_CUB_SORT_H
#include "../../cuda_runtime.h"
namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* kin, K* kout, const V* vin, V* vout, int n,
                                 int begin_bit = 0, int end_bit = (int)sizeof(K) * 8, cudaStream_t s = 0) {
        size_t need = (size_t)n * 8 + 256;
        if (!temp) { temp_bytes = need; return cudaSuccess; }
        const char* call = "cub::DeviceRadixSort::SortPairs";
        size_t off = 0, sz = 0;
        if (temp_bytes < need || emu::mem_kind(temp, &off, &sz) != emu::MEM_DEVICE || off + temp_bytes > sz)
            emu::fail("%s: temporary storage of %zu bytes (needs %zu) is not inside a device allocation", call, temp_bytes, need);
        const void* ps[4] = {kin, kout, vin, vout};
        size_t bs[4] = {sizeof(K), sizeof(K), sizeof(V), sizeof(V)};
        for (int i = 0; i < 4; i++)
            if (n > 0 && (emu::mem_kind(ps[i], &off, &sz) != emu::MEM_DEVICE || off + (size_t)n * bs[i] > sz))
                emu::fail("%s: argument %d (%d elements) is not inside a device allocation", call, i + 3, n);
        emu::enqueue(s, [=] {
            std::vector<int> idx((size_t)n);
            for (int i = 0; i < n; i++) idx[(size_t)i] = i;
            unsigned long long mask = (end_bit - begin_bit >= 64) ? ~0ull : ((1ull << (end_bit - begin_bit)) - 1);
            auto key = [&](int i) { return ((unsigned long long)kin[i] >> begin_bit) & mask; };
            std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return key(a) < key(b); });
            std::vector<K> k2((size_t)n);
            std::vector<V> v2((size_t)n);
            for (int i = 0; i < n; i++) { k2[(size_t)i] = kin[idx[(size_t)i]]; v2[(size_t)i] = vin[idx[(size_t)i]]; }
            std::copy(k2.begin(), k2.end(), kout);
            std::copy(v2.begin(), v2.end(), vout);
        });
        return cudaSuccess;
    }
};
} /* namespace cub */
#endif
