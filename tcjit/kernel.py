"""Kernels: the callable objects ``tcjit.define`` returns."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence

from .arguments import bind_arguments, call_layouts, call_layouts_and_grad, check_target
from .dynamic import SYMBOLIC_TARGETS, SizePolicy, family_inputs, family_of, normalise_dynamic
from .memory import SpecializationCache
from .polyhedral.errors import ProofTooCostly, TCCallError, TCError, TCWarning
from .polyhedral.lang.check import check_source
from .polyhedral.lang.checked import CheckedDef, CheckedProgram
from .polyhedral.lang.printer import def_to_tc

__all__ = ["Definitions", "Kernel"]


class Kernel:
    """One entry point of a TC source, callable on torch tensors.

    Calls run compiled code: C with OpenMP for CPU tensors, one specialisation per input layout,
    or one per family of layouts for sizes left symbolic (see :meth:`__call__`,
    :mod:`tcjit.dynamic`). A call with other float dtypes than declared runs a *retyped variant*
    of the kernel (:meth:`variant_for`), itself a :class:`Kernel`, made once per retyping and kept.

    :ivar name: the entry's name.
    :ivar definition: the checked definition (types, shapes, ranges).
    :ivar program: the whole checked source it came from (for a variant: the entry and its
        backward entry, retyped).
    :ivar backward: what computes the inputs' gradients (:mod:`tcjit.autograd`): ``"auto"``, the
        name of an entry of ``program``, a :class:`Kernel` (:func:`~tcjit.make_autograd`), or
        ``None`` (forward only).
    :ivar retyping: for a variant, the float types it retypes (canonical names, e.g.
        ``{"float32": "float64"}``) relative to the kernel it was made from; ``{}`` otherwise.
    :ivar dynamic: which sizes calls leave symbolic (:func:`~tcjit.define`'s ``dynamic=``:
        ``None``, ``True``, ``False`` or a frozenset of size names; :mod:`tcjit.dynamic`).
    """

    def __init__(
        self,
        program: CheckedProgram,
        name: str,
        *,
        backward: str | Kernel | None = "auto",
        options=None,
        dynamic=None,
    ):
        self.program = program
        self.definition: CheckedDef = program.get(name)  # type: ignore[assignment]
        self.name = name
        self.backward = backward
        self.options = options
        self.dynamic = normalise_dynamic(dynamic)
        # the sizes seen, shared with the variants and the derived kernels (tcjit.dynamic)
        self._policy = SizePolicy(self.dynamic)
        # key -> specialisation (an alias of a family's, for symbolic sizes), and differentiable
        # calls: key -> tcjit.autograd.GradCall; the process's memory budget drops entries
        # (tcjit.memory)
        self._specializations = SpecializationCache()
        self._families = SpecializationCache()  # (options, target, Family) -> specialisation
        self._plan = None  # the GradPlan (tcjit.autograd), made when a gradient is first needed
        self._grad_calls = SpecializationCache()
        self._variants: dict[tuple[tuple[str, str], ...], Kernel] = {}  # retyping -> variant
        self._base: Kernel | None = None  # the kernel a variant was made from
        self.retyping: dict[str, str] = {}

    # ----------------------------------------------------------------------------------- describing
    @property
    def source(self) -> str:
        """The TC source as the user wrote it."""
        return self.program.source

    @property
    def canonical_source(self) -> str:
        """Canonical TC text of this entry (and its user-given backward): layout-free, a cache key."""
        text = def_to_tc(self.definition.ast)
        if isinstance(self.backward, Kernel):
            text += "\n" + def_to_tc(self.backward.definition.ast)
        elif self.backward not in (None, "auto"):
            text += "\n" + def_to_tc(self.program.get(self.backward).ast)
        return text

    @property
    def signature(self) -> str:
        """Parameters and outputs with types and (inferred) shapes, as one line."""
        return self.definition.signature()

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.definition.params

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.definition.outputs

    @property
    def sizes(self) -> tuple[str, ...]:
        """The size symbols, bound from the inputs' shapes at each call."""
        return self.definition.sizes

    @property
    def symbolic_sizes(self) -> frozenset[str]:
        """The size parameters that calls leave symbolic now: ``dynamic=``'s, and with automatic
        dynamic shapes those seen with two values so far; none once its proof was too costly
        (:mod:`tcjit.dynamic`, "Proofs")."""
        return frozenset() if self._policy.refused(self.name) else self._policy.symbolic(self.sizes)

    @property
    def symbolic_output_shapes(self) -> dict[str, tuple[str, ...]]:
        """Each output's shape as expressions of the size symbols (``'H - KH + 1'``)."""
        return {o: tuple(str(s) for s in self.definition.tensor(o).shape) for o in self.outputs}

    def output_shapes(self, *inputs, **named) -> tuple[tuple[int, ...], ...]:
        """The concrete shapes of the outputs for these inputs (checks the call like a real one;
        keyword arguments as for a call).

        Inputs may live on the ``meta`` device: nothing is computed.
        """
        from .binding import bind

        inputs = bind_arguments(self.definition, inputs, named)
        b = bind(self.variant_for(*inputs).definition, inputs)
        return tuple(b.output_shapes[o] for o in self.outputs)

    def __repr__(self) -> str:
        return f"<tcjit.Kernel {self.signature}>"

    # ------------------------------------------------------------------------- copying, pickling
    def __copy__(self) -> Kernel:
        """The kernel itself: a kernel is an immutable function of its inputs (what it compiled
        is a cache), so a copied model shares it, as it would share a Python function."""
        return self

    def __deepcopy__(self, memo) -> Kernel:
        """The kernel itself (see :meth:`__copy__`): ``copy.deepcopy(model)`` of a module holding
        a kernel, as EMA and teacher models do, copies the parameters and shares the kernel."""
        return self

    def __reduce__(self):
        """Pickled as what defines it: the TC source, the entry's name, its backward (``"auto"``,
        ``None``, an entry's name or a pickled :class:`Kernel`), its options and ``dynamic``; a
        retyped variant as its base kernel and the retyping (the sizes seen are not kept).
        Unpickling checks the source again (no warnings) and compiles nothing: the first call
        loads or compiles as in any process, so ``torch.save(model)`` and multiprocessing work
        with kernels in the model."""
        if self._base is not None:
            return (_rebuild_variant, (self._base, tuple(sorted(self.retyping.items()))))
        return (_rebuild_kernel, (self.program.source, self.name, self.backward, self.options, self.dynamic))

    # ------------------------------------------------------------------------------------- calling
    def __call__(
        self, *inputs, outputs: Sequence | None = None, options=None, target: str | None = None, **named
    ):
        """Run the kernel on ``inputs`` (torch tensors; rank-0 arguments may be Python numbers).

        Arguments may also be passed by keyword, named after the parameters, and mixed with
        positional ones as for a Python function: ``fcrelu(x, W=w, bias=b)``. ``outputs``,
        ``options`` and ``target`` are always the call's own keywords; a parameter named like one
        of them is passed positionally (:mod:`tcjit.arguments`).

        The first call with a new layout (shapes, dtypes, strides) compiles a specialisation, or
        loads it from the on-disk cache; later calls with that layout cost a dictionary lookup.
        **Sizes** (``define(..., dynamic=...)``, :mod:`tcjit.dynamic`): by default the first call
        specialises to its sizes; once a size parameter has had two values (>= 1), it is left
        symbolic and one specialisation serves all its values from 1 to 2**31 - 1, so a third
        batch size compiles nothing. A size of 0 gets a specialisation of its own; tensors whose
        shape has a symbolic size must be contiguous to share it (others get their own).

        **Float dtypes [ext].** Float types in the definition are defaults: tensors of another
        float dtype (float16, bfloat16, float32, float64) may be passed for parameters declared
        with a float type. The call then runs the definition with each declared float type ``T``
        replaced by the dtype its parameters received, everywhere ``T`` is written (parameters,
        rank-0 scalar arguments, typed outputs, conversions such as ``float(x)``); literals and
        inferred outputs follow as usual (:meth:`variant_for`). Parameters declared with one type
        must receive one dtype per call (a :class:`~tcjit.TCCallError` at the second one's
        declaration otherwise); integer and bool parameters are never retyped, and an integer
        tensor for a float parameter (or the reverse) is an error. Python numbers passed for rank-0
        arguments follow their declared type's retyping. ``outputs=`` tensors must have the
        retyped output dtypes. Each retyping is compiled, cached and differentiated as a kernel of
        its own; calls with the declared dtypes are unaffected.

        :arg outputs: tensors to write the results into (accumulations without ``!`` start from
            their contents); returned instead of new tensors. They may not share memory with each
            other or with an input.
        :arg options: :class:`~tcjit.MappingOptions` for this call; ``None``: those given to
            :func:`~tcjit.define`, else options :func:`~tcjit.autotune` stored for exactly this
            layout on this kind of device (with symbolic sizes: for a range of sizes, or for a
            call of the family seen, :mod:`tcjit.dynamic`), else
            :func:`~tcjit.pipeline.default_options`.
        :arg target: ``None`` follows the inputs' device; ``"cpu"``, ``"cuda"`` or
            ``"cuda-emulated"`` (the CUDA mapping run on CPU tensors).
        :returns: a tensor, or a tuple of tensors when the entry has several outputs.

        Under ``torch.compile`` (``torch.compiler.is_compiling()``) the call is a custom operator
        instead (:mod:`tcjit.ops`), which Dynamo traces into its graph.

        :raises TCCallError: the call is made under a ``torch.func`` transform (``vmap``, ``grad``,
            ``vjp``, ``jacrev``, ``jacfwd``, ``jvp``, ``hessian``) or an input is a dual tensor of
            forward-mode AD (``torch.autograd.forward_ad``), neither of which tcjit kernels
            support: refused before anything runs (:func:`_refuse_transforms`), where the kernel
            would otherwise fail on a batched tensor's storage or drop the tangent silently.
        """
        import torch

        if named:
            inputs = bind_arguments(self.definition, inputs, named)
        if torch.compiler.is_compiling():
            from .ops import compiled_call

            return compiled_call(self, inputs, outputs, options, target)
        if (  # vmap, grad, ...; a dual level open (-1 when none)
            torch._C._are_functorch_transforms_active()
            or getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0
        ):
            _refuse_transforms(self.name, inputs)
        if outputs is not None and not isinstance(outputs, (list, tuple)):
            outputs = (outputs,)
        layouts, grad = call_layouts_and_grad(inputs)
        if grad and torch.is_grad_enabled():
            return self._differentiable_call(inputs, layouts, outputs, options, target)
        key = (options, target, layouts, None if outputs is None else call_layouts(outputs))
        spec = self._specializations.get(key)
        if spec is None:  # compiled (or loaded) once per layout; a retyped variant's if dtypes ask
            spec = self._specialize(inputs, outputs, options, target, key=key)
            _keep(self._specializations, key, spec)
        outs = spec.run(inputs, outputs)
        return outs[0] if len(outs) == 1 else outs

    def _differentiable_call(self, inputs, layouts, outputs, options, target):
        """A call recorded for autograd (module :mod:`tcjit.autograd`): the grad plan's forward
        kernel runs, specialised for the call's layout (``layouts``:
        :func:`~tcjit.arguments.call_layouts` of the inputs), options and target."""
        if outputs is not None:
            raise TCCallError(
                f"{self.name}: outputs= cannot be used when an input requires grad",
                hint="let the call allocate its outputs, or call it under torch.no_grad()",
            )
        key = (options, target, layouts, None)
        call = self._grad_calls.get(key)
        if call is None:  # the plan of the variant the dtypes ask for (self when as declared)
            from .autograd import GradCall

            plan = self.variant_for(*inputs).grad_plan()
            spec = plan.forward._specialization(key, inputs, None, options, target)
            call = _keep(self._grad_calls, key, GradCall(plan, spec, inputs), spec)
        return call.function.apply(call, *inputs)

    def grad_plan(self):
        """How this kernel's calls are differentiated: a :class:`tcjit.autograd.GradPlan` (made on
        first use, then kept).

        :raises TCCallError: the kernel was defined with ``backward=None``.
        :raises TCSemanticError: ``backward="auto"`` and a statement has no derivative (the error
            names it).
        """
        if self._plan is not None:
            return self._plan
        from .autograd import user_plan

        b = self.backward
        if b is None:
            raise TCCallError(
                f"{self.name}: an input requires grad, but the kernel was defined with backward=None "
                "(forward only)",
                hint="define it with backward='auto' or backward='<entry>', or use tcjit.make_autograd, "
                "or call it under torch.no_grad()",
            )
        if isinstance(b, Kernel):
            self._plan = user_plan(self, b)
        elif b == "auto":
            from .derived import derived_plan

            self._plan = derived_plan(self, self._derived_kernel)
        else:
            self._plan = user_plan(self, Kernel(self.program, b, backward=None, dynamic=self.dynamic))
        return self._plan

    def _derived_kernel(self, program: CheckedProgram, name: str) -> Kernel:
        """A forward-only kernel of entry ``name`` of a program derived from this one (its
        augmented forward, a backward), with this kernel's ``dynamic`` and record of sizes."""
        kernel = Kernel(program, name, backward=None, dynamic=self.dynamic)
        kernel._policy = self._policy
        return kernel

    def options_for(self, *inputs, target: str | None = None, **named):
        """The :class:`~tcjit.MappingOptions` a call on ``inputs`` (keyword arguments as for a
        call) without ``options=`` uses: those given to :func:`~tcjit.define`, else options tuned
        for exactly this layout and kind of device (:func:`~tcjit.autotune`), else
        :func:`~tcjit.pipeline.default_options`. Inputs may be ``meta`` tensors; nothing is compiled or run.
        """
        from .binding import bind

        inputs = bind_arguments(self.definition, inputs, named)

        check_target(target)
        kernel = self.variant_for(*inputs)
        b = bind(kernel.definition, inputs)
        target = target or ("cuda" if b.device.type == "cuda" else "cpu")
        family = kernel._family(b, inputs, None, target, observe=False)
        if family is not None:
            return kernel._family_choice(None, target, family, b.sizes, inputs)[0]
        return kernel._resolve_options(None, b.sizes, target, inputs)

    # ------------------------------------------------------------------------------ float dtypes
    def variant_for(self, *inputs) -> Kernel:
        """The kernel that runs a call on ``inputs``: ``self`` when every float tensor has its
        parameter's declared dtype, else the variant retyped for those dtypes (see
        :meth:`__call__`), made on first use and kept. Nothing is compiled; inputs may be
        ``meta`` tensors.

        >>> mm.variant_for(a.double(), b.double()).signature
        'matmul(float64(M, K) A, float64(K, N) B) -> (float64(M, N) C)'

        :raises TCCallError: parameters declared with one type receive different float dtypes, or
            the retyped definition does not check (it would narrow a value, for instance).
        """
        import torch

        return self._variant_for_dtypes(
            tuple(x.dtype if isinstance(x, torch.Tensor) else None for x in inputs)
        )

    def _variant_for_dtypes(self, dtypes) -> Kernel:
        """:meth:`variant_for` from the arguments' dtypes (``None`` for a Python number)."""
        from .binding import float_substitution

        sigma = float_substitution(self.definition, dtypes)
        return self._variant(sigma) if sigma else self

    def _variant(self, sigma: Mapping[str, str]) -> Kernel:
        """The variant of this kernel retyped by ``sigma`` (float type names; ``self`` when the
        retyping changes nothing in it)."""
        key = tuple(sorted(sigma.items()))
        found = self._variants.get(key)
        if found is None:
            found = self._variants[key] = self._make_variant(dict(key))
        return found

    def _make_variant(self, sigma: dict[str, str]) -> Kernel:
        from .polyhedral.lang.check import check
        from .polyhedral.lang.retype import retype_program

        b = self.backward
        names = (self.name, b) if isinstance(b, str) and b != "auto" else (self.name,)
        retyped = retype_program(self.program.program, sigma, names)
        if retyped.defs == tuple(d.ast for d in self.program.defs if d.name in names):
            return self  # none of the retyped types is written here (a make_autograd backward)
        try:
            with warnings.catch_warnings():  # the definition as written already warned
                warnings.simplefilter("ignore", TCWarning)
                program = check(retyped)
        except TCError as e:
            raise TCCallError(
                f"with {_describe(sigma)} (the dtypes passed) the definition does not check: {e.message}",
                source=e.source,
                span=e.span,
                where=e.where or self.name,
                hint="pass the declared dtypes, or declare the types the call needs",
            ) from None
        variant = Kernel(
            program,
            self.name,
            backward=b._variant(sigma) if isinstance(b, Kernel) else b,
            options=self.options,
            dynamic=self.dynamic,
        )
        variant._policy = self._policy
        variant._base = self
        variant.retyping = sigma
        return variant

    def _refuse_meta(self, binding, why: str, hint: str | None = None) -> None:
        """TCCallError, with a caret at the parameter, for the first input on the meta device."""
        for name, t in binding.tensors.items():
            if t.device.type == "meta":
                raise TCCallError(
                    f"input '{name}' is a meta tensor: {why}",
                    source=self.definition.source,
                    span=self.definition.param(name).span,
                    where=self.name,
                    hint=hint,
                )

    def _forget_default_specializations(self) -> None:
        """Drop the specialisations built without explicit options (after tuning: the next call
        looks the tuned options up), in the kernel this one was made from and all its variants."""
        root = self
        while root._base is not None:
            root = root._base
        stack = [root]
        while stack:
            k = stack.pop()
            for cache in (k._specializations, k._families, k._grad_calls):  # in place: the budget holds them
                for key in [key for key in cache if key[0] is None]:
                    cache.drop(key)
            stack.extend(v for v in k._variants.values() if v is not k)

    def _specialization(self, key, inputs, outputs, options, target, *, allow_meta: bool = False):
        """The specialisation for a call whose key (options, target, layouts) is ``key``: looked up,
        else made by :meth:`_specialize` and kept under ``key``."""
        spec = self._specializations.get(key)
        if spec is None:
            spec = self._specialize(inputs, outputs, options, target, key=key, allow_meta=allow_meta)
            _keep(self._specializations, key, spec)
        return spec

    def _specialize(self, inputs, outputs, options, target, *, key=None, allow_meta: bool = False):
        """A specialisation for this call (of the variant its dtypes ask for, which keeps it under
        ``key`` as well): made for its layout, or its family's (symbolic sizes), found or made."""
        from .binding import bind
        from .pipeline import specialize

        check_target(target)
        kernel = self.variant_for(*inputs)
        if kernel is not self:
            if key is None:
                key = (
                    options,
                    target,
                    call_layouts(inputs),
                    None if outputs is None else call_layouts(outputs),
                )
            return kernel._specialization(key, inputs, outputs, options, target, allow_meta=allow_meta)
        b = bind(self.definition, inputs, outputs)
        if not allow_meta:
            self._refuse_meta(
                b,
                "it has a shape but no data to compute with",
                "tcjit.compile() accepts meta tensors; calls need real ones",
            )
        target = target or ("cuda" if b.device.type == "cuda" else "cpu")
        family = self._family(b, inputs, outputs, target, observe=True)
        if family is None:
            chosen = self._resolve_options(options, b.sizes, target, inputs)
            return specialize(self, b, inputs, outputs, chosen, target)
        family_key = (options, target, family)
        spec = self._families.get(family_key)
        if spec is None:
            chosen, rep = self._family_choice(options, target, family, b.sizes, inputs)
            try:
                spec = specialize(self, b, inputs, outputs, chosen, target, family=family, representative=rep)
            except ProofTooCostly as e:  # tcjit.dynamic, "Proofs": this call's sizes, concrete
                self._policy.refuse(self.name, e)
                return self._specialize(inputs, outputs, options, target, key=key, allow_meta=allow_meta)
            self._families.keep(family_key, spec)
        return spec

    def _family(self, binding, inputs, outputs, target: str, *, observe: bool):
        """The :class:`~tcjit.dynamic.Family` of a call (``binding``: its sizes) on ``target``, or
        None for concrete sizes; ``observe``: record the call's sizes first."""
        if target not in SYMBOLIC_TARGETS or self._policy.refused(self.name):
            return None
        policy = self._policy
        symbolic = policy.observe(binding.sizes) if observe else policy.symbolic(self.sizes)
        return family_of(self.definition, binding.sizes, inputs, outputs, symbolic) if symbolic else None

    def _family_choice(self, options, target: str, family, sizes, inputs):
        """``(options, representative sizes)`` of ``family``'s kernel (:mod:`tcjit.dynamic`,
        "Options"): ``options``, else define()'s, else those of a range tune whose ranges hold
        every call of the family seen (the narrowest; mapped at its upper bounds), else those tuned
        for one of the calls seen, largest first, else the defaults; mapped at the largest call
        seen but for a range tune. ``sizes`` and ``inputs``: the call at hand."""
        chosen = options if options is not None else self.options
        seen = self._policy.seen(self.definition, family, sizes)
        rep = seen[0]
        if chosen is None:
            from .tuned import lookup_range_options, range_representative, stored_options

            ranged = lookup_range_options(self, family, seen, inputs, target)
            if ranged is not None:  # its verdict stands, "use the defaults" too: the run measured them
                rep = range_representative(family, seen, ranged.ranges)
                return self._resolve_options(ranged.options or _defaults(self, rep, target), rep, target), rep
            for call in seen:
                chosen = stored_options(self, family_inputs(self.definition, family, call, inputs), target)
                if chosen is not None:
                    break
        return self._resolve_options(chosen, rep, target, inputs), rep

    def _resolve_options(self, options, sizes, target: str, inputs=()):
        """``options``, else those given to define(), else options tuned for exactly this layout
        and device (the options database), else :func:`~tcjit.pipeline.default_options`."""
        from .mapping.options import MappingOptions

        chosen = options if options is not None else self.options
        if chosen is None:
            from .tuned import stored_options

            chosen = stored_options(self, inputs, target)
        if chosen is None:
            from .pipeline import default_options

            chosen = default_options(self.definition, sizes, target)
        if not isinstance(chosen, MappingOptions):
            raise TCCallError(f"options must be tcjit.MappingOptions, got {type(chosen).__name__}")
        return chosen.validate(target)


def _defaults(kernel: Kernel, sizes, target: str):
    """:func:`~tcjit.pipeline.default_options` of ``kernel`` at ``sizes``."""
    from .pipeline import default_options

    return default_options(kernel.definition, sizes, target)


def _keep(cache: SpecializationCache, key, value, spec=None):
    """``cache.keep(key, value, spec)``; an alias (:meth:`~tcjit.memory.SpecializationCache.keep_alias`)
    when the specialisation has symbolic sizes, so that new sizes do not accumulate entries."""
    if getattr(value if spec is None else spec, "sizes", ()):
        return cache.keep_alias(key, value, spec)
    return cache.keep(key, value, spec)


def _refuse_transforms(name: str, inputs) -> None:
    """Raise :class:`TCCallError` for a call under a ``torch.func`` transform or on a dual tensor
    of forward-mode AD; return for a call that merely runs while a dual level is open.

    Kernels run compiled code on the storage of plain tensors: a ``vmap``-batched or
    ``grad``-wrapped tensor has none (the call would fail on its data pointer), and a dual tensor's
    tangent would be dropped from the output without a word. Only reverse mode through
    ``torch.autograd`` (``loss.backward()``, ``torch.autograd.grad``) differentiates tcjit kernels.
    """
    import torch

    if torch._C._are_functorch_transforms_active():
        raise TCCallError(
            f"{name}: tcjit kernels cannot run under torch.func transforms (vmap, grad, vjp, "
            "jacrev, jacfwd, jvp, hessian)",
            hint="differentiate with loss.backward() or torch.autograd.grad; for per-example "
            "results, give the kernel a batch dimension",
        )
    unpack = torch.autograd.forward_ad.unpack_dual
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and unpack(x).tangent is not None:
            raise TCCallError(
                f"{name}: argument {i} is a dual tensor of forward-mode AD, which tcjit kernels do "
                "not support (the tangent would be lost)",
                hint="differentiate with reverse mode (loss.backward() or torch.autograd.grad)",
            )


def _describe(sigma: Mapping[str, str]) -> str:
    """``float32 as float64, float16 as bfloat16``."""
    return ", ".join(f"{t} as {d}" for t, d in sorted(sigma.items()))


class Definitions:
    """The entries of a source with several ``def``: one :class:`Kernel` attribute per entry."""

    def __init__(self, kernels: dict[str, Kernel]):
        self._kernels = kernels

    def __getattr__(self, name: str) -> Kernel:
        kernels = self.__dict__.get("_kernels", {})  # empty while copy or pickle rebuild one
        try:
            return kernels[name]
        except KeyError:
            raise AttributeError(f"no entry named {name!r}; defined: {', '.join(kernels)}") from None

    def __reduce__(self):
        """Pickled (and deep-copied) as its kernels (see :meth:`Kernel.__reduce__`)."""
        return (Definitions, (self._kernels,))

    def __getitem__(self, name: str) -> Kernel:
        return self._kernels[name]

    def __iter__(self) -> Iterator[Kernel]:
        return iter(self._kernels.values())

    def __len__(self) -> int:
        return len(self._kernels)

    def __dir__(self):
        return [*super().__dir__(), *self._kernels]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._kernels)

    def __repr__(self) -> str:
        return "<tcjit.Definitions " + ", ".join(self._kernels) + ">"


def _rebuild_kernel(source: str, name: str, backward, options, dynamic=None) -> Kernel:
    """A pickled :class:`Kernel` (:meth:`Kernel.__reduce__`): its source checked again, quietly
    (its warnings were given when it was defined)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TCWarning)
        program = check_source(source)
    return Kernel(program, name, backward=backward, options=options, dynamic=dynamic)


def _rebuild_variant(base: Kernel, retyping: tuple[tuple[str, str], ...]) -> Kernel:
    """A pickled retyped variant: ``base``'s variant for ``retyping``."""
    return base._variant(dict(retyping))
