#!/usr/bin/env python3
"""Start a real single-node Apache Kafka (KRaft, combined broker+controller) for tests/benchmarks.

Usage from Python::

    from compat.kafka.kraft import kraft_broker     # run from the repo root
    with kraft_broker() as kb:
        print(kb.bootstrap)        # "127.0.0.1:PORT"
        print(kb.pid)              # the java process (for /proc/PID/stat, RSS, ...)

or from a shell (prints the bootstrap address, runs until Ctrl-C / SIGTERM)::

    python compat/kafka/kraft.py [--port 9092] [--keep]

The jars come from ``compat/kafka/fetch.sh`` (Maven Central, cached).  The broker is
launched through ``kafka-run.sh`` (which ``exec``s java, so ``Popen.pid`` *is* the JVM);
its log (INFO) goes to ``<tmpdir>/server.log``.  On exit it is sent SIGTERM by pid,
then SIGKILL if it has not stopped after ``stop_timeout`` seconds; the temp dir is removed
unless ``keep=True``.  Only the standard library is used.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
FETCH_SH = HERE / "fetch.sh"
KAFKA_RUN = HERE / "kafka-run.sh"

# Kafka's own bin/kafka-server-start.sh defaults.
DEFAULT_HEAP = "-Xmx1G -Xms1G"
DEFAULT_JVM_OPTS = (
    "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
    "-XX:+ExplicitGCInvokesConcurrent"
)


def fetch_kafka() -> Path:
    """Run fetch.sh (a no-op once cached) and return the libs dir."""
    out = subprocess.run(
        [str(FETCH_SH)], check=True, stdout=subprocess.PIPE, text=True, timeout=900
    ).stdout
    return Path(out.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def random_cluster_id() -> str:
    """Same format as `kafka-storage random-uuid`: url-safe base64 of 16 bytes, no padding."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):  # Kafka avoids these too (they look like CLI flags)
            return cid


# --------------------------------------------------------------------------- readiness probe
def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def _request(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes) -> bytes:
    client_id = b"kraft.py"
    header = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    msg = header + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    resp = _recv_exact(sock, size)
    (rcorr,) = struct.unpack(">i", resp[:4])
    if rcorr != corr:
        raise ConnectionError(f"correlation id mismatch {rcorr} != {corr}")
    return resp[4:]


def probe(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when the broker answers ApiVersions v0 with no error and Metadata v1 lists a broker."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            body = _request(s, 18, 0, 1, b"")
            (err,) = struct.unpack(">h", body[:2])
            if err != 0:
                return False
            # Metadata v1, topics = null (all topics)
            body = _request(s, 3, 1, 2, struct.pack(">i", -1))
            (nbrokers,) = struct.unpack(">i", body[:4])
            return nbrokers >= 1
    except (OSError, struct.error):
        return False


# --------------------------------------------------------------------------- the broker
@dataclass
class KafkaBroker:
    """A running single-node KRaft Apache Kafka. Use via :func:`kraft_broker`."""

    port: int = 0
    controller_port: int = 0
    workdir: Path | None = None
    keep: bool = False
    extra_config: dict[str, str] = field(default_factory=dict)
    heap_opts: str = DEFAULT_HEAP
    jvm_opts: str = DEFAULT_JVM_OPTS
    log_level: str = "INFO"
    start_timeout: float = 90.0
    stop_timeout: float = 30.0

    proc: subprocess.Popen | None = None
    cluster_id: str = ""
    _own_workdir: bool = False

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_file(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "server.log"

    def config(self) -> dict[str, str]:
        assert self.workdir is not None
        cfg = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "50",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        cfg.update(self.extra_config)
        return cfg

    def start(self) -> KafkaBroker:
        fetch_kafka()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="kraft-"))
            self._own_workdir = True
        else:
            self.workdir = Path(self.workdir)
            self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        props = self.workdir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.config().items()))
        self.cluster_id = random_cluster_id()

        env = dict(os.environ)
        fmt = subprocess.run(
            [str(KAFKA_RUN), "kafka-storage", "format", "--standalone",
             "-t", self.cluster_id, "-c", str(props)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
            check=False,
        )
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({fmt.returncode}):\n{fmt.stdout}")

        return self._launch()

    def kill9(self) -> None:
        """SIGKILL the JVM and wait for it; :meth:`restart` brings the node back."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self, kill: bool = False) -> KafkaBroker:
        """The same node (ports, data) again after SIGTERM (a controlled shutdown) or, with
        ``kill``, SIGKILL (nothing to stop if it is down already); returns once it answers."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            proc.wait(timeout=None if kill else self.stop_timeout)
        return self._launch()

    def _launch(self) -> KafkaBroker:
        assert self.workdir is not None
        props = self.workdir / "server.properties"
        env = dict(os.environ)
        env.update(
            KAFKA_HEAP_OPTS=self.heap_opts,
            KAFKA_JVM_OPTS=self.jvm_opts,
            KAFKA_LOG_LEVEL=self.log_level,
        )
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [str(KAFKA_RUN), "kafka.Kafka", str(props)],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C reaches us, not the JVM; we stop it
            )
        atexit.unregister(self.stop)
        atexit.register(self.stop)

        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"Kafka exited with {self.proc.returncode} during startup; "
                    f"log tail:\n{self.log_tail()}"
                )
            if probe(self.host, self.port):
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"Kafka did not answer on {self.bootstrap} within {self.start_timeout}s; "
                    f"log tail:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM the JVM by pid, SIGKILL after stop_timeout; remove our temp dir."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if proc is not None:
            with contextlib.suppress(Exception):
                atexit.unregister(self.stop)
        if self._own_workdir and not self.keep and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def kraft_broker(**kwargs) -> Iterator[KafkaBroker]:
    """Context manager: start a single-node KRaft Kafka, yield it, stop it by pid at exit.

    Keyword args are :class:`KafkaBroker` fields, e.g. ``port=``, ``extra_config={...}``,
    ``heap_opts=``, ``keep=True`` (keep the temp dir with server.log and data).
    """
    kb = KafkaBroker(**kwargs)
    try:
        kb.start()
        yield kb
    finally:
        kb.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="PLAINTEXT port (default: a free one)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (log + data) on exit")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra broker config, repeatable")
    args = ap.parse_args(argv)
    extra = dict(kv.split("=", 1) for kv in args.set)
    with kraft_broker(port=args.port, keep=args.keep, extra_config=extra) as kb:
        print(kb.bootstrap, flush=True)
        print(f"# pid {kb.pid}, workdir {kb.workdir}, log {kb.log_file}", file=sys.stderr, flush=True)
        run_until_signal(lambda: kb.proc is not None and kb.proc.poll() is None)
    return 0


def run_until_signal(alive) -> None:
    """Block until SIGTERM/SIGINT or until ``alive()`` turns false (the command-line launchers)."""
    stop = False

    def _sig(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _sig)
    signal.signal(signal.SIGINT, _sig)
    while not stop and alive():
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
