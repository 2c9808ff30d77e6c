/* gemm_gelu's GELU epilogue and dropout, element-wise over one tile.  The activation kernels
 * (gelu, relu, silu and their backward) are generated from their `expr` in csrc/kernels.def; the
 * GELU formulas they share with the epilogue are in tt_cpu.h. */
#include <math.h>
#include <string.h>
#include "tt_cpu.h"

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
