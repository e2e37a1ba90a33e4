"""``EmbeddedBroker``: one real kbroker process for a test, a script or a notebook.

    with EmbeddedBroker({"num.partitions": "3"}) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})

The broker listens on a free loopback port, keeps its data and log in a temporary directory
(removed on exit unless ``keep_data``), answers Metadata before :meth:`start` returns, and is
stopped by pid (SIGTERM, then SIGKILL). When the ``with`` block raises, the broker log's tail
is attached to the exception as a note. Any broker setting can be overridden through
``config``, with Kafka's names.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from . import process
from .admin import TopicAdmin

# What a test wants that a production default does not give: loopback only, no fixed metrics
# port (several brokers side by side), groups that form without waiting.
TEST_DEFAULTS = {
    "metrics.listener": "127.0.0.1:0",
    "group.initial.rebalance.delay.ms": "0",
}


class BrokerStartError(RuntimeError):
    """The broker did not come up; the message ends with its log's tail."""


class EmbeddedBroker(TopicAdmin):
    def __init__(self, config: dict[str, object] | None = None, *, port: int = 0,
                 data_dir: str | os.PathLike | None = None, keep_data: bool = False,
                 start_timeout: float = 30.0, python: str = sys.executable) -> None:
        self.config = {k: str(v) for k, v in (config or {}).items()}
        self.host = "127.0.0.1"
        self.port = port or process.free_port()
        self._own_dir = data_dir is None
        self.dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="kbroker-"))
        self.keep_data = keep_data
        self.start_timeout = start_timeout
        self.python = python
        self.log_path = self.dir / "broker.log"
        self.proc = None
        self.startup_seconds: float | None = None

    # --- what clients need ----------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    bootstrap = bootstrap_servers

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def overrides(self) -> dict[str, str]:
        return {**TEST_DEFAULTS, "listeners": f"PLAINTEXT://{self.host}:{self.port}",
                "log.dirs": str(self.dir / "data"), **self.config}

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> EmbeddedBroker:
        if self.alive:
            return self
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = process.spawn(self.overrides(), self.log_path, self.python)
        try:
            self.startup_seconds = process.wait_answering(self.proc, self.host, self.port, self.start_timeout)
        except (ChildProcessError, TimeoutError) as exc:
            process.terminate(self.proc, 5)
            raise BrokerStartError(f"{exc}; its log ({self.log_path}):\n{self.log_tail()}") from None
        return self

    def stop(self, timeout: float = 20.0) -> int | None:
        """Controlled shutdown (SIGTERM), SIGKILL after ``timeout``; the data stays for a restart."""
        return process.terminate(self.proc, timeout)

    def kill(self) -> None:
        """kill -9: no controlled shutdown, as a crash."""
        if self.alive:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, kill: bool = False) -> EmbeddedBroker:
        """The same broker (port, data) again, after a clean stop or a kill -9."""
        self.kill() if kill else self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the broker and remove its directory (unless ``keep_data`` or it was given)."""
        self.stop()
        if self._own_dir and not self.keep_data and not os.environ.get("KBROKER_KEEP_DATA"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, since: int = 0, max_lines: int = 80) -> str:
        return process.log_tail(self.log_path, since, max_lines)

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and hasattr(exc, "add_note"):
            exc.add_note(f"kbroker log ({self.log_path}):\n{self.log_tail()}")
        self.close()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.alive else "stopped"
        return f"EmbeddedBroker({self.bootstrap_servers}, {state})"
