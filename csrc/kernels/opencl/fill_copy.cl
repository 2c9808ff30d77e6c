/* fill and copy: also instantiated for int64 tiles (T = tt_long) and bool tiles (T = tt_uchar;
 * TO_T(v) stores any nonzero value as 1). */
KERNEL SUF(tt_fill)(GLOBAL T *y, tt_long n, R value)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = TO_T(value);
}

KERNEL SUF(tt_copy)(GLOBAL const T *x, GLOBAL T *y, tt_long n)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = x[i];
}

KERNEL SUF(tt_after)(GLOBAL const T *x, GLOBAL T *y, tt_long n)
{
    (void)x; /* no work: the task orders y after x by its data dependencies */
    (void)y;
    (void)n;
}
