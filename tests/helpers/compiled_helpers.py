"""Shared pieces of the compiled-kernel tests (test_compiled_*.py): options matrices, a private
kernel cache, and comparisons of compiled results with the oracle (``tcjit.reference``).

A plain module (not a conftest): the test files import it as ``import compiled_helpers as H``.
It also holds :func:`raises_at`, the check that an error points into the source.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pytest
import torch

import tcjit
from tcjit import TCError, TCWarning, reference
from tcjit.mapping.options import MappingOptions
from tcjit.polyhedral.lang.check import check_source
from tcjit.polyhedral.lang.checked import CheckedProgram
from tcjit.testing import tolerance

#: A linear layer and its hand-written backward (an entry of the same source), for tests of
#: user-given backwards.
LINEAR = """
def linear(float(M,K) A, float(N,K) W, float(N) bias) -> (C) {
    C(m, n) +=! A(m, r_k) * W(n, r_k)
    C(m, n) = C(m, n) + bias(n)
}
def linear_grad(float(M,K) A, float(N,K) W, float(N) bias, float(M,N) d_C) -> (d_A, d_W, d_bias) {
    d_A(m, k) +=! d_C(m, r_n) * W(r_n, k)
    d_W(n, k) +=! d_C(r_m, n) * A(r_m, k)
    d_bias(n) +=! d_C(r_m, n)
}
"""

# The oracle, captured once: some tests swap ``reference`` in other test modules for a shim.
ORACLE = reference.evaluate

# ============================================================================================ options
FUSIONS = ("Max", "Preserve3Coincident", "Min")
TILES: tuple[tuple[int, ...], ...] = ((), (1,), (32, 32, 32), (4, 0, 8), (7, 3))


@dataclass(frozen=True)
class Mapping:
    """The CPU-specific options of one configuration (plus unroll, read by every target)."""

    parallelize: bool
    vectorize: bool
    unroll: int
    register_tile: tuple[int, ...]

    def __str__(self) -> str:
        rt = "x".join(map(str, self.register_tile)) or "-"
        return f"p{int(self.parallelize)}v{int(self.vectorize)}u{self.unroll}r{rt}"


MAPPINGS = (
    Mapping(True, True, 1, ()),  # today's default
    Mapping(False, False, 1, ()),
    Mapping(True, False, 4, ()),
    Mapping(False, True, 8, (2, 4)),
    Mapping(True, True, 2, (3,)),
)
FIXES = (False, True)


@dataclass(frozen=True)
class Config:
    """One point of the options matrix."""

    fusion: str = "Preserve3Coincident"
    tile: tuple[int, ...] = (32, 32, 32)
    mapping: Mapping = MAPPINGS[0]
    fix: bool = False

    def options(self) -> MappingOptions:
        m = self.mapping
        return (
            MappingOptions("naive")
            .outer_schedule_fusion_strategy(self.fusion)
            .tile(*self.tile)
            .fix_parameters_before_scheduling(self.fix)
            .parallelize(m.parallelize)
            .vectorize(m.vectorize)
            .unroll(m.unroll)
            .register_tile(*m.register_tile)
        )

    @property
    def id(self) -> str:
        tile = "x".join(map(str, self.tile)) or "notile"
        return f"{self.fusion[:4]}-t{tile}-{self.mapping}-{'fix' if self.fix else 'param'}"


DEFAULT = Config()

#: Option vectors of the CUDA mapping for the emulated and CUDA-compile tests: 1-D to 3-D blocks and
#: threads, grids and blocks smaller and larger than the problems, untiled, Max and Min fusion,
#: unrolled, shared-memory promotion at the block mapping's depth and inside the tiled reduction
#: loop, groups of consecutive elements per thread (``vector_width``). "default" is what a call
#: without options uses.
CUDA_OPTIONS = {
    "default": MappingOptions("naive").tile(32, 32, 32).map_to_blocks(256, 256).map_to_threads(32, 8),
    "small": MappingOptions("naive").tile(4, 8, 2).map_to_blocks(3, 2).map_to_threads(4, 2),
    "3d": MappingOptions("naive").tile(2, 3, 4).map_to_blocks(2, 2, 2).map_to_threads(2, 3, 4),
    "untiled": MappingOptions("naive").tile(0).map_to_blocks(5).map_to_threads(7),
    "max-fusion": MappingOptions("naive")
    .outer_schedule_fusion_strategy("Max")
    .tile(8, 8)
    .map_to_blocks(2, 3)
    .map_to_threads(16, 4),
    "min-fusion": MappingOptions("naive").outer_schedule_fusion_strategy("Min").tile(3).map_to_threads(5, 5),
    "unrolled": MappingOptions("naive").tile(4, 4, 4).map_to_blocks(8, 8).map_to_threads(4, 4).unroll(8),
    "shared": MappingOptions("naive")
    .tile(8, 8, 4)
    .map_to_blocks(4, 4)
    .map_to_threads(8, 4)
    .use_shared_memory(True)
    .use_readonly_cache(True),
    "shared-deep": MappingOptions("naive")
    .tile(4, 8, 2)
    .map_to_blocks(3, 2)
    .map_to_threads(4, 2)
    .use_shared_memory(True)
    .shared_depth(3)
    .unroll(4)
    .unroll_copy_shared(True),
    "private": MappingOptions("naive")
    .tile(4, 8, 2)
    .map_to_blocks(3, 2)
    .map_to_threads(4, 2)
    .unroll(4)
    .use_private_memory(True),
    "vector": MappingOptions("naive").tile(2, 16, 8).map_to_blocks(4, 4).map_to_threads(4, 2).vector_width(4),
    "vector-shared": MappingOptions("naive")
    .tile(4, 8, 4)
    .map_to_blocks(3, 2)
    .map_to_threads(2, 4)
    .vector_width(2)
    .use_shared_memory(True),
}


def all_configs() -> list[Config]:
    """The whole cross product: fusion x tile x mapping x fix_parameters (150 configurations)."""
    return [Config(f, t, m, x) for f, t, m, x in itertools.product(FUSIONS, TILES, MAPPINGS, FIXES)]


def rotating_config(i: int) -> Config:
    """The ``i``-th configuration of a deterministic rotation: consecutive ``i`` change the fusion
    strategy every time and every 15 consecutive ones give all fusion x tile and all fusion x
    mapping pairs; ``fix`` alternates every 5."""
    return Config(
        FUSIONS[i % 3],
        TILES[i % 5],
        MAPPINGS[(i // 3) % 5],
        FIXES[(i // 5) % 2],
    )


def check_covers(configs: Sequence[Config]) -> None:
    """Assert that ``configs`` use every fusion strategy, tile vector, mapping and fix value."""
    assert {c.fusion for c in configs} == set(FUSIONS)
    assert {c.tile for c in configs} == set(TILES)
    assert {c.mapping for c in configs} == set(MAPPINGS)
    assert {c.fix for c in configs} == set(FIXES)


# ====================================================================================== private cache
@contextlib.contextmanager
def environment(name: str, value: str) -> Iterator[None]:
    """Set the environment variable ``name`` to ``value`` for the duration (restored afterwards)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def private_cache(root: os.PathLike | str) -> contextlib.AbstractContextManager[None]:
    """Point ``TCJIT_CACHE_DIR`` at ``root`` for the duration (restored afterwards)."""
    return environment("TCJIT_CACHE_DIR", str(root))


# ===================================================================================== stack frames
_FUNCTION = re.compile(r"^[0-9a-f]+ <(tc_[^>]*)>:$")
_INSN = re.compile(r"^\s*[0-9a-f]+:\s+(\S+)\s*(.*)$")
_STACK_ADDRESS = re.compile(r"^(-?0x[0-9a-f]+)?\(%(rsp|rbp)\),%(\w+)$")
_MEMORY = re.compile(r"(-?0x[0-9a-f]+)?\(%(\w+)[,)]")
_ALIGNED_MOVES = ("movaps", "movapd", "movdqa", "vmovaps", "vmovapd", "vmovdqa", "vmovdqa32", "vmovdqa64")


def dropped_realignments(blob: bytes) -> list[str]:
    """The kernel functions of a compiled shared object that store to (or load from) a stack slot
    with an aligned vector move the slot's alignment does not guarantee -- the gcc 12 defect behind
    issue 29's crash. gcc planned a stack realignment for the slot (it kept a frame pointer for
    it), then dropped it, because its check only sees accesses based on the stack or frame pointer
    while this slot is reached through a register holding its address (or through an index
    register). Flagged: a frame pointer with no realignment, and an aligned vector move of 32 or 64
    bytes to or from the stack (which only a realignment guarantees: the ABI gives 16 bytes at the
    call), or the address of a stack slot taken into a register (``lea``) that is not even 16-byte
    aligned, or a 16-byte aligned move to a slot that is not. The compiled layout decides what can
    fault, the caller's stack only whether it does on one run, so this sees what runs hit now and
    then. Empty without ``objdump`` (or off x86-64)."""
    objdump = shutil.which("objdump")
    if objdump is None or os.uname().machine != "x86_64":
        return []
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(blob)
        f.flush()
        text = subprocess.run(
            [objdump, "-d", "--no-show-raw-insn", f.name], capture_output=True, text=True, check=True
        ).stdout
    return [name for name, body in _functions(text) if _misaligned_slot_move(body)]


def _misaligned_slot_move(body: list[str]) -> bool:
    insns = [(m.group(1), m.group(2)) for m in map(_INSN.match, body) if m]
    if any(op == "and" and args.endswith(",%rsp") for op, args in insns):
        return False  # realigned
    if ("mov", "%rsp,%rbp") not in insns:
        return False  # no frame pointer: no realignment was planned
    rsp = 8  # at entry: the call pushed the return address onto a 16-byte aligned stack
    framed = False
    for op, args in insns:
        if op == "push":
            rsp -= 8
        elif op in ("sub", "add") and args.startswith("$0x") and args.endswith(",%rsp"):
            rsp += (-1 if op == "sub" else 1) * int(args[1:].split(",")[0], 16)
        elif (op, args) == ("mov", "%rsp,%rbp"):
            framed = True
        elif op.startswith(("j", "ret")) and framed:
            # the prologue ends at the first branch after the frame pointer is set, and the stack
            # pointer stays put after it; branches before it are a shrink-wrapped fast path that
            # returns without the frame (gcc puts the prologue after an early exit)
            break
    slots: dict[str, int] = {}  # register -> its slot address modulo 16
    for op, args in insns:
        m = _STACK_ADDRESS.match(args) if op == "lea" else None
        if m and m.group(3) == "rsp":
            continue  # `lea -0x28(%rbp),%rsp`: an epilogue restoring the stack pointer, not a slot
        if m:
            base = rsp if m.group(2) == "rsp" else 0  # %rbp = the entry's %rsp - 8
            slots[m.group(3)] = (int(m.group(1) or "0", 16) + base) % 16
            if slots[m.group(3)]:
                return True  # a slot gcc placed for a realignment it then dropped
            continue
        if op in _ALIGNED_MOVES:
            for disp, reg in _MEMORY.findall(args):
                at = {"rsp": rsp, "rbp": 0}.get(reg, slots.get(reg))
                if at is not None and ("%ymm" in args or "%zmm" in args or (at + int(disp or "0", 16)) % 16):
                    return True
        written = args.rsplit(",", 1)[-1].lstrip("%") if "," in args else ""
        slots.pop(written, None)  # the register now holds something else
    return False


def _functions(text: str) -> Iterator[tuple[str, list[str]]]:
    """(name, instruction lines) of each ``tc_`` function in ``objdump -d`` output."""
    name, body = None, []
    for line in [*text.splitlines(), ""]:
        m = _FUNCTION.match(line)
        if m:
            name, body = m.group(1), []
        elif name and not line.strip():
            yield name, body
            name = None
        elif name:
            body.append(line)


@contextlib.contextmanager
def checking_stack_frames() -> Iterator[None]:
    """Fail the first compilation (inside the block) whose shared object has a kernel function with
    a dropped stack realignment (:func:`dropped_realignments`). Not in a sanitized run, whose
    ``-fno-omit-frame-pointer`` gives every function a frame pointer."""
    from tcjit import cpu_runtime

    compile_c = cpu_runtime.compile_c
    if "-fno-omit-frame-pointer" in cpu_runtime.compile_flags():
        yield
        return

    def checked(source: str, *args, **kwargs) -> bytes:
        blob = compile_c(source, *args, **kwargs)
        bad = dropped_realignments(blob)
        assert not bad, f"gcc dropped the stack realignment of {bad}; the kernel's C:\n{source[-6000:]}"
        return blob

    cpu_runtime.compile_c = checked
    try:
        yield
    finally:
        cpu_runtime.compile_c = compile_c


# ======================================================================================= comparisons
def as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def assert_same(got: torch.Tensor, want: torch.Tensor, reduction_length: int = 1, *, what: str = "") -> None:
    """``got`` (compiled) equals ``want`` (oracle): dtype and shape exactly, integers and bools
    exactly, floats within :func:`tcjit.testing.tolerance` (NaN where NaN)."""
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}, not a tensor"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, oracle {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, oracle {tuple(want.shape)}"
    if want.dtype.is_floating_point:
        tol = tolerance(want.dtype, reduction_length)
        torch.testing.assert_close(
            got, want, **tol, equal_nan=True, msg=lambda m: f"{what}: compiled != oracle\n{m}"
        )
    else:
        # torch.equal has no kernel for some unsigned types: compare the bit patterns as int64.
        g, w = _as_int64(got), _as_int64(want)
        if not torch.equal(g, w):
            bad = (g != w).nonzero()[:5].tolist()
            raise AssertionError(
                f"{what}: compiled != oracle at {bad}: {[g[tuple(i)].item() for i in bad]} "
                f"vs {[w[tuple(i)].item() for i in bad]}"
            )


def _as_int64(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.bool:
        return t.to(torch.int64)
    if t.dtype == torch.uint64:
        return t.view(torch.int64)
    return t.to(torch.int64)


def assert_all_same(
    got, want, reduction_length: int = 1, names: Sequence[str] = (), *, what: str = ""
) -> None:
    got, want = as_tuple(got), as_tuple(want)
    assert len(got) == len(want), f"{what}: {len(got)} results, oracle {len(want)}"
    names = list(names) or [str(i) for i in range(len(got))]
    for n, g, w in zip(names, got, want):
        assert_same(g, w, reduction_length, what=f"{what} {n}".strip())


def clone_outputs(outputs):
    return None if outputs is None else tuple(o.clone() for o in outputs)


def kernel_of(source: str | CheckedProgram, entry: str | None = None) -> tcjit.Kernel:
    """The Kernel of ``entry`` (or of the only def) of a source text or checked program."""
    if isinstance(source, CheckedProgram):
        program = source
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TCWarning)  # '+=' with nothing before it: intended here
            program = check_source(source)
    return tcjit.Kernel(program, program.entry(entry).name)  # TCNameError as the oracle raises it


def run_compiled(
    source: str | CheckedProgram,
    entry: str | None,
    inputs: Sequence,
    *,
    options: MappingOptions | None = None,
    outputs: Sequence[torch.Tensor] | None = None,
    target: str | None = None,
):
    """Define and run compiled (for ``target``: None follows the inputs); always a tuple."""
    k = kernel_of(source, entry)
    return as_tuple(k(*inputs, options=options, outputs=outputs, target=target))


def check_against_oracle(
    source: str | CheckedProgram,
    entry: str | None,
    inputs: Sequence,
    *,
    options: MappingOptions | None = None,
    outputs: Sequence[torch.Tensor] | None = None,
    reduction_length: int = 1,
    oracle_kwargs: dict | None = None,
    what: str = "",
    target: str | None = None,
):
    """Run ``source`` compiled and through the oracle on the same inputs (and copies of the same
    ``outputs=``). If the oracle raises a :class:`TCError`, the compiled call must raise the same
    class (which is then re-raised); otherwise the results must agree. Returns the compiled results
    (the given ``outputs`` tensors themselves when given)."""
    oracle_outputs = clone_outputs(outputs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TCWarning)
            want = ORACLE(source, entry, *inputs, outputs=oracle_outputs, **(oracle_kwargs or {}))
    except TCError as e:
        with pytest.raises(TCError) as info:
            run_compiled(source, entry, inputs, options=options, outputs=outputs, target=target)
        assert type(info.value) is type(e), (
            f"{what}: the oracle raised {type(e).__name__} ({e}), the compiled kernel "
            f"{type(info.value).__name__} ({info.value})"
        )
        raise
    got = run_compiled(source, entry, inputs, options=options, outputs=outputs, target=target)
    if outputs is not None:
        assert all(g is o for g, o in zip(got, outputs)), f"{what}: outputs= tensors not returned"
    assert_all_same(got, as_tuple(want), reduction_length, what=what)
    return got


# ============================================================================== oracle shim for modules
class CompiledReference:
    """Stands in for the ``tcjit.reference`` module inside another test module: ``evaluate`` runs
    the program compiled *and* through the oracle, checks that they agree (or raise the same
    error class) and returns the compiled results, so that module's own assertions (against torch,
    mpmath or pure Python) check the compiled kernel too."""

    def __init__(
        self,
        options: Callable[[], MappingOptions | None] | MappingOptions | None = None,
        target: str | None = None,
    ):
        self._options = options
        self.target = target
        self.calls = 0

    def options(self) -> MappingOptions | None:
        return self._options() if callable(self._options) else self._options

    def evaluate(self, source, entry=None, *inputs, outputs=None, **oracle_kwargs):
        self.calls += 1
        got = check_against_oracle(
            source,
            entry,
            inputs,
            options=self.options(),
            outputs=outputs,
            reduction_length=_longest_reduction(inputs),
            oracle_kwargs=oracle_kwargs,
            what=f"call {self.calls}",
            target=self.target,
        )
        return got[0] if len(got) == 1 else got


def _longest_reduction(inputs: Sequence) -> int:
    """A generous reduction length for tolerances when a program's structure is unknown: the
    largest number of elements of any input."""
    sizes = [x.numel() for x in inputs if isinstance(x, torch.Tensor)]
    return max(sizes, default=1)


def pairwise_configs() -> list[Config]:
    """25 configurations covering every pair of values of any two axes (tile x mapping fully;
    fusion and fix chosen so that their pairs with every other axis appear too)."""
    out: list[Config] = []
    missing = {(axis, v, x) for axis, vs in enumerate((FUSIONS, TILES, MAPPINGS)) for v in vs for x in FIXES}
    for t, m in itertools.product(range(5), range(5)):
        row = (FUSIONS[(t + 2 * m) % 3], TILES[t], MAPPINGS[m])
        # greedy: the fix value that covers the most (axis value, fix) pairs not yet seen
        fix = max(FIXES, key=lambda x: (sum((a, v, x) in missing for a, v in enumerate(row)), x))
        missing -= {(a, v, fix) for a, v in enumerate(row)}
        out.append(Config(*row, fix))
    axes = (
        lambda c: c.fusion,
        lambda c: c.tile,
        lambda c: c.mapping,
        lambda c: c.fix,
    )
    values = (FUSIONS, TILES, MAPPINGS, FIXES)
    for (fa, va), (fb, vb) in itertools.combinations(zip(axes, values), 2):
        seen = {(fa(c), fb(c)) for c in out}
        assert seen == set(itertools.product(va, vb)), "not pairwise"
    return out


def check_fuzz_program_emulated(program, options, order: str, *, what: str) -> None:
    """A hypothesis-drawn program (tests/fuzz's ``programs()``) at ``options``, emulated in
    ``order``, against the oracle; programs the front end refuses are discarded (``assume``), and
    a ``TCError`` at the call is accepted when the oracle raised the same class (checked)."""
    from hypothesis import assume, note

    from tcjit.testing import emulation_order

    note(program.source)
    note(f"sizes: {program.sizes}; options: {options!r}; order: {order}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TCWarning)
            tcjit.define(program.source)
    except TCError:
        assume(False)
    inputs = program.make_inputs(seed=sum(program.sizes.values()))
    biggest = max(program.sizes.values())
    try:
        with emulation_order(order):
            check_against_oracle(
                program.source,
                None,
                inputs,
                options=options,
                reduction_length=biggest * biggest * program.statements,
                what=what,
                target="cuda-emulated",
            )
    except TCError:
        return  # the oracle refused too, with the same class (checked)


def rotation_params(kernels: Sequence[str], options: Sequence[str]) -> list:
    """``(kernel, option name, small size 1 or 2)`` for every suite kernel, option vector and
    size; the default tier keeps one option vector per kernel (a rotation) at the first of the
    two sizes, the rest is ``full``."""
    out = []
    for i, name in enumerate(kernels):
        for j, option in enumerate(options):
            for which in (1, 2):
                marks = () if which == 1 and i % len(options) == j else (pytest.mark.full,)
                out.append(pytest.param(name, option, which, id=f"{name}-{option}-{which}", marks=marks))
    return out


# ------------------------------------------------------------------ suite kernels at small sizes
@functools.cache
def suite_kernel(name: str, dynamic=None) -> tcjit.Kernel:
    """The suite kernel ``name``, defined once per test session (per ``dynamic``). The default
    kernel is shared by every test that asks for it, so a second size makes its sizes symbolic;
    tests of what the concrete mapping decides ask for ``dynamic=False``."""
    from tcjit import suite

    k = suite.get(name)
    return tcjit.define(k.source, k.entry, dynamic=dynamic)


@functools.cache
def suite_inputs(name: str, which: int) -> tuple[torch.Tensor, ...]:
    """The inputs of suite kernel ``name`` at its small size number ``which`` (seeded by it)."""
    from tcjit import suite

    k = suite.get(name)
    return k.make_inputs(k.small_sizes[which], seed=which)


@functools.cache
def suite_oracle(name: str, which: int) -> tuple[torch.Tensor, ...]:
    """The oracle's outputs for :func:`suite_inputs`."""
    from tcjit import suite

    k = suite.get(name)
    return as_tuple(ORACLE(k.source, k.entry, *suite_inputs(name, which)))


def raises_at(exc, line, col, words, fn, *args, **kw):
    """Call ``fn(*args, **kw)``; it must raise ``exc`` pointing at ``line``:``col`` of the TC source
    (a caret in the message) with each of ``words`` in its message. Returns the error."""
    with pytest.raises(exc) as e:
        fn(*args, **kw)
    assert (e.value.line, e.value.column) == (line, col), str(e.value)
    for w in words:
        assert w in e.value.message, e.value.message
    assert "^" in str(e.value)
    return e.value
