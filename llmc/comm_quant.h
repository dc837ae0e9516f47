/*
 comm_quant.h: ZeRO++'s quantized collectives on host buffers (Wang et al.
 2023, arXiv:2306.10209): qwZ's all-gather of int8 blocks and qgZ's
 hierarchical reduce-scatter of int8 / int4 blocks, on llmc/quant.h's
 block quantization and comm_host.h's exchange; a non-finite value they
 would have to carry ends the run with one line.
*/
#ifndef LLMC_COMM_QUANT_H
#define LLMC_COMM_QUANT_H

#include "comm_host.h"
#include "quant.h"

/* A non-finite value where a quantized collective must send it (bad = 1 +
   its index in shard q of the unit): one line naming the flag, the tensor,
   the element and the step, then MPI_Abort (every rank ends). */
static inline void quant_refuse_nonfinite(const QuantLayout* Q, int q, size_t bad, int unit, const char* flag, const char* what) {
    size_t at = (size_t)q * Q->shard + bad - 1;
    int k = 0;
    while (k + 1 < Q->nseg && Q->seg[k + 1] <= at) k++;
    fprintf(stderr, "error (rank %d): %s: %s tensor %s (unit %d) has a non-finite value at element %zu at step %d; "
            "int%d blocks cannot carry it, so the run ends here (lower -l?)\n",
            comm_watch.rank, flag, what, Q->names ? Q->names[k] : "?", unit, at - Q->seg[k], comm_watch.step, Q->bits);
    fflush(stderr);
    comm_abort();
}

/* qgZ's reduce-scatter (ZeRO++ section 3.3: a hierarchical all-to-all of
   quantized blocks), over the shard group of N = L x M ranks, the group
   rank j(m, l) at node m, local index l: nodes[m L + l] (Comm's
   group_nodes: the nodes as the hosts place them), or m L + l when nodes
   is NULL (runs of L consecutive ranks); on buf: the full unit's grads (N
   shards of Q->shard elements of eb bytes; Q->bits 8 or 4; shard j is
   group rank j's):
     1. quantize every shard j of buf (quant_encode, shard j's layout) and
        all-to-all inside the node (intra, L ranks): local rank l' gets the M
        shards j = j(m', l') from each of the L ranks of its node;
     2. dequantize and sum them in fp32 in local rank order: the node's
        partial sum of each of those M shards; quantize each;
     3. all-to-all across the nodes (inter: the M ranks of local index l):
        node m' gets the partial of shard j(m', l); dequantize and sum in
        fp32 in node order: s_i; then acc[i] = round(s_i + acc[i]).
   Deterministic: the same order of sums on every run and rank, wherever
   the ranks run; the sums' sets are the nodes', so a placement with other
   nodes (cyclic: {0,2} and {1,3}) sums other partials. L = 1: no
   first hop (the partials are this rank's own values, unquantized); M = 1:
   no second hop (the partial is the sum, not quantized again); intra or
   inter is then unused. So each value is quantized once per hop it takes.
   scratch: zero_qg_scratch_bytes. nbmax: scales per record. A non-finite
   gradient ends the run (quant_refuse_nonfinite). */
/* (the scratch layout: send1, recv1: N records each; part: M x s fp32;
   send2, recv2: M records each; tmp: s fp32) */
static inline void hostcoll_reduce_scatter_quantized(MPI_Comm intra, MPI_Comm inter, int L, int M, const int* nodes, void* buf, const QuantLayout* Q,
                                                     size_t nbmax, int eb, void* scratch, void* acc, int unit, int poll) {
    int l = 0, m = 0;
    if (L > 1) MPI_Comm_rank(intra, &l);
    if (M > 1) MPI_Comm_rank(inter, &m);
    size_t s = Q->shard, rec = quant_record_bytes(nbmax, s, Q->bits), N = (size_t)L * M;
    char* send1 = (char*)scratch;               /* N records: [l'][m'] = shard j(m', l') */
    char* recv1 = send1 + N * rec;               /* N records: [p][m'] = local rank p's shard j(m', l) */
    float* part = (float*)(recv1 + N * rec);     /* M x s fp32 partial sums */
    char* send2 = (char*)(part + (size_t)M * s); /* M records: [m'] = partial of shard j(m', l) */
    char* recv2 = send2 + (size_t)M * rec;       /* M records: [p] = node p's partial of shard j(m, l) */
    float* tmp = (float*)(recv2 + (size_t)M * rec);   /* one shard of fp32 */
    if (L > 1) {
        for (int lp = 0; lp < L; lp++)
            for (int mp = 0; mp < M; mp++) {
                int j = nodes ? nodes[mp * L + lp] : mp * L + lp;
                size_t bad = quant_encode(Q, j, nbmax, (const char*)buf + (size_t)j * s * (size_t)eb, eb, send1 + ((size_t)lp * M + mp) * rec);
                if (bad) quant_refuse_nonfinite(Q, j, bad, unit, "--quantize-grads", "gradient of");
            }
        hostcoll_exchange(intra, L, l, send1, recv1, (size_t)M * rec / 4, 4, 1, poll, comm_ctx_what ? comm_ctx_what : "reduce-scatter node (qgZ)");
    }
    for (int mp = 0; mp < M; mp++) {
        int j = nodes ? nodes[mp * L + l] : mp * L + l;
        float* ps = part + (size_t)mp * s;
        if (L == 1) for (size_t i = 0; i < s; i++) ps[i] = quant_load((const char*)buf + (size_t)j * s * (size_t)eb, eb, i);
        for (int p = 0; p < L && L > 1; p++) {
            quant_decode(Q, j, nbmax, recv1 + ((size_t)p * M + mp) * rec, p == 0 ? ps : tmp, 4);
            if (p > 0) for (size_t i = 0; i < s; i++) ps[i] += tmp[i];
        }
        if (M > 1) {
            size_t bad = quant_encode(Q, j, nbmax, ps, 4, send2 + (size_t)mp * rec);
            if (bad) quant_refuse_nonfinite(Q, j, bad, unit, "--quantize-grads", L > 1 ? "node-summed gradient of" : "gradient of");
        }
    }
    float* sum = part;   /* M = 1: the node's partial is the sum; else the partials are sent and part[0..s) is reused */
    if (M > 1) {
        hostcoll_exchange(inter, M, m, send2, recv2, rec / 4, 4, 1, poll, comm_ctx_what ? comm_ctx_what : "reduce-scatter nodes (qgZ)");
        int me = nodes ? nodes[m * L + l] : m * L + l;
        for (int p = 0; p < M; p++) {
            quant_decode(Q, me, nbmax, recv2 + (size_t)p * rec, p == 0 ? sum : tmp, 4);
            if (p > 0) for (size_t i = 0; i < s; i++) sum[i] += tmp[i];
        }
    }
    if (eb == 4) for (size_t i = 0; i < s; i++) ((float*)acc)[i] = sum[i] + ((float*)acc)[i];
    else for (size_t i = 0; i < s; i++) ((uint16_t*)acc)[i] = bf16_bits_from_float(sum[i] + bf16_bits_to_float(((uint16_t*)acc)[i]));
}

/* qwZ's all-gather, in place as hostcoll_all_gather (buf: n shards of
   Q->shard elements of eb bytes; Q: the unit's block layout, nbmax its
   scales per record): this rank's shard is quantized (quant_encode) into
   its record in `scratch` (n records of quant_record_bytes), the records
   are all-gathered, and every shard of buf, this rank's too, becomes the
   dequantized values of its record. A non-finite value in this rank's
   shard ends the run with one line naming the tensor, the element and the
   step (MPI_Abort: every rank ends). unit: for that message. */
static inline void hostcoll_all_gather_quantized(MPI_Comm mc, void* buf, const QuantLayout* Q, size_t nbmax, int eb,
                                                 void* scratch, int unit, int poll) {
    int n, r;
    MPI_Comm_size(mc, &n);
    MPI_Comm_rank(mc, &r);
    size_t rec = quant_record_bytes(nbmax, Q->shard, Q->bits), sb = Q->shard * (size_t)eb;
    size_t bad = quant_encode(Q, r, nbmax, (char*)buf + (size_t)r * sb, eb, (char*)scratch + (size_t)r * rec);
    if (bad) quant_refuse_nonfinite(Q, r, bad, unit, "--quantize-weights", "parameter");
    hostcoll_exchange(mc, n, r, scratch, scratch, rec / 4, 4, 0, poll, comm_ctx_what ? comm_ctx_what : "all-gather (int8)");
    for (int q = 0; q < n; q++) quant_decode(Q, q, nbmax, (const char*)scratch + (size_t)q * rec, (char*)buf + (size_t)q * sb, eb);
}


#endif /* LLMC_COMM_QUANT_H */
