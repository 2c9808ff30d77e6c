/* Convolution, pooling and batch norm on batch tiles (N, C, *spatial) of whole images
 * (csrc/expand_conv.c).  Spatial geometry is always 3-D: a 1-D or 2-D op has unit leading
 * axes (l = o = k = s = d = 1, p = 0), so one body serves conv1d/2d/3d and the pools.
 *
 * conv: per image and group, im2col into a scratch (cin/groups * prod(k), prod(o)) matrix
 * (skipped for a pointwise kernel), one BLAS gemm with the weight (cout/groups, cin/groups *
 * prod(k)) straight into the NC(DHW) output; backward: dcols = w^T dy then col2im (which
 * adds up overlapping windows) for dx, dw += dy cols^T over the images of every batch tile.
 *
 * The typed bodies are written once below (#ifdef TT_CONV_T) and included twice, for float
 * (cblas_s*) and double (cblas_d*). */
#ifndef TT_CONV_T
#include "tt_blas.h"
#include <math.h>
#include <stdlib.h>
#include "tt_cpu.h"

typedef struct geom {
    int64_t l[3], o[3], k[3], s[3], p[3], d[3];
    int64_t e[3];    /* avg pools: where the padded input ends (l + p for whole images) */
    int64_t L, O, K; /* input, output and kernel window element counts */
} geom;

static geom geom_make(const int64_t *v)
{
    geom g;
    for (int j = 0; j < 3; j++) {
        g.l[j] = v[j], g.o[j] = v[3 + j], g.k[j] = v[6 + j];
        g.s[j] = v[9 + j], g.p[j] = v[12 + j], g.d[j] = v[15 + j];
    }
    for (int j = 0; j < 3; j++)
        g.e[j] = g.l[j] + g.p[j];
    g.L = g.l[0] * g.l[1] * g.l[2], g.O = g.o[0] * g.o[1] * g.o[2], g.K = g.k[0] * g.k[1] * g.k[2];
    return g;
}

#define GEOM_OF(a) \
    geom_make((const int64_t[18]){(a)->l0, (a)->l1, (a)->l2, (a)->o0, (a)->o1, (a)->o2, (a)->k0, (a)->k1, (a)->k2, \
                                  (a)->s0, (a)->s1, (a)->s2, (a)->p0, (a)->p1, (a)->p2, (a)->d0, (a)->d1, (a)->d2})

/* a 1x1(x1) kernel with unit stride and no padding: the columns are the input itself */
static int pointwise(const geom *g)
{
    return g->K == 1 && g->s[0] == 1 && g->s[1] == 1 && g->s[2] == 1 && g->p[0] == 0 && g->p[1] == 0 &&
           g->p[2] == 0;
}

/* Pool window of output position (oa, ob, oc) along each axis: [st, en) clipped to the
 * input; pool = the window clipped to the padded input (avg_pool's count_include_pad). */
static int64_t window(const geom *g, const int64_t *o, int64_t *st, int64_t *en, int64_t *pool)
{
    int64_t cnt = 1;
    *pool = 1;
    for (int j = 0; j < 3; j++) {
        int64_t a = o[j] * g->s[j] - g->p[j], b = a + g->k[j];
        if (b > g->e[j])
            b = g->e[j];
        *pool *= b - a;
        st[j] = a < 0 ? 0 : a;
        en[j] = b > g->l[j] ? g->l[j] : b;
        cnt *= en[j] > st[j] ? en[j] - st[j] : 0;
    }
    return cnt;
}

/* The output positions [*lo, *hi) along the last axis whose input position oc * s - p + kc * d
 * falls inside [0, l): the rows of im2col/col2im are copied over that range without tests. */
static void inner_range(const geom *g, int64_t kc, int64_t *lo, int64_t *hi)
{
    const int64_t s = g->s[2], off = g->p[2] - kc * g->d[2]; /* ic = oc * s - off */
    int64_t a = off > 0 ? (off + s - 1) / s : 0;                    /* first oc with ic >= 0 */
    int64_t b = g->l[2] + off > 0 ? (g->l[2] - 1 + off) / s + 1 : 0; /* first oc with ic >= l */
    *lo = a < g->o[2] ? a : g->o[2];
    *hi = b < *lo ? *lo : b > g->o[2] ? g->o[2] : b;
}

#define TT_CONV_T float
#define TT_CONV_S(name) name##_f32
#define TT_GEMM cblas_sgemm
#include "conv.c"
#undef TT_CONV_T
#undef TT_CONV_S
#undef TT_GEMM
#define TT_CONV_T double
#define TT_CONV_S(name) name##_f64
#define TT_GEMM cblas_dgemm
#include "conv.c"
#undef TT_CONV_T
#undef TT_CONV_S
#undef TT_GEMM

/* dispatch a typed body: f(args..., pointers) */
#define DISPATCH(dtype, f, ...)         \
    do {                                \
        if ((dtype) == TT_F32)          \
            f##_f32(__VA_ARGS__);       \
        else if ((dtype) == TT_F64)     \
            f##_f64(__VA_ARGS__);       \
    } while (0)

void tt_cpu_conv_fwd(const tt_args_conv_fwd *a, const void *x, void *y, const void *w, const void *b)
{
    geom g = GEOM_OF(a);
    DISPATCH(a->dtype, conv_fwd, &g, a->nb, a->cin, a->cout, a->groups, x, w, b, y);
}

void tt_cpu_conv_bwd_x(const tt_args_conv_bwd_x *a, const void *dy, void *dx, const void *w)
{
    geom g = GEOM_OF(a);
    DISPATCH(a->dtype, conv_bwd_x, &g, a->nb, a->cin, a->cout, a->groups, dy, w, dx);
}

void tt_cpu_conv_bwd_w(const tt_args_conv_bwd_w *a, const void *x, const void *dy, void *dw, void *db)
{
    geom g = GEOM_OF(a);
    DISPATCH(a->dtype, conv_bwd_w, &g, a->nb, a->cin, a->cout, a->groups, (int)a->first, x, dy, dw, db);
}

void tt_cpu_max_pool_fwd(const tt_args_max_pool_fwd *a, const void *x, void *y)
{
    geom g = GEOM_OF(a);
    DISPATCH(a->dtype, max_pool, &g, a->nb * a->c, x, NULL, y);
}

void tt_cpu_max_pool_bwd(const tt_args_max_pool_bwd *a, const void *x, const void *dy, void *dx)
{
    geom g = GEOM_OF(a);
    DISPATCH(a->dtype, max_pool, &g, a->nb * a->c, x, dy, dx);
}

void tt_cpu_avg_pool_fwd(const tt_args_avg_pool_fwd *a, const void *x, void *y)
{
    geom g = GEOM_OF(a);
    g.e[0] = a->e0, g.e[1] = a->e1, g.e[2] = a->e2;
    DISPATCH(a->dtype, avg_pool, &g, a->nb * a->c, (int)a->cip, a->divisor, 0, x, y);
}

void tt_cpu_avg_pool_bwd(const tt_args_avg_pool_bwd *a, const void *dy, void *dx)
{
    geom g = GEOM_OF(a);
    g.e[0] = a->e0, g.e[1] = a->e1, g.e[2] = a->e2;
    DISPATCH(a->dtype, avg_pool, &g, a->nb * a->c, (int)a->cip, a->divisor, 1, dx, (void *)dy);
}

void tt_cpu_bn_stats(const tt_args_bn_stats *a, const void *x, void *mean, void *m2)
{
    DISPATCH(a->dtype, bn_stats, a->nb, a->c, a->hw, (int)a->first, a->na, x, mean, m2);
}

void tt_cpu_bn_merge(const tt_args_bn_merge *a, const void *mb, const void *qb, void *mean, void *m2)
{
    DISPATCH(a->dtype, bn_merge, a->c, (int)a->first, a->na, a->nb, mb, qb, mean, m2);
}

void tt_cpu_bn_fwd(const tt_args_bn_fwd *a, const void *x, void *y, const void *mean, const void *rstd,
                   const void *w, const void *b)
{
    DISPATCH(a->dtype, bn_fwd, a->nb, a->c, a->hw, x, y, mean, rstd, w, b);
}

void tt_cpu_bn_bwd_stats(const tt_args_bn_bwd_stats *a, const void *dy, const void *x, const void *mean,
                         const void *rstd, void *sdy, void *sdyx)
{
    DISPATCH(a->dtype, bn_bwd_stats, a->nb, a->c, a->hw, (int)a->first, dy, x, mean, rstd, sdy, sdyx);
}

void tt_cpu_bn_bwd_x(const tt_args_bn_bwd_x *a, const void *dy, const void *x, void *dx, const void *mean,
                     const void *rstd, const void *w, const void *sdy, const void *sdyx)
{
    DISPATCH(a->dtype, bn_bwd_x, a->nb, a->c, a->hw, a->alpha, dy, x, dx, mean, rstd, w, sdy, sdyx);
}

#else /* ---- typed bodies (T = TT_CONV_T) ---- */
#define T TT_CONV_T

/* cols (cg * K, O) of one image's channel block x (cg, L); zeros where a window is in padding */
static void TT_CONV_S(im2col)(const geom *g, int64_t cg, const T *x, T *cols)
{
    for (int64_t c = 0; c < cg; c++)
        for (int64_t ka = 0; ka < g->k[0]; ka++)
            for (int64_t kb = 0; kb < g->k[1]; kb++)
                for (int64_t kc = 0; kc < g->k[2]; kc++) {
                    T *dst = cols + (((c * g->k[0] + ka) * g->k[1] + kb) * g->k[2] + kc) * g->O;
                    int64_t lo, hi;
                    inner_range(g, kc, &lo, &hi);
                    const int64_t s2 = g->s[2], off = kc * g->d[2] - g->p[2];
                    for (int64_t oa = 0; oa < g->o[0]; oa++) {
                        const int64_t ia = oa * g->s[0] - g->p[0] + ka * g->d[0];
                        for (int64_t ob = 0; ob < g->o[1]; ob++) {
                            const int64_t ib = ob * g->s[1] - g->p[1] + kb * g->d[1];
                            T *row = dst + (oa * g->o[1] + ob) * g->o[2];
                            if (ia < 0 || ia >= g->l[0] || ib < 0 || ib >= g->l[1]) {
                                memset(row, 0, (size_t)g->o[2] * sizeof(T));
                                continue;
                            }
                            const T *src = x + (c * g->l[0] + ia) * g->l[1] * g->l[2] + ib * g->l[2];
                            for (int64_t oc = 0; oc < lo; oc++)
                                row[oc] = 0;
                            if (s2 == 1 && hi > lo)
                                memcpy(row + lo, src + lo + off, (size_t)(hi - lo) * sizeof(T));
                            else
                                for (int64_t oc = lo; oc < hi; oc++)
                                    row[oc] = src[oc * s2 + off];
                            for (int64_t oc = hi; oc < g->o[2]; oc++)
                                row[oc] = 0;
                        }
                    }
                }
}

/* dx (cg, L) += the columns scattered back to their windows (dx zeroed by the caller) */
static void TT_CONV_S(col2im)(const geom *g, int64_t cg, const T *cols, T *dx)
{
    for (int64_t c = 0; c < cg; c++)
        for (int64_t ka = 0; ka < g->k[0]; ka++)
            for (int64_t kb = 0; kb < g->k[1]; kb++)
                for (int64_t kc = 0; kc < g->k[2]; kc++) {
                    const T *src = cols + (((c * g->k[0] + ka) * g->k[1] + kb) * g->k[2] + kc) * g->O;
                    int64_t lo, hi;
                    inner_range(g, kc, &lo, &hi);
                    const int64_t s2 = g->s[2], off = kc * g->d[2] - g->p[2];
                    for (int64_t oa = 0; oa < g->o[0]; oa++) {
                        const int64_t ia = oa * g->s[0] - g->p[0] + ka * g->d[0];
                        if (ia < 0 || ia >= g->l[0])
                            continue;
                        for (int64_t ob = 0; ob < g->o[1]; ob++) {
                            const int64_t ib = ob * g->s[1] - g->p[1] + kb * g->d[1];
                            if (ib < 0 || ib >= g->l[1])
                                continue;
                            const T *row = src + (oa * g->o[1] + ob) * g->o[2];
                            T *dst = dx + (c * g->l[0] + ia) * g->l[1] * g->l[2] + ib * g->l[2];
                            for (int64_t oc = lo; oc < hi; oc++)
                                dst[oc * s2 + off] += row[oc];
                        }
                    }
                }
}

static void TT_CONV_S(conv_fwd)(const geom *g, int64_t nb, int64_t cin, int64_t cout, int64_t groups, const T *x,
                                const T *w, const T *b, T *y)
{
    const int64_t cg = cin / groups, cog = cout / groups, kg = cg * g->K;
    const int pw = pointwise(g);
    T *cols = pw ? NULL : malloc((size_t)(kg * g->O) * sizeof(T));
    if (!pw && !cols)
        abort();
    for (int64_t n = 0; n < nb; n++)
        for (int64_t gr = 0; gr < groups; gr++) {
            const T *xb = x + (n * cin + gr * cg) * g->L;
            if (!pw)
                TT_CONV_S(im2col)(g, cg, xb, cols);
            T *yb = y + (n * cout + gr * cog) * g->O;
            for (int64_t oc = 0; oc < cog; oc++)
                for (int64_t i = 0; i < g->O; i++)
                    yb[oc * g->O + i] = b[gr * cog + oc];
            TT_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cog, (int)g->O, (int)kg, 1, w + gr * cog * kg,
                    (int)kg, pw ? xb : cols, (int)g->O, 1, yb, (int)g->O);
        }
    free(cols);
}

static void TT_CONV_S(conv_bwd_x)(const geom *g, int64_t nb, int64_t cin, int64_t cout, int64_t groups,
                                  const T *dy, const T *w, T *dx)
{
    const int64_t cg = cin / groups, cog = cout / groups, kg = cg * g->K;
    const int pw = pointwise(g);
    T *cols = pw ? NULL : malloc((size_t)(kg * g->O) * sizeof(T));
    if (!pw && !cols)
        abort();
    if (!pw)
        memset(dx, 0, (size_t)(nb * cin * g->L) * sizeof(T));
    for (int64_t n = 0; n < nb; n++)
        for (int64_t gr = 0; gr < groups; gr++) {
            T *dxb = dx + (n * cin + gr * cg) * g->L;
            TT_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)kg, (int)g->O, (int)cog, 1, w + gr * cog * kg,
                    (int)kg, dy + (n * cout + gr * cog) * g->O, (int)g->O, 0, pw ? dxb : cols, (int)g->O);
            if (!pw)
                TT_CONV_S(col2im)(g, cg, cols, dxb);
        }
    free(cols);
}

static void TT_CONV_S(conv_bwd_w)(const geom *g, int64_t nb, int64_t cin, int64_t cout, int64_t groups,
                                  int first, const T *x, const T *dy, T *dw, T *db)
{
    const int64_t cg = cin / groups, cog = cout / groups, kg = cg * g->K;
    const int pw = pointwise(g);
    T *cols = pw ? NULL : malloc((size_t)(kg * g->O) * sizeof(T));
    if (!pw && !cols)
        abort();
    if (first) {
        memset(dw, 0, (size_t)(cout * kg) * sizeof(T));
        memset(db, 0, (size_t)cout * sizeof(T));
    }
    for (int64_t n = 0; n < nb; n++)
        for (int64_t gr = 0; gr < groups; gr++) {
            const T *xb = x + (n * cin + gr * cg) * g->L, *dyb = dy + (n * cout + gr * cog) * g->O;
            if (!pw)
                TT_CONV_S(im2col)(g, cg, xb, cols);
            TT_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)cog, (int)kg, (int)g->O, 1, dyb, (int)g->O,
                    pw ? xb : cols, (int)g->O, 1, dw + gr * cog * kg, (int)kg);
            for (int64_t oc = 0; oc < cog; oc++) {
                double s = 0.0;
                for (int64_t i = 0; i < g->O; i++)
                    s += dyb[oc * g->O + i];
                db[gr * cog + oc] += (T)s;
            }
        }
    free(cols);
}

/* dy == NULL: forward (out = y, the window maxima); else backward (out = dx, each dy routed
 * to the first maximum of its window; a NaN wins as in torch). */
static void TT_CONV_S(max_pool)(const geom *g, int64_t planes, const T *x, const T *dy, T *out)
{
    if (dy)
        memset(out, 0, (size_t)(planes * g->L) * sizeof(T));
    for (int64_t pl = 0; pl < planes; pl++) {
        const T *xp = x + pl * g->L;
        int64_t o[3];
        for (o[0] = 0; o[0] < g->o[0]; o[0]++)
            for (o[1] = 0; o[1] < g->o[1]; o[1]++)
                for (o[2] = 0; o[2] < g->o[2]; o[2]++) {
                    T best = (T)-INFINITY;
                    int64_t bi = -1;
                    for (int64_t ka = 0; ka < g->k[0]; ka++) {
                        const int64_t ia = o[0] * g->s[0] - g->p[0] + ka * g->d[0];
                        if (ia < 0 || ia >= g->l[0])
                            continue;
                        for (int64_t kb = 0; kb < g->k[1]; kb++) {
                            const int64_t ib = o[1] * g->s[1] - g->p[1] + kb * g->d[1];
                            if (ib < 0 || ib >= g->l[1])
                                continue;
                            for (int64_t kc = 0; kc < g->k[2]; kc++) {
                                const int64_t ic = o[2] * g->s[2] - g->p[2] + kc * g->d[2];
                                if (ic < 0 || ic >= g->l[2])
                                    continue;
                                const int64_t idx = (ia * g->l[1] + ib) * g->l[2] + ic;
                                const T v = xp[idx];
                                if (bi < 0 || v > best || isnan(v))
                                    best = v, bi = idx;
                            }
                        }
                    }
                    const int64_t oi = pl * g->O + (o[0] * g->o[1] + o[1]) * g->o[2] + o[2];
                    if (!dy)
                        out[oi] = best;
                    else if (bi >= 0)
                        out[pl * g->L + bi] += dy[oi];
                }
    }
}

/* bwd = 0: y = window means of x; bwd = 1: x is dx (zeroed, then each window gets dy / div) */
static void TT_CONV_S(avg_pool)(const geom *g, int64_t planes, int cip, double divisor, int bwd, const T *x, T *y)
{
    T *dx = (T *)x;
    if (bwd)
        memset(dx, 0, (size_t)(planes * g->L) * sizeof(T));
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t o[3], st[3], en[3], pool;
        for (o[0] = 0; o[0] < g->o[0]; o[0]++)
            for (o[1] = 0; o[1] < g->o[1]; o[1]++)
                for (o[2] = 0; o[2] < g->o[2]; o[2]++) {
                    const int64_t cnt = window(g, o, st, en, &pool);
                    const int64_t oi = pl * g->O + (o[0] * g->o[1] + o[1]) * g->o[2] + o[2];
                    const double div = divisor > 0 ? divisor : cip ? (double)pool : (double)cnt;
                    if (cnt == 0) {
                        if (!bwd)
                            y[oi] = 0;
                        continue;
                    }
                    const double gv = bwd ? (double)y[oi] / div : 0.0;
                    double s = 0.0;
                    for (int64_t ia = st[0]; ia < en[0]; ia++)
                        for (int64_t ib = st[1]; ib < en[1]; ib++)
                            for (int64_t ic = st[2]; ic < en[2]; ic++) {
                                const int64_t idx = pl * g->L + (ia * g->l[1] + ib) * g->l[2] + ic;
                                if (bwd)
                                    dx[idx] += (T)gv;
                                else
                                    s += x[idx];
                            }
                    if (!bwd)
                        y[oi] = (T)(s / div);
                }
    }
}

/* Per-channel mean and M2 of the tile (two passes), merged into the running ones (Chan). */
static void TT_CONV_S(bn_stats)(int64_t nb, int64_t c, int64_t hw, int first, double na, const T *x, T *mean,
                                T *m2)
{
    const double nt = (double)(nb * hw);
    for (int64_t ch = 0; ch < c; ch++) {
        double s = 0.0, q = 0.0;
        for (int64_t n = 0; n < nb; n++) {
            const T *p = x + (n * c + ch) * hw;
            for (int64_t i = 0; i < hw; i++)
                s += p[i];
        }
        const double mb = s / nt;
        for (int64_t n = 0; n < nb; n++) {
            const T *p = x + (n * c + ch) * hw;
            for (int64_t i = 0; i < hw; i++) {
                const double d = p[i] - mb;
                q += d * d;
            }
        }
        if (first || na <= 0.0) {
            mean[ch] = (T)mb, m2[ch] = (T)q;
        } else {
            const double ma = mean[ch], delta = mb - ma, tot = na + nt;
            mean[ch] = (T)(ma + delta * (nt / tot));
            m2[ch] = (T)((double)m2[ch] + q + delta * delta * (na * nt / tot));
        }
    }
}

/* (mean, m2) over na values merged with a partial (mb, qb) over nb values (Chan); first: copy */
static void TT_CONV_S(bn_merge)(int64_t c, int first, double na, double nb, const T *mb, const T *qb, T *mean,
                                T *m2)
{
    for (int64_t ch = 0; ch < c; ch++) {
        if (first || na <= 0.0) {
            mean[ch] = mb[ch], m2[ch] = qb[ch];
            continue;
        }
        const double ma = mean[ch], delta = (double)mb[ch] - ma, tot = na + nb;
        mean[ch] = (T)(ma + delta * (nb / tot));
        m2[ch] = (T)((double)m2[ch] + (double)qb[ch] + delta * delta * (na * nb / tot));
    }
}

static void TT_CONV_S(bn_fwd)(int64_t nb, int64_t c, int64_t hw, const T *x, T *y, const T *mean, const T *rstd,
                              const T *w, const T *b)
{
    for (int64_t n = 0; n < nb; n++)
        for (int64_t ch = 0; ch < c; ch++) {
            const T *p = x + (n * c + ch) * hw;
            T *q = y + (n * c + ch) * hw;
            const T sc = rstd[ch] * w[ch], mu = mean[ch], bb = b[ch];
            for (int64_t i = 0; i < hw; i++)
                q[i] = (p[i] - mu) * sc + bb;
        }
}

static void TT_CONV_S(bn_bwd_stats)(int64_t nb, int64_t c, int64_t hw, int first, const T *dy, const T *x,
                                    const T *mean, const T *rstd, T *sdy, T *sdyx)
{
    for (int64_t ch = 0; ch < c; ch++) {
        double s = 0.0, sx = 0.0;
        const double mu = mean[ch];
        for (int64_t n = 0; n < nb; n++) {
            const T *pg = dy + (n * c + ch) * hw, *px = x + (n * c + ch) * hw;
            for (int64_t i = 0; i < hw; i++) {
                s += pg[i];
                sx += pg[i] * (px[i] - mu);
            }
        }
        sx *= rstd[ch];
        sdy[ch] = (T)(first ? s : sdy[ch] + s);
        sdyx[ch] = (T)(first ? sx : sdyx[ch] + sx);
    }
}

static void TT_CONV_S(bn_bwd_x)(int64_t nb, int64_t c, int64_t hw, double alpha, const T *dy, const T *x, T *dx,
                                const T *mean, const T *rstd, const T *w, const T *sdy, const T *sdyx)
{
    for (int64_t n = 0; n < nb; n++)
        for (int64_t ch = 0; ch < c; ch++) {
            const T *pg = dy + (n * c + ch) * hw, *px = x + (n * c + ch) * hw;
            T *pd = dx + (n * c + ch) * hw;
            const T r = rstd[ch], sc = w[ch] * r, mu = mean[ch];
            const T a = (T)(alpha * sdy[ch]), bx = (T)(alpha * sdyx[ch]);
            for (int64_t i = 0; i < hw; i++)
                pd[i] = sc * (pg[i] - a - (px[i] - mu) * r * bx);
        }
}

#undef T
#endif
