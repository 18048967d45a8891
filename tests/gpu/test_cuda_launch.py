"""The driver launch path (tcjit/cuda_launch.py) without a GPU: no CuPy, no CUDA.

:class:`PreparedArguments` is checked with ctypes alone, reading its memory as ``cuLaunchKernel``
would: each slot has its C type's width, the ``kernelParams`` array holds the slots' addresses,
values read back through it with their type and width, values that do not fit raise, and the
slots follow the parameter list of the CUDA source as printed. :class:`DriverLaunches` and
:class:`CudaSpecialization`'s argument plan run against a stand-in for the four CuPy calls they
make (:class:`FakeCupy`), which reads the arguments through ``kernelParams`` at each launch, as
the driver does. The real launches are tested by test_cuda_runtime.py, on a GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import struct
import threading
import time
from types import SimpleNamespace

import pytest
import torch

import tcjit
from tcjit.binding import bind
from tcjit.cuda_launch import DriverLaunches, PreparedArguments, slot_type
from tcjit.pipeline import lowered
from tcjit.runtime import call_layout, out_layouts

#: A parameter's C type (as printed in the CUDA source) -> its ctypes type and struct format, for
#: reading memory; written out here rather than taken from tcjit.
C_TYPES = {
    "bool": (ctypes.c_bool, "?"),
    "uint8_t": (ctypes.c_uint8, "B"),
    "uint16_t": (ctypes.c_uint16, "H"),
    "uint32_t": (ctypes.c_uint32, "I"),
    "uint64_t": (ctypes.c_uint64, "Q"),
    "int8_t": (ctypes.c_int8, "b"),
    "int16_t": (ctypes.c_int16, "h"),
    "int32_t": (ctypes.c_int32, "i"),
    "int64_t": (ctypes.c_int64, "q"),
    "float": (ctypes.c_float, "f"),
    "double": (ctypes.c_double, "d"),
    "pointer": (ctypes.c_uint64, "Q"),
}

SCALARS = """
def affine(float(N) A, int32 k, float64 alpha, uint8 u, bool flip, float16 h) -> (B, C) {
    B(i) = flip ? float(A(i) * alpha) + k : A(i) * h + u
    C(i) +=! A(i) * A(r_j) where r_j in 0:N
}
"""


def _kind(ctype: str) -> str:
    return "pointer" if "*" in ctype else ctype.strip()


def _addresses(prepared: PreparedArguments) -> list[int]:
    array = ctypes.cast(prepared.kernel_params, ctypes.POINTER(ctypes.c_void_p))
    return [array[i] for i in range(len(prepared))]


def _read(address: int, kind: str) -> tuple[object, bytes]:
    """The value at ``address`` as C type ``kind``, and its bytes."""
    t, fmt = C_TYPES[kind]
    return ctypes.cast(address, ctypes.POINTER(t))[0], ctypes.string_at(address, struct.calcsize(fmt))


def _signature(source: str, kernel: str) -> list[str]:
    """The C types of ``kernel``'s parameters in the CUDA ``source``, as printed."""
    (params,) = re.findall(rf"\n{kernel}\(([^)]*)\)", source)
    return [decl.strip().rsplit(" ", 1)[0] for decl in params.split(",")]


# ======================================================================================= the slots
@pytest.mark.parametrize("kind", sorted(C_TYPES))
def test_each_slot_has_its_c_types_width(kind: str) -> None:
    ctype = "const float *restrict" if kind == "pointer" else kind
    prepared = PreparedArguments([ctype])
    (slot,) = prepared.slots
    assert type(slot) is C_TYPES[kind][0] is slot_type(ctype)
    assert ctypes.sizeof(slot) == struct.calcsize(C_TYPES[kind][1])


def test_the_pointer_array_holds_the_slots_addresses_in_order() -> None:
    ctypes_ = ["int64_t *", "const double *restrict", "int8_t", "double", "float *restrict", "bool"]
    prepared = PreparedArguments(ctypes_)
    assert len(prepared) == 6 and prepared.ctypes == tuple(ctypes_)
    assert _addresses(prepared) == [ctypes.addressof(s) for s in prepared.slots]
    assert len(set(_addresses(prepared))) == 6
    assert PreparedArguments([]).kernel_params != 0  # an empty array still has an address


VALUES = [
    ("int32_t", -1, b"\xff\xff\xff\xff"),
    ("int32_t", -(2**31), struct.pack("<i", -(2**31))),
    ("uint64_t", 2**63 + 5, struct.pack("<Q", 2**63 + 5)),
    ("int64_t", -(2**40) - 3, struct.pack("<q", -(2**40) - 3)),
    ("int8_t", -128, b"\x80"),
    ("uint8_t", 255, b"\xff"),
    ("uint16_t", 65535, b"\xff\xff"),
    ("int16_t", -2, b"\xfe\xff"),
    ("uint32_t", 2**32 - 1, b"\xff\xff\xff\xff"),
    ("float", 1.5, struct.pack("<f", 1.5)),
    ("double", 0.1, struct.pack("<d", 0.1)),
    ("bool", True, b"\x01"),
    ("bool", False, b"\x00"),
    ("int64_t *", 2**64 - 8, struct.pack("<Q", 2**64 - 8)),
    ("const float *restrict", 0x7F00_1234_5600, struct.pack("<Q", 0x7F00_1234_5600)),
]


def test_values_read_back_through_the_pointer_array_with_their_type_and_width() -> None:
    prepared = PreparedArguments([c for c, _, _ in VALUES])
    prepared.write([v for _, v, _ in VALUES])
    for address, (ctype, value, raw) in zip(_addresses(prepared), VALUES):
        got, got_raw = _read(address, _kind(ctype))
        assert (got, got_raw) == (value, raw), ctype
    # a second call's values replace the first's in the same slots
    again = [0 if "*" in c else (2.0 if c in ("float", "double") else 1) for c, _, _ in VALUES]
    prepared.write(again)
    assert [_read(a, _kind(c))[0] for a, (c, _, _) in zip(_addresses(prepared), VALUES)] == again


@pytest.mark.parametrize(
    "ctype, value",
    [
        ("int32_t", 2**31),
        ("int32_t", -(2**31) - 1),
        ("uint8_t", 256),
        ("uint8_t", -1),
        ("int8_t", 128),
        ("uint64_t", -1),
        ("int64_t", 2**63),
        ("int64_t *", 2**64),
        ("const float *restrict", -1),
    ],
)
def test_a_value_that_does_not_fit_raises_instead_of_wrapping(ctype: str, value: int) -> None:
    prepared = PreparedArguments(["double", ctype], names=["x", "p"])
    prepared.write([2.5, 7])
    with pytest.raises(OverflowError, match=rf"kernel parameter p \({re.escape(ctype)}\) cannot hold"):
        prepared.write([1.0, value])
    assert prepared.slots[1].value == 7  # the slot kept its value


def test_float_slots_round_as_c_does_and_integer_slots_refuse_fractions() -> None:
    prepared = PreparedArguments(["float", "double", "bool", "int32_t"])
    prepared.write([1e300, 1e300, 3, 4])
    assert [s.value for s in prepared.slots] == [float("inf"), 1e300, True, 4]
    assert _read(_addresses(prepared)[0], "float")[1] == struct.pack("<f", float("inf"))
    with pytest.raises(TypeError):
        prepared.write([1.0, 1.0, True, 1.5])


def test_bad_parameter_lists_and_value_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="no kernel parameter has the C type 'half'"):
        PreparedArguments(["half"])
    with pytest.raises(ValueError, match="1 names for 2 parameters"):
        PreparedArguments(["float", "float"], names=["a"])
    with pytest.raises(ValueError, match="1 values for 2 kernel parameters"):
        PreparedArguments(["float", "float"]).write([1.0])


def test_the_slots_follow_the_printed_kernels_parameters() -> None:
    """Scalars of five types between tensors: the slots, made from the lowering's parameter list
    as the runtime makes them, match the CUDA source's signature in order, type and width."""
    cdef = tcjit.define(SCALARS).definition
    ks = lowered(cdef, {"N": 5}, target="cuda")
    printed = _signature(ks.source, ks.kernels[0].name)
    assert printed[0] == "int64_t *__restrict__" and len(printed) == 1 + len(ks.params)
    assert [_kind(c) for c in printed] == [
        "pointer", "pointer", "int32_t", "double", "uint8_t", "bool", "float", "pointer", "pointer",
    ]  # fmt: skip
    prepared = PreparedArguments(("int64_t *", *(p.ctype for p in ks.params)))
    assert [type(s) for s in prepared.slots] == [C_TYPES[_kind(c)][0] for c in printed]


# ================================================================================ the launches
class FakeCupy:
    """What DriverLaunches and CudaSpecialization use of CuPy, recording instead of launching.

    Each launch reads its arguments through ``kernelParams`` as the driver would (``kinds``: their
    C types, :data:`C_TYPES` keys) and is recorded as ``(f, grid, block, shared, stream, extra,
    values)``. ``fail``: the names (function pointers) whose launch raises the driver's error.
    """

    class CUDADriverError(RuntimeError):
        pass

    def __init__(self, kinds, *, current: int = 0, pause_s: float = 0.0, fail=()) -> None:
        self.kinds, self.current, self.pause_s, self.fail = list(kinds), current, pause_s, set(fail)
        self.launched: list[tuple] = []
        self.context_calls: list[tuple[str, int]] = []
        self.scopes: list[int] = []
        driver = SimpleNamespace(launchKernel=self._launch, CUDADriverError=self.CUDADriverError)
        runtime = SimpleNamespace(getDevice=lambda: self.current, memGetInfo=self._mem_get_info)
        self.cuda = SimpleNamespace(driver=driver, runtime=runtime, Device=self._device)

    def _mem_get_info(self):
        self.context_calls.append((threading.current_thread().name, self.current))
        return (1, 1)

    @contextlib.contextmanager
    def _device(self, index: int):
        before, self.current = self.current, index
        self.scopes.append(index)
        try:
            yield
        finally:
            self.current = before

    def _launch(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> None:
        array = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        values = tuple(_read(array[i], k)[0] for i, k in enumerate(self.kinds))
        if f in self.fail:
            raise self.CUDADriverError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: too many resources requested")
        time.sleep(self.pause_s)  # another thread could write the slots now, but for the lock
        self.launched.append((f, (gx, gy, gz), (bx, by, bz), shared, stream, extra, values, self.current))

    def RawModule(self, *, code: str, options):  # CuPy's name
        names = re.findall(r"__launch_bounds__\(\d+\)\n(\w+)\(", code)
        functions = {n: SimpleNamespace(kernel=SimpleNamespace(ptr=1000 + i)) for i, n in enumerate(names)}
        return SimpleNamespace(get_function=functions.__getitem__)


LAUNCHES = [
    SimpleNamespace(name="tc_k0", grid=(4, 2, 1), block=(32, 8, 1)),
    SimpleNamespace(name="tc_k1", grid=(1, 1, 1), block=(256, 1, 1)),
]


def _launches(cupy: FakeCupy, ctypes_, device: int = 0) -> DriverLaunches:
    kernels = [SimpleNamespace(ptr=11), SimpleNamespace(ptr=22)]
    return DriverLaunches(cupy, kernels, LAUNCHES, PreparedArguments(ctypes_), device)


def test_the_kernels_launch_in_order_with_the_prepared_arguments_on_the_stream() -> None:
    cupy = FakeCupy(["pointer", "int32_t", "float"])
    launches = _launches(cupy, ["int64_t *", "int32_t", "float"])
    launches([0, -3, 0.5], 77)
    params = launches.arguments.kernel_params
    assert cupy.launched == [
        (11, (4, 2, 1), (32, 8, 1), 0, 77, 0, (0, -3, 0.5), 0),
        (22, (1, 1, 1), (256, 1, 1), 0, 77, 0, (0, -3, 0.5), 0),
    ]
    assert launches.arguments.kernel_params == params  # prepared once, reused by every call
    assert cupy.scopes == []  # the device was current: no device scope entered


def test_another_current_device_is_switched_to_for_the_launches_only() -> None:
    cupy = FakeCupy(["pointer"], current=0)
    launches = _launches(cupy, ["int64_t *"], device=1)
    launches([5], 0)
    assert cupy.scopes == [1] and [r[-1] for r in cupy.launched] == [1, 1] and cupy.current == 0


def test_each_thread_makes_the_devices_context_current_once() -> None:
    cupy = FakeCupy(["pointer"])
    launches = _launches(cupy, ["int64_t *"], device=3)

    def calls(n: int) -> None:
        for _ in range(n):
            launches([1], 0)

    for name, n in (("first", 3), ("second", 1)):
        t = threading.Thread(target=calls, args=(n,), name=name)
        t.start()
        t.join()
    assert cupy.context_calls == [("first", 3), ("second", 3)] and len(cupy.launched) == 8


def test_a_refused_launch_is_a_call_error_naming_the_kernel() -> None:
    cupy = FakeCupy(["pointer"], fail={22})
    launches = _launches(cupy, ["int64_t *"])
    with pytest.raises(tcjit.TCCallError, match=r"could not launch kernel tc_k1 .*OUT_OF_RESOURCES") as e:
        launches([0], 0)
    assert isinstance(e.value.__cause__, FakeCupy.CUDADriverError)
    assert [r[0] for r in cupy.launched] == [11]  # the launches before it went ahead
    cupy.fail.clear()
    launches([0], 0)  # the lock was released: the next call launches
    assert [r[0] for r in cupy.launched] == [11, 11, 22]


def test_threads_calling_at_once_never_mix_their_arguments() -> None:
    """Two threads, each writing its own values and launching two kernels that yield between
    reading their arguments: every call's two launches see that call's values."""
    cupy = FakeCupy(["pointer", "int64_t"], pause_s=1e-4)
    launches = _launches(cupy, ["int64_t *", "int64_t"])

    def calls(tag: int) -> None:
        for n in range(40):
            launches([tag, n], 0)

    threads = [threading.Thread(target=calls, args=(tag,)) for tag in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = cupy.launched
    assert len(records) == 160
    pairs = [(records[i], records[i + 1]) for i in range(0, 160, 2)]
    assert all(a[0] == 11 and b[0] == 22 and a[6] == b[6] for a, b in pairs)
    assert sorted(a[6] for a, _ in pairs) == sorted((t, n) for t in (1, 2) for n in range(40))


# ========================================================================= the runtime's plan
def test_the_runtime_passes_each_parameter_in_the_kernels_order(monkeypatch) -> None:
    """CudaSpecialization on CPU tensors with a stand-in CuPy: the values the kernel reads at its
    launch are the error slots (null: no bounds checks), the input's address, the scalars in their
    C types, and the outputs' addresses, in the order of the printed signature."""
    from tcjit import cuda_runtime

    cdef = tcjit.define(SCALARS).definition
    a = torch.arange(5, dtype=torch.float32)
    inputs = (a, -7, 0.25, 200, True, 1.5)
    binding = bind(cdef, inputs)
    ks = lowered(cdef, binding.sizes, target="cuda")
    cupy = FakeCupy([_kind(c) for c in _signature(ks.source, ks.kernels[0].name)])
    monkeypatch.setattr(cuda_runtime, "cupy_module", lambda: cupy)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=99))
    layouts = (tuple(call_layout(x) for x in inputs), out_layouts(None))
    spec = cuda_runtime.CudaSpecialization(cdef, binding, ks, layouts=layouts)
    b, c = spec(*inputs)
    ((f, grid, block, shared, stream, extra, values, device),) = cupy.launched
    launch = ks.kernels[0]
    assert (f, grid, block, shared, stream, extra, device) == (1000, launch.grid, launch.block, 0, 99, 0, 0)
    assert values == (0, a.data_ptr(), -7, 0.25, 200, True, 1.5, b.data_ptr(), c.data_ptr())
    with pytest.raises(tcjit.TCCallError, match="does not fit int32"):
        spec(a, 2**31, 0.25, 200, True, 1.5)


def test_a_symbolic_kernel_gets_each_calls_sizes_and_grids(monkeypatch) -> None:
    """A CUDA kernel with its batch size symbolic, loaded with a stand-in CuPy: each call passes
    its size after the other parameters, launches the grid its size gives
    (:meth:`~tcjit.mapping.cuda_printer.CudaLaunch.grid_at`) with the fixed thread block, and
    gets outputs of its shape."""
    from tcjit import cuda_runtime
    from tcjit.mapping.layout import contiguous_layout
    from tcjit.mapping.lower_gpu import lower_cuda
    from tcjit.mapping.options import MappingOptions

    cdef = tcjit.define("def scale(float(B, N) X) -> (Y) { Y(b, n) = X(b, n) * 2 }").definition
    rep = {"B": 20, "N": 6}
    options = MappingOptions("naive").tile(4, 8).map_to_blocks(64).map_to_threads(8, 4).validate("cuda")
    ks = lower_cuda(cdef, rep, contiguous_layout(cdef, rep), options.values, symbolic=frozenset({"B"}))
    (launch,) = ks.kernels
    assert ks.sizes == ("B",) and launch.grid_exprs
    cupy = FakeCupy([_kind(c) for c in _signature(ks.source, launch.name)])
    monkeypatch.setattr(cuda_runtime, "cupy_module", lambda: cupy)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=5))
    x = torch.randn(20, 6)
    spec = cuda_runtime.CudaSpecialization(cdef, bind(cdef, (x,)), ks, layouts=())
    grids = []
    for b in (20, 1, 3, 300, 3):
        x = torch.randn(b, 6)
        (y,) = spec.run((x,), None)
        assert y.shape == (b, 6)
        _, grid, block, _, _, _, values, _ = cupy.launched[-1]
        assert values == (0, x.data_ptr(), y.data_ptr(), b) and block == launch.block
        assert grid == launch.grid_at({"B": b}) == (min(64, -(-b // 4)), 1, 1)
        grids.append(grid)
    assert grids == [(5, 1, 1), (1, 1, 1), (1, 1, 1), (64, 1, 1), (1, 1, 1)]
