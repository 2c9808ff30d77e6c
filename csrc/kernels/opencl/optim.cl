/* Optimizer updates and gradient clipping (csrc/kernels/cpu/optim.c). */
KERNEL SUF(tt_adamw)(GLOBAL const T *g, GLOBAL T *p, GLOBAL T *m, GLOBAL T *v, tt_long n, R lr, R beta1, R beta2,
                     R eps, R weight_decay, R bc1, R bc2)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    /* the scalars in double first, then T, as the CPU body computes them */
    const T b1 = (T)beta1, b2 = (T)beta2, e = (T)eps;
    const T decay = (T)(1.0 - (double)lr * (double)weight_decay);
    const T step_size = (T)((double)lr / (double)bc1);
    const T sqrt_bc2 = (T)sqrt((double)bc2);
    const T gi = g[i];
    T pi = p[i] * decay;
    const T mi = b1 * m[i] + ((T)1 - b1) * gi;
    const T vi = b2 * v[i] + ((T)1 - b2) * gi * gi;
    const T denom = (T)sqrt((double)vi) / sqrt_bc2 + e;
    pi -= step_size * mi / denom;
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
}

KERNEL SUF(tt_adamw_comp)(GLOBAL const T *g, GLOBAL T *p, GLOBAL T *m, GLOBAL T *v, GLOBAL T *u, tt_long n, R lr,
                          R beta1, R beta2, R eps, R weight_decay, R bc1, R bc2, R sc_a, R sc_b)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    /* the scalars in double first, then T, as the CPU body computes them */
    const T b1 = (T)beta1, b2 = (T)beta2, e = (T)eps, sa = (T)sc_a;
    const T sb = (T)((double)sc_b * (1.0 - (double)beta1));
    const T step_size = (T)((double)lr / (double)bc1), inv_bc2 = (T)(1.0 / (double)bc2);
    const T wd = (T)((double)lr * (double)weight_decay);
    const T gi = g[i];
    const T mi = b1 * m[i] + ((T)1 - b1) * gi;
    const T vi = b2 * v[i] + ((T)1 - b2) * gi * gi;
    const T ui = step_size * ((sa * mi + sb * gi) / ((T)sqrt((double)(vi * inv_bc2)) + e)) + wd * p[i];
    m[i] = mi;
    v[i] = vi;
    u[i] = ui;
    p[i] -= ui;
}

KERNEL SUF(tt_sgd)(GLOBAL const T *g, GLOBAL T *p, tt_long n, R lr, R weight_decay)
{
    const tt_long i = GID0();
    if (i < n)
        p[i] -= (T)lr * (g[i] + (T)weight_decay * p[i]);
}

KERNEL SUF(tt_sgd_momentum)(GLOBAL const T *g, GLOBAL T *p, GLOBAL T *buf, tt_long n, tt_long first,
                            tt_long nesterov, R lr, R momentum, R dampening, R weight_decay)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    const T mu = (T)momentum;
    const T d = g[i] + (T)weight_decay * p[i];
    const T b = first ? d : mu * buf[i] + ((T)1 - (T)dampening) * d;
    buf[i] = b;
    p[i] -= (T)lr * (nesterov ? d + mu * b : b);
}

/* y[i, j] += sum_l x[i, l, j]^2 */
KERNEL SUF(tt_sumsq_acc)(GLOBAL const T *x, GLOBAL T *y, tt_long m, tt_long k, tt_long n)
{
    const tt_long r = GID0();
    if (r >= m * n)
        return;
    const tt_long i = r / n, j = r % n;
    ACC acc = 0;
    for (tt_long l = 0; l < k; l++) {
        const ACC v = x[(i * k + l) * n + j];
        acc += v * v;
    }
    y[r] += (T)acc;
}

KERNEL SUF(tt_sqrt_scalar)(GLOBAL const T *x, GLOBAL T *y, tt_long n)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = (T)sqrt((double)x[i]);
}

/* g *= min(1, max_norm / (sqrt(sumsq) + 1e-6)) */
KERNEL SUF(tt_clip_scale)(GLOBAL T *g, GLOBAL const T *sumsq, tt_long m, tt_long k, tt_long n, R max_norm)
{
    const tt_long i = GID0();
    if (i >= m * k * n)
        return;
    const double coef = (double)max_norm / (sqrt((double)sumsq[0]) + 1e-6);
    if (coef < 1.0)
        g[i] *= (T)coef;
}
