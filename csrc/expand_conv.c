/* Batch-tile expander of the convolution family (conv, pools, batch norm).
 *
 * Activations (N, C, *spatial) are tiled along the batch axis only, so that every tile holds
 * whole images and no task needs a halo from a neighbouring tile.  `batch` tensors (x, y,
 * dy, dx: their non-batch axes may differ) share the batch tiling; `whole` tensors (weights,
 * biases, per-channel statistics) have a single tile.  One task per batch tile reads every
 * whole tensor; with reduce = 1 the whole tensors a kernel writes accumulate over the batch
 * tiles in order (W on the first tile, `first` = 1 there, RW after), so the sums are
 * deterministic.  The expander fills in `nb` (the first integer argument: images in the
 * tile), `first`, and for bn_stats `na` (elements per channel in the tiles before). */
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"

static int batch_kernel(int kernel)
{
    switch (kernel) {
    case TT_K_CONV_FWD: case TT_K_CONV_BWD_X: case TT_K_CONV_BWD_W:
    case TT_K_MAX_POOL_FWD: case TT_K_MAX_POOL_BWD: case TT_K_AVG_POOL_FWD: case TT_K_AVG_POOL_BWD:
    case TT_K_BN_STATS: case TT_K_BN_FWD: case TT_K_BN_BWD_STATS: case TT_K_BN_BWD_X:
        return 1;
    default:
        return 0;
    }
}

int tt_batch_map(int kernel, const void *args, int nbatch, tt_tensor *const *batch, int nwhole,
                 tt_tensor *const *whole, int reduce)
{
    if (kernel < 0 || kernel >= TT_NKERNELS || !batch_kernel(kernel))
        return tt_error(TT_EINVAL, "batch_map: kernel id %d is not a batch-tile kernel", kernel);
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    if (nbatch < 1 || nwhole < 0 || nbatch + nwhole != k->nbuffers)
        return tt_error(TT_EINVAL, "%s: takes %d tensors, got %d batch + %d whole", k->name, k->nbuffers, nbatch,
                        nwhole);
    if (!batch || (nwhole && !whole) || !args)
        return tt_error(TT_EINVAL, "%s: NULL tensor array or args", k->name);
    if (reduce != 0 && reduce != 1)
        return tt_error(TT_EINVAL, "%s: reduce must be 0 or 1, got %d", k->name, reduce);
    if (reduce && k->off[TT_OFF_FIRST] < 0)
        return tt_error(TT_EINVAL, "%s: a reduction needs a `first` argument", k->name);
    int dtype = -1;
    for (int j = 0; j < k->nbuffers; j++) {
        const int isbatch = j < nbatch;
        tt_tensor *t = isbatch ? batch[j] : whole[j - nbatch];
        const int written = (k->modes[j] & STARPU_W) != 0, acc = written && !isbatch;
        if (acc && !reduce)
            return tt_error(TT_EINVAL, "%s: operand %d is a whole tensor written without reduce", k->name, j);
        int rc = (k->modes[j] & STARPU_R) && !acc ? tt_check_readable(t, k->name) : tt_check_tensor(t, k->name);
        if (rc)
            return rc;
        if (!tt_is_f32_f64(t->dtype))
            return tt_error(TT_EINVAL, "%s: operand %d is %s; float32 or float64 expected", k->name, j,
                            tt_dtype_name(t->dtype));
        if (dtype < 0)
            dtype = t->dtype;
        if (t->dtype != dtype)
            return tt_error(TT_EINVAL, "%s: operands must share a dtype (operand %d is %s, operand 0 is %s)",
                            k->name, j, tt_dtype_name(t->dtype), tt_dtype_name(dtype));
        if (isbatch) {
            if (t->ndim < 1 || t->ntiles != t->grid[0] || t->shape[0] != batch[0]->shape[0] ||
                t->tile[0] != batch[0]->tile[0])
                return tt_error(TT_EINVAL, "%s: operand %d must be tiled along its batch axis only, like operand 0",
                                k->name, j);
        } else if (t->ntiles != 1) {
            return tt_error(TT_EINVAL, "%s: operand %d must be a single tile", k->name, j);
        }
    }
    const tt_tensor *x = batch[0];
    int64_t per_image = 1; /* elements per channel and image (bn_stats' na) */
    for (int d = 2; d < x->ndim; d++)
        per_image *= x->shape[d];
    starpu_data_handle_t h[8];
    enum starpu_data_access_mode modes[8];
    tt_args_buf buf;
    void *a = &buf;
    tt_args_load(kernel, args, &buf);
    int rc;
    for (int64_t i = 0; i < x->grid[0]; i++) {
        ((int64_t *)a)[0] = dtype;
        ((int64_t *)a)[1] = tt_tile_dim(x, 0, i); /* nb: the first integer argument */
        const int first = reduce && i == 0;
        if (k->off[TT_OFF_FIRST] >= 0)
            *(int64_t *)((char *)a + k->off[TT_OFF_FIRST]) = first;
        if (kernel == TT_K_BN_STATS)
            ((tt_args_bn_stats *)a)->na = (double)(i * x->tile[0] * per_image);
        for (int j = 0; j < k->nbuffers; j++) {
            h[j] = j < nbatch ? batch[j]->handles[i] : whole[j - nbatch]->handles[0];
            modes[j] = k->modes[j];
            if (first && j >= nbatch && (modes[j] & STARPU_W))
                modes[j] = STARPU_W;
        }
        rc = tt_submit(kernel, a, h, modes);
        if (rc)
            return rc;
    }
    for (int j = 0; j < k->nbuffers; j++)
        if (k->modes[j] & STARPU_W)
            (j < nbatch ? batch[j] : whole[j - nbatch])->written = 1;
    return TT_OK;
}
