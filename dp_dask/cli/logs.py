"""A job's stage logs, warnings and error line: as text, or one JSON object per line
(``--log-format json``)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from dp_dask.config import Options
from dp_dask.exceptions import DpDaskWarning

log = logging.getLogger("dp_dask")


class JsonFormatter(logging.Formatter):
    """One JSON object per log line (``--log-format json``), for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                     timespec="milliseconds"),
                 "level": record.levelname, "logger": record.name,
                 "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


SHOW_WARNING = warnings.showwarning


class Messages:
    """One ``main`` call's warnings and error line: ``dp-dask: error: ...``, or, while a job
    logs JSON, a JSON log line."""

    def __init__(self) -> None:
        self.json = False

    def say(self, kind: str, message: str) -> None:
        if self.json:
            log.log(logging.ERROR if kind == "error" else logging.WARNING, message)
        else:
            print(f"dp-dask: {kind}: {message}", file=sys.stderr)

    def show_warning(self, message: Warning | str, category: type[Warning], *args: Any,
                     **kwargs: Any) -> None:
        """``warnings.showwarning``: our warnings said as above, others as Python says them."""
        if issubclass(category, DpDaskWarning):
            self.say("warning", str(message))
        else:
            SHOW_WARNING(message, category, *args, **kwargs)

    @contextlib.contextmanager
    def logging(self, args: Options) -> Iterator[None]:
        """dp_dask's stage logs (and with JSON, distributed's) on stderr in the chosen format,
        for the job only: the loggers are restored after it (main may run many times in a
        process)."""
        self.json = getattr(args, "log_format", "text") == "json"
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter() if self.json else
                             logging.Formatter("%(asctime)s %(name)s %(message)s"))
        loggers = [log] + ([logging.getLogger("distributed")] if self.json else [])
        saved = [(logger, logger.handlers[:], logger.propagate, logger.level)
                 for logger in loggers]
        for logger in loggers:
            logger.handlers, logger.propagate = [handler], False
        log.setLevel(logging.WARNING if args.quiet else logging.INFO)
        try:
            yield
        finally:
            for logger, handlers, propagate, level in saved:
                logger.handlers, logger.propagate = handlers, propagate
                logger.setLevel(level)
            self.json = False
