"""Stage timings, recorded into a caller's dict (``synthesizer.timings_``): wall clock, and with
``cpu`` the process's CPU seconds too (what a loaded machine does not inflate)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def timed(timings: dict[str, float] | None, stage: str,
          cpu: dict[str, float] | None = None) -> Iterator[None]:
    """Record the seconds the block takes as ``timings[stage]`` (nothing if timings is None),
    and its CPU seconds (``time.process_time``) as ``cpu[stage]``."""
    started, used = time.perf_counter(), time.process_time()
    yield
    if cpu is not None:
        cpu[stage] = time.process_time() - used
    if timings is not None:
        timings[stage] = time.perf_counter() - started
        log.info("%s: %.2f s", stage, timings[stage])
