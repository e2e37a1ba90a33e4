"""Broker processes owned by a test run: started from kbroker's own packages, stopped by pid.

Each process runs ``python -m broker`` with the broker packages' directory as its working
directory (first on its ``sys.path``), its output in a log file, and on Linux a parent-death
signal, so that a test runner killed outright does not leave brokers behind.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .layout import app_root
from .wire import metadata_broker_ids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def child_setup(die_with_parent: bool):
    """``preexec_fn`` for a child that must die with this process (Linux), else None. Only from
    the main thread: Linux sends the signal when the thread that forked exits, so a child
    started from a worker thread would die with that thread."""
    wanted = die_with_parent and threading.current_thread() is threading.main_thread()
    return _die_with_parent if wanted and sys.platform.startswith("linux") else None


def spawn(overrides: dict[str, str], log_path: Path, python: str = sys.executable) -> subprocess.Popen:
    cmd = [python, "-m", "broker"]
    for key, value in overrides.items():
        cmd += ["--override", f"{key}={value}"]
    with open(log_path, "a") as out:
        out.write(f"==== start {time.strftime('%H:%M:%S')} ====\n")
        out.flush()
        return subprocess.Popen(cmd, cwd=app_root(), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=child_setup(True))


def wait_answering(proc: subprocess.Popen, host: str, port: int, timeout: float,
                   brokers: int = 1) -> float:
    """Until the broker answers Metadata listing ``brokers`` brokers; returns the seconds it took.

    Raises ``ChildProcessError`` if the process exits first and ``TimeoutError`` on timeout."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        if proc.poll() is not None:
            raise ChildProcessError(f"the broker exited with code {proc.returncode} during start-up")
        try:
            if len(metadata_broker_ids(host, port, timeout=1.0)) >= brokers:
                return time.monotonic() - start
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the broker on {host}:{port} did not answer Metadata within {timeout:.0f} s")
        time.sleep(0.02)


def terminate(proc: subprocess.Popen | None, timeout: float = 20.0) -> int | None:
    """SIGTERM (a controlled shutdown), then SIGKILL if the broker does not exit in time."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)  # a paused broker cannot shut down
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def log_tail(path: Path, since: int = 0, max_lines: int = 80) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(since)
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    cut = lines[-max_lines:]
    skipped = len(lines) - len(cut)
    return (f"[{skipped} earlier lines in {path}]\n" if skipped else "") + "\n".join(cut)
