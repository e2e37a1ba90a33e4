"""``kbroker-transactions``: Apache Kafka's ``kafka-transactions.sh`` in Python (no Java).

    python -m tools.transactions --bootstrap-server HOST:PORT COMMAND [options]

Commands, options and output columns follow Kafka 4.3.1's
``org.apache.kafka.tools.TransactionsCommand``:

``list [--duration-filter MS] [--transactional-id-pattern REGEX]``
    ListTransactions to every broker of the cluster. Columns: TransactionalId, Coordinator,
    ProducerId, TransactionState. ``--duration-filter`` needs ListTransactions v1;
    ``--transactional-id-pattern`` is sent to brokers with v2 (a full match, Java regex)
    and applied here (Python ``re.fullmatch``) for older ones, where Kafka's tool gives up.
    Our additions: ``--state STATE`` and ``--producer-id ID`` (repeatable), the
    ListTransactions request's state and producer id filters, which Kafka's admin API has
    but its CLI does not expose.
``describe --transactional-id ID``
    FindCoordinator (key type 1, transaction) then DescribeTransactions v0 to the
    coordinator. Columns: CoordinatorId, TransactionalId, ProducerId, ProducerEpoch,
    TransactionState, TransactionTimeoutMs, CurrentTransactionStartTimeMs,
    TransactionDurationMs, TopicPartitions (sorted; Kafka prints a HashSet's order).
    Our addition: ``--show-version`` adds a TransactionVersion column, the client transaction
    version (0-2, KIP-890) of the id's latest record in ``__transaction_state``, read from the
    coordinator with Fetch, since DescribeTransactions v0 has no field for it (so Kafka's tool
    cannot show it); works against Kafka 4.x too, whose records carry the same tagged field.
``describe-producers --topic T --partition P [--broker-id N]``
    DescribeProducers v0 to the partition's leader (or to broker N, e.g. a follower).
    Columns: ProducerId, ProducerEpoch, LatestCoordinatorEpoch, LastSequence,
    LastTimestamp, CurrentTransactionStartOffset.
``find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout MIN]``
    Kafka's algorithm: DescribeProducers on the partitions in scope (those with a replica on
    broker N, or those of topic T); every producer with an open transaction
    (CurrentTransactionStartOffset >= 0) whose last write is older than the maximum
    transaction timeout (15 minutes by default) is a candidate; ListTransactions (filtered
    by those producer ids, on every broker) maps producer ids to transactional ids and
    DescribeTransactions asks their coordinators. A candidate is hanging when no
    coordinator knows its producer id, or the coordinator's transaction does not include
    the partition. Columns: Topic, Partition, ProducerId, ProducerEpoch,
    CoordinatorEpoch, StartOffset, LastTimestamp, Duration(min); rows sorted by topic,
    partition and producer id (Kafka's order is a HashMap's).
``abort --topic T --partition P (--start-offset O | --producer-id ID --producer-epoch E --coordinator-epoch C)``
    Like Kafka's ``Admin.abortTransaction``: an ABORT marker (WriteTxnMarkers v1) sent
    straight to the partition's leader. With ``--start-offset`` the producer is the one
    whose open transaction starts at that offset (DescribeProducers). Prints nothing on
    success, as Kafka's tool.

Tables are printed like Kafka's (each column padded to its widest cell, then a tab, on
every column including the last). ``--json`` (our addition) prints the same data as JSON
instead: a list of objects for tables, one object for ``describe`` and ``abort``.
Errors are one line on stderr (error codes by their Kafka names) with exit status 1.
Retriable conditions (coordinator loading or not yet available, no leader, leader moved)
are retried until ``--timeout-ms`` (our addition, default 30000; Kafka's admin client
waits up to default.api.timeout.ms = 60000).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn

from kio.schema.errors import ErrorCode

from .kafka_client import (
    ApiError,
    ConnectError,
    KafkaClient,
    KafkaClientError,
    RetriableApiError,
    RetriableError,
    UnsupportedApi,
    check,
    retry,
    to_ms,
)

PROG = "kbroker-transactions"

DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
FETCH = 1
TRANSACTION_STATE_TOPIC = "__transaction_state"
FETCH_BYTES = 8 << 20  # per Fetch of __transaction_state
LIST_TRANSACTIONS = 66
WRITE_TXN_MARKERS = 27
TRANSACTION_KEY = 1

# Kafka's TransactionState names (clients/admin/TransactionState.java); others print "Unknown".
TRANSACTION_STATES = ("Ongoing", "PrepareAbort", "PrepareCommit", "CompleteAbort", "CompleteCommit",
                      "Empty", "PrepareEpochFence")
MAX_BATCH_SIZE = 500  # partitions / topics per request in find-hanging, as Kafka's tool


class CommandError(Exception):
    """A failure reported as one line on stderr, exit status 1."""


def fail(message: str) -> NoReturn:
    raise CommandError(message)


def fail_with(context: str, exc: BaseException) -> NoReturn:
    raise CommandError(f"{context}: {exc}") from None


def state_name(state: str) -> str:
    return state if state in TRANSACTION_STATES else "Unknown"


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None  # None when the broker answers < 0, like Kafka's OptionalInt
    current_txn_start_offset: int | None


@dataclass(slots=True)
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None
    topic_partitions: list[TopicPartition]


# --------------------------------------------------------------------------- output
@dataclass(slots=True)
class Table:
    """Kafka's column headers, JSON keys for the same columns, and typed rows."""

    headers: Sequence[str]
    keys: Sequence[str]
    rows: list[list[Any]]


def cell(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def json_value(value: Any) -> Any:
    if isinstance(value, TopicPartition):
        return {"topic": value.topic, "partition": value.partition}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Kafka's ToolsUtils.prettyPrintTable: pad to the widest cell, a tab after every column."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    lines = ["".join(v.ljust(w) + "\t" for v, w in zip(r, widths)) for r in [list(headers), *rows]]
    return "\n".join(lines) + "\n"


def render(table: Table, as_json: bool, single: bool = False) -> str:
    if as_json:
        objs = [{k: json_value(v) for k, v in zip(table.keys, row)} for row in table.rows]
        return json.dumps(objs[0] if single else objs, indent=2) + "\n"
    return format_table(table.headers, [[cell(v) for v in row] for row in table.rows])


# --------------------------------------------------------------------------- admin operations
class Admin:
    """The admin operations the commands need, over :class:`KafkaClient`."""

    def __init__(self, client: KafkaClient, timeout_ms: int) -> None:
        self.client = client
        self.timeout = timeout_ms / 1000.0

    def deadline(self) -> float:
        return time.monotonic() + self.timeout

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    # -- ListTransactions
    def list_transactions(self, *, states: Sequence[str] = (), producer_ids: Sequence[int] = (),
                          duration_ms: int | None = None, pattern: str | None = None,
                          warn: Callable[[str], None] | None = None) -> dict[int, list[tuple[str, int, str]]]:
        """{broker id: [(transactional id, producer id, state)]} from every broker."""
        fields: dict[str, Any] = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                                  "duration_filter": -1 if duration_ms is None else duration_ms}
        if pattern:
            fields["transactional_id_pattern"] = pattern

        def need(version: int) -> None:
            if duration_ms is not None and duration_ms >= 0 and version < 1:
                raise UnsupportedApi("--duration-filter needs ListTransactions v1, the broker speaks v0")

        deadline = self.deadline()
        brokers = sorted(retry(lambda: self._brokers(), deadline))
        out: dict[int, list[tuple[str, int, str]]] = {}
        for node in brokers:
            def one(node: int = node) -> tuple[Any, int]:
                resp, version = self.client.send(node, LIST_TRANSACTIONS, fields, (0, 2), need)
                check(resp.error_code, retriable=(ErrorCode.coordinator_load_in_progress,))
                return resp, version

            try:
                resp, version = retry(one, deadline)
            except ApiError as exc:
                raise KafkaClientError(f"ListTransactions to broker {node} failed with {exc}") from None
            if resp.unknown_state_filters and warn is not None:
                warn(f"broker {node} does not know the transaction state(s) "
                     f"{', '.join(resp.unknown_state_filters)}")
            listing = [(s.transactional_id, s.producer_id, state_name(s.transaction_state))
                       for s in resp.transaction_states]
            if pattern and version < 2:
                # The broker predates the pattern filter (v2): apply it here, as a full match
                # like the broker's (Java's Matcher.matches()).
                try:
                    regex = re.compile(pattern)
                except re.error as exc:
                    raise ApiError(ErrorCode.invalid_regular_expression, f"{pattern!r}: {exc}") from None
                listing = [entry for entry in listing if regex.fullmatch(entry[0])]
            out[node] = listing
        return out

    def _brokers(self) -> list[int]:
        md = self.client.metadata([])
        if not md.brokers:
            raise RetriableError("the cluster metadata lists no brokers")
        return list(md.brokers)

    # -- DescribeTransactions
    def describe_transactions(self, transactional_ids: Sequence[str]) -> dict[str, TransactionDescription | ApiError]:
        """Each id's description, or its error (TRANSACTIONAL_ID_NOT_FOUND, ...)."""
        pending = list(dict.fromkeys(transactional_ids))
        out: dict[str, TransactionDescription | ApiError] = {}
        deadline = self.deadline()

        def attempt() -> None:
            coordinators = self.client.find_coordinators(pending, TRANSACTION_KEY)
            by_node: dict[int, list[str]] = {}
            for tid in list(pending):
                node = coordinators[tid] if tid in coordinators else RetriableApiError(
                    ErrorCode.coordinator_not_available)
                if isinstance(node, RetriableApiError):
                    continue
                if isinstance(node, ApiError):
                    out[tid] = node
                    pending.remove(tid)
                    continue
                by_node.setdefault(node, []).append(tid)
            for node, ids in by_node.items():
                resp, _ = self.client.send(node, DESCRIBE_TRANSACTIONS, {"transactional_ids": ids}, (0, 0))
                for st in resp.transaction_states:
                    if st.transactional_id not in ids:
                        continue
                    code = int(st.error_code)
                    if code in (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
                                ErrorCode.coordinator_not_available):
                        continue  # find the coordinator again and retry
                    if code:
                        out[st.transactional_id] = ApiError(code)
                    else:
                        start = to_ms(st.transaction_start_time)
                        out[st.transactional_id] = TransactionDescription(
                            node, st.transactional_id, state_name(st.transaction_state), st.producer_id,
                            st.producer_epoch, to_ms(st.transaction_timeout),
                            start if start >= 0 else None,
                            sorted(TopicPartition(t.topic, p) for t in st.topics for p in t.partitions))
                    pending.remove(st.transactional_id)
            if pending:
                last = next((c for c in (coordinators.get(t) for t in pending)
                             if isinstance(c, RetriableApiError)), None)
                raise last or RetriableApiError(ErrorCode.coordinator_load_in_progress)

        retry(attempt, deadline)
        return out

    # -- the transaction log
    def transaction_version(self, d: TransactionDescription) -> int | None:
        """The client transaction version of ``d``'s latest record in ``__transaction_state``
        (None if no record for it is found), read from its coordinator, which leads the
        partition holding it."""
        from coordinator.transaction import log as txn_log

        deadline = self.deadline()
        info = retry(self._transaction_state_topic, deadline)
        partition = txn_log.partition_for(d.transactional_id, len(info.partitions))
        found: int | None = None
        offset, end = 0, None
        while end is None or offset < end:
            part = retry(partial(self._fetch_transaction_log, d.coordinator_id, partition, offset), deadline)
            if part.error_code == ErrorCode.offset_out_of_range and part.log_start_offset > offset:
                offset = part.log_start_offset  # the log's start moved (compaction, retention)
                continue
            check(part.error_code)
            end = part.high_watermark
            offset = max(offset, part.log_start_offset)
            records, before = bytes(part.records or b""), offset
            for key, value, next_offset in _log_records(records):
                offset = max(offset, next_offset)
                if key is not None and txn_log.decode_key(key) == d.transactional_id:
                    found = None if value is None else txn_log.decode_value(value).client_transaction_version
            if offset == before:  # nothing complete came back
                break
        return found

    def _transaction_state_topic(self):
        info = self.client.metadata([TRANSACTION_STATE_TOPIC]).topics.get(TRANSACTION_STATE_TOPIC)
        if info is None or info.error_code or not info.partitions:
            raise RetriableApiError(info.error_code if info else ErrorCode.unknown_topic_or_partition)
        return info

    def _fetch_transaction_log(self, node: int, partition: int, offset: int):
        resp, _ = self.client.send(node, FETCH, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": FETCH_BYTES, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": TRANSACTION_STATE_TOPIC, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": FETCH_BYTES}]}],
        }, (12, 12))
        check(resp.error_code)
        return resp.responses[0].partitions[0]

    # -- DescribeProducers
    def describe_producers(self, partitions: Sequence[TopicPartition], broker_id: int | None = None
                           ) -> dict[TopicPartition, list[ProducerState]]:
        """Producer states of each partition, from its leader (or from ``broker_id``)."""
        pending = list(dict.fromkeys(partitions))
        out: dict[TopicPartition, list[ProducerState]] = {}
        deadline = self.deadline()

        def attempt() -> None:
            targets = self._route(pending, broker_id)
            for node, tps in targets.items():
                topics: dict[str, list[int]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(tp.partition)
                resp, _ = self.client.send(node, DESCRIBE_PRODUCERS, {"topics": [
                    {"name": t, "partition_indexes": ps} for t, ps in topics.items()]}, (0, 0))
                for t in resp.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if tp not in pending:
                            continue
                        code = int(p.error_code)
                        if code:
                            self._producers_error(tp, code, p.error_message, node, broker_id)
                            continue
                        out[tp] = [ProducerState(
                            s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                            s.coordinator_epoch if s.coordinator_epoch >= 0 else None,
                            s.current_txn_start_offset if s.current_txn_start_offset >= 0 else None)
                            for s in p.active_producers]
                        pending.remove(tp)
            if pending:
                raise RetriableApiError(ErrorCode.not_leader_or_follower,
                                        f"no answer yet for {', '.join(map(str, pending))}")

        retry(attempt, deadline)
        return out

    def _route(self, partitions: Sequence[TopicPartition], broker_id: int | None
               ) -> dict[int, list[TopicPartition]]:
        if broker_id is not None:
            self.client.connection(broker_id)  # fails clearly if the broker is unknown
            return {broker_id: list(partitions)}
        md = self.client.metadata(sorted({tp.topic for tp in partitions}))
        targets: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            info = md.topics.get(tp.topic)
            if info is None or info.error_code == ErrorCode.unknown_topic_or_partition:
                raise ApiError(ErrorCode.unknown_topic_or_partition, f"topic {tp.topic} does not exist")
            check(info.error_code, retriable=(ErrorCode.leader_not_available,))
            p = info.partitions.get(tp.partition)
            if p is None:
                n = len(info.partitions)
                raise ApiError(ErrorCode.unknown_topic_or_partition,
                               f"topic {tp.topic} has no partition {tp.partition} "
                               f"(it has {n} partition{'s' if n != 1 else ''})")
            if p.leader < 0:
                raise RetriableApiError(ErrorCode.leader_not_available, f"{tp} has no leader")
            targets.setdefault(p.leader, []).append(tp)
        return targets

    @staticmethod
    def _producers_error(tp: TopicPartition, code: int, message: str | None, node: int,
                         broker_id: int | None) -> None:
        if broker_id is None and code in (ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
                                          ErrorCode.unknown_topic_or_partition):
            return  # the leader moved or is not ready yet: route again (retry)
        if code == ErrorCode.not_leader_or_follower and broker_id is not None:
            raise ApiError(code, f"broker {broker_id} is not a replica of {tp}")
        raise ApiError(code, message)

    # -- WriteTxnMarkers
    def abort_transaction(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int) -> None:
        """An ABORT marker for the producer's open transaction, written by the partition leader."""
        fields = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                               "transaction_result": False, "coordinator_epoch": coordinator_epoch,
                               "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}]}]}

        def attempt() -> None:
            leader = self._route([tp], None)
            (node,) = leader
            resp, _ = self.client.send(node, WRITE_TXN_MARKERS, fields, (1, 1))
            try:
                (marker,) = resp.markers
                (topic,) = marker.topics
                (part,) = topic.partitions
            except ValueError:
                raise KafkaClientError(f"WriteTxnMarkers response of broker {node} has unexpected "
                                       f"entries: {resp}") from None
            if marker.producer_id != producer_id or topic.name != tp.topic or part.partition_index != tp.partition:
                raise KafkaClientError(f"WriteTxnMarkers response of broker {node} is for another "
                                       f"partition or producer: {resp}")
            check(part.error_code, retriable=(ErrorCode.not_leader_or_follower, ErrorCode.replica_not_available,
                                              ErrorCode.broker_not_available,
                                              ErrorCode.unknown_topic_or_partition))

        try:
            retry(attempt, self.deadline())
        except RetriableApiError as exc:
            raise ApiError(exc.code, exc.detail) from None

    # -- topics
    def partitions_of(self, topics: Sequence[str] | None, broker_id: int | None) -> list[TopicPartition]:
        """Partitions of ``topics`` (None: all non-internal topics) with a replica on ``broker_id``."""
        md = self.client.metadata(None if topics is None else list(topics))
        names = [n for n, t in sorted(md.topics.items()) if not t.is_internal] if topics is None else topics
        out = []
        for name in names:
            info = md.topics.get(name)
            if info is None:
                raise ApiError(ErrorCode.unknown_topic_or_partition, f"topic {name} does not exist")
            if info.error_code == ErrorCode.unknown_topic_or_partition:
                raise ApiError(info.error_code, f"topic {name} does not exist")
            check(info.error_code)
            for p in sorted(info.partitions):
                if broker_id is None or broker_id in info.partitions[p].replicas:
                    out.append(TopicPartition(name, p))
        return out


# --------------------------------------------------------------------------- commands
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
LIST_KEYS = ("transactional_id", "coordinator", "producer_id", "transaction_state")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
DESCRIBE_KEYS = ("coordinator_id", "transactional_id", "producer_id", "producer_epoch", "transaction_state",
                 "transaction_timeout_ms", "current_transaction_start_time_ms", "transaction_duration_ms",
                 "topic_partitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                     "LastTimestamp", "CurrentTransactionStartOffset")
PRODUCERS_KEYS = ("producer_id", "producer_epoch", "latest_coordinator_epoch", "last_sequence",
                  "last_timestamp", "current_transaction_start_offset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")
HANGING_KEYS = ("topic", "partition", "producer_id", "producer_epoch", "coordinator_epoch", "start_offset",
                "last_timestamp", "duration_min")


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def cmd_list(admin: Admin, ns: argparse.Namespace) -> str:
    states = [s for arg in ns.state or () for s in arg.split(",") if s]
    try:
        result = admin.list_transactions(states=states, producer_ids=ns.producer_id or (),
                                         duration_ms=ns.duration_filter, pattern=ns.transactional_id_pattern,
                                         warn=warn)
    except KafkaClientError as exc:
        fail_with("Failed to list transactions", exc)
    rows = [[tid, node, pid, state] for node in sorted(result) for tid, pid, state in result[node]]
    return render(Table(LIST_HEADERS, LIST_KEYS, rows), ns.json)


def _log_records(buf: bytes):
    """(key, value, next offset) of each record of the complete batches in a Fetch's records."""
    from protocol import records as rb

    for pos, header in rb.iter_batches(buf):
        for r in rb.decode_records(buf, pos)[1]:
            yield r.key, r.value, r.offset + 1
        yield None, None, header.base_offset + header.last_offset_delta + 1  # past the batch (compacted)


def cmd_describe(admin: Admin, ns: argparse.Namespace) -> str:
    tid = ns.transactional_id
    context = f"Failed to describe transaction state of transactional-id `{tid}`"
    try:
        result = admin.describe_transactions([tid])[tid]
    except KafkaClientError as exc:
        fail_with(context, exc)
    if isinstance(result, ApiError):
        fail_with(context, result)
    d = result
    start = d.transaction_start_time_ms
    duration = None if start is None else admin.now_ms() - start
    row = [d.coordinator_id, tid, d.producer_id, d.producer_epoch, d.state, d.transaction_timeout_ms,
           start, duration, d.topic_partitions]
    headers, keys = DESCRIBE_HEADERS, DESCRIBE_KEYS
    if ns.show_version:
        try:
            row.append(admin.transaction_version(d))
        except KafkaClientError as exc:
            fail_with(f"Failed to read the transaction log of transactional-id `{tid}`", exc)
        headers, keys = (*headers, "TransactionVersion"), (*keys, "transaction_version")
    return render(Table(headers, keys, [row]), ns.json, single=True)


def cmd_describe_producers(admin: Admin, ns: argparse.Namespace) -> str:
    tp = TopicPartition(ns.topic, ns.partition)
    where = "leader" if ns.broker_id is None else f"broker {ns.broker_id}"
    try:
        producers = admin.describe_producers([tp], ns.broker_id)[tp]
    except KafkaClientError as exc:
        fail_with(f"Failed to describe producers for partition {tp} on {where}", exc)
    rows = [[p.producer_id, p.producer_epoch, -1 if p.coordinator_epoch is None else p.coordinator_epoch,
             p.last_sequence, p.last_timestamp, p.current_txn_start_offset] for p in producers]
    return render(Table(PRODUCERS_HEADERS, PRODUCERS_KEYS, rows), ns.json)


def find_hanging(admin: Admin, partitions: Sequence[TopicPartition], broker_id: int | None,
                 max_timeout_ms: int) -> list[tuple[TopicPartition, ProducerState]]:
    """Kafka's FindHangingTransactionsCommand, from the partitions to search onwards."""
    candidates: list[tuple[TopicPartition, ProducerState]] = []
    for i in range(0, len(partitions), MAX_BATCH_SIZE):
        batch = partitions[i:i + MAX_BATCH_SIZE]
        where = f"broker {broker_id}" if broker_id is not None else "their leaders"
        try:
            states = admin.describe_producers(batch, broker_id)
        except KafkaClientError as exc:
            fail_with(f"Failed to describe producers for {len(batch)} partitions on {where}", exc)
        now = admin.now_ms()
        for tp in batch:
            for p in states.get(tp, ()):
                if p.current_txn_start_offset is not None and now - p.last_timestamp > max_timeout_ms:
                    candidates.append((tp, p))
    if not candidates:
        return []
    pids = sorted({p.producer_id for _, p in candidates})
    try:
        listings = admin.list_transactions(producer_ids=pids)
    except KafkaClientError as exc:
        fail_with(f"Failed to list transactions for {len(pids)} producers", exc)
    txn_ids: dict[int, str] = {}
    for entries in listings.values():
        for tid, pid, _state in entries:
            if pid in pids:
                txn_ids[pid] = tid
    descriptions: dict[str, TransactionDescription | ApiError] = {}
    if txn_ids:
        try:
            descriptions = admin.describe_transactions(sorted(set(txn_ids.values())))
        except KafkaClientError as exc:
            fail_with(f"Failed to describe {len(set(txn_ids.values()))} transactions", exc)
        for d in descriptions.values():
            if isinstance(d, ApiError) and d.code != ErrorCode.transactional_id_not_found:
                fail_with(f"Failed to describe {len(descriptions)} transactions", d)
    hanging = []
    for tp, p in candidates:
        tid = txn_ids.get(p.producer_id)
        d = descriptions.get(tid) if tid is not None else None
        # No transactional id for the producer id, an id the coordinator no longer knows, or a
        # transaction that does not include this partition: no coordinator will write the marker.
        if not isinstance(d, TransactionDescription) or tp not in d.topic_partitions:
            hanging.append((tp, p))
    # Kafka groups the candidates by producer id (a HashMap: ascending for small ids), then
    # lists each producer's partitions; the same order, made deterministic.
    return sorted(hanging, key=lambda h: (h[1].producer_id, h[0]))


def cmd_find_hanging(admin: Admin, ns: argparse.Namespace) -> str:
    if ns.topic is None and ns.broker_id is None:
        fail("The `find-hanging` command requires either --topic or --broker-id to limit the scope of "
             "the search")
    if ns.partition is not None and ns.topic is None:
        fail("The --partition argument requires --topic to be provided")
    max_timeout_ms = ns.max_transaction_timeout * 60_000
    if ns.partition is not None:
        partitions = [TopicPartition(ns.topic, ns.partition)]
    else:
        topics = None if ns.topic is None else [ns.topic]
        try:
            partitions = admin.partitions_of(topics, ns.broker_id)
        except KafkaClientError as exc:
            what = "list topics" if topics is None else "describe 1 topics"
            fail_with(f"Failed to {what}", exc)
    hanging = find_hanging(admin, partitions, ns.broker_id, max_timeout_ms)
    now = admin.now_ms()
    rows = [[tp.topic, tp.partition, p.producer_id, p.producer_epoch,
             -1 if p.coordinator_epoch is None else p.coordinator_epoch,
             -1 if p.current_txn_start_offset is None else p.current_txn_start_offset,
             p.last_timestamp, int((now - p.last_timestamp) / 60_000)] for tp, p in hanging]
    return render(Table(HANGING_HEADERS, HANGING_KEYS, rows), ns.json)


def cmd_abort(admin: Admin, ns: argparse.Namespace) -> str:
    tp = TopicPartition(ns.topic, ns.partition)
    if ns.start_offset is None and ns.producer_id is None:
        fail("The transaction to abort must be identified either with --start-offset (for brokers on "
             "3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older "
             "brokers)")
    if ns.start_offset is None:
        if ns.producer_epoch is None:
            fail("Missing required argument --producer-epoch")
        if ns.coordinator_epoch is None:
            fail("Missing required argument --coordinator-epoch")
        # A transaction started by a new producer id that hung before its first commit/abort
        # shows coordinator epoch -1 in DescribeProducers; 0 is <= any real coordinator epoch.
        pid, epoch, cepoch = ns.producer_id, ns.producer_epoch, max(ns.coordinator_epoch, 0)
    else:
        try:
            producers = admin.describe_producers([tp])[tp]
        except KafkaClientError as exc:
            fail_with(f"Failed to validate producer state for partition {tp}", exc)
        found = next((p for p in producers if p.current_txn_start_offset == ns.start_offset), None)
        if found is None:
            fail(f"Could not find any open transactions starting at offset {ns.start_offset} on "
                 f"partition {tp}")
        pid, epoch = found.producer_id, found.producer_epoch
        cepoch = found.coordinator_epoch if found.coordinator_epoch is not None else 0
    spec = (f"AbortTransactionSpec(topicPartition={tp}, producerId={pid}, producerEpoch={epoch}, "
            f"coordinatorEpoch={cepoch})")
    try:
        admin.abort_transaction(tp, pid, epoch, cepoch)
    except KafkaClientError as exc:
        fail_with(f"Failed to abort transaction {spec}", exc)
    if ns.json:
        return json.dumps({"topic": tp.topic, "partition": tp.partition, "producer_id": pid,
                           "producer_epoch": epoch, "coordinator_epoch": cepoch, "aborted": True},
                          indent=2) + "\n"
    return ""


COMMANDS: dict[str, Callable[[Admin, argparse.Namespace], str]] = {
    "list": cmd_list,
    "describe": cmd_describe,
    "describe-producers": cmd_describe_producers,
    "abort": cmd_abort,
    "find-hanging": cmd_find_hanging,
}


# --------------------------------------------------------------------------- arguments
class _Parser(argparse.ArgumentParser):
    """Kafka's tool exits with status 1 on a usage error; so do we."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def _int_arg(bits: int, name: str) -> Callable[[str], int]:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"could not convert '{text}' to {name}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text} is out of range for {name}")
        return value

    parse.__name__ = name
    return parse


INT = _int_arg(32, "Integer")
LONG = _int_arg(64, "Long")
SHORT = _int_arg(16, "Short")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("kbroker")
    except Exception:
        return "unknown"


def _json_flag() -> argparse.ArgumentParser:
    """``--json`` accepted before or after the command (a fresh action for each parser: a
    shared one would take the top-level default and reset a flag given before the command)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON instead of a table (not in Kafka's tool)")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG, parents=[_json_flag()],
        description="This tool is used to analyze the transactional state of producers in the cluster. "
                    "It can be used to detect and recover from hanging transactions.")
    parser.set_defaults(json=False)
    parser.add_argument("-v", "--version", action="version", version=f"kbroker {_version()}",
                        help="show the version of this tool and exit")
    parser.add_argument("--command-config", metavar="FILE",
                        help="property file with client configs (client.id, request.timeout.ms, "
                             "default.api.timeout.ms; security settings other than PLAINTEXT are refused)")
    parser.add_argument("--bootstrap-server", metavar="host:port", required=True,
                        help="hostname and port for the broker to connect to, in the form `host:port` "
                             "(multiple comma-separated entries can be given)")
    parser.add_argument("--timeout-ms", type=INT, default=None,
                        help="how long to retry retriable errors, in ms (default 30000; not in Kafka's tool)")
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND", required=True,
                                parser_class=_Parser)

    p = sub.add_parser("list", parents=[_json_flag()], help="list transactions")
    p.add_argument("--duration-filter", type=LONG,
                   help="Duration (in millis) to filter by: if < 0, all transactions will be returned; "
                        "otherwise, only transactions running longer than this duration will be returned")
    p.add_argument("--transactional-id-pattern",
                   help="Transactional id regular expression pattern to filter by")
    p.add_argument("--state", action="append", metavar="STATE",
                   help=f"only transactions in this state, repeatable or comma-separated "
                        f"({', '.join(TRANSACTION_STATES)}; not in Kafka's tool)")
    p.add_argument("--producer-id", action="append", type=LONG,
                   help="only the transaction of this producer id, repeatable (not in Kafka's tool)")

    p = sub.add_parser("describe", parents=[_json_flag()], description="Describe the state of an active transactional-id.",
                       help="describe the state of an active transactional-id")
    p.add_argument("--transactional-id", required=True, help="transactional id")
    p.add_argument("--show-version", action="store_true",
                   help="also show the transaction's version (0-2), read from __transaction_state")

    p = sub.add_parser("describe-producers", parents=[_json_flag()],
                       help="describe the states of active producers for a topic partition")
    p.add_argument("--broker-id", type=INT,
                   help="optional broker id to describe the producer state on a specific replica")
    p.add_argument("--topic", required=True, help="topic name")
    p.add_argument("--partition", type=INT, required=True, help="partition number")

    p = sub.add_parser("abort", parents=[_json_flag()],
                       help="abort a hanging transaction (requires administrative privileges)")
    p.add_argument("--topic", required=True, help="topic name")
    p.add_argument("--partition", type=INT, required=True, help="partition number")
    g = p.add_argument_group("Brokers on versions 3.0 and above",
                             "For newer brokers, only the start offset of the transaction to be aborted "
                             "is required")
    g.add_argument("--start-offset", type=LONG, help="start offset of the transaction to abort")
    g = p.add_argument_group("Brokers on versions older than 3.0",
                             "For older brokers, you must provide all of these arguments")
    g.add_argument("--producer-id", type=LONG, help="producer id")
    g.add_argument("--producer-epoch", type=SHORT, help="producer epoch")
    g.add_argument("--coordinator-epoch", type=INT, help="coordinator epoch")

    p = sub.add_parser("find-hanging", parents=[_json_flag()], help="find hanging transactions")
    p.add_argument("--broker-id", type=INT, help="broker id to search for hanging transactions")
    p.add_argument("--max-transaction-timeout", type=INT, default=15,
                   help="maximum transaction timeout in minutes to limit the scope of the search "
                        "(15 minutes by default)")
    p.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    p.add_argument("--partition", type=INT, help="partition number")
    return parser


def load_properties(path: str) -> dict[str, str]:
    """A Java .properties file (key=value or key: value, # and ! comments)."""
    props: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for raw in f:
                line = raw.strip()
                if not line or line[0] in "#!":
                    continue
                m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
                if m:
                    props[m.group(1)] = m.group(2)
    except OSError as exc:
        fail(f"Failed to load admin client properties: {exc.strerror or exc}: {path}")
    return props


def client_settings(ns: argparse.Namespace) -> tuple[str, float, int]:
    """(client id, request timeout s, retry timeout ms) from --command-config and --timeout-ms."""
    props = load_properties(ns.command_config) if ns.command_config else {}
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT":
        fail(f"security.protocol={protocol} is not supported by this tool (PLAINTEXT only)")

    def number(key: str, default: int) -> int:
        try:
            return int(props.get(key, default))
        except ValueError:
            fail(f"Invalid value {props[key]!r} for {key} in {ns.command_config}")

    client_id = props.get("client.id", "kbroker-transactions")
    request_timeout = number("request.timeout.ms", 30000) / 1000.0
    timeout_ms = ns.timeout_ms if ns.timeout_ms is not None else number("default.api.timeout.ms", 30000)
    return client_id, request_timeout, timeout_ms


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        client_id, request_timeout, timeout_ms = client_settings(ns)
        try:
            client = KafkaClient(ns.bootstrap_server, client_id=client_id, request_timeout=request_timeout)
        except ValueError as exc:
            fail(str(exc))
        with client:
            out = COMMANDS[ns.command](Admin(client, timeout_ms), ns)
    except CommandError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except ConnectError as exc:  # outside a command's own context
        print(f"Failed to connect: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    try:
        sys.stdout.write(out)
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
