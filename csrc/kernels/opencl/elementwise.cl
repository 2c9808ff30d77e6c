/* Element-wise kernels over one tile of n elements (csrc/kernels/cpu/elementwise.c). */
KERNEL SUF(tt_scale)(GLOBAL const T *x, GLOBAL T *y, tt_long n, R alpha)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = (T)alpha * x[i];
}

KERNEL SUF(tt_add_scalar)(GLOBAL const T *x, GLOBAL T *y, tt_long n, R alpha, R s)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = (T)alpha * x[i] + (T)s;
}

KERNEL SUF(tt_rdiv_scalar)(GLOBAL const T *x, GLOBAL T *y, tt_long n, R s)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = (T)s / x[i];
}

KERNEL SUF(tt_add)(GLOBAL const T *a, GLOBAL const T *b, GLOBAL T *c, tt_long n, R alpha, R beta)
{
    const tt_long i = GID0();
    if (i < n)
        c[i] = (T)alpha * a[i] + (T)beta * b[i];
}

KERNEL SUF(tt_mul)(GLOBAL const T *a, GLOBAL const T *b, GLOBAL T *c, tt_long n, R alpha)
{
    const tt_long i = GID0();
    if (i < n)
        c[i] = (T)alpha * a[i] * b[i];
}

KERNEL SUF(tt_div)(GLOBAL const T *a, GLOBAL const T *b, GLOBAL T *c, tt_long n, R alpha)
{
    const tt_long i = GID0();
    if (i < n)
        c[i] = (T)alpha * a[i] / b[i];
}

KERNEL SUF(tt_axpy)(GLOBAL const T *x, GLOBAL T *y, tt_long n, R alpha, R beta)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = beta == (R)1 ? y[i] + (T)alpha * x[i] : (T)alpha * x[i] + (T)beta * y[i];
}
