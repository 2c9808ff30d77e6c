/* The one copy kernel of the shape ops (csrc/expand_shape.c): a box of up to 4 axes
 * d0 x d1 x d2 x d3 copied from tile x to tile y, both addressed by an element offset and
 * one element stride per box axis (a stride 0 in x repeats an element: broadcast).  Only
 * the box is written; the rest of y is left as it was. */
#include <string.h>
#include "tt_cpu.h"

#define TT_REGION_COPY(T)                                                                              \
    do {                                                                                               \
        const T *px = (const T *)x + a->xo;                                                            \
        T *py = (T *)y + a->yo;                                                                        \
        for (int64_t i0 = 0; i0 < a->d0; i0++)                                                         \
            for (int64_t i1 = 0; i1 < a->d1; i1++)                                                     \
                for (int64_t i2 = 0; i2 < a->d2; i2++) {                                               \
                    const T *sx = px + i0 * a->xs0 + i1 * a->xs1 + i2 * a->xs2;                        \
                    T *sy = py + i0 * a->ys0 + i1 * a->ys1 + i2 * a->ys2;                              \
                    if (a->xs3 == 1 && a->ys3 == 1)                                                    \
                        memcpy(sy, sx, (size_t)a->d3 * sizeof(T));                                     \
                    else                                                                               \
                        for (int64_t i3 = 0; i3 < a->d3; i3++)                                         \
                            sy[i3 * a->ys3] = sx[i3 * a->xs3];                                         \
                }                                                                                      \
    } while (0)

void tt_cpu_region_copy(const tt_args_region_copy *a, const void *x, void *y)
{
    if (a->dtype == TT_F32)
        TT_REGION_COPY(uint32_t);
    else /* float64, int64: 8-byte elements, copied as bits */
        TT_REGION_COPY(uint64_t);
}
