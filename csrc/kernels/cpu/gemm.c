/* Tile gemm through CBLAS, row-major tiles: C = alpha op(A) op(B) + beta C, per batch element. */
#include <cblas.h>
#include "tt_cpu.h"

void tt_cpu_gemm(const tt_args_gemm *a, const void *A, const void *B, void *C)
{
    const int m = (int)a->m, n = (int)a->n, k = (int)a->k;
    const enum CBLAS_TRANSPOSE ta = a->ta ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = a->tb ? CblasTrans : CblasNoTrans;
    const int lda = a->ta ? m : k, ldb = a->tb ? k : n;
    for (int64_t i = 0; i < a->batch; i++) {
        if (a->dtype == TT_F32)
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, (float)a->alpha, (const float *)A + i * (int64_t)m * k, lda,
                        (const float *)B + i * (int64_t)k * n, ldb, (float)a->beta, (float *)C + i * (int64_t)m * n, n);
        else if (a->dtype == TT_F64)
            cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, a->alpha, (const double *)A + i * (int64_t)m * k, lda,
                        (const double *)B + i * (int64_t)k * n, ldb, a->beta, (double *)C + i * (int64_t)m * n, n);
    }
}
