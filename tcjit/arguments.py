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

from .polyhedral.errors import TCCallError
from .polyhedral.lang.checked import CheckedDef

__all__ = ["CALL_KEYWORDS", "bind_arguments", "bind_tuning_arguments", "keyword_clash_hint"]

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


def bind_tuning_arguments(
    kernel, inputs: Sequence[object], keywords: Mapping[str, object]
) -> tuple[tuple, dict]:
    """``(inputs, settings)`` of an :func:`~tcjit.autotune` call: the keywords that name the
    tuner's settings (the keyword parameters of :func:`tcjit.tuning.tune_kernel`) stay settings,
    the others are the kernel's arguments, bound as for a call (:func:`bind_arguments`).

    :raises TCCallError: a keyword is neither a setting nor a parameter, or the arguments do not
        bind.
    """
    import inspect

    from .tuning import tune_kernel

    definition = getattr(kernel, "definition", None)
    if not isinstance(definition, CheckedDef):
        return tuple(inputs), dict(keywords)  # autotune reports what kernel should be
    tuner = [p.name for p in inspect.signature(tune_kernel).parameters.values() if p.kind is p.KEYWORD_ONLY]
    settings = {k: v for k, v in keywords.items() if k in tuner}
    named = {k: v for k, v in keywords.items() if k not in tuner}
    for name in named:
        if name not in definition.params:
            raise TCCallError(
                f"autotune: {name!r} is neither a tuner setting ({', '.join(tuner)}) nor a parameter of "
                f"{definition.name} ({', '.join(definition.params)})"
            )
    return bind_arguments(definition, inputs, named, reserved=tuner), settings


def _signature(cdef: CheckedDef) -> str:
    # built only for a message: under torch.compile, Dynamo traces the binding of valid calls
    return f"the kernel is {cdef.signature()}"
