/* Tile gemm through CBLAS, row-major tiles: C = alpha op(A) op(B) + beta C, per batch element.
 *
 * float16/bfloat16 A and B: the tiles are converted to float32 (exact), multiplied with
 * cblas_sgemm (float32 products and sums, alpha and beta applied in float32), and the result
 * is rounded once into C; or, with cacc, C is a float32 accumulator that the op rounds at
 * the end of the chain along the contracted axis. */
#include "tt_blas.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tt_cpu.h"

/* y = alpha op(M) x + beta y for a row-major M (rows x cols, leading dimension ld), float32
 * (f32) or float64; op(M) = M^T with trans.  beta == 0 clears y first, so whatever a freshly
 * allocated tile holds (NaN) never leaks.  Shared with the attention kernels' one-row products. */
void tt_gemv_rm(int f32, int trans, int rows, int cols, double alpha, const void *M, int ld, const void *x,
                double beta, void *y)
{
    const int ny = trans ? cols : rows;
    const enum CBLAS_TRANSPOSE t = trans ? CblasTrans : CblasNoTrans;
    if (beta == 0)
        memset(y, 0, (size_t)ny * (f32 ? sizeof(float) : sizeof(double)));
    if (f32)
        cblas_sgemv(CblasRowMajor, t, rows, cols, (float)alpha, M, ld, x, 1, (float)beta, y, 1);
    else
        cblas_dgemv(CblasRowMajor, t, rows, cols, alpha, M, ld, x, 1, beta, y, 1);
}

/* A product with one row (m == 1) or one column (n == 1) is a matrix-vector product: gemv
 * reads the matrix once, where gemm would first pack it (5-7x slower at decode's 1 x 384 x
 * 1024 shapes).  The vector operand is contiguous whatever its transpose flag.  The matrix
 * of y = op(M) x, row-major: B (k, n) or (n, k) when m == 1, A (m, k) or (k, m) when n == 1. */
static void gemv_batch(const tt_args_gemm *a, int f32, const void *A, const void *B, void *C)
{
    const int m = (int)a->m, n = (int)a->n, k = (int)a->k;
    const int by_row = m == 1; /* else n == 1 */
    const int tm = by_row ? !a->tb : (int)a->ta; /* y = M^T x with M stored as below */
    const int rows = by_row ? (a->tb ? n : k) : (a->ta ? k : m);
    const int cols = by_row ? (a->tb ? k : n) : (a->ta ? m : k);
    const size_t es = f32 ? sizeof(float) : sizeof(double);
    for (int64_t i = 0; i < a->batch; i++) {
        const char *Ai = (const char *)A + (size_t)(i * m * k) * es, *Bi = (const char *)B + (size_t)(i * k * n) * es;
        tt_gemv_rm(f32, tm, rows, cols, a->alpha, by_row ? Bi : Ai, cols, by_row ? Ai : Bi, a->beta,
                   (char *)C + (size_t)(i * m * n) * es);
    }
}

static int is_gemv(const tt_args_gemm *a) { return a->m == 1 || a->n == 1; }

/* A few rows times a weight stored (n, k), C = alpha A B^T + beta C with m = 2..ROWS_DOT_MAX
 * (decoding a batch: one row per sequence): every output is the dot product of two
 * contiguous rows, so B is streamed once, two rows at a time, with the rows after them
 * prefetched, while the m rows of A stay in L1.  BLAS's gemm packs B first (one more pass
 * over memory): measured on the decode shapes (8 x 1024 x 384, 8 x 384 x 1024, 8 x 8192 x
 * 384, weights not in cache) OpenBLAS sgemm streams 3.3-4.7 GB/s, this 7-11 GB/s.  x86-64
 * with AVX2 and FMA (checked at run time); elsewhere BLAS. */
#define ROWS_DOT_MAX 16
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TT_ROWS_DOT 1

__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static void rows_dot(int m, int n, int k, float alpha, const float *A,
                                                          const float *B, float beta, float *C)
{
    const int k8 = k & ~7;
    for (int j = 0; j < n; j += 2) {
        const int nb = j + 1 < n ? 2 : 1;
        const float *b0 = B + (size_t)j * k, *b1 = B + (size_t)(j + nb - 1) * k;
        const float *next = B + (size_t)(j + 2 < n ? j + 2 : j) * k; /* the next pair: prefetched */
        for (int i0 = 0; i0 < m; i0 += 4) {
            const int na = m - i0 < 4 ? m - i0 : 4;
            const float *ar[4];
            for (int i = 0; i < 4; i++)
                ar[i] = A + (size_t)(i0 + (i < na ? i : 0)) * k;
            __m256 acc[4][2];
            for (int i = 0; i < 4; i++)
                acc[i][0] = acc[i][1] = _mm256_setzero_ps();
            for (int p = 0; p < k8; p += 8) {
                if (i0 == 0 && !(p & 15)) { /* one prefetch per cache line, on the first pass */
                    _mm_prefetch((const char *)(next + p), _MM_HINT_T0);
                    _mm_prefetch((const char *)(next + (nb == 2 && j + 3 < n ? k : 0) + p), _MM_HINT_T0);
                }
                const __m256 x0 = _mm256_loadu_ps(b0 + p), x1 = _mm256_loadu_ps(b1 + p);
                for (int i = 0; i < 4; i++) {
                    const __m256 x = _mm256_loadu_ps(ar[i] + p);
                    acc[i][0] = _mm256_fmadd_ps(x, x0, acc[i][0]);
                    acc[i][1] = _mm256_fmadd_ps(x, x1, acc[i][1]);
                }
            }
            for (int i = 0; i < na; i++)
                for (int q = 0; q < nb; q++) {
                    const float *bq = q ? b1 : b0;
                    float s = hsum8(acc[i][q]);
                    for (int p = k8; p < k; p++)
                        s += ar[i][p] * bq[p];
                    float *c = C + (size_t)(i0 + i) * n + j + q;
                    *c = beta == 0 ? alpha * s : alpha * s + beta * *c; /* beta 0: C not read (NaN) */
                }
        }
    }
}

static int rows_dot_ok(const tt_args_gemm *a)
{
    static int cpu = -1; /* AVX2 and FMA on this CPU? (a benign race: every thread finds the same) */
    if (cpu < 0)
        cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return cpu && !a->ta && a->tb && a->m >= 2 && a->m <= ROWS_DOT_MAX && a->k >= 16;
}
#endif

/* alpha 0: C = beta C (0 when beta is 0, C not read), A and B not read -- BLAS's rule, which
 * OpenBLAS 0.3.21's AVX-512 small-matrix sgemm does not keep (a NaN in A reached C). */
static void alpha_zero(const tt_args_gemm *a, int f32, void *C)
{
    const int64_t nc = a->batch * a->m * a->n;
    for (int64_t i = 0; i < nc; i++) {
        if (f32)
            ((float *)C)[i] = a->beta == 0.0 ? 0.0f : (float)a->beta * ((float *)C)[i];
        else
            ((double *)C)[i] = a->beta == 0.0 ? 0.0 : a->beta * ((double *)C)[i];
    }
}

/* Which body a gemm call takes; tt_gemm_cpu_path names it, so that tests can assert the
 * path they mean to check instead of passing through BLAS unnoticed. */
enum gemm_path { GEMM_ALPHA0, GEMM_GEMV, GEMM_ROWS_DOT, GEMM_BLAS };

static enum gemm_path gemm_path(const tt_args_gemm *a, int f32)
{
    if (a->alpha == 0.0)
        return GEMM_ALPHA0;
    if (is_gemv(a))
        return GEMM_GEMV;
#ifdef TT_ROWS_DOT
    if (f32 && rows_dot_ok(a))
        return GEMM_ROWS_DOT;
#else
    (void)f32;
#endif
    return GEMM_BLAS;
}

const char *tt_gemm_cpu_path(int dtype, int64_t m, int64_t n, int64_t k, int ta, int tb, double alpha)
{
    const tt_args_gemm a = {.dtype = dtype, .batch = 1, .m = m, .n = n, .k = k, .ta = ta, .tb = tb, .alpha = alpha};
    static const char *const names[] = {"alpha0", "gemv", "rows_dot", "blas"};
    return names[gemm_path(&a, dtype != TT_F64)];
}

static void sgemm_batch(const tt_args_gemm *a, const float *A, const float *B, float *C)
{
    const int m = (int)a->m, n = (int)a->n, k = (int)a->k;
    switch (gemm_path(a, 1)) {
    case GEMM_ALPHA0:
        alpha_zero(a, 1, C);
        return;
    case GEMM_GEMV:
        gemv_batch(a, 1, A, B, C);
        return;
#ifdef TT_ROWS_DOT
    case GEMM_ROWS_DOT:
        for (int64_t i = 0; i < a->batch; i++)
            rows_dot(m, n, k, (float)a->alpha, A + i * (int64_t)m * k, B + i * (int64_t)k * n, (float)a->beta,
                     C + i * (int64_t)m * n);
        return;
#endif
    default:
        break;
    }
    const enum CBLAS_TRANSPOSE ta = a->ta ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = a->tb ? CblasTrans : CblasNoTrans;
    const int lda = a->ta ? m : k, ldb = a->tb ? k : n;
    for (int64_t i = 0; i < a->batch; i++)
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, (float)a->alpha, A + i * (int64_t)m * k, lda,
                    B + i * (int64_t)k * n, ldb, (float)a->beta, C + i * (int64_t)m * n, n);
}

static void half_to_f32(int64_t dtype, const void *src, int64_t n, float *dst)
{
    if (dtype == TT_F16)
        for (int64_t i = 0; i < n; i++)
            dst[i] = tt_ld_f16(((const tt_f16 *)src)[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = tt_ld_bf16(((const tt_bf16 *)src)[i]);
}

/* The float32 copies of a half task's tiles: one buffer per worker thread, grown to the
 * largest task seen and kept (a malloc/free of tile-sized blocks per task would map and
 * unmap fresh pages every time). */
static __thread float *scratch = NULL;
static __thread size_t scratch_len = 0;

static float *scratch_floats(size_t n)
{
    if (n > scratch_len) {
        float *p = realloc(scratch, sizeof(float) * n);
        if (!p)
            return NULL;
        scratch = p;
        scratch_len = n;
    }
    return scratch;
}

static void half_gemm(const tt_args_gemm *a, const void *A, const void *B, void *C)
{
    const int64_t na = a->batch * a->m * a->k, nb = a->batch * a->k * a->n, nc = a->batch * a->m * a->n;
    float *buf = scratch_floats((size_t)(na + nb + (a->cacc ? 0 : nc)));
    if (!buf) { /* a kernel body has no error path: report and abort, as StarPU does */
        fprintf(stderr, "tiletrain: gemm: out of memory for the float32 copies of a %s tile\n",
                a->dtype == TT_F16 ? "float16" : "bfloat16");
        abort();
    }
    float *fa = buf, *fb = buf + na, *fc = a->cacc ? (float *)C : buf + na + nb;
    half_to_f32(a->dtype, A, na, fa);
    half_to_f32(a->dtype, B, nb, fb);
    if (!a->cacc && a->beta != 0.0)
        half_to_f32(a->dtype, C, nc, fc);
    sgemm_batch(a, fa, fb, fc);
    if (!a->cacc) {
        if (a->dtype == TT_F16)
            for (int64_t i = 0; i < nc; i++)
                ((tt_f16 *)C)[i] = tt_st_f16(fc[i]);
        else
            for (int64_t i = 0; i < nc; i++)
                ((tt_bf16 *)C)[i] = tt_st_bf16(fc[i]);
    }
}

static void dgemm_batch(const tt_args_gemm *a, const double *A, const double *B, double *C)
{
    const int m = (int)a->m, n = (int)a->n, k = (int)a->k;
    switch (gemm_path(a, 0)) {
    case GEMM_ALPHA0:
        alpha_zero(a, 0, C);
        return;
    case GEMM_GEMV:
        gemv_batch(a, 0, A, B, C);
        return;
    default:
        break;
    }
    const enum CBLAS_TRANSPOSE ta = a->ta ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = a->tb ? CblasTrans : CblasNoTrans;
    const int lda = a->ta ? m : k, ldb = a->tb ? k : n;
    for (int64_t i = 0; i < a->batch; i++)
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, a->alpha, A + i * (int64_t)m * k, lda, B + i * (int64_t)k * n,
                    ldb, a->beta, C + i * (int64_t)m * n, n);
}

void tt_cpu_gemm(const tt_args_gemm *a, const void *A, const void *B, void *C)
{
    if (a->dtype == TT_F32)
        sgemm_batch(a, A, B, C);
    else if (a->dtype == TT_F64)
        dgemm_batch(a, A, B, C);
    else if (a->dtype == TT_F16 || a->dtype == TT_BF16)
        half_gemm(a, A, B, C);
}

/* bias (n) copied into every row of C (batch * m rows). */
static void bias_rows(int64_t dtype, int64_t rows, int64_t n, const void *bias, void *C)
{
    const size_t es = dtype == TT_F64 ? sizeof(double) : sizeof(float);
    for (int64_t r = 0; r < rows; r++)
        memcpy((char *)C + (size_t)(r * n) * es, bias, (size_t)n * es);
}

/* c = alpha op(A) op(B) + bias: bias copied into every row of C, then gemm with beta 1 (one
 * task where a linear layer otherwise needs a gemm and a broadcast add). */
void tt_cpu_gemm_bias(const tt_args_gemm_bias *a, const void *A, const void *B, const void *bias, void *C)
{
    bias_rows(a->dtype, a->batch * a->m, a->n, bias, C);
    const tt_args_gemm g = {.dtype = a->dtype, .batch = a->batch, .m = a->m, .n = a->n, .k = a->k, .ta = a->ta,
                            .tb = a->tb, .cacc = 0, .alpha = a->alpha, .beta = 1.0};
    tt_cpu_gemm(&g, A, B, C);
}

/* The GELU epilogue of a linear layer's chain: C (+)= alpha op(A) op(B) (+ bias when first),
 * then Y = gelu(C) while C is still in cache; C keeps the pre-activation, or with deriv
 * becomes gelu'(pre-activation), the factor of the backward. */
void tt_cpu_gemm_gelu(const tt_args_gemm_gelu *a, const void *A, const void *B, const void *bias, void *C, void *Y)
{
    if (a->first)
        bias_rows(a->dtype, a->batch * a->m, a->n, bias, C);
    const tt_args_gemm g = {.dtype = a->dtype, .batch = a->batch, .m = a->m, .n = a->n, .k = a->k, .ta = a->ta,
                            .tb = a->tb, .cacc = 0, .alpha = a->alpha, .beta = 1.0};
    tt_cpu_gemm(&g, A, B, C);
    const tt_args_gelu ga = {.dtype = a->dtype, .n = a->batch * a->m * a->n, .approx = a->approx};
    if (a->deriv)
        tt_gelu_and_grad(ga.dtype, ga.n, ga.approx, C, Y);
    else
        tt_cpu_gelu(&ga, C, Y);
}
