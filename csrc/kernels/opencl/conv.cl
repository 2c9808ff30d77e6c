/* Convolution, pooling and batch norm (csrc/kernels/cpu/conv.c, csrc/expand_conv.c): direct
 * forms, one work-item per element written (no im2col, no scratch), so every body is a
 * gather without atomics: conv_bwd_x and the pools' backward visit, for each input element,
 * the output windows that contain it.  Geometry is 3-D as on the CPU: a tile is
 * (nb, C, l0, l1, l2), its output (nb, C', o0, o1, o2); kernel k*, stride s*, left padding
 * p* (may be negative in a halo window), dilation d*; avg pools clip windows at e*.  The
 * per-channel reductions of batch norm are one work-item per channel (bn_merge, run once per
 * rank under MPI, is CPU-only).  region_add is region_copy's box added in. */

/* the output position along one axis whose window's tap `kk` lands on input position i, or -1 */
DEVFN tt_long SUF(tt_conv_out_of)(tt_long i, tt_long kk, tt_long s, tt_long p, tt_long d, tt_long o)
{
    const tt_long num = i + p - kk * d;
    if (num < 0 || num % s)
        return -1;
    return num / s < o ? num / s : -1;
}

KERNEL SUF(tt_conv_fwd)(GLOBAL const T *x, GLOBAL T *y, GLOBAL const T *w, GLOBAL const T *b, tt_long nb,
                        tt_long cin, tt_long cout, tt_long groups, tt_long l0, tt_long l1, tt_long l2, tt_long o0,
                        tt_long o1, tt_long o2, tt_long k0, tt_long k1, tt_long k2, tt_long s0, tt_long s1,
                        tt_long s2, tt_long p0, tt_long p1, tt_long p2, tt_long d0, tt_long d1, tt_long d2)
{
    tt_long r = GID0();
    const tt_long O = o0 * o1 * o2;
    if (r >= nb * cout * O)
        return;
    const tt_long oc = r % o2, ob = (r / o2) % o1, oa = (r / (o1 * o2)) % o0, co = (r / O) % cout, n = r / (O * cout);
    const tt_long cg = cin / groups, cog = cout / groups, gr = co / cog;
    ACC acc = b[co];
    for (tt_long c = 0; c < cg; c++) {
        GLOBAL const T *xp = x + (n * cin + gr * cg + c) * l0 * l1 * l2;
        GLOBAL const T *wp = w + (co * cg + c) * k0 * k1 * k2;
        for (tt_long ka = 0; ka < k0; ka++) {
            const tt_long ia = oa * s0 - p0 + ka * d0;
            if (ia < 0 || ia >= l0)
                continue;
            for (tt_long kb = 0; kb < k1; kb++) {
                const tt_long ib = ob * s1 - p1 + kb * d1;
                if (ib < 0 || ib >= l1)
                    continue;
                for (tt_long kc = 0; kc < k2; kc++) {
                    const tt_long ic = oc * s2 - p2 + kc * d2;
                    if (ic >= 0 && ic < l2)
                        acc += (ACC)xp[(ia * l1 + ib) * l2 + ic] * (ACC)wp[(ka * k1 + kb) * k2 + kc];
                }
            }
        }
    }
    y[r] = (T)acc;
}

KERNEL SUF(tt_conv_bwd_x)(GLOBAL const T *dy, GLOBAL T *dx, GLOBAL const T *w, tt_long nb, tt_long cin,
                          tt_long cout, tt_long groups, tt_long l0, tt_long l1, tt_long l2, tt_long o0, tt_long o1,
                          tt_long o2, tt_long k0, tt_long k1, tt_long k2, tt_long s0, tt_long s1, tt_long s2,
                          tt_long p0, tt_long p1, tt_long p2, tt_long d0, tt_long d1, tt_long d2)
{
    tt_long r = GID0();
    const tt_long L = l0 * l1 * l2, O = o0 * o1 * o2;
    if (r >= nb * cin * L)
        return;
    const tt_long ic = r % l2, ib = (r / l2) % l1, ia = (r / (l1 * l2)) % l0, ci = (r / L) % cin, n = r / (L * cin);
    const tt_long cg = cin / groups, cog = cout / groups, gr = ci / cg, c = ci % cg;
    ACC acc = 0;
    for (tt_long ka = 0; ka < k0; ka++) {
        const tt_long oa = SUF(tt_conv_out_of)(ia, ka, s0, p0, d0, o0);
        if (oa < 0)
            continue;
        for (tt_long kb = 0; kb < k1; kb++) {
            const tt_long ob = SUF(tt_conv_out_of)(ib, kb, s1, p1, d1, o1);
            if (ob < 0)
                continue;
            for (tt_long kc = 0; kc < k2; kc++) {
                const tt_long oc = SUF(tt_conv_out_of)(ic, kc, s2, p2, d2, o2);
                if (oc < 0)
                    continue;
                for (tt_long co = gr * cog; co < (gr + 1) * cog; co++)
                    acc += (ACC)dy[(n * cout + co) * O + (oa * o1 + ob) * o2 + oc] *
                           (ACC)w[(co * cg + c) * k0 * k1 * k2 + (ka * k1 + kb) * k2 + kc];
            }
        }
    }
    dx[r] = (T)acc;
}

/* dw (cout, cin/groups, k) and db (cout), overwritten (first) or accumulated: one work-item
 * per weight; the items of tap 0 of input channel 0 also sum db. */
KERNEL SUF(tt_conv_bwd_w)(GLOBAL const T *x, GLOBAL const T *dy, GLOBAL T *dw, GLOBAL T *db, tt_long nb,
                          tt_long cin, tt_long cout, tt_long groups, tt_long l0, tt_long l1, tt_long l2, tt_long o0,
                          tt_long o1, tt_long o2, tt_long k0, tt_long k1, tt_long k2, tt_long s0, tt_long s1,
                          tt_long s2, tt_long p0, tt_long p1, tt_long p2, tt_long d0, tt_long d1, tt_long d2,
                          tt_long first)
{
    const tt_long cg = cin / groups, cog = cout / groups, K = k0 * k1 * k2;
    tt_long r = GID0();
    if (r >= cout * cg * K)
        return;
    const tt_long kc = r % k2, kb = (r / k2) % k1, ka = (r / (k1 * k2)) % k0, c = (r / K) % cg, co = r / (K * cg);
    const tt_long gr = co / cog, L = l0 * l1 * l2, O = o0 * o1 * o2;
    ACC acc = 0, bacc = 0;
    const int bias = c == 0 && ka == 0 && kb == 0 && kc == 0;
    for (tt_long n = 0; n < nb; n++) {
        GLOBAL const T *xp = x + (n * cin + gr * cg + c) * L;
        GLOBAL const T *gp = dy + (n * cout + co) * O;
        for (tt_long oa = 0; oa < o0; oa++) {
            const tt_long ia = oa * s0 - p0 + ka * d0;
            const int ina = ia >= 0 && ia < l0;
            for (tt_long ob = 0; ob < o1; ob++) {
                const tt_long ib = ob * s1 - p1 + kb * d1;
                const int inb = ina && ib >= 0 && ib < l1;
                for (tt_long oc = 0; oc < o2; oc++) {
                    const ACC g = gp[(oa * o1 + ob) * o2 + oc];
                    const tt_long ic = oc * s2 - p2 + kc * d2;
                    if (inb && ic >= 0 && ic < l2)
                        acc += g * (ACC)xp[(ia * l1 + ib) * l2 + ic];
                    if (bias)
                        bacc += g;
                }
            }
        }
    }
    dw[r] = (T)(first ? acc : (ACC)dw[r] + acc);
    if (bias)
        db[co] = (T)(first ? bacc : (ACC)db[co] + bacc);
}

/* the flat input index of the first maximum of output window (oa, ob, oc) of a plane (NaN
 * wins, as torch), -1 when the window is all padding */
DEVFN tt_long SUF(tt_pool_argmax)(GLOBAL const T *xp, tt_long oa, tt_long ob, tt_long oc, tt_long l0, tt_long l1,
                                  tt_long l2, tt_long k0, tt_long k1, tt_long k2, tt_long s0, tt_long s1, tt_long s2,
                                  tt_long p0, tt_long p1, tt_long p2, tt_long d0, tt_long d1, tt_long d2)
{
    tt_long bi = -1;
    T best = (T)0;
    for (tt_long ka = 0; ka < k0; ka++) {
        const tt_long ia = oa * s0 - p0 + ka * d0;
        if (ia < 0 || ia >= l0)
            continue;
        for (tt_long kb = 0; kb < k1; kb++) {
            const tt_long ib = ob * s1 - p1 + kb * d1;
            if (ib < 0 || ib >= l1)
                continue;
            for (tt_long kc = 0; kc < k2; kc++) {
                const tt_long ic = oc * s2 - p2 + kc * d2;
                if (ic < 0 || ic >= l2)
                    continue;
                const tt_long idx = (ia * l1 + ib) * l2 + ic;
                const T v = xp[idx];
                if (bi < 0 || v > best || TT_ISNAN(v)) {
                    best = v;
                    bi = idx;
                }
            }
        }
    }
    return bi;
}

KERNEL SUF(tt_max_pool_fwd)(GLOBAL const T *x, GLOBAL T *y, tt_long nb, tt_long c, tt_long l0, tt_long l1,
                            tt_long l2, tt_long o0, tt_long o1, tt_long o2, tt_long k0, tt_long k1, tt_long k2,
                            tt_long s0, tt_long s1, tt_long s2, tt_long p0, tt_long p1, tt_long p2, tt_long d0,
                            tt_long d1, tt_long d2)
{
    tt_long r = GID0();
    const tt_long O = o0 * o1 * o2;
    if (r >= nb * c * O)
        return;
    const tt_long oc = r % o2, ob = (r / o2) % o1, oa = (r / (o1 * o2)) % o0, pl = r / O;
    GLOBAL const T *xp = x + pl * l0 * l1 * l2;
    const tt_long bi = SUF(tt_pool_argmax)(xp, oa, ob, oc, l0, l1, l2, k0, k1, k2, s0, s1, s2, p0, p1, p2, d0, d1, d2);
    y[r] = bi >= 0 ? xp[bi] : (T)(-TT_INF);
}

KERNEL SUF(tt_max_pool_bwd)(GLOBAL const T *x, GLOBAL const T *dy, GLOBAL T *dx, tt_long nb, tt_long c, tt_long l0,
                            tt_long l1, tt_long l2, tt_long o0, tt_long o1, tt_long o2, tt_long k0, tt_long k1,
                            tt_long k2, tt_long s0, tt_long s1, tt_long s2, tt_long p0, tt_long p1, tt_long p2,
                            tt_long d0, tt_long d1, tt_long d2)
{
    tt_long r = GID0();
    const tt_long L = l0 * l1 * l2, O = o0 * o1 * o2;
    if (r >= nb * c * L)
        return;
    const tt_long ic = r % l2, ib = (r / l2) % l1, ia = (r / (l1 * l2)) % l0, pl = r / L, me = r % L;
    GLOBAL const T *xp = x + pl * L;
    ACC acc = 0;
    for (tt_long ka = 0; ka < k0; ka++) {
        const tt_long oa = SUF(tt_conv_out_of)(ia, ka, s0, p0, d0, o0);
        if (oa < 0)
            continue;
        for (tt_long kb = 0; kb < k1; kb++) {
            const tt_long ob = SUF(tt_conv_out_of)(ib, kb, s1, p1, d1, o1);
            if (ob < 0)
                continue;
            for (tt_long kc = 0; kc < k2; kc++) {
                const tt_long oc = SUF(tt_conv_out_of)(ic, kc, s2, p2, d2, o2);
                if (oc >= 0 && SUF(tt_pool_argmax)(xp, oa, ob, oc, l0, l1, l2, k0, k1, k2, s0, s1, s2, p0, p1, p2, d0,
                                                   d1, d2) == me)
                    acc += dy[pl * O + (oa * o1 + ob) * o2 + oc];
            }
        }
    }
    dx[r] = (T)acc;
}

/* an avg pool window along one axis: [a, b) clipped at the padded end e; its size in the
 * padded input (pool) and in the input (the return value) */
DEVFN tt_long SUF(tt_avg_span)(tt_long o, tt_long k, tt_long s, tt_long p, tt_long l, tt_long e, tt_long *pool)
{
    const tt_long a = o * s - p;
    tt_long b = a + k;
    if (b > e)
        b = e;
    *pool = b - a;
    const tt_long st = a < 0 ? 0 : a, en = b > l ? l : b;
    return en > st ? en - st : 0;
}

DEVFN ACC SUF(tt_avg_div)(tt_long oa, tt_long ob, tt_long oc, tt_long l0, tt_long l1, tt_long l2, tt_long k0, tt_long k1,
                     tt_long k2, tt_long s0, tt_long s1, tt_long s2, tt_long p0, tt_long p1, tt_long p2, tt_long e0,
                     tt_long e1, tt_long e2, tt_long cip, ACC divisor, tt_long *cnt)
{
    tt_long q0, q1, q2;
    *cnt = SUF(tt_avg_span)(oa, k0, s0, p0, l0, e0, &q0) * SUF(tt_avg_span)(ob, k1, s1, p1, l1, e1, &q1) *
           SUF(tt_avg_span)(oc, k2, s2, p2, l2, e2, &q2);
    return divisor > 0 ? divisor : cip ? (ACC)(q0 * q1 * q2) : (ACC)*cnt;
}

KERNEL SUF(tt_avg_pool_fwd)(GLOBAL const T *x, GLOBAL T *y, tt_long nb, tt_long c, tt_long l0, tt_long l1,
                            tt_long l2, tt_long o0, tt_long o1, tt_long o2, tt_long k0, tt_long k1, tt_long k2,
                            tt_long s0, tt_long s1, tt_long s2, tt_long p0, tt_long p1, tt_long p2, tt_long d0,
                            tt_long d1, tt_long d2, tt_long cip, tt_long e0, tt_long e1, tt_long e2, R divisor)
{
    tt_long r = GID0();
    const tt_long O = o0 * o1 * o2;
    if (r >= nb * c * O)
        return;
    const tt_long oc = r % o2, ob = (r / o2) % o1, oa = (r / (o1 * o2)) % o0, pl = r / O;
    tt_long cnt;
    const ACC div = SUF(tt_avg_div)(oa, ob, oc, l0, l1, l2, k0, k1, k2, s0, s1, s2, p0, p1, p2, e0, e1, e2, cip,
                               (ACC)divisor, &cnt);
    GLOBAL const T *xp = x + pl * l0 * l1 * l2;
    ACC acc = 0;
    for (tt_long ia = oa * s0 - p0 < 0 ? 0 : oa * s0 - p0; ia < oa * s0 - p0 + k0 && ia < l0 && ia < e0; ia++)
        for (tt_long ib = ob * s1 - p1 < 0 ? 0 : ob * s1 - p1; ib < ob * s1 - p1 + k1 && ib < l1 && ib < e1; ib++)
            for (tt_long ic = oc * s2 - p2 < 0 ? 0 : oc * s2 - p2; ic < oc * s2 - p2 + k2 && ic < l2 && ic < e2; ic++)
                acc += xp[(ia * l1 + ib) * l2 + ic];
    y[r] = cnt ? (T)(acc / div) : (T)0;
}

KERNEL SUF(tt_avg_pool_bwd)(GLOBAL const T *dy, GLOBAL T *dx, tt_long nb, tt_long c, tt_long l0, tt_long l1,
                            tt_long l2, tt_long o0, tt_long o1, tt_long o2, tt_long k0, tt_long k1, tt_long k2,
                            tt_long s0, tt_long s1, tt_long s2, tt_long p0, tt_long p1, tt_long p2, tt_long d0,
                            tt_long d1, tt_long d2, tt_long cip, tt_long e0, tt_long e1, tt_long e2, R divisor)
{
    tt_long r = GID0();
    const tt_long L = l0 * l1 * l2, O = o0 * o1 * o2;
    if (r >= nb * c * L)
        return;
    const tt_long ic = r % l2, ib = (r / l2) % l1, ia = (r / (l1 * l2)) % l0, pl = r / L;
    ACC acc = 0;
    for (tt_long ka = 0; ka < k0; ka++) {
        const tt_long oa = SUF(tt_conv_out_of)(ia, ka, s0, p0, 1, o0);
        if (oa < 0 || ia >= e0)
            continue;
        for (tt_long kb = 0; kb < k1; kb++) {
            const tt_long ob = SUF(tt_conv_out_of)(ib, kb, s1, p1, 1, o1);
            if (ob < 0 || ib >= e1)
                continue;
            for (tt_long kc = 0; kc < k2; kc++) {
                const tt_long oc = SUF(tt_conv_out_of)(ic, kc, s2, p2, 1, o2);
                if (oc < 0 || ic >= e2)
                    continue;
                tt_long cnt;
                const ACC div = SUF(tt_avg_div)(oa, ob, oc, l0, l1, l2, k0, k1, k2, s0, s1, s2, p0, p1, p2, e0, e1, e2,
                                           cip, (ACC)divisor, &cnt);
                acc += (ACC)(T)((ACC)dy[pl * O + (oa * o1 + ob) * o2 + oc] / div);
            }
        }
    }
    dx[r] = (T)acc;
}

/* ---- batch norm over (nb, c, hw) tiles ---- */

KERNEL SUF(tt_bn_stats)(GLOBAL const T *x, GLOBAL T *mean, GLOBAL T *m2, tt_long nb, tt_long c, tt_long hw,
                        tt_long first, R na)
{
    const tt_long ch = GID0();
    if (ch >= c)
        return;
    const ACC nt = (ACC)(nb * hw);
    ACC s = 0, q = 0;
    for (tt_long n = 0; n < nb; n++)
        for (tt_long i = 0; i < hw; i++)
            s += x[(n * c + ch) * hw + i];
    const ACC mb = s / nt;
    for (tt_long n = 0; n < nb; n++)
        for (tt_long i = 0; i < hw; i++) {
            const ACC d = x[(n * c + ch) * hw + i] - mb;
            q += d * d;
        }
    if (first || na <= (R)0) {
        mean[ch] = (T)mb;
        m2[ch] = (T)q;
    } else {
        const ACC ma = mean[ch], delta = mb - ma, tot = (ACC)na + nt;
        mean[ch] = (T)(ma + delta * (nt / tot));
        m2[ch] = (T)((ACC)m2[ch] + q + delta * delta * ((ACC)na * nt / tot));
    }
}

KERNEL SUF(tt_bn_fwd)(GLOBAL const T *x, GLOBAL T *y, GLOBAL const T *mean, GLOBAL const T *rstd, GLOBAL const T *w,
                      GLOBAL const T *b, tt_long nb, tt_long c, tt_long hw)
{
    const tt_long r = GID0();
    if (r >= nb * c * hw)
        return;
    const tt_long ch = (r / hw) % c;
    const T sc = rstd[ch] * w[ch];
    y[r] = (x[r] - mean[ch]) * sc + b[ch];
}

KERNEL SUF(tt_bn_bwd_stats)(GLOBAL const T *dy, GLOBAL const T *x, GLOBAL const T *mean, GLOBAL const T *rstd,
                            GLOBAL T *sdy, GLOBAL T *sdyx, tt_long nb, tt_long c, tt_long hw, tt_long first)
{
    const tt_long ch = GID0();
    if (ch >= c)
        return;
    ACC s = 0, sx = 0;
    const ACC mu = mean[ch];
    for (tt_long n = 0; n < nb; n++)
        for (tt_long i = 0; i < hw; i++) {
            const tt_long j = (n * c + ch) * hw + i;
            s += dy[j];
            sx += (ACC)dy[j] * ((ACC)x[j] - mu);
        }
    sx *= rstd[ch];
    sdy[ch] = (T)(first ? s : (ACC)sdy[ch] + s);
    sdyx[ch] = (T)(first ? sx : (ACC)sdyx[ch] + sx);
}

KERNEL SUF(tt_bn_bwd_x)(GLOBAL const T *dy, GLOBAL const T *x, GLOBAL T *dx, GLOBAL const T *mean,
                        GLOBAL const T *rstd, GLOBAL const T *w, GLOBAL const T *sdy, GLOBAL const T *sdyx, tt_long nb,
                        tt_long c, tt_long hw, R alpha)
{
    const tt_long r = GID0();
    if (r >= nb * c * hw)
        return;
    const tt_long ch = (r / hw) % c;
    const T rs = rstd[ch], sc = w[ch] * rs, mu = mean[ch];
    const T a = (T)((ACC)alpha * (ACC)sdy[ch]), bx = (T)((ACC)alpha * (ACC)sdyx[ch]);
    dx[r] = sc * (dy[r] - a - (x[r] - mu) * rs * bx);
}

KERNEL SUF(tt_region_add)(GLOBAL const T *x, GLOBAL T *y, tt_long d0, tt_long d1, tt_long d2, tt_long d3, tt_long xo,
                          tt_long xs0, tt_long xs1, tt_long xs2, tt_long xs3, tt_long yo, tt_long ys0, tt_long ys1,
                          tt_long ys2, tt_long ys3)
{
    tt_long r = GID0();
    if (r >= d0 * d1 * d2 * d3)
        return;
    const tt_long i3 = r % d3;
    r /= d3;
    const tt_long i2 = r % d2;
    r /= d2;
    const tt_long i1 = r % d1;
    const tt_long i0 = r / d1;
    y[yo + i0 * ys0 + i1 * ys1 + i2 * ys2 + i3 * ys3] += x[xo + i0 * xs0 + i1 * xs1 + i2 * xs2 + i3 * xs3];
}
