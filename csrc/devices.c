/* Heterogeneous workers: per-worker executed-task counts, device set-up and tear-down
 * (OpenCL programs, cuBLAS handles), the placement preference, tile access on a given
 * memory node (cupy interop) and single-kernel runs on a chosen worker kind (the device
 * registry test). */
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"
#ifdef TT_HAVE_CUDA_KERNELS
#include <starpu_cublas_v2.h>
#endif

/* csrc/opencl.c */
int tt_opencl_load(void);
void tt_opencl_unload(void);

/* ---- executed tasks per worker: every generated wrapper calls tt_count_task() ---- */
static long executed[STARPU_NMAXWORKERS];

void tt_count_task(void)
{
    int w = starpu_worker_get_id();
    if (w >= 0 && w < STARPU_NMAXWORKERS)
        __atomic_fetch_add(&executed[w], 1, __ATOMIC_RELAXED);
}

int64_t tt_worker_executed(int worker)
{
    if (!tt_session_active() || worker < 0 || worker >= (int)starpu_worker_get_count())
        return -1;
    return __atomic_load_n(&executed[worker], __ATOMIC_RELAXED);
}

/* ---- implementations compiled into this build ---- */
static int where_to_mask(uint32_t where)
{
    return ((where & STARPU_CPU) ? TT_WHERE_CPU : 0) | ((where & STARPU_CUDA) ? TT_WHERE_CUDA : 0) |
           ((where & STARPU_OPENCL) ? TT_WHERE_OPENCL : 0);
}

int tt_kernel_impls(int kernel)
{
    if (kernel < 0 || kernel >= TT_NKERNELS)
        return 0;
    return where_to_mask(tt_kernel_table[kernel].cl->where);
}

int tt_kernel_impls_for(int kernel, int dtype)
{
    if (kernel < 0 || kernel >= TT_NKERNELS || dtype < 0 || dtype >= TT_NDTYPES ||
        !(tt_kernel_table[kernel].dtypes >> dtype & 1))
        return 0;
    int mask = tt_kernel_impls(kernel);
    if (!(tt_kernel_table[kernel].opencl_dtypes >> dtype & 1))
        mask &= ~TT_WHERE_OPENCL;
    return mask;
}

/* ---- device set-up with the session ---- */
static int opencl_loaded = 0;
static int cublas_started = 0;

int tt_devices_init(void)
{
    memset(executed, 0, sizeof executed);
    tt_set_where(0); /* no placement preference (csrc/submit.c) */
#ifdef TT_HAVE_OPENCL_KERNELS
    if (starpu_opencl_worker_get_count() > 0) {
        int rc = tt_opencl_load();
        if (rc)
            return rc;
        opencl_loaded = 1;
    }
#endif
#ifdef TT_HAVE_CUDA_KERNELS
    if (starpu_cuda_worker_get_count() > 0) {
        starpu_cublas_init();
        cublas_started = 1;
    }
#endif
    return TT_OK;
}

void tt_devices_shutdown(void)
{
#ifdef TT_HAVE_OPENCL_KERNELS
    if (opencl_loaded)
        tt_opencl_unload();
#endif
#ifdef TT_HAVE_CUDA_KERNELS
    if (cublas_started)
        starpu_cublas_shutdown();
#endif
    opencl_loaded = cublas_started = 0;
    tt_set_where(0);
}

#ifdef TT_HAVE_CUDA_KERNELS
void *tt_cublas_handle(void) { return (void *)starpu_cublas_get_local_handle(); }
#endif

/* ---- memory nodes and tile access (cupy interop) ---- */
int tt_cuda_memory_node(int devid)
{
    if (!tt_session_active())
        return tt_error(TT_ENOTINIT, "the tiletrain runtime is not initialised");
    for (unsigned node = 0; node < starpu_memory_nodes_get_count(); node++)
        if (starpu_node_get_kind(node) == STARPU_CUDA_RAM && starpu_memory_node_get_devid(node) == devid)
            return (int)node;
    return tt_error(TT_EINVAL, "no StarPU memory node for CUDA device %d: the runtime has no CUDA worker on it "
                    "(start it with ncuda >= 1, with a StarPU built with CUDA: scripts/build-starpu.sh)", devid);
}

int tt_tile_acquire_on_node(tt_tensor *t, int64_t tile, int node, int write, void **ptr, int64_t *nbytes)
{
    int rc = write ? tt_check_tensor(t, "tile acquire") : tt_check_readable(t, "tile acquire");
    if (rc)
        return rc;
    if (tile < 0 || tile >= t->ntiles)
        return tt_error(TT_EINVAL, "tile acquire: tile %lld out of range [0, %lld)", (long long)tile,
                        (long long)t->ntiles);
    if (node < 0 || node >= (int)starpu_memory_nodes_get_count())
        return tt_error(TT_EINVAL, "tile acquire: memory node %d does not exist", node);
    if (!ptr || !nbytes)
        return tt_error(TT_EINVAL, "tile acquire: NULL output");
    tt_ensure_running();
    starpu_data_handle_t h = tt_tile_handle(t, tile);
    int ret = starpu_data_acquire_on_node(h, node, write ? STARPU_W : STARPU_R);
    if (ret != 0)
        return tt_error(TT_ESTARPU, "starpu_data_acquire_on_node failed on tile %lld (%d)", (long long)tile, ret);
    *ptr = starpu_data_handle_to_pointer(h, (unsigned)node);
    *nbytes = (int64_t)starpu_vector_get_nx(h) * (int64_t)starpu_vector_get_elemsize(h);
    if (write)
        t->written = 1; /* the caller fills every tile before using the tensor */
    return TT_OK;
}

int tt_tile_release_on_node(tt_tensor *t, int64_t tile, int node)
{
    int rc = tt_check_tensor(t, "tile release");
    if (rc)
        return rc;
    if (tile < 0 || tile >= t->ntiles)
        return tt_error(TT_EINVAL, "tile release: tile %lld out of range", (long long)tile);
    starpu_data_release_on_node(tt_tile_handle(t, tile), node);
    return TT_OK;
}

/* ---- one kernel on caller buffers, on the worker kinds in `mask` (device registry test) ---- */
int tt_run_kernel(int kernel, const void *args, int nbuf, void *const *bufs, const int64_t *nbytes, int mask)
{
    if (!tt_session_active())
        return tt_error(TT_ENOTINIT, "run_kernel: the tiletrain runtime is not initialised");
    if (kernel < 0 || kernel >= TT_NKERNELS)
        return tt_error(TT_EINVAL, "run_kernel: unknown kernel id %d", kernel);
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    if (nbuf != k->nbuffers)
        return tt_error(TT_EINVAL, "run_kernel: %s takes %d buffers, got %d", k->name, k->nbuffers, nbuf);
    if (!args || !bufs || !nbytes)
        return tt_error(TT_EINVAL, "run_kernel: NULL argument");
    if (!mask || (tt_kernel_impls(kernel) & mask) != mask)
        return tt_error(TT_EINVAL, "run_kernel: %s has no implementation for worker kinds %d in this build "
                        "(it has %d; cpu=1, cuda=2, opencl=4)", k->name, mask, tt_kernel_impls(kernel));
    const int dtype = (int)*(const int64_t *)args;
    if ((tt_kernel_impls_for(kernel, dtype) & mask) != mask)
        return tt_error(TT_EINVAL, "run_kernel: %s has no implementation for dtype %s on worker kinds %d "
                        "(it has %d for that dtype; cpu=1, cuda=2, opencl=4)", k->name, tt_dtype_name(dtype), mask,
                        tt_kernel_impls_for(kernel, dtype));
    starpu_data_handle_t h[8];
    for (int i = 0; i < nbuf; i++) {
        if (!bufs[i] || nbytes[i] < 1)
            return tt_error(TT_EINVAL, "run_kernel: buffer %d is empty", i);
        starpu_vector_data_register(&h[i], STARPU_MAIN_RAM, (uintptr_t)bufs[i], (uint32_t)nbytes[i], 1);
    }
    int old = tt_set_where(mask);
    int rc = tt_submit(kernel, args, h, NULL);
    tt_set_where(old);
    for (int i = 0; i < nbuf; i++)
        starpu_data_unregister(h[i]); /* waits for the task and brings the data home */
    return rc;
}
