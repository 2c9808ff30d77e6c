/* GELU and its derivative of one value, in the element type (float math for float32 tiles),
 * the formulas of csrc/kernels/cpu/activations.c: approx 0 the erf form x Phi(x), 1 the tanh
 * form.  Helpers only (no kernel): activations.cl's gelu, gelu_backward and gemm_gelu use
 * them, and csrc/kernels/cuda/gemm.cu's epilogue after cuBLAS. */
#ifndef TT_GELU_CONSTANTS
#define TT_GELU_CONSTANTS
#define TT_SQRT_2_OVER_PI 0.79788456080286535588
#define TT_INV_SQRT_2 0.70710678118654752440
#define TT_INV_SQRT_2PI 0.39894228040143267794
#endif

DEVFN T SUF(tt_gelu_value)(T v, tt_long approx)
{
    const T hf = (T)0.5, one = (T)1;
    if (approx)
        return hf * v * (one + tanh((T)TT_SQRT_2_OVER_PI * (v + (T)0.044715 * v * v * v)));
    return hf * v * (one + erf(v * (T)TT_INV_SQRT_2));
}

/* gelu'(v) */
DEVFN T SUF(tt_gelu_grad_value)(T v, tt_long approx)
{
    const T hf = (T)0.5, one = (T)1;
    if (approx) {
        const T t = tanh((T)TT_SQRT_2_OVER_PI * (v + (T)0.044715 * v * v * v));
        const T du = (T)TT_SQRT_2_OVER_PI * (one + (T)(3.0 * 0.044715) * v * v);
        return hf * (one + t) + hf * v * (one - t * t) * du;
    }
    const T cdf = hf * (one + erf(v * (T)TT_INV_SQRT_2));
    const T pdf = (T)TT_INV_SQRT_2PI * exp(-hf * v * v);
    return cdf + v * pdf;
}
