/* Reductions and broadcasts along one axis of a tile viewed as (m, k, n), row-major.
 * sum_axis and sum_all also take float16/bfloat16 x: their y is then the float32
 * accumulator (an `acc` buffer, C = float), so the sum over every tile rounds once, when
 * the op casts it back to the half type. */
#include <math.h>
#include "tt_cpu.h"

TT_SIMD_CLONES void tt_cpu_sum_axis(const tt_args_sum_axis *a, const void *x, void *y)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        C *py = y; /* T for float32/float64; the float32 accumulator for the half types */
        for (int64_t i = 0; i < m; i++) {
            C *row = py + i * n;
            if (a->first)
                for (int64_t j = 0; j < n; j++)
                    row[j] = 0;
            if (n == 1) {
                double acc = 0.0;
                for (int64_t l = 0; l < k; l++)
                    acc += TT_LD(px[i * k + l]);
                row[0] += (C)(a->alpha * acc);
            } else {
                for (int64_t l = 0; l < k; l++) {
                    const T *src = px + (i * k + l) * n;
                    C alpha = (C)a->alpha;
                    for (int64_t j = 0; j < n; j++)
                        row[j] += alpha * TT_LD(src[j]);
                }
            }
        }
    });
}

void tt_cpu_max_axis(const tt_args_max_axis *a, const void *x, void *y)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        for (int64_t i = 0; i < m; i++) {
            T *row = py + i * n;
            int64_t l0 = 0;
            if (a->first) {
                for (int64_t j = 0; j < n; j++)
                    row[j] = px[i * k * n + j];
                l0 = 1;
            }
            for (int64_t l = l0; l < k; l++) {
                const T *src = px + (i * k + l) * n;
                for (int64_t j = 0; j < n; j++)
                    if (src[j] > row[j] || isnan(src[j]))
                        row[j] = src[j];
            }
        }
    });
}

TT_SIMD_CLONES void tt_cpu_add_bcast(const tt_args_add_bcast *a, const void *x, void *y, const void *b)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pb = b;
        T *py = y, alpha = (T)a->alpha, beta = (T)a->beta;
        for (int64_t i = 0; i < m; i++)
            for (int64_t l = 0; l < k; l++) {
                const T *src = px + (i * k + l) * n, *brow = pb + i * n;
                T *dst = py + (i * k + l) * n;
                for (int64_t j = 0; j < n; j++)
                    dst[j] = alpha * src[j] + beta * brow[j];
            }
    });
}

void tt_cpu_sum_all(const tt_args_sum_all *a, const void *x, void *y)
{
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        C *py = y; /* the float32 accumulator for the half types */
        double acc = 0.0;
        for (int64_t i = 0; i < a->nx; i++)
            acc += TT_LD(px[i]);
        double prev = a->beta == 0.0 ? 0.0 : a->beta * (double)py[0];
        py[0] = (C)(prev + a->alpha * acc);
    });
}

void tt_cpu_bcast(const tt_args_bcast *a, void *y, const void *b)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *pb = b;
        T *py = y;
        C alpha = (C)a->alpha;
        for (int64_t i = 0; i < m; i++)
            for (int64_t l = 0; l < k; l++) {
                T *dst = py + (i * k + l) * n;
                for (int64_t j = 0; j < n; j++)
                    dst[j] = TT_ST(T, alpha * TT_LD(pb[i * n + j]));
            }
    });
}
