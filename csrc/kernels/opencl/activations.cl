/* Activations and dropout, element-wise (csrc/kernels/cpu/activations.c), computed in
 * the element type (float math for float32 tiles: the GPU's fast path). */
#ifndef TT_ACTIVATIONS_HELPERS
#define TT_ACTIVATIONS_HELPERS
#define TT_SQRT_2_OVER_PI 0.79788456080286535588
#define TT_INV_SQRT_2 0.70710678118654752440
#define TT_INV_SQRT_2PI 0.39894228040143267794

DEVFN tt_ulong tt_splitmix64(tt_ulong z)
{
    z += (tt_ulong)0x9E3779B97F4A7C15UL;
    z = (z ^ (z >> 30)) * (tt_ulong)0xBF58476D1CE4E5B9UL;
    z = (z ^ (z >> 27)) * (tt_ulong)0x94D049BB133111EBUL;
    return z ^ (z >> 31);
}
#endif

KERNEL SUF(tt_gelu)(GLOBAL const T *x, GLOBAL T *y, tt_long n, tt_long approx)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    const T v = x[i], hf = (T)0.5, one = (T)1;
    if (approx)
        y[i] = hf * v * (one + tanh((T)TT_SQRT_2_OVER_PI * (v + (T)0.044715 * v * v * v)));
    else
        y[i] = hf * v * (one + erf(v * (T)TT_INV_SQRT_2));
}

KERNEL SUF(tt_gelu_backward)(GLOBAL const T *x, GLOBAL const T *dy, GLOBAL T *dx, tt_long n, tt_long approx)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    const T v = x[i], hf = (T)0.5, one = (T)1;
    if (approx) {
        const T t = tanh((T)TT_SQRT_2_OVER_PI * (v + (T)0.044715 * v * v * v));
        const T du = (T)TT_SQRT_2_OVER_PI * (one + (T)(3.0 * 0.044715) * v * v);
        dx[i] = dy[i] * (hf * (one + t) + hf * v * (one - t * t) * du);
    } else {
        const T cdf = hf * (one + erf(v * (T)TT_INV_SQRT_2));
        const T pdf = (T)TT_INV_SQRT_2PI * exp(-hf * v * v);
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

KERNEL SUF(tt_relu)(GLOBAL const T *x, GLOBAL T *y, tt_long n)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = x[i] > (T)0 ? x[i] : (T)0;
}

KERNEL SUF(tt_relu_backward)(GLOBAL const T *x, GLOBAL const T *dy, GLOBAL T *dx, tt_long n)
{
    const tt_long i = GID0();
    if (i < n)
        dx[i] = x[i] > (T)0 ? dy[i] : (T)0;
}

KERNEL SUF(tt_silu)(GLOBAL const T *x, GLOBAL T *y, tt_long n)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    const T v = x[i];
    y[i] = v / ((T)1 + exp(-v));
}

KERNEL SUF(tt_silu_backward)(GLOBAL const T *x, GLOBAL const T *dy, GLOBAL T *dx, tt_long n)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    const T v = x[i], one = (T)1;
    const T s = one / (one + exp(-v));
    dx[i] = dy[i] * s * (one + v * (one - s));
}

/* The CPU body's counter-based mask: element i of tile `tile` is dropped when
 * u(seed, tile, i) < p, so the backward (the same kernel on dy) drops the same ones. */
KERNEL SUF(tt_dropout)(GLOBAL const T *x, GLOBAL T *y, tt_long n, tt_long tile, tt_long seed, R p)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    const double pp = p;
    const double keep_scale = pp < 1.0 ? 1.0 / (1.0 - pp) : 0.0;
    const tt_ulong bits = tt_splitmix64(tt_splitmix64((tt_ulong)seed ^ tt_splitmix64((tt_ulong)tile)) + (tt_ulong)i);
    const double u = (double)(bits >> 11) * (1.0 / 9007199254740992.0);
    y[i] = u < pp ? (T)0 : (T)(x[i] * keep_scale);
}
