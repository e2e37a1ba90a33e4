"""Records of ``__transaction_state``, in Kafka's TransactionLogKey v0 / TransactionLogValue v0
layout (so Kafka's own tooling could read them).

Key: version int16 (0), transactional_id string.
Value: version int16 (0), producer_id int64, producer_epoch int16, transaction_timeout_ms
int32, transaction_status int8, transaction_partitions nullable array of [topic string,
partition_ids array of int32] (null for Empty), txn_last_update_timestamp_ms int64,
txn_start_timestamp_ms int64. A null value (tombstone) removes the id.
"""

from __future__ import annotations

import struct

from .state import TxnState, TxnTransitMetadata

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")
_TIMESTAMPS = struct.Struct(">qq")


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


def encode_value(t: TxnTransitMetadata) -> bytes:
    out = [_VALUE_HEAD.pack(0, t.producer_id, t.producer_epoch, t.txn_timeout_ms, t.state.id)]
    if t.state is TxnState.EMPTY:
        out.append(_I.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(t.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out.append(_I.pack(len(by_topic)))
        for topic, parts in by_topic.items():
            out.append(_string(topic) + _I.pack(len(parts)) + b"".join(_I.pack(p) for p in parts))
    out.append(_TIMESTAMPS.pack(t.txn_last_update_timestamp, t.txn_start_timestamp))
    return b"".join(out)


def decode_value(data: bytes) -> TxnTransitMetadata:
    version, producer_id, epoch, timeout_ms, status = _VALUE_HEAD.unpack_from(data, 0)
    if version not in (0, 1):
        raise ValueError(f"unknown transaction log value version {version}")
    if version == 1:
        raise ValueError("transaction log value v1 (flexible) is not written by this broker")
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
    state = TxnState.from_id(status)
    return TxnTransitMetadata(producer_id, -1, epoch, -1, timeout_ms, state,
                              frozenset(() if state is TxnState.EMPTY else partitions), start, last_update)
