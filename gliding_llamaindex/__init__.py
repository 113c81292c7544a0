"""gliding-horse for LlamaIndex: adapters that translate LlamaIndex objects and call gliding_core.

The adapters arrive with the LlamaIndex integration work; this package is their home.
"""

__all__: list[str] = []
