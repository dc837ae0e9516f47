/*
 rescue.h: with --shard-group (HSDP) and -o, a shard group that outlives
 the loss of another node writes the checkpoint of the last step every rank
 of it completed, so that a relaunch with -y 1 loses no step
 (docs/faults.md, "A lost node under HSDP").

 Why it can: under HSDP every shard group holds a whole replica of the
 sharded state (params or master weights, Adam m and v; the replica
 all-reduce gives every group the same gradient bytes, and the same AdamW
 runs on the same shards, so the replicas are bitwise equal), and the
 checkpoint writers pwrite each rank's own shard (checkpoint.h): one
 complete group writes the same bytes as the normal write at that step.

 When: a collective timeout (comm_watch_expired, in the thread that waited:
 the main thread or the communication thread) calls rescue_run through
 comm_rescue_hook after its line and flight record. The ranks of the
 group agree, on a communicator of their own (rescue.mc, split from the
 world at start-up, so that no collective with a lost rank is needed), on
 the step each rank's shard holds: ZeroEngine.steps_applied (set when
 AdamW's loop ends; the loop has no collective, so no timeout can strike
 inside it on that thread) or -1 while its update runs (`updating`: a
 half-updated shard, neither step). The group writes iff every member
 answers within the collective timeout, all hold the same step S, S is
 newer than the latest checkpoint this run wrote or resumed from, and each
 holds the train loader's position at the boundary of S (rescue_note keeps
 the last two boundaries). The failure can strike anywhere:
   - before the step's update (the batches' error checks, forward and
     backward, the replica all-reduce): S = the previous step, the loader
     as it was when the step began;
   - after it (the loss all-reduce, the interrupt check, an evaluation, a
     checkpoint write of S): S = this step, the loader as it is;
   - a member stuck in a shard-group collective because a partner waits on
     a lost rank (the partner times out first and joins the rescue; the
     member times out within the same bound and joins it too): its shard
     is still at the step before its update;
   - members at different steps (not seen: a member past its update means
     every member passed the group's grad-norm sum, and the update has no
     other collective), or a member inside its update: nothing written, one
     line.
 A group with a lost or stuck member does not answer: its members' wait
 ends after the collective timeout with one line, and the abort follows as
 without the rescue (the relaunch goes on from the latest periodic
 checkpoint). Two surviving groups (a cut link leaves both sides alive)
 never write the same file: each writes PATH.tmp.gK (K its lowest world
 rank) and publishes it with link(2), which never replaces an existing
 PATH; every group's file of a step holds the same bytes, so whichever is
 in place first stays (checkpoint.h, CkptWriters).

 Then the group's first rank prints `rescue: wrote checkpoint S ...`
 (scripts/elastic.sh reads it), and every member waits out Open MPI's
 keepalive bound (comm_wait_keepalive, as before an abort) and exits with
 RESCUE_EXIT (75) without MPI_Finalize (which would wait for the lost
 ranks). The exit code reaches the launcher's caller only where the
 launcher passes it on (srun; mpirun reports its own once a daemon is
 lost): the line is the signal scripts/elastic.sh trusts.
*/
#ifndef LLMC_RESCUE_H
#define LLMC_RESCUE_H

#include "state.h"

#define RESCUE_EXIT 75   /* sysexits.h's EX_TEMPFAIL: the job can go on from the checkpoint just written */

typedef struct {
    int enabled;
    MPI_Comm mc;                 /* this rank's shard group, split from the world at start-up (rescue_init) */
    int rank, size;              /* this rank's place in it */
    int group;                   /* its lowest world rank: names the group (and the .tmp's suffix) */
    GPT2* model;
    const char* out_dir;
    int version, with_master;    /* the checkpoint's llm.c version (3, 5); the state stores the master weights */
    unsigned long long seed;
    StateRun run;
    int last_written;            /* the latest checkpoint on disk this run wrote or resumed from, -1: none (main thread, __atomic) */
    DataLoader loader[2];        /* the train loader at the boundary of step loader_step[i] (slot: the step's parity) */
    int loader_step[2];          /* -1: none */
    int entered;                 /* the first thread in rescue_run (a second waits for its end) */
    char members[512];           /* the group's ranks and nodes, for the lines */
} Rescue;
static Rescue rescue;   /* zero: not enabled */

/* Note the train loader at the boundary of optimizer step `step` (steps
   completed; the loader as periodic's checkpoint of that step would
   save it). Main thread: after the start-up (or the resume), at the start
   of each step and after its optimizer update. A shallow copy (the
   state reads its position fields only). */
static inline void rescue_note(int step, const DataLoader* train) {
    if (!rescue.enabled) return;
    int i = step & 1;
    __atomic_store_n(&rescue.loader_step[i], -1, __ATOMIC_SEQ_CST);
    rescue.loader[i] = *train;
    __atomic_store_n(&rescue.loader_step[i], step, __ATOMIC_SEQ_CST);
}

/* The latest checkpoint on disk this run wrote or resumed from (main thread). */
static inline void rescue_written(int step) {
    if (rescue.enabled) __atomic_store_n(&rescue.last_written, step, __ATOMIC_SEQ_CST);
}

static void rescue_run(double waited);

/* Collective over MPI_COMM_WORLD, at start-up, after comm_set_groups (the
   condition must be the same on every rank: it is decided by the agreed
   flags): with HSDP (c->replica_size > 1) and -o, make the rescue
   communicator (a split of the world by shard group: the group_comm's
   members), record what a checkpoint needs (the model, -o, the llm.c
   version, whether the state stores the master weights, the seed, the
   run's schedule) and the start (start_step: steps applied; last_written:
   the checkpoint resumed from, -1 none), and install the hook. Otherwise
   nothing (no hook: a timeout aborts as before). */
static inline void rescue_init(Comm* c, GPT2* m, const DataLoader* train, const char* out_dir, int version, int with_master,
                               unsigned long long seed, const StateRun* run, int start_step, int last_written) {
    if (!out_dir || c->replica_size <= 1) return;
    int lowest = c->rank;   /* the group's lowest world rank: its color */
    int wr[1024];
    int G = c->group_size <= 1024 ? c->group_size : 1024;
    if (comm_world_ranks(c->group_comm, c->group_size, wr) == 0) { lowest = wr[0]; for (int i = 1; i < G; i++) if (wr[i] < lowest) lowest = wr[i]; }
    MPI_Comm_split(MPI_COMM_WORLD, lowest, c->rank, &rescue.mc);
    MPI_Comm_rank(rescue.mc, &rescue.rank);
    MPI_Comm_size(rescue.mc, &rescue.size);
    rescue.group = lowest;
    if (comm_world_ranks(c->group_comm, c->group_size, wr) == 0 && c->group_size <= 1024) {
        int s[1024];
        memcpy(s, wr, (size_t)G * sizeof(int));
        for (int i = 1; i < G; i++) for (int j = i; j > 0 && s[j - 1] > s[j]; j--) { int t = s[j]; s[j] = s[j - 1]; s[j - 1] = t; }
        comm_format_ranks(rescue.members, sizeof(rescue.members), s, G);
    }
    rescue.model = m; rescue.out_dir = out_dir; rescue.version = version; rescue.with_master = with_master;
    rescue.seed = seed; rescue.run = *run;
    rescue.loader_step[0] = rescue.loader_step[1] = -1;
    rescue.last_written = last_written;
    rescue.enabled = 1;
    m->engine.steps_applied = start_step;
    rescue_note(start_step, train);
    comm_rescue_hook = rescue_run;
}

/* The hook (comm_watch_expired, the thread that timed out; see the top).
   Returns when this group writes nothing (after its one line), so that the
   abort follows; else never: the checkpoint written, the process exits
   RESCUE_EXIT. */
static void rescue_run(double waited) {
    if (!rescue.enabled) return;
    if (__sync_lock_test_and_set(&rescue.entered, 1)) {   /* the other thread timed out too: the first decides and ends the process */
        for (;;) { struct timespec ts = {1, 0}; nanosleep(&ts, NULL); }
    }
    double t0 = wall_seconds();
    GPT2* m = rescue.model;
    ZeroEngine* E = &m->engine;
    int upd = __atomic_load_n(&E->updating, __ATOMIC_SEQ_CST);
    int step = __atomic_load_n(&E->steps_applied, __ATOMIC_SEQ_CST);
    int slot = step & 1;
    int have_loader = !upd && __atomic_load_n(&rescue.loader_step[slot], __ATOMIC_SEQ_CST) == step;
    int lw = __atomic_load_n(&rescue.last_written, __ATOMIC_SEQ_CST);
    /* one exchange: the lowest and highest step (-1: inside its update, or no loader position of that step), the newest checkpoint */
    int mine[3] = {have_loader ? step : -1, have_loader ? -step : 1, -lw}, lo[3];
    CkptWriters w;
    memset(&w, 0, sizeof(w));
    w.mc = rescue.mc; w.rank = rescue.rank; w.size = rescue.size; w.writes = 1; w.rescue = 1; w.group = rescue.group;
    w.timeout_s = comm_watch.timeout_s;
    Comm* c = m->comm;
    if (ckpt_rescue_allreduce(&w, mine, lo, 3, MPI_INT, MPI_MIN)) {
        fprintf(stderr, "rescue (rank %d, node %s): the ranks of shard group %s did not all answer within %.0f s (one is lost or stuck): "
                "this group writes nothing (a relaunch goes on from the latest periodic checkpoint)\n", c->rank, comm_my_node(), rescue.members,
                w.timeout_s);
        fflush(stderr);
        return;
    }
    int smin = lo[0], smax = -lo[1], newest = -lo[2];
    int first = rescue.rank == 0;
    if (smin < 0) {
        if (first) fprintf(stderr, "rescue: a rank of shard group %s was inside its optimizer update (its shard neither step %d nor %d): "
                           "nothing written (a relaunch goes on from the latest periodic checkpoint)\n", rescue.members, smax, smax + 1);
        fflush(stderr);
        return;
    }
    if (smin != smax) {
        if (first) fprintf(stderr, "rescue: the ranks of shard group %s hold different steps (%d to %d): nothing written (a relaunch goes on "
                           "from the latest periodic checkpoint)\n", rescue.members, smin, smax);
        fflush(stderr);
        return;
    }
    if (smin <= newest || smin == 0) {
        if (first) fprintf(stderr, "rescue: step %d, the last step every rank of shard group %s completed, %s: nothing to write\n", smin,
                           rescue.members, smin == 0 ? "is the start (no step trained)" : "has its checkpoint in -o already");
        fflush(stderr);
        return;
    }
    const int S = smin;
    if (first) {
        printf("rescue: shard group %s holds a whole replica at step %d (the last step all its ranks completed): writing checkpoint %d\n",
               rescue.members, S, S);
        fflush(stdout);
    }
    char mp[4096], sp[4096];
    snprintf(mp, sizeof(mp), "%s/model_%08d.bin", rescue.out_dir, S);
    snprintf(sp, sizeof(sp), "%s/state_%08d.bin", rescue.out_dir, S);
    gpt2_save_checkpoint(m, mp, rescue.version, &w);
    int model_there = w.published_before;
    state_save(m, sp, S, &rescue.loader[slot], rescue.seed, rescue.with_master, &rescue.run, &w);
    int state_there = w.published_before;
    double t1 = wall_seconds();
    if (first) {
        printf("rescue: wrote checkpoint %d (%s and %s%s) in %.2f s, %.1f s after the collective began; exiting %d: resume with -y 1\n", S, mp, sp,
               model_there && state_there ? "; both were in place already, the same bytes: written by another group or before"
               : model_there ? "; the model was in place already" : state_there ? "; the state was in place already" : "",
               t1 - t0, waited + (t1 - t0), RESCUE_EXIT);
        fflush(stdout);
    }
    fflush(stderr);
    comm_wait_keepalive(waited + (t1 - t0));
    _exit(RESCUE_EXIT);
}

#endif /* LLMC_RESCUE_H */
