"""A transactional consume-transform-produce copier (confluent-kafka), as applications write
one: read_committed input, output and consumed offsets committed in one transaction
(send_offsets_to_transaction), abort and rewind to the committed offsets on an abortable error,
a new producer (which fences the old one) on a fatal one. Used by the failover tests, which
kill brokers under it."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition


def transform(value: bytes) -> bytes:
    return b"copied:" + value


class Copier:
    def __init__(self, bootstrap: str, source: str, sink: str, group: str, transactional_id: str,
                 batch: int = 200, config: dict | None = None) -> None:
        self.bootstrap, self.source, self.sink = bootstrap, source, sink
        self.config = {"bootstrap.servers": bootstrap, **(config or {})}  # e.g. SASL_SSL settings
        self.group, self.transactional_id, self.batch = group, transactional_id, batch
        self.commits = 0
        self.aborts = 0
        self.producers = 0
        self.errors: list[str] = []
        self.consumer = Consumer({
            **self.config, "group.id": group, "isolation.level": "read_committed",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500})
        self.producer = self._new_producer()
        self.consumer.subscribe([source])

    def _new_producer(self) -> Producer:
        # Short idle connections and metadata refreshes make broker state changes that re-drive
        # librdkafka's coordinator lookup, which otherwise can wait forever on a group
        # coordinator it dropped from its metadata (librdkafka#5456, #5511).
        p = Producer({**self.config, "transactional.id": self.transactional_id,
                      "transaction.timeout.ms": 60000, "message.timeout.ms": 60000,
                      "connections.max.idle.ms": 2000, "topic.metadata.refresh.interval.ms": 1000})
        self._retry(lambda: p.init_transactions(30), "init_transactions")
        self.producers += 1
        return p

    def _retry(self, call, what: str, attempts: int = 20):
        for attempt in range(attempts):
            try:
                return call()
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if not err.retriable() or attempt == attempts - 1:
                    raise
                self.errors.append(f"{what}: {err}")
                time.sleep(0.2)
        return None

    def run_until(self, end_offsets: dict[int, int], timeout: float) -> None:
        """Copy until the group's position reaches ``end_offsets`` (partition -> offset)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._caught_up(end_offsets):
                return
            msgs = [m for m in self.consumer.consume(self.batch, 0.5) if m.error() is None]
            if msgs:
                self._copy(msgs)
        raise AssertionError(f"copier did not finish in {timeout}s: commits={self.commits} "
                             f"aborts={self.aborts} errors={self.errors[-5:]}")

    def _caught_up(self, end_offsets: dict[int, int]) -> bool:
        assignment = self.consumer.assignment()
        if not assignment:
            return False
        try:
            committed = self.consumer.committed([TopicPartition(self.source, p) for p in end_offsets], 5)
        except KafkaException:
            return False
        return all(tp.offset == end_offsets[tp.partition] for tp in committed)

    def _copy(self, msgs) -> None:
        try:
            self.producer.begin_transaction()
            for m in msgs:
                self.producer.produce(self.sink, key=m.key(), value=transform(m.value()), partition=m.partition())
            positions = self.consumer.position(self.consumer.assignment())
            self._retry(lambda: self.producer.send_offsets_to_transaction(
                positions, self.consumer.consumer_group_metadata(), 30), "send_offsets")
            self._retry(lambda: self.producer.commit_transaction(30), "commit")
            self.commits += 1
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            self.errors.append(str(err))
            if err.fatal():
                self.producer = self._new_producer()  # fences the old producer, aborts its transaction
            else:
                self._retry(lambda: self.producer.abort_transaction(30), "abort")
            self.aborts += 1
            self._rewind()

    def _rewind(self, attempts: int = 50) -> None:
        """Back to the committed offsets: what was read since is read again."""
        for _ in range(attempts):
            try:
                committed = self.consumer.committed(self.consumer.assignment(), 10)
                for tp in committed:
                    offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
                return
            except KafkaException as exc:  # the group coordinator may be moving
                self.errors.append(f"rewind: {exc.args[0]}")
                time.sleep(0.2)
        raise AssertionError(f"could not rewind to the committed offsets: {self.errors[-3:]}")

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            self.producer.flush(5)
