/* The simulation flavour only (CMakeLists.txt, TT_FLAVOUR=sim; docs/simulation.md).
 *
 * Under SimGrid every thread that calls StarPU must be a simulated actor, and an actor must
 * never block outside SimGrid: the actors run one at a time, so an actor asleep in a plain
 * pthread_cond_wait or nanosleep stops the whole simulation (and a plain thread calling
 * StarPU crashes it).  libtiletrain's own threads (tt_wait_for's helper, the unregistering
 * reaper) and its waits use plain pthreads.  This file gives the simulation flavour the same
 * sources unchanged: the link wraps those calls (-Wl,--wrap=...) and here, in an actor,
 *   pthread_create/join     -> simulated actors (starpu_pthread_create/join),
 *   nanosleep, sched_yield  -> simulated sleeps,
 *   pthread_mutex_lock      -> trylock, else a 1 us simulated sleep and again,
 *   pthread_cond_(timed)wait -> unlock, a 10 us simulated sleep, lock: a spurious wake-up,
 *                              which every caller already handles (it re-checks its condition).
 * Outside an actor (a thread SimGrid does not know) the plain calls run.
 *
 * The submitting thread's own work (Python, the op layer, tile expansion) takes no simulated
 * time by itself: starpu_task_submit is wrapped to charge TILETRAIN_SIM_SUBMIT_US simulated
 * microseconds per task submitted from outside the workers (the machine's calibrated cost
 * per task, tiletrain/sim/calibrate.py; 0 or unset: none). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include <starpu.h>
#include <xbt/log.h>

int __real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int __real_pthread_join(pthread_t t, void **ret);
int __real_pthread_mutex_lock(pthread_mutex_t *m);
int __real_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
int __real_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abstime);
int __real_nanosleep(const struct timespec *req, struct timespec *rem);
int __real_sched_yield(void);

#define COND_NAP_MIN_US 10.0
#define COND_NAP_MAX_US 1000.0
#define LOCK_NAP_US 1.0f

static int in_actor(void) { return starpu_pthread_self() != 0; }

_Static_assert(sizeof(starpu_pthread_t) <= sizeof(pthread_t), "an actor does not fit in a pthread_t");

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    if (!in_actor())
        return __real_pthread_create(t, attr, fn, arg);
    starpu_pthread_t actor;
    int rc = starpu_pthread_create(&actor, NULL, fn, arg);
    if (rc == 0)
        *t = (pthread_t)actor;
    return rc;
}

int __wrap_pthread_join(pthread_t t, void **ret)
{
    if (!in_actor())
        return __real_pthread_join(t, ret);
    if (ret)
        *ret = NULL;
    return starpu_pthread_join((starpu_pthread_t)t, NULL);
}

int __wrap_pthread_mutex_lock(pthread_mutex_t *m)
{
    if (!in_actor())
        return __real_pthread_mutex_lock(m);
    int rc;
    while ((rc = pthread_mutex_trylock(m)) == EBUSY)
        starpu_usleep(LOCK_NAP_US); /* its holder is another actor, which runs meanwhile */
    return rc;
}

/* A waiter's naps double from 10 us to 1 ms of simulated time while it keeps waiting (one
 * wait noticed at most 1 ms late, and few wake-ups of the simulation), and start again at
 * 10 us once it has done something else in between. */
static __thread double nap_us = COND_NAP_MIN_US, nap_end_us = -1.0;


static int nap_unlocked(pthread_mutex_t *m)
{
    double now = starpu_timing_now();
    if (nap_end_us < 0 || now - nap_end_us > 1.0) /* (the same wait goes on within 1 us) */
        nap_us = COND_NAP_MIN_US;
    else if (nap_us < COND_NAP_MAX_US)
        nap_us *= 2;
    pthread_mutex_unlock(m);
    starpu_usleep((float)nap_us);
    nap_end_us = starpu_timing_now();
    return __wrap_pthread_mutex_lock(m);
}

int __wrap_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    if (!in_actor())
        return __real_pthread_cond_wait(c, m);
    return nap_unlocked(m);
}

int __wrap_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abstime)
{
    if (!in_actor())
        return __real_pthread_cond_timedwait(c, m, abstime);
    return nap_unlocked(m);
}

int __wrap_nanosleep(const struct timespec *req, struct timespec *rem)
{
    if (!in_actor())
        return __real_nanosleep(req, rem);
    starpu_usleep((float)(req->tv_sec * 1e6 + req->tv_nsec / 1e3));
    if (rem)
        rem->tv_sec = rem->tv_nsec = 0;
    return 0;
}

int __wrap_sched_yield(void)
{
    if (!in_actor())
        return __real_sched_yield();
    starpu_usleep(LOCK_NAP_US);
    return 0;
}

/* libtiletrain deregisters its idle hook after starpu_shutdown, when the calling thread is no
 * longer a simulated actor and StarPU's (simulated) lock cannot be taken: no worker is left
 * to call the hook, and a simulated process starts StarPU once, so there is nothing to undo. */
void __real_starpu_idle_hook_deregister(int hook_id);

void __wrap_starpu_idle_hook_deregister(int hook_id)
{
    if (in_actor())
        __real_starpu_idle_hook_deregister(hook_id);
}

/* SimGrid's informational messages (its configuration, the platform file's version) would
 * start every simulated program: warnings and errors only. */
int __real_starpu_init(struct starpu_conf *conf);
void __real_starpu_shutdown(void);
int __real_starpu_profiling_worker_get_info(int workerid, struct starpu_profiling_worker_info *info);

/* ---- the session's totals for `tiletrain simulate` (tiletrain/sim/run.py) ----
 * StarPU resets a worker's counters each time they are read (a program's
 * tiletrain.trace.worker_stats()): the reads are summed here, and at starpu_shutdown the
 * totals and the simulated time since starpu_init go to the file TILETRAIN_SIM_STATS_FILE
 * names, one line per worker: "worker<TAB>id<TAB>kind<TAB>name<TAB>tasks<TAB>executing us<TAB>sleeping us". */
static double init_us = -1.0;
static struct {
    long tasks;
    double executing_us, sleeping_us;
} totals[STARPU_NMAXWORKERS];

int __wrap_starpu_init(struct starpu_conf *conf)
{
    xbt_log_control_set("root.thresh:warning");
    int rc = __real_starpu_init(conf);
    if (rc == 0)
        init_us = starpu_timing_now();
    return rc;
}

int __wrap_starpu_profiling_worker_get_info(int workerid, struct starpu_profiling_worker_info *info)
{
    struct starpu_profiling_worker_info mine;
    int rc = __real_starpu_profiling_worker_get_info(workerid, info ? info : &mine);
    const struct starpu_profiling_worker_info *got = info ? info : &mine;
    if (rc == 0 && workerid >= 0 && workerid < STARPU_NMAXWORKERS) {
        totals[workerid].tasks += got->executed_tasks;
        totals[workerid].executing_us += starpu_timing_timespec_to_us(&got->executing_time);
        totals[workerid].sleeping_us += starpu_timing_timespec_to_us(&got->sleeping_time);
    }
    return rc;
}

void __wrap_starpu_shutdown(void)
{
    const char *path = getenv("TILETRAIN_SIM_STATS_FILE");
    FILE *f = path && path[0] && init_us >= 0 ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "simulated_us\t%.3f\n", starpu_timing_now() - init_us);
        unsigned n = starpu_worker_get_count();
        for (unsigned w = 0; w < n && w < STARPU_NMAXWORKERS; w++) {
            __wrap_starpu_profiling_worker_get_info((int)w, NULL); /* what is left since the last read */
            char name[64];
            starpu_worker_get_name((int)w, name, sizeof name);
            enum starpu_worker_archtype t = starpu_worker_get_type((int)w);
            const char *kind = t == STARPU_CPU_WORKER ? "cpu" : t == STARPU_CUDA_WORKER ? "cuda"
                               : t == STARPU_OPENCL_WORKER ? "opencl" : "other";
            fprintf(f, "worker\t%u\t%s\t%s\t%ld\t%.3f\t%.3f\n", w, kind, name, totals[w].tasks,
                    totals[w].executing_us, totals[w].sleeping_us);
        }
        fclose(f);
    }
    __real_starpu_shutdown();
}

int __real_starpu_task_submit(struct starpu_task *task);

int __wrap_starpu_task_submit(struct starpu_task *task)
{
    static double cost_us = -1.0;
    if (cost_us < 0) {
        const char *v = getenv("TILETRAIN_SIM_SUBMIT_US");
        cost_us = v ? atof(v) : 0.0;
        if (!(cost_us > 0)) /* (also NaN) */
            cost_us = 0.0;
    }
    if (cost_us > 0 && in_actor() && starpu_worker_get_id() < 0) /* the submitting thread, not a worker */
        starpu_usleep((float)cost_us);
    return __real_starpu_task_submit(task);
}
