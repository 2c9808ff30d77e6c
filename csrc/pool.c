/* StarPU's allocations of tile buffers in main memory: counted, and freed buffers kept for
 * the next allocation of their size -- the lower level of the one reuse mechanism (csrc/tile.c
 * "reuse of freed tiles"), for the buffers of handles that are unregistered after all (a wait,
 * MPI sessions, frees beyond the cap).
 *
 * StarPU allocates a tile's buffer when a task first writes it and frees it when the handle
 * is unregistered.  Through glibc that means fresh pages each time (the zero-fill page faults
 * land in the kernels that first write the buffers: 10-20 % of a forward gemm).  The hooks
 * keep freed buffers in exact-size free lists and hand them back to the next allocation of
 * that size, under the one reuse cap (tt_reuse_reserve) and only where the one switch allows
 * (tt_reuse_buffers_on: not under a memory limit, where the hooks only count).  Installed only
 * with CPU workers alone (pinning stays StarPU's business). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "tt_internal.h"

#define POOL_ALIGN 64          /* cache line; also what AVX-512 loads like */
#define POOL_MIN_BYTES 4096    /* smaller buffers come from malloc's bins anyway */
#define POOL_NBUCKETS 128
#define HUGE_BYTES ((size_t)2 << 20) /* buffers this large start on a huge page boundary */

struct bucket {
    size_t size;
    void *head; /* free buffers of this size, linked through their first word */
};

static struct bucket buckets[POOL_NBUCKETS];
static size_t cached_bytes; /* reserved under the one reuse cap (below) */
static int installed, limited, keep; /* limited: under a memory limit; keep: freed buffers are kept */
static size_t align_bytes = POOL_ALIGN;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The one reuse cap (tt_config.reuse_bytes: RuntimeConfig.reuse_mb, TILETRAIN_REUSE_MB), set by
 * csrc/tile.c's switch at init: what the handle lists (csrc/tile.c) and this pool's freed
 * buffers keep, together, counted in reuse_kept (atomic). */
static int64_t reuse_cap, reuse_kept;
static int reuse_buffers; /* may freed buffers be kept (not under a memory limit)? */

void tt_reuse_cap_set(int64_t cap, int buffers)
{
    reuse_cap = cap;
    __atomic_store_n(&reuse_kept, 0, __ATOMIC_RELAXED);
    reuse_buffers = buffers;
}

int64_t tt_reuse_cap(void) { return reuse_cap; }
int64_t tt_reuse_kept(void) { return __atomic_load_n(&reuse_kept, __ATOMIC_RELAXED); }
int tt_reuse_buffers_on(void) { return reuse_buffers; }

/* Room for `bytes` more under the cap: taken (1), or none (0). */
int tt_reuse_reserve(int64_t bytes)
{
    int64_t kept = __atomic_load_n(&reuse_kept, __ATOMIC_RELAXED);
    do {
        if (kept + bytes > reuse_cap)
            return 0;
    } while (!__atomic_compare_exchange_n(&reuse_kept, &kept, kept + bytes, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return 1;
}

void tt_reuse_release(int64_t bytes) { __atomic_sub_fetch(&reuse_kept, bytes, __ATOMIC_RELAXED); }

/* Bytes of tile buffers StarPU holds from the hooks (handed out, not yet given back), and
 * the most it held since the last tt_pool_reset_peak (tt_pool_bytes; -1 without hooks). */
static int64_t held_bytes, peak_bytes;

static void count(int64_t delta) /* under lock */
{
    held_bytes += delta;
    if (held_bytes > peak_bytes)
        peak_bytes = held_bytes;
}

static int pool_malloc(unsigned node, void **A, size_t dim, int flags)
{
    (void)node;
    (void)flags;
    pthread_mutex_lock(&lock);
    int64_t tiles = held_bytes;
    count((int64_t)dim);
    pthread_mutex_unlock(&lock);
    if (limited)
        tt_memory_before_alloc(tiles);
    if (dim >= POOL_MIN_BYTES) {
        void *p = NULL;
        pthread_mutex_lock(&lock);
        for (int i = 0; i < POOL_NBUCKETS; i++)
            if (buckets[i].size == dim && buckets[i].head) {
                p = buckets[i].head;
                buckets[i].head = *(void **)p;
                cached_bytes -= dim;
                tt_reuse_release((int64_t)dim);
                break;
            }
        pthread_mutex_unlock(&lock);
        if (p) {
            *A = p;
            return 0;
        }
    }
    if (posix_memalign(A, dim >= HUGE_BYTES ? HUGE_BYTES : align_bytes, dim ? dim : 1) != 0) {
        *A = NULL;
        return -ENOMEM;
    }
#ifdef MADV_HUGEPAGE
    if (dim >= HUGE_BYTES) /* transparent huge pages: fewer TLB misses when a kernel streams a tile */
        madvise(*A, dim, MADV_HUGEPAGE);
#endif
    return 0;
}

static int pool_free(unsigned node, void *A, size_t dim, int flags)
{
    (void)node;
    (void)flags;
    pthread_mutex_lock(&lock);
    count(-(int64_t)dim);
    pthread_mutex_unlock(&lock);
    if (dim >= POOL_MIN_BYTES && keep) {
        int kept = 0;
        pthread_mutex_lock(&lock);
        if (tt_reuse_reserve((int64_t)dim)) {
            int slot = -1;
            for (int i = 0; i < POOL_NBUCKETS; i++) {
                if (buckets[i].size == dim) {
                    slot = i;
                    break;
                }
                if (slot < 0 && !buckets[i].head)
                    slot = i; /* an empty bucket can take a new size */
            }
            if (slot >= 0) {
                buckets[slot].size = dim;
                *(void **)A = buckets[slot].head;
                buckets[slot].head = A;
                cached_bytes += dim;
                kept = 1;
            } else {
                tt_reuse_release((int64_t)dim);
            }
        }
        pthread_mutex_unlock(&lock);
        if (kept)
            return 0;
    }
    free(A);
    return 0;
}

/* Called by tt_init once StarPU runs, after tt_reuse_configure: install the hooks where it is
 * safe (see above). */
void tt_pool_install(void)
{
    if (starpu_cuda_worker_get_count() > 0 || starpu_opencl_worker_get_count() > 0)
        return;
    /* Under a memory limit the hooks keep nothing (tt_reuse_buffers_on is 0 there): a kept
     * buffer is memory outside StarPU's accounting, which the limit must cover.  They still
     * count the bytes StarPU holds (tt_pool_bytes: the peak under the limit). */
    limited = tt_memory_limited;
    keep = tt_reuse_buffers_on();
    /* page-aligned under a limit: the O_DIRECT disk node (csrc/memory.c) reads and writes the
     * buffers directly, which needs them aligned as StarPU's own allocator would then do */
    align_bytes = limited ? 4096 : POOL_ALIGN;
    /* posix_memalign'ed buffers are free()-compatible with StarPU's own allocator, so
     * buffers allocated before or after the hooks are freed correctly either way */
    starpu_malloc_set_hooks(pool_malloc, pool_free);
    installed = 1;
}

/* Called by tt_shutdown after StarPU stopped: remove the hooks and free the cached buffers. */
void tt_pool_drain(void)
{
    if (installed) {
        starpu_malloc_set_hooks(NULL, NULL);
        installed = 0;
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < POOL_NBUCKETS; i++) {
        while (buckets[i].head) {
            void *p = buckets[i].head;
            buckets[i].head = *(void **)p;
            free(p);
        }
        buckets[i].size = 0;
    }
    tt_reuse_release((int64_t)cached_bytes);
    cached_bytes = 0;
    keep = 0;
    held_bytes = peak_bytes = 0;
    pthread_mutex_unlock(&lock);
}

int64_t tt_pool_kept_bytes(void)
{
    pthread_mutex_lock(&lock);
    int64_t v = (int64_t)cached_bytes;
    pthread_mutex_unlock(&lock);
    return v;
}

int64_t tt_pool_bytes(int peak)
{
    pthread_mutex_lock(&lock);
    int64_t v = !installed ? -1 : peak ? peak_bytes : held_bytes;
    pthread_mutex_unlock(&lock);
    return v;
}

void tt_pool_reset_peak(void)
{
    pthread_mutex_lock(&lock);
    peak_bytes = held_bytes;
    pthread_mutex_unlock(&lock);
}
