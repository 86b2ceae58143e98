"""The `pruner` subcommands, one module each (``data``, ``annotate``, ``train``, ``evaluate``,
``prune``, ``export``, ``serve``): a thin ``main(argv) -> int`` over the Python API of its part.
The dispatcher (:mod:`pruner_model.cli`) imports one by name when it runs, so ``pruner prune``
never pays for the training stack.

May import every part; no part imports this one.
"""
