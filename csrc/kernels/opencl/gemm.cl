/* Tile gemm, row-major: C = alpha op(A) op(B) + beta C for each of `batch` matrices
 * (csrc/kernels/cpu/gemm.c).  A plain local-memory tiled kernel: TT_DEV_TILE x
 * TT_DEV_TILE work-items per group, one element of C each.  Correctness, not speed: the
 * CUDA build uses cuBLAS instead (csrc/kernels/cuda/gemm.cu).  beta == 0 never reads C
 * (the expander then declares C write-only: its contents are undefined).  cacc (a float32
 * accumulator C for half A and B) is always 0 here: no OpenCL body takes half tiles.
 * gemm_bias (here) and gemm_gelu (activations.cl, after the GELU helpers) share the
 * product: SUF(tt_gemm_dot). */

/* op(A) op(B) at (row, col) of matrix z = GROUP2(), for the work-item at (GID1(), GID0()):
 * every work-item of the group must call it (barriers); rows and columns outside m x n get
 * a value that is not used.  As and Bs: the kernel's TT_DEV_TILE x TT_DEV_TILE local arrays. */
DEVFN T SUF(tt_gemm_dot)(GLOBAL const T *A, GLOBAL const T *B, tt_long m, tt_long n, tt_long k, tt_long ta,
                         tt_long tb, LPTR T (*As)[TT_DEV_TILE], LPTR T (*Bs)[TT_DEV_TILE])
{
    const tt_long col = GID0(), row = GID1(), z = GROUP2();
    const tt_long lc = LID0(), lr = LID1();
    GLOBAL const T *Az = A + z * m * k;
    GLOBAL const T *Bz = B + z * k * n;
    T acc = 0;
    for (tt_long k0 = 0; k0 < k; k0 += TT_DEV_TILE) {
        /* As[lr][lc] = op(A)[row][k0 + lc], Bs[lr][lc] = op(B)[k0 + lr][col] */
        const tt_long ka = k0 + lc, kb = k0 + lr;
        T av = 0, bv = 0;
        if (row < m && ka < k)
            av = ta ? Az[ka * m + row] : Az[row * k + ka];
        if (col < n && kb < k)
            bv = tb ? Bz[col * k + kb] : Bz[kb * n + col];
        As[lr][lc] = av;
        Bs[lr][lc] = bv;
        BARRIER();
        for (int l = 0; l < TT_DEV_TILE; l++)
            acc += As[lr][l] * Bs[l][lc];
        BARRIER();
    }
    return acc;
}

KERNEL SUF(tt_gemm)(GLOBAL const T *A, GLOBAL const T *B, GLOBAL T *C, tt_long batch, tt_long m, tt_long n,
                    tt_long k, tt_long ta, tt_long tb, tt_long cacc, R alpha, R beta)
{
    LOCAL T As[TT_DEV_TILE][TT_DEV_TILE];
    LOCAL T Bs[TT_DEV_TILE][TT_DEV_TILE];
    const T acc = SUF(tt_gemm_dot)(A, B, m, n, k, ta, tb, As, Bs);
    const tt_long col = GID0(), row = GID1(), z = GROUP2();
    if (row < m && col < n) {
        GLOBAL T *c = C + z * m * n + row * n + col;
        *c = beta == (R)0 ? (T)alpha * acc : (T)alpha * acc + (T)beta * *c;
    }
}

/* C = alpha op(A) op(B) + bias, bias (n) added to every row (the CPU body copies bias into C,
 * then runs gemm with beta 1: the same sum). */
KERNEL SUF(tt_gemm_bias)(GLOBAL const T *A, GLOBAL const T *B, GLOBAL const T *bias, GLOBAL T *C, tt_long batch,
                         tt_long m, tt_long n, tt_long k, tt_long ta, tt_long tb, R alpha)
{
    LOCAL T As[TT_DEV_TILE][TT_DEV_TILE];
    LOCAL T Bs[TT_DEV_TILE][TT_DEV_TILE];
    const T acc = SUF(tt_gemm_dot)(A, B, m, n, k, ta, tb, As, Bs);
    const tt_long col = GID0(), row = GID1(), z = GROUP2();
    if (row < m && col < n)
        C[z * m * n + row * n + col] = (T)alpha * acc + bias[col];
}
