/* Creation kernels: arange, linspace and counter-based random numbers (tiletrain/tensors/creation.py).
 *
 * Random numbers are keyed by (seed, global row-major element index), never by the tile, so a
 * tensor drawn with one seed has the same values whatever its tiling.  Element `idx` of a
 * stream takes the splitmix64 sequence from state splitmix64(seed) at positions 2 idx and
 * 2 idx + 1 (normals use both). */
#include <math.h>
#include "tt_cpu.h"

static inline uint64_t tt_mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t tt_counter_bits(uint64_t key, uint64_t c) { return tt_mix64(key + c * 0x9E3779B97F4A7C15ull); }

/* One value of distribution `dist` (0 uniform [a, b), 1 normal (mean a, std b), 2 integer
 * [a, b)) for element idx, as a double (an exact integer for dist 2); f32 uniforms use 24 bits
 * so that they stay below 1 once rounded to float. */
static inline double tt_random_value(uint64_t key, uint64_t idx, int64_t dist, int f32, double a, double b)
{
    const uint64_t b0 = tt_counter_bits(key, 2 * idx);
    if (dist == 0) {
        const double u = f32 ? (double)(b0 >> 40) * 0x1.0p-24 : (double)(b0 >> 11) * 0x1.0p-53;
        return a + (b - a) * u;
    }
    if (dist == 1) {
        const double u1 = (double)((b0 >> 11) + 1) * 0x1.0p-53; /* (0, 1]: log stays finite */
        const double u2 = (double)(tt_counter_bits(key, 2 * idx + 1) >> 11) * 0x1.0p-53;
        return a + b * (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    const uint64_t span = (uint64_t)(b - a); /* creation.py keeps b - a within 2^53 */
    return a + (double)(uint64_t)(((unsigned __int128)b0 * span) >> 64);
}

void tt_cpu_random(const tt_args_random *a, void *y)
{
    const int64_t shape[8] = {a->d0, a->d1, a->d2, a->d3, a->d4, a->d5, a->d6, a->d7};
    const int64_t tsz[8] = {a->t0, a->t1, a->t2, a->t3, a->t4, a->t5, a->t6, a->t7};
    const int nd = (int)a->nd;
    int64_t off[8], ts[8], stride[8];
    /* tile index -> tile offset and shape; global row-major strides */
    int64_t rest = a->tile, s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        const int64_t grid = (shape[d] + tsz[d] - 1) / tsz[d];
        off[d] = (rest % grid) * tsz[d];
        rest /= grid;
        ts[d] = shape[d] - off[d] < tsz[d] ? shape[d] - off[d] : tsz[d];
        stride[d] = s;
        s *= shape[d];
    }
    const int64_t ncol = nd ? ts[nd - 1] : 1, nrow = a->n / ncol;
    const uint64_t key = tt_mix64((uint64_t)a->seed);
    const int f32 = a->dtype == TT_F32;
    for (int64_t r = 0; r < nrow; r++) {
        int64_t start = nd ? off[nd - 1] : 0, q = r; /* global index of the row's first element */
        for (int d = nd - 2; d >= 0; d--) {
            start += (off[d] + q % ts[d]) * stride[d];
            q /= ts[d];
        }
        for (int64_t c = 0; c < ncol; c++) {
            const double v = tt_random_value(key, (uint64_t)(start + c), a->dist, f32, a->lo, a->hi);
            const int64_t i = r * ncol + c;
            if (a->dtype == TT_I64)
                ((int64_t *)y)[i] = (int64_t)v;
            else if (f32)
                ((float *)y)[i] = (float)v;
            else
                ((double *)y)[i] = v;
        }
    }
}

/* y[i] = start + step * (global index), computed in double as torch does, then stored. */
void tt_cpu_arange(const tt_args_arange *a, void *y)
{
    const int64_t i0 = a->tile * a->ts;
    for (int64_t i = 0; i < a->n; i++) {
        const double v = a->start + a->step * (double)(i0 + i);
        if (a->dtype == TT_I64)
            ((int64_t *)y)[i] = (int64_t)v;
        else if (a->dtype == TT_F32)
            ((float *)y)[i] = (float)v;
        else
            ((double *)y)[i] = v;
    }
}

/* torch's linspace: step = (end - start) / (steps - 1) in the element type (double for
 * integers); the first half counts up from start, the second half down from end. */
void tt_cpu_linspace(const tt_args_linspace *a, void *y)
{
    const int64_t i0 = a->tile * a->ts, steps = a->steps, half = steps / 2;
    if (a->dtype == TT_I64) {
        const int64_t start = (int64_t)a->start, end = (int64_t)a->end;
        const double step = steps > 1 ? (double)(end - start) / (double)(steps - 1) : 0.0;
        for (int64_t i = 0, k = i0; i < a->n; i++, k++)
            ((int64_t *)y)[i] = steps == 1 || k < half ? (int64_t)((double)start + step * (double)k)
                                         : (int64_t)((double)end - step * (double)(steps - k - 1));
        return;
    }
    TT_FLOAT_DISPATCH(a->dtype, {
        const T start = (T)a->start, end = (T)a->end;
        const T step = steps > 1 ? (end - start) / (T)(steps - 1) : (T)0;
        T *py = y;
        for (int64_t i = 0, k = i0; i < a->n; i++, k++) {
            volatile T prod = k < half ? step * (T)k : step * (T)(steps - k - 1); /* no fused multiply-add */
            py[i] = steps == 1 ? start : k < half ? start + prod : end - prod;
        }
    });
}
