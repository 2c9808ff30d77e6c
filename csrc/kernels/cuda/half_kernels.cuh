/* CUDA bodies of the kernels whose csrc/kernels.def line lists f16/bf16 and a generic
 * `cuda` implementation: tt_<name>_half<H> for H = __half, __nv_bfloat16, launched by the
 * generated tt_cuda_<name> (tt_kernels_dev.h).  Parameters as in the table: buffers, integer
 * args (tt_long), real args (double).  Included by device_kernels.cu after the portable
 * kernels, whose dialect (tt_device.h: GID0, LOCAL, tt_block_sum) they use.  Elements load
 * as float and store with one rounding; `acc` buffers (sum_axis, sum_all: y) are float32. */
#ifndef TT_HALF_KERNELS_CUH
#define TT_HALF_KERNELS_CUH
#include "tt_half.cuh"

template <typename H> __global__ void tt_fill_half(H *y, tt_long n, double value)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = tt_elem<H>::st(value);
}

template <typename H> __global__ void tt_copy_half(const H *x, H *y, tt_long n)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = x[i];
}

template <typename H> __global__ void tt_scale_half(const H *x, H *y, tt_long n, double alpha)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = tt_elem<H>::st((float)alpha * tt_elem<H>::ld(x[i]));
}

template <typename H> __global__ void tt_add_scalar_half(const H *x, H *y, tt_long n, double alpha, double s)
{
    const tt_long i = GID0();
    if (i < n)
        y[i] = tt_elem<H>::st((float)alpha * tt_elem<H>::ld(x[i]) + (float)s);
}

template <typename H> __global__ void tt_add_half(const H *a, const H *b, H *c, tt_long n, double alpha, double beta)
{
    const tt_long i = GID0();
    if (i < n)
        c[i] = tt_elem<H>::st((float)alpha * tt_elem<H>::ld(a[i]) + (float)beta * tt_elem<H>::ld(b[i]));
}

template <typename H> __global__ void tt_mul_half(const H *a, const H *b, H *c, tt_long n, double alpha)
{
    const tt_long i = GID0();
    if (i < n)
        c[i] = tt_elem<H>::st((float)alpha * tt_elem<H>::ld(a[i]) * tt_elem<H>::ld(b[i]));
}

template <typename H> __global__ void tt_axpy_half(const H *x, H *y, tt_long n, double alpha, double beta)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    const float xv = tt_elem<H>::ld(x[i]), yv = tt_elem<H>::ld(y[i]);
    y[i] = tt_elem<H>::st(beta == 1.0 ? yv + (float)alpha * xv : (float)alpha * xv + (float)beta * yv);
}

template <typename H>
__global__ void tt_bcast_half(H *y, const H *b, tt_long m, tt_long k, tt_long n, double alpha)
{
    const tt_long e = GID0();
    if (e >= m * k * n)
        return;
    const tt_long i = e / (k * n), j = e % n;
    y[e] = tt_elem<H>::st((float)alpha * tt_elem<H>::ld(b[i * n + j]));
}

/* y: the float32 accumulator (m, n); as the float32 kernel, sums in ACC (double) */
template <typename H>
__global__ void tt_sum_axis_half(const H *x, float *y, tt_long m, tt_long k, tt_long n, tt_long first, double alpha)
{
    const tt_long r = GID0();
    if (r >= m * n)
        return;
    const tt_long i = r / n, j = r % n;
    ACC acc = 0;
    for (tt_long l = 0; l < k; l++)
        acc += tt_elem<H>::ld(x[(i * k + l) * n + j]);
    y[r] = (float)((first ? (ACC)0 : (ACC)y[r]) + (ACC)alpha * acc);
}

/* one group sums the tile into the float32 accumulator y: y = beta y + alpha sum(x) */
template <typename H> __global__ void tt_sum_all_half(const H *x, float *y, tt_long nx, double alpha, double beta)
{
    LOCAL ACC red[TT_DEV_LOCAL];
    ACC acc = 0;
    for (tt_long i = LID0(); i < nx; i += TT_DEV_LOCAL)
        acc += tt_elem<H>::ld(x[i]);
    acc = tt_block_sum(acc, red);
    if (LID0() == 0) {
        const ACC prev = beta == 0.0 ? (ACC)0 : (ACC)beta * (ACC)y[0];
        y[0] = (float)(prev + (ACC)alpha * acc);
    }
}

/* region_copy of 2-byte elements: a bit copy, as the portable body (csrc/kernels/opencl/shape.cl). */
template <typename H>
__global__ void tt_region_copy_half(const H *x, H *y, tt_long d0, tt_long d1, tt_long d2, tt_long d3, tt_long xo,
                                    tt_long xs0, tt_long xs1, tt_long xs2, tt_long xs3, tt_long yo, tt_long ys0,
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

#endif
