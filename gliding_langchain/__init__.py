"""gliding-horse for LangChain: adapters that translate LangChain objects and call gliding_core.

The adapters arrive with the LangChain integration work; this package is their home.
"""

__all__: list[str] = []
