"""Keyword arguments named after a kernel's parameters, bound as Python binds a function's.

``k(x, W=w, bias=b)`` is ``k(x, w, b)``: positional arguments fill the parameters in order, keywords
the parameters they name. The call's own keywords come first, as for any Python function with
keyword-only parameters: ``outputs``, ``options`` and ``target`` (:data:`CALL_KEYWORDS`) always
mean what they mean for every kernel, so a TC parameter with one of these names is passed
positionally; the same holds for :func:`tcjit.compile` and for :func:`tcjit.autotune`, whose own
keywords (the tuner's settings) come first as well. Mistakes are a :class:`~tcjit.TCCallError`
naming the parameter, with the kernel's signature, as Python's ``TypeError`` would name them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from .mapping.option_values import TARGETS
from .polyhedral.errors import TCCallError
from .polyhedral.lang.checked import CheckedDef

__all__ = [
    "CALL_KEYWORDS",
    "bind_arguments",
    "call_layouts",
    "call_layouts_and_grad",
    "check_target",
    "keyword_clash_hint",
]

CALL_KEYWORDS: tuple[str, ...] = ("outputs", "options", "target")
"""The keywords of a kernel call itself (``kernel(*inputs, outputs=, options=, target=)``)."""


def bind_arguments(
    cdef: CheckedDef,
    inputs: Sequence[object],
    named: Mapping[str, object],
    *,
    reserved: Collection[str] = CALL_KEYWORDS,
) -> tuple:
    """The arguments of a call of ``cdef`` in parameter order: ``inputs`` fill the first
    parameters, ``named`` (parameter name -> value) the others.

    :arg reserved: the caller's own keywords, named in the hint when a parameter they shadow is
        missing (it must be passed positionally).
    :raises TCCallError: more positional arguments than parameters, a keyword that names no
        parameter, a parameter given twice (by position and by keyword), or a parameter given no
        value.

    >>> bind_arguments(fcrelu.definition, (x,), {"bias": b, "W": w}) == (x, w, b)
    True
    """
    if not named:
        return tuple(inputs)
    params = cdef.params
    if len(inputs) > len(params):
        raise TCCallError(
            f"{cdef.name}() takes {len(params)} input{'s' if len(params) != 1 else ''} but "
            f"{len(inputs)} positional ones were given (and {len(named)} by keyword); {_signature(cdef)}",
            where=cdef.name,
        )
    bound = dict(zip(params, inputs))
    for name, value in named.items():
        if name not in params:
            raise TCCallError(
                f"{cdef.name}() got an unexpected keyword argument {name!r}; {_signature(cdef)}",
                where=cdef.name,
                hint=f"its parameters are {', '.join(params)}",
            )
        if name in bound:
            raise TCCallError(
                f"{cdef.name}() got multiple values for argument {name!r} (by position and by keyword); "
                f"{_signature(cdef)}",
                where=cdef.name,
            )
        bound[name] = value
    missing = [p for p in params if p not in bound]
    if missing:
        listed = ", ".join(repr(p) for p in missing)
        raise TCCallError(
            f"{cdef.name}() missing {len(missing)} required argument{'s' if len(missing) != 1 else ''}: "
            f"{listed}; {_signature(cdef)}",
            where=cdef.name,
            hint=keyword_clash_hint(cdef, reserved),
        )
    return tuple(bound[p] for p in params)


def keyword_clash_hint(cdef: CheckedDef, reserved: Collection[str] = CALL_KEYWORDS) -> str | None:
    """The hint for a call that lacks an argument when a parameter of ``cdef`` is named like one of
    the caller's own keywords (``reserved``): that keyword went to the call, not to the parameter.
    ``None`` when no parameter is."""
    clashes = [p for p in cdef.params if p in reserved]
    if not clashes:
        return None
    names = ", ".join(repr(p) for p in clashes)
    if len(clashes) == 1:
        said = f"{names} is also a keyword of the call itself, which takes it"
    else:
        said = f"{names} are also keywords of the call itself, which take them"
    return f"{said}: pass the parameter{'s' if len(clashes) > 1 else ''} {names} positionally"


def _signature(cdef: CheckedDef) -> str:
    # built only for a message: under torch.compile, Dynamo traces the binding of valid calls
    return f"the kernel is {cdef.signature()}"


def check_target(target: object) -> None:
    """Refuse a ``target=`` that names no target (None, the default, is the tensors' device's)."""
    if target is not None and target not in TARGETS:
        raise TCCallError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")


def call_layouts(args, meta_as: str | None = None) -> tuple:
    """What a specialisation is kept by for ``args``: each tensor's dtype, shape, strides and
    device (``meta_as`` for a meta tensor's, where given), each other argument's type."""
    return call_layouts_and_grad(args, meta_as)[0]


def call_layouts_and_grad(args, meta_as: str | None = None) -> tuple[tuple, bool]:
    """``(call_layouts(args, meta_as), whether a tensor among args requires grad)`` in one pass over
    them: the call path of every kernel call, where a second pass cost as much as the lookup it
    leads to."""
    import torch

    out = []
    grad = False
    for x in args:
        if isinstance(x, torch.Tensor):
            device = torch.device(meta_as) if meta_as and x.device.type == "meta" else x.device
            out.append((x.dtype, x.shape, x.stride(), device))
            if x.requires_grad:
                grad = True
        else:
            out.append(type(x))
    return tuple(out), grad
