/* Layer norm and RMS norm over the last axis.  A tile of x is (m, n): m rows, n columns of
 * the last axis (which may be split into several tiles); row tiles (mean, rstd, the
 * backward's per-row sums) are (m,), column tiles (weight, bias and their gradients) are
 * (n,).  Sums over a tile accumulate in double; the expander (csrc/expand_norm.c) chains
 * the tiles of one reduction in order and sets `first` on the first of them. */
#include <math.h>
#include "tt_cpu.h"

/* Per-row mean and M2 = sum((x - mean)^2), merged across the tiles of a row with Chan et
 * al.'s pairwise update: the tile's own mean and M2 come from two passes over the tile, so
 * neither involves a difference of large sums. */
/* A row's mean mb and M2 m2b (doubles) from two passes over its n elements (T row[]): double
 * sums in 8 lanes, so that they vectorise. */
#define TT_ROW_MEAN_M2(row, n, mb, m2b)                   \
    do {                                                  \
        double acc[8] = {0};                              \
        int64_t j = 0;                                    \
        for (; j + 8 <= (n); j += 8)                      \
            for (int q = 0; q < 8; q++)                   \
                acc[q] += (row)[j + q];                   \
        double s_ = 0.0;                                  \
        for (; j < (n); j++)                              \
            s_ += (row)[j];                               \
        for (int q = 0; q < 8; q++)                       \
            s_ += acc[q];                                 \
        (mb) = s_ / (double)(n);                          \
        (m2b) = 0.0;                                      \
        for (int q = 0; q < 8; q++)                       \
            acc[q] = 0.0;                                 \
        for (j = 0; j + 8 <= (n); j += 8)                 \
            for (int q = 0; q < 8; q++) {                 \
                double d = (row)[j + q] - (mb);           \
                acc[q] += d * d;                          \
            }                                             \
        for (; j < (n); j++) {                            \
            double d = (row)[j] - (mb);                   \
            (m2b) += d * d;                               \
        }                                                 \
        for (int q = 0; q < 8; q++)                       \
            (m2b) += acc[q];                              \
    } while (0)

/* 1 / sqrt(alpha * s + eps), s clamped at 0 (variance or mean square -> inverse std) */
static inline double inv_std(double alpha, double s, double eps)
{
    double v = alpha * s;
    return 1.0 / sqrt((v > 0.0 ? v : 0.0) + eps);
}

TT_SIMD_CLONES void tt_cpu_layer_norm_stats(const tt_args_layer_norm_stats *a, const void *x, void *mean, void *m2)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *pmean = mean, *pm2 = m2;
        for (int64_t i = 0; i < m; i++) {
            const T *row = px + i * n;
            double mb, m2b;
            TT_ROW_MEAN_M2(row, n, mb, m2b);
            if (a->first || a->na <= 0.0) {
                pmean[i] = (T)mb;
                pm2[i] = (T)m2b;
            } else {
                double na = a->na, nb = (double)n, nt = na + nb;
                double ma = pmean[i], delta = mb - ma;
                pmean[i] = (T)(ma + delta * (nb / nt));
                pm2[i] = (T)((double)pm2[i] + m2b + delta * delta * (na * nb / nt));
            }
        }
    });
}

/* Per-row sum of squares. */
TT_SIMD_CLONES void tt_cpu_rms_norm_stats(const tt_args_rms_norm_stats *a, const void *x, void *ss)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *pss = ss;
        for (int64_t i = 0; i < m; i++) {
            const T *row = px + i * n;
            double s = 0.0;
            for (int64_t j = 0; j < n; j++)
                s += (double)row[j] * row[j];
            pss[i] = (T)(a->first ? s : (double)pss[i] + s);
        }
    });
}

/* s = 1 / sqrt(alpha * s + eps), in place (variance or mean square -> inverse std). */
TT_SIMD_CLONES void tt_cpu_norm_rstd(const tt_args_norm_rstd *a, void *s)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        T *p = s;
        for (int64_t i = 0; i < a->n; i++)
            p[i] = (T)inv_std(a->alpha, (double)p[i], a->eps);
    });
}

/* y = (x - mean) * rstd * w + b */
TT_SIMD_CLONES void tt_cpu_layer_norm_fwd(const tt_args_layer_norm_fwd *a, const void *x, void *y, const void *mean,
                           const void *rstd, const void *w, const void *b)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pmean = mean, *prstd = rstd, *pw = w, *pb = b;
        T *py = y;
        for (int64_t i = 0; i < m; i++) {
            const T mu = pmean[i], r = prstd[i];
            for (int64_t j = 0; j < n; j++)
                py[i * n + j] = (px[i * n + j] - mu) * r * pw[j] + pb[j];
        }
    });
}

/* y = x * rstd * w */
TT_SIMD_CLONES void tt_cpu_rms_norm_fwd(const tt_args_rms_norm_fwd *a, const void *x, void *y, const void *rstd, const void *w)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *prstd = rstd, *pw = w;
        T *py = y;
        for (int64_t i = 0; i < m; i++) {
            const T r = prstd[i];
            for (int64_t j = 0; j < n; j++)
                py[i * n + j] = px[i * n + j] * r * pw[j];
        }
    });
}

/* A whole row per tile: layer_norm_stats, norm_rstd (alpha = 1 / n) and layer_norm_fwd in one
 * task, each value rounded to T where the three kernels store it (so the results are the same). */
TT_SIMD_CLONES void tt_cpu_layer_norm_row(const tt_args_layer_norm_row *a, const void *x, void *y, void *mean,
                                          void *rstd, const void *w, const void *b)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pw = w, *pb = b;
        T *py = y, *pmean = mean, *prstd = rstd;
        for (int64_t i = 0; i < m; i++) {
            const T *row = px + i * n;
            double mb, m2b;
            TT_ROW_MEAN_M2(row, n, mb, m2b);
            const T mu = (T)mb, r = (T)inv_std(1.0 / (double)n, (double)(T)m2b, a->eps);
            pmean[i] = mu;
            prstd[i] = r;
            for (int64_t j = 0; j < n; j++)
                py[i * n + j] = (row[j] - mu) * r * pw[j] + pb[j];
        }
    });
}

/* A whole row per tile: rms_norm_stats, norm_rstd (alpha = 1 / n) and rms_norm_fwd in one task. */
TT_SIMD_CLONES void tt_cpu_rms_norm_row(const tt_args_rms_norm_row *a, const void *x, void *y, void *rstd,
                                        const void *w)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pw = w;
        T *py = y, *prstd = rstd;
        for (int64_t i = 0; i < m; i++) {
            const T *row = px + i * n;
            double s = 0.0;
            for (int64_t j = 0; j < n; j++)
                s += (double)row[j] * row[j];
            const T r = (T)inv_std(1.0 / (double)n, (double)(T)s, a->eps);
            prstd[i] = r;
            for (int64_t j = 0; j < n; j++)
                py[i * n + j] = row[j] * r * pw[j];
        }
    });
}

/* s = x + r, count elements of dtype (rounded to T): the residual add of the fused kernels below. */
static void add_rows(int64_t dtype, const void *x, const void *r, void *s, int64_t count)
{
    TT_FLOAT_DISPATCH(dtype, {
        const T *px = x, *pr = r;
        T *ps = s;
        for (int64_t i = 0; i < count; i++)
            ps[i] = px[i] + pr[i];
    });
}

/* s = x + r (rounded to T), then layer_norm_row of s. */
TT_SIMD_CLONES void tt_cpu_add_layer_norm_row(const tt_args_add_layer_norm_row *a, const void *x, const void *r,
                                              void *s, void *y, void *mean, void *rstd, const void *w,
                                              const void *b)
{
    const int64_t m = a->m, n = a->n;
    add_rows(a->dtype, x, r, s, m * n);
    const tt_args_layer_norm_row ln = {.dtype = a->dtype, .m = m, .n = n, .first = a->first, .eps = a->eps};
    tt_cpu_layer_norm_row(&ln, s, y, mean, rstd, w, b);
}

/* s = x + r (rounded to T), then rms_norm_row of s. */
TT_SIMD_CLONES void tt_cpu_add_rms_norm_row(const tt_args_add_rms_norm_row *a, const void *x, const void *r,
                                            void *s, void *y, void *rstd, const void *w)
{
    const int64_t m = a->m, n = a->n;
    add_rows(a->dtype, x, r, s, m * n);
    const tt_args_rms_norm_row rn = {.dtype = a->dtype, .m = m, .n = n, .first = a->first, .eps = a->eps};
    tt_cpu_rms_norm_row(&rn, s, y, rstd, w);
}

/* Per-row sums of the backward: with g = dy * w and xhat = (x - mean) * rstd,
 * ra += alpha * sum(g), rb += alpha * sum(g * xhat)  (alpha = 1 / C: the row means). */
TT_SIMD_CLONES void tt_cpu_layer_norm_bwd_rows(const tt_args_layer_norm_bwd_rows *a, const void *dy, const void *x,
                                const void *mean, const void *rstd, void *ra, void *rb, const void *w)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pdy = dy, *px = x, *pmean = mean, *prstd = rstd, *pw = w;
        T *pa = ra, *pb = rb;
        for (int64_t i = 0; i < m; i++) {
            const double mu = pmean[i], r = prstd[i];
            double la[8] = {0}, lb[8] = {0}, sa = 0.0, sb = 0.0; /* 8 lanes: vectorises */
            int64_t j = 0;
            for (; j + 8 <= n; j += 8)
                for (int q = 0; q < 8; q++) {
                    double g = (double)pdy[i * n + j + q] * pw[j + q];
                    la[q] += g;
                    lb[q] += g * ((px[i * n + j + q] - mu) * r);
                }
            for (; j < n; j++) {
                double g = (double)pdy[i * n + j] * pw[j];
                sa += g;
                sb += g * ((px[i * n + j] - mu) * r);
            }
            for (int q = 0; q < 8; q++) {
                sa += la[q];
                sb += lb[q];
            }
            pa[i] = (T)((a->first ? 0.0 : (double)pa[i]) + a->alpha * sa);
            pb[i] = (T)((a->first ? 0.0 : (double)pb[i]) + a->alpha * sb);
        }
    });
}

/* dx = rstd * (dy * w - ra - xhat * rb) */
TT_SIMD_CLONES void tt_cpu_layer_norm_bwd_x(const tt_args_layer_norm_bwd_x *a, const void *dy, const void *x, void *dx,
                             const void *mean, const void *rstd, const void *ra, const void *rb, const void *w)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pdy = dy, *px = x, *pmean = mean, *prstd = rstd, *pa = ra, *pb = rb, *pw = w;
        T *pdx = dx;
        for (int64_t i = 0; i < m; i++) {
            const T mu = pmean[i], r = prstd[i], ai = pa[i], bi = pb[i];
            for (int64_t j = 0; j < n; j++) {
                T xhat = (px[i * n + j] - mu) * r;
                pdx[i * n + j] = r * (pdy[i * n + j] * pw[j] - ai - xhat * bi);
            }
        }
    });
}

/* Column sums over the rows: dw += sum(dy * xhat), db += sum(dy).  Columns go in chunks of
 * NCHUNK so the sums accumulate in double on the stack. */
#define NCHUNK 256
TT_SIMD_CLONES void tt_cpu_layer_norm_bwd_w(const tt_args_layer_norm_bwd_w *a, const void *dy, const void *x,
                             const void *mean, const void *rstd, void *dw, void *db)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pdy = dy, *px = x, *pmean = mean, *prstd = rstd;
        T *pdw = dw, *pdb = db;
        for (int64_t j0 = 0; j0 < n; j0 += NCHUNK) {
            const int64_t nc = n - j0 < NCHUNK ? n - j0 : NCHUNK;
            double sw[NCHUNK], sb[NCHUNK];
            for (int64_t j = 0; j < nc; j++)
                sw[j] = sb[j] = 0.0;
            for (int64_t i = 0; i < m; i++) {
                const double mu = pmean[i], r = prstd[i];
                const T *gr = pdy + i * n + j0, *xr = px + i * n + j0;
                for (int64_t j = 0; j < nc; j++) {
                    sw[j] += (double)gr[j] * ((xr[j] - mu) * r);
                    sb[j] += gr[j];
                }
            }
            for (int64_t j = 0; j < nc; j++) {
                pdw[j0 + j] = (T)((a->first ? 0.0 : (double)pdw[j0 + j]) + sw[j]);
                pdb[j0 + j] = (T)((a->first ? 0.0 : (double)pdb[j0 + j]) + sb[j]);
            }
        }
    });
}

/* rb += alpha * sum(dy * w * xhat) with xhat = x * rstd (alpha = 1 / C). */
TT_SIMD_CLONES void tt_cpu_rms_norm_bwd_rows(const tt_args_rms_norm_bwd_rows *a, const void *dy, const void *x,
                              const void *rstd, void *rb, const void *w)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pdy = dy, *px = x, *prstd = rstd, *pw = w;
        T *pb = rb;
        for (int64_t i = 0; i < m; i++) {
            double s = 0.0;
            for (int64_t j = 0; j < n; j++)
                s += (double)pdy[i * n + j] * pw[j] * px[i * n + j];
            s *= (double)prstd[i];
            pb[i] = (T)((a->first ? 0.0 : (double)pb[i]) + a->alpha * s);
        }
    });
}

/* dx = rstd * (dy * w - xhat * rb) */
TT_SIMD_CLONES void tt_cpu_rms_norm_bwd_x(const tt_args_rms_norm_bwd_x *a, const void *dy, const void *x, void *dx,
                           const void *rstd, const void *rb, const void *w)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pdy = dy, *px = x, *prstd = rstd, *pb = rb, *pw = w;
        T *pdx = dx;
        for (int64_t i = 0; i < m; i++) {
            const T r = prstd[i], bi = pb[i];
            for (int64_t j = 0; j < n; j++)
                pdx[i * n + j] = r * (pdy[i * n + j] * pw[j] - px[i * n + j] * r * bi);
        }
    });
}

/* dw += sum over rows of dy * xhat (double sums, columns in chunks as above) */
TT_SIMD_CLONES void tt_cpu_rms_norm_bwd_w(const tt_args_rms_norm_bwd_w *a, const void *dy, const void *x, const void *rstd,
                           void *dw)
{
    const int64_t m = a->m, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pdy = dy, *px = x, *prstd = rstd;
        T *pdw = dw;
        for (int64_t j0 = 0; j0 < n; j0 += NCHUNK) {
            const int64_t nc = n - j0 < NCHUNK ? n - j0 : NCHUNK;
            double sw[NCHUNK];
            for (int64_t j = 0; j < nc; j++)
                sw[j] = 0.0;
            for (int64_t i = 0; i < m; i++) {
                const double r = prstd[i];
                const T *gr = pdy + i * n + j0, *xr = px + i * n + j0;
                for (int64_t j = 0; j < nc; j++)
                    sw[j] += (double)gr[j] * xr[j] * r;
            }
            for (int64_t j = 0; j < nc; j++)
                pdw[j0 + j] = (T)((a->first ? 0.0 : (double)pdw[j0 + j]) + sw[j]);
        }
    });
}
