"""The forward in single-assignment form: one tensor per *version* of a tensor that several
statements write (``O_0`` then ``O``), fresh names, and the errors of forwards that have no such
form (partial overwrites, accumulations onto a value of another operator)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import TCDerivativeError
from ..lang import ast as A
from ..lang.builtins import BUILTINS
from ..lang.check_signature import KEYWORDS
from ..lang.checked import CheckedDef, CheckedStatement
from ..lang.types import lookup_type


@dataclass
class Step:
    """One statement of the single-assignment forward.

    :ivar stmt: the checked statement, or ``None`` for a copy of ``prev`` into ``version``.
    :ivar version: the tensor written (a version's name).
    :ivar reads: forward tensor name -> version name, for the tensors the statement reads.
    :ivar prev: for a copy, the version copied.
    """

    stmt: CheckedStatement | None
    tensor: str
    version: str
    reads: dict[str, str]
    prev: str | None = None


@dataclass
class Version:
    """A version of a forward tensor: its name, the tensor, the operator of the statements writing
    it, and those statements (indices of :class:`Step`)."""

    name: str
    tensor: str
    op: str  # "=" or the accumulation operator of its statements
    steps: list[int] = field(default_factory=list)
    read: bool = False  # read by a statement since it was last written


class Names:
    """Fresh names that clash with nothing in the definition."""

    def __init__(self, cdef: CheckedDef):
        self.used = set(cdef.params) | set(cdef.tensors) | set(cdef.sizes)
        for st in cdef.statements:
            self.used |= set(st.vars)

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used or name in BUILTINS or name in KEYWORDS or lookup_type(name) is not None:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


def derivative_error(cdef: CheckedDef, st: CheckedStatement | None, message: str, hint: str | None = None):
    """The :class:`TCDerivativeError` pointing at ``st`` (or at the definition's name)."""
    return TCDerivativeError(
        f"automatic backward: {message}",
        source=cdef.source,
        span=st.source.span if st is not None else cdef.ast.name_span,
        where=cdef.name,
        hint=hint,
    )


def writes_every_element(cdef: CheckedDef, st: CheckedStatement) -> bool:
    """Whether ``st`` writes every element of its tensor (plain subscripts over the whole shape)."""
    if not st.plain_lhs or st.lhs_conditions:
        return False
    shape = cdef.tensor(st.tensor).shape
    for e, dim in zip(st.lhs, shape):
        r = st.range_of(e.name)
        if not (r.lo.is_const and r.lo.const == 0 and r.hi.minus_const(dim) == 0):
            return False
    return True


def single_assignment(cdef: CheckedDef, names: Names) -> tuple[list[Step], dict[str, Version]]:
    """The forward's statements with one tensor per version (see :class:`Step`)."""
    writes: dict[str, int] = {}
    for st in cdef.statements:
        writes[st.tensor] = writes.get(st.tensor, 0) + 1
    current: dict[str, Version] = {}
    versions: dict[str, Version] = {}
    steps: list[Step] = []
    count: dict[str, int] = {}

    def new_version(tensor: str, op: str, last: bool) -> Version:
        k = count.get(tensor, 0)
        count[tensor] = k + 1
        v = Version(tensor if last else names.fresh(f"{tensor}_{k}"), tensor, op)
        versions[v.name] = v
        current[tensor] = v
        return v

    for st in cdef.statements:
        reads = {}
        for node in A.walk(st.rhs):
            if isinstance(node, A.Access) and node.tensor in current:
                reads[node.tensor] = current[node.tensor].name
        for t in reads:
            current[t].read = True
        for e in st.lhs:
            for node in A.walk(e):
                if isinstance(node, A.Access) and node.tensor in current:
                    reads[node.tensor] = current[node.tensor].name
                    current[node.tensor].read = True
        writes[st.tensor] -= 1
        last = writes[st.tensor] == 0
        cur = current.get(st.tensor)
        if st.op == "=" or st.init or cur is None:
            if cur is not None and not writes_every_element(cdef, st):
                raise derivative_error(
                    cdef,
                    st,
                    f"the statement overwrites part of '{st.tensor}', which an earlier statement defined",
                    "write the parts into separate tensors",
                )
            if cur is None and not st.init and st.op not in ("=", "+="):
                raise derivative_error(
                    cdef,
                    st,
                    f"'{st.op}' without '!' starts from the zeros tcjit allocates; write '{st.op}!'",
                )
            v = new_version(st.tensor, "=" if st.op == "=" else st.op, last)
        elif cur.op == st.op and not cur.read:
            v = cur  # one more accumulation into the same version
            if last:  # the final version keeps the tensor's name
                versions.pop(v.name)
                old = v.name
                v.name = st.tensor
                versions[v.name] = v
                for s in steps:
                    if s.version == old:
                        s.version = v.name
        elif st.op == "+=":  # a sum onto a value that was read: copy it into a new version first
            prev = cur
            v = new_version(st.tensor, "+=", last)
            steps.append(Step(None, st.tensor, v.name, {st.tensor: prev.name}, prev=prev.name))
            v.steps.append(len(steps) - 1)
        else:
            raise derivative_error(
                cdef,
                st,
                f"'{st.op}' onto a value of '{st.tensor}' that was read or made by another operator",
                "accumulate into a new tensor and combine the two",
            )
        v.read = False
        steps.append(Step(st, st.tensor, v.name, reads))
        v.steps.append(len(steps) - 1)
    return steps, versions
