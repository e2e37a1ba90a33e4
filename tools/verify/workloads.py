"""Client processes of a verification run: what they send, read and commit, recorded as history.

Owns the workloads' clients (confluent-kafka, i.e. librdkafka). Each client incarnation is one
OS process (``python -m tools.verify.workloads SPEC_JSON``) with its own process number, so the
runner can kill -9 it mid-transaction; it appends its operations to its own JSON-lines file with
:class:`~tools.verify.history.HistoryWriter` (times from the runner's monotonic start: the clock
is system-wide) and the runner merges the files. SIGTERM asks a client to stop after its
current operation.

Roles:

- ``txn-producer``: Jepsen's ``txn`` client: transactions of 1 to ``max_txn_length``
  micro-operations (Jepsen's ``--max-txn-length``), each a send
  of a unique integer to a random key (explicit partition) or a poll of its own assign-mode
  consumer; some aborted on purpose (``fail``).
- ``plain-producer``: the sanity mode's non-idempotent producer (acks=1, retries): single
  ``send`` operations.
- ``consumer``: a read-only client polling with ``assign`` (every key, from the start) or with
  ``subscribe`` (a consumer group, auto commit).
- ``loader``: the copier workload's input, M unique values sent at a steady ``rate`` while the
  copiers run (or as fast as acknowledged when no rate is given).
- ``copier``: a consume-transform-produce copier after ``tests/support/copier.py``: subscribe,
  read_committed, offsets in the transaction (``send_offsets_to_transaction``), transactions
  of up to 100 records, every 9th aborted on purpose; abortable errors abort and rewind to the
  committed offsets, fatal ones make a new producer.

Where it knowingly differs from Jepsen: producers and consumers are separate processes (Jepsen's
clients do both in one transaction; here only ``txn-producer`` mixes polls into its
transactions, through an assign-mode consumer that commits nothing); a key is a partition, not a
(topic, key) pair hashed onto one; the copier workload is not Jepsen's (issue 18's scenario).
"""

from __future__ import annotations

import json
import random
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import structlog

from tools.verify.history import FAIL, INFO, INVOKE, OK, HistoryWriter, key_of

log = structlog.get_logger("verify.workloads")

VALUE_SPACE = 10_000_000  # values of process p are p * VALUE_SPACE + n: unique per run
TXN_TIMEOUT_S = 15.0      # client-side timeout of one transactional call
QUIET = 2                 # librdkafka log level of the runner's own clients (critical only)


class Stop:
    """Set by SIGTERM: the client finishes its current operation and exits."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, _signum, _frame) -> None:
        self.requested = True

    def __bool__(self) -> bool:
        return self.requested


# --- configuration --------------------------------------------------------------------------------

def _common(spec: dict) -> dict[str, Any]:
    # Short idle connections and metadata refreshes re-drive librdkafka's coordinator lookups
    # after broker faults (see tests/support/copier.py: librdkafka#5456, #5511).
    conf = {"bootstrap.servers": spec["bootstrap"], "client.id": f"verify-{spec['process']}",
            "connections.max.idle.ms": 2000, "topic.metadata.refresh.interval.ms": 1000,
            "socket.connection.setup.timeout.ms": 5000,
            # A request to a paused (SIGSTOP) broker hangs until this timeout (librdkafka's
            # default is 60 s): a group's SyncGroup stuck there stalls the whole group.
            "socket.timeout.ms": 10000}
    if spec.get("client_debug"):
        conf["debug"] = spec["client_debug"]
    return conf


def producer_config(spec: dict, transactional_id: str | None) -> dict[str, Any]:
    conf = {**_common(spec), "linger.ms": 5}
    if transactional_id is not None:
        conf.update({"transactional.id": transactional_id, "transaction.timeout.ms": 20000,
                     "message.timeout.ms": 20000})
    elif spec.get("idempotence", True):
        conf.update({"enable.idempotence": True, "acks": "all", "message.timeout.ms": 30000})
    else:
        conf.update({"enable.idempotence": False, "acks": 1, "retries": 10, "retry.backoff.ms": 50,
                     "message.timeout.ms": 30000, "request.timeout.ms": 2000,
                     "max.in.flight.requests.per.connection": 5})
    return conf


def consumer_config(spec: dict, group: str | None, auto_commit: bool = False) -> dict[str, Any]:
    return {**_common(spec), "group.id": group or f"verify-assign-{spec['process']}",
            "isolation.level": spec.get("isolation", "read_committed"),
            "enable.auto.commit": auto_commit, "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "session.timeout.ms": 8000, "heartbeat.interval.ms": 500,
            # The rebalance timeout: how long a rebalance waits for a member stuck in a
            # transactional call (Kafka's default, 5 minutes, would stall the group that long).
            "max.poll.interval.ms": 30000}


# --- shared pieces --------------------------------------------------------------------------------

def records_by_key(msgs) -> dict[str, list[list[int]]]:
    """A poll's records, {key: [[offset, value], ...]} in the order the consumer returned them."""
    out: dict[str, list[list[int]]] = {}
    for m in msgs:
        out.setdefault(key_of(m.topic(), m.partition()), []).append([m.offset(), int(m.value())])
    return out


def good_messages(msgs) -> list:
    return [m for m in msgs if m.error() is None and m.value() is not None]


def transient(err) -> bool:
    """A retriable error, or a local one a broker fault causes (its connection went away)."""
    from confluent_kafka import KafkaError

    return err.retriable() or err.code() in (
        KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION)


def retry(call: Callable[[], Any], attempts: int = 5, pause: float = 0.2, retriable=None) -> Any:
    """``call()`` again while it raises a retriable KafkaError (the last error is raised);
    ``retriable`` (a predicate on the error) widens what is retried."""
    from confluent_kafka import KafkaException

    for attempt in range(attempts):
        try:
            return call()
        except KafkaException as exc:
            err = exc.args[0]
            if not (err.retriable() or (retriable is not None and retriable(err))) or attempt == attempts - 1:
                raise
            time.sleep(pause)
    return None


class Deliveries:
    """Delivery reports of one transaction's sends: fills in each send's offset."""

    def __init__(self) -> None:
        self.offsets: dict[int, int | None] = {}
        self.errors: list[str] = []

    def callback(self, slot: int) -> Callable:
        def on_delivery(err, msg) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.offsets[slot] = msg.offset()
        return on_delivery


def new_transactional_producer(spec: dict, stop: Stop):
    """A producer whose init_transactions fences the previous incarnation of its id (retried
    while brokers come and go)."""
    from confluent_kafka import KafkaException, Producer

    while True:
        producer = Producer(producer_config(spec, spec["transactional_id"]))
        t0 = time.monotonic()
        try:
            retry(lambda p=producer: p.init_transactions(TXN_TIMEOUT_S), attempts=20, pause=0.5)
            log.info("producer ready", process=spec["process"], transactional_id=spec["transactional_id"],
                     seconds=round(time.monotonic() - t0, 2))
            return producer
        except KafkaException as exc:
            log.warning("init_transactions failed", process=spec["process"], error=str(exc.args[0]))
            if stop:
                raise
            time.sleep(0.5)


def finish_transaction(producer, abort: bool) -> tuple[str, str | None]:
    """Commit (or abort on purpose) the open transaction: (completion type, error).

    ``fail`` only when the client knows the transaction aborted (an abort on purpose, or an
    abortable error followed by a successful abort); ``info`` when the outcome is unknown."""
    from confluent_kafka import KafkaException

    try:
        if abort:
            retry(lambda: producer.abort_transaction(TXN_TIMEOUT_S))
            return FAIL, None
        producer.flush(TXN_TIMEOUT_S)  # serves the delivery reports (offsets) first
        retry(lambda: producer.commit_transaction(TXN_TIMEOUT_S))
        return OK, None
    except KafkaException as exc:
        return recover(producer, exc.args[0])


def recover(producer, err) -> tuple[str, str | None]:
    """After an error inside a transaction: abort it if the error allows (then ``fail``)."""
    from confluent_kafka import KafkaException

    if err.txn_requires_abort():
        try:
            retry(lambda: producer.abort_transaction(TXN_TIMEOUT_S))
            return FAIL, str(err)
        except KafkaException as exc2:
            return INFO, f"{err}; abort: {exc2.args[0]}"
    return INFO, str(err)


# --- roles ----------------------------------------------------------------------------------------

def run_txn_producer(spec: dict, writer: HistoryWriter, stop: Stop) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    proc, topic, parts = spec["process"], spec["topic"], spec["partitions"]
    rng = random.Random(spec.get("seed", 0) * 7919 + proc)
    reader = None
    if spec.get("poll_probability", 0) > 0:
        consumer = Consumer(consumer_config(spec, None))
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(parts)])
        reader = Positions(consumer)
        writer.record(proc, OK, "assign", [key_of(topic, p) for p in range(parts)])
    producer = new_transactional_producer(spec, stop)
    counter = 0
    while not stop:
        mops: list[list] = []
        for _ in range(rng.randint(1, spec.get("max_txn_length", 5))):
            if reader is not None and rng.random() < spec["poll_probability"]:
                mops.append(["poll", None])
            else:
                counter += 1
                mops.append(["send", key_of(topic, rng.randrange(parts)), proc * VALUE_SPACE + counter])
        abort = rng.random() < spec.get("abort_probability", 0.1)
        before = reader.mark() if reader is not None else None
        writer.record(proc, INVOKE, "txn", mops)
        deliveries, done = Deliveries(), []
        try:
            producer.begin_transaction()
            for slot, mop in enumerate(mops):
                if mop[0] == "send":
                    _, key, value = mop
                    producer.produce(topic, value=str(value).encode(), partition=int(key.rpartition("/")[2]),
                                     on_delivery=deliveries.callback(slot))
                    done.append(mop)
                else:
                    done.append(["poll", records_by_key(reader.consume(50, 0.05))])
            type_, error = finish_transaction(producer, abort)
        except KafkaException as exc:
            type_, error = recover(producer, exc.args[0])
        except BufferError as exc:
            type_, error = recover_buffer(producer, exc)
        value = completed_mops(done, mops, deliveries)
        writer.record(proc, type_, "txn", value, error=error)
        if before is not None and type_ != OK:
            reader.rewind(before)  # what an uncommitted transaction polled is polled again
        if type_ == INFO:  # the producer's state is unknown: a new one fences the transaction
            producer = replace_producer(producer, spec, stop)


class Positions:
    """An assign-mode consumer's positions as this client consumed them (librdkafka's
    position() forgets a partition's position after a seek until it fetches again)."""

    def __init__(self, consumer) -> None:
        self.consumer = consumer
        self.next: dict[tuple[str, int], int] = {}

    def consume(self, n: int, timeout: float) -> list:
        """Up to ``n`` records, waiting at most ``timeout`` only while none is there (as a Java
        poll returns; librdkafka's consume(n) would wait for all ``n``)."""
        msgs = self.consumer.consume(n, 0) or self.consumer.consume(1, timeout)
        if 0 < len(msgs) < n:
            msgs += self.consumer.consume(n - len(msgs), 0)
        msgs = good_messages(msgs)
        for m in msgs:
            self.next[(m.topic(), m.partition())] = m.offset() + 1
        return msgs

    def mark(self) -> dict[tuple[str, int], int]:
        return dict(self.next)

    def rewind(self, mark: dict[tuple[str, int], int]) -> None:
        """Back to ``mark``: what was consumed since is consumed again."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        moved = [TopicPartition(t, p, mark.get((t, p), OFFSET_BEGINNING))
                 for (t, p), offset in self.next.items() if mark.get((t, p)) != offset]
        self.next = dict(mark)
        for tp in moved:
            try:
                self.consumer.seek(tp)
            except KafkaException as exc:  # not fetching yet: assign at the positions instead
                log.info("seek failed; re-assigning", partition=tp.partition, error=str(exc.args[0]))
                self.consumer.assign([TopicPartition(tp.topic, tp.partition, self.next.get(
                    (tp.topic, tp.partition), OFFSET_BEGINNING)) for tp in self.consumer.assignment()])
                return


def recover_buffer(producer, exc: Exception) -> tuple[str, str | None]:
    from confluent_kafka import KafkaException

    try:
        retry(lambda: producer.abort_transaction(TXN_TIMEOUT_S))
        return FAIL, f"local queue full: {exc}"
    except KafkaException as exc2:
        return INFO, f"local queue full: {exc}; abort: {exc2.args[0]}"


def completed_mops(done: list[list], planned: list[list], deliveries: Deliveries) -> list[list]:
    """The completion's micro-operations: sends with the offsets the delivery reports gave,
    polls with what they read; micro-operations never reached stay as invoked."""
    out = []
    for slot, mop in enumerate(planned):
        if slot >= len(done):
            out.append(mop)
        elif mop[0] == "send":
            out.append(["send", mop[1], [deliveries.offsets.get(slot), mop[2]]])
        else:
            out.append(done[slot])
    return out


def replace_producer(producer, spec: dict, stop: Stop):
    """A fresh producer for the same transactional.id after an unknown outcome or fatal error."""
    try:
        producer.flush(1)
    except Exception:  # noqa: BLE001 - the old producer may be fatally broken; it is dropped
        pass
    if stop:
        return producer
    return new_transactional_producer(spec, stop)


def run_plain_producer(spec: dict, writer: HistoryWriter, stop: Stop) -> None:
    """Single sends, one at a time (acks per the spec): the sanity mode's producer, or the
    idempotent loader of the copier's input."""
    from confluent_kafka import Producer

    proc, topic, parts = spec["process"], spec["topic"], spec["partitions"]
    rng = random.Random(spec.get("seed", 0) * 104729 + proc)
    producer = Producer(producer_config(spec, None))
    limit, counter, acked = spec.get("records"), 0, [0]
    pending: dict[int, list] = {}

    def on_delivery(err, msg) -> None:
        value = int(msg.value())
        key = pending.pop(value)
        if err is None:
            acked[0] += 1
            writer.record(proc, OK, "send", [["send", key, [msg.offset(), value]]])
        else:
            writer.record(proc, INFO, "send", [["send", key, [None, value]]], error=str(err))

    window = spec.get("window", 1)  # sends in flight at once
    rate, t0 = spec.get("rate"), time.monotonic()
    while not stop and (limit is None or acked[0] < limit):
        if limit is not None and acked[0] + len(pending) >= limit:
            producer.poll(0.05)
            continue
        if rate and (ahead := t0 + counter / rate - time.monotonic()) > 0:
            producer.poll(min(ahead, 0.1))  # serves delivery reports while it waits
            continue
        counter += 1
        value = proc * VALUE_SPACE + counter
        partition = (counter - 1) % parts if limit is not None else rng.randrange(parts)
        key = key_of(topic, partition)
        pending[value] = key
        writer.record(proc, INVOKE, "send", [["send", key, value]])
        while True:
            try:
                producer.produce(topic, value=str(value).encode(), partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        while len(pending) >= window and not stop:
            producer.poll(0.05)
    producer.flush(30)


def run_consumer(spec: dict, writer: HistoryWriter, stop: Stop) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    proc, topic, parts = spec["process"], spec["topic"], spec["partitions"]
    keys = [key_of(topic, p) for p in range(parts)]
    if spec["mode"] == "subscribe":
        consumer = Consumer(consumer_config(spec, spec["group"], auto_commit=True))
        consumer.subscribe([topic])
        writer.record(proc, OK, "subscribe", keys)
    else:
        consumer = Consumer(consumer_config(spec, None))
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(parts)])
        writer.record(proc, OK, "assign", keys)
    try:
        while not stop:
            writer.record(proc, INVOKE, "poll", [["poll", None]])
            msgs = good_messages(consumer.consume(200, 0.5))
            writer.record(proc, OK, "poll", [["poll", records_by_key(msgs)]])
    finally:
        consumer.close()


def run_copier(spec: dict, writer: HistoryWriter, stop: Stop) -> None:
    Copier(spec, writer, stop).run()


class Copier:
    """Copies input partition p to output partition p, value for value, in transactions."""

    def __init__(self, spec: dict, writer: HistoryWriter, stop: Stop) -> None:
        from confluent_kafka import Consumer

        self.spec, self.writer, self.stop = spec, writer, stop
        self.proc = spec["process"]
        self.rng = random.Random(spec.get("seed", 0) * 15485863 + self.proc)
        # The producer first: its init_transactions (which waits until the previous
        # incarnation's transaction is aborted) must not hold partitions of the group.
        self.producer = new_transactional_producer(spec, stop)
        self.consumer = Consumer(consumer_config(spec, spec["group"]))
        self.consumer.subscribe([spec["input"]])
        writer.record(self.proc, OK, "subscribe",
                      [key_of(spec["input"], p) for p in range(spec["partitions"])])
        self.transactions = 0

    def run(self) -> None:
        try:
            while not self.stop:
                msgs = good_messages(self.consumer.consume(self.rng.randint(1, self.spec.get("batch", 100)), 0.5))
                if msgs:
                    self.copy(msgs)
        finally:
            self.consumer.close()

    def copy(self, msgs) -> None:
        from confluent_kafka import KafkaException

        self.transactions += 1
        abort = self.transactions % self.spec.get("abort_every", 9) == 0
        out = self.spec["output"]
        sends = [["send", key_of(out, m.partition()), int(m.value())] for m in msgs]
        self.writer.record(self.proc, INVOKE, "txn", [["poll", None], *sends])
        deliveries = Deliveries()
        try:
            self.producer.begin_transaction()
            for slot, m in enumerate(msgs):
                self.producer.produce(out, value=m.value(), partition=m.partition(),
                                      on_delivery=deliveries.callback(slot))
            positions = self.consumer.position(self.consumer.assignment())
            retry(lambda: self.producer.send_offsets_to_transaction(
                positions, self.consumer.consumer_group_metadata(), TXN_TIMEOUT_S))
            type_, error = finish_transaction(self.producer, abort)
        except KafkaException as exc:
            type_, error = recover(self.producer, exc.args[0])
        except BufferError as exc:
            type_, error = recover_buffer(self.producer, exc)
        done = [["send", s[1], [deliveries.offsets.get(i), s[2]]] for i, s in enumerate(sends)]
        self.writer.record(self.proc, type_, "txn", [["poll", records_by_key(msgs)], *done], error=error)
        if error is not None:
            log.info("transaction not committed", process=self.proc, type=type_, error=error)
        if type_ == INFO:
            self.producer = replace_producer(self.producer, self.spec, self.stop)
        if type_ != OK:
            self.rewind()

    def rewind(self, attempts: int = 50) -> None:
        """Back to the group's committed offsets: what was read since is read again."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        for _ in range(attempts):
            if self.stop:
                return
            try:
                committed = self.consumer.committed(self.consumer.assignment(), 10)
                failed = [tp for tp in committed if tp.error is not None]
                if failed:  # a partition's offset could not be read: never guess it
                    raise KafkaException(failed[0].error)
                # Logged so that a rewind to the wrong place can be told from a wrong answer.
                log.info("rewind", process=self.proc,
                         committed={f"{tp.topic}/{tp.partition}": tp.offset for tp in committed})
                for tp in committed:
                    offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
                return
            except KafkaException as exc:  # the group coordinator may be moving
                log.info("rewind retry", process=self.proc, error=str(exc.args[0]))
                time.sleep(0.2)
        raise RuntimeError("could not rewind to the committed offsets")


# --- after the run (called in the runner's process) -------------------------------------------------

def create_topics(bootstrap: str, topics: list[str], partitions: int, replication: int, min_isr: int,
                  timeout: float = 60.0) -> None:
    """Creates ``topics`` and waits until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": QUIET})
    futures = admin.create_topics([NewTopic(t, partitions, replication, config={"min.insync.replicas": str(min_isr)})
                                   for t in topics], request_timeout=timeout)
    for f in futures.values():
        f.result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        if all(t in md.topics and md.topics[t].error is None and len(md.topics[t].partitions) == partitions
               and all(p.leader >= 0 for p in md.topics[t].partitions.values()) for t in topics):
            return
        time.sleep(0.5)
    raise TimeoutError(f"topics {topics} have no leaders after {timeout}s")


def high_watermarks(bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted") -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-watermarks", "isolation.level": isolation,
                  "log_level": QUIET})
    try:
        return {p: retry(lambda p=p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10), 10, 1.0,
                         transient)[1]
                for p in range(partitions)}
    finally:
        c.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (-1: none), asked as a read_committed consumer would
    (librdkafka then asks for stable offsets, KIP-447)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "log_level": QUIET})
    try:
        tps = retry(lambda: c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10), 10, 1.0,
                    transient)
        return {tp.partition: tp.offset if tp.offset >= 0 else -1 for tp in tps}
    finally:
        c.close()


def final_read(bootstrap: str, keys: list[str], isolation: str, timeout: float = 120.0,
               idle_s: float = 15.0) -> tuple[dict[str, list[list[int]]], dict]:
    """Every key from its start to its high watermark (read at the start of the read), as
    {key: [[offset, value], ...]}; ``extra`` says which keys the read could not complete."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-final-read", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": False, "auto.offset.reset": "earliest",
                  "log_level": QUIET})
    tps = [TopicPartition(*_split(k)) for k in keys]
    ends, unstable = stable_ends(bootstrap, tps, timeout / 2)
    c.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in tps])
    out: dict[str, list[list[int]]] = {k: [] for k in keys}
    deadline, last_data = time.monotonic() + timeout, time.monotonic()
    pending = {k for k in keys if ends[k] > 0}
    try:
        while pending and time.monotonic() < deadline and time.monotonic() - last_data < idle_s:
            msgs = good_messages(c.consume(1000, 0.5))
            if msgs:
                last_data = time.monotonic()
            for k, recs in records_by_key(msgs).items():
                out[k].extend(recs)
            for tp in c.position([TopicPartition(*_split(k)) for k in pending]):
                k = key_of(tp.topic, tp.partition)
                if tp.offset >= ends[k] or (out[k] and out[k][-1][0] >= ends[k] - 1):
                    pending.discard(k)
    finally:
        c.close()
    extra = {"ends": ends}
    if pending:
        extra["incomplete"] = sorted(pending)
    if unstable:
        extra["unstable"] = unstable
    return out, extra


def stable_ends(bootstrap: str, tps: list, timeout: float) -> tuple[dict[str, int], list[str]]:
    """Each partition's high watermark once no transaction is open in it (the last stable
    offset, which a read_committed ListOffsets answers, equals the high watermark), so a
    read_committed read to the end sees every committed record. A killed client's open
    transaction lasts until the coordinator aborts it (a new incarnation, or its timeout).
    Returns the ends and the keys still unstable at ``timeout``."""
    from confluent_kafka import Consumer

    clients = {iso: Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-ends", "isolation.level": iso,
                              "log_level": QUIET}) for iso in ("read_committed", "read_uncommitted")}
    deadline = time.monotonic() + timeout
    try:
        while True:
            marks = {iso: {key_of(tp.topic, tp.partition): retry(
                lambda tp=tp, c=c: c.get_watermark_offsets(tp, timeout=10), 10, 1.0, transient)[1] for tp in tps}
                for iso, c in clients.items()}
            hw, lso = marks["read_uncommitted"], marks["read_committed"]
            unstable = sorted(k for k in hw if lso[k] < hw[k])
            if not unstable or time.monotonic() > deadline:
                if unstable:
                    log.warning("open transactions at the final read", keys=unstable)
                return hw, unstable
            time.sleep(1.0)
    finally:
        for c in clients.values():
            c.close()


def _split(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


ROLES: dict[str, Callable[[dict, HistoryWriter, Stop], None]] = {
    "txn-producer": run_txn_producer,
    "plain-producer": run_plain_producer,
    "loader": run_plain_producer,
    "consumer": run_consumer,
    "copier": run_copier,
}


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.verify.workloads SPEC_JSON``: run one client incarnation."""
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(argv[0])
    structlog.configure(processors=[structlog.processors.add_log_level,
                                    structlog.processors.TimeStamper(fmt="%H:%M:%S", utc=True),
                                    structlog.dev.ConsoleRenderer(colors=False)])
    stop = Stop()
    writer = HistoryWriter(spec["history"], started=spec["started"])
    try:
        ROLES[spec["role"]](spec, writer, stop)
    except Exception as exc:  # noqa: BLE001 - logged; the runner starts a new incarnation
        log.error("client failed", process=spec["process"], role=spec["role"], error=repr(exc))
        return 1
    finally:
        writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
