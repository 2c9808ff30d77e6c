/* OpenCL workers: tiletrain's device kernels (csrc/kernels/opencl/, embedded into the
 * library at build time by csrc/embed_opencl.py) built for every OpenCL device when a
 * session with OpenCL workers starts, and the launcher the generated OpenCL wrappers call:
 * arguments in table order (buffers, integer args as cl_long, real args as the element
 * type), geometry from the table's launch column, enqueued asynchronously on StarPU's
 * queue (the codelets are STARPU_OPENCL_ASYNC). */
#ifdef TT_HAVE_OPENCL_KERNELS
#include <stdio.h>
#include <string.h>

#include "tt_internal.h"
#include "tt_kernels_dev.h"

extern const char tt_opencl_source[];

static struct starpu_opencl_program programs;
/* One kernel object per (device, kernel, element type), created on first use by the
 * device's worker (one worker per OpenCL device: no lock), released at shutdown. */
static cl_kernel kcache[STARPU_MAXOPENCLDEVS][TT_NKERNELS][4];
static const char *const suffix[4] = {"f32", "f64", "i64", "b8"};

int tt_opencl_load(void)
{
    memset(kcache, 0, sizeof kcache);
    int ret = starpu_opencl_load_opencl_from_string(tt_opencl_source, &programs, NULL);
    if (ret != 0)
        return tt_error(TT_ESTARPU, "OpenCL: building tiletrain's device kernels failed (%d): StarPU prints the "
                        "compiler's log with STARPU_SILENT=0 (init(silent=False)); the device needs double "
                        "precision (cl_khr_fp64). Or start without OpenCL workers (nopencl=0).", ret);
    return TT_OK;
}

void tt_opencl_unload(void)
{
    for (int d = 0; d < STARPU_MAXOPENCLDEVS; d++)
        for (int k = 0; k < TT_NKERNELS; k++)
            for (int t = 0; t < 4; t++)
                if (kcache[d][k][t]) {
                    starpu_opencl_release_kernel(kcache[d][k][t]);
                    kcache[d][k][t] = NULL;
                }
    starpu_opencl_unload_opencl(&programs);
}

static size_t round_up(int64_t v, size_t to) { return (size_t)((v + (int64_t)to - 1) / (int64_t)to) * to; }

void tt_opencl_launch(int kernel, int64_t dtype, int nbuf, void *buffers[], int nint, const int64_t *ints,
                      int nreal, const double *reals, tt_dev_geom geom)
{
    const int devid = starpu_worker_get_devid(starpu_worker_get_id_check());
    /* f32, f64, i64, b8 variants; csrc/submit.c keeps tasks of other dtypes off OpenCL workers */
    STARPU_ASSERT_MSG(dtype == TT_F32 || dtype == TT_F64 || dtype == TT_I64 || dtype == TT_BOOL,
                      "%s: no OpenCL body for dtype %s", tt_kernel_table[kernel].name, tt_dtype_name((int)dtype));
    const int di = dtype == TT_F32 ? 0 : dtype == TT_F64 ? 1 : dtype == TT_I64 ? 2 : 3;
    char name[96];
    snprintf(name, sizeof name, "tt_%s_%s", tt_kernel_table[kernel].name, suffix[di]);
    cl_command_queue queue;
    cl_kernel kern = kcache[devid][kernel][di];
    cl_int err;
    if (!kern) {
        err = starpu_opencl_load_kernel(&kern, &queue, &programs, name, devid);
        if (err != CL_SUCCESS)
            STARPU_OPENCL_REPORT_ERROR_WITH_MSG(name, err);
        kcache[devid][kernel][di] = kern;
    }
    starpu_opencl_get_queue(devid, &queue);

    cl_uint ai = 0;
    for (int i = 0; i < nbuf; i++) {
        cl_mem mem = (cl_mem)STARPU_VECTOR_GET_DEV_HANDLE(buffers[i]);
        STARPU_ASSERT_MSG(STARPU_VECTOR_GET_OFFSET(buffers[i]) == 0, "%s: OpenCL buffer with an offset", name);
        err = clSetKernelArg(kern, ai++, sizeof mem, &mem);
        if (err != CL_SUCCESS)
            STARPU_OPENCL_REPORT_ERROR_WITH_MSG(name, err);
    }
    for (int i = 0; i < nint; i++) {
        cl_long v = (cl_long)ints[i];
        err = clSetKernelArg(kern, ai++, sizeof v, &v);
        if (err != CL_SUCCESS)
            STARPU_OPENCL_REPORT_ERROR_WITH_MSG(name, err);
    }
    for (int i = 0; i < nreal; i++) {
        cl_float f = (cl_float)reals[i];
        cl_double d = (cl_double)reals[i];
        err = di == 0 ? clSetKernelArg(kern, ai++, sizeof f, &f) : clSetKernelArg(kern, ai++, sizeof d, &d);
        if (err != CL_SUCCESS)
            STARPU_OPENCL_REPORT_ERROR_WITH_MSG(name, err);
    }

    size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
    cl_uint dims = 1;
    switch (geom.kind) {
    case TT_GEOM_ITEMS:
        local[0] = TT_DEV_LOCAL;
        global[0] = round_up(geom.dims[0], TT_DEV_LOCAL);
        break;
    case TT_GEOM_ROWS:
        local[0] = TT_DEV_LOCAL;
        global[0] = (size_t)geom.dims[0] * TT_DEV_LOCAL;
        break;
    case TT_GEOM_TILES:
        dims = 3;
        local[0] = local[1] = TT_DEV_TILE;
        global[0] = round_up(geom.dims[1], TT_DEV_TILE);
        global[1] = round_up(geom.dims[0], TT_DEV_TILE);
        global[2] = (size_t)geom.dims[2];
        break;
    default:
        STARPU_ABORT_MSG("%s: unknown launch geometry %d", name, geom.kind);
    }
    if (global[0] == 0 || global[1] == 0 || global[2] == 0)
        return; /* an empty tile */
    err = clEnqueueNDRangeKernel(queue, kern, dims, NULL, global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        STARPU_OPENCL_REPORT_ERROR_WITH_MSG(name, err);
}
#endif
