"""The LlamaIndex parts of the ``gliding-horse`` command: ``recall_bench`` (not the product).

``recall_bench`` is ``bench locomo``'s LlamaIndex method, registered in ``pyproject.toml`` as an
entry point, so the engine never imports this package.
"""
