/* Index gather and scatter between tiles viewed as (a, d, b) around the indexed axis
 * (kernels.def, "index, scatter and block-sparse ops"): the indexed tile holds positions
 * [v0, v0 + nv) of that axis; any index outside it, out-of-range ones included, is skipped,
 * so no access ever leaves a tile.  Elements are visited in order, so results do not depend
 * on scheduling. */
#include <string.h>
#include "tt_cpu.h"

static inline int64_t index_at(const int64_t *idx, int vec, int64_t a, int64_t i, int64_t ne, int64_t nb, int64_t b)
{
    return vec ? idx[i] : idx[(a * ne + i) * nb + b];
}

void tt_cpu_index_gather(const tt_args_index_gather *a, const void *idx, const void *x, void *y)
{
    const int64_t ma = a->ma, ne = a->ne, nb = a->nb, nv = a->nv, v0 = (int64_t)a->v0;
    const int vec = (int)a->vec, first = (int)a->first;
    const int64_t *pi = idx;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        if (vec) /* one index per row of nb: checked once, the row copied (or zeroed) whole */
            for (int64_t r = 0; r < ma; r++)
                for (int64_t i = 0; i < ne; i++) {
                    const int64_t id = pi[i];
                    T *dst = py + (r * ne + i) * nb;
                    if (id >= v0 && id - v0 < nv)
                        memcpy(dst, px + (r * nv + (id - v0)) * nb, (size_t)nb * sizeof(T));
                    else if (first)
                        memset(dst, 0, (size_t)nb * sizeof(T));
                }
        else
            for (int64_t r = 0; r < ma; r++)
                for (int64_t i = 0; i < ne; i++)
                    for (int64_t b = 0; b < nb; b++) {
                        const int64_t id = index_at(pi, vec, r, i, ne, nb, b);
                        T *dst = py + (r * ne + i) * nb + b;
                        if (id >= v0 && id - v0 < nv)
                            *dst = px[(r * nv + (id - v0)) * nb + b];
                        else if (first)
                            *dst = 0;
                    }
    });
}

#define SCATTER_BODY(COUNTED)                                                                  \
    for (int64_t r = 0; r < ma; r++)                                                           \
        for (int64_t i = 0; i < ne; i++) {                                                     \
            if (vec && (pi[i] < v0 || pi[i] - v0 >= nv))                                       \
                continue; /* a row of another tile: skipped whole */                           \
            for (int64_t b = 0; b < nb; b++) {                                                 \
                const int64_t id = index_at(pi, vec, r, i, ne, nb, b);                         \
                if (id < v0 || id - v0 >= nv)                                                  \
                    continue;                                                                  \
                const int64_t o = (r * nv + (id - v0)) * nb + b;                               \
                const T v = ps[(r * ne + i) * nb + b];                                         \
                if (COUNTED && pc[o] == 0) {                                                   \
                    py[o] = v;                                                                 \
                } else if (op == 0) {                                                          \
                    py[o] += v;                                                                \
                } else if (op == 1) {                                                          \
                    if (v > py[o] || isnan(v))                                                 \
                        py[o] = isnan(py[o]) ? py[o] : v;                                      \
                } else if (op == 2) {                                                          \
                    if (v < py[o] || isnan(v))                                                 \
                        py[o] = isnan(py[o]) ? py[o] : v;                                      \
                } else {                                                                       \
                    py[o] = v;                                                                 \
                }                                                                              \
                if (COUNTED)                                                                   \
                    pc[o] += 1;                                                                \
            }                                                                                  \
        }

void tt_cpu_index_scatter(const tt_args_index_scatter *a, const void *idx, const void *src, void *y)
{
    const int64_t ma = a->ma, ne = a->ne, nb = a->nb, nv = a->nv, v0 = (int64_t)a->v0, op = a->op;
    const int vec = (int)a->vec;
    const int64_t *pi = idx;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *ps = src;
        T *py = y;
        T *pc = NULL; /* not read: COUNTED is 0 */
        (void)pc;
        SCATTER_BODY(0)
    });
}

void tt_cpu_index_scatter_count(const tt_args_index_scatter_count *a, const void *idx, const void *src, void *y,
                                void *cnt)
{
    const int64_t ma = a->ma, ne = a->ne, nb = a->nb, nv = a->nv, v0 = (int64_t)a->v0, op = a->op;
    const int vec = (int)a->vec;
    const int64_t *pi = idx;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *ps = src;
        T *py = y;
        T *pc = cnt;
        SCATTER_BODY(1)
    });
}
