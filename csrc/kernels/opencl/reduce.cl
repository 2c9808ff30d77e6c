/* Reductions and broadcasts along the middle axis of a tile viewed as (m, k, n)
 * (csrc/kernels/cpu/reduce.c): one work-item per output element, sums in ACC. */
KERNEL SUF(tt_add_bcast)(GLOBAL const T *x, GLOBAL T *y, GLOBAL const T *b, tt_long m, tt_long k, tt_long n,
                         R alpha, R beta)
{
    const tt_long e = GID0();
    if (e >= m * k * n)
        return;
    const tt_long i = e / (k * n), j = e % n;
    y[e] = (T)alpha * x[e] + (T)beta * b[i * n + j];
}

KERNEL SUF(tt_bcast)(GLOBAL T *y, GLOBAL const T *b, tt_long m, tt_long k, tt_long n, R alpha)
{
    const tt_long e = GID0();
    if (e >= m * k * n)
        return;
    const tt_long i = e / (k * n), j = e % n;
    y[e] = (T)alpha * b[i * n + j];
}

KERNEL SUF(tt_sum_axis)(GLOBAL const T *x, GLOBAL T *y, tt_long m, tt_long k, tt_long n, tt_long first, R alpha)
{
    const tt_long r = GID0();
    if (r >= m * n)
        return;
    const tt_long i = r / n, j = r % n;
    ACC acc = 0;
    for (tt_long l = 0; l < k; l++)
        acc += x[(i * k + l) * n + j];
    y[r] = (T)((first ? (ACC)0 : (ACC)y[r]) + (ACC)alpha * acc);
}

/* max_axis / min_axis: the extreme over k (OP is > or <), NaN propagates; `first` overwrites y. */
#define TT_EXTREME_AXIS(OP)                                                                            \
    {                                                                                                  \
        const tt_long r = GID0();                                                                      \
        if (r >= m * n)                                                                                \
            return;                                                                                    \
        const tt_long i = r / n, j = r % n;                                                            \
        T best = first ? x[i * k * n + j] : y[r];                                                      \
        for (tt_long l = first ? 1 : 0; l < k; l++) {                                                  \
            T v = x[(i * k + l) * n + j];                                                              \
            if (v OP best || TT_ISNAN(v))                                                              \
                best = v;                                                                              \
        }                                                                                              \
        y[r] = best;                                                                                   \
    }
KERNEL SUF(tt_max_axis)(GLOBAL const T *x, GLOBAL T *y, tt_long m, tt_long k, tt_long n, tt_long first)
TT_EXTREME_AXIS(>)

/* One group sums the tile: y = beta y + alpha sum(x) (beta == 0: y is not read). */
KERNEL SUF(tt_sum_all)(GLOBAL const T *x, GLOBAL T *y, tt_long nx, R alpha, R beta)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    ACC acc = 0;
    for (tt_long i = LID0(); i < nx; i += TT_DEV_LOCAL)
        acc += x[i];
    acc = tt_block_sum(acc, red);
    if (LID0() == 0) {
        ACC prev = beta == (R)0 ? (ACC)0 : (ACC)beta * (ACC)y[0];
        y[0] = (T)(prev + (ACC)alpha * acc);
    }
}

/* ---- reductions of tiletrain/ops/reduce.py and the losses (kernels.def `# --- reductions`;
 * the CPU bodies in csrc/kernels/cpu/reduce.c say what each computes) ---- */
#ifndef TT_REDUCE_CL_HELPERS
#define TT_REDUCE_CL_HELPERS
/* v replaces best: strictly better, or the first NaN */
DEVFN int tt_arg_better(ACC v, ACC best, tt_long ismin)
{
    if (TT_ISNAN(v))
        return !TT_ISNAN(best);
    return !TT_ISNAN(best) && (ismin ? v < best : v > best);
}
DEVFN ACC tt_softplus_neg(ACC x) { return log1p(exp(-fabs(x))) + (x < 0 ? -x : (ACC)0); }
DEVFN ACC tt_pnorm_term(ACC v, ACC p)
{
    v = fabs(v);
    return p == 2 ? v * v : p == 1 ? v : p == 0 ? (ACC)(v != 0) : pow(v, p);
}
#endif

KERNEL SUF(tt_min_axis)(GLOBAL const T *x, GLOBAL T *y, tt_long m, tt_long k, tt_long n, tt_long first)
TT_EXTREME_AXIS(<)

/* arg_axis / arg_carry (one body, as on the CPU): ci == 0: index = koff + l; else index =
 * (koff + l) * inner + ci. */
DEVFN void SUF(tt_arg_run)(GLOBAL const T *x, GLOBAL const tt_long *ci, GLOBAL T *v, GLOBAL tt_long *idx, tt_long m,
                           tt_long k, tt_long n, tt_long first, tt_long koff, tt_long inner, tt_long ismin)
{
    const tt_long r = GID0();
    if (r >= m * n)
        return;
    const tt_long i = r / n, j = r % n;
    for (tt_long l = 0; l < k; l++) {
        const T c = x[(i * k + l) * n + j];
        if ((first && l == 0) || tt_arg_better(c, v[r], ismin)) {
            v[r] = c;
            idx[r] = ci ? (koff + l) * inner + ci[(i * k + l) * n + j] : koff + l;
        }
    }
}

KERNEL SUF(tt_arg_axis)(GLOBAL const T *x, GLOBAL T *v, GLOBAL tt_long *idx, tt_long m, tt_long k, tt_long n,
                        tt_long first, tt_long koff, tt_long ismin)
{
    SUF(tt_arg_run)(x, 0, v, idx, m, k, n, first, koff, 1, ismin);
}

KERNEL SUF(tt_arg_carry)(GLOBAL const T *x, GLOBAL const tt_long *ci, GLOBAL T *v, GLOBAL tt_long *idx, tt_long m,
                         tt_long k, tt_long n, tt_long first, tt_long koff, tt_long inner, tt_long ismin)
{
    SUF(tt_arg_run)(x, ci, v, idx, m, k, n, first, koff, inner, ismin);
}

KERNEL SUF(tt_arg_scatter)(GLOBAL T *dx, GLOBAL const tt_long *idx, GLOBAL const T *g, tt_long m, tt_long k,
                           tt_long n, tt_long koff)
{
    const tt_long e = GID0();
    if (e >= m * k * n)
        return;
    const tt_long i = e / (k * n), l = (e / n) % k, j = e % n;
    dx[e] = idx[i * n + j] == koff + l ? g[i * n + j] : (T)0;
}

KERNEL SUF(tt_sqdev_axis)(GLOBAL const T *x, GLOBAL const T *mu, GLOBAL T *y, tt_long m, tt_long k, tt_long n,
                          tt_long first, R alpha)
{
    const tt_long r = GID0();
    if (r >= m * n)
        return;
    const tt_long i = r / n, j = r % n;
    const ACC c = mu[r];
    ACC acc = 0;
    for (tt_long l = 0; l < k; l++) {
        const ACC d = (ACC)x[(i * k + l) * n + j] - c;
        acc += d * d;
    }
    y[r] = (T)((first ? (ACC)0 : (ACC)y[r]) + (ACC)alpha * acc);
}

KERNEL SUF(tt_expsum_axis)(GLOBAL const T *x, GLOBAL const T *mx, GLOBAL T *y, tt_long m, tt_long k, tt_long n,
                           tt_long first)
{
    const tt_long r = GID0();
    if (r >= m * n)
        return;
    const tt_long i = r / n, j = r % n;
    const ACC c = mx[r];
    ACC acc = 0;
    for (tt_long l = 0; l < k; l++)
        acc += exp((ACC)x[(i * k + l) * n + j] - c);
    y[r] = (T)((first ? (ACC)0 : (ACC)y[r]) + acc);
}

KERNEL SUF(tt_eq_mask)(GLOBAL const T *x, GLOBAL const T *v, GLOBAL T *y, tt_long n)
{
    const tt_long e = GID0();
    if (e < n)
        y[e] = x[e] == v[e] ? (T)1 : (T)0;
}

KERNEL SUF(tt_lse_finish)(GLOBAL const T *mx, GLOBAL const T *s, GLOBAL T *y, tt_long n)
{
    const tt_long e = GID0();
    if (e < n)
        y[e] = isinf(mx[e]) ? mx[e] : (T)((ACC)mx[e] + log((ACC)s[e]));
}

KERNEL SUF(tt_pnorm_axis)(GLOBAL const T *x, GLOBAL T *y, tt_long m, tt_long k, tt_long n, tt_long first, R p)
{
    const tt_long r = GID0();
    if (r >= m * n)
        return;
    const tt_long i = r / n, j = r % n;
    ACC acc = 0;
    for (tt_long l = 0; l < k; l++)
        acc += tt_pnorm_term((ACC)x[(i * k + l) * n + j], (ACC)p);
    y[r] = (T)((first ? (ACC)0 : (ACC)y[r]) + acc);
}

KERNEL SUF(tt_pnorm_root)(GLOBAL const T *s, GLOBAL T *y, tt_long n, R p)
{
    const tt_long e = GID0();
    if (e >= n)
        return;
    const ACC v = s[e];
    y[e] = (T)(p == 0 || p == 1 ? v : p == 2 ? sqrt(v) : pow(v, (ACC)1 / (ACC)p));
}

KERNEL SUF(tt_pnorm_bwd)(GLOBAL const T *x, GLOBAL const T *out, GLOBAL const T *g, GLOBAL T *dx, tt_long n, R p)
{
    const tt_long e = GID0();
    if (e >= n)
        return;
    const ACC v = x[e], o = out[e], pp = p, sg = (ACC)((v > 0) - (v < 0));
    ACC r;
    if (pp == 0 || o == 0)
        r = 0;
    else if (pp == 1)
        r = sg;
    else if (pp == 2)
        r = v / o;
    else
        r = sg * pow(fabs(v), pp - 1) / pow(o, pp - 1);
    dx[e] = (T)(r * (ACC)g[e]);
}

KERNEL SUF(tt_absdiff)(GLOBAL const T *a, GLOBAL const T *b, GLOBAL T *y, tt_long n)
{
    const tt_long e = GID0();
    if (e < n)
        y[e] = fabs(a[e] - b[e]);
}

KERNEL SUF(tt_absdiff_bwd)(GLOBAL const T *a, GLOBAL const T *b, GLOBAL const T *g, GLOBAL T *dx, tt_long n,
                           R alpha)
{
    const tt_long e = GID0();
    if (e >= n)
        return;
    const T d = a[e] - b[e];
    dx[e] = (T)((ACC)alpha * (ACC)((d > 0) - (d < 0)) * (ACC)g[e]);
}

KERNEL SUF(tt_bce_logits)(GLOBAL const T *x, GLOBAL const T *t, GLOBAL const T *w, GLOBAL const T *pw, GLOBAL T *y,
                          tt_long n)
{
    const tt_long e = GID0();
    if (e >= n)
        return;
    const ACC xv = x[e], tv = t[e], lw = 1 + ((ACC)pw[e] - 1) * tv;
    y[e] = (T)((ACC)w[e] * ((1 - tv) * xv + lw * tt_softplus_neg(xv)));
}

KERNEL SUF(tt_bce_logits_bwd)(GLOBAL const T *x, GLOBAL const T *t, GLOBAL const T *w, GLOBAL const T *pw,
                              GLOBAL const T *g, GLOBAL T *dx, GLOBAL T *dt, tt_long n)
{
    const tt_long e = GID0();
    if (e >= n)
        return;
    const ACC xv = x[e], tv = t[e], pv = pw[e], lw = 1 + (pv - 1) * tv;
    const ACC sig = xv >= 0 ? 1 / (1 + exp(-xv)) : exp(xv) / (1 + exp(xv));
    const ACC s = (ACC)w[e] * (ACC)g[e];
    dx[e] = (T)(s * ((1 - tv) + lw * (sig - 1)));
    dt[e] = (T)(s * (-xv + (pv - 1) * tt_softplus_neg(xv)));
}
