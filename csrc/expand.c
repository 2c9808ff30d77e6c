/* Generic tensor-level expanders: one C call per tensor op, one task per tile (or per
 * tile pair along a contracted/reduced axis).  Geometry comes from tt_tile_* helpers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"

static int is_float(int dtype) { return dtype == TT_F32 || dtype == TT_F64; }

static const char *dtype_name(int dtype)
{
    switch (dtype) {
    case TT_F32: return "float32";
    case TT_F64: return "float64";
    case TT_I64: return "int64";
    default: return "unknown";
    }
}

static int same_layout(const tt_tensor *a, const tt_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->tile[d] != b->tile[d])
            return 0;
    return 1;
}

/* b has a's layout with `axis` removed */
static int layout_without_axis(const tt_tensor *a, int axis, const tt_tensor *b)
{
    if (b->ndim != a->ndim - 1)
        return 0;
    for (int d = 0, e = 0; d < a->ndim; d++) {
        if (d == axis)
            continue;
        if (a->shape[d] != b->shape[e] || a->tile[d] != b->tile[e])
            return 0;
        e++;
    }
    return 1;
}

static void split_at_axis(const tt_tensor *x, const int64_t *idx, int axis, int64_t *m, int64_t *k, int64_t *n)
{
    int64_t ts[TT_MAX_NDIM];
    tt_tile_shape(x, idx, ts);
    *m = 1;
    *n = 1;
    for (int d = 0; d < axis; d++)
        *m *= ts[d];
    *k = ts[axis];
    for (int d = axis + 1; d < x->ndim; d++)
        *n *= ts[d];
}

/* idx of x (rank r) from idx of y (rank r-1) by inserting `i` at `axis` */
static void insert_axis(const int64_t *yidx, int ndim_x, int axis, int64_t i, int64_t *xidx)
{
    for (int d = 0, e = 0; d < ndim_x; d++)
        xidx[d] = (d == axis) ? i : yidx[e++];
}

#define CHECK(t, what)                      \
    do {                                    \
        int rc_ = tt_check_tensor(t, what); \
        if (rc_)                            \
            return rc_;                     \
    } while (0)

#define CHECK_READ(t, what)                   \
    do {                                      \
        int rc_ = tt_check_readable(t, what); \
        if (rc_)                              \
            return rc_;                       \
    } while (0)

int tt_map(int kernel, const void *args, int ntensors, tt_tensor *const *tensors)
{
    if (kernel < 0 || kernel >= TT_NKERNELS)
        return tt_error(TT_EINVAL, "map: unknown kernel id %d", kernel);
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    if (k->n_offset < 0)
        return tt_error(TT_EINVAL, "map: kernel '%s' is not an element-wise map", k->name);
    if (ntensors != k->nbuffers)
        return tt_error(TT_EINVAL, "map: kernel '%s' takes %d tensors, got %d", k->name, k->nbuffers, ntensors);
    if (!args)
        return tt_error(TT_EINVAL, "map: args is NULL");
    for (int j = 0; j < ntensors; j++) {
        if (k->modes[j] & STARPU_R)
            CHECK_READ(tensors[j], k->name);
        else
            CHECK(tensors[j], k->name);
        if (!same_layout(tensors[0], tensors[j]))
            return tt_error(TT_EINVAL, "%s: operand %d has a different shape or tiling than operand 0", k->name, j);
        if (tensors[j]->dtype != tensors[0]->dtype)
            return tt_error(TT_EINVAL, "%s: operand %d is %s, operand 0 is %s", k->name, j,
                            dtype_name(tensors[j]->dtype), dtype_name(tensors[0]->dtype));
    }
    if (!is_float(tensors[0]->dtype) && kernel != TT_K_FILL && kernel != TT_K_COPY)
        return tt_error(TT_EINVAL, "%s: dtype %s is not supported (float32, float64)", k->name,
                        dtype_name(tensors[0]->dtype));
    const tt_tensor *t0 = tensors[0];
    starpu_data_handle_t h[8];
    int64_t idx[TT_MAX_NDIM];
    for (int64_t i = 0; i < t0->ntiles; i++) {
        void *a = malloc(k->args_size);
        if (!a)
            return tt_error(TT_ENOMEM, "%s: out of memory", k->name);
        memcpy(a, args, k->args_size);
        tt_tile_index(t0, i, idx);
        *(int64_t *)a = t0->dtype; /* dtype is always the first field */
        *(int64_t *)((char *)a + k->n_offset) = tt_tile_nelems(t0, idx);
        for (int j = 0; j < ntensors; j++)
            h[j] = tensors[j]->handles[i];
        int rc = tt_submit(kernel, a, h, NULL);
        if (rc)
            return rc;
    }
    for (int j = 0; j < ntensors; j++)
        if (k->modes[j] & STARPU_W)
            tensors[j]->written = 1;
    return TT_OK;
}

static int check_axis_op(const char *what, tt_tensor *x, int axis, tt_tensor *y, int y_read)
{
    CHECK_READ(x, what);
    if (y_read)
        CHECK_READ(y, what);
    else
        CHECK(y, what);
    if (axis < 0 || axis >= x->ndim)
        return tt_error(TT_EINVAL, "%s: axis %d out of range for a rank-%d tensor", what, axis, x->ndim);
    if (!layout_without_axis(x, axis, y))
        return tt_error(TT_EINVAL, "%s: the other operand must have x's shape and tiles without axis %d", what, axis);
    if (!is_float(x->dtype) || x->dtype != y->dtype)
        return tt_error(TT_EINVAL, "%s: operands must share a float dtype (got %s and %s)", what,
                        dtype_name(x->dtype), dtype_name(y->dtype));
    return TT_OK;
}

static int reduce_axis(int kernel, double alpha, tt_tensor *x, int axis, double beta, tt_tensor *y)
{
    const char *what = tt_kernel_table[kernel].name;
    int rc = check_axis_op(what, x, axis, y, kernel == TT_K_SUM_AXIS && beta != 0.0);
    if (rc)
        return rc;
    y->written = 1;
    int64_t yidx[TT_MAX_NDIM], xidx[TT_MAX_NDIM];
    for (int64_t j = 0; j < y->ntiles; j++) {
        tt_tile_index(y, j, yidx);
        for (int64_t i = 0; i < x->grid[axis]; i++) {
            insert_axis(yidx, x->ndim, axis, i, xidx);
            int first = (i == 0);
            enum starpu_data_access_mode modes[2] = {STARPU_R, STARPU_RW};
            if (kernel == TT_K_SUM_AXIS) {
                tt_args_sum_axis *a = tt_args_new(kernel);
                if (!a)
                    return tt_error(TT_ENOMEM, "%s: out of memory", what);
                a->dtype = x->dtype;
                split_at_axis(x, xidx, axis, &a->m, &a->k, &a->n);
                a->alpha = alpha;
                a->beta = first ? beta : 1.0;
                if (first && beta == 0.0)
                    modes[1] = STARPU_W;
                starpu_data_handle_t h[2] = {x->handles[tt_tile_linear(x, xidx)], y->handles[j]};
                rc = tt_submit(kernel, a, h, modes);
            } else {
                tt_args_max_axis *a = tt_args_new(kernel);
                if (!a)
                    return tt_error(TT_ENOMEM, "%s: out of memory", what);
                a->dtype = x->dtype;
                split_at_axis(x, xidx, axis, &a->m, &a->k, &a->n);
                a->first = first;
                if (first)
                    modes[1] = STARPU_W;
                starpu_data_handle_t h[2] = {x->handles[tt_tile_linear(x, xidx)], y->handles[j]};
                rc = tt_submit(kernel, a, h, modes);
            }
            if (rc)
                return rc;
        }
    }
    return TT_OK;
}

int tt_sum_axis(double alpha, tt_tensor *x, int axis, double beta, tt_tensor *y)
{
    return reduce_axis(TT_K_SUM_AXIS, alpha, x, axis, beta, y);
}

int tt_max_axis(tt_tensor *x, int axis, tt_tensor *y)
{
    return reduce_axis(TT_K_MAX_AXIS, 1.0, x, axis, 0.0, y);
}

int tt_add_bcast(double alpha, tt_tensor *x, double beta, tt_tensor *b, int axis, tt_tensor *y)
{
    const char *what = "add_bcast";
    int rc = check_axis_op(what, x, axis, b, 1);
    if (rc)
        return rc;
    CHECK(y, what);
    if (!same_layout(x, y) || y->dtype != x->dtype)
        return tt_error(TT_EINVAL, "%s: output must have the input's shape, tiles and dtype", what);
    y->written = 1;
    int64_t xidx[TT_MAX_NDIM], bidx[TT_MAX_NDIM];
    for (int64_t i = 0; i < x->ntiles; i++) {
        tt_tile_index(x, i, xidx);
        for (int d = 0, e = 0; d < x->ndim; d++)
            if (d != axis)
                bidx[e++] = xidx[d];
        tt_args_add_bcast *a = tt_args_new(TT_K_ADD_BCAST);
        if (!a)
            return tt_error(TT_ENOMEM, "%s: out of memory", what);
        a->dtype = x->dtype;
        split_at_axis(x, xidx, axis, &a->m, &a->k, &a->n);
        a->alpha = alpha;
        a->beta = beta;
        starpu_data_handle_t h[3] = {x->handles[i], b->handles[tt_tile_linear(b, bidx)], y->handles[i]};
        rc = tt_submit(TT_K_ADD_BCAST, a, h, NULL);
        if (rc)
            return rc;
    }
    return TT_OK;
}

int tt_sum_all(double alpha, tt_tensor *x, double beta, tt_tensor *y)
{
    const char *what = "sum_all";
    CHECK_READ(x, what);
    if (beta != 0.0)
        CHECK_READ(y, what);
    else
        CHECK(y, what);
    if (y->ntiles != 1 || tt_tile_nelems(y, (int64_t[TT_MAX_NDIM]){0}) != 1)
        return tt_error(TT_EINVAL, "%s: output must hold exactly one element", what);
    if (!is_float(x->dtype) || x->dtype != y->dtype)
        return tt_error(TT_EINVAL, "%s: operands must share a float dtype (got %s and %s)", what,
                        dtype_name(x->dtype), dtype_name(y->dtype));
    y->written = 1;
    int64_t idx[TT_MAX_NDIM];
    for (int64_t i = 0; i < x->ntiles; i++) {
        tt_tile_index(x, i, idx);
        tt_args_sum_all *a = tt_args_new(TT_K_SUM_ALL);
        if (!a)
            return tt_error(TT_ENOMEM, "%s: out of memory", what);
        a->dtype = x->dtype;
        a->nx = tt_tile_nelems(x, idx);
        a->alpha = alpha;
        a->beta = i == 0 ? beta : 1.0;
        enum starpu_data_access_mode modes[2] = {STARPU_R, (i == 0 && beta == 0.0) ? STARPU_W : STARPU_RW};
        starpu_data_handle_t h[2] = {x->handles[i], y->handles[0]};
        int rc = tt_submit(TT_K_SUM_ALL, a, h, modes);
        if (rc)
            return rc;
    }
    return TT_OK;
}

int tt_gemm(double alpha, tt_tensor *a, int transa, tt_tensor *b, int transb, double beta, tt_tensor *c)
{
    const char *what = "matmul";
    CHECK_READ(a, what);
    CHECK_READ(b, what);
    if (beta != 0.0)
        CHECK_READ(c, what);
    else
        CHECK(c, what);
    if (!is_float(a->dtype) || a->dtype != b->dtype || a->dtype != c->dtype)
        return tt_error(TT_EINVAL, "%s: operands must share a float dtype (got %s, %s, %s)", what,
                        dtype_name(a->dtype), dtype_name(b->dtype), dtype_name(c->dtype));
    int nd = a->ndim;
    if (nd < 2 || b->ndim < 2)
        return tt_error(TT_EINVAL, "%s: operands must have rank >= 2 (got %d and %d)", what, a->ndim, b->ndim);
    int batched = b->ndim > 2;
    if (batched && b->ndim != nd)
        return tt_error(TT_EINVAL, "%s: batched operands must have the same rank (got %d and %d)", what, nd, b->ndim);
    if (!batched && nd > 2 && transa)
        return tt_error(TT_EINVAL, "%s: transpose_a needs a 2-D a when b is 2-D", what);
    if (c->ndim != nd)
        return tt_error(TT_EINVAL, "%s: output rank %d, expected %d", what, c->ndim, nd);
    int nlead = nd - 2;
    for (int d = 0; d < nlead; d++) {
        if (c->shape[d] != a->shape[d] || c->tile[d] != a->tile[d])
            return tt_error(TT_EINVAL, "%s: output batch axis %d does not match a", what, d);
        if (batched && (b->shape[d] != a->shape[d] || b->tile[d] != a->tile[d]))
            return tt_error(TT_EINVAL, "%s: batch axis %d of a (%lld, tiles %lld) and b (%lld, tiles %lld) differ",
                            what, d, (long long)a->shape[d], (long long)a->tile[d], (long long)b->shape[d],
                            (long long)b->tile[d]);
    }
    int am = transa ? nd - 1 : nd - 2, ak = transa ? nd - 2 : nd - 1;
    int bo = b->ndim - 2;
    int bk = transb ? bo + 1 : bo, bn = transb ? bo : bo + 1;
    if (a->shape[ak] != b->shape[bk])
        return tt_error(TT_EINVAL, "%s: inner dimensions differ (%lld vs %lld)", what, (long long)a->shape[ak],
                        (long long)b->shape[bk]);
    if (a->tile[ak] != b->tile[bk])
        return tt_error(TT_EINVAL, "%s: inner tile sizes differ (%lld vs %lld)", what, (long long)a->tile[ak],
                        (long long)b->tile[bk]);
    if (c->shape[nd - 2] != a->shape[am] || c->shape[nd - 1] != b->shape[bn] || c->tile[nd - 2] != a->tile[am] ||
        c->tile[nd - 1] != b->tile[bn])
        return tt_error(TT_EINVAL, "%s: output shape or tiles do not match the operands", what);

    c->written = 1;
    int64_t cidx[TT_MAX_NDIM], aidx[TT_MAX_NDIM], bidx[TT_MAX_NDIM], cts[TT_MAX_NDIM];
    int64_t kgrid = a->grid[ak];
    for (int64_t t = 0; t < c->ntiles; t++) {
        tt_tile_index(c, t, cidx);
        tt_tile_shape(c, cidx, cts);
        int64_t lead = 1;
        for (int d = 0; d < nlead; d++)
            lead *= cts[d];
        for (int64_t kt = 0; kt < kgrid; kt++) {
            for (int d = 0; d < nlead; d++)
                aidx[d] = bidx[d] = cidx[d];
            aidx[am] = cidx[nd - 2];
            aidx[ak] = kt;
            bidx[bk] = kt;
            bidx[bn] = cidx[nd - 1];
            tt_args_gemm *g = tt_args_new(TT_K_GEMM);
            if (!g)
                return tt_error(TT_ENOMEM, "%s: out of memory", what);
            g->dtype = a->dtype;
            g->batch = batched ? lead : 1;
            g->m = batched ? cts[nd - 2] : lead * cts[nd - 2];
            g->n = cts[nd - 1];
            g->k = tt_tile_dim(a, ak, kt);
            g->ta = transa != 0;
            g->tb = transb != 0;
            g->alpha = alpha;
            g->beta = kt == 0 ? beta : 1.0;
            enum starpu_data_access_mode modes[3] = {STARPU_R, STARPU_R,
                                                     (kt == 0 && beta == 0.0) ? STARPU_W : STARPU_RW};
            starpu_data_handle_t h[3] = {a->handles[tt_tile_linear(a, aidx)], b->handles[tt_tile_linear(b, bidx)],
                                         c->handles[t]};
            int rc = tt_submit(TT_K_GEMM, g, h, modes);
            if (rc)
                return rc;
        }
    }
    return TT_OK;
}
