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
          cpu: dict[str, float] | None = None, *, first_part: bool = False,
          last_part: bool = False) -> Iterator[None]:
    """Record the seconds the block takes as ``timings[stage]`` (nothing if timings is None),
    and its CPU seconds (``time.process_time``) as ``cpu[stage]``, and log them. A stage timed
    in two blocks (the 1-way noise before the model is chosen, the rest in the model's own
    fit): the ``first_part`` is recorded, not logged; the ``last_part`` adds to it and logs the
    stage's total, one line per stage."""
    started, used = time.perf_counter(), time.process_time()
    yield
    if cpu is not None:
        cpu[stage] = time.process_time() - used
    if timings is not None:
        earlier = timings.get(stage, 0.0) if last_part else 0.0
        timings[stage] = earlier + time.perf_counter() - started
        if not first_part:
            log.info("%s: %.2f s", stage, timings[stage])
