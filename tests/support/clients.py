"""Small helpers over the real client libraries used by the integration tests."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None,
                 replication_factor: int = 1) -> None:
    client = admin(bootstrap)  # must outlive the future, or librdkafka destroys the handle
    fs = client.create_topics([NewTopic(name, partitions, replication_factor, config=config or {})],
                              operation_timeout=10)
    fs[name].result(timeout=15)


def delivery_errors(config: dict, topic: str, n: int = 3, timeout: float = 15.0) -> list:
    """Produce ``n`` values with acks=all through a producer of ``config``: the delivery errors
    (empty: every value acknowledged)."""
    errors: list = []
    p = Producer({**config, "acks": "all", "message.timeout.ms": int(timeout * 1000)})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, on_delivery=lambda err, _m: errors.append(err) if err else None)
    p.flush(timeout + 5)
    return errors


def allow(bootstrap: str | dict | AdminClient, topic: str, principal: str,
          operation: AclOperation = AclOperation.WRITE, resource_type: ResourceType = ResourceType.TOPIC) -> None:
    """An ALLOW ACL for ``principal`` on ``topic`` (or another resource of that name) from any
    host (``bootstrap``: a bootstrap string, a whole client config for a listener that needs
    credentials, or an admin client)."""
    client = (admin(bootstrap) if isinstance(bootstrap, str) else
              bootstrap if isinstance(bootstrap, AdminClient) else AdminClient(bootstrap))
    acl = AclBinding(resource_type, topic, ResourcePatternType.LITERAL, principal, "*", operation,
                     AclPermissionType.ALLOW)
    for f in client.create_acls([acl]).values():
        f.result(20)


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
