"""Settings: validated, immutable objects whose defaults come from the design documents.

Every default of the memory is chosen here and nowhere else. A bad value raises
``ConfigError`` naming the field and the value.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gliding_core.errors import ConfigError
from gliding_core.tokens import DEFAULT_ENCODING


class Settings(BaseModel):
    """Base of every settings object: frozen, no unknown fields, typed errors."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}={err.get('input')!r}: {err['msg']}"
                for err in exc.errors()
            )
            raise ConfigError(f"invalid {type(self).__name__}: {problems}") from None


class StoreConfig(Settings):
    """L0 store settings.

    Attributes:
        max_content_bytes: the largest serialised JSON-LD node accepted, in UTF-8 bytes.
        busy_timeout_ms: how long a writer waits for another process's lock before failing.
        durability: ``"full"`` syncs the write-ahead log on every commit, so a returned write
            survives a power loss; ``"normal"`` survives a crash of the process only, and is faster.
        text_keys: node properties holding plain text, for which a merge keeps the longer value.
        default_importance: the importance of a new entry written without one.
    """

    max_content_bytes: int = Field(default=1_048_576, gt=0)
    busy_timeout_ms: int = Field(default=30_000, ge=0)
    durability: Literal["full", "normal"] = "full"
    text_keys: frozenset[str] = frozenset({"text"})
    default_importance: float = Field(default=0.5, ge=0.0, le=1.0)


class MemoryConfig(Settings):
    """Settings of the whole memory.

    Attributes:
        store: the L0 store settings.
        token_encoding: the tiktoken encoding used for every token count.
    """

    store: StoreConfig = StoreConfig()
    token_encoding: str = Field(default=DEFAULT_ENCODING, min_length=1)
