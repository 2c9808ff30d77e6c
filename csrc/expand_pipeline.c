/* Expander for synthetic scheduling experiments: tt_spin (one spin task per tile). */
#include <stdlib.h>

#include "tt_internal.h"

int tt_spin(tt_tensor *a, tt_tensor *b, tt_tensor *c, tt_tensor *d, int64_t usec, int sleep, int wmask)
{
    tt_tensor *ts[4] = {a, b, c, d};
    const char *names[4] = {"spin: a", "spin: b", "spin: c", "spin: d"};
    if (usec < 0 || usec > 60000000)
        return tt_error(TT_EINVAL, "spin: usec=%lld outside [0, 60e6]", (long long)usec);
    if (wmask < 0 || wmask > 3)
        return tt_error(TT_EINVAL, "spin: wmask=%d outside [0, 3]", wmask);
    for (int j = 0; j < 4; j++) {
        /* c is written (W) when wmask & 1: it may be unwritten before; everything else is read */
        int rc = (j == 2 && (wmask & 1)) ? tt_check_tensor(ts[j], names[j]) : tt_check_readable(ts[j], names[j]);
        if (rc)
            return rc;
        if (!tt_same_layout(ts[0], ts[j]))
            return tt_error(TT_EINVAL, "%s has another shape, tiling or dtype than a", names[j]);
    }
    if (a->dtype != TT_F32 && a->dtype != TT_F64)
        return tt_error(TT_EINVAL, "spin: float32 or float64 tensors only");
    enum starpu_data_access_mode modes[4] = {STARPU_R, STARPU_R, (wmask & 1) ? STARPU_W : STARPU_R,
                                             (wmask & 2) ? STARPU_RW : STARPU_R};
    int64_t idx[TT_MAX_NDIM];
    for (int64_t i = 0; i < a->ntiles; i++) {
        tt_tile_index(a, i, idx);
        const tt_args_spin args = {.dtype = a->dtype, .n = tt_tile_nelems(a, idx), .usec = usec,
                                   .sleep = sleep ? 1 : 0, .wmask = wmask};
        starpu_data_handle_t h[4] = {a->handles[i], b->handles[i], c->handles[i], d->handles[i]};
        int rc = tt_submit(TT_K_SPIN, &args, h, modes);
        if (rc)
            return rc;
    }
    if (wmask & 1)
        c->written = 1;
    return TT_OK;
}
