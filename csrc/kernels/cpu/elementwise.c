/* Element-wise kernels over one contiguous tile of n elements. */
#include <string.h>
#include "tt_cpu.h"

TT_SIMD_CLONES void tt_cpu_fill(const tt_args_fill *a, void *y)
{
    if (a->dtype == TT_I64) {
        int64_t v = (int64_t)a->value, *p = y;
        for (int64_t i = 0; i < a->n; i++)
            p[i] = v;
        return;
    }
    TT_FLOAT_DISPATCH(a->dtype, {
        T v = (T)a->value, *p = y;
        for (int64_t i = 0; i < a->n; i++)
            p[i] = v;
    });
}

void tt_cpu_copy(const tt_args_copy *a, const void *x, void *y)
{
    size_t es = a->dtype == TT_F32 ? 4 : 8;
    memcpy(y, x, (size_t)a->n * es);
}

void tt_cpu_scale(const tt_args_scale *a, const void *x, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y, alpha = (T)a->alpha;
        for (int64_t i = 0; i < a->n; i++)
            py[i] = alpha * px[i];
    });
}

void tt_cpu_add_scalar(const tt_args_add_scalar *a, const void *x, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y, alpha = (T)a->alpha, s = (T)a->s;
        for (int64_t i = 0; i < a->n; i++)
            py[i] = alpha * px[i] + s;
    });
}

void tt_cpu_rdiv_scalar(const tt_args_rdiv_scalar *a, const void *x, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y, s = (T)a->s;
        for (int64_t i = 0; i < a->n; i++)
            py[i] = s / px[i];
    });
}

TT_SIMD_CLONES void tt_cpu_add(const tt_args_add *a, const void *x, const void *b, void *c)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pb = b;
        T *pc = c, alpha = (T)a->alpha, beta = (T)a->beta;
        for (int64_t i = 0; i < a->n; i++)
            pc[i] = alpha * px[i] + beta * pb[i];
    });
}

void tt_cpu_mul(const tt_args_mul *a, const void *x, const void *b, void *c)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pb = b;
        T *pc = c, alpha = (T)a->alpha;
        for (int64_t i = 0; i < a->n; i++)
            pc[i] = alpha * px[i] * pb[i];
    });
}

void tt_cpu_div(const tt_args_div *a, const void *x, const void *b, void *c)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pb = b;
        T *pc = c, alpha = (T)a->alpha;
        for (int64_t i = 0; i < a->n; i++)
            pc[i] = alpha * px[i] / pb[i];
    });
}

TT_SIMD_CLONES void tt_cpu_axpy(const tt_args_axpy *a, const void *x, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y, alpha = (T)a->alpha, beta = (T)a->beta;
        if (beta == (T)1)
            for (int64_t i = 0; i < a->n; i++)
                py[i] += alpha * px[i];
        else
            for (int64_t i = 0; i < a->n; i++)
                py[i] = alpha * px[i] + beta * py[i];
    });
}
