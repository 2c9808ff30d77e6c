/* GraphSAINT subgraph samplers (kernels.def, saint_sample): plain loops over a CSR graph by
 * source.  Random numbers: splitmix64 of (seed, step, draw index), so a sample depends on its
 * seed and step only.  The edge sampler draws GraphSAINT's edge probabilities,
 * p_e proportional to 1/deg(u) + 1/deg(v) (out-degrees), by rejection from uniform edges.
 * The sampled nodes are sorted and deduplicated, and the induced edges found by looking each
 * neighbour up, in a bitmap of the graph's nodes with per-word ranks (node_bitmap), or for a
 * graph much larger than the sample in a hash table of the sampled nodes (open addressing,
 * at most half full: O(m) memory whatever the graph's size; a binary search per neighbour
 * cost ~7x more in branch mispredictions on a 100k-node graph). */
#include <stdlib.h>
#include "tt_cpu.h"

static inline uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* a uniform integer in [0, n) from draw i of stream (seed, step) */
static inline int64_t draw(uint64_t key, uint64_t i, int64_t n)
{
    return n > 0 ? (int64_t)(mix64(key ^ mix64(i)) % (uint64_t)n) : 0;
}

/* the node whose CSR range holds edge position p: the last u with rowptr[u] <= p */
static int64_t owner_of(const int64_t *rowptr, int64_t n, int64_t p)
{
    int64_t lo = 0, hi = n; /* rowptr[lo] <= p < rowptr[hi] */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (rowptr[mid] <= p)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* out-degree from the CSR, at least 1 (a node that is only a target counts as degree 1) */
static inline int64_t degree(const int64_t *rowptr, int64_t u)
{
    int64_t d = rowptr[u + 1] - rowptr[u];
    return d > 0 ? d : 1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* the sampled nodes' positions by node id: slots of (id + 1, position), 0 = empty */
typedef struct {
    int64_t *slot;
    uint64_t mask;
} node_table;

static inline uint64_t slot_of(int64_t v, uint64_t mask)
{
    return ((uint64_t)v * 0x9e3779b97f4a7c15ULL >> 17) & mask;
}

static int table_init(node_table *t, const int64_t *nodes, int64_t m)
{
    uint64_t size = 16;
    while (size < 2 * (uint64_t)m)
        size <<= 1;
    t->slot = calloc(2 * size, sizeof(int64_t));
    if (!t->slot)
        return -1;
    t->mask = size - 1;
    for (int64_t i = 0; i < m; i++) {
        uint64_t h = slot_of(nodes[i], t->mask);
        while (t->slot[2 * h])
            h = (h + 1) & t->mask;
        t->slot[2 * h] = nodes[i] + 1;
        t->slot[2 * h + 1] = i;
    }
    return 0;
}

/* the position of node v among the sampled nodes, or -1 */
static inline int64_t find(const node_table *t, int64_t v)
{
    for (uint64_t h = slot_of(v, t->mask);; h = (h + 1) & t->mask) {
        int64_t k = t->slot[2 * h];
        if (k == v + 1)
            return t->slot[2 * h + 1];
        if (k == 0)
            return -1;
    }
}

/* The sampled nodes as a bitmap over the graph's n nodes, with the count of sampled nodes
 * before each 64-node word: membership and position in a few instructions from n / 4 bytes
 * (kept in cache for graphs up to millions of nodes), where the hash table's probes missed
 * the cache (most of the sampler's time on a 100k-node graph).  Used when n is at most
 * BITMAP_RATIO x the drawn nodes; larger graphs keep the hash table (memory O(drawn)). */
#define BITMAP_RATIO 512
typedef struct {
    uint64_t *bits;
    int64_t *rank;
} node_bitmap;

/* marks nodes[0..c) and rewrites nodes[] as the sorted distinct ones; returns their count, or
 * -1 out of memory */
static int64_t bitmap_init(node_bitmap *b, int64_t n, int64_t *nodes, int64_t c)
{
    int64_t words = (n + 63) / 64;
    b->bits = calloc((size_t)(words > 0 ? words : 1), sizeof(uint64_t));
    b->rank = malloc((size_t)(words > 0 ? words : 1) * sizeof(int64_t));
    if (!b->bits || !b->rank) {
        free(b->bits);
        free(b->rank);
        return -1;
    }
    for (int64_t i = 0; i < c; i++)
        b->bits[nodes[i] >> 6] |= 1ULL << (nodes[i] & 63);
    int64_t m = 0;
    for (int64_t w = 0; w < words; w++) {
        b->rank[w] = m;
        for (uint64_t bits = b->bits[w]; bits; bits &= bits - 1)
            nodes[m++] = w * 64 + __builtin_ctzll(bits);
    }
    return m;
}

static inline int64_t bitmap_find(const node_bitmap *b, int64_t v)
{
    uint64_t word = b->bits[v >> 6], bit = 1ULL << (v & 63);
    return word & bit ? b->rank[v >> 6] + __builtin_popcountll(word & (bit - 1)) : -1;
}

/* the induced edges' count (write 0) or the edges themselves (write 1: (source position,
 * target position, edge id) into src, dst, eid), in the order of the nodes and their CSR */
#define INDUCED(FIND)                                                                              \
    for (int64_t i = 0; i < m; i++)                                                                \
        for (int64_t p = rowptr[nodes[i]]; p < rowptr[nodes[i] + 1]; p++) {                         \
            int64_t j = FIND;                                                                      \
            if (j >= 0) {                                                                          \
                if (write) {                                                                       \
                    src[k] = i;                                                                    \
                    dst[k] = j;                                                                    \
                    eid[k] = p;                                                                    \
                }                                                                                  \
                k++;                                                                               \
            }                                                                                      \
        }

static int64_t induced(const int64_t *rowptr, const int64_t *col, const int64_t *nodes, int64_t m,
                       const node_bitmap *b, const node_table *t, int write, int64_t *src, int64_t *dst,
                       int64_t *eid)
{
    int64_t k = 0;
    if (b->bits) {
        INDUCED(bitmap_find(b, col[p]))
    } else {
        INDUCED(find(t, col[p]))
    }
    return k;
}

void tt_cpu_saint_sample(const tt_args_saint_sample *a, const void *rowptr_, const void *col_, void *out_)
{
    const int64_t *rowptr = rowptr_, *col = col_;
    int64_t *out = out_;
    const int64_t n = a->n, e = a->e, roots = a->roots, length = a->length, cap = a->cap;
    const uint64_t key = mix64((uint64_t)a->seed * 0x2545f4914f6cdd1dULL ^ mix64((uint64_t)a->step));
    if (cap < 2)
        return;
    int64_t per = a->kind == 2 ? length + 1 : a->kind == 1 ? 2 : 1;
    int64_t total = roots * per;
    int64_t *nodes = malloc((size_t)(total > 0 ? total : 1) * sizeof(int64_t));
    if (!nodes) {
        out[0] = 0;
        out[1] = -2; /* out of memory (the reader raises) */
        return;
    }
    int64_t c = 0;
    uint64_t tries = 0; /* the edge sampler's draws: two per try, numbered across the sample */
    for (int64_t r = 0; r < roots; r++) {
        if (a->kind == 0) { /* a node, with probability degree / e */
            nodes[c++] = e > 0 ? owner_of(rowptr, n, draw(key, (uint64_t)r, e)) : draw(key, (uint64_t)r, n);
        } else if (a->kind == 1) { /* an edge (u, v) with p_e ~ 1/deg(u) + 1/deg(v): both of its ends */
            if (e == 0)
                break;
            int64_t p, u;
            for (;;) { /* rejection from uniform edges: accept with probability w_e / 2 (w_e <= 2) */
                p = draw(key, 2 * tries, e);
                u = owner_of(rowptr, n, p);
                double w = 1.0 / (double)degree(rowptr, u) + 1.0 / (double)degree(rowptr, col[p]);
                double q = (double)(mix64(key ^ mix64(2 * tries + 1)) >> 11) * 0x1.0p-53;
                tries++;
                if (2.0 * q < w)
                    break;
            }
            nodes[c++] = u;
            nodes[c++] = col[p];
        } else { /* a random walk from a uniform root */
            int64_t u = draw(key, (uint64_t)r * (uint64_t)(length + 1), n);
            nodes[c++] = u;
            for (int64_t s = 1; s <= length; s++) {
                int64_t d = rowptr[u + 1] - rowptr[u];
                if (d > 0)
                    u = col[rowptr[u] + draw(key, (uint64_t)r * (uint64_t)(length + 1) + (uint64_t)s, d)];
                nodes[c++] = u;
            }
        }
    }
    node_bitmap bitmap = {NULL, NULL};
    node_table table = {NULL, 0};
    int64_t m = 0;
    if (n <= BITMAP_RATIO * (c > 0 ? c : 1)) {
        m = bitmap_init(&bitmap, n, nodes, c); /* sorted, distinct */
        if (m < 0) {
            free(nodes);
            out[0] = 0;
            out[1] = -2; /* out of memory (the reader raises) */
            return;
        }
    } else {
        qsort(nodes, (size_t)c, sizeof(int64_t), cmp_i64);
        for (int64_t i = 0; i < c; i++)
            if (m == 0 || nodes[i] != nodes[m - 1])
                nodes[m++] = nodes[i];
    }
    out[0] = m;
    out[1] = -1;
    if (2 + m > cap)
        goto done;
    for (int64_t i = 0; i < m; i++)
        out[2 + i] = nodes[i];
    if (!bitmap.bits && table_init(&table, nodes, m)) {
        out[1] = -2; /* out of memory (the reader raises) */
        goto done;
    }
    /* induced edges: counted first, then written as (source pos, target pos, edge id) blocks */
    int64_t k = induced(rowptr, col, nodes, m, &bitmap, &table, 0, NULL, NULL, NULL);
    if (2 + m + 3 * k > cap)
        goto done;
    int64_t *src = out + 2 + m;
    induced(rowptr, col, nodes, m, &bitmap, &table, 1, src, src + k, src + 2 * k);
    out[1] = k;
done:
    free(bitmap.bits);
    free(bitmap.rank);
    free(table.slot);
    free(nodes);
}
