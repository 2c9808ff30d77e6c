/* tiletrain: the whole public C API.
 *
 * The part between CDEF BEGIN and CDEF END is also the cffi cdef (tiletrain/_build_ffi.py),
 * so it holds only declarations cffi can parse: no #if, no macros with arguments.
 * Every function that can fail returns an int status (TT_OK or a negative tt_status)
 * and leaves a message in tt_last_error().
 */
#ifndef TILETRAIN_H
#define TILETRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */
#define TT_ABI_VERSION 2
#define TT_MAX_NDIM 8

/* float16 and bfloat16 are storage types: the kernels that take them (csrc/kernels.def, last
 * column) compute and accumulate in float32 and round once when they store. */
enum tt_dtype { TT_F32 = 0, TT_F64 = 1, TT_I64 = 2, TT_F16 = 3, TT_BF16 = 4,
                TT_BOOL = 5 /* 1 byte, 0 or 1 (NumPy's bool); `bool` buffers in csrc/kernels.def */ };
#define TT_NDTYPES 6

enum tt_status {
    TT_OK = 0,
    TT_EINVAL = -1,     /* bad argument */
    TT_ENOTINIT = -2,   /* runtime not initialised */
    TT_EDEAD = -3,      /* tensor belongs to a runtime that has shut down */
    TT_ENOMEM = -4,     /* allocation failed */
    TT_ESTARPU = -5,    /* StarPU reported an error */
    TT_EBUSY = -6       /* runtime already initialised */
};

typedef struct tt_config {
    int ncpu;           /* CPU workers; -1: StarPU's default */
    int nopencl;        /* OpenCL workers; -1: StarPU's default */
    int ncuda;          /* CUDA workers; -1: StarPU's default */
    const char *sched;  /* scheduling policy name; NULL: StarPU's default */
    int profile;        /* 1: enable StarPU profiling */
    int calibrate;      /* -1: default, 0: no, 1: calibrate perf models, 2: reset */
    int mpi;            /* 1: start StarPU-MPI (MPI_COMM_WORLD) */
    /* The rest comes from tiletrain/config.py (RuntimeConfig), which reads every TILETRAIN_*
     * variable: the library reads none itself. */
    int memory_limit_mb;    /* StarPU's CPU memory limit in MiB (also STARPU_LIMIT_CPU_MEM, for StarPU); -1: none */
    int64_t reuse_bytes;    /* the one cap on freed tiles kept for reuse (csrc/tile.c); 0: none kept */
    int async_free;         /* 1: a reaper thread unregisters freed tiles; 0: the freeing thread does */
    int tasks_ahead;        /* under a memory limit: tasks submitted and not done at most; 0: no bound */
    double mpi_exit_grace;  /* under MPI: seconds a wait goes on once another rank has shut down */
    int cp_yield;           /* tt-cp policy: idle workers sched_yield() between polls */
    int cp_idle_sleep_us;   /* tt-cp policy: the longest nap of an idle worker */
} tt_config;

typedef struct tt_tensor tt_tensor;

/* version and errors */
const char *tt_version(void);
int tt_abi_version(void);
const char *tt_last_error(void);

/* runtime (csrc/session.c) */
int tt_init(const tt_config *cfg);
int tt_shutdown(void);
int tt_is_initialized(void);
uint64_t tt_session_id(void);
int tt_wait_all(void);
int tt_wait_idle(int pause);       /* tt_wait_all; pause: then the workers asleep (tt_pause_if_idle) before the freed tiles are unregistered */
void tt_set_idle_nap(int nap_us);  /* idle workers sleep nap_us at a time after 50 us without a task; 0: they poll */
int tt_wait_for(double seconds);   /* 1: all tasks done, 0: timed out, <0: error */
int tt_pending(void);              /* tasks submitted and not yet finished */
void tt_set_priority(int priority);
/* StarPU's CPU workers poll for tasks and keep their cores busy even when idle.
 * tt_pause_if_idle puts them to sleep when no task is pending (returns 1 if it did);
 * every submission, transfer, wait and shutdown wakes them first. */
int tt_pause_if_idle(void);
int tt_is_paused(void);
int tt_get_priority(void);

/* introspection */
int tt_nworkers(void);
int tt_worker_info(int worker, char *name, size_t namelen, int *kind, int *memnode);
int tt_nmemnodes(void);
const char *tt_sched_name(void);
const char *tt_starpu_version(void);
const char *tt_build_options(void);
const char *tt_starpu_prefix(void); /* the StarPU install built against; "": pkg-config's default (the system's) */
int tt_fxt_record(int on);          /* FxT on (StarPU --with-fxt, init(fxt=True)): stop (0) or restart (1) recording */
const char *tt_blas_info(void); /* the CPU BLAS chosen at build time, its version and core type */
/* the body the CPU gemm kernel takes for these operands: "alpha0", "gemv", "rows_dot" (a few
 * float32 rows times a transposed weight, AVX2+FMA CPUs) or "blas" */
const char *tt_gemm_cpu_path(int dtype, int64_t m, int64_t n, int64_t k, int ta, int tb, double alpha);
int tt_kernel_count(void);
const char *tt_kernel_name(int kernel);
int tt_kernel_nbuffers(int kernel);
int tt_kernel_is_map(int kernel);
int tt_kernel_cuda_func(int kernel); /* 1: its codelet has a CUDA function linked in */
int tt_kernel_dtypes(int kernel);  /* bit (1 << dtype) for every dtype the kernel takes */
int tt_kernel_acc_buffers(int kernel); /* bit i: buffer i is a float32 accumulator when dtype is float16/bfloat16 */
int tt_kernel_bool_buffers(int kernel); /* bit i: buffer i is bool whatever the dtype (`bool` buffers) */
int tt_kernel_ntasks(int kernel);  /* tasks submitted for this kernel since init */
int64_t tt_memory_used(int node);  /* bytes StarPU has allocated on a memory node; -1 without a memory limit */
int64_t tt_memory_total(int node); /* the node's memory limit in bytes; -1 without one */
int64_t tt_memory_meta_bytes(void); /* under a limit: StarPU's structures of the registered tiles, counted in tt_memory_used */
int64_t tt_memory_rank_live(int rank); /* under MPI and a limit: bytes of live tiles that rank owns (-1 otherwise) */
int64_t tt_memory_other_bytes(void); /* under a limit with a disk node: the rest of the process beyond its baseline, counted in tt_memory_used */
int64_t tt_bytes_live(void);       /* bytes of the tiles of live (not yet freed) tensors */
int64_t tt_bytes_created(void);    /* bytes of all tensors created since init (monotonic) */
/* tile buffers StarPU holds in main memory through the buffer pool's hooks (csrc/pool.c):
 * now (peak = 0) or the most since the last tt_pool_reset_peak (peak = 1); -1 when the
 * hooks are not installed (GPU or OpenCL workers) */
int64_t tt_pool_bytes(int peak);
void tt_pool_reset_peak(void);
/* freed tiles kept for reuse (csrc/tile.c): the one cap, what this session reuses, the handles
 * kept now (idle: no task left; pending: reused once their last task ends), the tiles new
 * tensors took from them since init, the buffer pool's kept buffers, and all against the cap */
typedef struct tt_reuse_stats {
    int64_t cap_bytes;
    int handles, buffers;
    int64_t idle, idle_bytes, pending, pending_bytes, taken;
    int64_t buffer_bytes, kept_bytes;
} tt_reuse_stats;
int tt_reuse_get_stats(tt_reuse_stats *out);
/* the memory budget (csrc/memory.c): a disk memory node in dir for evicted tiles (bytes <= 0:
 * what is free there now, less a margin; O_DIRECT where the filesystem allows it), after
 * tt_init with a memory limit; returns the node or an error.  tt_disk_check: TT_OK, or an
 * error when its directory is gone or has fewer than `need` bytes free. */
int tt_disk_register(const char *dir, int64_t bytes);
int tt_disk_node(void);     /* -1: none */
int tt_disk_o_direct(void); /* 1: unistd_o_direct, 0: unistd */
int tt_disk_check(int64_t need);
int64_t tt_memory_limit(void); /* this session's CPU memory limit in bytes, -1: none */
int tt_tensor_wont_use(tt_tensor *t); /* starpu_data_wont_use on its tiles: evict them first */

/* tensors (csrc/handle.c): one StarPU handle per tile, tiles stored row-major */
int tt_tensor_new(int ndim, const int64_t *shape, const int64_t *tile, int dtype, tt_tensor **out);
void tt_tensor_free(tt_tensor *t);
int tt_tensor_alive(const tt_tensor *t);
int64_t tt_tensor_ntiles(const tt_tensor *t);
int tt_tensor_write(tt_tensor *t, const void *src, const int64_t *strides);
int tt_tensor_read(tt_tensor *t, void *dst);
/* the same for the tiles of tile rows [lo, hi) along axis 0 ([0, 1) for a 0-d tensor): src/dst
 * hold exactly those rows (dst C-contiguous); checkpoints and initialisation stream with these */
int tt_tensor_write_rows(tt_tensor *t, int64_t lo, int64_t hi, const void *src, const int64_t *strides);
int tt_tensor_read_rows(tt_tensor *t, int64_t lo, int64_t hi, void *dst);
/* root >= 0: under MPI the rows come to rank root only (dst NULL on the other ranks; each
 * tile's copy is dropped again after the read); root < 0: tt_tensor_read_rows */
int tt_tensor_read_rows_on(tt_tensor *t, int64_t lo, int64_t hi, void *dst, int root);

/* tensor-level expanders (csrc/expand.c): one call per op, one task per tile */
int tt_map(int kernel, const void *args, int ntensors, tt_tensor *const *tensors);
/* Span kernels: the `nfull` tensors share one layout; the `nred` tensors have that layout
 * without axes [axis, axis+naxes).  reduce=0: one task per full tile (broadcast);
 * reduce=1: the reduced tensors accumulate over the span, `first` set on its first tile. */
int tt_span_map(int kernel, const void *args, int axis, int naxes, int nfull, tt_tensor *const *full, int nred,
                tt_tensor *const *red, int reduce);
int tt_sum_all(double alpha, tt_tensor *x, double beta, tt_tensor *y);
/* c = alpha op(a) op(b) + beta c.  a, b, c share a float dtype; with float16/bfloat16 a and b, c
 * may be float32 instead: it accumulates the chain along the contracted axis unrounded. */
int tt_gemm(double alpha, tt_tensor *a, int transa, tt_tensor *b, int transb, double beta, tt_tensor *c);
/* c = alpha a op(b) + bias (1-D, along c's last axis, tiled like it), b 2-D: a linear layer's
 * output with the bias added by the first gemm task of each tile (kernel gemm_bias). */
int tt_gemm_bias(double alpha, tt_tensor *a, tt_tensor *b, int transb, tt_tensor *bias, tt_tensor *c);
/* The same, and y = gelu(c) (approx 0: erf form, 1: tanh form) by the last gemm task of each
 * tile (kernel gemm_gelu); c keeps the pre-activation, or with deriv = 1 ends as gelu'(it). */
int tt_gemm_bias_gelu(double alpha, tt_tensor *a, tt_tensor *b, int transb, tt_tensor *bias, int approx,
                      int deriv, tt_tensor *c, tt_tensor *y);
/* y = x rounded to y's dtype (round to nearest even), any pair of float32, float64, float16,
 * bfloat16; same shape and tiles. */
int tt_cast(tt_tensor *x, tt_tensor *y);

/* family expanders (csrc/expand_<family>.c), one block per family */
/* -- norm -- */
/* Row/column expander (csrc/expand_norm.c) for normalisations over the last axis: `full`
 * tensors share x's layout (..., C); `rows` have it without the last axis; `cols` are 1-D
 * (C,) tiled like x's last axis.  reduce=0: one task per tile of x; reduce=1: the row
 * tensors accumulate along the last axis; reduce=2: the column tensors accumulate over all
 * row tiles (`first` set on the first tile of each chain). */
int tt_norm_map(int kernel, const void *args, int nfull, tt_tensor *const *full, int nrow, tt_tensor *const *rows,
                int ncol, tt_tensor *const *cols, int reduce);

/* -- convolution, pooling, batch norm -- */
/* (csrc/expand_conv.c) `batch` tensors (N, C, *spatial) have the channel axis in one tile and
 * share the batch tiling; they may be tiled along spatial axes.  bn_*: one task per tile;
 * conv_*, max_pool_*, avg_pool_*: one task per output tile, reading the input window it needs
 * (halo slabs of the neighbouring tiles; the args hold the op's global geometry).  `whole`
 * tensors have a single tile and are read by every task, or (reduce = 1) the written ones
 * accumulate over the tiles in order (`first` on the first; per-rank partials under MPI). */
int tt_batch_map(int kernel, const void *args, int nbatch, tt_tensor *const *batch, int nwhole,
                 tt_tensor *const *whole, int reduce);
/* Halo slabs this rank cut out for another rank in the conv/pool expanders since the process
 * started (MPI only; bytes and count): the spatial split's halo traffic it sends. */
void tt_conv_halo_stats(int64_t *bytes, int64_t *slabs);

/* -- softmax / cross_entropy -- */

/* -- embedding -- */
/* (csrc/expand_embedding.c) ids: int64, any shape S; table: (V, C); y, dy: S + (C,) tiled as
 * ids then the table's columns.  Ids outside a table tile are skipped by the kernels. */
int tt_embedding(tt_tensor *ids, tt_tensor *table, tt_tensor *y);
int tt_embedding_rows(tt_tensor *ids, tt_tensor *table, tt_tensor *y, int64_t lo, int64_t hi);
int tt_embedding_backward(tt_tensor *ids, tt_tensor *dy, tt_tensor *dtable);

/* -- task lists (index, scatter, block-sparse ops) -- */
/* (csrc/expand_tasks.c) ntasks tasks of `kernel`: task t on tile tiles[t * ntensors + j] of
 * tensors[j], with the argument struct args + t * stride (stride = the struct's size; dtype set
 * here); bit j of wmask[t] (wmask may be NULL) submits buffer j as W, not its table mode. */
int tt_tile_tasks(int kernel, const void *args, int64_t stride, int64_t ntasks, int ntensors,
                  tt_tensor *const *tensors, const int64_t *tiles, const int64_t *wmask);

/* -- shape -- */
/* (csrc/expand_shape.c) Region copies into y, one per source c (arrays of TT_MAX_NDIM entries
 * per source, [c * TT_MAX_NDIM + axis]): for every y axis d and i < count[d],
 * y[ystart[d] + ystep[d] * i] = x_c[xstart[xaxis[d]] + step[d] * i]; xaxis[d] = -1 broadcasts; x axes no
 * y axis maps stay at xstart (an index).  Any tilings; tiles written whole are W, tiles written
 * in part need y to hold data already. */
int tt_copy_regions(tt_tensor *y, int ncopies, tt_tensor *const *xs, const int64_t *xstart, const int *xaxis,
                    const int64_t *step, const int64_t *ystart, const int64_t *ystep, const int64_t *count);
/* y is taken as holding data although not every tile was written yet: a gradient assembled
 * from disjoint parts of whole tiles (split's pieces), whose caller writes the tiles no part
 * wrote (zeros) before anything reads them. */
int tt_tensor_assume_written(tt_tensor *y);
/* 1 and the view's tiles when x's tiles line up with `shape` (same size), else 0 */
int tt_reshape_tiles(const tt_tensor *x, int ndim, const int64_t *shape, int64_t *tiles);
/* Views: tensors made of x's tiles, no copy; freeing one frees no tile, so x must outlive it.
 * tensor_view: x reshaped to `shape` (tt_reshape_tiles must hold); tile_view: x's sub-grid of
 * tiles lo[d] <= idx[d] < hi[d] (not under MPI). */
int tt_tensor_view(tt_tensor *x, int ndim, const int64_t *shape, tt_tensor **out);
int tt_tensor_tile_view(tt_tensor *x, const int64_t *lo, const int64_t *hi, tt_tensor **out);
/* tile_view seen as `shape` (one struct; its tile shape in tiles[ndim]); *out NULL when the
 * tiles do not line up with `shape` */
int tt_tensor_tile_view_as(tt_tensor *x, const int64_t *lo, const int64_t *hi, int ndim, const int64_t *shape,
                           int64_t *tiles, tt_tensor **out);

/* -- attention -- */
/* Heads: x (B, T, nparts*C) <-> y (B, H, T, D), H*D = C, part `part` of x's last axis.
 * x's tile along the last axis (tc) holds whole heads and does not straddle parts; y is
 * tiled (tile_B, tc/D, tile_T, D).  merge writes all of x (zeros outside the part). */
int tt_heads_split(tt_tensor *x, int part, int nparts, tt_tensor *y);
int tt_heads_merge(tt_tensor *y, int part, int nparts, tt_tensor *x);
/* split_heads' backward written straight into x's gradient: part `part` only (the other
 * parts' tiles untouched), then tt_heads_fill_parts zeroes the parts not in the bit mask */
int tt_heads_merge_part(tt_tensor *y, int part, int nparts, tt_tensor *x);
int tt_heads_fill_parts(tt_tensor *x, int nparts, uint32_t parts);
/* Flash attention on (B, H, T, D) tensors of one layout (D a single tile): o = softmax(scale
 * q k^T (+ causal mask)) v and lse (B, H, T) = the row logsumexp of the scores.  k, v (and
 * dk, dv) may have Hkv heads dividing H (grouped-query attention: query head h reads kv head
 * h / G, G = H / Hkv, in place); then q's head tile th is a multiple or a divisor of G and
 * the kv tensors are tiled (tile_B, max(th / G, 1), tile_T, D).  k, v may have more positions
 * than q (same tile along T): a prefix, q holds the last Tq positions (causal: lower right). */
int tt_attention_fwd(tt_tensor *q, tt_tensor *k, tt_tensor *v, double scale, int causal, tt_tensor *o,
                     tt_tensor *lse);
/* Causal attention of queries q (B, H, Tq, D) at positions q_start .. q_start + Tq - 1 over
 * keys/values (B, Hkv, Tk, D), Tk >= q_start + Tq, any tiling along T (a key/value cache;
 * positions beyond a query's are never read); forward only. */
int tt_attention_decode(tt_tensor *q, tt_tensor *k, tt_tensor *v, double scale, int64_t q_start, tt_tensor *o);
int tt_attention_bwd(tt_tensor *q, tt_tensor *k, tt_tensor *v, tt_tensor *o, tt_tensor *dout, tt_tensor *lse,
                     double scale, int causal, tt_tensor *dq, tt_tensor *dk, tt_tensor *dv);

/* -- trace, priorities, stage affinity, tiletrain's own policies (csrc/trace.c, csrc/sched/) -- */
/* One record per task submitted while recording is on (init(profile=True) starts it), filled
 * in C: at submission (id, kernel, priority, tags, predecessors) and by the task's completion
 * callback (worker, memory node, StarPU's submit/start/end times).  Times are microseconds
 * since the last tt_trace_reset.  Predecessors come from the data handles (last writer,
 * readers since the last write) and are stored in one array: tt_trace_read_deps. */
typedef struct tt_task_record {
    int64_t id;          /* submission index since the last reset (= row number) */
    int64_t dep_start;   /* this task's predecessors: deps[dep_start : dep_start + ndeps] */
    double submit_us;
    double start_us;
    double end_us;
    double flops;
    int32_t kernel;
    int32_t worker;      /* -1 until the task has run */
    int32_t memnode;
    int32_t rank;
    int32_t priority;
    int32_t phase;       /* tag string id (tt_tag_name), -1: none */
    int32_t layer;       /* -1: none */
    int32_t microbatch;  /* -1: none */
    int32_t stage;       /* -1: none */
    int32_t ndeps;
    int32_t done;        /* 1: ran; 0: not yet; -1: submission failed */
    int32_t reserved;
    int64_t iargs[8];    /* the kernel's integer arguments: dtype, then its kernels.def ints in order
                          * (gemm: dtype batch m n k ta tb cacc); 0 past the last */
    double cpu_us;       /* the worker thread's CPU time from its previous recorded completion to this
                          * one (the task's own CPU time when the worker started it at once; unlike
                          * end - start it excludes time the thread was preempted); -1: first */
} tt_task_record;

int tt_profiling_enabled(void);
int tt_trace_start(void);          /* reset, then record; TT_EINVAL when profiling is off */
int tt_trace_stop(void);
int tt_trace_is_recording(void);
int tt_trace_reset(void);          /* waits for every task, drops records, restarts clock and worker counters */
int64_t tt_trace_count(void);      /* records since the last reset */
int64_t tt_trace_ndeps(void);
int64_t tt_trace_dropped(void);    /* tasks not recorded: the record buffer was full */
int tt_trace_read(int64_t first, int64_t n, tt_task_record *out);
int tt_trace_read_deps(int64_t first, int64_t n, int64_t *out);
double tt_trace_now_us(void);      /* the trace clock now */
/* StarPU's per-worker counters since the last reset, in microseconds (cumulative across calls) */
int tt_worker_profile(int worker, double *total_us, double *executing_us, double *sleeping_us, int64_t *ntasks);
/* user tags: strings interned once, small ints per task */
int tt_tag_intern(const char *name);
const char *tt_tag_name(int id);
int tt_tag_count(void);
void tt_tags_set(int phase, int layer, int microbatch, int stage);
void tt_tags_get(int *phase, int *layer, int *microbatch, int *stage);
/* priorities: the current policy's range; a plan gives the next n submissions their priorities */
int tt_priority_range(int *min, int *max);
int tt_priority_check(int priority);
int tt_priority_plan_set(int64_t n, const int32_t *priorities);   /* n = 0 clears */
int64_t tt_priority_plan_used(void);   /* submissions that took a planned priority since the last set */
/* stage affinity: tasks submitted from now on run only on these workers (n = 0: anywhere) */
int tt_affinity_set(int n, const int *workers);
int tt_affinity_get(int *workers, int max);
/* synthetic busy-wait/sleep tasks for scheduling experiments (csrc/expand_pipeline.c): one spin
 * task per tile; a, b read; c written when wmask & 1, d accumulated when wmask & 2 (else read). */
int tt_spin(tt_tensor *a, tt_tensor *b, tt_tensor *c, tt_tensor *d, int64_t usec, int sleep, int wmask);
/* action order (csrc/submit.c): while a one-tile token is set (NULL clears), every task this
 * process runs also reads it; a barrier writes it, so the next action's tasks follow */
int tt_order_set(tt_tensor *token);
int tt_order_barrier(tt_tensor *token);
/* tiletrain's own scheduling policies (files in csrc/sched), selectable by name in tt_config.sched */
int tt_sched_policy_count(void);
const char *tt_sched_policy_name(int i);
const char *tt_sched_policy_description(int i);

/* -- hetero (csrc/devices.c): worker kinds, placement, tiles on a memory node -- */
enum tt_where { TT_WHERE_CPU = 1, TT_WHERE_CUDA = 2, TT_WHERE_OPENCL = 4 }; /* worker kinds as bits */
int64_t tt_worker_executed(int worker); /* tasks this worker has run since init; -1: no such worker */
int tt_kernel_impls(int kernel);        /* TT_WHERE_* bits of the implementations compiled in */
int tt_kernel_impls_for(int kernel, int dtype); /* the same, for tasks of one dtype (no OpenCL body takes halves) */
/* Placement preference: tasks of kernels that have an implementation for a kind in `mask`
 * are restricted to those kinds (the others run where they can); 0: none.  Returns the
 * previous mask. */
int tt_set_where(int mask);
int tt_get_where(void);
int tt_cuda_memory_node(int devid);     /* StarPU memory node of CUDA device devid */
/* Acquire one tile on a memory node (write: its old contents are discarded) and get its
 * address there; release it after use. */
int tt_tile_acquire_on_node(tt_tensor *t, int64_t tile, int node, int write, void **ptr, int64_t *nbytes);
int tt_tile_release_on_node(tt_tensor *t, int64_t tile, int node);
/* Run one kernel synchronously on caller buffers, on the worker kinds in mask (tests). */
int tt_run_kernel(int kernel, const void *args, int nbuf, void *const *bufs, const int64_t *nbytes, int mask);

/* -- MPI (csrc/mpi.c): StarPU-MPI sessions, tile owners -- */
int tt_mpi_available(void);  /* 1: built with StarPU-MPI */
int tt_mpi_enabled(void);    /* 1: the running session uses StarPU-MPI */
int tt_mpi_rank(void);       /* this process' rank (0 without MPI) */
int tt_mpi_size(void);       /* number of ranks (1 without MPI) */
void tt_mpi_abort(int code); /* MPI_Abort(MPI_COMM_WORLD, code) (or _Exit without MPI): never returns */
int64_t tt_mpi_next_tag(void); /* the data tag the next registered tile gets */
/* other ranks' tiles created lazily (out[0]) and registered since because this rank needed
 * them (out[1]), this session */
void tt_mpi_lazy_counts(int64_t *out);
/* A tensor whose tile i belongs to rank owners[i] (NULL: rank 0); owners must be in [0, size). */
int tt_tensor_new_owned(int ndim, const int64_t *shape, const int64_t *tile, int dtype, const int *owners,
                        tt_tensor **out);
/* The same with deferred owners: tile i is placed by the first task that writes it, on the
 * owner of the first tile that task reads (else on fallback[i]); see csrc/mpi.c. */
int tt_tensor_new_deferred(int ndim, const int64_t *shape, const int64_t *tile, int dtype, const int *fallback,
                           tt_tensor **out);
/* out[i]: owner rank of tile i (-1: not placed yet); n: room in out, the tensor's tile count */
int tt_tensor_owners(const tt_tensor *t, int *out, int64_t n);
/* Collective (every rank, same point of the flow): hand tile i to rank owners[i] --
 * StarPU-MPI moves the data and later tasks treat the new rank as its owner; no task. */
int tt_tensor_migrate(tt_tensor *t, const int *owners);
/* Data-parallel submission of one's own replica only (tiletrain.parallel.shard_backward).
 * set_stream: tiles made from now on take tags from replica stream s (s - 1 = the replica;
 * 0: the process-wide counter); returns the previous stream.  While a stream is set, a
 * task that would need another rank's part of the flow fails instead of hanging. */
int tt_mpi_set_stream(int stream);
int tt_mpi_cache_enabled(void); /* StarPU-MPI's communication cache is on (MPI session) */
/* A new tensor shaped like src, every tile on rank owner (another rank; registered only
 * if a task of this rank needs it), naming the tiles of replica (src's + stream_delta)
 * that correspond to src's: src's tags in the shifted stream. */
int tt_tensor_shadow(tt_tensor *src, int64_t stream_delta, int owner, tt_tensor **out);
/* 1: every tile of t has a tag of replica stream `stream` (a tensor made -- or a deferred
 * one first written -- in it, not one made before and reused), so it can be shadowed */
int tt_mpi_in_stream(tt_tensor *t, int stream);
/* Collective: each tile sent by its owner to every rank in nodes that lacks it (the
 * communication cache skips tiles a node holds already). */
int tt_tensor_push(tt_tensor *t, const int *nodes, int n);

/* Sparse layouts on the host (csrc/layout.c; no runtime needed).  perm: the entries ordered
 * by row, then column, then input order (NumPy's lexsort((col, row))); crow: nrows + 1 row
 * pointers. */
int tt_coo_to_csr(int64_t nrows, int64_t ncols, int64_t nnz, const int64_t *row, const int64_t *col,
                  int64_t *crow, int64_t *perm);
/* A CSR matrix (n x m, nnz entries) in row blocks of rb x column blocks of cb, g = ceil(n/rb) * ceil(m/cb)
 * blocks (one block row or column for an empty axis): counts (g) the entries per block;
 * layout: L slots per block (L >= the largest count), each block's entries by row then in
 * CSR order -- perm (g x L) the CSR position of each slot, cols (g x L) its column within
 * the block (0 in empty slots), rowptr (g x (rb + 1)) each block's local row pointers. */
int tt_csr_block_counts(int64_t n, int64_t m, int64_t nnz, const int64_t *crow, const int64_t *col, int64_t rb, int64_t cb,
                        int64_t *counts);
int tt_csr_block_layout(int64_t n, int64_t m, int64_t nnz, const int64_t *crow, const int64_t *col, int64_t rb, int64_t cb,
                        int64_t L, int64_t *perm, int64_t *cols, int64_t *rowptr);
/* The same from a COO list (row[k], col[k], values[k] or NULL), checked, in one call after
 * the counts: crow, ccol (columns in CSR order: by row, then column, then input order), cperm
 * (the input entry at each CSR position) and with values cvalues (float64, CSR order) and bv
 * (g x L blocked values of vsize bytes: 4 float, 8 double); perm, cols, rowptr as above. */
int tt_coo_block_counts(int64_t n, int64_t m, int64_t nnz, const int64_t *row, const int64_t *col, int64_t rb, int64_t cb,
                        int64_t *counts);
int tt_coo_block_layout(int64_t n, int64_t m, int64_t nnz, const int64_t *row, const int64_t *col, const double *values,
                        int64_t vsize, int64_t rb, int64_t cb, int64_t L, int64_t *crow, int64_t *ccol, int64_t *cperm,
                        double *cvalues, int64_t *perm, int64_t *cols, int64_t *rowptr, void *bv);

/* PyG's gcn_norm (source to target) of a graph of n nodes and e edges src[i] -> dst[i]
 * (csrc/graph.c): with add_loops, the edges that are not self-loops, then a loop per node
 * (weight: the node's own loop's, else fill; 1 when w is NULL); values
 * deg(src)^-1/2 w deg(dst)^-1/2, degrees summed over the targets (0 for none).  Outputs:
 * room for e + n entries, *oe the count written. */
int tt_gcn_norm(int64_t n, int64_t e, const int64_t *src, const int64_t *dst, const double *w, double fill,
                int add_loops, int64_t *osrc, int64_t *odst, double *ow, int64_t *oe);

/* CDEF END */

/* bytes per element of a dtype; 0 for an unknown code (C only: kernel bodies, expanders) */
static inline size_t tt_dtype_size(int dtype)
{
    switch (dtype) {
    case TT_F32: return 4;
    case TT_F64: case TT_I64: return 8;
    case TT_F16: case TT_BF16: return 2;
    case TT_BOOL: return 1;
    default: return 0;
    }
}

#ifdef __cplusplus
}
#endif

#endif /* TILETRAIN_H */
