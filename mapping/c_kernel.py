"""The C file of one CPU kernel (:func:`print_kernel`): the prelude, the helpers its parts need,
the parallel regions and the entry point around what :class:`~tcjit.mapping.c_printer.CPrinter`
prints of the kernel IR, with the workspace that holds its panels and temporaries between calls,
its long sums' wide buffers, and the emulated target's race checks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..polyhedral.lang.checked import CheckedDef
from ..polyhedral.lang.types import ScalarType
from . import ir
from . import ir_values as V
from .c_exprs import BoundsCheck, CParam, c_compute_type, c_int, c_product, c_storage_type, convert
from .c_panels import item_bytes, padded_elements, panel_code
from .c_prelude import PRELUDE, prelude_piece
from .c_printer import CPrinter
from .layout import Pack, Part, size_var

__all__ = ["EMULATION_HELPERS", "KEPT_WORKSPACE_BYTES", "WORKSPACE_HELPERS", "print_kernel"]


def print_kernel(
    cdef: CheckedDef,
    body: ir.Node,
    bodies: Mapping[str, V.Body],
    *,
    symbol: str,
    params: Sequence[CParam],
    sizes: Mapping[str, int],
    strides: Mapping[str, tuple[int, ...]],
    wide: Mapping[str, ScalarType] | None = None,
    copy_in: frozenset[str] = frozenset(),
    header: str = "",
    printer: Callable[..., CPrinter] | None = None,
    packs: Mapping[str, Pack] | None = None,
    parallel: bool = True,
    folded: Sequence[str] = (),
    parts: Mapping[str, Part] | None = None,
    held: Mapping[str, int] | None = None,
    zeroed: frozenset[str] = frozenset(),
    symbolic: frozenset[str] = frozenset(),
) -> tuple[str, tuple[BoundsCheck, ...]]:
    """The C source of one kernel and the run-time bounds checks it makes.

    The function is ``void symbol(int nthreads, int64_t *tc_errors, <params>)``; ``tc_errors``
    points at two int64 slots (check number, offending subscript), zero on entry.
    ``body`` is the kernel IR after the target's passes (:mod:`.openmp_teams`,
    :mod:`.reduction_forms`). ``printer`` makes the printer
    from ``(cdef, bodies, sizes, strides, wide)`` (the emulated target's prints
    promoted buffers). ``packs``: inputs read from transposed panels (:mod:`.packing`), which the
    kernel allocates and fills first; ``strides`` then holds the panels' strides for them.
    ``parts``: those of them filled a part at a time at the :class:`~tcjit.mapping.ir.PartFill`
    marks in ``body`` (:func:`~tcjit.mapping.parts.place_parts`); ``strides`` holds the parts'
    strides for them.
    ``parallel``: whether the panels may be filled by several threads (the option parallelize).
    ``folded``: the ``!`` initialisations (``S0_init``) that ``body`` leaves out
    (:func:`~tcjit.mapping.reduction_forms.folded_initialisations`), named in a comment.

    ``held``: tensors of ``params`` (temporaries; name -> elements) the kernel keeps in a workspace
    of its own rather than taking them as parameters: the function is then a wrapper that takes
    the workspace (:data:`WORKSPACE_HELPERS`, kept between calls), sets those in ``zeroed`` to
    zero and calls the kernel's body, ``symbol_body``, which takes every tensor of ``params`` as
    a ``restrict`` parameter (:func:`_held_wrapper`).

    ``symbolic``: sizes the kernel takes as ``int64_t`` parameters after ``params`` (in sorted
    order, named :func:`~tcjit.mapping.symbolic.size_var`) instead of constants
    (:mod:`.symbolic`).
    """
    wide = dict(wide or {})
    held = dict(held or {})
    packs = dict(packs or {})
    parts = dict(parts or {})
    emulated = _emulated(body)

    p = (printer or CPrinter)(cdef, bodies, sizes, strides, wide)
    p.symbol = symbol
    p.symbolic = frozenset(symbolic)
    p.panels = frozenset(packs)
    params = [*params, *(CParam(name, "size", "int64_t") for name in sorted(symbolic))]
    for q in params:
        if q.kind == "tensor" and q.name in parts:  # the tensor, and this thread's part buffer
            ct = c_storage_type(cdef.tensor(q.name).dtype)
            per = padded_elements(parts[q.name].shape, cdef.tensor(q.name).dtype)
            mine = f"pk_{q.name} + (pn_{q.name} > 1 ? (int64_t)omp_get_thread_num() * {per} : 0)"
            p.aliases += [
                f"const {ct} *restrict u_{q.name} = p_{q.name};",
                f"{ct} *restrict b_{q.name} = {mine};",
            ]
            p.signature += [f"const {ct} *restrict u_{q.name}", f"{ct} *restrict b_{q.name}"]
            p.arguments += [f"p_{q.name}", mine]
        elif q.kind == "tensor":
            pointer = f"p_{q.name}"
            if q.name in packs:  # this thread's panel (its own, or the only one)
                per = padded_elements(packs[q.name].shape, cdef.tensor(q.name).dtype)
                pointer = f"pk_{q.name} + (pn_{q.name} > 1 ? (int64_t)omp_get_thread_num() * {per} : 0)"
            p.aliases.append(f"{q.ctype} t_{q.name} = {pointer};")
            p.signature.append(f"{q.ctype} t_{q.name}")
            p.arguments.append(pointer)
        else:  # scalars, symbolic sizes
            p.signature.append(f"{q.ctype} {_cname(q)}")
            p.arguments.append(_cname(q))
    for name, wt in wide.items():
        p.aliases.append(f"{c_compute_type(wt)} *restrict w_{name} = wp_{name};")
        p.signature.append(f"{c_compute_type(wt)} *restrict w_{name}")
        p.arguments.append(f"wp_{name}")
    if emulated:
        p.shadowed = [*cdef.outputs, *cdef.temporaries]
        p.bounded = [q.name for q in params if q.kind == "tensor" and q.name not in p.shadowed]
    if folded:
        p.lines.append(f"  /* left out, as register tiles start their sums from zero: {', '.join(folded)} */")
    p.node(body, "  ")
    sites = [n.site for n in ir.nodes(body) if isinstance(n, ir.PartFill)]
    common, fills, panels, freed, panel_bytes = panel_code(cdef, sites, packs, parallel, parts)
    prologue, epilogue = _wide_buffers(p, wide, copy_in, cleanup=" ".join(freed))
    prologue, epilogue = [*panels, *prologue], [*epilogue, *(f"  {f}" for f in freed)]
    if emulated:
        shadows, frees = _shadows(p)
        prologue, epilogue = [*shadows, *prologue], [*epilogue, *frees]
    decl = ", ".join(
        ["int nthreads", "int64_t *restrict tc_errors", *(f"{q.ctype} {_cname(q)}" for q in params)]
    )
    wrapper = _held_wrapper(cdef, symbol, params, held, zeroed) if held else []
    release = _workspace_release(panel_bytes, _held_layout(cdef, held)[1] if held else None)
    text = [
        "/* Generated by tcjit. */",
        header.rstrip(),
        PRELUDE,
        "#include <stdlib.h>",
        *(["#include <omp.h>"] if packs or p.helpers else []),
        "",
        "static inline int64_t tc_checked(int64_t i, int64_t n, int64_t check, int64_t *errors) {",
        "  if (__builtin_expect(i < 0 || i >= n, 0)) {",
        "    __atomic_store_n(&errors[1], i, __ATOMIC_RELAXED);",
        "    __atomic_store_n(&errors[0], check, __ATOMIC_RELAXED);",
        "    return 0;",
        "  }",
        "  return i;",
        "}",
        "",
        *(EMULATION_HELPERS if _emulated(body) else ()),
        *(
            f"typedef {ct} {name} __attribute__((vector_size({n}), aligned(sizeof({ct})), may_alias));"
            for name, (ct, n) in sorted(p.vector_types.items())
        ),
        *_PARTS,
        *common,
        *(line for helper in p.helpers for line in helper),
        *p.prototypes,
        "",
        *p.functions,
        "#if TC_PART_OF(0)",
        *(WORKSPACE_HELPERS if packs or held else ()),
        *(release if packs or held else ()),
        *fills,
        f"static __attribute__((noinline)) void {symbol}_body({decl})" if held else f"void {symbol}({decl})",
        "{",
        "  (void)nthreads; (void)tc_errors;",
        *prologue,
        "  {",
        *(f"  {d}" for d in p.aliases),
        *p.lines,
        "  }",
        *epilogue,
        "}",
        *wrapper,
        "#endif",
        "",
    ]
    return "\n".join(text), tuple(p.checks)


def _held_wrapper(
    cdef: CheckedDef, symbol: str, params: Sequence[CParam], held: Mapping[str, int], zeroed: frozenset[str]
) -> list[str]:
    """The entry point of a kernel whose ``held`` tensors live in its workspace: it takes the
    workspace, places each tensor in it (64-byte aligned), zeroes those in ``zeroed`` and calls
    ``symbol_body`` with them as the parameters they are there. The body keeps its ``restrict``
    parameters: pointers into one allocation, as locals of the body, let gcc's vectoriser reorder
    the accesses of a ``#pragma omp simd`` loop across two of them (a wrong fcrelu gradient)."""
    offsets, total = _held_layout(cdef, held)
    outer = ["int nthreads", "int64_t *restrict tc_errors"]
    outer += [f"{q.ctype} {_cname(q)}" for q in params if q.name not in held]
    args = ["nthreads", "tc_errors"]
    for q in params:
        if q.name in held:
            ct = c_storage_type(cdef.tensor(q.name).dtype)
            args.append(f"({ct} *)(tc_ws + {offsets[q.name]})")
        else:
            args.append(_cname(q))
    names = ", ".join(f"'{name}'" for name in held)
    lines = [
        f"/* The temporaries {names} live in the kernel's workspace, kept between calls. */",
        f"void {symbol}({', '.join(outer)})",
        "{",
        f"  char *tc_ws = (char *)tc_take_workspace(&tc_kept_temporaries, {total});",
        "  if (!tc_ws) { tc_errors[0] = -1; return; }",
    ]
    for name in held:
        if name in zeroed:
            ct = c_storage_type(cdef.tensor(name).dtype)
            lines.append(f"  memset(tc_ws + {offsets[name]}, 0, {held[name]} * sizeof({ct}));")
    lines += [
        f"  {symbol}_body({', '.join(args)});",
        "  tc_give_workspace(&tc_kept_temporaries, tc_ws);",
        "}",
    ]
    return lines


def _held_layout(cdef: CheckedDef, held: Mapping[str, int]) -> tuple[dict[str, int], int]:
    """Where each ``held`` tensor (name -> elements) starts in the temporaries' workspace (bytes,
    64-byte aligned), and the workspace's size in bytes (64 at least)."""
    offsets: dict[str, int] = {}
    total = 0
    for name, elements in held.items():
        offsets[name] = total
        total += padded_elements((elements,), cdef.tensor(name).dtype) * item_bytes(cdef.tensor(name).dtype)
    return offsets, max(total, 64)


def _workspace_release(panel_bytes: Sequence[str], temporaries: int | None) -> list[str]:
    """The functions a library with a workspace exports for the runtime's memory budget
    (:mod:`tcjit.memory`): ``tc_kept_bytes(nthreads)``, the bytes its workspaces keep between
    calls on ``nthreads`` threads (``panel_bytes``: C that declares ``tc_bytes``, the panels' size,
    from ``nthreads``; ``temporaries``: the temporaries' workspace size, if any), and
    ``tc_release()``, which frees the workspaces kept in their slots. A call in flight on another
    thread has taken its workspace out of the slot (:data:`WORKSPACE_HELPERS`), so ``tc_release``
    never frees memory a call is using; such a call puts its workspace back when it returns."""
    lines = [
        "/* The bytes kept between calls on nthreads threads, and the function that frees them:",
        "   the runtime's memory budget calls them (tcjit.memory). */",
        "size_t tc_kept_bytes(int nthreads)",
        "{",
        "  size_t kept = 0;",
        "  (void)nthreads;",
    ]
    if panel_bytes:
        lines += [
            "  {",
            *(f"  {line}" for line in panel_bytes),
            f"    if (tc_bytes <= {KEPT_WORKSPACE_BYTES}) kept += tc_bytes;",
            "  }",
        ]
    if temporaries is not None and temporaries <= KEPT_WORKSPACE_BYTES:
        lines.append(f"  kept += {temporaries};")
    return [
        *lines,
        "  return kept;",
        "}",
        "void tc_release(void)",
        "{",
        "  tc_free_workspace(__atomic_exchange_n(&tc_kept_workspace, NULL, __ATOMIC_ACQ_REL));",
        "  tc_free_workspace(__atomic_exchange_n(&tc_kept_temporaries, NULL, __ATOMIC_ACQ_REL));",
        "}",
    ]


#: The kernel's functions are numbered (the entry point 0, each parallel region from 1) and each is
#: compiled only where ``TC_PART_OF(number)`` holds: one translation unit has them all, and the
#: runtime may compile the source several times, each with a part of them, in parallel, and link
#: the parts (:func:`tcjit.cpu_runtime.compile_c`). Region functions are then hidden, not static
#: (prelude/parts.h).
_PARTS = tuple(prelude_piece("parts.h").removesuffix("\n").split("\n"))


#: The emulated target's helpers (prelude/emulation.h): its orders of blocks and threads
#: (``tc_order``: 0 forward, 1 reversed, 2 shuffled: ``i * s + n / 3`` modulo ``n`` with a stride
#: ``s`` prime to ``n`` near ``n / 2``) and its race and bounds checks.
EMULATION_HELPERS = tuple(prelude_piece("emulation.h").removesuffix("\n").split("\n"))


#: Workspaces up to this many bytes are kept for the next call (larger ones are freed).
KEPT_WORKSPACE_BYTES = 64 << 20


#: Workspaces of at least this many bytes are mapped (``mmap``) rather than allocated with
#: ``malloc``: unmapping returns them to the system at once, where glibc kept freed blocks in its
#: heap (it raises its own mmap threshold to the size of each block freed), and a process that
#: evicted forty 16 MB workspaces stayed 600 MB larger (bench/memory.py).
MAPPED_WORKSPACE_BYTES = 256 << 10


#: The memory of the panels and, in a slot of their own, of the temporaries (:func:`_held_wrapper`):
#: one workspace per kernel and slot, kept between calls and taken atomically, so that
#: a call does not allocate and touch fresh memory each time (glibc returns large blocks to the
#: system when freed; the timing is in bench/results/HISTORY.md), and concurrent calls each get
#: their own (the one that finds the slot empty allocates, and frees what it cannot give back).
#: Each workspace starts with a 64-byte header holding its size, which says how it was allocated
#: (:data:`MAPPED_WORKSPACE_BYTES`).
WORKSPACE_HELPERS = (
    "#include <sys/mman.h>",
    "static void *tc_kept_workspace = NULL;  /* the panels' */",
    "static void *tc_kept_temporaries = NULL;",
    "static void tc_free_workspace(void *w)",
    "{",
    "  if (!w) return;",
    "  size_t bytes = *(size_t *)w + 64;",
    f"  if (bytes >= {MAPPED_WORKSPACE_BYTES}) munmap(w, bytes); else free(w);",
    "}",
    "static void *tc_take_workspace(void **slot, size_t bytes)",
    "{",
    "  void *w = __atomic_exchange_n(slot, NULL, __ATOMIC_ACQ_REL);",
    "  if (w && *(size_t *)w >= bytes) return (char *)w + 64;",
    "  tc_free_workspace(w);",
    f"  if (bytes + 64 >= {MAPPED_WORKSPACE_BYTES}) {{",
    "    w = mmap(NULL, bytes + 64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);",
    "    if (w == MAP_FAILED) return NULL;",
    "  } else {",
    "    w = aligned_alloc(64, bytes + 64);",
    "    if (!w) return NULL;",
    "  }",
    "  *(size_t *)w = bytes;",
    "  return (char *)w + 64;",
    "}",
    "static void tc_give_workspace(void **slot, void *p)",
    "{",
    "  void *w = (char *)p - 64, *none = NULL;",
    f"  if (*(size_t *)w > {KEPT_WORKSPACE_BYTES}",
    "      || !__atomic_compare_exchange_n(slot, &none, w, 0,",
    "                                      __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))",
    "    tc_free_workspace(w);",
    "}",
)


def _wide_buffers(p: CPrinter, wide: Mapping[str, ScalarType], copy_in: frozenset[str], cleanup: str = ""):
    """C that allocates each widened tensor's buffer (copying the tensor in when it is read before
    written) and, at the end, rounds it back into the tensor and frees it. ``cleanup``: C that
    frees what was allocated before, run when an allocation fails."""
    prologue: list[str] = []
    epilogue: list[str] = []
    for name, wt in wide.items():
        info = p.cdef.tensor(name)
        shape = p.shape(name)
        count = c_product(shape)
        ct = c_compute_type(wt)
        loops, subs = [], []
        for k, n in enumerate(shape):
            loops.append(f"for (int64_t e{k} = 0; e{k} < {n if isinstance(n, int) else f'({n})'}; e{k} += 1)")
            subs.append(f"e{k}")
        dense = " + ".join(f"e{k} * {c_int(st)}" for k, st in enumerate(p.held_strides(name))) or "0"
        actual = " + ".join(f"e{k} * {c_int(st)}" for k, st in enumerate(p.tensor_strides(name))) or "0"
        nest = " ".join(loops)
        prologue.append(
            f"  /* '{name}' is accumulated in {wt} (a long sum), stored as {info.dtype} at the end */"
        )
        elements = max(count, 1) if isinstance(count, int) else f"tc_max_i64(1, {count})"
        prologue.append(f"  {ct} *wp_{name} = ({ct} *)malloc(sizeof({ct}) * {elements});")
        undo = cleanup + " " if cleanup else ""
        prologue.append(f"  if (!wp_{name}) {{ {undo}tc_errors[0] = -1; return; }}")
        if name in copy_in:
            raw = f"p_{name}[{actual}]"
            if info.dtype.name == "float16":
                raw = f"tc_h2f({raw})"
            elif info.dtype.name == "bfloat16":
                raw = f"tc_bf2f({raw})"
            prologue.append(f"  {nest} wp_{name}[{dense}] = ({ct})({raw});")
        value = convert(f"wp_{name}[{dense}]", wt, info.dtype)
        if info.dtype.is_half:  # stored as bits: narrow through float32, as torch does
            half = "h" if info.dtype.name == "float16" else "bf"
            value = f"tc_f2{half}((float)(wp_{name}[{dense}]))"
        epilogue.append(f"  {nest} p_{name}[{actual}] = {value};")
        epilogue.append(f"  free(wp_{name});")
    return prologue, epilogue


def _shadows(p: CPrinter) -> tuple[list[str], list[str]]:
    """The emulated target's shadow of every written tensor (:data:`EMULATION_HELPERS`): one entry
    per element offset the kernel can use, and the phase counter."""
    prologue = ["  int64_t tc_phase = 0; (void)tc_phase;"]
    epilogue = []
    for name in p.shadowed:
        span = p.span(name)
        prologue.append(f"  tc_shadow *tc_sh_{name} = (tc_shadow *)calloc({span}, sizeof(tc_shadow));")
        prologue.append(f"  if (!tc_sh_{name}) {{ tc_errors[0] = -1; return; }}")
        epilogue.append(f"  free(tc_sh_{name});")
    for name, size in p.buffer_shadows:  # reset by each block
        shadow = "tc_bsh_" + name.removeprefix("tc_")
        prologue.append(f"  tc_bshadow *{shadow} = (tc_bshadow *)malloc({size} * sizeof(tc_bshadow));")
        prologue.append(f"  if (!{shadow}) {{ tc_errors[0] = -1; return; }}")
        epilogue.append(f"  free({shadow});")
    return prologue, epilogue


def _cname(q: CParam) -> str:
    if q.kind == "size":
        return size_var(q.name)
    return f"p_{q.name}" if q.kind == "tensor" else f"s_{q.name}"


def _emulated(node: ir.Node) -> bool:
    return isinstance(node, ir.Blocks) or (
        isinstance(node, ir.Block) and any(isinstance(c, ir.Blocks) for c in node.children)
    )
