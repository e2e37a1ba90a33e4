"""Topic administration for tests, through confluent-kafka (the ``testing`` extra installs it)."""

from __future__ import annotations

import re
import uuid


def topic_name(hint: str = "topic") -> str:
    """A fresh legal topic name that says where it came from (e.g. the test's name)."""
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", hint).strip("-._")[:180] or "topic"
    return f"{base}-{uuid.uuid4().hex[:8]}"


class TopicAdmin:
    """``create_topic`` / ``delete_topics`` for anything with ``bootstrap_servers``."""

    bootstrap_servers: str
    default_replication_factor = 1

    def admin(self, **config):
        """A confluent-kafka ``AdminClient`` bound to this broker (extra client settings allowed)."""
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap_servers, **config})

    def create_topic(self, name: str | None = None, partitions: int = 1, replication_factor: int | None = None,
                     config: dict[str, str] | None = None, timeout: float = 30.0) -> str:
        """Create a topic (a fresh name unless ``name`` is given) and return its name once it exists."""
        from confluent_kafka.admin import NewTopic

        name = name or topic_name()
        rf = replication_factor or self.default_replication_factor
        admin = self.admin()  # held until the answer: a collected client fails its futures
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=rf,
                      config={k: str(v) for k, v in (config or {}).items()})],
            operation_timeout=timeout, request_timeout=timeout)
        futures[name].result(timeout)
        return name

    def delete_topics(self, *names: str, timeout: float = 30.0) -> None:
        if not names:
            return
        admin = self.admin()
        futures = admin.delete_topics(list(names), operation_timeout=timeout, request_timeout=timeout)
        for future in futures.values():
            future.result(timeout)
