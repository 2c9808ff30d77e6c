/* region_add: the halo kernels' scatter (csrc/expand_conv.c).  A box d0 x d1 x d2 x d3 of
 * tile x added into tile y (y += x), each addressed by an element offset and one element
 * stride per box axis, as region_copy (csrc/kernels/cpu/shape.c): the gradient of a conv or
 * pool window added back into the input-gradient tiles it overlaps. */
#include "tt_cpu.h"

#define TT_REGION_ADD(T)                                                                               \
    do {                                                                                               \
        const T *px = (const T *)x + a->xo;                                                            \
        T *py = (T *)y + a->yo;                                                                        \
        for (int64_t i0 = 0; i0 < a->d0; i0++)                                                         \
            for (int64_t i1 = 0; i1 < a->d1; i1++)                                                     \
                for (int64_t i2 = 0; i2 < a->d2; i2++) {                                               \
                    const T *sx = px + i0 * a->xs0 + i1 * a->xs1 + i2 * a->xs2;                        \
                    T *sy = py + i0 * a->ys0 + i1 * a->ys1 + i2 * a->ys2;                              \
                    for (int64_t i3 = 0; i3 < a->d3; i3++)                                             \
                        sy[i3 * a->ys3] += sx[i3 * a->xs3];                                            \
                }                                                                                      \
    } while (0)

void tt_cpu_region_add(const tt_args_region_add *a, const void *x, void *y)
{
    if (a->dtype == TT_F32)
        TT_REGION_ADD(float);
    else if (a->dtype == TT_F64)
        TT_REGION_ADD(double);
}
