/* The memory budget: StarPU's CPU memory limit (STARPU_LIMIT_CPU_MEM, set by the Python
 * config for starpu_init), glibc's mmap threshold, the disk memory node that receives
 * evicted tiles, and the check that one task's tiles fit under the limit at all.
 *
 * StarPU 1.3 evicts only data it allocated itself (csrc/tile.c registers every tile with
 * home node -1) and only when the limit is reached; with a disk node it writes the evicted
 * tiles there and reads them back before their next task. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "tt_internal.h"

#define MMAP_THRESHOLD (32 * 1024)

static int64_t limit_bytes = -1; /* this session's CPU memory limit, -1: none */
static int64_t handle_cost = 0;   /* bytes of StarPU's structures per registered tile (measured) */
static int64_t meta_bytes = 0;    /* handle_cost times the tiles registered now (atomic) */
static int64_t untrimmed = 0;     /* structures freed since the heap was last trimmed (atomic) */
static int64_t largest_task = 0;  /* the most tile bytes one task submitted so far needs (atomic) */
static int64_t largest_tile = 0;  /* the largest tile registered so far (atomic) */
static int64_t base_rss = 0;      /* resident bytes once StarPU started (under a cap) */
static int64_t other_bytes = 0;   /* the rest of the process beyond base_rss, counted (atomic) */
static pthread_mutex_t other_mu = PTHREAD_MUTEX_INITIALIZER; /* other_bytes' changes */
static int64_t resident_bytes(void);
#define TRIM_EVERY (8 << 20)
static int tasks_ahead = 0;       /* tt_config.tasks_ahead: tasks submitted ahead under a cap (0: no bound) */
extern int tt_memory_limited;
static int disk_node = -1;
static int disk_o_direct = 0;
static char disk_dir[4096];
static int64_t *rank_live = NULL; /* under MPI and a cap: each rank's bytes of live tiles (check_ranks) */
static int rank_count = 0;
static void rank_live_reset(void);

int64_t tt_memory_limit(void) { return limit_bytes; }

/* Which tiles StarPU may evict to the disk node (starpu_data_set_ooc_flag; StarPU's default
 * is all): OOC_PAGES, only those whose size is a multiple of the page size, as the O_DIRECT
 * disk node can only write those (biases and other small tiles then stay in main memory). */
enum { OOC_ALL = 0, OOC_PAGES = 1 };
static int ooc_mode = OOC_ALL;

/* Before starpu_init: the limit StarPU will read, and glibc's mmap threshold pinned so that
 * freed tile buffers go back to the system (glibc raises the threshold after a large free,
 * and later tile-sized buffers would then come from the heap, which keeps its pages).  32 KiB:
 * tiles of 32-128 KiB (e.g. 128x128 float32) evicted to disk left their heap pages resident
 * at 128 KiB (GPT 8x512, 1,392 tiles, 16 MiB cap: 22 MiB less RSS at construction), while
 * StarPU's ~5 KiB handle structures stay on the heap (a 4 KiB threshold mmaps each one). */
void tt_memory_begin(const tt_config *cfg)
{
    limit_bytes = -1;
    disk_node = -1;
    disk_o_direct = 0;
    disk_dir[0] = 0;
    ooc_mode = OOC_ALL;
    if (cfg->memory_limit_mb >= 0) { /* StarPU reads the same value from STARPU_LIMIT_CPU_MEM */
        limit_bytes = (int64_t)cfg->memory_limit_mb << 20;
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
    tt_memory_limited = limit_bytes >= 0;
}

/* StarPU's limit counts tile buffers only, but each registered tile also holds StarPU's
 * structures for it (its state on every memory node, the interface of each, request and
 * chunk lists: ~6 KiB here), which out of core, with thousands of tiles evicted to disk,
 * add up to tens of MiB beyond the cap (64 layers of a 1024-wide GPT: 6,400 parameter tiles,
 * as many again for a step's activations).  Under a cap they are declared to StarPU as
 * allocations of main memory (STARPU_MEMORY_OVERFLOW: never refused, never waiting), from
 * registration to unregistration, so StarPU evicts tile buffers to keep the sum under the
 * limit.  The cost per tile is measured once per session, after starpu_init: the heap's
 * growth over registering a batch of tiles (every field StarPU allocates at registration),
 * plus a quarter for what a tile gains once allocated and moved (its memory chunk, transfer
 * requests, the disk node's file record). */
#define COST_PROBE 64
void tt_memory_started(void)
{
    handle_cost = 0;
    __atomic_store_n(&meta_bytes, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&untrimmed, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&largest_task, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&largest_tile, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&other_bytes, 0, __ATOMIC_RELAXED);
    base_rss = 0;
    rank_live_reset();
    if (limit_bytes < 0)
        return;
    tasks_ahead = tt_config_current()->tasks_ahead > 0 ? tt_config_current()->tasks_ahead : 0;
    int64_t cost = 6 << 10; /* without mallinfo2: what glibc 2.36 + StarPU 1.3.10 measure */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    starpu_data_handle_t h[COST_PROBE];
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < COST_PROBE; i++)
        starpu_vector_data_register(&h[i], -1, 0, 1024, 4);
    struct mallinfo2 after = mallinfo2();
    for (int i = 0; i < COST_PROBE; i++)
        starpu_data_unregister_no_coherency(h[i]);
    int64_t grown = (int64_t)(after.uordblks + after.hblkhd) - (int64_t)(before.uordblks + before.hblkhd);
    if (grown > 0)
        cost = grown / COST_PROBE;
#endif
    handle_cost = cost + cost / 4;
    base_rss = resident_bytes();
}

/* Every tile handle, once registered (csrc/tile.c, or a lazy tile's in csrc/mpi.c): may StarPU
 * evict it to the disk node, and its structures count against the cap. */
void tt_tile_registered(starpu_data_handle_t h)
{
    if (ooc_mode == OOC_PAGES && starpu_data_get_size(h) % 4096)
        starpu_data_set_ooc_flag(h, 0);
    if (tt_memory_limited)
        tt_memory_account_tile(1);
}

/* Registered (sign 1) or unregistered (-1): one tile's structures, under a cap. */
void tt_memory_account_tile(int sign)
{
    if (handle_cost <= 0)
        return;
    __atomic_add_fetch(&meta_bytes, sign * handle_cost, __ATOMIC_RELAXED);
    if (sign > 0) {
        starpu_memory_allocate(STARPU_MAIN_RAM, (size_t)handle_cost, STARPU_MEMORY_OVERFLOW);
    } else {
        starpu_memory_deallocate(STARPU_MAIN_RAM, (size_t)handle_cost);
        __atomic_add_fetch(&untrimmed, handle_cost, __ATOMIC_RELAXED);
    }
}

/* The most of the rest of the process that is counted against the cap: a quarter of it, and
 * never so much that the largest task submitted so far, or two of the largest tiles, could
 * not fit beside the tiles' structures (StarPU would wait for memory forever).  Beyond that,
 * e.g. large NumPy arrays of the program's own, the process may pass the cap. */
static int64_t other_room(void)
{
    int64_t need = __atomic_load_n(&largest_task, __ATOMIC_RELAXED);
    int64_t two = 2 * __atomic_load_n(&largest_tile, __ATOMIC_RELAXED);
    int64_t room = limit_bytes - tt_memory_meta_bytes() - (need > two ? need : two);
    if (room > limit_bytes / 4)
        room = limit_bytes / 4;
    return room > 0 ? room : 0;
}

/* The process' resident bytes now (/proc/self/statm; 0 if it cannot be read). */
static int64_t resident_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    long long size = 0, res = 0;
    if (sscanf(buf, "%lld %lld", &size, &res) != 2)
        return 0;
    return (int64_t)res * (int64_t)sysconf(_SC_PAGESIZE);
}

/* Before StarPU allocates a tile buffer (csrc/pool.c's hook; tiles: the tile bytes it holds),
 * under a cap.
 * - The structures of unregistered tiles go back to glibc's heap, which keeps the freed pages
 *   resident (it returns only the top of the heap to the system): a step's activation tiles
 *   (thousands of handles registered in the forward, unregistered in the backward) would leave
 *   their pages in the process while StarPU, seeing them freed, fills the room with tile
 *   buffers.  Once 8 MiB of structures were freed since the last time, the heap's free pages
 *   go back (malloc_trim).
 * - With a disk node (StarPU can then evict tiles to make room), what else the process holds
 *   beyond its size when StarPU had started -- Python's objects for the model and its
 *   autograd graph, the submitted tasks, the heap's fragments -- is counted against the cap
 *   too, measured at most every 20 ms as the resident bytes less that baseline, the tile
 *   buffers and their structures, as far as the largest task submitted so far still fits:
 *   the cap then bounds the whole process beyond its baseline. */
void tt_memory_before_alloc(int64_t tiles)
{
    if (__atomic_load_n(&untrimmed, __ATOMIC_RELAXED) >= TRIM_EVERY &&
        __atomic_exchange_n(&untrimmed, 0, __ATOMIC_RELAXED) >= TRIM_EVERY)
        malloc_trim(0);
    if (disk_node < 0 || base_rss <= 0 || tt_mpi_on)
        return; /* not under MPI: there the MPI checkpoint test's save under a 32 MiB cap hung with it */
    static double last = 0;
    if (pthread_mutex_trylock(&other_mu) != 0)
        return; /* another worker is measuring */
    double now = tt_now();
    if (now - last >= 0.02) {
        last = now;
        int64_t rss = resident_bytes();
        int64_t other = rss - base_rss - tiles - tt_memory_meta_bytes();
        int64_t room = other_room();
        if (other > room)
            other = room;
        if (rss <= 0 || other < 0)
            other = 0;
        int64_t delta = other - __atomic_load_n(&other_bytes, __ATOMIC_RELAXED);
        if (delta > (1 << 20)) {
            starpu_memory_allocate(STARPU_MAIN_RAM, (size_t)delta, STARPU_MEMORY_OVERFLOW);
            __atomic_add_fetch(&other_bytes, delta, __ATOMIC_RELAXED);
        } else if (delta < -(4 << 20)) {
            starpu_memory_deallocate(STARPU_MAIN_RAM, (size_t)-delta);
            __atomic_add_fetch(&other_bytes, delta, __ATOMIC_RELAXED);
        }
    }
    pthread_mutex_unlock(&other_mu);
}

/* A larger task or tile came: the rest of the process counted no more than leaves it room. */
static void clip_other(void)
{
    pthread_mutex_lock(&other_mu);
    int64_t room = other_room();
    int64_t cur = __atomic_load_n(&other_bytes, __ATOMIC_RELAXED);
    if (cur > room) {
        starpu_memory_deallocate(STARPU_MAIN_RAM, (size_t)(cur - room));
        __atomic_add_fetch(&other_bytes, room - cur, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&other_mu);
}

int64_t tt_memory_other_bytes(void) { return __atomic_load_n(&other_bytes, __ATOMIC_RELAXED); }

int64_t tt_memory_meta_bytes(void) { return __atomic_load_n(&meta_bytes, __ATOMIC_RELAXED); }

/* TILETRAIN_TASKS_AHEAD=N bounds the tasks submitted and not done under a cap: past N the
 * submitting thread waits until half of them are (each task holds a few KiB until it ends,
 * and a large model's step is tens of thousands of tasks).  In one process it is off by
 * default: out of core that memory is counted against the cap with the rest of the process
 * (below), and the bound cost speed (GPT 64x1024 under 4 GiB: 14 tokens/s with 2,048, 20
 * without).  Under MPI a bound is on by default: a task whose input another rank owns holds
 * a received copy from the moment its receive is posted (at submission) until the task
 * ends, and neither StarPU nor StarPU-MPI 1.3 waits for room before posting it, so with every
 * task submitted at once (placing a model: one copy task per tile) the received copies and
 * the sends' pinned tiles filled both ranks' memory and neither could evict (a hang: GPT of
 * 84 MB placed on 2 ranks under 16 MiB, 2 runs of 2; its checkpoint test at that cap 6 of
 * 8).  The default keeps about a quarter of the cap in flight: limit / (4 x the largest
 * task's bytes), between 8 and 2,048 tasks.
 * (Waiting here cannot deadlock across ranks: every rank submits the same flow in the same
 * order and posts a task's messages at submission, so the earliest task not done on any
 * rank has its messages posted on every rank.) */
static int tasks_ahead_bound(void)
{
    if (tasks_ahead > 0 || !tt_mpi_on)
        return tasks_ahead;
    int64_t task = __atomic_load_n(&largest_task, __ATOMIC_RELAXED);
    int64_t n = task > 0 ? limit_bytes / (4 * task) : 2048;
    return n < 8 ? 8 : n > 2048 ? 2048 : (int)n;
}

void tt_memory_throttle(void)
{
    int ahead = tasks_ahead_bound();
    if (ahead > 0 && (int)starpu_task_nsubmitted() > ahead)
        starpu_task_wait_for_n_submitted((unsigned)ahead / 2);
}

/* Can files in dir be opened with O_DIRECT and written with aligned blocks?  (tmpfs, for
 * one, refuses O_DIRECT.) */
static int probe_o_direct(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/.tiletrain-o-direct-probe-%d", dir, (int)getpid());
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0)
        return 0;
    void *buf = NULL;
    int ok = 0;
    if (posix_memalign(&buf, 4096, 4096) == 0) {
        memset(buf, 0, 4096);
        ok = pwrite(fd, buf, 4096, 0) == 4096;
        free(buf);
    }
    close(fd);
    unlink(path);
    return ok;
}

/* StarPU 1.3 asserts (SIGABRT) when a disk node file cannot be reopened or written, e.g. its
 * directory removed or its filesystem full while a step runs: say why before the process
 * ends (async-signal-safe calls only), then let the previous handler or the default act. */
static struct sigaction old_abort;
static int abort_installed = 0;

static void say(const char *s) { ssize_t r = write(2, s, strlen(s)); (void)r; }

static void on_abort(int sig)
{
    struct stat st;
    struct statvfs vfs;
    if (disk_node >= 0) {
        if (stat(disk_dir, &st) != 0) {
            say("\ntiletrain: the disk node's directory ");
            say(disk_dir);
            say(" was removed while tiles were evicted there: StarPU aborted (the tiles it held are lost; "
                "a checkpoint written before is intact: resume from it)\n");
        } else if (statvfs(disk_dir, &vfs) == 0 && (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize < (16 << 20)) {
            say("\ntiletrain: the filesystem of the disk node's directory ");
            say(disk_dir);
            say(" is full: StarPU aborted (a checkpoint written before is intact: resume from it)\n");
        }
    }
    sigaction(sig, &old_abort, NULL);
    raise(sig);
}

static void abort_handler(int on)
{
    if (on && !abort_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_abort;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;
        abort_installed = sigaction(SIGABRT, &sa, &old_abort) == 0;
    } else if (!on && abort_installed) {
        sigaction(SIGABRT, &old_abort, NULL);
        abort_installed = 0;
    }
}

/* At shutdown, every task done, before the tiles are unregistered: StarPU 1.3 may still be
 * moving tiles to or from the disk node (write-backs it starts by itself under the limit), and
 * starpu_shutdown asserts on requests still queued.  No call waits for those, so wait until
 * the bytes on both nodes have not changed for 60 ms (at most 2 s). */
void tt_memory_quiesce(void)
{
    if (disk_node < 0)
        return;
    size_t prev_ram = 0, prev_disk = 0;
    int still = 0;
    for (int i = 0; i < 100 && still < 3; i++) {
        size_t ram = starpu_memory_get_available(STARPU_MAIN_RAM);
        size_t disk = starpu_memory_get_available((unsigned)disk_node);
        still = (i > 0 && ram == prev_ram && disk == prev_disk) ? still + 1 : 0;
        prev_ram = ram;
        prev_disk = disk;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
}

/* At shutdown, after StarPU stopped. */
void tt_memory_end(void)
{
    abort_handler(0);
    disk_node = -1;
    limit_bytes = -1;
    handle_cost = 0;
    tt_memory_limited = 0;
    free(rank_live);
    rank_live = NULL;
    rank_count = 0;
}

int tt_disk_register(const char *dir, int64_t bytes)
{
    if (!tt_session_active())
        return tt_error(TT_ENOTINIT, "disk node: the tiletrain runtime is not initialised");
    if (!dir || !dir[0])
        return tt_error(TT_EINVAL, "disk node: no directory given");
    if (strlen(dir) >= sizeof disk_dir - 64)
        return tt_error(TT_EINVAL, "disk node: directory path is too long");
    if (limit_bytes < 0)
        return tt_error(TT_EINVAL, "disk node: needs a memory limit (mem_limit): StarPU evicts tiles to disk "
                        "only when main memory reaches its limit");
    if (disk_node >= 0)
        return tt_error(TT_EBUSY, "disk node: this session already has one (in %s)", disk_dir);
    struct stat st;
    if (stat(dir, &st) != 0)
        return tt_error(TT_EINVAL, "disk node: directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return tt_error(TT_EINVAL, "disk node: %s is not a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return tt_error(TT_EINVAL, "disk node: directory %s is not writable: %s", dir, strerror(errno));
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0)
        return tt_error(TT_EINVAL, "disk node: statvfs(%s): %s", dir, strerror(errno));
    int64_t avail = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
    if (bytes <= 0)
        bytes = avail - (avail >> 4); /* what is free now, less a margin for everything else */
    if (bytes < STARPU_DISK_SIZE_MIN)
        return tt_error(TT_EINVAL, "disk node: %lld bytes asked or free in %s, StarPU needs at least %lld",
                        (long long)bytes, dir, (long long)STARPU_DISK_SIZE_MIN);
    if (bytes > avail)
        return tt_error(TT_EINVAL, "disk node: %lld bytes asked, only %lld free in %s", (long long)bytes,
                        (long long)avail, dir);
    /* O_DIRECT writes whole pages only: tiletrain keeps its other tiles in memory (tile.c), but
     * under MPI StarPU-MPI registers data of its own (messages that arrive before their
     * receive is posted) that StarPU may evict too, of any size: plain unistd there */
    int o_direct = !tt_mpi_on && probe_o_direct(dir);
    int node = starpu_disk_register(o_direct ? &starpu_disk_unistd_o_direct_ops : &starpu_disk_unistd_ops,
                                    (void *)dir, (starpu_ssize_t)bytes);
    if (node < 0)
        return tt_error(TT_ESTARPU, "disk node: starpu_disk_register(%s) failed (%d)", dir, node);
    disk_node = node;
    disk_o_direct = o_direct;
    ooc_mode = o_direct ? OOC_PAGES : OOC_ALL; /* O_DIRECT writes whole pages only */
    abort_handler(1);
    /* (starpu_disk_register measured the disk's bandwidth with a 16 MiB buffer of its own: the
     * caller resets the buffer pool's peak after it, tiletrain/runtime/__init__.py) */
    snprintf(disk_dir, sizeof disk_dir, "%s", dir);
    return node;
}

int tt_disk_node(void) { return disk_node; }
int tt_disk_o_direct(void) { return disk_o_direct; }

/* Is the disk node still usable?  (Its directory can disappear, or its filesystem fill up,
 * under a running session: StarPU 1.3 would then fail deep inside an eviction.) */
int tt_disk_check(int64_t need)
{
    if (disk_node < 0)
        return TT_OK;
    struct stat st;
    if (stat(disk_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return tt_error(TT_ESTARPU, "disk node: its directory %s is gone (%s); evicted tiles can no longer be "
                        "written or read back", disk_dir, errno ? strerror(errno) : "not a directory");
    if (need <= 0)
        return TT_OK;
    int64_t room = (int64_t)starpu_memory_get_available((unsigned)disk_node);
    if (room < need)
        return tt_error(TT_ESTARPU, "disk node full: %lld more bytes of tiles must be evicted to %s beyond the memory "
                        "limit, its size leaves %lld (ooc_size): raise ooc_size or mem_limit", (long long)need,
                        disk_dir, (long long)room);
    struct statvfs vfs;
    if (statvfs(disk_dir, &vfs) == 0) {
        int64_t avail = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
        if (avail < need)
            return tt_error(TT_ESTARPU, "disk node: only %lld bytes free in %s, %lld needed for evicted tiles "
                            "(the filesystem is filling up)", (long long)avail, disk_dir, (long long)need);
    }
    return TT_OK;
}

int tt_memory_limited = 0; /* a limit is set: tt_submit checks each task's tiles against it */

/* From tensor creation, before StarPU could find its disk node full (it would then wait for
 * room forever, and abort at shutdown on the requests left): the directory still there (a
 * stat); what must live outside main memory once every live tile is allocated, at most 7/8 of
 * the disk node (the rest for tiles with copies both in memory and on disk); and, at most
 * every 20 ms, the filesystem still able to take what StarPU has not written there yet. */
static int disk_check_every(int64_t beyond_limit)
{
    static double last = 0;
    struct stat st;
    if (stat(disk_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return tt_disk_check(0); /* gone: the error */
    if (beyond_limit <= 0)
        return TT_OK;
    int64_t total = (int64_t)starpu_memory_get_total((unsigned)disk_node);
    int64_t usable = total - total / 8;
    if (beyond_limit > usable)
        return tt_error(TT_ESTARPU, "disk node full: %lld bytes of tiles must live beyond the memory limit, the disk "
                        "node in %s takes %lld (7/8 of its %lld bytes, ooc_size): raise ooc_size or mem_limit",
                        (long long)beyond_limit, disk_dir, (long long)usable, (long long)total);
    double now = tt_now();
    if (now - last < 0.02)
        return TT_OK;
    last = now;
    int64_t on_disk = total - (int64_t)starpu_memory_get_available((unsigned)disk_node);
    int64_t need = beyond_limit - (on_disk > 0 ? on_disk : 0);
    return tt_disk_check(need > 0 ? need : 0);
}

static void describe(const tt_tensor *t, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "a %s tensor of shape (", tt_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, ") in tiles of (");
    for (int d = 0; d < t->ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)t->tile[d]);
    if (n < len)
        snprintf(buf + n, len - n, ")");
}

/* Under MPI, the tile bytes each rank holds of the live tensors (rank_live[r], atomic), as
 * every rank computes them alike from the tiles' owners (a deferred tile counted on its
 * fallback rank): a tensor that would bring any rank past the cap is refused on every rank at
 * the same tensor_new, so every rank raises the same MemoryError instead of one rank's StarPU
 * waiting for memory forever while the others wait for it (issue 34: 2 ranks under a tight
 * cap made no progress).  Tiles received from other ranks (halo slabs, parameter copies) are
 * not counted: StarPU frees them as they are used. */
static void rank_live_reset(void)
{
    free(rank_live);
    rank_live = NULL;
    rank_count = 0;
    if (limit_bytes >= 0 && tt_mpi_on) {
        rank_count = tt_mpi_size();
        rank_live = calloc((size_t)rank_count, sizeof *rank_live);
        if (!rank_live)
            rank_count = 0;
    }
}

/* Tile i's bytes (the last tile along an axis may be smaller). */
static int64_t tile_bytes(const tt_tensor *t, int64_t i)
{
    int64_t b = (int64_t)t->elemsize;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t k = i % t->grid[d];
        i /= t->grid[d];
        int64_t left = t->shape[d] - k * t->tile[d];
        b *= left < t->tile[d] ? left : t->tile[d];
    }
    return b;
}

static int check_ranks(const tt_tensor *t, int deferred, char *what, size_t len)
{
    if (!rank_live || deferred)
        return TT_OK; /* deferred tiles count once their first writer places them (tt_memory_charge_tile) */
    int64_t *charge = calloc((size_t)rank_count * 2, sizeof *charge); /* bytes, then tiles, per rank */
    if (!charge)
        return tt_error(TT_ENOMEM, "tensor_new: out of memory");
    for (int64_t i = 0; i < t->ntiles; i++) {
        int r = t->owner[i];
        if (r < 0 || r >= rank_count)
            continue;
        charge[r] += tile_bytes(t, i);
        charge[rank_count + r] += 1;
    }
    for (int r = 0; r < rank_count; r++) {
        int64_t live = __atomic_load_n(&rank_live[r], __ATOMIC_RELAXED);
        int64_t meta = charge[rank_count + r] * handle_cost;
        if (r == tt_mpi_rank())
            meta += tt_memory_meta_bytes();
        if (charge[r] == 0 || live + charge[r] + meta <= limit_bytes)
            continue;
        int64_t mine = charge[r];
        free(charge);
        describe(t, what, len);
        return tt_error(TT_ENOMEM, "tensor_new: %s would put %lld bytes of tiles on rank %d, which holds %lld bytes "
                        "of live tiles already: above the memory limit of %lld bytes per rank (mem_limit) with no "
                        "disk node to evict tiles to; under mpirun each rank's cap holds the tiles it owns, so "
                        "split the tensors over more ranks, pass ooc_dir=..., or raise mem_limit", what,
                        (long long)mine, r, (long long)live, (long long)limit_bytes);
    }
    for (int r = 0; r < rank_count; r++)
        __atomic_add_fetch(&rank_live[r], charge[r], __ATOMIC_RELAXED);
    free(charge);
    return TT_OK;
}

void tt_memory_charge_tile(int rank, int64_t bytes)
{
    if (rank_live && rank >= 0 && rank < rank_count)
        __atomic_add_fetch(&rank_live[rank], bytes, __ATOMIC_RELAXED);
}

void tt_memory_release_tensor(const tt_tensor *t)
{
    if (!rank_live)
        return;
    for (int64_t i = 0; i < t->ntiles; i++) /* a tile still deferred (owner -1) was never counted */
        tt_memory_charge_tile(t->owner[i], -tile_bytes(t, i));
}

/* Bytes of live tiles rank r holds (under MPI and a cap; -1 otherwise). */
int64_t tt_memory_rank_live(int r)
{
    if (!rank_live || r < 0 || r >= rank_count)
        return -1;
    return __atomic_load_n(&rank_live[r], __ATOMIC_RELAXED);
}

/* Without a disk node StarPU cannot evict anything here (every tile's only copy is in main
 * memory): live tensors beyond the limit would leave a task waiting for memory forever.  In
 * one process all live tensors count; under MPI each rank's own tiles (check_ranks). */
int tt_memory_check_tensor(const tt_tensor *t, int deferred)
{
    char what[256];
    int64_t tile = (int64_t)t->elemsize; /* its first tile is its largest */
    for (int d = 0; d < t->ndim; d++)
        tile *= t->tile[d];
    if (tile > limit_bytes) {
        describe(t, what, sizeof what);
        return tt_error(TT_ENOMEM, "tensor_new: one tile of %s is %lld bytes, above the memory limit of %lld bytes "
                        "(mem_limit): StarPU moves whole tiles, so use smaller tiles or raise mem_limit", what,
                        (long long)tile, (long long)limit_bytes);
    }
    if (tile > __atomic_load_n(&largest_tile, __ATOMIC_RELAXED)) { /* (one thread creates tensors) */
        __atomic_store_n(&largest_tile, tile, __ATOMIC_RELAXED);
        if (__atomic_load_n(&other_bytes, __ATOMIC_RELAXED) > 0)
            clip_other();
    }
    int64_t need = tt_tensor_bytes(t), live = tt_bytes_live();
    int64_t meta = tt_memory_meta_bytes() + t->ntiles * handle_cost; /* stays in memory */
    int64_t task = __atomic_load_n(&largest_task, __ATOMIC_RELAXED);
    if (meta + task > limit_bytes) { /* StarPU could not fit the largest task seen so far: a hang */
        describe(t, what, sizeof what);
        return tt_error(TT_ENOMEM, "tensor_new: %s would bring StarPU's structures for the registered tiles "
                        "(%lld tiles, %lld bytes each) to %lld bytes, which with the %lld bytes of tiles one task "
                        "needs in memory at once passes the memory limit of %lld bytes (mem_limit), even out of "
                        "core: use larger tiles (fewer of them), fewer live tensors, or raise mem_limit", what,
                        (long long)(handle_cost ? meta / handle_cost : 0), (long long)handle_cost, (long long)meta, (long long)task,
                        (long long)limit_bytes);
    }
    if (disk_node >= 0)
        return disk_check_every(live + need + meta - limit_bytes);
    if (tt_mpi_on)
        return check_ranks(t, deferred, what, sizeof what);
    if (live + need + meta <= limit_bytes)
        return TT_OK;
    describe(t, what, sizeof what);
    return tt_error(TT_ENOMEM, "tensor_new: %s needs %lld bytes; live tensors hold %lld bytes and StarPU's structures "
                    "for their tiles %lld, and the memory limit is %lld bytes (mem_limit) with no disk node to evict "
                    "tiles to: pass ooc_dir=... (tiletrain train --ooc-dir) or raise mem_limit", what, (long long)need,
                    (long long)live, (long long)meta, (long long)limit_bytes);
}

/* One task needs all its tiles in main memory at once; StarPU can evict every other tile,
 * but if these alone exceed the limit it would wait for memory forever.  Checked before
 * submission; the error names the largest tile's tensor. */
int tt_memory_check_task(int kernel, const starpu_data_handle_t *handles, int n)
{
    int64_t total = 0, largest = 0;
    starpu_data_handle_t big = NULL;
    for (int i = 0; i < n; i++) {
        if (tt_slot_state(handles[i]) == TT_TILE_LAZY)
            continue; /* another rank's tile: it arrives registered, sized like the others */
        int dup = 0;
        for (int j = 0; j < i && !dup; j++)
            dup = handles[j] == handles[i];
        if (dup)
            continue;
        int64_t b = (int64_t)starpu_data_get_size(handles[i]);
        total += b;
        if (b > largest) {
            largest = b;
            big = handles[i];
        }
    }
    int64_t meta = tt_memory_meta_bytes(); /* tiles' structures (the rest counted gives way: clip_other) */
    if (total + meta <= limit_bytes) {
        int64_t seen = __atomic_load_n(&largest_task, __ATOMIC_RELAXED);
        while (total > seen && !__atomic_compare_exchange_n(&largest_task, &seen, total, 0, __ATOMIC_RELAXED,
                                                            __ATOMIC_RELAXED)) {
        }
        if (total > seen && __atomic_load_n(&other_bytes, __ATOMIC_RELAXED) > 0)
            clip_other();
        return TT_OK;
    }
    char what[256] = "a tile";
    tt_tensor *t = tt_tensor_of_handle(big);
    if (t)
        describe(t, what, sizeof what);
    return tt_error(TT_ENOMEM, "%s: one task needs %lld bytes of tiles in main memory at once, and StarPU's structures "
                    "for the %lld registered tiles take %lld bytes, above the memory limit of %lld bytes (mem_limit), "
                    "even out of core; its largest tile (%lld bytes) is of %s: use smaller tiles for it, fewer live "
                    "tensors, or raise mem_limit", tt_kernel_table[kernel].name, (long long)total,
                    (long long)(handle_cost ? meta / handle_cost : 0), (long long)meta, (long long)limit_bytes,
                    (long long)largest, what);
}
