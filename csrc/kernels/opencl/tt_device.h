/* The portable device dialect of tiletrain's accelerator kernels.
 *
 * The kernel sources in this folder are OpenCL C, and through the macros below they are
 * CUDA too: csrc/kernels/cuda/device_kernels.cu includes tiletrain.cl, and the library
 * embeds the same sources (includes inlined by csrc/embed_opencl.py) for the OpenCL
 * workers.  So every CUDA body except gemm (cuBLAS) is the kernel that CI runs on PoCL.
 *
 * Conventions (the generated launchers depend on them, csrc/gen_kernels.py):
 * - a kernel is `KERNEL SUF(name)(buffers..., integer args..., real args...)` in the
 *   order of its csrc/kernels.def line, without dtype; integer args are tt_long, real
 *   args are R (float for float32 tiles, double otherwise); float buffers are T.
 * - launch geometry comes from the table's 7th column: `items E` (E work-items in groups
 *   of TT_DEV_LOCAL: test GID0() < E), `rows E` (one group of TT_DEV_LOCAL per row:
 *   GROUP0()), `tiles R, C, Z` (TT_DEV_TILE x TT_DEV_TILE groups: GID0() the column,
 *   GID1() the row, GROUP2() the third index).
 * - sums accumulate in ACC (double), as the CPU bodies do.
 * - helper functions are DEVFN and, when they use T, named through SUF too. */
#ifndef TT_DEVICE_H
#define TT_DEVICE_H

#ifndef TT_DEV_LOCAL
#define TT_DEV_LOCAL 128 /* must match csrc/gen_kernels.py */
#endif
#ifndef TT_DEV_TILE
#define TT_DEV_TILE 16
#endif

#if defined(__OPENCL_VERSION__)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef long tt_long;
typedef ulong tt_ulong;
typedef uchar tt_uchar; /* bool tiles: one byte, 0 or 1 */
#define KERNEL __kernel void
#define DEVFN static inline
#define GLOBAL __global
#define LOCAL __local         /* a declaration in local (shared) memory, at kernel scope */
#define LPTR __local          /* a pointer to local memory */
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define LID0() ((tt_long)get_local_id(0))
#define LID1() ((tt_long)get_local_id(1))
#define GROUP0() ((tt_long)get_group_id(0))
#define GROUP2() ((tt_long)get_group_id(2))
#define GID0() ((tt_long)get_global_id(0))
#define GID1() ((tt_long)get_global_id(1))
#define TT_INF INFINITY
#define TT_ISNAN(v) isnan(v)
#elif defined(__CUDACC__)
typedef long long tt_long;
typedef unsigned long long tt_ulong;
typedef unsigned char tt_uchar;
#define KERNEL extern "C" __global__ void
#define DEVFN static __device__ __forceinline__
#define GLOBAL
#define LOCAL __shared__
#define LPTR
#define BARRIER() __syncthreads()
#define LID0() ((tt_long)threadIdx.x)
#define LID1() ((tt_long)threadIdx.y)
#define GROUP0() ((tt_long)blockIdx.x)
#define GROUP2() ((tt_long)blockIdx.z)
#define GID0() ((tt_long)blockIdx.x * blockDim.x + threadIdx.x)
#define GID1() ((tt_long)blockIdx.y * blockDim.y + threadIdx.y)
#define TT_INF INFINITY
#define TT_ISNAN(v) isnan(v)
#else
#error "tt_device.h: compile as OpenCL C or CUDA"
#endif

typedef double ACC;

/* Causal attention: how many keys of a tk-wide key tile starting at koff query position
 * qpos sees (all of them without a mask). */
DEVFN tt_long tt_visible(tt_long causal, tt_long qpos, tt_long koff, tt_long tk)
{
    if (!causal)
        return tk;
    tt_long n = qpos - koff + 1;
    return n < 0 ? 0 : (n > tk ? tk : n);
}

/* Block-wide sum and max over the TT_DEV_LOCAL work-items of a group (every work-item of
 * the group must call them; all get the result).  `red` is a local array of TT_DEV_LOCAL. */
DEVFN ACC tt_block_sum(ACC v, LPTR ACC *red)
{
    const tt_long lid = LID0();
    red[lid] = v;
    BARRIER();
    for (tt_long s = TT_DEV_LOCAL / 2; s > 0; s >>= 1) {
        if (lid < s)
            red[lid] += red[lid + s];
        BARRIER();
    }
    ACC r = red[0];
    BARRIER();
    return r;
}

/* max that propagates NaN like the CPU bodies (v > m || isnan(v)) */
DEVFN ACC tt_nanmax(ACC m, ACC v) { return (v > m || TT_ISNAN(v)) ? v : m; }

DEVFN ACC tt_block_max(ACC v, LPTR ACC *red)
{
    const tt_long lid = LID0();
    red[lid] = v;
    BARRIER();
    for (tt_long s = TT_DEV_LOCAL / 2; s > 0; s >>= 1) {
        if (lid < s)
            red[lid] = tt_nanmax(red[lid], red[lid + s]);
        BARRIER();
    }
    ACC r = red[0];
    BARRIER();
    return r;
}

#endif
