/* Embedding expanders: ids (int64, any shape S, tiles TS) index the rows of a table (V, C)
 * tiled (tv, tc); the output is S + (C,) tiled TS + (tc,).
 *
 * Forward: each output tile (ids tile i, column tile j) is produced by one task per table
 * tile (v, j) along V, in order: the first overwrites the whole output tile (rows whose id
 * is elsewhere become zero), the others copy only the rows whose ids fall in their tile.
 * Backward: each table-gradient tile (v, j) accumulates over every ids tile i, in order,
 * the first one zeroing it; the chain is fixed at submission, so the sums are
 * deterministic.  Ids outside [0, V) are rejected in Python before submission; the
 * kernels skip any id outside their table tile, so nothing is ever read or written
 * outside a tile. */
#include "tt_internal.h"

/* `out` (y or dy) must have ids' shape and tiles followed by the table's columns. */
static int check_out_layout(const char *what, const char *name, const tt_tensor *ids, const tt_tensor *table,
                            const tt_tensor *out)
{
    int ok = out->ndim == ids->ndim + 1;
    for (int d = 0; ok && d < ids->ndim; d++)
        ok = out->shape[d] == ids->shape[d] && out->tile[d] == ids->tile[d];
    if (ok)
        ok = out->shape[ids->ndim] == table->shape[1] && out->tile[ids->ndim] == table->tile[1];
    if (!ok)
        return tt_error(TT_EINVAL, "%s: %s must have the shape and tiles of ids followed by (%lld,) tiled %lld", what,
                        name, (long long)table->shape[1], (long long)table->tile[1]);
    return TT_OK;
}

static int check_operands(const char *what, const tt_tensor *ids, const tt_tensor *table, const tt_tensor *out,
                          const char *table_name, const char *out_name)
{
    if (ids->dtype != TT_I64)
        return tt_error(TT_EINVAL, "%s: ids must be int64", what);
    if (!tt_is_f32_f64(table->dtype) || table->dtype != out->dtype)
        return tt_error(TT_EINVAL, "%s: %s and %s must share a float dtype (float32, float64)", what, table_name,
                        out_name);
    if (table->ndim != 2)
        return tt_error(TT_EINVAL, "%s: %s must be 2-D (V, C), got rank %d", what, table_name, table->ndim);
    if (ids->ndim + 1 > TT_MAX_NDIM)
        return tt_error(TT_EINVAL, "%s: ids has rank %d; at most %d", what, ids->ndim, TT_MAX_NDIM - 1);
    return check_out_layout(what, out_name, ids, table, out);
}

int tt_embedding(tt_tensor *ids, tt_tensor *table, tt_tensor *y)
{
    return tt_embedding_rows(ids, table, y, 0, table->shape[0] - 1);
}

/* The same when every id is known to lie in [lo, hi] (the caller read them): only the table
 * tiles holding rows lo..hi get tasks (a decode step's one id: one task, not one per tile);
 * the first of those zeroes the rows whose id lies elsewhere, as above. */
int tt_embedding_rows(tt_tensor *ids, tt_tensor *table, tt_tensor *y, int64_t lo, int64_t hi)
{
    const char *what = "embedding";
    int rc;
    if ((rc = tt_check_readable(ids, what)) || (rc = tt_check_readable(table, what)) ||
        (rc = tt_check_tensor(y, what)))
        return rc;
    if ((rc = check_operands(what, ids, table, y, "table", "output")))
        return rc;
    if (lo < 0 || hi < lo || hi >= table->shape[0])
        return tt_error(TT_EINVAL, "%s: id range [%lld, %lld] is not within the table's %lld rows", what,
                        (long long)lo, (long long)hi, (long long)table->shape[0]);
    const int64_t gc = table->grid[1], v0 = lo / table->tile[0], v1 = hi / table->tile[0];
    for (int64_t i = 0; i < ids->ntiles; i++) {
        int64_t idx[TT_MAX_NDIM];
        tt_tile_index(ids, i, idx);
        const int64_t m = tt_tile_nelems(ids, idx);
        for (int64_t j = 0; j < gc; j++) {
            for (int64_t v = v0; v <= v1; v++) {
                tt_args_embedding_fwd args = {0}, *a = &args;
                a->dtype = table->dtype;
                a->m = m;
                a->n = tt_tile_dim(table, 1, j);
                a->nv = tt_tile_dim(table, 0, v);
                a->first = v == v0;
                a->v0 = (double)(v * table->tile[0]);
                starpu_data_handle_t h[3] = {ids->handles[i], table->handles[v * gc + j], y->handles[i * gc + j]};
                enum starpu_data_access_mode modes[3] = {STARPU_R, STARPU_R, v == v0 ? STARPU_W : STARPU_RW};
                if ((rc = tt_submit(TT_K_EMBEDDING_FWD, a, h, modes)))
                    return rc;
            }
        }
    }
    y->written = 1;
    return TT_OK;
}

int tt_embedding_backward(tt_tensor *ids, tt_tensor *dy, tt_tensor *dtable)
{
    const char *what = "embedding backward";
    int rc;
    if ((rc = tt_check_readable(ids, what)) || (rc = tt_check_readable(dy, what)) ||
        (rc = tt_check_tensor(dtable, what)))
        return rc;
    if ((rc = check_operands(what, ids, dtable, dy, "table gradient", "output gradient")))
        return rc;
    const int64_t gv = dtable->grid[0], gc = dtable->grid[1];
    for (int64_t v = 0; v < gv; v++) {
        for (int64_t j = 0; j < gc; j++) {
            for (int64_t i = 0; i < ids->ntiles; i++) {
                int64_t idx[TT_MAX_NDIM];
                tt_tile_index(ids, i, idx);
                tt_args_embedding_bwd args = {0}, *a = &args;
                a->dtype = dtable->dtype;
                a->m = tt_tile_nelems(ids, idx);
                a->n = tt_tile_dim(dtable, 1, j);
                a->nv = tt_tile_dim(dtable, 0, v);
                a->first = i == 0;
                a->v0 = (double)(v * dtable->tile[0]);
                starpu_data_handle_t h[3] = {ids->handles[i], dy->handles[i * gc + j], dtable->handles[v * gc + j]};
                enum starpu_data_access_mode modes[3] = {STARPU_R, STARPU_R, i == 0 ? STARPU_W : STARPU_RW};
                if ((rc = tt_submit(TT_K_EMBEDDING_BWD, a, h, modes)))
                    return rc;
            }
        }
    }
    dtable->written = 1;
    return TT_OK;
}
