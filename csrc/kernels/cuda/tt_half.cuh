/* float16 / bfloat16 elements in CUDA bodies: load as float (exact), compute in float32,
 * store with one round-to-nearest-even, as the CPU bodies do (csrc/kernels/cpu/tt_cpu.h).
 * tt_elem<T>::ld(v) gives the compute value (float, or double for double); st(v) stores a
 * float or a double value as T, a double going straight to a half type in one rounding. */
#ifndef TT_HALF_CUH
#define TT_HALF_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* float64 -> float rounded to odd (truncate, set the last bit when inexact): rounding that
 * float to a half type then equals rounding the double directly. */
static __device__ __forceinline__ float tt_f64_to_f32_odd(double d)
{
    float f = __double2float_rz(d);
    if (!isnan(d) && (double)f != d)
        f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}

template <typename T> struct tt_elem;

template <> struct tt_elem<float> {
    static __device__ __forceinline__ float ld(float v) { return v; }
    static __device__ __forceinline__ float st(float v) { return v; }
    static __device__ __forceinline__ float st(double v) { return __double2float_rn(v); }
};

template <> struct tt_elem<double> {
    static __device__ __forceinline__ double ld(double v) { return v; }
    static __device__ __forceinline__ double st(float v) { return (double)v; }
    static __device__ __forceinline__ double st(double v) { return v; }
};

template <> struct tt_elem<__half> {
    static __device__ __forceinline__ float ld(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half st(float v) { return __float2half_rn(v); }
    static __device__ __forceinline__ __half st(double v) { return __float2half_rn(tt_f64_to_f32_odd(v)); }
};

template <> struct tt_elem<__nv_bfloat16> {
    static __device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 st(float v) { return __float2bfloat16_rn(v); }
    static __device__ __forceinline__ __nv_bfloat16 st(double v) { return __float2bfloat16_rn(tt_f64_to_f32_odd(v)); }
};

#endif
