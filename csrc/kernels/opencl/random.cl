/* random: counter-based numbers keyed by (seed, global row-major element index), as
 * csrc/kernels/cpu/random.c (same formulas, in double, so a tile gives the same values on a
 * device as on a CPU).  Also instantiated for int64 tiles (T = tt_long). */
#ifndef TT_RANDOM_HELPERS
#define TT_RANDOM_HELPERS
#if defined(__CUDACC__)
#define TT_MULHI64(a, b) __umul64hi(a, b)
#else
#define TT_MULHI64(a, b) mul_hi(a, b)
#endif

DEVFN tt_ulong tt_rng_mix64(tt_ulong z)
{
    z += (tt_ulong)0x9E3779B97F4A7C15UL;
    z = (z ^ (z >> 30)) * (tt_ulong)0xBF58476D1CE4E5B9UL;
    z = (z ^ (z >> 27)) * (tt_ulong)0x94D049BB133111EBUL;
    return z ^ (z >> 31);
}

DEVFN tt_ulong tt_rng_bits(tt_ulong key, tt_ulong c) { return tt_rng_mix64(key + c * (tt_ulong)0x9E3779B97F4A7C15UL); }

DEVFN double tt_rng_value(tt_ulong key, tt_ulong idx, tt_long dist, int f32, double lo, double hi)
{
    const tt_ulong b0 = tt_rng_bits(key, 2 * idx);
    if (dist == 0) {
        const double u = f32 ? (double)(b0 >> 40) * (1.0 / 16777216.0) : (double)(b0 >> 11) * (1.0 / 9007199254740992.0);
        return lo + (hi - lo) * u;
    }
    if (dist == 1) {
        const double u1 = (double)((b0 >> 11) + 1) * (1.0 / 9007199254740992.0);
        const double u2 = (double)(tt_rng_bits(key, 2 * idx + 1) >> 11) * (1.0 / 9007199254740992.0);
        return lo + hi * (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    return lo + (double)TT_MULHI64(b0, (tt_ulong)(hi - lo));
}
#endif

KERNEL SUF(tt_random)(GLOBAL T *y, tt_long n, tt_long tile, tt_long seed, tt_long dist, tt_long nd, tt_long d0,
                      tt_long d1, tt_long d2, tt_long d3, tt_long d4, tt_long d5, tt_long d6, tt_long d7, tt_long t0,
                      tt_long t1, tt_long t2, tt_long t3, tt_long t4, tt_long t5, tt_long t6, tt_long t7, R lo, R hi)
{
    const tt_long i = GID0();
    if (i >= n)
        return;
    const tt_long shape[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const tt_long tsz[8] = {t0, t1, t2, t3, t4, t5, t6, t7};
    /* walk the axes from the last: the tile's index along each, and the element's */
    tt_long rest = tile, q = i, s = 1, idx = 0;
    for (tt_long d = nd - 1; d >= 0; d--) {
        const tt_long grid = (shape[d] + tsz[d] - 1) / tsz[d];
        const tt_long off = (rest % grid) * tsz[d];
        const tt_long ts = shape[d] - off < tsz[d] ? shape[d] - off : tsz[d];
        rest /= grid;
        idx += (off + q % ts) * s;
        q /= ts;
        s *= shape[d];
    }
    const double v = tt_rng_value(tt_rng_mix64((tt_ulong)seed), (tt_ulong)idx, dist, sizeof(T) == 4, (double)lo,
                                  (double)hi);
    y[i] = (T)v;
}
