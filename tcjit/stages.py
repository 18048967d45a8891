"""The names of the front stages and the text of the one the polyhedral layer does not print:
what :func:`tcjit.pipeline.front_stage` composes.

Light to import (no torch, no isl), so that the command line can list the stages without loading
the compiler.
"""

from __future__ import annotations

from collections.abc import Mapping

from .polyhedral.lang.checked import CheckedDef

__all__ = ["DEFAULT_FUSION", "FRONT_STAGES", "checked_text"]

#: The stages before the mapping, as :func:`tcjit.pipeline.front_stage` names them.
FRONT_STAGES = ("ast", "checked", "canonical", "backward", "scop", "schedule")
#: The fusion strategy of the ``schedule`` stage when neither a strategy nor options are given.
DEFAULT_FUSION = "Preserve3Coincident"


def checked_text(cdef: CheckedDef, sizes: Mapping[str, int]) -> str:
    """``cdef`` as checking left it, one line each: its signature, its temporaries, and every
    statement with its value type and its index and reduction ranges; a range whose bounds
    ``sizes`` fixes also gets its value there (``= [0, 6)``)."""
    lines = [cdef.signature()]
    for name in cdef.temporaries:
        t = cdef.tensor(name)
        lines.append(f"  temporary {t.dtype}({', '.join(map(str, t.shape))}) {name}")
    for st in cdef.statements:
        lines.append(f"line {st.line}: {st.tensor} {st.source.op_text}  ({st.value_type})")
        for r in st.ranges:
            kind = "reduction" if r.var in st.reduction_vars else "index"
            concrete = ""
            if sizes and r.lo.symbols() | r.hi.symbols() <= sizes.keys():
                concrete = f"   = [{r.lo.evaluate(sizes)}, {r.hi.evaluate(sizes)})"
            lines.append(f"    {kind:9} {r}{concrete}")
    return "".join(line + "\n" for line in lines)
