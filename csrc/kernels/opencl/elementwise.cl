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

/* erfinv of one value (the generated erfinv body calls SUF(tt_erfinv_value)): the CPU helper's first
 * guess and Halley steps (csrc/kernels/cpu/tt_cpu.h, tt_erfinv_value_f64), in ACC, rounded once. */
DEVFN T SUF(tt_erfinv_value)(T v)
{
    const ACC x = v, a = fabs(x);
    if (!(a < 1.0))
        return a == 1.0 ? (x < 0 ? (T)-TT_INF : (T)TT_INF) : (T)sqrt(-a); /* NaN beyond 1 and for NaN */
    if (a == 0.0)
        return v;
    const ACC k = 1.1283791670955126, c = 1.0 - a;
    ACC y;
    if (a < 0.5) {
        const ACC a2 = a * a;
        y = 0.88622692545275801 * a * (1.0 + a2 * (0.26179938779914941 + a2 * 0.14393173084921979));
    } else {
        const ACC w = log(c * (1.0 + a));
        const ACC t = 4.330746750799873 + 0.5 * w;
        y = sqrt(sqrt(t * t - w / 0.147) - t);
    }
    for (int i = 0; i < 3; i++) {
        const ACC f = a < 0.5 ? erf(y) - a : c - erfc(y);
        const ACC u = f / (k * exp(-y * y));
        y -= u / (1.0 + y * u);
    }
    return (T)(x < 0 ? -y : y);
}
