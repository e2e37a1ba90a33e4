"""``make pipeline-demo``: a broker, sample events, the streaming job, the aggregates it committed.

Owns only the demo's choreography: start one broker process on a free 127.0.0.1 port (data in a
temporary directory), load 20,000 sample events (120 malformed, one aborted transaction, then the
end-of-input event), run ``python -m pipeline stream`` until it is idle, print the committed
aggregates and the dead letters per reason as a read_committed consumer sees them, stop the broker.
Known limit: needs the pipeline extra and the connector jars (``make pipeline-setup``).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from pipeline import sample

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={data_dir}", "--override", "metrics.listener="]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=open(data_dir.parent / "broker.log", "w"),
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"broker exited with {proc.returncode}; see {data_dir.parent / 'broker.log'}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("broker did not start within 30 s")


def load_input(bootstrap: str, topic: str, events: int, malformed: int) -> sample.Sample:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, -1)])  # -1: the broker's default[topic].result(15)
    data = sample.generate(events, malformed, seed=2026)
    eoi = sample.end_of_input(data.last_ts, 5 * 60_000, 10 * 60_000)
    sample.load(bootstrap, topic, data.records + [(b"end", eoi)])
    return data


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def print_results(bootstrap: str) -> None:
    rows = [json.loads(m.value()) for m in sample.read_committed(bootstrap, "orders-per-category")]
    rows.sort(key=lambda r: (r["window_start"], r["category"]))
    print(f"\n{'window (UTC)':<14} {'category':<10} {'events':>7} {'units':>7} {'revenue':>12}")
    for r in rows:
        window = f"{_utc(r['window_start'])}-{_utc(r['window_end'])}"
        print(f"{window:<14} {r['category']:<10} {r['events']:>7} {r['units']:>7} {r['revenue_cents'] / 100:>12.2f}")
    dead = Counter(json.loads(m.value())["reason"] for m in sample.read_committed(bootstrap, "orders-dead-letters"))
    print(f"\n{len(rows)} windows, {sum(r['events'] for r in rows)} events; dead letters: "
          + ", ".join(f"{reason} {n}" for reason, n in sorted(dead.items())))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.demo", description="the pipeline end to end")
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--malformed", type=int, default=120)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pipeline-demo-") as tmp:
        broker, bootstrap = start_broker(Path(tmp) / "data")
        try:
            print(f"broker on {bootstrap}; loading {args.events} events ({args.malformed} malformed)")
            load_input(bootstrap, "orders", args.events - args.malformed, args.malformed)
            job = [sys.executable, "-m", "pipeline", "stream", "--bootstrap-servers", bootstrap,
                   "--checkpoint", str(Path(tmp) / "checkpoint"), "--idle-timeout", "5"]
            rc = subprocess.call(job, cwd=REPO)
            if rc != 0:
                return rc
            print_results(bootstrap)
        finally:
            broker.terminate()
            broker.wait(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
