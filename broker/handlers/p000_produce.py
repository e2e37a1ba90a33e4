"""Produce: v0-11 advertised, v3-11 served

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
- When the flush policy asks for it (log.flush.interval.messages/ms), the response waits for
  the group-committed fsync.
- v0-2 are advertised (librdkafka enables gzip/snappy only when v0 is in the range) but
  refused with UNSUPPORTED_VERSION per partition, as Kafka 4.x does.

Version notes:
- v3 transactional id, magic 2; v5 log start offset; v7 zstd; v8 record errors and message;
  v9 flexible; v10-11 current leader tagged fields (left empty).
"""

import struct

from protocol import fast
from protocol import records as rb
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..server import NO_RESPONSE, CloseConnection, RequestContext

VALID_ACKS = (0, 1, -1)


async def handle_produce(ctx: RequestContext, request):
    version = ctx.api_version
    acks = request.acks
    rm = ctx.broker.replica_manager
    results = []
    flush_targets = []
    any_error = False
    for topic in request.topic_data:
        parts = []
        for pd in topic.partition_data:
            error, base_offset, append_time, log_start, message = 0, -1, -1, -1, None
            try:
                if acks not in VALID_ACKS:
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks={acks} is not 0, 1 or -1")
                _check_single_batch(pd.records, version)
                info = rm.append(topic.name, pd.index, pd.records)
                base_offset, append_time, log_start = info.base_offset, info.log_append_time, info.log_start_offset
                if rm.needs_flush(topic.name, pd.index):
                    flush_targets.append(rm.get(topic.name, pd.index).log)
            except KafkaError as exc:
                error, message = int(exc.code), exc.message
                any_error = True
                ctx.broker.metrics.errors.labels("Produce", exc.code.name).inc()
            parts.append((pd.index, error, base_offset, append_time, log_start, message))
        results.append((topic.name, parts))
    if flush_targets:
        await rm.flush(flush_targets)
    if acks == 0:
        if any_error:
            raise CloseConnection("error on an acks=0 produce")
        return NO_RESPONSE
    return fast.encode_produce_response(version, results)


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


register(0, 0, 11, refused_below=3, legacy=refuse_legacy_produce)(handle_produce)
