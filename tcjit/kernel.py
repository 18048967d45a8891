"""Kernels: the callable objects ``tcjit.define`` returns."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .polyhedral.errors import TCCallError, TCNameError, TCSemanticError
from .polyhedral.lang.check import check_source
from .polyhedral.lang.checked import CheckedDef, CheckedProgram
from .polyhedral.lang.printer import def_to_tc

__all__ = ["Definitions", "Kernel", "define"]

_TARGETS = ("cpu", "cuda", "cuda-emulated")


class Kernel:
    """One entry point of a TC source, callable on torch tensors.

    Until the compiler lands, a call computes its outputs with the reference evaluator
    (:mod:`tcjit.reference`): exact semantics, modest speed, no gradients.

    :ivar name: the entry's name.
    :ivar definition: the checked definition (types, shapes, ranges).
    :ivar program: the whole checked source it came from.
    """

    def __init__(self, program: CheckedProgram, name: str, *, backward: str | None = "auto", options=None):
        self.program = program
        self.definition: CheckedDef = program.get(name)  # type: ignore[assignment]
        self.name = name
        self.backward = backward
        self.options = options

    # ----------------------------------------------------------------------------------- describing
    @property
    def source(self) -> str:
        """The TC source as the user wrote it."""
        return self.program.source

    @property
    def canonical_source(self) -> str:
        """Canonical TC text of this entry (and its user-given backward): layout-free, a cache key."""
        text = def_to_tc(self.definition.ast)
        if self.backward not in (None, "auto"):
            text += "\n" + def_to_tc(self.program.get(self.backward).ast)
        return text

    @property
    def signature(self) -> str:
        """Parameters and outputs with types and (inferred) shapes, as one line."""
        return self.definition.signature()

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.definition.params

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.definition.outputs

    @property
    def sizes(self) -> tuple[str, ...]:
        """The size symbols, bound from the inputs' shapes at each call."""
        return self.definition.sizes

    @property
    def symbolic_output_shapes(self) -> dict[str, tuple[str, ...]]:
        """Each output's shape as expressions of the size symbols (``'H - KH + 1'``)."""
        return {o: tuple(str(s) for s in self.definition.tensor(o).shape) for o in self.outputs}

    def output_shapes(self, *inputs) -> tuple[tuple[int, ...], ...]:
        """The concrete shapes of the outputs for these inputs (checks the call like a real one).

        Inputs may live on the ``meta`` device: nothing is computed.
        """
        from .binding import bind

        b = bind(self.definition, inputs)
        return tuple(b.output_shapes[o] for o in self.outputs)

    def __repr__(self) -> str:
        return f"<tcjit.Kernel {self.signature}>"

    # ------------------------------------------------------------------------------------- calling
    def __call__(self, *inputs, outputs: Sequence | None = None, options=None, target: str | None = None):
        """Run the kernel on ``inputs`` (torch tensors; rank-0 arguments may be Python numbers).

        :arg outputs: tensors to write the results into (accumulations without ``!`` start from
            their contents); returned instead of new tensors.
        :arg options: mapping options for this call.
        :arg target: ``None`` follows the inputs' device; ``"cpu"``, ``"cuda"`` or
            ``"cuda-emulated"`` (the CUDA mapping run on CPU tensors).
        :returns: a tensor, or a tuple of tensors when the entry has several outputs.

        Today every call is computed by :func:`tcjit.reference.evaluate`: the compiled CPU and
        CUDA backends replace it, with the same results.
        """
        import torch

        from . import reference

        if target is not None and target not in _TARGETS:
            raise TCCallError(f"unknown target {target!r}; expected one of {', '.join(_TARGETS)}")
        if options is not None or self.options is not None:
            raise TCCallError("mapping options need the compiler, which this version does not have yet")
        if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):
            raise TCCallError(
                f"{self.name}: an input requires grad, but tcjit does not differentiate kernels yet",
                hint="call it under torch.no_grad() or pass detached inputs",
            )
        outs = reference.evaluate_def(self.definition, *inputs, outputs=outputs)
        return outs[0] if len(outs) == 1 else outs


class Definitions:
    """The entries of a source with several ``def``: one :class:`Kernel` attribute per entry."""

    def __init__(self, kernels: dict[str, Kernel]):
        self._kernels = kernels

    def __getattr__(self, name: str) -> Kernel:
        try:
            return self.__dict__["_kernels"][name]
        except KeyError:
            raise AttributeError(f"no entry named {name!r}; defined: {', '.join(self._kernels)}") from None

    def __getitem__(self, name: str) -> Kernel:
        return self._kernels[name]

    def __iter__(self) -> Iterator[Kernel]:
        return iter(self._kernels.values())

    def __len__(self) -> int:
        return len(self._kernels)

    def __dir__(self):
        return [*super().__dir__(), *self._kernels]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._kernels)

    def __repr__(self) -> str:
        return "<tcjit.Definitions " + ", ".join(self._kernels) + ">"


def _check_backward(program: CheckedProgram, fwd: CheckedDef, backward: str) -> None:
    bwd = program.get(backward)
    if bwd is None:
        raise TCNameError(
            f"backward entry '{backward}' is not defined in the source; it defines {', '.join(program.names)}"
        )
    want = len(fwd.params) + len(fwd.outputs)
    if len(bwd.params) != want or len(bwd.outputs) != len(fwd.params):
        raise TCSemanticError(
            f"backward '{backward}' must take the {len(fwd.params)} inputs of '{fwd.name}' followed by "
            f"{len(fwd.outputs)} output gradient(s) ({want} in all) and return {len(fwd.params)} "
            f"gradient(s), one per input; it takes {len(bwd.params)} and returns {len(bwd.outputs)}",
            source=program.source,
            span=bwd.ast.name_span,
            where=backward,
        )


def define(source: str, name: str | None = None, *, backward: str | None = "auto", options=None):
    """See :func:`tcjit.define`."""
    program = check_source(source)
    if not program.defs:
        raise TCNameError("the source defines no entry point ('def name(...) -> (...) { ... }')")
    if name is not None:
        program.entry(name)  # raises for an unknown name
    if backward not in (None, "auto"):
        if not isinstance(backward, str):
            raise TCCallError(f"backward must be 'auto', None or an entry name, got {backward!r}")
        targets = [name] if name is not None else list(program.names)
        if len(targets) != 1:
            raise TCCallError("backward= names the backward of one entry: pass name= as well")
        _check_backward(program, program.get(targets[0]), backward)
    if name is not None or len(program.defs) == 1:
        return Kernel(program, name or program.defs[0].name, backward=backward, options=options)
    return Definitions({d.name: Kernel(program, d.name, options=options) for d in program.defs})
