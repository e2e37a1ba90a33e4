"""How long one broker holding many partitions with data takes to stop and to serve again:
kbroker vs Apache Kafka 4.3.1, each a single node, in the same run.

    python bench/recovery_bench.py --target both --partitions 10000 --records 20
    python bench/recovery_bench.py --target ours --partitions 3000      # no Java needed

For each target: ``--partitions`` partitions are created (topics of 1000) and ``--records``
records of 100 bytes are acknowledged on every partition. Then, twice:

- ``clean``: SIGTERM (a controlled shutdown); ``stop_s`` is how long the process took to exit.
- ``kill9``: SIGKILL right after more records were acknowledged, so that every partition has
  unflushed data to recover.

After each, the same node is started on the same data and two moments are taken from the start:
``answer_s`` (the port answers) and ``serving_s`` (one record acknowledged, acks=all, on every
partition). Every acknowledged record must still be there (the end offsets are summed); a
missing one fails the run.

- ours: ``kbroker.EmbeddedBroker`` (``python -m broker``, embedded single-node mode).
- kafka: ``compat/kafka/kraft.py``, one combined KRaft node, 1 GB heap, its defaults
  (``num.recovery.threads.per.data.dir=2``).

Output: a table on stdout (seconds, and ours/kafka), JSON in ``bench/results/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.produce_bench import write_results  # noqa: E402  (after the sys.path insert)

PER_TOPIC = 1000  # KRaft refuses a CreateTopics of more than 10000 records in one batch
VALUE = b"v" * 100
FIGURES = ("clean_stop_s", "clean_answer_s", "clean_serving_s", "kill9_answer_s", "kill9_serving_s")


def log(msg: str) -> None:
    print(f"[recovery_bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def layout(partitions: int) -> list[tuple[str, int]]:
    """(topic, partition) of every partition: topics of PER_TOPIC partitions."""
    return [(f"recovery-bench-{n // PER_TOPIC:03d}", n % PER_TOPIC) for n in range(partitions)]


def create_topics(bootstrap: str, tps: list[tuple[str, int]]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    counts = Counter(topic for topic, _ in tps)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic, n in counts.items():  # one request each: KRaft's 10000-record bound is per request
        admin.create_topics([NewTopic(topic, n, 1)], operation_timeout=300)[topic].result(600)
    deadline = time.monotonic() + 600
    while not _all_led(admin, counts):  # a producer told UNKNOWN_TOPIC_OR_PART gives up
        if time.monotonic() > deadline:
            raise TimeoutError("the new partitions have no leader after 600 s")
        time.sleep(1)


def _all_led(admin, counts: dict[str, int]) -> bool:
    topics = admin.list_topics(timeout=60).topics
    return all(t in topics and len(topics[t].partitions) == n
               and all(p.leader >= 0 for p in topics[t].partitions.values()) for t, n in counts.items())


def produce_everywhere(bootstrap: str, tps: list[tuple[str, int]], records: int, timeout: float = 600) -> int:
    """``records`` records on each partition, acks=all; how many were acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "queue.buffering.max.messages": 2_000_000, "message.timeout.ms": int(timeout * 1000)})
    acked, errors = [0], Counter()

    def on_delivery(err, _msg):
        if err is None:
            acked[0] += 1
        else:
            errors[err.name()] += 1

    for _ in range(records):
        for topic, p in tps:
            producer.produce(topic, VALUE, partition=p, on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(timeout)
    if errors:
        log(f"  not acknowledged: {dict(errors)}")
    return acked[0]


def total_records(bootstrap: str, tps: list[tuple[str, int]]) -> int:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in tps},
                                request_timeout=120)
    return sum(f.result(180).offset for f in result.values())


def restarted(node, kill: bool, tps: list[tuple[str, int]]) -> dict[str, float]:
    t0 = time.monotonic()
    node.restart(kill=kill)
    answer = time.monotonic() - t0
    if produce_everywhere(node.bootstrap, tps, 1) != len(tps):
        raise RuntimeError("a partition did not acknowledge its record after the restart")
    return {"answer_s": answer, "serving_s": time.monotonic() - t0}


def run(node, partitions: int, records: int) -> dict[str, float]:
    tps = layout(partitions)
    t = time.monotonic()
    create_topics(node.bootstrap, tps)
    acked = produce_everywhere(node.bootstrap, tps, records)
    log(f"  {partitions} partitions created and {acked} records acknowledged in {time.monotonic() - t:.1f} s")
    t0 = time.monotonic()
    stop_pid(node)
    out = {"clean_stop_s": time.monotonic() - t0}
    out.update({f"clean_{k}": v for k, v in restarted(node, False, tps).items()})
    acked += partitions + produce_everywhere(node.bootstrap, tps, 1)
    out.update({f"kill9_{k}": v for k, v in restarted(node, True, tps).items()})
    acked += partitions
    found = total_records(node.bootstrap, tps)
    if found < acked:
        raise RuntimeError(f"{acked - found} acknowledged records are missing after the restarts")
    log(f"  {found} records after both restarts ({time.monotonic() - t0:.1f} s)")
    return out


def stop_pid(node) -> None:
    """SIGTERM, waiting for the exit; the restart then only starts the process again."""
    node.proc.terminate()
    node.proc.wait(300)


def run_ours(partitions: int, records: int) -> dict[str, float]:
    from kbroker import EmbeddedBroker

    with EmbeddedBroker(start_timeout=600) as b:
        return run(b, partitions, records)


def run_kafka(partitions: int, records: int) -> dict[str, float]:
    from compat.kafka.kraft import kraft_broker

    with kraft_broker(start_timeout=600, stop_timeout=300) as k:
        return run(k, partitions, records)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=("ours", "kafka", "both"), default="both")
    p.add_argument("--partitions", type=int, default=10000)
    p.add_argument("--records", type=int, default=20, help="records per partition before the restarts")
    p.add_argument("--json", help="where to write the JSON result")
    args = p.parse_args(argv)
    result: dict = {"partitions": args.partitions, "records_per_partition": args.records, "targets": {}}
    for name, fn in (("ours", run_ours), ("kafka", run_kafka)):
        if args.target in (name, "both"):
            log(f"{name}:")
            result["targets"][name] = fn(args.partitions, args.records)
            log("  " + ", ".join(f"{k} {v:.2f}" for k, v in result["targets"][name].items()))
    names = list(result["targets"])
    both = {"ours", "kafka"} <= set(names)
    print(f"{'seconds':<18}" + "".join(f"{n:>10}" for n in names) + (f"{'ours/kafka':>12}" if both else ""))
    for key in FIGURES:
        row = [result["targets"][n][key] for n in names]
        ratio = f"{row[0] / row[1]:>12.2f}" if both else ""
        print(f"{key:<18}" + "".join(f"{v:>10.2f}" for v in row) + ratio)
    log(f"wrote {write_results('recovery_bench', result, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
