/* Special functions of one double value: the gamma family (digamma, trigamma, polygamma, the
 * Hurwitz zeta function, the regularised incomplete gamma functions), the modified Bessel
 * functions I0 and I1 (plain and exponentially scaled) and erfcx.  One source for every body:
 * the CPU bodies include it through csrc/kernels/cpu/tt_cpu.h, the device bodies through
 * tiletrain.cl (OpenCL C, and CUDA through csrc/kernels/cuda/device_kernels.cu), and the
 * kernels of csrc/kernels.def call these functions from their `expr` column.  float32 tiles
 * compute in double and round once.
 *
 * The portable dialect (csrc/kernels/opencl/tt_device.h): DEVFN functions, no recursion, no
 * tables outside functions, every loop bounded (a NaN never spins).  The values follow
 * PyTorch's conventions at the poles and edges (digamma(-0) = +inf, NaN at the negative
 * integers, zeta(1, q) = inf, ...), and where PyTorch's own formula is a truncated series
 * (trigamma) or rounds an intermediate (1 + a in the incomplete gamma's small-x series,
 * exp(x) before the scaling of I0/I1) the same formula is used, so the values are torch's. */
#ifndef TT_SPECIAL_H
#define TT_SPECIAL_H

#define TT_SP_EPS 1.1102230246251565e-16     /* 2^-53: the relative size where sums stop */
#define TT_SP_PI 3.14159265358979323846
#define TT_SP_INV_SQRT_PI 0.56418958354775628695
#define TT_SP_LOG_SQRT_2PI 0.91893853320467274178

/* psi(x) = d/dx log Gamma(x).  x < 0: the reflection psi(x) = psi(1 - x) - pi cot(pi x), the
 * cotangent taken of the fractional part; then the recurrence psi(x) = psi(x + 1) - 1/x up to
 * x >= 10 and the asymptotic series log x - 1/(2x) - sum B_2k / (2k x^2k) (k <= 7: below 1e-17
 * relative at 10).  -inf at +0, +inf at -0, NaN at the negative integers and -inf. */
DEVFN double tt_digamma(double x)
{
    double acc = 0.0;
    if (x == 0.0)
        return x < 0.0 || 1.0 / x < 0.0 ? INFINITY : -INFINITY;
    if (x < 0.0) {
        if (x == floor(x))
            return NAN;
        acc = -TT_SP_PI / tan(TT_SP_PI * (x - trunc(x)));
        x = 1.0 - x;
    }
    while (x < 10.0) {
        acc -= 1.0 / x;
        x += 1.0;
    }
    if (x == 10.0)
        return acc + 2.25175258906672110765; /* psi(10) */
    const double z = x < 1e17 ? 1.0 / (x * x) : 0.0;
    const double s = z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132
                     - z * (691.0 / 32760 - z * (1.0 / 12)))))));
    return acc + log(x) - 0.5 / x - s;
}

/* psi'(x) as PyTorch computes it: the reflection pi^2 / sin^2(pi x) - psi'(1 - x) below 1/2,
 * six steps of psi'(x) = psi'(x + 1) + 1/x^2, then 1/x + 1/(2x^2) + 1/(6x^3) - 1/(30x^5) +
 * 1/(42x^7): the series stops there, so the values are within ~5e-10 relative of the exact ones
 * (at x ~ 1.1), and equal to torch's. */
DEVFN double tt_trigamma(double x)
{
    double sign = 1.0, acc = 0.0;
    if (x < 0.5) {
        const double s = sin(TT_SP_PI * x);
        sign = -1.0;
        acc = -(TT_SP_PI * TT_SP_PI) / (s * s);
        x = 1.0 - x;
    }
    for (int i = 0; i < 6; i++) {
        acc += 1.0 / (x * x);
        x += 1.0;
    }
    const double ixx = 1.0 / (x * x);
    acc += (1.0 + 1.0 / (2.0 * x) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / x;
    return sign * acc;
}

/* Hurwitz zeta sum_{k>=0} (q + k)^-s by Euler-Maclaurin: the terms one by one while k < 9 or
 * q + k <= 9 (or until a term no longer counts), then the tail's integral, half its first term
 * and the corrections B_2j/(2j)! s (s+1) .. (s+2j-2) a^(-s-2j+1), j <= 12.  q may be negative
 * (then s is an integer): the loop walks up from q, at most 1e6 steps (tt_zeta). */
DEVFN double tt_zeta_sum(double s, double q)
{
    const double c[12] = {
        0.083333333333333333, -0.0013888888888888889, 3.3068783068783069e-05, -8.2671957671957672e-07,
        2.0876756987868099e-08, -5.2841901386874932e-10, 1.3382536530684679e-11, -3.3896802963225829e-13,
        8.5860620562778446e-15, -2.1748686985580619e-16, 5.5090028283602295e-18, -1.3954464685812523e-19};
    double total = pow(q, -s), a = q, b = 0.0;
    int i = 0;
    while (i < 9 || a <= 9.0) {
        i++;
        a += 1.0;
        b = pow(a, -s);
        total += b;
        if (-TT_SP_EPS * total < b && b < TT_SP_EPS * total)
            return total;
    }
    total += b * a / (s - 1.0);
    total -= 0.5 * b;
    double fac = 1.0, k = 0.0;
    for (int j = 0; j < 12; j++) {
        fac *= s + k;
        b /= a;
        const double t = fac * b * c[j];
        total += t;
        if (fabs(t / total) < TT_SP_EPS)
            break;
        k += 1.0;
        fac *= s + k;
        b /= a;
        k += 1.0;
    }
    return total;
}

/* zeta(s, q): inf at s = 1 and at q = 0, -1, -2, ..; NaN for s < 1, and for q < 0 with s not an
 * integer.  q below -1e6: q = f - N (0 < f < 1) and zeta(s, q) = zeta(s, f) + (-1)^s (zeta(s,
 * 1 - f) - zeta(s, N + 1 - f)), three sums instead of N terms (good to ~1e-16 of zeta(s, f)). */
DEVFN double tt_zeta(double s, double q)
{
    if (s == 1.0)
        return INFINITY;
    if (s < 1.0)
        return NAN;
    if (q <= 0.0) {
        if (q == floor(q))
            return INFINITY;
        if (s != floor(s))
            return NAN;
        if (q < -1e6) {
            const double n = ceil(-q), f = q + n;
            const double neg = tt_zeta_sum(s, 1.0 - f) - tt_zeta_sum(s, n + 1.0 - f);
            return tt_zeta_sum(s, f) + (fmod(s, 2.0) == 0.0 ? neg : -neg);
        }
    }
    return tt_zeta_sum(s, q);
}

/* The n-th derivative of digamma: digamma (n = 0), trigamma (n = 1), else
 * (-1)^(n+1) n! zeta(n + 1, x) (n! overflows to inf beyond n = 170). */
DEVFN double tt_polygamma(int n, double x)
{
    if (n == 0)
        return tt_digamma(x);
    if (n == 1)
        return tt_trigamma(x);
    double f = 1.0;
    for (int k = 2; k <= n && k <= 171; k++)
        f *= k;
    return (n % 2 ? f : -f) * tt_zeta(n + 1.0, x);
}

/* Modified Bessel functions of the first kind, I0 (nu = 0) and I1 (nu = 1), times e^-|x| when
 * scaled.  |x| <= 20: the power series sum (x/2)^(2k+nu) / (k! (k+nu)!) (positive terms, about
 * 50 of them at 20); beyond: the asymptotic expansion e^|x| / sqrt(2 pi |x|) sum_k (-1)^k
 * prod_{j<=k} (4nu^2 - (2j-1)^2) / (k! (8|x|)^k), summed until a term no longer counts (below
 * 2^-53 of the sum from 20 on).  Unscaled, e^|x| is taken whole, as torch's: inf from |x| = 709.8
 * on, and NaN at +-inf. */
DEVFN double tt_bessel_i(int nu, int scaled, double x)
{
    const double ax = fabs(x);
    double s;
    if (isnan(x))
        return x;
    if (ax <= 20.0) {
        const double h = 0.5 * ax, q = h * h;
        double t = nu ? h : 1.0;
        s = t;
        for (int k = 1; k < 200; k++) {
            t *= q / ((double)k * (double)(k + nu));
            s += t;
            if (t <= TT_SP_EPS * s)
                break;
        }
        if (scaled)
            s *= exp(-ax);
    } else {
        const double mu = 4.0 * nu * nu;
        double t = 1.0;
        s = 1.0;
        for (int k = 1; k < 200; k++) {
            const double m = 2.0 * k - 1.0;
            t *= (m * m - mu) / (8.0 * k * ax);
            s += t;
            if (fabs(t) <= TT_SP_EPS * fabs(s))
                break;
        }
        s /= sqrt(2.0 * TT_SP_PI * ax);
        if (!scaled)
            s *= exp(ax);
    }
    return nu && x < 0.0 ? -s : s;
}

/* The derivative of tt_bessel_i(nu, scaled, .) (torch's formulas): I0' = I1, (e^-|x| I0)' =
 * e^-|x| (I1 - sgn(x) I0), I1' = I0 - I1 / x, (e^-|x| I1)' = e^-|x| (I0 - I1 (sgn(x) + 1/x));
 * the last two are 1/2 where |x| <= 2^-52 (torch's gate: there the formula is 1/2 to rounding). */
DEVFN double tt_bessel_i_grad(int nu, int scaled, double x)
{
    const double sg = (double)(x > 0.0) - (double)(x < 0.0);
    if (nu == 0)
        return scaled ? tt_bessel_i(1, 1, x) - sg * tt_bessel_i(0, 1, x) : tt_bessel_i(1, 0, x);
    if (fabs(x) <= 2.220446049250313e-16)
        return 0.5;
    const double y = tt_bessel_i(1, scaled, x);
    return scaled ? tt_bessel_i(0, 1, x) - y * (sg + 1.0 / x) : tt_bessel_i(0, 0, x) - y / x;
}

/* erfcx(x) = e^(x^2) erfc(x).  x < 12: the product, e^(x^2) as e^hi e^lo with x^2 = hi + lo
 * exactly (fma), so only erfc's and exp's own roundings remain (inf below -26.7, where e^(x^2)
 * overflows); x >= 12: the asymptotic series 1/(x sqrt(pi)) sum (-1)^k (2k-1)!! / (2x^2)^k
 * (at most ~12 terms). */
DEVFN double tt_erfcx(double x)
{
    if (isnan(x))
        return x;
    if (x < 12.0) {
        if (x < -26.7)
            return INFINITY;
        const double hi = x * x, lo = fma(x, x, -hi);
        return exp(hi) * exp(lo) * erfc(x);
    }
    if (x > 1e150)
        return TT_SP_INV_SQRT_PI / x;
    const double w = 0.5 / (x * x);
    double t = 1.0, s = 1.0;
    for (int k = 1; k < 40; k++) {
        t *= -(2.0 * k - 1.0) * w;
        s += t;
        if (fabs(t) <= TT_SP_EPS * s)
            break;
    }
    return s * TT_SP_INV_SQRT_PI / x;
}

/* ---- the regularised incomplete gamma functions P(a, x) = gamma(a, x) / Gamma(a) and
 * Q(a, x) = 1 - P(a, x), a > 0, x >= 0.  The method by region is torch's (Cephes' and SciPy's
 * choice): P for x > 1 and x > a as 1 - Q, else by its power series; Q for x > 1.1 by the
 * continued fraction (x >= a) or as 1 - P, for x <= 1.1 by its series in x (tt_igammac_series)
 * or, when a is large enough for P's series to converge fast, as 1 - P.  Where torch switches
 * to Temme's uniform asymptotic expansion (20 < a < 200, |x - a| < 0.3 a; a > 200, |x - a| <
 * 4.5 sqrt(a)) these functions keep the series and the continued fraction, whose prefactor
 * x^a e^-x / Gamma(a) is computed without cancellation (tt_igamma_fac): within ~1e-14 of the
 * exact values there, where torch's expansion is within ~2e-9.  For a > 1e6 and |x - a| <
 * 0.3 a, where the series would take ~sqrt(a) terms, the expansion (tt_igamma_uniform). */

/* log(1 + d) - d without cancellation: for |d| < 1/2, with u = d / (2 + d),
 * -d u + 2 u^3 (1/3 + u^2/5 + u^4/7 + ..) (log(1 + d) = 2 atanh(u)). */
DEVFN double tt_log1pmx(double d)
{
    if (!(fabs(d) < 0.5))
        return log1p(d) - d;
    const double u = d / (2.0 + d), u2 = u * u;
    double s = 0.0, p = 1.0;
    for (int k = 3; k < 200; k += 2) {
        const double t = p / k;
        s += t;
        if (t <= TT_SP_EPS * s)
            break;
        p *= u2;
    }
    return -d * u + 2.0 * u * u2 * s;
}

/* x^a e^-x / Gamma(a).  a < 20: exp(a log x - x - lgamma(a)).  a >= 20: Stirling's form
 * sqrt(a / 2pi) exp(a (log(x/a) + 1 - x/a) - stirlerr(a)), log(x/a) + 1 - x/a = log1pmx((x -
 * a) / a) near x = a, and stirlerr(a) = lgamma(a) - (a - 1/2) log a + a - log sqrt(2 pi) by its
 * series (six terms: below 1e-17 absolute from a = 20). */
DEVFN double tt_igamma_fac(double a, double x)
{
    if (a < 20.0)
        return exp(a * log(x) - x - lgamma(a));
    const double d = (x - a) / a, z = 1.0 / (a * a);
    const double stirlerr = (1.0 / 12 - z * (1.0 / 360 - z * (1.0 / 1260 - z * (1.0 / 1680 - z * (1.0 / 1188
                             - z * (691.0 / 360360)))))) / a;
    const double l = fabs(d) < 0.5 ? a * tt_log1pmx(d) : a * log(x / a) + (a - x);
    return exp(l - stirlerr) * sqrt(a / (2.0 * TT_SP_PI));
}

/* P(a, x) = x^a e^-x / Gamma(a + 1) sum_k x^k / ((a + 1) .. (a + k)) (positive terms). */
DEVFN double tt_igamma_series(double a, double x)
{
    const double f = tt_igamma_fac(a, x);
    if (f == 0.0)
        return 0.0;
    double s = 1.0, t = 1.0, r = a;
    for (int k = 0; k < 1000000; k++) {
        r += 1.0;
        t *= x / r;
        s += t;
        if (t <= TT_SP_EPS * s)
            break;
    }
    return s * f / a;
}

/* Q(a, x) = x^a e^-x / Gamma(a) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a
 * - ..))), the continued fraction evaluated forward (modified Lentz). */
DEVFN double tt_igammac_cfrac(double a, double x)
{
    const double f = tt_igamma_fac(a, x), tiny = 1e-300;
    if (f == 0.0)
        return 0.0;
    double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
    for (int i = 1; i < 1000000; i++) {
        const double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < tiny)
            d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1.0 / d;
        const double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < TT_SP_EPS)
            break;
    }
    return f * h;
}

/* Q(a, x) for small x: 1 - x^a / Gamma(a + 1) - x^a / Gamma(a) sum_{n>=1} (-x)^n / (n! (a + n)),
 * the first part as -expm1(a log x - lgamma(1 + a)) (with 1 + a rounded, as torch's: its
 * relative accuracy for tiny a is that of 1 + a). */
DEVFN double tt_igammac_series(double a, double x)
{
    double fac = 1.0, s = 0.0;
    for (int n = 1; n < 2000; n++) {
        fac *= -x / n;
        const double t = fac / (a + n);
        s += t;
        if (fabs(t) <= TT_SP_EPS * fabs(s))
            break;
    }
    const double lx = log(x);
    return -expm1(a * lx - lgamma(1.0 + a)) - exp(a * lx - lgamma(a)) * s;
}

/* Temme's uniform expansion for large a: with lambda = x / a, eta = sign(lambda - 1)
 * sqrt(2 (lambda - 1 - log lambda)), Q = erfc(eta sqrt(a/2)) / 2 + exp(-a eta^2/2) / sqrt(2 pi a)
 * (c0(eta) + c1(eta) / a) (P: the complement, -R), c0 = 1/(lambda - 1) - 1/eta, c1 = 1/eta^3 -
 * 1/(lambda-1)^3 - 1/(lambda-1)^2 - 1/(12 (lambda-1)) (their Taylor series near eta = 0).  The
 * next term is ~4e-3 / a^2 of the exponential's: below 1e-14 for a > 1e6. */
DEVFN double tt_igamma_uniform(double a, double x, int upper)
{
    const double mu = (x - a) / a, l = tt_log1pmx(mu);
    const double eta = mu >= 0.0 ? sqrt(-2.0 * l) : -sqrt(-2.0 * l);
    double c0, c1;
    if (fabs(eta) < 0.05) {
        c0 = -1.0 / 3 + eta * (1.0 / 12 + eta * (-2.0 / 135 + eta * (1.0 / 864 + eta * (1.0 / 2835
             + eta * (-139.0 / 777600 + eta * (1.0 / 25515))))));
        c1 = -1.0 / 540 + eta * (-1.0 / 288 + eta * (1.0 / 378 + eta * (-77.0 / 77760 + eta * (1.0 / 4860))));
    } else {
        c0 = 1.0 / mu - 1.0 / eta;
        c1 = 1.0 / (eta * eta * eta) - 1.0 / (mu * mu * mu) - 1.0 / (mu * mu) - 1.0 / (12.0 * mu);
    }
    const double r = exp(a * l - TT_SP_LOG_SQRT_2PI) / sqrt(a) * (c0 + c1 / a);
    const double u = eta * sqrt(0.5 * a);
    return upper ? 0.5 * erfc(u) + r : 0.5 * erfc(-u) - r;
}

/* P(a, x) (upper = 0) or Q(a, x) (upper = 1), with torch's values at the edges, tested in its
 * order: NaN for a < 0 or x < 0; a = 0: P = 1 for x > 0, else NaN; x = 0: P = 0; a = inf: P = 0
 * (NaN at x = inf); x = inf: P = 1; then NaN for a NaN. */
DEVFN double tt_igamma(double a, double x, int upper)
{
    if (x < 0.0 || a < 0.0)
        return NAN;
    if (a == 0.0)
        return x > 0.0 ? (upper ? 0.0 : 1.0) : NAN;
    if (x == 0.0)
        return upper ? 1.0 : 0.0;
    if (isinf(a))
        return isinf(x) ? NAN : (upper ? 1.0 : 0.0);
    if (isinf(x))
        return upper ? 0.0 : 1.0;
    if (isnan(a) || isnan(x))
        return NAN;
    if (a > 1e6 && fabs(x - a) < 0.3 * a)
        return tt_igamma_uniform(a, x, upper);
    if (!upper)
        return x > 1.0 && x > a ? 1.0 - (x > 1.1 ? tt_igammac_cfrac(a, x) : tt_igammac_series(a, x))
                                : tt_igamma_series(a, x);
    if (x > 1.1)
        return x < a ? 1.0 - tt_igamma_series(a, x) : tt_igammac_cfrac(a, x);
    const int by_p = x <= 0.5 ? -0.4 / log(x) < a : x * 1.1 < a;
    return by_p ? 1.0 - tt_igamma_series(a, x) : tt_igammac_series(a, x);
}

#endif
