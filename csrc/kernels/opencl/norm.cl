/* layer_norm and rms_norm over the last axis (csrc/kernels/cpu/norm.c): a tile of x is
 * (m, n); row statistics are (m,), column parameters (n,).  Row sums: one group per row
 * (`rows m`); column sums: one work-item per column looping over the rows. */
/* A row's mean and sum of squared deviations from it (one group per row; every item returns them). */
DEVFN ACC SUF(tt_row_mean_m2)(GLOBAL const T *row, tt_long n, LPTR ACC *red, ACC *m2)
{
    ACC s = 0;
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL)
        s += row[j];
    const ACC mb = tt_block_sum(s, red) / (ACC)n;
    ACC d2 = 0;
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL) {
        const ACC d = row[j] - mb;
        d2 += d * d;
    }
    *m2 = tt_block_sum(d2, red);
    return mb;
}

KERNEL SUF(tt_layer_norm_stats)(GLOBAL const T *x, GLOBAL T *mean, GLOBAL T *m2, tt_long m, tt_long n,
                                tt_long first, R na)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long i = GROUP0();
    GLOBAL const T *row = x + i * n;
    ACC m2b;
    const ACC mb = SUF(tt_row_mean_m2)(row, n, red, &m2b);
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

#ifndef TT_NORM_HELPERS
#define TT_NORM_HELPERS
/* 1 / sqrt(max(alpha s, 0) + eps) (norm_rstd's arithmetic) */
DEVFN ACC tt_inv_std(ACC alpha, ACC s, ACC eps)
{
    const ACC v = alpha * s;
    return 1.0 / sqrt((v > 0.0 ? v : 0.0) + eps);
}
#endif

/* Whole rows per tile (`rows m`, one group per row): layer_norm_stats, norm_rstd (alpha =
 * 1 / n) and layer_norm_fwd in one task, each value rounded to T where those kernels store
 * it, as the CPU body does.  `first` is always 1 (a row is one tile). */
DEVFN void SUF(tt_layer_norm_one_row)(GLOBAL const T *row, GLOBAL T *yrow, GLOBAL T *mean, GLOBAL T *rstd,
                                      GLOBAL const T *w, GLOBAL const T *b, tt_long i, tt_long n, R eps,
                                      LPTR ACC *red)
{
    ACC m2b;
    const ACC mb = SUF(tt_row_mean_m2)(row, n, red, &m2b);
    const T mu = (T)mb, r = (T)tt_inv_std(1.0 / (ACC)n, (ACC)(T)m2b, (ACC)eps);
    if (LID0() == 0) {
        mean[i] = mu;
        rstd[i] = r;
    }
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL)
        yrow[j] = (row[j] - mu) * r * w[j] + b[j];
}

DEVFN void SUF(tt_rms_norm_one_row)(GLOBAL const T *row, GLOBAL T *yrow, GLOBAL T *rstd, GLOBAL const T *w,
                                    tt_long i, tt_long n, R eps, LPTR ACC *red)
{
    ACC s = 0;
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL)
        s += (ACC)row[j] * row[j];
    s = tt_block_sum(s, red);
    const T r = (T)tt_inv_std(1.0 / (ACC)n, (ACC)(T)s, (ACC)eps);
    if (LID0() == 0)
        rstd[i] = r;
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL)
        yrow[j] = row[j] * r * w[j];
}

KERNEL SUF(tt_layer_norm_row)(GLOBAL const T *x, GLOBAL T *y, GLOBAL T *mean, GLOBAL T *rstd, GLOBAL const T *w,
                              GLOBAL const T *b, tt_long m, tt_long n, tt_long first, R eps)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long i = GROUP0();
    SUF(tt_layer_norm_one_row)(x + i * n, y + i * n, mean, rstd, w, b, i, n, eps, red);
}

KERNEL SUF(tt_rms_norm_row)(GLOBAL const T *x, GLOBAL T *y, GLOBAL T *rstd, GLOBAL const T *w, tt_long m, tt_long n,
                            tt_long first, R eps)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long i = GROUP0();
    SUF(tt_rms_norm_one_row)(x + i * n, y + i * n, rstd, w, i, n, eps, red);
}

/* s = x + r (rounded to T), then the row kernel on s.  Each work-item reads back only the
 * elements of s it wrote itself. */
KERNEL SUF(tt_add_layer_norm_row)(GLOBAL const T *x, GLOBAL const T *r, GLOBAL T *s, GLOBAL T *y, GLOBAL T *mean,
                                  GLOBAL T *rstd, GLOBAL const T *w, GLOBAL const T *b, tt_long m, tt_long n,
                                  tt_long first, R eps)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long i = GROUP0();
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL)
        s[i * n + j] = x[i * n + j] + r[i * n + j];
    SUF(tt_layer_norm_one_row)(s + i * n, y + i * n, mean, rstd, w, b, i, n, eps, red);
}

KERNEL SUF(tt_add_rms_norm_row)(GLOBAL const T *x, GLOBAL const T *r, GLOBAL T *s, GLOBAL T *y, GLOBAL T *rstd,
                                GLOBAL const T *w, tt_long m, tt_long n, tt_long first, R eps)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long i = GROUP0();
    for (tt_long j = LID0(); j < n; j += TT_DEV_LOCAL)
        s[i * n + j] = x[i * n + j] + r[i * n + j];
    SUF(tt_rms_norm_one_row)(s + i * n, y + i * n, rstd, w, i, n, eps, red);
}
