/* Element-wise kernels over one contiguous tile of n elements.  Kernels that take float16 /
 * bfloat16 tiles (TT_ANY_FLOAT_DISPATCH) load each element as float, compute in float32 and
 * round once on store (TT_LD / TT_ST, tt_cpu.h); for float32 and float64 the same source
 * compiles to the plain loops. */
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
    if (a->dtype == TT_BOOL) { /* any nonzero value is true (1) */
        memset(y, a->value != 0, (size_t)a->n);
        return;
    }
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        T v = TT_ST(T, a->value), *p = y; /* one rounding from the double value */
        for (int64_t i = 0; i < a->n; i++)
            p[i] = v;
    });
}

void tt_cpu_copy(const tt_args_copy *a, const void *x, void *y)
{
    memcpy(y, x, (size_t)a->n * tt_dtype_size((int)a->dtype));
}

void tt_cpu_after(const tt_args_after *a, const void *x, void *y)
{
    (void)a; /* nothing to compute: the task exists for its data dependencies */
    (void)x;
    (void)y;
}

void tt_cpu_scale(const tt_args_scale *a, const void *x, void *y)
{
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        C alpha = (C)a->alpha;
        for (int64_t i = 0; i < a->n; i++)
            py[i] = TT_ST(T, alpha * TT_LD(px[i]));
    });
}

void tt_cpu_add_scalar(const tt_args_add_scalar *a, const void *x, void *y)
{
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        C alpha = (C)a->alpha, s = (C)a->s;
        for (int64_t i = 0; i < a->n; i++)
            py[i] = TT_ST(T, alpha * TT_LD(px[i]) + s);
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
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pb = b;
        T *pc = c;
        C alpha = (C)a->alpha, beta = (C)a->beta;
        for (int64_t i = 0; i < a->n; i++)
            pc[i] = TT_ST(T, alpha * TT_LD(px[i]) + beta * TT_LD(pb[i]));
    });
}

void tt_cpu_mul(const tt_args_mul *a, const void *x, const void *b, void *c)
{
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pb = b;
        T *pc = c;
        C alpha = (C)a->alpha;
        for (int64_t i = 0; i < a->n; i++)
            pc[i] = TT_ST(T, alpha * TT_LD(px[i]) * TT_LD(pb[i]));
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
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        C alpha = (C)a->alpha, beta = (C)a->beta;
        if (beta == (C)1)
            for (int64_t i = 0; i < a->n; i++)
                py[i] = TT_ST(T, TT_LD(py[i]) + alpha * TT_LD(px[i]));
        else
            for (int64_t i = 0; i < a->n; i++)
                py[i] = TT_ST(T, alpha * TT_LD(px[i]) + beta * TT_LD(py[i]));
    });
}

/* y (dtype `to`) = x (dtype `dtype`), rounded to nearest even.  Sources other than float64
 * load exactly as float; float64 stores straight into the target type (TT_ST from a double
 * rounds once, also for the half types). */
void tt_cpu_cast(const tt_args_cast *a, const void *x, void *y)
{
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        switch (a->to) {
        case TT_F32: for (int64_t i = 0; i < a->n; i++) ((float *)y)[i] = TT_ST(float, TT_LD(px[i])); break;
        case TT_F64: for (int64_t i = 0; i < a->n; i++) ((double *)y)[i] = TT_ST(double, TT_LD(px[i])); break;
        case TT_F16: for (int64_t i = 0; i < a->n; i++) ((tt_f16 *)y)[i] = TT_ST(tt_f16, TT_LD(px[i])); break;
        case TT_BF16: for (int64_t i = 0; i < a->n; i++) ((tt_bf16 *)y)[i] = TT_ST(tt_bf16, TT_LD(px[i])); break;
        default: break;
        }
    });
}
