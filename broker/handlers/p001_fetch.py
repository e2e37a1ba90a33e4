"""Fetch: v4-18

Behavior:
- Returns whole record batches from each partition's fetch offset up to the high watermark
  (read_uncommitted) or the last stable offset (read_committed, with the aborted
  transactions overlapping the returned range), within partition_max_bytes
  and max_bytes; the first batch is always returned even past those limits (KIP-74).
- Long poll: while fewer than min_bytes are ready, waits up to max_wait_ms and wakes as soon
  as a requested partition's high watermark advances.
- Fetch sessions (KIP-227) as Kafka keeps them (:mod:`broker.fetch_session`): a full fetch
  creates a session, an incremental one answers only the partitions of its session that
  changed; session errors are the answer's top-level error code. A session partition that was
  read to its end with nothing more to tell is not read again until it changes (the session
  is told; a follower's fetches still count as caught up on it), so a fetch costs what changed
  rather than what the session holds (Kafka reads every partition), and a fetch left with
  nothing to read long-polls on the session.
- Offsets outside [log start, log end] get OFFSET_OUT_OF_RANGE; a client leader epoch older
  than ours FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH; an unknown topic
  UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by id, v13+), answered after the partitions
  that were read, as Kafka's "erroneous" ones; by id, a partition of a topic deleted and made
  again under its name INCONSISTENT_TOPIC_ID; a partition this broker does not lead
  NOT_LEADER_OR_FOLLOWER, with the current leader and epoch (KIP-951, v12+ tagged field).
- At most ``fetch.max.bytes`` are read, and for a consumer with a ``consumer_byte_rate`` at
  most what its quota allows at once (Kafka's ``getMaxValueInQuotaWindow``).
- A follower's fetch (replica id >= 0) reads up to the log end offset, records the follower's
  position (which may advance the high watermark and expand the ISR) and, when its
  ``last_fetched_epoch`` ends below the fetch offset in our leader-epoch cache, answers with
  ``diverging_epoch`` and no records so the follower truncates (KIP-320). A fetch from a
  broker outside the partition's assignment gets UNKNOWN_LEADER_EPOCH (NOT_LEADER_OR_FOLLOWER
  when it names no leader epoch) so that it retries, as Kafka's leader answers. A follower
  whose replica state (v15+) names a broker epoch other than its current registration's (a
  fetch of an earlier life of that broker) is not taken into an ISR (KIP-903).
- A follower that tells its high watermark (v18) and is behind ours is answered at once
  instead of long-polling, so the advanced high watermark reaches it without waiting for data.
- With an authorizer: a consumer needs READ on each topic, a follower CLUSTER_ACTION on the
  cluster (never READ on the topic); else TOPIC_AUTHORIZATION_FAILED per partition.
- A consumer over its ``consumer_byte_rate`` quota gets an empty answer with
  ``throttle_time_ms``, and its connection reads nothing more until that time has passed
  (broker/quotas.py; Kafka's throttled fetch response). Over its ``request_percentage`` only,
  it gets its data with the throttle time, and the same mute.

Version notes:
- v4 isolation level, LSO, aborted transactions; v5 log start offset; v7 sessions;
  v9 current leader epoch; v11 rack / preferred replica; v12 flexible; v13 topic ids;
  v14 OFFSET_MOVED_TO_TIERED_STORAGE (never: no tiered storage); v15 replica state;
  v16 node endpoints (left empty).
- v17 adds the follower's ``replica_directory_id`` (KIP-853, tagged): ignored, each broker
  has one log directory and consumers never send it.
- v18 adds the follower's ``high_watermark`` (KIP-1166, tagged; default int64 max, "not
  supported", and -1 "unknown"): see the last behavior, which is the rule Kafka 4.3.1's
  KafkaRaftClient applies to metadata-log fetches (complete when the request's high watermark
  is below its own). Kafka's partition replication ignores the field and would long-poll;
  the answer's content is the same, only sooner. Our own followers send v12. Responses are
  unchanged in v17 and v18.
"""

import time

from protocol import fast
from protocol import records as rb
from protocol.api import register
from protocol.codec import ZERO_UUID
from protocol.errors import ErrorCode, KafkaError
from storage.leader_epoch import UNDEFINED_EPOCH

from ..authorization import AclOperation, ResourceType, authorize_cluster, denied
from ..fetch_session import (
    INVALID_SESSION_ID,
    UNSUPPORTED_HIGH_WATERMARK,
    FetchContext,
    IncrementalFetchContext,
    new_context,
)
from ..quotas import FETCH, user_name
from ..request_context import RequestContext

READ_COMMITTED = 1
# What Kafka's KafkaApis answers before reading (its "erroneous" partitions), after the rest.
ERRONEOUS = frozenset({ErrorCode.unknown_topic_id, ErrorCode.unknown_topic_or_partition,
                       ErrorCode.topic_authorization_failed})


@register(1, 4, 18)
async def handle_fetch(ctx: RequestContext, request) -> bytes:
    version = ctx.api_version
    replica_id, replica_epoch = _replica(request, version)
    session = new_context(ctx.services.fetch_sessions, request, version, replica_id,
                          lambda ft: _resolve_topic(ctx, ft, version))
    if session.error:
        return fast.encode_fetch_response(version, session.error, INVALID_SESSION_ID, [])
    rm = ctx.services.replica_manager
    isolation = getattr(request, "isolation_level", 0)
    max_wait = request.max_wait.total_seconds()
    deadline = time.monotonic() + max_wait
    by_id = version >= 13
    max_bytes = _max_bytes(ctx, request.max_bytes, replica_id)
    min_bytes = min(request.min_bytes, max_bytes)
    while True:
        entries, total, waitable, urgent, ends = _read_all(ctx, session, max_bytes, replica_id, isolation,
                                                           replica_epoch, by_id)
        remaining = deadline - time.monotonic()
        waiter = session.new_waiter()  # set when a partition of the session left unread changes
        if total >= min_bytes or urgent or remaining <= 0 or (not waitable and waiter is None):
            break
        woken = await rm.wait_for_data(waitable, remaining, waiter)
        if time.monotonic() >= deadline:
            if woken:  # else nothing it waited on changed: the first read still stands
                entries, total, waitable, urgent, ends = _read_all(ctx, session, max_bytes, replica_id,
                                                                   isolation, replica_epoch, by_id)
            break
    throttle = 0
    if replica_id < 0:
        throttle = ctx.throttle_time_ms(FETCH, total)
        if throttle:  # Kafka's getThrottledResponse: nothing is sent, nothing counted, no session made
            ctx.services.quotas[FETCH].unrecord(user_name(ctx.principal), ctx.header.client_id or "", total)
            session.forget_reads()
            return fast.encode_fetch_response(version, 0, session.session_id if isinstance(
                session, IncrementalFetchContext) else INVALID_SESSION_ID, [], throttle_time_ms=throttle)
    topics = session.respond(entries, ends)
    if session.error:
        return fast.encode_fetch_response(version, session.error, session.session_id, [])
    if total:
        ctx.services.metrics.bytes_out.labels("all").inc(total)
    return fast.encode_fetch_response(version, 0, session.session_id, topics,
                                      throttle_time_ms=ctx.request_throttle_ms())


def _max_bytes(ctx: RequestContext, requested: int, replica_id: int) -> int:
    """Kafka's bound on what one fetch reads: the broker's ``fetch.max.bytes`` and, for a
    consumer with a ``consumer_byte_rate``, what its quota allows at once (so a fetch larger
    than that is not read, throttled and thrown away again on every try)."""
    bound = min(requested, ctx.services.config["fetch.max.bytes"])
    if replica_id < 0:
        window = ctx.services.quotas[FETCH].max_value_in_window(user_name(ctx.principal),
                                                                ctx.header.client_id or "")
        bound = min(bound, int(min(window, 2**31 - 1)))
    return bound


def _resolve_topic(ctx: RequestContext, ft, version: int):
    metadata = ctx.services.metadata
    if version >= 13:
        topic = metadata.topic_by_id(ft.topic_id)
        return (topic.name if topic else None), ft.topic_id
    topic = metadata.topics.get(ft.topic)
    return ft.topic, (topic.uuid if topic else ZERO_UUID)


def _replica(request, version: int) -> tuple[int, int]:
    """The fetching replica's id and broker epoch (v15+, KIP-903; -1 before: not known)."""
    if version >= 15:
        return request.replica_state.replica_id, request.replica_state.replica_epoch
    return request.replica_id, -1


def _unauthorized_topics(ctx: RequestContext, wanted, replica_id: int):
    """Topics answered TOPIC_AUTHORIZATION_FAILED: a follower needs CLUSTER_ACTION on the
    cluster (else every topic fails), a consumer READ on each topic, as Kafka's KafkaApis."""
    if ctx.services.authorizer is None:
        return denied(ctx, AclOperation.READ, ResourceType.TOPIC, ())
    names = [name for name, _, _ in wanted]
    if replica_id >= 0:
        return set() if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else set(names)
    return denied(ctx, AclOperation.READ, ResourceType.TOPIC, names)


def _read_all(ctx: RequestContext, session: FetchContext, max_bytes: int, replica_id: int, isolation: int,
              replica_epoch: int = -1, by_id: bool = False):
    """Read what the fetch context wants now: (entries, bytes read, partitions to wait on,
    urgent, ends), where ``entries`` are the answers in the order they are sent (those Kafka
    finds erroneous before reading, an unknown or unauthorized topic, last), ``urgent`` counts
    what must be answered without long-polling (errors, and followers behind our high
    watermark) and ``ends`` (in a session) lists the partitions read to their end without
    records, which the session leaves unread until they change."""
    rm = ctx.services.replica_manager
    wanted = session.to_read()
    unauthorized = _unauthorized_topics(ctx, wanted, replica_id)
    track = session.tracks_reads
    remaining = max_bytes
    total = 0
    urgent = 0
    waitable = []
    ends = []
    entries = []
    erroneous = []
    for name, topic_id, fps in wanted:
        for fp in fps:
            try:
                if name is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, "unknown topic id")
                if name in unauthorized:
                    raise KafkaError(ErrorCode.topic_authorization_failed, None)
                part = rm.leader_partition(name, fp.partition, getattr(fp, "current_leader_epoch", -1))
                if by_id and part.topic_id != topic_id:
                    # A session's partition of a topic deleted and made again under its name.
                    raise KafkaError(ErrorCode.inconsistent_topic_id,
                                     f"topic {name} has topic id {part.topic_id}, not {topic_id}")
                plog = part.log
                if replica_id >= 0:
                    part.check_follower(replica_id, getattr(fp, "current_leader_epoch", -1))
                    diverging = _diverging_epoch(plog, fp)
                    if diverging is not None:
                        entries.append((name, topic_id, fp, (fp.partition, 0, plog.high_watermark,
                                        plog.last_stable_offset, plog.log_start_offset, None, b"",
                                        {"diverging_epoch": diverging})))
                        continue
                hw = plog.high_watermark
                lso = plog.last_stable_offset
                limit = plog.log_end_offset if replica_id >= 0 else (lso if isolation == READ_COMMITTED else hw)
                if fp.fetch_offset > plog.log_end_offset or fp.fetch_offset < plog.log_start_offset:
                    raise KafkaError(ErrorCode.offset_out_of_range,
                                     f"fetch offset {fp.fetch_offset} outside "
                                     f"[{plog.log_start_offset}, {plog.log_end_offset}]")
                if replica_id >= 0:
                    rm.on_follower_fetch(part, replica_id, fp.fetch_offset, getattr(fp, "log_start_offset", -1),
                                         replica_epoch)
                    hw = plog.high_watermark
                    if _follower_high_watermark(fp) < hw:
                        urgent += 1
                budget = min(fp.partition_max_bytes, remaining)
                data = b""
                if budget > 0 or total == 0:
                    data = plog.read(fp.fetch_offset, max(budget, 1), limit, min_one=total == 0)
                total += len(data)
                remaining -= len(data)
                aborted = _aborted_txns(plog, fp.fetch_offset, data) if isolation == READ_COMMITTED else None
                entries.append((name, topic_id, fp, (fp.partition, 0, hw, lso, plog.log_start_offset, aborted, data)))
                if not data:
                    waitable.append(part)
                    if track and fp.fetch_offset >= limit:
                        ends.append((name, topic_id, fp, part))
            except KafkaError as exc:
                urgent += 1
                ctx.services.metrics.errors.labels("Fetch", exc.code.name).inc()
                answer = (fp.partition, int(exc.code), -1, -1, -1, None, b"",
                          _current_leader(ctx, name, fp.partition, exc.code))
                (erroneous if exc.code in ERRONEOUS else entries).append((name, topic_id, fp, answer))
    return entries + erroneous, total, waitable, urgent, ends


def _follower_high_watermark(fp) -> int:
    """KIP-1166 (v18): the high watermark the follower knows; -1 when it knows none."""
    return getattr(fp, "high_watermark", UNSUPPORTED_HIGH_WATERMARK)


def _diverging_epoch(plog, fp) -> tuple[int, int] | None:
    """KIP-320: where the follower's last fetched epoch ends on this leader, if it diverges."""
    last_fetched = getattr(fp, "last_fetched_epoch", UNDEFINED_EPOCH)
    if last_fetched < 0:
        return None
    epoch, end_offset = plog.leader_epochs.end_offset_for(last_fetched, plog.log_end_offset)
    if epoch < last_fetched or end_offset < fp.fetch_offset:
        return epoch, end_offset
    return None


def _current_leader(ctx: RequestContext, name: str | None, index: int, code) -> dict | None:
    """KIP-951: tell the client where the partition is led now."""
    if code not in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch) or name is None:
        return None
    state = ctx.services.metadata.partition(name, index)
    return None if state is None else {"current_leader": (state.leader, state.leader_epoch)}


def _aborted_txns(plog, fetch_offset: int, data: bytes) -> list[tuple[int, int]]:
    """Aborted transactions overlapping the fetched range, for the consumer to filter."""
    if not data:
        return []
    upper = fetch_offset
    for _, header in rb.iter_batches(data):
        upper = header.next_offset
    return [(e.producer_id, e.first_offset) for e in plog.collect_aborted_txns(fetch_offset, upper)]
