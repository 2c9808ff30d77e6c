/* A graph's GCN normalisation on the host (tiletrain/geometric/nn.py gcn_norm): PyG's
 * gcn_norm, source to target, in one pass over the edges in C.  Sampled GNN training
 * normalises a new subgraph every step on the submitting thread; in NumPy (masks,
 * concatenations, bincount, fancy indexing) that was a tenth of its time per step. */
#include <math.h>
#include <stdlib.h>

#include "tt_internal.h"

int tt_gcn_norm(int64_t n, int64_t e, const int64_t *src, const int64_t *dst, const double *w, double fill,
                int add_loops, int64_t *osrc, int64_t *odst, double *ow, int64_t *oe)
{
    if (n < 0 || e < 0)
        return tt_error(TT_EINVAL, "gcn_norm: negative size (%lld nodes, %lld edges)", (long long)n, (long long)e);
    for (int64_t i = 0; i < e; i++)
        if (src[i] < 0 || src[i] >= n || dst[i] < 0 || dst[i] >= n)
            return tt_error(TT_EINVAL, "gcn_norm: edge %lld (%lld -> %lld) is out of range for %lld nodes",
                            (long long)i, (long long)src[i], (long long)dst[i], (long long)n);
    double *deg = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!deg)
        return tt_error(TT_ENOMEM, "gcn_norm: no memory for %lld nodes", (long long)n);
    /* the edges that are not self-loops (all of them without add_loops), in order; then one
     * loop per node, weighted by the node's last loop if it had one, else fill (1 without
     * weights: PyG gives the added loops unit weight when no edge has one) */
    int64_t k = 0;
    for (int64_t i = 0; i < e; i++)
        if (!add_loops || src[i] != dst[i]) {
            osrc[k] = src[i];
            odst[k] = dst[i];
            ow[k++] = w ? w[i] : 1.0;
        }
    if (add_loops) {
        for (int64_t v = 0; v < n; v++) {
            osrc[k + v] = odst[k + v] = v;
            ow[k + v] = w ? fill : 1.0;
        }
        if (w)
            for (int64_t i = 0; i < e; i++)
                if (src[i] == dst[i])
                    ow[k + src[i]] = w[i];
        k += n;
    }
    for (int64_t j = 0; j < k; j++) /* degrees summed over the targets, in edge order */
        deg[odst[j]] += ow[j];
    for (int64_t v = 0; v < n; v++) {
        double d = pow(deg[v], -0.5);
        deg[v] = isinf(d) ? 0.0 : d;
    }
    for (int64_t j = 0; j < k; j++)
        ow[j] = deg[osrc[j]] * ow[j] * deg[odst[j]];
    free(deg);
    *oe = k;
    return TT_OK;
}
