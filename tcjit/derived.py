"""Automatic backward: kernels derived from the forward program.

:func:`tcjit.polyhedral.autodiff.derive` writes two TC definitions: the *augmented forward*, which
returns the forward's outputs followed by the intermediates the backward reads, and a *backward* for
a set of wanted gradients. This module checks them like any source, makes :class:`~tcjit.Kernel`
objects of them (compiled and cached like any kernel) and puts them in a
:class:`~tcjit.autograd.GradPlan`. One backward kernel is derived per set of wanted inputs, so
gradients nobody asked for are not computed.

When a statement cannot be differentiated the forward still works: the plan's forward is then the
kernel itself and asking for a gradient raises the :class:`~tcjit.TCDerivativeError` that names
the statement (only if that gradient is wanted: the error is raised when deriving the backward for
the wanted inputs).
"""

from __future__ import annotations

import warnings

from .autograd import GradPlan
from .polyhedral.autodiff import Derivation, derive
from .polyhedral.errors import TCDerivativeError, TCError, TCInternalError, TCWarning
from .polyhedral.lang.check import check_source

__all__ = ["derivation", "derived_plan"]


def derivation(kernel, wanted: tuple[str, ...] | None = None) -> Derivation:
    """The derived TC text of ``kernel``'s augmented forward and backward (``tcjit show --stage
    backward`` prints it). ``wanted``: the inputs whose gradients the backward returns (``None``:
    every input of a float type)."""
    return derive(kernel.definition, wanted)


def _kernel(text: str, name: str, kernel):
    from .kernel import Kernel

    try:
        with warnings.catch_warnings():  # the user's source already warned about what it does
            warnings.simplefilter("ignore", TCWarning)
            program = check_source(text)
    except TCError as e:  # the derivation wrote a program the front-end refuses: our bug
        raise TCInternalError(
            f"automatic backward of '{kernel.name}' produced a program that does not check:\n{e}\n"
            f"--- derived program ---\n{text}"
        ) from e
    return Kernel(program, name, backward=None)


def derived_plan(kernel) -> GradPlan:
    """The :class:`~tcjit.autograd.GradPlan` of ``kernel`` with a derived backward."""
    try:
        full = derivation(kernel)
    except TCDerivativeError as e:
        error = e

        def refuse(needs):
            raise error

        return GradPlan(kernel=kernel, forward=kernel, n_saved=0, backward_for=refuse, derived=True)
    forward = _kernel(full.forward, full.forward_name, kernel)
    forward.options = kernel.options
    backwards: dict[tuple[bool, ...], object] = {}
    params = kernel.definition.params

    def backward_for(needs: tuple[bool, ...]):
        b = backwards.get(needs)
        if b is None:
            wanted = tuple(p for p, n in zip(params, needs) if n)
            for p in wanted:
                if p in full.poisoned:
                    raise full.poisoned[p]
            d = full if wanted == full.wanted else derive(kernel.definition, wanted, saved=full.saved)
            b = backwards[needs] = _kernel(d.backward, d.backward_name, kernel)
        return b

    return GradPlan(
        kernel=kernel, forward=forward, n_saved=len(full.saved), backward_for=backward_for, derived=True
    )
