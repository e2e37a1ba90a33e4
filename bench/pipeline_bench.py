"""Pipeline benchmark: the Spark job against our broker at a steady input rate.

    python bench/pipeline_bench.py --rate 2000 --seconds 60
    python bench/pipeline_bench.py --rate 8000 --seconds 60 --out bench/baselines/pipeline-8000.json

A fresh broker and a fresh job (``python -m pipeline stream``, Spark local[2], 10 s windows, 2 s
watermark, event time = produce time) run while a paced idempotent producer sends ``--rate``
events/s (1% malformed) for ``--seconds``; a read_committed consumer timestamps every committed
output record. Reported (steady phase, the first ``--skip`` seconds left out):

  events_s              input events the job consumed per second (records_in of its batches)
  dead_letter_ms        produce -> committed dead letter, per malformed event (the stateless path)
  window_close_ms       window end + watermark delay -> committed aggregate (pipeline's own delay)
  window_last_event_ms  last event of a window produced -> committed aggregate (includes the wait
                        for the watermark, i.e. window length is not in it but the delay is)
  batch_ms / sink_ms / sink_broker_ms   per micro-batch: Spark's trigger duration, the time in
                        foreachBatch (it includes Spark's lazy computation of the batch) and the
                        part of it spent in the sink's broker calls
  cpu_s                 CPU seconds over the steady phase (utime+stime from /proc/<pid>/stat) of
                        the Spark JVM, the Spark Python workers, the Python driver, the broker
Only confluent-kafka is needed besides the pipeline extra; the job's connector jars must be
cached (``make pipeline-setup``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import produce_bench as pb  # noqa: E402  (after the sys.path insert)

REPO = Path(__file__).resolve().parents[1]


def categories() -> dict[str, str]:
    with open(REPO / "pipeline" / "data" / "products.csv", newline="") as f:
        return {row["sku"]: row["category"] for row in csv.DictReader(f)}


class Load:
    """A paced producer: ``rate`` events/s, event time = produce time; remembers what it sent."""

    def __init__(self, bootstrap: str, topic: str, rate: int, seconds: float, window_ms: int) -> None:
        import confluent_kafka as ck

        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                     "linger.ms": 5, "partitioner": "murmur2_random"})
        self.topic, self.rate, self.seconds, self.window_ms = topic, rate, seconds, window_ms
        self.skus = sorted(categories())
        self.cat = categories()
        self.dead: dict[bytes, float] = {}  # raw value -> produce time
        self.window_last: dict[tuple[str, int], float] = {}  # (category, window start) -> last produce
        self.sent = 0
        self.elapsed = 0.0

    def _event(self, rnd: random.Random, now: float, i: int) -> bytes:
        ts = int(now * 1000)
        if rnd.random() < 0.01:
            raw = json.dumps({"event_id": f"b-{i}", "ts": ts, "user_id": "u-1", "sku": "SKU-999",
                              "qty": 1, "price_cents": 1}).encode()
            self.dead[raw] = now
            return raw
        sku = rnd.choice(self.skus)
        key = (self.cat[sku], ts - ts % self.window_ms)
        self.window_last[key] = now
        return json.dumps({"event_id": f"e-{i}", "ts": ts, "user_id": f"u-{rnd.randrange(1000)}",
                           "sku": sku, "qty": rnd.randint(1, 5), "price_cents": rnd.randint(99, 9999)}).encode()

    def run(self) -> None:
        rnd = random.Random(1)
        start = time.time()
        while True:
            now = time.time()
            if now - start >= self.seconds:
                break
            due = int((now - start) * self.rate)
            while self.sent < due:
                self.producer.produce(self.topic, self._event(rnd, time.time(), self.sent), f"u-{self.sent % 1000}".encode())
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.005)  # pacing granularity only
        self.producer.flush(30)
        self.elapsed = time.time() - start


class Reader(threading.Thread):
    """read_committed consumer of the outputs; the wall time each record became visible."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        super().__init__(daemon=True)
        import confluent_kafka as ck

        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                                     "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                     "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        self.consumer.subscribe(topics)
        self.records: list[tuple[str, bytes, float]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for msg in self.consumer.consume(500, 0.05):
                if msg.error() is None:
                    self.records.append((msg.topic(), msg.value(), time.time()))
        self.consumer.close()


def job_processes(driver_pid: int) -> dict[str, list[int]]:
    """The job's process tree split into the Spark JVM, its Python workers and the driver."""
    out: dict[str, list[int]] = {"spark_jvm": [], "python_workers": [], "python_driver": [driver_pid]}
    for pid in pb.proc_tree(driver_pid):
        if pid == driver_pid:
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        out["spark_jvm" if b"java" in cmd.split(b"\0", 1)[0] else "python_workers"].append(pid)
    return out


def cpu_of(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / pb.CLK_TCK


def cpu_snapshot(driver_pid: int, broker_pid: int) -> dict[str, dict[int, float]]:
    snap = {group: {pid: cpu_of([pid]) for pid in pids} for group, pids in job_processes(driver_pid).items()}
    snap["broker"] = {pid: cpu_of([pid]) for pid in pb.proc_tree(broker_pid)}
    return snap


def cpu_delta(before: dict, after: dict) -> dict[str, float]:
    return {group: round(sum(v - before.get(group, {}).get(pid, 0.0) for pid, v in after[group].items()), 2)
            for group in after}


def pct(values: list[float]) -> dict:
    values = sorted(values)
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(pb._pct(values, 0.5), 1), "p99": round(pb._pct(values, 0.99), 1),
            "max": round(values[-1], 1)}


def batch_lines(log_path: Path) -> list[dict]:
    out = []
    for line in log_path.read_text().splitlines():
        if line.startswith("{"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "batch":
                rec["at"] = datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")).timestamp()
                out.append(rec)
    return out


def start_job(bootstrap: str, tmp: Path, args) -> tuple[subprocess.Popen, Path]:
    log_path = tmp / "job.log"
    cmd = [sys.executable, "-m", "pipeline", "stream", "--bootstrap-servers", bootstrap,
           "--checkpoint", str(tmp / "checkpoint"), "--window", f"{args.window} seconds",
           "--watermark", f"{args.watermark} seconds", "--max-offsets-per-trigger", "0",
           "--log-format", "json"]
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log_path


def wait_first_batches(proc: subprocess.Popen, log_path: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queries = {b["query"] for b in batch_lines(log_path)}
        if {"aggregates", "dead-letters"} <= queries:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"job exited: {log_path.read_text()[-3000:]}")
        time.sleep(0.2)
    raise TimeoutError("job did not run its first batches")


def analyse(load: Load, reader: Reader, batches: list[dict], t0: float, t1: float, args) -> dict:
    dead, close, last = [], [], []
    for topic, value, seen in reader.records:
        if topic == "orders-dead-letters":
            produced = load.dead.get(json.loads(value)["raw"].encode())
            if produced is not None and t0 <= produced <= t1:
                dead.append((seen - produced) * 1000)
            continue
        v = json.loads(value)
        produced = load.window_last.get((v["category"], v["window_start"]))
        if produced is None or not t0 <= v["window_start"] / 1000 <= t1:
            continue
        close.append((seen - v["window_end"] / 1000 - args.watermark) * 1000)
        last.append((seen - produced) * 1000)
    steady = [b for b in batches if t0 <= b["at"] <= t1 + 5]
    consumed = sum(b["records_in"] for b in steady if b["query"] == "aggregates")
    span = (max(b["at"] for b in steady) - min(b["at"] for b in steady)) if len(steady) > 1 else 1.0
    agg = [b for b in steady if b["query"] == "aggregates"]
    return {
        "events_s": round(consumed / span, 1),
        "dead_letter_ms": pct(dead),
        "window_close_ms": pct(close),
        "window_last_event_ms": pct(last),
        "batch_ms": pct([b["latency_ms"] for b in agg]),
        "sink_ms": pct([b["sink_ms"] for b in agg]),
        "sink_broker_ms": pct([b["broker_ms"] for b in agg]),
        "batches": len(agg),
        "sink_share_of_batch": round(sum(b["sink_ms"] for b in agg) / max(1, sum(b["latency_ms"] for b in agg)), 3),
        "broker_share_of_batch": round(sum(b["broker_ms"] for b in agg) / max(1, sum(b["latency_ms"] for b in agg)), 3),
    }


def run(args) -> dict:
    target = pb.OursTarget(sys.executable, [], 60, False)
    target.start()
    tmp = Path(tempfile.mkdtemp(prefix="pipeline-bench-"))
    proc = None
    try:
        pb.create_topic(target.bootstrap, "orders", 3)
        proc, log_path = start_job(target.bootstrap, tmp, args)
        reader = Reader(target.bootstrap, ["orders-per-category", "orders-dead-letters"])
        load = Load(target.bootstrap, "orders", args.rate, args.seconds, args.window * 1000)
        warm = threading.Thread(target=Load(target.bootstrap, "orders", 50, 2, args.window * 1000).run)
        warm.start()
        wait_first_batches(proc, log_path)
        warm.join()
        reader.start()
        feeder = threading.Thread(target=load.run)
        feeder.start()
        time.sleep(args.skip)  # steady phase starts after the ramp-up (measurement window, not correctness)
        t0, cpu0 = time.time(), cpu_snapshot(proc.pid, target.pid)
        feeder.join()
        t1, cpu1 = time.time(), cpu_snapshot(proc.pid, target.pid)
        time.sleep(args.window + args.watermark + 5)  # let the last windows of the steady phase close
        reader.stopping.set()
        reader.join(10)
        result = analyse(load, reader, batch_lines(log_path), t0, t1, args)
        cpu = cpu_delta(cpu0, cpu1)
        spark = cpu["spark_jvm"] + cpu["python_workers"] + cpu["python_driver"]
        result.update({
            "rate": args.rate, "seconds": args.seconds, "produced": load.sent,
            "produced_s": round(load.sent / max(load.elapsed, 1e-9), 1),
            "cpu_s": cpu, "steady_seconds": round(t1 - t0, 1),
            "cpu_share": {"spark": round(spark / max(1e-9, spark + cpu["broker"]), 3),
                          "broker": round(cpu["broker"] / max(1e-9, spark + cpu["broker"]), 3)},
            "broker_cpu_util": round(cpu["broker"] / (t1 - t0), 3),
            "spark_cpu_util": round(spark / (t1 - t0), 3),
        })
        return result
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        target.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=2000, help="input events per second")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--skip", type=float, default=10, help="ramp-up left out of the figures")
    ap.add_argument("--window", type=int, default=10, help="window length, seconds")
    ap.add_argument("--watermark", type=int, default=2, help="watermark delay, seconds")
    ap.add_argument("--out", type=Path, help="write the JSON here too")
    args = ap.parse_args()
    result = {"bench": "pipeline", "host": platform.node(), "cpus": os.cpu_count(),
              "loadavg_start": os.getloadavg()[0], **run(args), "loadavg_end": os.getloadavg()[0]}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
