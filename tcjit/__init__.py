"""tcjit: Tensor Comprehensions-style kernels for PyTorch.

Write a tensor operation in TC's Einstein notation, call it on torch tensors::

    import tcjit as tc
    matmul = tc.define('''
    def matmul(float(M, K) A, float(K, N) B) -> (C) {
        C(m, n) +=! A(m, r_k) * B(r_k, n)
    }''')
    c = matmul(a, b)

Importing tcjit is cheap: torch, isl and CuPy are loaded only when first needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .polyhedral.errors import (
    TCBoundsError,
    TCCacheError,
    TCCallError,
    TCDerivativeError,
    TCError,
    TCInternalError,
    TCNameError,
    TCOptionsError,
    TCRangeError,
    TCResourceError,
    TCSemanticError,
    TCSyntaxError,
    TCTypeError,
    TCWarning,
)

if TYPE_CHECKING:
    from .kernel import Definitions, Kernel
    from .mapping.options import MappingOptions

from .version import __version__

__all__ = [
    "Definitions",
    "Kernel",
    "MappingOptions",
    "TCBoundsError",
    "TCCacheError",
    "TCCallError",
    "TCDerivativeError",
    "TCError",
    "TCInternalError",
    "TCNameError",
    "TCOptionsError",
    "TCRangeError",
    "TCResourceError",
    "TCSemanticError",
    "TCSyntaxError",
    "TCTypeError",
    "TCWarning",
    "__version__",
    "autotune",
    "compile",
    "compile_counts",
    "define",
    "gpu_profile",
    "make_autograd",
]


def define(
    source: str, name: str | None = None, *, backward: str | None = "auto", options=None, dynamic=None
):
    """Parse and check TC ``source`` now; return its entry point(s) as callable kernels.

    :arg source: TC text with one or more ``def``.
    :arg name: the entry to return. With one ``def`` it may be omitted; with several and no
        ``name``, a :class:`Definitions` namespace with one :class:`Kernel` attribute per ``def``.
    :arg backward: ``"auto"`` (derive the backward when gradients are needed), the name of an
        entry of the same source taking the forward inputs followed by one gradient per output and
        returning one gradient per input, or ``None`` (forward only).
    :arg options: mapping options for every call (``None``: tuned options if stored, else defaults).
    :arg dynamic: which size parameters calls leave symbolic, so that one compiled kernel serves
        all their values. ``None`` (automatic, as torch.compile's automatic dynamic shapes): the
        first call specialises to its sizes; a size parameter seen with a second value (>= 1)
        becomes symbolic, and every later value reuses that kernel. ``True``: every size symbolic
        from the first call; ``False``: never (one specialisation per shape); a collection of
        size names (``{"B"}``): those symbolic from the first call, the others automatic. A
        symbolic kernel serves every value from 1 to 2**31 - 1, 1 included; a size of 0 (empty
        tensors), or of 2**31 or more, gets a specialisation of its own. Tensors whose shape has
        a symbolic size must be contiguous to share the symbolic kernel (others get a
        specialisation of their own). Every target has symbolic kernels (on CUDA the grids are
        computed per call). The rules in full: :mod:`tcjit.dynamic`.
    :raises TCError: a subclass with the source line, column and a caret for any mistake
        (``dynamic=`` naming no size parameter: :class:`TCNameError`).

    >>> k = define("def scale(float(N) X) -> (Y) { Y(i) = 2 * X(i) }")
    >>> k.signature
    'scale(float32(N) X) -> (float32(N) Y)'
    """
    from .definitions import define as _define

    return _define(source, name, backward=backward, options=options, dynamic=dynamic)


def compile(kernel, *example_inputs, options=None, target: str | None = None, **named):
    """Compile ``kernel`` ahead of time for the layout of ``example_inputs``; return the specialisation.

    Example inputs may be tensors on the ``meta`` device (shapes, dtypes and strides, no data);
    they then stand for CPU tensors. They may be passed by keyword, named after the kernel's
    parameters, as for a call (``options`` and ``target`` are this function's own keywords). Later
    calls of ``kernel`` with that layout use the result, as does a later process (through the
    on-disk cache). The returned object is callable on inputs of exactly that layout, or, when
    the kernel leaves sizes symbolic (``define(..., dynamic=...)``), on any call of the family it
    serves (:mod:`tcjit.dynamic`).

    :raises TCError: as a call would, before any code runs.
    """
    from .definitions import compile as _compile

    return _compile(kernel, *example_inputs, options=options, target=target, **named)


def compile_counts() -> dict[str, int]:
    """How many specialisations this process has compiled and loaded so far, as a new dict
    ``{"compiled": n, "loaded": n}``: ``"compiled"`` counts each one lowered and built (isl, the
    mapping and the C compiler: the cost of a call with a layout seen for the first time; a build
    that fails counts too), ``"loaded"`` each one found in the on-disk kernel store instead.
    Calls served by a specialisation the process already holds count nothing, whatever their
    sizes. Thread-safe; reading it imports nothing heavy.

    >>> before = compile_counts()["compiled"]
    >>> y = fcrelu(x, w, b)                      # a layout this process has not seen
    >>> compile_counts()["compiled"] - before    # 0 if the kernel store had it ("loaded" + 1)
    1
    """
    from .counters import compile_counts as _compile_counts

    return _compile_counts()


def gpu_profile(kernel, *inputs, gpu: str = "h100", options=None):
    """The static GPU profile of ``kernel`` called on ``inputs``, without a GPU: per launch its grid,
    block, occupancy and what limits it, its registers (from the cubin a CUDA compiler makes), what
    each warp asks of global and shared memory, the predicted time, the resource that bounds it and
    a diagnosis in words. ``inputs`` may be ``meta`` tensors. ``gpu``: ``"h100"`` or ``"h200"``;
    ``options``: those to profile (default: a call's on the GPU). See
    :func:`tcjit.static_profile.gpu_profile`; ``str(profile)`` is its text.

    :raises TCCallError: the inputs do not fit the kernel, or ``gpu`` is unknown.
    """
    from .static_profile import gpu_profile as _gpu_profile

    return _gpu_profile(kernel, *inputs, gpu=gpu, options=options)


def make_autograd(forward_kernel, backward_kernel):
    """A kernel that runs ``forward_kernel`` and, when gradients are needed, computes the inputs'
    gradients with ``backward_kernel`` (TC's ``make_autograd``): it takes the forward inputs
    followed by one gradient per output, and returns one gradient per input.

    :raises TCCallError: an argument is not a kernel, or the two do not match in parameters.
    """
    from .definitions import make_autograd as _make_autograd

    return _make_autograd(forward_kernel, backward_kernel)


def autotune(
    kernel,
    *inputs,
    generations: int = 10,
    population: int = 16,
    timeout: float | None = None,
    seed: int | None = None,
    ray: str | None = None,
    target: str | None = None,
    **settings,
):
    """Search for fast mapping options for ``kernel`` on ``inputs``; store and return the best.

    A genetic search (:mod:`tcjit.genetic`) over the options of the target's search space,
    specialised to these sizes. Candidates are compiled in parallel worker processes, then each is
    run once and compared with the oracle (:mod:`tcjit.reference`) and timed (median of repeated
    runs) in another worker, one at a time; a candidate that fails to compile, crashes, hangs or
    computes a wrong answer scores as invalid and the search goes on. At the end the defaults and
    the best candidates are timed side by side in interleaved rounds (:mod:`tcjit.tuning_confirm`):
    the winner is stored in the options database (``TCJIT_OPTIONS_DB``; ``tcjit cache list`` shows
    it) only when it is faster than the defaults in every round, otherwise the record says "use the
    defaults"; every measured candidate is stored too, so that

    * later calls ``kernel(*tensors)`` with the same shapes, dtypes and strides on the same kind
      of device use them without being told (in this process and in later ones);
    * a later tuning run of the same key resumes: candidates already measured are not measured
      again, and the stored best seeds the search, as do options tuned for the nearest sizes.

    :arg kernel: a :class:`Kernel` from :func:`define`.
    :arg inputs: real tensors (not ``meta``) of the layout to tune for; they are only read. They
        may also be passed by keyword, named after the kernel's parameters, as for a call; the
        keywords of this function and the tuner's settings come first (a parameter named like one
        of them is passed positionally).
    :arg generations: generations in all, the starting population included.
    :arg population: candidates per generation.
    :arg timeout: seconds for the whole call, set-up and final rounds included (``None``: no
        limit); it returns within a couple of seconds of it.
    :arg seed: makes the candidates proposed reproducible (given the same measurements).
    :arg ray: the address of a Ray cluster (``"auto"``, ``"ray://host:10001"``) to spread the
        candidates over, each compiled and timed on the worker's own device; needs the ``ray``
        extra. ``None``: worker processes on this machine.
    :arg target: as for a call (``None`` follows the inputs' device).
    :arg settings: ``size_ranges`` (None): tune for a range of sizes instead of the inputs' own,
        ``{"B": (1, 64)}`` (bounds included, from 1; the inputs at the upper bounds): each
        candidate is compiled once with those sizes symbolic and timed at the bounds and two
        sizes between them (geometric mean); kernels with those sizes symbolic then use the
        result for calls in the range (:mod:`tcjit.tuning_range`, docs/tuning.md).
        ``crossover_rate`` (0.8), ``mutation_rate`` (0.1 per gene), ``elites`` (2),
        ``workers`` (parallel compilations; default the CPU count, at most 8),
        ``compile_timeout`` (120 s) and ``run_timeout`` (30 s) per candidate, ``resume`` (True),
        ``progress`` (None: a progress bar and a line per generation where someone watches, a
        terminal or a notebook; True: always; False: never; a function receives each
        :class:`tcjit.genetic.Generation`). On a GPU the static GPU profile predicts each
        candidate's time: candidates are measured best predicted first, and those predicted over
        ``prune_factor`` (4.0; None: never) times the prediction for the best measured are not
        measured at all, except the ``keep_top`` (4) best predicted of each generation and a random
        ``explore_share`` (0.1) of the others.
    :returns: the :class:`MappingOptions` later calls use: the winner, or the default options if
        nothing beat them beyond the noise.
    :raises TCError: for a bad kernel, call or setting, before anything runs. Ctrl-C ends the
        search early; the best so far goes through the final rounds (a second Ctrl-C skips them).
    """
    from .tuning import autotune as _autotune

    if settings:
        from .tuning import bind_tuning_arguments

        inputs, settings = bind_tuning_arguments(kernel, inputs, settings)
    return _autotune(
        kernel,
        *inputs,
        generations=generations,
        population=population,
        timeout=timeout,
        seed=seed,
        ray=ray,
        target=target,
        **settings,
    )


def __getattr__(attr: str):
    # Heavier parts load on first use, keeping `import tcjit` cheap.
    if attr in ("Kernel", "Definitions"):
        from . import kernel

        return getattr(kernel, attr)
    if attr == "MappingOptions":
        from .mapping.options import MappingOptions

        return MappingOptions
    if attr == "reference":
        import importlib

        return importlib.import_module(".reference", __name__)
    raise AttributeError(f"module 'tcjit' has no attribute {attr!r}")
