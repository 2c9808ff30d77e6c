/* Tile expander of the convolution family (conv, pools, batch norm): tt_batch_map.
 *
 * Activations are (N, C, *spatial) with the channel axis in one tile; they may be tiled along
 * the batch axis and along any spatial axis.  `batch` tensors are the activations (x, y, dy,
 * dx); `whole` tensors (weights, biases, per-channel statistics) have a single tile.
 *
 * Batch norm (bn_*): one task per activation tile (`nb` images, `hw` positions of it);
 * statistics are per channel, so no task needs a neighbour.
 *
 * Conv and pools: one task per OUTPUT tile.  The input box that tile needs (its receptive
 * field, clipped to the input) is its window: when it lies inside one input tile, the task
 * reads that tile as it is (always the case for batch-only tiling); otherwise the window is
 * a temporary assembled by region_copy tasks from the input tiles it overlaps -- the tile's
 * own part and the halo slabs of its neighbours, sub-tile boxes, never whole tensors.  Under
 * MPI a slab owned by another rank than the window is first copied out on its owner, so only
 * the slab crosses ranks (StarPU-MPI moves it; tt_conv_halo_stats counts the sender's).  The kernels
 * get the window's own geometry (l = window, p = its left padding, e = padded end).
 * Backward: the kernels write a window-shaped gradient that region_add tasks add into the
 * input-gradient tiles it overlaps (zeroed first), again through slabs across ranks --
 * unless every window is exactly one input tile and each input tile one window, when the
 * kernels write the gradient tiles directly.
 *
 * Reductions into whole tensors (dw/db, batch-norm statistics; reduce = 1): the tiles'
 * tasks accumulate in order (W on the first, `first` = 1 there, RW after), so the sums are
 * deterministic.  Under MPI, when the tiles live on several ranks, each rank accumulates a
 * partial of its own tiles (where they are) and the partials are merged into the whole
 * tensor on its owner (copy + axpy; bn_merge for the statistics): weight-sized messages,
 * never activations. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"

static int64_t halo_bytes, halo_slabs; /* slabs this rank cut out for another rank (MPI) */

void tt_conv_halo_stats(int64_t *bytes, int64_t *slabs)
{
    if (bytes)
        *bytes = halo_bytes;
    if (slabs)
        *slabs = halo_slabs;
}

enum { ROLE_WIN = 1, ROLE_OUT = 2, ROLE_DWIN = 3 };

typedef struct spatial_kernel {
    int roles[3];
    long geo;   /* byte offset of l0 (18 int64 fields l, o, k, s, p, d follow) */
    long e;     /* byte offset of e0 (avg pools), -1 */
    int acc;    /* writes whole tensors (reduce) */
} spatial_kernel;

static int spatial_info(int kernel, spatial_kernel *sk)
{
    memset(sk, 0, sizeof *sk);
    sk->e = -1;
    switch (kernel) {
    case TT_K_CONV_FWD:
        *sk = (spatial_kernel){{ROLE_WIN, ROLE_OUT}, offsetof(tt_args_conv_fwd, l0), -1, 0};
        return 1;
    case TT_K_CONV_BWD_X:
        *sk = (spatial_kernel){{ROLE_OUT, ROLE_DWIN}, offsetof(tt_args_conv_bwd_x, l0), -1, 0};
        return 1;
    case TT_K_CONV_BWD_W:
        *sk = (spatial_kernel){{ROLE_WIN, ROLE_OUT}, offsetof(tt_args_conv_bwd_w, l0), -1, 1};
        return 1;
    case TT_K_MAX_POOL_FWD:
        *sk = (spatial_kernel){{ROLE_WIN, ROLE_OUT}, offsetof(tt_args_max_pool_fwd, l0), -1, 0};
        return 1;
    case TT_K_MAX_POOL_BWD:
        *sk = (spatial_kernel){{ROLE_WIN, ROLE_OUT, ROLE_DWIN}, offsetof(tt_args_max_pool_bwd, l0), -1, 0};
        return 1;
    case TT_K_AVG_POOL_FWD:
        *sk = (spatial_kernel){{ROLE_WIN, ROLE_OUT}, offsetof(tt_args_avg_pool_fwd, l0),
                               offsetof(tt_args_avg_pool_fwd, e0), 0};
        return 1;
    case TT_K_AVG_POOL_BWD:
        *sk = (spatial_kernel){{ROLE_OUT, ROLE_DWIN}, offsetof(tt_args_avg_pool_bwd, l0),
                               offsetof(tt_args_avg_pool_bwd, e0), 0};
        return 1;
    default:
        return 0;
    }
}

static int bn_kernel(int kernel)
{
    return kernel == TT_K_BN_STATS || kernel == TT_K_BN_FWD || kernel == TT_K_BN_BWD_STATS ||
           kernel == TT_K_BN_BWD_X;
}

/* the bn structs all start dtype, nb, c, hw */
_Static_assert(offsetof(tt_args_bn_stats, hw) == 3 * sizeof(int64_t), "bn_stats args");
_Static_assert(offsetof(tt_args_bn_fwd, hw) == 3 * sizeof(int64_t), "bn_fwd args");
_Static_assert(offsetof(tt_args_bn_bwd_stats, hw) == 3 * sizeof(int64_t), "bn_bwd_stats args");
_Static_assert(offsetof(tt_args_bn_bwd_x, hw) == 3 * sizeof(int64_t), "bn_bwd_x args");

/* ---- reductions into whole tensors: per-rank partials under MPI -------------------------- */

#define MAX_ACC 2
#define MAX_GROUPS 64

typedef struct acc_state {
    int kernel, nacc, ngroups, direct;
    tt_tensor *acc[MAX_ACC];                 /* the whole tensors written */
    int rank[MAX_GROUPS];                    /* the group of each partial: a rank */
    tt_tensor *tmp[MAX_GROUPS][MAX_ACC];     /* its partials (NULL: direct, the whole tensors) */
    double count[MAX_GROUPS];                /* bn_stats: values merged so far */
    int started[MAX_GROUPS];
} acc_state;

/* owners: the anchor rank of every task, in task order (NULL without MPI) */
static int acc_begin(acc_state *st, int kernel, int nacc, tt_tensor *const *acc, const int *owners, int64_t ntasks)
{
    memset(st, 0, sizeof *st);
    st->kernel = kernel, st->nacc = nacc;
    for (int j = 0; j < nacc; j++)
        st->acc[j] = acc[j];
    st->direct = 1;
    st->ngroups = 1;
    st->rank[0] = 0;
    if (!tt_mpi_on || !owners || ntasks == 0)
        return TT_OK;
    int home = tt_tile_owner(acc[0], 0), only = owners[0], same = 1;
    for (int64_t i = 1; i < ntasks; i++)
        same &= owners[i] == only;
    if (same && only == home)
        return TT_OK;
    st->direct = 0, st->ngroups = 0;
    for (int64_t i = 0; i < ntasks; i++) {
        int g = 0;
        while (g < st->ngroups && st->rank[g] != owners[i])
            g++;
        if (g == st->ngroups) {
            if (g == MAX_GROUPS)
                return tt_error(TT_EINVAL, "%s: more than %d ranks in one reduction", tt_kernel_table[kernel].name,
                                MAX_GROUPS);
            st->rank[g] = owners[i];
            st->ngroups++;
            for (int j = 0; j < nacc; j++) {
                int rc = tt_tensor_new_temp(acc[j]->ndim, acc[j]->shape, acc[j]->shape, acc[j]->dtype, &st->tmp[g][j]);
                if (rc)
                    return rc;
            }
        }
    }
    return TT_OK;
}

/* the handles of task i's accumulators (its group's partials), first = 1 on the group's first */
static int acc_handles(acc_state *st, int owner, starpu_data_handle_t *h, int *first, double *na, double count)
{
    int g = 0;
    if (!st->direct)
        while (st->rank[g] != owner)
            g++;
    *first = !st->started[g];
    st->started[g] = 1;
    *na = st->count[g];
    st->count[g] += count;
    for (int j = 0; j < st->nacc; j++)
        h[j] = st->direct ? st->acc[j]->handles[0] : st->tmp[g][j]->handles[0];
    return g;
}

/* the partials merged into the whole tensors (on their owner), then dropped */
static int acc_end(acc_state *st)
{
    int rc = TT_OK;
    if (st->direct)
        return TT_OK;
    double na = 0.0;
    for (int g = 0; g < st->ngroups && !rc; g++) {
        if (st->kernel == TT_K_BN_STATS) {
            tt_args_bn_merge a = {.dtype = st->acc[0]->dtype, .c = st->acc[0]->shape[0], .first = g == 0,
                                  .na = na, .nb = st->count[g]};
            starpu_data_handle_t h[4] = {st->tmp[g][0]->handles[0], st->tmp[g][1]->handles[0],
                                         st->acc[0]->handles[0], st->acc[1]->handles[0]};
            enum starpu_data_access_mode m[4] = {STARPU_R, STARPU_R, g ? STARPU_RW : STARPU_W, g ? STARPU_RW : STARPU_W};
            rc = tt_submit(TT_K_BN_MERGE, &a, h, m);
            na += st->count[g];
            continue;
        }
        for (int j = 0; j < st->nacc && !rc; j++) {
            int64_t n = 1;
            for (int d = 0; d < st->acc[j]->ndim; d++)
                n *= st->acc[j]->shape[d];
            starpu_data_handle_t h[2] = {st->tmp[g][j]->handles[0], st->acc[j]->handles[0]};
            if (g == 0) {
                tt_args_copy a = {.dtype = st->acc[j]->dtype, .n = n};
                rc = tt_submit(TT_K_COPY, &a, h, NULL);
            } else {
                tt_args_axpy a = {.dtype = st->acc[j]->dtype, .n = n, .alpha = 1.0, .beta = 1.0};
                rc = tt_submit(TT_K_AXPY, &a, h, NULL);
            }
        }
    }
    for (int g = 0; g < st->ngroups; g++)
        for (int j = 0; j < st->nacc; j++)
            if (st->tmp[g][j])
                tt_tensor_free(st->tmp[g][j]);
    return rc;
}

/* ---- checks shared by both paths ---------------------------------------------------------- */

static int check_operands(const tt_kernel_desc *k, int nbatch, tt_tensor *const *batch, int nwhole,
                          tt_tensor *const *whole, int reduce, int *dtype_out)
{
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
            if (t->ndim < 2 || t->grid[1] != 1 || t->shape[0] != batch[0]->shape[0] ||
                t->tile[0] != batch[0]->tile[0])
                return tt_error(TT_EINVAL, "%s: operand %d must have its channel axis in one tile and operand 0's "
                                "batch tiling", k->name, j);
        } else if (t->ntiles != 1) {
            return tt_error(TT_EINVAL, "%s: operand %d must be a single tile", k->name, j);
        }
    }
    *dtype_out = dtype;
    return TT_OK;
}

/* ---- batch norm: one task per tile --------------------------------------------------------- */

static int bn_map(int kernel, const void *args, int dtype, int nbatch, tt_tensor *const *batch, int nwhole,
                  tt_tensor *const *whole, int reduce)
{
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    const tt_tensor *x = batch[0];
    for (int j = 1; j < nbatch; j++)
        if (!tt_same_layout(batch[j], x))
            return tt_error(TT_EINVAL, "%s: operand %d must have operand 0's shape and tiles", k->name, j);
    const int nacc = reduce ? (k->nbuffers - nbatch) - (kernel == TT_K_BN_BWD_STATS ? 2 : 0) : 0;
    /* the accumulators are the last whole tensors (bn_stats: mean, m2; bn_bwd_stats: sdy, sdyx) */
    int *owners = NULL;
    acc_state st;
    int rc;
    if (reduce) {
        if (tt_mpi_on) {
            owners = calloc((size_t)x->ntiles, sizeof *owners);
            if (!owners)
                return tt_error(TT_ENOMEM, "%s: out of memory", k->name);
            for (int64_t i = 0; i < x->ntiles; i++)
                owners[i] = tt_tile_owner(batch[0], i);
        }
        rc = acc_begin(&st, kernel, nacc, whole + (nwhole - nacc), owners, x->ntiles);
        if (rc) {
            free(owners);
            return rc;
        }
    }
    starpu_data_handle_t h[8];
    enum starpu_data_access_mode modes[8];
    tt_args_buf buf;
    int64_t *a = buf.i;
    tt_args_load(kernel, args, &buf);
    rc = TT_OK;
    for (int64_t i = 0; i < x->ntiles && !rc; i++) {
        int64_t idx[TT_MAX_NDIM], hw = 1;
        tt_tile_index(x, i, idx);
        for (int d = 2; d < x->ndim; d++)
            hw *= tt_tile_dim(x, d, idx[d]);
        const int64_t nb = tt_tile_dim(x, 0, idx[0]);
        a[0] = dtype, a[1] = nb, a[3] = hw;
        for (int j = 0; j < nbatch; j++)
            h[j] = batch[j]->handles[i], modes[j] = k->modes[j];
        for (int j = nbatch; j < k->nbuffers; j++)
            h[j] = whole[j - nbatch]->handles[0], modes[j] = k->modes[j];
        if (reduce) {
            int first;
            double na;
            acc_handles(&st, owners ? owners[i] : 0, h + (k->nbuffers - nacc), &first, &na, (double)(nb * hw));
            *(int64_t *)((char *)a + k->off[TT_OFF_FIRST]) = first;
            if (kernel == TT_K_BN_STATS)
                ((tt_args_bn_stats *)a)->na = na;
            if (first)
                for (int j = k->nbuffers - nacc; j < k->nbuffers; j++)
                    modes[j] = STARPU_W;
        }
        rc = tt_submit(kernel, a, h, modes);
    }
    if (reduce) {
        int rc2 = acc_end(&st);
        rc = rc ? rc : rc2;
    }
    free(owners);
    if (rc)
        return rc;
    for (int j = 0; j < k->nbuffers; j++)
        if (k->modes[j] & STARPU_W)
            (j < nbatch ? batch[j] : whole[j - nbatch])->written = 1;
    return TT_OK;
}

/* ---- conv and pools: windows and halos ----------------------------------------------------- */

typedef struct sgeom {
    int nsp;                                   /* spatial axes of the tensors (1..3) */
    int64_t l[3], o[3], k[3], s[3], p[3], d[3]; /* the op's (global) geometry, 3-D */
} sgeom;

/* tensor axis of geometry axis j (-1: a unit axis of a 1-D/2-D op) */
static inline int gaxis(const sgeom *g, int j) { return j < 3 - g->nsp ? -1 : 2 + j - (3 - g->nsp); }
static inline int64_t gtile(const sgeom *g, const tt_tensor *t, int j)
{
    int a = gaxis(g, j);
    return a < 0 ? 1 : t->tile[a];
}
static inline int64_t ggrid(const sgeom *g, const tt_tensor *t, int j)
{
    int a = gaxis(g, j);
    return a < 0 ? 1 : t->grid[a];
}
static inline int64_t gtiledim(const sgeom *g, const tt_tensor *t, int j, int64_t i)
{
    int a = gaxis(g, j);
    return a < 0 ? 1 : tt_tile_dim(t, a, i);
}

/* The window of output tile `ot` (spatial tile indices) of y: lo/hi the input box it needs,
 * clipped to the input; single: the box is inside one tile of the input (t0), and then the
 * window is that whole tile. */
typedef struct window {
    int64_t oa[3], on[3];        /* output tile start and size */
    int64_t lo[3], hi[3];        /* window box in input coordinates */
    int64_t t0[3], t1[3];        /* input tiles overlapped: [t0, t1] */
    int64_t centre[3];           /* the input tile the window lives with */
    int single;
} window;

static void window_of(const sgeom *g, const tt_tensor *y, const tt_tensor *x, const int64_t *ot, window *w)
{
    w->single = 1;
    for (int j = 0; j < 3; j++) {
        w->oa[j] = ot[j] * gtile(g, y, j);
        w->on[j] = gtiledim(g, y, j, ot[j]);
        int64_t a = w->oa[j] * g->s[j] - g->p[j];
        int64_t b = (w->oa[j] + w->on[j] - 1) * g->s[j] - g->p[j] + (g->k[j] - 1) * g->d[j] + 1;
        int64_t lo = a < 0 ? 0 : a, hi = b > g->l[j] ? g->l[j] : b;
        if (hi <= lo) { /* the tile's windows are all padding: any one input element will do */
            lo = lo >= g->l[j] ? g->l[j] - 1 : lo;
            hi = lo + 1;
        }
        const int64_t tx = gtile(g, x, j);
        w->t0[j] = lo / tx, w->t1[j] = (hi - 1) / tx;
        w->centre[j] = ((lo + hi - 1) / 2) / tx;
        if (w->t0[j] != w->t1[j])
            w->single = 0;
        w->lo[j] = lo, w->hi[j] = hi;
    }
    if (w->single)
        for (int j = 0; j < 3; j++) {
            w->lo[j] = w->t0[j] * gtile(g, x, j);
            w->hi[j] = w->lo[j] + gtiledim(g, x, j, w->t0[j]);
        }
}

static int64_t tile_linear3(const sgeom *g, const tt_tensor *t, int64_t b, const int64_t *ts)
{
    int64_t idx[TT_MAX_NDIM] = {0};
    idx[0] = b;
    for (int j = 0; j < 3; j++)
        if (gaxis(g, j) >= 0)
            idx[gaxis(g, j)] = ts[j];
    return tt_tile_linear(t, idx);
}

/* a one-tile temporary (nb, C, box) (the box over the tensor's spatial axes) */
static int temp_box(const sgeom *g, const tt_tensor *like, int64_t nb, const int64_t *box, tt_tensor **out)
{
    int64_t shape[TT_MAX_NDIM];
    shape[0] = nb, shape[1] = like->shape[1];
    for (int j = 3 - g->nsp; j < 3; j++)
        shape[gaxis(g, j)] = box[j];
    return tt_tensor_new_temp(like->ndim, shape, shape, like->dtype, out);
}

/* region_copy/region_add args: the box [blo, bhi) (input coordinates) of a tile whose
 * spatial extent starts at xs0 with sizes xd, into one starting at ys0 with sizes yd; the
 * nb * C planes are the box's first axis. */
static void region_args(tt_args_region_copy *a, int dtype, int64_t planes, const int64_t *blo, const int64_t *bhi,
                        const int64_t *xs0, const int64_t *xd, const int64_t *ys0, const int64_t *yd)
{
    memset(a, 0, sizeof *a);
    a->dtype = dtype;
    a->d0 = planes, a->d1 = bhi[0] - blo[0], a->d2 = bhi[1] - blo[1], a->d3 = bhi[2] - blo[2];
    a->xs3 = 1, a->xs2 = xd[2], a->xs1 = xd[1] * xd[2], a->xs0 = xd[0] * xd[1] * xd[2];
    a->ys3 = 1, a->ys2 = yd[2], a->ys1 = yd[1] * yd[2], a->ys0 = yd[0] * yd[1] * yd[2];
    a->xo = (blo[0] - xs0[0]) * a->xs1 + (blo[1] - xs0[1]) * a->xs2 + (blo[2] - xs0[2]);
    a->yo = (blo[0] - ys0[0]) * a->ys1 + (blo[1] - ys0[1]) * a->ys2 + (blo[2] - ys0[2]);
}

_Static_assert(sizeof(tt_args_region_copy) == sizeof(tt_args_region_add), "region args");

/* Move box [blo, bhi) from tile src (spatial start ss, sizes sd, owner sown) into tile dst
 * (start ds, sizes dd, owner down) with region_copy (add = 0, dst mode `mode`) or region_add
 * (add = 1).  Across ranks the box is first copied out into a slab on src's owner. */
static int move_box(const sgeom *g, const tt_tensor *like, int64_t nb, const int64_t *blo, const int64_t *bhi,
                    starpu_data_handle_t src, int sown, const int64_t *ss, const int64_t *sd, starpu_data_handle_t dst,
                    int down, const int64_t *ds, const int64_t *dd, int add, enum starpu_data_access_mode mode)
{
    const int64_t planes = nb * like->shape[1];
    tt_args_region_copy a;
    tt_tensor *slab = NULL;
    int rc;
    if (tt_mpi_on && sown != down) {
        int64_t box[3];
        for (int j = 0; j < 3; j++)
            box[j] = bhi[j] - blo[j];
        rc = temp_box(g, like, nb, box, &slab);
        if (rc)
            return rc;
        region_args(&a, like->dtype, planes, blo, bhi, ss, sd, blo, box);
        starpu_data_handle_t h[2] = {src, slab->handles[0]};
        enum starpu_data_access_mode m[2] = {STARPU_R, STARPU_W};
        rc = tt_submit(TT_K_REGION_COPY, &a, h, m); /* on src's owner: the slab is placed there */
        if (rc) {
            tt_tensor_free(slab);
            return rc;
        }
        if (sown == tt_mpi_rank()) { /* this rank sends it */
            halo_bytes += planes * box[0] * box[1] * box[2] * (int64_t)like->elemsize;
            halo_slabs++;
        }
        src = slab->handles[0], ss = blo, sd = box;
    }
    region_args(&a, like->dtype, planes, blo, bhi, ss, sd, ds, dd);
    starpu_data_handle_t h[2] = {src, dst};
    enum starpu_data_access_mode m[2] = {STARPU_R, add ? STARPU_RW : mode};
    rc = tt_submit(add ? TT_K_REGION_ADD : TT_K_REGION_COPY, &a, h, m);
    if (slab)
        tt_tensor_free(slab); /* unregistered once its tasks ran */
    return rc;
}

/* visit the input tiles a window overlaps, its centre tile first */
typedef int (*tile_fn)(void *ctx, const int64_t *ts);

static int each_tile(const window *w, tile_fn fn, void *ctx)
{
    int rc = fn(ctx, w->centre);
    int64_t ts[3];
    for (ts[0] = w->t0[0]; ts[0] <= w->t1[0] && !rc; ts[0]++)
        for (ts[1] = w->t0[1]; ts[1] <= w->t1[1] && !rc; ts[1]++)
            for (ts[2] = w->t0[2]; ts[2] <= w->t1[2] && !rc; ts[2]++)
                if (ts[0] != w->centre[0] || ts[1] != w->centre[1] || ts[2] != w->centre[2])
                    rc = fn(ctx, ts);
    return rc;
}

typedef struct box_ctx {
    const sgeom *g;
    tt_tensor *x;            /* the input-shaped tensor (x to gather, dx to scatter into) */
    int64_t b, nb;
    const window *w;
    starpu_data_handle_t win;
    int win_owner, add;
    int64_t wd[3];
} box_ctx;

static int box_visit(void *vc, const int64_t *ts)
{
    box_ctx *c = vc;
    const sgeom *g = c->g;
    int64_t blo[3], bhi[3], ts0[3], tsd[3];
    for (int j = 0; j < 3; j++) {
        ts0[j] = ts[j] * gtile(g, c->x, j);
        tsd[j] = gtiledim(g, c->x, j, ts[j]);
        blo[j] = c->w->lo[j] > ts0[j] ? c->w->lo[j] : ts0[j];
        bhi[j] = c->w->hi[j] < ts0[j] + tsd[j] ? c->w->hi[j] : ts0[j] + tsd[j];
    }
    const int64_t lin = tile_linear3(g, c->x, c->b, ts);
    const int town = tt_mpi_on ? tt_tile_owner(c->x, lin) : 0;
    if (c->add) /* window gradient -> dx tile */
        return move_box(g, c->x, c->nb, blo, bhi, c->win, c->win_owner, c->w->lo, c->wd, c->x->handles[lin], town,
                        ts0, tsd, 1, STARPU_RW);
    const int centre = ts[0] == c->w->centre[0] && ts[1] == c->w->centre[1] && ts[2] == c->w->centre[2];
    return move_box(g, c->x, c->nb, blo, bhi, c->x->handles[lin], town, ts0, tsd, c->win, c->win_owner, c->w->lo,
                    c->wd, 0, centre ? STARPU_W : STARPU_RW);
}

static int spatial_map(int kernel, const void *args, int dtype, const spatial_kernel *sk, int nbatch,
                       tt_tensor *const *batch, int nwhole, tt_tensor *const *whole, int reduce)
{
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    tt_tensor *xin = NULL, *xout = NULL, *y = NULL; /* window source, window gradient, output-shaped */
    for (int j = 0; j < nbatch; j++) {
        if (sk->roles[j] == ROLE_WIN)
            xin = batch[j];
        else if (sk->roles[j] == ROLE_DWIN)
            xout = batch[j];
        else
            y = batch[j];
    }
    tt_tensor *xl = xin ? xin : xout; /* the input layout */
    if (xin && xout && !tt_same_layout(xin, xout))
        return tt_error(TT_EINVAL, "%s: x and dx must have one shape and tiling", k->name);
    sgeom g;
    g.nsp = xl->ndim - 2;
    if (g.nsp < 1 || g.nsp > 3 || y->ndim != xl->ndim)
        return tt_error(TT_EINVAL, "%s: activations must be 3-D to 5-D (N, C, *spatial)", k->name);
    const int64_t *G = (const int64_t *)((const char *)args + sk->geo);
    for (int j = 0; j < 3; j++) {
        g.l[j] = G[j], g.o[j] = G[3 + j], g.k[j] = G[6 + j], g.s[j] = G[9 + j], g.p[j] = G[12 + j];
        g.d[j] = G[15 + j];
        const int a = gaxis(&g, j);
        if ((a >= 0 && (xl->shape[a] != g.l[j] || y->shape[a] != g.o[j])) ||
            (a < 0 && (g.l[j] != 1 || g.o[j] != 1)))
            return tt_error(TT_EINVAL, "%s: the tensors' spatial shape does not match the geometry", k->name);
        if (g.s[j] < 1 || g.k[j] < 1 || g.d[j] < 1)
            return tt_error(TT_EINVAL, "%s: kernel, stride and dilation must be >= 1", k->name);
    }
    const int64_t nout = y->ntiles;
    /* direct gradient: every window one input tile, each input tile one window */
    int direct = 0;
    if (xout) {
        char *hit = calloc((size_t)xl->ntiles, 1);
        if (!hit)
            return tt_error(TT_ENOMEM, "%s: out of memory", k->name);
        direct = 1;
        int64_t nhit = 0;
        for (int64_t i = 0; i < nout && direct; i++) {
            int64_t idx[TT_MAX_NDIM], ot[3];
            tt_tile_index(y, i, idx);
            for (int j = 0; j < 3; j++)
                ot[j] = gaxis(&g, j) < 0 ? 0 : idx[gaxis(&g, j)];
            window w;
            window_of(&g, y, xl, ot, &w);
            const int64_t lin = tile_linear3(&g, xl, idx[0], w.t0);
            if (!w.single || hit[lin])
                direct = 0;
            hit[lin] = 1, nhit++;
        }
        if (nhit != xl->ntiles)
            direct = 0;
        free(hit);
    }
    int rc = TT_OK;
    if (xout && !direct) /* zeroed: the windows' gradients are added in */
        for (int64_t i = 0; i < xout->ntiles && !rc; i++) {
            int64_t idx[TT_MAX_NDIM];
            tt_tile_index(xout, i, idx);
            tt_args_fill a = {.dtype = dtype, .n = tt_tile_nelems(xout, idx), .value = 0.0};
            rc = tt_submit(TT_K_FILL, &a, &xout->handles[i], NULL);
        }
    if (rc)
        return rc;
    /* the accumulators' partials by the rank of each task's window */
    acc_state st;
    int *owners = NULL;
    const int nacc = reduce && sk->acc ? k->nbuffers - nbatch : 0;
    if (nacc) {
        if (tt_mpi_on) {
            owners = calloc((size_t)nout, sizeof *owners);
            if (!owners)
                return tt_error(TT_ENOMEM, "%s: out of memory", k->name);
            for (int64_t i = 0; i < nout; i++) {
                int64_t idx[TT_MAX_NDIM], ot[3];
                tt_tile_index(y, i, idx);
                for (int j = 0; j < 3; j++)
                    ot[j] = gaxis(&g, j) < 0 ? 0 : idx[gaxis(&g, j)];
                window w;
                window_of(&g, y, xl, ot, &w);
                owners[i] = tt_tile_owner(xl, tile_linear3(&g, xl, idx[0], w.single ? w.t0 : w.centre));
            }
        }
        rc = acc_begin(&st, kernel, nacc, whole + (nwhole - nacc), owners, nout);
        if (rc) {
            free(owners);
            return rc;
        }
    }
    tt_args_buf buf;
    int64_t *a = buf.i;
    tt_args_load(kernel, args, &buf);
    int64_t *L = (int64_t *)((char *)a + sk->geo);
    for (int64_t i = 0; i < nout && !rc; i++) {
        int64_t idx[TT_MAX_NDIM], ot[3];
        tt_tile_index(y, i, idx);
        for (int j = 0; j < 3; j++)
            ot[j] = gaxis(&g, j) < 0 ? 0 : idx[gaxis(&g, j)];
        const int64_t b = idx[0], nb = tt_tile_dim(y, 0, b);
        window w;
        window_of(&g, y, xl, ot, &w);
        const int64_t anchor = tile_linear3(&g, xl, b, w.single ? w.t0 : w.centre);
        const int aown = tt_mpi_on ? tt_tile_owner(xl, anchor) : 0;
        box_ctx c = {.g = &g, .b = b, .nb = nb, .w = &w, .win_owner = aown};
        for (int j = 0; j < 3; j++)
            c.wd[j] = w.hi[j] - w.lo[j];
        /* the task's geometry: the window's */
        a[0] = dtype, a[1] = nb;
        for (int j = 0; j < 3; j++) {
            L[j] = c.wd[j];
            L[3 + j] = w.on[j];
            L[12 + j] = g.p[j] - w.oa[j] * g.s[j] + w.lo[j];
            if (sk->e >= 0)
                ((int64_t *)((char *)a + sk->e))[j] = g.l[j] + g.p[j] - w.lo[j];
        }
        starpu_data_handle_t h[8];
        enum starpu_data_access_mode modes[8];
        tt_tensor *win = NULL, *dwin = NULL;
        for (int j = 0; j < nbatch && !rc; j++) {
            modes[j] = k->modes[j];
            if (sk->roles[j] == ROLE_OUT) {
                h[j] = y->handles[i];
            } else if (sk->roles[j] == ROLE_WIN) {
                if (w.single) {
                    h[j] = xin->handles[anchor];
                } else {
                    rc = temp_box(&g, xin, nb, c.wd, &win);
                    if (rc)
                        break;
                    c.x = xin, c.win = win->handles[0], c.add = 0;
                    rc = each_tile(&w, box_visit, &c);
                    h[j] = win->handles[0];
                }
            } else { /* ROLE_DWIN */
                if (direct) {
                    h[j] = xout->handles[anchor];
                } else {
                    rc = temp_box(&g, xout, nb, c.wd, &dwin);
                    h[j] = rc ? NULL : dwin->handles[0];
                }
            }
        }
        for (int j = nbatch; j < k->nbuffers; j++)
            h[j] = whole[j - nbatch]->handles[0], modes[j] = k->modes[j];
        if (!rc && nacc) {
            int first;
            double na;
            acc_handles(&st, owners ? owners[i] : 0, h + (k->nbuffers - nacc), &first, &na, 0.0);
            *(int64_t *)((char *)a + k->off[TT_OFF_FIRST]) = first;
            if (first)
                for (int j = k->nbuffers - nacc; j < k->nbuffers; j++)
                    modes[j] = STARPU_W;
        }
        if (!rc)
            rc = tt_submit(kernel, a, h, modes);
        if (!rc && dwin) { /* the window's gradient added into the dx tiles it overlaps */
            /* dwin lives where its first read operand is: the window (max pool) or dy's tile */
            c.win_owner = kernel == TT_K_MAX_POOL_BWD ? aown : (tt_mpi_on ? tt_tile_owner(y, i) : 0);
            c.x = xout, c.win = dwin->handles[0], c.add = 1;
            rc = each_tile(&w, box_visit, &c);
        }
        if (win)
            tt_tensor_free(win);
        if (dwin)
            tt_tensor_free(dwin);
    }
    if (nacc) {
        int rc2 = acc_end(&st);
        rc = rc ? rc : rc2;
    }
    free(owners);
    if (rc)
        return rc;
    for (int j = 0; j < k->nbuffers; j++)
        if (k->modes[j] & STARPU_W)
            (j < nbatch ? batch[j] : whole[j - nbatch])->written = 1;
    return TT_OK;
}

int tt_batch_map(int kernel, const void *args, int nbatch, tt_tensor *const *batch, int nwhole,
                 tt_tensor *const *whole, int reduce)
{
    spatial_kernel sk;
    const int spatial = kernel >= 0 && kernel < TT_NKERNELS && spatial_info(kernel, &sk);
    if (kernel < 0 || kernel >= TT_NKERNELS || (!spatial && !bn_kernel(kernel)))
        return tt_error(TT_EINVAL, "batch_map: kernel id %d is not a conv/pool/batch-norm kernel", kernel);
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
    int rc = check_operands(k, nbatch, batch, nwhole, whole, reduce, &dtype);
    if (rc)
        return rc;
    if (spatial)
        return spatial_map(kernel, args, dtype, &sk, nbatch, batch, nwhole, whole, reduce);
    return bn_map(kernel, args, dtype, nbatch, batch, nwhole, whole, reduce);
}
