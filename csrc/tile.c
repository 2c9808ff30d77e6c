/* The life cycle of one tile slot (t->handles[i]): its registration, tt_tile_handle and
 * tt_tile_release.  Expanders read t->handles[i] as submit.c's input, and submit.c resolves a
 * task's lazy and deferred tiles itself (csrc/mpi.c's helpers); everything else that needs a
 * registered StarPU handle (a transfer, a migration, an acquire on a node) asks
 * tt_tile_handle, and every free goes through tt_tile_release (whole tensors: the recycling
 * lists or the reaper).
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
#include <string.h>

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
    if (tt_memory_limited)
        tt_memory_account_tile(1); /* its structures count against the cap (csrc/memory.c) */
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

/* ---- recycled tile handles ----
 * Registering a tile handle and unregistering it (starpu_data_unregister_submit goes through
 * StarPU's dependency machinery: two internal tasks per handle) cost several microseconds each,
 * and a training or decoding step frees and creates tensors of the same shapes again and
 * again.  A freed tensor's handles with no task left to run therefore go to a free list per
 * tile size (element count, element size; every tile has home node -1, so nothing else tells
 * two of them apart) and the next tensor with tiles of that size takes them instead of
 * registering new ones, oldest first.  A handle that still has tasks (a tensor dropped while
 * the tasks that read or write it wait to run: most frees inside a step, as submission runs
 * ahead of execution) is unregistered as before (the reaper): reusing it would make the new
 * tensor's first writer wait for those tasks (StarPU orders every access to one handle) and
 * keep its buffer until then (measured under load, recycling busy handles too: gpt_step small's
 * peak 603 MiB against 546 MiB without recycling, and no faster step).  Whether a handle has
 * tasks left is one starpu_data_acquire_on_node_try per tensor with tasks left (its first busy
 * tile sends the rest to the reaper) or per idle tile.
 * A wait takes the handles in the lists when it starts (their tensors' tasks were all
 * submitted by then) and unregisters them once every task is done: with sequential
 * consistency turned off first, starpu_data_unregister_no_coherency then has nothing to order
 * after, and frees at once what starpu_data_unregister_submit would (about half its cost);
 * so a wait still gives back every freed tensor's memory.  Shutdown empties the lists too.
 * Not under MPI (a handle's tag and owner rank belong to its tensor) nor under a memory
 * limit (tiles evicted to the disk node, ooc flags and wont_use hints, and the limit's count
 * of live bytes stay as they were): there every free unregisters as before.  The lists hold
 * at most TILETRAIN_TILE_RECYCLE_MB MiB of tiles (default 256; 0: no recycling), read once
 * per process; frees beyond go to the reaper. */
#define RECYCLE_NBUCKETS 256 /* distinct tile sizes; beyond, those sizes are not recycled */

typedef struct {
    uint32_t nelems, elemsize; /* the key; nelems 0: an empty slot of the table */
    starpu_data_handle_t *h;   /* a ring of n handles from head, capacity cap */
    int64_t head, n, cap;
} rbucket;

static pthread_mutex_t recycle_mu = PTHREAD_MUTEX_INITIALIZER;
static rbucket rbuckets[RECYCLE_NBUCKETS]; /* open addressing, under recycle_mu */
static int64_t recycled_bytes;             /* bytes of the tiles in the lists, under recycle_mu */
static int64_t recycle_hits;               /* tiles handed to new tensors since init, under recycle_mu */
static int64_t recycle_cap = -1;           /* TILETRAIN_TILE_RECYCLE_MB in bytes; -1: not read yet */
static int async_free = 1;                 /* TILETRAIN_ASYNC_FREE (read with it) */
static pthread_once_t config_once = PTHREAD_ONCE_INIT;

static void read_config(void)
{
    const char *v = getenv("TILETRAIN_ASYNC_FREE"); /* 0: every free unregisters on the caller's thread */
    async_free = !(v && v[0] == '0');
    const char *mb = getenv("TILETRAIN_TILE_RECYCLE_MB");
    char *end = NULL;
    long long m = mb && mb[0] ? strtoll(mb, &end, 10) : 256;
    recycle_cap = (mb && mb[0] && (*end || m < 0)) ? 256LL << 20 : m << 20; /* a bad value: the default */
}

static int recycling(void)
{
    pthread_once(&config_once, read_config);
    return recycle_cap > 0 && !tt_mpi_on && !tt_memory_limited;
}

static rbucket *bucket_of(uint32_t nelems, uint32_t elemsize, int create) /* under recycle_mu */
{
    uint32_t k = (nelems * 2654435761u) ^ (elemsize * 40503u);
    for (int probe = 0; probe < RECYCLE_NBUCKETS; probe++) {
        rbucket *b = &rbuckets[(k + (uint32_t)probe) & (RECYCLE_NBUCKETS - 1)];
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

/* No task left on h (every task submitted on it has completed)? */
static int handle_idle(starpu_data_handle_t h)
{
    if (starpu_data_acquire_on_node_try(h, STARPU_ACQUIRE_NO_NODE, STARPU_W))
        return 0;
    starpu_data_release_on_node(h, STARPU_ACQUIRE_NO_NODE);
    return 1;
}

/* Hand slot i's handle to the list of its size: 1; 0 when it does not fit, -1 when it still has
 * tasks to run (the caller unregisters it).  *cache: the bucket of the previous slot (a
 * tensor's tiles mostly share one size). */
static int recycle_put(tt_tensor *t, int64_t i, rbucket **cache) /* under recycle_mu */
{
    int64_t idx[TT_MAX_NDIM];
    tt_tile_index(t, i, idx);
    uint32_t nelems = (uint32_t)tt_tile_nelems(t, idx), es = (uint32_t)t->elemsize;
    int64_t bytes = (int64_t)nelems * es;
    if (recycled_bytes + bytes > recycle_cap)
        return 0;
    rbucket *b = *cache;
    if (!b || b->nelems != nelems || b->elemsize != es)
        b = *cache = bucket_of(nelems, es, 1);
    if (!b)
        return 0;
    if (!handle_idle(t->handles[i]))
        return -1;
    if (b->n == b->cap) {
        int64_t cap = b->cap ? 2 * b->cap : 64;
        starpu_data_handle_t *h = malloc((size_t)cap * sizeof *h);
        if (!h)
            return 0;
        for (int64_t j = 0; j < b->n; j++)
            h[j] = b->h[(b->head + j) % b->cap];
        free(b->h);
        b->h = h;
        b->head = 0;
        b->cap = cap;
    }
    b->h[(b->head + b->n) % b->cap] = t->handles[i];
    b->n++;
    recycled_bytes += bytes;
    return 1;
}

/* The oldest recycled handle of this size (no task left on it), or NULL. */
static starpu_data_handle_t recycle_take(uint32_t nelems, uint32_t es, rbucket **cache) /* under recycle_mu */
{
    rbucket *b = *cache;
    if (!b || b->nelems != nelems || b->elemsize != es)
        b = *cache = bucket_of(nelems, es, 0);
    if (!b || !b->n)
        return NULL;
    starpu_data_handle_t h = b->h[b->head];
    b->head = (b->head + 1) % b->cap;
    b->n--;
    recycled_bytes -= (int64_t)nelems * es;
    recycle_hits++;
    return h;
}

/* Register (or take from the lists) every tile slot of a new tensor (owners already set). */
void tt_tensor_init_tiles(tt_tensor *t, int deferred)
{
    if (recycling() && !deferred) { /* deferred owners are an MPI matter: no recycling there anyway */
        int64_t idx[TT_MAX_NDIM];
        rbucket *b = NULL;
        pthread_mutex_lock(&recycle_mu);
        for (int64_t i = 0; i < t->ntiles && recycled_bytes; i++) {
            tt_tile_index(t, i, idx);
            t->handles[i] = recycle_take((uint32_t)tt_tile_nelems(t, idx), (uint32_t)t->elemsize, &b);
        }
        pthread_mutex_unlock(&recycle_mu);
    }
    for (int64_t i = 0; i < t->ntiles; i++)
        if (!t->handles[i])
            tt_tile_init(t, i, deferred);
}

static int64_t count_locked(void) /* handles in the lists, under recycle_mu */
{
    int64_t n = 0;
    for (int k = 0; k < RECYCLE_NBUCKETS; k++)
        n += rbuckets[k].n;
    return n;
}

/* The handles in the lists, taken out of them (a malloc'ed array of *n, or NULL): a wait
 * takes them before it starts, as their tensors' tasks were all submitted by then. */
starpu_data_handle_t *tt_tiles_detach(int64_t *n)
{
    *n = 0;
    starpu_data_handle_t *hs = NULL;
    pthread_mutex_lock(&recycle_mu);
    if (recycled_bytes && (hs = malloc((size_t)count_locked() * sizeof *hs))) {
        for (int k = 0; k < RECYCLE_NBUCKETS; k++) {
            rbucket *b = &rbuckets[k];
            for (int64_t j = 0; j < b->n; j++)
                hs[(*n)++] = b->h[(b->head + j) % b->cap];
            b->head = b->n = 0;
        }
        recycled_bytes = 0;
    }
    pthread_mutex_unlock(&recycle_mu);
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

/* At shutdown, every task done: unregister every recycled handle and empty the lists. */
void tt_tiles_drain(void)
{
    int64_t n;
    starpu_data_handle_t *hs = tt_tiles_detach(&n);
    tt_tiles_unregister(hs, n, 1);
    pthread_mutex_lock(&recycle_mu);
    for (int k = 0; k < RECYCLE_NBUCKETS; k++) {
        free(rbuckets[k].h);
        memset(&rbuckets[k], 0, sizeof rbuckets[k]);
    }
    recycle_hits = 0;
    pthread_mutex_unlock(&recycle_mu);
}

int64_t tt_tiles_recycled(int64_t *bytes, int64_t *hits)
{
    pthread_mutex_lock(&recycle_mu);
    int64_t n = count_locked();
    if (bytes)
        *bytes = recycled_bytes;
    if (hits)
        *hits = recycle_hits;
    pthread_mutex_unlock(&recycle_mu);
    return n;
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
            unregister(b->h[i], 1);
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

/* Free every tile slot of t.  async (a tensor free): the tiles are recycled (above) or
 * unregistered once their last tasks are done, by the reaper where it can, and t->handles is
 * taken (set to NULL); else (shutdown) at once, t->handles left to the caller. */
void tt_tensor_release_tiles(tt_tensor *t, int async)
{
    if (!async) {
        for (int64_t i = 0; i < t->ntiles; i++)
            tt_tile_release(t, i, 0);
        return;
    }
    int64_t n = 0;
    if (recycling()) { /* no MPI: every slot is a registered handle */
        pthread_mutex_lock(&recycle_mu);
        rbucket *b = NULL;
        int busy = 0; /* a tile with tasks left: the tensor's other tiles most likely have some too */
        for (int64_t i = 0; i < t->ntiles; i++) {
            int put = busy ? 0 : recycle_put(t, i, &b);
            busy |= put < 0;
            if (put <= 0)
                t->handles[n++] = t->handles[i]; /* tasks left, or the list is full: unregistered */
        }
        pthread_mutex_unlock(&recycle_mu);
    } else {
        for (int64_t i = 0; i < t->ntiles; i++) {
            starpu_data_handle_t h = slot_forget(t, i);
            if (h)
                t->handles[n++] = h; /* compacted in place: only what StarPU must unregister */
        }
    }
    starpu_data_handle_t *hs = t->handles;
    t->handles = NULL;
    if (!tt_mpi_on && n > 0 && async_free && reaper_push(hs, n))
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
