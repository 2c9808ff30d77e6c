/* Generic tensor-level expanders: one C call per tensor op, one task per tile (or per
 * tile pair along a contracted/reduced axis).  Geometry comes from tt_tile_* helpers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"

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

/* A kernel's dtype check, before anything is submitted (tt_submit checks every task too). */
static int check_kernel_dtype(const tt_kernel_desc *k, int dtype)
{
    if (dtype < 0 || dtype >= TT_NDTYPES || !(k->dtypes >> dtype & 1))
        return tt_error(TT_EINVAL, "%s: dtype %s is not supported (supported: %s)", k->name, tt_dtype_name(dtype),
                        tt_dtype_list(k->dtypes));
    return TT_OK;
}

/* One task per tile of tensors of one layout (checked by the caller); tasks of `dtype`. */
static int map_tiles(int kernel, const void *args, int dtype, int ntensors, tt_tensor *const *tensors)
{
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    const tt_tensor *t0 = tensors[0];
    starpu_data_handle_t h[8];
    int64_t idx[TT_MAX_NDIM];
    tt_args_buf buf;
    void *a = &buf;
    tt_args_load(kernel, args, &buf);
    int rc;
    for (int64_t i = 0; i < t0->ntiles; i++) {
        tt_tile_index(t0, i, idx);
        *(int64_t *)a = dtype; /* dtype is always the first field */
        *(int64_t *)((char *)a + k->off[TT_OFF_N]) = tt_tile_nelems(t0, idx);
        if (k->off[TT_OFF_TILE] >= 0)
            *(int64_t *)((char *)a + k->off[TT_OFF_TILE]) = i;
        for (int j = 0; j < ntensors; j++)
            h[j] = tensors[j]->handles[i];
        rc = tt_submit(kernel, a, h, NULL);
        if (rc)
            return rc;
    }
    for (int j = 0; j < ntensors; j++)
        if (k->modes[j] & STARPU_W)
            tensors[j]->written = 1;
    return TT_OK;
}

int tt_map(int kernel, const void *args, int ntensors, tt_tensor *const *tensors)
{
    if (kernel < 0 || kernel >= TT_NKERNELS)
        return tt_error(TT_EINVAL, "map: unknown kernel id %d", kernel);
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    if (!k->is_map)
        return tt_error(TT_EINVAL, "map: kernel '%s' is not an element-wise map", k->name);
    if (kernel == TT_K_CAST) /* its operands have different dtypes */
        return tt_error(TT_EINVAL, "map: cast goes through tt_cast, which checks both dtypes");
    if (ntensors != k->nbuffers)
        return tt_error(TT_EINVAL, "map: kernel '%s' takes %d tensors, got %d", k->name, k->nbuffers, ntensors);
    if (!args)
        return tt_error(TT_EINVAL, "map: args is NULL");
    for (int j = 0; j < ntensors; j++) {
        if (k->modes[j] & STARPU_R)
            CHECK_READ(tensors[j], k->name);
        else
            CHECK(tensors[j], k->name);
        if (!tt_same_layout(tensors[0], tensors[j]))
            return tt_error(TT_EINVAL, "%s: operand %d has a different shape or tiling than operand 0", k->name, j);
    }
    /* the task's dtype: that of the first operand that is not a `bool` buffer (all bool: bool) */
    int first = 0;
    while (first < ntensors && (k->bools >> first & 1))
        first++;
    const int dtype = first < ntensors ? tensors[first]->dtype : TT_BOOL;
    for (int j = 0; j < ntensors; j++) {
        int want = tt_buffer_dtype(k, j, dtype);
        if (tensors[j]->dtype == want)
            continue;
        if (want == TT_BOOL)
            return tt_error(TT_EINVAL, "%s: operand %d is %s, expected bool", k->name, j,
                            tt_dtype_name(tensors[j]->dtype));
        return tt_error(TT_EINVAL, "%s: operand %d is %s, expected %s (operand %d is %s)", k->name, j,
                        tt_dtype_name(tensors[j]->dtype), tt_dtype_name(want), first, tt_dtype_name(dtype));
    }
    int rc = check_kernel_dtype(k, dtype);
    if (rc)
        return rc;
    return map_tiles(kernel, args, dtype, ntensors, tensors);
}

int tt_cast(tt_tensor *x, tt_tensor *y)
{
    const tt_kernel_desc *k = &tt_kernel_table[TT_K_CAST];
    CHECK_READ(x, "cast");
    CHECK(y, "cast");
    if (!tt_same_layout(x, y))
        return tt_error(TT_EINVAL, "cast: x and y must have the same shape and tiling");
    int rc = check_kernel_dtype(k, x->dtype);
    if (rc)
        return rc;
    if (!(k->dtypes >> y->dtype & 1))
        return tt_error(TT_EINVAL, "cast: cannot cast to %s (supported: %s)", tt_dtype_name(y->dtype),
                        tt_dtype_list(k->dtypes));
    tt_args_cast a = {.to = y->dtype};
    tt_tensor *ts[2] = {x, y};
    return map_tiles(TT_K_CAST, &a, x->dtype, 2, ts);
}

/* Span geometry: axes [axis, axis+naxes) of a `full` tensor are reduced or broadcast; a
 * `reduced` tensor has the full layout with those axes removed, or (keepdim) the full rank
 * with those axes of size 1 in tiles of 1: the same grid and tile memory either way, so a
 * keepdim result costs no copy.  Reductions over non-consecutive axes run one span per run
 * of consecutive axes (tiletrain/ops/reduce.py), each task still one tile pair. */
static int layout_without_span(const tt_tensor *a, int axis, int naxes, const tt_tensor *b)
{
    int keep = b->ndim == a->ndim;
    if (!keep && b->ndim != a->ndim - naxes)
        return 0;
    for (int d = 0, e = 0; d < a->ndim; d++) {
        if (d >= axis && d < axis + naxes) {
            if (keep && (b->shape[d] != 1 || b->tile[d] != 1))
                return 0;
            e += keep;
            continue;
        }
        if (a->shape[d] != b->shape[e] || a->tile[d] != b->tile[e])
            return 0;
        e++;
    }
    return 1;
}

static void span_view(const tt_tensor *x, const int64_t *idx, int axis, int naxes, int64_t *m, int64_t *k,
                      int64_t *n)
{
    int64_t ts[TT_MAX_NDIM];
    tt_tile_shape(x, idx, ts);
    *m = *k = *n = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis)
            *m *= ts[d];
        else if (d < axis + naxes)
            *k *= ts[d];
        else
            *n *= ts[d];
    }
}

int tt_span_map(int kernel, const void *args, int axis, int naxes, int nfull, tt_tensor *const *full, int nred,
                tt_tensor *const *red, int reduce)
{
    if (kernel < 0 || kernel >= TT_NKERNELS)
        return tt_error(TT_EINVAL, "span: unknown kernel id %d", kernel);
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    if (!k->is_span)
        return tt_error(TT_EINVAL, "span: kernel '%s' is not a span kernel (integer args m, k, n)", k->name);
    if (nfull < 1 || nred < 0 || nfull + nred != k->nbuffers)
        return tt_error(TT_EINVAL, "%s: takes %d tensors, got %d full + %d reduced", k->name, k->nbuffers, nfull,
                        nred);
    if (!args)
        return tt_error(TT_EINVAL, "%s: args is NULL", k->name);
    if (reduce && k->off[TT_OFF_FIRST] < 0)
        return tt_error(TT_EINVAL, "%s: a span reduction needs a `first` argument", k->name);
    tt_tensor *x = full[0];
    /* Float operands share one dtype (the kernel's `dtype`), except `acc` buffers, float32 for
     * a half dtype; int64 operands are index tensors (targets, token ids) whose meaning the
     * kernel knows. */
    int fdtype = -1;
    for (int j = 0; j < nfull + nred; j++) {
        tt_tensor *t = j < nfull ? full[j] : red[j - nfull];
        /* reduction outputs are overwritten on the first tile, so they need no data before */
        int read = (k->modes[j] & STARPU_R) && !(reduce && j >= nfull);
        int rc = read ? tt_check_readable(t, k->name) : tt_check_tensor(t, k->name);
        if (rc)
            return rc;
        if (fdtype < 0 && t->dtype != TT_I64 && !(k->acc >> j & 1) && !(k->bools >> j & 1))
            fdtype = t->dtype;
    }
    if (fdtype < 0)
        return tt_error(TT_EINVAL, "%s: needs at least one float operand", k->name);
    int rc = check_kernel_dtype(k, fdtype);
    if (rc)
        return rc;
    for (int j = 0; j < nfull + nred; j++) {
        const tt_tensor *t = j < nfull ? full[j] : red[j - nfull];
        int want = tt_buffer_dtype(k, j, fdtype);
        if (t->dtype != TT_I64 && t->dtype != want)
            return tt_error(TT_EINVAL, "%s: operand %d is %s, expected %s (the float operands are %s)", k->name, j,
                            tt_dtype_name(t->dtype), tt_dtype_name(want), tt_dtype_name(fdtype));
    }
    if (axis < 0 || naxes < 1 || axis + naxes > x->ndim)
        return tt_error(TT_EINVAL, "%s: axes [%d, %d) out of range for a rank-%d tensor", k->name, axis,
                        axis + naxes, x->ndim);
    if (k->off[TT_OFF_KOFF] >= 0 && naxes != 1)
        return tt_error(TT_EINVAL, "%s: takes a one-axis span (koff), got axes [%d, %d)", k->name, axis,
                        axis + naxes);
    for (int j = 1; j < nfull; j++)
        if (!tt_same_layout(x, full[j]))
            return tt_error(TT_EINVAL, "%s: operand %d has a different shape or tiling than operand 0", k->name, j);
    for (int j = 0; j < nred; j++)
        if (!layout_without_span(x, axis, naxes, red[j]))
            return tt_error(TT_EINVAL, "%s: reduced operand %d must have operand 0's shape and tiles without axes "
                            "[%d, %d)", k->name, nfull + j, axis, axis + naxes);

    /* Outer loop over the reduced grid, inner loop over the tiles along the span, so that a
     * reduction's accumulation chain on one output tile is submitted in order. */
    int64_t nspan = 1, nouter = 1, sgrid[TT_MAX_NDIM], ogrid[TT_MAX_NDIM];
    int no = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d >= axis && d < axis + naxes)
            nspan *= (sgrid[d - axis] = x->grid[d]);
        else
            nouter *= (ogrid[no++] = x->grid[d]);
    }
    int64_t xidx[TT_MAX_NDIM], oidx[TT_MAX_NDIM], sidx[TT_MAX_NDIM];
    starpu_data_handle_t h[8];
    enum starpu_data_access_mode modes[8];
    tt_args_buf buf;
    void *a = &buf;
    tt_args_load(kernel, args, &buf);
    for (int64_t o = 0; o < nouter; o++) {
        int64_t r = o;
        for (int d = no - 1; d >= 0; d--) {
            oidx[d] = r % ogrid[d];
            r /= ogrid[d];
        }
        for (int64_t sp = 0; sp < nspan; sp++) {
            r = sp;
            for (int d = naxes - 1; d >= 0; d--) {
                sidx[d] = r % sgrid[d];
                r /= sgrid[d];
            }
            for (int d = 0, e = 0; d < x->ndim; d++)
                xidx[d] = (d >= axis && d < axis + naxes) ? sidx[d - axis] : oidx[e++];
            *(int64_t *)a = fdtype;
            int64_t m_, k_, n_;
            span_view(x, xidx, axis, naxes, &m_, &k_, &n_);
            *(int64_t *)((char *)a + k->off[TT_OFF_M]) = m_;
            *(int64_t *)((char *)a + k->off[TT_OFF_K]) = k_;
            *(int64_t *)((char *)a + k->off[TT_OFF_N]) = n_;
            int64_t xl = tt_tile_linear(x, xidx);
            if (k->off[TT_OFF_TILE] >= 0)
                *(int64_t *)((char *)a + k->off[TT_OFF_TILE]) = xl;
            if (k->off[TT_OFF_FIRST] >= 0)
                *(int64_t *)((char *)a + k->off[TT_OFF_FIRST]) = reduce ? (sp == 0) : 0;
            if (k->off[TT_OFF_KOFF] >= 0) /* checked above: a one-axis span */
                *(int64_t *)((char *)a + k->off[TT_OFF_KOFF]) = sidx[0] * x->tile[axis];
            for (int j = 0; j < nfull; j++) {
                h[j] = full[j]->handles[xl];
                modes[j] = k->modes[j];
            }
            for (int j = 0; j < nred; j++) {
                h[nfull + j] = red[j]->handles[o];
                modes[nfull + j] = k->modes[nfull + j];
                if (reduce && sp == 0 && (modes[nfull + j] & STARPU_W))
                    modes[nfull + j] = STARPU_W;
            }
            rc = tt_submit(kernel, a, h, modes);
            if (rc)
                return rc;
        }
    }
    for (int j = 0; j < nfull + nred; j++) {
        tt_tensor *t = j < nfull ? full[j] : red[j - nfull];
        if (k->modes[j] & STARPU_W)
            t->written = 1;
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
    const tt_kernel_desc *k = &tt_kernel_table[TT_K_SUM_ALL];
    int rc = check_kernel_dtype(k, x->dtype);
    if (rc)
        return rc;
    if (y->dtype != tt_buffer_dtype(k, 1, x->dtype)) /* float32 accumulator for a half x */
        return tt_error(TT_EINVAL, "%s: y is %s, expected %s for a %s x", what, tt_dtype_name(y->dtype),
                        tt_dtype_name(tt_buffer_dtype(k, 1, x->dtype)), tt_dtype_name(x->dtype));
    y->written = 1;
    int64_t idx[TT_MAX_NDIM];
    for (int64_t i = 0; i < x->ntiles; i++) {
        tt_tile_index(x, i, idx);
        const tt_args_sum_all a = {.dtype = x->dtype, .nx = tt_tile_nelems(x, idx), .alpha = alpha,
                                   .beta = i == 0 ? beta : 1.0};
        enum starpu_data_access_mode modes[2] = {STARPU_R, (i == 0 && beta == 0.0) ? STARPU_W : STARPU_RW};
        starpu_data_handle_t h[2] = {x->handles[i], y->handles[0]};
        rc = tt_submit(TT_K_SUM_ALL, &a, h, modes);
        if (rc)
            return rc;
    }
    return TT_OK;
}

/* One product: c = alpha op(a) op(b) + beta c, optionally with a bias along c's last axis and a
 * GELU epilogue writing y = gelu(c) (c keeps the pre-activation, or becomes gelu'(it)). */
typedef struct gemm_op {
    tt_tensor *a, *b, *c, *bias, *y; /* bias and y may be NULL; with a bias, beta is 0 */
    int ta, tb, approx, deriv; /* the GELU form; deriv: c ends as gelu'(c) (kernels.def) */
    double alpha, beta;
} gemm_op;

/* One task of output tile t's chain along the contracted axis (first/last: its place in the
 * chain), from tiles aidx of a and bidx of b.  The first task applies beta (and only writes c
 * when beta == 0) or, with a bias, adds it (gemm_bias); with y, the last task applies the GELU
 * epilogue (gemm_gelu, which also adds the bias when it is the first too); the others
 * accumulate (gemm, beta 1).  The three argument structs share the product's fields. */
static int submit_gemm_task(const gemm_op *op, const int64_t *aidx, const int64_t *bidx, int64_t t, int64_t batch,
                            int64_t m, int64_t n, int64_t k, int first, int last)
{
    const int gelu = op->y && last, bias = op->bias && first;
    const int kernel = gelu ? TT_K_GEMM_GELU : bias ? TT_K_GEMM_BIAS : TT_K_GEMM;
    union {
        tt_args_gemm gemm;
        tt_args_gemm_bias bias;
        tt_args_gemm_gelu gelu;
    } u = {0};
    void *args = &u;
#define GEMM_FIELDS(g)                                                                                     \
    ((g)->dtype = op->a->dtype, (g)->batch = batch, (g)->m = m, (g)->n = n, (g)->k = k, (g)->ta = op->ta, \
     (g)->tb = op->tb, (g)->alpha = op->alpha)
    if (gelu) {
        tt_args_gemm_gelu *g = args;
        GEMM_FIELDS(g);
        g->first = first;
        g->approx = op->approx;
        g->deriv = op->deriv;
    } else if (bias) {
        tt_args_gemm_bias *g = args;
        GEMM_FIELDS(g);
    } else {
        tt_args_gemm *g = args;
        GEMM_FIELDS(g);
        g->cacc = op->c->dtype != op->a->dtype; /* a float32 accumulator for half a and b (checked by gemm) */
        g->beta = first && !op->bias ? op->beta : 1.0;
    }
#undef GEMM_FIELDS
    starpu_data_handle_t h[5] = {op->a->handles[tt_tile_linear(op->a, aidx)],
                                 op->b->handles[tt_tile_linear(op->b, bidx)]};
    enum starpu_data_access_mode modes[5] = {STARPU_R, STARPU_R};
    int nb = 2;
    if (kernel != TT_K_GEMM) { /* the bias tile along c's column tile (b 2-D) */
        h[nb] = op->bias->handles[bidx[op->tb ? 0 : 1]];
        modes[nb++] = STARPU_R;
    }
    h[nb] = op->c->handles[t];
    modes[nb++] = first && (op->bias || op->beta == 0.0) ? STARPU_W : STARPU_RW;
    if (gelu) {
        h[nb] = op->y->handles[t];
        modes[nb++] = STARPU_W;
    }
    return tt_submit(kernel, args, h, modes);
}

/* Split-K: with fewer output tiles than workers, a chain of nk tasks along the contracted axis
 * per output tile keeps the other workers idle.  The chain is cut into gemm_nsplit() chains of
 * about equal length: the first accumulates into c as before (beta, bias), each other one into
 * a tile of a temporary (beta 0), then axpy tasks add the temporaries into c.  The sum is then
 * rounded in another order than one chain's.  Only for chains of at least TT_GEMM_SPLIT_FLOPS
 * (an output tile of `tile` elements, `k` contracted; below, the extra tasks cost more than
 * they win), not with a GELU epilogue (it must see the whole sum) nor under MPI (the
 * temporaries would live on one rank). */
#define TT_GEMM_MAX_SPLIT 16
#define TT_GEMM_SPLIT_FLOPS (1 << 24)

static int64_t gemm_nsplit(const gemm_op *op, int64_t ntiles, int64_t nk, int64_t tile, int64_t k)
{
    int64_t workers = starpu_worker_get_count();
    if (workers > TT_GEMM_MAX_SPLIT)
        workers = TT_GEMM_MAX_SPLIT;
    if (op->y || nk < 2 || ntiles >= workers || 2.0 * (double)tile * (double)k < TT_GEMM_SPLIT_FLOPS ||
        tt_mpi_enabled())
        return 1;
    const int64_t s = (workers + ntiles - 1) / ntiles;
    return s < nk ? s : nk;
}

/* The first task (along the contracted axis, of nk) of chain `j` of nsplit: chains of about equal length. */
static int64_t gemm_chain_start(int64_t j, int64_t nsplit, int64_t nk) { return j * nk / nsplit; }

/* Chain j of a split gemm: chain 0 is the gemm itself, the others write their temporary
 * (beta 0, no bias: the sum adds them into c). */
static gemm_op gemm_chain_op(const gemm_op *op, int64_t j, tt_tensor **tmp)
{
    gemm_op part = *op;
    if (j > 0)
        part.c = tmp[j], part.bias = NULL, part.beta = 0.0;
    return part;
}

/* The temporaries of a split gemm (c's layout, nsplit - 1 of them; NULL when not split). */
static int gemm_split_temps(const tt_tensor *c, int64_t nsplit, tt_tensor **tmp)
{
    for (int64_t j = 1; j < nsplit; j++) {
        int rc = tt_tensor_new_temp(c->ndim, c->shape, c->tile, c->dtype, &tmp[j]);
        if (rc) {
            while (--j >= 1)
                tt_tensor_free(tmp[j]);
            return rc;
        }
    }
    return TT_OK;
}

/* Output tile t's partial sums (temporaries 1 .. nsplit - 1) added into c. */
static int gemm_split_sum(tt_tensor *c, int64_t t, int64_t nsplit, tt_tensor **tmp)
{
    int64_t idx[TT_MAX_NDIM];
    tt_tile_index(c, t, idx);
    const tt_args_axpy a = {.dtype = c->dtype, .n = tt_tile_nelems(c, idx), .alpha = 1.0, .beta = 1.0};
    for (int64_t j = 1; j < nsplit; j++) {
        starpu_data_handle_t h[2] = {tmp[j]->handles[t], c->handles[t]};
        int rc = tt_submit(TT_K_AXPY, &a, h, NULL);
        if (rc)
            return rc;
    }
    return TT_OK;
}

/* The temporaries dropped: their tiles are unregistered once the tasks that use them ran. */
static void gemm_free_temps(int64_t nsplit, tt_tensor **tmp)
{
    for (int64_t j = 1; j < nsplit; j++)
        tt_tensor_free(tmp[j]);
}

/* c (P, N) = alpha a^T b + beta c, contracting over all axes but the last: a is (..., P),
 * b is (..., N) with the same leading shape and tiles (the weight gradient of a linear
 * layer: x^T dy over every batch and time tile). */
static int gemm_contract_leading(const gemm_op *op)
{
    const char *what = "matmul";
    tt_tensor *a = op->a, *b = op->b, *c = op->c;
    int nd = a->ndim;
    for (int d = 0; d < nd - 1; d++)
        if (a->shape[d] != b->shape[d] || a->tile[d] != b->tile[d])
            return tt_error(TT_EINVAL, "%s: contracted axis %d of a (%lld, tiles %lld) and b (%lld, tiles %lld) differ",
                            what, d, (long long)a->shape[d], (long long)a->tile[d], (long long)b->shape[d],
                            (long long)b->tile[d]);
    if (c->shape[0] != a->shape[nd - 1] || c->shape[1] != b->shape[nd - 1] || c->tile[0] != a->tile[nd - 1] ||
        c->tile[1] != b->tile[nd - 1])
        return tt_error(TT_EINVAL, "%s: output shape or tiles do not match the operands", what);
    c->written = 1;
    int64_t nrows = 1;
    for (int d = 0; d < nd - 1; d++)
        nrows *= a->grid[d];
    int64_t nk = 1;
    for (int d = 0; d < nd - 1; d++)
        nk *= a->shape[d];
    const int64_t nsplit = gemm_nsplit(op, c->ntiles, nrows, c->tile[0] * c->tile[1], nk);
    tt_tensor *tmp[TT_GEMM_MAX_SPLIT] = {NULL};
    int rc = gemm_split_temps(c, nsplit, tmp);
    if (rc)
        return rc;
    int64_t cidx[2], aidx[TT_MAX_NDIM], bidx[TT_MAX_NDIM];
    for (int64_t t = 0; t < c->ntiles && rc == TT_OK; t++) {
        tt_tile_index(c, t, cidx);
        for (int64_t j = 0; j < nsplit && rc == TT_OK; j++) {
            gemm_op part = gemm_chain_op(op, j, tmp);
            const int64_t r0 = gemm_chain_start(j, nsplit, nrows), r1 = gemm_chain_start(j + 1, nsplit, nrows);
            for (int64_t r = r0; r < r1 && rc == TT_OK; r++) {
                int64_t rr = r, k = 1;
                for (int d = nd - 2; d >= 0; d--) {
                    aidx[d] = bidx[d] = rr % a->grid[d];
                    rr /= a->grid[d];
                    k *= tt_tile_dim(a, d, aidx[d]);
                }
                aidx[nd - 1] = cidx[0];
                bidx[nd - 1] = cidx[1];
                rc = submit_gemm_task(&part, aidx, bidx, t, 1, tt_tile_dim(c, 0, cidx[0]), tt_tile_dim(c, 1, cidx[1]),
                                      k, r == r0, r == r1 - 1);
            }
        }
        if (rc == TT_OK)
            rc = gemm_split_sum(c, t, nsplit, tmp);
    }
    gemm_free_temps(nsplit, tmp);
    return rc;
}

static int gemm(const gemm_op *op);

int tt_gemm(double alpha, tt_tensor *a, int transa, tt_tensor *b, int transb, double beta, tt_tensor *c)
{
    const gemm_op op = {.a = a, .b = b, .c = c, .ta = transa != 0, .tb = transb != 0, .alpha = alpha, .beta = beta};
    return gemm(&op);
}

/* A linear layer: c = alpha a @ op(b) + bias along c's last axis, b 2-D, and with y an
 * activation epilogue (the kernel of the chain's distinctive task, for its dtype check). */
static int gemm_linear(const char *what, const gemm_op *op, int kernel)
{
    tt_tensor *a = op->a, *b = op->b, *bias = op->bias, *c = op->c, *y = op->y;
    CHECK_READ(bias, what);
    CHECK(c, what);
    if (b->ndim != 2 || c->ndim < 2)
        return tt_error(TT_EINVAL, "%s: the weight must be 2-D and the output of rank >= 2 (got %d and %d)", what,
                        b->ndim, c->ndim);
    if (bias->ndim != 1 || bias->shape[0] != c->shape[c->ndim - 1] || bias->tile[0] != c->tile[c->ndim - 1])
        return tt_error(TT_EINVAL, "%s: bias must be 1-D, of the output's last dimension and tiled like it", what);
    if (bias->dtype != a->dtype || c->dtype != a->dtype)
        return tt_error(TT_EINVAL, "%s: bias and output must have the input's dtype", what);
    if (y) {
        CHECK(y, what);
        if (y == c || !tt_same_layout(c, y) || y->dtype != c->dtype)
            return tt_error(TT_EINVAL, "%s: the activation output must be a tensor other than the pre-activation, "
                            "of its shape, tiles and dtype", what);
        if (op->approx != 0 && op->approx != 1)
            return tt_error(TT_EINVAL, "%s: approx must be 0 (erf) or 1 (tanh), got %d", what, op->approx);
    }
    int rc = check_kernel_dtype(&tt_kernel_table[kernel], a->dtype);
    if (rc)
        return rc;
    rc = gemm(op);
    if (rc == TT_OK && y)
        y->written = 1;
    return rc;
}

/* The first task of each output tile's chain adds the bias (gemm_bias), so no separate
 * broadcast add. */
int tt_gemm_bias(double alpha, tt_tensor *a, tt_tensor *b, int transb, tt_tensor *bias, tt_tensor *c)
{
    const gemm_op op = {.a = a, .b = b, .c = c, .bias = bias, .tb = transb != 0, .alpha = alpha};
    return gemm_linear("linear", &op, TT_K_GEMM_BIAS);
}

/* The same, and the last task of each tile's chain also writes y = gelu(c) (gemm_gelu), and
 * with deriv replaces c by gelu'(c). */
int tt_gemm_bias_gelu(double alpha, tt_tensor *a, tt_tensor *b, int transb, tt_tensor *bias, int approx,
                      int deriv, tt_tensor *c, tt_tensor *y)
{
    if (!y)
        return tt_error(TT_EINVAL, "linear+gelu: y is NULL");
    const gemm_op op = {.a = a, .b = b, .c = c, .bias = bias, .y = y, .tb = transb != 0, .approx = approx,
                        .deriv = deriv != 0, .alpha = alpha};
    return gemm_linear("linear+gelu", &op, TT_K_GEMM_GELU);
}

static int gemm(const gemm_op *op)
{
    const char *what = "matmul";
    tt_tensor *a = op->a, *b = op->b, *c = op->c;
    const int transa = op->ta, transb = op->tb;
    const double beta = op->beta;
    CHECK_READ(a, what);
    CHECK_READ(b, what);
    if (beta != 0.0)
        CHECK_READ(c, what);
    else
        CHECK(c, what);
    /* a, b and c share a dtype; half a and b may also accumulate into a float32 c */
    if (!tt_is_float(a->dtype) || a->dtype != b->dtype ||
        (a->dtype != c->dtype && !(tt_is_half(a->dtype) && c->dtype == TT_F32)))
        return tt_error(TT_EINVAL, "%s: operands must share a float dtype, or c be float32 for float16/bfloat16 "
                        "a and b (got %s, %s, %s)", what, tt_dtype_name(a->dtype), tt_dtype_name(b->dtype),
                        tt_dtype_name(c->dtype));
    int rc = check_kernel_dtype(&tt_kernel_table[TT_K_GEMM], a->dtype);
    if (rc)
        return rc;
    int nd = a->ndim;
    if (nd < 2 || b->ndim < 2)
        return tt_error(TT_EINVAL, "%s: operands must have rank >= 2 (got %d and %d)", what, a->ndim, b->ndim);
    if (nd > 2 && b->ndim == nd && c->ndim == 2 && transa && !transb)
        return gemm_contract_leading(op);
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
    int64_t ctile = 1;
    for (int d = 0; d < nd; d++)
        ctile *= c->tile[d];
    const int64_t nsplit = gemm_nsplit(op, c->ntiles, kgrid, ctile, a->shape[ak]);
    tt_tensor *tmp[TT_GEMM_MAX_SPLIT] = {NULL};
    rc = gemm_split_temps(c, nsplit, tmp);
    if (rc)
        return rc;
    for (int64_t t = 0; t < c->ntiles && rc == TT_OK; t++) {
        tt_tile_index(c, t, cidx);
        tt_tile_shape(c, cidx, cts);
        int64_t lead = 1;
        for (int d = 0; d < nlead; d++)
            lead *= cts[d];
        for (int64_t j = 0; j < nsplit && rc == TT_OK; j++) {
            gemm_op part = gemm_chain_op(op, j, tmp);
            const int64_t k0 = gemm_chain_start(j, nsplit, kgrid), k1 = gemm_chain_start(j + 1, nsplit, kgrid);
            for (int64_t kt = k0; kt < k1 && rc == TT_OK; kt++) {
                for (int d = 0; d < nlead; d++)
                    aidx[d] = bidx[d] = cidx[d];
                aidx[am] = cidx[nd - 2];
                aidx[ak] = kt;
                bidx[bk] = kt;
                bidx[bn] = cidx[nd - 1];
                /* with a bias: not batched (gemm_linear), rows lead * m */
                rc = submit_gemm_task(&part, aidx, bidx, t, batched ? lead : 1,
                                      batched ? cts[nd - 2] : lead * cts[nd - 2], cts[nd - 1], tt_tile_dim(a, ak, kt),
                                      kt == k0, kt == k1 - 1);
            }
        }
        if (rc == TT_OK)
            rc = gemm_split_sum(c, t, nsplit, tmp);
    }
    gemm_free_temps(nsplit, tmp);
    return rc;
}
