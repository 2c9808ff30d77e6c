/* softmax, log_softmax and fused cross-entropy (csrc/kernels/cpu/softmax.c): a tile is
 * (m, k, n) around the span axis k; row statistics (running max mx, sum s of exp(x - mx))
 * live in (m * n) buffers, row r = i * n + j.  Row reductions: one group per row. */
#ifndef TT_SOFTMAX_HELPERS
#define TT_SOFTMAX_HELPERS
/* Column offset of a tile along the span, and whether it is the span's last tile. */
DEVFN tt_long tt_span_col0(tt_long tile, tt_long vtile, tt_long ncols, int *last)
{
    tt_long vgrid = vtile > 0 ? (ncols + vtile - 1) / vtile : 1;
    if (vgrid < 1)
        vgrid = 1;
    tt_long t = tile % vgrid;
    if (t < 0)
        t += vgrid;
    *last = t == vgrid - 1;
    return t * vtile;
}

DEVFN int tt_target_valid(tt_long t, tt_long ignore_index, tt_long ncols)
{
    return t != ignore_index && t >= 0 && t < ncols;
}
#endif

/* Merge this tile's values of row (i, j) into the running (mx, s) (first: overwrite); all
 * work-items of the group get the new pair. */
DEVFN void SUF(tt_row_stats)(GLOBAL const T *x, tt_long i, tt_long j, tt_long k, tt_long n, tt_long first,
                             GLOBAL const T *mx, GLOBAL const T *s, tt_long r, LPTR ACC *red, ACC *out_m,
                             ACC *out_s)
{
    ACC tm = -TT_INF;
    for (tt_long l = LID0(); l < k; l += TT_DEV_LOCAL)
        tm = tt_nanmax(tm, (ACC)x[(i * k + l) * n + j]);
    ACC nm = tt_block_max(tm, red);
    ACC acc0 = 0;
    if (!first) {
        const ACC om = mx[r];
        nm = tt_nanmax(nm, om);
        /* equal maxima (both -inf included) keep the running sum as it is */
        acc0 = (ACC)s[r] * (om == nm ? (ACC)1 : exp(om - nm));
    }
    ACC acc = 0;
    for (tt_long l = LID0(); l < k; l += TT_DEV_LOCAL)
        acc += exp((ACC)x[(i * k + l) * n + j] - nm);
    acc = tt_block_sum(acc, red);
    *out_m = nm;
    *out_s = acc0 + acc;
}

KERNEL SUF(tt_softmax_stats)(GLOBAL const T *x, GLOBAL T *mx, GLOBAL T *s, tt_long m, tt_long k, tt_long n,
                             tt_long first)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long r = GROUP0(), i = r / n, j = r % n;
    ACC nm, ns;
    SUF(tt_row_stats)(x, i, j, k, n, first, mx, s, r, red, &nm, &ns);
    if (LID0() == 0) {
        mx[r] = (T)nm;
        s[r] = (T)ns;
    }
}

KERNEL SUF(tt_softmax_apply)(GLOBAL const T *x, GLOBAL T *y, GLOBAL const T *mx, GLOBAL const T *s, tt_long m,
                             tt_long k, tt_long n, tt_long islog)
{
    const tt_long e = GID0();
    if (e >= m * k * n)
        return;
    const tt_long r = (e / (k * n)) * n + e % n;
    const ACC v = (ACC)x[e] - (ACC)mx[r];
    y[e] = (T)(islog ? v - log((ACC)s[r]) : exp(v) / (ACC)s[r]);
}

/* d = sum over the span of g * softmax(x) (softmax) or of g (log_softmax) */
KERNEL SUF(tt_softmax_bwd_dot)(GLOBAL const T *x, GLOBAL const T *g, GLOBAL const T *mx, GLOBAL const T *s,
                               GLOBAL T *d, tt_long m, tt_long k, tt_long n, tt_long first, tt_long islog)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long r = GROUP0(), i = r / n, j = r % n;
    const ACC mr = mx[r], sr = s[r];
    ACC acc = 0;
    for (tt_long l = LID0(); l < k; l += TT_DEV_LOCAL) {
        const tt_long e = (i * k + l) * n + j;
        acc += islog ? (ACC)g[e] : (ACC)g[e] * (exp((ACC)x[e] - mr) / sr);
    }
    acc = tt_block_sum(acc, red);
    if (LID0() == 0)
        d[r] = (T)((first ? (ACC)0 : (ACC)d[r]) + acc);
}

KERNEL SUF(tt_softmax_bwd)(GLOBAL const T *x, GLOBAL const T *g, GLOBAL T *dx, GLOBAL const T *mx,
                           GLOBAL const T *s, GLOBAL const T *d, tt_long m, tt_long k, tt_long n, tt_long islog)
{
    const tt_long e = GID0();
    if (e >= m * k * n)
        return;
    const tt_long r = (e / (k * n)) * n + e % n;
    const ACC p = exp((ACC)x[e] - (ACC)mx[r]) / (ACC)s[r];
    dx[e] = (T)(islog ? (ACC)g[e] - p * (ACC)d[r] : p * ((ACC)g[e] - (ACC)d[r]));
}

/* Online row stats, and loss = lse - x[target] finished on the span's last tile (0 for an
 * ignored or out-of-range target); w = 1 for a counted target. */
KERNEL SUF(tt_cross_entropy_fwd)(GLOBAL const T *x, GLOBAL const tt_long *tgt, GLOBAL T *mx, GLOBAL T *s,
                                 GLOBAL T *loss, GLOBAL T *w, tt_long m, tt_long k, tt_long n, tt_long first,
                                 tt_long tile, tt_long vtile, tt_long ncols, tt_long ignore_index)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long r = GROUP0(), i = r / n, j = r % n;
    int last;
    const tt_long col0 = tt_span_col0(tile, vtile, ncols, &last);
    ACC nm, ns;
    SUF(tt_row_stats)(x, i, j, k, n, first, mx, s, r, red, &nm, &ns);
    if (LID0() != 0)
        return;
    const tt_long t = tgt[r];
    const int valid = tt_target_valid(t, ignore_index, ncols);
    T l = first ? (T)0 : loss[r];
    mx[r] = (T)nm;
    s[r] = (T)ns;
    w[r] = valid ? (T)1 : (T)0;
    if (valid && t >= col0 && t - col0 < k)
        l -= x[(i * k + (t - col0)) * n + j]; /* running -x[target] */
    if (last)
        l = valid ? (T)(((ACC)(T)nm + (ACC)l) + log((ACC)(T)ns)) : (T)0;
    loss[r] = l;
}

/* dx = (softmax(x) - onehot(target)) * gr per row; 0 where the target does not count */
KERNEL SUF(tt_cross_entropy_bwd)(GLOBAL const T *x, GLOBAL T *dx, GLOBAL const tt_long *tgt, GLOBAL const T *mx,
                                 GLOBAL const T *s, GLOBAL const T *gr, tt_long m, tt_long k, tt_long n,
                                 tt_long tile, tt_long vtile, tt_long ncols, tt_long ignore_index)
{
    const tt_long e = GID0();
    if (e >= m * k * n)
        return;
    int last;
    const tt_long col0 = tt_span_col0(tile, vtile, ncols, &last);
    const tt_long i = e / (k * n), l = (e / n) % k, j = e % n, r = i * n + j;
    const tt_long t = tgt[r];
    if (!tt_target_valid(t, ignore_index, ncols)) {
        dx[e] = (T)0;
        return;
    }
    ACC p = exp((ACC)x[e] - (ACC)mx[r]) / (ACC)s[r];
    if (col0 + l == t)
        p -= 1;
    dx[e] = (T)(p * (ACC)gr[r]);
}
