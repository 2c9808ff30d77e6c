/* The device kernels, instantiated per element type: tt_<name>_f32, tt_<name>_f64 (and
 * tt_<name>_i64 for fill, copy and region_copy, which also run on int64 tiles).  OpenCL:
 * the library embeds this file with its includes inlined (csrc/embed_opencl.py); CUDA:
 * csrc/kernels/cuda/device_kernels.cu includes it. */
#include "tt_device.h"

#define T float
#define R float
#define SUF(name) name##_f32
#include "fill_copy.cl"
#include "elementwise.cl"
#include "reduce.cl"
#include "gemm.cl"
#include "activations.cl"
#include "norm.cl"
#include "softmax.cl"
#include "embedding.cl"
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
#include "softmax.cl"
#include "embedding.cl"
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
