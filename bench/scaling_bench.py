"""How the cluster's cost grows with its partition count, ours vs. Apache Kafka 4.3.1, three nodes each.

    python bench/scaling_bench.py                         # 60, 1000, 3000, 10000 partitions, both targets
    python bench/scaling_bench.py --sizes 60,1000,3000,10000 --target ours
    python bench/scaling_bench.py --quick                 # 60 and 300, short phases (a smoke run)

For each size, a fresh three-node cluster of each target (``bench/cluster_bench.py``'s: ours is
three ``python -m broker`` with an etcd member beside each, ``--etcd-members`` for another
count; Kafka three combined KRaft nodes), then:

- create: ``size`` partitions at replication factor 3, as topics of ``--per-topic`` partitions
  (CreateTopics in batches of 50 topics); reported: seconds until every partition has its
  leader and a full ISR ("ISR fill").
- idle: ``--idle-seconds`` with no client: the brokers' summed CPU (cores) and RSS (MB); for
  ours the etcd members' summed CPU on its own line.
- latency: one acks=all producer sends one 100-byte record every 5 ms to one partition for
  ``--latency-seconds``; p50 and p99 of the time from ``produce()`` to the acknowledgement, and
  the brokers' CPU meanwhile.
- restart: node 3 killed -9 and started again at once; seconds until it answers Metadata
  ("serving") and until it is back in every ISR.
- profile (``--profile-seconds N``, ours only, after the idle phase): ``bench/cpu_profile.py``'s
  py-spy flame graph of each broker, still idle, and the functions that held its CPU.

Output: a table on stdout, JSON in ``bench/results/scaling_bench-<time>.json`` and a PNG with
one panel per figure against the partition count (``bench/results/scaling_bench-<time>.png``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import cluster_bench as cb  # noqa: E402  (same directory: the two clusters)
import cpu_profile  # noqa: E402

log, cpu_seconds = cb.log, cb.cpu_seconds
AdminClient, ck = cb.AdminClient, cb.ck


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _metadata(bootstrap: str, timeout: float = 10.0):
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout)


def create(c: cb.Cluster, size: int, per_topic: int, timeout: float) -> tuple[list[str], float]:
    """``size`` partitions at RF 3; (topic names, seconds until every ISR is full)."""
    tag = uuid.uuid4().hex[:6]
    names = [f"scale-{tag}-{i:05d}" for i in range(max(1, size // per_topic))]
    t0 = time.monotonic()
    for i in range(0, len(names), 500):
        cb.create_many(c.bootstrap, names[i:i + 500], per_topic, 3, batch=50, timeout=120)
        if len(names) > 500:
            log(f"{c.name}:   {min(i + 500, len(names))} topics created")
    deadline = t0 + timeout
    while not cb.topics_complete(c.bootstrap, set(names), per_topic):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{c.name}: ISRs not full {timeout} s after creating {size} partitions")
        time.sleep(1)
    return names, time.monotonic() - t0


def idle(c: cb.Cluster, seconds: float) -> dict:
    pids = c.broker_pids()
    extra = c.extra_pids()
    cpu0 = {p: cpu_seconds(p) or 0.0 for p in [*pids.values(), *extra.values()]}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    used = {p: (cpu_seconds(p) or 0.0) - cpu0[p] for p in cpu0}
    return {"broker_cores": sum(used[p] for p in pids.values()) / elapsed,
            "other_cores": sum(used[p] for p in extra.values()) / elapsed,
            "rss_mb": sum(rss_mb(p) for p in pids.values())}


def latency(c: cb.Cluster, topic: str, seconds: float, interval_s: float = 0.005) -> dict:
    """One record every ``interval_s`` with acks=all; produce-to-ack latencies."""
    lat: list[float] = []
    errors = []
    p = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0,
                     "enable.idempotence": True})

    def delivered(err, _msg, sent):
        if err is None:
            lat.append(time.monotonic() - sent)
        else:
            errors.append(str(err))

    for _ in range(20):  # warm up: metadata and connections
        p.produce(topic, b"w" * 100, partition=0)
    p.flush(30)
    pids = c.broker_pids()
    cpu0 = sum(cpu_seconds(x) or 0.0 for x in pids.values())
    t0 = time.monotonic()
    next_at = t0
    while time.monotonic() - t0 < seconds:
        sent = time.monotonic()
        p.produce(topic, b"x" * 100, partition=0, on_delivery=lambda e, m, s=sent: delivered(e, m, s))
        p.poll(0)
        next_at += interval_s
        # poll() returns at the first delivery: wait out the whole slot, or a fast broker
        # (acks within the slot) is sent more than one record per interval.
        while (pause := next_at - time.monotonic()) > 0:
            p.poll(pause)
    p.flush(60)
    elapsed = time.monotonic() - t0
    cpu = sum(cpu_seconds(x) or 0.0 for x in pids.values()) - cpu0
    lat.sort()
    q = lambda f: 1000 * lat[min(len(lat) - 1, int(f * len(lat)))] if lat else None  # noqa: E731
    return {"records": len(lat), "errors": len(errors), "p50_ms": q(0.50), "p99_ms": q(0.99),
            "mean_ms": 1000 * statistics.fmean(lat) if lat else None, "broker_cores": cpu / elapsed}


def restart(c: cb.Cluster, names: list[str], per_topic: int, timeout: float) -> dict:
    node = 3
    c.kill9(node)
    t0 = time.monotonic()
    threading.Thread(target=c.restart, args=(node,), daemon=True).start()
    address = next(a for i, a in _addresses(c).items() if i == node)
    serving = None
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if serving is None:
            try:
                md = _metadata(address, 2)
                if node in md.brokers:
                    serving = time.monotonic() - t0
            except Exception:  # noqa: BLE001  (not up yet)
                pass
        if serving is not None:
            try:
                if cb.topics_complete(c.bootstrap, set(names), per_topic):
                    return {"serving_s": serving, "isr_full_s": time.monotonic() - t0}
            except Exception:  # noqa: BLE001
                pass
        time.sleep(0.5)
    return {"serving_s": serving, "isr_full_s": None}


def _addresses(c: cb.Cluster) -> dict[int, str]:
    if isinstance(c, cb.OursCluster):
        return {i: n.address for i, n in c.dc.nodes.items()}
    return {i: n.address for i, n in c.kc.nodes.items()}


def run_size(make, size: int, args) -> dict:
    c = make()
    c.start()
    try:
        log(f"{c.name}: {size} partitions")
        names, fill_s = create(c, size, args.per_topic, args.create_timeout)
        log(f"{c.name}:   ISRs full {fill_s:.1f} s after the first CreateTopics")
        time.sleep(args.settle_seconds)
        out = {"isr_fill_s": fill_s, "idle": idle(c, args.idle_seconds)}
        log(f"{c.name}:   idle {out['idle']['broker_cores']:.3f} cores (etcd {out['idle']['other_cores']:.3f}), "
            f"RSS {out['idle']['rss_mb']:.0f} MB")
        if args.profile_seconds and isinstance(c, cb.OursCluster):
            try:
                out["profile"] = profile_idle(c, size, args)
            except (RuntimeError, OSError) as exc:  # py-spy could not attach: the figures still count
                log(f"{c.name}:   profile failed: {exc}")
                out["profile"] = {"error": str(exc)}
        out["latency"] = latency(c, names[0], args.latency_seconds)
        log(f"{c.name}:   acks=all p50 {out['latency']['p50_ms']:.1f} ms, p99 {out['latency']['p99_ms']:.1f} ms")
        out["restart"] = restart(c, names, args.per_topic, args.restart_timeout)
        log(f"{c.name}:   restart: serving {out['restart']['serving_s']}, ISRs full {out['restart']['isr_full_s']}")
        return out
    finally:
        c.stop()


def profile_idle(c: cb.Cluster, size: int, args) -> dict:
    """py-spy of each broker for ``--profile-seconds``, the cluster still idle."""
    base = args.out_stem.with_name(f"{args.out_stem.name}-{size}-idle")
    pids = {f"node{node}": pid for node, pid in sorted(c.broker_pids().items())}
    summaries = cpu_profile.record(pids, args.profile_seconds, base, args.profile_rate)
    for name, summary in summaries.items():
        log(cpu_profile.render(f"{c.name}:   {name}", summary, rows=5))
    log(f"{c.name}:   flame graphs {base}-node*.svg")
    return summaries


FIGURES = [
    ("idle CPU, three brokers (cores)", lambda r: r["idle"]["broker_cores"]),
    ("idle CPU, etcd (cores)", lambda r: r["idle"]["other_cores"] if r["idle"]["other_cores"] else None),
    ("RSS, three brokers (MB)", lambda r: r["idle"]["rss_mb"]),
    ("acks=all p50 at 200 records/s (ms)", lambda r: r["latency"]["p50_ms"]),
    ("acks=all p99 at 200 records/s (ms)", lambda r: r["latency"]["p99_ms"]),
    ("ISR fill after creation (s)", lambda r: r["isr_fill_s"]),
    ("restart to all ISRs full (s)", lambda r: r["restart"]["isr_full_s"]),
]


def render(results: dict) -> str:
    sizes = sorted({int(s) for t in results.values() for s in t})
    rows = ["| figure | partitions | ours | kafka | ours/kafka |", "|---|---|---|---|---|"]
    for title, get in FIGURES:
        for size in sizes:
            vals = []
            for target in ("ours", "kafka"):
                r = results.get(target, {}).get(str(size))
                try:
                    vals.append(get(r) if r else None)
                except (KeyError, TypeError):
                    vals.append(None)
            ratio = vals[0] / vals[1] if None not in vals and vals[1] else None
            rows.append(f"| {title} | {size} | " + " | ".join("-" if v is None else f"{v:.3g}" for v in vals)
                        + f" | {'-' if ratio is None else f'{ratio:.2f}'} |")
    return "\n".join(rows)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(18, 8))
    for ax, (title, get) in zip(axes.flat, FIGURES):
        for target, style in (("ours", "o-"), ("kafka", "s--")):
            points = []
            for size, r in sorted(results.get(target, {}).items(), key=lambda kv: int(kv[0])):
                try:
                    v = get(r)
                except (KeyError, TypeError):
                    v = None
                if v is not None:
                    points.append((int(size), v))
            if points:
                ax.plot(*zip(*points), style, label="kbroker" if target == "ours" else "Kafka 4.3.1")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("partitions (RF 3)")
        ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(FIGURES):]:
        ax.axis("off")
    fig.suptitle("Three nodes, cost against partition count")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", choices=["ours", "kafka", "both"], default="both")
    ap.add_argument("--sizes", default="60,1000,3000,10000")
    ap.add_argument("--per-topic", type=int, default=10, help="partitions per topic")
    ap.add_argument("--quick", action="store_true", help="sizes 60 and 300, 5 s phases")
    ap.add_argument("--idle-seconds", type=float, default=20.0)
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    ap.add_argument("--settle-seconds", type=float, default=10.0)
    ap.add_argument("--create-timeout", type=float, default=900.0)
    ap.add_argument("--restart-timeout", type=float, default=600.0)
    # 10000 partitions need more than the cluster default's 512 MB per node.
    ap.add_argument("--kafka-heap", default="-Xmx1G -Xms1G")
    ap.add_argument("--etcd-members", type=int, default=None,
                    help="ours: etcd members, member i beside broker i (default: DevCluster's, one per node)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the clusters' temp dirs (logs, data)")
    ap.add_argument("--profile-seconds", type=float, default=0.0,
                    help="py-spy each of our brokers this long after the idle phase (0: no profile)")
    ap.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.idle_seconds, args.latency_seconds, args.settle_seconds = "60,300", 5.0, 5.0, 3.0
    targets = ["ours", "kafka"] if args.target == "both" else [args.target]
    results: dict = {t: {} for t in targets}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_json = Path(args.json) if args.json else REPO / "bench" / "results" / f"scaling_bench-{stamp}.json"
    args.out_stem = out_json.with_suffix("")
    for size in [int(s) for s in args.sizes.split(",")]:
        for target in targets:
            make = (lambda: cb.OursCluster(dict(cb.OURS_DEFAULT_OVERRIDES), args.keep, args.etcd_members)) \
                if target == "ours" else (lambda: cb.KafkaCluster(args.kafka_heap, args.keep))
            try:
                results[target][str(size)] = run_size(make, size, args)
            except Exception as exc:  # noqa: BLE001  (one size failing still reports the rest)
                log(f"{target}: {size} partitions failed: {exc!r}")
                results[target][str(size)] = {"error": repr(exc)}
            out_json.parent.mkdir(parents=True, exist_ok=True)
            out_json.write_text(json.dumps({"args": vars(args), "results": results}, indent=2, default=str))
    table = render(results)
    print(table)
    png = out_json.with_suffix(".png")
    plot(results, png)
    log(f"written {out_json} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
