/* tests/ignore_signals.c: a planted bug for tests/suites/kill.sh, as an
   LD_PRELOAD shim: the process ignores SIGINT, SIGTERM, SIGUSR1 and SIGUSR2
   (any handler installed for them by sigaction or signal becomes SIG_IGN,
   so a signal is discarded when sent). A kill test must fail on a trainer
   built so (issue 49 item 11: dev/kill_fuzz.sh accepted exit 0 from a run
   that never heard its signal).
   gcc -shared -fPIC -O2 tests/ignore_signals.c -o build/ignore_signals.so -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <string.h>

static int ignored(int s) { return s == SIGINT || s == SIGTERM || s == SIGUSR1 || s == SIGUSR2; }

int sigaction(int s, const struct sigaction* act, struct sigaction* old) {
    static int (*real)(int, const struct sigaction*, struct sigaction*) = NULL;
    if (!real) real = (int (*)(int, const struct sigaction*, struct sigaction*))dlsym(RTLD_NEXT, "sigaction");
    if (act && ignored(s)) {
        struct sigaction ign;
        memcpy(&ign, act, sizeof(ign));
        ign.sa_flags &= ~SA_SIGINFO;
        ign.sa_handler = SIG_IGN;
        return real(s, &ign, old);
    }
    return real(s, act, old);
}

sighandler_t signal(int s, sighandler_t h) {
    static sighandler_t (*real)(int, sighandler_t) = NULL;
    if (!real) real = (sighandler_t (*)(int, sighandler_t))dlsym(RTLD_NEXT, "signal");
    return real(s, ignored(s) ? SIG_IGN : h);
}
