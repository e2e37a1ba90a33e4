"""Small helpers over the real client libraries used by the integration tests."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None,
                 replication_factor: int = 1) -> None:
    client = admin(bootstrap)  # must outlive the future, or librdkafka destroys the handle
    fs = client.create_topics([NewTopic(name, partitions, replication_factor, config=config or {})],
                              operation_timeout=10)
    fs[name].result(timeout=15)


def produce_when_room(producer, topic: str, wait: float = 0.05, **kwargs) -> None:
    """``producer.produce`` that serves delivery reports while the local queue is full."""
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(wait)


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60.0,
                **config) -> list:
    """Read every partition from the beginning until ``expected`` records arrived."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", **config})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(10000, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                out.append(m)
    finally:
        c.close()
    return out
