/* The device kernels, instantiated per element type: tt_<name>_f32, tt_<name>_f64 (and
 * tt_<name>_i64 for fill, copy and region_copy, which also run on int64 tiles, and
 * tt_<name>_b8 for fill, copy and region_copy, which also run on bool tiles).  OpenCL: the library
 * embeds this file with its includes inlined (csrc/embed_opencl.py); CUDA:
 * csrc/kernels/cuda/device_kernels.cu includes it.  The bodies of the `expr` kernels of
 * csrc/kernels.def are generated per dtype into tt_kernels_expr.cl (build directory). */
#include "tt_device.h"
/* the special-function kernels' helpers (double-valued, for every dtype) */
#include "tt_special.h"
#define TO_T(v) ((T)(v))

#define T float
#define R float
#define SUF(name) name##_f32
#include "fill_copy.cl"
#include "elementwise.cl"
#include "reduce.cl"
#include "gemm.cl"
#include "activations.cl"
#include "norm.cl"
#include "conv.cl"
#include "softmax.cl"
#include "embedding.cl"
#include "index.cl"
#include "attention.cl"
#include "optim.cl"
#include "shape.cl"
#undef T
#undef R
#undef SUF

#define T double
#define R double
#define SUF(name) name##_f64
#include "fill_copy.cl"
#include "elementwise.cl"
#include "reduce.cl"
#include "gemm.cl"
#include "activations.cl"
#include "norm.cl"
#include "conv.cl"
#include "softmax.cl"
#include "embedding.cl"
#include "index.cl"
#include "attention.cl"
#include "optim.cl"
#include "shape.cl"
#undef T
#undef R
#undef SUF

#define T tt_long
#define R double
#define SUF(name) name##_i64
#include "fill_copy.cl"
#include "shape.cl"
#undef T
#undef R
#undef SUF

#undef TO_T
#define TO_T(v) ((T)((v) != 0))
#define T tt_uchar
#define R double
#define SUF(name) name##_b8
#include "fill_copy.cl"
#include "shape.cl"
#undef T
#undef R
#undef SUF
#undef TO_T

#include "tt_kernels_expr.cl"
