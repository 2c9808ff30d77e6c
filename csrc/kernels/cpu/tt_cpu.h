/* Helpers for CPU kernel bodies: plain C, no StarPU types. */
#ifndef TT_CPU_H
#define TT_CPU_H
#include <stdint.h>
#include <string.h>
#include "tiletrain.h"
#include "tt_kernels_args.h"

/* Run BODY with T bound to the C type of a float dtype. */
#define TT_FLOAT_DISPATCH(dtype, ...)    \
    do {                                 \
        if ((dtype) == TT_F32) {         \
            typedef float T;             \
            __VA_ARGS__;                     \
        } else if ((dtype) == TT_F64) {  \
            typedef double T;            \
            __VA_ARGS__;                     \
        }                                \
    } while (0)

/* Put on a hot element-wise loop: GCC compiles it for AVX-512, AVX2+FMA and baseline x86-64
 * and picks one at load time (ifunc), so the portable library still vectorises wide. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) && defined(__linux__)
#define TT_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TT_SIMD_CLONES
#endif

/* exp for float32 in straight-line arithmetic that the compiler vectorises (no libm
 * call): round-to-nearest range reduction x = n ln2 + r (magic-number rounding), a
 * degree-6 polynomial for e^r (Cephes expf coefficients, ~1 ulp), 2^n from the exponent
 * bits.  Inputs are clamped to [-87, 88] (so exp(-inf) gives ~1.6e-38, not 0: callers that
 * need an exact 0 handle it).  (Vectorised thanks to -fno-trapping-math.) */
static inline float tt_expf(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

#endif
