"""Transactions and idempotence benchmark: our broker vs Apache Kafka, same script, same run.

    python bench/txn_bench.py --target both        # ours, then Kafka 4.3.1, with ratios
    python bench/txn_bench.py --target ours --quick

Phases:
  txn    one confluent-kafka transactional producer; each transaction = begin, 10 records of
         1 KB (acks=all), commit. Reported: txn/s, commit latency p50/p99 (commit_transaction()
         call to return) and whole-transaction latency, median of --runs runs.
  idem   plain vs idempotent produce at max rate (acks=all, linger.ms=5, 1 KB): MB/s of each
         and the idempotence cost (1 - idempotent/plain), median of --runs runs.
  java   the same transactions with Kafka's Java client (kafka-clients 4.3.1, the harness of
         compat/java_client), once with ``transaction.version`` finalized at 1 and once at 2
         (KIP-890 part 2: every commit bumps the epoch; no AddPartitionsToTxn), set through
         UpdateFeatures on both brokers: what transaction version 2 costs each.
Broker CPU-seconds per transaction come from /proc (see produce_bench.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import produce_bench as pb  # noqa: E402  (after the sys.path insert)


def txn_run(bootstrap: str, topic: str, n_txns: int, records_per_txn: int, size: int,
            pid: int | None) -> dict:
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                     "linger.ms": 0, "acks": "all", "compression.type": "none"})
    p.init_transactions(60)
    payload = b"x" * size
    # one unmeasured transaction: coordinator lookup, connections
    p.begin_transaction()
    p.produce(topic, payload)
    p.commit_transaction(60)
    commits, totals = [], []
    cpu0 = pb.cpu_seconds(pid)
    t0 = time.perf_counter()
    for _ in range(n_txns):
        start = time.perf_counter()
        p.begin_transaction()
        for _ in range(records_per_txn):
            p.produce(topic, payload)
        c0 = time.perf_counter()
        p.commit_transaction(60)
        end = time.perf_counter()
        commits.append((end - c0) * 1000)
        totals.append((end - start) * 1000)
    elapsed = time.perf_counter() - t0
    cpu1 = pb.cpu_seconds(pid)
    commits.sort()
    totals.sort()
    res = {"txns": n_txns, "seconds": round(elapsed, 3), "txn_s": n_txns / elapsed,
           "commit_p50_ms": pb._pct(commits, 0.5), "commit_p99_ms": pb._pct(commits, 0.99),
           "txn_p50_ms": pb._pct(totals, 0.5), "txn_p99_ms": pb._pct(totals, 0.99)}
    if cpu0 is not None and cpu1 is not None:
        res["broker_cpu_ms_per_txn"] = (cpu1 - cpu0) * 1000 / n_txns
    return res


def set_transaction_version(bootstrap: str, level: int) -> None:
    """Finalize ``transaction.version`` at ``level`` (UpdateFeatures, as kafka-features does)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.raw import finalize_feature

    finalize_feature(bootstrap, "transaction.version", level)
    time.sleep(1)  # every broker's (and the client's next) ApiVersions answers it


def java_txn_run(bootstrap: str, topic: str, n_txns: int, records_per_txn: int, size: int,
                 pid: int | None) -> dict:
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from compat.java_client import runner as java

    java.prepare()
    out = java._build_dir()
    classpath = ":".join([str(out / "java-client-compat-1.0.jar"), str(out / "deps" / "*")])
    cpu0 = pb.cpu_seconds(pid)
    res = subprocess.run(["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
                          "kbroker.compat.TxnBench", bootstrap, topic, str(n_txns), str(records_per_txn), str(size)],
                         capture_output=True, text=True, timeout=1800, check=True)
    cpu1 = pb.cpu_seconds(pid)
    r = json.loads(res.stdout.strip().splitlines()[-1])
    if cpu0 is not None and cpu1 is not None:
        r["broker_cpu_ms_per_txn"] = (cpu1 - cpu0) * 1000 / n_txns
    return r


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _txn_runs(t: pb.Target, args, label: str, run) -> dict:
    """``args.runs`` runs of ``run`` on fresh topics: the medians, and every run."""
    runs = []
    for i in range(args.runs):
        topic = f"{label.replace(' ', '-').lower()}-bench-{i}-{uuid.uuid4().hex[:6]}"
        pb.create_topic(t.bootstrap, topic, args.partitions)
        r = run(t.bootstrap, topic, args.txns, 10, 1024, t.pid)
        pb.log(f"{t.name}: {label} run {i + 1}/{args.runs}: {r['txn_s']:.0f} txn/s, commit p50 "
               f"{r['commit_p50_ms']:.2f} ms p99 {r['commit_p99_ms']:.2f} ms")
        runs.append(r)
    medians = {k: _median(runs, k) for k in runs[0] if k not in ("txns", "seconds")}
    return {**medians, "runs": runs}


def bench(t: pb.Target, args) -> dict:
    out: dict = {"target": t.name}
    t.start()
    try:
        if "txn" in args.phases:
            out["txn"] = _txn_runs(t, args, "txn", txn_run)
        if "java" in args.phases:
            for level in (1, 2):
                set_transaction_version(t.bootstrap, level)
                out[f"java_tv{level}"] = _txn_runs(t, args, f"java TV{level}", java_txn_run)
        if "idem" in args.phases:
            n = int(args.mb * pb.MB / 1024)
            runs: dict[bool, list] = {False: [], True: []}
            # Alternate plain and idempotent runs: page-cache writeback slows later runs, and
            # must not be charged to one mode.
            for i in range(args.runs):
                for idem in ((False, True) if i % 2 == 0 else (True, False)):
                    topic = f"idem-bench-{int(idem)}-{i}-{uuid.uuid4().hex[:6]}"
                    pb.create_topic(t.bootstrap, topic, args.partitions)
                    r = pb.produce_run(t.bootstrap, topic, n, 1024, "all", 5, t.pid, idempotence=idem)
                    pb.log(f"{t.name}: {'idempotent' if idem else 'plain'} run {i + 1}/{args.runs}: "
                           f"{r['mb_s']:.1f} MB/s")
                    runs[idem].append(r)
            res = {("idempotent" if idem else "plain"): {"mb_s": _median(rs, "mb_s"), "runs": rs}
                   for idem, rs in runs.items()}
            res["idempotence_cost"] = 1 - res["idempotent"]["mb_s"] / res["plain"]["mb_s"]
            out["idem"] = res
    finally:
        t.stop()
    return out


ROWS = [("txn/s", ("txn", "txn_s")), ("commit p50 ms", ("txn", "commit_p50_ms")),
        ("commit p99 ms", ("txn", "commit_p99_ms")), ("txn p50 ms", ("txn", "txn_p50_ms")),
        ("txn p99 ms", ("txn", "txn_p99_ms")), ("broker CPU ms/txn", ("txn", "broker_cpu_ms_per_txn")),
        *[(f"Java TV{v} {label}", (f"java_tv{v}", key)) for v in (1, 2)
          for label, key in (("txn/s", "txn_s"), ("commit p50 ms", "commit_p50_ms"),
                             ("commit p99 ms", "commit_p99_ms"), ("broker CPU ms/txn", "broker_cpu_ms_per_txn"))],
        ("plain MB/s (acks=all)", ("idem", "plain", "mb_s")),
        ("idempotent MB/s (acks=all)", ("idem", "idempotent", "mb_s")),
        ("idempotence cost", ("idem", "idempotence_cost"))]


def _get(d: dict, path: tuple):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def render(results: dict) -> str:
    names = list(results)
    lines = [f"{'metric':28}" + "".join(f"{n:>10}" for n in names)
             + ("  ours/kafka" if {"ours", "kafka"} <= set(names) else "")]
    for label, path in ROWS:
        vals = [_get(results[n], path) for n in names]
        if all(v is None for v in vals):
            continue
        row = f"{label:28}" + "".join(f"{v:>10.3f}" if isinstance(v, float) and v < 1 else
                                      f"{v:>10.1f}" if isinstance(v, (int, float)) else f"{'-':>10}"
                                      for v in vals)
        if {"ours", "kafka"} <= set(names):
            o, k = _get(results["ours"], path), _get(results["kafka"], path)
            row += f"  {o / k:10.2f}" if o is not None and k else ""
        lines.append(row)
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=["ours", "kafka", "both"], default="both")
    ap.add_argument("--quick", action="store_true", help="smoke run: 50 txns, 16 MB, 1 run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--txns", type=int, default=1000)
    ap.add_argument("--mb", type=float, default=256)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--phases", default="txn,java,idem")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.txns, args.mb = 1, 50, 16
    args.phases = set(args.phases.split(","))
    results, failed = pb.bench_targets(args.target, bench, args)
    print(render(results))
    path = Path(args.json) if args.json else pb.REPO / "bench/results" / f"txn_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    pb.log(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
