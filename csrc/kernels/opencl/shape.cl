/* region_copy (csrc/kernels/cpu/shape.c): one work-item per element of the box
 * d0 x d1 x d2 x d3; offsets and strides in elements of the two tiles (xs = 0 broadcasts).
 * Also instantiated for int64 tiles (T = tt_long). */
KERNEL SUF(tt_region_copy)(GLOBAL const T *x, GLOBAL T *y, tt_long d0, tt_long d1, tt_long d2, tt_long d3,
                           tt_long xo, tt_long xs0, tt_long xs1, tt_long xs2, tt_long xs3, tt_long yo, tt_long ys0,
                           tt_long ys1, tt_long ys2, tt_long ys3)
{
    tt_long r = GID0();
    if (r >= d0 * d1 * d2 * d3)
        return;
    const tt_long i3 = r % d3;
    r /= d3;
    const tt_long i2 = r % d2;
    r /= d2;
    const tt_long i1 = r % d1;
    const tt_long i0 = r / d1;
    y[yo + i0 * ys0 + i1 * ys1 + i2 * ys2 + i3 * ys3] = x[xo + i0 * xs0 + i1 * xs1 + i2 * xs2 + i3 * xs3];
}
