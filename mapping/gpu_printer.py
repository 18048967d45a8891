"""What the CUDA printer and the emulated target print alike beyond the C printer: promoted
buffers and the GPU mapping's nodes (:mod:`.gpu_ir`).

:func:`~tcjit.mapping.promotion.promote_shared` redirects some references to buffers and adds copy
statements; here:

* a reference redirected to a buffer (:class:`~tcjit.mapping.ir_values.BufferRef`) reads or
  writes ``buffer[(subscript_0 - offset_0) / stride_0]...``, with the offsets printed from the
  statement's own indices, and the same conversions as the tensor's element (a buffer holds
  elements as the tensor does: storage bits, or the wide type of a long sum);
* a copy (:class:`~tcjit.mapping.gpu_ir.CopyElement`) moves one element of the tensor into the
  buffer (or back), bits unchanged;
* a block reduction's own steps (:class:`~tcjit.mapping.gpu_ir.ReductionStep`) and the code
  thread 0 runs alone (:class:`~tcjit.mapping.gpu_ir.FirstThread`);
* a vector group (:class:`~tcjit.mapping.gpu_ir.VectorGroup`, :mod:`.gpu_vectors`): a thread's
  loop over consecutive elements with wide accesses (the CUDA printer's built-in vector types;
  the emulation's element-by-element copies).

How buffers are declared, and whether accesses are race-checked, is each target's (the CUDA
printer's ``__shared__`` arrays; the emulation's per-block arrays filled with NaN).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from ..polyhedral.errors import TCInternalError
from ..polyhedral.lang.types import ScalarType
from . import ir
from . import ir_values as V
from .c_exprs import (
    ExprPrinter,
    c_compute_type,
    c_int,
    c_storage_type,
    combine_update,
    expr,
    reduction_identity,
)
from .c_printer import CPrinter
from .gpu_ir import WRITTEN, BlockReduction, CopyElement, FirstThread, ReductionStep, VectorGroup, WarpSteps

__all__ = ["GpuPrinter"]


class GpuPrinter(CPrinter):
    """The C printer with promoted buffers and the GPU mapping's nodes (:mod:`.gpu_ir`: copies,
    block reductions, code for thread 0), for the CUDA printer and the emulated target's.

    :ivar buffers: every buffer of the plan, by name.
    """

    group: VectorGroup | None = None  # the group whose instances are being printed

    def __init__(self, *args, buffers=None, **options):
        super().__init__(*args)
        for name, value in options.items():  # a subclass's settings (the CUDA printer's readonly)
            if not hasattr(type(self), name):
                raise TypeError(f"{type(self).__name__} has no setting {name}")
            setattr(self, name, value)
        self.buffers: Mapping[str, ir.Buffer] = buffers or {}

    @classmethod
    def factory(
        cls,
        *,
        buffers: Mapping[str, ir.Buffer],
        **kwargs,
    ) -> Callable[..., GpuPrinter]:
        """A printer factory for :func:`~tcjit.mapping.c_kernel.print_kernel` with the GPU
        mapping's buffers (:func:`~tcjit.mapping.lower_gpu.printer_inputs`)."""
        return lambda *args: cls(*args, buffers=buffers, **kwargs)

    # ------------------------------------------------------------------------------- buffers
    def buffer_type(self, buf: ir.Buffer) -> str:
        """The C type of a buffer's elements: its tensor's as held (storage, or a wide sum's)."""
        wide = self.wide.get(buf.tensor)
        return c_compute_type(wide) if wide else c_storage_type(self.cdef.tensor(buf.tensor).dtype)

    def element(self, buf: ir.Buffer, index: Sequence[str]) -> str:
        """C for element ``index`` of ``buf``."""
        return buf.name + "".join(f"[{i}]" for i in index)

    def buffer_race(self, buf: ir.Buffer, index: Sequence[str], write: bool) -> str | None:
        """The emulated target's race check of a buffer access (None: none)."""
        return None

    @staticmethod
    def flat(buf: ir.Buffer, index: Sequence[str]) -> str:
        """C for the position of element ``index`` in ``buf`` laid out row-major."""
        terms, step = [], 1
        for i, n in reversed(list(zip(index, buf.shape))):
            terms.append(i if step == 1 else f"({i}) * {step}")
            step *= n
        return " + ".join(reversed(terms)) or "0"

    def local(self, ref: V.BufferRef, ex: ExprPrinter) -> list[str]:
        """The buffer element a promoted reference touches."""
        out = []
        for arg, off, stride in zip(ref.subscripts, ref.offsets, ref.strides):
            sub = ex.index(arg)
            local = sub if off == ir.Int(0) else f"{sub} - {expr(off)}"
            out.append(local if stride == 1 else f"({local}) / {stride}")
        return out

    def buffer_load(self, buf: ir.Buffer, tensor: str, index: Sequence[str], want: ScalarType) -> str:
        """C reading element ``index`` of ``buf`` (holding ``tensor``'s elements) as ``want``."""
        value = self.held_value(tensor, self.element(buf, index), want)
        check = self.buffer_race(buf, index, False)
        return value if check is None else f"({check}, {value})"

    def buffer_store(self, buf: ir.Buffer, tensor: str, index: Sequence[str], value: str) -> str:
        """C storing ``value`` (of ``tensor``'s element type) into element ``index`` of ``buf``."""
        text = self.held_store(tensor, self.element(buf, index), value)
        check = self.buffer_race(buf, index, True)
        return text if check is None else f"{check}; {text}"

    # ------------------------------------------------------------------------------ redirection
    def access_value(self, load: V.Load, ex: ExprPrinter) -> str:
        ref = load.ref
        if self.group is not None and ref in self.group.names:
            return self.held_value(
                ref.tensor, f"{self.group.names[ref]}.v[{self.group.loop.var}]", load.dtype
            )
        if isinstance(ref, V.BufferRef):
            return self.buffer_load(self.buffers[ref.buffer], ref.tensor, self.local(ref, ex), load.dtype)
        return super().access_value(load, ex)

    def updated(self, target: V.Target, ex: ExprPrinter):
        if self.group is not None and target == self.group.write:
            lvalue = f"{WRITTEN}.v[{self.group.loop.var}]"
            return (
                lambda want: self.held_value(target.tensor, lvalue, want),
                lambda value: self.held_store(target.tensor, lvalue, value),
            )
        if isinstance(target, V.PartialRef):  # a block reduction's update: into the thread's partial result
            buf, index = self.buffers[target.buffer], ["0"]
        elif isinstance(target, V.BufferRef):
            buf, index = self.buffers[target.buffer], self.local(target, ex)
        else:
            return super().updated(target, ex)
        return (
            lambda want: self.buffer_load(buf, target.tensor, index, want),
            lambda value: self.buffer_store(buf, target.tensor, index, value),
        )

    def held_address(self, tensor: str, subscripts: Sequence[str]) -> str:
        """C for the position of the element at ``subscripts`` (C expressions) in ``tensor``'s
        array as the kernel holds it (:meth:`held_strides`)."""
        terms = (
            s if n == 1 else f"{s} * {c_int(n)}" for s, n in zip(subscripts, self.held_strides(tensor)) if n
        )
        return " + ".join(terms) or "0"

    # ---------------------------------------------------------------------------- block reductions
    def reduction_step(self, node: ReductionStep) -> str:
        """C for an instance of one of a block reduction's own statements (its update writes the
        partial result through its body): every thread runs it, with its own ids ``t0, t1, t2``."""
        red = node.reduction
        et = self.element_type(red.tensor).compute
        mine = ["t2", "t1", "t0"]
        if node.role == "init":
            return f"/* block reduction {red.number}: identity */ " + self.buffer_store(
                red.acc, red.tensor, ["0"], reduction_identity(red.op, et)
            )
        if node.role == "store":
            value = self.buffer_load(red.acc, red.tensor, ["0"], et)
            return f"/* block reduction {red.number}: partial result */ " + self.buffer_store(
                red.part, red.tensor, mine, value
            )
        if node.role == "step":
            s = expr(node.args[0])
            a = self.buffer_load(red.part, red.tensor, mine, et)
            b = self.buffer_load(red.part, red.tensor, ["t2", "t1", f"t0 + {s}"], et)
            store = self.buffer_store(red.part, red.tensor, mine, combine_update(red.op, a, b, et))
            cond = f"t0 < {s} && t0 + {s} < {red.width}"
            return f"/* block reduction {red.number}: step {s} */ if ({cond}) {{ {store} }}"
        if node.role == "combine":
            rank = len(self.cdef.tensor(red.tensor).shape)
            addr = self.held_address(red.tensor, [f"({expr(a)})" for a in node.args[len(node.args) - rank :]])
            value = self.buffer_load(red.part, red.tensor, ["t2", "t1", "0"], et)
            return f"/* block reduction {red.number}: into {red.tensor} */ " + self.combine_store(
                red, addr, value, et
            )
        raise TCInternalError(f"no role {node.role!r} in block reduction {red.number}")

    def combine_store(self, red: BlockReduction, addr: str, value: str, et: ScalarType) -> str:
        """C adding a row's result ``value`` into element ``addr`` of the output (an atomic
        addition: blocks run one after the other here, nothing to check)."""
        if red.atomic:
            return self._store(
                red.tensor, addr, combine_update(red.op, self._load(red.tensor, addr, et), f"({value})", et)
            )
        old = reduction_identity(red.op, et) if red.initialises else self.load(red.tensor, addr, et)
        return self.store(red.tensor, addr, combine_update(red.op, old, f"({value})", et))

    # ------------------------------------------------------------------------ the mapping's nodes
    def node(self, n: ir.Node | None, indent: str) -> None:
        if isinstance(n, CopyElement):
            self.copy_element(n, indent)
        elif isinstance(n, ReductionStep):
            self.lines.append(f"{indent}{{ {self.reduction_step(n)} }}")
        elif isinstance(n, WarpSteps):
            self.node(n.body, indent)  # steps and barriers (the CUDA printer may shuffle)
        elif isinstance(n, VectorGroup):
            self.vector_group(n, indent)
        elif isinstance(n, FirstThread):
            self.lines.append(f"{indent}if (t0 == 0 && t1 == 0 && t2 == 0) {{")
            self.node(n.body, indent + "  ")
            self.lines.append(f"{indent}}}")
        else:
            super().node(n, indent)

    # ------------------------------------------------------------------------------ vector groups
    def vector_group(self, group: VectorGroup, indent: str) -> None:
        """A group (:mod:`.gpu_vectors`): under a test of its tensors' alignment, its vector
        accesses as one each and its instances unrolled; else its loop as it is."""
        n = group.loop
        structs = group.values
        tests = []
        for tensor in dict.fromkeys(ref.tensor for _, ref in structs):
            mask = group.width * self.cdef.tensor(tensor).dtype.bits // 8 - 1
            tests.append(f"((unsigned long long)t_{tensor} & {mask})")  # (never a wide buffer)
        self.lines.append(f"{indent}if (({' | '.join(tests)}) == 0) {{")
        inner = indent + "  "
        self.lines.append(
            f"{inner}/* {group.width} consecutive elements of each of"
            f" {', '.join(sorted({ref.tensor for _, ref in structs}))} per access (vector_width) */"
        )
        for name, ref in structs:
            dtype = self.cdef.tensor(ref.tensor).dtype
            struct = self.vector_type(name, c_storage_type(dtype), group.width, group.width * dtype.bits // 8)
            self.lines.append(f"{inner}{struct} {name};")
        ex = ExprPrinter(self)
        reads = [
            self.vector_read(name, ref.tensor, self.address(ref, ex), group.width)
            for name, ref in group.loads
        ]
        self.bound(group.run, reads, inner, {n.var: ir.Int(0)})  # from the group's first element
        self.group = group
        try:  # unrolled: each element a constant index of the structs (registers, not memory)
            for k in range(group.width):
                self.lines.append(f"{inner}{{ const int64_t {n.var} = {k};")
                self.enclosing.append(n.var)
                self.node(n.body, inner + "  ")
                self.enclosing.pop()
                self.lines.append(f"{inner}}}")
        finally:
            self.group = None
        if group.write is not None:
            text = self.vector_write(WRITTEN, group.write.tensor, self.address(group.write, ex), group.width)
            self.bound(group.run, [text], inner, {n.var: ir.Int(0)})
        self.lines.append(f"{indent}}} else {{")
        self.loop(n, inner)
        self.lines.append(f"{indent}}}")

    def run(self, node: ir.Run, indent: str) -> None:
        if self.group is None or node != self.group.run:
            super().run(node, indent)
            return
        self.lines.append(f"{indent}{self.comment(node.statement)}")
        self.bound(node, [self.body(node.statement)], indent)

    def bound(self, node: ir.Run, texts: Sequence[str], indent: str, values=None) -> None:
        """``texts`` (C statements over ``node``'s index variables) in a block binding those they
        use (no unused variable: NVRTC warns), ``node``'s arguments with ``values`` substituted."""
        if not texts:
            return
        args = [ir.substitute(a, values) for a in node.args] if values else node.args
        dims = self.bodies[node.statement].dims
        used = {d for d in dims if any(re.search(rf"\bi_{d}\b", t) for t in texts)}
        self.lines.append(f"{indent}{{ {self.bindings(node.statement, args, only=used)}".rstrip())
        for t in texts:
            self.lines.append(f"{indent}  {t}")
        self.lines[-1] += " }"

    def vector_type(self, name: str, ctype: str, width: int, size: int) -> str:
        """The declaration's type of struct ``name``: ``width`` elements of ``ctype`` (``size``
        bytes in all)."""
        return f"struct {name}_t {{ {ctype} v[{width}]; }}"

    def vector_read(self, name: str, tensor: str, addr: str, width: int) -> str:
        """C filling struct ``name`` with the ``width`` elements of ``tensor`` from ``addr`` on
        (here one at a time, race-checked: the emulated target's)."""
        parts = []
        for k in range(width):
            at = f"{addr} + {k}"
            raw, race = self.global_read(tensor, at), self.race(tensor, at, False)
            parts.append(f"{name}.v[{k}] = {raw if race is None else f'({race} ? {raw} : 0)'};")
        return " ".join(parts)

    def vector_write(self, name: str, tensor: str, addr: str, width: int) -> str:
        """C storing struct ``name`` into the ``width`` elements of ``tensor`` from ``addr`` on
        (here one at a time, race-checked)."""
        parts = []
        for k in range(width):
            at = f"{addr} + {k}"
            text, race = f"{self.held_lvalue(tensor, at)} = {name}.v[{k}];", self.race(tensor, at, True)
            parts.append(text if race is None else f"if ({race}) {{ {text} }}")
        return " ".join(parts)

    def copy_element(self, node: CopyElement, indent: str) -> None:
        """An instance of a copy statement: one element between the tensor and the buffer, its bits
        unchanged."""
        c = node.copy
        buf = self.buffers[c.buffer]
        outer = node.args[: c.prefix]
        element = node.args[c.prefix :]
        binds = [f"const int64_t tc_a{k} = {expr(a)};" for k, a in enumerate(element)]
        values = {f"s{k}": s for k, s in enumerate(outer)}
        index = []
        for k, (off, stride) in enumerate(zip(c.offsets, c.strides)):
            off = ir.substitute(off, values)
            local = f"tc_a{k}" if off == ir.Int(0) else f"tc_a{k} - {expr(off)}"
            index.append(local if stride == 1 else f"({local}) / {stride}")
        addr = self.held_address(c.tensor, [f"tc_a{k}" for k in range(len(element))])
        held = self.element(buf, index)
        if c.write_back:
            what = f"write back '{c.tensor}' from {buf.name}"
            check = self.buffer_race(buf, index, False)
            value = held if check is None else f"({check}, {held})"
            lvalue = self.held_lvalue(c.tensor, addr)
            race = self.race(c.tensor, addr, True)
            text = f"{lvalue} = {value};" if race is None else f"if ({race}) {{ {lvalue} = {value}; }}"
        else:
            what = f"copy '{c.tensor}' into {buf.name}"
            race = self.race(c.tensor, addr, False)
            value = self.global_read(c.tensor, addr)
            value = value if race is None else f"({race} ? {value} : 0)"
            check = self.buffer_race(buf, index, True)
            text = f"{held} = {value};" if check is None else f"{check}; {held} = {value};"
        self.lines.append(f"{indent}/* {what} */")
        self.lines.append(f"{indent}{{ {' '.join(binds)}")
        self.lines.append(f"{indent}  {text} }}")
