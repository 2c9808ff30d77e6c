"""cupy interop: a tiled tensor to and from a cupy array on the GPU, tile by tile, with
each tile acquired on the GPU's StarPU memory node (no round trip through host memory).

Needs cupy, an NVIDIA GPU and a runtime with a CUDA worker on cupy's current device
(StarPU built with CUDA: scripts/build-starpu.sh; ``tiletrain.init(ncuda=1)``)."""
from __future__ import annotations

from .._ffi import check, ffi, lib
from .tensor import Tensor, as_dtype, bfloat16
from .traits import TensorTraits


def _cupy():
    try:
        import cupy
    except ImportError:
        raise ImportError(
            "to_cupy()/from_cupy() need cupy, which is not installed: `pip install cupy-cuda12x` (or "
            "cupy-cuda13x, matching the CUDA driver), on a machine with an NVIDIA GPU") from None
    return cupy


def _gpu_node(cp) -> tuple[int, int]:
    """(cupy's current device, its StarPU memory node)"""
    try:
        ndev = cp.cuda.runtime.getDeviceCount()
        dev = cp.cuda.runtime.getDevice()
    except Exception as exc:  # cupy raises CUDARuntimeError without a driver or a GPU
        raise RuntimeError(f"to_cupy()/from_cupy() need an NVIDIA GPU, and CUDA reports none usable: {exc}") from None
    if ndev < 1:
        raise RuntimeError("to_cupy()/from_cupy() need an NVIDIA GPU, and CUDA reports none")
    return dev, check(lib.tt_cuda_memory_node(dev))


def _slices(traits: TensorTraits, idx) -> tuple[slice, ...]:
    return tuple(slice(o, o + s) for o, s in zip(traits.tile_offset(idx), traits.tile_shape_at(idx)))


def _tile_view(cp, ptr, nbytes: int, shape, dtype, dev: int):
    mem = cp.cuda.UnownedMemory(int(ffi.cast("uintptr_t", ptr)), nbytes, None, dev)
    return cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(mem, 0))


def to_cupy(t: Tensor):
    """A new cupy array (C-contiguous, on cupy's current device) with the tensor's values."""
    ptr_ = t._handle("to_cupy()")
    if t.dtype == bfloat16:
        raise TypeError("to_cupy: cupy has no bfloat16 arrays; convert first, e.g. x.astype('float32')")
    cp = _cupy()
    dev, node = _gpu_node(cp)
    out = cp.empty(t.shape, dtype=t.dtype)
    ptr, nbytes = ffi.new("void **"), ffi.new("int64_t *")
    stream = cp.cuda.get_current_stream()
    for i, idx in enumerate(t.traits.tile_indices()):
        check(lib.tt_tile_acquire_on_node(ptr_, i, node, 0, ptr, nbytes))
        try:
            tile = _tile_view(cp, ptr[0], nbytes[0], t.traits.tile_shape_at(idx), t.dtype, dev)
            out[_slices(t.traits, idx)] = tile
            stream.synchronize()  # the copy must finish before StarPU may move or free the tile
        finally:
            check(lib.tt_tile_release_on_node(ptr_, i, node))
    return out


def from_cupy(array, tiles=None) -> Tensor:
    """A new tiled tensor holding a cupy array's values; the tiles start on the GPU node."""
    cp = _cupy()
    if not isinstance(array, cp.ndarray):
        raise TypeError(f"from_cupy expects a cupy.ndarray, got {type(array).__name__}")
    dtype = as_dtype(array.dtype)
    dev, node = _gpu_node(cp)
    if array.device.id != dev:
        raise ValueError(f"from_cupy: the array is on GPU {array.device.id}, cupy's current device is {dev}")
    t = Tensor(TensorTraits(array.shape, tiles if array.ndim else None), dtype)  # written at once
    ptr, nbytes = ffi.new("void **"), ffi.new("int64_t *")
    stream = cp.cuda.get_current_stream()
    for i, idx in enumerate(t.traits.tile_indices()):
        check(lib.tt_tile_acquire_on_node(t._ptr, i, node, 1, ptr, nbytes))
        try:
            tile = _tile_view(cp, ptr[0], nbytes[0], t.traits.tile_shape_at(idx), dtype, dev)
            tile[...] = array[_slices(t.traits, idx)]
            stream.synchronize()
        finally:
            check(lib.tt_tile_release_on_node(t._ptr, i, node))
    return t


__all__ = ["to_cupy", "from_cupy"]
