"""What the modules that a :class:`~tcjit.Kernel` calls into see of it.

:mod:`tcjit.kernel` imports :mod:`tcjit.derived` (a derived backward) and :mod:`tcjit.ops`
(calls under ``torch.compile``). Those take kernels as arguments and describe them by
:class:`KernelLike` instead of importing :mod:`tcjit.kernel` back, so that the imports between
these modules run one way (DESIGN.md: no import cycles, not even inside functions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from .polyhedral.lang.checked import CheckedDef

if TYPE_CHECKING:
    from .autograd import GradPlan
    from .mapping.options import MappingOptions
    from .runtime import Compiled

__all__ = ["KernelLike"]


class KernelLike(Protocol):
    """The members of :class:`tcjit.kernel.Kernel` that :mod:`tcjit.derived` and :mod:`tcjit.ops`
    use; :class:`~tcjit.Kernel` documents each. Two are the kernel's own helpers, which ops calls
    to share a call's variant and specialisation with eager calls: :meth:`_variant_for_dtypes`
    and :meth:`_specialization`."""

    name: str
    definition: CheckedDef
    backward: str | KernelLike | None
    options: MappingOptions | None

    @property
    def outputs(self) -> tuple[str, ...]: ...

    @property
    def canonical_source(self) -> str: ...

    @property
    def symbolic_sizes(self) -> frozenset[str]: ...

    def grad_plan(self) -> GradPlan: ...

    def _variant_for_dtypes(self, dtypes: Sequence[object]) -> KernelLike: ...

    def _specialization(
        self, key, inputs, outputs, options, target, *, allow_meta: bool = False
    ) -> Compiled: ...
