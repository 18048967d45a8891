"""The checks of a TC definition's statements (:mod:`.check`): names and let-bindings, index
variables, reads of the tensor written, types, where conditions, range inference, and the shape of
the tensor written or the fit of the statement in it.
"""

from __future__ import annotations

import warnings

from ..errors import (
    Span,
    TCBoundsError,
    TCError,
    TCNameError,
    TCRangeError,
    TCSemanticError,
    TCTypeError,
    TCWarning,
)
from . import ast as A
from .bounds import refuse_outside_for_all_sizes
from .check_signature import SignatureChecker
from .checked import CheckedDef, CheckedStatement, TensorInfo
from .parser import MAX_DEPTH
from .ranges import Constraint, IndexRange, extreme, solve_ranges
from .typer import Typer
from .types import BOOL, FLOAT32, is_narrowing

#: Let-bindings are substituted where used; a statement whose expressions grow beyond this many
#: nodes (or MAX_DEPTH levels) that way is refused instead of taking exponential time.
MAX_EXPANDED_NODES = 20_000


class DefChecker(SignatureChecker):
    """Checks one definition: its signature, then its statements in program order (:meth:`run`)."""

    # ---------------------------------------------------------------------------------- statements
    def run(self) -> CheckedDef:
        self.signature()
        stmts = tuple(self.statement(s, k) for k, s in enumerate(self.d.body))
        for r in self.d.returns:
            if r.name not in self.defined:
                raise self.err(TCSemanticError, f"output '{r.name}' is never written", r.span)
        infos = tuple(self.tensors.values())
        return CheckedDef(
            ast=self.d,
            source=self.source,
            sizes=tuple(self.sizes),
            params=tuple(p.name for p in self.d.params),
            outputs=tuple(r.name for r in self.d.returns),
            temporaries=tuple(self.temporaries),
            tensor_infos=infos,
            scalar_args=tuple(self.scalars.values()),
            statements=stmts,
        )

    def statement(self, s: A.Statement, k: int) -> CheckedStatement:
        name = s.tensor
        if name in self.scalars or (name in self.tensors and self.tensors[name].role == "input"):
            raise self.err(
                TCSemanticError, f"cannot write to input '{name}': inputs are immutable", s.lhs_span
            )
        if name in self.size_spans:
            raise self.err(TCSemanticError, f"cannot write to size '{name}'", s.lhs_span)
        self.fresh_name(name, s.lhs_span, "tensor")
        target = self.tensors.get(name)
        if target is not None and target.rank != len(s.indices) and (name in self.defined or target.declared):
            what = "output" if target.role == "output" else "tensor"
            raise self.err(
                TCTypeError,
                f"wrong number of dimensions: {what} '{name}' has rank {target.rank}, "
                f"written with {len(s.indices)} subscript{'s' if len(s.indices) != 1 else ''}",
                s.lhs_span,
            )

        # ---- names of the statement: left-hand side variables, where clauses, lets.
        lhs_vars: list[str] = []
        for e in s.indices:
            if isinstance(e, A.Ident):
                self.check_index_name(e.name, e.span)
                if e.name not in lhs_vars:
                    lhs_vars.append(e.name)
            elif not s.is_reduction:
                raise self.err(
                    TCSemanticError,
                    "left-hand side subscripts of '=' must be index variables",
                    e.span,
                    hint="affine (2 * h + r_kh) and gathered (I(b)) subscripts are allowed for "
                    "accumulations (+=, +=!, ...)",
                )
        lets: dict[str, A.Expr] = {}
        range_clauses: dict[str, A.RangeClause] = {}
        conditions: list[A.ConditionClause] = []
        exists: list[A.Access] = []
        for c in s.where:
            if isinstance(c, A.LetClause):
                if c.name in lets or c.name in lhs_vars or self.is_bound(c.name):
                    raise self.err(TCNameError, f"let-binding '{c.name}' shadows another name", c.span)
                self.fresh_name(c.name, c.span, "let-binding")
                lets[c.name] = self._substitute(c.value, lets)
            elif isinstance(c, A.RangeClause):
                self.check_index_name(c.var, c.span)
                if c.var in range_clauses:
                    raise self.err(TCNameError, f"two ranges given for index '{c.var}'", c.span)
                range_clauses[c.var] = c
            elif isinstance(c, A.ExistsClause):
                exists.append(c.access)
            else:
                conditions.append(c)
        rhs = self._substitute(s.rhs, lets)
        lhs_exprs = tuple(self._substitute(e, lets) for e in s.indices)
        cond_exprs = [self._substitute(c.cond, lets) for c in conditions]
        if lets:
            self._check_expanded_size([rhs, *lhs_exprs, *cond_exprs], s.span)

        # ---- calls of names that are neither tensors nor builtins.
        for e in (rhs, *lhs_exprs, *exists):
            for node in A.walk(e):
                if isinstance(node, A.Access) and not self.is_bound(node.tensor):
                    if not any(st.tensor == node.tensor for st in self.d.body):
                        raise self.err(
                            TCNameError, f"undefined tensor or function '{node.tensor}'", node.span
                        )

        # ---- index variables: the left-hand side's, then any name used in a subscript.
        index_names: list[str] = list(lhs_vars)

        def add_free(root: A.Expr) -> None:
            for node in A.walk(root):
                if (
                    isinstance(node, A.Ident)
                    and self.is_free(node.name, lets)
                    and node.name not in index_names
                ):
                    index_names.append(node.name)

        def add_subscripts(root: A.Expr) -> None:
            for node in A.walk(root):
                if isinstance(node, A.Access):
                    for a in node.args:
                        add_free(a)

        for e in lhs_exprs:
            add_free(e)
            add_subscripts(e)
        add_subscripts(rhs)
        for acc in exists:
            add_subscripts(acc)
        for var in range_clauses:
            if var not in index_names:
                index_names.append(var)
        for ce in cond_exprs:
            add_free(ce)
        for nm in index_names:
            if nm not in lhs_vars:
                self.check_index_name(nm, self._first_use(nm, rhs, s) or s.span)
        reduction_vars = [v for v in index_names if v not in lhs_vars]

        if not s.is_reduction and reduction_vars:
            v = reduction_vars[0]
            raise self.err(
                TCSemanticError,
                f"reduction index '{v}' used with '='",
                self._first_use(v, rhs, s) or s.span,
                hint=f"'{v}' appears only on the right-hand side, so the statement reduces over it: "
                "use +=!, *=!, min=! or max=!",
            )

        # ---- reads of the tensor being written: never in a left-hand side subscript (a scatter
        # through the tensor it updates), else only at the element written.
        for e in lhs_exprs:
            for node in A.walk(e):
                if isinstance(node, A.Access) and node.tensor == name:
                    raise self.err(
                        TCSemanticError,
                        f"a left-hand side subscript may not read '{name}', the tensor the statement writes",
                        node.span,
                        hint="compute the subscripts into another tensor first",
                    )
        for node in A.walk(rhs):
            if (
                isinstance(node, (A.Access, A.Ident))
                and getattr(node, "tensor", getattr(node, "name", None)) == name
            ):
                if name not in self.defined:
                    raise self.err(
                        TCSemanticError, f"'{name}' is read before any statement defines it", node.span
                    )
                if s.is_reduction:
                    raise self.err(
                        TCSemanticError,
                        f"a reduction into '{name}' may not read '{name}'",
                        node.span,
                        hint="the partially reduced values would be read; use a temporary",
                    )
                args = node.args if isinstance(node, A.Access) else ()
                if args != lhs_exprs:
                    raise self.err(
                        TCSemanticError,
                        f"'{name}' is read at other elements than the statement writes",
                        node.span,
                        hint="a statement may read the tensor it assigns only at the element it assigns",
                    )

        # ---- types.
        index_set = set(index_names)
        declared_type = self.declared_type(name)
        if target is not None:
            declared_type = target.dtype
        float_type = declared_type if declared_type is not None and declared_type.is_float else FLOAT32
        typer = Typer(self, index_set, float_type)
        rhs_typed, rhs_ty = typer.expr(rhs)
        lhs_typed = tuple(typer.subscript(e, name) for e in lhs_exprs)
        cond_typed = []
        for ce, c in zip(cond_exprs, conditions):
            te, ty = typer.expr(ce)
            if ty.t != BOOL:
                raise self.err(TCTypeError, f"a where condition must be boolean, got {ty.t}", c.span)
            self._check_affine_condition(te, index_set, c.span)
            cond_typed.append(te)
        for acc in exists:
            typer.expr(acc)
        if s.equivalent is not None:  # TC's `<=>`: checked like the right-hand side, then ignored
            for arg in s.equivalent.args:
                e = self._substitute(arg, lets)
                for node in A.walk(e):
                    unknown = isinstance(node, A.Ident) and self.is_free(node.name, lets)
                    if unknown and node.name not in index_set:
                        raise self.err(
                            TCNameError, f"'{node.name}' after '<=>' is no name of the statement", node.span
                        )
                    if isinstance(node, A.Access) and not self.is_bound(node.tensor):
                        raise self.err(
                            TCNameError, f"undefined tensor or function '{node.tensor}'", node.span
                        )
                typer.expr(e)

        if declared_type is not None:
            dtype = declared_type
            if rhs_ty.weak == "float" and not dtype.is_float:
                raise self.err(
                    TCTypeError, f"narrowing assignment of a float value to {dtype} '{name}'", s.span
                )
            if rhs_ty.weak is None and is_narrowing(rhs_ty.t, dtype):
                article = "an" if rhs_ty.t.name[0] in "aeiou" else "a"
                raise self.err(
                    TCTypeError,
                    f"narrowing assignment of {article} {rhs_ty.t} value to {dtype} '{name}'",
                    s.span,
                    hint=f"convert explicitly, e.g. {dtype}(...)",
                )
            value_type = dtype if rhs_ty.weak else rhs_ty.t
        else:
            dtype = rhs_ty.t if rhs_ty.weak in (None, "int", "idx") else float_type
            value_type = dtype
        rhs_typed = typer.coerce(rhs_typed, rhs_ty, value_type)

        # ---- ranges.
        ranges = self._ranges(s, index_names, range_clauses, rhs_typed, exists, lhs_typed, index_set)

        # ---- the tensor written: shape on first definition, fit checks afterwards.
        if name not in self.defined and not s.init and s.is_reduction:
            warnings.warn(
                f"{self.d.name}:{s.span.line}: '{s.op}' accumulates into '{name}', which no earlier "
                f"statement initialises; it starts from zero (use '{s.op}!' to say so)",
                TCWarning,
                stacklevel=4,
            )
        affines = [self.affine(e, index_set) for e in lhs_typed]
        if target is None or not (name in self.defined or target.declared):
            shape = []
            for e, aff in zip(lhs_typed, affines):
                if aff is None:
                    raise self.err(
                        TCSemanticError,
                        "the shape of a tensor cannot follow from a non-affine subscript",
                        e.span,
                        hint="declare the output with its sizes in the signature",
                    )
                lo = extreme(aff, ranges, upper=False)
                if lo.is_const and lo.const < 0:
                    raise self.err(
                        TCRangeError,
                        f"subscript of '{name}' can be negative (down to {lo})",
                        e.span,
                        hint="the ranges follow from the right-hand side: "
                        + ", ".join(str(ranges[v]) for v in aff.vars),
                    )
                shape.append(extreme(aff, ranges, upper=True) + 1)
            role = "output" if name in self.declared_outputs else "temporary"
            if role == "temporary" and name not in self.temporaries:
                self.temporaries.append(name)
            self.tensors[name] = TensorInfo(name, role, dtype, tuple(shape), False, s.lhs_span)
        else:
            for dim, (e, aff) in enumerate(zip(lhs_typed, affines)):
                if aff is None:
                    continue
                low = extreme(aff, ranges, upper=False)
                if low.is_const and low.const < 0:
                    raise self.err(
                        TCRangeError, f"subscript of '{name}' can be negative (down to {low})", e.span
                    )
                top = extreme(aff, ranges, upper=True) + 1
                over = top.minus_const(self.tensors[name].shape[dim])
                if over is not None and over > 0:
                    raise self.err(
                        TCRangeError,
                        f"writes '{name}' beyond dimension {dim} (size {self.tensors[name].shape[dim]}), "
                        f"up to {top}",
                        e.span,
                    )
        self.defined.add(name)
        checked = CheckedStatement(
            source=s,
            tensor=name,
            lhs=lhs_typed,
            op=s.op,
            init=s.init,
            rhs=rhs_typed,
            lhs_vars=tuple(lhs_vars),
            reduction_vars=tuple(reduction_vars),
            ranges=tuple(ranges[v] for v in lhs_vars + reduction_vars),
            conditions=tuple(cond_typed),
            float_type=float_type,
            value_type=value_type,
        )
        if not checked.conditions:
            refuse_outside_for_all_sizes(
                checked,
                ranges,
                lambda e: self.affine(e, index_set),
                lambda t, k: self.tensors[t].shape[k],
                lambda message, span, hint: self.err(TCBoundsError, message, span, hint),
            )
        return checked

    def _check_expanded_size(self, exprs: list[A.Expr], span: Span) -> None:
        """Refuse let-substituted trees too deep or too large to check (shared subtrees counted once
        per use: that is what every later pass walks)."""
        size: dict[int, int] = {}
        depth: dict[int, int] = {}
        stack = [(e, False) for e in exprs]
        while stack:
            node, done = stack.pop()
            if id(node) in size:
                continue
            kids = A.children(node)
            if not done:
                stack.append((node, True))
                stack.extend((k, False) for k in kids if id(k) not in size)
                continue
            size[id(node)] = 1 + sum(size[id(k)] for k in kids)
            depth[id(node)] = 1 + max((depth[id(k)] for k in kids), default=0)
            if size[id(node)] > MAX_EXPANDED_NODES or depth[id(node)] > MAX_DEPTH:
                raise self.err(
                    TCSemanticError,
                    f"substituting the let-bindings makes this statement too large to compile "
                    f"(over {MAX_EXPANDED_NODES} nodes or {MAX_DEPTH} levels)",
                    span,
                    hint="compute the shared parts in temporaries instead",
                )

    def _substitute(self, e: A.Expr, lets: dict[str, A.Expr]) -> A.Expr:
        if not lets:
            return e
        if isinstance(e, A.Ident) and e.name in lets:
            return lets[e.name]
        kids = A.children(e)
        if not kids:
            return e
        return A.with_children(e, tuple(self._substitute(k, lets) for k in kids))

    def _first_use(self, var: str, rhs: A.Expr, s: A.Statement) -> Span | None:
        for root in (rhs, *s.indices):
            for node in A.walk(root):
                if isinstance(node, A.Ident) and node.name == var:
                    return node.span
        for c in s.where:
            if isinstance(c, A.RangeClause) and c.var == var:
                return c.span
        return None

    def _check_affine_condition(self, e: A.Expr, index_set: set[str], span: Span) -> None:
        for node in A.walk(e):
            if isinstance(node, A.Access):
                raise self.err(
                    TCTypeError, "tensor access where none is allowed (a where condition)", node.span
                )
        parts = [e]
        while parts:
            p = parts.pop()
            if isinstance(p, A.Binary) and p.op in ("&&",):
                parts += [p.lhs, p.rhs]
            elif isinstance(p, A.Binary) and p.op in ("<", "<=", ">", ">=", "=="):
                if self.affine(p.lhs, index_set) is None or self.affine(p.rhs, index_set) is None:
                    raise self.err(
                        TCTypeError, "a where condition must compare affine index expressions", p.span
                    )
            else:
                raise self.err(
                    TCTypeError,
                    "a where condition must be comparisons of affine index expressions joined by &&",
                    p.span,
                )

    # ------------------------------------------------------------------------------------ ranges
    def _ranges(self, s, index_names, range_clauses, rhs, exists, lhs_typed, index_set):
        fixed: dict[str, IndexRange] = {}
        for var, c in range_clauses.items():
            lo = self.size_expr(c.lo, "the bounds of a range")
            hi = self.size_expr(c.hi, "the bounds of a range")
            fixed[var] = IndexRange(var, lo, hi)
        constraints: list[Constraint] = []

        def add_accesses(e: A.Expr) -> None:
            for node in A.walk(e):
                if isinstance(node, A.Access) and node.args:
                    shape = self.tensors[node.tensor].shape
                    for arg, bound in zip(node.args, shape):
                        aff = self.affine(arg, index_set)
                        if aff is not None and aff.vars:
                            constraints.append(Constraint(aff, bound, arg))

        add_accesses(rhs)
        for acc in exists:
            add_accesses(acc)

        def unsolved(var: str) -> TCError:
            where = self._first_use(var, s.rhs, s) or s.lhs_span
            return self.err(
                TCRangeError,
                f"cannot infer the range of index '{var}'",
                where,
                hint=f"'{var}' is not a plain subscript of any tensor read; add 'where {var} in LO:HI'",
            )

        ranges = solve_ranges(index_names, fixed, constraints, unsolved)
        for v in index_names:
            r = ranges[v]
            ext = r.extent
            if ext.bounds()[1] <= 0:
                raise self.err(
                    TCRangeError,
                    f"empty range for index '{v}': {r}",
                    self._first_use(v, s.rhs, s) or s.lhs_span,
                )
        return ranges
