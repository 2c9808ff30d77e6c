/* Synthetic kernels for scheduling and pipeline experiments. */
#include <time.h>
#include <sys/prctl.h>
#include "tt_cpu.h"

#define SPIN_TAIL_US 100.0

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

void tt_cpu_spin(const tt_args_spin *a, const void *pa, const void *pb, void *pc, void *pd)
{
    if (a->usec > 0) {
        double end = now_us() + (double)a->usec;
        if (a->sleep) {
            /* the default timer slack (50 us) would make every sleep overshoot: 1 us */
            static __thread int slack_set = 0;
            if (!slack_set) {
                prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
                slack_set = 1;
            }
            /* sleep until SPIN_TAIL_US before the end, then busy-wait the rest */
            for (;;) {
                double left = end - now_us() - SPIN_TAIL_US;
                if (left <= 0)
                    break;
                long long ns = (long long)(left * 1e3);
                struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
                nanosleep(&ts, NULL);
            }
        }
        while (now_us() < end)
            ;
    }
    TT_FLOAT_DISPATCH(a->dtype, {
        const T *x = pa, *y = pb;
        if (a->wmask & 1) {
            T *c = pc;
            for (int64_t i = 0; i < a->n; i++)
                c[i] = x[i] + y[i];
        }
        if (a->wmask & 2) {
            T *d = pd;
            for (int64_t i = 0; i < a->n; i++)
                d[i] += x[i];
        }
    });
}
