/* Helpers for CPU kernel bodies: plain C, no StarPU types. */
#ifndef TT_CPU_H
#define TT_CPU_H
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "tiletrain.h"

/* Vector math: glibc's libmvec (2.35+) has SIMD variants of these functions; declaring them
 * `simd` lets the compiler vectorise loops that call them (csrc/gen_kernels.py's `expr`
 * bodies, activations, softmax) instead of one libm call per element.  glibc itself only
 * declares them under -ffast-math, which tiletrain does not use (it would break NaN
 * handling).  Accuracy: libmvec's documented bound of 4 ulp.  TT_HAVE_LIBMVEC comes from
 * CMakeLists.txt when libmvec is found. */
#if defined(TT_HAVE_LIBMVEC) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TT_VEC_DECL(fn) fn __attribute__((simd("notinbranch")))
TT_VEC_DECL(float expf(float));
TT_VEC_DECL(double exp(double));
TT_VEC_DECL(float logf(float));
TT_VEC_DECL(double log(double));
TT_VEC_DECL(float log1pf(float));
TT_VEC_DECL(double log1p(double));
TT_VEC_DECL(float expm1f(float));
TT_VEC_DECL(double expm1(double));
TT_VEC_DECL(float sinf(float));
TT_VEC_DECL(double sin(double));
TT_VEC_DECL(float cosf(float));
TT_VEC_DECL(double cos(double));
TT_VEC_DECL(float tanhf(float));
TT_VEC_DECL(double tanh(double));
TT_VEC_DECL(float erff(float));
TT_VEC_DECL(double erf(double));
TT_VEC_DECL(float powf(float, float));
TT_VEC_DECL(double pow(double, double));
#undef TT_VEC_DECL
#endif
#include "tt_kernels_args.h"

/* The special functions (digamma, polygamma, zeta, the incomplete gamma functions, I0/I1,
 * erfcx): one source with the device bodies, csrc/kernels/opencl/tt_special.h. */
#define DEVFN static inline
#include "../opencl/tt_special.h"
#undef DEVFN

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

/* ---- float16 / bfloat16 storage ----
 * Half tiles hold IEEE binary16 / bfloat16 bit patterns.  Bodies load them as float (exact),
 * compute in float32 and store with one round-to-nearest-even.  Distinct struct types keep
 * the two apart (and keep anybody from doing arithmetic on the bits by mistake). */
typedef struct tt_f16 { uint16_t bits; } tt_f16;
typedef struct tt_bf16 { uint16_t bits; } tt_bf16;

static inline uint32_t tt_f32_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
static inline float tt_bits_f32(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

static inline float tt_ld_f16(tt_f16 h)
{
    uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16, exp = (h.bits >> 10) & 0x1fu, man = h.bits & 0x3ffu;
    if (exp == 0x1f) /* inf, NaN (payload kept) */
        return tt_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) { /* zero, subnormal: man * 2^-24, exact in float */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return tt_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline tt_f16 tt_st_f16(float f)
{
    uint32_t x = tt_f32_bits(f), r;
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) /* inf; NaN stays a quiet NaN */
        r = x > 0x7f800000u ? 0x7e00u | ((x >> 13) & 0x3ffu) : 0x7c00u;
    else if (x >= 0x477ff000u) /* >= 65520: rounds past 65504 */
        r = 0x7c00u;
    else if (x >= 0x38800000u) { /* normal: rebias the exponent, round 13 bits away */
        r = (x - 0x38000000u) >> 13;
        const uint32_t rem = x & 0x1fffu;
        r += rem > 0x1000u || (rem == 0x1000u && (r & 1u));
    } else if (x <= 0x33000000u) /* <= 2^-25: rounds to zero */
        r = 0;
    else { /* subnormal half: round man * 2^(e - 150) to a multiple of 2^-24 */
        const uint32_t man = (x & 0x7fffffu) | 0x800000u, shift = 126u - (x >> 23);
        const uint32_t rem = man & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
        r = man >> shift;
        r += rem > halfway || (rem == halfway && (r & 1u));
    }
    return (tt_f16){(uint16_t)(sign | r)};
}

static inline float tt_ld_bf16(tt_bf16 h) { return tt_bits_f32((uint32_t)h.bits << 16); }

static inline tt_bf16 tt_st_bf16(float f)
{
    const uint32_t x = tt_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (tt_bf16){(uint16_t)((x >> 16) | 0x40u)};
    return (tt_bf16){(uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

/* float64 -> float rounded to odd: truncate, and set the last bit when inexact.  Rounding
 * that float to a half type (>= 2 fewer bits) then equals rounding the double directly. */
static inline float tt_f64_to_f32_odd(double d)
{
    float f = (float)d;
    if (isnan(d) || (double)f == d)
        return f;
    if (fabs((double)f) > fabs(d))
        f = nextafterf(f, 0.0f);
    return tt_bits_f32(tt_f32_bits(f) | 1u);
}

static inline tt_f16 tt_st_f16_d(double d) { return tt_st_f16(tt_f64_to_f32_odd(d)); }
static inline tt_bf16 tt_st_bf16_d(double d) { return tt_st_bf16(tt_f64_to_f32_odd(d)); }
static inline float tt_ld_f32(float v) { return v; }
static inline double tt_ld_f64(double v) { return v; }
static inline float tt_st_f32(float v) { return v; }
static inline double tt_st_f64(double v) { return v; }

/* TT_LD(v): an element as its compute type C (float, or double for float64).
 * TT_ST(U, v): compute value v stored as element type U (one rounding; from a double
 * straight to a half type without passing through float's rounding). */
#define TT_LD(v) _Generic((v), float: tt_ld_f32, double: tt_ld_f64, tt_f16: tt_ld_f16, tt_bf16: tt_ld_bf16)(v)
#define TT_ST(U, v)                                                                        \
    _Generic((U){0}, float: tt_st_f32, double: tt_st_f64,                                  \
             tt_f16: _Generic((v), double: tt_st_f16_d, default: tt_st_f16),               \
             tt_bf16: _Generic((v), double: tt_st_bf16_d, default: tt_st_bf16))(v)

/* Run BODY with T bound to the element type of any float dtype and C to its compute type
 * (float for float32, float16, bfloat16; double for float64).  Bodies use TT_LD / TT_ST. */
#define TT_UNUSED_TYPE __attribute__((unused))
#define TT_ANY_FLOAT_DISPATCH(dtype, ...)                                                        \
    do {                                                                                         \
        switch (dtype) {                                                                         \
        case TT_F32: { typedef float T; typedef float C TT_UNUSED_TYPE; __VA_ARGS__; break; }    \
        case TT_F64: { typedef double T; typedef double C TT_UNUSED_TYPE; __VA_ARGS__; break; }  \
        case TT_F16: { typedef tt_f16 T; typedef float C TT_UNUSED_TYPE; __VA_ARGS__; break; }   \
        case TT_BF16: { typedef tt_bf16 T; typedef float C TT_UNUSED_TYPE; __VA_ARGS__; break; } \
        default: break;                                                                          \
        }                                                                                        \
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

/* ---- GELU of one value: the formulas of the gelu and gelu_backward kernels (their bodies,
 * generated from csrc/kernels.def, call these as SUF(tt_gelu_value) and SUF(tt_gelu_grad_value))
 * and of gemm_gelu's epilogue (tt_gelu_and_grad).  approx 0: the erf form x Phi(x); approx 1: the
 * tanh form (tt_tanhf_fast).  float32 values are computed in float32 arithmetic (erff and expf
 * vectorise 16 wide where double erf does 8: as PyTorch's float32 GELU, a few ulp), float64 in
 * double.  They return
 * double so that the caller rounds once where it stores.  The device versions: gelu.cl. */
#define TT_SQRT_2_OVER_PI 0.79788456080286535588
#define TT_INV_SQRT_2 0.70710678118654752440
#define TT_INV_SQRT_2PI 0.39894228040143267794

/* tanh(u) = 1 - 2 / (e^{2u} + 1): absolute error ~1e-7, enough wherever it enters as 1 + t. */
static inline float tt_tanhf_fast(float u) { return 1.0f - 2.0f / (tt_expf(2.0f * u) + 1.0f); }

static inline double tt_gelu_value_f32(float v, int64_t approx)
{
    if (approx) {
        const float t = tt_tanhf_fast(0.7978845608f * (v + 0.044715f * v * v * v));
        return 0.5f * v * (1.0f + t);
    }
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

static inline double tt_gelu_value_f64(double v, int64_t approx)
{
    if (approx)
        return 0.5 * v * (1.0 + tanh(TT_SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)));
    return 0.5 * v * (1.0 + erf(v * TT_INV_SQRT_2));
}

/* gelu'(v) */
static inline double tt_gelu_grad_value_f32(float v, int64_t approx)
{
    if (approx) {
        const float t = tt_tanhf_fast(0.7978845608f * (v + 0.044715f * v * v * v));
        const float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * v * v);
        return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
    }
    return 0.5f * (1.0f + erff(v * 0.70710678118654752f)) + v * (0.39894228040143268f * tt_expf(-0.5f * v * v));
}

static inline double tt_gelu_grad_value_f64(double v, int64_t approx)
{
    if (approx) {
        const double t = tanh(TT_SQRT_2_OVER_PI * (v + 0.044715 * v * v * v));
        const double du = TT_SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * v * v);
        return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
    }
    return 0.5 * (1.0 + erf(v * TT_INV_SQRT_2)) + v * (TT_INV_SQRT_2PI * exp(-0.5 * v * v));
}

/* ---- erfinv of one value (the erfinv kernel's body calls SUF(tt_erfinv_value)).  A first guess, then
 * Halley steps on erf(y) = |x| (|x| < 0.5), or on erfc(y) = 1 - |x| near 1, where 1 - |x| is
 * exact and erfc keeps the relative accuracy erf loses.  First guess: the series
 * sqrt(pi)/2 (x + pi/12 x^3 + 7 pi^2/480 x^5) below 0.5 (relative error < 2e-3), else
 * Winitzki's closed form with a = 0.147 (< 2e-3); three steps of a cubically converging
 * iteration reach double precision from there.  erfinv(+-1) = +-inf, NaN outside [-1, 1].
 * float32 is computed in double and rounded once.  The device version: elementwise.cl. */
static inline double tt_erfinv_value_f64(double x)
{
    const double a = fabs(x);
    if (!(a < 1.0))
        return a == 1.0 ? copysign(INFINITY, x) : NAN;
    if (a == 0.0)
        return x;
    const double k = 1.1283791670955126; /* 2 / sqrt(pi) */
    const double c = 1.0 - a;
    double y;
    if (a < 0.5) {
        const double a2 = a * a;
        y = 0.88622692545275801 * a * (1.0 + a2 * (0.26179938779914941 + a2 * 0.14393173084921979));
    } else {
        const double w = log(c * (1.0 + a));
        const double t = 4.330746750799873 + 0.5 * w; /* 2 / (pi 0.147) + w / 2 */
        y = sqrt(sqrt(t * t - w / 0.147) - t);
    }
    for (int i = 0; i < 3; i++) {
        const double f = a < 0.5 ? erf(y) - a : c - erfc(y);
        const double u = f / (k * exp(-y * y));
        y -= u / (1.0 + y * u);
    }
    return copysign(y, x);
}

static inline double tt_erfinv_value_f32(float x) { return tt_erfinv_value_f64(x); }

/* csrc/kernels/cpu/activations.c: y = gelu(h), then h = gelu'(h) in place (approx 1: tanh form). */
void tt_gelu_and_grad(int64_t dtype, int64_t n, int64_t approx, void *h, void *y);

/* csrc/kernels/cpu/gemm.c: y = alpha op(M) x + beta y, M row-major (rows x cols, leading
 * dimension ld), float32 (f32) or float64, op(M) = M^T with trans; beta 0 clears y first. */
void tt_gemv_rm(int f32, int trans, int rows, int cols, double alpha, const void *M, int ld, const void *x,
                double beta, void *y);

#endif
