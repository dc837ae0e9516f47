/*
 llmc/run/eval.h: the val loss (evaluate: the same tokens and the same sum
 at every rank count) and the text sample, both collective. For the loop's
 periodic phase.
*/
#ifndef LLMC_RUN_EVAL_H
#define LLMC_RUN_EVAL_H
#include "run.h"


/* Mean loss over the first nseq sequences of the val split (its file
   order: dataloader_read_seqs), the same tokens at every rank count. They
   are dealt as global micro-batches of N x B sequences, rank r taking
   sequences j*N*B + r*B .. + B-1 of batch j; in the last batch some ranks
   get fewer than B or none (a rank with none forwards one sequence of
   token 0 and does not count it: stage 3 needs every rank at the gathers).
   The loss is the mean over all nseq*T tokens: each forward's mean times its
   sequence count, summed in double and over the ranks in rank order
   (comm_allreduce_sum_host), divided by nseq. A read error does not stop
   the loop (the others would wait at the next gather): it is reported
   collectively after it. A signal (interrupt.h) stops it at the next
   forward: before each, the ranks agree (comm_agree_interrupt: a signal to
   any one rank stops all at the same forward); then *stop is the signal
   and the loss is not computed (0). */
static float evaluate(GPT2* m, DataLoader* val, long nseq, Comm* comm, int* stop) {
    char err[ERRLEN] = "";
    long NB = (long)comm->world_size * m->B, batches = (nseq + NB - 1) / NB;
    double s = 0.0;
    /* --invariant 1: each sequence's loss sum (double, in token order) at its
       place in the val set, zero elsewhere; the all-reduce adds only +0.0 to
       each (exact in any order), and the sum runs in sequence order: the
       printed val loss does not depend on N or B */
    double* seq_sum = m->opt.invariant ? (double*)calloc_or_die((size_t)nseq, sizeof(double), "val loss per sequence") : NULL;
    intr_test_slow("evaluation", comm->rank);
    for (long j = 0; j < batches; j++) {
        if ((*stop = comm_agree_interrupt(comm)) != 0) { zero_release_all(&m->engine); free(seq_sum); return 0.0f; }
        long first = j * NB + (long)comm->rank * m->B, n = nseq - first;
        if (n > m->B) n = m->B;
        if (n > 0 && !err[0] && dataloader_read_seqs(val, (size_t)first, (int)n, err, ERRLEN) == 0) {
            s += (double)gpt2_forward(m, val->inputs, val->targets, (int)n, m->T, 0.0f) * (double)n;
            for (long b = 0; seq_sum && b < n; b++) {
                double v = 0.0;
                for (int t = 0; t < m->T; t++) v += m->host_losses[(size_t)b * m->T + t];
                seq_sum[first + b] = v;
            }
        } else {
            memset(val->inputs, 0, (size_t)m->T * sizeof(int));
            memset(val->targets, 0, (size_t)m->T * sizeof(int));
            gpt2_forward(m, val->inputs, val->targets, 1, m->T, 0.0f);
        }
    }
    comm_check_all(comm, err);
    zero_release_all(&m->engine); /* stage 3: the next training step gathers afresh */
    if (seq_sum) {
        for (long i0 = 0; i0 < nseq; i0 += 1 << 20) comm_allreduce_sum_host(comm, seq_sum + i0, (int)(nseq - i0 < (1 << 20) ? nseq - i0 : 1 << 20));
        s = 0.0;
        for (long i = 0; i < nseq; i++) s += seq_sum[i];
        free(seq_sum);
        return (float)(s / ((double)nseq * (double)m->T));
    }
    comm_allreduce_sum_host(comm, &s, 1);
    return (float)(s / (double)nseq);
}

/* Sample gen tokens after <|endoftext|>, every rank in lockstep (stage 3
   needs all ranks for the gathers); rank 0 prints. A signal stops it at
   the next forward, as evaluate: returns the signal (0: complete). */
static int sample(GPT2* m, Tokenizer* tok, int have_tok, int gen, unsigned long long seed, int step) {
    int stop = 0;
    int T = m->T;
    int eot = have_tok ? (int)tok->eot_token : 50256;
    if (eot >= m->config.vocab_size) eot = 0;
    if (gen > T - 1) gen = T - 1;
    int* toks = (int*)malloc_or_die((size_t)T * sizeof(int), "sample tokens");
    float* probs = (float*)malloc_or_die((size_t)m->config.vocab_size * sizeof(float), "sample probs");
    for (int i = 0; i < T; i++) toks[i] = eot;
    Rng r;
    rng_seed(&r, seed, 1000003ULL + (unsigned long long)step);
    int V = m->config.vocab_size;
    if (m->comm->rank == 0) printf("sample at step %d: ", step);
    Utf8Stream utf8; /* whole UTF-8 characters only: a token may end inside one */
    utf8_stream_init(&utf8);
    intr_test_slow("sample", m->comm->rank);
    for (int t = 1; t <= gen; t++) {
        if ((stop = comm_agree_interrupt(m->comm)) != 0) break;
        gpt2_forward(m, toks, NULL, 1, t, 0.0f);
        backend_floatX_to_floats(probs, m->last_logits, (size_t)V);
        float mx = probs[0];
        for (int v = 1; v < V; v++) if (probs[v] > mx) mx = probs[v];
        double sum = 0.0;
        for (int v = 0; v < V; v++) { probs[v] = expf(probs[v] - mx); sum += probs[v]; }
        double u = rng_uniform(&r) * sum, cdf = 0.0;
        int next = V - 1;
        for (int v = 0; v < V; v++) { cdf += probs[v]; if (u < cdf) { next = v; break; } }
        toks[t] = next;
        if (m->comm->rank == 0) {
            if (have_tok) tokenizer_print_utf8(tok, (uint32_t)next, &utf8, stdout);
            else printf("%d ", next);
        }
    }
    if (m->comm->rank == 0) { utf8_stream_finish(&utf8, stdout); printf("%s\n", stop ? " [stopped]" : ""); fflush(stdout); }
    zero_release_all(&m->engine);
    free(toks); free(probs);
    return stop;
}

#endif /* LLMC_RUN_EVAL_H */
