/* Single-process training step: forward/backward, clip, AdamW. */
#include "train/train.h"
#include <math.h>

void train_apply_adamw(gpt_model *m, adamw_state *opt, const optim_config *oc, int t, double lr,
                       double grad_scale) {
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        adamw_update_span(opt, m->params, m->grads, pi->offset, pi->count, lr, grad_scale,
                          pi->decay != 0, t, oc);
    }
    opt->t = t;
}

int train_step(gpt_model *m, adamw_state *opt, const optim_config *oc, int t, const int *inputs,
               const int *targets, int B, int T, train_stats *st) {
    gpt_zero_grad(m);
    if (gpt_forward_backward(m, inputs, targets, B, T, &st->loss) < 0) return -1;
    st->grad_norm = sqrt(optim_sumsq(m->grads, m->num_params));
    st->clip_scale = optim_clip_scale(st->grad_norm, oc->grad_clip);
    st->lr = optim_lr_at(oc, t);
    train_apply_adamw(m, opt, oc, t, st->lr, st->clip_scale);
    return 0;
}
