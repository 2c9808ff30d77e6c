/* Shape expanders: one strided region copy between tiled tensors of any tilings (re-tiling,
 * slicing with steps, permute, expand, cat, stack, split, getitem all reduce to it), and
 * zero-copy views that share another tensor's tile handles when the tiles line up.
 *
 * A copy c maps a box of y onto x: for every y axis d, i in [0, count[d]):
 *     y[.., ystart[d] + ystep[d] * i, ..] = x[.., xstart[a] + step[d] * i, ..]   with a = xaxis[d]
 * xaxis[d] = -1: no x axis (stride 0: broadcast); x axes no y axis maps are held at
 * xstart[a] (an int index).  Each box axis is cut into segments that lie in one y tile and
 * one x tile; one task per combination of segments = per overlapping (x tile, y tile) pair,
 * its box collapsed to <= 4 axes (more: several tasks).  A y tile that the call writes whole
 * is W for its first task and RW for the others; a tile written in part keeps its other
 * elements, so y must hold data there (checked before anything is submitted). */
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"

typedef struct {
    int64_t ytile, xtile, i0, i1; /* box indices [i0, i1) lie in y tile ytile and x tile xtile */
} seg_t;

/* Cut [0, count) of box axis d at y tile and x tile boundaries. */
static int64_t axis_segments(const tt_tensor *y, int d, int64_t ystart, int64_t ystep, int64_t count,
                             const tt_tensor *x, int xa, int64_t xstart, int64_t step, seg_t *out)
{
    int64_t n = 0;
    for (int64_t i = 0; i < count;) {
        int64_t ty = (ystart + ystep * i) / y->tile[d];
        int64_t end = ((ty + 1) * y->tile[d] - ystart + ystep - 1) / ystep, tx = 0; /* first i in the next y tile */
        if (xa >= 0) {
            tx = (xstart + step * i) / x->tile[xa];
            int64_t iend = ((tx + 1) * x->tile[xa] - xstart + step - 1) / step; /* first i in the next x tile */
            if (iend < end)
                end = iend;
        }
        if (end > count)
            end = count;
        out[n++] = (seg_t){ty, tx, i, end};
        i = end;
    }
    return n;
}

/* Next multi-index of a counter over [0, n[d]) for d < ndim (row-major); 0 when done. */
static int next_index(int64_t *idx, const int64_t *n, int ndim)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < n[d])
            return 1;
        idx[d] = 0;
    }
    return 0;
}

static void tile_strides(const tt_tensor *t, const int64_t *idx, int64_t *strides)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= tt_tile_dim(t, d, idx[d]);
    }
}

#define AT(arr, c, d) (arr)[(size_t)(c) * TT_MAX_NDIM + (d)]

static int check_copy(const tt_tensor *y, const tt_tensor *x, int c, const int64_t *xstart, const int *xaxis,
                      const int64_t *step, const int64_t *ystart, const int64_t *ystep, const int64_t *count,
                      int *empty)
{
    int rc = tt_check_readable(x, "region copy");
    if (rc)
        return rc;
    if (x == y)
        return tt_error(TT_EINVAL, "region copy: source %d is the destination", c);
    if (x->dtype != y->dtype)
        return tt_error(TT_EINVAL, "region copy: source %d is %s, the destination %s", c, tt_dtype_name(x->dtype),
                        tt_dtype_name(y->dtype));
    int used[TT_MAX_NDIM] = {0};
    *empty = 0;
    for (int d = 0; d < y->ndim; d++) {
        int64_t ys = AT(ystart, c, d), n = AT(count, c, d), last = ys + AT(ystep, c, d) * (n - 1);
        int a = AT(xaxis, c, d);
        if (AT(ystep, c, d) < 1)
            return tt_error(TT_EINVAL, "region copy: source %d's y step along axis %d is %lld (must be >= 1)", c, d,
                            (long long)AT(ystep, c, d));
        if (n < 0 || (n > 0 && (ys < 0 || last >= y->shape[d])))
            return tt_error(TT_EINVAL, "region copy: source %d writes y axis %d at [%lld, %lld], outside [0, %lld)", c,
                            d, (long long)ys, (long long)last, (long long)y->shape[d]);
        if (n == 0)
            *empty = 1;
        if (a < -1 || a >= x->ndim || (a >= 0 && used[a]++))
            return tt_error(TT_EINVAL, "region copy: source %d maps y axis %d to x axis %d (bad or repeated)", c, d,
                            a);
        if (a >= 0 && AT(step, c, d) < 1)
            return tt_error(TT_EINVAL, "region copy: source %d's step along y axis %d is %lld (must be >= 1)", c, d,
                            (long long)AT(step, c, d));
    }
    for (int a = 0; a < x->ndim; a++) {
        int64_t lo = AT(xstart, c, a), hi = lo, n = 1;
        for (int d = 0; d < y->ndim; d++)
            if (AT(xaxis, c, d) == a) {
                n = AT(count, c, d);
                hi = lo + AT(step, c, d) * (n - 1);
            }
        if (n > 0 && (lo < 0 || hi >= x->shape[a]))
            return tt_error(TT_EINVAL, "region copy: source %d reads x axis %d at [%lld, %lld], outside [0, %lld)", c,
                            a, (long long)lo, (long long)hi, (long long)x->shape[a]);
    }
    return TT_OK;
}

/* Elements of every y tile written by copy c, added to cover[] (segs: scratch per axis). */
static void add_cover(const tt_tensor *y, int c, const int64_t *ystart, const int64_t *ystep, const int64_t *count,
                      seg_t **segs, int64_t *cover)
{
    int64_t nseg[TT_MAX_NDIM], sidx[TT_MAX_NDIM] = {0}, tidx[TT_MAX_NDIM];
    for (int d = 0; d < y->ndim; d++)
        nseg[d] = axis_segments(y, d, AT(ystart, c, d), AT(ystep, c, d), AT(count, c, d), NULL, -1, 0, 1, segs[d]);
    do {
        int64_t v = 1;
        for (int d = 0; d < y->ndim; d++) {
            tidx[d] = segs[d][sidx[d]].ytile;
            v *= segs[d][sidx[d]].i1 - segs[d][sidx[d]].i0;
        }
        cover[tt_tile_linear(y, tidx)] += v;
    } while (next_index(sidx, nseg, y->ndim));
}

/* One task (or several, for a box of more than 4 axes after merging) for one segment combination. */
static int submit_box(tt_tensor *x, tt_tensor *y, int64_t yl, int64_t xl, int nd, int64_t *len, int64_t *xs,
                      int64_t *ys, int64_t xo, int64_t yo, enum starpu_data_access_mode *ymode)
{
    /* drop length-1 axes, merge an axis into the next inner one when both strides chain */
    int k = 0;
    int64_t L[TT_MAX_NDIM + 1], X[TT_MAX_NDIM + 1], Y[TT_MAX_NDIM + 1];
    for (int d = 0; d < nd; d++) {
        if (len[d] == 1)
            continue;
        L[k] = len[d], X[k] = xs[d], Y[k] = ys[d];
        k++;
    }
    int m = 0;
    for (int d = 0; d < k; d++) {
        if (m > 0 && X[m - 1] == X[d] * L[d] && Y[m - 1] == Y[d] * L[d]) {
            L[m - 1] *= L[d];
            X[m - 1] = X[d];
            Y[m - 1] = Y[d];
        } else {
            L[m] = L[d], X[m] = X[d], Y[m] = Y[d];
            m++;
        }
    }
    int outer = m > 4 ? m - 4 : 0; /* axes looped over here, one task each */
    int64_t oidx[TT_MAX_NDIM] = {0};
    do {
        int64_t xoff = xo, yoff = yo;
        for (int d = 0; d < outer; d++)
            xoff += oidx[d] * X[d], yoff += oidx[d] * Y[d];
        tt_args_region_copy args = {0}, *a = &args;
        int64_t dd[4] = {1, 1, 1, 1}, dx[4] = {0, 0, 0, 1}, dy[4] = {0, 0, 0, 1};
        for (int d = outer, e = 4 - (m - outer); d < m; d++, e++)
            dd[e] = L[d], dx[e] = X[d], dy[e] = Y[d];
        a->dtype = x->dtype;
        a->d0 = dd[0], a->d1 = dd[1], a->d2 = dd[2], a->d3 = dd[3];
        a->xo = xoff, a->xs0 = dx[0], a->xs1 = dx[1], a->xs2 = dx[2], a->xs3 = dx[3];
        a->yo = yoff, a->ys0 = dy[0], a->ys1 = dy[1], a->ys2 = dy[2], a->ys3 = dy[3];
        starpu_data_handle_t h[2] = {x->handles[xl], y->handles[yl]};
        enum starpu_data_access_mode modes[2] = {STARPU_R, *ymode};
        int rc = tt_submit(TT_K_REGION_COPY, a, h, modes);
        if (rc)
            return rc;
        *ymode = STARPU_RW; /* the tile's later tasks keep what this one wrote */
    } while (next_index(oidx, L, outer));
    return TT_OK;
}

static int submit_copy(tt_tensor *y, tt_tensor *x, int c, const int64_t *xstart, const int *xaxis,
                       const int64_t *step, const int64_t *ystart, const int64_t *ystep, const int64_t *count,
                       const int64_t *cover, char *started, seg_t **segs)
{
    int64_t nseg[TT_MAX_NDIM], sidx[TT_MAX_NDIM] = {0};
    int rc = TT_OK;
    for (int d = 0; d < y->ndim; d++) {
        int a = AT(xaxis, c, d);
        nseg[d] = axis_segments(y, d, AT(ystart, c, d), AT(ystep, c, d), AT(count, c, d), x, a,
                                a >= 0 ? AT(xstart, c, a) : 0, AT(step, c, d), segs[d]);
    }
    do {
        int64_t yidx[TT_MAX_NDIM], xidx[TT_MAX_NDIM], ystr[TT_MAX_NDIM], xstr[TT_MAX_NDIM], xoff[TT_MAX_NDIM];
        int64_t len[TT_MAX_NDIM], xs[TT_MAX_NDIM], ys[TT_MAX_NDIM], yo = 0, xo = 0;
        for (int a = 0; a < x->ndim; a++) { /* x axes held at an index (mapped ones are set below) */
            xidx[a] = AT(xstart, c, a) / x->tile[a];
            xoff[a] = AT(xstart, c, a) - xidx[a] * x->tile[a];
        }
        for (int d = 0; d < y->ndim; d++) {
            const seg_t *sg = &segs[d][sidx[d]];
            int a = AT(xaxis, c, d);
            yidx[d] = sg->ytile;
            if (a >= 0) {
                xidx[a] = sg->xtile;
                xoff[a] = AT(xstart, c, a) + AT(step, c, d) * sg->i0 - sg->xtile * x->tile[a];
            }
        }
        tile_strides(y, yidx, ystr);
        tile_strides(x, xidx, xstr);
        for (int a = 0; a < x->ndim; a++)
            xo += xoff[a] * xstr[a];
        for (int d = 0; d < y->ndim; d++) {
            const seg_t *sg = &segs[d][sidx[d]];
            int a = AT(xaxis, c, d);
            len[d] = sg->i1 - sg->i0;
            ys[d] = AT(ystep, c, d) * ystr[d];
            xs[d] = a >= 0 ? AT(step, c, d) * xstr[a] : 0;
            yo += (AT(ystart, c, d) + AT(ystep, c, d) * sg->i0 - sg->ytile * y->tile[d]) * ystr[d];
        }
        int64_t yl = tt_tile_linear(y, yidx), xl = tt_tile_linear(x, xidx);
        enum starpu_data_access_mode mode =
            (!started[yl] && cover[yl] == tt_tile_nelems(y, yidx)) ? STARPU_W : STARPU_RW;
        started[yl] = 1;
        rc = submit_box(x, y, yl, xl, y->ndim, len, xs, ys, xo, yo, &mode);
    } while (rc == TT_OK && next_index(sidx, nseg, y->ndim));
    return rc;
}

int tt_copy_regions(tt_tensor *y, int ncopies, tt_tensor *const *xs, const int64_t *xstart, const int *xaxis,
                    const int64_t *step, const int64_t *ystart, const int64_t *ystep, const int64_t *count)
{
    int rc = tt_check_tensor(y, "region copy");
    if (rc)
        return rc;
    if (ncopies < 0 || (ncopies > 0 && (!xs || !xstart || !xaxis || !step || !ystart || !ystep || !count)))
        return tt_error(TT_EINVAL, "region copy: bad source list");
    const tt_kernel_desc *k = &tt_kernel_table[TT_K_REGION_COPY];
    if (!(k->dtypes >> y->dtype & 1))
        return tt_error(TT_EINVAL, "region copy: dtype %s is not supported (supported: %s)", tt_dtype_name(y->dtype),
                        tt_dtype_list(k->dtypes));
    int *empty = calloc((size_t)ncopies + 1, sizeof *empty);
    if (!empty)
        return tt_error(TT_ENOMEM, "region copy: out of memory");
    int64_t xgrid = 1; /* the most tiles along any source axis: bounds the segments of a box axis */
    for (int c = 0; c < ncopies && rc == TT_OK; c++) {
        rc = check_copy(y, xs[c], c, xstart, xaxis, step, ystart, ystep, count, &empty[c]);
        for (int a = 0; rc == TT_OK && a < xs[c]->ndim; a++)
            xgrid = xs[c]->grid[a] > xgrid ? xs[c]->grid[a] : xgrid;
    }
    if (rc) {
        free(empty);
        return rc;
    }
    int64_t *cover = calloc((size_t)y->ntiles, sizeof *cover);
    char *started = calloc((size_t)y->ntiles, 1);
    seg_t *segs[TT_MAX_NDIM] = {0};
    int nomem = !cover || !started;
    for (int d = 0; d < y->ndim; d++)
        nomem |= !(segs[d] = malloc(sizeof(seg_t) * (size_t)(y->grid[d] + xgrid + 1)));
    if (nomem)
        rc = tt_error(TT_ENOMEM, "region copy: out of memory");
    for (int c = 0; c < ncopies && rc == TT_OK; c++)
        if (!empty[c])
            add_cover(y, c, ystart, ystep, count, segs, cover);
    int whole = 1;
    int64_t idx[TT_MAX_NDIM];
    for (int64_t i = 0; rc == TT_OK && i < y->ntiles; i++) {
        tt_tile_index(y, i, idx);
        int64_t n = tt_tile_nelems(y, idx);
        if (cover[i] > n)
            rc = tt_error(TT_EINVAL, "region copy: the sources' boxes overlap in y tile %lld", (long long)i);
        else if (cover[i] > 0 && cover[i] < n && !y->written)
            rc = tt_error(TT_EINVAL, "region copy: y tile %lld is written in part but y holds no data yet", (long long)i);
        whole &= cover[i] == n;
    }
    for (int c = 0; c < ncopies && rc == TT_OK; c++)
        if (!empty[c])
            rc = submit_copy(y, xs[c], c, xstart, xaxis, step, ystart, ystep, count, cover, started, segs);
    if (rc == TT_OK && whole)
        y->written = 1;
    for (int d = 0; d < y->ndim; d++)
        free(segs[d]);
    free(cover), free(started), free(empty);
    return rc;
}

int tt_tensor_assume_written(tt_tensor *y)
{
    int rc = tt_check_tensor(y, "assume written");
    if (rc == TT_OK)
        y->written = 1;
    return rc;
}

/* ---- views ----
 * Tiles are row-major blocks, so a reshape can share them when, in every group of axes that
 * the reshape merges or splits, the tile holds whole rows of all axes but the group's first:
 * its extent E along the group is then a contiguous range of the group's flat index, and the
 * new shape keeps it whole if E is a multiple of the product of the group's other new axes.
 * Size-1 axes (tile 1) take no part. */
static int view_tiles(const tt_tensor *x, int ndim, const int64_t *shape, int64_t *tiles)
{
    const int64_t *xs = x->shape, *xt = x->tile;
    int nx = x->ndim, i = 0, j = 0;
    for (int d = 0; d < ndim; d++)
        tiles[d] = 1;
    for (;;) {
        while (i < nx && xs[i] == 1)
            i++;
        while (j < ndim && shape[j] == 1)
            j++;
        if (i == nx || j == ndim)
            return i == nx && j == ndim;
        int i0 = i, j0 = j;
        int64_t px = xs[i++], py = shape[j++];
        while (px != py) {
            if (px < py) {
                if (i == nx)
                    return 0;
                px *= xs[i++];
            } else {
                if (j == ndim)
                    return 0;
                py *= shape[j++];
            }
        }
        int64_t rest_x = 1, rest_y = 1;
        for (int a = i0 + 1; a < i; a++) {
            if (xt[a] != xs[a])
                return 0;
            rest_x *= xs[a];
        }
        for (int b = j0 + 1; b < j; b++)
            rest_y *= (tiles[b] = shape[b]);
        int64_t e = xt[i0] * rest_x;
        if (e % rest_y)
            return 0;
        tiles[j0] = e / rest_y;
    }
}

int tt_reshape_tiles(const tt_tensor *x, int ndim, const int64_t *shape, int64_t *tiles)
{
    if (!x || ndim < 0 || ndim > TT_MAX_NDIM || !tiles || (ndim && !shape))
        return 0;
    int64_t nx = 1, ny = 1;
    for (int d = 0; d < x->ndim; d++)
        nx *= x->shape[d];
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1)
            return 0;
        ny *= shape[d];
    }
    return nx == ny && view_tiles(x, ndim, shape, tiles);
}

/* A new struct describing x's tiles with another geometry (the caller sets it). */
static int view_struct(tt_tensor *x, const char *what, tt_tensor **out)
{
    if (!out)
        return tt_error(TT_EINVAL, "%s: out is NULL", what);
    *out = NULL;
    int rc = tt_check_tensor(x, what);
    if (rc)
        return rc;
    tt_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return tt_error(TT_ENOMEM, "%s: out of memory", what);
    *t = *x;
    t->prev = t->next = NULL;
    *out = t;
    return TT_OK;
}

static void set_geometry(tt_tensor *t, int ndim, const int64_t *shape, const int64_t *tiles)
{
    t->ndim = ndim;
    t->ntiles = 1;
    for (int d = 0; d < ndim; d++) {
        t->shape[d] = shape[d];
        t->tile[d] = tiles[d] < shape[d] ? tiles[d] : shape[d];
        t->grid[d] = (shape[d] + t->tile[d] - 1) / t->tile[d];
        t->ntiles *= t->grid[d];
    }
}

/* A reshape view shares x's handle and owner arrays themselves (the tiles keep their order),
 * so that it sees what MPI does to them (lazy tiles registered, owners placed, migrations). */
int tt_tensor_view(tt_tensor *x, int ndim, const int64_t *shape, tt_tensor **out)
{
    int64_t tiles[TT_MAX_NDIM];
    if (x && !tt_reshape_tiles(x, ndim, shape, tiles))
        return tt_error(TT_EINVAL, "tensor view: the tiles of x do not line up with the new shape");
    int rc = view_struct(x, "tensor view", out);
    if (rc)
        return rc;
    tt_tensor *t = *out;
    t->view = TT_VIEW_SHARED;
    set_geometry(t, ndim, shape, tiles);
    if (t->ntiles != x->ntiles) { /* cannot happen when view_tiles holds; never share a wrong mapping */
        long long n = (long long)t->ntiles;
        free(t);
        *out = NULL;
        return tt_error(TT_EINVAL, "tensor view: %lld tiles for %lld (internal error)", n, (long long)x->ntiles);
    }
    return TT_OK;
}

/* A view of the sub-grid of x's tiles lo[d] <= idx[d] < hi[d]: its own arrays of x's handles.
 * Not under MPI, where a tile's slot in its tensor's array changes when it is registered. */
int tt_tensor_tile_view(tt_tensor *x, const int64_t *lo, const int64_t *hi, tt_tensor **out)
{
    if (tt_mpi_on)
        return tt_error(TT_EINVAL, "tensor tile view: not under MPI (copy the region instead)");
    if (!lo || !hi)
        return tt_error(TT_EINVAL, "tensor tile view: lo or hi is NULL");
    int64_t shape[TT_MAX_NDIM];
    for (int d = 0; x && d < x->ndim; d++) {
        if (lo[d] < 0 || hi[d] <= lo[d] || hi[d] > x->grid[d])
            return tt_error(TT_EINVAL, "tensor tile view: tiles [%lld, %lld) along axis %d outside [0, %lld)",
                            (long long)lo[d], (long long)hi[d], d, (long long)x->grid[d]);
        shape[d] = (hi[d] == x->grid[d] ? x->shape[d] : hi[d] * x->tile[d]) - lo[d] * x->tile[d];
    }
    int rc = view_struct(x, "tensor tile view", out);
    if (rc)
        return rc;
    tt_tensor *t = *out;
    t->view = TT_VIEW_OWN_ARRAYS;
    set_geometry(t, x->ndim, shape, x->tile);
    t->handles = malloc(sizeof *t->handles * (size_t)t->ntiles);
    t->owner = malloc(sizeof *t->owner * (size_t)t->ntiles);
    if (!t->handles || !t->owner) {
        free(t->handles), free(t->owner), free(t);
        *out = NULL;
        return tt_error(TT_ENOMEM, "tensor tile view: out of memory");
    }
    int64_t idx[TT_MAX_NDIM];
    for (int64_t i = 0; i < t->ntiles; i++) {
        tt_tile_index(t, i, idx);
        for (int d = 0; d < x->ndim; d++)
            idx[d] += lo[d];
        int64_t j = tt_tile_linear(x, idx);
        t->handles[i] = x->handles[j];
        t->owner[i] = x->owner[j];
    }
    return TT_OK;
}

/* tile_view followed by a reshape to `shape`, in one struct with its own handle arrays, its
 * tile shape in tiles[ndim]; *out is NULL (and TT_OK returned) when the sub-grid's tiles do
 * not line up with `shape`. */
int tt_tensor_tile_view_as(tt_tensor *x, const int64_t *lo, const int64_t *hi, int ndim, const int64_t *shape,
                           int64_t *tiles, tt_tensor **out)
{
    if (!tiles)
        return tt_error(TT_EINVAL, "tensor tile view: tiles is NULL");
    int rc = tt_tensor_tile_view(x, lo, hi, out);
    if (rc)
        return rc;
    tt_tensor *t = *out;
    if (!tt_reshape_tiles(t, ndim, shape, tiles)) {
        tt_tensor_free(t);
        *out = NULL;
        return TT_OK;
    }
    int64_t n = t->ntiles;
    set_geometry(t, ndim, shape, tiles);
    if (t->ntiles != n) { /* cannot happen when view_tiles holds; never share a wrong mapping */
        int64_t m = t->ntiles;
        tt_tensor_free(t);
        *out = NULL;
        return tt_error(TT_EINVAL, "tensor tile view: %lld tiles for %lld (internal error)", (long long)m,
                        (long long)n);
    }
    return TT_OK;
}
