/* Task-list expander: one task per row of a list the caller computed, for ops whose tile
 * pairing depends on data (index and scatter ops: which tiles of the output an index tile
 * touches; block-sparse products: which blocks are not empty).  The caller (tiletrain/ops/
 * index.py, sparse.py) builds the list with NumPy in one pass and makes one C call per op;
 * the loop over tasks runs here (docs/architecture.md, principle 2).
 *
 * Task t runs `kernel` on tile tiles[t * ntensors + j] of tensors[j], with its own argument
 * struct args + t * stride (stride: the kernel's argument struct size; its dtype field is
 * set here).  Bit j of wmask[t] submits buffer j as W instead of its table mode (the first
 * task of a chain that overwrites its output).  Float operands share one dtype; int64
 * operands are index tensors whose meaning the kernel knows (a kernel of int64 operands only
 * runs with dtype int64). */
#include "tt_internal.h"

int tt_tile_tasks(int kernel, const void *args, int64_t stride, int64_t ntasks, int ntensors,
                  tt_tensor *const *tensors, const int64_t *tiles, const int64_t *wmask)
{
    if (kernel < 0 || kernel >= TT_NKERNELS)
        return tt_error(TT_EINVAL, "tile_tasks: unknown kernel id %d", kernel);
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    if (ntensors != k->nbuffers)
        return tt_error(TT_EINVAL, "%s: takes %d tensors, got %d", k->name, k->nbuffers, ntensors);
    if (stride != (int64_t)k->args_size)
        return tt_error(TT_EINVAL, "%s: argument stride %lld, the struct has %zu bytes", k->name, (long long)stride,
                        k->args_size);
    if (ntasks < 0 || (ntasks && (!args || !tiles || !tensors)))
        return tt_error(TT_EINVAL, "%s: bad task list (%lld tasks)", k->name, (long long)ntasks);
    int dtype = -1;
    for (int j = 0; j < ntensors; j++) {
        tt_tensor *t = tensors[j];
        /* an output written whole by its first task needs no data before */
        int rc = (k->modes[j] & STARPU_R) && !(k->modes[j] & STARPU_W) ? tt_check_readable(t, k->name)
                                                                          : tt_check_tensor(t, k->name);
        if (rc)
            return rc;
        if (dtype < 0 && t->dtype != TT_I64 && !(k->bools >> j & 1))
            dtype = t->dtype;
    }
    if (dtype < 0) /* every operand int64: an integer kernel (graph samplers) */
        dtype = TT_I64;
    if (!(k->dtypes >> dtype & 1))
        return tt_error(TT_EINVAL, "%s: dtype %s is not supported (supported: %s)", k->name, tt_dtype_name(dtype),
                        tt_dtype_list(k->dtypes));
    for (int j = 0; j < ntensors; j++)
        if (tensors[j]->dtype != TT_I64 && tensors[j]->dtype != tt_buffer_dtype(k, j, dtype))
            return tt_error(TT_EINVAL, "%s: operand %d is %s, expected %s", k->name, j,
                            tt_dtype_name(tensors[j]->dtype), tt_dtype_name(tt_buffer_dtype(k, j, dtype)));
    /* every tile index first, so that a bad list submits nothing */
    for (int64_t t = 0; t < ntasks; t++)
        for (int j = 0; j < ntensors; j++) {
            int64_t i = tiles[t * ntensors + j];
            if (i < 0 || i >= tensors[j]->ntiles)
                return tt_error(TT_EINVAL, "%s: task %lld: tile %lld of operand %d out of range (%lld tiles)",
                                k->name, (long long)t, (long long)i, j, (long long)tensors[j]->ntiles);
        }
    starpu_data_handle_t h[8];
    enum starpu_data_access_mode modes[8];
    tt_args_buf buf;
    for (int64_t t = 0; t < ntasks; t++) {
        tt_args_load(kernel, (const char *)args + t * stride, &buf);
        *(int64_t *)&buf = dtype;
        for (int j = 0; j < ntensors; j++) {
            h[j] = tensors[j]->handles[tiles[t * ntensors + j]];
            modes[j] = (wmask && (wmask[t] >> j & 1)) ? STARPU_W : k->modes[j];
        }
        int rc = tt_submit(kernel, &buf, h, modes);
        if (rc)
            return rc;
    }
    for (int j = 0; j < ntensors; j++)
        if (k->modes[j] & STARPU_W)
            tensors[j]->written = 1;
    return TT_OK;
}
