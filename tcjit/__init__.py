"""tcjit: Tensor Comprehensions-style kernels for PyTorch.

Write a tensor operation in TC's Einstein notation, call it on torch tensors::

    import tcjit as tc
    matmul = tc.define('''
    def matmul(float(M, K) A, float(K, N) B) -> (C) {
        C(m, n) +=! A(m, r_k) * B(r_k, n)
    }''')
    c = matmul(a, b)

Importing tcjit is cheap: torch, isl and CuPy are loaded only when first needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .polyhedral.errors import (
    TCBoundsError,
    TCCacheError,
    TCCallError,
    TCError,
    TCInternalError,
    TCNameError,
    TCOptionsError,
    TCRangeError,
    TCSemanticError,
    TCSyntaxError,
    TCTypeError,
    TCWarning,
)

if TYPE_CHECKING:
    from .kernel import Definitions, Kernel
    from .mapping.options import MappingOptions

__version__ = "0.1.0"

__all__ = [
    "Definitions",
    "Kernel",
    "MappingOptions",
    "TCBoundsError",
    "TCCacheError",
    "TCCallError",
    "TCError",
    "TCInternalError",
    "TCNameError",
    "TCOptionsError",
    "TCRangeError",
    "TCSemanticError",
    "TCSyntaxError",
    "TCTypeError",
    "TCWarning",
    "__version__",
    "compile",
    "define",
]


def define(source: str, name: str | None = None, *, backward: str | None = "auto", options=None):
    """Parse and check TC ``source`` now; return its entry point(s) as callable kernels.

    :arg source: TC text with one or more ``def``.
    :arg name: the entry to return. With one ``def`` it may be omitted; with several and no
        ``name``, a :class:`Definitions` namespace with one :class:`Kernel` attribute per ``def``.
    :arg backward: ``"auto"`` (derive the backward when gradients are needed), the name of an
        entry of the same source taking the forward inputs followed by one gradient per output and
        returning one gradient per input, or ``None`` (forward only).
    :arg options: mapping options for every call (``None``: tuned options if stored, else defaults).
    :raises TCError: a subclass with the source line, column and a caret for any mistake.

    >>> k = define("def scale(float(N) X) -> (Y) { Y(i) = 2 * X(i) }")
    >>> k.signature
    'scale(float32(N) X) -> (float32(N) Y)'
    """
    from .kernel import define as _define

    return _define(source, name, backward=backward, options=options)


def compile(kernel, *example_inputs, options=None, target: str | None = None):
    """Compile ``kernel`` ahead of time for the layout of ``example_inputs``; return the specialisation.

    Example inputs may be tensors on the ``meta`` device (shapes, dtypes and strides, no data);
    they then stand for CPU tensors. Later calls of ``kernel`` with that layout use the result, as
    does a later process (through the on-disk cache). The returned object is callable on inputs of
    exactly that layout.

    :raises TCError: as a call would, before any code runs.
    """
    from .kernel import compile as _compile

    return _compile(kernel, *example_inputs, options=options, target=target)


def __getattr__(attr: str):
    # Heavier parts load on first use, keeping `import tcjit` cheap.
    if attr in ("Kernel", "Definitions"):
        from . import kernel

        return getattr(kernel, attr)
    if attr == "MappingOptions":
        from .mapping.options import MappingOptions

        return MappingOptions
    if attr == "reference":
        import importlib

        return importlib.import_module(".reference", __name__)
    raise AttributeError(f"module 'tcjit' has no attribute {attr!r}")
