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

__all__ = ["DEFAULT_FUSION", "FRONT_STAGES", "MAPPED_STAGES", "OPTION_STAGES", "cmd_show"]

#: The stages of the front end and the polyhedral layer (no mapping options but the schedule's).
FRONT_STAGES = ("ast", "checked", "canonical", "backward", "scop", "schedule")
#: The stages that lower the entry (every size needed).
MAPPED_STAGES = ("tree", "ir", "c", "cuda")
#: The stages that read the mapping options.
OPTION_STAGES = ("options", *MAPPED_STAGES)
#: The fusion strategy ``--stage schedule`` uses without ``--fusion`` or ``--options``.
DEFAULT_FUSION = "Preserve3Coincident"


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
    print(f"options: {options_origin(kernel, inputs, target, given)}")
    for name, value in chosen.to_dict().items():
        print(f"  {name}: {json.dumps(value)}")


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
    ("wrt", "--wrt", ("backward",)),
    ("absent", "--absent", ("backward",)),
)


def _refuse_unused_flags(args) -> None:
    """A flag the chosen stage would ignore is a mistake: say which stages read it."""
    for attr, flag, stages in _OPTION_FLAGS:
        if getattr(args, attr) not in (None, False) and args.stage not in stages:
            allowed = ", ".join(stages[:-1]) + (" or " if len(stages) > 1 else "") + stages[-1]
            raise UsageError(f"{flag} goes with --stage {allowed}, not --stage {args.stage}")


def cmd_show(args) -> int:
    """Print one stage of the compilation of an entry."""
    _refuse_unused_flags(args)
    from .polyhedral.lang.parser import parse
    from .polyhedral.lang.printer import def_to_tc

    program, cdef = load_entry(args.file, args.entry)
    sizes = parse_sizes(args.sizes, cdef.sizes)
    if args.stage == "ast":
        from .polyhedral.lang.ast_text import ast_text

        print(ast_text(parse(program.source).get(cdef.name)))
    elif args.stage == "canonical":
        print(def_to_tc(cdef.ast), end="")
    elif args.stage == "backward":
        from .polyhedral.autodiff import derive
        from .polyhedral.lang.check import check_source

        d = derive(cdef, parse_names(args.wrt, cdef.params, "--wrt", "inputs"), absent=_absent(args, cdef))
        for text in (d.forward, d.backward):  # printed canonically, as the compiler reads them
            print(def_to_tc(check_source(text).defs[0].ast))
    elif args.stage in ("scop", "schedule"):
        from .polyhedral.schedule import schedule, schedule_text, tile
        from .polyhedral.scop import build_scop, compute_dependences

        if cdef.sizes and not sizes and args.fix_sizes:
            raise UsageError("--fix-sizes needs --sizes")
        scop = build_scop(cdef, sizes if args.fix_sizes else None)
        if args.stage == "scop":
            print(scop.describe())
        else:
            from .mapping.options import MappingOptions

            base = MappingOptions.from_json(args.options) if args.options else None
            fusion = args.fusion or (base.get("outer_schedule_fusion_strategy") if base else DEFAULT_FUSION)
            tiles = parse_ints(args.tile, "--tile")
            if tiles is None:
                tiles = base.get("tile") if base else ()
            sched = schedule(scop, compute_dependences(scop), fusion=fusion)
            print(schedule_text(tile(sched, tiles)))
    elif args.stage == "options":
        _need_sizes(cdef, sizes, "--stage options")
        _show_options(args, program, cdef, sizes)
    elif args.stage in MAPPED_STAGES:
        _need_sizes(cdef, sizes, f"--stage {args.stage}")
        from .mapping.c_prelude import without_prelude
        from .pipeline import lowered as lower

        target = args.target or "cpu"
        if args.stage == "cuda":
            if args.target not in (None, "cuda"):
                raise UsageError(
                    f"--stage cuda prints the cuda target's source: leave out --target {args.target}"
                )
            target = "cuda"
        opts = options_from_flags(args, cdef, sizes, target)
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
    elif args.stage == "checked":
        print(cdef.signature())
        for name in cdef.temporaries:
            t = cdef.tensor(name)
            print(f"  temporary {t.dtype}({', '.join(map(str, t.shape))}) {name}")
        for st in cdef.statements:
            print(f"line {st.line}: {st.tensor} {st.source.op_text}  ({st.value_type})")
            for r in st.ranges:
                kind = "reduction" if r.var in st.reduction_vars else "index"
                concrete = ""
                if sizes and r.lo.symbols() | r.hi.symbols() <= sizes.keys():
                    concrete = f"   = [{r.lo.evaluate(sizes)}, {r.hi.evaluate(sizes)})"
                print(f"    {kind:9} {r}{concrete}")
    return 0
