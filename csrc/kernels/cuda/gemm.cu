/* Tile gemm on CUDA through cuBLAS, asynchronous on the StarPU worker's stream with the
 * per-worker handle StarPU provides (starpu_cublas_get_local_handle(), passed in ctx).
 * Tiles are row-major: C = op(A) op(B) is computed as the column-major C^T = op(B)^T
 * op(A)^T, strided-batched over `batch` matrices.  beta == 0 never reads C.
 * float16/bfloat16 A and B: cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F (float32
 * products and sums, float alpha and beta, one rounding into C), C of the same type or, with
 * cacc, a float32 accumulator (bfloat16 needs a GPU cuBLAS supports it on: compute
 * capability 8.0 or later). */
#include <cublas_v2.h>
#include "tt_cuda.cuh"

static void tt_cublas_check(cublasStatus_t st, const char *what)
{
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "tiletrain: cuBLAS error %d in %s\n", (int)st, what);
        abort();
    }
}

extern "C" void tt_cuda_gemm(const tt_args_gemm *a, const void *A, const void *B, void *C, const tt_cuda_ctx *ctx)
{
    cublasHandle_t h = (cublasHandle_t)ctx->cublas;
    tt_cublas_check(cublasSetStream(h, (cudaStream_t)ctx->stream), "cublasSetStream");
    const int m = (int)a->m, n = (int)a->n, k = (int)a->k, batch = (int)a->batch;
    const cublasOperation_t opb = a->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = a->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lda = a->ta ? m : k, ldb = a->tb ? k : n;
    const long long sa = (long long)m * k, sb = (long long)k * n, sc = (long long)m * n;
    if (a->dtype == TT_F32) {
        const float alpha = (float)a->alpha, beta = (float)a->beta;
        tt_cublas_check(cublasSgemmStridedBatched(h, opb, opa, n, m, k, &alpha, (const float *)B, ldb, sb,
                                                  (const float *)A, lda, sa, &beta, (float *)C, n, sc, batch),
                        "cublasSgemmStridedBatched");
    } else if (a->dtype == TT_F64) {
        const double alpha = a->alpha, beta = a->beta;
        tt_cublas_check(cublasDgemmStridedBatched(h, opb, opa, n, m, k, &alpha, (const double *)B, ldb, sb,
                                                  (const double *)A, lda, sa, &beta, (double *)C, n, sc, batch),
                        "cublasDgemmStridedBatched");
    } else if (a->dtype == TT_F16 || a->dtype == TT_BF16) {
        const cudaDataType_t ab = a->dtype == TT_F16 ? CUDA_R_16F : CUDA_R_16BF;
        const cudaDataType_t ct = a->cacc ? CUDA_R_32F : ab;
        const float alpha = (float)a->alpha, beta = (float)a->beta;
        tt_cublas_check(cublasGemmStridedBatchedEx(h, opb, opa, n, m, k, &alpha, B, ab, ldb, sb, A, ab, lda, sa, &beta,
                                                   C, ct, n, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        "cublasGemmStridedBatchedEx");
    }
}

/* gemm_bias and gemm_gelu (float32, float64): bias copied into every row of C, then the cuBLAS
 * gemm above with beta 1 (the CPU body's order: csrc/kernels/cpu/gemm.c), then for gemm_gelu an
 * element-wise epilogue with the device GELU formulas (csrc/kernels/opencl/gelu.cl, the ones
 * the OpenCL/CUDA gelu kernels use). */
#include "../opencl/tt_device.h"
#define T float
#define SUF(name) name##_f32
#include "../opencl/gelu.cl"
#undef T
#undef SUF
#define T double
#define SUF(name) name##_f64
#include "../opencl/gelu.cl"
#undef T
#undef SUF

template <typename T> static __global__ void tt_bias_rows_kernel(const T *bias, T *C, tt_long count, tt_long n)
{
    const tt_long e = GID0();
    if (e < count)
        C[e] = bias[e % n];
}

static __device__ __forceinline__ float tt_gelu_v(float v, tt_long approx) { return tt_gelu_value_f32(v, approx); }
static __device__ __forceinline__ double tt_gelu_v(double v, tt_long approx) { return tt_gelu_value_f64(v, approx); }
static __device__ __forceinline__ float tt_gelu_g(float v, tt_long approx) { return tt_gelu_grad_value_f32(v, approx); }
static __device__ __forceinline__ double tt_gelu_g(double v, tt_long approx) { return tt_gelu_grad_value_f64(v, approx); }

/* Y = gelu(C), and with deriv C = gelu'(C) */
template <typename T>
static __global__ void tt_gelu_epilogue_kernel(T *C, T *Y, tt_long count, tt_long approx, tt_long deriv)
{
    const tt_long e = GID0();
    if (e >= count)
        return;
    const T h = C[e];
    Y[e] = tt_gelu_v(h, approx);
    if (deriv)
        C[e] = tt_gelu_g(h, approx);
}

static unsigned tt_groups(tt_long count) { return (unsigned)((count + TT_DEV_LOCAL - 1) / TT_DEV_LOCAL); }

static void tt_cuda_bias_rows(int64_t dtype, tt_long rows, tt_long n, const void *bias, void *C, cudaStream_t s)
{
    const tt_long count = rows * n;
    if (count == 0)
        return;
    if (dtype == TT_F32)
        tt_bias_rows_kernel<float><<<tt_groups(count), TT_DEV_LOCAL, 0, s>>>((const float *)bias, (float *)C, count, n);
    else
        tt_bias_rows_kernel<double><<<tt_groups(count), TT_DEV_LOCAL, 0, s>>>((const double *)bias, (double *)C, count, n);
    tt_cuda_check(cudaGetLastError(), "bias rows");
}

extern "C" void tt_cuda_gemm_bias(const tt_args_gemm_bias *a, const void *A, const void *B, const void *bias, void *C,
                                  const tt_cuda_ctx *ctx)
{
    tt_cuda_bias_rows(a->dtype, a->batch * a->m, a->n, bias, C, (cudaStream_t)ctx->stream);
    const tt_args_gemm g = {a->dtype, a->batch, a->m, a->n, a->k, a->ta, a->tb, 0, a->alpha, 1.0};
    tt_cuda_gemm(&g, A, B, C, ctx);
}

extern "C" void tt_cuda_gemm_gelu(const tt_args_gemm_gelu *a, const void *A, const void *B, const void *bias, void *C,
                                  void *Y, const tt_cuda_ctx *ctx)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    if (a->first)
        tt_cuda_bias_rows(a->dtype, a->batch * a->m, a->n, bias, C, s);
    const tt_args_gemm g = {a->dtype, a->batch, a->m, a->n, a->k, a->ta, a->tb, 0, a->alpha, 1.0};
    tt_cuda_gemm(&g, A, B, C, ctx);
    const tt_long count = a->batch * a->m * a->n;
    if (count == 0)
        return;
    if (a->dtype == TT_F32)
        tt_gelu_epilogue_kernel<float><<<tt_groups(count), TT_DEV_LOCAL, 0, s>>>((float *)C, (float *)Y, count,
                                                                                 a->approx, a->deriv);
    else
        tt_gelu_epilogue_kernel<double><<<tt_groups(count), TT_DEV_LOCAL, 0, s>>>((double *)C, (double *)Y, count,
                                                                                  a->approx, a->deriv);
    tt_cuda_check(cudaGetLastError(), "gemm_gelu epilogue");
}
