/* Helpers for tiletrain's CUDA bodies (no StarPU types: the StarPU wrappers generated in
 * tt_kernels_gen.c hand each body its worker's stream and cuBLAS handle in a tt_cuda_ctx). */
#ifndef TT_CUDA_CUH
#define TT_CUDA_CUH
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include "tiletrain.h"
#include "tt_kernels_dev.h"

/* A kernel body has no error path back to StarPU: report and abort, as StarPU's own
 * STARPU_CUDA_REPORT_ERROR does. */
static inline void tt_cuda_check(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "tiletrain: CUDA error in %s: %s\n", what, cudaGetErrorString(err));
        abort();
    }
}

/* Launch a portable device kernel (the .cl files of csrc/kernels/opencl/) with the geometry of its
 * kernel table line, asynchronously on the worker's stream. */
static inline void tt_cuda_launch(const char *name, const void *fn, tt_dev_geom g, void **argv,
                                  const tt_cuda_ctx *ctx)
{
    if (!fn) {
        fprintf(stderr, "tiletrain: CUDA kernel %s has no variant for this dtype\n", name);
        abort();
    }
    dim3 grid(1, 1, 1), block(1, 1, 1);
    switch (g.kind) {
    case TT_GEOM_ITEMS:
        block = dim3(TT_DEV_LOCAL);
        grid = dim3((unsigned)((g.dims[0] + TT_DEV_LOCAL - 1) / TT_DEV_LOCAL));
        break;
    case TT_GEOM_ROWS:
        block = dim3(TT_DEV_LOCAL);
        grid = dim3((unsigned)g.dims[0]);
        break;
    case TT_GEOM_TILES:
        block = dim3(TT_DEV_TILE, TT_DEV_TILE);
        grid = dim3((unsigned)((g.dims[1] + TT_DEV_TILE - 1) / TT_DEV_TILE),
                    (unsigned)((g.dims[0] + TT_DEV_TILE - 1) / TT_DEV_TILE), (unsigned)g.dims[2]);
        break;
    default:
        fprintf(stderr, "tiletrain: CUDA kernel %s: unknown launch geometry %d\n", name, g.kind);
        abort();
    }
    if (grid.x == 0 || grid.y == 0 || grid.z == 0)
        return; /* an empty tile */
    tt_cuda_check(cudaLaunchKernel(fn, grid, block, argv, 0, (cudaStream_t)ctx->stream), name);
}

#endif
