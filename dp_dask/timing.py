"""Wall-clock stage timings, recorded into a caller's dict (``synthesizer.timings_``)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def timed(timings: dict[str, float] | None, stage: str) -> Iterator[None]:
    """Record the seconds the block takes as ``timings[stage]`` (nothing if timings is None)."""
    started = time.perf_counter()
    yield
    if timings is not None:
        timings[stage] = time.perf_counter() - started
        log.info("%s: %.2f s", stage, timings[stage])
