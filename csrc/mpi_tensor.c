/* StarPU-MPI glue at the level of tensors: another replica's tensor named by its tags
 * (tt_tensor_shadow, data-parallel submission of one's own replica), whether a tensor was made
 * in a replica's tag stream, and a tensor's tiles sent ahead to other ranks (tt_tensor_push).
 * Above csrc/tensor.c (it makes tensors); the handle-level glue is csrc/mpi.c, below csrc/tile.c.
 * Built without MPI, shadows are refused and the rest does nothing. */
#include <stdlib.h>

#include "tt_internal.h"

#ifdef TT_HAVE_MPI
#include <starpu_mpi.h>

static int64_t tile_tag(tt_tensor *t, int64_t i)
{
    if (tt_tile_state_at(t, i) == TT_TILE_DEFERRED)
        return -1; /* not placed yet: no tag */
    return tt_mpi_slot_tag(t->handles[i]);
}

int tt_tensor_shadow(tt_tensor *src, int64_t stream_delta, int owner, tt_tensor **out)
{
    if (!out)
        return tt_error(TT_EINVAL, "tensor shadow: out is NULL");
    *out = NULL;
    if (!tt_mpi_on || owner == tt_world_rank || owner < 0 || owner >= tt_world_size)
        return tt_error(TT_EINVAL, "tensor shadow: owner rank %d must be another rank of the MPI session", owner);
    for (int64_t i = 0; i < src->ntiles; i++)
        if ((tile_tag(src, i) >> TT_TAG_STREAM_SHIFT) <= 0)
            return tt_error(TT_EINVAL, "tensor shadow: tile %lld of the source %s", (long long)i,
                            tile_tag(src, i) < 0 ? "has no tag yet (never written)"
                                                 : "was not made in a replica's stream (tt_mpi_in_stream)");
    int *owners = malloc(sizeof(int) * (size_t)(src->ntiles ? src->ntiles : 1));
    if (!owners)
        return tt_error(TT_ENOMEM, "tensor shadow: out of memory");
    for (int64_t i = 0; i < src->ntiles; i++)
        owners[i] = owner;
    tt_tensor *dst;
    int rc = tt_tensor_new_owned(src->ndim, src->shape, src->tile, src->dtype, owners, &dst);
    free(owners);
    if (rc)
        return rc;
    for (int64_t i = 0; i < src->ntiles; i++) {
        if (tt_tile_state_at(dst, i) != TT_TILE_LAZY) { /* out of memory for the lazy record: registered at once */
            tt_tensor_free(dst);
            return tt_error(TT_ENOMEM, "tensor shadow: out of memory");
        }
        tt_mpi_lazy_set_tag(dst->handles[i], tile_tag(src, i) + (stream_delta << TT_TAG_STREAM_SHIFT));
    }
    dst->written = src->written; /* the other replica wrote it as this rank wrote src */
    *out = dst;
    return TT_OK;
}

int tt_mpi_in_stream(tt_tensor *t, int stream)
{
    if (!tt_mpi_on || stream <= 0)
        return 0;
    for (int64_t i = 0; i < t->ntiles; i++)
        if ((tile_tag(t, i) >> TT_TAG_STREAM_SHIFT) != stream)
            return 0;
    return 1;
}

int tt_tensor_push(tt_tensor *t, const int *nodes, int n)
{
    if (!tt_mpi_on)
        return TT_OK;
    tt_ensure_running();
    for (int64_t i = 0; i < t->ntiles; i++) {
        int owner = tt_tile_owner(t, i);
        for (int k = 0; k < n; k++) {
            int r = nodes[k];
            if (r == owner || (tt_world_rank != owner && tt_world_rank != r))
                continue;
            if (r < 0 || r >= tt_world_size)
                return tt_error(TT_EINVAL, "tensor push: rank %d outside [0, %d)", r, tt_world_size);
            /* with the cache on, a tile the node holds already is neither sent nor received */
            starpu_mpi_get_data_on_node_detached(MPI_COMM_WORLD, tt_tile_handle(t, i), r, NULL, NULL);
        }
    }
    return TT_OK;
}

#else /* no StarPU-MPI in this build */

int tt_tensor_shadow(tt_tensor *src, int64_t stream_delta, int owner, tt_tensor **out)
{
    (void)src; (void)stream_delta; (void)owner;
    if (out)
        *out = NULL;
    return tt_error(TT_EINVAL, "tensor shadow: this build has no StarPU-MPI");
}
int tt_tensor_push(tt_tensor *t, const int *nodes, int n) { (void)t; (void)nodes; (void)n; return TT_OK; }
int tt_mpi_in_stream(tt_tensor *t, int stream) { (void)t; (void)stream; return 0; }

#endif
