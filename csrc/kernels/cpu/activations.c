/* Activations (forward and backward) and dropout, element-wise over one tile. */
#include <math.h>
#include <string.h>
#include "tt_cpu.h"

#define TT_SQRT_2_OVER_PI 0.79788456080286535588
#define TT_INV_SQRT_2 0.70710678118654752440
#define TT_INV_SQRT_2PI 0.39894228040143267794

/* tanh(u) = 1 - 2 / (e^{2u} + 1): absolute error ~1e-7, enough wherever it enters as 1 + t. */
static inline float tt_tanhf_fast(float u) { return 1.0f - 2.0f / (tt_expf(2.0f * u) + 1.0f); }

TT_SIMD_CLONES static void gelu_tanh_f32(int64_t n, const float *restrict x, float *restrict y)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float t = tt_tanhf_fast(0.7978845608f * (v + 0.044715f * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
    }
}

TT_SIMD_CLONES static void gelu_tanh_backward_f32(int64_t n, const float *restrict x, const float *restrict g, float *restrict d)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float t = tt_tanhf_fast(0.7978845608f * (v + 0.044715f * v * v * v));
        float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * v * v);
        d[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
}

TT_SIMD_CLONES static void gelu_tanh_and_grad_f32(int64_t n, float *restrict h, float *restrict y)
{
    for (int64_t i = 0; i < n; i++) {
        float v = h[i];
        float t = tt_tanhf_fast(0.7978845608f * (v + 0.044715f * v * v * v));
        float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * v * v);
        y[i] = 0.5f * v * (1.0f + t);
        h[i] = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
    }
}

/* y = gelu(h) and h = gelu'(h) in place (gemm_gelu's epilogue when a backward follows: it
 * then multiplies by h instead of running gelu_backward).  The formulas of tt_cpu_gelu and
 * tt_cpu_gelu_backward. */
TT_SIMD_CLONES void tt_gelu_and_grad(int64_t dtype, int64_t n, int64_t approx, void *h, void *y)
{
    if (dtype == TT_F32 && approx) {
        gelu_tanh_and_grad_f32(n, h, y);
        return;
    }
    TT_FLOAT_DISPATCH(dtype, {
        T *ph = h, *py = y;
        if (approx)
            for (int64_t i = 0; i < n; i++) {
                double v = ph[i];
                double t = tanh(TT_SQRT_2_OVER_PI * (v + 0.044715 * v * v * v));
                double du = TT_SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * v * v);
                py[i] = (T)(0.5 * v * (1.0 + t));
                ph[i] = (T)(0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du);
            }
        else
            for (int64_t i = 0; i < n; i++) {
                double v = ph[i];
                double cdf = 0.5 * (1.0 + erf(v * TT_INV_SQRT_2));
                py[i] = (T)(v * cdf);
                ph[i] = (T)(cdf + v * TT_INV_SQRT_2PI * exp(-0.5 * v * v));
            }
    });
}

/* approx = 0: exact x * Phi(x) with erf; approx = 1: tanh approximation (GPT-2). */
TT_SIMD_CLONES void tt_cpu_gelu(const tt_args_gelu *a, const void *x, void *y)
{
    if (a->dtype == TT_F32 && a->approx) {
        gelu_tanh_f32(a->n, x, y);
        return;
    }
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        if (a->approx)
            for (int64_t i = 0; i < a->n; i++) {
                double v = px[i];
                double u = TT_SQRT_2_OVER_PI * (v + 0.044715 * v * v * v);
                py[i] = (T)(0.5 * v * (1.0 + tanh(u)));
            }
        else
            for (int64_t i = 0; i < a->n; i++) {
                double v = px[i];
                py[i] = (T)(0.5 * v * (1.0 + erf(v * TT_INV_SQRT_2)));
            }
    });
}

TT_SIMD_CLONES void tt_cpu_gelu_backward(const tt_args_gelu_backward *a, const void *x, const void *dy, void *dx)
{
    if (a->dtype == TT_F32 && a->approx) {
        gelu_tanh_backward_f32(a->n, x, dy, dx);
        return;
    }
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pg = dy;
        T *pd = dx;
        if (a->approx)
            for (int64_t i = 0; i < a->n; i++) {
                double v = px[i];
                double u = TT_SQRT_2_OVER_PI * (v + 0.044715 * v * v * v);
                double t = tanh(u);
                double du = TT_SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * v * v);
                pd[i] = (T)(pg[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du));
            }
        else
            for (int64_t i = 0; i < a->n; i++) {
                double v = px[i];
                double cdf = 0.5 * (1.0 + erf(v * TT_INV_SQRT_2));
                double pdf = TT_INV_SQRT_2PI * exp(-0.5 * v * v);
                pd[i] = (T)(pg[i] * (cdf + v * pdf));
            }
    });
}

TT_SIMD_CLONES void tt_cpu_relu(const tt_args_relu *a, const void *x, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        for (int64_t i = 0; i < a->n; i++)
            py[i] = px[i] > 0 ? px[i] : 0;
    });
}

TT_SIMD_CLONES void tt_cpu_relu_backward(const tt_args_relu_backward *a, const void *x, const void *dy, void *dx)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pg = dy;
        T *pd = dx;
        for (int64_t i = 0; i < a->n; i++)
            pd[i] = px[i] > 0 ? pg[i] : 0;
    });
}

TT_SIMD_CLONES void tt_cpu_silu(const tt_args_silu *a, const void *x, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        for (int64_t i = 0; i < a->n; i++) {
            double v = px[i];
            py[i] = (T)(v / (1.0 + exp(-v)));
        }
    });
}

TT_SIMD_CLONES void tt_cpu_silu_backward(const tt_args_silu_backward *a, const void *x, const void *dy, void *dx)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pg = dy;
        T *pd = dx;
        for (int64_t i = 0; i < a->n; i++) {
            double v = px[i];
            double s = 1.0 / (1.0 + exp(-v));
            pd[i] = (T)(pg[i] * s * (1.0 + v * (1.0 - s)));
        }
    });
}

/* Counter-based generator: the keep decision of element i of tile `tile` depends only on
 * (seed, tile, i), so a run is reproducible for a given seed and tiling, and the backward
 * (the same kernel applied to dy) recomputes the same mask. */
static inline uint64_t splitmix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t tt_dropout_bits(uint64_t seed, uint64_t tile, uint64_t i)
{
    return splitmix64(splitmix64(seed ^ splitmix64(tile)) + i);
}

TT_SIMD_CLONES void tt_cpu_dropout(const tt_args_dropout *a, const void *x, void *y)
{
    const double p = a->p;
    const double keep_scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        for (int64_t i = 0; i < a->n; i++) {
            double u = (double)(tt_dropout_bits((uint64_t)a->seed, (uint64_t)a->tile, (uint64_t)i) >> 11) *
                       0x1.0p-53;
            py[i] = u < p ? (T)0 : (T)(px[i] * keep_scale);
        }
    });
}
