"""How fast a test gets a broker: kbroker's ``EmbeddedBroker`` vs Apache Kafka 4.3.1 (and, where
Docker holds the image, the container testcontainers would start).

    python bench/startup_bench.py --target both --runs 5
    python bench/startup_bench.py --target ours --runs 3      # no Java needed

For each run a fresh broker with an empty data directory is started and two moments are taken
from the start call: the first answered Metadata (what a test fixture waits for) and the first
record acknowledged on a new topic (auto-created, acks=all, confluent-kafka). Then it is
stopped, and the time to stop is taken too.

- ours: ``kbroker.EmbeddedBroker`` (``python -m broker`` from kbroker's packages).
- kafka: Apache Kafka 4.3.1 as one KRaft node, ``compat/kafka/kraft.py`` (``kafka-storage
  format`` then ``kafka.Kafka``, 1 GB heap), as a JVM-based fixture starts it.
- container: ``apache/kafka:4.3.1`` through ``docker run`` (what testcontainers' KafkaContainer
  does), only when the Docker daemon answers and already holds the image; otherwise the report
  says why it is missing.

Output: a table on stdout (median of the runs, and ours/kafka), JSON in
``bench/results/startup_bench-<time>.json``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.produce_bench import write_results  # noqa: E402  (after the sys.path insert)
from kbroker import EmbeddedBroker  # noqa: E402
from kbroker.process import free_port  # noqa: E402
from kbroker.wire import metadata_broker_ids  # noqa: E402

IMAGE = "apache/kafka:4.3.1"


def log(msg: str) -> None:
    print(f"[startup_bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def first_ack(bootstrap: str, t0: float) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000})
    acked: list[float] = []
    producer.produce(f"startup-{int(t0 * 1000)}", b"v",
                     on_delivery=lambda err, _m: acked.append(time.monotonic()) if err is None else None)
    producer.flush(60)
    if not acked:
        raise RuntimeError(f"no acknowledgement from {bootstrap}")
    return acked[0] - t0


def timed(start, bootstrap_of, stop) -> dict[str, float]:
    """``start()`` a broker, take the two moments, ``stop(broker)`` it and time that too."""
    t0 = time.monotonic()
    broker = start()
    try:
        metadata = time.monotonic() - t0
        ack = first_ack(bootstrap_of(broker), t0)
    finally:
        t1 = time.monotonic()
        stop(broker)
    return {"metadata_s": metadata, "first_ack_s": ack, "stop_s": time.monotonic() - t1}


def run_ours() -> dict[str, float]:
    return timed(lambda: EmbeddedBroker().start(), lambda b: b.bootstrap_servers, lambda b: b.close())


def run_kafka() -> dict[str, float]:
    from compat.kafka.kraft import KafkaBroker

    return timed(lambda: KafkaBroker().start(), lambda kb: kb.bootstrap, lambda kb: kb.stop())


def container_unavailable() -> str | None:
    if shutil.which("docker") is None:
        return "no docker command"
    try:
        info = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker does not answer ({type(exc).__name__})"
    if info.returncode != 0:
        return f"the Docker daemon does not hold {IMAGE} (no image registry to pull it from?)"
    return None


def run_container() -> dict[str, float]:
    port = free_port()
    env = {"KAFKA_NODE_ID": "1", "KAFKA_PROCESS_ROLES": "broker,controller",
           "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
           "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
           "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER", "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
           "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
           "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1"}
    cmd = ["docker", "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:9092"]
    for k, v in env.items():
        cmd += ["-e", f"{k}={v}"]
    t0 = time.monotonic()
    cid = subprocess.run([*cmd, IMAGE], capture_output=True, text=True, check=True).stdout.strip()
    try:
        while True:
            try:
                if metadata_broker_ids("127.0.0.1", port, 1.0):
                    break
            except OSError:
                pass
            if time.monotonic() - t0 > 120:
                raise TimeoutError("the container did not answer Metadata within 120 s")
            time.sleep(0.1)
        metadata = time.monotonic() - t0
        ack = first_ack(f"127.0.0.1:{port}", t0)
    finally:
        t1 = time.monotonic()
        subprocess.run(["docker", "stop", cid], capture_output=True)
    return {"metadata_s": metadata, "first_ack_s": ack, "stop_s": time.monotonic() - t1}


def measure(name: str, runner, runs: int) -> dict:
    samples = []
    for i in range(runs):
        samples.append(runner())
        log(f"{name} run {i + 1}: " + ", ".join(f"{k}={v:.2f}" for k, v in samples[-1].items()))
    return {"runs": samples, "median": {k: statistics.median(s[k] for s in samples) for k in samples[0]}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=("ours", "kafka", "both"), default="both")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", help="where to write the JSON result")
    args = p.parse_args(argv)
    result: dict = {"runs": args.runs, "targets": {}, "unavailable": {}}
    if args.target in ("ours", "both"):
        result["targets"]["ours"] = measure("ours", run_ours, args.runs)
    if args.target in ("kafka", "both"):
        result["targets"]["kafka"] = measure("kafka", run_kafka, args.runs)
        missing = container_unavailable()
        if missing:
            result["unavailable"]["container"] = missing
            log(f"container: skipped, {missing}")
        else:
            result["targets"]["container"] = measure("container", run_container, args.runs)

    names = list(result["targets"])
    print(f"{'median seconds':<22}" + "".join(f"{n:>12}" for n in names)
          + (f"{'ours/kafka':>12}" if {"ours", "kafka"} <= set(names) else ""))
    for key in ("metadata_s", "first_ack_s", "stop_s"):
        row = [result["targets"][n]["median"][key] for n in names]
        ratio = ""
        if {"ours", "kafka"} <= set(names):
            ratio = f"{result['targets']['ours']['median'][key] / result['targets']['kafka']['median'][key]:>12.2f}"
        print(f"{key:<22}" + "".join(f"{v:>12.2f}" for v in row) + ratio)
    for name, why in result["unavailable"].items():
        print(f"{name}: not measured, {why}")
    log(f"wrote {write_results('startup_bench', result, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
