"""Train a small MLP whose layers are tcjit kernels on scikit-learn's handwritten digits, next to the
same model in plain torch, and compare the two runs step by step.

The data set ships with scikit-learn (``sklearn.datasets.load_digits``: 1797 8x8 images, 10 classes,
pixel values 0..16; nothing is downloaded). The tcjit model is ``fcrelu`` layers (a fully connected
layer and a ReLU in one TC kernel) for the hidden layers and a ``linear`` TC kernel for the logits,
as ``torch.nn.Module``s holding ``nn.Parameter``s; their backward is derived by tcjit
(``backward="auto"``). The torch model is ``nn.Linear`` + ``torch.relu``. Both models start from the
same weights (the torch model's initialisation, copied: the two have the same parameter names), use
the same optimizer and see the same batches in the same order, so their losses should agree step by
step up to float32 rounding (tcjit and torch's GEMM sum the products in different orders).

Run it::

    .venv/bin/python examples/train_digits.py                # 20 epochs, SGD with momentum
    .venv/bin/python examples/train_digits.py --epochs 5 --optimizer adam --lr 1e-3
    .venv/bin/python examples/train_digits.py --compile --batch-size 100   # torch.compile(dynamic=True)

Or use the pieces (``tests/runtime/test_training.py`` and ``notebooks/03-training.ipynb`` do)::

    data = load_data()
    tc_model, torch_model = make_models(seed=0)
    tc_run = train(tc_model, data, epochs=5)
    torch_run = train(torch_model, data, epochs=5)
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import tcjit

FCRELU = """
def fcrelu(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = fmax(O(b, n) + bias(n), 0)
}"""

LINEAR = """
def linear(float(B,M) I, float(N,M) W, float(N) bias) -> (O) {
    O(b, n) +=! I(b, r_m) * W(n, r_m)
    O(b, n)  = O(b, n) + bias(n)
}"""

# Parsed and checked once, at import; each is compiled per input layout on first call, and its
# backward (derived from the TC text) on the first backward pass.
fcrelu = tcjit.define(FCRELU)
linear = tcjit.define(LINEAR)

SIZES = (64, 64, 32, 10)
"""Features per layer: 64 pixels in, two hidden layers of 64 and 32 units, 10 logits out."""

N_TRAIN = 1440
"""Training images (the rest, 357, are the test set): 1440 is a multiple of every batch size used
here (16, 32, 48, 64, 96, ...), so every batch has the same shape and each kernel is compiled once."""


# ========================================================================================= layers
class _Dense(nn.Module):
    """A fully connected layer with ``nn.Linear``'s parameters (``weight`` of shape
    ``(out_features, in_features)``, ``bias``) and initialisation, computed by a TC kernel."""

    kernel: tcjit.Kernel

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Linear's initialisation, so that both models draw the same numbers from one seed.
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(self.in_features)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, kernel={self.kernel.name}"


class TCFCReLU(_Dense):
    """``relu(x @ weight.T + bias)`` in one tcjit kernel (:data:`FCRELU`)."""

    kernel = fcrelu


class TCLinear(_Dense):
    """``x @ weight.T + bias`` as a tcjit kernel (:data:`LINEAR`)."""

    kernel = linear


class LinearReLU(nn.Linear):
    """``relu(nn.Linear(x))``: the torch twin of :class:`TCFCReLU` (same parameter names)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(super().forward(x))


def tcjit_mlp(sizes: Sequence[int] = SIZES) -> nn.Sequential:
    """``fcrelu`` layers between ``sizes[i]`` and ``sizes[i + 1]``, then a ``linear`` one for the logits."""
    layers = [TCFCReLU(a, b) for a, b in itertools.pairwise(sizes[:-1])]
    return nn.Sequential(*layers, TCLinear(sizes[-2], sizes[-1]))


def torch_mlp(sizes: Sequence[int] = SIZES) -> nn.Sequential:
    """The same model in plain torch: :class:`LinearReLU` layers, then ``nn.Linear``."""
    layers = [LinearReLU(a, b) for a, b in itertools.pairwise(sizes[:-1])]
    return nn.Sequential(*layers, nn.Linear(sizes[-2], sizes[-1]))


def make_models(seed: int = 0, sizes: Sequence[int] = SIZES) -> tuple[nn.Sequential, nn.Sequential]:
    """``(tcjit model, torch model)`` with the same initial weights: the torch model is initialised
    from ``seed`` and its parameters are copied into the tcjit model (same names, same shapes)."""
    torch.manual_seed(seed)
    reference = torch_mlp(sizes)
    model = tcjit_mlp(sizes)
    model.load_state_dict(reference.state_dict())
    return model, reference


# =========================================================================================== data
@dataclass(frozen=True)
class Digits:
    """The digits data set, split once: pixels scaled to [0, 1] (float32), labels (int64)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def load_data(n_train: int = N_TRAIN, seed: int = 0) -> Digits:
    """scikit-learn's digits, shuffled with ``seed`` and split into ``n_train`` training images and
    the rest for testing."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    return Digits(x[:n_train], y[:n_train], x[n_train:], y[n_train:])


# ======================================================================================= training
@dataclass(frozen=True)
class Run:
    """What one training run produced.

    :ivar losses: the training loss (mean cross-entropy of the batch) of every step, in order.
    :ivar epoch_losses: the mean of ``losses`` over each epoch.
    :ivar test_accuracy: the fraction of test images classified right after training.
    :ivar seconds: the training time (compilation of the tcjit kernels included).
    """

    losses: tuple[float, ...]
    epoch_losses: tuple[float, ...]
    test_accuracy: float
    seconds: float


def make_optimizer(model: nn.Module, name: str = "sgd", lr: float | None = None) -> torch.optim.Optimizer:
    """``"sgd"`` (momentum 0.9, ``lr`` 0.05 by default) or ``"adam"`` (``lr`` 1e-3 by default)."""
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.05 if lr is None else lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=1e-3 if lr is None else lr)
    raise ValueError(f"unknown optimizer {name!r}; expected sgd or adam")


def batches(n: int, batch_size: int, epochs: int, seed: int = 0) -> list[list[torch.Tensor]]:
    """The index batches of every epoch: a fresh permutation of ``range(n)`` per epoch, from one
    generator seeded with ``seed``, cut into batches of ``batch_size`` (the last may be shorter)."""
    gen = torch.Generator().manual_seed(seed)
    return [list(torch.randperm(n, generator=gen).split(batch_size)) for _ in range(epochs)]


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The fraction of ``x`` that ``model`` classifies as ``y``."""
    return (model(x).argmax(dim=1) == y).float().mean().item()


def train(
    model: nn.Module,
    data: Digits,
    *,
    epochs: int = 20,
    batch_size: int = 32,
    optimizer: str = "sgd",
    lr: float | None = None,
    seed: int = 0,
    step_hook=None,
) -> Run:
    """Train ``model`` with mean cross-entropy (torch's) on ``data``'s training images.

    The batches depend on ``seed`` only (:func:`batches`), so two models trained with the same
    arguments see the same images in the same order. ``step_hook(step, model)``, if given, is called
    after each backward pass and before the optimizer's step (to look at gradients).
    """
    opt = make_optimizer(model, optimizer, lr)
    losses: list[float] = []
    epoch_losses: list[float] = []
    start = time.perf_counter()
    model.train()
    for epoch in batches(len(data.x_train), batch_size, epochs, seed):
        first = len(losses)
        for idx in epoch:
            loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if step_hook is not None:
                step_hook(len(losses), model)
            opt.step()
            losses.append(loss.item())
        epoch_losses.append(sum(losses[first:]) / (len(losses) - first))
    seconds = time.perf_counter() - start
    model.eval()
    return Run(
        losses=tuple(losses),
        epoch_losses=tuple(epoch_losses),
        test_accuracy=accuracy(model, data.x_test, data.y_test),
        seconds=seconds,
    )


def first_batch_gradients(
    model: nn.Module, data: Digits, *, batch_size: int = 32, seed: int = 0
) -> dict[str, torch.Tensor]:
    """The gradient of every parameter of ``model`` for the loss of the first batch :func:`train`
    would use (the model is not changed)."""
    (idx, *_), *_ = batches(len(data.x_train), batch_size, 1, seed)
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


# ============================================================================================ CLI
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--lr", type=float, default=None, help="default: 0.05 for sgd, 1e-3 for adam")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--compile",
        action="store_true",
        help="train the tcjit model under torch.compile(dynamic=True): one graph serves every batch size",
    )
    args = p.parse_args(argv)

    data = load_data(seed=args.seed)
    tc_model, torch_model = make_models(args.seed)
    print(f"digits: {len(data.x_train)} training and {len(data.x_test)} test images; model {tc_model}")
    settings = dict(epochs=args.epochs, batch_size=args.batch_size, optimizer=args.optimizer, lr=args.lr)
    if args.compile:
        from torch._dynamo.utils import counters

        tc_run = train(torch.compile(tc_model, dynamic=True), data, seed=args.seed, **settings)
        print(f"torch.compile: {counters['stats']['unique_graphs']} graphs (training, evaluation)")
    else:
        tc_run = train(tc_model, data, seed=args.seed, **settings)
    torch_run = train(torch_model, data, seed=args.seed, **settings)

    print(f"{'epoch':>5} {'tcjit loss':>12} {'torch loss':>12}")
    for i, (a, b) in enumerate(zip(tc_run.epoch_losses, torch_run.epoch_losses), 1):
        print(f"{i:5d} {a:12.6f} {b:12.6f}")
    worst = max(abs(a - b) for a, b in zip(tc_run.losses, torch_run.losses))
    print(f"largest per-step loss difference over {len(tc_run.losses)} steps: {worst:.2e}")
    for name, run, model in (("tcjit", tc_run, tc_model), ("torch", torch_run, torch_model)):
        train_accuracy = accuracy(model, data.x_train, data.y_train)
        print(
            f"{name}: test accuracy {run.test_accuracy:.2%}, train accuracy {train_accuracy:.2%}, "
            f"training {run.seconds:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
