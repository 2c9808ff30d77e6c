/* Attention (csrc/kernels/cpu/attention.c): head split/merge permutes, and flash attention
 * on (bh, t, hd) tiles.  Forward: one group per query row, keys in chunks of TT_DEV_LOCAL
 * with an online softmax.  Backward: groups [0, bh*tq) accumulate dq for one query row,
 * groups [bh*tq, bh*(tq+tk)) accumulate dk and dv for one key row; both recompute the
 * probabilities from the row logsumexp, so no group writes another's output. */

/* columns c0 .. c0 + nh*hd - 1 of x tile (nb, nt, xw) -> y tile (nb, nh, nt, hd); e indexes y */
KERNEL SUF(tt_heads_split)(GLOBAL const T *x, GLOBAL T *y, tt_long nb, tt_long nt, tt_long nh, tt_long hd,
                           tt_long xw, tt_long c0)
{
    const tt_long e = GID0();
    if (e >= nb * nh * nt * hd)
        return;
    const tt_long d = e % hd, t = (e / hd) % nt, h = (e / (hd * nt)) % nh, b = e / (hd * nt * nh);
    y[e] = x[(b * nt + t) * xw + c0 + h * hd + d];
}

/* y tile (nb, nh, nt, hd) -> columns c0 .. c0 + nh*hd - 1 of x tile (nb, nt, xw); e indexes those
 * columns (nb, nt, nh*hd) */
KERNEL SUF(tt_heads_merge)(GLOBAL const T *y, GLOBAL T *x, tt_long nb, tt_long nh, tt_long nt, tt_long hd,
                           tt_long xw, tt_long c0)
{
    const tt_long e = GID0();
    if (e >= nb * nh * nt * hd)
        return;
    const tt_long d = e % hd, h = (e / hd) % nh, t = (e / (hd * nh)) % nt, b = e / (hd * nh * nt);
    x[(b * nt + t) * xw + c0 + h * hd + d] = y[((b * nh + h) * nt + t) * hd + d];
}

DEVFN ACC SUF(tt_dot)(GLOBAL const T *a, GLOBAL const T *b, tt_long n)
{
    ACC acc = 0;
    for (tt_long d = 0; d < n; d++)
        acc += (ACC)a[d] * (ACC)b[d];
    return acc;
}

KERNEL SUF(tt_attn_fwd)(GLOBAL const T *q, GLOBAL const T *k, GLOBAL const T *v, GLOBAL T *o, GLOBAL T *m,
                        GLOBAL T *l, tt_long bh, tt_long tq, tt_long tk, tt_long hd, tt_long qoff, tt_long koff,
                        tt_long causal, tt_long init, tt_long group, R scale)
{
    LOCAL ACC p[TT_DEV_LOCAL];
    LOCAL ACC red[TT_DEV_LOCAL];
    const tt_long row = GROUP0(), b = row / tq, r = row % tq, lid = LID0();
    const tt_long bk = b / (group > 1 ? group : 1); /* the key/value row this query row reads */
    GLOBAL const T *Q = q + row * hd;
    GLOBAL const T *K = k + bk * tk * hd;
    GLOBAL const T *V = v + bk * tk * hd;
    GLOBAL T *O = o + row * hd;
    const tt_long nv = tt_visible(causal, qoff + r, koff, tk);
    ACC mrun = init ? -(ACC)TT_INF : (ACC)m[row];
    ACC lrun = init ? (ACC)0 : (ACC)l[row];
    if (init) /* each work-item owns the same columns d throughout */
        for (tt_long d = lid; d < hd; d += TT_DEV_LOCAL)
            O[d] = (T)0;
    for (tt_long c0 = 0; c0 < nv; c0 += TT_DEV_LOCAL) {
        const tt_long c = c0 + lid;
        ACC sc = -(ACC)TT_INF;
        if (c < nv)
            sc = (ACC)scale * SUF(tt_dot)(Q, K + c * hd, hd);
        const ACC cmax = tt_block_max(sc, red);
        const ACC mnew = cmax > mrun ? cmax : mrun;
        const ACC pc = c < nv ? exp(sc - mnew) : (ACC)0;
        p[lid] = pc;
        const ACC psum = tt_block_sum(pc, red); /* its barriers also publish p */
        const ACC alpha = mrun == -(ACC)TT_INF ? (ACC)0 : exp(mrun - mnew);
        lrun = alpha * lrun + psum;
        mrun = mnew;
        const tt_long nc = nv - c0 < TT_DEV_LOCAL ? nv - c0 : TT_DEV_LOCAL;
        for (tt_long d = lid; d < hd; d += TT_DEV_LOCAL) {
            ACC acc = 0;
            for (tt_long jj = 0; jj < nc; jj++)
                acc += p[jj] * (ACC)V[(c0 + jj) * hd + d];
            O[d] = (T)((ACC)O[d] * alpha + acc);
        }
        BARRIER();
    }
    if (lid == 0) {
        m[row] = (T)mrun;
        l[row] = (T)lrun;
    }
}

/* o /= l, m += log(l) per row; a row that saw no key: o = 0, m = -inf */
KERNEL SUF(tt_attn_fwd_norm)(GLOBAL T *o, GLOBAL T *m, GLOBAL const T *l, tt_long bh, tt_long tq, tt_long hd)
{
    const tt_long r = GID0();
    if (r >= bh * tq)
        return;
    const T L = l[r];
    if (L > (T)0) {
        const T inv = (T)1 / L;
        for (tt_long d = 0; d < hd; d++)
            o[r * hd + d] *= inv;
        m[r] += (T)log((ACC)L);
    } else {
        for (tt_long d = 0; d < hd; d++)
            o[r * hd + d] = (T)0;
        m[r] = (T)(-(ACC)TT_INF);
    }
}

/* st[r] = (lse, rowsum(dO * O)) */
KERNEL SUF(tt_attn_bwd_rows)(GLOBAL const T *dout, GLOBAL const T *o, GLOBAL const T *lse, GLOBAL T *st, tt_long bh,
                             tt_long tq, tt_long hd)
{
    const tt_long r = GID0();
    if (r >= bh * tq)
        return;
    st[2 * r] = lse[r];
    st[2 * r + 1] = (T)SUF(tt_dot)(dout + r * hd, o + r * hd, hd);
}

KERNEL SUF(tt_attn_bwd)(GLOBAL const T *q, GLOBAL const T *k, GLOBAL const T *v, GLOBAL const T *dout,
                        GLOBAL const T *st, GLOBAL T *dq, GLOBAL T *dk, GLOBAL T *dv, tt_long bh, tt_long tq,
                        tt_long tk, tt_long hd, tt_long qoff, tt_long koff, tt_long causal, tt_long initq,
                        tt_long initkv, tt_long group, R scale)
{
    LOCAL ACC pa[TT_DEV_LOCAL];
    LOCAL ACC pb[TT_DEV_LOCAL];
    const tt_long g = GROUP0(), lid = LID0(), grp = group > 1 ? group : 1;
    const ACC sc = scale;
    if (g < bh * tq) { /* query row: dq += scale dS K */
        const tt_long b = g / tq, r = g % tq, bk = b / grp;
        GLOBAL const T *Q = q + g * hd;
        GLOBAL const T *dO = dout + g * hd;
        GLOBAL const T *K = k + bk * tk * hd;
        GLOBAL const T *V = v + bk * tk * hd;
        GLOBAL T *dQ = dq + g * hd;
        const ACC lse = st[2 * g], delta = st[2 * g + 1];
        const tt_long nv = tt_visible(causal, qoff + r, koff, tk);
        if (initq)
            for (tt_long d = lid; d < hd; d += TT_DEV_LOCAL)
                dQ[d] = (T)0;
        for (tt_long c0 = 0; c0 < nv; c0 += TT_DEV_LOCAL) {
            const tt_long c = c0 + lid;
            ACC ds = 0;
            if (c < nv) {
                const ACC pp = exp(sc * SUF(tt_dot)(Q, K + c * hd, hd) - lse);
                ds = pp * (SUF(tt_dot)(dO, V + c * hd, hd) - delta);
            }
            pa[lid] = ds;
            BARRIER();
            const tt_long nc = nv - c0 < TT_DEV_LOCAL ? nv - c0 : TT_DEV_LOCAL;
            for (tt_long d = lid; d < hd; d += TT_DEV_LOCAL) {
                ACC acc = 0;
                for (tt_long jj = 0; jj < nc; jj++)
                    acc += pa[jj] * (ACC)K[(c0 + jj) * hd + d];
                dQ[d] = (T)((ACC)dQ[d] + sc * acc);
            }
            BARRIER();
        }
    } else { /* key row: dv += P^T dO, dk += scale dS^T Q, summed over the group's query rows */
        const tt_long g2 = g - bh * tq, bk = g2 / tk, c = g2 % tk;
        GLOBAL const T *Kc = k + g2 * hd;
        GLOBAL const T *Vc = v + g2 * hd;
        GLOBAL T *dK = dk + g2 * hd;
        GLOBAL T *dV = dv + g2 * hd;
        tt_long r0min = 0;
        if (causal) { /* query r sees key c when koff + c <= qoff + r */
            r0min = koff + c - qoff;
            if (r0min < 0)
                r0min = 0;
        }
        if (initkv)
            for (tt_long d = lid; d < hd; d += TT_DEV_LOCAL) {
                dK[d] = (T)0;
                dV[d] = (T)0;
            }
        for (tt_long b = bk * grp; b < (bk + 1) * grp; b++) {
            for (tt_long r0 = r0min; r0 < tq; r0 += TT_DEV_LOCAL) {
                const tt_long r = r0 + lid, qr = b * tq + r;
                ACC pv = 0, ds = 0;
                if (r < tq) {
                    const ACC lse = st[2 * qr], delta = st[2 * qr + 1];
                    pv = exp(sc * SUF(tt_dot)(q + qr * hd, Kc, hd) - lse);
                    ds = pv * (SUF(tt_dot)(dout + qr * hd, Vc, hd) - delta);
                }
                pa[lid] = pv;
                pb[lid] = ds;
                BARRIER();
                const tt_long nr = tq - r0 < TT_DEV_LOCAL ? tq - r0 : TT_DEV_LOCAL;
                for (tt_long d = lid; d < hd; d += TT_DEV_LOCAL) {
                    ACC av = 0, ak = 0;
                    for (tt_long jj = 0; jj < nr; jj++) {
                        const tt_long e = (b * tq + r0 + jj) * hd + d;
                        av += pa[jj] * (ACC)dout[e];
                        ak += pb[jj] * (ACC)q[e];
                    }
                    dV[d] = (T)((ACC)dV[d] + av);
                    dK[d] = (T)((ACC)dK[d] + sc * ak);
                }
                BARRIER();
            }
        }
    }
}

/* Rotary embedding (csrc/kernels/cpu/attention.c tt_cpu_rope): one work-item per (row, pair) */
KERNEL SUF(tt_rope)(GLOBAL const T *x, GLOBAL T *y, tt_long m, tt_long k, tt_long n, tt_long koff, tt_long inverse,
                    tt_long pos0, R theta)
{
    const tt_long e = GID0(), h = n / 2;
    if (e >= m * k * h)
        return;
    const tt_long i = e % h, row = e / h, t = row % k;
    const float inv = 1.0f / pow((float)theta, (float)(2 * i) / (float)n);
    const float ang = (float)(pos0 + koff + t) * inv;
    const ACC c = cos((ACC)ang), s = (inverse ? -(ACC)1 : (ACC)1) * sin((ACC)ang);
    const ACC x1 = x[row * n + i], x2 = x[row * n + i + h];
    y[row * n + i] = (T)(x1 * c - x2 * s);
    y[row * n + i + h] = (T)(x2 * c + x1 * s);
}
