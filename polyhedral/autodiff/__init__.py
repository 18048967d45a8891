"""Automatic backward: reverse-mode symbolic differentiation of a checked TC definition.

:func:`derive` turns a forward definition into two TC definitions, as text that the ordinary
front-end checks and the ordinary pipeline compiles and caches:

* the **augmented forward** ``<name>__fwd`` computes what the forward does, in single-assignment
  form (a tensor written by several statements, such as ``O`` in ``O +=! ...; O = fmax(O + b, 0)``,
  gets one tensor per *version*: ``O_0`` then ``O``), and returns the forward's outputs followed by
  the intermediate versions and temporaries the backward reads (**saved**, not recomputed);
* the **backward** ``<name>__bwd`` takes the forward's inputs, its outputs, the saved
  intermediates and one gradient per output (``d_O``), and returns the gradients of the wanted
  inputs, typed with the inputs' shapes. Outputs whose gradient is known to be zero (``absent``:
  a loss that reads only the last output of several) get no ``d_O`` parameter: the adjoint of
  such an output starts from the contributions of the statements that read it, as a
  temporary's does, and what would only have flowed from its gradient is not computed.

Each statement is differentiated by the chain rule over its right-hand side, in reverse program
order. The adjoint of a read ``X(a1, ..., an)`` becomes an accumulation ``d_X(a1, ..., an) += ...``
over the statement's index variables, whose ranges and domain conditions are pinned with ``where``:

* a contraction's adjoint is another contraction: ``C(m, n) +=! A(m, r_k) * B(r_k, n)`` gives
  ``d_A(m, r_k) += d_C(m, n) * B(r_k, n)``;
* a shifted read ``I(n, c, h + r_kh, w + r_kw)`` (a convolution) is turned into a gather with domain
  conditions: a fresh index ``y`` ranges over the input, ``h = y - r_kh`` is a let-binding and
  ``0 <= h < HO`` a condition, so no iteration scatters; an affine subscript with no variable of
  coefficient +-1 to solve for stays an affine scatter (``d_X(2 * i) += ...``);
* a data-dependent read (a gather, ``LUT(I(b), d)``) becomes a scatter-add (``d_LUT(I(b), d) += ...``);
* ``max=`` / ``min=`` reductions send the gradient to the arg-extremum; ties share it evenly (as
  ``torch.amax`` does): a count of the elements equal to the result is computed first. ``fmax``,
  ``fmin``, ``max`` and ``min`` of two values split ties in halves (as ``torch.maximum``);
* ``*=`` reductions use the product of the other factors, exact with zeros (a count of zero factors
  and the product of the non-zero ones are computed first);
* ``?:`` routes the gradient to the branch taken; comparisons, integer values and casts to integers
  carry none; ``floor``, ``ceil``, ``round``, ``trunc`` and ``logb`` have derivative zero (as in
  torch); ``lgamma``, ``tgamma`` and ``nextafter`` have none that tcjit can express: a gradient that
  would flow through them raises :class:`~tcjit.polyhedral.errors.TCDerivativeError` naming the
  statement, and only if that gradient is wanted.

Gradients accumulate in the type of the tensor differentiated (a ``float16`` input's gradient is a
``float16`` tensor, rounded at each statement that adds to it).
"""

from __future__ import annotations

from .derivation import Derivation, derive

__all__ = ["Derivation", "derive"]
