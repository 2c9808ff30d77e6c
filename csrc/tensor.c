/* Tiled tensors: geometry, creation, free, migration and whole-tensor reads and writes.
 * One StarPU vector handle per tile, each tile a contiguous row-major block; the tile slots
 * themselves (registration, states, release) are csrc/tile.c's. */
#include <stdlib.h>
#include <string.h>

#include "tt_internal.h"
#include "tt_trace.h"

int tt_check_tensor(const tt_tensor *t, const char *what)
{
    if (!t)
        return tt_error(TT_EINVAL, "%s: tensor is NULL", what);
    if (!tt_session_active())
        return tt_error(TT_ENOTINIT, "%s: the tiletrain runtime is not initialised", what);
    if (t->dead || t->session != tt_current_session())
        return tt_error(TT_EDEAD, "%s: tensor belongs to a runtime that has shut down", what);
    return TT_OK;
}

int tt_check_readable(const tt_tensor *t, const char *what)
{
    int rc = tt_check_tensor(t, what);
    if (rc)
        return rc;
    if (!t->written)
        return tt_error(TT_EINVAL, "%s: operand has never been written (created with empty() and not yet filled)",
                        what);
    return TT_OK;
}

int tt_tensor_new(int ndim, const int64_t *shape, const int64_t *tile, int dtype, tt_tensor **out)
{
    return tt_tensor_new_owned(ndim, shape, tile, dtype, NULL, out);
}

static int tensor_new(int ndim, const int64_t *shape, const int64_t *tile, int dtype, const int *owners,
                      int deferred, tt_tensor **out);

/* An expander's temporary (attention's row statistics, a split gemm's partial sums): under
 * MPI its tiles take deferred owners -- each lives where the first task writing it reads its
 * first tile, i.e. with the data it is computed from -- instead of tt_tensor_new's rank 0,
 * which made every rank's attention backward compute its row statistics on rank 0 (and wait
 * there behind rank 0's own work).  In one process a plain tensor (recycled handles). */
int tt_tensor_new_temp(int ndim, const int64_t *shape, const int64_t *tile, int dtype, tt_tensor **out)
{
    return tensor_new(ndim, shape, tile, dtype, NULL, tt_mpi_on, out); /* NULL: fallback rank 0 */
}

int tt_tensor_new_owned(int ndim, const int64_t *shape, const int64_t *tile, int dtype, const int *owners,
                        tt_tensor **out)
{
    return tensor_new(ndim, shape, tile, dtype, owners, 0, out);
}

int tt_tensor_new_deferred(int ndim, const int64_t *shape, const int64_t *tile, int dtype, const int *fallback,
                           tt_tensor **out)
{
    return tensor_new(ndim, shape, tile, dtype, fallback, 1, out);
}

static int tensor_new_gated(int ndim, const int64_t *shape, const int64_t *tile, int dtype, const int *owners,
                            int deferred, tt_tensor **out);

static int tensor_new(int ndim, const int64_t *shape, const int64_t *tile, int dtype, const int *owners,
                      int deferred, tt_tensor **out)
{
    int rc = tt_gate_enter("tensor_new"); /* registers tiles: not while shutdown stops StarPU */
    if (rc) {
        if (out)
            *out = NULL;
        return rc;
    }
    rc = tensor_new_gated(ndim, shape, tile, dtype, owners, deferred, out);
    tt_gate_leave();
    return rc;
}

static int tensor_new_gated(int ndim, const int64_t *shape, const int64_t *tile, int dtype, const int *owners,
                            int deferred, tt_tensor **out)
{
    int rc;
    if (!out)
        return tt_error(TT_EINVAL, "tensor_new: out is NULL");
    *out = NULL;
    if (!tt_session_active())
        return tt_error(TT_ENOTINIT, "tensor_new: the tiletrain runtime is not initialised");
    if (ndim < 0 || ndim > TT_MAX_NDIM)
        return tt_error(TT_EINVAL, "tensor_new: ndim=%d outside [0, %d]", ndim, TT_MAX_NDIM);
    size_t es = tt_dtype_size(dtype);
    if (!es)
        return tt_error(TT_EINVAL, "tensor_new: unknown dtype code %d", dtype);
    tt_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return tt_error(TT_ENOMEM, "tensor_new: out of memory");
    t->ndim = ndim;
    t->dtype = dtype;
    t->elemsize = es;
    t->ntiles = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || tile[d] < 1) {
            free(t);
            return tt_error(TT_EINVAL, "tensor_new: shape[%d]=%lld and tiles[%d]=%lld must be >= 1", d,
                            (long long)shape[d], d, (long long)tile[d]);
        }
        t->shape[d] = shape[d];
        t->tile[d] = tile[d] < shape[d] ? tile[d] : shape[d];
        t->grid[d] = (shape[d] + t->tile[d] - 1) / t->tile[d];
        t->ntiles *= t->grid[d];
    }
    t->handles = calloc((size_t)t->ntiles, sizeof *t->handles);
    t->owner = calloc((size_t)t->ntiles, sizeof *t->owner);
    if (!t->handles || !t->owner) {
        long long n = (long long)t->ntiles;
        free(t->handles);
        free(t->owner);
        free(t);
        return tt_error(TT_ENOMEM, "tensor_new: out of memory for %lld tile handles", n);
    }
    if (owners) {
        int size = tt_mpi_size();
        for (int64_t i = 0; i < t->ntiles; i++) {
            if (owners[i] < 0 || owners[i] >= size) {
                int o = owners[i];
                free(t->handles);
                free(t->owner);
                free(t);
                return tt_error(TT_EINVAL, "tensor_new: tile %lld's owner rank %d is outside [0, %d)", (long long)i,
                                o, size);
            }
            t->owner[i] = owners[i];
        }
    }
    if (tt_memory_limited && (rc = tt_memory_check_tensor(t, deferred)) != TT_OK) {
        free(t->handles);
        free(t->owner);
        free(t);
        return rc;
    }
    tt_tensor_init_tiles(t, deferred); /* csrc/tile.c */
    t->session = tt_current_session();
    tt_tensors_lock();
    tt_tensors_link(t);
    tt_bytes_live_locked_add(tt_tensor_bytes(t));
    tt_tensors_unlock();
    *out = t;
    return TT_OK;
}

void tt_tensor_free(tt_tensor *t)
{
    if (!t)
        return;
    if (t->view) { /* a view (csrc/expand_shape.c): its base unregisters the tiles */
        if (t->view == TT_VIEW_OWN_ARRAYS) {
            free(t->handles);
            free(t->owner);
        }
        free(t);
        return;
    }
    int gated = tt_gate_enter("tensor_free") == TT_OK;
    if (!gated)
        tt_gate_wait_closed(); /* a shutdown in progress unregisters it (tt_tensors_kill_all) */
    tt_tensors_lock();
    if (gated && !t->dead && t->session == tt_current_session() && tt_session_active()) {
        tt_ensure_running();
        tt_tensors_unlink(t);
        tt_bytes_live_locked_add(-tt_tensor_bytes(t));
        tt_memory_release_tensor(t);
        if (tt_trace_tracks_handles()) /* the trace's per-handle DAG state */
            for (int64_t i = 0; i < t->ntiles; i++)
                if (tt_slot_state(t->handles[i]) != TT_TILE_LAZY) /* never registered: another rank's tile */
                    tt_trace_forget_handle(t->handles[i]);
        tt_tensor_release_tiles(t, 1); /* freed once their last tasks are done (csrc/tile.c) */
    }
    tt_tensors_unlock();
    if (gated)
        tt_gate_leave();
    free(t->handles);
    free(t->owner);
    free(t);
}

int tt_tensor_alive(const tt_tensor *t)
{
    return t && !t->dead && tt_session_active() && t->session == tt_current_session();
}

int64_t tt_tensor_ntiles(const tt_tensor *t) { return t ? t->ntiles : 0; }

int tt_tensor_owners(const tt_tensor *t, int *out, int64_t n)
{
    if (!t || !out)
        return tt_error(TT_EINVAL, "tensor_owners: %s is NULL", t ? "out" : "tensor");
    if (n != t->ntiles)
        return tt_error(TT_EINVAL, "tensor_owners: room for %lld owners, the tensor has %lld tiles", (long long)n,
                        (long long)t->ntiles);
    memcpy(out, t->owner, sizeof(int) * (size_t)n);
    return TT_OK;
}

int tt_tensor_migrate(tt_tensor *t, const int *owners)
{
    int rc = tt_check_readable(t, "tensor migrate");
    if (rc)
        return rc;
    if (!owners)
        return tt_error(TT_EINVAL, "tensor migrate: owners is NULL");
    int size = tt_mpi_size();
    for (int64_t i = 0; i < t->ntiles; i++)
        if (owners[i] < 0 || owners[i] >= size)
            return tt_error(TT_EINVAL, "tensor migrate: tile %lld's owner rank %d is outside [0, %d)", (long long)i,
                            owners[i], size);
    if (!tt_mpi_on)
        return TT_OK; /* one process: every tile is local */
    tt_ensure_running();
    for (int64_t i = 0; i < t->ntiles; i++) {
        if (tt_tile_owner(t, i) == owners[i])
            continue;
        tt_mpi_migrate(tt_tile_handle(t, i), owners[i]); /* both ranks take part in the move */
        int64_t b = (int64_t)starpu_data_get_size(tt_tile_handle(t, i));
        tt_memory_charge_tile(t->owner[i], -b);
        tt_memory_charge_tile(owners[i], b);
        t->owner[i] = owners[i];
    }
    return TT_OK;
}

/* Copy an N-d block between a strided buffer and a contiguous tile.
 * `strides` are the strided side's byte strides, `shape` the block shape. */
static void copy_block(char *strided, const int64_t *strides, char *tile, const int64_t *shape, int ndim,
                       size_t es, int to_tile)
{
    if (ndim == 0) {
        if (to_tile)
            memcpy(tile, strided, es);
        else
            memcpy(strided, tile, es);
        return;
    }
    int64_t inner = 1;
    for (int d = 1; d < ndim; d++)
        inner *= shape[d];
    if (ndim == 1) {
        if (strides[0] == (int64_t)es) {
            if (to_tile)
                memcpy(tile, strided, shape[0] * es);
            else
                memcpy(strided, tile, shape[0] * es);
        } else {
            for (int64_t i = 0; i < shape[0]; i++) {
                if (to_tile)
                    memcpy(tile + i * es, strided + i * strides[0], es);
                else
                    memcpy(strided + i * strides[0], tile + i * es, es);
            }
        }
        return;
    }
    for (int64_t i = 0; i < shape[0]; i++)
        copy_block(strided + i * strides[0], strides + 1, tile + i * inner * es, shape + 1, ndim - 1, es,
                   to_tile);
}

/* Under MPI both directions are collective (every rank calls them at the same point of the
 * task flow): a write stores only the tiles this rank owns (every rank passes the same
 * source; a rank that owns none of the tiles may pass base NULL) after dropping the copies
 * other ranks cached; a read with root < 0 brings every tile to every rank, so every rank
 * gets the full value; a read with root >= 0 brings the tiles only to rank root (their
 * owners send them and wait until they are sent), which copies them into `base` and drops
 * the received copies again -- every rank that knows such a tile flushes it -- so that
 * streaming a tensor through root holds one block there, not the tensor, and an owner pins
 * one block's tiles at a time (the other ranks pass base NULL).  Only the tiles
 * of tile rows [lo, hi) along axis 0 are copied; `base` holds those rows (row lo * tile[0]
 * at `base`). */
static int transfer(tt_tensor *t, int64_t lo, int64_t hi, char *base, const int64_t *strides, int to_tile,
                    int root)
{
    tt_ensure_running();
    int64_t idx[TT_MAX_NDIM], tshape[TT_MAX_NDIM];
    int me = tt_mpi_rank();
    int64_t inner = t->ndim ? t->ntiles / t->grid[0] : 1; /* tiles per tile row (row-major) */
    int64_t first = lo * inner, last = hi * inner;
    int to_root = tt_mpi_on && !to_tile && root >= 0;
    if (tt_mpi_on && tt_mpi_stream()) /* the other ranks are not at this point of the flow */
        for (int64_t i = first; i < last; i++)
            if (!to_tile || tt_tile_owner(t, i) != me)
                return tt_error(TT_EINVAL, "tensor %s: a collective %s while one replica's shard is submitted on "
                                "its rank only (parallel.shard_backward); read tensors after it returns",
                                to_tile ? "write" : "read", to_tile ? "write of another rank's tile" : "read");
    if (tt_mpi_on) {
        for (int64_t i = first; i < last; i++) {
            if (tt_tile_state_at(t, i) == TT_TILE_LAZY && (to_tile || (to_root && me != root)))
                continue; /* another rank's tile this rank never received: no copy to drop or send */
            starpu_data_handle_t h = tt_tile_handle(t, i);
            if (to_tile)
                tt_mpi_flush(h);
            else if (to_root)
                tt_mpi_fetch_on(h, root); /* its owner sends it, root receives it */
            else
                tt_mpi_fetch_everywhere(h); /* collective read: every rank gets it */
        }
    }
    /* a read blocks: the tiles freed before it become reusable meanwhile (csrc/tile.c) */
    int64_t reaper_ticket = to_tile ? -1 : tt_reaper_nudge();
    for (int64_t i = first; i < last; i++) {
        if (tt_mpi_on && to_tile && t->owner[i] != me)
            continue;
        if (to_root && me != root)
            break;
        if (!base)
            return tt_error(TT_EINVAL, "tensor %s: no buffer for tile %lld, which this rank %s",
                            to_tile ? "write" : "read", (long long)i, to_tile ? "owns" : "reads");
        tt_tile_index(t, i, idx);
        tt_tile_shape(t, idx, tshape);
        char *origin = base;
        for (int d = 0; d < t->ndim; d++)
            origin += (idx[d] - (d == 0 ? lo : 0)) * t->tile[d] * strides[d];
        starpu_data_handle_t h = tt_tile_handle(t, i);
        int rc = tt_mpi_on ? tt_mpi_acquire(h, to_tile ? STARPU_W : STARPU_R) : TT_OK;
        if (rc)
            return rc;
        int ret = tt_mpi_on ? 0 : starpu_data_acquire(h, to_tile ? STARPU_W : STARPU_R);
        if (ret != 0)
            return tt_error(TT_ESTARPU, "starpu_data_acquire failed on tile %lld (%d)", (long long)i, ret);
        char *ptr = (char *)starpu_data_get_local_ptr(h);
        copy_block(origin, strides, ptr, tshape, t->ndim, t->elemsize, to_tile);
        starpu_data_release(h);
    }
    tt_reaper_settle(reaper_ticket);
    if (to_root && me != root) { /* one block in flight: its sends are done before the next is read */
        int rc = tt_mpi_sends_wait();
        if (rc)
            return rc;
    }
    if (to_root) /* root's received copies go (and so do the caches' records of them, on every rank) */
        for (int64_t i = first; i < last; i++)
            if (t->owner[i] != root && tt_tile_state_at(t, i) != TT_TILE_LAZY)
                tt_mpi_drop_fetched(tt_tile_handle(t, i));
    return TT_OK;
}

static int check_rows(const tt_tensor *t, int64_t lo, int64_t hi, const char *what)
{
    int64_t rows = t->ndim ? t->grid[0] : 1;
    if (lo < 0 || hi <= lo || hi > rows)
        return tt_error(TT_EINVAL, "%s: tile rows [%lld, %lld) outside [0, %lld)", what, (long long)lo,
                        (long long)hi, (long long)rows);
    return TT_OK;
}

int tt_tensor_write_rows(tt_tensor *t, int64_t lo, int64_t hi, const void *src, const int64_t *strides)
{
    int rc = tt_check_tensor(t, "tensor write");
    if (rc || (rc = check_rows(t, lo, hi, "tensor write")))
        return rc;
    if ((!src && !tt_mpi_on) || (src && !strides)) /* (MPI: NULL when this rank owns none of the tiles) */
        return tt_error(TT_EINVAL, "tensor write: source buffer or strides is NULL");
    if ((rc = tt_gate_enter("tensor write")) != TT_OK)
        return rc;
    rc = transfer(t, lo, hi, (char *)src, strides, 1, -1);
    tt_gate_leave();
    if (rc == TT_OK)
        t->written = 1; /* a row-wise writer (checkpoint load, initialisation) writes every row */
    return rc;
}

int tt_tensor_write(tt_tensor *t, const void *src, const int64_t *strides)
{
    int rc = tt_check_tensor(t, "tensor write");
    if (rc)
        return rc;
    return tt_tensor_write_rows(t, 0, t->ndim ? t->grid[0] : 1, src, strides);
}

int tt_tensor_read_rows(tt_tensor *t, int64_t lo, int64_t hi, void *dst)
{
    return tt_tensor_read_rows_on(t, lo, hi, dst, -1);
}

int tt_tensor_read_rows_on(tt_tensor *t, int64_t lo, int64_t hi, void *dst, int root)
{
    int rc = tt_check_readable(t, "tensor read");
    if (rc || (rc = check_rows(t, lo, hi, "tensor read")))
        return rc;
    if (root >= tt_mpi_size())
        return tt_error(TT_EINVAL, "tensor read: rank %d does not exist (world size %d)", root, tt_mpi_size());
    if (!dst && (root < 0 || root == tt_mpi_rank()))
        return tt_error(TT_EINVAL, "tensor read: destination buffer is NULL");
    int64_t strides[TT_MAX_NDIM];
    int64_t s = (int64_t)t->elemsize;
    for (int d = t->ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= t->shape[d];
    }
    if ((rc = tt_gate_enter("tensor read")) != TT_OK)
        return rc;
    rc = transfer(t, lo, hi, (char *)dst, strides, 0, root);
    tt_gate_leave();
    return rc;
}

int tt_tensor_read(tt_tensor *t, void *dst)
{
    int rc = tt_check_readable(t, "tensor read");
    if (rc)
        return rc;
    return tt_tensor_read_rows(t, 0, t->ndim ? t->grid[0] : 1, dst);
}

/* Hint that t's tiles are done for now (e.g. optimizer state after its update): under a memory
 * limit StarPU evicts them first (to the disk node).  Ordered after the tasks already
 * submitted on each tile; another rank's tiles are skipped. */
int tt_tensor_wont_use(tt_tensor *t)
{
    int rc = tt_check_readable(t, "tensor wont_use");
    if (rc)
        return rc;
    if ((rc = tt_gate_enter("tensor wont_use")) != TT_OK)
        return rc;
    tt_ensure_running();
    for (int64_t i = 0; i < t->ntiles; i++)
        if (tt_tile_state_at(t, i) != TT_TILE_LAZY && (!tt_mpi_on || t->owner[i] == tt_mpi_rank()))
            starpu_data_wont_use(t->handles[i]);
    tt_gate_leave();
    return TT_OK;
}
