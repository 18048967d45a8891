"""tcjit.polyhedral: the error hierarchy, the TC language, Scops and dependences, schedules and
legality, and automatic differentiation (``autodiff``).

``tcjit.polyhedral.lang`` is the front-end: :func:`~tcjit.polyhedral.lang.parser.parse`,
:func:`~tcjit.polyhedral.lang.check.check` (types, rules, range inference) and the canonical
printer. This layer may import islpy and numpy only; never torch.
"""
