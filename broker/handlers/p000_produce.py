"""Produce: v0-13 advertised, v3-13 served

Behavior:
- Appends each partition's record batch with the leader's epoch stamped in, offsets assigned
  and, for LogAppendTime topics, the append time (CRC recomputed).
- v3+: magic 2 only and exactly one batch per partition, else INVALID_RECORD; a bad CRC is
  CORRUPT_MESSAGE; zstd before v7 is UNSUPPORTED_COMPRESSION_TYPE; acks other than 0, 1, -1
  is INVALID_REQUIRED_ACKS; a batch above max.message.bytes is MESSAGE_TOO_LARGE.
- Idempotent producers: a retried batch within the last five of its producer is answered
  with its original offsets; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER; a stale epoch is
  INVALID_PRODUCER_EPOCH.
- acks=0: no response; any error closes the connection, as Kafka does, so the client learns.
- Transactional batches need a transactional id (else the whole request fails with
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
- With an authorizer: transactional batches need WRITE on the transactional id (else the
  whole request fails with TRANSACTIONAL_ID_AUTHORIZATION_FAILED), each topic WRITE (else
  TOPIC_AUTHORIZATION_FAILED for its partitions), as Kafka's KafkaApis. Before a producer's first transactional append to a
  partition the transaction coordinator verifies that the partition is in its ongoing
  transaction (KIP-890 part 1, ``transaction.partition.verification.enable``); an unverified
  append gets INVALID_TXN_STATE (TRANSACTION_ABORTABLE from v11), and so does one whose
  transaction a marker ended while it was being verified (Kafka's verification guard: a
  delayed batch never opens a transaction nobody will end). A non-transactional batch
  from a producer with an open transaction on the partition is INVALID_TXN_STATE.
- acks=0/1 answer after the leader's append; acks=all (-1) first needs an ISR of at least
  ``min.insync.replicas`` (else NOT_ENOUGH_REPLICAS, nothing appended), then waits until the
  high watermark passes the batch (REQUEST_TIMED_OUT at the request's timeout;
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile). A partition
  this broker does not lead is NOT_LEADER_OR_FOLLOWER.
- When the flush policy asks for it (log.flush.interval.messages/ms), the response waits for
  the group-committed fsync.
- A client over its ``producer_byte_rate`` or ``request_percentage`` quota gets
  ``throttle_time_ms`` (the larger of the two) and its connection reads nothing more until
  that time has passed (broker/quotas.py); acks=0 is exempt from the request quota.
- v0-2 are advertised (librdkafka enables gzip/snappy only when v0 is in the range) but
  refused with UNSUPPORTED_VERSION per partition, as Kafka 4.x does.
- v13 names topics by id (KIP-516): an id no topic has (the zero id included) gets
  UNKNOWN_TOPIC_ID for each of its partitions, and the response answers by id.

Version notes:
- v3 transactional id, magic 2; v5 log start offset; v7 zstd; v8 record errors (KIP-467:
  each refused record's batch index and reason; the batch is refused as a whole) and message;
  v9 flexible; v10-11 current leader and node endpoints tagged fields (KIP-951), sent with
  NOT_LEADER_OR_FOLLOWER; v11 TRANSACTION_ABORTABLE (KIP-890).
- v12 is v11's layout; a transactional batch at v12+ adds its partition to the transaction
  (KIP-890 part 2, transaction version 2: the leader sends AddPartitionsToTxn without
  verify_only to the coordinator, whatever the verification setting); below v12 it is
  verified. The Java client sends v12+ only when ``transaction.version`` 2 is finalized
  (``ProduceRequest.builder(data, useTransactionV1Version)``).
- v13 topic ids instead of names (KIP-516), as Fetch v13+. The Java 4.x producer uses it
  whenever its metadata has the topic's id.
"""

import asyncio
import struct

from protocol import fast
from protocol import records as rb
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, ResourceType, authorize, denied
from ..quotas import PRODUCE
from ..request_context import NO_RESPONSE, CloseConnection, RequestContext

VALID_ACKS = (0, 1, -1)
# From v12 a transactional produce adds its partition (Kafka's produceRequestVersionToTransactionSupportedOperation).
ADD_PARTITION_VERSION = 12


async def handle_produce(ctx: RequestContext, request):
    version = ctx.api_version
    acks = request.acks
    rm = ctx.services.replica_manager
    if _has_transactional_batch(request) and not _transactional_id_authorized(ctx, request.transactional_id):
        # Kafka fails the whole request when transactional records come without an id (or
        # without WRITE on it).
        return _whole_request_error(request, version, acks, ErrorCode.transactional_id_authorization_failed)
    names = [_topic_name(ctx, topic, version) for topic in request.topic_data]
    unauthorized = denied(ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
    verified, guards = await _verify_transactional_partitions(ctx, request, names)
    results = []
    flush_targets = []
    delayed = []
    any_error = False
    for topic, name in zip(request.topic_data, names, strict=True):
        parts = []
        for pd in topic.partition_data:
            error, base_offset, append_time, log_start, message, record_errors = 0, -1, -1, -1, None, []
            try:
                if name is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, None)
                if name in unauthorized:
                    raise KafkaError(ErrorCode.topic_authorization_failed, None)
                if acks not in VALID_ACKS:
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks={acks} is not 0, 1 or -1")
                _check_single_batch(pd.records, version)
                failed = verified.get((name, pd.index))
                if failed:
                    raise KafkaError(failed, "Record was not part of an ongoing transaction"
                                     if failed == ErrorCode.invalid_txn_state else None)
                guard = guards.get((name, pd.index))
                if guard is not None:  # no await from here to the append
                    rm.check_verification(name, pd.index, pd.records, guard)
                info = rm.append(name, pd.index, pd.records, acks=acks)
                base_offset, append_time, log_start = info.base_offset, info.log_append_time, info.log_start_offset
                if rm.needs_flush(name, pd.index):
                    flush_targets.append(rm.get(name, pd.index).log)
                if acks == -1:
                    waiter = rm.delayed_produce(name, pd.index, info.last_offset + 1)
                    if waiter is not None:
                        delayed.append((parts, len(parts), waiter))
            except KafkaError as exc:
                error, message, record_errors = int(exc.code), exc.message, exc.record_errors
                if record_errors:  # Kafka's processFailedRecord answers the log start offset
                    log_start = rm.get(name, pd.index).log.log_start_offset
                any_error = True
                ctx.services.metrics.errors.labels("Produce", exc.code.name).inc()
                leader = _current_leader(ctx, name, pd.index, exc.code)
                if leader is not None:
                    parts.append((pd.index, error, base_offset, append_time, log_start, message,
                                  record_errors, leader))
                    continue
            parts.append((pd.index, error, base_offset, append_time, log_start, message, record_errors))
        results.append((_topic_key(topic, version), parts))
    if flush_targets:
        await rm.flush(flush_targets)
    if delayed:
        await _await_replication(ctx, delayed, request.timeout.total_seconds())
    throttle = max(ctx.throttle_time_ms(PRODUCE, sum(len(pd.records or b"") for t in request.topic_data
                                                     for pd in t.partition_data)),
                   ctx.request_throttle_ms())
    if acks == 0:
        if any_error:
            raise CloseConnection("error on an acks=0 produce")
        return NO_RESPONSE
    return fast.encode_produce_response(version, results, throttle_time_ms=throttle,
                                        node_endpoints=_leader_endpoints(ctx, results))


def _transactional_id_authorized(ctx: RequestContext, transactional_id: str | None) -> bool:
    return transactional_id is not None and authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                      transactional_id)


def _topic_name(ctx: RequestContext, topic, version: int) -> str | None:
    """The topic's name; from v13 looked up by its id (None when no topic has that id)."""
    if version < 13:
        return topic.name
    found = ctx.services.metadata.topic_by_id(topic.topic_id)
    return found.name if found else None


def _topic_key(topic, version: int):
    """What the response names the topic by: the name, or from v13 the requested id."""
    return topic.topic_id if version >= 13 else topic.name


def _current_leader(ctx: RequestContext, topic: str | None, index: int, code) -> tuple[int, int] | None:
    """KIP-951: with NOT_LEADER_OR_FOLLOWER, where the partition is led now."""
    if code != ErrorCode.not_leader_or_follower or topic is None:
        return None
    state = ctx.services.metadata.partition(topic, index)
    return None if state is None or state.leader < 0 else (state.leader, state.leader_epoch)


def _leader_endpoints(ctx: RequestContext, results: list) -> list | None:
    leaders = {p[7][0] for _, parts in results for p in parts if len(p) > 7}
    if not leaders:
        return None
    return [b for b in ctx.services.metadata.brokers_on(ctx.listener) if b[0] in leaders]


async def _await_replication(ctx: RequestContext, delayed: list, timeout_s: float) -> None:
    """acks=all: wait (at most the request's timeout) for the high watermark to pass each
    append; REQUEST_TIMED_OUT for those it did not, NOT_ENOUGH_REPLICAS_AFTER_APPEND when the
    ISR shrank below min.insync.replicas meanwhile."""
    done, _ = await asyncio.wait([w for _, _, w in delayed], timeout=max(timeout_s, 0.001))
    for parts, i, waiter in delayed:
        code = waiter.result() if waiter in done else ErrorCode.request_timed_out
        if not waiter.done():
            waiter.cancel()
        if code:
            index, _, _, _, log_start, *_ = parts[i]
            parts[i] = (index, int(code), -1, -1, log_start, ErrorCode(code).name, [])
            ctx.services.metrics.errors.labels("Produce", ErrorCode(code).name).inc()


def _check_single_batch(records, version: int) -> None:
    if not records or len(records) < rb.LOG_OVERHEAD + 5:
        raise KafkaError(ErrorCode.invalid_record, "produce request carries no record batch")
    if records[rb.MAGIC_OFFSET] != 2:
        raise KafkaError(ErrorCode.invalid_record,
                         f"magic {records[rb.MAGIC_OFFSET]} is not allowed on Produce v3+")
    (length,) = struct.unpack_from(">i", records, 8)
    if length + rb.LOG_OVERHEAD != len(records):
        if length + rb.LOG_OVERHEAD > len(records):
            raise KafkaError(ErrorCode.invalid_record, "record batch is truncated")
        raise KafkaError(ErrorCode.invalid_record, "Produce v3+ carries exactly one record batch")
    if len(records) >= rb.HEADER_SIZE:
        (attributes,) = struct.unpack_from(">h", records, rb.ATTRIBUTES_OFFSET)
        if attributes & rb.ATTR_COMPRESSION_MASK == rb.COMPRESSION_ZSTD and version < 7:
            raise KafkaError(ErrorCode.unsupported_compression_type, "zstd needs Produce v7+")


def refuse_legacy_produce(frame: bytes, body_offset: int, version: int) -> bytes:
    """Answer Produce v0-2 with UNSUPPORTED_VERSION for each partition (hand-parsed request)."""
    pos = body_offset
    (acks, _timeout, n_topics) = struct.unpack_from(">hii", frame, pos)
    pos += 10
    out = [struct.pack(">i", n_topics)]
    for _ in range(n_topics):
        (n,) = struct.unpack_from(">h", frame, pos)
        name = frame[pos + 2 : pos + 2 + n]
        pos += 2 + n
        (n_parts,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        out.append(struct.pack(">h", n) + name + struct.pack(">i", n_parts))
        for _ in range(n_parts):
            (index, size) = struct.unpack_from(">ii", frame, pos)
            pos += 8 + max(size, 0)
            out.append(struct.pack(">ihq", index, ErrorCode.unsupported_version, -1))
            if version >= 2:
                out.append(struct.pack(">q", -1))
    if version >= 1:
        out.append(struct.pack(">i", 0))
    return b"".join(out)


register(0, 0, 13, refused_below=3, legacy=refuse_legacy_produce)(handle_produce)


def _has_transactional_batch(request) -> bool:
    for topic in request.topic_data:
        for pd in topic.partition_data:
            records = pd.records
            if records and len(records) >= rb.HEADER_SIZE:
                (attributes,) = struct.unpack_from(">h", records, rb.ATTRIBUTES_OFFSET)
                if attributes & rb.ATTR_TRANSACTIONAL:
                    return True
    return False


def _whole_request_error(request, version: int, acks: int, code: ErrorCode):
    if acks == 0:
        raise CloseConnection(f"{code.name} on an acks=0 produce")
    return fast.encode_produce_response(version, [
        (_topic_key(t, version), [(pd.index, int(code), -1, -1, -1, None, []) for pd in t.partition_data])
        for t in request.topic_data])


async def _verify_transactional_partitions(ctx: RequestContext, request, names: list[str | None]
                                          ) -> tuple[dict, dict]:
    """KIP-890 part 1: before a producer's first transactional append to a partition, ask the
    transaction coordinator whether the partition is in its ongoing transaction (from v12,
    part 2: have it added).

    Each partition verified gets a verification guard before the wait (Kafka's
    ``VerificationGuard``): a marker landing meanwhile clears it, and the append then fails
    with INVALID_TXN_STATE instead of opening a transaction that already ended.

    The coordinator may be on another broker: then AddPartitionsToTxn v4 (verify_only) goes
    to it, batched per coordinator node (``broker/txn_verification.py``). Returns (topic, partition) -> error
    code for the partitions that failed, and (topic, partition) -> guard. Errors are mapped as Kafka maps them on the produce
    path: PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE ->
    INVALID_TXN_STATE before Produce v11, and coordinator errors (NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS) ->
    NOT_ENOUGH_REPLICAS, which producers retry.
    """
    broker = ctx.services
    coordinator = getattr(broker, "txn_coordinator", None)
    add = ctx.api_version >= ADD_PARTITION_VERSION
    if coordinator is None or not (add or broker.config["transaction.partition.verification.enable"]):
        return {}, {}
    rm = broker.replica_manager
    guards = {}
    pending: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for topic, name in zip(request.topic_data, names, strict=True):
        for pd in topic.partition_data:
            part = rm.partitions.get((name, pd.index))
            records = pd.records
            if part is None or not records or len(records) < rb.HEADER_SIZE:
                continue
            try:
                header = rb.parse_header(records)
            except struct.error:
                continue
            if part.log.producer_state.needs_verification(header):
                pending.setdefault((header.producer_id, header.producer_epoch), []).append(
                    (name, pd.index))
                guards[(name, pd.index)] = part.log.producer_state.start_verification(
                    header.producer_id, header.producer_epoch, add)
    failed = {}
    if not pending:
        return failed, guards
    for (producer_id, producer_epoch), partitions in pending.items():
        errors = await broker.txn_services.verify_partitions(request.transactional_id, producer_id,
                                                             producer_epoch, partitions, add=add)
        for tp, code in errors.items():
            if code:
                failed[tp] = _produce_error(ErrorCode(code), ctx.api_version)
    return failed, guards


# Coordinator errors a producer does not know on Produce: retriable NOT_ENOUGH_REPLICAS, as Kafka.
_RETRIABLE_COORDINATOR_ERRORS = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                 ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions)


def _produce_error(code: ErrorCode, version: int) -> ErrorCode:
    if code in _RETRIABLE_COORDINATOR_ERRORS:
        return ErrorCode.not_enough_replicas
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if code == ErrorCode.transaction_abortable and version < 11:
        return ErrorCode.invalid_txn_state
    return code
