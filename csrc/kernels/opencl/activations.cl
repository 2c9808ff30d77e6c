/* gemm_gelu (GELU: gelu.cl) and dropout, element-wise (csrc/kernels/cpu/activations.c), computed
 * in the element type (float math for float32 tiles: the GPU's fast path).  The bodies of gelu,
 * relu, silu and their backward are generated from csrc/kernels.def (tt_kernels_expr.cl). */
#ifndef TT_ACTIVATIONS_HELPERS
#define TT_ACTIVATIONS_HELPERS

DEVFN tt_ulong tt_splitmix64(tt_ulong z)
{
    z += (tt_ulong)0x9E3779B97F4A7C15UL;
    z = (z ^ (z >> 30)) * (tt_ulong)0xBF58476D1CE4E5B9UL;
    z = (z ^ (z >> 27)) * (tt_ulong)0x94D049BB133111EBUL;
    return z ^ (z >> 31);
}
#endif

/* (gelu.cl also holds the formulas of the generated gelu and gelu_backward bodies) */
#include "gelu.cl"

/* The GELU epilogue of a linear layer's chain (csrc/kernels/cpu/gemm.c): c = alpha op(A) op(B) +
 * bias (first) or c += alpha op(A) op(B), then y = gelu(c), and with deriv c = gelu'(c). */
KERNEL SUF(tt_gemm_gelu)(GLOBAL const T *A, GLOBAL const T *B, GLOBAL const T *bias, GLOBAL T *C, GLOBAL T *Y,
                         tt_long batch, tt_long m, tt_long n, tt_long k, tt_long ta, tt_long tb, tt_long first,
                         tt_long approx, tt_long deriv, R alpha)
{
    LOCAL T As[TT_DEV_TILE][TT_DEV_TILE];
    LOCAL T Bs[TT_DEV_TILE][TT_DEV_TILE];
    const T acc = SUF(tt_gemm_dot)(A, B, m, n, k, ta, tb, As, Bs);
    const tt_long col = GID0(), row = GID1(), z = GROUP2();
    if (row >= m || col >= n)
        return;
    const tt_long e = z * m * n + row * n + col;
    const T h = (T)alpha * acc + (first ? bias[col] : C[e]);
    Y[e] = SUF(tt_gelu_value)(h, approx);
    C[e] = deriv ? SUF(tt_gelu_grad_value)(h, approx) : h;
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
