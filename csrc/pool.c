/* Reuse of freed tile buffers in main memory.
 *
 * StarPU allocates a tile's buffer when a task first writes it and frees it when the handle
 * is unregistered, so every training step allocates and frees the same temporaries again.
 * Through glibc that means fresh pages each time (the zero-fill page faults land in the
 * kernels that first write the buffers: 10-20 % of a forward gemm).  This keeps freed
 * buffers in exact-size free lists (bounded in bytes) and hands them back to the next
 * allocation of that size.  Installed only with CPU workers alone (pinning stays StarPU's
 * business); the cap in MiB comes from TILETRAIN_BUFFER_POOL_MB (default 1024; 0 turns the
 * pool off), and is 0 under a StarPU memory limit (only counting: see tt_pool_install). */
#include <errno.h>
#include <pthread.h>
#include <starpu.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define POOL_ALIGN 64          /* cache line; also what AVX-512 loads like */
#define POOL_MIN_BYTES 4096    /* smaller buffers come from malloc's bins anyway */
#define POOL_NBUCKETS 128
#define HUGE_BYTES ((size_t)2 << 20) /* buffers this large start on a huge page boundary */

struct bucket {
    size_t size;
    void *head; /* free buffers of this size, linked through their first word */
};

static struct bucket buckets[POOL_NBUCKETS];
static size_t cached_bytes, cap_bytes;
static int installed, limited; /* limited: under a memory limit */
static size_t align_bytes = POOL_ALIGN;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Bytes of tile buffers StarPU holds from the hooks (handed out, not yet given back), and
 * the most it held since the last tt_pool_reset_peak (tt_pool_bytes; -1 without hooks). */
static int64_t held_bytes, peak_bytes;

static void count(int64_t delta) /* under lock */
{
    held_bytes += delta;
    if (held_bytes > peak_bytes)
        peak_bytes = held_bytes;
}

void tt_memory_before_alloc(int64_t tiles); /* csrc/memory.c: under a cap */

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
    if (dim >= POOL_MIN_BYTES) {
        int kept = 0;
        pthread_mutex_lock(&lock);
        if (cached_bytes + dim <= cap_bytes) {
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
            }
        }
        pthread_mutex_unlock(&lock);
        if (kept)
            return 0;
    }
    free(A);
    return 0;
}

/* Called by tt_init once StarPU runs: install the pool where it is safe (see above). */
void tt_pool_install(void)
{
    const char *limit = getenv("STARPU_LIMIT_CPU_MEM"); /* RuntimeConfig.memory_limit_mb */
    if (starpu_cuda_worker_get_count() > 0 || starpu_opencl_worker_get_count() > 0)
        return;
    long mb = 1024;
    const char *env = getenv("TILETRAIN_BUFFER_POOL_MB");
    if (env && env[0]) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 0)
            mb = v;
    }
    if (mb == 0)
        return;
    /* Under a memory limit the pool keeps nothing: a cached buffer is memory outside StarPU's
     * accounting, which the limit must cover.  The hooks still count the bytes StarPU holds
     * (tt_pool_bytes: the peak under the limit). */
    limited = limit && limit[0];
    cap_bytes = limited ? 0 : (size_t)mb << 20;
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
    cached_bytes = 0;
    held_bytes = peak_bytes = 0;
    pthread_mutex_unlock(&lock);
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
