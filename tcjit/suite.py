"""The benchmark suite of KERNELS.md, as data.

Fifteen TC kernels, each with the sizes it is measured at, a deterministic input generator, the
code a PyTorch user would otherwise write (:meth:`SuiteKernel.torch_ref`) and its work
(:meth:`SuiteKernel.flops`, :meth:`SuiteKernel.bytes`). Tests, the demo and the benchmarks share it::

    from tcjit import suite

    k = suite.get("matmul")
    A, B = k.make_inputs(k.cpu_sizes)
    (C,) = k.torch_ref(A, B)
    gflops = k.flops(k.cpu_sizes) / seconds / 1e9      # k.metric == "GFLOP/s"

Size dictionaries name the size symbols of the TC source (``{"M": 512, "K": 512, "N": 512}``).
Input and output shapes follow from the checked source, so they cannot drift from the TC text.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from .polyhedral.lang.checked import CheckedDef

__all__ = ["SUITE", "SuiteKernel", "get", "names"]

Sizes = Mapping[str, int]


@dataclass(frozen=True, eq=False)
class SuiteKernel:
    """One kernel of the suite.

    :ivar name: the kernel's name (also the TC entry point).
    :ivar source: the TC text, verbatim from KERNELS.md.
    :ivar entry: the ``def`` to run.
    :ivar metric: the headline figure: ``"GFLOP/s"`` for contractions (2 flops per multiply-add),
        ``"GB/s"`` of compulsory traffic for memory-bound kernels.
    :ivar cpu_sizes: the size symbols at which the CPU benchmark runs.
    :ivar gpu_sizes: the GPU benchmark sizes (several for some kernels).
    :ivar small_sizes: small sizes for tests (odd, prime and unit sizes; under ~2e6 multiply-adds).
    :ivar large_size: a size between the small and the benchmark ones, for the full test tier.
    :ivar temporaries: outputs that may be left out of ``-> (...)`` (then temporaries, [ext]).
    :ivar reduction_length: the longest reduction, as a function of the sizes (for tolerances).
    """

    name: str
    source: str
    entry: str
    metric: str
    cpu_sizes: Sizes
    gpu_sizes: Sequence[Sizes]
    small_sizes: Sequence[Sizes]
    large_size: Sizes
    temporaries: tuple[str, ...]
    reduction_length: Callable[[Sizes], int]
    _torch_ref: Callable[..., tuple[torch.Tensor, ...]] = field(repr=False)
    _flops: Callable[[Sizes], int] = field(repr=False)
    _scales: Mapping[str, Callable[[Sizes], float]] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------------------------ shapes
    @property
    def checked(self) -> CheckedDef:
        """The checked ``def`` of :attr:`entry` (parsed once per process)."""
        return _checked(self.source, self.entry)

    def input_shapes(self, sizes: Sizes) -> tuple[tuple[int, ...], ...]:
        """The shape of every input, in parameter order."""
        d = self.checked
        return tuple(tuple(s.evaluate(sizes) for s in d.tensor(p).shape) for p in d.params)

    def output_shapes(self, sizes: Sizes) -> tuple[tuple[int, ...], ...]:
        """The shape of every output, in the order of ``-> (...)``."""
        d = self.checked
        return tuple(tuple(s.evaluate(sizes) for s in d.tensor(o).shape) for o in d.outputs)

    # ------------------------------------------------------------------------------------ values
    def make_inputs(
        self, sizes: Sizes, dtype: torch.dtype | None = None, device: str = "cpu", seed: int = 0
    ) -> tuple[torch.Tensor, ...]:
        """Deterministic standard-normal inputs, contiguous, on ``device`` (float32 by default).

        Values are drawn in float32 on the CPU from a generator seeded with ``seed`` and then
        converted, so every dtype and device sees the same numbers (up to rounding). Weights of
        chained layers are scaled by ``1/sqrt(fan_in)`` (as ``nn.Linear`` initialises them) so that
        activations stay of order one whatever the sizes.
        """
        import torch

        gen = torch.Generator().manual_seed(seed)
        dtype = torch.float32 if dtype is None else dtype
        out = []
        for name, shape in zip(self.checked.params, self.input_shapes(sizes)):
            x = torch.randn(shape, generator=gen, dtype=torch.float32)
            if name in self._scales:
                x = x * self._scales[name](sizes)
            out.append(x.to(dtype=dtype, device=device))
        return tuple(out)

    def torch_ref(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The natural PyTorch code for this kernel: every output of the entry, in order."""
        return self._torch_ref(*inputs)

    # -------------------------------------------------------------------------------------- work
    def flops(self, sizes: Sizes) -> int:
        """Arithmetic work: 2 flops per multiply-add for contractions (epilogues not counted);
        for memory-bound kernels one flop per elementwise operation or reduction step."""
        return int(self._flops(sizes))

    def bytes(self, sizes: Sizes, itemsize: int = 4) -> int:
        """Compulsory traffic in bytes: every input read once and every output written once."""
        shapes = self.input_shapes(sizes) + self.output_shapes(sizes)
        return itemsize * sum(math.prod(s) for s in shapes)

    def source_for(self, dtype: torch.dtype | None = None) -> str:
        """The source with its ``float`` tensors declared as ``dtype`` instead (float64, float16,
        bfloat16); the body is unchanged, so its literals follow the new type."""
        import torch

        name = {
            None: None,
            torch.float32: None,
            torch.float64: "double",
            torch.float16: "half",
            torch.bfloat16: "bfloat16",
        }[dtype]
        if name is None:
            return self.source
        head, brace, body = self.source.partition("{")
        return re.sub(r"\bfloat\(", f"{name}(", head) + brace + body

    def source_without_temporaries(self, keep: Sequence[str] | None = None) -> str:
        """The source with only ``keep`` (default: the outputs that are not :attr:`temporaries`)
        in ``-> (...)``; the others become temporaries [ext]."""
        d = self.checked
        keep = [o for o in d.outputs if o not in self.temporaries] if keep is None else list(keep)
        head, sep, rest = self.source.partition("->")
        open_, close = rest.index("("), rest.index(")")
        return head + sep + rest[: open_ + 1] + ", ".join(keep) + rest[close:]


@functools.cache
def _checked(source: str, entry: str) -> CheckedDef:
    from .polyhedral.lang.check import check_source

    d = check_source(source).get(entry)
    assert d is not None, entry
    return d


# ================================================================================ torch references
def _F():
    import torch.nn.functional as F

    return F


def _matmul(A, B):
    return (A @ B,)


def _tmm(A, B):
    return (A @ B.T,)


def _tbmm(X, Y):
    import torch

    return (torch.bmm(X, Y.transpose(1, 2)),)


def _fcrelu(I, W, bias):
    import torch

    return (torch.relu(_F().linear(I, W, bias)),)


def _mlp3(I, W1, B1, W2, B2, W3, B3):
    import torch

    F = _F()
    O1 = torch.relu(F.linear(I, W1, B1))
    O2 = torch.relu(F.linear(O1, W2, B2))
    O3 = torch.relu(F.linear(O2, W3, B3))
    return O1, O2, O3


def _gconv(I, W1):
    N, G, C, H, W = I.shape
    _, Fo, _, KH, KW = W1.shape
    O = _F().conv2d(I.reshape(N, G * C, H, W), W1.reshape(G * Fo, C, KH, KW), groups=G)
    return (O.reshape(N, G, Fo, H - KH + 1, W - KW + 1),)


def _conv2d(I, W1):
    return (_F().conv2d(I, W1),)


def _kronecker3(W0, W1, W2, X):
    M, N0 = X.shape[:2]
    D0, D1, D2 = W0.shape[0], W1.shape[0], W2.shape[0]
    XW2 = X @ W2.T  # (M, N0, N1, D2)
    XW1 = W1 @ XW2  # (D1, N1) @ (M, N0, N1, D2) -> (M, N0, D1, D2)
    Y = (W0 @ XW1.reshape(M, N0, D1 * D2)).reshape(M, D0, D1, D2)
    return XW2, XW1, Y


def _tensordot(I0, I1):
    import torch

    N, C0, C1, C2 = I0.shape
    return (torch.bmm(I0.reshape(N, C0 * C1, C2), I1).reshape(N, C0, C1, I1.shape[2]),)


def _softmax(I):
    import torch

    mx = I.amax(dim=1)
    sm = torch.exp(I - mx[:, None]).sum(dim=1)
    return torch.softmax(I, dim=1), mx, sm


def _layernorm(I, gamma, beta):
    import torch

    var, mean = torch.var_mean(I, dim=1, correction=0)
    return _F().layer_norm(I, (I.shape[1],), gamma, beta, eps=1e-5), mean, var


def _bn_reduce(I):
    return (I.mean(dim=(0, 2, 3)),)


def _cosine(A, B):
    nA = (A * A).sum(dim=1)
    nB = (B * B).sum(dim=1)
    dot = (A * B).sum(dim=1)
    return _F().cosine_similarity(A, B, dim=1, eps=1e-8), nA, nB, dot


def _maxpool2x2(I):
    return (_F().max_pool2d(I, 2),)


def _abs_sum(A):
    return (A.abs().sum(),)


# ======================================================================================= the table
def _p(*xs: int) -> int:
    return math.prod(xs)


def _kernel(
    name: str,
    source: str,
    metric: str,
    cpu: Sizes,
    gpu: Sequence[Sizes],
    small: Sequence[Sizes],
    large: Sizes,
    ref: Callable[..., tuple[torch.Tensor, ...]],
    flops: Callable[[Sizes], int],
    reduction: Callable[[Sizes], int],
    temporaries: tuple[str, ...] = (),
    scales: Mapping[str, Callable[[Sizes], float]] | None = None,
) -> SuiteKernel:
    return SuiteKernel(
        name=name,
        source=source.strip("\n") + "\n",
        entry=name,
        metric=metric,
        cpu_sizes=dict(cpu),
        gpu_sizes=[dict(g) for g in gpu],
        small_sizes=[dict(s) for s in small],
        large_size=dict(large),
        temporaries=temporaries,
        reduction_length=reduction,
        _torch_ref=ref,
        _flops=flops,
        _scales=dict(scales or {}),
    )


def _cube(v: int) -> dict[str, int]:
    return {"M": v, "K": v, "N": v}


def _mlp(b: int, m: int, n: int, p: int, q: int) -> dict[str, int]:
    return {"B": b, "M": m, "N": n, "P": p, "Q": q}


def _gc(n: int, g: int, c: int, h: int, k: int = 3, f: int | None = None) -> dict[str, int]:
    return {"N": n, "G": g, "C": c, "H": h, "W": h, "F": c if f is None else f, "KH": k, "KW": k}


def _cv(n: int, c: int, h: int, k: int = 3, f: int | None = None, w: int | None = None) -> dict[str, int]:
    return {"N": n, "C": c, "H": h, "W": h if w is None else w, "F": c if f is None else f, "KH": k, "KW": k}


def _kr(m: int, d: int, n: int | None = None) -> dict[str, int]:
    n = d if n is None else n
    return {"M": m, "D0": d, "N0": n, "D1": d, "N1": n, "D2": d, "N2": n}


def _td(v: int) -> dict[str, int]:
    return {"N": v, "C0": v, "C1": v, "C2": v, "C3": v}


def _valid(s: Sizes) -> tuple[int, int]:
    """Output height and width of a "valid" convolution (no padding, stride 1)."""
    return s["H"] - s["KH"] + 1, s["W"] - s["KW"] + 1


def _kr_flops(s: Sizes) -> int:
    m = s["M"]
    return (
        2
        * m
        * (
            s["N0"] * s["N1"] * s["D2"] * s["N2"]
            + s["N0"] * s["D1"] * s["D2"] * s["N1"]
            + s["D0"] * s["D1"] * s["D2"] * s["N0"]
        )
    )


_KERNELS: list[SuiteKernel] = [
    _kernel(
        "matmul",
        """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)
}""",
        "GFLOP/s",
        _cube(512),
        [_cube(4096)],
        [{"M": 1, "K": 1, "N": 1}, {"M": 37, "K": 53, "N": 29}, {"M": 64, "K": 127, "N": 1}],
        {"M": 257, "K": 300, "N": 129},
        _matmul,
        lambda s: 2 * _p(s["M"], s["N"], s["K"]),
        lambda s: s["K"],
    ),
    _kernel(
        "tmm",
        """
def tmm(float(M,K) A, float(N,K) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(n, r_k)
}""",
        "GFLOP/s",
        _cube(512),
        [{"M": 128, "K": 32, "N": 256}, {"M": 128, "K": 1024, "N": 1024}, {"M": 128, "K": 4096, "N": 16384}],
        [{"M": 1, "K": 7, "N": 3}, {"M": 31, "K": 67, "N": 41}, {"M": 16, "K": 1, "N": 33}],
        {"M": 128, "K": 1024, "N": 255},
        _tmm,
        lambda s: 2 * _p(s["M"], s["N"], s["K"]),
        lambda s: s["K"],
    ),
    _kernel(
        "tbmm",
        """
def tbmm(float(B,M,K) X, float(B,N,K) Y) -> (Z) {
    Z(b, m, n) +=! X(b, m, r_k) * Y(b, n, r_k)
}""",
        "GFLOP/s",
        {"B": 500, "M": 72, "N": 26, "K": 26},
        [{"B": 500, "M": 72, "N": 26, "K": 26}],
        [
            {"B": 1, "M": 1, "N": 1, "K": 1},
            {"B": 5, "M": 13, "N": 7, "K": 26},
            {"B": 11, "M": 9, "N": 26, "K": 3},
        ],
        {"B": 100, "M": 72, "N": 26, "K": 26},
        _tbmm,
        lambda s: 2 * _p(s["B"], s["M"], s["N"], s["K"]),
        lambda s: s["K"],
    ),
    _kernel(
        "fcrelu",
        """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}""",
        "GFLOP/s",
        {"B": 128, "M": 1024, "N": 1024},
        [{"B": 128, "M": 2000, "N": 128}],
        [{"B": 1, "M": 1, "N": 1}, {"B": 7, "M": 61, "N": 17}, {"B": 32, "M": 100, "N": 3}],
        {"B": 128, "M": 1024, "N": 129},
        _fcrelu,
        lambda s: 2 * _p(s["B"], s["M"], s["N"]),
        lambda s: s["M"],
    ),
    _kernel(
        "mlp3",
        """
def mlp3(float(B,M) I, float(N,M) W1, float(N) B1, float(P,N) W2, float(P) B2,
         float(Q,P) W3, float(Q) B3) -> (O1, O2, O3) {
    O1(b, n) +=! I(b, r_m) * W1(n, r_m)
    O1(b, n)  = fmax(O1(b, n) + B1(n), 0)
    O2(b, p) +=! O1(b, r_n) * W2(p, r_n)
    O2(b, p)  = fmax(O2(b, p) + B2(p), 0)
    O3(b, q) +=! O2(b, r_p) * W3(q, r_p)
    O3(b, q)  = fmax(O3(b, q) + B3(q), 0)
}""",
        "GFLOP/s",
        _mlp(128, 512, 256, 128, 64),
        [_mlp(128, 128, 64, 32, 2)],
        [_mlp(1, 1, 1, 1, 1), _mlp(5, 37, 19, 11, 2), _mlp(16, 64, 32, 1, 7)],
        _mlp(128, 512, 256, 128, 64),
        _mlp3,
        lambda s: 2 * s["B"] * (s["M"] * s["N"] + s["N"] * s["P"] + s["P"] * s["Q"]),
        lambda s: max(s["M"], s["N"], s["P"]),
        temporaries=("O1", "O2"),
        scales={
            "W1": lambda s: s["M"] ** -0.5,
            "W2": lambda s: s["N"] ** -0.5,
            "W3": lambda s: s["P"] ** -0.5,
        },
    ),
    _kernel(
        "gconv",
        """
def gconv(float(N,G,C,H,W) I, float(G,F,C,KH,KW) W1) -> (O) {
    O(n, g, f, h, w) +=! I(n, g, r_c, h + r_kh, w + r_kw) * W1(g, f, r_c, r_kh, r_kw)
}""",
        "GFLOP/s",
        _gc(32, 32, 16, 58),
        [_gc(32, 32, 4, 58), _gc(32, 32, 8, 30), _gc(32, 32, 16, 16), _gc(32, 32, 32, 9)],
        [_gc(1, 1, 1, 3), _gc(2, 3, 5, 11, f=4), _gc(1, 4, 3, 7, k=1, f=2)],
        _gc(4, 8, 8, 30),
        _gconv,
        lambda s: 2 * _p(s["N"], s["G"], s["F"], s["C"], s["KH"], s["KW"], *_valid(s)),
        lambda s: s["C"] * s["KH"] * s["KW"],
    ),
    _kernel(
        "conv2d",
        """
def conv2d(float(N,C,H,W) I, float(F,C,KH,KW) W1) -> (O) {
    O(n, f, h, w) +=! I(n, r_c, h + r_kh, w + r_kw) * W1(f, r_c, r_kh, r_kw)
}""",
        "GFLOP/s",
        _cv(8, 64, 58),
        [_cv(32, 128, 58)],
        [_cv(1, 1, 3), _cv(2, 7, 13, f=5, w=11), _cv(1, 3, 9, k=1, f=1)],
        _cv(2, 32, 30),
        _conv2d,
        lambda s: 2 * _p(s["N"], s["F"], s["C"], s["KH"], s["KW"], *_valid(s)),
        lambda s: s["C"] * s["KH"] * s["KW"],
    ),
    _kernel(
        "kronecker3",
        """
def kronecker3(float(D0,N0) W0, float(D1,N1) W1, float(D2,N2) W2, float(M,N0,N1,N2) X)
    -> (XW2, XW1, Y) {
    XW2(m, n0, n1, d2) +=! X(m, n0, n1, r_n2) * W2(d2, r_n2)
    XW1(m, n0, d1, d2) +=! XW2(m, n0, r_n1, d2) * W1(d1, r_n1)
    Y(m, d0, d1, d2)   +=! XW1(m, r_n0, d1, d2) * W0(d0, r_n0)
}""",
        "GFLOP/s",
        _kr(256, 16),
        [_kr(256, 16), _kr(256, 32)],
        [_kr(1, 1), _kr(3, 5, 7), {"M": 2, "D0": 3, "N0": 4, "D1": 1, "N1": 5, "D2": 6, "N2": 7}],
        _kr(64, 16),
        _kronecker3,
        _kr_flops,
        # Y is a sum of N0 * N1 * N2 products (three chained sums): its rounding error is that of
        # one sum that long, not of the longest single stage (the bench once flagged 1 element in
        # a million 5.4e-5 off, at the single-stage tolerance of 4e-5, while both torch and tcjit
        # were within 1.2e-4 of the float64 result).
        lambda s: s["N0"] * s["N1"] * s["N2"],
        temporaries=("XW2", "XW1"),
    ),
    _kernel(
        "tensordot",
        """
def tensordot(float(N,C0,C1,C2) I0, float(N,C2,C3) I1) -> (O) {
    O(n, c0, c1, c3) +=! I0(n, c0, c1, r_c2) * I1(n, r_c2, c3)
}""",
        "GFLOP/s",
        _td(32),
        [_td(64)],
        [
            _td(1),
            {"N": 3, "C0": 5, "C1": 7, "C2": 11, "C3": 13},
            {"N": 2, "C0": 1, "C1": 16, "C2": 31, "C3": 4},
        ],
        _td(32),
        _tensordot,
        lambda s: 2 * _p(s["N"], s["C0"], s["C1"], s["C2"], s["C3"]),
        lambda s: s["C2"],
    ),
    _kernel(
        "softmax",
        """
def softmax(float(N,D) I) -> (O, mx, sm) {
    mx(n) max=! I(n, r_d)
    sm(n) +=!   exp(I(n, r_d) - mx(n))
    O(n, d) =   exp(I(n, d) - mx(n)) / sm(n)
}""",
        "GB/s",
        {"N": 4096, "D": 1024},
        [{"N": 32768, "D": 1024}],
        [{"N": 1, "D": 1}, {"N": 13, "D": 97}, {"N": 64, "D": 1000}],
        {"N": 512, "D": 1024},
        _softmax,
        lambda s: 7 * s["N"] * s["D"],
        lambda s: s["D"],
        temporaries=("mx", "sm"),
    ),
    _kernel(
        "layernorm",
        """
def layernorm(float(N,D) I, float(D) gamma, float(D) beta) -> (O, mean, var) {
    mean(n) +=! I(n, r_d) / D
    var(n)  +=! (I(n, r_d) - mean(n)) * (I(n, r_d) - mean(n)) / D
    O(n, d)  =  gamma(d) * (I(n, d) - mean(n)) * rsqrt(var(n) + 1e-5) + beta(d)
}""",
        "GB/s",
        {"N": 4096, "D": 1024},
        [{"N": 32768, "D": 1024}],
        [{"N": 1, "D": 1}, {"N": 17, "D": 89}, {"N": 50, "D": 1024}],
        {"N": 512, "D": 1024},
        _layernorm,
        lambda s: 11 * s["N"] * s["D"],
        lambda s: s["D"],
        temporaries=("mean", "var"),
    ),
    _kernel(
        "bn_reduce",
        """
def bn_reduce(float(N,C,H,W) I) -> (mean) {
    mean(c) +=! I(r_n, c, r_h, r_w)
    mean(c)  =  mean(c) / float(N * H * W)
}""",
        "GB/s",
        {"N": 32, "C": 64, "H": 56, "W": 56},
        [{"N": 64, "C": 256, "H": 56, "W": 56}],
        [
            {"N": 1, "C": 1, "H": 1, "W": 1},
            {"N": 3, "C": 5, "H": 7, "W": 11},
            {"N": 8, "C": 16, "H": 56, "W": 56},
        ],
        {"N": 8, "C": 64, "H": 56, "W": 56},
        _bn_reduce,
        lambda s: _p(s["N"], s["C"], s["H"], s["W"]) + s["C"],
        lambda s: s["N"] * s["H"] * s["W"],
    ),
    _kernel(
        "cosine",
        """
def cosine(float(M,N) A, float(M,N) B) -> (O, nA, nB, dot) {
    nA(m)  +=! A(m, r_n) * A(m, r_n)
    nB(m)  +=! B(m, r_n) * B(m, r_n)
    dot(m) +=! A(m, r_n) * B(m, r_n)
    O(m)    =  dot(m) / fmax(sqrt(nA(m) * nB(m)), 1e-8)
}""",
        "GB/s",
        {"M": 4096, "N": 256},
        [{"M": 32768, "N": 1024}],
        [{"M": 1, "N": 1}, {"M": 23, "N": 101}, {"M": 256, "N": 256}],
        {"M": 4096, "N": 256},
        _cosine,
        lambda s: 6 * s["M"] * s["N"] + 4 * s["M"],
        lambda s: s["N"],
        temporaries=("nA", "nB", "dot"),
    ),
    _kernel(
        "maxpool2x2",
        """
def maxpool2x2(float(N,C,H,W) I) -> (O) {
    O(n, c, h, w) max=! I(n, c, 2 * h + r_kh, 2 * w + r_kw) where r_kh in 0:2, r_kw in 0:2
}""",
        "GB/s",
        {"N": 32, "C": 64, "H": 112, "W": 112},
        [{"N": 64, "C": 128, "H": 112, "W": 112}],
        [
            {"N": 1, "C": 1, "H": 2, "W": 3},
            {"N": 2, "C": 3, "H": 13, "W": 10},
            {"N": 4, "C": 16, "H": 112, "W": 111},
        ],
        {"N": 8, "C": 64, "H": 112, "W": 112},
        _maxpool2x2,
        lambda s: 4 * _p(s["N"], s["C"], s["H"] // 2, s["W"] // 2),
        lambda s: 4,
    ),
    _kernel(
        "abs_sum",
        """
def abs_sum(float(M,N) A) -> (S) {
    S +=! fabs(A(r_m, r_n))
}""",
        "GB/s",
        {"M": 8192, "N": 8192},
        [{"M": 16384, "N": 16384}],
        [{"M": 1, "N": 1}, {"M": 3, "N": 1009}, {"M": 512, "N": 333}],
        {"M": 2048, "N": 2048},
        _abs_sum,
        lambda s: 2 * s["M"] * s["N"],
        lambda s: s["M"] * s["N"],
    ),
]

SUITE: dict[str, SuiteKernel] = {k.name: k for k in _KERNELS}
"""The fifteen kernels, in the order of KERNELS.md."""


def names() -> tuple[str, ...]:
    """The kernel names, in the order of KERNELS.md."""
    return tuple(SUITE)


def get(name: str) -> SuiteKernel:
    """The suite kernel called ``name``; ``KeyError`` listing the names if there is none."""
    try:
        return SUITE[name]
    except KeyError:
        raise KeyError(f"no suite kernel {name!r}; the suite has {', '.join(SUITE)}") from None
