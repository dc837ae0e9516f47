/*
 tests/cuda_emu/emu_shared.h: __shared__ memory of the emulated device as one
 object per block (issue 47 item 2).

 `__shared__` is `__attribute__((section("emu_shared"))) static thread_local`
 (emu_kernel.h): each variable is one object per stream worker thread, and a
 worker runs one block at a time, so every thread (fiber) of a block sees the
 same object and no two running blocks share one. What the GPU also does and
 this header adds:

   - the static shared memory of each kernel, exactly: the emulated program's
     own symbol table (/proc/self/exe, ELF .symtab) lists every variable of
     section emu_shared with its size and enclosing function; the sizes of a
     kernel's variables are summed (kernel_static_smem(kernel pointer));
   - the limits (emu::launch, cudaFuncSetAttribute): static shared memory
     <= 48 KiB (ptxas refuses more); dynamic shared memory <= the kernel's
     cudaFuncAttributeMaxDynamicSharedMemorySize (default 48 KiB - static);
     that attribute + static <= 227 KiB (sharedMemPerBlockOptin);
   - garbage: before each block runs, the kernel's __shared__ variables are
     filled with 0xFF bytes (NaN in fp32 / bf16, -1 in integers), so a read
     before any thread of the block wrote shows as it would on a GPU, where
     shared memory holds whatever the previous block left.

 Not covered: __shared__ variables declared inside __device__ functions (they
 count for that function, not the calling kernel) and inside template
 kernels (g++ ignores the section attribute of a template's statics: no
 refill, no size); `extern __shared__` (dynamic shared memory as an array) is
 not emulated; the project uses neither. Without a symbol table (a stripped
 binary) nothing is sized or refilled and one note says so.
*/
#ifndef LLMC_CUDA_EMU_SHARED_H
#define LLMC_CUDA_EMU_SHARED_H

#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <cxxabi.h>
#include <sys/stat.h>

namespace emu {

struct SharedVar { size_t off, size; std::string name; };
struct SharedFn { std::string name; size_t bytes = 0; std::vector<SharedVar> vars; };
struct SharedInfo {
    bool ok = false;
    long long anchor_off = -1;                 /* TLS offset of emu::t_threadIdx */
    std::map<uintptr_t, SharedFn> by_addr;     /* kernel entry address -> its __shared__ variables */
};

inline std::string demangle(const char* s) {
    int st = 0;
    char* d = abi::__cxa_demangle(s, nullptr, nullptr, &st);
    std::string r = (st == 0 && d) ? d : s;
    free(d);
    return r;
}

inline int phdr_cb(struct dl_phdr_info* info, size_t, void* data) {
    *(uintptr_t*)data = (uintptr_t)info->dlpi_addr;
    return 1;   /* the first object is the program itself */
}

inline SharedInfo load_shared_info() {
    SharedInfo si;
    int fd = open("/proc/self/exe", O_RDONLY);
    if (fd < 0) return si;
    struct stat stt;
    if (fstat(fd, &stt) != 0) { close(fd); return si; }
    size_t n = (size_t)stt.st_size;
    void* map = mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return si;
    const char* b = (const char*)map;
    const Elf64_Ehdr* eh = (const Elf64_Ehdr*)b;
    if (n < sizeof(Elf64_Ehdr) || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64) { munmap(map, n); return si; }
    const Elf64_Shdr* sh = (const Elf64_Shdr*)(b + eh->e_shoff);
    const char* shstr = b + sh[eh->e_shstrndx].sh_offset;
    int sec = -1;
    const Elf64_Shdr* symtab = nullptr;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (!strcmp(shstr + sh[i].sh_name, "emu_shared")) sec = i;
        if (sh[i].sh_type == SHT_SYMTAB) symtab = &sh[i];
    }
    if (!symtab) { munmap(map, n); return si; }
    const Elf64_Sym* sy = (const Elf64_Sym*)(b + symtab->sh_offset);
    size_t ns = symtab->sh_size / sizeof(Elf64_Sym);
    const char* str = b + sh[symtab->sh_link].sh_offset;
    uintptr_t bias = 0;
    dl_iterate_phdr(phdr_cb, &bias);
    /* the variables of section emu_shared, by enclosing function */
    std::map<std::string, SharedFn> fns;   /* demangled function signature -> vars */
    for (size_t i = 0; i < ns; i++) {
        const char* nm = str + sy[i].st_name;
        if (ELF64_ST_TYPE(sy[i].st_info) != STT_TLS) continue;
        if (!strcmp(nm, "_ZN3emu11t_threadIdxE")) si.anchor_off = (long long)sy[i].st_value;
        if (sec < 0 || sy[i].st_shndx != (unsigned)sec) continue;
        std::string d = demangle(nm);
        size_t cut = d.rfind("::");
        std::string fn = cut == std::string::npos ? d : d.substr(0, cut);
        SharedFn& f = fns[fn];
        f.name = fn;
        f.bytes += sy[i].st_size;
        f.vars.push_back(SharedVar{(size_t)sy[i].st_value, (size_t)sy[i].st_size, d});
    }
    /* the functions' entry addresses */
    if (!fns.empty())
        for (size_t i = 0; i < ns; i++) {
            if (ELF64_ST_TYPE(sy[i].st_info) != STT_FUNC || sy[i].st_value == 0) continue;
            std::string d = demangle(str + sy[i].st_name);
            auto it = fns.find(d);
            if (it != fns.end()) si.by_addr[bias + (uintptr_t)sy[i].st_value] = it->second;
        }
    munmap(map, n);
    si.ok = si.anchor_off >= 0;
    return si;
}

inline const SharedInfo& shared_info() {
    static SharedInfo si = [] {
        SharedInfo s = load_shared_info();
        if (!s.ok) fprintf(stderr, "cuda emu: note: no symbol table in /proc/self/exe: __shared__ memory is neither sized nor refilled per block\n");
        return s;
    }();
    return si;
}

/* the kernel's __shared__ variables (nullptr: none known) */
inline const SharedFn* kernel_shared(const void* k) {
    const SharedInfo& si = shared_info();
    auto it = si.by_addr.find((uintptr_t)k);
    return it == si.by_addr.end() ? nullptr : &it->second;
}
/* static shared memory of kernel k in bytes (0 if it declares none) */
inline size_t kernel_static_smem(const void* k) {
    const SharedFn* f = kernel_shared(k);
    return f ? f->bytes : 0;
}

/* the calling worker thread's copy of the kernel's __shared__ variables,
   filled with 0xFF (before each block) */
inline void shared_refill(const SharedFn* f, const void* tls_anchor) {
    if (!f) return;
    char* base = (char*)tls_anchor - shared_info().anchor_off;
    for (const SharedVar& v : f->vars) memset(base + v.off, 0xFF, v.size);
}

} /* namespace emu */

#endif /* LLMC_CUDA_EMU_SHARED_H */
