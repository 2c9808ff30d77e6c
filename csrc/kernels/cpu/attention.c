/* Attention kernels: head split/merge permutes and flash attention (forward with an online
 * softmax, FlashAttention-2 style backward).  Tiles are row-major; an attention tile of a
 * (B, H, T, D) tensor is viewed as (bh, t, hd) with bh = its batch*head extent.  The block
 * matmuls go through CBLAS; only a tq x tk score block is ever held (malloc'ed per task). */
#include "tt_blas.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tt_cpu.h"

static size_t elem_size(int64_t dtype) { return dtype == TT_F32 ? sizeof(float) : sizeof(double); }

/* columns c0 .. c0 + nh*hd - 1 of x tile (nb, nt, xw) -> y tile (nb, nh, nt, hd) */
void tt_cpu_heads_split(const tt_args_heads_split *a, const void *x, void *y)
{
    const int64_t nb = a->nb, nt = a->nt, nh = a->nh, hd = a->hd, xw = a->xw, c0 = a->c0;
    const size_t es = elem_size(a->dtype), row = (size_t)hd * es;
    const char *px = x;
    char *py = y;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t t = 0; t < nt; t++)
                memcpy(py + (size_t)(((b * nh + h) * nt + t) * hd) * es,
                       px + (size_t)((b * nt + t) * xw + c0 + h * hd) * es, row);
}

/* y tile (nb, nh, nt, hd) -> columns c0 .. c0 + nh*hd - 1 of x tile (nb, nt, xw) */
void tt_cpu_heads_merge(const tt_args_heads_merge *a, const void *y, void *x)
{
    const int64_t nb = a->nb, nh = a->nh, nt = a->nt, hd = a->hd, xw = a->xw, c0 = a->c0;
    const size_t es = elem_size(a->dtype), row = (size_t)hd * es;
    const char *py = y;
    char *px = x;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t t = 0; t < nt; t++)
            for (int64_t h = 0; h < nh; h++)
                memcpy(px + (size_t)((b * nt + t) * xw + c0 + h * hd) * es,
                       py + (size_t)(((b * nh + h) * nt + t) * hd) * es, row);
}

/* Row-major C = alpha op(A) op(B) + beta C on T = float or double (dtype).  One query row
 * (decoding a token) is a matrix-vector product: gemv reads the key/value tile once where
 * gemm would pack it first (several times slower at 1 x 256 x 64); beta == 0 clears the row
 * first (a fresh tile may hold NaN). */
static void gemm_rm(int64_t dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const void *A,
                    int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc)
{
    if (m == 1 && !ta) { /* c (n) = alpha op(B)^T a (k) + beta c, B (n x k) when tb, else (k x n) */
        tt_gemv_rm(dtype == TT_F32, !tb, (int)(tb ? n : k), (int)(tb ? k : n), alpha, B, (int)ldb, A, beta, C);
        return;
    }
    const enum CBLAS_TRANSPOSE cta = ta ? CblasTrans : CblasNoTrans, ctb = tb ? CblasTrans : CblasNoTrans;
    if (dtype == TT_F32)
        cblas_sgemm(CblasRowMajor, cta, ctb, (int)m, (int)n, (int)k, (float)alpha, A, (int)lda, B, (int)ldb,
                    (float)beta, C, (int)ldc);
    else
        cblas_dgemm(CblasRowMajor, cta, ctb, (int)m, (int)n, (int)k, alpha, A, (int)lda, B, (int)ldb, beta, C,
                    (int)ldc);
}

/* Number of keys of a tk-wide key tile starting at koff that query position qpos sees. */
static int64_t visible(int64_t causal, int64_t qpos, int64_t koff, int64_t tk)
{
    if (!causal)
        return tk;
    int64_t n = qpos - koff + 1;
    return n < 0 ? 0 : (n > tk ? tk : n);
}

/* Query rows are processed in blocks.  Under a causal mask a block only needs the keys its
 * last row sees, so where rows see part of the key tile (a diagonal tile) blocks of ATTN_RB
 * rows skip most of the masked upper triangle (about 40 % of a diagonal tile's work with
 * 256-row tiles); rows that see the whole key tile (off-diagonal tiles, no mask) go in blocks
 * of up to ATTN_RB_FULL rows, whose larger gemms (the backward's P^T dO and dS^T Q contract
 * over the block's rows) run faster. */
#define ATTN_RB 64
#define ATTN_RB_FULL 256

/* Rows of the block starting at query row r0 (of tq). */
static int64_t row_block(int64_t causal, int64_t qoff, int64_t koff, int64_t tq, int64_t tk, int64_t r0)
{
    const int64_t rb = visible(causal, qoff + r0, koff, tk) == tk ? ATTN_RB_FULL : ATTN_RB;
    return tq - r0 < rb ? tq - r0 : rb;
}

/* Rows of the largest block: the scratch buffers' height. */
static int64_t row_block_max(int64_t tq) { return tq < ATTN_RB_FULL ? tq : ATTN_RB_FULL; }

/* Row helpers, float versions vectorised (tt_expf, lane-wise partial max/sum). */
TT_SIMD_CLONES static float row_max_f32(const float *restrict s, int64_t n, float init)
{
    float lane[16];
    for (int j = 0; j < 16; j++)
        lane[j] = init;
    int64_t c = 0;
    for (; c + 16 <= n; c += 16)
        for (int j = 0; j < 16; j++)
            lane[j] = s[c + j] > lane[j] ? s[c + j] : lane[j];
    for (; c < n; c++)
        lane[0] = s[c] > lane[0] ? s[c] : lane[0];
    float m = lane[0];
    for (int j = 1; j < 16; j++)
        m = lane[j] > m ? lane[j] : m;
    return m;
}

/* s[c] = exp(s[c] - shift) for c < n; returns the sum. */
TT_SIMD_CLONES static float row_exp_sum_f32(float *restrict s, int64_t n, float shift)
{
    float lane[16] = {0};
    int64_t c = 0;
    for (; c + 16 <= n; c += 16)
        for (int j = 0; j < 16; j++) {
            float e = tt_expf(s[c + j] - shift);
            s[c + j] = e;
            lane[j] += e;
        }
    float sum = 0;
    for (; c < n; c++) {
        s[c] = tt_expf(s[c] - shift);
        sum += s[c];
    }
    for (int j = 0; j < 16; j++)
        sum += lane[j];
    return sum;
}

/* p[c] = exp(p[c] - lse); d[c] = p[c] (d[c] - delta) for c < n. */
TT_SIMD_CLONES static void row_dsoftmax_f32(float *restrict p, float *restrict d, int64_t n, float lse, float delta)
{
    for (int64_t c = 0; c < n; c++) {
        float e = tt_expf(p[c] - lse);
        p[c] = e;
        d[c] = e * (d[c] - delta);
    }
}

static double row_max_f64(const double *s, int64_t n, double m)
{
    for (int64_t c = 0; c < n; c++)
        m = s[c] > m ? s[c] : m;
    return m;
}

static double row_exp_sum_f64(double *s, int64_t n, double shift)
{
    double sum = 0;
    for (int64_t c = 0; c < n; c++) {
        s[c] = exp(s[c] - shift);
        sum += s[c];
    }
    return sum;
}

static void row_dsoftmax_f64(double *p, double *d, int64_t n, double lse, double delta)
{
    for (int64_t c = 0; c < n; c++) {
        p[c] = exp(p[c] - lse);
        d[c] = p[c] * (d[c] - delta);
    }
}

#define ROW_MAX(s, n, m)                                                                                 \
    (sizeof(T) == 4 ? (T)row_max_f32((const float *)(s), n, (float)(m))                                \
                    : (T)row_max_f64((const double *)(s), n, (double)(m)))
#define ROW_EXP_SUM(s, n, sh)                                                                            \
    (sizeof(T) == 4 ? (T)row_exp_sum_f32((float *)(s), n, (float)(sh)) : (T)row_exp_sum_f64((double *)(s), n, (double)(sh)))
#define ROW_DSOFTMAX(p, d, n, lse, delta)                                                                \
    (sizeof(T) == 4 ? row_dsoftmax_f32((float *)(p), (float *)(d), n, (float)(lse), (float)(delta))      \
                    : row_dsoftmax_f64((double *)(p), (double *)(d), n, (double)(lse), (double)(delta)))

void tt_cpu_attn_fwd(const tt_args_attn_fwd *a, const void *q, const void *k, const void *v, void *o, void *m,
                     void *l)
{
    const int64_t bh = a->bh, tq = a->tq, tk = a->tk, hd = a->hd, group = a->group > 1 ? a->group : 1;
    const int64_t rbmax = row_block_max(tq);
    TT_FLOAT_DISPATCH(a->dtype, {
        T *s = malloc((size_t)(rbmax * tk) * sizeof(T));
        if (!s)
            abort();
        for (int64_t b = 0; b < bh; b++) {
            const int64_t bk = b / group; /* the key/value row this query row reads */
            const T *Q = (const T *)q + b * tq * hd, *K = (const T *)k + bk * tk * hd, *V = (const T *)v + bk * tk * hd;
            T *O = (T *)o + b * tq * hd, *M = (T *)m + b * tq, *L = (T *)l + b * tq;
            for (int64_t r0 = 0, rb; r0 < tq; r0 += rb) {
                rb = row_block(a->causal, a->qoff, a->koff, tq, tk, r0);
                const int64_t ncol = visible(a->causal, a->qoff + r0 + rb - 1, a->koff, tk); /* keys the block sees */
                if (ncol == 0) { /* no row of the block sees a key of this tile */
                    if (a->init)
                        for (int64_t r = r0; r < r0 + rb; r++) {
                            for (int64_t d = 0; d < hd; d++)
                                O[r * hd + d] = 0;
                            M[r] = (T)-INFINITY;
                            L[r] = 0;
                        }
                    continue;
                }
                /* S = scale Q K^T over the visible keys */
                gemm_rm(a->dtype, 0, 1, rb, ncol, hd, a->scale, Q + r0 * hd, hd, K, hd, 0.0, s, ncol);
                for (int64_t i = 0; i < rb; i++) {
                    const int64_t r = r0 + i;
                    T *srow = s + i * ncol, *orow = O + r * hd;
                    const int64_t nv = visible(a->causal, a->qoff + r, a->koff, tk);
                    const T mold = a->init ? (T)-INFINITY : M[r], lold = a->init ? (T)0 : L[r];
                    const T mnew = ROW_MAX(srow, nv, mold);
                    T sum = 0;
                    if (mnew == (T)-INFINITY) { /* nothing visible yet: the row stays empty */
                        for (int64_t c = 0; c < ncol; c++)
                            srow[c] = 0;
                    } else {
                        sum = ROW_EXP_SUM(srow, nv, mnew);
                        for (int64_t c = nv; c < ncol; c++)
                            srow[c] = 0;
                    }
                    const T alpha = (a->init || mold == (T)-INFINITY) ? (T)0 : (T)exp((double)(mold - mnew));
                    if (a->init)
                        for (int64_t d = 0; d < hd; d++)
                            orow[d] = 0;
                    else if (alpha != (T)1)
                        for (int64_t d = 0; d < hd; d++)
                            orow[d] *= alpha;
                    M[r] = mnew;
                    L[r] = alpha * lold + sum;
                }
                gemm_rm(a->dtype, 0, 0, rb, hd, ncol, 1.0, s, ncol, V, hd, 1.0, O + r0 * hd, hd); /* O += P V */
            }
        }
        free(s);
    });
}

void tt_cpu_attn_fwd_norm(const tt_args_attn_fwd_norm *a, void *o, void *m, const void *l)
{
    const int64_t rows = a->bh * a->tq, hd = a->hd;
    TT_FLOAT_DISPATCH(a->dtype, {
        T *O = o, *M = m;
        const T *L = l;
        for (int64_t r = 0; r < rows; r++) {
            if (L[r] > 0) {
                const T inv = (T)1 / L[r];
                for (int64_t d = 0; d < hd; d++)
                    O[r * hd + d] *= inv;
                M[r] += (T)log((double)L[r]);
            } else { /* a row that saw no key: output 0, logsumexp -inf */
                for (int64_t d = 0; d < hd; d++)
                    O[r * hd + d] = 0;
                M[r] = (T)-INFINITY;
            }
        }
    });
}

void tt_cpu_attn_bwd_rows(const tt_args_attn_bwd_rows *a, const void *dout, const void *o, const void *lse,
                          void *st)
{
    const int64_t rows = a->bh * a->tq, hd = a->hd;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *dO = dout, *O = o, *LSE = lse;
        T *S = st;
        for (int64_t r = 0; r < rows; r++) {
            double acc = 0.0;
            for (int64_t d = 0; d < hd; d++)
                acc += (double)dO[r * hd + d] * (double)O[r * hd + d];
            S[2 * r] = LSE[r];
            S[2 * r + 1] = (T)acc;
        }
    });
}

void tt_cpu_attn_bwd(const tt_args_attn_bwd *a, const void *q, const void *k, const void *v, const void *dout,
                     const void *st, void *dq, void *dk, void *dv)
{
    const int64_t bh = a->bh, tq = a->tq, tk = a->tk, hd = a->hd, group = a->group > 1 ? a->group : 1;
    const int64_t rbmax = row_block_max(tq);
    TT_FLOAT_DISPATCH(a->dtype, {
        T *p = malloc((size_t)(2 * rbmax * tk) * sizeof(T));
        if (!p)
            abort();
        T *ds = p + rbmax * tk;
        if (a->initq)
            memset(dq, 0, (size_t)(bh * tq * hd) * sizeof(T));
        if (a->initkv) {
            memset(dk, 0, (size_t)(bh / group * tk * hd) * sizeof(T));
            memset(dv, 0, (size_t)(bh / group * tk * hd) * sizeof(T));
        }
        for (int64_t b = 0; b < bh; b++) {
            const int64_t bk = b / group; /* the key/value row this query row reads */
            const T *Q = (const T *)q + b * tq * hd, *K = (const T *)k + bk * tk * hd, *V = (const T *)v + bk * tk * hd;
            const T *dO = (const T *)dout + b * tq * hd, *ST = (const T *)st + b * tq * 2;
            T *dQ = (T *)dq + b * tq * hd, *dK = (T *)dk + bk * tk * hd, *dV = (T *)dv + bk * tk * hd;
            for (int64_t r0 = 0, rb; r0 < tq; r0 += rb) {
                rb = row_block(a->causal, a->qoff, a->koff, tq, tk, r0);
                const int64_t ncol = visible(a->causal, a->qoff + r0 + rb - 1, a->koff, tk);
                if (ncol == 0)
                    continue;
                const T *Qb = Q + r0 * hd, *dOb = dO + r0 * hd;
                gemm_rm(a->dtype, 0, 1, rb, ncol, hd, a->scale, Qb, hd, K, hd, 0.0, p, ncol); /* S = scale Q K^T */
                gemm_rm(a->dtype, 0, 1, rb, ncol, hd, 1.0, dOb, hd, V, hd, 0.0, ds, ncol);    /* dP = dO V^T */
                for (int64_t i = 0; i < rb; i++) {
                    T *prow = p + i * ncol, *drow = ds + i * ncol;
                    const int64_t nv = visible(a->causal, a->qoff + r0 + i, a->koff, tk);
                    ROW_DSOFTMAX(prow, drow, nv, ST[2 * (r0 + i)], ST[2 * (r0 + i) + 1]); /* dS = P o (dP - Delta) */
                    for (int64_t c = nv; c < ncol; c++)
                        prow[c] = drow[c] = 0;
                }
                gemm_rm(a->dtype, 1, 0, ncol, hd, rb, 1.0, p, ncol, dOb, hd, 1.0, dV, hd);            /* P^T dO */
                gemm_rm(a->dtype, 0, 0, rb, hd, ncol, a->scale, ds, ncol, K, hd, 1.0, dQ + r0 * hd, hd); /* dS K */
                gemm_rm(a->dtype, 1, 0, ncol, hd, rb, a->scale, ds, ncol, Qb, hd, 1.0, dK, hd);       /* dS^T Q */
            }
        }
        free(p);
    });
}

/* Rotary embedding: angle of pair i at position pos, float32 as transformers computes it */
static float rope_angle(int64_t pos, int64_t i, int64_t n, double theta)
{
    const float inv = 1.0f / powf((float)theta, (float)(2 * i) / (float)n);
    return (float)pos * inv;
}

void tt_cpu_rope(const tt_args_rope *a, const void *x, void *y)
{
    const int64_t m = a->m, k = a->k, n = a->n, h = n / 2;
    const double sgn = a->inverse ? -1.0 : 1.0;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *X = x;
        T *Y = y;
        T *cs = malloc((size_t)(2 * h) * sizeof(T));
        if (!cs)
            abort();
        T *sn = cs + h;
        for (int64_t t = 0; t < k; t++) {
            for (int64_t i = 0; i < h; i++) {
                const T ang = (T)rope_angle(a->pos0 + a->koff + t, i, n, a->theta);
                cs[i] = cos(ang);
                sn[i] = (T)sgn * sin(ang);
            }
            for (int64_t b = 0; b < m; b++) {
                const T *xr = X + (b * k + t) * n;
                T *yr = Y + (b * k + t) * n;
                for (int64_t i = 0; i < h; i++) {
                    const T x1 = xr[i], x2 = xr[i + h];
                    yr[i] = x1 * cs[i] - x2 * sn[i];
                    yr[i + h] = x2 * cs[i] + x1 * sn[i];
                }
            }
        }
        free(cs);
    });
}
