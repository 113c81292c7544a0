"""CLI: the ``gliding-horse`` command, its demos and its benchmarks (not the product).

``command`` (the argument parser and ``main``), ``demo`` and its parts (``demo_search``,
``demo_session``, ``demo_blackboard``), ``table`` (plain-text tables) and ``benchmarks``. The
benchmarks that need a framework are registered by the adapters as entry points
(``gliding_horse.benchmarks``, ``gliding_horse.recall_methods``, ``gliding_horse.demos``): the
engine imports no adapter.
"""

from gliding_core.cli.command import main

__all__ = ["main"]
