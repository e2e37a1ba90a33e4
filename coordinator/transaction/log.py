"""Records of ``__transaction_state``, in Kafka's TransactionLogKey v0 / TransactionLogValue v0
layout (so Kafka's own tooling could read them), and the id -> partition mapping.

Key: version int16 (0), transactional_id string.
Value v0: version int16 (0), producer_id int64, producer_epoch int16, transaction_timeout_ms
int32, transaction_status int8, transaction_partitions nullable array of [topic string,
partition_ids array of int32] (null for Empty), txn_last_update_timestamp_ms int64,
txn_start_timestamp_ms int64. A null value (tombstone) removes the id.

Value v1 (flexible, what Kafka writes from transaction.version 1): the same fields with compact
arrays and strings, and the tagged PreviousProducerId (0), NextProducerId (1) and
ClientTransactionVersion (2), each written only when it is not its default (-1, -1, 0), as
Kafka's generated code writes them. Values are written as v0 at transaction.version 0 and as
v1 above it (:func:`encode_value`); both are read.
"""

from __future__ import annotations

import struct

from protocol.fast import uvarint as _varint

from .state import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnState, TxnTransitMetadata

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")
_V1_HEAD = struct.Struct(">qhib")
_TIMESTAMPS = struct.Struct(">qq")


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: 31*h + c over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``
    (``Utils.abs(Integer.MIN_VALUE)`` is 0)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def _string(s: str) -> bytes:
    b = s.encode()
    return _H.pack(len(b)) + b


def encode_key(transactional_id: str) -> bytes:
    return _H.pack(0) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    (version,) = _H.unpack_from(data, 0)
    if version != 0:
        raise ValueError(f"unknown transaction log key version {version}")
    (n,) = _H.unpack_from(data, 2)
    return data[4 : 4 + n].decode()


def _by_topic(t: TxnTransitMetadata) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(t.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def encode_value(t: TxnTransitMetadata, transaction_version: int = 0) -> bytes:
    """The value as Kafka writes it at the cluster's finalized ``transaction_version``."""
    if transaction_version >= 1:
        return _encode_v1(t)
    out = [_VALUE_HEAD.pack(0, t.producer_id, t.producer_epoch, t.txn_timeout_ms, t.state.id)]
    if t.state is TxnState.EMPTY:
        out.append(_I.pack(-1))
    else:
        by_topic = _by_topic(t)
        out.append(_I.pack(len(by_topic)))
        for topic, parts in by_topic.items():
            out.append(_string(topic) + _I.pack(len(parts)) + b"".join(_I.pack(p) for p in parts))
    out.append(_TIMESTAMPS.pack(t.txn_last_update_timestamp, t.txn_start_timestamp))
    return b"".join(out)


def _encode_v1(t: TxnTransitMetadata) -> bytes:
    out = [_H.pack(1), _V1_HEAD.pack(t.producer_id, t.producer_epoch, t.txn_timeout_ms, t.state.id)]
    if t.state is TxnState.EMPTY:
        out.append(_varint(0))  # null
    else:
        by_topic = _by_topic(t)
        out.append(_varint(len(by_topic) + 1))
        for topic, parts in by_topic.items():
            name = topic.encode()
            out.append(_varint(len(name) + 1) + name + _varint(len(parts) + 1)
                       + b"".join(_I.pack(p) for p in parts) + _varint(0))
    out.append(_TIMESTAMPS.pack(t.txn_last_update_timestamp, t.txn_start_timestamp))
    tags = []
    if t.last_producer_id != NO_PRODUCER_ID:
        tags.append((0, _Q.pack(t.last_producer_id)))
    if t.next_producer_id != NO_PRODUCER_ID:
        tags.append((1, _Q.pack(t.next_producer_id)))
    if t.client_transaction_version != 0:
        tags.append((2, _H.pack(t.client_transaction_version)))
    out.append(_varint(len(tags)))
    for tag, data in tags:
        out.append(_varint(tag) + _varint(len(data)) + data)
    return b"".join(out)


def decode_value(data: bytes) -> TxnTransitMetadata:
    (version,) = _H.unpack_from(data, 0)
    if version == 0:
        return _decode_v0(data)
    if version == 1:
        return _decode_v1(data)
    raise ValueError(f"unknown transaction log value version {version}")


def _transit(producer_id: int, last_producer_id: int, epoch: int, timeout_ms: int, status: int,
             partitions: set[tuple[str, int]], last_update: int, start: int,
             next_producer_id: int = NO_PRODUCER_ID, transaction_version: int = 0) -> TxnTransitMetadata:
    state = TxnState.from_id(status)
    # The last epoch is not persisted (nor in Kafka): it loads as -1.
    return TxnTransitMetadata(producer_id, last_producer_id, epoch, NO_PRODUCER_EPOCH, timeout_ms, state,
                              frozenset(() if state is TxnState.EMPTY else partitions), start, last_update,
                              next_producer_id, transaction_version)


def _decode_v0(data: bytes) -> TxnTransitMetadata:
    _, producer_id, epoch, timeout_ms, status = _VALUE_HEAD.unpack_from(data, 0)
    pos = _VALUE_HEAD.size
    (count,) = _I.unpack_from(data, pos)
    pos += 4
    partitions = set()
    for _ in range(max(count, 0)):
        (n,) = _H.unpack_from(data, pos)
        topic = data[pos + 2 : pos + 2 + n].decode()
        pos += 2 + n
        (k,) = _I.unpack_from(data, pos)
        pos += 4
        for _ in range(k):
            partitions.add((topic, _I.unpack_from(data, pos)[0]))
            pos += 4
    last_update, start = _TIMESTAMPS.unpack_from(data, pos)
    return _transit(producer_id, NO_PRODUCER_ID, epoch, timeout_ms, status, partitions, last_update, start)


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _skip_tags(data: bytes, pos: int) -> tuple[dict[int, bytes], int]:
    count, pos = _uvarint(data, pos)
    tags = {}
    for _ in range(count):
        tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        tags[tag] = data[pos : pos + size]
        pos += size
    return tags, pos


def _decode_v1(data: bytes) -> TxnTransitMetadata:
    producer_id, epoch, timeout_ms, status = _V1_HEAD.unpack_from(data, 2)
    pos = 2 + _V1_HEAD.size
    count, pos = _uvarint(data, pos)  # compact nullable array: length + 1, 0 = null
    partitions = set()
    for _ in range(max(count - 1, 0)):
        n, pos = _uvarint(data, pos)
        topic = data[pos : pos + n - 1].decode()
        pos += n - 1
        k, pos = _uvarint(data, pos)
        for _ in range(k - 1):
            partitions.add((topic, _I.unpack_from(data, pos)[0]))
            pos += 4
        _, pos = _skip_tags(data, pos)
    last_update, start = _TIMESTAMPS.unpack_from(data, pos)
    pos += _TIMESTAMPS.size
    tags, pos = _skip_tags(data, pos)
    previous = _Q.unpack(tags[0])[0] if len(tags.get(0, b"")) == 8 else NO_PRODUCER_ID
    following = _Q.unpack(tags[1])[0] if len(tags.get(1, b"")) == 8 else NO_PRODUCER_ID
    version = _H.unpack(tags[2])[0] if len(tags.get(2, b"")) == 2 else 0
    return _transit(producer_id, previous, epoch, timeout_ms, status, partitions, last_update, start,
                    following, version)
