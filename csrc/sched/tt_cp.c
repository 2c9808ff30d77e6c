/* tt-cp: a critical-path list scheduler with stage affinity -- and the template for your own
 * StarPU policy in tiletrain.
 *
 * What it does
 *   Ready tasks wait in binary heaps ordered by (priority, highest first; then submission
 *   order, oldest first -- not the order in which they became ready, which would run the
 *   tasks of all micro-batches of one layer before the next layer of the first one).  Tasks that every worker can run share one heap; tasks that only
 *   some workers can run (stage affinity: tiletrain.pipeline.stage / tt_affinity_set, or a
 *   codelet without an implementation for some worker kind) go to the own heap of the
 *   eligible worker with the fewest queued tasks.  An idle worker takes the better of the
 *   top of its own heap and the top of the shared heap.  With the priorities set to bottom
 *   levels (tiletrain.pipeline.bottom_level_priorities + priority_plan: the longest path of
 *   measured durations from a task to the end of the DAG), this is HLFET/critical-path list
 *   scheduling; with phase hints (backward above forward) it gives 1F1B-like orders.  Push
 *   and pop are O(log n), unlike a central list that is scanned for restricted tasks.
 *   Idle workers poll (Debian's StarPU has non-blocking drivers); tt-cp makes them
 *   sched_yield() between polls (RuntimeConfig.cp_yield off, TILETRAIN_CP_YIELD=0: plain spinning) and, after 64 empty
 *   polls, nap on a condition variable -- woken at once by the push of a task they can run,
 *   else after an exponential backoff capped at RuntimeConfig.cp_idle_sleep_us (TILETRAIN_CP_IDLE_SLEEP_US) microseconds
 *   (default 1000; 0 = never nap, spin).  Idle workers then leave the cores to working
 *   threads: other workers when there are more workers than cores (sleeping synthetic
 *   tasks), the submitting thread, other processes.
 *
 * Writing your own policy (copy this file)
 *   1. cp csrc/sched/tt_cp.c csrc/sched/my_policy.c; rename the `cp_` functions (they are
 *      static, so only the struct and the registration need new names) and set
 *      .policy_name (lower case, digits, '-' or '_': this is the name Python uses).
 *   2. Keep the contract StarPU expects:
 *      - submit_hook(task) (optional) is called at submission, in submission order;
 *        task->sched_data is the policy's own field (tt-cp numbers the tasks there).
 *      - push_task(task) is called when a task becomes ready, by the submitting thread or
 *        by a worker that just released a dependency.  Store the task, call
 *        starpu_push_task_end(task) once stored, return 0.
 *      - pop_task(ctx) is called by an idle worker (starpu_worker_get_id_check() tells
 *        which); return a task it can run, or NULL.  StarPU holds that worker's scheduling
 *        mutex: take your own mutex between starpu_worker_relax_on()/_off() as below.
 *      - Only return a task to a worker for which
 *        starpu_worker_can_execute_task_first_impl(worker, task, NULL) is true.
 *      - Debian's StarPU has non-blocking drivers (idle workers poll pop_task), so there is
 *        nobody to wake; with blocking drivers wake an eligible worker after a push
 *        (starpu_wake_worker_relax_light), as the #ifndef below does.
 *      - init_sched sets the priority range that tiletrain.priority() checks against
 *        (starpu_sched_ctx_set_min/max_priority); without it the range is [0, 0].
 *   3. End the file with TT_SCHED_REGISTER(your_struct).  Rebuild (pip install -e .):
 *      CMake compiles every .c file in csrc/sched, and tiletrain.init(sched="my-policy"),
 *      `--sched my-policy` and STARPU_SCHED=my-policy select it (tiletrain unsets
 *      STARPU_SCHED during starpu_init and passes the struct, since StarPU lets the
 *      variable override a configured policy).
 *   4. Check it: tests/trace/test_sched.py runs every registered policy on a small op;
 *      `tiletrain bench sched --scheds my-policy lws` compares it with StarPU's.
 *   No Python ever runs on a worker: a policy is C only.
 */
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <pthread.h>

#include "tt_sched.h"

typedef struct cp_item {
    struct starpu_task *task;
    int prio;
    uint64_t seq;
} cp_item;

typedef struct cp_heap {
    cp_item *v;
    int n, cap;
} cp_heap;

typedef struct cp_nap {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int napping;
} cp_nap;

typedef struct cp_data {
    starpu_pthread_mutex_t mutex;
    cp_heap shared;  /* tasks every worker can run */
    cp_heap *own;    /* per worker: tasks restricted to some workers */
    unsigned nworkers;
    int queued;      /* tasks in all heaps; read without the mutex by polling workers */
    uint64_t nsubmitted; /* submission counter (cp_submit_hook) */
    int yield;       /* idle workers sched_yield() (tt_config.cp_yield) */
    long idle_sleep_us; /* > 0: after CP_SPIN_POLLS empty polls, idle workers nap up to this */
    int *idle_polls; /* per worker: empty polls in a row */
    struct cp_nap *nap; /* per worker: napping workers are woken by the push of a task for them */
} cp_data;

#define CP_SPIN_POLLS 64

/* a before b? */
static int cp_better(const cp_item *a, const cp_item *b)
{
    return a->prio > b->prio || (a->prio == b->prio && a->seq < b->seq);
}

static int cp_heap_push(cp_heap *h, cp_item it)
{
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        cp_item *v = realloc(h->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        h->v = v;
        h->cap = cap;
    }
    int i = h->n;
    __atomic_store_n(&h->n, i + 1, __ATOMIC_RELAXED); /* read without the mutex by idle workers */
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!cp_better(&it, &h->v[parent]))
            break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = it;
    return 0;
}

static cp_item cp_heap_pop(cp_heap *h)
{
    cp_item top = h->v[0];
    int n = h->n - 1;
    __atomic_store_n(&h->n, n, __ATOMIC_RELAXED);
    cp_item last = h->v[n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && cp_better(&h->v[c + 1], &h->v[c]))
            c++;
        if (!cp_better(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0)
        h->v[i] = last;
    return top;
}

static void cp_init(unsigned sched_ctx_id)
{
    cp_data *d = calloc(1, sizeof *d);
    STARPU_ASSERT(d);
    d->nworkers = starpu_worker_get_count();
    d->own = calloc(d->nworkers, sizeof *d->own);
    STARPU_ASSERT(d->own);
    STARPU_PTHREAD_MUTEX_INIT(&d->mutex, NULL);
    d->yield = tt_config_current()->cp_yield != 0;
    /* idle workers nap after a short spin (woken by the next push for them), so that they do
     * not take cores from working threads: other workers when there are more workers than
     * cores (sleeping synthetic tasks), the submitting thread, other processes */
    d->idle_sleep_us = tt_config_current()->cp_idle_sleep_us > 0 ? tt_config_current()->cp_idle_sleep_us : 0;
    d->idle_polls = calloc(d->nworkers, sizeof *d->idle_polls);
    d->nap = calloc(d->nworkers, sizeof *d->nap);
    STARPU_ASSERT(d->idle_polls && d->nap);
    for (unsigned w = 0; w < d->nworkers; w++) {
        pthread_mutex_init(&d->nap[w].mutex, NULL);
        pthread_cond_init(&d->nap[w].cond, NULL);
    }
    starpu_sched_ctx_set_policy_data(sched_ctx_id, d);
    /* any int is a valid priority (as for StarPU's prio, lws and dm* policies) */
    if (!starpu_sched_ctx_min_priority_is_set(sched_ctx_id))
        starpu_sched_ctx_set_min_priority(sched_ctx_id, INT_MIN);
    if (!starpu_sched_ctx_max_priority_is_set(sched_ctx_id))
        starpu_sched_ctx_set_max_priority(sched_ctx_id, INT_MAX);
}

static void cp_deinit(unsigned sched_ctx_id)
{
    cp_data *d = starpu_sched_ctx_get_policy_data(sched_ctx_id);
    STARPU_ASSERT_MSG(d->queued == 0, "tt-cp: %d tasks still queued at shutdown", d->queued);
    for (unsigned w = 0; w < d->nworkers; w++)
        free(d->own[w].v);
    free(d->own);
    free(d->idle_polls);
    for (unsigned w = 0; w < d->nworkers; w++) {
        pthread_mutex_destroy(&d->nap[w].mutex);
        pthread_cond_destroy(&d->nap[w].cond);
    }
    free(d->nap);
    free(d->shared.v);
    STARPU_PTHREAD_MUTEX_DESTROY(&d->mutex);
    free(d);
}

/* called at submission, in submission order: number the task (task->sched_data belongs to
 * the policy) */
static void cp_submit_hook(struct starpu_task *task)
{
    cp_data *d = starpu_sched_ctx_get_policy_data(task->sched_ctx);
    task->sched_data = (void *)(uintptr_t)__atomic_add_fetch(&d->nsubmitted, 1, __ATOMIC_RELAXED);
}

static int cp_push(struct starpu_task *task)
{
    unsigned ctx = task->sched_ctx;
    cp_data *d = starpu_sched_ctx_get_policy_data(ctx);
    struct starpu_worker_collection *workers = starpu_sched_ctx_get_worker_collection(ctx);
    struct starpu_sched_ctx_iterator it;

    starpu_worker_relax_on();
    STARPU_PTHREAD_MUTEX_LOCK(&d->mutex);
    starpu_worker_relax_off();

    /* who can run it?  all workers: shared heap; else the least loaded eligible worker */
    int neligible = 0, nall = 0, best = -1;
    workers->init_iterator(workers, &it);
    while (workers->has_next(workers, &it)) {
        unsigned w = workers->get_next(workers, &it);
        nall++;
        if (!starpu_worker_can_execute_task_first_impl(w, task, NULL))
            continue;
        neligible++;
        if (w < d->nworkers && (best < 0 || d->own[w].n < d->own[best].n))
            best = (int)w;
    }
    cp_heap *h = (neligible == nall || best < 0) ? &d->shared : &d->own[best];
    /* ties: submission order (numbered by cp_submit_hook), not the order in which tasks
     * became ready, so that earlier micro-batches and layers go first */
    cp_item item = {task, task->priority, (uint64_t)(uintptr_t)task->sched_data};
    int ret = cp_heap_push(h, item);
    STARPU_ASSERT_MSG(ret == 0, "tt-cp: out of memory");
    __atomic_add_fetch(&d->queued, 1, __ATOMIC_SEQ_CST);
    starpu_push_task_end(task);
    STARPU_PTHREAD_MUTEX_UNLOCK(&d->mutex);
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* the heap's new size before reading `napping` */
    if (d->idle_sleep_us > 0) /* wake a napping worker that can run it */
        for (unsigned w = 0; w < d->nworkers; w++) {
            if ((h != &d->shared && h != &d->own[w]) || !__atomic_load_n(&d->nap[w].napping, __ATOMIC_SEQ_CST))
                continue;
            pthread_mutex_lock(&d->nap[w].mutex);
            pthread_cond_signal(&d->nap[w].cond);
            pthread_mutex_unlock(&d->nap[w].mutex);
            break; /* one worker per task */
        }

#ifndef STARPU_NON_BLOCKING_DRIVERS
    /* blocking drivers: wake one worker that can run it */
    workers->init_iterator(workers, &it);
    while (workers->has_next(workers, &it)) {
        unsigned w = workers->get_next(workers, &it);
        if (starpu_worker_can_execute_task_first_impl(w, task, NULL) && starpu_wake_worker_relax_light((int)w))
            break;
    }
#endif
    return 0;
}

/* tasks this worker could take now (read without the mutex: a hint, re-checked under it) */
static int cp_available(cp_data *d, unsigned w)
{
    int n = __atomic_load_n(&d->shared.n, __ATOMIC_SEQ_CST);
    if (w < d->nworkers)
        n += __atomic_load_n(&d->own[w].n, __ATOMIC_SEQ_CST);
    return n;
}

/* Nothing for worker w: idle workers poll (non-blocking drivers).  Give the core to any
 * other runnable thread (a waking worker when there are more workers than cores, the
 * submitting thread, other processes) and, after CP_SPIN_POLLS empty polls, nap until a push
 * for this worker signals it.  relax_on releases this worker's scheduling mutex meanwhile. */
static void cp_idle(cp_data *d, unsigned w)
{
    if (w < d->nworkers && d->idle_sleep_us > 0 && ++d->idle_polls[w] > CP_SPIN_POLLS) {
        int k = d->idle_polls[w] - CP_SPIN_POLLS;
        long us = 1L << (k < 10 ? k : 10);
        if (us > d->idle_sleep_us)
            us = d->idle_sleep_us;
        cp_nap *nap = &d->nap[w];
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += us * 1000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec += 1;
            until.tv_nsec -= 1000000000L;
        }
        starpu_worker_relax_on();
        pthread_mutex_lock(&nap->mutex);
        __atomic_store_n(&nap->napping, 1, __ATOMIC_SEQ_CST);
        if (cp_available(d, w) == 0) /* a push after this check signals us (it reads napping) */
            pthread_cond_timedwait(&nap->cond, &nap->mutex, &until);
        __atomic_store_n(&nap->napping, 0, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&nap->mutex);
        starpu_worker_relax_off();
        return;
    }
    if (d->yield) {
        starpu_worker_relax_on();
        sched_yield();
        starpu_worker_relax_off();
    }
}

static struct starpu_task *cp_pop(unsigned sched_ctx_id)
{
    cp_data *d = starpu_sched_ctx_get_policy_data(sched_ctx_id);
    unsigned w = starpu_worker_get_id_check();
    if (cp_available(d, w) == 0) { /* stay off the mutex when there is nothing for us */
        cp_idle(d, w);
        return NULL;
    }
    struct starpu_task *task = NULL;
    starpu_worker_relax_on();
    STARPU_PTHREAD_MUTEX_LOCK(&d->mutex);
    starpu_worker_relax_off();
    cp_heap *mine = w < d->nworkers ? &d->own[w] : NULL;
    cp_heap *from = NULL;
    if (mine && mine->n && (!d->shared.n || cp_better(&mine->v[0], &d->shared.v[0])))
        from = mine;
    else if (d->shared.n)
        from = &d->shared;
    if (from) {
        task = cp_heap_pop(from).task;
        __atomic_sub_fetch(&d->queued, 1, __ATOMIC_RELEASE);
        if (w < d->nworkers)
            d->idle_polls[w] = 0;
    }
    STARPU_PTHREAD_MUTEX_UNLOCK(&d->mutex);
    return task;
}

static void cp_add_workers(unsigned sched_ctx_id, int *workerids, unsigned nworkers)
{
    for (unsigned i = 0; i < nworkers; i++)
        starpu_sched_ctx_worker_shares_tasks_lists(workerids[i], (int)sched_ctx_id);
}

static struct starpu_sched_policy tt_cp_policy = {
    .init_sched = cp_init,
    .deinit_sched = cp_deinit,
    .push_task = cp_push,
    .pop_task = cp_pop,
    .submit_hook = cp_submit_hook,
    .add_workers = cp_add_workers,
    .policy_name = "tt-cp",
    .policy_description = "tiletrain: priority heaps (priority, then submission order) with per-worker heaps "
                          "for affine tasks; critical-path list scheduling with bottom-level priorities",
    .worker_type = STARPU_WORKER_LIST,
};

TT_SCHED_REGISTER(tt_cp_policy)
