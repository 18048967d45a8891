"""tcjit kernels as ``torch.library`` custom operators: what ``torch.compile`` traces.

Eager calls of a :class:`~tcjit.Kernel` run compiled code directly (:meth:`Kernel.__call__`). While
``torch.compiler.is_compiling()`` is true (Dynamo tracing a function, AOTAutograd, ``torch.export``)
a call goes through :func:`compiled_call` instead, which calls a custom operator in the ``tcjit``
namespace. Dynamo puts the operator in its graph as one node and learns its outputs' shapes from
the operator's *fake* implementation (range inference on fake tensors, nothing computed), so a
model mixing tcjit kernels and torch code compiles into one graph with ``fullgraph=True``; when
the graph runs, the operator's real implementation runs the same compiled kernel as an eager call.

**Which operators.** One per kernel identity and call signature, made on first use and never
registered twice in a process:

* ``tcjit::<entry>_<hash>``: the kernel's outputs, for calls that need no gradient (no autograd
  formula: calls under ``torch.no_grad()``, ``torch.inference_mode()`` or on inputs that do not
  require grad);
* ``tcjit::<entry>_<hash>_fwd``: the forward of the kernel's :class:`~tcjit.autograd.GradPlan`
  (its outputs followed by the ``n_saved`` tensors its backward reads), for calls that need
  gradients; its autograd formula (``torch.library.register_autograd``) calls
* ``tcjit::<entry>_<hash>_bwd``: the plan's backward, a custom operator too, so that AOTAutograd
  traces it into the backward graph; its fake implementation returns one tensor shaped like each
  input whose gradient is wanted. Output gradients are not materialised: an output the loss does
  not read passes ``None`` (``Tensor?`` in the schema), and the derived backward run then takes
  no gradient for it (:meth:`~tcjit.autograd.GradPlan.grads`), as in eager calls.

``<hash>`` is the first 16 hex digits of the SHA-256 of: the canonical TC text of the entry and of
its user-given backward (:attr:`Kernel.canonical_source`), the kind of backward (``auto``, a user
entry, or none), the call's ``target`` and ``options`` (canonical JSON; also the options given to
``define``), and the kind of each argument (see below). Equal kernels defined twice share their
operators; the names are the same in every process.

**What is specialised.**

* *Arguments.* Tensor arguments are ``Tensor`` in the schema. A rank-0 argument passed as a Python
  number is a ``float``, ``SymInt`` or ``bool`` argument (by its TC type), passed as a tensor it is
  a ``Tensor`` (and differentiable): the two are different operators.
* *``target`` and ``options``* are part of the operator's identity (the key above), not arguments.
* *``outputs=``* is refused under ``torch.compile`` (the operators are functional): a
  :class:`~tcjit.TCCallError`.
* *Sizes.* The fake implementation keeps symbolic sizes symbolic: an input dimension that Dynamo
  made symbolic (``dynamic=True``, ``mark_dynamic``, or automatic dynamic shapes after a
  recompile) gives outputs whose shapes are the definition's size expressions of it, with no
  guard on its value, so one graph serves every size. When the graph runs, the operator's real
  implementation calls the kernel as an eager call does, which makes the size symbolic in its
  compiled code when it sees a second value (DESIGN.md, "Shapes").
* *Dtypes.* Float tensors of other dtypes than declared select a retyped variant of the kernel
  (:meth:`Kernel.variant_for`), whose canonical text differs: each variant has operators of its
  own, resolved at trace time from the arguments' dtypes. A dtype no variant fits (an integer
  tensor for a float parameter, two dtypes for one declared type) is reported by the trace or
  the fake implementation as the same :class:`~tcjit.TCCallError` an eager call raises (with
  ``fullgraph=True`` Dynamo wraps it in its own error, with the message; otherwise Dynamo breaks
  the graph there and the call, run eagerly, raises it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .arguments import check_target
from .kernel_protocol import KernelLike
from .polyhedral.errors import TCCallError

__all__ = ["NAMESPACE", "compiled_call", "op_name", "registered_ops", "symbolic_output_shapes"]

NAMESPACE = "tcjit"
"""The ``torch.ops`` namespace of every operator this module registers."""


@dataclass
class _Op:
    """What one registered operator runs: the kernel, how it is called, and which role it plays."""

    kernel: KernelLike
    kinds: tuple[str, ...]
    options: object
    target: str | None
    role: str  # "call", "fwd" or "bwd"


_OPS: dict[str, _Op] = {}  # operator name (without namespace) -> what it runs


def registered_ops() -> tuple[str, ...]:
    """The qualified names (``tcjit::...``) of the operators registered so far in this process."""
    return tuple(f"{NAMESPACE}::{name}" for name in _OPS)


# ============================================================================= the traced call
def compiled_call(kernel: KernelLike, inputs: Sequence, outputs, options, target):
    """``kernel(*inputs, outputs=..., options=..., target=...)`` as a custom-operator call.

    Dynamo traces this function (it is inlined into the user's graph): only cheap Python here. The
    operator is looked up, and registered on first use, by :func:`_operator`, which Dynamo runs
    as a black box at trace time (``assume_constant_result``) and whose result, a name, is a
    constant of the graph.
    """
    kinds = tuple(_kind(x) for x in inputs)
    dtypes = tuple(x.dtype if isinstance(x, torch.Tensor) else None for x in inputs)
    train = torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)
    name, n_out = _operator(kernel, kinds, dtypes, options, target, train, outputs is not None)
    result = getattr(torch.ops.tcjit, name).default(*inputs)
    if isinstance(result, torch.Tensor):
        return result
    return result[0] if n_out == 1 else tuple(result[:n_out])


def _kind(x) -> str:
    return "Tensor" if isinstance(x, torch.Tensor) else "Scalar"


@torch._dynamo.assume_constant_result
def _operator(
    kernel: KernelLike, kinds: tuple[str, ...], dtypes: tuple, options, target, train: bool, has_outputs: bool
):
    """``(name, number of kernel outputs)`` of the operator for this call, registered if new: an
    operator of the variant the arguments' ``dtypes`` ask for (:meth:`Kernel.variant_for`)."""
    if has_outputs:
        raise TCCallError(
            f"{kernel.name}: outputs= cannot be used under torch.compile (tcjit's custom operators "
            "return new tensors)",
            hint="let the call allocate its outputs and copy them where they belong (out.copy_(k(...)))",
        )
    check_target(target)
    kernel = kernel._variant_for_dtypes(dtypes)
    if train:
        kernel.grad_plan()  # raises for backward=None (as an eager call does)
    name = op_name(kernel, kinds, options, target, "fwd" if train else "call")
    if name not in _OPS:
        if train:
            _register_training(kernel, kinds, options, target, name)
        else:
            _register(_Op(kernel, kinds, options, target, "call"), name)
    return name, len(kernel.outputs)


def op_name(
    kernel: KernelLike, kinds: tuple[str, ...], options, target: str | None, role: str = "call"
) -> str:
    """The operator name (without the ``tcjit::`` namespace) for calls of ``kernel`` with
    arguments of ``kinds`` (``"Tensor"`` or ``"Scalar"`` each), ``options`` and ``target``;
    ``role``: ``"call"``, ``"fwd"`` or ``"bwd"`` (see the module docstring)."""
    b = kernel.backward
    backward = "none" if b is None else "auto" if b == "auto" else "user"
    parts = [
        kernel.canonical_source,
        f"backward={backward}",
        f"target={target}",
        f"options={_options_text(options)}",
        f"define_options={_options_text(kernel.options)}",
        "kinds=" + ",".join(kinds),
    ]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return f"{kernel.name}_{digest}" + ("" if role == "call" else f"_{role}")


def _options_text(options) -> str:
    from .mapping.options import MappingOptions

    if options is None:
        return "none"
    if not isinstance(options, MappingOptions):
        raise TCCallError(f"options must be tcjit.MappingOptions, got {type(options).__name__}")
    return options.to_json()


# ============================================================================ the schemas
def _scalar_schema(kernel: KernelLike, param: str) -> str:
    """The schema type of a rank-0 argument passed as a Python number."""
    dtype = kernel.definition.scalars[param].dtype
    if dtype.is_float:
        return "float"
    return "bool" if dtype.kind == "bool" else "SymInt"


def _input_schema(kernel: KernelLike, kinds: tuple[str, ...]) -> list[str]:
    params = kernel.definition.params
    if len(kinds) != len(params):
        # The fake implementation would report it; the schema must exist first.
        from .binding import bind

        bind(kernel.definition, [None] * len(kinds))  # raises the call's count error
    out = []
    for i, (p, kind) in enumerate(zip(params, kinds)):
        if kind == "Tensor":
            out.append(f"Tensor x{i}")
        elif p in kernel.definition.scalars:
            out.append(f"{_scalar_schema(kernel, p)} x{i}")
        else:
            raise TCCallError(
                f"input '{p}' must be a torch.Tensor",
                source=kernel.definition.source,
                span=kernel.definition.param(p).span,
                where=kernel.name,
            )
    return out


def _returns(n: int) -> str:
    return "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"


# ======================================================================== the implementations
def _specialization(kernel: KernelLike, inputs, options, target):
    """The specialisation of ``kernel`` for these (real) inputs, shared with eager calls."""
    from .arguments import call_layouts

    return kernel._specialization(
        (options, target, call_layouts(inputs), None), inputs, None, options, target
    )


def _fake_outputs(kernel: KernelLike, inputs) -> tuple[torch.Tensor, ...]:
    """Empty tensors shaped, typed and placed like ``kernel``'s outputs on these (fake) inputs.

    The call is checked like a real one (counts, dtypes, ranks, sizes, ranges) by
    :func:`tcjit.binding.bind`. Where an input's shape is symbolic (``torch.compile(dynamic=True)``,
    ``mark_dynamic``, automatic dynamic shapes), the check runs on meta tensors of the shapes'
    example values (nothing is fixed by it), and the outputs' shapes are the definition's size
    expressions of the symbolic sizes (:func:`symbolic_output_shapes`), so the graph serves every
    size; the kernel itself makes those sizes symbolic when it sees them vary (DESIGN.md, "Shapes").
    Rank-0 arguments do not affect shapes; their values (possibly symbolic, or fake tensors whose
    ``item()`` has no value) are replaced by zeros.
    """
    from .binding import bind, torch_dtype

    cdef = kernel.definition
    args = list(inputs)
    for i, p in enumerate(cdef.params):
        if p in cdef.scalars and i < len(args):
            x = args[i]
            if not isinstance(x, torch.Tensor) or x.dim() == 0:
                args[i] = 0
    symbolic = any(isinstance(x, torch.Tensor) and not all(isinstance(n, int) for n in x.shape) for x in args)
    if not symbolic:
        b = bind(cdef, args)
        shapes, device = b.output_shapes, b.device
    else:
        examples = [_example(x) for x in args]
        if all(x is not None for x in examples):
            bind(cdef, examples)  # the call's checks, at the example sizes
        shapes = symbolic_output_shapes(cdef, args)
        device = next((x.device for x in args if isinstance(x, torch.Tensor)), torch.device("cpu"))
    return tuple(
        torch.empty(shapes[o], dtype=torch_dtype(cdef.tensor(o).dtype), device=device) for o in cdef.outputs
    )


def symbolic_output_shapes(cdef, inputs) -> dict[str, tuple]:
    """Every output's shape for inputs whose shapes may hold ``SymInt`` s: each size bound from the
    first dimension that names it (the others are asserted equal with ``torch._check``, which
    fixes no value), each output dimension its size expression of them
    (:meth:`~tcjit.polyhedral.lang.sizes.SizeExpr.evaluate_with`)."""
    sizes: dict[str, object] = {}
    for p, value in zip(cdef.ast.params, inputs):
        if p.name in cdef.scalars or not isinstance(value, torch.Tensor):
            continue
        for dim, n in zip(p.dims or (), value.shape):
            if isinstance(dim.value, str):
                if dim.value in sizes:
                    torch._check(n == sizes[dim.value], lambda: f"sizes of {cdef.name} contradict")
                else:
                    sizes[dim.value] = n
    return {
        o: tuple(d.evaluate_with(sizes, torch.sym_min, torch.sym_max) for d in cdef.tensor(o).shape)
        for o in cdef.outputs
    }


def _example(x):
    """A meta tensor of ``x``'s shape at its example sizes (a traced size's hint), or ``x`` when
    it is not a tensor; None where a size has no example value."""
    if not isinstance(x, torch.Tensor):
        return x
    shape = []
    for n in x.shape:
        hint = n if isinstance(n, int) else getattr(getattr(n, "node", None), "hint", None)
        if hint is None:
            return None
        shape.append(int(hint))
    return torch.empty(shape, dtype=x.dtype, device="meta")


def _register(op: _Op, name: str) -> None:
    """Register ``tcjit::name`` running ``op.kernel`` (role ``call``) or its plan's forward (``fwd``)."""
    kernel = op.kernel
    run = kernel.grad_plan().forward if op.role == "fwd" else kernel
    n = len(run.outputs)
    schema = f"({', '.join(_input_schema(kernel, op.kinds))}) -> {_returns(n)}"

    def impl(*inputs):
        outs = _specialization(run, inputs, op.options, op.target).run(inputs, None)
        return outs[0] if n == 1 else tuple(outs)

    def fake(*inputs):
        outs = _fake_outputs(run, inputs)
        return outs[0] if n == 1 else outs

    custom = torch.library.custom_op(f"{NAMESPACE}::{name}", impl, mutates_args=(), schema=schema)
    custom.register_fake(fake)
    _OPS[name] = op
    return custom


def _register_training(kernel: KernelLike, kinds: tuple[str, ...], options, target, name: str) -> None:
    """Register the ``_fwd`` operator with an autograd formula calling the ``_bwd`` operator."""
    plan = kernel.grad_plan()
    n_out = len(kernel.outputs)
    bwd_name = op_name(kernel, kinds, options, target, "bwd")
    _register_backward(kernel, kinds, options, target, bwd_name)
    forward = _register(_Op(kernel, kinds, options, target, "fwd"), name)
    bwd = getattr(torch.ops.tcjit, bwd_name).default

    def setup_context(ctx, inputs, output):
        ctx.set_materialize_grads(False)  # as eager calls: an output nothing reads gets None
        outs = output if isinstance(output, tuple) else (output,)
        saved = outs if plan.saves_outputs else outs[n_out:]
        positions = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
        ctx.positions = positions
        ctx.others = {i: x for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)}
        ctx.n_inputs = len(inputs)
        ctx.save_for_backward(*(inputs[i] for i in positions), *saved)
        hidden = [o for o in outs[n_out:]]  # the intermediates are no one's business but backward's
        hidden += [o for o in outs[:n_out] if not (o.is_floating_point() or o.is_complex())]
        if hidden:
            ctx.mark_non_differentiable(*hidden)

    def backward(ctx, *grads):
        if all(g is None for g in grads[:n_out]):  # no gradient reached any output (known when traced)
            return (None,) * ctx.n_inputs
        tensors = ctx.saved_tensors
        n_tensors = len(ctx.positions)
        it = iter(tensors[:n_tensors])
        inputs = [ctx.others[i] if i in ctx.others else next(it) for i in range(ctx.n_inputs)]
        needs = [bool(n) and i not in ctx.others for i, n in enumerate(ctx.needs_input_grad)]
        wanted = bwd(*inputs, *tensors[n_tensors:], *grads[:n_out], needs)
        it = iter(wanted)
        return tuple(next(it) if n else None for n in needs)

    forward.register_autograd(backward, setup_context=setup_context)


def _register_backward(kernel: KernelLike, kinds: tuple[str, ...], options, target, name: str) -> None:
    """Register ``tcjit::name``: the plan's backward, returning the wanted gradients in input order."""
    plan = kernel.grad_plan()
    n_in, n_out = len(kinds), len(kernel.outputs)
    n_saved = (n_out + plan.n_saved) if plan.saves_outputs else plan.n_saved
    schema = (
        "("
        + ", ".join(
            [
                *_input_schema(kernel, kinds),
                *(f"Tensor saved{k}" for k in range(n_saved)),
                *(f"Tensor? grad{k}" for k in range(n_out)),
                "bool[] needs",
            ]
        )
        + ") -> Tensor[]"
    )

    def impl(*args):
        inputs, saved = args[:n_in], args[n_in : n_in + n_saved]
        grads, needs = args[n_in + n_saved : -1], tuple(args[-1])
        return [g for g in plan.grads(inputs, saved, grads, needs) if g is not None]

    def fake(*args):
        inputs, needs = args[:n_in], args[-1]
        return [
            torch.empty(x.shape, dtype=x.dtype, device=x.device)
            for x, n in zip(inputs, needs)
            if n and isinstance(x, torch.Tensor)
        ]

    custom = torch.library.custom_op(f"{NAMESPACE}::{name}", impl, mutates_args=(), schema=schema)
    custom.register_fake(fake)
    _OPS[name] = _Op(kernel, kinds, options, target, "bwd")
