"""C helpers the submitting thread runs on the host, no task (csrc/layout.c, csrc/graph.c):
counting sorts and one-pass loops over index arrays that NumPy needed several sorts, masks
and fancy indexings for.  Sampled GNN training lays out a new subgraph's adjacency every
step; these are its sparse layouts and its GCN normalisation."""
from __future__ import annotations

import numpy as np

from .._ffi import check, ffi, lib


def _i64(a: np.ndarray):
    return ffi.from_buffer("int64_t[]", a, require_writable=a.flags.writeable)


def _f64(a: np.ndarray):
    return ffi.from_buffer("double[]", a, require_writable=a.flags.writeable)


def coo_to_csr(row: np.ndarray, col: np.ndarray, nrows: int, ncols: int) -> tuple[np.ndarray, np.ndarray]:
    """(crow, perm): the row pointers (nrows + 1) of the entries (row[k], col[k]) and their
    order by row, then column, then input order (``np.lexsort((col, row))``)."""
    row, col = np.ascontiguousarray(row, np.int64), np.ascontiguousarray(col, np.int64)
    crow, perm = np.empty(int(nrows) + 1, np.int64), np.empty(len(row), np.int64)
    check(lib.tt_coo_to_csr(int(nrows), int(ncols), len(row), _i64(row), _i64(col), _i64(crow), _i64(perm)))
    return crow, perm


def csr_block_layout(crow: np.ndarray, col: np.ndarray, shape, blocks, grid):
    """A CSR matrix's layout in row blocks x column blocks: the entries per block, L (the
    largest count, at least 1), and perm, cols (nblocks, L) and rowptr (nblocks, rb + 1): each
    block's entries by row, then in CSR order (their CSR positions, their columns within the
    block, each block's row pointers)."""
    (N, M), (rb, cb), g = shape, blocks, grid[0] * grid[1]
    crow, col = np.ascontiguousarray(crow, np.int64), np.ascontiguousarray(col, np.int64)
    if len(crow) != N + 1:
        raise ValueError(f"sparse layout: {len(crow)} crow_indices for {N} rows (want {N + 1})")
    counts = np.empty(g, np.int64)
    check(lib.tt_csr_block_counts(N, M, len(col), _i64(crow), _i64(col), rb, cb, _i64(counts)))
    layout = _block_arrays(counts, rb)
    _, L, perm, cols, rowptr = layout
    check(lib.tt_csr_block_layout(N, M, len(col), _i64(crow), _i64(col), rb, cb, L, _i64(perm), _i64(cols),
                                  _i64(rowptr)))
    return layout


def _block_arrays(counts: np.ndarray, rb: int):
    """(counts, L, perm, cols, rowptr) for a layout's C call to fill: L the largest count (at
    least 1), perm and cols (nblocks, L), rowptr (nblocks, rb + 1)."""
    g, L = len(counts), max(1, int(counts.max()))
    return counts, L, np.empty((g, L), np.int64), np.empty((g, L), np.int64), np.empty((g, rb + 1), np.int64)


def coo_block_layout(row: np.ndarray, col: np.ndarray, values: np.ndarray | None, shape, blocks, grid,
                     dtype=np.float64):
    """A COO list (row[k], col[k], values[k]) as the CSR matrix ``coo_to_csr`` orders and its
    blocked layout in two C calls: (crow, ccol, cvalues, layout, bv) -- ccol and cvalues
    (float64) in CSR order, layout what ``csr_block_layout`` gives for that CSR matrix, bv the
    (nblocks, L) blocked values in ``dtype`` (float32 or float64); cvalues and bv None
    without values."""
    (N, M), (rb, cb), g = shape, blocks, grid[0] * grid[1]
    row, col = np.ascontiguousarray(row, np.int64), np.ascontiguousarray(col, np.int64)
    nnz = len(row)
    if len(col) != nnz or (values is not None and len(values) != nnz):
        raise ValueError(f"sparse layout: {nnz} rows, {len(col)} columns and "
                         f"{nnz if values is None else len(values)} values: one each per entry")
    dtype = np.dtype(dtype)
    if values is not None and dtype not in (np.float32, np.float64):
        raise TypeError(f"sparse layout: blocked values must be float32 or float64, got {dtype}")
    counts = np.empty(g, np.int64)
    check(lib.tt_coo_block_counts(N, M, nnz, _i64(row), _i64(col), rb, cb, _i64(counts)))
    layout = _block_arrays(counts, rb)
    _, L, perm, cols, rowptr = layout
    crow, ccol, cperm = np.empty(N + 1, np.int64), np.empty(nnz, np.int64), np.empty(nnz, np.int64)
    v = cvalues = bv = None
    if values is not None:
        v = np.ascontiguousarray(values, np.float64)
        cvalues, bv = np.empty(nnz, np.float64), np.empty((g, L), dtype)
    check(lib.tt_coo_block_layout(N, M, nnz, _i64(row), _i64(col), ffi.NULL if v is None else _f64(v),
                                  dtype.itemsize, rb, cb, L, _i64(crow), _i64(ccol), _i64(cperm),
                                  ffi.NULL if v is None else _f64(cvalues), _i64(perm), _i64(cols), _i64(rowptr),
                                  ffi.NULL if bv is None else ffi.from_buffer(bv)))
    return crow, ccol, cvalues, layout, bv


def gcn_norm(src: np.ndarray, dst: np.ndarray, num_nodes: int, weight: np.ndarray | None, fill: float,
             add_loops: bool) -> tuple[np.ndarray, np.ndarray]:
    """PyG's gcn_norm of the edges src -> dst (csrc/graph.c): the (2, E') edge list (with
    add_loops the non-loop edges, then a loop per node) and its float64 values."""
    src, dst = np.ascontiguousarray(src, np.int64), np.ascontiguousarray(dst, np.int64)
    E, N = len(src), int(num_nodes)
    w = None if weight is None else np.ascontiguousarray(weight, np.float64)
    room = E + (N if add_loops else 0)
    out, ow, k = np.empty((2, room), np.int64), np.empty(room, np.float64), ffi.new("int64_t *")
    check(lib.tt_gcn_norm(N, E, _i64(src), _i64(dst), ffi.NULL if w is None else _f64(w), float(fill),
                          int(bool(add_loops)), _i64(out[0]), _i64(out[1]), _f64(ow), k))
    return out[:, :k[0]], ow[:k[0]]
