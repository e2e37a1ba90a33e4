"""What TLS and SASL cost, ours vs. Apache Kafka 4.3.1: the same producer over PLAINTEXT and over
SASL_SSL (TLS 1.3, SCRAM-SHA-512) on one broker, and how many new authenticated connections a
second the broker accepts.

    python bench/tls_bench.py --target both          # ours, then Kafka, with the ratios
    python bench/tls_bench.py --target ours --quick  # a smoke run

Each target is one fresh broker with a PLAINTEXT and a SASL_SSL listener (certificates from a
throwaway CA, ``tools/dev_ca.py``; one SCRAM user). Phases:

- produce: ``--mb`` MB of 1 KB records, acks=1, ``linger.ms=5``, one confluent-kafka producer,
  first over PLAINTEXT, then over SASL_SSL (``--runs`` each, median). Reported: MB/s and broker
  CPU-seconds per GB, and TLS's cost: SASL_SSL MB/s as a fraction of PLAINTEXT's.
- connect: for ``--connect-seconds``, one client opens a TLS connection, logs in with
  SCRAM-SHA-512 (SaslHandshake, two SaslAuthenticate rounds) and closes it, again and again.
  Reported: connections per second and broker CPU-milliseconds per connection. The client's
  own PBKDF2 (4096 iterations) is part of each round trip on this 2-core machine.

The target the issue sets: TLS costs us no larger a fraction of throughput than it costs Kafka.
Output: a table on stdout, JSON in ``bench/results/tls_bench-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.produce_bench import cpu_seconds, free_port, log  # noqa: E402
from tools.dev_ca import DevCA  # noqa: E402

USER, PASSWORD = "bench", "bench-secret"
SCRAM = "SCRAM-SHA-512"


# --- targets ---------------------------------------------------------------------------------------

def _security(ca: DevCA, store) -> dict[str, str]:
    return {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": SCRAM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required ;",
        # An unencrypted PKCS8 key: Java 17 cannot read the PBES2 encryption ``cryptography`` writes.
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(store.bundle),
        "ssl.enabled.protocols": "TLSv1.3",
    }


class Ours:
    name = "ours"

    def __init__(self, ca: DevCA, store) -> None:
        from tests.support.broker_process import BrokerProcess

        self.dir = Path(tempfile.mkdtemp(prefix="tls-bench-ours-"))
        self.b = BrokerProcess(str(self.dir / "data"))
        self.tls_port = free_port()
        self.b.overrides.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{self.b.port},SASL_SSL://127.0.0.1:{self.tls_port}",
            "inter.broker.listener.name": "PLAINTEXT", **_security(ca, store)})
        self.b.overrides["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL"

    def start(self) -> None:
        self.b.start()
        self.plain, self.pid = self.b.bootstrap, self.b.pid

    def stop(self) -> None:
        self.b.stop()
        shutil.rmtree(self.dir, ignore_errors=True)  # GBs of produced records


class Kafka:
    name = "kafka"

    def __init__(self, ca: DevCA, store, heap: str) -> None:
        from compat.kafka.kraft import KafkaBroker

        port, cport, self.tls_port = free_port(), free_port(), free_port()
        self.kb = KafkaBroker(port=port, controller_port=cport, heap_opts=heap, extra_config={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport},"
                         f"SASL_SSL://127.0.0.1:{self.tls_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{self.tls_port}",
            **_security(ca, store)})

    def start(self) -> None:
        self.kb.start()
        self.plain, self.pid = self.kb.bootstrap, self.kb.pid

    def stop(self) -> None:
        self.kb.stop()


# --- phases ----------------------------------------------------------------------------------------

def _client(target, ca: DevCA, secure: bool) -> dict:
    if not secure:
        return {"bootstrap.servers": target.plain}
    return {"bootstrap.servers": f"127.0.0.1:{target.tls_port}", "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM, "sasl.username": USER, "sasl.password": PASSWORD,
            "ssl.ca.location": str(ca.pem)}


def _add_user(target) -> None:
    from compat.targets import add_scram_user

    add_scram_user(target.plain, USER, PASSWORD, iterations=4096)


def produce(target, ca: DevCA, secure: bool, mb: float, run: int) -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"tls-bench-{'ssl' if secure else 'plain'}-{run}-{time.time_ns() % 10**6}"
    admin = AdminClient({"bootstrap.servers": target.plain})  # referenced until the future is done
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(30)
    time.sleep(0.5)
    n = int(mb * 1e6 / 1024)
    value = os.urandom(1024)
    p = Producer({**_client(target, ca, secure), "acks": "1", "linger.ms": 5, "enable.idempotence": False,
                  "queue.buffering.max.kbytes": 32768})
    p.produce(topic, b"warm")
    p.flush(30)
    cpu0, t0, own0 = cpu_seconds(target.pid), time.perf_counter(), _own_cpu()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, key=i.to_bytes(8, "big"))
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(300)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds(target.pid) - cpu0
    client_cpu = _own_cpu() - own0
    assert left == 0, f"{left} records undelivered"
    gb = n * 1024 / 1e9
    return {"mb_s": n * 1024 / 1e6 / seconds, "cpu_s_per_gb": cpu / gb, "client_cpu_s_per_gb": client_cpu / gb}


def _own_cpu() -> float:
    """CPU seconds of this process: the producer (librdkafka's threads included) runs here."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def connect_once(port: int, context: ssl.SSLContext) -> None:
    """One TLS connection and SCRAM login (SaslHandshake v1, SaslAuthenticate v2 twice), closed."""
    from scramp import ScramClient

    from tests.support.raw import RawClient

    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        c = RawClient.__new__(RawClient)  # the raw client's codec over this TLS socket
        c.sock, c.correlation_id = sock, 0
        assert c.call(17, 1, {"mechanism": SCRAM}).error_code == 0
        client = ScramClient([SCRAM], USER, PASSWORD)
        first = c.call(36, 2, {"auth_bytes": client.get_client_first().encode()})
        client.set_server_first(bytes(first.auth_bytes).decode())
        final = c.call(36, 2, {"auth_bytes": client.get_client_final().encode()})
        assert final.error_code == 0, final.error_message
        client.set_server_final(bytes(final.auth_bytes).decode())


def connect(target, ca: DevCA, seconds: float) -> dict:
    context = ssl.create_default_context(cafile=str(ca.pem))
    connect_once(target.tls_port, context)
    done, cpu0, t0 = 0, cpu_seconds(target.pid), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        connect_once(target.tls_port, context)
        done += 1
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(target.pid) - cpu0
    return {"connections_s": done / elapsed, "broker_cpu_ms_per_connection": 1000 * cpu / max(done, 1)}


def bench(target, ca: DevCA, args) -> dict:
    target.start()
    try:
        _add_user(target)
        out = {}
        for secure in (False, True):
            runs = [produce(target, ca, secure, args.mb, i) for i in range(args.runs)]
            key = "sasl_ssl" if secure else "plaintext"
            out[key] = {"runs": runs, **{k: statistics.median(r[k] for r in runs)
                                         for k in ("mb_s", "cpu_s_per_gb", "client_cpu_s_per_gb")}}
            log(f"{target.name} {key}: {out[key]['mb_s']:.1f} MB/s, {out[key]['cpu_s_per_gb']:.1f} CPU-s/GB")
        out["tls_fraction"] = out["sasl_ssl"]["mb_s"] / out["plaintext"]["mb_s"]
        out["tls_fraction_bound"] = _fraction_bound(out["plaintext"], out["sasl_ssl"])
        out["connect"] = connect(target, ca, args.connect_seconds)
        log(f"{target.name} connect: {out['connect']['connections_s']:.1f}/s")
        return out
    finally:
        target.stop()


def _fraction_bound(plain: dict, secure: dict) -> float:
    """The TLS fraction this machine allows when broker and client share its cores and use them all:
    plaintext's CPU per GB (both processes) over SASL_SSL's if the broker's TLS cost nothing
    (the broker at its plaintext cost, the client at its TLS cost)."""
    plain_total = plain["cpu_s_per_gb"] + plain["client_cpu_s_per_gb"]
    return plain_total / (plain["cpu_s_per_gb"] + secure["client_cpu_s_per_gb"])


def render(results: dict) -> str:
    rows = [("produce MB/s, PLAINTEXT", lambda r: r["plaintext"]["mb_s"]),
            ("produce MB/s, SASL_SSL", lambda r: r["sasl_ssl"]["mb_s"]),
            ("SASL_SSL / PLAINTEXT throughput", lambda r: r["tls_fraction"]),
            ("broker CPU-s/GB, PLAINTEXT", lambda r: r["plaintext"]["cpu_s_per_gb"]),
            ("broker CPU-s/GB, SASL_SSL", lambda r: r["sasl_ssl"]["cpu_s_per_gb"]),
            ("client CPU-s/GB, PLAINTEXT", lambda r: r["plaintext"]["client_cpu_s_per_gb"]),
            ("client CPU-s/GB, SASL_SSL", lambda r: r["sasl_ssl"]["client_cpu_s_per_gb"]),
            ("fraction if the broker's TLS were free", lambda r: r["tls_fraction_bound"]),
            ("new TLS+SCRAM connections/s", lambda r: r["connect"]["connections_s"]),
            ("broker CPU-ms per connection", lambda r: r["connect"]["broker_cpu_ms_per_connection"])]
    names = list(results)
    lines = ["| metric | " + " | ".join(names) + (" | ours/kafka |" if len(names) == 2 else " |"),
             "|---" * (len(names) + 1 + (len(names) == 2)) + "|"]
    for label, get in rows:
        values = [get(results[n]) for n in names]
        cells = [f"{v:.2f}" for v in values]
        if len(names) == 2:
            cells.append(f"{values[0] / values[1]:.2f}" if values[1] else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=["ours", "kafka", "both"], default="both")
    ap.add_argument("--quick", action="store_true", help="16 MB, one run, 3 s of connections")
    ap.add_argument("--mb", type=float, default=128.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--connect-seconds", type=float, default=10.0)
    ap.add_argument("--kafka-heap", default="-Xmx1G -Xms1G")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.mb, args.runs, args.connect_seconds = 16.0, 1, 3.0
    ca_dir = Path(tempfile.mkdtemp(prefix="tls-bench-ca-"))
    ca = DevCA(ca_dir)
    store = ca.issue("broker", cn="broker", hosts=("127.0.0.1", "localhost"))
    targets = {"ours": lambda: Ours(ca, store), "kafka": lambda: Kafka(ca, store, args.kafka_heap)}
    names = ["ours", "kafka"] if args.target == "both" else [args.target]
    try:
        results = {name: bench(targets[name](), ca, args) for name in names}
    finally:
        shutil.rmtree(ca_dir, ignore_errors=True)
    print(render(results))
    out = Path(args.json) if args.json else REPO / "bench" / "results" / f"tls_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    log(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
