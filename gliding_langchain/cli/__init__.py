"""The LangChain parts of the ``gliding-horse`` command: a demo and two benchmarks (not the
product).

``demo`` and ``demo_team`` (``gliding-horse demo``'s agent part), ``agents_bench`` (``bench
agents``) and ``recall_bench`` (``bench locomo``'s LangChain method); each is registered in
``pyproject.toml`` as an entry point, so the engine never imports this package.
"""
