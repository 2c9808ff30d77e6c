/* layer_norm and rms_norm over the last axis (csrc/kernels/cpu/norm.c): a tile of x is
 * (m, n); row statistics are (m,), column parameters (n,).  Row sums: one group per row
 * (`rows m`); column sums: one work-item per column looping over the rows. */
KERNEL SUF(tt_layer_norm_stats)(GLOBAL const T *x, GLOBAL T *mean, GLOBAL T *m2, tt_long m, tt_long n,
                                tt_long first, R na)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long i = GROUP0();
    GLOBAL const T *row = x + i * n;
    ACC s = 0;
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL)
        s += row[j];
    const ACC mb = tt_block_sum(s, red) / (ACC)n;
    ACC d2 = 0;
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL) {
        const ACC d = row[j] - mb;
        d2 += d * d;
    }
    const ACC m2b = tt_block_sum(d2, red);
    if (LID0() != 0)
        return;
    if (first || na <= (R)0) {
        mean[i] = (T)mb;
        m2[i] = (T)m2b;
    } else { /* Chan et al.'s pairwise merge with the columns before this tile */
        const ACC a = na, b = (ACC)n, t = a + b;
        const ACC ma = mean[i], delta = mb - ma;
        mean[i] = (T)(ma + delta * (b / t));
        m2[i] = (T)((ACC)m2[i] + m2b + delta * delta * (a * b / t));
    }
}

KERNEL SUF(tt_rms_norm_stats)(GLOBAL const T *x, GLOBAL T *ss, tt_long m, tt_long n, tt_long first)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long i = GROUP0();
    GLOBAL const T *row = x + i * n;
    ACC s = 0;
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL)
        s += (ACC)row[j] * row[j];
    s = tt_block_sum(s, red);
    if (LID0() == 0)
        ss[i] = (T)(first ? s : (ACC)ss[i] + s);
}

/* s = 1 / sqrt(max(alpha s, 0) + eps) in place */
KERNEL SUF(tt_norm_rstd)(GLOBAL T *s, tt_long n, R alpha, R eps)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    const double v = (double)alpha * (double)s[i];
    s[i] = (T)(1.0 / sqrt((v > 0.0 ? v : 0.0) + (double)eps));
}

KERNEL SUF(tt_layer_norm_fwd)(GLOBAL const T *x, GLOBAL T *y, GLOBAL const T *mean, GLOBAL const T *rstd,
                              GLOBAL const T *w, GLOBAL const T *b, tt_long m, tt_long n)
{
    const tt_long e = GID0();
    if (e >= m * n)
        return;
    const tt_long i = e / n, j = e % n;
    y[e] = (x[e] - mean[i]) * rstd[i] * w[j] + b[j];
}

KERNEL SUF(tt_rms_norm_fwd)(GLOBAL const T *x, GLOBAL T *y, GLOBAL const T *rstd, GLOBAL const T *w, tt_long m,
                            tt_long n)
{
    const tt_long e = GID0();
    if (e >= m * n)
        return;
    const tt_long i = e / n, j = e % n;
    y[e] = x[e] * rstd[i] * w[j];
}

/* ra += alpha sum(dy w), rb += alpha sum(dy w xhat) per row */
KERNEL SUF(tt_layer_norm_bwd_rows)(GLOBAL const T *dy, GLOBAL const T *x, GLOBAL const T *mean,
                                   GLOBAL const T *rstd, GLOBAL T *ra, GLOBAL T *rb, GLOBAL const T *w, tt_long m,
                                   tt_long n, tt_long first, R alpha)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long i = GROUP0();
    const ACC mu = mean[i], r = rstd[i];
    ACC sa = 0, sb = 0;
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL) {
        const ACC g = (ACC)dy[i * n + j] * w[j];
        sa += g;
        sb += g * ((x[i * n + j] - mu) * r);
    }
    sa = tt_block_sum(sa, red);
    sb = tt_block_sum(sb, red);
    if (LID0() == 0) {
        ra[i] = (T)((first ? (ACC)0 : (ACC)ra[i]) + (ACC)alpha * sa);
        rb[i] = (T)((first ? (ACC)0 : (ACC)rb[i]) + (ACC)alpha * sb);
    }
}

KERNEL SUF(tt_layer_norm_bwd_x)(GLOBAL const T *dy, GLOBAL const T *x, GLOBAL T *dx, GLOBAL const T *mean,
                                GLOBAL const T *rstd, GLOBAL const T *ra, GLOBAL const T *rb, GLOBAL const T *w,
                                tt_long m, tt_long n)
{
    const tt_long e = GID0();
    if (e >= m * n)
        return;
    const tt_long i = e / n, j = e % n;
    const T r = rstd[i];
    const T xhat = (x[e] - mean[i]) * r;
    dx[e] = r * (dy[e] * w[j] - ra[i] - xhat * rb[i]);
}

/* dw += sum over rows of dy xhat, db += sum of dy: one work-item per column */
KERNEL SUF(tt_layer_norm_bwd_w)(GLOBAL const T *dy, GLOBAL const T *x, GLOBAL const T *mean,
                                GLOBAL const T *rstd, GLOBAL T *dw, GLOBAL T *db, tt_long m, tt_long n,
                                tt_long first)
{
    const tt_long j = GID0();
    if (j >= n)
        return;
    ACC sw = 0, sb = 0;
    for (tt_long i = 0; i < m; i++) {
        const ACC g = dy[i * n + j];
        sw += g * ((x[i * n + j] - (ACC)mean[i]) * (ACC)rstd[i]);
        sb += g;
    }
    dw[j] = (T)((first ? (ACC)0 : (ACC)dw[j]) + sw);
    db[j] = (T)((first ? (ACC)0 : (ACC)db[j]) + sb);
}

KERNEL SUF(tt_rms_norm_bwd_rows)(GLOBAL const T *dy, GLOBAL const T *x, GLOBAL const T *rstd, GLOBAL T *rb,
                                 GLOBAL const T *w, tt_long m, tt_long n, tt_long first, R alpha)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long i = GROUP0();
    ACC s = 0;
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL)
        s += (ACC)dy[i * n + j] * w[j] * x[i * n + j];
    s = tt_block_sum(s, red) * (ACC)rstd[i];
    if (LID0() == 0)
        rb[i] = (T)((first ? (ACC)0 : (ACC)rb[i]) + (ACC)alpha * s);
}

KERNEL SUF(tt_rms_norm_bwd_x)(GLOBAL const T *dy, GLOBAL const T *x, GLOBAL T *dx, GLOBAL const T *rstd,
                              GLOBAL const T *rb, GLOBAL const T *w, tt_long m, tt_long n)
{
    const tt_long e = GID0();
    if (e >= m * n)
        return;
    const tt_long i = e / n, j = e % n;
    const T r = rstd[i];
    dx[e] = r * (dy[e] * w[j] - x[e] * r * rb[i]);
}

KERNEL SUF(tt_rms_norm_bwd_w)(GLOBAL const T *dy, GLOBAL const T *x, GLOBAL const T *rstd, GLOBAL T *dw, tt_long m,
                              tt_long n, tt_long first)
{
    const tt_long j = GID0();
    if (j >= n)
        return;
    ACC sw = 0;
    for (tt_long i = 0; i < m; i++)
        sw += (ACC)dy[i * n + j] * x[i * n + j] * (ACC)rstd[i];
    dw[j] = (T)((first ? (ACC)0 : (ACC)dw[j]) + sw);
}
