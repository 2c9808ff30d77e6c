/* Index gather/scatter and CSR block products (csrc/kernels/cpu/index.c, sparse.c; kernels.def,
 * "index, scatter and block-sparse ops").  Scatters and A^T products give one work-item per
 * output element group and loop over the contributions in order: deterministic, no atomics,
 * the same order as the CPU bodies. */
KERNEL SUF(tt_index_gather)(GLOBAL const tt_long *idx, GLOBAL const T *x, GLOBAL T *y, tt_long ma, tt_long ne,
                            tt_long nb, tt_long nv, tt_long vec, tt_long first, R v0)
{
    const tt_long e = GID0();
    if (e >= ma * ne * nb)
        return;
    const tt_long r = e / (ne * nb), i = (e / nb) % ne, b = e % nb, base = (tt_long)v0;
    const tt_long id = vec ? idx[i] : idx[e];
    if (id >= base && id - base < nv)
        y[e] = x[(r * nv + (id - base)) * nb + b];
    else if (first)
        y[e] = (T)0;
}

/* one work-item per (a, b): the contributions along the indexed axis in order */
#define TT_SCATTER_LOOP(COUNTED)                                                        \
    const tt_long t = GID0();                                                          \
    if (t >= ma * nb)                                                                  \
        return;                                                                        \
    const tt_long r = t / nb, b = t % nb, base = (tt_long)v0;                          \
    for (tt_long i = 0; i < ne; i++) {                                                 \
        const tt_long id = vec ? idx[i] : idx[(r * ne + i) * nb + b];                  \
        if (id < base || id - base >= nv)                                              \
            continue;                                                                  \
        const tt_long o = (r * nv + (id - base)) * nb + b;                             \
        const T v = src[(r * ne + i) * nb + b];                                        \
        if (COUNTED && cnt[o] == (T)0)                                                 \
            y[o] = v;                                                                  \
        else if (op == 0)                                                              \
            y[o] += v;                                                                 \
        else if (op == 1) {                                                            \
            if ((v > y[o] || TT_ISNAN(v)) && !TT_ISNAN(y[o]))                          \
                y[o] = v;                                                              \
        } else if (op == 2) {                                                          \
            if ((v < y[o] || TT_ISNAN(v)) && !TT_ISNAN(y[o]))                          \
                y[o] = v;                                                              \
        } else                                                                         \
            y[o] = v;                                                                  \
        if (COUNTED)                                                                   \
            cnt[o] += (T)1;                                                            \
    }

KERNEL SUF(tt_index_scatter)(GLOBAL const tt_long *idx, GLOBAL const T *src, GLOBAL T *y, tt_long ma, tt_long ne,
                             tt_long nb, tt_long nv, tt_long vec, tt_long op, R v0)
{
    GLOBAL T *cnt = y; /* not read: COUNTED is 0 */
    TT_SCATTER_LOOP(0)
}

KERNEL SUF(tt_index_scatter_count)(GLOBAL const tt_long *idx, GLOBAL const T *src, GLOBAL T *y, GLOBAL T *cnt,
                                   tt_long ma, tt_long ne, tt_long nb, tt_long nv, tt_long vec, tt_long op, R v0)
{
    TT_SCATTER_LOOP(1)
}
#undef TT_SCATTER_LOOP

/* one work-item per element of y (mr, nx) */
KERNEL SUF(tt_csr_mm)(GLOBAL const tt_long *rowptr, GLOBAL const tt_long *cols, GLOBAL const T *vals,
                      GLOBAL const T *x, GLOBAL T *y, tt_long mr, tt_long nc, tt_long nx, tt_long first, R alpha,
                      R nnz)
{
    const tt_long e = GID0();
    if (e >= mr * nx)
        return;
    const tt_long r = e / nx, j = e % nx;
    T acc = first ? (T)0 : y[e];
    for (tt_long k = rowptr[r]; k < rowptr[r + 1]; k++) {
        const tt_long c = cols[k];
        if (c >= 0 && c < nc)
            acc += ((T)alpha * vals[k]) * x[c * nx + j];
    }
    y[e] = acc;
}

/* one work-item per column j of dx (nc, nx): the rows in order */
KERNEL SUF(tt_csr_mm_t)(GLOBAL const tt_long *rowptr, GLOBAL const tt_long *cols, GLOBAL const T *vals,
                        GLOBAL const T *g, GLOBAL T *dx, tt_long mr, tt_long nc, tt_long nx, tt_long first, R alpha,
                        R nnz)
{
    const tt_long j = GID0();
    if (j >= nx)
        return;
    if (first)
        for (tt_long c = 0; c < nc; c++)
            dx[c * nx + j] = (T)0;
    for (tt_long r = 0; r < mr; r++)
        for (tt_long k = rowptr[r]; k < rowptr[r + 1]; k++) {
            const tt_long c = cols[k];
            if (c >= 0 && c < nc)
                dx[c * nx + j] += ((T)alpha * vals[k]) * g[r * nx + j];
        }
}

/* one work-item per row r: its entries' dot products; item 0 also zeroes the padding */
KERNEL SUF(tt_csr_sddmm)(GLOBAL const tt_long *rowptr, GLOBAL const tt_long *cols, GLOBAL const T *g,
                         GLOBAL const T *x, GLOBAL T *dv, tt_long mr, tt_long nc, tt_long nx, tt_long nv, tt_long first,
                         R nnz)
{
    const tt_long r = GID0();
    if (r >= mr)
        return;
    if (r == 0 && first)
        for (tt_long k = rowptr[mr] < nv ? rowptr[mr] : nv; k < nv; k++)
            dv[k] = (T)0;
    for (tt_long k = rowptr[r]; k < rowptr[r + 1] && k < nv; k++) {
        const tt_long c = cols[k];
        T s = (T)0;
        if (c >= 0 && c < nc)
            for (tt_long j = 0; j < nx; j++)
                s += g[r * nx + j] * x[c * nx + j];
        dv[k] = first ? s : dv[k] + s;
    }
}
