/* The life cycle of one tile slot (t->handles[i]): its registration, tt_tile_handle and
 * tt_tile_release.  Expanders read t->handles[i] as submit.c's input, and submit.c resolves a
 * task's lazy and deferred tiles itself (csrc/mpi.c's helpers); everything else that needs a
 * registered StarPU handle (a transfer, a migration, an acquire on a node) asks
 * tt_tile_handle, and every free goes through tt_tile_release (whole tensors: the reaper).
 *
 * A slot is in one of three states:
 *   LAZY      under MPI, another rank's tile this rank has never touched: a tagged pointer
 *             (low bit set, csrc/mpi.c) holding its tag and owner, unknown to StarPU;
 *   DEFERRED  registered with StarPU, its owner rank chosen by its first writer
 *             (t->owner[i] < 0, under MPI only);
 *   HANDLE    a registered StarPU handle (under MPI, registered with StarPU-MPI too).
 * LAZY -> HANDLE when this rank needs it (tt_tile_handle, or a task in submit.c);
 * DEFERRED -> HANDLE when a task writes it (submit.c) or it is read/written directly.
 * Every tile has home node -1: StarPU allocates it where its first writer runs, so that under
 * a memory limit it may evict it (to another node, or to the disk node). */
#include <stdlib.h>

#include "tt_internal.h"

/* Which tiles StarPU may evict to the disk node (starpu_data_set_ooc_flag; StarPU's default
 * is all): TT_OOC_PAGES, only those whose size is a multiple of the page size, as the O_DIRECT
 * disk node can only write those (biases and other small tiles then stay in main memory). */
static int ooc_mode = TT_OOC_ALL;

void tt_tiles_set_ooc(int mode) { ooc_mode = mode; }

/* Every tile handle, once registered (here, or a lazy tile's in csrc/mpi.c): may StarPU evict it
 * to the disk node? */
void tt_tile_registered(starpu_data_handle_t h)
{
    if (ooc_mode == TT_OOC_PAGES && starpu_data_get_size(h) % 4096)
        starpu_data_set_ooc_flag(h, 0);
}

/* Register slot i of a new tensor (its owner already in t->owner[i]). */
void tt_tile_init(tt_tensor *t, int64_t i, int deferred)
{
    int64_t idx[TT_MAX_NDIM];
    tt_tile_index(t, i, idx);
    uint32_t nelems = (uint32_t)tt_tile_nelems(t, idx);
    if (tt_mpi_on && !deferred && t->owner[i] != tt_mpi_rank()) { /* registered if this rank ever needs it */
        starpu_data_handle_t z = tt_mpi_lazy_new(&t->handles[i], nelems, t->elemsize, t->owner[i]);
        if (z) {
            t->handles[i] = z;
            return;
        }
    }
    starpu_vector_data_register(&t->handles[i], -1, 0, nelems, t->elemsize);
    tt_tile_registered(t->handles[i]);
    if (tt_mpi_on && deferred)
        tt_mpi_defer(t->handles[i], &t->owner[i], t->owner[i]);
    else if (tt_mpi_on)
        tt_mpi_register(t->handles[i], t->owner[i]);
}

/* Slot i as a registered StarPU handle with its owner fixed: for direct reads and writes. */
starpu_data_handle_t tt_tile_handle(tt_tensor *t, int64_t i)
{
    if (!tt_mpi_on)
        return t->handles[i];
    starpu_data_handle_t h = t->handles[i] = tt_mpi_materialize(t->handles[i]);
    if (t->owner[i] < 0)
        tt_mpi_resolve(h); /* written or read directly: its fallback owner */
    return h;
}

/* Is slot i another rank's tile this rank has never registered? */
int tt_tile_is_lazy(const tt_tensor *t, int64_t i) { return tt_handle_lazy(t->handles[i]); }

/* The slot's tiletrain-side state is dropped; returns the StarPU handle left to unregister,
 * or NULL (a lazy tile was never registered). */
static starpu_data_handle_t slot_forget(tt_tensor *t, int64_t i)
{
    starpu_data_handle_t h = t->handles[i];
    if (tt_handle_lazy(h)) {
        tt_mpi_lazy_free(h); /* another rank's tile, never needed here */
        return NULL;
    }
    if (tt_mpi_on && t->owner[i] < 0)
        tt_mpi_forget(h); /* never written: never registered with StarPU-MPI */
    return h;
}

static void unregister(starpu_data_handle_t h, int async)
{
    if (async)
        starpu_data_unregister_submit(h); /* freed once its last submitted task is done */
    else
        starpu_data_unregister_no_coherency(h); /* every task is done (shutdown) */
}

/* Free slot i.  async: StarPU frees the tile once its last submitted task is done; else at
 * once, without coherency (shutdown, every task done). */
void tt_tile_release(tt_tensor *t, int64_t i, int async)
{
    starpu_data_handle_t h = slot_forget(t, i);
    if (h)
        unregister(h, async);
}

/* ---- the reaper: asynchronous unregistration of whole tensors, off the caller's thread ----
 * starpu_data_unregister_submit costs several microseconds per tile (it goes through StarPU's
 * dependency machinery), which a tensor free from Python paid tile by tile.  A free hands the
 * tensor's handle array to this thread instead (one lock, no per-tile work), which
 * unregisters them in order.  Waits (tt_reaper_flush, from tt_wait_all/tt_wait_for) and
 * shutdown first let it finish, so a wait still sees every dropped tensor's memory freed.
 * Not under MPI (StarPU-MPI's per-handle state stays on the submitting thread). */
typedef struct batch { starpu_data_handle_t *h; int64_t n; struct batch *next; } batch;

#define REAPER_MAX_PENDING (1 << 20) /* tiles queued; beyond, the caller unregisters itself */

static pthread_mutex_t reaper_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reaper_go = PTHREAD_COND_INITIALIZER;
static pthread_cond_t reaper_idle = PTHREAD_COND_INITIALIZER;
static batch *queue_head, *queue_tail;  /* under reaper_mu */
static int64_t queued;                  /* tiles queued or being unregistered, under reaper_mu */
static int reaper_started, reaper_quit; /* under reaper_mu */
static pthread_t reaper_thread;

static void *reaper_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&reaper_mu);
    for (;;) {
        while (!queue_head && !reaper_quit)
            pthread_cond_wait(&reaper_go, &reaper_mu);
        if (!queue_head)
            break; /* quit, with nothing left */
        batch *b = queue_head;
        queue_head = b->next;
        if (!queue_head)
            queue_tail = NULL;
        pthread_mutex_unlock(&reaper_mu);
        tt_ensure_running();
        for (int64_t i = 0; i < b->n; i++)
            starpu_data_unregister_submit(b->h[i]);
        free(b->h);
        pthread_mutex_lock(&reaper_mu);
        queued -= b->n;
        free(b);
        if (!queued)
            pthread_cond_broadcast(&reaper_idle);
    }
    pthread_mutex_unlock(&reaper_mu);
    return NULL;
}

/* TILETRAIN_ASYNC_FREE=0: every free unregisters on the caller's thread (to compare). */
static int async_free_enabled(void)
{
    const char *v = getenv("TILETRAIN_ASYNC_FREE");
    return !(v && v[0] == '0');
}

/* Queue n handles (taking the malloc'ed array); 0 when the caller must unregister them. */
static int reaper_push(starpu_data_handle_t *h, int64_t n)
{
    batch *b = malloc(sizeof *b);
    if (!b)
        return 0;
    b->h = h;
    b->n = n;
    b->next = NULL;
    pthread_mutex_lock(&reaper_mu);
    if (queued + n > REAPER_MAX_PENDING || reaper_quit) {
        pthread_mutex_unlock(&reaper_mu);
        free(b);
        return 0;
    }
    if (!reaper_started) {
        if (pthread_create(&reaper_thread, NULL, reaper_main, NULL) != 0) {
            pthread_mutex_unlock(&reaper_mu);
            free(b);
            return 0;
        }
        reaper_started = 1;
    }
    if (queue_tail)
        queue_tail->next = b;
    else
        queue_head = b;
    queue_tail = b;
    queued += n;
    pthread_cond_signal(&reaper_go);
    pthread_mutex_unlock(&reaper_mu);
    return 1;
}

/* Returns once every queued unregistration has been submitted to StarPU. */
void tt_reaper_flush(void)
{
    pthread_mutex_lock(&reaper_mu);
    while (queued)
        pthread_cond_wait(&reaper_idle, &reaper_mu);
    pthread_mutex_unlock(&reaper_mu);
}

/* At shutdown, with the gate closed (no more frees): finish the queue and end the thread. */
void tt_reaper_stop(void)
{
    pthread_mutex_lock(&reaper_mu);
    int started = reaper_started;
    reaper_quit = 1;
    pthread_cond_signal(&reaper_go);
    pthread_mutex_unlock(&reaper_mu);
    if (started)
        pthread_join(reaper_thread, NULL);
    reaper_started = reaper_quit = 0;
}

/* Free every tile slot of t.  async (a tensor free): the tiles are unregistered once their
 * last tasks are done, by the reaper where it can, and t->handles is taken (set to NULL);
 * else (shutdown) at once, t->handles left to the caller. */
void tt_tensor_release_tiles(tt_tensor *t, int async)
{
    if (!async) {
        for (int64_t i = 0; i < t->ntiles; i++)
            tt_tile_release(t, i, 0);
        return;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < t->ntiles; i++) {
        starpu_data_handle_t h = slot_forget(t, i);
        if (h)
            t->handles[n++] = h; /* compacted in place: only what StarPU must unregister */
    }
    starpu_data_handle_t *hs = t->handles;
    t->handles = NULL;
    if (!tt_mpi_on && n > 0 && async_free_enabled() && reaper_push(hs, n))
        return;
    for (int64_t i = 0; i < n; i++)
        unregister(hs[i], 1);
    free(hs);
}

/* Slot i's owner rank; a deferred tile is placed on its fallback owner now. */
int tt_tile_owner(tt_tensor *t, int64_t i)
{
    if (tt_mpi_on && t->owner[i] < 0)
        tt_mpi_resolve(t->handles[i]);
    return t->owner[i];
}
