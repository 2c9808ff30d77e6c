/* Row/column expander of the norm family (layer_norm, rms_norm over the last axis).
 *
 * A `full` tensor x of shape (..., C) meets two kinds of small tensors in the same task:
 * row tensors (x's layout without the last axis: per-row mean, rstd, ...) and column
 * tensors (the last axis alone, 1-D (C,) tiled like x's last axis: weight, bias, ...).
 * Each tile of x is viewed as (m, n): m = the product of its leading tile dimensions,
 * n = its width along the last axis.  Kernels take integer args m, n (and `first` for a
 * reduction); buffers are the full tensors, then the row tensors, then the column tensors.
 *
 *   reduce = 0  one task per tile of x; row and column tensors are only read
 *   reduce = 1  row tensors accumulate over the tiles of the last axis (visited in order
 *               for each row tile, `first` on the first one); column tensors are read
 *   reduce = 2  column tensors accumulate over every row tile (visited in order for each
 *               column tile, `first` on the first one); row tensors are read
 *
 * Reduced outputs declared RW become W on the first tile of their chain: the kernel must
 * overwrite them when first = 1.  layer_norm_stats also gets `na`, the number of columns
 * of the row before this tile, for its pairwise (Chan) merge. */
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"

int tt_norm_map(int kernel, const void *args, int nfull, tt_tensor *const *full, int nrow, tt_tensor *const *rows,
                int ncol, tt_tensor *const *cols, int reduce)
{
    if (kernel < 0 || kernel >= TT_NKERNELS)
        return tt_error(TT_EINVAL, "norm_map: unknown kernel id %d", kernel);
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    if (k->off[TT_OFF_M] < 0 || k->off[TT_OFF_N] < 0 || k->is_map || k->is_span)
        return tt_error(TT_EINVAL, "%s: not a row/column kernel (integer args m, n)", k->name);
    if (nfull < 1 || nrow < 0 || ncol < 0 || nfull + nrow + ncol != k->nbuffers)
        return tt_error(TT_EINVAL, "%s: takes %d tensors, got %d full + %d row + %d column", k->name, k->nbuffers,
                        nfull, nrow, ncol);
    if ((nrow && !rows) || (ncol && !cols) || !full)
        return tt_error(TT_EINVAL, "%s: tensor array is NULL", k->name);
    if (!args)
        return tt_error(TT_EINVAL, "%s: args is NULL", k->name);
    if (reduce < 0 || reduce > 2)
        return tt_error(TT_EINVAL, "%s: reduce must be 0, 1 (rows) or 2 (columns), got %d", k->name, reduce);
    if (reduce && k->off[TT_OFF_FIRST] < 0)
        return tt_error(TT_EINVAL, "%s: a reduction needs a `first` argument", k->name);

    int fdtype = -1;
    for (int j = 0; j < k->nbuffers; j++) {
        int kind = j < nfull ? 0 : j < nfull + nrow ? 1 : 2; /* full, row, column */
        tt_tensor *t = kind == 0 ? full[j] : kind == 1 ? rows[j - nfull] : cols[j - nfull - nrow];
        int reduced = reduce && kind == reduce && (k->modes[j] & STARPU_W); /* an accumulated output */
        if ((k->modes[j] & STARPU_W) && kind != 0 && !reduced)
            return tt_error(TT_EINVAL, "%s: operand %d is written but is a %s tensor and reduce=%d", k->name, j,
                            kind == 1 ? "row" : "column", reduce);
        /* reduction outputs are overwritten on the first tile: they need no data before */
        int read = (k->modes[j] & STARPU_R) && !reduced;
        int rc = read ? tt_check_readable(t, k->name) : tt_check_tensor(t, k->name);
        if (rc)
            return rc;
        if (t->dtype != TT_F32 && t->dtype != TT_F64)
            return tt_error(TT_EINVAL, "%s: operand %d is %s; float32 or float64 expected", k->name, j,
                            tt_dtype_name(t->dtype));
        if (fdtype < 0)
            fdtype = t->dtype;
        if (t->dtype != fdtype)
            return tt_error(TT_EINVAL, "%s: operands must share a dtype (operand %d is %s, operand 0 is %s)",
                            k->name, j, tt_dtype_name(t->dtype), tt_dtype_name(fdtype));
    }
    tt_tensor *x = full[0];
    const int last = x->ndim - 1;
    if (x->ndim < 1)
        return tt_error(TT_EINVAL, "%s: operand 0 must have rank >= 1", k->name);
    for (int j = 1; j < nfull; j++)
        if (!tt_same_layout(x, full[j]))
            return tt_error(TT_EINVAL, "%s: operand %d has a different shape or tiling than operand 0", k->name, j);
    for (int j = 0; j < nrow; j++) {
        const tt_tensor *r = rows[j];
        int ok = r->ndim == last;
        for (int d = 0; ok && d < last; d++)
            ok = r->shape[d] == x->shape[d] && r->tile[d] == x->tile[d];
        if (!ok)
            return tt_error(TT_EINVAL, "%s: row operand %d must have operand 0's shape and tiles without the last "
                            "axis", k->name, nfull + j);
    }
    for (int j = 0; j < ncol; j++) {
        const tt_tensor *c = cols[j];
        if (c->ndim != 1 || c->shape[0] != x->shape[last] || c->tile[0] != x->tile[last])
            return tt_error(TT_EINVAL, "%s: column operand %d must be 1-D of size %lld with tiles of %lld",
                            k->name, nfull + nrow + j, (long long)x->shape[last], (long long)x->tile[last]);
    }

    /* x's tiles are row-major with the last axis innermost: tile (r, c) is r * ncoltiles + c,
     * row tile r of a row tensor and column tile c of a column tensor. */
    const int64_t ncoltiles = x->grid[last], nrowtiles = x->ntiles / ncoltiles;
    const int64_t nouter = reduce == 2 ? ncoltiles : nrowtiles, ninner = reduce == 2 ? nrowtiles : ncoltiles;
    int64_t idx[TT_MAX_NDIM];
    starpu_data_handle_t h[8];
    enum starpu_data_access_mode modes[8];
    tt_args_buf buf;
    void *a = &buf;
    tt_args_load(kernel, args, &buf);
    int rc;
    for (int64_t o = 0; o < nouter; o++) {
        for (int64_t in = 0; in < ninner; in++) {
            const int64_t r = reduce == 2 ? in : o, c = reduce == 2 ? o : in;
            const int64_t xl = r * ncoltiles + c;
            tt_tile_index(x, xl, idx);
            const int64_t n = tt_tile_dim(x, last, c);
            *(int64_t *)a = fdtype;
            *(int64_t *)((char *)a + k->off[TT_OFF_M]) = tt_tile_nelems(x, idx) / n;
            *(int64_t *)((char *)a + k->off[TT_OFF_N]) = n;
            const int first = reduce && in == 0;
            if (k->off[TT_OFF_FIRST] >= 0)
                *(int64_t *)((char *)a + k->off[TT_OFF_FIRST]) = first;
            if (kernel == TT_K_LAYER_NORM_STATS)
                ((tt_args_layer_norm_stats *)a)->na = (double)(c * x->tile[last]);
            for (int j = 0; j < k->nbuffers; j++) {
                int kind = j < nfull ? 0 : j < nfull + nrow ? 1 : 2;
                h[j] = kind == 0 ? full[j]->handles[xl]
                     : kind == 1 ? rows[j - nfull]->handles[r]
                                 : cols[j - nfull - nrow]->handles[c];
                modes[j] = k->modes[j];
                if (first && kind == reduce && (modes[j] & STARPU_W))
                    modes[j] = STARPU_W;
            }
            rc = tt_submit(kernel, a, h, modes);
            if (rc)
                return rc;
        }
    }
    for (int j = 0; j < k->nbuffers; j++) {
        int kind = j < nfull ? 0 : j < nfull + nrow ? 1 : 2;
        tt_tensor *t = kind == 0 ? full[j] : kind == 1 ? rows[j - nfull] : cols[j - nfull - nrow];
        if (k->modes[j] & STARPU_W)
            t->written = 1;
    }
    return TT_OK;
}
