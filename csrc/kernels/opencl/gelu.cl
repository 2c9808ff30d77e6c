/* GELU and its derivative of one value, with the formulas and roundings of the CPU helpers
 * (csrc/kernels/cpu/tt_cpu.h): approx 0 the erf form x Phi(x), 1 the tanh form.  Helpers only
 * (no kernel): the generated gelu and gelu_backward bodies (csrc/kernels.def: SUF(tt_gelu_value),
 * SUF(tt_gelu_grad_value)), activations.cl's gemm_gelu and csrc/kernels/cuda/gemm.cu's epilogue
 * after cuBLAS use them. */
#ifndef TT_GELU_CONSTANTS
#define TT_GELU_CONSTANTS
#define TT_SQRT_2_OVER_PI 0.79788456080286535588
#define TT_INV_SQRT_2 0.70710678118654752440
#define TT_INV_SQRT_2PI 0.39894228040143267794
#endif

/* tanh(sqrt(2 / pi) (v + 0.044715 v^3)); float32: as 1 - 2 / (e^{2u} + 1), the CPU body's float32
 * form (it keeps 1 - t accurate where gelu' needs it: a library tanhf of a few ulp gave gelu'
 * 5x the CPU body's error at |v| ~ 5) */
DEVFN T SUF(tt_gelu_tanh)(T v)
{
    const T u = (T)TT_SQRT_2_OVER_PI * (v + (T)0.044715 * v * v * v);
    if (sizeof(T) == sizeof(float))
        return (T)1 - (T)2 / (exp((T)2 * u) + (T)1);
    return tanh(u);
}

/* The erf form is computed in ACC (double where the device has it) and rounded once: within a
 * few ulp of the CPU body, which computes float32 in float32 (vectorised erff). */
DEVFN T SUF(tt_gelu_value)(T v, tt_long approx)
{
    if (approx)
        return (T)0.5 * v * ((T)1 + SUF(tt_gelu_tanh)(v));
    const ACC d = v;
    return (T)(0.5 * d * (1.0 + erf(d * TT_INV_SQRT_2)));
}

/* gelu'(v) */
DEVFN T SUF(tt_gelu_grad_value)(T v, tt_long approx)
{
    if (approx) {
        const T hf = (T)0.5, one = (T)1;
        const T t = SUF(tt_gelu_tanh)(v);
        const T du = (T)TT_SQRT_2_OVER_PI * (one + (T)(3.0 * 0.044715) * v * v);
        return hf * (one + t) + hf * v * (one - t * t) * du;
    }
    const ACC d = v;
    return (T)(0.5 * (1.0 + erf(d * TT_INV_SQRT_2)) + d * TT_INV_SQRT_2PI * exp(-0.5 * d * d));
}
