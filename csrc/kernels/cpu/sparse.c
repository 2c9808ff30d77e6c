/* CSR block products (kernels.def, "index, scatter and block-sparse ops"): one block of mr
 * rows by nc columns, rowptr from 0, column indices within the block.  Column indices outside
 * [0, nc) are skipped (the op validates them before anything is submitted). */
#include "tt_cpu.h"

/* y (mr, nx) (first ? = : +=) alpha A x, x (nc, nx) */
void tt_cpu_csr_mm(const tt_args_csr_mm *a, const void *rowptr, const void *cols, const void *vals, const void *x,
                   void *y)
{
    const int64_t mr = a->mr, nc = a->nc, nx = a->nx;
    const int64_t *rp = rowptr, *ci = cols;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pv = vals, *px = x;
        T *py = y;
        const T alpha = (T)a->alpha;
        for (int64_t r = 0; r < mr; r++) {
            T *yr = py + r * nx;
            if (a->first)
                for (int64_t j = 0; j < nx; j++)
                    yr[j] = 0;
            for (int64_t k = rp[r]; k < rp[r + 1]; k++) {
                const int64_t c = ci[k];
                if (c < 0 || c >= nc)
                    continue;
                const T v = alpha * pv[k];
                const T *xr = px + c * nx;
                for (int64_t j = 0; j < nx; j++)
                    yr[j] += v * xr[j];
            }
        }
    });
}

/* dx (nc, nx) (first ? = : +=) alpha A^T g, g (mr, nx) */
void tt_cpu_csr_mm_t(const tt_args_csr_mm_t *a, const void *rowptr, const void *cols, const void *vals, const void *g,
                     void *dx)
{
    const int64_t mr = a->mr, nc = a->nc, nx = a->nx;
    const int64_t *rp = rowptr, *ci = cols;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pv = vals, *pg = g;
        T *pd = dx;
        const T alpha = (T)a->alpha;
        if (a->first)
            for (int64_t i = 0; i < nc * nx; i++)
                pd[i] = 0;
        for (int64_t r = 0; r < mr; r++) {
            const T *gr = pg + r * nx;
            for (int64_t k = rp[r]; k < rp[r + 1]; k++) {
                const int64_t c = ci[k];
                if (c < 0 || c >= nc)
                    continue;
                const T v = alpha * pv[k];
                T *dr = pd + c * nx;
                for (int64_t j = 0; j < nx; j++)
                    dr[j] += v * gr[j];
            }
        }
    });
}

/* dv[k] (first ? = : +=) g[r, :] . x[c, :]; first: dv[nnz .. nv) = 0 */
void tt_cpu_csr_sddmm(const tt_args_csr_sddmm *a, const void *rowptr, const void *cols, const void *g, const void *x,
                      void *dv)
{
    const int64_t mr = a->mr, nc = a->nc, nx = a->nx, nv = a->nv;
    const int64_t *rp = rowptr, *ci = cols;
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *pg = g, *px = x;
        T *pd = dv;
        const int64_t nnz = rp[mr] < nv ? rp[mr] : nv;
        if (a->first)
            for (int64_t k = nnz; k < nv; k++)
                pd[k] = 0;
        for (int64_t r = 0; r < mr; r++) {
            const T *gr = pg + r * nx;
            for (int64_t k = rp[r]; k < rp[r + 1] && k < nv; k++) {
                const int64_t c = ci[k];
                T s = 0;
                if (c >= 0 && c < nc) {
                    const T *xr = px + c * nx;
                    for (int64_t j = 0; j < nx; j++)
                        s += gr[j] * xr[j];
                }
                pd[k] = a->first ? s : pd[k] + s;
            }
        }
    });
}
