"""The kernel registry: one KernelInfo per line of csrc/kernels.def, read once, at import,
from the kernel table that csrc/gen_kernels.py generates into the C library.

It belongs to the kernel-call layer (tiletrain/runtime/kernels.py looks kernels up here by
name) and sits with the runtime so that everything that needs to know the kernels reads
this one table: device placement (runtime/hetero.py), task records (trace/), the NumPy
references and device cases (tiletrain/testing/)."""
from __future__ import annotations

from dataclasses import dataclass

from .._ffi import cstr, lib

# worker kinds and their TT_WHERE_* bits
KINDS = {"cpu": 1, "cuda": 2, "opencl": 4}


@dataclass(frozen=True)
class KernelInfo:
    """One kernel of csrc/kernels.def as the library was built."""
    id: int                  # TT_K_<NAME>
    name: str
    args: str                # its argument struct, "tt_args_<name> *" (cffi type)
    nbuffers: int
    is_map: bool             # an element-wise map (first integer argument n)
    dtypes: int              # bit (1 << TT_<DTYPE>) for every element type it takes
    acc_buffers: int         # bit i: buffer i is a float32 accumulator for float16/bfloat16 tasks
    bool_buffers: int        # bit i: buffer i holds bool whatever the task's dtype
    impls: frozenset         # worker kinds with an implementation compiled in ("cpu", "opencl", "cuda")
    cuda_func: bool          # its codelet has a CUDA function linked in

    def takes(self, dtype_code: int) -> bool:
        """Whether the kernel takes tiles of this dtype (a TT_<DTYPE> code)."""
        return bool(self.dtypes >> dtype_code & 1)


def _read() -> dict[str, KernelInfo]:
    out = {}
    for k in range(lib.tt_kernel_count()):
        name, impls = cstr(lib.tt_kernel_name(k)), lib.tt_kernel_impls(k)
        out[name] = KernelInfo(k, name, f"tt_args_{name} *", lib.tt_kernel_nbuffers(k), bool(lib.tt_kernel_is_map(k)),
                               lib.tt_kernel_dtypes(k), lib.tt_kernel_acc_buffers(k), lib.tt_kernel_bool_buffers(k),
                               frozenset(kind for kind, bit in KINDS.items() if impls & bit),
                               bool(lib.tt_kernel_cuda_func(k)))
    return out


#: name -> KernelInfo, in table order
KERNELS: dict[str, KernelInfo] = _read()
#: KernelInfo by kernel id
BY_ID: tuple[KernelInfo, ...] = tuple(KERNELS.values())


def kernel_info(name: str) -> KernelInfo:
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r} (csrc/kernels.def has no such line)") from None


def kernel_names() -> list[str]:
    """Every kernel of csrc/kernels.def, in table order."""
    return list(KERNELS)


def kernel_id(name: str) -> int:
    return kernel_info(name).id


__all__ = ["BY_ID", "KERNELS", "KINDS", "KernelInfo", "kernel_id", "kernel_info", "kernel_names"]
