/* Attention kernels: head split/merge permutes and flash attention (forward with an online
 * softmax, FlashAttention-2 style backward).  Tiles are row-major; an attention tile of a
 * (B, H, T, D) tensor is viewed as (bh, t, hd) with bh = its batch*head extent.  The block
 * matmuls go through CBLAS; only a tq x tk score block is ever held (malloc'ed per task). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tt_cpu.h"

static size_t elem_size(int64_t dtype) { return dtype == TT_F32 ? sizeof(float) : sizeof(double); }

/* x tile (nb, nt, nh*hd) -> y tile (nb, nh, nt, hd) */
void tt_cpu_heads_split(const tt_args_heads_split *a, const void *x, void *y)
{
    const int64_t nb = a->nb, nt = a->nt, nh = a->nh, hd = a->hd;
    const size_t es = elem_size(a->dtype), row = (size_t)hd * es;
    const char *px = x;
    char *py = y;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t t = 0; t < nt; t++)
                memcpy(py + (size_t)(((b * nh + h) * nt + t) * hd) * es,
                       px + (size_t)((b * nt + t) * nh * hd + h * hd) * es, row);
}

/* y tile (nb, nh, nt, hd) -> x tile (nb, nt, nh*hd) */
void tt_cpu_heads_merge(const tt_args_heads_merge *a, const void *y, void *x)
{
    const int64_t nb = a->nb, nh = a->nh, nt = a->nt, hd = a->hd;
    const size_t es = elem_size(a->dtype), row = (size_t)hd * es;
    const char *py = y;
    char *px = x;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t t = 0; t < nt; t++)
            for (int64_t h = 0; h < nh; h++)
                memcpy(px + (size_t)((b * nt + t) * nh * hd + h * hd) * es,
                       py + (size_t)(((b * nh + h) * nt + t) * hd) * es, row);
}

/* Row-major C = alpha op(A) op(B) + beta C on T = float or double (dtype). */
static void gemm_rm(int64_t dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const void *A,
                    int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc)
{
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

void tt_cpu_attn_fwd(const tt_args_attn_fwd *a, const void *q, const void *k, const void *v, void *o, void *m,
                     void *l)
{
    const int64_t bh = a->bh, tq = a->tq, tk = a->tk, hd = a->hd;
    TT_FLOAT_DISPATCH(a->dtype, {
        T *s = malloc((size_t)(tq * tk) * sizeof(T));
        if (!s)
            abort();
        for (int64_t b = 0; b < bh; b++) {
            const T *Q = (const T *)q + b * tq * hd, *K = (const T *)k + b * tk * hd, *V = (const T *)v + b * tk * hd;
            T *O = (T *)o + b * tq * hd, *M = (T *)m + b * tq, *L = (T *)l + b * tq;
            gemm_rm(a->dtype, 0, 1, tq, tk, hd, a->scale, Q, hd, K, hd, 0.0, s, tk); /* S = scale Q K^T */
            for (int64_t r = 0; r < tq; r++) {
                T *srow = s + r * tk, *orow = O + r * hd;
                const int64_t nv = visible(a->causal, a->qoff + r, a->koff, tk);
                const T mold = a->init ? (T)-INFINITY : M[r], lold = a->init ? (T)0 : L[r];
                T mnew = mold;
                for (int64_t c = 0; c < nv; c++)
                    if (srow[c] > mnew)
                        mnew = srow[c];
                T sum = 0;
                if (mnew == (T)-INFINITY) { /* nothing visible yet: the row stays empty */
                    for (int64_t c = 0; c < tk; c++)
                        srow[c] = 0;
                } else {
                    for (int64_t c = 0; c < nv; c++) {
                        srow[c] = (T)exp((double)(srow[c] - mnew));
                        sum += srow[c];
                    }
                    for (int64_t c = nv; c < tk; c++)
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
            gemm_rm(a->dtype, 0, 0, tq, hd, tk, 1.0, s, tk, V, hd, 1.0, O, hd); /* O += P V */
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
    const int64_t bh = a->bh, tq = a->tq, tk = a->tk, hd = a->hd;
    TT_FLOAT_DISPATCH(a->dtype, {
        T *p = malloc((size_t)(2 * tq * tk) * sizeof(T));
        if (!p)
            abort();
        T *ds = p + tq * tk;
        for (int64_t b = 0; b < bh; b++) {
            const T *Q = (const T *)q + b * tq * hd, *K = (const T *)k + b * tk * hd, *V = (const T *)v + b * tk * hd;
            const T *dO = (const T *)dout + b * tq * hd, *ST = (const T *)st + b * tq * 2;
            T *dQ = (T *)dq + b * tq * hd, *dK = (T *)dk + b * tk * hd, *dV = (T *)dv + b * tk * hd;
            gemm_rm(a->dtype, 0, 1, tq, tk, hd, a->scale, Q, hd, K, hd, 0.0, p, tk);  /* S = scale Q K^T */
            gemm_rm(a->dtype, 0, 1, tq, tk, hd, 1.0, dO, hd, V, hd, 0.0, ds, tk);     /* dP = dO V^T */
            for (int64_t r = 0; r < tq; r++) {
                T *prow = p + r * tk, *drow = ds + r * tk;
                const int64_t nv = visible(a->causal, a->qoff + r, a->koff, tk);
                const T lse = ST[2 * r], delta = ST[2 * r + 1];
                for (int64_t c = 0; c < nv; c++) {
                    prow[c] = (T)exp((double)(prow[c] - lse));
                    drow[c] = prow[c] * (drow[c] - delta); /* dS = P o (dP - Delta) */
                }
                for (int64_t c = nv; c < tk; c++)
                    prow[c] = drow[c] = 0;
            }
            gemm_rm(a->dtype, 1, 0, tk, hd, tq, 1.0, p, tk, dO, hd, a->initkv ? 0.0 : 1.0, dV, hd);     /* P^T dO */
            gemm_rm(a->dtype, 0, 0, tq, hd, tk, a->scale, ds, tk, K, hd, a->initq ? 0.0 : 1.0, dQ, hd);  /* dS K */
            gemm_rm(a->dtype, 1, 0, tk, hd, tq, a->scale, ds, tk, Q, hd, a->initkv ? 0.0 : 1.0, dK, hd); /* dS^T Q */
        }
        free(p);
    });
}
