/* cast on CUDA (cuda:custom in csrc/kernels.def): y (dtype `to`) = x (dtype `dtype`) for any
 * pair of float32, float64, float16, bfloat16, rounded to nearest even (float64 to a half
 * type in one rounding: tt_half.cuh), asynchronously on the worker's stream. */
#include "tt_cuda.cuh"
#include "tt_half.cuh"

template <typename S, typename D> __global__ void tt_cast_kernel(const S *x, D *y, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = tt_elem<D>::st(tt_elem<S>::ld(x[i]));
}

template <typename S> static void tt_cast_from(const tt_args_cast *a, const void *x, void *y, const tt_cuda_ctx *ctx)
{
    long long n = (long long)a->n;
    void *argv[] = {(void *)&x, (void *)&y, (void *)&n};
    const void *fn = a->to == TT_F32    ? (const void *)tt_cast_kernel<S, float>
                     : a->to == TT_F64  ? (const void *)tt_cast_kernel<S, double>
                     : a->to == TT_F16  ? (const void *)tt_cast_kernel<S, __half>
                     : a->to == TT_BF16 ? (const void *)tt_cast_kernel<S, __nv_bfloat16>
                                        : (const void *)0;
    tt_cuda_launch("cast", fn, tt_geom_cast(a), argv, ctx);
}

extern "C" void tt_cuda_cast(const tt_args_cast *a, const void *x, void *y, const tt_cuda_ctx *ctx)
{
    switch (a->dtype) {
    case TT_F32: tt_cast_from<float>(a, x, y, ctx); break;
    case TT_F64: tt_cast_from<double>(a, x, y, ctx); break;
    case TT_F16: tt_cast_from<__half>(a, x, y, ctx); break;
    case TT_BF16: tt_cast_from<__nv_bfloat16>(a, x, y, ctx); break;
    default: tt_cuda_launch("cast", (const void *)0, tt_geom_cast(a), (void **)0, ctx); /* reports and aborts */
    }
}
