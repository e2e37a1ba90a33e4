"""Start the broker as a real separate process for tests: free ports, temp data dir, kill -9."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} during start-up")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"broker did not listen on {port} within {timeout}s")


class BrokerProcess:
    """One broker subprocess; ``restart()`` keeps its port and data directory."""

    def __init__(self, log_dir: str, overrides: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.port = free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen | None = None
        self.log_path = log_dir + ".out"
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        props = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": self.log_dir,
            "metrics.listener": "127.0.0.1:0",
            **self.overrides,
        }
        cmd = [sys.executable, "-m", "broker"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        self.starts += 1
        out = open(self.log_path, "a")
        out.write(f"\n==== start {self.starts} ====\n")
        out.flush()
        self.proc = subprocess.Popen(self.command(), cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        wait_for_port(self.port, timeout, self.proc)
        return self

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, kill: bool = False) -> BrokerProcess:
        self.kill9() if kill else self.stop()
        return self.start()

    def output(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
