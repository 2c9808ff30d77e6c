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
