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
#define TT_ABI_VERSION 1
#define TT_MAX_NDIM 8

enum tt_dtype { TT_F32 = 0, TT_F64 = 1, TT_I64 = 2 };

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
int tt_kernel_count(void);
const char *tt_kernel_name(int kernel);
int tt_kernel_nbuffers(int kernel);
int tt_kernel_is_map(int kernel);
int tt_kernel_ntasks(int kernel);  /* tasks submitted for this kernel since init */
int64_t tt_memory_used(int node);  /* bytes StarPU has allocated on a memory node; -1 without a memory limit */
int64_t tt_memory_total(int node); /* the node's memory limit in bytes; -1 without one */
int64_t tt_bytes_live(void);       /* bytes of the tiles of live (not yet freed) tensors */
int64_t tt_bytes_created(void);    /* bytes of all tensors created since init (monotonic) */

/* tensors (csrc/handle.c): one StarPU handle per tile, tiles stored row-major */
int tt_tensor_new(int ndim, const int64_t *shape, const int64_t *tile, int dtype, tt_tensor **out);
void tt_tensor_free(tt_tensor *t);
int tt_tensor_alive(const tt_tensor *t);
int64_t tt_tensor_ntiles(const tt_tensor *t);
int tt_tensor_write(tt_tensor *t, const void *src, const int64_t *strides);
int tt_tensor_read(tt_tensor *t, void *dst);

/* tensor-level expanders (csrc/expand.c): one call per op, one task per tile */
int tt_map(int kernel, const void *args, int ntensors, tt_tensor *const *tensors);
/* Span kernels: the `nfull` tensors share one layout; the `nred` tensors have that layout
 * without axes [axis, axis+naxes).  reduce=0: one task per full tile (broadcast);
 * reduce=1: the reduced tensors accumulate over the span, `first` set on its first tile. */
int tt_span_map(int kernel, const void *args, int axis, int naxes, int nfull, tt_tensor *const *full, int nred,
                tt_tensor *const *red, int reduce);
int tt_sum_all(double alpha, tt_tensor *x, double beta, tt_tensor *y);
int tt_gemm(double alpha, tt_tensor *a, int transa, tt_tensor *b, int transb, double beta, tt_tensor *c);

/* family expanders (csrc/expand_<family>.c), one block per family */
/* -- norm -- */
/* Row/column expander (csrc/expand_norm.c) for normalisations over the last axis: `full`
 * tensors share x's layout (..., C); `rows` have it without the last axis; `cols` are 1-D
 * (C,) tiled like x's last axis.  reduce=0: one task per tile of x; reduce=1: the row
 * tensors accumulate along the last axis; reduce=2: the column tensors accumulate over all
 * row tiles (`first` set on the first tile of each chain). */
int tt_norm_map(int kernel, const void *args, int nfull, tt_tensor *const *full, int nrow, tt_tensor *const *rows,
                int ncol, tt_tensor *const *cols, int reduce);

/* -- softmax / cross_entropy -- */

/* -- embedding -- */
/* (csrc/expand_embedding.c) ids: int64, any shape S; table: (V, C); y, dy: S + (C,) tiled as
 * ids then the table's columns.  Ids outside a table tile are skipped by the kernels. */
int tt_embedding(tt_tensor *ids, tt_tensor *table, tt_tensor *y);
int tt_embedding_backward(tt_tensor *ids, tt_tensor *dy, tt_tensor *dtable);

/* -- attention -- */
/* Heads: x (B, T, nparts*C) <-> y (B, H, T, D), H*D = C, part `part` of x's last axis.
 * x's tile along the last axis (tc) holds whole heads and does not straddle parts; y is
 * tiled (tile_B, tc/D, tile_T, D).  merge writes all of x (zeros outside the part). */
int tt_heads_split(tt_tensor *x, int part, int nparts, tt_tensor *y);
int tt_heads_merge(tt_tensor *y, int part, int nparts, tt_tensor *x);
/* Flash attention on (B, H, T, D) tensors of one layout (D a single tile): o = softmax(scale
 * q k^T (+ causal mask)) v and lse (B, H, T) = the row logsumexp of the scores. */
int tt_attention_fwd(tt_tensor *q, tt_tensor *k, tt_tensor *v, double scale, int causal, tt_tensor *o,
                     tt_tensor *lse);
int tt_attention_bwd(tt_tensor *q, tt_tensor *k, tt_tensor *v, tt_tensor *o, tt_tensor *dout, tt_tensor *lse,
                     double scale, int causal, tt_tensor *dq, tt_tensor *dk, tt_tensor *dv);

/* -- hetero (csrc/devices.c): worker kinds, placement, tiles on a memory node -- */
enum tt_where { TT_WHERE_CPU = 1, TT_WHERE_CUDA = 2, TT_WHERE_OPENCL = 4 }; /* worker kinds as bits */
int64_t tt_worker_executed(int worker); /* tasks this worker has run since init; -1: no such worker */
int tt_kernel_impls(int kernel);        /* TT_WHERE_* bits of the implementations compiled in */
/* Placement preference: tasks of kernels that have an implementation for a kind in `mask`
 * are restricted to those kinds (the others run where they can); 0: none.  Returns the
 * previous mask. */
int tt_set_where(int mask);
int tt_get_where(void);
int tt_cuda_memory_node(int devid);     /* StarPU memory node of CUDA device devid */
/* Acquire one tile on a memory node (write: its old contents are discarded) and get its
 * address there; release it after use. */
int tt_tile_acquire(tt_tensor *t, int64_t tile, int node, int write, void **ptr, int64_t *nbytes);
int tt_tile_release(tt_tensor *t, int64_t tile, int node);
/* Run one kernel synchronously on caller buffers, on the worker kinds in mask (tests). */
int tt_run_kernel(int kernel, const void *args, int nbuf, void *const *bufs, const int64_t *nbytes, int mask);

/* CDEF END */

#ifdef __cplusplus
}
#endif

#endif /* TILETRAIN_H */
