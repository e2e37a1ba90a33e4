"""Many clients on one broker: memory per idle connection and per transactional producer, ours
vs Apache Kafka 4.3.1, same script, same run.

    python bench/clients_bench.py                          # 2000 connections, 500 producers, both
    python bench/clients_bench.py --target ours --quick    # 200 and 50 (a smoke run)

Phases, on a fresh single broker of each target:

- connections: ``--connections`` sockets, each with one ApiVersions answered, then left idle;
  reported: memory per connection and the broker's CPU while they idle (``--idle-seconds``).
- producers (on a broker started afresh, so that memory the first phase freed does not hide
  what this one takes): ``--producers`` transactional ids, each InitProducerId, AddPartitionsToTxn and one
  transactional record (an open transaction), over ``--producer-connections`` connections;
  reported: memory per producer with its transaction open, then again after every one is
  committed (the transactional id and producer state that stay).

Memory is the broker process's resident set for ours; for Kafka, whose heap is reserved up front
(``-Xms``), it is the heap in use after a full GC (``jcmd GC.run`` / ``GC.heap_info``), so both
figures are what the broker keeps for the clients. Output: a table and JSON in
``bench/results/clients_bench-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import produce_bench as pb  # noqa: E402  (after the sys.path insert)

sys.path.insert(0, str(pb.REPO))
from protocol import records as rb  # noqa: E402
from tests.support.raw import RawClient, produce_request  # noqa: E402

API_VERSIONS = {"client_software_name": "clients-bench", "client_software_version": "1"}


def memory_mb(t: pb.Target) -> float:
    """What the broker keeps: ours its RSS, Kafka its heap in use after a full GC."""
    if isinstance(t, pb.KafkaTarget):
        subprocess.run(["jcmd", str(t.pid), "GC.run"], capture_output=True, timeout=60, check=False)
        out = subprocess.run(["jcmd", str(t.pid), "GC.heap_info"], capture_output=True, text=True,
                             timeout=60, check=False).stdout
        m = re.search(r"used (\d+)K", out)
        if not m:
            raise RuntimeError(f"no heap figure in jcmd's answer: {out[:200]!r}")
        return int(m.group(1)) / 1024
    time.sleep(1)
    return pb.rss_mb(t.pid)


def connections_phase(t: pb.Target, n: int, idle_s: float) -> dict:
    before = memory_mb(t)
    clients = []
    try:
        for i in range(n):
            c = RawClient(t.bootstrap, timeout=30)
            assert c.call(18, 3, API_VERSIONS).error_code == 0
            clients.append(c)
            if (i + 1) % 500 == 0:
                pb.log(f"{t.name}:   {i + 1} connections")
        after = memory_mb(t)
        cpu0 = pb.cpu_seconds(t.pid)
        time.sleep(idle_s)
        idle_cores = (pb.cpu_seconds(t.pid) - cpu0) / idle_s
    finally:
        for c in clients:
            c.close()
    kb = (after - before) * 1024 / n
    pb.log(f"{t.name}: {n} idle connections: {kb:.1f} KB each, {idle_cores:.3f} cores idle")
    return {"connections": n, "kb_per_connection": kb, "idle_cores": idle_cores,
            "memory_before_mb": before, "memory_after_mb": after}


def _transactional_batch(producer_id: int, epoch: int) -> bytes:
    return bytes(rb.build_batch([(b"k", b"v" * 100)], timestamp=int(time.time() * 1000), producer_id=producer_id,
                                producer_epoch=epoch, base_sequence=0, transactional=True))


RETRIABLE = {14, 15, 16, 51}  # COORDINATOR_LOAD_IN_PROGRESS / _NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS


def _init_producer_id(c: RawClient, tid: str, timeout: float = 60.0) -> tuple[int, int]:
    """FindCoordinator (the first one creates the transaction state topic), then InitProducerId."""
    deadline = time.monotonic() + timeout
    while True:
        found = c.call(10, 4, {"key_type": 1, "coordinator_keys": [tid]}).coordinators[0]
        r = None
        if found.error_code == 0:
            r = c.call(22, 4, {"transactional_id": tid, "transaction_timeout": 600_000,
                               "producer_id": -1, "producer_epoch": -1})
            if r.error_code == 0:
                return r.producer_id, r.producer_epoch
        code = found.error_code or r.error_code
        if code not in RETRIABLE or time.monotonic() > deadline:
            raise RuntimeError(f"no producer id for {tid}: error {int(code)}")
        time.sleep(0.2)


def producers_phase(t: pb.Target, n: int, n_conns: int, partitions: int) -> dict:
    topic = f"clients-{uuid.uuid4().hex[:8]}"
    pb.create_topic(t.bootstrap, topic, partitions)
    time.sleep(2)
    before = memory_mb(t)
    conns = [RawClient(t.bootstrap, timeout=60) for _ in range(n_conns)]
    ids = []
    try:
        for i in range(n):
            c = conns[i % n_conns]
            tid = f"bench-{uuid.uuid4().hex[:12]}"
            pid, epoch = _init_producer_id(c, tid)
            r = c.call(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                               "v3_and_below_producer_epoch": epoch,
                               "v3_and_below_topics": [{"name": topic, "partitions": [i % partitions]}]})
            assert all(p.partition_error_code == 0 for res in r.results_by_topic_v3_and_below
                       for p in res.results_by_partition), r
            req = produce_request(topic, _transactional_batch(pid, epoch), acks=-1, partition=i % partitions)
            req = type(req)(transactional_id=tid, acks=req.acks, timeout=req.timeout, topic_data=req.topic_data)
            r = c.request(0, 9, req)
            assert r.responses[0].partition_responses[0].error_code == 0, r
            ids.append((c, tid, pid, epoch))
            if (i + 1) % 100 == 0:
                pb.log(f"{t.name}:   {i + 1} open transactions")
        open_mb = memory_mb(t)
        for c, tid, pid, epoch in ids:
            r = c.call(26, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                               "committed": True})
            assert r.error_code == 0, r
        time.sleep(3)  # the markers are written
        done_mb = memory_mb(t)
    finally:
        for c in conns:
            c.close()
    open_kb, done_kb = (open_mb - before) * 1024 / n, (done_mb - before) * 1024 / n
    pb.log(f"{t.name}: {n} producers: {open_kb:.1f} KB each with a transaction open, {done_kb:.1f} KB after commit")
    return {"producers": n, "kb_per_open_producer": open_kb, "kb_per_committed_producer": done_kb,
            "memory_before_mb": before, "memory_open_mb": open_mb, "memory_committed_mb": done_mb}


def bench(t: pb.Target, args) -> dict:
    """Each phase on a freshly started broker: memory one phase freed would hide the next's."""
    out = {"target": t.name, "version": t.version}
    for phase, run in (("connections", lambda: connections_phase(t, args.connections, args.idle_seconds)),
                       ("producers", lambda: producers_phase(t, args.producers, args.producer_connections,
                                                             args.partitions))):
        t.start()
        try:
            time.sleep(3)
            out[phase] = run()
        finally:
            t.stop()
    return out


ROWS = [
    ("memory per idle connection (KB)", ("connections", "kb_per_connection")),
    ("CPU with the connections idle (cores)", ("connections", "idle_cores")),
    ("memory per producer, transaction open (KB)", ("producers", "kb_per_open_producer")),
    ("memory per producer, committed (KB)", ("producers", "kb_per_committed_producer")),
]


def render(results: dict) -> str:
    def get(name, path):
        v = results.get(name, {})
        for k in path:
            v = v.get(k, {}) if isinstance(v, dict) else {}
        return v if isinstance(v, (int, float)) else None

    lines = ["| figure | ours | kafka | ours/kafka |", "|---|---|---|---|"]
    for label, path in ROWS:
        o, k = get("ours", path), get("kafka", path)
        ratio = f"{o / k:.2f}" if o is not None and k else "-"
        lines.append(f"| {label} | {'-' if o is None else f'{o:.3g}'} | {'-' if k is None else f'{k:.3g}'} | {ratio} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=["ours", "kafka", "both"], default="both")
    ap.add_argument("--quick", action="store_true", help="200 connections, 50 producers, 3 s idle")
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--producers", type=int, default=500)
    ap.add_argument("--producer-connections", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.quick:
        args.connections, args.producers, args.idle_seconds = 200, 50, 3.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the client side needs a descriptor each
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    results, failed = pb.bench_targets(args.target, bench, args)
    print(render(results))
    path = Path(args.json) if args.json else pb.REPO / "bench/results" / f"clients_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    pb.log(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
