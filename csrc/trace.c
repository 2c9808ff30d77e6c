/* Task records for traces and schedule metrics, user tags, priority plans and stage
 * affinity.  Everything per task happens in C:
 *
 *   submission (tt_submit -> tt_trace_on_submit, application thread, under trace_mutex):
 *     a record slot with id, kernel, priority, tags, FLOPs and the task's predecessors,
 *     found from each data handle's last writer and readers since that write (state kept in
 *     the handle's user_data); the completion callback is set to tt_trace_task_done.
 *   completion (tt_trace_task_done, on the worker, lock-free): StarPU's profiling times and
 *     the worker; the record's `done` flag is published last.
 *
 * Records live in fixed chunks that never move (callbacks write into them while new chunks
 * are added); predecessors in one growable array touched only under trace_mutex.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tt_internal.h"
#include "tt_trace.h"

#define REC_CHUNK_BITS 13
#define REC_CHUNK (1 << REC_CHUNK_BITS)
#define REC_MAX_CHUNKS 8192 /* 67M records */
#define MAX_TAGS 4096
#define MAX_MASKS 256
#define MASK_WORDS ((STARPU_NMAXWORKERS + 31) / 32)

int tt_submit_hooks_on = 0;

static pthread_mutex_t trace_mutex = PTHREAD_MUTEX_INITIALIZER;
static int session_profiling = 0;
static int recording = 0;
static tt_task_record *chunks[REC_MAX_CHUNKS];
static int64_t nrec = 0, ndropped = 0;
static int64_t *deps = NULL;
static int64_t ndeps = 0, deps_cap = 0;
static double epoch_us = 0.0;

/* per-handle dependency state (handle user_data), all in one list so that they can be freed;
 * allocated from slabs with a free list (no malloc per handle on the submission path) */
#define INLINE_READERS 4
typedef struct hstate {
    struct hstate *prev, *next;
    starpu_data_handle_t handle;
    int64_t writer; /* last writing task, -1: none recorded */
    int64_t *readers; /* inl, or heap when more than INLINE_READERS */
    int nreaders, cap;
    int64_t inl[INLINE_READERS];
} hstate;
static hstate *hstates = NULL;
static hstate *hfree = NULL; /* free list (linked by next) */
#define HSLAB 4096
typedef struct hslab {
    struct hslab *next;
    hstate s[HSLAB];
} hslab;
static hslab *hslabs = NULL;

/* tags */
static char *tag_names[MAX_TAGS];
static int ntags = 0;
static int cur_phase = -1, cur_layer = -1, cur_microbatch = -1, cur_stage = -1;

/* priority plan */
static int32_t *plan = NULL;
static int64_t plan_n = 0, plan_pos = 0;

/* affinity masks: interned, never freed (tasks point at them) */
static uint32_t masks[MAX_MASKS][MASK_WORDS];
static int nmasks = 0;
static int cur_mask = -1;

/* worker counters, accumulated since the last reset */
static double w_total[STARPU_NMAXWORKERS], w_exec[STARPU_NMAXWORKERS], w_sleep[STARPU_NMAXWORKERS];
static int64_t w_tasks[STARPU_NMAXWORKERS];

static void update_hooks(void)
{
    __atomic_store_n(&tt_submit_hooks_on, recording || plan_n > 0 || cur_mask >= 0, __ATOMIC_RELEASE);
}

static double ts_us(struct timespec *ts) { return starpu_timing_timespec_to_us(ts); }

double tt_trace_now_us(void) { return tt_session_active() ? starpu_timing_now() - epoch_us : 0.0; }

int tt_profiling_enabled(void)
{
    return tt_session_active() && starpu_profiling_status_get() == STARPU_PROFILING_ENABLE;
}

/* ---------------------------------------------------------------- handle states */

static void state_release(hstate *s)
{
    if (s->readers != s->inl)
        free(s->readers);
    s->next = hfree;
    hfree = s;
}

static void free_states_locked(int touch_handles)
{
    hstate *s = hstates;
    while (s) {
        hstate *next = s->next;
        if (touch_handles)
            starpu_data_set_user_data(s->handle, NULL);
        state_release(s);
        s = next;
    }
    hstates = NULL;
}

static hstate *state_of(starpu_data_handle_t h)
{
    hstate *s = starpu_data_get_user_data(h);
    if (s)
        return s;
    if (!hfree) {
        hslab *slab = malloc(sizeof *slab);
        if (!slab)
            return NULL;
        slab->next = hslabs;
        hslabs = slab;
        for (int i = HSLAB - 1; i >= 0; i--) {
            slab->s[i].next = hfree;
            hfree = &slab->s[i];
        }
    }
    s = hfree;
    hfree = s->next;
    s->handle = h;
    s->writer = -1;
    s->readers = s->inl;
    s->nreaders = 0;
    s->cap = INLINE_READERS;
    s->prev = NULL;
    s->next = hstates;
    if (hstates)
        hstates->prev = s;
    hstates = s;
    starpu_data_set_user_data(h, s);
    return s;
}

int tt_trace_tracks_handles(void) { return __atomic_load_n(&hstates, __ATOMIC_RELAXED) != NULL; }

void tt_trace_forget_handle(starpu_data_handle_t h)
{
    pthread_mutex_lock(&trace_mutex);
    hstate *s = starpu_data_get_user_data(h);
    if (s) {
        if (s->prev)
            s->prev->next = s->next;
        else
            hstates = s->next;
        if (s->next)
            s->next->prev = s->prev;
        starpu_data_set_user_data(h, NULL);
        state_release(s);
    }
    pthread_mutex_unlock(&trace_mutex);
}

static int dep_push(int64_t d)
{
    if (ndeps == deps_cap) {
        int64_t cap = deps_cap ? 2 * deps_cap : 65536;
        int64_t *p = realloc(deps, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        deps = p;
        deps_cap = cap;
    }
    deps[ndeps++] = d;
    return 0;
}

static int reader_push(hstate *s, int64_t id)
{
    if (s->nreaders && s->readers[s->nreaders - 1] == id)
        return 0;
    if (s->nreaders == s->cap) {
        int cap = 2 * s->cap;
        int64_t *p = s->readers == s->inl ? malloc((size_t)cap * sizeof *p)
                                          : realloc(s->readers, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        if (s->readers == s->inl)
            memcpy(p, s->inl, sizeof s->inl);
        s->readers = p;
        s->cap = cap;
    }
    s->readers[s->nreaders++] = id;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* ---------------------------------------------------------------- submission */

static double thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static __thread double last_done_cpu_us = -1.0; /* this worker's CPU clock at its last completion */

static void tt_trace_task_done(void *arg)
{
    tt_task_record *r = arg;
    double cpu = thread_cpu_us();
    r->cpu_us = last_done_cpu_us >= 0 ? cpu - last_done_cpu_us : -1.0;
    last_done_cpu_us = cpu;
    struct starpu_task *task = starpu_task_get_current();
    struct starpu_profiling_task_info *pi = task ? task->profiling_info : NULL;
    int worker;
    if (pi) {
        r->submit_us = ts_us(&pi->submit_time) - epoch_us;
        r->start_us = ts_us(&pi->start_time) - epoch_us;
        r->end_us = ts_us(&pi->end_time) - epoch_us;
        worker = pi->workerid;
    } else { /* profiling switched off behind our back: completion time only */
        r->end_us = r->start_us = starpu_timing_now() - epoch_us;
        worker = starpu_worker_get_id();
    }
    r->worker = worker;
    r->memnode = worker >= 0 ? (int32_t)starpu_worker_get_memory_node((unsigned)worker) : -1;
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
}

static tt_task_record *record_task_locked(struct starpu_task *task, int kernel)
{
    if (nrec >= (int64_t)REC_MAX_CHUNKS * REC_CHUNK) {
        ndropped++;
        return NULL;
    }
    int64_t c = nrec >> REC_CHUNK_BITS;
    if (!chunks[c]) {
        chunks[c] = malloc(sizeof(tt_task_record) * REC_CHUNK);
        if (!chunks[c]) {
            ndropped++;
            return NULL;
        }
    }
    int64_t id = nrec;
    tt_task_record *r = &chunks[c][id & (REC_CHUNK - 1)];
    memset(r, 0, sizeof *r);
    r->id = id;
    r->kernel = kernel;
    r->priority = task->priority;
    r->flops = task->flops;
    if (kernel >= 0 && kernel < TT_NKERNELS && task->cl_arg) { /* shapes and flags, for per-shape analysis */
        int ni = tt_kernel_table[kernel].nints;
        memcpy(r->iargs, task->cl_arg, sizeof(int64_t) * (size_t)(ni < 8 ? ni : 8));
    }
    r->phase = cur_phase;
    r->layer = cur_layer;
    r->microbatch = cur_microbatch;
    r->stage = cur_stage;
    r->worker = -1;
    r->memnode = -1;
    r->rank = tt_mpi_on ? tt_mpi_rank() : 0; /* tasks are recorded on the rank that runs them */
    r->submit_us = r->start_us = r->end_us = r->cpu_us = -1.0;
    r->dep_start = ndeps;
    for (int i = 0; i < (int)task->nbuffers; i++) {
        hstate *s = state_of(STARPU_TASK_GET_HANDLE(task, i));
        if (!s)
            continue; /* out of memory: the DAG misses an edge, the run goes on */
        if (STARPU_TASK_GET_MODE(task, i) & STARPU_W) {
            if (s->nreaders) {
                for (int j = 0; j < s->nreaders; j++)
                    if (s->readers[j] != id)
                        dep_push(s->readers[j]);
            } else if (s->writer >= 0 && s->writer != id) {
                dep_push(s->writer);
            }
            s->writer = id;
            s->nreaders = 0;
        } else {
            if (s->writer >= 0 && s->writer != id)
                dep_push(s->writer);
            reader_push(s, id);
        }
    }
    int64_t n = ndeps - r->dep_start;
    if (n > 1) { /* sort and drop duplicates (a tile read through two buffers, ...) */
        int64_t *d = deps + r->dep_start;
        qsort(d, (size_t)n, sizeof *d, cmp_i64);
        int64_t k = 1;
        for (int64_t j = 1; j < n; j++)
            if (d[j] != d[k - 1])
                d[k++] = d[j];
        ndeps = r->dep_start + k;
        n = k;
    }
    r->ndeps = (int32_t)n;
    nrec++;
    return r;
}

void tt_trace_on_submit(struct starpu_task *task, int kernel)
{
    pthread_mutex_lock(&trace_mutex);
    if (plan_n > 0) {
        task->priority = plan[plan_pos++];
        if (plan_pos >= plan_n) {
            free(plan);
            plan = NULL;
            plan_n = 0;
            update_hooks();
        }
    }
    if (cur_mask >= 0) {
        task->workerids = masks[cur_mask];
        task->workerids_len = MASK_WORDS;
    }
    if (recording) {
        tt_task_record *r = record_task_locked(task, kernel);
        if (r) {
            task->callback_func = tt_trace_task_done;
            task->callback_arg = r;
            /* tasks built by starpu_mpi_task_build come with callback_arg_free set: the
             * record lives in our chunks, StarPU must not free it */
            task->callback_arg_free = 0;
        }
    }
    pthread_mutex_unlock(&trace_mutex);
}

void tt_trace_on_submit_failed(struct starpu_task *task)
{
    if (task->callback_func == tt_trace_task_done)
        __atomic_store_n(&((tt_task_record *)task->callback_arg)->done, -1, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- lifecycle */

static void reset_locked(void)
{
    nrec = 0;
    ndropped = 0;
    ndeps = 0;
    free_states_locked(1);
    epoch_us = starpu_timing_now();
    struct starpu_profiling_worker_info scratch; /* StarPU 1.3 dereferences NULL when profiling is off */
    for (unsigned w = 0; w < starpu_worker_get_count() && w < STARPU_NMAXWORKERS; w++) {
        starpu_profiling_worker_get_info((int)w, &scratch); /* and resets StarPU's counters */
        w_total[w] = w_exec[w] = w_sleep[w] = 0.0;
        w_tasks[w] = 0;
    }
}

void tt_trace_session_begin(int profiling)
{
    pthread_mutex_lock(&trace_mutex);
    session_profiling = profiling;
    recording = profiling;
    free(plan);
    plan = NULL;
    plan_n = plan_pos = 0;
    cur_mask = -1;
    cur_phase = cur_layer = cur_microbatch = cur_stage = -1;
    reset_locked();
    update_hooks();
    pthread_mutex_unlock(&trace_mutex);
}

void tt_trace_session_end(void)
{
    pthread_mutex_lock(&trace_mutex);
    recording = 0;
    free(plan);
    plan = NULL;
    plan_n = plan_pos = 0;
    cur_mask = -1;
    update_hooks();
    free_states_locked(1); /* the handles are still registered here */
    pthread_mutex_unlock(&trace_mutex);
    /* records stay readable until the next session starts */
}

static int need_session(const char *what)
{
    if (!tt_session_active())
        return tt_error(TT_ENOTINIT, "%s: the tiletrain runtime is not initialised", what);
    return TT_OK;
}

int tt_trace_reset(void)
{
    int rc = need_session("trace reset");
    if (rc)
        return rc;
    tt_ensure_running();
    starpu_task_wait_for_all(); /* no callback may still write into a record */
    pthread_mutex_lock(&trace_mutex);
    reset_locked();
    pthread_mutex_unlock(&trace_mutex);
    return TT_OK;
}

int tt_trace_start(void)
{
    int rc = need_session("trace start");
    if (rc)
        return rc;
    if (!tt_profiling_enabled())
        return tt_error(TT_EINVAL, "tracing needs profiling, and profiling is off: start the runtime with "
                                   "tiletrain.init(profile=True) (or TILETRAIN_PROFILE=1)");
    rc = tt_trace_reset();
    if (rc)
        return rc;
    pthread_mutex_lock(&trace_mutex);
    recording = 1;
    update_hooks();
    pthread_mutex_unlock(&trace_mutex);
    return TT_OK;
}

int tt_trace_stop(void)
{
    pthread_mutex_lock(&trace_mutex);
    recording = 0;
    update_hooks();
    pthread_mutex_unlock(&trace_mutex);
    return TT_OK;
}

int tt_trace_is_recording(void) { return recording; }
int64_t tt_trace_count(void) { return nrec; }
int64_t tt_trace_ndeps(void) { return ndeps; }
int64_t tt_trace_dropped(void) { return ndropped; }

int tt_trace_read(int64_t first, int64_t n, tt_task_record *out)
{
    if (!out && n > 0)
        return tt_error(TT_EINVAL, "trace read: out is NULL");
    pthread_mutex_lock(&trace_mutex);
    if (first < 0 || n < 0 || first + n > nrec) {
        long long have = (long long)nrec;
        pthread_mutex_unlock(&trace_mutex);
        return tt_error(TT_EINVAL, "trace read: records [%lld, %lld) outside [0, %lld)", (long long)first,
                        (long long)(first + n), have);
    }
    int64_t i = first, end = first + n;
    while (i < end) {
        int64_t c = i >> REC_CHUNK_BITS, off = i & (REC_CHUNK - 1);
        int64_t k = REC_CHUNK - off < end - i ? REC_CHUNK - off : end - i;
        memcpy(out + (i - first), &chunks[c][off], (size_t)k * sizeof *out);
        /* the done flag is published last by the callback: re-read it with acquire */
        for (int64_t j = 0; j < k; j++)
            out[i - first + j].done = __atomic_load_n(&chunks[c][off + j].done, __ATOMIC_ACQUIRE);
        i += k;
    }
    pthread_mutex_unlock(&trace_mutex);
    return TT_OK;
}

int tt_trace_read_deps(int64_t first, int64_t n, int64_t *out)
{
    if (!out && n > 0)
        return tt_error(TT_EINVAL, "trace read deps: out is NULL");
    pthread_mutex_lock(&trace_mutex);
    if (first < 0 || n < 0 || first + n > ndeps) {
        long long have = (long long)ndeps;
        pthread_mutex_unlock(&trace_mutex);
        return tt_error(TT_EINVAL, "trace read deps: [%lld, %lld) outside [0, %lld)", (long long)first,
                        (long long)(first + n), have);
    }
    if (n)
        memcpy(out, deps + first, (size_t)n * sizeof *out);
    pthread_mutex_unlock(&trace_mutex);
    return TT_OK;
}

int tt_worker_profile(int worker, double *total_us, double *executing_us, double *sleeping_us, int64_t *ntasks)
{
    int rc = need_session("worker profile");
    if (rc)
        return rc;
    if (worker < 0 || worker >= (int)starpu_worker_get_count() || worker >= STARPU_NMAXWORKERS)
        return tt_error(TT_EINVAL, "worker id %d out of range", worker);
    if (!tt_profiling_enabled())
        return tt_error(TT_EINVAL, "worker profile: profiling is off (tiletrain.init(profile=True))");
    struct starpu_profiling_worker_info info;
    pthread_mutex_lock(&trace_mutex);
    if (starpu_profiling_worker_get_info(worker, &info) == 0) { /* and StarPU resets its counters */
        w_total[worker] += ts_us(&info.total_time);
        w_exec[worker] += ts_us(&info.executing_time);
        w_sleep[worker] += ts_us(&info.sleeping_time);
        w_tasks[worker] += info.executed_tasks;
    }
    *total_us = w_total[worker];
    *executing_us = w_exec[worker];
    *sleeping_us = w_sleep[worker];
    *ntasks = w_tasks[worker];
    pthread_mutex_unlock(&trace_mutex);
    return TT_OK;
}

/* ---------------------------------------------------------------- tags */

int tt_tag_intern(const char *name)
{
    if (!name || !name[0])
        return tt_error(TT_EINVAL, "tag: empty name");
    pthread_mutex_lock(&trace_mutex);
    for (int i = 0; i < ntags; i++)
        if (strcmp(tag_names[i], name) == 0) {
            pthread_mutex_unlock(&trace_mutex);
            return i;
        }
    if (ntags == MAX_TAGS) {
        pthread_mutex_unlock(&trace_mutex);
        return tt_error(TT_EINVAL, "tag: more than %d distinct tag strings", MAX_TAGS);
    }
    char *copy = strdup(name);
    if (!copy) {
        pthread_mutex_unlock(&trace_mutex);
        return tt_error(TT_ENOMEM, "tag: out of memory");
    }
    tag_names[ntags] = copy;
    int id = ntags++;
    pthread_mutex_unlock(&trace_mutex);
    return id;
}

const char *tt_tag_name(int id) { return (id >= 0 && id < ntags) ? tag_names[id] : NULL; }
int tt_tag_count(void) { return ntags; }

void tt_tags_set(int phase, int layer, int microbatch, int stage)
{
    cur_phase = phase;
    cur_layer = layer;
    cur_microbatch = microbatch;
    cur_stage = stage;
}

void tt_tags_get(int *phase, int *layer, int *microbatch, int *stage)
{
    *phase = cur_phase;
    *layer = cur_layer;
    *microbatch = cur_microbatch;
    *stage = cur_stage;
}

/* ---------------------------------------------------------------- priorities */

int tt_priority_range(int *min, int *max)
{
    int rc = need_session("priority range");
    if (rc)
        return rc;
    *min = starpu_sched_get_min_priority();
    *max = starpu_sched_get_max_priority();
    return TT_OK;
}

int tt_priority_check(int priority)
{
    int lo, hi;
    int rc = tt_priority_range(&lo, &hi);
    if (rc)
        return rc;
    if (priority < lo || priority > hi) {
        const char *name = tt_sched_name();
        if (lo == hi)
            return tt_error(TT_EINVAL,
                            "priority %d is outside the range [%d, %d] of scheduling policy '%s', which does not "
                            "use priorities; choose a policy that does (prio, lws, ws, dmdas, dmdap, tt-cp, ...)",
                            priority, lo, hi, name);
        return tt_error(TT_EINVAL, "priority %d is outside the range [%d, %d] of scheduling policy '%s'",
                        priority, lo, hi, name);
    }
    return TT_OK;
}

int tt_priority_plan_set(int64_t n, const int32_t *priorities)
{
    int rc = need_session("priority plan");
    if (rc)
        return rc;
    if (n < 0 || (n > 0 && !priorities))
        return tt_error(TT_EINVAL, "priority plan: bad length %lld or NULL array", (long long)n);
    int lo = starpu_sched_get_min_priority(), hi = starpu_sched_get_max_priority();
    for (int64_t i = 0; i < n; i++)
        if (priorities[i] < lo || priorities[i] > hi)
            return tt_error(TT_EINVAL, "priority plan: entry %lld = %d is outside the range [%d, %d] of "
                                       "scheduling policy '%s'", (long long)i, priorities[i], lo, hi,
                            tt_sched_name());
    int32_t *copy = NULL;
    if (n > 0) {
        copy = malloc((size_t)n * sizeof *copy);
        if (!copy)
            return tt_error(TT_ENOMEM, "priority plan: out of memory");
        memcpy(copy, priorities, (size_t)n * sizeof *copy);
    }
    pthread_mutex_lock(&trace_mutex);
    free(plan);
    plan = copy;
    plan_n = n;
    plan_pos = 0;
    update_hooks();
    pthread_mutex_unlock(&trace_mutex);
    return TT_OK;
}

int64_t tt_priority_plan_used(void) { return plan_pos; }

/* ---------------------------------------------------------------- affinity */

int tt_affinity_set(int n, const int *workers)
{
    int rc = need_session("affinity");
    if (rc)
        return rc;
    if (n < 0 || (n > 0 && !workers))
        return tt_error(TT_EINVAL, "affinity: bad worker list");
    if (n == 0) {
        pthread_mutex_lock(&trace_mutex);
        cur_mask = -1;
        update_hooks();
        pthread_mutex_unlock(&trace_mutex);
        return TT_OK;
    }
    if (strcmp(tt_sched_name(), "heteroprio") == 0) /* it asserts on tasks some workers may not run */
        return tt_error(TT_EINVAL, "affinity: the heteroprio policy cannot restrict tasks to workers "
                                   "(StarPU 1.3 aborts); use prio, lws, dmda or tt-cp");
    uint32_t m[MASK_WORDS];
    memset(m, 0, sizeof m);
    int nw = (int)starpu_worker_get_count();
    for (int i = 0; i < n; i++) {
        if (workers[i] < 0 || workers[i] >= nw)
            return tt_error(TT_EINVAL, "affinity: worker %d does not exist (workers 0..%d)", workers[i], nw - 1);
        m[workers[i] / 32] |= 1u << (workers[i] % 32);
    }
    pthread_mutex_lock(&trace_mutex);
    int found = -1;
    for (int i = 0; i < nmasks && found < 0; i++)
        if (memcmp(masks[i], m, sizeof m) == 0)
            found = i;
    if (found < 0) {
        if (nmasks == MAX_MASKS) {
            pthread_mutex_unlock(&trace_mutex);
            return tt_error(TT_EINVAL, "affinity: more than %d distinct worker sets", MAX_MASKS);
        }
        memcpy(masks[nmasks], m, sizeof m);
        found = nmasks++;
    }
    cur_mask = found;
    update_hooks();
    pthread_mutex_unlock(&trace_mutex);
    return TT_OK;
}

int tt_affinity_get(int *workers, int max)
{
    int n = 0;
    pthread_mutex_lock(&trace_mutex);
    if (cur_mask >= 0)
        for (int w = 0; w < STARPU_NMAXWORKERS; w++)
            if (masks[cur_mask][w / 32] & (1u << (w % 32))) {
                if (n < max && workers)
                    workers[n] = w;
                n++;
            }
    pthread_mutex_unlock(&trace_mutex);
    return n;
}
