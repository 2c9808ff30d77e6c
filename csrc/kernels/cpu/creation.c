/* Creation kernels: arange and linspace (tiletrain/ops/creation.py).  Random tensors are drawn on
 * the host, as torch's CPU generator draws them (tiletrain/tensors/rng.py). */
#include <math.h>
#include "tt_cpu.h"

/* y[i] = start + step * (global index), computed in double as torch does, then stored. */
void tt_cpu_arange(const tt_args_arange *a, void *y)
{
    const int64_t i0 = a->tile * a->ts;
    for (int64_t i = 0; i < a->n; i++) {
        const double v = a->start + a->step * (double)(i0 + i);
        if (a->dtype == TT_I64)
            ((int64_t *)y)[i] = (int64_t)v;
        else if (a->dtype == TT_F32)
            ((float *)y)[i] = (float)v;
        else
            ((double *)y)[i] = v;
    }
}

/* torch's linspace: step = (end - start) / (steps - 1) in the element type (double for
 * integers); the first half counts up from start, the second half down from end. */
void tt_cpu_linspace(const tt_args_linspace *a, void *y)
{
    const int64_t i0 = a->tile * a->ts, steps = a->steps, half = steps / 2;
    if (a->dtype == TT_I64) {
        const int64_t start = (int64_t)a->start, end = (int64_t)a->end;
        const double step = steps > 1 ? (double)(end - start) / (double)(steps - 1) : 0.0;
        for (int64_t i = 0, k = i0; i < a->n; i++, k++)
            ((int64_t *)y)[i] = steps == 1 || k < half ? (int64_t)((double)start + step * (double)k)
                                         : (int64_t)((double)end - step * (double)(steps - k - 1));
        return;
    }
    TT_FLOAT_DISPATCH(a->dtype, {
        const T start = (T)a->start, end = (T)a->end;
        const T step = steps > 1 ? (end - start) / (T)(steps - 1) : (T)0;
        T *py = y;
        for (int64_t i = 0, k = i0; i < a->n; i++, k++) {
            volatile T prod = k < half ? step * (T)k : step * (T)(steps - k - 1); /* no fused multiply-add */
            py[i] = steps == 1 ? start : k < half ? start + prod : end - prod;
        }
    });
}
