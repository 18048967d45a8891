"""The functions that make kernels: :func:`define` (a TC source's entries), :func:`make_autograd`
(a forward kernel paired with a backward kernel) and :func:`compile` (a kernel's specialisation,
ahead of time). :mod:`tcjit` re-exports them with their user documentation.
"""

from __future__ import annotations

from .arguments import bind_arguments, call_layouts
from .dynamic import check_dynamic, normalise_dynamic
from .kernel import Definitions, Kernel
from .polyhedral.errors import TCCallError, TCNameError, TCSemanticError
from .polyhedral.lang.check import check_source
from .polyhedral.lang.checked import CheckedDef, CheckedProgram

__all__ = ["backward_arity_problem", "compile", "define", "make_autograd"]


def backward_arity_problem(fwd: CheckedDef, bwd: CheckedDef) -> str | None:
    """Why ``bwd`` cannot be the backward of ``fwd`` (it must take the forward inputs followed by one
    gradient per output and return one gradient per input), or ``None``."""
    want = len(fwd.params) + len(fwd.outputs)
    if len(bwd.params) == want and len(bwd.outputs) == len(fwd.params):
        return None
    return (
        f"backward '{bwd.name}' must take the {len(fwd.params)} inputs of '{fwd.name}' followed by "
        f"{len(fwd.outputs)} output gradient(s) ({want} in all) and return {len(fwd.params)} "
        f"gradient(s), one per input; it takes {len(bwd.params)} and returns {len(bwd.outputs)}"
    )


def _check_backward(program: CheckedProgram, fwd: CheckedDef, backward: str) -> None:
    bwd = program.get(backward)
    if bwd is None:
        raise TCNameError(
            f"backward entry '{backward}' is not defined in the source; it defines {', '.join(program.names)}"
        )
    problem = backward_arity_problem(fwd, bwd)
    if problem is not None:
        raise TCSemanticError(problem, source=program.source, span=bwd.ast.name_span, where=backward)


def define(
    source: str, name: str | None = None, *, backward: str | None = "auto", options=None, dynamic=None
):
    """See :func:`tcjit.define`."""
    dynamic = normalise_dynamic(dynamic)
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
    entries = [program.entry(name)] if name is not None else list(program.defs)
    check_dynamic(program, entries, dynamic)
    if len(entries) == 1:
        return Kernel(program, entries[0].name, backward=backward, options=options, dynamic=dynamic)
    return Definitions({d.name: Kernel(program, d.name, options=options, dynamic=dynamic) for d in entries})


def make_autograd(forward_kernel, backward_kernel):
    """A kernel that runs ``forward_kernel`` and differentiates it with ``backward_kernel`` (TC's
    ``make_autograd``): the backward takes the forward inputs followed by one gradient per output
    and returns one gradient per input.

    Example::

        mm = tcjit.define("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }")
        mm_grad = tcjit.define('''def mm_grad(float(M,K) A, float(K,N) B, float(M,N) dC) -> (dA, dB) {
            dA(m, k) +=! dC(m, r_n) * B(k, r_n)
            dB(k, n) +=! dC(r_m, n) * A(r_m, k)
        }''')
        mm = tcjit.make_autograd(mm, mm_grad)

    :returns: a :class:`~tcjit.Kernel` sharing ``forward_kernel``'s definition, options and
        ``dynamic`` (not the sizes it has seen).
    :raises TCCallError: an argument is not a kernel, or the backward's parameters and outputs do
        not match the forward's.
    """
    for what, k in (("forward_kernel", forward_kernel), ("backward_kernel", backward_kernel)):
        if not isinstance(k, Kernel):
            raise TCCallError(f"make_autograd: {what} must be a tcjit Kernel, got {type(k).__name__}")
    problem = backward_arity_problem(forward_kernel.definition, backward_kernel.definition)
    if problem is not None:
        raise TCCallError(problem)
    return Kernel(
        forward_kernel.program,
        forward_kernel.name,
        backward=backward_kernel,
        options=forward_kernel.options,
        dynamic=forward_kernel.dynamic,
    )


def compile(kernel: Kernel, *example_inputs, options=None, target: str | None = None, **named):
    """See :func:`tcjit.compile`."""
    if not isinstance(kernel, Kernel):
        raise TCCallError(f"tcjit.compile takes a Kernel (from tcjit.define), got {type(kernel).__name__}")
    example_inputs = bind_arguments(kernel.definition, example_inputs, named)
    key = (options, target, call_layouts(example_inputs, meta_as="cpu"), None)
    return kernel._specialization(key, example_inputs, None, options, target, allow_meta=True)
