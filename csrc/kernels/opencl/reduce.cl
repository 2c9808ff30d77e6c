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

KERNEL SUF(tt_max_axis)(GLOBAL const T *x, GLOBAL T *y, tt_long m, tt_long k, tt_long n, tt_long first)
{
    const tt_long r = GID0();
    if (r >= m * n)
        return;
    const tt_long i = r / n, j = r % n;
    T best = first ? x[i * k * n + j] : y[r];
    for (tt_long l = first ? 1 : 0; l < k; l++) {
        T v = x[(i * k + l) * n + j];
        if (v > best || TT_ISNAN(v))
            best = v;
    }
    y[r] = best;
}

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
