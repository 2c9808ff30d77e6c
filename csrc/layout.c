/* Sparse layouts the submitting thread computes on the host, in O(entries + rows) by
 * counting sorts: a COO list ordered into CSR, and a CSR matrix laid out in row blocks x
 * column blocks (tiletrain/ops/sparse.py).  No StarPU here: sampled GNN training builds a
 * new subgraph adjacency every step, and in NumPy (sorts, bincounts, fancy indexing) that
 * was more than half of the submitting thread's time per step. */
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"

static int64_t *counts_new(int64_t n)
{
    return calloc((size_t)(n + 1), sizeof(int64_t));
}

static int check_coo(const char *what, int64_t nrows, int64_t ncols, int64_t nnz, const int64_t *row,
                     const int64_t *col)
{
    if (nrows < 0 || ncols < 0 || nnz < 0)
        return tt_error(TT_EINVAL, "%s: negative size (%lld rows, %lld columns, %lld entries)", what,
                        (long long)nrows, (long long)ncols, (long long)nnz);
    for (int64_t k = 0; k < nnz; k++) {
        if (row[k] < 0 || row[k] >= nrows)
            return tt_error(TT_EINVAL, "%s: row index %lld of entry %lld is out of range for %lld rows", what,
                            (long long)row[k], (long long)k, (long long)nrows);
        if (col[k] < 0 || col[k] >= ncols)
            return tt_error(TT_EINVAL, "%s: column index %lld of entry %lld is out of range for %lld columns",
                            what, (long long)col[k], (long long)k, (long long)ncols);
    }
    return TT_OK;
}

/* checked COO -> crow and perm (by row, then column, then input order) */
static int coo_order(const char *what, int64_t nrows, int64_t ncols, int64_t nnz, const int64_t *row,
                     const int64_t *col, int64_t *crow, int64_t *perm)
{
    int64_t *pos = counts_new(ncols > nrows ? ncols : nrows);
    int64_t *by_col = malloc((size_t)(nnz > 0 ? nnz : 1) * sizeof(int64_t));
    if (!pos || !by_col) {
        free(pos);
        free(by_col);
        return tt_error(TT_ENOMEM, "%s: no memory for %lld entries", what, (long long)nnz);
    }
    /* stable by column, then stable by row: by row, then column, then input order */
    for (int64_t k = 0; k < nnz; k++)
        pos[col[k] + 1]++;
    for (int64_t c = 0; c < ncols; c++)
        pos[c + 1] += pos[c];
    for (int64_t k = 0; k < nnz; k++)
        by_col[pos[col[k]]++] = k;
    memset(crow, 0, (size_t)(nrows + 1) * sizeof(int64_t));
    for (int64_t k = 0; k < nnz; k++)
        crow[row[k] + 1]++;
    for (int64_t r = 0; r < nrows; r++)
        crow[r + 1] += crow[r];
    memcpy(pos, crow, (size_t)nrows * sizeof(int64_t));
    for (int64_t i = 0; i < nnz; i++) {
        int64_t k = by_col[i];
        perm[pos[row[k]]++] = k;
    }
    free(pos);
    free(by_col);
    return TT_OK;
}

int tt_coo_to_csr(int64_t nrows, int64_t ncols, int64_t nnz, const int64_t *row, const int64_t *col,
                  int64_t *crow, int64_t *perm)
{
    int rc = check_coo("coo_to_csr", nrows, ncols, nnz, row, col);
    return rc != TT_OK ? rc : coo_order("coo_to_csr", nrows, ncols, nnz, row, col, crow, perm);
}

/* blocks of b along an axis of n (one for an empty axis) */
static inline int64_t nblocks(int64_t n, int64_t b)
{
    return n > 0 ? (n + b - 1) / b : 1;
}

/* the column block of column c: by a multiplication with the reciprocal, corrected by one
 * where it rounds across a boundary (exact for columns below 2^53); a division per entry
 * was most of the layout's time on the x86 cores here */
static inline int64_t col_block(int64_t c, int64_t cb, double inv)
{
    int64_t b = (int64_t)((double)c * inv);
    if (b * cb > c)
        b--;
    else if ((b + 1) * cb <= c)
        b++;
    return b;
}

static int check_csr(const char *what, int64_t n, int64_t m, int64_t nnz, const int64_t *crow, const int64_t *col,
                     int64_t rb, int64_t cb)
{
    if (n < 0 || m < 0 || rb < 1 || cb < 1)
        return tt_error(TT_EINVAL, "%s: bad sizes (%lld x %lld matrix, %lld x %lld blocks)", what, (long long)n,
                        (long long)m, (long long)rb, (long long)cb);
    if (crow[0] != 0)
        return tt_error(TT_EINVAL, "%s: crow_indices must start at 0, got %lld", what, (long long)crow[0]);
    for (int64_t r = 0; r < n; r++) {
        if (crow[r + 1] < crow[r])
            return tt_error(TT_EINVAL, "%s: crow_indices decrease at row %lld", what, (long long)r);
        if (crow[r + 1] > nnz)
            return tt_error(TT_EINVAL, "%s: crow_indices[%lld] = %lld is past the %lld entries", what,
                            (long long)(r + 1), (long long)crow[r + 1], (long long)nnz);
        for (int64_t k = crow[r], end = crow[r + 1]; k < end; k++)
            if (col[k] < 0 || col[k] >= m)
                return tt_error(TT_EINVAL, "%s: col_indices[%lld] = %lld is out of range for %lld columns", what,
                                (long long)k, (long long)col[k], (long long)m);
    }
    return TT_OK;
}

int tt_csr_block_counts(int64_t n, int64_t m, int64_t nnz, const int64_t *crow, const int64_t *col, int64_t rb, int64_t cb,
                        int64_t *counts)
{
    int rc = check_csr("csr_block_counts", n, m, nnz, crow, col, rb, cb);
    if (rc != TT_OK)
        return rc;
    int64_t gr = nblocks(n, rb), gc = nblocks(m, cb);
    double inv = 1.0 / (double)cb;
    memset(counts, 0, (size_t)(gr * gc) * sizeof(int64_t));
    for (int64_t r = 0; r < n; r++) {
        int64_t *row_counts = counts + (r / rb) * gc;
        for (int64_t k = crow[r], end = crow[r + 1]; k < end; k++)
            row_counts[gc == 1 ? 0 : col_block(col[k], cb, inv)]++;
    }
    return TT_OK;
}

/* The blocked layout of a checked CSR matrix (tt_csr_block_layout); with values (vsize 4 or
 * 8: float or double), the blocked values too (bv, g x L, 0 in empty slots). */
static int lay_out_blocks(const char *what, int64_t n, int64_t m, const int64_t *crow, const int64_t *col,
                          const double *values, int64_t vsize, void *bv, int64_t rb, int64_t cb, int64_t L,
                          int64_t *perm, int64_t *cols, int64_t *rowptr)
{
    int64_t gc = nblocks(m, cb), g = nblocks(n, rb) * gc;
    double inv = 1.0 / (double)cb;
    int64_t *fill = counts_new(g);
    if (!fill)
        return tt_error(TT_ENOMEM, "%s: no memory for %lld blocks", what, (long long)g);
    memset(perm, 0, (size_t)(g * L) * sizeof(int64_t));
    memset(cols, 0, (size_t)(g * L) * sizeof(int64_t));
    memset(rowptr, 0, (size_t)(g * (rb + 1)) * sizeof(int64_t));
    if (values)
        memset(bv, 0, (size_t)(g * L * vsize));
    /* rows in order, so each block's entries come by row, then in their CSR order */
    for (int64_t r = 0; r < n; r++) {
        int64_t first = (r / rb) * gc, local = r % rb + 1;
        for (int64_t k = crow[r], end = crow[r + 1]; k < end; k++) {
            int64_t bc = gc == 1 ? 0 : col_block(col[k], cb, inv), b = first + bc;
            if (fill[b] >= L) {
                free(fill);
                return tt_error(TT_EINVAL, "%s: block %lld holds more than L = %lld entries", what, (long long)b,
                                (long long)L);
            }
            int64_t slot = b * L + fill[b]++;
            perm[slot] = k;
            cols[slot] = col[k] - bc * cb;
            rowptr[b * (rb + 1) + local]++;
            if (values) {
                if (vsize == 4)
                    ((float *)bv)[slot] = (float)values[k];
                else
                    ((double *)bv)[slot] = values[k];
            }
        }
    }
    for (int64_t b = 0; b < g; b++)
        for (int64_t i = 0; i < rb; i++)
            rowptr[b * (rb + 1) + i + 1] += rowptr[b * (rb + 1) + i];
    free(fill);
    return TT_OK;
}

int tt_csr_block_layout(int64_t n, int64_t m, int64_t nnz, const int64_t *crow, const int64_t *col, int64_t rb, int64_t cb,
                        int64_t L, int64_t *perm, int64_t *cols, int64_t *rowptr)
{
    int rc = check_csr("csr_block_layout", n, m, nnz, crow, col, rb, cb);
    return rc != TT_OK ? rc : lay_out_blocks("csr_block_layout", n, m, crow, col, NULL, 0, NULL, rb, cb, L, perm, cols,
                                             rowptr);
}

int tt_coo_block_counts(int64_t n, int64_t m, int64_t nnz, const int64_t *row, const int64_t *col, int64_t rb, int64_t cb,
                        int64_t *counts)
{
    int rc = check_coo("coo_block_counts", n, m, nnz, row, col);
    if (rc != TT_OK)
        return rc;
    if (rb < 1 || cb < 1)
        return tt_error(TT_EINVAL, "coo_block_counts: bad blocks (%lld x %lld)", (long long)rb, (long long)cb);
    int64_t gr = nblocks(n, rb), gc = nblocks(m, cb);
    double inv = 1.0 / (double)cb;
    memset(counts, 0, (size_t)(gr * gc) * sizeof(int64_t));
    for (int64_t k = 0; k < nnz; k++)
        counts[(row[k] / rb) * gc + (gc == 1 ? 0 : col_block(col[k], cb, inv))]++;
    return TT_OK;
}

int tt_coo_block_layout(int64_t n, int64_t m, int64_t nnz, const int64_t *row, const int64_t *col, const double *values,
                        int64_t vsize, int64_t rb, int64_t cb, int64_t L, int64_t *crow, int64_t *ccol, int64_t *cperm,
                        double *cvalues, int64_t *perm, int64_t *cols, int64_t *rowptr, void *bv)
{
    const char *what = "coo_block_layout";
    int rc = check_coo(what, n, m, nnz, row, col);
    if (rc != TT_OK)
        return rc;
    if (rb < 1 || cb < 1)
        return tt_error(TT_EINVAL, "%s: bad blocks (%lld x %lld)", what, (long long)rb, (long long)cb);
    if (values && vsize != 4 && vsize != 8)
        return tt_error(TT_EINVAL, "%s: values of %lld bytes (4 or 8)", what, (long long)vsize);
    rc = coo_order(what, n, m, nnz, row, col, crow, cperm);
    if (rc != TT_OK)
        return rc;
    for (int64_t i = 0; i < nnz; i++)
        ccol[i] = col[cperm[i]];
    if (values)
        for (int64_t i = 0; i < nnz; i++)
            cvalues[i] = values[cperm[i]];
    return lay_out_blocks(what, n, m, crow, ccol, values ? cvalues : NULL, vsize, bv, rb, cb, L, perm, cols, rowptr);
}
