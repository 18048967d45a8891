"""Gradients through tcjit kernels: calls wrapped in a ``torch.autograd.Function``.

A call of a :class:`~tcjit.Kernel` whose tensor inputs require grad, with grad mode on, goes through
:class:`KernelFunction`:

* **forward** runs the kernel's compiled specialisation for the call's layout, as a call without
  gradients would (the same specialisation, options and target);
* **backward** runs the *backward kernel* on the forward inputs followed by the gradients of the
  outputs (made contiguous; an output that received no gradient gets zeros), and returns its
  outputs as the inputs' gradients, checked against the inputs' shapes. Inputs that do not require
  grad get ``None``; integer outputs are not differentiable (``mark_non_differentiable``).

The backward kernel is, as in Tensor Comprehensions, an entry of the same source named by
``tcjit.define(source, name, backward="entry")``, or any kernel given to :func:`make_autograd`: it
takes the forward inputs followed by one gradient per output and returns one gradient per input.
``backward="auto"`` (derived from the forward program) is not built yet and raises
:class:`~tcjit.TCCallError` when a gradient is needed; ``backward=None`` declares the kernel
forward-only. Backward passes are not themselves differentiable: a backward with
``create_graph=True`` (a double backward's first step) raises :class:`~tcjit.TCCallError`.
"""

from __future__ import annotations

import torch

from .polyhedral.errors import TCCallError

__all__ = ["KernelFunction", "make_autograd"]


class KernelFunction(torch.autograd.Function):
    """``apply(kernel, backward, spec, *inputs)``: run ``spec`` (``kernel``'s specialisation for
    these inputs) and differentiate it with the ``backward`` kernel."""

    @staticmethod
    def forward(ctx, kernel, backward, spec, *inputs):
        outs = spec.run(inputs, None)
        ctx.kernel, ctx.backward_kernel = kernel, backward
        tensors = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
        ctx.others = {i: x for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)}
        ctx.n_inputs = len(inputs)
        ctx.save_for_backward(*(inputs[i] for i in tensors))
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in outs]
        not_differentiable = [o for o in outs if not (o.is_floating_point() or o.is_complex())]
        if not_differentiable:
            ctx.mark_non_differentiable(*not_differentiable)
        return outs[0] if len(outs) == 1 else outs

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():  # create_graph=True: the gradients would need a graph of their own
            raise TCCallError(
                f"{ctx.kernel.name}: a double backward (create_graph=True) through a tcjit kernel is "
                "not supported: its backward kernel is not differentiable",
                hint="differentiate once (create_graph=False), or write the second derivative as "
                "a kernel of its own",
            )
        return KernelFunction._backward(ctx, *grads)

    @staticmethod
    def _backward(ctx, *grads):
        saved = iter(ctx.saved_tensors)
        inputs = [ctx.others[i] if i in ctx.others else next(saved) for i in range(ctx.n_inputs)]
        grads_out = [
            torch.zeros(shape, dtype=dtype, device=device) if g is None else g.contiguous()
            for g, (shape, dtype, device) in zip(grads, ctx.out_meta)
        ]
        result = ctx.backward_kernel(*inputs, *grads_out)
        result = result if isinstance(result, tuple) else (result,)
        grads_in = []
        for i, (x, g) in enumerate(zip(inputs, result)):
            if not (isinstance(x, torch.Tensor) and ctx.needs_input_grad[3 + i]):
                grads_in.append(None)
                continue
            if g.shape != x.shape:
                name = ctx.kernel.definition.params[i]
                raise TCCallError(
                    f"{ctx.backward_kernel.name}: gradient {i} has shape {tuple(g.shape)}, but input "
                    f"'{name}' of {ctx.kernel.name} has shape {tuple(x.shape)}",
                    hint="the backward kernel returns one gradient per forward input, in the inputs' shapes",
                )
            grads_in.append(g.to(x.dtype))
        return (None, None, None, *grads_in)


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

    :returns: a :class:`~tcjit.Kernel` sharing ``forward_kernel``'s definition and options.
    :raises TCCallError: an argument is not a kernel, or the backward's parameters and outputs do
        not match the forward's.
    """
    from .kernel import Kernel, backward_arity_problem

    for what, k in (("forward_kernel", forward_kernel), ("backward_kernel", backward_kernel)):
        if not isinstance(k, Kernel):
            raise TCCallError(f"make_autograd: {what} must be a tcjit Kernel, got {type(k).__name__}")
    problem = backward_arity_problem(forward_kernel.definition, backward_kernel.definition)
    if problem is not None:
        raise TCCallError(problem)
    return Kernel(
        forward_kernel.program, forward_kernel.name, backward=backward_kernel, options=forward_kernel.options
    )
