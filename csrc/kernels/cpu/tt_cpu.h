/* Helpers for CPU kernel bodies: plain C, no StarPU types. */
#ifndef TT_CPU_H
#define TT_CPU_H
#include <stdint.h>
#include "tiletrain.h"
#include "tt_kernels_args.h"

/* Run BODY with T bound to the C type of a float dtype. */
#define TT_FLOAT_DISPATCH(dtype, ...)    \
    do {                                 \
        if ((dtype) == TT_F32) {         \
            typedef float T;             \
            __VA_ARGS__;                     \
        } else if ((dtype) == TT_F64) {  \
            typedef double T;            \
            __VA_ARGS__;                     \
        }                                \
    } while (0)

#endif
