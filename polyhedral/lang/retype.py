"""Retyping a definition's floating types: the variants that calls with other float dtypes run [ext].

Floating types written in a TC definition are defaults. A call that passes, say, float64 tensors
for parameters declared ``float`` runs the definition with ``float32`` replaced by ``float64``
everywhere a type is *written*: parameter declarations (tensors and rank-0 scalars), typed
outputs and conversions in the body (``float(x)``). Everything else follows from those by the
ordinary typing rules: float literals take the statement's float type, inferred outputs and
temporaries the type of what is stored into them. The substitution is simultaneous
(``{float16: float32, float32: float16}`` swaps the two) and never touches integer or bool types.

The result is a new AST (spans kept, so errors in it point at the user's text) that is checked
like any source; how a call's dtypes choose the substitution is :func:`tcjit.binding.float_substitution`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from . import ast as A
from .types import SCALAR_TYPES

__all__ = ["retype_def", "retype_expr", "retype_program"]


def _check_substitution(sigma: Mapping[str, str]) -> None:
    for a, b in sigma.items():
        for name in (a, b):
            t = SCALAR_TYPES.get(name)
            if t is None or not t.is_float:
                raise ValueError(
                    f"a retyping maps canonical float type names to float type names, got {a!r}: {b!r}"
                )


def retype_expr(e: A.Expr, sigma: Mapping[str, str]) -> A.Expr:
    """``e`` with every conversion ``T(x)`` whose ``T`` is a key of ``sigma`` made ``sigma[T](x)``."""
    if isinstance(e, A.Cast):
        return replace(e, to=sigma.get(e.to, e.to), arg=retype_expr(e.arg, sigma))
    kids = A.children(e)
    return A.with_children(e, tuple(retype_expr(k, sigma) for k in kids)) if kids else e


def _dims(dims: tuple[A.Dim, ...] | None, sigma) -> tuple[A.Dim, ...] | None:
    if dims is None:
        return None
    return tuple(
        d if isinstance(d.value, (int, str)) else replace(d, value=retype_expr(d.value, sigma)) for d in dims
    )


def _clause(c: A.Clause, sigma) -> A.Clause:
    if isinstance(c, A.RangeClause):
        return replace(c, lo=retype_expr(c.lo, sigma), hi=retype_expr(c.hi, sigma))
    if isinstance(c, A.ExistsClause):
        return replace(c, access=retype_expr(c.access, sigma))
    if isinstance(c, A.LetClause):
        return replace(c, value=retype_expr(c.value, sigma))
    return replace(c, cond=retype_expr(c.cond, sigma))


def _statement(s: A.Statement, sigma) -> A.Statement:
    return replace(
        s,
        indices=tuple(retype_expr(i, sigma) for i in s.indices),
        rhs=retype_expr(s.rhs, sigma),
        where=tuple(_clause(c, sigma) for c in s.where),
    )


def retype_def(d: A.Def, sigma: Mapping[str, str]) -> A.Def:
    """``d`` with the float types ``sigma`` maps (canonical names, e.g. ``{"float32": "float64"}``)
    replaced in its parameter and output declarations and in the conversions of its body.

    Integer and bool types are kept; spans are kept (errors point at the text ``d`` came from).

    :raises ValueError: ``sigma`` maps a name that is not a canonical float type, or to one.
    """
    _check_substitution(sigma)
    if not sigma:
        return d
    return replace(
        d,
        params=tuple(
            replace(p, type_name=sigma.get(p.type_name, p.type_name), dims=_dims(p.dims, sigma))
            for p in d.params
        ),
        returns=tuple(
            r
            if r.type_name is None
            else replace(r, type_name=sigma.get(r.type_name, r.type_name), dims=_dims(r.dims, sigma))
            for r in d.returns
        ),
        body=tuple(_statement(s, sigma) for s in d.body),
    )


def retype_program(
    program: A.Program, sigma: Mapping[str, str], names: tuple[str, ...] | None = None
) -> A.Program:
    """The definitions of ``program`` named in ``names`` (all when ``None``), in program order,
    each retyped by :func:`retype_def`; the source text is kept for diagnostics."""
    keep = program.defs if names is None else tuple(d for d in program.defs if d.name in names)
    return A.Program(tuple(retype_def(d, sigma) for d in keep), program.source)
