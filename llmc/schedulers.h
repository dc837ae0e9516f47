/*
 schedulers.h: the learning-rate schedule. Linear warmup over warmup_steps
 from lr/warmup to lr, then cosine decay to final_frac * lr at max_steps
 (Loshchilov & Hutter, SGDR, without restarts), as GPT-2/3 training uses.
 step counts from 0.
*/
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>

static inline float lr_schedule(float lr, int step, int warmup_steps, int max_steps, float final_frac) {
    if (step < warmup_steps) return lr * (float)(step + 1) / (float)warmup_steps;
    if (max_steps <= warmup_steps) return lr;
    float ratio = (float)(step - warmup_steps) / (float)(max_steps - warmup_steps);
    if (ratio > 1.0f) ratio = 1.0f;
    float coeff = 0.5f * (1.0f + cosf(3.14159265358979f * ratio));
    float lr_min = lr * final_frac;
    return lr_min + coeff * (lr - lr_min);
}

#endif /* LLMC_SCHEDULERS_H */
