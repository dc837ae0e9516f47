/*
 tests/check.h -- what every C test shares: the pass / fail / skip
 counters and the summary line "N passed, M failed, K skipped" that
 tests/run.sh adds up (the shell suites' twin is tests/lib.sh). A check that
 cannot run here (an ISA this CPU lacks, say) is skipped and counted with
 the reason, never passed.

   CHECK(cond, fmt, ...)   counts; a failure prints "FAIL file:line: msg"
                           (the first CHECK_MAX_MSGS failures of a group)
   check_ok(name, cond)    counts; prints "ok   name" or "FAIL name"
   check_skip(name, why)   counts a skip; prints "skip name: why"
   check_group_begin() / check_group_end(name)
                           one line per group: "name  N checks, M failed"
   return check_summary(); prints the summary line; 1 if anything failed
*/
#ifndef LLMC_TESTS_CHECK_H
#define LLMC_TESTS_CHECK_H

#include <stdio.h>

#ifndef CHECK_MAX_MSGS
#define CHECK_MAX_MSGS 20
#endif

static int check_pass = 0, check_fail = 0, check_skipped = 0;  /* whole run */
static int check_grp_pass = 0, check_grp_fail = 0, check_grp_msgs = 0; /* current group */

#define CHECK(cond, ...) do {                                                  \
        if (cond) { check_pass++; check_grp_pass++; }                          \
        else {                                                                 \
            check_fail++; check_grp_fail++;                                    \
            if (check_grp_msgs++ < CHECK_MAX_MSGS) {                           \
                printf("  FAIL %s:%d: ", __FILE__, __LINE__);                  \
                printf(__VA_ARGS__); printf("\n");                             \
            }                                                                  \
        }                                                                      \
    } while (0)

static inline void check_ok(const char* name, int cond) {
    printf("%-4s %s\n", cond ? "ok" : "FAIL", name);
    if (cond) { check_pass++; check_grp_pass++; } else { check_fail++; check_grp_fail++; }
}
static inline void check_skip(const char* name, const char* why) {
    printf("skip %s: %s\n", name, why);
    check_skipped++;
}
static inline void check_group_begin(void) { check_grp_pass = check_grp_fail = check_grp_msgs = 0; }
static inline void check_group_end(const char* name) {
    printf("%-58s %6d checks, %d failed%s\n", name, check_grp_pass + check_grp_fail, check_grp_fail, check_grp_fail ? "  <-- FAIL" : "");
}
static inline int check_summary(void) {
    printf("%d passed, %d failed, %d skipped\n", check_pass, check_fail, check_skipped);
    return check_fail ? 1 : 0;
}

#endif /* LLMC_TESTS_CHECK_H */
