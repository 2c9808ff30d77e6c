/* tiletrain internals shared by the C files that know StarPU (not by kernel bodies). */
#ifndef TT_INTERNAL_H
#define TT_INTERNAL_H

#include <pthread.h>
#include <time.h>
#include <starpu.h>
#include "tiletrain.h"
#include "tt_kernels_args.h"

/* Seconds on CLOCK_MONOTONIC: for durations, deadlines of polling loops and rate limits. */
static inline double tt_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* The CLOCK_REALTIME time `seconds` (>= 0) from now: a pthread_cond_timedwait deadline. */
static inline struct timespec tt_deadline(double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    long long ns = (long long)t.tv_nsec + (long long)(seconds * 1e9);
    t.tv_sec += (time_t)(ns / 1000000000LL);
    t.tv_nsec = (long)(ns % 1000000000LL);
    return t;
}

struct tt_tensor {
    int ndim;
    int dtype;
    size_t elemsize;
    int64_t shape[TT_MAX_NDIM];
    int64_t tile[TT_MAX_NDIM];
    int64_t grid[TT_MAX_NDIM];
    int64_t ntiles;
    starpu_data_handle_t *handles; /* ntiles, row-major over the grid */
    int *owner;                    /* ntiles: MPI rank owning each tile (all 0 without MPI) */
    uint64_t session;              /* runtime session that registered the handles */
    int dead;                      /* handles gone (runtime shut down) */
    int written;                   /* some task or write has initialised every tile */
    int view;                      /* a view of another tensor's tiles (csrc/expand_shape.c): TT_VIEW_* */
    struct tt_tensor *prev, *next; /* live list, for shutdown */
};

/* tt_tensor.view: 0, the tensor owns its tiles; else it unregisters none and, when SHARED, its
 * handle and owner arrays are its base's (reshape views), else its own (tile sub-grid views). */
enum { TT_VIEW_SHARED = 1, TT_VIEW_OWN_ARRAYS = 2 };

typedef struct tt_kernel_desc {
    const char *name;
    struct starpu_codelet *cl;
    size_t args_size;
    int nbuffers;
    enum starpu_data_access_mode modes[8];
    double (*flops)(const void *args);
    int is_map;  /* integer arguments start with n: element-wise map over same-layout tensors */
    int is_span; /* integer arguments start with m, k, n: span expander (reduce/broadcast along axes) */
    long off[6]; /* offsets of the expander-filled arguments n, m, k, first, tile, koff (-1: absent) */
    unsigned dtypes;        /* bit (1 << dtype): the dtypes the kernel takes (kernels.def, `dtypes` column) */
    unsigned opencl_dtypes; /* the dtypes its OpenCL body takes (no halves) */
    unsigned acc;           /* bit i: buffer i is float32 when dtype is float16/bfloat16 (`acc` buffers) */
    unsigned bools;         /* bit i: buffer i is bool whatever the dtype (`bool` buffers) */
    int nints;              /* leading int64 fields of the argument struct: dtype + kernels.def's ints */
} tt_kernel_desc;

enum { TT_OFF_N = 0, TT_OFF_M, TT_OFF_K, TT_OFF_FIRST, TT_OFF_TILE, TT_OFF_KOFF };

extern const tt_kernel_desc tt_kernel_table[TT_NKERNELS];

/* errors (session.c) */
int tt_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* session state (session.c) */
int tt_session_active(void);
uint64_t tt_current_session(void);
void tt_tensors_lock(void);
void tt_tensors_unlock(void);
void tt_tensors_link(struct tt_tensor *t);
void tt_tensors_unlink(struct tt_tensor *t);
void tt_tensors_kill_all(void);
struct tt_tensor *tt_tensors_detach_all(void); /* under the lock: the live list, emptied */
/* caller holds the tensors lock */
void tt_bytes_live_locked_add(int64_t delta);

/* the shutdown gate (session.c): hold it around any call that touches StarPU from outside;
 * enter fails (TT_ENOTINIT, message set) once shutdown has begun */
int tt_gate_enter(const char *what);
void tt_gate_leave(void);
void tt_gate_wait_closed(void); /* returns once a shutdown in progress has finished */
void tt_gate_open(void);
int tt_gate_begin_close(void);
void tt_gate_closed(void);
void tt_session_set_running(int running);
void tt_config_store(const tt_config *cfg);
/* under MPI (mpi.c): TT_OK, or an error when another rank has shut down while this rank
 * still waits for work that needs it (the ranks' programs diverged) */
int tt_mpi_check_diverged(const char *what);
/* starpu_data_acquire, whose wait fails instead of hanging when the ranks diverged (mpi.c) */
int tt_mpi_acquire(starpu_data_handle_t h, enum starpu_data_access_mode mode);

/* wake paused workers (session.c): before any submission, transfer or wait */
void tt_ensure_running(void);
int tt_pause_idle(void); /* inside the gate: the workers asleep if nothing is pending (1 if it did) */

/* small helpers shared by the expanders */
static inline int tt_is_half(int dtype) { return dtype == TT_F16 || dtype == TT_BF16; }
static inline int tt_is_float(int dtype) { return dtype == TT_F32 || dtype == TT_F64 || tt_is_half(dtype); }
/* the dtypes of the kernels without half bodies (norms, attention, embedding, ...) */
static inline int tt_is_f32_f64(int dtype) { return dtype == TT_F32 || dtype == TT_F64; }

static inline const char *tt_dtype_name(int dtype)
{
    switch (dtype) {
    case TT_F32: return "float32";
    case TT_F64: return "float64";
    case TT_I64: return "int64";
    case TT_F16: return "float16";
    case TT_BF16: return "bfloat16";
    case TT_BOOL: return "bool";
    default: return "unknown";
    }
}

/* The dtype a kernel's buffer j holds for a task of `dtype`: an `acc` buffer is the float32
 * accumulator of a float16/bfloat16 task; a `bool` buffer is bool (a mask, a comparison). */
static inline int tt_buffer_dtype(const tt_kernel_desc *k, int j, int dtype)
{
    if (k->bools >> j & 1)
        return TT_BOOL;
    return (tt_is_half(dtype) && (k->acc >> j & 1)) ? TT_F32 : dtype;
}

/* "float32, float64, ..." for a dtype mask (static buffer: for error messages) */
const char *tt_dtype_list(unsigned mask);

/* same shape and same tiles */
static inline int tt_same_layout(const tt_tensor *a, const tt_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->tile[d] != b->tile[d])
            return 0;
    return 1;
}

/* tensors (tensor.c) */
int tt_check_tensor(const tt_tensor *t, const char *what);
/* tt_check_tensor + the tensor must hold data (StarPU aborts on reading a never-written tile) */
int tt_check_readable(const tt_tensor *t, const char *what);
/* tile geometry: pure functions of the tensor's shape and tiling */
static inline int64_t tt_tensor_bytes(const tt_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n * (int64_t)t->elemsize;
}

static inline int64_t tt_tile_dim(const tt_tensor *t, int axis, int64_t idx)
{
    int64_t start = idx * t->tile[axis];
    int64_t rest = t->shape[axis] - start;
    return rest < t->tile[axis] ? rest : t->tile[axis];
}

static inline void tt_tile_shape(const tt_tensor *t, const int64_t *idx, int64_t *out)
{
    for (int d = 0; d < t->ndim; d++)
        out[d] = tt_tile_dim(t, d, idx[d]);
}

static inline int64_t tt_tile_nelems(const tt_tensor *t, const int64_t *idx)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= tt_tile_dim(t, d, idx[d]);
    return n;
}

static inline int64_t tt_tile_linear(const tt_tensor *t, const int64_t *idx)
{
    int64_t lin = 0;
    for (int d = 0; d < t->ndim; d++)
        lin = lin * t->grid[d] + idx[d];
    return lin;
}

static inline void tt_tile_index(const tt_tensor *t, int64_t linear, int64_t *idx)
{
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = linear % t->grid[d];
        linear /= t->grid[d];
    }
}

/* tile slots (tile.c): the only code that registers, resolves or releases a tile; a slot's state
 * is encoded and decoded by the accessors here (inline: the files below tile.c -- memory.c,
 * mpi.c -- read states too, and the C core's files call each other one way, tests/test_c_layers.py) */
typedef enum {
    TT_TILE_HANDLE = 0,   /* a registered StarPU handle (under MPI, registered with StarPU-MPI too) */
    TT_TILE_LAZY = 1,     /* under MPI, another rank's tile never touched here: csrc/mpi.c's record, no handle */
    TT_TILE_DEFERRED = 2, /* registered with StarPU, its owner rank chosen by its first writer (MPI) */
} tt_tile_state;
/* a slot's value on its own (a task's buffer, a handle array's entry): TT_TILE_LAZY (a tagged
 * pointer, low bit set) or TT_TILE_HANDLE (a deferred tile is a registered handle; only its
 * tensor's owner array tells) */
static inline tt_tile_state tt_slot_state(starpu_data_handle_t slot)
{
    return ((uintptr_t)slot & 1u) ? TT_TILE_LAZY : TT_TILE_HANDLE;
}
static inline tt_tile_state tt_tile_state_at(const tt_tensor *t, int64_t i) /* slot i of t */
{
    if (tt_slot_state(t->handles[i]) == TT_TILE_LAZY)
        return TT_TILE_LAZY;
    return t->owner[i] < 0 ? TT_TILE_DEFERRED : TT_TILE_HANDLE;
}
struct tt_lazy_tile; /* csrc/mpi.c's record of a lazy tile (malloc'ed: its low bit is 0) */
static inline starpu_data_handle_t tt_slot_lazy(struct tt_lazy_tile *z) /* the slot value that holds it */
{
    return (starpu_data_handle_t)((uintptr_t)z | 1u);
}
static inline struct tt_lazy_tile *tt_slot_lazy_record(starpu_data_handle_t slot) /* NULL: not a lazy slot */
{
    return tt_slot_state(slot) == TT_TILE_LAZY ? (struct tt_lazy_tile *)((uintptr_t)slot & ~(uintptr_t)1) : NULL;
}
starpu_data_handle_t tt_slot_register(starpu_data_handle_t slot); /* registered (a lazy one now) */
void tt_tile_init(tt_tensor *t, int64_t i, int deferred);
void tt_tensor_init_tiles(tt_tensor *t, int deferred); /* every slot of a new tensor: reused or registered */
starpu_data_handle_t tt_tile_handle(tt_tensor *t, int64_t i); /* registered, owner fixed */
int tt_tile_owner(tt_tensor *t, int64_t i);                   /* its owner rank, fixed now if deferred */
void tt_tile_release(tt_tensor *t, int64_t i, int async);
/* every slot of t; async: t->handles is taken (kept for reuse, or the reaper thread unregisters them) */
void tt_tensor_release_tiles(tt_tensor *t, int async);
void tt_reaper_flush(void); /* every queued unregistration submitted to StarPU */
int64_t tt_reaper_nudge(void);        /* before a blocking read: wake the reaper; a ticket */
void tt_reaper_settle(int64_t ticket); /* after it: the tiles freed before it are on the lists */
void tt_reaper_stop(void);  /* at shutdown, gate closed */
void tt_tiles_drain(void);  /* at shutdown, every task done: unregister the kept handles */
/* a wait: the kept handles taken before it starts, unregistered after it (done: it succeeded) */
starpu_data_handle_t *tt_tiles_detach(int64_t *n);
void tt_tiles_unregister(starpu_data_handle_t *hs, int64_t n, int done);
/* reuse of freed tiles (tile.c): the one switch, at init once StarPU runs */
void tt_reuse_configure(const tt_config *cfg);
/* the one cap, shared by the kept handles and the buffer pool's buffers (csrc/pool.c, below
 * tile.c), set by the switch; buffers: may the pool keep freed buffers? */
void tt_reuse_cap_set(int64_t cap, int buffers);
int64_t tt_reuse_cap(void);
int64_t tt_reuse_kept(void);          /* bytes kept against the cap */
int tt_reuse_buffers_on(void);
int tt_reuse_reserve(int64_t bytes);  /* 1: room under the cap taken; 0: none */
void tt_reuse_release(int64_t bytes);
int64_t tt_pool_kept_bytes(void);     /* freed buffers the pool keeps */

/* the session's configuration (session.c): a copy of tt_init's, valid from tt_init on */
const tt_config *tt_config_current(void);

/* the memory budget (memory.c) */
extern int tt_memory_limited; /* a CPU memory limit is set for this session */
void tt_memory_begin(const tt_config *cfg); /* before starpu_init */
void tt_memory_end(void);     /* after StarPU stopped */
void tt_memory_quiesce(void); /* at shutdown: the disk node's transfers settled */
int tt_memory_check_task(int kernel, const starpu_data_handle_t *handles, int n);
int tt_memory_check_tensor(const tt_tensor *t, int deferred); /* before registering t's tiles */
void tt_memory_release_tensor(const tt_tensor *t); /* its tiles freed: their bytes off their ranks' counts (MPI) */
void tt_memory_charge_tile(int rank, int64_t bytes); /* a tile placed on (or moved off: bytes < 0) a rank */
void tt_memory_started(void);          /* after starpu_init: the per-tile cost of StarPU's structures */
void tt_memory_account_tile(int sign); /* a tile registered (1) or unregistered (-1), under a cap */
void tt_tile_registered(starpu_data_handle_t h); /* after any tile's registration: disk eviction rule, cap */
void tt_memory_throttle(void);         /* before a submission, under a cap: not too many tasks ahead */
void tt_memory_before_alloc(int64_t tiles); /* before a tile buffer is allocated, under a cap */
/* An expander's temporary: deferred owners under MPI (csrc/tensor.c) */
int tt_tensor_new_temp(int ndim, const int64_t *shape, const int64_t *tile, int dtype, tt_tensor **out);
tt_tensor *tt_tensor_of_handle(starpu_data_handle_t h); /* live tensor holding h (session.c; slow) */

/* submission (submit.c): the only place that submits tasks.  args: the kernel's args struct,
 * kept by the caller (e.g. on its stack) and copied into the task; modes may be NULL for the
 * table's modes. */
int tt_submit(int kernel, const void *args, const starpu_data_handle_t *handles,
              const enum starpu_data_access_mode *modes);
/* A task's arguments on an expander's stack when the kernel is chosen at run time: room for
 * any kernel's struct (int64 and double fields only; tt_kernels_gen.c asserts at compile time
 * that every kernel's fits). */
typedef union {
    int64_t i[64];
    double d[64];
} tt_args_buf;
/* args copied into buf: an expander edits its per-tile fields there. */
void tt_args_load(int kernel, const void *args, tt_args_buf *buf);

/* StarPU-MPI (csrc/mpi.c); tt_mpi_on: an MPI session is running */
extern int tt_mpi_on;
extern int tt_world_rank, tt_world_size; /* (csrc/state.c; set by csrc/mpi.c) */
int tt_mpi_start(struct starpu_conf *conf); /* MPI (once per process) + starpu_mpi_init_conf */
void tt_mpi_stop(void);                     /* starpu_mpi_shutdown + starpu_shutdown */
void tt_mpi_quiesce(void);                  /* clean shutdown's collective wait (exit notices) */
#ifdef TT_HAVE_MPI
int tt_mpi_involved(const struct starpu_data_descr *d, int n); /* does this rank take part in the task? */
#endif
int tt_mpi_wait_all(void);                  /* collective: every task and transfer, all ranks */
void tt_mpi_register(starpu_data_handle_t h, int owner); /* next tag of the current stream */
int tt_mpi_stream(void); /* > 0: one replica's shard submitted on its rank only (tt_mpi_set_stream) */
/* deferred owners: registered by the first task writing the tile (owner of its first read
 * tile, else fallback); resolve: register now with the fallback; forget: on free */
/* tag streams: inside stream s > 0 (one data-parallel replica's walk) new tiles take the tag
 * (s << TT_TAG_STREAM_SHIFT) + n (csrc/mpi.c) */
#define TT_TAG_STREAM_SHIFT 40
int64_t tt_mpi_slot_tag(starpu_data_handle_t slot);          /* a lazy or registered slot's tag */
void tt_mpi_lazy_set_tag(starpu_data_handle_t slot, int64_t tag); /* a lazy slot's */
void tt_mpi_defer(starpu_data_handle_t h, int *slot, int fallback);
void tt_mpi_resolve(starpu_data_handle_t h);
void tt_mpi_forget(starpu_data_handle_t h);
#ifdef TT_HAVE_MPI
void tt_mpi_resolve_task(const struct starpu_data_descr *d, int n);
int tt_mpi_stream_check(const struct starpu_data_descr *d, int n, const char *kernel); /* own-replica walk */
#endif
void tt_mpi_flush(starpu_data_handle_t h);  /* collective: drop cached copies on non-owners */
/* Lazy tiles (csrc/mpi.c): under MPI a tile owned by another rank is registered with StarPU
 * only when a task of this rank (or a collective read/write) needs it; until then its slot
 * in the tensor's handle array is TT_TILE_LAZY (csrc/tile.c): its tag and owner. */
starpu_data_handle_t tt_mpi_lazy_new(starpu_data_handle_t *slot, uint32_t nelems, size_t elemsize, int owner);
starpu_data_handle_t tt_mpi_materialize(starpu_data_handle_t h); /* registers a lazy tile; others as is */
void tt_mpi_lazy_free(starpu_data_handle_t h);
void tt_mpi_migrate(starpu_data_handle_t h, int new_owner); /* collective: starpu_mpi_data_migrate */
void tt_mpi_fetch_everywhere(starpu_data_handle_t h); /* collective: owner sends the tile to all */
void tt_mpi_fetch_on(starpu_data_handle_t h, int node); /* owner and node: owner sends the tile to node */
int tt_mpi_sends_wait(void);                           /* until this rank's tt_mpi_fetch_on sends are done */
void tt_mpi_drop_fetched(starpu_data_handle_t h);       /* every rank that knows h: after tt_mpi_fetch_on */

#endif
