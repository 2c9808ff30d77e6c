/* The life cycle of one tile slot (t->handles[i]): its state, its registration,
 * tt_tile_handle and tt_tile_release, and the reuse of freed tiles.  Expanders read
 * t->handles[i] as submit.c's input, and submit.c resolves a task's lazy and deferred tiles
 * (tt_slot_register here, csrc/mpi.c's helpers); everything else that needs a registered
 * StarPU handle (a transfer, a migration, an acquire on a node) asks tt_tile_handle, and every
 * free goes through tt_tile_release (whole tensors: the reuse lists or the reaper).
 *
 * A slot is in one of three states (tt_tile_state, csrc/tt_internal.h, whose inline
 * accessors tt_tile_state_at / tt_slot_state alone encode and decode them):
 *   TT_TILE_LAZY      under MPI, another rank's tile this rank has never touched: the slot
 *                     holds a tagged pointer (low bit set) to csrc/mpi.c's record of its tag
 *                     and owner, unknown to StarPU;
 *   TT_TILE_DEFERRED  registered with StarPU, its owner rank chosen by its first writer
 *                     (t->owner[i] < 0, under MPI only);
 *   TT_TILE_HANDLE    a registered StarPU handle (under MPI, registered with StarPU-MPI too).
 * LAZY -> HANDLE when this rank needs it (tt_tile_handle, or a task in submit.c);
 * DEFERRED -> HANDLE when a task writes it (submit.c) or it is read/written directly.
 * Every tile has home node -1: StarPU allocates it where its first writer runs, so that under
 * a memory limit it may evict it (to another node, or to the disk node). */
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"

/* ---- tile states (their accessors: csrc/tt_internal.h) ---- */

/* A slot's value as a registered handle: a lazy tile is registered now (csrc/mpi.c, which
 * also stores the handle in the tensor's slot); a handle as is. */
starpu_data_handle_t tt_slot_register(starpu_data_handle_t slot)
{
    return tt_slot_state(slot) == TT_TILE_LAZY ? tt_mpi_materialize(slot) : slot;
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
    switch (tt_tile_state_at(t, i)) {
    case TT_TILE_LAZY:
        return t->handles[i] = tt_slot_register(t->handles[i]);
    case TT_TILE_DEFERRED:
        tt_mpi_resolve(t->handles[i]); /* written or read directly: its fallback owner */
        return t->handles[i];
    default:
        return t->handles[i];
    }
}

/* The slot's tiletrain-side state is dropped; returns the StarPU handle left to unregister,
 * or NULL (a lazy tile was never registered). */
static starpu_data_handle_t slot_forget(tt_tensor *t, int64_t i)
{
    starpu_data_handle_t h = t->handles[i];
    switch (tt_tile_state_at(t, i)) {
    case TT_TILE_LAZY:
        tt_mpi_lazy_free(h); /* another rank's tile, never needed here */
        return NULL;
    case TT_TILE_DEFERRED:
        tt_mpi_forget(h); /* never written: never registered with StarPU-MPI */
        return h;
    default:
        return h;
    }
}

static void unregister(starpu_data_handle_t h, int async)
{
    if (tt_memory_limited)
        tt_memory_account_tile(-1);
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

/* ---- reuse of freed tiles: one mechanism, one cap, one switch ----
 * Registering a tile handle and unregistering it (starpu_data_unregister_submit goes through
 * StarPU's dependency machinery: two internal tasks per handle) cost several microseconds each,
 * a fresh buffer costs page faults in the kernel that first writes it, and a training or
 * decoding step frees and creates tensors of the same shapes again and again.  So a freed
 * tensor's handles are kept in lists per tile size (element count,
 * element size; every tile has home node -1, so nothing else tells two of them apart), and the
 * next tensor with tiles of that size takes them instead of registering new ones:
 *   idle     handles with no task left when they were freed: kept with their buffers;
 *   pending  handles freed while tasks still use them (most frees inside a step: submission
 *            runs ahead of execution).  Their data is invalidated (starpu_data_invalidate_submit,
 *            by the reaper thread where frees are asynchronous), so that StarPU frees the buffer
 *            -- into the buffer pool, csrc/pool.c -- when the last task using it ends, as an
 *            unregistration did: the next tile of that size allocated by a task takes it.  The
 *            handle is reused once that has happened, never before: a new tensor's first writer
 *            would otherwise wait for the old tasks (StarPU orders every access to one handle;
 *            measured, reusing busy handles with their buffers at once: gpt_step small's peak
 *            603 MiB against 546 MiB, and no faster step).
 * A new tensor takes, per tile, the oldest idle handle of its size, else the oldest pending
 * one if its tasks are done (one starpu_data_acquire_on_node_try; a bucket whose oldest is still
 * busy is not asked again for the same tensor), else registers a new one.  A free asks its
 * tiles in order whether they have tasks left; once one has, the tensor's other tiles go to
 * pending unasked.
 * A wait takes every handle of the lists when it starts (their tensors' tasks were all
 * submitted by then) and unregisters them once every task is done: with sequential
 * consistency turned off first, starpu_data_unregister_no_coherency then has nothing to order
 * after and frees at once; so a wait still gives back every freed tensor's handle (an idle
 * one's buffer goes to the buffer pool).  Shutdown empties the lists too.
 *
 * The one cap: tt_config.reuse_bytes (RuntimeConfig.reuse_mb, TILETRAIN_REUSE_MB) bounds what
 * is kept for reuse, through tt_reuse_reserve (csrc/pool.c holds the cap): every kept handle counts HANDLE_COST for StarPU's
 * structures, an idle one its buffer too, and the buffer pool its freed buffers.  Frees beyond
 * it are unregistered (the reaper) or their buffers freed.  The one switch, tt_reuse_configure
 * at init:
 *   handles  not under MPI (a handle's tag and owner rank belong to its tensor) nor under a
 *            memory limit (tiles evicted to the disk node, ooc flags and wont_use hints, and
 *            the limit's count of registered tiles stay as they were);
 *   buffers  not under a memory limit (a kept buffer is memory outside StarPU's accounting,
 *            which the limit must cover); csrc/pool.c's hooks are installed in CPU-only
 *            sessions (pinned memory stays StarPU's business).
 * Neither with a cap of 0. */
#define REUSE_NBUCKETS 256 /* distinct tile sizes; beyond, those sizes are not kept */
#define HANDLE_COST (6 << 10) /* StarPU's structures of one registered tile (csrc/memory.c measures ~6 KiB) */

typedef struct {
    starpu_data_handle_t *h; /* a ring of n handles from head, capacity cap: oldest first */
    int64_t head, n, cap;
} hring;

typedef struct {
    uint32_t nelems, elemsize; /* the key; nelems 0: an empty slot of the table */
    hring idle, pending;
} rbucket;

static pthread_mutex_t reuse_mu = PTHREAD_MUTEX_INITIALIZER;
static rbucket rbuckets[REUSE_NBUCKETS]; /* open addressing, under reuse_mu */
static int64_t idle_n, idle_bytes, pending_n, pending_bytes; /* the lists' contents, under reuse_mu */
static int64_t reuse_taken;  /* tiles new tensors took from the lists since init, under reuse_mu */
static int reuse_handles;    /* does this session reuse handles (tt_reuse_configure)? */
static int async_free = 1;   /* tt_config.async_free: the reaper unregisters freed tiles */

/* At init, StarPU started (tt_mpi_on and tt_memory_limited known): the one switch (the cap and
 * the buffers' part of it are csrc/pool.c's, the bottom of the mechanism). */
void tt_reuse_configure(const tt_config *cfg)
{
    int64_t cap = cfg->reuse_bytes > 0 ? cfg->reuse_bytes : 0;
    tt_reuse_cap_set(cap, cap > 0 && !tt_memory_limited);
    reuse_handles = cap > 0 && !tt_mpi_on && !tt_memory_limited;
    async_free = cfg->async_free != 0;
}

static rbucket *bucket_of(uint32_t nelems, uint32_t elemsize, int create) /* under reuse_mu */
{
    uint32_t k = (nelems * 2654435761u) ^ (elemsize * 40503u);
    for (int probe = 0; probe < REUSE_NBUCKETS; probe++) {
        rbucket *b = &rbuckets[(k + (uint32_t)probe) & (REUSE_NBUCKETS - 1)];
        if (b->nelems == nelems && b->elemsize == elemsize)
            return b;
        if (!b->nelems) {
            if (!create)
                return NULL;
            b->nelems = nelems;
            b->elemsize = elemsize;
            return b;
        }
    }
    return NULL;
}

static int ring_push(hring *r, starpu_data_handle_t h)
{
    if (r->n == r->cap) {
        int64_t cap = r->cap ? 2 * r->cap : 64;
        starpu_data_handle_t *a = malloc((size_t)cap * sizeof *a);
        if (!a)
            return 0;
        for (int64_t j = 0; j < r->n; j++)
            a[j] = r->h[(r->head + j) % r->cap];
        free(r->h);
        r->h = a;
        r->head = 0;
        r->cap = cap;
    }
    r->h[(r->head + r->n) % r->cap] = h;
    r->n++;
    return 1;
}

static starpu_data_handle_t ring_pop(hring *r) /* the oldest; r->n > 0 */
{
    starpu_data_handle_t h = r->h[r->head];
    r->head = (r->head + 1) % r->cap;
    r->n--;
    return h;
}

/* The node handle_idle acquires on.  The simulation flavour asks main memory: StarPU 1.3's
 * SimGrid mode dereferences a data request's destination while the application thread waits
 * for it (datawizard/data_request.c, _starpu_wait_data_request_completion), and a write
 * acquire on no node of a handle whose valid copy is on a (simulated) GPU makes a request
 * without one: a segfault in tt_tensor_free (docs/simulation.md).  On main memory the write
 * acquire only allocates there (nothing is copied: the handle is reused for a new tensor's
 * first write, or unregistered). */
#ifdef TT_SIMULATION
#define TT_IDLE_NODE STARPU_MAIN_RAM
#else
#define TT_IDLE_NODE STARPU_ACQUIRE_NO_NODE
#endif

/* No task left on h (every task submitted on it has completed)? */
static int handle_idle(starpu_data_handle_t h)
{
    if (starpu_data_acquire_on_node_try(h, TT_IDLE_NODE, STARPU_W))
        return 0;
    starpu_data_release_on_node(h, TT_IDLE_NODE);
    return 1;
}

/* The bucket of handle h's size (a vector of nx elements of elemsize bytes); *cache: the
 * previous one (a tensor's tiles mostly share one size). */
static rbucket *bucket_of_handle(starpu_data_handle_t h, rbucket **cache, int64_t *bytes) /* under reuse_mu */
{
    uint32_t nelems = starpu_vector_get_nx(h), es = (uint32_t)starpu_vector_get_elemsize(h);
    *bytes = (int64_t)nelems * es;
    rbucket *b = *cache;
    if (!b || b->nelems != nelems || b->elemsize != es)
        b = *cache = bucket_of(nelems, es, 1);
    return b;
}

/* Where a freed tile's handle goes. */
enum { PUT_UNREGISTER, PUT_IDLE, PUT_PENDING };

/* Keep handle h for reuse: PUT_IDLE (in the idle list now, no task left), PUT_PENDING (it has
 * tasks left: room taken under the cap, the caller invalidates it and hands it to
 * pending_push), or PUT_UNREGISTER (no room).  *busy: a tile of this tensor had tasks left, so
 * the others are taken to have some too. */
static int reuse_put(starpu_data_handle_t h, rbucket **cache, int *busy) /* under reuse_mu */
{
    int64_t bytes;
    rbucket *b = bucket_of_handle(h, cache, &bytes);
    if (!b)
        return PUT_UNREGISTER;
    if (!*busy && !handle_idle(h))
        *busy = 1;
    if (*busy)
        return tt_reuse_reserve(HANDLE_COST) ? PUT_PENDING : PUT_UNREGISTER;
    if (!tt_reuse_reserve(bytes + HANDLE_COST))
        return PUT_UNREGISTER;
    if (!ring_push(&b->idle, h)) {
        tt_reuse_release(bytes + HANDLE_COST);
        return PUT_UNREGISTER;
    }
    idle_n++;
    idle_bytes += bytes;
    return PUT_IDLE;
}

/* Handles reuse_put sent to pending, their data invalidated: into the pending lists (those
 * that do not fit are unregistered). */
static void pending_push(starpu_data_handle_t *hs, int64_t n)
{
    rbucket *b = NULL;
    pthread_mutex_lock(&reuse_mu);
    for (int64_t i = 0; i < n; i++) {
        int64_t bytes;
        rbucket *k = bucket_of_handle(hs[i], &b, &bytes);
        if (k && ring_push(&k->pending, hs[i])) {
            pending_n++;
            pending_bytes += bytes;
            hs[i] = NULL;
        }
    }
    pthread_mutex_unlock(&reuse_mu);
    for (int64_t i = 0; i < n; i++)
        if (hs[i]) {
            tt_reuse_release(HANDLE_COST);
            unregister(hs[i], 1);
        }
}

/* A freed tile's handle with tasks left: its buffer goes back when the last ends (StarPU frees
 * an invalidated tile's buffer), and the handle to the pending list. */
static void pend(starpu_data_handle_t *hs, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        starpu_data_invalidate_submit(hs[i]);
    pending_push(hs, n);
}

/* A kept handle of this size with no task left (the oldest idle one, else the oldest pending
 * one once its tasks are done), or NULL.  *busy_bucket: a bucket whose oldest pending handle
 * was found busy for this tensor (not asked again). */
static starpu_data_handle_t reuse_take(uint32_t nelems, uint32_t es, rbucket **cache,
                                       rbucket **busy_bucket) /* under reuse_mu */
{
    rbucket *b = *cache;
    if (!b || b->nelems != nelems || b->elemsize != es)
        b = *cache = bucket_of(nelems, es, 0);
    if (!b)
        return NULL;
    int64_t bytes = (int64_t)nelems * es;
    starpu_data_handle_t h = NULL;
    if (b->idle.n) {
        h = ring_pop(&b->idle);
        idle_n--;
        idle_bytes -= bytes;
        tt_reuse_release(bytes + HANDLE_COST);
    } else if (b->pending.n && b != *busy_bucket) {
        if (!handle_idle(b->pending.h[b->pending.head])) {
            *busy_bucket = b;
            return NULL;
        }
        h = ring_pop(&b->pending);
        pending_n--;
        pending_bytes -= bytes;
        tt_reuse_release(HANDLE_COST);
    }
    if (h)
        reuse_taken++;
    return h;
}

/* Register (or take from the lists) every tile slot of a new tensor (owners already set). */
void tt_tensor_init_tiles(tt_tensor *t, int deferred)
{
    if (reuse_handles && !deferred) { /* deferred owners are an MPI matter: no handles reused there anyway */
        int64_t idx[TT_MAX_NDIM];
        rbucket *b = NULL, *busy = NULL;
        pthread_mutex_lock(&reuse_mu);
        for (int64_t i = 0; i < t->ntiles && (idle_n || pending_n); i++) {
            tt_tile_index(t, i, idx);
            t->handles[i] = reuse_take((uint32_t)tt_tile_nelems(t, idx), (uint32_t)t->elemsize, &b, &busy);
        }
        pthread_mutex_unlock(&reuse_mu);
    }
    for (int64_t i = 0; i < t->ntiles; i++)
        if (!t->handles[i])
            tt_tile_init(t, i, deferred);
}

static void ring_take_all(hring *r, starpu_data_handle_t *out, int64_t *n)
{
    for (int64_t j = 0; j < r->n; j++)
        out[(*n)++] = r->h[(r->head + j) % r->cap];
    r->head = r->n = 0;
}

/* Every handle of the lists, taken out of them (a malloc'ed array of *n, or NULL): a wait
 * takes them before it starts, as their tensors' tasks were all submitted by then. */
starpu_data_handle_t *tt_tiles_detach(int64_t *n)
{
    *n = 0;
    starpu_data_handle_t *hs = NULL;
    pthread_mutex_lock(&reuse_mu);
    if ((idle_n || pending_n) && (hs = malloc((size_t)(idle_n + pending_n) * sizeof *hs))) {
        for (int k = 0; k < REUSE_NBUCKETS; k++) {
            ring_take_all(&rbuckets[k].idle, hs, n);
            ring_take_all(&rbuckets[k].pending, hs, n);
        }
        tt_reuse_release(idle_bytes + (idle_n + pending_n) * HANDLE_COST); /* (idle ones' buffers: to the pool) */
        idle_n = idle_bytes = pending_n = pending_bytes = 0;
    }
    pthread_mutex_unlock(&reuse_mu);
    return hs;
}

/* Unregister what tt_tiles_detach took (and free the array): at once when every task is done
 * (done: the wait that followed the detach succeeded), else once their tasks are. */
void tt_tiles_unregister(starpu_data_handle_t *hs, int64_t n, int done)
{
    for (int64_t i = 0; i < n; i++) {
        if (done) /* no task left on it: nothing to order the unregistration after */
            starpu_data_set_sequential_consistency_flag(hs[i], 0);
        unregister(hs[i], !done);
    }
    free(hs);
}

/* At shutdown, every task done: unregister every kept handle and empty the lists. */
void tt_tiles_drain(void)
{
    int64_t n;
    starpu_data_handle_t *hs = tt_tiles_detach(&n);
    tt_tiles_unregister(hs, n, 1);
    pthread_mutex_lock(&reuse_mu);
    for (int k = 0; k < REUSE_NBUCKETS; k++) {
        free(rbuckets[k].idle.h);
        free(rbuckets[k].pending.h);
        memset(&rbuckets[k], 0, sizeof rbuckets[k]);
    }
    reuse_taken = 0;
    pthread_mutex_unlock(&reuse_mu);
}

int tt_reuse_get_stats(tt_reuse_stats *out)
{
    if (!out)
        return tt_error(TT_EINVAL, "reuse stats: out is NULL");
    pthread_mutex_lock(&reuse_mu);
    out->cap_bytes = tt_reuse_cap();
    out->handles = reuse_handles;
    out->buffers = tt_reuse_buffers_on();
    out->idle = idle_n;
    out->idle_bytes = idle_bytes;
    out->pending = pending_n;
    out->pending_bytes = pending_bytes;
    out->taken = reuse_taken;
    out->kept_bytes = tt_reuse_kept();
    out->buffer_bytes = tt_pool_kept_bytes();
    pthread_mutex_unlock(&reuse_mu);
    return TT_OK;
}

/* ---- the reaper: asynchronous unregistration of whole tensors, off the caller's thread ----
 * starpu_data_unregister_submit costs several microseconds per tile (it goes through StarPU's
 * dependency machinery), which a tensor free from Python paid tile by tile.  A free hands the
 * tensor's handle array to this thread instead (one lock, no per-tile work), which
 * unregisters them in order.  Waits (tt_reaper_flush, from tt_wait_all/tt_wait_for) and
 * shutdown first let it finish, so a wait still sees every dropped tensor's memory freed.
 * Not under MPI (StarPU-MPI's per-handle state stays on the submitting thread). */
typedef struct batch {
    starpu_data_handle_t *h;
    int64_t n;
    int pend; /* 1: handles for the pending lists (pend), 0: to unregister */
    struct batch *next;
} batch;

#define REAPER_MAX_PENDING (1 << 20) /* tiles queued; beyond, the caller unregisters itself */
/* A push wakes the reaper once this many tiles or bytes are queued, not at every free: a
 * training step frees a few hundred small tensors, and a wake-up per free was a futex call on
 * the freeing thread and a context switch on a machine whose cores the workers and that
 * thread already share.  What waits is bounded (a few small tiles, or one large one: a tile
 * of REAPER_WAKE_BYTES or more wakes it at once), and a wait or shutdown wakes it first.
 * Only where handles are reused (tt_reuse_configure): under a memory limit every free wakes
 * it, so that StarPU's accounting never waits on a tile the reaper has not unregistered. */
#define REAPER_WAKE_TILES 32
#define REAPER_WAKE_BYTES (1 << 20)

static pthread_mutex_t reaper_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reaper_go = PTHREAD_COND_INITIALIZER;
static pthread_cond_t reaper_idle = PTHREAD_COND_INITIALIZER;
static batch *queue_head, *queue_tail;  /* under reaper_mu */
static int64_t queued;                  /* tiles queued or being unregistered, under reaper_mu */
static int64_t unwoken_tiles, unwoken_bytes; /* queued since the last wake-up, under reaper_mu */
static int64_t reaped;                  /* tiles the reaper has finished since it started, under reaper_mu */
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
        if (b->pend)
            pend(b->h, b->n);
        else
            for (int64_t i = 0; i < b->n; i++)
                unregister(b->h[i], 1);
        free(b->h);
        pthread_mutex_lock(&reaper_mu);
        queued -= b->n;
        reaped += b->n;
        free(b);
        pthread_cond_broadcast(&reaper_idle); /* tt_reaper_flush and tt_reaper_settle wait on it */
    }
    pthread_mutex_unlock(&reaper_mu);
    return NULL;
}


static void wake_reaper(void) /* under reaper_mu */
{
    unwoken_tiles = unwoken_bytes = 0;
    pthread_cond_signal(&reaper_go);
}

/* Queue n handles (taking the malloc'ed array) to unregister, or for the pending lists (pend);
 * 0 when the caller must do it. */
static int reaper_push(starpu_data_handle_t *h, int64_t n, int pend_them)
{
    batch *b = malloc(sizeof *b);
    if (!b)
        return 0;
    b->h = h;
    b->n = n;
    b->pend = pend_them;
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
    unwoken_tiles += n;
    for (int64_t i = 0; reuse_handles && i < n && unwoken_bytes < REAPER_WAKE_BYTES; i++)
        unwoken_bytes += (int64_t)starpu_vector_get_nx(h[i]) * (int64_t)starpu_vector_get_elemsize(h[i]);
    if (!reuse_handles || unwoken_tiles >= REAPER_WAKE_TILES || unwoken_bytes >= REAPER_WAKE_BYTES)
        wake_reaper();
    pthread_mutex_unlock(&reaper_mu);
    return 1;
}

/* A tensor read: the submitting thread blocks until the tasks writing the tensor are done.
 * tt_reaper_nudge (before it) hands the reaper what it holds unwoken and returns the point
 * in the reaper's work that covers it; tt_reaper_settle (after it) waits for that point when
 * it is a few tiles away (at most a wake-up's batch), so that the tiles freed before the read
 * are on the reuse lists after it -- a decode loop frees fewer tiles per round than a
 * wake-up's batch and reads a value every round; without this its reuse depended on the
 * reaper thread getting a core in time.  Both are cheap where nothing is queued. */
int64_t tt_reaper_nudge(void)
{
    pthread_mutex_lock(&reaper_mu);
    if (unwoken_tiles)
        wake_reaper();
    int64_t ticket = queued <= REAPER_WAKE_TILES ? reaped + queued : -1;
    pthread_mutex_unlock(&reaper_mu);
    return ticket;
}

void tt_reaper_settle(int64_t ticket)
{
    if (ticket < 0)
        return;
    pthread_mutex_lock(&reaper_mu);
    while (reaped < ticket && reaper_started && !reaper_quit)
        pthread_cond_wait(&reaper_idle, &reaper_mu);
    pthread_mutex_unlock(&reaper_mu);
}

/* Returns once every queued unregistration has been submitted to StarPU. */
void tt_reaper_flush(void)
{
    pthread_mutex_lock(&reaper_mu);
    if (queued)
        wake_reaper();
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
    wake_reaper();
    pthread_mutex_unlock(&reaper_mu);
    if (started)
        pthread_join(reaper_thread, NULL);
    reaper_started = reaper_quit = 0;
}

/* Free every tile slot of t.  async (a tensor free): the tiles are kept for reuse (above) or
 * unregistered once their last tasks are done, by the reaper where it can, and t->handles is
 * taken (set to NULL); else (shutdown) at once, t->handles left to the caller. */
void tt_tensor_release_tiles(tt_tensor *t, int async)
{
    if (!async) {
        for (int64_t i = 0; i < t->ntiles; i++)
            tt_tile_release(t, i, 0);
        return;
    }
    int64_t n = 0, np = 0;
    starpu_data_handle_t *pending = NULL;
    if (reuse_handles) { /* no MPI: every slot is a registered handle */
        pending = malloc((size_t)t->ntiles * sizeof *pending);
        rbucket *b = NULL;
        int busy = 0;
        pthread_mutex_lock(&reuse_mu);
        for (int64_t i = 0; i < t->ntiles; i++) {
            int put = pending ? reuse_put(t->handles[i], &b, &busy) : PUT_UNREGISTER;
            if (put == PUT_PENDING)
                pending[np++] = t->handles[i];
            else if (put == PUT_UNREGISTER)
                t->handles[n++] = t->handles[i]; /* no room under the cap: unregistered */
        }
        pthread_mutex_unlock(&reuse_mu);
    } else {
        for (int64_t i = 0; i < t->ntiles; i++) {
            starpu_data_handle_t h = slot_forget(t, i);
            if (h)
                t->handles[n++] = h; /* compacted in place: only what StarPU must unregister */
        }
    }
    if (np && !(async_free && reaper_push(pending, np, 1))) {
        pend(pending, np);
        free(pending);
    } else if (!np) {
        free(pending);
    }
    starpu_data_handle_t *hs = t->handles;
    t->handles = NULL;
    if (!tt_mpi_on && n > 0 && async_free && reaper_push(hs, n, 0))
        return;
    for (int64_t i = 0; i < n; i++)
        unregister(hs[i], 1);
    free(hs);
}

/* Slot i's owner rank; a deferred tile is placed on its fallback owner now. */
int tt_tile_owner(tt_tensor *t, int64_t i)
{
    if (tt_tile_state_at(t, i) == TT_TILE_DEFERRED)
        tt_mpi_resolve(t->handles[i]);
    return t->owner[i];
}
