/* Embedding gather and scatter-add between a tile of m int64 ids and one table tile of nv
 * rows starting at row v0 and n columns (csrc/kernels/cpu/embedding.c); ids outside the
 * tile are skipped. */
KERNEL SUF(tt_embedding_fwd)(GLOBAL const tt_long *ids, GLOBAL const T *table, GLOBAL T *y, tt_long m, tt_long n,
                             tt_long nv, tt_long first, R v0)
{
    const tt_long e = GID0();
    if (e >= m * n)
        return;
    const tt_long r = e / n, j = e % n, base = (tt_long)v0, id = ids[r];
    if (id >= base && id - base < nv)
        y[e] = table[(id - base) * n + j];
    else if (first)
        y[e] = (T)0;
}

/* One work-item per column, rows in order: deterministic, no atomics. */
KERNEL SUF(tt_embedding_bwd)(GLOBAL const tt_long *ids, GLOBAL const T *dy, GLOBAL T *dtable, tt_long m, tt_long n,
                             tt_long nv, tt_long first, R v0)
{
    const tt_long j = GID0();
    if (j >= n)
        return;
    const tt_long base = (tt_long)v0;
    if (first)
        for (tt_long v = 0; v < nv; v++)
            dtable[v * n + j] = (T)0;
    for (tt_long r = 0; r < m; r++) {
        const tt_long id = ids[r];
        if (id >= base && id - base < nv)
            dtable[(id - base) * n + j] += dy[r * n + j];
    }
}
