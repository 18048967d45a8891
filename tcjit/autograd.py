"""Gradients through tcjit kernels: calls wrapped in a ``torch.autograd.Function``.

Every differentiable kernel has a :class:`GradPlan`: a *forward* kernel, which computes the kernel's
outputs followed by the tensors its backward reads (*saved* tensors: none for a user-supplied
backward; for a derived backward, the intermediate values it needs), and a *backward* that takes the
forward inputs, the saved tensors and the gradients of the outputs, and returns the inputs' gradients.

A call of a :class:`~tcjit.Kernel` whose tensor inputs require grad, with grad mode on, goes through
:class:`KernelFunction`:

* **forward** runs the plan's forward kernel on the call's layout (the call's ``options`` and
  ``target`` apply), returns the outputs and keeps the inputs and saved tensors for backward;
* **backward** runs the plan's backward on the inputs, the saved tensors and the gradients of the
  outputs (a derived backward reads them in the layout they arrive in: an expanded gradient in
  place), and returns the inputs' gradients, checked against the inputs' shapes.
  Inputs that do not require grad get ``None`` (a derived backward does not compute them); integer
  outputs are not differentiable (``mark_non_differentiable``). Gradients are not materialised
  (``ctx.set_materialize_grads(False)``): an output the loss does not read arrives as ``None``. A
  derived backward is then derived without that output's gradient (no zero-filled tensor, no
  copy of it); a user-supplied backward receives zeros for it. When no output received a
  gradient, no kernel runs and every input gets ``None``, as for torch's own operators.

What a call of one layout needs is worked out once and kept by the kernel (:class:`GradCall`):
the plan, the forward's specialisation and, for a derived backward, its specialisation per set of
wanted gradients and absent outputs. Later calls then cost a dictionary lookup on either side,
as plain calls do, rather than binding and checking all the backward's arguments again.

The backward is, as in Tensor Comprehensions, an entry of the same source named by
``tcjit.define(source, name, backward="entry")``, or any kernel given to :func:`~tcjit.make_autograd`: it
takes the forward inputs followed by one gradient per output and returns one gradient per input.
``backward="auto"`` (the default) derives it from the forward program
(:mod:`tcjit.polyhedral.autodiff`); ``backward=None`` declares the kernel forward-only. Backward
passes are not themselves differentiable: a backward with ``create_graph=True`` (a double
backward's first step) raises :class:`~tcjit.TCCallError`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .dynamic import mentions
from .memory import SpecializationCache
from .polyhedral.errors import TCCallError

__all__ = ["GradCall", "GradPlan", "KernelFunction"]


@dataclass(frozen=True)
class GradPlan:
    """How calls of one kernel are differentiated.

    :ivar kernel: the kernel differentiated.
    :ivar forward: runs on the kernel's inputs and returns its outputs followed by ``n_saved`` saved
        tensors (``kernel`` itself when nothing is saved).
    :ivar n_saved: how many tensors ``forward`` returns beyond the kernel's outputs.
    :ivar backward_for: ``(needs, absent) -> kernel``: for a tuple of booleans, one per input
        (whether its gradient is wanted), and a frozenset of output names (``absent``, empty by
        default), a kernel that takes the inputs, the saved tensors and the gradients of the
        outputs not in ``absent`` (in output order) and returns the gradients of the wanted
        inputs in input order. ``absent`` is only ever non-empty for a derived backward.
    :ivar derived: ``False`` for a user-supplied backward, which takes the inputs and one gradient
        per output (zeros for an absent one; ``saved`` is empty) and returns one gradient per
        input whatever ``needs`` says; ``True`` for a derived one, which takes the inputs, the
        kernel's *outputs*, then the ``n_saved`` intermediate tensors, then the present output
        gradients, and returns the wanted gradients only.
    """

    kernel: object
    forward: object
    n_saved: int
    backward_for: Callable[..., object]
    derived: bool

    @property
    def saves_outputs(self) -> bool:
        """Whether the backward reads the forward's outputs (they are saved with the inputs)."""
        return self.derived

    @functools.cached_property
    def grad_dtypes(self) -> tuple[torch.dtype, ...]:
        """The dtype of each output's gradient as the backward takes it (the output's)."""
        d = self.kernel.definition
        return tuple(_torch_dtype(d.tensor(name).dtype) for name in self.kernel.outputs)

    def grads(
        self,
        inputs,
        saved,
        grad_outputs,
        needs: tuple[bool, ...],
        backwards: SpecializationCache | None = None,
    ) -> tuple:
        """The inputs' gradients (``None`` where not ``needs``), shapes and dtypes checked.

        ``saved`` holds what the backward takes between the inputs and the output gradients: for a
        derived backward the kernel's outputs and then the intermediates ``forward`` returned
        after them; empty for a user-supplied backward. ``grad_outputs`` holds one tensor or
        ``None`` (a gradient known to be zero) per output of :attr:`kernel`, converted to
        :attr:`grad_dtypes` where it differs. A derived backward is asked for without the ``None``
        ones and reads the others in the layout they arrive in: the gradient of ``out.sum()`` is
        an expanded tensor (every stride 0), which the backward kernel reads in place instead of
        from a copy the size of the output, unless its shape has a size the kernel leaves
        symbolic (:attr:`~tcjit.Kernel.symbolic_sizes`): a copy then lets the backward's symbolic
        specialisation serve it (:mod:`tcjit.dynamic`: such tensors must be contiguous), where
        its layout would cost a compilation per size. A user-supplied backward gets them made contiguous,
        and zeros for the ``None`` ones. When every one is ``None`` no kernel runs: the wanted
        gradients are zeros.

        ``backwards``: where a caller whose inputs and saved tensors always have the same layout
        (one :class:`GradCall`) keeps the derived backward's specialisation per ``(needs,
        absent, strides)``, ``strides`` those of the output gradients, so that later calls run it
        without the kernel's call-time checks and lookup (the gradients' shapes are the outputs',
        as autograd checks).
        """
        kernel = self.kernel
        needs = tuple(bool(n) and isinstance(x, torch.Tensor) for n, x in zip(needs, inputs))
        if not any(needs):
            return (None,) * len(inputs)
        absent, shapes = _PRESENT, ()
        missing = [o for o, g in zip(kernel.outputs, grad_outputs) if g is None]
        if missing:
            if len(missing) == len(grad_outputs):
                return tuple(torch.zeros_like(x) if n else None for x, n in zip(inputs, needs))
            if self.derived:  # asked for without them: the key of a cached backward
                absent = frozenset(missing)
            else:  # zeros, shaped by binding the call again
                shapes = kernel.output_shapes(*inputs)
        grads_out = []
        for k, (dtype, g) in enumerate(zip(self.grad_dtypes, grad_outputs)):
            if g is not None:
                g = g if g.dtype == dtype else g.to(dtype)
                if not self.derived or (not g.is_contiguous() and self._symbolic_output(k)):
                    g = g.contiguous()
                grads_out.append(g)
            elif not self.derived:
                grads_out.append(torch.zeros(shapes[k], dtype=dtype, device=_device(inputs)))
        args = (*inputs, *saved, *grads_out)
        if backwards is not None and self.derived:
            which = (needs, absent, tuple([g.stride() for g in grads_out]))
            spec = backwards.get(which)
            if spec is None:  # what a call of the backward kernel on these arguments would run
                from .arguments import call_layouts

                key = (None, None, call_layouts(args), None)
                backward = self.backward_for(needs, absent)
                spec = backwards.keep(which, backward._specialization(key, args, None, None, None))
            # the wanted gradients, typed and shaped as their inputs by the derivation
            it = iter(spec.run(args, None))
            return tuple(next(it) if n else None for n in needs)
        backward = self.backward_for(needs, absent)
        result = backward(*args)
        result = list(result) if isinstance(result, tuple) else [result]
        if self.derived:  # the derived backward returns the wanted gradients only
            it = iter(result)
            result = [next(it) if n else None for n in needs]
        out = []
        for i, (x, g, n) in enumerate(zip(inputs, result, needs)):
            if not n:
                out.append(None)
                continue
            if g.shape != x.shape:
                raise TCCallError(
                    f"{backward.name}: gradient {i} has shape {tuple(g.shape)}, but input "
                    f"'{kernel.definition.params[i]}' of {kernel.name} has shape {tuple(x.shape)}",
                    hint="the backward kernel returns one gradient per forward input, in the inputs' shapes",
                )
            out.append(g if g.dtype == x.dtype else g.to(x.dtype))
        return tuple(out)

    def _symbolic_output(self, k: int) -> bool:
        """Whether output ``k``'s shape has a size the kernel leaves symbolic now."""
        symbolic = self.kernel.symbolic_sizes
        return bool(symbolic) and mentions(self.kernel.definition, self.kernel.outputs[k], symbolic)


_PRESENT: frozenset[str] = frozenset()  # no output's gradient is absent


def _device(inputs) -> torch.device:
    return next((x.device for x in inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))


def _torch_dtype(t):
    from .binding import torch_dtype

    return torch_dtype(t)


class GradCall:
    """A kernel's differentiable calls of one layout (options, target, inputs' dtypes, shapes and
    strides): what :class:`KernelFunction` needs, worked out on the first such call and kept by the
    kernel, so that later calls look nothing up.

    :ivar plan: the :class:`GradPlan` of the kernel (of its retyped variant for these dtypes).
    :ivar spec: the specialisation of ``plan.forward`` for the layout.
    :ivar tensors: the positions of the tensor arguments (the others are Python numbers).
    :ivar n_out: how many outputs the kernel has (``spec`` returns the saved tensors after them).
    :ivar backwards: ``(needs, absent, strides) -> specialisation`` of the derived backward for
        the layout and the output gradients' strides (filled by :meth:`GradPlan.grads`).
    :ivar constant: the positions of the outputs that are not differentiable (integer and bool
        dtypes), which the forward marks so.
    """

    __slots__ = ("backwards", "constant", "n_out", "plan", "spec", "tensors")

    #: ``function.apply(call, *inputs)`` runs the call and records it for autograd: the kernel's
    #: call path reaches :class:`KernelFunction` through the layout's ``GradCall``, with no import
    #: run on the way. (Set below, once the class exists.)
    function: type

    def __init__(self, plan: GradPlan, spec, inputs) -> None:
        self.plan = plan
        self.spec = spec
        self.tensors = tuple(i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor))
        self.n_out = len(plan.kernel.outputs)
        self.backwards = SpecializationCache()
        self.constant = tuple(
            k for k, dt in enumerate(plan.grad_dtypes) if not (dt.is_floating_point or dt.is_complex)
        )


class KernelFunction(torch.autograd.Function):
    """``apply(call, *inputs)``: run ``call.spec`` (the specialisation of the plan's forward for
    these inputs, a :class:`GradCall`) and differentiate it with the plan's backward."""

    @staticmethod
    def forward(ctx, call, *inputs):
        ctx.set_materialize_grads(False)  # an output the loss does not read: None, not zeros
        outs = call.spec.run(inputs, None)
        n_out = call.n_out
        saved = outs if call.plan.saves_outputs else outs[n_out:]
        outs = outs[:n_out]
        ctx.call = call
        tensors = call.tensors
        if len(tensors) == len(inputs):
            ctx.others = None
            ctx.save_for_backward(*inputs, *saved)
        else:
            ctx.others = {i: x for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)}
            ctx.save_for_backward(*(inputs[i] for i in tensors), *saved)
        if call.constant:
            ctx.mark_non_differentiable(*(outs[k] for k in call.constant))
        return outs[0] if n_out == 1 else outs

    @staticmethod
    def backward(ctx, *grads):
        call = ctx.call
        plan = call.plan
        if torch.is_grad_enabled():  # create_graph=True: the gradients would need a graph of their own
            raise TCCallError(
                f"{plan.kernel.name}: a double backward (create_graph=True) through a tcjit kernel is "
                "not supported: its backward kernel is not differentiable",
                hint="differentiate once (create_graph=False), or write the second derivative as "
                "a kernel of its own",
            )
        needs = ctx.needs_input_grad[1:]
        if all(g is None for g in grads):  # no gradient reached any output: as torch's operators do
            return (None,) * (1 + len(needs))
        saved = ctx.saved_tensors
        n_tensors = len(call.tensors)
        if ctx.others is None:
            inputs = saved[:n_tensors]
        else:
            it = iter(saved[:n_tensors])
            inputs = [ctx.others[i] if i in ctx.others else next(it) for i in range(len(needs))]
        return (None, *plan.grads(inputs, saved[n_tensors:], grads, needs, call.backwards))


GradCall.function = KernelFunction


def user_plan(kernel, backward) -> GradPlan:
    """The plan of a kernel with a user-supplied backward kernel (nothing saved)."""

    def backward_for(needs, absent=_PRESENT):
        return backward

    return GradPlan(kernel=kernel, forward=kernel, n_saved=0, backward_for=backward_for, derived=False)
