/*
 zero/report.h: what every run prints, predicted beside measured beside the
 paper's formula: the memory ledger per category and tier (zero_print_memory),
 the traffic counted on every collective beside the plan's prediction, in
 handed bytes, ring wire bytes and Psi per step (zero_print_traffic), and an
 offloaded optimizer's bytes between tiers (zero_print_offload_traffic).
 Each returns the number of mismatches; the trainer exits 2 when any rank
 has one (the ledger contract: predicted == allocated == formula).
*/
#ifndef LLMC_ZERO_REPORT_H
#define LLMC_ZERO_REPORT_H

#include "estimate.h"
#include "optimizer.h"

/* Paper-formula bytes of each model-state category at this stage, on the
   unpadded Psi (what the ZeRO paper would print). */
static inline void zero_formula_memory(const ZeroPlan* P, double out[MEM_NUM]) {
    double psi = (double)P->num_parameters, N = (double)P->num_ranks;
    for (int i = 0; i < MEM_NUM; i++) out[i] = -1.0;
    out[MEM_PARAMS] = P->param_bytes * psi / (P->zero_stage >= 3 ? N : 1.0);
    out[MEM_GRADS] = P->grad_bytes * psi / (P->zero_stage >= 2 ? N : 1.0);
    out[MEM_MASTER] = P->master_bytes * psi / (P->zero_stage >= 1 ? N : 1.0);
    out[MEM_ADAM_M] = 4.0 * psi / (P->zero_stage >= 1 ? N : 1.0);
    out[MEM_ADAM_V] = out[MEM_ADAM_M];
    if (P->eval_only) out[MEM_GRADS] = out[MEM_MASTER] = out[MEM_ADAM_M] = out[MEM_ADAM_V] = 0.0;   /* no training */
}

/* Print predicted vs allocated bytes per category for this rank: the
   backend's memory, and with an offloaded optimizer the host and/or disk
   tier beside it (the disk total is the scratch file's fstat size). Returns
   the number of categories where they differ (each printed as ERROR). */
static inline int zero_print_memory(FILE* out, const ZeroPlan* P, const Ledger* L) {
    double f[MEM_NUM];
    zero_formula_memory(P, f);
    static const char* forms[4][5] = {
        {"p Psi", "g Psi", "4 Psi", "4 Psi", "4 Psi"},
        {"p Psi", "g Psi", "4 Psi/N", "4 Psi/N", "4 Psi/N"},
        {"p Psi", "g Psi/N", "4 Psi/N", "4 Psi/N", "4 Psi/N"},
        {"p Psi/N", "g Psi/N", "4 Psi/N", "4 Psi/N", "4 Psi/N"}};
    int p = P->param_bytes, g = P->grad_bytes, k = P->master_bytes + 8;
    /* the paper's per-rank model-state formula with this program's bytes */
    char law[160];
    zero_formula_text(law, sizeof(law), P->zero_stage, p, g, k, 0);
    if (P->eval_only)   /* -x 0: the params alone */
        snprintf(law, sizeof(law), "p Psi%s = %d Psi%s (-x 0, evaluation only: no grads, no optimizer states)",
                 P->zero_stage == 3 ? "/N" : "", p, P->zero_stage == 3 ? "/N" : "");
    int off = P->offload != OFFLOAD_NONE;
    int hostcol = off && (P->offload == OFFLOAD_HOST || P->offload_staging), diskcol = P->offload == OFFLOAD_DISK;
    fprintf(out, "memory ledger, rank %d of %d%s, zero_stage %d: Psi = %zu parameters (%zu padded, %zu per shard), p=%d g=%d k=%d bytes/param%s\n",
            P->rank, P->num_ranks, P->replicas > 1 ? " in its shard group (HSDP: N = the group)" : "", P->zero_stage,
            P->num_parameters, P->padded_parameters, P->shard_parameters, p, g, k,
            P->offload == OFFLOAD_HOST ? "; optimizer states offloaded to host memory" : diskcol ? "; optimizer states offloaded to disk" : "");
    fprintf(out, "  %-28s %16s %16s", "category", "predicted B", "allocated B");
    if (hostcol) fprintf(out, " %16s %16s", "host pred. B", "host alloc. B");
    if (diskcol) fprintf(out, " %16s %16s", "disk pred. B", "disk alloc. B");
    fprintf(out, " %16s  %s\n", "paper formula B", off ? "(first two columns: the backend's memory)" : "");
    int bad = 0;
    unsigned long long tp = 0, ta = 0, th[2] = {0, 0}, td[2] = {0, 0};
    double tf = 0;
    for (int i = 0; i < MEM_NUM; i++) {
        if (i == MEM_MASTER && P->master_bytes == 0) continue;
        int used = L->predicted[i] || L->allocated[i] || L->predicted_host[i] || L->allocated_host[i] || L->predicted_disk[i] || L->allocated_disk[i];
        if ((i == MEM_OFFLOAD_BUF || i == MEM_OFFLOAD_STAGING || i == MEM_RECOMPUTE || i == MEM_SECONDARY || i == MEM_INV_TREE) && !used) continue;
        int ok = L->predicted[i] == L->allocated[i] && L->predicted_host[i] == L->allocated_host[i] && L->predicted_disk[i] == L->allocated_disk[i];
        bad += !ok;
        tp += L->predicted[i]; ta += L->allocated[i];
        th[0] += L->predicted_host[i]; th[1] += L->allocated_host[i];
        td[0] += L->predicted_disk[i]; td[1] += L->allocated_disk[i];
        char fs[300] = "";
        if (f[i] >= 0) { snprintf(fs, sizeof(fs), "%16.0f  %s", f[i], P->eval_only && i >= MEM_GRADS && i <= MEM_ADAM_V ? "0 (-x 0: no training)" : forms[P->zero_stage][i < 5 ? i : 0]); tf += f[i]; }
        else if (L->formula[i][0]) snprintf(fs, sizeof(fs), "%16s  %s", "", L->formula[i]);   /* the model's own (activations) */
        fprintf(out, "  %-28s %16llu %16llu", mem_names[i], L->predicted[i], L->allocated[i]);
        if (hostcol) fprintf(out, " %16llu %16llu", L->predicted_host[i], L->allocated_host[i]);
        if (diskcol) fprintf(out, " %16llu %16llu", L->predicted_disk[i], L->allocated_disk[i]);
        fprintf(out, " %s%s\n", fs[0] ? fs : "", ok ? "" : "   <-- ERROR: allocated != predicted");
        if (i == MEM_ADAM_V) {
            unsigned long long hp = 0, ha = 0, dp = 0, da = 0;
            for (int k2 = MEM_PARAMS; k2 <= MEM_ADAM_V; k2++) {
                hp += L->predicted_host[k2]; ha += L->allocated_host[k2]; dp += L->predicted_disk[k2]; da += L->allocated_disk[k2];
            }
            fprintf(out, "  %-28s %16llu %16llu", "= model states", ledger_model_states(L->predicted), ledger_model_states(L->allocated));
            if (hostcol) fprintf(out, " %16llu %16llu", hp, ha);
            if (diskcol) fprintf(out, " %16llu %16llu", dp, da);
            fprintf(out, " %16.0f  %s (%.2f bytes/param of Psi%s)\n", tf, law, (double)ledger_model_states(L->allocated) / (double)P->num_parameters,
                    off ? " in the backend's memory" : "");
        }
        /* the transients by unit class: which buffers they are */
        if ((i == MEM_GATHERED && L->predicted[i]) || (i == MEM_UNIT_GRADS && L->predicted[i])) {
            for (int c = 0; c < P->num_classes; c++) {
                const ZeroClass* K = &P->classes[c];
                int nbuf = i == MEM_GATHERED ? K->num_slots : K->grad_buffers;
                int eb = i == MEM_GATHERED ? p : g;
                if (!nbuf) continue;
                fprintf(out, "    %-26s %16llu %16s  %d x %zu elements (its largest unit)\n", K->name,
                        (unsigned long long)nbuf * K->max_padded * (unsigned long long)eb, "", nbuf, K->max_padded);
            }
        }
    }
    fprintf(out, "  %-28s %16llu %16llu", "= total", tp, ta);
    if (hostcol) fprintf(out, " %16llu %16llu", th[0], th[1]);
    if (diskcol) fprintf(out, " %16llu %16llu", td[0], td[1]);
    fprintf(out, "\n");
    if (diskcol) {
        int fok = L->disk_file_bytes == (long long)td[0];
        bad += !fok;
        fprintf(out, "  disk: scratch file %s (unlinked at creation: its space returns when the process ends): fstat size %lld B, "
                "%lld B of blocks reserved%s\n", L->disk_file[0] ? L->disk_file : "(not open)", L->disk_file_bytes, L->disk_reserved_bytes,
                fok ? "" : "   <-- ERROR: file size != predicted disk bytes");
    }
    fprintf(out, "  live at the peak: every buffer above (all are allocated at start and held to the end, so the peak is the total;"
                 " the trace's memory counter shows when the transients hold data)\n");
    fprintf(out, "  ledger: %s\n", bad ? "ERROR: mismatch" : (off ? "OK (allocated == predicted in every category and tier)" : "OK (allocated == predicted in every category)"));
    return bad;
}

/* Print counted vs predicted traffic of the training phase over `steps`
   optimizer steps, with the volume per step in units of Psi, the ZeRO
   paper's measure: ring wire bytes / (element bytes x (k-1)/k x Psi) for a
   collective over k ranks (the shard group's G for reduce-scatter,
   all-gather and the embedding rows; the R replica groups for HSDP's
   all-reduce of one shard, whose volume is therefore 2/G Psi), and at stage
   3 what each unit class contributed. Returns the number of mismatching
   collectives. */
static inline int zero_print_traffic(FILE* out, const ZeroPlan* P, const Comm* c, int steps) {
    unsigned long long per[COLL_NUM];
    zero_predict_traffic(P, per);
    int G = P->num_ranks, R = P->replicas;
    if (R > 1)
        fprintf(out, "traffic, rank %d of %d in its shard group, %d replica groups (HSDP), zero_stage %d, %d optimizer steps x %d micro-steps (training only):\n",
                P->rank, G, R, P->zero_stage, steps, P->grad_accum_steps);
    else
        fprintf(out, "traffic, rank %d of %d, zero_stage %d, %d optimizer steps x %d micro-steps (training only):\n",
                P->rank, G, P->zero_stage, steps, P->grad_accum_steps);
    fprintf(out, "  %-26s %8s %18s %18s %18s %10s\n", "collective", "calls", "handed B", "predicted B", "ring wire B", "Psi/step");
    int bad = 0;
    double inside = 0, across = 0;
    for (int k = 0; k < COLL_NUM; k++) {
        unsigned long long pred = per[k] * (unsigned long long)steps;
        int ok = c->handed[PHASE_TRAIN][k] == pred;
        bad += !ok;
        double psi = 0;
        int n = zero_coll_ranks(P, k);
        if (k == COLL_SECONDARY_GATHER && P->secondary < 2) continue;   /* the rows only with hpZ, qgZ */
        if ((k == COLL_QG_INSIDE || k == COLL_QG_ACROSS) && !P->quant_grads_bits) continue;
        if (k != COLL_SCALARS && n > 1 && steps > 0) {
            double elem = k == COLL_ALL_GATHER || k == COLL_SECONDARY_GATHER ? P->param_bytes : P->grad_bytes;
            psi = (double)c->wire[PHASE_TRAIN][k] / steps / (elem * (double)P->num_parameters * (n - 1) / (double)n);
            if (k == COLL_ALL_REDUCE) across += psi; else inside += psi;
        }
        fprintf(out, "  %-26s %8llu %18llu %18llu %18llu %10.3f%s\n", coll_name(k), c->calls[PHASE_TRAIN][k],
                c->handed[PHASE_TRAIN][k], pred, c->wire[PHASE_TRAIN][k], psi, ok ? "" : "   <-- ERROR: counted != predicted");
    }
    if (G > 1 || R > 1) {
        fprintf(out, "  volume per optimizer step: %.3f Psi (ZeRO paper: 2 Psi at stages 0-2, 3 Psi at stage 3)\n", inside + across);
        if (R > 1)
            fprintf(out, "  HSDP: %.3f Psi inside the %d-rank shard groups, %.3f Psi across the %d groups (the all-reduce of a 1/%d shard: 2/G Psi)\n",
                    inside, G, across, R, G);
        if (P->zero_stage == 3 && G > 1) {
            unsigned long long A = (unsigned long long)P->grad_accum_steps;
            fprintf(out, "  stage-3 all-gathers by unit class, per optimizer step:");
            for (int k = 0; k < P->num_classes; k++) {
                const ZeroClass* K = &P->classes[k];
                unsigned long long times = K->mode == ZERO_KEEP_STEP ? 1 : K->mode == ZERO_KEEP_MICRO ? A : A * (unsigned long long)K->uses;
                fprintf(out, "%s %s %.3f Psi (%llu x %.1f%% of Psi: %s)", k ? ";" : "", K->name,
                        (double)times * K->total_padded / (double)P->num_parameters, times,
                        100.0 * K->total_padded / (double)P->num_parameters,
                        K->mode == ZERO_KEEP_STEP ? "gathered once, kept for the step"
                        : K->mode == ZERO_KEEP_MICRO ? "kept from forward to backward" : "gathered before every use");
            }
            fprintf(out, "\n");
            if (P->quant_block) {
                unsigned long long q = 0, full = 0;
                for (int u = 0; u < P->num_units; u++) { q += (unsigned long long)P->num_ranks * P->units[u].qrecord; full += (unsigned long long)P->param_bytes * P->units[u].padded; }
                fprintf(out, "  qwZ: every weight all-gather carries int8 blocks of %zu elements with an fp32 scale each: %llu B per gather of every unit "
                        "against %llu B in %s (%.3fx)\n", P->quant_block, q, full, P->param_bytes == 2 ? "bf16" : "fp32", (double)q / (double)full);
            }
            if (P->quant_grads_bits) {
                unsigned long long q = 0, full = 0;
                for (int u = 0; u < P->num_units; u++) { q += P->units[u].grecord; full += (unsigned long long)P->grad_bytes * P->units[u].shard; }
                fprintf(out, "  qgZ: every grad reduce-scatter carries int%d blocks of %zu elements with an fp32 scale each: all-to-all inside the %d-rank nodes, "
                        "fp32 sums in rank order, requantized, all-to-all across the %d nodes; a shard's record %.3fx its %s bytes\n",
                        P->quant_grads_bits, P->quant_grads_block, P->qg_local, P->num_ranks / P->qg_local, (double)q / (double)full,
                        P->grad_bytes == 2 ? "bf16" : "fp32");
            }
            if (P->secondary > 1)
                fprintf(out, "  hpZ: %d ranks share a secondary shard (%zu elements, 1/%d of every unit gathered more than once per step); "
                        "a unit's first all-gather of a step reads the %d-rank primary shards, the rest run among the %d\n",
                        P->secondary, P->secondary_elements, P->secondary, G, P->secondary);
        }
    } else {
        fprintf(out, "  single rank: nothing crosses the wire\n");
    }
    fprintf(out, "  traffic: %s\n", bad ? "ERROR: mismatch" : "OK (counted == predicted for every collective)");
    return bad;
}

/* With an offloaded optimizer: bytes moved between tiers by the `steps`
   optimizer steps (disk: what the I/O thread transferred; staging: what the
   step copied), beside zero_predict_offload_traffic x steps, and the I/O
   thread's time and throughput. Returns the number of mismatches (0 and
   nothing printed without offload). */
static inline int zero_print_offload_traffic(FILE* out, const ZeroEngine* E, int steps) {
    const ZeroPlan* P = E->plan;
    if (P->offload == OFFLOAD_NONE) return 0;
    static const char* offl_names[OFFL_NUM] = {"disk -> memory (read)", "memory -> disk (write)",
                                               "device -> host (grads)", "host -> device (params)"};
    unsigned long long per[OFFL_NUM], counted[OFFL_NUM];
    zero_predict_offload_traffic(P, per);
    const OffloadFile* F = &E->off_file;
    for (int k = 0; k < OFFL_NUM; k++) counted[k] = E->off_staged[k];
    if (P->offload == OFFLOAD_DISK) { counted[OFFL_DISK_READ] = F->bytes_read; counted[OFFL_DISK_WRITE] = F->bytes_written; }
    fprintf(out, "offload traffic, rank %d of %d, zero_stage %d, %d optimizer steps: optimizer states in %s%s\n", P->rank, P->num_ranks,
            P->zero_stage, steps, P->offload == OFFLOAD_DISK ? "the scratch file " : "host memory", P->offload == OFFLOAD_DISK ? F->path : "");
    fprintf(out, "  %-26s %18s %18s %16s  %s\n", "between tiers", "counted B", "predicted B", "per step B", "formula (per rank and step)");
    int bad = 0, nm = P->master_bytes ? 1 : 0;
    char form[4][64];
    snprintf(form[OFFL_DISK_READ], 64, "%d Psi/N (%s of the own shards)", 4 * zero_offload_arrays(P), nm ? "master, m, v" : "m, v");
    snprintf(form[OFFL_DISK_WRITE], 64, "%d Psi/N", 4 * zero_offload_arrays(P));
    snprintf(form[OFFL_TO_HOST], 64, nm ? "g Psi/N (the reduced grad shards)" : "(g+p) Psi/N (grad and param shards)");
    snprintf(form[OFFL_TO_BACKEND], 64, "p Psi/N (the updated param shards)");
    for (int k = 0; k < OFFL_NUM; k++) {
        if (per[k] == 0 && counted[k] == 0) continue;
        unsigned long long pred = per[k] * (unsigned long long)steps;
        int ok = counted[k] == pred;
        bad += !ok;
        fprintf(out, "  %-26s %18llu %18llu %16llu  %s%s\n", offl_names[k], counted[k], pred, per[k], form[k], ok ? "" : "   <-- ERROR: counted != predicted");
    }
    if (P->offload == OFFLOAD_DISK) {
        double mb = (double)(F->bytes_read + F->bytes_written) / 1e6;
        fprintf(out, "  I/O thread: %.3f s in pread/pwrite (%.1f MB/s); the steps waited %.3f s for reads (%.3f s per step); "
                "outside the steps (init, checkpoints, states): %llu B read, %llu B written\n",
                F->io_seconds, F->io_seconds > 0 ? mb / F->io_seconds : 0.0, E->off_wait_seconds,
                steps > 0 ? E->off_wait_seconds / steps : 0.0, E->off_other_read, E->off_other_written);
    }
    fprintf(out, "  offload traffic: %s\n", bad ? "ERROR: mismatch" : "OK (counted == predicted between every pair of tiers)");
    return bad;
}

#endif /* LLMC_ZERO_REPORT_H */
