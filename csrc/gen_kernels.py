#!/usr/bin/env python3
"""Generate the C side of the kernel table (csrc/kernels.def).

Writes five files into OUTDIR:
  tt_kernels_args.h  kernel ids, argument structs and CPU body prototypes (no StarPU
                     types: kernel bodies and the cffi declarations include it)
  tt_kernels_dev.h   device launch geometry, CUDA body prototypes and (under
                     TT_CUDA_GENERIC_LAUNCHERS) the generic CUDA launchers: no StarPU
                     types, included by csrc/kernels/cuda/*.cu and csrc/opencl.c
  tt_kernels_gen.c   StarPU codelets (CPU, and OpenCL/CUDA where the table says so and
                     the build has them: TT_HAVE_OPENCL_KERNELS, TT_HAVE_CUDA_KERNELS; in the
                     simulation flavour, TT_SIMULATION, a CUDA function StarPU never calls
                     so that simulated CUDA workers run the kernels with a `cuda` column),
                     history-based perf models with a footprint per tile shape, FLOP
                     counts and the kernel registry
  tt_kernels_expr.c  CPU bodies tt_cpu_<name> of the kernels with an `expr` column
  tt_kernels_expr.cl their portable device bodies tt_<name>_<f32|f64|b8> (OpenCL C, also
                     compiled as CUDA; csrc/kernels/opencl/tiletrain.cl includes it)

Used by CMake at build time and imported by tiletrain/_build_ffi.py for the cffi cdef.
Usage: gen_kernels.py KERNELS_DEF OUTDIR
"""
from __future__ import annotations

import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

MODES = {"R": "STARPU_R", "W": "STARPU_W", "RW": "STARPU_RW"}
IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
# Integer arguments that expanders fill in themselves (their offsets go into the kernel table).
SPECIAL = ("n", "m", "k", "first", "tile", "koff")
# Device implementations a kernel may declare in the optional 6th column.  `cuda` gets a
# generated launcher around the portable device kernel tt_<name>_<f32|f64> (csrc/kernels/
# opencl/*.cl, compiled as CUDA by csrc/kernels/cuda/device_kernels.cu); `cuda:custom` means
# tt_cuda_<name> is written by hand (gemm through cuBLAS).
BACKENDS = ("opencl", "cuda")
# Launch geometry (optional 7th column; map kernels default to `items n`):
#   items E      E work-items, TT_DEV_LOCAL per group (one per element)
#   rows E       E groups of TT_DEV_LOCAL work-items (one group per row, reductions in local memory)
#   tiles R,C,Z  TT_DEV_TILE x TT_DEV_TILE groups over an R x C grid, Z along the third dimension
GEOMETRIES = {"items": 1, "rows": 2, "tiles": 3}

# Kernels whose run time is one of their arguments (the synthetic tasks of the pipeline
# experiments): their perf model returns that argument, in microseconds (STARPU_COMMON with a
# cost function), so the schedulers' predictions and a simulation time them exactly at any
# duration, where a history model knows only the durations it was calibrated at.
TIMED_BY_ARG = {"spin": "usec"}
# Element types (the optional `dtypes ...` column; default f32 f64).  f16/bf16 are storage
# types: CPU bodies compute in float32; their CUDA bodies are hand-written templates
# tt_<name>_half<H> (csrc/kernels/cuda/half_kernels.cuh) since the portable OpenCL sources
# have no half variant, so OpenCL workers never get a half task.
DTYPES = {"f32": "TT_F32", "f64": "TT_F64", "i64": "TT_I64", "f16": "TT_F16", "bf16": "TT_BF16", "b8": "TT_BOOL"}
HALF = ("f16", "bf16")
HALF_CUDA_TYPE = {"f16": "__half", "bf16": "__nv_bfloat16"}
DEFAULT_DTYPES = ["f32", "f64"]


@dataclass
class Kernel:
    name: str
    buffers: list[tuple[str, str]]  # (mode, name)
    ints: list[str]
    reals: list[str]
    flops: str
    impls: dict[str, str] = None   # backend -> "generic" | "custom"
    geom: tuple[str, list[str]] | None = None  # (kind, expressions)
    dtypes: list[str] = None       # keys of DTYPES
    acc: frozenset = frozenset()   # buffer names that are float32 accumulators for half dtypes
    bools: frozenset = frozenset() # buffer names that hold bool (uint8 0/1) whatever the dtype
    expr: list[tuple[str, str]] | None = None  # `expr` column: (lhs, rhs) statements
    cpu_f64: bool = False          # `cpu f64` column: the CPU body of an expr kernel computes in double
    flags: tuple = ()              # `flags` column: 0/1 integer args the CPU body runs one loop per value of

    @property
    def has_half(self) -> bool:
        return any(d in HALF for d in self.dtypes)

    def dtype_mask(self, exclude=()) -> str:
        return " | ".join(f"(1u << {DTYPES[d]})" for d in self.dtypes if d not in exclude) or "0u"

    @property
    def is_map(self) -> bool:
        return bool(self.ints) and self.ints[0] == "n"

    @property
    def is_span(self) -> bool:
        return self.ints[:3] == ["m", "k", "n"]


def parse(text: str) -> list[Kernel]:
    kernels: list[Kernel] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cols = [c.strip() for c in line.split("|")]
        dtypes = list(DEFAULT_DTYPES)
        tagged = [c for c in cols[5:] if c.split(" ", 1)[0] == "dtypes"]
        if len(tagged) > 1:
            raise SystemExit(f"kernels.def:{lineno}: more than one `dtypes` column")
        if tagged:
            cols.remove(tagged[0])
            dtypes = [d for d in re.split(r"[,\s]+", tagged[0])[1:] if d]
            bad = [d for d in dtypes if d not in DTYPES]
            if bad or not dtypes or len(set(dtypes)) != len(dtypes):
                raise SystemExit(f"kernels.def:{lineno}: bad dtypes column {tagged[0]!r} "
                                 f"(want `dtypes` and some of {', '.join(DTYPES)}, each once)")
        expr_cols = [c for c in cols[5:] if c.split(" ", 1)[0] == "expr"]
        if len(expr_cols) > 1:
            raise SystemExit(f"kernels.def:{lineno}: more than one `expr` column")
        if expr_cols:
            cols.remove(expr_cols[0])
        cpu_cols = [c for c in cols[5:] if c.split(" ", 1)[0] == "cpu"]
        if len(cpu_cols) > 1 or (cpu_cols and cpu_cols[0].split() != ["cpu", "f64"]):
            raise SystemExit(f"kernels.def:{lineno}: bad `cpu` column {cpu_cols!r} (want one `cpu f64`)")
        if cpu_cols:
            cols.remove(cpu_cols[0])
            if not expr_cols:
                raise SystemExit(f"kernels.def:{lineno}: `cpu f64` needs an `expr` column")
        flag_cols = [c for c in cols[5:] if c.split(" ", 1)[0] == "flags"]
        if len(flag_cols) > 1:
            raise SystemExit(f"kernels.def:{lineno}: more than one `flags` column")
        if flag_cols:
            cols.remove(flag_cols[0])
            if not expr_cols:
                raise SystemExit(f"kernels.def:{lineno}: `flags` needs an `expr` column")
        flags = tuple(f for f in re.split(r"[,\s]+", flag_cols[0])[1:] if f) if flag_cols else ()
        if not 5 <= len(cols) <= 7:
            raise SystemExit(f"kernels.def:{lineno}: expected 5 to 7 '|'-separated columns "
                             f"(besides `dtypes`, `expr`, `cpu` and `flags`), got {len(cols)}")
        name, bufs, ints, reals, flops = cols[:5]
        impls_col = cols[5] if len(cols) > 5 else ""
        geom_col = cols[6] if len(cols) > 6 else ""
        if not IDENT.match(name):
            raise SystemExit(f"kernels.def:{lineno}: bad kernel name {name!r}")
        buffers, acc, bools = [], set(), set()
        for b in bufs.split(","):
            parts = b.split()
            if not 2 <= len(parts) <= 3 or parts[0] not in MODES or not IDENT.match(parts[1]) \
                    or parts[2:] not in ([], ["acc"], ["bool"]):
                raise SystemExit(f"kernels.def:{lineno}: bad buffer {b.strip()!r} (want 'R|W|RW name [acc|bool]')")
            buffers.append((parts[0], parts[1]))
            if parts[2:] == ["acc"]:
                acc.add(parts[1])
            elif parts[2:] == ["bool"]:
                bools.add(parts[1])
        if acc and not any(d in HALF for d in dtypes):
            raise SystemExit(f"kernels.def:{lineno}: `acc` buffers need a half dtype (f16, bf16) in `dtypes`")
        if not 1 <= len(buffers) <= 8:
            raise SystemExit(f"kernels.def:{lineno}: 1..8 buffers per kernel")
        il = [a.strip() for a in ints.split(",") if a.strip()]
        rl = [a.strip() for a in reals.split(",") if a.strip()]
        for a in il + rl:
            if not IDENT.match(a) or a == "dtype":
                raise SystemExit(f"kernels.def:{lineno}: bad argument name {a!r}")
        if len(set(il + rl)) != len(il + rl):
            raise SystemExit(f"kernels.def:{lineno}: duplicate argument names")
        if name in {k.name for k in kernels}:
            raise SystemExit(f"kernels.def:{lineno}: kernel {name!r} defined twice")
        impls: dict[str, str] = {}
        for tok in re.split(r"[,\s]+", impls_col):
            if not tok:
                continue
            backend, _, how = tok.partition(":")
            if backend not in BACKENDS or how not in ("", "custom") or backend in impls:
                raise SystemExit(f"kernels.def:{lineno}: bad implementation {tok!r} "
                                 f"(want {', '.join(BACKENDS)}, optionally with ':custom')")
            impls[backend] = "custom" if how else "generic"
        geom = None
        if geom_col:
            kind, _, rest = geom_col.partition(" ")
            exprs = [e.strip() for e in rest.split(",") if e.strip()]
            if kind not in GEOMETRIES or len(exprs) != (3 if kind == "tiles" else 1):
                raise SystemExit(f"kernels.def:{lineno}: bad launch geometry {geom_col!r} "
                                 "(want 'items E', 'rows E' or 'tiles R, C, Z')")
            geom = (kind, exprs)
        elif il[:1] == ["n"]:
            geom = ("items", ["n"])
        if any(h == "generic" for h in impls.values()) and geom is None:
            raise SystemExit(f"kernels.def:{lineno}: {name} has device implementations but no launch geometry "
                             "(7th column: items E | rows E | tiles R, C, Z)")
        k = Kernel(name, buffers, il, rl, flops or "0", impls, geom, dtypes, frozenset(acc), frozenset(bools))
        if expr_cols:
            k.expr = parse_expr(k, expr_cols[0].partition(" ")[2], lineno)
            k.cpu_f64 = bool(cpu_cols)
            bad = [f for f in flags if f not in k.ints or f in SPECIAL]
            if flag_cols and (not flags or bad or len(set(flags)) != len(flags)):
                raise SystemExit(f"kernels.def:{lineno}: bad `flags` column {flag_cols!r} (integer args of the "
                                 f"line, each once, not one the expanders fill in)")
            k.flags = flags
        kernels.append(k)
    return kernels


# ---- `expr` kernels: element-wise bodies generated from one expression ----
# Element type and compute type per dtype (CPU bodies load with TT_LD, store with TT_ST).
EXPR_TYPES = {"f32": ("float", "float"), "f64": ("double", "double"), "f16": ("tt_f16", "float"),
              "bf16": ("tt_bf16", "float"), "b8": ("uint8_t", "int")}
DEV_TYPES = {"f32": ("float", "float"), "f64": ("double", "double"), "b8": ("tt_uchar", "int")}
STMT = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*=(?!=)\s*(.+?)\s*$", re.S)
# SUF(name) in an expression: a helper function named per dtype, name_f32 / name_f64 (defined for
# the CPU bodies in csrc/kernels/cpu/tt_cpu.h, for the device bodies in csrc/kernels/opencl/*.cl)
SUF = re.compile(r"\bSUF\(\s*([a-z_][a-z0-9_]*)\s*\)")
FLOAT_LIT = re.compile(r"(?<![\w.])(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\.\d+(?:[eE][-+]?\d+)?)")


def parse_expr(k: Kernel, text: str, lineno: int) -> list[tuple[str, str]]:
    """`expr out = ...; out2 = ...`: statements in the compute type over the elements of the
    R buffers, the integer args (int64) and the real args (cast to the compute type).  A
    left side that is no buffer is a local value; every W buffer is assigned once."""
    where = f"kernels.def:{lineno}: {k.name}: expr"
    if not k.is_map:
        raise SystemExit(f"{where}: only for element-wise maps (first integer arg n)")
    if any(d not in EXPR_TYPES for d in k.dtypes):
        raise SystemExit(f"{where}: dtypes must be among {', '.join(EXPR_TYPES)}")
    modes = dict((b, m) for m, b in k.buffers)
    if "RW" in modes.values():
        raise SystemExit(f"{where}: buffers must be R (inputs) or W (outputs)")
    stmts, seen = [], set(modes) | set(k.ints) | set(k.reals)
    for part in filter(str.strip, text.split(";")):
        m = STMT.match(part)
        if not m:
            raise SystemExit(f"{where}: bad statement {part.strip()!r} (want `name = expression`)")
        lhs, rhs = m.groups()
        if modes.get(lhs) == "R" or (lhs in seen and lhs not in modes) or any(lhs == s for s, _ in stmts):
            raise SystemExit(f"{where}: cannot assign {lhs!r} (an input, an argument or assigned twice)")
        stmts.append((lhs, rhs))
        seen.add(lhs)
    missing = [b for b, m in modes.items() if m == "W" and b not in {s for s, _ in stmts}]
    if missing:
        raise SystemExit(f"{where}: outputs never assigned: {', '.join(missing)}")
    return stmts


def _is_bool(k: Kernel, b: str, d: str) -> bool:
    return b in k.bools or d == "b8"


def _used(k: Kernel) -> set[str]:
    """The names the expression reads (loads and args nothing reads are not emitted: no
    unused-variable warnings, which nvcc -Werror would reject)."""
    return {w for _, rhs in k.expr for w in re.findall(r"\b[a-z_][a-z0-9_]*\b", rhs)}


def _expr_lines(k: Kernel, d: str, ctype: str, btype: str, load, store, idx: str) -> list[str]:
    """The per-element statements of an expr kernel for dtype d: loads of the R buffers into
    the compute type `ctype` (bool buffers: int 0/1), the statements, the stores (bool
    buffers as `btype` 0/1).  Float literals take the compute type."""
    used, lines = _used(k), []
    for mode, b in k.buffers:
        if mode == "R" and b in used:
            lines.append(f"const int {b} = tt_{b}[{idx}] != 0;" if _is_bool(k, b, d)
                         else f"const {ctype} {b} = {load(f'tt_{b}[{idx}]')};")
    for lhs, rhs in k.expr:
        rhs = SUF.sub(lambda m: f"{m.group(1)}_{d}", rhs)
        rhs = FLOAT_LIT.sub(lambda m: f"(({ctype}){m.group(1)})", rhs)
        lines.append(f"const {'int' if _is_bool(k, lhs, d) else ctype} {lhs} = {rhs};")
    for mode, b in k.buffers:
        if mode == "W":
            lines.append(f"tt_{b}[{idx}] = " + (f"({btype})({b} != 0);" if _is_bool(k, b, d) else f"{store(b)};"))
    return lines


def expr_cpu_source(kernels: list[Kernel]) -> str:
    out = ["/* Generated by csrc/gen_kernels.py from the `expr` column of csrc/kernels.def. Do not edit. */",
           "#include \"tt_cpu.h\"",
           "#include <tgmath.h> /* exp, log, pow, ... pick the float or double function by argument type */",
           ""]
    for k in kernels:
        if not k.expr:
            continue
        params = [f"const tt_args_{k.name} *tt_args"]
        params += [("const void *" if m == "R" else "void *") + f"tt_v_{b}" for m, b in k.buffers]
        out += [f"TT_SIMD_CLONES void tt_cpu_{k.name}({', '.join(params)})", "{"]
        out += [f"    const int64_t {a} = tt_args->{a};" for a in k.ints]
        out += [f"    (void){a};" for a in k.ints]
        out.append("    switch (tt_args->dtype) {")
        for d in k.dtypes:
            t, c = EXPR_TYPES[d]
            if k.cpu_f64 and d != "b8":  # `cpu f64`: loads, arithmetic and real args in double, one rounding
                c = "double"
            out.append(f"    case {DTYPES[d]}: {{")
            out += [f"        const {c} {a} = ({c})tt_args->{a};" for a in k.reals if a in _used(k)]
            for m, b in k.buffers:
                ty = "uint8_t" if _is_bool(k, b, d) else t
                out.append(f"        {'const ' if m == 'R' else ''}{ty} *tt_{b} = tt_v_{b};")
            loop = ["for (int64_t tt_i = 0; tt_i < n; tt_i++) {"]
            loop += ["    " + ln for ln in _expr_lines(k, d, c, "uint8_t", lambda v: f"TT_LD({v})",
                                                     lambda v: f"TT_ST({t}, {v})", "tt_i")]
            loop += ["}"]
            # `flags`: one loop per combination of the flags' values, each with them constant
            # (the compiler drops the branches the expression takes on them: each loop
            # vectorises on its own); a nonzero flag counts as 1
            for i, combo in enumerate(itertools.product((1, 0), repeat=len(k.flags))):
                if k.flags:
                    cond = " && ".join(f"{'' if v else '!'}{f}" for f, v in zip(k.flags, combo))
                    head = "if" if i == 0 else "} else if" if i < 2 ** len(k.flags) - 1 else "} else"
                    out.append(f"        {head}{f' ({cond})' if head != '} else' else ''} {{")
                    out += [f"            const int64_t {f} = {v};" for f, v in zip(k.flags, combo)]
                    out += ["            " + ln for ln in loop]
                else:
                    out += ["        " + ln for ln in loop]
            if k.flags:
                out.append("        }")
            out += ["        break;", "    }"]
        out += ["    default:", "        break;", "    }", "}", ""]
    return "\n".join(out) + "\n"


def expr_device_source(kernels: list[Kernel]) -> str:
    out = ["/* Generated by csrc/gen_kernels.py from the `expr` column of csrc/kernels.def. Do not edit.",
           " * Portable device bodies (csrc/kernels/opencl/tt_device.h), one per f32/f64/b8 dtype. */"]
    for k in kernels:
        if not k.expr or not any(h == "generic" for h in k.impls.values()):
            continue
        for d in k.dtypes:
            if d not in DEV_TYPES:
                continue
            t, c = DEV_TYPES[d]
            r = "float" if d == "f32" else "double"
            params = [f"GLOBAL {'const ' if m == 'R' else ''}{'tt_uchar' if _is_bool(k, b, d) else t} *tt_{b}"
                      for m, b in k.buffers]
            params += [f"tt_long {a}" for a in k.ints] + [f"{r} tt_r_{a}" for a in k.reals]
            out += [f"KERNEL tt_{k.name}_{d}({', '.join(params)})", "{",
                    "    const tt_long tt_i = GID0();",
                    "    if (tt_i >= n)", "        return;"]
            out += [f"    const {c} {a} = ({c})tt_r_{a};" for a in k.reals if a in _used(k)]
            out += ["    " + ln for ln in _expr_lines(k, d, c, "tt_uchar", lambda v: v, lambda v: f"({t}){v}",
                                                     "tt_i")]
            out += ["}", ""]
    return "\n".join(out) + "\n"


def args_header(kernels: list[Kernel]) -> str:
    out = [
        "/* Generated by csrc/gen_kernels.py from csrc/kernels.def. Do not edit. */",
        "#ifndef TT_KERNELS_ARGS_H",
        "#define TT_KERNELS_ARGS_H",
        "#include <stdint.h>",
        "",
        "enum tt_kernel_id {",
    ]
    for i, k in enumerate(kernels):
        out.append(f"    TT_K_{k.name.upper()} = {i},")
    out.append(f"    TT_NKERNELS = {len(kernels)}")
    out.append("};")
    out.append("")
    for k in kernels:
        out.append("typedef struct tt_args_%s {" % k.name)
        out.append("    int64_t dtype;")
        for a in k.ints:
            out.append(f"    int64_t {a};")
        for a in k.reals:
            out.append(f"    double {a};")
        out.append("} tt_args_%s;" % k.name)
    out.append("")
    out.append("/* CPU kernel bodies (csrc/kernels/cpu/): plain pointers, no StarPU types. */")
    for k in kernels:
        params = [f"const tt_args_{k.name} *args"]
        for mode, bname in k.buffers:
            params.append(("const void *" if mode == "R" else "void *") + bname)
        out.append(f"void tt_cpu_{k.name}({', '.join(params)});")
    out.append("")
    out.append("#endif")
    return "\n".join(out) + "\n"


def args_expr(k: Kernel, expr: str, cast: str = "(double)") -> str:
    names = set(k.ints) | set(k.reals)
    return re.sub(r"\b([a-z_][a-z0-9_]*)\b",
                  lambda m: f"{cast}a->{m.group(1)}" if m.group(1) in names else m.group(1),
                  expr)


def flops_expr(k: Kernel) -> str:
    return args_expr(k, k.flops)


def body_params(k: Kernel) -> list[str]:
    params = [f"const tt_args_{k.name} *args"]
    for mode, bname in k.buffers:
        params.append(("const void *" if mode == "R" else "void *") + bname)
    return params


def dev_header(kernels: list[Kernel]) -> str:
    """Device launch geometry and CUDA prototypes; generic CUDA launchers (cudaLaunchKernel
    with the arguments in table order: buffers, integer args as 64-bit, real args as float
    for float32 and as double otherwise) under TT_CUDA_GENERIC_LAUNCHERS; a half dtype
    launches the template tt_<name>_half<__half | __nv_bfloat16>.  No StarPU types."""
    out = [
        "/* Generated by csrc/gen_kernels.py from csrc/kernels.def. Do not edit. */",
        "#ifndef TT_KERNELS_DEV_H",
        "#define TT_KERNELS_DEV_H",
        "#include <stdint.h>",
        "#include \"tt_kernels_args.h\"",
        "",
        "#define TT_DEV_LOCAL 128 /* work-items per group of items/rows launches (a power of two) */",
        "#define TT_DEV_TILE 16   /* edge of a tiles launch's groups */",
        "enum { TT_GEOM_ITEMS = 1, TT_GEOM_ROWS = 2, TT_GEOM_TILES = 3 };",
        "typedef struct tt_dev_geom { int kind; int64_t dims[3]; } tt_dev_geom;",
        "/* What a CUDA body gets from the runtime: its worker's stream and cuBLAS handle. */",
        "typedef struct tt_cuda_ctx { void *stream; void *cublas; } tt_cuda_ctx;",
        "",
        "#ifdef __cplusplus",
        "extern \"C\" {",
        "#endif",
    ]
    for k in kernels:
        if k.geom:
            kind, exprs = k.geom
            dims = [args_expr(k, e, "(int64_t)") for e in exprs] + ["1"] * (3 - len(exprs))
            out.append(f"static inline tt_dev_geom tt_geom_{k.name}(const tt_args_{k.name} *a)")
            out.append("{")
            out.append(f"    tt_dev_geom g = {{TT_GEOM_{kind.upper()}, {{{', '.join(dims)}}}}};")
            out.append("    (void)a;")
            out.append("    return g;")
            out.append("}")
    for k in kernels:
        if "cuda" in k.impls:
            out.append(f"void tt_cuda_{k.name}({', '.join(body_params(k) + ['const tt_cuda_ctx *ctx'])});")
    out += ["#ifdef __cplusplus", "}", "#endif", "", "#endif /* TT_KERNELS_DEV_H */", ""]
    out.append("#if defined(TT_CUDA_GENERIC_LAUNCHERS) && !defined(TT_KERNELS_DEV_LAUNCHERS)")
    out.append("#define TT_KERNELS_DEV_LAUNCHERS")
    out.append("/* Included again by csrc/kernels/cuda/device_kernels.cu after the device kernels. */")
    for k in kernels:
        if k.impls.get("cuda") != "generic":
            continue
        n = k.name
        out.append(f"extern \"C\" void tt_cuda_{n}({', '.join(body_params(k) + ['const tt_cuda_ctx *ctx'])})")
        out.append("{")
        # buffers are named as in the table (a, b, x, ...): only `args` and tt_-prefixed locals here
        # real args travel as float for float32 tiles, as double otherwise (the half kernels
        # round a double straight to their type, as the CPU bodies do)
        if k.reals:
            out.append("    const int tt_f32 = args->dtype == TT_F32;")
        argv = [f"(void *)&{b}" for _, b in k.buffers]
        for i, name in enumerate(k.ints):
            out.append(f"    long long tt_i{i} = (long long)args->{name};")
            argv.append(f"(void *)&tt_i{i}")
        for i, name in enumerate(k.reals):
            out.append(f"    float tt_f{i} = (float)args->{name};")
            out.append(f"    double tt_d{i} = args->{name};")
            argv.append(f"(tt_f32 ? (void *)&tt_f{i} : (void *)&tt_d{i})")
        out.append(f"    void *tt_argv[] = {{{', '.join(argv)}}};")
        fn = ""
        for d in k.dtypes:
            sym = f"tt_{n}_half<{HALF_CUDA_TYPE[d]}>" if d in HALF else f"tt_{n}_{d}"
            fn += f"args->dtype == {DTYPES[d]} ? (const void *){sym} : "
        fn += "(const void *)0"
        out.append(f"    tt_cuda_launch(\"{n}\", {fn}, tt_geom_{n}(args), tt_argv, ctx);")
        out.append("}")
    out.append("#endif")
    return "\n".join(out) + "\n"


def codelets_source(kernels: list[Kernel]) -> str:
    out = [
        "/* Generated by csrc/gen_kernels.py from csrc/kernels.def. Do not edit. */",
        "#include <stddef.h>",
        "#include <starpu.h>",
        "#include \"tt_internal.h\"",
        "#include \"tt_kernels_dev.h\"",
        "",
        "/* Per-worker executed-task counter (csrc/devices.c), bumped by every wrapper below. */",
        "void tt_count_task(void);",
        "#ifdef TT_HAVE_OPENCL_KERNELS",
        "void tt_opencl_launch(int kernel, int64_t dtype, int nbuf, void *buffers[], int nint, const int64_t *ints,",
        "                      int nreal, const double *reals, tt_dev_geom geom);",
        "#endif",
        "#ifdef TT_HAVE_CUDA_KERNELS",
        "void *tt_cublas_handle(void);",
        "#endif",
        "",
    ]
    for k in kernels:
        n = k.name
        fp = ["    uint32_t h = starpu_hash_crc32c_be_n(&a->dtype, sizeof a->dtype, 0);"]
        for a in k.ints:
            fp.append(f"    h = starpu_hash_crc32c_be_n(&a->{a}, sizeof a->{a}, h);")
        ptrs = []
        for i, (mode, _) in enumerate(k.buffers):
            cast = "(const void *)" if mode == "R" else "(void *)"
            ptrs.append(f"{cast}STARPU_VECTOR_GET_PTR(buffers[{i}])")
        out += [
            f"static uint32_t tt_fp_{n}(struct starpu_task *task)",
            "{",
            f"    const tt_args_{n} *a = task->cl_arg;",
            *fp,
            "    return h;",
            "}",
            f"static double tt_flops_{n}(const void *p)",
            "{",
            f"    const tt_args_{n} *a = p;",
            "    (void)a;",
            f"    return {flops_expr(k)};",
            "}",
            f"static void tt_wrap_cpu_{n}(void *buffers[], void *cl_arg)",
            "{",
            "    tt_count_task();",
            f"    tt_cpu_{n}((const tt_args_{n} *)cl_arg, {', '.join(ptrs)});",
            "}",
        ]
        if n in TIMED_BY_ARG:
            out += [f"static double tt_cost_{n}(struct starpu_task *task, unsigned nimpl)",
                    "{",
                    "    (void)nimpl;",
                    f"    return (double)((const tt_args_{n} *)task->cl_arg)->{TIMED_BY_ARG[n]};",
                    "}"]
            model = ["    .type = STARPU_COMMON,", f"    .cost_function = tt_cost_{n},"]
        else:
            model = ["    .type = STARPU_HISTORY_BASED,"]
        out += [f"static struct starpu_perfmodel tt_pm_{n} = {{", *model,
                f"    .symbol = \"tiletrain_{n}\",",
                f"    .footprint = tt_fp_{n},",
                "};"]
        where = ["    .where = STARPU_CPU"]
        funcs = []
        if "opencl" in k.impls:
            ints = ", ".join(f"a->{x}" for x in k.ints) or "0"
            reals = ", ".join(f"a->{x}" for x in k.reals) or "0"
            out += [
                "#ifdef TT_HAVE_OPENCL_KERNELS",
                f"static void tt_wrap_opencl_{n}(void *buffers[], void *cl_arg)",
                "{",
                f"    const tt_args_{n} *a = cl_arg;",
                "    tt_count_task();",
                f"    const int64_t ints[] = {{{ints}}};",
                f"    const double reals[] = {{{reals}}};",
                f"    tt_opencl_launch(TT_K_{n.upper()}, a->dtype, {len(k.buffers)}, buffers, {len(k.ints)}, ints, "
                f"{len(k.reals)}, reals, tt_geom_{n}(a));",
                "}",
                "#endif",
            ]
            where += ["#ifdef TT_HAVE_OPENCL_KERNELS", "        | STARPU_OPENCL", "#endif"]
            funcs += ["#ifdef TT_HAVE_OPENCL_KERNELS",
                      f"    .opencl_funcs = {{tt_wrap_opencl_{n}}},",
                      "    .opencl_flags = {STARPU_OPENCL_ASYNC},",
                      "#endif"]
        if "cuda" in k.impls:
            out += [
                "#ifdef TT_HAVE_CUDA_KERNELS",
                f"static void tt_wrap_cuda_{n}(void *buffers[], void *cl_arg)",
                "{",
                "    tt_count_task();",
                "    tt_cuda_ctx ctx = {(void *)starpu_cuda_get_local_stream(), tt_cublas_handle()};",
                f"    tt_cuda_{n}((const tt_args_{n} *)cl_arg, {', '.join(ptrs)}, &ctx);",
                "}",
                "#elif defined(TT_SIMULATION)",
                # the simulation flavour (docs/simulation.md): StarPU simulates CUDA workers
                # and gives each task its perf model's time; it never calls a CUDA function
                # (STARPU_SIMGRID_EXECUTE runs CPU kernels only), but a codelet needs one
                # to be scheduled on a CUDA worker
                f"static void tt_wrap_cuda_{n}(void *buffers[], void *cl_arg)",
                "{",
                "    (void)buffers;",
                "    (void)cl_arg;",
                "    tt_count_task();",
                "}",
                "#endif",
            ]
            where += ["#if defined(TT_HAVE_CUDA_KERNELS) || defined(TT_SIMULATION)", "        | STARPU_CUDA", "#endif"]
            funcs += ["#ifdef TT_HAVE_CUDA_KERNELS",
                      f"    .cuda_funcs = {{tt_wrap_cuda_{n}}},",
                      "    .cuda_flags = {STARPU_CUDA_ASYNC},",
                      "#elif defined(TT_SIMULATION)",
                      f"    .cuda_funcs = {{tt_wrap_cuda_{n}}},",
                      "#endif"]
        out += [
            f"static struct starpu_codelet tt_cl_{n} = {{",
            *where,
            "    ,",
            f"    .cpu_funcs = {{tt_wrap_cpu_{n}}},",
            *funcs,
            "    .nbuffers = STARPU_VARIABLE_NBUFFERS,",
            f"    .model = &tt_pm_{n},",
            f"    .name = \"{n}\",",
            "};",
            f"_Static_assert(sizeof(tt_args_{n}) <= sizeof(tt_args_buf), \"tt_args_{n} is larger than tt_args_buf "
            "(csrc/tt_internal.h), an expander's room for any kernel's arguments: enlarge it\");",
            "",
        ]
    out.append("const tt_kernel_desc tt_kernel_table[TT_NKERNELS] = {")
    for k in kernels:
        n = k.name
        modes = ", ".join(MODES[m] for m, _ in k.buffers)
        acc = sum(1 << i for i, (_, b) in enumerate(k.buffers) if b in k.acc)
        bools = sum(1 << i for i, (_, b) in enumerate(k.buffers) if b in k.bools)
        offs = ", ".join(f"(long)offsetof(tt_args_{n}, {f})" if f in k.ints else "-1" for f in SPECIAL)
        out.append(
            f"    [TT_K_{n.upper()}] = {{\"{n}\", &tt_cl_{n}, sizeof(tt_args_{n}), {len(k.buffers)}, "
            f"{{{modes}}}, tt_flops_{n}, {k.is_map:d}, {k.is_span:d}, {{{offs}}}, {k.dtype_mask()}, "
            f"{k.dtype_mask(exclude=HALF)}, {acc:#x}u, {bools:#x}u, {1 + len(k.ints)}}},"
        )
    out.append("};")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    kernels = parse(Path(argv[1]).read_text())
    outdir = Path(argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    for fname, text in (("tt_kernels_args.h", args_header(kernels)),
                        ("tt_kernels_dev.h", dev_header(kernels)),
                        ("tt_kernels_gen.c", codelets_source(kernels)),
                        ("tt_kernels_expr.c", expr_cpu_source(kernels)),
                        ("tt_kernels_expr.cl", expr_device_source(kernels))):
        path = outdir / fname
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
