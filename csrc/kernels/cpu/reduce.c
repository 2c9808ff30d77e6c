/* Reductions and broadcasts along one axis of a tile viewed as (m, k, n), row-major.
 * sum_axis and sum_all also take float16/bfloat16 x: their y is then the float32
 * accumulator (an `acc` buffer, C = float), so the sum over every tile rounds once, when
 * the op casts it back to the half type. */
#include <math.h>
#include "tt_cpu.h"

/* Reductions of a contiguous run (the reduced axis innermost: n == 1) keep TT_LANES independent
 * partial results, so that the compiler vectorises them; the lanes are combined in a fixed order
 * (results do not depend on the machine).  Sums add blocks of TT_SUM_BLOCK elements in lanes of
 * type A (float for float32 and the half types: TT_SUM_BLOCK / TT_LANES = 64 additions per lane;
 * double lanes convert every element, which costs a core more than memory delivers) and the
 * block sums in double. */
#define TT_LANES 16
#define TT_SUM_BLOCK 1024
/* out = the sum over IDX = 0 .. cnt - 1 of EXPR (an expression of type A that names IDX) */
#define TT_SUM_RUN_OF(A, IDX, EXPR, cnt, out)                                                          \
    do {                                                                                               \
        double d_[TT_LANES] = {0}, s_ = 0.0;                                                           \
        int64_t q_ = 0;                                                                                \
        while (q_ + TT_LANES <= (cnt)) {                                                               \
            const int64_t e_ = (cnt) - q_ > TT_SUM_BLOCK ? q_ + TT_SUM_BLOCK : (cnt);                  \
            A l_[TT_LANES] = {0};                                                                      \
            for (; q_ + TT_LANES <= e_; q_ += TT_LANES)                                                \
                for (int r_ = 0; r_ < TT_LANES; r_++) {                                                \
                    const int64_t IDX = q_ + r_;                                                       \
                    l_[r_] += (EXPR);                                                                  \
                }                                                                                      \
            for (int r_ = 0; r_ < TT_LANES; r_++)                                                      \
                d_[r_] += (double)l_[r_];                                                              \
        }                                                                                              \
        for (int r_ = 0; r_ < TT_LANES; r_++)                                                          \
            s_ += d_[r_];                                                                              \
        for (; q_ < (cnt); q_++) {                                                                     \
            const int64_t IDX = q_;                                                                    \
            s_ += (double)(EXPR);                                                                      \
        }                                                                                              \
        (out) = s_;                                                                                    \
    } while (0)
#define TT_SUM_RUN(p, cnt, out) TT_SUM_RUN_OF(__typeof__(TT_LD((p)[0])), q_i_, TT_LD((p)[q_i_]), cnt, out)
/* best over a contiguous run of cnt >= 1 elements: v replaces best when v OP best or v is NaN
 * (a NaN, once there, stays).  Two 32-byte GCC vectors of lanes, the select as compare + bit
 * blend: this vectorises where `?:` on scalars does not (a wider vector type than the machine's
 * is lowered to scalar code). */
#define TT_VBYTES 32
#define TT_EXTREME_STEP(V, M, v, l, OP)                                                                \
    do {                                                                                               \
        M s_ = ((v) OP (l)) | ((v) != (v));                                                            \
        (l) = (V)(((M)(v) & s_) | ((M)(l) & ~s_));                                                     \
    } while (0)
#define TT_EXTREME_RUN(T, p, cnt, OP, out)                                                             \
    do {                                                                                               \
        typedef T V_ __attribute__((vector_size(TT_VBYTES)));                                          \
        typedef __typeof__((V_){0} > (V_){0}) M_;                                                      \
        enum { W_ = TT_VBYTES / sizeof(T) };                                                           \
        T b_ = (p)[0];                                                                                 \
        V_ l0_ = (V_){0} + b_, l1_ = l0_;                                                              \
        int64_t q_ = 0;                                                                                \
        for (; q_ + 2 * W_ <= (cnt); q_ += 2 * W_) {                                                   \
            V_ v0_, v1_;                                                                               \
            memcpy(&v0_, (p) + q_, sizeof v0_);                                                        \
            memcpy(&v1_, (p) + q_ + W_, sizeof v1_);                                                   \
            TT_EXTREME_STEP(V_, M_, v0_, l0_, OP);                                                     \
            TT_EXTREME_STEP(V_, M_, v1_, l1_, OP);                                                     \
        }                                                                                              \
        for (int r_ = 0; r_ < W_; r_++) {                                                              \
            b_ = (l0_[r_] OP b_ || l0_[r_] != l0_[r_]) ? l0_[r_] : b_;                                 \
            b_ = (l1_[r_] OP b_ || l1_[r_] != l1_[r_]) ? l1_[r_] : b_;                                 \
        }                                                                                              \
        for (; q_ < (cnt); q_++)                                                                       \
            b_ = ((p)[q_] OP b_ || (p)[q_] != (p)[q_]) ? (p)[q_] : b_;                                 \
        (out) = b_;                                                                                    \
    } while (0)

/* Reductions along a strided axis (n > 1) go over row blocks of TT_JBLOCK results. */
#define TT_JBLOCK 2048

/* max_axis / min_axis along the span (m, k, n): y = the extreme over k (OP is > or <); NaN
 * propagates; `first` overwrites y. */
#define TT_EXTREME_AXIS(OP)                                                                            \
    for (int64_t i = 0; i < m; i++) {                                                                  \
        T *row = py + i * n;                                                                           \
        if (n == 1) { /* a contiguous run */                                                           \
            T best;                                                                                    \
            TT_EXTREME_RUN(T, px + i * k, k, OP, best);                                                \
            if (a->first || best OP row[0] || best != best)                                            \
                row[0] = best;                                                                         \
            continue;                                                                                  \
        }                                                                                              \
        for (int64_t j0 = 0; j0 < n; j0 += TT_JBLOCK) { /* a block of row stays in cache over k */   \
            const int64_t jn = n - j0 < TT_JBLOCK ? n : j0 + TT_JBLOCK;                                \
            for (int64_t j = j0; a->first && j < jn; j++)                                              \
                row[j] = px[i * k * n + j];                                                            \
            for (int64_t l = a->first ? 1 : 0; l < k; l++) {                                           \
                const T *src = px + (i * k + l) * n;                                                   \
                for (int64_t j = j0; j < jn; j++) {                                                    \
                    T v_ = src[j], r_ = row[j];                                                        \
                    row[j] = ((v_ OP r_) | (v_ != v_)) ? v_ : r_;                                      \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }

TT_SIMD_CLONES void tt_cpu_sum_axis(const tt_args_sum_axis *a, const void *x, void *y)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        C *py = y; /* T for float32/float64; the float32 accumulator for the half types */
        for (int64_t i = 0; i < m; i++) {
            C *row = py + i * n;
            if (a->first)
                for (int64_t j = 0; j < n; j++)
                    row[j] = 0;
            if (n == 1) {
                double acc;
                TT_SUM_RUN(px + i * k, k, acc);
                row[0] += (C)(a->alpha * acc);
            } else {
                for (int64_t l = 0; l < k; l++) {
                    const T *src = px + (i * k + l) * n;
                    C alpha = (C)a->alpha;
                    for (int64_t j = 0; j < n; j++)
                        row[j] += alpha * TT_LD(src[j]);
                }
            }
        }
    });
}

TT_SIMD_CLONES void tt_cpu_max_axis(const tt_args_max_axis *a, const void *x, void *y)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        TT_EXTREME_AXIS(>);
    });
}

TT_SIMD_CLONES void tt_cpu_add_bcast(const tt_args_add_bcast *a, const void *x, void *y, const void *b)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pb = b;
        T *py = y, alpha = (T)a->alpha, beta = (T)a->beta;
        for (int64_t i = 0; i < m; i++)
            for (int64_t l = 0; l < k; l++) {
                const T *src = px + (i * k + l) * n, *brow = pb + i * n;
                T *dst = py + (i * k + l) * n;
                for (int64_t j = 0; j < n; j++)
                    dst[j] = alpha * src[j] + beta * brow[j];
            }
    });
}

TT_SIMD_CLONES void tt_cpu_sum_all(const tt_args_sum_all *a, const void *x, void *y)
{
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        C *py = y; /* the float32 accumulator for the half types */
        double acc;
        TT_SUM_RUN(px, a->nx, acc);
        double prev = a->beta == 0.0 ? 0.0 : a->beta * (double)py[0];
        py[0] = (C)(prev + a->alpha * acc);
    });
}

TT_SIMD_CLONES void tt_cpu_bcast(const tt_args_bcast *a, void *y, const void *b)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_ANY_FLOAT_DISPATCH(a->dtype, {
        const T *pb = b;
        T *py = y;
        C alpha = (C)a->alpha;
        for (int64_t i = 0; i < m; i++)
            for (int64_t l = 0; l < k; l++) {
                T *dst = py + (i * k + l) * n;
                for (int64_t j = 0; j < n; j++)
                    dst[j] = TT_ST(T, alpha * TT_LD(pb[i * n + j]));
            }
    });
}

/* ---- reductions of tiletrain/ops/reduce.py (kernels.def `# --- reductions`) ---- */

TT_SIMD_CLONES void tt_cpu_min_axis(const tt_args_min_axis *a, const void *x, void *y)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        TT_EXTREME_AXIS(<);
    });
}

/* v replaces best: strictly better, or the first NaN (torch: NaN is the extreme, first wins). */
#define TT_ARG_BETTER(v, best, ismin) \
    (isnan(v) ? !isnan(best) : !isnan(best) && ((ismin) ? (v) < (best) : (v) > (best)))

/* arg_axis / arg_carry: ci == NULL: index = koff + l; else index = (koff + l) * inner + ci. */
static void arg_reduce(int dtype, int64_t m, int64_t k, int64_t n, int64_t first, int64_t koff, int64_t inner,
                       int64_t ismin, const void *x, const int64_t *ci, void *v, int64_t *idx)
{
    TT_FLOAT_DISPATCH(dtype, {
        const T *px = x;
        T *pv = v;
        if (n == 1) { /* along a contiguous run (the last axis: greedy decoding's argmax over the
                       * vocabulary): the best so far in registers, 5x faster */
            for (int64_t i = 0; i < m; i++) {
                const T *src = px + i * k;
                const int64_t *csrc = ci ? ci + i * k : NULL;
                int64_t l = first ? 1 : 0, bl = first ? 0 : -1;
                T best = first ? src[0] : pv[i];
                for (; l < k && !isnan(best); l++) { /* a NaN wins and stays */
                    const T x = src[l];
                    if (isnan(x) || (ismin ? x < best : x > best)) {
                        best = x;
                        bl = l;
                    }
                }
                pv[i] = best;
                if (bl >= 0)
                    idx[i] = csrc ? (koff + bl) * inner + csrc[bl] : koff + bl;
            }
            return;
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t l = 0; l < k; l++) {
                const T *src = px + (i * k + l) * n;
                const int64_t *csrc = ci ? ci + (i * k + l) * n : NULL;
                for (int64_t j = 0; j < n; j++) {
                    int64_t r = i * n + j;
                    if ((first && l == 0) || TT_ARG_BETTER(src[j], pv[r], ismin)) {
                        pv[r] = src[j];
                        idx[r] = csrc ? (koff + l) * inner + csrc[j] : koff + l;
                    }
                }
            }
    });
}

TT_SIMD_CLONES void tt_cpu_arg_axis(const tt_args_arg_axis *a, const void *x, void *v, void *i)
{
    arg_reduce(a->dtype, a->m, a->k, a->n, a->first, a->koff, 1, a->ismin, x, NULL, v, i);
}

TT_SIMD_CLONES void tt_cpu_arg_carry(const tt_args_arg_carry *a, const void *x, const void *ci, void *v, void *i)
{
    arg_reduce(a->dtype, a->m, a->k, a->n, a->first, a->koff, a->inner, a->ismin, x, ci, v, i);
}

TT_SIMD_CLONES void tt_cpu_arg_scatter(const tt_args_arg_scatter *a, void *dx, const void *i, const void *g)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    const int64_t *pi = i;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pg = g;
        T *pd = dx;
        for (int64_t r = 0; r < m; r++)
            for (int64_t l = 0; l < k; l++)
                for (int64_t j = 0; j < n; j++)
                    pd[(r * k + l) * n + j] = pi[r * n + j] == a->koff + l ? pg[r * n + j] : (T)0;
    });
}

TT_SIMD_CLONES void tt_cpu_sqdev_axis(const tt_args_sqdev_axis *a, const void *x, const void *mu, void *y)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pm = mu;
        T *py = y;
        for (int64_t i = 0; i < m; i++) {
            if (n == 1) { /* a contiguous run */
                const T *src = px + i * k;
                const double c = (double)pm[i];
                double acc;
                TT_SUM_RUN_OF(double, q, ((double)src[q] - c) * ((double)src[q] - c), k, acc);
                py[i] = (T)((a->first ? 0.0 : (double)py[i]) + a->alpha * acc);
                continue;
            }
            for (int64_t j0 = 0; j0 < n; j0 += TT_JBLOCK) {
                const int64_t jn = n - j0 < TT_JBLOCK ? n : j0 + TT_JBLOCK;
                double acc[TT_JBLOCK] = {0};
                const T *mrow = pm + i * n;
                for (int64_t l = 0; l < k; l++) {
                    const T *src = px + (i * k + l) * n;
                    for (int64_t j = j0; j < jn; j++) {
                        const double d = (double)src[j] - (double)mrow[j];
                        acc[j - j0] += d * d;
                    }
                }
                for (int64_t j = j0; j < jn; j++)
                    py[i * n + j] = (T)((a->first ? 0.0 : (double)py[i * n + j]) + a->alpha * acc[j - j0]);
            }
        }
    });
}

#define TT_EXP_BLOCK 1024
#define TT_EXP(T, v) (sizeof(T) == 4 ? (T)expf((float)(v)) : (T)exp((double)(v)))

/* y (+)= sum over k of exp(x - mx), mx read as a reduced operand (logsumexp's second pass) */
TT_SIMD_CLONES void tt_cpu_expsum_axis(const tt_args_expsum_axis *a, const void *x, const void *mx, void *y)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pm = mx;
        T *py = y;
        for (int64_t i = 0; i < m; i++) {
            T *row = py + i * n;
            const T *mrow = pm + i * n;
            for (int64_t j = 0; a->first && j < n; j++)
                row[j] = 0;
            if (n == 1) { /* a contiguous run: exp of a block into e (a loop that vectorises), summed */
                const T *src = px + i * k, c = mrow[0];
                double acc = 0.0;
                for (int64_t q = 0; q < k; q += TT_EXP_BLOCK) {
                    T e[TT_EXP_BLOCK];
                    const int64_t len = k - q < TT_EXP_BLOCK ? k - q : TT_EXP_BLOCK;
                    double part;
                    for (int64_t l = 0; l < len; l++)
                        e[l] = TT_EXP(T, src[q + l] - c);
                    TT_SUM_RUN(e, len, part);
                    acc += part;
                }
                row[0] = (T)((double)row[0] + acc);
                continue;
            }
            for (int64_t l = 0; l < k; l++) {
                const T *src = px + (i * k + l) * n;
                for (int64_t j = 0; j < n; j++)
                    row[j] += TT_EXP(T, src[j] - mrow[j]);
            }
        }
    });
}

TT_SIMD_CLONES void tt_cpu_eq_mask(const tt_args_eq_mask *a, const void *x, const void *v, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pv = v;
        T *py = y;
        for (int64_t e = 0; e < a->n; e++)
            py[e] = px[e] == pv[e] ? (T)1 : (T)0;
    });
}

TT_SIMD_CLONES void tt_cpu_lse_finish(const tt_args_lse_finish *a, const void *mx, const void *s, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pm = mx, *ps = s;
        T *py = y;
        for (int64_t e = 0; e < a->n; e++)
            py[e] = isinf(pm[e]) ? pm[e] : pm[e] + log(ps[e]); /* all -inf: -inf; a +inf: +inf */
    });
}

static inline double pnorm_term(double v, double p)
{
    v = fabs(v);
    return p == 2.0 ? v * v : p == 1.0 ? v : p == 0.0 ? (double)(v != 0.0) : pow(v, p);
}

TT_SIMD_CLONES void tt_cpu_pnorm_axis(const tt_args_pnorm_axis *a, const void *x, void *y)
{
    const int64_t m = a->m, k = a->k, n = a->n;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x;
        T *py = y;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0.0;
                for (int64_t l = 0; l < k; l++)
                    acc += pnorm_term((double)px[(i * k + l) * n + j], a->p);
                py[i * n + j] = (T)((a->first ? 0.0 : (double)py[i * n + j]) + acc);
            }
    });
}

TT_SIMD_CLONES void tt_cpu_pnorm_root(const tt_args_pnorm_root *a, const void *s, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *ps = s;
        T *py = y;
        for (int64_t e = 0; e < a->n; e++)
            py[e] = a->p == 0.0 ? ps[e] : a->p == 1.0 ? ps[e] : a->p == 2.0 ? sqrt(ps[e]) : pow(ps[e], 1.0 / a->p);
    });
}

TT_SIMD_CLONES void tt_cpu_pnorm_bwd(const tt_args_pnorm_bwd *a, const void *x, const void *out, const void *g, void *dx)
{
    const double p = a->p;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *po = out, *pg = g;
        T *pd = dx;
        for (int64_t e = 0; e < a->n; e++) {
            double v = px[e], o = po[e], sg = (v > 0) - (v < 0), r;
            if (p == 0.0 || o == 0.0)
                r = 0.0;
            else if (p == 1.0)
                r = sg;
            else if (p == 2.0)
                r = v / o;
            else
                r = sg * pow(fabs(v), p - 1.0) / pow(o, p - 1.0);
            pd[e] = (T)(r * (double)pg[e]);
        }
    });
}

TT_SIMD_CLONES void tt_cpu_absdiff(const tt_args_absdiff *a, const void *pa, const void *pb, void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *u = pa, *w = pb;
        T *py = y;
        for (int64_t e = 0; e < a->n; e++)
            py[e] = fabs(u[e] - w[e]);
    });
}

TT_SIMD_CLONES void tt_cpu_absdiff_bwd(const tt_args_absdiff_bwd *a, const void *pa, const void *pb, const void *g, void *dx)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *u = pa, *w = pb, *pg = g;
        T *pd = dx;
        for (int64_t e = 0; e < a->n; e++) {
            T d = u[e] - w[e];
            pd[e] = (T)(a->alpha * (double)((d > 0) - (d < 0)) * (double)pg[e]);
        }
    });
}

/* softplus(-x) = log1p(exp(-|x|)) + max(-x, 0), without overflow */
static inline double softplus_neg(double x) { return log1p(exp(-fabs(x))) + (x < 0 ? -x : 0.0); }

TT_SIMD_CLONES void tt_cpu_bce_logits(const tt_args_bce_logits *a, const void *x, const void *t, const void *w, const void *pw,
                       void *y)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pt = t, *pW = w, *pP = pw;
        T *py = y;
        for (int64_t e = 0; e < a->n; e++) {
            double xv = px[e], tv = pt[e], lw = 1.0 + ((double)pP[e] - 1.0) * tv;
            py[e] = (T)((double)pW[e] * ((1.0 - tv) * xv + lw * softplus_neg(xv)));
        }
    });
}

TT_SIMD_CLONES void tt_cpu_bce_logits_bwd(const tt_args_bce_logits_bwd *a, const void *x, const void *t, const void *w,
                           const void *pw, const void *g, void *dx, void *dt)
{
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *px = x, *pt = t, *pW = w, *pP = pw, *pg = g;
        T *pdx = dx, *pdt = dt;
        for (int64_t e = 0; e < a->n; e++) {
            double xv = px[e], tv = pt[e], pv = pP[e], lw = 1.0 + (pv - 1.0) * tv;
            double sig = xv >= 0 ? 1.0 / (1.0 + exp(-xv)) : exp(xv) / (1.0 + exp(xv)); /* sigmoid(x) */
            double s = (double)pW[e] * (double)pg[e];
            pdx[e] = (T)(s * ((1.0 - tv) + lw * (sig - 1.0)));
            pdt[e] = (T)(s * (-xv + (pv - 1.0) * softplus_neg(xv)));
        }
    });
}
