#!/usr/bin/env python3
"""Produce/consume benchmark: our broker vs. Apache Kafka, one confluent-kafka client.

    python bench/produce_bench.py --target both            # ours and Apache Kafka, then ratios
    python bench/produce_bench.py --target kafka --quick   # smoke run (CI)
    python bench/produce_bench.py --bootstrap 127.0.0.1:9092 [--broker-pid PID]
    python bench/produce_bench.py --target both --idle-partitions 100 --phases idle

Phases (``--phases``, default ``produce,rate,consume``; ``--idle-partitions N`` adds ``idle``):

  idle     fresh broker: RSS, create one topic with N partitions, settle, RSS again
  produce  1 KB records, linger.ms=5, acks=1 then acks=all; ``--runs`` runs each (median):
           MB/s, p50/p99 latency (delivery-callback time - produce() time), broker CPU-s/GB
  rate     same, rate-limited to half the max rate measured in ``produce``; p50/p99/p99.9
  consume  one consumer reads a produced topic from the beginning; MB/s, CPU-s/GB

Broker CPU = utime+stime from /proc/PID/stat (summed over the broker's process tree),
RSS = VmRSS (also VmHWM, the peak).  MB = 10^6 bytes, GB = 10^9 bytes.

Targets: ``ours`` = ``python -m broker --override listeners=PLAINTEXT://127.0.0.1:PORT
--override log.dirs=TMPDIR`` (cwd = repo root, a black box); ``kafka`` = Apache Kafka
4.3.1 in KRaft mode via compat/kafka/kraft.py (Kafka's default -Xmx1G -Xms1G, G1).
A table goes to stdout, progress to stderr, everything to a JSON file (``--json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from compat.kafka import kraft  # stdlib only  # noqa: E402  (after the sys.path insert)

try:
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError:  # pragma: no cover
    sys.exit("produce_bench.py needs confluent-kafka (pip install confluent-kafka)")

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 1e6
GB = 1e9


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def write_results(name: str, result: dict, path: str | None = None) -> Path:
    """A run's JSON: at ``path``, or at bench/results/<name>-<date>-<time>.json."""
    out = Path(path) if path else REPO / "bench" / "results" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return out


# =========================================================================== /proc helpers
def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def proc_tree(pid: int) -> list[int]:
    """pid and all its descendants (our broker may fork workers)."""
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def cpu_seconds(pid: int | None) -> float | None:
    """utime+stime of the process tree, in seconds."""
    if pid is None:
        return None
    total = 0
    for p in proc_tree(pid):
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        except (OSError, IndexError, ValueError):
            pass
    return total / CLK_TCK


def rss_mb(pid: int | None, field: str = "VmRSS") -> float | None:
    """VmRSS (or VmHWM) summed over the process tree, MB."""
    if pid is None:
        return None
    total_kb = 0
    for p in proc_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        total_kb += int(line.split()[1])
        except OSError:
            pass
    return total_kb * 1024 / MB


# =========================================================================== brokers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(bootstrap: str, proc: subprocess.Popen | None, timeout: float, what: str,
               log_file: Path | None = None) -> None:
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} during startup"
                               + (f"; log tail:\n{_tail(log_file)}" if log_file else ""))
        if kraft.probe(host, int(port), timeout=1.0):
            return
        with contextlib.suppress(Exception):  # fall back to a real client's view
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=1.0)
            if md.brokers:
                return
        time.sleep(0.3)
    raise TimeoutError(f"{what} not ready on {bootstrap} after {timeout}s"
                       + (f"; log tail:\n{_tail(log_file)}" if log_file else ""))


def _tail(path: Path | None, n: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except (OSError, TypeError):
        return "(no log)"


class Target:
    """A broker under test: start() -> bootstrap; .pid for /proc; stop()."""

    name = "?"
    pid: int | None = None
    bootstrap = ""
    version = ""

    def start(self) -> None: ...
    def stop(self) -> None: ...


class OursTarget(Target):
    name = "ours"

    def __init__(self, python: str, extra_overrides: list[str], start_timeout: float, keep: bool):
        self.python, self.extra, self.start_timeout, self.keep = python, extra_overrides, start_timeout, keep
        self.proc: subprocess.Popen | None = None
        self.tmp: Path | None = None
        self.version = _git_rev()

    def start(self) -> None:
        port = free_port()
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-ours-"))
        self.log_file = self.tmp / "broker.log"
        cmd = [self.python, "-m", "broker",
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
               "--override", f"log.dirs={self.tmp / 'data'}",
               # a free port for the Prometheus endpoint, so a broker already running on
               # this machine (tests, a dev instance) cannot make the start fail
               "--override", "metrics.listener=127.0.0.1:0"]
        for kv in self.extra:
            cmd += ["--override", kv]
        log(f"ours: starting {' '.join(cmd)} (log {self.log_file})")
        with open(self.log_file, "ab") as lf:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=lf,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid
        self.bootstrap = f"127.0.0.1:{port}"
        try:
            wait_ready(self.bootstrap, self.proc, self.start_timeout, "our broker", self.log_file)
        except Exception:
            self.stop()
            raise

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self.tmp is not None and not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


class KafkaTarget(Target):
    name = "kafka"

    def __init__(self, heap: str, start_timeout: float, keep: bool):
        self.kb = kraft.KafkaBroker(heap_opts=heap, start_timeout=start_timeout, keep=keep)
        self.version = os.environ.get("KAFKA_VERSION", "4.3.1")

    def start(self) -> None:
        log("kafka: resolving jars (compat/kafka/fetch.sh) and starting KRaft broker")
        self.kb.start()
        self.pid = self.kb.pid
        self.bootstrap = self.kb.bootstrap
        log(f"kafka: up on {self.bootstrap}, pid {self.pid}, workdir {self.kb.workdir}")

    def stop(self) -> None:
        self.kb.stop()


class ExternalTarget(Target):
    name = "external"

    def __init__(self, bootstrap: str, pid: int | None):
        self.bootstrap, self.pid = bootstrap, pid

    def start(self) -> None:
        wait_ready(self.bootstrap, None, 30, f"broker at {self.bootstrap}")


def bench_targets(which: str, bench, args, kafka_heap: str = "-Xmx1G -Xms1G") -> tuple[dict, bool]:
    """``bench(target, args)`` on ours and/or Kafka (``which``: ours, kafka or both), fresh
    brokers each; a target that fails is reported and the other still runs. Returns
    ({target name: result}, whether one failed)."""
    targets: list[Target] = []
    if which in ("ours", "both"):
        targets.append(OursTarget(sys.executable, [], 120, False))
    if which in ("kafka", "both"):
        targets.append(KafkaTarget(kafka_heap, 120, False))
    results, failed = {}, False
    for t in targets:
        try:
            results[t.name] = bench(t, args)
        except Exception as exc:  # report and carry on with the other target
            log(f"{t.name}: FAILED: {exc!r}")
            results[t.name] = {"target": t.name, "error": repr(exc)}
            failed = True
    return results, failed


def _git_rev() -> str:
    with contextlib.suppress(Exception):
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=10, check=False).stdout.strip() or "uncommitted"
    return "unknown"


# =========================================================================== client-side work
def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 60.0) -> float:
    """Create a topic and wait until every partition has a leader. Returns seconds taken."""
    t0 = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout)[name]
    fut.result(timeout=timeout)
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=5)
        t = md.topics.get(name)
        if t and not t.error and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return time.monotonic() - t0
        time.sleep(0.1)
    raise TimeoutError(f"topic {name}: partitions without leader after {timeout}s")


def _pct(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[i]


def produce_run(bootstrap: str, topic: str, n: int, size: int, acks: str, linger_ms: int,
                pid: int | None, rate: float | None = None, timeout: float = 600.0,
                queue_kb: int = 32768, skip_s: float = 0.0, idempotence: bool = False) -> dict:
    """Produce n records of `size` bytes; rate=None means as fast as possible (msgs/s otherwise).

    Latency per record = time the delivery callback ran - time produce() was called.
    Records sent in the first `skip_s` seconds are left out of the latency percentiles
    (each new producer/topic has a ~0.5-1 s start-up transient, seen with Kafka's own
    kafka-producer-perf-test too); p99_all_ms keeps the figure over all records.
    """
    sent = array("q", bytes(8 * n))
    done = array("q", bytes(8 * n))
    state = {"errors": 0, "delivered": 0, "first_err": None}

    def on_delivery(err, msg):
        t = time.perf_counter_ns()
        if err is not None:
            state["errors"] += 1
            state["first_err"] = state["first_err"] or str(err)
            return
        done[int.from_bytes(msg.key(), "big")] = t
        state["delivered"] += 1

    p = ck.Producer({
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": linger_ms,
        "enable.idempotence": idempotence,
        "compression.type": "none",
        # bounded client queue (32 MB like the Java producer's buffer.memory): at max rate
        # the latency is then queueing behind <= 32 MB, not behind the whole run
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": queue_kb,
        "message.timeout.ms": int(timeout * 1000),
        "on_delivery": on_delivery,
    })
    # warm up: metadata + connections, not measured
    p.list_topics(topic=topic, timeout=30)
    if idempotence:
        # The producer id is acquired on the first send (librdkafka may wait up to ~1 s for
        # a usable connection first): a start-up cost, not a throughput one.
        p.produce(topic, b"", (0).to_bytes(8, "big"))
        p.flush(30)
    payload = os.urandom(size)
    produce, poll, now = p.produce, p.poll, time.perf_counter_ns

    cpu0 = cpu_seconds(pid)
    ct0 = os.times()
    t0 = now()
    if rate is None:
        for i in range(n):
            key = i.to_bytes(8, "big")
            while True:
                sent[i] = now()
                try:
                    produce(topic, payload, key)
                    break
                except BufferError:
                    poll(0.0005)
            if not i & 511:
                poll(0)
    else:
        # Send whatever is due, then block in poll() (serving delivery callbacks) until the
        # next record is due; poll()'s 1 ms granularity makes bursts of <= ~1 ms of records.
        # No busy-waiting: on 2 cores a spinning client would steal the broker's CPU.
        per_ns = 1e9 / rate
        i = 0
        while i < n:
            due = min(n, int((now() - t0) / per_ns) + 1)
            while i < due:
                key = i.to_bytes(8, "big")
                sent[i] = now()
                try:
                    produce(topic, payload, key)
                except BufferError:
                    break
                i += 1
            wait_s = (t0 + i * per_ns - now()) / 1e9
            poll(min(max(wait_s, 0.001), 0.01) if i >= due else 0)
    remaining = p.flush(timeout)
    t_end = now()
    cpu1 = cpu_seconds(pid)
    ct1 = os.times()
    if remaining:
        raise RuntimeError(f"{remaining} records still undelivered after {timeout}s")
    if state["errors"]:
        raise RuntimeError(f"{state['errors']} delivery errors, first: {state['first_err']}")

    lats_all = sorted((done[i] - sent[i]) / 1e6 for i in range(n))
    if skip_s > 0:
        cut = t0 + int(skip_s * 1e9)
        lats = sorted((done[i] - sent[i]) / 1e6 for i in range(n) if sent[i] >= cut) or lats_all
    else:
        lats = lats_all
    last = max(done) if n else t_end
    elapsed = (last - t0) / 1e9
    nbytes = n * size
    res = {
        "records": n,
        "bytes": nbytes,
        "seconds": round(elapsed, 4),
        "mb_s": nbytes / MB / elapsed,
        "msgs_s": n / elapsed,
        "p50_ms": _pct(lats, 0.50),
        "p99_ms": _pct(lats, 0.99),
        "p999_ms": _pct(lats, 0.999),
        "max_ms": lats[-1] if lats else float("nan"),
        "latency_records": len(lats),
        # this benchmark process (Python + librdkafka threads): on 2 cores, a client near
        # 1.0 CPU-s per second of run is the bottleneck, not the broker
        "client_cpu_s": round((ct1.user + ct1.system) - (ct0.user + ct0.system), 3),
        "client_cores": ((ct1.user + ct1.system) - (ct0.user + ct0.system)) / max(elapsed, 1e-9),
        "p99_all_ms": _pct(lats_all, 0.99),
    }
    if cpu0 is not None and cpu1 is not None:
        res["broker_cpu_s"] = round(cpu1 - cpu0, 3)
        res["broker_cpu_s_per_gb"] = (cpu1 - cpu0) / (nbytes / GB)
    if rate is not None:
        res["target_msgs_s"] = rate
        res["target_mb_s"] = rate * size / MB
    return res


def consume_run(bootstrap: str, topic: str, partitions: int, expect: int, pid: int | None,
                timeout: float = 300.0) -> dict:
    c = ck.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    })
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        count = nbytes = 0
        cpu0 = cpu_seconds(pid)
        t0 = time.perf_counter()
        t_first = None
        deadline = t0 + timeout
        last_progress = t0
        while count < expect:
            msgs = c.consume(num_messages=10_000, timeout=1.0)
            tnow = time.perf_counter()
            if msgs and t_first is None:
                t_first = tnow
            for m in msgs:
                if m.error():
                    raise RuntimeError(f"consumer error: {m.error()}")
                count += 1
                nbytes += len(m.value())
            if msgs:
                last_progress = tnow
            elif tnow - last_progress > 30 or tnow > deadline:
                raise RuntimeError(f"consumer stalled at {count}/{expect} records")
        t_end = time.perf_counter()
        cpu1 = cpu_seconds(pid)
    finally:
        c.close()
    # headline: assign() -> last record (like kafka-consumer-perf-test); also from the first
    # returned batch on, which leaves out connect/ListOffsets/first fetch (meaningless on
    # tiny runs, where the client prefetches everything before the first batch returns)
    total = max(t_end - t0, 1e-9)
    after_first = max(t_end - (t_first or t0), 1e-9)
    res = {"records": count, "bytes": nbytes, "seconds": round(total, 4),
           "mb_s": nbytes / MB / total, "msgs_s": count / total,
           "seconds_after_first_batch": round(after_first, 4),
           "mb_s_after_first_batch": nbytes / MB / after_first}
    if cpu0 is not None and cpu1 is not None:
        res["broker_cpu_s"] = round(cpu1 - cpu0, 3)
        res["broker_cpu_s_per_gb"] = (cpu1 - cpu0) / (nbytes / GB)
    return res


def _median_summary(runs: list[dict], keys=("mb_s", "msgs_s", "p50_ms", "p99_ms", "p999_ms",
                                             "broker_cpu_s_per_gb", "client_cores")) -> dict:
    out = {}
    for k in keys:
        vals = [r[k] for r in runs if r.get(k) is not None]
        if vals:
            out[k] = statistics.median(vals)
    out["runs"] = runs
    return out


# =========================================================================== one target
def bench_target(t: Target, args) -> dict:
    res: dict = {"target": t.name, "version": t.version,
                 "loadavg_before": os.getloadavg()}  # other work on this 2-core box skews figures
    t0 = time.monotonic()
    t.start()
    res["startup_s"] = round(time.monotonic() - t0, 2)
    res["bootstrap"] = t.bootstrap
    res["pid"] = t.pid
    try:
        time.sleep(args.settle)
        res["rss_start_mb"] = rss_mb(t.pid)
        log(f"{t.name}: ready in {res['startup_s']} s, RSS {_f(res['rss_start_mb'])} MB")
        tag = uuid.uuid4().hex[:6]
        n = max(1, int(args.mb * MB) // args.record_size)

        if "idle" in args.phases and args.idle_partitions:
            rss0 = rss_mb(t.pid)
            secs = create_topic(t.bootstrap, f"bench-idle-{tag}", args.idle_partitions)
            time.sleep(args.settle)
            rss1 = rss_mb(t.pid)
            res["idle"] = {"partitions": args.idle_partitions, "create_s": round(secs, 2),
                           "rss_before_mb": rss0, "rss_after_mb": rss1,
                           "cpu_s_total": cpu_seconds(t.pid)}
            log(f"{t.name}: idle topic with {args.idle_partitions} partitions created in "
                f"{secs:.2f} s; RSS {_f(rss0)} -> {_f(rss1)} MB")

        produced_topics: dict[str, list[str]] = {}
        if args.warmup_mb and ({"produce", "rate", "consume"} & args.phases):
            topic = f"bench-{tag}-warmup"
            create_topic(t.bootstrap, topic, args.partitions)
            nw = max(1, int(args.warmup_mb * MB) // args.record_size)
            log(f"{t.name}: warm-up (not measured): {nw} records into {topic}")
            for acks in args.acks:
                produce_run(t.bootstrap, topic, nw, args.record_size, acks, args.linger_ms, None,
                            timeout=args.timeout, queue_kb=args.queue_kb)
            consume_run(t.bootstrap, topic, args.partitions, nw * len(args.acks), None,
                        timeout=args.timeout)

        if "produce" in args.phases:
            res["produce"] = {}
            for acks in args.acks:
                runs = []
                for r in range(args.runs):
                    topic = f"bench-{tag}-acks{acks}-r{r}"
                    create_topic(t.bootstrap, topic, args.partitions)
                    log(f"{t.name}: produce acks={acks} run {r + 1}/{args.runs}: "
                        f"{n} x {args.record_size} B into {topic} ({args.partitions} partitions)")
                    run = produce_run(t.bootstrap, topic, n, args.record_size, acks,
                                      args.linger_ms, t.pid, timeout=args.timeout,
                                      queue_kb=args.queue_kb)
                    runs.append(run)
                    produced_topics.setdefault(acks, []).append(topic)
                    log(f"{t.name}:   {run['mb_s']:.1f} MB/s  {run['msgs_s']:.0f} msg/s  "
                        f"p50 {run['p50_ms']:.2f} ms  p99 {run['p99_ms']:.2f} ms  "
                        f"broker CPU {_f(run.get('broker_cpu_s_per_gb'))} s/GB  "
                        f"(broker {_f(run.get('broker_cpu_s'), 2)} s, client "
                        f"{run['client_cpu_s']:.2f} s CPU in {run['seconds']:.2f} s)")
                res["produce"][f"acks={acks}"] = _median_summary(runs)
            res["rss_after_produce_mb"] = rss_mb(t.pid)

        if "rate" in args.phases and ("produce" in res or args.rate_mb):
            res["rate_limited"] = {}
            for acks in args.acks:
                if args.rate_mb:
                    rate = args.rate_mb * MB / args.record_size
                else:
                    rate = res["produce"][f"acks={acks}"]["msgs_s"] * args.rate_fraction
                n_rate = max(1, int(rate * (args.rate_seconds + args.rate_skip)))
                runs = []
                for r in range(args.rate_runs):
                    topic = f"bench-{tag}-rate-acks{acks}-r{r}"
                    create_topic(t.bootstrap, topic, args.partitions)
                    log(f"{t.name}: rate-limited acks={acks} run {r + 1}/{args.rate_runs}: "
                        f"{rate * args.record_size / MB:.1f} MB/s ({rate:.0f} msg/s) for "
                        f"{args.rate_seconds} s (+{args.rate_skip} s start-up, not in percentiles)")
                    run = produce_run(t.bootstrap, topic, n_rate, args.record_size, acks,
                                      args.linger_ms, t.pid, rate=rate, timeout=args.timeout,
                                      queue_kb=args.queue_kb, skip_s=args.rate_skip)
                    runs.append(run)
                    log(f"{t.name}:   achieved {run['mb_s']:.1f} MB/s  p50 {run['p50_ms']:.2f} ms  "
                        f"p99 {run['p99_ms']:.2f} ms  p99.9 {run['p999_ms']:.2f} ms")
                summ = _median_summary(runs)
                summ["target_mb_s"] = rate * args.record_size / MB
                res["rate_limited"][f"acks={acks}"] = summ

        if "consume" in args.phases:
            topics = produced_topics.get(args.acks[-1]) or produced_topics.get(args.acks[0])
            if not topics:  # consume-only: produce one topic first (not measured)
                topic = f"bench-{tag}-consume"
                create_topic(t.bootstrap, topic, args.partitions)
                log(f"{t.name}: filling {topic} for the consume phase")
                produce_run(t.bootstrap, topic, n, args.record_size, "1", args.linger_ms, None,
                            timeout=args.timeout, queue_kb=args.queue_kb)
                topics = [topic]
            runs = []
            for r in range(args.runs):
                topic = topics[r % len(topics)]
                log(f"{t.name}: consume run {r + 1}/{args.runs}: {n} records from {topic}")
                run = consume_run(t.bootstrap, topic, args.partitions, n, t.pid, timeout=args.timeout)
                runs.append(run)
                log(f"{t.name}:   {run['mb_s']:.1f} MB/s  {run['msgs_s']:.0f} msg/s  "
                    f"CPU {_f(run.get('broker_cpu_s_per_gb'))} s/GB")
            res["consume"] = _median_summary(runs, keys=("mb_s", "msgs_s", "broker_cpu_s_per_gb"))

        res["rss_end_mb"] = rss_mb(t.pid)
        res["rss_peak_mb"] = rss_mb(t.pid, "VmHWM")
        res["cpu_s_total"] = cpu_seconds(t.pid)
        res["loadavg_after"] = os.getloadavg()
    finally:
        if not isinstance(t, ExternalTarget):
            log(f"{t.name}: stopping (pid {t.pid})")
        t.stop()
    return res


# =========================================================================== report
def _f(v, nd=1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.{nd}f}" if abs(v) < 1e5 else f"{v:.3g}"
    return str(v)


def metric_rows(res: dict, acks_list: list[str]) -> list[tuple[str, object, bool]]:
    """(label, value, higher_is_better)"""
    rows: list[tuple[str, object, bool]] = [
        ("startup s", res.get("startup_s"), False),
        ("RSS at start MB", res.get("rss_start_mb"), False),
    ]
    for acks in acks_list:
        p = res.get("produce", {}).get(f"acks={acks}", {})
        rows += [
            (f"produce acks={acks} MB/s", p.get("mb_s"), True),
            (f"produce acks={acks} msg/s", p.get("msgs_s"), True),
            (f"produce acks={acks} p50 ms", p.get("p50_ms"), False),
            (f"produce acks={acks} p99 ms", p.get("p99_ms"), False),
            (f"produce acks={acks} broker CPU s/GB", p.get("broker_cpu_s_per_gb"), False),
            (f"produce acks={acks} client CPU cores", p.get("client_cores"), False),
        ]
    for acks in acks_list:
        p = res.get("rate_limited", {}).get(f"acks={acks}", {})
        rows += [
            (f"paced acks={acks} target MB/s", p.get("target_mb_s"), True),
            (f"paced acks={acks} p50 ms", p.get("p50_ms"), False),
            (f"paced acks={acks} p99 ms", p.get("p99_ms"), False),
            (f"paced acks={acks} broker CPU s/GB", p.get("broker_cpu_s_per_gb"), False),
        ]
    c = res.get("consume", {})
    rows += [
        ("consume MB/s", c.get("mb_s"), True),
        ("consume broker CPU s/GB", c.get("broker_cpu_s_per_gb"), False),
        ("RSS after produce MB", res.get("rss_after_produce_mb"), False),
        ("RSS peak (VmHWM) MB", res.get("rss_peak_mb"), False),
    ]
    idle = res.get("idle")
    if idle:
        rows += [
            (f"idle: create {idle['partitions']} partitions s", idle.get("create_s"), False),
            ("idle: RSS before MB", idle.get("rss_before_mb"), False),
            (f"idle: RSS with {idle['partitions']} partitions MB", idle.get("rss_after_mb"), False),
        ]
    return [r for r in rows if r[1] is not None]


def ratio_table(rows: dict[str, list[tuple]], digits: int = 1) -> tuple[list[str], dict]:
    """Aligned text rows of metric x target (``rows``: target -> [(label, value, ...)]) with an
    ours/kafka column when both are there; also the ratios by label."""
    labels: list[str] = []
    table: dict[str, dict[str, object]] = {}
    for n, metrics in rows.items():
        for label, val, *_ in metrics:
            if label not in table:
                labels.append(label)
                table[label] = {}
            table[label][n] = val
    ratios = {}
    show_ratio = "ours" in rows and "kafka" in rows
    header = ["metric", *rows] + (["ours/kafka"] if show_ratio else [])
    lines = []
    for label in labels:
        row = [label] + [_f(table[label].get(n), digits) for n in rows]
        if show_ratio:
            a, b = table[label].get("ours"), table[label].get("kafka")
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
                ratios[label] = a / b
                row.append(f"{a / b:.2f}")
            else:
                row.append("-")
        lines.append(row)
    if not lines:
        return [], ratios
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]

    def fmt(row):
        return "  ".join((str(c).ljust(w) if i == 0 else str(c).rjust(w))
                         for i, (c, w) in enumerate(zip(row, widths)))
    return [fmt(header), "  ".join("-" * w for w in widths), *map(fmt, lines)], ratios


def failures(results: dict, names: list[str]) -> list[str]:
    return [f"{n}: FAILED: {results[n]['error']}" for n in names if "error" in results[n]]


def render(results: dict, acks_list: list[str]) -> tuple[str, dict]:
    names = [n for n in ("ours", "kafka", "external") if n in results]
    ok = {n: results[n] for n in names if "error" not in results[n]}
    out, ratios = ratio_table({n: metric_rows(r, acks_list) for n, r in ok.items()})
    return "\n".join(out + failures(results, names)), ratios


# =========================================================================== main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="benchmark an already running broker at HOST:PORT")
    ap.add_argument("--broker-pid", type=int, help="with --bootstrap: broker pid for CPU/RSS")
    ap.add_argument("--target", choices=["ours", "kafka", "both"], default="both")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 8 MB per run, 1 run, 2 s rate phase")
    ap.add_argument("--mb", type=float, default=None, help="MB produced per run (default 256)")
    ap.add_argument("--runs", type=int, default=None, help="runs per acks setting (default 3)")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=6, help="partitions of the bench topics")
    ap.add_argument("--acks", default="1,all", help="comma list, in order (default 1,all)")
    ap.add_argument("--queue-kb", type=int, default=32768,
                    help="producer queue.buffering.max.kbytes (default 32 MB, like Java's buffer.memory)")
    ap.add_argument("--warmup-mb", type=float, default=None,
                    help="unmeasured warm-up per acks setting before the runs, lets the JVM's JIT settle "
                         "(default 256; quick 4)")
    ap.add_argument("--rate-fraction", type=float, default=0.5)
    ap.add_argument("--rate-mb", type=float, default=None,
                    help="rate phase at this fixed MB/s instead of a fraction of the measured max "
                         "(use it to compare latency at the same load on both targets)")
    ap.add_argument("--rate-seconds", type=float, default=None, help="rate phase length (default 10)")
    ap.add_argument("--rate-skip", type=float, default=None,
                    help="rate phase: seconds of start-up left out of the percentiles (default 1; quick 0.5)")
    ap.add_argument("--rate-runs", type=int, default=None, help="runs in the rate phase (default = --runs)")
    ap.add_argument("--phases", default="produce,rate,consume",
                    help="comma list of idle,produce,rate,consume")
    ap.add_argument("--idle-partitions", type=int, default=0,
                    help="also run the idle phase: one topic with N partitions, report RSS")
    ap.add_argument("--settle", type=float, default=None, help="seconds to settle before RSS reads (default 3)")
    ap.add_argument("--timeout", type=float, default=600.0, help="per produce/consume run")
    ap.add_argument("--start-timeout", type=float, default=120.0)
    ap.add_argument("--python", default=sys.executable, help="interpreter for `python -m broker`")
    ap.add_argument("--ours-override", action="append", default=[], metavar="KEY=VALUE",
                    help="extra --override for our broker (repeatable)")
    ap.add_argument("--kafka-heap", default=kraft.DEFAULT_HEAP, help="KAFKA_HEAP_OPTS for Apache Kafka")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' temp dirs")
    ap.add_argument("--json", default=None,
                    help="output file (default bench/results/produce_bench-<targets>-<time>.json)")
    args = ap.parse_args(argv)
    args.acks = [a.strip() for a in args.acks.split(",") if a.strip()]
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if args.idle_partitions:
        args.phases.add("idle")
    q = args.quick
    args.mb = args.mb if args.mb is not None else (8 if q else 256)
    args.runs = args.runs if args.runs is not None else (1 if q else 3)
    args.rate_runs = args.rate_runs if args.rate_runs is not None else args.runs
    args.rate_seconds = args.rate_seconds if args.rate_seconds is not None else (2 if q else 10)
    args.rate_skip = args.rate_skip if args.rate_skip is not None else (0.5 if q else 1.0)
    args.warmup_mb = args.warmup_mb if args.warmup_mb is not None else (4 if q else 256)
    args.settle = args.settle if args.settle is not None else (1 if q else 3)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.bootstrap:
        targets: list[Target] = [ExternalTarget(args.bootstrap, args.broker_pid)]
    else:
        targets = []
        if args.target in ("ours", "both"):
            targets.append(OursTarget(args.python, args.ours_override, args.start_timeout, args.keep))
        if args.target in ("kafka", "both"):
            targets.append(KafkaTarget(args.kafka_heap, args.start_timeout, args.keep))

    results: dict[str, dict] = {}
    for t in targets:
        log(f"=== {t.name} ===")
        try:
            results[t.name] = bench_target(t, args)
        except Exception as e:  # noqa: BLE001  (a failing target must not hide the other one)
            log(f"{t.name}: FAILED: {type(e).__name__}: {e}")
            results[t.name] = {"target": t.name, "error": f"{type(e).__name__}: {e}"}

    table, ratios = render(results, args.acks)
    print(table, flush=True)
    doc = {
        "meta": {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                     "python": platform.python_version(), "kernel": platform.release()},
            "client": {"confluent_kafka": ck.version()[0], "librdkafka": ck.libversion()[0]},
            "params": {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()},
            "units": "MB = 1e6 bytes, GB = 1e9 bytes; latency = delivery callback - produce() call; "
                     "CPU = broker utime+stime (process tree) per GB of record values",
        },
        "results": results,
        "ratios_ours_over_kafka": ratios,
    }
    path = Path(args.json) if args.json else (
        REPO / "bench" / "results" /
        f"produce_bench-{'-'.join(results) or 'none'}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    log(f"wrote {path}")
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
