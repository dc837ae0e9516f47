/*
 traffic.h: the kinds of collectives the trainer counts, and the bytes a
 ring algorithm puts on the wire for each (no MPI here: the shard plan's
 predictions and the counters of comm.h share it).

 Per rank, bytes:
   handed: the bytes of the full buffer a collective works on (all-reduce: n;
           reduce-scatter: the full input of N*shard; all-gather: the full
           output of N*shard), i.e. the quantity the ZeRO paper counts as Psi.
   wire:   what a ring algorithm sends per rank: all-reduce 2(N-1)/N * n,
           reduce-scatter and all-gather (N-1)/N * (N*shard) = (N-1)*shard
           (the deterministic reduce-scatter of comm.h is an all-to-all,
           which sends exactly that); all-gathered data (the scalars, the
           embedding rows) (N-1)/N of what is handed.
*/
#ifndef LLMC_TRAFFIC_H
#define LLMC_TRAFFIC_H

/* COLL_EMB_GATHER: the all-gather of the rows of d(embedding output) and
   their token ids, from which each rank forms the embedding gradient of the
   rows it holds (gpt.h). */
/* COLL_SECONDARY_GATHER: hpZ (ZeRO++), a stage-3 weight all-gather from
   the secondary shard, inside the K ranks that share it (one node). */
/* COLL_QG_INSIDE, COLL_QG_ACROSS: qgZ (ZeRO++), the quantized gradient
   reduce-scatter's two all-to-all hops, inside each node and across the
   nodes (handed: the records each hop's input holds). */
enum { COLL_ALL_REDUCE = 0, COLL_REDUCE_SCATTER, COLL_ALL_GATHER, COLL_SCALARS, COLL_EMB_GATHER, COLL_SECONDARY_GATHER,
       COLL_QG_INSIDE, COLL_QG_ACROSS, COLL_NUM };
/* PHASE_TRAIN: traffic of optimizer steps (predicted by the shard plan);
   PHASE_OTHER: evaluation, sampling, checkpoint I/O (reported, not predicted). */
enum { PHASE_TRAIN = 0, PHASE_OTHER, PHASE_NUM };

static inline const char* coll_name(int k) {
    static const char* names[COLL_NUM] = {"all-reduce", "reduce-scatter", "all-gather", "scalars all-gather",
                                          "embedding rows all-gather", "secondary all-gather (hpZ)",
                                          "reduce-scatter node (qgZ)", "reduce-scatter nodes (qgZ)"};
    return k >= 0 && k < COLL_NUM ? names[k] : "?";
}

/* Ring wire bytes per rank for a collective handed `bytes` on N ranks.
   bytes is a multiple of N for reduce-scatter/all-gather by construction of
   the shard plan (and for the embedding rows: N equal parts). */
static inline unsigned long long ring_wire_bytes(int coll, unsigned long long bytes, int N) {
    if (N <= 1) return 0;
    unsigned long long n = (unsigned long long)N;
    if (coll == COLL_ALL_REDUCE) return 2ULL * (n - 1) * bytes / n;
    if (coll == COLL_SCALARS) return (n - 1) * bytes; /* each rank's values, all-gathered, summed in rank order */
    return (n - 1) * (bytes / n);
}

#endif /* LLMC_TRAFFIC_H */
