/* Attention expanders: head split/merge (one permute task per tile) and flash attention
 * (one task per (query tile, key tile) pair, forward and backward; key/value may have fewer
 * heads than the query: grouped-query attention, no repeated copy).  The Python side
 * validates first; these re-validate everything. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"

#define CHECK(call)          \
    do {                     \
        int rc_ = (call);    \
        if (rc_)             \
            return rc_;      \
    } while (0)

/* ---------------------------------------------------------------- head split / merge */

/* x (B, T, nparts*C) and y (B, H, T, D) with H*D = C: the part `part` of x's last axis is
 * y's heads.  x's tile along its last axis (tc) holds whole heads and, with several parts,
 * never straddles two parts; y is tiled (tile_B, th, tile_T, D) with th*D dividing tc (a
 * tile of x holds tc / (th*D) head tiles of y; tc/D for one each). */
static int heads_geometry(const char *what, const tt_tensor *x, const tt_tensor *y, int part, int nparts,
                          int64_t *cwidth)
{
    if (!tt_is_f32_f64(x->dtype) || x->dtype != y->dtype)
        return tt_error(TT_EINVAL, "%s: operands must share a float dtype (float32, float64)", what);
    if (x->ndim != 3 || y->ndim != 4)
        return tt_error(TT_EINVAL, "%s: x must be (B, T, W) and y (B, H, T, D) (got ranks %d and %d)", what,
                        x->ndim, y->ndim);
    if (nparts < 1 || part < 0 || part >= nparts)
        return tt_error(TT_EINVAL, "%s: part %d out of range for %d parts", what, part, nparts);
    const int64_t W = x->shape[2], H = y->shape[1], D = y->shape[3], tc = x->tile[2];
    if (W % nparts != 0)
        return tt_error(TT_EINVAL, "%s: width %lld is not divisible by nparts=%d", what, (long long)W, nparts);
    const int64_t C = W / nparts;
    if (H * D != C || y->shape[0] != x->shape[0] || y->shape[2] != x->shape[1])
        return tt_error(TT_EINVAL, "%s: y shape (%lld, %lld, %lld, %lld) does not match x (%lld, %lld, %lld) "
                        "split in %d parts", what, (long long)y->shape[0], (long long)H, (long long)y->shape[2],
                        (long long)D, (long long)x->shape[0], (long long)x->shape[1], (long long)W, nparts);
    if (tc % D != 0 || (nparts > 1 && C % tc != 0))
        return tt_error(TT_EINVAL, "%s: x's tile %lld along the last axis must hold whole heads (D=%lld) and not "
                        "straddle parts (C=%lld)", what, (long long)tc, (long long)D, (long long)C);
    if (y->tile[0] != x->tile[0] || y->tile[1] < 1 || (tc / D) % y->tile[1] != 0 || y->tile[2] != x->tile[1] ||
        y->tile[3] != D)
        return tt_error(TT_EINVAL, "%s: y tiles (%lld, %lld, %lld, %lld) must be (%lld, a divisor of %lld, %lld, %lld)",
                        what, (long long)y->tile[0], (long long)y->tile[1], (long long)y->tile[2],
                        (long long)y->tile[3], (long long)x->tile[0], (long long)(tc / D), (long long)x->tile[1],
                        (long long)D);
    *cwidth = C;
    return TT_OK;
}

/* Submit one permute per y tile; it reads (split) or writes (merge) the columns c0 .. of the
 * x tile part*C/tc + (y's first head)*D/tc along the last axis.  Merge: the y tile at c0 = 0
 * overwrites the x tile (W), the others of that x tile fill their columns (RW, submitted after
 * it: y's tiles go in linear order). */
static int heads_permute(int kernel, const char *what, tt_tensor *x, tt_tensor *y, int part, int64_t C)
{
    const int64_t tc = x->tile[2], first = part * C / tc, hd = y->shape[3], tw = y->tile[1] * hd;
    int64_t yidx[TT_MAX_NDIM], xidx[3];
    for (int64_t t = 0; t < y->ntiles; t++) {
        tt_tile_index(y, t, yidx);
        xidx[0] = yidx[0];
        xidx[1] = yidx[2];
        xidx[2] = first + yidx[1] * tw / tc;
        const int64_t nb = tt_tile_dim(y, 0, yidx[0]), nh = tt_tile_dim(y, 1, yidx[1]);
        const int64_t nt = tt_tile_dim(y, 2, yidx[2]), xw = tt_tile_dim(x, 2, xidx[2]), c0 = yidx[1] * tw % tc;
        starpu_data_handle_t h[2];
        if (kernel == TT_K_HEADS_SPLIT) {
            const tt_args_heads_split a = {.dtype = x->dtype, .nb = nb, .nt = nt, .nh = nh, .hd = hd, .xw = xw,
                                           .c0 = c0};
            h[0] = x->handles[tt_tile_linear(x, xidx)];
            h[1] = y->handles[t];
            CHECK(tt_submit(kernel, &a, h, NULL));
        } else {
            const tt_args_heads_merge a = {.dtype = x->dtype, .nb = nb, .nh = nh, .nt = nt, .hd = hd, .xw = xw,
                                           .c0 = c0};
            enum starpu_data_access_mode modes[2] = {STARPU_R, c0 == 0 ? STARPU_W : STARPU_RW};
            h[0] = y->handles[t];
            h[1] = x->handles[tt_tile_linear(x, xidx)];
            CHECK(tt_submit(kernel, &a, h, modes));
        }
    }
    return TT_OK;
}

int tt_heads_split(tt_tensor *x, int part, int nparts, tt_tensor *y)
{
    const char *what = "split_heads";
    CHECK(tt_check_readable(x, what));
    CHECK(tt_check_tensor(y, what));
    int64_t C;
    CHECK(heads_geometry(what, x, y, part, nparts, &C));
    CHECK(heads_permute(TT_K_HEADS_SPLIT, what, x, y, part, C));
    y->written = 1;
    return TT_OK;
}

/* Zero the tiles of x (B, T, nparts*C) of every part that `keep` says was written:
 * keep >= 0: that one part; keep < 0: the parts whose bit is set in `mask`. */
static int heads_fill_others(const char *what, tt_tensor *x, int keep, uint32_t mask, int64_t C)
{
    const int64_t tc = x->tile[2];
    int64_t idx[3];
    for (int64_t t = 0; t < x->ntiles; t++) {
        tt_tile_index(x, t, idx);
        const int64_t p = idx[2] * tc / C;
        if (keep >= 0 ? p == keep : (p < 32 && (mask >> p) & 1u))
            continue;
        const tt_args_fill a = {.dtype = x->dtype, .n = tt_tile_nelems(x, idx), .value = 0.0};
        CHECK(tt_submit(TT_K_FILL, &a, &x->handles[t], NULL));
    }
    return TT_OK;
}

/* y's heads into part `part` of x's columns; x's other tiles untouched. */
static int heads_merge_part(const char *what, tt_tensor *y, int part, int nparts, tt_tensor *x, int64_t *C)
{
    CHECK(tt_check_readable(y, what));
    CHECK(tt_check_tensor(x, what));
    CHECK(heads_geometry(what, x, y, part, nparts, C));
    CHECK(heads_permute(TT_K_HEADS_MERGE, what, x, y, part, *C));
    x->written = 1;
    return TT_OK;
}

int tt_heads_merge(tt_tensor *y, int part, int nparts, tt_tensor *x)
{
    int64_t C;
    CHECK(heads_merge_part("merge_heads", y, part, nparts, x, &C));
    if (nparts > 1) /* the other parts' columns are zero */
        CHECK(heads_fill_others("merge_heads", x, part, 0, C));
    return TT_OK;
}

int tt_heads_merge_part(tt_tensor *y, int part, int nparts, tt_tensor *x)
{
    if (nparts > 32)
        return tt_error(TT_EINVAL, "merge_heads: at most 32 parts, got %d", nparts);
    int64_t C;
    /* x->written is set: the caller completes the other parts (tt_heads_fill_parts) before any read */
    return heads_merge_part("merge_heads", y, part, nparts, x, &C);
}

int tt_heads_fill_parts(tt_tensor *x, int nparts, uint32_t parts)
{
    const char *what = "merge_heads";
    CHECK(tt_check_tensor(x, what));
    if (x->ndim != 3 || nparts < 1 || nparts > 32 || x->shape[2] % nparts || (x->shape[2] / nparts) % x->tile[2])
        return tt_error(TT_EINVAL, "%s: x (B, T, nparts*C) with tiles not straddling the %d parts expected", what,
                        nparts);
    CHECK(heads_fill_others(what, x, -1, parts, x->shape[2] / nparts));
    x->written = 1;
    return TT_OK;
}

/* ---------------------------------------------------------------- flash attention */

/* q (B, H, T, D) with D in one tile; `others` share q's layout and dtype; `rows` tensors
 * have q's layout without the last axis. */
static int attn_geometry(const char *what, const tt_tensor *q, int nothers, tt_tensor *const *others, int nrows,
                         tt_tensor *const *rows)
{
    if (!tt_is_f32_f64(q->dtype))
        return tt_error(TT_EINVAL, "%s: q must be float32 or float64", what);
    if (q->ndim != 4)
        return tt_error(TT_EINVAL, "%s: q must be (B, H, T, D), got rank %d", what, q->ndim);
    if (q->tile[3] != q->shape[3])
        return tt_error(TT_EINVAL, "%s: the head dimension D=%lld must be a single tile (tile %lld)", what,
                        (long long)q->shape[3], (long long)q->tile[3]);
    for (int j = 0; j < nothers; j++)
        if (!tt_same_layout(q, others[j]))
            return tt_error(TT_EINVAL, "%s: operand %d must have q's shape, tiles and dtype", what, j + 1);
    for (int j = 0; j < nrows; j++) {
        const tt_tensor *r = rows[j];
        if (r->ndim != 3 || r->dtype != q->dtype)
            return tt_error(TT_EINVAL, "%s: row statistics must be (B, H, T) of q's dtype", what);
        for (int d = 0; d < 3; d++)
            if (r->shape[d] != q->shape[d] || r->tile[d] != q->tile[d])
                return tt_error(TT_EINVAL, "%s: row statistics must have q's shape and tiles without D", what);
    }
    return TT_OK;
}

/* Grouped-query attention: k (and `nkv` others) are (B, Hkv, T, D) with Hkv dividing q's H;
 * query head h reads kv head h / (H / Hkv).  q's head tile th must be a multiple or a
 * divisor of the group size G = H / Hkv, and the kv tensors' head tile is max(th / G, 1), so
 * each query tile reads one kv tile.  Sets *group, the (batch, head) rows of a query tile
 * per kv row (min(th, G)), and *gsize = G. */
static int kv_geometry_at(const char *what, const tt_tensor *q, int nkv, tt_tensor *const *kv, int64_t *group,
                          int64_t *gsize, int64_t q_start)
{
    const tt_tensor *k = kv[0];
    /* q_start < 0: keys and queries share the tile along T (training), the keys as many
     * positions as the queries or more (a prefix: the queries are the last Tq positions);
     * else the queries are the positions q_start .. q_start + Tq - 1 of keys of any length
     * and tile along T */
    const int same_t = q_start < 0;
    if (k->ndim != 4 || k->dtype != q->dtype || k->shape[0] != q->shape[0] ||
        k->shape[2] < (same_t ? 0 : q_start) + q->shape[2] ||
        k->shape[3] != q->shape[3] || k->shape[1] < 1 || q->shape[1] % k->shape[1] != 0)
        return tt_error(TT_EINVAL, "%s: key/value must be (B, Hkv, T, D) of q's dtype, with Hkv dividing q's "
                        "H=%lld", what, (long long)q->shape[1]);
    const int64_t G = q->shape[1] / k->shape[1], th = q->tile[1];
    if (th % G != 0 && G % th != 0)
        return tt_error(TT_EINVAL, "%s: q's head tile %lld must be a multiple or a divisor of the group size %lld",
                        what, (long long)th, (long long)G);
    const int64_t thk = th >= G ? th / G : 1;
    if (k->tile[0] != q->tile[0] || k->tile[1] != thk || (same_t && k->tile[2] != q->tile[2]) ||
        k->tile[3] != q->tile[3])
        return tt_error(TT_EINVAL, "%s: key/value tiles (%lld, %lld, %lld, %lld) must be (%lld, %lld, %lld, %lld)",
                        what, (long long)k->tile[0], (long long)k->tile[1], (long long)k->tile[2],
                        (long long)k->tile[3], (long long)q->tile[0], (long long)thk, (long long)q->tile[2],
                        (long long)q->tile[3]);
    for (int j = 1; j < nkv; j++)
        if (!tt_same_layout(k, kv[j]))
            return tt_error(TT_EINVAL, "%s: value and the key/value gradients must have key's shape, tiles and dtype",
                            what);
    *group = th < G ? th : G;
    *gsize = G;
    return TT_OK;
}

static int kv_geometry(const char *what, const tt_tensor *q, int nkv, tt_tensor *const *kv, int64_t *group,
                       int64_t *gsize)
{
    return kv_geometry_at(what, q, nkv, kv, group, gsize, -1);
}

/* the linear index of the kv tile that q's tile (index qi) with key tile j along T reads */
static int64_t kv_tile(const tt_tensor *q, const tt_tensor *k, const int64_t *qi, int64_t j, int64_t G)
{
    int64_t ki[TT_MAX_NDIM];
    memcpy(ki, qi, sizeof ki);
    ki[1] = qi[1] * q->tile[1] / G / k->tile[1];
    ki[2] = j;
    return tt_tile_linear(k, ki);
}

/* (batch*head extent, rows) of q's tile `t`, its index and first position along T */
static void attn_tile(const tt_tensor *q, int64_t t, int64_t *idx, int64_t *bh, int64_t *rows)
{
    tt_tile_index(q, t, idx);
    *bh = tt_tile_dim(q, 0, idx[0]) * tt_tile_dim(q, 1, idx[1]);
    *rows = tt_tile_dim(q, 2, idx[2]);
}

static int temp_like(const tt_tensor *q, int ndim, int64_t last, tt_tensor **out)
{
    int64_t shape[4] = {q->shape[0], q->shape[1], q->shape[2], last};
    int64_t tile[4] = {q->tile[0], q->tile[1], q->tile[2], last};
    return tt_tensor_new_temp(ndim, shape, tile, q->dtype, out);
}

/* The forward tasks: queries at positions q_start + (their index along T) (q_start = 0 and
 * keys tiled as the queries in training; the position of the first new token when decoding
 * against a key/value cache), causal: each query tile reads the key tiles up to its last
 * position only. */
static int attn_fwd_submit(const char *what, tt_tensor *q, tt_tensor *k, tt_tensor *v, double scale, int causal,
                           int64_t q_start, int64_t group, int64_t G, tt_tensor *o, tt_tensor *lse)
{
    tt_tensor *l; /* running row sums, dropped once the normalise tasks are submitted */
    CHECK(temp_like(q, 3, 1, &l));
    const int64_t nkt = k->grid[2], tq0 = q->tile[2], tk0 = k->tile[2], D = q->shape[3];
    int64_t qi[TT_MAX_NDIM];
    int rc = TT_OK;
    for (int64_t t = 0; t < q->ntiles && rc == TT_OK; t++) {
        int64_t bh, tq;
        attn_tile(q, t, qi, &bh, &tq);
        const int64_t r = tt_tile_linear(lse, qi); /* lse/l index: q's without the D axis */
        const int64_t qoff = q_start + qi[2] * tq0, lastkey = (qoff + tq - 1) / tk0;
        const int64_t last = causal ? (lastkey < nkt - 1 ? lastkey : nkt - 1) : nkt - 1;
        for (int64_t j = 0; j <= last && rc == TT_OK; j++) {
            tt_args_attn_fwd args = {0}, *a = &args;
            a->dtype = q->dtype;
            a->bh = bh, a->tq = tq, a->tk = tt_tile_dim(k, 2, j), a->hd = D;
            a->qoff = qoff, a->koff = j * tk0, a->causal = causal != 0, a->init = j == 0;
            a->group = group;
            a->scale = scale;
            enum starpu_data_access_mode acc = j == 0 ? STARPU_W : STARPU_RW;
            enum starpu_data_access_mode modes[6] = {STARPU_R, STARPU_R, STARPU_R, acc, acc, acc};
            const int64_t kl = kv_tile(q, k, qi, j, G);
            starpu_data_handle_t h[6] = {q->handles[t], k->handles[kl], v->handles[kl],
                                         o->handles[t], lse->handles[r], l->handles[r]};
            rc = tt_submit(TT_K_ATTN_FWD, a, h, modes);
        }
        if (rc)
            break;
        const tt_args_attn_fwd_norm n = {.dtype = q->dtype, .bh = bh, .tq = tq, .hd = D};
        starpu_data_handle_t h[3] = {o->handles[t], lse->handles[r], l->handles[r]};
        rc = tt_submit(TT_K_ATTN_FWD_NORM, &n, h, NULL);
    }
    tt_tensor_free(l);
    if (rc)
        return rc;
    o->written = 1;
    lse->written = 1;
    return TT_OK;
}

int tt_attention_fwd(tt_tensor *q, tt_tensor *k, tt_tensor *v, double scale, int causal, tt_tensor *o,
                     tt_tensor *lse)
{
    const char *what = "scaled_dot_product_attention";
    CHECK(tt_check_readable(q, what));
    CHECK(tt_check_readable(k, what));
    CHECK(tt_check_readable(v, what));
    CHECK(tt_check_tensor(o, what));
    CHECK(tt_check_tensor(lse, what));
    tt_tensor *others[1] = {o}, *kv[2] = {k, v};
    CHECK(attn_geometry(what, q, 1, others, 1, &lse));
    int64_t group, G;
    CHECK(kv_geometry(what, q, 2, kv, &group, &G));
    if (!isfinite(scale))
        return tt_error(TT_EINVAL, "%s: scale must be finite", what);
    return attn_fwd_submit(what, q, k, v, scale, causal, k->shape[2] - q->shape[2], group, G, o, lse);
}

int tt_attention_decode(tt_tensor *q, tt_tensor *k, tt_tensor *v, double scale, int64_t q_start, tt_tensor *o)
{
    const char *what = "decode attention";
    CHECK(tt_check_readable(q, what));
    CHECK(tt_check_readable(k, what));
    CHECK(tt_check_readable(v, what));
    CHECK(tt_check_tensor(o, what));
    if (q_start < 0)
        return tt_error(TT_EINVAL, "%s: q_start must be >= 0, got %lld", what, (long long)q_start);
    tt_tensor *others[1] = {o}, *kv[2] = {k, v};
    CHECK(attn_geometry(what, q, 1, others, 0, NULL));
    int64_t group, G;
    CHECK(kv_geometry_at(what, q, 2, kv, &group, &G, q_start));
    if (!isfinite(scale))
        return tt_error(TT_EINVAL, "%s: scale must be finite", what);
    tt_tensor *lse; /* the row logsumexp: not needed without a backward */
    CHECK(temp_like(q, 3, 1, &lse));
    int rc = attn_fwd_submit(what, q, k, v, scale, 1, q_start, group, G, o, lse);
    tt_tensor_free(lse);
    return rc;
}

int tt_attention_bwd(tt_tensor *q, tt_tensor *k, tt_tensor *v, tt_tensor *o, tt_tensor *dout, tt_tensor *lse,
                     double scale, int causal, tt_tensor *dq, tt_tensor *dk, tt_tensor *dv)
{
    const char *what = "scaled_dot_product_attention backward";
    tt_tensor *in[5] = {q, k, v, o, dout};
    for (int j = 0; j < 5; j++)
        CHECK(tt_check_readable(in[j], what));
    CHECK(tt_check_readable(lse, what));
    CHECK(tt_check_tensor(dq, what));
    CHECK(tt_check_tensor(dk, what));
    CHECK(tt_check_tensor(dv, what));
    tt_tensor *others[3] = {o, dout, dq}, *kv[4] = {k, v, dk, dv};
    CHECK(attn_geometry(what, q, 3, others, 1, &lse));
    int64_t group, G;
    CHECK(kv_geometry(what, q, 4, kv, &group, &G));
    if (!isfinite(scale))
        return tt_error(TT_EINVAL, "%s: scale must be finite", what);
    tt_tensor *st; /* (lse, rowsum(dO * O)) per query row */
    CHECK(temp_like(q, 4, 2, &st));
    /* keys longer than the queries: a prefix, the queries are the last Tq positions */
    const int64_t nkt = k->grid[2], tT = q->tile[2], q_start = k->shape[2] - q->shape[2], D = q->shape[3];
    int64_t qi[TT_MAX_NDIM];
    int rc = TT_OK;
    for (int64_t t = 0; t < q->ntiles && rc == TT_OK; t++) {
        int64_t bh, tq;
        attn_tile(q, t, qi, &bh, &tq);
        const tt_args_attn_bwd_rows a = {.dtype = q->dtype, .bh = bh, .tq = tq, .hd = D};
        starpu_data_handle_t h[4] = {dout->handles[t], o->handles[t], lse->handles[tt_tile_linear(lse, qi)],
                                     st->handles[t]};
        rc = tt_submit(TT_K_ATTN_BWD_ROWS, &a, h, NULL);
    }
    /* Query tiles in order, key tiles in order inside: dq_i accumulates along j, dk_j and
     * dv_j along i; tasks on different (i, j) rows and columns run as a wavefront. */
    for (int64_t t = 0; t < q->ntiles && rc == TT_OK; t++) {
        int64_t bh, tq;
        attn_tile(q, t, qi, &bh, &tq);
        const int64_t qoff = q_start + qi[2] * tT, lastkey = (qoff + tq - 1) / tT;
        const int64_t last = causal ? (lastkey < nkt - 1 ? lastkey : nkt - 1) : nkt - 1;
        /* the first query tile (in submission order) of the kv tile's group that reads a kv
         * tile overwrites its dk, dv: causal, the first whose last position reaches it */
        const int firsthead = qi[1] * q->tile[1] % G == 0;
        for (int64_t j = 0; j <= last && rc == TT_OK; j++) {
            tt_args_attn_bwd args = {0}, *a = &args;
            const int first = qi[2] == 0 || (causal && (qoff - 1) / tT < j);
            const int initq = j == 0, initkv = firsthead && first;
            a->dtype = q->dtype;
            a->bh = bh, a->tq = tq, a->tk = tt_tile_dim(k, 2, j), a->hd = D;
            a->qoff = qoff, a->koff = j * tT, a->causal = causal != 0;
            a->initq = initq, a->initkv = initkv, a->group = group;
            a->scale = scale;
            const int64_t kl = kv_tile(q, k, qi, j, G);
            enum starpu_data_access_mode mq = initq ? STARPU_W : STARPU_RW, mkv = initkv ? STARPU_W : STARPU_RW;
            enum starpu_data_access_mode modes[8] = {STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R, mq, mkv, mkv};
            starpu_data_handle_t h[8] = {q->handles[t],  k->handles[kl],  v->handles[kl],  dout->handles[t],
                                         st->handles[t], dq->handles[t], dk->handles[kl], dv->handles[kl]};
            rc = tt_submit(TT_K_ATTN_BWD, a, h, modes);
        }
    }
    tt_tensor_free(st);
    if (rc)
        return rc;
    dq->written = dk->written = dv->written = 1;
    return TT_OK;
}
