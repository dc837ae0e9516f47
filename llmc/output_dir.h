/*
 output_dir.h: the -o directory of a run, for the trainer's set-up and its
 checkpoints: checked writable before anything is allocated, locked so one
 run at a time writes it (flock(2) on DIR/.llmc.lock, the takeover of a lock
 held on a lost host), a fresh run refused when an earlier run's
 checkpoints are there (or, with --overwrite 1, those moved aside), and
 --keep-checkpoints' pruning of older pairs. The files themselves are
 state.h's (state_*.bin) and checkpoint.h's (model_*.bin).
*/
#ifndef LLMC_OUTPUT_DIR_H
#define LLMC_OUTPUT_DIR_H
#include "state.h"

/* mkdir -p: dir and every missing parent (mode 0755). 0, or -1 with errno. */
static inline int state_mkdir_p(const char* dir) {
    char p[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(p)) { errno = ENAMETOOLONG; return -1; }
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char keep = p[i];
        p[i] = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        p[i] = keep;
    }
    return 0;
}

/* Collective: make sure every rank can create files in the output dir
   before any training (rank 0 creates it and its parents if missing, then every rank
   creates, writes, fsyncs and removes a probe file). Errors end every rank
   with one line naming the directory. */
static inline void state_check_output_dir(Comm* c, const char* dir) {
    char err[ERRLEN] = "";
    struct stat st;
    if (c->rank == 0 && state_mkdir_p(dir) != 0)
        set_err(err, ERRLEN, "-o %s: cannot create the output directory (%s)", dir, strerror(errno));
    comm_check_all(c, err);
    if (stat(dir, &st) != 0) set_err(err, ERRLEN, "-o %s: cannot access the output directory (%s)", dir, strerror(errno));
    else if (!S_ISDIR(st.st_mode)) set_err(err, ERRLEN, "-o %s: exists and is not a directory", dir);
    else {
        char p[4096];
        snprintf(p, sizeof(p), "%s/.write_test.%d", dir, c->rank);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        char block[512];
        memset(block, 0, sizeof(block));
        if (fd < 0) set_err(err, ERRLEN, "-o %s: output directory is not writable (%s)", dir, strerror(errno));
        else {
            if (pwrite_all(fd, block, sizeof(block), 0) != 0 || fsync(fd) != 0)
                set_err(err, ERRLEN, "-o %s: cannot write to the output directory (%s)", dir, strerror(errno));
            close(fd);
            unlink(p);
        }
    }
    comm_check_all(c, err);
}

/* The lock of -o: rank 0 holds an exclusive flock(2) on DIR/.llmc.lock for
   the run's life (taken after state_check_output_dir, before anything is
   written; the descriptor is close-on-exec and never closed), so a second
   run into a live -o is refused before it writes main.log, a checkpoint or
   a flight record. The file holds the holder's one line
   "pid P host H boot B since T" (B: /proc/sys/kernel/random/boot_id, "?"
   where there is none; T: Unix seconds) for the refusal's one line and for
   a takeover. On a local disk the kernel drops the lock when its process
   ends, however it ends (SIGKILL, a reboot): it is never stale there. On a
   shared file system the lock of a process whose node is gone outlives it
   (NFSv4: until the client's state expires, 90 s by default; NFSv3: until that client
   reboots; Lustre: until the client is evicted), so a relaunch after a lost
   node would be refused by its own dead run: takeover (--lock-takeover, a
   comma list of host names known to be gone) takes over a lock held by a process on one of those hosts,
   with one line: the old file is unlinked and a new one locked (the dead
   holder's lock stays on the unlinked file). A lock held by this host in
   an earlier boot (another boot id: the process cannot be alive) is taken
   over the same way without the flag. A file system without flock (some
   network file systems return ENOLCK or EOPNOTSUPP; Lustre mounted noflock
   returns ENOSYS) runs unlocked, with a note.
   After the flock, the path must still name the locked file (fstat against
   stat): a run that ends unlinks its lock file (state_unlock_at_exit), and
   a run that opened that file just before could otherwise lock the
   unlinked file while a third run locks a new one at the path (two runs in
   one -o); it then opens the path again (tests/suites/train.sh widens that
   window with tests/shims/fs_faults.c). Collective: rank 0 decides, every rank ends
   with the same error (comm_check_all). */
static int state_lock_fd = -1;
static char state_lock_path[4200];
/* At exit (an error's exit(1) included): the lock file is removed while
   still held, if it is still this run's (same inode), so that a run
   refused late (after -o was checked) leaves nothing in -o; a run that
   opened the file before the unlink finds it gone after its flock and
   opens the path again (state_lock_output_dir). An _exit or a SIGKILL
   leaves it, unlocked: the next run takes it. */
static void state_unlock_at_exit(void) {
    struct stat a, b;
    if (state_lock_fd >= 0 && fstat(state_lock_fd, &a) == 0 && stat(state_lock_path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
        unlink(state_lock_path);
}
/* This machine's boot id (/proc/sys/kernel/random/boot_id) in out, "?" when
   it cannot be read. */
static inline void state_boot_id(char* out, size_t n) {
    snprintf(out, n, "?");
    FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f) return;
    char b[64];
    if (fscanf(f, "%63s", b) == 1) snprintf(out, n, "%s", b);
    fclose(f);
}
/* 1 if host is one of the comma-separated names in list (NULL: none). A
   name matches exactly or as the first label of host ("node2" matches
   "node2.cluster.local", as Slurm's short names do). */
static inline int state_host_listed(const char* list, const char* host) {
    if (!list) return 0;
    size_t hl = strlen(host), sl = strcspn(host, ".");
    for (const char* q = list; *q;) {
        size_t n = strcspn(q, ",");
        if (n && ((n == hl && !strncmp(q, host, n)) || (n == sl && !strncmp(q, host, n)))) return 1;
        q += n;
        if (*q == ',') q++;
    }
    return 0;
}
/* takeover: --lock-takeover's comma list of lost hosts, or NULL. */
static inline void state_lock_output_dir(Comm* c, const char* dir, const char* takeover) {
    char err[ERRLEN] = "";
    if (c->rank == 0) {
        char p[4096], me[128] = "?", boot[64];
        snprintf(p, sizeof(p), "%s/.llmc.lock", dir);
        gethostname(me, sizeof(me) - 1);
        me[sizeof(me) - 1] = 0;
        state_boot_id(boot, sizeof(boot));
        for (int attempt = 0; !err[0]; attempt++) {
            if (attempt == 16) { set_err(err, ERRLEN, "-o %s: its lock file %s was replaced 16 times while this run took it: give another -o", dir, p); break; }
            int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
            if (fd < 0) { set_err(err, ERRLEN, "-o %s: cannot open its lock file %s (%s)", dir, p, strerror(errno)); break; }
            if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
                struct stat a, b;
                if (fstat(fd, &a) != 0 || stat(p, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
                    close(fd);   /* the holder unlinked it at its exit (or a takeover replaced it): open the path again */
                    continue;
                }
                char line[384];
                struct timespec u;
                clock_gettime(CLOCK_REALTIME, &u);
                int n = snprintf(line, sizeof(line), "pid %ld host %s boot %s since %.0f\n", (long)getpid(), me, boot, (double)u.tv_sec);
                if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) { /* the lock holds; only the refusal's detail is lost */ }
                state_lock_fd = fd;
                snprintf(state_lock_path, sizeof(state_lock_path), "%s", p);
                atexit(state_unlock_at_exit);
                comm_before_error_exit = state_unlock_at_exit;   /* before any rank's exit(1) (comm.h) */
                break;
            }
            if (errno != EWOULDBLOCK) {
                if (errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS)
                    printf("note: -o %s: this file system does not lock files (%s): a second run into it would not be refused\n", dir, strerror(errno));
                else set_err(err, ERRLEN, "-o %s: cannot lock %s (%s)", dir, p, strerror(errno));
                close(fd);
                break;
            }
            char who[384] = "";
            ssize_t k = pread(fd, who, sizeof(who) - 1, 0);
            close(fd);
            who[k > 0 ? k : 0] = 0;
            char* nl = strchr(who, '\n');
            if (nl) *nl = 0;
            long pid = 0; char host[128] = "?", hboot[64] = "?"; double since = 0;
            int got = sscanf(who, "pid %ld host %127s boot %63s since %lf", &pid, host, hboot, &since) == 4 ||
                      sscanf(who, "pid %ld host %127s since %lf", &pid, host, &since) == 3;
            if (!got) {
                set_err(err, ERRLEN, "-o %s: another run is using it (%s holds its lock): wait for it to end, stop it, or give another -o", dir, p);
                break;
            }
            const char* why = state_host_listed(takeover, host) ? "a host given to --lock-takeover as gone"
                              : !strcmp(host, me) && strcmp(hboot, "?") && strcmp(boot, "?") && strcmp(hboot, boot) ? "this host before its last boot" : NULL;
            if (why) {
                printf("-o %s: its lock is held by pid %ld on host %s, %s: taking the lock over (the old lock file is removed)\n", dir, pid, host, why);
                fflush(stdout);
                unlink(p);
                continue;
            }
            time_t t = (time_t)since;
            struct tm tm;
            char when[64] = "";
            localtime_r(&t, &tm);
            strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
            set_err(err, ERRLEN, "-o %s: another run is using it (pid %ld on host %s, since %s): wait for it to end, stop it, "
                    "or give another -o%s", dir, pid, host, when,
                    strcmp(host, me) ? " (a holder on a lost node: --lock-takeover that host)" : "");
        }
    }
    comm_check_all(c, err);
}

/* Move every dir/<prefix>%08d.bin (state_match_name) into dir/sub.
   Local (rank 0). Returns 0, or -1 with errno of the first rename that failed. */
static inline int state_move_all(const char* dir, const char* prefix, const char* sub) {
    DIR* d = opendir(dir);
    if (!d) return -1;
    struct dirent* e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        long s;
        if (!state_match_name(e->d_name, prefix, &s)) continue;
        char p[4200], q[4400];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        snprintf(q, sizeof(q), "%s/%s/%s", dir, sub, e->d_name);
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (rename(p, q) != 0) { rc = -1; break; }
    }
    int saved = errno;
    closedir(d);
    errno = saved;
    return rc;
}

/* A fresh run (no -y 1) into dir (collective, after state_lock_output_dir,
   so no other run writes there meanwhile). Checkpoints of an earlier run
   there (model_S.bin, state_S.bin) would mix with this run's (its
   checkpoint S overwritten, the newer ones left for a later -y 1 to resume
   the old run), so rank 0 alone scans dir and refuses the run with one line
   (how many files, their lowest and highest step; resume with -y 1, another
   -o, or --overwrite 1), unless overwrite (--overwrite 1): then it moves
   them, and the earlier run's main.log, into a new subfolder
   dir/earlier_run_YYYYMMDD-HHMMSS (UTC; -2, -3... if taken), which no resume
   reads (state_find_latest scans dir only), models first (a move cut short
   leaves only states in dir, which no resume reads), and says so in one
   line. The decision is rank 0's; every rank ends with the refusal
   (comm_check_all: one line, exit 1 on every rank). */
static inline void state_fresh_output_dir(Comm* c, const char* dir, int overwrite) {
    char err[ERRLEN] = "";
    if (c->rank == 0) {
        long lo = -1, hi = -1, files = 0;
        DIR* d = opendir(dir);
        if (!d) set_err(err, ERRLEN, "-o %s: cannot read the output directory (%s)", dir, strerror(errno));
        struct dirent* e;
        while (d && (e = readdir(d)) != NULL) {
            long s;
            if (!state_match_name(e->d_name, "model_", &s) && !state_match_name(e->d_name, "state_", &s)) continue;
            char p[4200];
            struct stat st;
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;   /* a directory of that name is no checkpoint (the write refuses it) */
            files++;
            if (lo < 0 || s < lo) lo = s;
            if (s > hi) hi = s;
        }
        if (d) closedir(d);
        char steps[64];
        if (lo == hi) snprintf(steps, sizeof(steps), "step %ld", lo);
        else snprintf(steps, sizeof(steps), "steps %ld to %ld", lo, hi);
        if (files && !overwrite)
            set_err(err, ERRLEN, "-o %s holds checkpoints of an earlier run (%ld file%s, %s): resume it with -y 1, give another -o, "
                    "or start over with --overwrite 1 (moves them into a subfolder earlier_run_<date>)", dir, files, files > 1 ? "s" : "", steps);
        else if (files) {
            char sub[64], path[4200];
            time_t now = time(NULL);
            struct tm tm;
            gmtime_r(&now, &tm);
            char stamp[32];
            strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
            int made = 0;
            for (int k = 1; k <= 100 && !made; k++) {
                if (k == 1) snprintf(sub, sizeof(sub), "earlier_run_%s", stamp);
                else snprintf(sub, sizeof(sub), "earlier_run_%s-%d", stamp, k);
                snprintf(path, sizeof(path), "%s/%s", dir, sub);
                if (mkdir(path, 0777) == 0) made = 1;
                else if (errno != EEXIST) break;
            }
            if (!made)
                set_err(err, ERRLEN, "-o %s: --overwrite 1 cannot make the subfolder %s for the earlier run's checkpoints (%s)", dir, path, strerror(errno));
            else if (state_move_all(dir, "model_", sub) != 0 || state_move_all(dir, "state_", sub) != 0)
                set_err(err, ERRLEN, "-o %s: --overwrite 1 cannot move the earlier run's checkpoints into %s (%s)", dir, path, strerror(errno));
            else {
                char log[4200], logto[4400];
                snprintf(log, sizeof(log), "%s/main.log", dir);
                snprintf(logto, sizeof(logto), "%s/main.log", path);
                int movedlog = rename(log, logto) == 0;
                printf("-o %s: --overwrite 1: moved the checkpoints of an earlier run (%ld file%s, %s)%s into %s\n", dir, files,
                       files > 1 ? "s" : "", steps, movedlog ? " and its main.log" : "", path);
                fflush(stdout);
            }
        }
    }
    comm_check_all(c, err);
}

/* --keep-checkpoints K (K > 0): after the pair of step `newest` is
   complete, rank 0 keeps the newest K complete pairs (model_S.bin with
   state_S.bin; counting newest) and removes every file of every older step:
   model_S.bin first, then state_S.bin (a removal cut short leaves at most a
   state without its model, which no resume reads). Only complete pairs
   count: a lone model or a lone state (a SIGKILL between the two writes, a
   removal cut short) is never one of the K; one newer than the K-th pair
   stays (it is replaced when a run writes that step again), an older one is
   removed with the rest. Only steps below newest are touched, so the
   checkpoint a run resumed from stays until K newer complete pairs exist.
   Returns the number of steps removed, their list in out ("5, 10"). */
static inline int state_prune(const char* dir, long newest, int K, char* out, size_t outlen) {
    out[0] = 0;
    if (K <= 0) return 0;
    DIR* d = opendir(dir);
    if (!d) return 0;
    long* steps = NULL;
    int* kinds = NULL;   /* bit 0: a model, bit 1: a state */
    int n = 0, cap = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        long s;
        int kind = state_match_name(e->d_name, "model_", &s) ? 1 : state_match_name(e->d_name, "state_", &s) ? 2 : 0;
        if (!kind || s >= newest) continue;
        int at = -1;
        for (int i = 0; i < n && at < 0; i++) if (steps[i] == s) at = i;
        if (at < 0) {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                long* ns = (long*)realloc(steps, (size_t)cap * sizeof(long));
                int* nk = ns ? (int*)realloc(kinds, (size_t)cap * sizeof(int)) : NULL;
                if (ns) steps = ns;
                if (nk) kinds = nk;
                if (!ns || !nk) { free(steps); free(kinds); closedir(d); return 0; }
            }
            at = n++;
            steps[at] = s; kinds[at] = 0;
        }
        kinds[at] |= kind;
    }
    closedir(d);
    for (int i = 1; i < n; i++)   /* newest first */
        for (int j = i; j > 0 && steps[j - 1] < steps[j]; j--) {
            long t = steps[j]; steps[j] = steps[j - 1]; steps[j - 1] = t;
            int k = kinds[j]; kinds[j] = kinds[j - 1]; kinds[j - 1] = k;
        }
    int removed = 0, pairs = 1;   /* newest is the first kept pair */
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (pairs < K) { pairs += kinds[i] == 3; continue; }   /* kept: a complete pair counts, a lone file newer than the K-th pair stays */
        char p[4096];
        snprintf(p, sizeof(p), "%s/model_%08ld.bin", dir, steps[i]);
        unlink(p);
        snprintf(p, sizeof(p), "%s/state_%08ld.bin", dir, steps[i]);
        unlink(p);
        removed++;
        if (k + 24 < outlen) k += (size_t)snprintf(out + k, outlen - k, "%s%ld", removed > 1 ? ", " : "", steps[i]);
    }
    free(steps); free(kinds);
    return removed;
}

#endif /* LLMC_OUTPUT_DIR_H */
