"""What a process keeps for compiled CPU kernels: the memory budget (tcjit/memory.py), workspaces
given back, libraries unloaded when nothing can call them (issue 29, "Memory that is never given
back").

Kernels whose point is one specialisation per shape are defined with ``dynamic=False`` (by
default a second size makes a size symbolic: one specialisation for every size, tcjit/dynamic.py).

Figures are read from the process itself: its resident set (``VmRSS``) and the kernel libraries
mapped into it (/proc/self/maps: files under the temporary directory, where the runtime writes
the libraries it loads, or under the kernel store).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

import tcjit
from tcjit.memory import BUDGET, DEFAULT_BUDGET

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")

MiB = 1 << 20

#: A temporary ``T`` of N x M floats between two statements; inputs and output stay small, so
#: the process's growth is the kernel's workspace.
OUTER = """
def outer(float(N) A, float(M) B) -> (S) {
    T(i, j) = A(i) * B(j)
    S(i) +=! T(i, r_j)
}
"""

#: Differentiable, with a temporary (its derived backward reads ``T``).
SQUARES = """
def squares(float(N) A, float(N) W) -> (B) {
    T(i) = A(i) * W(i)
    B(i) = T(i) * T(i) + A(i)
}
"""


def _rss() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _libraries() -> int:
    """Kernel libraries mapped into the process (distinct files)."""
    roots = [tempfile.gettempdir(), os.environ.get("TCJIT_CACHE_DIR") or tempfile.gettempdir()]
    paths = set()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        for line in f:
            path = line.split(None, 5)[-1].strip() if line.count(" ") >= 5 else ""
            if ".so" in path and any(path.startswith(r) for r in roots):
                paths.add(path)
    return len(paths)


def _settle() -> None:
    gc.collect()
    gc.collect()


def _outer_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a[:, None] * b[None, :]).sum(1)


@pytest.fixture
def budget(monkeypatch):
    """Sets ``TCJIT_MEMORY_BUDGET``; afterwards the budget is trimmed back to the default."""

    def set_budget(nbytes: int) -> int:
        monkeypatch.setenv("TCJIT_MEMORY_BUDGET", str(nbytes))
        return nbytes

    yield set_budget
    monkeypatch.delenv("TCJIT_MEMORY_BUDGET", raising=False)
    BUDGET.trim(DEFAULT_BUDGET)


def _shapes_figure(shapes: int, n: int, limit: int) -> None:
    """``shapes`` sizes of OUTER with an ``n`` x ``n + s`` temporary under a budget of ``limit``:
    the growth stays within the budget while the kernel lives and is given back once it is gone."""
    a, bs = torch.randn(n), [torch.randn(n + s) for s in range(shapes)]
    wants = [_outer_reference(a, b) for b in bs]  # torch's products are not counted either
    k = tcjit.define(OUTER, dynamic=False)
    for b in bs:  # compiled (or found in the store) first: the compiler's own heap is not counted
        k(a, b)
    k = tcjit.define(OUTER, dynamic=False)
    # the runtime, OpenMP and torch.testing (tens of MB of modules) loaded before the start
    torch.testing.assert_close(k(torch.ones(4), torch.ones(4)), torch.full((4,), 4.0))
    _settle()
    rss0, libs0 = _rss(), _libraries()
    workspace = n * n * 4
    for b, want in zip(bs, wants):
        torch.testing.assert_close(k(a, b), want, rtol=1e-4, atol=1e-3)
    _settle()
    assert BUDGET.used <= limit
    assert _libraries() - libs0 <= limit // workspace + 1
    assert _rss() - rss0 <= limit + 16 * MiB, (_rss() - rss0) / MiB
    del k
    _settle()
    assert _libraries() <= libs0 - 1  # the warm-up's library is gone too
    assert _rss() - rss0 <= 16 * MiB, (_rss() - rss0) / MiB


def test_workspaces_and_libraries_stay_within_the_budget_and_go_with_the_kernel(budget) -> None:
    """Issue 29's first figure, small: twelve shapes of a kernel with a 4 MB temporary under a
    16 MiB budget keep at most four workspaces and five libraries; deleting the kernel gives
    back every workspace and unloads every library."""
    _shapes_figure(12, 1024, budget(16 * MiB))


@pytest.mark.full
def test_forty_shapes_of_a_16_mb_temporary_stay_within_the_default_budget(monkeypatch) -> None:
    """Issue 29's first figure at its sizes: 40 shapes, a 16 MB temporary each, default budget."""
    monkeypatch.delenv("TCJIT_MEMORY_BUDGET", raising=False)
    _shapes_figure(40, 2048, DEFAULT_BUDGET)


def _kernels_figure(count: int) -> None:
    x = torch.ones(16)
    tcjit.define("def warm(float(N) A) -> (B) { B(i) = A(i) }")(x)
    _settle()
    libs0, entries0 = _libraries(), len(BUDGET)
    for n in range(count):
        k = tcjit.define(f"def add{n}(float(N) A) -> (B) {{ B(i) = A(i) + {n}.0 }}")
        assert float(k(x)[0]) == 1.0 + n
        del k
    _settle()
    assert _libraries() <= libs0
    assert len(BUDGET) <= entries0


def test_libraries_of_deleted_kernels_are_unloaded() -> None:
    """Issue 29's second figure, small: 30 kernels defined, called and deleted leave no library
    mapped and nothing in the budget."""
    _kernels_figure(30)


@pytest.mark.full
def test_five_hundred_deleted_kernels_leave_no_library_mapped() -> None:
    """Issue 29's second figure at its size: 500 kernels."""
    _kernels_figure(500)


def test_an_evicted_specialisation_is_loaded_again_from_disk(budget, tmp_path, monkeypatch) -> None:
    """Eviction drops the in-memory entry and frees the workspace; the next call of that layout
    loads the library from the kernel store (no compilation) and computes the same result."""
    monkeypatch.setenv("TCJIT_CACHE_DIR", str(tmp_path / "kernels"))
    budget(0)  # nothing but the most recent specialisation
    k = tcjit.define(OUTER, dynamic=False)
    a, b, c = torch.randn(64), torch.randn(100), torch.randn(101)
    first = k(a, b)
    (spec,) = k._specializations.values()
    assert not spec.from_disk and spec in BUDGET
    k(a, c)  # evicts the first layout's
    assert len(k._specializations) == 1 and spec not in BUDGET
    torch.testing.assert_close(k(a, b), first)
    (again,) = k._specializations.values()
    assert again is not spec and again.from_disk


def _squares_reference(a: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, w = a.detach().requires_grad_(), w.detach().requires_grad_()
    ((a * w) ** 2 + a).sum().backward()
    return a.grad, w.grad


def test_backward_runs_after_its_forwards_specialisation_was_evicted(budget) -> None:
    """A forward recorded for autograd, then calls of other shapes that evict its specialisation
    (and the backward's): the graph still holds the forward's code and the backward is loaded
    again; the gradients are torch's."""
    budget(0)
    k = tcjit.define(SQUARES, dynamic=False)
    a, w = torch.randn(300, requires_grad=True), torch.randn(300, requires_grad=True)
    k(a, w).sum().backward()  # compiles the backward too
    a.grad = w.grad = None
    y = k(a, w)
    (call,) = k._grad_calls.values()
    for n in (301, 302):  # other layouts, forward and backward: each evicts the previous ones
        k(torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)).sum().backward()
    assert call not in k._grad_calls.values() and call.spec not in BUDGET
    y.sum().backward()
    want_a, want_w = _squares_reference(a, w)
    torch.testing.assert_close(a.grad, want_a)
    torch.testing.assert_close(w.grad, want_w)


def test_a_kernel_collected_while_a_graph_holds_it_keeps_its_code_until_the_graph_goes() -> None:
    """``del k`` while an autograd graph holds a call of it: the forward's and backward's code stays
    loaded for the graph (backward computes torch's gradients), and is unloaded with the graph."""
    k = tcjit.define(SQUARES)
    a, w = torch.randn(200, requires_grad=True), torch.randn(200, requires_grad=True)
    k(a, w).sum().backward()  # forward and backward compiled (and the runtime warmed up)
    a.grad = w.grad = None
    _settle()
    libs = _libraries()
    y = k(a, w)
    del k
    _settle()
    assert _libraries() == libs  # the graph holds the kernel's code
    y.sum().backward()
    want_a, want_w = _squares_reference(a, w)
    torch.testing.assert_close(a.grad, want_a)
    torch.testing.assert_close(w.grad, want_w)
    del y
    _settle()
    assert _libraries() <= libs - 2  # the forward's and the backward's libraries are unloaded


def _twice(kernel):
    return lambda a, b: kernel(a, b) * 2


def test_a_compiled_function_keeps_calling_a_deleted_kernel_under_the_budget(budget) -> None:
    """A ``torch.compile``'d function holding a kernel after ``del``: its graphs keep calling it,
    each shape's specialisation is evicted by the next under a tiny budget (no more libraries
    stay loaded than the budget allows) and loaded again when its graph runs."""
    budget(0)
    k = tcjit.define(OUTER, dynamic=False)
    f = torch.compile(_twice(k), fullgraph=True, backend="aot_eager", dynamic=False)
    a = torch.randn(32)
    bs = [torch.randn(n) for n in (40, 41, 42)]
    f(a, bs[0])
    _settle()
    libs = _libraries()
    del k
    _settle()
    for _ in range(2):
        for b in bs:
            torch.testing.assert_close(f(a, b), 2 * _outer_reference(a, b), rtol=1e-4, atol=1e-4)
            _settle()
            assert _libraries() <= libs
    del f
    torch._dynamo.reset()


_STRESS = textwrap.dedent(
    """
    import gc, os, threading, torch, tcjit
    from tcjit.memory import BUDGET
    torch.set_num_threads(2)
    SOURCE = '''
    def outer{n}(float(N) A, float(M) B) -> (S) {{
        T(i, j) = A(i) * B(j)
        S(i) +=! T(i, r_j)
    }}
    '''
    a = torch.randn(256)
    bs = [torch.randn(200 + s) for s in range(4)]
    want = [(a[:, None] * b[None, :]).sum(1) for b in bs]
    shared = tcjit.define(SOURCE.format(n=0))
    errors = []

    def work(t):
        try:
            for cycle in range(12):
                own = tcjit.define(SOURCE.format(n=1 + cycle % 3))
                for s, b in enumerate(bs):
                    for k in (shared, own):
                        got = k(a, b)
                        if not torch.allclose(got, want[s], rtol=1e-4, atol=1e-3):
                            errors.append((t, cycle, s))
                    if t == 0:
                        BUDGET.trim(0)  # evict (free workspaces) under the other threads' calls
                del own
                gc.collect()  # unload libraries whose code OpenMP threads ran
        except BaseException as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:5]
    print("ok")
    """
)


def test_evicting_and_unloading_while_other_threads_call_kernels(tmp_path) -> None:
    """Stress, in a child process (a crash fails the test, not the run): four threads call a
    shared kernel and kernels of their own with OpenMP, on four shapes (each parallel, with a
    200 KB temporary), while one of them evicts everything after each call (workspaces freed
    under the others' calls) and each deletes and collects its own kernels (libraries unloaded
    after OpenMP's threads ran their code), twelve cycles each."""
    env = {**os.environ, "TCJIT_MEMORY_BUDGET": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", _STRESS], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


class _FakeSpec:
    """What the budget needs of a specialisation: its bytes and ``release``."""

    memory_bytes = 1000

    def __init__(self) -> None:
        self.released = 0

    def release(self) -> None:
        self.released += 1


def test_aliases_of_one_specialisation_count_once_and_stay_bounded() -> None:
    from tcjit.memory import ALIASES_PER_CACHE, SpecializationCache

    spec, newer = _FakeSpec(), _FakeSpec()
    BUDGET.admit(spec)
    used = BUDGET.used
    cache = SpecializationCache()
    cache.keep("family", spec)
    n = 3 * ALIASES_PER_CACHE
    for i in range(n):  # one size after another, served by one symbolic specialisation
        cache.keep_alias(("layout", i), spec)
    assert BUDGET.used == used, "counted once, whatever its aliases"
    assert cache.aliases == ALIASES_PER_CACHE and len(cache) == ALIASES_PER_CACHE + 1
    assert ("layout", n - 1) in cache and ("layout", 0) not in cache, "the oldest go"
    assert BUDGET.holders(spec) == ALIASES_PER_CACHE + 1, "dropped aliases no longer hold it"
    cache.keep_alias(("layout", n - 1), spec)  # again: no second holder, no second alias
    assert BUDGET.holders(spec) == ALIASES_PER_CACHE + 1 and cache.aliases == ALIASES_PER_CACHE
    for i in range(200):  # caches that go away (a dropped GradCall's) leave no holder behind
        other = SpecializationCache()
        other.keep(("grad", i), spec)
        del other
    assert len(BUDGET._recent[id(spec)].holders) <= 2 * (ALIASES_PER_CACHE + 1) + 16
    BUDGET.admit(newer)
    BUDGET.trim(newer.memory_bytes)  # evicts ``spec``: the family and every alias are dropped
    assert len(cache) == 0 and cache.aliases == 0 and spec.released == 1
    BUDGET.trim(DEFAULT_BUDGET)
