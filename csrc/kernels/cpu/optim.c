/* Fused optimizer updates and gradient-norm clipping, element-wise over one tile. */
#include <math.h>
#include "tt_cpu.h"

/* AdamW as PyTorch computes it: decoupled weight decay, then
 * p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), with bc_i = 1 - beta_i^step. */
TT_SIMD_CLONES void tt_cpu_adamw(const tt_args_adamw *a, const void *g, void *p, void *m, void *v)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pg = g;
        T *pp = p, *pm = m, *pv = v;
        const T b1 = (T)a->beta1, b2 = (T)a->beta2, eps = (T)a->eps;
        const T decay = (T)(1.0 - a->lr * a->weight_decay);
        const T step_size = (T)(a->lr / a->bc1);
        const T sqrt_bc2 = (T)sqrt(a->bc2);
        for (int64_t i = 0; i < a->n; i++) {
            T gi = pg[i];
            pp[i] *= decay;
            pm[i] = b1 * pm[i] + (1 - b1) * gi;
            pv[i] = b2 * pv[i] + (1 - b2) * gi * gi;
            T denom = (T)sqrt(pv[i]) / sqrt_bc2 + eps;
            pp[i] -= step_size * pm[i] / denom;
        }
    });
}

/* AdamW with delay compensation (kernels.def adamw_comp): Adam's moments, then the first
 * moment applied a m + b (1 - beta1) g, and the update u (kept: LWP extrapolates along it). */
TT_SIMD_CLONES void tt_cpu_adamw_comp(const tt_args_adamw_comp *a, const void *g, void *p, void *m, void *v, void *u)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pg = g;
        T *pp = p, *pm = m, *pv = v, *pu = u;
        const T b1 = (T)a->beta1, b2 = (T)a->beta2, eps = (T)a->eps, sa = (T)a->sc_a;
        const T sb = (T)(a->sc_b * (1.0 - a->beta1));
        const T step_size = (T)(a->lr / a->bc1), inv_bc2 = (T)(1.0 / a->bc2), wd = (T)(a->lr * a->weight_decay);
        for (int64_t i = 0; i < a->n; i++) {
            T gi = pg[i];
            T mi = b1 * pm[i] + (1 - b1) * gi;
            T vi = b2 * pv[i] + (1 - b2) * gi * gi;
            T ui = step_size * ((sa * mi + sb * gi) / ((T)sqrt(vi * inv_bc2) + eps)) + wd * pp[i];
            pm[i] = mi;
            pv[i] = vi;
            pu[i] = ui;
            pp[i] -= ui;
        }
    });
}

void tt_cpu_sgd(const tt_args_sgd *a, const void *g, void *p)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pg = g;
        T *pp = p, lr = (T)a->lr, wd = (T)a->weight_decay;
        for (int64_t i = 0; i < a->n; i++)
            pp[i] -= lr * (pg[i] + wd * pp[i]);
    });
}

/* PyTorch's SGD with momentum: d = g + wd p; buf = d on the first step, else
 * momentum buf + (1 - dampening) d; the step is buf (or d + momentum buf with Nesterov). */
void tt_cpu_sgd_momentum(const tt_args_sgd_momentum *a, const void *g, void *p, void *buf)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pg = g;
        T *pp = p, *pb = buf;
        const T lr = (T)a->lr, mu = (T)a->momentum, damp = (T)a->dampening, wd = (T)a->weight_decay;
        for (int64_t i = 0; i < a->n; i++) {
            T d = pg[i] + wd * pp[i];
            pb[i] = a->first ? d : mu * pb[i] + (1 - damp) * d;
            T step = a->nesterov ? d + mu * pb[i] : pb[i];
            pp[i] -= lr * step;
        }
    });
}

/* y[i, j] += sum_l x[i, l, j]^2 (accumulates: the caller zeroes y once). */
void tt_cpu_sumsq_acc(const tt_args_sumsq_acc *a, const void *x, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        for (int64_t i = 0; i < a->m; i++)
            for (int64_t j = 0; j < a->n; j++) {
                double acc = 0.0;
                for (int64_t l = 0; l < a->k; l++) {
                    double v = px[(i * a->k + l) * a->n + j];
                    acc += v * v;
                }
                py[i * a->n + j] += (T)acc;
            }
    });
}

void tt_cpu_sqrt_scalar(const tt_args_sqrt_scalar *a, const void *x, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        for (int64_t i = 0; i < a->n; i++)
            py[i] = (T)sqrt((double)px[i]);
    });
}

/* g *= min(1, max_norm / (sqrt(sumsq) + 1e-6)), PyTorch's clip_grad_norm_ coefficient. */
void tt_cpu_clip_scale(const tt_args_clip_scale *a, void *g, const void *sumsq)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        T *pg = g;
        double norm = sqrt((double)((const T *)sumsq)[0]);
        double coef = a->max_norm / (norm + 1e-6);
        if (coef < 1.0) {
            T c = (T)coef;
            for (int64_t i = 0; i < a->m * a->k * a->n; i++)
                pg[i] *= c;
        }
    });
}
