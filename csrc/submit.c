/* The only place that submits StarPU tasks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"
#include "tt_trace.h"

uint32_t tt_where_for(const struct starpu_codelet *cl); /* csrc/devices.c: placement preference */

static long kernel_ntasks[TT_NKERNELS];

void tt_submit_reset_counters(void) { memset(kernel_ntasks, 0, sizeof kernel_ntasks); }

int tt_kernel_ntasks(int k) { return (k >= 0 && k < TT_NKERNELS) ? (int)kernel_ntasks[k] : -1; }

void *tt_args_new(int kernel)
{
    return calloc(1, tt_kernel_table[kernel].args_size);
}

int tt_submit(int kernel, void *args, const starpu_data_handle_t *handles,
              const enum starpu_data_access_mode *modes)
{
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    tt_ensure_running();
    struct starpu_task *task = starpu_task_create();
    if (!task) {
        free(args);
        return tt_error(TT_ENOMEM, "%s: starpu_task_create failed", k->name);
    }
    task->cl = k->cl;
    task->cl_arg = args;
    task->cl_arg_size = k->args_size;
    task->cl_arg_free = 1; /* StarPU frees args after the task */
    task->nbuffers = k->nbuffers;
    for (int i = 0; i < k->nbuffers; i++) {
        task->handles[i] = handles[i];
        task->modes[i] = modes ? modes[i] : k->modes[i];
    }
    task->flops = k->flops(args);
    task->priority = tt_get_priority();
    uint32_t where = tt_where_for(k->cl);
    if (where)
        task->where = where;
    /* trace records + DAG, priority plan, stage affinity (csrc/trace.c): one branch when off */
    if (__builtin_expect(__atomic_load_n(&tt_submit_hooks_on, __ATOMIC_RELAXED), 0))
        tt_trace_on_submit(task, kernel);
    int ret = starpu_task_submit(task);
    if (ret != 0) {
        if (tt_submit_hooks_on)
            tt_trace_on_submit_failed(task);
        task->destroy = 0;
        starpu_task_destroy(task); /* frees args too (cl_arg_free) */
        if (ret == -ENODEV)
            return tt_error(TT_ESTARPU, "%s: no started worker can run this kernel (it runs on:%s%s%s); start a "
                            "worker of one of these kinds", k->name, (k->cl->where & STARPU_CPU) ? " cpu" : "",
                            (k->cl->where & STARPU_CUDA) ? " cuda" : "", (k->cl->where & STARPU_OPENCL) ? " opencl" : "");
        return tt_error(TT_ESTARPU, "%s: starpu_task_submit failed (%d)", k->name, ret);
    }
    kernel_ntasks[kernel]++;
    return TT_OK;
}
