"""Binding a call's arguments to a checked definition: the checks every call makes first.

``bind(cdef, inputs, outputs)`` checks the number of inputs, their dtypes, ranks and devices, binds
size symbols (a repeated symbol must get one value, a literal size must match), derives the output
shapes, checks ``outputs=`` and every statement's ranges at those sizes. Mistakes raise
:class:`TCCallError` (or :class:`TCRangeError`) pointing at the parameter in the TC source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from .arguments import keyword_clash_hint
from .polyhedral.errors import TCCallError, TCRangeError
from .polyhedral.lang.bounds import check_bounds
from .polyhedral.lang.checked import CheckedDef
from .polyhedral.lang.types import ScalarType

__all__ = ["TORCH_DTYPES", "Binding", "bind", "float_substitution", "torch_dtype"]

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def torch_dtype(t: ScalarType) -> torch.dtype:
    """The torch dtype that stores TC type ``t``."""
    return TORCH_DTYPES[t.name]


_TC_FLOAT_NAMES: dict[torch.dtype, str] = {d: n for n, d in TORCH_DTYPES.items() if d.is_floating_point}


def float_substitution(cdef: CheckedDef, dtypes: Sequence[torch.dtype | None]) -> dict[str, str]:
    """The retyping a call with these input dtypes asks for [ext]: declared float type -> the float
    type passed (canonical names), identity pairs left out, so ``{}`` means "as declared".

    ``dtypes`` holds one entry per argument: the tensor's dtype, or ``None`` for a Python number.
    Every tensor parameter declared with a float type ``T`` that receives a tensor of a TC float
    dtype ``D`` maps ``T`` to ``D``. Rank-0 scalar arguments (``float alpha``), integer and bool
    parameters take no part; neither do tensors of other dtypes passed for float parameters (an
    integer or float8 tensor): :func:`bind` then reports them against the retyped declaration. A
    call with the wrong number of arguments is not retyped (:func:`bind` reports the count).

    :raises TCCallError: two parameters declared with one type receive different float dtypes (the
        caret on the second one's declaration).
    """
    params = cdef.ast.params
    if len(dtypes) != len(params):
        return {}
    sigma: dict[str, str] = {}
    first: dict[str, tuple[str, torch.dtype]] = {}
    for p, dtype in zip(params, dtypes):
        if p.dims is None or dtype is None:
            continue
        declared = cdef.tensor(p.name).dtype
        if not declared.is_float:
            continue
        got = _TC_FLOAT_NAMES.get(dtype)
        if got is None:
            continue
        if declared.name in first and sigma[declared.name] != got:
            other, other_dtype = first[declared.name]
            raise _err(
                cdef,
                f"inputs '{other}' and '{p.name}' are both declared {declared} but get different dtypes "
                f"in this call: '{other}' is {other_dtype}, '{p.name}' is {dtype}",
                p.span,
                hint="parameters declared with one type share one dtype per call: cast one "
                f"(e.g. {p.name}.to({other_dtype})), or declare them with different types",
            )
        sigma[declared.name] = got
        first.setdefault(declared.name, (p.name, dtype))
    return {t: d for t, d in sigma.items() if t != d}


@dataclass(frozen=True)
class Binding:
    """The concrete view of one call.

    :ivar sizes: every size symbol's value.
    :ivar tensors: input tensors by name (as passed).
    :ivar scalars: rank-0 scalar arguments by name, as Python numbers.
    :ivar output_shapes: the shape of every output and temporary, by name.
    :ivar device: the device of the call (of the first tensor input; CPU if there is none).
    """

    sizes: Mapping[str, int]
    tensors: Mapping[str, torch.Tensor]
    scalars: Mapping[str, int | float | bool]
    output_shapes: Mapping[str, tuple[int, ...]]
    device: torch.device


def _err(cdef: CheckedDef, message: str, span=None, hint: str | None = None) -> TCCallError:
    return TCCallError(message, source=cdef.source, span=span, where=cdef.name, hint=hint)


def scalar_value(cdef: CheckedDef, name: str, value, dtype: ScalarType):
    """The value of scalar argument ``name`` as the kernel takes it (of type ``dtype``), from a
    Python number or a 0-d tensor: a float, a bool, or an integral value that fits the integer
    type (otherwise a :class:`~tcjit.TCCallError` pointing at the parameter)."""
    p = cdef.param(name)
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise _err(cdef, f"argument '{name}' is a scalar ({dtype}); got a tensor of shape "
                       f"{tuple(value.shape)}", p.span)  # fmt: skip
        value = value.item()
    if isinstance(value, bool):
        value = int(value)
    if dtype.is_float:
        if not isinstance(value, (int, float)):
            raise _err(
                cdef, f"argument '{name}' must be a number ({dtype}), got {type(value).__name__}", p.span
            )
        return float(value)
    if dtype.kind == "bool":
        if not isinstance(value, (int, float)):
            raise _err(cdef, f"argument '{name}' must be a bool, got {type(value).__name__}", p.span)
        return bool(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise _err(cdef, f"argument '{name}' is {dtype}; got the non-integral number {value}", p.span)
        value = int(value)
    if not isinstance(value, int):
        raise _err(
            cdef, f"argument '{name}' must be an integer ({dtype}), got {type(value).__name__}", p.span
        )
    if not dtype.min_value <= value <= dtype.max_value:
        raise _err(cdef, f"argument '{name}' = {value} does not fit {dtype}", p.span)
    return value


def bind(
    cdef: CheckedDef,
    inputs: Sequence[object],
    outputs: Sequence[torch.Tensor] | None = None,
) -> Binding:
    """Check a call of ``cdef`` and bind its sizes; see the module docstring."""
    params = cdef.ast.params
    if len(inputs) != len(params):
        names = ", ".join(p.name for p in params)
        raise _err(
            cdef,
            f"{cdef.name} takes {len(params)} input{'s' if len(params) != 1 else ''} ({names}), "
            f"got {len(inputs)}",
            cdef.ast.name_span,
            hint=keyword_clash_hint(cdef) if len(inputs) < len(params) else None,
        )
    sizes: dict[str, int] = {}
    origin: dict[str, str] = {}
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, int | float | bool] = {}
    device: torch.device | None = None
    device_of: str | None = None
    for p, value in zip(params, inputs):
        if p.name in cdef.scalars:
            scalars[p.name] = scalar_value(cdef, p.name, value, cdef.scalars[p.name].dtype)
            continue
        info = cdef.tensor(p.name)
        if not isinstance(value, torch.Tensor):
            raise _err(cdef, f"input '{p.name}' must be a torch.Tensor, got {type(value).__name__}", p.span)
        want = torch_dtype(info.dtype)
        if value.dtype != want:
            raise _err(
                cdef,
                f"input '{p.name}' must have dtype {want}, got {value.dtype}",
                p.span,
                hint="convert it first, e.g. x.to(" + str(want) + ")",
            )
        if value.dim() != info.rank:
            raise _err(
                cdef,
                f"input '{p.name}' must have {info.rank} dimension{'s' if info.rank != 1 else ''}, "
                f"got {value.dim()} (shape {tuple(value.shape)})",
                p.span,
            )
        if value.device.type == "meta":
            pass
        elif device is None:
            device, device_of = value.device, p.name
        elif value.device != device:
            raise _err(
                cdef,
                f"input '{p.name}' is on {value.device} but '{device_of}' is on {device}",
                p.span,
                hint="all tensors of one call must be on one device",
            )
        for k, (dim, n) in enumerate(zip(p.dims or (), value.shape)):
            if not isinstance(dim.value, (int, str)):
                continue  # a size expression [ext]: checked once every symbol is bound, below
            if isinstance(dim.value, int):
                if n != dim.value:
                    raise _err(
                        cdef,
                        f"dimension {k} of input '{p.name}' must be {dim.value}, got {n}",
                        dim.span,
                    )
            elif dim.value in sizes and sizes[dim.value] != n:
                raise _err(
                    cdef,
                    f"sizes contradict: {dim.value} is {sizes[dim.value]} from {origin[dim.value]} "
                    f"but {n} from dimension {k} of '{p.name}'",
                    dim.span,
                )
            else:
                sizes[dim.value] = int(n)
                origin[dim.value] = f"dimension {k} of '{p.name}'"
        tensors[p.name] = value
    if device is None:
        device = torch.device("cpu")
    _check_size_expressions(cdef, params, tensors, sizes)

    _check_ranges(cdef, sizes)
    check_bounds(cdef, sizes)
    shapes = {
        t.name: tuple(int(s.evaluate(sizes)) for s in t.shape) for t in cdef.tensor_infos if t.role != "input"
    }
    for name, shape in shapes.items():
        if any(n < 0 for n in shape):
            info = cdef.tensor(name)
            raise TCRangeError(
                f"'{name}' would have the negative shape {shape} for sizes {_fmt_sizes(sizes)}",
                source=cdef.source,
                span=info.span,
                where=cdef.name,
            )
    if outputs is not None:
        _check_outputs(cdef, outputs, shapes, device)
    return Binding(sizes, tensors, scalars, shapes, device)


def _check_size_expressions(cdef: CheckedDef, params, tensors, sizes: Mapping[str, int]) -> None:
    """Dimensions declared as size expressions (``float(N, H - KH + 1) dO``) must equal them."""
    for p in params:
        for k, dim in enumerate(p.dims or ()):
            if isinstance(dim.value, (int, str)) or p.name not in tensors:
                continue
            want = cdef.tensor(p.name).shape[k].evaluate(sizes)
            got = tensors[p.name].shape[k]
            if got != want:
                raise _err(
                    cdef,
                    f"dimension {k} of input '{p.name}' must be {cdef.tensor(p.name).shape[k]} = {want} "
                    f"for sizes {_fmt_sizes(sizes)}, got {got}",
                    dim.span,
                )


def _fmt_sizes(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) or "(none)"


def _check_ranges(cdef: CheckedDef, sizes: Mapping[str, int]) -> None:
    """Every statement's ranges must be non-empty at these sizes (unless an input is empty)."""
    some_zero = any(v == 0 for v in sizes.values())
    for st in cdef.statements:
        for r in st.ranges:
            lo, hi = r.lo.evaluate(sizes), r.hi.evaluate(sizes)
            if hi < lo or (hi == lo and not some_zero):
                raise TCRangeError(
                    f"empty range for index '{r.var}': {r} gives {lo} <= {r.var} < {hi} "
                    f"for {_fmt_sizes(sizes)}",
                    source=cdef.source,
                    span=st.source.span,
                    where=cdef.name,
                    hint=f"the sizes must satisfy {r.hi} > {r.lo}",
                )


def _check_outputs(cdef, outputs, shapes, device) -> None:
    if not isinstance(outputs, (list, tuple)):
        outputs = (outputs,)
    if len(outputs) != len(cdef.outputs):
        raise _err(
            cdef,
            f"{cdef.name} has {len(cdef.outputs)} output{'s' if len(cdef.outputs) != 1 else ''}, "
            f"outputs= gave {len(outputs)}",
            cdef.ast.name_span,
        )
    for name, t in zip(cdef.outputs, outputs):
        info = cdef.tensor(name)
        ret = next(r for r in cdef.ast.returns if r.name == name)
        if not isinstance(t, torch.Tensor):
            raise _err(cdef, f"output '{name}' must be a torch.Tensor, got {type(t).__name__}", ret.span)
        want = torch_dtype(info.dtype)
        if t.dtype != want:
            raise _err(cdef, f"output '{name}' must have dtype {want}, got {t.dtype}", ret.span)
        if tuple(t.shape) != shapes[name]:
            raise _err(
                cdef, f"output '{name}' must have shape {shapes[name]}, got {tuple(t.shape)}", ret.span
            )
        if t.device != device:
            raise _err(cdef, f"output '{name}' is on {t.device} but the inputs are on {device}", ret.span)
