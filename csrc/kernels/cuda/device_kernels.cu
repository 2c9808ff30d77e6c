/* CUDA bodies of every kernel with a generic `cuda` implementation in csrc/kernels.def:
 * the portable device kernels of csrc/kernels/opencl/ (the ones CI runs on PoCL through
 * the OpenCL workers) compiled as CUDA, plus their generated launchers tt_cuda_<name>
 * (tt_kernels_dev.h under TT_CUDA_GENERIC_LAUNCHERS: cudaLaunchKernel on the StarPU
 * worker's stream, asynchronous).  Kernels that also take float16/bfloat16 tiles have
 * hand-written templates in half_kernels.cuh (the portable sources have no half types). */
#include "tt_cuda.cuh"
#include "../opencl/tiletrain.cl"
#include "half_kernels.cuh" /* tt_<name>_half<H>: the float16/bfloat16 bodies */

#define TT_CUDA_GENERIC_LAUNCHERS
#include "tt_kernels_dev.h"
