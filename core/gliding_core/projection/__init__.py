"""L3: projections: each role's frame of a task, cut from the blackboard, cached, in budget.

``frames`` (the nine shipped frames as SPARQL CONSTRUCT, and user frames), ``compaction`` (the
CONSTRUCT's triples as compact JSON-LD nodes, with pyld), ``budget`` (the degradation steps
within a token budget), ``cache`` (materialised views and the reverse index that invalidates
them), ``projector`` (``Projector.project``, which puts them together) and ``artifacts`` (a
projection as one artifact per node, with its IRI and generation: what the frame retrievers
of the adapters return). The read path over them: ``scheduler`` (each role's frame, falling
back to L2 and L0; the end of a task) and ``prefetch`` (frames projected before they are read).
"""

from gliding_core.projection.artifacts import FrameArtifact, FrameArtifacts, frame_artifacts
from gliding_core.projection.budget import STEPS, Projection
from gliding_core.projection.cache import CacheStats, ViewCache
from gliding_core.projection.frames import SHIPPED, Frame, FrameSet, ParamKind
from gliding_core.projection.projector import Projector

__all__ = [
    "SHIPPED",
    "STEPS",
    "CacheStats",
    "Frame",
    "FrameArtifact",
    "FrameArtifacts",
    "FrameSet",
    "ParamKind",
    "Projection",
    "Projector",
    "ViewCache",
    "frame_artifacts",
]
