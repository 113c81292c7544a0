"""Hyperspace: embedders, vector helpers and (with the search work) the indexes over L0."""

from gliding_core.hyperspace.embedders import Embedder, HashEmbedder
from gliding_core.hyperspace.vectors import cosine

__all__ = ["Embedder", "HashEmbedder", "cosine"]
