"""kbroker-verify's Kafka-aware proxy (tools/verify/proxy.py) in front of a real broker process.

confluent-kafka goes through the proxy only (Metadata and FindCoordinator answers are
rewritten to the proxy's ports): a produce/consume round trip, a consumer group, the
duplicate mode (a non-idempotent producer's records appear twice in the log; an idempotent
producer's do not), reorder and delay modes still deliver every record once, and a bad
frame closes only its own connection.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.api import request_class, response_class
from protocol.codec import build
from tools.kafka_client import KafkaClient
from tools.verify.proxy import KafkaProxy, produce_acks, rewrite_addresses

N = 40


@pytest.fixture
def proxy(broker):
    p = KafkaProxy(broker.bootstrap, seed=7).start()
    yield p
    p.stop()


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    fs[topic].result(30)


def produce(bootstrap: str, topic: str, n: int, **conf) -> list[bytes]:
    values = [b"v-%05d" % i for i in range(n)]
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **conf})
    for v in values:
        p.produce(topic, value=v, partition=0)
        p.poll(0)
    assert p.flush(30) == 0
    return values


def consume_all(bootstrap: str, topic: str, at_least: int, timeout: float = 30.0,
                idle: float = 1.5, group: str | None = None) -> list[bytes]:
    """Every record of partition 0 until ``at_least`` were read and nothing came for ``idle`` s."""
    conf = {"bootstrap.servers": bootstrap, "group.id": group or f"g-{topic}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    c = Consumer(conf)
    if group is None:
        from confluent_kafka import TopicPartition
        c.assign([TopicPartition(topic, 0, 0)])
    else:
        c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
                last = time.monotonic()
            elif len(got) >= at_least and time.monotonic() - last > idle:
                break
    finally:
        c.close()
    return got


def test_metadata_points_to_the_proxy(broker, proxy):
    with KafkaClient(proxy.bootstrap) as client:
        md = client.metadata([])
    proxy_addrs = {tuple(a.rsplit(":", 1)) for a in proxy.bootstrap.split(",")}
    assert {(h, str(p)) for h, p in md.brokers.values()} <= proxy_addrs
    assert proxy.stats.rewritten >= 1


def test_describe_cluster_points_to_the_proxy(broker, proxy):
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    desc = admin.describe_cluster(request_timeout=10).result(15)
    ports = {int(a.rsplit(":", 1)[1]) for a in proxy.bootstrap.split(",")}
    assert desc.nodes and {n.port for n in desc.nodes} <= ports


def test_round_trip_and_group_through_the_proxy(broker, proxy, topic_name):
    create_topic(broker.bootstrap, topic_name)
    values = produce(proxy.bootstrap, topic_name, N, acks="all")
    assert consume_all(proxy.bootstrap, topic_name, N, group=f"grp-{topic_name}") == values
    # the group coordinator's address came back rewritten too: nothing bypassed the proxy
    assert proxy.stats.connections >= 2 and proxy.stats.rewritten >= 2


def test_duplicate_mode(broker, proxy, topic_name):
    create_topic(broker.bootstrap, topic_name)
    proxy.duplicate(1.0)
    plain = produce(proxy.bootstrap, topic_name, N, acks=1, **{"enable.idempotence": False})
    proxy.normal()
    got = consume_all(broker.bootstrap, topic_name, 2 * N)
    assert sorted(got) == sorted(plain * 2), "every non-idempotent record twice in the log"
    assert proxy.stats.duplicated > 0 and proxy.stats.dropped_responses > 0

    other = topic_name + "-idem"
    create_topic(broker.bootstrap, other)
    proxy.duplicate(1.0)
    idem = produce(proxy.bootstrap, other, N, acks="all", **{"enable.idempotence": True})
    proxy.normal()
    assert consume_all(broker.bootstrap, other, N) == idem, "an idempotent producer's duplicates are dropped"


def test_reorder_and_delay_modes_deliver_once(broker, proxy, topic_name):
    create_topic(broker.bootstrap, topic_name)
    proxy.reorder(0.5, hold_ms=30)
    first = produce(proxy.bootstrap, topic_name, N, acks="all", **{"enable.idempotence": True})
    proxy.delay((1, 20))
    second = produce(proxy.bootstrap, topic_name, N // 2, acks="all", **{"enable.idempotence": True})
    got = consume_all(proxy.bootstrap, topic_name, N + N // 2)
    proxy.normal()
    assert got == first + second
    assert proxy.stats.reordered > 0 and proxy.stats.delayed > 0


def test_bad_frame_closes_only_its_connection(broker, proxy):
    host, port = proxy.bootstrap.split(",")[0].rsplit(":", 1)
    with KafkaClient(proxy.bootstrap) as good:
        good.metadata([])
        with socket.create_connection((host, int(port)), timeout=5) as bad:
            bad.sendall(struct.pack(">i", -5) + b"junk")
            assert bad.recv(10) == b""  # closed by the proxy
        assert good.metadata([]).brokers  # the other connection still works
    assert proxy.stats.bad_frames >= 1


def _encode(cls, fields: dict) -> bytes:
    import io

    from kio.serial import entity_writer

    out = io.BytesIO()
    entity_writer(cls)(out, build(cls, fields))
    return out.getvalue()


@pytest.mark.parametrize("version", [1, 3, 4, 6])
def test_find_coordinator_rewrite_without_a_broker(version):
    """Both FindCoordinator shapes (one key before v4, batched after) and both header versions."""
    cls = response_class(10, version)
    if version >= 4:
        body = {"coordinators": [{"key": "k", "node_id": 2, "host": "10.0.0.2", "port": 9092, "error_code": 0},
                                 {"key": "x", "node_id": -1, "host": "", "port": -1, "error_code": 15}]}
    else:
        body = {"node_id": 2, "host": "10.0.0.2", "port": 9092, "error_code": 0}
    header = struct.pack(">i", 77) + (b"\x00" if cls.__flexible__ else b"")
    frame = header + _encode(cls, body)
    new, seen = rewrite_addresses(frame, 10, version, lambda addr: ("127.0.0.1", 40000 + addr[1] - 9092))
    assert seen == {("10.0.0.2", 9092)} and new[:4] == frame[:4]
    again, seen2 = rewrite_addresses(new, 10, version, lambda addr: addr)
    assert seen2 == {("127.0.0.1", 40000)} and again == new


@pytest.mark.parametrize("version,acks", [(3, 0), (3, -1), (9, 0), (9, 1), (11, 0)])
def test_produce_acks_read_from_the_request(version, acks):
    cls = request_class(0, version)
    flexible = cls.__flexible__
    cid = b"client"
    header = struct.pack(">hhih", 0, version, 5, len(cid)) + cid + (b"\x00" if flexible else b"")
    body = _encode(cls, {"transactional_id": "tx-1", "acks": acks, "timeout": 1000, "topic_data": []})
    assert produce_acks(header + body, version) == acks
