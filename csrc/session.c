/* The top of the core: a session's start and stop (every other core file's init and shutdown,
 * in order), waits, introspection.  The state they share lives in csrc/state.c. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <starpu.h>
#include <starpu_expert.h>
#include "tt_blas.h"

#include "tt_internal.h"
#include "tt_trace.h"

#ifndef TT_STARPU_SOURCE
#define TT_STARPU_SOURCE "system"
#endif
#ifndef TT_STARPU_PREFIX
#define TT_STARPU_PREFIX ""
#endif

#define TT_STR_(x) #x
#define TT_STR(x) TT_STR_(x)





/* At shutdown: unregister every live tensor's tiles and mark it dead, so that a Python
 * object that outlives the runtime raises instead of touching freed handles. */
void tt_tensors_kill_all(void)
{
    tt_tensors_lock();
    struct tt_tensor *t = tt_tensors_detach_all();
    while (t) {
        struct tt_tensor *next = t->next;
        tt_tensor_release_tiles(t, 0); /* every task is done (csrc/tile.c) */
        t->dead = 1;
        t->prev = t->next = NULL;
        t = next;
    }
    tt_tensors_unlock();
}

int tt_devices_init(void);      /* csrc/devices.c */
void tt_devices_shutdown(void);
void tt_pool_install(void);     /* csrc/pool.c */
void tt_pool_drain(void);

/* Idle workers: StarPU 1.3 (Debian's build: non-blocking drivers) has a worker that finds no
 * task look again at once, so an idle worker keeps its core busy.  Where threads outnumber
 * the cores (ranks sharing one machine) that core is taken from threads with work: another
 * rank's worker, the submitting threads, StarPU-MPI's thread.  With a nap set
 * (tt_set_idle_nap), a worker that has found nothing for IDLE_SPIN_US sleeps nap_us at a
 * time (StarPU calls the idle hook each time its driver loop finds no task) until it finds
 * one again. */
#define IDLE_SPIN_US 50.0
static int idle_nap_us = 0;
static int idle_hook_id = -1;
static __thread double idle_since = -1.0, idle_last = -1.0; /* this worker's idle spell, in us */

static unsigned idle_hook(void *arg)
{
    (void)arg;
    int nap = __atomic_load_n(&idle_nap_us, __ATOMIC_RELAXED);
    if (nap <= 0)
        return 0;
    double t = starpu_timing_now(); /* us */
    if (idle_last < 0 || t - idle_last > 20.0) /* it did something else since its last call: a task */
        idle_since = t;
    if (t - idle_since >= IDLE_SPIN_US) {
        struct timespec d = {nap / 1000000, (long)(nap % 1000000) * 1000};
        nanosleep(&d, NULL);
        t = starpu_timing_now();
    }
    idle_last = t; /* after the nap: the next call's gap is the time spent outside the hook */
    return 0;
}

void tt_set_idle_nap(int nap_us) { __atomic_store_n(&idle_nap_us, nap_us > 0 ? nap_us : 0, __ATOMIC_RELAXED); }

static void stop_starpu(void)
{
    if (tt_mpi_on)
        tt_mpi_stop(); /* starpu_mpi_shutdown, then starpu_shutdown */
    else
        starpu_shutdown();
    if (idle_hook_id >= 0) /* (no worker left to call it) */
        starpu_idle_hook_deregister(idle_hook_id);
    idle_hook_id = -1;
}

/* Every task done; under MPI also every transfer, on every rank (collective). */
static int wait_everything(void)
{
    if (tt_mpi_on)
        return tt_mpi_wait_all();
    int ret = starpu_task_wait_for_all();
    if (ret != 0)
        return tt_error(TT_ESTARPU, "starpu_task_wait_for_all failed (%d)", ret);
    return TT_OK;
}


/* A simulation that does not execute its kernels (STARPU_SIMGRID_EXECUTE unset or 0) needs no
 * tile's values: its host buffers are allocated "folded" (StarPU's STARPU_MALLOC_SIMULATION_FOLDED:
 * every STARPU_MALLOC_SIMULATION_FOLD MiB of a buffer maps the same file pages), so a model
 * larger than this computer's memory can be simulated; still counted, so memory limits apply
 * as on the machine simulated.  Not with csrc/pool.c's hooks, which StarPU asks before it
 * folds.  Returns 1 where set. */
static int fold_host_memory(void)
{
#ifdef STARPU_SIMGRID
    if (!starpu_get_env_number_default("STARPU_SIMGRID_EXECUTE", 0)) {
        starpu_malloc_on_node_set_default_flags(STARPU_MAIN_RAM, STARPU_MALLOC_PINNED | STARPU_MALLOC_COUNT |
                                                                      STARPU_MALLOC_SIMULATION_FOLDED);
        return 1;
    }
#endif
    return 0;
}

int tt_init(const tt_config *cfg)
{
    if (tt_session_active())
        return tt_error(TT_EBUSY, "the tiletrain runtime is already initialised; call shutdown() first");
    if (!cfg)
        return tt_error(TT_EINVAL, "config is NULL");
    tt_config_store(cfg);
    tt_blas_single_thread(); /* csrc/kernels/cpu/tt_blas.h */
    tt_memory_begin(cfg);    /* the memory limit, as StarPU will read it (csrc/memory.c) */

    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.catch_signals = 0; /* leave SIGINT to Python */
    if (cfg->ncpu >= 0)
        conf.ncpus = cfg->ncpu;
    if (cfg->nopencl >= 0)
        conf.nopencl = cfg->nopencl;
    if (cfg->ncuda >= 0)
        conf.ncuda = cfg->ncuda;
    if (cfg->sched && cfg->sched[0]) {
        /* tiletrain's own policies (csrc/sched/) are passed as a struct; StarPU lets a set
         * STARPU_SCHED override it, so refuse that combination instead of ignoring the request */
        struct starpu_sched_policy *own = tt_sched_find(cfg->sched);
        const char *env = getenv("STARPU_SCHED");
        if (own && env && env[0] && strcmp(env, cfg->sched) != 0)
            return tt_error(TT_EINVAL, "sched='%s' is a tiletrain policy, but STARPU_SCHED=%s in the environment "
                            "would override it: unset STARPU_SCHED", cfg->sched, env);
        if (own)
            conf.sched_policy = own;
        else
            conf.sched_policy_name = cfg->sched;
    }
    if (cfg->calibrate >= 0)
        conf.calibrate = cfg->calibrate;
    int ret;
    if (cfg->mpi) {
        /* StarPU-MPI: initialises MPI once per process, then starts StarPU with conf */
        int rc = tt_mpi_start(&conf);
        if (rc)
            return rc;
        ret = 0;
    } else {
        ret = starpu_init(&conf);
    }
    if (ret == -ENODEV)
        return tt_error(TT_ESTARPU, "starpu_init: no worker is available (check STARPU_NCPU / ncpu)");
    if (ret != 0)
        return tt_error(TT_ESTARPU, "starpu_init failed: %s", strerror(-ret));
    if (starpu_worker_get_count() == 0) {
        stop_starpu();
        return tt_error(TT_ESTARPU, "StarPU started with no worker (ncpu=%d)", cfg->ncpu);
    }
    idle_hook_id = starpu_idle_hook_register(idle_hook, NULL); /* -1: none (then StarPU's polling) */
    tt_memory_started(); /* under a cap: what a tile's StarPU structures cost (csrc/memory.c) */
    tt_reuse_configure(cfg); /* the one reuse switch and cap (csrc/tile.c) */
    if (!fold_host_memory())
        tt_pool_install(); /* its buffer level (csrc/pool.c; CPU-only sessions) */
    int rc = tt_devices_init(); /* OpenCL programs, cuBLAS handles (csrc/devices.c) */
    if (rc) {
        stop_starpu();
        tt_pool_drain();
        return rc;
    }
    /* explicitly both ways: StarPU keeps the status across starpu_shutdown/starpu_init */
    starpu_profiling_status_set(cfg->profile ? STARPU_PROFILING_ENABLE : STARPU_PROFILING_DISABLE);
    tt_session_set_running(1);
    tt_trace_session_begin(cfg->profile); /* records every task while profiling is on */
    tt_gate_open();
    return TT_OK;
}

extern void tt_submit_reset_counters(void);
static void stop_waiter(void); /* tt_wait_for's helper thread, below */

int tt_shutdown(void)
{
    if (tt_gate_begin_close()) /* the calls in flight finish first */
        return tt_error(TT_ENOTINIT, "the tiletrain runtime is not initialised");
    tt_ensure_running();
    tt_reaper_stop(); /* the tensors freed so far are unregistered (csrc/tile.c) */
    if (tt_mpi_on)
        tt_mpi_quiesce(); /* every rank's shutdown meets here; a diverged rank aborts the job */
    else
        wait_everything();
    stop_waiter();
    tt_tiles_drain(); /* the handles kept for reuse (csrc/tile.c) */
    tt_memory_quiesce(); /* the disk node's own transfers (csrc/memory.c) */
    tt_trace_session_end();
    tt_tensors_kill_all();
    tt_devices_shutdown();
    stop_starpu();
    tt_pool_drain();
    tt_session_set_running(0);
    tt_memory_end(); /* csrc/memory.c */
    tt_submit_reset_counters();
    tt_gate_closed();
    return TT_OK;
}

int tt_wait_idle(int pause)
{
    int rc = tt_gate_enter("wait");
    if (rc)
        return rc;
    tt_ensure_running();
    tt_reaper_flush(); /* dropped tensors' unregistrations are submitted first */
    int64_t nrecycled;
    starpu_data_handle_t *recycled = tt_tiles_detach(&nrecycled); /* kept for reuse (csrc/tile.c) */
    rc = wait_everything();
    if (rc == TT_OK && pause)
        tt_pause_idle(); /* before the unregistrations: polling workers would share the cores with them */
    tt_tiles_unregister(recycled, nrecycled, rc == TT_OK); /* their tasks are done: freed now */
    tt_gate_leave();
    return rc;
}

int tt_wait_all(void) { return tt_wait_idle(0); }

/* tt_wait_for's helper thread: it blocks in starpu_task_wait_for_all() while the caller
 * sleeps on a condition variable with a deadline, so the caller wakes as soon as the last task
 * ends (no polling latency, no wake-ups stealing a core from the workers) and still returns
 * after `seconds`, so that Python can check for Ctrl-C between slices (and, under MPI,
 * tt_wait_for whether a rank has shut down: it polled every 200 us before, ~650 wake-ups of
 * a data-mode step, each preempting the worker on its core). */
static pthread_mutex_t waiter_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t waiter_go = PTHREAD_COND_INITIALIZER;
static pthread_cond_t waiter_done = PTHREAD_COND_INITIALIZER;
static pthread_t waiter_thread;
static int waiter_started = 0, waiter_busy = 0, waiter_quit = 0; /* under waiter_mu */
static uint64_t waiter_rounds = 0;                                /* under waiter_mu */

static void *waiter_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&waiter_mu);
    for (;;) {
        while (!waiter_busy && !waiter_quit)
            pthread_cond_wait(&waiter_go, &waiter_mu);
        if (waiter_quit)
            break;
        pthread_mutex_unlock(&waiter_mu);
        starpu_task_wait_for_all();
        pthread_mutex_lock(&waiter_mu);
        waiter_busy = 0;
        waiter_rounds++;
        pthread_cond_broadcast(&waiter_done);
    }
    pthread_mutex_unlock(&waiter_mu);
    return NULL;
}

/* At shutdown, after every task has ended (so the thread is not inside StarPU). */
static void stop_waiter(void)
{
    pthread_mutex_lock(&waiter_mu);
    int started = waiter_started;
    waiter_quit = 1;
    pthread_cond_signal(&waiter_go);
    pthread_mutex_unlock(&waiter_mu);
    if (started)
        pthread_join(waiter_thread, NULL);
    waiter_started = waiter_busy = waiter_quit = 0;
}

/* Poll, with sleeps (sleep_for's fallback without its helper thread), and under MPI stop
 * early when another rank has shut down while these tasks wait for it. */
static int poll_for(double seconds)
{
    double end = tt_now() + seconds;
    long sleep_ns = 2000;
    int rc;
    while (starpu_task_nsubmitted() > 0) {
        if (tt_mpi_on && (rc = tt_mpi_check_diverged("wait")) != TT_OK)
            return rc; /* a rank that has shut down holds what these tasks wait for */
        if (tt_now() >= end)
            return 0;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 200000)
            sleep_ns *= 2;
    }
    return 1;
}

/* Sleep on waiter_done until the helper thread's round ends or the deadline. */
static int sleep_for(double seconds)
{
    const struct timespec deadline = tt_deadline(seconds);
    pthread_mutex_lock(&waiter_mu);
    if (!waiter_started) {
        if (pthread_create(&waiter_thread, NULL, waiter_main, NULL) != 0) {
            pthread_mutex_unlock(&waiter_mu);
            return poll_for(seconds);
        }
        waiter_started = 1;
    }
    if (!waiter_busy) {
        waiter_busy = 1;
        pthread_cond_signal(&waiter_go);
    }
    const uint64_t round = waiter_rounds;
    while (waiter_rounds == round)
        if (pthread_cond_timedwait(&waiter_done, &waiter_mu, &deadline) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&waiter_mu);
    return starpu_task_nsubmitted() == 0;
}

/* 1 when no task is pending, 0 after `seconds` with tasks still pending (Python checks for
 * Ctrl-C between slices), < 0 on an error. */
int tt_wait_for(double seconds)
{
    int rc = tt_gate_enter("wait");
    if (rc)
        return rc;
    tt_ensure_running();
    tt_reaper_flush();
    if (starpu_task_nsubmitted() == 0)
        rc = 1;
    else if ((rc = sleep_for(seconds)) == 0 && tt_mpi_on)
        rc = tt_mpi_check_diverged("wait"); /* tasks left after the slice: is a rank gone? */
    tt_gate_leave();
    return rc;
}

int tt_pending(void) { return tt_session_active() ? starpu_task_nsubmitted() : 0; }

int tt_nworkers(void) { return tt_session_active() ? (int)starpu_worker_get_count() : 0; }
int tt_nmemnodes(void) { return tt_session_active() ? (int)starpu_memory_nodes_get_count() : 0; }

int tt_worker_info(int worker, char *name, size_t namelen, int *kind, int *memnode)
{
    if (!tt_session_active())
        return tt_error(TT_ENOTINIT, "the tiletrain runtime is not initialised");
    if (worker < 0 || worker >= (int)starpu_worker_get_count())
        return tt_error(TT_EINVAL, "worker id %d out of range", worker);
    starpu_worker_get_name(worker, name, namelen);
    *kind = (int)starpu_worker_get_type(worker);
    *memnode = (int)starpu_worker_get_memory_node(worker);
    return TT_OK;
}


const char *tt_starpu_version(void)
{
    static char buf[32];
    int a, b, c;
    starpu_get_version(&a, &b, &c);
    snprintf(buf, sizeof buf, "%d.%d.%d", a, b, c);
    return buf;
}

const char *tt_build_options(void)
{
    return "starpu_headers=" TT_STR(STARPU_MAJOR_VERSION) "." TT_STR(STARPU_MINOR_VERSION) "." TT_STR(STARPU_RELEASE_VERSION)
#ifdef STARPU_USE_CUDA
           " starpu_cuda=yes"
#else
           " starpu_cuda=no"
#endif
#ifdef STARPU_USE_OPENCL
           " starpu_opencl=yes"
#else
           " starpu_opencl=no"
#endif
#ifdef STARPU_USE_MPI
           " starpu_mpi=yes"
#else
           " starpu_mpi=no"
#endif
#ifdef STARPU_USE_FXT
           " starpu_fxt=yes"
#else
           " starpu_fxt=no"
#endif
#ifdef TT_HAVE_MPI
           " tiletrain_mpi=yes"
#else
           " tiletrain_mpi=no"
#endif
           " starpu_maxcpus=" TT_STR(STARPU_MAXCPUS)
           " starpu_source=" TT_STARPU_SOURCE
#ifdef TT_HAVE_CUDA_KERNELS
           " tiletrain_cuda_kernels=yes"
#else
           " tiletrain_cuda_kernels=no"
#endif
#ifdef TT_HAVE_OPENCL_KERNELS
           " tiletrain_opencl_kernels=yes"
#else
           " tiletrain_opencl_kernels=no"
#endif
           " blas=" TT_BLAS_NAME;
}

/* The StarPU install tiletrain was built against: scripts/build-starpu.sh's cache entry, or
 * "" for the one pkg-config finds by default (Debian's libstarpu-dev). */
const char *tt_starpu_prefix(void) { return TT_STARPU_PREFIX; }

/* FxT (StarPU built --with-fxt, the session started with STARPU_FXT_TRACE=1): stop or
 * restart recording events, e.g. around one training step (starpu_fxt_stop_profiling). */
int tt_fxt_record(int on)
{
#ifdef STARPU_USE_FXT
    if (!tt_session_active())
        return tt_error(TT_ENOTINIT, "the tiletrain runtime is not initialised");
    if (on)
        starpu_fxt_start_profiling();
    else
        starpu_fxt_stop_profiling();
    return TT_OK;
#else
    (void)on;
    return tt_error(TT_EINVAL, "this StarPU was built without FxT (configure --with-fxt)");
#endif
}

/* The BLAS in use, its version and core type, e.g. "openblas (OpenBLAS 0.3.21 ... Zen ...; core Zen)". */
const char *tt_blas_info(void)
{
    static char buf[256];
#ifdef TT_BLAS_MKL
    char ver[198];
    mkl_get_version_string(ver, (int)sizeof ver);
    snprintf(buf, sizeof buf, "mkl (%s)", ver);
#else
    snprintf(buf, sizeof buf, "openblas (%s; core %s)", openblas_get_config(), openblas_get_corename());
#endif
    return buf;
}

int tt_kernel_count(void) { return TT_NKERNELS; }
const char *tt_kernel_name(int k) { return (k >= 0 && k < TT_NKERNELS) ? tt_kernel_table[k].name : NULL; }
int tt_kernel_nbuffers(int k) { return (k >= 0 && k < TT_NKERNELS) ? tt_kernel_table[k].nbuffers : -1; }
int tt_kernel_is_map(int k) { return (k >= 0 && k < TT_NKERNELS) ? tt_kernel_table[k].is_map : 0; }

/* 1 when kernel k's codelet has a CUDA function linked in (TT_HAVE_CUDA_KERNELS builds) */
int tt_kernel_cuda_func(int k)
{
    return (k >= 0 && k < TT_NKERNELS) ? tt_kernel_table[k].cl->cuda_funcs[0] != NULL : 0;
}

int tt_kernel_dtypes(int k) { return (k >= 0 && k < TT_NKERNELS) ? (int)tt_kernel_table[k].dtypes : 0; }

int tt_kernel_acc_buffers(int k) { return (k >= 0 && k < TT_NKERNELS) ? (int)tt_kernel_table[k].acc : 0; }

int tt_kernel_bool_buffers(int k) { return (k >= 0 && k < TT_NKERNELS) ? (int)tt_kernel_table[k].bools : 0; }


int64_t tt_memory_total(int node)
{
    if (!tt_session_active() || node < 0 || node >= (int)starpu_memory_nodes_get_count())
        return -1;
    return (int64_t)starpu_memory_get_total((unsigned)node);
}

int64_t tt_memory_used(int node)
{
    int64_t total = tt_memory_total(node);
    if (total < 0)
        return -1;
    return total - (int64_t)starpu_memory_get_available((unsigned)node);
}


