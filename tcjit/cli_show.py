"""``tcjit show``: one stage of the compilation of an entry (the stages are listed in
:mod:`tcjit.cli`'s docstring), through the pipeline's own functions."""

from __future__ import annotations

from collections.abc import Mapping

from .cli_args import (
    UsageError,
    load_entry,
    options_from_flags,
    options_origin,
    parse_ints,
    parse_names,
    parse_sizes,
)
from .pipeline import default_choice
from .stages import FRONT_STAGES

__all__ = ["MAPPED_STAGES", "OPTION_STAGES", "cmd_show"]

#: The stages that lower the entry (every size needed); the front stages are
#: :data:`tcjit.stages.FRONT_STAGES` (no mapping options but the schedule's).
MAPPED_STAGES = ("tree", "ir", "c", "cuda", "gpu-profile")
#: The stages that read the mapping options.
OPTION_STAGES = ("options", *MAPPED_STAGES)


def _need_sizes(cdef, sizes: Mapping[str, int], what: str) -> None:
    """Refuse ``what`` unless every size of the entry is given."""
    missing = [s for s in cdef.sizes if s not in sizes]
    if missing:
        raise UsageError(
            f"{what} needs concrete sizes: add --sizes "
            + ",".join(f"{s}={sizes.get(s, '...')}" for s in cdef.sizes)
            + f" (missing: {', '.join(missing)})"
        )


def _show_options(args, program, cdef, sizes: Mapping[str, int]) -> None:
    """The options a call at ``sizes`` on contiguous tensors would use and where they come from
    (the flags, a tuned record, or the defaults), one field per line."""
    import json

    import torch

    from .binding import torch_dtype
    from .kernel import Kernel

    target = args.target or "cpu"
    inputs = [
        (False if cdef.scalars[name].dtype.kind == "bool" else 0)
        if name in cdef.scalars
        else torch.empty(
            [int(s.evaluate(sizes)) for s in cdef.tensor(name).shape],
            dtype=torch_dtype(cdef.tensor(name).dtype),
            device="meta",
        )
        for name in cdef.params
    ]
    kernel = Kernel(program, cdef.name)
    given = options_from_flags(args, cdef, sizes, target)
    chosen = given if given is not None else kernel.options_for(*inputs, target=target)
    origin = options_origin(kernel, inputs, target, given)
    print(f"options: {origin}")
    if origin.startswith("the defaults"):
        print(f"  rule: {default_choice(cdef, sizes, target)[1]}")
    for name, value in chosen.to_dict().items():
        print(f"  {name}: {json.dumps(value)}")


def _show_gpu_profile(args, cdef, sizes: Mapping[str, int], options) -> None:
    """The static GPU profile of the entry at ``sizes`` for contiguous tensors, as text or JSON."""
    import json

    from .mapping.gpu_model import DEVICES
    from .static_profile import profile_at

    if args.gpu is not None and args.gpu not in DEVICES:
        raise UsageError(f"--gpu {args.gpu}: the profile knows {', '.join(DEVICES)}")
    rule = None
    if options is None:
        options, rule = default_choice(cdef, sizes, "cuda")
    profile = profile_at(cdef, sizes, None, options, args.gpu or "h100")
    if args.format == "json":
        print(json.dumps({**profile.to_json(), "default_rule": rule}, indent=1))
    else:
        if rule is not None:
            print(f"default options: {rule}")
        print(profile, end="")


def _absent(args, cdef) -> frozenset[str]:
    """The outputs ``--absent`` names (gradients known to be zero), not all of them."""
    absent = frozenset(parse_names(args.absent, cdef.outputs, "--absent", "outputs") or ())
    if absent and absent == set(cdef.outputs):
        raise UsageError("--absent names every output: a backward needs the gradient of one output at least")
    return absent


_OPTION_FLAGS = (  # (attribute, flag, the stages that read it)
    ("options", "--options", ("schedule", *OPTION_STAGES)),
    ("fusion", "--fusion", ("schedule", *OPTION_STAGES)),
    ("tile", "--tile", ("schedule", *OPTION_STAGES)),
    ("fix_sizes", "--fix-sizes", ("scop", "schedule")),
    ("blocks", "--blocks", OPTION_STAGES),
    ("threads", "--threads", OPTION_STAGES),
    ("no_parallel", "--no-parallel", OPTION_STAGES),
    ("no_vectorize", "--no-vectorize", OPTION_STAGES),
    ("target", "--target", OPTION_STAGES),
    ("no_prelude", "--no-prelude", ("c", "cuda")),
    ("gpu", "--gpu", ("gpu-profile",)),
    ("format", "--format", ("gpu-profile",)),
    ("wrt", "--wrt", ("backward",)),
    ("absent", "--absent", ("backward",)),
)


def _refuse_unused_flags(args) -> None:
    """A flag the chosen stage would ignore is a mistake: say which stages read it."""
    for attr, flag, stages in _OPTION_FLAGS:
        if getattr(args, attr) not in (None, False) and args.stage not in stages:
            allowed = ", ".join(stages[:-1]) + (" or " if len(stages) > 1 else "") + stages[-1]
            raise UsageError(f"{flag} goes with --stage {allowed}, not --stage {args.stage}")


def _front_flags(args, cdef, sizes: Mapping[str, int]) -> dict:
    """The keywords of :func:`tcjit.pipeline.front_stage` that the flags give for the chosen stage."""
    if args.stage == "backward":
        return {"wrt": parse_names(args.wrt, cdef.params, "--wrt", "inputs"), "absent": _absent(args, cdef)}
    if args.stage not in ("scop", "schedule"):
        return {}
    if cdef.sizes and not sizes and args.fix_sizes:
        raise UsageError("--fix-sizes needs --sizes")
    if args.stage == "scop":
        return {"fix_sizes": args.fix_sizes}
    from .mapping.options import MappingOptions

    return {
        "fix_sizes": args.fix_sizes,
        "options": MappingOptions.from_json(args.options) if args.options else None,
        "fusion": args.fusion,
        "tiles": parse_ints(args.tile, "--tile"),
    }


def cmd_show(args) -> int:
    """Print one stage of the compilation of an entry."""
    _refuse_unused_flags(args)
    program, cdef = load_entry(args.file, args.entry)
    sizes = parse_sizes(args.sizes, cdef.sizes)
    if args.stage in FRONT_STAGES:
        from .pipeline import front_stage

        print(front_stage(cdef, args.stage, sizes, **_front_flags(args, cdef, sizes)), end="")
    elif args.stage == "options":
        _need_sizes(cdef, sizes, "--stage options")
        _show_options(args, program, cdef, sizes)
    elif args.stage in MAPPED_STAGES:
        _need_sizes(cdef, sizes, f"--stage {args.stage}")
        from .mapping.c_prelude import without_prelude
        from .pipeline import lowered as lower

        target = args.target or "cpu"
        if args.stage in ("cuda", "gpu-profile"):
            if args.target not in (None, "cuda"):
                raise UsageError(
                    f"--stage {args.stage} reads the cuda target's lowering: leave out --target {args.target}"
                )
            target = "cuda"
        opts = options_from_flags(args, cdef, sizes, target)
        if args.stage == "gpu-profile":
            _show_gpu_profile(args, cdef, sizes, opts)
            return 0
        lowered = lower(cdef, sizes, opts, target)
        if args.stage in ("c", "cuda"):
            source = without_prelude(lowered.source, "--no-prelude") if args.no_prelude else lowered.source
            print(source, end="" if source.endswith("\n") else "\n")
        elif args.stage == "ir":
            print(lowered.stages["ir"])
        else:
            print(lowered.stages["tree"])
            print("\nmapping decisions:")
            for line in lowered.stages["decisions"].splitlines() or ["(none)"]:
                print(f"  {line}")
    return 0
