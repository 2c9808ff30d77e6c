/* Embedding gather (forward) and scatter-add (backward) between a tile of m int64 ids and
 * one tile of the table: nv rows starting at row v0, n columns (the same column tile as the
 * output / gradient tile).  Only ids in [v0, v0 + nv) touch the table tile; any other id,
 * including an out-of-range one, is skipped, so no access ever leaves a tile. */
#include <string.h>
#include "tt_cpu.h"

/* y[r, :] = table[ids[r] - v0, :] for the ids in this table tile; first: the other rows of
 * y are zeroed (the table tiles after the first overwrite only their own rows). */
void tt_cpu_embedding_fwd(const tt_args_embedding_fwd *a, const void *ids, const void *table, void *y)
{
    const int64_t m = a->m, n = a->n, nv = a->nv;
    const int64_t v0 = (int64_t)a->v0;
    const int64_t *pid = ids;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pt = table;
        T *py = y;
        for (int64_t r = 0; r < m; r++) {
            const int64_t id = pid[r]; /* compare before subtracting: no overflow */
            if (id >= v0 && id - v0 < nv)
                memcpy(py + r * n, pt + (id - v0) * n, (size_t)n * sizeof(T));
            else if (a->first)
                for (int64_t j = 0; j < n; j++)
                    py[r * n + j] = 0;
        }
    });
}

/* dtable[ids[r] - v0, :] += dy[r, :] for the ids in this table tile, rows in order (so the
 * result does not depend on scheduling); first: dtable is zeroed before. */
void tt_cpu_embedding_bwd(const tt_args_embedding_bwd *a, const void *ids, const void *dy, void *dtable)
{
    const int64_t m = a->m, n = a->n, nv = a->nv;
    const int64_t v0 = (int64_t)a->v0;
    const int64_t *pid = ids;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pg = dy;
        T *pt = dtable;
        if (a->first)
            for (int64_t i = 0; i < nv * n; i++)
                pt[i] = 0;
        for (int64_t r = 0; r < m; r++) {
            const int64_t id = pid[r];
            if (id < v0 || id - v0 >= nv)
                continue;
            T *dst = pt + (id - v0) * n;
            const T *src = pg + r * n;
            for (int64_t j = 0; j < n; j++)
                dst[j] += src[j];
        }
    });
}
