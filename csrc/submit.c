/* The only place that submits StarPU tasks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"
#include "tt_trace.h"

#ifdef TT_HAVE_MPI
#include <starpu_mpi.h>
#endif

static uint32_t mask_to_where(int mask)
{
    return ((mask & TT_WHERE_CPU) ? STARPU_CPU : 0) | ((mask & TT_WHERE_CUDA) ? STARPU_CUDA : 0) |
           ((mask & TT_WHERE_OPENCL) ? STARPU_OPENCL : 0);
}

/* ---- placement preference (tt_submit restricts tasks to it where the kernel can) ---- */
static int where_pref = 0;

int tt_set_where(int mask)
{
    if (mask & ~(TT_WHERE_CPU | TT_WHERE_CUDA | TT_WHERE_OPENCL))
        return tt_error(TT_EINVAL, "placement mask %d has unknown bits (cpu=1, cuda=2, opencl=4)", mask);
    int old = where_pref;
    where_pref = mask;
    return old;
}

int tt_get_where(void) { return where_pref; }

static uint32_t tt_where_for(const struct starpu_codelet *cl)
{
    if (!where_pref)
        return 0;
    uint32_t w = cl->where & mask_to_where(where_pref);
    return w; /* 0: the kernel has none of the preferred kinds, it keeps its own */
}

static long kernel_ntasks[TT_NKERNELS];

void tt_submit_reset_counters(void) { memset(kernel_ntasks, 0, sizeof kernel_ntasks); }

int tt_kernel_ntasks(int k) { return (k >= 0 && k < TT_NKERNELS) ? (int)kernel_ntasks[k] : -1; }

void tt_args_load(int kernel, const void *args, tt_args_buf *buf)
{
    memcpy(buf, args, tt_kernel_table[kernel].args_size); /* it fits: checked at compile time */
}

/* Action order (tiletrain.pipeline.enforce, mechanism "deps"): while a token is set, every task
 * this process runs also reads the token's tile; tt_order_barrier submits a no-work task that
 * writes it.  StarPU's sequential consistency then starts the tasks of the next action only
 * after every task of the previous one (the tasks of one action still run concurrently).
 * The token is local: under MPI only the tasks that run on this rank are ordered. */
static starpu_data_handle_t order_token;
static struct starpu_codelet order_barrier_cl = {
    .where = STARPU_NOWHERE, .nbuffers = 1, .modes = {STARPU_RW}, .name = "order_barrier"};

static int order_handle(tt_tensor *token, starpu_data_handle_t *h)
{
    if (!token) {
        *h = NULL;
        return TT_OK;
    }
    int rc = tt_check_readable(token, "order token");
    if (rc)
        return rc;
    if (token->ntiles != 1)
        return tt_error(TT_EINVAL, "order token: a one-tile tensor, got %lld tiles", (long long)token->ntiles);
    if (tt_mpi_on && token->owner[0] != tt_mpi_rank())
        return tt_error(TT_EINVAL, "order token: owned by rank %d, not this rank (%d): a token is local",
                        token->owner[0], tt_mpi_rank());
    *h = token->handles[0];
    return TT_OK;
}

int tt_order_set(tt_tensor *token)
{
    starpu_data_handle_t h;
    int rc = order_handle(token, &h);
    if (rc == TT_OK)
        order_token = h;
    return rc;
}

int tt_order_barrier(tt_tensor *token)
{
    starpu_data_handle_t h;
    int rc = order_handle(token, &h);
    if (rc || !h)
        return rc ? rc : tt_error(TT_EINVAL, "order barrier: no token");
    struct starpu_task *task = starpu_task_create();
    if (!task)
        return tt_error(TT_ENOMEM, "order barrier: starpu_task_create failed");
    task->cl = &order_barrier_cl;
    task->handles[0] = h;
    int ret = starpu_task_submit(task);
    if (ret != 0) {
        task->destroy = 0;
        starpu_task_destroy(task);
        return tt_error(TT_ESTARPU, "order barrier: starpu_task_submit failed (%d)", ret);
    }
    return TT_OK;
}

/* the order token as one more (read) buffer of a task about to be submitted */
static int add_order_token(struct starpu_task *task)
{
    int n = task->nbuffers;
    if (n + 1 <= STARPU_NMAXBUFS && !task->dyn_handles) {
        task->handles[n] = order_token;
        task->modes[n] = STARPU_R;
    } else {
        starpu_data_handle_t *hs = malloc((size_t)(n + 1) * sizeof *hs);
        enum starpu_data_access_mode *ms = malloc((size_t)(n + 1) * sizeof *ms);
        if (!hs || !ms) {
            free(hs);
            free(ms);
            return tt_error(TT_ENOMEM, "order token: out of memory");
        }
        for (int i = 0; i < n; i++) {
            hs[i] = STARPU_TASK_GET_HANDLE(task, i);
            ms[i] = STARPU_TASK_GET_MODE(task, i);
        }
        hs[n] = order_token;
        ms[n] = STARPU_R;
        free(task->dyn_handles);
        free(task->dyn_modes);
        task->dyn_handles = hs;
        task->dyn_modes = ms;
    }
    task->nbuffers = n + 1;
    return TT_OK;
}

static int submit_failed(const tt_kernel_desc *k, int ret)
{
    if (ret == -ENODEV)
        return tt_error(TT_ESTARPU, "%s: no started worker can run this kernel (it runs on:%s%s%s); start a "
                        "worker of one of these kinds", k->name, (k->cl->where & STARPU_CPU) ? " cpu" : "",
                        (k->cl->where & STARPU_CUDA) ? " cuda" : "", (k->cl->where & STARPU_OPENCL) ? " opencl" : "");
    return tt_error(TT_ESTARPU, "%s: starpu_task_submit failed (%d)", k->name, ret);
}

/* Common to the local and the MPI path: the task holds its args (task->cl_arg), gets its FLOPs,
 * priority, placement and trace hook, and is submitted; on failure it is destroyed (which
 * frees its args) and the error says why. */
static int finish_and_submit(struct starpu_task *task, int kernel)
{
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    const void *args = task->cl_arg;
    task->flops = k->flops(args);
    task->priority = tt_get_priority();
    uint32_t where = tt_where_for(k->cl);
    const int64_t dtype = *(const int64_t *)args; /* dtype is always the first field */
    if ((k->cl->where & STARPU_OPENCL) && !(k->opencl_dtypes >> dtype & 1)) {
        /* no OpenCL body for this dtype (the half types): the kernel's other kinds */
        where = (where ? where : k->cl->where) & ~(uint32_t)STARPU_OPENCL;
        if (!where)
            where = k->cl->where & ~(uint32_t)STARPU_OPENCL;
    }
    if (where)
        task->where = where;
    /* trace records + DAG, priority plan, stage affinity (csrc/trace.c): one branch when off */
    if (__builtin_expect(__atomic_load_n(&tt_submit_hooks_on, __ATOMIC_RELAXED), 0))
        tt_trace_on_submit(task, kernel);
    int ret = order_token ? add_order_token(task) : 0;
    if (ret) {
        if (tt_submit_hooks_on)
            tt_trace_on_submit_failed(task);
        task->destroy = 0;
        starpu_task_destroy(task);
        return ret;
    }
    ret = starpu_task_submit(task);
    if (ret != 0) {
        if (tt_submit_hooks_on)
            tt_trace_on_submit_failed(task);
        task->destroy = 0;
        starpu_task_destroy(task);
        return submit_failed(k, ret);
    }
    return TT_OK;
}

#ifdef TT_HAVE_MPI
/* Under StarPU-MPI every rank submits the same flow: starpu_mpi_task_build decides from the
 * owners of the written tiles which rank runs the task (NULL elsewhere) and posts the
 * transfers of the tiles it reads; post_build sends written tiles back to their owners. */
static int submit_mpi(int kernel, const void *args, const starpu_data_handle_t *handles,
                      const enum starpu_data_access_mode *modes)
{
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    struct starpu_data_descr descr[STARPU_NMAXBUFS];
    for (int i = 0; i < k->nbuffers; i++) {
        descr[i].handle = handles[i];
        descr[i].mode = modes ? modes[i] : k->modes[i];
    }
    tt_mpi_resolve_task(descr, k->nbuffers); /* tiles of outputs placed by their first writer */
    int rc = tt_mpi_stream_check(descr, k->nbuffers, k->name);
    if (rc)
        return rc;
    kernel_ntasks[kernel]++; /* the flow's task count: the same on every rank */
    if (!tt_mpi_involved(descr, k->nbuffers)) /* nothing to run, send or forget here */
        return TT_OK;
    for (int i = 0; i < k->nbuffers; i++)
        descr[i].handle = tt_slot_register(descr[i].handle); /* other ranks' (lazy) tiles it needs */
    struct starpu_task *task = starpu_mpi_task_build(MPI_COMM_WORLD, k->cl, STARPU_DATA_MODE_ARRAY, descr,
                                                     k->nbuffers, 0);
    if (!task) { /* another rank runs it */
        starpu_mpi_task_post_build(MPI_COMM_WORLD, k->cl, STARPU_DATA_MODE_ARRAY, descr, k->nbuffers, 0);
        return TT_OK;
    }
    /* starpu_mpi_task_build made the task: its args are an allocation of their own */
    void *copy = malloc(k->args_size);
    if (!copy) {
        task->destroy = 0;
        starpu_task_destroy(task);
        return tt_error(TT_ENOMEM, "%s: out of memory", k->name);
    }
    task->cl_arg = memcpy(copy, args, k->args_size);
    task->cl_arg_size = k->args_size;
    task->cl_arg_free = 1;
    rc = finish_and_submit(task, kernel);
    if (rc)
        return rc; /* the other ranks go on: this rank's Python raises, and the job aborts (excepthook) */
    starpu_mpi_task_post_build(MPI_COMM_WORLD, k->cl, STARPU_DATA_MODE_ARRAY, descr, k->nbuffers, 0);
    return TT_OK;
}
#endif

/* A task and its arguments in one allocation (what starpu_task_create does, plus room for
 * args after the task): StarPU frees a task whose `destroy` flag is set with free(), which
 * frees the arguments with it (cl_arg_free stays 0).  One malloc per task instead of two,
 * and no separate free of the arguments on the worker that ran it. */
#define TASK_ARGS_OFFSET ((sizeof(struct starpu_task) + 15) & ~(size_t)15)

static struct starpu_task *task_with_args(const tt_kernel_desc *k, const void *args)
{
    struct starpu_task *task = malloc(TASK_ARGS_OFFSET + k->args_size);
    if (!task)
        return NULL;
    starpu_task_init(task);
    task->destroy = 1;
    task->cl_arg = (char *)task + TASK_ARGS_OFFSET;
    task->cl_arg_size = k->args_size;
    memcpy(task->cl_arg, args, k->args_size);
    return task;
}

/* The caller keeps args (e.g. on its stack): they are copied into the task. */
static int submit(int kernel, const void *args, const starpu_data_handle_t *handles,
                  const enum starpu_data_access_mode *modes)
{
    const tt_kernel_desc *k = &tt_kernel_table[kernel];
    /* Every task passes here: a dtype the kernel's line in kernels.def does not list would
     * have its body read tiles with the wrong element size (or do nothing). */
    const int64_t dtype = *(const int64_t *)args;
    if (dtype < 0 || dtype >= TT_NDTYPES || !(k->dtypes >> dtype & 1))
        return tt_error(TT_EINVAL, "%s: dtype %s is not supported by this kernel (it takes %s)", k->name,
                        tt_dtype_name((int)dtype), tt_dtype_list(k->dtypes));
    tt_ensure_running();
    if (__builtin_expect(tt_memory_limited, 0)) { /* its tiles must fit under the limit (csrc/memory.c) */
        int rc = tt_memory_check_task(kernel, handles, k->nbuffers);
        if (rc)
            return rc;
        tt_memory_throttle(); /* (the workers running: it may wait for tasks to end) */
    }
#ifdef TT_HAVE_MPI
    if (__builtin_expect(tt_mpi_on, 0))
        return submit_mpi(kernel, args, handles, modes);
#endif
    struct starpu_task *task = task_with_args(k, args);
    if (!task)
        return tt_error(TT_ENOMEM, "%s: out of memory for a task", k->name);
    task->cl = k->cl;
    task->nbuffers = k->nbuffers;
    for (int i = 0; i < k->nbuffers; i++) {
        task->handles[i] = handles[i];
        task->modes[i] = modes ? modes[i] : k->modes[i];
    }
    int rc = finish_and_submit(task, kernel);
    if (rc)
        return rc;
    kernel_ntasks[kernel]++;
    return TT_OK;
}

int tt_submit(int kernel, const void *args, const starpu_data_handle_t *handles,
              const enum starpu_data_access_mode *modes)
{
    int rc = tt_gate_enter(tt_kernel_table[kernel].name); /* not while shutdown stops StarPU */
    if (rc)
        return rc;
    rc = submit(kernel, args, handles, modes);
    tt_gate_leave();
    return rc;
}
