"""Automatic backward: kernels derived from the forward program.

:func:`tcjit.polyhedral.autodiff.derive` writes two TC definitions: the *augmented forward*, which
returns the forward's outputs followed by the intermediates the backward reads, and a *backward* for
a set of wanted gradients. This module checks them like any source, makes :class:`~tcjit.Kernel`
objects of them (compiled and cached like any kernel) and puts them in a
:class:`~tcjit.autograd.GradPlan`. One backward kernel is derived per set of wanted inputs and set
of outputs whose gradient is absent (``None``: a loss that reads some outputs only), so gradients
nobody asked for are not computed, and outputs nobody differentiated cost no zero-filled tensors.

When a statement cannot be differentiated the forward still works: the plan's forward is then the
kernel itself and asking for a gradient raises the :class:`~tcjit.TCDerivativeError` that names
the statement (only if that gradient is wanted: the error is raised when deriving the backward for
the wanted inputs).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from .autograd import GradPlan
from .kernel_protocol import KernelLike
from .polyhedral.autodiff import Derivation, derive
from .polyhedral.errors import TCDerivativeError, TCError, TCInternalError, TCWarning
from .polyhedral.lang.check import check_source
from .polyhedral.lang.checked import CheckedProgram

__all__ = ["derivation", "derived_plan"]


def derivation(
    kernel: KernelLike, wanted: tuple[str, ...] | None = None, absent: frozenset[str] = frozenset()
) -> Derivation:
    """The derived TC text of ``kernel``'s augmented forward and backward (``tcjit show --stage
    backward`` prints it). ``wanted``: the inputs whose gradients the backward returns (``None``:
    every input of a float type); ``absent``: the outputs whose gradient the backward does not
    take (known to be zero)."""
    return derive(kernel.definition, wanted, absent=absent)


def _kernel(
    text: str, name: str, kernel: KernelLike, make_kernel: Callable[[CheckedProgram, str], KernelLike]
) -> KernelLike:
    """The kernel of entry ``name`` of the derived program ``text`` (checked here), made by
    ``make_kernel``."""
    try:
        with warnings.catch_warnings():  # the user's source already warned about what it does
            warnings.simplefilter("ignore", TCWarning)
            program = check_source(text)
    except TCError as e:  # the derivation wrote a program the front-end refuses: our bug
        raise TCInternalError(
            f"automatic backward of '{kernel.name}' produced a program that does not check:\n{e}\n"
            f"--- derived program ---\n{text}"
        ) from e
    return make_kernel(program, name)


def derived_plan(kernel: KernelLike, make_kernel: Callable[[CheckedProgram, str], KernelLike]) -> GradPlan:
    """The :class:`~tcjit.autograd.GradPlan` of ``kernel`` with a derived backward.

    :arg make_kernel: ``(program, name) -> kernel``: a forward-only :class:`~tcjit.Kernel` of the
        entry ``name`` of a checked program (the derived forward and backwards are made so). The
        caller, :meth:`Kernel.grad_plan`, passes it: this module does not import
        :mod:`tcjit.kernel`, which imports it.
    """
    try:
        full = derivation(kernel)
    except TCDerivativeError as e:
        error = e

        def refuse(needs, absent=frozenset()):
            raise error

        return GradPlan(kernel=kernel, forward=kernel, n_saved=0, backward_for=refuse, derived=True)
    forward = _kernel(full.forward, full.forward_name, kernel, make_kernel)
    forward.options = kernel.options
    backwards: dict[tuple, object] = {}
    params = kernel.definition.params

    def backward_for(needs: tuple[bool, ...], absent: frozenset[str] = frozenset()):
        """The backward returning the gradients of the inputs ``needs`` marks, taking the
        gradients of the outputs not in ``absent``; derived and checked once per pair."""
        key = (needs, absent)
        b = backwards.get(key)
        if b is None:
            wanted = tuple(p for p, n in zip(params, needs) if n)
            if not absent:  # with absent outputs a poisoned gradient may no longer flow: derive
                for p in wanted:
                    if p in full.poisoned:
                        raise full.poisoned[p]
            if wanted == full.wanted and not absent:
                d = full
            else:
                d = derive(kernel.definition, wanted, saved=full.saved, absent=absent)
            b = backwards[key] = _kernel(d.backward, d.backward_name, kernel, make_kernel)
        return b

    return GradPlan(
        kernel=kernel, forward=forward, n_saved=len(full.saved), backward_for=backward_for, derived=True
    )
