/* StarPU-MPI glue at the level of handles: start/stop, tile registration with owners and tags
 * (lazy and deferred tiles), transfers, collective reads of a handle.  Everything MPI-specific
 * in the library lives here, in csrc/mpi_tensor.c (what works on whole tensors: it is above
 * csrc/tensor.c, this file below csrc/tile.c) and in the MPI branch of tt_submit (csrc/submit.c).  Built without MPI (no StarPU-MPI or no MPI library), the functions
 * report that MPI mode is unavailable and the rest of tiletrain is unchanged. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tt_internal.h"


#ifdef TT_HAVE_MPI
#include <starpu_mpi.h>

/* Data tags: one per tile handle, from a process-wide counter that is never reset, so tags
 * never collide across tensors created at different times (or across sessions).  Every
 * rank creates the same tensors in the same order, so the counters agree. */
static int64_t next_tag = 1;
/* Tag streams (data-parallel submission of one's own replica only: tiletrain.parallel's
 * shard_backward).  Inside stream s > 0 (replica s - 1's walk) new tiles take the tag
 * (s << TT_TAG_STREAM_SHIFT) + stream_next++: rank d walks only replica d, and the replicas'
 * graphs are identical, so replica e's tile has replica d's tag + ((e - d) << SHIFT) --
 * every rank can name (tt_tensor_shadow) the tiles of the replicas it does not walk.
 * stream_next advances alike on every rank (each walks one replica of the same graph). */
static int cur_stream = 0;
static int64_t stream_next = 0;

static int64_t take_tag(int stream)
{
    return stream ? ((int64_t)stream << TT_TAG_STREAM_SHIFT) + stream_next++ : next_tag++;
}
static int64_t lazy_created = 0, lazy_registered = 0; /* other ranks' tiles (tt_mpi_lazy_counts) */
static int we_initialized_mpi = 0;

int tt_mpi_available(void) { return 1; }

static void finalize_mpi_at_exit(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Finalize();
}

/* MPI itself is initialised once per process (MPI cannot be re-initialised after
 * MPI_Finalize) and finalised at exit; StarPU-MPI starts and stops with each session. */
static int ensure_mpi(void)
{
    int init = 0;
    MPI_Initialized(&init);
    if (init)
        return TT_OK;
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return tt_error(TT_ESTARPU, "MPI_Init_thread failed");
    if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        return tt_error(TT_ESTARPU, "the MPI library provides thread level %d; StarPU-MPI needs at least "
                        "MPI_THREAD_SERIALIZED", provided);
    }
    we_initialized_mpi = 1;
    atexit(finalize_mpi_at_exit);
    return TT_OK;
}

/* The MPI thread as a worker (STARPU_MPI_DRIVER_CALL_FREQUENCY > 0, set by RuntimeConfig's
 * mpi_driver): StarPU-MPI's progression thread then also runs the tasks of CPU worker 0, so
 * a rank has one busy thread instead of a polling MPI thread plus a polling worker -- on
 * oversubscribed cores (2 ranks on 2 cores) that halves the threads fighting for them.
 * StarPU 1.3's progression loop only runs that driver while a receive is waiting for its
 * envelope and sleeps when no request is pending at all, which would leave tasks of a rank
 * with no communication unrun (a hang).  So a detached receive from this rank to itself, on
 * a tag no tile ever gets, stays posted for the whole session and keeps the loop awake; the
 * matching send is posted at shutdown. */
#define KEEPALIVE_TAG ((int64_t)1 << 62)
#define BARRIER_TAG (KEEPALIVE_TAG + 1) /* + 2 * epoch + phase */
static int keepalive_on = 0;
static int keepalive_rbuf, keepalive_sbuf;
static starpu_data_handle_t keepalive_recv, keepalive_send;

/* A barrier made of StarPU-MPI messages (every rank -> rank 0, then rank 0 -> every rank),
 * for sessions whose progression thread is kept awake: StarPU 1.3's own barrier request
 * runs a blocking MPI_Barrier inside one rank's progression thread, which then stops
 * serving the envelopes another rank's pending sends wait on before that rank reaches
 * the barrier (a deadlock, reproduced at shutdown after a checkpoint). */
static int *token_buf;
static starpu_data_handle_t *token_h; /* one per rank: rank 0 receives into token_h[r] */
static int token_n;                   /* handles in token_h: the world size, at least 2 */
static int64_t barrier_epoch = 0;
static starpu_pthread_mutex_t token_mutex = STARPU_PTHREAD_MUTEX_INITIALIZER;
static starpu_pthread_cond_t token_cond = STARPU_PTHREAD_COND_INITIALIZER;
static int token_left = 0;

static void token_done(void *arg)
{
    (void)arg;
    STARPU_PTHREAD_MUTEX_LOCK(&token_mutex);
    token_left--;
    STARPU_PTHREAD_COND_BROADCAST(&token_cond);
    STARPU_PTHREAD_MUTEX_UNLOCK(&token_mutex);
}

/* Waits for the barrier's messages; with check, also fails (the job is then aborted by
 * Python's error path) when another rank has shut down and so will never take part. */
static int token_wait(int check)
{
    int rc = TT_OK;
    STARPU_PTHREAD_MUTEX_LOCK(&token_mutex);
    while (token_left > 0 && rc == TT_OK) {
        if (!check) {
            STARPU_PTHREAD_COND_WAIT(&token_cond, &token_mutex);
            continue;
        }
        STARPU_PTHREAD_MUTEX_UNLOCK(&token_mutex);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        rc = tt_mpi_check_diverged("wait (barrier of every rank)");
        STARPU_PTHREAD_MUTEX_LOCK(&token_mutex);
    }
    STARPU_PTHREAD_MUTEX_UNLOCK(&token_mutex);
    return rc;
}

static int token_barrier(int check)
{
    int64_t tag = BARRIER_TAG + 2 * barrier_epoch++;
    int rc;
    if (tt_world_size == 1)
        return TT_OK;
    if (tt_world_rank == 0) {
        token_left = tt_world_size - 1;
        for (int r = 1; r < tt_world_size; r++)
            starpu_mpi_irecv_detached(token_h[r], r, tag, MPI_COMM_WORLD, token_done, NULL);
        if ((rc = token_wait(check)) != TT_OK)
            return rc;
        token_left = tt_world_size - 1;
        for (int r = 1; r < tt_world_size; r++)
            starpu_mpi_isend_detached(token_h[0], r, tag + 1, MPI_COMM_WORLD, token_done, NULL);
        return token_wait(check);
    }
    token_left = 2;
    starpu_mpi_isend_detached(token_h[0], 0, tag, MPI_COMM_WORLD, token_done, NULL);
    starpu_mpi_irecv_detached(token_h[1], 0, tag + 1, MPI_COMM_WORLD, token_done, NULL);
    return token_wait(check);
}

/* Exit notices (issue 16): when a rank stops its session on the normal path (its program
 * ended, or sys.exit), it first finishes its own tasks, then tells every other rank, then
 * waits for every other rank's notice -- the collective part of a clean shutdown.  A rank
 * that meanwhile waits (a collective read, wait()) for something the stopped rank will never
 * do -- the ranks' programs diverged, e.g. sys.exit on one rank only -- would wait forever:
 * once a notice has arrived and this rank has had no runnable task for a grace period
 * (tt_config.mpi_exit_grace: TILETRAIN_MPI_EXIT_GRACE seconds, default 1), its wait fails with an error naming the
 * rank that stopped, which Python's error path turns into an abort of the whole job.
 * Needs the kept-awake progression thread (mpi_driver, the default); without it a diverged
 * job still hangs. */
#define EXIT_TAG (KEEPALIVE_TAG - 1)
static int *exit_buf;
static starpu_data_handle_t *exit_h; /* [r]: receives rank r's notice; [tt_world_rank]: the one sent */
static int exit_on = 0, exit_heard = 0, exit_sends_left = 0, exit_from = -1;
static double exit_first = 0, quiet_since = 0, exit_grace = 1.0;

static void exit_notice_cb(void *arg)
{
    int from = (int)(intptr_t)arg;
    if (__atomic_add_fetch(&exit_heard, 1, __ATOMIC_SEQ_CST) == 1) {
        exit_first = tt_now();
        __atomic_store_n(&exit_from, from, __ATOMIC_SEQ_CST);
    }
}

static void exit_sent_cb(void *arg)
{
    (void)arg;
    __atomic_sub_fetch(&exit_sends_left, 1, __ATOMIC_SEQ_CST);
}

static void exit_notices_start(void)
{
    exit_heard = 0;
    exit_from = -1;
    quiet_since = 0;
    exit_grace = tt_config_current()->mpi_exit_grace > 0 ? tt_config_current()->mpi_exit_grace : 1.0;
    /* Only with the kept-awake progression thread (the default, mpi_driver): without it,
     * starpu_mpi_wait_for_all (wait(), shutdown) waits for every posted request to finish,
     * and the notices' receives stay posted until the other ranks stop. */
    if (tt_world_size < 2 || !keepalive_on)
        return;
    exit_buf = calloc((size_t)tt_world_size, sizeof(int));
    exit_h = calloc((size_t)tt_world_size, sizeof(*exit_h));
    if (!exit_buf || !exit_h) {
        free(exit_buf);
        free(exit_h);
        exit_buf = NULL;
        exit_h = NULL;
        return; /* out of memory: no divergence detection */
    }
    for (int r = 0; r < tt_world_size; r++)
        starpu_variable_data_register(&exit_h[r], STARPU_MAIN_RAM, (uintptr_t)&exit_buf[r], sizeof(int));
    for (int r = 0; r < tt_world_size; r++)
        if (r != tt_world_rank)
            starpu_mpi_irecv_detached(exit_h[r], r, EXIT_TAG, MPI_COMM_WORLD, exit_notice_cb, (void *)(intptr_t)r);
    exit_on = 1;
}

/* The collective part of a clean shutdown (tt_shutdown, under MPI): tell every other rank
 * that this one is stopping -- first, so that a rank stuck waiting for this one learns it even
 * if this rank's own tasks wait for that rank -- then finish this rank's tasks, then wait for
 * every other rank's notice, then for every rank's transfers.  Never checks for divergence:
 * a rank that diverged is the one waiting elsewhere, and it aborts the job. */
void tt_mpi_quiesce(void)
{
    if (exit_on) {
        exit_sends_left = tt_world_size - 1;
        for (int r = 0; r < tt_world_size; r++)
            if (r != tt_world_rank)
                starpu_mpi_isend_detached(exit_h[tt_world_rank], r, EXIT_TAG, MPI_COMM_WORLD, exit_sent_cb, NULL);
    }
    starpu_task_wait_for_all();
    if (exit_on) {
        while (__atomic_load_n(&exit_heard, __ATOMIC_SEQ_CST) < tt_world_size - 1 ||
               __atomic_load_n(&exit_sends_left, __ATOMIC_SEQ_CST) > 0) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
        for (int r = 0; r < tt_world_size; r++)
            starpu_data_unregister(exit_h[r]);
        free(exit_h);
        free(exit_buf);
        exit_h = NULL;
        exit_buf = NULL;
        exit_on = 0;
    }
    if (keepalive_on)
        token_barrier(0);
    else
        starpu_mpi_wait_for_all(MPI_COMM_WORLD);
}

int tt_mpi_check_diverged(const char *what)
{
    if (!exit_on || !__atomic_load_n(&exit_heard, __ATOMIC_SEQ_CST))
        return TT_OK;
    double t = tt_now();
    if (starpu_task_nready() > 0 || quiet_since < exit_first) {
        quiet_since = t; /* this rank still runs tasks of its own: give it time */
        return TT_OK;
    }
    if (t - quiet_since < exit_grace)
        return TT_OK;
    return tt_error(TT_ESTARPU, "%s: rank %d has shut down (its program ended or called sys.exit) while rank %d "
                    "of %d still waits for work that needs it: the ranks' programs diverged (every rank must "
                    "run the same flow of tensor operations, and exit at the same point)",
                    what, __atomic_load_n(&exit_from, __ATOMIC_SEQ_CST), tt_world_rank, tt_world_size);
}

/* The submitting thread's waits for a callback (an acquisition, the sends of a read to one
 * rank): it sleeps on `progress` until a callback signals it, and wakes every WAIT_CHECK_S
 * meanwhile to check that no rank has shut down (tt_mpi_check_diverged).  It used to poll
 * every 200 us: ~750 wake-ups during a data-mode step's loss read, each preempting the
 * worker that shares its core. */
#define WAIT_CHECK_S 0.02
static pthread_mutex_t progress_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER;

static void progress_signal(void)
{
    pthread_mutex_lock(&progress_mu);
    pthread_cond_broadcast(&progress);
    pthread_mutex_unlock(&progress_mu);
}

/* Sleep until *flag is <= 0 (want_zero: a count of pending callbacks) or non-zero (a done
 * flag) -- callbacks change it, then call progress_signal -- or an error if a rank has shut
 * down meanwhile. */
static int wait_progress(int *flag, int want_zero, const char *what)
{
    for (;;) {
        const struct timespec until = tt_deadline(WAIT_CHECK_S);
        pthread_mutex_lock(&progress_mu);
        int v;
        while ((v = __atomic_load_n(flag, __ATOMIC_ACQUIRE), want_zero ? v > 0 : v == 0) &&
               pthread_cond_timedwait(&progress, &progress_mu, &until) == 0)
            ;
        v = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
        pthread_mutex_unlock(&progress_mu);
        if (want_zero ? v <= 0 : v != 0)
            return TT_OK;
        int rc = tt_mpi_check_diverged(what);
        if (rc)
            return rc;
    }
}

static void acquired_cb(void *arg)
{
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
    progress_signal();
}

int tt_mpi_acquire(starpu_data_handle_t h, enum starpu_data_access_mode mode)
{
    if (!exit_on) {
        int ret = starpu_data_acquire(h, mode);
        return ret ? tt_error(TT_ESTARPU, "starpu_data_acquire failed (%d)", ret) : TT_OK;
    }
    int *done = malloc(sizeof *done); /* on the heap: left to the callback if this wait fails */
    if (!done)
        return tt_error(TT_ENOMEM, "tensor read: out of memory");
    *done = 0;
    int ret = starpu_data_acquire_cb(h, mode, acquired_cb, done);
    if (ret) {
        free(done);
        return tt_error(TT_ESTARPU, "starpu_data_acquire_cb failed (%d)", ret);
    }
    int rc = wait_progress(done, 0, "tensor read/write (collective)");
    if (rc)
        return rc; /* the job is about to be aborted: the pending acquisition is left as is */
    free(done);
    return TT_OK;
}

static void keepalive_start(void)
{
    const char *env = getenv("STARPU_MPI_DRIVER_CALL_FREQUENCY");
    if (!env || atoi(env) <= 0)
        return;
    token_n = tt_world_size > 2 ? tt_world_size : 2;
    token_buf = calloc((size_t)token_n, sizeof(int));
    token_h = calloc((size_t)token_n, sizeof(*token_h));
    if (!token_buf || !token_h) {
        free(token_buf);
        free(token_h);
        token_buf = NULL;
        token_h = NULL;
        return; /* out of memory: StarPU-MPI's own thread and barrier, as without the driver */
    }
    for (int r = 0; r < token_n; r++)
        starpu_variable_data_register(&token_h[r], STARPU_MAIN_RAM, (uintptr_t)&token_buf[r], sizeof(int));
    starpu_variable_data_register(&keepalive_recv, STARPU_MAIN_RAM, (uintptr_t)&keepalive_rbuf, sizeof(int));
    starpu_variable_data_register(&keepalive_send, STARPU_MAIN_RAM, (uintptr_t)&keepalive_sbuf, sizeof(int));
    starpu_mpi_irecv_detached(keepalive_recv, tt_world_rank, KEEPALIVE_TAG, MPI_COMM_WORLD, NULL, NULL);
    keepalive_on = 1;
}

static void keepalive_stop(void)
{
    if (!keepalive_on)
        return;
    keepalive_sbuf = 1;
    starpu_mpi_isend_detached(keepalive_send, tt_world_rank, KEEPALIVE_TAG, MPI_COMM_WORLD, NULL, NULL);
    starpu_data_acquire(keepalive_recv, STARPU_R); /* the receive has completed */
    starpu_data_release(keepalive_recv);
    starpu_data_unregister(keepalive_recv);
    starpu_data_unregister(keepalive_send);
    for (int r = 0; r < token_n; r++)
        starpu_data_unregister(token_h[r]);
    free(token_h);
    free(token_buf);
    token_h = NULL;
    token_buf = NULL;
    keepalive_on = 0;
}

int tt_mpi_start(struct starpu_conf *conf)
{
    int rc = ensure_mpi();
    if (rc)
        return rc;
    int ret = starpu_mpi_init_conf(NULL, NULL, 0, MPI_COMM_WORLD, conf);
    if (ret != 0)
        return tt_error(TT_ESTARPU, "starpu_mpi_init_conf failed (%d)", ret);
    starpu_mpi_comm_rank(MPI_COMM_WORLD, &tt_world_rank);
    starpu_mpi_comm_size(MPI_COMM_WORLD, &tt_world_size);
    keepalive_start();
    exit_notices_start();
    lazy_created = lazy_registered = 0;
    tt_mpi_on = 1;
    return TT_OK;
}

void tt_mpi_stop(void)
{
    if (!tt_mpi_on)
        return;
    if (keepalive_on) {
        starpu_task_wait_for_all();
        token_barrier(0); /* every rank's tasks are done before any stops serving transfers */
    }
    keepalive_stop();
    exit_on = 0; /* (a session stopped without tt_mpi_quiesce: a failed init) */
    starpu_mpi_shutdown();
    if (starpu_is_initialized())
        starpu_shutdown();
    tt_mpi_on = 0;
    tt_world_rank = 0;
    tt_world_size = 1;
}

int tt_mpi_wait_all(void)
{
    int ret;
    while (starpu_task_nsubmitted() > 0) { /* polled: a rank that shut down fails the wait */
        int rc = tt_mpi_check_diverged("wait");
        if (rc)
            return rc;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    if (keepalive_on) {
        /* starpu_mpi_wait_for_all (1.3) waits for the progression thread to go to sleep
         * with nothing pending, which the kept-awake thread never does: wait for this
         * rank's tasks -- which includes every receive they need -- then for every rank. */
        ret = starpu_task_wait_for_all();
        if (ret == 0) {
            int rc = token_barrier(1);
            if (rc)
                return rc;
        }
    } else {
        ret = starpu_mpi_wait_for_all(MPI_COMM_WORLD);
    }
    if (ret != 0)
        return tt_error(TT_ESTARPU, "waiting for every rank's tasks failed (%d)", ret);
    return TT_OK;
}

static void register_in(starpu_data_handle_t h, int owner, int stream)
{
    starpu_mpi_data_register(h, take_tag(stream), owner);
}

void tt_mpi_register(starpu_data_handle_t h, int owner) { register_in(h, owner, cur_stream); }

/* Deferred owners (docs/architecture.md principle 7: outputs live where their inputs are).  A tensor made
 * without an explicit distribution registers its tiles with StarPU-MPI lazily: the first
 * task that writes a tile gives it the owner of the first tile that task reads (the
 * "corresponding input tile": A's tile for a gemm, x's for an element-wise op or a
 * reduction, the ids' for an embedding), else the tensor's fallback owner.  Every rank
 * submits the same flow, so every rank resolves the same tiles in the same order and the
 * tags still agree.  Pending handles live in a small chained hash table; with none
 * pending (the usual case once a step's tensors exist) the submission path pays one load. */
static int lazy_owner(starpu_data_handle_t h);

typedef struct pend { starpu_data_handle_t h; int *slot; int fallback; int stream; struct pend *next; } pend_t;
#define PEND_BUCKETS 4096
static pend_t *pend_tab[PEND_BUCKETS];
static long pend_count = 0;

static size_t pend_hash(starpu_data_handle_t h) { return ((uintptr_t)h >> 4) % PEND_BUCKETS; }

void tt_mpi_defer(starpu_data_handle_t h, int *slot, int fallback)
{
    pend_t *p = malloc(sizeof *p);
    if (!p) { /* out of memory: place it now on its fallback owner */
        *slot = fallback;
        tt_mpi_register(h, fallback);
        return;
    }
    size_t b = pend_hash(h);
    p->h = h;
    p->slot = slot;
    p->fallback = fallback;
    p->stream = cur_stream; /* its tag comes from the stream it was made in, whenever placed */
    p->next = pend_tab[b];
    pend_tab[b] = p;
    *slot = -1;
    pend_count++;
}

static pend_t *pend_take(starpu_data_handle_t h)
{
    if (!pend_count)
        return NULL;
    pend_t **pp = &pend_tab[pend_hash(h)];
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->h == h) {
            pend_t *p = *pp;
            *pp = p->next;
            pend_count--;
            return p;
        }
    }
    return NULL;
}

static int pend_has(starpu_data_handle_t h)
{
    for (pend_t *p = pend_tab[pend_hash(h)]; p; p = p->next)
        if (p->h == h)
            return 1;
    return 0;
}

static void pend_place(pend_t *p, int owner)
{
    *p->slot = owner;
    register_in(p->h, owner, p->stream);
    tt_memory_charge_tile(owner, (int64_t)starpu_data_get_size(p->h)); /* its rank's share (csrc/memory.c) */
    free(p);
}

void tt_mpi_resolve(starpu_data_handle_t h)
{
    pend_t *p = pend_take(h);
    if (p)
        pend_place(p, p->fallback);
}

void tt_mpi_forget(starpu_data_handle_t h) { free(pend_take(h)); }

void tt_mpi_resolve_task(const struct starpu_data_descr *d, int n)
{
    if (!pend_count)
        return;
    int src = -1;
    for (int i = 0; i < n && src < 0; i++)
        if ((d[i].mode & STARPU_R) && !pend_has(d[i].handle))
            src = tt_slot_state(d[i].handle) == TT_TILE_LAZY ? lazy_owner(d[i].handle)
                                                             : starpu_mpi_data_get_rank(d[i].handle);
    for (int i = 0; i < n; i++) {
        pend_t *p = pend_take(d[i].handle);
        if (p)
            pend_place(p, ((d[i].mode & STARPU_W) && src >= 0) ? src : p->fallback);
    }
}

/* A lazy tile's record; the slot holds it as TT_TILE_LAZY (csrc/tile.c encodes and decodes). */
typedef struct tt_lazy_tile {
    starpu_data_handle_t *slot; /* the tensor's handle slot, replaced on registration */
    int64_t tag;
    uint32_t nelems;
    uint32_t elemsize;
    int owner;
} lazy_tile;

static lazy_tile *lazy_of(starpu_data_handle_t h) { return tt_slot_lazy_record(h); }
static int lazy_owner(starpu_data_handle_t h) { return lazy_of(h)->owner; }

void tt_mpi_lazy_counts(int64_t *out)
{
    out[0] = lazy_created;
    out[1] = lazy_registered;
}

/* A tile of another rank: its tag is taken now (every rank creates the same tensors in the
 * same order), StarPU learns about it only if this rank ever touches it.  NULL when out of
 * memory (the caller registers it at once instead). */
starpu_data_handle_t tt_mpi_lazy_new(starpu_data_handle_t *slot, uint32_t nelems, size_t elemsize, int owner)
{
    lazy_tile *z = malloc(sizeof *z);
    if (!z)
        return NULL;
    z->slot = slot;
    z->tag = take_tag(cur_stream);
    z->nelems = nelems;
    z->elemsize = (uint32_t)elemsize;
    z->owner = owner;
    lazy_created++;
    return tt_slot_lazy(z);
}

starpu_data_handle_t tt_mpi_materialize(starpu_data_handle_t h)
{
    lazy_tile *z = lazy_of(h);
    if (!z)
        return h;
    starpu_data_handle_t real;
    starpu_vector_data_register(&real, -1, 0, z->nelems, z->elemsize);
    tt_tile_registered(real); /* csrc/memory.c */
    starpu_mpi_data_register(real, z->tag, z->owner);
    *z->slot = real;
    free(z);
    lazy_registered++;
    return real;
}

void tt_mpi_lazy_free(starpu_data_handle_t h) { free(lazy_of(h)); /* NULL: not lazy */ }

/* Does this rank take part in a task?  Not when it owns none of the task's tiles (so it
 * neither runs the task -- StarPU-MPI runs it on an owner of a written tile -- nor sends
 * a tile it reads) and holds no received copy of a tile the task writes (which
 * starpu_mpi_task_post_build would invalidate).  Then starpu_mpi_task_build/post_build
 * would do nothing here, and the submission skips them (half the flow of a data-parallel
 * step runs on the other ranks). */
int tt_mpi_involved(const struct starpu_data_descr *d, int n)
{
    for (int i = 0; i < n; i++) {
        if (tt_slot_state(d[i].handle) == TT_TILE_LAZY)
            continue; /* another rank's tile this rank never touched: neither owned nor cached */
        if (starpu_mpi_data_get_rank(d[i].handle) == tt_world_rank)
            return 1;
        if ((d[i].mode & STARPU_W) && starpu_mpi_cached_receive(d[i].handle))
            return 1;
    }
    return 0;
}

void tt_mpi_flush(starpu_data_handle_t h) { starpu_mpi_cache_flush(MPI_COMM_WORLD, h); }
void tt_mpi_migrate(starpu_data_handle_t h, int new_owner) { starpu_mpi_data_migrate(MPI_COMM_WORLD, h, new_owner); }

void tt_mpi_fetch_everywhere(starpu_data_handle_t h) { starpu_mpi_get_data_on_all_nodes_detached(MPI_COMM_WORLD, h); }
/* starpu_mpi_get_data_on_node_detached, with the owner's sends counted so that it can wait
 * for them (tt_mpi_sends_wait): an owner that posted the sends of a whole tensor at once
 * would pin all of those tiles in main memory until `node` received them, beyond a memory
 * limit (StarPU then spins looking for memory to evict).  The caches are used as StarPU-MPI
 * uses them there. */
static int sends_left = 0;

static void send_done(void *arg)
{
    (void)arg;
    if (__atomic_sub_fetch(&sends_left, 1, __ATOMIC_SEQ_CST) == 0)
        progress_signal();
}

void tt_mpi_fetch_on(starpu_data_handle_t h, int node)
{
    int owner = starpu_mpi_data_get_rank(h);
    if (owner != tt_world_rank || owner == node) {
        starpu_mpi_get_data_on_node_detached(MPI_COMM_WORLD, h, node, NULL, NULL); /* node: the receive */
        return;
    }
    if (starpu_mpi_cached_send_set(h, node))
        return; /* node holds it already */
    __atomic_add_fetch(&sends_left, 1, __ATOMIC_SEQ_CST);
    starpu_mpi_isend_detached(h, node, starpu_mpi_data_get_tag(h), MPI_COMM_WORLD, send_done, NULL);
}

int tt_mpi_sends_wait(void)
{
    return wait_progress(&sends_left, 1, "tensor read (sending tiles to one rank)");
}

/* After tt_mpi_fetch_on, on every rank that registered h: the copy received on the other
 * node is invalidated (its memory goes back to StarPU) and the caches forget it, so that the
 * next read sends it again.  Without the communication cache (STARPU_MPI_CACHE=0) nothing
 * is cached: only the received copy is invalidated. */
void tt_mpi_drop_fetched(starpu_data_handle_t h)
{
    if (starpu_mpi_cache_is_enabled())
        starpu_mpi_cache_flush(MPI_COMM_WORLD, h);
    else if (starpu_mpi_data_get_rank(h) != tt_world_rank)
        starpu_data_invalidate_submit(h);
}

int tt_mpi_set_stream(int stream)
{
    int old = cur_stream;
    cur_stream = stream > 0 ? stream : 0;
    return old;
}

int tt_mpi_cache_enabled(void) { return tt_mpi_on && starpu_mpi_cache_is_enabled(); }
int tt_mpi_stream(void) { return cur_stream; }

/* While one replica is submitted on its rank only (a stream is set): every tile a task
 * reads must be this rank's or already received (pushed ahead: tt_tensor_push), and every
 * tile it writes this rank's -- otherwise the other rank, which does not submit this task,
 * would never send or receive it: the step would hang.  A clear error instead. */
int tt_mpi_stream_check(const struct starpu_data_descr *d, int n, const char *kernel)
{
    if (!cur_stream)
        return TT_OK;
    for (int i = 0; i < n; i++) {
        starpu_data_handle_t h = d[i].handle;
        int lazy = tt_slot_state(h) == TT_TILE_LAZY;
        int owner = lazy ? lazy_owner(h) : starpu_mpi_data_get_rank(h);
        if (owner == tt_world_rank)
            continue;
        if ((d[i].mode & STARPU_W) || lazy || !starpu_mpi_cached_receive(h))
            return tt_error(TT_EINVAL, "%s: submitting replica %d's shard on its rank only (parallel.shard_backward), "
                            "a task %s a tile of rank %d that was not sent ahead (only the model's parameters and "
                            "buffers are); set tiletrain.parallel.OWN_REPLICA_ONLY = False to walk every replica "
                            "on every rank", kernel, cur_stream - 1, (d[i].mode & STARPU_W) ? "writes" : "reads",
                            owner);
    }
    return TT_OK;
}

/* A slot's data tag (a lazy tile's record's, a registered handle's); csrc/mpi_tensor.c reads
 * tensors' tags through it */
int64_t tt_mpi_slot_tag(starpu_data_handle_t slot)
{
    lazy_tile *z = lazy_of(slot);
    return z ? z->tag : starpu_mpi_data_get_tag(slot);
}

void tt_mpi_lazy_set_tag(starpu_data_handle_t slot, int64_t tag) { lazy_of(slot)->tag = tag; }

void tt_mpi_abort(int code)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    fflush(stdout);
    fflush(stderr);
    if (init && !fin)
        MPI_Abort(MPI_COMM_WORLD, code);
    _Exit(code);
}

int64_t tt_mpi_next_tag(void) { return next_tag; }

#else /* no StarPU-MPI in this build */

int tt_mpi_available(void) { return 0; }
int tt_mpi_start(struct starpu_conf *conf)
{
    (void)conf;
    return tt_error(TT_ESTARPU, "this tiletrain build has no StarPU-MPI (install libstarpu-dev with StarPU-MPI "
                    "and an MPI library such as libopenmpi-dev, then rebuild)");
}
void tt_mpi_stop(void) {}
void tt_mpi_quiesce(void) {}
int tt_mpi_wait_all(void) { return TT_OK; }
int tt_mpi_check_diverged(const char *what) { (void)what; return TT_OK; }
int tt_mpi_acquire(starpu_data_handle_t h, enum starpu_data_access_mode mode)
{
    int ret = starpu_data_acquire(h, mode);
    return ret ? tt_error(TT_ESTARPU, "starpu_data_acquire failed (%d)", ret) : TT_OK;
}
void tt_mpi_register(starpu_data_handle_t h, int owner) { (void)h; (void)owner; }
void tt_mpi_flush(starpu_data_handle_t h) { (void)h; }
void tt_mpi_migrate(starpu_data_handle_t h, int new_owner) { (void)h; (void)new_owner; }
void tt_mpi_defer(starpu_data_handle_t h, int *slot, int fallback) { (void)h; *slot = fallback; }
void tt_mpi_resolve(starpu_data_handle_t h) { (void)h; }
void tt_mpi_forget(starpu_data_handle_t h) { (void)h; }
void tt_mpi_fetch_everywhere(starpu_data_handle_t h) { (void)h; }
void tt_mpi_fetch_on(starpu_data_handle_t h, int node) { (void)h; (void)node; }
int tt_mpi_sends_wait(void) { return TT_OK; }
void tt_mpi_drop_fetched(starpu_data_handle_t h) { (void)h; }
void tt_mpi_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    _Exit(code);
}
int64_t tt_mpi_next_tag(void) { return 0; }
int tt_mpi_set_stream(int stream) { (void)stream; return 0; }
int tt_mpi_stream(void) { return 0; }
int tt_mpi_cache_enabled(void) { return 0; }
starpu_data_handle_t tt_mpi_lazy_new(starpu_data_handle_t *slot, uint32_t nelems, size_t elemsize, int owner)
{
    (void)slot; (void)nelems; (void)elemsize; (void)owner;
    return NULL;
}
starpu_data_handle_t tt_mpi_materialize(starpu_data_handle_t h) { return h; }
void tt_mpi_lazy_free(starpu_data_handle_t h) { (void)h; }
void tt_mpi_lazy_counts(int64_t *out) { out[0] = out[1] = 0; }

#endif

int tt_mpi_enabled(void) { return tt_mpi_on; }
int tt_mpi_size(void) { return tt_world_size; }
