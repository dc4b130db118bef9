"""An S3-compatible server (moto's server mode) on 127.0.0.1: a test helper (tests/conftest.py's
``s3_options``, tests/test_object_storage.py, tests/orchestration), which the benchmarks that write
a release to object storage (benchmarks.object_storage, benchmarks.run --target s3) load too
(benchmarks.paths.load_test_helper). Tests and the product never import benchmarks/."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BUCKET = "dp-dask"
START_TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_server(bucket: str = BUCKET, python: str = sys.executable,
                log: Path | None = None) -> Iterator[tuple[dict[str, Any], int]]:
    """An S3 server (moto's server mode) in its own process on 127.0.0.1, with ``bucket``
    created; yields fsspec's storage options that reach it and the server's pid.

    ``python``: an interpreter that has ``moto[server]`` (an orchestrator's venv may not)."""
    port = _free_port()
    with contextlib.ExitStack() as stack:
        output = stack.enter_context(open(log, "w") if log else open(os.devnull, "w"))
        server = subprocess.Popen([python, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                   str(port)], stdout=output, stderr=subprocess.STDOUT)
        stack.callback(server.wait)
        stack.callback(server.terminate)
        options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing",
                   "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}}
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the S3 server on port {port} did not start")
            time.sleep(0.2)
        import s3fs  # the s3 extra

        # create_bucket directly: mkdir would send us-east-1 as a location constraint
        s3fs.S3FileSystem(**options).call_s3("create_bucket", Bucket=bucket)
        yield options, server.pid
