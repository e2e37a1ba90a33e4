"""Start the broker as a real separate process for tests: free ports, temp data dir, kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tools.devcluster import free_port, terminate, wait_for_port

REPO = Path(__file__).resolve().parents[2]


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
        return terminate(self.proc, timeout)

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
