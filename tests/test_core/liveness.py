"""Helpers of the fault tests: a call that must come back, and one retried until it works."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gliding_core import DatabaseUnavailableError


def within(call: Callable[[], Any], seconds: float, *, waiting_for: str) -> BaseException | None:
    """Run ``call`` in a thread; return what it raised (``None``: it returned).

    Fails the test if the call is still running after ``seconds``: an endless wait (for
    ``waiting_for``, which the failure names).
    """
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{call} still waits for {waiting_for}"
    return outcome[0]


def until_it_works(call: Callable[[], Any], attempts: int = 30) -> Any:
    """Call ``call`` until it returns, each failure a ``DatabaseUnavailableError``."""
    for _ in range(attempts - 1):
        try:
            return call()
        except DatabaseUnavailableError:
            continue
    return call()
