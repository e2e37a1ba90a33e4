"""How long a topic set of many partitions takes to create, describe and delete: kbroker vs
Apache Kafka 4.3.1, each a single node, in the same run.

    python bench/topic_admin_bench.py --target both                      # 10000 partitions, 3 shapes
    python bench/topic_admin_bench.py --target ours --shapes 2000x5      # no Java needed

Each shape ``TxP`` is T topics of P partitions (replication factor 1), created through one
admin client in requests of at most 5000 partitions (KRaft refuses one request of more than
10000 metadata records), all in flight at once. Figures, in seconds from the first request:

- ``create_s``: every CreateTopics answered; ``led_s``: every partition has a leader in
  Metadata (Kafka answers CreateTopics before its broker has made the logs);
- ``describe_s``: one Metadata request for every topic;
- ``delete_s``: every DeleteTopics answered; ``gone_s``: no topic left in Metadata.

- ours: ``kbroker.EmbeddedBroker`` (``python -m broker``, embedded single-node mode).
- kafka: ``compat/kafka/kraft.py``, one combined KRaft node, its defaults.

Output: a table on stdout (seconds, and ours/kafka), JSON in ``bench/results/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.produce_bench import write_results  # noqa: E402  (after the sys.path insert)

PARTITIONS_PER_REQUEST = 5000
FIGURES = ("create_s", "led_s", "describe_s", "delete_s", "gone_s")
TIMEOUT = 600.0


def log(msg: str) -> None:
    print(f"[topic_admin_bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {TIMEOUT:.0f} s")
        time.sleep(0.1)


def run_shape(bootstrap: str, topics: int, partitions: int) -> dict[str, float]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"admin-bench-{topics}x{partitions}-{i:05d}" for i in range(topics)]
    per_request = max(1, PARTITIONS_PER_REQUEST // partitions)
    t0 = time.monotonic()
    futures = []
    for i in range(0, topics, per_request):
        futures += admin.create_topics([NewTopic(n, partitions, 1) for n in names[i:i + per_request]],
                                       operation_timeout=TIMEOUT, request_timeout=TIMEOUT).values()
    for f in futures:
        f.result(TIMEOUT)
    out = {"create_s": time.monotonic() - t0}

    def all_led() -> bool:
        listed = admin.list_topics(timeout=60).topics
        return all(n in listed and len(listed[n].partitions) == partitions
                   and all(p.leader >= 0 for p in listed[n].partitions.values()) for n in names)

    wait_until(all_led, "partitions without a leader")
    out["led_s"] = time.monotonic() - t0
    t1 = time.monotonic()
    admin.list_topics(timeout=60)
    out["describe_s"] = time.monotonic() - t1
    t2 = time.monotonic()
    futures = []
    for i in range(0, topics, per_request):
        futures += admin.delete_topics(names[i:i + per_request], operation_timeout=TIMEOUT,
                                       request_timeout=TIMEOUT).values()
    for f in futures:
        f.result(TIMEOUT)
    out["delete_s"] = time.monotonic() - t2
    wait_until(lambda: not set(names) & set(admin.list_topics(timeout=60).topics), "topics still listed")
    out["gone_s"] = time.monotonic() - t2
    return out


def run(bootstrap: str, shapes: list[tuple[int, int]]) -> dict[str, dict[str, float]]:
    results = {}
    for topics, partitions in shapes:
        key = f"{topics}x{partitions}"
        results[key] = run_shape(bootstrap, topics, partitions)
        log(f"  {key}: " + ", ".join(f"{k} {v:.2f}" for k, v in results[key].items()))
    return results


def run_ours(shapes):
    from kbroker import EmbeddedBroker

    with EmbeddedBroker(start_timeout=120) as b:
        return run(b.bootstrap, shapes)


def run_kafka(shapes):
    from compat.kafka.kraft import kraft_broker

    with kraft_broker(start_timeout=120, stop_timeout=300) as k:
        return run(k.bootstrap, shapes)


def parse_shapes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(n) for n in s.split("x")) for s in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=("ours", "kafka", "both"), default="both")
    p.add_argument("--shapes", type=parse_shapes, default=parse_shapes("10x1000,1000x10,10000x1"),
                   help="comma-separated TOPICSxPARTITIONS (default 10x1000,1000x10,10000x1)")
    p.add_argument("--json", help="where to write the JSON result")
    args = p.parse_args(argv)
    result: dict = {"shapes": [f"{t}x{n}" for t, n in args.shapes], "targets": {}}
    for name, fn in (("ours", run_ours), ("kafka", run_kafka)):
        if args.target in (name, "both"):
            log(f"{name}:")
            result["targets"][name] = fn(args.shapes)
    names = list(result["targets"])
    both = {"ours", "kafka"} <= set(names)
    print(f"{'shape':<10}{'seconds':<12}" + "".join(f"{n:>10}" for n in names) + (f"{'ours/kafka':>12}" if both else ""))
    for shape in result["shapes"]:
        for key in FIGURES:
            row = [result["targets"][n][shape][key] for n in names]
            ratio = f"{row[0] / row[1]:>12.2f}" if both and row[1] else ""
            print(f"{shape:<10}{key:<12}" + "".join(f"{v:>10.2f}" for v in row) + ratio)
    log(f"wrote {write_results('topic_admin_bench', result, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
