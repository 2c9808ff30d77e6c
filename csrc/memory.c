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
extern int tt_memory_limited;
static int disk_node = -1;
static int disk_o_direct = 0;
static char disk_dir[4096];

int64_t tt_memory_limit(void) { return limit_bytes; }

/* Before starpu_init: the limit StarPU will read, and glibc's mmap threshold pinned so that
 * freed tile buffers go back to the system (glibc raises the threshold after a large free,
 * and later tile-sized buffers would then come from the heap, which keeps its pages).  32 KiB:
 * tiles of 32-128 KiB (e.g. 128x128 float32) evicted to disk left their heap pages resident
 * at 128 KiB (GPT 8x512, 1,392 tiles, 16 MiB cap: 22 MiB less RSS at construction), while
 * StarPU's ~5 KiB handle structures stay on the heap (a 4 KiB threshold mmaps each one). */
void tt_memory_begin(void)
{
    const char *v = getenv("STARPU_LIMIT_CPU_MEM");
    limit_bytes = -1;
    disk_node = -1;
    disk_o_direct = 0;
    disk_dir[0] = 0;
    tt_tiles_set_ooc(TT_OOC_ALL);
    if (v && v[0]) {
        limit_bytes = (int64_t)strtoll(v, NULL, 10) << 20;
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
    tt_memory_limited = limit_bytes >= 0;
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
    tt_memory_limited = 0;
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
    tt_tiles_set_ooc(o_direct ? TT_OOC_PAGES : TT_OOC_ALL); /* O_DIRECT writes whole pages only */
    abort_handler(1);
    /* starpu_disk_register measures the disk's bandwidth with a 16 MiB buffer of its own,
     * freed by now: the peak of tile buffers starts after it */
    tt_pool_reset_peak();
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
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = ts.tv_sec + 1e-9 * ts.tv_nsec;
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

/* Without a disk node StarPU cannot evict anything here (every tile's only copy is in main
 * memory): live tensors beyond the limit would leave a task waiting for memory forever.  One
 * process only (under MPI a rank holds only some of each tensor's tiles). */
int tt_memory_check_tensor(const tt_tensor *t)
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
    int64_t need = tt_tensor_bytes(t), live = tt_bytes_live();
    if (disk_node >= 0)
        return disk_check_every(live + need - limit_bytes);
    if (tt_mpi_on || live + need <= limit_bytes)
        return TT_OK;
    describe(t, what, sizeof what);
    return tt_error(TT_ENOMEM, "tensor_new: %s needs %lld bytes; live tensors hold %lld bytes, and the memory limit "
                    "is %lld bytes (mem_limit) with no disk node to evict tiles to: pass ooc_dir=... (tiletrain "
                    "train --ooc-dir) or raise mem_limit", what, (long long)need, (long long)live,
                    (long long)limit_bytes);
}

/* One task needs all its tiles in main memory at once; StarPU can evict every other tile,
 * but if these alone exceed the limit it would wait for memory forever.  Checked before
 * submission; the error names the largest tile's tensor. */
int tt_memory_check_task(int kernel, const starpu_data_handle_t *handles, int n)
{
    int64_t total = 0, largest = 0;
    starpu_data_handle_t big = NULL;
    for (int i = 0; i < n; i++) {
        if (tt_handle_lazy(handles[i]))
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
    if (total <= limit_bytes)
        return TT_OK;
    char what[256] = "a tile";
    tt_tensor *t = tt_tensor_of_handle(big);
    if (t)
        describe(t, what, sizeof what);
    return tt_error(TT_ENOMEM, "%s: one task needs %lld bytes of tiles in main memory at once, above the memory "
                    "limit of %lld bytes (mem_limit), even out of core; its largest tile (%lld bytes) is of %s: "
                    "use smaller tiles for it or raise mem_limit", tt_kernel_table[kernel].name, (long long)total,
                    (long long)limit_bytes, (long long)largest, what);
}
