/*
 test_fit.c: llmc/fit.h's budget sources on fake cgroup trees (the reader
 takes its roots from LLMC_CGROUP_ROOT and LLMC_PROC_SELF_CGROUP):
   - cgroup v1 (the memory controller's line of /proc/self/cgroup,
     ROOT/memory/PATH/memory.limit_in_bytes), nested: the smallest limit on
     the path to the root wins, a leaf without a limit (the kernel's
     9223372036854771712) takes its parent's;
   - cgroup v2 ("0::PATH", ROOT/PATH/memory.max): "max" is no limit, a
     parent's limit counts, the root path "/" (a container's view), no
     limit anywhere;
   - a hybrid host (v1 controllers and "0::/"): v1 is read; a v1 memory line
     whose hierarchy is not mounted: v2 is read;
   - what the cgroup holds beyond the ranks (usage - page cache), v1 and v2
     names, and the budget: (limit - (held - the ranks' share)) / ranks of
     the node, its source naming the version and the file;
   - fit_parse_size: decimal and binary suffixes, bytes, and what it refuses.
 Every expected value is written here by hand from the files the test
 makes. Last line: the summary.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "llmc/fit.h"
#include "tests/check.h"

static char root[512];

static void put(const char* rel, const char* text) {
    char p[1024], d[1024];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    snprintf(d, sizeof(d), "%s", p);
    for (char* s = d + strlen(root) + 1; *s; s++)
        if (*s == '/') { *s = 0; mkdir(d, 0755); *s = '/'; }
    FILE* f = fopen(p, "w");
    if (!f) { printf("FAIL cannot write %s\n", p); exit(1); }
    fputs(text, f);
    fclose(f);
}

/* a fresh tree: ROOT/<name>/ with the cgroup mount under it and a proc file */
static void tree(const char* name, const char* proc_self_cgroup) {
    char cmd[1200];
    snprintf(root, sizeof(root), "/tmp/llmc_test_fit.%d/%s", (int)getpid(), name);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s/fs'", root, root);
    if (system(cmd) != 0) { printf("FAIL mkdir %s\n", root); exit(1); }
    put("proc_self_cgroup", proc_self_cgroup);
    char p[1024];
    snprintf(p, sizeof(p), "%s/fs", root);
    setenv("LLMC_CGROUP_ROOT", p, 1);
    snprintf(p, sizeof(p), "%s/proc_self_cgroup", root);
    setenv("LLMC_PROC_SELF_CGROUP", p, 1);
}

static int ends_with(const char* s, const char* tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

int main(void) {
    FitCgroup cg;

    check_group_begin();
    tree("v1", "12:pids:/\n4:memory:/llmc/node1\n1:name=systemd:/\n0::/\n");
    put("fs/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("fs/memory/llmc/memory.limit_in_bytes", "2000000000\n");
    put("fs/memory/llmc/node1/memory.limit_in_bytes", "3000000000\n");
    memset(&cg, 0, sizeof(cg));
    CHECK(fit_cgroup_limit(&cg, 0) == 1, "v1: a limit is found");
    CHECK(cg.version == 1, "v1: version %d", cg.version);
    CHECK(cg.limit == 2000000000ULL, "v1 nested: the parent's smaller limit, got %llu", cg.limit);
    CHECK(ends_with(cg.file, "/fs/memory/llmc/memory.limit_in_bytes"), "v1: the limit's file %s", cg.file);
    put("fs/memory/llmc/node1/memory.limit_in_bytes", "1200000000\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.limit == 1200000000ULL && ends_with(cg.file, "/llmc/node1/memory.limit_in_bytes"),
          "v1: the leaf's smaller limit, got %llu from %s", cg.limit, cg.file);
    put("fs/memory/llmc/node1/memory.limit_in_bytes", "9223372036854771712\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.limit == 2000000000ULL, "v1: a leaf without a limit takes its parent's, got %llu", cg.limit);
    put("fs/memory/llmc/memory.limit_in_bytes", "9223372036854771712\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 0, "v1: no limit on the path (2^63 - 4096 everywhere) is no limit");
    /* usage and page cache (v1 names) */
    put("fs/memory/llmc/node1/memory.limit_in_bytes", "1000000000\n");
    put("fs/memory/llmc/node1/memory.usage_in_bytes", "600000000\n");
    put("fs/memory/llmc/node1/memory.stat", "cache 1\nrss 2\ntotal_cache 250000000\ntotal_rss 350000000\ntotal_inactive_file 100000000\ntotal_active_file 50000000\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && fit_cgroup_unreclaimable(cg.dir, cg.version) == 450000000ULL,
          "v1: usage 600e6 - active_file 50e6 - inactive_file 100e6 = 450e6, got %llu", fit_cgroup_unreclaimable(cg.dir, cg.version));
    FitBudget b = fit_budget(0, 2, 300000000ULL);   /* the node's 2 ranks hold 300e6 of it: others hold 150e6 */
    CHECK(b.bytes == 425000000ULL, "v1 budget (1e9 - 150e6) / 2 = 425e6, got %llu", b.bytes);
    CHECK(strstr(b.source, "cgroup v1 ") && strstr(b.source, "/llmc/node1/memory.limit_in_bytes: 1 GB") && strstr(b.source, "less 0.15 GB held by other processes")
          && strstr(b.source, "/ 2 ranks of the node"), "v1 budget source: %s", b.source);
    /* the binding level is the one with the least room: a parent of 1.1e9 whose other
       residents hold 200e6 more than the leaf's leaves 600e6 for the ranks' 300e6 ... */
    put("fs/memory/llmc/memory.limit_in_bytes", "1100000000\n");
    put("fs/memory/llmc/memory.usage_in_bytes", "800000000\n");
    put("fs/memory/llmc/memory.stat", "total_inactive_file 150000000\ntotal_active_file 0\n");   /* unreclaimable 650e6: others 350e6 */
    CHECK(fit_cgroup_limit(&cg, 300000000ULL) == 1 && cg.limit == 1100000000ULL && cg.other == 350000000ULL && ends_with(cg.file, "/llmc/memory.limit_in_bytes"),
          "the parent binds (1.1e9 - 350e6 = 750e6 < the leaf's 1e9 - 150e6 = 850e6): %llu, others %llu, %s", cg.limit, cg.other, cg.file);
    b = fit_budget(0, 2, 300000000ULL);
    CHECK(b.bytes == 375000000ULL, "the parent's room / 2 ranks = 375e6, got %llu", b.bytes);
    put("fs/memory/llmc/memory.limit_in_bytes", "9223372036854771712\n");
    b = fit_budget(0, 2, 900000000ULL);   /* the ranks hold more than the cgroup's unreclaimable bytes: no one else holds anything */
    CHECK(b.bytes == 500000000ULL, "v1 budget, nothing held by others: 1e9 / 2, got %llu", b.bytes);
    b = fit_budget(450000000ULL, 2, 0);
    CHECK(b.bytes == 450000000ULL && strstr(b.source, "--memory-limit"), "--memory-limit wins over the cgroup: %llu (%s)", b.bytes, b.source);
    check_group_end("cgroup v1: nesting, unlimited leaves, usage less page cache, the budget");

    check_group_begin();
    tree("v2", "0::/llmc/node1\n");
    put("fs/llmc/memory.max", "1500000000\n");
    put("fs/llmc/node1/memory.max", "max\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.version == 2 && cg.limit == 1500000000ULL, "v2: 'max' at the leaf, the parent's limit: v%d %llu", cg.version, cg.limit);
    CHECK(ends_with(cg.file, "/fs/llmc/memory.max"), "v2: the limit's file %s", cg.file);
    put("fs/llmc/node1/memory.max", "600000000\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.limit == 600000000ULL && ends_with(cg.file, "/llmc/node1/memory.max"), "v2: the leaf's limit %llu from %s", cg.limit, cg.file);
    put("fs/llmc/node1/memory.current", "200000000\n");
    put("fs/llmc/node1/memory.stat", "anon 120000000\nfile 80000000\nkernel 1\nactive_file 30000000\ninactive_file 50000000\n");
    CHECK(fit_cgroup_unreclaimable(cg.dir, cg.version) == 120000000ULL, "v2: current 200e6 - active_file 30e6 - inactive_file 50e6 = 120e6, got %llu", fit_cgroup_unreclaimable(cg.dir, cg.version));
    b = fit_budget(0, 1, 100000000ULL);
    CHECK(b.bytes == 580000000ULL, "v2 budget: 600e6 - (120e6 - 100e6) = 580e6 for one rank, got %llu", b.bytes);
    CHECK(strstr(b.source, "cgroup v2 ") && strstr(b.source, "/llmc/node1/memory.max") && strstr(b.source, "/ 1 rank of the node"), "v2 budget source: %s", b.source);
    put("fs/llmc/node1/memory.max", "max\n");
    put("fs/llmc/memory.max", "max\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 0, "v2: 'max' everywhere is no limit");
    tree("v2root", "0::/\n");
    put("fs/memory.max", "1073741824\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.version == 2 && cg.limit == 1073741824ULL && ends_with(cg.file, "/fs/memory.max"),
          "v2, the root path (a container's namespace): %llu from %s", cg.limit, cg.file);
    tree("v2none", "0::/a/b\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 0, "v2: no memory.max files at all is no limit");
    check_group_end("cgroup v2: max, nesting, the root path, usage less page cache, the budget");

    check_group_begin();
    tree("hybrid", "5:memory:/job\n0::/other\n");
    put("fs/memory/job/memory.limit_in_bytes", "700000000\n");
    put("fs/other/memory.max", "100\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.version == 1 && cg.limit == 700000000ULL, "hybrid: v1's memory controller is read: v%d %llu", cg.version, cg.limit);
    tree("v1unmounted", "5:memory:/job\n0::/mine\n");
    put("fs/mine/memory.max", "800000000\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.version == 2 && cg.limit == 800000000ULL, "a v1 line without its hierarchy mounted: v2 is read: v%d %llu", cg.version, cg.limit);
    tree("comounted", "3:cpu,memory:/job\n0::/\n");   /* v1 controllers mounted together, no ROOT/memory link */
    put("fs/cpu,memory/job/memory.limit_in_bytes", "650000000\n");
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.version == 1 && cg.limit == 650000000ULL && ends_with(cg.file, "/fs/cpu,memory/job/memory.limit_in_bytes"),
          "v1 with co-mounted controllers (ROOT/cpu,memory): v%d %llu from %s", cg.version, cg.limit, cg.file);
    /* a v1 memory hierarchy mounted elsewhere than ROOT/memory: found through
       mountinfo (a space in the mount point, escaped \040 as the kernel writes it) */
    tree("elsewhere", "4:memory:/job\n0::/\n");
    char mi[4096], mp[1024];
    snprintf(mi, sizeof(mi), "31 23 0:28 / %s/fs rw,relatime - tmpfs tmpfs rw\n32 31 0:29 / %s/fs/cpu rw - cgroup cgroup rw,cpu\n"
             "35 31 0:32 / %s/mnt/mem\\040v1 rw,relatime shared:9 - cgroup cgroup rw,memory\n41 31 0:38 / %s/fs/unified rw - cgroup2 cgroup2 rw\n",
             root, root, root, root);
    put("mountinfo", mi);
    put("mnt/mem v1/job/memory.limit_in_bytes", "710000000\n");
    put("fs/memory.max", "100\n");   /* what the fallback (v2 at ROOT) would read */
    CHECK(fit_cgroup_limit(&cg, 0) == 0 || cg.limit != 710000000ULL, "without mountinfo the hierarchy at ROOT/mnt is not found (the fallback's rules)");
    snprintf(mp, sizeof(mp), "%s/mountinfo", root);
    setenv("LLMC_PROC_SELF_MOUNTINFO", mp, 1);
    memset(&cg, 0, sizeof(cg));
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.version == 1 && cg.limit == 710000000ULL && ends_with(cg.file, "/mnt/mem v1/job/memory.limit_in_bytes"),
          "v1 mounted at ROOT/mnt/mem v1 (mountinfo): v%d %llu from %s", cg.version, cg.limit, cg.file);
    /* a container's own subtree: mount root /kube/pod1 at ROOT/ctr, the process in /kube/pod1/c1 */
    tree("subtree", "4:memory:/kube/pod1/c1\n");
    snprintf(mi, sizeof(mi), "35 31 0:32 /kube/pod1 %s/ctr rw - cgroup cgroup rw,memory,nosuid\n", root);
    put("mountinfo", mi);
    put("ctr/memory.limit_in_bytes", "400000000\n");
    put("ctr/c1/memory.limit_in_bytes", "500000000\n");
    snprintf(mp, sizeof(mp), "%s/mountinfo", root);
    setenv("LLMC_PROC_SELF_MOUNTINFO", mp, 1);
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.version == 1 && cg.limit == 400000000ULL && ends_with(cg.file, "/ctr/memory.limit_in_bytes"),
          "a mounted subtree: the path below the mount's root, up to it: v%d %llu from %s", cg.version, cg.limit, cg.file);
    /* v2 mounted elsewhere than ROOT */
    tree("v2elsewhere", "0::/a\n");
    snprintf(mi, sizeof(mi), "41 31 0:38 / %s/u2 rw - cgroup2 cgroup2 rw,nsdelegate\n", root);
    put("mountinfo", mi);
    put("u2/a/memory.max", "820000000\n");
    snprintf(mp, sizeof(mp), "%s/mountinfo", root);
    setenv("LLMC_PROC_SELF_MOUNTINFO", mp, 1);
    CHECK(fit_cgroup_limit(&cg, 0) == 1 && cg.version == 2 && cg.limit == 820000000ULL && ends_with(cg.file, "/u2/a/memory.max"),
          "v2 mounted at ROOT/u2 (mountinfo): v%d %llu from %s", cg.version, cg.limit, cg.file);
    unsetenv("LLMC_PROC_SELF_MOUNTINFO");
    tree("noproc", "");
    setenv("LLMC_PROC_SELF_CGROUP", "/nonexistent/llmc/cgroup", 1);
    CHECK(fit_cgroup_limit(&cg, 0) == 0, "no /proc/self/cgroup: no limit");
    b = fit_budget(0, 4, 0);
    CHECK(strstr(b.source, "MemAvailable") && b.bytes == fit_mem_available() / 4, "no cgroup: MemAvailable / 4 ranks (%s)", b.source);
    check_group_end("hybrid hosts, an unmounted v1 hierarchy, co-mounted v1 controllers, mountinfo (v1 elsewhere, a subtree, v2), no cgroup file");

    check_group_begin();
    /* what a rank holds that its cgroup cannot reclaim: RssAnon + its share of
       the shared memory it maps (Pss_Shmem): two ranks mapping one 5000 kB
       segment count it once between them */
    tree("pss", "");
    put("status", "Name:\ttrain\nRssAnon:\t    1000 kB\nRssFile:\t 300 kB\nRssShmem:\t    5000 kB\n");
    put("rollup", "Rss:   6300 kB\nPss_Anon:  1000 kB\nPss_Shmem:   2500 kB\n");
    put("rollup_old", "Rss:   6300 kB\nPss:   3800 kB\n");
    char st[1024], ro[1024], ro2[1024];
    snprintf(st, sizeof(st), "%s/status", root); snprintf(ro, sizeof(ro), "%s/rollup", root); snprintf(ro2, sizeof(ro2), "%s/rollup_old", root);
    unsigned long long u = fit_unreclaimable_of(st, ro);
    CHECK(u == 3500ULL * 1024, "RssAnon 1000 kB + Pss_Shmem 2500 kB = 3500 kB: %llu", u);
    CHECK(2 * u == (2 * 1000ULL + 5000ULL) * 1024, "two such ranks: 2 x 1000 kB + the 5000 kB segment once (RssShmem counted it twice: 12000 kB)");
    u = fit_unreclaimable_of(st, ro2);
    CHECK(u == 6000ULL * 1024, "no Pss_Shmem (an older kernel): RssAnon + RssShmem = 6000 kB: %llu", u);
    u = fit_own_unreclaimable();
    CHECK(u > 0 && u <= proc_field_bytes("/proc/self/status", "VmRSS:"), "this process: %llu bytes, within its VmRSS", u);
    check_group_end("a rank's unreclaimable memory: shared segments by their proportional share");

    check_group_begin();
    struct { const char* s; unsigned long long v; } good[] = {
        {"900M", 900000000ULL}, {"1.5G", 1500000000ULL}, {"900Mi", 943718400ULL}, {"4Gi", 4294967296ULL}, {"512K", 512000ULL},
        {"2T", 2000000000000ULL}, {"123", 123ULL}, {"100B", 100ULL}, {"1ki", 1024ULL}, {"0.5g", 500000000ULL}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        unsigned long long v = 0;
        CHECK(fit_parse_size(good[i].s, &v) == 0 && v == good[i].v, "fit_parse_size(%s) = %llu, expected %llu", good[i].s, v, good[i].v);
    }
    const char* badv[] = {"", "12X", "-1", "0", "M", "1e400", "1.5Xi", "G1", "20T000"};
    for (size_t i = 0; i < sizeof(badv) / sizeof(badv[0]); i++) {
        unsigned long long v = 0;
        CHECK(fit_parse_size(badv[i], &v) != 0, "fit_parse_size(%s) must refuse it", badv[i]);
    }
    check_group_end("sizes: K M G T (1e3..1e12), Ki Mi Gi Ti (2^10..2^40), bytes, refusals");

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf /tmp/llmc_test_fit.%d", (int)getpid());
    if (system(cmd) != 0) printf("note: could not remove /tmp/llmc_test_fit.%d\n", (int)getpid());
    return check_summary();
}
