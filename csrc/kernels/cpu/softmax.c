/* softmax, log_softmax and fused cross-entropy kernels.
 *
 * A tile is viewed as (m, k, n) around the span axis (k); the row statistics live in
 * "reduced" buffers of m * n elements (row r = i * n + j).  The ops use the last axis
 * (n = 1), the bodies accept any n.
 *
 * Row statistics are kept as two numbers, mx (the row max) and s (the sum of exp(x - mx)),
 * accumulated online across the tiles of a row: a later tile with a larger max rescales
 * the running sum.  Probabilities are recomputed as exp(x - mx) / s (never through a
 * log-sum-exp, which would lose precision for logits of large magnitude in float32). */
#include <math.h>
#include "tt_cpu.h"

#define EXP(T, v) (sizeof(T) == 4 ? (T)expf((float)(v)) : (T)exp((double)(v)))
#define LOG(T, v) (sizeof(T) == 4 ? (T)logf((float)(v)) : (T)log((double)(v)))

/* Merge one tile's values of row (i, j) into the running (mx, s); first: overwrite. */
#define ROW_STATS(T, px, i, j, k, n, first, mxr, sr)                                   \
    do {                                                                               \
        T tm_ = px[((i) * (k)) * (n) + (j)];                                           \
        for (int64_t l_ = 1; l_ < (k); l_++) {                                         \
            T v_ = px[((i) * (k) + l_) * (n) + (j)];                                   \
            if (v_ > tm_ || isnan(v_))                                                 \
                tm_ = v_;                                                              \
        }                                                                              \
        T nm_ = tm_;                                                                   \
        double acc_ = 0.0;                                                             \
        if (!(first)) {                                                                \
            T om_ = (mxr);                                                             \
            if (om_ > nm_ || isnan(om_))                                               \
                nm_ = om_;                                                             \
            /* equal maxima (both -inf included) keep the running sum as it is */      \
            acc_ = (double)(sr) * (om_ == nm_ ? 1.0 : (double)EXP(T, om_ - nm_));      \
        }                                                                              \
        for (int64_t l_ = 0; l_ < (k); l_++)                                           \
            acc_ += (double)EXP(T, px[((i) * (k) + l_) * (n) + (j)] - nm_);            \
        (mxr) = nm_;                                                                   \
        (sr) = (T)acc_;                                                                \
    } while (0)

/* float32 fast paths for a contiguous row (n == 1: the op's last axis, as softmax over the
 * attention scores and cross-entropy over the vocabulary), vectorised: exp through tt_expf
 * (0 below -87.3, where expf underflows to denormals anyway), lane-wise max and double sums.
 * Rows holding a NaN or +inf take the generic code. */
static inline float expf_z(float v) { return v < -87.3f ? 0.0f : tt_expf(v); }

/* Row stats of k contiguous values merged into (*mxr, *sr); 0 (nothing written) when the
 * row or the running max holds a NaN or +inf (a NaN logit makes the sum NaN; so does a row
 * of -inf only, which the generic code also turns into NaN). */
TT_SIMD_CLONES static int row_stats_f32(const float *restrict x, int64_t k, int first, float *mxr, float *sr)
{
    float lane[16];
    for (int q = 0; q < 16; q++)
        lane[q] = -INFINITY;
    int64_t c = 0;
    for (; c + 16 <= k; c += 16)
        for (int q = 0; q < 16; q++)
            lane[q] = x[c + q] > lane[q] ? x[c + q] : lane[q];
    float nm = -INFINITY;
    for (; c < k; c++)
        nm = x[c] > nm ? x[c] : nm;
    for (int q = 0; q < 16; q++)
        nm = lane[q] > nm ? lane[q] : nm;
    double acc = 0.0;
    if (!first) {
        float om = *mxr;
        if (!(om == om))
            return 0;
        if (om > nm)
            nm = om;
        acc = (double)*sr * (om == nm ? 1.0 : (double)expf(om - nm));
    }
    if (nm == INFINITY)
        return 0;
    double dl[8] = {0};
    c = 0;
    for (; c + 8 <= k; c += 8)
        for (int q = 0; q < 8; q++)
            dl[q] += (double)expf_z(x[c + q] - nm);
    for (; c < k; c++)
        acc += (double)expf_z(x[c] - nm);
    for (int q = 0; q < 8; q++)
        acc += dl[q];
    if (!(acc == acc))
        return 0;
    *mxr = nm;
    *sr = (float)acc;
    return 1;
}

/* dx = exp(x - mr) / sr * g over k contiguous values (the target's -g is applied by the caller) */
TT_SIMD_CLONES static void row_softmax_grad_f32(const float *restrict x, float *restrict dx, int64_t k, float mr,
                                                float sr, float g)
{
    for (int64_t c = 0; c < k; c++)
        dx[c] = expf_z(x[c] - mr) / sr * g;
}

/* y = exp(x - mr) / sr over k contiguous values (softmax) or (x - mr) - log(sr) (log_softmax) */
TT_SIMD_CLONES static void row_softmax_f32(const float *restrict x, float *restrict y, int64_t k, float mr, float sr,
                                           int islog)
{
    if (islog) {
        const float lg = logf(sr);
        for (int64_t c = 0; c < k; c++)
            y[c] = (x[c] - mr) - lg;
    } else {
        for (int64_t c = 0; c < k; c++)
            y[c] = expf_z(x[c] - mr) / sr;
    }
}

/* sum over k contiguous values of g * exp(x - mr) / sr, in double (8 lanes) */
TT_SIMD_CLONES static double row_dot_softmax_f32(const float *restrict x, const float *restrict g, int64_t k, float mr,
                                                 float sr)
{
    double dl[8] = {0}, acc = 0.0;
    int64_t c = 0;
    for (; c + 8 <= k; c += 8)
        for (int q = 0; q < 8; q++)
            dl[q] += (double)g[c + q] * (double)(expf_z(x[c + q] - mr) / sr);
    for (; c < k; c++)
        acc += (double)g[c] * (double)(expf_z(x[c] - mr) / sr);
    for (int q = 0; q < 8; q++)
        acc += dl[q];
    return acc;
}

TT_SIMD_CLONES void tt_cpu_softmax_stats(const tt_args_softmax_stats *a, const void *x, void *mx, void *s)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    if (a->dtype == TT_F32 && n == 1) {
        const float *px = x;
        float *pm = mx, *ps = s;
        for (int64_t i = 0; i < m; i++)
            if (!row_stats_f32(px + i * k, k, (int)a->first, pm + i, ps + i))
                ROW_STATS(float, px, i, 0, k, 1, a->first, pm[i], ps[i]);
        return;
    }
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *pm = mx, *ps = s;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                ROW_STATS(T, px, i, j, k, n, a->first, pm[i * n + j], ps[i * n + j]);
    });
}

/* y = exp(x - mx) / s (softmax) or (x - mx) - log(s) (log_softmax) */
TT_SIMD_CLONES void tt_cpu_softmax_apply(const tt_args_softmax_apply *a, const void *x, void *y, const void *mx, const void *s)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    if (a->dtype == TT_F32 && n == 1) {
        const float *px = x, *pm = mx, *ps = s;
        for (int64_t i = 0; i < m; i++)
            row_softmax_f32(px + i * k, (float *)y + i * k, k, pm[i], ps[i], (int)a->islog);
        return;
    }
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pm = mx, *ps = s;
        T *py = y;
        for (int64_t i = 0; i < m; i++)
            for (int64_t l = 0; l < k; l++) {
                const T *src = px + (i * k + l) * n;
                T *dst = py + (i * k + l) * n;
                for (int64_t j = 0; j < n; j++) {
                    T mr = pm[i * n + j], sr = ps[i * n + j];
                    dst[j] = a->islog ? (src[j] - mr) - LOG(T, sr) : EXP(T, src[j] - mr) / sr;
                }
            }
    });
}

/* d = sum over the span of g * softmax(x) (softmax) or of g (log_softmax) */
TT_SIMD_CLONES void tt_cpu_softmax_bwd_dot(const tt_args_softmax_bwd_dot *a, const void *x, const void *g, const void *mx,
                            const void *s, void *d)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    if (a->dtype == TT_F32 && n == 1 && !a->islog) {
        const float *px = x, *pg = g, *pm = mx, *ps = s;
        float *pd = d;
        for (int64_t i = 0; i < m; i++)
            pd[i] = (float)((a->first ? 0.0 : (double)pd[i]) + row_dot_softmax_f32(px + i * k, pg + i * k, k, pm[i], ps[i]));
        return;
    }
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pg = g, *pm = mx, *ps = s;
        T *pd = d;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                const int64_t r = i * n + j;
                double acc = a->first ? 0.0 : (double)pd[r];
                if (a->islog) {
                    for (int64_t l = 0; l < k; l++)
                        acc += pg[(i * k + l) * n + j];
                } else {
                    T mr = pm[r], sr = ps[r];
                    for (int64_t l = 0; l < k; l++) {
                        const int64_t e = (i * k + l) * n + j;
                        acc += (double)pg[e] * (double)(EXP(T, px[e] - mr) / sr);
                    }
                }
                pd[r] = (T)acc;
            }
    });
}

/* softmax: dx = p * (g - d); log_softmax: dx = g - p * d; p = exp(x - mx) / s */
TT_SIMD_CLONES void tt_cpu_softmax_bwd(const tt_args_softmax_bwd *a, const void *x, const void *g, void *dx, const void *mx,
                        const void *s, const void *d)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    if (a->dtype == TT_F32 && n == 1) {
        const float *px = x, *pg = g, *pm = mx, *ps = s, *pd = d;
        float *pdx = dx;
        for (int64_t i = 0; i < m; i++) {
            const float *xr = px + i * k, *gr = pg + i * k;
            float *dr = pdx + i * k;
            const float mr = pm[i], sr = ps[i], dv = pd[i];
            if (a->islog)
                for (int64_t c = 0; c < k; c++)
                    dr[c] = gr[c] - expf_z(xr[c] - mr) / sr * dv;
            else
                for (int64_t c = 0; c < k; c++)
                    dr[c] = expf_z(xr[c] - mr) / sr * (gr[c] - dv);
        }
        return;
    }
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pg = g, *pm = mx, *ps = s, *pd = d;
        T *pdx = dx;
        for (int64_t i = 0; i < m; i++)
            for (int64_t l = 0; l < k; l++)
                for (int64_t j = 0; j < n; j++) {
                    const int64_t r = i * n + j, e = (i * k + l) * n + j;
                    T p = EXP(T, px[e] - pm[r]) / ps[r];
                    pdx[e] = a->islog ? pg[e] - p * pd[r] : p * (pg[e] - pd[r]);
                }
    });
}

/* Column offset of a tile along the span and whether it is the span's last tile. */
static inline void span_position(int64_t tile, int64_t vtile, int64_t ncols, int64_t *col0, int *last)
{
    int64_t vgrid = vtile > 0 ? (ncols + vtile - 1) / vtile : 1;
    if (vgrid < 1)
        vgrid = 1;
    int64_t t = tile % vgrid;
    if (t < 0)
        t += vgrid;
    *col0 = t * vtile;
    *last = t == vgrid - 1;
}


static inline int target_valid(int64_t t, int64_t ignore_index, int64_t ncols)
{
    return t != ignore_index && t >= 0 && t < ncols;
}

/* Fused cross-entropy forward over one tile of logits: online row stats (mx, s), and
 * loss = lse - x[target] per row, finished on the span's last tile (0 where the target is
 * ignored or out of range); w = 1 for a counted target, 0 otherwise.  A target is read only
 * when it falls inside this tile's columns. */
TT_SIMD_CLONES void tt_cpu_cross_entropy_fwd(const tt_args_cross_entropy_fwd *a, const void *x, const void *tgt, void *mx,
                              void *s, void *loss, void *w)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    int64_t col0;
    int last;
    span_position(a->tile, a->vtile, a->ncols, &col0, &last);
    const int64_t *pt = tgt;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *pm = mx, *ps = s, *pl = loss, *pw = w;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                const int64_t r = i * n + j, t = pt[r];
                const int valid = target_valid(t, a->ignore_index, a->ncols);
                if (!(sizeof(T) == 4 && n == 1 &&
                      row_stats_f32((const float *)px + i * k, k, (int)a->first, (float *)&pm[r], (float *)&ps[r])))
                    ROW_STATS(T, px, i, j, k, n, a->first, pm[r], ps[r]);
                if (a->first)
                    pl[r] = 0;
                pw[r] = valid ? (T)1 : (T)0;
                if (valid && t >= col0 && t - col0 < k)
                    pl[r] -= px[(i * k + (t - col0)) * n + j];  /* running -x[target] */
                if (last)
                    pl[r] = valid ? (pm[r] + pl[r]) + LOG(T, ps[r]) : (T)0;
            }
    });
}

/* dx = (softmax(x) - onehot(target)) * gr per row; zero rows where the target is ignored
 * (or out of range). */
TT_SIMD_CLONES void tt_cpu_cross_entropy_bwd(const tt_args_cross_entropy_bwd *a, const void *x, void *dx, const void *tgt,
                              const void *mx, const void *s, const void *gr)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    int64_t col0;
    int last;
    span_position(a->tile, a->vtile, a->ncols, &col0, &last);
    (void)last;
    const int64_t *pt = tgt;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pm = mx, *ps = s, *pg = gr;
        T *pdx = dx;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                const int64_t r = i * n + j, t = pt[r];
                if (!target_valid(t, a->ignore_index, a->ncols)) {
                    for (int64_t l = 0; l < k; l++)
                        pdx[(i * k + l) * n + j] = 0;
                    continue;
                }
                const T mr = pm[r], sr = ps[r], g = pg[r];
                if (sizeof(T) == 4 && n == 1 && mr == mr && mr != (T)INFINITY && mr != (T)-INFINITY) {
                    const float *xr = (const float *)px + i * k;
                    float *dr = (float *)pdx + i * k;
                    row_softmax_grad_f32(xr, dr, k, (float)mr, (float)sr, (float)g);
                    if (t >= col0 && t - col0 < k)
                        dr[t - col0] = (expf_z(xr[t - col0] - (float)mr) / (float)sr - 1.0f) * (float)g;
                    continue;
                }
                for (int64_t l = 0; l < k; l++) {
                    const int64_t e = (i * k + l) * n + j;
                    T p = EXP(T, px[e] - mr) / sr;
                    if (col0 + l == t)
                        p -= 1;
                    pdx[e] = p * g;
                }
            }
    });
}
